"""The seesaw schedule of the absorbed MLA decode on sm_90a (MLADecodeConfig.seesaw: DEFAULT_RULE's for more
than 32 packed rows over bf16; FlashMLA's sm90 decode schedule, written here from its idea): the roles of attention_mla_decode_sm90 when
`seesaw` is set. Q's load, the masks, the box origins and the epilogue's writes are that kernel's.

A split's KV tiles are taken in pairs (a = j, b = j + 1). Warpgroup 0 (role `mma0`) computes S of
tile a over all 64 keys, warpgroup 1 (`mma1`) S of tile b (36 m64n64k16 each: Q read once per 64
keys, not twice as the exchange does), each its own softmax; O stays split by V's columns (O_0 =
O[:, :256], O_1 = O[:, 256:]), so each warpgroup needs the other's P for its column half:

    mma0, pair i                              mma1, pair i
    wait a (chunkwise); S_a = Q K_a^T         wait a, wait b (chunkwise); S_b = Q K_b^T
    m_a = max(m, rowmax S_a)                  mx_b = rowmax S_b
    P_a = exp2(S_a - m_a), l_0 = l_0 exp2(m - m_a) + sum P_a
    P_a -> tile a's rope columns, m_a -> SMEM
    arrive BAR_PA  --------------------->     sync BAR_PA; read m_a, P_a
    O_0 *= exp2(m - m_a)                      O_1, l_1 *= exp2(m - m_a)
    O_0 += P_a V_a[:, :256]                   O_1 += P_a V_a[:, 256:]  (runs under the softmax below)
                                              m_b = max(m_a, mx_b); P_b = exp2(S_b - m_b)
                                              P_b -> tile b's rope columns, m_b -> SMEM
    wait b; sync BAR_PB  <---------------     arrive BAR_PB
    read m_b, P_b
    (P_a V_a retired) release a               (P_a V_a retired) release a
    O_0, l_0 *= exp2(m_a - m_b)               O_1 *= exp2(m_a - m_b); l_1 = l_1 exp2(m_a - m_b) + sum P_b
    O_0 += P_b V_b[:, :256]                   O_1 += P_b V_b[:, 256:]
    (retired) release b                       (retired) release b

Both end the pair at m = m_b (the same bits: m_b = fmax(m_a, ...) computed once, read by mma0 from
SMEM), so O_0 and O_1 are relative to the same row maxima and l = l_0 + l_1 at the end (the
exchange's row-sum exchange, common/mla_sm90.exchange_rows). The two warpgroups meet only through
these one-way named barriers (bar.arrive by the writer, bar.sync by the reader, 256 threads): mma1's
S_b runs beside mma0's S_a, mma0's softmax of the next pair beside mma1's P V.

Note "P in the rope columns": P of a tile (64 x 64 16-bit as A fragments: k-step k, thread t's four
words at (k 128 + t) 16) goes into that tile's columns 512..575 (its ninth 64-column chunk, 8 KiB),
which only that tile's S reads (V is the first 512): its writer's S retired before the write, and
the producer refills the stage only after both warpgroups released it (after reading P). So the
seesaw needs no SMEM for P beyond the ring: Q 72 KiB + two 72 KiB tiles + 1 KiB of row maxima and
sums. The writer fences its P stores to the async proxy (the next TMA fill of the stage).

Note "Buffers": one SMEM vector each of m_a and m_b. mma0 rewrites m_a of pair i + 1 only after
BAR_PB of pair i, which mma1 arrives after reading m_a of pair i; mma1 rewrites m_b of pair i + 1
only after BAR_PA of pair i + 1, which mma0 arrives after reading m_b of pair i. Each named barrier
sees one arrive (128 threads) and one sync (128 threads) per pair, never two arrivals in a row.

Note "Rescale": each warpgroup adds P_a V_a relative to m_a, then rescales its O half (and its l)
by exp2(m_a - m_b) once that retired, then adds P_b V_b: P_b relative to m_a could overflow, and a
first version that had mma1 scale P_a (bf16, unpacked) by exp2(m_a - m_b) instead rounded P twice and
issued P_a V_a only after mma1's own softmax; now it runs under it and tile a is released before
P_b V_b. (Releasing a at wgmma.wait_group 1 with both P V in flight spilled 40 bytes: P_b's fragments
stayed live.)

Note "Chunk rings": the KV ring is nine rings (kv_c0 .. kv_c8) of the same two stages, one per
64-column chunk: the producer commits each chunk's TMA boxes (8 KiB) on its own ring and S waits
chunk by chunk, its four k16 steps issued as soon as that chunk landed (a wgmma.fence after each
wait: without it ptxas inserted its own arrive in the wait's branch and serialised the wgmmas, C7519).
A warpgroup that does not compute S on a tile waits all nine rings of it before using it; mma1 waits
all of tile a's rings before S_b's (the producer commits a's chunks before b's). Both release
all nine per tile after their last wgmma on it retired. 288 bytes of mbarriers.

Note "Odd count": a split with an odd number of tiles ends with one tile a alone: mma0 runs its half
of a pair and releases a; mma1 reads m_a and P_a (no rescale: m = m_a) and adds P_a V_a[:, 256:]. The
pairs below the first tile any row masks run unmasked; the rest (and the odd tile) masked, with the
V rows past L_b zeroed in the tile that holds L_b (attention_mla_decode_sm90, note "NaN past L_b"): each
warpgroup zeroes its own columns of a tile once the S on that tile retired (its own, or the other's:
after that one's barrier).

(Two opt-in forms, P read by an SS wgmma from SMEM (seesaw_ss) and FlashMLA's in-pair order (seesaw_fm), were
timed and removed: notes/RESULTS.md [R-mla-seesaw-ss-fm].)
"""
from __future__ import annotations

from ..dialect import builders as fa4
from ..dsl import Value, const, undef
from .attention_mla_decode_sm90_config import BN, MLADecodeConfig
from .common import mla_seesaw_sm90 as seesaw
from .common.mla_sm90 import CHUNK, QK_CHUNKS, SWIZZLE, TILE_M, WG_CHUNKS, WGMMA_K
from .common.mla_seesaw_sm90 import P_AT
from .common.wgmma import wait_group

BAR_PA = 4                  # mma0 -> mma1: P_a and m_a written (named barrier, 256 threads)
BAR_PB = 5                  # mma1 -> mma0: P_b and m_b written


class Chunks:
    """note "Chunk rings": one ring per 64-column chunk of the KV tile (QK_CHUNKS rings of the same
    stages, one PipeState for all), so S can start on a chunk while the later ones are in flight."""

    def __init__(self, kb, stages: int):
        self.pipes = [kb.pipeline(f"kv_c{c}", num_stages=stages, producer="load", consumers=["mma0", "mma1"],
                                  consumer_arrivals=2) for c in range(QK_CHUNKS)]

    def initial_state(self):
        return self.pipes[0].initial_state()

    def wait(self, s, c: int):
        self.pipes[c].consumer_wait(s)

    def wait_all(self, s):
        for pipe in self.pipes:
            pipe.consumer_wait(s)

    def release(self, s):
        for pipe in self.pipes:
            pipe.consumer_release(s)


class _Tiles(seesaw.Tiles):
    """The dense decode's side of the schedule (common/mla_seesaw_sm90): the chunk rings, its causal and
    length masks, the V rows past L_b zeroed."""
    bar_pa, bar_pb = BAR_PA, BAR_PB

    def __init__(self, cfg: MLADecodeConfig, bufs):
        self.cfg, self.bufs, self.chunks = cfg, bufs, bufs[2]

    def s(self, cs, st):
        return _chunked_s(cs, self.bufs, st, self.cfg.dtype)

    def wait_all(self, st):
        self.chunks.wait_all(st)

    def tile(self, cs, st):
        return _tile(cs, self.bufs, st)[1]

    def release(self, st, b: bool = False):
        self.chunks.release(st)

    def mask(self, cs, j, st):
        from .attention_mla_decode_sm90 import _mask
        return _mask(cs, j)

    def zero_tail(self, cs, tile, j, w):
        _zero_tail(cs, tile, j, w)


def build_roles(kb, cfg: MLADecodeConfig, p, q_smem, kv_smem, q_slot, x_smem, regs: tuple):
    """The chunk rings, then roles mma0 and mma1 (warpgroups 0 and 1: Q's load, the pair loops, the
    epilogue) and the producer warp `load`. Each role derives the work item itself: a value of a
    shared one, live across setmaxnreg, was spilled (4 bytes, ptxas)."""
    from . import attention_mla_decode_sm90 as base
    chunks = Chunks(kb, cfg.stages)
    kb.pipeline_init()
    with kb.warp_roles():
        for w in (0, 1):
            with kb.role(f"mma{w}", first_warp=4 * w, num_warps=4, regs=regs[0]):
                cs = base._Consumer(kb, cfg, base._Work(kb, p), p, x_smem)
                cs.wg = const(w)
                base._load_q(cs, q_smem, q_slot, cfg.dtype)
                _pairs(cs, cfg, w, (q_smem, kv_smem, chunks, q_slot))
        with kb.role("load", first_warp=8, num_warps=1, regs=regs[1]):
            _load_role(kb, cfg, base._Work(kb, p), p, kv_smem, chunks)


def _load_role(kb, cfg: MLADecodeConfig, work, p, kv_smem, chunks: Chunks):
    """attention_mla_decode_sm90's producer, each 64-column chunk of a tile committed on its own ring."""
    from .attention_mla_decode_sm90 import _box_origin
    tile_bytes = MLADecodeConfig.tile_bytes()
    with kb.if_(kb.elect_one()).then_():
        fa4.tma_prefetch(p["kv_cache"])
        row_at = work.batch.to("i64") * p["block_table_stride"].to("i64")
        loop = kb.for_(work.begin, work.end, 1, carry=chunks.initial_state())
        with loop as (j, s):
            origins = [_box_origin(kb, p, work, row_at, j * BN + i * cfg.box_rows) for i in range(cfg.boxes_per_tile)]
            for c, pipe in enumerate(chunks.pipes):
                pipe.producer_acquire(s)
                pipe.producer_commit(s, tx_bytes=BN * CHUNK * 2)
                for i, (page, row) in enumerate(origins):
                    dst = kb.gep(kv_smem, s.stage * tile_bytes + c * BN * SWIZZLE + i * cfg.box_rows * SWIZZLE, "i8")
                    fa4.tma_load(p["kv_cache"], dst, s.stage, [const(c * CHUNK), const(0), row, page],
                                 pipe=pipe.name, box=[CHUNK, 1, cfg.box_rows, 1], elem_bytes=2)
            loop.yield_(s.advance())


def _pairs(cs, cfg: MLADecodeConfig, w: int, bufs):
    from . import attention_mla_decode_sm90 as base
    work, p = cs.work, cs.p
    chunks = bufs[2]
    hidden0 = (p["seqlen_q"] - 1) * p["causal"]
    full = (work.length - hidden0).smax(0) // BN
    split = full.smax(work.begin).smin(work.end)
    plain_end = work.begin + ((split - work.begin) // 2) * 2         # unmasked pairs: [begin, plain_end)
    pair_end = plain_end + ((work.end - plain_end) // 2) * 2         # masked pairs, then (odd) one tile
    segments = ((work.begin, plain_end, True, False), (plain_end, pair_end, True, True),
                (pair_end, work.end, False, True))
    state = seesaw.run(cs, _Tiles(cfg, bufs), cfg.dtype, w, segments, seesaw.initial(cs, chunks))
    _, o, m, l = state
    base._write_rows(cs, cfg, o, m, seesaw.totals(cs, l))    # l = l_0 + l_1


def _tile(cs, bufs, s):
    """The stage of state s (Q's address re-read after a wait: attention_mla_decode_sm90, step 1)."""
    kb = cs.kb
    q_smem, kv_smem, _, q_slot = bufs
    q_at = kb.warp_uniform(kb.load(q_slot, "i32", align=4))
    return kb.gep(q_smem, q_at, "i8"), kb.gep(kv_smem, s.stage * MLADecodeConfig.tile_bytes() + q_at, "i8")


def _chunked_s(cs, bufs, s, dtype: str):
    """S = Q K^T over all 64 keys of the tile of state s, each 64-column chunk's four k16 steps issued
    once its ring's wait returned (note "Chunk rings"). Returns (S retired, the tile's address)."""
    kb = cs.kb
    chunks = bufs[2]
    acc = undef(("f32", cs.n_s))
    tile = None
    for c in range(QK_CHUNKS):
        chunks.wait(s, c)
        if tile is None:
            q_smem, tile = _tile(cs, bufs, s)
        fa4.mma_fence()     # after each wait (a branch): else ptxas inserts its own and serialises the wgmmas
        for within in range(CHUNK // WGMMA_K):
            off = within * WGMMA_K * 2
            a_d = fa4.smem_desc(kb.gep(q_smem, c * TILE_M * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16,
                                sbo=8 * SWIZZLE)
            b_d = fa4.smem_desc(kb.gep(tile, c * BN * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
            acc = Value(fa4.mma(a_d, b_d, const(int(c + within > 0), "i1"), [acc], result_types=[acc.type], m=64,
                                n=BN, k=WGMMA_K, a_source="smem", ab_dtype=dtype, acc_dtype="f32"))
    fa4.mma_commit_group()
    return wait_group(acc, pending=0), tile


def _zero_tail(cs, tile, j: Value, w: int):
    """The V rows past L_b of tile j in this warpgroup's columns (only the tile that holds L_b)."""
    from .attention_mla_decode_sm90 import _zero_v_tail
    kb = cs.kb
    valid = cs.work.length - j * BN
    with kb.if_(valid.slt(BN)).then_():
        _zero_v_tail(cs, kb.gep(tile, w * (WG_CHUNKS * BN * SWIZZLE), "i8"), valid)


__all__ = ["build_roles", "Chunks", "BAR_PA", "BAR_PB", "P_AT", "CHUNK"]
