"""The sm_90a GEMM's producer/consumer structure (gemm_sm90), with one protocol bug switched on by `bug=`.

Roles as in gemm_sm90: `load` (one elected thread of warp 0) fills an `ab_pipe` ring with two TMA
boxes per stage; `mma` (two warpgroups) waits, issues wgmmas, and releases the previous stage from
one leader thread per warpgroup (peeled first wait, final release after the loop). Each entry of
`BUGS` maps a bug name to the diagnostic words fa4-verify-pipelines must produce for it.
"""
from __future__ import annotations

from fa4mlir import dsl
from fa4mlir.dialect import builders as fa4
from fa4mlir.dsl import ELEM_BYTES, KernelBuilder, PipeState, const, select
from fa4mlir.kernels.common.wgmma import wait_group
from fa4mlir.kernels.gemm_sm90 import GemmConfig, _Ring, issue_mmas

PIPE = "ab_pipe"

# bug -> substrings every one of which the verifier's message must contain
BUGS: dict[str, tuple[str, ...]] = {
    "missing_release": (PIPE, "role 'mma'", "1 wait(s) but 0 release(s)", "missing consumer_release"),
    "missing_commit": (PIPE, "role 'load'", "1 acquire(s) but 0 commit(s)", "missing producer_commit"),
    "wrong_tx_bytes": (PIPE, "role 'load'", "expects tx_bytes = 16384", "deliver 49152 bytes"),
    "phase_not_flipped": (PIPE, "role 'load'", "phase not flipped at wrap-around"),
    "phase_not_carried": (PIPE, "role 'mma'", "phase not flipped at wrap-around", "yields the phase"),
    "consumer_count": (PIPE, "consumer_arrivals = 1", "2 thread(s) arrive on empty[stage]", "role 'mma'"),
    "release_by_all_threads": (PIPE, "role 'mma'", "arrivals on empty[stage] disagree", "256 thread(s)"),
    "stage_count": (PIPE, "role 'load'", "wraps at 3", "num_stages = 4"),
    "no_consumer": (PIPE, "no consumer role"),
    "wait_in_wrong_role": (PIPE, "wrong role", "role 'load'", "consumer action", "['mma']"),
    "undeclared_pipe": ("kv_pipe", "role 'load'", "not declared", "fa4.tma_load"),
    "producer_missing": (PIPE, "producer role 'tma'", "not a declared fa4.role"),
    "tma_wrong_stage": (PIPE, "role 'load'", "tma_load lands on stage", "load into the stage you committed"),
}


def _broken_advance(s: PipeState, bug: str) -> PipeState:
    """PipeState.advance, except for the phase bug: the phase is selected unchanged at wrap-around."""
    if bug != "phase_not_flipped":
        return s.advance()
    nxt = s.stage + 1
    wrap = nxt.eq(s.num_stages)
    return PipeState(select(wrap, 0, nxt), select(wrap, s.phase, s.phase), s.num_stages)


def build(bug: str | None = None, cfg: GemmConfig = GemmConfig()) -> dsl.KernelIR:
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown seeded bug {bug!r}; known: {', '.join(BUGS)}")
    eb = ELEM_BYTES[cfg.dtype]
    a_bytes, b_bytes = cfg.bm * cfg.bk * eb, cfg.bn * cfg.bk * eb
    kb = KernelBuilder(f"seeded_{bug or 'correct'}", arch="sm_90a", block=(384, 1, 1))
    a_desc = kb.param_tma("a_desc", dtype=cfg.dtype, box=(cfg.bk, cfg.bm))
    b_desc = kb.param_tma("b_desc", dtype=cfg.dtype, box=(cfg.bk, cfg.bn))
    k_size = kb.param_i32("k")
    with kb.body():
        a_smem = kb.smem("a_smem", cfg.stages * a_bytes)
        b_smem = kb.smem("b_smem", cfg.stages * b_bytes)
        ab_pipe = kb.pipeline(PIPE, num_stages=cfg.stages,
                              producer="tma" if bug == "producer_missing" else "load",
                              consumers=[] if bug == "no_consumer" else ["mma"], producer_arrivals=1,
                              consumer_arrivals=1 if bug == "consumer_count" else 2)
        kb.pipeline_init()
        num_k_tiles = (k_size + (cfg.bk - 1)) // cfg.bk
        with kb.warp_roles():
            with kb.role("load", first_warp=0, num_warps=1, regs=40):
                _load(kb, cfg, bug, ab_pipe, a_desc, b_desc, a_smem, b_smem, num_k_tiles, a_bytes, b_bytes)
            with kb.role("mma", first_warp=4, num_warps=8, regs=232):
                _mma(kb, cfg, bug, ab_pipe, a_smem, b_smem, num_k_tiles, a_bytes, b_bytes)
    return kb.finish()


def _load(kb, cfg, bug, ab_pipe, a_desc, b_desc, a_smem, b_smem, num_k_tiles, a_bytes, b_bytes):
    with kb.if_(kb.elect_one()).then_():
        state = ab_pipe.initial_state()
        loop = kb.for_(0, num_k_tiles, 1, carry=(state.stage, state.phase))
        with loop as (kt, (stage, phase)):
            s = PipeState(stage, phase, cfg.stages - 1 if bug == "stage_count" else cfg.stages)
            # 1. wait until the consumers freed this stage
            ab_pipe.producer_acquire(s)
            if bug == "wait_in_wrong_role":
                ab_pipe.consumer_wait(s)
            # 2. announce the bytes both boxes land on full[stage]
            if bug != "missing_commit":
                ab_pipe.producer_commit(s, tx_bytes=a_bytes if bug == "wrong_tx_bytes" else a_bytes + b_bytes)
            # 3. the copies
            k0 = kt * cfg.bk
            load_stage = (stage + 1) % cfg.stages if bug == "tma_wrong_stage" else stage
            fa4.tma_load(a_desc, kb.gep(a_smem, stage * a_bytes, "i8"), load_stage, [k0, const(0)],
                         pipe="kv_pipe" if bug == "undeclared_pipe" else PIPE, box=[cfg.bk, cfg.bm],
                         elem_bytes=ELEM_BYTES[cfg.dtype])
            fa4.tma_load(b_desc, kb.gep(b_smem, stage * b_bytes, "i8"), load_stage, [k0, const(0)],
                         pipe=PIPE, box=[cfg.bk, cfg.bn], elem_bytes=ELEM_BYTES[cfg.dtype])
            if bug == "wait_in_wrong_role":
                ab_pipe.consumer_release(s)
            nxt = _broken_advance(s, bug)
            loop.yield_(nxt.stage, nxt.phase)


def _mma(kb, cfg, bug, ab_pipe, a_smem, b_smem, num_k_tiles, a_bytes, b_bytes):
    tid = kb.thread_idx(0)
    a_row_bytes = (tid // 128 - 1) * (64 * cfg.bk * ELEM_BYTES[cfg.dtype])
    is_leader = (tid % 128).eq(0)
    acc = const(0.0, ("f32", cfg.bn // 2))
    s0 = ab_pipe.initial_state()
    # 1. first K tile: wait, issue, keep its group in flight
    ab_pipe.consumer_wait(s0)
    ring = _Ring(a_smem, b_smem, ab_pipe, a_bytes, b_bytes)
    acc = issue_mmas(kb, cfg, ring, s0.stage, a_row_bytes, acc)
    s1 = s0.advance()
    loop = kb.for_(1, num_k_tiles, 1, carry=(s1.stage, s1.phase, s0.stage, acc))
    with loop as (_, (stage, phase, prev_stage, acc_in)):
        s = PipeState(stage, phase, cfg.stages)
        # 2. wait for K tile j, issue its wgmmas
        ab_pipe.consumer_wait(s)
        acc_j = issue_mmas(kb, cfg, ring, stage, a_row_bytes, acc_in)
        # 3. free tile j-1's stage once its group retired
        acc_j = wait_group(acc_j, pending=1)
        if bug == "release_by_all_threads":
            ab_pipe.consumer_release(PipeState(prev_stage, phase, cfg.stages))
        elif bug != "missing_release":
            with kb.if_(is_leader).then_():
                ab_pipe.consumer_release(PipeState(prev_stage, phase, cfg.stages))
        nxt = s.advance()
        loop.yield_(nxt.stage, phase if bug == "phase_not_carried" else nxt.phase, stage, acc_j)
    _, _, last_stage, acc = loop.results
    wait_group(acc, pending=0)
    with kb.if_(is_leader).then_():
        ab_pipe.consumer_release(PipeState(last_stage, const(0), cfg.stages))
