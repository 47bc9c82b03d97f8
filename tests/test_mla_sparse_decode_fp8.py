"""Deviceless: the sm_90a sparse MLA decode over FlashMLA's FP8 latent cache (flash_mla_with_kvcache(
is_fp8_kvcache=True, indices=...): attention/mla_sparse_decode.py, attention_mla_sparse_sm90 built from
MLASparseDecodeConfig(kv_dtype="fp8"), note "FP8 gather"): the gather variant (FA4MLIR_MLA_SPARSE_FP8_VARIANT=
gather; the default before FP8_DECODE_DEFAULT_RULE picked the converter, tests/test_mla_sparse_decode_fp8_conv.py).

* the FP8 sparse decode kernels of the `mla` bundle set compile with no spills (the gather warp's 24
  registers included), wgmma not serialised, within the SMEM plan their config states (one staging
  stage: config note "FP8 sparse SMEM plan"), with the launch contract it states;
* the 16-bit sparse decode kernels' compile keys and names are what they were (kv_dtype "" as before);
* the interpreter runs the kernel on tiny problems against the float64 reference over the cache
  dequantized exactly as the kernel does (testing_mla.dequantize_fp8_cache: FlashMLA's
  dequantize_k_cache), by the FA rule: -1 padding, other negatives and rows past the cache,
  duplicates, out-of-order entries, topk_length shorter than topk (and 0), NaN bytes and scales in
  every row no valid entry names, a query row with no valid entry, heads not a multiple of 64,
  FlashMLA's padded pages (page stride page_size + 1 rows), split and unsplit;
* the typed errors for the FP8 cache's dtypes, shapes and strides, before anything runs.
"""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir import kernel_sets
from fa4mlir.attention import errors as E
from fa4mlir.attention import mla
from fa4mlir.attention import mla_sparse_decode as sd
from fa4mlir.kernels import attention_mla_sparse_sm90_config as dc
from fa4mlir.kernels.common import mla_fp8
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import check_sparse_art, check_sparse_decode_run, lower_clean, sparse_rows
from tests._mla_helpers import info as _info

FP8_ENTRIES = [e for e in kernel_sets.mla() if e[0] == dc.DECODE_KERNEL and e[1].fp8 and not e[1].fp8_converter]


def test_fp8_config_rules():
    cfg = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8").validate()
    assert cfg.fp8 and cfg.stages == 1 and cfg.stage_bytes() == 64 * 656 == 64 * mla_fp8.ROW_BYTES
    assert cfg.smem_bytes() <= dc.SMEM_LIMIT < cfg.smem_bytes() + cfg.stage_bytes() + 16    # two stages do not fit
    assert cfg.name() == "attention_mla_sparse_decode_sm90_bf16_fp8" and cfg.key()["kv_dtype"] == "fp8"
    assert [n for n, _ in cfg.params][-4:] == [n for n, _ in dc.DECODE_FP8_SCALARS]
    plain = dc.MLASparseDecodeConfig("bf16")
    assert plain.name() == "attention_mla_sparse_decode_sm90_bf16" and plain.key()["kv_dtype"] == ""
    assert plain.stages == dc.STAGES and plain.smem_bytes() == dc.MLASparseConfig().smem_bytes()
    assert dc.FP8_ROW_BYTES == mla_fp8.ROW_BYTES
    for bad in (dict(dtype="f16", kv_dtype="fp8"), dict(kv_dtype="e4m3"), dict(kv_dtype="f16")):
        with pytest.raises(ConfigError):
            dc.MLASparseDecodeConfig(**bad).validate()


def test_fp8_kernels_are_in_the_mla_set():
    assert {cfg for _, cfg in FP8_ENTRIES} == {dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", topk_length=t, split=s)
                                              for t in (False, True) for s in (False, True)}
    assert all(e in kernel_sets.gpu_tests() and e in kernel_sets.bench() for e in FP8_ENTRIES)


@pytest.mark.parametrize("entry", FP8_ENTRIES, ids=lambda e: e[1].name())
def test_fp8_sparse_decode_compiles_clean(entry):
    name, cfg = entry
    check_sparse_art(lower_clean(name, cfg), cfg)


# ---- the interpreter ------------------------------------------------------------------------------

def _problem(torch, batch, seqlen_q, heads, topk, pages, page, seed=0, padded=False):
    """q (bf16), the FP8 cache (quantize_fp8_cache of a bf16 cache whose rows no valid entry names are
    NaN: NaN bytes and scales there; padded: each page one row longer, FlashMLA's allocation) and
    indices [batch, seqlen_q, topk] of cache rows page x page_size + offset: query row 0 a shuffled mix
    of valid rows, duplicates, -1, other negatives and rows past the cache; row 1 valid rows in
    descending order, then -1 padding; row 2 (when there is one) every entry invalid; later rows
    random valid rows. Returns (q, cache [pages, page, 1, 656] e4m3 (a view when padded), the bytes
    the kernel reads, indices)."""
    from fa4mlir.testing_mla import quantize_fp8_cache
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, seqlen_q, heads, 576, generator=g).bfloat16()
    idx, kv = sparse_rows(torch, g, batch * seqlen_q, topk, pages * page, seed, scale=3)
    cache = quantize_fp8_cache(kv.bfloat16().reshape(pages, page, 1, 576))
    raw = cache.view(torch.uint8).numpy()
    if padded:
        room = np.full((pages, page + 1, 1, 656), 0xFF, np.uint8)       # the pad rows: NaN bytes
        room[:, :page] = raw
        raw = room
        cache = torch.from_numpy(room).view(torch.float8_e4m3fn)[:, :page]
    return q, cache, raw, idx.reshape(batch, seqlen_q, topk)


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,page,splits,topk_length,padded", [
    (3, 1, 16, 128, 16, 1, None, False),         # 16 heads: 48 masked rows; row 2 has no valid entry
    (2, 2, 64, 192, 61, 2, (150, 0), True),      # split 2 over 3 tiles; topk_length < topk and 0; padded pages
    (1, 2, 80, 128, 64, 4, None, True),          # two head blocks, the second 16 real rows; 2 empty splits
])
def test_fp8_sparse_decode_through_the_interpreter(batch, seqlen_q, heads, topk, page, splits, topk_length, padded):
    run_interpreted(batch, seqlen_q, heads, topk, page, splits, topk_length, padded)


def run_interpreted(batch, seqlen_q, heads, topk, page, splits, topk_length, padded, converter=False, seesaw=False,
                    crossover=False, lean=False, stasync=False):
    """One interpreted case (the test above; converter: the fp8_converter variant's kernel,
    tests/test_mla_sparse_decode_fp8_conv.py; seesaw: its seesaw variant, tests/test_mla_sparse_seesaw.py;
    crossover: the converter over a cluster of two CTAs, tests/test_mla_sparse_decode_fp8_crossover.py; lean: its
    note "Lean hand-off", tests/test_mla_sparse_decode_fp8_lean.py; stasync: its note "st.async hand-off",
    tests/test_mla_sparse_decode_fp8_stasync.py);
    returns (out, lse) as float32 tensors."""
    import dataclasses
    torch = pytest.importorskip("torch")
    from fa4mlir.testing_mla import dequantize_fp8_cache
    pages = 640 // page + 1
    q, cache, raw, idx = _problem(torch, batch, seqlen_q, heads, topk, pages, page, padded=padded)
    lens = None if topk_length is None else np.array(topk_length, np.int32)
    strides = (raw.shape[1] * 656, 656, 656, 1)
    problem = sd.check_sparse_decode_inputs(_info(q.shape), _info(cache.shape, "e4m3", strides), _info(idx.shape, "i32"),
                                            512, _info((splits, 8), "i32"), _info((batch + 1,), "i32"),
                                            topk_length=None if lens is None else _info(lens.shape, "i32"),
                                            is_fp8_kvcache=True)
    lean = lean or stasync
    crossover = crossover or lean
    cfg = dataclasses.replace(problem.config(splits > 1), fp8_converter=converter or crossover,
                              seesaw=seesaw, crossover=crossover, crossover_lean=lean, crossover_stasync=stasync)
    assert cfg.fp8 and problem.page_size == page and problem.s_kv == pages * page
    row_stride, page_stride = sd.cache_strides(cache.shape, strides)
    out_t, lse_t, args = check_sparse_decode_run(torch, cfg, problem, q, raw, dequantize_fp8_cache(cache.contiguous()), idx,
                                                 lens, splits, s_kv=pages * page, kv_stride=row_stride, page_size=page,
                                                 kv_page_stride=page_stride)
    assert args["kv_stride_page"] == (page + padded) * 656
    if lens is not None and seqlen_q > 0:      # topk_length 0: every row of sequence 1 sees no key
        assert (out_t[1] == 0).all() and torch.isposinf(lse_t[1]).all()
    return out_t, lse_t


# ---- shared with the FP8 variants' tests (test_mla_sparse_decode_fp8_{conv,crossover,lean,stasync}.py) ----------

def check_same_bits(case, first: dict, second: dict) -> None:
    """run_interpreted(*case, **first), then run_interpreted(*case, **second) (each checked by the FA rule inside):
    the same out and lse bits."""
    torch = pytest.importorskip("torch")
    out, lse = run_interpreted(*case, **first)
    out_b, lse_b = run_interpreted(*case, **second)
    assert torch.equal(out, out_b) and torch.equal(lse, lse_b)


def fp8_ptx(cfg) -> str:
    """The PTX of the sparse decode kernel built for `cfg`."""
    from fa4mlir import kernels, lowering
    kir = kernels.module(dc.DECODE_KERNEL).build(cfg)
    with kir.module.context:
        return lowering.lower_module(kir.module, kir.arch, target="ptx")[0]


def fp8_plain_configs() -> list:
    """The four FP8 sparse decode configs (topk_length x split) the FP8 variants are made from."""
    return [dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", topk_length=t, split=s) for t in (False, True)
            for s in (False, True)]


def check_in_bundle_sets(want) -> None:
    """Each (kernel, config) of `want` is in the `mla`, `gpu-tests` and `bench` sets."""
    mla, gpu, bench = kernel_sets.mla(), kernel_sets.gpu_tests(), kernel_sets.bench()
    assert all(e in mla and e in gpu and e in bench for e in want)


def check_variant_entries(entries, *variants: str) -> None:
    """`entries` are (by name) the decode kernels of the named FP8 variants over fp8_plain_configs(), each in the
    `mla`, `gpu-tests` and `bench` sets."""
    want = [(dc.DECODE_KERNEL, dc.fp8_decode_variant(c, n)) for n in variants for c in fp8_plain_configs()]
    assert sorted(c.name() for _, c in entries) == sorted(c.name() for _, c in want)
    check_in_bundle_sets(want)


def converter_sass(name, cfg) -> str:
    """Kernel `name` of `cfg` (an FP8 converter kernel) lowered clean (lower_clean: no spills, no stack, wgmma not
    serialised, setmaxnreg honoured; check_sparse_art), and what the converter kernels' SASS shares: setmaxnreg 200
    / 104, no local memory (LDL, STL), and the bf16 m64n32k16 HGMMAs. Returns the SASS."""
    from tests._sm100_helpers import role_budgets, sass_count, sass_of
    art = lower_clean(name, cfg)
    check_sparse_art(art, cfg)
    sass = sass_of(art)
    assert role_budgets(sass) == {200, 104}
    assert all(sass_count(sass, op) == 0 for op in ("LDL", "STL")), "local memory in the SASS"
    assert sass_count(sass, "HGMMA.64x32x16.F32.BF16") > 0
    return sass


def fp8_decode_args(heads: int = 128) -> dict:
    """sd.check_sparse_decode_inputs' keywords for an FP8 sparse decode: batch 4, seqlen_q 2, `heads` heads, topk
    2048, 100 pages of 64, one split."""
    return dict(q=_info((4, 2, heads, 576)), k_cache=_info((100, 64, 1, 656), "e4m3"), indices=_info((4, 2, 2048), "i32"),
                head_dim_v=512, metadata=_info((1, 8), "i32"), num_splits=_info((5,), "i32"), is_fp8_kvcache=True)


def check_knob_at_128_heads(monkeypatch, variant: str, want) -> None:
    """FA4MLIR_MLA_SPARSE_FP8_VARIANT=`variant`: the host picks `want` at 128 heads (unsplit) and refuses it at 64
    (UnsupportedFeatureError "multiple of 128")."""
    monkeypatch.setenv(sd.VARIANT_ENV, variant)
    assert sd.check_sparse_decode_inputs(**fp8_decode_args()).config(False) == want
    with pytest.raises(E.UnsupportedFeatureError, match="multiple of 128"):
        sd.check_sparse_decode_inputs(**fp8_decode_args(64))


# ---- typed errors, the plan -----------------------------------------------------------------------

def _good(**kw):
    args = dict(q=_info((4, 2, 128, 576)), k_cache=_info((100, 64, 1, 656), "e4m3"),
                indices=_info((4, 2, 2048), "i32"), head_dim_v=512, metadata=_info((1, 8), "i32"),
                num_splits=_info((5,), "i32"), softmax_scale=None, causal=False, topk_length=None, is_fp8_kvcache=True)
    args.update(kw)
    return args


@pytest.mark.parametrize("change,error", [
    (dict(), None),
    (dict(k_cache=_info((100, 64, 1, 656), "u8")), None),                                 # a uint8 view
    (dict(k_cache=_info((100, 64, 1, 656), "e4m3", strides=(65 * 656, 656, 656, 1))), None),   # padded pages
    (dict(q=_info((4, 2, 128, 576), "f16")), E.DTypeError),                               # FP8: q must be bf16
    (dict(k_cache=_info((100, 64, 1, 656), "bf16")), E.DTypeError),
    (dict(k_cache=_info((100, 64, 1, 656), "i8")), E.DTypeError),
    (dict(k_cache=_info((100, 64, 1, 576), "e4m3")), E.ShapeError),                        # no scales / rope
    (dict(k_cache=_info((100, 64, 656), "e4m3")), E.ShapeError),
    (dict(k_cache=_info((100, 64, 2, 656), "e4m3")), E.HeadsRatioError),
    (dict(k_cache=_info((100, 64, 1, 656), "e4m3", strides=(64 * 660, 660, 660, 1))), E.LayoutError),  # not 16 B
    (dict(k_cache=_info((100, 64, 1, 656), "e4m3", strides=(64 * 656, 656, 656, 2))), E.LayoutError),
    (dict(k_cache=_info((100, 64, 1, 656), "e4m3", strides=(64 * 656, 320, 320, 1))), E.LayoutError),  # rows overlap
    (dict(indices=_info((4, 2, 2048), "i64")), E.DTypeError),
    (dict(indices=_info((4, 2, 2000), "i32")), E.ShapeError),
    (dict(causal=True), E.UnsupportedFeatureError),
    (dict(is_fp8_kvcache=1), E.ArgumentTypeError),
    (dict(is_fp8_kvcache=False), E.DTypeError),                                           # an e4m3 cache, flag off
    (dict(is_fp8_kvcache=False, k_cache=_info((100, 64, 1, 656), "u8")), E.DTypeError),
])
def test_fp8_typed_errors(change, error):
    args = _good(**change)
    if error is None:
        p = sd.check_sparse_decode_inputs(**args)
        assert p.fp8 and p.page_size == 64 and p.s_kv == 6400 and p.config(False).fp8
        return
    with pytest.raises(error) as got:
        sd.check_sparse_decode_inputs(**args)
    if change.get("is_fp8_kvcache") is False:
        assert "is_fp8_kvcache=True" in str(got.value)


@pytest.mark.parametrize("splits", [1, 3])
def test_fp8_plan_launches_by_the_contract(monkeypatch, splits):
    from types import SimpleNamespace
    monkeypatch.setattr(sd, "kernel_for", lambda source, cfg: SimpleNamespace(cfg=cfg))
    problem = sd.check_sparse_decode_inputs(**_good(metadata=_info((splits, 8), "i32"), topk_length=_info((4,), "i32"),
                                                    k_cache=_info((100, 64, 1, 656), "e4m3",
                                                                  strides=(65 * 656, 656, 656, 1))))
    plan = sd.build_plan(problem, None, (128 * 576, 576), 656, 2048, 65 * 656)
    first = plan.launches[0]
    cfg = first.kernel.cfg
    # FP8_DECODE_DEFAULT_RULE's kernel (the converter; the gather kernel's launch contract is the same), at 128 heads
    # as FP8_DECODE_CROSSOVER_RULE's crossover_stasync
    plain = dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", topk_length=True, split=splits > 1)
    assert problem.heads == 128 and cfg == dc.fp8_decode_variant(plain, "crossover_stasync")
    assert cfg.fp8_converter and cfg.crossover and cfg.crossover_stasync and (dc.DECODE_KERNEL, cfg) in kernel_sets.mla()
    assert plain.params == cfg.params
    assert list(first.args) == [n for n, _ in cfg.params]
    assert (first.args["kv_stride_s"], first.args["kv_stride_page"], first.args["page_size"]) == (656, 65 * 656, 64)
    assert (first.args["page_mul"], first.args["page_shr"]) == dc.divisor(64)
    assert len(plan.launches) == (2 if splits > 1 else 1)
    assert sd.cache_strides((100, 64, 1, 656), (65 * 656, 656, 656, 1)) == (656, 65 * 656)
    assert sd.cache_strides((1, 1, 1, 656), (5, 7, 656, 1)) == (0, 0)


def test_fp8_host_path_refuses_typed_before_touching_the_device():
    """flash_mla_with_kvcache(is_fp8_kvcache=True, indices=...) with CPU tensors runs the sparse host path
    up to the device check (the FP8 cache checks above follow it)."""
    torch = pytest.importorskip("torch")
    from fa4mlir.testing_mla import quantize_fp8_cache
    q = torch.zeros(2, 1, 64, 576, dtype=torch.bfloat16)
    cache = quantize_fp8_cache(torch.zeros(4, 64, 1, 576, dtype=torch.bfloat16))
    idx = torch.zeros(2, 1, 64, dtype=torch.int32)
    meta, splits = torch.zeros(1, 8, dtype=torch.int32), torch.zeros(3, dtype=torch.int32)
    with pytest.raises(E.DeviceError, match="cuda"):
        mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, splits, is_fp8_kvcache=True, indices=idx)
    with pytest.raises(E.UnsupportedFeatureError, match="not built"):
        mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, splits, is_fp8_kvcache=True, indices=idx,
                                   attn_sink=torch.zeros(64))
