"""sm_100a windows, chunks, softcap and sinks on the KV-cache routes (attention_sm100_kvserving, note
"KV-cache serving") on the GPU: runs only on a Blackwell (sm_100) GPU, skips elsewhere.

No sm_100 GPU exists in this project's reach, so these cases have never run; the same kernels' numerics
were interpreted on the CPU (tests/test_attention_sm100_kvserving.py). Every kernel of the bundle set
`attention-sm100-kvserving` (`python -m fa4mlir bundle --set attention-sm100-kvserving`) runs by the FA
rule per sequence with fresh random inputs and NaN-poisoned outputs: paged ones over a shuffled page
table with NaN in unused pages and rows (FP8: NaN codes, NaN scales of unused pages), lengths 0, 1,
page +- 1, 150, 1000 and 3000; the contiguous one at seqlen_k 3000 and 1.
"""
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from fa4mlir.testing import compare_attention

pytestmark = pytest.mark.gpu

SEQLEN_Q = (1, 40)
SOFTCAP = 2.0


@pytest.fixture(scope="module")
def kvserving_kernels(bundle, require_arch):
    require_arch(10)
    pytest.importorskip("torch")
    from fa4mlir.kernels.attention_sm100_config import KERNEL, FA4Config
    from fa4mlir.kernels.attention_sm100_kvserving import kvcache_serving_configs
    wanted = set(kvcache_serving_configs())
    entries = [(e, FA4Config.from_key(e["config"])) for e in bundle.entries
               if e.get("config", {}).get("kernel") == KERNEL]
    entries = [(e, c) for e, c in entries if c in wanted]
    if not entries:
        pytest.skip("the bundle has no sm_100a KV-cache serving kernel: build it with `python -m fa4mlir bundle "
                    "--set attention-sm100-kvserving`")
    return bundle, entries


def _kernel(bundle, entry):
    from fa4mlir.runtime import load
    cfg = {kk: vv for kk, vv in entry["config"].items() if kk not in ("name", "arch")}
    return load(bundle.find(name=entry["name"], arch=entry["arch"], **cfg))


def _cache(torch, cfg, gen, lengths):
    """(k, v on the GPU, the page table, (k_scale, v_scale) or None, rows(b) -> the sequence's bf16 K/V
    rows [1, L, Hkv, D] as the kernel sees them)."""
    from tests._sm100_helpers import paged_cache
    from tests.test_attention_sm100_fp8 import _dequantised_rows, _fp8_cache
    page, kvh, d = cfg.page_size, cfg.num_kv_heads, cfg.head_dim
    if cfg.fp8:
        k, v, table, scales = _fp8_cache(gen, lengths, page, kvh, d, cfg.kv_scale)
        dev = [torch.from_numpy(x).cuda().view(torch.float8_e4m3fn) for x in (k, v)]
    else:
        k, v, table = paged_cache(torch, gen, lengths, page, kvh, d)
        k, v, scales = k.to(torch.bfloat16), v.to(torch.bfloat16), None
        dev = [x.cuda() for x in (k, v)]

    def rows(b):
        t = np.arange(lengths[b])
        pages = table[b][t // page].astype(np.int64)
        r = pages * page + t % page
        if cfg.fp8:
            return [_dequantised_rows(torch, x, s, r, kvh, pages)[None].cuda() for x, s in zip((k, v), scales)]
        return [x.reshape(-1, kvh, d)[torch.from_numpy(r)][None].cuda() for x in (k, v)]
    return dev, table, None if scales is None else [torch.from_numpy(s).cuda() for s in scales], rows


def _check(cfg, entry, q, k_rows, v_rows, o, lse, sinks, softcap):
    import torch
    if not k_rows.shape[1]:
        assert (o == 0).all(), entry["name"]
        want = torch.full_like(lse, float("inf")) if sinks is None else sinks.view(1, -1, 1).expand_as(lse)
        assert torch.allclose(lse, want, rtol=1e-6, atol=1e-6), entry["name"]
        return
    r = compare_attention(q, k_rows, v_rows, o, lse, cfg.head_dim ** -0.5, cfg.causal,
                          window_size=(cfg.window_left, cfg.window_right), attention_chunk=cfg.chunk,
                          softcap=softcap, sinks=sinks)
    assert r["ok"], (entry["name"], r)


def test_kvserving_kernels_by_the_fa_rule(kvserving_kernels):
    import torch
    from fa4mlir.kernels.attention_sm100_config import grid, launch_args, paged_launch_args
    bundle, entries = kvserving_kernels
    for entry, cfg in entries:
        kern = _kernel(bundle, entry)
        heads, d = cfg.num_q_heads, cfg.head_dim
        for sq in SEQLEN_Q:
            seed = zlib.crc32(repr((entry["name"], sq)).encode())
            gen = torch.Generator().manual_seed(seed)
            sinks = (torch.randn(heads, generator=gen) * 2).float().cuda() if cfg.sinks else None
            softcap = SOFTCAP if cfg.softcap else 0.0
            if not cfg.paged:    # one seqlen_k a launch
                for sk in (3000, 1):
                    q = torch.randn(2, sq, heads, d, generator=gen).to(torch.bfloat16).cuda()
                    k, v = (torch.randn(2, sk, cfg.num_kv_heads, d, generator=gen).to(torch.bfloat16).cuda()
                            for _ in range(2))
                    o = torch.full_like(q, float("nan"))
                    lse = torch.full((2, heads, sq), float("nan"), device="cuda")
                    problem = SimpleNamespace(batch=2, heads=heads, seqlen_q=sq, seqlen_k=sk, softmax_scale=d ** -0.5)
                    kern.launch(grid(cfg, problem), launch_args(cfg, problem, dict(q=q, k=k, v=v, o=o, lse=lse)))
                    torch.cuda.synchronize()
                    _check(cfg, entry, q, k, v, o, lse, sinks, softcap)
                continue
            page = cfg.page_size
            lengths = [page - 1, page + 1, 0, 1, 150, 1000, 3000]
            (k, v), table, scales, rows = _cache(torch, cfg, gen, lengths)
            batch = len(lengths)
            q = torch.randn(batch, sq, heads, d, generator=gen).to(torch.bfloat16).cuda()
            o = torch.full_like(q, float("nan"))
            lse = torch.full((batch, heads, sq), float("nan"), device="cuda")
            problem = SimpleNamespace(batch=batch, heads=heads, seqlen_q=sq, softmax_scale=d ** -0.5, softcap=softcap)
            tensors = dict(q=q, k=k, v=v, o=o, lse=lse, page_table=torch.from_numpy(table).cuda(),
                           cache_seqlens=torch.tensor(lengths, dtype=torch.int32, device="cuda"), sinks=sinks)
            if scales is not None:
                tensors.update(k_scale=scales[0], v_scale=scales[1])
            kern.launch(grid(cfg, problem), paged_launch_args(cfg, problem, tensors, num_pages=k.shape[0],
                                                              page_table_stride=table.shape[1]))
            torch.cuda.synchronize()
            assert not torch.isnan(o.float()).any() and not torch.isnan(lse).any(), entry["name"]
            for b in range(batch):
                k_rows, v_rows = rows(b)
                _check(cfg, entry, q[b:b + 1], k_rows, v_rows, o[b:b + 1], lse[b:b + 1], sinks, softcap)
