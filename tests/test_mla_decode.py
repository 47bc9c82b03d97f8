"""Deviceless: the sm_90a absorbed MLA decode (attention_mla_decode_sm90, attention/mla.py).

* every kernel of the `mla` bundle set compiles with no spills, wgmma not serialised, the SMEM
  plan and launch contract its config states;
* the interpreter runs the kernel on tiny problems, checked by the FA rule against the float64
  reference (fa4mlir.testing_mla.check_mla): a shuffled block table with junk past each
  sequence's pages, NaN in every unused cache row and page, lengths 0, 1 and page + 1, seqlen_q 2
  causal (bottom-right) and 1, 16 and 48 heads (two M tiles, the second partial), two splits
  merged by the combine's math on the host (testing_kvcache.combine_splits: the combine kernel's
  per-lane loop bounds are not interpretable; tests/gpu runs it), and the unsplit variant;
* the typed errors of check_mla_inputs and flash_mla_with_kvcache, the split heuristic and
  FlashMLA's FLOP/byte accounting.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fa4mlir import kernel_sets
from fa4mlir.attention import errors as E
from fa4mlir.attention import mla
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels import attention_mla_decode_sm90_config as mc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import info as _info
from tests._mla_helpers import bits, interpret_decode, lower_clean, paged_latent

# the sparse kernels: tests/test_mla_sparse.py and tests/test_mla_sparse_decode.py; mla_prefill:
# test_attention_compile; FP8: test_mla_decode_fp8.py
ENTRIES = [e for e in kernel_sets.mla()
           if e[0] not in ("attention_mla_sparse_sm90", "attention_mla_sparse_decode_sm90", "attention_fwd_sm90")
           and not getattr(e[1], "fp8", False)]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e[1].name())
def test_mla_set_compiles_clean(entry):
    name, cfg = entry
    art = lower_clean(name, cfg)
    if name == mc.KERNEL:
        assert cfg.smem_bytes() <= art.smem_bytes <= mc.SMEM_LIMIT, (art.smem_bytes, cfg.smem_bytes())
        assert art.block == (cfg.threads, 1, 1) == (384, 1, 1)
        assert [(p.name, p.kind) for p in art.params] == list(cfg.params)
        tma = [p for p in art.params if p.kind == "tma"]
        assert len(tma) == 1 and tma[0].tma.box == (64, 1, cfg.box_rows, 1) and tma[0].tma.swizzle == "128B"
        assert (name, replace(cfg, unsplit=not cfg.unsplit)) in ENTRIES
    else:
        assert name == dec.COMBINE_KERNEL and cfg.head_dim == mc.D_V
        assert [(p.name, p.kind) for p in art.params] == list(dec.COMBINE_PARAMS)


def test_config_and_split_rules():
    assert mc.default_config("bf16", 64).box_rows == 64 and mc.default_config("bf16", 48).box_rows == 16
    assert mc.default_config("bf16", 128).box_rows == 64
    for page in (1, 4, 12, 20):
        assert not mc.page_supported(page)
        with pytest.raises(ConfigError):
            mc.default_config("bf16", page).validate()
    with pytest.raises(ConfigError):
        mc.MLADecodeConfig(dtype="f32").validate()
    assert mc.MLADecodeConfig().smem_bytes() <= mc.SMEM_LIMIT
    # batch 128 x 1 M tile fills 132 SMs: one split; 4 sequences of 128 heads x 2 tokens (4 M tiles): 8
    assert mla.plan_splits(128, 16, 132) == 1 and mla.plan_splits(4, 256, 132) == 8
    assert mla.plan_splits(1, 16, 132) == mla.MAX_SPLITS
    flops, data = mla.flops_and_bytes(128, 1, 128, 4096)
    assert flops == 2 * 128 * 128 * 4096 * 1088 and data == (128 * 4096 * 576 + 128 * 128 * 1088) * 2
    assert mc.grid(3, 2, 48, 2) == (4, 1, 3)


# ---- typed errors ---------------------------------------------------------------------------------

def _good(**kw):
    args = dict(q=_info((2, 1, 16, 576)), k_cache=_info((8, 64, 1, 576)), block_table=_info((2, 4), "i32"),
                cache_seqlens=_info((2,), "i32"), head_dim_v=512, metadata=_info((3, 8), "i32"),
                num_splits=_info((3,), "i32"))
    args.update(kw)
    return args


@pytest.mark.parametrize("change,error", [
    (dict(q=_info((2, 1, 16, 512))), E.HeadDimError),
    (dict(head_dim_v=576), E.HeadDimError),
    (dict(q=_info((2, 1, 16, 576), "f32")), E.DTypeError),
    (dict(k_cache=_info((8, 64, 1, 576), "f16")), E.DTypeError),
    (dict(k_cache=_info((8, 64, 2, 576))), E.HeadsRatioError),
    (dict(k_cache=_info((8, 64, 576))), E.ShapeError),
    (dict(k_cache=_info((8, 4, 1, 576))), E.LayoutError),
    (dict(q=_info((2, 1, 129, 576))), E.ShapeError),
    (dict(q=_info((65536, 1, 16, 576)), block_table=_info((65536, 4), "i32"), cache_seqlens=_info((65536,), "i32"),
          num_splits=_info((65537,), "i32")), E.ShapeError),
    (dict(q=_info((2, 0, 16, 576))), E.ShapeError),
    (dict(block_table=_info((2, 4), "i64")), E.DTypeError),
    (dict(cache_seqlens=_info((2,), "i64")), E.DTypeError),
    (dict(block_table=_info((3, 4), "i32")), E.ShapeError),
    (dict(block_table=_info((2, 4), "i32", strides=(1, 2))), E.LayoutError),
    (dict(cache_seqlens=_info((3,), "i32")), E.ShapeError),
    (dict(metadata=_info((3, 4), "i32")), E.ShapeError),
    (dict(num_splits=_info((2,), "i32")), E.ShapeError),
    (dict(k_cache=_info((8, 64, 1, 576), strides=(64 * 584, 584, 584, 1))), None),
    (dict(k_cache=_info((8, 64, 1, 576), strides=(64 * 577, 577, 577, 1))), E.LayoutError),
])
def test_typed_errors(change, error):
    args = _good(**change)
    if error is None:
        assert mla.check_mla_inputs(**args).splits == 3
        return
    with pytest.raises(error):
        mla.check_mla_inputs(**args)


def test_scale_and_causal_checks():
    with pytest.raises(E.ScaleError):
        mla.check_mla_inputs(**_good(), softmax_scale=float("nan"))
    with pytest.raises(E.FlashAttnInputError):
        mla.check_mla_inputs(**_good(), causal="yes")
    assert mla.check_mla_inputs(**_good()).softmax_scale == 576 ** -0.5


def test_refusals_before_anything_runs():
    with pytest.raises(E.ArgumentTypeError):      # the FP8 cache is built (tests/test_mla_decode_fp8.py)
        mla.flash_mla_with_kvcache(None, None, None, None, 512, None, None, is_fp8_kvcache=True)
    with pytest.raises(E.ArgumentTypeError):        # indices: the sparse decode (tests/test_mla_sparse_decode.py)
        mla.flash_mla_with_kvcache(None, None, None, None, 512, None, None, indices=np.zeros(1))
    with pytest.raises(E.UnsupportedFeatureError, match="attn_sink"):
        mla.flash_mla_with_kvcache(None, None, None, None, 512, None, None, indices=np.zeros(1), attn_sink=np.zeros(1))
    with pytest.raises(E.ArgumentTypeError):
        mla.flash_mla_with_kvcache(np.zeros((1, 1, 16, 576)), None, None, None, 512, None, None)
    with pytest.raises(E.HeadsRatioError):
        mla.get_mla_metadata(None, 16, 2)
    with pytest.raises(E.ArgumentTypeError):   # sparse decode over FP8: built (tests/test_mla_sparse_decode_fp8.py)
        mla.flash_mla_with_kvcache(None, None, None, None, 512, None, None, is_fp8_kvcache=True, indices=np.zeros(1))
    with pytest.raises(E.ArgumentTypeError):
        mla.get_mla_metadata(None, 16, 1, is_fp8_kvcache=None)


# ---- the interpreter ------------------------------------------------------------------------------

def _problem(torch, lens, seqlen_q, heads, page, seed=0, dtype="bf16"):
    """q, the cache (bf16; NaN in every row no sequence owns), a shuffled block table (junk past each
    sequence's pages) and the lengths."""
    q, kv, table, lens_a = paged_latent(torch, lens, seqlen_q, heads, page, seed)
    tdtype = torch.float16 if dtype == "f16" else torch.bfloat16
    return q.to(tdtype), kv.to(tdtype), table, lens_a


@pytest.mark.parametrize("lens,seqlen_q,heads,page,splits,causal,kind", [
    # the M64 kernel (note "Exchange")
    ((65, 0, 1), 2, 16, 64, 2, True, "m64"),       # split kernel + combine; lengths page + 1, 0, 1
    ((70, 3), 2, 48, 16, 1, True, "m64"),          # unsplit; two M tiles (96 rows); 16-row boxes
    ((130, 3), 2, 48, 64, 1, True, "m64"),
    ((9, 70), 1, 16, 64, 1, True, "f16"),          # f16, seqlen_q 1
    # the seesaw variant (attention_mla_decode_seesaw_sm90): odd and even tile counts (3, 1, 1, 0 tiles),
    # lengths 150, 63, 64, 0, the pair's tile b holding L_b (129: 3 tiles), split and unsplit, causal
    ((150, 63, 64, 0), 2, 16, 64, 1, True, "seesaw"),
    ((150, 129, 0), 2, 16, 64, 2, True, "seesaw"),
    ((256, 65), 1, 64, 64, 1, False, "seesaw"),
    ((250, 3), 2, 48, 64, 1, True, "seesaw"),
    ((70, 1, 129), 2, 16, 16, 1, True, "seesaw"),   # 16-row boxes; length 1: token 0 sees no key
])
def test_mla_decode_through_the_interpreter(lens, seqlen_q, heads, page, splits, causal, kind):
    torch = pytest.importorskip("torch")
    from fa4mlir.testing_mla import check_mla
    dtype = "f16" if kind == "f16" else "bf16"
    q, kv, table, lens_a = _problem(torch, lens, seqlen_q, heads, page, dtype=dtype)
    batch = len(lens)
    problem = mla.check_mla_inputs(_info(q.shape, dtype), _info(kv.shape, dtype), _info(table.shape, "i32"), _info(lens_a.shape, "i32"),
                                   512, _info((splits, 8), "i32"), _info((batch + 1,), "i32"), causal=causal)
    cfg, combine = mla.configs_for(problem)
    assert cfg.unsplit == (splits == 1) and (combine is None) == cfg.unsplit
    cfg = replace(cfg, swap_ab=0, swap_ab_ring=False, seesaw=kind == "seesaw")   # not DEFAULT_RULE's pick
    assert cfg.dtype == dtype                  # the M64 / seesaw kernels (swap AB: tests/test_mla_decode_swapab.py)
    out_t, lse_t = interpret_decode(torch, problem, cfg, combine, q, bits(torch, kv), table, lens_a, page)
    errs = check_mla(q, kv, table, lens_a, out_t, lse_t, causal=causal)
    assert errs["out"] > 0           # the kernel computed something (an all-zero out would fail the rule anyway)


@pytest.mark.parametrize("splits", [1, 3])
def test_plan_launches_by_the_contracts(monkeypatch, splits):
    """build_plan's launches (kernels stubbed: no driver here): the decode kernel's arguments are its
    contract's, by name and order, the combine follows only with several splits, grids as stated."""
    from types import SimpleNamespace
    monkeypatch.setattr(mla, "kernel_for", lambda source, cfg: SimpleNamespace(cfg=cfg))
    problem = mla.check_mla_inputs(_info((128, 2, 128, 576)), _info((8192, 64, 1, 576)), _info((128, 64), "i32"),
                                   _info((128,), "i32"), 512, _info((splits, 8), "i32"), _info((129,), "i32"),
                                   causal=True)
    plan = mla.build_plan(problem, None, (2 * 128 * 576, 128 * 576, 576), 64, (2 * 128 * 512, 128 * 512, 512))
    decode = plan.launches[0]
    assert decode.kernel.cfg == mc.default_config("bf16", 64, unsplit=splits == 1, seesaw=True)   # DEFAULT_RULE: 256 rows
    assert list(decode.args) == [n for n, _ in decode.kernel.cfg.params]
    assert decode.grid == (4 * splits, 1, 128) and decode.args["rows"] == 256 and decode.args["capacity"] == 64 * 64
    assert len(plan.launches) == (1 if splits == 1 else 2)
    if splits > 1:
        combine = plan.launches[1]
        assert combine.kernel.cfg == dec.CombineConfig("bf16", 512)
        assert list(combine.args) == [n for n, _ in dec.COMBINE_PARAMS]
        assert combine.grid == (128 * 2 * 128 // dec.COMBINE_WARPS, 1, 1) and combine.args["num_splits"] == splits


def test_host_path_refuses_cpu_tensors_and_grad():
    """flash_mla_with_kvcache with CPU torch tensors runs the host path up to the device check."""
    torch = pytest.importorskip("torch")
    q = torch.zeros(2, 1, 16, 576, dtype=torch.bfloat16)
    rest = (torch.zeros(4, 64, 1, 576, dtype=torch.bfloat16), torch.zeros(2, 2, dtype=torch.int32),
            torch.zeros(2, dtype=torch.int32), 512, torch.zeros(1, 8, dtype=torch.int32), torch.zeros(3, dtype=torch.int32))
    with pytest.raises(E.DeviceError, match="cuda"):
        mla.flash_mla_with_kvcache(q, *rest)
    with pytest.raises(E.AutogradError):
        mla.flash_mla_with_kvcache(q.requires_grad_(True), *rest)
    with pytest.raises(E.DTypeError):
        mla.get_mla_metadata(torch.zeros(2, dtype=torch.int64), 16, 1)
