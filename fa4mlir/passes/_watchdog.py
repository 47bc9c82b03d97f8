"""Debug builds (FA4MLIR_DEBUG=1): every mbarrier wait is bounded, so a protocol bug is a message, not a hang.

`bounded_wait` replaces the blocking `mbarrier.try_wait.parity` loop of fa4-lower-pipelines by

    start = %globaltimer
    scf.while (!done):                                    # note "bounded wait"
        done = mbarrier.try_wait.parity(addr, parity)     # one try, returns a predicate
        if !done && %globaltimer - start > WATCHDOG_NS:
            one active lane per warp: vprintf(MESSAGE, {stage, phase, block x/y/z, thread})
            llvm.intr.trap

Note "bounded wait": try_wait may suspend the thread up to a system time limit before returning
false (PTX ISA 9.7.13.15.16 "mbarrier.test_wait / mbarrier.try_wait"), so the loop re-reads the
global timer (ns, PTX ISA 10.21 "%globaltimer") after each try. The kernel, role, pipeline and
barrier side are known when compiling, so they are part of the format string; stage, phase and the
block index are runtime values packed into vprintf's argument buffer (a stack struct). The trap
kills the context: the launch (or the next synchronisation) fails with CUDA_ERROR_LAUNCH_FAILED
or an illegal-instruction error, after the driver has flushed the printf buffer.

A kernel broken on purpose (fa4mlir/kernels/deadlock_sm90.py) marks itself unverified
(fa4mlir/dialect/query.py: mark_unverified), so fa4-verify-pipelines lets it through, and asks for
the watchdog in its config (`_debug`); `lowering.lower(kernel_ir, key=key)` then
compiles it like any other kernel. This pass-side module imports neither lowering nor kernels.
"""
from __future__ import annotations

from .._mlir import arith, ir, llvm, nvvm, scf
from . import _ptx

WATCHDOG_NS = 2_000_000_000   # a wait longer than 2 s is a deadlock
MESSAGE = ("fa4mlir watchdog: kernel {kernel}: role '{role}' timed out after {seconds:g} s waiting on "
           "pipeline '{pipe}' {side}[stage %d] phase %d (block %d,%d,%d thread %d)\n")
VPRINTF = "vprintf"
_ARGS = 6  # stage, phase, block x, y, z, thread


def _i(width: int) -> ir.Type:
    return ir.IntegerType.get_signless(width)


def _gpu_module_block() -> ir.Block:
    """The body of the gpu.module around the current insertion point."""
    op = ir.InsertionPoint.current.block.owner
    while op is not None and op.name != "gpu.module":
        op = op.parent
    if op is None:
        raise ValueError("bounded_wait must be emitted inside a gpu.module")
    return op.regions[0].blocks[0]


def _symbols(block: ir.Block) -> set[str]:
    return {ir.StringAttr(o.attributes["sym_name"]).value for o in block.operations if "sym_name" in o.attributes}


def _declare(block: ir.Block, text: str) -> None:
    ir.InsertionPoint.at_block_begin(block).insert(ir.Operation.parse(text))


def _message_global(block: ir.Block, text: str) -> str:
    """A NUL-terminated constant string global holding `text`; returns its symbol."""
    names = _symbols(block)
    if VPRINTF not in names:
        _declare(block, f"llvm.func @{VPRINTF}(!llvm.ptr, !llvm.ptr) -> i32")
    data = text.encode() + b"\0"
    n = 0
    while f"fa4_watchdog_msg_{n}" in names:
        n += 1
    sym = f"fa4_watchdog_msg_{n}"
    escaped = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:02X}" for b in data)
    _declare(block, f'llvm.mlir.global internal constant @{sym}("{escaped}") {{addr_space = 0 : i32}} '
                    f": !llvm.array<{len(data)} x i8>")
    return sym


def _report(sym: str, stage: ir.Value, phase: ir.Value) -> None:
    """One active lane per warp prints the message with stage, phase, block index and thread index."""
    i32, ptr = _i(32), ir.Type.parse("!llvm.ptr")
    lanes_below = nvvm.read_ptx_sreg_lanemask_lt(i32)
    first_active = arith.cmpi(arith.CmpIPredicate.eq, arith.andi(_ptx.activemask(), lanes_below),
                              arith.constant(i32, 0))
    leader = scf.IfOp(first_active, [], has_else=False)
    with ir.InsertionPoint(leader.then_block):
        struct = ir.Type.parse(f"!llvm.struct<({', '.join(['i32'] * _ARGS)})>")
        args = llvm.alloca(ptr, arith.constant(i32, 1), struct, alignment=8)
        values = [stage, phase, nvvm.read_ptx_sreg_ctaid_x(i32), nvvm.read_ptx_sreg_ctaid_y(i32),
                  nvvm.read_ptx_sreg_ctaid_z(i32), nvvm.read_ptx_sreg_tid_x(i32)]
        for idx, v in enumerate(values):
            field = llvm.getelementptr(ptr, args, [], [0, idx], struct, llvm.GEPNoWrapFlags.none)
            llvm.store(v, field)
        fmt = llvm.mlir_addressof(ptr, sym)
        llvm.call(i32, [fmt, args], [], [], callee=VPRINTF)
        scf.YieldOp([])


def bounded_wait(addr: ir.Value, parity: ir.Value, *, kernel: str, role: str, pipe: str, side: str,
                 stage: ir.Value, phase: ir.Value) -> None:
    """Wait until the mbarrier at `addr` completes the phase of parity `parity`, or trap after
    WATCHDOG_NS with a message naming kernel, role, pipeline, side, stage and phase."""
    i1, i64 = _i(1), _i(64)
    sym = _message_global(_gpu_module_block(), MESSAGE.format(kernel=kernel, role=role, pipe=pipe, side=side,
                                                              seconds=WATCHDOG_NS / 1e9))
    start = nvvm.read_ptx_sreg_globaltimer(i64)
    loop = scf.WhileOp([], [])
    before = loop.before.blocks.append()
    with ir.InsertionPoint(before):
        done = nvvm.mbarrier_try_wait(i1, addr, parity)
        pending = arith.xori(done, arith.constant(i1, 1))
        elapsed = arith.subi(nvvm.read_ptx_sreg_globaltimer(i64), start)
        expired = arith.andi(pending, arith.cmpi(arith.CmpIPredicate.ugt, elapsed, arith.constant(i64, WATCHDOG_NS)))
        timeout = scf.IfOp(expired, [], has_else=False)
        with ir.InsertionPoint(timeout.then_block):
            _report(sym, stage, phase)
            llvm.intr_trap()
            scf.YieldOp([])
        scf.ConditionOp(pending, [])
    after = loop.after.blocks.append()
    with ir.InsertionPoint(after):
        scf.YieldOp([])
