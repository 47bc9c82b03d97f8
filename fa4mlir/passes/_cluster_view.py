"""fa4-verify-pipelines over a CTA pair: one view of the kernel per cluster rank (note "CTA pair" of
verify_pipelines).

A pair kernel (one with fa4.cluster_rank, fa4.peer_arrive, a `cta_group = 2` op or a multicast
mma_commit) is one program that both CTAs of a cluster of two run, its ops split between them by
conditions on the cluster rank (`cluster_rank == c` / `!= c`, alone or and-ed with a leader
election). Each rank t has two views. Its target view is the kernel as CTA t's barriers see it (rules 4,
6 and 7: liveness, arrival counts, ring positions and totals):

* an op that acts on its own CTA (acquire, wait, commit, release, tma_load, a 1-CTA mma) stays
  where rank t executes it (the conjunction of the rank conditions around it holds for t);
* `peer_arrive(stage, c)` stays in the view of rank c, counted once per rank that executes it: an
  arrival on rank c's `full[stage]` (side "full", a commit) or `empty[stage]` (a release);
  `peer_arrive(stage, 1 - cluster_rank)` (the other rank: a crossover's, both CTAs arriving on each
  other's barriers) stays in the view of rank t, counted once per executing rank other than t, as an op
  that lands from the other CTA (Joined arrivals, below); it is in no executor view (its executor's
  barriers never see it), so nothing checks its ring position but its target view's counts: a
  crossover places it right after the local commit or release of the same stage;
* a multicast `mma_commit` stays in the view of every rank of its mask, counted once per rank
  that executes it;
* the pair's `fa4.mma` (`cta_group = 2`) stays in both views (it reads both CTAs' SMEM stages and
  writes both CTAs' TMEM), and must run in the leader only: rank 0 (the ops' `cta_group = 2`
  mma_commits alike);
* its executor view (rules 1, 2, 3 and 5: declarations, placement, balance, fills) keeps what CTA
  t's threads execute, a peer_arrive included, plus a multicast release (mma_commit on "empty")
  whose mask names t: the leader's tensor core frees CTA t's stage on its behalf, so a peer that
  waits for a stage the leader's MMA reads balances its wait with it;
* in both, every rank condition then reads as true (the view's ops are those the condition let through), so
  a leader election and-ed with it counts as before; a kept op in the else-branch of a rank
  condition is not modelled (PassError).

Pair rings (a pipeline with a `producer_commit` of `cta_group = 2`: FlashMLA's K and V loads): both
CTAs' producers acquire their own stage, copy with `cta_group = 2` loads (their bytes complete on the
leader's `full[stage]`) and execute the pair's commit, which only the leader's thread performs,
expecting both CTAs' bytes; the leader's consumer waits for them. So in rank 0's target view the
loads and the commit stay once, in rank 1's they are gone (nothing lands on its `full`); in rank 1's
executor view the leader's `consumer_wait` of a pair ring stays (the leader's barrier waits for rank
1's bytes on its behalf, as a multicast release frees its stage), so its multicast release balances;
the commit's fill (rule 5) counts the executor's own loads times two in each rank's executor view, so
both views pass only when tx_bytes = 2 x rank 0's bytes = 2 x rank 1's bytes = the bytes both CTAs copy,
and every load of a pair commit's fill is `cta_group = 2` (a 1-CTA load would complete on its own
CTA's barrier), and a `cta_group = 2` load only in a pair commit's fill. A rank 1 `cta_group = 2`
load arrives remotely (the cluster_sync rule below).

Gathered pipelines (FlashMLA's p_free / so_ready: the softmax threads of both CTAs arrive on the
leader's barrier, rank 1 by `peer_arrive(stage, 0)` on side "full"; the leader's MMA thread waits
and releases the stage in both CTAs by a multicast commit on "empty"): the leader's `consumer_wait`
waits for rank 1's arrivals on its behalf, so it stays in rank 1's executor view as a pair ring's
does. (A pipeline the leader releases back by peer_arrive instead, as the probe's `ready`, is not one:
its release is not in rank 1's executor view, so neither is the wait.)

Joined arrivals: when a role's threads of both CTAs arrive on the same barrier of one CTA (the
softmax threads' release of S, or their commit of P, on the leader's barrier: a local
consumer_release / producer_commit in rank 0 and a peer_arrive from rank 1), the two ops are one ring
use with arrivals from two CTAs. In the target view rule 6 counts both ops' arrivals, and rule 7 walks
the local op only (the remote one neither advances the role's count nor is position-checked there; its
executor's view checks its position).

The view keeps program order: an op of the peer's branch before the leader's branch happens first
in the view (the leader's MMA reads the peer's stage after the peer's wait). What the views prove is
each CTA's ring protocol with the remote arrivals counted where they land (a release or commit that
lands from the other rank is not held to the "waited / acquired first" rule of 7, which its
executor's view checks); that a peer's wait is
ordered before the leader's MMA through an arrive (the peer_arrive the leader waits for) shows as
a wait with no commit when that arrive is missing. Also checked: with any remote arrival, a
`fa4.cluster_sync` between `fa4.pipeline_init` and the roles (a peer must not arrive on a barrier
before its init).
"""
from __future__ import annotations

from .._mlir import arith, ir
from ._ring_eval import cmpi_pred, conjuncts, const_int, owner
from ..dialect.query import llvm_funcs
from ._util import PassError, attr, ops_named

NAME = "fa4-verify-pipelines"
PAIR = 2
LOAD_OPS = ("fa4.tma_load", "fa4.tma_gather4")
LOCAL_OPS = ("fa4.producer_acquire", "fa4.producer_commit", "fa4.tma_load", "fa4.tma_gather4", "fa4.consumer_wait",
             "fa4.consumer_release", "fa4.mma_commit", "fa4.mma", "fa4.mma_commit_group", "fa4.mma_wait_group",
             "fa4.cp_async_arrive", "fa4.peer_arrive")


def _group(op) -> int:
    return attr(op, "cta_group") if "cta_group" in op.attributes else 1


def is_pair_kernel(func: ir.Operation) -> bool:
    for op in ops_named(func, "fa4.cluster_rank", "fa4.peer_arrive", "fa4.mma", "fa4.mma_commit",
                        "fa4.tmem_alloc", "fa4.producer_commit", *LOAD_OPS):
        if op.name in ("fa4.cluster_rank", "fa4.peer_arrive") or _group(op) == 2 or "multicast" in op.attributes:
            return True
    return False


def _rank_pred(cond: ir.Value):
    """r -> bool for a condition `cluster_rank ==/!= c`, else None."""
    op = owner(cond)
    if op is None or op.name != "arith.cmpi":
        return None
    x, y = op.operands
    if const_int(x) is not None:
        x, y = y, x
    c, xo = const_int(y), owner(x)
    if c is None or xo is None or xo.name != "fa4.cluster_rank" or cmpi_pred(op) not in ("eq", "ne"):
        return None
    return (lambda r: r == c) if cmpi_pred(op) == "eq" else (lambda r: r != c)


def _ranks(op: ir.Operation, func: ir.Operation) -> tuple[set, ir.Operation | None]:
    """(the ranks that execute `op`, the scf.if whose else-branch with a rank condition holds it)."""
    ranks, in_else = set(range(PAIR)), None
    child, parent = op, op.parent
    while parent is not None and parent != func:
        if parent.name == "scf.if":
            preds = [p for p in map(_rank_pred, conjuncts(parent.operands[0])) if p is not None]
            if preds and child.block == parent.regions[0].blocks[0]:
                ranks = {r for r in ranks if all(p(r) for p in preds)}
            elif preds:
                in_else = parent
        child, parent = parent, parent.parent
    return ranks, in_else


def _fail(msg: str, op: ir.Operation):
    raise PassError(f"{NAME}: {msg}", op.location)


def pair_pipes(func: ir.Operation) -> set:
    """The pipelines with a pair commit (producer_commit cta_group = 2): their `full` is the leader's."""
    return {attr(op, "pipe") for op in ops_named(func, "fa4.producer_commit") if _group(op) == 2}


def gathered_pipes(func: ir.Operation) -> set:
    """The pipelines whose leader `full` rank 1 reaches by peer_arrive and whose stage a multicast
    mma_commit naming rank 1 releases (note "Gathered pipelines")."""
    arrived = {attr(op, "pipe") for op in ops_named(func, "fa4.peer_arrive")
               if attr(op, "side") == "full" and const_int(op.operands[1]) == 0}
    released = {attr(op, "pipe") for op in ops_named(func, "fa4.mma_commit")
                if attr(op, "side") == "empty" and "multicast" in op.attributes and attr(op, "multicast") >> 1 & 1}
    return arrived & released


def is_other_rank(value: ir.Value) -> bool:
    """`value` is `1 - cluster_rank` (arith.subi of the constant 1 and fa4.cluster_rank): in a pair, the
    other CTA's rank (a crossover's peer_arrive: both CTAs arrive on each other's barriers)."""
    op = owner(value)
    if op is None or op.name != "arith.subi":
        return False
    rank = owner(op.operands[1])
    return const_int(op.operands[0]) == 1 and rank is not None and rank.name == "fa4.cluster_rank"


def _arrivals_in(op: ir.Operation, ranks: set, t: int) -> int:
    """How many times `op`, executed by `ranks`, acts on rank t's barriers (0: not in t's view)."""
    if (op.name in LOAD_OPS or op.name == "fa4.producer_commit") and _group(op) == 2:
        if op.name == "fa4.producer_commit" and ranks and 0 not in ranks:
            _fail(f"fa4.producer_commit with cta_group = 2 on pipeline '{attr(op, 'pipe')}' runs in CTA rank(s) "
                  f"{sorted(ranks)} only: the pair's commit arrives from the leader (rank 0); let both ranks "
                  f"execute it", op)
        return 1 if ranks and t == 0 else 0       # they land on the leader's full[stage] (note "pair rings")
    if op.name == "fa4.peer_arrive":
        if is_other_rank(op.operands[1]):       # each executing rank arrives on the other's barrier
            return sum(1 for r in ranks if r != t)
        target = const_int(op.operands[1])
        if target is None or not 0 <= target < PAIR:
            _fail(f"fa4.peer_arrive on pipeline '{attr(op, 'pipe')}' to CTA rank "
                  f"{'a non-constant value' if target is None else target}: a pair's peer_arrive names rank 0 "
                  f"or 1 as a constant, or the other rank as 1 - cluster_rank", op)
        return len(ranks) if target == t else 0
    if op.name == "fa4.mma_commit" and "multicast" in op.attributes:
        mask = attr(op, "multicast")
        if not mask or mask >> PAIR:
            _fail(f"fa4.mma_commit on pipeline '{attr(op, 'pipe')}' with multicast mask {mask:#x}: a pair's mask "
                  f"names ranks 0 and 1 (bits 0b11)", op)
        return len(ranks) if mask >> t & 1 else 0
    if op.name == "fa4.mma" and _group(op) == 2:
        return 1 if ranks else 0
    return 1 if t in ranks else 0


def _check_leader(op: ir.Operation, ranks: set) -> None:
    if _group(op) == 2 and op.name in ("fa4.mma", "fa4.mma_commit") and ranks and ranks != {0}:
        _fail(f"{op.name} with cta_group = 2 runs in CTA rank(s) {sorted(ranks)}: the pair's MMAs and their "
              f"commits are issued by the leader only (rank 0); put it under `cluster_rank == 0` (and-ed with a "
              f"leader election)", op)


def _check_cluster_sync(func: ir.Operation, remote: list) -> None:
    """With remote arrivals, a fa4.cluster_sync between fa4.pipeline_init and the roles."""
    if not remote:
        return
    top = [op.operation for op in func.regions[0].blocks[0].operations]
    inits = [i for i, op in enumerate(top) if op.name == "fa4.pipeline_init"]
    roles = [i for i, op in enumerate(top) if op.name == "fa4.warp_roles"]
    if not inits or not roles:
        return
    if not any(top[i].name == "fa4.cluster_sync" for i in range(inits[-1] + 1, roles[0])):
        _fail(f"{remote[0].name} on pipeline '{attr(remote[0], 'pipe')}' arrives on a barrier of the other CTA "
              f"of the pair, but no fa4.cluster_sync separates fa4.pipeline_init from the roles: the peer may "
              f"arrive before the barrier is initialised; add cluster_sync() after pipeline_init()", top[roles[0]])


def _executed_in(op: ir.Operation, ranks: set, t: int, pairs: set) -> int:
    """1 when `op` is in rank t's executor view: t executes it, or it is a multicast release (an
    mma_commit on "empty") whose mask names t: the pair's tensor core frees t's stage for t, or the
    leader's wait on a pair ring or a gathered pipeline (notes "pair rings", "Gathered pipelines")."""
    if op.name == "fa4.mma_commit" and "multicast" in op.attributes and attr(op, "side") == "empty":
        return 1 if ranks and attr(op, "multicast") >> t & 1 else 0
    if op.name == "fa4.consumer_wait" and attr(op, "pipe") in pairs and 0 in ranks:
        return 1
    if op.name == "fa4.peer_arrive" and is_other_rank(op.operands[1]):
        return 0        # it acts on the other rank's barriers only: that rank's target view counts it
    return 1 if t in ranks else 0


def _view(func: ir.Operation, t: int, target: bool):
    """(a rewritten copy of `func`: rank t's target view, or its executor view; op -> arrivals per
    execution; the ops that land here from another rank; the copy's module)."""
    top = func
    while top.parent is not None:
        top = top.parent
    name = attr(func, "sym_name")
    module = top.clone()          # detached, locations kept (printing and parsing it took 20x as long)
    view = next(op for op in llvm_funcs(module) if attr(op, "sym_name") == name)
    multiplicity, remote_ops, remote = {}, [], set()
    pairs = pair_pipes(view) | gathered_pipes(view)
    for op in ops_named(view, *LOCAL_OPS):
        ranks, in_else = _ranks(op, view)
        _check_leader(op, ranks)
        is_remote = (op.name == "fa4.peer_arrive" or (op.name == "fa4.mma_commit" and "multicast" in op.attributes)
                     or (op.name in LOAD_OPS and _group(op) == 2 and ranks - {0}))
        if is_remote:
            remote_ops.append(op)
        n = _arrivals_in(op, ranks, t) if target else _executed_in(op, ranks, t, pairs)
        if n == 0:
            op.erase()
            continue
        if in_else is not None:
            _fail(f"{op.name} sits in the else-branch of the scf.if on the cluster rank at {in_else.location}: "
                  f"the pair's rank views model then-branches only; write the condition for the rank that "
                  f"runs it", op)
        if n > 1:
            multiplicity[op] = n
        if is_remote and (t not in ranks or (op.name == "fa4.peer_arrive" and is_other_rank(op.operands[1]))):
            remote.add(op)
    if t == 0 and target:
        _check_cluster_sync(view, remote_ops)
    for cmp in [c for c in ops_named(view, "arith.cmpi") if _rank_pred(c.result) is not None]:
        with ir.InsertionPoint(cmp), cmp.location:
            true = arith.constant(ir.IntegerType.get_signless(1), 1)
        cmp.result.replace_all_uses_with(true)
    return view, multiplicity, remote, module


def rank_views(func: ir.Operation) -> list:
    """[(rank, "executor" | "target", view, op -> arrivals per execution, ops landing from the other
    rank, the view's module)]: for each rank its executor view (rule 3's balance: what its threads
    do, a multicast release counting for each CTA of its mask) and its target view (rules 4, 6 and 7:
    what acts on its barriers)."""
    return [(t, kind, *_view(func, t, kind == "target")) for t in range(PAIR) for kind in ("executor", "target")]


__all__ = ["is_pair_kernel", "rank_views", "pair_pipes", "gathered_pipes", "PAIR"]
