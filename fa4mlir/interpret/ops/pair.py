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
                                 A_r [B_0; B_1]^T (+ D_r). Layout B (M = 128, dense A): note "pair
                                 layouts"
    tcgen05.commit .cta_group::2 [.multicast::cluster]  one arrival, behind the leader's MMAs, on the
                                 barrier at that offset in every CTA whose rank bit is set in the mask
                                 (without a mask: the issuing CTA's)

Note "pair layouts" (PTX ISA 9.7.16.10.5 "Data Path Layout Organization": M = 256 with cta_group::2 is
Layout A, "4x1"; M = 128 with cta_group::2 and a dense A is Layout B, "2x2"; both at TMEM lane 0).
The ISA gives the two layouts as figures only; this model reads them, as FlashMLA's sm_100 sparse
prefill (csrc/sm100/prefill/sparse/fwd/head128/phase1.cuh) uses Layout B, thus:
* Layout A: CTA r's A rows [128 r, 128 r + 128) (SMEM, or its TMEM lanes 0-127); its TMEM lane l gets
  D row 128 r + l, all N columns from column `col` on.
* Layout B: CTA r provides A rows [64 r, 64 r + 64) (64 rows at its descriptor; from TMEM, lanes 0-63
  and again 64-127) and B rows [N/2 r, N/2 r + N/2); its TMEM lane l < 64 gets D row 64 r + l, columns
  [0, N/2) (those of CTA 0's B rows), and lane 64 + l the same row's columns [N/2, N) (CTA 1's B rows),
  both in TMEM columns [col, col + N/2). FlashMLA's facts behind it: the S MMA (B_H 128, B_TOPK 128)
  leaves a 64-column P (TMEM 256-320) that thread t (lane t) of the softmax warpgroup reads whole, for
  head row t % 64 and the top-k entries 64 (t // 64) .. + 63 (its validity bits at that offset; CTA r
  gathered entries 64 r .. + 63), threads t and t + 64 sharing a row's max and sum; Q reaches TMEM by
  tcgen05.cp 64x128b.warpx2::02_13 (rows 0-31 to lanes 0-31 and 64-95, rows 32-63 to 32-63 and
  96-127: each row in both lane halves); O (D_V 512, TMEM 0-256) is stored with lanes 0-63 holding
  columns 0-255 and lanes 64-127 columns 256-511 of the CTA's 64 head rows.

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

PAIR_MS = (256, 128)    # Layout A: 128 rows a CTA; Layout B: 64 rows a CTA


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


def check_leader(w, what: str = "tcgen05.mma.cta_group::2") -> None:
    leader, _ = pair(w)
    if w.cta is not leader:
        raise w.fault(Fault, f"{what} issued by CTA rank {w.cta.rank}: the pair's MMAs and copies are "
                             f"issued by its even-rank (leader) CTA (rank {leader.rank}) in this model")


def execute_pair_mma(ctas, d_addr: int, a, b_desc: int, idesc: int, accumulate: bool, a_in_tmem: bool,
                     vc, agent: int) -> None:
    """One tcgen05.mma.cta_group::2 over the pair `ctas` (leader, peer), run by the leader's tensor
    core (`agent`, vector pair `vc`): Layout A (M = 256) or Layout B (M = 128, dense A), note "pair
    layouts"."""
    from .tcgen05 import decode_idesc, tmem_cells
    f = decode_idesc(idesc)
    m, n, k = f["m"], f["n"], 16
    if m not in PAIR_MS:
        raise Unsupported(f"tcgen05.mma.cta_group::2 M={m}: M = 256 (Layout A) and M = 128 (Layout B) are modelled")
    d_lane, col = (d_addr >> 16) & 0xFFFF, d_addr & 0xFFFF
    if d_lane:
        raise TmemFault(f"tcgen05.mma.cta_group::2 M={m} D at TMEM lane {d_lane}: Layouts A and B take lane 0")

    def access(cta, shadow, index, write, what):
        if shadow is cta.hb.smem:
            cta.hb.check_async_proxy_read(index, what)
        cta.hb.access(shadow, index, vc, agent, write, what)

    lanes = np.arange(TMEM_LANES)
    a_rows = m // 2                                 # A rows each CTA provides
    As, Bs = [], []
    for cta in ctas:
        if not cta.tmem_cols:
            raise TmemFault(f"tcgen05.mma.cta_group::2: CTA rank {cta.rank} has no tensor memory allocated")
        As.append(_pair_a(cta, a, a_in_tmem, a_rows, k, f, access))
        Bs.append(_smem_rows(cta, b_desc, n // 2, k, f["b_mn_major"], f["dtype"], access, "B"))
    width = n if m == 256 else n // 2               # TMEM columns of D in each CTA
    for cta, A in zip(ctas, As):
        if col + width > cta.tmem_cols:
            raise TmemFault(f"tcgen05.mma.cta_group::2 D at column {col} (+{width}) outside CTA rank {cta.rank}'s "
                            f"allocation of {cta.tmem_cols} columns")
        cells = tmem_cells(lanes, col, width)
        A = A.astype(np.float64)
        if m == 256:                                # D_r = A_r [B_0; B_1]^T, lane = row
            acc = A @ np.concatenate(Bs).astype(np.float64).T
        else:                                       # lane l < 64: row l x B_0^T; lane 64 + l: row l x B_1^T
            half = TMEM_LANES // 2
            acc = np.concatenate([A[:half] @ Bs[0].astype(np.float64).T, A[half:] @ Bs[1].astype(np.float64).T])
        what = f"tcgen05.mma.cta_group::2 D of CTA rank {cta.rank}"
        if accumulate:
            access(cta, cta.hb.tmem, cells, False, what + " (accumulate)")
            acc += cta.tmem[cells].view(np.float32)
        access(cta, cta.hb.tmem, cells, True, what)
        cta.tmem[cells] = acc.astype(np.float32).view(np.uint32)
    ctas[0].stats["pair_mma"] += 1
    ctas[0].mma_log.append((d_addr, a, b_desc, idesc, accumulate, a_in_tmem))


def _smem_rows(cta, desc: int, rows: int, k: int, mn_major: bool, dtype: str, access, name: str) -> np.ndarray:
    """`rows` x k elements of a 16-bit operand in CTA `cta`'s shared memory at descriptor `desc`."""
    from .tcgen05 import read_operand, smem_operand_addresses
    addrs = smem_operand_addresses(desc, rows, k, mn_major)
    access(cta, cta.hb.smem, np.stack([addrs, addrs + 1]), False,
           f"tcgen05.mma.cta_group::2 {name} (SMEM) of CTA rank {cta.rank}")
    return read_operand(cta, addrs, desc, dtype)


def _pair_a(cta, a, a_in_tmem: bool, a_rows: int, k: int, f: dict, access) -> np.ndarray:
    """CTA `cta`'s A as 128 lanes x k: Layout A, its 128 rows; Layout B, its 64 rows on each lane half
    (from SMEM: read once, the same rows feed both halves; from TMEM: lanes 0-63 and 64-127 as held,
    which a kernel fills with the same rows, e.g. tcgen05.cp 64x128b.warpx2::02_13)."""
    from .tcgen05 import tmem_cells
    if not a_in_tmem:
        A = _smem_rows(cta, a, a_rows, k, f["a_mn_major"], f["dtype"], access, "A")
        return A if a_rows == TMEM_LANES else np.concatenate([A, A])
    lanes = np.arange(TMEM_LANES)
    a_lane, a_col = (a >> 16) & 0xFFFF, a & 0xFFFF
    if a_lane or a_col + k // 2 > cta.tmem_cols:
        raise TmemFault(f"tcgen05.mma.cta_group::2 A at TMEM lane {a_lane} column {a_col} (+{k // 2}): "
                        f"Layouts A and B take lane 0, inside the {cta.tmem_cols} allocated columns")
    cells = tmem_cells(lanes, a_col, k // 2)
    access(cta, cta.hb.tmem, cells, False, f"tcgen05.mma.cta_group::2 A (TMEM) of CTA rank {cta.rank}")
    words = cta.tmem[cells]
    halves = np.stack([words & 0xFFFF, words >> 16], axis=2).reshape(TMEM_LANES, k).astype(np.uint16)
    return half_bits_to_f32(halves, f["dtype"])


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


__all__ = ["pair", "check_pair_alloc", "check_leader", "execute_pair_mma", "commit_targets", "uniform_mask", "PAIR_MS"]
