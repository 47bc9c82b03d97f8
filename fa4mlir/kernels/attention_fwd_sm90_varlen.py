"""The ragged-batch (varlen) pieces of the sm_90a attention forward (attention_fwd_sm90, AttnConfig.varlen).

q, k, v and out are packed [total_tokens, heads, D] (v and out D_v wide where head_dim_v is set:
MLA prefill's qk 192 / v 128, out [total_q, heads, 128]); sequence b owns rows cu_seqlens_q[b] ..
cu_seqlens_q[b + 1] of q and out, and rows cu_seqlens_k[b] .. of k and v, seqused_k[b] of them when
seqused_k is given (else cu_seqlens_k[b + 1] - cu_seqlens_k[b]). The kernel sees the packed tensors
as one batch of total_tokens rows (TMA descriptors over [1, total, heads, D]) and offsets every row
coordinate by its sequence's start:

- the grid is 1-D in common.varlen_schedule's order (sections of (head, sequence) indices whose K
  and V fit in L2, last query tile first within a section); each CTA reads its
  sequence's start and lengths from device memory (`sequence`) and exits at once when its query
  tile starts past the sequence's end (no barrier, no TMA: _Tiles.guard). With varlen_compact the
  grid is common.varlen_compact's instead, one block per working tile (`compact_tile_of`: a warp
  scan of cu_seqlens_q finds the block's sequence), and only the blocks past the last working tile
  exit so; with varlen_compact and persistent, min(SMs, compact tiles) CTAs stride over the compact
  tiles (compact_tiles, attention_fwd_sm90._Tiles._each_compact), every warp scanning for each tile;
- Q rows past the sequence's end load the next sequence's rows (or TMA's zeros past the tensor):
  their results are never stored. K and V rows past seqlen_k load the same way and are masked
  exactly as the dense kernel masks its seqlen_k tail (the tail block runs the masked softmax, its
  scores set to -inf, P = 0). Note [finite-tails]: P V then multiplies those V rows by 0, so they
  must be finite: rows of another sequence are, rows past seqused_k inside the packed tensor are
  the caller's (attention/varlen.py says so);
- O: a consumer warpgroup whose 64 rows all lie in the sequence stores them with the dense
  kernel's TMA store (at the packed row); a warpgroup holding the sequence's last rows stores its
  rows from registers, row by row behind a predicate (`store_rows`), since a 64-row TMA box would
  overwrite the next sequence's first rows. LSE ([heads, total_q], FlashAttention-3/4's varlen
  layout) is stored per row, behind the same bound.

Note [varlen-mod-indices]: a score_mod / mask_mod (common/score_mod_ir.py ModHook) sees batch = the
sequence index b, head the query head, and q_idx / kv_idx the row's and key's positions WITHIN the
sequence (0 .. seqlen_q - 1, 0 .. seqlen_k - 1), not packed rows: FlexAttention's meaning applied to
each sequence, and FA4 CuTe's (flash_attn/cute: tests/cute/test_score_mod_varlen.py's reference runs
flex_attention per sequence with b = the sequence). The consumer's rows (`grow`) and the key columns
of a block (j * bn + ...) already count from the sequence's start (its offsets go only into the TMA
coordinates and the row stores), so the hook needs nothing varlen-specific. A function that wants
packed positions reads them from an aux tensor: aux_tensors=[cu_seqlens_q] gives
aux_tensors[0][batch] + q_idx (FA4 CuTe passes a seqlen_info argument for this; the
FlexAttention signature has no room for it). Aux loads indexed by batch and head alone are hoisted
per tile as in the dense kernel (ModHook.start_tile, the sequence index being tile-invariant).

Bounds for bad lengths (cu_seqlens decreasing or past the tensor cannot be checked on the host
without a sync): the query rows a sequence may write are clipped to [max(start, 0), min(end,
total_q)), so no store leaves out and lse whatever cu_seqlens holds; reads past the tensors are
TMA's zeros. The results of such a sequence are unspecified.
"""
from __future__ import annotations

from typing import NamedTuple

from ..dsl import Value, const, fast_div, select, vec
from .common.sections import section_tile
from .common.varlen_compact import WARP, length_tiles, scan_start, scan_step, tile_in_sequence
from .common.wgmma import acc_pair


class VarlenParams(NamedTuple):
    """The varlen launch parameters (attention_sm90_config.VARLEN_PARAMS)."""
    o_rows: Value          # out as a pointer (partial warpgroups' row stores)
    cu_q: Value            # int32 [batch + 1]
    cu_k: Value            # int32 [batch + 1]
    seqused_k: Value       # int32 [batch], or cu_k when has_seqused_k is 0
    has_seqused_k: Value   # i32 flag
    total_q: Value         # packed query rows


def params_of(p: dict) -> VarlenParams:
    return VarlenParams(p["o_rows"], p["cu_seqlens_q"], p["cu_seqlens_k"], p["seqused_k"], p["has_seqused_k"],
                        p["total_q"])


class Sequence(NamedTuple):
    """One sequence of the batch: its first packed row of q/out and of k/v, and its lengths."""
    q_start: Value
    seqlen_q: Value
    k_start: Value
    seqlen_k: Value


def sequence(kb, vp: VarlenParams, batch: Value) -> Sequence:
    """Sequence `batch`'s rows, from cu_seqlens (and seqused_k) in device memory. The query rows are
    clipped to [0, total_q) (module note: no store leaves out for bad cu_seqlens); lengths are >= 0."""
    def load(ptr, idx):
        return kb.load(kb.gep(ptr, idx, "i32"), "i32", align=4)

    return clip_sequence(vp, lambda: load(vp.cu_q, batch), lambda: load(vp.cu_q, batch + 1),
                         lambda: load(vp.cu_k, batch), lambda: load(vp.cu_k, batch + 1),
                         lambda: load(vp.seqused_k, batch))


def clip_sequence(vp: VarlenParams, q_lo, q_hi, k_lo, k_hi, used) -> Sequence:
    """`sequence` from its cu_seqlens_q pair, cu_seqlens_k pair and seqused_k entry, each a thunk
    (`sequence` loads there; the compact grid's scan has them already)."""
    q_start = q_lo().smax(const(0))
    q_end = q_hi().smin(vp.total_q)
    k_start = k_lo()
    k_len = k_hi() - k_start
    used = used()     # cu_seqlens_k[batch] when there is no seqused_k: not read then
    seqlen_k = select(vp.has_seqused_k.ne(0), used, k_len).smax(const(0))
    return Sequence(q_start, (q_end - q_start).smax(const(0)), k_start, seqlen_k)


class _SectionOps:
    """section_tile's comparison and select on kernel Values."""
    lt = staticmethod(lambda a, b: a.lt(b))
    select = staticmethod(select)


def tile_of(kb, params, m_tiles: Value):
    """(m_block, head, sequence) of this CTA: common.sections.section_tile on the block index
    (common.varlen_schedule: sections of (head, sequence) indices whose K and V fit in L2, longest
    query tiles first within each), then hb = head + heads * sequence split by the heads divisor."""
    shift, div_rest = params.sections
    m_block, hb = section_tile(kb.block_idx(0), m_tiles, params.heads * params.batch, shift,
                               lambda u: fast_div(u, *params.div_tiles), lambda u: fast_div(u, *div_rest),
                               _SectionOps)
    b = fast_div(hb, *params.div_heads)
    return m_block, hb - b * params.heads, b


class CompactParams(NamedTuple):
    """The compact grid's launch parameters (attention_sm90_config.COMPACT_PARAMS)."""
    chunk_heads: Value     # g: heads per chunk
    chunk_full: Value      # whole chunks (heads // g)
    div_chunk: tuple       # g as a fastdiv pair
    div_rest: tuple        # heads mod g (1 when none) as a fastdiv pair


def compact_params_of(p: dict) -> CompactParams:
    return CompactParams(p["chunk_heads"], p["chunk_full"], (p["chunk_mul"], p["chunk_shr"]),
                         (p["chunk_rest_mul"], p["chunk_rest_shr"]))


class _LaneOps:
    """common.varlen_compact's ops on kernel Values (each thread one lane of its warp)."""

    def __init__(self, kb):
        self.shuffle_xor = kb.shuffle_xor

    select = staticmethod(select)
    le = staticmethod(lambda a, b: a.le(b))
    lt = staticmethod(lambda a, b: a.lt(b))
    nonzero = staticmethod(lambda a: a.ne(0))
    smin = staticmethod(lambda a, b: a.smin(b))
    smax = staticmethod(lambda a, b: a.smax(b))
    const = staticmethod(const)


def compact_tile_of(kb, params, m_tiles: Value, bm: int, t: Value | None = None):
    """(m_block, head, sequence, Sequence) of compact tile index t (this CTA's block index unless given: the
    persistent kernel passes each tile of its stride) on the compact grid (common.varlen_compact):
    every warp scans the batch 32 sequences at a time, each lane loading its sequence's cu_seqlens_q
    and cu_seqlens_k pairs and seqused_k at once (scan_step), and the lane whose tiles hold the block
    index t hands its sequence, first tile and loads to the warp, so no load waits on the scan; then
    the index within the sequence splits into (m_block, head) (tile_in_sequence). A block past the last
    working tile finds no sequence: index 0, every field 0, so seqlen_q 0, and m_block 0 (not -1: the
    epilogue's row bounds are unsigned), an empty tile (it exits as an empty tile does: no KV block, no
    row stored). Every thread runs it before the roles split (the shuffles need whole
    warps); the results are broadcast warp-uniform, so that ptxas keeps the tile's coordinates in uniform
    registers, as the default grid's (from the block index) are, not in the consumers' (D64's bm 192
    kernel spilled 12 / 48 bytes without it)."""
    vp, cp = params.varlen, params.compact
    ops = _LaneOps(kb)
    t = kb.block_idx(0) if t is None else t
    lane = kb.thread_idx(0) & (WARP - 1)

    def load(ptr, idx):
        return kb.load(kb.gep(ptr, idx, "i32"), "i32", align=4)

    def load_fields(i, i1, iu):   # a lane's cu_seqlens_q pair, cu_seqlens_k pair and seqused_k (clamped)
        return load(vp.cu_q, i), load(vp.cu_q, i1), load(vp.cu_k, i), load(vp.cu_k, i1), load(vp.seqused_k, iu)

    scan = kb.for_(const(0), params.batch, WARP, carry=scan_start(5, ops))
    with scan as (k, carry):
        scan.yield_(scan_step(t, lane, k, params.batch, load_fields, vp.total_q, bm, m_tiles, params.heads, carry,
                              ops))
    b, first, *fields = (kb.warp_uniform(v) for v in scan.results[1:])
    seq = clip_sequence(vp, *(lambda v=v: v for v in fields))
    n = length_tiles(seq.seqlen_q, bm, m_tiles, ops)      # as the scan counted sequence b's tiles
    m_block, head = tile_in_sequence(t - first, n, params.heads, cp.chunk_heads, cp.chunk_full,
                                     lambda u: fast_div(u, *cp.div_chunk), lambda u: fast_div(u, *cp.div_rest), ops)
    m_block = select(n.eq(0), const(0), m_block)   # no sequence: tile 0 of none (its n - 1 - idx is -1)
    return kb.warp_uniform(m_block), kb.warp_uniform(head), b, seq


def compact_tiles(params, m_tiles: Value, bm: int) -> Value:
    """The compact grid's tile count (common.varlen_compact.compact_grid_size) from the launch's own
    parameters: heads x min(floor((total_q + batch (bm - 1)) / bm), m_tiles x batch). A persistent CTA's
    stride ends there, so the host passes no count and sizes the grid alone (min(SMs, this))."""
    vp = params.varlen
    return params.heads * ((vp.total_q + params.batch * (bm - 1)) // bm).smin(m_tiles * params.batch)


def rows_fit(geo, wg: Value) -> Value:
    """Whether this warpgroup's 64 rows all lie in the sequence (its TMA store stays inside it)."""
    return (geo.m0 + wg * 64 + 64).le(geo.seqlen_q)


def store_rows(kb, cfg, cs, o: Value, inv: list) -> None:
    """O / l of this thread's two rows straight from registers into out (packed [total_q, heads, D_v],
    contiguous), each row behind `row < seqlen_q`: a 4-byte store per column pair of the accumulator
    (common/wgmma.py: register pair acc_pair(jd, h) holds columns 8 jd + 2 t4, + 1 of row h)."""
    geo = cs.geo
    row_bytes = cfg.dim_v * 2
    for h in (0, 1):
        row = cs.grow[h]
        with kb.if_(row.lt(geo.seqlen_q)).then_():
            token = (geo.q_row0 + row).to("i64")
            base = kb.gep(cs.o_rows, (token * geo.heads.to("i64") + geo.head.to("i64")) * row_bytes
                          + (cs.t4 * 4).to("i64"), "i8")
            for jd in range(cfg.dim_v // 8):
                i = acc_pair(jd, h)
                pair = vec(o[i] * inv[h], o[i + 1] * inv[h]).to((cfg.dtype, 2))
                kb.store(pair, kb.gep(base, jd * 16, "i8"), align=4)


def lse_index(geo, row: Value) -> Value:
    """LSE element of `row` of this tile's sequence and head: [heads, total_q] (i64)."""
    return geo.head.to("i64") * geo.total_q.to("i64") + (geo.q_row0 + row).to("i64")


def epilogue(kb, cfg, cs, o: Value, inv: list, lse: list, store_tile) -> None:
    """The varlen epilogue's stores: O by the dense kernel's TMA store (`store_tile`) where this
    warpgroup's 64 rows all lie in the sequence, else row by row (store_rows); then each row's LSE,
    [heads, total_q], from the lane that owns column pair 0 of the row, rows past the sequence
    skipped."""
    geo = cs.geo
    fits = kb.if_(rows_fit(geo, cs.wg))
    with fits.then_():
        store_tile()
    with fits.else_():
        store_rows(kb, cfg, cs, o, inv)
    with kb.if_(cs.t4.eq(0)).then_():
        for h in (0, 1):
            with kb.if_(cs.grow[h].lt(geo.seqlen_q)).then_():
                kb.store(lse[h], kb.gep(cs.bufs.lse_ptr, lse_index(geo, cs.grow[h]), "f32"), align=4)


__all__ = ["VarlenParams", "Sequence", "CompactParams", "compact_params_of", "compact_tile_of", "compact_tiles", "params_of", "sequence", "tile_of", "rows_fit", "store_rows", "lse_index", "epilogue"]
