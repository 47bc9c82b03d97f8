"""Deviceless: score_mod / mask_mod (kernels/common/score_mod.py) as part of the compile key, and their
kernels' code. Fingerprints change with the function's source, captured constants, helpers and
defaults, and only with them; the compile cache keys by them (a changed function recompiles, the same
one hits); unsupported functions raise ModFunctionError; the built-in examples compile with 0 spills;
and softcap as a built-in score_mod compiles to the hand-written softcap kernel's PTX, instruction
for instruction (only the kernel's and one parameter's names differ)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from fa4mlir import lowering, sass
from fa4mlir.kernels import attention_fwd_sm90
from fa4mlir.kernels.attention_sm90_config import AttnConfig, default_config, launch_params
from fa4mlir.kernels.common import score_mod as sm
from fa4mlir.kernels.common.fields import ConfigError
from fa4mlir.lowering import CompileOptions

BIAS = 0.5


def _bias(score, batch, head, q_idx, kv_idx):
    return score + BIAS


def _make(c):
    def add_c(score, batch, head, q_idx, kv_idx):
        return score + c
    return add_c


def _helper(x):
    return x * 2.0


def _uses_helper(score, batch, head, q_idx, kv_idx):
    return _helper(score)


def test_fingerprint_is_stable_and_follows_source_constants_and_helpers():
    assert sm.fingerprint(_bias) == sm.fingerprint(_bias)
    assert sm.fingerprint(_bias).startswith("_bias_".strip("_"))
    # closure constants
    assert sm.fingerprint(_make(1.0)) != sm.fingerprint(_make(2.0))
    assert sm.fingerprint(_make(1.0)) == sm.fingerprint(_make(1.0))
    # globals it names
    global BIAS
    before = sm.fingerprint(_bias)
    BIAS = 0.25
    try:
        assert sm.fingerprint(_bias) != before
    finally:
        BIAS = 0.5
    # helpers, recursively
    global _helper
    before, old = sm.fingerprint(_uses_helper), _helper
    _helper = lambda x: x * 3.0   # noqa: E731
    try:
        assert sm.fingerprint(_uses_helper) != before
    finally:
        _helper = old
    # score vs mask kind and a lambda without a source line of its own
    assert sm.fingerprint(_bias, "score") != sm.fingerprint(_bias, "mask")
    ns: dict = {}
    exec("f = lambda score, b, h, q, kv: score * 2.0", ns)   # no source: the bytecode
    exec("g = lambda score, b, h, q, kv: score * 3.0", ns)
    assert sm.fingerprint(ns["f"]) != sm.fingerprint(ns["g"])
    assert sm.registered(sm.fingerprint(_bias)) is _bias


def test_unsupported_functions_raise_mod_function_error():
    with pytest.raises(sm.ModFunctionError, match="must take 5"):
        sm.as_mod(lambda score, b, h: score, "score")
    with pytest.raises(sm.ModFunctionError, match="must take 4"):
        sm.as_mod(lambda score, b, h, q, kv, aux, extra: score, "mask")
    with pytest.raises(sm.ModFunctionError, match=r"\*args"):
        sm.as_mod(lambda *a: a[0], "score")

    def gen(score, b, h, q, kv):
        yield score
    with pytest.raises(sm.ModFunctionError, match="generator"):
        sm.as_mod(gen, "score")
    table = [1.0, 2.0]   # a list (a tensor alike): must come through aux_tensors
    with pytest.raises(sm.ModFunctionError, match="aux_tensors"):
        sm.as_mod(lambda score, b, h, q, kv: score + table[0], "score")
    with pytest.raises(sm.ModFunctionError, match="mask_mod"):
        sm.as_mod(sm.softcap_score_mod(2.0), "mask")
    with pytest.raises(sm.ModFunctionError, match="cap"):
        sm.softcap_score_mod(-1.0)
    with pytest.raises(LookupError, match="fingerprint"):
        sm.registered("nope_0000000000000000")


def test_python_control_flow_on_kernel_values_is_a_typed_build_error():
    def branchy(score, b, h, q, kv):
        return score if score else score * 2.0
    cfg = default_config("bf16", 64, False, score_mod=sm.fingerprint(branchy))
    with pytest.raises(sm.ModFunctionError, match="no `if`"):
        attention_fwd_sm90.build(cfg)

    def wrong_type(b, h, q, kv):
        return q
    cfg = default_config("bf16", 64, False, mask_mod=sm.fingerprint(wrong_type, "mask"))
    with pytest.raises(sm.ModFunctionError, match="must return i1"):
        attention_fwd_sm90.build(cfg)


def test_config_checks_and_contract():
    fp = sm.fingerprint(_bias)
    with pytest.raises(ConfigError, match="softcap"):
        AttnConfig(softcap=True, score_mod=fp).validate()
    with pytest.raises(ConfigError, match="aux"):
        AttnConfig(aux="f32x1").validate()
    with pytest.raises(ConfigError, match="aux spec"):
        AttnConfig(score_mod=fp, aux="f64x1").validate()
    cfg = default_config("bf16", 128, True, score_mod=fp, aux="f32x1,i32x2")
    names = [n for n, _ in launch_params(cfg)]
    assert names[-6:] == ["mod_scale", "aux0", "aux0_n0", "aux1", "aux1_n0", "aux1_n1"]
    # a default config's key has no mod fields (its compile-cache key and bundle entry stay as they were)
    assert not {"score_mod", "mask_mod", "aux"} & set(default_config("bf16", 128, True).key())
    assert AttnConfig.from_key(cfg.key()) == cfg
    assert f"_sm_{fp}" in attention_fwd_sm90.build(cfg).name


def test_compile_cache_recompiles_a_changed_function_only(tmp_path):
    from fa4mlir.cache import KernelCache
    from fa4mlir.compiler import compile_kernel, key_for, resolve_options
    cache = KernelCache(tmp_path, enabled=True)
    opts = resolve_options("attention_fwd_sm90")
    one, two = (default_config("bf16", 64, False, score_mod=sm.fingerprint(_make(c))) for c in (1.0, 2.0))
    assert key_for("attention_fwd_sm90", one, opts) != key_for("attention_fwd_sm90", two, opts)
    a = compile_kernel("attention_fwd_sm90", one, opts, cache)
    again = compile_kernel("attention_fwd_sm90", default_config("bf16", 64, False,
                                                                 score_mod=sm.fingerprint(_make(1.0))), opts, cache)
    b = compile_kernel("attention_fwd_sm90", two, opts, cache)
    assert a.cubin_sha256 == again.cubin_sha256 and a.key == again.key
    assert a.cubin_sha256 != b.cubin_sha256      # the constant is compiled in
    assert len(list(tmp_path.rglob("*.json"))) >= 2 or len(list(tmp_path.iterdir())) >= 2


def _set_kernels():
    from fa4mlir import kernel_sets
    return [c for _, c, *_ in kernel_sets.configs(["score-mods", "prefill"]) if getattr(c, "score_mod", "")
            or getattr(c, "mask_mod", "")]


@pytest.mark.parametrize("cfg", _set_kernels(), ids=lambda c: f"d{c.head_dim}{'-causal' if c.causal else ''}"
                         f"-{c.bm}x{c.bn}{'-pers' if c.persistent else ''}-{c.score_mod[:8]}-{c.mask_mod[:8]}")
def test_set_kernels_compile_without_spills(cfg):
    """Every score_mod / mask_mod kernel of the score-mods and prefill bundle sets."""
    art = lowering.lower(attention_fwd_sm90.build(cfg), CompileOptions(cubin_backend="ptxas"))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"], r


@pytest.mark.parametrize("head_dim,causal", [(128, False), (64, False), (64, True), (128, True)])
def test_softcap_score_mod_is_the_hand_written_softcap_kernel(head_dim, causal):
    """[D-score-mod]: the built-in's fold (pre_scale 1 / cap, post_scale cap) gives the same PTX as
    AttnConfig.softcap's running-max kernel, so the same SASS: same softmax loop, same instruction counts.
    The PTX is compared without score_bias_init (default_config's for every score_mod, [D-bias-init]: its
    build-time probe of a function that is not an affine bias leaves dead ops in the PTX), the SASS loops
    with it: the kernel a call runs."""
    fp = sm.softcap_score_mod(30.0).fingerprint()
    mod_cfg = default_config("bf16", head_dim, causal, score_mod=fp)
    assert mod_cfg.score_bias_init
    texts = []
    for cfg in (default_config("bf16", head_dim, causal, softcap=True), replace(mod_cfg, score_bias_init=False),
                mod_cfg):
        kir = attention_fwd_sm90.build(cfg)
        ptx, _ = lowering.lower_module(kir.module, "sm_90a")
        texts.append(ptx.replace(kir.name, "KERNEL").replace("softcap_scale", "SCALE").replace("mod_scale", "SCALE"))
    assert texts[0] == texts[1]
    if sass.find_nvdisasm() is None or lowering.find_ptxas() is None:
        return
    loops = []
    for text in (texts[0], texts[2]):
        cubin, _ = lowering.ptx_to_cubin_ptxas(text, "sm_90a")
        loops.append([[op for op, _ in loop] for loop in sass.wgmma_loops(sass.disassemble(cubin))])
    assert loops[0] == loops[1] and loops[0]
    assert sum(op.startswith("MUFU.TANH") for loop in loops[1] for op in loop) > 0


shape = [1, 2]   # a module global that shares an attribute's name: not captured by `.shape`


def test_attribute_names_are_not_captured_globals():
    def reads_shape(score, batch, head, q_idx, kv_idx, aux_tensors):
        return score + aux_tensors[0][head, aux_tensors[0].shape[1] - 1]
    sm.as_mod(reads_shape, "score")   # `shape` the global list is not what the function reads


def test_fingerprint_cache_follows_a_rebound_closure():
    def outer():
        c = 1.0

        def f(score, batch, head, q_idx, kv_idx):
            return score + c

        def rebind(value):
            nonlocal c
            c = value
        return f, rebind
    f, rebind = outer()
    first = sm.fingerprint(f)
    assert sm.fingerprint(f) == first          # cached
    rebind(2.0)
    assert sm.fingerprint(f) != first          # the cell holds another object: recomputed
    rebind(1.0)
    assert sm.fingerprint(f) == first
