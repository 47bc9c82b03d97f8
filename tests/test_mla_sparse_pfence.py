"""Deviceless: the sparse MLA prefill's producer-fence variant (producer_fence=True,
FA4MLIR_MLA_SPARSE_VARIANT=seesaw_overlap_pfence; attention_mla_sparse_seesaw_sm90, note "Producer fence"): the overlap
with the gather ring's proxy fence in the producer warpgroup (cp.async.wait_group, fence.proxy.async, an ordinary
arrive) rather than after each consumer ring wait.

* the bench's prefill kernel compiles with no spills, no stack, wgmma not serialised, setmaxnreg honoured, and its
  consumer loops hold fewer MEMBAR.ALL.CTA than the overlap's (the fences moved to the producer's loop);
* the interpreter (its race check on) runs the prefill by the FA rule, bit for bit the overlap's output: several pairs,
  an odd tile after them, -1 padding, topk_length and sinks; the producer's wait_group one too shallow (a half
  announced before its copies landed) and the producer's fence dropped each fail it;
* fa4-verify-pipelines accepts it; the config refuses producer_fence without the pair fill; the knob and the bench
  backend pick it; the default kernels' keys and names are unchanged.
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from fa4mlir import kernel_sets
from fa4mlir.kernels import attention_mla_sparse_sm90_config as sc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import check_sparse_art, lower_clean

OVERLAP = sc.MLASparseConfig(seesaw=True, producer_warps=4, pair_fill=True, overlap_s=True)
PFENCE = replace(OVERLAP, producer_fence=True)
ENTRIES = [e for e in kernel_sets.mla_sparse_variant_entries() if getattr(e[1], "producer_fence", False)]


def test_config_knob_and_sets(monkeypatch):
    assert PFENCE.name() == "attention_mla_sparse_sm90_bf16_pwg_seesaw_pairfill_overlap_pfence"
    assert PFENCE.key()["producer_fence"] is True
    for cfg in (OVERLAP, sc.MLASparseConfig(), sc.MLASparseDecodeConfig(seesaw=True, producer_warps=4, pair_fill=True)):
        assert "producer_fence" not in cfg.key() and "pfence" not in cfg.name()
    for bad in (replace(PFENCE, pair_fill=False, overlap_s=False), sc.MLASparseConfig(seesaw=True, producer_fence=True)):
        with pytest.raises(ConfigError, match="producer_fence"):
            bad.validate()
    with pytest.raises(ConfigError, match="producer_fence must be a bool"):
        replace(PFENCE, producer_fence=1).validate()
    assert sc.sparse_variant(sc.MLASparseConfig(producer_warps=4), sc.PFENCE_VARIANT) == PFENCE
    assert sc.sparse_variant(PFENCE, "default") == OVERLAP             # the rule's: the overlap, no producer fence
    assert sc.sparse_variant(PFENCE, sc.OVERLAP_VARIANT) == OVERLAP
    decode = sc.MLASparseDecodeConfig(seesaw=True, producer_warps=4, pair_fill=True)
    assert sc.sparse_variant(decode, sc.PFENCE_VARIANT) == replace(decode, overlap_s=True, producer_fence=True)
    # the set: the bench's prefill and decode kernels and the prefill with topk_length and sinks
    assert {cfg for _, cfg in ENTRIES} == {PFENCE, replace(PFENCE, topk_length=True, sinks=True),
                                           replace(decode, overlap_s=True, producer_fence=True)}
    assert set(ENTRIES) <= set(kernel_sets.configs(["mla-sparse-variants"])) and set(ENTRIES) <= set(kernel_sets.gpu_tests())
    assert not [e for e in kernel_sets.mla() if getattr(e[1], "producer_fence", False)]
    from fa4mlir.attention import mla_sparse as ms
    from fa4mlir.bench import mla_bench
    from tests._mla_helpers import info as _info
    calls = mla_bench.sparse_ab_calls(lambda: (lambda: (__import__("os").environ.get(ms.VARIANT_ENV),
                                                        __import__("os").environ.get(sc.PRODUCER_ENV))))
    assert calls["fa4mlir[seesaw_overlap_pfence]"]()() == (sc.PFENCE_VARIANT, "warpgroup")
    monkeypatch.delenv(sc.PRODUCER_ENV, raising=False)
    monkeypatch.setenv(ms.VARIANT_ENV, sc.PFENCE_VARIANT)
    problem = ms.check_sparse_inputs(_info((4, 128, 576)), _info((1000, 1, 576)), _info((4, 1, 2048), "i32"), None, 512)
    assert replace(problem, variant=ms.requested_variant()).config == PFENCE


def _loops(sass: str) -> list:
    """(instructions, MEMBAR.ALL.CTA) of the consumers' wgmma loops (a backward branch to a label, HGMMA inside,
    before the producer's setmaxnreg.dec), in program order."""
    from fa4mlir.sass import backward_branch_spans
    ops, spans = backward_branch_spans(sass)
    producer = next(i for i, (o, r) in enumerate(ops) if o.startswith("USETMAXREG.DEALLOC"))
    loops = [(a, b) for a, b in spans if b < producer and any(o.startswith("HGMMA") for o, _ in ops[a:b + 1])]
    return [(b - a + 1, sum(o == "MEMBAR.ALL.CTA" for o, _ in ops[a:b + 1])) for a, b in sorted(loops)]


def test_bench_kernel_compiles_clean_with_fewer_consumer_fences():
    from tests._sm100_helpers import role_budgets, sass_of
    art = lower_clean(sc.KERNEL, PFENCE)        # no spills, no stack, wgmma not serialised, setmaxnreg honoured
    check_sparse_art(art, PFENCE)
    sass, base = sass_of(art), sass_of(lower_clean(sc.KERNEL, OVERLAP))
    assert role_budgets(sass) == {216, 72}
    ours, theirs = _loops(sass), _loops(base)
    # ptxas 12.x: the overlap's 4 loops hold 4, 3, 3, 1 MEMBAR.ALL.CTA (each fence.proxy.async), these 1, 1, 1, 0
    # (the P stores' fences); the producer's loop gains them (none in the overlap's)
    assert len(ours) == len(theirs) == 4
    assert [m for _, m in theirs] == [4, 3, 3, 1] and [m for _, m in ours] == [1, 1, 1, 0], (ours, theirs)
    assert all(n < n0 for (n, _), (n0, _) in zip(ours, theirs)), (ours, theirs)
    producer = sass[sass.index("USETMAXREG.DEALLOC"):]
    count = (lambda text, op: len(re.findall(rf"\b{op}\b", text)))
    assert count(producer, "MEMBAR.ALL.CTA") > 0 and count(producer, "DEPBAR.LE") > 0
    assert count(producer, "ARRIVES.LDGSTSBAR.64.TRANSCNT") == 0        # no cp.async.mbarrier.arrive
    assert count(base[base.index("USETMAXREG.DEALLOC"):], "MEMBAR.ALL.CTA") == 0


def test_verifier_accepts_it():
    from fa4mlir import kernels
    from fa4mlir.passes import verify_pipelines
    kir = kernels.module(sc.KERNEL).build(PFENCE)
    with kir.module.context:
        verify_pipelines.run(kir.module.operation)


# (s_q, heads, topk, topk_length, sinks): 2, 5 (2 pairs + 1) and 4 tiles a token, sinks, -1 padding past topk_length
CASE = (3, 64, 320, (100, 320, 193), (0.5, float("-inf"), float("inf")))


def test_prefill_through_the_interpreter():
    torch = pytest.importorskip("torch")
    from tests.test_mla_sparse_seesaw import _run_prefill
    errs, out_t, tensors = _run_prefill(torch, PFENCE, *CASE)       # the FA rule (check_mla_sparse)
    _, base_t, base = _run_prefill(torch, OVERLAP, *CASE)
    assert torch.equal(out_t, base_t) and np.array_equal(tensors["lse"], base["lse"]), errs
    assert np.array_equal(tensors["max_logits"], base["max_logits"])
    assert (out_t[:2, 2] == 0).all() and np.isfinite(tensors["lse"][:2, 2]).all()


@pytest.mark.parametrize("mutation", ("shallow_wait", "no_fence"))
def test_a_broken_producer_fails(monkeypatch, mutation):
    """The interpreted run can fail: the producer's cp.async.wait_group one deeper than it announces (a half announced
    with its copies in flight: its readers read bytes no write reached, a RaceFault), or its fence dropped (the
    consumers' wgmmas read generic-proxy writes nobody fenced, a FenceFault)."""
    torch = pytest.importorskip("torch")
    from fa4mlir.dialect import builders as fa4
    from fa4mlir.interpret.faults import FenceFault, RaceFault
    from fa4mlir.kernels import attention_mla_sparse_seesaw_sm90 as ss
    from tests.test_mla_sparse_seesaw import _run_prefill
    if mutation == "shallow_wait":
        real = fa4.cp_async_wait
        monkeypatch.setattr(fa4, "cp_async_wait", lambda pending: real(pending=pending + 1))
        fault = RaceFault
    else:
        monkeypatch.setattr(ss, "producer_proxy_fence", lambda kb: None)
        fault = FenceFault
    with pytest.raises(fault):
        _run_prefill(torch, PFENCE, 2, 64, 256, None, None)
