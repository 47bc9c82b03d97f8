"""Deviceless: the sm_90a attention kernel at head dims 96 (the 64-byte swizzle: three 32-column
chunks per Q, K, V and O tile, TMA boxes, wgmma descriptors K-major and MN-major, the epilogue's
swizzled O stores) and 192, and with qk 192 / v 128 (MLA prefill: K is 192 wide, V and O 128),
executed by the interpreter; numerics by the FA rule against a float64 reference. The cases
(tests/interpret_sm90.py HEAD_DIM_CASES) are kernels of the gpu-tests bundle (kernel_sets.head_dims),
so the H200 runs the same ones (tests/gpu/test_interpret_vs_gpu.py)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fa4mlir.testing import compare_attention  # noqa: E402
from tests.interpret_sm90 import HEAD_DIM_CASES, run  # noqa: E402
from tests.test_interpret_sm90 import _tensor  # noqa: E402


@pytest.mark.parametrize("case", HEAD_DIM_CASES, ids=lambda c: c.name)
def test_head_dim_kernel_through_the_interpreter(case):
    got = run(case, seed=1)
    q, k, v, o = (_tensor(got[n], case.dtype) for n in ("q", "k", "v", "o"))
    assert o.shape[-1] == v.shape[-1] == case.dim_v and q.shape[-1] == k.shape[-1] == case.head_dim
    report = compare_attention(q, k, v, o, torch.from_numpy(got["lse"]), case.head_dim ** -0.5, case.causal)
    assert report["ok"], report


def test_a_wrong_swizzle_phase_would_fail():
    """The check can fail: the D96 case's O with two 16-byte units of one row swapped (what a wrong
    64-byte swizzle phase in the epilogue writes) breaks the FA rule."""
    case = next(c for c in HEAD_DIM_CASES if c.head_dim == 96)
    got = run(case, seed=1)
    o = got["o"].copy()
    o[..., 0:8], o[..., 8:16] = got["o"][..., 8:16], got["o"][..., 0:8]
    q, k, v = (_tensor(got[n], case.dtype) for n in ("q", "k", "v"))
    report = compare_attention(q, k, v, _tensor(np.ascontiguousarray(o), case.dtype), torch.from_numpy(got["lse"]),
                               case.head_dim ** -0.5, case.causal)
    assert not report["ok"], report
