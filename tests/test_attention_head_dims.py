"""Deviceless: head dims 96 and 192 and the unequal qk / v head dims (192 / 128, MLA prefill) of the
sm_90a prefill kernel: SMEM layouts (TileLayout), the config's canonical head_dim_v, its key and
default tiles, the register and SMEM plans, the launch contract, bundle selection and the host
checks (typed errors before launch). Compiles: tests/test_attention_compile.py (the attention set
holds every case); numerics: tests/test_interpret_head_dims.py; GPU: tests/gpu/test_attention_head_dims_gpu.py."""
from __future__ import annotations

import pytest

from fa4mlir.attention import AttnProblem
from fa4mlir.attention.checks import check_inputs, check_out
from fa4mlir.attention.errors import HeadDimError, ShapeError
from fa4mlir.attention.plan import select_entry
from fa4mlir.kernel_sets import HEAD_DIM_CASES, configs
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels.attention_sm90_config import AttnConfig, ConfigError, default_config, default_configs, tile_layout
from fa4mlir.runtime import TensorInfo


def test_tile_layouts_use_the_64_byte_swizzle_only_for_96():
    assert tile_layout(96) == (96, 64) and (tile_layout(96).chunk, tile_layout(96).chunks) == (32, 3)
    assert tile_layout(96).tma_swizzle == "64B"
    for d in (64, 128, 192, 256):
        lay = tile_layout(d)
        assert (lay.swizzle, lay.chunk, lay.chunks, lay.tma_swizzle) == (128, 64, d // 64, "128B")
    mla = default_config("bf16", 192, True, head_dim_v=128)
    assert (mla.qk_tile.chunks, mla.v_tile.chunks) == (3, 2)


def test_head_dim_v_has_one_spelling_per_kernel():
    assert AttnConfig(head_dim=192, head_dim_v=128, bn=128).validate().dim_v == 128
    with pytest.raises(ConfigError, match="equal dims are spelled head_dim_v=0"):
        AttnConfig(head_dim=192, head_dim_v=192, bn=112).validate()
    for d, dv in ((128, 64), (192, 64), (256, 128), (96, 64)):
        with pytest.raises(ConfigError, match=r"head_dim_v must be 0 .* \(\(192, 128\),\)"):
            AttnConfig(head_dim=d, head_dim_v=dv, bn=64).validate()
    # default_config takes equal dims spelled either way, and refuses other pairs
    assert default_config("bf16", 192, False, head_dim_v=192) == default_config("bf16", 192, False)
    with pytest.raises(ValueError, match=r"\(head_dim, head_dim_v\) must be equal or one of"):
        default_config("bf16", 128, False, head_dim_v=64)


def test_keys_of_equal_head_dims_do_not_name_head_dim_v():
    """Kernels of equal dims keep their keys (bundles and the kernel cache); a pair's key names it
    and round-trips."""
    for cfg in default_configs("bf16", 128, False) + default_configs("f16", 96, True):
        assert "head_dim_v" not in cfg.key() and AttnConfig.from_key(cfg.key()) == cfg
    mla = default_config("bf16", 192, True, head_dim_v=128)
    assert mla.key()["head_dim_v"] == 128 and AttnConfig.from_key(mla.key()) == mla
    assert "head_dim_v" not in acfg.KNOB_FIELDS


@pytest.mark.parametrize("dtype, d, dv, causal", HEAD_DIM_CASES)
def test_default_tiles_fit_smem_and_the_register_model(dtype, d, dv, causal):
    """FA3's tiles where it has them (D192: 128 x 112; 192 / 128: 128 x 128), D128's at D96; each
    fits 227 KiB of SMEM and its consumers' setmaxnreg budget by the model (ptxas: 0 spills,
    tests/test_attention_compile.py)."""
    for cfg in default_configs(dtype, d, causal, head_dim_v=dv):
        assert cfg.bm == 128 and cfg.smem_bytes() <= 227 * 1024
        assert cfg.consumer_regs_needed <= cfg.consumer_regs
        assert cfg.consumer_register_parts()["O"] == (dv or d) // 2
        row, vrow = 2 * d, 2 * (dv or d)
        assert cfg.smem_bytes() == (cfg.q_stages * cfg.bm * row + (cfg.bm * vrow if cfg.persistent else 0)
                                    + cfg.stages * cfg.bn * (row + vrow) + 1024)
    assert (default_config(dtype, 192, causal).bn, default_config(dtype, 192, causal, head_dim_v=128).bn) == (112, 128)


def test_the_equal_192_tile_is_the_most_keys_two_stages_fit():
    """128 x 112 is FA3's D192 tile: 128 x 128 with two K/V stages needs more than 227 KiB."""
    with pytest.raises(ConfigError, match="SMEM"):
        AttnConfig(head_dim=192, bn=128).validate()


def test_launch_contract_and_l2_sections_count_v_at_its_own_width():
    mla = default_config("bf16", 192, True, head_dim_v=128)
    problem = AttnProblem.of((1, 8192, 16, 192), (1, 8192, 16, 192), "bf16", causal=True)
    args = acfg.launch_args(mla, problem, {n: n for n in ("q", "k", "v", "o", "lse")})
    assert list(args) == [n for n, _ in acfg.LAUNCH_PARAMS] and args["scale_log2"] == pytest.approx(
        192 ** -0.5 * 1.4426950408889634)
    # K and V of one KV head: 8192 x (192 + 128) x 2 bytes; 0.6 x 50 MiB holds 6 of them: 4 heads per section
    assert acfg.section_shift(mla, problem) == 2
    assert acfg.section_shift(default_config("bf16", 192, True), problem) == 2
    assert acfg.flops(2, 16, 8192, 8192, 192, True, head_dim_v=128) == 2 * 2 * 16 * 8192 * 8192 * 320 / 2


def _info(shape, dtype="bf16"):
    strides, acc = [], 1
    for n in reversed(shape):
        strides.insert(0, acc)
        acc *= max(n, 1)
    return TensorInfo(0x7F0000000000, tuple(shape), tuple(strides), dtype, "cuda")


def test_host_checks_accept_the_pairs_and_refuse_others_typed():
    q, k = _info((2, 100, 8, 192)), _info((2, 60, 2, 192))
    p = check_inputs(q, k, _info((2, 60, 2, 128)))
    assert (p.head_dim, p.head_dim_v, p.dim_v, p.out_shape) == (192, 128, 128, (2, 100, 8, 128))
    check_out(p, _info((2, 100, 8, 128)))
    with pytest.raises(ShapeError, match="out must have q's shape with v's head_dim 128"):
        check_out(p, _info((2, 100, 8, 192)))
    equal = check_inputs(q, k, _info((2, 60, 2, 192)))
    assert equal.head_dim_v == 0 and equal.out_shape == (2, 100, 8, 192)
    assert check_inputs(*(_info((1, 64, 1, 96)),) * 3).head_dim == 96
    with pytest.raises(HeadDimError, match=r"v has head_dim 64; unequal head dims are supported only as"):
        check_inputs(q, k, _info((2, 60, 2, 64)))
    with pytest.raises(HeadDimError, match=r"q and k have head_dim 128 and v has head_dim 192"):
        check_inputs(_info((2, 100, 8, 128)), _info((2, 60, 2, 128)), _info((2, 60, 2, 192)))
    with pytest.raises(ShapeError, match=r"k and v must have the same shape in \[batch, seqlen_k, kv_heads\]"):
        check_inputs(q, k, _info((2, 61, 2, 128)))
    with pytest.raises(ShapeError, match="head_dim differs: q has head_dim 192, k has head_dim 128"):
        check_inputs(q, _info((2, 60, 2, 128)), _info((2, 60, 2, 128)))


def _entry(cfg, **config):
    return {"arch": "sm_90a", "name": "attention_fwd_sm90", "key": "k" * 16, "config": {**cfg.key(), **config}}


def test_bundle_selection_tells_the_pair_from_equal_192_and_reads_old_keys_as_equal():
    equal, mla = default_config("bf16", 192, True), default_config("bf16", 192, True, head_dim_v=128)
    entries = [_entry(equal), _entry(mla)]
    assert select_entry(entries, "bf16", 192, True, default=mla)["config"]["head_dim_v"] == 128
    assert "head_dim_v" not in select_entry(entries, "bf16", 192, True, default=equal)["config"]
    with pytest.raises(LookupError, match=r"head_dim_v=128.*head_dim_v and score_mod/mask_mod fingerprints are compile-time"):
        select_entry([_entry(equal)], "bf16", 192, True, default=mla)


def test_sets_hold_every_case_once():
    """attention holds the equal dims and the pairs (flash_attn_func's bundle), head-dims the test
    cases (gpu-tests holds it), mla the bench's kernel (bench holds it)."""
    attention = {c for _, c, *_ in configs(["attention"])}
    head_dims = [c for _, c, *_ in configs(["head-dims"])]
    assert len(head_dims) == len(HEAD_DIM_CASES) == 12 and set(head_dims) <= attention
    assert {(c.dtype, c.head_dim, c.head_dim_v, c.causal) for c in head_dims} == set(HEAD_DIM_CASES)
    gpu = {c for _, c, *_ in configs(["gpu-tests"])}
    assert set(head_dims) <= gpu
    assert {c for _, c, *_ in configs(["mla"])} <= {c for _, c, *_ in configs(["bench"])}
