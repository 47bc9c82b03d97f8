"""Chunked prefill of a ragged batch over a paged pool through the interpreter: the cases and the
runner (tests/test_varlen_paged_interpret.py).

Each case is flash_attn_varlen_func(..., page_table=) checked and planned by the host code
(attention/varlen_paged.py: check_varlen_paged, plan_for, launch_args), then the decode kernel's
varlen_q variant executed by the interpreter (with several splits, the combine's math on the host:
testing_kvcache.combine_splits over the packed workspaces). The pool is
shuffled (a random page order), NaN in every unused page and in every row at or past a sequence's
length; out and lse are NaN-poisoned with packed rows past cu_seqlens_q[batch] that no sequence owns.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

NAN16 = {"bf16": 0x7FC0, "f16": 0x7E00}


@dataclass(frozen=True)
class PagedCase:
    name: str
    head_dim: int
    page_size: int
    max_pages: int
    seqlens_q: tuple
    seqused_k: tuple | None        # None: every slot of the page table holds a key (the capacity)
    causal: bool = True
    heads: int = 1
    kv_heads: int = 1
    dtype: str = "bf16"
    num_splits: int | None = None  # None: the plan's own (1 at these sizes: the unsplit variant)
    spare_rows: int = 3
    window_size: tuple = (-1, -1)  # the kernels' mask and score-modifier variants
    attention_chunk: int = 0
    softcap: float = 0.0
    sinks: bool = False            # sinks: float32 [heads] drawn from the seed
    nan_keys: tuple | None = None  # per sequence, leading keys set to NaN: keys of KV tiles no query tile visits

    @property
    def capacity(self) -> int:
        return self.page_size * self.max_pages


CASES = [
    # lengths 0, 1, page - 1, page, page + 1, a query chunk longer than its keys (causal rows that see
    # no key); GQA 2 packed into M; 8-row TMA boxes
    PagedCase("d64-page8-gqa-causal", 64, 8, 10, (3, 0, 1, 20, 5, 2), (9, 5, 0, 70, 3, 8), heads=4, kv_heads=2),
    # the capacity (no seqused_k), two M tiles per head, two splits and the combine, full attention
    PagedCase("d128-page16-split-full", 128, 16, 3, (70, 0, 1), None, causal=False, heads=2, kv_heads=2,
              num_splits=2),
    # a page size that is not a power of two (24: 8-row TMA boxes), lengths page - 1, page + 1, f16, MQA.
    # (Page sizes the cp.async gather fetches compile (tests/test_varlen_paged.py) but do not interpret:
    # the interpreter has no cp.async.)
    PagedCase("d64-page24-f16-mqa", 64, 24, 2, (4, 1, 0, 2), (23, 25, 1, 24), heads=2, kv_heads=1, dtype="f16"),
    # a causal left window that skips two KV tiles of the long sequence, softcap and sinks (unsplit:
    # the epilogue adds them); a two-sided window over two splits (the combine adds the sinks)
    PagedCase("d64-page16-window-softcap-sinks", 64, 16, 10, (2, 0, 1, 20, 5), (150, 5, 0, 70, 3), heads=4, kv_heads=2,
              window_size=(20, -1), softcap=4.0, sinks=True),
    PagedCase("d64-page8-window2-split-sinks", 64, 8, 20, (3, 9, 1), (150, 40, 0), causal=False, heads=2,
              kv_heads=1, num_splits=2, window_size=(30, 5), sinks=True),
]
BY_NAME = {c.name: c for c in CASES}


def _bits(x, dtype: str) -> np.ndarray:
    import torch
    t = torch.as_tensor(x).to(torch.bfloat16 if dtype == "bf16" else torch.float16)
    return t.view(torch.int16).numpy().view(np.uint16).copy()


def _info(a: np.ndarray, dtype: str):
    from fa4mlir.runtime import TensorInfo
    return TensorInfo(1 << 20, a.shape, tuple(s // a.itemsize for s in a.strides), dtype, "cuda")


def inputs(case: PagedCase, seed: int = 0) -> dict:
    """q [total_q, H, D], the pools [num_pages, page, Hkv, D] (16-bit patterns), page_table,
    cu_seqlens_q, seqused_k (None: the capacity), NaN out and lse."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    batch, d, page = len(case.seqlens_q), case.head_dim, case.page_size
    total_q = sum(case.seqlens_q) + case.spare_rows
    lens = case.seqused_k or (case.capacity,) * batch
    num_pages = batch * case.max_pages + 2
    k, v = (torch.full((num_pages, page, case.kv_heads, d), float("nan")) for _ in range(2))
    perm = torch.randperm(num_pages, generator=gen).numpy()
    table = np.full((batch, case.max_pages), -1, np.int32)
    used = 0
    for b, n in enumerate(lens):
        pages = -(-n // page)
        table[b, :pages] = perm[used:used + pages]
        used += pages
        for t0 in range(0, n, page):
            rows = min(page, n - t0)
            k[table[b, t0 // page], :rows] = torch.randn(rows, case.kv_heads, d, generator=gen)
            v[table[b, t0 // page], :rows] = torch.randn(rows, case.kv_heads, d, generator=gen)
        for t in range(case.nan_keys[b] if case.nan_keys else 0):   # a tile that loads them makes P V NaN
            k[table[b, t // page], t % page] = v[table[b, t // page], t % page] = float("nan")
    out = {"q": _bits(torch.randn(total_q, case.heads, d, generator=gen), case.dtype),
           "k": _bits(k, case.dtype), "v": _bits(v, case.dtype), "page_table": table,
           "cu_seqlens_q": np.concatenate([[0], np.cumsum(case.seqlens_q)]).astype(np.int32),
           "seqused_k": None if case.seqused_k is None else np.asarray(case.seqused_k, np.int32),
           "out": np.full((total_q, case.heads, d), NAN16[case.dtype], np.uint16),
           "lse": np.full((case.heads, total_q), np.nan, np.float32),
           "sinks": (torch.randn(case.heads, generator=gen) * 2).numpy().astype(np.float32) if case.sinks else None}
    return out


def check(case: PagedCase, tensors: dict):
    """check_varlen_paged on the tensors' TensorInfos (the host checks of a call)."""
    from fa4mlir.attention.varlen_paged import check_varlen_paged
    infos = {n: None if tensors.get(n) is None else _info(tensors[n], dt)
             for n, dt in (("q", case.dtype), ("k", case.dtype), ("v", case.dtype), ("cu_seqlens_q", "i32"),
                           ("seqused_k", "i32"), ("page_table", "i32"), ("out", case.dtype), ("lse", "f32"),
                           ("sinks", "f32"))}
    return check_varlen_paged(infos, max(case.seqlens_q), case.capacity, causal=case.causal,
                              window_size=case.window_size, attention_chunk=case.attention_chunk,
                              softcap=case.softcap)


def run(case: PagedCase, seed: int = 0) -> dict:
    """Interpret the case's launches; its tensors after them (out and lse written), with `plan`."""
    from fa4mlir import interpret
    from fa4mlir.attention import varlen_paged as vp
    from fa4mlir.attention.plan import TensorRef
    from fa4mlir.kernels import attention_decode_sm90
    tensors = inputs(case, seed)
    problem = check(case, tensors)
    plan = vp.plan_for(problem, 132)
    if case.num_splits is not None:
        plan = replace(plan, num_splits=case.num_splits)
    split_cfg, combine_cfg = vp.configs_for(plan)
    lens = tensors["seqused_k"]
    if lens is None:
        lens = np.full(problem.batch, problem.cache.capacity, np.int32)
    h, d = case.heads, case.head_dim
    named = {"q": tensors["q"], "k_cache": tensors["k"], "v_cache": tensors["v"], "cache_seqlens": lens,
             "page_table": tensors["page_table"], "cu_seqlens_q": tensors["cu_seqlens_q"], "out": tensors["out"],
             "lse": tensors["lse"], "sinks": tensors["sinks"]}
    if not plan.unsplit:
        named["o_partial"] = np.full((plan.num_splits, problem.total_q, h, d), np.nan, np.float32)
        named["lse_partial"] = np.full((plan.num_splits, h, problem.total_q), -np.inf, np.float32)
    row = case.kv_heads * d
    cache_strides = {n: (case.page_size * row, row, d) for n in ("k_cache", "v_cache")}
    split_args, combine_args = vp.launch_args(plan, problem, (h * d, d), case.max_pages, cache_strides, (h * d, d))

    def bind(args):
        return {n: named[a.name] if isinstance(a, TensorRef) else a for n, a in args.items()}
    kernel = interpret.load(attention_decode_sm90.build(split_cfg))
    kernel.launch(plan.grid, bind(split_args))
    if combine_cfg is not None:   # the combine kernel's math on the host (its lane-strided split loop is not
        from fa4mlir.testing_kvcache import combine_splits   # interpretable), over the packed workspaces
        o, lse = combine_splits(named["o_partial"], named["lse_partial"], tensors["sinks"])
        tensors["out"][...] = _bits(o, case.dtype)
        tensors["lse"][...] = lse.astype(np.float32)
    return {**tensors, "lens": lens, "plan": plan, "config": split_cfg, "combine_args": combine_args,
            "partials": (named.get("o_partial"), named.get("lse_partial"))}


# The paged PREFILL kernel (attention_sm90_config_varlen.paged_varlen_config: the sm_90a varlen kernel over the
# pools, D128 bm 128 bn 128): lengths 0, 1, page - 1, page, page + 1 and past a tile, queries longer than
# their keys (causal rows that see no key), two query tiles, GQA; page 16 (8 boxes per tile), 64 (2) and
# 128 (1); NaN in every unused page and past every length (inputs).
PREFILL_CASES = [
    PagedCase("prefill-d128-page16-gqa", 128, 16, 10, (3, 2, 1, 20, 130, 0), (15, 0, 16, 17, 150, 1), heads=2,
              kv_heads=1),
    PagedCase("prefill-d128-page64", 128, 64, 4, (65, 1, 7), (63, 64, 200), heads=1, kv_heads=1),
    PagedCase("prefill-d128-page128-capacity-full", 128, 128, 2, (40, 129), None, causal=False),
]
# ... with window_size, attention_chunk, softcap and sinks (the same kernel's compile-time variants,
# attention/varlen_paged.py note "Which kernel"): a causal left window that skips the first KV tile of
# the 200-query sequence's second query tile (its first load at key 128, a box per page of 16), with
# softcap, sinks, GQA and a sequence of no key (lse = its head's sink); a chunk of 100 keys that divides
# neither the lengths nor bn (NaN in the KV tile left of the long sequence's chunks: `nan_keys`); a two-sided window wider than every sequence yet inside the capacity (kept
# in the kernel: varlen_paged.prefill_mask drops only sides that bound no possible sequence), not causal,
# with sinks; a causal window within a chunk, softcap alone, pages of 32 (4 boxes per tile).
PREFILL_MOD_CASES = [
    PagedCase("prefill-d128-page16-window-softcap-sinks", 128, 16, 20, (3, 0, 1, 20, 200, 2), (15, 5, 16, 17, 300, 0),
              heads=2, kv_heads=1, window_size=(40, -1), softcap=4.0, sinks=True),
    PagedCase("prefill-d128-page64-chunk100", 128, 64, 6, (130, 5, 1), (333, 64, 63), attention_chunk=100,
              nan_keys=(128, 0, 0)),
    PagedCase("prefill-d128-page128-wide-window-full-sinks", 128, 128, 5, (200, 129, 40), (200, 129, 41),
              causal=False, window_size=(300, 3), sinks=True),
    PagedCase("prefill-d128-page32-window-in-chunk-softcap", 128, 32, 8, (150, 1, 64), (250, 33, 31), heads=2,
              kv_heads=2, window_size=(50, -1), attention_chunk=96, softcap=10.0),
    # skipped KV tiles are never loaded: NaN in the keys of the tiles left of every query tile's window (a
    # visited tile's invisible keys must be finite: P = 0 times a NaN V is NaN)
    PagedCase("prefill-d128-page64-window-skips-nan", 128, 64, 12, (100, 130), (600, 700), heads=2, kv_heads=1,
              window_size=(40, -1), nan_keys=(384, 512)),
]


def run_prefill(case: PagedCase, seed: int = 0) -> dict:
    """Interpret the paged prefill kernel on the case (the host's prefill_problem and prefill_launch);
    its tensors after the launch, with `config`."""
    from fa4mlir import interpret
    from fa4mlir.attention import varlen_paged as vp
    from fa4mlir.kernels import attention_fwd_sm90
    from fa4mlir.kernels.attention_sm90_config_varlen import paged_varlen_config
    tensors = inputs(case, seed)
    problem = check(case, tensors)
    # varlen_paged.prefill_config's kernel without its max_seqlen_q rule (small shapes interpret)
    cfg = paged_varlen_config(case.dtype, case.head_dim, case.causal, case.page_size, vp.prefill_mask(problem),
                              softcap=problem.softcap > 0, sinks=problem.sinks)
    launch = vp.prefill_launch(cfg, None, vp.prefill_problem(problem, case.max_pages))
    q, out = tensors["q"], tensors["out"]
    named = {"q": q.reshape(1, *q.shape), "k": tensors["k"], "v": tensors["v"], "o": out.reshape(1, *out.shape),
             "lse": tensors["lse"], "cu_seqlens_q": tensors["cu_seqlens_q"], "seqused_k": tensors["seqused_k"],
             "page_table": tensors["page_table"], "sinks": tensors["sinks"]}
    args = launch.bind(named)
    args["o_rows"] = out
    kernel = interpret.load(attention_fwd_sm90.build(cfg))
    kernel.launch(launch.grid, args)
    lens = tensors["seqused_k"]
    if lens is None:
        lens = np.full(problem.batch, problem.cache.capacity, np.int32)
    return {**tensors, "lens": np.minimum(lens, problem.cache.capacity), "config": cfg, "kernel_name": kernel.name}


__all__ = ["PagedCase", "CASES", "BY_NAME", "inputs", "check", "run", "PREFILL_CASES", "PREFILL_MOD_CASES",
           "run_prefill"]
