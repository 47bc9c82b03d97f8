"""Deviceless: the sm_90a sparse MLA prefill (attention_mla_sparse_sm90, attention/mla_sparse.py).

* every sparse kernel of the `mla` bundle set compiles with no spills, wgmma not serialised,
  within the SMEM its config states, and the launch contract it states;
* the interpreter runs the kernel on tiny problems, checked by the FA rule against the float64
  reference of FlashMLA's definition (fa4mlir.testing_mla.check_mla_sparse): -1 padding, indices
  >= s_kv, duplicates, out-of-order entries, NaN in every KV row no valid entry names, topk_length
  shorter than topk (and 0), a token whose entries are all invalid, attention sinks (finite, -inf,
  +inf), two head blocks;
* the typed errors of check_sparse_inputs and FlashMLA's FLOP count.
"""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir import compiler, kernel_sets, kernels, lowering
from fa4mlir.attention import errors as E
from fa4mlir.attention import mla_sparse as ms
from fa4mlir.kernels import attention_mla_sparse_sm90_config as sc
from tests._mla_helpers import bits as _bits
from tests._mla_helpers import check_sparse_art, check_sparse_out, lower_clean, sparse_options, sparse_problem, sparse_tensors
from tests._mla_helpers import info as _info

ENTRIES = [e for e in kernel_sets.mla() if e[0] == sc.KERNEL and not e[1].fp8
           and e[1].producer_warps == 1]   # FP8 kv: test_mla_sparse_fp8.py; producer_warps=4: test_mla_sparse_pwg.py


def test_sparse_kernels_are_in_the_mla_set():
    assert {cfg for _, cfg in ENTRIES} == {sc.MLASparseConfig(topk_length=t, sinks=s) for t in (False, True)
                                          for s in (False, True)}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e[1].name())
def test_sparse_set_compiles_clean(entry):
    name, cfg = entry
    check_sparse_art(lower_clean(name, cfg), cfg)


# ---- the interpreter ------------------------------------------------------------------------------

@pytest.mark.parametrize("s_q,heads,topk,topk_length,sinks", [
    (3, 64, 256, None, None),                                       # 4 tiles: the 2-stage ring wraps
    (3, 64, 128, (100, 64, 128), (0.5, float("-inf"), float("inf"))),   # sinks: the first three heads pinned
    (2, 128, 128, (0, 128), None),                                  # two head blocks; a token with L = 0
])
def test_mla_sparse_through_the_interpreter(s_q, heads, topk, topk_length, sinks):
    torch = pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_mla_sparse_sm90
    s_kv = 600
    q, kv, idx = sparse_problem(torch, s_q, heads, topk, s_kv)
    lens, sink_t = sparse_options(torch, heads, topk_length, sinks)
    cfg = sc.MLASparseConfig(topk_length=lens is not None, sinks=sink_t is not None)
    scale = 576 ** -0.5
    tensors = sparse_tensors(torch, q, _bits(torch, kv), idx, lens, sink_t)
    lse, max_logits = tensors["lse"], tensors["max_logits"]
    args = sc.launch_args(cfg, tensors, s_q=s_q, s_kv=s_kv, heads=heads, topk=topk, softmax_scale=scale,
                          q_strides=(heads * 576, 576), kv_stride=576, indices_stride=topk)
    interpret.load(attention_mla_sparse_sm90.build(cfg)).launch(sc.grid(s_q, heads), args)
    out_t = check_sparse_out(torch, q, kv, idx, tensors, scale, sink_t, lens)
    if s_q > 2:         # token 2: every entry invalid
        assert (out_t[2] == 0).all() and np.isposinf(lse[2]).all() and np.isneginf(max_logits[2]).all()
    if sinks is not None:   # a +inf sink zeroes its head's out; lse, max_logits stay the scores'
        assert (out_t[:2, 2] == 0).all() and np.isfinite(lse[:2, 2]).all()


# ---- typed errors, the plan, FLOPs ----------------------------------------------------------------

def _good(**kw):
    args = dict(q=_info((4, 128, 576)), kv=_info((1000, 1, 576)), indices=_info((4, 1, 2048), "i32"), sm_scale=None,
                d_v=512, attn_sink=None, topk_length=None)
    args.update(kw)
    return args


@pytest.mark.parametrize("change,error", [
    (dict(indices=_info((4, 1, 2048), "i64")), E.DTypeError),
    (dict(indices=_info((4, 1, 2048), "f32")), E.DTypeError),
    (dict(indices=_info((4, 2048), "i32")), E.ShapeError),
    (dict(indices=_info((3, 1, 2048), "i32")), E.ShapeError),
    (dict(indices=_info((4, 2, 2048), "i32")), E.ShapeError),
    (dict(indices=_info((4, 1, 2000), "i32")), E.ShapeError),           # topk not a multiple of 64
    (dict(indices=_info((4, 1, 2048), "i32", strides=(1, 1, 4))), E.LayoutError),
    (dict(q=_info((4, 128, 512))), E.HeadDimError),
    (dict(q=_info((4, 128, 576)), kv=_info((1000, 1, 512))), E.ShapeError),
    (dict(d_v=576), E.HeadDimError),
    (dict(q=_info((4, 96, 576))), E.ShapeError),                        # h_q not a multiple of 64
    (dict(q=_info((4, 32, 576))), E.ShapeError),
    (dict(q=_info((4, 128, 576), "f16"), kv=_info((1000, 1, 576), "f16")), E.DTypeError),
    (dict(kv=_info((1000, 1, 576), "f16")), E.DTypeError),
    (dict(kv=_info((1000, 2, 576))), E.HeadsRatioError),
    (dict(kv=_info((1000, 576))), E.ShapeError),
    (dict(kv=_info((1000, 1, 576), strides=(580, 576, 1))), E.LayoutError),    # rows not 16-byte aligned
    (dict(kv=_info((1000, 1, 576), strides=(584, 584, 1))), None),             # padded rows: fine
    (dict(q=_info((4, 128, 576), strides=(128 * 576, 1, 128))), E.LayoutError),
    (dict(attn_sink=_info((64,), "f32")), E.ShapeError),
    (dict(attn_sink=_info((128,), "bf16")), E.ShapeError),
    (dict(topk_length=_info((4,), "i64")), E.ShapeError),
    (dict(topk_length=_info((5,), "i32")), E.ShapeError),
    (dict(sm_scale=float("nan")), E.ScaleError),
    (dict(attn_sink=_info((128,), "f32"), topk_length=_info((4,), "i32")), None),
])
def test_typed_errors(change, error):
    args = _good(**change)
    if error is None:
        p = ms.check_sparse_inputs(**args)
        assert p.topk == 2048 and p.softmax_scale == 576 ** -0.5
        return
    with pytest.raises(error):
        ms.check_sparse_inputs(**args)


def test_plan_launches_by_the_contract(monkeypatch):
    """build_plan's launch (kernel stubbed: no driver here): the contract's arguments by name and
    order, the grid, the optional tensors only when given."""
    from types import SimpleNamespace
    monkeypatch.setattr(ms, "kernel_for", lambda source, cfg: SimpleNamespace(cfg=cfg))
    for sinks, lens in ((None, None), (_info((128,), "f32"), _info((4096,), "i32"))):
        problem = ms.check_sparse_inputs(_info((4096, 128, 576)), _info((32768, 1, 576)), _info((4096, 1, 2048), "i32"),
                                         0.1, 512, sinks, lens)
        launch = ms.build_plan(problem, None, (128 * 576, 576), 576, 2048).launches[0]
        cfg = launch.kernel.cfg
        # SPARSE_DEFAULT_RULE's kernel over bf16: the seesaw step in pair-fill order with the producer warpgroup
        assert cfg == sc.MLASparseConfig(topk_length=lens is not None, sinks=sinks is not None, producer_warps=4,
                                         seesaw=True, pair_fill=True, overlap_s=True)
        assert (sc.KERNEL, cfg) in kernel_sets.mla()
        assert list(launch.args) == [n for n, _ in cfg.params] and launch.grid == (8192, 1, 1)
        assert launch.args["topk"] == 2048 and launch.args["s_kv"] == 32768 and launch.args["scale"] == 0.1


def test_flops_as_flashmla_counts():
    assert ms.flops(4096, 128, 2048) == 2 * 4096 * 2048 * 128 * (576 + 512) == 2_336_462_209_024
    assert ms.flops(2, 64, 128, topk_length=[100, 3]) == 2 * 103 * 64 * 1088


def test_host_path_refuses_cpu_tensors_and_grad():
    torch = pytest.importorskip("torch")
    q = torch.zeros(2, 64, 576, dtype=torch.bfloat16)
    kv = torch.zeros(100, 1, 576, dtype=torch.bfloat16)
    idx = torch.zeros(2, 1, 64, dtype=torch.int32)
    with pytest.raises(E.DeviceError, match="cuda"):
        ms.flash_mla_sparse_fwd(q, kv, idx, 0.1)
    with pytest.raises(E.AutogradError):
        ms.flash_mla_sparse_fwd(q.requires_grad_(True), kv, idx, 0.1)
    with pytest.raises(E.ArgumentTypeError):
        ms.flash_mla_sparse_fwd(np.zeros((2, 64, 576)), kv, idx, 0.1)
    with pytest.raises(E.ArgumentTypeError):
        ms.flash_mla_sparse_fwd(q, kv, idx, 0.1, softmax_scale=0.1)


def test_gather_sass_is_nine_zero_filling_16_byte_copies_a_trip():
    """The gather's copy loop in SASS: per trip one 16-byte LDGSTS (cp.async.cg: BYPASS) per chunk of
    576 columns, 9 in all, from one base register at immediate offsets 128 bytes apart, each with
    the ignore-src predicate (an invalid row lands zeros), one cp.async.mbarrier.arrive per tile;
    and the 36 + 4 wgmmas of the tile step."""
    import re

    from fa4mlir import sass
    if sass.find_nvdisasm() is None:
        pytest.skip("nvdisasm not installed")
    art = lowering.lower(kernels.module(sc.KERNEL).build(sc.MLASparseConfig()),
                         compiler.resolve_options(sc.KERNEL, debug=False))
    text = sass.disassemble(art.cubin)
    copies = re.findall(r"LDGSTS\.E\.BYPASS\.128 \[R\d+\+(0x[0-9a-f]+)\], desc\[\w+\]\[R\d+\.64(?:\+(0x[0-9a-f]+))?\], !P\d",
                        text)
    assert len(copies) == 9 and len(re.findall(r"\bLDGSTS\.", text)) == 9, copies
    assert sorted(int(src or "0", 16) for _, src in copies) == [128 * c for c in range(9)]
    assert len({int(dst, 16) % (64 * 128) for dst, _ in copies}) == 1          # chunk c: 8 KiB apart
    assert len(re.findall(r"LDGSTSBAR", text)) == 1
    assert len(re.findall(r"HGMMA\.64x32x16\.F32\.BF16", text)) == 36 and len(re.findall(r"HGMMA\.64x256x16", text)) == 4


def test_setmaxnreg_budgets_fit_the_launch_allocation():
    """The H200 hang of 32 gather registers: 128 x (2 x 240 + 32) = 65536 > 384 x 168 = 64512, so the
    consumers' setmaxnreg.inc never returns. The shipped budgets fit, the decode kernel's too; 32 does not."""
    from fa4mlir.kernels import attention_mla_decode_sm90_config as dc
    assert sc.register_pool_fits(384, sc.MMA_REGS, sc.LOAD_REGS, sc.CONSUMERS) == (True, 64512, 64512)
    assert sc.register_pool_fits(384, dc.MMA_REGS, dc.LOAD_REGS, dc.CONSUMERS)[0]
    assert sc.register_pool_fits(384, 240, 32, 2) == (False, 65536, 64512)
