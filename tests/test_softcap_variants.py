"""Deviceless: the sm_90a softcap kernel's opt-in variants [D-softcap-fold] (AttnConfig.softcap_fold_q,
softcap_tanh, softcap_fixed_max; kernel_sets.SOFTCAP_VARIANTS, the prefill-softcap-variants set): their
configs and keys, interpreter numerics by the FA rule at the bench's cap (30), small caps (0.5, 2) and
large ones (1000; 43, near FIXED_MAX_CAP, for the fixed max, with rows whose every score sits far below
the cap) with inputs that make the cap bend the scores, and the KV loop's SASS (the fold removes the
multiply per score, the fixed max the row max and O's rescale; tanh.approx.f16x2 is still one MUFU per
score on sm_90a)."""
from __future__ import annotations

import collections
from dataclasses import replace

import numpy as np
import pytest

from fa4mlir import kernel_sets, lowering, sass
from fa4mlir.attention.plan import tile_override
from fa4mlir.attention.problem import AttnProblem
from fa4mlir.kernel_sets import RUNNING_MAX_FIELDS
from fa4mlir.kernels.attention_sm90_config import (FIXED_MAX_CAP, KERNEL, SFU_MOD_POLY_STRIDE, AttnConfig, default_config,
                                                   default_configs, launch_args)
from fa4mlir.kernels.common.constants import LOG2E
from fa4mlir.kernels.common.softcap_rule import SOFTCAP_FIXED_FIELDS, softcap_choice
from fa4mlir.kernels.common.fields import ConfigError


def _softcap(d=128, causal=True):
    return default_configs("bf16", d, causal, softcap=True)[0]


def test_variant_fields_stay_out_of_the_default_kernels_keys():
    base = _softcap()
    assert "softcap_fold_q" not in base.key() and "softcap_tanh" not in base.key()
    fold = replace(base, softcap_fold_q=True, softcap_tanh="f16x2").validate()
    assert fold.key()["softcap_fold_q"] is True and fold.key()["softcap_tanh"] == "f16x2"
    assert AttnConfig.from_key(fold.key()) == fold and AttnConfig.from_key(base.key()) == base
    assert "_softcap_qfold_tanhf16x2" in fold.score_tag() and "qfold" not in base.score_tag()


@pytest.mark.parametrize("fields", [dict(softcap=False, softcap_fold_q=True), dict(dtype="f16", softcap_fold_q=True),
                                    dict(softcap=False, softcap_tanh="f16x2"), dict(softcap_tanh="bf16x2"),
                                    dict(dtype="f16", softcap_fixed_max=True),
                                    dict(softcap_fixed_max=True, rescale_threshold=8.0),
                                    dict(softcap_fixed_max=True, rescale_before_pv=True)],
                         ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
def test_variant_fields_refused_where_not_built(fields):
    with pytest.raises(ConfigError):
        replace(_softcap(), **fields).validate()


def test_variant_set_and_its_bench_specs():
    """The set holds the softcap_sink rows' defaults and one kernel per SOFTCAP_VARIANTS entry, and
    softcap_variant_specs() parses (attention.plan.tile_override) back into those entries."""
    entries = kernel_sets.SETS["prefill-softcap-variants"]()
    cfgs = [c for k, c in entries if k == KERNEL]
    base = _softcap()
    assert default_configs("bf16", 128, True)[0] in cfgs and base in cfgs
    specs = kernel_sets.softcap_variant_specs().split(";")
    assert [tile_override(s) for s in specs] == list(kernel_sets.SOFTCAP_VARIANTS)
    for fields in kernel_sets.SOFTCAP_VARIANTS:
        assert replace(base, **fields).validate() in cfgs


def test_fixed_max_refuses_caps_whose_p_would_leave_float32s_normal_range():
    cfg = replace(_softcap(), softcap_fixed_max=True).validate()
    problem = AttnProblem.of((1, 256, 1, 128), (1, 256, 1, 128), "bf16", causal=True)
    tensors = {n: n for n in ("q", "k", "v", "o", "lse")}
    assert 54.4 < FIXED_MAX_CAP < 54.42
    for cap in (0.5, 30.0, 43.0, 50.0, 54.4):   # M = min(C, 125 - C): p in [2^-125, 2^32] (note "Runtime max")
        c = cap * LOG2E
        m = launch_args(cfg, replace(problem, softcap=cap), tensors)["softcap_max_log2"]
        assert m == pytest.approx(min(c, 125.0 - c)) and c + m <= 125.0 + 1e-9 and c - m <= 32.0 + 1e-9, cap
    assert launch_args(cfg, replace(problem, softcap=30.0), tensors)["softcap_max_log2"] == 30.0 * LOG2E   # m = 1
    with pytest.raises(ConfigError, match="caps up to"):
        launch_args(cfg, replace(problem, softcap=54.5), tensors)
    assert "softcap_max_log2" not in launch_args(_softcap(), replace(problem, softcap=80.0), tensors)   # any cap


@pytest.mark.parametrize("dtype,cap,fixed", [("bf16", 30.0, True), ("bf16", 50.0, True), ("bf16", FIXED_MAX_CAP, True),
                                              ("bf16", 54.5, False), ("bf16", 1000.0, False), ("f16", 30.0, False)])
def test_softcap_rule_picks_the_kernel_from_the_float_cap(dtype, cap, fixed):
    """default_config's softcap rule (common/softcap_rule.py): bf16 caps up to FIXED_MAX_CAP run the fixed-max
    kernel (fold, fixed max, every exp2 on the SFU) at every head dim and tile pick; f16 and larger caps the
    running-max kernel; both are in default_configs (so in every set with the softcap kernel)."""
    for d, causal in ((64, False), (128, True), (128, False), (256, True)):
        for seqlen_k in (None, 1):
            cfg = default_config(dtype, d, causal, seqlen_k, softcap=True, cap=cap)
            want = SOFTCAP_FIXED_FIELDS if fixed else dict(RUNNING_MAX_FIELDS, exp2_poly_stride=SFU_MOD_POLY_STRIDE)
            assert {k: getattr(cfg, k) for k in want} == want, (d, causal, seqlen_k, cfg)
            assert cfg in default_configs(dtype, d, causal, softcap=True)
            assert softcap_choice(cfg, cap).startswith(f"softcap {cap:g}: {'fixed' if fixed else 'running'}-max kernel")
    assert default_config(dtype, 128, True, softcap=True) == default_configs(dtype, 128, True, softcap=True)[0]
    assert not default_config("bf16", 128, True, softcap=True).softcap_fixed_max   # no cap given: any cap's kernel


def test_the_varlen_kernel_keeps_the_running_max():
    """The fold is not built in the varlen kernel (ConfigError), so varlen softcap calls run the running-max kernel."""
    from fa4mlir.kernels.attention_sm90_config_varlen import varlen_config
    cfg = varlen_config("bf16", 128, True, softcap=True)
    assert cfg.softcap and not cfg.softcap_fixed_max and not cfg.softcap_fold_q
    with pytest.raises(ConfigError):
        replace(cfg, **SOFTCAP_FIXED_FIELDS).validate()


INTERP_CASES = [  # (variant fields, cap, q gain[, aligned]): gain 8 puts s * scale at ~8 sigma, where cap 30 bends it
    (dict(softcap_fold_q=True), 30.0, 8.0),
    (dict(softcap_fold_q=True), 2.0, 1.0),
    (dict(softcap_fold_q=True), 1000.0, 8.0),
    (dict(softcap_tanh="f16x2"), 30.0, 8.0),
    (dict(softcap_tanh="f16x2"), 0.5, 3.0),
    (dict(softcap_fold_q=True, softcap_tanh="f16x2", exp2_poly_stride=2), 30.0, 8.0),
    (dict(softcap_fold_q=True, exp2_poly_stride=3), 1000.0, 8.0),
    (dict(softcap_fixed_max=True), 30.0, 8.0),
    (dict(softcap_fixed_max=True), 0.5, 3.0),
    (dict(softcap_fixed_max=True, softcap_fold_q=True, exp2_poly_stride=0), 43.0, 8.0, True),
    (dict(softcap_fixed_max=True, softcap_fold_q=True, exp2_poly_stride=2), 30.0, 8.0),
    (dict(softcap_fixed_max=True, softcap_fold_q=True), 2.0, 1.0),
    # the runtime max (note "Runtime max"): M < C past cap 43.3, p up to 2^(2C - 125) on the even rows
    (SOFTCAP_FIXED_FIELDS, 30.0, 8.0, True),
    (SOFTCAP_FIXED_FIELDS, 50.0, 8.0),
    (SOFTCAP_FIXED_FIELDS, 50.0, 8.0, True),
    (SOFTCAP_FIXED_FIELDS, FIXED_MAX_CAP, 8.0, True),
    (dict(softcap_fixed_max=True, softcap_fold_q=True, exp2_poly_stride=2), FIXED_MAX_CAP, 8.0, True),   # poly, x > 0
]


@pytest.mark.parametrize("case", INTERP_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c[0].items())
                         + f"-cap{c[1]:g}-gain{c[2]:g}{'-aligned' if c[3:] else ''}")
def test_variant_numerics_through_the_interpreter(case):
    pytest.importorskip("torch")
    from tests.softcap_variants import run_variant
    fields, cap, gain, *aligned = case
    report = run_variant(replace(_softcap(), **fields).validate(), 130, 200, cap, gain, aligned=bool(aligned))
    assert report["ok"] and report["nan_out"] == 0, report


def test_fold_in_one_persistent_cta_through_both_q_stages():
    """One CTA runs all four query tiles (two causal pairs): each tile's Q is folded in its own stage."""
    pytest.importorskip("torch")
    from tests.softcap_variants import run_variant
    cfg = replace(_softcap(), softcap_fold_q=True, softcap_fixed_max=True).validate()
    assert cfg.persistent and cfg.q_stages == 2
    report = run_variant(cfg, 500, 500, 30.0, 8.0, num_sms=1)
    assert report["ok"] and report["nan_out"] == 0, report


@pytest.mark.parametrize("sink,cap", [(2.0, 30.0), (60.0, 30.0), (-60.0, 30.0), (2.0, 50.0), (60.0, FIXED_MAX_CAP),
                                      (-60.0, FIXED_MAX_CAP)])
def test_fixed_max_with_sinks_and_rows_that_see_no_key(sink, cap):
    """The epilogue's sink merge with the fixed max (a = M: cap log2 e at cap 30, 125 - cap log2 e past 43.3):
    ordinary, dominant and negligible sinks; seqlen_q > seqlen_k, so causal rows 0..29 see no key (O = 0,
    LSE = the sink)."""
    pytest.importorskip("torch")
    from tests.softcap_variants import run_variant
    cfg = default_config("bf16", 128, True, softcap=True, sinks=True, cap=cap)
    assert cfg.softcap_fixed_max and cfg.softcap_fold_q
    report = run_variant(cfg, 130, 100, cap, 8.0, sinks=sink)
    assert report["ok"] and report["nan_out"] == 0 and report["masked_rows"] > 0 and report["masked_ok"], report


def test_fold_with_three_warpgroups_one_tile_per_cta():
    """D64's 192 x 128 one-tile-per-CTA softcap kernel: three warpgroups, each its own barrier."""
    pytest.importorskip("torch")
    from tests.softcap_variants import run_variant
    cfg = replace(_softcap(64, False), softcap_fold_q=True).validate()
    assert cfg.consumers == 3 and not cfg.persistent
    report = run_variant(cfg, 200, 300, 5.0, 4.0)
    assert report["ok"] and report["nan_out"] == 0, report


def test_tanh_f16x2_interpreter_model():
    from fa4mlir.interpret.numeric import tanh_f16x2
    x = np.array([0.5, -3.0, 1e-6, 70000.0], np.float32)
    with np.errstate(over="ignore"):   # 70000 rounds to f16 inf, as cvt.rn.f16x2.f32 does
        x16 = x.astype(np.float16)
    words = x16.view(np.uint16).astype(np.uint32)
    got = tanh_f16x2((words[0::2] | (words[1::2] << 16)).view(np.int32)).view(np.uint32)
    halves = np.stack([got & 0xFFFF, got >> 16], axis=1).reshape(-1).astype(np.uint16).view(np.float16)
    want = np.tanh(x16.astype(np.float32)).astype(np.float16)   # tanh(inf) = 1
    assert np.array_equal(halves, want) and halves[3] == 1.0


def _loop_counts(cfg) -> list:
    if sass.find_nvdisasm() is None or lowering.find_ptxas() is None:
        pytest.skip("needs ptxas and nvdisasm")
    from fa4mlir.compiler import compile_kernel
    art = compile_kernel(KERNEL, cfg)
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    hgmma = cfg.head_dim // 16 + cfg.bn // 16
    loops = [collections.Counter(op if op.startswith("MUFU") else op.split(".")[0] for op, _ in loop)
             for loop in sass.wgmma_loops(sass.disassemble(art.cubin))
             if sum(op.startswith("HGMMA") for op, _ in loop) == hgmma]
    assert loops
    return loops


def test_fold_drops_the_multiply_per_score_and_f16x2_keeps_one_mufu_per_score():
    """Per KV loop (bf16 D128 causal 128 x 128 persistent, 64 S registers): the fold has 64 FMUL
    fewer and the same MUFU; tanh.approx.f16x2 runs as 64 MUFU.TANH.F16 (one per score, not per pair)
    plus the f16 packs (F2FP) and widenings (HADD2)."""
    base = _softcap()
    n_s = base.bn // 2
    ref = _loop_counts(base)
    fold = _loop_counts(replace(base, softcap_fold_q=True).validate())
    pair = _loop_counts(replace(base, softcap_fold_q=True, softcap_tanh="f16x2").validate())
    for r, f, p in zip(ref, fold, pair):
        assert f["FMUL"] == r["FMUL"] - n_s and f["MUFU.TANH"] == r["MUFU.TANH"] == n_s, (r, f)
        assert f["MUFU.EX2"] == r["MUFU.EX2"] and f["FFMA"] == r["FFMA"], (r, f)
        assert p["MUFU.TANH"] == 0 and p["MUFU.TANH.F16"] == n_s and p["FMUL"] == f["FMUL"], p
        assert p["F2FP"] == f["F2FP"] + n_s // 2 and p["HADD2"] >= n_s, (f, p)


def test_fixed_max_drops_the_row_max_and_the_rescale():
    """Per KV loop: no FMNMX (row max), no O rescale; with the fold no FMUL at all; every exp2 on the
    SFU at stride 0 (64, the alpha exp2s gone too)."""
    base = _softcap()
    n_s = base.bn // 2
    loops = _loop_counts(replace(base, softcap_fixed_max=True, softcap_fold_q=True, exp2_poly_stride=0).validate())
    for fixed in loops:
        assert fixed["FMNMX"] == 0 and fixed["FMUL"] == 0 and fixed["SHFL"] == 0, fixed
        assert fixed["MUFU.EX2"] == n_s and fixed["MUFU.TANH"] == n_s, fixed
    # the runtime max M (a parameter, note "Runtime max") costs the loops nothing: 375 / 508 instructions, as
    # the compile-time m = 1 kernel's (966029b, ptxas 13.0) [D-softcap-rule]
    assert [sum(c.values()) for c in loops] == [375, 508], loops


def test_bundle_selection_keeps_the_default_and_finds_each_variant():
    """flash_attn_func's bundle query (attention.plan.select_entry) among the prefill-softcap-variants
    set: the default softcap kernel without FA4MLIR_PREFILL_TILES, the variant asked for with it."""
    from fa4mlir.attention.plan import select_entry
    base = _softcap()
    cfgs = [c for k, c in kernel_sets.SETS["prefill-softcap-variants"]() if k == KERNEL]
    entries = [{"arch": "sm_90a", "key": f"{i:02d}".ljust(64, "0"), "config": {**c.key(), "cubin_backend": "ptxas"}}
               for i, c in enumerate(cfgs)]

    def picked(cfg):
        return AttnConfig.from_key(select_entry(entries, "bf16", 128, True, default=cfg)["config"])
    assert picked(base) == base
    for fields in kernel_sets.SOFTCAP_VARIANTS:
        want = replace(base, **fields).validate()
        assert picked(want) == want, fields


@pytest.mark.parametrize("dtype,cap,fixed", [("bf16", 30.0, True), ("bf16", 50.0, True), ("bf16", 60.0, False),
                                              ("f16", 30.0, False)])
def test_plan_asks_for_the_rules_kernel_and_says_which(monkeypatch, dtype, cap, fixed):
    """attention.plan.select passes the call's float cap to default_config: the kernel asked of the source is
    the rule's, its launch carries M (fixed max only), and Plan.describe names the kernel and the reason;
    FA4MLIR_PREFILL_TILES with RUNNING_MAX_FIELDS asks for the running-max kernel (A/B)."""
    from types import SimpleNamespace

    from fa4mlir.attention import plan
    from fa4mlir.driver import DeviceInfo

    class Source:
        def __init__(self):
            self.asked = []

        def kernel(self, cfg):
            self.asked.append(cfg)
            return SimpleNamespace(artifact=SimpleNamespace(config=cfg.key(), name="k" + cfg.score_tag()))
    monkeypatch.delenv(plan.PREFILL_TILES_ENV, raising=False)
    problem = replace(AttnProblem(1, 4096, 4096, 8, 8, 128, dtype, True, 128 ** -0.5), softcap=cap)
    device = DeviceInfo(0, (9, 0), 132, 50 * 2**20)
    source = Source()
    chosen = plan.select(problem, device, source)
    assert source.asked[0].softcap_fixed_max == fixed and source.asked[0].softcap_fold_q == fixed
    assert ("softcap_max_log2" in chosen.launches[0].args) == fixed
    text = chosen.describe()
    assert ("_qfold_fixmax" in text) == fixed and f"{'fixed' if fixed else 'running'}-max kernel" in text, text
    monkeypatch.setenv(plan.PREFILL_TILES_ENV, kernel_sets.softcap_variant_specs().split(";")[0])
    source = Source()
    plan.select(problem, device, source)
    assert source.asked[0] == default_config(dtype, 128, True, 4096, softcap=True)   # the running-max kernel


def test_the_runtime_max_is_what_keeps_rows_near_minus_cap(monkeypatch):
    """At cap 54.41 with M = C (the old compile-time m = 1) the rows whose every score sits near -cap get
    p = 2^(-2C) < 2^-126, flushed: their l is 0 and the FA rule fails (LSE +inf); with the runtime M they pass
    (test_variant_numerics_through_the_interpreter's aligned case)."""
    pytest.importorskip("torch")
    from fa4mlir.kernels import attention_sm90_config
    from tests.softcap_variants import run_variant
    monkeypatch.setattr(attention_sm90_config, "fixed_max_log2", lambda cap: cap * LOG2E)
    cfg = default_config("bf16", 128, True, softcap=True, cap=30.0)
    report = run_variant(cfg, 130, 200, FIXED_MAX_CAP, 8.0, aligned=True)
    assert not report["ok"] and not report["lse_finite"], report
