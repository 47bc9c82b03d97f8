"""Deviceless: flash_attn_varlen_func(..., page_table=) (chunked prefill of a ragged batch over a
paged pool) through the interpreter (tests/interpret_varlen_paged.py CASES): the host checks and
plan, the decode kernel's varlen_q variant (unsplit, and split with the combine), numerics by the FA
rule per sequence against the keys gathered through the page table (testing.compare_attention:
float64 reference, rows that see no key exactly out 0 and lse +inf, no NaN), with NaN in every
unused page and row, and the rows past cu_seqlens_q[batch]: untouched unsplit, out 0 and lse +inf
when the combine writes them."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fa4mlir.testing import compare_attention  # noqa: E402
from tests.interpret_varlen_paged import CASES, NAN16, run  # noqa: E402


def _tensor(bits: np.ndarray, dtype: str):
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16 if dtype == "bf16" else torch.float16)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_varlen_paged_through_the_interpreter(case):
    got = run(case, seed=3)
    plan, cfg = got["plan"], got["config"]
    assert cfg.varlen_q and cfg.paged and cfg.unsplit == (plan.num_splits == 1)
    assert cfg.windowed == (case.window_size != (-1, -1)) and cfg.softcap == (case.softcap > 0)
    assert cfg.sinks == (case.sinks and cfg.unsplit)
    assert not cfg.gather and cfg.box_rows == (64 if case.page_size % 64 == 0 else 8 if case.page_size % 16 else 16)
    q, k, v, out = (_tensor(got[n], case.dtype) for n in ("q", "k", "v", "out"))
    lse = torch.from_numpy(got["lse"])
    cu, lens, table, page = got["cu_seqlens_q"], got["lens"], got["page_table"], case.page_size
    reports = []
    for b in range(len(case.seqlens_q)):
        q0, nq, nk = int(cu[b]), int(cu[b + 1] - cu[b]), int(lens[b])
        if nq == 0:
            continue
        t = np.arange(nk)
        rows = torch.from_numpy((table[b][t // page].astype(np.int64) * page + t % page))
        k_rows, v_rows = (x.reshape(-1, case.kv_heads, case.head_dim)[rows] for x in (k, v))
        sinks = None if got["sinks"] is None else torch.from_numpy(got["sinks"])
        if nk == 0:    # no key: out 0, lse +inf (the sink with sinks)
            assert (out[q0:q0 + nq].float() == 0).all()
            want = torch.full((case.heads, nq), float("inf")) if sinks is None else sinks[:, None].expand(-1, nq)
            assert torch.allclose(lse[:, q0:q0 + nq], want, atol=1e-5)
            continue
        rep = compare_attention(q[q0:q0 + nq][None], k_rows[None], v_rows[None], out[q0:q0 + nq][None],
                                lse[:, q0:q0 + nq][None], case.head_dim ** -0.5, case.causal,
                                window_size=case.window_size, softcap=case.softcap, sinks=sinks)
        assert rep["ok"], (b, rep)
        reports.append(rep)
    assert reports
    end = int(cu[-1])
    if plan.unsplit:     # rows no sequence owns: not written
        assert (got["out"][end:] == NAN16[case.dtype]).all() and np.isnan(got["lse"][:, end:]).all()
    elif got["sinks"] is None:    # the combine writes them from LSE -inf partials
        assert (out[end:].float() == 0).all() and np.isposinf(got["lse"][:, end:]).all()
    else:                # ... and the sinks: a row that sees no key gets lse = its head's sink
        assert (out[end:].float() == 0).all()
        assert np.allclose(got["lse"][:, end:], got["sinks"][:, None], atol=1e-5)
