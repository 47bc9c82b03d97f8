"""The TMA producer of an A/B K-slice ring, shared by the sm_90a and sm_100a GEMMs.

One elected thread of the load warp walks the K tiles: for each it waits until the consumers freed
the stage (their release on sm_90a, the MMA's tcgen05.commit on sm_100a), announces the bytes of
both TMA boxes on `full[stage]`, and issues the two copies.
"""
from __future__ import annotations

from ...dialect import builders as fa4
from ...dsl import ELEM_BYTES


def load_ab_ring(kb, cfg, ab_pipe, a_desc, b_desc, a_smem, b_smem, m0, n0, num_k_tiles, a_bytes, b_bytes):
    with kb.if_(kb.elect_one()).then_():
        fa4.tma_prefetch(a_desc)
        fa4.tma_prefetch(b_desc)
        loop = kb.for_(0, num_k_tiles, 1, carry=ab_pipe.initial_state())
        with loop as (kt, s):
            # 1. wait until the consumers freed this stage
            ab_pipe.producer_acquire(s)
            # 2. announce the bytes both TMA boxes will land on full[stage]
            ab_pipe.producer_commit(s, tx_bytes=a_bytes + b_bytes)
            # 3. issue the copies of A[m0:, k:] and B[n0:, k:]
            k0 = kt * cfg.bk
            a_dst = kb.gep(a_smem, s.stage * a_bytes, "i8")
            b_dst = kb.gep(b_smem, s.stage * b_bytes, "i8")
            fa4.tma_load(a_desc, a_dst, s.stage, [k0, m0], pipe=ab_pipe.name, box=[cfg.bk, cfg.bm],
                         elem_bytes=ELEM_BYTES[cfg.dtype])
            fa4.tma_load(b_desc, b_dst, s.stage, [k0, n0], pipe=ab_pipe.name, box=[cfg.bk, cfg.bn],
                         elem_bytes=ELEM_BYTES[cfg.dtype])
            loop.yield_(s.advance())
