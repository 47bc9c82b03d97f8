"""Deviceless: the softcap and sinks sm_90a attention variants compile like the default kernels do
(0 spills, no stack, wgmma not serialised), one of each per head dim of the gpu-tests SCORE_CASES;
the softcap kernels cap each score with the SFU's tanh (tanh.approx.f32: MUFU.TANH in SASS, the op
FlashAttention-3/4 use), the sink kernels have none."""
import pytest

from fa4mlir import lowering, sass
from fa4mlir.kernels import attention_fwd_sm90
from fa4mlir.kernels.attention_sm90_config import default_config
from fa4mlir.lowering import CompileOptions

CASES = [  # (dtype, head_dim, causal, softcap, sinks, cap: 0 the running-max softcap kernel, 30 the softcap rule's
    #         bf16 fixed-max one, common/softcap_rule.py)
    ("bf16", 64, False, True, False, 0.0),
    ("bf16", 128, False, True, False, 0.0),     # 128 x 144: the tightest register budget
    ("bf16", 256, True, True, False, 0.0),
    ("bf16", 64, False, True, False, 30.0),
    ("bf16", 128, False, True, False, 30.0),
    ("bf16", 256, True, True, False, 30.0),
    ("bf16", 64, True, False, True, 0.0),
    ("bf16", 128, True, False, True, 0.0),
    ("bf16", 256, True, False, True, 0.0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-d{c[1]}{'-causal' if c[2] else ''}"
                                                      f"{'-softcap' if c[3] else ''}{'-sinks' if c[4] else ''}"
                                                      f"{'-fixmax' if c[5] else ''}")
def test_score_variant_compiles_without_spills(case):
    dtype, d, causal, softcap, sinks, cap = case
    cfg = default_config(dtype, d, causal, softcap=softcap, sinks=sinks, cap=cap)
    assert cfg.softcap_fixed_max == bool(cap)
    art = lowering.lower(attention_fwd_sm90.build(cfg), CompileOptions(cubin_backend="ptxas"))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"], r
    assert 0 < r["registers"] <= 168 and r["smem_bytes"] <= 227 * 1024, r
    assert ("_softcap" in art.name) == softcap and ("_sink" in art.name) == sinks
    if sass.find_nvdisasm() is None:
        return
    tanh = sass.disassemble(art.cubin).count("MUFU.TANH")
    # each copy of the softmax (masked, unmasked) caps every S register of the thread (bn / 2)
    assert (tanh > 0 and tanh % (cfg.bn // 2) == 0) if softcap else tanh == 0, tanh
