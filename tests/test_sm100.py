"""The sm_100a GEMM compiles to a cubin without a Blackwell GPU: nvJitLink accepts it with 0 spills,
SMEM and TMEM fit, and its SASS holds the tcgen05 / TMA instructions (read with nvdisasm)."""

import pytest

from fa4mlir import lowering
from fa4mlir.kernels import gemm_sm100
from fa4mlir.passes.plan_smem import SMEM_LIMIT
from fa4mlir.passes.plan_tmem import TMEM_COLUMNS
from fa4mlir.testing import disassemble, find_nvdisasm

CONFIGS = [gemm_sm100.GemmConfig(), gemm_sm100.GemmConfig(dtype="f16", bn=128, stages=6)]


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"{c.dtype}-bn{c.bn}-s{c.stages}")
def artifact(request):
    return lowering.compile_kernel(gemm_sm100.build(request.param), key="test-sm100")


def test_compiles_without_spills(artifact):
    res = artifact.resources
    assert artifact.arch == "sm_100a" and artifact.cubin[:4] == b"\x7fELF"
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    assert res["stack_bytes"] == 0, res
    assert 0 < res["registers"] <= 255
    assert 0 < res["smem_bytes"] <= SMEM_LIMIT["sm_100a"]
    cfg = artifact.config
    assert res["tmem_cols"] == gemm_sm100.tmem_columns(cfg["bn"]) <= TMEM_COLUMNS
    assert res["threads"] == 256


def test_sass_has_tcgen05_and_tma(artifact):
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm): cannot read the SASS")
    sass = disassemble(artifact.cubin)
    count = lambda op: sum(1 for line in sass.splitlines() if f" {op}" in line)  # noqa: E731
    bk, bn = artifact.config["bk"], artifact.config["bn"]
    assert count("UTCHMMA") == bk // gemm_sm100.MMA_K, "one tcgen05.mma per K step of a stage"
    assert count("UTCBAR") == 2, "tcgen05.commit to ab_pipe.empty and to acc_pipe.full"
    assert count("UTCATOMSWS") >= 2, "TMEM allocator: alloc and dealloc"
    assert count("LDTM") == bn // gemm_sm100.EPI_COLS, "one tcgen05.ld 32x32b.x32 per 32 columns"
    assert count("UTMALDG") == 2, "TMA loads of A and B"
    assert count("HGMMA") == 0, "no sm_90a wgmma in an sm_100a kernel"


def test_config_validation():
    with pytest.raises(ValueError, match="bm must be 128"):
        gemm_sm100.GemmConfig(bm=64).validate()
    with pytest.raises(ValueError, match="bn must be a multiple of 32"):
        gemm_sm100.GemmConfig(bn=72).validate()
    with pytest.raises(ValueError, match="over the sm_100a limit"):
        gemm_sm100.GemmConfig(stages=8).validate()
    assert gemm_sm100.GemmConfig().key()["kernel"] == "gemm_sm100"
