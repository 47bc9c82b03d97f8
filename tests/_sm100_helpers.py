"""Helpers the deviceless sm_100a kernel tests share (test_attention_sm100.py, _paged.py, _serving.py,
_gather.py, _fp8.py): compile a config once per test session, read its SASS, check what every compiled
config must hold, run the pipeline verifier on it (whole, or with one commit removed), and interpret a
paged kernel over bf16 pools by the FA rule."""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

_BUILT: dict = {}


def compiled(cfg, key: str, backend: str | None = None):
    """(artifact, compile seconds) of `cfg` lowered with `backend` (default: the kernel's own,
    nvJitLink LTO, as it ships) under cache key `key`, once per session."""
    from fa4mlir import kernels, lowering
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.lowering import CompileOptions
    backend = backend or kernels.cubin_backend("attention_fwd_sm100")
    if (cfg, backend, key) not in _BUILT:
        t0 = time.perf_counter()
        art = lowering.lower(k100.build(cfg), CompileOptions(cubin_backend=backend), key=key)
        _BUILT[(cfg, backend, key)] = (art, time.perf_counter() - t0)
    return _BUILT[(cfg, backend, key)]


def adopt(cfg, key: str, backend: str, art, seconds: float) -> None:
    """Make ``art`` (``cfg`` compiled with ``backend`` elsewhere, e.g. in the sweep's worker processes) what
    compiled(cfg, key, backend) returns, unless this process compiled it already."""
    _BUILT.setdefault((cfg, backend, key), (art, seconds))


def sass_of(art) -> str:
    """The cubin's SASS (nvdisasm); skips the test when nvdisasm is not installed."""
    from fa4mlir.sass import disassemble, find_nvdisasm
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm): cannot read the SASS")
    return disassemble(art.cubin)


def sass_count(sass: str, op: str) -> int:
    """How many times the SASS opcode `op` (a whole word) occurs."""
    return len(re.findall(rf"\b{op}\b", sass))


def role_budgets(sass: str) -> set[int]:
    """The setmaxnreg operands in the SASS (USETMAXREG)."""
    return {int(v, 16) for v in re.findall(r"USETMAXREG\.\S+\s+(?:UP\d+,\s*)?(0x[0-9a-f]+)", sass)}


def check_compiled(cfg, art) -> None:
    """0 spills and no stack, setmaxnreg honoured (128 registers at entry, 512 threads), SMEM within
    1 KiB over the plan, the launch parameters of the config."""
    r = art.resources
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    assert not r["setmaxnreg_ignored"] and r["registers"] == 128 and r["threads"] == 512
    plan = cfg.smem_plan()
    assert plan["total"] <= art.smem_bytes <= plan["total"] + 1024
    assert [(p.name, p.kind) for p in art.params] == list(cfg.launch_params)


def check_resources(cfg, art, seconds: float) -> None:
    """What a config compiled through nvJitLink LTO must hold: check_compiled's, and TMEM as planned."""
    r = art.resources
    print(f"{art.name}: {r['registers']} regs at entry, spills {r['spill_stores']}/{r['spill_loads']}, "
          f"SMEM {art.smem_bytes} B, TMEM {r['tmem_cols']} cols, compile {seconds:.1f} s")
    assert art.arch == "sm_100a" and r["cubin_backend"] == "nvjitlink-lto"
    check_compiled(cfg, art)
    assert r["tmem_cols"] == cfg.tmem_plan()["alloc"]


def verify_pipelines(module) -> None:
    """fa4-verify-pipelines over a built kernel's module (PassError when it rejects the schedule)."""
    from fa4mlir.passes import registry
    registry.run_passes(module, ["fa4-verify-pipelines"])


def check_verifier_rejects_a_dropped_commit(cfg, pipe: str) -> None:
    """The kernel of `cfg` with its first fa4.mma_commit of pipe `pipe` erased: the verifier names the pipe."""
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.passes._util import PassError, attr, ops_named
    kir = k100.build(cfg)
    ops = [op for op in ops_named(kir.module.operation, "fa4.mma_commit") if attr(op, "pipe") == pipe]
    assert ops
    ops[0].erase()
    with pytest.raises(PassError, match=f"'{pipe}'"):
        verify_pipelines(kir.module)


def bf16_bits(x, torch):
    """Tensor `x` rounded to bf16, its elements as a uint16 array (the interpreter's view)."""
    return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).copy()


def page_table(perm, lengths, page_size: int, max_pages: int):
    """A shuffled page table (int32 [batch, max_pages]): sequence b takes the next ceil(lengths[b] /
    page_size) pages of `perm`, -1 past them."""
    table = np.full((len(lengths), max_pages), -1, np.int32)
    used = 0
    for b, n in enumerate(lengths):
        pages = -(-n // page_size)
        table[b, :pages] = perm[used:used + pages]
        used += pages
    return table


def paged_cache(torch, gen, lengths, page_size, kv_heads, d):
    """bf16 K/V pools with NaN in every unused page and row, a shuffled page table (-1 past each length)."""
    max_pages = max(-(-n // page_size) for n in lengths) + 1
    num_pages = sum(-(-n // page_size) for n in lengths) + 3
    k, v = (torch.full((num_pages, page_size, kv_heads, d), float("nan")) for _ in range(2))
    table = page_table(torch.randperm(num_pages, generator=gen).numpy(), lengths, page_size, max_pages)
    for b, n in enumerate(lengths):
        for t0 in range(0, n, page_size):
            rows, page = min(page_size, n - t0), table[b, t0 // page_size]
            k[page, :rows] = torch.randn(rows, kv_heads, d, generator=gen)
            v[page, :rows] = torch.randn(rows, kv_heads, d, generator=gen)
    return k, v, table


def interpret_paged(torch, cfg, q, k, v, table, lengths, page):
    """The kernel of `cfg` over the bf16 pools k, v [num_pages, page, kv_heads, D] (page table `table`)
    interpreted on the CPU for q [batch, seqlen_q, heads, D], causal, O and LSE NaN before the call;
    asserts that no NaN is left. Returns (out, lse) as float64 tensors, the FaTally of every sequence
    with keys against the float32 kvcache reference and PyTorch's own bf16 math, and the seconds the
    interpreter took."""
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.kernels.attention_sm100_config import grid, paged_launch_args
    from fa4mlir.testing import FaTally, attention_math
    from fa4mlir.testing_kvcache import kvcache_reference
    batch, seqlen_q, heads, d = q.shape
    kv_heads = k.shape[2]
    kb, vb = bf16_bits(k, torch), bf16_bits(v, torch)
    lens = np.array(lengths, np.int32)
    o = np.full((batch, seqlen_q, heads, d), 0x7FC0, np.uint16)
    lse = np.full((batch, heads, seqlen_q), np.nan, np.float32)

    class P:
        pass
    P.batch, P.heads, P.seqlen_q, P.softmax_scale = batch, heads, seqlen_q, d ** -0.5
    args = paged_launch_args(cfg, P, dict(q=bf16_bits(q, torch), k=kb, v=vb, o=o, lse=lse, page_table=table,
                                          cache_seqlens=lens), num_pages=k.shape[0], page_table_stride=table.shape[1])
    t0 = time.perf_counter()
    interpret.load(k100.build(cfg)).launch(grid(cfg, P), args)
    seconds = time.perf_counter() - t0
    out = torch.from_numpy(o.view(np.int16)).view(torch.bfloat16).double()
    lse_t = torch.from_numpy(lse).double()
    kf, vf = (torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).float() for x in (kb, vb))
    ref = kvcache_reference(q.float(), kf, vf, torch.from_numpy(lens), torch.from_numpy(table),
                            compute_dtype=np.float32)
    assert not torch.isnan(out).any() and not torch.isnan(lse_t).any()
    tally = FaTally()
    for b, n in enumerate(lengths):
        if not n:
            continue
        t = np.arange(n)
        rows = torch.from_numpy(table[b][t // page] * page + t % page)
        k_rows, v_rows = (x.reshape(-1, kv_heads, d)[rows].to(torch.bfloat16) for x in (kf, vf))
        low_o, low_l = attention_math(q[b:b + 1], k_rows[None], v_rows[None], d ** -0.5, True, torch.bfloat16)
        tally.add(out[b], low_o[0].double(), ref["out"][b].double(),
                  lse_t[b], low_l[0].double(), ref["lse"][b].double())
    return out, lse_t, tally, seconds
