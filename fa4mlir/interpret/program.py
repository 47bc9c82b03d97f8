"""The kernel function translated once into closures over value slots, then run per warp.

Every op becomes an `Instr`: `run(env, mask, warp)` where `env` is the warp's list of values (one
slot per SSA value), `mask` the active lanes (bool[32]) and `warp` the executing `machine.Warp`.
Three kinds:

    PLAIN       run computes and returns nothing
    BLOCKING    run is a generator: it yields a `Wait` when the warp must block, and returns the
                region's results (scf.if / scf.for run their blocks this way)
    TERMINATOR  run returns the block's results (scf.yield, llvm.return)

The semantics of each op live in `ops/` (one table, `ops.SEMANTICS`, keyed by op name). A warp is a
generator over its block (`run_block`); the machine resumes it until it yields a Wait whose
condition does not hold.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .._mlir import ir
from .faults import InterpretError, Unsupported
from .numeric import WARP, np_dtype

PLAIN, BLOCKING, TERMINATOR = 0, 1, 2


@dataclass(frozen=True)
class Instr:
    kind: int
    run: Callable
    op: object          # the op, for faults: `where` formats its name and location when one is raised

    @property
    def where(self) -> str:
        return where(self.op)


@dataclass(frozen=True)
class Wait:
    """A warp blocked: `ready()` says when it may continue; `what` (a string, or a callable for
    state read at report time) describes it for a deadlock."""
    ready: Callable[[], bool]
    what: object

    def describe(self) -> str:
        return self.what() if callable(self.what) else str(self.what)


_PLAIN_FILENAME = re.compile(r"[\w./+-]+", re.ASCII)   # printed by MLIR as is, between quotes


def where(op) -> str:
    loc = op.location
    # A file:line:col location (every op of a parsed module) is formatted here as MLIR prints it:
    # printing the location is most of the cost, and every op of a kernel gets one.
    if loc.is_a_file() and loc.start_line == loc.end_line and loc.start_col == loc.end_col \
            and _PLAIN_FILENAME.fullmatch(loc.filename):
        return f'{op.name} at "{loc.filename}":{loc.start_line}:{loc.start_col}'
    loc = str(loc)
    return f"{op.name} at {loc[4:-1] if loc.startswith('loc(') else loc}"


class Program:
    """An `llvm.func` kernel translated for the interpreter: value slots, constants, argument slots
    and the body's instructions."""

    def __init__(self, func):
        from .ops import SEMANTICS
        self._semantics = SEMANTICS
        self._slots: dict = {}
        self.constants: dict[int, np.ndarray] = {}      # slot -> the array it holds from the start
        # (type, value attribute) -> its array: a kernel repeats a few hundred constants thousands of
        # times. Sharing is safe as it is across warps: no op writes into an operand's array.
        self.constant_arrays: dict = {}
        body = func.regions[0].blocks[0]
        self.name = ir.StringAttr(func.attributes["sym_name"]).value
        self.arg_slots = [self.slot(a) for a in body.arguments]
        self.arg_types = [a.type for a in body.arguments]
        self.body = self.compile_block(body)
        self.num_slots = len(self._slots)

    def slot(self, value) -> int:
        s = self._slots.get(value)
        if s is None:
            s = self._slots[value] = len(self._slots)
        return s

    def constant(self, value, array: np.ndarray) -> None:
        """`value` holds `array` in every warp from the start (arith.constant and the like)."""
        self.constants[self.slot(value)] = array

    def uniform_constant(self, value) -> int | None:
        """The integer `value` holds in every lane when it is a scalar constant (arith.constant):
        an operand an op may read at compile time instead of checking it per warp; else None."""
        array = self.constants.get(self._slots.get(value, -1))
        if array is None or array.ndim != 1 or array.dtype.kind not in "iu":
            return None
        return int(array[0])

    def compile_block(self, block) -> list[Instr]:
        out = []
        semantics_of, slot = self._semantics.get, self.slot
        for op in block.operations:
            op = op.operation
            semantics = semantics_of(op.name)
            if semantics is None:
                raise Unsupported(f"no semantics for {op.name}", op=where(op))
            ins = semantics(self, op, [slot(v) for v in op.operands], [slot(v) for v in op.results])
            if ins is not None:
                out.append(Instr(ins[0], ins[1], op) if isinstance(ins, tuple) else ins)
        return out

    def new_env(self, args: list) -> list:
        env = [None] * self.num_slots
        for s, array in self.constants.items():
            env[s] = array
        for s, value, t in zip(self.arg_slots, args, self.arg_types):
            env[s] = np.full(WARP, value, dtype=np_dtype(t))
        return env


def run_block(instrs: list[Instr], env: list, mask: np.ndarray, warp):
    """Generator: run `instrs` for the lanes in `mask`; yields Waits; returns the terminator's values."""
    for ins in instrs:
        warp.ops += 1
        try:
            if ins.kind == PLAIN:
                ins.run(env, mask, warp)
            elif ins.kind == BLOCKING:
                res = yield from ins.run(env, mask, warp)
                if res is not None:
                    return res
            else:
                return ins.run(env, mask, warp)
        except InterpretError as exc:
            raise exc.add_context(op=ins.where)
    return None


__all__ = ["Program", "Instr", "Wait", "run_block", "PLAIN", "BLOCKING", "TERMINATOR", "where"]
