"""One CTA's state and its scheduler.

State (what the ops in ops/ read and write):
    smem      bytes; the kernel's `fa4_smem` window starts at SMEM_BASE (1 KiB reserved below it,
              as on sm_90/sm_100), so every planned offset keeps its 1024-byte alignment
    tmem      uint32[128 lanes, 512 columns]; `tmem_cols` is the live allocation (0 = none)
    mbarriers by shared address: phase, pending arrivals, transaction bytes (`MBarrier`)
    async     two engines, each a FIFO of closures: TMA copies (complete their mbarrier's tx) and
              the tensor core (tcgen05.mma in issue order, tcgen05.commit arrives behind them)

Scheduling is cooperative at warp granularity: a warp runs until it yields a `Wait` whose
condition does not hold (mbarrier try_wait, named barrier, ...), then the next warp runs. When no
warp can run, the async engines make progress; when they are empty too, it is a deadlock. The
policy decides when the engines run: "lazy" (only when every warp waits: the latest completion
the protocol allows), "eager" (after every warp step: the earliest), "random" (seeded: warps in a
random order, engines at random points, one job at a time). `schedule` serves one CTA and a
cluster's CTAs alike (interpret/cluster.py runs a cluster's warps as one set).
"""
from __future__ import annotations

import collections
import time

import numpy as np

from .faults import BarrierFault, Deadlock, ExitFault, Fault, FenceFault, InterpretError, RaceFault
from .hb import HappensBefore
from .numeric import LANES, WARP
from .program import Wait, run_block

SMEM_BASE = 0x400
TMEM_LANES, TMEM_COLUMNS = 128, 512
POLICIES = ("lazy", "eager", "random")


class MBarrier:
    """An mbarrier object (PTX ISA §9.7.13.15): the current phase completes when its pending
    arrival count and its transaction count both reach zero; then the phase number advances and the
    arrival count resets. try_wait.parity(p) succeeds when the phase of parity p has completed,
    i.e. the current phase's parity differs from p."""

    __slots__ = ("addr", "count", "pending", "tx", "phase", "name", "vc", "vc_done", "init_at")

    def __init__(self, addr: int, count: int, name: str, init_at=(0, 0)):
        self.addr, self.count, self.name = addr, count, name
        self.init_at = init_at              # (agent, epoch) of the mbarrier.init (cluster.check_init_ordered)
        self.pending, self.tx, self.phase = count, 0, 0
        self.vc = self.vc_done = None       # happens-before: what the current / last completed phase publishes

    def _join(self, vc) -> None:
        if vc is not None:
            self.vc = vc.copy() if self.vc is None else np.maximum(self.vc, vc)

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count
            self.vc_done, self.vc = self.vc, None

    def arrive(self, n: int = 1, vc=None) -> None:
        if n > self.pending:
            raise BarrierFault(f"mbarrier {self.name}: {n} arrival(s) with {self.pending} pending of {self.count} "
                               f"(phase {self.phase}): more arrivals than its count")
        self._join(vc)
        self.pending -= n
        self._complete()

    def expect_tx(self, nbytes: int) -> None:
        self.tx += nbytes

    def complete_tx(self, nbytes: int, vc=None) -> None:
        self._join(vc)
        self.tx -= nbytes
        self._complete()

    def passed(self, parity: int) -> bool:
        return (self.phase & 1) != parity

    def describe(self) -> str:
        return f"{self.name} (phase {self.phase}, pending {self.pending}/{self.count}, tx {self.tx})"


class WarpGroup:
    """The wgmma groups of one warpgroup (warps 4g .. 4g + 3): per warp the groups it committed,
    per group the shared bytes its warps' shares read, and how many groups are retired."""

    def __init__(self, cta: "CTA"):
        self.cta = cta
        self.committed = [0, 0, 0, 0]
        self.reads: dict = collections.defaultdict(list)
        self.vc: dict = {}              # group -> the join of its four warps' vectors at their commit
        self.retired = 0

    def commit(self, quarter: int, flats: list, vc) -> None:
        g = self.committed[quarter]
        self.reads[g].extend(flats)
        self.vc[g] = vc.copy() if g not in self.vc else np.maximum(self.vc[g], vc)
        self.committed[quarter] += 1

    def retire(self, upto: int) -> None:
        while self.retired < upto:
            for flat in self.reads.pop(self.retired, []):
                self.cta.smem_readers[flat] -= 1
            self.retired += 1


class Warp:
    __slots__ = ("cta", "wid", "tid", "env", "gen", "wait", "done", "role", "ops", "pending_ld", "pending_st",
                 "wgmma_fenced", "wgmma_open", "wgmma_waited")

    def __init__(self, cta: "CTA", wid: int, env: list, body):
        self.cta, self.wid = cta, wid
        self.tid = (LANES + WARP * wid).astype(np.int32)
        self.env = env
        self.gen = run_block(body, env, np.ones(WARP, bool), self)
        self.wait = None
        self.done = False
        self.role = None
        self.ops = 0
        self.pending_ld: list[int] = []   # slots holding tcgen05.ld results not yet waited
        self.pending_st = 0               # tcgen05.st not yet waited
        self.wgmma_fenced = False         # a wgmma.fence since the last wgmma.wait_group
        self.wgmma_open: list = []        # shared addresses read by wgmma not yet committed
        self.wgmma_waited = 0             # groups this warp's own wgmma.wait_group retired

    # ---- wgmma (ops/wgmma.py): the fence rule and the shared memory in flight ---------------------
    def check_wgmma_fenced(self, what: str) -> None:
        if not self.wgmma_fenced:
            raise self.fault(FenceFault, f"{what} without a wgmma.fence since this warp's last wgmma.wait_group "
                                         f"(or its start): the accumulator registers may be read stale")

    def wgmma_reads(self, flat: np.ndarray, what: str) -> None:
        """Shared bytes a wgmma of this warp reads until a wait_group retires its group: `flat`, the
        sorted distinct byte addresses (ops/wgmma.read_span)."""
        self.cta.hb.check_async_proxy_read(flat, what, reader=self.cta.hb.g(self.wid))     # wgmma: async proxy
        self.cta.hb.warp_access(self, self.cta.hb.smem, flat, False, what)
        self.cta.smem_readers[flat] += 1
        self.wgmma_open.append(flat)

    def wgmma_group(self) -> int:
        """The group the wgmma this warp issues now belongs to (the next it commits)."""
        return self.cta.warpgroup(self.wid).committed[self.wid % 4]

    def wgmma_commit(self) -> None:
        self.cta.warpgroup(self.wid).commit(self.wid % 4, self.wgmma_open, self.cta.hb.vc[:, self.cta.hb.g(self.wid)])
        self.wgmma_open = []

    def wgmma_wait(self, pending: int):
        """Generator: wgmma.wait_group `pending`. A wgmma is one warpgroup operation, so its group
        is complete once all four warps issued their share: the wait blocks until they have, then
        retires the group for the whole warpgroup (its shared memory may be reused)."""
        wg = self.cta.warpgroup(self.wid)
        target = wg.committed[self.wid % 4] - pending
        if min(wg.committed) < target:
            yield Wait(lambda: min(wg.committed) >= target,
                       lambda: f"wgmma.wait_group {pending}: warpgroup {self.wid // 4} warps committed "
                               f"{wg.committed} group(s), this one waits for {target}")
        wg.retire(target)
        self.wgmma_waited = max(self.wgmma_waited, target)
        if target > 0:       # the warpgroup's shares completed: what each warp read is ordered before
            self.cta.hb.acquire(self.wid, wg.vc[target - 1])
        self.wgmma_fenced = False

    def fault(self, exc_type, message: str):
        return exc_type(message, warp=self.wid, role=self.role)


class CTA:
    """One CTA of `kernel` (an interpret.Kernel) at `block_idx` of `grid`, with the launch's values."""

    def __init__(self, kernel, args: list, block_idx, grid, policy: str = "lazy", seed: int = 0, *,
                 rank: int = 0, ranks: int = 1, shared_hb: HappensBefore | None = None):
        """`rank` of `ranks`: its place in a cluster (interpret/cluster.py runs a cluster's CTAs
        together; `shared_hb`: rank 0's clocks, which the cluster's CTAs share)."""
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r}: expected one of {POLICIES}")
        self.kernel = kernel
        self.block_idx, self.grid = tuple(block_idx), tuple(grid)
        self.policy = policy
        self.rng = np.random.default_rng(seed)
        self.smem = np.zeros(SMEM_BASE + kernel.smem_bytes, np.uint8)
        self.smem_readers = np.zeros(self.smem.size, np.int16)   # wgmma / TMA stores in flight reading each byte
        self.warpgroups: dict[int, WarpGroup] = {}
        nwarps = kernel.block[0] * kernel.block[1] * kernel.block[2] // WARP
        self.rank, self.cluster = rank, None     # the cluster (interpret/cluster.py) sets itself
        self.hb = HappensBefore(nwarps, self.smem.size, (TMEM_LANES, TMEM_COLUMNS), self._agent_name,
                                rank=rank, ranks=ranks, shared=shared_hb)
        self.barrier_vc: dict = {}          # (named barrier id, generation) -> what its arrivals publish
        self.tmem = np.zeros((TMEM_LANES, TMEM_COLUMNS), np.uint32)
        self.tmem_cols = 0
        self.tmem_ever_allocated = False
        self.mbarriers: dict[int, MBarrier] = {}
        self.tma_queue: collections.deque = collections.deque()
        self.mma_queue: collections.deque = collections.deque()
        # warp id -> (TMA stores not yet committed, deque of committed groups not yet waited)
        self.store_groups: dict = collections.defaultdict(lambda: ([], collections.deque()))
        # (warp id, lane) -> cp.async copies issued and not yet landed (ops/tma.py, cp.async)
        self.cp_async_pending: dict = collections.defaultdict(list)
        self.cp_async_groups: dict = collections.defaultdict(list)     # (wid, lane) -> committed groups, oldest first
        self.named_barriers: collections.Counter = collections.Counter()   # barrier id -> warps arrived
        self.barrier_generation: collections.Counter = collections.Counter()
        self.stats: collections.Counter = collections.Counter()
        self.mma_log: list = []        # (D, A, B descriptor, instruction descriptor, accumulate, A in TMEM) per tcgen05.mma
        self.tensor_maps = kernel.tensor_maps
        self.gmem = kernel.gmem
        self.warps = [Warp(self, w, kernel.program.new_env(args), kernel.program.body) for w in range(nwarps)]

    # ---- what ops use ---------------------------------------------------------------------------
    def mbarrier(self, addr: int) -> MBarrier:
        b = self.mbarriers.get(int(addr))
        if b is None:
            where = f" of CTA rank {self.rank}" if self.cluster is not None else ""
            raise BarrierFault(f"mbarrier at shared {int(addr):#x} ({self.kernel.barrier_name(int(addr))}){where} "
                               f"used before mbarrier.init")
        return b

    def peer(self, rank: int) -> "CTA":
        """The CTA of `rank` in this CTA's cluster (itself outside a cluster, rank 0)."""
        if self.cluster is None:
            if rank != 0:
                raise Fault(f"CTA rank {rank} named by a CTA launched without a cluster")
            return self
        return self.cluster.cta(rank)

    def _agent_name(self, agent: int) -> str:
        if agent < len(self.warps):
            w = self.warps[agent]
            return f"warp {agent}" + (f" ({w.role})" if w.role else "")
        return ("the TMA engine", "the tensor core")[agent - len(self.warps)]

    def warpgroup(self, wid: int) -> WarpGroup:
        g = self.warpgroups.get(wid // 4)
        if g is None:
            g = self.warpgroups[wid // 4] = WarpGroup(self)
        return g

    def check_smem_write(self, addrs: np.ndarray, what: str) -> None:
        """A write of shared bytes `addrs`: a race if a wgmma in flight (issued, not yet retired by
        its warp's wait_group) reads any of them."""
        if self.smem_readers[addrs].any():
            hit = np.asarray(addrs).ravel()[self.smem_readers[np.asarray(addrs).ravel()] > 0]
            raise RaceFault(f"{what} writes shared {int(hit.min()) - SMEM_BASE:#x}.. (fa4_smem offset) while a "
                            f"wgmma in flight reads it (its warp has not retired it with wgmma.wait_group)")

    def live_warps(self) -> int:
        return sum(not w.done for w in self.warps)

    # ---- scheduling -----------------------------------------------------------------------------
    def run(self) -> "CTA":
        t0 = time.perf_counter()
        try:
            with np.errstate(all="ignore"):      # IEEE results (inf - inf = NaN, ...) as the hardware gives
                self._schedule()
                self._drain()
            self._check_exit()
        except InterpretError as exc:
            raise exc.add_context(kernel=self.kernel.name, cta=self.block_idx)
        self.stats["seconds"] = time.perf_counter() - t0
        self.stats["warp_ops"] = sum(w.ops for w in self.warps)
        return self

    def _step(self, w: Warp) -> None:
        try:
            w.wait = next(w.gen)
        except StopIteration:
            w.done = True
        except InterpretError as exc:
            raise exc.add_context(warp=w.wid, role=w.role)

    def _schedule(self) -> None:
        schedule(self.warps, self._step, self._drain, self._deadlock, self.policy, self.rng)

    def _drain(self, one: bool = False) -> bool:
        """Run queued async work (all of it, or one job); True when something ran."""
        ran = False
        while self.tma_queue or self.mma_queue:
            take_tma = self.tma_queue and (not self.mma_queue or self.rng.random() < 0.5)
            job = (self.tma_queue if take_tma else self.mma_queue).popleft()
            job()
            ran = True
            if one:
                break
        return ran

    def _deadlock(self):
        lines = [f"  warp {w.wid:2d} ({w.role or '-'}): {w.wait.describe() if w.wait else 'runnable'}"
                 for w in self.warps if not w.done]
        raise Deadlock("deadlock: every live warp waits and no TMA or MMA work is queued\n" + "\n".join(lines))

    def _check_exit(self):
        problems = []
        if self.tmem_cols:
            problems.append(f"{self.tmem_cols} TMEM columns still allocated (no tcgen05.dealloc)")
        for b in self.mbarriers.values():
            if b.tx:
                problems.append(f"mbarrier {b.describe()} has {b.tx} transaction bytes outstanding")
        for wid, (open_, groups) in self.store_groups.items():
            stores = open_ + [job for g in groups for job in g]
            if stores:
                problems.append(f"warp {wid}: {len(stores)} TMA store(s) never waited (cp.async.bulk.wait_group)")
        unlanded = (sum(len(v) for v in self.cp_async_pending.values())
                    + sum(len(g) for v in self.cp_async_groups.values() for g in v))
        if unlanded:
            problems.append(f"{unlanded} cp.async copies never arrived on an mbarrier (cp.async.mbarrier.arrive) "
                            f"nor were waited for (cp.async.wait_group)")
        if problems:
            raise ExitFault("CTA exited with work outstanding: " + "; ".join(problems))


def schedule(warps: list, step, drain, deadlock, policy: str, rng) -> None:
    """Run `warps` (one CTA's, or a cluster's CTAs' together) to the end: each ready warp steps
    until it waits; when none can, `drain` runs async work (one job under "random"); when there is
    none, `deadlock` raises."""
    rand = policy == "random"
    while True:
        progressed = False
        order = [warps[i] for i in rng.permutation(len(warps))] if rand else warps
        for w in order:
            if w.done or (w.wait is not None and not w.wait.ready()):
                continue
            if rand and rng.random() < 0.3:
                progressed = True
                continue
            step(w)
            progressed = True
            if policy == "eager":
                drain()
        if all(w.done for w in warps):
            return
        if not progressed:
            if not drain(one=rand):
                deadlock()
        elif rand and rng.random() < 0.3:
            drain(one=True)


def uniform(values: np.ndarray, mask: np.ndarray, what: str) -> int:
    """The one value `values` holds over the active lanes (a warp-uniform operand)."""
    v = values[mask]
    if v.size == 0:
        raise Fault(f"{what}: no active lane")
    first = v[0]
    if (v != first).any():
        raise Fault(f"{what}: not uniform over the active lanes ({np.unique(v)[:8]})")
    return first.item()


__all__ = ["CTA", "Warp", "MBarrier", "uniform", "schedule", "SMEM_BASE", "TMEM_LANES", "TMEM_COLUMNS", "POLICIES"]
