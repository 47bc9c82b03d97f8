"""The sm_90a softcap kernel's opt-in variants [D-softcap-fold] (AttnConfig.softcap_fold_q, softcap_tanh,
softcap_fixed_max; kernel_sets.SOFTCAP_VARIANTS): the pieces they emit and the notes on their math.

`scale_bf16_rows(kb, base, chunks, chunk_stride, rows_bytes, t, threads, scale)`: every bf16 of
`chunks` runs of `rows_bytes` bytes (run c at base + c * chunk_stride) becomes
bf16(float32(x) * scale), round to nearest even: each 16-byte unit is loaded by one of `threads`
threads (`t` its index), its eight bf16 widened exactly (bf16 is float32's upper half: a shift and a
mask on the integer pipe), multiplied in float32 and packed back (cvt.rn.bf16x2.f32). The element
order inside a unit does not matter, so any swizzle is fine. The caller fences the stores to the
async proxy and syncs the threads before a wgmma reads the tile (as e4m3_tile.emit_convert's callers).

`tanh_pairs(xs)`: tanh two values at a time through tanh.approx.f16x2 (softcap_tanh 'f16x2').

Note "Q fold" (softcap_fold_q): the softcap kernel computes t = tanh(S * softmax_scale / cap) with one
FMUL per score in the KV loop. With the fold each consumer warpgroup scales its 64 Q rows by
softcap_scale once per query tile instead, so S already is the tanh's argument. The rounding of
Q' = bf16(q * scale) adds a relative error of at most 2^-9 per Q element, the size of the bf16 rounding
of S that torch's own bf16 computation makes; bf16 keeps float32's exponent range, so small scales
(large caps) lose no precision. f16 would flush q * scale below 2^-14 to subnormals: the config
refuses it.

Note "Pairs" (softcap_tanh 'f16x2'): two scores rounded to f16 (|x| past 65504 becomes inf, whose tanh
is the saturated +-1), one tanh.approx.f16x2, both halves widened exactly. On sm_90a ptxas runs the
pair as two MUFU.TANH.F16 (ptxas 13.0), so it saves no SFU op; it is kept to time whether the f16
form is faster on the SFU than MUFU.TANH (f32).

Note "Fixed max" (softcap_fixed_max): a capped score is t = tanh(x) in units of the cap, |t| <= 1, so
every row's softmax may run relative to a fixed max instead of its running max: p = exp2(t C - M) with
C = cap log2 e and M a launch argument (softcap_max_log2 = C m: m = 1 up to cap 43.3, below 1 past it;
common/softcap_rule.py, note "Runtime max", has the bounds p in [2^-125, 2^32] and FIXED_MAX_CAP 54.41).
No row max (FMNMX, shuffles), no alpha exp2s, no rescale of O and l; in the epilogue M stands for m C,
so LSE = (M + log2 l) ln 2, except that with sinks a row that saw no key (l = 0) takes -inf, as the
online softmax leaves it: else a sink far below M (2^(sink - M) under 2^-126) would flush to 0 and give
LSE +inf instead of the sink. Exact as long as every p stays a normal float32 (ex2.approx.ftz and the
polynomial flush below 2^-126); launch_args refuses larger caps. P goes to the P.V GEMM in bf16, whose
exponent range is float32's (f16 would flush small p: refused).
"""
from __future__ import annotations

from ...dialect import builders as fa4
from ...dsl import Value, vec

UNIT = 16   # bytes per thread access: eight bf16


def _scale_word(word: Value, scale: Value) -> Value:
    """Two bf16 (an i32, low half first) times the float32 `scale`, rounded to bf16x2."""
    lo = (word << 16).bitcast("f32")
    hi = (word & -65536).bitcast("f32")
    return vec(lo * scale, hi * scale).to(("bf16", 2)).bitcast("i32")


def scale_bf16_rows(kb, base: Value, chunks: int, chunk_stride: int, rows_bytes: int, t: Value, threads: int,
                    scale: Value) -> None:
    """Module docstring: `chunks` runs of `rows_bytes` bytes from `base` (an i8 SMEM pointer), run c at
    c * chunk_stride bytes, scaled in place by `threads` threads (`t` in [0, threads))."""
    if rows_bytes % (UNIT * threads):
        raise ValueError(f"scale_bf16_rows: {rows_bytes} bytes per run is not a multiple of {UNIT} x {threads} threads")
    for c in range(chunks):
        for u in range(rows_bytes // (UNIT * threads)):
            ptr = kb.gep(base, t * UNIT + (c * chunk_stride + u * UNIT * threads), "i8")
            words = kb.load(ptr, ("i32", 4), align=UNIT)
            kb.store(vec(*[_scale_word(words[w], scale) for w in range(4)]), ptr, align=UNIT)


def tanh_pairs(xs: list) -> list:
    """tanh of float32 values two at a time (AttnConfig.softcap_tanh 'f16x2'): each pair rounded to f16x2,
    one tanh.approx.f16x2 (fa4.tanh_f16x2), each half widened back to float32 exactly. f16 holds every
    tanh input the softcap needs: |x| past 65504 rounds to inf, whose tanh is the +-1 the saturated tanh
    is; below 2^-14 the subnormals' absolute error (2^-24) is far under the scores' own rounding."""
    if len(xs) % 2:
        raise ValueError(f"tanh_pairs: an even number of values, got {len(xs)}")
    out = []
    for a, b in zip(xs[::2], xs[1::2]):
        t = Value(fa4.tanh_f16x2(vec(a, b).to(("f16", 2)).bitcast("i32")))
        out += [(t & 0xFFFF).to("i16").bitcast("f16").to("f32"), (t >> 16).to("i16").bitcast("f16").to("f32")]
    return out


__all__ = ["scale_bf16_rows", "tanh_pairs", "UNIT"]
