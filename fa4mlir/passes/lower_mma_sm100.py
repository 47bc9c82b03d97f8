"""fa4-lower-mma-sm100: fa4 MMA ops -> tcgen05 (PTX ISA 9.1 §9.7.16, "TensorCore 5th Generation").

* `fa4.smem_desc` -> the 64-bit shared memory descriptor of tcgen05 (§9.7.16.4.1 "Shared memory
  descriptor"): bits 0-13 start address >> 4, 16-29 leading dimension byte offset >> 4, 32-45
  stride dimension byte offset >> 4, 46-48 fixed constant 0b001, 49-51 matrix base offset (0:
  tiles are 1024-byte aligned), 52 leading dimension mode (0: relative byte offset), 53-60 fixed 0,
  61-63 swizzle mode (0 none, 1 128B with 32B atom, 2 128B, 4 64B, 6 32B). This differs from the
  wgmma descriptor (fa4-lower-mma-sm90): a 3-bit swizzle field at 61 with other codes, and the
  version bit 46.
* `fa4.mma` -> tcgen05.mma.cta_group::1.kind::f16 [d_tmem], a, b_desc, idesc, enable_input_d
  (§9.7.16.10.9): A is an SMEM descriptor (`a_source = "smem"`) or a TMEM address ("tmem"), B an
  SMEM descriptor, D the i32 TMEM address in operand `acc`; `accumulate` (i1, may be dynamic) is
  enable-input-d. The 32-bit instruction descriptor (§9.7.16.4.2 "Instruction descriptor", table
  for .kind::f16) is a constant computed by `instr_desc`; `b_major = "mn"` sets "Transpose B"
  (bit 16: B stored N-contiguous, as V is in P.V). A from TMEM is always K-major (bit 15 = 0).
* `fa4.mma_commit(stage){pipe, side}` -> tcgen05.commit.cta_group::1.mbarrier::arrive::one
  (§9.7.16.11.1) on `full[stage]` or `empty[stage]` of `pipe`: one arrival once every tcgen05.mma
  this thread issued before it has completed.
* `cta_group = 2` (note "CTA pair") selects the .cta_group::2 forms of both; `fa4.mma_commit{multicast
  = mask}` -> tcgen05.commit.cta_group::N.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64
  [bar], mask (§9.7.16.11.1): one arrival on the barrier at that SMEM offset in every CTA whose rank
  is set in the 16-bit mask.
Runs before fa4-lower-pipelines (it needs the pipelines' SMEM offsets).

Note "CTA pair" (§9.7.16.2 "Matrix and data movement shape", §9.7.16.10.1): with .cta_group::2 the
two CTAs of a cluster whose ranks differ in bit 0 act as one MMA unit; one thread of the even
("leader") CTA issues. An M x N x K MMA then holds rows [0, M/2) of A and D in the leader and
[M/2, M) in the peer (each at the operand's own SMEM descriptor / TMEM address, the same in both
CTAs) and N/2 of B's columns in each CTA's SMEM at the same descriptor; the instruction descriptor
carries the pair's M and N. kind::f16 with .cta_group::2 takes M = 128 or 256; N is checked here to
be a multiple of 32 in [32, 256], the subset valid for both Ms (CUTLASS's 2x1SM atoms state the
same bound). TMEM of a pair is allocated by one warp of each CTA with .cta_group::2 (fa4-lower-tmem).

Note "issuer registers": one thread issues every MMA of a CTA and runs with few registers (48 in
the attention kernel's role table). Descriptors of tiles at fixed SMEM addresses (Q) are loop
invariant; hoisted out of the KV loop, 16 of them take 32 registers, which ptxas then spills.
Each descriptor's base therefore passes through an empty volatile asm where it is used: LLVM
cannot hoist it, and it costs one uniform move per MMA.
"""
from __future__ import annotations

from .._mlir import arith, ir, llvm, nvvm
from ._util import (CTA_GROUPS, PassError, attr, barrier_addr, check_none_left, cta_group, i32, kernel_func,
                    ops_and_pipelines, replace, smem_descriptor)

NAME = "fa4-lower-mma-sm100"
OPS = ("fa4.smem_desc", "fa4.mma", "fa4.mma_commit")

# §9.7.16.4.1, bits 61-63 "Swizzling mode": swizzle bytes -> code (128B-with-32B-atom is 1, unused here).
SWIZZLE_CODE = {0: 0, 128: 2, 64: 4, 32: 6}
DESC_VERSION = 0b001        # bits 46-48, "fixed constant value of 0b001"
# §9.7.16.4.2, kind::f16 column: dtype (bits 4-5) and atype/btype (bits 7-9, 10-12) codes.
D_TYPE_CODE = {"f16": 0, "f32": 1}
AB_TYPE_CODE = {"f16": 0, "bf16": 1}
MAJOR_CODE = {"k": 0, "mn": 1}   # "Transpose A/B Matrix" (bits 15, 16): 0 = K-major, 1 = MN-major
MMA_K = {"f16": 16, "bf16": 16}  # K of one tcgen05.mma kind::f16 (§9.7.16.10.1 "Matrix shape")


def _field(value: int, lo: int, width: int, name: str) -> int:
    if not 0 <= value < (1 << width):
        raise ValueError(f"{name}={value} does not fit the {width}-bit field at bit {lo}")
    return value << lo


def smem_desc_fields(*, swizzle: int, lbo: int, sbo: int, base_offset: int = 0, lbo_mode: int = 0) -> int:
    """The address-independent bits of a tcgen05 shared memory descriptor (§9.7.16.4.1)."""
    if swizzle not in SWIZZLE_CODE:
        raise ValueError(f"swizzle must be one of {sorted(SWIZZLE_CODE)} bytes, got {swizzle}")
    for name, v in (("lbo", lbo), ("sbo", sbo)):
        if v % 16:
            raise ValueError(f"{name}={v}: byte offsets are encoded >> 4 and must be multiples of 16")
    return (_field(lbo >> 4, 16, 14, "lbo >> 4") | _field(sbo >> 4, 32, 14, "sbo >> 4")
            | _field(DESC_VERSION, 46, 3, "version") | _field(base_offset, 49, 3, "base_offset")
            | _field(lbo_mode, 52, 1, "lbo_mode") | _field(SWIZZLE_CODE[swizzle], 61, 3, "swizzle"))


def smem_desc(addr: int, *, swizzle: int, lbo: int, sbo: int) -> int:
    """The full descriptor of the SMEM tile at byte address `addr` (what the lowering computes at run time)."""
    if addr % 16:
        raise ValueError(f"SMEM matrix address {addr:#x} must be 16-byte aligned")
    return ((addr >> 4) & 0x3FFF) | smem_desc_fields(swizzle=swizzle, lbo=lbo, sbo=sbo)


def check_shape(m: int, n: int, k: int, ab_dtype: str, acc_dtype: str, cta_group: int = 1) -> None:
    """Raise ValueError unless m x n x k is a dense kind::f16 shape of `cta_group` (§9.7.16.10.1; note
    "CTA pair" for cta_group 2)."""
    if ab_dtype not in AB_TYPE_CODE or acc_dtype not in D_TYPE_CODE:
        raise ValueError(f"kind::f16 takes A/B in {sorted(AB_TYPE_CODE)} and D in {sorted(D_TYPE_CODE)}; got "
                         f"{ab_dtype} -> {acc_dtype}")
    if cta_group not in (1, 2):
        raise ValueError(f"cta_group must be 1 or 2, got {cta_group}")
    if k != MMA_K[ab_dtype]:
        raise ValueError(f"kind::f16 takes K = {MMA_K[ab_dtype]}, got {k}")
    if cta_group == 2:
        if m not in (128, 256):
            raise ValueError(f"cta_group::2 kind::f16 takes M = 128 or 256 (the pair's rows), got {m}")
        if n % 32 or not 32 <= n <= 256:
            raise ValueError(f"cta_group::2 takes N a multiple of 32 in [32, 256], got {n}")
        return
    if m not in (64, 128):
        raise ValueError(f"cta_group::1 kind::f16 takes M = 64 or 128, got {m}")
    step = 8 if m == 64 else 16
    if n % step or not step <= n <= 256:
        raise ValueError(f"M={m} takes N a multiple of {step} in [{step}, 256], got {n}")


def instr_desc(*, m: int, n: int, ab_dtype: str = "bf16", acc_dtype: str = "f32", a_major: str = "k",
               b_major: str = "k", negate_a: bool = False, negate_b: bool = False, k: int = 16,
               cta_group: int = 1) -> int:
    """The 32-bit instruction descriptor of a dense tcgen05.mma kind::f16 (§9.7.16.4.2, Table "Instruction
    descriptor format for .kind::tf32, .kind::f16, .kind::f8f6f4 and .kind::i8"); with cta_group 2, M
    and N are the pair's (note "CTA pair")."""
    check_shape(m, n, k, ab_dtype, acc_dtype, cta_group)
    if a_major not in MAJOR_CODE or b_major not in MAJOR_CODE:
        raise ValueError(f"majors must be 'k' or 'mn', got a_major={a_major!r}, b_major={b_major!r}")
    return (_field(0, 0, 2, "sparsity selector") | _field(0, 2, 1, "sparsity") | _field(0, 3, 1, "saturate")
            | _field(D_TYPE_CODE[acc_dtype], 4, 2, "dtype")
            | _field(AB_TYPE_CODE[ab_dtype], 7, 3, "atype") | _field(AB_TYPE_CODE[ab_dtype], 10, 3, "btype")
            | _field(int(negate_a), 13, 1, "negate A") | _field(int(negate_b), 14, 1, "negate B")
            | _field(MAJOR_CODE[a_major], 15, 1, "transpose A") | _field(MAJOR_CODE[b_major], 16, 1, "transpose B")
            | _field(n >> 3, 17, 6, "N >> 3") | _field(m >> 4, 24, 5, "M >> 4")
            | _field(0, 30, 2, "max shift"))


def _desc(op: ir.Operation) -> ir.Value:
    """Constant offsets fold into the descriptor; rematerialised at each use (note "issuer registers")."""
    try:
        fields = smem_desc_fields(swizzle=attr(op, "swizzle"), lbo=attr(op, "lbo"), sbo=attr(op, "sbo"))
    except ValueError as e:
        raise PassError(f"{NAME}: smem_desc: {e}", op.location) from None
    return smem_descriptor(op.operands[0], fields, rematerialise=True)


def _mma(op: ir.Operation) -> None:
    m, n, k = attr(op, "m"), attr(op, "n"), attr(op, "k")
    ab, acc_t, a_src = attr(op, "ab_dtype"), attr(op, "acc_dtype"), attr(op, "a_source")
    b_major = attr(op, "b_major") if "b_major" in op.attributes else "k"
    group = cta_group(op)
    try:
        idesc = instr_desc(m=m, n=n, k=k, ab_dtype=ab, acc_dtype=acc_t, b_major=b_major, cta_group=group)
    except ValueError as e:
        raise PassError(f"{NAME}: tcgen05.mma: {e}", op.location) from None
    a, b, accumulate, *acc = op.operands
    i32t, i64t = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
    if len(acc) != 1 or acc[0].type != i32t or len(op.results):
        raise PassError(f"{NAME}: on sm_100a the accumulator is one i32 TMEM address operand and fa4.mma has "
                        f"no result; got {len(acc)} acc operand(s) and {len(op.results)} result(s)", op.location)
    tmem_t = ir.Type.parse("!llvm.ptr<6>")
    if a_src == "smem":
        if a.type != i64t:
            raise PassError(f"{NAME}: a_source='smem' needs an i64 SMEM descriptor, got {a.type}", op.location)
    elif a_src == "tmem":
        if a.type != i32t:
            raise PassError(f"{NAME}: a_source='tmem' needs an i32 TMEM address, got {a.type}", op.location)
        a = llvm.inttoptr(tmem_t, a)
    else:
        raise PassError(f"{NAME}: a_source must be 'smem' or 'tmem' on sm_100a, got {a_src!r}", op.location)
    nvvm.tcgen05_mma(nvvm.Tcgen05MMAKind.F16, CTA_GROUPS[group], llvm.inttoptr(tmem_t, acc[0]), a, b,
                     i32(idesc), accumulate)
    op.erase()


def _commit(op: ir.Operation, pipes: dict) -> None:
    side = attr(op, "side")
    if side not in ("full", "empty"):
        raise PassError(f"{NAME}: mma_commit side must be 'full' or 'empty', got {side!r}", op.location)
    bar = barrier_addr(pipes, op, side, op.operands[0])
    mask = None
    if "multicast" in op.attributes:
        bits = attr(op, "multicast")
        if not 0 < bits < 1 << 16:
            raise PassError(f"{NAME}: mma_commit multicast is a 16-bit mask of cluster CTA ranks, got {bits}",
                            op.location)
        mask = arith.constant(ir.IntegerType.get_signless(16), bits)
    nvvm.tcgen05_commit(bar, multicast_mask=mask, group=CTA_GROUPS[cta_group(op)])


def run(module: ir.Operation) -> None:
    func = kernel_func(module)
    found, pipes = ops_and_pipelines(func, *OPS)
    for op in found:
        with ir.InsertionPoint(op), op.location:
            if op.name == "fa4.smem_desc":
                replace(op, [_desc(op)])
            elif op.name == "fa4.mma":
                _mma(op)
            elif op.name == "fa4.mma_commit":
                _commit(op, pipes)
                op.erase()
    check_none_left(func, OPS, NAME)
