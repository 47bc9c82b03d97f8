"""The fa4 dialect, declared as data.

Each `OpDef` names an op, its operands, results, attributes and regions, and gives its semantics in
a few lines simple enough for an interpreter to execute. `irdl_source()` turns the table into an
IRDL module that `fa4mlir.dialect.load()` registers in every context fa4mlir creates.

Conventions (shared by every op below):
* Pipelines are named by a symbol (`pipe`): `fa4.pipeline` declares one; the other pipeline ops
  refer to it by name and carry `stage` and `phase` as explicit i32 values.
* A pipeline of N stages owns 2N mbarriers: `full[s]` (producer -> consumers) and `empty[s]`
  (consumers -> producer). Parity waits follow the mbarrier rule: waiting for parity `p` returns
  once the phase with parity `p` has completed. Producers start at phase 0 and wait `empty` with
  parity `phase ^ 1` (so their first pass over the ring does not block); consumers start at phase
  0 and wait `full` with parity `phase`. Phase flips each time the stage index wraps to 0.
* A TMA descriptor kernel parameter carries the argument attribute `fa4.tma = {name, box,
  elem_bytes}`: the box (innermost first) and element size it is encoded with. A `fa4.tma_load`
  through it must copy that box (fa4-verify-pipelines checks it; LLVM translation drops it).
* IRDL in LLVM 22 cannot declare traits, so region-holding ops (`fa4.warp_roles`, `fa4.role`) end
  their single block with the generic terminator `gpu.yield`.
"""
from __future__ import annotations

from dataclasses import dataclass

# Operand / result constraints by short name -> IRDL constraint op text.
CONSTRAINTS = {
    "i1": "irdl.is i1",
    "i16": "irdl.is i16",
    "i32": "irdl.is i32",
    "i64": "irdl.is i64",
    "ptr": 'irdl.base "!llvm.ptr"',
    "smem_ptr": "irdl.is !llvm.ptr<3>",
    "global_ptr": "irdl.is !llvm.ptr<1>",
    "cluster_ptr": "irdl.is !llvm.ptr<7>",
    "any": "irdl.any",
}
# Attribute kinds -> IRDL base constraint.
ATTR_KINDS = {
    "str": '"#builtin.string"',
    "int": '"#builtin.integer"',
    "bool": '"#builtin.integer"',
    "ints": '"#builtin.dense_array"',
    "strs": '"#builtin.array"',
}


@dataclass(frozen=True)
class OpDef:
    name: str
    doc: str
    operands: tuple = ()            # (name, constraint) ; constraint prefixed "*" = variadic
    results: tuple = ()             # (name, constraint)
    attrs: tuple = ()               # (name, kind)
    optional_attrs: tuple = ()      # (name, kind): set by passes or optional for users
    regions: tuple = ()             # region names


OPS: tuple[OpDef, ...] = (
    # ---- warp roles -----------------------------------------------------------------------------
    OpDef("warp_roles", """Dispatch: its body holds `fa4.role` ops; every warp of the CTA runs exactly the
    role whose warp range holds it (warps in no role idle until the kernel ends).""",
          regions=("body",)),
    OpDef("role", """One warp role: warps [first_warp, first_warp + num_warps) run `body`. `regs` is the
    per-thread register budget that role's warpgroups set with setmaxnreg (0 = leave as is).""",
          attrs=(("name", "str"), ("first_warp", "int"), ("num_warps", "int"), ("regs", "int")),
          regions=("body",)),
    # ---- thread geometry ------------------------------------------------------------------------
    OpDef("thread_idx", "The thread's index in the CTA along `dim` (0, 1, 2).",
          results=(("idx", "i32"),), attrs=(("dim", "int"),)),
    OpDef("block_idx", "The CTA's index in the grid along `dim`.",
          results=(("idx", "i32"),), attrs=(("dim", "int"),)),
    OpDef("grid_dim", "The number of CTAs in the grid along `dim`.",
          results=(("n", "i32"),), attrs=(("dim", "int"),)),
    OpDef("elect_one", "True in exactly one active lane of the calling warp, false elsewhere.",
          results=(("pred", "i1"),)),
    OpDef("cluster_rank", "The CTA's rank in its cluster (0 .. cluster size - 1; in a CTA pair 0 is the leader).",
          results=(("rank", "i32"),)),
    OpDef("peer_address", """The shared::cluster address of `addr`'s offset in the cluster's CTA `rank`
    (mapa.shared::cluster, PTX ISA 9.7.9.26). A plain llvm.store through it (st.shared::cluster) writes
    the peer's shared memory through the generic proxy: the writer hands it over with
    fence(kind = "async_smem_cluster") and a peer_arrive (release, cluster scope) before the peer's
    wgmma (async proxy) reads it.""",
          operands=(("addr", "smem_ptr"), ("rank", "i32")), results=(("remote", "cluster_ptr"),)),
    OpDef("cluster_sync", """Block until every thread of every CTA of the cluster arrives (all threads of the
    CTA call it); orders earlier memory accesses (mbarrier inits included) before later ones of any CTA
    of the cluster."""),
    # ---- memory planning ------------------------------------------------------------------------
    OpDef("smem_buffer", """A named shared-memory buffer of `bytes` bytes aligned to `align`; the result
    is its address. `fa4-plan-smem` assigns `offset`.""",
          results=(("addr", "smem_ptr"),), attrs=(("sym_name", "str"), ("bytes", "int"), ("align", "int")),
          optional_attrs=(("offset", "int"),)),
    OpDef("pipeline", """A staged producer/consumer pipeline of `num_stages` stages. `full[s]` completes after
    `producer_arrivals` arrivals (plus the transaction bytes committed on it); `empty[s]` after
    `consumer_arrivals` arrivals. `fa4-plan-smem` assigns `offset` (2 * num_stages mbarriers).""",
          attrs=(("sym_name", "str"), ("num_stages", "int"), ("producer", "str"), ("consumers", "strs"),
                 ("producer_arrivals", "int"), ("consumer_arrivals", "int")),
          optional_attrs=(("offset", "int"),)),
    OpDef("pipeline_init", """Initialise every mbarrier of every pipeline (one thread) and make the
    initialisation visible to the async proxy. Must precede `fa4.warp_roles`."""),
    # ---- pipeline protocol ----------------------------------------------------------------------
    OpDef("producer_acquire", "Block until `empty[stage]` completed the phase of parity `phase ^ 1`.",
          operands=(("stage", "i32"), ("phase", "i32")), attrs=(("pipe", "str"),)),
    OpDef("producer_commit", """Arrive once on `full[stage]`, first raising its expected transaction count
    by `tx_bytes` (0: a plain arrive). One thread calls it per stage fill. `cta_group` = 2 (a CTA
    pair's ring whose loads are `cta_group` = 2): both CTAs' producers execute it, the leader's (even
    rank) alone arrives, on its own `full[stage]`, expecting `tx_bytes` = the bytes of both CTAs' fills.""",
          operands=(("stage", "i32"),), attrs=(("pipe", "str"), ("tx_bytes", "int")),
          optional_attrs=(("cta_group", "int"),)),
    OpDef("consumer_wait", "Block until `full[stage]` completed the phase of parity `phase`.",
          operands=(("stage", "i32"), ("phase", "i32")), attrs=(("pipe", "str"),)),
    OpDef("consumer_release", "Each calling thread arrives once on `empty[stage]`.",
          operands=(("stage", "i32"),), attrs=(("pipe", "str"),)),
    OpDef("peer_arrive", """Each calling thread arrives once on `full[stage]` (side = "full") or `empty[stage]`
    (side = "empty") of `pipe` in the cluster's CTA `rank` (the same SMEM offset there), with release
    semantics at cluster scope: the hand-off from a CTA of a pair to the pair's MMA issuer. `scope` = "cta"
    (side "empty" only): release at CTA scope (mbarrier.arrive.release.cta.shared::cluster, CUTLASS's
    ClusterBarrier::arrive(cta_id) of a consumer release): a release that hands over no data, only that the
    caller's reads of the stage (its retired wgmmas) are done; no cluster-scope fence (ptxas emits one,
    MEMBAR.ALL.GPU, for the cluster scope).""",
          operands=(("stage", "i32"), ("rank", "i32")), attrs=(("pipe", "str"), ("side", "str")),
          optional_attrs=(("scope", "str"),)),
    OpDef("peer_store_async", """Store `value` (32 bits, or a vector of 2 or 4 x 32 bits; 8-byte elements
    as b64) at `remote`, a peer CTA's shared::cluster address (fa4.peer_address), asynchronously, its
    bytes completing as transactions on `full[stage]` of `pipe` in that CTA (`rank`, the same SMEM offset
    there): st.async.shared::cluster.mbarrier::complete_tx::bytes (PTX ISA 9.7.9.12). The store is
    performed in the generic proxy and is weak; the complete-tx releases it at cluster scope, so the
    receiving CTA's thread that waits on full[stage] sees it (then its own fence.proxy.async before a
    wgmma reads it). That CTA's producer announces the bytes (producer_commit's tx_bytes).""",
          operands=(("value", "any"), ("remote", "cluster_ptr"), ("stage", "i32"), ("rank", "i32")),
          attrs=(("pipe", "str"),)),
    # ---- TMA ------------------------------------------------------------------------------------
    OpDef("tma_load", """Copy the box at `coords` (innermost first) of the tensor that `desc` describes into
    `dst`; the copy's bytes count as transactions on `full[stage]` of `pipe`. `cta_group` = 2 (sm_100a, a
    CTA pair): the bytes count on `full[stage]` of the pair's leader CTA (even rank) instead, whichever
    CTA issues the copy; the data lands in the issuer's `dst` (PTX ISA 9.7.9.25 .cta_group::2). `evict_first`
    true: the copy carries .L2::cache_hint with a createpolicy.fractional.L2::evict_first policy of fraction 1.0
    (PTX ISA 9.7.9.25, 9.7.9.18: the source's lines are the first L2 evicts; no effect on the bytes copied).""",
          operands=(("desc", "ptr"), ("dst", "smem_ptr"), ("stage", "i32"), ("coords", "*i32")),
          attrs=(("pipe", "str"), ("box", "ints"), ("elem_bytes", "int")),
          optional_attrs=(("cta_group", "int"), ("evict_first", "bool"))),
    OpDef("tma_gather4", """sm_100a: copy four rows of the 2-D tensor that `desc` describes, rows `row0` ..
    `row3` (any order, repeats allowed), columns [`col`, `col` + box[0]), into `dst` as one 4-row box
    (row i at `dst` + i * box[0] * elem_bytes, under the descriptor's swizzle); the copy's bytes
    (4 * box[0] * elem_bytes) count as transactions on `full[stage]` of `pipe`. `box` is the
    descriptor's box, [columns, 1]: PTX ISA 9.7.9.25 cp.async.bulk.tensor with .tile::gather4
    (PTX ISA 8.6, sm_100 and later; `.2d` only) and 5.5.3.4 "tile::scatter4 and tile::gather4 modes" (2-D
    tensors only, the bounding box 1 row high, four row coordinates and one column coordinate;
    no interleaved layout; the other tile-mode rules, out-of-bounds zero fill among them, hold).
    `cta_group` = 2: as for `tma_load`, the bytes count on the pair leader's `full[stage]`.""",
          operands=(("desc", "ptr"), ("dst", "smem_ptr"), ("stage", "i32"), ("col", "i32"), ("row0", "i32"),
                    ("row1", "i32"), ("row2", "i32"), ("row3", "i32")),
          attrs=(("pipe", "str"), ("box", "ints"), ("elem_bytes", "int")), optional_attrs=(("cta_group", "int"),)),
    # ---- per-thread async copies (sm_80+) -------------------------------------------------------
    OpDef("cp_async", """Copy 16 bytes from global `src` to `dst` (16-byte aligned both) asynchronously,
    through L2 only (cp.async.cg); where `valid` is false nothing is read and `dst` gets 16 zero
    bytes. Completion is tracked per thread: see `cp_async_arrive`. Optional hints (PTX ISA 9.7.9.3,
    no effect on the bytes copied): `l2_prefetch` 64, 128 or 256 (.L2::64B / 128B / 256B: L2 may fetch
    that much around the source), `evict_last` true (.L2::cache_hint with a createpolicy.fractional
    .L2::evict_last policy of fraction 1.0: the source's lines are the last L2 evicts).""",
          operands=(("src", "ptr"), ("dst", "smem_ptr"), ("valid", "i1")),
          optional_attrs=(("l2_prefetch", "int"), ("evict_last", "bool"))),
    OpDef("ld_global_nc", """Load `value` (i32 or f32, or a vector of 2 or 4 of one of them) from global `addr`
    (aligned to the value's size) through the non-coherent read-only path, as ld.global.nc (PTX ISA 9.7.9.9):
    the memory must not be written while the kernel runs (a kernel's read-only inputs). Optional hints (no
    effect on the value): `l1_evict` "evict_normal", "evict_unchanged", "evict_first", "evict_last" or
    "no_allocate" (.L1::<priority>: the loaded lines' L1 eviction priority), `l2_prefetch` 64, 128 or 256
    (.L2::64B / 128B / 256B: L2 may fetch that much around the address).""",
          operands=(("addr", "global_ptr"),), results=(("value", "any"),),
          optional_attrs=(("l1_evict", "str"), ("l2_prefetch", "int"))),
    OpDef("cp_async_arrive", """Each calling thread's earlier `cp_async` copies, once they have landed,
    arrive on `full[stage]` of `pipe`; the barrier's pending count rises by one at once (so the
    phase cannot complete before those copies land) and falls when they do: a net-zero arrival,
    not counted in `producer_arrivals`. Call it before the same thread's `producer_commit`.""",
          operands=(("stage", "i32"),), attrs=(("pipe", "str"),)),
    OpDef("cp_async_wait", """Close the calling thread's `cp_async` copies issued since its last
    `cp_async_wait` / `cp_async_commit` (or its start) into a group, then wait until at most `pending` of its groups have
    not landed (PTX ISA 9.7.9.3: cp.async.commit_group; cp.async.wait_group N). The landed copies are
    the thread's own generic-proxy writes: a wgmma (async proxy) reads them only after a
    fence.proxy.async (the thread's own before it hands them over, or the reader's after it acquires
    them). The producer-side alternative to `cp_async_arrive`.""",
          attrs=(("pending", "int"),)),
    OpDef("cp_async_commit", """Close the calling thread's `cp_async` copies issued since its last
    `cp_async_commit` / `cp_async_wait` into a group, without waiting (PTX ISA 9.7.9.3 cp.async.commit_group):
    a later `cp_async_wait` counts it."""),
    OpDef("tma_store", """Copy `src` to the box at `coords` of the tensor `desc` describes (bulk async;
    out-of-bounds elements are not written).""",
          operands=(("desc", "ptr"), ("src", "smem_ptr"), ("coords", "*i32")), attrs=(("box", "ints"),)),
    OpDef("tma_store_wait", "Commit the thread's outstanding TMA stores and wait until at most `pending` remain unread.",
          attrs=(("pending", "int"),)),
    OpDef("tma_prefetch", "Prefetch the tensor map `desc` into the descriptor cache.", operands=(("desc", "ptr"),)),
    OpDef("tma_prefetch_box", """Prefetch the box at `coords` (innermost first) of the tensor that `desc`
    describes into L2 (no shared memory written, no barrier: a hint; PTX ISA 9.7.9.26
    cp.async.bulk.prefetch.tensor).""", operands=(("desc", "ptr"), ("coords", "*i32"))),
    # ---- MMA ------------------------------------------------------------------------------------
    OpDef("smem_desc", """The matrix descriptor of an SMEM tile at `addr` for the tensor cores, K-major,
    with `swizzle` bytes (128, 64, 32, 0); encoded per arch by the mma lowering pass.""",
          operands=(("addr", "smem_ptr"),), results=(("desc", "i64"),),
          attrs=(("swizzle", "int"), ("lbo", "int"), ("sbo", "int"))),
    OpDef("mma", """D = A*B (+ D if `accumulate`), tile m x n x k, operand dtype `ab_dtype`, accumulator
    `acc_dtype`. A: smem descriptor (i64), registers, or a TMEM address (`a_source`); B: smem
    descriptor, K-major unless `b_major` = "mn" (B's n index contiguous, as V is in P.V); an A smem
    descriptor likewise unless `a_major` = "mn" (sm_90a, 16-bit: A's m index contiguous). On sm_90a
    the accumulator is a register vector (operand `acc`, result the new one); on sm_100a it is a
    TMEM address (operand `acc`, no result). A from registers (sm_90a, `a_source` = "regs") is a
    vector<4xi32> of packed pairs laid out as the m64k16 A fragment (the same rows and columns a
    thread holds of an m64 accumulator). `cta_group` = 2 (sm_100a): the MMA of a CTA pair, issued by
    the pair's even CTA (note "CTA pair" of passes/lower_mma_sm100.py): rows m/2 of A and D and
    columns n/2 of B in each CTA, at the same SMEM/TMEM addresses.""",
          operands=(("a", "any"), ("b", "i64"), ("accumulate", "i1"), ("acc", "*any")),
          results=(("d", "*any"),),
          attrs=(("m", "int"), ("n", "int"), ("k", "int"), ("a_source", "str"), ("ab_dtype", "str"),
                 ("acc_dtype", "str")),
          optional_attrs=(("b_major", "str"), ("cta_group", "int"), ("a_major", "str"))),
    OpDef("mma_fence", "Order register/SMEM writes before the following asynchronous MMAs (sm_90a warpgroup fence)."),
    OpDef("mma_commit_group", "Close the group of MMAs issued so far by this warpgroup (sm_90a)."),
    OpDef("mma_wait_group", "Wait until at most `pending` MMA groups of this warpgroup are in flight (sm_90a).",
          operands=(("acc", "*any"),), results=(("acc_out", "*any"),), attrs=(("pending", "int"),)),
    OpDef("mma_commit", """Arrive once on `full[stage]` (side = "full") or `empty[stage]` (side = "empty")
    of `pipe` when all MMAs issued so far by this thread complete (sm_100a tcgen05.commit). With
    `cta_group` = 2 it tracks the pair's MMAs; with `multicast` (a mask of cluster CTA ranks) it arrives
    on that barrier (same SMEM offset) in each CTA of the mask instead of this CTA's.""",
          operands=(("stage", "i32"),), attrs=(("pipe", "str"), ("side", "str")),
          optional_attrs=(("cta_group", "int"), ("multicast", "int"))),
    # ---- tensor memory --------------------------------------------------------------------------
    OpDef("tmem_alloc", """Allocate `cols` TMEM columns (one warp) and write their base address to
    `dst` in SMEM. `fa4-plan-tmem` checks the column plan. `cta_group` = 2: one warp of each CTA of
    a pair allocates, the same columns in both CTAs' TMEM.""",
          operands=(("dst", "smem_ptr"),), attrs=(("cols", "int"),), optional_attrs=(("cta_group", "int"),)),
    OpDef("tmem_dealloc", "Free the `cols` columns at `addr` (the warp that allocated them; `cta_group` as allocated).",
          operands=(("addr", "i32"),), attrs=(("cols", "int"),), optional_attrs=(("cta_group", "int"),)),
    OpDef("tmem_relinquish", "Give up the right to allocate TMEM for the rest of the CTA's (`cta_group` 2: pair's) life.",
          optional_attrs=(("cta_group", "int"),)),
    OpDef("tmem_load", """Each thread of the warp reads `num` 32-bit columns starting at `addr` from its
    lane (shape 32x32b); result: vector of `num` i32.""",
          operands=(("addr", "i32"),), results=(("value", "any"),), attrs=(("num", "int"),)),
    OpDef("tmem_store", "Each thread writes `value` (vector of i32) to its lane's columns at `addr` (32x32b).",
          operands=(("addr", "i32"), ("value", "any"))),
    OpDef("tmem_copy", """One thread copies from shared memory (the matrix that the tcgen05 shared-memory
    descriptor `desc` describes) to TMEM at `addr` (PTX ISA tcgen05.cp), asynchronously, in issue order
    with the thread's MMAs: a later fa4.mma may read it, and an mma_commit tracks its completion. `shape`:
    "128x256b", "4x256b", "128x128b", "64x128b" (with `multicast` "warpx2::02_13" or "warpx2::01_23") or
    "32x128b" (with "warpx4"); `cta_group` = 2: the pair's form (FlashMLA's Q into TMEM).""",
          operands=(("addr", "i32"), ("desc", "i64")), attrs=(("shape", "str"),),
          optional_attrs=(("multicast", "str"), ("cta_group", "int"))),
    OpDef("tmem_wait", "Wait for this thread's outstanding TMEM loads (`kind` = \"ld\") or stores (\"st\").",
          attrs=(("kind", "str"),)),
    # ---- barriers and fences --------------------------------------------------------------------
    OpDef("named_barrier", """Block until `num_threads` threads have reached named barrier `id` (1..15). With a
    `select` operand (a warp-uniform i32 in [0, span)) the barrier is `id + select`: one op, no branch,
    for per-warpgroup barriers (ids id .. id + span - 1 must lie in 1..15).""",
          operands=(("select", "*i32"),), attrs=(("id", "int"), ("num_threads", "int")),
          optional_attrs=(("span", "int"),)),
    OpDef("fence", """A memory fence: `kind` is "async_smem" (generic-proxy SMEM writes visible to TMA and
    tensor cores), "async_smem_cluster" (the same for shared::cluster writes, a peer CTA's SMEM included:
    fence.proxy.async.shared::cluster), "tcgen05_before" or "tcgen05_after" (order tcgen05 ops around a thread sync).""",
          attrs=(("kind", "str"),)),
    OpDef("named_barrier_arrive", """Arrive on named barrier `id` (1..15) without waiting; the barrier completes
    once `num_threads` threads arrived or synced on it (the producer side of a hand-off). `select` and
    `span` as for `named_barrier`.""",
          operands=(("select", "*i32"),), attrs=(("id", "int"), ("num_threads", "int")),
          optional_attrs=(("span", "int"),)),
    OpDef("sync_threads", "Block until every thread of the CTA arrives."),
    # ---- warp data exchange ---------------------------------------------------------------------
    OpDef("shuffle_xor", """Each lane of the (fully active) warp gets `value` (32-bit) from lane `lane ^ offset`.""",
          operands=(("value", "any"),), results=(("out", "any"),), attrs=(("offset", "int"),)),
    OpDef("shuffle_idx", """Each lane of the (fully active) warp gets `value` (32-bit) from lane `lane` (0..31):
    a broadcast, which ptxas knows is warp-uniform (values derived from it can live in uniform registers).""",
          operands=(("value", "any"),), results=(("out", "any"),), attrs=(("lane", "int"),)),
    OpDef("vote_any", """True in every lane of the (fully active) warp when `pred` is true in at least one
    lane: a warp-uniform condition, e.g. for branches around `.sync.aligned` instructions.""",
          operands=(("pred", "i1"),), results=(("any", "i1"),)),
    OpDef("scale_if_uniform", """`value * scale` (element-wise, f32 vectors of one length) when `cond` holds, else
    `value`. `cond` must be the same in every lane of the warp (e.g. from `vote_any`): the multiplies
    sit behind a non-divergent branch (`bra.uni`), which, unlike a branch ptxas must assume divergent,
    lets the code around it keep values in uniform registers.""",
          operands=(("cond", "i1"), ("value", "any"), ("scale", "any")), results=(("out", "any"),)),
    # ---- conversions ----------------------------------------------------------------------------
    OpDef("cvt_e4m3x2", """Two FP8 e4m3 values (the low and high byte of `x`) as two f16 (the low and
    high half of the result): exact, e4m3 is a subset of f16 (NaN stays NaN).""",
          operands=(("x", "i16"),), results=(("out", "i32"),)),
    OpDef("tanh_f16x2", """tanh of two f16 (the low and high half of `x`), two f16 in the same halves of the
    result: the SFU's tanh.approx.f16x2 (sm_90a runs it as two MUFU.TANH.F16).""",
          operands=(("x", "i32"),), results=(("out", "i32"),)),
    OpDef("prmt", """Byte permute (PTX prmt.b32, default mode): byte k of the result is byte `selector`
    nibble k & 7 of the eight bytes {b, a} (a: bytes 0-3, b: bytes 4-7), or, when that nibble's bit 3
    is set, that byte's sign bit replicated over all 8 bits; `selector` in [0, 0xFFFF].""",
          operands=(("a", "i32"), ("b", "i32")), results=(("out", "i32"),), attrs=(("selector", "int"),)),
    OpDef("trap_if", "Abort the kernel when `cond` is true (debug builds).", operands=(("cond", "i1"),)),
)

OPS_BY_NAME = {op.name: op for op in OPS}


def irdl_source() -> str:
    """The IRDL text that defines the fa4 dialect."""
    lines = ["irdl.dialect @fa4 {"]
    for op in OPS:
        lines.append(f"  irdl.operation @{op.name} {{")
        counter = 0

        def constraint(text):
            nonlocal counter
            counter += 1
            lines.append(f"    %c{counter} = {text}")
            return f"%c{counter}"

        for group, entries in (("operands", op.operands), ("results", op.results)):
            parts = []
            for name, cons in entries:
                variadic = cons.startswith("*")
                ref = constraint(CONSTRAINTS[cons.lstrip("*")])
                parts.append(f"{name}: {'variadic ' if variadic else ''}{ref}")
            if parts:
                lines.append(f"    irdl.{group}({', '.join(parts)})")
        if op.attrs:
            parts = [f'"{name}" = {constraint("irdl.base " + ATTR_KINDS[kind])}' for name, kind in op.attrs]
            lines.append(f"    irdl.attributes {{{', '.join(parts)}}}")
        if op.regions:
            refs = [f"{name}: {constraint('irdl.region')}" for name in op.regions]
            lines.append(f"    irdl.regions({', '.join(refs)})")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines)
