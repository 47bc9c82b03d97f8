"""Decode attention over the KV-cache operand on sm_90a: split-KV, pack GQA, TMA rings, wgmma.

One CTA attends one M tile of 64 packed query rows to one contiguous range of KV tiles (its
split) of one sequence, and writes float32 partial O (normalised by its own row sum) and its LSE;
attention_combine_sm90 merges the splits (attention_decode_sm90_config: the launch contracts).

Grid: x = m_tile + m_tiles * split, y = the CTA's head block (a KV head when GQA is packed, else a
query head), z = batch. Packed row r of the CTA (decode_schedule.PackGQA) is query token
r // cta_heads of query head y * cta_heads + r % cta_heads (cta_heads = group packed, else 1).

Roles (5 warps, 160 threads, no setmaxnreg: neither role is register-bound, and the small block
lets two CTAs share an SM, attention_decode_sm90_config.DEFAULT_STAGES):
    warp 4        `load`  one elected thread: for each KV tile j of the split, K_j then V_j into
                          rings of `stages` (k_pipe, v_pipe), each tile as bn / box_rows TMA boxes
                          per 64-column chunk (note "Paged boxes").
    warps 0-3     `mma`   (one warpgroup) loads the 64 x D Q tile itself (plain loads, packed rows, into the
                          128B-swizzled layout wgmma reads), then per tile j:
                          1. wait K_j; S = Q K_j^T; release K_j
                          2. mask (tokens at or past the sequence's length L_b, and causal
                             bottom-right), online softmax in base 2, P as wgmma A fragments
                          3. O *= alpha
                          4. wait V_j; zero V rows past L_b (note "NaN past L_b"); O += P V_j;
                             release V_j
                          then the epilogue: O / l and LSE into the partial workspaces.

Note "Paged boxes": the cache is a 4-D tensor [pages, page_rows, kv_heads, D] to TMA (a contiguous
cache: [batch, seqlen_cache, kv_heads, D], the page being the sequence). A paged tile of bn tokens
is cut into boxes of box_rows = gcd(bn, page_size) rows, which never straddle a page
(paging.py, note "Box rows"); box i of tile j holds tokens t = j bn + i box_rows .. and comes from
pool page page_table[b, t / page_size] (clamped into [0, num_pages)), row t % page_size. A box
that starts at or past L_b reads no page-table entry: it is aimed at page num_pages, outside the
tensor, so TMA fills it with zeros (and still counts its bytes on the stage's barrier).

Note "NaN past L_b": rows at or past L_b of a box that starts before L_b are real cache rows
(stale tokens, unused rows of the last page) and may hold anything, NaN included. K's are harmless
(their scores are replaced by -inf before the max), but P V multiplies V's by P = 0, and 0 x NaN
is NaN; so the consumer writes zeros over those V rows in SMEM before the P V GEMM (only in the
tile that holds L_b), then fences them to the async proxy.
"""
from __future__ import annotations

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import ELEM_BYTES, KernelBuilder, PipeState, Value, const, fast_div, fma, fmax, log2, select, tree_reduce, undef, vec
from .attention_decode_sm90_config import SPLIT_PARAMS, TILE_M, DecodeConfig
from .common.softmax import max_update
from .common.wgmma import a_frag_pairs, acc_col, acc_pair, acc_row, row_regs, wait_group

SWIZZLE = 128          # bytes per swizzled row: 64 16-bit columns
CHUNK = 64             # head-dim columns per swizzle chunk
UNITS = SWIZZLE // 16  # 16-byte units per swizzled row
WGMMA_K = 16
LN2 = 0.6931471805599453
NEG_INF = float("-inf")
BAR_CONSUMER = 1       # named barrier of the consumer warpgroup (128 threads)


def build(cfg: DecodeConfig = DecodeConfig()) -> dsl.KernelIR:
    cfg.validate()
    kb = KernelBuilder(cfg.name(), arch="sm_90a", block=(cfg.threads, 1, 1), config=cfg.key(),
                       min_ctas_per_sm=cfg.ctas_per_sm)
    box = (CHUNK, 1, cfg.box_rows, 1)
    p = kb.params_from(SPLIT_PARAMS, tma={n: dict(dtype=cfg.dtype, box=box, swizzle="128B")
                                          for n in ("k_cache", "v_cache")})
    with kb.body():
        q_smem = kb.smem("q_smem", TILE_M * cfg.d_chunks * SWIZZLE)
        k_smem = kb.smem("k_smem", cfg.stages * cfg.tile_bytes())
        v_smem = kb.smem("v_smem", cfg.stages * cfg.tile_bytes())
        k_pipe = kb.pipeline("k_pipe", num_stages=cfg.stages, producer="load", consumers=["mma"])
        v_pipe = kb.pipeline("v_pipe", num_stages=cfg.stages, producer="load", consumers=["mma"])
        kb.pipeline_init()
        work = _Work(kb, cfg, p)
        with kb.warp_roles():
            with kb.role("mma", first_warp=0, num_warps=4, regs=0):
                _mma_role(kb, cfg, work, p, q_smem, k_smem, v_smem, k_pipe, v_pipe)
            with kb.role("load", first_warp=4, num_warps=1, regs=0):
                _load_role(kb, cfg, work, p, k_smem, v_smem, k_pipe, v_pipe)
    return kb.finish()


def div(p, name):
    return p[f"{name}_mul"], p[f"{name}_shr"]


class _Work:
    """This CTA's work item (computed alike by every thread): batch b, head block, KV head, M tile,
    split, the sequence length L_b (cache_seqlens[b] clamped, plus seqlen_new) and the split's KV
    tiles [begin, end) (decode_schedule.split_range of ceil(L_b / bn) tiles)."""

    def __init__(self, kb, cfg, p):
        x = kb.block_idx(0)
        self.split = fast_div(x, *div(p, "m_tiles"))
        self.m_tile = x - self.split * p["m_tiles"]
        self.head_block = kb.block_idx(1)
        self.batch = kb.block_idx(2)
        self.head_base = self.head_block * p["cta_heads"]
        self.kv_head = fast_div(self.head_base, *div(p, "group"))
        raw = kb.load(kb.gep(p["cache_seqlens"], self.batch, "i32"), "i32", align=4)
        # L_b: cache_seqlens[b] clamped to [0, capacity - seqlen_new], plus the seqlen_new tokens
        # kvcache_append_sm90 wrote there first (kvcache.py's kernel contract)
        self.length = raw.smax(0).smin(p["capacity"] - p["seqlen_new"]) + p["seqlen_new"]
        n_tiles = (self.length + (cfg.bn - 1)) // cfg.bn
        base = n_tiles // p["num_splits"]
        extra = n_tiles - base * p["num_splits"]
        before = self.split.lt(extra)
        self.begin = self.split * base + select(before, self.split, extra)
        self.end = self.begin + base + select(before, const(1), const(0))


# ---- producer -------------------------------------------------------------------------------------

def _load_role(kb, cfg, work: _Work, p, k_smem, v_smem, k_pipe, v_pipe):
    tile_bytes = cfg.tile_bytes()
    eb = ELEM_BYTES[cfg.dtype]
    with kb.if_(kb.elect_one()).then_():
        fa4.tma_prefetch(p["k_cache"])
        fa4.tma_prefetch(p["v_cache"])

        def box_origin(t: Value):
            """(page, row) coordinates of the box starting at token t (note "Paged boxes")."""
            if not cfg.paged:
                return work.batch, t
            live = t.slt(work.length)
            slot = fast_div(t, *div(p, "page"))
            row = t - slot * p["page_size"]
            index = work.batch.to("i64") * p["page_table_stride"].to("i64") + select(live, slot, const(0)).to("i64")
            entry = kb.load(kb.gep(p["page_table"], index, "i32"), "i32", align=4)
            page = entry.smax(0).smin(p["num_pages"] - 1)
            return select(live, page, p["num_pages"]), row

        def fill(pipe, desc, smem, s: PipeState, t0: Value, origins):
            # 1. wait for the stage to be free, 2. expect its bytes, 3. one box per (box, chunk)
            pipe.producer_acquire(s)
            pipe.producer_commit(s, tx_bytes=tile_bytes)
            base = s.stage * tile_bytes
            for i, (page, row) in enumerate(origins):
                for c in range(cfg.d_chunks):
                    dst = kb.gep(smem, base + c * cfg.bn * SWIZZLE + i * cfg.box_rows * SWIZZLE, "i8")
                    fa4.tma_load(desc, dst, s.stage, [const(c * CHUNK), work.kv_head, row, page],
                                 pipe=pipe.name, box=[CHUNK, 1, cfg.box_rows, 1], elem_bytes=eb)

        loop = kb.for_(work.begin, work.end, 1, carry=k_pipe.initial_state())
        with loop as (j, s):
            t0 = j * cfg.bn
            # V's boxes read the page table again (an L1 hit): keeping K's origins live across K's
            # fill costs 2 registers a box (spills at 1-row boxes with two CTAs per SM)
            for pipe, desc, smem in ((k_pipe, p["k_cache"], k_smem), (v_pipe, p["v_cache"], v_smem)):
                origins = [box_origin(t0 + i * cfg.box_rows) for i in range(cfg.boxes_per_tile)]
                fill(pipe, desc, smem, s, t0, origins)
            loop.yield_(s.advance())


# ---- consumer -------------------------------------------------------------------------------------

class _Consumer:
    """The consumer warpgroup's thread geometry (common/wgmma.py): rows row0, row0 + 8 of 64."""

    def __init__(self, kb, cfg, work: _Work, p):
        self.kb, self.cfg, self.work, self.p = kb, cfg, work, p
        self.t = kb.thread_idx(0) % 128
        lane = self.t % 32
        self.g = lane // 4
        self.t4 = lane % 4
        self.row0 = (self.t // 32) * 16 + self.g
        self.n_s = cfg.bn // 2
        self.n_o = cfg.head_dim // 2
        self.is_leader = self.t.eq(0)
        self.scale_log2 = p["scale_log2"]
        m0 = work.m_tile * TILE_M
        cta_heads = p["cta_heads"]
        self.packed = [m0 + self.row0 + 8 * h for h in (0, 1)]          # this thread's packed rows
        self.token, self.head, self.end = [], [], []
        for r in self.packed:
            tok = fast_div(r, *div(p, "cta_heads"))
            self.token.append(tok)
            self.head.append(work.head_base + r - tok * cta_heads)
            # keys [0, end) are visible: L_b, less seqlen_q - 1 - token under the causal mask
            hidden = (p["seqlen_q"] - 1 - tok) * p["causal"]
            self.end.append((work.length - hidden).smax(0))
        self.row_ok = [r.lt(p["rows"]) for r in self.packed]

    def release(self, pipe, s: PipeState):
        with self.kb.if_(self.is_leader).then_():
            pipe.consumer_release(s)

    def barrier(self):
        self.kb.named_barrier(BAR_CONSUMER, 128)


def _load_q(cs: _Consumer, q_smem):
    """Q's 64 packed rows into SMEM (128B swizzle, chunk c of row r at c * 64 * 128 + r * 128, 16-byte
    unit u at (u ^ r % 8) * 16); rows past `rows` are zeros."""
    kb, cfg, p, work = cs.kb, cs.cfg, cs.p, cs.work
    units = cfg.d_chunks * UNITS
    m0 = work.m_tile * TILE_M
    cta_heads = p["cta_heads"]
    zero = const(0, ("i32", 4))
    for i in range(TILE_M * units // 128):
        u = cs.t + 128 * i
        r = u // units
        cu = u - r * units
        c, unit = cu // UNITS, cu % UNITS
        packed = m0 + r
        ok = packed.lt(p["rows"])
        tok = fast_div(packed, *div(p, "cta_heads"))
        head = work.head_base + packed - tok * cta_heads
        index = (work.batch.to("i64") * p["q_stride_b"] + tok.to("i64") * p["q_stride_s"]
                 + head.to("i64") * p["q_stride_h"] + (cu * 8).to("i64"))
        safe = select(ok, index, const(0, "i64"))      # rows past `rows` read q's first row, unused
        val = select(ok, kb.load(kb.gep(p["q"], safe, cfg.dtype), ("i32", 4), align=16), zero)
        off = c * (TILE_M * SWIZZLE) + r * SWIZZLE + (unit ^ (r % 8)) * 16
        kb.store(val, kb.gep(q_smem, off, "i8"), align=16)
    kb.fence("async_smem")
    cs.barrier()


def _issue_s(cs: _Consumer, q_smem, k_smem, stage: Value) -> Value:
    kb, cfg = cs.kb, cs.cfg
    acc = undef(("f32", cs.n_s))
    k_base = kb.gep(k_smem, stage * cfg.tile_bytes(), "i8")
    fa4.mma_fence()
    for kk in range(cfg.head_dim // WGMMA_K):
        c, within = divmod(kk, CHUNK // WGMMA_K)
        off = within * WGMMA_K * ELEM_BYTES[cfg.dtype]
        a_d = fa4.smem_desc(kb.gep(q_smem, c * TILE_M * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16,
                            sbo=8 * SWIZZLE)
        b_d = fa4.smem_desc(kb.gep(k_base, c * cfg.bn * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16,
                            sbo=8 * SWIZZLE)
        acc = Value(fa4.mma(a_d, b_d, const(int(kk > 0), "i1"), [acc], result_types=[acc.type], m=64, n=cfg.bn,
                            k=WGMMA_K, a_source="smem", ab_dtype=cfg.dtype, acc_dtype="f32"))
    fa4.mma_commit_group()
    return acc


def _issue_pv(cs: _Consumer, v_smem, frags: list, stage: Value, o: Value) -> Value:
    kb, cfg = cs.kb, cs.cfg
    v_base = kb.gep(v_smem, stage * cfg.tile_bytes(), "i8")
    fa4.mma_fence()
    for kk in range(cfg.bn // WGMMA_K):
        b_d = fa4.smem_desc(kb.gep(v_base, kk * WGMMA_K * SWIZZLE, "i8"), swizzle=SWIZZLE, lbo=cfg.bn * SWIZZLE,
                            sbo=8 * SWIZZLE)
        o = Value(fa4.mma(frags[kk], b_d, const(1, "i1"), [o], result_types=[o.type], m=64, n=cfg.head_dim,
                          k=WGMMA_K, a_source="regs", b_major="mn", ab_dtype=cfg.dtype, acc_dtype="f32"))
    fa4.mma_commit_group()
    return o


def _softmax(cs: _Consumer, s_acc: Value, j: Value, m_prev, l_prev, masked: bool):
    """Online softmax of S_j (base 2, scale folded in). Masked: key j bn + col is hidden from a row
    when col >= end - j bn (signed: end may lie before the tile)."""
    kb, cfg = cs.kb, cs.cfg
    s = [s_acc[i] for i in range(cs.n_s)]
    if masked:
        vis = [cs.end[h] - j * cfg.bn - cs.t4 * 2 for h in (0, 1)]
        for i in range(cs.n_s):
            s[i] = select(vis[acc_row(i)].sle(acc_col(i)), const(NEG_INF, "f32"), s[i])
    p = [None] * cs.n_s
    m_new, l_new, alpha = [], [], []
    for h in (0, 1):
        idx = row_regs(cs.n_s, h)
        mx = tree_reduce([s[i] for i in idx], fmax)
        mx = fmax(mx, kb.shuffle_xor(mx, 1))
        mx = fmax(mx, kb.shuffle_xor(mx, 2))
        m, a, neg = max_update(m_prev[h], mx, cs.scale_log2, 0.0)
        row_p = [dsl.exp2(fma(s[i], cs.scale_log2, neg)) for i in idx]
        for i, v in zip(idx, row_p):
            p[i] = v
        m_new.append(m)
        alpha.append(a)
        l_new.append(fma(l_prev[h], a, tree_reduce(row_p, lambda x, y: x + y)))
    frags = []
    for kk in range(cfg.bn // WGMMA_K):
        words = [vec(p[a], p[b]).to((cfg.dtype, 2)).bitcast("i32") for a, b in a_frag_pairs(kk)]
        frags.append(vec(*words))
    return frags, m_new, l_new, alpha


def _zero_v_tail(cs: _Consumer, v_smem, stage: Value, valid: Value):
    """Zero rows [valid, bn) of V stage `stage` (note "NaN past L_b"); every thread of the
    warpgroup takes its share of 16-byte units, then the rows are fenced to the async proxy."""
    kb, cfg = cs.kb, cs.cfg
    base = kb.gep(v_smem, stage * cfg.tile_bytes(), "i8")
    zero = const(0, ("i32", 4))
    total = cfg.bn * cfg.d_chunks * UNITS
    for i in range(total // 128):
        u = cs.t + 128 * i
        c = u // (cfg.bn * UNITS)
        rest = u - c * (cfg.bn * UNITS)
        r = rest // UNITS
        ok = r.sge(valid)
        with kb.if_(ok).then_():
            kb.store(zero, kb.gep(base, u * 16, "i8"), align=16)
    kb.fence("async_smem")
    cs.barrier()


def _kv_tile(cs: _Consumer, bufs, j: Value, carry, masked: bool):
    q_smem, k_smem, v_smem, k_pipe, v_pipe = bufs
    kb, cfg, work = cs.kb, cs.cfg, cs.work
    s, o, m, l = carry
    # 1. S_j = Q K_j^T
    k_pipe.consumer_wait(s)
    s_acc = wait_group(_issue_s(cs, q_smem, k_smem, s.stage), pending=0)
    cs.release(k_pipe, s)
    # 2. softmax
    frags, m, l, alpha = _softmax(cs, s_acc, j, m, l, masked)
    # 3. O *= alpha
    o = vec(*[o[i] * alpha[acc_row(i)] for i in range(cs.n_o)])
    # 4. O += P V_j (V rows past L_b zeroed first, in the tile that holds L_b)
    v_pipe.consumer_wait(s)
    if masked:
        valid = work.length - j * cfg.bn
        with kb.if_(valid.slt(cfg.bn)).then_():
            _zero_v_tail(cs, v_smem, s.stage, valid)
    o = wait_group(_issue_pv(cs, v_smem, frags, s.stage, o), pending=0)
    cs.release(v_pipe, s)
    return s.advance(), o, tuple(m), tuple(l)


def _mma_role(kb, cfg, work: _Work, p, q_smem, k_smem, v_smem, k_pipe, v_pipe):
    cs = _Consumer(kb, cfg, work, p)
    _load_q(cs, q_smem)
    f32 = "f32"
    bufs = (q_smem, k_smem, v_smem, k_pipe, v_pipe)
    # tiles every row sees entirely need no mask: keys < min over the rows of `end` (token 0's)
    hidden0 = (p["seqlen_q"] - 1) * p["causal"]
    full = (work.length - hidden0).smax(0) // cfg.bn
    split = full.smax(work.begin).smin(work.end)
    neg_inf, zero = const(NEG_INF, f32), const(0.0, f32)
    state = (k_pipe.initial_state(), const(0.0, (f32, cs.n_o)), (neg_inf, neg_inf), (zero, zero))
    for lo, hi, masked in ((work.begin, split, False), (split, work.end, True)):
        loop = kb.for_(lo, hi, 1, carry=state)
        with loop as (j, carried):
            loop.yield_(*_kv_tile(cs, bufs, j, carried, masked))
        state = loop.results
    _epilogue(cs, state[1], state[2], state[3])


def _epilogue(cs: _Consumer, o: Value, m, l):
    """Partial O (O / l, float32) and LSE (natural log; -inf when the split saw no key) of this
    thread's two rows into the workspaces [num_splits, batch, seqlen_q, heads, D] and
    [num_splits, batch, heads, seqlen_q]."""
    kb, cfg, p, work = cs.kb, cs.cfg, cs.p, cs.work
    for h in (0, 1):
        total = l[h] + kb.shuffle_xor(l[h], 1)
        total = total + kb.shuffle_xor(total, 2)
        empty = total.eq(0.0)
        # 1 / l as exp2(-log2 l) (MUFU): rcp.rn is a ptxas subroutine call, which serialises every wgmma
        log_total = log2(total)
        inv = select(empty, const(0.0, "f32"), dsl.exp2(const(0.0, "f32") - log_total))
        lse = select(empty, const(NEG_INF, "f32"), (m[h] * cs.scale_log2 + log_total) * LN2)
        with kb.if_(cs.row_ok[h]).then_():
            sb = work.split * p["batch"] + work.batch
            row = (sb.to("i64") * p["seqlen_q"].to("i64") + cs.token[h].to("i64")) * p["heads"].to("i64") \
                + cs.head[h].to("i64")
            base = row * cfg.head_dim + (cs.t4 * 2).to("i64")
            for jd in range(cfg.head_dim // 8):
                i = acc_pair(jd, h)
                kb.store(vec(o[i] * inv, o[i + 1] * inv), kb.gep(p["o_partial"], base + jd * 8, "f32"), align=8)
            with kb.if_(cs.t4.eq(0)).then_():
                lrow = (sb.to("i64") * p["heads"].to("i64") + cs.head[h].to("i64")) * p["seqlen_q"].to("i64") \
                    + cs.token[h].to("i64")
                kb.store(lse, kb.gep(p["lse_partial"], lrow, "f32"), align=4)
