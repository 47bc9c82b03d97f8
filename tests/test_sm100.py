"""The sm_100a GEMM compiles to a cubin without a Blackwell GPU: nvJitLink accepts it with 0 spills,
SMEM and TMEM fit, and its SASS holds the tcgen05 / TMA instructions (read with nvdisasm)."""

import re

import pytest

from fa4mlir import lowering
from fa4mlir.lowering import CompileOptions
from fa4mlir.kernels import gemm_sm100
from fa4mlir.passes.plan_smem import SMEM_LIMIT
from fa4mlir.passes.plan_tmem import TMEM_COLUMNS
from fa4mlir.sass import disassemble, find_nvdisasm

CONFIGS = [gemm_sm100.GemmConfig(), gemm_sm100.GemmConfig(dtype="f16", bn=128, stages=6)]


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"{c.dtype}-bn{c.bn}-s{c.stages}")
def artifact(request):
    return lowering.lower(gemm_sm100.build(request.param), key="test-sm100")


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


# ---- cubin_backend nvjitlink-lto (NVVM IR -> libNVVM LTO-IR -> nvJitLink -lto) ------------------
def test_lto_backend_stages_and_nvvm_ir(tmp_path, monkeypatch):
    """The LTO backend replaces the ptx stage by an nvvm-ir stage: the gpu.module body translated
    under NVVM's data layout, the kernel kept by @llvm.used, libNVVM's IR version; nvJitLink links it
    whole-program into an sm_100a cubin whose SASS holds the kernel's tcgen05 MMAs."""
    monkeypatch.setenv("FA4MLIR_DUMP_DIR", str(tmp_path))
    cfg = gemm_sm100.GemmConfig()
    art = lowering.lower(gemm_sm100.build(cfg), CompileOptions(cubin_backend="nvjitlink-lto"), key="test-sm100-lto")
    r = art.resources
    assert r["cubin_backend"] == "nvjitlink-lto" and art.cubin[:4] == b"\x7fELF"
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0 and not r["setmaxnreg_ignored"]
    assert "nvvm-ir" in r["stage_seconds"] and "ptx" not in r["stage_seconds"]
    (d,) = tmp_path.iterdir()
    names = [p.name.split("-", 1)[1] for p in sorted(d.iterdir())]
    assert names == ["build.mlir", "fa4.mlir", "nvvm.mlir", "llvm.mlir", "nvvm-ir.ll", "cubin.cubin", "ptxas.txt"]
    text = next(d.glob("*nvvm-ir.ll")).read_text()
    assert f'target datalayout = "{lowering.NVVM_DATA_LAYOUT}"' in text
    assert f"@llvm.used = appending global [1 x ptr] [ptr @{art.name}]" in text
    assert re.search(r"^!nvvmir.version = !\{!\d+\}$", text, re.M)
    assert "Compiling entry function '" + art.name in next(d.glob("*ptxas.txt")).read_text()
    if find_nvdisasm() is not None:
        # NVVM's optimiser may unroll the K loop (upstream's back end does not): whole K steps only
        mmas = sum(1 for line in disassemble(art.cubin).splitlines() if " UTCHMMA" in line)
        assert mmas > 0 and mmas % (cfg.bk // gemm_sm100.MMA_K) == 0, mmas


def test_lto_needs_llvm_used_to_keep_the_kernel():
    """Why to_nvvm_ir adds @llvm.used: without it nvJitLink's LTO drops the `.entry` (the link
    succeeds with no kernel in it)."""
    kir = gemm_sm100.build(gemm_sm100.GemmConfig())
    with kir.module.context:
        text, _ = lowering.lower_module(kir.module, kir.arch, target="nvvm-ir")
    _, log = lowering.nvvm_to_cubin(text, kir.arch)
    assert "Compiling entry function" in log
    stripped = "\n".join(line for line in text.splitlines() if not line.startswith("@llvm.used"))
    _, log = lowering.nvvm_to_cubin(stripped, kir.arch)
    assert "Compiling entry function" not in log


def test_lto_refuses_pre_blackwell_before_compiling(tmp_path, monkeypatch):
    """libNVVM reads opaque-pointer IR only for compute_100+: an sm_90a kernel is refused with the
    fix, before any stage runs."""
    from fa4mlir.kernels import gemm_sm90
    monkeypatch.setenv("FA4MLIR_DUMP_DIR", str(tmp_path))
    with pytest.raises(lowering.CompileError, match="sm_100 and later, not sm_90a.*cubin_backend='ptxas'"):
        lowering.lower(gemm_sm90.build(gemm_sm90.GemmConfig()), CompileOptions(cubin_backend="nvjitlink-lto"),
                       key="lto-sm90")
    assert not any(tmp_path.rglob("*.mlir"))


def test_setmaxnreg_ignored_is_read_from_either_ptxas_note():
    c7504 = "ptxas info    : (C7504) Potential Performance Loss: 'setmaxnreg' ignored to maintain compatibility"
    c7508 = "ptxas info    : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; unable to determine register count at entry."
    assert lowering.parse_ptxas_report(c7504).setmaxnreg_ignored
    assert lowering.parse_ptxas_report(c7508).setmaxnreg_ignored
    assert not lowering.parse_ptxas_report("ptxas info    : Used 128 registers, used 2 barriers").setmaxnreg_ignored


def test_wgmma_serialization_is_read_from_the_ptxas_note():
    c7513 = ("ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are serialized due "
             "to non wgmma instructions defining input registers of a wgmma between start and end of the pipeline "
             "stage in the function 'k' in line 0")
    assert lowering.parse_ptxas_report(c7513).wgmma_serialized
    assert not lowering.parse_ptxas_report("ptxas info    : Used 168 registers, used 16 barriers").wgmma_serialized


def test_unknown_backend_names_the_choices(monkeypatch):
    from fa4mlir import compiler
    with pytest.raises(ValueError, match="nvjitlink, nvjitlink-lto, ptxas"):
        CompileOptions(cubin_backend="nvcc")
    monkeypatch.setenv("FA4MLIR_CUBIN_BACKEND", "nvcc")
    with pytest.raises(ValueError, match="nvjitlink, nvjitlink-lto, ptxas"):
        compiler.resolve_options("gemm_sm100")


def test_lto_errors_carry_the_tool_logs(monkeypatch):
    """A libNVVM failure names the options and carries libNVVM's own log (line and column); an
    nvJitLink failure carries nvJitLink's."""
    with pytest.raises(lowering.CompileError, match=r"libNVVM rejected the NVVM IR \(-arch=compute_100a -gen-lto\)"
                                                    r"(.|\n)*bad\.ll \(1, \d+\)"):
        lowering.nvvm_to_cubin("define void @k( {", "sm_100a", "bad.ll")
    with pytest.raises(lowering.CompileError, match="nvJitLink rejected the PTX"):
        lowering.ptx_to_cubin(".version 8.7\n.target sm_100a\n.address_size 64\n.visible .entry k() { bogus; }",
                              "sm_100a")


def test_lto_refuses_an_nvjitlink_older_than_libnvvm(monkeypatch):
    """An older nvJitLink (torch pins one) cannot link libNVVM's LTO-IR: refused before compiling,
    with both versions and the fix, instead of nvJitLink's ERROR_OUTDATED_LIBRARY after it."""
    import importlib.metadata
    from cuda.bindings import nvjitlink
    if tuple(nvjitlink.version()) < tuple(int(x) for x in importlib.metadata.version("nvidia-nvvm").split(".")[:2]):
        pytest.fail("this environment's nvJitLink is older than its libNVVM: pip install -U nvidia-nvjitlink")
    lowering.check_lto_toolchain()
    monkeypatch.setattr(nvjitlink, "version", lambda: (12, 8))
    with pytest.raises(lowering.CompileError, match=r"nvJitLink 12\.8 is older than libNVVM \d+\.\d+.*pip install"):
        lowering.nvvm_to_cubin("define void @k() { ret void }", "sm_100a")
