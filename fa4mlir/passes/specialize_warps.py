"""fa4-specialize-warps: `fa4.warp_roles` -> branches on the warpgroup and warp index, with setmaxnreg.

For each warpgroup that holds a role, one `scf.if (warpgroup == g)` whose body first sets that
warpgroup's register budget (setmaxnreg, PTX ISA 9.7.17.1: all four warps of a warpgroup execute
the same setmaxnreg), then runs each of its roles under `scf.if (warp in [first, first + n))`.
Checks: roles do not overlap and fit the block; roles sharing a warpgroup agree on `regs`; budgets
are multiples of 8 in [24, 256]; the budgets sum (x 128 threads) within the launch's allocation, the
pool setmaxnreg moves registers within (threads x entry_register_cap: with one CTA per SM, 64512 at 384
threads, not the 64K-register file): a setmaxnreg.inc the pool cannot serve waits forever (two sm_90a
MLA kernels with budgets summing to 65536 at 384 threads hung on an H200; the interpreter has no pool).
"""
from __future__ import annotations

from .._mlir import arith, ir, nvvm, scf
from ._util import PassError, attr, check_none_left, i32, kernel_func, ops_named, tid_x

NAME = "fa4-specialize-warps"
REGISTER_FILE = 65536
WARPGROUP_THREADS = 128


def entry_register_cap(threads: int) -> int:
    """Registers per thread ptxas may use with one CTA per SM (multiple of 8, at most 255)."""
    return min(255 // 8 * 8, REGISTER_FILE // threads // 8 * 8)


def plan(roles: list[dict], threads: int) -> dict[int, int]:
    """warpgroup -> register budget (0 = untouched). Raises ValueError on a bad role table."""
    num_warps = threads // 32
    owner: dict[int, str] = {}
    budgets: dict[int, int] = {}
    for r in roles:
        first, n = r["first_warp"], r["num_warps"]
        if n < 1 or first < 0 or first + n > num_warps:
            raise ValueError(f"role '{r['name']}' covers warps [{first}, {first + n}) outside the block's "
                             f"{num_warps} warps")
        for w in range(first, first + n):
            if w in owner:
                raise ValueError(f"warp {w} is in roles '{owner[w]}' and '{r['name']}'")
            owner[w] = r["name"]
        regs = r["regs"]
        if regs and (regs % 8 or not 24 <= regs <= 256):
            raise ValueError(f"role '{r['name']}': regs={regs}; setmaxnreg takes a multiple of 8 in [24, 256]")
        for g in range(first // 4, (first + n - 1) // 4 + 1):
            if g in budgets and regs and budgets[g] and budgets[g] != regs:
                raise ValueError(f"warpgroup {g} holds roles asking for {budgets[g]} and {regs} registers; "
                                 "roles sharing a warpgroup must agree (setmaxnreg is per warpgroup)")
            budgets[g] = budgets.get(g) or regs
    if any(budgets.values()):
        cap = entry_register_cap(threads)
        total = sum((b or cap) * WARPGROUP_THREADS for b in budgets.values())
        total += (num_warps // 4 - len(budgets)) * cap * WARPGROUP_THREADS
        pool = cap * threads
        if total > pool:
            raise ValueError(f"register budgets {dict(sorted(budgets.items()))} (x128 threads) need {total} "
                             f"registers, over the launch's pool of {pool} ({threads} threads x {cap}): "
                             f"setmaxnreg.inc would wait forever; lower a role's regs")
    return budgets


def run(module: ir.Operation) -> None:
    func = kernel_func(module)
    threads = list(ir.DenseI32ArrayAttr(func.attributes["nvvm.maxntid"]))
    nthreads = threads[0] * threads[1] * threads[2]
    cap = entry_register_cap(nthreads)
    for dispatch in ops_named(func, "fa4.warp_roles"):
        roles = [op for op in dispatch.regions[0].blocks[0].operations if op.operation.name == "fa4.role"]
        table = [{k: attr(r.operation, k) for k in ("name", "first_warp", "num_warps", "regs")} for r in roles]
        try:
            budgets = plan(table, nthreads)
        except ValueError as e:
            raise PassError(f"{NAME}: {e}", dispatch.location) from None
        with ir.InsertionPoint(dispatch), dispatch.location:
            warp = arith.divui(tid_x(), i32(32))
            group = arith.divui(warp, i32(4))
            for lo_g, hi_g, members in _clusters(table):
                regs = budgets[lo_g]
                cond = arith.andi(arith.cmpi(arith.CmpIPredicate.uge, group, i32(lo_g)),
                                  arith.cmpi(arith.CmpIPredicate.ule, group, i32(hi_g)))
                branch = scf.IfOp(cond, [], has_else=False)
                with ir.InsertionPoint(branch.then_block):
                    if regs and regs != cap:
                        action = (nvvm.SetMaxRegisterAction.increase if regs > cap
                                  else nvvm.SetMaxRegisterAction.decrease)
                        nvvm.setmaxregister(regs, action)
                    for i in members:
                        _emit_role(roles[i].operation, warp, table[i])
                    scf.YieldOp([])
        dispatch.erase()
    check_none_left(func, ("fa4.warp_roles", "fa4.role"), NAME)


def _clusters(table: list[dict]) -> list[tuple[int, int, list[int]]]:
    """Group roles whose warpgroups overlap: [(first group, last group, role indices)]."""
    spans = sorted(((r["first_warp"] // 4, (r["first_warp"] + r["num_warps"] - 1) // 4, i)
                    for i, r in enumerate(table)))
    out: list[tuple[int, int, list[int]]] = []
    for lo, hi, i in spans:
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(hi, out[-1][1]), out[-1][2] + [i])
        else:
            out.append((lo, hi, [i]))
    return out


def _emit_role(role: ir.Operation, warp: ir.Value, row: dict) -> None:
    with role.location:
        lo, hi = row["first_warp"], row["first_warp"] + row["num_warps"]
        cond = arith.andi(arith.cmpi(arith.CmpIPredicate.uge, warp, i32(lo)),
                          arith.cmpi(arith.CmpIPredicate.ult, warp, i32(hi)))
        ifop = scf.IfOp(cond, [], has_else=False)
        ifop.operation.attributes["fa4.role"] = ir.StringAttr.get(row["name"])
        with ir.InsertionPoint(ifop.then_block):
            term = scf.YieldOp([])
        for op in list(role.regions[0].blocks[0].operations)[:-1]:  # all but the gpu.yield
            op.operation.move_before(term)
