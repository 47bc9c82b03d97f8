"""Deviceless: the FP8 sparse decode's converter with its rolling prefetch (FP8 variant "prefetch", opt-in:
MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True, converter_prefetch=True);
attention_mla_sparse_prefetch_sm90, note "FP8 converter prefetch").

* its config: name, compile key, the converter's SMEM plan and register budgets; refused without the converter,
  as a non-bool and with the seesaw step; the other kernels' names and keys unchanged;
* FP8_DECODE_VARIANTS: "prefetch" sets both fields, every variant's name found back from its config (and from
  a compile key, as bench/sanitize_mla_sparse_decode does); the default rule unchanged;
* its four kernels are in the `mla`, `gpu-tests` and `bench` sets; each compiles with no spills and no stack,
  wgmma not serialised, setmaxnreg 200 / 104, no local memory, the rope's cp.asyncs (LDGSTS) and the scale
  shuffles in the SASS; note "Schedules" picks the early scale word only with topk_length and a split;
* fa4-verify-pipelines accepts it and rejects every single ring-op mutation;
* the interpreter runs it on the converter's cases (-1 padding, other invalid entries, duplicates,
  topk_length shorter than topk and 0, NaN rows, a query row with no valid entry, 16 / 64 / 80 heads,
  padded pages, split and unsplit: run_interpreted's checks by the FA rule) and finds the default converter
  kernel's out and lse bits in each;
* the host runs it when the knob names it (and refuses it with FA4MLIR_MLA_SPARSE_VARIANT=seesaw);
  bench mla's fa4mlir[prefetch] sets the knob only around its call.
"""
from __future__ import annotations

import dataclasses

import pytest

from fa4mlir import kernel_sets, kernels
from fa4mlir.kernels import attention_mla_sparse_prefetch_sm90 as pf
from fa4mlir.kernels import attention_mla_sparse_sm90_config as dc
from fa4mlir.kernels.common.fields import ConfigError
from tests._ring_mutations import MUTATIONS, RING_OPS, mutate_ring_op
from tests.test_mla_sparse_decode_fp8 import check_same_bits, check_variant_entries, converter_sass, fp8_decode_args

PF_ENTRIES = [e for e in kernel_sets.mla() if e[0] == dc.DECODE_KERNEL and e[1].converter_prefetch]


def test_prefetch_config_rules():
    cfg = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", fp8_converter=True, converter_prefetch=True).validate()
    conv = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", fp8_converter=True)
    assert cfg.name() == "attention_mla_sparse_decode_sm90_bf16_fp8_conv_pf" and cfg.key()["converter_prefetch"] is True
    assert (cfg.stages, cfg.regs, cfg.smem_bytes(), cfg.params) == (conv.stages, conv.regs, conv.smem_bytes(), conv.params)
    assert "converter_prefetch" not in conv.key() and "_pf" not in conv.name()
    for bad in (dict(converter_prefetch=True), dict(kv_dtype="fp8", converter_prefetch=True),
                dict(kv_dtype="fp8", fp8_converter=True, converter_prefetch=1),
                dict(kv_dtype="fp8", fp8_converter=True, converter_prefetch=True, seesaw=True)):
        with pytest.raises(ConfigError):
            dc.MLASparseDecodeConfig("bf16", **bad).validate()


def test_variants_set_their_fields_and_are_found_back():
    assert set(dc.FP8_DECODE_VARIANTS) == {"converter", "gather", dc.PREFETCH_VARIANT, dc.CROSSOVER_VARIANT,
                                           dc.LEAN_VARIANT, dc.AHEAD_VARIANT, dc.STASYNC_VARIANT,
                                           dc.AHEAD_STASYNC_VARIANT, dc.HINT_VARIANT}
    assert dc.FP8_DECODE_DEFAULT_RULE == "converter"
    for t in (False, True):
        for s in (False, True):
            plain = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", topk_length=t, split=s)
            got = dc.fp8_decode_variant(plain, "prefetch")
            assert got == dataclasses.replace(plain, fp8_converter=True, converter_prefetch=True)
            assert dc.fp8_decode_variant(got, "converter") == dc.fp8_decode_variant(plain)     # the field reset
            assert dc.fp8_decode_variant(got, "gather") == plain
            for name in dc.FP8_DECODE_VARIANTS:
                assert dc.fp8_decode_variant_name(dc.fp8_decode_variant(plain, name)) == name
    from bench.sanitize_mla_sparse_decode import fp8_variant_of
    for name in dc.FP8_DECODE_VARIANTS:
        key = dc.fp8_decode_variant(dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8"), name).key()
        assert fp8_variant_of(key) == name


def test_prefetch_kernels_are_in_the_bundle_sets():
    check_variant_entries(PF_ENTRIES, "prefetch")


def test_only_topk_length_with_a_split_loads_the_scale_word_early():
    early = {(c.topk_length, c.split) for _, c in PF_ENTRIES if pf.early_scale(c)}
    assert early == {(True, True)}


# compiled here (opt-in): the unsplit kernel and the topk_length + split one (the early scale word); every entry is
# compiled by the GPU bundle's build
@pytest.mark.parametrize("entry", [e for e in PF_ENTRIES if e[1].split == e[1].topk_length], ids=lambda e: e[1].name())
def test_prefetch_compiles_clean(entry):
    from tests._sm100_helpers import sass_count
    name, cfg = entry
    sass = converter_sass(name, cfg)    # no spills, no stack, wgmma not serialised, 200 / 104, no LDL / STL, HGMMAs
    assert sass_count(sass, "F2FP.F16.E4M3.UNPACK_B") > 0
    assert sass_count(sass, "LDGSTS") > 0 and sass_count(sass, "SHFL.IDX") > 0      # notes "Rope", "Shared scales"


def test_verifier_rejects_every_single_ring_op_mutation():
    from fa4mlir.dialect.query import ops_named
    from fa4mlir.passes import verify_pipelines
    from fa4mlir.passes._util import PassError
    cfg = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", fp8_converter=True, converter_prefetch=True, split=True)
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
    # (opt-in, slower than the converter: two cases)
    (2, 2, 64, 192, 61, 2, (150, 0), True),      # split 2 over 3 tiles (the early scale word); topk_length < topk, 0
    (2, 1, 64, 320, 64, 1, (300, 0), False),     # 5 tiles unsplit: the refills cross 4 tile boundaries
])
def test_prefetch_through_the_interpreter_gives_the_converters_bits(batch, seqlen_q, heads, topk, page, splits,
                                                                   topk_length, padded):
    case = (batch, seqlen_q, heads, topk, page, splits, topk_length, padded)
    check_same_bits(case, dict(prefetch=True), dict(converter=True))        # checked by the FA rule inside


def test_the_knob_selects_it_and_seesaw_refuses_it(monkeypatch):
    from fa4mlir.attention import errors as E
    from fa4mlir.attention import mla_sparse_decode as sd
    args = fp8_decode_args()
    monkeypatch.delenv(dc.SPARSE_VARIANT_ENV, raising=False)
    monkeypatch.setenv(sd.VARIANT_ENV, "prefetch")
    cfg = sd.check_sparse_decode_inputs(**args).config(False)
    assert cfg == dc.MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True, converter_prefetch=True)
    assert (dc.DECODE_KERNEL, cfg) in PF_ENTRIES
    monkeypatch.setenv(dc.SPARSE_VARIANT_ENV, "seesaw")
    with pytest.raises(E.UnsupportedFeatureError, match="prefetch"):
        sd.check_sparse_decode_inputs(**args)


def test_bench_backend_sets_the_knob_only_around_its_call(monkeypatch):
    import inspect
    import os

    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.bench import mla_bench
    monkeypatch.delenv(sd.VARIANT_ENV, raising=False)
    seen = []
    run = mla_bench.with_fp8_variant("prefetch", lambda: seen.append(sd.requested_variant()) or "out")
    assert run() == "out" and seen == ["prefetch"] and sd.VARIANT_ENV not in os.environ
    src = inspect.getsource(mla_bench.mla_sparse_decode_rows)
    assert src.count('call["fa4mlir[prefetch]"] = lambda: with_fp8_variant("prefetch"') == 1
