"""Deviceless: the opt-in converter-warpgroup variant of the sm_90a sparse MLA decode over FlashMLA's FP8
cache (MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True): attention_mla_sparse_sm90, note "FP8
converter"; config note "FP8 converter plan"; FA4MLIR_MLA_SPARSE_FP8_CONVERTER selects it).

* its config: name, compile key, SMEM plan (two bf16 tiles, no staging stage), register budgets that
  fill the launch pool exactly; converter without the FP8 cache refused; the default configs'
  names and keys unchanged;
* its four kernels are in the `mla` bundle set, compile with no spills and no stack, wgmma not
  serialised, setmaxnreg 200 / 104 in the SASS and no local-memory instruction;
* fa4-verify-pipelines accepts it and rejects every single ring-op mutation (phase flipped, stage + 1,
  erased);
* the interpreter runs it on the FP8 decode test's tiny problems (-1 padding, other invalid entries,
  duplicates, topk_length shorter than topk and 0, NaN rows, a query row with no valid entry, 16 / 64
  / 80 heads, padded pages, split and unsplit) by the FA rule;
* it gives the default FP8 kernel's out and lse bits on the 5-tile case;
* the host selects it only when the knob is set.
"""
from __future__ import annotations

import dataclasses

import pytest

from fa4mlir import kernel_sets, kernels
from fa4mlir.kernels import attention_mla_sparse_sm90_config as dc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import check_sparse_art, lower_clean
from tests._ring_mutations import MUTATIONS, RING_OPS, mutate_ring_op
from tests.test_mla_sparse_decode_fp8 import run_interpreted

CONV_ENTRIES = [e for e in kernel_sets.mla() if e[0] == dc.DECODE_KERNEL and e[1].fp8_converter]


def test_converter_config_rules():
    cfg = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", fp8_converter=True).validate()
    assert cfg.name() == "attention_mla_sparse_decode_sm90_bf16_fp8_conv" and cfg.key()["fp8_converter"] is True
    assert cfg.stages == 2 and cfg.regs == (dc.CONVERTER_MMA_REGS, dc.CONVERTER_REGS) == (200, 104)
    # Q + two 64-row bf16 tiles + exchange + bias slots + q_slot + mbarriers; no staging stage, no row table
    assert cfg.smem_bytes() == 64 * 576 * 2 * 3 + cfg.exchange_bytes() + cfg.bias_bytes() + 16 + 4 * 8 <= dc.SMEM_LIMIT
    fits, need, pool = dc.register_pool_fits(cfg.threads, *cfg.regs, dc.CONSUMERS)
    assert fits and need == pool == 384 * 168
    for default in (dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8"), dc.MLASparseDecodeConfig("bf16")):
        assert "fp8_converter" not in default.key() and "_conv" not in default.name()
        assert default.regs == (dc.MMA_REGS, dc.LOAD_REGS)
    for bad in (dict(fp8_converter=True), dict(kv_dtype="fp8", fp8_converter=1)):
        with pytest.raises(ConfigError):
            dc.MLASparseDecodeConfig("bf16", **bad).validate()


def test_converter_kernels_are_in_the_mla_set():
    assert {cfg for _, cfg in CONV_ENTRIES} == {
        dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", topk_length=t, split=s, fp8_converter=True)
        for t in (False, True) for s in (False, True)}
    assert all(e in kernel_sets.gpu_tests() and e in kernel_sets.bench() for e in CONV_ENTRIES)


@pytest.mark.parametrize("entry", CONV_ENTRIES, ids=lambda e: e[1].name())
def test_converter_compiles_clean(entry):
    name, cfg = entry
    art = lower_clean(name, cfg)
    check_sparse_art(art, cfg)
    from tests._sm100_helpers import role_budgets, sass_count, sass_of
    sass = sass_of(art)
    assert role_budgets(sass) == {200, 104}
    assert all(sass_count(sass, op) == 0 for op in ("LDL", "STL")), "local memory in the SASS"
    assert sass_count(sass, "HGMMA.64x32x16.F32.BF16") > 0 and sass_count(sass, "F2FP.F16.E4M3.UNPACK_B") > 0


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
    torch = pytest.importorskip("torch")
    case = (2, 1, 64, 320, 64, 1, (300, 0), False)
    (out, lse), (out_c, lse_c) = (run_interpreted(*case, converter=c) for c in (False, True))
    assert torch.equal(out, out_c) and torch.equal(lse, lse_c)


def test_host_selects_the_converter_only_when_asked(monkeypatch):
    from fa4mlir.attention import mla_sparse_decode as sd
    from tests._mla_helpers import info
    args = dict(q=info((4, 2, 128, 576)), k_cache=info((100, 64, 1, 656), "e4m3"), indices=info((4, 2, 2048), "i32"),
                head_dim_v=512, metadata=info((1, 8), "i32"), num_splits=info((5,), "i32"), is_fp8_kvcache=True)
    monkeypatch.delenv(sd.CONVERTER_ENV, raising=False)
    assert not sd.check_sparse_decode_inputs(**args).config(False).fp8_converter
    monkeypatch.setenv(sd.CONVERTER_ENV, "1")
    cfg = sd.check_sparse_decode_inputs(**args).config(True)
    assert cfg == dataclasses.replace(dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", split=True), fp8_converter=True)
    assert (dc.DECODE_KERNEL, cfg) in CONV_ENTRIES
    bf16 = dict(args, k_cache=info((100, 64, 1, 576)), is_fp8_kvcache=False)     # the knob leaves bf16 alone
    assert not sd.check_sparse_decode_inputs(**bf16).config(False).fp8_converter


def test_bench_backend_sets_the_knob_only_around_its_call(monkeypatch):
    import os

    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.bench import mla_bench
    monkeypatch.delenv(sd.CONVERTER_ENV, raising=False)
    seen = []
    run = mla_bench.with_converter(lambda: seen.append(sd.converter_requested()) or "out")
    assert run() == "out" and seen == [True] and sd.CONVERTER_ENV not in os.environ
    monkeypatch.setenv(sd.CONVERTER_ENV, "0")
    assert run() == "out" and seen == [True, True] and os.environ[sd.CONVERTER_ENV] == "0"
