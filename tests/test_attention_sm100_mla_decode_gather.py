"""The sm_100a absorbed MLA decode over pages whose TMA boxes would hold under 16 rows (page 8, 24:
attention_sm100_mla_decode note "MLA gather"): warps 4-7 look each tile's pool rows up and copy the
1152-byte latent rows whole into the 128B-swizzled K stage. Proven without a Blackwell GPU: the config
(k a pointer, the lookup's 256 bytes of SMEM), compiled through nvJitLink LTO with 0 spills (the gather
warpgroup at 160 registers), the pipeline verifier, and the interpreter by the FA rule against float64
(NaN in every row no sequence owns, shuffled pages, lengths inside a page, split-KV merged by the combine's
host twin). Never run on a Blackwell GPU.
"""
from __future__ import annotations

import pytest

from _sm100_helpers import check_resources, compiled, role_budgets, sass_of, verify_pipelines
from fa4mlir.kernels.attention_sm100_config import FA4Config
from fa4mlir.kernels.common.mla_sm100 import decode_gather_configs

CONFIGS = decode_gather_configs(FA4Config)
KEY = "test-sm100-mla-decode-gather"


def _id(c: FA4Config) -> str:
    return f"h{c.num_q_heads}-page{c.page_size}{'-split' if c.split_kv else ''}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_plan(cfg):
    assert cfg.mla_decode and cfg.gather and cfg.supported() == (True, "")
    assert dict(cfg.launch_params)["k"] == "ptr" and "v" not in dict(cfg.launch_params)
    assert cfg.smem_plan()["gather_rows"] == 64 * 4 and cfg.smem_plan()["stages"] == 2


def test_fp8_pages_need_boxes():
    ok, why = FA4Config(**{**CONFIGS[0].__dict__, "kv_dtype": "e4m3", "kv_scale": "row"}).supported()
    assert not ok and "FP8 rows in pages of 8 (no 16-row boxes)" in why, why


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_compiles_with_zero_spills_and_verifies(cfg):
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    art, seconds = compiled(cfg, KEY)
    check_resources(cfg, art, seconds)
    assert role_budgets(sass_of(art)) == {192, 160, 80}, "softmax 192, gather 160, correction / MMA 80"
    verify_pipelines(k100.build(cfg).module)


@pytest.mark.parametrize("index,lengths,seqlen_q,num_splits", [
    (0, [7, 8, 70, 0], 2, 1),        # 16 heads x 2 MTP tokens causal; lengths inside / at a page, 2 blocks, none
    (1, [150, 25], 1, 2),            # 128 heads, pages of 24 (a tile's rows span 3-4 pages), 2 splits
], ids=["h16-page8-causal", "h128-page24-2splits"])
def test_interpreted_by_the_fa_rule(index, lengths, seqlen_q, num_splits):
    from test_attention_sm100_mla_decode import _interpret
    _interpret(CONFIGS[index], lengths, seqlen_q, num_splits=num_splits)


def test_verifier_rejects_the_gathers_dropped_commit():
    """The gather warpgroup's commit of the K stage erased: the verifier names pipe k."""
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.passes._util import PassError, attr, ops_named
    kir = k100.build(CONFIGS[0])
    ops = [o for o in ops_named(kir.module.operation, "fa4.producer_commit") if attr(o, "pipe") == "k"]
    assert len(ops) == 1
    ops[0].erase()
    with pytest.raises(PassError, match="'k'"):
        verify_pipelines(kir.module)
