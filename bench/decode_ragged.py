"""Where the FP8 paged decode loses against the dense one: paging vs ragged lengths vs split count (runs on
the GPU machine from a bundle: FA4MLIR_BUNDLE=bundle PYTHONPATH=. python3 bench/decode_ragged.py).

decode_bench's shapes (B 64, 32 query heads over 8 KV heads, D 128, seqlen_q 1, bf16 q), uniform lengths
8192 or decode_paged's ragged ones (seed 7, [1024, 16384]), contiguous or pages of 16, bf16 or e4m3 with
per-KV-head scales, num_splits default / 1 / 4 / 8; triton do_bench median (no L2 flush), Gtok/s =
cached tokens per second. notes/RESULTS.md [R-decode-chunk-splits] cites its first run.
"""
import torch
import triton

import fa4mlir
from fa4mlir.bench.decode_bench import _paged
H, HK, D, B = 32, 8, 128, 64
def mk(ragged, fp8, page):
    torch.manual_seed(0)
    if ragged:
        gen = torch.Generator(device="cpu").manual_seed(7)
        smax = 16384
        lens = torch.randint(1024, smax + 1, (B,), generator=gen).to("cuda", torch.int32)
    else:
        smax = 8192
        lens = torch.full((B,), smax, dtype=torch.int32, device="cuda")
    q = torch.randn(B, 1, H, D, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(B, smax, HK, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(B, smax, HK, D, dtype=torch.bfloat16, device="cuda")
    kw = {}
    if fp8:
        ks = k.float().abs().amax(dim=(0, 1, 3)) / 448
        vs = v.float().abs().amax(dim=(0, 1, 3)) / 448
        k = (k.float() / ks.view(1, 1, HK, 1)).to(torch.float8_e4m3fn)
        v = (v.float() / vs.view(1, 1, HK, 1)).to(torch.float8_e4m3fn)
        kw = dict(k_scale=ks, v_scale=vs)
    table = None
    if page:
        if fp8:
            kp, vp, table = _paged(torch, k.view(torch.uint8), v.view(torch.uint8), page)
            k, v = kp.view(torch.float8_e4m3fn), vp.view(torch.float8_e4m3fn)
        else:
            k, v, table = _paged(torch, k, v, page)
    return q, k, v, lens, table, kw


def main():
    for fp8 in (False, True):
        for ragged in (False, True):
            for page in (0, 16):
                q, k, v, lens, table, kw = mk(ragged, fp8, page)
                tok = int(lens.sum())
                for ns in (None, 1, 4, 8):
                    try:
                        def f(q=q, k=k, v=v, lens=lens, table=table, ns=ns, kw=kw):
                            return fa4mlir.flash_attn_with_kvcache(q, k, v, lens, table, num_splits=ns, **kw)
                        f()
                        torch.cuda.synchronize()
                        ms = triton.testing.do_bench(f, warmup=200, rep=500)
                        print(f"fp8={fp8:d} ragged={ragged:d} page={page:3d} splits={ns!s:4s} {ms*1e3:8.1f} us {tok/ms/1e6:7.3f} Gtok/s", flush=True)
                    except Exception as e:
                        print(f"fp8={fp8:d} ragged={ragged:d} page={page:3d} splits={ns!s:4s} ERR {str(e)[:150]}", flush=True)
                del q, k, v
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
