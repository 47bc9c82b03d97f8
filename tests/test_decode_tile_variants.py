"""Deviceless: the bf16 decode kernel's tile variants (attention_decode_sm90_config.TILE_VARIANTS, chosen by
FA4MLIR_DECODE_TILE_VARIANT; A/B candidates of issue #27's decode_dense bar): each in the
decode-fp8-variants set at bench decode's decode_dense shape (bf16 D128 contiguous, unsplit), with the SMEM
and CTAs per SM its table entry plans, compiled with no spill and no serialised wgmma; the plan and the call
path (plan_problem, configs_for) pick it from the knob, which the call cache keys on; what it is not built
for is a ConfigError before launch; and its numerics through the sm_90a interpreter (FA rule against the
float32 reference): three sequences (a partial last tile, several ring wraps, an empty one) of GQA group 4.
"""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir import compiler, kernel_sets
from fa4mlir.attention import kvcache as kc
from fa4mlir.attention import kvcache_call
from fa4mlir.attention.kvcache_call import configs_for
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.runtime import TensorInfo

NAMES = [n for n in dec.TILE_VARIANTS if n != "default" and n not in dec.BF16_SWEEP]   # BF16_SWEEP: test_decode_bf16_variants.py
B, H, HKV, D = 3, 8, 2, 128
LENGTHS = [300, 0, 37]       # 300: several tiles of every variant's bn (a partial last one), the 6-stage ring wrapped
CAPACITY = 320
NAN16 = 0x7FC0


def _variant(name: str) -> dec.DecodeConfig:
    return dec.tile_variant(dec.default_config("bf16", 128, None, unsplit=True), name)


def _info(a: np.ndarray, dtype: str) -> TensorInfo:
    return TensorInfo(1 << 20, a.shape, tuple(s // a.itemsize for s in a.strides), dtype, "cuda")


def _problem(q, k, v, lens):
    """The plan of one split (decode_dense's: the heuristic gives it there; a tiny batch would split)."""
    problem = kc.check_kvcache_inputs(_info(q, "bf16"), _info(k, "bf16"), _info(v, "bf16"), _info(lens, "i32"))
    return kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=1,
                                                return_lse=True), 132)


@pytest.mark.parametrize("name", NAMES)
def test_variant_is_in_the_set_with_its_planned_resources(name):
    cfg = _variant(name)
    fields, ctas = dec.TILE_VARIANTS[name]
    assert (cfg.bn, cfg.stages, cfg.box_rows, cfg.unsplit) == (fields["bn"], fields["stages"], fields["bn"], True)
    assert cfg.ctas_per_sm == ctas
    assert cfg.smem_bytes() <= (dec.MAX_SMEM_2CTA if ctas == 2 else dec.SMEM_LIMIT)
    assert (dec.KERNEL, cfg) in set(kernel_sets.SETS["decode-fp8-variants"]())
    art = compiler.build_and_lower(dec.KERNEL, cfg, compiler.resolve_options(dec.KERNEL), "test")
    res = art.resources
    # two CTAs per SM: 160 threads at most 204 registers (the kernel declares its CTAs per SM)
    assert res["spill_stores"] == 0 and res["stack_bytes"] == 0 and not res["wgmma_serialized"], res
    assert res["registers"] <= (204 if ctas == 2 else 255), res


def test_default_is_default_config_and_the_knob_is_in_the_call_key(monkeypatch):
    monkeypatch.delenv(dec.TILE_VARIANT_ENV, raising=False)
    assert dec.runtime_config("bf16", 128, None) == dec.default_config("bf16", 128, None)
    monkeypatch.setenv(dec.TILE_VARIANT_ENV, "default")
    assert dec.runtime_config("bf16", 128, 16) == dec.default_config("bf16", 128, 16)
    assert dec.TILE_VARIANT_ENV in kvcache_call._SIGNATURE_ENV


def test_what_a_variant_is_not_built_for_is_a_config_error(monkeypatch):
    monkeypatch.setenv(dec.TILE_VARIANT_ENV, "bn7")
    with pytest.raises(dec.ConfigError, match="unknown decode tile variant 'bn7'"):
        dec.runtime_config("bf16", 128, None)
    monkeypatch.setenv(dec.TILE_VARIANT_ENV, "bn128s3")
    with pytest.raises(dec.ConfigError, match="contiguous head_dim-128"):
        dec.runtime_config("bf16", 128, 16)                  # paged
    with pytest.raises(dec.ConfigError, match="contiguous head_dim-128"):
        dec.runtime_config("bf16", 64, None)
    with pytest.raises(dec.ConfigError, match="contiguous head_dim-128"):
        dec.runtime_config("bf16", 128, None, window_left=127)
    # an FP8 cache reads FA4MLIR_DECODE_FP8_VARIANT only: the tile knob leaves it alone
    assert dec.runtime_config("bf16", 128, None, "kv_head", rows=4) == dec.default_config("bf16", 128, None, "kv_head",
                                                                                          rows=4)
    with pytest.raises(dec.ConfigError, match="bf16/f16 caches"):
        dec.tile_variant(dec.default_config("bf16", 128, None, "kv_head"), "bn32s6")
    from fa4mlir.bench.decode_bench import split_variants
    assert split_variants(["default", "bn32s6", "balanced5"]) == (["default", "balanced5"], ["default", "bn32s6"])
    with pytest.raises(ValueError, match="unknown --decode-variant"):
        split_variants(["bn7"])


@pytest.mark.parametrize("name", NAMES)
def test_variant_through_the_interpreter(name, monkeypatch):
    torch = pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_decode_sm90 as decode_kernel
    from fa4mlir.testing import FaTally, attention_math
    from fa4mlir.testing_kvcache import kvcache_reference

    def bits(x):
        return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).copy()

    def bf16(b):
        return torch.from_numpy(b.view(np.int16)).view(torch.bfloat16)

    monkeypatch.setenv(dec.TILE_VARIANT_ENV, name)
    gen = torch.Generator().manual_seed(11)
    q = bits(torch.randn(B, 1, H, D, generator=gen))
    k, v = (torch.full((B, CAPACITY, HKV, D), float("nan")) for _ in range(2))     # NaN past the lengths
    for b, n in enumerate(LENGTHS):
        k[b, :n], v[b, :n] = torch.randn(n, HKV, D, generator=gen), torch.randn(n, HKV, D, generator=gen)
    k, v = bits(k), bits(v)
    lens = np.array(LENGTHS, np.int32)
    plan = _problem(q, k, v, lens)
    cfg, combine = configs_for(plan)
    assert plan.unsplit and combine is None and cfg == _variant(name) and plan.bn == cfg.bn
    out = np.full((B, 1, H, D), NAN16, np.uint16)
    lse = np.full((B, H, 1), np.nan, np.float32)
    tensors = {"q": q, "k_cache": k, "v_cache": v, "cache_seqlens": lens, "page_table": lens, "out": out,
               "lse": lse, "k_scale": lens, "v_scale": lens, "k_pool": k, "v_pool": v}
    args = dec.split_launch_args(plan, tensors, (H * D, H * D, D), 0)
    interpret.load(decode_kernel.build(cfg)).launch(plan.grid, args)
    got = bf16(out).double()
    ref = kvcache_reference(bf16(q).float(), bf16(k).float(), bf16(v).float(), torch.from_numpy(lens),
                            None, compute_dtype=np.float32)
    lse_t = torch.from_numpy(lse).double()
    assert not torch.isnan(got).any() and not torch.isnan(lse_t).any()
    assert (got[1] == 0).all() and torch.isposinf(lse_t[1]).all()      # length 0: no key seen
    tally = FaTally()
    for b, n in enumerate(LENGTHS):
        if n:
            low_o, low_l = attention_math(bf16(q)[b:b + 1], bf16(k)[b:b + 1, :n], bf16(v)[b:b + 1, :n], D ** -0.5,
                                          True, torch.bfloat16)
            tally.add(got[b], low_o[0].double(), ref["out"][b].double(), lse_t[b], low_l[0].double(),
                      ref["lse"][b].double())
    tally.check()


@pytest.mark.parametrize("name", NAMES)
def test_decode_dense_plans_the_set_kernel(name, monkeypatch):
    """bench decode's decode_dense (B=64, Sk=8192, 32 heads over 8 KV heads, D128) on 132 SMs: one split with the
    variant's tiles at either CTA count, so the set's unsplit kernel is the one a timed call loads."""
    monkeypatch.setenv(dec.TILE_VARIANT_ENV, name)

    def info(shape, dtype):
        strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        return TensorInfo(1 << 20, shape, strides, dtype, "cuda")
    problem = kc.check_kvcache_inputs(info((64, 1, 32, 128), "bf16"), info((64, 8192, 8, 128), "bf16"),
                                      info((64, 8192, 8, 128), "bf16"), info((64,), "i32"))
    plan = kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=None,
                                                return_lse=False), 132)
    cfg, combine = configs_for(plan)
    assert plan.unsplit and combine is None and cfg == _variant(name)
    assert (dec.KERNEL, cfg) in set(kernel_sets.SETS["decode-fp8-variants"]())
