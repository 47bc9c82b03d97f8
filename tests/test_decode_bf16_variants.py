"""Deviceless: the bf16 decode kernel's tile variants (attention_decode_sm90_config.BF16_SWEEP, entries of
TILE_VARIANTS chosen by FA4MLIR_DECODE_TILE_VARIANT; issue #27's decode_dense bar): "bn128s2" (128-key tiles,
2 stages: UNSPLIT_RULE's) and "bn64s3" (the tiles before UNSPLIT_RULE). UNSPLIT_RULE ([D-decode-bn128-unsplit]): an
unsplit call over a contiguous D128 16-bit cache of at most UNSPLIT_RULE_MAX_ROWS packed rows runs bn128s2's tiles;
more rows, a split, a mask or a paged cache keep bn 64.

* config rules: each in the `decode-bf16-variants` set at decode_dense's shape with the CTAs per SM its table entry
  plans; decode_dense plans one split with the set's kernel;
* each compiles (through fa4-verify-pipelines, also run on its own here) with no spill, no stack, no serialised
  wgmma.
"""
from __future__ import annotations

import pytest

from fa4mlir import compiler, kernel_sets, kernels
from fa4mlir.kernels import attention_decode_sm90_config as dec

NAMES = list(dec.BF16_SWEEP)
BASE = dec.default_config("bf16", 128, None, unsplit=True)         # rows unknown: the tiles before UNSPLIT_RULE
RULE = dec.default_config("bf16", 128, None, unsplit=True, rows=4)  # decode_dense's 4 packed rows: UNSPLIT_RULE's
_COMPILED: dict = {}


def _variant(name: str) -> dec.DecodeConfig:
    return dec.tile_variant(BASE, name)


def _compiled(name: str):
    if name not in _COMPILED:
        cfg = _variant(name)
        _COMPILED[name] = compiler.build_and_lower(dec.KERNEL, cfg, compiler.resolve_options(dec.KERNEL), "test")
    return _COMPILED[name]


def test_config_key_name_and_set_rules(monkeypatch):
    the_set = kernel_sets.SETS["decode-bf16-variants"]()
    assert the_set[0] == (dec.KERNEL, RULE) and RULE == _variant(dec.UNSPLIT_RULE) == _variant("bn128s2")
    assert _variant("bn64s3") == BASE
    fp8_set = set(kernel_sets.SETS["decode-fp8-variants"]())
    # BF16_SWEEP: this set only, but for the decode set's own two (the rule's and the tiles before it)
    defaults = {(dec.KERNEL, RULE), (dec.KERNEL, BASE)}
    assert defaults <= set(kernel_sets.decode())
    assert {(dec.KERNEL, _variant(n)) for n in NAMES} & fp8_set == defaults
    # every TILE_VARIANTS entry once ("default", the rule's, is bn128s2's kernel)
    assert len(the_set) == len(dec.TILE_VARIANTS) - 1
    assert set(the_set) - fp8_set == {(dec.KERNEL, _variant(n)) for n in NAMES} - defaults
    for name in NAMES:
        cfg = _variant(name)
        fields, ctas = dec.TILE_VARIANTS[name]
        assert (dec.KERNEL, cfg) in the_set
        assert (cfg.bn, cfg.stages) == (fields.get("bn", BASE.bn), fields.get("stages", BASE.stages))
        assert cfg.box_rows == cfg.bn and cfg.unsplit and not cfg.paged
        assert cfg.ctas_per_sm == ctas, (name, cfg.smem_bytes())
        assert cfg.smem_bytes() <= (dec.MAX_SMEM_2CTA if ctas == 2 else dec.SMEM_LIMIT)
        _decode_dense_plan(name, monkeypatch, the_set)
    assert BASE.name() == "attention_decode_sm90_bf16_d128_n64_s3_contig_unsplit"
    monkeypatch.setenv(dec.TILE_VARIANT_ENV, "bn64s3")
    with pytest.raises(dec.ConfigError, match="contiguous head_dim-128"):
        dec.runtime_config("bf16", 128, 64)
    monkeypatch.delenv(dec.TILE_VARIANT_ENV)
    from fa4mlir.bench.decode_bench import split_variants
    assert split_variants(["default", "bn64s3", "bn128s2"]) == (["default"], ["default", "bn64s3", "bn128s2"])


def _decode_dense_plan(name, monkeypatch, the_set):
    """bench decode's decode_dense on 132 SMs plans one split with the variant's kernel (of this set)."""
    import numpy as np

    from fa4mlir.attention import kvcache as kc
    from fa4mlir.attention.kvcache_call import configs_for
    from fa4mlir.runtime import TensorInfo
    monkeypatch.setenv(dec.TILE_VARIANT_ENV, name)

    def info(shape, dtype):
        return TensorInfo(1 << 20, shape, tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape))), dtype, "cuda")
    problem = kc.check_kvcache_inputs(info((64, 1, 32, 128), "bf16"), info((64, 8192, 8, 128), "bf16"),
                                      info((64, 8192, 8, 128), "bf16"), info((64,), "i32"))
    plan = kc.plan_problem(problem.with_options(causal=True, softmax_scale=128 ** -0.5, num_splits=None,
                                                return_lse=False), 132)
    cfg, combine = configs_for(plan)
    assert plan.unsplit and combine is None and cfg == _variant(name) and (dec.KERNEL, cfg) in the_set
    monkeypatch.delenv(dec.TILE_VARIANT_ENV)


@pytest.mark.parametrize("name", NAMES)
def test_variant_compiles_without_spills_and_the_verifier_accepts_it(name):
    from fa4mlir.passes import verify_pipelines
    cfg = _variant(name)
    kir = kernels.module(dec.KERNEL).build(cfg)
    with kir.module.context:
        verify_pipelines.run(kir.module.operation)
    res = _compiled(name).resources
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0 and res["stack_bytes"] == 0, res
    assert not res["wgmma_serialized"], res
    # the kernel declares its CTAs per SM: two CTAs of 160 threads leave at most 204 registers
    assert res["registers"] <= (204 if cfg.ctas_per_sm == 2 else 255), res


def test_unsplit_rule_picks_bn128s2_for_few_rows_only(monkeypatch):
    monkeypatch.delenv(dec.TILE_VARIANT_ENV, raising=False)
    for dtype in ("bf16", "f16"):
        rule = dec.runtime_config(dtype, 128, None, unsplit=True, rows=dec.UNSPLIT_RULE_MAX_ROWS)
        assert (rule.bn, rule.stages, rule.ctas_per_sm) == (128, 2, 1) and (dec.KERNEL, rule) in kernel_sets.decode()
        for kept in (dec.runtime_config(dtype, 128, None, unsplit=True, rows=dec.UNSPLIT_RULE_MAX_ROWS + 1),
                     dec.runtime_config(dtype, 128, None, unsplit=False, rows=1),      # the split kernel (and the plan's)
                     dec.runtime_config(dtype, 128, 64, unsplit=True, rows=1),         # paged
                     dec.runtime_config(dtype, 128, None, unsplit=True, rows=1, window_left=127),
                     dec.runtime_config(dtype, 128, None, unsplit=True),               # rows unknown
                     dec.default_config(dtype, 64, None, unsplit=True, rows=1)):
            assert (kept.bn, kept.stages) == (64, dec.DEFAULT_STAGES[kept.head_dim]), kept.name()
    # an FP8 cache's rule is its own (rows go to FP8_DEFAULT_RULE)
    assert dec.runtime_config("bf16", 128, None, "kv_head", unsplit=True, rows=4).bn == 64
    # the A/B name gives the tiles before the rule back
    monkeypatch.setenv(dec.TILE_VARIANT_ENV, "bn64s3")
    assert dec.runtime_config("bf16", 128, None, unsplit=True, rows=4) == BASE

