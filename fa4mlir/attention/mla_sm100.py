"""flash_mla_with_kvcache (the dense absorbed MLA decode) on an sm_100 GPU (MLIR-free): the routing by
compute capability and the plan of the sm_100a kernel (attention_fwd_sm100's MLA decode route,
kernels/attention_sm100_mla_decode.py, FA4Config note "MLA decode").

    arch = select_arch(problem, capability)          # "sm_90a" or "sm_100a", or a typed error
    plan = build_plan_sm100(problem, source, block_table_stride)

Compute capability 9.x runs the sm_90a kernels (attention/mla.py's plan); exactly 10.0 runs the sm_100a
kernel (an sm_100a cubin runs on 10.0 only), which takes a subset of the sm_90a kernels' calls, each
refusal a typed error before any launch:
* heads in HEADS (16, 32, 64, 128: packed into the 64-row tile, 128 over two CTAs per token; the heads
  compiled and interpreted by tests/test_attention_sm100_mla_decode.py): ShapeError;
* page sizes up to 256 (the sm_90a route's multiples of 8: 16, 32, 48, .. by per-page TMA boxes of >= 16
  rows; 8, 24, 40, .. by the kernel's row gather, note "MLA gather"), over the FP8 cache multiples of 16
  only (its rows arrive by TMA boxes): LayoutError;
* no FA4MLIR_MLA_DECODE_VARIANT other than "default" (its variants are sm_90a kernels):
  UnsupportedFeatureError.
Any other capability is a DeviceError. FlashMLA's FP8 latent cache (is_fp8_kvcache=True, bf16 q) runs the
kernel's FP8 form (FA4Config kv_dtype "e4m3", kv_scale "row": attention_sm100_mla_decode note "MLA FP8",
the rows dequantized to bf16 in SMEM by warps 4-7), its k the cache's rows as int32 words (mla.kv_operand).

The kernel (FA4Config of head dims 576/512, one latent KV head, BN 64, the decode route) is compiled per
(dtype, heads, page size, causal, split, FP8): `causal` only with seqlen_q > 1 (one query token sees the same
keys either way, so a decode call of one token runs the non-causal kernel). The split count is the
metadata's (get_mla_metadata, the same 64-row tile count as the sm_90a kernels'); several splits run the
split kernel (float32 partials o_partial / lse_partial, the workspaces MLAOutputs.outputs makes) and then
the combine built for sm_100a (attention_combine_sm100: attention_combine_sm90's code, CombineConfig(arch=
"sm_100a")). Both come from the `mla-decode-sm100` bundle set (kernel_sets_mla.mla_decode_sm100) or are
compiled here.

Where it differs from the sm_90a route: sequence b's length is max(cache_seqlens[b], 0) as the kernel
reads it (the sm_100a paged kernels' contract), not clamped to max_pages x page_size: a length past the
block table's row reads page-table entries past it (FlashMLA's contract requires lengths within the
table). Never run on a Blackwell GPU: compiled, verified and interpreted on small shapes only
(tests/test_attention_sm100_mla_decode.py, _fp8.py, _gather.py); tests/test_mla_decode_sm100_route.py checks
this routing; tests/gpu/test_mla_decode_sm100_gpu.py runs it on compute capability 10.0 only.
"""
from __future__ import annotations

from types import SimpleNamespace

from ..kernels import attention_decode_sm90_config as dec
from ..kernels import attention_sm100_config as fcfg
from ..kernels.common.paging import MAX_PAGE_SIZE
from . import mla
from .errors import DeviceError, DTypeError, LayoutError, ShapeError, UnsupportedFeatureError
from .plan import Launch, Plan, TensorRef, config_kernel

SM100_CAPABILITY = (10, 0)
ARCH = "sm_100a"
BUNDLE_SET = "mla-decode-sm100"
HEADS = (16, 32, 64, 128)
DTYPES = ("bf16", "f16")
FP8_PAGE_MULTIPLE = fcfg.MIN_PAGED_BOX_ROWS   # 16: the FP8 rows by per-page TMA boxes of >= 16 rows
MLA_BASE = dict(head_dim=576, head_dim_v=512, num_kv_heads=1, bn=fcfg.MLA_DECODE_BN, num_q_tiles=1, fuse_gqa=True)
# the call's tensors (flash_mla_with_kvcache's names, mla.py's addresses) by the sm_100a kernel's parameter
PARAM_TENSORS = {"q": "q", "k": "kv_cache", "o": "out", "lse": "lse", "page_table": "block_table",
                 "cache_seqlens": "cache_seqlens", "o_partial": "o_partial", "lse_partial": "lse_partial"}


def _err(msg: str) -> str:
    return f"{mla.ENTRY}: {msg}"


def select_arch(problem: mla.MLAProblem, capability: tuple[int, int]) -> str:
    """The kernel arch that runs ``problem`` on a device of ``capability``: "sm_90a" for 9.x, "sm_100a"
    for 10.0 (after check_sm100), else a DeviceError."""
    if capability[0] == 9:
        return "sm_90a"
    if tuple(capability) == SM100_CAPABILITY:
        check_sm100(problem)
        return ARCH
    raise DeviceError(_err(f"the device is sm_{capability[0]}{capability[1]}; the MLA decode runs on sm_90 "
                           f"(H100/H200: attention_mla_decode_sm90) or sm_100 (compute capability 10.0: "
                           f"{fcfg.KERNEL}'s MLA decode route)"))


def check_sm100(problem: mla.MLAProblem) -> None:
    """Typed errors for a call the sm_100a kernel cannot run (module docstring)."""
    p = problem
    if p.dtype not in DTYPES:
        raise DTypeError(_err(f"the sm_100a MLA decode takes q and k_cache in {DTYPES}, got {p.dtype}"))
    if p.heads not in HEADS:
        raise ShapeError(_err(f"heads must be one of {HEADS} on sm_100 (packed into the kernel's 64-row tile, 128 over "
                              f"two CTAs a token), got {p.heads}"))
    if p.page_size > MAX_PAGE_SIZE:
        raise LayoutError(_err(f"on sm_100 k_cache's page size must be at most {MAX_PAGE_SIZE} (FlashMLA's is 64), got "
                               f"{p.page_size}"))
    if p.fp8 and p.page_size % FP8_PAGE_MULTIPLE:
        raise LayoutError(_err(f"on sm_100 an FP8 k_cache's page size must be a multiple of {FP8_PAGE_MULTIPLE} (its rows "
                               f"arrive by per-page TMA boxes of >= {FP8_PAGE_MULTIPLE} rows), got {p.page_size}"))
    variant = mla.requested_variant()
    if variant != mla.mc.RULE_VARIANT:
        raise UnsupportedFeatureError(_err(f"{mla.VARIANT_ENV}={variant!r} names an sm_90a decode kernel; on sm_100 "
                                           f"the sm_100a kernel runs every call: unset {mla.VARIANT_ENV}"))


def kernel_config(dtype: str, heads: int, page_size: int, causal: bool, split: bool,
                  fp8: bool = False) -> fcfg.FA4Config:
    """The sm_100a MLA decode kernel's FA4Config (the route's and the bundle set's); `fp8`: FlashMLA's FP8 rows."""
    cache = dict(kv_dtype="e4m3", kv_scale=fcfg.FA4Config.MLA_FP8_SCALE) if fp8 else {}
    return fcfg.FA4Config(**MLA_BASE, dtype=dtype, num_q_heads=heads, causal=causal, page_size=page_size,
                          split_kv=split, **cache).validate()


def sm100_config(problem: mla.MLAProblem) -> fcfg.FA4Config:
    """The sm_100a kernel's config of a call (causal only where seqlen_q > 1; split_kv with several splits)."""
    p = problem
    return kernel_config(p.dtype, p.heads, p.page_size, p.causal and p.seqlen_q > 1, p.splits > 1, p.fp8)


def combine_config(problem: mla.MLAProblem) -> dec.CombineConfig | None:
    """The sm_100a combine of a split call (None for one split)."""
    if problem.splits == 1:
        return None
    return dec.CombineConfig(problem.dtype, mla.mc.D_V, arch=ARCH).validate()


def kernel_args(cfg: fcfg.FA4Config, problem: mla.MLAProblem, block_table_stride: int) -> dict:
    """The sm_100a kernel's launch arguments by parameter name (paged_launch_args), tensors by TensorRef
    to the call's names (PARAM_TENSORS)."""
    p = problem
    refs = {param: TensorRef(name) for param, name in PARAM_TENSORS.items()}
    view = SimpleNamespace(batch=p.batch, heads=p.heads, seqlen_q=p.seqlen_q, softmax_scale=p.softmax_scale,
                           num_splits=p.splits)
    return fcfg.paged_launch_args(cfg, view, refs, num_pages=p.num_pages, page_table_stride=int(block_table_stride))


def grid(cfg: fcfg.FA4Config, problem: mla.MLAProblem) -> tuple[int, int, int]:
    """(64-row tiles x splits, heads / tile heads, batch): attention_sm100_config.grid."""
    return fcfg.grid(cfg, problem, problem.splits)


def build_plan_sm100(problem: mla.MLAProblem, source, block_table_stride: int) -> Plan:
    """The sm_100a kernel's launch, then with several splits the sm_100a combine's; tensors by TensorRef
    (flash_mla_with_kvcache's names: q, kv_cache, block_table, cache_seqlens, out, lse, o_partial,
    lse_partial)."""
    cfg, combine = sm100_config(problem), combine_config(problem)
    p = problem
    kernel = config_kernel(source, cfg, mla.ENTRY, (BUNDLE_SET,), arch=ARCH)
    launches = [Launch(kernel, grid(cfg, p), kernel_args(cfg, p, block_table_stride))]
    if combine is not None:
        refs = {n: TensorRef(n) for n, _ in dec.COMBINE_TENSORS}
        launches.append(Launch(config_kernel(source, combine, mla.ENTRY, (BUNDLE_SET,), arch=ARCH),
                               mla.combine_grid(p), mla.combine_args(p, refs, p.out_strides)))
    return Plan(problem, tuple(launches), (note(cfg),))


def note(cfg: fcfg.FA4Config) -> str:
    """Plan.describe's line on the kernel."""
    split = f", split-KV partials merged by {dec.COMBINE_KERNEL_SM100}" if cfg.split_kv else ""
    fp8 = ", FlashMLA's FP8 rows dequantized in SMEM" if cfg.fp8 else ""
    return (f"MLA decode kernel: sm_100a {fcfg.KERNEL} (compute capability 10.0; 64-row tile of {cfg.tile_heads} heads "
            f"x {cfg.tile_tokens} tokens{fp8}{split})")


__all__ = ["select_arch", "check_sm100", "kernel_config", "sm100_config", "combine_config", "kernel_args", "grid", "build_plan_sm100",
           "SM100_CAPABILITY", "HEADS", "BUNDLE_SET"]
