"""Deviceless: window_size, attention_chunk, softcap and sinks in flash_attn_with_kvcache and
flash_attn_varlen_func(page_table=): the decode kernel's compile-time variants (DecodeConfig's
window_left / window_right / chunk / softcap / sinks, CombineConfig.sinks) — canonical mask fields,
keys and names (the default kernels' unchanged), contracts, what a plan picks split and unsplit (the
sinks enter once), launch arguments, the live range that sizes the split count — and the typed
errors before any launch."""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir.attention import kvcache as kc
from fa4mlir.attention import varlen_paged as vp
from fa4mlir.attention.errors import ArgumentTypeError, DTypeError, MaskError, ShapeError, SoftcapError
from fa4mlir.attention.kvcache_call import configs_for
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels.common.constants import LOG2E
from fa4mlir.kernels.common.fields import ConfigError
from fa4mlir.runtime import TensorInfo
from fa4mlir.testing import raises

PTR = 1 << 20


def info(shape, dtype="bf16"):
    strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    return TensorInfo(PTR, tuple(shape), strides, dtype, "cuda")


def _problem(page_size=16, seqlen_q=2, heads=8, kv_heads=2, num_splits=None, capacity=320, **mods):
    q = info((3, seqlen_q, heads, 128))
    if page_size is None:
        cache, table = info((3, capacity, kv_heads, 128)), None
    else:
        cache, table = info((50, page_size, kv_heads, 128)), info((3, capacity // page_size), "i32")
    p = kc.check_kvcache_inputs(q, cache, cache, info((3,), "i32"), table)
    return p.with_options(causal=mods.pop("causal", True), softmax_scale=0.1, num_splits=num_splits, return_lse=True,
                          **mods)


def test_default_keys_and_names_carry_no_new_field():
    for cfg in (dec.default_config("bf16", 128, None), dec.default_config("bf16", 64, 16, unsplit=True)):
        assert not {"window_left", "window_right", "chunk", "softcap", "sinks"} & set(cfg.key())
        assert not cfg.windowed and cfg.params == (dec.UNSPLIT_PARAMS if cfg.unsplit else dec.SPLIT_PARAMS)
    comb = dec.CombineConfig("bf16", 128)
    assert "sinks" not in comb.key() and comb.name() == "attention_combine_sm90_bf16_d128"
    assert comb.params == dec.COMBINE_PARAMS


def test_variant_names_keys_and_contracts():
    cfg = dec.default_config("bf16", 128, 64, unsplit=True, window_left=127, softcap=True, sinks=True).validate()
    assert cfg.name().endswith("_unsplit_wl127_softcap_sink") and cfg.windowed
    assert cfg.key()["window_left"] == 127 and cfg.key()["sinks"] and "window_right" not in cfg.key()
    assert cfg.params == dec.UNSPLIT_PARAMS + (("softcap_scale", "f32"), ("sinks", "ptr"))
    chunk = dec.default_config("bf16", 128, None, chunk=256).validate()
    assert chunk.name().endswith("_contig_chunk256") and chunk.windowed
    comb = dec.CombineConfig("bf16", 128, sinks=True).validate()
    assert comb.name().endswith("_sink") and comb.params == dec.COMBINE_PARAMS + (("sinks", "ptr"),)


def test_config_errors():
    raises(ConfigError, ["sinks enter once", "unsplit"], dec.DecodeConfig(sinks=True).validate)
    raises(ConfigError, ["causal is a launch argument"], dec.DecodeConfig(window_left=5, window_right=0).validate)
    raises(ConfigError, ["causal is a launch argument"], dec.DecodeConfig(window_right=0).validate)
    raises(ConfigError, [">= -1"], dec.DecodeConfig(window_left=-2).validate)


@pytest.mark.parametrize("causal,window,chunk,want", [
    (True, (-1, -1), 0, (True, -1, -1, 0)),
    (True, (127, 0), 0, (True, 127, -1, 0)),
    (True, (127, 5), 0, (True, 127, -1, 0)),          # causal bounds the right side at 0
    (False, (-1, 0), 0, (True, -1, -1, 0)),           # window (-1, 0) is causal
    (False, (20, 0), 0, (True, 20, -1, 0)),
    (False, (20, 3), 0, (False, 20, 3, 0)),
    (True, (-1, -1), 64, (True, -1, -1, 64)),
])
def test_decode_mask_is_canonical(causal, window, chunk, want):
    flag, fields = dec.decode_mask(causal, window, chunk)
    assert (flag, fields["window_left"], fields["window_right"], fields["chunk"]) == want
    dec.DecodeConfig(**fields).validate()


@pytest.mark.parametrize("num_splits", [1, 3])
def test_plan_picks_the_variants_and_sinks_enter_once(num_splits):
    plan = kc.plan_problem(_problem(num_splits=num_splits, window_size=(100, 0), softcap=20.0, sinks=True), 132)
    cfg, comb = configs_for(plan)
    assert (cfg.window_left, cfg.window_right, cfg.chunk, cfg.softcap) == (100, -1, 0, True)
    if num_splits == 1:
        assert cfg.unsplit and cfg.sinks and comb is None
    else:
        assert not cfg.unsplit and not cfg.sinks and comb.sinks
    refs = {n: n for n, _ in cfg.params if _ in ("ptr", "tma")} | {"o_partial": "o", "lse_partial": "l", "out": "out",
                                                                    "lse": "lse", "sinks": "sinks"}
    args = dec.split_launch_args(plan, refs, (2 * 8 * 128, 8 * 128, 128), 20)
    assert list(args) == [n for n, _ in cfg.params]
    assert args["causal"] == 1 and args["softcap_scale"] == pytest.approx(0.1 / 20.0)
    assert args["scale_log2"] == pytest.approx(20.0 * LOG2E)
    assert ("sinks" in args) == (num_splits == 1)
    if comb is not None:
        cargs = dec.combine_launch_args(plan, {n: n for n, _ in comb.params}, (1, 1, 1))
        assert list(cargs) == [n for n, _ in comb.params] and cargs["sinks"] == "sinks"


def test_runtime_causal_comes_from_the_window():
    plan = kc.plan_problem(_problem(num_splits=1, causal=False, window_size=(8, 0)), 132)
    cfg, _ = configs_for(plan)
    args = dec.split_launch_args(plan, {n: n for n, k in cfg.params if k in ("ptr", "tma")}, (1, 1, 1), 20)
    assert args["causal"] == 1 and (cfg.window_left, cfg.window_right) == (8, -1)
    plan = kc.plan_problem(_problem(num_splits=1, causal=False), 132)
    assert not configs_for(plan)[0].windowed


def test_a_left_window_sizes_the_splits_by_its_live_keys():
    full = kc.plan_problem(_problem(page_size=None, heads=8, kv_heads=8, seqlen_q=1, capacity=65536), 132)
    windowed = kc.plan_problem(_problem(page_size=None, heads=8, kv_heads=8, seqlen_q=1, capacity=65536,
                                        window_size=(127, 0)), 132)
    assert windowed.problem.live_keys == 128 and full.problem.live_keys == 65536
    assert windowed.num_splits < full.num_splits
    chunk = _problem(page_size=None, seqlen_q=4, capacity=65536, attention_chunk=256)
    assert chunk.live_keys == 260


class CAI:
    """A CUDA array (``__cuda_array_interface__`` v3) with no memory behind it."""

    def __init__(self, shape, typestr="<f2"):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (PTR, False),
                                         "strides": None, "version": 3}


@pytest.mark.parametrize("kw,err,words", [
    ({"window_size": (1, 2, 3)}, MaskError, ["window_size must have 2 entries"]),
    ({"window_size": (-2, 0)}, MaskError, [">= -1"]),
    ({"window_size": 5}, ArgumentTypeError, ["window_size"]),
    ({"attention_chunk": -1}, MaskError, ["attention_chunk"]),
    ({"softcap": -1.0}, SoftcapError, ["softcap"]),
    ({"softcap": "x"}, ArgumentTypeError, ["softcap must be a number"]),
    ({"sinks": CAI((4,), "<f4")}, ShapeError, ["sinks must have shape [heads] = (8,)"]),
    ({"sinks": CAI((8,), "<f2")}, DTypeError, ["sinks must be float32"]),
])
def test_kvcache_entry_point_typed_errors_before_any_launch(kw, err, words):
    import fa4mlir
    q, cache = CAI((2, 1, 8, 128)), CAI((10, 16, 2, 128))
    seqlens, table = CAI((2,), "<i4"), CAI((2, 4), "<i4")
    raises(err, ["flash_attn_with_kvcache:", *words], fa4mlir.flash_attn_with_kvcache, q, cache, cache, seqlens,
           table, **kw)


def _varlen_infos(**over):
    infos = {"q": info((30, 4, 64)), "k": info((20, 16, 2, 64)), "v": info((20, 16, 2, 64)),
             "cu_seqlens_q": info((4,), "i32"), "cu_seqlens_k": None, "seqused_k": info((3,), "i32"),
             "page_table": info((3, 5), "i32"), "sinks": None, "out": None, "lse": None}
    infos.update(over)
    return infos


def test_varlen_page_table_variants_and_typed_errors():
    p = vp.check_varlen_paged(_varlen_infos(sinks=info((4,), "f32")), 12, 80, causal=True, window_size=(48, -1),
                              softcap=5.0)
    for num_sms, unsplit in ((132, True), (1, None)):
        plan = vp.plan_for(p, num_sms)
        cfg, comb = vp.configs_for(plan)
        assert cfg.varlen_q and cfg.window_left == 48 and cfg.softcap and cfg.sinks == plan.unsplit
        assert (comb is None) == plan.unsplit and (comb is None or comb.sinks)
    raises(SoftcapError, ["flash_attn_varlen_func:", "softcap"], vp.check_varlen_paged, _varlen_infos(), 12, 80,
           softcap=-2.0)
    raises(ShapeError, ["flash_attn_varlen_func:", "sinks must have shape"], vp.check_varlen_paged,
           _varlen_infos(sinks=info((3,), "f32")), 12, 80)
    raises(DTypeError, ["flash_attn_varlen_func:", "sinks must be float32"], vp.check_varlen_paged,
           _varlen_infos(sinks=info((4,), "bf16")), 12, 80)


def test_mask_sets_hold_what_the_gpu_tests_pick():
    from fa4mlir import kernel_sets as ks
    names = {c.name() for _, c in ks.configs(["decode"])}
    varlen = {c.name() for _, c in ks.configs(["attention-varlen"]) if hasattr(c, "name")}
    for cases, held, varlen_q in ((ks.DECODE_MASK_CASES, names, False), (ks.VARLEN_PAGED_MASK_CASES, varlen, True)):
        for dtype, d, page, causal, window, chunk, softcap, sinks in cases:
            for num_splits in (1, 3):
                p = _problem(page_size=page, num_splits=num_splits, causal=causal, window_size=window,
                             attention_chunk=chunk, softcap=5.0 if softcap else 0.0, sinks=sinks)
                p = type(p)(**{**p.__dict__, "dtype": dtype, "head_dim": d})
                cfg, comb = configs_for(kc.plan_problem(p, 132))
                if varlen_q:
                    from dataclasses import replace
                    cfg = replace(cfg, varlen_q=True)
                assert cfg.name() in held, cfg.name()
                assert comb is None or comb.name() in held, comb.name()


def test_fp8_cache_with_a_mask_or_modifier_is_refused_before_launch():
    from fa4mlir.attention.errors import UnsupportedFeatureError
    q, cache = info((3, 1, 8, 128)), info((3, 320, 2, 128), "e4m3")
    p = kc.check_kvcache_inputs(q, cache, cache, info((3,), "i32"), k_scale=info((1,), "f32"),
                                v_scale=info((1,), "f32"))
    for mods in ({"window_size": (64, 0)}, {"softcap": 5.0}, {"sinks": True}, {"attention_chunk": 128}):
        plan = kc.plan_problem(p.with_options(causal=True, softmax_scale=0.1, num_splits=1, return_lse=True, **mods), 132)
        raises(UnsupportedFeatureError, ["flash_attn_with_kvcache:", "FP8", "not built"], configs_for, plan)
    plan = kc.plan_problem(p.with_options(causal=True, softmax_scale=0.1, num_splits=1, return_lse=True), 132)
    assert configs_for(plan)[0].fp8
