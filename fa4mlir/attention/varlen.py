"""flash_attn_varlen_func: ragged-batch attention forward on an sm_90a GPU (MLIR-free at import).

    out = flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                 causal=True)
    out, lse = flash_attn_varlen_func(..., window_size=(4096, -1), softcap=30.0, sinks=sinks,
                                      return_lse=True)
    out = flash_attn_varlen_func(..., causal=True, score_mod=alibi, aux_tensors=[slopes])

FlashAttention-3/4's names and layouts. `batch` sequences are packed one after another: q is
[total_q, heads, head_dim], k [total_k, kv_heads, head_dim] and v [total_k, kv_heads, head_dim_v]
(bf16 or f16, head_dim 64, 96, 128, 192 or 256, head_dim_v = head_dim or MLA prefill's 128 for
head_dim 192; HeadDimError for other pairs; heads a multiple of kv_heads); sequence b owns q rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]
and k/v rows from cu_seqlens_k[b], cu_seqlens_k[b+1] - cu_seqlens_k[b] of them, or seqused_k[b]
when seqused_k (int32 [batch]) is given (a sequence using only the first keys of its slot).
cu_seqlens_q and cu_seqlens_k are int32 [batch + 1] tensors on the GPU; max_seqlen_q and
max_seqlen_k are Python ints at least every sequence's length (the grid has ceil(max_seqlen_q /
bm) query tiles per sequence). out is [total_q, heads, head_dim_v]; lse is float32 [heads,
total_q] (FlashAttention-3/4's varlen layout). Each sequence is its own problem: the causal mask is
aligned bottom-right per sequence (query i of a sequence of sq queries and sk keys sees key j iff
j <= i + sk - sq), window_size=(left, right) likewise per sequence, softcap and sinks as in
flash_attn_func; a row that sees no key gets out = 0 and lse = +inf (lse = sinks[head] with sinks).
Sequences of length 0 are legal (nothing is written for them) and so are length 1; rows of out and
lse past cu_seqlens_q[batch] belong to no sequence and are not written.

What is checked, and what cannot be without a host sync. Everything about the arguments' types,
shapes, dtypes, layouts and devices raises a typed error before any launch (``checks``:
check_varlen_inputs, check_seqlens, check_max_seqlen, check_varlen_outputs; SeqlensError,
DTypeError, DeviceError, LayoutError, ...). The VALUES of cu_seqlens and seqused_k live on the GPU
and are never read here (a device-to-host copy per call would stall a serving loop), so these are
the caller's word, as in FlashAttention: cu_seqlens non-decreasing and starting at 0,
cu_seqlens_q[batch] <= total_q and cu_seqlens_k[batch] <= total_k, seqused_k[b] <= the sequence's
keys, every length <= its max_seqlen. What the kernel does when they are not (attention_fwd_sm90_
varlen): a decreasing pair reads as an empty sequence, query rows are clipped to [0, total_q), so
no write leaves out and lse whatever the values; reads past k and v are zeros; the results of such
a sequence are unspecified, and a max_seqlen_q below a sequence's length leaves its last rows
unwritten. With seqused_k, k and v rows past seqused_k[b] inside the packed tensors must hold
finite values (they are masked, but P V multiplies them by 0, and 0 * NaN is NaN): zero a freshly
allocated cache's tail.

score_mod=, mask_mod=, aux_tensors= (flash_attn_func's Python functions compiled into the kernel:
kernels/common/score_mod.py) apply per sequence with FlexAttention's and FA4 CuTe's meaning: `batch`
is the sequence's index, q_idx and kv_idx are positions within the sequence (0 .. its length - 1),
not packed rows; a function that wants a packed row reads cu_seqlens_q as an aux tensor
(aux_tensors[i][batch] + q_idx). The varlen kernel's note [varlen-mod-indices] says why the kernel
needs nothing more. Not with page_table (UnsupportedFeatureError); such calls take the direct path
(no custom op).

attention_chunk=c (Llama-4's chunked attention, as flash_attn_func) keeps, per sequence, the keys
of the chunk of c keys that holds the query's diagonal key (kernels/common/masks.py); it combines
with causal and window_size and compiles into the kernel (one kernel per chunk size, as windows).

With page_table (chunked prefill of a ragged batch over the paged KV cache): k and v are the pools
[num_pages, page_size, kv_heads, head_dim], page_table int32 [batch, max_pages], the keys' lengths
seqused_k (or every slot of the table), cu_seqlens_k None (FlashAttention-3/4's contract); the
prefill kernel over the pools or the decode kernel over the KV-cache operand runs it, masks and score
modifiers included, by an explicit rule (varlen_paged.py, note "Which kernel", says what it takes and does).

The grid: FA4MLIR_VARLEN_GRID=compact (read at every call, `varlen_grid`) runs the kernel on the compact
grid (kernels/common/varlen_compact.py: one block per working query tile, no empty blocks), and
FA4MLIR_VARLEN_GRID=persistent a persistent kernel striding over the compact grid's tiles on min(SMs,
compact tiles) CTAs (the grid from shapes and the SM count only), variants for A/B runs
(bench/varlen_ab.py --grids sections,compact,persistent); unset, the default grid.

There is no call cache
yet: every call checks and packs its launch (tens of microseconds of host time), and no torch
custom op for calls with out= or lse= (the functional op fa4mlir::flash_attn_varlen_fwd serves the
others under torch.compile: torch_ops). Torch tensors only (out and lse are allocated with torch),
run on torch's current stream.
"""
from __future__ import annotations

import sys
from dataclasses import replace

from .. import env
from ..driver import device_info, resolve_stream
from ..kernels import attention_sm90_config as attn_cfg
from ..kernels import attention_sm90_config_varlen as attn_varlen
from .checks import (MAX_I32, VARLEN_API, _err, check_device_context, check_devices, check_flag, check_mask,
                     check_max_seqlen, check_mods, check_scale, check_seqlens, check_sinks, check_softcap, check_varlen_inputs,
                     check_varlen_outputs, device_ordinal, read_tensor)
from .errors import ArgumentTypeError, BundleError, FlashAttnInputError, ShapeError, UnsupportedFeatureError
from .plan import Launch, TensorRef, source_for
from ..kernels.common.varlen_compact import GRID_ENV, GRIDS
from .varlen_paged import VarlenPagedProblem, check_varlen_paged
from .varlen_paged import run as run_paged

NO_WINDOW = (-1, -1)
TMA_TENSORS = ("q", "k", "v", "o")     # passed to the kernel as [1, total, heads, D]


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, seqused_k=None,
                           page_table=None, softmax_scale=None, causal=False, window_size=NO_WINDOW, softcap=0.0,
                           sinks=None, return_lse=False, out=None, lse=None, bundle=None, attention_chunk=0,
                           score_mod=None, mask_mod=None, aux_tensors=None):
    """Ragged-batch attention forward; see the module docstring. Returns out, or (out, lse) when
    return_lse. Every argument is checked before any launch; cu_seqlens' values are not read.
    Under torch.compile or another tracer (torch_ops._plain_eager false) a call without out=,
    lse= and score_mod/mask_mod is the one custom op fa4mlir::flash_attn_varlen_fwd, whose
    implementation is this path. score_mod, mask_mod, aux_tensors: as flash_attn_func takes them,
    batch the sequence index and q_idx / kv_idx positions within the sequence (module docstring)."""
    mods = (score_mod, mask_mod, aux_tensors)
    if any(m is not None for m in mods):
        out, lse = _flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                                      page_table, softmax_scale, causal, window_size, softcap, sinks, return_lse, out,
                                      lse, bundle, attention_chunk, mods)
        return (out, lse) if return_lse else out
    ops = _torch_ops(q, k, v, cu_seqlens_q, cu_seqlens_k)
    if ops is not None and out is None and lse is None and page_table is None and not ops._plain_eager(q):
        try:
            return ops.flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                                         softmax_scale, causal, window_size, softcap, sinks, return_lse, bundle,
                                         attention_chunk)
        except FlashAttnInputError as e:
            raise _renamed(e) from None
    out, lse = _flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                                  page_table, softmax_scale, causal, window_size, softcap, sinks, return_lse, out, lse,
                                  bundle, attention_chunk)
    return (out, lse) if return_lse else out


def _renamed(e: FlashAttnInputError) -> FlashAttnInputError:
    """The error of a check shared with flash_attn_func, in this entry point's name."""
    return type(e)(str(e).replace("flash_attn_func:", f"{VARLEN_API}:", 1))


def _torch_ops(*tensors):
    """attention.torch_ops (registers the custom ops) when the tensors are torch tensors, else None."""
    torch = sys.modules.get("torch")
    if torch is None or not all(isinstance(x, torch.Tensor) for x in tensors):
        return None
    from . import torch_ops
    return torch_ops


def _flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=None,
                       page_table=None, softmax_scale=None, causal=False, window_size=NO_WINDOW, softcap=0.0,
                       sinks=None, return_lse=False, out=None, lse=None, bundle=None, attention_chunk=0, mods=None):
    """flash_attn_varlen_func's work (and the custom op's implementation): checks, then the launch
    (with a page_table: varlen_paged.run's); returns (out, lse). mods: (score_mod, mask_mod,
    aux_tensors) or None."""
    try:
        problem, infos = _check(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                                page_table, softmax_scale, causal, window_size, softcap, sinks, return_lse, out, lse,
                                attention_chunk, mods)
    except FlashAttnInputError as e:
        raise _renamed(e) from None
    torch = sys.modules["torch"]
    ordinal = check_devices([(n, i.device, device_ordinal(n, x)) for n, (i, x) in infos.items()], VARLEN_API)
    source = source_for(bundle)
    device = device_info()
    check_device_context(ordinal, device.ordinal, device.capability)
    if out is None:
        out = torch.empty(problem.out_shape, dtype=q.dtype, device=q.device)   # [total_q, heads, dim_v]
    if lse is None:
        lse = torch.empty(problem.lse_shape, dtype=torch.float32, device=q.device)
    if isinstance(problem, VarlenPagedProblem):
        if not problem.is_empty:
            tensors = {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens_q, "seqused_k": seqused_k,
                       "page_table": page_table, "out": out, "lse": lse, "sinks": sinks}
            run_paged(tensors, problem, source)
    elif not problem.is_empty:
        grid_name = varlen_grid()
        config = attn_varlen.varlen_config(problem.dtype, problem.head_dim, problem.causal, problem.mask,
                                        softcap=problem.softcap > 0, sinks=problem.sinks,
                                        head_dim_v=problem.head_dim_v, score_mod=problem.score_mod,
                                        mask_mod=problem.mask_mod, aux=problem.aux, compact=grid_name == "compact",
                                        persistent=grid_name == "persistent")
        try:
            kernel = source.kernel(config)    # a bundle without it: BundleError (--set attention-varlen, prefill)
        except FlashAttnInputError as e:
            raise _renamed(e) from None
        built = attn_cfg.AttnConfig.from_key(kernel.artifact.config)
        check_grid(built, config, grid_name)
        launch = varlen_launch(built, kernel, problem, device.num_sms)
        tensors = {"q": q, "k": k, "v": v, "o": out, "lse": lse, "cu_seqlens_q": cu_seqlens_q,
                   "cu_seqlens_k": cu_seqlens_k, "seqused_k": seqused_k, "sinks": sinks,
                   **{n: x for n, (_, x) in infos.items() if n.startswith("aux")}}
        args = launch.bind({n: t.unsqueeze(0) if n in TMA_TENSORS else t for n, t in tensors.items()})
        kernel.launch(launch.grid, args, resolve_stream(None, True, q.device.index))
    return out, lse


def check_grid(built: attn_cfg.AttnConfig, config: attn_cfg.AttnConfig, grid_name: str) -> None:
    """BundleError unless the kernel the source found runs the grid asked for: a bundle lacking one grid's
    kernel would otherwise hand over another's by its tiles' fallback (persistent is a tile field), and an
    A/B run would time the wrong grid under its name."""
    if (built.varlen_compact, built.persistent) != (config.varlen_compact, config.persistent):
        raise BundleError(_err(f"{GRID_ENV}={grid_name}: the kernel source has no kernel of that grid for this "
                               f"call (it found {'the persistent' if built.persistent else 'the compact' if built.varlen_compact else 'the default'}"
                               f" grid's); build it with `python -m fa4mlir bundle --set prefill` (the bench's "
                               f"bf16 D128 causal) or `--set attention-varlen`", VARLEN_API))


def varlen_grid() -> str:
    """The varlen grid the environment picks (FA4MLIR_VARLEN_GRID: unset or 'sections', 'compact' or 'persistent');
    ValueError for another value, before any launch."""
    name = (env.get_str(GRID_ENV) or "sections").strip()
    if name not in GRIDS:
        raise ValueError(f"{GRID_ENV}={name!r}: expected one of {', '.join(GRIDS)} (unset: sections)")
    return name


def varlen_launch(config: attn_cfg.AttnConfig, kernel, problem, num_sms: int | None = None) -> Launch:
    """The one launch of the varlen kernel: the 1-D grid (common.varlen_schedule; a persistent one
    takes min(num_sms, compact tiles)) and its arguments by name, tensors as TensorRefs (q, k, v, o as
    [1, total, heads, D] views)."""
    grid = attn_cfg.varlen_grid(config, problem, num_sms)
    if grid[0] > MAX_I32:
        raise ShapeError(_err(f"query tiles x heads x batch = {grid[0]} blocks is more than a 1-D grid takes "
                              f"({MAX_I32}): split the batch", VARLEN_API))
    names = ("q", "k", "v", "o", "lse", "cu_seqlens_q", "cu_seqlens_k", "sinks")
    refs = {n: TensorRef(n) for n in names}
    refs.update({f"aux{i}": TensorRef(f"aux{i}") for i in range(len(problem.aux_shapes))})
    if problem.seqused_k:
        refs["seqused_k"] = TensorRef("seqused_k")
    return Launch(kernel, grid, attn_cfg.launch_args(config, problem, refs))


def _check(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, page_table, softmax_scale,
           causal, window_size, softcap, sinks, return_lse, out, lse, attention_chunk=0, mods=None):
    """Every argument, deviceless: (VarlenProblem, or VarlenPagedProblem with a page_table,
    {name: (TensorInfo, tensor)}, the aux tensors as aux0, aux1, ...). mods: (score_mod, mask_mod,
    aux_tensors) or None."""
    causal, _ = check_flag("causal", causal), check_flag("return_lse", return_lse)
    window_size, chunk = check_mask(window_size, attention_chunk)
    torch = sys.modules.get("torch")
    given = {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
             "seqused_k": seqused_k, "sinks": sinks, "out": out, "lse": lse, "page_table": page_table}
    if torch is None or not all(x is None or isinstance(x, torch.Tensor) for x in given.values()):
        raise ArgumentTypeError(_err("takes torch tensors (out and lse are allocated with torch); convert the "
                                     "others with torch.as_tensor / torch.from_dlpack", VARLEN_API))
    from .dense import check_no_grad
    check_no_grad(q, k, v, sinks)
    infos = {n: (read_tensor(n, x, VARLEN_API), x) for n, x in given.items()
             if x is not None or n in ("q", "k", "v", "cu_seqlens_q") or (n == "cu_seqlens_k" and page_table is None)}
    if page_table is not None:
        if mods is not None and any(m is not None for m in mods):
            raise UnsupportedFeatureError(_err("score_mod, mask_mod and aux_tensors with page_table are not built (the "
                                               "decode kernel runs it): pass packed k and v with cu_seqlens_k",
                                               VARLEN_API))
        problem = check_varlen_paged({n: i for n, (i, _) in infos.items()}, max_seqlen_q, max_seqlen_k,
                                     softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                     attention_chunk=chunk, softcap=softcap)
        return problem, infos
    problem = check_varlen_inputs(infos["q"][0], infos["k"][0], infos["v"][0])
    batch = check_seqlens("cu_seqlens_q", infos["cu_seqlens_q"][0], None) - 1
    check_seqlens("cu_seqlens_k", infos["cu_seqlens_k"][0], batch + 1)
    if seqused_k is not None:
        check_seqlens("seqused_k", infos["seqused_k"][0], batch)
    scale = check_scale(softmax_scale, problem.head_dim)
    problem = replace(
        problem, batch=batch, max_seqlen_q=check_max_seqlen("max_seqlen_q", max_seqlen_q),
        max_seqlen_k=check_max_seqlen("max_seqlen_k", max_seqlen_k), causal=causal, softmax_scale=scale,
        window_size=tuple(window_size), attention_chunk=chunk, softcap=check_softcap(softcap, scale),
        sinks=sinks is not None, seqused_k=seqused_k is not None)
    if sinks is not None:
        check_sinks(problem, infos["sinks"][0])
    if mods is not None:   # a function's batch is the sequence, q_idx / kv_idx positions in it [varlen-mod-indices]
        fields, aux_infos = check_mods(*mods, problem.softcap)
        problem = replace(problem, **fields)
        infos.update({n: (i, x) for (n, i), x in zip(aux_infos.items(), mods[2] or ())})
    check_varlen_outputs(problem, infos["out"][0] if out is not None else None,
                         infos["lse"][0] if lse is not None else None)
    return problem, infos


__all__ = ["flash_attn_varlen_func", "varlen_launch", "varlen_grid", "check_grid", "GRID_ENV", "GRIDS"]
