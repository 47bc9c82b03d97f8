"""Issue 27's decode_dense tiles on an sm_90 GPU: the bf16 decode kernel's BF16_SWEEP variants (TILE_VARIANTS
bn128s2 and bn64s3, FA4MLIR_DECODE_TILE_VARIANT) on one small contiguous D128 case of one split, GQA 4:
test_kvcache_gpu's check (FA rule against the float64 reference; lengths 0, 1, partial and whole tiles, NaN past
the lengths) and the same bits on a second call. Needs a bundle of the `decode-bf16-variants` set
(`python -m fa4mlir bundle --set decode-bf16-variants`).
"""
import pytest

from fa4mlir.kernels import attention_decode_sm90_config as dec
from tests.gpu.test_kvcache_gpu import Case
from tests.gpu.test_kvcache_gpu import torch  # noqa: F401  (the fixture)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("variant", dec.BF16_SWEEP)
def test_bf16_sweep_variant_unsplit(torch, monkeypatch, variant):  # noqa: F811
    from fa4mlir.attention.kvcache import plan_kvcache
    from fa4mlir.attention.kvcache_call import configs_for
    monkeypatch.setenv(dec.TILE_VARIANT_ENV, variant)
    case = Case(torch, [5, 0, 64, 65, 200, 1, 1000], page_size=None, heads=8, kv_heads=2, seed=78)
    _, plan = plan_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, None, num_splits=1)
    cfg, combine = configs_for(plan)
    assert plan.unsplit and combine is None
    assert cfg == dec.tile_variant(dec.default_config("bf16", 128, None, unsplit=True), variant)
    out, lse = case.call(num_splits=1)
    case.check(out, lse)
    first = (out.clone(), lse.clone())
    out2, lse2 = case.call(num_splits=1)
    assert torch.equal(first[0], out2) and torch.equal(first[1], lse2), "not deterministic"
