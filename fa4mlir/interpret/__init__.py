"""fa4mlir.interpret: execute a kernel's IR on the CPU, warp by warp, in numpy.

It runs the IR at the nvvm stage (after every fa4 pass, before scf is lowered to a CFG), so what
the passes computed is what runs: plan-smem's offsets, lower-mma-sm100's descriptor bits,
lower-tmem's addresses and waits, lower-pipelines' parities, specialize-warps' dispatch. Both
arches: sm_100a (tcgen05, TMEM) and sm_90a (wgmma from descriptors and register fragments,
named-barrier turns, persistent tile loops).

    from fa4mlir import interpret
    kernel = interpret.load(attention_fwd_sm100.build(cfg))
    kernel.launch(grid, launch_args(cfg, problem, arrays))     # writes O and LSE into the arrays

A kernel with a cluster of more than one CTA (`KernelBuilder(cluster=(2, 1, 1))`) runs cluster by
cluster, each cluster's CTAs together (`cluster.py`; the CTA pair's tcgen05 forms in `ops/pair.py`).

Layout: `kernel.py` (load, launch), `program.py` (IR -> closures, the warp executor),
`machine.py` (a CTA: shared/tensor memory, mbarriers, async engines, the scheduler), `cluster.py`
(a cluster's CTAs run together: barrier.cluster, mapa, remote arrives), `memory.py`
(global arrays, TMA boxes and swizzles), `hb.py` (happens-before: vector clocks, shadow memory, the
fence rules), `ops/` (the semantics table), `faults.py` (what it reports).
Imports MLIR and the compiler's stages; nothing of CUDA, and nothing on the host side imports it.
"""
from __future__ import annotations

from .faults import (BarrierFault, Deadlock, ExitFault, Fault, FenceFault, InterpretError, RaceFault, TmemFault,
                     Unsupported, UnwaitedAsync)
from .kernel import Kernel, StageTap, load
from .machine import POLICIES

__all__ = ["load", "Kernel", "StageTap", "POLICIES", "InterpretError", "Unsupported", "Fault", "Deadlock", "TmemFault",
           "BarrierFault", "UnwaitedAsync", "FenceFault", "RaceFault", "ExitFault"]
