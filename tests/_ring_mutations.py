"""Single-op mutations of a kernel's pipeline rings, for the verifier tests (test_seeded_bugs.py,
test_kvcache_decode.py): each ring op's phase flipped, its stage + 1, or the op erased."""
from __future__ import annotations

RING_OPS = ("fa4.producer_acquire", "fa4.consumer_wait", "fa4.consumer_release", "fa4.producer_commit")
MUTATIONS = ("phase ^ 1", "stage + 1", "erase")


def mutate_ring_op(kir, index: int, how: str):
    """`kir` (a built kernel) with its index-th ring op (RING_OPS, in IR order) mutated by `how` (one of
    MUTATIONS), in place; None when `how` is "phase ^ 1" and the op has no phase."""
    from fa4mlir._mlir import arith, ir
    from fa4mlir.dialect.query import ops_named
    with kir.module.context:
        op = ops_named(kir.module.operation, *RING_OPS)[index]
        if how == "phase ^ 1" and op.name not in RING_OPS[:2]:
            return None
        with ir.InsertionPoint(op), op.location:
            one = arith.constant(ir.IntegerType.get_signless(32), 1)
            if how == "phase ^ 1":
                op.operands[1] = arith.xori(op.operands[1], one)
            elif how == "stage + 1":
                op.operands[0] = arith.addi(op.operands[0], one)
            else:
                op.erase()
    return kir
