"""`python -m fa4mlir bench decode`: flash_attn_with_kvcache on the serving anchors' decode workloads.

The workloads of ../shared/anchors/anchors_serving.py, same shapes and seeds (bf16, D128, 32 query
heads over 8 KV heads):
    decode_dense       B=64, Sq=1, Sk=8192 (contiguous cache)
    decode_paged_P     B=64, Sq=1, lengths 1k..16k (seeded), shuffled pages of P in 16, 64, 128 (and 1:
                       SGLang's token-level pages, not an anchor workload)
    decode_spec4       B=32, Sq=4, Sk=4096, causal bottom-right
    decode_*_fp8       the same cache in e4m3 with per-KV-head scales (fa4mlir only; the rate counts the
                       bytes the kernel must read: 1 byte per e4m3 element plus the float32 scales, so
                       compare FP8 with bf16 by `tokens_per_s`, which every result carries)
timed in one process on the same tensors with one timer (fa4mlir.bench.timers: heated, then
triton do_bench's median, `--rounds` times in turn, the median kept): fa4mlir, FlashAttention-4 CuTe
(flash_attn.cute's flash_attn_func, or flash_attn_varlen_func with page_table and seqused_k, when it
imports), and torch SDPA's cuDNN and FA2 backends on the dense workloads (a paged cache has no dense
equivalent of the same work; decode_spec4 passes SDPA the bottom-right mask). Rate: K/V bytes read
per second, counting only the tokens each sequence holds, K and V once (bytes per element of the
cache's own dtype); `tokens_per_s` is cached tokens attended per second (the sum of the
sequences' lengths over the time), the same for every dtype. Every backend's output is
checked against a float32 reference on a sample of sequences. `--splits 2,4,8` also times
fa4mlir with num_splits forced to each (the data the split heuristic is to be set from).
`--decode-variant default,smem,swapab` also times, on the *_fp8 workloads, fa4mlir with each FP8
kernel variant (attention_decode_sm90_config.FP8_VARIANTS, chosen per call through
FA4MLIR_DECODE_FP8_VARIANT, part of the call cache's key) as backends `fa4mlir[NAME]` (a bundle
must hold them: `python -m fa4mlir bundle --set decode-fp8-variants`); names of the bf16 tile variants
(attention_decode_sm90_config.TILE_VARIANTS, through FA4MLIR_DECODE_TILE_VARIANT, also in the call
cache's key) time on decode_dense the same way (each name goes to the workloads its table is for;
"default" to both; `--set decode-bf16-variants` holds decode_dense's default kernel and every tile variant:
`--workloads decode_dense --decode-variant default,bn64s3`). JSON to --out (default decode-bench.json).
"""
from __future__ import annotations

import json
import math
import statistics
import time

WORKLOADS = ("decode_dense", "decode_paged_16", "decode_paged_64", "decode_paged_128", "decode_paged_1",
             "decode_spec4", "decode_dense_fp8", "decode_paged_16_fp8")
H, HK, D = 32, 8, 128


def _ref(torch, q, k, v, scale, mask=None):
    qq, kk, vv = (x.float().transpose(1, 2) for x in (q, k, v))
    kk = kk.repeat_interleave(q.shape[2] // k.shape[2], 1)
    vv = vv.repeat_interleave(q.shape[2] // k.shape[2], 1)
    s = qq @ kk.transpose(-1, -2) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return (torch.softmax(s, -1) @ vv).transpose(1, 2)


def _causal(torch, sq, sk):
    i = torch.arange(sq, device="cuda")[:, None] + (sk - sq)
    return torch.arange(sk, device="cuda")[None, :] <= i


def _paged(torch, k, v, page):
    """anchors_serving.paged: scatter k, v [B, Smax, Hk, D] into a shuffled pool."""
    import torch.nn.functional as F
    b, smax, hk, d = k.shape
    per = math.ceil(smax / page)
    perm = torch.randperm(b * per, device="cuda")
    table = perm.view(b, per).to(torch.int32)
    if k.dtype.is_floating_point:
        kp = torch.randn(b * per, page, hk, d, dtype=k.dtype, device="cuda")
        vp = torch.randn(b * per, page, hk, d, dtype=v.dtype, device="cuda")
    else:   # FP8 codes (as uint8)
        kp = torch.zeros(b * per, page, hk, d, dtype=k.dtype, device="cuda")
        vp = torch.zeros(b * per, page, hk, d, dtype=v.dtype, device="cuda")
    kp[table.long()] = F.pad(k, (0, 0, 0, 0, 0, per * page - smax)).view(b, per, page, hk, d)
    vp[table.long()] = F.pad(v, (0, 0, 0, 0, 0, per * page - smax)).view(b, per, page, hk, d)
    return kp, vp, table


def _first(x):
    return x[0] if isinstance(x, tuple) else x


def workload(torch, name: str, fa4, splits=(), variants=()):
    """(backends {label: fn}, K/V bytes, cached tokens, check(out) -> max error) of one workload;
    ``variants``: FP8 decode variants to time too (the *_fp8 workloads)."""
    import torch.nn.functional as F
    import fa4mlir
    from torch.nn.attention import SDPBackend, sdpa_kernel
    bf = torch.bfloat16
    torch.manual_seed(0)
    fa4_func, fa4_varlen = fa4 or (None, None)
    backends = {}
    fp8_names, tile_names = split_variants(variants)
    if name.endswith("_fp8"):
        return _fp8_workload(torch, name[:-4], fp8_names, splits)
    if name in ("decode_dense", "decode_spec4"):
        b, sq, sk = (64, 1, 8192) if name == "decode_dense" else (32, 4, 4096)
        q = torch.randn(b, sq, H, D, dtype=bf, device="cuda")
        k = torch.randn(b, sk, HK, D, dtype=bf, device="cuda")
        v = torch.randn(b, sk, HK, D, dtype=bf, device="cuda")
        lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
        mask = _causal(torch, sq, sk)
        want = _ref(torch, q[:2], k[:2], v[:2], D ** -0.5, mask)
        backends["fa4mlir"] = lambda: fa4mlir.flash_attn_with_kvcache(q, k, v, lens, causal=True)
        if name in ("decode_dense", "decode_spec4"):    # the tile variants' kernel (contiguous, D128, unsplit)
            from ..kernels.attention_decode_sm90_config import TILE_VARIANT_ENV
            backends.update({f"fa4mlir[{n}]": _with_variant(backends["fa4mlir"], n, TILE_VARIANT_ENV)
                             for n in tile_names})
        for n in splits:
            backends[f"fa4mlir(s={n})"] = lambda n=n: fa4mlir.flash_attn_with_kvcache(q, k, v, lens, num_splits=n)
        if fa4_func:
            backends["fa4cute"] = lambda: _first(fa4_func(q, k, v, causal=True))
        for label, be in (("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa-fa2", SDPBackend.FLASH_ATTENTION)):
            def sdpa(be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(
                        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True,
                        attn_mask=None if sq == 1 else mask).transpose(1, 2)
            backends[label] = sdpa
        total = b * sk
        check = lambda o: float((o[:2].float() - want).abs().max())   # noqa: E731
    else:
        page = int(name.rsplit("_", 1)[1])
        gen = torch.Generator(device="cpu").manual_seed(7)
        b, smax = 64, 16384
        lens = torch.randint(1024, smax + 1, (b,), generator=gen).to("cuda", torch.int32)
        q = torch.randn(b, 1, H, D, dtype=bf, device="cuda")
        k = torch.randn(b, smax, HK, D, dtype=bf, device="cuda")
        v = torch.randn(b, smax, HK, D, dtype=bf, device="cuda")
        kp, vp, table = _paged(torch, k, v, page)
        n = int(lens[0])
        want = _ref(torch, q[:1], k[:1, :n], v[:1, :n], D ** -0.5)
        del k, v
        backends["fa4mlir"] = lambda: fa4mlir.flash_attn_with_kvcache(q, kp, vp, lens, table, causal=True)
        for n in splits:
            backends[f"fa4mlir(s={n})"] = lambda n=n: fa4mlir.flash_attn_with_kvcache(q, kp, vp, lens, table,
                                                                                    num_splits=n)
        if fa4_varlen:
            backends["fa4cute"] = lambda: _first(fa4_varlen(q, kp, vp, page_table=table, seqused_k=lens, causal=True))
        total = int(lens.sum())
        check = lambda o: float((o[:1].float() - want).abs().max())   # noqa: E731
    return backends, kv_bytes(total, 2), total, check


def kv_bytes(tokens: int, elem_bytes: int, scale_floats: int = 0) -> int:
    """The K/V bytes a decode must read: K and V of ``tokens`` cached tokens once, at ``elem_bytes``
    per element (2: bf16/f16, 1: e4m3), plus ``scale_floats`` float32 scales (FP8)."""
    return 2 * tokens * HK * D * elem_bytes + 4 * scale_floats


def split_variants(names) -> tuple[list, list]:
    """--decode-variant's names as (FP8_VARIANTS names: the *_fp8 workloads', TILE_VARIANTS names: decode_dense's);
    "default" is in both; ValueError for a name in neither table."""
    from ..kernels.attention_decode_sm90_config import FP8_VARIANTS, TILE_VARIANTS
    unknown = [n for n in names if n not in FP8_VARIANTS and n not in TILE_VARIANTS]
    if unknown:
        raise ValueError(f"unknown --decode-variant {unknown}: FP8 variants {list(FP8_VARIANTS)}, bf16 tile variants "
                         f"{list(TILE_VARIANTS)}")
    return [n for n in names if n in FP8_VARIANTS], [n for n in names if n in TILE_VARIANTS]


def _with_variant(call, name: str, env: str = ""):
    """``call`` run with ``env`` (default FA4MLIR_DECODE_FP8_VARIANT; FA4MLIR_DECODE_TILE_VARIANT for a tile
    variant) = name (the call cache keys on both), restored after."""
    import os

    from ..kernels.attention_decode_sm90_config import FP8_VARIANT_ENV
    env = env or FP8_VARIANT_ENV

    def run():
        before = os.environ.get(env)
        os.environ[env] = name
        try:
            return call()
        finally:
            if before is None:
                del os.environ[env]
            else:
                os.environ[env] = before
    return run


def _fp8_workload(torch, base: str, variants=(), splits=()):
    """``base``'s shapes and seeds with the cache in e4m3 and per-KV-head scales: fa4mlir only (and
    ``variants``, FP8 kernel variants, as `fa4mlir[NAME]`; ``splits``, num_splits forced, as
    `fa4mlir(s=N)` with the default kernel: [D-decode-fp8-swapab]'s paged-16 question), checked against a float32 reference
    over the dequantised rows; the rate counts e4m3 bytes (1 per element) plus the k and v scales
    (HK float32 each)."""
    import fa4mlir
    bf = torch.bfloat16
    torch.manual_seed(0)
    paged = base.startswith("decode_paged")
    if paged:
        page = int(base.rsplit("_", 1)[1])
        gen = torch.Generator(device="cpu").manual_seed(7)
        b, smax = 64, 16384
        lens = torch.randint(1024, smax + 1, (b,), generator=gen).to("cuda", torch.int32)
    else:
        b, smax = 64, 8192
        lens = torch.full((b,), smax, dtype=torch.int32, device="cuda")
    q = torch.randn(b, 1, H, D, dtype=bf, device="cuda")
    k = torch.randn(b, smax, HK, D, dtype=bf, device="cuda")
    v = torch.randn(b, smax, HK, D, dtype=bf, device="cuda")
    k_scale = k.float().abs().amax(dim=(0, 1, 3)) / 448
    v_scale = v.float().abs().amax(dim=(0, 1, 3)) / 448
    k8 = (k.float() / k_scale.view(1, 1, HK, 1)).to(torch.float8_e4m3fn)
    v8 = (v.float() / v_scale.view(1, 1, HK, 1)).to(torch.float8_e4m3fn)
    n = int(lens[0])
    deq = lambda x8, s: (x8[:1, :n].float() * s.view(1, 1, HK, 1)).to(bf)   # noqa: E731
    want = _ref(torch, q[:1], deq(k8, k_scale), deq(v8, v_scale), D ** -0.5)
    del k, v
    if paged:
        kp, vp, table = _paged(torch, k8.view(torch.uint8), v8.view(torch.uint8), page)
        kc, vc = kp.view(torch.float8_e4m3fn), vp.view(torch.float8_e4m3fn)
        del k8, v8
        call = lambda n=None: fa4mlir.flash_attn_with_kvcache(q, kc, vc, lens, table, k_scale=k_scale,   # noqa: E731
                                                              v_scale=v_scale, num_splits=n)
    else:
        call = lambda n=None: fa4mlir.flash_attn_with_kvcache(q, k8, v8, lens, k_scale=k_scale,   # noqa: E731
                                                              v_scale=v_scale, num_splits=n)
    total = int(lens.sum())
    backends = {"fa4mlir": call, **{f"fa4mlir[{n}]": _with_variant(call, n) for n in variants}}
    backends.update({f"fa4mlir(s={n})": (lambda n=n: call(n)) for n in splits})
    return (backends, kv_bytes(total, 1, 2 * HK), total,
            lambda o: float((o[:1].float() - want).abs().max()))


def import_fa4():
    try:
        from flash_attn.cute.interface import flash_attn_func, flash_attn_varlen_func
        return (flash_attn_func, flash_attn_varlen_func), {"available": True}
    except Exception as e:  # noqa: BLE001
        return None, {"available": False, "error": f"{type(e).__name__}: {e}"[:300]}


def run(args) -> int:
    import torch

    from .timers import make_timer
    if args.bundle:
        import os
        os.environ["FA4MLIR_BUNDLE"] = args.bundle
    timer, timer_desc = make_timer(args.warmup_ms, args.rep_ms, args.timer == "auto", args.heat_ms)
    fa4, fa4_info = (None, {"available": False, "error": "--no-fa4"}) if args.no_fa4 else import_fa4()
    names = [n for n in (args.workloads or "").split(",") if n] or list(WORKLOADS)
    results = []
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for name in names:
        try:
            splits = [int(x) for x in (args.splits or "").split(",") if x]
            variants = [x for x in (getattr(args, "decode_variant", "") or "").split(",") if x]
            backends, nbytes, tokens, check = workload(torch, name, fa4, splits, variants)
        except Exception as e:  # noqa: BLE001
            results.append({"workload": name, "error": f"setup {type(e).__name__}: {e}"[:300]})
            print(f"{name}: setup fails: {e}", flush=True)
            continue
        errs, live = {}, {}
        for label, fn in backends.items():
            try:
                errs[label] = check(fn())
                torch.cuda.synchronize()
                live[label] = fn
            except Exception as e:  # noqa: BLE001
                results.append({"workload": name, "backend": label, "error": f"{type(e).__name__}: {e}"[:300]})
                print(f"{name:18s} {label:12s} fails: {type(e).__name__}: {str(e)[:160]}", flush=True)
        times = {label: [] for label in live}
        for _ in range(max(1, args.rounds)):
            for label, fn in list(live.items()):
                try:
                    times[label].append(timer(fn))
                except Exception as e:  # noqa: BLE001  (a backend that fails while timed is dropped)
                    results.append({"workload": name, "backend": label, "error": f"{type(e).__name__}: {e}"[:300]})
                    del live[label]
        for label in live:
            ms = statistics.median(times[label])
            rate = nbytes / (ms * 1e-3) / 1e9
            tps = tokens / (ms * 1e-3)
            results.append({"workload": name, "backend": label, "ms": ms, "gbps": rate, "kv_bytes": nbytes,
                            "tokens": tokens, "tokens_per_s": tps, "max_err": errs[label], "times_ms": times[label]})
            print(f"{name:18s} {label:12s} {ms * 1e3:9.1f} us  {rate:8.1f} GB/s  {tps / 1e9:6.2f} Gtok/s  "
                  f"err {errs[label]:.3g}", flush=True)
        base = {r["backend"]: r["gbps"] for r in results if r.get("workload") == name and "gbps" in r}
        if "fa4mlir" in base:
            ratios = {k: round(base["fa4mlir"] / v, 3) for k, v in base.items() if k != "fa4mlir"}
            print(f"{name:18s} fa4mlir / other: {ratios}", flush=True)
        del backends, live
        torch.cuda.empty_cache()
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "timer": timer_desc,
                       "fa4_cute": fa4_info, "rounds": args.rounds, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "results": results}, f, indent=1)
    print(f"wrote {args.out}")
    return 0
