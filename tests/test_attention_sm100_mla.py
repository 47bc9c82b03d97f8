"""The sm_100a kernel's MLA prefill configs (note "MLA" of attention_sm100_config): head_dim 192
(128 nope + 64 rope) for Q and K, head_dim_v 128 for V and O, proven without a Blackwell GPU.

* config: the TMEM plan (S0 S1 O0 O1 = 512 columns), the SMEM plan (one K/V stage), what is refused
  and why (serving features, paging, the decode route, other strides, 2 stages; absorbed MLA decode
  576/512 fits the decode route only), and that supported_configs() (CI's 288-shape sweep) does not hold them;
* compiled (nvJitLink LTO, as the kernel ships), every code shape of mla_configs(): 0 spills, no
  stack, setmaxnreg honoured with the role table's budgets, SMEM within the plan, 512 TMEM columns;
  the SASS holds 12 MMAs per S (K = 192 in steps of 16 over three 64-column chunks) and 8 per P.V;
* the pipeline verifier accepts the kernel and rejects it when any one commit is removed;
* interpreted (fa4mlir.interpret, nvvm stage, CPU) on small shapes, numerics by the FA rule against
  a float64 reference (fa4mlir.testing.compare_attention). These are the only numerics claimed: the
  kernel is interpreted, never run on a Blackwell GPU.
"""
from __future__ import annotations

import re
import time
from types import SimpleNamespace

import numpy as np
import pytest

from fa4mlir import lowering
from fa4mlir.lowering import CompileOptions
from fa4mlir.kernels import attention_fwd_sm100 as k100
from fa4mlir.kernels.attention_sm100_config import (ROLES, SMEM_CARVEOUT, TMEM_COLUMNS, FA4Config, code_shape, grid,
                                                    launch_args, mla_configs, supported_configs)
from fa4mlir.passes import registry
from fa4mlir.passes._util import PassError, attr, ops_named
from fa4mlir.sass import disassemble, find_nvdisasm

MLA = dict(head_dim=192, head_dim_v=128)
ROLE_BUDGETS = {regs for _, _, _, regs in ROLES}


def _id(c: FA4Config) -> str:
    return f"{c.dtype}-g{c.group}{'-causal' if c.causal else ''}"


# ---- config ---------------------------------------------------------------------------------------
def test_plan_and_support():
    c = FA4Config(**MLA)
    assert c.mla and c.supported() == (True, "") and c.validate() is c
    tm = c.tmem_plan()
    assert (tm["S0"], tm["S1"], tm["O0"], tm["O1"], tm["used"], tm["alloc"]) == (0, 128, 256, 384, 512, 512)
    sm = c.smem_plan()
    assert sm["q_tile"] == sm["k_tile"] == 128 * 192 * 2 and sm["v_tile"] == 128 * 128 * 2
    assert sm["stages"] == 1 and sm["total"] <= SMEM_CARVEOUT < c._smem_total(2)
    assert FA4Config(**MLA, stages=1).supported()[0] and code_shape(FA4Config(**MLA, stages=1)) == code_shape(c)
    assert not FA4Config().mla and not FA4Config(head_dim=64, head_dim_v=64).mla


@pytest.mark.parametrize("kw,reason", [
    (dict(stages=2), "SMEM"),                                    # the plan: 2 stages do not fit
    (dict(exp2_poly_stride=2), "default 4 only"),
    (dict(causal=True, window_left=64), "plain contiguous two-Q-tile prefill kernel only"),
    (dict(varlen=True), "plain contiguous two-Q-tile prefill kernel only"),
    (dict(page_size=64), "page_size=64"),
    (dict(num_q_tiles=1, fuse_gqa=True, num_q_heads=16, num_kv_heads=1), "num_q_tiles=1"),
])
def test_refusals_say_why(kw, reason):
    ok, why = FA4Config(**MLA, **kw).supported()
    assert not ok and reason in why, why


def test_absorbed_decode_fits_the_decode_route_only():
    """Absorbed MLA decode (qk 576 = 512 latent + 64 rope, v 512, one latent KV head): on the two-Q-tile
    CTA, O alone is 512 TMEM columns per tile and one P.V MMA of N = 512 > 256, and the refusal says so;
    the decode route's 64-row Layout F plan fits (tests/test_attention_sm100_mla_decode.py)."""
    ok, why = FA4Config(head_dim=576, head_dim_v=512).plan_fits()
    assert not ok and "N = 512 > 256" in why and "absorbed MLA decode" in why, why
    dec = FA4Config(head_dim=576, head_dim_v=512, num_q_tiles=1, fuse_gqa=True, num_q_heads=16, num_kv_heads=1, bn=64)
    assert dec.plan_fits() == (True, "") and dec.supported() == (True, "")


def test_kept_out_of_the_supported_sweep():
    shapes = {code_shape(c) for c in supported_configs()}
    mla = [code_shape(c) for c in mla_configs()]
    assert len(set(mla)) == len(mla) == 12 and not shapes & set(mla)
    assert all(c.supported()[0] and c.mla for c in mla_configs())


# ---- compiled -------------------------------------------------------------------------------------
_BUILT: dict = {}


def compiled(cfg: FA4Config):
    if cfg not in _BUILT:
        t0 = time.perf_counter()
        art = lowering.lower(k100.build(cfg), CompileOptions(cubin_backend="nvjitlink-lto"), key="test-sm100-mla")
        _BUILT[cfg] = (art, time.perf_counter() - t0)
    return _BUILT[cfg]


@pytest.mark.parametrize("cfg", mla_configs(), ids=_id)
def test_compiles_with_zero_spills_and_sass(cfg):
    art, seconds = compiled(cfg)
    r = art.resources
    print(f"{art.name}: spills {r['spill_stores']}/{r['spill_loads']}, SMEM {art.smem_bytes} B, {seconds:.1f} s")
    assert art.arch == "sm_100a" and art.cubin[:4] == b"\x7fELF" and "_qk192_ov128_" in art.name
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    assert not r["setmaxnreg_ignored"] and r["cubin_backend"] == "nvjitlink-lto"
    assert r["tmem_cols"] == TMEM_COLUMNS and r["threads"] == 512
    plan = cfg.smem_plan()
    assert plan["total"] <= art.smem_bytes <= plan["total"] + 1024 <= SMEM_CARVEOUT + 1024
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed: cannot read the SASS")
    sass = disassemble(art.cubin)
    budgets = {int(v, 16) for v in re.findall(r"USETMAXREG\.\S+\s+(?:UP\d+,\s*)?(0x[0-9a-f]+)", sass)}
    assert budgets == ROLE_BUDGETS
    count = lambda op: len(re.findall(rf"\b{op}\b", sass))  # noqa: E731
    s_mmas, pv_mmas = 192 // 16, 128 // 16
    assert count("UTCHMMA") == (2 * s_mmas + pv_mmas) + (2 * s_mmas + 2 * pv_mmas) + pv_mmas
    assert len(re.findall(r"UTCHMMA tmem\[", sass)) == 4 * pv_mmas, "P.V takes A (= P) from tensor memory"
    assert count("UTMALDG") >= 3 and count("UTMASTG") >= 1
    assert not re.search(r"\b(LDL|STL)\b", sass), "no local-memory spills"


# ---- the pipeline verifier ------------------------------------------------------------------------
def _verify(kir):
    registry.run_passes(kir.module, ["fa4-verify-pipelines"])


def _commits(module):
    return list(ops_named(module.operation, "fa4.producer_commit", "fa4.mma_commit"))


def test_verifier_accepts_and_rejects_any_one_commit_removed():
    cfg = FA4Config(**MLA, causal=True)
    _verify(k100.build(cfg))
    n = len(_commits(k100.build(cfg).module))
    assert n >= 20
    for i in range(n):
        kir = k100.build(cfg)
        op = _commits(kir.module)[i]
        pipe = attr(op, "pipe")
        op.erase()
        with pytest.raises(PassError, match=rf"pipeline '{pipe}'|'{pipe}'"):
            _verify(kir)


# ---- interpreted numerics -------------------------------------------------------------------------
CASES = [  # (config, seqlen_q, seqlen_k): both Q tiles (the second ragged), 2 K/V blocks through 1 stage
    (FA4Config(**MLA, causal=True), 200, 219),
    (FA4Config(**MLA, dtype="f16", num_q_heads=4, num_kv_heads=1), 130, 150),
]


@pytest.mark.parametrize("cfg,seqlen_q,seqlen_k", CASES, ids=[_id(c[0]) for c in CASES])
def test_interpreted_by_the_fa_rule(cfg, seqlen_q, seqlen_k):
    torch = pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.testing import compare_attention
    tdt = torch.bfloat16 if cfg.dtype == "bf16" else torch.float16
    group, head = cfg.group, cfg.group - 1              # GQA: the group's last head (through the divide)
    gen = torch.Generator().manual_seed(29)
    q = torch.randn(1, seqlen_q, group, 192, generator=gen).to(tdt)
    k = torch.randn(1, seqlen_k, 1, 192, generator=gen).to(tdt)
    v = torch.randn(1, seqlen_k, 1, 128, generator=gen).to(tdt)
    o = np.full((1, seqlen_q, group, 128), 0x7FC0 if cfg.dtype == "bf16" else 0x7E00, np.uint16)
    lse = np.full((1, group, seqlen_q), np.nan, np.float32)
    bits = lambda t: t.contiguous().view(torch.int16).numpy().view(np.uint16).copy()  # noqa: E731
    scale = 192 ** -0.5
    problem = SimpleNamespace(batch=1, heads=group, seqlen_q=seqlen_q, seqlen_k=seqlen_k, softmax_scale=scale)
    args = launch_args(cfg, problem, dict(q=bits(q), k=bits(k), v=bits(v), o=o, lse=lse))
    g = grid(cfg, problem)
    t0 = time.perf_counter()
    interpret.load(k100.build(cfg)).launch(g, args, ctas=[(x, head, 0) for x in range(g[0])])
    out = torch.from_numpy(o.view(np.int16)).view(tdt)[:, :, head:head + 1]
    report = compare_attention(q[:, :, head:head + 1], k, v, out, torch.from_numpy(lse)[:, head:head + 1], scale,
                               cfg.causal)
    print(f"{_id(cfg)} {seqlen_q}x{seqlen_k}: {time.perf_counter() - t0:.1f} s, {report}")
    assert report["ok"], report
