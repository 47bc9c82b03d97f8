"""Deviceless: the sparse MLA kernels' opt-in seesaw variant (MLASparseConfig.seesaw,
MLASparseDecodeConfig.seesaw: attention_mla_sparse_seesaw_sm90 on common/mla_seesaw_sm90).

* config: key and name hold `seesaw` only where set (VARIANT_FIELDS), FP8 kv refused, sparse_variant;
* the mla-sparse-variants set holds its kernels (and gpu-tests); each compiles with no spills and no
  stack, wgmma not serialised, setmaxnreg honoured; SASS: 3 S sites of 36 m64n64k16 (no m64n32 of the
  exchange) and 6 P V sites of 4 m64n256k16, the one-way handshakes on named barriers 5 and 6;
* fa4-verify-pipelines accepts it and rejects every single ring-op mutation;
* the interpreter runs the prefill (-1 padding, indices >= s_kv, duplicates, NaN rows, odd and even tile
  counts, topk_length shorter and 0, sinks, two head blocks) and the decode (split and unsplit) by the FA
  rule, its errors in the default kernel's class; without mma1's rescale exp2(m_a - m_b) the prefill fails;
* FA4MLIR_MLA_SPARSE_VARIANT selects it (unknown: KnobError; FP8 kv: UnsupportedFeatureError); bench mla's
  mla_sparse and mla_sparse_decode rows carry the backend fa4mlir[seesaw].
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from fa4mlir import kernel_sets, kernels
from fa4mlir.attention import errors as E
from fa4mlir.attention import mla_sparse as ms
from fa4mlir.attention import mla_sparse_decode as sd
from fa4mlir.kernels import attention_mla_sparse_sm90_config as sc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import bits, check_sparse_art, lower_clean, sparse_options, sparse_problem, sparse_tensors
from tests._mla_helpers import info as _info

ENTRIES = kernel_sets.mla_sparse_variant_entries()     # (the gather warp's; the producer warpgroup's: the mla set's)


def test_config_key_name_and_refusals():
    for cfg in (sc.MLASparseConfig(), sc.MLASparseDecodeConfig()):
        assert "seesaw" not in cfg.key() and "seesaw" not in cfg.name()
        on = sc.sparse_variant(cfg, "seesaw")
        assert on.seesaw and on.key()["seesaw"] is True and on.name().endswith("_seesaw")
        assert sc.sparse_variant(on, "tile") == cfg
        assert sc.sparse_variant(cfg, "default") == on      # SPARSE_DEFAULT_RULE's step over bf16 (gather warp)
        pwg = replace(cfg, producer_warps=4)                # ... and with the producer warpgroup: its (prefill:
        overlap = isinstance(cfg, sc.MLASparseConfig)       # overlapped) pair fill
        assert sc.sparse_variant(pwg, "default") == replace(on, producer_warps=4, pair_fill=True, overlap_s=overlap)
    assert not sc.sparse_variant(sc.MLASparseDecodeConfig("f16"), "default").seesaw
    assert not sc.sparse_variant(sc.MLASparseConfig(kv_dtype="fp8"), "default").seesaw
    assert "seesaw" in sc.VARIANT_FIELDS and "seesaw" in sc.DECODE_VARIANT_FIELDS
    with pytest.raises(ConfigError):
        sc.MLASparseConfig(kv_dtype="fp8", seesaw=True).validate()
    with pytest.raises(ConfigError):    # FP8: the converter kernel, one split, only
        sc.MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True, split=True, seesaw=True).validate()
    with pytest.raises(ConfigError):
        sc.MLASparseDecodeConfig(kv_dtype="fp8", seesaw=True).validate()
    sc.MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True, seesaw=True).validate()
    with pytest.raises(ConfigError):
        sc.sparse_variant(sc.MLASparseConfig(), "seesaww")
    assert sc.MLASparseConfig(seesaw=True).smem_bytes() == sc.MLASparseConfig().smem_bytes()


def test_the_set_holds_the_seesaw_kernels():
    held = {c for _, c, *_ in kernel_sets.configs(["mla-sparse-variants"])}
    assert {c for _, c in ENTRIES} <= held and sc.MLASparseConfig() in held
    assert all(c.seesaw for _, c in ENTRIES) and len(ENTRIES) == 5
    assert set(ENTRIES) <= set(kernel_sets.gpu_tests())


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e[1].name())
def test_seesaw_compiles_clean(entry):
    from fa4mlir.sass import backward_branch_spans, disassemble, find_nvdisasm
    name, cfg = entry
    art = lower_clean(name, cfg)
    check_sparse_art(art, cfg)
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm not found: the SASS checks need it")
    ops, _ = backward_branch_spans(disassemble(art.cubin))
    kinds = Counter(re.match(r"HGMMA\.(\d+x\d+x\d+)", o).group(1) for o, _ in ops if o.startswith("HGMMA"))
    # S sites: mma0's pair loop and odd tile, mma1's pair loop (36 m64n64k16 each, all 64 keys); P V sites:
    # a and b of each pair loop and the odd tile, in each warpgroup (4 m64n256k16 each)
    assert kinds == {"64x64x16": 3 * 36, "64x256x16": 6 * 4}, kinds
    bars = Counter(f"{o} {rest}" for o, rest in ops if o.startswith("BAR"))
    # mma0 arrives on 5 (pair, odd tile) and syncs on 6 (pair); mma1 the reverse; the gather's own 4
    assert bars["BAR.ARV 0x5, 0x100"] == 2 and bars["BAR.SYNC.DEFER_BLOCKING 0x5, 0x100"] == 2, bars
    assert bars["BAR.ARV 0x6, 0x100"] == 1 and bars["BAR.SYNC.DEFER_BLOCKING 0x6, 0x100"] == 1, bars
    assert bars["BAR.SYNC.DEFER_BLOCKING 0x4, 0x20"] == (0 if cfg.fp8 else 2), bars     # (FP8: the converter)


OTHERS = [c for c in [sc.MLASparseConfig(topk_length=t, sinks=k, seesaw=True) for t in (False, True) for k in (False, True)]
          + [sc.MLASparseDecodeConfig(d, topk_length=t, split=p, seesaw=True) for d in ("bf16", "f16")
             for t in (False, True) for p in (False, True)]
          + [sc.MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True, topk_length=True, seesaw=True)]
          if c not in {c for _, c in ENTRIES}]


@pytest.mark.parametrize("cfg", OTHERS, ids=lambda c: c.name())
def test_every_16_bit_config_compiles_clean(cfg):
    """The configs the set does not hold (note "Work": the gather's placement is per config)."""
    check_sparse_art(lower_clean(cfg.key()["kernel"], cfg), cfg)


def test_verifier_accepts_it_and_rejects_every_single_ring_op_mutation():
    from fa4mlir.dialect.query import ops_named
    from fa4mlir.passes import verify_pipelines
    from fa4mlir.passes._util import PassError
    from tests._ring_mutations import MUTATIONS, RING_OPS, mutate_ring_op
    cfg = sc.MLASparseConfig(seesaw=True)
    good = kernels.module(sc.KERNEL).build(cfg)
    with good.module.context:
        verify_pipelines.run(good.module.operation)
        num_ops = len(ops_named(good.module.operation, *RING_OPS))
    rejected = 0
    for index in range(num_ops):
        for how in MUTATIONS:
            kir = mutate_ring_op(kernels.module(sc.KERNEL).build(cfg), index, how)
            if kir is None:
                continue
            with kir.module.context, pytest.raises(PassError):
                verify_pipelines.run(kir.module.operation)
            rejected += 1
    assert num_ops > 8 and rejected >= 2 * num_ops


# ---- the interpreter ------------------------------------------------------------------------------

def _run_prefill(torch, cfg, s_q, heads, topk, topk_length, sinks):
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_mla_sparse_sm90
    from fa4mlir.testing_mla import check_mla_sparse
    s_kv = 600
    q, kv, idx = sparse_problem(torch, s_q, heads, topk, s_kv)
    lens, sink_t = sparse_options(torch, heads, topk_length, sinks)
    cfg = replace(cfg, topk_length=lens is not None, sinks=sink_t is not None)
    scale = 576 ** -0.5
    tensors = sparse_tensors(torch, q, bits(torch, kv), idx, lens, sink_t)
    args = sc.launch_args(cfg, tensors, s_q=s_q, s_kv=s_kv, heads=heads, topk=topk, softmax_scale=scale,
                          q_strides=(heads * 576, 576), kv_stride=576, indices_stride=topk)
    interpret.load(attention_mla_sparse_sm90.build(cfg)).launch(sc.grid(s_q, heads), args)
    out_t = torch.from_numpy(tensors["out"].view(np.int16)).view(torch.bfloat16).float()
    errs = check_mla_sparse(q, kv, idx, out_t, torch.from_numpy(tensors["max_logits"]),
                            torch.from_numpy(tensors["lse"]), scale, sinks=sink_t, topk_length=lens)
    return errs, out_t, tensors


@pytest.mark.parametrize("s_q,heads,topk,topk_length,sinks", [
    (3, 64, 192, None, None),                                       # 3 tiles: a pair and the odd tile
    (3, 64, 256, (100, 256, 193), (0.5, float("-inf"), float("inf"))),   # 2, 4, 4 tiles; sinks
    (2, 128, 128, (0, 70), None),                                   # two head blocks; L = 0; 2 tiles
])
def test_seesaw_prefill_through_the_interpreter(s_q, heads, topk, topk_length, sinks):
    torch = pytest.importorskip("torch")
    errs, out_t, tensors = _run_prefill(torch, sc.MLASparseConfig(seesaw=True), s_q, heads, topk, topk_length, sinks)
    base, _, _ = _run_prefill(torch, sc.MLASparseConfig(), s_q, heads, topk, topk_length, sinks)
    print("seesaw", errs, "default", base)
    assert errs["out"] <= 1.5 * base["out"] + 1e-3 and errs["lse"] <= 1.5 * base["lse"] + 1e-5, (errs, base)
    if s_q > 2 and topk_length is None:     # token 2: every entry invalid
        assert (out_t[2] == 0).all() and np.isposinf(tensors["lse"][2]).all()
    if sinks is not None:
        assert (out_t[:2, 2] == 0).all() and np.isfinite(tensors["lse"][:2, 2]).all()


def test_without_mma1s_rescale_the_prefill_fails(monkeypatch):
    """The interpreted check can fail: mma1's O_1 rescale exp2(m_a - m_b) dropped (scaled by 1)."""
    torch = pytest.importorskip("torch")
    from fa4mlir.kernels.common import mla_seesaw_sm90 as seesaw
    real = seesaw.scaled
    calls = {"n": 0}

    def drop_the_rescale(o, factor):     # built: mma0 (pair 2 calls, odd tile 1), mma1 (_take_a's, then this)
        calls["n"] += 1
        return o if calls["n"] == 5 else real(o, factor)
    monkeypatch.setattr(seesaw, "scaled", drop_the_rescale)
    with pytest.raises(AssertionError):
        _run_prefill(torch, sc.MLASparseConfig(seesaw=True), 2, 64, 256, None, None)
    assert calls["n"] >= 5


def test_seesaw_decode_through_the_interpreter():
    torch = pytest.importorskip("torch")
    from tests._mla_helpers import sparse_decode_case
    for batch, seqlen_q, heads, topk, page, splits, lengths in ((3, 1, 16, 192, 16, 1, None),
                                                                 (2, 2, 64, 192, 61, 2, (150, 70))):
        problem, run = sparse_decode_case(torch, batch, seqlen_q, heads, topk, page, splits, lengths)
        run(sc.sparse_variant(problem.config(splits > 1), "seesaw"))


@pytest.mark.parametrize("case", [(3, 1, 16, 192, 16, 1, None, False), (2, 2, 64, 320, 64, 1, (300, 0), True)])
def test_seesaw_fp8_converter_through_the_interpreter(case):
    """The FP8 decode's converter kernel with the seesaw tile step (one split): -1 padding, invalid entries,
    duplicates, NaN rows, topk_length 0, padded pages; by the FA rule over the dequantized rows."""
    from tests.test_mla_sparse_decode_fp8 import run_interpreted
    run_interpreted(*case, converter=True, seesaw=True)


# ---- selection ------------------------------------------------------------------------------------

def _prefill_problem(**kw):
    args = dict(q=_info((4, 128, 576)), kv=_info((1000, 1, 576)), indices=_info((4, 1, 2048), "i32"), sm_scale=None)
    args.update(kw)
    return ms.check_sparse_inputs(**args)


def test_the_knob_selects_the_seesaw(monkeypatch):
    monkeypatch.delenv(ms.VARIANT_ENV, raising=False)
    monkeypatch.setenv(sc.PRODUCER_ENV, "warp")        # the variant knob alone, with the gather warp
    assert ms.requested_variant() == "default" and _prefill_problem().config.seesaw     # the rule's (bf16)
    monkeypatch.setenv(ms.VARIANT_ENV, "tile")
    assert not replace(_prefill_problem(), variant=ms.requested_variant()).config.seesaw
    monkeypatch.setenv(ms.VARIANT_ENV, "seesaw")
    problem = replace(_prefill_problem(), variant=ms.requested_variant())
    assert problem.config == sc.MLASparseConfig(seesaw=True)
    decode = sd.check_sparse_decode_inputs(_info((4, 2, 128, 576)), _info((100, 64, 1, 576)),
                                           _info((4, 2, 2048), "i32"), 512, _info((1, 8), "i32"), _info((5,), "i32"))
    assert decode.config(False) == sc.MLASparseDecodeConfig(seesaw=True)
    with pytest.raises(E.UnsupportedFeatureError):
        ms.check_variant("seesaw", True)
    fp8 = dict(q=_info((4, 2, 128, 576)), k_cache=_info((100, 64, 1, 656), "e4m3"), indices=_info((4, 2, 2048), "i32"),
               head_dim_v=512, num_splits=_info((5,), "i32"), is_fp8_kvcache=True)
    one = sd.check_sparse_decode_inputs(metadata=_info((1, 8), "i32"), **fp8)
    assert one.config(False) == sc.MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True, seesaw=True)
    with pytest.raises(E.UnsupportedFeatureError):      # FP8 split: not built
        sd.check_sparse_decode_inputs(metadata=_info((3, 8), "i32"), **fp8)
    monkeypatch.setenv(sd.VARIANT_ENV, "gather")
    with pytest.raises(E.UnsupportedFeatureError):      # FP8 gather kernel: not built
        sd.check_sparse_decode_inputs(metadata=_info((1, 8), "i32"), **fp8)
    monkeypatch.delenv(sd.VARIANT_ENV)
    monkeypatch.setenv(ms.VARIANT_ENV, "seesaww")
    with pytest.raises(E.KnobError):
        ms.requested_variant()


def test_bench_rows_carry_the_seesaw_backend(monkeypatch):
    from fa4mlir.bench import mla_bench
    seen = {}

    def run():
        seen["during"] = __import__("os").environ.get(ms.VARIANT_ENV)
        return "done"
    monkeypatch.delenv(ms.VARIANT_ENV, raising=False)
    assert mla_bench.with_sparse_variant("seesaw", run)() == "done"
    assert seen["during"] == "seesaw" and __import__("os").environ.get(ms.VARIANT_ENV) is None
    import inspect
    src = inspect.getsource(mla_bench.mla_sparse_rows) + inspect.getsource(mla_bench.mla_sparse_decode_rows)
    assert src.count('call["fa4mlir[seesaw]"]') == 1      # mla_sparse_decode_fp8's converter kernel
    assert src.count("sparse_ab_calls(") == 2             # the 16-bit rows' tile / pwg / seesaw backends
    calls = mla_bench.sparse_ab_calls(lambda: (lambda: (__import__("os").environ.get(ms.VARIANT_ENV),
                                                        __import__("os").environ.get(sc.PRODUCER_ENV))))
    assert {k: v()() for k, v in calls.items()} == {"fa4mlir[tile]": ("tile", "warp"),
                                                   "fa4mlir[pwg]": ("tile", "warpgroup"),
                                                   "fa4mlir[seesaw]": ("seesaw", "warp"),
                                                   "fa4mlir[seesaw_pwg]": ("seesaw", "warpgroup"),
                                                   "fa4mlir[seesaw_pairfill]": ("seesaw_pairfill", "warpgroup"),
                                                   "fa4mlir[seesaw_overlap]": ("seesaw_overlap", "warpgroup")}
