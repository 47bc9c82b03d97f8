"""Sparse MLA prefill on sm_100a (attention_mla_sparse_sm100): configuration, resource plans, launch
contract (MLIR-free). Semantics are the sm_90a kernel's (attention_mla_sparse_sm90, notes "Bias" and
"Sinks"): q [s_q, h_q, 576], kv [s_kv, 576] (one latent head), indices [s_q, topk] int32 with -1 (or any
index < 0 or >= s_kv, or a position >= topk_length[token]) invalid, out [s_q, h_q, 512], lse and
max_logits [s_q, h_q] (natural units).

Note "Split" (what FlashMLA does, and what this kernel does instead). O of 128 heads x 512 float32 is
128 lanes x 512 columns: all of one CTA's TMEM (PTX ISA 9.7.16.1). FlashMLA's sm_100 sparse prefill
(csrc/sm100/prefill/sparse/fwd/head128/config.h) runs a CTA pair with cta_group::2 MMAs: B_H = 128
heads and B_TOPK = 128 rows per pair, each CTA gathering half the rows and holding O for half of D_v
(V[:, 0:256] in CTA 0, V[:, 256:512] in CTA 1; TMEM: O 0-256, P 256-320, Q's last 384 columns
320-512, Q in TMEM as the A operand); its head64 kernel (head64/config.h) is one CTA with a "dual
gemm" (Q's halves in lanes 0-63 and 64-127, O 0-256, Q 256-400, P 400-464). fa4mlir has no
cta_group::2 (dialect, lowering, interpreter), so this kernel splits D_v over a pair of independent
CTAs of the grid instead: CTA (token, half) computes S = Q K^T for all 128 head rows (the pair
computes S twice: 2x the QK FLOPs of FlashMLA's pair) and O for V's columns [256 half, 256 half + 256).
Its TMEM: O 0-256, S 256-320, P 320-352, and Q's first Q_TMEM_COLS = 320 columns at 352-512 (2 bf16
a column, the A operand of the first 20 of S's 36 MMAs, as FlashMLA keeps 384 of Q's columns in TMEM);
Q's last 256 columns stay in SMEM (64 KiB), which leaves room for a KV ring of two 72 KiB stages.
Q's TMEM part is staged through the KV ring's SMEM before the first gather (note "Q staging" of the
kernel).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .common.mla_sparse_sm100_fields import DTYPE, SparseSm100Fields, sparse_launch_args
from .common.tmem import TMEM_COLUMNS, TMEM_LANES, TMEM_SLOT_BYTES, tmem_alloc_columns

KERNEL = "attention_mla_sparse_sm100"
ELEM_BYTES = 2
D_QK = 576
D_V = 512
CHUNK = 64                       # bf16 columns per 128-byte swizzle chunk
B_TOPK = 64                      # gathered rows per tile (N of S = Q K^T)
TILE_M = TMEM_LANES              # head rows per CTA (M of both MMAs; rows >= h_q are zeros, never stored)
V_SPLIT = 2                      # CTAs per token, each owning D_V / V_SPLIT columns of O
D_V_CTA = D_V // V_SPLIT
MMA_K = 16
Q_TMEM_COLS = 320               # Q's columns held in TMEM (five 64-column chunks)
Q_TMEM_CHUNKS = Q_TMEM_COLS // CHUNK
KV_STAGES = 2
SMEM_LIMIT = 227 * 1024
MBARRIER_BYTES = 8
HEADS = (64, 128)
# warps: softmax 0-3 (thread t = head row t = TMEM lane t), mma 4, load 5; no setmaxnreg
ROLES = (("softmax", 0, 4), ("mma", 4, 1), ("load", 5, 1))
NUM_THREADS = 32 * sum(n for _, _, n in ROLES)
PIPES = {"q": 1, "qstage": 1, "qt": 1, "kv": KV_STAGES, "s": 1, "p": 1, "o": 1}     # stages


def tmem_plan() -> dict:
    """TMEM columns (note "Split"): O (D_V_CTA float32), S (B_TOPK float32), P (B_TOPK bf16, 2 a column),
    Q's first Q_TMEM_COLS columns (bf16, 2 a column)."""
    plan = {"O": 0, "S": D_V_CTA, "P": D_V_CTA + B_TOPK}
    plan["Q"] = plan["P"] + B_TOPK // 2
    used = plan["Q"] + Q_TMEM_COLS // 2
    if used > TMEM_COLUMNS:
        raise ValueError(f"TMEM plan of {used} columns exceeds {TMEM_COLUMNS}")
    return {**plan, "used": used, "alloc": tmem_alloc_columns(used)}


def smem_plan() -> dict:
    """SMEM bytes: Q's SMEM part (128 rows x its last 256 columns, four 64-column chunks), the KV ring of
    KV_STAGES gathered tiles (which first stages Q's TMEM part), barriers, TMEM slot."""
    q = TILE_M * (D_QK - Q_TMEM_COLS) * ELEM_BYTES
    kv_tile = B_TOPK * D_QK * ELEM_BYTES     # = common.gather4.tile_bytes(B_TOPK, D_QK, DTYPE)
    kv = KV_STAGES * kv_tile
    if TILE_M * Q_TMEM_COLS * ELEM_BYTES > kv:
        raise ValueError("Q's TMEM part does not fit the KV ring it is staged in")
    bars = 2 * sum(PIPES.values()) * MBARRIER_BYTES
    total = q + kv + bars + TMEM_SLOT_BYTES
    if total > SMEM_LIMIT:
        raise ValueError(f"SMEM plan of {total} bytes exceeds {SMEM_LIMIT}")
    return {"q": q, "kv": kv, "kv_tile": kv_tile, "barriers": bars, "total": total}


@dataclass(frozen=True)
class MLASparseSm100Config(SparseSm100Fields):
    """Compile-time fields (the sm_90a kernel's: topk_length and sinks; common.mla_sparse_sm100_fields, shared
    with the pair kernel's config), this kernel's name, plans and boxes."""
    KERNEL: ClassVar[str] = KERNEL

    def plans(self) -> None:
        tmem_plan()
        smem_plan()

    def tma_specs(self) -> dict:
        """The descriptors: q as [s_q, h_q, 576] in boxes of 64 columns x 128 heads x 1 token (heads past
        h_q are zero-filled), kv as [s_kv, 576] in gather4 boxes of 64 columns x 1 row."""
        return {"q": dict(dtype=DTYPE, box=(CHUNK, TILE_M, 1), swizzle="128B"),
                "kv": dict(dtype=DTYPE, box=(CHUNK, 1), swizzle="128B")}


def launch_args(cfg: MLASparseSm100Config, tensors: dict, *, s_kv: int, heads: int, topk: int,
                softmax_scale: float) -> dict:
    """The kernel's parameters by name (common.mla_sparse_sm100_fields.sparse_launch_args, h_q in HEADS)."""
    return sparse_launch_args(cfg, tensors, HEADS, B_TOPK, s_kv=s_kv, heads=heads, topk=topk,
                              softmax_scale=softmax_scale)


def grid(s_q: int) -> tuple[int, int, int]:
    """x = V_SPLIT x token + half (the two CTAs of a token adjacent: they gather the same rows)."""
    return (V_SPLIT * s_q, 1, 1)


__all__ = ["KERNEL", "D_QK", "D_V", "B_TOPK", "TILE_M", "V_SPLIT", "D_V_CTA", "Q_TMEM_COLS", "KV_STAGES", "ROLES",
           "NUM_THREADS",
           "MLASparseSm100Config", "tmem_plan", "smem_plan", "launch_args", "grid"]
