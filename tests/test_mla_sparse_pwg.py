"""Deviceless: the sparse MLA kernel's producer-warpgroup variant (producer_warps=4; attention_mla_sparse_sm90,
note "Producer warpgroup"): warpgroup 2 whole gathers the rows (8 threads a row) into ring stages of two
halves with their own barriers, so S starts on K's columns 0..255 while 256..575 land.

* every kernel of the variant in the kernel sets compiles with no spills, wgmma not serialised, within the
  SMEM its config states and the launch contract it states;
* the interpreter runs the prefill by the FA rule against the float64 reference (the cases of
  test_mla_sparse.py: -1 padding, >= s_kv, duplicates, topk_length, sinks, two head blocks) and the sparse
  decode (split and unsplit);
* the config refuses producer_warps other than 1 and 4, and 4 over the FP8 cache; the default kernels'
  keys and names do not change.
"""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir import kernel_sets
from fa4mlir.kernels import attention_mla_sparse_sm90_config as sc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import bits as _bits
from tests._mla_helpers import check_sparse_art, check_sparse_out, lower_clean, sparse_options, sparse_problem, sparse_tensors

ENTRIES = [e for e in kernel_sets.mla() if getattr(e[1], "producer_warps", 1) == 4]


def test_the_variant_is_in_the_mla_set():
    """SPARSE_DEFAULT_RULE's bf16 kernels (overlapped pair-fill seesaw, producer warpgroup), the pair fill (the rule
    before, fa4mlir[seesaw_pairfill]), the seesaw in tile order (the rule before that, bench mla's fa4mlir[seesaw_pwg]) and the producer warpgroup on the tile step (fa4mlir[pwg]), every
    topk_length / sinks (prefill) and topk_length / split (decode) case."""
    steps = ((False, False, False), (True, False, False), (True, True, False), (True, True, True))  # (seesaw, pair_fill, overlap_s)
    prefill = {cfg for name, cfg in ENTRIES if name == sc.KERNEL}
    assert prefill == {sc.MLASparseConfig(topk_length=t, sinks=s, producer_warps=4, seesaw=w, pair_fill=f, overlap_s=o)
                       for t in (False, True) for s in (False, True) for w, f, o in steps}
    decode = {cfg for name, cfg in ENTRIES if name == sc.DECODE_KERNEL}
    assert decode == {sc.MLASparseDecodeConfig(topk_length=t, split=s, producer_warps=4, seesaw=w, pair_fill=f,
                                               overlap_s=o)
                      for t in (False, True) for s in (False, True) for w, f, o in steps}


# compiled here but the overlapped pair fill's (test_mla_sparse_overlap.py compiles four of them; the bundle the rest)
@pytest.mark.parametrize("entry", [e for e in ENTRIES if not e[1].overlap_s], ids=lambda e: e[1].name())
def test_variant_compiles_clean(entry):
    name, cfg = entry
    check_sparse_art(lower_clean(name, cfg), cfg)


def test_config():
    assert sc.MLASparseConfig(producer_warps=4).regs == (216, 72)
    assert sc.register_pool_fits(384, 216, 72, 2) == (True, 64512, 64512)
    assert sc.MLASparseConfig(producer_warps=4).name() == "attention_mla_sparse_sm90_bf16_pwg"
    assert "producer_warps" not in sc.MLASparseConfig().key() and "producer_warps" not in sc.MLASparseDecodeConfig().key()
    assert sc.MLASparseConfig(producer_warps=4).key()["producer_warps"] == 4
    for bad in (sc.MLASparseConfig(producer_warps=2), sc.MLASparseConfig(producer_warps=4, kv_dtype="fp8"),
                sc.MLASparseDecodeConfig(producer_warps=4, kv_dtype="fp8", fp8_converter=True),
                sc.MLASparseDecodeConfig(producer_warps=8)):
        with pytest.raises(ConfigError, match="producer_warps"):
            bad.validate()


@pytest.mark.parametrize("s_q,heads,topk,topk_length,sinks", [
    # (the tile step's producer warpgroup, superseded by the seesaw's: two cases)
    (2, 128, 128, (0, 128), None),                                  # two head blocks; a token with L = 0
    (3, 64, 256, (100, 64, 256), (0.5, float("-inf"), float("inf"))),  # 4 tiles (the ring wraps); sinks: the
                                                                       # first three heads pinned
])
def test_prefill_through_the_interpreter(s_q, heads, topk, topk_length, sinks):
    torch = pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_mla_sparse_sm90
    s_kv = 600
    q, kv, idx = sparse_problem(torch, s_q, heads, topk, s_kv)
    lens, sink_t = sparse_options(torch, heads, topk_length, sinks)
    cfg = sc.MLASparseConfig(topk_length=lens is not None, sinks=sink_t is not None, producer_warps=4)
    scale = 576 ** -0.5
    tensors = sparse_tensors(torch, q, _bits(torch, kv), idx, lens, sink_t)
    lse, max_logits = tensors["lse"], tensors["max_logits"]
    args = sc.launch_args(cfg, tensors, s_q=s_q, s_kv=s_kv, heads=heads, topk=topk, softmax_scale=scale,
                          q_strides=(heads * 576, 576), kv_stride=576, indices_stride=topk)
    interpret.load(attention_mla_sparse_sm90.build(cfg)).launch(sc.grid(s_q, heads), args)
    out_t = check_sparse_out(torch, q, kv, idx, tensors, scale, sink_t, lens)
    if s_q > 2:         # token 2: every entry invalid
        assert (out_t[2] == 0).all() and np.isposinf(lse[2]).all() and np.isneginf(max_logits[2]).all()
    if sinks is not None:   # a +inf sink zeroes its head's out; lse, max_logits stay the scores'
        assert (out_t[:2, 2] == 0).all() and np.isfinite(lse[:2, 2]).all()


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,page,splits,dtype,topk_length", [
    (2, 2, 64, 192, 61, 2, "bf16", (150, 70)),    # split 2 over 3 tiles; topk_length per batch
])
def test_decode_through_the_interpreter(batch, seqlen_q, heads, topk, page, splits, dtype, topk_length):
    """test_mla_sparse_decode.py's cases, the producer-warpgroup kernel."""
    from dataclasses import replace

    from tests._mla_helpers import sparse_decode_case
    torch = pytest.importorskip("torch")
    problem, run = sparse_decode_case(torch, batch, seqlen_q, heads, topk, page, splits, topk_length, dtype)
    cfg = replace(problem.config(splits > 1), producer_warps=4)
    assert cfg.producer_warps == 4 and (splits > 1) == cfg.split
    run(cfg)


# ---- the host knob (FA4MLIR_MLA_SPARSE_PRODUCER) and bench mla's backend ---------------------------

def _prefill_problem(kv_dtype="bf16"):
    """The problem as _prepare makes it: the variant knob (FA4MLIR_MLA_SPARSE_VARIANT) read into it."""
    from dataclasses import replace

    from fa4mlir.attention import mla_sparse as ms
    from tests._mla_helpers import info as _info
    width = 656 if kv_dtype == "u8" else 576
    problem = ms.check_sparse_inputs(_info((4, 128, 576)), _info((1000, 1, width), kv_dtype), _info((4, 1, 2048), "i32"),
                                     None, 512)
    return replace(problem, variant=ms.requested_variant())


def test_knob_selects_the_variant(monkeypatch):
    from types import SimpleNamespace

    from fa4mlir.attention import mla_sparse as ms
    monkeypatch.delenv(sc.PRODUCER_ENV, raising=False)
    monkeypatch.setenv(sc.SPARSE_VARIANT_ENV, "tile")     # the producer knob alone, on the tile step
    assert _prefill_problem().config == sc.MLASparseConfig(producer_warps=4)     # SPARSE_DEFAULT_RULE's producer (bf16)
    monkeypatch.setenv(sc.PRODUCER_ENV, "default")
    assert _prefill_problem().config == sc.MLASparseConfig(producer_warps=4)
    monkeypatch.setenv(sc.PRODUCER_ENV, "warp")
    assert _prefill_problem().config == sc.MLASparseConfig()
    monkeypatch.setenv(sc.PRODUCER_ENV, "warpgroup")
    problem = _prefill_problem()
    assert problem.config == sc.MLASparseConfig(producer_warps=4)
    monkeypatch.setattr(ms, "kernel_for", lambda source, cfg: SimpleNamespace(cfg=cfg))
    cfg = ms.build_plan(problem, None, (128 * 576, 576), 576, 2048).launches[0].kernel.cfg
    assert cfg == sc.MLASparseConfig(producer_warps=4) and (sc.KERNEL, cfg) in ENTRIES


def test_knob_typed_errors(monkeypatch):
    from fa4mlir.attention.errors import KnobError
    monkeypatch.setenv(sc.PRODUCER_ENV, "wg")
    with pytest.raises(KnobError, match="FA4MLIR_MLA_SPARSE_PRODUCER='wg'"):
        _prefill_problem()
    monkeypatch.setenv(sc.PRODUCER_ENV, "warpgroup")
    with pytest.raises(KnobError, match="16-bit kv"):
        _prefill_problem("u8")


def test_knob_selects_the_decode_variant(monkeypatch):
    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.attention.errors import KnobError
    from tests._mla_helpers import info as _info

    def problem(dtype="bf16", width=576, fp8=False):
        return sd.check_sparse_decode_inputs(_info((2, 1, 128, 576)), _info((40, 64, 1, width), dtype),
                                             _info((2, 1, 2048), "i32"), 512, _info((4, 8), "i32"), _info((3,), "i32"),
                                             is_fp8_kvcache=fp8)
    monkeypatch.setenv(sc.PRODUCER_ENV, "warpgroup")
    monkeypatch.setenv(sc.SPARSE_VARIANT_ENV, "tile")
    assert problem().config(True) == sc.MLASparseDecodeConfig(split=True, producer_warps=4)
    assert (sc.DECODE_KERNEL, problem().config(False)) in ENTRIES
    with pytest.raises(KnobError, match="16-bit kv"):
        problem("u8", 656, True)
    monkeypatch.setenv(sc.PRODUCER_ENV, "warp")
    assert problem().config(False) == sc.MLASparseDecodeConfig()
    monkeypatch.delenv(sc.PRODUCER_ENV)
    monkeypatch.delenv(sc.SPARSE_VARIANT_ENV)       # SPARSE_DECODE_DEFAULT_RULE: bf16 pair fill + producer warpgroup
    assert problem().config(False) == sc.MLASparseDecodeConfig(producer_warps=4, seesaw=True, pair_fill=True)


def test_bench_backend_sets_the_knob_around_the_call(monkeypatch):
    import os

    from fa4mlir.bench import mla_bench
    monkeypatch.delenv(sc.PRODUCER_ENV, raising=False)
    assert mla_bench.with_producer("warpgroup", lambda: os.environ.get(sc.PRODUCER_ENV))() == "warpgroup"
    assert sc.PRODUCER_ENV not in os.environ


# ---- with the seesaw tile step (FA4MLIR_MLA_SPARSE_VARIANT=seesaw: FlashMLA's whole recipe) ------------------

@pytest.mark.parametrize("s_q,heads,topk,topk_length,sinks", [
    # (the tile-order seesaw, superseded by the pair fill: two cases)
    (3, 64, 256, (100, 256, 193), (0.5, float("-inf"), float("inf"))),   # 2, 4, 4 tiles; sinks
    (2, 128, 128, (0, 70), None),                                        # two head blocks; L = 0; 2 tiles
])
def test_seesaw_prefill_through_the_interpreter(s_q, heads, topk, topk_length, sinks):
    torch = pytest.importorskip("torch")
    from tests.test_mla_sparse_seesaw import _run_prefill
    cfg = sc.MLASparseConfig(seesaw=True, producer_warps=4)
    errs, out_t, tensors = _run_prefill(torch, cfg, s_q, heads, topk, topk_length, sinks)
    base, _, _ = _run_prefill(torch, sc.MLASparseConfig(), s_q, heads, topk, topk_length, sinks)
    assert errs["out"] <= 1.5 * base["out"] + 1e-3 and errs["lse"] <= 1.5 * base["lse"] + 1e-5, (errs, base)
    if s_q > 2 and topk_length is None:     # token 2: every entry invalid
        assert (out_t[2] == 0).all() and np.isposinf(tensors["lse"][2]).all()
    if sinks is not None:
        assert (out_t[:2, 2] == 0).all() and np.isfinite(tensors["lse"][:2, 2]).all()


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,page,splits,lengths", [(2, 2, 64, 192, 61, 2, (150, 70))])
def test_seesaw_decode_through_the_interpreter(batch, seqlen_q, heads, topk, page, splits, lengths):
    from dataclasses import replace

    from tests._mla_helpers import sparse_decode_case
    torch = pytest.importorskip("torch")
    problem, run = sparse_decode_case(torch, batch, seqlen_q, heads, topk, page, splits, lengths)
    run(replace(sc.sparse_variant(problem.config(splits > 1), "seesaw"), producer_warps=4))


def test_seesaw_and_producer_knobs_combine(monkeypatch):
    from dataclasses import replace

    from fa4mlir.attention import mla_sparse as ms
    monkeypatch.setenv(sc.PRODUCER_ENV, "warpgroup")
    monkeypatch.setenv(ms.VARIANT_ENV, "seesaw")
    problem = replace(_prefill_problem(), variant=ms.requested_variant())
    assert problem.config == sc.MLASparseConfig(seesaw=True, producer_warps=4)
    assert (sc.KERNEL, problem.config) in ENTRIES


@pytest.mark.parametrize("cfg", [sc.MLASparseConfig(producer_warps=4), sc.MLASparseConfig(producer_warps=4, seesaw=True)],
                         ids=lambda c: c.name())
def test_verifier_accepts_it_and_rejects_every_single_ring_op_mutation(cfg):
    """Both halves' rings (kv_pipe, kv_hi): every acquire, commit, wait and release of either, its phase flipped,
    its stage + 1 or erased, is a PassError of fa4-verify-pipelines."""
    from fa4mlir import kernels
    from fa4mlir.dialect.query import ops_named
    from fa4mlir.passes import verify_pipelines
    from fa4mlir.passes._util import PassError
    from tests._ring_mutations import MUTATIONS, RING_OPS, mutate_ring_op
    good = kernels.module(sc.KERNEL).build(cfg)
    with good.module.context:
        verify_pipelines.run(good.module.operation)
        ops = ops_named(good.module.operation, *RING_OPS)
        pipes = {str(op.attributes["pipe"]) for op in ops}
        num_ops = len(ops)
    assert pipes == {'"kv_pipe"', '"kv_hi"'}
    rejected = 0
    for index in range(num_ops):
        for how in MUTATIONS:
            kir = mutate_ring_op(kernels.module(sc.KERNEL).build(cfg), index, how)
            if kir is None:
                continue
            with kir.module.context, pytest.raises(PassError):
                verify_pipelines.run(kir.module.operation)
            rejected += 1
    assert num_ops >= 8 and rejected >= 2 * num_ops


def test_gather_sass():
    """The producer warpgroup's copies in SASS: per tile 4 rows x 9 chunks = 36 16-byte LDGSTS (cp.async.cg:
    BYPASS), one cp.async.mbarrier.arrive per half, no local memory; the consumers' 36 + 4 wgmmas."""
    import re
    from collections import Counter

    from fa4mlir import compiler, kernels, lowering, sass
    if sass.find_nvdisasm() is None:
        pytest.skip("nvdisasm not installed")
    cfg = sc.MLASparseConfig(producer_warps=4)
    text = sass.disassemble(lowering.lower(kernels.module(sc.KERNEL).build(cfg),
                                           compiler.resolve_options(sc.KERNEL, debug=False)).cubin)
    copies = Counter(re.findall(r"\b(LDGSTS(?:BAR)?(?:\.\w+)*)", text))
    assert copies == {"LDGSTS.E.BYPASS.128": 36, "LDGSTSBAR.64.TRANSCNT": 2}, copies
    assert not re.search(r"\b(LDL|STL)\b", text)
    assert len(re.findall(r"HGMMA\.64x32x16\.F32\.BF16", text)) == 36 and len(re.findall(r"HGMMA\.64x256x16", text)) == 4
