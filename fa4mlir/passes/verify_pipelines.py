"""fa4-verify-pipelines: a static check of the staged mbarrier protocol, before anything is lowered.

A protocol bug on a GPU is a hang or silent corruption; here it is a `PassError` that names the
pipeline, the role, the stage and the op's source location. Rules, in the order they are checked:

1. Declarations. Every `fa4.pipeline` has `num_stages >= 1`, at least one consumer role, arrival
   counts >= 1 and a unique name; its producer and consumer roles are `fa4.role` names.
2. Placement. Every protocol op names a declared pipeline and sits inside a `fa4.role`:
   `producer_acquire`, `producer_commit`, `tma_load` and `mma_commit{side="full"}` in the
   pipeline's producer role; `consumer_wait`, `consumer_release` and `mma_commit{side="empty"}` in
   one of its consumer roles.
3. Balance (note "segments"). Per pipeline, per role and per segment: #acquire == #commit and
   #wait == #release, where a commit is `producer_commit` or `mma_commit{full}` and a release is
   `consumer_release` or `mma_commit{empty}`.
4. Liveness. A pipeline someone waits on has a producer that arrives on `full`; a pipeline whose
   producer acquires has a consumer that releases.
5. Expect-tx. Each `producer_commit` announces exactly the bytes of the `tma_load`s on its
   pipeline that follow it in its block (up to the next commit on that pipeline, nested regions
   included): sum of prod(box) * elem_bytes, times the commit's optional `cta_group` (default 1).
   Every `tma_load` follows such a commit and lands on the same stage value.
6. Arrivals. `consumer_arrivals` == the threads arriving on `empty[stage]` per stage, summed over
   the consumer roles; `producer_arrivals` == the threads arriving on `full[stage]` (note
   "arrival counting").
7. Stage advance. Where a stage `s` of a pipeline advances as `PipeState.advance` does
   (`wrap = arith.cmpi eq, s + 1, N`), N equals the pipeline's `num_stages`; the phase that goes
   with `s` becomes `select(wrap, phase ^ 1, phase)` (it flips at wrap-around); a stage and phase
   carried by an scf.for come back through its yield advanced that way, or unchanged together, or
   (the stage) derived from the carried one through nested loops that carry it and scf.if
   branches that each do (a persistent kernel's per-tile state).

A kernel function carrying the unit attribute `fa4.unverified` is skipped: only kernels broken on
purpose to test the debug watchdog carry it (fa4mlir/dialect/query.py: mark_unverified).

Note "segments": a role's body is cut at loops. Each `scf.for` / `scf.while` body is one segment
(counted once: it must balance per iteration); the role body outside its loops is another. Ops in
both branches of an `scf.if` count in the enclosing segment (a leader-elected release counts once).
This accepts the software-pipelined consumer of gemm_sm90: a peeled wait at top level matched by
the final release after the loop, and inside the loop a wait matched by the release of the
previous stage.

Note "arrival counting": the threads executing an op are its role's threads (32 x num_warps),
narrowed by each enclosing `scf.if` whose condition (in its then-branch) is a leader predicate:
`fa4.elect_one` (one per warp), `arith.cmpi eq, tid % M, c` with tid from `fa4.thread_idx` (one per
M threads), `arith.cmpi eq, tid, c` (one), or an `arith.andi` of those (the narrowest). Any other
condition is assumed not to narrow. All arrival sites of one role must agree on the count.
"""
from __future__ import annotations

import math

from .._mlir import ir
from ..dialect.query import UNVERIFIED_ATTR
from ._util import PassError, attr, ops_named

NAME = "fa4-verify-pipelines"
WAIT_OPS = ("fa4.producer_acquire", "fa4.consumer_wait")
PROTOCOL_OPS = ("fa4.producer_acquire", "fa4.producer_commit", "fa4.tma_load", "fa4.consumer_wait",
                "fa4.consumer_release", "fa4.mma_commit")
LOOPS = ("scf.for", "scf.while")


def run(module: ir.Operation) -> None:
    funcs = [op for op in ops_named(module, "llvm.func")
             if "nvvm.kernel" in op.attributes and UNVERIFIED_ATTR not in op.attributes]
    for func in funcs:
        _Checker(func).check()


def _kind(op: ir.Operation) -> tuple[str, str]:
    """(side, action) of a protocol op: side 'producer' / 'consumer'; action acquire/commit/load/wait/release."""
    name = op.name
    if name == "fa4.mma_commit":
        side = attr(op, "side")
        if side not in ("full", "empty"):
            raise PassError(f"{NAME}: fa4.mma_commit on pipeline '{attr(op, 'pipe')}' has side={side!r}; "
                            "expected \"full\" (producer) or \"empty\" (consumer)", op.location)
        return ("producer", "commit") if side == "full" else ("consumer", "release")
    return {"fa4.producer_acquire": ("producer", "acquire"), "fa4.producer_commit": ("producer", "commit"),
            "fa4.tma_load": ("producer", "load"), "fa4.consumer_wait": ("consumer", "wait"),
            "fa4.consumer_release": ("consumer", "release")}[name]


def _role_of(op: ir.Operation) -> ir.Operation | None:
    parent = op.parent
    while parent is not None:
        if parent.name == "fa4.role":
            return parent
        parent = parent.parent
    return None


def _segment(op: ir.Operation, role: ir.Operation) -> ir.Operation:
    """The innermost loop around `op` inside `role`, else the role (note "segments")."""
    parent = op.parent
    while parent is not None and parent != role:
        if parent.name in LOOPS:
            return parent
        parent = parent.parent
    return role


def _where(op: ir.Operation) -> str:
    loc = op.location
    try:
        if loc.is_a_file():
            return f"{loc.filename}:{loc.start_line}"
    except Exception:
        pass
    return str(loc)


def _segment_text(seg: ir.Operation, role: ir.Operation) -> str:
    if seg == role:
        return "the role body outside loops"
    return f"the {seg.name} body at {_where(seg)} (per iteration)"


def _const(value: ir.Value) -> int | None:
    owner = _owner_op(value)
    if owner is not None and owner.name == "arith.constant":
        a = owner.attributes["value"]
        if isinstance(a, ir.IntegerAttr):
            return ir.IntegerAttr(a).value
    return None


def _owner_op(value: ir.Value) -> ir.Operation | None:
    if isinstance(value, ir.BlockArgument) or isinstance(value.owner, ir.Block):
        return None
    owner = value.owner
    return owner.operation if hasattr(owner, "operation") else owner


def _stage_text(value: ir.Value) -> str:
    c = _const(value)
    if c is not None:
        return f"stage {c}"
    try:
        return f"stage {value.get_name()}"
    except Exception:
        return "stage <value>"


def _users(value: ir.Value) -> list[ir.Operation]:
    return [u.owner.operation if hasattr(u.owner, "operation") else u.owner for u in value.uses]


def _is_thread_idx(value: ir.Value) -> bool:
    owner = _owner_op(value)
    return owner is not None and owner.name == "fa4.thread_idx"


def _pred_threads(pred: ir.Value, role_threads: int) -> int:
    """How many threads of a role of `role_threads` threads a predicate lets through (note "arrival counting")."""
    owner = _owner_op(pred)
    if owner is None:
        return role_threads
    if owner.name == "fa4.elect_one":
        return max(1, role_threads // 32)
    if owner.name == "arith.andi":
        return min(_pred_threads(v, role_threads) for v in owner.operands)
    if owner.name == "arith.cmpi" and ir.IntegerAttr(owner.attributes["predicate"]).value == 0:  # eq
        for x, y in (tuple(owner.operands), tuple(owner.operands)[::-1]):
            if _const(y) is None:
                continue
            if _is_thread_idx(x):
                return 1
            xo = _owner_op(x)
            if xo is not None and xo.name == "arith.remui" and _is_thread_idx(xo.operands[0]):
                m = _const(xo.operands[1])
                if m:
                    return max(1, math.ceil(role_threads / m))
    return role_threads


def _arriving_threads(op: ir.Operation, role: ir.Operation) -> int:
    count = 32 * attr(role, "num_warps")
    child, parent = op, op.parent
    while parent is not None and parent != role:
        if parent.name == "scf.if" and _in_then(child, parent):
            count = min(count, _pred_threads(parent.operands[0], 32 * attr(role, "num_warps")))
        child, parent = parent, parent.parent
    return count


def _in_then(child: ir.Operation, ifop: ir.Operation) -> bool:
    """Whether `child` (an op directly inside one of `ifop`'s regions) is in the then-branch."""
    return child.block == ifop.regions[0].blocks[0]


class _Checker:
    def __init__(self, func: ir.Operation):
        self.func = func
        self.pipes: dict[str, ir.Operation] = {}
        self.roles: dict[str, ir.Operation] = {}
        self.ops: list[tuple[ir.Operation, ir.Operation]] = []  # (protocol op, its role)

    def fail(self, msg: str, op: ir.Operation):
        raise PassError(f"{NAME}: {msg}", op.location)

    def check(self):
        self._declarations()
        self._placement()
        self._balance()
        self._liveness()
        self._expect_tx()
        self._arrivals()
        self._stage_advance()

    # 1. declarations -----------------------------------------------------------------------------
    def _declarations(self):
        for role in ops_named(self.func, "fa4.role"):
            name = attr(role, "name")
            if name in self.roles:
                self.fail(f"two fa4.role ops are named '{name}'; role names must be unique", role)
            self.roles[name] = role
        for pipe in ops_named(self.func, "fa4.pipeline"):
            name = attr(pipe, "sym_name")
            if name in self.pipes:
                self.fail(f"pipeline '{name}' is declared twice", pipe)
            self.pipes[name] = pipe
            if attr(pipe, "num_stages") < 1:
                self.fail(f"pipeline '{name}' has num_stages = {attr(pipe, 'num_stages')}; expected >= 1", pipe)
            for key in ("producer_arrivals", "consumer_arrivals"):
                if attr(pipe, key) < 1:
                    self.fail(f"pipeline '{name}' has {key} = {attr(pipe, key)}; an mbarrier needs >= 1 arrival", pipe)
            consumers = attr(pipe, "consumers")
            if not consumers:
                self.fail(f"pipeline '{name}' has no consumer role (consumers = []); name the role(s) that "
                          "wait on it and release its stages", pipe)
            known = ", ".join(sorted(self.roles)) or "none"
            producer = attr(pipe, "producer")
            if producer not in self.roles:
                self.fail(f"pipeline '{name}': producer role '{producer}' is not a declared fa4.role "
                          f"(roles: {known}); declare the role or fix `producer`", pipe)
            for c in consumers:
                if c not in self.roles:
                    self.fail(f"pipeline '{name}': consumer role '{c}' is not a declared fa4.role "
                              f"(roles: {known}); declare the role or fix `consumers`", pipe)

    # 2. placement --------------------------------------------------------------------------------
    def _placement(self):
        for op in ops_named(self.func, *PROTOCOL_OPS):
            pname = attr(op, "pipe")
            role = _role_of(op)
            if role is None:
                self.fail(f"{op.name} on pipeline '{pname}' is outside any fa4.role; protocol ops run "
                          "in the producer or a consumer role", op)
            pipe = self.pipes.get(pname)
            if pipe is None:
                self.fail(f"{op.name} in role '{attr(role, 'name')}' names pipeline '{pname}', which is not "
                          f"declared (declared: {', '.join(sorted(self.pipes)) or 'none'}); declare it with "
                          "fa4.pipeline or fix `pipe`", op)
            side, action = _kind(op)
            rname = attr(role, "name")
            producer, consumers = attr(pipe, "producer"), attr(pipe, "consumers")
            if side == "producer" and rname != producer:
                self.fail(f"a {action} ({op.name}) on pipeline '{pname}' is in the wrong role: role "
                          f"'{rname}', but it is a producer action and the producer role is '{producer}'; "
                          f"move it there (or fix the pipeline's `producer`)", op)
            if side == "consumer" and rname not in consumers:
                self.fail(f"a {action} ({op.name}) on pipeline '{pname}' is in the wrong role: role "
                          f"'{rname}', but it is a consumer action and the consumer roles are "
                          f"{consumers}; move it there (or fix the pipeline's `consumers`)", op)
            self.ops.append((op, role))

    # 4. liveness ---------------------------------------------------------------------------------
    def _liveness(self):
        for pname, pipe in self.pipes.items():
            acts = {_kind(op)[1]: op for op, _ in self.ops if attr(op, "pipe") == pname}
            if "wait" in acts and "commit" not in acts:
                self.fail(f"pipeline '{pname}': role '{attr(_role_of(acts['wait']), 'name')}' waits on "
                          f"full[{_stage_text(acts['wait'].operands[0])}] but the producer role "
                          f"'{attr(pipe, 'producer')}' never commits (producer_commit / mma_commit "
                          "side=\"full\"): the wait can never complete", acts["wait"])
            if "acquire" in acts and "release" not in acts:
                self.fail(f"pipeline '{pname}': role '{attr(pipe, 'producer')}' acquires "
                          f"empty[{_stage_text(acts['acquire'].operands[0])}] but no consumer role releases "
                          "(consumer_release / mma_commit side=\"empty\"): the ring deadlocks after "
                          f"{attr(pipe, 'num_stages')} fills", acts["acquire"])

    # 3. balance ----------------------------------------------------------------------------------
    def _balance(self):
        groups: dict = {}
        for op, role in self.ops:
            seg = _segment(op, role)
            key = (attr(op, "pipe"), attr(role, "name"), seg)
            groups.setdefault(key, []).append(op)
        for (pname, rname, seg), ops in groups.items():
            role = self.roles[rname]
            by = {}
            for op in ops:
                by.setdefault(_kind(op)[1], []).append(op)
            for first, second, fix in (("acquire", "commit", "producer_commit"),
                                       ("wait", "release", "consumer_release")):
                a, b = by.get(first, []), by.get(second, [])
                if len(a) != len(b):
                    anchor = (a or b)[0]
                    missing = fix if len(a) > len(b) else ("producer_acquire" if first == "acquire"
                                                           else "consumer_wait")
                    self.fail(f"pipeline '{pname}', role '{rname}': in {_segment_text(seg, role)} there "
                              f"are {len(a)} {first}(s) but {len(b)} {second}(s) "
                              f"(first at {_stage_text(anchor.operands[0])}); each {first} needs "
                              f"exactly one {second} (missing {missing}?)", anchor)

    # 5. expect-tx --------------------------------------------------------------------------------
    def _expect_tx(self):
        covered: list[ir.Operation] = []
        for op, role in self.ops:
            if op.name != "fa4.producer_commit":
                continue
            pname = attr(op, "pipe")
            loads, after = [], False
            for sib in op.block.operations:
                sib = sib.operation
                if sib == op:
                    after = True
                    continue
                if not after:
                    continue
                if sib.name == "fa4.producer_commit" and attr(sib, "pipe") == pname:
                    break
                # a nested region (a loop) that commits on this pipe starts its own transactions
                if any(attr(x, "pipe") == pname for x in ops_named(sib, "fa4.producer_commit")):
                    break
                loads += [x for x in ops_named(sib, "fa4.tma_load") if attr(x, "pipe") == pname]
            expected = sum(math.prod(attr(x, "box")) * attr(x, "elem_bytes") for x in loads)
            cta_group = attr(op, "cta_group") if "cta_group" in op.attributes else 1
            tx = attr(op, "tx_bytes")
            rname = attr(role, "name")
            if tx != expected * cta_group:
                boxes = " + ".join(f"{'x'.join(map(str, attr(x, 'box')))}x{attr(x, 'elem_bytes')}B" for x in loads)
                self.fail(f"pipeline '{pname}', role '{rname}': producer_commit on "
                          f"{_stage_text(op.operands[0])} expects tx_bytes = {tx}, but the {len(loads)} "
                          f"tma_load(s) after it deliver {expected * cta_group} bytes "
                          f"({boxes or 'none'}{f' x cta_group {cta_group}' if cta_group != 1 else ''}); "
                          "derive tx_bytes from the boxes", op)
            for x in loads:
                covered.append(x)
                if x.operands[2] != op.operands[0]:
                    self.fail(f"pipeline '{pname}', role '{rname}': tma_load lands on "
                              f"{_stage_text(x.operands[2])} but the producer_commit before it is on "
                              f"{_stage_text(op.operands[0])}; load into the stage you committed", x)
        for op, role in self.ops:
            if op.name == "fa4.tma_load" and not any(op == x for x in covered):
                self.fail(f"pipeline '{attr(op, 'pipe')}', role '{attr(role, 'name')}': tma_load on "
                          f"{_stage_text(op.operands[2])} has no producer_commit before it in its block, "
                          "so full[stage] never expects its bytes (missing producer_commit?)", op)

    # 6. arrivals ---------------------------------------------------------------------------------
    def _arrivals(self):
        for pname, pipe in self.pipes.items():
            for action, key, bar in (("commit", "producer_arrivals", "full"),
                                     ("release", "consumer_arrivals", "empty")):
                per_role: dict[str, tuple[int, ir.Operation]] = {}
                for op, role in self.ops:
                    if attr(op, "pipe") != pname or _kind(op)[1] != action:
                        continue
                    rname, n = attr(role, "name"), _arriving_threads(op, role)
                    if rname in per_role and per_role[rname][0] != n:
                        self.fail(f"pipeline '{pname}', role '{rname}': arrivals on {bar}[stage] disagree "
                                  f"between sites: {per_role[rname][0]} thread(s) at "
                                  f"{_where(per_role[rname][1])} and {n} here ({_stage_text(op.operands[0])}); "
                                  "every fill of a stage must see the same arrival count", op)
                    per_role[rname] = (n, op)
                if not per_role:
                    continue
                total = sum(n for n, _ in per_role.values())
                if total != attr(pipe, key):
                    detail = ", ".join(f"role '{r}' {n} thread(s) at {_where(o)}" for r, (n, o) in per_role.items())
                    anchor = next(iter(per_role.values()))[1]
                    self.fail(f"pipeline '{pname}': {key} = {attr(pipe, key)}, but {total} thread(s) arrive on "
                              f"{bar}[stage] per stage ({detail}); set {key}={total} or change which "
                              "threads arrive (leader election)", anchor)

    # 7. stage advance ----------------------------------------------------------------------------
    def _stage_advance(self):
        for op, role in self.ops:
            pname, rname = attr(op, "pipe"), attr(role, "name")
            num_stages = attr(self.pipes[pname], "num_stages")
            stage = op.operands[2] if op.name == "fa4.tma_load" else op.operands[0]
            phase = op.operands[1] if op.name in WAIT_OPS else None
            for cmp in _wrap_compares(stage):
                wrap_at = _const(cmp.operands[1])
                if wrap_at != num_stages:
                    self.fail(f"pipeline '{pname}', role '{rname}': {_stage_text(stage)} wraps at {wrap_at} "
                              f"(arith.cmpi eq, stage + 1, {wrap_at}) but the pipeline has num_stages = "
                              f"{num_stages}; advance with PipeState(..., num_stages={num_stages})", cmp)
                if phase is None:
                    continue
                for sel in _users(cmp.results[0]):
                    if sel.name == "arith.select" and sel.operands[0] == cmp.results[0] and sel.operands[2] == phase:
                        if not _is_flip(sel.operands[1], phase):
                            self.fail(f"pipeline '{pname}', role '{rname}': a phase not flipped at wrap-around: "
                                      f"when {_stage_text(stage)} wraps to 0 the phase must become phase ^ 1 "
                                      "(select(wrap, phase ^ 1, phase)); waits would pass on the old phase",
                                      sel)
            if phase is not None:
                self._loop_carry(op, pname, rname, stage, phase)

    def _loop_carry(self, op, pname, rname, stage, phase):
        """A loop-carried (stage, phase) returns through the yield advanced together (rule 7)."""
        if not (isinstance(stage, ir.BlockArgument) and isinstance(phase, ir.BlockArgument)):
            return
        sa, pa = ir.BlockArgument(stage), ir.BlockArgument(phase)
        loop = sa.owner.owner
        if pa.owner != sa.owner or loop.name != "scf.for":
            return
        yields = [o.operation for o in sa.owner.operations if o.operation.name == "scf.yield"]
        if not yields:
            return
        # scf.for body arguments: induction variable first, then the iter args in yield order
        next_stage = yields[0].operands[sa.arg_number - 1]
        next_phase = yields[0].operands[pa.arg_number - 1]
        wrap = _owner_op(next_stage)
        advances = (wrap is not None and wrap.name == "arith.select"
                    and any(wrap.operands[0] == c.results[0] for c in _wrap_compares(stage)))
        if advances:
            sel = _owner_op(next_phase)
            ok = (sel is not None and sel.name == "arith.select" and sel.operands[0] == wrap.operands[0]
                  and sel.operands[2] == phase and _is_flip(sel.operands[1], phase))
            if not ok:
                self.fail(f"pipeline '{pname}', role '{rname}': a phase not flipped at wrap-around: the loop "
                          f"advances {_stage_text(stage)} but yields the phase without "
                          "select(wrap, phase ^ 1, phase); use PipeState.advance()", yields[0])
        elif not _flows_from(next_stage, stage):
            self.fail(f"pipeline '{pname}', role '{rname}': the loop-carried {_stage_text(stage)} does not "
                      "advance as PipeState.advance() does (stage + 1, wrapping to 0 at num_stages); "
                      "yield PipeState.advance() of the state the loop used", yields[0])


def _flows_from(value: ir.Value, origin: ir.Value, depth: int = 0) -> bool:
    """`value` is `origin` carried on by PipeState.advance steps, the results of nested loops that
    carry it (checked as loops of their own), or scf.if results whose every branch yields such a
    value (a persistent kernel's per-tile state: advanced when the tile had work, else unchanged)."""
    if value == origin:
        return True
    owner = _owner_op(value)
    if owner is None or depth > 32:
        return False
    if owner.name == "arith.select":  # advance: select(stage + 1 == N, 0, stage + 1)
        add = _owner_op(owner.operands[2])
        return (add is not None and add.name == "arith.addi"
                and any(_flows_from(v, origin, depth + 1) for v in add.operands if _const(v) is None))
    index = ir.OpResult(value).result_number
    if owner.name == "scf.for":  # operands: lower, upper, step, then the inits in result order
        return _flows_from(owner.operands[3 + index], origin, depth + 1)
    if owner.name == "scf.if":
        yields = [blk.operations[len(blk.operations) - 1] for region in owner.regions for blk in region.blocks]
        return bool(yields) and all(_flows_from(y.operands[index], origin, depth + 1) for y in yields)
    return False


def _wrap_compares(stage: ir.Value) -> list[ir.Operation]:
    """`arith.cmpi eq, stage + 1, N` ops (PipeState.advance's wrap predicate) built from `stage`."""
    found = []
    for add in _users(stage):
        if add.name != "arith.addi" or 1 not in [_const(v) for v in add.operands]:
            continue
        for cmp in _users(add.results[0]):
            if (cmp.name == "arith.cmpi" and ir.IntegerAttr(cmp.attributes["predicate"]).value == 0
                    and cmp.operands[0] == add.results[0] and _const(cmp.operands[1]) is not None):
                found.append(cmp)
    return found


def _is_flip(value: ir.Value, phase: ir.Value) -> bool:
    owner = _owner_op(value)
    if owner is None or owner.name != "arith.xori":
        return False
    a, b = owner.operands
    return (a == phase and _const(b) == 1) or (b == phase and _const(a) == 1)
