"""Deviceless: the converter-warpgroup kernel of the sm_90a sparse MLA decode over FlashMLA's FP8 cache
(MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True): attention_mla_sparse_sm90, note "FP8
converter"; config note "FP8 converter plan"), the default by FP8_DECODE_DEFAULT_RULE
(FA4MLIR_MLA_SPARSE_FP8_VARIANT=gather selects the kernel before it).

* its config: name, compile key, SMEM plan (two bf16 tiles, no staging stage), register budgets that
  fill the launch pool exactly; converter without the FP8 cache refused; the default configs'
  names and keys unchanged;
* FP8_DECODE_DEFAULT_RULE picks it for every FP8 sparse decode kernel; unknown variant names refused;
* its four kernels and the gather kernels are in the `mla`, `gpu-tests` and `bench` sets; it compiles with no spills and no stack, wgmma not
  serialised, setmaxnreg 200 / 104 in the SASS and no local-memory instruction;
* fa4-verify-pipelines accepts it and rejects every single ring-op mutation (phase flipped, stage + 1,
  erased);
* the interpreter runs it on the FP8 decode test's tiny problems (-1 padding, other invalid entries,
  duplicates, topk_length shorter than topk and 0, NaN rows, a query row with no valid entry, 16 / 64
  / 80 heads, padded pages, split and unsplit) by the FA rule;
* it gives the default FP8 kernel's out and lse bits on the 5-tile case;
* the host selects it by default and the gather kernel when the knob names it (unknown: KnobError);
  bench mla's fa4mlir[gather] sets the knob only around its call.
"""
from __future__ import annotations

import dataclasses

import pytest

from fa4mlir import kernel_sets, kernels
from fa4mlir.kernels import attention_mla_sparse_sm90_config as dc
from fa4mlir.kernels.common.fields import ConfigError
from tests._ring_mutations import MUTATIONS, RING_OPS, mutate_ring_op
from tests.test_mla_sparse_decode_fp8 import check_in_bundle_sets, check_same_bits, converter_sass, fp8_decode_args
from tests.test_mla_sparse_decode_fp8 import fp8_plain_configs, run_interpreted

CONV_ENTRIES = [e for e in kernel_sets.mla() if e[0] == dc.DECODE_KERNEL and e[1].fp8_converter and not e[1].crossover]
# the crossover variants: tests/test_mla_sparse_decode_fp8_{crossover,lean,stasync}.py


def test_converter_config_rules():
    cfg = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", fp8_converter=True).validate()
    assert cfg.name() == "attention_mla_sparse_decode_sm90_bf16_fp8_conv" and cfg.key()["fp8_converter"] is True
    assert cfg.stages == 2 and cfg.regs == (dc.CONVERTER_MMA_REGS, dc.CONVERTER_REGS) == (200, 104)
    # Q + two 64-row bf16 tiles + exchange + bias slots + q_slot + mbarriers; no staging stage, no row table
    assert cfg.smem_bytes() == 64 * 576 * 2 * 3 + cfg.exchange_bytes() + cfg.bias_bytes() + 16 + 4 * 8 <= dc.SMEM_LIMIT
    fits, need, pool = dc.register_pool_fits(cfg.threads, *cfg.regs, dc.CONSUMERS)
    assert fits and need == pool == 384 * 168
    for plain in (dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8"), dc.MLASparseDecodeConfig("bf16")):
        assert "fp8_converter" not in plain.key() and "_conv" not in plain.name()
        assert plain.regs == (dc.MMA_REGS, dc.LOAD_REGS)
    for bad in (dict(fp8_converter=True), dict(kv_dtype="fp8", fp8_converter=1)):
        with pytest.raises(ConfigError):
            dc.MLASparseDecodeConfig("bf16", **bad).validate()


def test_the_default_rule_picks_the_converter_for_every_fp8_kernel():
    for t in (False, True):
        for s in (False, True):
            cfg = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", topk_length=t, split=s)
            assert dc.converter_built(cfg) and dc.fp8_decode_default_variant(cfg) == dc.FP8_DECODE_DEFAULT_RULE
            assert dc.fp8_decode_variant(cfg) == dc.fp8_decode_variant(cfg, "converter") == \
                dataclasses.replace(cfg, fp8_converter=True)
            assert dc.fp8_decode_variant(dataclasses.replace(cfg, fp8_converter=True), "gather") == cfg
    assert dc.FP8_DECODE_DEFAULT_RULE == "converter"
    assert set(dc.FP8_DECODE_VARIANTS) == {"converter", "gather", dc.CROSSOVER_VARIANT, dc.LEAN_VARIANT,
                                           dc.STASYNC_VARIANT}
    with pytest.raises(ConfigError, match="unknown FP8 sparse decode variant"):
        dc.fp8_decode_variant(dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8"), "conv")
    with pytest.raises(ConfigError, match="FP8 cache"):
        dc.fp8_decode_variant(dc.MLASparseDecodeConfig("bf16"), "gather")


def test_both_variants_are_in_the_bundle_sets():
    fp8 = fp8_plain_configs()
    assert {cfg for _, cfg in CONV_ENTRIES} == {dc.fp8_decode_variant(c) for c in fp8}
    check_in_bundle_sets([(dc.DECODE_KERNEL, dc.fp8_decode_variant(c, v)) for c in fp8 for v in dc.FP8_DECODE_VARIANTS])


@pytest.mark.parametrize("entry", CONV_ENTRIES, ids=lambda e: e[1].name())
def test_converter_compiles_clean(entry):
    from tests._sm100_helpers import sass_count
    name, cfg = entry
    sass = converter_sass(name, cfg)    # no spills, no stack, wgmma not serialised, 200 / 104, no LDL / STL, HGMMAs
    assert sass_count(sass, "F2FP.F16.E4M3.UNPACK_B") > 0


def test_verifier_rejects_every_single_ring_op_mutation():
    from fa4mlir.dialect.query import ops_named
    from fa4mlir.passes import verify_pipelines
    from fa4mlir.passes._util import PassError
    cfg = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", fp8_converter=True, split=True)
    good = kernels.module(dc.DECODE_KERNEL).build(cfg)
    with good.module.context:
        verify_pipelines.run(good.module.operation)
        num_ops = len(ops_named(good.module.operation, *RING_OPS))
    assert num_ops == 4       # the converter's acquire + commit, the consumers' wait + release
    rejected = 0
    for index in range(num_ops):
        for how in MUTATIONS:
            kir = mutate_ring_op(kernels.module(dc.DECODE_KERNEL).build(cfg), index, how)
            if kir is None:
                continue
            with kir.module.context, pytest.raises(PassError):
                verify_pipelines.run(kir.module.operation)
            rejected += 1
    assert rejected == 10


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,page,splits,topk_length,padded", [
    (3, 1, 16, 128, 16, 1, None, False),         # 16 heads: 48 masked rows; row 2 has no valid entry
    (2, 2, 64, 192, 61, 2, (150, 0), True),      # split 2 over 3 tiles; topk_length < topk and 0; padded pages
    (1, 2, 80, 128, 64, 4, None, True),          # two head blocks, the second 16 real rows; 2 empty splits
    (2, 1, 64, 320, 64, 1, (300, 0), False),     # 5 tiles unsplit: the two-tile ring wraps twice (phases flip)
])
def test_converter_through_the_interpreter(batch, seqlen_q, heads, topk, page, splits, topk_length, padded):
    run_interpreted(batch, seqlen_q, heads, topk, page, splits, topk_length, padded, converter=True)


def test_converter_gives_the_default_kernels_bits():
    """The same bf16 tile values, GEMMs and softmax order as the default FP8 kernel: the same out and lse bits
    (what tests/gpu/test_mla_sparse_decode_fp8_conv_gpu.py asserts on the GPU)."""
    case = (2, 1, 64, 320, 64, 1, (300, 0), False)
    check_same_bits(case, dict(converter=False), dict(converter=True))


def test_host_selects_the_converter_by_default_and_gather_when_asked(monkeypatch):
    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.attention.errors import KnobError
    from tests._mla_helpers import info
    args = fp8_decode_args()
    plain = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", split=True)
    monkeypatch.delenv(sd.VARIANT_ENV, raising=False)
    cfg = sd.check_sparse_decode_inputs(**args).config(True)
    # FP8_DECODE_CROSSOVER_RULE: at 128 heads the converter runs as crossover_stasync; at 64 the plain converter
    assert cfg == dataclasses.replace(plain, fp8_converter=True, crossover=True, crossover_lean=True,
                                      crossover_stasync=True)
    monkeypatch.setenv(sd.VARIANT_ENV, "default")
    assert sd.check_sparse_decode_inputs(**args).config(True) == cfg
    h64 = dict(args, q=info((4, 2, 64, 576)))
    cfg = sd.check_sparse_decode_inputs(**h64).config(True)
    assert cfg == dataclasses.replace(plain, fp8_converter=True) and (dc.DECODE_KERNEL, cfg) in CONV_ENTRIES
    monkeypatch.setenv(sd.VARIANT_ENV, "converter")
    assert sd.check_sparse_decode_inputs(**args).config(True) == cfg
    monkeypatch.setenv(sd.VARIANT_ENV, "gather")
    assert sd.check_sparse_decode_inputs(**args).config(True) == plain
    bf16 = dict(args, k_cache=info((100, 64, 1, 576)), is_fp8_kvcache=False)     # the knob leaves bf16 alone
    rule = dc.MLASparseDecodeConfig("bf16", producer_warps=4, seesaw=True, pair_fill=True)   # SPARSE_DECODE_DEFAULT_RULE's
    assert sd.check_sparse_decode_inputs(**bf16).config(False) == rule
    monkeypatch.setenv(sd.VARIANT_ENV, "conv")
    with pytest.raises(KnobError, match="FA4MLIR_MLA_SPARSE_FP8_VARIANT='conv'"):
        sd.check_sparse_decode_inputs(**args)
    assert sd.check_sparse_decode_inputs(**bf16).config(False) == rule
    monkeypatch.delenv(sd.VARIANT_ENV)
    monkeypatch.setenv(sd.RETIRED_CONVERTER_ENV, "0")     # would silently run the converter: refused
    with pytest.raises(KnobError, match="retired"):
        sd.check_sparse_decode_inputs(**args)


def test_bench_backend_sets_the_knob_only_around_its_call(monkeypatch):
    import os

    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.bench import mla_bench
    monkeypatch.delenv(sd.VARIANT_ENV, raising=False)
    seen = []
    run = mla_bench.with_fp8_variant("gather", lambda: seen.append(sd.requested_variant()) or "out")
    assert run() == "out" and seen == ["gather"] and sd.VARIANT_ENV not in os.environ
    monkeypatch.setenv(sd.VARIANT_ENV, "converter")
    assert run() == "out" and seen == ["gather", "gather"] and os.environ[sd.VARIANT_ENV] == "converter"
