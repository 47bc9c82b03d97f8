"""Launch one decode call a few times for a profiler (runs on the GPU machine from a bundle):

    FA4MLIR_BUNDLE=$PWD/bundle PYTHONPATH=$PWD ncu --metrics <list> -k regex:"attention|combine" \\
        --launch-skip 2 --launch-count 2 python3 bench/profile_decode.py FP8 RAGGED PAGE

FP8, RAGGED: 0 or 1; PAGE: 0 (contiguous) or a page size. The shapes are bench/decode_ragged.py's (B 64, 32
query heads over 8 KV heads, D 128; ragged: lengths [1024, 16384] of seed 7, else 8192 each). The metric
list used for notes/RESULTS.md `[M-decode-fp8-ncu]` is in bench/profile_decode.sh.
"""
import sys

import torch

import fa4mlir
from decode_ragged import mk

fp8, ragged, page = (int(x) for x in sys.argv[1:4])
q, k, v, lens, table, kw = mk(ragged, fp8, page)
for _ in range(4):
    fa4mlir.flash_attn_with_kvcache(q, k, v, lens, table, **kw)
torch.cuda.synchronize()
print("ok", int(lens.sum()))
