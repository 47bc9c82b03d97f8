"""Deviceless: flash_attn_varlen_func's score_mod= / mask_mod= / aux_tensors= and unequal head dims
(MLA prefill's qk 192 / v 128): the typed errors (raised before any driver call, on CPU tensors),
the problem the checks build (fingerprints, aux sizes, D_v), the kernel config and the launch
contract (aux tensors between the mod scale and the varlen parameters)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fa4mlir  # noqa: E402
from fa4mlir.attention.errors import (DeviceError, HeadDimError, ScoreModError, ShapeError,  # noqa: E402
                                      UnsupportedFeatureError)
from fa4mlir.attention.varlen import _check, varlen_launch  # noqa: E402
from fa4mlir.kernels import attention_sm90_config as acfg  # noqa: E402
from fa4mlir.kernels import attention_sm90_config_varlen as acfg_varlen  # noqa: E402
from fa4mlir.kernels.common import score_mod as sm  # noqa: E402
from fa4mlir.testing_varlen import sequence_bias, sequence_document  # noqa: E402

BF = torch.bfloat16


def _args(lens_q=(3, 0, 5), lens_k=(4, 1, 5), h=4, hk=2, d=64, dv=None):
    cq = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32)
    ck = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.zeros(int(cq[-1]), h, d, dtype=BF)
    k = torch.zeros(int(ck[-1]), hk, d, dtype=BF)
    v = torch.zeros(int(ck[-1]), hk, dv or d, dtype=BF)
    return [q, k, v, cq, ck, max(lens_q), max(lens_k)]


def _raises(exc, words, *args, **kw):
    with pytest.raises(exc) as info:
        fa4mlir.flash_attn_varlen_func(*args, **kw)
    msg = str(info.value)
    assert msg.startswith("flash_attn_varlen_func:"), msg
    for w in words:
        assert w in msg, (w, msg)


def _problem(*a, mods=None, **kw):
    opts = dict(seqused_k=None, page_table=None, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                sinks=None, return_lse=False, out=None, lse=None)
    opts.update(kw)
    return _check(*a, **opts, mods=mods)


def test_mod_errors_are_typed_and_named_for_the_entry_point():
    a = _args()
    _raises(ScoreModError, ["takes 3 positional parameters"], *a, score_mod=lambda s, b, h: s)
    _raises(ScoreModError, ["softcap"], *a, score_mod=sm.alibi, aux_tensors=[torch.ones(4)], softcap=5.0)
    _raises(ScoreModError, ["without a score_mod or mask_mod"], *a, aux_tensors=[torch.ones(4)])
    _raises(ScoreModError, ["takes aux_tensors"], *a, score_mod=sm.alibi)
    _raises(ScoreModError, ["float32 or int32"], *a, score_mod=sm.alibi, aux_tensors=[torch.ones(4, dtype=BF)])
    # every check passes: the CPU tensors are the first thing refused
    _raises(DeviceError, ["CUDA"], *a, score_mod=sm.alibi, aux_tensors=[torch.ones(4)])


def test_mods_with_page_table_are_not_built():
    q = torch.zeros(8, 4, 64, dtype=BF)
    pool = torch.zeros(2, 16, 2, 64, dtype=BF)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    table = torch.zeros(1, 2, dtype=torch.int32)
    _raises(UnsupportedFeatureError, ["page_table", "not built"], q, pool, pool, cu, None, 8, 8, page_table=table,
            mask_mod=sequence_document, aux_tensors=[torch.zeros(1, 8, dtype=torch.int32)])


def test_problem_config_and_launch_carry_the_functions():
    a = _args()
    qb, kb = torch.zeros(3, 5), torch.zeros(3, 5)
    doc = torch.zeros(3, 5, dtype=torch.int32)
    problem, infos = _problem(*a, mods=(sequence_bias, sequence_document, [qb, kb, doc]), causal=True)
    assert problem.score_mod == sm.fingerprint(sequence_bias) and problem.mask_mod == sm.fingerprint(
        sequence_document, "mask")
    assert problem.aux == "f32x2,f32x2,i32x2" and problem.aux_shapes == ((3, 5), (3, 5), (3, 5))
    assert [n for n in infos if n.startswith("aux")] == ["aux0", "aux1", "aux2"] and infos["aux2"][1] is doc
    cfg = acfg_varlen.varlen_config("bf16", 64, True, score_mod=problem.score_mod, mask_mod=problem.mask_mod,
                             aux=problem.aux)
    assert cfg.varlen and cfg.score_mod and cfg.mask_mod and not cfg.persistent

    class _Kernel:   # varlen_launch reads nothing of the kernel but what it passes on
        pass
    launch = varlen_launch(cfg, _Kernel(), problem)
    names = [n for n, _ in acfg.launch_params(cfg)]
    assert names.index("mod_scale") < names.index("aux0") < names.index("o_rows")
    assert launch.grid == acfg.varlen_grid(cfg, problem)


def test_a_softcap_score_mod_keeps_its_scale_fold():
    problem, _ = _problem(*_args(), mods=(sm.softcap_score_mod(4.0), None, None))
    assert problem.mod_scales == (0.25, 4.0) and problem.aux == "" and problem.softcap == 0.0


def test_mla_prefill_head_dims():
    a = _args(d=192, dv=128)
    problem, _ = _problem(*a, causal=True)
    assert (problem.head_dim, problem.head_dim_v, problem.dim_v) == (192, 128, 128)
    assert problem.out_shape == (8, 4, 128)
    assert problem.softmax_scale == pytest.approx(192 ** -0.5)
    cfg = acfg_varlen.varlen_config("bf16", 192, True, head_dim_v=128)
    assert cfg.dim_v == 128 and cfg.varlen and (cfg.bm, cfg.bn) == (128, 128)
    # out must be [total_q, heads, 128]: q-shaped is a ShapeError naming the shape it takes
    _raises(ShapeError, ["(8, 4, 128)"], *a, out=torch.zeros(8, 4, 192, dtype=BF))
    _raises(DeviceError, ["CUDA"], *a, out=torch.zeros(8, 4, 128, dtype=BF))
    # equal dims of the new head dims go through too
    for d in (96, 192):
        problem, _ = _problem(*_args(d=d))
        assert problem.head_dim_v == 0 and problem.out_shape[-1] == d


@pytest.mark.parametrize("d,dv", [(192, 64), (128, 64), (256, 128), (192, 96)])
def test_unsupported_head_dim_pairs_are_head_dim_errors(d, dv):
    _raises(HeadDimError, ["(192, 128)", f"has head_dim {dv}"], *_args(d=d, dv=dv))


def test_fake_tensor_gives_out_v_wide():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fa4mlir.attention import torch_ops
    mode = FakeTensorMode()
    with mode:
        q = torch.empty(8, 4, 192, dtype=BF)
        k = torch.empty(10, 2, 192, dtype=BF)
        v = torch.empty(10, 2, 128, dtype=BF)
        cu = mode.from_tensor(torch.tensor([0, 8], dtype=torch.int32))
        out, lse = torch_ops._flash_attn_varlen_fwd_fake(q, k, v, cu, cu, 8, 10, None, None, True, None)
    assert tuple(out.shape) == (8, 4, 128) and tuple(lse.shape) == (4, 8)


@pytest.mark.parametrize("score,mask", [("sequence_bias", ""), ("alibi", "sequence_document")])
def test_the_reference_tells_positions_in_the_sequence_from_packed_rows(score, mask):
    """compare_varlen_scored on outputs made by the reference itself (rounded to bf16): those of the
    convention pass; those where batch is 0 and q_idx / kv_idx are packed rows (what a kernel that
    passed packed coordinates would compute) fail, so the interpreter and GPU cases can fail."""
    from fa4mlir.testing_score_mod import scored_attention
    from fa4mlir.testing_varlen import compare_varlen_scored, sequences, varlen_aux, varlen_torch_mods
    lq, lk, heads = (5, 0, 40, 1), (9, 3, 40, 30), 2
    gen = torch.Generator().manual_seed(0)
    a = _args(lq, lk, heads, 1, 64)
    q, k, v = (torch.randn(x.shape, generator=gen).to(BF) for x in a[:3])
    cq, ck = a[3], a[4]
    aux = varlen_aux(score, mask, lq, lk, heads)
    if score == "sequence_bias":   # packed rows index these tables too: make them long enough
        aux = [np.tile(x, (1, 4)) for x in aux]
    if mask == "sequence_document":
        aux[-1] = np.tile(aux[-1], (1, 4))
    right = varlen_torch_mods(score, mask, aux, cq)

    def packed(b):   # the functions at packed coordinates: batch 0, rows offset by the sequence's starts
        s_fn, m_fn = varlen_torch_mods(score, mask, aux, [0, 0])(0)
        q0, k0 = int(cq[b]), int(ck[b])
        return ((lambda s, h, qi, kv: s_fn(s, h, qi + q0, kv + k0)) if s_fn else None,
                (lambda h, qi, kv: m_fn(h, qi + q0, kv + k0)) if m_fn else None)

    for fns, ok in ((right, True), (packed, False)):
        out = torch.full((q.shape[0] + 2, heads, 64), float("nan")).to(BF)
        lse = torch.full((heads, q.shape[0] + 2), float("nan"))
        for b, (q0, nq, k0, nk) in enumerate(sequences(cq, ck)):
            o, l_ = scored_attention(q[q0:q0 + nq][None], k[k0:k0 + nk][None], v[k0:k0 + nk][None], 0.125, False,
                                     *fns(b), torch.float64)
            out[q0:q0 + nq], lse[:, q0:q0 + nq] = o[0].to(BF), l_[0].float()
        qp = torch.cat([q, torch.zeros(2, heads, 64, dtype=BF)])
        r = compare_varlen_scored(qp, k, v, out, lse, cq, ck, 0.125, False, right)
        assert r["ok"] is ok, (ok, r)


def test_interpreter_cases_are_the_bundle_sets_kernels():
    """tests/interpret_varlen.py's MOD_CASES run exactly kernel_sets.VARLEN_MOD_CASES' kernels, and its
    HEAD_DIM_CASES kernels of VARLEN_HEAD_DIM_CASES (what the GPU tests run from the bundle)."""
    from fa4mlir.kernel_sets import VARLEN_HEAD_DIM_CASES, VARLEN_MOD_CASES, attention_varlen, varlen_mod_config
    from tests.interpret_varlen import HEAD_DIM_CASES, MOD_CASES, config
    assert {config(c) for c in MOD_CASES} == {varlen_mod_config(r) for r in VARLEN_MOD_CASES}
    heads = {acfg_varlen.varlen_config(dt, d, c, head_dim_v=dv) for dt, d, dv, c in VARLEN_HEAD_DIM_CASES}
    assert {config(c) for c in HEAD_DIM_CASES} <= heads
    shipped = {cfg for _, cfg in attention_varlen()}
    assert heads | {varlen_mod_config(r) for r in VARLEN_MOD_CASES} <= shipped
