"""A kernel that deadlocks on purpose, for the debug watchdog's GPU test (tests/gpu/test_watchdog_gpu.py).

Roles: warp 0 `load` is the declared producer of `kv_pipe` but never commits; warpgroup 1
`consumer` waits for full[0] (phase 0), which therefore never completes. fa4-verify-pipelines
rejects this kernel ("never commits"), so it is built with the kernel function marked
`fa4.unverified` and compiled with the watchdog on (FA4MLIR_DEBUG semantics): the wait times out,
one lane per consumer warp prints role, pipeline, stage and phase, and the kernel traps.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import dsl
from ..dialect.query import mark_unverified
from ..dsl import KernelBuilder
from .common.fields import ConfigError, check_fields


@dataclass(frozen=True)
class DeadlockConfig:
    num_stages: int = 2

    def validate(self) -> "DeadlockConfig":
        check_fields(self)
        if self.num_stages < 1:
            raise ConfigError(f"num_stages must be >= 1, got {self.num_stages}")
        return self

    def key(self) -> dict:
        return {"kernel": "deadlock_sm90", "debug": True, "verify": False, **self.__dict__}


def build(cfg: DeadlockConfig = DeadlockConfig()) -> dsl.KernelIR:
    kb = KernelBuilder("deadlock_sm90_debug", arch="sm_90a", block=(256, 1, 1), config=cfg.key())
    out = kb.param_ptr("out")
    with kb.body():
        kv_pipe = kb.pipeline("kv_pipe", num_stages=cfg.num_stages, producer="load", consumers=["consumer"],
                              producer_arrivals=1, consumer_arrivals=1)
        kb.pipeline_init()
        with kb.warp_roles():
            with kb.role("load", first_warp=0, num_warps=1):
                pass  # the bug: the producer never commits full[0]
            with kb.role("consumer", first_warp=4, num_warps=4):
                s = kv_pipe.initial_state()
                # 1. wait for stage 0: never completes, the watchdog fires after WATCHDOG_NS
                kv_pipe.consumer_wait(s)
                is_leader = (kb.thread_idx(0) % 128).eq(0)
                with kb.if_(is_leader).then_():
                    kb.store(dsl.const(1), out)
                    kv_pipe.consumer_release(s)
    kir = kb.finish()
    kir.config["_debug"] = True  # compile with the watchdog whatever FA4MLIR_DEBUG says
    with kir.module.context:
        mark_unverified(kir.module.operation)
    return kir


def bundle_entries() -> list:
    """What `python -m fa4mlir bundle --set gpu-tests` compiles for the watchdog test."""
    return [("deadlock_sm90", DeadlockConfig())]
