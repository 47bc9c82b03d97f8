"""The .cta_group::2 TMA loads (fa4.tma_load / fa4.tma_gather4 with cta_group 2, the pair commit
producer_commit cta_group 2) on the CPU: tests/_pair_gather_probe.py's kernel compiles for sm_100a
(ptxas, 0 spills, the SASS), the interpreter runs it as a cluster of two CTAs whose gathered rows
complete on the leader's barrier, its D equals numpy's, and each seeded protocol bug is caught by the
interpreter and by fa4-verify-pipelines. Modelled from the PTX ISA (9.7.9.25), never run on a GPU."""
import re

import numpy as np
import pytest

from fa4mlir import interpret
from fa4mlir.dialect.query import PassError, mark_unverified
from fa4mlir.interpret.numeric import bf16_to_f32, f32_to_bf16
from fa4mlir.passes import verify_pipelines
from tests import _pair_gather_probe as probe

TABLE_ROWS = 100


def _run(m=256, n=64, bug=None, policy="lazy", seed=3, k_tiles=1, idx=None, a_tmem=None):
    rng = np.random.default_rng(seed)
    a = f32_to_bf16(rng.standard_normal((m, 64 * k_tiles)).astype(np.float32))
    table = f32_to_bf16(rng.standard_normal((TABLE_ROWS, 64 * k_tiles)).astype(np.float32))
    idx = rng.integers(0, TABLE_ROWS, n).astype(np.int32) if idx is None else idx
    out = np.full((m, n), np.nan, np.float32)
    kir = probe.build(m, n, bug, k_tiles, a_tmem)
    if bug is not None:
        with kir.module.context:
            mark_unverified(kir.module.operation)
    ctas = interpret.load(kir).launch((2, 1, 1), {"a": a, "table": table, "idx": idx, "out": out}, policy=policy)
    rows = np.where((idx >= 0) & (idx < TABLE_ROWS), idx, 0)
    b = np.where(((idx >= 0) & (idx < TABLE_ROWS))[:, None], bf16_to_f32(table[rows]), 0.0)
    return ctas, out, bf16_to_f32(a).astype(np.float64) @ b.astype(np.float64).T


@pytest.mark.parametrize("k_tiles", [1, 3])
@pytest.mark.parametrize("policy", interpret.POLICIES)
def test_gathered_pair_matches_numpy(policy, k_tiles):
    """M = 256 (Layout A): both CTAs' A rows and gathered B rows complete on the leader's barrier;
    k_tiles 3 wraps the 2-stage ring (the peer's acquire waits for the leader's multicast release)."""
    ctas, out, ref = _run(policy=policy, k_tiles=k_tiles)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, ref, rtol=2e-5 * k_tiles, atol=2e-5 * k_tiles)
    assert ctas[0].stats["pair_mma"] == 4 * k_tiles and ctas[1].stats["pair_mma"] == 0
    per_cta = k_tiles * (128 * 64 + 32 * 64) * 2
    assert all(c.stats["tma_load_bytes"] == per_cta for c in ctas)


@pytest.mark.parametrize("k_tiles", [1, 3])
@pytest.mark.parametrize("policy", interpret.POLICIES)
def test_layout_b_matches_numpy(policy, k_tiles):
    """M = 128 with cta_group::2 (data-path Layout B, interpret/ops/pair.py note "pair layouts"): CTA r's
    64 A rows; its lanes 0-63 get D's columns [0, N/2), lanes 64-127 columns [N/2, N) of the same rows.
    The probe's epilogue stores by that layout, so a model that put rows or column halves elsewhere
    fails against numpy."""
    ctas, out, ref = _run(m=128, n=128, policy=policy, k_tiles=k_tiles)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, ref, rtol=2e-5 * k_tiles, atol=2e-5 * k_tiles)
    assert ctas[0].stats["pair_mma"] == 4 * k_tiles
    assert all(c.stats["tma_load_bytes"] == k_tiles * (64 * 64 + 64 * 64) * 2 for c in ctas)


@pytest.mark.parametrize("k_tiles", [1, 3])
@pytest.mark.parametrize("policy", interpret.POLICIES)
def test_layout_b_with_a_copied_into_tmem(policy, k_tiles):
    """FlashMLA's Q route: the leader copies both CTAs' A tiles into TMEM (tcgen05.cp 64x128b.warpx2::02_13
    cta_group 2, each row to lanes l and 64 + l) and the M = 128 pair MMAs read A there."""
    ctas, out, ref = _run(m=128, n=64, policy=policy, k_tiles=k_tiles, a_tmem="warpx2::02_13")
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, ref, rtol=2e-5 * k_tiles, atol=2e-5 * k_tiles)
    assert all(c.stats["tmem_copy"] == 8 * k_tiles for c in ctas)


def test_layout_b_needs_rows_in_both_lane_halves():
    """With warpx2::01_23 (rows 32-63 to lanes 64-127 instead of rows 0-63 again) D's column half
    [N/2, N) of rows 0-31 and 32-63 mixes rows: the numerics differ from numpy (the model tells the
    two multicast forms apart)."""
    _, out, ref = _run(m=128, n=64, a_tmem="warpx2::01_23")
    assert np.abs(out[:, :32] - ref[:, :32]).max() > 0.5 or np.abs(out[:, 32:] - ref[:, 32:]).max() > 0.5


def test_layout_b_column_halves_come_from_each_ctas_rows():
    """Zeroing the rows CTA 1 gathers (B rows [N/2, N)) zeroes exactly D's columns [N/2, N): the
    lanes 64-127 of both CTAs."""
    idx = np.arange(64, dtype=np.int32)
    idx[32:] = -1                                    # CTA 1's gathered rows: out of range, zero-filled
    _, out, _ = _run(m=128, n=64, idx=idx)
    assert not out[:, 32:].any() and out[:, :32].all()


def test_out_of_range_rows_are_zero_filled():
    """Rows -1 and >= rows of the table gather as zeros (5.5.3.4 / tile mode), in either CTA's half."""
    idx = np.arange(64, dtype=np.int32)
    idx[[3, 40]] = -1
    idx[[7, 63]] = TABLE_ROWS + 5
    _, out, ref = _run(idx=idx)
    assert not out[:, [3, 7, 40, 63]].any()
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("m", [256, 128])
def test_probe_verifies(m):
    for k_tiles in (1, 3):
        kir = probe.build(m, 64, None, k_tiles)
        with kir.module.context:
            verify_pipelines.run(kir.module.operation)


INTERPRETER_CATCHES = {
    "unicast_loads": (interpret.Deadlock, r"CTA rank 0 warp  5 \(mma\): mbarrier\.try_wait\.parity 0 on kv\.full\[0\] "
                                          r"\(phase 0, pending 0/1, tx 20480\)"),
    "own_bytes": (interpret.RaceFault, r"tcgen05\.mma\.cta_group::2 [AB] \(SMEM\) of CTA rank 1 by CTA rank 0's tensor core "
                                       r"reads .* its last write by the TMA engine is not ordered"),
    "no_cluster_sync": (interpret.BarrierFault, r"TMA load \.cta_group::2 of CTA rank 1 arrives on kv\.full\[0\] of another "
                                                r"CTA whose mbarrier\.init is not ordered before it"),
    "peer_skips_acquire": (interpret.RaceFault, r"tcgen05\.mma\.cta_group::2 [AB] \(SMEM\) of CTA rank 1 by CTA rank 0's "
                                                r"tensor core reads .* its last write by the TMA engine is not ordered"),
    "leader_only_release": (interpret.Deadlock, r"CTA rank 1 warp  4 \(load\): mbarrier\.try_wait\.parity 0 on "
                                                r"kv\.empty\[0\]"),
    "peer_commits": (interpret.Deadlock, r"CTA rank 0 warp  5 \(mma\): mbarrier\.try_wait\.parity 0 on kv\.full\[0\] "
                                         r"\(phase 0, pending 1/1"),
}
WRAPS = {"leader_only_release", "peer_skips_acquire"}      # caught once the ring wraps: 3 K tiles over 2 stages
VERIFIER_CATCHES = {
    "unicast_loads": r"pipeline 'kv', role 'load': a fa4\.tma_load with cta_group = 1 in the fill of a producer_commit "
                     r"with cta_group = 2",
    "own_bytes": r"pipeline 'kv', role 'load': producer_commit on stage .* expects tx_bytes = 20480, but the 9 "
                 r"tma_load\(s\) of its fill deliver 40960 bytes",
    "no_cluster_sync": r"fa4\.tma_load on pipeline 'kv' arrives on a barrier of the other CTA of the pair, but no "
                       r"fa4\.cluster_sync",
    "peer_skips_acquire": r"CTA rank 1's executor view .* pipeline 'kv', role 'load': .* 0 acquire\(s\) but 1 commit",
    "leader_only_release": r"CTA rank 1's executor view .* pipeline 'kv', role 'mma': .* 1 wait\(s\) but 0 release",
    "peer_commits": r"fa4\.producer_commit with cta_group = 2 on pipeline 'kv' runs in CTA rank\(s\) \[1\] only",
}


@pytest.mark.parametrize("k_tiles", [1, 3])
@pytest.mark.parametrize("bug", sorted(INTERPRETER_CATCHES))
def test_interpreter_catches(bug, k_tiles):
    exc, message = INTERPRETER_CATCHES[bug]
    if bug in WRAPS and k_tiles < 3:
        _run(bug=bug, k_tiles=k_tiles)           # one use of each stage: nothing reuses it
        return
    with pytest.raises(exc, match=message):
        _run(bug=bug, k_tiles=k_tiles)


@pytest.mark.parametrize("k_tiles", [1, 3])
@pytest.mark.parametrize("bug", probe.BUGS)
def test_verifier_catches(bug, k_tiles):
    kir = probe.build(256, 64, bug, k_tiles)
    with kir.module.context, pytest.raises(PassError, match=VERIFIER_CATCHES[bug]):
        verify_pipelines.run(kir.module.operation)


def test_every_bug_is_caught():
    assert set(VERIFIER_CATCHES) == set(INTERPRETER_CATCHES) == set(probe.BUGS)


def test_cta_group_1_load_on_a_peer_barrier_is_a_fault():
    """Without .cta_group::2 the barrier must be in the destination's CTA (PTX ISA 9.7.9.25)."""
    from fa4mlir.interpret.cluster import CLUSTER_TAG
    from fa4mlir.interpret.faults import Fault
    from fa4mlir.interpret.ops import tma

    class _Cta:
        rank = 1

        def peer(self, rank):
            return leader

    class _Leader:
        rank = 0

    class _Warp:
        cta = _Cta()

        def fault(self, exc, message):
            return exc(message)

    leader = _Leader()
    with pytest.raises(Fault, match=r"\.cta_group::1 needs the barrier in the destination's CTA"):
        tma._load_barrier(_Warp(), CLUSTER_TAG | 0x400, 1)


@pytest.fixture(scope="module", params=[(256, None), (128, None), (128, "warpx2::02_13")])
def artifact(request):
    from fa4mlir import lowering
    from fa4mlir.lowering import CompileOptions
    m, a_tmem = request.param
    return lowering.lower(probe.build(m, 64, None, 3, a_tmem), CompileOptions(cubin_backend="ptxas"),
                          key="test-pair-gather")


def test_probe_compiles_with_no_spills_and_the_2cta_tma_sass(artifact):
    from fa4mlir.sass import disassemble, find_nvdisasm
    r = artifact.resources
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed: cannot read the SASS")
    sass = disassemble(artifact.cubin)
    gathers, tiles = (len(re.findall(rf"\bUTMALDG\.2D\.{form}2CTA\b", sass)) for form in ("GATHER4\\.", ""))
    assert tiles >= 1 and gathers == 8 * tiles, (gathers, tiles)       # per K tile: A's box, B's 32 rows (ptxas unrolls)
    assert not re.search(r"\bUTMALDG(?![.\w]*2CTA)", sass)               # no 1-CTA load
    assert re.search(r"\bUTCHMMA\.2CTA\b", sass) and not re.search(r"\bUTCHMMA(?!\.2CTA)\b", sass)
    copies = re.findall(r"\bUTCCP\S*", sass)
    if "tmem" in artifact.name:                                           # A into TMEM: the pair's 02_13 form only
        assert copies and set(copies) == {"UTCCP.T.S.2CTA.2x64dp128bit_lw02_lw13"}, set(copies)
    else:
        assert not copies


def test_flashmla_s_shape():
    """FlashMLA's S = Q K^T of one top-k block (head128: B_H 128 head rows and B_TOPK 128 gathered rows
    per pair, D_QK 576 = 9 K tiles), Layout B with A from TMEM: D equals numpy within float32 rounding."""
    idx = np.random.default_rng(7).integers(-1, TABLE_ROWS + 3, 128).astype(np.int32)
    _, out, ref = _run(m=128, n=128, k_tiles=9, idx=idx, a_tmem="warpx2::02_13")
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
