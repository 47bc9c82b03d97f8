"""FlashAttention forward on sm_90a: TMA rings, a producer warp, two or three wgmma warpgroups.

One CTA computes O for `bm` query rows (64 per consumer warpgroup: 128 or 192) of one (batch,
head); the tensors keep the FlashAttention layout [batch, seqlen, heads, head_dim] and TMA boxes
are cut per (batch, head), so sequence tails are zero-filled on load and clipped on store by the
hardware.

Roles (1 + bm / 64 warpgroups: 384 threads at bm 128, 512 at bm 192):
    warpgroup 0  `load`     one elected thread: K_0, Q once (`q_pipe`), then K_{j+1} before V_j
                            (the order the consumers use them) into rings of `stages` (`k_pipe`,
                            `v_pipe`); setmaxnreg `producer_regs`.
    warpgroups 1.. `mma`    each owns 64 query rows. Per KV block j (software pipelined, FA3's
                            intra-warpgroup overlap): issue S_j = Q K_j^T and O += P_{j-1} V_{j-1}
                            back to back, wait for S_j only, run the online softmax of S_j while
                            P_{j-1} V_{j-1} is still on the tensor cores, then wait, rescale O.
                            With `pingpong`, named barriers make the warpgroups take turns (a ring)
                            issuing GEMMs, so one's softmax overlaps the others' GEMMs.
Online softmax in base 2 with the scale folded in: p = exp2(s * scale_log2 - m * scale_log2).
FlashAttention-4's pieces (kernels/common/softmax.py) are config knobs: `exp2_poly_stride` (opt-in)
computes 1 in k of a row's p by a polynomial on the FMA pipes instead of the SFU's ex2;
`rescale_threshold` (lazy rescale; on where attention_sm90_config.KNOBS says) moves m only when the
row max grows by more than the threshold (log2 units), so P may exceed 1 (up to 2^threshold) and
O's rescale is skipped, behind a warp vote and a non-divergent branch (fa4.scale_if_uniform), when
no row of the warp moved. m stays the max that P and l are relative to, so the epilogue's
LSE = (m * scale_log2 + log2 l) * ln 2 is exact either way. `rescale_before_pv`
(FA4 CuTe's order at head dim 256) scales O by the previous block's alpha after S_j is issued and
before O += P V is, so the multiplies run under S_j instead of after P V's wait.
P stays in registers and feeds wgmma's A operand; V is read MN-major (imm-trans-b).
Head dims (attention_sm90_config.TileLayout): Q and K tiles are head_dim wide, V, O and the P V GEMM
dim_v wide (head_dim_v: qk 192 / v 128 for MLA prefill), each in chunks of 64 columns under the 128B
swizzle, or at D96 of 32 columns under the 64B swizzle (TMA boxes and wgmma descriptors alike).
Epilogue: O / l into the (now idle) Q tile in SMEM with the V tile's swizzle, then TMA stores; the LSE
(natural log, float32 [batch, heads, seqlen_q]) is written from registers.
With `persistent`, a 1-D grid of at most one CTA per SM (attention_sm90_config.grid) strides over
all query tiles (order: _Tiles); Q is a ring of two SMEM tiles (`q_pipe`, two stages) and O has
its own tile, so the producer loads the next tile's Q (and its first K) while this tile still runs
and the consumers find them there when they start it; the O tile's TMA store is waited on only
before the next tile's epilogue writes it. The default for short and middling key sequences
(attention_sm90_config.SHORT_TILES; always for D128 causal), where that overlap pays.
Empty warpgroups (bm 192, AttnConfig.skips_empty_warpgroups): a consumer warpgroup whose 64 rows
all lie past seqlen_q (the last query tile of a head) issues no GEMM and has no epilogue; it only
waits on and releases each stage and passes each GEMM turn on, as the working ones do.
Masks: KV blocks that are fully visible run an unmasked loop; the first block and the blocks on
the causal diagonal or the seqlen_k tail run the masked variant (a persistent kernel's first
block runs unmasked when every row sees all of it). Causal is aligned bottom-right
(query i sees key j iff j <= i + seqlen_k - seqlen_q); a row that sees no key gets O = 0 and
LSE = +inf, as FlashAttention returns.
Score modifiers (compile-time flags, each its own kernel; see notes/RESULTS.md [D-softcap] [D-sinks]):
`softcap` caps each score as FlashAttention does, s' = c * tanh(s * scale / c). The kernel takes
softcap_scale = scale / c and scale_log2 = c * log2(e) (one kernel serves every cap): it keeps
t = tanh(S * softcap_scale) (tanh.approx: one SFU op) in S's registers, in units of c, so the
softmax, its max and the LSE run unchanged on t, p = exp2(t * scale_log2 - m * scale_log2) =
exp(s' - c m), and the masks set t to -inf after the tanh. Opt-in variants (softcap_fold_q: Q scaled in
SMEM instead of S; softcap_fixed_max: a fixed max M per call, no row max; softcap_tanh): common/softcap_variants.py. `sinks` adds a learned logit per head
(gpt-oss) to each row's denominator in the epilogue: with a = m * scale_log2, b = sink * log2(e)
and M = max(a, b), l' = l * 2^(a - M) + 2^(b - M), O = O * 2^(a - M) / l' and LSE = (M + log2 l')
* ln 2, stable for any sink; a row that sees no key gets O = 0 and LSE = sink.
Ragged batches (`varlen`): packed [total, heads, D] tensors, each CTA's sequence from cu_seqlens in
device memory, a 1-D grid longest tile first (persistent over the compact grid's tiles with
varlen_compact); see attention_fwd_sm90_varlen. With `page_size`, k and v
are the paged KV cache's pools (K/V tiles in TMA boxes per page): attention_fwd_sm90_paged.
`score_mod` / `mask_mod` (Python functions compiled in, common/score_mod_ir.py ModHook [D-score-mod]):
each S register becomes post_scale * fn(s * mod_scale, batch, head, q_idx, kv_idx) before the masks,
with scale_log2 = post_scale * log2(e); mask_mod hides keys on every block (no tile classification).
With score_bias_init and a function that is score + an affine bias b, S starts at b / mod_scale
(_Consumer.s_init) and the softmax runs on S with scale_log2 * mod_scale [D-bias-init].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import (ELEM_BYTES, KernelBuilder, PipeState, Value, const, fast_div, fma, fmax, select, tanh,
                   tree_reduce, undef, vec)
from . import attention_fwd_sm90_paged as paged
from . import attention_fwd_sm90_varlen as varlen
from .attention_fwd_sm90_epilogue import _epilogue
from .attention_fwd_sm90_producer import _load_role
from .attention_sm90_config import AttnConfig, causal_pair_slot, dealt_tile, launch_params, section_tile
from .common.score_mod_ir import ModHook
from .common.masks import ValueOps, block_range, hidden, key_window, tile_blocks, visible_keys
from .common.softcap_variants import scale_bf16_rows, tanh_pairs
from .common.softmax import exp2_mixed, max_update
from .common.wgmma import a_frag_pairs, acc_col, acc_row, row_regs, wait_group

SWIZZLE = 128          # bytes per swizzled row: 64 bf16/f16 columns (the 128B layout's; each tile's
CHUNK = 64             # head-dim columns per swizzle chunk      own: cfg.qk_tile, cfg.v_tile)
WGMMA_K = 16
NEG_INF = float("-inf")
BAR_SCHED = 1          # named barriers 1, 2(, 3): GEMM-issue turn of consumer warpgroup 0, 1(, 2)
BAR_EPILOGUE = 4       # named barriers 4, 5(, 6): epilogue of consumer warpgroup 0, 1(, 2)
BAR_V_TAIL = 7         # page_size: every consumer thread, after zeroing V rows past the length
BAR_Q_FOLD = 8         # named barriers 8, 9(, 10): softcap_fold_q, warpgroup 0, 1(, 2) scaled its Q rows


def kernel_name(cfg: AttnConfig) -> str:
    """The kernel's (and its cubin's, and its bundle entry's) name: dtype, head dims, the mask's tag, the score
    modifiers' and varlen's (score_tag), the tiles, then the knobs' and page size's (name_suffix)."""
    return (f"attention_fwd_sm90_{cfg.dtype}_d{cfg.head_dim}{f'v{cfg.head_dim_v}' if cfg.head_dim_v else ''}"
            f"{cfg.mask.tag()}{cfg.score_tag()}"  # score_tag: _varlen
            f"_{cfg.bm}x{cfg.bn}_s{cfg.stages}{'' if cfg.pingpong else '_nopp'}{'_pers' if cfg.persistent else ''}"
            f"{cfg.name_suffix()}")


def build(cfg: AttnConfig = AttnConfig()) -> dsl.KernelIR:
    cfg.validate()
    qk, vt = cfg.qk_tile, cfg.v_tile
    q_bytes = cfg.bm * qk.chunks * qk.swizzle
    kv_bytes = cfg.bn * qk.chunks * qk.swizzle      # one K stage
    v_bytes = cfg.bn * vt.chunks * vt.swizzle       # one V stage
    name = kernel_name(cfg)
    kb = KernelBuilder(name, arch="sm_90a", block=(cfg.threads, 1, 1), config=cfg.key())
    # the launch contract (attention_sm90_config.launch_params), in its order. TMA boxes, innermost
    # first over [batch, seqlen, heads, head_dim]: (columns, 1 head, rows, 1 batch)
    box = {"q": (cfg.bm, qk), "k": (cfg.kv_box_rows, qk), "v": (cfg.kv_box_rows, vt), "o": (64, vt)}
    p = kb.params_from(launch_params(cfg), tma={n: dict(dtype=cfg.dtype, box=(lay.chunk, 1, rows, 1),
                                                        swizzle=lay.tma_swizzle) for n, (rows, lay) in box.items()})
    q_desc, k_desc, v_desc, o_desc, lse_ptr = (p[n] for n in ("q", "k", "v", "o", "lse"))

    def div(name):  # divisors as (multiplier, shift) (common.fastdiv): quotients of uniform values stay uniform
        return p[f"{name}_mul"], p[f"{name}_shr"]

    with kb.body():
        q_smem = kb.smem("q_smem", cfg.q_stages * q_bytes)
        k_smem = kb.smem("k_smem", cfg.stages * kv_bytes)
        v_smem = kb.smem("v_smem", cfg.stages * v_bytes)
        q_pipe = kb.pipeline("q_pipe", num_stages=cfg.q_stages, producer="load", consumers=["mma"],
                             consumer_arrivals=cfg.consumers)
        k_pipe = kb.pipeline("k_pipe", num_stages=cfg.stages, producer="load", consumers=["mma"],
                             consumer_arrivals=cfg.consumers)
        v_pipe = kb.pipeline("v_pipe", num_stages=cfg.stages, producer="load", consumers=["mma"],
                             consumer_arrivals=cfg.consumers)
        # persistent: O is staged in its own tile, so the next tile's Q can load during this epilogue
        o_smem = kb.smem("o_smem", cfg.bm * vt.chunks * vt.swizzle) if cfg.persistent else q_smem
        kb.pipeline_init()
        params = _Params(p["batch"], p["heads"], p["seqlen_q"], p["seqlen_k"], p["scale_log2"], div("group"),
                         div("tiles"), div("heads"), (p["section_shift"], div("rest")), p.get("softcap_scale"),
                         p.get("sinks"), p.get("softcap_max_log2"), varlen.params_of(p) if cfg.varlen else None,
                         ModHook(kb, cfg, p) if cfg.score_mod or cfg.mask_mod else None,
                         paged.params_of(p) if cfg.page_size else None,
                         varlen.compact_params_of(p) if cfg.varlen_compact else None)
        bufs = _Buffers(q_smem, k_smem, v_smem, o_smem, q_pipe, k_pipe, v_pipe, q_desc, k_desc, v_desc, o_desc,
                        lse_ptr, q_bytes, kv_bytes, v_bytes)
        tiles = _Tiles(kb, cfg, params)

        with kb.warp_roles():
            with kb.role("load", first_warp=0, num_warps=1, regs=cfg.producer_regs):
                _load_role(kb, cfg, tiles, bufs)
            with kb.role("mma", first_warp=4, num_warps=4 * cfg.consumers, regs=cfg.consumer_regs):
                _mma_role(kb, cfg, tiles, bufs, params)
    return kb.finish()


@dataclass(frozen=True)
class _Params:
    """The kernel's scalar parameters: problem sizes, the softmax scale (log2 units) and the
    divisors as common.fastdiv (multiplier, shift) pairs."""
    batch: Value
    heads: Value
    seqlen_q: Value
    seqlen_k: Value
    scale_log2: Value
    div_group: tuple       # query heads per KV head
    div_tiles: tuple       # query tiles per (head, batch)
    div_heads: tuple       # heads
    sections: tuple        # causal tile order: (section_shift, the rest's divisor), see section_tile
    softcap_scale: Value | None = None   # softcap: softmax_scale / cap, the factor before the tanh
    sinks: Value | None = None           # sinks: float32 [heads] sink logits (natural-log units)
    fixed_max: Value | None = None       # softcap_fixed_max: the fixed max M in exp2 units (common.softcap_rule)
    varlen: varlen.VarlenParams | None = None   # varlen: cu_seqlens and the rest (VARLEN_PARAMS)
    mods: ModHook | None = None          # score_mod / mask_mod (common.score_mod_ir)
    paged: paged.PagedParams | None = None   # page_size: the page table (PAGED_PARAMS)
    compact: varlen.CompactParams | None = None   # varlen_compact: the heads' chunks (COMPACT_PARAMS)


@dataclass(frozen=True)
class _Buffers:
    """The SMEM tiles and rings, their pipelines, the TMA descriptors and the LSE output."""
    q_smem: Value          # q_stages Q tiles of bm rows
    k_smem: Value          # `stages` K stages of bn rows
    v_smem: Value          # `stages` V stages of bn rows
    o_smem: Value          # the O tile: its own one when persistent, else the Q tile
    q_pipe: dsl.Pipeline
    k_pipe: dsl.Pipeline
    v_pipe: dsl.Pipeline
    q_desc: Value
    k_desc: Value
    v_desc: Value
    o_desc: Value
    lse_ptr: Value
    q_bytes: int           # one Q tile
    kv_bytes: int          # one K stage
    v_bytes: int           # one V stage (kv_bytes unless head_dim_v)

    def prefetch_descriptors(self):
        for d in (self.q_desc, self.k_desc, self.v_desc):
            fa4.tma_prefetch(d)


class _Counts(NamedTuple):
    """The Q tiles and KV blocks the pipelines have used before a tile (persistent): each
    pipeline's stage and phase follow from them (Pipeline.state_at)."""
    q: Value
    kv: Value


class _Acc(NamedTuple):
    """A consumer thread's share of a tile's result: O (float32, wgmma accumulator order) and,
    for its two rows (common/wgmma.py), the running max m and the partial row sum l."""
    o: Value
    m: tuple
    l: tuple


class _KvCarry(NamedTuple):
    """What the consumers' KV loop carries from block j-1 to block j."""
    k: PipeState           # where K_j is
    v: PipeState           # where V_{j-1} is (V runs one block behind K)
    acc: _Acc
    alpha: tuple           # rescale_before_pv: the rescale O still owes (else empty)
    p: tuple               # P_{j-1} as wgmma A fragments


class _Geometry:
    """One query tile and the KV blocks it visits (computed by every thread): n_blocks of them.
    No mask or causal alone: blocks 0 .. n_blocks - 1, the first n_unmasked whole (block_range; the
    original code, so those kernels keep their PTX). Another mask (a window, a chunk): blocks
    `first` .. first + n_blocks - 1, whole on [full_first, full_end) (common.masks.tile_blocks)."""

    def __init__(self, cfg, params: _Params, m_block, head, batch, seq: varlen.Sequence | None = None):
        self.seqlen_q, self.seqlen_k = (params.seqlen_q, params.seqlen_k) if seq is None else seq[1::2]
        # varlen: rows are packed, offset by the sequence's starts, in TMA batch 0 (None: dense)
        self.q_row0, self.k_row0 = (None, None) if seq is None else seq[0::2]
        self.tma_batch = batch if seq is None else const(0)
        self.total_q = None if seq is None else params.varlen.total_q
        self.m0 = m_block * cfg.bm
        self.head, self.batch, self.heads = head, batch, params.heads
        self.kv_head = fast_div(self.head, *params.div_group)
        self.first = self.full = None
        if cfg.mask.is_legacy:
            self.n_blocks, self.n_unmasked = block_range(self.m0, cfg.bm, self.seqlen_q, self.seqlen_k, cfg.bn,
                                                         cfg.causal)
        else:
            tb = tile_blocks(cfg.mask, self.m0, cfg.bm, self.seqlen_q, self.seqlen_k, cfg.bn, ValueOps)
            self.first, self.n_blocks, self.full = tb.first, tb.end - tb.first, (tb.full_first, tb.full_end)
        if seq is not None:  # a tile past its sequence's end: no KV block, nothing loaded, no row stored
            self.n_blocks = select(self.m0.lt(self.seqlen_q), self.n_blocks, const(0))

    def first_is_whole(self) -> Value:
        """Whether every row sees all of the first visited block (it may skip the mask)."""
        if self.first is None:
            return self.n_unmasked.gt(0)
        return self.first.sge(self.full[0]) & self.first.slt(self.full[1])

    def block(self, j) -> Value:
        """The KV block index of the j-th visited block (j itself when they start at 0)."""
        return j if self.first is None else self.first + j

    def q_row(self, row) -> Value:   # a query (key) row as a TMA row coordinate (varlen: the packed row)
        return row if self.q_row0 is None else self.q_row0 + row

    def k_row(self, row) -> Value:
        return row if self.k_row0 is None else self.k_row0 + row


class _Tiles:
    """The query tiles of this CTA. Without `persistent`, the one of its block index (non-causal x:
    query tile, y: head, z: batch; causal: a 1-D grid in section_tile's order, longest rows first
    across the heads of an L2-sized section, since the hardware hands blocks out in order as SMs
    free up and the grid should end on short tiles). With it, a 1-D grid strides over
    all tiles. Non-causal in the order query tile (fastest), head, batch: CTAs running at the same
    time work on neighbouring tiles of one head, so that head's K and V stay in L2; with empty
    warpgroups (bm 192) a head's last tile is cheaper, and the rounds are dealt rotated
    (dealt_tile) so every CTA gets its share of those. Causal tiles
    differ in work (a tile's KV blocks grow with its row), so a static stride over them in that
    order is unbalanced (132 CTAs over 128 tiles per head give some CTAs about 3x the work of
    others), and a stride over the longest rows of every head first is balanced but spreads each
    stride over all heads, whose K and V then outgrow L2 (measured slower, [D-causal-pairs]).
    Causal therefore strides over pairs of tiles of one (head, batch): tile T-1-k (the k-th
    longest) then tile k (the k-th shortest) of the T query tiles, whose KV blocks add up to the
    same count for every k, in the order pair (fastest), head, batch. Every CTA gets nearly the
    same work and the CTAs of one stride share about 2 x grid / T heads. (With T odd, the middle
    tile is a pair of its own.) The pipelines' stage and phase carry over from tile to tile as
    counts of the Q tiles and KV blocks used so far, which the producer and the consumers
    compute alike."""

    def __init__(self, kb, cfg, params: _Params):
        self.kb, self.cfg, self.params = kb, cfg, params
        self.fixed = None
        if cfg.varlen_compact and cfg.persistent:   # each() strides over the compact tiles
            return
        if cfg.varlen_compact:  # common.varlen_compact's grid: the block's sequence by a warp scan
            m_block, head, b, seq = varlen.compact_tile_of(kb, params, self._m_tiles(), cfg.bm)
            self.fixed = _Geometry(cfg, params, m_block, head, b, seq)
            return
        if cfg.varlen:  # common.varlen_schedule's order; the sequence from cu_seqlens
            m_block, head, b = varlen.tile_of(kb, params, self._m_tiles())
            seq = (paged.sequence(kb, params.varlen, params.paged, b) if cfg.page_size
                   else varlen.sequence(kb, params.varlen, b))
            self.fixed = _Geometry(cfg, params, m_block, head, b, seq)
            return
        if cfg.persistent:
            return
        if not cfg.causal:
            self.fixed = _Geometry(cfg, params, kb.block_idx(0), kb.block_idx(1), kb.block_idx(2))
            return
        shift, div_rest = params.sections
        m_block, hb = section_tile(kb.block_idx(0), self._m_tiles(), params.heads * params.batch, shift,
                                   lambda u: fast_div(u, *params.div_tiles), lambda u: fast_div(u, *div_rest),
                                   _ValueOps)
        self.fixed = self._geometry(m_block, hb)

    def _m_tiles(self) -> Value:
        """Query tiles per (head, batch)."""
        return (self.params.seqlen_q + (self.cfg.bm - 1)) // self.cfg.bm

    def _geometry(self, m_block, hb) -> _Geometry:
        """Query tile m_block of (head, batch) index hb = head + heads * batch."""
        b = fast_div(hb, *self.params.div_heads)
        return _Geometry(self.cfg, self.params, m_block, hb - b * self.params.heads, b)

    def _run(self, body, m_block, hb, counts: _Counts) -> _Counts:
        return self._run_geo(body, self._geometry(m_block, hb), counts)

    @staticmethod
    def _run_geo(body, geo: _Geometry, counts: _Counts) -> _Counts:
        body(geo, counts)
        return _Counts(counts.q + select(geo.n_blocks.gt(0), const(1), const(0)), counts.kv + geo.n_blocks)

    def _each_compact(self, body, start: _Counts):
        """The persistent compact varlen walk: CTA c takes compact tiles c, c + grid_dim, ... (the compact
        grid's order, common.varlen_compact) up to its tile count (compact_tiles); every warp of every role
        finds each tile's sequence by its own warp scan (compact_tile_of: the producer is one whole warp,
        each consumer warpgroup four), so no tile is handed over through SMEM. A tile past the working
        ones (the bound's spare ones) is empty: no KV block, no load, no row stored."""
        kb, cfg, p = self.kb, self.cfg, self.params
        m_tiles = self._m_tiles()
        loop = kb.for_(kb.block_idx(0), varlen.compact_tiles(p, m_tiles, cfg.bm), kb.grid_dim(0), carry=start)
        with loop as (t, counts):
            m_block, head, b, seq = varlen.compact_tile_of(kb, p, m_tiles, cfg.bm, t)
            loop.yield_(self._run_geo(body, _Geometry(cfg, p, m_block, head, b, seq), counts))

    def each(self, body):
        """body(geo, counts) once per tile; counts: the _Counts used before this tile, or None
        without `persistent` (each pipeline then starts at its initial state)."""
        kb, cfg, p = self.kb, self.cfg, self.params
        if self.fixed is not None:
            body(self.fixed, None)
            return
        m_tiles = self._m_tiles()
        start = _Counts(const(0), const(0))
        if cfg.varlen:   # varlen_compact with persistent (validate allows no other persistent varlen)
            self._each_compact(body, start)
            return
        if not cfg.causal and not cfg.skips_empty_warpgroups:
            loop = kb.for_(kb.block_idx(0), m_tiles * p.heads * p.batch, kb.grid_dim(0), carry=start)
            with loop as (t, counts):
                hb = fast_div(t, *p.div_tiles)            # divisor: m_tiles
                loop.yield_(self._run(body, t - hb * m_tiles, hb, counts))
            return
        if not cfg.causal:
            # empty warpgroups make a head's last query tile cheaper: rounds of grid_dim tiles, dealt
            # rotated (dealt_tile), so that every CTA gets its share of them
            total, grid_n = m_tiles * p.heads * p.batch, kb.grid_dim(0)
            loop = kb.for_(const(0), total, grid_n, carry=(kb.block_idx(0), start))
            with loop as (base, (slot, counts)):
                t, nxt = dealt_tile(base, slot, grid_n, _ValueOps)
                tile = kb.if_(t.lt(total), results=counts)
                with tile.then_():
                    hb = fast_div(t, *p.div_tiles)        # divisor: m_tiles
                    tile.yield_(self._run(body, t - hb * m_tiles, hb, counts))
                with tile.else_():
                    tile.yield_(counts)
                loop.yield_(nxt, tile.results)
            return
        # pairs of tiles of one (head, batch) whose work adds up alike (causal_pair_slot)
        slots = (m_tiles + 1) // 2 * p.heads * p.batch * 2
        loop = kb.while_((kb.block_idx(0) * 2, start))
        with loop.before() as (s, counts):
            loop.condition(s.lt(slots), s, counts)
        with loop.body() as (s, counts):
            m_block, hb, nxt = causal_pair_slot(s, m_tiles, kb.grid_dim(0), lambda u: fast_div(u, *p.div_tiles),
                                                _ValueOps)
            loop.yield_(nxt, self._run(body, m_block, hb, counts))


class _ValueOps:
    """causal_pair_slot's comparisons and select on kernel Values."""
    eq = staticmethod(lambda a, b: a.eq(b))
    lt = staticmethod(lambda a, b: a.lt(b))
    select = staticmethod(select)


class _Consumer:
    """One consumer warpgroup's view: its rows, fragment coordinates and GEMM issue helpers."""

    def __init__(self, kb, cfg, geo, bufs: _Buffers, params: _Params):
        self.kb, self.cfg, self.geo, self.bufs = kb, cfg, geo, bufs
        self.scale_log2 = params.scale_log2
        self.softcap_scale, self.sinks, self.mods = params.softcap_scale, params.sinks, params.mods
        self.fixed_max = params.fixed_max
        self.o_rows = params.varlen.o_rows if params.varlen else None
        tid = kb.thread_idx(0)
        # 0 .. cfg.consumers - 1, broadcast so ptxas keeps this warpgroup's Q/O addresses and wgmma
        # descriptors in uniform registers (else an R2UR pair before every wgmma)
        self.wg = kb.warp_uniform(tid // 128) - 1
        self.t = tid % 128
        self.is_leader = self.t.eq(0)
        lane = self.t % 32
        self.g = lane // 4                            # row within an 8-row group
        self.t4 = lane % 4                            # column pair within an 8-column group
        self.row0 = (self.t // 32) * 16 + self.g      # rows row0 and row0 + 8 of the warpgroup's 64 (wgmma.acc_row)
        self.n_s = cfg.bn // 2                        # S accumulator registers per thread
        self.n_o = cfg.dim_v // 2                     # O accumulator registers per thread
        # score_bias_init [D-bias-init]: an affine score_mod's bias starts the S accumulator, S = x + b /
        # mod_scale, and the softmax (its max, P, the LSE) runs on S with scale_log2 * mod_scale
        self.bias_init = bool(cfg.score_bias_init and self.mods and self.mods.bias_form(const(0), const(0)))
        if self.bias_init:
            self.scale_log2 = params.scale_log2 * self.mods.mod_scale
        if geo is not None:
            self.at(geo)

    def release(self, *uses) -> None:
        """Release the (pipeline, stage state) pairs: one arrival per warpgroup, from its thread 0."""
        with self.kb.if_(self.is_leader).then_():
            for pipe, s in uses:
                pipe.consumer_release(s)

    def has_rows(self) -> Value:
        """Whether this warpgroup's 64 rows of the tile start before seqlen_q (warp-uniform)."""
        return (self.geo.m0 + self.wg * 64).lt(self.geo.seqlen_q)

    def at(self, geo: "_Geometry") -> "_Consumer":
        """Point at a query tile: its geometry and this thread's two global rows."""
        self.geo = geo
        self.grow = [geo.m0 + self.wg * 64 + self.row0 + 8 * h for h in (0, 1)]
        return self

    # ---- GEMMs ----------------------------------------------------------------------------------
    def s_init(self, j: Value) -> Value | None:
        """The S accumulator's initial value for KV block j under bias_init (the score_mod's bias / mod_scale
        per register, common.score_mod_ir.ModHook.bias [D-bias-init]); None otherwise."""
        if not self.bias_init:
            return None
        col0 = j * self.cfg.bn + self.t4 * 2
        return dsl.vec(*self.mods.bias(self.geo.batch, self.geo.head,
                                       [(self.grow[acc_row(i)], 0) for i in range(self.n_s)],
                                       [(col0, acc_col(i)) for i in range(self.n_s)]))

    def issue_s(self, k_stage: Value, q_stage: Value, init: Value | None = None) -> Value:
        """S = Q K^T (+ init, s_init's) for this warpgroup's 64 rows: head_dim / 16 wgmma m64n{bn}k16
        from SMEM (Q from stage `q_stage` of the Q ring)."""
        kb, cfg = self.kb, self.cfg
        # without init the first k-step overwrites it (scale-d = 0)
        acc = undef(("f32", self.n_s)) if init is None else init
        sw = cfg.qk_tile.swizzle            # K-major, chunks of sw // 2 columns (cfg.qk_tile)
        q_rows = self.wg * (64 * sw)
        if cfg.q_stages > 1:
            q_rows = q_rows + q_stage * self.bufs.q_bytes
        q_base = kb.gep(self.bufs.q_smem, q_rows, "i8")
        k_base = kb.gep(self.bufs.k_smem, k_stage * self.bufs.kv_bytes, "i8")
        fa4.mma_fence()
        for kk in range(cfg.head_dim // WGMMA_K):
            c, within = divmod(kk, cfg.qk_tile.chunk // WGMMA_K)
            off = within * WGMMA_K * ELEM_BYTES[cfg.dtype]
            a_d = fa4.smem_desc(kb.gep(q_base, c * cfg.bm * sw + off, "i8"), swizzle=sw, lbo=16, sbo=8 * sw)
            b_d = fa4.smem_desc(kb.gep(k_base, c * cfg.bn * sw + off, "i8"), swizzle=sw, lbo=16, sbo=8 * sw)
            acc = Value(fa4.mma(a_d, b_d, const(int(kk > 0 or init is not None), "i1"), [acc], result_types=[acc.type], m=64,
                                n=cfg.bn, k=WGMMA_K, a_source="smem", ab_dtype=cfg.dtype, acc_dtype="f32"))
        fa4.mma_commit_group()
        return acc

    def issue_pv(self, p_frags: list, v_stage: Value, o: Value) -> Value:
        """O += P V: bn / 16 wgmma m64n{dim_v}k16, A = P from registers, B = V MN-major."""
        kb, cfg = self.kb, self.cfg
        true = const(1, "i1")
        sw = cfg.v_tile.swizzle             # MN-major, chunks of sw // 2 columns (cfg.v_tile)
        v_base = kb.gep(self.bufs.v_smem, v_stage * self.bufs.v_bytes, "i8")
        fa4.mma_fence()
        for kk in range(cfg.bn // WGMMA_K):
            # keys 16kk..16kk+15: two 8-row groups (SBO apart); head-dim chunks LBO = bn rows apart
            b_d = fa4.smem_desc(kb.gep(v_base, kk * WGMMA_K * sw, "i8"), swizzle=sw, lbo=cfg.bn * sw, sbo=8 * sw)
            o = Value(fa4.mma(p_frags[kk], b_d, true, [o], result_types=[o.type], m=64, n=cfg.dim_v,
                              k=WGMMA_K, a_source="regs", b_major="mn", ab_dtype=cfg.dtype, acc_dtype="f32"))
        fa4.mma_commit_group()
        return o

    def fold_q(self, q_stage: Value) -> None:
        """softcap_fold_q: this warpgroup's 64 rows of Q stage `q_stage` times softcap_scale in SMEM
        (common.softcap_variants, note "Q fold"), fenced to the async proxy before its S GEMMs read them."""
        kb, cfg = self.kb, self.cfg
        sw = cfg.qk_tile.swizzle
        q_rows = self.wg * (64 * sw)
        if cfg.q_stages > 1:
            q_rows = q_rows + q_stage * self.bufs.q_bytes
        scale_bf16_rows(kb, kb.gep(self.bufs.q_smem, q_rows, "i8"), cfg.qk_tile.chunks, cfg.bm * sw, 64 * sw,
                        self.t, 128, self.softcap_scale)
        kb.fence("async_smem")
        kb.named_barrier(BAR_Q_FOLD, 128, select=self.wg, span=cfg.consumers)

    # ---- softmax --------------------------------------------------------------------------------
    def softmax(self, s_acc: Value, j: Value, m_prev: list, l_prev: list, masked: bool):
        """Online softmax of one S block. Returns (P, m, l, alpha): P in float32 (`pack` makes the
        wgmma fragments), m the running max of raw scores per row that P and l are relative to
        (common.softmax.max_update: it lags the true max by < rescale_threshold under lazy
        rescale), l the thread's partial row sums (reduced across the 4 lanes of a row only in the
        epilogue), alpha = exp2((m_prev - m) * scale_log2) rescales O (1 when m did not move).
        p = exp2 on the SFU, 1 in exp2_poly_stride of a row's elements by the FMA polynomial
        (common.softmax.exp2_mixed)."""
        kb, cfg, geo = self.kb, self.cfg, self.geo
        s = [s_acc[i] for i in range(self.n_s)]
        if self.mods is not None:  # score_mod(s * mod_scale, ...), then mask_mod, per element (common.score_mod_ir)
            col0 = j * cfg.bn + self.t4 * 2   # (base, offset) indices, a base per row [D-index-fold]
            s = self.mods.apply(s, geo.batch, geo.head, [(self.grow[acc_row(i)], 0) for i in range(self.n_s)],
                                [(col0, acc_col(i)) for i in range(self.n_s)], score=not self.bias_init)
        if cfg.softcap:  # t = tanh(s * scale / cap), in units of cap (scale_log2 = cap * log2 e): before the mask
            x = (lambda v: v) if cfg.softcap_fold_q else (lambda v: v * self.softcap_scale)   # fold_q: S is Q' K^T
            s = tanh_pairs([x(v) for v in s]) if cfg.softcap_tanh == "f16x2" else [tanh(x(v)) for v in s]
        if masked and geo.first is None:  # register i holds key col0 + acc_col(i) of row acc_row(i) (common/wgmma.py)
            col0 = j * cfg.bn + self.t4 * 2
            visible = [visible_keys(col0, self.grow[h], geo.seqlen_q, geo.seqlen_k, cfg.causal) for h in (0, 1)]
            for i in range(self.n_s):
                s[i] = select(visible[acc_row(i)].le(acc_col(i)), const(NEG_INF, "f32"), s[i])
        elif masked:  # a window or chunk: keys [start, end) of col0 are visible (common.masks.key_window)
            col0 = j * cfg.bn + self.t4 * 2
            window = [key_window(cfg.mask, col0, self.grow[h], geo.seqlen_q, geo.seqlen_k) for h in (0, 1)]
            for i in range(self.n_s):
                s[i] = select(hidden(window[acc_row(i)], acc_col(i)), const(NEG_INF, "f32"), s[i])
        m_new, alpha, l_new = [], [], []
        p = [None] * self.n_s
        for h in (0, 1):
            idx = row_regs(self.n_s, h)
            if cfg.softcap_fixed_max:   # |t| <= 1: p = exp2(t C - M) on every row, no max, O never rescaled (the
                one = const(1.0, "f32")  # epilogue takes M for m C; common/softcap_rule.py, note "Runtime max")
                m, alpha_h, neg = one, one, const(0.0, "f32") - self.fixed_max
            else:
                mx = tree_reduce([s[i] for i in idx], fmax)
                mx = fmax(mx, kb.shuffle_xor(mx, 1))
                mx = fmax(mx, kb.shuffle_xor(mx, 2))
                # m: the max this row's P, l and O are relative to (lags the true max under lazy rescale)
                m, alpha_h, neg = max_update(m_prev[h], mx, self.scale_log2, cfg.rescale_threshold)
            alpha.append(alpha_h)
            # a generator: each fma is emitted right before its exp2 (the op order of the measured kernel)
            row_p = exp2_mixed((fma(s[i], self.scale_log2, neg) for i in idx), cfg.exp2_poly_stride)
            for i, p_i in zip(idx, row_p):
                p[i] = p_i
            total = tree_reduce(row_p, lambda a, b: a + b)
            m_new.append(m)
            l_new.append(l_prev[h] + total if cfg.softcap_fixed_max else fma(l_prev[h], alpha[h], total))
        return p, m_new, l_new, alpha

    def pack(self, p: list) -> list:
        """P (float32, S's register order) as wgmma A fragments: per k16 step four 16-bit pairs."""
        frags = []
        for kk in range(self.cfg.bn // WGMMA_K):
            words = [vec(p[a], p[b]).to((self.cfg.dtype, 2)).bitcast("i32") for a, b in a_frag_pairs(kk)]
            frags.append(vec(*words))
        return frags

    def row_scales(self, alpha: list) -> list:
        """alpha of each O register's row."""
        return [alpha[acc_row(i)] for i in range(self.n_o)]

    def rescale(self, o: Value, alpha: list) -> Value:
        scale = self.row_scales(alpha)
        return dsl.vec(*[o[i] * scale[i] for i in range(self.n_o)])

    def rescale_if_moved(self, o: Value, alpha: list) -> Value:
        """O * alpha; under lazy rescale only when a row of the warp moved its max (alpha != 1
        exactly when it did), behind a branch made warp-uniform by a vote (fa4.scale_if_uniform:
        a `bra.uni`, so the wgmma descriptors of the loop stay in uniform registers; an scf.if here
        cost 32 R2UR and 40 IMAD per D128 KV loop)."""
        if self.cfg.softcap_fixed_max:   # P is relative to the fixed max: O is never rescaled
            return o
        if not self.cfg.rescale_threshold:
            return self.rescale(o, alpha)
        moved = self.kb.vote_any(alpha[0].ne(1.0) | alpha[1].ne(1.0))
        return self.kb.scale_if_uniform(moved, o, dsl.vec(*self.row_scales(alpha)))


class _Turns:
    """The GEMM-issue turn of the pingpong ring: a consumer warpgroup issues its GEMMs between
    begin() (wait on named barrier BAR_SCHED + its index) and end() (arrive on the next one's), so
    one's softmax overlaps the others' GEMMs. Without `pingpong` they emit nothing."""

    def __init__(self, kb, cfg, wg: Value):
        self.kb, self.on, self.n, self.wg = kb, cfg.pingpong, cfg.consumers, wg
        # The turn barriers are selected by the warp-uniform warpgroup index, not branched on: a branch
        # per warpgroup in the KV loop makes ptxas keep the wgmma descriptors out of uniform registers
        # (an R2UR before every wgmma).
        self.nxt = select((wg + 1).eq(self.n), const(0), wg + 1)

    def start(self):
        if self.on:  # warpgroup 0 issues first: the last one of the ring hands it the first turn
            with self.kb.if_(self.wg.eq(self.n - 1)).then_():
                self.kb.named_barrier_arrive(BAR_SCHED, 256)

    def begin(self):
        if self.on:
            self.kb.named_barrier(BAR_SCHED, 256, select=self.wg, span=self.n)

    def end(self):
        if self.on:  # hand the turn to the next warpgroup of the ring
            self.kb.named_barrier_arrive(BAR_SCHED, 256, select=self.nxt, span=self.n)

    def final_handoff(self):
        if self.on:  # consume the last warpgroup's final hand-off so every barrier ends balanced
            with self.kb.if_(self.wg.eq(0)).then_():
                self.kb.named_barrier(BAR_SCHED, 256)


def _mma_role(kb, cfg, tiles: _Tiles, bufs: _Buffers, params: _Params):
    cs = _Consumer(kb, cfg, tiles.fixed, bufs, params)
    turns = _Turns(kb, cfg, cs.wg)
    turns.start()
    tiles.each(lambda geo, counts: _consume_tile(cs.at(geo), turns, counts))
    if cfg.persistent:
        turns.final_handoff()
        with kb.if_(cs.is_leader).then_():  # the last tile's O store reads SMEM: wait before the CTA exits
            fa4.tma_store_wait(pending=0)


def _consume_tile(cs: _Consumer, turns: _Turns, counts: _Counts | None):
    """One query tile of one consumer warpgroup: the KV loop (_attend), then the epilogue.
    counts: the pipelines' use so far (None: one tile per CTA, pipelines at their initial state)."""
    kb, cfg, geo = cs.kb, cs.cfg, cs.geo
    f32 = "f32"
    o_t = ("f32", cs.n_o)
    has_work = geo.n_blocks.gt(0)
    has_rows = cs.has_rows() if cfg.skips_empty_warpgroups else None
    main = kb.if_(has_work if has_rows is None else has_work & has_rows, results=_Acc(o_t, (f32, f32), (f32, f32)))
    with main.then_():
        main.yield_(_attend(cs, turns, counts))
    with main.else_():
        if has_rows is not None:
            with kb.if_(has_work).then_():
                _pass_tile(cs, turns, counts)
        z = const(0.0, f32)
        main.yield_(_Acc(const(0.0, o_t), (const(NEG_INF, f32), const(NEG_INF, f32)), (z, z)))
    if counts is None:
        turns.final_handoff()
    if has_rows is not None:
        with kb.if_(has_rows).then_():
            _epilogue(cs, main.results)
    else:
        _epilogue(cs, main.results)


def _attend(cs: _Consumer, turns: _Turns, counts: _Counts | None) -> _Acc:
    """O, m and l of one tile: block 0 peeled (S_0 and its softmax; P_0 waits for the first P V),
    blocks 1 .. n_blocks - 1 by _kv_step (unmasked ones first, then the diagonal and the seqlen_k
    tail), then the last block's P V."""
    kb, cfg, bufs, geo = cs.kb, cs.cfg, cs.bufs, cs.geo
    q_pipe, k_pipe, v_pipe = bufs.q_pipe, bufs.k_pipe, bufs.v_pipe
    q_count, kv_count = counts or (None, None)
    f32 = "f32"
    if cs.mods is not None:  # aux loads of the tile's head and batch go here, before the KV loop
        cs.mods.start_tile(geo.batch, geo.head)
    q0 = q_pipe.state_at(q_count)
    q_pipe.consumer_wait(q0)
    if cfg.softcap_fold_q:
        cs.fold_q(q0.stage)
    # block 0 (peeled, masked): S_0, softmax; P_0 stays for the first P.V
    k0 = k_pipe.state_at(kv_count)
    s_init = cs.s_init(geo.block(const(0)))
    k_pipe.consumer_wait(k0)
    turns.begin()
    s_acc = cs.issue_s(k0.stage, q0.stage, s_init)
    turns.end()
    s_acc = wait_group(s_acc, pending=0)
    cs.release((k_pipe, k0))
    neg_inf, zero = const(NEG_INF, f32), const(0.0, f32)
    if cfg.persistent and not (cs.mods and cs.mods.aux):   # one copy when aux tensors are read [D-score-mod]
        # block 0 needs the mask only when some row does not see all of it (the causal diagonal,
        # seqlen_k < bn), and short tiles pay it per tile: the unmasked softmax gets its own copy
        # (only here: one-tile-per-CTA kernels were slower with it) [D-block0]
        first = kb.if_(geo.first_is_whole(), results=((f32, f32), (f32, f32), [("i32", 4)] * (cfg.bn // WGMMA_K)))
        for branch, masked in ((first.then_, False), (first.else_, True)):
            with branch():
                p, m, l, _ = cs.softmax(s_acc, geo.block(const(0)), [neg_inf, neg_inf], [zero, zero], masked=masked)
                first.yield_(m, l, cs.pack(p))
        m, l, frags = first.results
    else:
        p, m, l, _ = cs.softmax(s_acc, geo.block(const(0)), [neg_inf, neg_inf], [zero, zero], masked=True)
        frags = cs.pack(p)
    o = const(0.0, ("f32", cs.n_o))
    k1, v0 = k0.advance(), v_pipe.state_at(kv_count)
    # with rescale_before_pv the carry holds the alpha O still owes (1: block 0 left O = 0)
    owed = (const(1.0, f32),) * 2 if cfg.rescale_before_pv else ()
    state = _KvCarry(k1, v0, _Acc(o, tuple(m), tuple(l)), owed, tuple(frags))

    for lo, hi, masked in _kv_segments(geo):
        loop = kb.for_(lo, hi, 1, carry=state)
        with loop as (j, carried):
            loop.yield_(_kv_step(cs, turns, q0, j, carried, masked))
        state = loop.results
    # the last block: O += P V (after the rescale O still owes)
    o = state.acc.o
    if state.alpha:
        o = cs.rescale_if_moved(o, state.alpha)
    if cfg.persistent:  # every S GEMM has completed: the next tile's Q may load now
        cs.release((q_pipe, q0))
    v_pipe.consumer_wait(state.v)
    if cfg.page_size:   # the last block holds the rows past the length (attention_fwd_sm90_paged)
        paged.zero_v_tail(cs, state.v.stage, geo.block(geo.n_blocks - 1), BAR_V_TAIL)
    o = cs.issue_pv(state.p, state.v.stage, o)
    o = wait_group(o, pending=0)
    cs.release((v_pipe, state.v), *(() if cfg.persistent else ((q_pipe, q0),)))
    return state.acc._replace(o=o)


def _kv_segments(geo: _Geometry) -> list:
    """The KV loop after the peeled first block, as (lo, hi, masked) runs of absolute block indices.
    No mask or causal: blocks 1 .. n_unmasked - 1 need no mask, the rest (diagonal, seqlen_k tail)
    do. Another mask: the blocks before the whole ones (a window's or chunk's left edge), the whole
    ones, then the rest (right edge, seqlen_k tail), each run possibly empty."""
    if geo.first is None:
        split = select(geo.n_unmasked.gt(1), geo.n_unmasked, const(1))
        return [(const(1), split, False), (split, geo.n_blocks, True)]
    lo, end = geo.first + 1, geo.first + geo.n_blocks
    whole_lo = geo.full[0].smax(lo).smin(end)
    whole_hi = geo.full[1].smax(whole_lo).smin(end)
    return [(lo, whole_lo, True), (whole_lo, whole_hi, False), (whole_hi, end, True)]


def _kv_step(cs: _Consumer, turns: _Turns, q0: PipeState, j: Value, c: _KvCarry, masked: bool) -> _KvCarry:
    """KV block j of the software-pipelined loop (FA3's intra-warpgroup overlap):
        1. wait for K_j and V_{j-1}
        2. in this warpgroup's GEMM turn, issue S_j = Q K_j^T, then O += P_{j-1} V_{j-1}
        3. wait for S_j only and release K_j
        4. online softmax of S_j while P_{j-1} V_{j-1} runs on the tensor cores; P_j as A fragments
        5. wait for P_{j-1} V_{j-1}, release V_{j-1}, rescale O by alpha_j (with rescale_before_pv
           the rescale is carried and done in step 2 of the next block, under S_{j+1})"""
    bufs = cs.bufs
    s_init = cs.s_init(j)   # score_bias_init: S_j's bias, before the waits [D-bias-init]
    # 1. data first, then the turn: a warpgroup never holds the turn while waiting on TMA
    bufs.k_pipe.consumer_wait(c.k)
    bufs.v_pipe.consumer_wait(c.v)
    # 2. S_j and P_{j-1} V_{j-1}, back to back in one turn
    turns.begin()
    s_j = cs.issue_s(c.k.stage, q0.stage, s_init)
    o = c.acc.o
    if c.alpha:    # O's registers are free (the last P V was waited on): scale them under S_j
        o = cs.rescale_if_moved(o, c.alpha)
    o = cs.issue_pv(c.p, c.v.stage, o)
    turns.end()
    # 3. S_j
    s_j = wait_group(s_j, pending=1)
    cs.release((bufs.k_pipe, c.k))
    # 4. softmax under P_{j-1} V_{j-1}
    p_j, m_j, l_j, alpha = cs.softmax(s_j, j, c.acc.m, c.acc.l, masked)
    frags_j = cs.pack(p_j)
    # 5. P_{j-1} V_{j-1}
    o = wait_group(o, pending=0)
    cs.release((bufs.v_pipe, c.v))
    if not c.alpha:
        o = cs.rescale_if_moved(o, alpha)
    return _KvCarry(c.k.advance(), c.v.advance(), _Acc(o, tuple(m_j), tuple(l_j)),
                    tuple(alpha) if c.alpha else (), tuple(frags_j))


def _pass_tile(cs: _Consumer, turns: _Turns, counts: _Counts | None):
    """A consumer warpgroup whose 64 rows all lie past seqlen_q (the last query tile of a head:
    at seqlen 1024 a 192-row tile holds 64 rows, so two of its three warpgroups have none) issues
    no GEMM and computes nothing, but takes its part in every handshake of the tile in the order
    a working warpgroup does (_attend): each Q and K/V stage waited on, then released (the
    producer refills a stage once every consumer warpgroup released it), and each GEMM turn passed
    on, so the working warpgroups run at their own pace with the tensor cores to themselves."""
    kb, bufs, geo = cs.kb, cs.bufs, cs.geo
    q_pipe, k_pipe, v_pipe = bufs.q_pipe, bufs.k_pipe, bufs.v_pipe
    q_count, kv_count = counts or (None, None)
    q0 = q_pipe.state_at(q_count)
    q_pipe.consumer_wait(q0)
    k0 = k_pipe.state_at(kv_count)
    k_pipe.consumer_wait(k0)
    turns.begin()
    turns.end()
    cs.release((k_pipe, k0))
    k1, v0 = k0.advance(), v_pipe.state_at(kv_count)
    loop = kb.for_(const(1), geo.n_blocks, 1, carry=(k1, v0))
    with loop as (j, (k_s, v_s)):
        k_pipe.consumer_wait(k_s)
        v_pipe.consumer_wait(v_s)
        turns.begin()
        turns.end()
        cs.release((k_pipe, k_s), (v_pipe, v_s))
        loop.yield_(k_s.advance(), v_s.advance())
    _, v_s = loop.results
    v_pipe.consumer_wait(v_s)
    cs.release((v_pipe, v_s), (q_pipe, q0))
