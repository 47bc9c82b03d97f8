"""LLVM-dialect ops of the nvvm stage: addresses, shared/global loads and stores, vector elements,
the register fences fa4 passes emit, and the PTX math of fa4-lower-math.

Addresses are int64 per lane. `@fa4_smem` is the dynamic shared window at machine.SMEM_BASE; a
TMA descriptor parameter (`!llvm.ptr` byval) holds the index of its TensorMap; a `!llvm.ptr<1>`
parameter holds its array's made-up global address (memory.GlobalMemory).
"""
from __future__ import annotations

import re

import numpy as np

from ..._mlir import ir
from ..cluster import check_init_ordered, cluster_address
from ..faults import Fault, Unsupported
from ..machine import SMEM_BASE, uniform
from ..numeric import WARP, e4m3x2_to_f16x2, np_dtype, prmt, tanh_f16x2, vector_len
from ..program import PLAIN
from . import semantics
from .sync import release
from .wgmma import PendingRegs, move

SHARED, GLOBAL, CLUSTER = "!llvm.ptr<3>", "!llvm.ptr<1>", "!llvm.ptr<7>"
_ELEM_BYTES = {"i8": 1, "i16": 2, "i32": 4, "i64": 8, "f32": 4, "f16": 2, "bf16": 2}


@semantics("llvm.mlir.addressof")
def addressof(p, op, a, r):
    name = ir.FlatSymbolRefAttr(op.attributes["global_name"]).value
    if name != "fa4_smem":
        raise Unsupported(f"llvm.mlir.addressof @{name}: only the shared window @fa4_smem is modelled")
    p.constant(op.results[0], np.full(WARP, SMEM_BASE, np.int64))


@semantics("llvm.getelementptr")
def getelementptr(p, op, a, r):
    raw = list(ir.DenseI32ArrayAttr(op.attributes["rawConstantIndices"]))
    elem = str(ir.TypeAttr(op.attributes["elem_type"]).value)
    if raw != [-2147483648] or len(a) != 2 or elem not in _ELEM_BYTES:
        raise Unsupported(f"llvm.getelementptr form {raw} over {elem}: one dynamic index of a scalar type only")
    size, base, index, z = _ELEM_BYTES[elem], a[0], a[1], r[0]

    def run(env, mask, w):
        env[z] = env[base] + env[index].astype(np.int64) * size
    return PLAIN, run


@semantics("llvm.ptrtoint", "llvm.inttoptr", "llvm.addrspacecast")
def pointer_cast(p, op, a, r):
    dt, x, z = np_dtype(op.results[0].type), a[0], r[0]

    def run(env, mask, w):
        env[z] = env[x].astype(dt)
    return PLAIN, run


@semantics("llvm.mlir.undef", "llvm.mlir.poison", "llvm.mlir.zero")
def undef(p, op, a, r):
    t = op.results[0].type
    n = vector_len(t)
    p.constant(op.results[0], np.zeros((WARP, n) if n else WARP, np_dtype(t)))


def _sole_use_of(op, operand: int, producer: str) -> bool:
    """Whether `op`'s operand is the only use of a result of a `producer` op: the array that op made
    (it copies its input) is then this op's to write in place. A chain of N insertelements building
    an N-element vector (fa4-lower-mma-sm90's struct <-> vector shuffles) copies once, not N times."""
    value = op.operands[operand]
    owner = value.owner
    return getattr(owner, "name", None) == producer and len(list(value.uses)) == 1


def _set(w, vector, value, at: int, in_place: bool):
    """insertelement / insertvalue: a warp's [lanes, n] array with column `at` set to `value` (a copy
    unless `in_place`). A wgmma result not yet retired (PendingRegs) moves: the result stays pending
    on the latest group (wgmma.move, inlined: the accumulator shuffles run a million times a test)."""
    group = None
    if type(vector) is PendingRegs:
        if not vector.ready():
            group = vector.group
        vector = vector.value
    if type(value) is PendingRegs:
        if not value.ready():
            group = value.group if group is None else max(group, value.group)
        value = value.value
    out = vector if in_place else np.array(vector, copy=True)
    out[:, at] = value
    return out if group is None else PendingRegs(out, w, group)


def _get(w, vector, at: int):
    """extractelement / extractvalue: column `at`; a pending wgmma result's column stays pending."""
    if type(vector) is not PendingRegs:
        return vector[:, at]
    if vector.ready():
        return vector.value[:, at]
    return PendingRegs(vector.value[:, at], w, vector.group)


@semantics("llvm.insertelement")
def insertelement(p, op, a, r):
    vec, x, idx, z = a[0], a[1], a[2], r[0]
    const_at, in_place = p.uniform_constant(op.operands[2]), _sole_use_of(op, 0, "llvm.insertelement")

    def run(env, mask, w):
        at = const_at if const_at is not None else uniform(env[idx], mask, "insertelement index")
        env[z] = _set(w, env[vec], env[x], at, in_place)
    return PLAIN, run


@semantics("llvm.extractelement")
def extractelement(p, op, a, r):
    vec, idx, z = a[0], a[1], r[0]
    const_at = p.uniform_constant(op.operands[1])

    def run(env, mask, w):
        at = const_at if const_at is not None else uniform(env[idx], mask, "extractelement index")
        env[z] = _get(w, env[vec], at)
    return PLAIN, run


@semantics("llvm.insertvalue")
def insertvalue(p, op, a, r):
    """A struct (wgmma's accumulator registers) is a [lanes, fields] array: field `position` set."""
    pos = list(ir.DenseI64ArrayAttr(op.attributes["position"]))
    if len(pos) != 1:
        raise Unsupported(f"llvm.insertvalue at {pos}: one position of a flat struct only")
    i, s, x, z = pos[0], a[0], a[1], r[0]
    in_place = _sole_use_of(op, 0, "llvm.insertvalue")

    def run(env, mask, w):
        env[z] = _set(w, env[s], env[x], i, in_place)
    return PLAIN, run


@semantics("llvm.extractvalue")
def extractvalue(p, op, a, r):
    pos = list(ir.DenseI64ArrayAttr(op.attributes["position"]))
    if len(pos) != 1:
        raise Unsupported(f"llvm.extractvalue at {pos}: one position of a flat struct only")
    i, s, z = pos[0], a[0], r[0]

    def run(env, mask, w):
        env[z] = _get(w, env[s], i)
    return PLAIN, run


@semantics("llvm.inline_asm")
def inline_asm(p, op, a, r):
    """The empty register fence (`"", "=r,0"` / `"=f,0"` / `"=l,0"`: the value passes through), and
    the one other asm a pass emits: wgmma with A from registers (ops/wgmma.py)."""
    asm = ir.StringAttr(op.attributes["asm_string"]).value
    if asm.startswith("cp.async.cg.shared.global") or asm.startswith("createpolicy."):
        from .tma import cp_async_hinted_asm
        return cp_async_hinted_asm(p, op, a, r, asm)
    if "wgmma.mma_async" in asm:
        from .wgmma import mma_regs_asm
        return mma_regs_asm(p, op, a, r, asm)
    if "SCALE_DONE" in asm:
        return _scale_if_uniform(op, a, r, asm)
    if asm.strip() or len(a) != 1 or len(r) != 1:
        raise Unsupported(f"inline asm {asm!r}: only the empty register fence and wgmma are modelled")
    x, z = a[0], r[0]

    def run(env, mask, w):
        # an unwaited tcgen05.ld result faults here; wgmma registers in flight pass (the asm reads
        # nothing: fa4-lower-mma-sm90 fences the accumulator it chains into the next wgmma)
        env[z] = move(w, np.asarray, env[x])
    return PLAIN, run


def _scale_if_uniform(op, a, r, asm: str):
    """fa4-lower-sync's scale_if_uniform: `@skip bra.uni SCALE_DONE` around n `mul.f32 $i, $i, $(2n+i)`;
    values $n.. tied to the results, scales $2n.., the condition $3n. bra.uni promises a warp-uniform
    branch: a condition that differs between lanes is a fault."""
    n = len(a) // 2
    if len(a) != 2 * n + 1 or f"setp.eq.u32 skip, ${3 * n}, 0;" not in asm or asm.count("mul.f32") != n:
        raise Unsupported(f"inline asm scale-if-uniform form {asm[:80]!r}...")
    values, scales, flag, z = a[:n], a[n:2 * n], a[2 * n], r[0]

    def run(env, mask, w):
        out = np.stack([env[s] for s in values], axis=1)
        if uniform(env[flag], mask, "scale_if_uniform condition (bra.uni)"):
            out = out * np.stack([env[s] for s in scales], axis=1)
        env[z] = out.astype(np.float32)
    return PLAIN, run


_PTX = {"ex2.approx.ftz.f32 $0, $1;": lambda x: np.exp2(x).astype(np.float32),
        "lg2.approx.ftz.f32 $0, $1;": lambda x: np.log2(x).astype(np.float32),
        "tanh.approx.f32 $0, $1;": lambda x: np.tanh(x).astype(np.float32),
        "cvt.rn.f16x2.e4m3x2 $0, $1;": e4m3x2_to_f16x2, "tanh.approx.f16x2 $0, $1;": tanh_f16x2}


_PRMT = re.compile(r"prmt\.b32 \$0, \$1, \$2, 0x([0-9a-f]{4});")


def _prmt(selector: int, a, r):
    """fa4.prmt: prmt.b32 (numeric.prmt), exact."""
    if len(a) != 2 or len(r) != 1:
        raise Unsupported(f"prmt.b32 with {len(a)} operands")
    x, y, z = a[0], a[1], r[0]

    def run(env, mask, w):
        env[z] = prmt(env[x], env[y], selector)
    return PLAIN, run


@semantics("nvvm.inline_ptx")
def inline_ptx(p, op, a, r):
    """The PTX of fa4-lower-math: ex2/lg2/tanh.approx, modelled exactly (float32 exp2/log2/tanh: the
    hardware's tanh.approx is off by up to 2^-11 relative, which the GPU comparison allows for), and
    cvt.rn.f16x2.e4m3x2 (exact: numeric.e4m3x2_to_f16x2), tanh.approx.f16x2 (numeric.tanh_f16x2: rounded
    to f16), prmt.b32 (exact: numeric.prmt); st.async (fa4-lower-pipelines) and ld.global.nc with cache hints
    (fa4-lower-tma: the bytes the load reads, the hints change none)."""
    code = ir.StringAttr(op.attributes["ptxCode"]).value
    if m := _ST_ASYNC.fullmatch(code):  # fa4-lower-pipelines' peer_store_async (passes/_ptx.st_async)
        return _st_async(int(m.group(3) or 1), int(m.group(4)), m.group(2) is not None, a, r)
    if m := _PRMT.fullmatch(code):     # fa4.prmt (fa4-lower-math's prmt_ptx): two operands
        return _prmt(int(m.group(1), 16), a, r)
    if m := _LD_GLOBAL_NC.fullmatch(code):  # fa4-lower-tma's ld_global_nc (passes/_ptx.ld_global_nc)
        return _ld_global_nc(int(m.group(1) or 1), int(m.group(2) or 0), op, a, r)
    f = _PTX.get(code)
    if f is None or len(a) != 1 or len(r) != 1:
        raise Unsupported(f"inline PTX {code!r}")
    x, z = a[0], r[0]

    def run(env, mask, w):
        env[z] = f(env[x])
    return PLAIN, run


# fa4-lower-tma's ld_global_nc: the hints (.L1::<priority>, .L2::<n>B) change no value
_LD_GLOBAL_NC = re.compile(r"ld\.global\.nc(?:\.L1::(?:evict_normal|evict_unchanged|evict_first|evict_last|no_allocate))?"
                           r"(?:\.L2::(?:64|128|256)B)?(?:\.v([24]))?\.(?:b32|f32) (?:\$0|\{[$0-9, ]+\}), "
                           r"\[\$(?:\d+)(?:\+(\d+))?\];")


def _ld_global_nc(n: int, offset: int, op, a, r):
    """ld.global.nc of `n` 32-bit elements at [$n(+offset)] (PTX ISA 9.7.9.9), one result per element: the bytes
    llvm.load reads there (its cache hints are hints: no value changes); an address not aligned to the n x 4
    bytes is a fault."""
    if len(a) != 1 or len(r) != n:
        raise Unsupported(f"ld.global.nc with {len(a)} operands and {len(r)} results for {n} elements")
    dts = [np_dtype(v.type) for v in op.results]
    ptr, nbytes = a[0], 4 * n

    def run(env, mask, w):
        lanes = np.nonzero(mask)[0]
        words = np.zeros((WARP, n), np.uint32)
        addrs = env[ptr][lanes].astype(np.int64) + offset
        bad = np.flatnonzero(addrs % nbytes)
        if bad.size:
            raise Fault(f"ld.global.nc of {nbytes} bytes at {int(addrs[bad[0]]):#x}: not aligned to {nbytes} bytes")
        words[lanes] = w.cta.gmem.read_lanes(addrs, nbytes).view(np.uint32)
        for i, (z, dt) in enumerate(zip(r, dts)):
            env[z] = words[:, i].copy().view(dt)
    return PLAIN, run


_ST_ASYNC = re.compile(r"\{ \.reg \.b32 sta, stb; cvt\.u32\.u64 sta, \$0; cvt\.u32\.u64 stb, \$(\d+); "
                       r"(add\.s32 sta, sta, \$1; )?st\.async\.shared::cluster\.mbarrier::complete_tx::bytes"
                       r"(?:\.v([24]))?\.b(32|64) \[sta\], (?:\$\d+|\{[$0-9, ]+\}), \[stb\]; \}")


def _st_async(n: int, bits: int, offset: bool, a, r):
    """st.async.shared::cluster.mbarrier::complete_tx::bytes (PTX ISA 9.7.9.12 "st.async"), what that section
    says of it: "performed in the generic proxy"; with .weak (the default) "a weak store to shared memory,
    which signals its completion through an mbarrier object ... The complete-tx operation on the mbarrier
    has .release semantics at .cluster scope"; the destination and the mbarrier "belong to the same CTA",
    another CTA of the executing thread's cluster (else undefined: a Fault here). So each lane's bytes land
    in that CTA's SMEM as a generic-proxy write of the storing warp (its clocks, as st.shared::cluster), and
    the complete-tx (`n * bits / 8` bytes) on that CTA's mbarrier publishes the warp's vector, a release: a
    thread whose wait on the barrier completes acquires the store. It stays a generic-proxy write: a wgmma
    (async proxy) reads it only after a fence.proxy.async (here the waiting warp's own, after its wait,
    hb.check_async_proxy_read). The store is modelled as landing at issue (one schedule the ISA allows).
    The asm's addresses: mapa's results as 32-bit shared::cluster addresses, the data's plus the i32 `offset`
    operand ($1) when present; this model's mapa keeps the CTA rank above bit 32 (cluster.cluster_address), so
    it adds the offset to the whole value instead of truncating it."""
    k = 2 if offset else 1
    if len(a) != n + k + 1 or r:
        raise Unsupported(f"st.async with {len(a)} operands for {n} value(s)")
    remote, words, mbar, nbytes = a[0], a[k:n + k], a[n + k], n * bits // 8
    delta = a[1] if offset else None
    word = np.uint32 if bits == 32 else np.uint64

    def run(env, mask, w):
        lanes = np.nonzero(mask)[0]
        data = np.stack([np.broadcast_to(np.asarray(env[x]), (WARP,)).view(word) for x in words], axis=1)
        data = np.ascontiguousarray(data).view(np.uint8)
        mine, g = w.cta.hb, w.cta.hb.g(w.wid)
        landed = []
        for lane in lanes:
            at = int(env[remote][lane]) + (int(env[delta][lane]) if delta is not None else 0)
            cta, local = cluster_address(w.cta, at)
            bar_cta, bar = cluster_address(w.cta, int(env[mbar][lane]))
            if cta is w.cta or bar_cta is not cta:
                raise w.fault(Fault, f"st.async from CTA rank {w.cta.rank}: its data and its mbarrier must be in "
                                     f"one other CTA of the cluster (PTX ISA 9.7.9.12), got rank "
                                     f"{cta.rank} and rank {bar_cta.rank}")
            span = _smem_span(cta, np.array([local], np.int64), nbytes, "st.async")
            cta.check_smem_write(span, "st.async")
            cta.hb.access(cta.hb.smem, span, mine.vc[:, g], g, True, "st.async", generic=True)
            cta.smem[span] = data[lane]
            landed.append(cta.mbarrier(bar))
        published = release(w, "st.async")
        for b in landed:
            check_init_ordered(b, published, f"st.async (complete-tx) of CTA rank {w.cta.rank}")
            b.complete_tx(nbytes, published)
    return PLAIN, run


def _lane_bytes(addrs: np.ndarray, nbytes: int) -> np.ndarray:
    return addrs[:, None] + np.arange(nbytes)[None, :]


def _smem_span(cta, addrs, nbytes, what):
    lo, hi = int(addrs.min()), int(addrs.max()) + nbytes
    if lo < SMEM_BASE or hi > cta.smem.size:
        raise Fault(f"{what} of {nbytes} bytes at shared {lo:#x}..{hi:#x}: outside the kernel's "
                    f"{cta.smem.size - SMEM_BASE} bytes of shared memory")
    return _lane_bytes(addrs, nbytes)


@semantics("llvm.load")
def load(p, op, a, r):
    t = op.results[0].type
    dt, n, ptr, z = np_dtype(t), vector_len(t), a[0], r[0]
    nbytes = np.dtype(dt).itemsize * (n or 1)
    space = str(op.operands[0].type)
    if space not in (SHARED, GLOBAL):
        raise Unsupported(f"llvm.load from {space}")

    def run(env, mask, w):
        cta, lanes = w.cta, np.nonzero(mask)[0]
        out = np.zeros((WARP, nbytes), np.uint8)
        if space == SHARED:
            span = _smem_span(cta, env[ptr][lanes], nbytes, "ld.shared")
            cta.hb.warp_access(w, cta.hb.smem, span, False, "ld.shared")
            out[lanes] = cta.smem[span]
        else:
            out[lanes] = cta.gmem.read_lanes(env[ptr][lanes], nbytes)
        env[z] = out.view(dt) if n else out.view(dt)[:, 0]
    return PLAIN, run


@semantics("llvm.store")
def store(p, op, a, r):
    val, ptr = a[0], a[1]
    space = str(op.operands[1].type)
    if space not in (SHARED, GLOBAL, CLUSTER):
        raise Unsupported(f"llvm.store to {space}")

    def run(env, mask, w):
        cta, lanes = w.cta, np.nonzero(mask)[0]
        data = np.ascontiguousarray(env[val]).view(np.uint8).reshape(WARP, -1)[lanes]
        if space == CLUSTER:
            _store_cluster(w, env[ptr][lanes], data)
        elif space == SHARED:
            span = _smem_span(cta, env[ptr][lanes], data.shape[1], "st.shared")
            cta.check_smem_write(span, "st.shared")
            cta.hb.warp_access(w, cta.hb.smem, span, True, "st.shared", generic=True)
            cta.smem[span] = data
        else:
            cta.gmem.write_lanes(env[ptr][lanes], data)
    return PLAIN, run


def _store_cluster(w, addrs: np.ndarray, data: np.ndarray) -> None:
    """st.shared::cluster: each lane's bytes into the CTA its shared::cluster address names (a mapa
    result: a peer's SMEM; else this CTA's), through the generic proxy, as the writing warp's access
    (its agent and clocks: the peer's reader is ordered after it only by a release it acquires, e.g. a
    remote mbarrier arrive; its wgmma needs the writer's fence.proxy.async, hb.check_async_proxy_read)."""
    mine = w.cta.hb
    for i, addr in enumerate(addrs):
        cta, local = cluster_address(w.cta, int(addr))
        span = _smem_span(cta, np.array([local], np.int64), data.shape[1], "st.shared::cluster")
        cta.check_smem_write(span, "st.shared::cluster")
        g = mine.g(w.wid)
        cta.hb.access(cta.hb.smem, span, mine.vc[:, g], g, True, "st.shared::cluster", generic=True)
        cta.smem[span] = data[i]
