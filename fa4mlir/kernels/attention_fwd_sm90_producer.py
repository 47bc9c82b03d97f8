"""The producer warp of the sm_90a attention kernel (attention_fwd_sm90.py; its module docstring has the
algorithm and roles): per tile, K_0 and Q, then K_{j+1} and V_j by TMA into their rings, the last V."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..dialect import builders as fa4
from ..dsl import ELEM_BYTES, const
from . import attention_fwd_sm90_paged as paged

if TYPE_CHECKING:
    from .attention_fwd_sm90 import _Buffers, _Counts, _Geometry, _Tiles


def _load_role(kb, cfg, tiles: _Tiles, bufs: _Buffers):
    if cfg.persistent:
        with kb.if_(kb.elect_one()).then_():
            bufs.prefetch_descriptors()
    tiles.each(lambda geo, counts: _load_tile(kb, cfg, bufs, geo, counts, tiles.params.paged))


def _load_tile(kb, cfg, bufs: _Buffers, geo: _Geometry, counts: _Counts | None, pp=None):
    q_count, kv_count = counts or (None, None)
    # a tile with no visible KV block (causal, seqlen_q > seqlen_k) loads nothing: its consumers skip
    # q_pipe and write O = 0 into the Q tile, which an unwaited Q load could land on afterwards
    with kb.if_(kb.elect_one() & geo.n_blocks.gt(0)).then_():
        if counts is None:
            bufs.prefetch_descriptors()

        def load(pipe, desc, smem, s, rows, head, row, tx_bytes, stage_bytes=0, lay=cfg.qk_tile):
            """One ring stage (at s.stage * stage_bytes of `smem`): `rows` rows from `row` of `head`,
            one swizzled box per column chunk of `lay` (the Q/K or V TileLayout)."""
            pipe.producer_acquire(s)
            pipe.producer_commit(s, tx_bytes=tx_bytes)
            base = s.stage * stage_bytes if stage_bytes else 0
            for c in range(lay.chunks):
                fa4.tma_load(desc, kb.gep(smem, base + c * rows * lay.swizzle, "i8"), s.stage,
                             [const(c * lay.chunk), head, row, geo.tma_batch],
                             pipe=pipe.name, box=[lay.chunk, 1, rows, 1], elem_bytes=ELEM_BYTES[cfg.dtype])

        def load_k(s, row):
            if pp is not None:   # page_size: boxes per page (attention_fwd_sm90_paged)
                return paged.load_tile(kb, cfg, pp, geo, bufs.k_pipe, bufs.k_desc, bufs.k_smem, s, row,
                                       bufs.kv_bytes, bufs.kv_bytes, cfg.qk_tile)
            load(bufs.k_pipe, bufs.k_desc, bufs.k_smem, s, cfg.bn, geo.kv_head, geo.k_row(row), bufs.kv_bytes,
                 stage_bytes=bufs.kv_bytes)

        def load_v(s, row):
            if pp is not None:
                return paged.load_tile(kb, cfg, pp, geo, bufs.v_pipe, bufs.v_desc, bufs.v_smem, s, row,
                                       bufs.v_bytes, bufs.v_bytes, cfg.v_tile)
            load(bufs.v_pipe, bufs.v_desc, bufs.v_smem, s, cfg.bn, geo.kv_head, geo.k_row(row), bufs.v_bytes,
                 stage_bytes=bufs.v_bytes, lay=cfg.v_tile)

        # K runs one block ahead of V, in the order the consumers use them: S_j = Q K_j^T is issued
        # before O += P_{j-1} V_{j-1}, so K_j is never queued behind a V whose slot frees later
        # 1. K_0, then Q (bm rows)
        k0 = bufs.k_pipe.state_at(kv_count)
        load_k(k0, const(0) if geo.first is None else geo.first * cfg.bn)
        q0 = bufs.q_pipe.state_at(q_count)
        load(bufs.q_pipe, bufs.q_desc, bufs.q_smem, q0, cfg.bm, geo.head, geo.q_row(geo.m0), bufs.q_bytes,
             stage_bytes=bufs.q_bytes if cfg.q_stages > 1 else 0)
        # 2. K_{j+1} and V_j for j < n_blocks - 1, then the last V
        loop = kb.for_(0, geo.n_blocks - 1, 1, carry=k0)
        with loop as (j, s):
            nxt = s.advance()
            load_k(nxt, geo.block(j + 1) * cfg.bn)
            load_v(s, geo.block(j) * cfg.bn)
            loop.yield_(nxt)
        load_v(loop.results, geo.block(geo.n_blocks - 1) * cfg.bn)
