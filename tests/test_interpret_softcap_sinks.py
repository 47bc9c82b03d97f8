"""Deviceless: the sm_90a attention kernel's softcap and sinks variants executed by the interpreter,
numerics by the FA rule against a float64 reference with FlashAttention's softcap (softcap *
tanh(s / softcap) of the scaled score) and gpt-oss / FA4 sinks (one more logit per row in the
softmax's denominator and the LSE); rows that see no key must give O = 0 and LSE = +inf, or the
head's sink with sinks. The cases (tests/interpret_sm90.py SCORE_CASES) are kernels of the gpu-tests
bundle, so the H200 runs the same ones (tests/gpu/test_interpret_vs_gpu.py)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fa4mlir.testing import compare_attention  # noqa: E402
from tests.interpret_sm90 import SCORE_CASES, run  # noqa: E402
from tests.test_interpret_sm90 import _tensor  # noqa: E402


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda c: c.name)
def test_softcap_sink_kernel_through_the_interpreter(case):
    got = run(case, seed=1)
    q, k, v, o = (_tensor(got[n], case.dtype) for n in ("q", "k", "v", "o"))
    sinks = torch.from_numpy(got["sinks"]) if case.sinks else None
    report = compare_attention(q, k, v, o, torch.from_numpy(got["lse"]), case.head_dim ** -0.5, case.causal,
                               window_size=case.window, softcap=case.softcap, sinks=sinks)
    assert report["ok"], report
    if case.causal and case.seqlen_q > case.seqlen_k:
        assert report["masked_rows"] > 0, report
