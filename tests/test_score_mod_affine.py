"""The affine fold of a score_mod's float32 indices [D-affine-fold] (kernels/common/score_mod_ir.py):
the score arrives as x * mod_scale kept lazy, float32(index) as float(base) + offset, and
c * float32(index) as fma(c, offset, c * float(base)) with c * float(base) once per base, so ALiBi
in any of its spellings is two FMAs per score and no FMUL or FADD. Checked at the IR (op counts of 2
rows x 4 keys), in the SASS of bench prefill's alibi kernel (per KV loop iteration) and by the
interpreter (user spellings of ALiBi, the FA rule against float64)."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from fa4mlir import lowering, sass
from fa4mlir.kernels.common import score_mod as sm


class _Slopes:
    """aux_tensors[0] of the IR tests: [head] gives the slope parameter (a plain float32 Value)."""

    def __init__(self, slope):
        self.slope = slope

    def __getitem__(self, idx):
        return self.slope


def alibi_plain(score, batch, head, q_idx, kv_idx, aux_tensors):
    return score + aux_tensors[0][head] * sm.to_f32(kv_idx - q_idx)


def alibi_reversed(score, batch, head, q_idx, kv_idx, aux_tensors):
    return sm.to_f32(kv_idx - q_idx) * aux_tensors[0][head] + score


def alibi_fma_index_first(score, batch, head, q_idx, kv_idx, aux_tensors):
    return sm.fma(sm.to_f32(kv_idx - q_idx), aux_tensors[0][head], score)


def alibi_negated(score, batch, head, q_idx, kv_idx, aux_tensors):
    return score - aux_tensors[0][head] * sm.to_f32(q_idx - kv_idx)


def alibi_split(score, batch, head, q_idx, kv_idx, aux_tensors):
    slope = aux_tensors[0][head]
    return score + slope * sm.to_f32(kv_idx) - slope * sm.to_f32(q_idx)


def _ir_ops(fn) -> dict:
    """fn applied as ModHook.apply applies it, to 2 rows (own bases) x keys (col, 0 1 8 9); counts of
    the float ops it emitted."""
    from fa4mlir.dsl import Value
    from fa4mlir.dsl.kernel import KernelBuilder
    from fa4mlir.kernels.common import score_mod_ir as smi
    kb = KernelBuilder("t", arch="sm_90a", block=(128, 1, 1))
    r0, col, out = kb.param_i32("row"), kb.param_i32("col"), kb.param_ptr("out")
    x, scale, slope = kb.param_f32("x"), kb.param_f32("scale"), kb.param_f32("slope")
    with kb.body():
        slope = Value(slope.v)   # as an aux load gives it: a plain Value (a Param's * comes first)
        rows = [r0 + 0, r0 + 8]
        xs = [x + float(i) for i in range(8)]
        fold = smi.IndexFold()
        sm._DSL.append(smi._MOD_DSL)
        try:
            i = 0
            for r in rows:
                for c in (0, 1, 8, 9):
                    q, k = fold.index((r, 0), nonneg=True), fold.index((col, c), nonneg=True)
                    s = Value(fn(smi.FScore(fold, xs[i], scale), 0, 0, q, k, [_Slopes(slope)]).v)
                    kb.store(s, kb.gep(out, i, "f32"))
                    i += 1
        finally:
            sm._DSL.pop()
    text = str(kb.finish().module)
    return {op: text.count(f"{op} ") for op in ("arith.mulf", "arith.addf", "arith.subf", "math.fma",
                                                 "arith.sitofp", "arith.subi", "math.tanh")}


# 8 scores - 8 from xs' own addf; per row: kv - q (subi), its float (sitofp), slope * it (mulf); one
# fma per nonzero key offset (3 per row) and one per score
ALIBI_IR = {"arith.mulf": 2, "arith.addf": 8, "arith.subf": 0, "math.fma": 6 + 8, "arith.sitofp": 2,
            "arith.subi": 2, "math.tanh": 0}


@pytest.mark.parametrize("fn", [sm.alibi, alibi_plain, alibi_reversed, alibi_fma_index_first],
                         ids=lambda f: f.__name__)
def test_alibi_spellings_are_two_fmas_per_score_at_the_ir(fn):
    assert _ir_ops(fn) == ALIBI_IR


def test_other_forms_at_the_ir():
    """score - c * float(q - kv): the slope negated once, then the same fmas; score + a number: one
    fma per score (a launch argument or a load: as written, test_a_loaded_addend_is_added_as_written);
    a use of the score other than + / - (tanh, *) multiplies first, as before; an index
    used as an integer (here a comparison) is not folded into floats."""
    assert _ir_ops(alibi_negated) == {**ALIBI_IR, "arith.mulf": 3}
    assert _ir_ops(lambda s, b, h, q, k, aux: s + 1.5) == {**ALIBI_IR, "arith.mulf": 0, "math.fma": 8,
                                                           "arith.sitofp": 0, "arith.subi": 0}
    assert _ir_ops(lambda s, b, h, q, k, aux: sm.tanh(s)) == {**ALIBI_IR, "arith.mulf": 8, "math.fma": 0,
                                                              "arith.sitofp": 0, "arith.subi": 0,
                                                              "math.tanh": 8}
    split = _ir_ops(alibi_split)   # one sitofp per base (col, two rows), a product each, 3 key offsets
    assert split["arith.sitofp"] == 3 and split["arith.mulf"] == 3 and split["math.fma"] == 8 + 3, split


def test_scaled_index_error_is_bounded_by_the_base_product():
    """fma(c, offset, round(c * base)) against c * (base + offset) in float64: at most one rounding
    of c * base plus half an ulp of the result, far below the FA rule's tolerance at any sequence
    length the host allows (|base| < 2^24)."""
    rng = np.random.default_rng(0)
    c = rng.uniform(-1, 1, 100_000).astype(np.float32)
    base = rng.integers(-(2**24) + 256, 2**24 - 256, c.size).astype(np.float32)
    off = rng.integers(-256, 257, c.size).astype(np.float32)
    cb = (c * base).astype(np.float32)
    got = (c.astype(np.float64) * off + cb).astype(np.float32).astype(np.float64)   # fma: one rounding
    exact = c.astype(np.float64) * (base.astype(np.float64) + off)
    bound = np.abs(cb) * 2.0 ** -24 + np.abs(got) * 2.0 ** -24
    assert (np.abs(got - exact) <= bound).all()


def _loop_counts(cfg) -> list:
    if sass.find_nvdisasm() is None or lowering.find_ptxas() is None:
        pytest.skip("needs ptxas and nvdisasm")
    from fa4mlir.compiler import compile_kernel
    from fa4mlir.kernels.attention_sm90_config import KERNEL
    hgmma = cfg.head_dim // 16 + cfg.bn // 16
    out = []
    for loop in sass.wgmma_loops(sass.disassemble(compile_kernel(KERNEL, cfg).cubin)):
        if sum(op.startswith("HGMMA") for op, _ in loop) == hgmma:
            c = collections.Counter(op if op.startswith("MUFU") else op.split(".")[0] for op, _ in loop)
            c["total"] = len(loop)
            out.append(c)
    assert out, f"no KV loop of {hgmma} HGMMA in {cfg}"
    return out


def _bench_kernel(fn, aux=(("f32", 1),)):
    from fa4mlir.kernel_sets import score_mod_kernels
    (cfg,) = [c for _, c in score_mod_kernels("bf16", 128, True, score_mod=fn, aux=aux)]
    return cfg


def test_alibi_kv_loop_is_two_ffma_per_score():
    """bench prefill's alibi kernel (bf16 D128 causal 128 x 128 persistent), per consumer thread and KV
    block (64 scores): against the same kernel without a score_mod, one FFMA for the score
    (x * mod_scale + bias) and one for the bias (slope * offset + slope * base) per score, the row
    bases' I2F and slope * base twice per block; no FMUL or FADD per score (before [D-affine-fold]:
    +64 FMUL, +62 FADD, +64 FFMA, 656 instructions; now 593, the dense kernel 461). The user's
    `score + slope * to_f32(kv_idx - q_idx)` gives the built-in's loop."""
    from fa4mlir.kernels.attention_sm90_config import default_configs
    (dense_cfg,) = default_configs("bf16", 128, True)
    dense = _loop_counts(dense_cfg)
    cfg = _bench_kernel(sm.alibi)
    alibi = _loop_counts(cfg)
    n_s = cfg.bn // 2
    for d, a in zip(dense, alibi):
        assert a["I2FP"] + a["I2F"] <= 2, a
        assert a["FMUL"] <= d["FMUL"] + 2, (d, a)              # slope * row base, twice
        assert a["FADD"] <= d["FADD"] + 2, (d, a)              # fma(slope, 1, b) may read as an FADD
        float_ops = sum(a[k] - d[k] for k in ("FMUL", "FADD", "FFMA"))
        assert float_ops <= 2 * n_s + 2, (d, a)
        assert a["MUFU.EX2"] == d["MUFU.EX2"] and a["FMNMX"] == d["FMNMX"], (d, a)
        assert a["total"] <= d["total"] + 2 * n_s + 8, (d, a)
    assert _loop_counts(_bench_kernel(alibi_plain)) == alibi


def test_a_loaded_addend_is_added_as_written():
    """score + table[...] (relative bias) keeps the multiply and the add (score_mod_ir._addend: as the
    score fma's addend, the load spilled 8 bytes at D64 192 x 128): the PTX of the set's kernel is
    that of the plain x * mod_scale + load."""
    from fa4mlir.dsl import Value
    from fa4mlir.kernels.common import score_mod_ir as smi
    assert not smi._addend(Value.__new__(Value)) and smi._addend(2.0) and not smi._addend(True)
    ops = _ir_ops(lambda s, b, h, q, k, aux: s + aux[0][h])
    assert ops["arith.mulf"] == 8 and ops["math.fma"] == 0 and ops["arith.addf"] == 16, ops


@pytest.mark.parametrize("fn", [alibi_negated, alibi_split], ids=lambda f: f.__name__)
def test_alibi_spellings_through_the_interpreter(fn):
    """User spellings that take the lazy paths the built-in does not (score - c * x; a product per
    index, then a subtraction) give ALiBi by the FA rule (the built-in case's shape, tensors and
    float64 reference; causal D128, two KV blocks, ragged tails)."""
    from dataclasses import replace

    from fa4mlir.kernels.attention_sm90_config import default_config
    from fa4mlir.testing_score_mod import BY_NAME, case_aux_spec, case_problem
    from tests.test_interpret_score_mod import run_case
    case = BY_NAME["alibi-d128-causal"]
    fp = sm.fingerprint(fn)
    cfg = default_config(case.dtype, case.head_dim, case.causal, None, score_mod=fp, aux=case_aux_spec(case))
    problem = replace(case_problem(case), score_mod=fp)
    _check_case(case, run_case(case, cfg=cfg, problem=problem))


def _check_case(case, run):
    import torch

    from fa4mlir.testing_score_mod import compare_scored
    from tests.test_interpret_sm90 import _tensor
    t, aux = run
    q, k, v, o = (_tensor(t[n], case.dtype) for n in ("q", "k", "v", "o"))
    report = compare_scored(case, q, k, v, o, torch.from_numpy(t["lse"]), aux)
    assert report["ok"], report
