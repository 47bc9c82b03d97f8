"""Deviceless: the MLA decode's seesaw schedule (MLADecodeConfig.seesaw, attention_mla_decode_seesaw_sm90;
DEFAULT_RULE's for more than 32 packed rows over bf16). Its numerics are interpreted by the FA rule in
tests/test_mla_decode.py (test_mla_decode_through_the_interpreter, the "seesaw" cases); here:

* the variant's kernels (kernel_sets' mla set) compile with no spills, wgmma not
  serialised, the pipeline verifier's protocol (lowering runs fa4-verify-pipelines), the SMEM plan
  its config states; in SASS, S is m64n64k16 wgmmas (36 per tile: no m64n32 of the exchange), P V
  m64n256k16, and the warpgroups meet through the one-way named barriers at the sites the schedule
  has;
* selection: FA4MLIR_MLA_DECODE_VARIANT=seesaw makes flash_mla_with_kvcache's config the seesaw one,
  an unknown name is a ConfigError, the FP8 cache ignores the knob; the default kernel's key and
  name do not mention the field;
* the config refuses what the variant is not built for (f16, the FP8 cache, swap AB's tiles).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

import pytest

from fa4mlir import kernel_sets
from fa4mlir.attention import mla
from fa4mlir.attention.errors import UnsupportedFeatureError
from fa4mlir.kernels import attention_mla_decode_sm90_config as mc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import info as _info
from tests._mla_helpers import lower_clean

ENTRIES = [e for e in kernel_sets.mla() if e[0] == mc.KERNEL and e[1].seesaw]   # DEFAULT_RULE's, bf16 > 32 rows


def test_the_set_holds_the_seesaw_kernels():
    assert [c for _, c in ENTRIES] == [mc.default_config("bf16", page, unsplit=u, seesaw=True) for page in (64, 16)
                                       for u in (False, True)]
    assert set(ENTRIES) <= set(kernel_sets.gpu_tests())


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e[1].name())
def test_seesaw_compiles_clean(entry):
    from fa4mlir.sass import backward_branch_spans, disassemble, find_nvdisasm
    name, cfg = entry
    art = lower_clean(name, cfg)
    assert cfg.smem_bytes() == art.smem_bytes <= mc.SMEM_LIMIT, (art.smem_bytes, cfg.smem_bytes())
    assert art.block == (384, 1, 1) and [(p.name, p.kind) for p in art.params] == list(cfg.params)
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm not found: the SASS checks need it")
    ops, _ = backward_branch_spans(disassemble(art.cubin))
    kinds = Counter(re.match(r"HGMMA\.(\d+x\d+x\d+)", o).group(1) for o, _ in ops if o.startswith("HGMMA"))
    # S sites: mma0's three loops (unmasked pairs, masked pairs, the odd tile), mma1's two pair loops, 36
    # m64n64k16 each (all 64 keys of a tile: no m64n32 of the exchange); P V sites: five per warpgroup, 4
    # m64n256k16 each (mma0: a and b of both pair loops and the odd tile; mma1 likewise)
    assert kinds == {"64x64x16": 5 * 36, "64x256x16": 10 * 4}, kinds
    bars = Counter(f"{o} {rest}" for o, rest in ops if o.startswith("BAR"))
    # the one-way handshakes: mma0 arrives on BAR_PA (4) at 3 sites and syncs on BAR_PB (5) at 2; mma1
    # the reverse (3 syncs on 4, 2 arrivals on 5)
    assert bars["BAR.ARV 0x4, 0x100"] == 3 and bars["BAR.ARV 0x5, 0x100"] == 2, bars
    assert bars["BAR.SYNC.DEFER_BLOCKING 0x4, 0x100"] == 3 and bars["BAR.SYNC.DEFER_BLOCKING 0x5, 0x100"] == 2, bars


def test_the_default_key_and_name_hold_no_seesaw():
    assert "seesaw" not in mc.MLADecodeConfig().key() and "seesaw" not in mc.MLADecodeConfig().name()
    cfg = mc.default_config("bf16", 64, seesaw=True)
    assert cfg.key()["seesaw"] is True and cfg.name().endswith("_seesaw")
    assert cfg.smem_bytes() == 64 * 576 * 2 * 3 + 9 * 2 * 16 + 16 + mc.SEESAW_X_BYTES     # nine chunk rings


@pytest.mark.parametrize("change", [dict(dtype="f16"), dict(fp8=True), dict(swap_ab=16)])
def test_the_config_refuses_what_it_is_not_built_for(change):
    with pytest.raises(ConfigError):
        replace(mc.default_config("bf16", 64, seesaw=True), **change).validate()


def _problem(fp8=False):
    dtype, width = ("bf16", 656) if fp8 else ("bf16", 576)
    return mla.check_mla_inputs(_info((2, 1, 128, 576)), _info((8, 64, 1, width), "u8" if fp8 else dtype),
                                _info((2, 4), "i32"), _info((2,), "i32"), 512, _info((1, 8), "i32"),
                                _info((3,), "i32"), is_fp8_kvcache=fp8)


def test_the_knob_picks_the_variant(monkeypatch):
    monkeypatch.delenv(mc.VARIANT_ENV, raising=False)
    assert mla.configs_for(_problem())[0].seesaw          # DEFAULT_RULE: 128 rows over bf16
    monkeypatch.setenv(mc.VARIANT_ENV, mc.M64_VARIANT)
    assert not mla.configs_for(_problem())[0].seesaw
    monkeypatch.setenv(mc.VARIANT_ENV, "seesaw")
    cfg, combine = mla.configs_for(_problem())
    assert cfg == mc.default_config("bf16", 64, unsplit=True, seesaw=True) and combine is None
    assert mc.VARIANT_ENV in mla.CallCache.ENV
    monkeypatch.setenv(mc.VARIANT_ENV, "seesaww")
    with pytest.raises(UnsupportedFeatureError, match="not a decode variant"):
        _problem()
    monkeypatch.setenv(mc.VARIANT_ENV, "seesaw")
    with pytest.raises(UnsupportedFeatureError, match="seesaw: bf16"):
        _problem(fp8=True)
