"""The FP8 decode variants (attention_decode_sm90_config.FP8_VARIANTS: the conversion-through-SMEM
kernel "smem", swap AB "swapab" / "swapabw"; FP8_DEFAULT_RULE picks among them), without a GPU:

* one kernel of each variant of the `decode-fp8-variants` bundle set (contiguous and paged 16, split,
  richest scales: `_representatives`) compiles (through fa4-verify-pipelines) with no spills, no stack
  frame and no serialised wgmma, in the SMEM its config plans;
* the variants keep default_config's kernels as they were: the compile key and name of a config
  without them hold no new field (so cached and bundled kernels keep their keys);
* the variant the runtime picks: FA4MLIR_DECODE_FP8_VARIANT through runtime_config (plan_problem
  and configs_for), an unknown name a ConfigError, bf16/f16 caches never a variant.
Numerics: tests/test_interpret_decode_sm90.py runs every variant through the interpreter.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from fa4mlir import compiler, kernel_sets, kernels, lowering
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels.common.fields import ConfigError
from fa4mlir.passes.plan_smem import SMEM_LIMIT

DEFAULTS = set(kernel_sets.SETS["decode"]())
# (the "balanced" kernels and their combine: tests/test_decode_balanced_compile.py; the bf16 TILE_VARIANTS:
# tests/test_decode_bf16_variants.py)
ENTRIES = [e for e in kernel_sets.SETS["decode-fp8-variants"]()
           if e not in DEFAULTS and isinstance(e[1], dec.DecodeConfig) and not e[1].balanced and e[1].fp8]
_GRAIN_ORDER = {"block": 0, "kv_head": 1, "tensor": 2}


def _representatives(entries):
    """One kernel per (variant, contiguous or paged), split, at its richest scale granularity (block
    scales hold the most registers), to keep CI's time (the bundle build compiles the whole set with the
    same lowering, and test_interpret_decode_sm90 interprets the variant cases, plus swap_ab's GQA 4 and
    unsplit ones)."""
    out = {}
    for e in sorted(entries, key=lambda e: (e[1].unsplit, _GRAIN_ORDER[e[1].kv_scale])):
        cfg = e[1]
        out.setdefault((cfg.bn, cfg.swap_ab, cfg.swap_ab_warp_max, cfg.stages, cfg.paged, cfg.box_rows), e)
    return list(out.values())


# FP8_DEFAULT_RULE's swap-AB kernels of the `decode` set (swapabw contiguous, swapab paged 16 and 64):
# the paged-64 ones are built nowhere else. In the set's order, not DEFAULTS' (a set: its order varies with
# the hash seed, and xdist's workers must collect the same ids)
RULE_SWAP_AB = [e for e in kernel_sets.SETS["decode"]() if isinstance(e[1], dec.DecodeConfig) and e[1].swap_ab
                and not e[1].balanced]    # BALANCED_RULE's: tests/test_decode_balanced_compile.py
COMPILED_IN_CI = _representatives(ENTRIES) + _representatives(RULE_SWAP_AB)
_COMPILED: dict = {}


def _compiled(entry):
    if entry not in _COMPILED:
        name, cfg = entry
        _COMPILED[entry] = lowering.lower(kernels.module(name).build(cfg), compiler.resolve_options(name, debug=False))
    return _COMPILED[entry]


def test_the_set_holds_every_variant_of_every_case():
    names = {cfg.name() for _, cfg in ENTRIES}
    cases = kernel_sets.DECODE_FP8_VARIANT_CASES
    every = {dec.fp8_variant(dec.default_config(t, d, page, grain, unsplit=unsplit), name).name()
             for t, d, page, grain in cases for unsplit in (False, True) for name in dec.FP8_VARIANTS
             if name != "default" and name not in dec.BALANCED_VARIANTS
             and grain in dec.FP8_VARIANT_SCALES.get(name, dec.SCALES)}
    in_decode = {cfg.name() for _, cfg in DEFAULTS}
    # the `decode` set holds the "smem" kernels and FP8_DEFAULT_RULE's swap-AB ones (swapabw contiguous,
    # swapab paged): the variant set adds the rest (swapab contiguous, swapabw paged 16; tensor and kv_head scales,
    # split and unsplit)
    assert len(names) == len(ENTRIES) == len(every - in_decode) == 2 * 2 * 2
    assert names | in_decode >= every and {n for n in every & in_decode if "_swapab" in n}
    assert all(cfg.fp8 and cfg.swap_ab for _, cfg in ENTRIES)


@pytest.mark.parametrize("entry", COMPILED_IN_CI, ids=lambda e: e[1].name())
def test_variant_compiles_clean(entry):
    _, cfg = entry
    art = _compiled(entry)
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"], r
    assert cfg.smem_bytes() - 1024 <= art.smem_bytes <= SMEM_LIMIT["sm_90a"], (art.smem_bytes, cfg.smem_bytes())
    assert art.block == (cfg.threads, 1, 1)
    if cfg.swap_ab:
        assert cfg.ctas_per_sm == 2 and r["registers"] <= 168, r


def test_rule_kernels_of_the_decode_set():
    """The `decode` set holds FP8_DEFAULT_RULE's swap-AB kernel of every tensor / kv_head TMA case of
    DECODE_FP8_CASES, split and unsplit, next to its conversion-through-SMEM kernel."""
    names = {cfg.name() for _, cfg in DEFAULTS if isinstance(cfg, dec.DecodeConfig)}
    swap = [(page, grain) for _, _, page, grain in kernel_sets.DECODE_FP8_CASES if grain != "block" and page != 1]
    assert len(RULE_SWAP_AB) == 2 * len(swap) == 10
    for page, grain in swap:
        for unsplit in (False, True):
            smem = dec.default_config("bf16", 128, page, grain, unsplit=unsplit)
            rule = dec.default_config("bf16", 128, page, grain, unsplit=unsplit, rows=dec.SWAP_AB_ROWS)
            assert {smem.name(), rule.name()} <= names and rule.swap_ab and rule.swap_ab_warp_max == (page is None)


def test_default_keys_hold_no_new_field():
    cfg = dec.default_config("bf16", 128, None, "kv_head")
    assert not {"swap_ab", "swap_ab_warp_max"} & set(cfg.key())
    assert "_swapab" not in cfg.name()
    swap = dec.fp8_variant(cfg, "swapab")
    assert swap.key()["swap_ab"] is True and swap.name().endswith("_swapab")
    assert dec.fp8_variant(cfg, "default") is cfg


def test_runtime_config_reads_the_variant(monkeypatch):
    monkeypatch.delenv(dec.FP8_VARIANT_ENV, raising=False)
    assert dec.runtime_config("bf16", 128, 16, "block") == dec.default_config("bf16", 128, 16, "block")
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, "swapab")
    with pytest.raises(ConfigError, match="built for scales"):
        dec.runtime_config("bf16", 128, 16, "block")
    cfg = dec.runtime_config("bf16", 128, 16, "kv_head")
    assert cfg.swap_ab and cfg.bn == 64 and cfg.box_rows == 16 and cfg.ctas_per_sm == 2
    assert dec.runtime_config("bf16", 128, 16) == dec.default_config("bf16", 128, 16)   # bf16 cache: no variant
    with pytest.raises(ConfigError, match="cp.async gather"):
        dec.runtime_config("bf16", 128, 1, "block")
    assert dec.runtime_config("bf16", 128, 1, "block", variant="default").gather
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, "cw9")
    with pytest.raises(ConfigError, match="unknown FP8 decode variant"):
        dec.runtime_config("bf16", 128, None, "tensor")


def test_default_rule_picks_swap_ab_where_it_is_built(monkeypatch):
    """FP8_DEFAULT_RULE ([D-decode-fp8-swapab]): swapabw tiles for a contiguous cache, swapab for a
    TMA-paged one, at head_dim 128, tensor / kv_head scales and at most SWAP_AB_ROWS packed rows;
    every other FP8 call the conversion-through-SMEM kernel ("smem"), also named explicitly."""
    monkeypatch.delenv(dec.FP8_VARIANT_ENV, raising=False)
    smem = dec.default_config("bf16", 128, None, "kv_head")
    assert not smem.swap_ab and dec.fp8_variant(smem, "smem") is smem
    for page, grain, rows, want in ((None, "kv_head", 1, "swapabw"), (None, "tensor", 8, "swapabw"),
                                    (16, "kv_head", 4, "swapab"), (64, "tensor", 8, "swapab"),
                                    (None, "kv_head", 9, "smem"), (16, "tensor", 64, "smem"),
                                    (None, "block", 1, "smem"), (16, "block", 4, "smem"),
                                    (1, "kv_head", 1, "smem"), (8, "tensor", 1, "smem"), (None, "kv_head", None, "smem")):
        base = dec.default_config("bf16", 128, page, grain)
        for unsplit in (False, True):
            got = dec.runtime_config("bf16", 128, page, grain, unsplit=unsplit, rows=rows)
            assert got == dec.default_config("bf16", 128, page, grain, unsplit=unsplit, rows=rows)
            assert got == dec.fp8_variant(replace(base, unsplit=unsplit), want), (page, grain, rows)
            assert dec.runtime_config("bf16", 128, page, grain, unsplit=unsplit, rows=rows, variant="smem") \
                == replace(base, unsplit=unsplit)
    assert dec.FP8_DEFAULT_RULE == {"contiguous": "swapabw", "paged": "swapab"}
    assert not dec.default_config("bf16", 64, None, "tensor", rows=1).swap_ab       # swap AB is D128 only
    assert not dec.default_config("bf16", 128, None, rows=1).fp8                   # bf16 cache: no rule
    with pytest.raises(ConfigError, match="conversion-through-SMEM"):
        dec.fp8_variant(dec.default_config("bf16", 128, None, "tensor", rows=1), "swapab")


@pytest.mark.parametrize("heads,seqlen_q,page,grain,swap", [
    (8, 1, None, "kv_head", True), (8, 1, 16, "tensor", True), (4, 2, 16, "kv_head", True),
    (32, 1, None, "kv_head", False), (8, 4, 16, "tensor", False), (8, 1, 16, "block", False), (8, 1, 8, "kv_head", False)])
def test_plan_runs_the_rule(monkeypatch, heads, seqlen_q, page, grain, swap):
    """plan_problem and configs_for run FP8_DEFAULT_RULE for the call's packed rows (GQA group x
    seqlen_q, 2 KV heads here): the bench's group 4 and 8 at one token take swap AB, more rows, block
    scales or the gather (page 8) the "smem" kernel, never an UnsupportedFeatureError."""
    from fa4mlir.attention import kvcache as kc
    from fa4mlir.attention.kvcache_call import configs_for
    from fa4mlir.runtime import TensorInfo
    monkeypatch.delenv(dec.FP8_VARIANT_ENV, raising=False)

    def info(shape, dtype):
        strides, acc = [], 1
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= n
        return TensorInfo(1 << 20, tuple(shape), tuple(strides), dtype, "cuda")
    batch, cap, kvh = 2, 256, 2
    cache = (batch, cap, kvh, 128) if page is None else (batch * cap // page, page, kvh, 128)
    scale = {"tensor": (1,), "kv_head": (kvh,), "block": (cache[0], kvh)}[grain]
    problem = kc.check_kvcache_inputs(
        info((batch, seqlen_q, heads, 128), "bf16"), info(cache, "e4m3"), info(cache, "e4m3"), info((batch,), "i32"),
        None if page is None else info((batch, cap // page), "i32"), k_scale=info(scale, "f32"),
        v_scale=info(scale, "f32"))
    for splits in (None, 2):
        plan = kc.plan_problem(problem.with_options(causal=True, softmax_scale=0.1, num_splits=splits,
                                                    return_lse=False), 132)
        cfg, _ = configs_for(plan)
        assert plan.gqa.rows == heads // kvh * seqlen_q and cfg.swap_ab == swap and cfg.bn == plan.bn
        assert cfg.swap_ab_warp_max == (swap and page is None)


# (CI time: each variant's sweep is ~20 s)
@pytest.mark.parametrize("variant,page,grain", [("swapab", 16, "kv_head"), ("swapabw", None, "tensor")])
def test_verifier_rejects_every_single_op_mutation_of_a_variant(variant, page, grain):
    """The swap-AB kernels' rings: each ring op with its phase flipped, its stage + 1, or erased, is a
    verifier error."""
    from fa4mlir.passes import verify_pipelines
    from fa4mlir.passes._util import PassError, ops_named
    from tests.test_kvcache_decode import RING_OPS, _mutated_decode
    cfg = dec.fp8_variant(dec.default_config("bf16", 128, page, grain), variant)
    good = kernels.module(dec.KERNEL).build(cfg)
    with good.module.context:
        verify_pipelines.run(good.module.operation)
        num_ops = len(ops_named(good.module.operation, *RING_OPS))
    # producer: K and V acquire + commit; consumer: wait + release per ring in two loops each
    assert num_ops == 12, num_ops
    for index in range(num_ops):
        for how in ("phase ^ 1", "stage + 1", "erase"):
            kir = _mutated_decode(cfg, index, how)
            if kir is None:
                continue
            with kir.module.context, pytest.raises(PassError):
                verify_pipelines.run(kir.module.operation)


def test_the_set_holds_every_kernel_the_gpu_test_picks():
    from tests.gpu import test_decode_fp8_variants_gpu as gpu
    names = {cfg.name() for _, cfg in kernel_sets.SETS["decode-fp8-variants"]()}
    for variant, page, grain in gpu.CASES:
        for unsplit in (False, True):
            cfg = dec.fp8_variant(dec.default_config("bf16", 128, page, grain, unsplit=unsplit), variant)
            assert cfg.name() in names, cfg.name()


def test_bench_variant_backend_sets_and_restores_the_variant(monkeypatch):
    import os

    from fa4mlir.bench.decode_bench import _with_variant
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, "smem")
    seen = []
    call = _with_variant(lambda: seen.append(os.environ.get(dec.FP8_VARIANT_ENV)) or 7, "swapab")
    assert call() == 7 and seen == ["swapab"] and os.environ[dec.FP8_VARIANT_ENV] == "smem"
    monkeypatch.delenv(dec.FP8_VARIANT_ENV)
    assert call() == 7 and seen == ["swapab", "swapab"] and dec.FP8_VARIANT_ENV not in os.environ
