"""The FP8 decode variants (attention_decode_sm90_config.FP8_VARIANTS: the conversion-through-SMEM kernel
"smem", swap AB "swapab" / "swapabw") on an sm_90 GPU, chosen through FA4MLIR_DECODE_FP8_VARIANT, by the checks
of tests/gpu/test_kvcache_gpu.py's test_fp8_cache (FA rule against the float64 reference of the
same codes and scales, NaN codes in unused pages and past the lengths, lengths 0 .. 330, one split
(the unsplit variant) and three). Needs a bundle of the `decode-fp8-variants` set
(`python -m fa4mlir bundle --set decode-fp8-variants`); a bundle without a variant is a
BundleError naming it, never the default in its place.
"""
import pytest

from fa4mlir import kernel_sets
from fa4mlir.kernels import attention_decode_sm90_config as dec
from tests.gpu.test_kvcache_gpu import test_fp8_cache as check_fp8_cache
from tests.gpu.test_kvcache_gpu import torch  # noqa: F401  (the fixture)

pytestmark = pytest.mark.gpu

CASES = [(name, page, grain) for _, _, page, grain in kernel_sets.DECODE_FP8_VARIANT_CASES
         for name in dec.FP8_VARIANTS if name != "default"
         and name not in dec.BALANCED_VARIANTS    # balanced*: test_decode_balanced_gpu.py, test_decode_dectune_gpu.py
         and grain in dec.FP8_VARIANT_SCALES.get(name, dec.SCALES)]


@pytest.mark.parametrize("variant,page_size,grain", CASES)
@pytest.mark.parametrize("num_splits", [None, 3])
def test_fp8_variant(torch, monkeypatch, variant, page_size, grain, num_splits):  # noqa: F811
    from fa4mlir.attention.kvcache_call import configs_for
    from fa4mlir.attention.kvcache import plan_kvcache
    from tests.gpu.test_kvcache_gpu import fp8_case
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, variant)
    case = fp8_case(torch, [0, 1, 15, 16, 17, 200, 330], page_size, grain, seed=41)
    _, plan = plan_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table,
                           k_scale=case.k_scale, v_scale=case.v_scale, num_splits=num_splits)
    cfg, _ = configs_for(plan)
    want = dec.fp8_variant(dec.default_config("bf16", 128, page_size, grain, unsplit=plan.unsplit), variant)
    assert cfg == want and plan.bn == cfg.bn     # the variant runs, not the default
    check_fp8_cache(torch, page_size, grain, 1, num_splits)
