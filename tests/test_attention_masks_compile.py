"""Deviceless: the sliding-window and chunked sm_90a attention variants compile like the unmasked
kernels do (0 spills, no stack, wgmma not serialised). One kernel per head dim of the gpu-tests
MASK_CASES (the windowed and chunked loops differ from the causal one only in their block ranges
and masked edges, so one per head dim covers their register pressure)."""
import pytest

from fa4mlir import lowering
from fa4mlir.kernels import attention_fwd_sm90
from fa4mlir.kernels.attention_sm90_config import default_config
from fa4mlir.kernels.common.mask_family import attention_mask
from fa4mlir.lowering import CompileOptions

CASES = [  # (dtype, head_dim, causal, window, chunk): one per head dim, window, chunk and both
    ("bf16", 64, False, (128, 64), 0),
    ("bf16", 128, True, (100, -1), 96),
    ("bf16", 256, True, (300, -1), 0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-d{c[1]}-w{c[3][0]}_{c[3][1]}-c{c[4]}")
def test_masked_variant_compiles_without_spills(case):
    dtype, d, causal, window, chunk = case
    cfg = default_config(dtype, d, causal, mask=attention_mask(causal, window, chunk))
    assert cfg.mask is not None and (cfg.window_left, cfg.chunk) != (-1, 0), cfg
    art = lowering.lower(attention_fwd_sm90.build(cfg), CompileOptions(cubin_backend="ptxas"))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"], r
    assert 0 < r["registers"] <= 168 and r["smem_bytes"] <= 227 * 1024, r
