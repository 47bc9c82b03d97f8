"""Deviceless: the sm_100a sparse MLA prefill as a CTA pair (attention_mla_sparse_sm100_pair: FlashMLA's
head128 design, config note "Pair": Q in TMEM by tcgen05.cp 02_13, cta_group::2 gather4 of B_TOPK = 128
positions split over the pair, M = 128 pair MMAs issued by the leader).

* plans: TMEM O 256 + S 64 + Q 192 = 512 columns; SMEM within 227 KiB;
* compiled (nvJitLink LTO): 0 spills, no stack, SMEM as planned, 512 TMEM columns; SASS: only 2-CTA
  forms (UTCHMMA.2CTA 36 + 16, 24 with A from TMEM; UTMALDG.2D.GATHER4.2CTA 16 x 9 + 32 x 4 per block;
  UTMALDG.3D.2CTA for Q; UTCCP.T.S.2CTA.2x64dp128bit_lw02_lw13 48; 7 UTCBAR.2CTA.MULTICAST);
* fa4-verify-pipelines accepts it, and seeded protocol bugs (IR edits) are caught by the verifier and
  the interpreter;
* interpreted (the CPU interpreter runs the 2-CTA cluster) by the FA rule against the float64 sparse
  reference: -1 padding, duplicates, >= s_kv, int32 extremes, a token with no valid entry, topk_length
  (L = 200, 0, 256 of 256), sinks. Never run on a Blackwell GPU.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from fa4mlir.kernels import attention_mla_sparse_sm100_pair_config as pc
from tests._mla_helpers import bits, check_sparse_out, sparse_options, sparse_problem, sparse_tensors

CONFIGS = [pc.MLASparsePairConfig(), pc.MLASparsePairConfig(topk_length=True, sinks=True)]


def test_plans_fit():
    tm, sm = pc.tmem_plan(), pc.smem_plan()
    assert (tm["O"], tm["S"], tm["Q"], tm["used"], tm["alloc"]) == (0, 256, 320, 512, 512)
    assert sm["k"] == 64 * 576 * 2 and sm["v"] == 128 * 256 * 2 and sm["total"] <= pc.SMEM_LIMIT
    assert 64 * pc.Q_TMEM_COLS * 2 <= sm["k"]                # Q's TMEM part is staged in the K stage
    assert pc.grid(3) == (6, 1, 1) and pc.NUM_THREADS == 224 and pc.CLUSTER == (2, 1, 1)
    with pytest.raises(TypeError, match="must be a bool"):
        pc.MLASparsePairConfig(sinks=1).validate()


def test_registered_and_in_its_bundle_set():
    import subprocess
    import sys
    from fa4mlir import kernel_sets, kernels
    from fa4mlir.kernels.common import gather4
    assert kernels.arch(pc.KERNEL) == "sm_100a" and kernels.cubin_backend(pc.KERNEL) == "nvjitlink-lto"
    assert [cfg for _, cfg in kernel_sets.configs(["mla-sparse-sm100-pair"])] == CONFIGS
    assert pc.smem_plan()["k"] == gather4.tile_bytes(pc.CTA_ROWS, pc.D_QK, "bf16")
    code = ("import sys; import fa4mlir.kernels.attention_mla_sparse_sm100_pair_config; "
            "sys.exit('mlir' in sys.modules or 'fa4mlir._mlir' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0        # the config stays MLIR-free


@pytest.mark.parametrize("kw,match", [(dict(heads=64), "h_q in"), (dict(topk=64), "multiple of 128")])
def test_launch_args_refuse_what_the_kernel_cannot_take(kw, match):
    args = dict(s_kv=10, heads=128, topk=128, softmax_scale=0.1) | kw
    with pytest.raises(ValueError, match=match):
        pc.launch_args(pc.MLASparsePairConfig(), {}, **args)


@pytest.fixture(scope="module")
def artifacts():
    from fa4mlir import lowering
    from fa4mlir.kernels import attention_mla_sparse_sm100_pair as k
    from fa4mlir.lowering import CompileOptions
    return {c: lowering.lower(k.build(c), CompileOptions(cubin_backend="nvjitlink-lto"), key="test-mla-sparse-pair")
            for c in CONFIGS}


@pytest.mark.parametrize("index", range(len(CONFIGS)))
def test_compiles_with_zero_spills_and_the_2cta_sass(artifacts, index):
    from fa4mlir.sass import disassemble, find_nvdisasm
    art = artifacts[CONFIGS[index]]
    r = art.resources
    assert art.arch == "sm_100a"
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    assert r["threads"] == pc.NUM_THREADS and r["tmem_cols"] == pc.tmem_plan()["alloc"] == 512
    assert art.smem_bytes == pc.smem_plan()["total"]
    assert [(p.name, p.kind) for p in art.params] == list(CONFIGS[index].params)
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm): cannot read the SASS")
    sass = disassemble(art.cubin)
    count = lambda op: len(re.findall(rf"\b{re.escape(op)}(?![.\w])", sass))  # noqa: E731
    assert count("UTMALDG.2D.GATHER4.2CTA") == (64 // 4) * (576 // 64) + (128 // 4) * (256 // 64)
    assert count("UTMALDG.3D.2CTA") == 576 // 64
    assert not re.search(r"\bUTMALDG(?![.\w]*2CTA)", sass)                   # no 1-CTA load
    assert count("UTCHMMA.2CTA") == 576 // 16 + (128 // 16) * 2
    assert not re.search(r"\bUTCHMMA(?!\.2CTA)\b", sass)
    assert len(re.findall(r"\bUTCHMMA\.2CTA\s+tmem\[", sass)) == pc.Q_TMEM_COLS // 16     # A = Q from TMEM
    assert count("UTCCP.T.S.2CTA.2x64dp128bit_lw02_lw13") == (pc.Q_TMEM_COLS // 64) * 8
    assert count("UTCBAR.2CTA.MULTICAST") == 7          # every commit multicast: k (Q copy, S), s, p, v, o, q
    assert not re.search(r"\b(LDL|STL)\b", sass)


def _build(cfg=CONFIGS[0]):
    from fa4mlir.kernels import attention_mla_sparse_sm100_pair as k
    return k.build(cfg)


def test_verifier_accepts_the_schedule():
    from fa4mlir.passes import registry
    for cfg in CONFIGS:
        registry.run_passes(_build(cfg).module, ["fa4-verify-pipelines"])


def test_p_is_a_gathered_pipeline():
    """CTA 1's softmax threads arrive on the leader's p full by peer_arrive: the verifier keeps the leader's
    wait in CTA 1's executor view (passes/_cluster_view.py note "Gathered pipelines"), which the
    multicast release of p balances."""
    from fa4mlir.dialect.query import kernel_func
    from fa4mlir.passes._cluster_view import gathered_pipes
    kir = _build()
    with kir.module.context:
        assert gathered_pipes(kernel_func(kir.module.operation)) == {"p"}


def _seed(kir, bug: str):
    """Seed protocol bug `bug` into the kernel's IR: "no_peer_p" (CTA 1's softmax never arrives on the
    leader's p full), "leader_only_k" (K's stage released in the leader only: CTA 1's load waits at its
    first K block, the ring's second fill), "no_s_commit" (S is never committed to the softmax)."""
    from fa4mlir._mlir import ir
    from fa4mlir.passes._util import attr, ops_named
    root = kir.module.operation
    if bug == "no_peer_p":
        next(op for op in ops_named(root, "fa4.peer_arrive") if attr(op, "pipe") == "p").erase()
    elif bug == "leader_only_k":
        with kir.module.context:
            for op in ops_named(root, "fa4.mma_commit"):
                if attr(op, "pipe") == "k":
                    op.attributes["multicast"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 0b01)
    elif bug == "no_s_commit":
        next(op for op in ops_named(root, "fa4.mma_commit") if attr(op, "pipe") == "s").erase()
    return kir


VERIFIER_CATCHES = {
    "no_peer_p": r"target view .* pipeline 'p': producer_arrivals = 256, but 128 thread\(s\) arrive on full",
    "leader_only_k": r"CTA rank 1's executor view .* pipeline 'k', role 'mma'",
    "no_s_commit": r"pipeline 's', role 'mma': .* 1 acquire\(s\) but 0 commit",
}


@pytest.mark.parametrize("bug", sorted(VERIFIER_CATCHES))
def test_verifier_catches_seeded_bugs(bug):
    from fa4mlir.passes import registry
    from fa4mlir.passes._util import PassError
    kir = _seed(_build(), bug)
    with pytest.raises(PassError, match=VERIFIER_CATCHES[bug]):
        registry.run_passes(kir.module, ["fa4-verify-pipelines"])


def _problem(torch, s_q, topk, s_kv, topk_length=None, sinks=None):
    q, kv, idx = sparse_problem(torch, s_q, pc.B_H, topk, s_kv)
    lens, sink_t = sparse_options(torch, pc.B_H, topk_length, sinks)
    cfg = pc.MLASparsePairConfig(topk_length=lens is not None, sinks=sink_t is not None)
    tensors = sparse_tensors(torch, q, bits(torch, kv).reshape(s_kv, 576), idx.reshape(s_q, topk), lens, sink_t)
    args = pc.launch_args(cfg, tensors, s_kv=s_kv, heads=pc.B_H, topk=topk, softmax_scale=576 ** -0.5)
    return cfg, (q, kv, idx, tensors, lens, sink_t), args


INTERPRETER_CATCHES = {
    "no_peer_p": r"CTA rank 0 warp  4 \(mma\): mbarrier\.try_wait\.parity 0 on p\.full\[0\]",
    "leader_only_k": r"CTA rank 1 warp  5 \(load\): mbarrier\.try_wait\.parity \d on k\.empty\[0\]",
    "no_s_commit": r"warp  [0-3] \(softmax\): mbarrier\.try_wait\.parity 0 on s\.full\[0\]",
}


@pytest.mark.parametrize("bug", sorted(INTERPRETER_CATCHES))
def test_interpreter_catches_seeded_bugs(bug):
    torch = pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.dialect.query import mark_unverified
    cfg, _, args = _problem(torch, 1, 128, 300)
    kir = _seed(_build(cfg), bug)
    with kir.module.context:
        mark_unverified(kir.module.operation)
    with pytest.raises(interpret.Deadlock, match=INTERPRETER_CATCHES[bug]):
        interpret.load(kir).launch(pc.grid(1), args)


def test_every_bug_is_caught_by_both():
    assert set(VERIFIER_CATCHES) == set(INTERPRETER_CATCHES)


@pytest.mark.parametrize("s_q,topk,s_kv,topk_length,sinks,policy", [
    (2, 128, 300, None, None, "lazy"),                                              # -1, duplicates, >= s_kv
    (3, 256, 520, (200, 0, 256), (0.5, float("-inf"), float("inf")), "random"),     # 2 blocks; L 200 and 0; sinks
])
def test_interpreted_by_the_fa_rule(s_q, topk, s_kv, topk_length, sinks, policy):
    """The numerics fail (checked by hand, this tree) with V's column half swapped, the row-max or the
    row-sum exchange between lanes l and l + 64 removed, O's rescale removed, Q copied by ::01_23, or the
    K rows not offset by the CTA's rank."""
    torch = pytest.importorskip("torch")
    from fa4mlir import interpret
    cfg, (q, kv, idx, tensors, lens, sink_t), args = _problem(torch, s_q, topk, s_kv, topk_length, sinks)
    ctas = interpret.load(_build(cfg)).launch(pc.grid(s_q), args, policy=policy)
    out_t = check_sparse_out(torch, q, kv, idx, tensors, 576 ** -0.5, sink_t, lens)
    lse, max_logits = tensors["lse"], tensors["max_logits"]
    if lens is not None:   # token 1: L = 0, no valid entry
        assert (out_t[1] == 0).all() and np.isposinf(lse[1]).all() and np.isneginf(max_logits[1]).all()
    if sinks is not None:  # a +inf sink zeroes its head's out; lse, max_logits stay the scores'
        assert (out_t[0, 2] == 0).all() and np.isfinite(lse[0, 2])
    lengths = [topk] * s_q if lens is None else list(lens)
    blocks = sum(max(1, -(-n // pc.B_TOPK)) for n in lengths)
    assert sum(c.stats["pair_mma"] for c in ctas) == blocks * (576 // 16 + 2 * 128 // 16)
    assert all(c.stats["pair_mma"] == 0 for c in ctas if c.rank == 1)                # the leader issues them
