"""fa4-verify-pipelines: a static check of the staged mbarrier protocol, before anything is lowered.

A protocol bug on a GPU is a hang or silent corruption; here it is a `PassError` that names the
pipeline, the role, the stage and the op's source location. Rules, in the order they are checked:

1. Declarations. Every `fa4.pipeline` has `num_stages >= 1`, at least one consumer role, arrival
   counts >= 1 and a unique name; its producer and consumer roles are `fa4.role` names.
2. Placement. Every protocol op names a declared pipeline and sits inside a `fa4.role`:
   `producer_acquire`, `producer_commit`, `tma_load` and `mma_commit{side="full"}` in the
   pipeline's producer role; `consumer_wait`, `consumer_release` and `mma_commit{side="empty"}` in
   one of its consumer roles; `cp_async_arrive` (a net-zero arrival on `full`, not counted in
   rules 3, 6 and 7) in the producer role.
3. Balance (notes "segments", "conditions"). Per pipeline, per role and per segment, on every path:
   #acquire == #commit and #wait == #release, where a commit is `producer_commit` or
   `mma_commit{full}` and a release is `consumer_release` or `mma_commit{empty}`.
4. Liveness. A pipeline someone waits on has a producer that arrives on `full`; a pipeline whose
   producer acquires has a consumer that releases.
5. Fills. The ops of one stage fill (a `producer_acquire`, then its `producer_commit` and
   `tma_load`s in either order: a copy may start before `arrive.expect_tx` on its barrier) sit in
   one block, nested regions without commits of their own included. The commit announces exactly
   the bytes of the fill's loads: sum of prod(box) * elem_bytes (four boxes of one row for a
   `tma_gather4`, which counts as a `tma_load` throughout), times its optional `cta_group`
   (default 1); every load lands on the commit's stage; a load before the fill's acquire may
   overwrite a stage the consumers still read. A load's box and element size are those its TMA
   descriptor was declared with (the kernel parameter's `fa4.tma` attribute, when present).
   A pipeline that `peer_store_async` (st.async from the cluster's other CTA, whose roles are this
   CTA's: a crossover) completes on announces instead the bytes its role's peer_store_asyncs of the
   commit's segment deliver per iteration, summed over the threads executing each, divided by the
   threads executing the commit (note "arrival counting"); such a fill has no tma_load.
6. Arrivals. `consumer_arrivals` == the threads arriving on `empty[stage]` per stage, summed over
   the consumer roles; `producer_arrivals` == the threads arriving on `full[stage]` (note
   "arrival counting").
7. Ring positions (fa4mlir/passes/_ring_walk.py). Every stage index is in [0, num_stages) and
   every stage and phase is built as PipeState.advance / Pipeline.state_at build them (wrapping
   at num_stages, the phase flipping at wrap-around); each role's k-th acquire, commit, wait and
   release of a ring is at position k (stage k % N, phase (k // N) & 1: consumers and producers
   start at phase 0, and a loop advances a state once per use), loop-carried states included and
   persistent kernels' states derived from counts of uses; an MMA reads only stages its role
   waited for and has not released; a `consumer_release` comes after the wgmma groups reading
   the stage retired (`mma_wait_group`), never after a tcgen05.mma read it (that one releases
   with `mma_commit{empty}`); every count can be followed to the role's end (a loop whose uses per
   iteration vary carries a count of them: a persistent kernel's tile counts); and over the whole
   kernel each consumer role waits as many times as the producer commits, where the difference is
   a number, always or on the then-path of a branch whose result the counts depend on (a loop one
   trip too long or too short).

Note "CTA pair": a kernel of a cluster of two CTAs (fa4.cluster_rank, fa4.peer_arrive, a `cta_group
= 2` op or a multicast mma_commit) is checked in two views per cluster rank (passes/_cluster_view.py):
its executor view (what that CTA's threads run, a multicast release counting for each CTA of its
mask) for rules 3 and 5 and the per-role balance of rule 7, its target view (what acts on that CTA's
barriers: a `peer_arrive(stage, c)` is a commit (side "full") or a release ("empty") of rank c, a
multicast `mma_commit` one of each rank of its mask) for rules 4, 6 and 7; conditions on the cluster
rank select the ops of each view and then read as true. Pair MMAs (and their cta_group = 2 commits)
must run in rank 0 only, and a kernel with remote arrivals needs a fa4.cluster_sync between
fa4.pipeline_init and the roles.

A kernel function carrying the unit attribute `fa4.unverified` is skipped: only kernels broken on
purpose to test the debug watchdog carry it (fa4mlir/dialect/query.py: mark_unverified).

Out of static reach (tests/seeded/buggy_kernels.py: OUT_OF_STATIC_REACH): the verifier compares
counts symbolically (_ring_forms), so producer and consumer loops whose trip counts are different
expressions of runtime values (k // bk against ceil(k / bk), persistent tile loops with different
bounds, bounds read from memory) are not compared; they deadlock at run time, where the debug
watchdog (FA4MLIR_DEBUG=1, fa4mlir/passes/_watchdog.py) names the role, pipeline, stage and phase
of the wait that hangs. Position checks themselves need no runtime value: a form that differs from
the expected one by anything but a multiple of the ring's period is an error.

Note "segments": a role's body is cut at loops. Each `scf.for` / `scf.while` body is one segment
(counted once: it must balance per iteration); the role body outside its loops is another. This
accepts the software-pipelined consumer of gemm_sm90: a peeled wait at top level matched by the
final release after the loop, and inside the loop a wait matched by the release of the previous
stage.

Note "conditions": an scf.if whose condition is a leader predicate (note "arrival counting")
counts its then-branch (the leader's path). Any other condition splits the paths: its two
branches must leave the same net count (a release in each branch of an if/else counts once; a
release under a data-dependent condition does not balance), counted over every scf.if of the
segment with the same condition (a wait under `n_blocks > 0` matched by a release under another
`n_blocks > 0`). Leader conjuncts of a condition hold on the leader's path.

Note "arrival counting": the threads executing an op are its role's threads (32 x num_warps),
narrowed by each enclosing `scf.if` whose condition (in its then-branch) is a leader predicate:
`fa4.elect_one` (one per warp), `tid % M == c` (one per M threads), `tid % M < c` (c per M
threads), `tid == c` (one), `tid < c` (c), with tid from `fa4.thread_idx`, or an `arith.andi`
with one of those (the narrowest). Any other condition is assumed not to narrow. All arrival sites
of one role must agree on the count.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .._mlir import ir
from ..dialect.query import UNVERIFIED_ATTR, llvm_funcs
from ._cluster_view import is_pair_kernel, rank_views
from ._ring_eval import Kernel, conjuncts, const_int, leader_threads, owner, split_condition, where
from ._ring_walk import RoleWalk, _legend, kind_of
from ._util import PassError, attr, ops_named

NAME = "fa4-verify-pipelines"
LOAD_OPS = ("fa4.tma_load", "fa4.tma_gather4")     # TMA copies completing on full[stage]; stage is operand 2
PROTOCOL_OPS = ("fa4.producer_acquire", "fa4.producer_commit", *LOAD_OPS, "fa4.consumer_wait",
                "fa4.consumer_release", "fa4.mma_commit", "fa4.peer_arrive")
WALKED_OPS = PROTOCOL_OPS + ("fa4.mma", "fa4.mma_commit_group", "fa4.mma_wait_group")
LOOPS = ("scf.for", "scf.while")
REMOTE_STORE = "fa4.peer_store_async"     # st.async: bytes completing on the peer CTA's full[stage] (rule 5)
_QUERIED = ("fa4.role", "fa4.pipeline", "fa4.cp_async_arrive", REMOTE_STORE) + WALKED_OPS   # what _Checker.named is asked
ALL_RULES = ("_balance", "_liveness", "_fills", "_arrivals", "_positions")     # after declarations, placement
PAIR_RULES = {"executor": ("_balance", "_fills", "_positions"), "target": ("_liveness", "_arrivals", "_positions")}
TMA_ATTR = "fa4.tma"    # on a TMA descriptor parameter: {name, box, elem_bytes} (dsl KernelBuilder.param_tma)


def run(module: ir.Operation) -> None:
    funcs = [op for op in llvm_funcs(module)
             if "nvvm.kernel" in op.attributes and UNVERIFIED_ATTR not in op.attributes]
    for func in funcs:
        if not is_pair_kernel(func):
            _Checker(func).check()
            continue
        for rank, kind, view, multiplicity, remote, _module in rank_views(func):     # note "CTA pair"
            try:
                _Checker(view, multiplicity, remote, kind).check(PAIR_RULES[kind])
            except PassError as exc:
                raise PassError(str(exc).replace(f"{NAME}: ", f"{NAME}: (CTA rank {rank}'s {kind} view of the "
                                                              f"pair) ", 1), exc.loc) from None


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


def _segment_text(seg: ir.Operation, role: ir.Operation) -> str:
    if seg == role:
        return "the role body outside loops"
    return f"the {seg.name} body at {where(seg)} (per iteration)"


def _stage_text(value: ir.Value) -> str:
    c = const_int(value)
    if c is not None:
        return f"stage {c}"
    try:
        return f"stage {value.get_name()}"
    except Exception:
        return "stage <value>"


def _pred_threads(pred: ir.Value, role_threads: int) -> int:
    """How many threads of a role of `role_threads` threads a condition lets through (note "arrival counting")."""
    return min(leader_threads(c, role_threads) or role_threads for c in conjuncts(pred))


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


def _load_bytes(op: ir.Operation) -> int:
    """The bytes a TMA load delivers: its box, four boxes of one row for a gather4 (PTX ISA 5.5.3.4)."""
    rows = 4 if op.name == "fa4.tma_gather4" else 1
    return math.prod(attr(op, "box")) * attr(op, "elem_bytes") * rows


def _store_bytes(op: ir.Operation) -> int:
    """The bytes one thread's peer_store_async stores (its value's type)."""
    t = op.operands[0].type
    if isinstance(t, ir.VectorType):
        v = ir.VectorType(t)
        return v.shape[0] * v.element_type.width // 8
    return (ir.FloatType(t).width if isinstance(t, ir.FloatType) else ir.IntegerType(t).width) // 8


@dataclass
class _Tally:
    """The protocol ops of one segment (rule 3) by (pipeline, path, action), and the condition op of
    each condition key."""
    ops: dict = field(default_factory=dict)
    conditions: dict = field(default_factory=dict)

    def of(self, pname: str, path, *actions: str) -> list:
        return [op for a in actions for op in self.ops.get((pname, path, a), [])]


@dataclass
class _Fill:
    """The ops of one stage fill in one block (rule 5)."""
    acquire: ir.Operation | None = None
    commit: ir.Operation | None = None
    loads: list = field(default_factory=list)


class _Checker:
    def __init__(self, func: ir.Operation, multiplicity: dict | None = None, remote: set | None = None,
                 view: str | None = None):
        self.func = func
        self.view = view                         # a pair's "executor" / "target" view, None for one CTA
        self.multiplicity = multiplicity or {}   # op -> ranks whose execution of it lands here (pair views)
        self.remote = remote or set()            # ops that land here from the other CTA (pair target views)
        self.pipes: dict[str, ir.Operation] = {}
        self.roles: dict[str, ir.Operation] = {}
        self.ops: list[tuple[ir.Operation, ir.Operation]] = []  # (protocol op, its role)
        self.inside: dict = {}             # op -> the protocol ops nested in its regions
        self.kernel = Kernel()
        self.relevant: set = set()         # the ops rule 7 walks: protocol and MMA ops and what holds them
        self.buffer_pipe: dict = {}        # fa4.smem_buffer op -> the pipeline its tma_loads fill
        # (name, op) of every op the rules ask for, in pre-order: one walk of the function serves
        # them all (the checker only reads the IR; a walk per question was most of its time)
        self._walked = [(op.name, op) for op in ops_named(func, *_QUERIED)]

    def named(self, *names: str) -> list[ir.Operation]:
        """ops_named(self.func, *names), from the one walk (names among _QUERIED)."""
        return [op for name, op in self._walked if name in names]

    def fail(self, msg: str, op: ir.Operation):
        raise PassError(f"{NAME}: {msg}", op.location)

    def check(self, rules: tuple = ALL_RULES):
        self._declarations()
        self._placement()
        for rule in rules:
            getattr(self, rule)()

    def acquires(self, rname: str, pname: str) -> bool:
        return self.first_op(rname, pname, "acquire") is not None

    def joined(self, rname: str, pname: str, action: str) -> bool:
        """Role `rname` also does `action` on `pname` locally in this view: a remote op of that action is
        the other CTA's arrivals on the same stage (passes/_cluster_view.py note "Joined arrivals")."""
        return any(attr(role, "name") == rname and attr(op, "pipe") == pname and kind_of(op)[1] == action
                   and op not in self.remote for op, role in self.ops)

    def first_op(self, rname: str, pname: str, action: str) -> ir.Operation | None:
        return next((op for op, role in self.ops if attr(role, "name") == rname and attr(op, "pipe") == pname
                     and kind_of(op)[1] == action), None)

    def _where_role(self, op: ir.Operation) -> str:
        return attr(_role_of(op), "name")

    # 1. declarations -----------------------------------------------------------------------------
    def _declarations(self):
        for role in self.named("fa4.role"):
            name = attr(role, "name")
            if name in self.roles:
                self.fail(f"two fa4.role ops are named '{name}'; role names must be unique", role)
            self.roles[name] = role
        for pipe in self.named("fa4.pipeline"):
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
        for op in self.named(*PROTOCOL_OPS):
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
            side, action = kind_of(op)
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
            parent = op.parent
            while parent is not None and parent != role:
                self.inside.setdefault(parent, []).append(op)
                parent = parent.parent
        for op in self.named("fa4.cp_async_arrive"):   # a net-zero arrival: placement only
            pname, role = attr(op, "pipe"), _role_of(op)
            pipe = self.pipes.get(pname)
            if pipe is None or role is None or attr(role, "name") != attr(pipe, "producer"):
                self.fail(f"fa4.cp_async_arrive on pipeline '{pname}' must sit in that declared pipeline's "
                          f"producer role (it is in {attr(role, 'name') if role is not None else 'no role'})", op)

    # 4. liveness ---------------------------------------------------------------------------------
    def _liveness(self):
        for pname, pipe in self.pipes.items():
            acts = {kind_of(op)[1]: op for op, _ in self.ops if attr(op, "pipe") == pname}
            if "wait" in acts and "commit" not in acts:
                self.fail(f"pipeline '{pname}': role '{self._where_role(acts['wait'])}' waits on "
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
        segments = dict.fromkeys((_segment(op, role), role) for op, role in self.ops)
        for seg, role in segments:
            tally = _Tally()
            for region in seg.regions:
                for block in region.blocks:
                    self._tally(block, None, tally)
            self._check_tally(seg, role, tally)

    def _tally(self, block: ir.Block, path: tuple | None, tally: "_Tally"):
        """Count the protocol ops of `block` by the path they are on (loops excluded: segments of
        their own); a path is None or (condition key, then-branch?) of the innermost scf.if whose
        condition is not a leader predicate (note "conditions")."""
        for op in block.operations:
            op = op.operation
            if op.name in PROTOCOL_OPS and op.name not in LOAD_OPS:
                tally.ops.setdefault((attr(op, "pipe"), path, kind_of(op)[1]), []).append(op)
            elif op.name == "scf.if":
                _, rest = split_condition(op.operands[0])
                if not rest:      # a leader predicate: the leader takes the then-branch
                    branches = [(op.regions[0], path)]
                else:
                    key = tuple(sorted(self.kernel.sid(c) for c in rest))
                    tally.conditions.setdefault(key, owner(rest[0]))
                    branches = [(op.regions[0], (key, True)), (op.regions[1], (key, False))]
                for region, branch_path in branches:
                    for b in region.blocks:
                        self._tally(b, branch_path, tally)
            elif op.name not in LOOPS:
                for region in op.regions:
                    for b in region.blocks:
                        self._tally(b, path, tally)

    def _check_tally(self, seg: ir.Operation, role: ir.Operation, tally: "_Tally"):
        rname = attr(role, "name")
        for pname in sorted({key[0] for key in tally.ops}):
            for first, second, fix in (("acquire", "commit", "producer_commit"), ("wait", "release", "consumer_release")):
                def net(path):
                    return len(tally.of(pname, path, first)) - len(tally.of(pname, path, second))
                counted = {a: len(tally.of(pname, None, a)) for a in (first, second)}
                for key, cond_op in tally.conditions.items():
                    then_net, else_net = net((key, True)), net((key, False))
                    if then_net != else_net:
                        op = (tally.of(pname, (key, True), first, second) + tally.of(pname, (key, False), first, second))[0]
                        self._conditional(pname, rname, first, second, (then_net, else_net), op, cond_op)
                    for a in counted:       # both paths agree: count one
                        counted[a] += len(tally.of(pname, (key, True), a))
                a, b = counted[first], counted[second]
                if a != b:
                    anchor = next(op for key, ops in tally.ops.items() if key[0] == pname for op in ops
                                  if kind_of(op)[1] in (first, second))
                    missing = fix if a > b else ("producer_acquire" if first == "acquire" else "consumer_wait")
                    self.fail(f"pipeline '{pname}', role '{rname}': in {_segment_text(seg, role)} there "
                              f"are {a} {first}(s) but {b} {second}(s) "
                              f"(first at {_stage_text(anchor.operands[0])}); each {first} needs "
                              f"exactly one {second} (missing {missing}?)", anchor)

    def _conditional(self, pname, rname, first, second, nets, op, cond_op):
        what = f"{cond_op.name} at {where(cond_op)}" if cond_op is not None else "a block argument"
        self.fail(f"pipeline '{pname}', role '{rname}': the {kind_of(op)[1]} ({op.name}) runs under a condition "
                  f"({what}) that is not a leader election (elect_one, tid % M == c): on one path the role "
                  f"does {nets[0]:+d} {first}(s) net of {second}s, on the other {nets[1]:+d}, so a thread "
                  f"that takes the other path leaves a {first} without its {second}; do the {kind_of(op)[1]} "
                  "on every path (in both branches) or hoist it out of the condition", op)

    # 5. fills ------------------------------------------------------------------------------------
    def _fills(self):
        tma_params = self._tma_params()
        blocks = list(dict.fromkeys(op.block for op, _ in self.ops
                                    if op.name in ("fa4.producer_acquire", "fa4.producer_commit")))
        covered = set()
        for block in blocks:
            self._fills_of(block, covered)
        for op, role in self.ops:
            if op.name not in LOAD_OPS:
                continue
            if op not in covered:
                self.fail(f"pipeline '{attr(op, 'pipe')}', role '{attr(role, 'name')}': tma_load on "
                          f"{_stage_text(op.operands[2])} has no producer_commit in its fill (the block of "
                          "its producer_acquire), so full[stage] never expects its bytes (missing "
                          "producer_commit?)", op)
            self._check_descriptor(op, role, tma_params)

    def _fills_of(self, block: ir.Block, covered: set):
        fills: dict[str, _Fill] = {}

        def close(pname, by_acquire=False):
            fill = fills.pop(pname, None)
            if fill is not None:
                self._check_fill(pname, fill, by_acquire)
                covered.update(fill.loads if fill.commit is not None else ())

        for op in block.operations:
            op = op.operation
            if op.name == "fa4.producer_acquire":
                close(attr(op, "pipe"), by_acquire=True)
                fills[attr(op, "pipe")] = _Fill(acquire=op)
            elif op.name == "fa4.producer_commit":
                fill = fills.get(attr(op, "pipe"))
                if fill is None or fill.commit is not None:
                    close(attr(op, "pipe"))
                    fill = fills[attr(op, "pipe")] = _Fill()
                fill.commit = op
            elif op.name in LOAD_OPS:
                fills.setdefault(attr(op, "pipe"), _Fill()).loads.append(op)
            elif op in self.inside:
                # a nested region that acquires or commits on a pipe fills its own stages
                nested = self.inside[op]
                own = {attr(x, "pipe") for x in nested if x.name in ("fa4.producer_acquire", "fa4.producer_commit")}
                for pname in own:
                    close(pname)
                for x in nested:
                    if x.name in LOAD_OPS and attr(x, "pipe") not in own:
                        fills.setdefault(attr(x, "pipe"), _Fill()).loads.append(x)
        for pname in list(fills):
            close(pname)

    def _check_fill(self, pname: str, fill: _Fill, by_acquire: bool):
        if by_acquire and fill.acquire is None and fill.commit is not None:
            op = fill.commit
            self.fail(f"pipeline '{pname}', role '{self._where_role(op)}': producer_commit on "
                      f"{_stage_text(op.operands[0])} comes before the producer_acquire of its stage: it arrives "
                      "on full[stage] while the consumers may still hold the stage, and the copies after the "
                      "acquire are not announced; commit after producer_acquire", op)
        if fill.commit is None:
            if fill.loads and by_acquire:
                op = fill.loads[0]
                self.fail(f"pipeline '{pname}', role '{self._where_role(op)}': tma_load on "
                          f"{_stage_text(op.operands[2])} is issued before the producer_acquire of its stage: "
                          "the copy may land while the consumers still read the stage; issue it after "
                          "producer_acquire (before or after producer_commit)", op)
            return              # loads without a commit: reported as uncovered
        op, rname = fill.commit, self._where_role(fill.commit)
        stores = [x for x in self.named(REMOTE_STORE) if attr(x, "pipe") == pname]
        if stores:
            self._check_remote_fill(pname, fill, stores)
            return
        expected = sum(_load_bytes(x) for x in fill.loads)
        cta_group = attr(op, "cta_group") if "cta_group" in op.attributes else 1
        tx = attr(op, "tx_bytes")
        if tx != expected * cta_group:
            boxes = " + ".join(f"{'4 x ' if x.name == 'fa4.tma_gather4' else ''}{'x'.join(map(str, attr(x, 'box')))}"
                              f"x{attr(x, 'elem_bytes')}B" for x in fill.loads)
            self.fail(f"pipeline '{pname}', role '{rname}': producer_commit on "
                      f"{_stage_text(op.operands[0])} expects tx_bytes = {tx}, but the {len(fill.loads)} "
                      f"tma_load(s) of its fill deliver {expected * cta_group} bytes "
                      f"({boxes or 'none'}{f' x cta_group {cta_group}' if cta_group != 1 else ''}); "
                      "derive tx_bytes from the boxes", op)
        for x in fill.loads:
            load_group = attr(x, "cta_group") if "cta_group" in x.attributes else 1
            if load_group != cta_group:
                self.fail(f"pipeline '{pname}', role '{rname}': a {x.name} with cta_group = {load_group} in the fill "
                          f"of a producer_commit with cta_group = {cta_group}: a pair commit (cta_group 2) announces "
                          f"copies completing on the leader's barrier, which only cta_group = 2 loads do; give the "
                          f"loads and their commit the same cta_group", x)
            if x.operands[2] != op.operands[0]:
                self.fail(f"pipeline '{pname}', role '{rname}': tma_load lands on "
                          f"{_stage_text(x.operands[2])} but the producer_commit of its fill is on "
                          f"{_stage_text(op.operands[0])}; load into the stage you committed", x)

    def _check_remote_fill(self, pname: str, fill: _Fill, stores: list):
        """Rule 5 for a pipeline that peer_store_async completes on: the commit's tx_bytes times its threads
        equal the bytes of its role's peer_store_asyncs of its segment times theirs (per iteration)."""
        op, role = fill.commit, _role_of(fill.commit)
        rname, seg = attr(role, "name"), _segment(fill.commit, role)
        if fill.loads:
            self.fail(f"pipeline '{pname}', role '{rname}': a tma_load fills a pipeline that peer_store_async "
                      "completes on; give the remote stores a pipeline of their own", fill.loads[0])
        delivered = 0
        for x in stores:
            if _role_of(x) != role or _segment(x, role) != seg:
                self.fail(f"pipeline '{pname}', role '{rname}': a peer_store_async outside the segment of the "
                          f"producer_commit that announces its bytes ({_segment_text(seg, role)}); store and "
                          "commit once per stage fill, in one loop body", x)
            delivered += _store_bytes(x) * _arriving_threads(x, role)
        threads = _arriving_threads(op, role)
        tx = attr(op, "tx_bytes")
        if tx * threads != delivered:
            self.fail(f"pipeline '{pname}', role '{rname}': producer_commit on {_stage_text(op.operands[0])} "
                      f"expects tx_bytes = {tx} (x {threads} thread(s)), but the peer CTA's "
                      f"{len(stores)} peer_store_async op(s) of its fill deliver {delivered} bytes a stage; "
                      "derive tx_bytes from the stores", op)

    def _tma_params(self) -> dict:
        """Kernel parameter index -> its `fa4.tma` declaration (name, box, elem_bytes)."""
        if "arg_attrs" not in self.func.attributes:
            return {}
        out = {}
        for i, d in enumerate(ir.ArrayAttr(self.func.attributes["arg_attrs"])):
            d = ir.DictAttr(d)
            if TMA_ATTR in d:
                spec = ir.DictAttr(d[TMA_ATTR])
                out[i] = (ir.StringAttr(spec["name"]).value, list(ir.DenseI64ArrayAttr(spec["box"])),
                          ir.IntegerAttr(spec["elem_bytes"]).value)
        return out

    def _check_descriptor(self, op: ir.Operation, role: ir.Operation, tma_params: dict):
        desc = op.operands[0]
        if not isinstance(desc, ir.BlockArgument) or ir.BlockArgument(desc).owner.owner.operation != self.func:
            return
        spec = tma_params.get(ir.BlockArgument(desc).arg_number)
        if spec is None:
            return
        name, box, elem_bytes = spec
        if (attr(op, "box"), attr(op, "elem_bytes")) != (box, elem_bytes):
            load_box = "x".join(map(str, attr(op, "box")))
            self.fail(f"pipeline '{attr(op, 'pipe')}', role '{attr(role, 'name')}': tma_load copies a "
                      f"{load_box} box of {attr(op, 'elem_bytes')}-byte elements ({_load_bytes(op)} bytes), "
                      f"but its descriptor '{name}' was declared with a {'x'.join(map(str, box))} box of "
                      f"{elem_bytes}-byte elements ({math.prod(box) * elem_bytes} bytes): TMA copies the "
                      "descriptor's box, so full[stage] expects bytes that never arrive (or completes early); "
                      "give tma_load the box and element size of its descriptor", op)

    # 6. arrivals ---------------------------------------------------------------------------------
    def _arrivals(self):
        for pname, pipe in self.pipes.items():
            for action, key, bar in (("commit", "producer_arrivals", "full"),
                                     ("release", "consumer_arrivals", "empty")):
                per_role: dict[str, tuple[int, ir.Operation]] = {}
                for op, role in self.ops:
                    if attr(op, "pipe") != pname or kind_of(op)[1] != action:
                        continue
                    rname, n = attr(role, "name"), _arriving_threads(op, role) * self.multiplicity.get(op, 1)
                    if op in self.remote:       # the other CTA's threads of the role: arrivals of their own
                        rname += " (the other CTA)"
                    if rname in per_role and per_role[rname][0] != n:
                        self.fail(f"pipeline '{pname}', role '{rname}': arrivals on {bar}[stage] disagree "
                                  f"between sites: {per_role[rname][0]} thread(s) at "
                                  f"{where(per_role[rname][1])} and {n} here ({_stage_text(op.operands[0])}); "
                                  "every fill of a stage must see the same arrival count", op)
                    per_role[rname] = (n, op)
                if not per_role:
                    continue
                total = sum(n for n, _ in per_role.values())
                if total != attr(pipe, key):
                    detail = ", ".join(f"role '{r}' {n} thread(s) at {where(o)}" for r, (n, o) in per_role.items())
                    anchor = next(iter(per_role.values()))[1]
                    self.fail(f"pipeline '{pname}': {key} = {attr(pipe, key)}, but {total} thread(s) arrive on "
                              f"{bar}[stage] per stage ({detail}); set {key}={total} or change which "
                              "threads arrive (leader election)", anchor)

    # 7. ring positions ---------------------------------------------------------------------------
    def _positions(self):
        for op in self.named(*WALKED_OPS):
            while op is not None and op not in self.relevant and op.name != "llvm.func":
                self.relevant.add(op)
                op = op.parent
        for op in self.named(*LOAD_OPS):
            buf = _buffer_of(op.operands[1])
            if buf is not None:
                self.buffer_pipe[buf] = attr(op, "pipe") if self.buffer_pipe.get(buf, attr(op, "pipe")) == \
                    attr(op, "pipe") else None
        states = {name: RoleWalk(self, role).run() for name, role in self.roles.items()
                  if any(r == role for _, r in self.ops)}
        if self.view != "executor":    # a pair's commits and waits of one ring meet in its target views
            self._totals(states)

    def _totals(self, states: dict):
        """Each consumer role waits as many times as the producer commits (a constant difference is a
        loop one trip too long or too short; see "Out of static reach" for the rest)."""
        for pname, pipe in self.pipes.items():
            producer = states.get(attr(pipe, "producer"))
            commits = producer.counters[(pname, "commit")] if producer else None
            for cname in attr(pipe, "consumers"):
                waits = states[cname].counters[(pname, "wait")] if cname in states else None
                differ = None if commits is None or waits is None else self._difference(waits - commits)
                if differ is None:
                    continue
                d, case = differ
                more, fewer = (cname, attr(pipe, "producer")) if d > 0 else (attr(pipe, "producer"), cname)
                anchor = self.first_op(cname, pname, "wait") if d > 0 else \
                    self.first_op(attr(pipe, "producer"), pname, "commit")
                effect = ("its last wait(s) never complete (deadlock)" if d > 0 else
                          "the producer's last fill(s) are never consumed (their TMA may land after the kernel "
                          "moved on, and a producer that acquires them blocks)")
                self.fail(f"pipeline '{pname}': role '{cname}' waits {waits.describe()} time(s) but role "
                          f"'{attr(pipe, 'producer')}' commits {commits.describe()}{_legend(waits, commits)}:{case} role '{more}' uses the ring "
                          f"{abs(d)} more time(s) than role '{fewer}', so {effect}; make the loops of both roles "
                          "cover the same tiles (a consumer iteration too many, or a tile the producer skips?)",
                          anchor)


    def _difference(self, d) -> tuple[int, str] | None:
        """(waits - commits, the case it holds in) when that is a nonzero number: always, or on the
        then-path of an scf.if whose result the counts depend on (its else-path may be the one where
        a loop does not run, outside the count model; note "assumptions" of _ring_eval)."""
        if d.is_const:
            return (d.const, "") if d.const else None
        for atom in d.atoms:
            if atom not in self.kernel.branch_results:
                continue
            branches, idx, dom = self.kernel.branch_results[atom]
            facts = branches.then_scope.own_facts
            then_value = branches.yields(idx, dom)[0]
            if then_value is None or any(a.kind != "ind" for a in facts):
                continue
            case = d.subst({atom: then_value}).subst(facts)
            if case.is_const and case.const:
                return case.const, f" when the condition of the scf.if at {where(branches.op)} holds,"
        return None


def _buffer_of(addr: ir.Value) -> ir.Operation | None:
    while True:
        op = owner(addr)
        if op is None:
            return None
        if op.name == "fa4.smem_buffer":
            return op
        if op.name != "llvm.getelementptr":
            return None
        addr = op.operands[0]
