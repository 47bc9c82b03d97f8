"""The converter warpgroup of the sm_90a sparse MLA decode over FlashMLA's FP8 cache with a rolling
prefetch (MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True, converter_prefetch=True); the FP8
variant "prefetch", opt-in: FA4MLIR_MLA_SPARSE_FP8_VARIANT=prefetch). Everything but the converter's
loop is attention_mla_sparse_sm90's note "FP8 converter" kernel (the consumers' tile step, the SMEM plan,
the setmaxnreg budgets 200 / 200 / 104); not built with the seesaw step (its converter spilled there).

Note "FP8 converter prefetch": the converter of note "FP8 converter" issues a trip's 8 rows of loads
and then waits for all of them before it converts: nothing is in flight while it converts and stores,
nor while it waits for a free tile buffer, and the next tile's first loads go out only after that wait
(an H200 profile: its samples are long-scoreboard stalls on those loads, the consumers' largest stall
is the wait for its tiles). Here the loads of a row go out two trips before its conversion, across the
tile boundary and the wait for the buffer:

    rows     warp w (of 4) converts rows w + 4 (4 q + u) of a tile, trip q < TRIPS (4), row u < ROWS (4):
             each lane its 16-byte latent piece (one coalesced 512-byte run a warp instruction)
    buffers  two trips' loads in registers, A (trips 0, 2) and B (1, 3), carried by the tile loop in
             fixed positions (the body converts trip q from buffer q % 2 and refills it with trip q + 2,
             the next tile's 0 and 1 for q = 2, 3: no register rotation between iterations, so no copy
             of a register whose load is still in flight); a buffer is 4 latent pieces (16 registers),
             the trip's scale word, its rope row's index and its validity mask (bit u: row u, bit 4:
             the lane's rope row)
    refill   per row: convert and store row u of the trip, then issue row u of the trip two ahead (its
             registers are the ones just freed): about 7 rows of loads stay in flight while the
             converter works
    indices  every lane loads each row's index itself (broadcast loads), trip 2's at the top of the
             tile, the others a trip before the refill that uses them; past the last tile of the
             indices row (the refills of the last tile) the tile's own indices are read again (in
             bounds) and their rows are invalid (offset 0: row 0 of the cache, loaded, never converted)

Note "Rope": the rope (bf16, copied as it is) never passes through registers: at trip q each lane
cp.asyncs 16 bytes, rope unit lane % 8 of the trip's row lane / 8, straight into the tile (16 zero bytes
for an invalid row), and cp.async.mbarrier.arrive (noinc) makes full[stage] wait for them too, as the
gather kernels' copies do.

Note "Shared scales": lane l loads one float32 scale, scale l % 4 of the trip's row (l / 4) % 4 (lanes
16-31 repeat 0-15); row u's conversion takes its piece's scale (group lane / 8) from lane 4 u + group by
four shuffles (fa4.shuffle_idx) and a select: one register a trip instead of one a row.

Note "Registers": the 104 registers of setmaxnreg hold two buffers (2 x 19), the tile's store bases and
the loop state. A row's loads address kv + its offset + a 32-bit per-lane offset (no 64-bit base per lane
lives through the loop); the index loads one 64-bit base a tile.

Note "Tile addresses": row warp + 4 k (k = 4 q + u) sits at row % 8 = warp + 4 (u % 2) of the swizzle; the
tile is 1024-byte aligned, so every latent store is one base (row warp, half 0) with the swizzle's bits
flipped (XOR 16 for the second 16-byte half, 64 and 512 more for an odd u: unit ^ 4, row + 4) plus an
immediate; the rope copies one more base.

Note "Schedules": ptxas fits the loop into 104 registers with no spill in each built kernel only with the
refill's scale word loaded after the trip's conversions, except with topk_length and a split, where it
must go before them (the other order spilled 4 bytes there, 12 to 20 bytes in the others): early_scale.
tests/test_mla_sparse_decode_fp8_prefetch.py compiles each and asserts no local memory.

An invalid row (index -1 or out of range, or at or past topk_length) is stored as zeros whatever its
loads returned (the select after the conversion: a NaN never reaches the tile), with bias -inf in the
tile's bias slot, as note "FP8 converter" does; the tile values, and so out and lse, are that kernel's
bit for bit. Each thread fences its stores to the async proxy before it arrives on full[stage].
"""
from __future__ import annotations

from ..dialect import builders as fa4
from ..dsl import Value, const, select
from .attention_mla_sparse_sm90_config import BN, MLASparseConfig
from .common import mla_fp8
from .common.mla_sm90 import NEG_INF, SWIZZLE

LANES = 32
WARPS = 4                           # the converter warpgroup
ROWS = LANES // mla_fp8.ROPE_UNITS  # 4 rows a trip: one rope unit a lane
TRIPS = BN // WARPS // ROWS         # 4 trips a tile per warp
AHEAD = 2                           # trips loaded ahead of the one converted: the buffers A and B
PIECE = 16


def early_scale(cfg) -> bool:
    """Note "Schedules": whether the kernel ``cfg`` loads a trip's refill scale word before its conversions."""
    return cfg.split and cfg.topk_length


def convert_role(kb, cfg, work, p, kv_smem, kv_pipe, bias_smem):
    """Note "FP8 converter prefetch": the prologue loads trips 0 and 1 of the first tile into A and B;
    per tile j: 1. wait for its buffer free; 2. per trip q, load the indices the next trip's refill
    needs, convert trip q from its buffer and refill it row by row with trip q + 2 (the next tile's for
    q >= 2); 3. fence the stores to the async proxy and arrive on full[stage]."""
    from .attention_mla_sparse_sm90 import CONVERTER_THREADS, _row_offset
    early = early_scale(cfg)
    t = kb.thread_idx(0) % CONVERTER_THREADS
    warp, lane = t // LANES, t % LANES
    zero = const(0, ("i32", 4))
    idx_at = work.token.to("i64") * p["indices_stride_s"]
    # a row's loads address kv + the row's offset + these (32-bit, per lane): no 64-bit base per lane lives
    # through the loop (note "Registers")
    piece_at = lane * PIECE                                                          # the lane's latent piece
    # note "Shared scales": lane l loads scale l % 4 of the trip's row (l / 4) % 4 (lanes 16-31 repeat 0-15), and
    # row u's conversion takes the scale of its piece's group (lane / 8) from lane 4 u + group: one register a
    # trip for the scales instead of one a row
    scale_row, scale_at = (lane // mla_fp8.NUM_SCALES) % ROWS, mla_fp8.SCALES_AT + mla_fp8.WORD * (lane % mla_fp8.NUM_SCALES)
    group = (lane * PIECE) // mla_fp8.SCALE_GROUP
    rope_unit, rope_of = lane % mla_fp8.ROPE_UNITS, lane // mla_fp8.ROPE_UNITS
    rope_at = mla_fp8.ROPE_AT + rope_unit * PIECE
    last_tile = p["topk"] // BN - 1       # the indices row's last tile (topk is a multiple of BN)
    # note "Tile addresses": row warp + 4 k (k = 4 q + u) sits at row % 8 = warp + 4 (u % 2) of the swizzle; the
    # tile is 1024-byte aligned, so every latent store is one base (row warp, half 0) with the swizzle's bits
    # flipped (XOR: 16 for the second 16-byte half, 64 and 512 more for an odd u: unit ^ 4, row + 4) plus an
    # immediate; the rope stores one more base
    lat_base = mla_fp8.tile_offset(warp, lane * PIECE, BN)
    rope_base = mla_fp8.tile_offset(warp + WARPS * rope_of, mla_fp8.NOPE + 8 * rope_unit, BN)

    def row_of(q: int, u):
        return warp + WARPS * (ROWS * q + u)

    def row_step(q: int, u: int) -> int:
        """Bytes from the row of (trip 0, u % 2) to the row of (q, u) in the swizzled tile."""
        return (WARPS * (ROWS * q + u) - WARPS * (u % 2)) * SWIZZLE

    def tile_indices(j: Value) -> Value:
        """This warp's first index of tile j (clamped into the indices row)."""
        return kb.gep(p["indices"], idx_at + (j.smin(last_tile) * BN + warp).to("i64"), "i32")

    def indices(at: Value, q: int, next_tile: Value | None = None) -> list:
        """Trip q's indices from the tile's `at` (broadcast loads), or with next_tile (in the loop: j + 1 <=
        the last tile) the next tile's, else this one's again (in bounds; its rows are then invalid)."""
        if next_tile is not None:
            at = kb.gep(at, select(next_tile, const(BN), const(0)), "i32")
        return [kb.load(kb.gep(at, WARPS * (ROWS * q + u), "i32"), "i32", align=4) for u in range(ROWS)]

    def placed(j: Value, q: int, u: int, index: Value) -> tuple:
        """Row u of trip q of tile j: (validity, index)."""
        return (j * BN + row_of(q, u)).slt(work.length) & index.sge(0) & index.slt(p["s_kv"]), index

    def picked(j: Value, q: int, idx: list, which: Value) -> tuple:
        """Row `which` (a per-lane Value < ROWS) of trip q of tile j: (validity, index)."""
        ok, index = placed(j, q, 0, idx[0])
        for u in range(1, ROWS):
            mine = which.eq(u)
            ok_u, index_u = placed(j, q, u, idx[u])
            ok, index = select(mine, ok_u, ok), select(mine, index_u, index)
        return ok, index

    def rope_placed(j: Value, q: int, idx: list) -> tuple:
        """The lane's rope row of trip q of tile j: (validity, index)."""
        return picked(j, q, idx, rope_of)

    def load_scale(j: Value, q: int, idx: list) -> Value:
        """Note "Shared scales": this lane's scale word of trip q of tile j."""
        row = kb.gep(p["kv"], offset(picked(j, q, idx, scale_row)), "i8")
        return kb.load(kb.gep(row, scale_at, "i8"), "f32", align=4)

    def row_scale(word: Value, u: int) -> Value:
        """Row u's scale for this lane's piece (its group's), from the lanes holding them."""
        scales = [kb.shuffle_idx(word, mla_fp8.NUM_SCALES * u + g) for g in range(mla_fp8.NUM_SCALES)]
        out = scales[0]
        for g in range(1, mla_fp8.NUM_SCALES):
            out = select(group.eq(g), scales[g], out)
        return out

    def offset(row: tuple) -> Value:
        """The row's byte offset, made at its load (_row_offset)."""
        return _row_offset(kb, p, *row, True)

    def load_row(off: Value) -> list:
        row = kb.gep(p["kv"], off, "i8")
        return [kb.load(kb.gep(row, piece_at, "i8"), ("i32", 4), align=16)]

    def copy_rope(stage_rope: Value, q: int, rope_index: Value, rope_ok: Value) -> None:
        """The lane's rope unit of trip q's rope row: cp.async straight into the tile (16 zero bytes where
        the row is invalid), no registers (note "Rope")."""
        src = kb.gep(kb.gep(p["kv"], _row_offset(kb, p, rope_ok, rope_index, True), "i8"), rope_at, "i8")
        fa4.cp_async(src, kb.gep(kv_smem, stage_rope + row_step(q, 0), "i8"), rope_ok)

    def add_bit(mask: Value | None, ok: Value, b: int) -> Value:
        """The trip's validities as one i32 (row u: bit u; the lane's rope row: bit ROWS)."""
        bit = ok.to("i32") << b if b else ok.to("i32")
        return bit if mask is None else mask | bit

    def valid_bit(mask: Value, b: int) -> Value:
        return (mask & (1 << b)).ne(0)

    def load_trip(j: Value, q: int, idx: list) -> list:
        out, mask = [], None
        for u in range(ROWS):
            row = placed(j, q, u, idx[u])
            out += load_row(offset(row))
            mask = add_bit(mask, row[0], u)
        rope_ok, rope_index = rope_placed(j, q, idx)
        return out + [load_scale(j, q, idx), rope_index, add_bit(mask, rope_ok, ROWS)]

    def convert_and_refill(tile, bias_slot, q: int, buf: list, fill: tuple, idx: list) -> list:
        """Trip q from `buf` into the tile (`tile`: the stage's two store bases, note "Tile addresses"; zeros
        for an invalid row; lane 0: the biases, `bias_slot` at this warp's first row), each row's registers
        refilled with trip `fill` = (tile, trip) right after its stores."""
        scale_word, rope_index, mask = buf[ROWS:]
        copy_rope(tile[1], q, rope_index, valid_bit(mask, ROWS))
        out, refill_mask = [], None
        scales = [row_scale(scale_word, u) for u in range(ROWS)] if early else [None] * ROWS
        scale_next = load_scale(*fill, idx) if early else None       # note "Schedules"
        for u in range(ROWS):
            scale = scales[u] if early else row_scale(scale_word, u)
            for h, unit in enumerate(mla_fp8.dequant_piece(buf[u], scale)):
                at = (tile[0] ^ (16 * h + 64 * (u % 2))) + (512 * (u % 2) + row_step(q, u))
                kb.store(select(valid_bit(mask, u), unit, zero), kb.gep(kv_smem, at, "i8"), align=16)
            row = placed(*fill, u, idx[u])
            out += load_row(offset(row))
            refill_mask = add_bit(refill_mask, row[0], u)
        rope_ok, rope_index = rope_placed(*fill, idx)
        out += [scale_next if early else load_scale(*fill, idx), rope_index, add_bit(refill_mask, rope_ok, ROWS)]
        with kb.if_(lane.eq(0)).then_():
            for u in range(ROWS):
                bias = select(valid_bit(mask, u), const(0.0, "f32"), const(NEG_INF, "f32"))
                kb.store(bias, kb.gep(bias_slot, WARPS * (ROWS * q + u) * 4, "i8"), align=4)
        return out

    begin = work.begin if isinstance(work.begin, Value) else const(work.begin)
    first = [load_trip(begin, q, indices(tile_indices(begin), q)) for q in range(AHEAD)]
    width = len(first[0])
    carry = (kv_pipe.initial_state(), *first[0], *first[1])
    loop = kb.for_(work.begin, work.end, 1, carry=carry)
    with loop as (j, (s, *held)):
        bufs = [list(held[:width]), list(held[width:2 * width])]
        idx_tile = tile_indices(j)
        has_next = j.slt(last_tile)
        nxt = indices(idx_tile, AHEAD)  # trip 2's, loaded here: carried, they cost a copy at the back edge that waits
        kv_pipe.producer_acquire(s)                                   # 1. the buffer is free
        stage_at = s.stage * MLASparseConfig.tile_bytes()
        tile = (stage_at + lat_base, stage_at + rope_base)       # byte offsets in kv_smem (note "Tile addresses")
        bias_slot = kb.gep(bias_smem, s.stage * (BN * 4) + warp * 4, "i8")
        for q in range(TRIPS):                                        # 2.
            fill = (j, q + AHEAD) if q + AHEAD < TRIPS else (j + 1, q + AHEAD - TRIPS)
            ahead = fill[1] + 1
            bufs[q % 2] = convert_and_refill(tile, bias_slot, q, bufs[q % 2], fill, nxt)
            if q + 1 < TRIPS:
                nxt = indices(idx_tile, ahead % TRIPS, has_next if fill[0] is not j or ahead >= TRIPS else None)
        fa4.cp_async_arrive(s.stage, pipe=kv_pipe.name)               # 3. the rope copies, as they land
        kb.fence("async_smem")
        kv_pipe.producer_commit(s)
        loop.yield_(s.advance(), *bufs[0], *bufs[1])


__all__ = ["convert_role", "ROWS", "TRIPS", "AHEAD"]
