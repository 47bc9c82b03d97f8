"""Happens-before: vector clocks over the CTA's agents, shadow memory, and the fence rules.

Agents: per warp w two, its generic side G(w) = w (ld/st.shared, arrives, waits) and its tcgen05
side T(w) = W + w (tcgen05.ld/st/alloc, and what it issues to the tensor core); the TMA engine;
the tensor core (tcgen05.mma runs in issue order: one agent in program order). `vc[a]` says, per
agent, up to which of its epochs it happens-before a's present. Edges (release -> acquire):

    mbarrier     an arrive (mbarrier.arrive*, tcgen05.commit once its MMAs ran, a TMA copy's
                 complete_tx) joins the arriving vector into the barrier's phase; a try_wait.parity
                 that succeeds joins the last completed phase's vector
    bar.sync     every arrival (bar.sync, bar.arrive) joins the generation's vector; its waiters
                 join it when it completes
    async issue  a TMA copy and a tcgen05.mma carry their issuer's vector

The tcgen05 fences are edges between a warp's two sides (PTX ISA 9.1 §9.7.16.6.4): a release
publishes T(w)'s ops only up to the warp's last tcgen05.fence::before_thread_sync, and T(w) sees
what G(w) acquired only from its last tcgen05.fence::after_thread_sync on. A missing fence thus
leaves two accesses unordered. Every vector is kept twice: as the fences give it and as if every
fence were present; a pair of accesses unordered in the first and ordered in the second is a
FenceFault (the fence is what is missing), unordered in both a RaceFault.

Shadow memory (shared bytes, tensor-memory words) keeps the last write's (agent, epoch) and the
last read's. An access races when the last write, or (for a write) the last read, by another
agent is not ordered before it: `epoch > vc[accessor][agent]`. A read of memory that no write ever
reached is a RaceFault too (S read before the MMA that fills it). Only the last read is kept: a
race with an older concurrent read can go unseen (FastTrack keeps a read vector for those).
Races are reported whatever the schedule: unordered accesses race even when this run happened to
put them in a safe order.

Proxies (§9.7.13.4 "fence.proxy"): shared memory written through the generic proxy (st.shared)
and read by the async proxy (a TMA store; a tcgen05.mma's SMEM operands, §9.7.16.6.5) must be
covered by its writer's fence.proxy.async after the write (FenceFault). The fence also orders the
writer's own generic accesses before the async-proxy operations it issues after it (a warp that
clears SMEM and then issues the tcgen05.mma reading it needs no thread sync, hence no tcgen05.fence).
"""
from __future__ import annotations

import numpy as np

from .faults import FenceFault, RaceFault

REAL, ASSUMED = 0, 1      # the two views of every vector: as fenced, and as if fully fenced


class Shadow:
    """Last write and last read, (agent, epoch), per cell of one memory; `generic[cell]`: the last
    write came through the generic proxy (st.shared)."""

    def __init__(self, shape, name: str):
        self.name = name
        self.w_agent = np.zeros(shape, np.int16)
        self.w_epoch = np.zeros(shape, np.int32)     # 0: never written
        self.r_agent = np.zeros(shape, np.int16)
        self.r_epoch = np.zeros(shape, np.int32)
        self.generic = np.zeros(shape, bool)


def _unordered(epochs: np.ndarray, agents: np.ndarray, vc: np.ndarray, agent: int) -> np.ndarray:
    """(epochs > vc[:, agents]) & (agents != agent): per view and cell, a last access by another agent
    that `vc` does not order. When one agent made every last access (a tile one TMA wrote, an
    accumulator the tensor core wrote: the usual case), its two clock entries are compared without
    gathering vc per cell, which was most of an access's time."""
    if agents.size:
        first = agents.flat[0]
        if (agents == first).all():
            if first == agent:
                return np.zeros((2,) + agents.shape, bool)
            return epochs > vc[:, first].reshape((2,) + (1,) * agents.ndim)
    return (epochs > vc[:, agents]) & (agents != agent)


class HappensBefore:
    """The clocks of one CTA. In a cluster (interpret/cluster.py) the CTAs' objects share one matrix
    of vectors (`shared`: rank 0's object): CTA r's agents are numbered from r (2W + 2), so an
    arrive on a peer CTA's mbarrier (mapa + mbarrier.arrive, a multicast tcgen05.commit) and
    barrier.cluster carry the same vectors across the pair; each CTA keeps its own shadows."""

    def __init__(self, num_warps: int, smem_bytes: int, tmem_shape, agent_name, *, rank: int = 0, ranks: int = 1,
                 shared: "HappensBefore | None" = None):
        self.W = num_warps
        per_cta = 2 * num_warps + 2
        self.rank, self.base = rank, rank * per_cta
        self.TMA, self.MMA = self.base + 2 * num_warps, self.base + 2 * num_warps + 1
        n = ranks * per_cta
        self._name = agent_name                       # warp id -> words (with its role)
        self.peers = [self]                           # the cluster's objects by rank (set by the cluster)
        if shared is None:
            self.vc = np.zeros((2, n, n), np.int32)   # [view, agent, agent]
            self.vc[:, np.arange(n), np.arange(n)] = 1
            self.proxy_fenced = np.zeros(n, np.int32)     # G(w)'s epoch at its last fence.proxy.async
            self.fenced_view = np.zeros((n, n), np.int32)  # G(w)'s vector (REAL) at its last fence.proxy.async
        else:
            self.vc, self.proxy_fenced, self.fenced_view = shared.vc, shared.proxy_fenced, shared.fenced_view
        self.smem = Shadow(smem_bytes, "shared memory")
        self.tmem = Shadow(tmem_shape, "tensor memory")
        self.mma_vc = self.vc[:, self.MMA].copy()     # the tensor core's vector pair, joined per MMA
        self.tc_published = np.zeros(num_warps, np.int32)   # T(w)'s epoch at its last fence::before

    def g(self, wid: int) -> int:
        """The agent of warp `wid`'s generic side."""
        return self.base + wid

    def tc(self, wid: int) -> int:
        return self.base + self.W + wid

    # ---- clocks -------------------------------------------------------------------------------------
    def release(self, wid: int) -> np.ndarray:
        """What warp `wid` publishes now (a vector pair); then its generic epoch moves on. Its
        tcgen05 side is published up to its last fence::before_thread_sync (REAL view)."""
        g, t = self.g(wid), self.tc(wid)
        out = self.vc[:, g].copy()
        out[ASSUMED, t] = self.vc[ASSUMED, t, t]
        out[REAL, t] = min(out[REAL, t], self.tc_published[wid])
        self.vc[:, g, g] += 1
        self.vc[:, t, t] += 1                 # later tcgen05 ops are not covered by this release
        self.vc[:, g, t] = self.vc[:, t, t]
        return out

    def acquire(self, wid: int, published: np.ndarray) -> None:
        np.maximum(self.vc[:, self.g(wid)], published, out=self.vc[:, self.g(wid)])
        np.maximum(self.vc[ASSUMED, self.tc(wid)], published[ASSUMED], out=self.vc[ASSUMED, self.tc(wid)])

    def fence_before(self, wid: int) -> None:
        """tcgen05.fence::before_thread_sync: T(w)'s ops so far go out with the next release."""
        t = self.tc(wid)
        self.tc_published[wid] = self.vc[REAL, t, t]
        self.vc[:, t, t] += 1
        self.vc[:, self.g(wid), t] = self.vc[:, t, t]

    def fence_after(self, wid: int) -> None:
        """tcgen05.fence::after_thread_sync: T(w) is ordered after what the warp acquired. Both views:
        the fully-fenced one orders at least what the fenced one does (else an access ordered by the
        fence would be reported as a race)."""
        np.maximum(self.vc[:, self.tc(wid)], self.vc[:, self.g(wid)], out=self.vc[:, self.tc(wid)])

    def issue(self, wid: int) -> np.ndarray:
        """The vector pair a tcgen05.mma / commit carries: the issuing warp's tcgen05 side."""
        return self.vc[:, self.tc(wid)].copy()

    def tma_issue(self, wid: int) -> np.ndarray:
        return self.vc[:, self.g(wid)].copy()

    def stamp_async(self, agent: int, issued: np.ndarray) -> np.ndarray:
        """The vector pair of one job of async `agent` (TMA, tensor core) issued with `issued`."""
        self.vc[:, agent, agent] += 1
        job = issued.copy()
        job[:, agent] = self.vc[:, agent, agent]
        return job

    # ---- accesses -----------------------------------------------------------------------------------
    def _who(self, agent: int) -> str:
        rank, local = divmod(agent, 2 * self.W + 2)
        if rank != self.rank:
            return f"CTA rank {rank}'s " + self.peers[rank]._who(agent).replace("the ", "", 1)
        if local < self.W:
            return self._name(local)
        if local < 2 * self.W:
            return f"the tcgen05 ops of {self._name(local - self.W)}"
        return ("the TMA engine", "the tensor core")[local - 2 * self.W]

    def _where(self, shadow: Shadow, cell: int) -> str:
        if shadow is self.tmem:
            lane, col = np.unravel_index(cell, shadow.w_epoch.shape)
            return f"TMEM lane {lane} column {col}"
        return f"shared {cell - 0x400:#x} (fa4_smem offset)"

    @staticmethod
    def _cell(shadow, index, i) -> int:
        """The flat cell of the i-th element (C order) of what shadow[index] selects: a flat index array, or
        a tuple of broadcastable index arrays, or of slices and 1-D arrays (their outer product)."""
        if isinstance(index, tuple):
            shape = shadow.w_epoch.shape
            parts = [np.arange(*p.indices(n)) if isinstance(p, slice) else np.asarray(p) for p, n in zip(index, shape)]
            grid = np.ix_(*parts) if any(isinstance(p, slice) for p in index) else parts
            cells = np.ravel_multi_index(np.broadcast_arrays(*grid), shape).ravel()
            return int(cells[i])
        return int(np.asarray(index).ravel()[i])

    def _report(self, shadow, index, unordered, agents, agent, what, verb, kind):
        real, assumed = unordered[REAL].ravel(), unordered[ASSUMED].ravel()
        fence_only = real & ~assumed
        exc, pick = (RaceFault, assumed) if assumed.any() else (FenceFault, fence_only)
        i = int(np.flatnonzero(pick)[0])
        where, other = self._where(shadow, self._cell(shadow, index, i)), self._who(int(agents.ravel()[i]))
        if exc is RaceFault:
            raise RaceFault(f"{what} by {self._who(agent)} {verb} {where}; {kind} by {other} is not ordered "
                            f"before it (no happens-before)")
        raise FenceFault(f"{what} by {self._who(agent)} {verb} {where}; {kind} by {other} is ordered before it "
                         f"only through a thread sync without its tcgen05.fence (::before_thread_sync on the "
                         f"releasing side, ::after_thread_sync on the acquiring side)")

    def access(self, shadow: Shadow, index, vc: np.ndarray, agent: int, write: bool, what: str,
               *, generic: bool = False) -> None:
        """Check and record an access of `shadow`'s cells `index` (a flat index array, or a tuple of
        index arrays for TMEM) by `agent` with vector pair `vc`."""
        w_agent, w_epoch = shadow.w_agent[index], shadow.w_epoch[index]
        if not write and (w_epoch == 0).any():
            i = int(np.flatnonzero((w_epoch == 0).ravel())[0])
            raise RaceFault(f"{what} by {self._who(agent)} reads {self._where(shadow, self._cell(shadow, index, i))},"
                            f" which no write reached (read before the write that fills it)")
        if write:
            r_agent, r_epoch = shadow.r_agent[index], shadow.r_epoch[index]
            unordered = _unordered(r_epoch, r_agent, vc, agent)
            if unordered.any():
                self._report(shadow, index, unordered, r_agent, agent, what, "writes", "its last read")
        unordered = _unordered(w_epoch, w_agent, vc, agent)
        if unordered.any():
            self._report(shadow, index, unordered, w_agent, agent, what, "writes" if write else "reads",
                         "its last write")
        epoch = vc[REAL, agent]
        if write:
            shadow.w_agent[index], shadow.w_epoch[index] = agent, epoch
            shadow.generic[index] = generic
        else:
            shadow.r_agent[index], shadow.r_epoch[index] = agent, epoch

    def warp_access(self, w, shadow: Shadow, index, write: bool, what: str, *, generic: bool = False) -> None:
        """A generic access by warp `w` (ld/st.shared, a TMA store's read at issue, wgmma's operands)."""
        self.access(shadow, index, self.vc[:, self.g(w.wid)], self.g(w.wid), write, what, generic=generic)

    def tc_access(self, w, shadow: Shadow, index, write: bool, what: str) -> None:
        """A tcgen05.ld / st / alloc by warp `w`: its tcgen05 side."""
        t = self.tc(w.wid)
        self.access(shadow, index, self.vc[:, t], t, write, what)
        self.vc[:, self.g(w.wid), t] = self.vc[:, t, t]        # the warp's generic side sees its own tcgen05 ops

    # ---- proxies ------------------------------------------------------------------------------------
    def proxy_fence(self, wid: int) -> None:
        """fence.proxy.async by warp `wid`: its generic accesses so far are visible to the async proxy,
        and ordered before the async-proxy operations it issues next (its tcgen05.mma's SMEM operands,
        PTX ISA 9.1 §9.7.16.6.5), in program order; no tcgen05.fence is involved (no thread sync)."""
        g, t = self.g(wid), self.tc(wid)
        self.proxy_fenced[g] = self.vc[REAL, g, g]
        self.fenced_view[g] = self.vc[REAL, g]
        self.vc[:, t, g] = np.maximum(self.vc[:, t, g], self.vc[:, g, g])

    def check_async_proxy_read(self, index, what: str, reader: int | None = None) -> None:
        """The async proxy (a TMA store, a tcgen05.mma operand; a wgmma operand, `reader` its warp's
        agent) reads shared `index`: generic-proxy writes there need their writer's fence.proxy.async
        after the write, or (wgmma) the reading warp's own fence.proxy.async after it acquired the write
        (the consumer-side fence of a cp.async or remote-store hand-off: wait, fence, wgmma)."""
        gen = self.smem.generic[index]
        if gen.any():
            writers, epochs = self.smem.w_agent[index][gen], self.smem.w_epoch[index][gen]
            bad = epochs > self.proxy_fenced[writers]
            if reader is not None:
                bad &= epochs > self.fenced_view[reader, writers]
            if bad.any():
                raise FenceFault(f"{what} reads shared memory that {self._who(int(writers[bad][0]))} wrote with "
                                 f"st.shared and did not fence (fence.proxy.async) before handing it over")


__all__ = ["HappensBefore", "Shadow", "REAL", "ASSUMED"]
