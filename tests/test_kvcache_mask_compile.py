"""Deviceless: the decode kernel's mask and score-modifier variants compile (through the pipeline
verifier) with no spills and within their register budget: flash_attn_varlen_func(page_table=)'s
(kernel_sets.VARLEN_PAGED_MASK_CASES, the attention-varlen set), the combine's sink variant, and
the heaviest variants beyond the bundles (D256, the cp.async gather, a chunk with a two-sided
window). The decode set's own mask variants (DECODE_MASK_CASES) compile in
tests/test_kvcache_decode.py::test_decode_set_compiles_clean."""
from __future__ import annotations

import pytest

from fa4mlir import compiler, kernel_sets, lowering
from fa4mlir.kernels import attention_combine_sm90, attention_decode_sm90
from fa4mlir.kernels import attention_decode_sm90_config as dec

EXTRA = [dec.default_config("bf16", 256, None, unsplit=u, window_left=127, softcap=True, sinks=u) for u in (False, True)]
EXTRA += [dec.default_config("bf16", 256, 1, unsplit=True, window_left=300, sinks=True),
          dec.default_config("bf16", 128, 3, window_left=127, softcap=True),
          dec.default_config("f16", 128, 24, unsplit=True, window_left=40, window_right=8, chunk=96, softcap=True,
                             sinks=True)]
ENTRIES = [c for _, c in kernel_sets.decode_masks(kernel_sets.VARLEN_PAGED_MASK_CASES, varlen_q=True)] + EXTRA


@pytest.mark.parametrize("cfg", ENTRIES, ids=lambda c: c.name())
def test_variant_compiles_clean(cfg):
    builder = attention_combine_sm90 if isinstance(cfg, dec.CombineConfig) else attention_decode_sm90
    name = cfg.key()["kernel"]
    art = lowering.lower(builder.build(cfg), compiler.resolve_options(name, debug=False))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert [(p.name, p.kind) for p in art.params] == list(cfg.params)
    if isinstance(cfg, dec.DecodeConfig):
        assert not r["wgmma_serialized"], r
        assert r["registers"] * cfg.threads * cfg.ctas_per_sm <= 65536, r
