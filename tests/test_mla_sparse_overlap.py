"""Deviceless: the sparse MLA seesaw's overlap variant (overlap_s=True, FA4MLIR_MLA_SPARSE_VARIANT=seesaw_overlap;
attention_mla_sparse_seesaw_sm90, note "Overlap"): the pair fill with warpgroup 0 issuing the next pair's S_a under
its P_b V (FlashMLA's sm90 sparse prefill order).

* the variant's kernels in the mla-sparse-variants set compile with no spills, no stack, wgmma not serialised, the
  producer warpgroup's setmaxnreg budgets honoured;
* the interpreter (its race check on) runs the prefill by the FA rule against the float64 reference, bit for bit
  the pair fill's output (the same algebra in another order): several pairs through the loop, one pair (the peeled
  pair alone), an odd tile after the pairs, no pair (L = 0, a lone tile), -1 padding, topk_length and sinks; and the
  split decode; a stale S_a (the overlap's S dropped) fails that check;
* fa4-verify-pipelines accepts it; the config refuses overlap_s without the pair fill; the knob picks it; the default
  kernels' keys and names are unchanged.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fa4mlir import kernel_sets
from fa4mlir.kernels import attention_mla_sparse_sm90_config as sc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import check_sparse_art, lower_clean, verify_entries

PAIR_FILL = sc.MLASparseConfig(seesaw=True, producer_warps=4, pair_fill=True)
OVERLAP = replace(PAIR_FILL, overlap_s=True)
# SPARSE_DEFAULT_RULE's bf16 kernels since [D-mla-sparse-overlap-default]: the mla set's, every topk_length / sinks
# (prefill) and topk_length / split (decode) case
ENTRIES = [e for e in kernel_sets.mla() if getattr(e[1], "overlap_s", False)]


def test_the_rule_kernels_are_in_the_mla_set():
    assert {cfg for _, cfg in ENTRIES} == {
        *(replace(OVERLAP, topk_length=t, sinks=s) for t in (False, True) for s in (False, True)),
        *(sc.MLASparseDecodeConfig(topk_length=t, split=s, seesaw=True, producer_warps=4, pair_fill=True, overlap_s=True)
          for t in (False, True) for s in (False, True))}
    assert set(ENTRIES) <= set(kernel_sets.gpu_tests()) and set(ENTRIES) <= set(kernel_sets.configs(["mla-sparse-variants"]))
    # (the mla set's)
    assert not [e for e in kernel_sets.mla_sparse_variant_entries() if getattr(e[1], "overlap_s", False)]
    assert sc.SPARSE_DEFAULT_RULE == {"bf16": (sc.OVERLAP_VARIANT, "warpgroup")}
    assert sc.SPARSE_DECODE_DEFAULT_RULE == {"bf16": (sc.PAIR_FILL_VARIANT, "warpgroup")}     # the decode: no gain
    decode = sc.MLASparseDecodeConfig(seesaw=True, producer_warps=4, pair_fill=True, overlap_s=True)
    assert sc.sparse_variant(decode, "default") == replace(decode, overlap_s=False)


# compiled here: the bench's prefill and decode kernels and their topk_length + sinks / split + topk_length twins
COMPILED = [e for e in ENTRIES if e[1].topk_length == getattr(e[1], "sinks", getattr(e[1], "split", None))]


@pytest.mark.parametrize("entry", COMPILED, ids=lambda e: e[1].name())
def test_variant_compiles_clean(entry):
    name, cfg = entry
    check_sparse_art(lower_clean(name, cfg), cfg)


def test_config():
    assert OVERLAP.name() == "attention_mla_sparse_sm90_bf16_pwg_seesaw_pairfill_overlap"
    assert OVERLAP.key()["overlap_s"] is True
    assert "overlap_s" not in PAIR_FILL.key() and "overlap_s" not in sc.MLASparseDecodeConfig(pair_fill=True).key()
    assert PAIR_FILL.name() == "attention_mla_sparse_sm90_bf16_pwg_seesaw_pairfill"
    for bad in (replace(OVERLAP, pair_fill=False), sc.MLASparseConfig(seesaw=True, overlap_s=True),
                sc.MLASparseDecodeConfig(seesaw=True, producer_warps=4, overlap_s=True)):
        with pytest.raises(ConfigError, match="overlap_s"):
            bad.validate()
    with pytest.raises(ConfigError, match="overlap_s must be a bool"):
        replace(OVERLAP, overlap_s=1).validate()
    assert sc.sparse_variant(sc.MLASparseConfig(producer_warps=4), sc.OVERLAP_VARIANT) == OVERLAP
    assert sc.sparse_variant(OVERLAP, "default") == OVERLAP                # the rule's ([D-mla-sparse-overlap-default])
    assert sc.sparse_variant(OVERLAP, sc.PAIR_FILL_VARIANT) == PAIR_FILL
    with pytest.raises(ConfigError, match="producer_warps=4"):
        sc.sparse_variant(sc.MLASparseConfig(), sc.OVERLAP_VARIANT)


def test_verifier_accepts_it():
    verify_entries(COMPILED)


# (s_q, heads, topk, topk_length, sinks): tiles a token
CASES = [(3, 64, 320, (100, 320, 193), (0.5, float("-inf"), float("inf"))),   # 2, 5 (2 pairs + 1), 4; sinks
         (3, 64, 256, (0, 64, 256), None)]                                     # L = 0, a lone tile; -1 padding


def _pair(torch, case):
    from tests.test_mla_sparse_seesaw import _run_prefill
    errs, out_t, tensors = _run_prefill(torch, OVERLAP, *case)
    _, base_t, base = _run_prefill(torch, PAIR_FILL, *case)
    return errs, out_t, tensors, base_t, base


@pytest.mark.parametrize("case", CASES, ids=("pairs", "no_pair"))
def test_prefill_through_the_interpreter(case):
    torch = pytest.importorskip("torch")
    errs, out_t, tensors, base_t, base = _pair(torch, case)      # _run_prefill: the FA rule (check_mla_sparse)
    assert torch.equal(out_t, base_t) and np.array_equal(tensors["lse"], base["lse"]), errs
    if case[4] is not None:
        assert (out_t[:2, 2] == 0).all() and np.isfinite(tensors["lse"][:2, 2]).all()


def test_a_stale_s_fails_the_prefill(monkeypatch):
    """The interpreted check can fail: each pair but the first reuses the S_a of the pair before (the S the overlap
    issues dropped)."""
    torch = pytest.importorskip("torch")
    from fa4mlir.kernels.common import mla_seesaw_sm90 as seesaw
    from tests.test_mla_sparse_seesaw import _run_prefill
    real = seesaw._pair0_ahead
    calls = {"n": 0}

    def stale(cs, tiles, dtype, j, carry, s_acc, masked, ahead):
        calls["n"] += 1
        state, s_next = real(cs, tiles, dtype, j, carry, s_acc, masked, ahead)
        return state, (s_acc if ahead else s_next)
    monkeypatch.setattr(seesaw, "_pair0_ahead", stale)
    with pytest.raises(AssertionError):
        _run_prefill(torch, OVERLAP, 2, 64, 256, None, None)
    assert calls["n"] == 2


def test_decode_through_the_interpreter():
    from tests._mla_helpers import sparse_decode_case
    torch = pytest.importorskip("torch")
    problem, run = sparse_decode_case(torch, 2, 2, 64, 320, 61, 2, (320, 150))
    cfg = sc.sparse_variant(replace(problem.config(True), producer_warps=4), sc.OVERLAP_VARIANT)
    assert cfg.overlap_s and cfg.split
    run(cfg)


def test_knob_selects_it(monkeypatch):
    from tests._mla_helpers import check_variant_knob
    monkeypatch.delenv(sc.PRODUCER_ENV, raising=False)
    assert check_variant_knob(monkeypatch, sc.OVERLAP_VARIANT, OVERLAP) == \
        sc.MLASparseDecodeConfig(seesaw=True, producer_warps=4, pair_fill=True, overlap_s=True)
