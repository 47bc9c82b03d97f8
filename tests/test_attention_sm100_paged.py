"""Deviceless checks of the sm_100a kernel's KV-cache operand ([D-sm100-paged], issue 27 item 5):
the paged pool with per-page TMA boxes and the decode route (one Q tile of packed GQA rows).

* config: the fields, kernel names, refusals with reasons, launch contract, plans;
* compiled (nvJitLink LTO, as the kernel ships): 0 spills, setmaxnreg honoured, SMEM and TMEM within
  the plan, SASS holding tcgen05 (UTCHMMA, LDTM/STTM, UTCBAR, UTCATOMSWS) and the TMA loads/stores,
  the pipeline verifier accepting the schedule;
* interpreted (fa4mlir.interpret, nvvm stage, CPU): numerics by the FA rule against the float32
  kvcache reference over a shuffled page table, lengths page - 1, page, page + 1, 0 and two K/V
  blocks, GQA, NaN in every unused page and row. These are the only sm_100a numerics claimed: the
  kernel is interpreted, never run (no Blackwell GPU here).
"""
from __future__ import annotations

import re

import pytest

from fa4mlir.kernels.attention_sm100_config import (PAGED_LAUNCH_PARAMS, FA4Config, grid, launch_args,
                                                    paged_configs, paged_launch_args)
from fa4mlir.kernels.common.paging import KVFetch, fetch_plan
from tests._sm100_helpers import (check_resources, check_verifier_rejects_a_dropped_commit, compiled, interpret_paged,
                                  paged_cache, sass_count, sass_of, verify_pipelines)

DECODE = dict(num_q_tiles=1, fuse_gqa=True)


def _id(c: FA4Config) -> str:
    return f"d{c.head_dim}-p{c.page_size}{'-decode' if c.decode else ''}"


# ---- config ---------------------------------------------------------------------------------------
def test_default_config_is_unchanged_by_the_operand():
    c = FA4Config()
    assert not c.paged and not c.decode and c.bm == 256 and c.box_rows == c.bn == 128
    assert c.name_route() == "" and c.launch_params[-2:] == (("seqlen_k", "i32"), ("scale_log2", "f32"))


@pytest.mark.parametrize("page_size,boxes", [(16, 8), (32, 4), (48, 8), (64, 2), (128, 1), (256, 1), (208, 8)])
def test_paged_boxes_hold_at_least_16_rows(page_size, boxes):
    c = FA4Config(page_size=page_size)
    assert c.supported() == (True, "")
    assert c.box_rows >= 16 and c.bn // c.box_rows == boxes
    plan = fetch_plan(c.bn, page_size, "sm_100a")
    assert (plan.fetch, plan.box_rows, plan.boxes_per_tile) == (KVFetch.TMA_BOXES, c.box_rows, boxes)


@pytest.mark.parametrize("kw,reason", [
    (dict(page_size=8), "fetched by the row gather of the decode route"),
    (dict(page_size=1), "row gather"),
    (dict(page_size=24), "gcd(bn, page_size) < 16"),
    (dict(page_size=300), "page size in 1..256"),
    (dict(num_q_tiles=1), "packed into M only on the 1-Q-tile decode route"),
    (dict(fuse_gqa=True), "packed into M only on the 1-Q-tile decode route"),
    (dict(num_q_tiles=3), "num_q_tiles=3"),
    (dict(num_q_heads=12, num_kv_heads=4, **DECODE), "group must divide 128"),
])
def test_refusals_say_why(kw, reason):
    ok, why = FA4Config(**kw).supported()
    assert not ok and reason in why, why


def test_decode_plans():
    c = FA4Config(num_q_heads=32, num_kv_heads=8, causal=True, page_size=64, **DECODE)
    assert c.supported() == (True, "")
    assert c.bm == 128 and c.tile_tokens == 32
    tm = c.tmem_plan()
    assert (tm["S0"], tm["O0"], tm["used"], tm["alloc"]) == (0, 128, 256, 256) and "S1" not in tm
    assert c.smem_plan()["q"] == 128 * 128 * 2 and c.smem_plan()["stages"] == 3
    assert "decode: 4 heads x 32 tokens packed" in c.description()

    class P:
        batch, heads, seqlen_q, seqlen_k, softmax_scale = 3, 32, 16, 999, 0.125
    assert grid(c, P) == (1, 8, 3)
    assert grid(FA4Config(num_q_heads=32, num_kv_heads=2, **DECODE), P) == (2, 2, 3)   # 8 tokens a tile
    args = paged_launch_args(c, P, dict(q="q", k="k", v="v", o="o", lse="l", page_table="t", cache_seqlens="s"),
                             num_pages=70, page_table_stride=9)
    assert list(args) == [n for n, _ in PAGED_LAUNCH_PARAMS] and args["num_pages"] == 70
    with pytest.raises(ValueError, match="paged_launch_args"):
        launch_args(c, P, {})


def test_paged_configs_are_supported_and_named_apart():
    cfgs = paged_configs()
    assert all(c.supported()[0] for c in cfgs)
    from fa4mlir.kernels.attention_sm100_config import code_shape
    assert len({code_shape(c) for c in cfgs}) == len({(c.head_dim, c.decode, c.paged and c.bn // c.box_rows)
                                                     for c in cfgs})


# ---- compiled -----------------------------------------------------------------------------------------
COMPILED = [FA4Config(head_dim=d, head_dim_v=d, causal=True, num_q_heads=8, num_kv_heads=2, page_size=ps, **kw)
            for d, ps, kw in ((64, 16, {}), (64, 16, DECODE), (128, 0, DECODE))]
# These spilled one 4-byte value (the CTA's SMEM base or the warp index, held across the 48-register
# roles) until the load warp's page lookups were reshaped (paged_rows, note "Load warp registers").
ONCE_SPILLING = [FA4Config(head_dim=d, head_dim_v=d, causal=True, num_q_heads=8, num_kv_heads=2, page_size=ps, **kw)
                 for d, ps, kw in ((128, 16, {}), (128, 16, DECODE), (64, 48, DECODE))]


@pytest.mark.parametrize("cfg", COMPILED + ONCE_SPILLING, ids=_id)
def test_compiles_with_zero_spills_and_sass(cfg):
    art, seconds = compiled(cfg, key="test-sm100-paged")
    check_resources(cfg, art, seconds)
    sass = sass_of(art)
    count = lambda op: sass_count(sass, op)  # noqa: E731
    s_mmas, pv_mmas = cfg.padded_head_dim // 16, cfg.bn // 16
    if cfg.decode:   # one loop body: S0, P0 V
        assert count("UTCHMMA") == s_mmas + pv_mmas
    else:            # block 0 + the loop + the last P1 V, as the dense kernel
        assert count("UTCHMMA") == (2 * s_mmas + pv_mmas) + (2 * s_mmas + 2 * pv_mmas) + pv_mmas
    assert len(re.findall(r"UTCHMMA tmem\[", sass)) == (1 if cfg.decode else 4) * pv_mmas
    assert count("UTCBAR") >= (6 if cfg.decode else 14) and count("LDTM") > 0 and count("STTM") > 0
    assert count("UTCATOMSWS") >= 2
    assert count("UTMASTG") >= 1 and count("HGMMA") == 0
    # Q once per chunk, K and V: boxes per tile x chunks each (unrolled: the paged loop body holds them all)
    boxes = cfg.bn // cfg.box_rows
    assert count("UTMALDG") >= 2 * boxes * (cfg.padded_head_dim // 64) + 1
    assert not re.search(r"\b(LDL|STL)\b", sass)


@pytest.mark.parametrize("cfg", COMPILED[:2] + ONCE_SPILLING, ids=_id)
def test_verifier_accepts_the_schedule(cfg):
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    verify_pipelines(k100.build(cfg).module)


def test_verifier_rejects_a_v_release_removed_from_the_decode_route():
    check_verifier_rejects_a_dropped_commit(COMPILED[1], "v")


# ---- interpreted numerics ------------------------------------------------------------------------------
@pytest.mark.parametrize("decode,seqlen_q,d,page", [(True, 3, 64, 16), (False, 5, 64, 16), (True, 3, 128, 16),
                                                     (False, 5, 128, 16), (True, 3, 64, 48)])
def test_paged_kernel_interpreted_by_the_fa_rule(decode, seqlen_q, d, page):
    """Page size 16 (8 boxes a K/V tile) or 48 (8 boxes, the second tile starting at row 32 of a page),
    lengths page - 1, page, page + 1, 0 and 150 (two K/V blocks, the second ragged inside a page), GQA 8
    query heads over 2 KV heads, causal bottom-right, NaN in unused pages and rows and in O before the
    call. Interpreted at the nvvm stage on the CPU."""
    torch = pytest.importorskip("torch")
    heads, kv_heads = 8, 2
    lengths = [page - 1, page, page + 1, 0, 150]
    cfg = FA4Config(head_dim=d, head_dim_v=d, causal=True, num_q_heads=heads, num_kv_heads=kv_heads, page_size=page,
                    **(DECODE if decode else {}))
    gen = torch.Generator().manual_seed(27)
    batch = len(lengths)
    q = torch.randn(batch, seqlen_q, heads, d, generator=gen).to(torch.bfloat16)
    k, v, table = paged_cache(torch, gen, lengths, page, kv_heads, d)
    out, lse_t, tally, seconds = interpret_paged(torch, cfg, q, k, v, table, lengths, page)
    assert (out[3] == 0).all() and torch.isposinf(lse_t[3]).all()          # length 0: no key seen
    print(f"interpreted {cfg.description()[:40]}.. in {seconds:.1f} s: {tally.errs}")
    tally.check()


def test_stale_v_zeros_without_their_proxy_fence_are_a_fence_fault(monkeypatch):
    """The MMA thread's st.shared zeros reach its tcgen05.mma (async proxy) only through
    fence.proxy.async (note "Stale V rows"); without it the interpreter names the missing fence."""
    pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.kernels.common import paged_rows
    zero_rows = paged_rows.zero_rows

    def unfenced(kb, *args):
        fence = kb.fence
        kb.fence = lambda kind: None if kind == "async_smem" else fence(kind)
        try:
            zero_rows(kb, *args)
        finally:
            del kb.fence
    monkeypatch.setattr(paged_rows, "zero_rows", unfenced)
    with pytest.raises(interpret.FenceFault, match=r"tcgen05.mma B \(SMEM\) reads shared memory that warp 12 "
                                                   r"\(mma\) wrote with st.shared and did not fence"):
        test_paged_kernel_interpreted_by_the_fa_rule(True, 3, 64, 16)
