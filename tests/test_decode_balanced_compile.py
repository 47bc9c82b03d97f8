"""Deviceless: the balanced FP8 decode kernels of the `decode-fp8-variants` set (FP8 variant "balanced",
attention_decode_sm90_balanced) and the combine's balanced_bn form compile through fa4-verify-pipelines
(the rings' positions carried across work items as counts of tiles) with no serialised wgmma (the kernel
holds no call: its one division is unrolled, decode_balanced.udiv_steps), their KV tile loops (the SASS
loops that issue wgmma and hold no inner one) with no spill, and within a few instructions of the swap-AB
kernels' loops they run (the schedule costs nothing per tile). Outside the loops (ptxas at 168 registers, two
CTAs per SM) the kernel's note "Per-item geometry" leaves no spill but 4 bytes in the paged tensor-scale kernels:
bounded here as measured, so that growth shows.
The three-CTA variant (balanced3cta, DecodeConfig.ctas 3) gets 128 registers (ptxas: 15 warps over an SM's 4
register quarters of 16384, 4 warps in one: 16384 / (4 x 32)); with O^T = V^T P^T (swap_ab_ot: 8 accumulator
registers, its P V two m64n8 tiles of 4 k-steps) it spills nothing (with m64n128's O: 320 bytes, in the tile loops).
Numerics: tests/test_decode_balanced_interpret.py."""
from __future__ import annotations

from dataclasses import replace

import pytest

from fa4mlir import compiler, kernel_sets, sass
from fa4mlir.kernels import attention_decode_sm90_config as dec

BALANCED = [e for e in kernel_sets.SETS["decode-fp8-variants"]() if getattr(e[1], "balanced", False)
            or getattr(e[1], "balanced_bn", 0)]
# spill bytes (stores) ptxas 13 leaves in the balanced kernels (none in the tile loops): by scale granularity
SPILL_BOUND = {"kv_head": 0, "tensor": 4}
_LOWERED: dict = {}

def tile_wgmmas(cfg) -> int:
    """One KV tile's wgmmas: 8 S^T k-steps and 4 P V k-steps (O^T: 4 a head-dim half)."""
    return 128 // 16 + 64 // 16 * (cfg.d_chunks if cfg.swap_ab_ot else 1)


def _lower(name, cfg):
    key = (name, cfg)
    if key not in _LOWERED:
        _LOWERED[key] = compiler.build_and_lower(name, cfg, compiler.resolve_options(name), "test")
    return _LOWERED[key]


def _tile_loops(art, wgmmas: int = tile_wgmmas(dec.DecodeConfig())):
    """The SASS loops of one KV tile: a backward branch whose span issues one tile's `wgmmas`
    (tile_wgmmas), shortest first (the unmasked and the masked loop)."""
    ops, spans = sass.backward_branch_spans(sass.disassemble(art.cubin))
    loops = [ops[a:b + 1] for a, b in spans]
    return sorted((lp for lp in loops if sum(o.startswith("HGMMA") for o, _ in lp) == wgmmas), key=len)


def test_the_set_holds_the_balanced_kernels():
    names = {cfg.name() for _, cfg in BALANCED}
    assert "attention_combine_sm90_bf16_d128_bal64" in names
    for page in (None, 16, 64, 128):
        for grain in ("tensor", "kv_head"):
            cfg = dec.fp8_variant(dec.default_config("bf16", 128, page, grain), dec.BALANCED, 4)
            assert cfg.balanced and cfg.swap_ab and cfg.swap_ab_warp_max == (page is None) and cfg.name() in names


@pytest.mark.parametrize("entry", [e for e in BALANCED if e[1].__class__.__name__ == "DecodeConfig"
                                   and e[1].kv_scale == "kv_head"], ids=lambda e: e[1].name())
def test_balanced_kernel_compiles_without_serialised_wgmma_or_tile_loop_spills(entry):
    name, cfg = entry
    art = _lower(name, cfg)
    res = art.resources
    assert not res["wgmma_serialized"] and res["registers"] <= {1: 255, 2: 168, 3: 128}[cfg.ctas_per_sm]
    assert res["registers"] * cfg.threads * cfg.ctas_per_sm <= 65536 and res["smem_bytes"] == cfg.smem_bytes(), res
    assert res["smem_bytes"] <= dec.SM_SMEM // cfg.ctas_per_sm - dec.CTA_SMEM_RESERVE
    assert res["spill_stores"] <= SPILL_BOUND[cfg.kv_scale] and res["stack_bytes"] <= SPILL_BOUND[cfg.kv_scale], res
    if sass.find_nvdisasm() is None:
        pytest.skip("nvdisasm not installed: the SASS loop checks need it")
    loops = _tile_loops(art, tile_wgmmas(cfg))[:2]     # the unmasked and the masked tile loop
    assert len(loops) == 2
    for loop in loops:
        assert not any(o.startswith(("STL", "LDL")) for o, _ in loop), cfg.name()
    base = _tile_loops(_lower(name, dec.default_config("bf16", 128, None if not cfg.paged else 16, "kv_head", rows=4)
                              if not cfg.paged or cfg.box_rows == 16 else
                              dec.default_config("bf16", 128, 64, "kv_head", rows=4)))
    for mine, theirs in zip(loops, base[:2]):
        assert len(mine) <= len(theirs) + 16, (len(mine), len(theirs))


@pytest.mark.parametrize("entry", [e for e in BALANCED if e[1].__class__.__name__ == "DecodeConfig"
                                   and e[1].kv_scale == "tensor"], ids=lambda e: e[1].name())
def test_balanced_tensor_scale_kernel_spill_bound(entry):
    res = _lower(*entry).resources
    assert not res["wgmma_serialized"] and res["spill_stores"] <= SPILL_BOUND["tensor"], res


def test_balanced_variants_resources_as_planned():
    """BALANCED_VARIANTS' ring depths: balanced3cta at three CTAs per SM (the most stages a third of the SM holds);
    the kernels declare it (min CTAs per SM), and the plan's parts follow it."""
    for name, stages, ctas in (("balanced3cta", 3, 3),):
        for page in (16, 64):
            cfg = dec.fp8_variant(dec.default_config("bf16", 128, page, "kv_head"), name, 4)
            assert (cfg.stages, cfg.ctas_per_sm, cfg.balanced, cfg.swap_ab) == (stages, ctas, True, True)
            assert (dec.KERNEL, cfg) in set(BALANCED) and cfg.ctas == dec.BALANCED_FIELDS.get(name, {}).get("ctas", 0)
            assert cfg.smem_bytes() <= dec.SM_SMEM // ctas - dec.CTA_SMEM_RESERVE
            if ctas == 3:    # the most stages that fit a third of the SM
                assert replace(cfg, stages=stages + 1).smem_bytes() > dec.SM_SMEM // 3 - dec.CTA_SMEM_RESERVE
    for name in (dec.BALANCED, "balanced3cta"):     # block scales: no swap AB to balance
        with pytest.raises(dec.ConfigError, match=name):
            dec.fp8_variant(dec.default_config("bf16", 128, 16, "block"), name, 4)


def test_declared_ctas_errors():
    """DecodeConfig.ctas: swap AB only, 1..MAX_CTAS_PER_SM, SMEM within that many CTAs; swap_ab_ot: the balanced
    kernel with one max per column; both left out of key() at their defaults."""
    cfg = dec.fp8_variant(dec.default_config("bf16", 128, 16, "kv_head"), "balanced3cta", 4)
    assert cfg.name().endswith("_bal_ot_c3") and cfg.key()["ctas"] == 3 and cfg.key()["swap_ab_ot"]
    assert not {"ctas", "swap_ab_ot"} & set( dec.fp8_variant(dec.default_config("bf16", 128, 16, "kv_head"), dec.BALANCED, 4).key())
    for bad in (dict(ctas=4), dict(ctas=-1), dict(stages=4), dict(swap_ab=False, balanced=False, swap_ab_ot=False)):
        with pytest.raises(dec.ConfigError, match="ctas"):
            replace(cfg, **bad).validate()
    for bad in (dict(balanced=False), dict(swap_ab_warp_max=True)):
        with pytest.raises(dec.ConfigError, match="swap_ab_ot"):
            replace(cfg, **bad).validate()
    # 4 CTAs per SM: swap AB's 2 stages need more than a quarter of the SM
    assert replace(cfg, stages=2, ctas=0).smem_bytes() > dec.SM_SMEM // 4 - dec.CTA_SMEM_RESERVE


def test_balanced_combine_compiles_clean():
    art = _lower(dec.COMBINE_KERNEL, dec.CombineConfig("bf16", 128, balanced_bn=64))
    assert art.resources["spill_stores"] == 0 and art.resources["stack_bytes"] == 0
