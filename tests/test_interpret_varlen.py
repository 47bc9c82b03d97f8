"""Deviceless: the ragged-batch (varlen) sm_90a kernel executed by the interpreter on small packed
batches (tests/interpret_varlen.py CASES: lengths 0 and 1, a tile plus one row, unequal q and k
lengths, GQA, causal, a window, softcap with sinks and seqused_k), numerics by the FA rule per
sequence (fa4mlir.testing_varlen.compare_varlen), packed rows past the last sequence untouched, and
rows that see no key exactly O = 0 with LSE = +inf (or the head's sink). HEAD_DIM_CASES: MLA prefill's
qk 192 / v 128 (out [total_q, heads, 128]), D96, D192. MOD_CASES: score_mod / mask_mod with batch the
sequence and q_idx / kv_idx positions in it, against the functions' torch twins per sequence.
COMPACT_CASES: the compact grid (common.varlen_compact: heads in chunks with a rest, 37 sequences for the
warp scan's second chunk), the same checks. PERSISTENT_CASES: the persistent compact kernel on fewer CTAs
than working tiles (every CTA loops over tiles of several sequences and heads), the same checks."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fa4mlir.testing_varlen import compare_varlen, compare_varlen_scored, sequences, varlen_torch_mods  # noqa: E402
from tests.interpret_varlen import (COMPACT_CASES, CASES, HEAD_DIM_CASES, MOD_CASES, PERSISTENT_CASES,  # noqa: E402
                                   problem, run)


def _tensor(bits: np.ndarray, dtype: str):
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16 if dtype == "bf16" else torch.float16)


@pytest.mark.parametrize("case", CASES + HEAD_DIM_CASES + COMPACT_CASES + PERSISTENT_CASES, ids=lambda c: c.name)
def test_varlen_kernel_through_the_interpreter(case):
    got = run(case, seed=1)
    if case.persistent:   # fewer CTAs than working tiles: each CTA ran several
        pr, bm = problem(case), 128
        tiles = sum(-(-n // bm) for n in case.seqlens_q) * case.heads
        assert got["ctas"] == case.persistent < tiles // 2, (got["ctas"], tiles)
        assert "_pers" in got["kernel_name"] and got["kernel_name"].endswith("_compact"), got["kernel_name"]
        assert pr.total_q > sum(case.seqlens_q)   # spare packed rows no sequence owns (compare_varlen: still NaN)
    q, k, v, o = (_tensor(got[n], case.dtype) for n in ("q", "k", "v", "o"))
    lse = torch.from_numpy(got["lse"])
    cu_q, cu_k = torch.from_numpy(got["cu_seqlens_q"]), torch.from_numpy(got["cu_seqlens_k"])
    used = torch.from_numpy(got["seqused_k"]) if case.seqused_k is not None else None
    sinks = torch.from_numpy(got["sinks"]) if case.sinks else None
    report = compare_varlen(q, k, v, o, lse, cu_q, cu_k, case.head_dim ** -0.5, case.causal, seqused_k=used,
                            window_size=case.window, attention_chunk=case.chunk, softcap=case.softcap, sinks=sinks)
    assert report["ok"], report
    # a query row whose sequence has no key: O = 0 exactly, LSE = +inf (the head's sink with sinks)
    for q0, nq, _, nk in sequences(cu_q, cu_k, used):
        if nq and nk == 0:
            assert (o[q0:q0 + nq].float() == 0).all()
            want = sinks[:, None].expand(-1, nq) if sinks is not None else torch.full((case.heads, nq), float("inf"))
            assert torch.equal(lse[:, q0:q0 + nq], want)


@pytest.mark.parametrize("case", MOD_CASES, ids=lambda c: c.name)
def test_varlen_score_mod_through_the_interpreter(case):
    got = run(case, seed=2)
    q, k, v, o = (_tensor(got[n], case.dtype) for n in ("q", "k", "v", "o"))
    lse = torch.from_numpy(got["lse"])
    aux = [got[f"aux{i}"] for i in range(len(case.aux()))]
    fns = varlen_torch_mods(case.score, case.mask_mod, aux, got["cu_seqlens_q"], case.cap)
    report = compare_varlen_scored(q, k, v, o, lse, got["cu_seqlens_q"], got["cu_seqlens_k"], case.head_dim ** -0.5,
                                   case.causal, fns)
    assert report["ok"], report


def test_persistent_is_bitwise_the_default_grid():
    """The persistent compact kernel's out and lse are those of the default grid bit for bit (the same
    tiles through the same arithmetic; only which CTA runs a tile, and the first block's unmasked copy,
    differ): what tests/gpu/test_varlen_persistent_gpu.py asserts on the anchors' batch."""
    from dataclasses import replace
    case = PERSISTENT_CASES[0]
    got, ref = run(case, seed=3), run(replace(case, persistent=0), seed=3)
    assert "_pers" in got["kernel_name"] and "_pers" not in ref["kernel_name"]
    assert np.array_equal(got["o"], ref["o"]) and np.array_equal(got["lse"].view(np.int32), ref["lse"].view(np.int32))
