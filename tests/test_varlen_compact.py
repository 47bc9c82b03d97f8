"""Deviceless: the compact varlen grid (common.varlen_compact, AttnConfig.varlen_compact).

- the host mirror (tile_order: the warp scan over numpy lanes, fastdiv included) covers every
  working (sequence, m_block, head) exactly once, for random length sets with lengths 0 and 1, more
  than 32 sequences (the scan's later chunks), heads not a multiple of the chunk, sequences longer
  than max_seqlen_q (tiles past the default grid's are not run); blocks past the working tiles are
  at most batch x heads and come last; the order is the default grid's with its empty blocks left
  out where a section is one chunk (the anchors' prefill_varlen); the grid bound holds;
- the kernel's own code (attention_fwd_sm90_varlen.compact_tile_of) in a one-warp probe kernel
  through the interpreter gives tile_order's tiles block by block;
- the config: key and name carry the flag only when set, the launch contract appends
  COMPACT_PARAMS, the variant is refused off varlen and with page_size.
"""
import random

import numpy as np
import pytest

from fa4mlir.kernels.attention_sm90_config import COMPACT_PARAMS, AttnConfig, ConfigError, launch_params
from fa4mlir.kernels.attention_sm90_config_varlen import varlen_config
from fa4mlir.kernels.common import varlen_compact as vc
from fa4mlir.kernels.common.varlen_schedule import tile_order as default_order


def _cu(lens):
    return [0, *np.cumsum(lens).tolist()]


def _check_cover(lens, bm, heads, shift, max_q=None, spare=0):
    """tile_order covers each working tile once; returns the order."""
    cu = _cu(lens)
    max_q = max(max(lens), 1) if max_q is None else max_q
    m_tiles = vc.m_tiles_of(max_q, bm)
    order = vc.tile_order(cu, cu[-1] + spare, max_q, bm, heads, shift)
    want = {(min(-(-n // bm), m_tiles) - 1 - m, h, b) for b, n in enumerate(lens) for m in range(min(-(-n // bm), m_tiles))
            for h in range(heads)}
    got = [o for o in order if o is not None]
    assert len(got) == len(set(got)), "a tile covered twice"
    assert set(got) == want
    n_work = len(got)
    assert all(o is None for o in order[n_work:]), "an empty block before a working one"
    assert len(order) - n_work <= len(lens) * heads
    return order


@pytest.mark.parametrize("seed", range(12))
def test_random_batches_cover_every_tile_once(seed):
    rng = random.Random(seed)
    batch = rng.choice([1, 2, 5, 16, 31, 32, 33, 40, 70])
    lens = [rng.choice([0, 1, 2, 127, 128, 129, 255, 300, 700, rng.randrange(0, 1500)]) for _ in range(batch)]
    heads = rng.choice([1, 3, 4, 6, 8, 32])
    shift = rng.randrange(0, 6)
    _check_cover(lens, rng.choice([128, 192]), heads, shift, spare=rng.choice([0, 5]))


def test_all_empty_and_length_one():
    assert all(o is None for o in vc.tile_order(_cu([0, 0, 0]), 0, 1, 128, 4, 1))
    order = _check_cover([1] * 35, 128, 3, 1)
    assert len(order) == vc.compact_grid_size(35, 1, 128, 3, 35) == 35 * 3      # the bound is tight here


def test_max_seqlen_caps_the_tiles_like_the_default_grid():
    # a sequence longer than max_seqlen_q: both grids run its first ceil(max_seqlen_q / bm) tiles only
    order = _check_cover([600, 100], 128, 2, 1, max_q=300)
    assert max(o[0] for o in order if o is not None) == 2


def test_chunks_and_their_order():
    """heads 6 in chunks of 4 and 2: each chunk's tiles from the last down, every head of the chunk at
    one tile before the next; sequences one after another."""
    order = vc.tile_order(_cu([300, 0, 129]), 429, 300, 128, 6, 2)
    seq0 = [(m, h) for m, h, b in order[:18]]
    assert seq0 == [(m, h) for m in (2, 1, 0) for h in range(4)] + [(m, h) for m in (2, 1, 0) for h in (4, 5)]
    assert [o[2] for o in order[18:30]] == [2] * 12


def test_anchor_order_is_the_default_order_without_empty_blocks():
    """The anchors' prefill_varlen batch (16 causal sequences, seed 11, H 32, bm 128) at the section
    shift of its launch (sections of 16 heads, one per chunk): the same tiles in the same order."""
    from fa4mlir.attention.problem import VarlenProblem
    from fa4mlir.kernels.attention_sm90_config import section_shift
    g = np.random.default_rng(0)
    try:
        import torch
        gen = torch.Generator(device="cpu").manual_seed(11)
        lens = torch.randint(256, 8193, (16,), generator=gen).tolist()
    except ImportError:
        lens = g.integers(256, 8193, 16).tolist()
    heads, mx, total = 32, max(lens), sum(lens)
    cfg = varlen_config("bf16", 128, True, compact=True)
    pr = VarlenProblem(16, mx, mx, total, total, heads, 8, 128, "bf16", True, 128 ** -0.5)
    shift = section_shift(cfg, pr)
    assert vc.chunk_heads(heads, shift) < heads and heads % vc.chunk_heads(heads, shift) == 0
    dense = [(m, h, b) for m, h, b in default_order(mx, 128, heads, 16, shift) if m * 128 < lens[b]]
    compact = vc.tile_order(_cu(lens), total, mx, 128, heads, shift)
    assert [o for o in compact if o is not None] == dense
    empty_default = vc.m_tiles_of(mx, 128) * heads * 16 - len(dense)
    assert len(compact) - len(dense) <= 16 * heads < empty_default


def test_config_key_name_and_contract():
    base, comp = varlen_config("bf16", 128, True), varlen_config("bf16", 128, True, compact=True)
    assert "varlen_compact" not in base.key() and comp.key()["varlen_compact"] is True
    assert AttnConfig.from_key(comp.key()) == comp
    assert launch_params(comp)[:-len(COMPACT_PARAMS)] == launch_params(base)
    assert launch_params(comp)[-len(COMPACT_PARAMS):] == COMPACT_PARAMS
    with pytest.raises(ConfigError, match="varlen_compact"):
        AttnConfig(varlen_compact=True).validate()
    from dataclasses import replace
    with pytest.raises(ConfigError, match="varlen_compact"):
        replace(base, page_size=64, varlen_compact=True).validate()


def _probe(bm):
    """A one-warp kernel that runs compact_tile_of and stores m_block, head, b, the sequence's q_start,
    seqlen_q, k_start and seqlen_k of its block (cu_seqlens_k = cu_seqlens_q here)."""
    from types import SimpleNamespace

    from fa4mlir.dsl import KernelBuilder, const
    from fa4mlir.kernels import attention_fwd_sm90_varlen as varlen
    kb = KernelBuilder("compact_probe", arch="sm_90a", block=(32, 1, 1))
    out, cu = kb.param_ptr("out"), kb.param_ptr("cu")
    p = {n: kb.param_i32(n) for n in ("batch", "heads", "max_q", "total_q", *(n for n, _ in COMPACT_PARAMS))}
    with kb.body():
        vp = varlen.VarlenParams(out, cu, cu, cu, const(0), p["total_q"])
        params = SimpleNamespace(varlen=vp, compact=varlen.compact_params_of(p), batch=p["batch"], heads=p["heads"])
        m_tiles = (p["max_q"] + (bm - 1)) // bm
        m_block, head, b, seq = varlen.compact_tile_of(kb, params, m_tiles, bm)
        with kb.if_(kb.thread_idx(0).eq(0)).then_():
            base = kb.block_idx(0) * 7
            for i, v in enumerate((m_block, head, b, *seq)):
                kb.store(v, kb.gep(out, base + i, "i32"), align=4)
    return kb.finish()


@pytest.mark.parametrize("lens, heads, shift, bm, spare", [
    ((0, 1, 300, 129, 0, 2), 6, 2, 128, 3),
    (tuple((i * 37) % 400 for i in range(35)), 3, 1, 192, 0),
])
def test_kernel_code_matches_the_host_mirror(lens, heads, shift, bm, spare):
    pytest.importorskip("mlir")
    from fa4mlir import interpret
    kernel = interpret.load(_probe(bm))
    cu = np.asarray(_cu(lens), np.int32)
    total, mx = int(cu[-1]) + spare, max(lens)
    order = vc.tile_order(cu, total, mx, bm, heads, shift)
    out = np.full((len(order), 7), -1, np.int32)
    args = {"out": out, "cu": cu, "batch": len(lens), "heads": heads, "max_q": mx, "total_q": total,
            **vc.compact_params(heads, shift)}
    kernel.launch((len(order), 1, 1), args)
    for t, want in enumerate(order):
        m_block, head, b, q_start, seqlen_q, k_start, seqlen_k = out[t].tolist()
        if want is None:   # no sequence: an empty tile at m_block 0 (the epilogue's row bounds are unsigned)
            assert (m_block, seqlen_q) == (0, 0), (t, out[t])
        else:
            assert (m_block, head, b) == want, (t, out[t], want)
            assert (q_start, seqlen_q, k_start, seqlen_k) == (cu[b], lens[b], cu[b], lens[b]), (t, out[t])


def test_the_environment_picks_the_grid(monkeypatch):
    from fa4mlir.attention.varlen import GRID_ENV, varlen_grid
    from fa4mlir.bench.prefill_workloads import with_varlen_grid
    monkeypatch.delenv(GRID_ENV, raising=False)
    assert varlen_grid() == "sections"
    assert with_varlen_grid(varlen_grid, "compact")() == "compact" and GRID_ENV not in __import__("os").environ
    assert with_varlen_grid(varlen_grid, "persistent")() == "persistent"
    monkeypatch.setenv(GRID_ENV, "sections")
    assert varlen_grid() == "sections"
    monkeypatch.setenv(GRID_ENV, "compat")
    with pytest.raises(ValueError, match="FA4MLIR_VARLEN_GRID='compat'"):
        varlen_grid()


def test_the_bench_sets_hold_the_variant_next_to_the_default():
    from fa4mlir import kernel_sets
    from fa4mlir.kernels.attention_sm90_config import KERNEL
    for name in ("prefill", "bench"):
        cfgs = [c for k, c, *_ in kernel_sets.configs([name]) if k == KERNEL]
        assert varlen_config("bf16", 128, True) in cfgs and varlen_config("bf16", 128, True, compact=True) in cfgs
        assert varlen_config("bf16", 128, True, persistent=True) in cfgs


def test_bad_cu_seqlens_stay_in_bounds():
    """Decreasing cu_seqlens and a pair past total_q (the caller's error, not checked without a host
    sync): every block still maps to a sequence, head and tile in range, each at most once."""
    cu, total = [0, 300, 100, 900, 250], 400
    order = vc.tile_order(cu, total, 300, 128, 3, 1)
    got = [o for o in order if o is not None]
    assert len(got) == len(set(got)) and got
    assert all(0 <= m < 3 and 0 <= h < 3 and 0 <= b < 4 for m, h, b in got)


def test_bundle_selection_tells_the_grids_apart():
    """A bundle holding the three grids' kernels of one varlen config: the call's grid (varlen_compact,
    and persistent, a tile field) picks its own entry (plan.VARIANT_FIELDS; without it both entries matched
    the compact call and the bundle lookup raised BundleError, found on an H200)."""
    from fa4mlir.attention import plan
    cfgs = {c: varlen_config("bf16", 128, True, compact=c > 0, persistent=c > 1) for c in (0, 1, 2)}
    entries = [{"arch": plan.ARCH, "name": f"k{int(c)}", "config": {**cfg.key(), "cubin_backend": "ptxas"}}
               for c, cfg in cfgs.items()]
    for c, cfg in cfgs.items():
        assert plan.select_entry(entries, "bf16", 128, True, default=cfg)["name"] == f"k{int(c)}"
    # a bundle without the persistent kernel: the tiles' fallback hands over the compact one, and the call
    # refuses it rather than time the compact grid as the persistent one
    from fa4mlir.attention.errors import BundleError
    from fa4mlir.attention.varlen import check_grid
    got = plan.select_entry(entries[:2], "bf16", 128, True, default=cfgs[2])
    with pytest.raises(BundleError, match="FA4MLIR_VARLEN_GRID=persistent"):
        check_grid(AttnConfig.from_key(got["config"]), cfgs[2], "persistent")
    check_grid(cfgs[2], cfgs[2], "persistent")


def test_persistent_grid_is_min_of_sms_and_the_compact_bound():
    """varlen_compact with persistent [D-varlen-persistent]: min(num_sms, compact_grid_size) CTAs from the
    shapes alone, `_pers` and `_compact` in the name; num_sms is required; a persistent varlen kernel
    off the compact grid is refused."""
    from dataclasses import replace

    from fa4mlir.attention.problem import VarlenProblem
    from fa4mlir.kernels.attention_fwd_sm90 import kernel_name
    from fa4mlir.kernels.attention_sm90_config import varlen_grid
    cfg = varlen_config("bf16", 128, True, persistent=True)
    assert cfg.varlen_compact and cfg.persistent and cfg.producer_regs == 40 and cfg.consumer_regs == 232
    assert kernel_name(cfg).endswith("_pers_compact")
    for total, batch, sms, want in ((300, 3, 200, vc.compact_grid_size(300, 4096, 128, 32, 3)),
                                    (16 * 4096, 16, 132, 132), (16 * 4096, 16, 78, 78)):
        pr = VarlenProblem(batch, 4096, 4096, total, total, 32, 8, 128, "bf16", True, 128 ** -0.5)
        assert varlen_grid(cfg, pr, sms) == (want, 1, 1)
    assert varlen_grid(replace(cfg, persistent=False), pr, 132)[0] == vc.compact_grid_size(16 * 4096, 4096, 128, 32, 16)
    with pytest.raises(ValueError, match="SM count"):
        varlen_grid(cfg, pr)
    with pytest.raises(ConfigError, match="varlen_compact=True with persistent=True"):
        replace(cfg, varlen_compact=False).validate()
