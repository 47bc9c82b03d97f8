"""fa4-plan-tmem: check the kernel's tensor-memory column plan and record it on the kernel function.

Tensor memory (PTX ISA 9.1 §9.7.16.1 "Tensor Memory"; §9.7.16.1.2 "Tensor Memory Allocation") is
128 lanes x 512 columns of 32-bit cells per CTA. `tcgen05.alloc` (§9.7.16.7.1) takes a column count
that is a power of two, at least 32 and at most 512. Every `fa4.tmem_alloc` of the kernel is live
for the whole kernel here (allocate at entry, free at exit), so their columns add up and must fit
the 512 columns of one CTA. The kernel llvm.func gets `fa4.tmem_cols` (the sum), which
`lowering.lower` reports as `Resources.tmem_cols`.
"""
from __future__ import annotations

from .._mlir import ir
from ._util import PassError, attr, kernel_func, ops_named, set_int_attr

NAME = "fa4-plan-tmem"
TMEM_COLUMNS = 512   # columns of one CTA's tensor memory (§9.7.16.1)
MIN_ALLOC_COLUMNS = 32


def check_alloc(cols: int) -> None:
    """Raise ValueError unless `cols` is a legal tcgen05.alloc column count (§9.7.16.7.1)."""
    if not isinstance(cols, int) or cols < MIN_ALLOC_COLUMNS or cols > TMEM_COLUMNS or cols & (cols - 1):
        raise ValueError(f"tmem_alloc of {cols} columns: tcgen05.alloc takes a power of two in "
                         f"[{MIN_ALLOC_COLUMNS}, {TMEM_COLUMNS}]; round the column count up to the next power of two")


def plan(allocs: list[int]) -> int:
    """Total TMEM columns of the allocations `allocs` (each checked); ValueError when over 512."""
    for cols in allocs:
        check_alloc(cols)
    total = sum(allocs)
    if total > TMEM_COLUMNS:
        raise ValueError(f"the kernel allocates {total} TMEM columns ({' + '.join(map(str, allocs))}), over the "
                         f"{TMEM_COLUMNS} columns of one CTA; use fewer accumulator buffers or a smaller tile N")
    return total


def run(module: ir.Operation) -> None:
    func = kernel_func(module)
    found = ops_named(func, "fa4.tmem_alloc", "fa4.tmem_dealloc")   # one walk
    allocs = [op for op in found if op.name == "fa4.tmem_alloc"]
    cols = []
    for op in allocs:
        try:
            check_alloc(attr(op, "cols"))
        except ValueError as e:
            raise PassError(f"{NAME}: {e}", op.location) from None
        cols.append(attr(op, "cols"))
    for op in (op for op in found if op.name == "fa4.tmem_dealloc"):
        if attr(op, "cols") not in cols:
            raise PassError(f"{NAME}: tmem_dealloc frees {attr(op, 'cols')} columns but no tmem_alloc of that "
                            f"size exists (allocations: {cols}); dealloc must free what alloc took", op.location)
    try:
        total = plan(cols)
    except ValueError as e:
        loc = allocs[-1].location if allocs else func.location
        raise PassError(f"{NAME}: {e}", loc) from None
    set_int_attr(func, "fa4.tmem_cols", total)
