"""What the interpreter reports: every fault names the kernel, the CTA, the warp and its role, and
what it was doing (the op and its source location, the mbarrier with its phase), as the watchdog
of fa4-lower-pipelines does on the GPU."""
from __future__ import annotations


class InterpretError(RuntimeError):
    """Base of every interpreter error. `context` is filled in as the error travels up: kernel, CTA,
    warp, role, op."""

    def __init__(self, message: str, **context):
        super().__init__(message)
        self.message = message
        self.context = dict(context)

    def add_context(self, **context) -> "InterpretError":
        for key, value in context.items():
            self.context.setdefault(key, value)
        return self

    def __str__(self) -> str:
        order = ("kernel", "cta", "warp", "role", "op")
        where = ", ".join(f"{k} {self.context[k]}" for k in order if self.context.get(k) is not None)
        return f"{self.message}" + (f" [{where}]" if where else "")


class Unsupported(InterpretError):
    """The IR uses an op, a form or a descriptor field the interpreter does not model (not a kernel bug)."""


class Fault(InterpretError):
    """The kernel did something the hardware would not survive or that gives undefined results."""


class Deadlock(Fault):
    """Every live warp waits and no asynchronous work (TMA, MMA) is left to wake one."""


class TmemFault(Fault):
    """A tensor-memory access outside the allocation, or by a warp outside its lane quarter."""


class BarrierFault(Fault):
    """An mbarrier misused: an arrive beyond its expected count, a wait on one never initialised."""


class UnwaitedAsync(Fault):
    """An asynchronous result used before its wait: a tcgen05.ld register read before
    tcgen05.wait::ld, a tcgen05.st not waited before it is published."""


class FenceFault(Fault):
    """A fence the memory model requires is missing: wgmma.fence before a wgmma that follows
    ordinary register accesses."""


class RaceFault(Fault):
    """Two accesses to one location, at least one a write, not ordered by happens-before: shared
    memory overwritten while a wgmma in flight reads it, tensor memory read before the write that
    should fill it completed, ..."""


class ExitFault(Fault):
    """The CTA exited with work outstanding: a TMEM allocation not freed, an mbarrier with pending
    transaction bytes, a TMA store or an MMA still queued."""


__all__ = ["InterpretError", "Unsupported", "Fault", "Deadlock", "TmemFault", "BarrierFault", "UnwaitedAsync",
           "FenceFault", "RaceFault", "ExitFault"]
