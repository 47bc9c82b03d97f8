"""Deviceless tests of fa4mlir.attention: every input check, kernel selection, the launch contract
(the tile orders and planning math of attention_sm90_config: test_attention_config.py).

The checks are pure functions of runtime.TensorInfo, so most cases build TensorInfo directly (bf16
has no numpy dtype); a few go through flash_attn_func with numpy arrays (DLPack, device 'cpu'),
which must fail with a typed error before any CUDA call.
"""
import math
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fa4mlir import attention, kernel_sets
from fa4mlir.attention import (AttnProblem, DeviceError, DTypeError, EmptyInputError, FlashAttnInputError,
                               HeadDimError, HeadsRatioError, LayoutError, ScaleError, ShapeError,
                               check_device_context, check_devices, check_inputs, check_outputs,
                               check_scale, flash_attn_func, select_entry)
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels.common import fastdiv
from fa4mlir.artifacts import Bundle, KernelArtifact, write_bundle
from fa4mlir.attention.plan import dense_launch
from fa4mlir.driver import DeviceInfo
from fa4mlir.testing import BLOCK_MLIR, raises
from tests._tensor_infos import PTR, info

REPO_ROOT = Path(__file__).resolve().parents[1]
Q_SHAPE, KV_SHAPE = (2, 100, 8, 128), (2, 60, 2, 128)


# ----------------------------------------------------------------------------------------------
# check_inputs: good inputs
# ----------------------------------------------------------------------------------------------

def test_good_inputs_give_dims():
    dims = check_inputs(info(Q_SHAPE), info(KV_SHAPE), info(KV_SHAPE))
    assert dims == AttnProblem(batch=2, seqlen_q=100, seqlen_k=60, heads=8, kv_heads=2, head_dim=128, dtype="bf16")
    assert dims.heads_per_kv == 4
    assert dims.out_shape == (2, 100, 8, 128) and dims.lse_shape == (2, 8, 100)


def test_strided_bhsd_layout_is_accepted():
    """q as a [B, H, S, D] tensor seen through transpose(1, 2): not contiguous, but TMA-addressable."""
    b, h, s, d = 2, 8, 100, 64
    q = info((b, s, h, d), "f16", strides=(h * s * d, d, s * d, 1))
    k = info((b, 60, 8, d), "f16", strides=(8 * 60 * d, d, 60 * d, 1))
    assert check_inputs(q, k, k).seqlen_k == 60


def test_size_one_dims_may_have_any_stride():
    q = info((1, 1, 1, 64), strides=(5, 3, 1, 1))  # torch gives size-1 dims arbitrary strides
    assert check_inputs(q, q, q).heads_per_kv == 1
    flipped = info((1, 1, 2, 64), strides=(-7, -128, 64, 1))  # negative too: a size-1 dim is never stepped
    assert check_inputs(flipped, flipped, flipped).heads == 2


def test_mqa_is_accepted():
    assert check_inputs(info((1, 7, 8, 256), "f16"), info((1, 3, 1, 256), "f16"),
                        info((1, 3, 1, 256), "f16")).heads_per_kv == 8


# ----------------------------------------------------------------------------------------------
# check_inputs: one case per rule
# ----------------------------------------------------------------------------------------------

def test_dtype_not_bf16_or_f16():
    raises(DTypeError, ["q has dtype f32", "('bf16', 'f16')", ".to(torch.bfloat16)"],
           check_inputs, info(Q_SHAPE, "f32"), info(KV_SHAPE, "f32"), info(KV_SHAPE, "f32"))


def test_mixed_dtypes():
    raises(DTypeError, ["share one dtype", "q=bf16, k=f16, v=bf16"],
           check_inputs, info(Q_SHAPE), info(KV_SHAPE, "f16"), info(KV_SHAPE))


def test_dtype_error_is_a_type_error_and_an_input_error():
    assert issubclass(DTypeError, TypeError) and issubclass(DTypeError, FlashAttnInputError)
    for exc in attention.ERRORS:
        assert issubclass(exc, FlashAttnInputError) and issubclass(exc, ValueError)


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_rank_not_4(which):
    shapes = {"q": Q_SHAPE, "k": KV_SHAPE, "v": KV_SHAPE}
    shapes[which] = (shapes[which][0], shapes[which][1], shapes[which][2] * shapes[which][3])
    raises(ShapeError, [f"{which} must be 4-D", str(shapes[which])],
           check_inputs, *(info(shapes[n]) for n in "qkv"))


@pytest.mark.parametrize("which", ["k", "v"])
def test_batch_mismatch(which):
    kv = {"k": KV_SHAPE, "v": KV_SHAPE}
    kv[which] = (3,) + KV_SHAPE[1:]
    raises(ShapeError, ["batch differs", "q has batch 2", f"{which} has batch 3"],
           check_inputs, info(Q_SHAPE), info(kv["k"]), info(kv["v"]))


def test_head_dim_mismatch():
    kv = KV_SHAPE[:3] + (64,)
    raises(ShapeError, ["head_dim differs", "q has head_dim 128", "k has head_dim 64"],
           check_inputs, info(Q_SHAPE), info(kv), info(kv))


@pytest.mark.parametrize("v_shape", [(2, 61, 2, 128), (2, 60, 4, 128)], ids=["seqlen", "heads"])
def test_k_v_shapes_differ(v_shape):
    raises(ShapeError, ["k and v must have the same shape", f"k {KV_SHAPE}", f"v {v_shape}"],
           check_inputs, info(Q_SHAPE), info(KV_SHAPE), info(v_shape))


def test_head_dim_unsupported_suggests_padding():
    raises(HeadDimError, ["head_dim 112 is not supported", "(64, 96, 128, 192, 256)",
                          "zero-pad q, k, v to head_dim 128", f"softmax_scale={112 ** -0.5:.6g}"],
           check_inputs, info((1, 8, 2, 112)), info((1, 8, 2, 112)), info((1, 8, 2, 112)))


def test_head_dim_above_largest():
    err = raises(HeadDimError, ["head_dim 512 is not supported", "(64, 96, 128, 192, 256)"],
                 check_inputs, info((1, 8, 2, 512)), info((1, 8, 2, 512)), info((1, 8, 2, 512)))
    assert "zero-pad" not in str(err)


def test_heads_not_multiple_of_kv_heads():
    kv = (2, 60, 3, 128)
    raises(HeadsRatioError, ["q has 8 heads", "k/v have 3", "multiple of kv_heads"],
           check_inputs, info(Q_SHAPE), info(kv), info(kv))


@pytest.mark.parametrize("which, dim, empty, keyless", [("q", 0, True, False), ("q", 1, True, False),
                                                       ("q", 2, True, False), ("k", 1, False, True)],
                         ids=["batch", "seqlen_q", "heads", "seqlen_k"])
def test_empty_problems_are_accepted(which, dim, empty, keyless):
    """batch, seqlen_q or heads 0: nothing to compute; seqlen_k 0: every row sees no key (out = 0,
    lse = +inf). Neither is an error (FlashAttention returns those); an empty tensor may be NULL."""
    shapes = {"q": list(Q_SHAPE), "k": list(KV_SHAPE), "v": list(KV_SHAPE)}
    shapes[which][dim] = 0
    if which == "k":
        shapes["v"][dim] = 0
    if which == "q" and dim == 0:
        shapes["k"][0] = shapes["v"][0] = 0
    problem = check_inputs(*(info(shapes[n], ptr=0 if n == which else PTR) for n in "qkv"))
    assert (problem.is_empty, problem.sees_no_key) == (empty, keyless)


def test_head_dim_or_kv_heads_zero_is_an_empty_input_error():
    raises(EmptyInputError, ["head_dim is 0"], check_inputs, *(info((1, 8, 2, 0)),) * 3)
    raises(EmptyInputError, ["kv_heads = 0 but q has 8 heads"],
           check_inputs, info(Q_SHAPE), info((2, 60, 0, 128)), info((2, 60, 0, 128)))


def test_negative_size_and_null_pointer():
    raises(ShapeError, ["q has a negative size", "(2, -100, 8, 128)"],
           check_inputs, info((2, -100, 8, 128)), info(KV_SHAPE), info(KV_SHAPE))
    raises(LayoutError, ["k has a NULL data pointer", "only an empty one may be NULL"],
           check_inputs, info(Q_SHAPE), info(KV_SHAPE, ptr=0), info(KV_SHAPE))


def test_batch_above_grid_limit():
    raises(ShapeError, ["batch 70000", "65535"],
           check_inputs, info((70000, 4, 1, 64)), info((70000, 4, 1, 64)), info((70000, 4, 1, 64)))


# ----------------------------------------------------------------------------------------------
# Layout (TMA)
# ----------------------------------------------------------------------------------------------

def test_inner_stride_not_one():
    b, s, h, d = Q_SHAPE
    q = info(Q_SHAPE, strides=(s * h * d * 2, h * d * 2, d * 2, 2))  # like x[..., ::2]
    raises(LayoutError, ["q must have stride 1 along head_dim", "(204800, 2048, 256, 2)", "q.contiguous()"],
           check_inputs, q, info(KV_SHAPE), info(KV_SHAPE))


def test_stride_not_16_byte_multiple():
    b, s, h, d = KV_SHAPE
    k = info(KV_SHAPE, strides=(s * h * 130, h * 130, 130, 1))  # rows padded to 130 elements
    raises(LayoutError, ["k stride along heads is 130 elements = 260 bytes", "multiple of 16 bytes",
                         "8 bf16 elements"],
           check_inputs, info(Q_SHAPE), k, info(KV_SHAPE))


def test_data_pointer_not_16_byte_aligned():
    raises(LayoutError, ["v data pointer 0x7f0000000008", "not 16-byte aligned", "offset 8 bytes"],
           check_inputs, info(Q_SHAPE), info(KV_SHAPE), info(KV_SHAPE, ptr=PTR + 8))


def test_negative_stride():
    b, s, h, d = Q_SHAPE
    q = info(Q_SHAPE, strides=(s * h * d, -h * d, d, 1))
    raises(LayoutError, ["q has negative strides"], check_inputs, q, info(KV_SHAPE), info(KV_SHAPE))


def test_expanded_kv_heads_overlap():
    b, s, h, d = KV_SHAPE
    k = info(KV_SHAPE, strides=(s * d, d, 0, 1))  # k[:, :, None].expand(...): heads stride 0
    raises(LayoutError, ["k has stride 0 along heads", "pass k and v with kv_heads heads"],
           check_inputs, info(Q_SHAPE), k, info(KV_SHAPE))


def test_aliasing_strides_overlap():
    b, s, h, d = KV_SHAPE
    v = info(KV_SHAPE, strides=(s * h * d, d, d, 1))  # seqlen and heads step by the same row
    raises(LayoutError, ["v has overlapping strides", "dim seqlen (stride 128) aliases dim heads"],
           check_inputs, info(Q_SHAPE), info(KV_SHAPE), v)


# ----------------------------------------------------------------------------------------------
# out and lse
# ----------------------------------------------------------------------------------------------

DIMS = AttnProblem(2, 100, 60, 8, 2, 128, "bf16")
LSE_SHAPE = (2, 8, 100)


def test_good_outputs_pass():
    check_outputs(DIMS, info(Q_SHAPE), info(LSE_SHAPE, "f32"))


@pytest.mark.parametrize("out, lse, exc, words", [
    (info((2, 100, 8, 64)), info(LSE_SHAPE, "f32"), ShapeError, ["out must have q's shape (2, 100, 8, 128)"]),
    (info(Q_SHAPE, "f16"), info(LSE_SHAPE, "f32"), DTypeError, ["out must have q's dtype bf16, got f16"]),
    (info(Q_SHAPE, ptr=PTR + 2), info(LSE_SHAPE, "f32"), LayoutError, ["out data pointer", "not 16-byte aligned"]),
    (info(Q_SHAPE), info(LSE_SHAPE, "bf16"), DTypeError, ["lse must be float32, got bf16"]),
    (info(Q_SHAPE), info((2, 100, 8), "f32"), ShapeError,
     ["lse must have shape [batch, heads, seqlen_q] = (2, 8, 100)"]),
    (info(Q_SHAPE), info(LSE_SHAPE, "f32", strides=(800, 1, 8)), LayoutError,
     ["lse must be contiguous (strides (800, 100, 1))", "wrong along heads, seqlen_q"]),
], ids=["out-shape", "out-dtype", "out-ptr", "lse-dtype", "lse-shape", "lse-strides"])
def test_bad_outputs(out, lse, exc, words):
    raises(exc, words, check_outputs, DIMS, out, lse)


# ----------------------------------------------------------------------------------------------
# Devices and scale
# ----------------------------------------------------------------------------------------------

def test_devices_agree():
    assert check_devices([("q", "cuda", 1), ("k", "cuda", 1), ("v", "cuda", None)]) == 1
    assert check_devices([("q", "cuda", None), ("k", "cuda_managed", None)]) is None


def test_non_cuda_tensor():
    raises(DeviceError, ["k is on device 'cpu'", "expected a CUDA tensor", "k.cuda()"],
           check_devices, [("q", "cuda", 0), ("k", "cpu", 0), ("v", "cuda", 0)])


def test_tensors_on_different_devices():
    raises(DeviceError, ["different devices", "k on cuda:1", "q on cuda:0"],
           check_devices, [("q", "cuda", 0), ("k", "cuda", 1), ("v", "cuda", 0)])


@pytest.mark.parametrize("cc", [(8, 0), (10, 0), (12, 0)])
def test_device_not_sm90(cc):
    raises(DeviceError, [f"device 0 is sm_{cc[0]}{cc[1]}", "needs an sm_90 GPU"], check_device_context, 0, 0, cc)


def test_tensors_not_on_context_device():
    raises(DeviceError, ["tensors are on cuda:1", "context is on device 0", "torch.cuda.set_device(1)"],
           check_device_context, 1, 0, (9, 0))


def test_sm90_context_device_passes():
    check_device_context(0, 0, (9, 0))
    check_device_context(None, 3, (9, 0))


def test_scale_default_and_explicit():
    assert check_scale(None, 128) == 128 ** -0.5
    assert check_scale(0.5, 64) == 0.5
    assert check_scale(np.float32(0.25), 64) == 0.25
    assert check_scale(2, 64) == 2.0


@pytest.mark.parametrize("bad", [0.0, -0.125, math.nan, math.inf, "0.1", True, [0.1], 1e300, 1e-300, 10**400])
def test_bad_softmax_scale(bad):
    raises(ScaleError, ["softmax_scale must be a finite positive number in [2^-64, 2^64]", f"got {bad!r}",
                        "1/sqrt(head_dim) = 0.125"], check_scale, bad, 64)


def test_softmax_scale_range_ends_are_accepted():
    assert check_scale(attention.MIN_SOFTMAX_SCALE, 64) == 2.0**-64
    assert check_scale(attention.MAX_SOFTMAX_SCALE, 64) == 2.0**64


# ----------------------------------------------------------------------------------------------
# flash_attn_func end to end on numpy arrays: typed errors before any CUDA call
# ----------------------------------------------------------------------------------------------

def aligned(shape, dtype=np.float16, offset_elems=0):
    """A C-contiguous numpy array whose data starts offset_elems past a 64-byte boundary."""
    n, item = int(np.prod(shape)), np.dtype(dtype).itemsize
    raw = np.zeros(n + 64, dtype)
    start = (-raw.ctypes.data % 64) // item + offset_elems
    return raw[start:start + n].reshape(shape)


def test_api_rejects_cpu_arrays_with_device_error():
    q, k, v = aligned((1, 16, 2, 64)), aligned((1, 8, 2, 64)), aligned((1, 8, 2, 64))
    raises(DeviceError, ["q is on device 'cpu'", "expected a CUDA tensor"], flash_attn_func, q, k, v)


def test_api_checks_inputs_before_devices():
    q, k = aligned((1, 16, 2, 64), np.float32), aligned((1, 8, 2, 64), np.float32)
    raises(DTypeError, ["q has dtype f32"], flash_attn_func, q, k, k)
    q, k = aligned((1, 16, 2, 64), offset_elems=1), aligned((1, 8, 2, 64))
    raises(LayoutError, ["q data pointer", "offset 2 bytes"], flash_attn_func, q, k, k)
    q = aligned((1, 16, 2, 64))
    raises(ScaleError, ["got -1.0"], flash_attn_func, q, k, k, softmax_scale=-1.0)


def test_api_rejects_non_tensor():
    k = aligned((1, 8, 2, 64))
    raises(attention.ArgumentTypeError, ["q:", "expected a tensor-like", "list"], flash_attn_func, [[1.0]], k, k)


def test_api_checks_given_out_device():
    q, k = aligned((1, 16, 2, 64)), aligned((1, 8, 2, 64))
    raises(DeviceError, ["q is on device 'cpu'"], flash_attn_func, q, k, k, out=aligned((1, 16, 2, 64)))


# ----------------------------------------------------------------------------------------------
# Kernel selection and launch contract
# ----------------------------------------------------------------------------------------------

def entry(dtype="bf16", head_dim=128, causal=False, arch="sm_90a", key="k0", **over):
    """A bundle manifest entry as the compiler writes it: the entry name carries the config, the
    config names the kernel."""
    cfg = {**acfg.default_config(dtype, head_dim, causal).key(), "cubin_backend": "ptxas", **over}
    name = f"{cfg['kernel']}_{dtype}_d{head_dim}{'_causal' * causal}_{cfg['bm']}x{cfg['bn']}_s{cfg['stages']}"
    return {"name": name, "arch": arch, "key": key.ljust(64, "0"), "config": cfg}


@pytest.mark.parametrize("sets", [["gpu-tests"], ["attention-tiles"], ["bench"], ["gpu-tests", "bench"]])
def test_every_shipped_bundle_selects_one_kernel_per_case(sets):
    """A bundle built from these sets (defaults next to variants) resolves every (dtype, head_dim,
    causal) flash_attn_func can take to exactly its default_config kernel."""
    from fa4mlir import kernel_sets
    entries = [{"name": f"k{i}", "arch": "sm_90a", "key": f"{i:064d}",
                "config": {**cfg.key(), "cubin_backend": (rest[0] if rest else {}).get("cubin_backend", "ptxas")}}
               for i, (name, cfg, *rest) in enumerate(kernel_sets.configs(sets)) if name == acfg.KERNEL]
    cases = {(e["config"]["dtype"], e["config"]["head_dim"], e["config"]["causal"]) for e in entries}
    assert cases
    for dtype, head_dim, causal in cases:
        for seqlen_k in (None, 1, 1024, 1025, 2048, 2049, 16384):
            picked = select_entry(entries, dtype, head_dim, causal, seqlen_k=seqlen_k)
            want = acfg.default_config(dtype, head_dim, causal, seqlen_k)
            assert all(picked["config"][k] == getattr(want, k) for k in acfg.TILE_FIELDS), (picked, want)


def test_short_key_sequences_take_the_persistent_tiles():
    assert set(acfg.SHORT_TILES) == set(acfg.SHORT_SEQLEN_K)
    assert all(limit >= 1024 for limit in acfg.SHORT_SEQLEN_K.values())
    for (head_dim, causal), tiles in acfg.SHORT_TILES.items():
        long = acfg.default_config("bf16", head_dim, causal)
        assert not long.persistent
        limit = acfg.SHORT_SEQLEN_K[(head_dim, causal)]
        for seqlen_k in (1, 1000, limit):
            short = acfg.default_config("bf16", head_dim, causal, seqlen_k)
            assert short.persistent and all(getattr(short, k) == v for k, v in tiles.items())
            assert acfg.is_short(head_dim, causal, seqlen_k)
        assert acfg.default_config("bf16", head_dim, causal, limit + 1) == long
        assert not acfg.is_short(head_dim, causal, limit + 1) and not acfg.is_short(head_dim, causal, None)
        assert acfg.default_configs("f16", head_dim, causal) == [
            acfg.default_config("f16", head_dim, causal), acfg.default_config("f16", head_dim, causal, 1)]
    # no persistent tile fits D256's SMEM: one config at every length
    assert acfg.default_configs("bf16", 256, True) == [acfg.default_config("bf16", 256, True, 1)]
    # D128 causal is persistent at every length: one config
    assert [c.persistent for c in acfg.default_configs("bf16", 128, True)] == [True]
    # a bundle without the short kernel still serves short sequences, with the long one
    short = {k: getattr(acfg.default_config("bf16", 128, False, 1), k) for k in acfg.TILE_FIELDS}
    assert select_entry([entry(key="long"), entry(key="bn64", bn=64)], "bf16", 128, False,
                        seqlen_k=100)["key"].startswith("long")
    both = [entry(key="long"), entry(key="short", **short), entry(key="bn64", bn=64)]
    assert select_entry(both, "bf16", 128, False, seqlen_k=100)["key"].startswith("short")
    past = acfg.SHORT_SEQLEN_K[(128, False)] + 1
    assert select_entry(both, "bf16", 128, False, seqlen_k=past)["key"].startswith("long")
    assert select_entry(both, "bf16", 128, False)["key"].startswith("long")


def launch(problem, num_sms=0, l2_bytes=acfg.L2_BYTES, **config):
    """The dense launch (grid, named args) of AttnConfig(**config) for `problem`; tensors by name."""
    cfg = acfg.AttnConfig(**config)
    return dense_launch(cfg, None, problem, DeviceInfo(0, (9, 0), num_sms, l2_bytes))


def test_persistent_launch_refuses_tile_counts_past_i32():
    dims = AttnProblem(batch=65535, seqlen_q=2**20, seqlen_k=64, heads=128, kv_heads=128, head_dim=64, dtype="bf16",
                       softmax_scale=0.125)
    raises(ShapeError, ["persistent", "too many"], launch, dims, 132, bm=128, head_dim=64, persistent=True)
    assert launch(dims, 132, bm=128, head_dim=64).grid == (8192, 128, 65535)
    raises(ShapeError, ["causal kernel's grid", "too many"], launch, dims, 132, bm=128, causal=True, head_dim=64)


def test_select_single_entry():
    entries = [entry(causal=False, key="a"), entry(causal=True, key="b"), entry(head_dim=64, key="c"),
               entry(causal=True, arch="sm_100a", key="d"), entry(kernel="gemm_sm90", causal=True, key="e")]
    assert select_entry(entries, "bf16", 128, True)["key"].startswith("b")


def test_select_prefers_default_tiles_then_ptxas():
    entries = [entry(key="bn64", bn=64), entry(key="nvjit", cubin_backend="nvjitlink"), entry(key="ptxas"),
               entry(key="stages3", stages=3)]
    assert select_entry(entries, "bf16", 128, False)["key"].startswith("ptxas")
    only_variants = [entry(key="bn64", bn=64), entry(key="nvjit", cubin_backend="nvjitlink")]
    assert select_entry(only_variants, "bf16", 128, False)["key"].startswith("nvjit")


def test_select_prefers_default_softmax_knobs():
    """The attention-fa4-pieces variants (same tiles) sit next to the defaults in the gpu-tests
    bundle: flash_attn_func runs the default; older bundles' entries lack the knobs (= defaults).
    D128 causal, whose default knobs are all off (KNOBS), so that each variant differs from it."""
    def e128(**over):
        return entry(head_dim=128, causal=True, **over)
    assert not acfg.KNOBS.get((128, True, False)), "the case this test is about"
    pieces = dict(exp2_poly_stride=4, rescale_threshold=8.0)
    variants = [e128(key="poly", exp2_poly_stride=4), e128(key="lazy", rescale_threshold=8.0),
                e128(key="both", **pieces)]
    assert select_entry(variants + [e128(key="default")], "bf16", 128, True)["key"].startswith("default")
    assert select_entry([e128(key="default")] + variants, "bf16", 128, True)["key"].startswith("default")
    old = e128(key="old")
    for knob in pieces:
        del old["config"][knob]
    assert select_entry(variants + [old], "bf16", 128, True)["key"].startswith("old")
    # only a variant: it is what there is
    assert select_entry([e128(key="both", **pieces)], "bf16", 128, True)["key"].startswith("both")
    # default tiles still come first: a default-knob entry with other tiles loses to a variant
    assert select_entry([e128(key="bn64", bn=64), e128(key="both", **pieces)], "bf16", 128, True)["key"] \
        .startswith("both")


def test_select_narrows_by_the_knobs_of_the_tiles_it_fell_back_to():
    """KNOBS differ between a case's short (persistent) and long tiles (D128 non-causal: lazy
    rescale only on the long kernel). A bundle without the short kernel serves short sequences
    with the long one, narrowed by the long default's knobs: not ambiguous next to a pieces variant
    (the gpu-tests bundle once was, for the GPU suite's short D128 cases)."""
    long_cfg, short_cfg = acfg.default_config("bf16", 128, False), acfg.default_config("bf16", 128, False, 1)
    assert long_cfg.rescale_threshold != short_cfg.rescale_threshold, "the case this test is about"
    entries = [entry(key="long"), entry(key="pieces", exp2_poly_stride=4)]
    assert select_entry(entries, "bf16", 128, False, seqlen_k=100)["key"].startswith("long")
    short = {k: getattr(short_cfg, k) for k in (*acfg.TILE_FIELDS, *acfg.KNOB_FIELDS)}
    classic = {**short, "rescale_before_pv": False}
    with_short = entries + [entry(key="short", **short), entry(key="short-classic", **classic)]
    assert select_entry(with_short, "bf16", 128, False, seqlen_k=100)["key"].startswith("short")
    assert select_entry(with_short, "bf16", 128, False, seqlen_k=100)["key"] == "short".ljust(64, "0")
    assert select_entry(with_short, "bf16", 128, False)["key"].startswith("long")


def test_select_none_says_how_to_rebuild():
    raises(attention.BundleError, ["no attention_fwd_sm90 (sm_90a) kernel", "dtype=f16, head_dim=256, causal=True",
                         "--set attention"], select_entry, [entry()], "f16", 256, True)


def test_select_ambiguous():
    raises(attention.BundleError, ["2 attention_fwd_sm90 kernels", "remove the duplicates"],
           select_entry, [entry(key="x", bn=64), entry(key="y", bn=64, stages=3)], "bf16", 128, False)


def test_find_artifact_in_written_bundle(tmp_path):
    def art(e):
        return KernelArtifact(name=e["name"], arch=e["arch"], cubin=e["key"].encode(), block=(384, 1, 1),
                              key=e["key"], config=e["config"])
    entries = [entry(key="def128"), entry(key="bn64", bn=64), entry(head_dim=64, key="def64")]
    bundle = Bundle.open(write_bundle(tmp_path, [art(e) for e in entries]))
    found = attention.find_artifact(bundle, "bf16", 128, False)
    assert found.cubin.startswith(b"def128") and found.config["bn"] == acfg.default_config("bf16", 128, False).bn


def test_dense_launch_follows_the_contract():
    dims = AttnProblem(batch=2, seqlen_q=1000, seqlen_k=300, heads=8, kv_heads=2, head_dim=128, dtype="bf16",
                       softmax_scale=0.125)
    plain = launch(dims, bm=128)
    args = plain.args
    assert plain.grid == (8, 8, 2)  # ceil(1000 / 128) query tiles, heads, batch
    assert list(args) == [name for name, _ in acfg.LAUNCH_PARAMS]
    assert [args[n].name for n in ("q", "k", "v", "o", "lse")] == ["q", "k", "v", "o", "lse"]   # TensorRefs
    assert [args[n] for n in ("batch", "heads", "seqlen_q", "seqlen_k")] == [2, 8, 1000, 300]
    assert args["scale_log2"] == pytest.approx(0.125 * math.log2(math.e), rel=1e-15)

    def div(a, name):
        return (a[f"{name}_mul"], a[f"{name}_shr"])
    # divisors: the GQA group (8 // 2 = 4), the query tiles per head (8), the heads (8); then the
    # sections of a causal grid, unused here (shift 0, divisor 1)
    assert [div(args, n) for n in ("group", "tiles", "heads", "rest")] == [
        fastdiv.divisor(4), fastdiv.divisor(8), fastdiv.divisor(8), fastdiv.divisor(1)]
    assert args["section_shift"] == 0
    pers = launch(dims, bm=128, causal=True, persistent=True).args
    assert div(pers, "tiles") == fastdiv.divisor(4)  # causal persistent: by the pairs of query tiles per head
    causal = launch(dims, bm=128, causal=True, head_dim=128)
    assert causal.grid == (128, 1, 1) and div(causal.args, "tiles") == fastdiv.divisor(8)   # 1-D: 8 x 8 x 2 tiles
    # K and V of one KV head are 300 x 128 x 2 x 2 bytes: all 16 (head, batch) indices fit in one
    # section of the default 50 MiB's share (shift 4, no rest: divisor 1)
    assert (causal.args["section_shift"], div(causal.args, "rest")) == (4, fastdiv.divisor(1))
    # 800000 bytes of L2 leave 480000 for sections: the K and V of 3 KV heads (153600 bytes each). 8
    # consecutive heads of a group of 4 read at most 3 of them, 16 heads 5, so sections of 8, no rest
    assert acfg.SECTION_L2_SHARE == 0.6
    small = launch(dims, l2_bytes=800000, bm=128, causal=True, head_dim=128).args
    assert (small["section_shift"], div(small, "rest")) == (3, fastdiv.divisor(1))
    # a persistent kernel: a 1-D grid, one CTA per SM, never more CTAs than tiles (8 x 8 x 2 = 128)
    assert launch(dims, 132, bm=128, persistent=True).grid == (128, 1, 1)
    assert launch(dims, 100, bm=128, persistent=True).grid == (100, 1, 1)
    # a Plan binds its TensorRefs to the call's tensors
    assert plain.bind({"q": 1, "k": 2, "v": 3, "o": 4, "lse": 5})["lse"] == 5


def test_attention_bundle_set():
    entries = kernel_sets.attention()
    # 20 (dtype, head dim, causal), the short-sequence tiles of D64 and D128 non-causal, D64 causal, and
    # 4 of qk 192 / v 128
    assert len(entries) == 30
    assert {(c.dtype, c.head_dim, c.head_dim_v, c.causal) for _, c in entries} == {
        (dt, d, dv, c) for dt in ("bf16", "f16") for d, dv in ((64, 0), (96, 0), (128, 0), (192, 0), (256, 0),
                                                               (192, 128)) for c in (False, True)}
    for name, cfg in entries:   # compiled with the kernel's own options: ptxas
        assert name == "attention_fwd_sm90"
        assert cfg in (acfg.default_config(cfg.dtype, cfg.head_dim, cfg.causal, head_dim_v=cfg.head_dim_v),
                       acfg.default_config(cfg.dtype, cfg.head_dim, cfg.causal, 1, head_dim_v=cfg.head_dim_v))
    assert sum(c.persistent for _, c in entries) == 10     # D96 causal too


def test_attention_fa4_pieces_bundle_set():
    entries = kernel_sets.SETS["attention-fa4-pieces"]()
    assert [(c.dtype, c.head_dim, c.causal) for _, c in entries] == [
        ("bf16", 128, False), ("bf16", 128, True), ("f16", 64, True)]
    for name, cfg in entries:
        assert name == "attention_fwd_sm90"
        assert (cfg.exp2_poly_stride, cfg.rescale_threshold) == (4, 8.0)
        default = acfg.default_config(cfg.dtype, cfg.head_dim, cfg.causal)
        assert replace(cfg, exp2_poly_stride=0, rescale_threshold=default.rescale_threshold) == default
        # flash_attn_func keeps the default kernel when both are in a bundle
        manifest = [{"name": name, "arch": "sm_90a", "key": key.ljust(64, "0"),
                     "config": {**c.key(), "cubin_backend": "ptxas"}}
                    for key, c in (("pieces", cfg), ("default", acfg.default_config(cfg.dtype, cfg.head_dim,
                                                                                    cfg.causal)))]
        assert select_entry(manifest, cfg.dtype, cfg.head_dim, cfg.causal)["key"].startswith("default")


def test_gpu_tests_set_includes_attention():
    pytest.importorskip("fa4mlir.kernels.gemm_sm90", reason="the GEMM entries of gpu-tests need MLIR",
                        exc_type=ImportError)
    gpu = kernel_sets.configs(["gpu-tests"])
    assert all(e in gpu for e in kernel_sets.attention())
    assert all(e in gpu for e in kernel_sets.SETS["attention-fa4-pieces"]())
    assert all(e in gpu for e in kernel_sets.tile_variants())


def test_compile_options_resolve_without_touching_the_environment(monkeypatch):
    """The kernel's own backend (the attention kernel's honours setmaxnreg), the knob when the user
    sets it, an explicit option above both; the environment is read, never written."""
    from fa4mlir import compiler
    monkeypatch.delenv("FA4MLIR_CUBIN_BACKEND", raising=False)
    monkeypatch.delenv("FA4MLIR_DEBUG", raising=False)
    before = dict(os.environ)
    assert compiler.resolve_options(acfg.KERNEL).cubin_backend == "ptxas"
    assert compiler.resolve_options("attention_fwd_sm100").cubin_backend == "nvjitlink-lto"
    assert compiler.resolve_options("gemm_sm90").cubin_backend == "nvjitlink"
    monkeypatch.setenv("FA4MLIR_CUBIN_BACKEND", "ptxas")
    assert compiler.resolve_options(acfg.KERNEL).cubin_backend == "ptxas"
    assert compiler.resolve_options("gemm_sm90").cubin_backend == "ptxas"
    monkeypatch.setenv("FA4MLIR_CUBIN_BACKEND", "nvjitlink")     # the attention kernel refuses it (test_config_checks)
    assert compiler.resolve_options("gemm_sm90").cubin_backend == "nvjitlink"
    assert compiler.resolve_options(acfg.KERNEL, cubin_backend="ptxas").cubin_backend == "ptxas"
    monkeypatch.setenv("FA4MLIR_DEBUG", "1")
    monkeypatch.setenv("FA4MLIR_CUBIN_BACKEND", "ptxas")
    assert compiler.resolve_options(acfg.KERNEL).debug and not compiler.resolve_options(acfg.KERNEL, debug=False).debug
    monkeypatch.delenv("FA4MLIR_CUBIN_BACKEND")
    monkeypatch.delenv("FA4MLIR_DEBUG")
    assert dict(os.environ) == before
    # the options are part of the cache key
    cfg = acfg.default_config("bf16", 128, False)
    with pytest.warns(compiler.SetmaxnregDroppedWarning):
        keys = {compiler.key_for(acfg.KERNEL, cfg, compiler.resolve_options(acfg.KERNEL, cubin_backend=b))
                for b in ("ptxas", "nvjitlink")}
    assert len(keys) == 2
    raises(ValueError, ["cubin_backend 'nvcc'", "expected one of"], compiler.resolve_options, acfg.KERNEL, "nvcc")


def test_manifest_config_round_trips():
    for cfg in kernel_sets.attention():
        manifest = {**cfg[1].key(), "cubin_backend": "ptxas"}
        assert acfg.AttnConfig.from_key(manifest) == cfg[1]
    raises(ValueError, ["not an attention_fwd_sm90 config"], acfg.AttnConfig.from_key, {"kernel": "gemm_sm90"})


def test_lazy_exports():
    import fa4mlir
    assert fa4mlir.flash_attn_func is flash_attn_func
    for exc in attention.ERRORS:
        assert getattr(fa4mlir, exc.__name__) is exc


# ----------------------------------------------------------------------------------------------
# MLIR-free
# ----------------------------------------------------------------------------------------------


def test_attention_front_end_imports_no_mlir():
    code = BLOCK_MLIR + textwrap.dedent("""
        import numpy as np
        import fa4mlir
        from fa4mlir import attention, kernel_sets
        assert fa4mlir.flash_attn_func is attention.flash_attn_func
        assert len(kernel_sets.attention()) == 30
        raw = np.zeros(2048 + 64, np.float16)
        start = (-raw.ctypes.data % 64) // 2
        q = raw[start:start + 2048].reshape(1, 16, 2, 64)
        try:
            fa4mlir.flash_attn_func(q, q, q)
        except fa4mlir.DeviceError as e:
            print("DeviceError:", e)
        mods = sorted(m for m in sys.modules if m == "mlir" or m.startswith("mlir."))
        assert not mods, mods
        try:
            import mlir.ir
        except ImportError:
            print("OK")
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "DeviceError: flash_attn_func: q is on device 'cpu'" in proc.stdout
    assert proc.stdout.rstrip().endswith("OK")


