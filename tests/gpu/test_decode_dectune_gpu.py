"""Issue 27's decode A/B candidates on an sm_90 GPU: the balanced FP8 schedule's other variants
(BALANCED_VARIANTS but "balanced": balanced3cta, BALANCED_RULE_VARIANT, FA4MLIR_DECODE_FP8_VARIANT):
test_kvcache_gpu's checks (FA rule against the float64 reference, NaN past the lengths and in unused pages,
lengths 0 and partial tiles), and at bench decode's shape within bf16 rounding of the default kernel's.
Needs a bundle of the `decode-fp8-variants` set (`python -m fa4mlir bundle --set decode-fp8-variants`).
"""
import pytest

from fa4mlir.kernels import attention_decode_sm90_config as dec
from tests.gpu.test_kvcache_gpu import test_fp8_cache as check_fp8_cache
from tests.gpu.test_kvcache_gpu import torch  # noqa: F401  (the fixture)

pytestmark = pytest.mark.gpu
BALANCED_NAMES = [n for n in dec.BALANCED_VARIANTS if n != dec.BALANCED]


@pytest.mark.parametrize("variant", BALANCED_NAMES)
@pytest.mark.parametrize("page_size", [16, 64])
def test_balanced_ring_depth_variant(torch, monkeypatch, variant, page_size):  # noqa: F811
    from fa4mlir.attention.kvcache import plan_kvcache
    from fa4mlir.attention.kvcache_call import configs_for
    from tests.gpu.test_kvcache_gpu import fp8_case
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, variant)
    case = fp8_case(torch, [0, 1, 15, 16, 17, 200, 330], page_size, "kv_head", seed=43)
    _, plan = plan_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table,
                           k_scale=case.k_scale, v_scale=case.v_scale)
    cfg, _ = configs_for(plan)
    assert cfg.balanced and cfg.stages == dec.BALANCED_VARIANTS[variant] and plan.parts > 0
    check_fp8_cache(torch, page_size, "kv_head", 1, None)


def _close(torch, got, want, check):  # noqa: F811
    got = got[0] if isinstance(got, tuple) else got
    torch.cuda.synchronize()
    assert not torch.isnan(got).any()
    assert (got.float() - want.float()).abs().max().item() <= 2 ** -7 * want.float().abs().max().item() + 1e-3
    return got


@pytest.mark.parametrize("variant", BALANCED_NAMES)
def test_balanced_variant_at_the_bench_shape(torch, variant):  # noqa: F811
    from fa4mlir.bench.decode_bench import _fp8_workload
    backends, _, _, check = _fp8_workload(torch, "decode_paged_16", [variant])
    rule = backends["fa4mlir"]()
    rule = (rule[0] if isinstance(rule, tuple) else rule).clone()
    got = _close(torch, backends[f"fa4mlir[{variant}]"](), rule, check)
    assert check(got) <= 2 * check(rule) + 1e-3

