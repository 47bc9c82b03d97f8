"""A tiny sm_100a kernel of one CTA pair (cluster 2 x 1 x 1) that exercises every 2-CTA form end to end
(tests/test_cta_pair.py and the PTX lit test lit_tests/kernels/cta_pair_ptx.py use it):

D (256 x N, f32) = A (256 x 16, bf16) B^T (B: N x 16, bf16), one tcgen05.mma.cta_group::2 m256 nN k16.
CTA r of the pair holds rows [128 r, 128 r + 128) of A and rows [N/2 r, N/2 r + N/2) of B (note "CTA
pair" of passes/lower_mma_sm100.py) and gets rows [128 r, 128 r + 128) of D in its TMEM.

* warp 0 of each CTA allocates the pair's TMEM (tcgen05.alloc.cta_group::2); both CTAs meet at a
  cluster barrier after the mbarrier inits (the peer arrives on the leader's barriers).
* role "load" (warp 4): one thread TMA-loads this CTA's A and B halves (pipeline `ab`, this CTA's
  barrier).
* role "mma" (warp 5), one thread: in the peer, waits for its halves and arrives on the leader's
  `ready` (fa4.peer_arrive); in the leader, waits `ab` and `ready`, issues the MMA, and commits `d`
  with multicast 0b11: one arrival on `d`'s full barrier in each CTA.
* role "epilogue" (warps 0-3): waits `d`, reads its lane's N columns and stores them as f32 rows of
  `out` (256 x N).

fa4-verify-pipelines has no model of a CTA pair yet (a protocol op under a cluster-rank condition,
fa4.peer_arrive, multicast commits), so the probe is marked unverified (dialect.query.mark_unverified):
it proves the lowering, ptxas and the SASS of the 2-CTA forms, not the protocol.
"""
from __future__ import annotations

from fa4mlir.dialect import builders as fa4
from fa4mlir.dialect.query import mark_unverified
from fa4mlir.dsl import KernelBuilder, const
from fa4mlir.kernels.common import tcgen05

DTYPE = "bf16"
K = 16
SW = 32                         # a 16-column bf16 row is 32 bytes: 32B swizzle


def build(n: int = 64):
    kb = KernelBuilder(f"cta_pair_probe_n{n}", arch="sm_100a", block=(192, 1, 1), cluster=(2, 1, 1))
    a_desc = kb.param_tma("a", dtype=DTYPE, box=(K, 128), swizzle="32B")
    b_desc = kb.param_tma("b", dtype=DTYPE, box=(K, n // 2), swizzle="32B")
    out = kb.param_ptr("out")
    cols = max(32, n)
    with kb.body():
        a_smem = kb.smem("a_smem", 128 * K * 2)
        b_smem = kb.smem("b_smem", n // 2 * K * 2)
        tmem_slot = kb.smem("tmem_slot", 16, align=16)
        ab = kb.pipeline("ab", num_stages=1, producer="load", consumers=["mma"])
        ready = kb.pipeline("ready", num_stages=1, producer="mma", consumers=["mma"])
        d = kb.pipeline("d", num_stages=1, producer="mma", consumers=["epilogue"], consumer_arrivals=128)
        warp = kb.thread_idx(0) // 32
        rank = kb.cluster_rank()
        with kb.if_(warp.eq(0)).then_():
            fa4.tmem_alloc(tmem_slot, cols=cols, cta_group=2)
            fa4.tmem_relinquish(cta_group=2)
        kb.pipeline_init()
        kb.fence("tcgen05_before")
        kb.cluster_sync()
        kb.fence("tcgen05_after")
        tmem = kb.load(tmem_slot, "i32")
        with kb.warp_roles():
            with kb.role("load", first_warp=4, num_warps=1):
                with kb.if_(kb.elect_one()).then_():
                    s = ab.initial_state()
                    ab.producer_acquire(s)
                    fa4.tma_load(a_desc, a_smem, s.stage, [const(0), rank * 128], pipe="ab", box=[K, 128], elem_bytes=2)
                    fa4.tma_load(b_desc, b_smem, s.stage, [const(0), rank * (n // 2)], pipe="ab", box=[K, n // 2], elem_bytes=2)
                    ab.producer_commit(s, tx_bytes=(128 + n // 2) * K * 2)
            with kb.role("mma", first_warp=5, num_warps=1):
                s = ab.initial_state()
                with kb.if_(rank.eq(1) & kb.elect_one()).then_():
                    ab.consumer_wait(s)
                    ready.peer_arrive(s, 0, side="full")
                with kb.if_(rank.eq(0) & kb.elect_one()).then_():
                    ab.consumer_wait(s)
                    ready.consumer_wait(s)
                    kb.fence("tcgen05_after")
                    a = fa4.smem_desc(a_smem, swizzle=SW, lbo=16, sbo=8 * SW)
                    b = fa4.smem_desc(b_smem, swizzle=SW, lbo=16, sbo=8 * SW)
                    tcgen05.mma(a, b, const(0, "i1"), tmem, m=256, n=n, k=K, ab_dtype=DTYPE, cta_group=2)
                    d.mma_commit(s, side="full", cta_group=2, multicast=0b11)
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
        kb.fence("tcgen05_before")
        kb.cluster_sync()
        with kb.if_(warp.eq(0)).then_():
            kb.fence("tcgen05_after")
            fa4.tmem_dealloc(tmem, cols=cols, cta_group=2)
    kir = kb.finish()
    with kir.module.context:
        mark_unverified(kir.module.operation)
    return kir
