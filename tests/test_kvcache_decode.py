"""The sm_90a decode kernels (attention_decode_sm90, attention_combine_sm90) and the plan that
launches them, without a GPU:

* every entry of the `decode` bundle set compiles (through fa4-verify-pipelines) with no spills, no
  stack frame and no serialised wgmma; SMEM holds the Q tile and the K/V rings within the limit;
  the parameters are the launch contracts (SPLIT_PARAMS, UNSPLIT_PARAMS, COMBINE_PARAMS) and the
  K/V descriptors' box is (64 columns, 1 head, box_rows rows, 1 page); each split kernel has its
  unsplit twin in the set, with its SMEM and CTAs per SM;
* the split kernel issues bn / box_rows TMA boxes per 64-column chunk and per K or V stage, and
  each stage expects exactly their bytes;
* the plan: grid, split and combine arguments (pack GQA, divisors, strides), box rows per page size;
  a plan of one split launches the unsplit variant alone (out and lse, no workspaces, no combine);
  a bundle without the variant a call needs is a BundleError naming it;
* errors before anything runs: bad page tables, lengths and new tokens raise the operand's typed
  errors through the public entry point; a call on tensor-likes that are not torch tensors is refused;
* the append launch (k=, v=) comes first in the plan, with the strides of its four tensors.
"""
from dataclasses import replace

import pytest

from fa4mlir import compiler, kernel_sets, kernels, lowering
from fa4mlir.attention import kvcache as kc
from fa4mlir.attention.errors import DTypeError
from fa4mlir.kernels import attention_decode_sm90 as decode_kernel
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels.common import paging
from fa4mlir.kernels.common.fastdiv import divisor
from fa4mlir.passes._util import attr, ops_named
from fa4mlir.passes.plan_smem import SMEM_LIMIT
from fa4mlir.testing import raises
from tests._mla_helpers import info  # a row-major TensorInfo at address 1 << 20 (PTR) on "cuda"
from tests._ring_mutations import RING_OPS, mutate_ring_op

# BALANCED_RULE's kernels and their combine: tests/test_decode_balanced_compile.py (their work-item prologue and
# epilogue spill, bounded there; none in the tile loops)
ENTRIES = [e for e in kernel_sets.SETS["decode"]() if not getattr(e[1], "balanced", False)
           and not getattr(e[1], "balanced_bn", 0)]
PTR = 1 << 20


_COMPILED: dict = {}


def compiled(entry):
    name, cfg = entry
    if entry not in _COMPILED:
        kir = kernels.module(name).build(cfg)
        module_text = str(kir.module)
        art = lowering.lower(kir, compiler.resolve_options(name, debug=False))
        _COMPILED[entry] = (art, module_text)
    return _COMPILED[entry]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e[1].name())
def test_decode_set_compiles_clean(entry):
    name, cfg = entry
    art, _ = compiled(entry)
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"], r
    assert art.smem_bytes <= SMEM_LIMIT["sm_90a"]
    if name == dec.KERNEL:
        assert art.smem_bytes >= cfg.smem_bytes() - 1024, (art.smem_bytes, cfg.smem_bytes())
        assert [(p.name, p.kind) for p in art.params] == list(cfg.params)
        base = dec.UNSPLIT_PARAMS if cfg.unsplit else dec.SPLIT_PARAMS
        assert cfg.params == base + dec.mod_params(cfg.softcap, cfg.sinks)
        assert ("_unsplit" in cfg.name()) == cfg.unsplit
        for p in art.params:
            if p.kind == "tma" and cfg.fp8:     # rows of D bytes, unswizzled (converted in the kernel); swap AB's
                # K 128B-swizzled (its fragment loads: attention_decode_sm90_swapab, note "Swap AB")
                swizzle = "128B" if cfg.swap_ab and p.name == "k_cache" else "none"
                assert p.tma.box == (cfg.head_dim, 1, cfg.box_rows, 1) and p.tma.swizzle == swizzle
                assert p.tma.dtype == "e4m3"
            elif p.kind == "tma":
                assert p.tma.box == (64, 1, cfg.box_rows, 1) and p.tma.swizzle == "128B"
        assert art.block == (cfg.threads, 1, 1) and cfg.threads == 128 + 32 * (dec.GATHER_WARPS if cfg.gather else 1)
        if cfg.ctas_per_sm == 2:   # D64, D128
            assert art.smem_bytes <= dec.MAX_SMEM_2CTA and r["registers"] * cfg.threads * 2 <= 65536, r
        if cfg.unsplit and cfg == dec.default_config(cfg.dtype, cfg.head_dim, None, unsplit=True, rows=1) \
                and cfg.bn != dec.DEFAULT_BN[cfg.head_dim]:
            # UNSPLIT_RULE's kernel ([D-decode-bn128-unsplit]): unsplit only; its calls' split count is read off
            # the default tiles' split kernel
            assert (name, dec.default_config(cfg.dtype, cfg.head_dim, None)) in ENTRIES
            return
        # the other variant (sinks: in the unsplit kernel only, the split one's combine adds them)
        twins = [(name, replace(cfg, unsplit=not cfg.unsplit, sinks=s)) for s in (False, not cfg.unsplit)]
        twin = next((t for t in twins if t in ENTRIES), twins[0])
        assert twin in ENTRIES, f"{cfg.name()}: no {twin[1].name()} in the decode set"
        assert twin[1].smem_bytes() == cfg.smem_bytes() and twin[1].ctas_per_sm == cfg.ctas_per_sm
    elif name == dec.COMBINE_KERNEL:
        assert [(p.name, p.kind) for p in art.params] == list(cfg.params)
        assert cfg.params == dec.COMBINE_PARAMS + dec.mod_params(False, cfg.sinks)
        assert art.block == (32 * dec.COMBINE_WARPS, 1, 1)
    else:
        assert name == dec.APPEND_KERNEL
        assert [(p.name, p.kind) for p in art.params] == list(dec.APPEND_PARAMS)


@pytest.mark.parametrize("box_rows", [1, 8, 16, 64])
def test_split_kernel_boxes_fill_each_stage(box_rows):
    cfg = dec.DecodeConfig(paged=True, box_rows=box_rows)
    kir = kernels.module(dec.KERNEL).build(cfg)
    with kir.module.context:
        loads = ops_named(kir.module.operation, "fa4.tma_load")
        commits = ops_named(kir.module.operation, "fa4.producer_commit")
        per_box = 64 * box_rows * 2
        assert len(loads) == 2 * cfg.d_chunks * cfg.bn // box_rows            # K and V of one tile
        assert all(attr(op, "box") == [64, 1, box_rows, 1] for op in loads)
        assert [attr(op, "tx_bytes") for op in commits] == [cfg.tile_bytes()] * 2
        assert per_box * len(loads) == 2 * cfg.tile_bytes()


@pytest.mark.parametrize("page_size,box", [(1, 0), (3, 0), (7, 0), (8, 8), (16, 16), (24, 8), (40, 8), (48, 16),
                                           (56, 8), (64, 64), (128, 64), (256, 64), (None, 64)])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_box_rows_per_page_size(page_size, box, head_dim):
    # box 0: the cp.async gather (box_rows 1), for page sizes whose boxes would hold under 8 rows
    cfg = dec.default_config("bf16", head_dim, page_size)
    assert cfg.gather == (box == 0) and cfg.box_rows == max(box, 1) and cfg.paged == (page_size is not None)
    assert cfg.ctas_per_sm == 2 and cfg.stages == dec.DEFAULT_STAGES[head_dim]
    cfg.validate()
    # FP8 keeps the gather under 16-row boxes ([D-decode-box8]): one CTA per SM, twice the stages
    fp8 = dec.default_config("bf16", head_dim, page_size, "block").validate()
    assert fp8.gather == (cfg.gather or cfg.box_rows < paging.MIN_FP8_TMA_BOX_ROWS)
    assert fp8.ctas_per_sm == (1 if fp8.gather else 2)


@pytest.mark.parametrize("head_dim,fp8", [(128, False), (64, False), (256, False), (128, True), (64, True)])
def test_gather_fills_each_stage(head_dim, fp8):
    """Note "Gather": the producer warp copies each K and V tile in 16-byte cp.asyncs, 32 lanes per
    instruction, tracks them on full[stage] (cp_async_arrive) and commits with no TMA bytes; every
    lane commits, so the rings count 32 producer arrivals; the kernel has no TMA load."""
    cfg = dec.DecodeConfig(head_dim=head_dim, paged=True, box_rows=1, gather=True,
                           stages=2, **(dict(kv_dtype="e4m3", kv_scale="kv_head") if fp8 else {}))
    kir = kernels.module(dec.KERNEL).build(cfg)
    with kir.module.context:
        mod = kir.module.operation
        copies = ops_named(mod, "fa4.cp_async")      # a loop of GATHER_UNROLL copies per K or V tile
        instrs = cfg.tile_bytes() // (16 * 32) // dec.GATHER_WARPS      # per producer warp
        unroll = min(decode_kernel.GATHER_UNROLL, instrs)
        assert len(copies) == 2 * unroll and instrs % unroll == 0
        assert len(ops_named(mod, "fa4.cp_async_arrive")) == 2
        assert [attr(op, "tx_bytes") for op in ops_named(mod, "fa4.producer_commit")] == [0, 0]
        assert not ops_named(mod, "fa4.tma_load")
        assert [attr(op, "producer_arrivals") for op in ops_named(mod, "fa4.pipeline")] == [32 * dec.GATHER_WARPS] * 2
    art = lowering.lower(kir, compiler.resolve_options(dec.KERNEL, debug=False))   # through the verifier
    assert art.resources["spill_stores"] == 0 and art.resources["spill_loads"] == 0
    again = kernels.module(dec.KERNEL).build(cfg)
    ptx, _ = lowering.lower_module(again.module, "sm_90a")
    assert "cp.async.cg.shared.global" in ptx and "cp.async.mbarrier.arrive.shared" in ptx
    assert "cp.async.mbarrier.arrive.noinc" not in ptx


def test_gather_config_errors():
    from fa4mlir.kernels.common.fields import ConfigError
    raises(ConfigError, ["gather", "paged"], dec.DecodeConfig(paged=False, gather=True).validate)
    raises(ConfigError, ["gather", "box_rows"], dec.DecodeConfig(paged=True, box_rows=16, gather=True).validate)


def _problem(page_size=16, batch=3, seqlen_q=2, heads=8, kv_heads=2, d=128, max_pages=20, num_splits=None):
    q = info((batch, seqlen_q, heads, d))
    if page_size is None:
        cache = info((batch, 300, kv_heads, d))
        table = None
    else:
        cache = info((50, page_size, kv_heads, d))
        table = info((batch, max_pages), "i32")
    p = kc.check_kvcache_inputs(q, cache, cache, info((batch,), "i32"), table)
    return p.with_options(causal=True, softmax_scale=0.1, num_splits=num_splits, return_lse=False)


def test_split_launch_args_packed_gqa():
    plan = kc.plan_problem(_problem(num_splits=3), 132)
    refs = {n: n for n, _ in dec.SPLIT_TENSORS}
    args = dec.split_launch_args(plan, refs, (2 * 8 * 128, 8 * 128, 128), 20)
    assert list(args) == [n for n, _ in dec.SPLIT_PARAMS]
    assert plan.gqa.packed and args["cta_heads"] == 4 and args["rows"] == 8 and args["m_tiles"] == 1
    assert (args["cta_heads_mul"], args["cta_heads_shr"]) == divisor(4)
    assert (args["page_mul"], args["page_shr"]) == divisor(16) and args["page_size"] == 16
    assert args["capacity"] == 20 * 16 and args["num_pages"] == 50 and args["num_splits"] == 3
    assert args["causal"] == 1 and args["page_table_stride"] == 20
    assert abs(args["scale_log2"] - 0.1 * 1.4426950408889634) < 1e-12
    assert dec.split_grid(plan) == (3, 2, 3)
    comb = dec.combine_launch_args(plan, {n: n for n, _ in dec.COMBINE_TENSORS}, (2 * 8 * 128, 8 * 128, 128))
    assert list(comb) == [n for n, _ in dec.COMBINE_PARAMS]
    assert comb["total_rows"] == 3 * 2 * 8 and comb["num_splits"] == 3
    assert dec.combine_grid(plan) == (-(-48 // dec.COMBINE_WARPS), 1, 1)


def test_split_launch_args_unpacked_and_contiguous():
    plan = kc.plan_problem(_problem(page_size=None, heads=4, kv_heads=4, seqlen_q=1), 132)
    assert plan.unsplit       # 5 tiles of capacity: one split, the unsplit variant's contract
    args = dec.split_launch_args(plan, {n: n for n, _ in dec.UNSPLIT_TENSORS}, (512, 512, 128), 0)
    assert list(args) == [n for n, _ in dec.UNSPLIT_PARAMS]
    assert (args["out_stride_b"], args["out_stride_s"], args["out_stride_h"]) == (512, 512, 128)   # contiguous
    assert not plan.gqa.packed and args["cta_heads"] == 1 and args["rows"] == 1
    assert args["capacity"] == 300 and plan.grid[1] == 4
    # one packed row, unsplit, contiguous D128: UNSPLIT_RULE's 128-key tiles ([D-decode-bn128-unsplit])
    assert plan.bn == dec.default_config("bf16", 128, None, unsplit=True, rows=1).bn == 128 != dec.DEFAULT_BN[128]


def test_plan_tile_matches_kernel_tile():
    for d in (64, 128, 256):
        assert kc.DECODE_BN[d] == dec.default_config("bf16", d, None).bn


def test_mqa_many_rows_take_several_m_tiles():
    plan = kc.plan_problem(_problem(heads=32, kv_heads=1, seqlen_q=16, num_splits=2), 132)
    assert plan.gqa.rows == 512 and plan.gqa.m_tiles == 8 and plan.grid == (16, 1, 3)


class CAI:
    """A CUDA array (``__cuda_array_interface__`` v3) with no memory behind it."""

    def __init__(self, shape, typestr="<f2"):
        strides = None
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (PTR, False),
                                         "strides": strides, "version": 3}


def test_entry_point_checks_before_any_driver_call():
    import fa4mlir
    from fa4mlir.attention.errors import ArgumentTypeError, ShapeError
    q, cache = CAI((2, 1, 8, 128)), CAI((10, 16, 2, 128))
    seqlens, table = CAI((2,), "<i4"), CAI((2, 4), "<i4")
    raises(ShapeError, ["k and v (new tokens) go together"], fa4mlir.flash_attn_with_kvcache, q, cache, cache,
           seqlens, table, k=CAI((2, 1, 2, 128)))
    raises(ArgumentTypeError, ["torch CUDA tensor"], fa4mlir.flash_attn_with_kvcache, q, cache, cache, seqlens, table,
           k=CAI((2, 1, 2, 128)), v=CAI((2, 1, 2, 128)))
    raises(DTypeError, ["page_table must be int32"], fa4mlir.flash_attn_with_kvcache, q, cache, cache, seqlens,
           CAI((2, 4), "<i8"))
    raises(DTypeError, ["cache_seqlens must be int32"], fa4mlir.flash_attn_with_kvcache, q, cache, cache,
           CAI((2,), "<i8"), table)


def test_kvcache_call_module_imports_no_mlir():
    import subprocess
    import sys
    code = ("import sys; import fa4mlir.attention.kvcache_call; "
            "assert not any(m == 'mlir' or m.startswith('mlir.') for m in sys.modules), 'mlir imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_torch_ops_fake_shapes_and_typed_errors_at_trace_time():
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    import fa4mlir
    from fa4mlir.attention import kvcache_ops  # noqa: F401  (registers fa4mlir::flash_attn_with_kvcache)

    def meta(shape, dtype):
        return torch.empty(shape, dtype=dtype, device="meta")

    with FakeTensorMode() as mode:
        q = mode.from_tensor(meta((2, 3, 8, 128), torch.bfloat16))
        pool = mode.from_tensor(meta((10, 16, 2, 128), torch.bfloat16))
        lens = mode.from_tensor(meta((2,), torch.int32))
        table = mode.from_tensor(meta((2, 4), torch.int32))
        out, lse = fa4mlir.flash_attn_with_kvcache(q, pool, pool, lens, table, return_lse=True)
        assert out.shape == (2, 3, 8, 128) and out.dtype == torch.bfloat16
        assert lse.shape == (2, 8, 3) and lse.dtype == torch.float32
        given = mode.from_tensor(meta((2, 3, 8, 128), torch.bfloat16))
        out2, _ = fa4mlir.flash_attn_with_kvcache(q, pool, pool, lens, table, out=given, return_lse=True)
        assert out2 is given
        raises(DTypeError, ["page_table must be int32"], fa4mlir.flash_attn_with_kvcache, q, pool, pool, lens,
               mode.from_tensor(meta((2, 4), torch.int64)))


def test_append_launch_args():
    q = info((3, 1, 8, 128))
    pool = info((50, 16, 2, 128))
    new = info((3, 2, 2, 128))
    p = kc.check_kvcache_inputs(q, pool, pool, info((3,), "i32"), info((3, 20), "i32"), k=new, v=new)
    plan = kc.plan_problem(p.with_options(causal=True, softmax_scale=0.1, num_splits=None, return_lse=False), 132)
    strides = {n: (4096, 256, 128) for n in ("k", "v")} | {n: (4096, 256, 128) for n in ("k_cache", "v_cache")}
    args = dec.append_launch_args(plan, {n: n for n, _ in dec.APPEND_TENSORS}, strides, 20)
    assert list(args) == [n for n, _ in dec.APPEND_PARAMS]
    assert args["seqlen_new"] == 2 and args["capacity"] == 320 and args["page_size"] == 16
    assert dec.append_grid(plan) == (2, 3, 1)
    split = dec.split_launch_args(plan, {n: n for n, _ in dec.UNSPLIT_TENSORS}, (1024, 1024, 128), 20)
    assert split["seqlen_new"] == 2 and plan.unsplit


def test_dynamo_traces_the_entry_point_without_a_graph_break():
    torch = pytest.importorskip("torch")
    import fa4mlir

    def meta(shape, dtype):
        return torch.empty(shape, dtype=dtype, device="meta")

    def step(q, k_cache, v_cache, lens, table):
        o, lse = fa4mlir.flash_attn_with_kvcache(q * 1, k_cache, v_cache, lens, table, return_lse=True)
        return o * 1, lse

    pool = meta((10, 16, 2, 128), torch.bfloat16)
    explain = torch._dynamo.explain(step)(meta((2, 1, 8, 128), torch.bfloat16), pool, pool, meta((2,), torch.int32),
                                          meta((2, 4), torch.int32))
    assert explain.graph_break_count == 0, explain.break_reasons


def _mutated_decode(cfg, index: int, how: str):
    """The decode kernel of `cfg` with its index-th ring op's phase flipped, stage + 1, or erased."""
    return mutate_ring_op(kernels.module(dec.KERNEL).build(cfg), index, how)


@pytest.mark.parametrize("kv_scale", ["", "block"])
def test_verifier_rejects_every_single_op_mutation_of_the_decode_kernel(kv_scale):
    """bf16 and FP8 (K_j and V_j waited for together, released together after their conversion)."""
    from fa4mlir.passes import verify_pipelines
    from fa4mlir.passes._util import PassError
    cfg = dec.default_config("bf16", 128, 16, kv_scale)
    good = kernels.module(dec.KERNEL).build(cfg)
    with good.module.context:
        verify_pipelines.run(good.module.operation)
        num_ops = len(ops_named(good.module.operation, *RING_OPS))
    assert num_ops == 12      # producer: acquire + commit of K and V; consumer: wait + release of K and V, two loops
    for index in range(num_ops):
        for how in ("phase ^ 1", "stage + 1", "erase"):
            kir = _mutated_decode(cfg, index, how)
            if kir is None:
                continue
            with kir.module.context, pytest.raises(PassError):
                verify_pipelines.run(kir.module.operation)


@pytest.mark.parametrize("grain", ["tensor", "kv_head", "block"])
def test_fp8_kernel_converts_each_tile_and_scales_by_granularity(grain):
    cfg = dec.default_config("bf16", 128, 16, grain)
    assert cfg.fp8 and cfg.mma_dtype == "f16" and cfg.ctas_per_sm == 2 and cfg.stages == 4
    kir = kernels.module(dec.KERNEL).build(cfg)
    text = str(kir.module)
    # 128 e4m3 per row x 64 rows / 2 per cvt / 128 threads = 32 cvt per tile and thread, K and V, two loops
    assert text.count("fa4.cvt_e4m3x2") == 2 * 2 * 32
    loads = ops_named(kir.module.operation, "fa4.tma_load")
    assert all(attr(op, "box") == [128, 1, 16, 1] and attr(op, "elem_bytes") == 1 for op in loads)
    assert all(attr(op, "ab_dtype") == "f16" for op in ops_named(kir.module.operation, "fa4.mma"))
    # note "FP8": per tile one wait of each ring, one conversion pass of both tiles, one proxy fence and
    # one warpgroup barrier for the pair, both releases, then S and P V (after the Q tile's fence + barrier)
    steps = ("fa4.consumer_wait", "fa4.consumer_release", "fa4.fence", "fa4.named_barrier", "fa4.mma_wait_group")
    order = [op.name for op in ops_named(kir.module.operation, *steps)]
    tile = ["fa4.consumer_wait"] * 2 + ["fa4.fence", "fa4.named_barrier"] + ["fa4.consumer_release"] * 2 \
        + ["fa4.mma_wait_group"] * 2
    assert order == ["fa4.fence", "fa4.named_barrier"] + tile * 2, order


def test_fp8_configs_refuse_unaligned_boxes():
    from fa4mlir.kernels.common.fields import ConfigError
    with pytest.raises(ConfigError, match="128-byte aligned"):      # TMA boxes of 1 row of 64 bytes
        dec.DecodeConfig(head_dim=64, paged=True, box_rows=1, kv_dtype="e4m3", kv_scale="block").validate()
    assert dec.default_config("bf16", 64, 1, "block").validate().gather    # the gather has no such boxes
    with pytest.raises(ConfigError, match="kv_scale"):
        dec.DecodeConfig(kv_dtype="e4m3").validate()


def test_fp8_plan_picks_the_kernel_of_its_scale_granularity():
    from fa4mlir.attention.errors import UnsupportedFeatureError
    from fa4mlir.attention.kvcache_call import configs_for
    q = info((2, 1, 8, 128))
    pool = info((40, 16, 2, 128), "e4m3")
    table, lens = info((2, 20), "i32"), info((2,), "i32")
    for k_s, v_s, grain in (((1,), (1,), "tensor"), ((2,), (2,), "kv_head"), ((40, 2), (40, 2), "block")):
        p = kc.check_kvcache_inputs(q, pool, pool, lens, table, k_scale=info(k_s, "f32"), v_scale=info(v_s, "f32"))
        for num_splits in (None, 2):      # None: 20 tiles of capacity on 132 SMs, one split
            opts = dict(causal=True, softmax_scale=0.1, num_splits=num_splits, return_lse=False)
            plan = kc.plan_problem(p.with_options(**opts), 132)
            split, combine = configs_for(plan)
            # FP8_DEFAULT_RULE at 4 packed rows (group 4): swap AB for tensor / kv_head, the SMEM kernel for block;
            # BALANCED_RULE: with num_splits not given, the paged swap-AB kernel on the balanced split schedule
            balanced = num_splits is None and grain != "block"
            unsplit = num_splits is None and not balanced
            rule = dec.default_config("bf16", 128, 16, grain, unsplit=unsplit, rows=4)
            assert split == (dec.balanced_rule_config(rule) if balanced else rule) and split.fp8
            assert not balanced or (split.ctas == 3 and split.swap_ab_ot and split.balanced)    # BALANCED_RULE_VARIANT
            assert split.swap_ab == (grain != "block") and plan.gqa.rows == 4 and bool(plan.parts) == balanced
            assert (combine is None) if unsplit else combine.dtype == "bf16"
            assert combine is None or combine.balanced_bn == (split.bn if balanced else 0)
    p = kc.check_kvcache_inputs(q, pool, pool, lens, table, k_scale=info((1,), "f32"), v_scale=info((2,), "f32"))
    plan = kc.plan_problem(p.with_options(causal=True, softmax_scale=0.1, num_splits=None, return_lse=False), 132)
    raises(UnsupportedFeatureError, ["different granularities"], configs_for, plan)
    odd = info((40, 3, 2, 64), "e4m3")
    p = kc.check_kvcache_inputs(info((2, 1, 8, 64)), odd, odd, lens, table, k_scale=info((1,), "f32"),
                                v_scale=info((1,), "f32"))
    plan = kc.plan_problem(p.with_options(causal=True, softmax_scale=0.1, num_splits=None, return_lse=False), 132)
    split, _ = configs_for(plan)     # odd pages of 64-byte FP8 rows: the gather (no TMA box alignment)
    assert split.gather and split.head_dim == 64 and split.fp8


def test_decode_bench_counts_fp8_bytes_as_read():
    # bandwidth is bytes the kernel must read: e4m3 is 1 byte per element (+ its float32 scales), not bf16's 2
    from fa4mlir.bench.decode_bench import D, HK, kv_bytes
    assert kv_bytes(1000, 2) == 2 * 1000 * HK * D * 2
    assert kv_bytes(1000, 1, 2 * HK) == 2 * 1000 * HK * D + 4 * 2 * HK
    assert kv_bytes(1000, 1) * 2 == kv_bytes(1000, 2)


def test_gather_refuses_caches_past_its_u32_offsets():
    # the gather's row offsets are u32 counts of 16 bytes: a pool past 64 GiB is refused before launch
    from fa4mlir.attention.errors import UnsupportedFeatureError
    from fa4mlir.attention.kvcache_call import _check_gather_span
    q, lens, table = info((2, 1, 8, 128)), info((2,), "i32"), info((2, 20), "i32")
    for pages, ok in ((1 << 24, True), (1 << 26, False)):      # 2 KiB per page: 32 GiB, 128 GiB
        pool = info((pages, 1, 8, 128))
        p = kc.check_kvcache_inputs(q, pool, pool, lens, table)
        plan = kc.plan_problem(p.with_options(causal=True, softmax_scale=0.1, num_splits=None, return_lse=False), 132)
        if ok:
            _check_gather_span(plan, None)
        else:
            raises(UnsupportedFeatureError, ["64 GiB", "page size 1"], _check_gather_span, plan, None)


# ---- the unsplit variant (one split: no workspaces, no combine) [D-decode-unsplit] ----------------

def test_unsplit_variant_name_key_and_stores():
    split = dec.default_config("bf16", 128, 16)
    unsplit = dec.default_config("bf16", 128, 16, unsplit=True)
    assert unsplit == replace(split, unsplit=True) and unsplit.validate().params == dec.UNSPLIT_PARAMS
    assert unsplit.name() == split.name() + "_unsplit" and unsplit.key() != split.key()
    assert [n for n, _ in dec.UNSPLIT_TENSORS] == [{"o_partial": "out", "lse_partial": "lse"}.get(n, n)
                                                   for n, _ in dec.SPLIT_TENSORS]
    ptx = {}
    for cfg in (split, unsplit):
        ptx[cfg.unsplit], _ = lowering.lower_module(kernels.module(dec.KERNEL).build(cfg).module, "sm_90a")
    # split: float32 pairs of partial O; unsplit: bf16 pairs of O (x 1/l + 0: note "Unsplit") into out
    assert ptx[False].count("st.global.v2.b32") == 2 * 128 // 8 and ptx[False].count("st.global.b32") == 2
    assert "st.global.v2.b32" not in ptx[True] and ptx[True].count("st.global.b32") == 2 * 128 // 8 + 2
    assert ptx[True].count("0f7F800000") > ptx[False].count("0f7F800000")      # LSE +inf for a row with no key


def _plan(seqlen_q=1, heads=8, kv_heads=2, num_splits=None, page_size=16, new=0):
    q = info((3, seqlen_q, heads, 128))
    pool = info((50, page_size, kv_heads, 128)) if page_size else info((3, 300, kv_heads, 128))
    table = info((3, 20), "i32") if page_size else None
    extra = dict(k=info((3, new, kv_heads, 128)), v=info((3, new, kv_heads, 128))) if new else {}
    p = kc.check_kvcache_inputs(q, pool, pool, info((3,), "i32"), table, **extra)
    return kc.plan_problem(p.with_options(causal=True, softmax_scale=0.1, num_splits=num_splits, return_lse=True), 132)


@pytest.mark.parametrize("seqlen_q,heads,kv_heads", [(1, 8, 2), (4, 8, 2), (4, 4, 4), (16, 32, 1)])
def test_unsplit_plan_launches_one_kernel_into_out_and_lse(monkeypatch, seqlen_q, heads, kv_heads):
    from fa4mlir.attention import kvcache_call
    from fa4mlir.attention.plan import TensorRef
    monkeypatch.setattr(kvcache_call, "kernel_for", lambda source, cfg: cfg)   # the launches name their config
    out_strides = (9999, 777, 130)      # a strided out: the kernel writes it in place
    for num_splits, page_size in ((None, 16), (1, 16), (1, None), (1, 8)):
        plan = _plan(seqlen_q, heads, kv_heads, num_splits, page_size)
        assert plan.unsplit and plan.num_splits == 1 and plan.o_partial_shape is None
        built = kvcache_call.build_plan(plan, None, (1, 1, 1), 20, out_strides)
        (launch,) = built.launches
        # (UNSPLIT_RULE's tiles where it applies: contiguous, <= 4 packed rows)
        assert launch.kernel == dec.default_config("bf16", 128, page_size, unsplit=True, rows=plan.gqa.rows)
        assert launch.kernel.bn == plan.bn
        assert launch.grid == (plan.gqa.m_tiles, plan.grid[1], 3)
        assert list(launch.args) == [n for n, _ in dec.UNSPLIT_PARAMS]
        assert launch.args["out"] == TensorRef("out") and launch.args["lse"] == TensorRef("lse")
        assert (launch.args["out_stride_b"], launch.args["out_stride_s"], launch.args["out_stride_h"]) == out_strides
        assert launch.args["num_splits"] == 1 and "o_partial" not in launch.args
    split = kvcache_call.build_plan(_plan(seqlen_q, heads, kv_heads, 3), None, (1, 1, 1), 20, out_strides)
    assert [launch.kernel for launch in split.launches] == [dec.default_config("bf16", 128, 16),
                                                            dec.CombineConfig("bf16", 128)]
    assert split.launches[0].args["o_partial"] == TensorRef("o_partial")
    appended = kvcache_call.build_plan(_plan(num_splits=1, new=2), None, (1, 1, 1), 20, out_strides,
                                       {n: (1, 1, 1) for n in ("k", "v", "k_cache", "v_cache")})
    assert [type(launch.kernel).__name__ for launch in appended.launches] == ["AppendConfig", "DecodeConfig"]
    assert appended.launches[1].kernel.unsplit


def test_unsplit_call_allocates_no_workspace():
    torch = pytest.importorskip("torch")
    from fa4mlir.attention.kvcache_call import _outputs
    q = torch.zeros(3, 4, 8, 128, dtype=torch.bfloat16)
    o_partial, lse_partial, out, lse = _outputs(torch, q, _plan(seqlen_q=4, num_splits=1), None)
    assert o_partial is None and lse_partial is None
    assert out.shape == (3, 4, 8, 128) and out.dtype == torch.bfloat16 and lse.shape == (3, 8, 4)
    o_partial, lse_partial, _, _ = _outputs(torch, q, _plan(seqlen_q=4, num_splits=3), None)
    assert o_partial.shape == (3, 3, 4, 8, 128) and lse_partial.shape == (3, 3, 8, 4)


def test_anchor_decode_workloads_resolve_to_the_unsplit_kernel():
    """bench decode's decode_dense (B 64, 32 / 8 heads, 8192 keys) and decode_spec4 (B 32, Sq 4, 4096
    keys, causal) fill an H200's 132 SMs unsplit: the unsplit variant, no combine; the paged
    workloads (lengths up to 16k, unknown to the host) take balance_splits' ranges and the combine."""
    from fa4mlir.attention.kvcache_call import configs_for
    for b, sq, sk, bn in ((64, 1, 8192, 128), (32, 4, 4096, 64)):    # decode_dense's 4 rows: UNSPLIT_RULE's tiles
        cache = info((b, sk, 8, 128))
        p = kc.check_kvcache_inputs(info((b, sq, 32, 128)), cache, cache, info((b,), "i32"))
        plan = kc.plan_problem(p.with_options(causal=True, softmax_scale=0.1, num_splits=None, return_lse=False), 132)
        want = dec.default_config("bf16", 128, None, unsplit=True, rows=4 * sq)
        assert plan.unsplit and configs_for(plan) == (want, None) and want.bn == plan.bn == bn
    for page in (1, 8, 16, 64):
        pool = info((64 * 16384 // page, page, 8, 128))
        p = kc.check_kvcache_inputs(info((64, 1, 32, 128)), pool, pool, info((64,), "i32"),
                                    info((64, 16384 // page), "i32"))
        plan = kc.plan_problem(p.with_options(causal=True, softmax_scale=0.1, num_splits=None, return_lse=False), 132)
        split, combine = configs_for(plan)
        assert not plan.unsplit and not split.unsplit and combine is not None


def test_a_bundle_without_the_needed_variant_is_a_bundle_error(tmp_path):
    """No silent fallback: a bundle with the split kernel but not its unsplit twin, or the gather
    but not the 8-row-box kernel of page size 8, refuses the call naming the missing kernel."""
    from fa4mlir.artifacts import Bundle
    from fa4mlir.attention.errors import BundleError
    from fa4mlir.attention.kvcache_call import kernel_for
    from fa4mlir.attention.plan import KernelSource
    split = dec.default_config("bf16", 128, 16)
    gather = dec.default_config("bf16", 128, 1, unsplit=True)
    entries = [{"name": c.name(), "arch": "sm_90a", "config": c.key(), "cubin": "x.cubin"} for c in (split, gather)]
    source = KernelSource(Bundle(tmp_path, entries))
    for missing in (replace(split, unsplit=True), dec.default_config("bf16", 128, 8, unsplit=True)):
        raises(BundleError, [missing.name(), "--set decode"], kernel_for, source, missing)


def test_decode_set_holds_every_kernel_the_gpu_tests_pick():
    """Each cache the GPU tests run (their parameter tables) picks kernels that `--set decode`
    builds, split and unsplit: a missing one would be a BundleError there."""
    from tests.gpu import test_kvcache_gpu as gpu
    cases = [("bf16", 128, page, "") for page in gpu.PAGE_SIZES + gpu.UNSPLIT_PAGES + [None]]
    cases += [(dtype, d, page, "") for dtype, d, page in gpu.HEAD_DIM_CASES]
    cases += [("bf16", 128, page, grain) for page, grain in gpu.FP8_CASES]
    names = {cfg.name() for _, cfg in ENTRIES}
    for dtype, d, page, grain in cases:
        # FP8: the rule's kernels at test_fp8_cache's 4 (seqlen_q 1) and 16 (seqlen_q 4) packed rows
        for unsplit, rows in ((False, 4), (True, 4), (False, 16), (True, 16)):
            cfg = dec.default_config(dtype, d, page, grain, unsplit=unsplit, rows=rows)
            assert cfg.name() in names, (dtype, d, page, grain, cfg.name())
    assert {dec.default_config("bf16", 128, p).box_rows for p in gpu.BOX8_PAGES} == {8}
    assert all(dec.default_config("bf16", 128, p).gather for p in gpu.GATHER_PAGES)
