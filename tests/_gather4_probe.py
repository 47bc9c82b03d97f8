"""A tiny sm_100a kernel that exercises fa4.tma_gather4 end to end (tests/test_tma_gather4.py and the
PTX lit test lit_tests/kernels/tma_gather4_ptx.py use it): one CTA, two warps.

* warp 0 (role "load"): one elected thread reads `num_rows` int32 row indices from `idx` and gathers
  those rows, `cols` bf16 columns, of the 2-D table (`table`: a descriptor whose box is 64 columns x
  1 row, 128-byte swizzle) into the tile `rows_smem` with common/gather4.gather4_tile (four rows of
  one 64-column chunk per copy, chunk c of all rows at 128 x num_rows x c), all completing on the one
  stage of pipeline `rows` (tx bytes from gather4_tile);
* warp 1 (role "copy"): waits for the stage, copies the shared image word by word to `out`, and
  releases the stage.

`out` thus holds the swizzled shared-memory image of the tile (the buffer is 1024-byte aligned, and
a 128B swizzle is a function of the address bits).
"""
from __future__ import annotations

from fa4mlir.dsl import KernelBuilder
from fa4mlir.kernels.common.gather4 import chunk_columns, gather4_tile, tile_bytes

DTYPE = "bf16"
COLS = chunk_columns(DTYPE)     # 64 columns per chunk: one 128-byte swizzle span
ROW_BYTES = 2 * COLS


def build(num_rows: int = 8, cols: int = COLS):
    kb = KernelBuilder(f"tma_gather4_probe_r{num_rows}_c{cols}", arch="sm_100a", block=(64, 1, 1))
    table = kb.param_tma("table", dtype=DTYPE, box=(COLS, 1), swizzle="128B")
    idx_gmem = kb.param_ptr("idx")
    out_gmem = kb.param_ptr("out")
    num_bytes = tile_bytes(num_rows, cols, DTYPE)
    with kb.body():
        rows_smem = kb.smem("rows_smem", num_bytes)
        rows = kb.pipeline("rows", num_stages=1, producer="load", consumers=["copy"], consumer_arrivals=32)
        kb.pipeline_init()
        with kb.warp_roles():
            with kb.role("load", first_warp=0, num_warps=1):
                with kb.if_(kb.elect_one()).then_():
                    s = rows.initial_state()
                    rows.producer_acquire(s)
                    row = [kb.load(kb.gep(idx_gmem, i, "i32"), "i32") for i in range(num_rows)]
                    tx = gather4_tile(kb, table, rows_smem, s.stage, row, pipe="rows", cols=cols, dtype=DTYPE)
                    rows.producer_commit(s, tx_bytes=tx)
            with kb.role("copy", first_warp=1, num_warps=1):
                s = rows.initial_state()
                rows.consumer_wait(s)
                lane = kb.thread_idx(0) % 32
                with kb.for_(0, num_bytes // 4 // 32) as (i, _):
                    word = lane + i * 32
                    kb.store(kb.load(kb.gep(rows_smem, word * 4, "i8"), "i32"), kb.gep(out_gmem, word, "i32"))
                rows.consumer_release(s)
    return kb.finish()
