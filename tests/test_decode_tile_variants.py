"""Deviceless: the bf16 decode kernel's tile variants (attention_decode_sm90_config.TILE_VARIANTS, chosen by
FA4MLIR_DECODE_TILE_VARIANT; A/B for issue #27's decode_dense bar): the knob's default is default_config's kernel
and the call cache keys on it; what a variant is not built for is a ConfigError before launch. Each variant's
set, resources and plan: tests/test_decode_bf16_variants.py.
"""
from __future__ import annotations

import pytest

from fa4mlir.attention import kvcache_call
from fa4mlir.kernels import attention_decode_sm90_config as dec


def test_default_is_default_config_and_the_knob_is_in_the_call_key(monkeypatch):
    monkeypatch.delenv(dec.TILE_VARIANT_ENV, raising=False)
    assert dec.runtime_config("bf16", 128, None) == dec.default_config("bf16", 128, None)
    monkeypatch.setenv(dec.TILE_VARIANT_ENV, "default")
    assert dec.runtime_config("bf16", 128, 16) == dec.default_config("bf16", 128, 16)
    assert dec.TILE_VARIANT_ENV in kvcache_call._SIGNATURE_ENV


def test_what_a_variant_is_not_built_for_is_a_config_error(monkeypatch):
    monkeypatch.setenv(dec.TILE_VARIANT_ENV, "bn7")
    with pytest.raises(dec.ConfigError, match="unknown decode tile variant 'bn7'"):
        dec.runtime_config("bf16", 128, None)
    monkeypatch.setenv(dec.TILE_VARIANT_ENV, "bn128s2")
    with pytest.raises(dec.ConfigError, match="contiguous head_dim-128"):
        dec.runtime_config("bf16", 128, 16)                  # paged
    with pytest.raises(dec.ConfigError, match="contiguous head_dim-128"):
        dec.runtime_config("bf16", 64, None)
    with pytest.raises(dec.ConfigError, match="contiguous head_dim-128"):
        dec.runtime_config("bf16", 128, None, window_left=127)
    # an FP8 cache reads FA4MLIR_DECODE_FP8_VARIANT only: the tile knob leaves it alone
    assert dec.runtime_config("bf16", 128, None, "kv_head", rows=4) == dec.default_config("bf16", 128, None, "kv_head",
                                                                                          rows=4)
    with pytest.raises(dec.ConfigError, match="bf16/f16 caches"):
        dec.tile_variant(dec.default_config("bf16", 128, None, "kv_head"), "bn64s3")
    from fa4mlir.bench.decode_bench import split_variants
    assert split_variants(["default", "bn64s3", "balanced3cta"]) == (["default", "balanced3cta"], ["default", "bn64s3"])
    with pytest.raises(ValueError, match="unknown --decode-variant"):
        split_variants(["bn7"])
