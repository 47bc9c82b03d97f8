"""Deviceless: the crossover converter's row loads with FlashMLA's cache hints (FP8 variant "crossover_stasync_hint",
opt-in: MLASparseDecodeConfig.load_hints on crossover_stasync; attention_mla_sparse_crossover_sm90, note "Load
hints"; the op fa4.ld_global_nc, lowered by fa4-lower-tma: lit_tests/passes/lower-tma.mlir).

* the config: name ..._stasync_hint, key (load_hints only where set: crossover_stasync's key and name as before),
  refused without crossover and as a non-bool; the variant sets its fields and is found back, another variant
  clears it; the host runs it by FA4MLIR_MLA_SPARSE_FP8_VARIANT and refuses it at 64 heads; bench mla's backend
  fa4mlir[crossover_stasync_hint] exists; its two kernels (bench mla's call: unsplit, no topk_length; and the
  topk_length + split twin) are in the mla, gpu-tests and bench sets, the other two calls' are not;
* the PTX: the 8 latent pieces as ld.global.nc.L1::evict_last.L2::256B.v4.b32, the 8 scale words as
  ...L2::128B.f32 at [row + 512], the 2 rope units as ...L2::128B.v4.b32 at [row + 528] (the offsets folded);
  the indices' and Q's loads plain; crossover_stasync's PTX has no hinted load, and as many loads;
* each compiles with no spills and no stack, wgmma not serialised, setmaxnreg 200 / 104, and its SASS is
  crossover_stasync's instruction for instruction but for the 18 row loads' hint bits (ptxas 13.0):
  LDG.E.EL.LTC256B.128.CONSTANT (8), LDG.E.EL.LTC128B.CONSTANT (8), LDG.E.EL.LTC128B.128.CONSTANT (2);
* the interpreter runs it (the hinted loads read their bytes, the hints change none): one cluster, unsplit,
  by the FA rule inside run_interpreted, and crossover_stasync's out and lse bits.
"""
from __future__ import annotations

import dataclasses
import re

import pytest

from fa4mlir import kernel_sets, kernels
from fa4mlir.kernels import attention_mla_sparse_sm90_config as dc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import check_sparse_art, info, lower_clean
from tests.test_mla_sparse_decode_fp8 import run_interpreted

HINT_ENTRIES = [e for e in kernel_sets.mla() if e[0] == dc.DECODE_KERNEL and e[1].load_hints]
NOPE = "ld.global.nc.L1::evict_last.L2::256B.v4.b32"
SCALE = "ld.global.nc.L1::evict_last.L2::128B.f32"
ROPE = "ld.global.nc.L1::evict_last.L2::128B.v4.b32"
SASS_HINTS = {"LDG.E.EL.LTC256B.128.CONSTANT": 8, "LDG.E.EL.LTC128B.CONSTANT": 8, "LDG.E.EL.LTC128B.128.CONSTANT": 2}


def _cfg(**kw) -> dc.MLASparseDecodeConfig:
    return dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", fp8_converter=True, crossover=True, crossover_lean=True,
                                    crossover_stasync=True, load_hints=True, **kw)


def _ptx(cfg) -> str:
    from fa4mlir import lowering
    kir = kernels.module(dc.DECODE_KERNEL).build(cfg)
    with kir.module.context:
        return lowering.lower_module(kir.module, kir.arch, target="ptx")[0]


def test_config_variant_host_bench_and_sets(monkeypatch):
    import inspect

    from fa4mlir.attention import errors as E
    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.bench import mla_bench
    hint = _cfg().validate()
    st = dataclasses.replace(hint, load_hints=False)
    assert hint.name() == "attention_mla_sparse_decode_sm90_bf16_fp8_conv_xo_lean_stasync_hint"
    assert hint.key()["load_hints"] is True and "load_hints" not in st.key() and "_hint" not in st.name()
    assert st.name() == "attention_mla_sparse_decode_sm90_bf16_fp8_conv_xo_lean_stasync"
    assert (hint.stages, hint.regs, hint.params, hint.smem_bytes()) == (st.stages, st.regs, st.params, st.smem_bytes())
    for bad in (dict(fp8_converter=True, load_hints=True), dict(fp8_converter=True, crossover=True, load_hints=1)):
        with pytest.raises(ConfigError, match="load_hints"):
            dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", **bad).validate()
    plain = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", topk_length=True, split=True)
    got = dc.fp8_decode_variant(plain, dc.HINT_VARIANT)
    assert got == _cfg(topk_length=True, split=True) and dc.fp8_decode_variant_name(got) == dc.HINT_VARIANT
    assert dc.fp8_decode_variant(got, dc.STASYNC_VARIANT).load_hints is False
    assert dc.HINT_VARIANT in dc.CLUSTER_VARIANTS and dc.FP8_DECODE_CROSSOVER_RULE == dc.STASYNC_VARIANT
    # the host, by FA4MLIR_MLA_SPARSE_FP8_VARIANT; 64 heads refused before any launch
    monkeypatch.setenv(sd.VARIANT_ENV, dc.HINT_VARIANT)
    args = dict(q=info((4, 2, 128, 576)), k_cache=info((100, 64, 1, 656), "e4m3"), indices=info((4, 2, 2048), "i32"),
                head_dim_v=512, metadata=info((1, 8), "i32"), num_splits=info((5,), "i32"), is_fp8_kvcache=True)
    assert sd.check_sparse_decode_inputs(**args).config(False) == _cfg()
    with pytest.raises(E.UnsupportedFeatureError, match="multiple of 128"):
        sd.check_sparse_decode_inputs(**dict(args, q=info((4, 2, 64, 576))))
    src = inspect.getsource(mla_bench.mla_sparse_decode_rows)
    assert src.count('call["fa4mlir[crossover_stasync_hint]"] = lambda: with_fp8_variant("crossover_stasync_hint"') == 1
    # the sets: bench mla's call (unsplit, no topk_length) and its topk_length + split twin, not the other two
    want = sorted(_cfg(topk_length=t, split=s).name() for t, s in dc.FP8_PAIR_CALLS)
    assert sorted(c.name() for _, c in HINT_ENTRIES) == want and dc.FP8_PAIR_CALLS == ((False, False), (True, True))
    gpu, bench = kernel_sets.gpu_tests(), kernel_sets.bench()
    assert all(e in gpu and e in bench for e in HINT_ENTRIES)
    assert sorted(e[1].name() for e in bench if e[0] == dc.DECODE_KERNEL and getattr(e[1], "load_hints", False)) == want


def test_ptx_has_the_hinted_row_loads():
    ptx, plain = _ptx(_cfg()), _ptx(dataclasses.replace(_cfg(), load_hints=False))
    assert (ptx.count(NOPE), ptx.count(SCALE), ptx.count(ROPE)) == (8, 8, 2)     # a trip's 8 rows, 2 rope loads
    assert len(re.findall(re.escape(SCALE) + r" %r\d+, \[%rd\d+\+512\];", ptx)) == 8      # SCALES_AT folded
    assert len(re.findall(re.escape(ROPE) + r" \{[^}]*\}, \[%rd\d+\+528\];", ptx)) == 2  # ROPE_AT + 16 folded
    assert "L1::" not in plain and "L2::" not in plain
    assert ptx.count("ld.global.nc") == plain.count("ld.global.nc") == 18 + 8 + 8 + 8 + 2   # Q, indices, rows
    # the indices' and Q's loads stay plain (FlashMLA's index loads carry no hint)
    assert ptx.count("ld.global.nc.b32") == plain.count("ld.global.nc.b32") - 8 == 8
    assert ptx.count("ld.global.nc.v4.b32") == plain.count("ld.global.nc.v4.b32") - 10 == 18


@pytest.mark.parametrize("entry", HINT_ENTRIES, ids=lambda e: e[1].name())
def test_compiles_clean_as_crossover_stasync_with_hint_bits(entry):
    from tests._sm100_helpers import role_budgets, sass_count, sass_of
    name, cfg = entry
    art = lower_clean(name, cfg)        # no spills, no stack, wgmma not serialised, setmaxnreg honoured
    check_sparse_art(art, cfg)
    sass = sass_of(art)
    assert role_budgets(sass) == {200, 104}
    assert all(sass_count(sass, op) == 0 for op in ("LDL", "STL")), "local memory in the SASS"
    assert {op: sass_count(sass, re.escape(op)) for op in SASS_HINTS} == SASS_HINTS
    st_cfg = dataclasses.replace(cfg, load_hints=False)
    st = sass_of(lower_clean(name, st_cfg))
    assert "LTC" not in st and ".EL." not in st
    bare = re.sub(r"LDG\.E\.EL\.LTC(?:128|256)B\.", "LDG.E.", sass).replace(cfg.name(), st_cfg.name())
    assert bare == st       # the same instructions, registers and schedule: only the loads' hint bits differ


def test_through_the_interpreter_gives_crossover_stasyncs_bits():
    """One cluster, bench mla's kernel form (unsplit; -1 padding, duplicates, NaN rows, padded pages): the FA rule
    inside run_interpreted, and crossover_stasync's out and lse bits (the hinted loads read the same bytes)."""
    torch = pytest.importorskip("torch")
    case = (1, 1, 128, 128, 64, 1, None, True)
    out, lse = run_interpreted(*case, hint=True)
    out_s, lse_s = run_interpreted(*case, stasync=True)
    assert torch.equal(out, out_s) and torch.equal(lse, lse_s)
