"""A tiny sm_100a kernel of one CTA pair whose loads are the .cta_group::2 TMA forms (tests/
test_pair_gather.py and the PTX lit test lit_tests/kernels/pair_gather_ptx.py use it): FlashMLA's
sm_100 sparse prefill loads its K rows this way (csrc/sm100/prefill/sparse/fwd/head128/phase1.cuh:
each CTA gathers B_TOPK/2 rows with tma_gather4_cta_group_2 onto CTA 0's barrier, whose MMA thread
expects the pair's bytes).

D (M x N, f32) = A (M x K, bf16) B^T with B = table[idx] (N gathered rows of a 2-D bf16 table), K = 64
k_tiles (one 128-byte swizzle chunk of A and B per K tile; four k16 MMAs per tile), M = 256 (data-path
Layout A: CTA r holds A rows [128 r, 128 r + 128) and gets D rows [128 r, 128 r + 128)) or M = 128
(Layout B, note "pair layouts" of interpret/ops/pair.py: CTA r holds A rows [64 r, 64 r + 64) and gets
D rows [64 r, 64 r + 64), lanes 0-63 columns [0, N/2) and lanes 64-127 columns [N/2, N)).
CTA r gathers B rows idx[N/2 r .. N/2 r + N/2).

* role "load" (warp 4), one thread in each CTA: per K tile acquires its own `kv` stage, TMA-loads its A
  rows (fa4.tma_load cta_group 2) and gathers its B rows (fa4.tma_gather4 cta_group 2), both completing
  on the LEADER's `kv.full[stage]`; both execute the pair's commit (producer_commit cta_group 2: the
  leader alone arrives, expecting both CTAs' bytes).
* role "mma" (warp 5), one thread of the leader: acquires `d`; per K tile waits `kv.full` (both CTAs'
  bytes), issues the four MMAs, releases `kv` in both CTAs (multicast mma_commit 0b11); commits `d`
  to both CTAs (multicast).
* role "epilogue" (warps 0-3): waits `d`, reads its lane's columns, stores them to `out` (the rows this
  CTA's lanes hold in the MMA's layout), releases `d` on the leader's empty barrier (the peer's through
  fa4.peer_arrive).

`bug` seeds one protocol error (each must be caught by the interpreter and the pipeline verifier):
"unicast_loads" (the loads are cta_group 1: the peer's bytes complete on its own barrier, the leader's
full never completes), "own_bytes" (the commit expects one CTA's bytes: the leader's phase may complete
before the peer's rows land), "no_cluster_sync" (no cluster barrier between the inits and the peer's
first copy onto the leader's barrier), "peer_skips_acquire" (the peer loads without acquiring its
stage: its copies may overwrite a stage the MMA still reads, k_tiles > 2), "leader_only_release" (kv
released in the leader only: the peer's load stalls once its ring wraps, k_tiles > 2), "peer_commits"
(only the peer executes the pair's commit: its lowering arrives in the leader only, so nobody does).
"""
from __future__ import annotations

from fa4mlir.dialect import builders as fa4
from fa4mlir.dsl import KernelBuilder, const
from fa4mlir.kernels.common import tcgen05
from fa4mlir.kernels.common.gather4 import chunk_columns, gather4_tile, tile_bytes

DTYPE = "bf16"
SW = 128
K_TILE = chunk_columns(DTYPE)     # 64 columns: one 128-byte swizzle chunk
MMA_K = 16
STAGES = 2
BUGS = ("unicast_loads", "own_bytes", "no_cluster_sync", "peer_skips_acquire", "leader_only_release", "peer_commits")


def build(m: int = 256, n: int = 64, bug: str | None = None, k_tiles: int = 1, a_tmem: str | None = None):
    """`a_tmem` (M = 128 only): the leader first copies both CTAs' A tiles into TMEM with tcgen05.cp
    64x128b.`a_tmem` cta_group 2 (FlashMLA's Q route: "warpx2::02_13" puts each row in both lane halves,
    Layout B's A) and the MMAs read A from TMEM."""
    if a_tmem is not None and m != 128:
        raise ValueError("a_tmem: the probe copies A into TMEM for M = 128 (Layout B) only")
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug {bug!r}: one of {BUGS}")
    if m not in (128, 256) or n % 8 or not 32 <= n <= 256:
        raise ValueError(f"m {m}, n {n}: the pair's M is 128 or 256, N a multiple of 8 in [32, 256] here")
    rows_a, rows_b = m // 2, n // 2
    name = (f"pair_gather_probe_m{m}_n{n}" + (f"_k{k_tiles}" if k_tiles != 1 else "") + (f"_{bug}" if bug else "")
            + (f"_tmem_{a_tmem.replace('::', '_')}" if a_tmem else ""))
    kb = KernelBuilder(name, arch="sm_100a", block=(192, 1, 1), cluster=(2, 1, 1))
    a_desc = kb.param_tma("a", dtype=DTYPE, box=(K_TILE, rows_a), swizzle="128B")
    table = kb.param_tma("table", dtype=DTYPE, box=(K_TILE, 1), swizzle="128B")
    idx = kb.param_ptr("idx")
    out = kb.param_ptr("out")
    a_bytes, b_bytes = rows_a * K_TILE * 2, tile_bytes(rows_b, K_TILE, DTYPE)
    group = 1 if bug == "unicast_loads" else 2
    d_cols = n if m == 256 else n // 2
    a_col = d_cols                                  # A's TMEM columns (a_tmem): K_TILE / 2 after D
    used = d_cols + (K_TILE // 2 if a_tmem else 0)
    cols = max(32, 1 << (used - 1).bit_length())
    with kb.body():
        a_smem = kb.smem("a_smem", STAGES * a_bytes, align=1024)
        b_smem = kb.smem("b_smem", STAGES * b_bytes, align=1024)
        tmem_slot = kb.smem("tmem_slot", 16, align=16)
        kv = kb.pipeline("kv", num_stages=STAGES, producer="load", consumers=["mma"])
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
                    row = [kb.load(kb.gep(idx, rank * rows_b + i, "i32"), "i32") for i in range(rows_b)]
                    loop = kb.for_(0, k_tiles, 1, carry=kv.initial_state())
                    with loop as (kt, s):
                        if bug == "peer_skips_acquire":
                            with kb.if_(rank.eq(0)).then_():
                                kv.producer_acquire(s)
                        else:
                            kv.producer_acquire(s)
                        fa4.tma_load(a_desc, kb.gep(a_smem, s.stage * a_bytes, "i8"), s.stage, [kt * K_TILE, rank * rows_a],
                                     pipe="kv", box=[K_TILE, rows_a], elem_bytes=2, **({"cta_group": 2} if group == 2 else {}))
                        tx = gather4_tile(kb, table, kb.gep(b_smem, s.stage * b_bytes, "i8"), s.stage, row, pipe="kv",
                                          cols=K_TILE, dtype=DTYPE, col0=kt * K_TILE, cta_group=group)
                        pair_bytes = (a_bytes + tx) * (1 if bug == "own_bytes" else 2)
                        if bug == "peer_commits":
                            with kb.if_(rank.eq(1)).then_():
                                kv.producer_commit(s, tx_bytes=pair_bytes, cta_group=2)
                        else:
                            kv.producer_commit(s, tx_bytes=pair_bytes, cta_group=2)
                        loop.yield_(s.advance())
            with kb.role("mma", first_warp=5, num_warps=1):
                with kb.if_(kb.elect_one() & rank.eq(0)).then_():
                    sd = d.initial_state()
                    d.producer_acquire(sd)
                    loop = kb.for_(0, k_tiles, 1, carry=kv.initial_state())
                    with loop as (kt, s):
                        kv.consumer_wait(s)
                        kb.fence("tcgen05_after")
                        if a_tmem:                  # 8 slices of 8 columns (128 bits), 4 TMEM columns each
                            for j in range(K_TILE // 8):
                                src = fa4.smem_desc(kb.gep(a_smem, s.stage * a_bytes + 16 * j, "i8"), swizzle=SW, lbo=16,
                                                    sbo=8 * SW)
                                fa4.tmem_copy(tmem + a_col + 4 * j, src, shape="64x128b", multicast=a_tmem, cta_group=2)
                        for kk in range(K_TILE // MMA_K):
                            off = kk * MMA_K * 2
                            b = fa4.smem_desc(kb.gep(b_smem, s.stage * b_bytes + off, "i8"), swizzle=SW, lbo=16, sbo=8 * SW)
                            acc = kt.ne(0) if kk == 0 else const(1, "i1")
                            if a_tmem:
                                tcgen05.mma(tmem + a_col + kk * (MMA_K // 2), b, acc, tmem, m=m, n=n, k=MMA_K,
                                            ab_dtype=DTYPE, a_source="tmem", cta_group=2)
                                continue
                            a = fa4.smem_desc(kb.gep(a_smem, s.stage * a_bytes + off, "i8"), swizzle=SW, lbo=16, sbo=8 * SW)
                            tcgen05.mma(a, b, acc, tmem, m=m, n=n, k=MMA_K, ab_dtype=DTYPE, cta_group=2)
                        kv.mma_commit(s, side="empty", cta_group=2, multicast=0b01 if bug == "leader_only_release" else 0b11)
                        loop.yield_(s.advance())
                    d.mma_commit(sd, side="full", cta_group=2, multicast=0b11)
            with kb.role("epilogue", first_warp=0, num_warps=4):
                s = d.initial_state()
                d.consumer_wait(s)
                kb.fence("tcgen05_after")
                lane = kb.thread_idx(0) % 128
                vals = tcgen05.tmem_load(tmem + tcgen05.lane_base(kb), d_cols)
                fa4.tmem_wait(kind="ld")
                if m == 256:
                    out_row, col0 = rank * 128 + lane, 0
                else:
                    out_row, col0 = rank * 64 + lane % 64, lane // 64 * (n // 2)
                base = kb.gep(out, (out_row * n + col0) * 4, "i8")
                for c in range(d_cols):
                    kb.store(vals[c], kb.gep(base, c * 4, "i8"))
                with kb.if_(rank.eq(0)).then_():
                    d.consumer_release(s)
                with kb.if_(rank.eq(1)).then_():
                    d.peer_arrive(s, 0, side="empty")
        kb.fence("tcgen05_before")
        kb.cluster_sync()
        with kb.if_(warp.eq(0)).then_():
            kb.fence("tcgen05_after")
            fa4.tmem_dealloc(tmem, cols=cols, cta_group=2)
    return kb.finish()
