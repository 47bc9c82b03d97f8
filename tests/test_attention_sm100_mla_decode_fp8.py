"""The sm_100a absorbed MLA decode over FlashMLA's FP8 latent cache (attention_sm100_mla_decode, note "MLA
FP8"; kv_dtype "e4m3", kv_scale "row": 656-byte rows of 512 e4m3 bytes, four float32 scales, 64 bf16 rope
columns), dequantized to bf16 in SMEM by warps 4-7 before the tcgen05 MMAs. Proven without a Blackwell GPU:

* config: the SMEM plan (the 64 x 576 Q tile, one bf16 K stage, one 41 KiB raw stage), the launch contract
  (k an int32 TMA over the rows, no k_scale / v_scale), what is refused;
* compiled through nvJitLink LTO: 0 spills, no stack, the convert warpgroup at 160 registers;
* the pipeline verifier accepts both kernels and names k8 when its commit is dropped;
* interpreted on small shapes (NaN bytes and scales in every row no sequence owns) by the FA rule against
  a float64 reference over the cache dequantized exactly as the kernel does (testing_mla.dequantize_fp8_cache,
  FlashMLA's dequantize_k_cache): 16 heads x 2 MTP tokens causal, 128 heads split-KV merged by the
  combine's host twin, 32 heads over 16-row pages (four boxes a tile). Never run on a Blackwell GPU.
"""
from __future__ import annotations

import pytest

from _sm100_helpers import check_resources, check_verifier_rejects_a_dropped_commit, compiled, role_budgets, sass_of
from fa4mlir.kernels.attention_sm100_config import SMEM_CARVEOUT, FA4Config
from fa4mlir.kernels.common.mla_sm100 import decode_fp8_configs

CONFIGS = decode_fp8_configs(FA4Config)
KEY = "test-sm100-mla-decode-fp8"


def _id(c: FA4Config) -> str:
    return f"h{c.num_q_heads}{'-causal' if c.causal else ''}{'-split' if c.split_kv else ''}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_plan(cfg):
    assert cfg.mla_fp8 and cfg.supported() == (True, "") and cfg.validate() is cfg
    sm = cfg.smem_plan()
    assert sm["stages"] == 1 and sm["k_tile"] == 64 * 576 * 2 and sm["k8_tile"] == 64 * 656 and sm["v8"] == 0
    assert sm["total"] <= SMEM_CARVEOUT < sm["total"] + sm["k_tile"] + sm["k8_tile"]     # two of each do not fit
    names = [n for n, _ in cfg.launch_params]
    assert names[:2] == ["q", "k"] and "v" not in names and "k_scale" not in names
    assert cfg.name().endswith("_e4m3_row_split" if cfg.split_kv else "_e4m3_row")
    assert cfg.box_rows == cfg.page_size and cfg.bn // cfg.box_rows in (1, 4)


@pytest.mark.parametrize("kw,reason", [
    (dict(kv_scale="tensor"), "e4m3 K/V scaled per tensor"),
    (dict(dtype="f16"), "built for bf16 q"),
    (dict(page_size=0), "over a paged cache"),
    (dict(stages=2), "> the sm_100a carve-out"),     # two stages of each: 298 KiB
])
def test_refusals_say_why(kw, reason):
    ok, why = FA4Config(**{**CONFIGS[0].__dict__, **kw}).supported()
    assert not ok and reason in why, why


def test_row_scales_are_mla_only():
    ok, why = FA4Config(head_dim=128, head_dim_v=128, num_q_tiles=1, fuse_gqa=True, page_size=64, kv_dtype="e4m3",
                        kv_scale="row").supported()
    assert not ok and "kv_scale='row': one of ('tensor', 'kv_head', 'block')" in why, why


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_compiles_with_zero_spills(cfg):
    art, seconds = compiled(cfg, KEY)
    check_resources(cfg, art, seconds)
    assert role_budgets(sass_of(art)) == {192, 160, 80}, "softmax 192, convert 160, correction / MMA / load 80"
    (k,) = [p for p in art.params if p.name == "k"]
    assert (k.tma.dtype, k.tma.box, k.tma.swizzle) == ("i32", (164, 1, cfg.box_rows, 1), "none")


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_verifier_accepts(cfg):
    from _sm100_helpers import verify_pipelines
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    verify_pipelines(k100.build(cfg).module)


def test_verifier_rejects_a_dropped_commit():
    check_verifier_rejects_a_dropped_commit(CONFIGS[0], "k")      # the MMA's release of the bf16 stage


@pytest.mark.parametrize("op", ["fa4.consumer_release", "fa4.producer_commit"])
def test_verifier_rejects_the_converts_dropped_handover(op):
    """The convert warpgroup's release of k8 or commit of k erased: the verifier names the pipe."""
    from _sm100_helpers import verify_pipelines
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.passes._util import PassError, attr, ops_named
    pipe = "k8" if op == "fa4.consumer_release" else "k"
    kir = k100.build(CONFIGS[0])
    ops = [o for o in ops_named(kir.module.operation, op) if attr(o, "pipe") == pipe]
    assert len(ops) == 1
    ops[0].erase()
    with pytest.raises(PassError, match=f"'{pipe}'"):
        verify_pipelines(kir.module)


@pytest.mark.parametrize("index,lengths,seqlen_q,num_splits", [
    (0, [63, 64, 150, 0], 2, 1),      # 16 heads x 2 MTP tokens causal; a page boundary, 3 blocks, no key
    (1, [200, 40], 1, 2),             # 128 heads, two CTAs a token; 4 blocks over 2 splits, an empty split
    (2, [17, 100], 1, 1),             # page 16: four boxes a tile at 16 x 656-byte steps; a length inside a page
], ids=["h16-causal", "h128-2splits", "h32-page16"])
def test_interpreted_by_the_fa_rule(index, lengths, seqlen_q, num_splits):
    from test_attention_sm100_mla_decode import _interpret
    _interpret(CONFIGS[index], lengths, seqlen_q, num_splits=num_splits)


@pytest.mark.parametrize("mutation", ["scale_dropped", "second_share_skipped"])
def test_interpreted_check_catches_a_broken_dequant(monkeypatch, mutation):
    """The numerics above see the conversion: the scales ignored (x 1) fail the FA rule; the sm_90a split's
    second share (latent columns 256-511, rope rows 32-63) left unwritten is a read of SMEM nothing wrote."""
    pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.dsl import const
    from fa4mlir.kernels import attention_sm100_mla_decode as mla_dec
    from fa4mlir.kernels.common import mla_fp8
    from test_attention_sm100_mla_decode import _interpret
    if mutation == "scale_dropped":
        real = mla_fp8._dequant
        monkeypatch.setattr(mla_fp8, "_dequant", lambda raw, scale: real(raw, const(1.0, "f32")))
        expected, match = AssertionError, "'bound'"        # the FA tally's message
    else:
        real = mla_fp8.emit_dequant
        monkeypatch.setattr(mla_dec.mla_fp8, "emit_dequant",
                            lambda kb, t, w, *a, **k: real(kb, t, w, *a, **k) if w == 0 else None)
        expected, match = interpret.RaceFault, "tcgen05.mma B .SMEM. by the tensor core reads .* which no write reached"
    with pytest.raises(expected, match=match):
        _interpret(CONFIGS[0], [40], 1)
