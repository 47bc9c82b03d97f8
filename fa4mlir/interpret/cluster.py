"""A cluster of CTAs run together (sm_100a CTA pairs: `cluster=(2, 1, 1)`).

The cluster's CTAs are scheduled as one set of warps (machine.schedule over every CTA's warps,
their async engines drained together), so a warp of one CTA may wait for an arrival of the other.
Their clocks share one matrix of vectors (hb.HappensBefore `shared`): an arrive on a peer's
mbarrier and barrier.cluster order accesses across the pair; each CTA keeps its own shared memory,
tensor memory, mbarriers and shadows.

What the cluster adds (PTX ISA 9.1):

    %cluster_ctarank     rank = x % cx + cx (y % cy + cy (z % cz)) of the block index
    barrier.cluster      arrive (release) / wait (acquire), aligned, counted per warp: generation g
                         completes once every warp of the cluster not exited has arrived g + 1 times
    mapa                 a shared::cta address -> the same offset in CTA `rank` as a shared::cluster
                         address (`cluster_address`: rank and offset packed in an int64)
    remote mbarrier      mbarrier.arrive on a mapa address arrives on the peer's barrier; the arrive
                         must be ordered after the peer's mbarrier.init by happens-before (a cluster
                         barrier between them), else a BarrierFault: the schedule may have run it after
                         the init by chance, the hardware need not
    cta_group::2         the pair's MMA, commit multicast, TMEM alloc/dealloc: ops/pair.py; tcgen05.cp:
                         ops/tmem_copy.py; TMA loads completing on the leader's barrier: ops/tma.py
"""
from __future__ import annotations

import time

import numpy as np

from .faults import BarrierFault, Deadlock, Fault, InterpretError, Unsupported
from .machine import CTA, schedule

CLUSTER_TAG = 1 << 40          # a shared::cluster address made by mapa: tag | rank << 32 | shared address


def cluster_rank(block_idx, dims) -> int:
    """%cluster_ctarank of the CTA at `block_idx` in clusters of `dims` (x fastest)."""
    x, y, z = (b % d for b, d in zip(block_idx, dims))
    return x + dims[0] * (y + dims[1] * z)


def cluster_address(cta: CTA, value: int):
    """(the CTA, its shared address) a shared::cluster address names: a mapa result names CTA
    `rank`, any other value (a shared::cta address cast to shared::cluster) the CTA itself."""
    value = int(value)
    if value >> 40 != 1:
        return cta, value
    return cta.peer((value >> 32) & 0xFF), value & 0xFFFFFFFF


def check_init_ordered(b, vc, who: str) -> None:
    """A use of mbarrier `b` from another CTA (a remote arrive, a multicast commit): its init must
    happen before it (both views of the vector `vc`, the using agent's)."""
    init_agent, init_epoch = b.init_at
    if vc[0, init_agent] < init_epoch:
        raise BarrierFault(f"{who} arrives on {b.name} of another CTA whose mbarrier.init is not ordered before "
                           f"it (no barrier.cluster arrive/wait between the init and the peer's use): the peer "
                           f"may arrive on an uninitialised barrier")


class Cluster:
    """The CTAs of one cluster (a list of block indices, in rank order), run together."""

    def __init__(self, kernel, args: list, block_idxs: list, grid, policy: str = "lazy", seed: int = 0):
        self.kernel, self.policy = kernel, policy
        self.ctas: list[CTA] = []
        for rank, idx in enumerate(block_idxs):
            shared = self.ctas[0].hb if self.ctas else None
            cta = CTA(kernel, args, idx, grid, policy=policy, seed=seed + rank, rank=rank, ranks=len(block_idxs),
                      shared_hb=shared)
            cta.cluster = self
            self.ctas.append(cta)
        for cta in self.ctas:
            cta.hb.peers = [c.hb for c in self.ctas]
        self.rng = self.ctas[0].rng
        self.warps = [w for c in self.ctas for w in c.warps]
        self.arrived: dict = {}          # (rank, warp) -> barrier.cluster arrivals so far
        self.waited: dict = {}           # (rank, warp) -> barrier.cluster waits completed
        self.barrier_vc: dict = {}       # generation -> what its arrivals publish

    def cta(self, rank: int) -> CTA:
        if not 0 <= rank < len(self.ctas):
            raise Fault(f"CTA rank {rank} outside the cluster of {len(self.ctas)} CTAs")
        return self.ctas[rank]

    # ---- barrier.cluster ----------------------------------------------------------------------------
    def arrive(self, w, published) -> None:
        key = (w.cta.rank, w.wid)
        g = self.arrived.get(key, 0)
        held = self.barrier_vc.get(g)
        self.barrier_vc[g] = published if held is None else np.maximum(held, published)
        self.arrived[key] = g + 1

    def complete(self, g: int) -> bool:
        return all(w.done or self.arrived.get((w.cta.rank, w.wid), 0) > g for w in self.warps)

    def pending(self, g: int) -> str:
        missing = [f"{w.cta.rank}:{w.wid}" for w in self.warps
                   if not w.done and self.arrived.get((w.cta.rank, w.wid), 0) <= g]
        return f"barrier.cluster.wait (generation {g}; rank:warp not arrived {', '.join(missing[:12])})"

    def wait_generation(self, w) -> int:
        key = (w.cta.rank, w.wid)
        g = self.waited.get(key, 0)
        if self.arrived.get(key, 0) <= g:
            raise w.fault(BarrierFault, "barrier.cluster.wait without a barrier.cluster.arrive of this warp before it")
        self.waited[key] = g + 1
        return g

    # ---- scheduling ---------------------------------------------------------------------------------
    def run(self) -> list[CTA]:
        t0 = time.perf_counter()
        try:
            with np.errstate(all="ignore"):
                schedule(self.warps, self._step, self._drain, self._deadlock, self.policy, self.rng)
                self._drain()
        except InterpretError as exc:
            raise exc.add_context(kernel=self.kernel.name, cta=f"cluster {[c.block_idx for c in self.ctas]}")
        for cta in self.ctas:
            try:
                cta._check_exit()
            except InterpretError as exc:
                raise exc.add_context(kernel=self.kernel.name, cta=cta.block_idx)
            cta.stats["seconds"] = time.perf_counter() - t0
            cta.stats["warp_ops"] = sum(w.ops for w in cta.warps)
        return self.ctas

    def _step(self, w) -> None:
        try:
            w.cta._step(w)
        except InterpretError as exc:
            raise exc.add_context(cta=f"{w.cta.block_idx} (cluster rank {w.cta.rank})")

    def _drain(self, one: bool = False) -> bool:
        ran = False
        while True:
            busy = [c for c in self.ctas if c.tma_queue or c.mma_queue]
            if not busy:
                return ran
            cta = busy[int(self.rng.integers(len(busy)))] if one else busy[0]
            try:
                ran |= cta._drain(one=one)
            except InterpretError as exc:
                raise exc.add_context(cta=f"{cta.block_idx} (cluster rank {cta.rank})")
            if one:
                return ran

    def _deadlock(self):
        lines = [f"  CTA rank {w.cta.rank} warp {w.wid:2d} ({w.role or '-'}): "
                 f"{w.wait.describe() if w.wait else 'runnable'}" for w in self.warps if not w.done]
        raise Deadlock("deadlock: every live warp of the cluster waits and no TMA or MMA work is queued\n"
                       + "\n".join(lines))


def launch_clusters(kernel, values: list, grid, dims, ctas, policy: str, seed: int) -> list[CTA]:
    """Run the clusters of `dims` that hold the block indices `ctas` (whole clusters only)."""
    if any(g % d for g, d in zip(grid, dims)):
        raise Unsupported(f"grid {grid} is not a multiple of the cluster {dims}")
    groups: dict = {}
    for idx in ctas:
        cid = tuple(b // d for b, d in zip(idx, dims))
        groups.setdefault(cid, []).append(tuple(idx))
    size = dims[0] * dims[1] * dims[2]
    out = []
    for i, (cid, members) in enumerate(groups.items()):
        if len(set(members)) != size:
            raise ValueError(f"cluster {cid}: launch names {len(set(members))} of its {size} CTAs; run whole clusters")
        by_rank = sorted(set(members), key=lambda idx: cluster_rank(idx, dims))
        out += Cluster(kernel, values, by_rank, grid, policy=policy, seed=seed + size * i).run()
    return out


__all__ = ["Cluster", "CLUSTER_TAG", "cluster_rank", "cluster_address", "check_init_ordered", "launch_clusters"]
