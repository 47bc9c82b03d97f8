"""The semantics of every op the interpreter executes: one table, `SEMANTICS`, op name -> handler.

A handler is called once per op at translation time as `handler(program, op, a, r)` (`a`, `r`: the
operand and result slots) and returns `(kind, run)` (program.PLAIN / BLOCKING / TERMINATOR, see
`program.py`) or None for ops fully handled at translation (constants). `run(env, mask, warp)`
reads operand slots of `env`, writes result slots, and reaches the CTA's state as `warp.cta`.

    arith.py    arith, math, vector: lane-wise numpy
    control.py  scf.if / scf.for / scf.yield, llvm.return: divergence by lane masks
    llvm.py     pointers, shared and global loads/stores, vector element ops, asm fences, PTX math
    sync.py     special registers, warp votes, named barriers, mbarriers, fences
    tma.py      cp.async.bulk.tensor loads and stores (TMA), their groups
    tcgen05.py  tensor memory (alloc, ld, st, wait) and the tensor core (mma, commit)
    pair.py     a cluster (barrier.cluster, mapa) and the CTA pair's tcgen05 forms (cta_group::2)
    tmem_copy.py  tcgen05.cp: shared memory -> tensor memory (its shapes, the pair's form)
    wgmma.py    sm_90a warpgroup MMA (SMEM descriptors, register fragments) and its fence/commit/wait
"""
from __future__ import annotations

from typing import Callable

SEMANTICS: dict[str, Callable] = {}


def semantics(*names: str):
    """Register the decorated handler as the semantics of the ops `names`."""
    def register(fn):
        for name in names:
            if name in SEMANTICS:
                raise ValueError(f"semantics of {name} registered twice")
            SEMANTICS[name] = fn
        return fn
    return register


from . import arith, control, llvm, pair, sync, tcgen05, tma, tmem_copy, wgmma  # noqa: E402,F401  (they fill SEMANTICS)

__all__ = ["SEMANTICS", "semantics"]
