"""Deviceless: the ragged-batch (varlen) sm_90a attention kernels compile like the dense ones (0 spills,
no stack, wgmma not serialised, registers within the launch allocation, SMEM within 227 KiB), one per
head dim and for masks, softcap and sinks (every kernel_sets.VARLEN_CASES kernel); and the flag leaves the dense
kernels' code alone (their key and name carry no trace of it)."""
import pytest

from fa4mlir import lowering
from fa4mlir.kernel_sets import (VARLEN_CASES, VARLEN_CHUNK_CASES, VARLEN_HEAD_DIM_CASES, VARLEN_MOD_CASES,
                                 varlen_mod_config)
from fa4mlir.kernels import attention_fwd_sm90
from fa4mlir.kernels.attention_sm90_config import default_config
from fa4mlir.kernels.attention_sm90_config_varlen import varlen_config
from fa4mlir.kernels.common.mask_family import attention_mask
from fa4mlir.lowering import CompileOptions

CASES = VARLEN_CASES   # every head dim causal or not, f16, a window, softcap + sinks


def _config(case):
    dtype, d, causal, window, softcap, sinks = case
    mask = attention_mask(causal, window, 0)
    return varlen_config(dtype, d, causal, None if mask.is_legacy else mask, softcap=softcap, sinks=sinks)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-d{c[1]}{'-causal' if c[2] else ''}"
                                                      f"{'-window' if c[3] != (-1, -1) else ''}"
                                                      f"{'-softcap' if c[4] else ''}{'-sinks' if c[5] else ''}")
def test_varlen_kernel_compiles_without_spills(case):
    cfg = _config(case)
    art = lowering.lower(attention_fwd_sm90.build(cfg), CompileOptions(cubin_backend="ptxas"))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"], r
    assert 0 < r["registers"] <= cfg.register_pool // cfg.threads, r
    assert r["smem_bytes"] <= 227 * 1024 and r["smem_bytes"] <= cfg.smem_bytes(), (r, cfg.smem_bytes())
    assert "_varlen" in art.name and not cfg.persistent
    assert [p.name for p in art.params][-6:] == ["o_rows", "cu_seqlens_q", "cu_seqlens_k", "seqused_k",
                                                 "has_seqused_k", "total_q"]


def test_dense_configs_do_not_carry_the_flag():
    dense = default_config("bf16", 128, True)
    assert "varlen" not in dense.key() and "_varlen" not in attention_fwd_sm90.build(dense).name
    assert varlen_config("bf16", 128, True).key()["varlen"] is True


@pytest.mark.parametrize("case", VARLEN_CHUNK_CASES, ids=lambda c: f"{c[0]}-d{c[1]}-window{c[2][0]}-chunk{c[3]}")
def test_varlen_chunk_kernels_compile_without_spills(case):
    """attention_chunk= on the varlen kernel (kernel_sets.VARLEN_CHUNK_CASES): the chunk is in the
    kernel's mask and name, 0 spills."""
    dtype, d, window, chunk = case
    cfg = varlen_config(dtype, d, True, attention_mask(True, window, chunk))
    assert cfg.chunk == chunk and cfg.varlen
    art = lowering.lower(attention_fwd_sm90.build(cfg), CompileOptions(cubin_backend="ptxas"))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert f"_chunk{chunk}_" in art.name and "_varlen" in art.name, art.name


def _mod_id(c):
    return f"{c[0]}-d{c[1]}{'-causal' if c[2] else ''}{'-' + c[3] if c[3] else ''}{'-' + c[4] if c[4] else ''}"


@pytest.mark.parametrize("case", VARLEN_MOD_CASES, ids=_mod_id)
def test_varlen_mod_kernels_compile_without_spills(case):
    """score_mod / mask_mod on the varlen kernel (kernel_sets.VARLEN_MOD_CASES): the fingerprints in the
    name, the aux tensors' parameters between the mod scale and the varlen ones, 0 spills."""
    cfg = varlen_mod_config(case)
    art = lowering.lower(attention_fwd_sm90.build(cfg), CompileOptions(cubin_backend="ptxas"))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"], r
    assert "_varlen" in art.name and (f"_sm_{cfg.score_mod}" in art.name or f"_mm_{cfg.mask_mod}" in art.name)
    names = [p.name for p in art.params]
    # the varlen parameters (6, o_rows first) after the mod scale and the aux tensors'
    assert names[-6:][0] == "o_rows" and ("mod_scale" in names) == bool(cfg.score_mod)
    assert any(n.startswith("aux0") for n in names) == bool(cfg.aux)


@pytest.mark.parametrize("case", VARLEN_HEAD_DIM_CASES, ids=lambda c: f"{c[0]}-d{c[1]}v{c[2] or c[1]}"
                                                                      f"{'-causal' if c[3] else ''}")
def test_varlen_head_dim_kernels_compile_without_spills(case):
    """MLA prefill's qk 192 / v 128, D96 and D192 on the varlen kernel (kernel_sets.VARLEN_HEAD_DIM_CASES):
    0 spills, SMEM within the plan, the pair in the name."""
    dtype, d, dv, causal = case
    cfg = varlen_config(dtype, d, causal, head_dim_v=dv)
    art = lowering.lower(attention_fwd_sm90.build(cfg), CompileOptions(cubin_backend="ptxas"))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"], r
    assert 0 < r["registers"] <= cfg.register_pool // cfg.threads, r
    assert r["smem_bytes"] <= 227 * 1024 and r["smem_bytes"] <= cfg.smem_bytes(), (r, cfg.smem_bytes())
    assert f"_d{d}{f'v{dv}' if dv else ''}_" in art.name and "_varlen" in art.name, art.name


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-d{c[1]}"
                         f"{'-causal' if c[2] else ''}{'-window' if c[3] != (-1, -1) else ''}{'-softcap' if c[4] else ''}")
def test_compact_grid_kernels_compile_without_spills(case):
    """The compact-grid variant (varlen_compact, common.varlen_compact) of every VARLEN_CASES kernel: 0
    spills (the tile's coordinates come from the warp scan, broadcast warp-uniform), `_compact` in the
    name, COMPACT_PARAMS after the varlen parameters."""
    from dataclasses import replace
    cfg = replace(_config(case), varlen_compact=True).validate()
    _check_compact(cfg)


@pytest.mark.parametrize("case", VARLEN_HEAD_DIM_CASES, ids=lambda c: f"{c[0]}-d{c[1]}v{c[2] or c[1]}"
                                                                      f"{'-causal' if c[3] else ''}")
def test_compact_grid_head_dim_kernels_compile_without_spills(case):
    dtype, d, dv, causal = case
    _check_compact(varlen_config(dtype, d, causal, head_dim_v=dv, compact=True))


def _check_compact(cfg):
    from fa4mlir.kernels.attention_sm90_config import COMPACT_PARAMS
    art = lowering.lower(attention_fwd_sm90.build(cfg), CompileOptions(cubin_backend="ptxas"))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"], r
    assert 0 < r["registers"] <= cfg.register_pool // cfg.threads, r
    assert art.name.endswith("_compact") and "_varlen" in art.name, art.name
    assert r["smem_bytes"] <= 227 * 1024 and r["smem_bytes"] <= cfg.smem_bytes(), (r, cfg.smem_bytes())
    names = [p.name for p in art.params]
    assert names[-len(COMPACT_PARAMS) - 6] == "o_rows" and names[-len(COMPACT_PARAMS):] == [n for n, _ in COMPACT_PARAMS]


@pytest.mark.parametrize("case", __import__("fa4mlir.kernel_sets", fromlist=["x"]).VARLEN_PERSISTENT_CASES,
                         ids=lambda c: f"{c[0]}-d{c[1]}{'-causal' if c[2] else ''}")
def test_persistent_compact_kernels_compile_without_spills(case):
    """The persistent kernel over the compact tiles (varlen_compact with persistent, kernel_sets.VARLEN_PERSISTENT_CASES)
    [D-varlen-persistent]: 0 spills with the producer at 40 registers (its warp scan per tile spilled 28 / 24
    bytes at 32), wgmma not serialised, the Q ring of two tiles and the O tile within SMEM, `_pers_compact`."""
    dtype, d, causal = case
    cfg = varlen_config(dtype, d, causal, persistent=True)
    assert cfg.producer_regs == 40 and cfg.q_stages == 2
    _check_compact(cfg)
    assert lowering.lower(attention_fwd_sm90.build(cfg), CompileOptions(cubin_backend="ptxas")).name.endswith(
        "_pers_compact")
