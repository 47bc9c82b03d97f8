"""Deviceless: the sm_100a sparse MLA prefill (attention_mla_sparse_sm100: TMA gather4 of the top-k
rows, S and O in TMEM, D_v split over two CTAs per token; config note "Split" says how this differs
from FlashMLA's cta_group::2 pair).

* plans: TMEM (O 256 + S 64 + P 32 + Q's first 320 columns in 160 = 512) and SMEM (Q's last 256 columns,
  64 KiB, + two 72 KiB KV stages, which first stage Q's TMEM part) within limits;
* compiled (nvJitLink LTO) with and without topk_length / sinks: 0 spills, no stack, SMEM as planned,
  512 TMEM columns; the SASS holds 16 x 9 UTMALDG.2D.GATHER4 per tile (64 rows of 576 columns), 9
  tile loads of Q and 36 + 4 tcgen05 MMAs (UTCHMMA), 20 + 4 of them with A from TMEM;
* the pipeline verifier accepts the schedule and rejects it with the S commit removed;
* interpreted (fa4mlir.interpret, CPU) on tiny problems, numerics by the FA rule against the float64
  sparse reference (fa4mlir.testing_mla.check_mla_sparse): -1 padding, duplicates, out-of-order and
  out-of-range indices (>= s_kv, int32's extremes), NaN in every KV row no valid entry names, a
  token with no valid entry, topk_length and sinks. These are the only numerics claimed: the kernel is
  interpreted, never run on a Blackwell GPU.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from fa4mlir.kernels import attention_mla_sparse_sm100_config as sc
from tests._mla_helpers import bits, check_sparse_out, sparse_options, sparse_problem, sparse_tensors

CONFIGS = [sc.MLASparseSm100Config(), sc.MLASparseSm100Config(topk_length=True, sinks=True)]


def test_plans_fit():
    tm, sm = sc.tmem_plan(), sc.smem_plan()
    assert (tm["O"], tm["S"], tm["P"], tm["Q"], tm["used"], tm["alloc"]) == (0, 256, 320, 352, 512, 512)
    assert sm["q"] == 128 * 256 * 2 and sm["kv"] == 2 * 64 * 576 * 2 and sm["total"] <= sc.SMEM_LIMIT
    assert 128 * sc.Q_TMEM_COLS * 2 <= sm["kv"]             # Q's TMEM part is staged in the KV ring
    assert sc.grid(3) == (6, 1, 1) and sc.NUM_THREADS == 192


def test_registered_and_in_its_bundle_set():
    import subprocess
    import sys
    from fa4mlir import kernel_sets, kernels
    from fa4mlir.kernels.common import gather4
    assert kernels.arch(sc.KERNEL) == "sm_100a" and kernels.cubin_backend(sc.KERNEL) == "nvjitlink-lto"
    assert [cfg for _, cfg in kernel_sets.configs(["mla-sparse-sm100"])] == CONFIGS
    assert sc.smem_plan()["kv_tile"] == gather4.tile_bytes(sc.B_TOPK, sc.D_QK, "bf16")
    with pytest.raises(TypeError, match="must be a bool"):
        sc.MLASparseSm100Config(sinks=1).validate()
    code = ("import sys; import fa4mlir.kernels.attention_mla_sparse_sm100_config; "
            "sys.exit('mlir' in sys.modules or 'fa4mlir._mlir' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0        # the config stays MLIR-free


@pytest.mark.parametrize("kw,match", [(dict(heads=96), "h_q in"), (dict(topk=100), "multiple of 64")])
def test_launch_args_refuse_what_the_kernel_cannot_take(kw, match):
    args = dict(s_kv=10, heads=64, topk=128, softmax_scale=0.1) | kw
    with pytest.raises(ValueError, match=match):
        sc.launch_args(sc.MLASparseSm100Config(), {}, **args)


@pytest.fixture(scope="module")
def artifacts():
    from fa4mlir import lowering
    from fa4mlir.kernels import attention_mla_sparse_sm100 as k
    from fa4mlir.lowering import CompileOptions
    return {c: lowering.lower(k.build(c), CompileOptions(cubin_backend="nvjitlink-lto"), key="test-mla-sparse-sm100")
            for c in CONFIGS}


@pytest.mark.parametrize("index", range(len(CONFIGS)))
def test_compiles_with_zero_spills_and_the_gather4_sass(artifacts, index):
    from fa4mlir.sass import disassemble, find_nvdisasm
    art = artifacts[CONFIGS[index]]
    r = art.resources
    assert art.arch == "sm_100a" and r["cubin_backend"] == "nvjitlink-lto"
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    assert r["threads"] == sc.NUM_THREADS and r["tmem_cols"] == sc.tmem_plan()["alloc"]
    assert art.smem_bytes == sc.smem_plan()["total"]
    assert [(p.name, p.kind) for p in art.params] == list(CONFIGS[index].params)
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm): cannot read the SASS")
    sass = disassemble(art.cubin)
    count = lambda op: len(re.findall(rf"\b{re.escape(op)}\b", sass))  # noqa: E731
    assert count("UTMALDG.2D.GATHER4") == (sc.B_TOPK // 4) * (sc.D_QK // 64)
    assert count("UTMALDG.3D") == sc.D_QK // 64
    assert count("UTCHMMA") == sc.D_QK // 16 + sc.B_TOPK // 16
    assert len(re.findall(r"\bUTCHMMA\s+tmem\[", sass)) == sc.Q_TMEM_COLS // 16 + sc.B_TOPK // 16    # A from TMEM
    assert not re.search(r"\b(LDL|STL)\b", sass)


def test_verifier_accepts_the_schedule_and_rejects_a_dropped_commit():
    from fa4mlir.kernels import attention_mla_sparse_sm100 as k
    from fa4mlir.passes import registry
    from fa4mlir.passes._util import PassError, attr, ops_named
    for cfg in CONFIGS:
        registry.run_passes(k.build(cfg).module, ["fa4-verify-pipelines"])
    kir = k.build(CONFIGS[0])
    commit = next(op for op in ops_named(kir.module.operation, "fa4.mma_commit") if attr(op, "pipe") == "s")
    commit.erase()
    with pytest.raises(PassError, match="'s'"):
        registry.run_passes(kir.module, ["fa4-verify-pipelines"])


@pytest.mark.parametrize("s_q,heads,topk,topk_length,sinks", [
    (2, 64, 128, None, None),                                           # 2 tiles; -1, duplicates, >= s_kv
    (3, 64, 128, (100, 0, 128), (0.5, float("-inf"), float("inf"))),    # L = 100 and 0; sinks pinned
])
def test_interpreted_by_the_fa_rule(s_q, heads, topk, topk_length, sinks):
    torch = pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_mla_sparse_sm100 as k
    s_kv = 300
    q, kv, idx = sparse_problem(torch, s_q, heads, topk, s_kv)
    lens, sink_t = sparse_options(torch, heads, topk_length, sinks)
    cfg = sc.MLASparseSm100Config(topk_length=lens is not None, sinks=sink_t is not None)
    scale = 576 ** -0.5
    tensors = sparse_tensors(torch, q, bits(torch, kv).reshape(s_kv, 576), idx.reshape(s_q, topk), lens, sink_t)
    lse, max_logits = tensors["lse"], tensors["max_logits"]
    args = sc.launch_args(cfg, tensors, s_kv=s_kv, heads=heads, topk=topk, softmax_scale=scale)
    interpret.load(k.build(cfg)).launch(sc.grid(s_q), args)
    out_t = check_sparse_out(torch, q, kv, idx, tensors, scale, sink_t, lens)
    if lens is not None:   # token 1: L = 0, no valid entry
        assert (out_t[1] == 0).all() and np.isposinf(lse[1]).all() and np.isneginf(max_logits[1]).all()
    if sinks is not None:  # a +inf sink zeroes its head's out; lse, max_logits stay the scores'
        assert (out_t[0, 2] == 0).all() and np.isfinite(lse[0, 2])
