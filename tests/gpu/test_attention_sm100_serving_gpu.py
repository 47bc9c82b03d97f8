"""sm_100a serving features (note "Serving": windows, chunks, softcap, sinks, varlen) on the GPU: runs
only on a Blackwell (sm_100) GPU, skips elsewhere.

No sm_100 GPU exists in this project's reach, so these cases have never run; the same kernels'
numerics were interpreted on the CPU (tests/test_attention_sm100_serving.py). Every kernel of the
bundle set `attention-sm100-serving` (`python -m fa4mlir bundle --set attention-sm100-serving`) runs
by the FA rule with fresh random inputs and NaN-poisoned outputs: the dense ones at two shapes, the
varlen ones over a ragged batch with sequences of 0, 1 and tile + 1 rows and a sequence without keys
(with seqused_k: NaN keys past each used length).
"""
import zlib

import pytest

from fa4mlir.testing import compare_attention

pytestmark = pytest.mark.gpu

DENSE_SHAPES = [(2, 1000, 1000), (1, 300, 700), (1, 300, 200)]    # batch, seqlen_q, seqlen_k
LENS_Q = [0, 1, 129, 1000, 257, 3]
LENS_K = [7, 1, 129, 1300, 300, 0]
USED_K = [5, 0, 100, 990, 250, 0]      # seqused_k kernels: the keys past these are NaN
SOFTCAP = 2.0


@pytest.fixture(scope="module")
def serving_kernels(bundle, require_arch):
    require_arch(10)
    pytest.importorskip("torch")
    from fa4mlir.kernels.attention_sm100_config import KERNEL, FA4Config, serving_configs
    wanted = set(serving_configs())
    entries = [(e, FA4Config.from_key(e["config"])) for e in bundle.entries
               if e.get("config", {}).get("kernel") == KERNEL]
    entries = [(e, c) for e, c in entries if c in wanted]
    if not entries:
        pytest.skip("the bundle has no sm_100a serving kernel: build it with `python -m fa4mlir bundle --set "
                    "attention-sm100-serving`")
    return bundle, entries


def _kernel(bundle, entry):
    from fa4mlir.runtime import load
    cfg = {kk: vv for kk, vv in entry["config"].items() if kk not in ("name", "arch")}
    return load(bundle.find(name=entry["name"], arch=entry["arch"], **cfg))


def _mods(config, heads, gen):
    import torch
    sinks = (torch.randn(heads, device="cuda", generator=gen) * 2).float() if config.sinks else None
    return sinks, (SOFTCAP if config.softcap else 0.0)


def _inputs(rows_q, rows_k, config, gen):
    import torch
    q = torch.randn(rows_q, config.num_q_heads, config.head_dim, device="cuda", generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(rows_k, config.num_kv_heads, config.head_dim, device="cuda", generator=gen).to(torch.bfloat16)
            for _ in range(2))
    return q, k, v


def test_dense_serving_kernels_by_the_fa_rule(serving_kernels):
    import torch
    from types import SimpleNamespace
    from fa4mlir.kernels.attention_sm100_config import grid, launch_args
    bundle, entries = serving_kernels
    for entry, config in entries:
        if config.varlen:
            continue
        kern = _kernel(bundle, entry)
        for batch, sq, sk in DENSE_SHAPES:
            gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr((entry["name"], sq, sk)).encode()))
            q, k, v = _inputs(batch * sq, batch * sk, config, gen)
            q, k, v = q.view(batch, sq, *q.shape[1:]), k.view(batch, sk, *k.shape[1:]), v.view(batch, sk, *v.shape[1:])
            sinks, softcap = _mods(config, config.num_q_heads, gen)
            o = torch.full_like(q, float("nan"))
            lse = torch.full((batch, config.num_q_heads, sq), float("nan"), device="cuda")
            scale = config.head_dim ** -0.5
            problem = SimpleNamespace(batch=batch, heads=config.num_q_heads, seqlen_q=sq, seqlen_k=sk,
                                      softmax_scale=scale, softcap=softcap)
            kern.launch(grid(config, problem), launch_args(config, problem, dict(q=q, k=k, v=v, o=o, lse=lse,
                                                                                 sinks=sinks)))
            torch.cuda.synchronize()
            r = compare_attention(q, k, v, o, lse, scale, config.causal, window_size=(config.window_left,
                                  config.window_right), attention_chunk=config.chunk, softcap=softcap, sinks=sinks)
            assert r["ok"], (entry["name"], (batch, sq, sk), r)


def test_varlen_serving_kernels_by_the_fa_rule(serving_kernels):
    import torch
    from types import SimpleNamespace
    from fa4mlir.kernels.attention_sm100_config import grid, varlen_launch_args
    bundle, entries = serving_kernels
    cu_q, cu_k = (torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
                  for n in (LENS_Q, LENS_K))
    total_q, total_k = sum(LENS_Q), sum(LENS_K)
    for entry, config in entries:
        if not config.varlen:
            continue
        kern = _kernel(bundle, entry)
        gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(entry["name"].encode()))
        q, k, v = _inputs(total_q, total_k, config, gen)
        sinks, _ = _mods(config, config.num_q_heads, gen)
        used = USED_K if config.seqused_k else LENS_K
        for b, n in enumerate(used):
            k[int(cu_k[b]) + n:int(cu_k[b + 1])] = float("nan")
            v[int(cu_k[b]) + n:int(cu_k[b + 1])] = float("nan")
        o = torch.full((total_q + 4, *q.shape[1:]), float("nan"), dtype=q.dtype, device="cuda")
        lse = torch.full((config.num_q_heads, total_q), float("nan"), device="cuda")
        scale = config.head_dim ** -0.5
        problem = SimpleNamespace(batch=len(LENS_Q), heads=config.num_q_heads, seqlen_q=max(LENS_Q), seqlen_k=None,
                                  softmax_scale=scale)
        args = varlen_launch_args(config, problem, dict(q=q[None], k=k[None], v=v[None], o=o, lse=lse, sinks=sinks,
                                                        cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                                        seqused_k=torch.tensor(USED_K, dtype=torch.int32, device="cuda")),
                                  total_q=total_q)
        kern.launch(grid(config, problem), args)
        torch.cuda.synchronize()
        assert torch.isnan(o[total_q:].float()).all(), f"{entry['name']}: a store ran past the last sequence"
        for b, (nq, nk) in enumerate(zip(LENS_Q, used)):
            qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b]) + nk)
            if not nq:
                continue
            if not nk:
                assert (o[qs] == 0).all(), entry["name"]
                continue
            r = compare_attention(q[None, qs], k[None, ks], v[None, ks], o[None, qs], lse[None, :, qs], scale,
                                  config.causal, window_size=(config.window_left, config.window_right), sinks=sinks)
            assert r["ok"], (entry["name"], b, r)
