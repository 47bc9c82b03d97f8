"""flash_mla_sparse_fwd on an sm_100 GPU (MLIR-free): the routing by compute capability and the plan
of the sm_100a kernel (kernels/attention_mla_sparse_sm100).

    arch = select_arch(problem, capability, indices_token_stride)    # "sm_90a" or "sm_100a", or a typed error

Compute capability 9.x runs the sm_90a kernel (attention/mla_sparse.py's plan); exactly 10.0 runs the
sm_100a kernel (an sm_100a cubin runs on 10.0 only), which takes a subset of the sm_90a kernel's
calls, each refusal a typed error before any launch:
* bf16 kv only (FlashMLA's FP8 656-byte rows: UnsupportedFeatureError; the sm_90a kernel takes them);
* h_q 64 or 128 (the kernel's 128 TMEM lanes hold one token's heads: ShapeError);
* topk a multiple of 64 (its gather tile, as the sm_90a kernel's);
* indices [s_q, 1, topk] with token stride topk (the kernel addresses token x topk: LayoutError,
  pass indices.contiguous());
* 2 x s_q <= 2^31 - 1 (two CTAs per token, grid x).
Any other capability is a DeviceError.

The sm_100a kernel is, by default ("split"), the D_v split over two independent CTAs per token
(notes/RESULTS.md [D-mla-sparse-sm100]); FA4MLIR_MLA_SPARSE_SM100=pair (read per call into the call
cache's key) runs FlashMLA's CTA pair instead (attention_mla_sparse_sm100_pair, [D-mla-sparse-pair]),
which takes h_q 128 and topk a multiple of 128 only (ShapeError otherwise); another value is a
KnobError. Neither kernel's numerics on a Blackwell GPU are checked here (interpreted on small shapes by
tests/test_mla_sparse_sm100.py and tests/test_mla_sparse_sm100_pair.py; tests/gpu/
test_mla_sparse_sm100_gpu.py runs the split kernel on sm_100).
"""
from __future__ import annotations

from .. import env
from ..kernels import attention_mla_sparse_sm100_config as sc100
from ..kernels import attention_mla_sparse_sm100_pair_config as pair
from .checks import MAX_I32
from .errors import DeviceError, DTypeError, KnobError, LayoutError, ShapeError, UnsupportedFeatureError
from .plan import Launch, Plan, TensorRef, config_kernel

ENTRY = "flash_mla_sparse_fwd"
SM100_CAPABILITY = (10, 0)
KERNEL_ENV = "FA4MLIR_MLA_SPARSE_SM100"
SM100_KERNELS = {"split": (sc100, "mla-sparse-sm100"), "pair": (pair, "mla-sparse-sm100-pair")}   # config, set


def _err(msg: str) -> str:
    return f"{ENTRY}: {msg}"


def select_arch(problem, capability: tuple[int, int], indices_token_stride: int) -> str:
    """The kernel arch that runs ``problem`` (mla_sparse.SparseProblem) on a device of ``capability``:
    "sm_90a" for 9.x, "sm_100a" for 10.0 (after check_sm100), else a DeviceError."""
    if capability[0] == 9:
        return "sm_90a"
    if tuple(capability) == SM100_CAPABILITY:
        check_sm100(problem, indices_token_stride, requested_kernel())
        return "sm_100a"
    raise DeviceError(_err(f"the device is sm_{capability[0]}{capability[1]}; the sparse MLA prefill runs on sm_90 "
                           f"(H100/H200: attention_mla_sparse_sm90) or sm_100 (compute capability 10.0: "
                           f"{sc100.KERNEL})"))


def requested_kernel() -> str:
    """FA4MLIR_MLA_SPARSE_SM100: "split" (unset) or "pair"; KnobError for another value, before any launch."""
    name = (env.get_str(KERNEL_ENV) or "split").strip()
    if name not in SM100_KERNELS:
        raise KnobError(_err(f"{KERNEL_ENV}={name!r} is not an sm_100a sparse prefill kernel; known: "
                             f"{', '.join(SM100_KERNELS)} (unset it for the split kernel)"))
    return name


def check_sm100(problem, indices_token_stride: int, kernel: str = "split") -> None:
    """Typed errors for a call the sm_100a kernel `kernel` ("split" or "pair") cannot run (module docstring)."""
    p = problem
    if kernel == "pair":
        if p.heads not in pair.HEADS:
            raise ShapeError(_err(f"h_q must be {pair.B_H} for the pair kernel ({KERNEL_ENV}=pair: FlashMLA's head128, "
                                  f"64 heads a CTA), got {p.heads}; unset {KERNEL_ENV} for the split kernel"))
        if p.topk % pair.B_TOPK:
            raise ShapeError(_err(f"topk must be a multiple of {pair.B_TOPK} for the pair kernel ({KERNEL_ENV}=pair), "
                                  f"got {p.topk}; pad with -1"))
    if p.fp8:
        raise UnsupportedFeatureError(_err(f"FP8 kv rows are not supported by the sm_100a kernel ({sc100.KERNEL}: bf16 "
                                           f"kv only); pass bf16 kv, or run on an sm_90 GPU"))
    if p.dtype != sc100.DTYPE:
        raise DTypeError(_err(f"the sm_100a kernel takes {sc100.DTYPE} q and kv, got {p.dtype}"))
    if p.heads not in sc100.HEADS:
        raise ShapeError(_err(f"h_q must be one of {sc100.HEADS} on sm_100 (one token's heads in 128 TMEM lanes), "
                              f"got {p.heads}"))
    if p.topk % sc100.B_TOPK:
        raise ShapeError(_err(f"topk must be a multiple of {sc100.B_TOPK} on sm_100, got {p.topk}; pad with -1"))
    if p.s_q > 1 and indices_token_stride != p.topk:
        raise LayoutError(_err(f"on sm_100 indices must be contiguous along tokens (token stride topk={p.topk}), got "
                               f"token stride {indices_token_stride}; pass indices.contiguous()"))
    if sc100.V_SPLIT * p.s_q > MAX_I32:
        raise ShapeError(_err(f"s_q must be at most {MAX_I32 // sc100.V_SPLIT} on sm_100 (grid x = 2 x s_q), got "
                              f"{p.s_q}"))


def sm100_config(problem, kernel: str = "split"):
    """The sm_100a kernel's config of a call: topk_length and sinks as given (MLASparseSm100Config, or
    MLASparsePairConfig for "pair")."""
    module = SM100_KERNELS[kernel][0]
    config = module.MLASparsePairConfig if kernel == "pair" else module.MLASparseSm100Config
    cfg = config(topk_length=problem.has_topk_length, sinks=problem.has_sinks)
    cfg.validate()
    return cfg


def build_plan_sm100(problem, source, kernel: str | None = None) -> Plan:
    """One launch of the sm_100a kernel (`kernel`, default requested_kernel()), tensors by TensorRef under the
    kernels' contract: q [s_q, h_q, 576], kv [s_kv, 576] (kv[:, 0]), indices [s_q, topk] (indices[:, 0]), out,
    max_logits, lse contiguous."""
    kernel = requested_kernel() if kernel is None else kernel
    module, bundle_set = SM100_KERNELS[kernel]
    cfg = sm100_config(problem, kernel)
    refs = {n: TensorRef(n) for n, kind in cfg.params if kind in ("ptr", "tma")}
    p = problem
    args = module.launch_args(cfg, refs, s_kv=p.s_kv, heads=p.heads, topk=p.topk, softmax_scale=p.softmax_scale)
    found = config_kernel(source, cfg, ENTRY, (bundle_set,), arch="sm_100a")
    return Plan(problem, (Launch(found, module.grid(p.s_q), args),))


__all__ = ["select_arch", "check_sm100", "requested_kernel", "sm100_config", "build_plan_sm100", "SM100_CAPABILITY",
           "KERNEL_ENV", "SM100_KERNELS"]
