"""Deviceless: the sparse MLA seesaw's pair-max variants (pair_max=True on the pair fill, FA4MLIR_MLA_SPARSE_VARIANT=
seesaw_pairmax, and with overlap_s, seesaw_overlap_pairmax; attention_mla_sparse_seesaw_sm90, note "Pair max"): m_a to
warpgroup 1 before its softmax, P_a rescaled to the pair's max by warpgroup 0 (float32, rounded once), one O rescale
and both P V back to back in warpgroup 1 (FlashMLA's sm90 sparse prefill order).

* the variants' eight kernels in the mla-sparse-variants set compile with no spills, no stack, wgmma not serialised,
  setmaxnreg honoured; in the SASS warpgroup 1's pair issues its two P V groups with no wgmma wait between them;
* fa4-verify-pipelines accepts them; the config refuses pair_max without the pair fill; the knob picks them; the
  default kernels' keys and names are unchanged;
* the interpreter (its race check on) runs the prefill by the FA rule against the float64 reference (not bit for bit
  the pair fill: P_a is rounded relative to the pair's max): pairs with an odd tile, topk_length, sinks, -1 padding,
  with and without the overlap, and the split decode; P_a handed over unrescaled (relative to m_a) fails the check.
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
PAIR_MAX = replace(PAIR_FILL, pair_max=True)
BOTH = replace(PAIR_MAX, overlap_s=True)
ENTRIES = [e for e in kernel_sets.configs(["mla-sparse-variants"]) if getattr(e[1], "pair_max", False)]


def test_the_variants_are_in_the_variants_set_only():
    dec = sc.MLASparseDecodeConfig(seesaw=True, producer_warps=4, pair_fill=True, pair_max=True)
    assert {cfg for _, cfg in ENTRIES} == {
        replace(c, overlap_s=o) for o in (False, True)
        for c in (PAIR_MAX, replace(PAIR_MAX, topk_length=True, sinks=True), dec,
                  replace(dec, topk_length=True, split=True))}
    assert set(ENTRIES) <= set(kernel_sets.gpu_tests())
    assert not [e for e in kernel_sets.mla() if getattr(e[1], "pair_max", False)]


# compiled here (opt-in, timed and not kept: [R-mla-sparse-pairmax-timed]): the bench's prefill kernel of each form;
# every entry is compiled by the GPU bundle's build
COMPILED = [e for e in ENTRIES if isinstance(e[1], sc.MLASparseConfig) and not e[1].topk_length]


@pytest.mark.parametrize("entry", COMPILED, ids=lambda e: e[1].name())
def test_variant_compiles_clean(entry):
    from fa4mlir.sass import disassemble, find_nvdisasm
    name, cfg = entry
    art = lower_clean(name, cfg)
    check_sparse_art(art, cfg)
    if find_nvdisasm() is None:
        return
    lines = [ln.split("*/", 1)[1].strip() for ln in disassemble(art.cubin).splitlines() if "*/" in ln]
    # warpgroup 1's pair: its arrival on BAR_PB (6, only there), P_b V's four HGMMAs, the sync on BAR_PA (5), P_a'
    # V's four, and no WARPGROUP.DEPBAR before the last of the eight
    pairs = [i for i, ln in enumerate(lines) if ln.startswith("BAR.ARV 0x6,")]
    assert pairs
    for i in pairs:
        pv = [k for k in range(i, len(lines)) if lines[k].startswith("HGMMA.64x256x16")][:8]
        span = lines[i:pv[-1] + 1]
        assert len(pv) == 8 and not [ln for ln in span if "DEPBAR" in ln], span
        sync = [k for k in range(i, pv[-1]) if lines[k].startswith("BAR.SYNC.DEFER_BLOCKING 0x5,")]
        assert len(sync) == 1 and pv[3] < sync[0] < pv[4], span


def test_config():
    assert PAIR_MAX.name() == "attention_mla_sparse_sm90_bf16_pwg_seesaw_pairfill_pairmax"
    assert BOTH.name() == "attention_mla_sparse_sm90_bf16_pwg_seesaw_pairfill_overlap_pairmax"
    assert PAIR_MAX.key()["pair_max"] is True
    assert "pair_max" not in PAIR_FILL.key() and "pair_max" not in sc.MLASparseDecodeConfig(pair_fill=True).key()
    assert "pair_max" not in replace(PAIR_FILL, overlap_s=True).key()
    for bad in (replace(PAIR_MAX, pair_fill=False), sc.MLASparseConfig(seesaw=True, pair_max=True),
                sc.MLASparseDecodeConfig(seesaw=True, producer_warps=4, pair_max=True)):
        with pytest.raises(ConfigError, match="pair_max"):
            bad.validate()
    with pytest.raises(ConfigError, match="pair_max must be a bool"):
        replace(PAIR_MAX, pair_max=1).validate()
    base = sc.MLASparseConfig(producer_warps=4)
    assert sc.sparse_variant(base, sc.PAIR_MAX_VARIANT) == PAIR_MAX
    assert sc.sparse_variant(base, sc.OVERLAP_PAIR_MAX_VARIANT) == BOTH
    assert sc.sparse_variant(BOTH, "default") == replace(PAIR_FILL, overlap_s=True)    # the rule's: the overlap
    assert sc.sparse_variant(BOTH, sc.OVERLAP_VARIANT) == replace(PAIR_FILL, overlap_s=True)
    with pytest.raises(ConfigError, match="producer_warps=4"):
        sc.sparse_variant(sc.MLASparseConfig(), sc.PAIR_MAX_VARIANT)


def test_verifier_accepts_it():
    verify_entries(COMPILED)


# (cfg, s_q, heads, topk, topk_length, sinks): tiles a token
CASES = [(PAIR_MAX, 3, 64, 320, (100, 320, 193), (0.5, float("-inf"), float("inf"))),  # 2, 5 (odd), 4 tiles; sinks
         (BOTH, 3, 64, 256, (0, 130, 256), None)]       # L = 0, 3 (odd: a pair, a lone tile), 4 (even); -1 padding


@pytest.mark.parametrize("case", CASES, ids=("pairmax", "overlap_pairmax"))
def test_prefill_through_the_interpreter(case):
    torch = pytest.importorskip("torch")
    from tests.test_mla_sparse_seesaw import _run_prefill
    errs, out_t, tensors = _run_prefill(torch, *case)        # the FA rule (check_mla_sparse)
    print(case[0].name(), errs)
    if case[5] is not None:
        assert (out_t[:2, 2] == 0).all() and np.isfinite(tensors["lse"][:2, 2]).all()


def test_an_unrescaled_p_a_fails_the_prefill(monkeypatch):
    """The interpreted check can fail: warpgroup 0 hands over P_a relative to m_a (rescale_p a no-op), which
    warpgroup 1 adds as though relative to the pair's max m_b."""
    torch = pytest.importorskip("torch")
    from fa4mlir.kernels.common import mla_seesaw_sm90 as seesaw
    from tests.test_mla_sparse_seesaw import _run_prefill
    calls = {"n": 0}

    def unscaled(cs, p, factor):
        calls["n"] += 1
        return p
    monkeypatch.setattr(seesaw, "rescale_p", unscaled)
    with pytest.raises(AssertionError):
        _run_prefill(torch, PAIR_MAX, 2, 64, 256, None, None)
    assert calls["n"] == 1


def test_decode_through_the_interpreter():
    from tests._mla_helpers import sparse_decode_case
    torch = pytest.importorskip("torch")
    problem, run = sparse_decode_case(torch, 2, 2, 64, 320, 61, 2, (320, 150))
    cfg = sc.sparse_variant(replace(problem.config(True), producer_warps=4), sc.OVERLAP_PAIR_MAX_VARIANT)
    assert cfg.pair_max and cfg.overlap_s and cfg.split
    run(cfg)


def test_knob_selects_them(monkeypatch):
    from tests._mla_helpers import check_variant_knob
    monkeypatch.delenv(sc.PRODUCER_ENV, raising=False)
    for name, cfg in ((sc.PAIR_MAX_VARIANT, PAIR_MAX), (sc.OVERLAP_PAIR_MAX_VARIANT, BOTH)):
        assert check_variant_knob(monkeypatch, name, cfg) == sc.MLASparseDecodeConfig(
            seesaw=True, producer_warps=4, pair_fill=True, overlap_s=cfg.overlap_s, pair_max=True)
