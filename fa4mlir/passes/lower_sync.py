"""fa4-lower-sync: thread geometry, elect, fences, named barriers, CTA sync, debug traps and warp
exchange (shuffle_xor -> shfl.sync.bfly, shuffle_idx -> shfl.sync.idx, vote_any -> vote.sync.any) -> nvvm;
cluster_rank -> %cluster_ctarank, peer_address -> mapa.shared::cluster, cluster_sync -> barrier.cluster.arrive.aligned + barrier.cluster.wait.aligned
(PTX ISA 9.7.13.4, release/acquire by default: orders the mbarrier inits of a CTA pair before the peer's
remote arrivals); scale_if_uniform -> multiplies behind a `bra.uni` (inline PTX: LLVM's NVPTX backend emits conditional
branches without .uni, and ptxas then treats the code around them as divergent)."""
from __future__ import annotations

from .._mlir import arith, ir, llvm, nvvm, scf
from ._util import PassError, attr, check_none_left, f32_struct_to_vec, f32_struct_type, i32, i64, ops_named, replace

NAME = "fa4-lower-sync"
_I32 = lambda: ir.IntegerType.get_signless(32)  # noqa: E731
_SREG = {
    "fa4.thread_idx": (nvvm.read_ptx_sreg_tid_x, nvvm.read_ptx_sreg_tid_y, nvvm.read_ptx_sreg_tid_z),
    "fa4.block_idx": (nvvm.read_ptx_sreg_ctaid_x, nvvm.read_ptx_sreg_ctaid_y, nvvm.read_ptx_sreg_ctaid_z),
    "fa4.grid_dim": (nvvm.read_ptx_sreg_nctaid_x, nvvm.read_ptx_sreg_nctaid_y, nvvm.read_ptx_sreg_nctaid_z),
}
_SHUFFLES = {"fa4.shuffle_xor": ("offset", 1, "bfly"), "fa4.shuffle_idx": ("lane", 0, "idx")}
OPS = ("fa4.thread_idx", "fa4.block_idx", "fa4.grid_dim", "fa4.elect_one", "fa4.fence", "fa4.named_barrier",
       "fa4.named_barrier_arrive", "fa4.sync_threads", "fa4.trap_if", "fa4.shuffle_xor", "fa4.shuffle_idx",
       "fa4.vote_any", "fa4.scale_if_uniform", "fa4.cluster_rank", "fa4.cluster_sync",
       "fa4.peer_address")


def _lower(op: ir.Operation) -> None:
    name = op.name
    if name in _SREG:
        dim = attr(op, "dim")
        if dim not in (0, 1, 2):
            raise PassError(f"{NAME}: {name} dim must be 0, 1 or 2, got {dim}", op.location)
        replace(op, [_SREG[name][dim](_I32())])
    elif name == "fa4.elect_one":
        replace(op, [nvvm.elect_sync(ir.IntegerType.get_signless(1))])
    elif name == "fa4.fence":
        kind = attr(op, "kind")
        if kind in ("async_smem", "async_smem_cluster"):
            space = "cluster" if kind == "async_smem_cluster" else "cta"
            nvvm.fence_proxy(ir.Attribute.parse("#nvvm.proxy_kind<async.shared>"),
                             space=ir.Attribute.parse(f"#nvvm.shared_space<{space}>"))
        elif kind in ("tcgen05_before", "tcgen05_after"):
            nvvm.tcgen05_fence(ir.Attribute.parse(f"#nvvm.tcgen05_fence<{kind.split('_')[1]}>"))
        else:
            raise PassError(f"{NAME}: unknown fence kind {kind!r}; expected async_smem, async_smem_cluster, "
                            "tcgen05_before or "
                            "tcgen05_after", op.location)
        op.erase()
    elif name in ("fa4.named_barrier", "fa4.named_barrier_arrive"):
        bid, n = attr(op, "id"), attr(op, "num_threads")
        select = list(op.operands)
        span = attr(op, "span") if "span" in op.attributes else None
        if len(select) > 1 or (span is None) != (not select) or (span is not None and span < 1):
            raise PassError(f"{NAME}: {name[4:]} takes a `select` operand exactly when it has a `span` >= 1 "
                            f"(got {len(select)} operands, span={span})", op.location)
        last = bid + (span or 1) - 1
        if not 1 <= bid <= last <= 15 or n % 32:
            ids = f"{bid}..{last} (span {span})" if span else f"{bid}"
            raise PassError(f"{NAME}: named barrier id must be 1..15 (0 is the CTA barrier) and its thread "
                            f"count a multiple of 32; got id={ids}, num_threads={n}", op.location)
        barrier = arith.addi(i32(bid), select[0]) if select else i32(bid)
        if name == "fa4.named_barrier":
            nvvm.barrier(None, barrier_id=barrier, number_of_threads=i32(n))
        else:
            nvvm.barrier_arrive(i32(n), barrier_id=barrier)
        op.erase()
    elif name in _SHUFFLES:
        # full warp (mask -1, clamp 31): xor takes a lane offset 1..31, idx a source lane 0..31
        field, lo, kind = _SHUFFLES[name]
        value, n = op.operands[0], attr(op, field)
        if not lo <= n <= 31 or value.type not in (ir.F32Type.get(), _I32()):
            raise PassError(f"{NAME}: {name[4:]} takes an f32 or i32 and {'an' if field == 'offset' else 'a'} "
                            f"{field} in {lo}..31; got {value.type}, {field} {n}", op.location)
        out = nvvm.shfl_sync(value.type, i32(-1), value, i32(n), i32(0x1F),
                             ir.Attribute.parse(f"#nvvm<shfl_kind {kind}>"))
        replace(op, [out])
    elif name == "fa4.vote_any":
        i1 = ir.IntegerType.get_signless(1)
        replace(op, [nvvm.vote_sync(i1, i32(-1), op.operands[0], nvvm.VoteSyncKind.any)])
    elif name == "fa4.scale_if_uniform":
        _scale_if_uniform(op)
    elif name == "fa4.cluster_rank":
        replace(op, [nvvm.read_ptx_sreg_cluster_ctarank(_I32())])
    elif name == "fa4.peer_address":
        replace(op, [nvvm.mapa(ir.Type.parse("!llvm.ptr<7>"), op.operands[0], op.operands[1])])
    elif name == "fa4.cluster_sync":
        nvvm.cluster_arrive(aligned=True)
        nvvm.cluster_wait(aligned=True)
        op.erase()
    elif name == "fa4.sync_threads":
        nvvm.barrier0()
        op.erase()
    elif name == "fa4.trap_if":
        ifop = scf.IfOp(op.operands[0], [], has_else=False)
        with ir.InsertionPoint(ifop.then_block):
            llvm.intr_trap() if hasattr(llvm, "intr_trap") else llvm.call_intrinsic(None, "llvm.trap", [])
            scf.YieldOp([])
        op.erase()


def _scale_if_uniform(op: ir.Operation) -> None:
    cond, value, scale = op.operands
    vt = value.type
    if (not isinstance(vt, ir.VectorType) or ir.VectorType(vt).element_type != ir.F32Type.get()
            or scale.type != vt or ir.VectorType(vt).rank != 1):
        raise PassError(f"{NAME}: scale_if_uniform takes two f32 vectors of one length, got {vt} and "
                        f"{scale.type}", op.location)
    n = ir.VectorType(vt).shape[0]
    elems = [llvm.extractelement(v, i64(i)) for v in (value, scale) for i in range(n)]
    flag = arith.extui(_I32(), cond)
    # $0..$n-1: the results, tied to the values ($n..$2n-1); $2n..$3n-1: the scales; $3n: the condition.
    # The braces scope the predicate and the label to this instance.
    body = [f"mul.f32 ${i}, ${i}, ${2 * n + i};" for i in range(n)]
    text = "\n".join(["{", ".reg .pred skip;", f"setp.eq.u32 skip, ${3 * n}, 0;", "@skip bra.uni SCALE_DONE;",
                      *body, "SCALE_DONE:", "}"])
    constraints = ",".join(["=f"] * n + [str(i) for i in range(n)] + ["f"] * n + ["r"])
    res = llvm.inline_asm(f32_struct_type(n), [*elems, flag], text, constraints, has_side_effects=True)
    replace(op, [f32_struct_to_vec(res, n)])


def run(module: ir.Operation) -> None:
    for op in ops_named(module, *OPS):
        with ir.InsertionPoint(op), op.location:
            _lower(op)
    check_none_left(module, OPS, NAME)
