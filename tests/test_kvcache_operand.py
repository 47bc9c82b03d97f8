"""Deviceless: the KV-cache operand and flash_attn_with_kvcache's problem (attention/kvcache.py):
good inputs give the operand, problem and plan; every bad input raises its typed error, exactly
that class, naming the argument, before anything could launch (the error catalogue of issue 27,
item 6)."""
from __future__ import annotations

import textwrap
import subprocess
import sys

import pytest

from fa4mlir.attention import errors as E
from fa4mlir.attention import kvcache as kc
from fa4mlir.kernels.common import paging
from fa4mlir.testing import BLOCK_MLIR, raises
from tests._tensor_infos import PTR, contiguous, info

B, SQ, H, HKV, D = 2, 1, 8, 2, 128
NUM_PAGES, PAGE, MAX_PAGES = 10, 16, 4


def paged_args(**over):
    args = dict(q=info((B, SQ, H, D)), k_cache=info((NUM_PAGES, PAGE, HKV, D)), v_cache=info((NUM_PAGES, PAGE, HKV, D)),
                cache_seqlens=info((B,), "i32"), page_table=info((B, MAX_PAGES), "i32"))
    args.update(over)
    return args


def contiguous_args(**over):
    args = dict(q=info((B, SQ, H, D)), k_cache=info((B, 64, HKV, D)), v_cache=info((B, 64, HKV, D)),
                cache_seqlens=info((B,), "i32"), page_table=None)
    args.update(over)
    return args


def fp8(args, k_scale=info((1,), "f32"), v_scale=info((1,), "f32")):
    shape = args["k_cache"].shape
    return dict(args, k_cache=info(shape, "e4m3"), v_cache=info(shape, "e4m3"), k_scale=k_scale, v_scale=v_scale)


def check(args):
    a = dict(args)
    return kc.check_kvcache_inputs(a.pop("q"), a.pop("k_cache"), a.pop("v_cache"), a.pop("cache_seqlens"),
                                   a.pop("page_table"), **a)


# ----------------------------------------------------------------------------------------------
# Good inputs
# ----------------------------------------------------------------------------------------------

def test_paged_problem():
    p = check(paged_args())
    assert p.cache == kc.KVCacheOperand(True, "bf16", NUM_PAGES, PAGE, MAX_PAGES, HKV, D)
    assert (p.batch, p.seqlen_q, p.heads, p.kv_heads, p.head_dim, p.dtype) == (B, SQ, H, HKV, D, "bf16")
    assert p.cache.capacity == MAX_PAGES * PAGE == p.max_seqlen_k and p.heads_per_kv == 4 and p.seqlen_new == 0
    assert p.out_shape == (B, SQ, H, D) and p.lse_shape == (B, H, SQ)


def test_contiguous_cache_is_one_page_per_sequence():
    p = check(contiguous_args())
    assert p.cache == kc.KVCacheOperand(False, "bf16", B, 64, 1, HKV, D)
    assert p.cache.capacity == 64 and p.cache.pool_rows == B * 64
    odd = _problem(contiguous_args(k_cache=info((B, 100, HKV, D)), v_cache=info((B, 100, HKV, D))))
    plan = kc.plan_problem(odd, 132)
    # one box of the kernel's tile (an unsplit call of few rows: UNSPLIT_RULE's 128 keys, [D-decode-bn128-unsplit])
    assert plan.fetch == paging.FetchPlan(paging.KVFetch.TMA_BOXES, plan.bn, 1)
    assert plan.bn == (128 if plan.unsplit and plan.gqa.rows <= 4 and D == 128 else kc.DECODE_BN[D])


@pytest.mark.parametrize("page_size", [1, 3, 16, 32, 64, 100, 128, 256])
def test_any_page_size_from_1_to_256(page_size):
    pool = info((7, page_size, HKV, D))
    p = check(paged_args(k_cache=pool, v_cache=pool))
    assert p.cache.page_size == page_size and p.cache.capacity == MAX_PAGES * page_size


def test_vllm_view_of_a_kv_pool_is_accepted():
    """vLLM's cache is (2, num_blocks, block_size, kv_heads, D): k_cache and v_cache are views with a
    page stride of the whole pair; only stride(-1) == 1 and 16-byte strides are needed."""
    shape = (NUM_PAGES, PAGE, HKV, D)
    strides = contiguous(shape)
    k_view = info(shape, strides=strides)
    v_view = info(shape, strides=strides, ptr=PTR + NUM_PAGES * strides[0] * 2)
    assert check(paged_args(k_cache=k_view, v_cache=v_view)).cache.num_pages == NUM_PAGES


@pytest.mark.parametrize("seqlen_new", [1, 4, 64])
def test_new_tokens(seqlen_new):
    kv = info((B, seqlen_new, HKV, D))
    assert check(paged_args(k=kv, v=kv)).seqlen_new == seqlen_new


@pytest.mark.parametrize("heads,kv_heads", [(8, 8), (8, 1), (32, 8), (12, 3), (16, 16)])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gqa_mqa_and_head_dims(heads, kv_heads, head_dim):
    pool = info((NUM_PAGES, PAGE, kv_heads, head_dim), "f16")
    p = check(paged_args(q=info((B, 3, heads, head_dim), "f16"), k_cache=pool, v_cache=pool))
    assert p.heads_per_kv == heads // kv_heads and p.dtype == "f16"


def test_fp8_scale_granularities_paged():
    G = kc.ScaleGranularity
    for shape, grain, block in [((), G.TENSOR, None), ((1,), G.TENSOR, None), ((HKV,), G.KV_HEAD, None),
                                ((NUM_PAGES, HKV), G.BLOCK_KV_HEAD, PAGE)]:
        p = check(fp8(paged_args(), info(shape, "f32"), info(shape, "f32")))
        assert p.cache.quantized and p.cache.dtype == "e4m3"
        assert (p.cache.k_scale, p.cache.v_scale, p.cache.scale_block) == (grain, grain, block)
    mixed = check(fp8(paged_args(), info((NUM_PAGES, HKV), "f32"), info((1,), "f32"))).cache
    assert (mixed.k_scale, mixed.v_scale, mixed.scale_block) == (G.BLOCK_KV_HEAD, G.TENSOR, PAGE)


def test_fp8_token_block_scales_contiguous():
    p = check(fp8(contiguous_args(), info((B, 4, HKV), "f32"), info((B, 4, HKV), "f32")))
    assert p.cache.k_scale is kc.ScaleGranularity.BLOCK_KV_HEAD and p.cache.scale_block == 16


def test_out_is_checked_when_given():
    assert check(paged_args(out=info((B, SQ, H, D)))).out_shape == (B, SQ, H, D)


# ----------------------------------------------------------------------------------------------
# The error catalogue: (case, arguments, error class, words the message must hold)
# ----------------------------------------------------------------------------------------------

POOL = (NUM_PAGES, PAGE, HKV, D)
CATALOGUE = [
    # q
    ("q rank 3", paged_args(q=info((B, H, D))), E.ShapeError, ["q must be 4-D"]),
    ("q fp32", paged_args(q=info((B, SQ, H, D), "f32")), E.DTypeError, ["q has dtype f32"]),
    ("q empty", paged_args(q=info((B, 0, H, D))), E.EmptyInputError, ["seqlen_q=0"]),
    ("q unaligned", paged_args(q=info((B, SQ, H, D), ptr=PTR + 2)), E.LayoutError, ["flash_attn_with_kvcache", "q data pointer"]),
    # caches
    ("cache rank 5", paged_args(k_cache=info((2,) + POOL), v_cache=info((2,) + POOL)), E.ShapeError, ["k_cache must be 4-D"]),
    ("cache e5m2", paged_args(k_cache=info(POOL, "e5m2"), v_cache=info(POOL, "e5m2")), E.DTypeError, ["e5m2", "e4m3"]),
    ("cache f16 for bf16 q", paged_args(k_cache=info(POOL, "f16"), v_cache=info(POOL, "f16")), E.DTypeError, ["q's dtype bf16"]),
    ("k/v cache dtypes differ", dict(fp8(paged_args()), v_cache=info(POOL)), E.DTypeError, ["share one dtype", "e4m3", "bf16"]),
    ("pool page sizes differ", paged_args(v_cache=info((NUM_PAGES, 32, HKV, D))), E.ShapeError, ["page sizes differ"]),
    ("pool page counts differ", paged_args(v_cache=info((11, PAGE, HKV, D))), E.ShapeError, ["shapes differ"]),
    ("page size 0", paged_args(k_cache=info((NUM_PAGES, 0, HKV, D)), v_cache=info((NUM_PAGES, 0, HKV, D))),
     E.EmptyInputError, ["page_size=0"]),
    ("page size 512", paged_args(k_cache=info((NUM_PAGES, 512, HKV, D)), v_cache=info((NUM_PAGES, 512, HKV, D))),
     E.ShapeError, ["page size 512", "1..256"]),
    ("cache head_dim", paged_args(k_cache=info((NUM_PAGES, PAGE, HKV, 64)), v_cache=info((NUM_PAGES, PAGE, HKV, 64))),
     E.ShapeError, ["head_dim differs", "128", "64"]),
    ("contiguous batch", contiguous_args(k_cache=info((3, 64, HKV, D)), v_cache=info((3, 64, HKV, D))),
     E.ShapeError, ["batch 3", "pass page_table"]),
    ("cache inner stride", paged_args(k_cache=info(POOL, strides=(PAGE * HKV * D * 2, HKV * D * 2, D * 2, 2))),
     E.LayoutError, ["k_cache must have stride 1 along head_dim"]),
    ("pool too many rows", paged_args(k_cache=info((2**24, 256, 1, D)), v_cache=info((2**24, 256, 1, D)),
                                      q=info((B, SQ, 1, D))), E.ShapeError, ["int32"]),
    # heads, head_dim
    ("head_dim 96", paged_args(q=info((B, SQ, H, 96)), k_cache=info((NUM_PAGES, PAGE, HKV, 96)),
                               v_cache=info((NUM_PAGES, PAGE, HKV, 96))), E.HeadDimError, ["head_dim 96"]),
    ("heads not a multiple", paged_args(q=info((B, SQ, 6, D)), k_cache=info((NUM_PAGES, PAGE, 4, D)),
                                        v_cache=info((NUM_PAGES, PAGE, 4, D))), E.HeadsRatioError, ["6 heads", "4 KV heads"]),
    # page table
    ("page_table int64", paged_args(page_table=info((B, MAX_PAGES), "i64")), E.DTypeError, ["page_table must be int32"]),
    ("page_table rank 1", paged_args(page_table=info((B * MAX_PAGES,), "i32")), E.ShapeError, ["page_table must be [batch, max_pages]"]),
    ("page_table batch", paged_args(page_table=info((B + 1, MAX_PAGES), "i32")), E.ShapeError, ["[2, max_pages]", "(3, 4)"]),
    ("page_table empty", paged_args(page_table=info((B, 0), "i32")), E.EmptyInputError, ["max_pages = 0"]),
    ("page_table column-major", paged_args(page_table=info((B, MAX_PAGES), "i32", strides=(1, B))),
     E.LayoutError, ["page_table must have stride 1"]),
    ("page_table broadcast rows", paged_args(page_table=info((B, MAX_PAGES), "i32", strides=(0, 1))),
     E.LayoutError, ["page_table has overlapping rows"]),
    ("page_table unaligned", paged_args(page_table=info((B, MAX_PAGES), "i32", ptr=PTR + 2)), E.LayoutError, ["4-byte"]),
    ("capacity beyond int32", paged_args(page_table=info((B, 2**24), "i32"), k_cache=info((NUM_PAGES, 256, HKV, D)),
                                         v_cache=info((NUM_PAGES, 256, HKV, D))), E.ShapeError, ["capacity", "int32"]),
    # cache_seqlens
    ("seqlens int64", paged_args(cache_seqlens=info((B,), "i64")), E.DTypeError, ["cache_seqlens must be int32"]),
    ("seqlens shape", paged_args(cache_seqlens=info((B, 1), "i32")), E.ShapeError, ["cache_seqlens must be [batch]"]),
    ("seqlens strided", paged_args(cache_seqlens=info((B,), "i32", strides=(2,))), E.LayoutError, ["cache_seqlens"]),
    # new tokens
    ("k without v", paged_args(k=info((B, 1, HKV, D))), E.ShapeError, ["only k"]),
    ("v without k", paged_args(v=info((B, 1, HKV, D))), E.ShapeError, ["only v"]),
    ("new tokens kv_heads", paged_args(k=info((B, 1, H, D)), v=info((B, 1, H, D))), E.ShapeError,
     ["[batch, seqlen_new, kv_heads, head_dim]"]),
    ("new tokens batch", paged_args(k=info((B + 1, 1, HKV, D)), v=info((B + 1, 1, HKV, D))), E.ShapeError, ["seqlen_new"]),
    ("new tokens rank", paged_args(k=info((B, HKV, D)), v=info((B, HKV, D))), E.ShapeError, ["k must be 4-D"]),
    ("new k and v differ", paged_args(k=info((B, 2, HKV, D)), v=info((B, 1, HKV, D))), E.ShapeError, ["one shape"]),
    ("new tokens dtype", paged_args(k=info((B, 1, HKV, D), "f16"), v=info((B, 1, HKV, D), "f16")), E.DTypeError,
     ["k (new tokens) has dtype f16"]),
    ("new tokens empty", paged_args(k=info((B, 0, HKV, D)), v=info((B, 0, HKV, D))), E.EmptyInputError, ["seqlen_new=0"]),
    ("new tokens beyond capacity", paged_args(k=info((B, MAX_PAGES * PAGE + 1, HKV, D)),
                                              v=info((B, MAX_PAGES * PAGE + 1, HKV, D))), E.ShapeError,
     ["65 new tokens", "capacity of 64"]),
    ("new tokens into FP8", fp8(paged_args(k=info((B, 1, HKV, D)), v=info((B, 1, HKV, D)))), E.UnsupportedFeatureError,
     ["FP8 cache"]),
    # FP8 scales
    ("FP8 without scales", fp8(paged_args(), None, None), E.KVScaleError, ["k_scale and v_scale missing"]),
    ("FP8 without v_scale", fp8(paged_args(), info((1,), "f32"), None), E.KVScaleError, ["v_scale missing"]),
    ("scales for a bf16 cache", paged_args(k_scale=info((1,), "f32")), E.KVScaleError, ["k_scale given for a bf16 cache"]),
    ("scale bf16", fp8(paged_args(), info((1,), "bf16")), E.DTypeError, ["k_scale must be float32"]),
    ("scale per query head", fp8(paged_args(), info((H,), "f32")), E.ShapeError, ["k_scale has shape (8,)", "per KV head"]),
    ("scale page count", fp8(paged_args(), info((NUM_PAGES + 1, HKV), "f32")), E.ShapeError,
     ["[num_pages, kv_heads] = [10, 2]"]),
    ("scale block not dividing", fp8(contiguous_args(), info((B, 5, HKV), "f32"), info((B, 5, HKV), "f32")),
     E.ShapeError, ["num_blocks dividing seqlen_cache 64"]),
    ("scale blocks differ", fp8(contiguous_args(), info((B, 4, HKV), "f32"), info((B, 2, HKV), "f32")),
     E.ShapeError, ["different sizes", "[16, 32]"]),
    ("scale strided", fp8(paged_args(), info((NUM_PAGES, HKV), "f32", strides=(1, NUM_PAGES))), E.LayoutError,
     ["k_scale must have stride 1"]),
    # out
    ("out shape", paged_args(out=info((B, SQ, HKV, D))), E.ShapeError, ["out must have q's shape"]),
    ("out dtype", paged_args(out=info((B, SQ, H, D), "f16")), E.DTypeError, ["out must have q's dtype"]),
]


@pytest.mark.parametrize("case,args,exc,words", CATALOGUE, ids=[c[0] for c in CATALOGUE])
def test_error_catalogue(case, args, exc, words):
    err = raises(exc, words, check, args)
    assert str(err).startswith("flash_attn_with_kvcache: ")


def test_catalogue_covers_every_error_the_checks_raise():
    raised = {c[2] for c in CATALOGUE}
    assert {E.DTypeError, E.ShapeError, E.LayoutError, E.EmptyInputError, E.HeadDimError, E.HeadsRatioError,
            E.KVScaleError, E.UnsupportedFeatureError} <= raised
    assert issubclass(E.KVScaleError, E.ScaleError) and E.KVScaleError in E.ERRORS


@pytest.mark.parametrize("bad", [-1, 2.0, "4", True, 129])
def test_num_splits_values(bad):
    raises(E.FlashAttnInputError, ["num_splits"], kc.check_num_splits, bad)


def test_num_splits_none_and_zero_mean_the_heuristic():
    assert kc.check_num_splits(None) is None and kc.check_num_splits(0) is None and kc.check_num_splits(3) == 3


# ----------------------------------------------------------------------------------------------
# Plan
# ----------------------------------------------------------------------------------------------

def _problem(args, **opts):
    o = dict(causal=True, softmax_scale=D ** -0.5, num_splits=None, return_lse=False)
    o.update(opts)
    return check(args).with_options(**o)


def test_plan_of_the_issue_decode():
    """batch 64, 32 heads over 8 KV heads, one query, 8192 keys: packed GQA, one tile per KV head,
    no split on 132 SMs; a TMA box per tile for the contiguous cache, per 16-token page for page 16."""
    q = info((64, 1, 32, D))
    dense = _problem(contiguous_args(q=q, k_cache=info((64, 8192, 8, D)), v_cache=info((64, 8192, 8, D)),
                                     cache_seqlens=info((64,), "i32")))
    plan = kc.plan_problem(dense, 132)
    assert plan.gqa.packed and plan.gqa.rows == 4 and plan.gqa.m_tiles == 1
    assert plan.num_splits == 1 and plan.grid == (1, 8, 64) and plan.o_partial_shape is None
    assert plan.fetch == paging.FetchPlan(paging.KVFetch.TMA_BOXES, plan.bn, 1)
    pool = info((64 * 512, 16, 8, D))
    paged = _problem(paged_args(q=q, k_cache=pool, v_cache=pool, cache_seqlens=info((64,), "i32"),
                                page_table=info((64, 512), "i32")))
    plan = kc.plan_problem(paged, 132)
    assert plan.fetch.fetch is paging.KVFetch.TMA_BOXES and plan.fetch.box_rows == 16
    assert plan.page_div.log2 == 4


def test_plan_splits_a_small_batch_and_sizes_the_workspaces():
    pool = info((1024, 64, HKV, D))
    p = _problem(paged_args(q=info((1, 4, H, D)), k_cache=pool, v_cache=pool, cache_seqlens=info((1,), "i32"),
                            page_table=info((1, 128), "i32")))
    plan = kc.plan_problem(p, 132)
    assert plan.num_splits > 1
    assert plan.grid == (plan.num_splits, HKV, 1)
    assert plan.o_partial_shape == (plan.num_splits, 1, 4, H, D)
    assert plan.lse_partial_shape == (plan.num_splits, 1, H, 4)
    forced = kc.plan_problem(p.with_options(causal=True, softmax_scale=1.0, num_splits=3, return_lse=True), 132)
    assert forced.num_splits == 3 and forced.grid == (3, HKV, 1)


def test_plan_page_1_takes_one_row_boxes_and_odd_pages_divide_by_fastdiv():
    pool = info((4096, 1, HKV, D))
    plan = kc.plan_problem(_problem(paged_args(k_cache=pool, v_cache=pool)), 132)
    # page size 1: the cp.async gather, one row per copy (the split kernel's `gather`)
    assert paging.fetch_plan(plan.bn, 1).fetch is paging.KVFetch.CP_ASYNC_GATHER
    assert plan.fetch == paging.FetchPlan(paging.KVFetch.CP_ASYNC_GATHER, 1, plan.bn)
    pool = info((100, 48, HKV, D))
    plan = kc.plan_problem(_problem(paged_args(k_cache=pool, v_cache=pool)), 132)
    assert plan.page_div.log2 is None and plan.page_div.split(100) == (2, 4)
    assert plan.fetch == paging.FetchPlan(paging.KVFetch.TMA_BOXES, 16, plan.bn // 16)
    # gcd(64, 24) = 8: 8-row TMA boxes for bf16 ([D-decode-box8]), the gather for an FP8 cache
    pool = info((100, 24, HKV, D))
    plan = kc.plan_problem(_problem(paged_args(k_cache=pool, v_cache=pool)), 132)
    assert plan.fetch == paging.FetchPlan(paging.KVFetch.TMA_BOXES, 8, plan.bn // 8)
    fp8 = info((100, 24, HKV, D), "e4m3")
    plan = kc.plan_problem(_problem(paged_args(k_cache=fp8, v_cache=fp8, k_scale=info((1,), "f32"),
                                               v_scale=info((1,), "f32"))), 132)
    assert plan.fetch == paging.FetchPlan(paging.KVFetch.CP_ASYNC_GATHER, 1, plan.bn)


def test_plan_kvcache_refuses_host_tensors_and_int_seqlens():
    torch = pytest.importorskip("torch")
    q = torch.zeros(B, SQ, H, D, dtype=torch.bfloat16)
    cache = torch.zeros(B, 64, HKV, D, dtype=torch.bfloat16)
    seqlens = torch.zeros(B, dtype=torch.int32)
    raises(E.DeviceError, ["flash_attn_with_kvcache", "q is on device 'cpu'"], kc.plan_kvcache, q, cache, cache, seqlens,
           num_sms=132)
    raises(E.DTypeError, ["Python int"], kc.plan_kvcache, q, cache, cache, 5, num_sms=132)


def test_public_entry_point():
    import fa4mlir
    from fa4mlir.attention.kvcache_call import flash_attn_with_kvcache
    assert fa4mlir.flash_attn_with_kvcache is flash_attn_with_kvcache


def test_kvcache_module_imports_no_mlir():
    code = BLOCK_MLIR + textwrap.dedent("""
        import fa4mlir.attention.kvcache, fa4mlir.attention.kvcache_call, fa4mlir.kernels.common.paging, fa4mlir.kernels.common.decode_schedule
        import fa4mlir.testing_kvcache
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr
