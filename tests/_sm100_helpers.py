"""Helpers the deviceless sm_100a kernel tests share (test_attention_sm100.py, _paged.py, _serving.py):
compile a config once per test session, read its SASS, check what every compiled config must
hold, and run the pipeline verifier on it (whole, or with one commit removed)."""
from __future__ import annotations

import re
import time

import pytest

_BUILT: dict = {}


def compiled(cfg, key: str, backend: str | None = None):
    """(artifact, compile seconds) of `cfg` lowered with `backend` (default: the kernel's own,
    nvJitLink LTO, as it ships) under cache key `key`, once per session."""
    from fa4mlir import kernels, lowering
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.lowering import CompileOptions
    backend = backend or kernels.cubin_backend("attention_fwd_sm100")
    if (cfg, backend, key) not in _BUILT:
        t0 = time.perf_counter()
        art = lowering.lower(k100.build(cfg), CompileOptions(cubin_backend=backend), key=key)
        _BUILT[(cfg, backend, key)] = (art, time.perf_counter() - t0)
    return _BUILT[(cfg, backend, key)]


def sass_of(art) -> str:
    """The cubin's SASS (nvdisasm); skips the test when nvdisasm is not installed."""
    from fa4mlir.sass import disassemble, find_nvdisasm
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm): cannot read the SASS")
    return disassemble(art.cubin)


def sass_count(sass: str, op: str) -> int:
    """How many times the SASS opcode `op` (a whole word) occurs."""
    return len(re.findall(rf"\b{op}\b", sass))


def role_budgets(sass: str) -> set[int]:
    """The setmaxnreg operands in the SASS (USETMAXREG)."""
    return {int(v, 16) for v in re.findall(r"USETMAXREG\.\S+\s+(?:UP\d+,\s*)?(0x[0-9a-f]+)", sass)}


def check_resources(cfg, art, seconds: float) -> None:
    """What a config compiled through nvJitLink LTO must hold: 0 spills and no stack, setmaxnreg
    honoured (128 registers at entry, 512 threads), TMEM as planned, SMEM within 1 KiB over the
    plan, the launch parameters of the config."""
    r = art.resources
    print(f"{art.name}: {r['registers']} regs at entry, spills {r['spill_stores']}/{r['spill_loads']}, "
          f"SMEM {art.smem_bytes} B, TMEM {r['tmem_cols']} cols, compile {seconds:.1f} s")
    assert art.arch == "sm_100a" and r["cubin_backend"] == "nvjitlink-lto"
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    assert not r["setmaxnreg_ignored"] and r["registers"] == 128 and r["threads"] == 512
    assert r["tmem_cols"] == cfg.tmem_plan()["alloc"]
    plan = cfg.smem_plan()
    assert plan["total"] <= art.smem_bytes <= plan["total"] + 1024
    assert [(p.name, p.kind) for p in art.params] == list(cfg.launch_params)


def verify_pipelines(module) -> None:
    """fa4-verify-pipelines over a built kernel's module (PassError when it rejects the schedule)."""
    from fa4mlir.passes import registry
    registry.run_passes(module, ["fa4-verify-pipelines"])


def check_verifier_rejects_a_dropped_commit(cfg, pipe: str) -> None:
    """The kernel of `cfg` with its first fa4.mma_commit of pipe `pipe` erased: the verifier names the pipe."""
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.passes._util import PassError, attr, ops_named
    kir = k100.build(cfg)
    ops = [op for op in ops_named(kir.module.operation, "fa4.mma_commit") if attr(op, "pipe") == pipe]
    assert ops
    ops[0].erase()
    with pytest.raises(PassError, match=f"'{pipe}'"):
        verify_pipelines(kir.module)
