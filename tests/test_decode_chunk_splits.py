"""Deviceless: the chunked split partition of the decode kernel (DecodeConfig.chunked_splits,
FA4MLIR_DECODE_PARTITION=chunk, `[D-decode-chunk-splits]`): the partition's host twin
(decode_schedule.chunk_range: every tile once, in order, short sequences on few full splits, the
rest empty), the config's key and name (the default kernels' unchanged), the selection (env knob,
bench decode's variant names, the decode-chunk bundle set), and the split kernel executed by the
sm_90a interpreter on ragged paged caches (bf16, and FP8 through the swap-AB kernel): its LSE
partials are -inf exactly on the splits chunk_range leaves empty, and the host combine's result
passes the FA rule against the float64 reference.
"""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir import kernel_sets
from fa4mlir.bench import decode_bench
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels.common import decode_schedule as ds
from fa4mlir.kernels.common.fields import ConfigError

BN = 64


def _tiles(tokens: int) -> int:
    return ds.ceil_div(tokens, BN)


# capacities in tokens, some not a multiple of the tile; lengths around page and tile edges
CAPACITIES = [1, 63, 64, 65, 200, 336, 1030, 16384]
PAGE = 16


@pytest.mark.parametrize("capacity", CAPACITIES)
@pytest.mark.parametrize("num_splits", [1, 2, 3, 7, 8, 64])
def test_chunk_range_covers_every_tile_once(capacity, num_splits):
    cap_tiles = _tiles(capacity)
    chunk = ds.chunk_tiles(cap_tiles, num_splits)
    lengths = {0, 1, PAGE - 1, PAGE, PAGE + 1, BN - 1, BN, BN + 1, capacity // 3, capacity - 1, capacity}
    for length in sorted(x for x in lengths if 0 <= x <= capacity):
        n = _tiles(length)
        ranges = [ds.chunk_range(n, cap_tiles, num_splits, s) for s in range(num_splits)]
        assert [t for b, e in ranges for t in range(b, e)] == list(range(n)), (length, ranges)
        live = [(b, e) for b, e in ranges if e > b]
        assert len(live) == ds.ceil_div(n, chunk) if n else not live
        assert all(e - b == chunk for b, e in live[:-1])                   # full ranges, the last one shorter
        assert all(b == e == n for b, e in ranges[len(live):])             # the rest empty, at the end
    with pytest.raises(ValueError, match="exceeds the capacity"):
        ds.chunk_range(cap_tiles + 1, cap_tiles, num_splits, 0)
    with pytest.raises(ValueError, match="split_idx"):
        ds.chunk_range(0, cap_tiles, num_splits, num_splits)


def test_chunked_and_even_partitions_agree_on_full_sequences():
    """A sequence at the capacity: both partitions cut it into the same ranges when the splits
    divide its tiles; a short one runs its tiles on ceil(n / C) CTAs, not num_splits."""
    for cap_tiles, splits in ((256, 8), (128, 4), (96, 32)):
        assert [ds.chunk_range(cap_tiles, cap_tiles, splits, s) for s in range(splits)] == \
            [ds.split_range(cap_tiles, splits, s) for s in range(splits)]
    # bench decode_paged: capacity 16384 (256 tiles), 8 splits; a 1024-token sequence is 16 tiles
    assert sum(e > b for b, e in (ds.split_range(16, 8, s) for s in range(8))) == 8
    assert [ds.chunk_range(16, 256, 8, s) for s in range(8)] == [(0, 16)] + [(16, 16)] * 7


def _kernel_twin(length: int, capacity: int, num_splits: int, split: int) -> tuple[int, int]:
    """The kernel's arithmetic (attention_decode_sm90._Work._chunk) in Python ints."""
    n = (length + BN - 1) // BN
    cap_tiles = (capacity + BN - 1) // BN
    chunk = (cap_tiles + num_splits - 1) // num_splits
    begin = min(split * chunk, n)
    return begin, min(begin + chunk, n)


def test_kernel_arithmetic_matches_the_host_twin():
    for capacity in CAPACITIES:
        for splits in (1, 3, 8, 128):
            for length in {0, 1, capacity // 2, capacity}:
                assert [_kernel_twin(length, capacity, splits, s) for s in range(splits)] == \
                    [ds.chunk_range(_tiles(length), _tiles(capacity), splits, s) for s in range(splits)]


def test_config_field_is_a_declared_variant():
    base = dec.default_config("bf16", 128, 16)
    chunked = dec.with_partition(base, "chunk")
    assert "chunked_splits" not in base.key() and chunked.key()["chunked_splits"] is True
    assert dec.VARIANT_FIELDS["chunked_splits"] is False
    assert chunked.name() == base.name() + "_chunked"
    assert dec.with_partition(chunked, "even") == base
    unsplit = dec.default_config("bf16", 128, 16, unsplit=True)
    assert dec.with_partition(unsplit, "chunk") is unsplit            # one split: the same kernel
    with pytest.raises(ConfigError, match="unsplit"):
        dec.DecodeConfig(unsplit=True, chunked_splits=True).validate()
    with pytest.raises(ConfigError, match="partition"):
        dec.with_partition(base, "chunks")


def test_runtime_config_reads_the_partition_knob(monkeypatch):
    monkeypatch.delenv(dec.PARTITION_ENV, raising=False)
    monkeypatch.delenv(dec.FP8_VARIANT_ENV, raising=False)
    plain = dec.runtime_config("bf16", 128, 16)
    fp8 = dec.runtime_config("bf16", 128, None, "kv_head", rows=4)
    assert not plain.chunked_splits and fp8.swap_ab_warp_max and not fp8.chunked_splits
    monkeypatch.setenv(dec.PARTITION_ENV, "chunk")
    assert dec.runtime_config("bf16", 128, 16) == dec.with_partition(plain, "chunk")
    assert dec.runtime_config("bf16", 128, None, "kv_head", rows=4) == dec.with_partition(fp8, "chunk")
    assert not dec.runtime_config("bf16", 128, 16, unsplit=True).chunked_splits
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, "smem")
    got = dec.runtime_config("bf16", 128, 16, "kv_head", rows=4)
    assert got.chunked_splits and not got.swap_ab
    monkeypatch.setenv(dec.PARTITION_ENV, "chunky")
    with pytest.raises(ConfigError, match="FA4MLIR_DECODE_PARTITION"):
        dec.runtime_config("bf16", 128, 16)


def test_bench_variant_names():
    fp8, part = dec.FP8_VARIANT_ENV, dec.PARTITION_ENV
    assert decode_bench.variant_env("chunk") == {fp8: "default", part: "chunk"}
    assert decode_bench.variant_env("default") == {fp8: "default", part: "even"}
    assert decode_bench.variant_env("swapab+chunk") == {fp8: "swapab", part: "chunk"}
    for bad in ("chunk+even", "smem+swapab", "chunk+"):
        with pytest.raises(ValueError, match="joined by"):
            decode_bench.variant_env(bad)
    bf16 = decode_bench._variants(lambda n=None: n, ["default", "chunk", "smem", "swapab+chunk"], [4, 8], fp8=False)
    assert list(bf16) == ["fa4mlir", "fa4mlir(s=4)", "fa4mlir(s=8)", "fa4mlir[default]", "fa4mlir[chunk]",
                          "fa4mlir[chunk](s=4)", "fa4mlir[chunk](s=8)"]
    assert bf16["fa4mlir[chunk](s=8)"]() == 8 and bf16["fa4mlir[chunk]"]() is None


def test_decode_chunk_set_holds_the_bench_kernels():
    decode = kernel_sets.SETS["decode"]()
    entries = kernel_sets.SETS["decode-chunk"]()
    extra = [cfg for _, cfg in entries[len(decode):]]
    assert entries[:len(decode)] == decode and len(extra) == len(kernel_sets.DECODE_CHUNK_CASES)
    assert all(cfg.chunked_splits and not cfg.unsplit for cfg in extra)
    assert not any(getattr(cfg, "chunked_splits", False) for _, cfg in decode)
    # what bench decode's rows run under FA4MLIR_DECODE_PARTITION=chunk (group 4 x seqlen_q 1 = 4 packed rows)
    want = {dec.with_partition(dec.default_config("bf16", 128, page, grain, rows=4), "chunk")
            for page in (None, 1, 16, 64, 128) for grain in ("", "kv_head") if not (grain and page == 1)}
    assert want <= set(extra)
    names = {cfg.name() for cfg in extra}
    assert {"attention_decode_sm90_bf16_d128_n64_s4_paged_b16_e4m3_kv_head_swapab_chunked",
            "attention_decode_sm90_bf16_d128_n64_s5_contig_e4m3_kv_head_swapabw_chunked"} <= names


# ---- the split kernel through the interpreter ---------------------------------------------------------

# a paged cache of CAP tokens (6 tiles of 64) in pages of 16, 4 splits: C = 2 tiles. The full sequence
# runs 3 splits (its 4th is empty: 4 x 2 > 6), 130 tokens 2, 17 and 1 token one, 0 tokens none
CAP, SPLITS = 384, 4
LENGTHS = [CAP, 130, 17, 1, 0]
HEADS, KV_HEADS, D = 4, 2, 128


def _expected_empty(lengths, capacity: int, splits: int) -> np.ndarray:
    """[splits, batch]: True where chunk_range gives split s of sequence b no tile."""
    return np.array([[ds.chunk_range(_tiles(n), _tiles(capacity), splits, s)[0] ==
                      ds.chunk_range(_tiles(n), _tiles(capacity), splits, s)[1] for n in lengths]
                     for s in range(splits)])


def _launch(problem, tensors: dict, q_strides, table_stride: int, cache_strides=None):
    """Plan the problem at SPLITS forced splits under FA4MLIR_DECODE_PARTITION=chunk (set by the
    caller), check the plan picks the chunked kernel, run it: the NaN-filled partials it wrote."""
    from fa4mlir import interpret
    from fa4mlir.attention import kvcache as kc
    from fa4mlir.attention.kvcache_call import configs_for
    from fa4mlir.kernels import attention_decode_sm90
    plan = kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=SPLITS,
                                                return_lse=False), 132)
    cfg, combine = configs_for(plan)
    assert cfg.chunked_splits and not cfg.unsplit and combine is not None and plan.num_splits == SPLITS
    p = plan.problem
    tensors = {**tensors, "o_partial": np.full((SPLITS, *p.out_shape), np.nan, np.float32),
               "lse_partial": np.full((SPLITS, *p.lse_shape), np.nan, np.float32)}
    args = dec.split_launch_args(plan, tensors, q_strides, table_stride, cache_strides)
    interpret.load(attention_decode_sm90.build(cfg)).launch(dec.split_grid(plan), args)
    return cfg, tensors["o_partial"], tensors["lse_partial"]


def _check_partials(o_p: np.ndarray, lse_p: np.ndarray, lengths) -> None:
    """Every partial written; LSE -inf exactly on the splits chunk_range leaves empty, finite elsewhere."""
    assert not np.isnan(lse_p).any() and not np.isnan(o_p[~np.isneginf(lse_p).any(axis=(2, 3))]).any()
    empty = _expected_empty(lengths, CAP, SPLITS)                      # [S, B]
    assert (np.isneginf(lse_p).all(axis=(2, 3)) == empty).all() and np.isfinite(lse_p[~empty]).all(), empty


def test_bf16_chunked_splits_through_the_interpreter(monkeypatch):
    torch = pytest.importorskip("torch")
    from fa4mlir.attention import kvcache as kc
    from fa4mlir.runtime import TensorInfo
    from fa4mlir.testing import FaTally, attention_math
    from fa4mlir.testing_kvcache import combine_splits, kvcache_reference

    def info(a, dtype):
        return TensorInfo(1 << 20, a.shape, tuple(s // a.itemsize for s in a.strides), dtype, "cuda")

    def bits(x):
        return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).copy()

    def bf16(b):
        return torch.from_numpy(b.view(np.int16)).view(torch.bfloat16)

    monkeypatch.setenv(dec.PARTITION_ENV, "chunk")
    gen = torch.Generator().manual_seed(27)
    batch, max_pages = len(LENGTHS), CAP // PAGE
    num_pages = batch * max_pages + 2
    k, v = (torch.full((num_pages, PAGE, KV_HEADS, D), float("nan")) for _ in range(2))
    table = torch.randperm(num_pages, generator=gen)[:batch * max_pages].view(batch, max_pages).numpy().astype(np.int32)
    for b, n in enumerate(LENGTHS):        # NaN in every row a sequence does not own
        for t0 in range(0, n, PAGE):
            rows = min(PAGE, n - t0)
            k[table[b, t0 // PAGE], :rows] = torch.randn(rows, KV_HEADS, D, generator=gen)
            v[table[b, t0 // PAGE], :rows] = torch.randn(rows, KV_HEADS, D, generator=gen)
    q, k, v = bits(torch.randn(batch, 1, HEADS, D, generator=gen)), bits(k), bits(v)
    lens = np.array(LENGTHS, np.int32)
    problem = kc.check_kvcache_inputs(info(q, "bf16"), info(k, "bf16"), info(v, "bf16"), info(lens, "i32"),
                                      info(table, "i32"))
    tensors = {"q": q, "k_cache": k, "v_cache": v, "cache_seqlens": lens, "page_table": table,
               "k_scale": lens, "v_scale": lens, "k_pool": k, "v_pool": v}
    cfg, o_p, lse_p = _launch(problem, tensors, (HEADS * D, HEADS * D, D), max_pages)
    assert cfg.paged and cfg.box_rows == PAGE and not cfg.fp8
    _check_partials(o_p, lse_p, LENGTHS)
    out, lse = combine_splits(o_p, lse_p)
    assert not np.isnan(out).any() and (out[-1] == 0).all() and np.isposinf(lse[-1]).all()   # length 0
    ref = kvcache_reference(bf16(q).float(), bf16(k).float(), bf16(v).float(), torch.from_numpy(lens),
                            torch.from_numpy(table), compute_dtype=np.float32)
    tally = FaTally()
    for b, n in enumerate(LENGTHS[:-1]):
        t = np.arange(n)
        rows = torch.from_numpy(table[b][t // PAGE] * PAGE + t % PAGE)
        k_rows, v_rows = (bf16(x).reshape(-1, KV_HEADS, D)[rows] for x in (k, v))
        low_o, low_l = attention_math(bf16(q)[b:b + 1], k_rows[None], v_rows[None], D ** -0.5, True, torch.bfloat16)
        tally.add(torch.from_numpy(out[b]), low_o[0].double(), ref["out"][b].double(),
                  torch.from_numpy(lse[b]), low_l[0].double(), ref["lse"][b].double())
    tally.check()


@pytest.mark.parametrize("page", [PAGE, None])
def test_fp8_swapab_chunked_splits_through_the_interpreter(monkeypatch, page):
    """FP8_DEFAULT_RULE's swap-AB kernels (per-KV-head scales, group 4: swapab paged, swapabw
    contiguous) with chunked splits over tests/test_interpret_decode_sm90's case at this file's
    capacity and lengths (NaN codes past them)."""
    pytest.importorskip("torch")
    from fa4mlir.attention import kvcache as kc
    from fa4mlir.testing import fa_rule
    from fa4mlir.testing_kvcache import combine_splits, kvcache_reference
    from tests import test_interpret_decode_sm90 as fp8
    lengths = LENGTHS[:-1]            # the module's low-precision run needs a key per sequence
    for name, value in (("HEADS", 8), ("LENGTHS", tuple(lengths)), ("CAPACITY", CAP)):
        monkeypatch.setitem(vars(fp8), name, value)
    monkeypatch.setenv(dec.PARTITION_ENV, "chunk")
    monkeypatch.delenv(dec.FP8_VARIANT_ENV, raising=False)
    c = fp8._case(page, "kv_head", seed=3)
    q_bits = c["q"].view(fp8.torch.int16).numpy().view(np.uint16)
    lens, table = c["lens"], c["table"]
    problem = kc.check_kvcache_inputs(
        fp8._info(q_bits, "bf16"), fp8._info(c["k_cache"], "e4m3"), fp8._info(c["v_cache"], "e4m3"),
        fp8._info(lens, "i32"), None if table is None else fp8._info(table, "i32"),
        k_scale=fp8._info(c["k_scale"], "f32"), v_scale=fp8._info(c["v_scale"], "f32"))
    tensors = {"q": q_bits, "k_cache": c["k_cache"], "v_cache": c["v_cache"], "cache_seqlens": lens,
               "page_table": lens if table is None else table, "k_scale": c["k_scale"], "v_scale": c["v_scale"],
               "k_pool": c["k_cache"], "v_pool": c["v_cache"]}
    cfg, o_p, lse_p = _launch(problem, tensors, tuple(s // 2 for s in q_bits.strides[:3]),
                              0 if table is None else table.strides[0] // 4,
                              {n: c[n].strides[:3] for n in ("k_cache", "v_cache")})
    assert cfg.swap_ab and cfg.swap_ab_warp_max == (page is None) and cfg.kv_scale == "kv_head"
    _check_partials(o_p, lse_p, lengths)
    out, lse = combine_splits(o_p, lse_p)
    ref = kvcache_reference(c["q"].float().numpy(), c["k_cache"], c["v_cache"], lens, table,
                            softmax_scale=D ** -0.5, causal=True, k_scale=c["k_scale"], v_scale=c["v_scale"])
    low_o, low_l = fp8._lowp(c, page, "kv_head")
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    ok_out, bound = fa_rule(np.abs(out - ref["out"]).max(), np.abs(low_o - ref["out"]).max())
    ok_lse, lse_bound = fa_rule(np.abs(lse - ref["lse"]).max(), np.abs(low_l - ref["lse"]).max())
    assert ok_out and ok_lse, (np.abs(out - ref["out"]).max(), bound, np.abs(lse - ref["lse"]).max(), lse_bound)


@pytest.mark.parametrize("entry", [e for e in kernel_sets.SETS["decode-chunk"]()
                                   if getattr(e[1], "chunked_splits", False)], ids=lambda e: e[1].name())
def test_chunked_kernels_compile_clean(entry):
    """Every chunked kernel of the decode-chunk set: no spills, no stack frame (ptxas; a few seconds each)."""
    from fa4mlir import compiler, kernels, lowering
    name, cfg = entry
    art = lowering.lower(kernels.module(name).build(cfg), compiler.resolve_options(name, debug=False))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert art.block == (cfg.threads, 1, 1)


def test_the_set_holds_every_kernel_the_gpu_test_picks(monkeypatch):
    from tests.gpu import test_decode_chunk_gpu as gpu
    names = {cfg.name() for _, cfg in kernel_sets.SETS["decode-chunk"]()}
    monkeypatch.delenv(dec.FP8_VARIANT_ENV, raising=False)
    for partition in dec.PARTITIONS:
        monkeypatch.setenv(dec.PARTITION_ENV, partition)
        picked = [dec.runtime_config("bf16", 128, page, "") for page in gpu.BF16_PAGES]
        picked += [dec.runtime_config("bf16", 128, page, grain, rows=4) for page, grain in gpu.FP8_CASES]
        picked += [dec.runtime_config("bf16", 128, page, grain, unsplit=True, rows=4) for page, grain in gpu.FP8_CASES]
        assert all(cfg.name() in names for cfg in picked), [c.name() for c in picked if c.name() not in names]
