"""The FP8 decode's bit conversion (DecodeConfig.convert_bits, FP8_VARIANTS "bits" (K and V) and
"bits_v" (V only, K by cvt); common/e4m3_tile.py, note "Bit conversion"), without a GPU:

* every one of the 256 e4m3 codes, in every byte position of a word, through the kernel's own
  constants (PRMT selectors, shift, mask) and a PRMT written from the PTX ISA's text: the f16 is the
  e4m3 value times 2^-8 exactly (normal, subnormal, +-0), the NaN codes +-480 x 2^-8, as
  testing_kvcache.e4m3_decode(nan=E4M3_BITS_NAN) says;
* the interpreter's prmt.b32 (interpret.numeric.prmt) against the same PTX reading;
* the kernel through the interpreter: the same bits as the default (cvt) kernel on a case without
  NaN codes in the valid range (the 2^8 folded into S's and O's scales is exact), and by the FA rule,
  with finite output, where NaN codes sit inside the valid range (the reference reads them as +-480);
  every scale granularity by the FA rule: tests/test_interpret_decode_sm90.py (VARIANT_CASES);
* SASS (when nvdisasm is installed): the `bits` KV loops issue no e4m3 cvt (F2FP.F16.E4M3), two
  PRMT per four bytes, and no spills; `bits_v` half of each; the default's loops issue the cvts;
* configs: the variant's name and key, default keys without the field, errors.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fa4mlir.interpret.numeric import prmt
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels.common import e4m3_tile
from fa4mlir.kernels.common.fields import ConfigError
from fa4mlir.testing_kvcache import E4M3_BITS_NAN, E4M3_VALUES, e4m3_decode


def _prmt_ptx(a: int, b: int, selector: int) -> int:
    """prmt.b32 d, a, b, c by the PTX ISA's text (default mode), one word: byte k of d is byte
    c_k & 7 of {b, a} (b4..b7 = b's bytes), c_k the k-th nibble of c; c_k's msb set: that byte's
    sign replicated over the 8 bits."""
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    d = 0
    for k in range(4):
        c = (selector >> (4 * k)) & 0xF
        byte = src[c & 7]
        if c & 8:
            byte = 0xFF if byte & 0x80 else 0
        d |= byte << (8 * k)
    return d


def _bits_of_word(word: int) -> list[int]:
    """The kernel's conversion (e4m3_tile.e4m3x4_bits) of one word: four f16 bit patterns, byte 0 first."""
    out = []
    for selector in e4m3_tile.BITS_SELECTORS:
        pair = (_prmt_ptx(word, word, selector) << e4m3_tile.BITS_SHIFT) & e4m3_tile.BITS_MASK
        out += [pair & 0xFFFF, pair >> 16]
    return out


def test_every_e4m3_code_converts_exactly_in_every_byte_position():
    rng = np.random.default_rng(5)
    nan = (np.arange(256) & 0x7F) == 0x7F
    for pos in range(4):
        for code in range(256):
            others = [int(x) for x in rng.integers(0, 256, 3)]
            data = others[:pos] + [code] + others[pos:]
            word = sum(x << (8 * i) for i, x in enumerate(data))
            f16 = np.array(_bits_of_word(word), np.uint16).view(np.float16).astype(np.float32)
            got = f16 * np.float32(e4m3_tile.BITS_SCALE)
            want = e4m3_decode(np.array(data, np.uint8), nan=E4M3_BITS_NAN)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (pos, hex(code), got, want)
    # the table itself: the finite codes are E4M3_VALUES (signed zeros included), NaN codes +-480
    codes = np.arange(256, dtype=np.uint8)
    bits = e4m3_decode(codes, nan=E4M3_BITS_NAN)
    assert np.array_equal(bits[~nan].view(np.uint32), E4M3_VALUES[~nan].view(np.uint32))
    assert bits[0x7F] == 480.0 and bits[0xFF] == -480.0 and np.signbit(bits[0x80]) and not np.signbit(bits[0])
    # subnormals (exponent field 0) and the extremes, spelled out
    assert [float(e4m3_decode(np.uint8(c), nan=E4M3_BITS_NAN)) for c in (0x01, 0x07, 0x08, 0x7E, 0xFE)] == \
        [2.0 ** -9, 7 * 2.0 ** -9, 2.0 ** -6, 448.0, -448.0]


def test_against_torch_float8():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8_e4m3fn")
    codes = np.arange(256, dtype=np.uint8)
    ref = torch.from_numpy(codes).view(torch.float8_e4m3fn).float().numpy()
    words = codes.view(np.uint32)
    got = np.array([v for w in words for v in _bits_of_word(int(w))], np.uint16).view(np.float16).astype(np.float32)
    got = got * np.float32(e4m3_tile.BITS_SCALE)
    finite = np.isfinite(ref)
    assert np.array_equal(got[finite].view(np.uint32), ref[finite].view(np.uint32))
    assert (np.abs(got[~finite]) == E4M3_BITS_NAN).all()


def test_interpreter_prmt_is_the_ptx_reading():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32)
    selectors = list(e4m3_tile.BITS_SELECTORS) + [0x3210, 0x7654, 0x0000, 0xFFFF, 0x5410, 0x1404] + \
        [int(x) for x in rng.integers(0, 1 << 16, 16)]
    for sel in selectors:
        got = prmt(a.view(np.int32), b.view(np.int32), sel).view(np.uint32)
        want = np.array([_prmt_ptx(int(x), int(y), sel) for x, y in zip(a, b)], np.uint32)
        assert np.array_equal(got, want), hex(sel)
    # 0x9180: bytes 0, 1 of a into lanes, each with its sign bit replicated over the lane's high byte
    assert _prmt_ptx(0x0000_8001, 0, 0x9180) == 0xFF80_0001
    assert _prmt_ptx(0x0000_80FF, 0, 0x9180) == 0xFF80_FFFF


# ---- the kernel through the interpreter ---------------------------------------------------------

@pytest.mark.parametrize("variant,page,grain", [("bits", 16, "block"), ("bits", None, "kv_head"),
                                                ("bits_v", None, "block")])
def test_bits_kernel_gives_the_default_kernels_bits(variant, page, grain, monkeypatch):
    """Powers of two commute with every rounding: the f16 tiles x 2^-8 and the scales x 2^8 give the
    cvt kernel's O and LSE bit for bit (the interpreter's wgmma: float64 products, one float32
    rounding), with block scales (2^8 on S's scale and O's 1 / l) and per-KV-head ones (on k_scale
    and v_scale). (The FA rule alone would pass a scale off by 1/256.)"""
    pytest.importorskip("torch")
    from tests.test_interpret_decode_sm90 import _case, _interpret
    c = _case(page, grain, seed=2)
    # "smem": the cvt kernel these variants change (the default rule's swap AB for kv_head scales here)
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, "smem")
    out_default, lse_default = _interpret(page, grain, c, "smem")
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, variant)
    out_bits, lse_bits = _interpret(page, grain, c, variant)
    assert np.isfinite(out_bits).all()
    assert np.array_equal(out_bits.view(np.uint32), out_default.view(np.uint32))
    assert np.array_equal(lse_bits.view(np.uint32), lse_default.view(np.uint32))


@pytest.mark.parametrize("page,grain", [(None, "kv_head")])
def test_nan_codes_inside_the_lengths_read_as_480(page, grain, monkeypatch):
    """e4m3fn NaN codes inside a sequence's valid range: the bit conversion reads them as +-480 times
    their scale (the cvt kernel's output would be NaN there); the reference dequantises the same way."""
    pytest.importorskip("torch")
    from tests.test_interpret_decode_sm90 import _case, _check
    c = _case(page, grain, seed=4)
    for name, rows in (("k", (3, 70, 140)), ("v", (5, 64, 149))):
        for i, t in enumerate(rows):
            c[f"{name}_cache"][0, t, i % 2, (7 * i) % 128] = 0x7F if i % 2 else 0xFF
    c["k_cache"][1, 36, 1, 0] = 0x7F                   # the last valid token of the second sequence
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, "bits")
    out, _ = _check(page, grain, "bits", c, nan=E4M3_BITS_NAN)
    assert np.isfinite(out).all()


# ---- SASS, configs ------------------------------------------------------------------------------

def _kv_loops(variant: str, page, grain: str):
    sass_mod = pytest.importorskip("fa4mlir.sass")
    if sass_mod.find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed")
    from bench.sass_decode_fp8 import loop_row, loops
    from fa4mlir.compiler import compile_kernel
    cfg = dec.fp8_variant(dec.default_config("bf16", 128, page, grain), variant, page)
    art = compile_kernel(dec.KERNEL, cfg)
    rows = [loop_row(x) for x in loops(sass_mod.disassemble(art.cubin))]
    return cfg, art.resources, [r for r in rows if r["hgmma"]]


@pytest.mark.parametrize("page,grain", [(None, "kv_head"), (16, "block")])
def test_bits_loops_issue_no_e4m3_cvt(page, grain):
    cfg, resources, kv = _kv_loops("bits", page, grain)
    assert resources["spill_stores"] == 0 and resources["spill_loads"] == 0 and resources["stack_bytes"] == 0
    assert not resources["wgmma_serialized"]
    words = cfg.bn * cfg.head_dim * 2 // (4 * e4m3_tile.THREADS)       # K and V words a thread converts per tile
    assert kv and all(r["cvt_e4m3"] == 0 and r["prmt"] == 2 * words for r in kv), kv
    _, resources, half = _kv_loops("bits_v", page, grain)              # K: 2 cvts a word, V: 2 PRMTs
    assert resources["spill_stores"] == 0 and resources["spill_loads"] == 0
    assert half and all(r["cvt_e4m3"] == words and r["prmt"] == words for r in half), half
    _, _, default = _kv_loops("smem", page, grain)
    assert default and all(r["cvt_e4m3"] == 2 * words and r["prmt"] == 0 for r in default), default


def test_bits_variant_config():
    cfg = dec.default_config("bf16", 128, 16, "kv_head")
    bits = dec.fp8_variant(cfg, "bits", 16)
    assert bits == replace(cfg, convert_bits="kv") and bits.name() == cfg.name() + "_bits"
    assert bits.key()["convert_bits"] == "kv" and "convert_bits" not in cfg.key()
    assert bits.ctas_per_sm == cfg.ctas_per_sm and bits.stages == cfg.stages
    half = dec.fp8_variant(cfg, "bits_v", 16)
    assert half.convert_bits == "v" and half.name() == cfg.name() + "_bitsv"
    with pytest.raises(ConfigError, match="convert_bits"):
        dec.DecodeConfig(convert_bits="kv").validate()      # a bf16 cache
    with pytest.raises(ConfigError, match="convert_bits"):
        replace(cfg, convert_bits="k").validate()
    with pytest.raises(ConfigError, match="cp.async gather"):
        dec.fp8_variant(dec.default_config("bf16", 128, 1, "block"), "bits", 1)


def test_runtime_config_picks_bits(monkeypatch):
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, "bits")
    assert dec.runtime_config("bf16", 128, None, "block").convert_bits == "kv"
    assert dec.runtime_config("bf16", 128, None, "block", unsplit=True).name().endswith("_bits_unsplit")
    assert dec.runtime_config("bf16", 128, None) == dec.default_config("bf16", 128, None)   # bf16 cache


def test_bit_conversion_is_unscaled_f16_only():
    from fa4mlir.dsl import KernelBuilder
    kb = KernelBuilder("bits_scaled", arch="sm_100a", block=(128, 1, 1))
    with kb.body(), pytest.raises(ValueError, match="unscaled f16"):
        e4m3_tile.emit_convert(kb, kb.thread_idx(0), [(None, None, None, lambda row: row)], 64, 128, "bf16", bits=True)
