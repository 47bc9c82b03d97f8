"""Evaluating kernel values as linear forms (`_ring_forms.Lin`), for fa4-verify-pipelines rule 7.

A value is read in one of three domains:

    INT             its integer value (a count, a loop bound)
    ("stage", N)    a stage of an N-stage ring: the value is P mod N, for the position P returned
    ("phase", N)    a phase: the value's low bit is (P // N) & 1, for the position P returned

The stage and phase of a protocol op must name one position, the role's next use of the ring.
Recognised forms are what `PipeState.advance` and `Pipeline.state_at` build (and constants):

    stage   const c (0 <= c < N); count % N; count & (N - 1) (N a power of two);
            select(stage + 1 == N, 0, stage + 1)                                   -> P + 1
    phase   const p; (count // N) & 1, count >> log2(N), count // N; count & 1 when N = 1;
            phase ^ 1 (one lap on); select(stage + 1 == N, phase ^ 1, phase)       -> Q + 1

Anything else is a `StageProblem` that names the op (or, in a pass that only summarises, unknown).

Note "scopes": a `Scope` evaluates the values of one region: a role's body, a loop body (once with
each carried value an atom, once with its closed form, see `_Loop`) or one branch of an scf.if (with
what its condition implies: the "facts", substitutions such as n_blocks := 0 under not(n_blocks > 0)).
Values defined outside its region come from the enclosing scope with the facts applied.

Note "assumptions": sizes and counts are non-negative; an scf.for with step 1 runs hi - lo times
(loops over empty ranges are guarded by their caller, as the shipped kernels guard them by
n_blocks > 0); a value whose computation the rules cannot see through is an atom named by its
structure, so the same computation in two roles is one atom.
"""
from __future__ import annotations

from .._mlir import ir
from ._ring_forms import Atom, Lin, prod, solve_for_atom

INT = "int"
LOOPS = ("scf.for", "scf.while")
_CMPI = {0: "eq", 1: "ne", 2: "slt", 3: "sle", 4: "sgt", 5: "sge", 6: "ult", 7: "ule", 8: "ugt", 9: "uge"}
_PASS_THROUGH = ("arith.extui", "arith.extsi", "arith.trunci", "arith.index_cast", "arith.index_castui")


class StageProblem(Exception):
    """A stage or phase value the ring rules reject: `message` (without the pipeline and role) and
    the op that computed it."""

    def __init__(self, message: str, op: ir.Operation):
        super().__init__(message)
        self.op = op


# ---- IR helpers -----------------------------------------------------------------------------------
def owner(value: ir.Value) -> ir.Operation | None:
    """The op that defines `value` (None for a block argument)."""
    if isinstance(value, ir.BlockArgument) or isinstance(value.owner, ir.Block):
        return None
    o = value.owner
    return o.operation if hasattr(o, "operation") else o


def const_int(value: ir.Value) -> int | None:
    op = owner(value)
    if op is not None and op.name == "arith.constant":
        a = op.attributes["value"]
        if isinstance(a, ir.IntegerAttr):
            v = ir.IntegerAttr(a).value
            return v & 1 if ir.IntegerType(a.type).width == 1 else v
    return None


def cmpi_pred(op: ir.Operation) -> str:
    return _CMPI[ir.IntegerAttr(op.attributes["predicate"]).value]


def is_int(value: ir.Value) -> bool:
    return isinstance(value.type, (ir.IntegerType, ir.IndexType))


def terminator(block: ir.Block) -> ir.Operation:
    ops = block.operations
    return ops[len(ops) - 1].operation


def where(op: ir.Operation) -> str:
    loc = op.location
    try:
        if loc.is_a_file():
            return f"{loc.filename.rsplit('/', 1)[-1]}:{loc.start_line}"
    except Exception:
        pass
    return str(loc)


def conjuncts(cond: ir.Value) -> list:
    """The i1 values whose conjunction `cond` is (arith.andi trees flattened)."""
    op = owner(cond)
    if op is not None and op.name == "arith.andi":
        return [c for x in op.operands for c in conjuncts(x)]
    return [cond]


def _is_tid(value: ir.Value) -> bool:
    op = owner(value)
    return op is not None and op.name == "fa4.thread_idx"


def leader_threads(pred: ir.Value, role_threads: int) -> int | None:
    """How many threads of a role of `role_threads` threads the leader predicate `pred` lets
    through, or None when `pred` is not one: `fa4.elect_one` (one per warp), `tid % M == c` (one
    per M threads), `tid % M < c` / `<= c` (c or c + 1 per M threads), `tid == c` (one),
    `tid < c` (c), with tid from `fa4.thread_idx` (note "arrival counting" of verify_pipelines)."""
    op = owner(pred)
    if op is None:
        return None
    if op.name == "fa4.elect_one":
        return max(1, role_threads // 32)
    if op.name != "arith.cmpi":
        return None
    pred_name, (x, y) = cmpi_pred(op), tuple(op.operands)
    if const_int(x) is not None:    # c > x is x < c, ...
        x, y = y, x
        pred_name = {"ugt": "ult", "sgt": "slt", "uge": "ule", "sge": "sle"}.get(pred_name, pred_name)
    c = const_int(y)
    if c is None or pred_name not in ("eq", "ult", "slt", "ule", "sle"):
        return None
    width = {"eq": 1, "ult": c, "slt": c, "ule": c + 1, "sle": c + 1}[pred_name]
    if width < 1:
        return None
    if _is_tid(x):
        return min(width, role_threads)
    xo = owner(x)
    if xo is not None and xo.name == "arith.remui" and _is_tid(xo.operands[0]):
        m = const_int(xo.operands[1])
        if m and (pred_name != "eq" or c < m):
            return -(-role_threads // m) * min(width, m)
    return None


def _is_true(value: ir.Value) -> bool:
    op = owner(value)
    if op is None or op.name != "arith.constant":
        return False
    a = op.attributes["value"]
    if isinstance(a, ir.BoolAttr):
        return ir.BoolAttr(a).value
    return const_int(value) == 1 and ir.IntegerType(value.type).width == 1


def split_condition(cond: ir.Value) -> tuple[list, list]:
    """(leader conjuncts, the other conjuncts) of a branch condition; a constant true conjunct is
    neither (it holds on every path: a cluster-rank condition in a pair's rank view, _cluster_view)."""
    lead, rest = [], []
    for c in conjuncts(cond):
        if _is_true(c):
            continue
        (lead if leader_threads(c, 1 << 20) is not None else rest).append(c)
    return lead, rest


# ---- atoms of one kernel function ----------------------------------------------------------------
class Kernel:
    """Structural ids of a kernel function's values and the atoms named by them."""

    def __init__(self):
        self._ids: dict = {}
        self._sid: dict = {}
        self._loops_around: dict = {}
        self.branch_results: dict = {}     # res atom of an scf.if result -> (_If, index, domain)

    def _intern(self, canon: tuple) -> int:
        return self._ids.setdefault(canon, len(self._ids))

    def sid(self, value: ir.Value, depth: int = 0) -> int:
        """An id equal for values computed the same way (in any role)."""
        if value in self._sid:
            return self._sid[value]
        if depth > 64:
            canon = ("deep", len(self._sid))
        elif isinstance(value, ir.BlockArgument):
            arg = ir.BlockArgument(value)
            op, n = arg.owner.owner.operation, arg.arg_number
            if op.name == "llvm.func":
                canon = ("param", n)
            elif op.name == "scf.for":
                canon = ("iv", self.loop_id(op)) if n == 0 else ("arg", self.loop_id(op), n - 1)
            elif op.name == "scf.while":
                region = 0 if arg.owner == op.regions[0].blocks[0] else 1
                canon = ("while-arg", self.loop_id(op), region, n)
            else:
                canon = ("block-arg", op.name, n, len(self._sid))
        else:
            op, n = owner(value), ir.OpResult(value).result_number
            if op.name in LOOPS:
                canon = ("res", self.loop_id(op), n)
            elif op.name == "scf.if":
                yields = [terminator(r.blocks[0]).operands[n] for r in op.regions if len(r.blocks)]
                canon = ("if-res", n, self.sid(op.operands[0], depth + 1),
                         *(self.sid(y, depth + 1) if is_int(y) else -1 for y in yields))
            else:
                attrs = tuple(sorted((a, str(op.attributes[a])) for a in op.attributes))
                canon = (op.name, attrs, n, *(self.sid(x, depth + 1) for x in op.operands))
        self._sid[value] = sid = self._intern(canon)
        return sid

    def loop_id(self, loop: ir.Operation) -> int:
        return self._intern(("loop", loop.name, *(self.sid(x) for x in loop.operands if is_int(x))))

    def loops_around(self, op: ir.Operation | None) -> frozenset:
        """The ids of the loops enclosing `op` (and `op` itself when it is one)."""
        if op is None:
            return frozenset()
        if op not in self._loops_around:
            parent = op.parent
            outer = self.loops_around(parent) if parent is not None and parent.name != "llvm.func" else frozenset()
            self._loops_around[op] = outer | ({self.loop_id(op)} if op.name in LOOPS else frozenset())
        return self._loops_around[op]

    def _defining_op(self, value: ir.Value) -> ir.Operation:
        if isinstance(value, ir.BlockArgument):
            return ir.BlockArgument(value).owner.owner.operation
        return owner(value)

    # atoms -----------------------------------------------------------------------------------
    def leaf(self, value: ir.Value) -> Atom:
        op = self._defining_op(value)
        label = f"{op.name.split('.')[-1]}@{where(op)}" if op.name != "llvm.func" else \
            f"param{ir.BlockArgument(value).arg_number}"
        return Atom("leaf", (self.sid(value),), label, self.loops_around(op))

    def ind(self, conds: list) -> Atom:
        """0/1: whether every condition of `conds` holds."""
        ops = [owner(c) for c in conds]
        label = "[" + " & ".join(f"{o.name.split('.')[-1]}@{where(o)}" if o else "?" for o in ops) + "]"
        deps = frozenset().union(*(self.loops_around(self._defining_op(c)) for c in conds))
        return Atom("ind", tuple(sorted(self.sid(c) for c in conds)), label, deps)

    def iter(self, loop: ir.Operation) -> Atom:
        return Atom("iter", (self.loop_id(loop),), f"i@{where(loop)}", self.loops_around(loop))

    def arg(self, loop: ir.Operation, idx: int, dom) -> Atom:
        return Atom("arg", (self.loop_id(loop), idx, dom), f"carried{idx}@{where(loop)}", self.loops_around(loop))

    def res(self, op: ir.Operation, idx: int, dom) -> Atom:
        key = (self.loop_id(op) if op.name in LOOPS else self.sid(op.results[idx]), idx, dom)
        return Atom("res", key, f"result{idx}@{where(op)}", self.loops_around(op.parent))

    def trip(self, loop: ir.Operation) -> Atom:
        return Atom("trip", (self.loop_id(loop),), f"trips@{where(loop)}", self.loops_around(loop.parent))

    def entry(self, loop: ir.Operation, key: tuple) -> Atom:
        return Atom("entry", (self.loop_id(loop), key), f"{key[1]}s@{where(loop)}", self.loops_around(loop))


# ---- scopes --------------------------------------------------------------------------------------
def _modulus(dom) -> int:
    return 0 if dom == INT else dom[1] if dom[0] == "stage" else 2 * dom[1]


def merge_forms(ft, fe, then_facts: dict, else_facts: dict, modulus: int, ind: Atom | None):
    """One form for a value that is `ft` after the then-branch and `fe` after the else-branch, or None:
    the same form; one that the other branch's facts turn into the other; fe + k * [cond]."""
    if ft is None or fe is None:
        return None
    if (ft - fe).zero_mod(modulus):
        return fe
    if (fe.subst(then_facts) - ft).zero_mod(modulus):
        return fe
    if (ft.subst(else_facts) - fe).zero_mod(modulus):
        return ft
    d = ft - fe
    if d.is_const and ind is not None:
        return fe + Lin.of(ind, d.const)
    return None


class Scope:
    """Evaluates the values of one region (note "scopes"); `check` False: an unrecognised stage or
    phase is unknown (None) instead of a StageProblem."""

    def __init__(self, kernel: Kernel, parent: "Scope | None", region_op: ir.Operation,
                 facts: dict | None = None, binder=None, check: bool | None = None):
        self.k, self.parent, self.region_op = kernel, parent, region_op
        self.own_facts = dict(facts or {})
        self.facts = {**(parent.facts if parent else {}), **self.own_facts}
        self.binder = binder
        self.check = (parent.check if parent else True) if check is None else check
        self.owner_loop = None        # the _Loop whose body this scope evaluates
        self.memo: dict = {}
        self._loops: dict = {}
        self._ifs: dict = {}

    # summaries of the loops and branches of this region -------------------------------------
    def loop(self, op: ir.Operation) -> "_Loop":
        if op not in self._loops:
            self._loops[op] = _Loop(self, op)
        return self._loops[op]

    def branches(self, op: ir.Operation) -> "_If":
        if op not in self._ifs:
            self._ifs[op] = _If(self, op)
        return self._ifs[op]

    def problem(self, message: str, op: ir.Operation):
        if self.check:
            raise StageProblem(message, op)
        return None

    # evaluation -------------------------------------------------------------------------------
    def eval(self, value: ir.Value, dom) -> Lin | None:
        key = (value, dom)
        if key not in self.memo:
            if self.parent is not None and not self._inside(value):
                r = self.parent.eval(value, dom)
                r = r.subst(self.own_facts) if r is not None else None
            else:
                r = self._compute(value, dom)
                r = r.subst(self.facts) if r is not None else None
            self.memo[key] = r
        return self.memo[key]

    def _inside(self, value: ir.Value) -> bool:
        op = self.k._defining_op(value)
        while op is not None and op != self.region_op:
            op = op.parent
        return op is not None

    def _compute(self, value: ir.Value, dom):
        if isinstance(value, ir.BlockArgument):
            op = ir.BlockArgument(value).owner.owner.operation
            if op == self.region_op and self.binder is not None:
                return self.binder(value, dom)
            if op.name == "llvm.func":
                return Lin.of(self.k.leaf(value)) if dom == INT else \
                    self.problem("the stage or phase is a kernel parameter", op)
            return None
        op, idx = owner(value), ir.OpResult(value).result_number
        if op.name in LOOPS:
            return self.loop(op).result(idx, dom)
        if op.name == "scf.if":
            return self.branches(op).result(idx, dom)
        if dom == INT:
            return self._int(op, value)
        return self._stage(op, value, dom[1]) if dom[0] == "stage" else self._phase(op, value, dom[1])

    def _int(self, op: ir.Operation, value: ir.Value) -> Lin | None:
        name, x = op.name, list(op.operands)
        c = const_int(value)
        if c is not None:
            return Lin(c)
        if name in ("arith.addi", "arith.subi"):
            a, b = self.eval(x[0], INT), self.eval(x[1], INT)
            return None if a is None or b is None else a + b if name == "arith.addi" else a - b
        if name == "arith.muli":
            for a, b in ((x[0], x[1]), (x[1], x[0])):
                if const_int(b) is not None:
                    f = self.eval(a, INT)
                    return None if f is None else f.scale(const_int(b))
        if name == "arith.shli" and const_int(x[1]) is not None:
            f = self.eval(x[0], INT)
            return None if f is None else f.scale(1 << const_int(x[1]))
        if name in _PASS_THROUGH:
            return self.eval(x[0], INT)
        if name == "arith.select":
            picked = self._select(x, INT)
            return picked if picked is not None else Lin.of(self.k.leaf(value))
        if name in ("arith.cmpi", "arith.andi") and ir.IntegerType(value.type).width == 1:
            return Lin.of(self.k.ind(conjuncts(value)))
        return Lin.of(self.k.leaf(value))

    def _select(self, x: list, dom) -> Lin | None:
        """select(c, a, b) as b + (a - b) * [c] when a - b is constant (or the facts decide c)."""
        ind = self.k.ind(conjuncts(x[0]))
        if ind in self.facts:
            return self.eval(x[1] if self.facts[ind].const else x[2], dom)
        a, b = self.eval(x[1], dom), self.eval(x[2], dom)
        if a is None or b is None or not (a - b).is_const:
            return None
        return b + Lin.of(ind, (a - b).const)

    def _stage(self, op: ir.Operation, value: ir.Value, n: int) -> Lin | None:
        name, x = op.name, list(op.operands)
        c = const_int(value)
        if c is not None:
            if not 0 <= c < n:
                return self.problem(f"stage {c} is out of range: the pipeline has num_stages = {n} (stages "
                                    f"0..{n - 1}); its mbarriers are full[0..{n - 1}] then empty[0..{n - 1}], so "
                                    f"stage {c} names another barrier (full[{n}] is empty[0]); use a stage in "
                                    "range (PipeState / Pipeline.state_at)", op)
            return Lin(c)
        if name in ("arith.remui", "arith.andi") and const_int(x[1]) is not None:
            m = const_int(x[1]) + (1 if name == "arith.andi" else 0)
            if m != n or (name == "arith.andi" and n & (n - 1)):
                span = f"0..{m - 1}" if name == "arith.remui" else f"0..{m - 1} (a mask)"
                return self.problem(f"the stage is computed {'modulo' if name == 'arith.remui' else 'masked to'} "
                                    f"{m if name == 'arith.remui' else m - 1}: it takes values {span}, but the "
                                    f"pipeline has num_stages = {n}; compute it as count % {n} "
                                    "(Pipeline.state_at)", op)
            return self.eval(x[0], INT)
        if name == "arith.select":
            wrap = _wrap_compare(x[0])
            if wrap is not None and const_int(x[1]) == 0 and x[2] == wrap[2].operands[0]:
                stage, m, cmp = wrap
                if m != n:
                    return self.problem(f"the stage wraps at {m} (arith.cmpi eq, stage + 1, {m}) but the pipeline "
                                        f"has num_stages = {n}; advance with PipeState(..., num_stages={n})", cmp)
                s = self.eval(stage, ("stage", n))
                return None if s is None else s + 1
            return self._select(x, ("stage", n)) or self.problem(
                "the stage is a select the verifier cannot follow; derive it with PipeState.advance() or "
                "Pipeline.state_at()", op)
        if name in ("arith.addi", "arith.subi"):
            return self.problem(f"the stage is {'stage + k' if name == 'arith.addi' else 'stage - k'} without "
                                f"wrapping at num_stages = {n}: it leaves 0..{n - 1} (stage {n} names another "
                                f"mbarrier: full[{n}] is empty[0]); advance with PipeState.advance() or take "
                                f"count % {n} (Pipeline.state_at)", op)
        return self.problem(f"the stage is computed by {name} at {where(op)}, which the verifier cannot follow; "
                            "derive it with PipeState.advance() or Pipeline.state_at()", op)

    def _phase(self, op: ir.Operation, value: ir.Value, n: int) -> Lin | None:
        name, x = op.name, list(op.operands)
        c = const_int(value)
        if c is not None:
            return Lin((c & 1) * n)
        if name == "arith.andi" and const_int(x[1]) == 1:
            inner = owner(x[0])
            if inner is not None and inner.name in ("arith.divui", "arith.shrui"):
                return self._laps(inner, n)
            if n == 1:
                return self.eval(x[0], INT)
            return self.problem(f"the phase is count & 1, which flips at every use, but the pipeline has "
                                f"num_stages = {n}: its phase flips once per lap of {n} uses; compute it as "
                                f"(count // {n}) & 1 (Pipeline.state_at)", op)
        if name in ("arith.divui", "arith.shrui"):
            return self._laps(op, n)
        if name == "arith.xori" and const_int(x[1]) == 1:
            q = self.eval(x[0], ("phase", n))
            return None if q is None else q + n
        if name == "arith.select":
            wrap = _wrap_compare(x[0])
            if wrap is not None:
                _, m, cmp = wrap
                if m != n:
                    return self.problem(f"the phase flips when the stage wraps at {m} (arith.cmpi eq, stage + 1, "
                                        f"{m}) but the pipeline has num_stages = {n}; advance with "
                                        f"PipeState(..., num_stages={n})", cmp)
                if not _is_flip(x[1], x[2]):
                    return self.problem("a phase not flipped at wrap-around: when the stage wraps to 0 the phase "
                                        "must become phase ^ 1 (select(wrap, phase ^ 1, phase)); waits would pass "
                                        "on the old phase", op)
                q = self.eval(x[2], ("phase", n))
                return None if q is None else q + 1
            return self._select(x, ("phase", n)) or self.problem(
                "the phase is a select the verifier cannot follow; derive it with PipeState.advance() or "
                "Pipeline.state_at()", op)
        return self.problem(f"the phase is computed by {name} at {where(op)}, which the verifier cannot follow; "
                            "derive it with PipeState.advance() or Pipeline.state_at()", op)

    def _laps(self, op: ir.Operation, n: int) -> Lin | None:
        """count // m (divui) or count >> k (shrui): the laps of an m-stage ring."""
        k = const_int(op.operands[1])
        m = k if op.name == "arith.divui" else (1 << k if k is not None else None)
        if m != n:
            return self.problem(f"the phase counts laps of {m} uses (count // {m}) but the pipeline has "
                                f"num_stages = {n}; compute it as (count // {n}) & 1 (Pipeline.state_at)", op)
        return self.eval(op.operands[0], INT)

    def facts_of(self, op: ir.Operation, taken: bool) -> dict:
        """What the condition of scf.if `op` implies on its then- (taken) or else-branch, for the
        path of a leader thread (leader conjuncts hold)."""
        _, rest = split_condition(op.operands[0])
        if not rest:
            return {}
        whole = self.k.ind(rest)
        if taken:
            facts = {whole: Lin(1), **{self.k.ind([c]): Lin(1) for c in rest}}
            for c in rest:
                cop = owner(c)
                if cop is not None and cop.name == "arith.cmpi" and cmpi_pred(cop) == "eq":
                    k, other = const_int(cop.operands[1]), cop.operands[0]
                    form = self.eval(other, INT) if k is not None else None
                    facts.update(solve_for_atom(form, k) if form is not None else {})
            return facts
        facts = {whole: Lin(0)}
        if len(rest) == 1:
            cop = owner(rest[0])
            if cop is not None and cop.name == "arith.cmpi":
                x, y = cop.operands
                zero_test = {"ne": (x, y), "ugt": (x, y), "sgt": (x, y), "ult": (y, x), "slt": (y, x)}
                pair = zero_test.get(cmpi_pred(cop))
                if pair is not None and const_int(pair[1]) == 0:   # x > 0 is false: x == 0
                    form = self.eval(pair[0], INT)
                    facts.update(solve_for_atom(form, 0) if form is not None else {})
        return facts


def _wrap_compare(cond: ir.Value):
    """(stage, N, cmp op) of `arith.cmpi eq, stage + 1, N` (PipeState.advance's wrap), else None."""
    cmp = owner(cond)
    if cmp is None or cmp.name != "arith.cmpi" or cmpi_pred(cmp) != "eq" or const_int(cmp.operands[1]) is None:
        return None
    add = owner(cmp.operands[0])
    if add is None or add.name != "arith.addi":
        return None
    a, b = add.operands
    stage = a if const_int(b) == 1 else b if const_int(a) == 1 else None
    return None if stage is None else (stage, const_int(cmp.operands[1]), cmp)


def _is_flip(value: ir.Value, phase: ir.Value) -> bool:
    op = owner(value)
    if op is None or op.name != "arith.xori":
        return False
    a, b = op.operands
    return (a == phase and const_int(b) == 1) or (b == phase and const_int(a) == 1)


# ---- branches and loops --------------------------------------------------------------------------
class _If:
    """An scf.if seen from its enclosing scope: a scope per branch and the values it yields."""

    def __init__(self, scope: Scope, op: ir.Operation):
        self.scope, self.op = scope, op
        self.then_scope = Scope(scope.k, scope, op, scope.facts_of(op, True))
        self.else_scope = Scope(scope.k, scope, op, scope.facts_of(op, False))
        _, rest = split_condition(op.operands[0])
        self.ind = scope.k.ind(rest) if rest else None
        self.refs: list = []          # (result index, domain, atom): results without a closed form

    def yields(self, idx: int, dom) -> tuple:
        t, e = (terminator(r.blocks[0]).operands[idx] for r in self.op.regions)
        return self.then_scope.eval(t, dom), self.else_scope.eval(e, dom)

    def merge(self, ft, fe, modulus: int):
        return merge_forms(ft, fe, self.then_scope.own_facts, self.else_scope.own_facts, modulus, self.ind)

    def result(self, idx: int, dom) -> Lin | None:
        yt, ye = self.yields(idx, dom)
        merged = self.merge(yt, ye, _modulus(dom))
        return merged if merged is not None else self.reference(idx, dom, yt, ye)

    def exact(self, idx: int, dom) -> Lin | None:
        """The result as a form equal to it on both paths (not only modulo the ring), or None."""
        yt, ye = self.yields(idx, dom)
        merged = self.merge(yt, ye, 0)
        if merged is not None:
            return merged
        return None if self.merge(yt, ye, _modulus(dom)) is not None else self.reference(idx, dom, yt, ye)

    def reference(self, idx: int, dom, yt, ye) -> Lin | None:
        """A result with no closed form: an atom of its own, or an earlier such result plus the
        difference the two keep on both paths (a stage and its phase: one position)."""
        if yt is None or ye is None:
            return None
        family = dom if dom == INT else dom[1]
        for j, dj, atom in self.refs:
            if (dj if dj == INT else dj[1]) != family:
                continue
            jt, je = self.yields(j, dj)
            if jt is not None and je is not None and ((yt - jt) - (ye - je)).zero_mod(0):
                return Lin.of(atom) + (yt - jt)
        atom = self.scope.k.res(self.op, idx, dom)
        self.refs.append((idx, dom, atom))
        self.scope.k.branch_results[atom] = (self, idx, dom)
        return Lin.of(atom)


class _Loop:
    """An scf.for or scf.while seen from its enclosing scope. `pass1` evaluates its body with every
    carried value an atom (what one iteration does to it); `body` with each carried value's closed
    form at iteration i (`iter`) where there is one: init + d * i when an iteration adds d (loop
    invariant), or a form in i that follows from other carried values (a stage carried one
    iteration behind another); else the carried value stays an atom. After the loop, i becomes the
    trip count and the remaining atoms the loop's results."""

    def __init__(self, scope: Scope, op: ir.Operation):
        k = scope.k
        self.k, self.op, self.outer = k, op, scope
        self.id = k.loop_id(op)
        self.iter = Lin.of(k.iter(op))
        if op.name == "scf.for":
            body = op.regions[0].blocks[0]
            self.iv, self.args = body.arguments[0], list(body.arguments)[1:]
            self.inits, self.yields = list(op.operands)[3:], list(terminator(body).operands)
            self.forwarded, self.after_args = [], []
            step, lo, hi = const_int(op.operands[2]), scope.eval(op.operands[0], INT), scope.eval(op.operands[1], INT)
            self.lo = lo
            self.trip = hi - lo if step == 1 and lo is not None and hi is not None else Lin.of(k.trip(op))
        else:
            before, after = (r.blocks[0] for r in op.regions)
            self.iv, self.lo, self.args, self.inits = None, None, list(before.arguments), list(op.operands)
            self.yields = list(terminator(after).operands)
            self.forwarded, self.after_args = list(terminator(before).operands)[1:], list(after.arguments)
            self.trip = Lin.of(k.trip(op))
        self.pass1 = Scope(k, scope, op, binder=self._bind_atoms, check=False)
        self.body = Scope(k, scope, op, binder=self._bind_closed)
        self.pass1.owner_loop = self.body.owner_loop = self
        self._closed: dict = {}
        self._busy: set = set()

    def _bind(self, value, dom, scope: Scope, carried):
        if self.iv is not None and value == self.iv:    # lo + step * i
            step = const_int(self.op.operands[2])
            if dom != INT:
                return None
            return Lin.of(self.k.leaf(value)) if step is None or self.lo is None else self.lo + self.iter.scale(step)
        if value in self.after_args:
            return scope.eval(self.forwarded[self.after_args.index(value)], dom)
        return carried(self.args.index(value), dom)

    def _bind_atoms(self, value, dom):
        return self._bind(value, dom, self.pass1, lambda i, d: Lin.of(self.k.arg(self.op, i, d)))

    def _bind_closed(self, value, dom):
        return self._bind(value, dom, self.body, lambda i, d: self.closed(i, d) or Lin.of(self.k.arg(self.op, i, d)))

    def closed(self, idx: int, dom) -> Lin | None:
        """Carried value `idx` at iteration i, or None when it has no closed form."""
        key = (idx, dom)
        if key not in self._closed:
            if key in self._busy:
                return None
            self._busy.add(key)
            try:
                init = self.outer.eval(self.inits[idx], dom)
                end = self.pass1.eval(self.yields[idx], dom)
                atom = self.k.arg(self.op, idx, dom)
                self._closed[key] = None if init is None or end is None else self.solve(atom, init, end)
            finally:
                self._busy.discard(key)
        return self._closed[key]

    def explain(self, idx: int, dom) -> None:
        """Raise the StageProblem (if any) of how an iteration advances carried value `idx`, one
        without a closed form."""
        self.body.eval(self.yields[idx], dom)

    def solve(self, atom: Atom, init: Lin, end: Lin) -> Lin | None:
        """Closed form of a quantity that is `atom` when an iteration starts, `end` (in pass-1 terms)
        when it ends and `init` before the loop."""
        step = end - Lin.of(atom)
        if not step.depends_on(self.id):
            return init + prod(step, self.iter)
        others = {a: self.closed(a.key[1], a.key[2]) for a in end.atoms
                  if a.kind == "arg" and a.key[0] == self.id and a != atom}
        if not others or any(v is None for v in others.values()):
            return None
        nxt = end.subst(others)
        i = self.iter.atoms[0]
        if any(self.id in a.deps and a != i for a in nxt.atoms):
            return None
        guess = init + self.iter.scale(nxt.coeff(i))
        return guess if (guess.subst({i: self.iter + 1}) - nxt).zero_mod(0) else None

    def solve_counter(self, atom: Atom, init: Lin, end: Lin) -> Lin | None:
        """`solve` for a count of pipeline uses, or, when an iteration's uses vary, the carried
        integer that advances with them (a persistent kernel's count of its uses) plus an offset."""
        form = self.solve(atom, init, end)
        if form is not None:
            return form
        step = end - Lin.of(atom)
        for i, value in enumerate(self.args):
            if not is_int(value):
                continue
            carried = Lin.of(self.k.arg(self.op, i, INT))
            y, start = self.pass1.eval(self.yields[i], INT), self.outer.eval(self.inits[i], INT)
            if y is not None and start is not None and (y - carried - step).zero_mod(0):
                return (self.closed(i, INT) or carried) + (init - start)
        return None

    def exit(self, form: Lin | None) -> Lin | None:
        """A body form (at iteration i) after the loop: i -> the trip count, carried atoms -> results."""
        if form is None:
            return None
        mapping = {self.iter.atoms[0]: self.trip}
        for a in form.atoms:
            if a.kind == "arg" and a.key[0] == self.id:
                mapping[a] = Lin.of(self.k.res(self.op, a.key[1], a.key[2]))
        return form.subst(mapping)

    def result(self, idx: int, dom) -> Lin | None:
        if self.forwarded:      # scf.while: what the last condition forwards
            return self.exit(self.body.eval(self.forwarded[idx], dom))
        form = self.closed(idx, dom)
        return self.exit(form) if form is not None else Lin.of(self.k.res(self.op, idx, dom))


__all__ = ["INT", "Kernel", "Scope", "StageProblem", "conjuncts", "const_int", "leader_threads", "owner",
           "split_condition", "terminator", "where", "merge_forms"]
