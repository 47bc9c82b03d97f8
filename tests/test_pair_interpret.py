"""The CTA pair on the CPU: the interpreter runs tests/_pair_probe.py's kernel as a cluster of two CTAs
(interpret/cluster.py, interpret/ops/pair.py) and fa4-verify-pipelines checks it in its pair model
(passes/_cluster_view.py). The probe's D (one tcgen05.mma.cta_group::2 m256, B's rows split between
the CTAs' SMEM) is compared with a numpy matmul: the first numerics of the pair MMA, modelled from
the PTX ISA (data-path Layout A), never run on a GPU. Each seeded protocol bug of the probe must be
caught by both the interpreter (a deadlock, a fault) and the verifier, the verifier-only one by the
verifier."""
import numpy as np
import pytest

from fa4mlir import interpret
from fa4mlir.dialect.query import PassError, mark_unverified
from fa4mlir.interpret.numeric import bf16_to_f32, f32_to_bf16
from fa4mlir.passes import verify_pipelines
from tests import _pair_probe

N = 64


def _operands(seed=0, k_tiles=1):
    rng = np.random.default_rng(seed)
    a = f32_to_bf16(rng.standard_normal((256, 16 * k_tiles)).astype(np.float32))
    b = f32_to_bf16(rng.standard_normal((N, 16 * k_tiles)).astype(np.float32))
    return a, b


def _run(bug=None, policy="lazy", seed=0, k_tiles=1):
    """Run the probe (with `bug` seeded: unverified, so that the interpreter, not the verifier that
    interpret.load runs first, has to catch it)."""
    a, b = _operands(seed, k_tiles)
    out = np.full((256, N), np.nan, np.float32)
    kir = _pair_probe.build(N, bug, k_tiles)
    if bug is not None:
        with kir.module.context:
            mark_unverified(kir.module.operation)
    ctas = interpret.load(kir).launch((2, 1, 1), {"a": a, "b": b, "out": out}, policy=policy)
    return ctas, out, bf16_to_f32(a).astype(np.float64) @ bf16_to_f32(b).astype(np.float64).T


@pytest.mark.parametrize("k_tiles", [1, 3])
@pytest.mark.parametrize("policy", interpret.POLICIES)
def test_probe_matches_numpy(policy, k_tiles):
    """k_tiles 3: three accumulating MMAs, the 2-stage rings wrap (the phase flips)."""
    ctas, out, ref = _run(policy=policy, seed=3, k_tiles=k_tiles)
    assert not np.isnan(out).any()
    # per MMA the products of bf16 values are exact in float64 and the sum is rounded to float32
    np.testing.assert_allclose(out, ref, rtol=1e-5 * k_tiles, atol=1e-5 * k_tiles)
    assert [c.rank for c in ctas] == [0, 1]
    assert ctas[0].stats["pair_mma"] == k_tiles and ctas[1].stats["pair_mma"] == 0     # the leader issued them
    assert all(c.stats["tma_load_bytes"] == k_tiles * (128 + N // 2) * 16 * 2 for c in ctas)


def test_probe_rows_come_from_both_ctas():
    """D's columns [N/2, N) are B's rows held by CTA 1: zeroing them in B changes exactly those columns
    of both CTAs' rows (the pair's B is split by rows between the CTAs' SMEM)."""
    a, b = _operands(5)
    b[N // 2:] = 0
    out = np.zeros((256, N), np.float32)
    interpret.load(_pair_probe.build(N)).launch((2, 1, 1), {"a": a, "b": b, "out": out})
    assert not out[:, N // 2:].any() and out[:, :N // 2].all()


def _verify(bug, k_tiles=1):
    kir = _pair_probe.build(N, bug, k_tiles)
    with kir.module.context:
        verify_pipelines.run(kir.module.operation)


@pytest.mark.parametrize("k_tiles", [1, 3])
def test_probe_verifies(k_tiles):
    _verify(None, k_tiles)


INTERPRETER_CATCHES = {
    "unicast_commit": (interpret.Deadlock, r"CTA rank 1 warp  0 \(epilogue\): mbarrier\.try_wait\.parity 0 on d\.full\[0\]"),
    "rank1_issues": (interpret.Fault, r"tcgen05\.mma\.cta_group::2 issued by CTA rank 1"),
    "no_cluster_sync": (interpret.BarrierFault, r"arrives on ready\.full\[0\] of another CTA whose mbarrier\.init is "
                                                r"not ordered before it"),
    "no_peer_arrive": (interpret.Deadlock, r"CTA rank 0 warp  5 \(mma\): mbarrier\.try_wait\.parity 0 on ready\.full"),
    "peer_not_waited": (interpret.RaceFault, r"tcgen05\.mma\.cta_group::2 A \(SMEM\) of CTA rank 1 by CTA rank 0's "
                                             r"tensor core reads .* its last write by the TMA engine is not ordered"),
    "unicast_release": (interpret.Deadlock, r"CTA rank 1 warp  4 \(load\): mbarrier\.try_wait\.parity 0 on ab\.empty\[0\]"),
}
WRAPS = {"unicast_release"}      # caught once the ring wraps: 3 K tiles over 2 stages
VERIFIER_CATCHES = {
    "unicast_commit": r"CTA rank 1's target view .* pipeline 'd': role 'epilogue' waits on full\[stage 0\] but the "
                      r"producer role 'mma' never commits",
    "rank1_issues": r"fa4\.mma with cta_group = 2 runs in CTA rank\(s\) \[1\]: the pair's MMAs and their commits are "
                    r"issued by the leader only",
    "no_cluster_sync": r"no fa4\.cluster_sync separates fa4\.pipeline_init from the roles",
    "no_peer_arrive": r"CTA rank 0's target view .* pipeline 'ready': role 'mma' waits on full\[stage [^]]+\] but",
    "peer_not_waited": r"CTA rank 1's executor view .* pipeline 'ab', role 'mma': in the scf\.for body .* 0 wait\(s\) "
                       r"but 1 release",
    "peer_release_local": r"CTA rank 0's target view .* pipeline 'd': consumer_arrivals = 256, but 128 thread",
    "unicast_release": r"CTA rank 1's executor view .* pipeline 'ab', role 'mma': in the scf\.for body .* 1 wait\(s\) "
                       r"but 0 release",
}


@pytest.mark.parametrize("k_tiles", [1, 3])
@pytest.mark.parametrize("bug", sorted(INTERPRETER_CATCHES))
@pytest.mark.parametrize("policy", ["lazy", "random"])
def test_interpreter_catches(bug, policy, k_tiles):
    exc, message = INTERPRETER_CATCHES[bug]
    if bug in WRAPS and k_tiles < 3:
        _run(bug, policy, k_tiles=k_tiles)       # one use of each stage: nothing waits on the missing arrival
        return
    with pytest.raises(exc, match=message):
        _run(bug, policy, k_tiles=k_tiles)


@pytest.mark.parametrize("k_tiles", [1, 3])
@pytest.mark.parametrize("bug", _pair_probe.BUGS)
def test_verifier_catches(bug, k_tiles):
    with pytest.raises(PassError, match=VERIFIER_CATCHES[bug]):
        _verify(bug, k_tiles)


def test_every_bug_is_caught():
    assert set(VERIFIER_CATCHES) == set(_pair_probe.BUGS)
    assert set(INTERPRETER_CATCHES) == set(_pair_probe.BUGS) - {"peer_release_local"}


def test_pair_allocations_agree():
    """A pair's TMEM allocation of another width than its peer's is a TmemFault (the pair allocates alike)."""
    from fa4mlir.interpret.cluster import Cluster
    from fa4mlir.interpret.faults import TmemFault
    from fa4mlir.interpret.ops import pair

    class _Warp:                  # what check_pair_alloc reads of a warp
        def __init__(self, cta):
            self.cta = cta

        def fault(self, exc, message):
            return exc(message)

    kernel = interpret.load(_pair_probe.build(N))
    leader, peer = Cluster(kernel, [0, 1, 0], [(0, 0, 0), (1, 0, 0)], (2, 1, 1)).ctas
    leader.tmem_cols = 64
    with pytest.raises(TmemFault, match="its peer allocated 64"):
        pair.check_pair_alloc(_Warp(peer), 128)
    pair.check_pair_alloc(_Warp(peer), 64)
