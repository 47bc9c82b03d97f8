"""Deviceless: happens-before in the interpreter (fa4mlir/interpret/hb.py). Races are reported from
vector clocks, not from the order one schedule happened to take; missing tcgen05 and proxy fences
are reported as FenceFault. Tiny kernels, every schedule each. < 1 s."""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir import interpret
from fa4mlir.artifacts import ParamSpec, TmaSpec
from tests.test_interpret_ops import OUT, kernel, run, store_out

WARP_ID = """
      %c32w = arith.constant 32 : i32
      %warp = arith.divui %tid, %c32w : i32
"""


def _unsynced(sync: bool) -> str:
    """Warp 0 stores tid + 7 to shared [4 tid]; warp 1 loads it ([4 (tid - 32)]), after a bar.sync or not."""
    return WARP_ID + f"""
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c4 = arith.constant 4 : i32
      %c7 = arith.constant 7 : i32
      %lane = arith.remui %tid, %c32w : i32
      %off = arith.muli %lane, %c4 : i32
      %p = llvm.getelementptr %smem[%off] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %is0 = arith.cmpi eq, %warp, %c0 : i32
      scf.if %is0 {{
        %v = arith.addi %tid, %c7 : i32
        llvm.store %v, %p : i32, !llvm.ptr<3>
      }}
      {"nvvm.barrier0" if sync else ""}
      %x = scf.if %is0 -> (i32) {{
        scf.yield %c0 : i32
      }} else {{
        %y = llvm.load %p : !llvm.ptr<3> -> i32
        scf.yield %y : i32
      }}
"""


@pytest.mark.parametrize("policy", interpret.POLICIES)
def test_unsynchronised_shared_access_is_a_race_in_every_schedule(policy):
    """Lazy and eager run warp 0's store before warp 1's load (the order that 'works'); the race is
    reported anyway. A random schedule may run the load first: read before any write."""
    with pytest.raises(interpret.RaceFault, match=r"ld.shared by warp 1 reads shared 0x[0-9a-f]+ .*"
                                                  r"(not ordered before it|no write reached)"):
        run(kernel(_unsynced(False) + store_out("%x"), threads=64), n=64, policy=policy)


@pytest.mark.parametrize("policy", interpret.POLICIES)
def test_bar_sync_orders_the_store_before_the_load(policy):
    out = run(kernel(_unsynced(True) + store_out("%x"), threads=64), n=64, policy=policy)
    assert (out[32:] == np.arange(7, 39)).all()


def _tmem_handoff(fence_before: bool, fence_after: bool) -> str:
    """Warp 0 writes then reads TMEM lane quarter 0, column 0 and arrives on an mbarrier; warp 4 (the
    same lane quarter) waits on it and overwrites the column (write after read). 160 threads."""
    before = "nvvm.tcgen05.fence <before>" if fence_before else ""
    after = "nvvm.tcgen05.fence <after>" if fence_after else ""
    return WARP_ID + f"""
      %c0 = arith.constant 0 : i32
      %c4 = arith.constant 4 : i32
      %c16 = arith.constant 16 : i32
      %c32 = arith.constant 32 : i32
      %slot = llvm.getelementptr %smem[%c0] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %bar = llvm.getelementptr %smem[%c16] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %is0 = arith.cmpi eq, %warp, %c0 : i32
      %is4 = arith.cmpi eq, %warp, %c4 : i32
      %t0 = arith.cmpi eq, %tid, %c0 : i32
      scf.if %is0 {{
        nvvm.tcgen05.alloc %slot, %c32 : !llvm.ptr<3>, i32
      }}
      scf.if %t0 {{
        nvvm.mbarrier.init %bar, %c32 : !llvm.ptr<3>, i32
      }}
      nvvm.tcgen05.fence <before>
      nvvm.barrier0
      nvvm.tcgen05.fence <after>
      %base = llvm.load %slot : !llvm.ptr<3> -> i32
      %p = llvm.inttoptr %base : i32 to !llvm.ptr<6>
      scf.if %is0 {{
        nvvm.tcgen05.st %p, %tid {{shape = #nvvm.tcgen05_ldst_shape<shape_32x32b>}} : i32
        nvvm.tcgen05.wait <store>
        %r = nvvm.tcgen05.ld %p {{shape = #nvvm.tcgen05_ldst_shape<shape_32x32b>}} : i32
        nvvm.tcgen05.wait <load>
        {before}
        %s = nvvm.mbarrier.arrive %bar : !llvm.ptr<3> -> i64
      }}
      scf.if %is4 {{
        %t = arith.constant 1000 : i32
        nvvm.mbarrier.try_wait.parity %bar, %c0, %t : !llvm.ptr<3>, i32, i32
        {after}
        nvvm.tcgen05.st %p, %warp {{shape = #nvvm.tcgen05_ldst_shape<shape_32x32b>}} : i32
        nvvm.tcgen05.wait <store>
      }}
      nvvm.tcgen05.fence <before>
      nvvm.barrier0
      scf.if %is0 {{
        nvvm.tcgen05.fence <after>
        nvvm.tcgen05.dealloc %p, %c32 : !llvm.ptr<6>, i32
      }}
"""


@pytest.mark.parametrize("policy", interpret.POLICIES)
def test_tcgen05_handoff_with_both_fences_is_ordered(policy):
    run(kernel(_tmem_handoff(True, True), threads=160), n=160, policy=policy)


@pytest.mark.parametrize("before,after", [(False, True), (True, False)])
def test_tcgen05_handoff_without_a_fence_is_a_fence_fault(before, after):
    """The mbarrier orders the two warps, but not their tcgen05 ops without fence::before_thread_sync
    on the releasing side and fence::after_thread_sync on the acquiring side (PTX ISA §9.7.16.6.4)."""
    with pytest.raises(interpret.FenceFault, match=r"tcgen05.st by the tcgen05 ops of warp 4 writes TMEM lane 0 "
                                                   r"column 0; its last read by the tcgen05 ops of warp 0 .* "
                                                   r"without its tcgen05.fence"):
        run(kernel(_tmem_handoff(before, after), threads=160), n=160)


def _tma_store(fence: bool) -> str:
    """The warp writes a 64 x 8 bf16 box (128B swizzle) to shared 1024.. with st.shared, then one lane
    stores it to the tensor by TMA, with fence.proxy.async in between or not."""
    fence_op = ("nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}"
                if fence else "")
    return f"""
      %c0 = arith.constant 0 : i32
      %c4 = arith.constant 4 : i32
      %c128 = arith.constant 128 : i32
      %c1024 = arith.constant 1024 : i32
      %lo = arith.constant 0 : i32
      %hi = arith.constant 8 : i32
      %one = arith.constant 1 : i32
      scf.for %i = %lo to %hi step %one : i32 {{
        %row = arith.muli %i, %c128 : i32
        %col = arith.muli %tid, %c4 : i32
        %o0 = arith.addi %row, %col : i32
        %o = arith.addi %o0, %c1024 : i32
        %p = llvm.getelementptr %smem[%o] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
        llvm.store %o, %p : i32, !llvm.ptr<3>
      }}
      {fence_op}
      %src = llvm.getelementptr %smem[%c1024] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %t0 = arith.cmpi eq, %tid, %c0 : i32
      scf.if %t0 {{
        nvvm.cp.async.bulk.tensor.global.shared.cta %map, %src, box[%c0, %c0] : !llvm.ptr, <3>
        nvvm.cp.async.bulk.commit.group
        nvvm.cp.async.bulk.wait_group 0
      }}
"""


def test_tma_store_needs_the_writers_proxy_fence():
    spec = TmaSpec("bf16", (64, 8), swizzle="128B")
    params = (ParamSpec("map", "tma", spec), *OUT)
    args = "%map: !llvm.ptr {llvm.byval = !llvm.array<128 x i8>}, %out: !llvm.ptr<1>"
    dst = np.zeros((8, 64), np.uint16)
    kernel(_tma_store(True), params=params, args=args).launch((1, 1, 1), {"map": dst, "out": np.zeros(32, np.int32)})
    assert dst.any()
    with pytest.raises(interpret.FenceFault, match=r"TMA store of map reads shared memory that warp 0 wrote with "
                                                   r"st.shared and did not fence \(fence.proxy.async\)"):
        kernel(_tma_store(False), params=params, args=args).launch(
            (1, 1, 1), {"map": np.zeros((8, 64), np.uint16), "out": np.zeros(32, np.int32)})


def _mma_after_generic_writes(writer: int, proxy_fence: bool, tcgen05_fence: bool):
    """Warp `writer` writes both SMEM operands with st.shared (as the paged kernel's MMA thread zeroes
    stale V rows, attention_fwd_sm100 note "Stale V rows"); then warp 0, with no thread sync between
    them, issues the tcgen05.mma that reads them, after the given fences. Returns D's first column."""
    from types import SimpleNamespace

    from fa4mlir.interpret.hb import HappensBefore
    from fa4mlir.interpret.ops.tcgen05 import execute_mma
    from fa4mlir.passes.lower_mma_sm100 import instr_desc, smem_desc
    from tests.test_interpret_ops import _FakeCTA
    cta = _FakeCTA()
    cta.hb = hb = HappensBefore(2, cta.smem.size, cta.tmem.shape, lambda w: f"warp {w}")
    a_at, b_at, end = 1024, 1024 + 128 * 128, 1024 + 2 * 128 * 128
    cta.smem[a_at:end:2] = 0x80                      # bf16 1.0 = 0x3F80 (little endian: 0x80, 0x3F)
    cta.smem[a_at + 1:end:2] = 0x3F
    hb.warp_access(SimpleNamespace(wid=writer), hb.smem, np.arange(a_at, end), True, "st.shared", generic=True)
    if proxy_fence:
        hb.proxy_fence(writer)
    if tcgen05_fence:
        hb.fence_after(0)
    job = hb.stamp_async(hb.MMA, hb.issue(0))
    idesc = instr_desc(m=128, n=128, ab_dtype="bf16", a_major="k", b_major="k")
    execute_mma(cta, 0, smem_desc(a_at, swizzle=128, lbo=16, sbo=1024), smem_desc(b_at, swizzle=128, lbo=16, sbo=1024),
                idesc, False, False, vc=job)
    return cta.tmem[:, 0].view(np.float32)


@pytest.mark.parametrize("tcgen05_fence", [False, True])
def test_own_generic_writes_then_fence_proxy_async_order_the_threads_mma(tcgen05_fence):
    """PTX ISA 9.1 §9.7.16.6.5: tcgen05.mma reads SMEM through the async proxy; fence.proxy.async
    makes the thread's generic writes visible to it. Same thread, no thread sync: no tcgen05.fence is
    needed, and one (::after_thread_sync) must not turn the ordered access into a race."""
    assert (_mma_after_generic_writes(0, True, tcgen05_fence) == 16.0).all()


@pytest.mark.parametrize("tcgen05_fence", [False, True])
def test_own_generic_writes_without_fence_proxy_async_are_a_fence_fault(tcgen05_fence):
    with pytest.raises(interpret.FenceFault, match=r"tcgen05.mma A \(SMEM\) reads shared memory that warp 0 wrote "
                                                   r"with st.shared and did not fence \(fence.proxy.async\)"):
        _mma_after_generic_writes(0, False, tcgen05_fence)


def test_another_warps_fenced_writes_without_a_thread_sync_still_race():
    """The proxy fence orders only the writer's own later async-proxy operations: warp 1's writes,
    fenced but never handed over (no barrier), race with warp 0's MMA."""
    with pytest.raises(interpret.RaceFault, match=r"tcgen05.mma A \(SMEM\) by the tensor core reads shared .*"
                                                  r"its last write by warp 1 is not ordered before it"):
        _mma_after_generic_writes(1, True, True)
