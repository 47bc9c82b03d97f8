"""Deviceless: flash_attn_with_kvcache with a sliding window, a chunk, a softcap and sinks, through the
decode kernel's compile-time variants (DecodeConfig window_left / window_right / chunk / softcap /
sinks) and the combine's sink variant, executed by the sm_90a interpreter on tiny problems and
judged by the FA rule against the float32 reference (tests/interpret_kvcache_mask.py). The cases
cover windows that start past KV tiles the kernel must skip (their V rows are NaN in the kernel's
cache), a window wider than the sequence, lengths 0 and 1, GQA packed rows, split (the combine adds
the sinks, splits left of the window are empty) and unsplit (the epilogue adds them), a paged cache
and a chunk. A few seconds a case on one core.
"""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from interpret_kvcache_mask import Case, run  # noqa: E402

CASES = {
    "window-causal-unsplit": Case(window_size=(70, -1)),
    "window-causal-split": Case(window_size=(70, -1), num_splits=3),
    "window-wider-than-sequence": Case(window_size=(1000, -1), num_splits=2),
    "window-both-sides-noncausal": Case(causal=False, window_size=(20, 3), seqlen_q=3),
    "window-softcap-sinks-unsplit-paged": Case(window_size=(90, -1), softcap=5.0, sinks=True, page_size=16),
    "window-sinks-split": Case(window_size=(65, -1), sinks=True, num_splits=3, kv_heads=1),
    "sinks-softcap-no-window-split": Case(softcap=3.0, sinks=True, num_splits=2),
    "chunk-causal": Case(attention_chunk=64, page_size=8),
    # 20 queries x 4 packed heads: two M tiles, each with its own live tiles and whole-tile segment
    "window-two-m-tiles-split": Case(seqlen_q=20, heads=8, kv_heads=2, window_size=(30, -1), num_splits=2,
                                     lengths=(150, 0, 1, 90)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_masked_decode_through_the_interpreter(name):
    c = CASES[name]
    facts = run(c)
    cfg, plan = facts["cfg"], facts["plan"]
    assert plan.num_splits == c.num_splits
    assert cfg.softcap == (c.softcap > 0) and cfg.sinks == (c.sinks and plan.unsplit)
    assert (facts["combine"] is None) == plan.unsplit
    if facts["combine"] is not None:
        assert facts["combine"].sinks == c.sinks
    assert cfg.windowed == (c.window_size != (-1, -1) or c.attention_chunk > 0)
