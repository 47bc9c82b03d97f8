"""Helpers the MLA tests share (test_mla_decode.py, _fp8.py, test_mla_sparse.py, _fp8.py, _sm100.py,
test_mla_sparse_decode.py, _fp8.py, test_kvcache_decode.py and tests/gpu/test_mla_*): the host checks'
TensorInfos, the kernels' compile checks, the paged latent cache of a decode problem, the interpreter run of
the dense decode kernel, the sparse tests' mix of invalid indices and the sparse prefill's interpreter cases
(inputs, the kernel's tensors, the FA-rule check), the sparse decode's interpreter cases, the pipeline verifier
over a list of entries and the sparse variants' knob checks (test_mla_sparse_overlap.py,
_pairfill.py, _seesaw.py, _pwg.py)."""
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
    not serialised, setmaxnreg honoured. Returns the artefact. Through the on-disk kernel cache
    (compiler.compile_kernel: keyed by the config, the options and the package source), so the many test
    files that check one kernel compile it once per run (FA4MLIR_CACHE=0 compiles every time)."""
    from fa4mlir import compiler
    art = compiler.compile_kernel(name, cfg, compiler.resolve_options(name, debug=False))
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
    interpret.load(attention_mla_decode_sm90.build(cfg)).launch(mc.grid(batch, seqlen_q, heads, splits, cfg.tile_rows), args)
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


def sparse_problem(torch, s_q, heads, topk, s_kv, seed=0):
    """The sparse prefill's q, kv (NaN in every row no valid entry names) and indices [s_q, 1, topk]: token 0 a
    shuffled mix of valid rows, duplicates, -1, other negatives and indices >= s_kv (int32's extremes too);
    token 1 valid rows in descending order with -1 padding at the end; token 2 (when s_q > 2) every entry
    invalid."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(s_q, heads, 576, generator=g).to(torch.bfloat16)
    idx, kv = sparse_rows(torch, g, s_q, topk, s_kv, seed)
    return q, kv.to(torch.bfloat16), idx.reshape(s_q, 1, topk)


def sparse_rows(torch, g, rows, topk, s_kv, seed, scale=1):
    """The sparse tests' indices [rows, topk] and the cache rows they name, drawn from generator `g`: row 0 a
    shuffled mix of valid rows, duplicates, -1, other negatives and rows >= s_kv (invalid_mix); row 1 valid
    rows in descending order, then -1 padding; row 2 (when there is one) every entry invalid; later rows
    random valid rows. The rows: float32 [s_kv, 1, 576], randn x `scale` where a valid entry names them,
    NaN elsewhere."""
    idx = np.full((rows, topk), -1, np.int32)
    used = torch.randperm(s_kv, generator=g).numpy()[:s_kv // 2]
    idx[0] = invalid_mix(used, topk, s_kv, seed)
    if rows > 1:
        idx[1, :topk - 23] = np.sort(used[:topk - 23])[::-1]
    for t in range(3, rows):
        idx[t] = np.random.default_rng(seed + t).choice(used, topk)
    kv = torch.full((s_kv, 1, 576), float("nan"))
    live = np.unique(idx[(idx >= 0) & (idx < s_kv)])
    kv[live] = torch.randn(len(live), 1, 576, generator=g) * scale
    return idx, kv


def sparse_options(torch, heads, topk_length, sinks):
    """A sparse prefill case's topk_length (int32 numpy, or None) and sinks (float32 [heads] randn with the
    first len(sinks) pinned to `sinks`, or None)."""
    lens = None if topk_length is None else np.array(topk_length, np.int32)
    sink_t = None
    if sinks is not None:
        sink_t = torch.randn(heads, generator=torch.Generator().manual_seed(1))
        sink_t[:len(sinks)] = torch.tensor(sinks)
    return lens, sink_t


def sparse_tensors(torch, q, kv_operand, idx, lens, sink_t) -> dict:
    """The sparse prefill kernel's tensors: q's 16-bit elements, the cache as the kernel reads it
    (`kv_operand`, numpy), the indices, topk_length and sinks where given, and out, lse, max_logits NaN
    before the call."""
    s_q, heads = q.shape[0], q.shape[1]
    tensors = {"kv": kv_operand, "q": bits(torch, q), "indices": idx,
               "out": np.full((s_q, heads, 512), 0x7FC0, np.uint16),           # NaN before the call
               "lse": np.full((s_q, heads), np.nan, np.float32),
               "max_logits": np.full((s_q, heads), np.nan, np.float32)}
    if lens is not None:
        tensors["topk_length"] = lens
    if sink_t is not None:
        tensors["sinks"] = sink_t.numpy().astype(np.float32)
    return tensors


def check_sparse_out(torch, q, kv_rows, idx, tensors, scale, sink_t, lens):
    """The kernel's out, max_logits and lse in `tensors` against the float64 sparse reference over the rows
    `kv_rows` [s_kv, 1, 576] (testing_mla.check_mla_sparse: the FA rule, NaN never passes); returns out as
    float32."""
    from fa4mlir.testing_mla import check_mla_sparse
    out_t = torch.from_numpy(tensors["out"].view(np.int16)).view(torch.bfloat16).float()
    errs = check_mla_sparse(q, kv_rows, idx, out_t, torch.from_numpy(tensors["max_logits"]),
                            torch.from_numpy(tensors["lse"]), scale, sinks=sink_t, topk_length=lens)
    assert errs["out"] > 0
    return out_t


def check_sparse_decode_run(torch, cfg, problem, q, kv_operand, kv_rows, idx, lens, splits, **launch):
    """The sparse decode kernel (attention_mla_sparse_sm90, `cfg` of `problem`: sd.check_sparse_decode_inputs)
    interpreted with q (torch, its 16-bit elements passed), the cache bytes the kernel reads (`kv_operand`,
    numpy), the indices [batch, seqlen_q, topk] and topk_length `lens`, out and the workspaces NaN before the
    call; `launch`: decode_launch_args' cache arguments (s_kv, kv_stride, ...). With several splits the
    partials are merged by the combine's math on the host (tests/test_mla_decode.py: the combine kernel runs
    in tests/gpu). Checked by the FA rule against the float64 reference over `kv_rows` [pages, page, 1, 576]
    (check_mla_sparse_decode); query row 2 (when there is one) has no valid entry: out 0, LSE +inf.
    Returns (out, lse) as float32 tensors and the launch arguments."""
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_mla_sparse_sm90
    from fa4mlir.kernels import attention_mla_sparse_sm90_config as dc
    from fa4mlir.testing_kvcache import combine_splits
    from fa4mlir.testing_mla import check_mla_sparse_decode
    batch, seqlen_q, heads, _ = q.shape
    topk = idx.shape[-1]
    out = np.full((batch, seqlen_q, heads, 512), 0x7FC0, np.uint16)        # NaN before the call
    lse = np.full((batch, heads, seqlen_q), np.nan, np.float32)
    tensors = {"kv": kv_operand, "q": bits(torch, q), "indices": idx, "out": out, "lse": lse,
               "o_partial": np.full((splits, batch, seqlen_q, heads, 512), np.nan, np.float32),
               "lse_partial": np.full((splits, batch, heads, seqlen_q), np.nan, np.float32)}
    if lens is not None:
        tensors["topk_length"] = lens
    args = dc.decode_launch_args(cfg, tensors, batch=batch, seqlen_q=seqlen_q, num_splits=splits, heads=heads, topk=topk,
                                 softmax_scale=problem.softmax_scale, q_strides=(heads * 576, 576), indices_stride=topk,
                                 **launch)
    interpret.load(attention_mla_sparse_sm90.build(cfg)).launch(dc.decode_grid(batch, seqlen_q, heads, splits), args)
    if splits == 1:
        out_t = torch.from_numpy(out.view(np.int16)).view(q.dtype).float()
        lse_t = torch.from_numpy(lse)
    else:
        assert np.isfinite(tensors["lse_partial"]).any()
        o, lse_c = combine_splits(tensors["o_partial"], tensors["lse_partial"])
        out_t, lse_t = torch.from_numpy(o).float(), torch.from_numpy(lse_c).float()
    errs = check_mla_sparse_decode(q, kv_rows, idx, out_t, lse_t, problem.softmax_scale, topk_length=lens)
    assert errs["out"] > 0
    if batch * seqlen_q > 2:        # query row 2: every entry invalid
        b, t = divmod(2, seqlen_q)
        assert (out_t[b, t] == 0).all() and torch.isposinf(lse_t[b, :, t]).all()
    return out_t, lse_t, args


def forced_metadata(torch, splits: int, batch: int):
    """get_mla_metadata's outputs on the GPU for `splits` splits of every one of `batch` sequences."""
    meta = torch.zeros((splits, 8), dtype=torch.int32, device="cuda")
    return meta, torch.arange(batch + 1, dtype=torch.int32, device="cuda") * splits


def verify_entries(entries) -> None:
    """fa4-verify-pipelines accepts each (kernel name, config) entry's built module."""
    from fa4mlir import kernels
    from fa4mlir.passes import verify_pipelines
    for name, cfg in entries:
        kir = kernels.module(name).build(cfg)
        with kir.module.context:
            verify_pipelines.run(kir.module.operation)


def sparse_decode_case(torch, batch, seqlen_q, heads, topk, page, splits, lengths, dtype="bf16"):
    """An interpreted sparse decode case over a 16-bit cache (tests/test_mla_sparse_decode.py's _problem, 640 // page
    + 1 pages, topk_length `lengths` or None, `splits` splits): returns the host's problem
    (sd.check_sparse_decode_inputs) and run(cfg), which interprets the kernel of `cfg` on it by
    check_sparse_decode_run (the FA rule)."""
    from fa4mlir.attention import mla_sparse_decode as sd
    from tests.test_mla_sparse_decode import _problem
    pages = 640 // page + 1
    q, cache, idx = _problem(torch, batch, seqlen_q, heads, topk, pages, page, dtype)
    lens = None if lengths is None else np.array(lengths, np.int32)
    problem = sd.check_sparse_decode_inputs(info(q.shape, dtype), info(cache.shape, dtype), info(idx.shape, "i32"),
                                            512, info((splits, 8), "i32"), info((batch + 1,), "i32"),
                                            topk_length=None if lens is None else info(lens.shape, "i32"))

    def run(cfg):
        return check_sparse_decode_run(torch, cfg, problem, q, bits(torch, cache), cache, idx, lens, splits,
                                       s_kv=pages * page, kv_stride=576)
    return problem, run


def check_variant_knob(monkeypatch, variant: str, prefill_cfg):
    """FA4MLIR_MLA_SPARSE_VARIANT=`variant` (a 16-bit, producer-warpgroup sparse variant): the host's prefill problem
    (4 x 128 heads, topk 2048) gets `prefill_cfg`; check_variant refuses it with the gather warp (KnobError naming
    FA4MLIR_MLA_SPARSE_PRODUCER=warpgroup) and over an FP8 kv ("16-bit kv only"). Returns the config the host's
    decode problem (2 x 1 x 128 heads, topk 2048, unsplit) gets."""
    from dataclasses import replace

    import pytest

    from fa4mlir.attention import mla_sparse as ms
    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.attention.errors import KnobError, UnsupportedFeatureError
    monkeypatch.setenv(ms.VARIANT_ENV, variant)
    problem = ms.check_sparse_inputs(info((4, 128, 576)), info((1000, 1, 576)), info((4, 1, 2048), "i32"), None, 512)
    assert replace(problem, variant=ms.requested_variant()).config == prefill_cfg
    with pytest.raises(KnobError, match="FA4MLIR_MLA_SPARSE_PRODUCER=warpgroup"):
        ms.check_variant(variant, False, producer_warps=1)
    with pytest.raises(UnsupportedFeatureError, match="16-bit kv only"):
        ms.check_variant(variant, True)
    dec = sd.check_sparse_decode_inputs(info((2, 1, 128, 576)), info((40, 64, 1, 576)), info((2, 1, 2048), "i32"),
                                        512, info((4, 8), "i32"), info((3,), "i32"))
    return dec.config(False)
