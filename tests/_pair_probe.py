"""A tiny sm_100a kernel of one CTA pair (cluster 2 x 1 x 1) that exercises every 2-CTA form end to end
(tests/test_cta_pair.py and the PTX lit test lit_tests/kernels/cta_pair_ptx.py use it):

D (256 x N, f32) = A (256 x K, bf16) B^T (B: N x K, bf16), K = 16 k_tiles: one tcgen05.mma.cta_group::2
m256 nN k16 per K tile (the first overwrites D). CTA r of the pair holds rows [128 r, 128 r + 128) of A
and rows [N/2 r, N/2 r + N/2) of B (note "CTA pair" of passes/lower_mma_sm100.py) and gets rows
[128 r, 128 r + 128) of D in its TMEM.

* warp 0 of each CTA allocates the pair's TMEM (tcgen05.alloc.cta_group::2); both CTAs meet at a
  cluster barrier after the mbarrier inits (the peer arrives on the leader's barriers).
* role "load" (warp 4): one thread TMA-loads this CTA's A and B halves of each K tile into the
  2-stage ring `ab` (this CTA's barriers).
* role "mma" (warp 5), one thread, one K loop whose body branches on the rank: the peer waits for
  its halves, acquires its `ready` stage and arrives on the leader's `ready` (fa4.peer_arrive); the
  leader waits `ab` and `ready`, issues the MMA, releases `ab` in both CTAs with a multicast
  mma_commit (the MMA read both CTAs' halves) and the peer's `ready` with a remote arrive on its
  empty barrier. Around the loop the leader acquires `d` (its empty barrier takes both CTAs'
  epilogues, 256 arrivals) and commits it with multicast 0b11 (one arrival on `d`'s full barrier in
  each CTA). The peer's branch comes first in program order (fa4-verify-pipelines' rank views follow
  program order, note "CTA pair").
* role "epilogue" (warps 0-3): waits `d`, reads its lane's N columns, stores them as f32 rows of
  `out` (256 x N) and releases `d` on the leader's empty barrier (the peer's through
  fa4.peer_arrive).

fa4-verify-pipelines checks it in its pair model (note "CTA pair": a view per cluster rank) and the
interpreter runs the pair (interpret/cluster.py, ops/pair.py); tests/test_pair_interpret.py.

`bug` seeds one protocol error (tests/test_pair_interpret.py: the interpreter and the pipeline
verifier must catch each): "unicast_commit" (the leader's commit arrives on its own `d` only: CTA
1's epilogue never wakes), "rank1_issues" (the roles of the two ranks swapped: CTA 1 issues the MMA),
"no_cluster_sync" (no cluster barrier between the mbarrier inits and the peer's arrive on the
leader's barrier), "no_peer_arrive" (the peer never arrives on the leader's `ready`), "peer_not_waited"
(the peer arrives on `ready` without waiting for its own TMA loads: the leader's MMA may read B's
second half before it lands), "peer_release_local" (the peer's epilogue releases `d` on its own empty
barrier, which no producer waits on: the leader's `d` gets 128 of its 256 arrivals; the verifier's
catch only, as the probe never refills `d`), "unicast_release" (the leader releases `ab` in its own CTA
only: the peer's load stalls once its ring wraps, k_tiles > 2).
"""
from __future__ import annotations

from fa4mlir.dialect import builders as fa4
from fa4mlir.dsl import KernelBuilder
from fa4mlir.kernels.common import tcgen05

DTYPE = "bf16"
K = 16
SW = 32                         # a 16-column bf16 row is 32 bytes: 32B swizzle
STAGES = 2


BUGS = ("unicast_commit", "rank1_issues", "no_cluster_sync", "no_peer_arrive", "peer_not_waited", "peer_release_local",
        "unicast_release")


def build(n: int = 64, bug: str | None = None, k_tiles: int = 1):
    """The probe with N = `n` and K = 16 `k_tiles` (one k16 MMA a K tile, accumulating from the second;
    the `ab` and `ready` rings have 2 stages, so that k_tiles > 2 wraps them)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug {bug!r}: one of {BUGS}")
    kt_name = f"_k{k_tiles}" if k_tiles != 1 else ""
    kb = KernelBuilder(f"cta_pair_probe_n{n}{kt_name}" + (f"_{bug}" if bug else ""), arch="sm_100a", block=(192, 1, 1),
                       cluster=(2, 1, 1))
    a_desc = kb.param_tma("a", dtype=DTYPE, box=(K, 128), swizzle="32B")
    b_desc = kb.param_tma("b", dtype=DTYPE, box=(K, n // 2), swizzle="32B")
    out = kb.param_ptr("out")
    cols = max(32, n)
    a_bytes, b_bytes = 128 * K * 2, n // 2 * K * 2
    with kb.body():
        a_smem = kb.smem("a_smem", STAGES * a_bytes)
        b_smem = kb.smem("b_smem", STAGES * b_bytes)
        tmem_slot = kb.smem("tmem_slot", 16, align=16)
        ab = kb.pipeline("ab", num_stages=STAGES, producer="load", consumers=["mma"])
        ready = kb.pipeline("ready", num_stages=STAGES, producer="mma", consumers=["mma"])
        d = kb.pipeline("d", num_stages=1, producer="mma", consumers=["epilogue"], consumer_arrivals=256)
        warp = kb.thread_idx(0) // 32
        rank = kb.cluster_rank()
        with kb.if_(warp.eq(0)).then_():
            fa4.tmem_alloc(tmem_slot, cols=cols, cta_group=2)
            fa4.tmem_relinquish(cta_group=2)
        kb.pipeline_init()
        kb.fence("tcgen05_before")
        if bug != "no_cluster_sync":
            kb.cluster_sync()
        else:
            kb.sync_threads()
        kb.fence("tcgen05_after")
        tmem = kb.load(tmem_slot, "i32")
        with kb.warp_roles():
            with kb.role("load", first_warp=4, num_warps=1):
                with kb.if_(kb.elect_one()).then_():
                    loop = kb.for_(0, k_tiles, 1, carry=ab.initial_state())
                    with loop as (kt, s):
                        ab.producer_acquire(s)
                        fa4.tma_load(a_desc, kb.gep(a_smem, s.stage * a_bytes, "i8"), s.stage, [kt * K, rank * 128],
                                     pipe="ab", box=[K, 128], elem_bytes=2)
                        fa4.tma_load(b_desc, kb.gep(b_smem, s.stage * b_bytes, "i8"), s.stage,
                                     [kt * K, rank * (n // 2)], pipe="ab", box=[K, n // 2], elem_bytes=2)
                        ab.producer_commit(s, tx_bytes=a_bytes + b_bytes)
                        loop.yield_(s.advance())
            with kb.role("mma", first_warp=5, num_warps=1):
                peer, leader = (0, 1) if bug == "rank1_issues" else (1, 0)
                sd = d.initial_state()
                with kb.if_(kb.elect_one()).then_():
                    with kb.if_(rank.eq(leader)).then_():
                        d.producer_acquire(sd)
                    loop = kb.for_(0, k_tiles, 1, carry=ab.initial_state())   # ab and ready move together
                    with loop as (kt, s):
                        with kb.if_(rank.eq(peer)).then_():
                            if bug != "peer_not_waited":
                                ab.consumer_wait(s)
                            ready.producer_acquire(s)
                            if bug != "no_peer_arrive":
                                ready.peer_arrive(s, leader, side="full")
                        with kb.if_(rank.eq(leader)).then_():
                            ab.consumer_wait(s)
                            ready.consumer_wait(s)
                            kb.fence("tcgen05_after")
                            a = fa4.smem_desc(kb.gep(a_smem, s.stage * a_bytes, "i8"), swizzle=SW, lbo=16, sbo=8 * SW)
                            b = fa4.smem_desc(kb.gep(b_smem, s.stage * b_bytes, "i8"), swizzle=SW, lbo=16, sbo=8 * SW)
                            tcgen05.mma(a, b, kt.ne(0), tmem, m=256, n=n, k=K, ab_dtype=DTYPE, cta_group=2)
                            ab.mma_commit(s, side="empty", cta_group=2,                  # both CTAs' A and B read
                                          multicast=0b01 if bug == "unicast_release" else 0b11)
                            ready.peer_arrive(s, peer, side="empty")
                        loop.yield_(s.advance())
                    with kb.if_(rank.eq(leader)).then_():
                        d.mma_commit(sd, side="full", cta_group=2, multicast=0b01 if bug == "unicast_commit" else 0b11)
            with kb.role("epilogue", first_warp=0, num_warps=4):
                s = d.initial_state()
                d.consumer_wait(s)
                kb.fence("tcgen05_after")
                lane = kb.thread_idx(0) % 128
                vals = tcgen05.tmem_load(tmem + tcgen05.lane_base(kb), n)
                fa4.tmem_wait(kind="ld")
                row = kb.gep(out, (rank * 128 + lane) * n * 4, "i8")
                for c in range(n):
                    kb.store(vals[c], kb.gep(row, c * 4, "i8"))
                with kb.if_(rank.eq(0)).then_():
                    d.consumer_release(s)
                with kb.if_(rank.eq(1)).then_():
                    if bug == "peer_release_local":
                        d.consumer_release(s)
                    else:
                        d.peer_arrive(s, 0, side="empty")        # the leader acquires d for both CTAs
        kb.fence("tcgen05_before")
        kb.cluster_sync()
        with kb.if_(warp.eq(0)).then_():
            kb.fence("tcgen05_after")
            fa4.tmem_dealloc(tmem, cols=cols, cta_group=2)
    return kb.finish()
