"""Helpers the MLA tests share (test_mla_decode.py, _fp8.py, test_mla_sparse.py, test_mla_sparse_decode.py
and tests/gpu/test_mla_decode_gpu.py, _fp8_gpu.py): the host checks' TensorInfos, the kernels' compile
checks, the paged latent cache of a decode problem, the interpreter run of the dense decode kernel and
the sparse tests' mix of invalid indices."""
from __future__ import annotations

import numpy as np

from fa4mlir.runtime import TensorInfo


def info(shape, dtype="bf16", strides=None):
    """A TensorInfo of `shape` (row-major unless `strides`) at a device address, on "cuda"."""
    if strides is None:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= n
    return TensorInfo(1 << 20, tuple(shape), tuple(strides), dtype, "cuda")


def bits(torch, x):
    """The 16-bit elements of tensor `x` as a uint16 array (the interpreter's view of bf16 / f16)."""
    return x.view(torch.int16).numpy().view(np.uint16).copy()


def lower_clean(name: str, cfg):
    """Kernel `name` of `cfg` lowered with its own options (debug off): no spills and no stack, wgmma
    not serialised, setmaxnreg honoured. Returns the artefact."""
    from fa4mlir import compiler, kernels, lowering
    art = lowering.lower(kernels.module(name).build(cfg), compiler.resolve_options(name, debug=False))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"] and not r["setmaxnreg_ignored"], r
    return art


def check_sparse_art(art, cfg) -> None:
    """A sparse kernel's artefact: SMEM within its plan and the limit, 384 threads, its launch contract."""
    from fa4mlir.kernels import attention_mla_sparse_sm90_config as sc
    assert cfg.smem_bytes() <= art.smem_bytes <= sc.SMEM_LIMIT, (art.smem_bytes, cfg.smem_bytes())
    assert art.block == (cfg.threads, 1, 1) == (384, 1, 1)
    assert [(p.name, p.kind) for p in art.params] == list(cfg.params)


def paged_latent(torch, lens, seqlen_q, heads, page, seed=0, *, spare_pages=1, junk=1 << 20, scale=1):
    """A decode problem over the paged latent cache, float32: q [batch, seqlen_q, heads, 576], the cache
    [num_pages, page, 1, 576] (rows of each sequence randn x `scale`, NaN in every row no sequence owns,
    `spare_pages` pages beyond one more per sequence than it fills), a shuffled block table (int32 numpy,
    `junk` past each sequence's pages) and the lengths (int32 numpy)."""
    g = torch.Generator().manual_seed(seed)
    batch = len(lens)
    max_pages = max(-(-n // page) for n in lens) + 1
    num_pages = batch * max_pages + spare_pages
    kv = torch.full((num_pages, page, 1, 576), float("nan"))
    perm = torch.randperm(num_pages, generator=g).numpy()
    table = np.full((batch, max_pages), junk, np.int32)
    used = 0
    for b, n in enumerate(lens):
        for slot in range(-(-n // page)):
            table[b, slot] = perm[used]
            used += 1
            rows = min(page, n - slot * page)
            kv[table[b, slot], :rows] = torch.randn(rows, 1, 576, generator=g) * scale
    q = torch.randn(batch, seqlen_q, heads, 576, generator=g)
    return q, kv, table, np.array(lens, np.int32)


def interpret_decode(torch, problem, cfg, combine, q, kv_operand, table, lens_a, page):
    """attention_mla_decode_sm90 of `cfg` interpreted on `problem` (mla.check_mla_inputs: causal, splits)
    with q (torch, its 16-bit elements passed), the cache operand `kv_operand` (numpy: the kernel's
    kv_cache), the block table and lengths; out and the workspaces NaN before the call. With a
    `combine` (several splits) the partials are merged by the combine's math on the host (its per-lane
    loop bounds are not interpretable; tests/gpu runs it). Returns (out, lse) as float32 tensors."""
    from fa4mlir import interpret
    from fa4mlir.attention import mla
    from fa4mlir.kernels import attention_mla_decode_sm90
    from fa4mlir.kernels import attention_mla_decode_sm90_config as mc
    from fa4mlir.testing_kvcache import combine_splits
    batch, seqlen_q, heads, splits = problem.batch, problem.seqlen_q, problem.heads, problem.splits
    num_pages, max_pages = kv_operand.shape[0], table.shape[1]
    out = np.full((batch, seqlen_q, heads, 512), 0x7FC0, np.uint16)       # NaN before the call
    lse = np.full((batch, heads, seqlen_q), np.nan, np.float32)
    tensors = {"kv_cache": kv_operand, "q": bits(torch, q), "cache_seqlens": lens_a, "block_table": table,
               "out": out, "lse": lse,
               "o_partial": np.full((splits, batch, seqlen_q, heads, 512), np.nan, np.float32),
               "lse_partial": np.full((splits, batch, heads, seqlen_q), np.nan, np.float32)}
    out_strides = (seqlen_q * heads * 512, heads * 512, 512)
    args = mc.launch_args(cfg, tensors, batch=batch, seqlen_q=seqlen_q, heads=heads, num_splits=splits,
                          num_pages=num_pages, page_size=page, max_pages=max_pages, causal=problem.causal,
                          softmax_scale=problem.softmax_scale, q_strides=(seqlen_q * heads * 576, heads * 576, 576),
                          block_table_stride=max_pages, out_strides=out_strides)
    interpret.load(attention_mla_decode_sm90.build(cfg)).launch(mc.grid(batch, seqlen_q, heads, splits), args)
    if combine is None:
        return torch.from_numpy(out.view(np.int16)).view(q.dtype).float(), torch.from_numpy(lse)
    mla.combine_args(problem, tensors, out_strides)     # the combine's contract takes this problem
    o, lse_c = combine_splits(tensors["o_partial"], tensors["lse_partial"])
    return torch.from_numpy(o).float(), torch.from_numpy(lse_c).float()


def invalid_mix(used, topk: int, s_kv: int, seed: int):
    """A row of `topk` sparse indices in shuffled order: valid rows (half of topk from `used`),
    duplicates, -1, rows past s_kv and FlashMLA's other invalid candidates (int32's extremes too)."""
    rest = topk - topk // 2 - 3 * (topk // 8)
    mix = np.concatenate([used[:topk // 2], used[:topk // 8], np.full(topk // 8, -1), s_kv + np.arange(topk // 8),
                          np.resize([-2**31, 2**31 - 1, -7, 114514], rest)])     # FlashMLA's invalid candidates
    return np.random.default_rng(seed).permutation(mix)


def forced_metadata(torch, splits: int, batch: int):
    """get_mla_metadata's outputs on the GPU for `splits` splits of every one of `batch` sequences."""
    meta = torch.zeros((splits, 8), dtype=torch.int32, device="cuda")
    return meta, torch.arange(batch + 1, dtype=torch.int32, device="cuda") * splits
