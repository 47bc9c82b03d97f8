"""The seesaw schedule of the sparse MLA kernels on sm_90a (MLASparseConfig.seesaw /
MLASparseDecodeConfig.seesaw, opt-in, 16-bit kv): the roles of attention_mla_sparse_sm90 when `seesaw`
is set. The gather warp, Q's load, the score biases and the epilogues are that kernel's; the
consumers' tile step is FlashMLA's seesaw (common/mla_seesaw_sm90; its schedule note is
attention_mla_decode_seesaw_sm90's opening comment).

Note "FP8 converter": the FP8 decode's converter kernel (attention_mla_sparse_sm90, note "FP8
converter") takes the same consumers unsplit: its converter warpgroup is the ring's producer (128
arrivals, st.shared fenced to the async proxy before it commits, the biases in the tile's slot as the
gather writes them), setmaxnreg 200 / 104. Split, the consumers spilled at 200 (config: ConfigError).

The token's tiles [begin, end) go in pairs (a = j, b = j + 1): warpgroup 0 (role `mma0`) computes S of
tile a over all 64 keys, warpgroup 1 (`mma1`) S of tile b, each its own softmax with the tile's score
biases added (attention_mla_sparse_sm90, note "Bias": an invalid row's S is -inf, its V row zero, so no
tail needs zeroing); P of a tile rides in the tile's rope columns (512..575, the tile's ninth chunk,
which only that tile's S reads; the gather refills the stage only after both warpgroups released it),
the row maxima in x_smem. An odd tile count ends with one tile (mma0's S, both P V halves).

Note "Ring": one ring of STAGES = 2 tiles (kv_pipe), consumed by both roles (two arrivals a stage): a
pair holds both stages, so tile a' of the next pair is gathered once both warpgroups released a (mid
pair) and b' after the pair. The gather's cp.asyncs are generic-proxy writes: each warpgroup fences
(async_smem) after every wait before its wgmmas read the tile. Unlike the dense decode's TMA boxes, the
gather lands a tile's 64 rows whole (each lane's copies arrive once), so there are no chunk rings.

Note "Barriers": the gather warp owns named barrier 4 (attention_mla_sparse_sm90.BAR_GATHER), the
consumers' Q load and row-sum exchange 1 (common/mla_sm90.BAR_ALL); the pair handshakes are 5
(mma0 -> mma1: m_a, P_a) and 6 (mma1 -> mma0: m_b, P_b).

Note "Producer warpgroup" (producer_warps=4, 16-bit kv; attention_mla_sparse_sm90's note of that name): the
producer is that module's warpgroup (_gather_role_wg: 128 threads, 8 a row, setmaxnreg 72; the consumers 216)
and each stage's barriers are two pipelines, kv_pipe for K's columns 0..255 and kv_hi for 256..575 (the
rope columns, where P rides, are in kv_hi), both consumed by mma0 and mma1. _HalfTiles: S waits kv_pipe,
issues its first 16 wgmmas and commits them, waits kv_hi, fences wgmma and issues the other 20; wait_all
waits both; each warpgroup releases the half holding its V columns after its P V and the other half as soon
as it stops reading it (common/mla_seesaw_sm90's release_other hooks). This is
FlashMLA's whole sm90 sparse prefill recipe: seesaw consumers, a producer warpgroup, half stages.

Note "Pair fill" (pair_fill=True, with the producer warpgroup; the config's note of that name): FlashMLA's
order of a pair's halves, a's columns 0..255, b's 256..575, a's 256..575, b's 0..255 (its V0L, V1R, V0R,
V1L), so that warpgroup 1 starts S_b one half after warpgroup 0 starts S_a rather than a tile and a half.
Each ring is consumed in its stage order by every role (fa4-verify-pipelines), so tile b's halves swap
rings: kv_pipe holds a's 0..255 (stage 0) and b's 256..575 (stage 1), kv_hi a's 256..575 and b's 0..255
(_HalfTiles._ring), and the producer (_gather_role_pairs: both tiles' rows looked up first, 8 a thread,
as indices and a word of validity bits: 64-bit offsets and 8 predicates spilled at setmaxnreg 72) fills
kv_pipe a, kv_pipe b, kv_hi a, kv_hi b; both tiles' biases go with the first (FlashMLA writes both tiles'
validity once a pair; with each tile's own first half the producer spilled), thread u of a row's 8 the bias
of the pair's row u (a's rows 0-3, b's 4-7): b's slot is free then, since
kv_pipe a is released by mma0 only after it received P_b of the round before, which mma1 publishes after
reading b's biases, and mma1 waits for kv_pipe a before S_b. An odd count's last tile (stage 0) as
_gather_role_wg. Warpgroup 1 (s_pair_b) waits for a's 0..255 (filled first) and
releases it at once (it reads none of it), waits for b's 256..575, issues S_b's 20 wgmmas over it and
commits them, then waits for a's 256..575 (P_a, its V) and b's 0..255 and issues the other 16. Both
warpgroups release b's other half after their release of a (each ring's releases in its order: a's
before b's). Every half keeps two releases, each after that role's wait of it; no wait of a round needs
a half of the next, so the order cannot deadlock. P_b rides in b's columns 512..575, now on kv_pipe, which
the producer refills before b's half 0..255 (the default order refills it after, so mma0's release of
that half, after its P_b V, ordered its warps' loads of P_b before the refill): warpgroup 0 syncs its
four warps (BAR_WG, 128 threads) after those loads before its leader releases b's kv_pipe half (the
interpreter's race check found the refill unordered without it).

Note "Overlap" (overlap_s=True, on the pair fill; OVERLAP_VARIANT, SPARSE_DEFAULT_RULE's prefill; FlashMLA's sm90 sparse
prefill, phase1.cuh, warpgroup 0's loop): warpgroup 0 issues S of the next pair's tile a right after its P_b V, before
that P V retires: it waits for a's half 0..255 (kv_pipe, the producer's first fill of a pair, free once both warpgroups
released the pair's a 0..255, which both do before P_b V), issues S_a's 16 wgmmas over it and commits them, retires P_b
V (wait_group 1: S_a's group still in flight) and releases b's half 0..255 (its V, kv_hi), then waits for a's half
256..575 (kv_hi), issues the other 20 and retires S_a, which the loop carries to the next pair's softmax. So the tensor
pipe goes from P_b V straight into the next S_a rather than through wait, release, the loop's next wait and issue. The
loop over pairs (common/mla_seesaw_sm90.pairs_ahead) runs every pair but the last; S_a of the first pair is issued
before it and the last pair (peeled) does not issue ahead, all under an scf.if on there being a pair, which yields the
count of tiles used (2 a pair, carried by the loop: fa4-verify-pipelines follows a ring through the if by it) and the
ring state is kv_pipe.state_at of that count; an odd count's last tile is step0's, as before. No wait of the overlap
needs a half the producer fills after one this warpgroup releases later (a's 0..255 comes first in the pair's order, its
256..575 needs only the previous pair's releases of a), so the order cannot deadlock. Warpgroup 1, the producer, the
algebra and the wgmmas' accumulation order are the pair fill's: the output is the pair fill's bit for bit (the
interpreter test checks it). Registers: S_a's 32 accumulators in flight beside O's 128 and P_b's 16 fragments (P_b V
reads them from registers) fit setmaxnreg 216 with no spill.

(The pair fill's "Pair max" handshakes and "Producer fence", variants seesaw_pairmax, seesaw_overlap_pairmax and
seesaw_overlap_pfence, were timed and rejected: notes/RESULTS.md [R-mla-sparse-pairmax-timed], [R-mla-sparse-pfence].)

Note "Work" (ptxas 12.x, deviceless; what the compile tests check, not a principle): the consumers derive
the token's work item in their roles (as the dense seesaw's do: a value made before the role split and
live across setmaxnreg spilled there). The gather warp (24 registers) spills 4 to 12 bytes, depending on
the config, with one or the other placement of its copy: derived in its role, the prefill with
topk_length spilled 12 bytes and the unsplit decode with topk_length 4; made before the role split (the
default kernel's placement), the split decode spilled 8 with or without topk_length. gather_owns_work
picks the placement that compiles clean for each of the eight 16-bit configs (tests/test_mla_sparse_seesaw.py
compiles all eight).
"""
from __future__ import annotations

from ..dsl import const, select
from ..dialect import builders as fa4
from .attention_mla_sparse_sm90_config import (BN, CONSUMERS, HALF_CHUNKS, LOAD_REGS, MMA_REGS, STAGES, MLASparseConfig,
                                               MLASparseDecodeConfig)
from .common import mla_seesaw_sm90 as seesaw
from .common.mla_sm90 import BAR_WG, CHUNK, NEG_INF, QK_CHUNKS, SWIZZLE, UNITS, ConsumerGeometry, issue_s
from .common.wgmma import wait_group

BAR_PA = 5      # mma0 -> mma1 (note "Barriers")
LO, HI = range(HALF_CHUNKS), range(HALF_CHUNKS, QK_CHUNKS)     # a stage's halves' column chunks
BAR_PB = 6      # mma1 -> mma0


class _Tiles(seesaw.Tiles):
    """The sparse kernels' side of the schedule: one ring the gather fills (note "Ring"), the score biases."""
    bar_pa, bar_pb = BAR_PA, BAR_PB

    def __init__(self, kb, bufs, dtype: str):
        self.kb = kb
        self.q_smem, self.kv_smem, self.kv_pipe, self.q_slot, self.bias_smem = bufs
        self.dtype = dtype

    def _q_at(self, cs):
        """q_slot's 0 (re-read after each wait: the tile's address is not hoisted; the decode's _kv_tile)."""
        return cs.kb.warp_uniform(cs.kb.load(self.q_slot, "i32", align=4))

    def wait_all(self, st):
        self.kv_pipe.consumer_wait(st)
        self.kb.fence("async_smem")     # note "Ring": the gather's cp.asyncs, read by P V's wgmmas

    def tile(self, cs, st):
        return cs.kb.gep(self.kv_smem, st.stage * MLASparseConfig.tile_bytes() + self._q_at(cs), "i8")

    def s(self, cs, st):
        kb = cs.kb
        self.kv_pipe.consumer_wait(st)
        kb.fence("async_smem")
        q_at = self._q_at(cs)
        q_smem = kb.gep(self.q_smem, q_at, "i8")
        tile = kb.gep(self.kv_smem, st.stage * MLASparseConfig.tile_bytes() + q_at, "i8")
        return wait_group(issue_s(cs, q_smem, tile, self.dtype), pending=0), tile

    def release(self, st, b: bool = False):
        self.kv_pipe.consumer_release(st)

    def mask(self, cs, j, st):
        from .attention_mla_sparse_sm90 import _bias_mask
        return _bias_mask(cs, self.bias_smem, st.stage)


class _HalfTiles(_Tiles):
    """Note "Producer warpgroup": a stage's columns 0..255 on kv_pipe, 256..575 on kv_hi. Warpgroup w's V
    columns are in one half (w = 0: kv_pipe, 1: kv_hi), released after its P V (`release`); the other half it
    releases as soon as it stops reading it (`release_other`: mma0 after S_a and P_a's publication, after
    reading P_b; mma1 at once for tile a, after S_b and its biases for tile b), so the producer refills each
    half once its last reader is done, FlashMLA's per-half free barriers. Note "Pair fill": tile b's halves
    swap rings (`_ring`), and warpgroup 1 issues S_b by s_pair_b."""

    def __init__(self, kb, bufs, dtype: str, kv_hi, w: int, pair_fill: bool = False, overlap_s: bool = False):
        super().__init__(kb, bufs, dtype)
        self.kv_hi = kv_hi
        self.w = w
        self.pair_fill = pair_fill
        self.overlap_s = overlap_s

    def _ring_fence(self):
        """After a ring wait, before the wgmmas read the half: fence.proxy.async (note "Ring")."""
        self.kb.fence("async_smem")

    def _ring(self, hi: bool, b: bool):
        """The ring of a tile's half (hi: columns 256..575); note "Pair fill": tile b's halves swapped."""
        return self.kv_hi if hi != (b and self.pair_fill) else self.kv_pipe

    def wait_all(self, st):
        self.kv_pipe.consumer_wait(st)
        self.kv_hi.consumer_wait(st)
        self._ring_fence()

    def s(self, cs, st):
        kb = cs.kb
        self.kv_pipe.consumer_wait(st)
        self._ring_fence()
        q_at = self._q_at(cs)
        q_smem = kb.gep(self.q_smem, q_at, "i8")
        tile = kb.gep(self.kv_smem, st.stage * MLASparseConfig.tile_bytes() + q_at, "i8")

        def second_half():      # the first half's wgmmas as a group, the wait, wgmma.fence (ptxas C7519 without)
            fa4.mma_commit_group()
            self.kv_hi.consumer_wait(st)
            self._ring_fence()
            fa4.mma_fence()
        return wait_group(issue_s(cs, q_smem, tile, self.dtype, at_chunk=(HALF_CHUNKS, second_half)), pending=0), tile

    def s_pair_b(self, cs, sa, sb):
        """Note "Pair fill", warpgroup 1: a's half 0..255 waited for and released (it reads none of it; kv_pipe's
        order), b's 256..575 waited for, S_b's 20 wgmmas over it issued and committed; a's half 256..575 (P_a and
        this warpgroup's V, kv_hi's order) and b's 0..255 waited for, wgmma fenced, the other 16 issued."""
        kb = cs.kb
        self.kv_pipe.consumer_wait(sa)
        with kb.if_(cs.is_leader).then_():
            self.kv_pipe.consumer_release(sa)
        self.kv_pipe.consumer_wait(sb)
        self._ring_fence()
        q_at = self._q_at(cs)
        q_smem = kb.gep(self.q_smem, q_at, "i8")
        tile = kb.gep(self.kv_smem, sb.stage * MLASparseConfig.tile_bytes() + q_at, "i8")

        def second_half():
            fa4.mma_commit_group()
            self.kv_hi.consumer_wait(sa)
            self.kv_hi.consumer_wait(sb)
            self._ring_fence()
            fa4.mma_fence()
        acc = issue_s(cs, q_smem, tile, self.dtype, at_chunk=(0, second_half), first_chunk=HALF_CHUNKS)
        return wait_group(acc, pending=0), tile

    def s_next(self, cs, sa, sb, o):
        """Note "Overlap", warpgroup 0: with P_b V (o) in flight, the next pair's a half 0..255 waited for and
        S_a's 16 wgmmas over it issued and committed; P_b V retired (one group pending) and b's half 0..255 (this
        warpgroup's V) released; a's half 256..575 waited for, wgmma fenced, the other 20 issued; S_a retired.
        Returns (S_a, O)."""
        kb = cs.kb
        self.kv_pipe.consumer_wait(sa)
        self._ring_fence()
        q_at = self._q_at(cs)
        q_smem = kb.gep(self.q_smem, q_at, "i8")
        tile = kb.gep(self.kv_smem, sa.stage * MLASparseConfig.tile_bytes() + q_at, "i8")
        retired = []

        def second_half():
            fa4.mma_commit_group()
            retired.append(wait_group(o, pending=1))
            with kb.if_(cs.is_leader).then_():
                self.release(sb, b=True)
            self.kv_hi.consumer_wait(sa)
            self._ring_fence()
            fa4.mma_fence()
        acc = issue_s(cs, q_smem, tile, self.dtype, at_chunk=(HALF_CHUNKS, second_half))
        return wait_group(acc, pending=0), retired[0]

    def release(self, st, b: bool = False):
        self._ring(self.w == 1, b).consumer_release(st)

    def release_other(self, cs, st, b: bool = False):
        if self.pair_fill and b and self.w == 0:    # note "Pair fill": every warp's loads of P_b before the arrival
            cs.kb.named_barrier(BAR_WG, 128)
        with cs.kb.if_(cs.is_leader).then_():
            self._ring(self.w == 0, b).consumer_release(st)


def build_roles(kb, cfg, p, bufs, x_smem, rows_smem):
    """kv_pipe (two consumer roles), then roles mma0 and mma1 (Q's load, the pair loops, the epilogue)
    and the producer: the gather warp (attention_mla_sparse_sm90._gather_role, unchanged) or the FP8
    converter warpgroup (convert_role, unchanged: note "FP8 converter")."""
    from . import attention_mla_sparse_sm90 as base
    q_smem, kv_smem, _, q_slot, bias_smem = bufs
    conv = getattr(cfg, "fp8_converter", False)
    pwg = cfg.producer_warps == 4       # note "Producer warpgroup"
    kv_hi = None
    if pwg:
        kv_pipe, kv_hi = (kb.pipeline(name, num_stages=STAGES, consumers=["mma0", "mma1"], consumer_arrivals=CONSUMERS,
                                      producer="gather", producer_arrivals=base.PRODUCER_THREADS)
                          for name in ("kv_pipe", "kv_hi"))
    else:
        producer = dict(producer="convert", producer_arrivals=base.CONVERTER_THREADS) if conv else \
            dict(producer="gather", producer_arrivals=base.GATHER_LANES)
        kv_pipe = kb.pipeline("kv_pipe", num_stages=STAGES, consumers=["mma0", "mma1"], consumer_arrivals=CONSUMERS,
                              **producer)
    kb.pipeline_init()
    bufs = (q_smem, kv_smem, kv_pipe, q_slot, bias_smem)
    # note "Work": the consumers derive the work item in their roles; the gather derives its own where
    # GATHER_OWNS_WORK says, else takes one made before the role split
    own = gather_owns_work(cfg) or pwg
    gather_work = None if own else base._Work(kb, cfg, p)
    mma_regs, load_regs = cfg.regs if conv or pwg else (MMA_REGS, LOAD_REGS)
    with kb.warp_roles():
        for w in (0, 1):
            with kb.role(f"mma{w}", first_warp=4 * w, num_warps=4, regs=mma_regs):
                _consumer(kb, cfg, base._Work(kb, cfg, p), p, bufs, x_smem, w, kv_hi)
        if pwg:
            with kb.role("gather", first_warp=4 * CONSUMERS, num_warps=base.PRODUCER_THREADS // 32, regs=load_regs):
                gather = _gather_role_pairs if cfg.pair_fill else base._gather_role_wg
                gather(kb, base._Work(kb, cfg, p), p, kv_smem, (kv_pipe, kv_hi), bias_smem)
            return
        if conv:
            with kb.role("convert", first_warp=4 * CONSUMERS, num_warps=4, regs=load_regs):
                base.convert_role(kb, base._Work(kb, cfg, p), p, kv_smem, kv_pipe, bias_smem)
            return
        with kb.role("gather", first_warp=4 * CONSUMERS, num_warps=1, regs=LOAD_REGS):
            work = base._Work(kb, cfg, p) if own else gather_work
            base._gather_role(kb, work, p, kv_smem, kv_pipe, bias_smem, rows_smem)


def gather_owns_work(cfg) -> bool:
    """note "Work": whether the gather warp derives the work item in its role (the split decode, the
    unsplit decode without topk_length) or takes one made before the role split (the others)."""
    decode = isinstance(cfg, MLASparseDecodeConfig)
    return decode and (cfg.split or not cfg.topk_length)


def _consumer(kb, cfg, work, p, bufs, x_smem, w: int, kv_hi=None):
    """Warpgroup w: Q, the pairs of [begin, end) then (odd) the last tile, l = l_0 + l_1, the epilogue."""
    from . import attention_mla_sparse_sm90 as base
    cs = ConsumerGeometry(kb, False, p["scale_log2"], x_smem)     # S of all 64 keys of a tile
    cs.wg = const(w)
    q_smem, _, kv_pipe, q_slot, _ = bufs
    base._load_q(cs, work, p, q_smem, q_slot, cfg.dtype)
    pair_end = work.begin + ((work.end - work.begin) // 2) * 2
    segments = ((work.begin, pair_end, True, True), (pair_end, work.end, False, True))
    tiles = _Tiles(kb, bufs, cfg.dtype) if kv_hi is None else \
        _HalfTiles(kb, bufs, cfg.dtype, kv_hi, w, cfg.pair_fill, cfg.overlap_s)
    _, o, m, l = seesaw.run(cs, tiles, cfg.dtype, w, segments, seesaw.initial(cs, kv_pipe))
    totals = seesaw.totals(cs, l)
    if work.decode:
        base._decode_epilogue(cs, cfg, work, p, o, m, l, totals=totals)
    else:
        base._epilogue(cs, cfg, work, p, o, m, l, totals=totals)


def _gather_role_pairs(kb, work, p, kv_smem, pipes, bias_smem):
    """Note "Pair fill": the producer warpgroup (attention_mla_sparse_sm90._gather_role_wg's threads, rows and
    copies) over the pairs of [begin, end): both tiles' rows looked up first, then the halves a lo, b hi, a hi,
    b lo, each after waiting for it to be free, both tiles' biases with the first; an odd count's last tile lo
    (with its biases) then hi."""
    from . import attention_mla_sparse_sm90 as base
    t = kb.thread_idx(0) % base.PRODUCER_THREADS
    group, unit = t // UNITS, t % UNITS
    tile_bytes = MLASparseConfig.tile_bytes()
    idx_row = kb.gep(p["indices"], work.token.to("i64") * p["indices_stride_s"], "i32")
    kv_unit = kb.gep(p["kv"], unit * 8, "bf16")    # this thread's 16-byte unit of row 0
    lo, hi = pipes      # kv_pipe, kv_hi: tile a's halves 0..255 and 256..575, tile b's swapped

    per_tile = BN // base.GROUPS        # 4 rows a thread a tile

    def rows_of(j, first_bit: int = 0):
        """1. this thread's rows of tile j: position -> index -> validity, as (row, index (0 when invalid; its
        element offset is formed where each half is filled), bit), and the validities as bits of one word
        (row i: bit first_bit + i; a pair's two tiles share one word), tested again where each half is filled:
        ptxas hoists the second tile's index loads above the first fill, and with 64-bit offsets and 8
        predicates live over a pair's fills the producer spilled at setmaxnreg 72."""
        rows, valid_bits = [], const(0)
        for i in range(per_tile):
            r = group + base.GROUPS * i
            pos = j * BN + r
            index = kb.load(kb.gep(idx_row, pos, "i32"), "i32", align=4)
            valid = pos.slt(work.length) & index.sge(0) & index.slt(p["s_kv"])
            valid_bits = valid_bits | select(valid, const(1 << (first_bit + i)), const(0))
            rows.append((r, select(valid, index, const(0)), first_bit + i))
        return rows, valid_bits

    # the biases: a group's 8 threads hold the same 8 rows of a pair (bits 0..7), thread `unit` writes the bias
    # of bit `unit` (row group + 16 (unit % 4) of tile unit // 4): one store each, no branch (unit-0 threads
    # writing all 8 behind a branch spilled with topk_length)
    if UNITS != 2 * per_tile:
        raise AssertionError(f"the pair fill's bias stores need 2 x {per_tile} units a row, got {UNITS}")
    bias_row = group + base.GROUPS * (unit % per_tile)

    def store_bias(stage, valid_bits):
        ok = (valid_bits & (const(1) << unit)).ne(0)
        bias = select(ok, const(0.0, "f32"), const(NEG_INF, "f32"))
        kb.store(bias, kb.gep(bias_smem, (stage * BN + bias_row) * 4, "i8"), align=4)

    def fill(pipe, s, rows, valid_bits, chunks, biases=None):
        """2. one half (chunks LO or HI) of the tile of `rows` on ring `pipe`: wait until free, `biases()` (the
        bias stores that go with this half), the copies, arrive when landed, commit."""
        pipe.producer_acquire(s)
        if biases is not None:
            biases()
        base_at = kb.gep(kv_smem, s.stage * tile_bytes, "i8")
        for r, index, bit in rows:
            ok = (valid_bits & (1 << bit)).ne(0)
            src = kb.gep(kv_unit, index.to("i64") * p["kv_stride_s"], "bf16")
            dst = kb.gep(base_at, r * SWIZZLE + (unit ^ (r % 8)) * 16, "i8")
            for c in chunks:
                fa4.cp_async(kb.gep(src, c * CHUNK, "bf16"), kb.gep(dst, c * BN * SWIZZLE, "i8"), ok)
        fa4.cp_async_arrive(s.stage, pipe=pipe.name)
        pipe.producer_commit(s)

    pair_end = work.begin + ((work.end - work.begin) // 2) * 2
    loop = kb.for_(work.begin, pair_end, 2, carry=lo.initial_state())
    with loop as (j, sa):
        sb = sa.advance()
        (rows_a, bits_a), (rows_b, bits_b) = rows_of(j), rows_of(j + 1, per_tile)
        bits = bits_a | bits_b
        fill(lo, sa, rows_a, bits, LO, biases=lambda: store_bias(select(unit.slt(per_tile), sa.stage, sb.stage), bits))
        fill(lo, sb, rows_b, bits, HI)
        fill(hi, sa, rows_a, bits, HI)
        fill(hi, sb, rows_b, bits, LO)
        loop.yield_(sb.advance())
    tail = kb.for_(pair_end, work.end, 1, carry=loop.results)
    with tail as (j, s):
        rows, bits = rows_of(j)

        def tail_biases():      # threads 0-3 of a group: the tile's 4 rows
            with kb.if_(unit.slt(per_tile)).then_():
                store_bias(s.stage, bits)
        fill(lo, s, rows, bits, LO, biases=tail_biases)
        fill(hi, s, rows, bits, HI)
        tail.yield_(s.advance())


__all__ = ["build_roles", "BAR_PA", "BAR_PB", "gather_owns_work"]
