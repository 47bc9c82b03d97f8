"""Deviceless: the sm_90a sparse MLA prefill over FlashMLA's FP8 rows (flash_mla_sparse_fwd with kv
float8_e4m3fn / uint8 [s_kv, 1, 656]: attention/mla_sparse.py, attention_mla_sparse_sm90 built from
MLASparseConfig(kv_dtype="fp8"), note "FP8 gather").

* the four FP8 sparse prefill kernels of the `mla` set compile with no spills, wgmma not serialised,
  within their SMEM plan (one staging stage), with the launch contract they state; the bf16 kernels'
  compile keys are what they were (kv_dtype absent);
* the interpreter runs the kernel on tiny problems against the float64 reference over the rows
  dequantized exactly as the kernel does (testing_mla.dequantize_fp8_cache), by the FA rule: -1
  padding, indices >= s_kv, duplicates, out-of-order entries, NaN bytes and scales in every row no
  valid entry names, topk_length shorter than topk (and 0), a token whose entries are all invalid,
  attention sinks (finite, -inf, +inf), two head blocks, a padded row stride;
* the typed errors for FP8 kv dtypes, shapes and strides.
"""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir import kernel_sets
from fa4mlir.attention import errors as E
from fa4mlir.attention import mla_sparse as ms
from fa4mlir.kernels import attention_mla_sparse_sm90_config as sc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import check_sparse_art, check_sparse_out, lower_clean, sparse_options, sparse_problem, sparse_tensors
from tests._mla_helpers import info as _info

FP8_ENTRIES = [e for e in kernel_sets.mla() if e[0] == sc.KERNEL and e[1].fp8]


def test_fp8_config_rules_and_the_set():
    cfg = sc.MLASparseConfig(kv_dtype="fp8").validate()
    assert cfg.stages == 1 and cfg.stage_bytes() == 64 * 656 and cfg.smem_bytes() == sc.fp8_plan()[1] <= sc.SMEM_LIMIT
    assert cfg.name() == "attention_mla_sparse_sm90_bf16_fp8" and cfg.key()["kv_dtype"] == "fp8"
    assert cfg.params == sc.MLASparseConfig().params                      # the same contract, kv in bytes
    assert "kv_dtype" not in sc.MLASparseConfig().key()                   # the bf16 kernels' keys as before
    with pytest.raises(ConfigError):
        sc.MLASparseConfig(kv_dtype="e4m3").validate()
    assert {cfg for _, cfg in FP8_ENTRIES} == {sc.MLASparseConfig(topk_length=t, sinks=s, kv_dtype="fp8")
                                              for t in (False, True) for s in (False, True)}


@pytest.mark.parametrize("entry", FP8_ENTRIES, ids=lambda e: e[1].name())
def test_fp8_sparse_set_compiles_clean(entry):
    name, cfg = entry
    check_sparse_art(lower_clean(name, cfg), cfg)


@pytest.mark.parametrize("s_q,heads,topk,topk_length,sinks,pitch", [
    (3, 64, 128, (100, 64, 128), (0.5, float("-inf"), float("inf")), 656),     # sinks: the first three heads pinned
    (2, 128, 192, (0, 192), None, 672),               # two head blocks; a token with L = 0; a padded row stride
])
def test_fp8_mla_sparse_through_the_interpreter(s_q, heads, topk, topk_length, sinks, pitch):
    torch = pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_mla_sparse_sm90
    from fa4mlir.testing_mla import dequantize_fp8_cache, quantize_fp8_cache
    s_kv = 600
    q, kv, idx = sparse_problem(torch, s_q, heads, topk, s_kv)
    kv8 = quantize_fp8_cache((kv.float() * 3).bfloat16().view(s_kv, 1, 1, 576))      # NaN rows: NaN bytes, scales
    raw = np.full((s_kv, pitch), 0xFF, np.uint8)                      # the pad bytes: NaN
    raw[:, :656] = kv8.view(torch.uint8).numpy().reshape(s_kv, 656)
    lens, sink_t = sparse_options(torch, heads, topk_length, sinks)
    problem = ms.check_sparse_inputs(_info((s_q, heads, 576)), _info((s_kv, 1, 656), "e4m3", (pitch, 656, 1)),
                                     _info(idx.shape, "i32"), None, 512,
                                     None if sink_t is None else _info((heads,), "f32"),
                                     None if lens is None else _info((s_q,), "i32"))
    cfg = problem.config
    assert cfg.fp8 and cfg.topk_length == (lens is not None) and cfg.sinks == (sink_t is not None)
    tensors = sparse_tensors(torch, q, raw, idx, lens, sink_t)
    lse, max_logits = tensors["lse"], tensors["max_logits"]
    args = sc.launch_args(cfg, tensors, s_q=s_q, s_kv=s_kv, heads=heads, topk=topk, softmax_scale=problem.softmax_scale,
                          q_strides=(heads * 576, 576), kv_stride=pitch, indices_stride=topk)
    interpret.load(attention_mla_sparse_sm90.build(cfg)).launch(sc.grid(s_q, heads), args)
    rows = dequantize_fp8_cache(kv8).view(s_kv, 1, 576)
    out_t = check_sparse_out(torch, q, rows, idx, tensors, problem.softmax_scale, sink_t, lens)
    if s_q > 2:         # token 2: every entry invalid
        assert (out_t[2] == 0).all() and np.isposinf(lse[2]).all() and np.isneginf(max_logits[2]).all()
    if lens is not None and lens[0] == 0:
        assert (out_t[0] == 0).all() and np.isposinf(lse[0]).all()


def _good(**kw):
    args = dict(q=_info((4, 128, 576)), kv=_info((1000, 1, 656), "e4m3"), indices=_info((4, 1, 2048), "i32"),
                sm_scale=None, d_v=512, attn_sink=None, topk_length=None)
    args.update(kw)
    return args


@pytest.mark.parametrize("change,error", [
    (dict(), None),
    (dict(kv=_info((1000, 1, 656), "u8")), None),
    (dict(kv=_info((1000, 1, 656), "e4m3", (672, 656, 1))), None),            # a padded row stride
    (dict(kv=_info((1000, 1, 576), "e4m3")), E.ShapeError),                    # no scales / rope
    (dict(kv=_info((1000, 2, 656), "e4m3")), E.HeadsRatioError),
    (dict(kv=_info((1000, 1, 656), "e4m3", (660, 656, 1))), E.LayoutError),   # 660: not 16 bytes
    (dict(kv=_info((1000, 1, 656), "e4m3", (656, 656, 2))), E.LayoutError),
    (dict(kv=_info((1000, 1, 656), "i8")), E.DTypeError),
    (dict(q=_info((4, 128, 576), "f16")), E.DTypeError),
    (dict(kv=_info((1000, 1, 656), "bf16")), E.ShapeError),                  # a bf16 kv must be 576 wide
])
def test_fp8_typed_errors(change, error):
    args = _good(**change)
    if error is None:
        p = ms.check_sparse_inputs(**args)
        assert p.fp8 and p.config.fp8 and p.s_kv == 1000
        return
    with pytest.raises(error):
        ms.check_sparse_inputs(**args)
