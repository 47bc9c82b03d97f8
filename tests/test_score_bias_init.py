"""score_bias_init [D-bias-init] (AttnConfig knob; kernels/common/score_mod_ir.py ModHook.bias_form /
bias, attention_fwd_sm90 _Consumer.s_init): a score_mod that is score + b with b affine in the float32
indices starts the S accumulator at b / mod_scale, the S wgmma accumulates onto it, and the softmax runs
on S with scale_log2 * mod_scale. Checked: the SASS of bench prefill's alibi kernel per KV loop
iteration against the dense kernel and today's ALiBi, 0 spills; the interpreter by the FA rule
(negative and per-head slopes, causal and not, D64 / D128, with a mask_mod, a user spelling); a
function that is not of that form builds today's code (cubin equal but for the kernel name)."""
from __future__ import annotations

import collections
from dataclasses import replace

import numpy as np
import pytest

from fa4mlir import lowering, sass
from fa4mlir.kernels.common import score_mod as sm


def alibi_split(score, batch, head, q_idx, kv_idx, aux_tensors):
    slope = aux_tensors[0][head]
    return score + slope * sm.to_f32(kv_idx) - slope * sm.to_f32(q_idx)


def _art(cfg):
    if sass.find_nvdisasm() is None or lowering.find_ptxas() is None:
        pytest.skip("needs ptxas and nvdisasm")
    from fa4mlir.compiler import compile_kernel
    from fa4mlir.kernels.attention_sm90_config import KERNEL
    return compile_kernel(KERNEL, cfg)


def _loop_counts(cfg) -> list:
    art = _art(cfg)
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    hgmma = cfg.head_dim // 16 + cfg.bn // 16
    out = []
    for loop in sass.wgmma_loops(sass.disassemble(art.cubin)):
        if sum(op.startswith("HGMMA") for op, _ in loop) == hgmma:
            c = collections.Counter(op if op.startswith("MUFU") else op.split(".")[0] for op, _ in loop)
            c["total"] = len(loop)
            out.append(c)
    assert out, f"no KV loop of {hgmma} HGMMA in {cfg}"
    return out


def test_alibi_bias_is_computed_before_the_turn():
    """In both KV loop copies of the knob's alibi kernel ptxas places the bias FFMAs (one per score) at
    the loop's top, among the K / V mbarrier waits and before the turn's BAR and the first HGMMA: off
    the softmax's path (between the S wait and the exp2s only the dense kernel's FFMA per score)."""
    art = _art(_bench_alibi(score_bias_init=True))
    loops = [[op for op, _ in loop] for loop in sass.wgmma_loops(sass.disassemble(art.cubin))
             if sum(op.startswith("HGMMA") for op, _ in loop) == 16]
    assert len(loops) == 2
    for ops in loops:
        first = next(i for i, op in enumerate(ops) if op.startswith("HGMMA"))
        bar = next(i for i, op in enumerate(ops) if op.startswith("BAR"))
        assert bar < first and sum(op.startswith("FFMA") for op in ops[:bar]) >= 60, ops[:first]


def _bench_alibi(**knobs):
    from fa4mlir.kernel_sets import score_mod_kernels
    (cfg,) = [c for _, c in score_mod_kernels("bf16", 128, True, score_mod=sm.alibi, aux=(("f32", 1),))]
    return replace(cfg, **knobs).validate()


def test_alibi_kv_loop_costs_one_ffma_per_score_off_the_softmax():
    """bench prefill's alibi kernel (bf16 D128 causal 128 x 128 persistent), per consumer thread and KV
    loop iteration (64 scores), both copies (unmasked, diagonal): the softmax's FMUL / FADD / MUFU / FMNMX
    are the dense kernel's, the bias one FFMA per score (fma(k', offset, k' * base); offsets 0 and 1
    may read as a move or an FADD) plus the rows' I2F and products; below today's ALiBi (two FFMAs per
    score). ptxas 13.5: 527 / 659 instructions (dense 461 / 594, today's ALiBi 593 / 725), FFMA 128, 0 spills."""
    from fa4mlir.kernels.attention_sm90_config import default_configs
    (dense_cfg,) = default_configs("bf16", 128, True)
    dense, today, binit = _loop_counts(dense_cfg), _loop_counts(_bench_alibi(score_bias_init=False)), _loop_counts(
        _bench_alibi(score_bias_init=True))
    n_s = 64
    assert len(dense) == len(today) == len(binit) == 2
    for d, t, b in zip(dense, today, binit):
        assert b["I2FP"] + b["I2F"] <= 2, b
        for op in ("FMUL", "FADD", "MUFU.EX2", "FMNMX"):
            assert b[op] <= d[op] + 2, (op, d, b)
        assert b["FFMA"] <= d["FFMA"] + n_s, (d, b)             # the bias: one per score
        assert b["total"] <= d["total"] + n_s + 8, (d, b)
        assert b["total"] <= t["total"] - n_s + 8, (t, b)       # today's: two FFMAs per score


def test_score_mods_set_alibi_kernels_take_it_without_spills():
    """The score-mods set's ALiBi kernels (D64 non-causal, D128 causal, D64 causal with a document mask)
    with score_bias_init: 0 spills, and the knob changed their code (fewer FFMA per KV loop)."""
    from fa4mlir.testing_score_mod import BY_NAME, case_config
    for name in ("alibi-d64", "alibi-d128-causal", "docmask-alibi-d64-causal"):
        cfg = case_config(BY_NAME[name])
        on, off = _loop_counts(replace(cfg, score_bias_init=True).validate()), _loop_counts(
            replace(cfg, score_bias_init=False).validate())
        assert all(a["FFMA"] < b["FFMA"] for a, b in zip(on, off)), (name, on, off)


def test_a_function_not_of_the_form_builds_todays_code():
    """relative_bias (score + a loaded value), softcap as a score_mod and a mask_mod alone keep today's
    code under score_bias_init: the KV loops' SASS and the registers are the knob-less kernel's."""
    from fa4mlir.kernel_sets import score_mod_kernels
    for fn, aux, mask in ((sm.relative_bias, (("f32", 2),), None), (sm.softcap_score_mod(30.0), (), None),
                          (sm.alibi, (("f32", 1), ("i32", 1)), sm.document_mask)):
        cfg = score_mod_kernels("bf16", 64, False, score_mod=fn, aux=aux, mask_mod=mask)[0][1]
        if mask is not None:   # ALiBi under a mask_mod does take it: a mask_mod alone does not
            cfg = replace(cfg, score_mod="")
        a, b = _art(replace(cfg, score_bias_init=False).validate()), _art(replace(cfg, score_bias_init=True).validate())
        da, db = sass.disassemble(a.cubin), sass.disassemble(b.cubin)
        loops = [[op for loop in sass.wgmma_loops(d) for op in loop] for d in (da, db)]
        assert loops[0] == loops[1] and loops[0], fn
        assert a.resources["registers"] == b.resources["registers"]


def test_default_config_sets_it_on_score_mod_kernels_only():
    """default_config: every score_mod kernel takes score_bias_init (ALiBi 1.135x -> 1.019x the dense kernel's
    time on an H200, [D-bias-init]); no function, a mask_mod alone and the varlen kernel do not."""
    from fa4mlir.kernels import attention_sm90_config as ac
    from fa4mlir.kernels.attention_sm90_config_varlen import varlen_config
    fp = sm.ScoreMod(sm.alibi).fingerprint()
    assert ac.default_config("bf16", 128, True, 8192, score_mod=fp, aux="f32x1").score_bias_init
    assert not ac.default_config("bf16", 128, True, 8192).score_bias_init
    assert not ac.default_config("bf16", 128, True, 8192, softcap=True, cap=30.0).score_bias_init
    assert not varlen_config("bf16", 128, True, score_mod=fp, aux="f32x1").score_bias_init


def test_the_knob_is_in_the_name_and_key_only_when_set():
    cfg = _bench_alibi(score_bias_init=False)
    on = replace(cfg, score_bias_init=True)
    assert "score_bias_init" not in cfg.key() and on.key()["score_bias_init"] is True
    assert on.score_tag().endswith("_binit") and not cfg.score_tag().endswith("_binit")
    from fa4mlir.kernels.attention_sm90_config import AttnConfig
    assert AttnConfig.from_key(on.key()) == on


def _run(case, aux, cfg, problem, seed=1):
    """tests/test_interpret_score_mod.run_case with the aux arrays given."""
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm90
    from fa4mlir.kernels.attention_sm90_config import grid, launch_args
    from tests.interpret_sm90 import _bits
    rng = np.random.default_rng(seed)
    d = case.head_dim
    t = {"q": _bits(rng.standard_normal((1, case.seqlen_q, case.heads, d), np.float32), case.dtype),
         "k": _bits(rng.standard_normal((1, case.seqlen_k, case.kv_heads, d), np.float32), case.dtype),
         "v": _bits(rng.standard_normal((1, case.seqlen_k, case.kv_heads, d), np.float32), case.dtype),
         "o": np.full((1, case.seqlen_q, case.heads, d), 0x7FC0, np.uint16),
         "lse": np.full((1, case.heads, case.seqlen_q), np.nan, np.float32)}
    t.update({f"aux{i}": a for i, a in enumerate(aux)})
    kernel = interpret.load(attention_fwd_sm90.build(cfg))
    kernel.launch(grid(cfg, problem, num_sms=1 if cfg.persistent else None), launch_args(cfg, problem, t),
                  policy="lazy", seed=seed)
    return t


# (case name, slopes per head or None for the case's own): a negative slope and heads of different signs
# the user's spelling with two addends (slope * kv - slope * q) runs on the D128 causal case
INTERP = [("alibi-d64", [0.3, -0.45], None), ("alibi-d128-causal", None, None),
          ("docmask-alibi-d64-causal", [-0.2, 0.7], None), ("alibi-d128-causal", [-0.6, 0.05], alibi_split)]


@pytest.mark.parametrize("name,slopes,fn", INTERP, ids=[f"{n}-{fn.__name__ if fn else 'builtin'}" for n, _, fn in INTERP])
def test_bias_init_through_the_interpreter(name, slopes, fn):
    """FA rule against the float64 reference (compare_scored: out and LSE) with score_bias_init: per-head
    slopes of either sign, non-causal D64, causal D128 (the diagonal's masked copy), a mask_mod on top."""
    torch = pytest.importorskip("torch")
    from fa4mlir.testing_score_mod import BY_NAME, aux_arrays, case_config, case_problem, compare_scored
    from tests.test_interpret_sm90 import _tensor
    case = BY_NAME[name]
    aux = aux_arrays(case)
    if slopes is not None:
        aux[0] = np.array(slopes, np.float32)
    cfg, problem = case_config(case), case_problem(case)
    if fn is not None:
        fp = sm.fingerprint(fn)
        cfg, problem = replace(cfg, score_mod=fp), replace(problem, score_mod=fp)
    cfg = replace(cfg, score_bias_init=True).validate()
    t = _run(case, aux, cfg, problem)
    q, k, v, o = (_tensor(t[n], case.dtype) for n in ("q", "k", "v", "o"))
    report = compare_scored(case, q, k, v, o, torch.from_numpy(t["lse"]), aux)
    assert report["ok"], report


@pytest.mark.parametrize("spec", ["", "score_bias_init=True", "score_bias_init=False"])
def test_prefill_poly0_serves_every_row_with_and_without_the_knob(spec):
    """`bench prefill --bundle B --workloads softcap_sink,alibi --prefill-tiles "score_bias_init=True"` on a
    bundle of `--set prefill-poly0`: each row's call (dense causal 8k, sink, softcap, alibi) finds exactly
    its kernel by plan.select's rule (select_entry on the manifest's configs, then the override check),
    with the knob and without (score_bias_init is a VARIANT_FIELD: absent means False)."""
    from fa4mlir.attention import plan
    from fa4mlir.kernel_sets import prefill_poly
    from fa4mlir.kernels import attention_sm90_config as ac
    entries = [{"arch": "sm_90a", "name": c.score_tag(), "key": str(i), "config": {**c.key(), "cubin_backend": "ptxas"}}
               for i, (_, c) in enumerate(prefill_poly(0))]
    rows = {"dense": {}, "sink": dict(sinks=True), "softcap": dict(softcap=True),
            "alibi": dict(score_mod=sm.ScoreMod(sm.alibi).fingerprint(), aux="f32x1")}
    fields = plan.tile_override(spec)
    for kw in rows.values():
        default = ac.default_config("bf16", 128, True, 8192, **kw)
        want = replace(default, **fields).validate() if fields else default
        got = ac.AttnConfig.from_key(plan.select_entry(entries, "bf16", 128, True, default=want)["config"])
        assert got.score_bias_init == want.score_bias_init and got.score_mod == want.score_mod
        assert (got.sinks, got.softcap) == (want.sinks, want.softcap)
