"""tcgen05 helpers shared by the sm_100a kernels (GEMM, attention): TMEM reads and MMA issue.

A TMEM address is the lane in bits 31-16 and the column in bits 15-0 (PTX ISA 9.7.16.1 "Tensor
Memory"); warp w of a warpgroup reaches lanes 32 (w % 4) .. 32 (w % 4) + 31 only (§9.7.16.8). The
accumulator of a tcgen05.mma cta_group::1 with M = 128 keeps row i in lane i.
"""
from __future__ import annotations

from ...dialect import builders as fa4
from ...dsl import Value, mlir_type


def tmem_load(addr: Value, num: int) -> Value:
    """`num` 32-bit columns of this thread's lane from `addr` (tcgen05.ld 32x32b), a vector<num x i32>
    whose contents are defined once `fa4.tmem_wait(kind="ld")` returned."""
    return Value(fa4.tmem_load(addr, result_types=[mlir_type(("i32", num))], num=num))


def lane_base(kb) -> Value:
    """TMEM address bits of this warp's lane quarter: warp w reaches lanes 32 (w % 4) .. + 31 (§9.7.16.8)."""
    return ((kb.thread_idx(0) // 32) % 4 * 32) << 16


def mma(a, b, accumulate: Value, d_tmem: Value, *, m: int, n: int, k: int, ab_dtype: str, a_source: str = "smem",
        b_major: str | None = None, cta_group: int = 1):
    """D (TMEM at `d_tmem`, f32) = A B (+ D when `accumulate`): one tcgen05.mma m x n x k. A is an SMEM
    descriptor (`a_source` "smem") or a TMEM address ("tmem"); B an SMEM descriptor, K-major unless
    `b_major` is "mn". `cta_group` 2: the MMA of a CTA pair, m and n the pair's (note "CTA pair" of
    passes/lower_mma_sm100.py), issued by one thread of the pair's even CTA."""
    extra = ({} if b_major is None else {"b_major": b_major}) | ({"cta_group": cta_group} if cta_group != 1 else {})
    fa4.mma(a, b, accumulate, [d_tmem], result_types=[], m=m, n=n, k=k, a_source=a_source, ab_dtype=ab_dtype,
            acc_dtype="f32", **extra)


__all__ = ["tmem_load", "lane_base", "mma"]
