"""Kernels with one protocol bug switched on by name, for fa4-verify-pipelines (tests/test_seeded_bugs.py).

Three kernels, each correct when no variant is named:

    gemm                  the sm_90a GEMM's structure (gemm_sm90): `load` (one elected thread of
                          warp 0) fills an `ab_pipe` ring with two TMA boxes per stage; `mma` (two
                          warpgroups) waits, issues wgmmas, and releases the previous stage from one
                          leader thread per warpgroup (peeled first wait, final release after the loop).
    persistent_attention  the persistent sm_90a attention's pipelines (attention_fwd_sm90): a 1-D grid
                          strides over query tiles; `load` fills Q (`q_pipe`), K_0, then K_{j+1} before
                          V_j (`k_pipe`, `v_pipe`); `mma` waits on each and reads it with a wgmma. Each
                          pipeline's stage and phase come from a count of its uses carried over tiles.
    tcgen05_gemm          the sm_100a GEMM's ring (gemm_sm100): one thread of warp 1 issues tcgen05.mma
                          and frees each stage with mma_commit(side="empty").

BUGS maps each bug to the words the verifier's message must contain; BASE names its kernel (gemm
unless listed). Each is a mistake a kernel author makes, mostly in one line. ACCEPTED are correct
programs the verifier must let through. OUT_OF_STATIC_REACH are real bugs the verifier does not see,
with the reason and the runtime tool that catches them; they are built here but not counted.
"""
from __future__ import annotations

from fa4mlir import dsl
from fa4mlir.dialect import builders as fa4
from fa4mlir.dsl import ELEM_BYTES, KernelBuilder, PipeState, const, select
from fa4mlir.kernels.common import tcgen05
from fa4mlir.kernels.common.wgmma import wait_group
from fa4mlir.kernels.gemm_sm90 import GemmConfig, _Ring, issue_mmas

PIPE = "ab_pipe"
LAP = "wrong initial phase"

# bug -> substrings every one of which the verifier's message must contain
BUGS: dict[str, tuple[str, ...]] = {
    # ---- the GEMM (gemm) -------------------------------------------------------------------------
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
    "consumer_initial_phase": (PIPE, "role 'mma'", LAP, "a consumer starts at phase 0", "reads garbage"),
    "producer_initial_phase": (PIPE, "role 'load'", LAP, "a producer starts at phase 0", "deadlock"),
    "release_current_stage": (PIPE, "role 'mma'", "releases the stage it is using instead of the oldest one"),
    "last_stage_constant": (PIPE, "role 'mma'", "stage 4 is out of range", "full[4] is empty[0]"),
    "stage_mod_stages_plus_one": (PIPE, "role 'load'", "computed modulo 5", "num_stages = 4"),
    "stage_advanced_twice": (PIPE, "role 'load'", "advances 2 position(s) per iteration", "1 time(s) per iteration"),
    "extra_consumer_iteration": (PIPE, "role 'mma' waits", "role 'mma' uses the ring 1 more time(s)", "deadlock"),
    "producer_skips_tile": (PIPE, "role 'load' commits", "1 more time(s) than role 'load'"),
    "release_under_data_predicate": (PIPE, "role 'mma'", "arith.cmpf", "not a leader election"),
    "wgmma_before_wait": (PIPE, "role 'mma'", "a wgmma reads a stage", "before its consumer_wait"),
    "release_before_wait_group": (PIPE, "role 'mma'", "release before MMA completion", "mma_wait_group"),
    "wait_group_too_lax": (PIPE, "role 'mma'", "release before MMA completion", "1 group(s) committed after it"),
    "descriptor_box_mismatch": (PIPE, "role 'load'", "descriptor 'b_desc'", "64x128 box", "64x256 box"),
    "tma_before_acquire": (PIPE, "role 'load'", "issued before the producer_acquire of its stage"),
    "commit_before_acquire": (PIPE, "role 'load'", "comes before the producer_acquire of its stage"),
    # ---- the persistent attention (persistent_attention) ---------------------------------------
    "v_on_k_state": ("v_pipe", "role 'load'", "1 stage(s) ahead"),
    "kv_count_short": ("k_pipe", "role 'load'", "no value the loop carries advances with them"),
    "q_count_unconditional": ("q_pipe", "role 'load'", "no value the loop carries advances with them"),
    "v_state_from_q_count": ("v_pipe", "role 'mma'", "state_at of that pipeline's count"),
    "phase_from_count": ("k_pipe", "role 'load'", "the phase is count & 1", "(count // 2) & 1"),
    # ---- the sm_100a GEMM (tcgen05_gemm) --------------------------------------------------------
    "tcgen05_plain_release": (PIPE, "role 'mma'", "release before MMA completion", "tcgen05.mma",
                              "mma_commit(side=\"empty\")"),
}

# correct programs the verifier must accept -> what they show
ACCEPTED: dict[str, str] = {
    "leader_lt": "the release leader of each warpgroup elected as tid % 128 < 1",
    "release_in_both_branches": "one release in each branch of an if/else on a data-dependent condition",
    "tma_before_expect_tx": "the TMA copies issued before arrive.expect_tx on the same barrier",
}

# bugs out of static reach -> (why the verifier cannot see them, the runtime tool that catches them)
OUT_OF_STATIC_REACH: dict[str, tuple[str, str]] = {
    "producer_floor_tiles": (
        "the producer loops over k // bk K tiles, the consumer over ceil(k / bk): two different "
        "expressions of a runtime value, equal only when bk divides k; the verifier compares trip "
        "counts symbolically and reports only a difference that is a number",
        "the debug watchdog (FA4MLIR_DEBUG=1, fa4mlir/passes/_watchdog.py): the consumer's last wait "
        "times out and prints role 'mma', pipeline 'ab_pipe', full[stage] and phase, then traps"),
    "producer_extra_tile": (
        "the producer's persistent tile loop runs to num_tiles + 1, the consumers' to num_tiles: the "
        "loops' counts of uses are results of two different loops whose per-tile uses vary, which the "
        "verifier names but cannot compare",
        "the debug watchdog (FA4MLIR_DEBUG=1): once the extra tile needs a stage no consumer frees, the "
        "producer's wait on empty[stage] times out and prints role 'load', the pipeline, stage and phase"),
}

BASES = ("gemm", "persistent_attention", "tcgen05_gemm")
BASE = {**{b: "persistent_attention" for b in ("v_on_k_state", "kv_count_short", "q_count_unconditional",
                                                "v_state_from_q_count", "phase_from_count", "producer_extra_tile")},
        "tcgen05_plain_release": "tcgen05_gemm"}


def build(variant: str | None = None, base: str = "gemm") -> dsl.KernelIR:
    """The kernel `base` (correct), or the kernel of a BUGS / ACCEPTED / OUT_OF_STATIC_REACH variant."""
    if variant is not None:
        if variant not in {**BUGS, **ACCEPTED, **OUT_OF_STATIC_REACH}:
            raise ValueError(f"unknown seeded bug {variant!r}; known: {', '.join([*BUGS, *ACCEPTED, *OUT_OF_STATIC_REACH])}")
        base = BASE.get(variant, "gemm")
    return {"gemm": _gemm, "persistent_attention": _attention, "tcgen05_gemm": _tcgen05_gemm}[base](variant)


# ---- gemm ---------------------------------------------------------------------------------------
def _advance(s: PipeState, bug: str) -> PipeState:
    """PipeState.advance, or one of its bugs: the phase selected unchanged at wrap-around; two steps."""
    if bug == "stage_advanced_twice":
        return s.advance().advance()
    if bug != "phase_not_flipped":
        return s.advance()
    nxt = s.stage + 1
    wrap = nxt.eq(s.num_stages)
    return PipeState(select(wrap, 0, nxt), select(wrap, s.phase, s.phase), s.num_stages)


def _gemm(bug: str | None, cfg: GemmConfig = GemmConfig()) -> dsl.KernelIR:
    eb = ELEM_BYTES[cfg.dtype]
    a_bytes, b_bytes = cfg.bm * cfg.bk * eb, cfg.bn * cfg.bk * eb
    kb = KernelBuilder(f"seeded_{bug or 'correct'}", arch="sm_90a", block=(384, 1, 1))
    a_desc = kb.param_tma("a_desc", dtype=cfg.dtype, box=(cfg.bk, cfg.bm))
    b_desc = kb.param_tma("b_desc", dtype=cfg.dtype,
                          box=(cfg.bk, cfg.bn // 2 if bug == "descriptor_box_mismatch" else cfg.bn))
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
                load_tiles = k_size // cfg.bk if bug == "producer_floor_tiles" else num_k_tiles
                _load(kb, cfg, bug, ab_pipe, a_desc, b_desc, a_smem, b_smem, load_tiles, a_bytes, b_bytes)
            with kb.role("mma", first_warp=4, num_warps=8, regs=232):
                _mma(kb, cfg, bug, ab_pipe, a_smem, b_smem, num_k_tiles, a_bytes, b_bytes)
    return kb.finish()


def _load(kb, cfg, bug, ab_pipe, a_desc, b_desc, a_smem, b_smem, num_k_tiles, a_bytes, b_bytes):
    eb = ELEM_BYTES[cfg.dtype]
    with kb.if_(kb.elect_one()).then_():
        state = ab_pipe.initial_state()
        if bug == "producer_initial_phase":
            state = PipeState(const(0), const(1), cfg.stages)
        loop = kb.for_(1 if bug == "producer_skips_tile" else 0, num_k_tiles, 1, carry=(state.stage, state.phase))
        with loop as (kt, (stage, phase)):
            s = PipeState(stage, phase, cfg.stages - 1 if bug == "stage_count" else cfg.stages)
            if bug == "stage_mod_stages_plus_one":   # the state from the tile index, off by one in the ring size
                s = PipeState(kt % (cfg.stages + 1), (kt // (cfg.stages + 1)) & 1, cfg.stages)
            k0 = kt * cfg.bk
            load_stage = (s.stage + 1) % cfg.stages if bug == "tma_wrong_stage" else s.stage

            def load_a():
                fa4.tma_load(a_desc, kb.gep(a_smem, s.stage * a_bytes, "i8"), load_stage, [k0, const(0)],
                             pipe="kv_pipe" if bug == "undeclared_pipe" else PIPE, box=[cfg.bk, cfg.bm], elem_bytes=eb)

            def commit():
                ab_pipe.producer_commit(s, tx_bytes=a_bytes if bug == "wrong_tx_bytes" else a_bytes + b_bytes)

            if bug == "tma_before_acquire":
                load_a()
            if bug == "commit_before_acquire":
                commit()
            # 1. wait until the consumers freed this stage
            ab_pipe.producer_acquire(s)
            if bug == "wait_in_wrong_role":
                ab_pipe.consumer_wait(s)
            # 2. announce the bytes both boxes land on full[stage] (legal after the copies, too)
            if bug not in ("missing_commit", "tma_before_expect_tx", "commit_before_acquire"):
                commit()
            # 3. the copies
            if bug != "tma_before_acquire":
                load_a()
            fa4.tma_load(b_desc, kb.gep(b_smem, s.stage * b_bytes, "i8"), load_stage, [k0, const(0)],
                         pipe=PIPE, box=[cfg.bk, cfg.bn], elem_bytes=eb)
            if bug == "tma_before_expect_tx":
                commit()
            if bug == "wait_in_wrong_role":
                ab_pipe.consumer_release(s)
            nxt = _advance(s, bug)
            loop.yield_(nxt.stage, nxt.phase)


def _mma(kb, cfg, bug, ab_pipe, a_smem, b_smem, num_k_tiles, a_bytes, b_bytes):
    tid = kb.thread_idx(0)
    a_row_bytes = (tid // 128 - 1) * (64 * cfg.bk * ELEM_BYTES[cfg.dtype])
    is_leader = (tid % 128).lt(1) if bug == "leader_lt" else (tid % 128).eq(0)
    acc = const(0.0, ("f32", cfg.bn // 2))
    s0 = ab_pipe.initial_state()
    if bug == "consumer_initial_phase":
        s0 = PipeState(const(0), const(1), cfg.stages)
    # 1. first K tile: wait, issue, keep its group in flight
    ab_pipe.consumer_wait(s0)
    ring = _Ring(a_smem, b_smem, ab_pipe, a_bytes, b_bytes)
    acc = issue_mmas(kb, cfg, ring, s0.stage, a_row_bytes, acc)
    s1 = s0.advance()
    hi = num_k_tiles + 1 if bug == "extra_consumer_iteration" else num_k_tiles
    loop = kb.for_(1, hi, 1, carry=(s1.stage, s1.phase, s0.stage, acc))
    with loop as (_, (stage, phase, prev_stage, acc_in)):
        s = PipeState(stage, phase, cfg.stages)
        released = PipeState(stage if bug == "release_current_stage" else prev_stage, phase, cfg.stages)
        # 2. wait for K tile j, issue its wgmmas
        if bug == "wgmma_before_wait":
            acc_j = issue_mmas(kb, cfg, ring, stage, a_row_bytes, acc_in)
            ab_pipe.consumer_wait(s)
        else:
            ab_pipe.consumer_wait(s)
            acc_j = issue_mmas(kb, cfg, ring, stage, a_row_bytes, acc_in)
        if bug == "release_before_wait_group":
            with kb.if_(is_leader).then_():
                ab_pipe.consumer_release(released)
        # 3. free tile j-1's stage once its group retired
        acc_j = wait_group(acc_j, pending=2 if bug == "wait_group_too_lax" else 1)
        if bug == "release_by_all_threads":
            ab_pipe.consumer_release(released)
        elif bug == "release_under_data_predicate":   # "skip" the release when the tile added nothing
            with kb.if_(is_leader & acc_j[0].gt(0.0)).then_():
                ab_pipe.consumer_release(released)
        elif bug == "release_in_both_branches":
            with kb.if_(is_leader).then_():
                branch = kb.if_(acc_j[0].gt(0.0))
                with branch.then_():
                    ab_pipe.consumer_release(released)
                with branch.else_():
                    ab_pipe.consumer_release(released)
        elif bug not in ("missing_release", "release_before_wait_group"):
            with kb.if_(is_leader).then_():
                ab_pipe.consumer_release(released)
        nxt = s.advance()
        loop.yield_(nxt.stage, phase if bug == "phase_not_carried" else nxt.phase, stage, acc_j)
    _, _, last_stage, acc = loop.results
    wait_group(acc, pending=0)
    with kb.if_(is_leader).then_():
        last = const(cfg.stages) if bug == "last_stage_constant" else last_stage   # "the last stage", 1-based
        ab_pipe.consumer_release(PipeState(last, const(0), cfg.stages))


# ---- persistent_attention -------------------------------------------------------------------------
BM, BN, COLS, KV_STAGES = 128, 64, 64, 2          # query rows, keys per block, head dim (one 128 B row)
Q_BYTES, KV_BYTES = BM * COLS * 2, BN * COLS * 2


def _attention(bug: str | None) -> dsl.KernelIR:
    kb = KernelBuilder(f"seeded_{bug or 'attention'}", arch="sm_90a", block=(384, 1, 1))
    descs = {n: kb.param_tma(f"{n}_desc", dtype="bf16", box=(COLS, rows)) for n, rows in (("q", BM), ("k", BN), ("v", BN))}
    seqlen_k, num_tiles = kb.param_i32("seqlen_k"), kb.param_i32("num_tiles")
    with kb.body():
        smem = {"q": kb.smem("q_smem", 2 * Q_BYTES), "k": kb.smem("k_smem", KV_STAGES * KV_BYTES),
                "v": kb.smem("v_smem", KV_STAGES * KV_BYTES)}
        pipes = {"q": kb.pipeline("q_pipe", num_stages=2, producer="load", consumers=["mma"], consumer_arrivals=2),
                 **{n: kb.pipeline(f"{n}_pipe", num_stages=KV_STAGES, producer="load", consumers=["mma"],
                                   consumer_arrivals=2) for n in ("k", "v")}}
        kb.pipeline_init()
        with kb.warp_roles():
            with kb.role("load", first_warp=0, num_warps=1, regs=40):
                tiles = num_tiles + 1 if bug == "producer_extra_tile" else num_tiles
                _tiles(kb, bug, tiles, seqlen_k, lambda n, q, kv: _load_tile(kb, bug, pipes, descs, smem, n, q, kv))
            with kb.role("mma", first_warp=4, num_warps=8, regs=232):
                is_leader = (kb.thread_idx(0) % 128).eq(0)
                _tiles(kb, bug, num_tiles, seqlen_k, lambda n, q, kv: _consume_tile(kb, bug, pipes, smem, is_leader,
                                                                                   n, q, kv))
    return kb.finish()


def _tiles(kb, bug, num_tiles, seqlen_k, body):
    """body(n_blocks, q_count, kv_count) per query tile t of a 1-D grid striding over all tiles; the
    counts of uses of q_pipe and of k_pipe / v_pipe so far carry the pipelines' states over tiles.
    Causal: tile t visits min(2 (t + 1), ceil(seqlen_k / BN)) KV blocks."""
    loop = kb.for_(kb.block_idx(0), num_tiles, kb.grid_dim(0), carry=(const(0), const(0)))
    with loop as (t, (q_count, kv_count)):
        n_all = (seqlen_k + (BN - 1)) // BN
        reach = (t + 1) * (BM // BN)
        n_blocks = select(reach.lt(n_all), reach, n_all)
        body(n_blocks, q_count, kv_count)
        q_used = const(1) if bug == "q_count_unconditional" else select(n_blocks.gt(0), 1, 0)
        loop.yield_(q_count + q_used, kv_count + (n_blocks - 1 if bug == "kv_count_short" else n_blocks))


def _kv_state(pipe, count, bug) -> PipeState:
    if bug == "phase_from_count":
        return PipeState(count % pipe.num_stages, count & 1, pipe.num_stages)
    return pipe.state_at(count)


def _load_tile(kb, bug, pipes, descs, smem, n_blocks, q_count, kv_count):
    # a tile without KV blocks loads nothing (its Q would land on the tile the epilogue writes)
    with kb.if_(kb.elect_one() & n_blocks.gt(0)).then_():
        def load(name, s, rows, row, stage_bytes):
            pipes[name].producer_acquire(s)
            pipes[name].producer_commit(s, tx_bytes=rows * COLS * 2)
            fa4.tma_load(descs[name], kb.gep(smem[name], s.stage * stage_bytes, "i8"), s.stage, [const(0), row],
                         pipe=pipes[name].name, box=[COLS, rows], elem_bytes=2)

        # 1. K_0, then Q; 2. K_{j+1} before V_j; 3. the last V
        k0 = _kv_state(pipes["k"], kv_count, bug)
        load("k", k0, BN, const(0), KV_BYTES)
        load("q", pipes["q"].state_at(q_count), BM, const(0), Q_BYTES)
        loop = kb.for_(0, n_blocks - 1, 1, carry=k0)
        with loop as (j, s):
            nxt = s.advance()
            load("k", nxt, BN, (j + 1) * BN, KV_BYTES)
            load("v", nxt if bug == "v_on_k_state" else s, BN, j * BN, KV_BYTES)
            loop.yield_(nxt)
        load("v", loop.results, BN, (n_blocks - 1) * BN, KV_BYTES)


def _wgmma(kb, a_addr, b_addr, n: int):
    """One wgmma m64 n k16 from SMEM into a fresh accumulator, committed as a group."""
    acc = const(0.0, ("f32", n // 2))
    fa4.mma_fence()
    a = fa4.smem_desc(a_addr, swizzle=128, lbo=16, sbo=1024)
    b = fa4.smem_desc(b_addr, swizzle=128, lbo=16, sbo=1024)
    acc = dsl.Value(fa4.mma(a, b, const(1, "i1"), [acc], result_types=[acc.type], m=64, n=n, k=16,
                            a_source="smem", ab_dtype="bf16", acc_dtype="f32"))
    fa4.mma_commit_group()
    return acc


def _consume_tile(kb, bug, pipes, smem, is_leader, n_blocks, q_count, kv_count):
    with kb.if_(n_blocks.gt(0)).then_():
        q0 = pipes["q"].state_at(q_count)
        pipes["q"].consumer_wait(q0)
        q_addr = kb.gep(smem["q"], q0.stage * Q_BYTES, "i8")
        k0 = _kv_state(pipes["k"], kv_count, bug)
        v0 = _kv_state(pipes["v"], q_count if bug == "v_state_from_q_count" else kv_count, bug)
        loop = kb.for_(0, n_blocks, 1, carry=(k0, v0))
        with loop as (_, (k, v)):
            for name, s in (("k", k), ("v", v)):
                # wait for the block, read it, release it once the wgmma retired
                pipes[name].consumer_wait(s)
                wait_group(_wgmma(kb, q_addr, kb.gep(smem[name], s.stage * KV_BYTES, "i8"), BN), pending=0)
                with kb.if_(is_leader).then_():
                    pipes[name].consumer_release(s)
            loop.yield_(k.advance(), v.advance())
        with kb.if_(is_leader).then_():
            pipes["q"].consumer_release(q0)


# ---- tcgen05_gemm ---------------------------------------------------------------------------------
def _tcgen05_gemm(bug: str | None, cfg: GemmConfig = GemmConfig(stages=2)) -> dsl.KernelIR:
    a_bytes, b_bytes = cfg.bm * cfg.bk * 2, cfg.bn * cfg.bk * 2
    kb = KernelBuilder(f"seeded_{bug or 'tcgen05'}", arch="sm_100a", block=(128, 1, 1))
    descs = (kb.param_tma("a_desc", dtype="bf16", box=(cfg.bk, cfg.bm)),
             kb.param_tma("b_desc", dtype="bf16", box=(cfg.bk, cfg.bn)))
    k_size, acc_tmem = kb.param_i32("k"), kb.param_i32("acc_tmem")
    with kb.body():
        bufs = (kb.smem("a_smem", cfg.stages * a_bytes), kb.smem("b_smem", cfg.stages * b_bytes))
        ab_pipe = kb.pipeline(PIPE, num_stages=cfg.stages, producer="load", consumers=["mma"])
        kb.pipeline_init()
        num_k_tiles = (k_size + (cfg.bk - 1)) // cfg.bk
        with kb.warp_roles():
            with kb.role("load", first_warp=0, num_warps=1):
                with kb.if_(kb.elect_one()).then_():
                    loop = kb.for_(0, num_k_tiles, 1, carry=ab_pipe.initial_state())
                    with loop as (kt, s):
                        ab_pipe.producer_acquire(s)
                        ab_pipe.producer_commit(s, tx_bytes=a_bytes + b_bytes)
                        for desc, buf, stage_bytes, rows in zip(descs, bufs, (a_bytes, b_bytes), (cfg.bm, cfg.bn)):
                            fa4.tma_load(desc, kb.gep(buf, s.stage * stage_bytes, "i8"), s.stage, [kt * cfg.bk, const(0)],
                                         pipe=PIPE, box=[cfg.bk, rows], elem_bytes=2)
                        loop.yield_(s.advance())
            with kb.role("mma", first_warp=1, num_warps=1):
                with kb.if_(kb.elect_one()).then_():
                    loop = kb.for_(0, num_k_tiles, 1, carry=ab_pipe.initial_state())
                    with loop as (kt, s):
                        ab_pipe.consumer_wait(s)
                        a, b = (fa4.smem_desc(kb.gep(buf, s.stage * n, "i8"), swizzle=128, lbo=16, sbo=1024)
                                for buf, n in zip(bufs, (a_bytes, b_bytes)))
                        tcgen05.mma(a, b, kt.ne(0), acc_tmem, m=cfg.bm, n=cfg.bn, k=16, ab_dtype="bf16")
                        if bug == "tcgen05_plain_release":   # as on sm_90a: but the MMA is still running
                            ab_pipe.consumer_release(s)
                        else:
                            ab_pipe.mma_commit(s, side="empty")
                        loop.yield_(s.advance())
    return kb.finish()
