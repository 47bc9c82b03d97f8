"""The KV loop of bench prefill's score_mod and softcap kernels, read from the SASS (deviceless): counts
per loop iteration that fail when the index fold [D-index-fold] or the softcap kernels' exp2 split
[D-sfu-poly] regress, plus the pure pieces (the 2^24 bound, calls_sfu, the host check).

bf16 D128 causal, 128 x 128 persistent (the dense_causal_8k / softcap / alibi rows' kernels), per
consumer thread and KV block (64 S registers; counts of one loop body, ptxas 12.x):

    kernel                         MUFU.EX2  MUFU.TANH  I2FP  FADD  FFMA  instructions
    dense                              66        0        0    64    68      461
    alibi, before the fold             66        0       34    64   132      655
    alibi, index fold                  66        0        2   126   132      656
    alibi, affine fold                 66        0        2    66   192      593   (FMUL 130 -> 68)
    softcap, exp2_poly_stride 0        66       64        0    64    68      589
    softcap, stride 4 (default)        50       64        0   112   116      718
"""
from __future__ import annotations

import collections
from dataclasses import replace

import numpy as np
import pytest

from fa4mlir import lowering, sass
from fa4mlir.attention.checks import check_mod_seqlens
from fa4mlir.attention.errors import ScoreModError
from fa4mlir.kernel_sets import score_mod_kernels
from fa4mlir.kernels.attention_sm90_config import KERNEL, SFU_MOD_POLY_STRIDE, default_config, default_configs
from fa4mlir.kernels.common import score_mod as sm


def _loop_counts(cfg) -> list[collections.Counter]:
    """Opcode counts (MUFU by function, the rest by base opcode) of each KV loop of cfg's kernel."""
    if sass.find_nvdisasm() is None or lowering.find_ptxas() is None:
        pytest.skip("needs ptxas and nvdisasm")
    from fa4mlir.compiler import compile_kernel
    hgmma = cfg.head_dim // 16 + cfg.bn // 16
    out = []
    for loop in sass.wgmma_loops(sass.disassemble(compile_kernel(KERNEL, cfg).cubin)):
        if sum(op.startswith("HGMMA") for op, _ in loop) == hgmma:
            out.append(collections.Counter(op if op.startswith("MUFU") else op.split(".")[0] for op, _ in loop))
    assert out, f"no KV loop of {hgmma} HGMMA in {cfg}"
    return out


def _one(configs):
    (cfg,) = configs   # bench prefill's rows: the long-sequence tiles, one kernel
    return cfg


def test_alibi_kv_loop_converts_two_row_bases_not_every_index():
    """ALiBi's to_f32(kv_idx - q_idx): before the fold, an integer add and an I2FP per distinct
    (row, key) (34 per loop: ptxas merged some); with it, one I2FP per row base, and with the affine
    fold [D-affine-fold] slope * float(kv - q) is fma(slope, offset, slope * row base), the score
    x * mod_scale + that one more FFMA: no FADD or FMUL per score (tests/test_score_mod_affine.py)."""
    dense = _loop_counts(_one(default_configs("bf16", 128, True)))
    alibi_cfg = _one([c for _, c in score_mod_kernels("bf16", 128, True, score_mod=sm.alibi, aux=(("f32", 1),))])
    assert alibi_cfg.exp2_poly_stride == 0   # no SFU op in ALiBi: the dense kernel's exp2
    alibi = _loop_counts(alibi_cfg)
    n_s = alibi_cfg.bn // 2
    for d, a in zip(dense, alibi):
        assert a["I2FP"] + a["I2F"] <= 2, a            # 34 before the fold
        assert a["IADD3"] + a["VIADD"] <= d["IADD3"] + d["VIADD"] + 6, a
        assert a["FADD"] <= d["FADD"] + 2 and a["FMUL"] <= d["FMUL"] + 2, (d, a)
        assert a["MUFU.EX2"] == d["MUFU.EX2"] and a["FFMA"] <= d["FFMA"] + 2 * n_s, (d, a)


def test_softcap_kernel_moves_a_quarter_of_its_exp2_to_the_fma_pipes():
    """The softcap kernel takes SFU_MOD_POLY_STRIDE: per loop 64 tanh.approx and 66 - 64/4 ex2 (the
    polynomial for the rest); its knob-off twin (the prefill-poly0 set) has the dense kernel's 66."""
    # the running-max kernel (the softcap rule gives bf16 caps <= 54.41 the fixed-max one, poly stride 0)
    cfg = _one([c for c in default_configs("bf16", 128, True, softcap=True) if not c.softcap_fixed_max])
    assert cfg.exp2_poly_stride == SFU_MOD_POLY_STRIDE == 4
    n_s = cfg.bn // 2
    on, off = _loop_counts(cfg), _loop_counts(replace(cfg, exp2_poly_stride=0).validate())
    for a, b in zip(on, off):
        assert a["MUFU.TANH"] == b["MUFU.TANH"] == n_s, (a, b)
        assert b["MUFU.EX2"] == n_s + 2                              # P and the two rows' alpha
        assert a["MUFU.EX2"] == b["MUFU.EX2"] - n_s // SFU_MOD_POLY_STRIDE, (a, b)
        assert a["FFMA"] == b["FFMA"] + 3 * n_s // SFU_MOD_POLY_STRIDE, (a, b)   # Horner: three FMAs each


def test_sfu_default_follows_the_function():
    """softcap as a score_mod (tanh) gets the softcap kernel's stride, ALiBi and relative bias none."""
    def via_helper(score, batch, head, q_idx, kv_idx):
        return _helper(score)
    for fn, want in ((sm.alibi, False), (sm.relative_bias, False), (sm._softcap_tanh, True), (via_helper, True),
                     (lambda score, b, h, q, k: sm.exp2(score), True)):
        assert sm.calls_sfu(fn) is want, fn
    fp = sm.softcap_score_mod(30.0).fingerprint()
    assert default_config("bf16", 128, True, score_mod=fp).exp2_poly_stride == SFU_MOD_POLY_STRIDE
    assert default_config("bf16", 128, True, score_mod=sm.fingerprint(sm.alibi), aux="f32x1").exp2_poly_stride == 0
    assert default_config("bf16", 128, True).exp2_poly_stride == 0   # dense kernels unchanged


def _helper(x):
    return sm.log2(x)


def test_index_fold_is_exact_below_two_to_the_24():
    """float32(base) + float32(offset) == float32(base + offset) for |base| < 2^24, |base + offset|
    <= 2^24 (both exact integers in float32); above, the two roundings can differ."""
    rng = np.random.default_rng(0)
    base = rng.integers(-(2**24) + 1, 2**24, 200_000)
    off = rng.integers(-256, 257, base.size)
    keep = np.abs(base + off) <= 2**24
    base, off = base[keep], off[keep]
    assert np.array_equal(base.astype(np.float32) + off.astype(np.float32), (base + off).astype(np.float32))
    big = np.int64(2**25 + 1)
    assert np.float32(big) + np.float32(2) != np.float32(big + 2)    # beyond the bound: not exact


def test_host_refuses_sequences_past_the_fold_bound():
    check_mod_seqlens(sm.MAX_MOD_SEQLEN, 1)
    assert sm.MAX_MOD_SEQLEN + 256 == 2**24
    with pytest.raises(ScoreModError, match="2\\^24 - 256"):
        check_mod_seqlens(1, sm.MAX_MOD_SEQLEN + 1)


def test_index_fold_ir_converts_each_base_once():
    """IndexFold at the IR: kv_idx - q_idx over 2 rows x 4 keys is one subi, one sitofp and an addf per
    distinct nonzero offset (0, 1, 8, 9, -8, -7: five); Value - Index folds too (Index.__rsub__); an
    unsigned conversion folds only for a nonnegative index; any other operation sees base + offset."""
    from fa4mlir.dsl.kernel import KernelBuilder
    from fa4mlir.kernels.common.score_mod_ir import IndexFold
    kb = KernelBuilder("t", arch="sm_90a", block=(128, 1, 1))
    row, col, out = kb.param_i32("row"), kb.param_i32("col"), kb.param_ptr("out")
    with kb.body():
        r = row + 0
        fold = IndexFold()
        q = [fold.index((r, 0), nonneg=True), fold.index((r, 8), nonneg=True)]
        k = [fold.index((col, c), nonneg=True) for c in (0, 1, 8, 9)]
        assert fold.index((col, 8), nonneg=True) is k[2]          # interned: aux loads of one key are shared
        vals = [sm.to_f32(kk - qq) for qq in q for kk in k]
        vals += [sm.to_f32(r - k[1]), k[2].to("f32"), (k[3] * 2).to("f32", signed=True)]
        for i, v in enumerate(vals):
            kb.store(v, kb.gep(out, i, "f32"))
    text = str(kb.finish().module)
    ops = {op: text.count(f"arith.{op} ") for op in ("subi", "sitofp", "uitofp", "addf", "addi", "muli")}
    # kv - q: subi, sitofp, 5 addf; r - k[1]: subi, sitofp, addf; k[2] unsigned: uitofp, addf;
    # k[3] * 2: the i32 col + 9 (addi), muli, sitofp; plus `row + 0`
    assert ops == {"subi": 2, "sitofp": 3, "uitofp": 1, "addf": 7, "addi": 2, "muli": 1}, ops
