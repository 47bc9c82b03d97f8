"""Deviceless: the crossover's st.async hand-off (FP8 variant "crossover_stasync", FP8_DECODE_CROSSOVER_RULE's:
MLASparseDecodeConfig.crossover_stasync on crossover_lean; attention_mla_sparse_crossover_sm90, note "st.async
hand-off").

* the dialect: fa4.peer_store_async lowers to st.async.shared::cluster.mbarrier::complete_tx::bytes (v4.b32 for the
  tile's 16-byte units, b32 for the bias words) onto the peer's full[stage] (mapa); each converter thread's
  arrive expects its share of the peer's bytes; no release.cluster arrive and no fence.proxy.async.shared::cluster
  are left (lit: lit_tests/passes/lower-pipelines.mlir); the PTX is .version 8.1 (st.async's);
* the config: name, key (the other kernels' keys and names unchanged), refused without crossover_lean, as a
  non-bool; the variant sets its fields and is found back; the host refuses it at 64 heads; bench mla's backend
  fa4mlir[crossover_stasync] exists; its four kernels are in the mla, gpu-tests and bench sets;
* each compiles with no spills and no stack, wgmma not serialised, setmaxnreg 200 / 104, no local memory; its
  SASS has no MEMBAR.ALL.GPU in the converter's loop (crossover_lean's: 2 a tile there), 18 STAS.128 + 8 STAS;
* fa4-verify-pipelines accepts it and rejects the expect_tx a byte short a thread, or missing;
* the interpreter runs it (-1 padding, duplicates, NaN rows; a split with topk_length shorter than topk and 0):
  run_interpreted's checks by the FA rule against the float64 reference over the cache dequantized as the kernel
  does, and the crossover's out and lse bits; with the expect_tx a byte short a thread (the verifier skipped) it
  faults.
"""
from __future__ import annotations

import dataclasses

import pytest

from fa4mlir import kernel_sets, kernels
from fa4mlir.kernels import attention_mla_sparse_crossover_sm90 as xo_mod
from fa4mlir.kernels import attention_mla_sparse_sm90_config as dc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import lower_clean
from tests.test_mla_sparse_decode_fp8 import check_knob_at_128_heads, check_same_bits, check_variant_entries, converter_sass
from tests.test_mla_sparse_decode_fp8 import fp8_ptx as _ptx
from tests.test_mla_sparse_decode_fp8 import run_interpreted

STASYNC_ENTRIES = [e for e in kernel_sets.mla() if e[0] == dc.DECODE_KERNEL and e[1].crossover_stasync]


def _cfg(**kw) -> dc.MLASparseDecodeConfig:
    return dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", fp8_converter=True, crossover=True, crossover_lean=True,
                                    crossover_stasync=True, **kw)


def test_the_hand_off_lowers_to_st_async():
    ptx = _ptx(_cfg())
    st = "st.async.shared::cluster.mbarrier::complete_tx::bytes"
    assert ptx.count(f"{st}.v4.b32") == 18 and ptx.count(f"{st}.b32") == 8     # 8 rows x 2 + 2 rope; 8 bias words
    assert "mbarrier.arrive.release.cluster" not in ptx and "fence.proxy.async.shared::cluster" not in ptx
    assert ptx.count("mbarrier.arrive.expect_tx") == 1 and ".version 8.1" in ptx
    assert xo_mod.remote_bytes() == 16 * 18 * 128 + 4 * 8 * 4 == 36992 and xo_mod.remote_share() == 289


def test_config_rules():
    st = _cfg().validate()
    lean = dataclasses.replace(st, crossover_stasync=False)
    assert st.name() == "attention_mla_sparse_decode_sm90_bf16_fp8_conv_xo_lean_stasync"
    assert st.key()["crossover_stasync"] is True and "crossover_stasync" not in lean.key() and "_stasync" not in lean.name()
    assert (st.stages, st.regs, st.params) == (lean.stages, lean.regs, lean.params)
    _cfg(split=True, topk_length=True).validate()
    base = dict(kv_dtype="fp8", fp8_converter=True, crossover=True)
    for bad in (dict(base, crossover_stasync=True), dict(base, crossover_lean=True, crossover_stasync=1)):
        with pytest.raises(ConfigError):
            dc.MLASparseDecodeConfig("bf16", **bad).validate()


def test_variant_sets_its_fields_and_the_host_refuses_it_at_64_heads(monkeypatch):
    import inspect

    from fa4mlir.bench import mla_bench
    got = dc.fp8_decode_variant(dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", split=True), dc.STASYNC_VARIANT)
    assert got == _cfg(split=True) and dc.fp8_decode_variant_name(got) == dc.STASYNC_VARIANT
    assert dc.fp8_decode_variant(got, dc.LEAN_VARIANT).crossover_stasync is False
    check_knob_at_128_heads(monkeypatch, dc.STASYNC_VARIANT, _cfg())
    src = inspect.getsource(mla_bench.mla_sparse_decode_rows)
    assert src.count('call["fa4mlir[crossover_stasync]"] = lambda: with_fp8_variant("crossover_stasync"') == 1


def test_kernels_are_in_the_bundle_sets():
    check_variant_entries(STASYNC_ENTRIES, dc.STASYNC_VARIANT)


@pytest.mark.parametrize("entry", STASYNC_ENTRIES, ids=lambda e: e[1].name())
def test_compiles_clean(entry):
    from tests._sm100_helpers import sass_count, sass_of
    name, cfg = entry
    sass = converter_sass(name, cfg)    # no spills, no stack, wgmma not serialised, 200 / 104, no LDL / STL, HGMMAs
    assert sass_count(sass, "ST.E.128") == 0            # the peer's units go by st.async
    lean = sass_of(lower_clean(name, dataclasses.replace(cfg, crossover_stasync=False)))
    # crossover_lean: 2 a tile in the converter (its fence.proxy.async.shared::cluster, its release.cluster arrive)
    # and one each at the cluster syncs after the init and before the exit; crossover_stasync: those two only
    assert (sass_count(sass, "MEMBAR.ALL.GPU"), sass_count(lean, "MEMBAR.ALL.GPU")) == (2, 4)
    assert (sass_count(sass, "STAS.128"), sass_count(sass, "STAS")) == (18, 18 + 8)


def _build_mutated(monkeypatch, tx=None):
    """The unsplit kernel's IR with each converter thread's expect_tx `tx` (None: missing, a plain arrive)."""
    monkeypatch.setattr(xo_mod, "remote_share", lambda: 0 if tx is None else tx)
    return kernels.module(dc.DECODE_KERNEL).build(_cfg())


def test_verifier_accepts_it_and_rejects_a_wrong_or_missing_expect_tx(monkeypatch):
    from fa4mlir.passes import verify_pipelines
    from fa4mlir.passes._util import PassError
    for split in (False, True):
        kir = kernels.module(dc.DECODE_KERNEL).build(_cfg(split=split))
        with kir.module.context:
            verify_pipelines.run(kir.module.operation)
    for tx in (xo_mod.remote_share() - 1, None):
        kir = _build_mutated(monkeypatch, tx)
        with kir.module.context, pytest.raises(PassError, match="peer_store_async"):
            verify_pipelines.run(kir.module.operation)


@pytest.mark.parametrize("case", [
    (1, 1, 128, 128, 64, 1, None, True),        # one cluster: -1 padding, duplicates, NaN rows
    (2, 2, 128, 192, 61, 2, (150, 0), True),    # split 2 over 3 tiles; topk_length < topk, and 0
])
def test_through_the_interpreter_gives_the_crossovers_bits(case):
    check_same_bits(case, dict(stasync=True), dict(crossover=True))       # checked by the FA rule inside


def test_interpreter_faults_on_a_short_expect_tx(monkeypatch):
    """Mutation: each converter thread's expect_tx a byte short, the verifier skipped (fa4.unverified): the
    consumers' wait completes before the peer's last st.asyncs landed, or never; the interpreter reports it."""
    pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.dialect.query import mark_unverified
    from fa4mlir.kernels import attention_mla_sparse_sm90 as sm90
    real = sm90.build

    def unverified(cfg):
        kir = real(cfg)
        with kir.module.context:
            mark_unverified(kir.module.operation)
        return kir
    monkeypatch.setattr(xo_mod, "remote_share", lambda: 289 - 1)
    monkeypatch.setattr(sm90, "build", unverified)
    with pytest.raises(interpret.Fault):        # a RaceFault: the consumers read bias words not yet handed over
        run_interpreted(1, 1, 128, 128, 64, 1, None, True, stasync=True)
