"""Rule 7 of fa4-verify-pipelines: each role's uses of each ring, in program order.

A role uses a ring in a sequence: its k-th producer_acquire / consumer_wait must be at position k
(stage k % N, phase (k // N) & 1), and so must its k-th commit and k-th release (stage only). The
walker follows the role's body with a counter per (pipeline, action), as linear forms
(`_ring_forms`), evaluating each op's stage and phase in the scope of its region (`_ring_eval`):

* sequence: each op's position equals its counter (positions of waits compare modulo 2N, stages
  modulo N); a commit comes after its acquire, a release after its wait; a tma_load lands on the
  stage acquired last;
* holds: an MMA that reads a stage of a pipeline's SMEM buffer (the buffer its tma_loads fill)
  holds it, i.e. its role waited for that use and has not released it;
* completion: wgmma groups (sm_90a) stay in flight until `mma_wait_group` retires them, and a
  `consumer_release` of a stage a group in flight reads is a release before MMA completion;
  tcgen05.mma (sm_100a) completes only through `mma_commit`, so a plain `consumer_release` of a
  stage one read is one too.

Branches: a leader's path takes the then-branch of a leader predicate; other conditions are walked
both ways with what they imply (`Scope.facts_of`) and the counters merged (`merge_forms`, or the
value the if yields that advanced with them). Loops: the body is walked once with the counters as
atoms to see what an iteration adds, then with their closed forms (note "scopes" of _ring_eval).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .._mlir import ir
from ._ring_eval import INT, Scope, StageProblem, const_int, is_int, owner, split_condition, where
from ._ring_forms import Lin
from ._util import PassError, attr

KINDS = ("acquire", "commit", "wait", "release")
NOUNS = {"acquire": "producer_acquire", "commit": "commit", "wait": "consumer_wait", "release": "release"}


def kind_of(op: ir.Operation) -> tuple[str, str]:
    """(side, action) of a protocol op: side producer / consumer; action acquire, commit, load, wait,
    release (an `mma_commit` is a commit on side "full", a release on side "empty"; a `peer_arrive`
    likewise)."""
    if op.name == "fa4.mma_commit":
        side = attr(op, "side")
        if side not in ("full", "empty"):
            raise PassError(f"fa4-verify-pipelines: fa4.mma_commit on pipeline '{attr(op, 'pipe')}' has side={side!r}; "
                            "expected \"full\" (producer) or \"empty\" (consumer)", op.location)
        return ("producer", "commit") if side == "full" else ("consumer", "release")
    if op.name == "fa4.peer_arrive":      # an arrival on the peer CTA's barrier (fa4mlir/passes/_cluster_view.py)
        return ("producer", "commit") if attr(op, "side") == "full" else ("consumer", "release")
    return {"fa4.producer_acquire": ("producer", "acquire"), "fa4.producer_commit": ("producer", "commit"),
            "fa4.tma_load": ("producer", "load"), "fa4.tma_gather4": ("producer", "load"),
            "fa4.consumer_wait": ("consumer", "wait"),
            "fa4.consumer_release": ("consumer", "release")}[op.name]


@dataclass(frozen=True)
class Read:
    """An MMA's read of a stage (`pos`, None for a 1-stage ring) of a pipeline's SMEM buffer."""
    pipe: str
    pos: Lin | None
    op: ir.Operation = field(compare=False)


@dataclass
class State:
    counters: dict                                   # (pipe, kind) -> Lin | None (unknown)
    why: dict = field(default_factory=dict)          # (pipe, kind) -> why it is unknown
    groups: list = field(default_factory=list)       # committed wgmma groups maybe in flight, oldest first
    open: list = field(default_factory=list)         # reads of wgmmas not yet committed to a group
    async_reads: list = field(default_factory=list)  # reads of tcgen05.mma (complete via mma_commit only)

    def copy(self) -> "State":
        return State(dict(self.counters), dict(self.why), list(self.groups), list(self.open), list(self.async_reads))

    def mapped(self, fn) -> "State":
        """The state with every form (counters, read positions) passed through fn."""
        def read(r):
            return Read(r.pipe, None if r.pos is None else fn(r.pos), r.op)
        return State({k: None if f is None else fn(f) for k, f in self.counters.items()}, dict(self.why),
                     [tuple(read(r) for r in g) for g in self.groups], [read(r) for r in self.open],
                     [read(r) for r in self.async_reads])

    def reads(self) -> tuple:
        return (tuple(map(frozenset, self.groups)), frozenset(self.open), frozenset(self.async_reads))


def _union_groups(a: list, b: list) -> list:
    """Groups of two paths, aligned from the most recent (mma_wait_group counts from there)."""
    n = max(len(a), len(b))
    a, b = [()] * (n - len(a)) + a, [()] * (n - len(b)) + b
    return [tuple(dict.fromkeys(x + y)) for x, y in zip(a, b)]


def _union(a: list, b: list) -> list:
    return list(dict.fromkeys(a + b))


class RoleWalk:
    """Rule 7 for one role. `checker` is verify_pipelines' _Checker (pipelines, buffers, fail)."""

    def __init__(self, checker, role: ir.Operation):
        self.c, self.role, self.k = checker, role, checker.kernel
        self.rname = attr(role, "name")

    def run(self) -> State:
        state = State({(p, kind): Lin() for p in self.c.pipes for kind in KINDS})
        state = self.walk(self.role.regions[0].blocks[0], Scope(self.k, None, self.role), state)
        self._role_end(state)
        return state

    # ---- walking ------------------------------------------------------------------------------
    def walk(self, block: ir.Block, scope: Scope, st: State) -> State:
        for op in block.operations:
            op = op.operation
            if op not in self.c.relevant:
                continue
            name = op.name
            if name == "scf.if":
                st = self._if(op, scope, st)
            elif name in ("scf.for", "scf.while"):
                st = self._loop(op, scope, st)
            elif name == "fa4.mma":
                self._mma(op, scope, st)
            elif name == "fa4.mma_commit_group":
                st.groups.append(tuple(st.open))
                st.open = []
            elif name == "fa4.mma_wait_group":
                pending = attr(op, "pending")
                st.groups = st.groups[-pending:] if pending else []
            else:
                self._protocol(op, scope, st)
        return st

    def _if(self, op: ir.Operation, scope: Scope, st: State) -> State:
        br = scope.branches(op)
        _, rest = split_condition(op.operands[0])
        then_block = op.regions[0].blocks[0]
        if not rest:             # a leader predicate: the leader's path
            return self.walk(then_block, br.then_scope, st)
        t = self.walk(then_block, br.then_scope, st.mapped(lambda f: f.subst(br.then_scope.own_facts)))
        e = st.mapped(lambda f: f.subst(br.else_scope.own_facts))
        if len(op.regions[1].blocks):
            e = self.walk(op.regions[1].blocks[0], br.else_scope, e)
        out = State({}, {**t.why, **e.why}, _union_groups(t.groups, e.groups), _union(t.open, e.open),
                    _union(t.async_reads, e.async_reads))
        for key, ft in t.counters.items():
            fe, f0 = e.counters[key], st.counters[key]
            # what each branch added (the facts are not applied to the counter's value on entry: a
            # count of loop trips hi - lo is exact only while the loop runs)
            merged = None if f0 is None or ft is None or fe is None else \
                br.merge(ft - f0.subst(br.then_scope.own_facts), fe - f0.subst(br.else_scope.own_facts), 0)
            merged = None if merged is None else f0 + merged
            if merged is None and ft is not None and fe is not None:
                merged = self._via_results(br, key, ft, fe)
                if merged is None:
                    out.why[key] = (f"the branches of the scf.if at {where(op)} leave its {key[1]}s at "
                                    f"{ft.describe()} and {fe.describe()}{_legend(ft, fe)}, and no value the if "
                                    "yields counts the difference: use the ring alike on both paths, or yield a "
                                    "count of the uses")
            out.counters[key] = merged
        return out

    def _via_results(self, br, key, ft: Lin, fe: Lin) -> Lin | None:
        """The counter as a value the if yields plus an offset the same on both paths (a persistent
        tile's count of uses, or the state a branch advanced)."""
        n = attr(self.c.pipes[key[0]], "num_stages")
        for idx, res in enumerate(br.op.results):
            if not is_int(res):
                continue
            for dom in (INT, ("phase", n), ("stage", n)):
                try:
                    value = br.exact(idx, dom)
                    yt, ye = br.yields(idx, dom)
                except StageProblem:
                    continue
                if value is not None and yt is not None and ye is not None and ((ft - yt) - (fe - ye)).zero_mod(0):
                    return value + (ft - yt)
        return None

    def _loop(self, op: ir.Operation, scope: Scope, st: State) -> State:
        lp = scope.loop(op)
        blocks = [r.blocks[0] for r in op.regions]
        # 1. what one iteration adds to each counter
        entry = {key: None if f is None else Lin.of(self.k.entry(op, key)) for key, f in st.counters.items()}
        one = st.copy()
        one.counters = dict(entry)
        for b in blocks:
            one = self.walk(b, lp.pass1, one)
        closed, why = {}, dict(st.why)
        for key, start in entry.items():
            init, end = st.counters[key], one.counters[key]
            if init is None or end is None:
                closed[key] = None
                why.setdefault(key, one.why.get(key, "?"))
            elif (end - start).zero_mod(0):
                closed[key] = init
            else:
                closed[key] = lp.solve_counter(start.atoms[0], init, end)
                if closed[key] is None:
                    why[key] = (f"its {NOUNS[key[1]]}s per iteration of the {op.name} at {where(op)} vary "
                                f"({(end - start).describe()}{_legend(end - start)}) and no value the loop carries "
                                "advances with them: carry a count of the pipeline's uses advanced by exactly the "
                                "uses of each iteration (Pipeline.state_at of it gives the state)")
        # 2. the body with the counters' closed forms; the MMAs in flight when an iteration starts are
        #    those before the loop or those the previous iteration left (i -> i - 1)
        i = lp.iter.atoms[0]
        entry_st = State(closed, why, list(st.groups), list(st.open), list(st.async_reads))
        end_st = self._body(blocks, lp, entry_st)
        prev = end_st.mapped(lambda f: f.subst({i: lp.iter - 1}))
        again = State(closed, why, _union_groups(st.groups, prev.groups), _union(st.open, prev.open),
                      _union(st.async_reads, prev.async_reads))
        if again.reads() != entry_st.reads():
            end_st = self._body(blocks, lp, again)
        last = end_st.mapped(lambda f: lp.exit(f.subst({i: lp.iter - 1})))
        return State({key: lp.exit(f) for key, f in closed.items()}, end_st.why,
                     _union_groups(st.groups, last.groups), _union(st.open, last.open),
                     _union(st.async_reads, last.async_reads))

    def _body(self, blocks, lp, st: State) -> State:
        st = st.copy()
        for b in blocks:
            st = self.walk(b, lp.body, st)
        return st

    # ---- protocol ops ---------------------------------------------------------------------------
    def fail(self, pipe: str, message: str, op: ir.Operation):
        self.c.fail(f"pipeline '{pipe}', role '{self.rname}': {message}", op)

    def _protocol(self, op: ir.Operation, scope: Scope, st: State):
        pipe = attr(op, "pipe")
        n = attr(self.c.pipes[pipe], "num_stages")
        action = kind_of(op)[1]
        if op in self.c.remote and action in ("commit", "release") and self.c.joined(self.rname, pipe, action):
            return      # the other CTA's arrivals on the stage of the role's local op (note "Joined arrivals")
        stage_value = op.operands[2] if action == "load" else op.operands[0]
        try:
            stage = scope.eval(stage_value, ("stage", n))
            pos = stage
            if action in ("acquire", "wait"):
                phase = scope.eval(op.operands[1], ("phase", n))
                if scope.check and stage is not None and phase is not None:
                    _explain_carried(scope, stage + phase)
                pos = None if stage is None or phase is None else self._pair(pipe, stage, phase, n, op, scope.check)
        except StageProblem as exc:
            self.fail(pipe, str(exc), exc.op)
        if action == "load":
            if scope.check and pos is not None and self.c.acquires(self.rname, pipe):
                self._expect(pipe, "load", pos, self._counter(st, pipe, "acquire", op) - 1, n, op)
            return
        key = (pipe, action)
        if scope.check and pos is not None:
            self._expect(pipe, action, pos, self._counter(st, pipe, action, op), n if action in ("commit", "release")
                         else 2 * n, op)
            local = op not in self.c.remote    # one from the other CTA of a pair: its executor's view
            if local and action == "commit" and self.c.acquires(self.rname, pipe):
                self._holds(pipe, st, "acquire", "commit", op, "commits full[stage] of a stage it has not acquired "
                            "(producer_acquire first)")
            if local and action == "release":
                self._holds(pipe, st, "wait", "release", op, "releases empty[stage] of a stage it has not waited "
                            "for (consumer_wait first)")
                if op.name == "fa4.consumer_release":
                    self._released_in_flight(pipe, pos, n, st, op)
        if st.counters[key] is not None:
            st.counters[key] = st.counters[key] + 1

    def _counter(self, st: State, pipe: str, kind: str, op) -> Lin:
        form = st.counters[(pipe, kind)]
        if form is None:
            self.fail(pipe, f"cannot follow the role's {NOUNS[kind]}s to check this {op.name}: "
                            f"{st.why.get((pipe, kind), 'unknown')}", op)
        return form

    def _holds(self, pipe, st: State, first: str, second: str, op, message: str):
        a, b = st.counters[(pipe, first)], st.counters[(pipe, second)]
        if a is not None and b is not None and (a - b).is_const and (a - b).const < 1:
            self.fail(pipe, message, op)

    def _pair(self, pipe: str, stage: Lin, phase: Lin, n: int, op, check: bool) -> Lin | None:
        """The one position a (stage, phase) pair names (None when they disagree and not `check`)."""
        if n == 1:
            return phase
        if stage.is_const and phase.is_const:
            return Lin(stage.const % n + n * ((phase.const // n) % 2))
        d = stage - phase
        if d.zero_mod(2 * n):
            return stage
        if (d - n).zero_mod(2 * n):
            return stage + n
        if not check:
            return None
        loops = [a for a in d.atoms if a.kind == "iter" and phase.coeff(a) == 0 and stage.coeff(a) != 0]
        if loops:
            self.fail(pipe, f"a phase not flipped at wrap-around: the loop ({loops[0].label}) advances the stage "
                            "but yields the phase unchanged, so waits pass on the old phase; yield "
                            "PipeState.advance() of the state the loop used", op)
        self.fail(pipe, f"the stage (position {stage.describe()}) and the phase (position {phase.describe()}) of this "
                        f"{op.name} are not those of one ring position; build them as one PipeState (advance both, "
                        "or Pipeline.state_at(count) for both)", op)

    def _expect(self, pipe: str, action: str, got: Lin, want: Lin, modulus: int, op):
        if (got - want).zero_mod(modulus):
            return
        n = attr(self.c.pipes[pipe], "num_stages")
        noun = {"load": "tma_load", **NOUNS}[action]
        head = (f"this {noun} is at ring position {got.describe()} (stage = position % {n}, phase = "
                f"(position // {n}) & 1) but the role's next {'use' if action == 'load' else noun} is at "
                f"{want.describe()}")
        if action == "load":
            head = f"the tma_load lands on position {got.describe()} but the stage acquired last is {want.describe()}"
        self.fail(pipe, f"{head}{_legend(got, want)}: {self._diagnose(action, got, want, n)}", op)

    def _diagnose(self, action: str, got: Lin, want: Lin, n: int) -> str:
        d = got - want
        if d.is_const and action in ("acquire", "wait") and (d - n).zero_mod(2 * n):
            first_use = want.subst({a: Lin() for a in want.atoms if a.kind == "iter"})
            if first_use.is_const and first_use.const == 0:    # the role's first use, in or before a loop
                if action == "acquire":
                    return ("wrong initial phase: a producer starts at phase 0 (Pipeline.initial_state()); with "
                            "phase 1 its first producer_acquire waits for a release of empty[stage] that never "
                            "comes (deadlock)")
                return ("wrong initial phase: a consumer starts at phase 0 (Pipeline.initial_state()); with phase 1 "
                        "its first consumer_wait passes at once, before the producer filled the stage (it reads "
                        "garbage)")
            return "the phase is one lap off (flipped once too often or too rarely): advance with PipeState.advance()"
        if d.is_const:
            ahead = d.const % n
            if action == "release" and ahead == 1:
                return ("it releases the stage it is using instead of the oldest one it holds (the previous "
                        "stage): releases go in the order of the waits; release the stage whose reads completed")
            return (f"{min(ahead, n - ahead)} stage(s) {'ahead' if ahead <= n - ahead else 'behind'}: each use of the "
                    "ring is the next position (PipeState.advance() once per use)")
        loops = [a for a in d.atoms if a.kind == "iter"]
        if loops:
            i = loops[0]
            return (f"the state advances {got.coeff(i)} position(s) per iteration of the loop ({i.label}) but the role "
                    f"uses the ring {want.coeff(i)} time(s) per iteration there: advance the state once per use")
        return ("the position comes from other values than the role's count of its uses of this ring; derive each "
                "pipeline's state from its own uses (PipeState.advance, or Pipeline.state_at of that pipeline's count)")

    # ---- MMAs -----------------------------------------------------------------------------------
    def _mma(self, op: ir.Operation, scope: Scope, st: State):
        for operand in list(op.operands)[:2]:
            read = self._read(operand, scope, op)
            if read is None:
                continue
            if scope.check:
                self._check_held(read, st, op)
            (st.open if len(op.results) else st.async_reads).append(read)

    def _read(self, operand: ir.Value, scope: Scope, op) -> Read | None:
        """The pipeline stage an MMA operand's SMEM descriptor reads, if it reads a ring's buffer."""
        desc = owner(operand)
        if desc is None or desc.name != "fa4.smem_desc":
            return None
        buf, indices = _address(desc.operands[0])
        pipe = self.c.buffer_pipe.get(buf) if buf is not None else None
        if pipe is None:
            return None
        n = attr(self.c.pipes[pipe], "num_stages")
        if n == 1:
            return Read(pipe, None, op)
        stage = _stage_term(indices, attr(buf, "bytes") // n)
        if stage is None:
            return None
        try:
            pos = scope.eval(stage, ("stage", n))
        except StageProblem as exc:
            self.fail(pipe, str(exc), exc.op)
        return None if pos is None else Read(pipe, pos, op)

    def _check_held(self, read: Read, st: State, op):
        pipe, what = read.pipe, ("a wgmma" if len(op.results) else "a tcgen05.mma")
        if self.rname not in attr(self.c.pipes[pipe], "consumers"):
            self.fail(pipe, f"{what} reads its SMEM buffer, but role '{self.rname}' is not a consumer of the "
                            "pipeline: it never waits for the stages it reads", op)
        wait, rel = st.counters[(pipe, "wait")], st.counters[(pipe, "release")]
        if wait is None or rel is None or not (wait - rel).is_const:
            return
        held, n = (wait - rel).const, attr(self.c.pipes[pipe], "num_stages")
        offset = None if read.pos is None or not (read.pos - rel).is_const else (read.pos - rel).const % n
        if held < 1 or (offset is not None and held < n and offset >= held):
            at = "" if read.pos is None else f" (position {read.pos.describe()}{_legend(read.pos, rel)})"
            self.fail(pipe, f"{what} reads a stage{at} before its consumer_wait: the role holds "
                            f"{max(held, 0)} stage(s) from position {rel.describe()} on; wait on full[stage] "
                            "before the MMA that reads it", op)

    def _released_in_flight(self, pipe: str, stage: Lin, n: int, st: State, op):
        def same(r):
            return r.pipe == pipe and (r.pos is None or (r.pos - stage).zero_mod(n))
        for idx, group in enumerate(st.groups + [st.open]):
            for r in group:
                if same(r):
                    later = ("it is not committed to a group yet" if idx == len(st.groups) else
                             f"its group has {len(st.groups) - 1 - idx} group(s) committed after it")
                    self.fail(pipe, f"release before MMA completion: empty[stage] is released while the wgmma at "
                                    f"{where(r.op)} that reads the stage may still run ({later}, and "
                                    "mma_wait_group(pending=k) retires all but the last k groups); release after "
                                    "an mma_wait_group that retires its group", op)
        for r in st.async_reads:
            if same(r):
                self.fail(pipe, f"release before MMA completion: the tcgen05.mma at {where(r.op)} reads the stage "
                                "and completes asynchronously, so consumer_release frees it too early; release it "
                                "with mma_commit(side=\"empty\"), which arrives once the MMAs completed", op)

    # ---- the end of the role ------------------------------------------------------------------
    def _role_end(self, st: State):
        for (pipe, kind), form in st.counters.items():
            anchor = self.c.first_op(self.rname, pipe, kind)
            if form is None and anchor is not None:
                self.fail(pipe, f"cannot follow the role's {NOUNS[kind]}s to its end: {st.why.get((pipe, kind), '?')}",
                          anchor)
        if self.c.view == "target":    # a pair: what one CTA's threads do balances in its executor view
            return
        for pipe in self.c.pipes:
            for first, second, fix in (("acquire", "commit", "producer_commit"), ("wait", "release", "consumer_release")):
                a, b = st.counters[(pipe, first)], st.counters[(pipe, second)]
                if a is None or b is None or not (a - b).is_const or (a - b).const == 0:
                    continue
                anchor = self.c.first_op(self.rname, pipe, first if (a - b).const > 0 else second)
                if anchor is not None:
                    self.fail(pipe, f"over the whole role there are {a.describe()} {NOUNS[first]}(s) but "
                                    f"{b.describe()} {NOUNS[second]}(s): each needs exactly one "
                                    f"{fix if (a - b).const > 0 else NOUNS[first]}", anchor)


_LEGEND = {"iter": "iterations done of the loop at {}", "arg": "value {} carried by the loop at {}",
           "res": "result {} of the op at {}",
           "ind": "1 when the condition at {} holds", "trip": "the trip count of the loop at {}"}


def _legend(*forms: Lin) -> str:
    """What the atoms in `forms` stand for, for a message: " (i@f.py:12: iterations done of ...)"."""
    seen = {}
    for f in forms:
        for a in f.atoms:
            if a.kind in _LEGEND and a.label not in seen:
                name, _, at = a.label.strip("[]").partition("@")
                index = "".join(ch for ch in name if ch.isdigit())
                seen[a.label] = _LEGEND[a.kind].format(*((index, at) if a.kind in ("arg", "res") else (at,)))
    return f" ({'; '.join(f'{k}: {v}' for k, v in seen.items())})" if seen else ""


def _explain_carried(scope: Scope, form: Lin):
    """A stage or phase that a loop carries without a closed form: raise what is wrong with how the
    loop advances it (a wrap at the wrong count, a phase not flipped), if anything."""
    for a in form.atoms:
        if a.kind == "arg" and a.key[2] != INT:
            s = scope
            while s is not None and (s.owner_loop is None or s.owner_loop.id != a.key[0]):
                s = s.parent
            if s is not None:
                s.owner_loop.explain(a.key[1], a.key[2])


def _address(addr: ir.Value):
    """(the fa4.smem_buffer an address points into, the index values of the GEPs on the way)."""
    indices = []
    while True:
        op = owner(addr)
        if op is None:
            return None, []
        if op.name == "fa4.smem_buffer":
            return op, indices
        if op.name != "llvm.getelementptr":
            return None, []
        indices += list(op.operands)[1:]
        addr = op.operands[0]


def _stage_term(values: list, stage_bytes: int) -> ir.Value | None:
    """x of a term `x * stage_bytes` of the address arithmetic (sums walked through), if exactly one."""
    found, todo = [], list(values)
    while todo:
        op = owner(todo.pop())
        if op is None:
            continue
        if op.name in ("arith.addi", "arith.subi"):
            todo += list(op.operands)
        elif op.name == "arith.muli":
            a, b = op.operands
            found += [x for x, k in ((a, b), (b, a)) if const_int(k) == stage_bytes]
    return found[0] if len(set(found)) == 1 else None


__all__ = ["KINDS", "RoleWalk", "State", "kind_of"]
