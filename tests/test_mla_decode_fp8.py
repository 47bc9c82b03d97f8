"""Deviceless: absorbed MLA decode over FlashMLA's FP8 latent cache (656-byte token rows:
flash_mla_with_kvcache(..., is_fp8_kvcache=True); attention_mla_decode_sm90 note "FP8 latent",
common/mla_fp8.py).

* the FP8 kernels of the `mla` set compile with no spills, their SMEM plan (one staging stage,
  config note "FP8 SMEM plan") within the 227 KiB, one TMA box of whole 656-byte rows;
* the lane map reads and writes every byte once, without shared-memory bank conflicts (note
  "FP8 lanes"), counted on the kernel's own formulas;
* the interpreter runs the kernel on tiny problems (NaN bytes and scales in every unused row and
  page, lengths 0, 1, page + 1, causal seqlen_q 2, two M tiles, 16-row boxes, split and unsplit)
  against the float64 reference over the cache dequantized exactly as the kernel does
  (testing_mla.dequantize_fp8_cache: FlashMLA's dequantize_k_cache), by the FA rule;
* the typed errors for wrong FP8 cache dtypes, shapes and strides, before anything runs.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fa4mlir import kernel_sets
from fa4mlir.attention import errors as E
from fa4mlir.attention import mla
from fa4mlir.kernels import attention_mla_decode_sm90_config as mc
from fa4mlir.kernels.common import mla_fp8
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import info as _info
from tests._mla_helpers import interpret_decode, lower_clean, paged_latent

FP8_ENTRIES = [e for e in kernel_sets.mla() if e[0] == mc.KERNEL and e[1].fp8]


# ---- config, SMEM plan, compile ------------------------------------------------------------------

def test_fp8_config_rules():
    cfg = mc.default_config("bf16", 64, fp8=True).validate()
    assert cfg.stages == 1 and cfg.stage_bytes() == 64 * 656 and cfg.smem_bytes() <= mc.SMEM_LIMIT
    assert cfg.name().endswith("bf16_fp8_b64") and cfg.key()["fp8"] is True
    assert "fp8" not in mc.default_config("bf16", 64).key()      # the 16-bit kernels' keys as before
    # two stages do not fit next to Q, the bf16 tile and the exchange
    assert cfg.smem_bytes() + cfg.stage_bytes() > mc.SMEM_LIMIT
    for bad in (dict(dtype="f16"), dict(swap_ab=16)):
        with pytest.raises(ConfigError):
            replace(cfg, **bad).validate()
    assert mla_fp8.ROW_BYTES == mc.FP8_ROW_BYTES == 656 and mla_fp8.ROW_WORDS * 4 == 656


@pytest.mark.parametrize("entry", FP8_ENTRIES, ids=lambda e: e[1].name())
def test_fp8_set_compiles_clean(entry):
    name, cfg = entry
    art = lower_clean(name, cfg)
    assert cfg.smem_bytes() <= art.smem_bytes <= mc.SMEM_LIMIT, (art.smem_bytes, cfg.smem_bytes())
    assert [(p.name, p.kind) for p in art.params] == list(cfg.params)
    (tma,) = [p for p in art.params if p.kind == "tma"]
    assert tma.tma.box == (164, 1, cfg.box_rows, 1) and tma.tma.swizzle == "none" and tma.tma.dtype == "i32"


# ---- the lane map (note "FP8 lanes") --------------------------------------------------------------

def test_lane_map_covers_each_byte_once_without_bank_conflicts():
    bn = mc.BN
    latent, rope = {}, {}
    for w in range(2):
        for i in range(mla_fp8.latent_passes(bn)):
            for q0 in range(0, 128, 8):
                loads, stores, scales = set(), [set(), set()], set()
                for t in range(q0, q0 + 8):
                    row, piece = mla_fp8.latent_slot(t, w, i)
                    latent[(row, piece)] = latent.get((row, piece), 0) + 1
                    loads.add((mla_fp8.stage_offset(row, piece * 16) // 16) % 8)
                    scales.add((mla_fp8.stage_offset(row, 512 + 4 * (piece * 16 // 128)) // 4) % 32)
                    for h in (0, 1):
                        stores[h].add((mla_fp8.tile_offset(row, piece * 16 + 8 * h, bn) // 16) % 8)
                assert len(loads) == 8 and len(scales) == 8 and all(len(s) == 8 for s in stores)
        for i in range(mla_fp8.rope_passes(bn)):
            for q0 in range(0, 128, 8):
                loads, stores = set(), set()
                for t in range(q0, q0 + 8):
                    row, unit = mla_fp8.rope_slot(t, w, i, bn)
                    rope[(row, unit)] = rope.get((row, unit), 0) + 1
                    loads.add((mla_fp8.stage_offset(row, 528 + 16 * unit) // 16) % 8)
                    stores.add((mla_fp8.tile_offset(row, 512 + 8 * unit, bn) // 16) % 8)
                assert len(loads) == 8 and len(stores) == 8
    # the kernel addresses pass i as pass 0's addresses + i x pass_steps (mla_fp8.emit_dequant)
    for kind, slot_of, col_of, at, passes in (
            ("latent", lambda t, w, i: mla_fp8.latent_slot(t, w, i), lambda p: 16 * p, lambda p: 16 * p,
             mla_fp8.latent_passes(bn)),
            ("rope", lambda t, w, i: mla_fp8.rope_slot(t, w, i, bn), lambda u: 512 + 8 * u, lambda u: 528 + 16 * u,
             mla_fp8.rope_passes(bn))):
        step, tile_step = mla_fp8.pass_steps(kind)
        for w in range(2):
            for t in range(128):
                r0, p0 = slot_of(t, w, 0)
                for i in range(passes):
                    r, p = slot_of(t, w, i)
                    assert p == p0 and mla_fp8.stage_offset(r, at(p)) == mla_fp8.stage_offset(r0, at(p)) + i * step
                    assert mla_fp8.tile_offset(r, col_of(p), bn) == mla_fp8.tile_offset(r0, col_of(p), bn) + i * tile_step
    assert sorted(latent) == [(r, p) for r in range(bn) for p in range(32)] and set(latent.values()) == {1}
    assert sorted(rope) == [(r, u) for r in range(bn) for u in range(8)] and set(rope.values()) == {1}
    # the swizzled offsets: 16-bit column c of row r in chunk c // 64 (common/mla_sm90's layout)
    assert mla_fp8.tile_offset(3, 512 + 8, bn) == 8 * bn * 128 + 3 * 128 + (1 ^ 3) * 16


# ---- the interpreter ------------------------------------------------------------------------------

def _problem(torch, lens, seqlen_q, heads, page, seed=0):
    """q (bf16), the FP8 cache (NaN bytes and scales in every row no sequence owns), a shuffled block
    table (junk past each sequence's pages) and the lengths."""
    from fa4mlir.testing_mla import quantize_fp8_cache
    q, kv, table, lens_a = paged_latent(torch, lens, seqlen_q, heads, page, seed, scale=3)
    return q.bfloat16(), quantize_fp8_cache(kv.bfloat16()), table, lens_a


@pytest.mark.parametrize("lens,seqlen_q,heads,page,splits,causal", [
    ((65, 0, 1), 2, 16, 64, 2, True),       # split kernel + combine; lengths page + 1, 0, 1
    ((70, 3), 2, 48, 16, 1, True),          # unsplit; two M tiles (96 rows); 16-row boxes
    ((130, 9), 1, 16, 64, 1, False),        # unsplit, seqlen_q 1, three tiles
])
def test_fp8_decode_through_the_interpreter(lens, seqlen_q, heads, page, splits, causal):
    torch = pytest.importorskip("torch")
    from fa4mlir.testing_mla import check_mla, dequantize_fp8_cache
    q, cache, table, lens_a = _problem(torch, lens, seqlen_q, heads, page)
    batch = len(lens)
    problem = mla.check_mla_inputs(_info(q.shape), _info(cache.shape, "e4m3"), _info(table.shape, "i32"),
                                   _info(lens_a.shape, "i32"), 512, _info((splits, 8), "i32"),
                                   _info((batch + 1,), "i32"), causal=causal, is_fp8_kvcache=True)
    cfg, combine = mla.configs_for(problem)
    assert cfg.fp8 and cfg.unsplit == (splits == 1) and (combine is None) == cfg.unsplit
    words = cache.view(torch.uint8).numpy().view(np.int32)                  # [num_pages, page, 1, 164]
    out_t, lse_t = interpret_decode(torch, problem, cfg, combine, q, words, table, lens_a, page)
    errs = check_mla(q, dequantize_fp8_cache(cache), table, lens_a, out_t, lse_t, causal=causal)
    assert errs["out"] > 0


# ---- typed errors ---------------------------------------------------------------------------------

def _good(**kw):
    args = dict(q=_info((2, 1, 16, 576)), k_cache=_info((8, 64, 1, 656), "e4m3"), block_table=_info((2, 4), "i32"),
                cache_seqlens=_info((2,), "i32"), head_dim_v=512, metadata=_info((3, 8), "i32"),
                num_splits=_info((3,), "i32"), is_fp8_kvcache=True)
    args.update(kw)
    return args


@pytest.mark.parametrize("change,error", [
    (dict(), None),
    (dict(k_cache=_info((8, 64, 1, 656), "u8")), None),                                 # a uint8 view: the same bytes
    (dict(k_cache=_info((8, 64, 1, 656), "e4m3", strides=(65 * 656, 656, 656, 1))), None),  # quantize_k_cache's padding
    (dict(q=_info((2, 1, 16, 576), "f16")), E.DTypeError),                             # FP8: q must be bf16
    (dict(k_cache=_info((8, 64, 1, 656), "bf16")), E.DTypeError),
    (dict(k_cache=_info((8, 64, 1, 656), "i8")), E.DTypeError),
    (dict(k_cache=_info((8, 64, 1, 576), "e4m3")), E.ShapeError),                       # no scales / rope: not FlashMLA's
    (dict(k_cache=_info((8, 64, 656), "e4m3")), E.ShapeError),
    (dict(k_cache=_info((8, 64, 2, 656), "e4m3")), E.HeadsRatioError),
    (dict(k_cache=_info((8, 4, 1, 656), "e4m3")), E.LayoutError),                       # page size 4
    (dict(k_cache=_info((8, 64, 1, 656), "e4m3", strides=(64 * 660, 660, 660, 1))), E.LayoutError),    # 660: not 16 B
    (dict(k_cache=_info((8, 64, 1, 656), "e4m3", strides=(64 * 656, 656, 656, 2))), E.LayoutError),
    (dict(k_cache=_info((8, 64, 1, 656), "e4m3", strides=(64 * 656, 328, 328, 1))), E.LayoutError),    # rows overlap
    (dict(is_fp8_kvcache=1), E.ArgumentTypeError),
    (dict(is_fp8_kvcache=False), E.DTypeError),                                          # an e4m3 cache, flag off
])
def test_fp8_typed_errors(change, error):
    args = _good(**change)
    if error is None:
        problem = mla.check_mla_inputs(**args)
        assert problem.fp8 and mla.configs_for(problem)[0].fp8
        return
    with pytest.raises(error):
        mla.check_mla_inputs(**args)


def test_fp8_refused_before_launch_and_metadata_taken():
    """flash_mla_with_kvcache(is_fp8_kvcache=True) with CPU torch tensors runs the host path up to the
    device check (the cache checks above follow it: check_mla_inputs); get_mla_metadata checks the flag
    (tests/gpu runs it)."""
    torch = pytest.importorskip("torch")
    from fa4mlir.testing_mla import quantize_fp8_cache
    q = torch.zeros(2, 1, 16, 576, dtype=torch.bfloat16)
    cache = quantize_fp8_cache(torch.zeros(4, 64, 1, 576, dtype=torch.bfloat16))
    rest = (torch.zeros(2, 2, dtype=torch.int32), torch.zeros(2, dtype=torch.int32), 512,
            torch.zeros(1, 8, dtype=torch.int32), torch.zeros(3, dtype=torch.int32))
    with pytest.raises(E.DeviceError, match="cuda"):
        mla.flash_mla_with_kvcache(q, cache, *rest, is_fp8_kvcache=True)
    with pytest.raises(E.ArgumentTypeError):
        mla.get_mla_metadata(torch.zeros(2, dtype=torch.int32), 16, 1, is_fp8_kvcache="yes")
    # the operand the kernel's TMA reads: the same bytes as 164 int32 words a row
    words = mla.kv_operand(torch, cache, True)
    assert words.dtype == torch.int32 and words.shape == (4, 64, 1, 164) and words.data_ptr() == cache.data_ptr()
