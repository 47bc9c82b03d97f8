"""`python -m fa4mlir bench mla`: multi-head latent attention (issue 29's benchmark).

The MLA workloads of ../shared/anchors/anchors_serving.py, same shapes and seeds (bf16):
    mla_prefill    B=2, S=8192, H=16, q and k [B, S, H, 192] (128 nope + 64 rope), v [B, S, H, 128],
                   causal; torch.manual_seed(0), then q, k, v drawn by torch.randn on the GPU in that order
    mla_decode     FlashMLA's dense decode benchmark shape (issue 29): batch 128, 4096 cached tokens per
                   sequence in a paged latent cache (page 64, a shuffled block table), one KV head of 576
                   (V = its first 512 columns), 16 / 64 / 128 query heads, seqlen_q 1 and 2 (causal);
                   rows mla_decode_h{16,64,128}_q{1,2}; get_mla_metadata + flash_mla_with_kvcache;
                   fa4mlir runs DEFAULT_RULE's kernel (swap AB on the 16-head rows, M64 on the others);
                   --mla-decode-variant m64,swapab also times backends fa4mlir[m64] and fa4mlir[swapab]
                   (swapab_ring: the swap-AB kernel over a ring of chunk stages)
                   (FA4MLIR_MLA_DECODE_VARIANT around each call; a variant only on the rows it is built
                   for: swapab and swapab_ring at seqlen_q x heads <= 32 over the 16-bit cache,
                   the 16-head rows; attention_mla_decode_sm90_config.DECODE_VARIANTS; every variant's
                   kernels: the mla set)
    mla_decode_fp8 the same over FlashMLA's FP8 latent cache (656-byte rows: the bf16 cache quantized
                   by FlashMLA's quantize_k_cache recipe, testing_mla.quantize_fp8_cache), bf16 q;
                   rows mla_decode_fp8_h{16,64,128}_q{1,2}; flash_mla_with_kvcache(is_fp8_kvcache=True),
                   checked against the dense equivalent over the dequantized rows
    mla_sparse     FlashMLA's sparse prefill shape: s_q 4096, 128 heads, topk 2048 distinct indices per
                   token into s_kv 32768 rows of [s_kv, 1, 576]; flash_mla_sparse_fwd (fa4mlir: over bf16
                   SPARSE_DEFAULT_RULE's seesaw in FlashMLA's pair-fill order with the producer warpgroup); also
                   backends fa4mlir[tile] (tile step, gather warp), fa4mlir[pwg] (tile step, producer warpgroup),
                   fa4mlir[seesaw] (seesaw, gather warp) and fa4mlir[seesaw_pwg] (the rule before the pair
                   fill: the seesaw in tile order, producer warpgroup), fa4mlir[seesaw_pairfill] (the pair fill) and
                   fa4mlir[seesaw_overlap] (the pair fill with the next pair's S_a under P_b V):
                   FA4MLIR_MLA_SPARSE_VARIANT and
                   _PRODUCER around each call (sparse_ab_calls)
    mla_sparse_fp8 the same over FlashMLA's FP8 rows (kv [s_kv, 1, 656], the bf16 kv quantized by
                   testing_mla.quantize_fp8_cache), checked over the dequantized rows
    mla_sparse_decode  FlashMLA's sparse decode benchmark shape (DeepSeek-V3.2, its
                   tests/test_flash_mla_sparse_decoding.py): batch 64, seqlen_q 2, 128 heads, topk 2048
                   distinct positions of each sequence's 32768 cached tokens (every length 32768: FlashMLA
                   draws them varlen), page 64, shuffled block tables; the indices are FlashMLA's cache
                   rows page x 64 + offset; bf16 latent cache (FlashMLA's is FP8);
                   get_mla_metadata(topk=) + flash_mla_with_kvcache(indices=); also mla_sparse's A/B backends
    mla_sparse_decode_fp8  the same over FlashMLA's FP8 latent cache (FlashMLA's own sparse decode
                   benchmark: the bf16 cache quantized by testing_mla.quantize_fp8_cache), bf16 q;
                   flash_mla_with_kvcache(is_fp8_kvcache=True, indices=), checked against the sparse
                   reference over the dequantized rows (fa4mlir: the converter-warpgroup kernel
                   FP8_DECODE_DEFAULT_RULE picks, as FP8_DECODE_CROSSOVER_RULE's crossover_stasync at these 128
                   heads); also fa4mlir[crossover], the rule's before it; also backend fa4mlir[gather], the kernel before the
                   rule (FA4MLIR_MLA_SPARSE_FP8_VARIANT=gather around each call), and fa4mlir[converter],
                   the plain converter (..._FP8_VARIANT=converter; the rule runs it over a cluster of a
                   token's two 64-head CTAs at these 128 heads), and fa4mlir[crossover_lean], the crossover
                   with its note "Lean hand-off" (..._FP8_VARIANT=crossover_lean; opt-in, the mla set), and
                   fa4mlir[crossover_stasync], crossover_lean with the converter's st.async hand-off
                   (..._FP8_VARIANT=crossover_stasync; the rule's at 128 heads, the mla set)
    mla_sparse_decode_fp8 also runs backend fa4mlir[seesaw]: the converter kernel on the seesaw step
                   (FA4MLIR_MLA_SPARSE_VARIANT=seesaw around each call; the mla-sparse-variants set)
A workload is a name in WORKLOADS and a builder in BUILDERS (rows of runner.Row). FlashMLA
itself is not installed on the GPU machine: the decode and sparse rows time fa4mlir alone, against
issue 29's absolute bars (FlashMLA's published H800 figures).

Backends, in one process on the same tensors: fa4mlir (flash_attn_func with q, k 192 wide and v 128:
the sm_90a kernel's head_dim_v), FlashAttention-4 CuTe (flash_attn.cute's flash_attn_func, when it
imports) and cuDNN (torch SDPA's CUDNN_ATTENTION backend, on contiguous [B, H, S, D] copies made
before timing). A backend that cannot run a row is recorded as `unsupported` or `error`
(runner.failure); neither stops the run.

Per row, as runner.measure_row does: every backend is made and called once into NaN-poisoned
memory and checked (max error of the last 256 query rows of batch 0, as the anchors slice it,
against a float32 reference, by the FA rule: at most 2x the error of torch's own bf16 computation of
the same slice, plus 1e-5; the NaN count of the whole output), timed `--rounds` times in turn with
fa4mlir.bench.timers' heated timer (median kept), then called and checked again.

TFLOP/s: FLOPs as anchors_serving counts them, 2·B·H·S²·(D_qk + D_v) / 2 for causal MLA prefill
(mla_flops; the same as attention_sm90_config.flops with head_dim_v); the decode and sparse rows as
FlashMLA's benchmarks count them (attention.mla.flops_and_bytes: 2 x query rows x cached tokens x
(576 + 512), and the bytes of the cache (FP8: 656 a token), q and out; attention.mla_sparse.flops: 2 x s_q x
topk x h_q x (576 + 512); attention.mla_sparse_decode.flops_and_bytes: 2 x h_q x b x s_q x topk x (576 +
512), and the bytes of q, out and the distinct cache rows the indices name, 1152 each in bf16 where
FlashMLA counts its 656-byte FP8 row, 656 in mla_sparse_decode_fp8); rows with a byte count also get
GB/s (`gbps` in the JSON).

JSON (schema "fa4mlir-mla-bench/1", --out, default mla-bench.json), written after every workload:
environment, timer, settings, `rows` (shape, FLOPs), `results` (one per row and backend: status
measured | unsupported | error). Exit code 1 when a measured fa4mlir result breaks the FA rule, else 0.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from . import runner
from .prefill_bench import CHECK_ROWS
from .runner import Row, format_result_line

SCHEMA = "fa4mlir-mla-bench/1"
MLA_PREFILL = dict(batch=2, seqlen=8192, heads=16, head_dim=192, head_dim_v=128, causal=True)
MLA_DECODE = dict(batch=128, cached=4096, page_size=64)
DECODE_HEADS, DECODE_QS = (16, 64, 128), (1, 2)
MLA_SPARSE = dict(s_q=4096, heads=128, topk=2048, s_kv=32768)
MLA_SPARSE_DECODE = dict(batch=64, seqlen_q=2, heads=128, topk=2048, cached=32768, page_size=64)
DECODE_ROWS = tuple(f"mla_decode_h{h}_q{sq}" for h in DECODE_HEADS for sq in DECODE_QS)
FP8_DECODE_ROWS = tuple(f"mla_decode_fp8_h{h}_q{sq}" for h in DECODE_HEADS for sq in DECODE_QS)
# workload (the --workloads names) -> its rows
WORKLOADS = {"mla_prefill": ("mla_prefill",), "mla_decode": DECODE_ROWS, "mla_decode_fp8": FP8_DECODE_ROWS,
             "mla_sparse": ("mla_sparse",), "mla_sparse_fp8": ("mla_sparse_fp8",),
             "mla_sparse_decode": ("mla_sparse_decode",),
             "mla_sparse_decode_fp8": ("mla_sparse_decode_fp8",)}


def parse_workloads(text: str | None) -> list[str]:
    """--workloads (comma-separated WORKLOADS names; empty: all), checked: ValueError names an
    unknown one."""
    names = list(dict.fromkeys(n.strip() for n in (text or "").split(",") if n.strip())) or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown mla workload(s) {unknown}; pick from {', '.join(WORKLOADS)}")
    return names


def mla_flops(batch: int, heads: int, seqlen: int, head_dim: int, head_dim_v: int, causal: bool = True) -> float:
    """anchors_serving's mla_prefill count: 2·B·H·S·S·(D_qk + D_v), halved when causal."""
    f = 2 * batch * heads * seqlen * seqlen * (head_dim + head_dim_v)
    return f / 2 if causal else f


def row_shape(row: str) -> tuple[dict, float]:
    """(shape for the JSON, FLOPs) of a row; the decode and sparse rows' shapes hold `bytes`, the
    bytes FlashMLA's benchmark counts."""
    if row == "mla_prefill":
        s = MLA_PREFILL
        return dict(s), mla_flops(s["batch"], s["heads"], s["seqlen"], s["head_dim"], s["head_dim_v"], s["causal"])
    if row in DECODE_ROWS or row in FP8_DECODE_ROWS:
        from ..attention.mla import flops_and_bytes
        fp8 = row in FP8_DECODE_ROWS
        heads, sq = (int(x[1:]) for x in row.split("_")[-2:])
        d = MLA_DECODE
        flops, data = flops_and_bytes(d["batch"], sq, heads, d["cached"], fp8=fp8)
        return dict(d, heads=heads, seqlen_q=sq, bytes=data, **({"kv": "fp8"} if fp8 else {})), float(flops)
    if row in ("mla_sparse", "mla_sparse_fp8"):
        from ..attention.mla_sparse import flops
        from ..kernels.attention_mla_sparse_sm90_config import FP8_ROW_BYTES
        d = MLA_SPARSE
        fp8 = row == "mla_sparse_fp8"
        row_bytes = FP8_ROW_BYTES if fp8 else 576 * 2       # FlashMLA's count, an FP8 kv row at its 656 bytes
        data = d["s_q"] * d["topk"] * row_bytes + d["s_q"] * d["heads"] * (576 + 512) * 2
        return dict(d, bytes=data, **({"kv": "fp8"} if fp8 else {})), float(flops(d["s_q"], d["heads"], d["topk"]))
    if row in ("mla_sparse_decode", "mla_sparse_decode_fp8"):
        from ..attention.mla_sparse_decode import flops_and_bytes
        from ..kernels.attention_mla_sparse_sm90_config import D_QK, FP8_ROW_BYTES
        fp8 = row == "mla_sparse_decode_fp8"
        d = MLA_SPARSE_DECODE
        flops, data = flops_and_bytes(d["batch"], d["seqlen_q"], d["heads"], sparse_decode_indices()[1],
                                      token_bytes=FP8_ROW_BYTES if fp8 else D_QK * 2)
        return dict(d, bytes=data, **({"kv": "fp8"} if fp8 else {})), float(flops)
    raise ValueError(f"unknown mla row {row!r}")


def sparse_decode_indices():
    """mla_sparse_decode's block table [batch, cached / page] (a shuffled page order) and indices
    [batch, seqlen_q, topk] int32 (numpy, seed 0): per query token topk distinct positions of its
    sequence, as FlashMLA's cache rows table[b, pos / page] x page + pos % page."""
    import numpy as np
    d = MLA_SPARSE_DECODE
    b, sq, topk, n, page = d["batch"], d["seqlen_q"], d["topk"], d["cached"], d["page_size"]
    rng = np.random.default_rng(0)
    table = rng.permutation(b * n // page).astype(np.int64).reshape(b, n // page)
    pos = np.stack([rng.choice(n, topk, replace=False) for _ in range(b * sq)]).reshape(b, sq, topk)
    rows = table[np.arange(b)[:, None, None], pos // page] * page + pos % page
    return table.astype(np.int32), rows.astype(np.int32)


# ----------------------------------------------------------------------------------------------
# The torch side (GPU machine): tensors, references, backends
# ----------------------------------------------------------------------------------------------

def _sdpa_cudnn(torch: Any, q, k, v) -> Callable[[], Callable[[], Any]]:
    """torch SDPA's cuDNN backend, causal, on contiguous [B, H, S, D] copies made before timing."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def make():
        qh, kh, vh = (x.transpose(1, 2).contiguous() for x in (q, k, v))

        def call():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qh, kh, vh, is_causal=True).transpose(1, 2)
        return call
    return make


def mla_prefill_rows(torch: Any, fa4=None, tiles=()) -> list[Row]:
    """mla_prefill's row: anchors_serving.w_mla_prefill's tensors (seed 0; q, k, v in that order).
    `tiles`: FA4MLIR_PREFILL_TILES specs, each timed as fa4mlir[spec] (--prefill-tiles)."""
    from .decode_bench import _first
    from .prefill_workloads import DEV, causal_mask, checker, poisoner, with_tiles
    s = MLA_PREFILL
    b, n, h, d, dv = s["batch"], s["seqlen"], s["heads"], s["head_dim"], s["head_dim_v"]
    torch.manual_seed(0)
    q = torch.randn(b, n, h, d, dtype=torch.bfloat16, device=DEV)
    k = torch.randn(b, n, h, d, dtype=torch.bfloat16, device=DEV)
    v = torch.randn(b, n, h, dv, dtype=torch.bfloat16, device=DEV)
    check = checker(torch, lambda o: o[:1, -CHECK_ROWS:], (q[:1, -CHECK_ROWS:], k[:1], v[:1], d ** -0.5),
                    mask=causal_mask(torch, CHECK_ROWS, n))

    def fa4mlir_call():
        import fa4mlir
        return lambda: fa4mlir.flash_attn_func(q, k, v, causal=True)

    backends = {"fa4mlir": fa4mlir_call, **{f"fa4mlir[{spec}]": with_tiles(fa4mlir_call, spec) for spec in tiles}}
    if fa4 is not None:
        fa4_func = fa4[0]
        backends["fa4cute"] = lambda: (lambda: _first(fa4_func(q, k, v, causal=True)))
    backends["sdpa-cudnn"] = _sdpa_cudnn(torch, q, k, v)
    shape, flops = row_shape("mla_prefill")
    return [Row("mla_prefill", "mla_prefill", shape, flops, backends, check,
                poisoner(torch, b * n * h * dv, torch.bfloat16))]


def mla_decode_rows(torch: Any, fa4=None, fp8: bool = False, variants=()) -> list[Row]:
    """mla_decode's rows: one bf16 latent cache (batch 128 x 4096 tokens in pages of 64, a shuffled
    block table; seed 0) and, per (heads, seqlen_q), q drawn after it; causal (bottom-right). Checked
    on sequence 0 against the dense equivalent (its 4096 rows gathered: MQA over K = the rows, V = their
    first 512 columns) by the FA rule. fp8 (mla_decode_fp8): the cache quantized to FlashMLA's FP8
    layout, the check over its rows dequantized as the kernel does. `variants` (--mla-decode-variant,
    attention.mla.VARIANTS): each also timed as fa4mlir[variant] on the rows it runs."""
    from ..attention.mla import VARIANTS
    from ..kernels.attention_mla_decode_sm90_config import variant_runs
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown --mla-decode-variant {unknown}; pick from {VARIANTS}")
    import fa4mlir
    from .prefill_workloads import DEV, causal_mask, checker, poisoner
    d = MLA_DECODE
    b, n, page = d["batch"], d["cached"], d["page_size"]
    pages = b * n // page
    torch.manual_seed(0)
    cache = torch.randn(pages, page, 1, 576, dtype=torch.bfloat16, device=DEV) / 4
    table = torch.randperm(pages, device=DEV).to(torch.int32).view(b, n // page)
    seqlens = torch.full((b,), n, dtype=torch.int32, device=DEV)
    if fp8:
        from ..testing_mla import dequantize_fp8_cache, quantize_fp8_cache
        cache = quantize_fp8_cache(cache)
        k0 = dequantize_fp8_cache(cache[table[0].long()]).reshape(1, n, 1, 576)
    else:
        k0 = cache[table[0].long()].reshape(1, n, 1, 576)             # sequence 0's rows, in order
    rows = []
    for heads in DECODE_HEADS:
        for sq in DECODE_QS:
            q = torch.randn(b, sq, heads, 576, dtype=torch.bfloat16, device=DEV) / 4
            meta = fa4mlir.get_mla_metadata(seqlens, sq * heads, 1, is_fp8_kvcache=fp8)
            check = checker(torch, lambda o: o[:1], (q[:1], k0, k0[..., :512], 576 ** -0.5),
                            mask=causal_mask(torch, sq, n))

            def call(q=q, meta=meta):
                return lambda: fa4mlir.flash_mla_with_kvcache(q, cache, table, seqlens, 512, meta[0], meta[1],
                                                              causal=True, is_fp8_kvcache=fp8)[0]   # out (lse too)
            name = f"mla_decode{'_fp8' if fp8 else ''}_h{heads}_q{sq}"
            shape, flops = row_shape(name)
            backends = {"fa4mlir": call}
            for v in variants:
                if variant_runs(v, sq, heads, fp8):
                    backends[f"fa4mlir[{v}]"] = lambda call=call, v=v: with_decode_variant(call(), v)
            rows.append(Row(name, "mla_decode_fp8" if fp8 else "mla_decode", shape, flops, backends, check,
                            poisoner(torch, b * sq * heads * 512, torch.bfloat16)))
    return rows


def mla_decode_fp8_rows(torch: Any, fa4=None, variants=()) -> list[Row]:
    """mla_decode_fp8's rows (mla_decode_rows with fp8)."""
    return mla_decode_rows(torch, fa4, fp8=True, variants=variants)


def with_env(name: str, value: str, run: Callable[[], Any]) -> Callable[[], Any]:
    """``run`` called with the environment variable ``name`` = ``value`` (a knob the call cache keys on),
    restored after."""
    def call():
        before = os.environ.get(name)
        os.environ[name] = value
        try:
            return run()
        finally:
            if before is None:
                del os.environ[name]
            else:
                os.environ[name] = before
    return call


def with_decode_variant(run: Callable[[], Any], variant: str) -> Callable[[], Any]:
    """``run`` called with FA4MLIR_MLA_DECODE_VARIANT=variant, restored after."""
    from ..attention.mla import VARIANT_ENV
    return with_env(VARIANT_ENV, variant, run)


def _sparse_check(torch: Any, q, kv, indices, scale: float, tokens: int = 32) -> Callable[[Any], dict]:
    """check(out) of flash_mla_sparse_fwd's (out, max_logits, lse) on its first `tokens` tokens:
    testing_mla.sparse_reference in float32 against the kernel's out, by the FA rule against the
    same reference in bf16; the NaN count of the whole output."""
    from ..testing import fa_rule
    from ..testing_mla import sparse_reference
    qs, kvs, ix = q[:tokens].cpu(), kv.cpu(), indices[:tokens].cpu()     # sparse_reference: CPU tensors
    want = sparse_reference(qs, kvs, ix, scale, torch.float32)[0].float()
    torch_err = float((sparse_reference(qs, kvs, ix, scale, torch.bfloat16)[0].float() - want).abs().max())

    def check(result) -> dict:
        out = result[0]
        err = float((out[:tokens].float().cpu() - want).abs().max())
        nan = int(torch.isnan(out).sum())
        ok, bound = fa_rule(err, torch_err)
        return {"max_err": err, "torch_err": torch_err, "bound": bound, "fa_rule_ok": ok and nan == 0, "nan_out": nan}
    return check


def mla_sparse_rows(torch: Any, fa4=None, fp8: bool = False) -> list[Row]:
    """mla_sparse's row: q [4096, 128, 576], kv [32768, 1, 576] (bf16, /10 as FlashMLA draws them),
    2048 distinct random indices per token (seed 0). fp8 (mla_sparse_fp8): kv quantized to FlashMLA's
    656-byte rows, checked over the dequantized rows."""
    import fa4mlir
    from .prefill_workloads import DEV, poisoner
    d = MLA_SPARSE
    torch.manual_seed(0)
    q = torch.randn(d["s_q"], d["heads"], 576, dtype=torch.bfloat16, device=DEV) / 10
    kv = torch.randn(d["s_kv"], 1, 576, dtype=torch.bfloat16, device=DEV) / 10
    indices = torch.empty(d["s_q"], 1, d["topk"], dtype=torch.int32, device=DEV)
    for i in range(0, d["s_q"], 256):   # distinct rows per token, in chunks (a [4096, 32768] draw is 512 MiB)
        indices[i:i + 256, 0] = torch.rand(256, d["s_kv"], device=DEV).topk(d["topk"], dim=-1).indices.to(torch.int32)
    scale = 576 ** -0.5
    name = "mla_sparse_fp8" if fp8 else "mla_sparse"
    if fp8:
        from ..testing_mla import dequantize_fp8_cache, quantize_fp8_cache
        packed = quantize_fp8_cache(kv.view(d["s_kv"], 1, 1, 576))
        kv = dequantize_fp8_cache(packed).view(d["s_kv"], 1, 576)       # what the kernel reads, for the check
        operand = packed.view(d["s_kv"], 1, 656)
    else:
        operand = kv
    check = _sparse_check(torch, q, kv, indices, scale)
    shape, flops = row_shape(name)
    call = {"fa4mlir": lambda: (lambda: fa4mlir.flash_mla_sparse_fwd(q, operand, indices, scale, 512))}
    if not fp8:     # the rule's halves apart, same tensors (sparse_ab_calls)
        call.update(sparse_ab_calls(call["fa4mlir"]))
    return [Row(name, name, shape, flops, call, check, poisoner(torch, d["s_q"] * d["heads"] * 512, torch.bfloat16))]


def mla_sparse_fp8_rows(torch: Any, fa4=None) -> list[Row]:
    """mla_sparse_fp8's row (mla_sparse_rows with fp8)."""
    return mla_sparse_rows(torch, fa4, fp8=True)


def mla_sparse_decode_rows(torch: Any, fa4=None, fp8: bool = False) -> list[Row]:
    """mla_sparse_decode's row: a bf16 latent cache of batch x 32768 tokens (/10 as FlashMLA draws
    them; seed 0), q [64, 2, 128, 576], sparse_decode_indices. Checked on sequence 0 (its rows
    gathered to the CPU) by _sparse_check. fp8 (mla_sparse_decode_fp8): the cache quantized to
    FlashMLA's FP8 rows (the bf16 one freed), checked over the dequantized rows."""
    import fa4mlir
    from .prefill_workloads import DEV, poisoner
    d = MLA_SPARSE_DECODE
    b, sq, h, topk, n, page = (d[k] for k in ("batch", "seqlen_q", "heads", "topk", "cached", "page_size"))
    _, rows = sparse_decode_indices()
    torch.manual_seed(0)
    cache = torch.randn(b * n // page, page, 1, 576, dtype=torch.bfloat16, device=DEV) / 10
    q = torch.randn(b, sq, h, 576, dtype=torch.bfloat16, device=DEV) / 10
    if fp8:
        from ..testing_mla import quantize_fp8_cache
        cache = quantize_fp8_cache(cache)
    indices = torch.from_numpy(rows).to(DEV)
    seqlens = torch.full((b,), n, dtype=torch.int32, device=DEV)
    meta = fa4mlir.get_mla_metadata(seqlens, sq * h, 1, h, is_fp8_kvcache=fp8, topk=topk)
    scale = 576 ** -0.5
    named = torch.unique(indices[0].flatten().long())              # sequence 0's rows, remapped 0..
    if fp8:
        from ..testing_mla import dequantize_fp8_cache
        rows8 = cache.view(torch.uint8).view(-1, 1, 1, 656)[named]      # as bytes: float8 indexing is not everywhere
        kv0 = dequantize_fp8_cache(rows8).view(-1, 1, 576)
    else:
        kv0 = cache.view(-1, 1, 576)[named]
    local = torch.searchsorted(named, indices[0].long()).to(torch.int32).view(sq, 1, topk)
    check = _sparse_check(torch, q[0], kv0, local, scale, tokens=sq)
    name = "mla_sparse_decode_fp8" if fp8 else "mla_sparse_decode"
    shape, flops = row_shape(name)
    call = {"fa4mlir": lambda: (lambda: fa4mlir.flash_mla_with_kvcache(q, cache, None, None, 512, meta[0], meta[1],
                                                                       is_fp8_kvcache=fp8, indices=indices))}
    if fp8:     # the gather kernel (the default before FP8_DECODE_DEFAULT_RULE) beside the default, same tensors
        call["fa4mlir[gather]"] = lambda: with_fp8_variant("gather", call["fa4mlir"]())
        # the plain converter (the rule runs FlashMLA's crossover at these 128 heads: FP8_DECODE_CROSSOVER_RULE)
        call["fa4mlir[converter]"] = lambda: with_fp8_variant("converter", call["fa4mlir"]())
        # the crossover with the converter's cluster-scope hand-off (the rule's before crossover_stasync), same tensors
        call["fa4mlir[crossover]"] = lambda: with_fp8_variant("crossover", call["fa4mlir"]())
        # the crossover with its note "Lean hand-off" (opt-in FP8 variant crossover_lean), same tensors
        call["fa4mlir[crossover_lean]"] = lambda: with_fp8_variant("crossover_lean", call["fa4mlir"]())
        # crossover_lean with the converter's st.async hand-off (its note "st.async hand-off"), same tensors
        call["fa4mlir[crossover_stasync]"] = lambda: with_fp8_variant("crossover_stasync", call["fa4mlir"]())
        # the seesaw step over the FP8 cache (the converter kernel's, one split), same tensors
        call["fa4mlir[seesaw]"] = lambda: with_sparse_variant("seesaw", call["fa4mlir"]())
    else:       # the rule's halves apart, same tensors (sparse_ab_calls)
        call.update(sparse_ab_calls(call["fa4mlir"]))

    def check_row(result) -> dict:      # out [0]: sequence 0 by the rule; NaN over the whole out
        r = check((result[0][0],))
        nan = int(torch.isnan(result[0]).sum())
        return dict(r, nan_out=nan, fa_rule_ok=r["fa_rule_ok"] and nan == 0)
    return [Row(name, name, shape, flops, call, check_row, poisoner(torch, b * sq * h * 512, torch.bfloat16))]


def with_fp8_variant(name: str, run: Callable[[], Any]) -> Callable[[], Any]:
    """``run`` called with FA4MLIR_MLA_SPARSE_FP8_VARIANT=name, restored after: backends fa4mlir[gather],
    fa4mlir[converter] and the crossover's of mla_sparse_decode_fp8
    (attention_mla_sparse_sm90_config.FP8_DECODE_VARIANTS)."""
    from ..attention.mla_sparse_decode import VARIANT_ENV
    return with_env(VARIANT_ENV, name, run)


def sparse_ab_calls(default: Callable[[], Any]) -> dict:
    """The 16-bit sparse rows' A/B backends beside the rule's kernel (SPARSE_DEFAULT_RULE over bf16: the seesaw with
    FlashMLA's fill order of a pair's halves and the next pair's S_a under P_b V, seesaw_overlap, and the producer
    warpgroup; fa4mlir[seesaw_pairfill] the rule before it), both knobs set around
    each call: fa4mlir[tile] the kernel before the seesaw rules (tile step, gather warp), fa4mlir[pwg] the producer
    warpgroup on the tile step, fa4mlir[seesaw] the seesaw with the gather warp, fa4mlir[seesaw_pwg] the rule before
    [D-mla-sparse-pairfill-default] (the seesaw in tile order with the producer warpgroup), fa4mlir[seesaw_overlap] the
    rule's kernel (the prefill's; the decode's rule keeps the pair fill) with warpgroup 0 issuing the next pair's S_a
    under its P_b V."""
    def both(variant: str, producer: str) -> Callable[[], Any]:
        return lambda: with_sparse_variant(variant, with_producer(producer, default()))
    return {"fa4mlir[tile]": both("tile", "warp"), "fa4mlir[pwg]": both("tile", "warpgroup"),
            "fa4mlir[seesaw]": both("seesaw", "warp"), "fa4mlir[seesaw_pwg]": both("seesaw", "warpgroup"),
            "fa4mlir[seesaw_pairfill]": both("seesaw_pairfill", "warpgroup"),
            "fa4mlir[seesaw_overlap]": both("seesaw_overlap", "warpgroup")}


def with_producer(name: str, run: Callable[[], Any]) -> Callable[[], Any]:
    """``run`` called with FA4MLIR_MLA_SPARSE_PRODUCER=name, restored after: backend fa4mlir[pwg] of mla_sparse
    and mla_sparse_decode (attention_mla_sparse_sm90_config.PRODUCER_VARIANTS)."""
    from ..kernels.attention_mla_sparse_sm90_config import PRODUCER_ENV
    return with_env(PRODUCER_ENV, name, run)


def with_sparse_variant(name: str, run: Callable[[], Any]) -> Callable[[], Any]:
    """``run`` called with FA4MLIR_MLA_SPARSE_VARIANT=name, restored after: backend fa4mlir[seesaw] of
    mla_sparse and mla_sparse_decode (attention_mla_sparse_sm90_config.SPARSE_VARIANTS)."""
    from ..attention.mla_sparse import VARIANT_ENV
    return with_env(VARIANT_ENV, name, run)


def mla_sparse_decode_fp8_rows(torch: Any, fa4=None) -> list[Row]:
    """mla_sparse_decode_fp8's row (mla_sparse_decode_rows with fp8)."""
    return mla_sparse_decode_rows(torch, fa4, fp8=True)


# workload -> builder(torch, fa4) -> rows
BUILDERS = {"mla_prefill": mla_prefill_rows, "mla_decode": mla_decode_rows, "mla_decode_fp8": mla_decode_fp8_rows,
            "mla_sparse": mla_sparse_rows, "mla_sparse_fp8": mla_sparse_fp8_rows,
            "mla_sparse_decode": mla_sparse_decode_rows,
            "mla_sparse_decode_fp8": mla_sparse_decode_fp8_rows}


# ----------------------------------------------------------------------------------------------
# JSON (pure)
# ----------------------------------------------------------------------------------------------

REQUIRED_KEYS = ("schema", "created", "device", "environment", "timer", "fa4_cute", "settings", "rows", "results",
                 "complete")
ROW_KEYS = ("row", "workload", "shape", "flops")


def new_result(*, device: str, environment: dict, timer: dict, fa4_cute: dict, settings: dict) -> dict:
    return runner.new_result(SCHEMA, device=device, environment=environment, timer=timer,
                             backends={"fa4_cute": fa4_cute}, settings=settings)


def validate_result(result: Any) -> dict:
    """Raise ValueError naming what is missing when `result` is not an mla-bench result."""
    return runner.validate_result(result, SCHEMA, "an mla bench result", REQUIRED_KEYS, ROW_KEYS,
                                  "fa4mlir.bench.mla_bench")


def save_result(result: dict, path: str | os.PathLike) -> None:
    runner.save_result(result, path, validate_result)


def load_result(path: str | os.PathLike) -> dict:
    return runner.load_result(path, validate_result)


def _line(r: dict) -> str:
    """runner.format_result_line, and GB/s where the row counts bytes (decode, sparse)."""
    return format_result_line(r) + (f"  {r['gbps']:7.0f} GB/s" if r.get("gbps") else "")


def format_tables(result: dict) -> str:
    return "\n".join(runner.table_lines(result, "mla, bf16", _line))


def _gbps(row: Row, rec: dict) -> None:
    """GB/s of a measured record whose row counts bytes (decode, sparse)."""
    if rec.get("ms") and row.shape.get("bytes"):
        rec["gbps"] = row.shape["bytes"] / (rec["ms"] * 1e-3) / 1e9


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------

def run(args) -> int:
    """`python -m fa4mlir bench mla` (its flags: fa4mlir/__main__.py)."""
    session = runner.start(args, "mla", parse_workloads)
    if isinstance(session, int):
        return session
    torch, fa4 = session.torch, session.fa4
    result = new_result(device=session.device, environment=session.environment, timer=session.timer_desc,
                        fa4_cute=session.fa4_info, settings={"workloads": session.names, "rounds": args.rounds,
                                                             "bundle": os.environ.get("FA4MLIR_BUNDLE")})
    print(f"mla bench: {result['device']}, torch {torch.__version__}, FA4-CuTe {'yes' if fa4 else 'no'}, "
          f"workloads {session.names}", flush=True)
    tiles = [x.strip() for x in (getattr(args, "prefill_tiles", "") or "").split(";") if x.strip()]
    variants = [x.strip() for x in (getattr(args, "mla_decode_variant", "") or "").split(",") if x.strip()]
    kw = {"mla_prefill": {"tiles": tiles}, "mla_decode": {"variants": variants}, "mla_decode_fp8": {"variants": variants}}
    for name in session.names:
        runner.run_group(session, result, name, WORKLOADS[name], lambda name=name: BUILDERS[name](torch, fa4, **kw.get(name, {})),
                         args.rounds, row_entry=lambda row: {"row": row.name, "workload": row.workload,
                                                             "shape": row.shape, "flops": row.flops},
                         line=_line, annotate=_gbps)
        save_result(result, args.out)
    return runner.finish(result, args.out, save_result, format_tables)
