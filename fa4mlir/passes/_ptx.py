"""The one escape hatch to raw PTX: instructions no nvvm op offers, each citing its PTX ISA section.

Use only from passes (kernels speak fa4). Every function emits one `nvvm.inline_ptx` at the current
insertion point.
"""
from __future__ import annotations

from .._mlir import ir, nvvm


def activemask() -> ir.Value:
    """The mask of the warp's currently active lanes (PTX ISA 9.7.13.13 "activemask"): lets one
    active lane of a divergent warp act for it (nvvm has no activemask op in LLVM 22)."""
    i32 = ir.IntegerType.get_signless(32)
    return nvvm.InlinePtxOp([i32], [], [], "activemask.b32 $0;").results[0]



def st_async(remote: ir.Value, offset: ir.Value | None, words: list, bits: int, mbar: ir.Value) -> None:
    """st.async.shared::cluster.mbarrier::complete_tx::bytes{.v2,.v4}.b32/.b64 [remote (+ offset)], {words}, [mbar]
    (PTX ISA 9.7.9.12 "st.async"): a weak store into a peer CTA's shared memory (generic proxy) whose
    bytes complete as transactions on the mbarrier `mbar` of that CTA (both shared::cluster addresses,
    from mapa); nvvm has no st.async op in LLVM 22. `words`: 1, 2 or 4 values of `bits` (32 or 64) each;
    `offset` (an i32 or None) is added to `remote` inside the asm, so that stores through one base share its
    register (an address operand cannot be folded into the asm's [reg+imm]). Both addresses are used as
    32-bit shared::cluster addresses (the low half of mapa's 64-bit result, what mapa.shared::cluster.u32
    gives): a 32-bit STAS address takes one register, not a pair."""
    n = len(words)
    if n not in (1, 2, 4) or bits not in (32, 64) or (bits == 64 and n == 4):
        raise ValueError(f"st.async stores 1, 2 or 4 x b32 or 1, 2 x b64, got {n} x b{bits}")
    vec = "" if n == 1 else f".v{n}"
    first = 1 if offset is None else 2
    data = f"${first}" if n == 1 else "{" + ", ".join(f"${first + i}" for i in range(n)) + "}"
    store = f"st.async.shared::cluster.mbarrier::complete_tx::bytes{vec}.b{bits} [%s], {data}, [${first + n}];"
    # the shared::cluster addresses as 32-bit (as mapa.shared::cluster.u32 gives them): one register each
    mb = f"${first + n}"
    store = store.replace(f"[{mb}]", "[stb]")
    code = ("{ .reg .b32 sta, stb; cvt.u32.u64 sta, $0; cvt.u32.u64 stb, " + mb + "; "
            + ("" if offset is None else "add.s32 sta, sta, $1; ") + store % "sta" + " }")
    nvvm.InlinePtxOp([], [remote, *([offset] if offset is not None else []), *words, mbar], [], code)


L1_EVICTION = ("evict_normal", "evict_unchanged", "evict_first", "evict_last", "no_allocate")
L2_PREFETCH_SIZES = (64, 128, 256)


def ld_global_nc(addr: ir.Value, offset: int, elem: ir.Type, n: int, l1_evict: str | None,
                 l2_prefetch: int | None) -> list:
    """ld.global.nc{.L1::<l1_evict>}{.L2::<l2_prefetch>B}{.v2,.v4}.b32/.f32 d, [addr(+offset)] (PTX ISA 9.7.9.9
    "ld.global.nc": the eviction priority before the prefetch size, both before the vector and type; .L1 priorities
    and .L2::<n>B need PTX ISA 7.4, sm_70 / sm_80): `n` (1, 2 or 4) values of `elem` (i32: .b32, f32: .f32) from
    the global address `addr` plus the constant byte `offset` (>= 0, folded into the address operand [addr+offset]); nvvm's loads
    take no cache hints. One result per element, in order."""
    if n not in (1, 2, 4):
        raise ValueError(f"ld.global.nc loads 1, 2 or 4 elements, got {n}")
    if l1_evict is not None and l1_evict not in L1_EVICTION:
        raise ValueError(f"ld.global.nc .L1 eviction priority must be one of {L1_EVICTION}, got {l1_evict!r}")
    if l2_prefetch is not None and l2_prefetch not in L2_PREFETCH_SIZES:
        raise ValueError(f"ld.global.nc .L2 prefetch size must be one of {L2_PREFETCH_SIZES}, got {l2_prefetch!r}")
    kind = "f32" if isinstance(elem, ir.F32Type) else "b32"
    hints = (f".L1::{l1_evict}" if l1_evict else "") + (f".L2::{l2_prefetch}B" if l2_prefetch else "")
    dst = "$0" if n == 1 else "{" + ", ".join(f"${i}" for i in range(n)) + "}"
    if offset < 0:
        raise ValueError(f"ld.global.nc folds a non-negative byte offset into its address, got {offset}")
    at = f"${n}" + (f"+{offset}" if offset else "")
    code = f"ld.global.nc{hints}{'' if n == 1 else f'.v{n}'}.{kind} {dst}, [{at}];"
    return list(nvvm.InlinePtxOp([elem] * n, [addr], [], code).results)
