"""flash_attn_with_kvcache on an sm_90 GPU with the bundle's decode kernels (FA4MLIR_BUNDLE built
with `--set decode`, or `--set bench`), by the FA rule against testing_kvcache.kvcache_reference
(float64): contiguous and paged caches (shuffled page tables, page sizes 1 .. 256 and odd ones),
lengths 0 / 1 / page-1 / page / page+1 and different per sequence, seqlen_q 1 .. 16 with the
causal mask bottom-right, GQA ratios 1, 4, 8 and MQA, forced split counts (and the same bits for
the same inputs), NaN written into every unused page, past every sequence's length and into the
output before the call (none may reach it), CUDA-graph capture replayed after cache_seqlens, the
page table and the cache contents change, and no host synchronisation in a call. Calls of one
split (the default for short caches, or num_splits=1) run the decode kernel's unsplit variant,
which writes out (strided too) and lse itself ([D-decode-unsplit]); page sizes 8, 24, 40 load by
8-row TMA boxes ([D-decode-box8]).

The kernels these tests need are in `kernel_sets.decode()` (tests/test_kvcache_decode.py checks it
against the parameter tables below, without a GPU).
"""
import math

import pytest

pytestmark = pytest.mark.gpu

NAN = float("nan")


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)   # bundle: FA4MLIR_BUNDLE is set (flash_attn_with_kvcache's kernel source)
    return pytest.importorskip("torch")


class Case:
    """One call's tensors: q, the cache (contiguous [B, S, Hkv, D] or a shuffled paged pool) with
    NaN everywhere a sequence does not own, cache_seqlens, page_table, and `out` full of NaN."""

    def __init__(self, torch, lengths, *, seqlen_q=1, heads=8, kv_heads=2, head_dim=128, page_size=16,
                 dtype="bf16", seed=0, spare_pages=3, capacity=None):
        self.torch = torch
        tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
        gen = torch.Generator(device="cpu").manual_seed(seed)
        batch = len(lengths)
        self.lengths = list(lengths)
        self.page_size = page_size
        cap = capacity or max(max(lengths), 1) + 7
        self.q = torch.randn(batch, seqlen_q, heads, head_dim, generator=gen).to(tdtype).cuda()
        if page_size is None:
            k = torch.randn(batch, cap, kv_heads, head_dim, generator=gen)
            v = torch.randn(batch, cap, kv_heads, head_dim, generator=gen)
            for b, n in enumerate(lengths):
                k[b, n:] = NAN
                v[b, n:] = NAN
            self.page_table = None
        else:
            max_pages = -(-cap // page_size)
            num_pages = batch * max_pages + spare_pages
            k = torch.full((num_pages, page_size, kv_heads, head_dim), NAN)
            v = torch.full((num_pages, page_size, kv_heads, head_dim), NAN)
            perm = torch.randperm(num_pages, generator=gen)
            table = torch.full((batch, max_pages), -1, dtype=torch.int32)
            used = 0
            for b, n in enumerate(lengths):
                pages = -(-n // page_size)
                table[b, :pages] = perm[used:used + pages].to(torch.int32)
                used += pages
                if b % 2:   # unused slots hold garbage (never read), else -1
                    table[b, pages:] = 1_000_000 + b
                for t0 in range(0, n, page_size):
                    rows = min(page_size, n - t0)
                    page = int(table[b, t0 // page_size])
                    k[page, :rows] = torch.randn(rows, kv_heads, head_dim, generator=gen)
                    v[page, :rows] = torch.randn(rows, kv_heads, head_dim, generator=gen)
            self.page_table = table.cuda()
        self.k_cache, self.v_cache = k.to(tdtype).cuda(), v.to(tdtype).cuda()
        self.cache_seqlens = torch.tensor(lengths, dtype=torch.int32).cuda()
        self.out = torch.full_like(self.q, NAN)

    def call(self, **kw):
        import fa4mlir
        return fa4mlir.flash_attn_with_kvcache(self.q, self.k_cache, self.v_cache, self.cache_seqlens, self.page_table,
                                               out=self.out, return_lse=True, **kw)

    def rows_of(self, b):
        """Sequence b's K and V rows (through the page table), in cache order."""
        n = self.lengths[b]
        if self.page_table is None:
            return self.k_cache[b, :n], self.v_cache[b, :n]
        t = self.torch.arange(n, device="cuda")
        num_pages = self.k_cache.shape[0]
        pages = self.page_table[b].long().clamp(0, num_pages - 1)
        idx = pages[t // self.page_size] * self.page_size + t % self.page_size
        flat = (-1, *self.k_cache.shape[2:])
        return self.k_cache.reshape(flat)[idx], self.v_cache.reshape(flat)[idx]

    def check(self, out, lse, causal=True, softmax_scale=None):
        """FA rule on out and lse of the rows that see a key; rows that see none: 0 and +inf; no NaN."""
        torch = self.torch
        from fa4mlir.testing import attention_math, fa_rule
        from fa4mlir.testing_kvcache import kvcache_reference
        cpu = lambda x: None if x is None else x.cpu()   # noqa: E731
        ref = kvcache_reference(cpu(self.q).float(), cpu(self.k_cache).float(), cpu(self.v_cache).float(),
                                cpu(self.cache_seqlens), cpu(self.page_table), causal=causal,
                                softmax_scale=softmax_scale)
        ref_out, ref_lse = ref["out"], ref["lse"]               # float64 [B, Sq, H, D], [B, H, Sq]
        d = self.q.shape[-1]
        scale = d ** -0.5 if softmax_scale is None else softmax_scale
        sq = self.q.shape[1]
        errs = {"out": 0.0, "out_lowp": 0.0, "lse": 0.0, "lse_lowp": 0.0}
        assert not torch.isnan(out).any(), "NaN in out"
        assert not torch.isnan(lse).any(), "NaN in lse"
        for b, n in enumerate(self.lengths):
            seen = torch.tensor([n > 0 and (not causal or i + n - sq >= 0) for i in range(sq)])
            o_b, l_b = out[b].cpu().double(), lse[b].cpu().double()
            if (~seen).any():
                assert (o_b[~seen] == 0).all(), f"sequence {b}: a row that sees no key is not 0"
                assert torch.isposinf(l_b[:, ~seen]).all(), f"sequence {b}: a row that sees no key has lse != +inf"
            if not seen.any():
                continue
            k_rows, v_rows = self.rows_of(b)
            low_o, low_l = attention_math(self.q[b:b + 1], k_rows[None], v_rows[None], scale, causal, self.q.dtype)
            r_o, r_l = ref_out[b][seen], ref_lse[b][:, seen]
            errs["out"] = max(errs["out"], (o_b[seen] - r_o).abs().max().item())
            errs["out_lowp"] = max(errs["out_lowp"], (low_o[0].cpu().double()[seen] - r_o).abs().max().item())
            errs["lse"] = max(errs["lse"], (l_b[:, seen] - r_l).abs().max().item())
            errs["lse_lowp"] = max(errs["lse_lowp"], (low_l[0].cpu().double()[:, seen] - r_l).abs().max().item())
        ok_out, bound = fa_rule(errs["out"], errs["out_lowp"])
        ok_lse, lse_bound = fa_rule(errs["lse"], errs["lse_lowp"])
        assert ok_out and ok_lse, {**errs, "bound": bound, "lse_bound": lse_bound}
        return errs


def page_lengths(p):
    """0, 1, p-1, p, p+1 and a few pages and a bit, one per sequence."""
    return sorted({0, 1, max(p - 1, 0), p, p + 1, 3 * p + 5, 2})


# The tables the kernels are picked from (tests/test_kvcache_decode.py checks the decode set holds
# every kernel they need, split and unsplit): bf16 D128 paged page sizes; small pages by fetch;
# (dtype, head_dim, page_size) beyond D128; FP8 (page_size, scale granularity).
PAGE_SIZES = [1, 2, 3, 5, 7, 8, 16, 24, 32, 40, 48, 64, 128, 256]
GATHER_PAGES = [1, 5, 7]           # gcd(64, page) < 8: the cp.async gather
BOX8_PAGES = [8, 24, 40]           # gcd(64, page) = 8: 8-row TMA boxes
HEAD_DIM_CASES = [("bf16", 128, None), ("bf16", 64, None), ("bf16", 256, None), ("f16", 128, None),
                  ("f16", 64, None), ("bf16", 64, 16), ("bf16", 64, 1), ("bf16", 64, 8), ("bf16", 256, 64),
                  ("f16", 128, 64), ("bf16", 64, 64)]
FP8_CASES = [(None, "tensor"), (None, "kv_head"), (None, "block"), (16, "tensor"), (16, "block"), (64, "kv_head"),
             (64, "block"), (1, "block"), (5, "block"), (1, "kv_head"), (8, "kv_head"), (24, "block")]
UNSPLIT_PAGES = [None, 16, 8, 1, 64]


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_paged_page_sizes(torch, page_size):
    case = Case(torch, page_lengths(page_size), page_size=page_size, seqlen_q=1, seed=page_size)
    out, lse = case.call()
    assert out.data_ptr() == case.out.data_ptr()
    case.check(out, lse)


@pytest.mark.parametrize("page_size", GATHER_PAGES + BOX8_PAGES)
@pytest.mark.parametrize("num_splits", [None, 1, 3])
@pytest.mark.parametrize("seqlen_q", [1, 4])
def test_small_pages_long_sequences(torch, page_size, num_splits, seqlen_q):
    """Page sizes under 8 rows per box take the cp.async gather, 8, 24, 40 8-row TMA boxes
    (paging.fetch_plan): many tiles, a tile's rows spread over many pages (8 boxes of 8 rows from
    up to 8 pages), splits, and lengths around tile edges."""
    from fa4mlir.attention.kvcache import plan_kvcache
    from fa4mlir.kernels.common.paging import FetchPlan, KVFetch
    case = Case(torch, [0, 1, 63, 64, 65, 700, 1500], page_size=page_size, seqlen_q=seqlen_q,
                seed=900 + page_size * 10 + (num_splits or 0) + seqlen_q)
    _, plan = plan_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table,
                           num_splits=num_splits)
    want = FetchPlan(KVFetch.TMA_BOXES, 8, 8) if page_size in BOX8_PAGES else FetchPlan(KVFetch.CP_ASYNC_GATHER, 1, 64)
    assert plan.fetch == want
    out, lse = case.call(num_splits=num_splits)
    case.check(out, lse)


@pytest.mark.parametrize("page_size", [1, 5])
def test_gather_strided_pool(torch, page_size):
    """k_cache and v_cache as views of one [num_pages, 2, page_size, kv_heads, D] tensor (strided
    along the page dim): the gather addresses rows by the caches' own strides."""
    case = Case(torch, [0, 1, 90, 333], page_size=page_size, seqlen_q=1, seed=77 + page_size)
    kv = torch.stack((case.k_cache, case.v_cache), dim=1)
    case.k_cache, case.v_cache = kv[:, 0], kv[:, 1]
    assert not case.k_cache.is_contiguous()
    out, lse = case.call()
    case.check(out, lse)


@pytest.mark.parametrize("seqlen_q", [1, 4, 16])
@pytest.mark.parametrize("heads,kv_heads", [(8, 8), (8, 2), (16, 2), (8, 1), (32, 1)])
@pytest.mark.parametrize("causal", [True, False])
def test_seqlen_q_and_gqa(torch, seqlen_q, heads, kv_heads, causal):
    case = Case(torch, [0, 1, 3, 17, 100, 333], seqlen_q=seqlen_q, heads=heads, kv_heads=kv_heads, page_size=16,
                seed=seqlen_q * 100 + heads + kv_heads)
    out, lse = case.call(causal=causal)
    case.check(out, lse, causal=causal)


@pytest.mark.parametrize("dtype,head_dim,page_size", HEAD_DIM_CASES)
@pytest.mark.parametrize("seqlen_q", [1, 4])
def test_head_dims_dtypes_contiguous(torch, dtype, head_dim, page_size, seqlen_q):
    case = Case(torch, [5, 0, 64, 65, 200, 1], seqlen_q=seqlen_q, head_dim=head_dim, page_size=page_size,
                dtype=dtype, seed=head_dim + seqlen_q)
    out, lse = case.call(softmax_scale=0.07)
    case.check(out, lse, softmax_scale=0.07)


@pytest.mark.parametrize("num_splits", [1, 2, 3, 7, 64])
def test_forced_splits_and_same_bits(torch, num_splits):
    case = Case(torch, [1000, 0, 37, 640, 129], seqlen_q=2, page_size=16, seed=num_splits)
    out, lse = case.call(num_splits=num_splits)
    case.check(out, lse)
    first = (out.clone(), lse.clone())
    out2, lse2 = case.call(num_splits=num_splits)
    assert torch.equal(first[0], out2) and torch.equal(first[1], lse2), "not deterministic"


@pytest.mark.parametrize("page_size", UNSPLIT_PAGES)
@pytest.mark.parametrize("num_splits", [None, 1])
@pytest.mark.parametrize("seqlen_q", [1, 4])
@pytest.mark.parametrize("heads,kv_heads", [(8, 2), (8, 8), (32, 1)])
def test_unsplit_writes_out_and_lse_directly(torch, page_size, num_splits, seqlen_q, heads, kv_heads):
    """One split (the heuristic's choice for these short caches, or forced): the decode kernel's
    unsplit variant alone writes O in q's dtype into the caller's out, here a strided view of a
    NaN-filled tensor (the rest stays NaN), and the LSE; lengths 0, 1, page - 1, page, page + 1 (rows
    that see no key: O = 0, LSE = +inf), packed GQA rows and seqlen_q 4 under the causal mask,
    NaN in unused pages; the same bits on a second call."""
    import fa4mlir
    from fa4mlir.attention.kvcache import plan_kvcache
    from fa4mlir.attention.kvcache_call import configs_for
    p = page_size or 64
    case = Case(torch, page_lengths(p) + [200], page_size=page_size, seqlen_q=seqlen_q, heads=heads,
                kv_heads=kv_heads, seed=3000 + p * 7 + seqlen_q * 3 + heads + (num_splits or 0))
    _, plan = plan_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table,
                           num_splits=num_splits)
    decode, combine = configs_for(plan)
    assert plan.unsplit and decode.unsplit and combine is None, (plan.num_splits, decode.name())
    b, sq, h, d = case.q.shape
    wide = torch.full((b, sq, h + 3, d), NAN, dtype=case.q.dtype, device="cuda")
    out_view = wide[:, :, 2:h + 2]                    # strides (sq (h + 3) d, (h + 3) d, d), offset 2 d
    out, lse = fa4mlir.flash_attn_with_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens,
                                               case.page_table, num_splits=num_splits, out=out_view,
                                               return_lse=True)
    assert out.data_ptr() == out_view.data_ptr()
    assert torch.isnan(wide[:, :, :2]).all() and torch.isnan(wide[:, :, h + 2:]).all(), "wrote outside out"
    case.check(out, lse)
    first = (out.clone(), lse.clone())
    out2, lse2 = case.call(num_splits=num_splits)      # contiguous out: same bits
    assert torch.equal(first[0], out2) and torch.equal(first[1], lse2), "not deterministic"


def test_long_sequence_splits_by_heuristic(torch):
    from fa4mlir.attention.kvcache import plan_kvcache
    case = Case(torch, [5000], heads=8, kv_heads=2, page_size=64, seed=7)
    _, plan = plan_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table)
    assert plan.num_splits > 1
    out, lse = case.call()
    case.check(out, lse)


def test_no_host_sync_and_cuda_graph_replay(torch):
    """Capture one decode step; replay it after cache_seqlens, the page table and the cache
    contents change in place (same shapes), against the reference of the new state."""
    import fa4mlir
    case = Case(torch, [40, 7, 0, 100], seqlen_q=1, page_size=16, seed=11, capacity=160)
    case.call()                                         # warm: checks, plan, kernels loaded
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        case.call()                                     # a checked signature: no synchronising call
    finally:
        torch.cuda.set_sync_debug_mode("default")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        case.call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = fa4mlir.flash_attn_with_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens,
                                                   case.page_table, out=case.out, return_lse=True)
    # new state: other lengths, another page assignment, new contents (unused pages NaN again)
    new = Case(torch, [130, 0, 16, 17], seqlen_q=1, page_size=16, seed=12, capacity=160)
    assert new.k_cache.shape == case.k_cache.shape and new.page_table.shape == case.page_table.shape
    for dst, src in ((case.k_cache, new.k_cache), (case.v_cache, new.v_cache), (case.page_table, new.page_table),
                     (case.cache_seqlens, new.cache_seqlens), (case.q, new.q)):
        dst.copy_(src)
    case.lengths = new.lengths
    case.out.fill_(NAN)
    graph.replay()
    torch.cuda.synchronize()
    case.check(out, lse)


def test_return_lse_false_and_allocated_out(torch):
    import fa4mlir
    case = Case(torch, [3, 70], seqlen_q=1, page_size=None)
    out = fa4mlir.flash_attn_with_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens)
    assert out.shape == case.q.shape and out.dtype == case.q.dtype
    _, lse = case.call()
    case.check(out, lse)
    assert math.isfinite(float(lse.max()))


@pytest.mark.parametrize("page_size", [None, 16, 1, 64])
@pytest.mark.parametrize("seqlen_new", [1, 3])
def test_append_new_tokens(torch, page_size, seqlen_new):
    """k=, v=: the new tokens land in the cache at cache_seqlens (through the page table) and are
    attended to; the rest of the cache is unchanged, cache_seqlens too."""
    import fa4mlir
    from fa4mlir.testing_kvcache import kvcache_reference
    before = [0, 5, 16, 63, 100]
    # pages for the new tokens are the caller's to provide: the case is built for the lengths after
    # the append (stale rows where the new tokens go), cache_seqlens says the lengths before
    case = Case(torch, [n + seqlen_new for n in before], seqlen_q=seqlen_new, page_size=page_size,
                seed=31 + seqlen_new, capacity=112)
    case.cache_seqlens = torch.tensor(before, dtype=torch.int32).cuda()
    gen = torch.Generator(device="cpu").manual_seed(5)
    shape = (len(case.lengths), seqlen_new, case.k_cache.shape[2], case.k_cache.shape[3])
    k_new = torch.randn(shape, generator=gen).to(case.q.dtype).cuda()
    v_new = torch.randn(shape, generator=gen).to(case.q.dtype).cuda()
    cpu = lambda x: None if x is None else x.cpu()   # noqa: E731
    want = kvcache_reference(cpu(case.q).float(), cpu(case.k_cache).float(), cpu(case.v_cache).float(),
                             cpu(case.cache_seqlens), cpu(case.page_table), k=cpu(k_new).float(),
                             v=cpu(v_new).float())
    lens_before = case.cache_seqlens.clone()
    out, lse = fa4mlir.flash_attn_with_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table,
                                               k=k_new, v=v_new, out=case.out, return_lse=True)
    assert torch.equal(case.cache_seqlens, lens_before)
    for got, ref in ((case.k_cache, want["k_cache"]), (case.v_cache, want["v_cache"])):
        got, ref = got.float().cpu(), ref.float()
        same = (got == ref) | (torch.isnan(got) & torch.isnan(ref))
        assert same.all(), "cache after the append differs from the reference's"
    case.cache_seqlens = torch.tensor(case.lengths, dtype=torch.int32).cuda()    # the cache holds them now
    case.check(out, lse)
    ref_out = want["out"].to(out.dtype).cuda()
    assert (out.float() - ref_out.float()).abs().max().item() < 0.05


def test_unsupported_features_raise_before_launch(torch):
    import fa4mlir
    from fa4mlir.testing import raises
    case = Case(torch, [3, 70], seqlen_q=1, page_size=16)
    fp8 = case.k_cache.to(torch.float8_e4m3fn)
    one, per_head = torch.ones(1, device="cuda"), torch.ones(2, device="cuda")
    raises(fa4mlir.UnsupportedFeatureError, ["different granularities"], fa4mlir.flash_attn_with_kvcache, case.q,
           fp8, fp8, case.cache_seqlens, case.page_table, k_scale=one, v_scale=per_head)
    new = torch.zeros(2, 1, 2, 128, dtype=torch.bfloat16, device="cuda")
    raises(fa4mlir.UnsupportedFeatureError, ["FP8"], fa4mlir.flash_attn_with_kvcache, case.q, fp8, fp8,
           case.cache_seqlens, case.page_table, k=new, v=new, k_scale=one, v_scale=one)


def test_custom_op_opcheck_and_compile_fullgraph(torch):
    """fa4mlir::flash_attn_with_kvcache(_out) pass torch.library.opcheck, and a torch.compile'd
    decode step (fullgraph: no graph break) gives the eager bits."""
    import fa4mlir
    from fa4mlir.attention import kvcache_ops  # noqa: F401
    case = Case(torch, [40, 7, 0, 100], seqlen_q=2, page_size=16, seed=21)
    args = (case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table)
    torch.library.opcheck(torch.ops.fa4mlir.flash_attn_with_kvcache.default, (*args, None, True, None, None))
    out = torch.empty_like(case.q)
    torch.library.opcheck(torch.ops.fa4mlir.flash_attn_with_kvcache_out.default, (*args, out, 0.1, True, 2, None))

    def step(q, k_cache, v_cache, lens, table):
        o, lse = fa4mlir.flash_attn_with_kvcache(q * 1, k_cache, v_cache, lens, table, return_lse=True)
        return o * 1, lse

    want = step(*args)
    explain = torch._dynamo.explain(step)(*args)
    assert explain.graph_break_count == 0, explain.break_reasons
    got = torch.compile(step, fullgraph=True)(*args)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    case.check(*got)


def fp8_case(torch, lengths, page_size, grain, seed, seqlen_q=1, capacity=336):
    """A Case whose cache is quantised to e4m3 with float32 scales of one granularity (k and v
    alike): per tensor [1], per KV head [kv_heads], per block ([num_pages, kv_heads] paged,
    [batch, capacity / 16, kv_heads] contiguous). NaN stays NaN where the sequences own nothing."""
    case = Case(torch, lengths, page_size=page_size, seed=seed, seqlen_q=seqlen_q, capacity=capacity)
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    k32, v32 = case.k_cache.float().cpu(), case.v_cache.float().cpu()
    n0, n1, kv_heads, _ = k32.shape
    shape = {"tensor": (1,), "kv_head": (kv_heads,),
             "block": (n0, kv_heads) if page_size is not None else (n0, n1 // 16, kv_heads)}[grain]

    def expand(scale):
        if grain == "tensor":
            return scale.view(1, 1, 1, 1)
        if grain == "kv_head":
            return scale.view(1, 1, kv_heads, 1)
        if page_size is not None:
            return scale.view(n0, 1, kv_heads, 1)
        return scale.repeat_interleave(16, dim=1).view(n0, n1, kv_heads, 1)

    scales = []
    for x in (k32, v32):
        scale = (1 + torch.rand(shape, generator=gen)) / 32        # |x / scale| <= ~150 < 448
        scales.append(scale)
        q8 = (x / expand(scale)).to(torch.float8_e4m3fn)
        if x is k32:
            case.k_cache = q8.cuda()
        else:
            case.v_cache = q8.cuda()
    case.k_scale, case.v_scale = (s.cuda() for s in scales)
    return case


# the FP8 cases where FP8_DEFAULT_RULE runs swap AB (seqlen_q 1: 4 packed rows; tensor / kv_head scales, TMA)
SWAP_AB_FP8_CASES = [(page, grain) for page, grain in FP8_CASES if grain != "block" and page in (None, 16, 64)]


@pytest.mark.parametrize("page_size,grain", SWAP_AB_FP8_CASES)
@pytest.mark.parametrize("num_splits", [None, 3])
def test_fp8_cache_smem_variant(torch, monkeypatch, page_size, grain, num_splits):
    """The conversion-through-SMEM kernel (FA4MLIR_DECODE_FP8_VARIANT=smem, the FP8 default before
    [D-decode-fp8-swapab]) where the rule would run swap AB, by test_fp8_cache's checks; its kernels
    are the `decode` set's (what the rule runs for more than 8 packed rows)."""
    from fa4mlir.attention.kvcache import plan_kvcache
    from fa4mlir.attention.kvcache_call import configs_for
    from fa4mlir.kernels import attention_decode_sm90_config as dec
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, "smem")
    case = fp8_case(torch, [0, 1, 15, 16, 17, 200, 330], page_size, grain, seed=42)
    _, plan = plan_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table,
                           k_scale=case.k_scale, v_scale=case.v_scale, num_splits=num_splits)
    cfg, _ = configs_for(plan)
    assert not cfg.swap_ab and cfg == dec.default_config("bf16", 128, page_size, grain, unsplit=plan.unsplit)
    test_fp8_cache(torch, page_size, grain, 1, num_splits)


@pytest.mark.parametrize("page_size,grain", FP8_CASES)
@pytest.mark.parametrize("seqlen_q", [1, 4])
@pytest.mark.parametrize("num_splits", [None, 3])
def test_fp8_cache(torch, page_size, grain, seqlen_q, num_splits):
    """An e4m3 cache, dequantised in the kernel, by the FA rule against the float64 reference of
    the same codes and scales; PyTorch's low-precision run attends over the dequantised rows in
    bf16. NaN codes in unused pages and past the lengths must not reach the output. num_splits
    None is one split here (the unsplit variant), 3 the split kernel and the combine; page sizes
    8 and 24 stay on the gather for FP8 ([D-decode-box8])."""
    import fa4mlir
    import os

    from fa4mlir.attention.kvcache import plan_kvcache
    from fa4mlir.attention.kvcache_call import configs_for
    from fa4mlir.kernels import attention_decode_sm90_config as dec
    from fa4mlir.kernels.common.paging import KVFetch
    from fa4mlir.testing import attention_math, fa_rule
    from fa4mlir.testing_kvcache import e4m3_decode, kvcache_reference
    case = fp8_case(torch, [0, 1, 15, 16, 17, 200, 330], page_size, grain, seed=41 + seqlen_q, seqlen_q=seqlen_q)
    _, plan = plan_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table,
                           k_scale=case.k_scale, v_scale=case.v_scale, num_splits=num_splits)
    assert plan.unsplit == (num_splits is None and not plan.parts)    # parts: the balanced schedule (split)
    if page_size in (8, 24):
        assert plan.fetch.fetch is KVFetch.CP_ASYNC_GATHER
    if os.environ.get(dec.FP8_VARIANT_ENV, "default") == "default":
        # FP8_DEFAULT_RULE: swap AB at <= 8 packed rows (group 4 x seqlen_q 1), tensor / kv_head scales, TMA
        # fetches (swapabw contiguous, swapab paged); else the conversion-through-SMEM kernel
        cfg, _ = configs_for(plan)
        swap = plan.gqa.rows <= dec.SWAP_AB_ROWS and grain != "block" and plan.fetch.fetch is not KVFetch.CP_ASYNC_GATHER
        assert cfg.swap_ab == swap and cfg.swap_ab_warp_max == (swap and page_size is None), cfg.name()
    out, lse = fa4mlir.flash_attn_with_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens,
                                               case.page_table, k_scale=case.k_scale, v_scale=case.v_scale,
                                               num_splits=num_splits, out=case.out, return_lse=True)
    cpu = lambda x: None if x is None else x.cpu()   # noqa: E731
    ref = kvcache_reference(cpu(case.q).float(), cpu(case.k_cache), cpu(case.v_cache), cpu(case.cache_seqlens),
                            cpu(case.page_table), k_scale=cpu(case.k_scale), v_scale=cpu(case.v_scale))
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    sq, scale = case.q.shape[1], case.q.shape[-1] ** -0.5
    errs = {"out": 0.0, "out_lowp": 0.0, "lse": 0.0, "lse_lowp": 0.0}
    kv_heads = case.k_cache.shape[2]
    for b, n in enumerate(case.lengths):
        seen = torch.tensor([n > 0 and i + n - sq >= 0 for i in range(sq)])
        o_b, l_b = out[b].cpu().double(), lse[b].cpu().double()
        if (~seen).any():
            assert (o_b[~seen] == 0).all() and torch.isposinf(l_b[:, ~seen]).all()
        if not seen.any():
            continue
        # the dequantised rows (the reference's step 4), in bf16 for PyTorch's own computation
        k_codes, v_codes = case.rows_of(b)
        t = torch.arange(n)
        rows = []
        for codes, s in ((k_codes, case.k_scale), (v_codes, case.v_scale)):
            vals = torch.from_numpy(e4m3_decode(codes.cpu().view(torch.uint8).numpy()))
            s = s.cpu()
            if grain == "tensor":
                per = s.view(1, 1).expand(n, kv_heads)
            elif grain == "kv_head":
                per = s.view(1, kv_heads).expand(n, kv_heads)
            elif case.page_table is not None:
                pages = case.page_table[b].cpu().long().clamp(0, case.k_cache.shape[0] - 1)
                per = s[pages[t // case.page_size]]
            else:
                per = s[b, t // 16]
            rows.append((vals * per[..., None]).to(case.q.dtype).cuda())
        low_o, low_l = attention_math(case.q[b:b + 1], rows[0][None], rows[1][None], scale, True, case.q.dtype)
        r_o, r_l = ref["out"][b][seen], ref["lse"][b][:, seen]
        errs["out"] = max(errs["out"], (o_b[seen] - r_o).abs().max().item())
        errs["out_lowp"] = max(errs["out_lowp"], (low_o[0].cpu().double()[seen] - r_o).abs().max().item())
        errs["lse"] = max(errs["lse"], (l_b[:, seen] - r_l).abs().max().item())
        errs["lse_lowp"] = max(errs["lse_lowp"], (low_l[0].cpu().double()[:, seen] - r_l).abs().max().item())
    ok_out, bound = fa_rule(errs["out"], errs["out_lowp"])
    ok_lse, lse_bound = fa_rule(errs["lse"], errs["lse_lowp"])
    assert ok_out and ok_lse, {**errs, "bound": bound, "lse_bound": lse_bound}
