"""Deviceless: flash_attn_varlen_func(..., page_table=) — the checks (typed errors before any
launch), the plan and grid, the launch arguments of the decode kernel's varlen_q variant and of the
combine, the variant's compile key and contract (the default decode kernels' keys carry no trace of
it), and its kernels (kernel_sets.VARLEN_PAGED_CASES) compiled with 0 spills."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fa4mlir.attention import varlen_paged as vp
from fa4mlir.attention.errors import (DTypeError, HeadDimError, HeadsRatioError, SeqlensError, ShapeError,
                                      UnsupportedFeatureError)
from fa4mlir.attention.plan import TensorRef
from fa4mlir.kernel_sets import VARLEN_PAGED_CASES, attention_varlen, prefill, varlen_paged
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels.common.fields import ConfigError
from fa4mlir.runtime import TensorInfo

H, HKV, D, PAGE, MAX_PAGES = 4, 2, 64, 16, 5


def _info(shape, dtype, strides=None, ptr=1 << 20):
    if strides is None:
        strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    return TensorInfo(ptr, tuple(shape), tuple(strides), dtype, "cuda")


def _infos(total_q=30, batch=3, **over):
    infos = {"q": _info((total_q, H, D), "bf16"), "k": _info((20, PAGE, HKV, D), "bf16"),
             "v": _info((20, PAGE, HKV, D), "bf16"), "cu_seqlens_q": _info((batch + 1,), "i32"),
             "cu_seqlens_k": None, "seqused_k": _info((batch,), "i32"),
             "page_table": _info((batch, MAX_PAGES), "i32"), "sinks": None, "out": None, "lse": None}
    infos.update(over)
    return infos


def _check(infos=None, max_q=12, max_k=80, **kw):
    return vp.check_varlen_paged(infos or _infos(), max_q, max_k, **kw)


def test_problem_of_a_call():
    p = _check(causal=True)
    assert (p.batch, p.max_seqlen_q, p.total_q, p.heads, p.head_dim, p.dtype) == (3, 12, 30, H, D, "bf16")
    assert p.cache.paged and p.cache.page_size == PAGE and p.cache.capacity == PAGE * MAX_PAGES
    assert p.out_shape == (30, H, D) and p.lse_shape == (H, 30) and p.causal and p.seqused_k
    assert p.softmax_scale == pytest.approx(D ** -0.5)
    assert not _check(_infos(seqused_k=None)).seqused_k
    assert _check(max_q=0).is_empty and _check(_infos(total_q=0)).is_empty


def test_window_softcap_sinks_reach_the_problem():
    """(The decode kernel's variants: tests/test_kvcache_mask_api.py)"""
    p = _check(_infos(sinks=_info((H,), "f32")), causal=True, window_size=(8, 0), softcap=10.0)
    assert (p.window_size, p.attention_chunk, p.softcap, p.sinks) == ((8, 0), 0, 10.0, True)
    kv = p.kv_problem()
    assert (kv.window_size, kv.softcap, kv.sinks, kv.causal) == ((8, 0), 10.0, True, True)
    assert _check(attention_chunk=64).kv_problem().attention_chunk == 64


@pytest.mark.parametrize("over,err,match", [
    ({"cu_seqlens_k": _info((4,), "i32")}, SeqlensError, "cu_seqlens_k must be None with page_table"),
    ({"q": _info((1, 30, H, D), "bf16")}, ShapeError, "q must be 3-D"),
    ({"q": _info((30, H, 96), "bf16")}, HeadDimError, "head_dim 96"),
    ({"q": _info((30, 3, D), "bf16")}, HeadsRatioError, "multiple of kv_heads"),
    ({"k": _info((20, PAGE, HKV, D), "e4m3"), "v": _info((20, PAGE, HKV, D), "e4m3")}, UnsupportedFeatureError,
     "FP8"),
    ({"v": _info((20, 8, HKV, D), "bf16")}, ShapeError, "page sizes differ"),
    ({"page_table": _info((3, MAX_PAGES), "i64")}, DTypeError, "page_table must be int32"),
    ({"page_table": _info((2, MAX_PAGES), "i32")}, ShapeError, r"page_table must be \[batch, max_pages\]"),
    ({"seqused_k": _info((4,), "i32")}, SeqlensError, "seqused_k must have batch = 3"),
    ({"cu_seqlens_q": _info((4,), "i64")}, DTypeError, "cu_seqlens_q must be int32"),
    ({"out": _info((30, H, D), "f16")}, ShapeError, "out must be"),
    ({"lse": _info((30, H), "f32")}, ShapeError, "lse must be float32"),
])
def test_bad_arguments_are_typed_errors(over, err, match):
    with pytest.raises(err, match=match) as e:
        _check(_infos(**over))
    assert str(e.value).startswith("flash_attn_varlen_func:"), e.value


def test_plan_grid_and_launch_arguments():
    p = _check(causal=True)
    plan = vp.plan_for(p, 132)
    assert plan.gqa.packed and plan.gqa.m_tiles == 1 and plan.unsplit       # 12 queries x 2 heads: one M tile
    assert plan.grid == (1, HKV, 3)
    split_cfg, combine_cfg = vp.configs_for(plan)
    assert split_cfg.varlen_q and split_cfg.unsplit and combine_cfg is None
    assert split_cfg == replace(dec.default_config("bf16", D, PAGE, unsplit=True), varlen_q=True)
    cache_strides = {n: (PAGE * HKV * D, HKV * D, D) for n in ("k_cache", "v_cache")}
    args, none = vp.launch_args(plan, p, (H * D, D), MAX_PAGES, cache_strides, (H * D, D))
    assert none is None and list(args) == [n for n, _ in split_cfg.params]
    assert args["cu_seqlens_q"] == TensorRef("cu_seqlens_q") and args["out"] == TensorRef("out")
    assert args["seqlen_q"] == 30 and args["q_stride_b"] == 0 and args["out_stride_b"] == 0   # packed rows
    assert (args["q_stride_s"], args["q_stride_h"], args["causal"], args["seqlen_new"]) == (H * D, D, 1, 0)
    # several splits: the split kernel's partials and the combine over one packed batch of total_q rows
    split = replace(plan, num_splits=3)
    split_cfg, combine_cfg = vp.configs_for(split)
    assert not split_cfg.unsplit and combine_cfg == dec.CombineConfig("bf16", D)
    args, comb = vp.launch_args(split, p, (H * D, D), MAX_PAGES, cache_strides, (H * D, D))
    assert args["o_partial"] == TensorRef("o_partial") and args["num_splits"] == 3 and args["seqlen_q"] == 30
    assert (comb["total_rows"], comb["seqlen_q"], comb["heads"], comb["num_splits"]) == (30 * H, 30, H, 3)
    assert comb["out_stride_b"] == 0 and dec.combine_grid(vp.combine_plan(split, p)) == (30 * H // 4, 1, 1)
    # a long capacity and few CTAs split (the decode schedule's balance for paged caches)
    long = _check(_infos(page_table=_info((3, 1000), "i32")), max_q=12, max_k=16000)
    assert vp.plan_for(long, 132).num_splits > 1


def test_variant_key_name_and_contract():
    base = dec.default_config("bf16", 128, 64)
    var = replace(base, varlen_q=True)
    assert "varlen_q" not in base.key() and var.key()["varlen_q"] is True
    assert var.name() == base.name() + "_varlen"
    assert var.params == base.params + (("cu_seqlens_q", "ptr"),)
    assert replace(base, unsplit=True, varlen_q=True).params[-1] == ("cu_seqlens_q", "ptr")
    with pytest.raises(ConfigError, match="varlen_q"):
        replace(dec.default_config("bf16", 128, 64, "tensor"), varlen_q=True).validate()


def test_kernel_sets_hold_the_variants():
    names = {c.name() for _, c in attention_varlen() if hasattr(c, "name")}
    assert {c.name() for _, c in varlen_paged()} <= names
    assert {"attention_combine_sm90_bf16_d128", "attention_combine_sm90_bf16_d256"} <= names
    pre = {c.name() for _, c in prefill() if hasattr(c, "name")}
    assert "attention_decode_sm90_bf16_d128_n64_s3_paged_b64_varlen" in pre
    assert "attention_decode_sm90_bf16_d128_n64_s3_paged_b64_unsplit_varlen" in pre


def test_a_bundle_without_the_variant_names_the_sets_that_build_it(tmp_path):
    """No silent fallback: a bundle with the split varlen_q kernel but not its unsplit twin refuses
    the unsplit one as flash_attn_varlen_func, naming it and both sets that hold it."""
    from fa4mlir.artifacts import Bundle
    from fa4mlir.attention.errors import BundleError
    from fa4mlir.attention.plan import KernelSource
    split = replace(dec.default_config("bf16", 128, 64), varlen_q=True)
    entry = {"name": split.name(), "arch": "sm_90a", "config": split.key(), "cubin": "x.cubin"}
    missing = replace(split, unsplit=True)
    with pytest.raises(BundleError) as info:
        vp.kernel_for(KernelSource(Bundle(tmp_path, [entry])), missing)
    for words in (vp.VARLEN_API, missing.name(), "--set attention-varlen` or `--set prefill`"):
        assert words in str(info.value)


@pytest.mark.parametrize("case", VARLEN_PAGED_CASES, ids=lambda c: f"{c[0]}-d{c[1]}-page{c[2]}")
@pytest.mark.parametrize("unsplit", [False, True], ids=["split", "unsplit"])
def test_varlen_q_kernels_compile_without_spills(case, unsplit):
    from fa4mlir.compiler import compile_kernel
    cfg = replace(dec.default_config(*case, unsplit=unsplit), varlen_q=True)
    r = compile_kernel(dec.KERNEL, cfg).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"], r


def test_run_binds_every_argument_of_its_launches(monkeypatch):
    """varlen_paged.run with the driver and the kernels stubbed (CPU torch tensors): the launches,
    grids and bound arguments of an unsplit and of a split call."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    launched = []

    class Kernel:
        def __init__(self, cfg):
            self.cfg = cfg

        def launch(self, grid, args, stream):
            launched.append((self.cfg, grid, args))
    monkeypatch.setattr(vp, "device_info", lambda: SimpleNamespace(num_sms=132))
    monkeypatch.setattr(vp, "resolve_stream", lambda *a: 0)
    monkeypatch.setattr(vp, "kernel_for", lambda source, cfg: Kernel(cfg))
    bf = torch.bfloat16
    tensors = {"q": torch.zeros(30, H, D, dtype=bf), "k": torch.zeros(20, PAGE, HKV, D, dtype=bf),
               "v": torch.zeros(20, PAGE, HKV, D, dtype=bf), "cu_seqlens_q": torch.zeros(4, dtype=torch.int32),
               "seqused_k": None, "page_table": torch.zeros(3, MAX_PAGES, dtype=torch.int32),
               "out": torch.zeros(30, H, D, dtype=bf), "lse": torch.zeros(H, 30)}
    problem = _check(_infos(seqused_k=None), causal=True)
    vp.run(tensors, problem, None)
    (cfg, grid, args), = launched
    assert cfg.varlen_q and cfg.unsplit and grid == (1, HKV, 3)
    assert args["cu_seqlens_q"] is tensors["cu_seqlens_q"] and args["out"] is tensors["out"]
    assert args["k_cache"] is tensors["k"] and args["page_table"] is tensors["page_table"]
    assert torch.equal(args["cache_seqlens"], torch.full((3,), PAGE * MAX_PAGES, dtype=torch.int32))  # no seqused_k
    # a capacity long enough to split: the split kernel into -inf LSE partials, then the combine
    launched.clear()
    tensors.update(page_table=torch.zeros(3, 1000, dtype=torch.int32), seqused_k=torch.ones(3, dtype=torch.int32))
    problem = _check(_infos(page_table=_info((3, 1000), "i32")), causal=True)
    vp.run(tensors, problem, None)
    (split_cfg, grid, args), (combine_cfg, cgrid, cargs) = launched
    splits = args["num_splits"]
    assert not split_cfg.unsplit and splits > 1 and grid == (splits, HKV, 3)
    assert args["cache_seqlens"] is tensors["seqused_k"] and args["o_partial"] is cargs["o_partial"]
    assert tuple(args["o_partial"].shape) == (splits, 30, H, D) and torch.isneginf(args["lse_partial"]).all()
    assert combine_cfg == dec.CombineConfig("bf16", D) and cgrid == (30 * H // 4, 1, 1)
    assert cargs["out"] is tensors["out"] and cargs["lse"] is tensors["lse"]
