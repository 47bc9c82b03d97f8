"""sm_90a GEMM: compiles to a cubin with 0 spills; the SASS holds HGMMA; config errors; stage reports."""
import subprocess

import pytest

from fa4mlir import compiler, lowering
from fa4mlir.lowering import CompileOptions
from fa4mlir.cache import KernelCache
from fa4mlir.kernels import gemm_sm90
from fa4mlir.sass import find_nvdisasm


@pytest.fixture(scope="module")
def artifact():
    return lowering.lower(gemm_sm90.build(gemm_sm90.GemmConfig()), key="test-sm90")


def test_compiles_without_spills(artifact):
    r = artifact.resources
    assert artifact.arch == "sm_90a" and artifact.cubin[:4] == b"\x7fELF"
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0
    assert not r["wgmma_serialized"], r
    assert 0 < r["registers"] <= 168          # the entry cap of a 384-thread CTA
    assert r["smem_bytes"] == 4 * (16384 + 32768) + 4 * 16   # ring + 8 mbarriers
    assert r["threads"] == 384
    assert set(r["stage_seconds"]) >= {"fa4", "nvvm", "llvm", "ptx", "cubin"}


def test_sass_holds_wgmma_and_tma(artifact, tmp_path):
    tool = find_nvdisasm()
    if tool is None:
        pytest.skip("nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(artifact.cubin)
    sass = subprocess.run([tool, "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    assert "HGMMA.64x256x16.F32.BF16" in sass
    assert "UTMALDG.2D" in sass          # TMA loads
    assert "SYNCS" in sass               # mbarrier traffic


def test_bad_configs_raise_before_compiling():
    with pytest.raises(ValueError, match="bm must be 64 x num_consumers"):
        gemm_sm90.build(gemm_sm90.GemmConfig(bm=192))
    with pytest.raises(ValueError, match="128-byte swizzle row"):
        gemm_sm90.build(gemm_sm90.GemmConfig(bk=32))
    with pytest.raises(ValueError, match="GEMM dtype"):
        gemm_sm90.build(gemm_sm90.GemmConfig(dtype="f32"))


def test_smem_over_budget_names_the_bytes():
    with pytest.raises(lowering.CompileError, match=r"needs 295008 bytes of shared memory, over the sm_90a limit"):
        lowering.lower(gemm_sm90.build(gemm_sm90.GemmConfig(stages=6)), key="too-big")


def test_cache_hit_still_dumps_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("FA4MLIR_CACHE_DIR", str(tmp_path / "cache"))
    cfg = gemm_sm90.GemmConfig(bn=64, stages=2)
    first = compiler.compile_kernel("gemm_sm90", cfg)
    monkeypatch.setenv("FA4MLIR_DUMP_DIR", str(tmp_path / "dumps"))
    again = compiler.compile_kernel("gemm_sm90", cfg)        # a cache hit
    assert again.cubin == first.cubin and again.key == first.key
    (d,) = (tmp_path / "dumps").iterdir()
    names = sorted(p.name for p in d.iterdir())
    assert [n.split("-", 1)[1] for n in names] == ["build.mlir", "fa4.mlir", "nvvm.mlir", "llvm.mlir",
                                                   "ptx.ptx", "cubin.cubin", "ptxas.txt"]


def test_failing_stage_prints_artefact_and_reproduction(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FA4MLIR_DUMP_DIR", str(tmp_path))
    kir = gemm_sm90.build(gemm_sm90.GemmConfig(stages=6))
    with pytest.raises(lowering.CompileError) as exc:
        lowering.lower(kir, key="fail")
    msg = str(exc.value)
    assert "stage 'fa4' failed" in msg and "01-build.mlir" in msg and "reproduce: fa4mlir-opt" in msg
    assert "gemm_sm90.py" in msg          # the source location of the offending kernel
    assert "01-build.mlir" in capsys.readouterr().err


def test_cache_compiles_once(tmp_path, monkeypatch):
    monkeypatch.setenv("FA4MLIR_CACHE_DIR", str(tmp_path))
    calls = []
    orig = compiler.build_and_lower
    monkeypatch.setattr(compiler, "build_and_lower", lambda *a: calls.append(1) or orig(*a))
    cfg = gemm_sm90.GemmConfig(bn=64, stages=2)
    compiler.compile_kernel("gemm_sm90", cfg, cache=KernelCache())
    compiler.compile_kernel("gemm_sm90", cfg, cache=KernelCache())
    assert len(calls) == 1


def test_nvjitlink_drops_setmaxnreg_and_ptxas_keeps_it(monkeypatch):
    """nvJitLink compiles PTX relocatably and ptxas then ignores setmaxnreg (C7504): the report says so;
    the whole-program ptxas backend honours it (the consumer warpgroups may then use 232 registers)."""
    kir = gemm_sm90.build(gemm_sm90.GemmConfig(bn=64, stages=2))
    r = lowering.lower(kir, CompileOptions(cubin_backend="nvjitlink"), key="backend-nvjitlink").resources
    assert r["cubin_backend"] == "nvjitlink" and r["setmaxnreg_ignored"]
    if lowering.find_ptxas() is None:
        pytest.skip("no ptxas (pip install nvidia-cuda-nvcc)")
    kir = gemm_sm90.build(gemm_sm90.GemmConfig(bn=64, stages=2))
    r = lowering.lower(kir, CompileOptions(cubin_backend="ptxas"), key="backend-ptxas").resources
    assert r["cubin_backend"] == "ptxas" and not r["setmaxnreg_ignored"] and r["spill_stores"] == 0
