"""Deviceless: the crossover's lean hand-off (FP8 variant "crossover_lean", opt-in:
MLASparseDecodeConfig.crossover_lean; attention_mla_sparse_crossover_sm90, note "Lean hand-off").

* the dialect: fa4.peer_arrive scope "cta" lowers to mbarrier.arrive.shared::cluster without release.cluster
  (the consumers' release into the peer), the converter's arrive on the peer's full stays release.cluster;
  scope "cta" on side "full" is refused;
* the config: name, key (the other kernels' keys and names unchanged), refused without the crossover, as a
  non-bool; the variant sets its fields and is found back; the host refuses it at 64 heads; bench mla's backend
  fa4mlir[crossover_lean] exists;
* its four kernels are in the `mla`, `gpu-tests` and `bench` sets; each compiles with no spills and no stack,
  wgmma not serialised, setmaxnreg 200 / 104, no local memory; one MEMBAR.ALL.GPU fewer than the crossover's
  SASS;
* fa4-verify-pipelines accepts it and rejects the consumers' peer release erased;
* the interpreter runs it at 128 heads (-1 padding, duplicates, NaN rows): run_interpreted's checks by the FA rule
  against the float64 reference over the cache dequantized as the kernel does (testing_mla.dequantize_fp8_cache),
  and the crossover's out and lse bits.
"""
from __future__ import annotations

import dataclasses
import functools

import pytest

from fa4mlir import kernel_sets, kernels
from fa4mlir.kernels import attention_mla_sparse_sm90_config as dc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import lower_clean
from tests.test_mla_sparse_decode_fp8 import check_knob_at_128_heads, check_same_bits, check_variant_entries, converter_sass
from tests.test_mla_sparse_decode_fp8 import fp8_ptx as _ptx

LEAN_ENTRIES = [e for e in kernel_sets.mla() if e[0] == dc.DECODE_KERNEL and e[1].crossover_lean
                and not e[1].crossover_stasync]


def _cfg(**kw) -> dc.MLASparseDecodeConfig:
    return dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", fp8_converter=True, crossover=True, crossover_lean=True,
                                    **kw)


def test_consumer_release_lowers_at_cta_scope():
    xo, lean = _ptx(dataclasses.replace(_cfg(), crossover_lean=False)), _ptx(_cfg())
    remote = "mbarrier.arrive.release.cluster.shared::cluster"
    assert xo.count(remote) == 2 and lean.count(remote) == 1          # the converter's on full stays
    assert "mbarrier.arrive.shared::cluster.b64" not in xo and lean.count("mbarrier.arrive.shared::cluster.b64") == 1
    assert lean.count("fence.proxy.async.shared::cluster") == 1


def test_cta_scope_is_refused_on_full():
    from fa4mlir.dsl.core import Pipeline
    from fa4mlir.lowering import CompileError
    real = Pipeline.peer_arrive

    def on_full_too(self, s, rank, side="full", scope="cluster"):
        return real(self, s, rank, side, "cta")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Pipeline, "peer_arrive", on_full_too)
        with pytest.raises(CompileError, match="scope 'cta' on side 'full'"):
            _ptx(_cfg())


def test_config_rules():
    lean = _cfg().validate()
    xo = dataclasses.replace(lean, crossover_lean=False)
    assert lean.name() == "attention_mla_sparse_decode_sm90_bf16_fp8_conv_xo_lean"
    assert lean.key()["crossover_lean"] is True
    assert "crossover_lean" not in xo.key() and "_lean" not in xo.name()
    assert (lean.stages, lean.regs, lean.smem_bytes(), lean.params) == (xo.stages, xo.regs, xo.smem_bytes(), xo.params)
    _cfg(split=True, topk_length=True).validate()
    base = dict(kv_dtype="fp8", fp8_converter=True)
    for bad in (dict(base, crossover_lean=True), dict(base, crossover=True, crossover_lean=1)):
        with pytest.raises(ConfigError):
            dc.MLASparseDecodeConfig("bf16", **bad).validate()


def test_variant_sets_its_fields_and_the_host_refuses_it_at_64_heads(monkeypatch):
    from fa4mlir.bench import mla_bench
    plain = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", split=True)
    got = dc.fp8_decode_variant(plain, dc.LEAN_VARIANT)
    assert got == _cfg(split=True) and dc.fp8_decode_variant_name(got) == dc.LEAN_VARIANT
    assert dc.fp8_decode_variant(got, dc.CROSSOVER_VARIANT).crossover_lean is False
    check_knob_at_128_heads(monkeypatch, dc.LEAN_VARIANT, _cfg())
    import inspect
    src = inspect.getsource(mla_bench.mla_sparse_decode_rows)
    assert src.count('call["fa4mlir[crossover_lean]"] = lambda: with_fp8_variant("crossover_lean"') == 1


def test_lean_kernels_are_in_the_bundle_sets():
    check_variant_entries(LEAN_ENTRIES, dc.LEAN_VARIANT)


# compiled here (opt-in, timed and not kept): the bench's unsplit kernel of each; every entry is compiled by the GPU
# bundle's build
@pytest.mark.parametrize("entry", [e for e in LEAN_ENTRIES if not e[1].split and not e[1].topk_length],
                         ids=lambda e: e[1].name())
def test_lean_compiles_clean(entry):
    from tests._sm100_helpers import sass_count
    name, cfg = entry
    sass = converter_sass(name, cfg)    # no spills, no stack, wgmma not serialised, 200 / 104, no LDL / STL, HGMMAs
    assert sass_count(sass, "ST.E.128") == 18          # 8 rows x 2 latent units + 2 rope units to the peer
    xo = _crossover_counts(dataclasses.replace(cfg, crossover_lean=False))
    assert sass_count(sass, "MEMBAR.ALL.GPU") == xo["MEMBAR.ALL.GPU"] - 1
    # the converter is the crossover's: the same loads and shuffles
    loads, shuffles = (sass_count(sass, "LDG.E.CONSTANT") - xo["LDG.E.CONSTANT"], sass_count(sass, "SHFL.IDX") - xo["SHFL.IDX"])
    assert (loads, shuffles) == (0, 0)


@functools.lru_cache(maxsize=None)
def _crossover_counts(cfg) -> dict:
    """The crossover kernel's SASS counts the lean one is compared with."""
    from tests._sm100_helpers import sass_count, sass_of
    sass = sass_of(lower_clean(dc.DECODE_KERNEL, cfg))
    return {op: sass_count(sass, op) for op in ("MEMBAR.ALL.GPU", "LDG.E.CONSTANT", "SHFL.IDX")}


def test_verifier_accepts_them_and_rejects_the_consumer_release_erased():
    from fa4mlir.dialect.query import ops_named
    from fa4mlir.passes import verify_pipelines
    from fa4mlir.passes._util import PassError
    kir = kernels.module(dc.DECODE_KERNEL).build(_cfg(split=True))
    with kir.module.context:
        verify_pipelines.run(kir.module.operation)
    kir = kernels.module(dc.DECODE_KERNEL).build(_cfg(split=True))
    with kir.module.context:
        peers = [op for op in ops_named(kir.module.operation, "fa4.peer_arrive") if "scope" in op.attributes]
        assert len(peers) == 1
        peers[0].erase()
        with pytest.raises(PassError):
            verify_pipelines.run(kir.module.operation)


def test_lean_through_the_interpreter_gives_the_crossovers_bits():
    # one cluster: -1 padding, duplicates, NaN rows
    check_same_bits((1, 1, 128, 128, 64, 1, None, True), dict(lean=True), dict(crossover=True))     # FA rule inside
