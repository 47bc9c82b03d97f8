"""Deviceless: flash_attn_func's window_size and attention_chunk. Bad values raise typed errors
before anything runs; good ones reach the problem's mask (kernels/common/masks.py), with the parts
that bound nothing at the call's lengths dropped; the kernel config of a mask, its key and name."""
from __future__ import annotations

import pytest

from fa4mlir.attention import ArgumentTypeError, AttnProblem, MaskError, check_mask, flash_attn_func
from fa4mlir.attention.plan import select_entry
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels.common.masks import CAUSAL, NO_MASK, Chunked, Intersect, SlidingWindow, attention_mask


@pytest.mark.parametrize("window, chunk, error, words", [
    ((1.5, -1), 0, ArgumentTypeError, "window_size\\[0\\] must be an int"),
    ((-1, "3"), 0, ArgumentTypeError, "window_size\\[1\\] must be an int"),
    ((True, -1), 0, ArgumentTypeError, "must be an int"),
    (5, 0, ArgumentTypeError, "pair of ints"),
    ("ab", 0, ArgumentTypeError, "pair of ints"),
    ((1, 2, 3), 0, MaskError, "2 entries"),
    ((4,), 0, MaskError, "2 entries"),
    ((-2, 0), 0, MaskError, ">= -1"),
    ((0, -5), 0, MaskError, ">= -1"),
    ((-1, -1), -1, MaskError, "attention_chunk must be >= 0"),
    ((-1, -1), 2.0, ArgumentTypeError, "attention_chunk must be an int"),
    ((-1, -1), None, ArgumentTypeError, "attention_chunk must be an int"),
])
def test_bad_masks_are_typed(window, chunk, error, words):
    with pytest.raises(error, match=words):
        check_mask(window, chunk)
    # flash_attn_func checks them before reading any tensor: None tensors never get looked at
    with pytest.raises(error, match=words):
        flash_attn_func(None, None, None, window_size=window, attention_chunk=chunk)


def test_good_masks():
    assert check_mask((-1, -1), 0) == ((-1, -1), 0)
    assert check_mask([10**9, 0], 7) == ((10**9, 0), 7)     # a window wider than any sequence is legal
    np = pytest.importorskip("numpy")
    assert check_mask((np.int64(4), np.int32(-1)), np.int64(3)) == ((4, -1), 3)


def _problem(sq, sk, causal=False, window=(-1, -1), chunk=0):
    return AttnProblem.of((1, sq, 2, 128), (1, sk, 2, 128), "bf16").with_options(
        causal=causal, softmax_scale=0.1, window_size=window, attention_chunk=chunk)


def test_problem_mask_drops_what_bounds_nothing():
    assert _problem(100, 100, window=(99, -1)).mask == NO_MASK            # left reaches key 0 for every row
    assert _problem(100, 100, window=(98, -1)).mask == SlidingWindow(98, -1)
    assert _problem(100, 300, window=(-1, 99)).mask == NO_MASK            # right reaches seqlen_k - 1
    assert _problem(100, 300, True, window=(10**6, -1)).mask == CAUSAL
    assert _problem(100, 300, chunk=300).mask == NO_MASK
    assert _problem(300, 100, chunk=300).mask == Chunked(300)             # rows with a negative diagonal see none
    assert _problem(100, 300, True, (50, 7), 64).mask == Intersect((SlidingWindow(50, 0), Chunked(64)))


def test_configs_of_masks():
    mask = attention_mask(True, (200, -1))
    cfg = acfg.default_config("bf16", 128, True, mask=mask)
    assert (cfg.causal, cfg.window_left, cfg.window_right, cfg.chunk) == (True, 200, -1, 0) and cfg.mask == mask
    assert cfg.key()["window_left"] == 200 and cfg.key()["chunk"] == 0
    assert acfg.AttnConfig.from_key(cfg.key()) == cfg
    plain = acfg.default_config("bf16", 128, True)
    assert acfg.AttnConfig.from_key({k: v for k, v in plain.key().items() if k not in ("window_left", "chunk")}) == plain
    assert acfg.default_config("bf16", 128, False, mask=CAUSAL) == plain
    with pytest.raises(ValueError, match="canonical"):
        acfg.AttnConfig(causal=True, window_right=0).validate()
    with pytest.raises(ValueError, match=">= -1"):
        acfg.AttnConfig(window_left=-3).validate()


def test_bundle_selection_tells_masks_apart():
    masked = acfg.default_config("bf16", 128, True, mask=attention_mask(True, (200, -1)))
    plain = acfg.default_config("bf16", 128, True)
    old = {k: v for k, v in plain.key().items() if k not in ("window_left", "window_right", "chunk")}  # older bundle
    entries = [{"arch": "sm_90a", "name": n, "config": {**c, "cubin_backend": "ptxas"}}
               for n, c in (("plain", old), ("window", masked.key()))]
    assert select_entry(entries, "bf16", 128, True, default=plain)["name"] == "plain"
    assert select_entry(entries, "bf16", 128, True, default=masked)["name"] == "window"
    other = acfg.default_config("bf16", 128, True, mask=attention_mask(True, (100, -1)))
    with pytest.raises(LookupError, match="window_left=100"):
        select_entry(entries, "bf16", 128, True, default=other)
