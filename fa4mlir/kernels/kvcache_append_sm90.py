"""Append new tokens to the KV cache on sm_90a: flash_attn_with_kvcache's k=, v= (before the split kernel).

One CTA per (new token i, sequence b): token t = L0_b + i, with L0_b = cache_seqlens[b] clamped to
[0, capacity - seqlen_new] (kvcache.py's kernel contract), goes to pool row page_table[b, t /
page_size] * page_size + t % page_size (entry clamped into [0, num_pages)), or to row t of
sequence b of a contiguous cache. Its kv_heads x D elements of k and of v are copied 16 bytes per
thread and step (plain loads and stores: the copy is tiny next to the attention that follows, and
runs before it in stream order). All tensors may be strided (element strides of dims 0-2; the last
dimension is contiguous).
"""
from __future__ import annotations

from .. import dsl
from ..dsl import KernelBuilder, fast_div
from .attention_decode_sm90_config import APPEND_PARAMS, APPEND_THREADS, AppendConfig

UNIT = 8        # 16-bit elements per 16-byte copy


def build(cfg: AppendConfig = AppendConfig()) -> dsl.KernelIR:
    cfg.validate()
    kb = KernelBuilder(cfg.name(), arch="sm_90a", block=(APPEND_THREADS, 1, 1), config=cfg.key())
    p = kb.params_from(APPEND_PARAMS, tma={})
    per_head = cfg.head_dim // UNIT
    with kb.body():
        i, b = kb.block_idx(0), kb.block_idx(1)
        raw = kb.load(kb.gep(p["cache_seqlens"], b, "i32"), "i32", align=4)
        t = raw.smax(0).smin(p["capacity"] - p["seqlen_new"]) + i
        if cfg.paged:
            slot = fast_div(t, p["page_mul"], p["page_shr"])
            entry = kb.load(kb.gep(p["page_table"], b.to("i64") * p["page_table_stride"].to("i64") + slot.to("i64"),
                                   "i32"), "i32", align=4)
            page, row = entry.smax(0).smin(p["num_pages"] - 1), t - slot * p["page_size"]
        else:
            page, row = b, t
        units = p["kv_heads"] * per_head
        tid = kb.thread_idx(0)
        loop = kb.for_(tid, units, APPEND_THREADS)
        with loop as (u, _):
            h = u // per_head
            col = (u - h * per_head) * UNIT
            for src, dst in (("k", "k_cache"), ("v", "v_cache")):
                s_at = (b.to("i64") * p[f"{src}_stride_0"] + i.to("i64") * p[f"{src}_stride_1"]
                        + h.to("i64") * p[f"{src}_stride_2"] + col.to("i64"))
                d_at = (page.to("i64") * p[f"{dst}_stride_0"] + row.to("i64") * p[f"{dst}_stride_1"]
                        + h.to("i64") * p[f"{dst}_stride_2"] + col.to("i64"))
                value = kb.load(kb.gep(p[src], s_at, cfg.dtype), ("i32", 4), align=16)
                kb.store(value, kb.gep(p[dst], d_at, cfg.dtype), align=16)
            loop.yield_()
    return kb.finish()
