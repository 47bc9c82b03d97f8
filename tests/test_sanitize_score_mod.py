"""bench/sanitize.py's score-mod cases without a GPU (bench/sanitize_score_mod.py): the shapes reach the
edges, the kernel check (which kernel flash_attn_func runs for the functions and aux tensors given),
and the child on CPU tensors with fake flash_attn_funcs (right, writes nothing, ignores the functions),
on tests/test_sanitize_children.py's fixture. The matrix's coverage of the score-mods set is checked
there with the rest."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench import sanitize as san
from bench import sanitize_score_mod as ssm
from fa4mlir.kernels import attention_sm90_config as acfg
from tests._sanitize_helpers import child_report, under_sanitizer, verdict
from tests.test_sanitize_children import cpu_child  # noqa: F401 (a fixture)


# ----------------------------------------------------------------------------------------------
# The child on CPU tensors: flash_attn_func replaced by a fake that applies the functions (right),
# writes nothing, or ignores them; the real kernel check and compare_scored
# ----------------------------------------------------------------------------------------------

SCOREMOD_CASES = [c.name for c in san.CASES if c.child == "scoremod"]


def test_scoremod_shapes_reach_the_edges():
    from fa4mlir.testing_score_mod import REL_BIAS_SIZE
    shapes = ssm.SHAPES
    assert any(sq > sk for _, sq, sk, _, _ in shapes) and any(sq < sk for _, sq, sk, _, _ in shapes)
    assert any(h > hk for *_, h, hk in shapes) and any(hk == 1 < h for *_, h, hk in shapes)   # GQA, MQA
    assert any(b > 1 for b, *_ in shapes)
    # offsets kv - q past both ends of the relative bias table: the kernel clamps them into it
    half = REL_BIAS_SIZE // 2
    assert max(sk for _, _, sk, _, _ in shapes) > half + 1 and max(sq for _, sq, _, _, _ in shapes) > half + 1
    for name in SCOREMOD_CASES:
        for m in san.CASES_BY_NAME[name].match:
            cfg = acfg.AttnConfig.from_key(m)
            assert all(sq % cfg.bm and sk % cfg.bn for _, sq, sk, _, _ in shapes), name        # ragged tails
            assert any(acfg.query_tiles(cfg, sq) > 1 and sk > 2 * cfg.bn for _, sq, sk, _, _ in shapes), name


@pytest.fixture
def cpu_scoremod(request, monkeypatch):
    """(bundle, the calls made, the fake's mode: 'right', 'nothing' (writes nothing), 'no-mods'
    (ignores score_mod, mask_mod and the aux tensors)), on test_sanitize_children's cpu_child."""
    import torch

    from fa4mlir import attention
    from fa4mlir.kernels.common import score_mod as sm
    from fa4mlir.testing_score_mod import ModCase, scored_attention, torch_mods
    bundle, *_ = request.getfixturevalue("cpu_child")
    names = {fn: n for n, fn in {**sm.BUILTIN_SCORE_MODS, **sm.BUILTIN_MASK_MODS}.items()}
    calls, mode = [], {"mode": "right"}

    def call(q, k, v, *, causal, score_mod, mask_mod, aux_tensors, out, lse, bundle):
        aux = list(aux_tensors or ())
        calls.append((tuple(q.shape), tuple(k.shape), causal, score_mod and score_mod.fingerprint(),
                      mask_mod and mask_mod.fingerprint(), [(a.dtype, tuple(a.shape)) for a in aux]))
        assert torch.isnan(out).all() and torch.isnan(lse).all()   # poisoned
        if mode["mode"] == "nothing":
            return out
        mc = ModCase("fake", score=names[score_mod.fn] if score_mod else "", mask=names[mask_mod.fn] if mask_mod else "",
                     head_dim=q.shape[-1], causal=causal, cap=score_mod.post_scale if score_mod else 1.0)
        fns = (None, None) if mode["mode"] == "no-mods" else torch_mods(mc, aux)
        o, l_ = scored_attention(q, k, v, q.shape[-1] ** -0.5, causal, *fns, torch.float32)
        out.copy_(o)
        lse.copy_(l_)
        return out

    monkeypatch.setattr(attention, "flash_attn_func", call)
    return bundle, calls, mode


@pytest.mark.parametrize("name", SCOREMOD_CASES)
def test_scoremod_child_runs_the_case_kernels_and_checks_them(cpu_scoremod, capsys, name):
    import torch
    bundle, calls, mode = cpu_scoremod
    case = san.CASES_BY_NAME[name]
    code, rep = child_report(capsys, name, bundle)
    n = len(case.match) * len(ssm.SHAPES)
    assert code == 0 and rep.end["ok"] and rep.end["checks"] == n, rep.results
    assert all(r["ok"] and r["masked_ok"] and r["nan"] == 0 and r["nan_out"] == 0 for r in rep.results), rep.results
    # each kernel on each shape, with its functions and aux tensors of the dtypes and ranks it was built for
    assert [c[0][:3] for c in calls] == [(b, sq, h) for _ in case.match for b, sq, _, h, _ in ssm.SHAPES]
    want = [(m.get("score_mod"), m.get("mask_mod"), m.get("aux", "")) for m in case.match for _ in ssm.SHAPES]
    dt = {torch.float32: "f32", torch.int32: "i32"}
    assert [(c[3], c[4], ",".join(f"{dt[d]}x{len(s)}" for d, s in c[5])) for c in calls] == want
    assert [c[2] for c in calls] == [m["causal"] for m in case.match for _ in ssm.SHAPES]
    assert {r["mod_case"] for r in rep.results} == {ssm.mod_case(m).name for m in case.match}
    if any(m["causal"] for m in case.match):    # causal rows with no key (seqlen_q > seqlen_k)
        assert any(r["masked_rows"] > 0 for r in rep.results)
    assert verdict(under_sanitizer(rep)) == ("clean", f"{n} checks passed")
    mode["mode"] = "nothing"
    code, rep = child_report(capsys, name, bundle)
    assert code == 1 and all(not r["ok"] and r["nan_out"] > 0 for r in rep.results)
    assert verdict(under_sanitizer(rep), 1)[0] == "wrong"
    mode["mode"] = "no-mods"   # a kernel that ignores its function is caught on some shape of each kernel
    code, rep = child_report(capsys, name, bundle)
    assert code == 1
    for m in case.match:
        assert not all(r["ok"] for r in rep.results if r["mod_case"] == ssm.mod_case(m).name), m


def test_scoremod_child_stops_when_the_call_runs_another_kernel(cpu_scoremod, capsys, monkeypatch):
    bundle, calls, _ = cpu_scoremod
    monkeypatch.setattr(ssm, "picked", lambda cfg, *a: replace(cfg, bn=cfg.bn + 16))
    code, rep = child_report(capsys, "scoremod-softcap", bundle)
    assert code == 3 and "would run" in rep.end["error"] and calls == []


def test_scoremod_picked_is_the_case_kernel_and_sees_the_functions():
    """picked: flash_attn_func's kernel for the functions and aux tensors given; other aux dtypes, or
    none, are another kernel."""
    torch = pytest.importorskip("torch")
    from fa4mlir.attention import ScoreModError
    from fa4mlir.testing_score_mod import BY_NAME, aux_arrays, case_mods
    for name, mods, _ in ssm.CASES:
        for mod in mods:
            mc = BY_NAME[mod]
            cfg = acfg.AttnConfig.from_key(ssm.matches([mod])[0])
            aux = [torch.from_numpy(a) for a in aux_arrays(mc)]
            for sk in (130, 300, 520, 100_000):
                assert ssm.picked(cfg, sk, *case_mods(mc), aux) == cfg, (name, mod, sk)
            if any(not a.is_floating_point() for a in aux):   # document ids as float32: another kernel's
                assert ssm.picked(cfg, 300, *case_mods(mc), [a.float() for a in aux]) != cfg
            if any(a.is_floating_point() for a in aux):       # float64 tables: no kernel takes them
                with pytest.raises(ScoreModError):
                    ssm.picked(cfg, 300, *case_mods(mc), [a.double() if a.is_floating_point() else a for a in aux])
    mc = BY_NAME["docmask-alibi-d64-causal"]
    cfg = acfg.AttnConfig.from_key(ssm.matches([mc.name])[0])
    aux = [torch.from_numpy(a) for a in aux_arrays(mc)]
    assert ssm.picked(cfg, 300, case_mods(mc)[0], None, aux[:1]) != cfg     # ALiBi alone: another kernel
