"""Deviceless: the sm_90a attention kernel's sliding-window and chunked variants executed by the
interpreter, numerics by the FA rule against a float64 reference masked by FlashAttention's own
rule (fa4mlir.testing.attention_visible); rows that see no key must give O = 0, LSE = +inf.
The cases (tests/interpret_sm90.py MASK_CASES) are kernels of the gpu-tests bundle, so the H200
runs the same ones (tests/gpu/test_interpret_vs_gpu.py)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fa4mlir.testing import compare_attention  # noqa: E402
from tests.interpret_sm90 import MASK_CASES, run  # noqa: E402
from tests.test_interpret_sm90 import _tensor  # noqa: E402


@pytest.mark.parametrize("case", MASK_CASES, ids=lambda c: c.name)
def test_masked_kernel_through_the_interpreter(case):
    got = run(case, seed=1)
    q, k, v, o = (_tensor(got[n], case.dtype) for n in ("q", "k", "v", "o"))
    report = compare_attention(q, k, v, o, torch.from_numpy(got["lse"]), case.head_dim ** -0.5, case.causal,
                               window_size=case.window, attention_chunk=case.chunk)
    assert report["ok"], report
