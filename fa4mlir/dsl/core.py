"""Typed values, control flow and pipeline states of the kernel DSL (fa4mlir.dsl).

The kernel builder: plain Python that builds fa4 + arith/scf/math/vector IR by explicit calls.

Python control flow runs at build time; IR control flow is `kb.for_` / `kb.if_`. Every op gets the
source location of the kernel line that asked for it (the first stack frame outside this package
and `fa4mlir/dialect`). Values are typed wrappers (`Value`) with arithmetic operators; Python
numbers mixed with them become constants of the other operand's type.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from .._mlir import arith, ir, llvm, math, scf, vector
from ..dialect import builders as fa4
from ..dialect.builders import source_loc
from ..runtime import ParamSpec, TmaSpec
from . import tree

_TYPE_NAMES = {"i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "f16": "f16",
               "bf16": "bf16", "f32": "f32", "ptr": "!llvm.ptr", "gptr": "!llvm.ptr<1>",
               "sptr": "!llvm.ptr<3>"}
ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "i8": 1, "u8": 1, "i64": 8, "e4m3": 1}


def mlir_type(t) -> ir.Type:
    if isinstance(t, ir.Type):
        return t
    if isinstance(t, tuple):  # ("f32", 8) -> vector<8xf32>
        return ir.VectorType.get([t[1]], mlir_type(t[0]))
    return ir.Type.parse(_TYPE_NAMES.get(t, t))


def _is_float(t: ir.Type) -> bool:
    return isinstance(t, ir.F32Type) or isinstance(t, ir.BF16Type) or isinstance(t, ir.F16Type)


class Value:
    """A typed SSA value with arithmetic; operations emit arith ops at the current insertion point.

    Integers are signless in MLIR; the operation decides how the bits are read. The operators and
    the short comparison names read integers as UNSIGNED (shipped kernels rely on it: indices,
    lengths and counts are never negative), and the `s`-prefixed methods read them as SIGNED
    (two's complement), for sliding windows, ragged offsets and other differences that may go below
    zero. Float comparisons ignore the distinction (slt is olt); the division, remainder and shift
    methods are integer-only.

        unsigned (operators)     signed (methods)        arith op
        a.lt/le/gt/ge(b)         a.slt/sle/sgt/sge(b)    cmpi ult/ule/ugt/uge  vs  slt/sle/sgt/sge
        a // b                   a.sdiv(b)               divui  vs  divsi (rounds toward zero)
                                 a.sfloordiv(b)          divsi, remsi, select (toward -inf, Python's //)
                                 a.sceildiv(b)           divsi, remsi, select (toward +inf)
        a % b                    a.srem(b)               remui  vs  remsi (sign of the dividend)
        a >> n                   a.ashr(n)               shrui (zero-fill)  vs  shrsi (sign-fill)
        a.to(wider int)          a.to(wider, signed=True)  extui  vs  extsi
        a.to(float)              a.to(float, signed=True)  uitofp  vs  sitofp
                                 a.smin(b), a.smax(b)    minsi / maxsi

    eq/ne, +, -, *, <<, &, |, ^ and truncation are the same for both readings. Float -> int `to`
    is always signed (fptosi).
    """

    def __init__(self, v: ir.Value):
        self.v = v.result if hasattr(v, "result") and not isinstance(v, ir.Value) else v

    @property
    def type(self) -> ir.Type:
        return self.v.type

    @property
    def is_float(self) -> bool:
        t = self.type
        if isinstance(t, ir.VectorType):
            t = ir.VectorType(t).element_type
        return _is_float(t)

    def _coerce(self, other) -> ir.Value:
        if isinstance(other, Value):
            return other.v
        if isinstance(other, ir.Value):
            return other
        return const(other, self.type).v

    def _bin(self, other, int_op, float_op, reverse=False):
        a, b = self.v, self._coerce(other)
        if reverse:
            a, b = b, a
        op = float_op if self.is_float else int_op
        if op is None:
            raise TypeError(f"operator not defined for {self.type}")
        return Value(op(a, b, loc=source_loc()))

    def __add__(self, o): return self._bin(o, arith.addi, arith.addf)
    def __radd__(self, o): return self._bin(o, arith.addi, arith.addf, True)
    def __sub__(self, o): return self._bin(o, arith.subi, arith.subf)
    def __rsub__(self, o): return self._bin(o, arith.subi, arith.subf, True)
    def __mul__(self, o): return self._bin(o, arith.muli, arith.mulf)
    def __rmul__(self, o): return self._bin(o, arith.muli, arith.mulf, True)
    def __truediv__(self, o): return self._bin(o, None, arith.divf)
    def __floordiv__(self, o): return self._bin(o, arith.divui, None)
    def __mod__(self, o): return self._bin(o, arith.remui, None)
    def __and__(self, o): return self._bin(o, arith.andi, None)
    def __or__(self, o): return self._bin(o, arith.ori, None)
    def __xor__(self, o): return self._bin(o, arith.xori, None)
    def __lshift__(self, o): return self._bin(o, arith.shli, None)
    def __rshift__(self, o): return self._bin(o, arith.shrui, None)

    def _cmp(self, other, ipred, fpred):
        b = self._coerce(other)
        if self.is_float:
            return Value(arith.cmpf(getattr(arith.CmpFPredicate, fpred.upper()), self.v, b, loc=source_loc()))
        return Value(arith.cmpi(getattr(arith.CmpIPredicate, ipred), self.v, b, loc=source_loc()))

    def lt(self, o): return self._cmp(o, "ult", "olt")
    def le(self, o): return self._cmp(o, "ule", "ole")
    def gt(self, o): return self._cmp(o, "ugt", "ogt")
    def ge(self, o): return self._cmp(o, "uge", "oge")
    def eq(self, o): return self._cmp(o, "eq", "oeq")
    def ne(self, o): return self._cmp(o, "ne", "one")

    # ---- signed integer reading (see the class docstring) ----------------------------------
    def slt(self, o): return self._cmp(o, "slt", "olt")
    def sle(self, o): return self._cmp(o, "sle", "ole")
    def sgt(self, o): return self._cmp(o, "sgt", "ogt")
    def sge(self, o): return self._cmp(o, "sge", "oge")

    def _int_only(self, o, op, what: str):
        if self.is_float:
            raise TypeError(f"{what} is an integer operation; got {self.type} (floats: /, floor, fmax)")
        return self._bin(o, op, None)

    def sdiv(self, o):
        """Signed quotient rounded toward zero (C's /: -7 sdiv 2 = -3)."""
        return self._int_only(o, arith.divsi, "sdiv")

    def sfloordiv(self, o):
        """Signed quotient rounded toward -inf (Python's //: -7 sfloordiv 2 = -4). Built from divsi
        and remsi (arith.floordivsi has no direct LLVM lowering): q - 1 when the remainder is
        nonzero and its sign differs from the divisor's."""
        return self._round_quotient(o, toward_neg=True, what="sfloordiv")

    def sceildiv(self, o):
        """Signed quotient rounded toward +inf (-7 sceildiv 2 = -3, 7 sceildiv 2 = 4): q + 1 when
        the remainder is nonzero and has the divisor's sign."""
        return self._round_quotient(o, toward_neg=False, what="sceildiv")

    def _round_quotient(self, o, *, toward_neg: bool, what: str):
        b = Value(self._coerce(o))
        q, r = self._int_only(b, arith.divsi, what), self._int_only(b, arith.remsi, what)
        signs_differ = r.slt(0) ^ b.slt(0)
        off_by_one = r.ne(0) & (signs_differ if toward_neg else signs_differ ^ 1)
        return select(off_by_one, q - 1 if toward_neg else q + 1, q)

    def srem(self, o):
        """Signed remainder with the sign of the dividend (C's %: -7 srem 2 = -1); pairs with sdiv."""
        return self._int_only(o, arith.remsi, "srem")

    def ashr(self, o):
        """Arithmetic shift right: the sign bit fills in (-8 ashr 1 = -4); `>>` fills zeros."""
        return self._int_only(o, arith.shrsi, "ashr")

    def smin(self, o): return self._int_only(o, arith.minsi, "smin")
    def smax(self, o): return self._int_only(o, arith.maxsi, "smax")

    def to(self, t, *, signed: bool = False) -> "Value":
        """Convert to type `t` (int widths, int<->float, float widths). An integer source is read
        as unsigned (zero-extended, uitofp) unless `signed` (sign-extended, sitofp); a float source
        becomes a signed integer (fptosi) either way."""
        dst = mlir_type(t)
        src = self.type
        loc = source_loc()
        if src == dst:
            return self
        if self.is_float and _is_float(_elem(dst)):
            wider = _width(_elem(dst)) > _width(_elem(src))
            return Value((arith.extf if wider else arith.truncf)(dst, self.v, loc=loc))
        if not self.is_float and not _is_float(_elem(dst)):
            wider = _width(_elem(dst)) > _width(_elem(src))
            ext = arith.extsi if signed else arith.extui
            return Value((ext if wider else arith.trunci)(dst, self.v, loc=loc))
        if self.is_float:
            return Value(arith.fptosi(dst, self.v, loc=loc))
        return Value((arith.sitofp if signed else arith.uitofp)(dst, self.v, loc=loc))

    def bitcast(self, t) -> "Value":
        """Reinterpret the bits as type `t`; a vector may become one scalar of its total width
        (e.g. vector<2xbf16> -> i32, the packed pair)."""
        dst, loc = mlir_type(t), source_loc()
        if isinstance(self.type, ir.VectorType) and not isinstance(dst, ir.VectorType):
            one = vector.bitcast(ir.VectorType.get([1], dst), self.v, loc=loc)
            return Value(vector.extract(one, dynamic_position=[], static_position=[0], loc=loc))
        return Value(arith.bitcast(dst, self.v, loc=loc))

    def __getitem__(self, i: int) -> "Value":
        """Element `i` of a 1-D vector value (static index)."""
        return Value(vector.extract(self.v, dynamic_position=[], static_position=[i], loc=source_loc()))

    def __bool__(self):
        raise TypeError("an IR value has no Python truth value: use kb.if_(cond) for IR control flow")


def _elem(t: ir.Type) -> ir.Type:
    return ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t


def _width(t: ir.Type) -> int:
    if isinstance(t, ir.IntegerType):
        return ir.IntegerType(t).width
    return {"f32": 32, "bf16": 16, "f16": 16, "f64": 64}[str(t)]


def const(value, t="i32") -> Value:
    ty = mlir_type(t)
    loc = source_loc()
    if isinstance(ty, ir.VectorType):
        et = ir.VectorType(ty).element_type
        attr = ir.DenseElementsAttr.get_splat(ty, ir.FloatAttr.get(et, value) if _is_float(et)
                                              else ir.IntegerAttr.get(et, int(value)))
        return Value(arith.constant(ty, attr, loc=loc))
    if _is_float(ty):
        return Value(arith.constant(ty, float(value), loc=loc))
    return Value(arith.constant(ty, int(value), loc=loc))


def undef(t) -> Value:
    """A value of type `t` with unspecified contents (e.g. an accumulator the next MMA overwrites)."""
    return Value(llvm.mlir_undef(mlir_type(t), loc=source_loc()))


def tree_reduce(values: list, combine) -> Value:
    """Combine `values` pairwise (depth log2(n) instead of a chain of n - 1 dependent ops)."""
    vals = list(values)
    while len(vals) > 1:
        vals = [combine(vals[i], vals[i + 1]) if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
    return vals[0]


def vec(*values: Value) -> Value:
    """A 1-D vector of scalar values of one type."""
    t = ir.VectorType.get([len(values)], values[0].type)
    return Value(vector.from_elements(t, [v.v for v in values], loc=source_loc()))


def select(cond: Value, a, b) -> Value:
    a = a if isinstance(a, Value) else const(a, b.type if isinstance(b, Value) else "i32")
    b = b if isinstance(b, Value) else const(b, a.type)
    return Value(arith.select(cond.v, a.v, b.v, loc=source_loc()))


def umulhi(a: Value, b) -> Value:
    """The high 32 bits of the unsigned 64-bit product of two i32 (PTX mul.hi.u32)."""
    wide = a.to("i64") * Value(a._coerce(b)).to("i64")
    return (wide >> 32).to("i32")


def fast_div(n: Value, multiplier: Value, shift: Value) -> Value:
    """n // d for 0 <= n < 2**31 from the (multiplier, shift) that
    kernels.common.fastdiv.divisor(d) computes on the host: a multiply-high and a shift instead
    of a division, so the quotient of uniform values stays in the uniform datapath (ptxas emits
    integer division by a runtime value on the vector pipes, through the SFU's reciprocal)."""
    return select(multiplier.eq(0), n, umulhi(n, multiplier) >> shift)


def exp2(x: Value) -> Value:
    """2**x (lowers to the hardware's ex2.approx)."""
    return Value(math.exp2(x.v, loc=source_loc()))


def log2(x: Value) -> Value:
    """log2(x) (lowers to the hardware's lg2.approx)."""
    return Value(math.log2(x.v, loc=source_loc()))


def tanh(x: Value) -> Value:
    """tanh(x) (lowers to the hardware's tanh.approx: one SFU op, max relative error 2^-11)."""
    return Value(math.tanh(x.v, loc=source_loc()))


def floor(x: Value) -> Value:
    """Round toward -inf (float; cvt.rmi on NVPTX)."""
    return Value(math.floor(x.v, loc=source_loc()))


def fmax(a: Value, b) -> Value:
    """max(a, b) for floats; a NaN operand yields the other (IEEE maxNum)."""
    return Value(arith.maxnumf(a.v, a._coerce(b), loc=source_loc()))


def fma(a: Value, b, c) -> Value:
    """a * b + c with one rounding."""
    return Value(math.fma(a.v, a._coerce(b), a._coerce(c), loc=source_loc()))


@dataclass(frozen=True)
class PipeState:
    """Stage and phase of one side of a pipeline; immutable, `advance()` returns the next state."""
    stage: Value
    phase: Value
    num_stages: int

    def advance(self) -> "PipeState":
        nxt = self.stage + 1
        wrap = nxt.eq(self.num_stages)
        return PipeState(select(wrap, 0, nxt), select(wrap, self.phase ^ 1, self.phase), self.num_stages)


@dataclass(frozen=True)
class Pipeline:
    """Handle of a declared `fa4.pipeline`; emits the protocol ops with explicit state."""
    name: str
    num_stages: int

    def initial_state(self) -> PipeState:
        return PipeState(const(0), const(0), self.num_stages)

    def state_at(self, count: Value | None) -> PipeState:
        """The state after `count` stages were used (None: the initial state); lets a loop over
        tiles carry one count per pipeline instead of its stage and phase."""
        if count is None:
            return self.initial_state()
        n = self.num_stages
        if n == 1:
            return PipeState(const(0), count & 1, 1)
        return PipeState(count % n, (count // n) & 1, n)

    def producer_acquire(self, s: PipeState):
        fa4.producer_acquire(s.stage, s.phase, pipe=self.name)

    def producer_commit(self, s: PipeState, tx_bytes: int = 0, *, cta_group: int = 1):
        """Arrive on full[stage] expecting `tx_bytes`; `cta_group` 2: the pair's commit (both CTAs execute
        it, the leader arrives, `tx_bytes` counting both CTAs' cta_group = 2 loads)."""
        fa4.producer_commit(s.stage, pipe=self.name, tx_bytes=tx_bytes, **({"cta_group": cta_group} if cta_group != 1 else {}))

    def consumer_wait(self, s: PipeState):
        fa4.consumer_wait(s.stage, s.phase, pipe=self.name)

    def consumer_release(self, s: PipeState):
        fa4.consumer_release(s.stage, pipe=self.name)

    def mma_commit(self, s: PipeState, side: str = "full", *, cta_group: int = 1, multicast: int = 0):
        """tcgen05.commit on `side`[stage]: of this CTA, or (`multicast`, a mask of cluster CTA ranks) of
        each CTA of the mask; `cta_group` 2 tracks the MMAs of a CTA pair."""
        extra = ({"cta_group": cta_group} if cta_group != 1 else {}) | ({"multicast": multicast} if multicast else {})
        fa4.mma_commit(s.stage, pipe=self.name, side=side, **extra)

    def peer_arrive(self, s: PipeState, rank, side: str = "full", scope: str = "cluster"):
        """Arrive once on `side`[stage] of this pipeline in the cluster's CTA `rank` (i32 Value or int); release at
        cluster scope, or at `scope` "cta" (side "empty": fa4.peer_arrive's note)."""
        fa4.peer_arrive(s.stage, rank if isinstance(rank, Value) else const(int(rank)), pipe=self.name, side=side,
                        **({"scope": scope} if scope != "cluster" else {}))

    def peer_store_async(self, s: PipeState, value: Value, remote: Value, rank):
        """st.async of `value` at `remote` (a peer_address in CTA `rank`), its bytes completing on that CTA's
        full[stage] of this pipeline (fa4.peer_store_async): that CTA's commit expects them."""
        fa4.peer_store_async(value.v, remote.v, s.stage, rank if isinstance(rank, Value) else const(int(rank)),
                             pipe=self.name)


def _ir(values) -> list:
    """The MLIR values of Values (other operands as they are)."""
    return [v.v if isinstance(v, Value) else v for v in values]


def _carried(shape: tree.Shape, values: tuple, what: str) -> list:
    """The IR values that `values` (one tree, or its parts as separate arguments) yield, checked
    against the structure they must match."""
    leaves = tree.leaves(values)
    if len(leaves) != shape.num_leaves:
        raise ValueError(f"{what} got {len(leaves)} values, expected {shape.num_leaves} "
                         f"(the structure {shape.describe()}); yield the carried state as one tree "
                         f"or all of its values in order")
    return _ir(leaves)


class _For:
    """`with kb.for_(lo, hi, step, carry=state) as (i, state): ...; loop.yield_(next_state)`.

    The carry is a tree (dsl/tree.py: tuples, NamedTuples, dataclasses such as PipeState); the body
    gets it rebuilt around the loop's block arguments and `results` is it rebuilt around the
    loop's results."""

    def __init__(self, op, shape: tree.Shape):
        self.op, self._shape = op, shape
        self.results = shape.unflatten(Value(r) for r in op.results)
        self._ip = None

    def __enter__(self):
        body = self.op.body
        self._ip = ir.InsertionPoint(body)
        self._ip.__enter__()
        iv = Value(body.arguments[0])
        carried = self._shape.unflatten(Value(a) for a in body.arguments[1:])
        return iv, carried

    def yield_(self, *values):
        scf.YieldOp(_carried(self._shape, values, "for_ yield_"), loc=source_loc())

    def __exit__(self, *exc):
        if exc[0] is None and not self.op.results and not _has_terminator(self.op.body):
            scf.YieldOp([], loc=source_loc())
        self._ip.__exit__(*exc)


class _While:
    """scf.while over a carried tree: `before()` gets it and ends with `condition(cond, state)`
    (what the body gets, and the loop's results when cond is false); `body()` gets it and ends
    with `yield_(state)` for the next test."""

    def __init__(self, carry):
        init, self._shape = tree.flatten(carry)
        init = _ir(init)
        types = [v.type for v in init]
        self.op = scf.WhileOp(types, init, loc=source_loc())
        self.results = self._shape.unflatten(Value(r) for r in self.op.results)
        self._types = types

    @contextlib.contextmanager
    def _region(self, region):
        block = region.blocks.append(*self._types, arg_locs=[source_loc()] * len(self._types))
        with ir.InsertionPoint(block):
            yield self._shape.unflatten(Value(a) for a in block.arguments)

    def before(self):
        return self._region(self.op.before)

    def body(self):
        return self._region(self.op.after)

    def condition(self, cond: "Value", *values):
        scf.ConditionOp(cond.v, _carried(self._shape, values, "while_ condition"), loc=source_loc())

    def yield_(self, *values):
        scf.YieldOp(_carried(self._shape, values, "while_ yield_"), loc=source_loc())


def _has_terminator(block) -> bool:
    ops = list(block.operations)
    return bool(ops) and ops[-1].operation.name in ("scf.yield", "gpu.yield")


class _If:
    """scf.if; `result_types` is a tree of types ("f32", ("f32", 8), an ir.Type, or a value whose
    type it takes), both branches yield a tree of that structure and `results` is it rebuilt
    around the op's results."""

    def __init__(self, cond: Value, result_types):
        specs, self._shape = tree.flatten(result_types, tree.is_type_spec)
        types = [s.type if tree.is_value(s) else mlir_type(s) for s in specs]
        self.op = scf.IfOp(cond.v, types, has_else=bool(types), loc=source_loc())
        self.results = self._shape.unflatten(Value(r) for r in self.op.results)

    @contextlib.contextmanager
    def _branch(self, block):
        with ir.InsertionPoint(block):
            yield
            if not _has_terminator(block):
                scf.YieldOp([], loc=source_loc())

    def then_(self):
        return self._branch(self.op.then_block)

    def else_(self):
        """The else-branch; an scf.if without results gets its else block when this is first called
        (so ifs that never ask for one keep their IR)."""
        if not len(self.op.regions[1].blocks):
            self.op.regions[1].blocks.append()
        return self._branch(self.op.else_block)

    def yield_(self, *values):
        scf.YieldOp(_carried(self._shape, values, "if_ yield_"), loc=source_loc())


@dataclass
class KernelIR:
    """What the builder produces: the module and the launch metadata the runtime needs."""
    name: str
    arch: str
    module: ir.Module
    params: tuple
    block: tuple
    cluster: tuple
    config: dict = field(default_factory=dict)


__all__ = ["KernelIR", "Value", "Pipeline", "PipeState", "const", "select", "exp2", "log2", "floor", "fmax", "fma", "undef", "tree_reduce",
           "mlir_type", "source_loc", "ParamSpec", "TmaSpec", "ELEM_BYTES"]
