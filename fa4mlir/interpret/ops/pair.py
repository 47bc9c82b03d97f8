"""A cluster's ops (interpret/cluster.py runs the cluster's CTAs together) and the CTA pair's tensor
core (.cta_group::2, PTX ISA 9.1 §9.7.16).

    barrier.cluster.arrive / wait   cluster.Cluster's per-warp generations (release / acquire)
    mapa                            a shared::cluster address of CTA `rank` (cluster.CLUSTER_TAG)

The pair (the two CTAs of a cluster whose ranks differ in bit 0; the even one is the leader):

    tcgen05.alloc / dealloc .cta_group::2   one warp of each CTA executes it; each CTA's TMEM gets the
                                 same columns at the same address (a TmemFault if the two disagree)
    tcgen05.mma .cta_group::2    issued by one thread of the leader (a Fault from the odd CTA: the
                                 model follows CUTLASS's and FlashMLA's leader issue); it runs on the
                                 leader's tensor-core queue and reads and writes both CTAs. Data-path
                                 Layout A (§9.7.16.10.5, M = 256): CTA r holds rows [128 r, 128 r +
                                 128) of A (its SMEM at A's descriptor, or its TMEM lanes 0-127 at A's
                                 address) and of D (its TMEM lanes 0-127 at D's address), and rows
                                 [N/2 r, N/2 r + N/2) of B (N x K, its SMEM at B's descriptor): D_r =
                                 A_r [B_0; B_1]^T (+ D_r). M = 128 (Layout B, 64 rows a CTA with the
                                 column halves folded over the lane halves) is not modelled
    tcgen05.commit .cta_group::2 [.multicast::cluster]  one arrival, behind the leader's MMAs, on the
                                 barrier at that offset in every CTA whose rank bit is set in the mask
                                 (without a mask: the issuing CTA's)

Happens-before: the pair's MMA is the leader's tensor-core agent, so its accesses of the peer's
SMEM and TMEM are checked against the peer's shadows with the leader's clocks (a peer's TMA load of
B must reach the leader's issuer through an arrive, e.g. mapa + mbarrier.arrive); a multicast
arrival on the peer's barrier publishes the leader's MMAs, and must follow the peer's
mbarrier.init by happens-before (cluster.check_init_ordered).
"""
from __future__ import annotations

import numpy as np

from ..cluster import CLUSTER_TAG, check_init_ordered
from ..faults import Fault, TmemFault, Unsupported
from ..machine import TMEM_LANES, uniform
from ..numeric import half_bits_to_f32
from ..program import BLOCKING, PLAIN, Wait
from . import semantics
from .sync import release

PAIR_M = 256            # Layout A: 128 rows a CTA


def _cluster(w, what: str):
    if w.cta.cluster is None:
        raise w.fault(Fault, f"{what} in a CTA launched without a cluster")
    return w.cta.cluster


@semantics("nvvm.cluster.arrive")
def cluster_arrive(p, op, a, r):
    """barrier.cluster.arrive.aligned (release): count this warp in at the cluster barrier."""
    def run(env, mask, w):
        if not mask.all():
            raise w.fault(Fault, "barrier.cluster.arrive.aligned by a partial warp")
        _cluster(w, "barrier.cluster.arrive").arrive(w, release(w, "barrier.cluster.arrive"))
    return PLAIN, run


@semantics("nvvm.cluster.wait")
def cluster_wait(p, op, a, r):
    """barrier.cluster.wait.aligned (acquire): block until every warp of the cluster that has not
    exited arrived in this warp's generation."""
    def run(env, mask, w):
        if not mask.all():
            raise w.fault(Fault, "barrier.cluster.wait.aligned by a partial warp")
        cluster = _cluster(w, "barrier.cluster.wait")
        g = cluster.wait_generation(w)
        if not cluster.complete(g):
            yield Wait(lambda: cluster.complete(g), lambda: cluster.pending(g))
        w.cta.hb.acquire(w.wid, cluster.barrier_vc[g])
    return BLOCKING, run


@semantics("nvvm.mapa")
def mapa(p, op, a, r):
    """mapa.shared::cluster: the same shared offset in CTA `rank` (cluster.cluster_address)."""
    ptr, rank, z = a[0], a[1], r[0]

    def run(env, mask, w):
        ranks = env[rank].astype(np.int64)
        n = len(w.cta.cluster.ctas) if w.cta.cluster is not None else 1
        bad = mask & ((ranks < 0) | (ranks >= n))
        if bad.any():
            raise w.fault(Fault, f"mapa to CTA rank {int(ranks[bad][0])} in a cluster of {n}")
        env[z] = (CLUSTER_TAG | (ranks << 32) | (env[ptr].astype(np.int64) & 0xFFFFFFFF)).astype(np.int64)
    return PLAIN, run


# ---- the pair's tensor core (called from ops/tcgen05.py) --------------------------------------------

def pair(w):
    """(leader, peer) of warp `w`'s CTA pair."""
    cluster = _cluster(w, "a .cta_group::2 op")
    leader = w.cta.rank & ~1
    if leader + 1 >= len(cluster.ctas):
        raise w.fault(Fault, f"a .cta_group::2 op in CTA rank {w.cta.rank} of a cluster of {len(cluster.ctas)}: "
                             f"no peer CTA")
    return cluster.ctas[leader], cluster.ctas[leader + 1]


def check_pair_alloc(w, n: int) -> None:
    """tcgen05.alloc.cta_group::2 of `n` columns in warp `w`'s CTA: the peer's must agree."""
    leader, peer = pair(w)
    other = peer if w.cta is leader else leader
    if other.tmem_cols and other.tmem_cols != n:
        raise w.fault(TmemFault, f"tcgen05.alloc.cta_group::2 of {n} columns in CTA rank {w.cta.rank}, its peer "
                                 f"allocated {other.tmem_cols}: the pair allocates the same columns")


def check_leader(w) -> None:
    leader, _ = pair(w)
    if w.cta is not leader:
        raise w.fault(Fault, f"tcgen05.mma.cta_group::2 issued by CTA rank {w.cta.rank}: the pair's MMAs are "
                             f"issued by its even-rank (leader) CTA (rank {leader.rank}) in this model")


def execute_pair_mma(ctas, d_addr: int, a, b_desc: int, idesc: int, accumulate: bool, a_in_tmem: bool,
                     vc, agent: int) -> None:
    """One tcgen05.mma.cta_group::2 over the pair `ctas` (leader, peer), Layout A (M = 256), run by
    the leader's tensor core (`agent`, vector pair `vc`)."""
    from .tcgen05 import decode_idesc, read_operand, smem_operand_addresses
    f = decode_idesc(idesc)
    m, n, k = f["m"], f["n"], 16
    if m != PAIR_M:
        raise Unsupported(f"tcgen05.mma.cta_group::2 M={m}: only M=256 (data-path Layout A) is modelled")
    half_n = n // 2
    d_lane, col = (d_addr >> 16) & 0xFFFF, d_addr & 0xFFFF
    if d_lane:
        raise TmemFault(f"tcgen05.mma.cta_group::2 D at TMEM lane {d_lane}: Layout A takes lane 0")

    def access(cta, shadow, index, write, what):
        if shadow is cta.hb.smem:
            cta.hb.check_async_proxy_read(index, what)
        cta.hb.access(shadow, index, vc, agent, write, what)

    lanes = np.arange(TMEM_LANES)
    As, Bs = [], []
    for r, cta in enumerate(ctas):
        who = f" of CTA rank {cta.rank}"
        if not cta.tmem_cols:
            raise TmemFault(f"tcgen05.mma.cta_group::2: CTA rank {cta.rank} has no tensor memory allocated")
        if a_in_tmem:
            a_lane, a_col = (a >> 16) & 0xFFFF, a & 0xFFFF
            if a_lane or a_col + k // 2 > cta.tmem_cols:
                raise TmemFault(f"tcgen05.mma.cta_group::2 A at TMEM lane {a_lane} column {a_col} (+{k // 2}): "
                                f"Layout A takes lane 0, inside the {cta.tmem_cols} allocated columns")
            cells = (lanes[:, None], np.arange(a_col, a_col + k // 2)[None, :])
            access(cta, cta.hb.tmem, cells, False, "tcgen05.mma.cta_group::2 A (TMEM)" + who)
            words = cta.tmem[cells]
            halves = np.stack([words & 0xFFFF, words >> 16], axis=2).reshape(TMEM_LANES, k).astype(np.uint16)
            As.append(half_bits_to_f32(halves, f["dtype"]))
        else:
            addrs = smem_operand_addresses(a, TMEM_LANES, k, f["a_mn_major"])
            access(cta, cta.hb.smem, np.stack([addrs, addrs + 1]), False, "tcgen05.mma.cta_group::2 A (SMEM)" + who)
            As.append(read_operand(cta, addrs, a, f["dtype"]))
        addrs = smem_operand_addresses(b_desc, half_n, k, f["b_mn_major"])
        access(cta, cta.hb.smem, np.stack([addrs, addrs + 1]), False, "tcgen05.mma.cta_group::2 B (SMEM)" + who)
        Bs.append(read_operand(cta, addrs, b_desc, f["dtype"]))
    B = np.concatenate(Bs).astype(np.float64)
    for cta, A in zip(ctas, As):
        if col + n > cta.tmem_cols:
            raise TmemFault(f"tcgen05.mma.cta_group::2 D at column {col} (+{n}) outside CTA rank {cta.rank}'s "
                            f"allocation of {cta.tmem_cols} columns")
        cells = (lanes[:, None], np.arange(col, col + n)[None, :])
        acc = A.astype(np.float64) @ B.T
        what = f"tcgen05.mma.cta_group::2 D of CTA rank {cta.rank}"
        if accumulate:
            access(cta, cta.hb.tmem, cells, False, what + " (accumulate)")
            acc += cta.tmem[cells].view(np.float32)
        access(cta, cta.hb.tmem, cells, True, what)
        cta.tmem[cells] = acc.astype(np.float32).view(np.uint32)
    ctas[0].stats["pair_mma"] += 1
    ctas[0].mma_log.append((d_addr, a, b_desc, idesc, accumulate, a_in_tmem))


def commit_targets(w, addr: int, mask_bits: int | None):
    """The mbarriers a tcgen05.commit at shared `addr` arrives on: with a multicast mask, the one at
    that offset in every CTA of the cluster whose rank bit is set; else the issuing CTA's."""
    if mask_bits is None:
        return [w.cta.mbarrier(addr)]
    cluster = _cluster(w, "tcgen05.commit .multicast::cluster")
    if mask_bits >> len(cluster.ctas) or not mask_bits:
        raise w.fault(Fault, f"tcgen05.commit multicast mask {mask_bits:#x} names no CTA or one outside the "
                             f"cluster of {len(cluster.ctas)}")
    out = []
    for rank, cta in enumerate(cluster.ctas):
        if mask_bits >> rank & 1:
            b = cta.mbarrier(addr)
            if cta is not w.cta:
                check_init_ordered(b, w.cta.hb.vc[:, w.cta.hb.g(w.wid)], f"tcgen05.commit (multicast) of CTA rank {w.cta.rank}")
            out.append(b)
    return out


def uniform_mask(env, slot, mask) -> int:
    return uniform(env[slot], mask, "tcgen05.commit multicast mask") & 0xFFFF


__all__ = ["pair", "check_pair_alloc", "check_leader", "execute_pair_mma", "commit_targets", "uniform_mask", "PAIR_M"]
