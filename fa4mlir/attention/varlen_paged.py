"""flash_attn_varlen_func(..., page_table=...): chunked prefill of a ragged batch over the paged
KV cache on an sm_90a GPU (MLIR-free at import; varlen.py routes calls with a page_table here).

    out = flash_attn_varlen_func(q, k_pool, v_pool, cu_seqlens_q, None, max_seqlen_q, max_seqlen_k,
                                 seqused_k=seqused_k, page_table=page_table, causal=True)

FlashAttention-3/4's contract for a page table: q is packed [total_q, heads, head_dim] with
cu_seqlens_q (int32 [batch + 1]) as without one, but k and v ARE the cache's pools [num_pages,
page_size, kv_heads, head_dim] (q's dtype; page_size 1..256), page_table is int32 [batch,
max_pages] (sequence b's key t lives in page page_table[b, t // page_size], row t % page_size),
and sequence b attends to seqused_k[b] keys (int32 [batch]), or to all max_pages x page_size of
its slots when seqused_k is None. cu_seqlens_k must be None (as FlashAttention-3/4 require: the
keys are not packed); max_seqlen_k is checked as an int and bounds nothing (a length is clamped
to the page table's capacity, as flash_attn_with_kvcache clamps cache_seqlens). Causal masks align
bottom-right per sequence: query i of sequence b (sq_b queries, L_b keys) sees key j iff j <= i +
L_b - sq_b; a row that sees no key gets out = 0 and lse = +inf. window_size, attention_chunk,
softcap and sinks are flash_attn_func's, aligned the same way per sequence (diag = i + L_b - sq_b),
compile-time variants of whichever kernel runs the call (note "Which kernel"; with sinks a row that
sees no key gets lse = sinks[head]). out is [total_q, heads, head_dim] like q, lse float32
[heads, total_q] (the varlen layout).

Note "Which kernel": the sm_90a PREFILL kernel's varlen variant over the pools (AttnConfig.page_size,
kernels/attention_fwd_sm90_paged: 128 query rows of one head per tile, K/V tiles in TMA boxes per page)
runs a call when all of
  1. max_seqlen_q >= PREFILL_MIN_SEQLEN_Q (256: two of its 128-row query tiles per (sequence, head);
     with fewer queries its grid has one tile per (sequence, head), where the decode kernel packs the
     GQA heads of a few queries into its 64-row tiles and splits the key range over the SMs; the
     crossover is not timed, and tests/gpu/test_varlen_paged_gpu.py's chunks of up to 200 queries keep
     running the decode kernel);
  2. head_dim is in PREFILL_HEAD_DIMS (128: the head dims compiled, interpreted and GPU-tested with
     pages);
  3. attention_sm90_config_varlen.paged_varlen_config serves the page size (boxes of gcd(bn, page_size) >= 8
     rows, at most 8 per tile: page sizes that are multiples of, or divide, bn down to 8 rows).
window_size, attention_chunk, softcap and sinks do not change the rule: the prefill kernel takes them
as the contiguous varlen kernel does (the mask's tile classification skips the KV tiles no row of a
query tile sees and runs whole ones unmasked, softcap is the built-in score_mod, sinks join each row's
denominator in the epilogue), one kernel per (mask, softcap, sinks) as every compile-time variant;
`prefill_mask` drops a window side that bounds no sequence (left >= the page table's capacity - 1,
right >= max_seqlen_q - 1), so such calls run the causal or full kernel. So the decode kernel runs
exactly the calls with fewer queries (1.), other head dims (2.) and page sizes without such boxes
(3.: 1..7, 12, 24, 40, ...), with every mask and score modifier too, by this rule (`uses_prefill`),
never as a fallback from a failure. The prefill kernel reads seqused_k (or the capacity) on the device
like the decode kernel, one launch, no split, no combine (rows past cu_seqlens_q[batch] are not
written).

Otherwise it runs the decode kernel over the KV-cache operand (attention_decode_sm90, its compile-time
`varlen_q` variant, note "Varlen q"), which takes any number of queries per sequence, packs GQA
heads into M and splits long key ranges (kvcache.plan_problem's schedule, with max_seqlen_q as the
queries per sequence). Each CTA reads its sequence's start and length from cu_seqlens_q on the
device; the grid has ceil(max_seqlen_q x packed heads / 64) M tiles per sequence (max_seqlen_q is
the caller's word, never checked against the device values) and a tile past its sequence's rows
exits without reading a key. Nothing reads device data on the host: no synchronisation. With one
split (the plan's `unsplit`) the kernel writes out and lse directly and rows of out past
cu_seqlens_q[batch] are not written; with several, the combine writes every row of out and lse,
and those rows, which no sequence owns, get out = 0 and lse = +inf (their partials' LSE is filled
with -inf before the launch; with sinks, lse = sinks[head], as any row that sees no key).

Not here (typed errors before any launch): an FP8 pool (flash_attn_with_kvcache takes it with its
scales); out= and lse= are honoured, but there is no call cache (every call checks and plans,
tens of microseconds of host time) and no custom op (a traced call runs eagerly).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace

from ..driver import device_info, resolve_stream
from ..kernels import attention_decode_sm90_config as dec
from ..kernels import attention_sm90_config as attn_cfg
from ..kernels import attention_sm90_config_varlen as attn_varlen
from ..kernels.common.mask_family import Mask, attention_mask
from .checks import (MAX_GRID_YZ, MAX_I32, PACKED_DIMS, VARLEN_API, _err, check_layout, check_max_seqlen, check_scale,
                     check_seqlens, check_sinks, check_softcap, check_varlen_outputs)
from .errors import (DTypeError, FlashAttnInputError, HeadDimError, HeadsRatioError, SeqlensError,
                     ShapeError, UnsupportedFeatureError)
from .kvcache import (PAGED_DIMS, KVCacheOperand, KVCachePlan, KVCacheProblem, _check_cache, _layout, decode_variant,
                      plan_problem)
from .plan import Launch, TensorRef, config_kernel
from .problem import VarlenProblem

NO_WINDOW = (-1, -1)
PREFILL_MIN_SEQLEN_Q = 256     # note "Which kernel": two of the prefill kernel's query tiles (bm 128)
PREFILL_HEAD_DIMS = (128,)     # the head dims the paged prefill kernel is checked at


def _renamed(e: FlashAttnInputError) -> FlashAttnInputError:
    """A flash_attn_with_kvcache / flash_attn_func check's error in this entry point's name."""
    text = str(e)
    for entry in ("flash_attn_with_kvcache:", "flash_attn_func:"):
        text = text.replace(entry, f"{VARLEN_API}:", 1)
    return type(e)(text)


@dataclass(frozen=True)
class VarlenPagedProblem:
    """A checked call: `batch` sequences of at most max_seqlen_q queries packed in total_q rows,
    over the paged `cache` (KVCacheOperand), with their key lengths from seqused_k (or the
    capacity)."""

    batch: int
    max_seqlen_q: int
    max_seqlen_k: int
    total_q: int
    heads: int
    head_dim: int
    dtype: str
    cache: KVCacheOperand
    causal: bool
    softmax_scale: float
    seqused_k: bool
    window_size: tuple = NO_WINDOW
    attention_chunk: int = 0
    softcap: float = 0.0
    sinks: bool = False

    @property
    def out_shape(self) -> tuple[int, int, int]:
        return (self.total_q, self.heads, self.head_dim)

    @property
    def lse_shape(self) -> tuple[int, int]:
        return (self.heads, self.total_q)

    @property
    def is_empty(self) -> bool:
        return self.batch * self.total_q * self.max_seqlen_q == 0

    def kv_problem(self) -> KVCacheProblem:
        """The flash_attn_with_kvcache problem the decode schedule plans: max_seqlen_q queries per
        sequence (the grid's bound), no new tokens."""
        return KVCacheProblem(self.batch, max(self.max_seqlen_q, 1), self.heads, self.head_dim, self.dtype, self.cache,
                              0, self.causal, self.softmax_scale, None, True, tuple(self.window_size),
                              self.attention_chunk, self.softcap, self.sinks)


def check_varlen_paged(infos: dict, max_seqlen_q, max_seqlen_k, *, softmax_scale=None, causal: bool = False,
                       window_size=NO_WINDOW, attention_chunk: int = 0, softcap: float = 0.0) -> VarlenPagedProblem:
    """Every host check of a call with a page_table, on TensorInfos by name (q, k, v, cu_seqlens_q,
    cu_seqlens_k, seqused_k, page_table, sinks, out, lse; None when not given); window_size and
    attention_chunk already checked (checks.check_mask); softcap (SoftcapError) and sinks (float32
    [heads]) checked here. Typed errors, no driver call."""
    if infos.get("cu_seqlens_k") is not None:
        raise SeqlensError(_err("cu_seqlens_k must be None with page_table (FlashAttention-3/4's contract: k and v "
                                "are the paged pools, not packed keys); give each sequence's key count as seqused_k",
                                VARLEN_API))
    q = infos["q"]
    if len(q.shape) != 3:
        raise ShapeError(_err(f"q must be 3-D [total_tokens, heads, head_dim] (sequences packed one after another), "
                              f"got shape {tuple(q.shape)}", VARLEN_API))
    if q.dtype not in dec.DTYPES:
        raise DTypeError(_err(f"q has dtype {q.dtype}; expected one of {dec.DTYPES}", VARLEN_API))
    total_q, heads, head_dim = q.shape
    if head_dim not in dec.HEAD_DIMS:
        raise HeadDimError(_err(f"head_dim {head_dim} is not supported with page_table; the decode kernel is built "
                                f"for head_dim in {dec.HEAD_DIMS}", VARLEN_API))
    batch = check_seqlens("cu_seqlens_q", infos["cu_seqlens_q"], None) - 1
    if infos.get("seqused_k") is not None:
        check_seqlens("seqused_k", infos["seqused_k"], batch)
    sq, sk = check_max_seqlen("max_seqlen_q", max_seqlen_q), check_max_seqlen("max_seqlen_k", max_seqlen_k)
    q4 = replace(q, shape=(batch, max(sq, 1), heads, head_dim), strides=(0, *q.strides))
    try:
        cache = _check_cache(q4, infos["k"], infos["v"], infos["page_table"])
        for name in ("k", "v"):
            _layout(name, infos[name], PAGED_DIMS)
    except FlashAttnInputError as e:
        raise _renamed(e) from None
    if cache.quantized:
        raise UnsupportedFeatureError(_err(f"an FP8 ({cache.dtype}) pool is not supported with page_table here (it "
                                           "needs k_scale and v_scale): run it through flash_attn_with_kvcache",
                                           VARLEN_API))
    if heads % cache.kv_heads:
        raise HeadsRatioError(_err(f"q has {heads} heads and k/v {cache.kv_heads} KV heads; heads must be a multiple "
                                   "of kv_heads (GQA/MQA)", VARLEN_API))
    if batch > MAX_GRID_YZ or heads > MAX_GRID_YZ:
        raise ShapeError(_err(f"batch {batch} and heads {heads} must be at most {MAX_GRID_YZ} (CUDA grid limit)",
                              VARLEN_API))
    check_layout("q", q, PACKED_DIMS)
    scale = check_scale(softmax_scale, head_dim)
    dims = VarlenProblem(batch, sq, sk, total_q, 0, heads, cache.kv_heads, head_dim, q.dtype)
    try:
        cap = check_softcap(softcap, scale)
        if infos.get("sinks") is not None:
            check_sinks(dims, infos["sinks"])
    except FlashAttnInputError as e:
        raise _renamed(e) from None
    check_varlen_outputs(dims, infos.get("out"), infos.get("lse"))
    return VarlenPagedProblem(batch, sq, sk, total_q, heads, head_dim, q.dtype, cache, bool(causal), scale,
                              infos.get("seqused_k") is not None, tuple(window_size), int(attention_chunk), cap,
                              infos.get("sinks") is not None)


def configs_for(plan: KVCachePlan) -> tuple[dec.DecodeConfig, dec.CombineConfig | None]:
    """The varlen_q decode kernel of a plan (split, or unsplit for one split) and its combine (None
    unsplit): the tiles and fetch of flash_attn_with_kvcache's kernel for the same pool."""
    p = plan.problem
    base = dec.default_config(p.dtype, p.head_dim, p.cache.page_size, unsplit=plan.unsplit, **decode_variant(plan))
    return replace(base, varlen_q=True), None if plan.unsplit else dec.CombineConfig(p.dtype, p.head_dim, sinks=p.sinks)


def prefill_mask(problem: VarlenPagedProblem) -> Mask | None:
    """The paged prefill kernel's mask of a checked call (None: causal's or none): its window with the
    sides that bound no sequence dropped (left >= the page table's capacity - 1: every length is
    clamped to it; right >= max_seqlen_q - 1: the grid's bound, as varlen.py drops it), and its chunk."""
    left, right = problem.window_size
    if left >= problem.cache.capacity - 1:
        left = -1
    if right >= problem.max_seqlen_q - 1:
        right = -1
    mask = attention_mask(problem.causal, (left, right), problem.attention_chunk)
    return None if mask.is_legacy else mask


def prefill_config(problem: VarlenPagedProblem) -> attn_cfg.AttnConfig | None:
    """The paged prefill kernel of a checked call (note "Which kernel": rules 1-3), or None: the decode
    kernel runs it. Masks, softcap and sinks are the kernel's compile-time variants, never a reason for None."""
    if problem.max_seqlen_q < PREFILL_MIN_SEQLEN_Q or problem.head_dim not in PREFILL_HEAD_DIMS:
        return None
    return attn_varlen.paged_varlen_config(problem.dtype, problem.head_dim, problem.causal, problem.cache.page_size,
                                           prefill_mask(problem), softcap=problem.softcap > 0, sinks=problem.sinks)


def uses_prefill(problem: VarlenPagedProblem) -> bool:
    return prefill_config(problem) is not None


@dataclass(frozen=True)
class PrefillProblem:
    """What attention_sm90_config.launch_args reads of a paged prefill launch: the varlen sizes (batch
    sequences, max_seqlen_q, the capacity as seqlen_k, which only sizes the grid's L2 sections), the
    pages and the softcap (0: none; a softcap kernel's scales)."""

    batch: int
    heads: int
    heads_per_kv: int
    seqlen_q: int
    seqlen_k: int
    total_q: int
    softmax_scale: float
    page_table_stride: int
    num_pages: int
    kv_capacity: int
    seqused_k: bool
    softcap: float = 0.0


def prefill_problem(problem: VarlenPagedProblem, page_table_stride: int) -> PrefillProblem:
    c = problem.cache
    return PrefillProblem(problem.batch, problem.heads, problem.heads // c.kv_heads, problem.max_seqlen_q,
                          c.capacity, problem.total_q, problem.softmax_scale, page_table_stride, c.num_pages,
                          c.capacity, problem.seqused_k, problem.softcap)


def prefill_launch(config: attn_cfg.AttnConfig, kernel, problem: PrefillProblem) -> Launch:
    """The one launch of the paged prefill kernel: the varlen 1-D grid and its arguments by name, tensors
    as TensorRefs: q, o as [1, total_q, heads, D] views, k and v the pools (4-D TMA tensors [num_pages,
    page_size, kv_heads, D]), lse, cu_seqlens_q (also passed as cu_seqlens_k, never read), seqused_k
    (when given), page_table, sinks (a sinks kernel)."""
    grid = attn_cfg.varlen_grid(config, problem)
    if grid[0] > MAX_I32:
        raise ShapeError(_err(f"query tiles x heads x batch = {grid[0]} blocks is more than a 1-D grid takes "
                              f"({MAX_I32}): split the batch", VARLEN_API))
    refs = {n: TensorRef(n) for n in ("q", "k", "v", "o", "lse", "cu_seqlens_q", "page_table", "sinks")}
    refs["cu_seqlens_k"] = TensorRef("cu_seqlens_q")
    if problem.seqused_k:
        refs["seqused_k"] = TensorRef("seqused_k")
    return Launch(kernel, grid, attn_cfg.launch_args(config, problem, refs))


def _run_prefill(tensors: dict, problem: VarlenPagedProblem, source, config: attn_cfg.AttnConfig) -> None:
    """The paged prefill kernel's one launch on torch's current stream (note "Which kernel")."""
    q, out = tensors["q"], tensors["out"]
    kernel = source.kernel(config)    # the dense path's bundle lookup (variant fields, page_size included):
    #                                   a bundle without it is a BundleError (--set attention-varlen, prefill)
    built = attn_cfg.AttnConfig.from_key(kernel.artifact.config)
    launch = prefill_launch(built, kernel, prefill_problem(problem, tensors["page_table"].stride(0)))
    named = {"q": q.unsqueeze(0), "k": tensors["k"], "v": tensors["v"], "o": out.unsqueeze(0), "lse": tensors["lse"],
             "cu_seqlens_q": tensors["cu_seqlens_q"], "seqused_k": tensors["seqused_k"],
             "page_table": tensors["page_table"], "sinks": tensors.get("sinks")}
    kernel.launch(launch.grid, launch.bind(named), resolve_stream(None, True, q.device.index))


def combine_plan(plan: KVCachePlan, problem: VarlenPagedProblem) -> KVCachePlan:
    """The plan the combine runs by: one packed batch of total_q rows (note "Varlen q")."""
    return replace(plan, problem=replace(plan.problem, batch=1, seqlen_q=problem.total_q))


def launch_args(plan: KVCachePlan, problem: VarlenPagedProblem, q_strides: tuple[int, int], page_table_stride: int,
                cache_strides: dict, out_strides: tuple[int, int]) -> tuple[dict, dict | None]:
    """The decode kernel's arguments by name and the combine's (None unsplit), tensors as TensorRefs
    (q, k_cache, v_cache = the pools, cache_seqlens = the key lengths, page_table, cu_seqlens_q, out,
    lse, o_partial, lse_partial); q's and out's (token, head) element strides."""
    refs = {n: TensorRef(n) for n, _ in dec.SPLIT_TENSORS + dec.UNSPLIT_TENSORS + dec.COMBINE_TENSORS}
    refs.update(k_pool=TensorRef("k_cache"), v_pool=TensorRef("v_cache"), cu_seqlens_q=TensorRef("cu_seqlens_q"),
                sinks=TensorRef("sinks"),
                k_scale=TensorRef("cache_seqlens"), v_scale=TensorRef("cache_seqlens"))   # scales: never read
    split = dec.split_launch_args(plan, refs, (0, *q_strides), page_table_stride, cache_strides,
                                  (0, *out_strides), varlen_total_q=problem.total_q)
    if plan.unsplit:
        return split, None
    return split, dec.combine_launch_args(combine_plan(plan, problem), refs, (0, *out_strides))


def plan_for(problem: VarlenPagedProblem, num_sms: int) -> KVCachePlan:
    """The decode schedule (kvcache.plan_problem) of a checked call on ``num_sms`` SMs: pack GQA and
    the M tiles by max_seqlen_q, the split count by the page table's capacity."""
    try:
        return plan_problem(problem.kv_problem(), num_sms)
    except FlashAttnInputError as e:    # a grid past its limits: ShapeError
        raise _renamed(e) from None


def run(tensors: dict, problem: VarlenPagedProblem, source) -> None:
    """The launches of a checked call on torch's current stream: the decode kernel, then (several
    splits) the combine. ``tensors``: q, k, v, cu_seqlens_q, seqused_k (or None), page_table, out,
    lse (allocated), sinks (or None)."""
    config = prefill_config(problem)
    if config is not None:
        return _run_prefill(tensors, problem, source, config)
    torch = sys.modules["torch"]
    q = tensors["q"]
    device = device_info()
    plan = plan_for(problem, device.num_sms)
    split_cfg, combine_cfg = configs_for(plan)
    lengths = tensors["seqused_k"]
    if lengths is None:    # FlashAttention's default: every slot of the page table holds a key
        lengths = torch.full((problem.batch,), problem.cache.capacity, dtype=torch.int32, device=q.device)
    named = {"q": q, "k_cache": tensors["k"], "v_cache": tensors["v"], "cache_seqlens": lengths,
             "page_table": tensors["page_table"], "cu_seqlens_q": tensors["cu_seqlens_q"], "out": tensors["out"],
             "lse": tensors["lse"], "sinks": tensors.get("sinks")}
    if not plan.unsplit:   # rows no sequence owns combine from LSE -inf partials: out 0, lse +inf
        named["o_partial"] = torch.empty((plan.num_splits, problem.total_q, problem.heads, problem.head_dim),
                                         dtype=torch.float32, device=q.device)
        named["lse_partial"] = torch.full((plan.num_splits, problem.heads, problem.total_q), float("-inf"),
                                          dtype=torch.float32, device=q.device)
    cache_strides = {n: named[n].stride()[:3] for n in ("k_cache", "v_cache")}
    split_args, combine_args = launch_args(plan, problem, q.stride()[:2], named["page_table"].stride(0),
                                           cache_strides, tensors["out"].stride()[:2])
    stream = resolve_stream(None, True, q.device.index)
    launches = [Launch(kernel_for(source, split_cfg), plan.grid, split_args)]
    if combine_cfg is not None:
        launches.append(Launch(kernel_for(source, combine_cfg), dec.combine_grid(combine_plan(plan, problem)),
                               combine_args))
    for launch in launches:
        launch.kernel.launch(launch.grid, launch.bind(named), stream)


def kernel_for(source, cfg):
    """The loaded kernel of ``cfg`` (the decode kernel's varlen_q variant or the combine) from
    ``source``: plan.config_kernel, its bundle's entry of that name (`--set attention-varlen` or
    `--set prefill`), else compiled here."""
    return config_kernel(source, cfg, VARLEN_API, ("attention-varlen", "prefill"))


__all__ = ["VarlenPagedProblem", "check_varlen_paged", "configs_for", "combine_plan", "launch_args", "plan_for",
           "run", "PREFILL_MIN_SEQLEN_Q",
           "PREFILL_HEAD_DIMS", "prefill_mask", "prefill_config", "uses_prefill", "PrefillProblem", "prefill_problem", "prefill_launch"]
