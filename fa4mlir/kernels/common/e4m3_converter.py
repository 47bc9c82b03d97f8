"""The converter warpgroup of the sm_90a FP8 decode kernel (attention_decode_sm90, note
"Converter"; DecodeConfig.converter_stages > 0): warps 4-7 turn each e4m3 K_j, V_j pair of the
TMA rings into the f16 128B-swizzled pair the consumer's wgmmas read, into a ring of
converter_stages pairs (the pipeline `c_pipe`), so the conversion overlaps the consumer's GEMMs
and softmax of the tiles before instead of sitting between its waits and its GEMMs.

Per tile j of the split, each of the 128 converter threads: waits for K_j and V_j (k_pipe, v_pipe
full), acquires a free f16 pair (c_pipe empty: the consumer's wgmmas on it retired), converts its
slots of both tiles (e4m3_tile.emit_convert: the consumer's bank-conflict-free slot map, the same
exact fa4.cvt_e4m3x2; V rows at or past L_b written as zeros, in the tiles that hold L_b: note "NaN
past L_b"), fences its stores to the async proxy, commits the pair (c_pipe full: 128 arrivals, one
a thread, each after its own fence) and releases K_j and V_j (128 arrivals: each thread's e4m3
loads were consumed by its conversion before its arrive). Scales never touch the tiles (note
"FP8"): the conversion is the pure e4m3 -> f16 cvt (or, for the tiles in cfg.convert_bits, the integer
ops of e4m3_tile's note "Bit conversion", values x 2^-8, which the consumer's scales take back).
"""
from __future__ import annotations

from ...dsl import Value
from . import e4m3_tile

THREADS = e4m3_tile.THREADS       # one warpgroup
FIRST_WARP = 4                    # warps 4-7, behind the consumer warpgroup
# e4m3 loads in flight ahead of the piece being converted: the converter holds no accumulators, so
# every load of a tile pair goes first (a D128 bn64 pair is 8 pieces a thread: 32 registers)
LOADS_AHEAD = 8


def converter_role(kb, cfg, work, e4m3_smem: tuple, e4m3_pipes: tuple, staged: tuple, c_pipe) -> None:
    """The converter warpgroup's loop over the split's tiles [work.begin, work.end): tiles before
    L_b // bn hold no row past L_b (no zeroing), the rest do."""
    k_smem, v_smem = e4m3_smem
    k_pipe, v_pipe = e4m3_pipes
    k16_smem, v16_smem = staged
    t = kb.thread_idx(0) - 32 * FIRST_WARP
    full = (work.length // cfg.bn).smax(work.begin).smin(work.end)
    state = (k_pipe.initial_state(), c_pipe.initial_state())
    for lo, hi, masked in ((work.begin, full, False), (full, work.end, True)):
        loop = kb.for_(lo, hi, 1, carry=state)
        with loop as (j, (s, c)):
            _convert_tile(kb, cfg, work, t, j, s, c, (k_smem, v_smem), (k_pipe, v_pipe), (k16_smem, v16_smem),
                          c_pipe, masked)
            loop.yield_(s.advance(), c.advance())
        state = loop.results


def _convert_tile(kb, cfg, work, t: Value, j: Value, s, c, e4m3_smem, e4m3_pipes, staged, c_pipe, masked: bool):
    k_pipe, v_pipe = e4m3_pipes
    k_pipe.consumer_wait(s)
    v_pipe.consumer_wait(s)
    c_pipe.producer_acquire(c)
    at, to = s.stage * cfg.tile_bytes(), c.stage * cfg.staged_bytes()
    valid = work.length - j * cfg.bn if masked else None
    (k_smem, v_smem), (k16_smem, v16_smem) = e4m3_smem, staged
    e4m3_tile.emit_convert(kb, t, [(kb.gep(k_smem, at, "i8"), kb.gep(k16_smem, to, "i8"), None),
                                   (kb.gep(v_smem, at, "i8"), kb.gep(v16_smem, to, "i8"), valid)],
                           cfg.bn, cfg.head_dim, ahead=LOADS_AHEAD, bits=("k" in cfg.convert_bits, "v" in cfg.convert_bits))
    kb.fence("async_smem")
    c_pipe.producer_commit(c)
    k_pipe.consumer_release(s)
    v_pipe.consumer_release(s)
