"""A tiny sm_100a kernel that exercises fa4.tma_gather4 end to end (tests/test_tma_gather4.py and the
PTX lit test lit_tests/kernels/tma_gather4_ptx.py use it): one CTA, two warps.

* warp 0 (role "load"): one elected thread reads `num_rows` int32 row indices from `idx` and gathers
  those rows of the 2-D bf16 table (`table`: a descriptor whose box is 64 columns x 1 row, 128-byte
  swizzle) into `rows_smem`, four rows per `fa4.tma_gather4`, all completing on the one stage of
  pipeline `rows` (tx bytes derived from the copies);
* warp 1 (role "copy"): waits for the stage and copies the shared image word by word to `out`, then
  releases the stage.

`out` thus holds the swizzled shared-memory image of the gathered rows: row i at bytes
[128 i, 128 (i + 1)), byte b of it at swizzle(128 i + b) (a 128B swizzle is a function of the
address bits; the buffer is 1024-byte aligned).
"""
from __future__ import annotations

from fa4mlir.dialect import builders as fa4
from fa4mlir.dsl import KernelBuilder, const

COLS = 64                 # bf16 columns per row: one 128-byte swizzle span
ROW_BYTES = COLS * 2
ROWS_PER_GATHER = 4       # .tile::gather4 (PTX ISA 5.5.3.4)


def build(num_rows: int = 8):
    if num_rows % ROWS_PER_GATHER:
        raise ValueError(f"num_rows={num_rows}: gather4 copies rows four at a time")
    kb = KernelBuilder(f"tma_gather4_probe_r{num_rows}", arch="sm_100a", block=(64, 1, 1))
    table = kb.param_tma("table", dtype="bf16", box=(COLS, 1), swizzle="128B")
    idx_gmem = kb.param_ptr("idx")
    out_gmem = kb.param_ptr("out")
    with kb.body():
        rows_smem = kb.smem("rows_smem", num_rows * ROW_BYTES)
        rows = kb.pipeline("rows", num_stages=1, producer="load", consumers=["copy"], consumer_arrivals=32)
        kb.pipeline_init()
        with kb.warp_roles():
            with kb.role("load", first_warp=0, num_warps=1):
                with kb.if_(kb.elect_one()).then_():
                    s = rows.initial_state()
                    rows.producer_acquire(s)
                    for g in range(num_rows // ROWS_PER_GATHER):
                        row = [kb.load(kb.gep(idx_gmem, g * ROWS_PER_GATHER + i, "i32"), "i32")
                               for i in range(ROWS_PER_GATHER)]
                        fa4.tma_gather4(table, kb.gep(rows_smem, g * ROWS_PER_GATHER * ROW_BYTES, "i8"), s.stage,
                                        const(0), *row, pipe="rows", box=[COLS, 1], elem_bytes=2)
                    rows.producer_commit(s, tx_bytes=num_rows * ROW_BYTES)
            with kb.role("copy", first_warp=1, num_warps=1):
                s = rows.initial_state()
                rows.consumer_wait(s)
                lane = kb.thread_idx(0) % 32
                for i in range(num_rows * ROW_BYTES // 4 // 32):
                    word = lane + 32 * i
                    kb.store(kb.load(kb.gep(rows_smem, word * 4, "i8"), "i32"), kb.gep(out_gmem, word, "i32"))
                rows.consumer_release(s)
    return kb.finish()
