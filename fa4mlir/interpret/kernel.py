"""A kernel loaded for the interpreter, and its launch.

    kernel = load(kernel_ir)                       # a built KernelIR (kernels.<module>.build(cfg))
    ctas = kernel.launch(grid, args)               # args by name, as the runtime takes them

`load` runs the compiler's fa4 and nvvm stages (`lowering.run_ir_stages`), stopping before scf is
lowered to a CFG: every fa4 pass is under test. It reads the pipelines' planned barrier offsets
after the fa4 stage, so faults name barriers as `kv.full[2]`.

`launch` takes the parameters the kernel declares (its `ParamSpec`s, e.g. from the config's
`launch_args`): a numpy array for a "tma" parameter (described by the parameter's TmaSpec, as the
runtime's tma_encoding does; bf16 as uint16 bits), a numpy array for a "ptr" parameter (at a
made-up global address), numbers for scalars. Outputs are written into the caller's arrays.
"""
from __future__ import annotations

import time
from typing import Mapping

import numpy as np

from .. import env
from .._mlir import ir
from ..artifacts import ParamSpec
from .cluster import launch_clusters
from .faults import Unsupported
from .machine import CTA, SMEM_BASE
from .memory import GlobalMemory, TensorMap
from .program import Program


def _pipeline_barriers(module) -> dict[int, str]:
    """Shared address -> 'pipe.full[s]' / 'pipe.empty[s]' of every planned fa4.pipeline
    (fa4-lower-pipelines: full[s] at offset + 8 s, empty[s] at offset + 8 (stages + s))."""
    names: dict[int, str] = {}

    def visit(op):
        if op.name == "fa4.pipeline" and "offset" in op.attributes:
            base = ir.IntegerAttr(op.attributes["offset"]).value
            n = ir.IntegerAttr(op.attributes["num_stages"]).value
            pipe = ir.StringAttr(op.attributes["sym_name"]).value
            for s in range(n):
                names[SMEM_BASE + base + 8 * s] = f"{pipe}.full[{s}]"
                names[SMEM_BASE + base + 8 * (n + s)] = f"{pipe}.empty[{s}]"
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return names


def _kernel_func(module):
    for gpu_module in module.body.operations:
        for op in gpu_module.regions[0].blocks[0].operations:
            if op.operation.name == "llvm.func" and "nvvm.kernel" in op.attributes:
                return op.operation
    raise Unsupported("no nvvm.kernel llvm.func in the module: is it at the nvvm stage?")


class Kernel:
    """A kernel's nvvm-stage program plus its launch metadata."""

    def __init__(self, name: str, module, params: tuple[ParamSpec, ...], block, barrier_names: dict[int, str],
                 cluster=(1, 1, 1)):
        self.name, self.module, self.params = name, module, tuple(params)
        self.block = tuple(block) + (1,) * (3 - len(block))
        self.cluster = tuple(cluster) + (1,) * (3 - len(cluster))
        self.barrier_names = barrier_names
        with module.context:
            func = _kernel_func(module)
            self.smem_bytes = ir.IntegerAttr(func.attributes["fa4.smem_bytes"]).value \
                if "fa4.smem_bytes" in func.attributes else 0
            t0 = time.perf_counter()
            self.program = Program(func)
            self.translate_seconds = time.perf_counter() - t0
        env.log_event("interpret_translate", kernel=name, seconds=round(self.translate_seconds, 4))
        if len(self.program.arg_slots) != len(self.params):
            raise ValueError(f"kernel {name}: the function takes {len(self.program.arg_slots)} arguments, the "
                             f"launch contract names {len(self.params)}")
        self.tensor_maps: list = []
        self.gmem = GlobalMemory()

    def barrier_name(self, addr: int) -> str:
        return self.barrier_names.get(addr, f"mbarrier@{addr - SMEM_BASE:#x}")

    def _bind(self, args: Mapping) -> list:
        names = [p.name for p in self.params]
        missing, extra = [n for n in names if n not in args], sorted(set(args) - set(names))
        if missing or extra:
            raise TypeError(f"kernel {self.name!r} takes parameters {names}; missing {missing}, unknown {extra}")
        self.tensor_maps, self.gmem = [], GlobalMemory()
        values = []
        for p in self.params:
            a = args[p.name]
            if p.kind == "tma":
                values.append(len(self.tensor_maps))
                self.tensor_maps.append(TensorMap(a, p.tma, p.name))
            elif p.kind == "ptr":
                values.append(self.gmem.add(a, p.name))
            elif p.kind in ("i32", "i64"):
                bits = 32 if p.kind == "i32" else 64
                v = int(a) & ((1 << bits) - 1)     # unsigned values (fastdiv multipliers) wrap as the register does
                values.append(v - (1 << bits) if v >> (bits - 1) else v)
            else:
                values.append(np.float32(a))
        return values

    def launch(self, grid, args: Mapping, *, policy: str = "lazy", seed: int = 0, ctas=None) -> list[CTA]:
        """Run every CTA of `grid` (or the block indices `ctas`) one after the other; returns the
        finished CTAs (their `stats`: seconds, warp_ops, ...). Faults raise. A kernel with a cluster
        of more than one CTA runs cluster by cluster, each cluster's CTAs together (cluster.py);
        `ctas` must then name whole clusters."""
        grid = tuple(grid) + (1,) * (3 - len(grid))
        values = self._bind(args)
        if ctas is None:
            ctas = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
        t0 = time.perf_counter()
        if self.cluster != (1, 1, 1):
            done = launch_clusters(self, values, grid, self.cluster, ctas, policy, seed)
        else:
            done = [CTA(self, values, idx, grid, policy=policy, seed=seed + i).run() for i, idx in enumerate(ctas)]
        env.log_event("interpret_launch", kernel=self.name, ctas=len(ctas), seconds=round(time.perf_counter() - t0, 4))
        return done


def load(kernel_ir, *, debug: bool = False) -> Kernel:
    """Run the fa4 and nvvm stages on `kernel_ir.module` (in place) and translate it."""
    from ..lowering import run_ir_stages
    tap = StageTap(kernel_ir, copy=False)
    with kernel_ir.module.context:
        run_ir_stages(kernel_ir.module, kernel_ir.arch, until="nvvm", debug=debug, after_stage=tap)
    return tap.kernel()


class StageTap:
    """An `after_stage` hook for `lowering.lower` / `run_ir_stages`: reads the pipelines' barrier
    names after the fa4 stage and keeps the nvvm-stage module, so one compile gives both the cubin
    and the interpreter's program (the IR stages run once):

        tap = StageTap(kernel_ir)
        art = lowering.lower(kernel_ir, options, after_stage=tap)
        kernel = tap.kernel()

    `copy`: keep a copy of the nvvm-stage module (`lower` goes on to rewrite it in place)."""

    def __init__(self, kernel_ir, *, copy: bool = True):
        self.kernel_ir, self.copy = kernel_ir, copy
        self.names: dict[int, str] = {}
        self.module = None

    def __call__(self, stage: str, module) -> None:
        if stage == "fa4":
            self.names = _pipeline_barriers(module)
        elif stage == "nvvm":
            # a detached clone (a builtin.module op: .body and .context as an ir.Module has), not a
            # print and re-parse (20x the time: a quarter of a second for the sm_100a kernel)
            self.module = module.operation.clone() if self.copy else module

    def kernel(self) -> Kernel:
        if self.module is None:
            raise Unsupported(f"kernel {self.kernel_ir.name}: the tap saw no nvvm stage (was it passed as "
                              f"after_stage to a lowering that ran?)")
        k = self.kernel_ir
        return Kernel(k.name, self.module, k.params, k.block, self.names, getattr(k, "cluster", (1, 1, 1)))


__all__ = ["Kernel", "StageTap", "load"]
