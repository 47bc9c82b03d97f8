"""The compiler as named stages: build -> fa4 -> nvvm -> llvm -> ptx -> cubin.

    fa4     fa4-level checks and planning   (verify pipelines, plan SMEM / TMEM)
    nvvm    fa4 ops -> nvvm                 (tma, mma per arch, tmem, pipelines, sync, warp roles)
    llvm    upstream conversions to the LLVM dialect
    ptx     LLVM NVPTX back end (gpu-module-to-binary, format=isa)
    cubin   PTX -> cubin in process through nvJitLink; its ptxas report becomes `Resources`

`CompileOptions.cubin_backend` picks the last two stages (each kernel declares its own, see
`fa4mlir.compiler`):
    nvjitlink       as above (nvJitLink compiles the PTX relocatably: ptxas ignores setmaxnreg)
    nvjitlink-lto   llvm -> NVVM IR -> libNVVM LTO-IR -> nvJitLink -lto -> cubin: a whole-program
                    link, so setmaxnreg is honoured; NVVM's optimiser and PTX back end replace
                    upstream's (stage `nvvm-ir` instead of `ptx`)
    ptxas           the PTX above through a standalone ptxas (whole-program)

`lower(kernel_ir, options)` runs them and returns a runtime `KernelArtifact` (no cache: the cached
entry point is `fa4mlir.compiler.compile_kernel`). With
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
from ._mlir import gpu, ir, llvm, passmanager
from .passes import registry
from .passes._util import PassError, kernel_func
from .artifacts import KernelArtifact

CUBIN_BACKENDS = ("nvjitlink", "nvjitlink-lto", "ptxas")
# The backends that compile whole-program, so ptxas honours setmaxnreg; nvJitLink given PTX compiles
# it relocatably and drops it (C7504: every thread keeps the launch's share of the register file).
SETMAXNREG_BACKENDS = ("nvjitlink-lto", "ptxas")


@dataclass(frozen=True)
class CompileOptions:
    """What changes a kernel's code besides its config: the LLVM -> cubin route and the debug
    checks. Resolved values only (fa4mlir.compiler.resolve_options fills them in); part of every
    cache key, never read from the environment below the compiler's entry point."""

    cubin_backend: str = "nvjitlink"
    debug: bool = False

    def __post_init__(self):
        if self.cubin_backend not in CUBIN_BACKENDS:
            raise ValueError(f"cubin_backend {self.cubin_backend!r}: expected one of {', '.join(CUBIN_BACKENDS)}")
        if not isinstance(self.debug, bool):
            raise TypeError(f"debug must be a bool, got {self.debug!r}")

    def key(self) -> dict:
        return {"cubin_backend": self.cubin_backend, "debug": self.debug}


class BackendError(ValueError):
    """A cubin backend that cannot build a kernel as it needs: one that drops setmaxnreg chosen from
    the environment for a kernel whose register split needs it, or nvjitlink-lto for an arch
    before sm_100. Raised when the compile options are resolved, before anything is built."""


class SetmaxnregDroppedWarning(UserWarning):
    """A kernel that needs its setmaxnreg split is compiled, on the caller's explicit request, with a
    backend that drops it: its consumers keep the launch's share of registers and spill."""

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
    wgmma_serialized: bool = False   # ptxas made every wgmma wait for the one before (C75xx note)
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
    # C7504: relocatable compile (nvJitLink's PTX input); C7508: no entry register count known
    res.setmaxnreg_ignored = "C7504" in log or "C7508" in log
    # C7510/C7513/C7515/...: "Potential Performance Loss: wgmma.mma_async instructions are serialized
    # due to <reason>": every wgmma then waits for the previous one (no GEMM/softmax overlap)
    res.wgmma_serialized = "wgmma.mma_async instructions are serialized" in log
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
    records it. The ptxas backend (`ptx_to_cubin_ptxas`) compiles whole-program instead, and
    nvjitlink-lto links NVVM IR (`nvvm_to_cubin`)."""
    from cuda.bindings import nvjitlink
    return _nvjitlink([f"-arch={arch}", "-O3", "-verbose"], nvjitlink.InputType.PTX, ptx.encode(), name, "PTX")


def _nvjitlink(opts: list[str], kind, data: bytes, name: str, what: str) -> tuple[bytes, str]:
    """One nvJitLink link of one input; (cubin, info log). Failures carry nvJitLink's error log."""
    from cuda.bindings import nvjitlink
    handle = nvjitlink.create(len(opts), opts)
    try:
        try:
            nvjitlink.add_data(handle, kind, data, len(data), str(name))
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            log = _read(nvjitlink.get_error_log_size, nvjitlink.get_error_log, handle)
            raise CompileError(f"nvJitLink rejected the {what} ({' '.join(opts)}): {exc}\n"
                               f"{log.decode(errors='replace')}") from exc
        cubin = _read(nvjitlink.get_linked_cubin_size, nvjitlink.get_linked_cubin, handle)
        return cubin, _read(nvjitlink.get_info_log_size, nvjitlink.get_info_log, handle).decode(errors="replace")
    finally:
        nvjitlink.destroy(handle)


def _read(size_of, read, handle) -> bytes:
    """A result of nvJitLink or libNVVM: ask its size, then read it into a buffer of that size."""
    buf = bytearray(size_of(handle))
    read(handle, buf)
    return bytes(buf)


# The data layout libNVVM's NVPTX target requires of 64-bit NVVM IR (it rejects upstream NVPTX's
# shorter string as "Target-incompatible"); NVVM IR spec, "Data Layout".
NVVM_DATA_LAYOUT = ("e-p:64:64:64-p6:32:32:32-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-"
                    "f32:32:32-f64:64:64-f128:128:128-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64-a:8:8")


def to_nvvm_ir(module: ir.Module) -> str:
    """The LLVM-dialect body of `module`'s gpu.module as NVVM IR text for libNVVM.

    The body is translated on its own (a gpu.module is not translatable) under NVVM's data layout;
    the kernels are kept alive through LTO by `@llvm.used` (nvJitLink's LTO otherwise drops every
    `.entry`), and `!nvvmir.version` carries libNVVM's IR version (it refuses IR without one)."""
    from cuda.bindings import nvvm
    gpu_module = module.body.operations[0]
    with module.context, ir.Location.unknown():
        body = ir.Module.create()
        body.operation.attributes["llvm.data_layout"] = ir.StringAttr.get(NVVM_DATA_LAYOUT)
        body.operation.attributes["llvm.target_triple"] = ir.StringAttr.get("nvptx64-nvidia-cuda")
        at = ir.InsertionPoint(body.body)
        for op in gpu_module.regions[0].blocks[0].operations:
            if op.operation.name != "gpu.module_end":
                op.clone(at)
        kernels = [ir.StringAttr(f.attributes["sym_name"]).value for f in body.body.operations
                   if f.operation.name == "llvm.func" and "nvvm.kernel" in f.attributes]
        text = llvm.translate_module_to_llvmir(body.operation)
    if not kernels:
        raise CompileError("no nvvm.kernel function in the gpu.module: nothing for nvJitLink's LTO to keep")
    major, minor, *_ = nvvm.ir_version()
    used = ", ".join(f"ptr @{k}" for k in kernels)
    # Metadata ids must not collide with the translation's (!0, !1, ...): count past them.
    meta = 1 + max((int(m) for m in re.findall(r"^!(\d+) =", text, re.M)), default=-1)
    return (text + f'\n@llvm.used = appending global [{len(kernels)} x ptr] [{used}], section "llvm.metadata"\n'
            f"!nvvmir.version = !{{!{meta}}}\n!{meta} = !{{i32 {major}, i32 {minor}}}\n")


def lto_supports(arch: str) -> bool:
    """Whether nvjitlink-lto compiles for `arch` (an sm_XX[a|f] name): sm_100 or later. libNVVM parses
    the opaque-pointer IR that LLVM 22 writes only for compute_100 and later (for compute_90a and
    older it expects LLVM 7's typed pointers and fails with "parse expected type"); measured with
    libNVVM 13.5."""
    m = re.fullmatch(r"sm_(\d+)[af]?", arch)
    return bool(m) and int(m.group(1)) >= 100


def check_lto_arch(arch: str) -> None:
    """nvjitlink-lto needs sm_100 or later (lto_supports)."""
    if not lto_supports(arch):
        raise CompileError(f"cubin_backend nvjitlink-lto compiles for sm_100 and later, not {arch}: "
                           f"libNVVM reads this compiler's (opaque-pointer) LLVM IR only for compute_100+. "
                           f"Use cubin_backend='ptxas' for {arch} (whole-program, honours setmaxnreg).")


def check_lto_toolchain() -> None:
    """nvJitLink must be at least as new as libNVVM: an older one refuses the LTO-IR with
    ERROR_OUTDATED_LIBRARY after the NVVM compile. Installing torch can pull an older
    nvidia-nvjitlink into the same environment; say so before compiling."""
    import importlib.metadata
    from cuda.bindings import nvjitlink
    try:
        nvvm_version = tuple(int(x) for x in importlib.metadata.version("nvidia-nvvm").split(".")[:2])
    except importlib.metadata.PackageNotFoundError:
        return                      # libNVVM from a CUDA toolkit: nvJitLink reports the mismatch itself
    link_version = tuple(nvjitlink.version())
    if link_version < nvvm_version:
        have, need = ".".join(map(str, link_version)), ".".join(map(str, nvvm_version))
        raise CompileError(f"nvJitLink {have} is older than libNVVM {need} (nvidia-nvvm): it cannot link "
                           f"the LTO-IR libNVVM emits. pip install -U 'nvidia-nvjitlink>={need}' "
                           f"(another package, e.g. torch, may have pinned an older one)")


def nvvm_to_cubin(nvvm_ir: str, arch: str, name: str = "kernel.ll") -> tuple[bytes, str]:
    """NVVM IR -> LTO-IR (libNVVM -gen-lto) -> cubin (nvJitLink -lto), in process.

    The link is whole-program, so ptxas honours setmaxnreg (what nvJitLink's PTX input cannot do).
    `arch` is an sm_XX[a] name; libNVVM takes the matching compute_XX[a]."""
    from cuda.bindings import nvjitlink, nvvm
    check_lto_arch(arch)
    check_lto_toolchain()
    program = nvvm.create_program()
    try:
        data = nvvm_ir.encode()
        opts = [f"-arch=compute_{arch.removeprefix('sm_')}", "-gen-lto"]
        try:
            nvvm.add_module_to_program(program, data, len(data), str(name))
            nvvm.compile_program(program, len(opts), opts)
        except nvvm.nvvmError as exc:
            log = _read(nvvm.get_program_log_size, nvvm.get_program_log, program)
            raise CompileError(f"libNVVM rejected the NVVM IR ({' '.join(opts)}): {exc}\n"
                               f"{log.decode(errors='replace').rstrip(chr(0))}") from exc
        lto = _read(nvvm.get_compiled_result_size, nvvm.get_compiled_result, program)
    finally:
        nvvm.destroy_program(program)
    return _nvjitlink([f"-arch={arch}", "-lto", "-O3", "-verbose"], nvjitlink.InputType.LTOIR, lto, name, "LTO-IR")


class _Dumper:
    def __init__(self, kernel: str, key: str):
        root = env.dump_dir()
        self.dir = os.path.join(root, f"{kernel}-{key[:16]}") if root else None
        self.count = 0
        self.last = None
        if self.dir:
            os.makedirs(self.dir, exist_ok=True)

    def write(self, stage: str, ext: str, data) -> str | None:
        """Write one stage's artefact; `data` may be a callable giving it, called only when dumping
        (printing a kernel module costs about a tenth of a second per stage)."""
        self.count += 1
        if not self.dir:
            return None
        if callable(data):
            data = data()
        path = os.path.join(self.dir, f"{self.count:02d}-{stage}.{ext}")
        with open(path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        self.last = path
        return path


def stage_pipelines(arch: str, debug: bool) -> list[tuple[str, list[str]]]:
    """The fa4 pass names of each IR stage for `arch` (what `fa4mlir-opt` can replay)."""
    return [("fa4", registry.fa4_stage(arch)), ("nvvm", registry.nvvm_stage(arch))]


def run_ir_stages(module: ir.Module, arch: str, *, until: str = "nvvm", debug: bool = False,
                  after_stage=None) -> ir.Module:
    """Run the fa4 IR stages on `module` in place, up to and including `until` ("fa4" or "nvvm"),
    and return it: the IR an interpreter executes (fa4mlir.interpret reads the nvvm stage, after
    every fa4 pass and before scf is lowered to a CFG). `after_stage(stage, module)` is called after
    each stage (to read what a later stage erases, e.g. the pipelines' planned offsets). `lower`
    runs the same passes through `lower_module`; this stops before the upstream conversions."""
    stages = stage_pipelines(arch, debug)
    if until not in [name for name, _ in stages]:
        raise ValueError(f"run_ir_stages until={until!r}: expected one of {[name for name, _ in stages]}")
    times = {}
    for stage, names in stages:
        t0 = time.perf_counter()
        registry.run_passes(module, names, debug=debug)
        times[stage] = round(time.perf_counter() - t0, 4)
        if after_stage is not None:
            after_stage(stage, module)
        if stage == until:
            break
    env.log_event("ir_stages", kernel=_kernel_name(module), arch=arch, seconds=times)
    return module


def _kernel_name(module: ir.Module) -> str | None:
    """The kernel function's name, for FA4MLIR_COMPILE_LOG (None if the module has no single kernel)."""
    try:
        return ir.StringAttr(kernel_func(module.operation).attributes["sym_name"]).value
    except PassError:
        return None


def lower_module(module: ir.Module, arch: str, *, debug: bool = False, dumper: _Dumper | None = None,
                 times: dict | None = None, target: str = "ptx", after_stage=None) -> tuple[str, dict]:
    """Run the IR stages on `module` in place; return its PTX (target "ptx") or NVVM IR (target
    "nvvm-ir", for nvjitlink-lto) and the planned resources. `after_stage(stage, module)` is called
    after each fa4 IR stage, as in `run_ir_stages` (one compile can feed the interpreter too:
    `fa4mlir.interpret.StageTap`)."""
    if target not in ("ptx", "nvvm-ir"):
        raise ValueError(f"lower_module target {target!r}: expected 'ptx' or 'nvvm-ir'")
    dumper = dumper or _Dumper("kernel", "0" * 16)
    times = times if times is not None else {}
    ctx = module.context
    dumper.write("build", "mlir", module.__str__)
    for stage, names in stage_pipelines(arch, debug):
        t0 = time.perf_counter()
        try:
            registry.run_passes(module, names, debug=debug)
        except PassError as exc:
            _fail(stage, exc, dumper, f"fa4mlir-opt --pass-pipeline={','.join(names)}")
        times[stage] = time.perf_counter() - t0
        dumper.write(stage, "mlir", module.__str__)
        if after_stage is not None:
            after_stage(stage, module)
    planned = resource_attrs(module)
    stages = (("llvm", UPSTREAM_TO_LLVM),) + ((("ptx", TO_PTX),) if target == "ptx" else ())
    for stage, pipeline in stages:
        t0 = time.perf_counter()
        try:
            with ctx:
                passmanager.PassManager.parse(pipeline).run(module.operation)
        except Exception as exc:  # MLIRError carries the diagnostics
            _fail(stage, exc, dumper, f"mlir-opt --pass-pipeline='{pipeline}'")
        times[stage] = time.perf_counter() - t0
        if stage == "llvm":
            dumper.write(stage, "mlir", module.__str__)
    if target == "nvvm-ir":
        t0 = time.perf_counter()
        try:
            text = to_nvvm_ir(module)
        except Exception as exc:
            _fail("nvvm-ir", exc, dumper, "mlir-translate --mlir-to-llvmir (of the gpu.module body)")
        times["nvvm-ir"] = time.perf_counter() - t0
        dumper.write("nvvm-ir", "ll", text)
        return text, planned
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


def lower(kernel_ir, options: CompileOptions = CompileOptions(), key: str = "", *,
          after_stage=None) -> KernelArtifact:
    """Lower a built kernel to a cubin artefact with `options` (no cache; see `fa4mlir.compiler`).
    `after_stage`: see `lower_module`."""
    debug = options.debug or bool(kernel_ir.config.get("_debug"))  # a kernel may insist (deadlock_sm90)
    backend = options.cubin_backend
    dumper = _Dumper(kernel_ir.name, key or "nokey0000000000000")
    times: dict = {"build": kernel_ir.config.get("_build_seconds", 0.0)}
    lto = backend == "nvjitlink-lto"
    if lto:
        check_lto_arch(kernel_ir.arch)
    with kernel_ir.module.context:
        code, planned = lower_module(kernel_ir.module, kernel_ir.arch, debug=debug, dumper=dumper, times=times,
                                     target="nvvm-ir" if lto else "ptx", after_stage=after_stage)
    t0 = time.perf_counter()
    try:
        if lto:
            cubin, log = nvvm_to_cubin(code, kernel_ir.arch, f"{kernel_ir.name}.ll")
        elif backend == "ptxas":
            cubin, log = ptx_to_cubin_ptxas(code, kernel_ir.arch, f"{kernel_ir.name}.ptx")
        else:
            cubin, log = ptx_to_cubin(code, kernel_ir.arch, f"{kernel_ir.name}.ptx")
    except CompileError as exc:
        repro = (f"python -c 'import sys; from fa4mlir.lowering import nvvm_to_cubin; "
                 f"nvvm_to_cubin(open(sys.argv[1]).read(), \"{kernel_ir.arch}\")'" if lto
                 else f"ptxas -arch={kernel_ir.arch} -O3 -v")
        _fail("cubin", exc, dumper, repro)
    times["cubin"] = time.perf_counter() - t0
    dumper.write("cubin", "cubin", cubin)
    dumper.write("ptxas", "txt", log)
    res = parse_ptxas_report(log)
    res.smem_bytes = planned.get("_smem_bytes", 0)
    res.tmem_cols = planned.get("_tmem_cols", 0)
    res.cubin_backend = backend
    res.threads = kernel_ir.block[0] * kernel_ir.block[1] * kernel_ir.block[2]
    res.stage_seconds = {k: round(v, 4) for k, v in times.items()}
    env.log_event("lower", kernel=kernel_ir.name, arch=kernel_ir.arch, backend=backend, seconds=res.stage_seconds)
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
