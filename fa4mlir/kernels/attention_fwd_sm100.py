"""FlashAttention-4 forward on sm_100a: two Q tiles per CTA, S/P/O in tensor memory, one MMA thread.

One CTA computes O for BM = 256 query rows of one (batch, head) as two Q tiles of 128 rows
(tile i = rows m0 + 128 i ...), which share every K/V block. The FA4Config module note gives the
TMEM and SMEM plans. Roles (FA4Config.ROLES; 512 threads):

    load        (warp 13) one elected thread: Q0 and Q1 once (`q`), then K_n and V_n into their
                rings (`k`, `v`) for every visited KV block n.
    mma         (warp 12) one elected thread issues every tcgen05.mma, in the order
                    S0 <- Q0 Kn^T;  O1 <- O1 + P1 V(n-1);  S1 <- Q1 Kn^T;  O0 <- O0 + P0 Vn
                so that two MMAs separate computing S_i from consuming P_i. It commits S_i to
                `s_i.full` (softmax i may read it), O_i to `o_i.full` (correction may touch it),
                and frees K/V stages and P_i with commits on their `empty` barriers.
    softmax0/1  (warps 0-3 / 4-7; thread = row of its tile) per block: wait `s_i`, tcgen05.ld the
                BN scores of its row, mask, row max, lazy max update (common.softmax.max_update),
                write the O rescale factor to C_i (`c_i`), exp2 (1 in exp2_poly_stride on the FMA
                pipes: common.softmax.exp2_poly), row sum, P_i -> TMEM (`p_i`). After the last
                block: the row sum and the scaled row max to C_i.
    correction  (warps 8-11) per block n >= 1 and tile: read the factor from C_i, wait until
                O_i += P_i V(n-1) completed, rescale O_i in TMEM when some row of the warp moved
                its max (vote.any; skipped otherwise), release `o_i` (the MMA may issue the next
                P_i V). At the end: O_i / l -> Q_i's SMEM tile (128B swizzle) -> TMA store, LSE
                (attention_fwd_sm100_correction.py).

Every wait on a barrier that a tcgen05 op completes, that guards TMEM another warp wrote, or that
hands back TMEM another warp read (C_i, before the softmax's next store) is followed by
tcgen05.fence::after_thread_sync; every TMEM write handed to another warp is waited
(tcgen05.wait::st) and followed by tcgen05.fence::before_thread_sync before the arrive
(PTX ISA 9.1 §9.7.16.6.4 "tcgen05.fence").

The KV-cache operand (attention_sm100_config, notes "Paged" and "Decode"): with `page_size` the load
warp fetches each K/V tile as per-page TMA boxes (common.paged_rows) and every role reads the
sequence's length from cache_seqlens in place of seqlen_k; the MMA thread zeroes the V rows at or past
the length before O += P V (note "Stale V rows"). The decode route has one Q tile of packed GQA rows:
roles softmax1 and the tile-1 pipes are absent, and the MMA thread issues S0 <- Q0 Kn; O0 <- O0 + P0 Vn.
Its free warps 4-7 take one of two roles: `load` for pages too small for 16-row boxes (a row gather
by 16-byte loads and shared stores, paged_rows note "Row gather"; warp 13 is then idle), or `convert`
for an e4m3 cache (attention_sm100_kv, note "FP8": the load warp brings e4m3 tiles, the convert
warpgroup writes them dequantised into the K/V stages). Both write the V rows past the length as zeros,
so the MMA thread zeroes none.

Serving features (attention_sm100_config, note "Serving"): a window or chunk visits blocks first ..
first + n_blocks - 1 (_Geometry.block) and masks with common.masks.key_window; softcap takes the tanh
right after S leaves TMEM; sinks join in the correction's epilogue (_Correction.normalizer); varlen
offsets every TMA row by cu_seqlens and stores O row by row (_Correction.store_o_rows). A CTA that
visits no block (a window or chunk beyond its rows, a sequence without keys) writes zeros without
reading O from TMEM, as the paged kernel does. The same code serves the KV-cache routes
(attention_sm100_kvserving, note "KV-cache serving": a decode row's mask position is its token; each
packed row its own head's sink), and a window's load loop runs over the block indices (note "Load warp
and windows" there).

MLA prefill (attention_sm100_config, note "MLA"): head_dim 192 / head_dim_v 128 is the same code with
three 64-column chunks per Q/K tile (12 S MMAs), two per V tile, and one K/V stage; the MMA thread
keeps its SMEM descriptors in the loop there (_Issuer._opaque_zero, note "MLA registers").

Absorbed MLA decode (attention_sm100_config, note "MLA decode"; attention_sm100_mla_decode): the decode
route with a 64-row tile (tcgen05.mma M = 64, Layout F), O's halves in the two lane halves of TMEM, S
computed in both; thread l of a warp owns packed row 16 w + l % 16 and O half l // 16. V is read from the
K stage (no V ring), and the MMA thread (attention_sm100_mla_decode.mma_role) frees a K stage after P V.

Note "Stale V rows": a paged box that starts before the length L_b and ends past it brings real pool
rows past L_b (unused rows of the last page, stale tokens), which may hold anything, NaN included.
K's are harmless (their scores are masked to -inf by select), but O += P V multiplies V's by P = 0,
and 0 x NaN is NaN. So in the tile holding L_b, once V_n is full, the MMA thread writes zeros over
V rows [L_b - n BN, BN) of the stage and fences them to the async proxy (fence.proxy.async): its own
next tcgen05.mma, which reads the stage through the async proxy, then sees them (PTX ISA 9.1
§9.7.16.6.5; same thread, no thread sync, so no tcgen05.fence). Boxes that start at or past L_b were
zero-filled by TMA. A sequence of length 0 visits no block: the epilogue writes zeros without
reading O from TMEM, which no MMA wrote.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import (KernelBuilder, PipeState, Pipeline, Value, const, fma, select, tanh, tree_reduce,
                   vec)
from . import attention_sm100_config as fcfg
from . import attention_sm100_kv as kvroles
from . import attention_sm100_mla_decode as mla_dec
from .attention_fwd_sm100_correction import _Correction, _correction_role
from .attention_sm100_config import LAUNCH_PARAMS, FA4Config  # noqa: F401  (FA4Config re-exported)
from .common import paged_rows, tcgen05
from .common.constants import NEG_INF
from .common.masks import ValueOps, block_range, hidden, key_window, tile_blocks, visible_keys
from .common.softmax import exp2_mixed, max_update

SW = fcfg.SWIZZLE_BYTES
CHUNK = fcfg.CHUNK
MMA_M = fcfg.MMA_M
MMA_K = fcfg.MMA_K
S_LOAD_COLS = 32               # TMEM columns per tcgen05.ld of S in the softmax (all issued, then one wait)
ROLE = {name: (first, n, regs) for name, first, n, regs in fcfg.ROLES}


def build(cfg: FA4Config = FA4Config()) -> dsl.KernelIR:
    cfg.validate()
    tm, sm = cfg.tmem_plan(), cfg.smem_plan()
    stages = sm["stages"]
    name = (f"attention_fwd_sm100_{cfg.dtype}_qk{cfg.head_dim}_ov{cfg.head_dim_v}_g{cfg.group}"
            f"{cfg.mask.tag()}_bn{cfg.bn}_s{stages}{cfg.name_route()}{cfg.name_suffix()}")
    kb = KernelBuilder(name, arch="sm_100a", block=(fcfg.NUM_THREADS, 1, 1), config=cfg.key())
    # the launch contract (cfg.launch_params): q and o boxes of one Q tile, k and v boxes of box_rows
    q_box = (CHUNK, cfg.tile_heads, cfg.tile_tokens, 1) if cfg.decode else (CHUNK, 1, MMA_M, 1)
    box = {"q": q_box, "k": (CHUNK, 1, cfg.box_rows, 1), "v": (CHUNK, 1, cfg.box_rows, 1), "o": q_box}
    if cfg.mla_decode:   # V is read from the K tile (attention_sm100_mla_decode): no v parameter
        del box["v"]
    if cfg.varlen or cfg.split_kv:   # O is stored row by row through a pointer (note "Serving"; o_partial)
        del box["o"]
    if cfg.gather:   # K and V rows copied from the pools' pointers (paged_rows, note "Row gather")
        del box["k"], box["v"]
    tma = {n: dict(dtype=cfg.dtype, box=b, swizzle="128B") for n, b in box.items()}
    if cfg.fp8:      # e4m3 K/V, unswizzled (attention_sm100_kv)
        tma.update(k=kvroles.tma_spec(cfg), v=kvroles.tma_spec(cfg))
    p = kb.params_from(cfg.launch_params, tma=tma)
    seqlen_q, scale_log2 = p.get("seqlen_q"), p["scale_log2"]   # varlen: per sequence, in _Geometry
    seqlen_k = p.get("seqlen_k")     # paged: each role reads cache_seqlens[b]; varlen: cu_seqlens_k (_Geometry)

    with kb.body():
        bufs = _declare_buffers(kb, sm, p, cfg.num_q_tiles, cfg.gather, cfg.mla_decode)
        warp = kb.thread_idx(0) // 32
        # 1. warp 0 allocates the TMEM columns; every warp reads the address after the barrier
        with kb.if_(warp.eq(0)).then_():
            fa4.tmem_alloc(bufs.tmem_slot, cols=tm["alloc"])
            fa4.tmem_relinquish()
        kb.pipeline_init()
        kb.fence("tcgen05_before")
        kb.sync_threads()
        kb.fence("tcgen05_after")
        tmem = kb.load(bufs.tmem_slot, "i32")

        # each role computes the geometry after its setmaxnreg (a value live across it is spilled)
        def geo():
            return _Geometry(kb, cfg, seqlen_q, seqlen_k, p)

        with kb.warp_roles():
            with kb.role("load", **(kvroles.GATHER_ROLE if cfg.gather else _role("load", cfg))):
                _load_role(kb, cfg, geo(), bufs)
            with kb.role("mma", **_role("mma", cfg)):
                _mma_role(kb, cfg, geo(), bufs)
            if cfg.fp8:      # the decode route's free warps 4-7 (attention_sm100_kv)
                name, first, n, regs = kvroles.CONVERT_ROLE
                with kb.role(name, first_warp=first, num_warps=n, regs=regs):
                    kvroles.convert_role(kb, cfg, geo(), bufs, p)
            for i in range(cfg.num_q_tiles):
                with kb.role(f"softmax{i}", **_role(f"softmax{i}")):
                    _softmax_role(_Softmax(kb, cfg, geo(), bufs.pipes.tiles[i], tmem, i, scale_log2,
                                           p.get("softcap_scale")))
            with kb.role("correction", **_role("correction")):
                _correction_role(_Correction(kb, cfg, geo(), bufs, tmem))
        # 2. every role finished (their TMEM accesses waited): warp 0 frees the columns
        kb.fence("tcgen05_before")
        kb.sync_threads()
        with kb.if_(warp.eq(0)).then_():
            kb.fence("tcgen05_after")
            fa4.tmem_dealloc(tmem, cols=tm["alloc"])
    return kb.finish()


def _role(name: str, cfg: FA4Config | None = None) -> dict:
    first, n, regs = ROLE[name]
    if cfg is not None and cfg.mla_decode:   # attention_sm100_config.MLA_DECODE_ROLE_REGS
        regs = fcfg.MLA_DECODE_ROLE_REGS.get(name, regs)
    return dict(first_warp=first, num_warps=n, regs=regs)


class _TilePipes(NamedTuple):
    """The 1-stage pipes of Q tile i (arrivals: one thread for tcgen05.commit, 128 for a warpgroup)."""
    s: Pipeline            # s_i: MMA -> softmax i, S_i is in TMEM (empty: softmax i read it)
    p: Pipeline            # p_i: softmax i -> MMA, P_i is in TMEM (empty: O_i += P_i V completed)
    o: Pipeline            # o_i: MMA -> correction, O_i += P_i V completed (empty: O_i rescaled)
    c: Pipeline            # c_i: softmax i -> correction, C_i holds alpha (at the end: l and m)


@dataclass(frozen=True)
class _Pipes:
    """Every pipeline of the kernel: the load -> MMA rings, then the per-tile pipes."""
    q: Pipeline            # Q0 and Q1 (decode: Q0), loaded once (1 stage)
    k: Pipeline            # the K ring (`stages`)
    v: Pipeline | None     # the V ring (`stages`; MLA decode: none, V is read from the K ring)
    tiles: tuple           # _TilePipes of tile 0 and tile 1 (decode: tile 0)
    k8: Pipeline | None = None   # FP8: the e4m3 K ring, load -> convert (k and v: convert -> mma)
    v8: Pipeline | None = None


@dataclass(frozen=True)
class _Buffers:
    """The SMEM tiles (byte sizes from FA4Config.smem_plan), the pipelines, the TMA descriptors and
    the LSE output."""
    q_smem: Value          # Q0 then Q1, q_tile bytes each; the epilogue stages O_i in Q_i's tile
    k_smem: Value          # `stages` K tiles of k_tile bytes
    v_smem: Value          # `stages` V tiles of v_tile bytes
    tmem_slot: Value       # where tcgen05.alloc writes the TMEM address
    q_tile: int
    k_tile: int
    v_tile: int
    pipes: _Pipes
    q_desc: Value
    k_desc: Value
    v_desc: Value
    o_desc: Value
    lse_ptr: Value
    page_table: Value | None = None      # paged (note "Paged"): [batch, max_pages] int32
    num_pages: Value | None = None
    page_table_stride: Value | None = None
    sinks: Value | None = None           # sinks: float32 [heads] sink logits (note "Serving")
    total_q: Value | None = None         # varlen: rows of the packed Q (LSE is [heads, total_q])
    k8_smem: Value | None = None         # FP8: `stages` e4m3 K / V tiles (attention_sm100_kv)
    v8_smem: Value | None = None
    k8_tile: int = 0
    v8_tile: int = 0
    rows_smem: Value | None = None       # row gather: the tile's pool rows, int32 [BN] (note "Row gather")


def _declare_buffers(kb, sm: dict, params: dict, num_q_tiles: int = fcfg.NUM_Q_TILES, gather: bool = False,
                     v_in_k: bool = False) -> _Buffers:
    q_smem, k_smem = (kb.smem(f"{n}_smem", sm[n]) for n in ("q", "k"))
    v_smem = k_smem if v_in_k else kb.smem("v_smem", sm["v"])
    tmem_slot = kb.smem("tmem_slot", fcfg.TMEM_SLOT_BYTES, align=16)
    stages = sm["stages"]
    q = kb.pipeline("q", num_stages=1, producer="load", consumers=["mma"])
    # FP8: k and v carry the converted tiles from the convert warpgroup (128 arrivals)
    kv = dict(producer="convert", producer_arrivals=128) if "k8" in sm else dict(producer="load")
    if gather:       # every thread of the gather warps commits (paged_rows, note "Row gather")
        kv["producer_arrivals"] = 32 * kvroles.GATHER_ROLE["num_warps"]
    k, v = (kb.pipeline(n, num_stages=stages, consumers=["mma"], **kv) if n == "k" or not v_in_k else None
            for n in ("k", "v"))
    tiles = []
    for i in range(num_q_tiles):
        sm_i = f"softmax{i}"
        tiles.append(_TilePipes(
            s=kb.pipeline(f"s{i}", num_stages=1, producer="mma", consumers=[sm_i], consumer_arrivals=128),
            p=kb.pipeline(f"p{i}", num_stages=1, producer=sm_i, consumers=["mma"], producer_arrivals=128),
            o=kb.pipeline(f"o{i}", num_stages=1, producer="mma", consumers=["correction"], consumer_arrivals=128),
            c=kb.pipeline(f"c{i}", num_stages=1, producer=sm_i, consumers=["correction"], producer_arrivals=128,
                          consumer_arrivals=128)))
    paged = {n: params[n] for n in ("page_table", "num_pages", "page_table_stride", "sinks", "total_q")
             if n in params}
    rings8 = {}
    if gather:       # the row gather's pool rows (paged_rows, note "Row gather")
        paged["rows_smem"] = kb.smem("rows_smem", sm["gather_rows"], align=16)
    if "k8" in sm:   # FP8 (attention_sm100_kv): the e4m3 rings, load -> convert
        paged.update(k8_smem=kb.smem("k8_smem", sm["k8"]), v8_smem=kb.smem("v8_smem", sm["v8"]),
                     k8_tile=sm["k8_tile"], v8_tile=sm["v8_tile"])
        rings8 = {n: kb.pipeline(n, num_stages=stages, producer="load", consumers=["convert"], consumer_arrivals=128)
                  for n in ("k8", "v8")}
    return _Buffers(q_smem, k_smem, v_smem, tmem_slot, sm["q_tile"], sm["k_tile"], sm["v_tile"],
                    _Pipes(q, k, v, tuple(tiles), **rings8), *(params[n] if n in params else params.get(f"{n}_partial") for n in ("q", "k", "v", "o", "lse")),
                    **paged)


class _Geometry:
    """The CTA's rows, head and the KV blocks it visits (every thread computes it). Decode (note
    "Decode"): m0 and tile_row0 count query tokens, `head` is the group's first query head."""

    def __init__(self, kb, cfg, seqlen_q, seqlen_k, p):
        self.cfg = cfg
        if cfg.paged:    # this sequence's length L_b (a negative entry is 0)
            seqlen_k = kb.load(kb.gep(p["cache_seqlens"], kb.block_idx(2), "i32"), "i32", align=4).smax(0)
        self.q_start = self.k_start = None
        if cfg.varlen:   # sequence b: rows cu_seqlens[b] .. cu_seqlens[b + 1] of the packed tensors
            b = kb.block_idx(2)
            self.q_start, seqlen_q = _span(kb, p["cu_seqlens_q"], b)
            self.k_start, seqlen_k = _span(kb, p["cu_seqlens_k"], b)
            if cfg.seqused_k:   # only the first seqused_k[b] keys (a negative entry is 0)
                seqlen_k = kb.load(kb.gep(p["seqused_k"], b, "i32"), "i32", align=4).smax(0)
        self.seqlen_q, self.seqlen_k = seqlen_q, seqlen_k
        m_block = kb.block_idx(0)
        if cfg.causal:  # the longest rows first: the grid's tail is short work
            m_block = kb.grid_dim(0) - 1 - m_block
        if cfg.mla_decode:   # tile_heads query heads per CTA (one latent KV head, note "MLA decode")
            self.rows = cfg.tile_tokens
            self.m0 = m_block * cfg.tile_tokens
            self.head = kb.block_idx(1) * cfg.tile_heads
            self.kv_head = self.head // cfg.group
            self.heads = kb.grid_dim(1) * cfg.tile_heads
            self.batch = kb.block_idx(2)
        elif cfg.decode:
            self.rows = cfg.tile_tokens
            self.m0 = m_block * cfg.tile_tokens
            self.kv_head = kb.block_idx(1)
            self.head = self.kv_head * cfg.group
            self.heads = kb.grid_dim(1) * cfg.group
            self.batch = kb.block_idx(2)
        else:
            self.rows = MMA_M
            self.m0 = m_block * cfg.bm
            self.head = kb.block_idx(1)
            self.heads = kb.grid_dim(1)
            self.batch = kb.block_idx(2)
            self.kv_head = self.head // cfg.group if cfg.group > 1 else self.head
        self.first = self.offset = None
        if cfg.split_kv:     # CTA x = M tile x num_splits + split (note "MLA decode"), uncounted from the top
            splits = p["num_splits"]
            m_block = kb.block_idx(0) // splits
            split = kb.block_idx(0) - m_block * splits
            self.m0, self.split = m_block * cfg.tile_tokens, split
        if cfg.mask.is_legacy:
            self.n_blocks, _ = block_range(self.m0, cfg.num_q_tiles * self.rows, seqlen_q, seqlen_k, cfg.bn,
                                           cfg.causal)
        else:            # a window or chunk: blocks first .. first + n_blocks - 1 (common.masks.tile_blocks)
            tb = tile_blocks(cfg.mask, self.m0, cfg.num_q_tiles * self.rows, seqlen_q, seqlen_k, cfg.bn, ValueOps)
            self.first, self.n_blocks = tb.first, tb.end - tb.first
        if cfg.split_kv:     # blocks [split x per, ..) of the n_blocks, per = ceil(n_blocks / num_splits)
            per = (self.n_blocks + splits - 1) // splits
            self.offset = self.split * per
            self.n_blocks = (self.n_blocks - self.offset).smin(per).smax(0)
        if cfg.varlen:   # a CTA past its sequence's rows visits nothing (and stores nothing)
            self.n_blocks = select(self.m0.slt(seqlen_q), self.n_blocks, const(0))

    def tile_row0(self, i: int) -> Value:
        return self.m0 + i * MMA_M

    def block(self, n: Value) -> Value:
        """The KV block index of the n-th visited block."""
        if self.offset is not None:    # split-KV: this split's first block
            return self.offset + n
        return n if self.first is None else self.first + n

    def q_coord(self, row: Value) -> Value:
        """The TMA row coordinate of query row `row` (varlen: in the packed tensor)."""
        return row if self.q_start is None else self.q_start + row

    def k_coord(self, row: Value) -> Value:
        return row if self.k_start is None else self.k_start + row

    def tma_batch(self) -> Value:
        return const(0) if self.cfg.varlen else self.batch

    def segments(self, i: int) -> list:
        """Tile i's visited blocks after the peeled block 0 as (lo, hi, masked) runs of visit indices.
        No mask or causal: 1 .. n_unmasked - 1 unmasked, then the rest (the diagonal, the seqlen_k
        tail). A window or chunk: the blocks before the whole ones, the whole ones, then the rest."""
        cfg, n = self.cfg, self.n_blocks
        if self.offset is not None:    # split-KV: the diagonal or the tail may be in any split's blocks
            return [(const(1), n, True)]
        if self.first is None:
            split = block_range(self.tile_row0(i), self.rows, self.seqlen_q, self.seqlen_k, cfg.bn, cfg.causal)[1]
            split = select(split.gt(1), split, const(1))
            return [(const(1), split, False), (split, n, True)]
        tb = tile_blocks(cfg.mask, self.tile_row0(i), self.rows, self.seqlen_q, self.seqlen_k, cfg.bn, ValueOps)
        whole_lo = (tb.full_first - self.first).smax(1).smin(n)
        whole_hi = (tb.full_end - self.first).smax(whole_lo).smin(n)
        return [(const(1), whole_lo, True), (whole_lo, whole_hi, False), (whole_hi, n, True)]


def _span(kb, cu_seqlens: Value, b: Value) -> tuple:
    """(start, length) of sequence b from cu_seqlens (int32 [batch + 1])."""
    start = kb.load(kb.gep(cu_seqlens, b, "i32"), "i32", align=4)
    end = kb.load(kb.gep(cu_seqlens, b + 1, "i32"), "i32", align=4)
    return start, end - start


# ---- load ---------------------------------------------------------------------------------------------
def _load_role(kb, cfg, geo: _Geometry, bufs: _Buffers):
    if cfg.gather:   # the decode route's row gather (attention_sm100_kv, note "Row gather")
        return kvroles.gather_role(kb, cfg, geo, bufs)
    qk_ch, ov_ch = cfg.padded_head_dim // CHUNK, cfg.padded_head_dim_v // CHUNK
    pipes = bufs.pipes
    # a CTA without KV blocks loads nothing: its epilogue writes zeros into Q's tiles right away
    with kb.if_(kb.elect_one() & geo.n_blocks.gt(0)).then_():
        for d in (bufs.q_desc, bufs.k_desc, bufs.v_desc)[:2 if cfg.mla_decode else 3]:
            fa4.tma_prefetch(d)
        # 1. Q0 and Q1: 128 rows each, one box per 64-column chunk
        q0 = pipes.q.initial_state()
        pipes.q.producer_acquire(q0)
        pipes.q.producer_commit(q0, tx_bytes=cfg.num_q_tiles * bufs.q_tile)
        q_box = [CHUNK, cfg.tile_heads, cfg.tile_tokens, 1] if cfg.decode else [CHUNK, 1, MMA_M, 1]
        for i in range(cfg.num_q_tiles):
            for c in range(qk_ch):
                dst = kb.gep(bufs.q_smem, i * bufs.q_tile + c * cfg.mma_m * SW, "i8")
                fa4.tma_load(bufs.q_desc, dst, q0.stage,
                             [const(c * CHUNK), geo.head, geo.q_coord(geo.tile_row0(i)), geo.tma_batch()],
                             pipe=pipes.q.name, box=q_box, elem_bytes=fcfg.ELEM_BYTES)
        # 2. K_n then V_n of every visited block, each into its ring (K and V stages move together)
        # a window or chunk: the loop runs over the block indices themselves (note "Load warp and
        # windows"); else over visits 0 .. n_blocks - 1 (block(n) = n, or split-KV's offset + n)
        windowed = geo.first is not None
        loop = kb.for_(geo.first if windowed else 0, geo.first + geo.n_blocks if windowed else geo.n_blocks, 1,
                       carry=pipes.k.initial_state())
        with loop as (n, s):
            row = (n if windowed else geo.block(n)) * cfg.bn
            if cfg.paged:    # the tile's pages, looked up once for K_n and V_n
                origins = paged_rows.tile_box_origins(kb, row, cfg.bn, cfg.box_rows, geo.seqlen_k, geo.batch,
                                                      bufs.page_table, bufs.page_table_stride, bufs.num_pages,
                                                      cfg.page_size)
            rings = ((pipes.k, bufs.k_desc, bufs.k_smem, bufs.k_tile, qk_ch),
                     (pipes.v, bufs.v_desc, bufs.v_smem, bufs.v_tile, ov_ch))[:1 if cfg.mla_decode else 2]
            if cfg.fp8:      # the e4m3 rings (attention_sm100_kv)
                rings = ((pipes.k8, bufs.k_desc, bufs.k8_smem, bufs.k8_tile, 0),
                         (pipes.v8, bufs.v_desc, bufs.v8_smem, bufs.v8_tile, 0))
            for pipe, desc, base, tile, nch in rings:
                pipe.producer_acquire(s)
                pipe.producer_commit(s, tx_bytes=tile)
                if cfg.fp8:
                    kvroles.load_tile(kb, cfg, origins if cfg.paged else None, pipe, desc, base, s, tile, geo.kv_head,
                                  row, geo.batch)
                    continue
                if cfg.paged:
                    _load_paged_tile(kb, cfg, origins, pipe, desc, base, s, geo.kv_head, nch, tile)
                    continue
                for c in range(nch):
                    dst = kb.gep(base, s.stage * tile + c * cfg.bn * SW, "i8")
                    fa4.tma_load(desc, dst, s.stage, [const(c * CHUNK), geo.kv_head, geo.k_coord(row), geo.tma_batch()],
                                 pipe=pipe.name, box=[CHUNK, 1, cfg.bn, 1], elem_bytes=fcfg.ELEM_BYTES)
            loop.yield_(s.advance())


def _load_paged_tile(kb, cfg, origins: list, pipe, desc, base, s: PipeState, kv_head: Value, nch: int, tile: int):
    """K or V tile of keys [t0, t0 + BN) as BN / box_rows per-page boxes per 64-column chunk (note
    "Paged"): box i lands at row i box_rows of each chunk, from pool (page, row) = origins[i]."""
    for i, (page, row) in enumerate(origins):
        for c in range(nch):
            dst = kb.gep(base, s.stage * tile + c * cfg.bn * SW + i * cfg.box_rows * SW, "i8")
            fa4.tma_load(desc, dst, s.stage, [const(c * CHUNK), kv_head, row, page],
                         pipe=pipe.name, box=[CHUNK, 1, cfg.box_rows, 1], elem_bytes=fcfg.ELEM_BYTES)


# ---- mma ----------------------------------------------------------------------------------------------
class _Issuer:
    """The MMA thread's two GEMMs with their pipeline protocol; TMEM addresses are lane 0 + column.

    Each GEMM re-reads the TMEM base from its SMEM slot: the loads sit between mbarrier waits (asm
    with memory effects), so LLVM keeps the address arithmetic in the loop instead of hoisting 20+
    loop-invariant TMEM addresses that the 48-register MMA warp would spill."""

    def __init__(self, kb, cfg, bufs: _Buffers):
        self.kb, self.cfg, self.bufs = kb, cfg, bufs
        self.tm = cfg.tmem_plan()

    def _tmem(self, region: str) -> Value:
        return self.kb.load(self.bufs.tmem_slot, "i32") + self.tm[region]

    def _opaque_zero(self) -> Value:
        """0, as the lane field (bits 31..16) of the TMEM address tcgen05.alloc wrote (always lane 0),
        re-read from its SMEM slot: LLVM cannot prove it 0, so an SMEM address offset by it is not
        loop-invariant and is not hoisted (note "MLA registers")."""
        return self.kb.load(self.bufs.tmem_slot, "i32") >> 16

    def s(self, i: int, st: PipeState, k_stage: Value):
        """S_i = Q_i K^T once softmax i read S_i(n-1): head_dim / 16 MMAs 128 x BN x 16, both operands
        K-major SMEM (128B swizzle); committed to s_i.full."""
        kb, cfg, bufs = self.kb, self.cfg, self.bufs
        s_pipe = bufs.pipes.tiles[i].s
        s_pipe.producer_acquire(st)
        q_off, k_off = const(i * bufs.q_tile), k_stage * bufs.k_tile
        if cfg.mla:   # note "MLA registers": the descriptors stay in the loop, not hoisted
            q_off, k_off = self._opaque_zero() + q_off, self._opaque_zero() + k_off
        q_base = kb.gep(bufs.q_smem, q_off, "i8")
        k_base = kb.gep(bufs.k_smem, k_off, "i8")
        per_chunk = CHUNK // MMA_K
        s_tmem = self._tmem(f"S{i}")
        for kk in range(cfg.padded_head_dim // MMA_K):
            c, within = divmod(kk, per_chunk)
            off = within * MMA_K * fcfg.ELEM_BYTES
            a = fa4.smem_desc(kb.gep(q_base, c * MMA_M * SW + off, "i8"), swizzle=SW, lbo=16, sbo=8 * SW)
            b = fa4.smem_desc(kb.gep(k_base, c * cfg.bn * SW + off, "i8"), swizzle=SW, lbo=16, sbo=8 * SW)
            tcgen05.mma(a, b, const(int(kk > 0), "i1"), s_tmem, m=MMA_M, n=cfg.bn, k=MMA_K, ab_dtype=cfg.dtype)
        s_pipe.mma_commit(st, side="full")

    def pv(self, i: int, st: PipeState, v_stage: Value, accumulate: Value):
        """O_i (+)= P_i V once P_i is in TMEM and the correction rescaled O_i: BN / 16 MMAs 128 x Dv x 16;
        A = P_i from TMEM (8 columns per 16 keys), B = V MN-major (head-dim chunks LBO = BN rows
        apart, 8-key groups SBO apart). Committed to o_i.full and p_i.empty."""
        kb, cfg, bufs = self.kb, self.cfg, self.bufs
        pipes = bufs.pipes.tiles[i]
        pipes.p.consumer_wait(st)
        pipes.o.producer_acquire(st)
        kb.fence("tcgen05_after")
        v_off = v_stage * bufs.v_tile
        if cfg.mla:
            v_off = self._opaque_zero() + v_off
        v_base = kb.gep(bufs.v_smem, v_off, "i8")
        p_tmem, o_tmem = self._tmem(f"P{i}"), self._tmem(f"O{i}")
        for kk in range(cfg.bn // MMA_K):
            b = fa4.smem_desc(kb.gep(v_base, kk * MMA_K * SW, "i8"), swizzle=SW, lbo=cfg.bn * SW, sbo=8 * SW)
            acc = accumulate if kk == 0 else const(1, "i1")
            tcgen05.mma(p_tmem + kk * (MMA_K // 2), b, acc, o_tmem, m=MMA_M, n=cfg.padded_head_dim_v, k=MMA_K,
                        ab_dtype=cfg.dtype, a_source="tmem", b_major="mn")
        pipes.o.mma_commit(st, side="full")
        pipes.p.mma_commit(st, side="empty")


class _MmaCarry(NamedTuple):
    """What the MMA thread's KV loop carries into block n."""
    kv: PipeState          # K_n, and V_n (the K and V rings move together)
    vr: PipeState          # V_(n-1): released once O1 += P1 V(n-1) completed
    a: PipeState           # s0, s1, p0, o0 (1 stage each, in lock step)
    b: PipeState           # p1, o1: one block behind


def _wait_v(kb, cfg, geo: _Geometry, bufs: _Buffers, n: Value, st: PipeState):
    """Wait for V_n; paged or seqused_k, zero its rows at or past L_b first (note "Stale V rows"; the
    row gather and the FP8 conversion wrote them as zeros already)."""
    bufs.pipes.v.consumer_wait(st)
    if (cfg.paged or cfg.seqused_k) and not (cfg.fp8 or cfg.gather):
        valid = geo.seqlen_k - geo.block(n) * cfg.bn
        with kb.if_(valid.slt(cfg.bn)).then_():
            v_tile = kb.gep(bufs.v_smem, st.stage * bufs.v_tile, "i8")
            paged_rows.zero_rows(kb, v_tile, valid, cfg.bn, cfg.padded_head_dim_v // CHUNK, SW)


def _mma_role(kb, cfg, geo: _Geometry, bufs: _Buffers):
    if cfg.mla_decode:   # 64-row tile, O in Layout F's two lane halves (attention_sm100_mla_decode)
        mm = _Issuer(kb, cfg, bufs)
        return mla_dec.mma_role(kb, cfg, geo, bufs, mm._opaque_zero, mm._tmem)
    if cfg.decode:
        return _mma_role_one_tile(kb, cfg, geo, bufs)
    mm = _Issuer(kb, cfg, bufs)
    q_pipe, k_pipe, v_pipe = bufs.pipes.q, bufs.pipes.k, bufs.pipes.v
    with kb.if_(kb.elect_one() & geo.n_blocks.gt(0)).then_():
        q0 = q_pipe.initial_state()
        q_pipe.consumer_wait(q0)
        k0, v0, first = k_pipe.initial_state(), v_pipe.initial_state(), bufs.pipes.tiles[0].s.initial_state()
        # 1. block 0: S0, S1, then O0 = P0 V0 (O1 = P1 V0 is issued in the next step)
        k_pipe.consumer_wait(k0)
        kb.fence("tcgen05_after")
        mm.s(0, first, k0.stage)
        mm.s(1, first, k0.stage)
        k_pipe.mma_commit(k0, side="empty")
        _wait_v(kb, cfg, geo, bufs, const(0), v0)
        mm.pv(0, first, v0.stage, const(0, "i1"))
        # 2. blocks 1 .. N-1, two MMAs between computing S_i and consuming P_i
        loop = kb.for_(1, geo.n_blocks, 1, carry=_MmaCarry(k0.advance(), v0, first.advance(), first))
        with loop as (n, c):
            k_pipe.consumer_wait(c.kv)
            kb.fence("tcgen05_after")
            mm.s(0, c.a, c.kv.stage)                                    # S0 <- Q0 Kn
            mm.pv(1, c.b, c.vr.stage, n.gt(1))                          # O1 <- O1 + P1 V(n-1)
            v_pipe.mma_commit(c.vr, side="empty")
            mm.s(1, c.a, c.kv.stage)                                    # S1 <- Q1 Kn
            k_pipe.mma_commit(c.kv, side="empty")
            _wait_v(kb, cfg, geo, bufs, n, c.kv)
            mm.pv(0, c.a, c.kv.stage, const(1, "i1"))                   # O0 <- O0 + P0 Vn
            loop.yield_(_MmaCarry(*(s.advance() for s in c)))
        # 3. the last O1 <- O1 + P1 V(N-1)
        last = loop.results
        mm.pv(1, last.b, last.vr.stage, geo.n_blocks.gt(1))
        v_pipe.mma_commit(last.vr, side="empty")
        q_pipe.mma_commit(q0, side="empty")


class _OneTileCarry(NamedTuple):
    """What the decode route's MMA thread carries into block n."""
    kv: PipeState          # K_n and V_n
    a: PipeState           # s0, p0, o0 (1 stage each, in lock step)


def _mma_role_one_tile(kb, cfg, geo: _Geometry, bufs: _Buffers):
    """The decode route (note "Decode"): per block S0 <- Q0 Kn, then O0 <- O0 + P0 Vn once softmax 0
    wrote P0 (the decode CTA streams K/V; the S/P overlap of two tiles buys nothing there)."""
    mm = _Issuer(kb, cfg, bufs)
    q_pipe, k_pipe, v_pipe = bufs.pipes.q, bufs.pipes.k, bufs.pipes.v
    with kb.if_(kb.elect_one() & geo.n_blocks.gt(0)).then_():
        q0 = q_pipe.initial_state()
        q_pipe.consumer_wait(q0)
        init = _OneTileCarry(k_pipe.initial_state(), bufs.pipes.tiles[0].s.initial_state())
        loop = kb.for_(0, geo.n_blocks, 1, carry=init)
        with loop as (n, c):
            # 1. S0 <- Q0 Kn; release K_n
            k_pipe.consumer_wait(c.kv)
            kb.fence("tcgen05_after")
            mm.s(0, c.a, c.kv.stage)
            k_pipe.mma_commit(c.kv, side="empty")
            # 2. O0 <- O0 + P0 Vn (overwrites O0 at n = 0); release V_n
            _wait_v(kb, cfg, geo, bufs, n, c.kv)
            mm.pv(0, c.a, c.kv.stage, n.gt(0))
            v_pipe.mma_commit(c.kv, side="empty")
            loop.yield_(_OneTileCarry(c.kv.advance(), c.a.advance()))
        q_pipe.mma_commit(q0, side="empty")


# ---- softmax ------------------------------------------------------------------------------------------
class _SoftmaxCarry(NamedTuple):
    """What softmax i carries from block to block: its pipe states and its row's running max and sum."""
    s: PipeState
    p: PipeState
    c: PipeState
    m: Value
    l: Value


class _Softmax:
    """Softmax warpgroup i: thread t owns query row tile_row0(i) + t (TMEM lane t of S_i, P_i, C_i)."""

    def __init__(self, kb, cfg, geo: _Geometry, pipes: _TilePipes, tmem: Value, i: int, scale_log2: Value,
                 softcap_scale: Value | None = None):
        self.kb, self.cfg, self.geo, self.pipes, self.i, self.scale_log2 = kb, cfg, geo, pipes, i, scale_log2
        self.softcap_scale = softcap_scale
        tm = cfg.tmem_plan()
        lanes = tmem + tcgen05.lane_base(kb)
        self.s_addr, self.p_addr, self.c_addr = lanes + tm[f"S{i}"], lanes + tm[f"P{i}"], lanes + tm[f"C{i}"]
        t = kb.thread_idx(0) % MMA_M
        if cfg.mla_decode:   # lane 32 w + l: packed row 16 w + l % 16 (Layout F, attention_sm100_mla_decode)
            t = mla_dec.packed_row(kb)[0]
        # this thread's query row (decode: the token of packed row t, note "Decode")
        self.row = geo.tile_row0(i) + (t // cfg.tile_heads if cfg.decode else t)

    def read_s(self, n: Value, st: PipeState, masked: bool) -> list:
        """The row's BN scores of block n (S_i -> registers; S_i is free for the MMA's bookkeeping)."""
        kb, cfg, geo = self.kb, self.cfg, self.geo
        self.pipes.s.consumer_wait(st)
        kb.fence("tcgen05_after")
        parts = [tcgen05.tmem_load(self.s_addr + c, S_LOAD_COLS) for c in range(0, cfg.bn, S_LOAD_COLS)]
        fa4.tmem_wait(kind="ld")
        kb.fence("tcgen05_before")
        self.pipes.s.consumer_release(st)
        s = [part.bitcast(("f32", S_LOAD_COLS))[j] for part in parts for j in range(S_LOAD_COLS)]
        if cfg.softcap:  # t = tanh(s * scale / cap), in units of the cap (scale_log2 = cap log2 e): before the mask
            s = [tanh(x * self.softcap_scale) for x in s]
        if masked and geo.first is None:
            visible = visible_keys(geo.block(n) * cfg.bn, self.row, geo.seqlen_q, geo.seqlen_k, cfg.causal)
            for j in range(cfg.bn):
                s[j] = select(visible.le(j), const(NEG_INF, "f32"), s[j])
        elif masked:     # a window or chunk: keys [start, end) of the block are visible (common.masks.key_window)
            window = key_window(cfg.mask, geo.block(n) * cfg.bn, self.row, geo.seqlen_q, geo.seqlen_k)
            for j in range(cfg.bn):
                s[j] = select(hidden(window, j), const(NEG_INF, "f32"), s[j])
        return s

    def store_c(self, pipe_st: PipeState, *values: Value):
        """The f32 `values` -> C_i of this row (once the correction read C_i), handed to the correction
        warpgroup."""
        self.pipes.c.producer_acquire(pipe_st)
        self.kb.fence("tcgen05_after")       # the correction's tcgen05.ld of C_i is ordered before our st
        words = [v.bitcast("i32") for v in values]
        fa4.tmem_store(self.c_addr, words[0] if len(words) == 1 else vec(*words))
        fa4.tmem_wait(kind="st")
        self.kb.fence("tcgen05_before")
        self.pipes.c.producer_commit(pipe_st)

    def block(self, n: Value, st: _SoftmaxCarry, first: bool, masked: bool) -> _SoftmaxCarry:
        cfg, scale_log2 = self.cfg, self.scale_log2
        # 1. the row's BN scores
        s = self.read_s(n, st.s, masked)
        # 2. max update; the O rescale factor goes to the correction warpgroup at once
        block_max = tree_reduce(s, dsl.fmax)
        m, alpha, neg_m = max_update(st.m, block_max, scale_log2, 0.0 if first else cfg.rescale_threshold)
        if not first:
            self.store_c(st.c, alpha)
        # 3. P = exp2(s * scale_log2 - m * scale_log2), row sum, P -> TMEM (over S_i's upper half)
        p = exp2_mixed([fma(x, scale_log2, neg_m) for x in s], cfg.exp2_poly_stride)
        total = tree_reduce(p, lambda a, b: a + b)
        l_new = total if first else fma(st.l, alpha, total)
        words = [vec(p[2 * w], p[2 * w + 1]).to((cfg.dtype, 2)).bitcast("i32") for w in range(cfg.bn // 2)]
        self.pipes.p.producer_acquire(st.p)
        fa4.tmem_store(self.p_addr, vec(*words))
        fa4.tmem_wait(kind="st")
        self.kb.fence("tcgen05_before")
        self.pipes.p.producer_commit(st.p)
        return _SoftmaxCarry(st.s.advance(), st.p.advance(), st.c if first else st.c.advance(), m, l_new)


def _softmax_role(sm: _Softmax):
    kb, cfg, geo = sm.kb, sm.cfg, sm.geo
    s_pipe = sm.pipes.s
    states = tuple(s_pipe.initial_state() for _ in range(3))
    neg_inf, zero = const(NEG_INF, "f32"), const(0.0, "f32")
    init = _SoftmaxCarry(*states, m=neg_inf, l=zero)
    has_work = geo.n_blocks.gt(0)
    main = kb.if_(has_work, results=(init.m, init.l, init.c))
    with main.then_():
        # 1. block 0 (masked: it may hold the causal diagonal or the seqlen_k tail), then the
        #    unmasked blocks, then the masked ones up to N
        st = sm.block(const(0), init, first=True, masked=True)
        for lo, hi, masked in geo.segments(sm.i):
            loop = kb.for_(lo, hi, 1, carry=st)
            with loop as (n, c):
                loop.yield_(sm.block(n, c, first=False, masked=masked))
            st = loop.results
        main.yield_(st.m, st.l, st.c)
    with main.else_():
        main.yield_(init.m, init.l, init.c)
    m, l_, c_st = main.results
    # 2. the row's final sum and scaled max (0 for a row without keys; -inf with sinks, whose epilogue
    #    joins the sink to it) for the epilogue
    m_scaled = m * sm.scale_log2 if cfg.sinks else select(m.eq(NEG_INF), zero, m * sm.scale_log2)
    sm.store_c(c_st, l_, m_scaled)
