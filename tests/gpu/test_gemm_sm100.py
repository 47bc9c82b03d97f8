"""sm_100a GEMM (tcgen05 + TMEM) on a Blackwell GPU, from the bundle: fresh random inputs,
NaN-poisoned outputs, FA rule. Skips unless device 0 has compute capability 10.x (no Blackwell
here: tests/test_sm100.py checks what can be checked without one)."""
import pytest

from fa4mlir.testing import check_gemm

pytestmark = pytest.mark.gpu

SIZES = [(128, 256, 64), (1024, 2048, 512), (4096, 4096, 4096),          # tile multiples
         (1000, 1016, 1000), (129, 136, 72), (1, 8, 8), (300, 264, 4104)]  # ragged M, N, K


@pytest.fixture(scope="module")
def kernel(bundle, require_arch):
    require_arch(10)
    from fa4mlir.runtime import load
    return load(bundle.find(kernel="gemm_sm100", dtype="bf16", bn=256, stages=4))


@pytest.mark.parametrize("mnk", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_sm100_matches_torch(kernel, mnk):
    for _ in range(2):  # two fresh draws
        r = check_gemm(kernel, *mnk)
        assert r["nan_or_unwritten"] == 0, r
        assert r["ok"], r
