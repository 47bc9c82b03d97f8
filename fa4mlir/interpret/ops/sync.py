"""Special registers, warp votes, barriers and mbarriers, fences.

Barriers count whole warps (warp granularity): `bar.sync id, n` completes when n / 32 warps
arrived; `bar.sync 0` (barrier0) when every live warp did. mbarrier arrivals count threads (each
active lane arrives once), as the PTX ISA does; `mbarrier.try_wait.parity` blocks the warp until
the phase of that parity completed (machine.MBarrier). A tcgen05.st must be waited
(tcgen05.wait::st) before an arrive or a barrier publishes it: otherwise an UnwaitedAsync fault.
Every arrive publishes the warp's vector clock and every completed wait acquires what was
published (interpret/hb.py: happens-before). The interpreter's memory is sequentially consistent;
the fences' rules are checked instead: tcgen05.fence::after_thread_sync / before_thread_sync around
thread syncs, fence.proxy.async between st.shared and a TMA store that reads it (hb.py).
"""
from __future__ import annotations

import numpy as np

from ..cluster import check_init_ordered, cluster_address
from ..faults import Fault, Unsupported, UnwaitedAsync
from ..machine import MBarrier, uniform
from ..numeric import LANES, WARP
from ..program import BLOCKING, PLAIN, Wait
from . import semantics


def _sreg(p, op, a, r, value_of):
    z = r[0]

    def run(env, mask, w):
        env[z] = value_of(w)
    return PLAIN, run


_SREGS = {
    "nvvm.read.ptx.sreg.tid.x": lambda w: w.tid,
    "nvvm.read.ptx.sreg.tid.y": lambda w: np.zeros(WARP, np.int32),
    "nvvm.read.ptx.sreg.tid.z": lambda w: np.zeros(WARP, np.int32),
    "nvvm.read.ptx.sreg.laneid": lambda w: LANES.astype(np.int32),
    "nvvm.read.ptx.sreg.warpid": lambda w: np.full(WARP, w.wid, np.int32),
    **{f"nvvm.read.ptx.sreg.ctaid.{d}": (lambda i: lambda w: np.full(WARP, w.cta.block_idx[i], np.int32))(i)
       for i, d in enumerate("xyz")},
    **{f"nvvm.read.ptx.sreg.nctaid.{d}": (lambda i: lambda w: np.full(WARP, w.cta.grid[i], np.int32))(i)
       for i, d in enumerate("xyz")},
    "nvvm.read.ptx.sreg.cluster.ctarank": lambda w: np.full(WARP, w.cta.rank, np.int32),
    "nvvm.read.ptx.sreg.cluster.nctarank":
        lambda w: np.full(WARP, len(w.cta.cluster.ctas) if w.cta.cluster is not None else 1, np.int32),
    **{f"nvvm.read.ptx.sreg.ntid.{d}": (lambda i: lambda w: np.full(WARP, w.cta.kernel.block[i], np.int32))(i)
       for i, d in enumerate("xyz")},
}


@semantics(*_SREGS)
def special_register(p, op, a, r):
    return _sreg(p, op, a, r, _SREGS[op.name])


@semantics("nvvm.elect.sync")
def elect_sync(p, op, a, r):
    """True in exactly one active lane (the lowest)."""
    z = r[0]

    def run(env, mask, w):
        out = np.zeros(WARP, bool)
        out[np.argmax(mask)] = True
        env[z] = out
    return PLAIN, run


@semantics("nvvm.vote.sync")
def vote_sync(p, op, a, r):
    kind = str(op.attributes["kind"])
    if "any" not in kind and "all" not in kind:
        raise Unsupported(f"nvvm.vote.sync {kind}")
    members, pred, z = a[0], a[1], r[0]
    reduce = np.any if "any" in kind else np.all

    def run(env, mask, w):
        lanes = mask & ((env[members].astype(np.int64) >> LANES) & 1).astype(bool)
        env[z] = np.full(WARP, bool(reduce(env[pred][lanes])))
    return PLAIN, run


def _noop(p, op, a, r):
    return PLAIN, lambda env, mask, w: None


for _name in ("nvvm.fence.mbarrier.init", "nvvm.fence.sc.cluster", "nvvm.membar", "nvvm.setmaxregister",
              "nvvm.fence.proxy.acquire", "nvvm.fence.proxy.release"):
    semantics(_name)(_noop)


@semantics("nvvm.fence.proxy")
def fence_proxy(p, op, a, r):
    """fence.proxy.async[.shared::cta]: this warp's generic-proxy shared writes so far are visible to
    the async proxy (a TMA store may read them once handed over; its own next tcgen05.mma may read
    them as operands, hb.proxy_fence)."""
    if "async" not in str(op.attributes["kind"]):
        raise Unsupported(f"nvvm.fence.proxy {op.attributes['kind']}")

    def run(env, mask, w):
        w.cta.hb.proxy_fence(w.wid)
    return PLAIN, run


@semantics("nvvm.tcgen05.fence")
def tcgen05_fence(p, op, a, r):
    """tcgen05.fence::before_thread_sync / ::after_thread_sync (PTX ISA 9.1 §9.7.16.6.4): order this
    warp's tcgen05 ops before the next thread sync it releases / after the last one it acquired."""
    before = "before" in str(op.attributes["kind"])

    def run(env, mask, w):
        if before:
            w.cta.hb.fence_before(w.wid)
        else:
            w.cta.hb.fence_after(w.wid)
    return PLAIN, run


def release(w, what: str):
    """What warp `w` publishes at an arrive (its tcgen05.st must be waited)."""
    check_stores_waited(w, what)
    return w.cta.hb.release(w.wid)


def check_stores_waited(w, what: str) -> None:
    if w.pending_st:
        raise w.fault(UnwaitedAsync, f"{what} with {w.pending_st} tcgen05.st not waited (tcgen05.wait::st): "
                                     f"the consumer may read tensor memory before the stores land")


def _barrier_arrive(w, key, expected: int, what: str) -> int:
    """Count warp `w` in at barrier `key`; returns the generation it arrived in (the barrier
    completes, and its generation advances, with the `expected`-th warp)."""
    cta = w.cta
    generation = cta.barrier_generation[key]
    published = release(w, what)
    held = cta.barrier_vc.get((key, generation))
    cta.barrier_vc[(key, generation)] = published if held is None else np.maximum(held, published)
    cta.named_barriers[key] += 1
    if cta.named_barriers[key] >= expected:
        cta.named_barriers[key] = 0
        cta.barrier_generation[key] += 1
    return generation


def _barrier_wait(w, key, expected: int, what: str):
    cta = w.cta
    generation = _barrier_arrive(w, key, expected, what)
    if cta.barrier_generation[key] == generation:
        yield Wait(lambda: cta.barrier_generation[key] != generation,
                   lambda: f"{what} ({cta.named_barriers[key]}/{expected} warps)")
    cta.hb.acquire(w.wid, cta.barrier_vc[(key, generation)])


@semantics("nvvm.barrier0")
def barrier0(p, op, a, r):
    def run(env, mask, w):
        if not mask.all():
            raise Fault("bar.sync 0 by a partial warp")
        yield from _barrier_wait(w, 0, w.cta.live_warps(), "bar.sync 0 (CTA)")
    return BLOCKING, run


def _named(env, mask, w, bid, count, what):
    if not mask.all():
        raise Fault(f"{what} by a partial warp")
    b = uniform(env[bid], mask, "barrier id")
    n = uniform(env[count], mask, "barrier thread count")
    if n % WARP:
        raise Fault(f"{what} {b}, {n}: thread count not a multiple of the warp size")
    return b, n



@semantics("nvvm.barrier")
def named_barrier(p, op, a, r):
    """bar.sync id, n (PTX ISA §9.7.13.1): wait until n threads (n / 32 warps) arrived at barrier id."""
    if len(a) != 2:
        raise Unsupported("nvvm.barrier without an id and a thread count")
    bid, count = a

    def run(env, mask, w):
        b, n = _named(env, mask, w, bid, count, "bar.sync")
        yield from _barrier_wait(w, b, n // WARP, f"bar.sync {b}, {n}")
    return BLOCKING, run


@semantics("nvvm.barrier.arrive")
def named_barrier_arrive(p, op, a, r):
    """bar.arrive id, n: count this warp in at barrier id without waiting (the producer side of a
    named-barrier hand-off, e.g. sm_90a's warpgroup ping-pong)."""
    if len(a) != 2:
        raise Unsupported("nvvm.barrier.arrive without an id and a thread count")
    bid, count = a

    def run(env, mask, w):
        b, n = _named(env, mask, w, bid, count, "bar.arrive")
        _barrier_arrive(w, b, n // WARP, f"bar.arrive {b}, {n}")
    return PLAIN, run


@semantics("nvvm.shfl.sync")
def shfl_sync(p, op, a, r):
    """shfl.sync (PTX ISA §9.7.8.6) over the full warp (membermask -1, clamp 31): bfly reads lane
    ^ b, idx lane b, up lane - b, down lane + b (a lane out of range keeps its own value)."""
    kind = str(op.attributes["kind"]).split()[-1].rstrip(">")
    if "return_value_and_is_valid" in op.attributes or kind not in ("bfly", "idx", "up", "down"):
        raise Unsupported(f"nvvm.shfl.sync {op.attributes['kind']} with a validity predicate or an unknown kind")
    members, value, offset, clamp, z = a[0], a[1], a[2], a[3], r[0]

    def run(env, mask, w):
        if uniform(env[members], mask, "shfl membermask") & 0xFFFFFFFF != 0xFFFFFFFF or not mask.all():
            raise Unsupported("shfl.sync over a partial warp")
        if uniform(env[clamp], mask, "shfl clamp") != 31:
            raise Unsupported("shfl.sync with a segment clamp other than 31")
        b = env[offset].astype(np.int64)
        src = {"bfly": LANES ^ b, "idx": b & 31, "up": LANES - b, "down": LANES + b}[kind]
        src = np.where((src < 0) | (src > 31), LANES, src)
        env[z] = env[value][src]
    return PLAIN, run


@semantics("nvvm.mbarrier.init")
def mbarrier_init(p, op, a, r):
    ptr, count = a[0], a[1]

    def run(env, mask, w):
        cta = w.cta
        g = cta.hb.g(w.wid)
        init_at = (g, int(cta.hb.vc[0, g, g]))       # a peer's use must be ordered after this
        for lane in np.nonzero(mask)[0]:
            addr = int(env[ptr][lane])
            cta.mbarriers[addr] = MBarrier(addr, int(env[count][lane]), cta.kernel.barrier_name(addr), init_at)
    return PLAIN, run


@semantics("nvvm.mbarrier.arrive")
def mbarrier_arrive(p, op, a, r):
    ptr, z = a[0], (r[0] if r else None)

    def run(env, mask, w):
        published = release(w, "mbarrier.arrive")
        for addr, n in zip(*np.unique(env[ptr][mask], return_counts=True)):
            cta, local = cluster_address(w.cta, addr)      # a mapa address: the peer's barrier
            b = cta.mbarrier(local)
            if cta is not w.cta:
                check_init_ordered(b, published, f"mbarrier.arrive (remote) of CTA rank {w.cta.rank}")
            b.arrive(int(n), published)
        if z is not None:
            env[z] = np.zeros(WARP, np.int64)
    return PLAIN, run


@semantics("nvvm.mbarrier.arrive.expect_tx")
def mbarrier_arrive_expect_tx(p, op, a, r):
    ptr, tx = a[0], a[1]

    def run(env, mask, w):
        published = release(w, "mbarrier.arrive.expect_tx")
        for lane in np.nonzero(mask)[0]:
            b = w.cta.mbarrier(env[ptr][lane])
            b.expect_tx(int(env[tx][lane]))
            b.arrive(1, published)
    return PLAIN, run


@semantics("nvvm.mbarrier.try_wait.parity")
def mbarrier_try_wait_parity(p, op, a, r):
    """Lowered by LLVM to a loop until the wait succeeds: the warp blocks here."""
    ptr, parity = a[0], a[1]

    def run(env, mask, w):
        b = w.cta.mbarrier(uniform(env[ptr], mask, "try_wait address"))
        par = uniform(env[parity], mask, "try_wait parity")
        w.cta.stats["mbarrier_waits"] += 1
        if not b.passed(par):
            yield Wait(lambda: b.passed(par), lambda: f"mbarrier.try_wait.parity {par} on {b.describe()}")
        if b.vc_done is not None:
            w.cta.hb.acquire(w.wid, b.vc_done)
    return BLOCKING, run
