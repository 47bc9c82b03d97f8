"""Launch one MLA kernel a few times for a profiler (runs on the GPU machine from a bundle):

    FA4MLIR_BUNDLE=$PWD/bundle PYTHONPATH=$PWD ncu --metrics <list> -k regex:mla --launch-skip 2 \\
        --launch-count 1 python3 bench/profile_mla.py decode HEADS SEQLEN_Q | sparse | sparse_decode [fp8]

decode: bench mla's mla_decode shapes (batch 128 x 4096 cached tokens, pages of 64, shuffled table, bf16,
causal); sparse: mla_sparse's with s_q 1024 instead of 4096 (the same kernel, a quarter of the grid);
sparse_decode [fp8]: bench mla's mla_sparse_decode (fp8: mla_sparse_decode_fp8) row, its default backend.
The metric list used for notes/RESULTS.md `[M-mla-ncu]` is in bench/profile_mla.sh.
"""
import sys

import torch
import fa4mlir

DEV = "cuda"
what = sys.argv[1]
torch.manual_seed(0)
if what == "decode":
    heads, sq = int(sys.argv[2]), int(sys.argv[3])
    b, n, page = 128, 4096, 64
    pages = b * n // page
    cache = torch.randn(pages, page, 1, 576, dtype=torch.bfloat16, device=DEV) / 4
    table = torch.randperm(pages, device=DEV).to(torch.int32).view(b, n // page)
    seqlens = torch.full((b,), n, dtype=torch.int32, device=DEV)
    q = torch.randn(b, sq, heads, 576, dtype=torch.bfloat16, device=DEV) / 4
    meta = fa4mlir.get_mla_metadata(seqlens, sq * heads, 1)
    def f():
        return fa4mlir.flash_mla_with_kvcache(q, cache, table, seqlens, 512, meta[0], meta[1], causal=True)
elif what == "sparse":
    s_q, h, s_kv, topk = 1024, 128, 32768, 2048
    q = torch.randn(s_q, h, 576, dtype=torch.bfloat16, device=DEV) / 10
    kv = torch.randn(s_kv, 1, 576, dtype=torch.bfloat16, device=DEV) / 10
    idx = torch.rand(s_q, s_kv, device=DEV).topk(topk, dim=-1).indices.to(torch.int32).view(s_q, 1, topk)
    def f():
        return fa4mlir.flash_mla_sparse_fwd(q, kv, idx, 576 ** -0.5, 512)
elif what == "sparse_decode":
    from fa4mlir.bench.mla_bench import mla_sparse_decode_rows
    row, = mla_sparse_decode_rows(torch, None, fp8=sys.argv[2:3] == ["fp8"])
    f = row.backends["fa4mlir"]()
else:
    sys.exit(f"unknown case {what!r}: decode HEADS SEQLEN_Q | sparse | sparse_decode [fp8]")
for _ in range(4):
    f()
torch.cuda.synchronize()
print("ok", what)
