"""Deviceless: chunked prefill over the paged KV cache on the sm_90a PREFILL kernel (AttnConfig.page_size,
kernels/attention_fwd_sm90_paged): the config's key and validation (page sizes by common.paging's
box-rows rule), the host's rule for which kernel runs a call (varlen_paged.py, note "Which kernel"),
compiles with 0 spills (kernel_sets.VARLEN_PAGED_PREFILL_CASES: page 16/64/128 D128 causal bf16,
full attention, f16), and numerics through the interpreter
(tests/interpret_varlen_paged.py PREFILL_CASES: shuffled page tables, lengths 0/1/page-1/page/page+1,
NaN in unused pages and past every length) by the FA rule against a float64 reference over the keys
gathered through the page table; packed rows past cu_seqlens_q[batch] untouched."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fa4mlir.kernel_sets import VARLEN_PAGED_PREFILL_CASES, VARLEN_PAGED_PREFILL_MOD_CASES, paged_prefill_mod_config
from fa4mlir.kernels.attention_sm90_config import AttnConfig
from fa4mlir.kernels.attention_sm90_config_varlen import paged_varlen_config, varlen_config
from fa4mlir.kernels.common.fields import ConfigError


def test_page_size_zero_keeps_every_key_and_name():
    base = varlen_config("bf16", 128, True)
    assert "page_size" not in base.key() and "page_size" not in AttnConfig().key()
    paged = replace(base, page_size=64).validate()
    assert paged.key()["page_size"] == 64 and paged.name_suffix().endswith("_page64")
    assert AttnConfig.from_key(paged.key()) == paged


@pytest.mark.parametrize("page,box", [(16, 16), (32, 32), (64, 64), (128, 128), (256, 128)])
def test_box_rows_rule(page, box):
    cfg = paged_varlen_config("bf16", 128, True, page)
    assert cfg is not None and cfg.bn == 128 and cfg.kv_box_rows == box
    assert cfg.load_regs == (40 if 128 // box > 2 else 0)


@pytest.mark.parametrize("page", [1, 7, 8, 12, 24, 40])
def test_other_page_sizes_are_refused(page):
    """Boxes of < 8 rows or not a multiple of 8 (8 rows at bn 128 is 16 boxes): the decode kernel's."""
    assert paged_varlen_config("bf16", 128, True, page) is None
    with pytest.raises(ConfigError, match="gcd"):
        replace(varlen_config("bf16", 128, True), page_size=page).validate()


def test_page_size_needs_varlen():
    with pytest.raises(ConfigError, match="varlen"):
        AttnConfig(page_size=64).validate()


def _problem(max_seqlen_q: int, page: int, head_dim: int = 128, **mods):
    from fa4mlir.attention.varlen_paged import VarlenPagedProblem
    from fa4mlir.attention.kvcache import KVCacheOperand
    cache = KVCacheOperand(True, "bf16", 64, page, 16, 8, head_dim)
    return VarlenPagedProblem(8, max_seqlen_q, 4096, 8 * max_seqlen_q, 32, head_dim, "bf16", cache,
                              mods.pop("causal", True), head_dim ** -0.5, True, **mods)


def test_which_kernel_rule():
    from fa4mlir.attention.varlen_paged import PREFILL_MIN_SEQLEN_Q, prefill_config
    assert prefill_config(_problem(PREFILL_MIN_SEQLEN_Q, 64)).page_size == 64
    assert prefill_config(_problem(2048, 16)).page_size == 16
    assert prefill_config(_problem(PREFILL_MIN_SEQLEN_Q - 1, 64)) is None     # short chunks: decode kernel
    assert prefill_config(_problem(2048, 8)) is None                           # 8-row pages: decode kernel
    assert prefill_config(_problem(2048, 64, head_dim=64)) is None             # head dims not checked paged


MODS = [dict(window_size=(255, -1)), dict(attention_chunk=100), dict(softcap=30.0), dict(sinks=True),
        dict(window_size=(300, 64), causal=False, sinks=True), dict(window_size=(127, -1), softcap=5.0, sinks=True)]


@pytest.mark.parametrize("mods", MODS, ids=repr)
def test_which_kernel_rule_with_masks_and_mods(mods):
    """window_size, attention_chunk, softcap and sinks run the paged prefill kernel's variant wherever the plain
    call runs the prefill kernel (rules 1-3 alone decide), each variant its own kernel name; the decode kernel
    keeps the short chunks, other head dims and page sizes without 8-row boxes, with the same mods."""
    from fa4mlir.attention.varlen_paged import PREFILL_MIN_SEQLEN_Q, prefill_config
    cfg = prefill_config(_problem(PREFILL_MIN_SEQLEN_Q, 64, **dict(mods)))
    plain = prefill_config(_problem(PREFILL_MIN_SEQLEN_Q, 64, causal=mods.get("causal", True)))
    assert cfg is not None and cfg.page_size == 64 and cfg.varlen
    assert (cfg.softcap, cfg.sinks) == (bool(mods.get("softcap")), bool(mods.get("sinks")))
    left, right = mods.get("window_size", (-1, -1))
    assert (cfg.window_left, cfg.chunk) == (left, mods.get("attention_chunk", 0))
    assert cfg.window_right == (right if not cfg.causal else -1)
    assert cfg.causal == mods.get("causal", True)
    from fa4mlir.kernels.attention_fwd_sm90 import kernel_name
    assert kernel_name(cfg) != kernel_name(plain) and kernel_name(cfg).endswith("_page64")
    for short in (_problem(PREFILL_MIN_SEQLEN_Q - 1, 64, **dict(mods)), _problem(2048, 8, **dict(mods)),
                  _problem(2048, 64, head_dim=64, **dict(mods))):
        assert prefill_config(short) is None


def test_windows_that_bound_no_sequence_run_the_plain_kernel():
    """prefill_mask drops a left side >= the capacity - 1 (16 pages of 64: 1023) and a right side >=
    max_seqlen_q - 1: the causal / full kernel runs; one key less and the window stays compiled in."""
    from fa4mlir.attention.varlen_paged import prefill_config, prefill_mask
    plain = prefill_config(_problem(512, 64))
    assert prefill_config(_problem(512, 64, window_size=(1023, -1))) == plain
    assert prefill_config(_problem(512, 64, window_size=(5000, 0))) == plain
    assert prefill_mask(_problem(512, 64, window_size=(1022, -1))) is not None
    assert prefill_config(_problem(512, 64, window_size=(1022, -1))).window_left == 1022
    full = prefill_config(_problem(512, 64, causal=False))
    assert prefill_config(_problem(512, 64, causal=False, window_size=(-1, 511))) == full
    assert prefill_config(_problem(512, 64, causal=False, window_size=(-1, 510))).window_right == 510
    # a chunk is kept whatever its size (whether it bounds a sequence depends on that sequence's lengths)
    assert prefill_config(_problem(512, 64, attention_chunk=8192)).chunk == 8192


def test_mod_kernel_names_are_distinct():
    """Every kernel of the paged prefill sets has its own name (the bundle's lookup key and the cubin's)."""
    from fa4mlir.kernel_sets import varlen_paged_prefill
    from fa4mlir.kernels.attention_fwd_sm90 import kernel_name
    names = [kernel_name(c) for _, c in varlen_paged_prefill()]
    assert len(set(names)) == len(names) == len(VARLEN_PAGED_PREFILL_CASES) + len(VARLEN_PAGED_PREFILL_MOD_CASES)


def test_default_paged_configs_are_unchanged():
    """The plain paged prefill kernels' configs (hence their code) do not move with the mod variants: no
    mask, softcap or sinks fields, and the key they had (bundles from before keep serving them)."""
    for dtype, d, causal, page in VARLEN_PAGED_PREFILL_CASES:
        cfg = paged_varlen_config(dtype, d, causal, page)
        assert cfg == paged_varlen_config(dtype, d, causal, page, None, softcap=False, sinks=False)
        assert (cfg.window_left, cfg.window_right, cfg.chunk, cfg.softcap, cfg.sinks) == (-1, -1, 0, False, False)
        assert replace(varlen_config(dtype, d, causal), page_size=page, bn=cfg.bn, load_regs=cfg.load_regs) == cfg


def test_prefill_launch_contract_with_softcap_and_sinks(monkeypatch):
    """A softcap + sinks + window variant's launch: the softcap kernel's scales (scale_log2 = cap * log2 e,
    softcap_scale = softmax_scale / cap) and the sinks tensor, in PTX order with the paged parameters last;
    _run_prefill binds the call's sinks tensor to it."""
    import math
    from types import SimpleNamespace

    from fa4mlir.attention import varlen_paged as vp
    from fa4mlir.attention.plan import TensorRef
    from fa4mlir.kernels.attention_sm90_config import launch_params
    problem = _problem(2048, 64, window_size=(127, -1), softcap=30.0, sinks=True)
    cfg = vp.prefill_config(problem)
    a = vp.prefill_launch(cfg, None, vp.prefill_problem(problem, 16)).args
    assert list(a) == [n for n, _ in launch_params(cfg)] and list(a)[-4:] == [
        "page_table", "page_table_stride", "num_pages", "kv_capacity"]
    assert a["sinks"] == TensorRef("sinks")
    assert math.isclose(a["scale_log2"], 30.0 * math.log2(math.e)) and math.isclose(a["softcap_scale"],
                                                                                  128 ** -0.5 / 30.0)
    launched = []
    kernel = SimpleNamespace(artifact=SimpleNamespace(config=cfg.key()),
                             launch=lambda grid, args, stream: launched.append(args))
    source = SimpleNamespace(kernel=lambda c: kernel if c == cfg else None)
    sinks = object()
    q = SimpleNamespace(unsqueeze=lambda dim: "q4", device=SimpleNamespace(index=0))
    out = SimpleNamespace(unsqueeze=lambda dim: "o4")
    table = SimpleNamespace(stride=lambda dim: 16)
    tensors = {"q": q, "out": out, "k": "k", "v": "v", "lse": "lse", "cu_seqlens_q": "cu", "seqused_k": "used",
               "page_table": table, "sinks": sinks}
    monkeypatch.setattr(vp, "resolve_stream", lambda *a: 0)
    vp.run(tensors, problem, source)
    (args,) = launched
    assert args["sinks"] is sinks and args["page_table"] is table and args["q"] == "q4"


@pytest.mark.parametrize("seqused", [True, False])
def test_prefill_launch_contract(seqused):
    """prefill_launch fills every parameter of the paged kernel's contract, in PTX order: the pools as the
    k/v TMA tensors, cu_seqlens_q standing in for the never-read cu_seqlens_k (and for seqused_k without
    one, has_seqused_k 0), the page table, its stride, the pool's pages and the capacity."""
    from fa4mlir.attention.plan import TensorRef
    from fa4mlir.attention.varlen_paged import prefill_config, prefill_launch, prefill_problem
    from fa4mlir.kernels.attention_sm90_config import launch_params, varlen_grid
    problem = replace(_problem(2048, 64), seqused_k=seqused)
    cfg = prefill_config(problem)
    pp = prefill_problem(problem, 16)
    launch = prefill_launch(cfg, None, pp)
    a = launch.args
    assert list(a) == [n for n, _ in launch_params(cfg)]
    assert (a["k"], a["v"], a["page_table"], a["cu_seqlens_k"]) == (
        TensorRef("k"), TensorRef("v"), TensorRef("page_table"), TensorRef("cu_seqlens_q"))
    assert a["seqused_k"] == TensorRef("seqused_k" if seqused else "cu_seqlens_q")
    assert a["has_seqused_k"] == int(seqused)
    assert (a["page_table_stride"], a["num_pages"], a["kv_capacity"]) == (16, 64, 16 * 64)
    assert (a["batch"], a["heads"], a["seqlen_q"], a["total_q"]) == (8, 32, 2048, 8 * 2048)
    assert launch.grid == varlen_grid(cfg, pp) == (16 * 32 * 8, 1, 1)


def _case_id(c):
    mods = "" if len(c) == 4 else f"-w{c[4][0]}_{c[4][1]}-chunk{c[5]}{'-softcap' * c[6]}{'-sinks' * c[7]}"
    return f"{c[0]}-d{c[1]}-{'causal' if c[2] else 'full'}-page{c[3]}{mods}"


@pytest.mark.parametrize("case", VARLEN_PAGED_PREFILL_CASES + VARLEN_PAGED_PREFILL_MOD_CASES, ids=_case_id)
def test_paged_prefill_compiles_without_spills(case):
    """Every kernel of the set (pages 16, 64, 128 D128 causal bf16, full attention, f16) and of its mask /
    score-modifier variants (a window, window + softcap + sinks, a chunk, a two-sided window with sinks,
    softcap alone)."""
    from fa4mlir import lowering
    from fa4mlir.kernels import attention_fwd_sm90
    from fa4mlir.lowering import CompileOptions
    dtype, d, causal, page = case[:4]
    cfg = paged_varlen_config(dtype, d, causal, page) if len(case) == 4 else paged_prefill_mod_config(case)
    art = lowering.lower(attention_fwd_sm90.build(cfg), CompileOptions(cubin_backend="ptxas"))
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert not r["wgmma_serialized"], r
    assert r["smem_bytes"] <= cfg.smem_bytes(), r
    assert art.name.endswith(f"_page{page}") and [p.name for p in art.params][-4:] == [
        "page_table", "page_table_stride", "num_pages", "kv_capacity"]
    assert art.name == attention_fwd_sm90.kernel_name(cfg)


torch = pytest.importorskip("torch")
from tests.interpret_varlen_paged import NAN16, PREFILL_CASES, PREFILL_MOD_CASES, run_prefill  # noqa: E402


def _tensor(bits: np.ndarray, dtype: str):
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16 if dtype == "bf16" else torch.float16)


@pytest.mark.parametrize("case", PREFILL_CASES + PREFILL_MOD_CASES, ids=lambda c: c.name)
def test_paged_prefill_through_the_interpreter(case):
    from fa4mlir.testing import compare_attention
    got = run_prefill(case, seed=5)
    cfg = got["config"]
    assert cfg.page_size == case.page_size
    assert (cfg.softcap, cfg.sinks, cfg.chunk) == (case.softcap > 0, case.sinks, case.attention_chunk)
    assert (cfg.window_left, cfg.window_right) == ((case.window_size[0], -1 if case.causal else case.window_size[1])
                                                    if case.window_size != (-1, -1) else (-1, -1))
    q, k, v, out = (_tensor(got[n], case.dtype) for n in ("q", "k", "v", "out"))
    lse = torch.from_numpy(got["lse"])
    sinks = None if got["sinks"] is None else torch.from_numpy(got["sinks"])
    cu, lens, table, page = got["cu_seqlens_q"], got["lens"], got["page_table"], case.page_size
    checked = 0
    for b in range(len(case.seqlens_q)):
        q0, nq, nk = int(cu[b]), int(cu[b + 1] - cu[b]), int(lens[b])
        if nq == 0:
            continue
        if nk == 0:    # no key: out 0, lse +inf (the head's sink with sinks)
            assert (out[q0:q0 + nq].float() == 0).all()
            want = torch.full((case.heads, nq), float("inf")) if sinks is None else sinks[:, None].expand(-1, nq)
            assert torch.allclose(lse[:, q0:q0 + nq], want, atol=1e-5)
            continue
        t = np.arange(nk)
        rows = torch.from_numpy(table[b][t // page].astype(np.int64) * page + t % page)
        k_rows, v_rows = (x.reshape(-1, case.kv_heads, case.head_dim)[rows] for x in (k, v))
        if case.nan_keys:    # keys no query sees, NaN in the pool: any value for the reference
            k_rows[:case.nan_keys[b]] = v_rows[:case.nan_keys[b]] = 0
        rep = compare_attention(q[q0:q0 + nq][None], k_rows[None], v_rows[None], out[q0:q0 + nq][None],
                                lse[:, q0:q0 + nq][None], case.head_dim ** -0.5, case.causal,
                                window_size=case.window_size, attention_chunk=case.attention_chunk,
                                softcap=case.softcap, sinks=sinks)
        assert rep["ok"], (b, rep)
        checked += 1
    assert checked
    end = int(cu[-1])    # rows no sequence owns: not written
    assert (got["out"][end:] == NAN16[case.dtype]).all() and np.isnan(got["lse"][:, end:]).all()


@pytest.mark.parametrize("case", VARLEN_PAGED_PREFILL_MOD_CASES, ids=_case_id)
def test_gpu_mod_calls_run_the_set_kernels(case):
    """tests/gpu/test_varlen_paged_prefill_gpu.py's mod calls route to the kernels the attention-varlen set holds
    (else the GPU run would meet a BundleError): the windows there bound the sequences, so prefill_mask keeps them."""
    from tests.gpu.test_varlen_paged_prefill_gpu import mod_route
    cfg = mod_route(case)
    assert cfg is not None and cfg == paged_prefill_mod_config(case)
