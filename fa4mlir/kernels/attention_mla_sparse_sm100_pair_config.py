"""Sparse MLA prefill on sm_100a as a CTA pair (attention_mla_sparse_sm100_pair): configuration, resource
plans, launch contract (MLIR-free). Semantics and tensors are attention_mla_sparse_sm100's (its config's
docstring): q [s_q, h_q, 576], kv [s_kv, 576], indices [s_q, topk] int32 (< 0, >= s_kv or a position >=
topk_length[token] invalid), out [s_q, h_q, 512], lse and max_logits [s_q, h_q] (natural units).

Note "Pair" (FlashMLA's csrc/sm100/prefill/sparse/fwd/head128, config.h and phase1.cuh, read for facts).
A cluster of two CTAs per token runs the pair's MMAs (cta_group::2, M = 128: data-path Layout B,
interpret/ops/pair.py note "pair layouts"). Per top-k block of B_TOPK = 128 positions:
* S = Q K^T: CTA r holds the B_H / 2 = 64 head rows [64 r, 64 r + 64) of Q (its first Q_SMEM_COLS
  columns in SMEM, its last Q_TMEM_COLS in TMEM, copied there by tcgen05.cp 64x128b.warpx2::02_13
  cta_group 2 so each row sits in both lane halves) and gathers the 64 K rows of positions
  [64 r, 64 r + 64) of the block; its TMEM lane l < 64 gets S[64 r + l, 0:64], lane 64 + l
  S[64 r + l, 64:128] (64 TMEM columns).
* O += P V: P (bf16, CTA r's 64 rows x 128 positions) in SMEM; B = V with N = 256 per MMA, CTA r
  supplying V's columns [256 r + 128 i, + 128) for MMA i = 0, 1 of ALL 128 positions (a second gather of
  the block's rows, columns [256 r, 256 r + 256)): lane l < 64 gets O[64 r + l, 0:256], lane 64 + l
  O[64 r + l, 256:512] (256 TMEM columns).
TMEM (both CTAs): O 0-256, S 256-320, Q 320-512. SMEM: Q's SMEM part (24 KiB), one K stage (72 KiB,
whose first fill stages Q's TMEM part), one V stage (64 KiB), P (16 KiB), the row-max exchange.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .common.mla_sparse_sm100_fields import DTYPE, SparseSm100Fields, sparse_launch_args
from .common.tmem import TMEM_COLUMNS, TMEM_LANES, TMEM_SLOT_BYTES, tmem_alloc_columns

KERNEL = "attention_mla_sparse_sm100_pair"
ELEM_BYTES = 2
D_QK = 576
D_V = 512
CHUNK = 64                       # bf16 columns per 128-byte swizzle chunk
B_H = TMEM_LANES                 # head rows per pair (M of the pair's MMAs)
B_TOPK = 128                     # top-k positions per block (N of S = Q K^T)
CTA_ROWS = B_H // 2              # head rows and gathered K rows per CTA
D_V_CTA = D_V // 2               # V columns gathered per CTA
MMA_K = 16
O_MMA_N = 256                    # N of each O += P V MMA (128 V columns from each CTA)
Q_TMEM_COLS = 384                # Q's last columns held in TMEM (six chunks)
Q_SMEM_COLS = D_QK - Q_TMEM_COLS
Q_SMEM_CHUNKS, Q_TMEM_CHUNKS = Q_SMEM_COLS // CHUNK, Q_TMEM_COLS // CHUNK
CLUSTER = (2, 1, 1)
SMEM_LIMIT = 227 * 1024
MBARRIER_BYTES = 8
HEADS = (B_H,)
# warps: softmax 0-3 (thread t = TMEM lane t: head row 64 rank + t % 64, S / O column half t // 64),
# mma 4 (the leader's issues every MMA), load 5 (Q, K rows), vload 6 (V rows)
ROLES = (("softmax", 0, 4), ("mma", 4, 1), ("load", 5, 1), ("vload", 6, 1))
NUM_THREADS = 32 * sum(n for _, _, n in ROLES)
PIPES = {"q": 1, "k": 1, "v": 1, "s": 1, "p": 1, "o": 1}     # stages


def tmem_plan() -> dict:
    """TMEM columns of each CTA (note "Pair"): O (D_V / 2 float32: a lane holds half a row), S (B_TOPK / 2
    float32), Q's last Q_TMEM_COLS columns (bf16, 2 a column)."""
    plan = {"O": 0, "S": D_V // 2}
    plan["Q"] = plan["S"] + B_TOPK // 2
    used = plan["Q"] + Q_TMEM_COLS // 2
    if used > TMEM_COLUMNS:
        raise ValueError(f"TMEM plan of {used} columns exceeds {TMEM_COLUMNS}")
    return {**plan, "used": used, "alloc": tmem_alloc_columns(used)}


def smem_plan() -> dict:
    """SMEM bytes of each CTA: Q's SMEM part (64 rows x Q_SMEM_COLS), one K stage (64 gathered rows x
    576, which first stages Q's TMEM part), one V stage (128 gathered rows x 256), P (64 x 128 bf16),
    the row-max exchange (a float per softmax thread), barriers, TMEM slot."""
    q = CTA_ROWS * Q_SMEM_COLS * ELEM_BYTES
    k = CTA_ROWS * D_QK * ELEM_BYTES           # = common.gather4.tile_bytes(CTA_ROWS, D_QK, DTYPE)
    v = B_TOPK * D_V_CTA * ELEM_BYTES
    p = CTA_ROWS * B_TOPK * ELEM_BYTES
    red = TMEM_LANES * 4
    if CTA_ROWS * Q_TMEM_COLS * ELEM_BYTES > k:
        raise ValueError("Q's TMEM part does not fit the K stage it is staged in")
    bars = 2 * sum(PIPES.values()) * MBARRIER_BYTES
    total = q + k + v + p + red + bars + TMEM_SLOT_BYTES
    if total > SMEM_LIMIT:
        raise ValueError(f"SMEM plan of {total} bytes exceeds {SMEM_LIMIT}")
    return {"q": q, "k": k, "v": v, "p": p, "red": red, "barriers": bars, "total": total}


@dataclass(frozen=True)
class MLASparsePairConfig(SparseSm100Fields):
    """Compile-time fields (attention_mla_sparse_sm100's: topk_length and sinks; common.mla_sparse_sm100_fields),
    this kernel's name, plans and boxes; params and launch contract the one-CTA kernel's."""
    KERNEL: ClassVar[str] = KERNEL

    def plans(self) -> None:
        tmem_plan()
        smem_plan()

    def tma_specs(self) -> dict:
        """q as [s_q, h_q, 576] in boxes of 64 columns x 64 heads x 1 token (a CTA's rows), kv as
        [s_kv, 576] in gather4 boxes of 64 columns x 1 row."""
        return {"q": dict(dtype=DTYPE, box=(CHUNK, CTA_ROWS, 1), swizzle="128B"),
                "kv": dict(dtype=DTYPE, box=(CHUNK, 1), swizzle="128B")}


def launch_args(cfg: MLASparsePairConfig, tensors: dict, *, s_kv: int, heads: int, topk: int,
                softmax_scale: float) -> dict:
    """The kernel's parameters by name (common.mla_sparse_sm100_fields.sparse_launch_args, h_q in HEADS)."""
    return sparse_launch_args(cfg, tensors, HEADS, B_TOPK, s_kv=s_kv, heads=heads, topk=topk,
                              softmax_scale=softmax_scale)


def grid(s_q: int) -> tuple[int, int, int]:
    """x = 2 x token + rank: a token's pair is one cluster (CLUSTER)."""
    return (CLUSTER[0] * s_q, 1, 1)


__all__ = ["KERNEL", "D_QK", "D_V", "B_H", "B_TOPK", "CTA_ROWS", "D_V_CTA", "Q_TMEM_COLS", "Q_SMEM_COLS", "ROLES",
           "NUM_THREADS", "CLUSTER", "MLASparsePairConfig", "tmem_plan", "smem_plan", "launch_args", "grid"]
