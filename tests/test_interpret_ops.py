"""Deviceless: the interpreter's op semantics (fa4mlir/interpret/ops/), each against a hand-computed
result, on tiny nvvm-stage kernels written here; and the faults it reports. ~2 s in all."""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir import interpret
from fa4mlir.artifacts import ParamSpec, TmaSpec
from fa4mlir.dialect import new_context
from fa4mlir._mlir import ir
from fa4mlir.interpret.kernel import Kernel
from fa4mlir.interpret.memory import TensorMap
from fa4mlir.interpret.numeric import bf16_to_f32, f32_to_bf16, swizzle
from fa4mlir.interpret.ops.tcgen05 import execute_mma, smem_operand_addresses
from fa4mlir.passes.lower_mma_sm100 import instr_desc, smem_desc

OUT = [ParamSpec("out", "ptr")]


def parse(body: str, args="%out: !llvm.ptr<1>", smem=4096, chip="sm_100a") -> ir.Module:
    text = f"""
module attributes {{gpu.container_module}} {{
  gpu.module @k [#nvvm.target<chip = "{chip}", features = "+ptx86">] {{
    llvm.mlir.global external @fa4_smem() {{addr_space = 3 : i32, alignment = 1024 : i64}} : !llvm.array<0 x i8>
    llvm.func @k({args}) attributes {{fa4.smem_bytes = {smem} : i64, nvvm.kernel}} {{
      %tid = nvvm.read.ptx.sreg.tid.x : i32
      %tid64 = arith.extui %tid : i32 to i64
      %smem = llvm.mlir.addressof @fa4_smem : !llvm.ptr<3>
{body}
      llvm.return
    }}
  }}
}}"""
    with new_context(), ir.Location.unknown():
        return ir.Module.parse(text)


def kernel(body: str, params=OUT, args="%out: !llvm.ptr<1>", threads=32) -> Kernel:
    return Kernel("k", parse(body, args), tuple(params), (threads, 1, 1), {})


def store_out(value: str, ty: str = "i32") -> str:
    return (f"      %optr = llvm.getelementptr %out[%tid64] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, {ty}\n"
            f"      llvm.store {value}, %optr : {ty}, !llvm.ptr<1>\n")


def run(k: Kernel, n=32, dtype=np.int32, **kw):
    out = np.full(n, -1, dtype)
    k.launch((1, 1, 1), {"out": out}, **kw)
    return out


def test_arith_lanewise_and_unsigned():
    body = """
      %c3 = arith.constant 3 : i32
      %cm = arith.constant -8 : i32
      %a = arith.muli %tid, %c3 : i32
      %b = arith.divui %cm, %c3 : i32
      %lt = arith.cmpi ult, %tid, %c3 : i32
      %s = arith.select %lt, %a, %b : i32
"""
    out = run(kernel(body + store_out("%s")))
    expect = np.where(np.arange(32) < 3, 3 * np.arange(32), np.int32((2**32 - 8) // 3))
    assert (out == expect).all()


def test_scf_if_diverges_by_lane_mask_and_merges():
    body = """
      %c16 = arith.constant 16 : i32
      %lo = arith.cmpi slt, %tid, %c16 : i32
      %r = scf.if %lo -> (i32) {
        %x = arith.addi %tid, %tid : i32
        scf.yield %x : i32
      } else {
        %c7 = arith.constant 7 : i32
        scf.yield %c7 : i32
      }
"""
    out = run(kernel(body + store_out("%r")))
    assert (out == np.where(np.arange(32) < 16, 2 * np.arange(32), 7)).all()


def test_scf_for_carries_values():
    body = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c5 = arith.constant 5 : i32
      %r = scf.for %i = %c0 to %c5 step %c1 iter_args(%acc = %tid) -> (i32) : i32 {
        %n = arith.addi %acc, %i : i32
        scf.yield %n : i32
      }
"""
    assert (run(kernel(body + store_out("%r"))) == np.arange(32) + 10).all()


def test_ex2_truncf_bf16_rounds_to_nearest_even():
    body = """
      %f = arith.uitofp %tid : i32 to f32
      %c = arith.constant 0.5 : f32
      %h = arith.mulf %f, %c : f32
      %e = nvvm.inline_ptx "ex2.approx.ftz.f32 $0, $1;" ro(%h : f32) -> f32
"""
    out = run(kernel(body + store_out("%e", "f32")), dtype=np.float32)
    np.testing.assert_allclose(out, np.exp2(np.arange(32) * 0.5).astype(np.float32), rtol=1e-6)
    assert f32_to_bf16(np.float32(1.0 + 2**-8)) == 0x3F80           # tie -> even
    assert f32_to_bf16(np.float32(1.0 + 3 * 2**-8)) == 0x3F82
    assert bf16_to_f32(np.uint16(0x3F82)) == np.float32(1.015625)


MBAR = """
      %bar = llvm.getelementptr %smem[%c0] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %c0b = arith.constant 0 : i32
      %is0 = arith.cmpi eq, %tid, %c0b : i32
"""


def test_mbarrier_phase_completes_after_count_arrivals():
    """count 64 = two arrivals per lane of one warp: after the first arrive the phase is open
    (parity 0 not passed), after the second it completed (try_wait.parity 0 returns)."""
    body = """
      %c0 = arith.constant 0 : i32
      %c64 = arith.constant 64 : i32
""" + MBAR + """
      nvvm.mbarrier.init %bar, %c64 : !llvm.ptr<3>, i32
      %s0 = nvvm.mbarrier.arrive %bar : !llvm.ptr<3> -> i64
      %s1 = nvvm.mbarrier.arrive %bar : !llvm.ptr<3> -> i64
      %t = arith.constant 1000 : i32
      nvvm.mbarrier.try_wait.parity %bar, %c0, %t : !llvm.ptr<3>, i32, i32
"""
    k = kernel(body + store_out("%tid"))
    assert (run(k) == np.arange(32)).all()


def test_arrive_beyond_count_is_a_fault():
    """count 1: the expect_tx arrive takes the one arrival (the phase then waits for 32 bytes), a
    second arrive exceeds the count."""
    body = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c32 = arith.constant 32 : i32
""" + MBAR + """
      scf.if %is0 {
        nvvm.mbarrier.init %bar, %c1 : !llvm.ptr<3>, i32
        nvvm.mbarrier.arrive.expect_tx %bar, %c32 : !llvm.ptr<3>, i32
        %s = nvvm.mbarrier.arrive %bar : !llvm.ptr<3> -> i64
      }
"""
    with pytest.raises(interpret.BarrierFault, match=r"1 arrival\(s\) with 0 pending of 1 \(phase 0\)"):
        run(kernel(body))


def test_deadlock_names_warp_and_barrier_phase():
    body = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
""" + MBAR + """
      nvvm.mbarrier.init %bar, %c1 : !llvm.ptr<3>, i32
      %t = arith.constant 1000 : i32
      nvvm.mbarrier.try_wait.parity %bar, %c0, %t : !llvm.ptr<3>, i32, i32
"""
    with pytest.raises(interpret.Deadlock, match=r"warp +0 .*try_wait.parity 0 .*phase 0, pending 1/1"):
        run(kernel(body))


TMEM = """
      %c0 = arith.constant 0 : i32
      %slot = llvm.getelementptr %smem[%c0] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %ncols = arith.constant 32 : i32
      nvvm.tcgen05.alloc %slot, %ncols : !llvm.ptr<3>, i32
      %base = llvm.load %slot : !llvm.ptr<3> -> i32
"""
DEALLOC = """
      %bp = llvm.inttoptr %base : i32 to !llvm.ptr<6>
      nvvm.tcgen05.dealloc %bp, %ncols : !llvm.ptr<6>, i32
"""


def tmem_kernel(col: int, use_before_wait=False, dealloc=True) -> Kernel:
    """Lane t stores t * 10 + j into column col + j (j < 2), loads it back, writes column col+1."""
    body = TMEM + f"""
      %ccol = arith.constant {col} : i32
      %addr = arith.addi %base, %ccol : i32
      %p = llvm.inttoptr %addr : i32 to !llvm.ptr<6>
      %c10 = arith.constant 10 : i32
      %v0 = arith.muli %tid, %c10 : i32
      %c1 = arith.constant 1 : i32
      %v1 = arith.addi %v0, %c1 : i32
      %vec = vector.from_elements %v0, %v1 : vector<2xi32>
      nvvm.tcgen05.st %p, %vec {{shape = #nvvm.tcgen05_ldst_shape<shape_32x32b>}} : vector<2xi32>
      nvvm.tcgen05.wait <store>
      %r = nvvm.tcgen05.ld %p {{shape = #nvvm.tcgen05_ldst_shape<shape_32x32b>}} : vector<2xi32>
"""
    use = "      %e = vector.extract %r[1] : i32 from vector<2xi32>\n"
    body += (use + "      nvvm.tcgen05.wait <load>\n") if use_before_wait else ("      nvvm.tcgen05.wait <load>\n" + use)
    return kernel(body + store_out("%e") + (DEALLOC if dealloc else ""))


def test_tcgen05_st_ld_round_trip():
    assert (run(tmem_kernel(8)) == 10 * np.arange(32) + 1).all()


def test_tcgen05_ld_result_used_before_wait_is_a_fault():
    with pytest.raises(interpret.UnwaitedAsync, match=r"before tcgen05.wait::ld.*vector.extract"):
        run(tmem_kernel(8, use_before_wait=True))


def test_tmem_access_outside_allocation_is_a_fault():
    with pytest.raises(interpret.TmemFault, match=r"columns 31\.\.32 outside the allocation of 32"):
        run(tmem_kernel(31))


def test_exit_with_tmem_allocated_is_a_fault():
    with pytest.raises(interpret.ExitFault, match="32 TMEM columns still allocated"):
        run(tmem_kernel(8, dealloc=False))


def test_tma_load_swizzles_and_zero_fills_out_of_bounds():
    """A 64 x 8 bf16 box (128B swizzle) at row 4 of a 6-row tensor: rows 0-1 of the box come from
    tensor rows 4-5, the rest are zero; byte b of box row r lands at swizzle(dst + 128 r + b)."""
    spec = TmaSpec("bf16", (64, 8), swizzle="128B")
    src = np.arange(6 * 64, dtype=np.uint16).reshape(6, 64)
    body = """
      %c0 = arith.constant 0 : i32
      %c4 = arith.constant 4 : i32
      %c1024 = arith.constant 1024 : i32
      %c2048 = arith.constant 2048 : i32
      %bar = llvm.getelementptr %smem[%c0] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %dst = llvm.getelementptr %smem[%c1024] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %dst7 = llvm.addrspacecast %dst : !llvm.ptr<3> to !llvm.ptr<7>
      %c1 = arith.constant 1 : i32
      %is0 = arith.cmpi eq, %tid, %c0 : i32
      scf.if %is0 {
        nvvm.mbarrier.init %bar, %c1 : !llvm.ptr<3>, i32
        nvvm.mbarrier.arrive.expect_tx %bar, %c1024 : !llvm.ptr<3>, i32
        nvvm.cp.async.bulk.tensor.shared.cluster.global %dst7, %map, %bar, box[%c0, %c4] : !llvm.ptr<7>, !llvm.ptr
      }
      %t = arith.constant 1000 : i32
      nvvm.barrier0
      nvvm.mbarrier.try_wait.parity %bar, %c0, %t : !llvm.ptr<3>, i32, i32
      %c4i = arith.constant 4 : i32
      %off = arith.muli %tid, %c4i : i32
      %a = llvm.getelementptr %dst[%off] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %w = llvm.load %a : !llvm.ptr<3> -> i32
"""
    params = (ParamSpec("map", "tma", spec), *OUT)
    k = kernel(body + store_out("%w"), params=params,
               args="%map: !llvm.ptr {llvm.byval = !llvm.array<128 x i8>}, %out: !llvm.ptr<1>")
    out = np.zeros(32, np.int32)
    k.launch((1, 1, 1), {"map": src, "out": out})
    box = np.zeros((8, 64), np.uint16)
    box[:2] = src[4:6]
    smem = np.zeros(2048, np.uint8)
    raw = 1024 + np.arange(8)[:, None] * 128 + np.arange(128)[None, :]
    smem[swizzle(raw, 128)] = box.view(np.uint8).reshape(8, 128)
    assert (out == smem[1024:1152].view(np.int32)).all()      # the first 128 bytes, as lanes read them


class _FakeCTA:
    def __init__(self):
        self.smem = np.zeros(1024 + 65536, np.uint8)
        self.tmem = np.zeros((128, 512), np.uint32)
        self.tmem_cols = 512
        self.stats = {"mma": 0}


def _place(cta, matrix_bits, dst, rows_per_box):
    """A [rows, 64] bf16 matrix as TMA would place it (128B swizzle, one 128-byte row per row)."""
    tm = TensorMap(np.ascontiguousarray(matrix_bits), TmaSpec("bf16", (64, rows_per_box), swizzle="128B"))
    cta.smem[tm.smem_addresses(dst)] = tm.load_box([0, 0])


@pytest.mark.parametrize("n", [64, 128])
def test_tcgen05_mma_ss_k_major_matches_matmul(n):
    """D[128, n] = A[128, 16] . B[n, 16]^T, both K-major in 128B-swizzled tiles, through the
    descriptors fa4-lower-mma-sm100 encodes; then D += the same product (accumulate)."""
    rng = np.random.default_rng(0)
    a = f32_to_bf16(rng.standard_normal((128, 64)))
    b = f32_to_bf16(rng.standard_normal((n, 64)))
    cta = _FakeCTA()
    a_at, b_at = 1024, 1024 + 128 * 128
    _place(cta, a, a_at, 128)
    _place(cta, b, b_at, n)
    idesc = instr_desc(m=128, n=n, ab_dtype="bf16", a_major="k", b_major="k")
    k_step = 1                                                # second K slice: columns 16..31, +32 bytes
    da = smem_desc(a_at + 32 * k_step, swizzle=128, lbo=16, sbo=1024)
    db = smem_desc(b_at + 32 * k_step, swizzle=128, lbo=16, sbo=1024)
    execute_mma(cta, 16, da, db, idesc, False, False)
    ref = bf16_to_f32(a[:, 16:32]).astype(np.float64) @ bf16_to_f32(b[:, 16:32]).astype(np.float64).T
    got = cta.tmem[:, 16:16 + n].view(np.float32)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-5)
    execute_mma(cta, 16, da, db, idesc, True, False)
    np.testing.assert_allclose(cta.tmem[:, 16:16 + n].view(np.float32), 2 * ref, rtol=1e-6, atol=1e-5)


def test_smem_operand_addresses_k_major_rows_are_128_bytes_apart_swizzled():
    d = smem_desc(1024, swizzle=128, lbo=16, sbo=1024)
    addr = smem_operand_addresses(d, 16, 16, mn_major=False)
    assert addr[0, 0] == 1024 and addr[1, 0] == swizzle(1024 + 128, 128) and addr[8, 0] == 1024 + 1024
    assert addr[1, 1] == swizzle(1024 + 128 + 2, 128)


def test_lower_tmem_one_column_load_is_read_after_its_wait():
    """fa4-lower-tmem's output for a one-column load into vector<1xi32>, interpreted: the register
    must not be touched before tcgen05.wait::ld. Before the fix the pass widened it into the vector
    right after tcgen05.ld (an UnwaitedAsync fault here, at the llvm.insertelement)."""
    from fa4mlir.passes import registry
    body = """
      %c0 = arith.constant 0 : i32
      %slot = llvm.getelementptr %smem[%c0] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      "fa4.tmem_alloc"(%slot) {cols = 32 : i64} : (!llvm.ptr<3>) -> ()
      %base = llvm.load %slot : !llvm.ptr<3> -> i32
      %c3 = arith.constant 3 : i32
      %col = arith.addi %base, %c3 : i32
      "fa4.tmem_store"(%col, %tid) : (i32, i32) -> ()
      "fa4.tmem_wait"() {kind = "st"} : () -> ()
      %v = "fa4.tmem_load"(%col) {num = 1 : i64} : (i32) -> vector<1xi32>
      "fa4.tmem_wait"() {kind = "ld"} : () -> ()
      %e = vector.extract %v[0] : i32 from vector<1xi32>
""" + store_out("%e") + """
      "fa4.tmem_dealloc"(%base) {cols = 32 : i64} : (i32) -> ()
"""
    module = parse(body)
    registry.run_passes(module, ["fa4-lower-tmem"])
    k = Kernel("k", module, OUT, (32, 1, 1), {})
    assert (run(k) == np.arange(32)).all()


def cp_async_kernel(arrive: bool) -> Kernel:
    """Lane l copies 16 bytes (4 int32) of `src` row l into shared 64 + 16 l by cp.async, src-size 16
    on even lanes and 0 (nothing read, 16 zero bytes) on odd ones, arrives for them on an mbarrier of
    count 32 (net zero) and its own arrive, waits for the phase, then writes word 0 of its copy."""
    body = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c4 = arith.constant 4 : i32
      %c16 = arith.constant 16 : i32
      %c32 = arith.constant 32 : i32
      %c64 = arith.constant 64 : i32
""" + MBAR + """
      nvvm.mbarrier.init %bar, %c32 : !llvm.ptr<3>, i32
      %word = arith.muli %tid, %c4 : i32
      %src_l = llvm.getelementptr %src[%word] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %off = arith.muli %tid, %c16 : i32
      %at = arith.addi %off, %c64 : i32
      %dst = llvm.getelementptr %smem[%at] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %odd = arith.andi %tid, %c1 : i32
      %even = arith.cmpi eq, %odd, %c0 : i32
      %n = arith.select %even, %c16, %c0 : i32
      nvvm.cp.async.shared.global %dst, %src_l, 16, cache = cg, %n : !llvm.ptr<3>, !llvm.ptr<1>, i32
""" + ("      nvvm.cp.async.mbarrier.arrive %bar : !llvm.ptr<3>\n" if arrive else "") + """
      %s = nvvm.mbarrier.arrive %bar : !llvm.ptr<3> -> i64
      %t = arith.constant 1000 : i32
      nvvm.mbarrier.try_wait.parity %bar, %c0, %t : !llvm.ptr<3>, i32, i32
      %v = llvm.load %dst : !llvm.ptr<3> -> i32
"""
    params = (ParamSpec("src", "ptr"), *OUT)
    return Kernel("k", parse(body + store_out("%v"), "%src: !llvm.ptr<1>, %out: !llvm.ptr<1>", chip="sm_90a"),
                  params, (32, 1, 1), {})


def test_cp_async_copies_and_zero_fills_at_its_arrive():
    src = np.arange(32 * 4, dtype=np.int32) + 1000
    out = np.full(32, -1, np.int32)
    cp_async_kernel(True).launch((1, 1, 1), {"src": src, "out": out})
    assert (out[0::2] == src[0::8]).all() and (out[1::2] == 0).all()


def test_cp_async_never_arrived_is_a_fault():
    out = np.full(32, -1, np.int32)
    with pytest.raises((interpret.ExitFault, interpret.RaceFault)):
        cp_async_kernel(False).launch((1, 1, 1), {"src": np.zeros(128, np.int32), "out": out})
