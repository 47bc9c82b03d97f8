"""bench/sanitize.py's sparse MLA prefill cases without a GPU (bench/sanitize_mla_sparse.py): the inputs
reach the edges, the kernel check (which kernel flash_mla_sparse_fwd runs), and the child on CPU tensors
with fake flash_mla_sparse_fwds (right, writes nothing, ignores topk_length, ignores the sinks), on
tests/test_sanitize_children.py's fixture. The matrix's coverage of the mla set is checked there with
the rest."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench import sanitize as san
from bench import sanitize_matrix as smx
from bench import sanitize_mla_sparse as sps
from fa4mlir import kernel_sets
from tests._sanitize_helpers import child_report
from tests.test_sanitize_children import cpu_child  # noqa: F401 (a fixture)

SPARSE_CASES = [c.name for c in san.CASES if c.child == "mla-sparse"]


def test_every_sparse_entry_is_one_case_and_one_is_quick():
    sparse = [cfg.key() for k, cfg in kernel_sets.mla() if k == sps.sc.KERNEL]
    assert len(sparse) == 24         # bf16 kv: the rule's (overlapped pair fill) 4, the pair fill's 4, the tile-order
                                     # seesaw's 4, the tile step's 4 and
                                     # 4 with the producer warpgroup; FP8: 4
    for key in sparse:
        assert [c.name for c in san.CASES if key in c.match] in ([n] for n in SPARSE_CASES), key
    assert [c.name for c in san.select_cases(True, None) if c.child == "mla-sparse"] == ["mla-sparse"]
    feats = set().union(*(smx.features(sps.sc.KERNEL, m) for m in san.CASES_BY_NAME["mla-sparse"].match))
    assert feats == {"sparse-bf16", "sparse-topk_length", "sparse-sinks", "sparse-seesaw", "sparse-pwg"}
    assert {f for c in san.CASES for f in c.families if f.startswith("attention_mla_sparse_sm90")} == {sps.sc.KERNEL}
    # drop either case and an entry is no case's; drop the quick one and its features are missed
    runnable = [(k, cfg.key()) for k, cfg in kernel_sets.mla() if k == sps.sc.KERNEL]
    assert san.uncovered(runnable, [c for c in san.CASES if c.name != "mla-sparse-topklen-or-sinks"]) == []
    assert san.uncovered(runnable, [c for c in san.CASES if c.child != "mla-sparse"]) == [
        sps.sc.KERNEL, "sparse-bf16", "sparse-fp8", "sparse-pwg", "sparse-seesaw", "sparse-sinks", "sparse-topk_length"]
    only_plain = [replace(c, match=c.match[:1]) if c.child == "mla-sparse" else c for c in san.CASES]
    assert san.uncovered(runnable, only_plain) == ["sparse-sinks"]     # (True, False) left of the second case


@pytest.mark.parametrize("flags", [(False, False), (True, True)])
def test_sparse_inputs_reach_the_edges(flags):
    for s_q, heads, topk, s_kv in sps.SHAPES:
        assert 3 <= s_q <= 5 and heads in (64, 128) and topk in (128, 256) and s_kv % 64
        idx, named, lens, sinks = sps.sparse_inputs(s_q, topk, s_kv, *flags, heads, 7)
        assert idx.shape == (s_q, 1, topk) and idx.dtype == np.int32
        assert (idx[sps.ALL_INVALID] == -1).all()
        for t in range(s_q):
            if t == sps.ALL_INVALID:
                continue
            row = idx[t, 0]
            valid = row[(row >= 0) & (row < s_kv)]
            assert row[-1] == -1 and len(np.unique(valid)) < len(valid)            # -1 tail, duplicates
        assert ((idx >= s_kv) | (idx < -1)).any()                                   # out of range both ways
        assert set(named) == set(idx[(idx >= 0) & (idx < s_kv)].tolist()) and len(named) < s_kv  # NaN rows left
        if flags[0]:
            assert lens[0] == 0 and 0 < lens[2] < topk and lens[3] > topk
        else:
            assert lens is None
        if flags[1]:
            assert (sinks > 0).any() and (sinks < 0).any() and np.isinf(sinks).sum() == 2 and sinks.shape == (heads,)
        else:
            assert sinks is None
    assert any(s_kv < topk for _, _, topk, s_kv in sps.SHAPES)


@pytest.fixture
def cpu_sparse(request, monkeypatch):
    """(bundle, the calls made, the fake's mode: 'right', 'nothing' (returns torch.empty's outputs),
    'no-topk-length', 'no-sinks' (ignores that argument))."""
    import torch

    from fa4mlir.attention import mla_sparse
    from fa4mlir.testing_mla import dequantize_fp8_cache, sparse_reference
    bundle, *_ = request.getfixturevalue("cpu_child")
    calls, mode = [], {"mode": "right"}

    def call(q, kv, indices, sm_scale, d_v, *, bundle, attn_sink, topk_length):
        calls.append((tuple(q.shape), kv.shape[0], indices.shape[2], topk_length is not None, attn_sink is not None))
        s_q, heads, _ = q.shape
        if kv.shape[-1] == 656:         # FlashMLA's FP8 rows
            kv = dequantize_fp8_cache(kv.view(kv.shape[0], 1, 1, 656)).view(kv.shape[0], 1, 576)
        out = torch.empty((s_q, heads, d_v), dtype=q.dtype)
        m, lse = torch.empty((s_q, heads)), torch.empty((s_q, heads))
        if mode["mode"] == "nothing":
            return out, m, lse
        kw = {"sinks": None if mode["mode"] == "no-sinks" else attn_sink,
              "topk_length": None if mode["mode"] == "no-topk-length" or topk_length is None else topk_length.numpy()}
        o, m_, l_ = sparse_reference(q, kv, indices.numpy(), sm_scale, torch.float32, **kw)
        out.copy_(o)
        m.copy_(m_)
        lse.copy_(l_)
        return out, m, lse

    monkeypatch.setattr(mla_sparse, "flash_mla_sparse_fwd", call)
    return bundle, calls, mode


@pytest.mark.parametrize("name", SPARSE_CASES)
def test_sparse_child_runs_the_case_kernels_and_checks_them(cpu_sparse, capsys, name):
    bundle, calls, mode = cpu_sparse
    case = san.CASES_BY_NAME[name]
    code, rep = child_report(capsys, name, bundle)
    assert code == 0 and rep.end["ok"] and rep.end["checks"] == len(case.match) * len(sps.SHAPES), rep.results
    assert all(r["ok"] and r["nan_out"] == 0 for r in rep.results), rep.results
    flags = [(m["topk_length"], m["sinks"]) for m in case.match for _ in sps.SHAPES]
    assert [c[3:] for c in calls] == flags
    assert [(c[0][0], c[0][1], c[2], c[1]) for c in calls] == list(sps.SHAPES) * len(case.match)
    wrong = ["nothing"] + ["no-topk-length"] * any(t for t, _ in flags) + ["no-sinks"] * any(s for _, s in flags)
    for mode["mode"] in wrong:
        code, rep = child_report(capsys, name, bundle)
        failed = [not r["ok"] for r in rep.results]
        assert code == 1, mode
        if mode["mode"] == "nothing":
            assert all(failed) and all(r["nan_out"] > 0 for r in rep.results)   # torch.empty's outputs were NaN
        else:   # every call that passes the ignored argument fails, every other passes
            k = 0 if mode["mode"] == "no-topk-length" else 1
            assert failed == [f[k] for f in flags], (mode, rep.results)


def test_sparse_child_stops_when_the_call_runs_another_kernel(cpu_sparse, capsys, monkeypatch):
    from fa4mlir.attention import mla_sparse
    bundle, calls, _ = cpu_sparse
    check = mla_sparse.check_sparse_inputs
    monkeypatch.setattr(mla_sparse, "check_sparse_inputs", lambda *a: replace(check(*a), has_sinks=True))
    code, rep = child_report(capsys, "mla-sparse", bundle)
    assert code == 3 and "would run" in rep.end["error"] and calls == []
