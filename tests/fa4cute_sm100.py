"""Compile FlashAttention-4 CuTe's sm_100a forward on a machine without a GPU and print its PTX's
path: `python -m tests.fa4cute_sm100 OUT_DIR` (needs the flash-attn-4 and nvidia-cutlass-dsl
packages; tests/test_interpret_fa4cute.py runs it in a subprocess and skips without them).

The configuration fa4mlir's FA4Config() shares with it: bf16, head dim 128, not causal, one CTA per
two 128-row Q tiles (FA_DISABLE_2CTA=1: no 2-CTA cluster), 128-key blocks. The tensors are fake
(torch's FakeTensorMode on device "cuda"): nothing runs; the CuTe DSL compiles to PTX and cubin and
keeps both in OUT_DIR. HardwareInfo's driver queries are answered with a B200's numbers.
"""
from __future__ import annotations

import glob
import os
import sys


def main(out_dir: str) -> None:
    os.environ.update(FLASH_ATTENTION_ARCH="sm_100", CUTE_DSL_ARCH="sm_100a", FLASH_ATTENTION_NUM_SMS="148",
                      CUTE_DSL_KEEP_PTX="1", CUTE_DSL_KEEP_CUBIN="1", CUTE_DSL_DUMP_DIR=out_dir, FA_DISABLE_2CTA="1")
    os.makedirs(out_dir, exist_ok=True)
    import cutlass.utils
    import torch
    from flash_attn.cute import flash_attn_func
    from torch._subclasses.fake_tensor import FakeTensorMode

    class B200:
        def get_device_multiprocessor_count(self):
            return 148

        def get_max_active_clusters(self, *args, **kwargs):
            return 148

        def get_l2_cache_size_in_bytes(self):
            return 126 * 2**20

    cutlass.utils.HardwareInfo = lambda *args, **kwargs: B200()
    with FakeTensorMode():
        q, k, v = (torch.empty(1, 512, 1, 128, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        flash_attn_func(q, k, v, causal=False)
    ptx = sorted(glob.glob(os.path.join(out_dir, "*FlashAttentionForwardSm100*.ptx")))
    if not ptx:
        raise SystemExit(f"no FlashAttentionForwardSm100 PTX in {out_dir}")
    print(ptx[-1])


if __name__ == "__main__":
    main(sys.argv[1])
