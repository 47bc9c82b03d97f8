"""The balanced FP8 decode schedule (FP8 variant "balanced": attention_decode_sm90_balanced and the
combine's balanced_bn form; common/decode_balanced.py) on an sm_90 GPU, chosen through
FA4MLIR_DECODE_FP8_VARIANT: test_kvcache_gpu.test_fp8_cache's checks (FA rule against the float64
reference of the same codes and scales, NaN codes past the lengths and in unused pages, lengths 0 .. 330:
with the plan's parts CTAs per KV head over 14 tiles every CTA holds one tile, so the long sequences are
cut across up to 6 CTAs); a CUDA graph captured at one set of lengths replayed after cache_seqlens, the
page table and the cache change (the schedule is found on the device: the replay gives an eager call's
bits); bench decode's shape (batch 64, ragged 1k-16k, pages of 16) against the rule's swap-AB kernel.
Needs a bundle of the `decode-fp8-variants` set (`python -m fa4mlir bundle --set decode-fp8-variants`).
"""
import pytest

from fa4mlir.kernels import attention_decode_sm90_config as dec
from tests.gpu.test_kvcache_gpu import fp8_case
from tests.gpu.test_kvcache_gpu import test_fp8_cache as check_fp8_cache
from tests.gpu.test_kvcache_gpu import torch  # noqa: F401  (the fixture)

pytestmark = pytest.mark.gpu
CASES = [(None, "kv_head"), (None, "tensor"), (16, "kv_head"), (16, "tensor"), (64, "kv_head"), (128, "tensor")]


def _call(case):
    import fa4mlir
    return fa4mlir.flash_attn_with_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table,
                                           k_scale=case.k_scale, v_scale=case.v_scale, out=case.out, return_lse=True)


@pytest.mark.parametrize("page_size,grain", CASES)
def test_balanced_fp8(torch, monkeypatch, page_size, grain):  # noqa: F811
    from fa4mlir.attention.kvcache import plan_kvcache
    from fa4mlir.attention.kvcache_call import configs_for
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, dec.BALANCED)
    case = fp8_case(torch, [0, 1, 15, 16, 17, 200, 330], page_size, grain, seed=41)
    _, plan = plan_kvcache(case.q, case.k_cache, case.v_cache, case.cache_seqlens, case.page_table,
                           k_scale=case.k_scale, v_scale=case.v_scale)
    cfg, combine = configs_for(plan)
    assert cfg.balanced and cfg.swap_ab and combine.balanced_bn == cfg.bn and plan.parts > 0 and not plan.unsplit
    check_fp8_cache(torch, page_size, grain, 1, None)


@pytest.mark.parametrize("page_size", [16, None])
def test_balanced_cuda_graph_replay_with_new_lengths(torch, monkeypatch, page_size):  # noqa: F811
    """Capture one balanced decode step, change lengths, page table, cache and q in place, replay: the
    replay's out and lse are an eager call's bits on the new state (and no NaN: unused pages hold NaN)."""
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, dec.BALANCED)
    case = fp8_case(torch, [40, 7, 0, 300, 129], page_size, "kv_head", seed=3, capacity=336)
    _call(case)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _call(case)                                   # no synchronising call
    finally:
        torch.cuda.set_sync_debug_mode("default")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _call(case)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = _call(case)
    new = fp8_case(torch, [330, 0, 64, 1, 17], page_size, "kv_head", seed=4, capacity=336)
    for dst, src in ((case.k_cache, new.k_cache), (case.v_cache, new.v_cache), (case.cache_seqlens, new.cache_seqlens),
                     (case.q, new.q), (case.k_scale, new.k_scale), (case.v_scale, new.v_scale)) + \
            (((case.page_table, new.page_table),) if page_size else ()):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    got_o, got_l = out.clone(), lse.clone()
    want_o, want_l = _call(new)
    torch.cuda.synchronize()
    assert not torch.isnan(got_o).any() and not torch.isnan(got_l).any()
    assert torch.equal(got_o, want_o) and torch.equal(got_l, want_l)
    assert (got_o[1] == 0).all() and torch.isposinf(got_l[1]).all()      # the empty sequence


@pytest.mark.parametrize("workload", ["decode_paged_16", "decode_paged_128", "decode_dense"])
def test_balanced_at_the_bench_shape_matches_the_rule(torch, workload):  # noqa: F811
    """bench decode's FP8 workloads (batch 64, 32 heads over 8 KV heads; paged: ragged 1k-16k, shuffled
    pages): the balanced kernel's out within bf16 rounding of the rule's swap-AB kernel (the same math,
    other splits), and both as close to the bench's float32 reference of sequence 0."""
    from fa4mlir.bench.decode_bench import _fp8_workload
    backends, _, _, check = _fp8_workload(torch, workload, [dec.BALANCED])
    rule_o = backends["fa4mlir"]()
    rule_o = (rule_o[0] if isinstance(rule_o, tuple) else rule_o).clone()
    bal_o = backends[f"fa4mlir[{dec.BALANCED}]"]()
    bal_o = bal_o[0] if isinstance(bal_o, tuple) else bal_o
    torch.cuda.synchronize()
    assert not torch.isnan(bal_o).any()
    assert (bal_o.float() - rule_o.float()).abs().max().item() <= 2 ** -7 * rule_o.float().abs().max().item() + 1e-3
    assert check(bal_o) <= 2 * check(rule_o) + 1e-3
