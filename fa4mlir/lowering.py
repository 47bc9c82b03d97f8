"""The compiler as named stages: build -> fa4 -> nvvm -> llvm -> ptx -> cubin.

    fa4     fa4-level checks and planning   (verify pipelines, plan SMEM / TMEM)
    nvvm    fa4 ops -> nvvm                 (tma, mma per arch, tmem, pipelines, sync, warp roles)
    llvm    upstream conversions to the LLVM dialect
    ptx     LLVM NVPTX back end (gpu-module-to-binary, format=isa)
    cubin   PTX -> cubin in process through nvJitLink; its ptxas report becomes `Resources`

`compile_kernel(kernel_ir)` runs them and returns a runtime `KernelArtifact`. With
FA4MLIR_DUMP_DIR set, every stage's artefact is written under DIR/<kernel>-<key16>/ (on cache hits
too: the IR stages are re-run to produce the dumps). A failing stage prints the path of the last
good artefact and a one-line reproduction command.
"""
from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import env
from ._mlir import gpu, ir, passmanager
from .passes import registry
from .passes._util import PassError, kernel_func
from .runtime import KernelArtifact

UPSTREAM_TO_LLVM = ("builtin.module(convert-scf-to-cf, convert-vector-to-llvm, convert-math-to-llvm, "
                    "convert-arith-to-llvm, convert-index-to-llvm, convert-cf-to-llvm, "
                    "convert-nvvm-to-llvm, canonicalize, cse, reconcile-unrealized-casts)")
TO_PTX = "builtin.module(gpu-module-to-binary{format=isa opts=-O3})"


class CompileError(RuntimeError):
    """A stage failed; the message names the stage, the reason, the artefact and a reproduction."""


@dataclass
class Resources:
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    barriers: int = 0
    smem_bytes: int = 0
    tmem_cols: int = 0
    threads: int = 0
    setmaxnreg_ignored: bool = False
    cubin_backend: str = "nvjitlink"
    stage_seconds: dict = field(default_factory=dict)
    ptxas_log: str = ""

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d.pop("ptxas_log")
        return d


_PTXAS = {
    "registers": r"Used (\d+) registers",
    "spill_stores": r"(\d+) bytes spill stores",
    "spill_loads": r"(\d+) bytes spill loads",
    "stack_bytes": r"(\d+) bytes stack frame",
    "barriers": r"used (\d+) barriers",
}


def parse_ptxas_report(log: str, res: Resources | None = None) -> Resources:
    """Fill registers/spills/stack/barriers from nvJitLink's ptxas info log."""
    res = res or Resources()
    for key, pattern in _PTXAS.items():
        m = re.search(pattern, log)
        if m:
            setattr(res, key, int(m.group(1)))
    res.setmaxnreg_ignored = "C7504" in log
    res.ptxas_log = log
    return res


def find_ptxas() -> str | None:
    """A ptxas executable: the nvidia-cuda-nvcc wheel's (pinned with the package), else PATH's."""
    import shutil
    try:
        import nvidia
        roots = list(nvidia.__path__)
    except ImportError:
        roots = []
    for root in roots:
        for path in sorted(Path(root).glob("*/bin/ptxas")):
            if os.access(path, os.X_OK):
                return str(path)
    return shutil.which("ptxas")


def ptx_to_cubin_ptxas(ptx: str, arch: str, name: str = "kernel.ptx") -> tuple[bytes, str]:
    """PTX -> (cubin, info log) with a standalone ptxas (whole-program: setmaxnreg is honoured)."""
    import subprocess
    import tempfile
    tool = find_ptxas()
    if tool is None:
        raise CompileError("FA4MLIR_CUBIN_BACKEND=ptxas but no ptxas was found on PATH or in the "
                           "nvidia-cuda-nvcc wheel; pip install nvidia-cuda-nvcc or use nvjitlink")
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp, name), Path(tmp, "out.cubin")
        src.write_text(ptx)
        proc = subprocess.run([tool, f"-arch={arch}", "-O3", "-v", str(src), "-o", str(out)],
                              capture_output=True, text=True)
        if proc.returncode:
            raise CompileError(f"ptxas rejected the PTX for {arch}:\n{proc.stderr}")
        return out.read_bytes(), proc.stdout + proc.stderr


def ptx_to_cubin(ptx: str, arch: str, name: str = "kernel.ptx") -> tuple[bytes, str]:
    """PTX -> (cubin, ptxas info log) through nvJitLink in process.

    Note: nvJitLink compiles PTX as a relocatable unit, and ptxas then ignores `setmaxnreg`
    ("C7504 ... to maintain compatibility across compilation units"); `Resources.setmaxnreg_ignored`
    records it. FA4MLIR_CUBIN_BACKEND=ptxas compiles whole-program instead."""
    if env.cubin_backend() == "ptxas":
        return ptx_to_cubin_ptxas(ptx, arch, name)
    from cuda.bindings import nvjitlink
    opts = [f"-arch={arch}", "-O3", "-verbose"]
    handle = nvjitlink.create(len(opts), opts)
    try:
        data = ptx.encode()
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), str(name))
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            size = nvjitlink.get_error_log_size(handle)
            log = bytearray(size)
            nvjitlink.get_error_log(handle, log)
            raise CompileError(f"nvJitLink rejected the PTX for {arch}: {exc}\n{log.decode(errors='replace')}") from exc
        size = nvjitlink.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(handle, cubin)
        size = nvjitlink.get_info_log_size(handle)
        info = bytearray(size)
        nvjitlink.get_info_log(handle, info)
        return bytes(cubin), info.decode(errors="replace")
    finally:
        nvjitlink.destroy(handle)


class _Dumper:
    def __init__(self, kernel: str, key: str):
        root = env.dump_dir()
        self.dir = os.path.join(root, f"{kernel}-{key[:16]}") if root else None
        self.count = 0
        self.last = None
        if self.dir:
            os.makedirs(self.dir, exist_ok=True)

    def write(self, stage: str, ext: str, data) -> str | None:
        self.count += 1
        if not self.dir:
            return None
        path = os.path.join(self.dir, f"{self.count:02d}-{stage}.{ext}")
        with open(path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        self.last = path
        return path


def stage_pipelines(arch: str, debug: bool) -> list[tuple[str, list[str]]]:
    """The fa4 pass names of each IR stage for `arch` (what `fa4mlir-opt` can replay)."""
    return [("fa4", registry.fa4_stage(arch)), ("nvvm", registry.nvvm_stage(arch))]


def lower_module(module: ir.Module, arch: str, *, debug: bool = False, dumper: _Dumper | None = None,
                 times: dict | None = None) -> tuple[str, dict]:
    """Run the IR stages on `module` in place; return its PTX and the planned resources."""
    dumper = dumper or _Dumper("kernel", "0" * 16)
    times = times if times is not None else {}
    ctx = module.context
    dumper.write("build", "mlir", str(module))
    for stage, names in stage_pipelines(arch, debug):
        t0 = time.perf_counter()
        try:
            registry.run_passes(module, names, debug=debug)
        except PassError as exc:
            _fail(stage, exc, dumper, f"fa4mlir-opt --pass-pipeline={','.join(names)}")
        times[stage] = time.perf_counter() - t0
        dumper.write(stage, "mlir", str(module))
    planned = resource_attrs(module)
    for stage, pipeline in (("llvm", UPSTREAM_TO_LLVM), ("ptx", TO_PTX)):
        t0 = time.perf_counter()
        try:
            with ctx:
                passmanager.PassManager.parse(pipeline).run(module.operation)
        except Exception as exc:  # MLIRError carries the diagnostics
            _fail(stage, exc, dumper, f"mlir-opt --pass-pipeline='{pipeline}'")
        times[stage] = time.perf_counter() - t0
        if stage == "llvm":
            dumper.write(stage, "mlir", str(module))
    binary = module.body.operations[0]
    ptx = gpu.ObjectAttr(binary.attributes["objects"][0]).object
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    dumper.write("ptx", "ptx", ptx)
    return ptx, planned


def _fail(stage, exc, dumper: _Dumper, repro: str):
    where = ""
    if getattr(exc, "loc", None) is not None:
        where = f" at {exc.loc}"
    artefact = dumper.last or "(set FA4MLIR_DUMP_DIR to keep the stage artefacts)"
    msg = (f"stage '{stage}' failed{where}: {exc}\n  input artefact: {artefact}\n"
           f"  reproduce: {repro} {artefact}")
    print(f"fa4mlir: {msg}", file=sys.stderr)
    raise CompileError(msg) from exc


def compile_kernel(kernel_ir, key: str = "", debug: bool | None = None) -> KernelArtifact:
    """Lower a built kernel to a cubin artefact (no cache; see `fa4mlir.compiler`)."""
    debug = kernel_ir.config.get("_debug", env.get_bool("FA4MLIR_DEBUG")) if debug is None else debug
    dumper = _Dumper(kernel_ir.name, key or "nokey0000000000000")
    times: dict = {"build": kernel_ir.config.get("_build_seconds", 0.0)}
    with kernel_ir.module.context:
        ptx, planned = lower_module(kernel_ir.module, kernel_ir.arch, debug=debug, dumper=dumper, times=times)
    t0 = time.perf_counter()
    try:
        cubin, log = ptx_to_cubin(ptx, kernel_ir.arch, f"{kernel_ir.name}.ptx")
    except CompileError as exc:
        _fail("cubin", exc, dumper, f"python -m fa4mlir ptxas --arch {kernel_ir.arch}")
    times["cubin"] = time.perf_counter() - t0
    dumper.write("cubin", "cubin", cubin)
    dumper.write("ptxas", "txt", log)
    res = parse_ptxas_report(log)
    res.smem_bytes = planned.get("_smem_bytes", 0)
    res.tmem_cols = planned.get("_tmem_cols", 0)
    res.cubin_backend = env.cubin_backend()
    res.threads = kernel_ir.block[0] * kernel_ir.block[1] * kernel_ir.block[2]
    res.stage_seconds = {k: round(v, 4) for k, v in times.items()}
    config = {k: v for k, v in kernel_ir.config.items() if not k.startswith("_")}
    config["cubin_backend"] = res.cubin_backend
    return KernelArtifact(name=kernel_ir.name, arch=kernel_ir.arch, cubin=cubin, block=kernel_ir.block,
                          cluster=kernel_ir.cluster, smem_bytes=res.smem_bytes, params=kernel_ir.params,
                          resources=res.as_dict(), key=key, config=config)


def resource_attrs(module: ir.Module) -> dict:
    """SMEM bytes and TMEM columns the planning passes recorded on the kernel function."""
    func = kernel_func(module.operation)
    out = {}
    for name, key in (("fa4.smem_bytes", "_smem_bytes"), ("fa4.tmem_cols", "_tmem_cols")):
        if name in func.attributes:
            out[key] = ir.IntegerAttr(func.attributes[name]).value
    return out
