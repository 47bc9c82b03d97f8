"""Deviceless: the sm_90a sparse MLA decode (flash_mla_with_kvcache with indices: attention/mla_sparse_decode.py,
attention_mla_sparse_sm90 built from MLASparseDecodeConfig).

* every sparse decode kernel of the `mla` bundle set compiles with no spills, wgmma not serialised,
  within the SMEM its config states, with the launch contract it states and the setmaxnreg budgets
  that fit the launch allocation (the gather warpgroup's 24: register_pool_fits);
* the interpreter runs the kernel on tiny problems, checked by the FA rule against the float64
  reference of FlashMLA's definition (fa4mlir.testing_mla.check_mla_sparse_decode): indices naming
  cache rows page x page_size + offset with -1 padding, other negatives and entries past the cache,
  duplicates, out-of-order entries, fewer valid entries than topk, NaN in every cache row no valid
  entry names, a query row with no valid entry, heads not a multiple of 64 (masked rows),
  topk_length per batch, f16, and the topk split (partials merged by the combine's math, as
  tests/test_mla_decode.py does: the combine kernel runs in tests/gpu);
* the typed errors, get_mla_metadata's sparse split, the plan and FlashMLA's FLOP/byte count.
"""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir import kernel_sets
from fa4mlir.attention import errors as E
from fa4mlir.attention import mla
from fa4mlir.attention import mla_sparse_decode as sd
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels import attention_mla_sparse_sm90_config as dc
from fa4mlir.kernels import attention_mla_sparse_sm90_config as sc
from tests._mla_helpers import check_sparse_art, lower_clean, sparse_decode_case, sparse_rows
from tests._mla_helpers import info as _info

ENTRIES = [e for e in kernel_sets.mla() if e[0] == dc.DECODE_KERNEL and not e[1].fp8
           and e[1].producer_warps == 1]   # FP8: its own test file; producer_warps=4: test_mla_sparse_pwg.py


def test_sparse_decode_kernels_are_in_the_mla_set():
    assert {cfg for _, cfg in ENTRIES} == {dc.MLASparseDecodeConfig(d, topk_length=t, split=s) for d in dc.DECODE_DTYPES
                                          for t in (False, True) for s in (False, True)}
    assert {(dec.COMBINE_KERNEL, dec.CombineConfig(d, 512)) for d in dc.DECODE_DTYPES} <= set(kernel_sets.mla())


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e[1].name())
def test_sparse_decode_set_compiles_clean(entry):
    name, cfg = entry
    check_sparse_art(lower_clean(name, cfg), cfg)
    assert sc.register_pool_fits(cfg.threads, sc.MMA_REGS, sc.LOAD_REGS, sc.CONSUMERS)[0]


def test_config_refuses_unknown_cache_formats_and_dtypes():
    from fa4mlir.kernels.common.fields import ConfigError
    with pytest.raises(ConfigError, match="fp8"):      # FlashMLA's FP8 cache is kv_dtype "fp8"
        dc.MLASparseDecodeConfig("bf16", kv_dtype="e4m3").validate()
    with pytest.raises((ConfigError, ValueError, TypeError)):
        dc.MLASparseDecodeConfig("f32").validate()


# ---- the interpreter ------------------------------------------------------------------------------

def _problem(torch, batch, seqlen_q, heads, topk, pages, page, dtype, seed=0):
    """q, k_cache (NaN in every row no valid entry names) and indices [batch, seqlen_q, topk] of cache
    rows page x page_size + offset: query row 0 a shuffled mix of valid rows, duplicates, -1, other
    negatives and rows past the cache; row 1 valid rows in descending order, then -1 padding; row 2
    (when there is one) every entry invalid; later rows random valid rows."""
    g = torch.Generator().manual_seed(seed)
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    q = torch.randn(batch, seqlen_q, heads, 576, generator=g).to(tdtype)
    idx, cache = sparse_rows(torch, g, batch * seqlen_q, topk, pages * page, seed)
    return q, cache.to(tdtype).reshape(pages, page, 1, 576), idx.reshape(batch, seqlen_q, topk)


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,page,splits,dtype,topk_length", [
    (3, 1, 16, 128, 16, 1, "bf16", None),        # 16 heads: 48 masked rows; row 2 has no valid entry
    (2, 2, 64, 192, 61, 2, "f16", (150, 70)),    # split 2 over 3 tiles; topk_length per batch
    (1, 2, 80, 128, 64, 4, "bf16", None),        # two head blocks, the second 16 real rows; 2 empty splits
])
def test_sparse_decode_through_the_interpreter(batch, seqlen_q, heads, topk, page, splits, dtype, topk_length):
    torch = pytest.importorskip("torch")
    problem, run = sparse_decode_case(torch, batch, seqlen_q, heads, topk, page, splits, topk_length, dtype)
    run(problem.config(splits > 1))


def test_split_range_covers_every_tile_once():
    for n_tiles in (0, 1, 3, 32):
        for splits in (1, 2, 3, 7, 64):
            got = [t for s in range(splits) for t in range(*dc.split_range(n_tiles, s, splits))]
            assert got == list(range(n_tiles)), (n_tiles, splits)


# ---- typed errors, the metadata, the plan, FLOPs --------------------------------------------------

def _good(**kw):
    args = dict(q=_info((4, 2, 128, 576)), k_cache=_info((100, 64, 1, 576)), indices=_info((4, 2, 2048), "i32"),
                head_dim_v=512, metadata=_info((1, 8), "i32"), num_splits=_info((5,), "i32"), softmax_scale=None,
                causal=False, topk_length=None)
    args.update(kw)
    return args


@pytest.mark.parametrize("change,error", [
    (dict(indices=_info((4, 2, 2048), "i64")), E.DTypeError),
    (dict(indices=_info((4, 2048), "i32")), E.ShapeError),
    (dict(indices=_info((4, 1, 2048), "i32")), E.ShapeError),
    (dict(indices=_info((4, 2, 2000), "i32")), E.ShapeError),            # topk not a multiple of 64
    (dict(indices=_info((4, 2, 2048), "i32", strides=(1, 4, 8))), E.LayoutError),
    (dict(indices=_info((4, 2, 2048), "i32", strides=(8192, 2048, 1))), E.LayoutError),   # b, s do not fold
    (dict(q=_info((4, 2, 128, 576), strides=(4 * 128 * 576, 128 * 576, 576, 1))), E.LayoutError),
    (dict(q=_info((4, 2, 128, 512))), E.HeadDimError),
    (dict(head_dim_v=576), E.HeadDimError),
    (dict(q=_info((4, 2, 129, 576))), E.ShapeError),
    (dict(q=_info((4, 2, 128, 576), "f32")), E.DTypeError),
    (dict(k_cache=_info((100, 64, 1, 576), "f16")), E.DTypeError),
    (dict(k_cache=_info((100, 64, 2, 576))), E.HeadsRatioError),
    (dict(k_cache=_info((100, 64, 576))), E.ShapeError),
    (dict(k_cache=_info((100, 64, 1, 576), strides=(65 * 576, 576, 576, 1))), E.LayoutError),  # pages not even
    (dict(causal=True), E.UnsupportedFeatureError),
    (dict(causal="False"), E.ArgumentTypeError),
    (dict(topk_length=_info((8,), "i32")), E.ShapeError),
    (dict(topk_length=_info((4,), "i64")), E.ShapeError),
    (dict(metadata=_info((65, 8), "i32")), E.ShapeError),
    (dict(num_splits=_info((4,), "i32")), E.ShapeError),
    (dict(softmax_scale=float("inf")), E.ScaleError),
    (dict(q=_info((4, 2, 16, 576)), k_cache=_info((7, 61, 1, 576)), topk_length=_info((4,), "i32")), None),
    (dict(q=_info((4, 2, 128, 576), "f16"), k_cache=_info((100, 64, 1, 576), "f16")), None),
])
def test_typed_errors(change, error):
    args = _good(**change)
    if error is None:
        p = sd.check_sparse_decode_inputs(**args)
        assert p.topk == 2048 and p.softmax_scale == 576 ** -0.5 and p.splits == 1
        return
    with pytest.raises(error):
        sd.check_sparse_decode_inputs(**args)


def test_sparse_splits_fill_the_sms_without_passing_the_tiles():
    assert sd.plan_sparse_splits(128, 2, 128, 2048, 132) == 1              # 512 CTAs: no split
    assert sd.plan_sparse_splits(1, 1, 128, 2048, 132) == 32               # 2 CTAs: one tile (of 32) a split
    assert sd.plan_sparse_splits(1, 1, 128, 16384, 132) == 64              # MAX_SPLITS
    assert sd.plan_sparse_splits(4, 2, 16, 2048, 132) == 16                # 8 CTAs: 132 // 8
    assert sd.plan_sparse_splits(1, 1, 64, 128, 132) == 2                  # at most one tile a split
    assert sd.plan_sparse_splits(100, 1, 64, 2048, 132) == 1               # 100 >= 0.8 x 132


@pytest.mark.parametrize("splits", [1, 3])
def test_plan_launches_by_the_contracts(monkeypatch, splits):
    from types import SimpleNamespace
    monkeypatch.setattr(sd, "kernel_for", lambda source, cfg: SimpleNamespace(cfg=cfg))
    problem = sd.check_sparse_decode_inputs(**_good(metadata=_info((splits, 8), "i32"),
                                                    topk_length=_info((4,), "i32")))
    plan = sd.build_plan(problem, None, (128 * 576, 576), 576, 2048)
    first = plan.launches[0]
    cfg = first.kernel.cfg
    # SPARSE_DEFAULT_RULE's kernel over bf16: the seesaw step in pair-fill order with the producer warpgroup
    assert cfg == dc.MLASparseDecodeConfig("bf16", topk_length=True, split=splits > 1, producer_warps=4, seesaw=True,
                                           pair_fill=True)      # SPARSE_DECODE_DEFAULT_RULE: the pair fill
    assert (dc.DECODE_KERNEL, cfg) in kernel_sets.mla()
    assert list(first.args) == [n for n, _ in cfg.params] and first.grid == (4 * 2 * 2, splits, 1)
    assert first.args["s_kv"] == 6400 and first.args["tokens"] == 8 and first.args["head_blocks"] == 2
    assert len(plan.launches) == (2 if splits > 1 else 1)
    if splits > 1:
        combine = plan.launches[1]
        assert combine.kernel.cfg == dec.CombineConfig("bf16", 512)
        assert list(combine.args) == [n for n, _ in dec.COMBINE_PARAMS] and combine.args["num_splits"] == splits
        assert combine.grid == (4 * 2 * 128 // dec.COMBINE_WARPS, 1, 1)


def test_flops_and_bytes_as_flashmla_counts():
    idx = np.array([[[0, 5, 5, -1]], [[7, 8, 9, 10]]], np.int32)          # batch 2, seqlen_q 1, topk 4
    flops, data = sd.flops_and_bytes(2, 1, 64, idx)
    assert flops == 2 * 64 * 8 * (576 + 512)
    assert data == 2 * 64 * 576 * 2 + 7 * 1152 + 2 * 64 * 512 * 2        # distinct: -1, 0, 5, 7, 8, 9, 10
    flops, data = sd.flops_and_bytes(2, 1, 64, idx, topk_length=[2, 1])
    assert flops == 2 * 64 * 3 * (576 + 512)
    assert data == 2 * 64 * 576 * 2 + 4 * 1152 + 2 * 64 * 512 * 2        # -1, 0, 5, 7


def test_host_path_refuses_typed_before_touching_the_device():
    torch = pytest.importorskip("torch")
    q = torch.zeros(2, 1, 64, 576, dtype=torch.bfloat16)
    cache = torch.zeros(4, 64, 1, 576, dtype=torch.bfloat16)
    idx = torch.zeros(2, 1, 64, dtype=torch.int32)
    meta, splits = torch.zeros(1, 8, dtype=torch.int32), torch.zeros(3, dtype=torch.int32)
    with pytest.raises(E.DeviceError, match="cuda"):
        mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, splits, indices=idx)
    with pytest.raises(E.AutogradError):
        mla.flash_mla_with_kvcache(q.clone().requires_grad_(True), cache, None, None, 512, meta, splits, indices=idx)
    for kw in (dict(attn_sink=torch.zeros(64)), dict(extra_k_cache=cache), dict(extra_topk_length=splits)):
        with pytest.raises(E.UnsupportedFeatureError, match="not built"):
            mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, splits, indices=idx, **kw)
    with pytest.raises(E.DeviceError, match="cuda"):   # FP8: the sparse host path (tests/test_mla_sparse_decode_fp8.py)
        mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, splits, indices=idx, is_fp8_kvcache=True)
    with pytest.raises(E.UnsupportedFeatureError, match="needs indices"):
        mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, splits, topk_length=splits)
    with pytest.raises(E.ArgumentTypeError):
        mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, splits, indices=np.zeros((2, 1, 64)))
