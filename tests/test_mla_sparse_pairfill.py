"""Deviceless: the sparse MLA seesaw's pair-fill variant (pair_fill=True, FA4MLIR_MLA_SPARSE_VARIANT=seesaw_pairfill;
attention_mla_sparse_seesaw_sm90, note "Pair fill"): the producer warpgroup fills a pair's halves in FlashMLA's
order (a 0..255, b 256..575, a 256..575, b 0..255) and warpgroup 1 issues S_b's second half first.

* every kernel of the variant in the kernel sets compiles with no spills, wgmma not serialised, the setmaxnreg
  budgets of the producer warpgroup (216 / 72, within the launch pool);
* the interpreter (its race check on) runs the prefill and the decode by the FA rule against the float64
  reference, within 1.5x the default kernel's error (pairs, an odd tile, several pairs through the ring,
  topk_length, sinks, L = 0, two head blocks, splits);
* fa4-verify-pipelines accepts it and rejects every single ring-op mutation;
* the config refuses pair_fill without the seesaw, the producer warpgroup or over FP8; the host knob picks it
  and refuses it with a typed error where it is not built; the default kernels' keys and names are unchanged.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fa4mlir import kernel_sets
from fa4mlir.kernels import attention_mla_sparse_sm90_config as sc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import check_sparse_art, lower_clean

# SPARSE_DEFAULT_RULE's bf16 kernels from [D-mla-sparse-pairfill-default] to [D-mla-sparse-overlap-default]: the mla
# set's (the rule's overlapped ones: test_mla_sparse_overlap.py)
ENTRIES = [e for e in kernel_sets.mla() if getattr(e[1], "pair_fill", False) and not e[1].overlap_s]
PAIR_FILL = sc.MLASparseConfig(seesaw=True, producer_warps=4, pair_fill=True)


def test_the_variant_is_in_the_sets():
    assert {cfg for _, cfg in ENTRIES} == {
        *(replace(PAIR_FILL, topk_length=t, sinks=s) for t in (False, True) for s in (False, True)),
        *(sc.MLASparseDecodeConfig(topk_length=t, split=s, seesaw=True, producer_warps=4, pair_fill=True)
          for t in (False, True) for s in (False, True))}
    assert set(ENTRIES) <= set(kernel_sets.configs(["mla-sparse-variants"])) and set(ENTRIES) <= set(kernel_sets.gpu_tests())
    assert not [e for e in kernel_sets.mla_sparse_variant_entries()
                if getattr(e[1], "pair_fill", False) and not e[1].overlap_s]   # (test_mla_sparse_overlap.py)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e[1].name())
def test_variant_compiles_clean(entry):
    name, cfg = entry
    check_sparse_art(lower_clean(name, cfg), cfg)


def test_config():
    assert PAIR_FILL.name() == "attention_mla_sparse_sm90_bf16_pwg_seesaw_pairfill"
    assert PAIR_FILL.key()["pair_fill"] is True
    assert "pair_fill" not in sc.MLASparseConfig(seesaw=True, producer_warps=4).key()
    assert "pair_fill" not in sc.MLASparseDecodeConfig(seesaw=True, producer_warps=4).key()
    assert PAIR_FILL.regs == (216, 72) and sc.register_pool_fits(384, *PAIR_FILL.regs, 2)[0]
    for bad in (sc.MLASparseConfig(producer_warps=4, pair_fill=True), sc.MLASparseConfig(seesaw=True, pair_fill=True),
                sc.MLASparseDecodeConfig(seesaw=True, pair_fill=True),
                sc.MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True, seesaw=True, pair_fill=True)):
        with pytest.raises(ConfigError, match="pair_fill"):
            bad.validate()
    with pytest.raises(ConfigError, match="pair_fill must be a bool"):
        replace(PAIR_FILL, pair_fill=1).validate()
    cfg = sc.MLASparseConfig(producer_warps=4)
    assert sc.sparse_variant(cfg, "seesaw_pairfill") == PAIR_FILL
    assert sc.sparse_variant(PAIR_FILL, "seesaw") == replace(PAIR_FILL, pair_fill=False)
    assert sc.sparse_variant(PAIR_FILL, "default") == replace(PAIR_FILL, overlap_s=True)   # the rule's ([D-mla-sparse-overlap-default])
    with pytest.raises(ConfigError, match="producer_warps=4"):
        sc.sparse_variant(sc.MLASparseConfig(), "seesaw_pairfill")


@pytest.mark.parametrize("s_q,heads,topk,topk_length,sinks", [
    (3, 64, 192, None, None),                                           # 3 tiles: a pair and the odd tile
    (3, 64, 320, (100, 320, 193), (0.5, float("-inf"), float("inf"))),  # 2, 5, 4 tiles; sinks
    (2, 128, 256, (0, 256), None),                                      # two head blocks; L = 0; two pairs
])
def test_prefill_through_the_interpreter(s_q, heads, topk, topk_length, sinks):
    torch = pytest.importorskip("torch")
    from tests.test_mla_sparse_seesaw import _run_prefill
    errs, out_t, tensors = _run_prefill(torch, PAIR_FILL, s_q, heads, topk, topk_length, sinks)
    base, _, _ = _run_prefill(torch, sc.MLASparseConfig(), s_q, heads, topk, topk_length, sinks)
    assert errs["out"] <= 1.5 * base["out"] + 1e-3 and errs["lse"] <= 1.5 * base["lse"] + 1e-5, (errs, base)
    if s_q > 2 and topk_length is None:     # token 2: every entry invalid
        assert (out_t[2] == 0).all() and np.isposinf(tensors["lse"][2]).all()
    if sinks is not None:
        assert (out_t[:2, 2] == 0).all() and np.isfinite(tensors["lse"][:2, 2]).all()


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,page,splits,lengths", [(3, 1, 16, 192, 16, 1, None),
                                                                           (2, 2, 64, 256, 61, 2, (150, 256))])
def test_decode_through_the_interpreter(batch, seqlen_q, heads, topk, page, splits, lengths):
    from tests._mla_helpers import sparse_decode_case
    torch = pytest.importorskip("torch")
    problem, run = sparse_decode_case(torch, batch, seqlen_q, heads, topk, page, splits, lengths)
    cfg = sc.sparse_variant(replace(problem.config(splits > 1), producer_warps=4), "seesaw_pairfill")
    assert cfg.pair_fill and cfg.split == (splits > 1)
    run(cfg)


def test_verifier_accepts_it_and_rejects_every_single_ring_op_mutation():
    """Both rings (kv_pipe, kv_hi, tile b's halves swapped): every acquire, commit, wait and release, its phase
    flipped, its stage + 1 or erased, is a PassError of fa4-verify-pipelines."""
    from fa4mlir import kernels
    from fa4mlir.dialect.query import ops_named
    from fa4mlir.passes import verify_pipelines
    from fa4mlir.passes._util import PassError
    from tests._ring_mutations import MUTATIONS, RING_OPS, mutate_ring_op
    good = kernels.module(sc.KERNEL).build(PAIR_FILL)
    with good.module.context:
        verify_pipelines.run(good.module.operation)
        num_ops = len(ops_named(good.module.operation, *RING_OPS))
    rejected = 0
    for index in range(num_ops):
        for how in MUTATIONS:
            kir = mutate_ring_op(kernels.module(sc.KERNEL).build(PAIR_FILL), index, how)
            if kir is None:
                continue
            with kir.module.context, pytest.raises(PassError):
                verify_pipelines.run(kir.module.operation)
            rejected += 1
    assert num_ops >= 16 and rejected >= 2 * num_ops


def _prefill_problem(kv_dtype="bf16"):
    from fa4mlir.attention import mla_sparse as ms
    from tests._mla_helpers import info as _info
    width = 656 if kv_dtype == "u8" else 576
    problem = ms.check_sparse_inputs(_info((4, 128, 576)), _info((1000, 1, width), kv_dtype), _info((4, 1, 2048), "i32"),
                                     None, 512)
    return replace(problem, variant=ms.requested_variant())


def test_knob_selects_it_and_refuses_it_where_not_built(monkeypatch):
    from fa4mlir.attention import mla_sparse as ms
    from fa4mlir.attention.errors import KnobError, UnsupportedFeatureError
    monkeypatch.delenv(sc.PRODUCER_ENV, raising=False)
    monkeypatch.setenv(ms.VARIANT_ENV, "seesaw_pairfill")
    assert _prefill_problem().config == PAIR_FILL        # bf16: the rule's producer warpgroup
    assert (sc.KERNEL, PAIR_FILL) in ENTRIES
    monkeypatch.setenv(sc.PRODUCER_ENV, "warpgroup")
    assert _prefill_problem().config == PAIR_FILL
    ms.check_variant("seesaw_pairfill", False, producer_warps=4)
    with pytest.raises(KnobError, match="FA4MLIR_MLA_SPARSE_PRODUCER=warpgroup"):
        ms.check_variant("seesaw_pairfill", False, producer_warps=1)
    with pytest.raises(UnsupportedFeatureError, match="16-bit kv only"):
        ms.check_variant("seesaw_pairfill", True)


def test_decode_knob_refuses_it_with_the_gather_warp(monkeypatch):
    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.attention.errors import KnobError
    from tests._mla_helpers import info as _info

    def problem(dtype="bf16"):
        return sd.check_sparse_decode_inputs(_info((2, 1, 128, 576), dtype), _info((40, 64, 1, 576), dtype),
                                             _info((2, 1, 2048), "i32"), 512, _info((4, 8), "i32"), _info((3,), "i32"))
    monkeypatch.delenv(sc.PRODUCER_ENV, raising=False)
    monkeypatch.setenv(sc.SPARSE_VARIANT_ENV, "seesaw_pairfill")
    assert problem().config(False) == sc.MLASparseDecodeConfig(seesaw=True, producer_warps=4, pair_fill=True)
    with pytest.raises(KnobError, match="gather warp"):
        problem("f16")      # f16: the rule's producer is the gather warp
    monkeypatch.setenv(sc.PRODUCER_ENV, "warp")
    with pytest.raises(KnobError, match="gather warp"):
        problem()
