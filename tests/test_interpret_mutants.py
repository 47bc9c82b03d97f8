"""Deviceless: seeded bugs in the sm_100a attention kernel, each caught by the interpreter (issue 30,
item 4), and what the static checks make of them.

A mutant is an edit of the kernel's Python source, the mistake an author makes: one line of the
kernel or its config changed (`Mutant.old` -> `Mutant.new`, which must occur exactly once), the
edited function compiled with the original file name and line numbers (so every op keeps its true
source location) and patched in for the test. The interpreter then runs the mutant on 256 x 384
(two Q tiles, three K/V blocks: every pipeline wraps, the MMA loop body runs twice) and must either
report a fault or produce numbers outside the FA rule. The pipeline verifier's verdict is recorded
(a mutant it rejects is marked fa4.unverified to be interpreted anyway); `test_mutant_table`
prints the table that notes/RESULTS.md keeps. ~1.5 s per mutant on a 2-core CPU.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass

import pytest

pytest.importorskip("torch")

from fa4mlir import env, interpret  # noqa: E402
from fa4mlir.dialect.query import mark_unverified  # noqa: E402
from fa4mlir.kernels import attention_fwd_sm100 as k100  # noqa: E402
from fa4mlir.kernels import attention_sm100_config as fcfg  # noqa: E402
from fa4mlir.passes import verify_pipelines  # noqa: E402
from fa4mlir.passes._util import PassError  # noqa: E402
from tests.test_interpret_attention import run_attention  # noqa: E402

SEQLEN_Q, SEQLEN_K = 256, 384
SWEEP = env.get_bool("FA4MLIR_INTERPRET_SWEEP")     # every mutant under every schedule


@dataclass(frozen=True)
class Mutant:
    owner: object          # the module or class holding the function
    name: str              # the function's attribute name on `owner`
    old: str               # the correct source text (exactly once in the function)
    new: str               # what the author wrote instead
    what: str              # the bug in words
    head_dim: int = 64     # 128 where the bug needs two 64-column chunks of V


MUTANTS = {
    "o1_column": Mutant(
        fcfg.FA4Config, "tmem_plan", "o1 = o0 + self.padded_head_dim_v", "o1 = o0 + self.padded_head_dim_v - 1",
        "TMEM column of O1 one too low (overlaps O0's last column)"),
    "p_over_c": Mutant(
        fcfg.FA4Config, "tmem_plan", '"P0": s0 + self.bn // 2, "P1": s1 + self.bn // 2', '"P0": s0, "P1": s1',
        "P_i written to S_i's lower columns (over C_i) instead of its upper half"),
    "v_lbo": Mutant(
        k100._Issuer, "pv", "lbo=cfg.bn * SW,", "lbo=cfg.bn * SW + 16,",
        "V descriptor's leading-byte offset one 16-byte unit off", head_dim=128),
    "release_dropped": Mutant(
        k100._Correction, "read_c", "        c_pipe.consumer_release(st)\n", "",
        "correction never releases C_i (consumer_release removed)"),
    "release_skipped": Mutant(
        k100._Correction, "rescale",
        '            fa4.tmem_wait(kind="st")\n        kb.fence("tcgen05_before")\n        o_pipe.consumer_release(st.o)',
        '            fa4.tmem_wait(kind="st")\n            kb.fence("tcgen05_before")\n'
        '            o_pipe.consumer_release(st.o)',
        "correction releases O_i only when it rescaled (release inside the vote.any branch)"),
    "phase_flipped": Mutant(
        k100._Softmax, "read_s", "self.pipes.s.consumer_wait(st)",
        "self.pipes.s.consumer_wait(dsl.PipeState(st.stage, st.phase ^ 1, st.num_stages))",
        "softmax waits for S_i with the phase flipped"),
    "s1_before_o1": Mutant(
        k100, "_mma_role",
        "            mm.pv(1, c.b, c.vr.stage, n.gt(1))                          # O1 <- O1 + P1 V(n-1)\n"
        "            v_pipe.mma_commit(c.vr, side=\"empty\")\n"
        "            mm.s(1, c.a, c.kv.stage)                                    # S1 <- Q1 Kn\n",
        "            mm.s(1, c.a, c.kv.stage)                                    # S1 <- Q1 Kn\n"
        "            mm.pv(1, c.b, c.vr.stage, n.gt(1))                          # O1 <- O1 + P1 V(n-1)\n"
        "            v_pipe.mma_commit(c.vr, side=\"empty\")\n",
        "MMA order S0, S1, O1, O0: S1(n) overwrites P1(n-1) before O1 += P1 V(n-1) reads it"),
    "c_fence_after_dropped": Mutant(
        k100._Softmax, "store_c", '        self.kb.fence("tcgen05_after")', "        pass",
        "softmax stores C_i after acquiring it without tcgen05.fence::after_thread_sync"),
    "c_fence_before_dropped": Mutant(
        k100._Correction, "read_c", '        kb.fence("tcgen05_before")\n', "",
        "correction releases C_i after its tcgen05.ld without tcgen05.fence::before_thread_sync"),
    "proxy_fence_dropped": Mutant(
        k100._Correction, "epilogue", '        kb.fence("async_smem")\n', "",
        "epilogue hands O_i's st.shared tile to the TMA store without fence.proxy.async"),
}


def mutated(m: Mutant):
    """The function `m.owner.m.name` with `m.old` replaced by `m.new`, compiled at its own file and lines."""
    fn = inspect.getattr_static(m.owner, m.name)
    lines, first = inspect.getsourcelines(fn)
    src = "".join(lines)
    if src.count(m.old) != 1:
        raise AssertionError(f"mutant of {m.name}: {m.old!r} occurs {src.count(m.old)} times (the kernel changed?)")
    tree = ast.parse(textwrap.dedent(src.replace(m.old, m.new)))
    ast.increment_lineno(tree, first - 1)
    scope: dict = {}
    exec(compile(tree, inspect.getsourcefile(fn), "exec"), fn.__globals__, scope)
    return scope[m.name]


def verifier_verdict(kir) -> str:
    try:
        with kir.module.context:
            verify_pipelines.run(kir.module.operation)
    except PassError as exc:
        return "rejects: " + str(exc).split(":", 2)[1].strip()[:60]
    return "accepts"


def outcome(name: str, monkeypatch, policy: str = "lazy") -> dict:
    """Build the mutant, ask the verifier, interpret it; what came out."""
    m = MUTANTS[name]
    monkeypatch.setattr(m.owner, m.name, mutated(m))
    cfg = fcfg.FA4Config(head_dim=m.head_dim, head_dim_v=m.head_dim, num_q_heads=1, num_kv_heads=1)
    kir = k100.build(cfg)
    verdict = verifier_verdict(kir)
    if verdict != "accepts":
        with kir.module.context:
            mark_unverified(kir.module.operation)
    kernel = interpret.load(kir)
    try:
        report = run_attention(m.head_dim, False, SEQLEN_Q, SEQLEN_K, policy=policy, kernel=kernel)
    except interpret.Fault as exc:
        return {"verifier": verdict, "caught": True, "how": f"{type(exc).__name__}: {exc.message.splitlines()[0]}",
                "fault": exc}
    how = "passes the FA rule" if report["ok"] else \
        f"wrong numbers (O err {report['max_err']:.3g} > {report['bound']:.3g}, LSE err {report['lse_err']:.3g})"
    return {"verifier": verdict, "caught": not report["ok"], "how": how}


POLICIES = interpret.POLICIES if SWEEP else ("lazy",)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(name, policy, monkeypatch, capsys):
    got = outcome(name, monkeypatch, policy)
    with capsys.disabled():
        print(f"\n| {name} | {MUTANTS[name].what} | {got['verifier']} | {policy}: {got['how']} |")
    assert got["caught"], f"{name} ({MUTANTS[name].what}): {got['how']}"
    fault = got.get("fault")
    if fault is not None:       # a fault names where: the kernel and, for a warp's fault, its role
        assert fault.context.get("kernel") and fault.context.get("cta") is not None, fault


def test_mutation_is_the_kernel_source(monkeypatch):
    """The unmutated kernel, built through the same path (a no-op mutant), passes: a mutant's
    failure is its edit's."""
    m = MUTANTS["v_lbo"]
    monkeypatch.setitem(MUTANTS, "noop", Mutant(m.owner, m.name, m.old, m.old, "none"))
    got = outcome("noop", monkeypatch)
    assert got == {"verifier": "accepts", "caught": False, "how": "passes the FA rule"}, got


@pytest.mark.skipif(not SWEEP, reason="compiles every mutant to a cubin (~3 s each): set FA4MLIR_INTERPRET_SWEEP=1")
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_static_checks_miss_the_mutant(name, monkeypatch, capsys):
    """The table's static column: each mutant the verifier accepts also compiles to an sm_100a cubin
    as the kernel ships (nvJitLink LTO) with 0 spills, so nothing but execution sees it."""
    from fa4mlir import kernels, lowering
    m = MUTANTS[name]
    monkeypatch.setattr(m.owner, m.name, mutated(m))
    kir = k100.build(fcfg.FA4Config(head_dim=m.head_dim, head_dim_v=m.head_dim, num_q_heads=1, num_kv_heads=1))
    if verifier_verdict(kir) != "accepts":
        pytest.skip(f"{name}: the pipeline verifier rejects it")
    art = lowering.lower(kir, lowering.CompileOptions(cubin_backend=kernels.cubin_backend(fcfg.KERNEL)),
                         key="test-interpret-mutants")
    r = art.resources
    with capsys.disabled():
        print(f"\n{name}: cubin {len(art.cubin)} B, spills {r['spill_stores']}/{r['spill_loads']}")
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
