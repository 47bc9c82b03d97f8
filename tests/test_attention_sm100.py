"""The sm_100a FlashAttention-4 forward kernel, proven without a Blackwell GPU.

* FA4Config: the TMEM and SMEM plans at head dims 64, 128, 192/128 (MLA: built, its own code shapes
  checked by tests/test_attention_sm100_mla.py, outside the 288 below) and 256 (refused, with the reason), supported()'s reasons, description(),
  hashing and the cache key.
* Every supported config compiles with 0 spills: supported() accepts, over a grid of every field,
  only configs of the 288 code shapes of supported_configs(), and all 288 are compiled; each
  compile's nvvm-stage IR also runs in the interpreter (one CTA, numerics by the FA rule).
* Every shipped config (attention_sm100_config.configs()) compiles to an sm_100a cubin through
  nvJitLink, as the kernel ships (its own cubin backend: NVVM IR -> libNVVM LTO-IR -> nvJitLink -lto, a
  whole-program link): 0 spills, no stack, setmaxnreg honoured with the role table's budgets
  (softmax 192, correction 80, load/mma 48; read back from the SASS), SMEM = the config's plan,
  512 TMEM columns. nvJitLink given the upstream PTX instead compiles it relocatably and drops
  setmaxnreg (C7504), so that cubin spills: a test records it. The standalone ptxas route
  (cubin_backend ptxas) is checked to stay at 0 spills too.
* The SASS (nvdisasm) holds the tcgen05 MMAs (UTCHMMA: qk/16 per S and BN/16 per P.V, 4 GEMMs per
  KV block in the loop), TMEM loads/stores (LDTM/STTM), TMA loads and stores, tcgen05.commit
  (UTCBAR) and the TMEM allocator.
* fa4-verify-pipelines accepts the kernel, and rejects it when any one commit is removed.
sm_100a numerics cannot run here (tests/gpu/test_attention_sm100_gpu.py skips on other GPUs).
"""
import concurrent.futures
import dataclasses
import itertools
import multiprocessing
import os
import re
import time

import pytest

from fa4mlir import kernels, lowering
from fa4mlir.attention import AttnProblem
from fa4mlir.lowering import CompileOptions
from fa4mlir.kernels import attention_fwd_sm100 as k100
from fa4mlir.kernels.attention_sm100_config import (FA4Config, MMA_M, ROLES, SMEM_CARVEOUT,
                                                   TMEM_COLUMNS, LAUNCH_PARAMS, code_shape, configs, grid, launch_args,
                                                   mla_configs, supported_configs)
from fa4mlir.passes._util import PassError, attr, ops_named

from fa4mlir.sass import disassemble, find_nvdisasm
from tests import _sm100_helpers as _sm100
from tests._sm100_helpers import role_budgets, sass_count, sass_of, verify_pipelines


# ---- FA4Config plans ---------------------------------------------------------------------------------
def test_plan_head_dim_128():
    c = FA4Config(head_dim=128, head_dim_v=128)
    assert c.supported() == (True, "")
    tm = c.tmem_plan()
    assert (tm["S0"], tm["S1"], tm["O0"], tm["O1"]) == (0, 128, 256, 384)
    assert (tm["P0"], tm["P1"]) == (64, 192)            # P over the upper half of S (bf16: BN/2 columns)
    assert (tm["C0"], tm["C1"]) == (0, 128)             # correction columns in the lower half
    assert tm["used"] == 512 == tm["alloc"] == TMEM_COLUMNS
    sm = c.smem_plan()
    assert sm["q"] == 2 * 128 * 128 * 2 and sm["k_tile"] == sm["v_tile"] == 128 * 128 * 2
    assert sm["stages"] == 2                            # a third K+V stage (64 KiB) would not fit
    assert sm["total"] == 65536 + 2 * 65536 + 2 * (9 + 4) * 8 + 16 <= SMEM_CARVEOUT
    assert (c.bm, c.mma_m, c.bn, c.bk0, c.bk1) == (256, 128, 128, 64, 128)


def test_plan_head_dim_64():
    c = FA4Config(head_dim=64, head_dim_v=64, num_q_heads=8, num_kv_heads=2)
    tm = c.tmem_plan()
    assert (tm["O0"], tm["O1"], tm["used"], tm["alloc"]) == (256, 320, 384, 512)
    sm = c.smem_plan()
    assert sm["stages"] == 4 and sm["total"] == 32768 + 4 * 32768 + 2 * (9 + 8) * 8 + 16
    assert c.group == 4 and c.supported()[0]


def test_plan_mla_192_128():
    c = FA4Config(head_dim=192, head_dim_v=128)
    assert c.plan_fits() == (True, "")
    assert c.supported() == (True, "") and c.mla        # built (tests/test_attention_sm100_mla.py)
    ok, why = FA4Config(head_dim=128, head_dim_v=64).supported()   # other MLA-like pairs: planned, not built
    assert not ok and "128/64" in why and "MLA" in why and "not built" in why
    assert (c.padded_head_dim, c.padded_head_dim_v) == (192, 128)
    tm = c.tmem_plan()
    assert (tm["O0"], tm["O1"], tm["used"]) == (256, 384, 512)
    sm = c.smem_plan()
    assert sm["q_tile"] == 128 * 192 * 2 and sm["k_tile"] == 128 * 192 * 2 and sm["v_tile"] == 128 * 128 * 2
    assert sm["stages"] == 1 and sm["total"] <= SMEM_CARVEOUT < c._smem_total(2)


def test_plan_head_dim_256_is_refused_with_the_reason():
    ok, why = FA4Config(head_dim=256, head_dim_v=256).plan_fits()
    assert not ok and "768 columns > 512" in why
    assert FA4Config(head_dim=256, head_dim_v=256).supported() == (ok, why)
    with pytest.raises(ValueError, match="TMEM"):
        FA4Config(head_dim=256, head_dim_v=256).validate()


@pytest.mark.parametrize("kw,reason", [
    (dict(dtype="f32"), "dtype"),
    (dict(head_dim=72), "multiples of 16"),
    (dict(head_dim=64, head_dim_v=128), "head_dim_v=128 > head_dim=64"),
    (dict(num_q_heads=6, num_kv_heads=4), "multiple of num_kv_heads"),
    (dict(fuse_gqa=True), "fuse_gqa"),
    (dict(bn=48), "bn=48"),
    (dict(bn=64), "bn=128 only"),                      # the plan fits; the kernel was never compiled
    (dict(head_dim=96, head_dim_v=96), "64/64, 128/128"),
    (dict(stages=1), "stages=1"),
    (dict(exp2_poly_stride=3), "(0, 2, 4, 8)"),
    (dict(num_pv_stages=2), "num_pv_stages=2"),
    (dict(swizzle=64), "128-byte swizzle"),
    (dict(exp2_poly_stride=1), "exp2_poly_stride"),
    (dict(stages=3), "SMEM"),                           # 64 KiB Q + 3 x 64 KiB K/V > 227 KiB
    (dict(bn=256, head_dim=64, head_dim_v=64), "TMEM"),  # S0 + S1 = 512 already
])
def test_supported_gives_reasons(kw, reason):
    ok, why = FA4Config(**kw).supported()
    assert not ok and reason in why, why


def test_supported_space_is_the_compiled_one():
    """Every config supported() accepts, over a grid of every field, has the code shape of one of
    supported_configs(), which the test below compiles: so 'every supported config compiles with 0
    spills' is checked, not sampled."""
    compiled_shapes = [code_shape(c) for c in supported_configs()]
    assert len(set(compiled_shapes)) == len(compiled_shapes) == 288
    # MLA (note "MLA"): compiled by tests/test_attention_sm100_mla.py, not by the sweep below
    mla_shapes = {code_shape(c) for c in mla_configs()}
    assert not mla_shapes & set(compiled_shapes)
    assert all(c.supported()[0] for c in supported_configs())
    assert all(code_shape(c) in compiled_shapes for c in configs()), "the shipped configs are among them"
    seen, seen_mla = set(), set()
    pairs = [(d, d) for d in range(16, 272, 16)] + [(192, 128), (128, 64), (256, 128)]
    for dtype, (qk, ov), bn, stages, stride, group, causal in itertools.product(
            ("bf16", "f16", "f32"), pairs, (32, 64, 128, 256), range(8), range(10), (1, 2, 3, 8, 12),
            (False, True)):
        cfg = FA4Config(dtype=dtype, head_dim=qk, head_dim_v=ov, bn=bn, stages=stages,
                        exp2_poly_stride=stride, num_q_heads=group * 2, num_kv_heads=2, causal=causal)
        if cfg.supported()[0] and cfg.mla:
            assert code_shape(cfg) in mla_shapes, cfg
            seen_mla.add(code_shape(cfg))
        elif cfg.supported()[0]:
            assert code_shape(cfg) in compiled_shapes, cfg
            seen.add(code_shape(cfg))
    assert seen == set(compiled_shapes) and seen_mla == mla_shapes


def test_config_is_frozen_hashable_and_keyed():
    a, b = FA4Config(), FA4Config()
    assert a == b and hash(a) == hash(b) and len({a, b, FA4Config(causal=True)}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.bn = 64
    assert a.key()["kernel"] == "attention_fwd_sm100" and a.key() != FA4Config(num_kv_heads=4).key()
    d = FA4Config(causal=True, num_kv_heads=4).description()
    for part in ("qk128/ov128", "group 4", "causal", "bm=256", "S1=128", "O1=384", "P0=64", "used 512/512",
                 "SMEM 196832/231424"):
        assert part in d, d


def test_launch_contract(sweep):
    problem = AttnProblem(2, 1000, 2000, 16, 4, 128, "bf16", True, 0.125)
    assert grid(FA4Config(), problem) == (4, 16, 2)           # ceil(1000 / 256) CTAs of two Q tiles
    args = launch_args(FA4Config(), problem, {n: n for n in ("q", "k", "v", "o", "lse")})
    assert list(args) == [name for name, _ in LAUNCH_PARAMS]
    assert list(args.values())[:7] == ["q", "k", "v", "o", "lse", 1000, 2000]
    assert args["scale_log2"] == pytest.approx(0.125 * 1.4426950408889634)
    assert FA4Config.from_key({**FA4Config(causal=True).key(), "cubin_backend": "nvjitlink-lto"}) == FA4Config(causal=True)
    # the compiled kernel declares exactly this table
    art, _ = compiled(FA4Config())
    assert [(p.name, p.kind) for p in art.params] == list(LAUNCH_PARAMS)


# ---- compiled kernels --------------------------------------------------------------------------------
needs_ptxas = pytest.mark.skipif(lowering.find_ptxas() is None,
                                 reason="no ptxas (pip install nvidia-cuda-nvcc): the ptxas route needs it")
SHIPPED = kernels.cubin_backend("attention_fwd_sm100")


def compiled(cfg: FA4Config, backend: str = SHIPPED):
    return _sm100.compiled(cfg, "test-sm100-attention", backend)


ROLE_BUDGETS = {regs for _, _, _, regs in ROLES}          # 48, 80, 192


def _id(c: FA4Config) -> str:
    return f"{c.dtype}-d{c.head_dim}-g{c.group}{'-causal' if c.causal else ''}"


def test_ships_through_nvjitlink_lto():
    assert SHIPPED == "nvjitlink-lto"


@pytest.mark.parametrize("cfg", configs(), ids=_id)
def test_compiles_with_zero_spills_and_the_role_budgets(cfg, sweep):
    art, seconds = compiled(cfg)           # the sweep's compile of it (supported_configs() holds it), or a new one
    r = art.resources
    print(f"{art.name}: {r['registers']} regs at entry, spills {r['spill_stores']}/{r['spill_loads']}, "
          f"SMEM {art.smem_bytes} B, TMEM {r['tmem_cols']} cols, compile {seconds:.1f} s")
    assert art.arch == "sm_100a" and art.cubin[:4] == b"\x7fELF"
    assert r["cubin_backend"] == "nvjitlink-lto"
    assert role_budgets(sass_of(art)) == ROLE_BUDGETS    # sass_of skips without nvdisasm
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    assert not r["setmaxnreg_ignored"]
    assert r["registers"] == 65536 // 512                # the entry budget; roles move it with setmaxnreg
    assert r["tmem_cols"] == cfg.tmem_plan()["alloc"] == TMEM_COLUMNS
    assert r["threads"] == 512
    # SMEM: the plan's tiles and barriers (placed 1024-aligned, slot and barriers after the tiles)
    plan = cfg.smem_plan()
    assert plan["total"] <= art.smem_bytes <= plan["total"] + 1024 <= SMEM_CARVEOUT + 1024
    assert seconds < 60


def _compile_and_interpret(cfg: FA4Config, read_sass: bool = True) -> tuple:
    """(worker process) compile one config as the kernel ships (its own options), and run the same
    compile's nvvm-stage IR in the interpreter (fa4mlir.interpret.StageTap: the IR stages run once)
    on one CTA, as tests/test_interpret_attention.py's test_sm100_supported_config does: 200 query
    rows (both Q tiles, the second ragged) over stages + 1 K/V blocks less 37 keys (the K/V ring
    wraps, the last block is ragged); for GQA the group's last head. Its resources, and the FA rule's
    verdict (or the fault the interpreter raised). `read_sass`: disassemble the cubin for the role
    budgets (nvdisasm, about 0.7 s; None otherwise)."""
    from fa4mlir import interpret
    from tests.test_interpret_attention import run_config
    t0 = time.perf_counter()
    kir = k100.build(cfg)
    tap = interpret.StageTap(kir)
    art = lowering.lower(kir, CompileOptions(cubin_backend=SHIPPED), key="test-sm100-supported", after_stage=tap)
    t1 = time.perf_counter()
    try:
        report = run_config(cfg, 200, 128 * (cfg.resolved_stages + 1) - 37, head=cfg.group - 1,
                            seed=cfg.resolved_stages, kernel=tap.kernel())
        verdict = "ok" if report["ok"] else {k: v for k, v in report.items() if k != "stats"}
    except interpret.InterpretError as exc:
        verdict = f"{type(exc).__name__}: {exc}"
    return (art.name, art.resources, art.smem_bytes, t1 - t0,
            role_budgets(disassemble(art.cubin)) if read_sass else None, verdict, time.perf_counter() - t1,
            art if cfg in configs() else None)


@pytest.fixture(scope="module")
def sweep():
    """(configs, results) of the sweep below, run once per session by the first test that asks for it; the
    shipped configs' artifacts (configs(): supported_configs() holds them) go to compiled()'s table, so they are
    compiled once. None where nvdisasm or torch is missing (the sweep test skips; compiled() compiles)."""
    if find_nvdisasm() is None:
        return None
    try:
        import torch  # noqa: F401               # the interpreter's inputs and float64 reference
    except ImportError:
        return None
    cfgs = supported_configs()
    # The SASS's role budgets of one config per (dtype, head dims, causal, GQA group): the rest of the
    # sweep reads ptxas's own report (setmaxnreg honoured) and skips nvdisasm's 0.7 s per config.
    shapes = {(c.dtype, c.head_dim, c.head_dim_v, c.causal, c.group): c for c in reversed(cfgs)}
    read_sass = [shapes[(c.dtype, c.head_dim, c.head_dim_v, c.causal, c.group)] is c for c in cfgs]
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(2, os.cpu_count() or 2), mp_context=ctx) as pool:
        results = list(pool.map(_compile_and_interpret, cfgs, read_sass, chunksize=4))
    for cfg, res in zip(cfgs, results):
        if res[-1] is not None:
            _sm100.adopt(cfg, "test-sm100-attention", SHIPPED, res[-1], res[3])
    return cfgs, shapes, [res[:-1] for res in results]


def test_every_supported_config_compiles_and_interprets(sweep):
    """All 288 code shapes of the supported space (test_supported_space_is_the_compiled_one), compiled
    through nvJitLink's LTO in worker processes: 0 spills, setmaxnreg honoured, SMEM within the plan
    and the carve-out, the whole TMEM allocated, the role table's register budgets in the SASS (of one config
    per dtype, head dims, causal and group: 24 of them). About
    2 s of libNVVM + nvJitLink each. The same compile's nvvm-stage IR is executed by the interpreter
    (issue 30's bar: every supported config, numerics by the FA rule, in CI): about 1 s more each."""
    if sweep is None:
        pytest.skip("nvdisasm (pip install nvidia-cuda-nvdisasm: the role budgets) or torch (the interpreter's "
                    "inputs and float64 reference) is not installed")
    cfgs, shapes, results = sweep
    assert sum(cfg in cfgs for cfg in configs()) == len(configs()), "the shipped configs are compiled by the sweep"
    bad, wrong, names = [], [], set()
    for cfg, (name, r, smem, seconds, budgets, verdict, _) in zip(cfgs, results):
        names.add(name)
        ok = (r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0 and not r["setmaxnreg_ignored"]
              and r["cubin_backend"] == "nvjitlink-lto" and budgets in (ROLE_BUDGETS, None)
              and r["tmem_cols"] == TMEM_COLUMNS and cfg.smem_plan()["total"] <= smem <= SMEM_CARVEOUT + 1024)
        if not ok:
            bad.append((name, {k: r[k] for k in ("spill_stores", "spill_loads", "stack_bytes", "setmaxnreg_ignored",
                                                 "tmem_cols")}, smem, budgets))
        if verdict != "ok":
            wrong.append((name, verdict))
    slowest = max(x[3] for x in results)
    print(f"{len(cfgs)} supported code shapes compiled (slowest {slowest:.1f} s; failures {len(bad)}) and "
          f"interpreted (slowest {max(x[6] for x in results):.1f} s; wrong or faulting {len(wrong)})")
    assert not bad, bad[:10]
    assert not wrong, wrong[:10]
    assert len(names) == len(cfgs), "every code shape has its own kernel name"
    assert sum(b is not None for *_, b, _v, _t in results) == len(shapes) >= 24


def test_sass_setmaxnreg_matches_the_role_table():
    art, _ = compiled(configs()[0])
    sass = sass_of(art)
    assert role_budgets(sass) == ROLE_BUDGETS == {48, 80, 192}
    assert len(re.findall(r"USETMAXREG", sass)) == 4     # softmax0, softmax1 and correction up; load/mma down


@pytest.mark.parametrize("cfg", [FA4Config(), FA4Config(head_dim=64, head_dim_v=64, causal=True, num_kv_heads=4)],
                         ids=_id)
def test_sass_holds_tcgen05_tmem_and_tma(cfg):
    art, _ = compiled(cfg)
    sass = sass_of(art)
    count = lambda op: sass_count(sass, op)  # noqa: E731
    s_mmas, pv_mmas = cfg.padded_head_dim // 16, cfg.bn // 16
    # block 0 (S0, S1, P0 V0) + the loop (S0, P1 V, S1, P0 V) + the last P1 V
    assert count("UTCHMMA") == (2 * s_mmas + pv_mmas) + (2 * s_mmas + 2 * pv_mmas) + pv_mmas
    assert len(re.findall(r"UTCHMMA tmem\[", sass)) == 4 * pv_mmas, "P.V takes A (= P) from tensor memory"
    assert count("UTCBAR") >= 14, "tcgen05.commit to s/o full and k/v/p/q empty"
    assert count("LDTM") > 0 and count("STTM") > 0, "tcgen05.ld / tcgen05.st"
    assert count("UTCATOMSWS") >= 2, "TMEM allocator: alloc and dealloc"
    assert count("UTMALDG") >= 3 and count("UTMASTG") >= 1, "TMA loads of Q, K, V and stores of O"
    assert count("VOTE") >= 1, "the correction's warp-uniform rescale test"
    assert count("HGMMA") == 0
    assert not re.search(r"\b(LDL|STL)\b", sass), "no local-memory spills"


def test_nvjitlink_given_ptx_drops_setmaxnreg():
    """nvJitLink given the upstream PTX compiles it as a relocatable unit and ignores setmaxnreg
    (C7504), so every role is held to the 128-register entry budget and the softmax spills: the
    reason the kernel ships through nvJitLink's LTO (NVVM IR) instead."""
    art, _ = compiled(FA4Config(), backend="nvjitlink")
    assert art.cubin[:4] == b"\x7fELF" and art.resources["setmaxnreg_ignored"]
    assert art.resources["spill_stores"] > 0


@needs_ptxas
@pytest.mark.parametrize("cfg", [FA4Config(), FA4Config(head_dim=64, head_dim_v=64, causal=True, num_kv_heads=4)],
                         ids=_id)
def test_the_ptxas_route_has_zero_spills_too(cfg):
    """cubin_backend ptxas (upstream PTX, whole-program ptxas) stays a working alternative."""
    art, _ = compiled(cfg, backend="ptxas")
    r = art.resources
    assert r["cubin_backend"] == "ptxas" and not r["setmaxnreg_ignored"]
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    assert role_budgets(sass_of(art)) == ROLE_BUDGETS    # sass_of skips without nvdisasm


# ---- the pipeline verifier -------------------------------------------------------------------------
def test_verifier_accepts_the_kernel():
    for cfg in (FA4Config(), FA4Config(causal=True, head_dim=64, head_dim_v=64)):
        verify_pipelines(k100.build(cfg).module)


def _commits(module):
    return [op for op in ops_named(module.operation, "fa4.producer_commit", "fa4.mma_commit")]


def test_verifier_rejects_any_one_commit_removed():
    n = len(_commits(k100.build(FA4Config()).module))
    assert n >= 20
    for i in range(n):
        kir = k100.build(FA4Config())
        op = _commits(kir.module)[i]
        pipe = attr(op, "pipe")
        op.erase()
        with pytest.raises(PassError, match=rf"pipeline '{pipe}'|'{pipe}'"):
            verify_pipelines(kir.module)


def test_role_table_fills_the_register_file():
    per_group = {}
    for _, first, n, regs in ROLES:
        per_group.setdefault(first // 4, regs)
        assert per_group[first // 4] == regs
    assert sum(per_group.values()) * 128 == 65536
    assert MMA_M == 128
