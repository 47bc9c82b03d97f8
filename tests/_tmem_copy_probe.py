"""A tiny sm_100a kernel of one CTA that exercises one tcgen05.cp form (fa4.tmem_copy) end to end
(tests/test_tmem_copy.py): role "load" (warp 4) TMA-loads a 128 x 64 bf16 tile (128-byte swizzle,
K-major: the canonical layout of an MMA operand) into SMEM; role "copy" (warp 5), one thread, waits
for it and issues tcgen05.cp of `shape`.`multicast` from the descriptor at byte `offset` into the tile
(a slice of the rows' columns, as FlashMLA's Q copies step through a tile) to TMEM column 0, then
commits it (tcgen05.commit) to the epilogue; role "epilogue" (warps 0-3) reads its lane's `columns`
TMEM columns (tcgen05.ld 32x32b) and stores them as 32-bit words to row `lane` of `out` (128 x
columns). Every modelled form writes all 128 lanes (its rows times its copies).
"""
from __future__ import annotations

from fa4mlir.dialect import builders as fa4
from fa4mlir.dsl import KernelBuilder, const
from fa4mlir.kernels.common import tcgen05

DTYPE = "bf16"
ROWS, COLS = 128, 64            # the tile: 128 rows of 128 bytes
SW = 128
COLUMNS = {"128x256b": 8, "128x128b": 4, "64x128b": 4, "32x128b": 4, "4x256b": 8}


BUGS = ("copy_unwaited", "read_unwaited")


def build(shape: str, multicast: str | None, offset: int, bug: str | None = None):
    """`bug` seeds a protocol error: "copy_unwaited" (the copy does not wait for the tile's TMA load),
    "read_unwaited" (the epilogue reads TMEM without waiting for the copy's commit)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug {bug!r}: one of {BUGS}")
    columns = COLUMNS[shape]
    tag = (multicast or "").replace("::", "_")
    kb = KernelBuilder(f"tmem_copy_probe_{shape}_{tag}_o{offset}" + (f"_{bug}" if bug else ""), arch="sm_100a", block=(192, 1, 1))
    src = kb.param_tma("src", dtype=DTYPE, box=(COLS, ROWS), swizzle="128B")
    out = kb.param_ptr("out")
    tile_bytes = ROWS * COLS * 2
    with kb.body():
        tile = kb.smem("tile", tile_bytes, align=1024)
        tmem_slot = kb.smem("tmem_slot", 16, align=16)
        ld = kb.pipeline("ld", num_stages=1, producer="load", consumers=["copy"])
        t = kb.pipeline("t", num_stages=1, producer="copy", consumers=["epilogue"], consumer_arrivals=128)
        warp = kb.thread_idx(0) // 32
        with kb.if_(warp.eq(0)).then_():
            fa4.tmem_alloc(tmem_slot, cols=32)
            fa4.tmem_relinquish()
        kb.pipeline_init()
        kb.fence("tcgen05_before")
        kb.sync_threads()
        kb.fence("tcgen05_after")
        tmem = kb.load(tmem_slot, "i32")
        with kb.warp_roles():
            with kb.role("load", first_warp=4, num_warps=1):
                with kb.if_(kb.elect_one()).then_():
                    s = ld.initial_state()
                    ld.producer_acquire(s)
                    fa4.tma_load(src, tile, s.stage, [const(0), const(0)], pipe="ld", box=[COLS, ROWS], elem_bytes=2)
                    ld.producer_commit(s, tx_bytes=tile_bytes)
            with kb.role("copy", first_warp=5, num_warps=1):
                with kb.if_(kb.elect_one()).then_():
                    s, st = ld.initial_state(), t.initial_state()
                    t.producer_acquire(st)
                    if bug != "copy_unwaited":
                        ld.consumer_wait(s)
                    kb.fence("tcgen05_after")
                    desc = fa4.smem_desc(kb.gep(tile, offset, "i8"), swizzle=SW, lbo=16, sbo=8 * SW)
                    fa4.tmem_copy(tmem, desc, shape=shape, **({"multicast": multicast} if multicast else {}))
                    t.mma_commit(st, side="full")
                    ld.mma_commit(s, side="empty")
            with kb.role("epilogue", first_warp=0, num_warps=4):
                lane = kb.thread_idx(0) % 128
                s = t.initial_state()
                if bug != "read_unwaited":
                    t.consumer_wait(s)
                kb.fence("tcgen05_after")
                vals = tcgen05.tmem_load(tmem + tcgen05.lane_base(kb), columns)
                fa4.tmem_wait(kind="ld")
                row = kb.gep(out, lane * columns * 4, "i8")
                for c in range(columns):
                    kb.store(vals[c], kb.gep(row, c * 4, "i8"))
                t.consumer_release(s)
        kb.fence("tcgen05_before")
        kb.sync_threads()
        with kb.if_(warp.eq(0)).then_():
            kb.fence("tcgen05_after")
            fa4.tmem_dealloc(tmem, cols=32)
    return kb.finish()
