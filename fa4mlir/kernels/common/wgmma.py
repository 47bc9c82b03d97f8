"""sm_90a wgmma register fragments, shared by the sm_90a kernels (GEMM, attention).

Accumulator D of an m64nN wgmma (PTX ISA 9.7.15.5.1 "Register Fragments", D matrix): thread t of
the warpgroup holds rows r and r + 8, r = 16 (t / 32) + (t % 32) / 4, and per group of 8 columns
the pair 2 (t % 4), 2 (t % 4) + 1 of each row: N / 2 registers, in the order

    register i:  column group i // 4, row (i // 2) % 2 (0: r, 1: r + 8), column i % 2 of the pair

An A operand from registers (k16, 16-bit elements) is four 32-bit words per thread in the same
row/column pattern, so an f32 accumulator converts in place: registers 8 kk .. 8 kk + 7 (column
groups 2 kk and 2 kk + 1) make the A fragment of k-step kk.
"""
from __future__ import annotations

from ...dialect import builders as fa4
from ...dsl import Value


def acc_row(i: int) -> int:
    """Which of the thread's two rows accumulator register `i` is in (0: r, 1: r + 8)."""
    return (i // 2) % 2


def acc_col(i: int) -> int:
    """Column of accumulator register `i`, counted from the thread's first column 2 (t % 4)."""
    return 8 * (i // 4) + i % 2


def acc_pair(col_group: int, row: int) -> int:
    """The first of the two registers that hold the column pair of `col_group` in row `row`."""
    return 4 * col_group + 2 * row


def row_regs(num_regs: int, row: int) -> list[int]:
    """The registers of an accumulator of `num_regs` registers that lie in row `row` (0 or 1)."""
    return [i for i in range(num_regs) if acc_row(i) == row]


def a_frag_pairs(k_step: int) -> list[tuple[int, int]]:
    """The accumulator register pairs that make the four words of A fragment `k_step` (k16)."""
    return [(i, i + 1) for i in range(8 * k_step, 8 * k_step + 8, 2)]


def wait_group(acc: Value, pending: int) -> Value:
    """`acc` once at most `pending` wgmma groups are in flight (wgmma.wait_group)."""
    return Value(fa4.mma_wait_group([acc], result_types=[acc.type], pending=pending))


__all__ = ["acc_row", "acc_col", "acc_pair", "row_regs", "a_frag_pairs", "wait_group"]
