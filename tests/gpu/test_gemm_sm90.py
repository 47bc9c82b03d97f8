"""sm_90a GEMM on the GPU, from the bundle: fresh random inputs, NaN-poisoned outputs, FA rule."""
import pytest

from fa4mlir.testing import check_gemm

pytestmark = pytest.mark.gpu

SIZES = [(256, 256, 256), (1024, 2048, 512), (4096, 4096, 4096),          # tile multiples
         (1000, 1016, 1000), (129, 136, 72), (1, 8, 8), (300, 264, 4104),   # ragged M, N, K
         (2000, 520, 8)]


@pytest.fixture(scope="module")
def kernels(bundle, require_arch):
    require_arch(9)
    from fa4mlir.runtime import load
    return {dt: load(bundle.find(kernel="gemm_sm90", dtype=dt, bn=256, stages=4, cubin_backend="nvjitlink")) for dt in ("bf16", "f16")}


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("mnk", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_matches_torch(kernels, dtype, mnk):
    for _ in range(2):  # two fresh draws
        r = check_gemm(kernels[dtype], *mnk)
        assert r["nan_or_unwritten"] == 0, r
        assert r["ok"], r


def test_gemm_repeatable(kernels):
    import torch
    from fa4mlir.gemm import grid_for
    kern = kernels["bf16"]
    m, n, k = 1000, 1016, 1000
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    outs = []
    for _ in range(2):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kern.launch(grid_for(kern.artifact.config, m, n), [a, b, c, m, n, k])
        torch.cuda.synchronize()
        outs.append(c)
    assert torch.equal(outs[0], outs[1])
