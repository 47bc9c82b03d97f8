"""Deviceless: the FP8 sparse decode's converter over a cluster of two CTAs (FP8 variant "crossover", opt-in:
MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True, crossover=True); attention_mla_sparse_crossover_sm90,
note "Crossover"; FlashMLA's crossover).

* the dialect's remote store: fa4.peer_address lowers to mapa.shared::cluster, a store through it to
  st.shared::cluster, fence kind "async_smem_cluster" to fence.proxy.async.shared::cluster;
* its config: name, compile key, cluster (2, 1, 1), the converter's SMEM plan and register budgets; refused
  without the converter, with seesaw, as a non-bool; the other kernels' names and keys unchanged;
* its four kernels are in the `mla`, `gpu-tests` and `bench` sets; each compiles with no spills and no stack,
  wgmma not serialised, setmaxnreg 200 / 104, no local memory, the remote stores (ST.E.128 through the mapa
  address) and remote arrives in the SASS;
* fa4-verify-pipelines accepts it (both CTAs' arrivals counted on each CTA's barriers) and rejects every
  single ring-op mutation and each peer_arrive erased;
* the interpreter runs it at 128 heads (-1 padding, other invalid entries, duplicates, NaN rows, a query row
  with no valid entry, topk_length shorter than topk and 0, padded pages, split and unsplit: run_interpreted's
  checks by the FA rule) and finds the default converter kernel's out and lse bits; without a proxy fence
  between the remote stores and the peer's wgmmas (neither the writer's nor the reader's) it reports a
  FenceFault;
* the host runs it when the knob names it at 128 heads and refuses it (typed, before launch) at 64;
  bench mla's fa4mlir[crossover] sets the knob only around its call.
"""
from __future__ import annotations

import dataclasses

import pytest

from fa4mlir import kernel_sets, kernels
from fa4mlir.kernels import attention_mla_sparse_sm90_config as dc
from fa4mlir.kernels.common.fields import ConfigError
from tests._ring_mutations import MUTATIONS, RING_OPS, mutate_ring_op
from tests.test_mla_sparse_decode_fp8 import check_same_bits, check_variant_entries, converter_sass, fp8_decode_args
from tests.test_mla_sparse_decode_fp8 import run_interpreted

XO_ENTRIES = [e for e in kernel_sets.mla() if e[0] == dc.DECODE_KERNEL and e[1].crossover and not e[1].crossover_lean]


def _xo(**kw) -> dc.MLASparseDecodeConfig:
    return dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", fp8_converter=True, crossover=True, **kw)


def test_remote_store_ops_lower_to_cluster_ptx():
    from fa4mlir import lowering
    kir = kernels.module(dc.DECODE_KERNEL).build(_xo())
    assert kir.cluster == (2, 1, 1)
    with kir.module.context:
        ptx, _ = lowering.lower_module(kir.module, kir.arch, target="ptx")
    assert "mapa.shared::cluster" in ptx or "mapa.u32" in ptx or "mapa.u64" in ptx
    assert "st.shared::cluster" in ptx
    assert "fence.proxy.async.shared::cluster" in ptx
    assert "mbarrier.arrive.release.cluster.shared::cluster" in ptx
    assert ptx.count("barrier.cluster.arrive") == 2 and ptx.count("barrier.cluster.wait") == 2


def test_crossover_config_rules():
    cfg = _xo().validate()
    conv = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", fp8_converter=True)
    assert cfg.name() == "attention_mla_sparse_decode_sm90_bf16_fp8_conv_xo" and cfg.key()["crossover"] is True
    assert (cfg.stages, cfg.regs, cfg.smem_bytes(), cfg.params) == (conv.stages, conv.regs, conv.smem_bytes(), conv.params)
    assert "crossover" not in conv.key() and "_xo" not in conv.name()
    _xo(split=True, topk_length=True).validate()
    for bad in (dict(crossover=True), dict(kv_dtype="fp8", crossover=True),
                dict(kv_dtype="fp8", fp8_converter=True, crossover=1),
                dict(kv_dtype="fp8", fp8_converter=True, crossover=True, seesaw=True)):
        with pytest.raises(ConfigError):
            dc.MLASparseDecodeConfig("bf16", **bad).validate()


def test_variant_sets_its_fields_and_is_found_back():
    assert dc.FP8_DECODE_DEFAULT_RULE == "converter"
    for t in (False, True):
        for s in (False, True):
            plain = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", topk_length=t, split=s)
            got = dc.fp8_decode_variant(plain, dc.CROSSOVER_VARIANT)
            assert got == dataclasses.replace(plain, fp8_converter=True, crossover=True)
            assert dc.fp8_decode_variant(got, "converter") == dc.fp8_decode_variant(plain)
            assert dc.fp8_decode_variant_name(got) == dc.CROSSOVER_VARIANT
    from bench.sanitize_mla_sparse_decode import fp8_variant_of, shapes_of
    key = dc.fp8_decode_variant(dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8"), dc.CROSSOVER_VARIANT).key()
    assert fp8_variant_of(key) == dc.CROSSOVER_VARIANT
    assert all(h % 128 == 0 for _, _, h, *_ in shapes_of(key))


def test_crossover_kernels_are_in_the_bundle_sets():
    check_variant_entries(XO_ENTRIES, dc.CROSSOVER_VARIANT)


# compiled here (the rule before crossover_stasync): its unsplit kernel and the topk_length + split one; every entry
# is compiled by the GPU bundle's build
@pytest.mark.parametrize("entry", [e for e in XO_ENTRIES if e[1].split == e[1].topk_length], ids=lambda e: e[1].name())
def test_crossover_compiles_clean(entry):
    from tests._sm100_helpers import sass_count
    name, cfg = entry
    sass = converter_sass(name, cfg)    # no spills, no stack, wgmma not serialised, 200 / 104, no LDL / STL, HGMMAs
    assert sass_count(sass, "ST.E.128") == 18          # 8 rows x 2 latent units + 2 rope units to the peer
    assert sass_count(sass, "SYNCS.ARRIVE.TRANS64.RED") >= 2     # the remote full and empty arrivals
    assert sass_count(sass, "UCGABAR_ARV") == 2 and sass_count(sass, "UCGABAR_WAIT") == 2


def _verify(kir):
    from fa4mlir.passes import verify_pipelines
    with kir.module.context:
        verify_pipelines.run(kir.module.operation)


def test_verifier_accepts_it_and_rejects_every_single_ring_op_mutation():
    from fa4mlir.dialect.query import ops_named
    from fa4mlir.passes._util import PassError
    cfg = _xo(split=True)
    good = kernels.module(dc.DECODE_KERNEL).build(cfg)
    _verify(good)
    with good.module.context:
        num_ops = len(ops_named(good.module.operation, *RING_OPS))
    assert num_ops == 4       # the converter's acquire + commit, the consumers' wait + release
    rejected = 0
    for index in range(num_ops):
        for how in MUTATIONS:
            kir = mutate_ring_op(kernels.module(dc.DECODE_KERNEL).build(cfg), index, how)
            if kir is None:
                continue
            with pytest.raises(PassError):
                _verify(kir)
            rejected += 1
    assert rejected == 10
    for index in range(2):      # the converter's remote commit, the consumers' remote release
        kir = kernels.module(dc.DECODE_KERNEL).build(cfg)
        with kir.module.context:
            peers = ops_named(kir.module.operation, "fa4.peer_arrive")
            assert len(peers) == 2
            peers[index].erase()
        with pytest.raises(PassError):
            _verify(kir)


@pytest.mark.parametrize("batch,seqlen_q,topk,page,splits,topk_length,padded", [
    (1, 1, 128, 64, 1, None, True),          # one cluster: -1 padding, duplicates, NaN rows (query row 0)
    (3, 1, 128, 16, 1, None, False),         # row 2 has no valid entry
    (2, 2, 192, 61, 2, (150, 0), True),      # split 2 over 3 tiles; topk_length < topk, and 0
])
def test_crossover_through_the_interpreter_gives_the_converters_bits(batch, seqlen_q, topk, page, splits, topk_length,
                                                                     padded):
    case = (batch, seqlen_q, 128, topk, page, splits, topk_length, padded)
    check_same_bits(case, dict(crossover=True), dict(converter=True))       # checked by the FA rule inside


@pytest.mark.parametrize("converter,consumers,faults", [(False, True, False), (True, False, False),
                                                        (False, False, True)])
def test_interpreter_needs_a_proxy_fence_between_the_remote_stores_and_the_wgmmas(monkeypatch, converter, consumers,
                                                                                    faults):
    """The peer's wgmma reads the other CTA's st.shared::cluster writes through the async proxy: the writer's
    fence.proxy.async.shared::cluster after its stores (`converter`), or the reader's fence.proxy.async after
    its wait (`consumers`: _kv_tile's, kept from the default kernel), orders them (hb.check_async_proxy_read);
    without both: FenceFault on a converter warp's writes."""
    pytest.importorskip("torch")
    import sys

    from fa4mlir.dsl import KernelBuilder
    from fa4mlir.interpret.faults import FenceFault
    fence = KernelBuilder.fence

    def kept(self, kind):
        if kind == "async_smem_cluster" and not converter:
            return None
        if kind == "async_smem" and not consumers and sys._getframe(1).f_code.co_name == "_kv_tile":
            return None
        return fence(self, kind)
    monkeypatch.setattr(KernelBuilder, "fence", kept)
    if faults:
        with pytest.raises(FenceFault, match=r"\(convert\) wrote"):
            run_interpreted(1, 1, 128, 64, 64, 1, None, False, crossover=True)
    else:
        run_interpreted(1, 1, 128, 64, 64, 1, None, False, crossover=True)


def test_the_knob_selects_it_at_128_heads_only(monkeypatch):
    from fa4mlir.attention import errors as E
    from fa4mlir.attention import mla_sparse_decode as sd
    monkeypatch.delenv(dc.SPARSE_VARIANT_ENV, raising=False)
    monkeypatch.setenv(sd.VARIANT_ENV, dc.CROSSOVER_VARIANT)
    cfg = sd.check_sparse_decode_inputs(**fp8_decode_args(128)).config(False)
    assert cfg == dc.MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True, crossover=True)
    assert (dc.DECODE_KERNEL, cfg) in XO_ENTRIES
    for heads in (64, 16, 80):
        with pytest.raises(E.UnsupportedFeatureError, match="multiple of 128"):
            sd.check_sparse_decode_inputs(**fp8_decode_args(heads))
    monkeypatch.setenv(dc.SPARSE_VARIANT_ENV, "seesaw")
    with pytest.raises(E.UnsupportedFeatureError, match="crossover"):
        sd.check_sparse_decode_inputs(**fp8_decode_args(128))


def test_bench_backend_sets_the_knob_only_around_its_call(monkeypatch):
    import inspect
    import os

    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.bench import mla_bench
    monkeypatch.delenv(sd.VARIANT_ENV, raising=False)
    seen = []
    run = mla_bench.with_fp8_variant("crossover", lambda: seen.append(sd.requested_variant()) or "out")
    assert run() == "out" and seen == ["crossover"] and sd.VARIANT_ENV not in os.environ
    src = inspect.getsource(mla_bench.mla_sparse_decode_rows)
    # the rule runs crossover_stasync at the row's 128 heads (FP8_DECODE_CROSSOVER_RULE); the backends beside it are
    # the converter and the crossover (the rule's before it)
    assert src.count('call["fa4mlir[converter]"] = lambda: with_fp8_variant("converter"') == 1
    assert src.count('call["fa4mlir[crossover]"] = lambda: with_fp8_variant("crossover"') == 1
    assert dc.FP8_DECODE_CROSSOVER_RULE == "crossover_stasync"
