"""Deviceless: the interpreter's sm_90a op semantics (warp shuffles, named-barrier arrive, structs,
scf.while, scale_if_uniform, wgmma from SMEM descriptors and register fragments, the wgmma group
protocol) against hand-computed results, and the faults of that protocol. < 1 s."""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir import interpret
from fa4mlir.interpret.numeric import bf16_to_f32, f32_to_bf16
from fa4mlir.interpret.ops.wgmma import a_fragment, d_fragment, descriptor_addresses, warpgroup_mma
from fa4mlir.passes.lower_mma_sm90 import encode_desc_fields
from fa4mlir.interpret.kernel import Kernel
from tests.test_interpret_ops import OUT, _place, kernel, parse, run, store_out


def test_shfl_sync_bfly_idx_up_down():
    """Lane l of each result: bfly 5 -> l ^ 5, idx 7 -> 7, up 3 -> l - 3 (own below 3), down 30 -> l + 30
    (own above 1); packed as four bytes."""
    body = """
      %m = arith.constant -1 : i32
      %c31 = arith.constant 31 : i32
      %c5 = arith.constant 5 : i32
      %c7 = arith.constant 7 : i32
      %c3 = arith.constant 3 : i32
      %c30 = arith.constant 30 : i32
      %b = nvvm.shfl.sync bfly %m, %tid, %c5, %c31 : i32 -> i32
      %i = nvvm.shfl.sync idx %m, %tid, %c7, %c31 : i32 -> i32
      %u = nvvm.shfl.sync up %m, %tid, %c3, %c31 : i32 -> i32
      %d = nvvm.shfl.sync down %m, %tid, %c30, %c31 : i32 -> i32
      %c8 = arith.constant 8 : i32
      %c16 = arith.constant 16 : i32
      %c24 = arith.constant 24 : i32
      %i8 = arith.shli %i, %c8 : i32
      %u16 = arith.shli %u, %c16 : i32
      %d24 = arith.shli %d, %c24 : i32
      %x0 = arith.ori %b, %i8 : i32
      %x1 = arith.ori %x0, %u16 : i32
      %x = arith.ori %x1, %d24 : i32
"""
    lanes = np.arange(32)
    up = np.where(lanes >= 3, lanes - 3, lanes)
    down = np.where(lanes + 30 <= 31, lanes + 30, lanes)
    assert (run(kernel(body + store_out("%x"))) == (lanes ^ 5) | (7 << 8) | (up << 16) | (down << 24)).all()


def test_barrier_arrive_counts_without_waiting():
    """Warp 1 arrives at barrier 1 (64 threads) and goes on; warp 0's bar.sync completes with it."""
    body = """
      %c1 = arith.constant 1 : i32
      %c64 = arith.constant 64 : i32
      %c32 = arith.constant 32 : i32
      %w1 = arith.cmpi uge, %tid, %c32 : i32
      scf.if %w1 {
        nvvm.barrier.arrive id = %c1 number_of_threads = %c64
      } else {
        nvvm.barrier id = %c1 number_of_threads = %c64
      }
"""
    assert (run(kernel(body + store_out("%tid"), threads=64), n=64) == np.arange(64)).all()


def test_barrier_sync_short_of_its_count_deadlocks():
    body = """
      %c1 = arith.constant 1 : i32
      %c96 = arith.constant 96 : i32
      nvvm.barrier id = %c1 number_of_threads = %c96
"""
    with pytest.raises(interpret.Deadlock, match=r"bar.sync 1, 96 \(2/3 warps\)"):
        run(kernel(body, threads=64), n=64)


def test_struct_insert_extract_and_scf_while():
    """A struct {f32, f32} built by insertvalue, read by extractvalue; scf.while doubling 1 until > 20."""
    body = """
      %u = llvm.mlir.undef : !llvm.struct<(f32, f32)>
      %f = arith.uitofp %tid : i32 to f32
      %s0 = llvm.insertvalue %f, %u[1] : !llvm.struct<(f32, f32)>
      %g = llvm.extractvalue %s0[1] : !llvm.struct<(f32, f32)>
      %gi = arith.fptosi %g : f32 to i32
      %c1 = arith.constant 1 : i32
      %c20 = arith.constant 20 : i32
      %r = scf.while (%x = %c1) : (i32) -> i32 {
        %go = arith.cmpi sle, %x, %c20 : i32
        scf.condition(%go) %x : i32
      } do {
      ^bb0(%y: i32):
        %y2 = arith.addi %y, %y : i32
        scf.yield %y2 : i32
      }
      %v = arith.addi %gi, %r : i32
"""
    assert (run(kernel(body + store_out("%v"))) == np.arange(32) + 32).all()


def test_scale_if_uniform_multiplies_only_when_the_warp_agrees():
    """fa4-lower-sync's bra.uni asm: scaled when the (uniform) flag is set; a flag that differs between
    lanes is a fault."""
    def asm(flag):
        return f"""
      %f = arith.uitofp %tid : i32 to f32
      %two = arith.constant 2.0 : f32
      %flag = arith.constant {flag} : i32
      %r = llvm.inline_asm has_side_effects "{{\\0A.reg .pred skip;\\0Asetp.eq.u32 skip, $3, 0;\\0A@skip bra.uni SCALE_DONE;\\0Amul.f32 $0, $0, $2;\\0ASCALE_DONE:\\0A}}", "=f,0,f,r" %f, %two, %flag : (f32, f32, i32) -> !llvm.struct<(f32)>
      %x = llvm.extractvalue %r[0] : !llvm.struct<(f32)>
      %xi = arith.fptosi %x : f32 to i32
"""
    assert (run(kernel(asm(1) + store_out("%xi"))) == 2 * np.arange(32)).all()
    assert (run(kernel(asm(0) + store_out("%xi"))) == np.arange(32)).all()
    divergent = asm(1).replace("%flag = arith.constant 1 : i32", "%flag = arith.andi %tid, %c1 : i32").replace(
        "%two =", "%c1 = arith.constant 1 : i32\n      %two =")
    with pytest.raises(interpret.Fault, match="not uniform"):
        run(kernel(divergent))


# ---- wgmma -------------------------------------------------------------------------------------------
class _FakeWarp:
    def __init__(self, wid):
        self.wid = wid
        self.cta = type("C", (), {})()
        self.cta.smem = np.zeros(1024 + 65536, np.uint8)
        self.cta.smem_readers = np.zeros(self.cta.smem.size, np.int16)
        self.cta.stats = {"wgmma": 0}
        self.read = []

    def wgmma_reads(self, flat, what):
        self.read.append(flat)


def _desc(addr: int, lbo: int, sbo: int) -> int:
    return ((addr >> 4) & 0x3FFF) | encode_desc_fields(128, lbo, sbo)


def _d_tile(regs: np.ndarray, n: int) -> np.ndarray:
    rows, cols = d_fragment(n)
    tile = np.full((16, n), np.nan, np.float32)
    tile[rows, cols] = regs
    return tile


@pytest.mark.parametrize("quarter", [0, 3])
def test_wgmma_k_major_b_matches_matmul(quarter):
    """Warp q of the warpgroup: D[16 q .. 16 q + 15, 0..n) = A[rows, 16..32) B[:, 16..32)^T (+ D), B K-major."""
    n = 32
    rng = np.random.default_rng(1)
    a, b = f32_to_bf16(rng.standard_normal((64, 64))), f32_to_bf16(rng.standard_normal((n, 64)))
    w = _FakeWarp(4 + quarter)
    _place(w.cta, b, 1024, n)
    b_desc = _desc(1024 + 32, 16, 1024)
    A = bf16_to_f32(a[16 * quarter:16 * quarter + 16, 16:32])
    ref = A.astype(np.float64) @ bf16_to_f32(b[:, 16:32]).astype(np.float64).T
    d0 = np.ones((32, n // 2), np.float32)
    got = warpgroup_mma(w, A, b_desc, n, "bf16", False, d0, scale_d=False)
    np.testing.assert_allclose(_d_tile(got, n), ref, rtol=1e-6, atol=1e-5)
    got = warpgroup_mma(w, A, b_desc, n, "bf16", False, d0, scale_d=True)
    np.testing.assert_allclose(_d_tile(got, n), ref + 1, rtol=1e-6, atol=1e-5)
    # held as read: B's n x 16 bf16 elements, each of its two bytes once, sorted
    assert len(w.read) == 2 and w.read[0].size == 2 * n * 16 and (np.diff(w.read[0]) > 0).all()


def test_wgmma_mn_major_b_and_the_a_fragment():
    """B stored MN-major (V of P.V: [keys, head_dim] rows, head-dim chunks LBO apart): element (n, k) of
    B is V[k, n]; and the A register fragment's (row, column) of each word half covers the 16 x 16
    tile once."""
    keys, dim = 16, 128
    rng = np.random.default_rng(2)
    v = f32_to_bf16(rng.standard_normal((keys, dim)))
    w = _FakeWarp(0)
    for c in range(dim // 64):                  # two 64-column chunks of 16 rows, LBO = 16 * 128 bytes
        _place(w.cta, np.ascontiguousarray(v[:, 64 * c:64 * c + 64]), 1024 + c * keys * 128, keys)
    addrs = descriptor_addresses(_desc(1024, keys * 128, 8 * 128), dim, True)
    got = bf16_to_f32(w.cta.smem[addrs].astype(np.uint16) | (w.cta.smem[addrs + 1].astype(np.uint16) << 8))
    np.testing.assert_array_equal(got, bf16_to_f32(v).T)
    rows, cols = a_fragment()
    assert sorted(zip(rows.ravel().tolist(), cols.ravel().tolist())) == [(r, c) for r in range(16) for c in range(16)]


WGMMA = """
      %z = arith.constant 0 : i32
      %c4 = arith.constant 4 : i32
      %c128 = arith.constant 128 : i32
      %lo = arith.constant 0 : i32
      %hi = arith.constant 20 : i32
      %one = arith.constant 1 : i32
      scf.for %i = %lo to %hi step %one : i32 {{
        %row = arith.muli %i, %c128 : i32
        %word = arith.addi %row, %tid : i32
        %off0 = arith.muli %word, %c4 : i32
        %base = arith.constant 1024 : i32
        %off = arith.addi %off0, %base : i32
        %pz = llvm.getelementptr %smem[%off] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
        llvm.store %z, %pz : i32, !llvm.ptr<3>
      }}
      {proxy}
      nvvm.barrier0
      %da = arith.constant {da} : i64
      %db = arith.constant {db} : i64
      %d0 = llvm.mlir.undef : !llvm.struct<(f32, f32, f32, f32)>
      {fence}
      %r = nvvm.wgmma.mma_async %da, %db, %d0, <m = 64, n = 8, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>] : !llvm.struct<(f32, f32, f32, f32)> -> !llvm.struct<(f32, f32, f32, f32)>
      nvvm.wgmma.commit.group.sync.aligned
      {between}
      nvvm.wgmma.wait.group.sync.aligned 0
      %x = llvm.extractvalue %r[0] : !llvm.struct<(f32, f32, f32, f32)>
      %xi = arith.fptosi %x : f32 to i32
"""


PROXY_FENCE = "nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}"


def _wgmma_kernel(fence=True, between="", proxy=True):
    """A at fa4_smem offset 1024 (64 rows: 8 KiB), B at 10240; both zeroed by the warpgroup first."""
    body = WGMMA.format(da=_desc(0x400 + 1024, 16, 1024), db=_desc(0x400 + 10240, 16, 1024),
                        fence="nvvm.wgmma.fence.aligned" if fence else "", between=between,
                        proxy=PROXY_FENCE if proxy else "")
    return Kernel("k", parse(body + store_out("%xi"), smem=16384, chip="sm_90a"), tuple(OUT), (128, 1, 1), {})


def test_wgmma_group_protocol_in_a_warpgroup():
    """Four warps issue, commit and wait one group (zeros in, zeros out); each warp's wait needs its
    three siblings' shares: every schedule finishes."""
    for policy in interpret.POLICIES:
        assert (run(_wgmma_kernel(), n=128, policy=policy) == 0).all()


def test_wgmma_without_fence_is_a_fault():
    with pytest.raises(interpret.FenceFault, match="without a wgmma.fence"):
        run(_wgmma_kernel(fence=False), n=128)


def test_wgmma_reading_unfenced_st_shared_is_a_fault():
    """The operands were written by st.shared (generic proxy) and no fence.proxy.async (the writer's
    after the store, or the reader's after the barrier) made them visible to wgmma's async proxy."""
    with pytest.raises(interpret.FenceFault, match="fence.proxy.async"):
        run(_wgmma_kernel(proxy=False), n=128)


def test_shared_write_under_a_wgmma_in_flight_is_a_race():
    """A st.shared into B's tile between commit and wait_group: the wgmma may still read it."""
    store = """
      %c0i = arith.constant 0 : i32
      %o = arith.constant 10240 : i32
      %p = llvm.getelementptr %smem[%o] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      llvm.store %c0i, %p : i32, !llvm.ptr<3>
"""
    with pytest.raises(interpret.RaceFault, match="st.shared writes shared 0x2800.. .* while a wgmma in flight"):
        run(_wgmma_kernel(between=store), n=128)


def test_wgmma_result_read_before_wait_group_is_a_fault():
    """Moving the accumulator out of its struct before the wait is allowed (fa4-lower-mma-sm90 does);
    computing with it is not: its registers are still being written."""
    early = """
      %early = llvm.extractvalue %r[1] : !llvm.struct<(f32, f32, f32, f32)>
      %bad = arith.addf %early, %early : f32
"""
    with pytest.raises(interpret.UnwaitedAsync, match=r"wgmma result \(warp \d, group 0\) is read before "
                                                      r"wgmma.wait_group.*arith.addf"):
        run(_wgmma_kernel(between=early), n=128)
    moved = "      %early = llvm.extractvalue %r[1] : !llvm.struct<(f32, f32, f32, f32)>\n"
    assert (run(_wgmma_kernel(between=moved), n=128) == 0).all()
