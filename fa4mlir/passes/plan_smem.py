"""fa4-plan-smem: place every `fa4.smem_buffer` and pipeline barrier in dynamic shared memory.

Buffers are placed largest alignment first (1024 B for 128B-swizzled TMA/MMA tiles), then the
mbarriers (8 B each, 2 per pipeline stage). Each buffer op is replaced by its address
(`fa4_smem + offset`); each `fa4.pipeline` gets an `offset` attribute for the barrier lowering.
The kernel function gets `fa4.smem_bytes`, the dynamic SMEM size the launch must request.
"""
from __future__ import annotations

from .._mlir import ir
from ._util import (SMEM_SYMBOL, PassError, attr, byte_offset, check_none_left, gpu_module,
                    kernel_func, ops_named, replace, set_int_attr, smem_base)

NAME = "fa4-plan-smem"
# Dynamic SMEM a block may request: sm_90 227 KB; sm_100 keeps 1 KB back (the reference design's carve-out).
SMEM_LIMIT = {"sm_90a": 232448, "sm_100a": 232448 - 1024}
MBARRIER_BYTES = 8


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _arch(module: ir.Operation) -> str:
    target = str(gpu_module(module).attributes["targets"])
    for arch in SMEM_LIMIT:
        if f'"{arch}"' in target:
            return arch
    raise PassError(f"{NAME}: unknown target {target}; expected one of {sorted(SMEM_LIMIT)}")


def plan(buffers, pipes):
    """[(op, offset)], total bytes. Pure planning math (unit-tested)."""
    placed, offset = [], 0
    for op, nbytes, align in sorted(buffers, key=lambda b: -b[2]):
        offset = _align(offset, align)
        placed.append((op, offset))
        offset += nbytes
    for op, stages in pipes:
        offset = _align(offset, MBARRIER_BYTES)
        placed.append((op, offset))
        offset += 2 * stages * MBARRIER_BYTES
    return placed, offset


def run(module: ir.Operation) -> None:
    arch = _arch(module)
    func = kernel_func(module)
    found = ops_named(func, "fa4.smem_buffer", "fa4.pipeline")      # one walk
    buffers = [op for op in found if op.name == "fa4.smem_buffer"]
    pipes = [op for op in found if op.name == "fa4.pipeline"]
    seen = {}
    for op in buffers + pipes:
        name = attr(op, "sym_name")
        if name in seen:
            raise PassError(f"{NAME}: '{name}' is declared twice (smem buffers and pipelines share one namespace)",
                            op.location)
        seen[name] = op
    for op in buffers:
        align = attr(op, "align")
        if align <= 0 or align & (align - 1):
            raise PassError(f"{NAME}: buffer '{attr(op, 'sym_name')}' alignment {align} is not a power of two",
                            op.location)
    placed, total = plan([(op, attr(op, "bytes"), attr(op, "align")) for op in buffers],
                         [(op, attr(op, "num_stages")) for op in pipes])
    limit = SMEM_LIMIT[arch]
    if total > limit:
        detail = ", ".join(f"{attr(op, 'sym_name')}={attr(op, 'bytes') if op.name == 'fa4.smem_buffer' else 16 * attr(op, 'num_stages')}"
                           for op, _ in placed)
        raise PassError(f"{NAME}: kernel needs {total} bytes of shared memory, over the {arch} limit of "
                        f"{limit} bytes ({detail}); use fewer pipeline stages or smaller tiles",
                        func.location)
    _ensure_global(module)
    for op, offset in placed:
        set_int_attr(op, "offset", offset)
        if op.name == "fa4.smem_buffer":
            with ir.InsertionPoint(op), op.location:
                replace(op, [byte_offset(smem_base(), offset)])
    set_int_attr(func, "fa4.smem_bytes", total)
    check_none_left(func, ("fa4.smem_buffer",), NAME)


def _ensure_global(module: ir.Operation) -> None:
    gmod = gpu_module(module)
    body = gmod.regions[0].blocks[0]
    for op in body.operations:
        if op.operation.name == "llvm.mlir.global" and ir.StringAttr(op.attributes["sym_name"]).value == SMEM_SYMBOL:
            return
    glob = ir.Operation.parse(
        f'llvm.mlir.global external @{SMEM_SYMBOL}() {{addr_space = 3 : i32, alignment = 1024 : i64}} '
        f': !llvm.array<0 x i8>')
    ir.InsertionPoint.at_block_begin(body).insert(glob)
