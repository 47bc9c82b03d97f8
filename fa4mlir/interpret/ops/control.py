"""Structured control flow at warp granularity: divergence is a lane mask.

scf.if runs its then-block for the lanes whose condition holds and its else-block for the others
(either is skipped when no lane takes it) and merges results lane by lane. scf.for needs
warp-uniform bounds and scf.while a warp-uniform condition (every loop in the kernels has them):
lanes that leave a loop at different trip counts are not modelled. An `fa4.role` attribute on an scf.if (fa4-specialize-warps' dispatch)
names the warp's role for fault reports.
"""
from __future__ import annotations

import numpy as np

from ..._mlir import ir
from ..machine import uniform
from ..program import BLOCKING, TERMINATOR, run_block
from . import semantics


@semantics("scf.yield", "llvm.return", "scf.condition")
def terminator(p, op, a, r):
    def run(env, mask, w):
        return [env[s] for s in a]
    return TERMINATOR, run


@semantics("scf.if")
def scf_if(p, op, a, r):
    then_block = p.compile_block(op.regions[0].blocks[0])
    else_block = p.compile_block(op.regions[1].blocks[0]) if len(op.regions[1].blocks) else None
    role = ir.StringAttr(op.attributes["fa4.role"]).value if "fa4.role" in op.attributes else None
    c = a[0]

    def run(env, mask, w):
        cond = env[c]
        then_mask, else_mask = mask & cond, mask & ~cond
        then_vals = else_vals = None
        if then_mask.any():
            if role is not None:
                w.role = role
            then_vals = yield from run_block(then_block, env, then_mask, w)
        if else_block is not None and else_mask.any():
            else_vals = yield from run_block(else_block, env, else_mask, w)
        for i, z in enumerate(r):
            if else_vals is None:
                env[z] = then_vals[i]
            elif then_vals is None:
                env[z] = else_vals[i]
            else:
                m = then_mask if then_vals[i].ndim == 1 else then_mask[:, None]
                env[z] = np.where(m, then_vals[i], else_vals[i])
    return BLOCKING, run


@semantics("scf.for")
def scf_for(p, op, a, r):
    block = op.regions[0].blocks[0]
    iv = p.slot(block.arguments[0])
    carried = [p.slot(x) for x in block.arguments[1:]]
    body = p.compile_block(block)
    lb, ub, step, inits = a[0], a[1], a[2], a[3:]

    def run(env, mask, w):
        lo = uniform(env[lb], mask, "scf.for lower bound")
        hi = uniform(env[ub], mask, "scf.for upper bound")
        st = uniform(env[step], mask, "scf.for step")
        dtype = env[lb].dtype
        values = [env[s] for s in inits]
        for i in range(lo, hi, st):
            env[iv] = np.full(len(mask), i, dtype)
            for s, v in zip(carried, values):
                env[s] = v
            values = yield from run_block(body, env, mask, w)
        for z, v in zip(r, values):
            env[z] = v
    return BLOCKING, run


@semantics("scf.while")
def scf_while(p, op, a, r):
    """Run `before` on the carried values; its scf.condition(c, vals) either passes vals to `after`
    (whose yield carries them round) or, c false, makes them the results."""
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    before_args = [p.slot(x) for x in before.arguments]
    after_args = [p.slot(x) for x in after.arguments]
    before_body, after_body = p.compile_block(before), p.compile_block(after)

    def run(env, mask, w):
        values = [env[s] for s in a]
        while True:
            for s, v in zip(before_args, values):
                env[s] = v
            cond, *values = yield from run_block(before_body, env, mask, w)
            if not uniform(cond, mask, "scf.while condition"):
                break
            for s, v in zip(after_args, values):
                env[s] = v
            values = yield from run_block(after_body, env, mask, w)
        for z, v in zip(r, values):
            env[z] = v
    return BLOCKING, run
