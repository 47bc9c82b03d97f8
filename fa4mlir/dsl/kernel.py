"""KernelBuilder: kernel parameters, SMEM and pipeline declarations, roles, control flow, memory.

    kb = KernelBuilder("gemm", arch="sm_90a", block=(384, 1, 1))
    a_desc = kb.param_tma("a_desc", dtype="bf16", box=(64, 128), swizzle="128B")
    c = kb.param_ptr("c")
    with kb.body():
        ...                          # fa4 / arith / scf ops through kb and Value operators
    kernel_ir = kb.finish()
"""
from __future__ import annotations

import contextlib

from .._mlir import ir, llvm
from . import tree
from .core import (ELEM_BYTES, KernelIR, Pipeline, Value, _For, _If, _ir, _While, const,
                  mlir_type, source_loc)
from ..dialect import builders as fa4
from ..dialect import new_context
from ..runtime import ParamSpec, TmaSpec

ARCH_FEATURES = {"sm_90a": "+ptx80", "sm_100a": "+ptx86"}
_PARAM_TYPES = {
    "ptr": ("!llvm.ptr<1>", "{llvm.noalias}"),
    "i32": ("i32", ""), "i64": ("i64", ""), "f32": ("f32", ""),
    "tma": ("!llvm.ptr", "{llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant, llvm.align = 64 : i64}"),
}


def _param_attrs(spec: ParamSpec) -> str:
    """A parameter's argument attributes. A TMA descriptor also carries `fa4.tma` = {name, box,
    elem_bytes}: the box it is encoded with, which fa4-verify-pipelines checks every tma_load's box
    against (the LLVM translation drops it, so the PTX is unchanged)."""
    text = _PARAM_TYPES[spec.kind][1]
    if spec.tma is None:
        return text
    box = ", ".join(str(int(b)) for b in spec.tma.box)
    tma = f'fa4.tma = {{name = "{spec.name}", box = array<i64: {box}>, elem_bytes = {ELEM_BYTES[spec.tma.dtype]} : i64}}'
    return "{" + tma + ", " + text[1:]


class Param(Value):
    """A kernel parameter; its SSA value exists once `kb.body()` has opened."""

    def __init__(self, spec: ParamSpec):
        self.spec = spec
        self._v = None

    @property
    def v(self):
        if self._v is None:
            raise RuntimeError(f"parameter {self.spec.name!r} used outside `with kb.body()`")
        return self._v


class KernelBuilder:
    def __init__(self, name: str, *, arch: str, block: tuple, cluster: tuple = (1, 1, 1),
                 config: dict | None = None, min_ctas_per_sm: int = 1):
        if arch not in ARCH_FEATURES:
            raise ValueError(f"arch {arch!r} is not supported; expected one of {sorted(ARCH_FEATURES)}")
        self.name, self.arch = name, arch
        self.block, self.cluster = tuple(block), tuple(cluster)
        self.min_ctas_per_sm = int(min_ctas_per_sm)   # nvvm.minctasm: ptxas fits the registers to this many CTAs per SM
        self.config = dict(config or {})
        self.ctx = new_context()
        with self.ctx:
            self.loc = str(source_loc())  # where the kernel was asked for: the function's location
        self.params: list[Param] = []
        self.module = None
        self.func = None

    # ---- parameters -----------------------------------------------------------------------------
    def _param(self, name, kind, tma=None) -> Param:
        if self.module is not None:
            raise RuntimeError("declare every parameter before `with kb.body()`")
        p = Param(ParamSpec(name=name, kind=kind, tma=tma))
        self.params.append(p)
        return p

    def param_ptr(self, name): return self._param(name, "ptr")
    def param_i32(self, name): return self._param(name, "i32")
    def param_i64(self, name): return self._param(name, "i64")
    def param_f32(self, name): return self._param(name, "f32")

    def param_tma(self, name, *, dtype: str, box: tuple, swizzle: str = "128B") -> Param:
        """A TMA descriptor parameter (128-byte grid constant); `box` innermost dimension first."""
        return self._param(name, "tma", TmaSpec(dtype=dtype, box=tuple(box), swizzle=swizzle))

    def params_from(self, table, *, tma: dict) -> dict:
        """Declare a launch contract's parameters in its order: `table` is (name, kind) pairs (a
        kernel config's LAUNCH_PARAMS), `tma` each TMA parameter's descriptor spec as param_tma's
        keywords by name. Returns the Params by name; every TMA spec must be used."""
        unused = set(tma) - {name for name, kind in table if kind == "tma"}
        if unused:
            raise ValueError(f"TMA specs {sorted(unused)} name no tma parameter of the contract")
        out = {}
        for name, kind in table:
            if kind == "tma":
                if name not in tma:
                    raise ValueError(f"tma parameter {name!r} of the contract has no descriptor spec")
                out[name] = self.param_tma(name, **tma[name])
            else:
                out[name] = self._param(name, kind)
        return out

    # ---- body -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def body(self):
        """Open the kernel function; ops built inside go into its body."""
        args = ", ".join(f"%a{i}: {_PARAM_TYPES[p.spec.kind][0]} {_param_attrs(p.spec)}"
                         for i, p in enumerate(self.params))
        threads = ", ".join(str(x) for x in self.block)
        text = (f'module attributes {{gpu.container_module}} {{\n'
                f'  gpu.module @fa4_kernels [#nvvm.target<chip = "{self.arch}", features = "{ARCH_FEATURES[self.arch]}">] {{\n'
                f'    llvm.func @{self.name}({args}) attributes {{nvvm.kernel, '
                f'nvvm.maxntid = array<i32: {threads}>, nvvm.minctasm = {self.min_ctas_per_sm} : i32}} {{\n'
                f'      llvm.return\n    }} {self.loc}\n  }}\n}}')
        with self.ctx, source_loc():
            self.module = ir.Module.parse(text)
            gmod = self.module.body.operations[0]
            self.func = gmod.regions[0].blocks[0].operations[0]
            entry = self.func.regions[0].blocks[0]
            for p, arg in zip(self.params, entry.arguments):
                p._v = arg
            with ir.InsertionPoint(entry.operations[0]):
                yield self

    def finish(self) -> KernelIR:
        with self.ctx:
            if not self.module.operation.verify():
                raise RuntimeError(f"kernel {self.name}: the built IR does not verify")
        return KernelIR(name=self.name, arch=self.arch, module=self.module,
                        params=tuple(p.spec for p in self.params), block=self.block,
                        cluster=self.cluster, config=self.config)

    # ---- declarations ---------------------------------------------------------------------------
    def smem(self, name: str, num_bytes: int, align: int = 1024) -> Value:
        """Declare a shared-memory buffer; `fa4-plan-smem` places it."""
        return Value(fa4.smem_buffer(sym_name=name, bytes=num_bytes, align=align))

    def pipeline(self, name: str, *, num_stages: int, producer: str, consumers: list[str],
                 producer_arrivals: int = 1, consumer_arrivals: int = 1) -> Pipeline:
        fa4.pipeline(sym_name=name, num_stages=num_stages, producer=producer,
                     consumers=list(consumers), producer_arrivals=producer_arrivals,
                     consumer_arrivals=consumer_arrivals)
        return Pipeline(name, num_stages)

    def pipeline_init(self):
        fa4.pipeline_init()

    # ---- roles ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _region_op(self, build, **attrs):
        op = build(**attrs)
        block = op.regions[0].blocks.append()
        with ir.InsertionPoint(block):
            yield op
            ir.Operation.create("gpu.yield", loc=source_loc())

    def warp_roles(self):
        return self._region_op(fa4.warp_roles)

    def role(self, name: str, *, first_warp: int, num_warps: int, regs: int = 0):
        return self._region_op(fa4.role, name=name, first_warp=first_warp, num_warps=num_warps, regs=regs)

    # ---- geometry -------------------------------------------------------------------------------
    def thread_idx(self, dim: int = 0) -> Value:
        return Value(fa4.thread_idx(dim=dim))

    def block_idx(self, dim: int = 0) -> Value:
        return Value(fa4.block_idx(dim=dim))

    def grid_dim(self, dim: int = 0) -> Value:
        return Value(fa4.grid_dim(dim=dim))

    def elect_one(self) -> Value:
        return Value(fa4.elect_one())

    def cluster_rank(self) -> Value:
        """This CTA's rank in its cluster (in a CTA pair, 0 is the MMA-issuing leader)."""
        return Value(fa4.cluster_rank())

    def peer_address(self, addr: Value, rank) -> Value:
        """`addr`'s offset in the shared memory of the cluster's CTA `rank` (a !llvm.ptr<7>, mapa):
        kb.gep and kb.store through it write the peer's SMEM (st.shared::cluster)."""
        return Value(fa4.peer_address(addr.v, rank.v if isinstance(rank, Value) else const(int(rank)).v))

    # ---- control flow ---------------------------------------------------------------------------
    def for_(self, lo, hi, step=1, carry=()) -> _For:
        """`with kb.for_(lo, hi, step, carry=state) as (i, state): ...; loop.yield_(next_state)`;
        then `loop.results` (state: a tree of values, dsl/tree.py)."""
        from .._mlir import scf
        lo, hi, step = (v if isinstance(v, Value) else const(v) for v in (lo, hi, step))
        init, shape = tree.flatten(carry)
        op = scf.ForOp(lo.v, hi.v, step.v, _ir(init), loc=source_loc())
        return _For(op, shape)

    def while_(self, carry) -> _While:
        """`loop = kb.while_((a, b))`; `with loop.before() as (a, b): loop.condition(a.lt(n), (a, b))`;
        `with loop.body() as (a, b): ...; loop.yield_((a2, b2))`; then `loop.results` (the carry:
        a tree of values, dsl/tree.py)."""
        return _While(carry)

    def if_(self, cond: Value, results=()) -> _If:
        """`br = kb.if_(cond, results=types)`; `with br.then_(): br.yield_(a)`; `with br.else_():
        br.yield_(b)`; then `br.results`. `types`: a tree of types (or of values, for theirs)."""
        return _If(cond, results)

    # ---- memory ---------------------------------------------------------------------------------
    def gep(self, ptr: Value, index, elem: str) -> Value:
        """`ptr + index` elements of type `elem` (same address space)."""
        index = index if isinstance(index, Value) else const(index)
        dyn = -2147483648  # kDynamicIndex: the index is the next dynamic operand
        return Value(llvm.getelementptr(ptr.type, ptr.v, [index.v], [dyn], mlir_type(elem),
                                        llvm.GEPNoWrapFlags.none, loc=source_loc()))

    def load(self, ptr: Value, t, align: int | None = None) -> Value:
        return Value(llvm.load(mlir_type(t), ptr.v, alignment=align, loc=source_loc()))

    def load_global_nc(self, ptr: Value, t, *, l1_evict: str | None = None, l2_prefetch: int | None = None) -> Value:
        """`load` from global memory the kernel never writes, as fa4.ld_global_nc with its cache hints
        (`l1_evict`: the .L1 eviction priority, e.g. "evict_last"; `l2_prefetch`: 64, 128 or 256 bytes); `t`
        i32 or f32, or a vector of 2 or 4 of them, `ptr` aligned to its size."""
        hints = ({"l1_evict": l1_evict} if l1_evict else {}) | ({"l2_prefetch": l2_prefetch} if l2_prefetch else {})
        return Value(fa4.ld_global_nc(ptr.v, result_types=[mlir_type(t)], **hints))

    def store(self, value: Value, ptr: Value, align: int | None = None):
        llvm.store(value.v, ptr.v, alignment=align, loc=source_loc())

    # ---- hoisting ----------------------------------------------------------------------------------
    def mark(self):
        """A point of the IR being built (a constant op emitted here, dropped by canonicalization if
        nothing is emitted before it): `before(mark)` emits ops there later, e.g. a load of a
        loop-invariant value found while building the loop body."""
        return const(0).v.owner

    @contextlib.contextmanager
    def before(self, mark):
        """Emit the ops of the block right before `mark` (kb.mark())."""
        with ir.InsertionPoint(mark):
            yield

    # ---- fences and barriers --------------------------------------------------------------------
    def fence(self, kind: str):
        fa4.fence(kind=kind)

    def named_barrier(self, barrier_id: int, num_threads: int, select: Value | None = None, span: int = 1):
        """Wait on named barrier `barrier_id`, or `barrier_id + select` (select: a warp-uniform i32 in
        [0, span)), e.g. one barrier per warpgroup without branching on the warpgroup index."""
        self._barrier(fa4.named_barrier, barrier_id, num_threads, select, span)

    def named_barrier_arrive(self, barrier_id: int, num_threads: int, select: Value | None = None,
                             span: int = 1):
        """Arrive (no wait) on named barrier `barrier_id` (+ `select`, as named_barrier)."""
        self._barrier(fa4.named_barrier_arrive, barrier_id, num_threads, select, span)

    @staticmethod
    def _barrier(build, barrier_id: int, num_threads: int, select: Value | None, span: int):
        if select is None:
            build([], id=barrier_id, num_threads=num_threads)
        else:
            build([select], id=barrier_id, num_threads=num_threads, span=span)

    # ---- warp exchange --------------------------------------------------------------------------
    def shuffle_xor(self, value: Value, offset: int) -> Value:
        """`value` of lane `lane ^ offset` (32-bit scalars; the whole warp must be active)."""
        return Value(fa4.shuffle_xor(value, result_types=[value.type], offset=offset))

    def shuffle_idx(self, value: Value, lane: int) -> Value:
        """`value` of lane `lane` in every lane (32-bit scalars; the whole warp must be active)."""
        return Value(fa4.shuffle_idx(value, result_types=[value.type], lane=lane))

    def warp_uniform(self, value: Value) -> Value:
        """`value`, known to be equal across the warp, broadcast from lane 0 so that ptxas knows it
        too: what is computed from it (e.g. wgmma descriptors) can then stay in uniform registers
        instead of being moved there (R2UR) before every use."""
        return self.shuffle_idx(value, 0)

    def vote_any(self, pred: Value) -> Value:
        """True in every lane when `pred` holds in any lane of the warp (a warp-uniform branch condition)."""
        return Value(fa4.vote_any(pred))

    def scale_if_uniform(self, cond: Value, value: Value, scale: Value) -> Value:
        """`value * scale` when the warp-uniform `cond` holds (from vote_any), else `value`; the
        multiplies are skipped by a non-divergent branch (fa4.scale_if_uniform)."""
        return Value(fa4.scale_if_uniform(cond, value, scale, result_types=[value.type]))

    def sync_threads(self):
        fa4.sync_threads()

    def cluster_sync(self):
        """Every thread of every CTA of the cluster meets here (barrier.cluster arrive + wait)."""
        fa4.cluster_sync()


__all__ = ["KernelBuilder", "Param", "ELEM_BYTES"]
