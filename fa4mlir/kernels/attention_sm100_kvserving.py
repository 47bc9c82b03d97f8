"""The sm_100a kernel's masks and score modifiers on the KV-cache routes: the configs CI compiles,
verifies and interprets (MLIR-free; tests/test_attention_sm100_kvserving.py, kernel set
`attention-sm100-kvserving`).

Note "KV-cache serving" (issue 28 items 2 and 6): attention_sm100_config's note "Serving" masks
(window_left / window_right, chunk: common.mask_family's objects, canonical as AttnConfig spells them)
and score modifiers (softcap, sinks) on the KV-cache operand's routes: the paged two-Q-tile prefill CTA
(note "Paged") and the decode route (note "Decode": a contiguous cache, per-page TMA boxes, the row
gather, an e4m3 cache). It is the contiguous prefill's code (attention_fwd_sm100): _Geometry classifies
the CTA's KV blocks with common.masks.tile_blocks over its query rows, visits blocks first .. first +
n_blocks - 1 (the empty blocks before `first` are never fetched: the load warp's boxes, the row gather
and the FP8 conversion all index the cache by geo.block(n)), runs the blocks every row of a softmax
tile sees whole without a mask and the edges with key_window; softcap's tanh follows S out of TMEM;
sinks join each row's max and sum in the correction's epilogue.

On the decode route a packed row r holds token r // group of head r % group (note "Decode"): its query
position for the mask is that token, the seqlen_q index, bottom-right aligned against the sequence's
key length L_b (diag = token + L_b - seqlen_q), as the sm_90a decode does (attention_decode_sm90, note
"Window"); tile_blocks runs over the CTA's tile_tokens tokens; each packed row reads its own head's sink
(head0 + r % group). "Ragged" there means per-sequence key lengths: L_b = cache_seqlens[b], read on the
device, over one seqlen_q for the whole batch (the contiguous decode route takes one seqlen_k); packed
ragged queries (varlen: cu_seqlens_q / cu_seqlens_k, seqused_k) stay built for the contiguous prefill
only and are refused here. Rows before a window's start inside a visited block are read and get P = 0,
so they must be finite cache rows (the sm_90a decode's contract too); rows at or past L_b may hold
anything (note "Stale V rows"). No host entry point selects these kernels: flash_attn_with_kvcache
(attention/kvcache_call.py) runs the sm_90a kernels only and refuses other devices (DeviceError); they
are reached through FA4Config, grid and paged_launch_args / launch_args.

Note "Load warp and windows": at D128 with 16-row pages (8 boxes a K/V tile, each looked up by the
48-register load warp, paged_rows note "Load warp registers"), a window or chunk made ptxas spill one
4-byte value (the CTA's SMEM base, 156 bytes reloaded) while the load loop ran over visits n fetching
block first + n. With a window the load loop runs over the block indices themselves (first .. first +
n_blocks - 1): one value fewer live, 0 spills (the contiguous serving kernels' windowed load loop took
the same shape; kernels without a window or chunk keep their code).
"""
from __future__ import annotations

from .attention_sm100_config import FA4Config

DECODE = dict(num_q_tiles=1, fuse_gqa=True)
GQA = dict(num_q_heads=8, num_kv_heads=2)      # group 4, as paged_configs(): 32 tokens a decode tile
GATHER_PAGE = 5                                # a page size the row gather fetches (gcd(128, 5) < 16)


def kvcache_serving_configs() -> list[FA4Config]:
    """Note "KV-cache serving"'s code shapes, bf16 D128 (the register-heaviest head dim), GQA 8 over 2:
    the decode route with a causal window over 16-row pages (8 boxes a tile: the once-spilling load
    warp) and over the row gather (page 5, with sinks), a causal chunk over 16-row pages, a
    non-causal chunk with softcap over the row gather, softcap with sinks over 64-row pages, a
    two-sided window over a contiguous cache, a causal window with sinks over an e4m3 cache of 16-row
    pages with per-(page, KV head) scales (the convert warpgroup's scales of block first + n); the
    paged prefill CTA with a causal window and sinks
    (page 16) and with softcap (page 64). Outside supported_configs() (CI's sweep); other combinations
    supported() accepts are not compiled in CI."""
    decode = [dict(page_size=16, causal=True, window_left=100), dict(page_size=GATHER_PAGE, causal=True, window_left=100,
                                                                     sinks=True),
              dict(page_size=16, causal=True, chunk=64), dict(page_size=GATHER_PAGE, chunk=64, softcap=True),
              dict(page_size=64, causal=True, softcap=True, sinks=True), dict(window_left=100, window_right=20)]
    decode.append(dict(page_size=16, causal=True, window_left=100, sinks=True, kv_dtype="e4m3", kv_scale="block"))
    prefill = [dict(page_size=16, causal=True, window_left=100, sinks=True), dict(page_size=64, causal=True, softcap=True)]
    return [FA4Config(**GQA, **DECODE, **kw) for kw in decode] + [FA4Config(**GQA, **kw) for kw in prefill]


__all__ = ["kvcache_serving_configs", "DECODE", "GQA", "GATHER_PAGE"]
