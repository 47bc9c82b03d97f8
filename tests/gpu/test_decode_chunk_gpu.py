"""The chunked split partition (DecodeConfig.chunked_splits, FA4MLIR_DECODE_PARTITION=chunk,
`[D-decode-chunk-splits]`) on an sm_90 GPU, against the default (even) partition, both by the FA
rule against the float64 reference (tests/gpu/test_kvcache_gpu.py's checks): bf16 D128 contiguous,
paged 16 and 64 (TMA boxes) and 1 (the cp.async gather), ragged lengths 0 .. capacity with NaN in
every row a sequence does not own, forced 3 and 8 splits (short sequences on few splits, the rest
empty), the same bits on a second call; FP8 (e4m3, per-KV-head scales: FP8_DEFAULT_RULE's swap-AB
kernels, swapabw contiguous, swapab paged) by test_fp8_cache's checks. Needs a bundle of the
`decode-chunk` set (`python -m fa4mlir bundle --set decode-chunk`).
"""
import pytest

from fa4mlir.kernels import attention_decode_sm90_config as dec
from tests.gpu.test_kvcache_gpu import Case
from tests.gpu.test_kvcache_gpu import test_fp8_cache as check_fp8_cache
from tests.gpu.test_kvcache_gpu import torch  # noqa: F401  (the fixture)

pytestmark = pytest.mark.gpu

LENGTHS = [0, 1, 15, 16, 17, 63, 64, 65, 200, 330, 1000, 1030]
CAPACITY = 1030                  # 17 tiles of 64: not a multiple of 3 or 8 splits
BF16_PAGES = [None, 16, 64, 1]
FP8_CASES = [(None, "kv_head"), (16, "kv_head"), (64, "kv_head")]


def _run(case, monkeypatch, partition: str, num_splits: int):
    from fa4mlir.attention.kvcache import plan_kvcache
    from fa4mlir.attention.kvcache_call import configs_for
    monkeypatch.setenv(dec.PARTITION_ENV, partition)
    _, plan = plan_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table,
                           num_splits=num_splits)
    cfg, _ = configs_for(plan)
    assert plan.num_splits == num_splits and cfg.chunked_splits == (partition == "chunk"), cfg.name()
    out, lse = case.call(num_splits=num_splits)
    return out.clone(), lse.clone()


@pytest.mark.parametrize("page_size", BF16_PAGES)
@pytest.mark.parametrize("num_splits", [3, 8])
def test_bf16_chunked_against_even(torch, monkeypatch, page_size, num_splits):  # noqa: F811
    case = Case(torch, LENGTHS, page_size=page_size, seqlen_q=1, capacity=CAPACITY, seed=271 + (page_size or 0))
    even = _run(case, monkeypatch, "even", num_splits)
    case.check(*even)
    chunk = _run(case, monkeypatch, "chunk", num_splits)
    case.check(*chunk)
    again = _run(case, monkeypatch, "chunk", num_splits)
    assert torch.equal(chunk[0], again[0]) and torch.equal(chunk[1], again[1]), "not deterministic"
    # the full-capacity sequence at 17 tiles: the two partitions' ranges differ, their results by rounding only
    assert (chunk[0].float() - even[0].float()).abs().max().item() < 0.05


@pytest.mark.parametrize("page_size,grain", FP8_CASES)
@pytest.mark.parametrize("num_splits", [3, 8])
def test_fp8_chunked(torch, monkeypatch, page_size, grain, num_splits):  # noqa: F811
    from fa4mlir.attention.kvcache import plan_kvcache
    from fa4mlir.attention.kvcache_call import configs_for
    from tests.gpu.test_kvcache_gpu import fp8_case
    monkeypatch.setenv(dec.PARTITION_ENV, "chunk")
    monkeypatch.delenv(dec.FP8_VARIANT_ENV, raising=False)
    case = fp8_case(torch, [0, 1, 15, 16, 17, 200, 330], page_size, grain, seed=41)
    _, plan = plan_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table,
                           k_scale=case.k_scale, v_scale=case.v_scale, num_splits=num_splits)
    cfg, _ = configs_for(plan)
    assert cfg.chunked_splits and cfg.swap_ab and cfg.swap_ab_warp_max == (page_size is None), cfg.name()
    check_fp8_cache(torch, page_size, grain, 1, num_splits)
