"""bench/sanitize.py without a GPU: compute-sanitizer's report formats and the verdict of a run, the
matrix (bench/sanitize_matrix.py) against kernel_sets' gpu-tests set (every runnable family and feature
has a case), the command lines and arguments, the parent loop driven by a fake compute-sanitizer, and
that the script runs without MLIR. The children's checks on CPU tensors: test_sanitize_children.py."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench import sanitize as san
from bench import sanitize_matrix as smx
from bench import sanitize_mla_sparse as sps
from bench import sanitize_score_mod as ssm
from bench.sanitize_report import parse_report
from fa4mlir import kernel_sets, kernels
from fa4mlir.artifacts import KernelArtifact, write_bundle
from fa4mlir.attention import AttnProblem
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.testing import BLOCK_MLIR
from tests._sanitize_helpers import fake_bundle, verdict

ATTN = "attention_fwd_sm90_bf16_d128_causal_128x128_s2_pers"
RESULT = f'SANITIZE-RESULT {{"kernel": "{ATTN}", "shape": [2, 300, 300, 4, 2], "via": "runtime", "ok": true}}\n'
END_OK = 'SANITIZE-END {"ok": true, "checks": 1, "device": "NVIDIA H200", "torch": "2.11.0+cu130", "seed": 7}\n'

# Realistic outputs: the sanitizer's lines and the child's, interleaved as they reach the pipe.
CLEAN = "========= COMPUTE-SANITIZER\n" + RESULT + END_OK + "========= ERROR SUMMARY: 0 errors\n"
MEMCHECK_OOB = f"""========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at {ATTN}+0x2a40
=========     by thread (128,0,0) in block (2,0,0)
=========     Address 0x7f3a2c0e1000 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a2c0d9600 of size 30720 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2e4f1f] in libcuda.so.1
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaDeviceSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========
SANITIZE-END {{"ok": false, "checks": 0, "error": "AcceleratorError: CUDA error: unspecified launch failure"}}
========= Target application returned an error
========= ERROR SUMMARY: 2 errors
"""
RACE_HAZARD = f"""========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at {ATTN}+0x1f30
=========     and Read access at {ATTN}+0x2210 [384 hazards]
=========
{RESULT}{END_OK}========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
RACE_WARNINGS = f"""========= COMPUTE-SANITIZER
========= Warning: Race reported between Write access at {ATTN}+0x1f30
=========     and Write access at {ATTN}+0x1f30 [12 hazards]
=========
{RESULT}{END_OK}========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)
"""
RACE_CLEAN = "========= COMPUTE-SANITIZER\n" + RESULT + END_OK + \
    "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
SYNC_BARRIER = f"""========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in warp
=========     at {ATTN}+0x880
=========     by thread (32,0,0) in block (0,0,0)
=========
{RESULT}{END_OK}========= ERROR SUMMARY: 1 error
"""
UNSUPPORTED = """========= COMPUTE-SANITIZER
========= Error: Device not supported. Please refer to the "Supported Devices" section of the sanitizer documentation
=========
""" + RESULT + END_OK + "========= ERROR SUMMARY: 1 error\n"
CRASHED = "========= COMPUTE-SANITIZER\n" + RESULT   # killed mid-run: no summary, no SANITIZE-END
WRONG = "========= COMPUTE-SANITIZER\n" + RESULT.replace('"ok": true', '"ok": false') + \
    'SANITIZE-END {"ok": false, "checks": 1}\n========= ERROR SUMMARY: 0 errors\n'
WATCHDOG = """fa4mlir watchdog: kernel deadlock_sm90_debug: role 'consumer' timed out after 2 s waiting on pipeline \
'kv_pipe' full[stage 0] phase 0 (block 0,0,0 thread 128)
"""
TRAP = f"""========= COMPUTE-SANITIZER
{WATCHDOG}========= Illegal instruction
=========     at deadlock_sm90_debug+0x4f0
=========     by thread (128,0,0) in block (0,0,0)
=========
========= Program hit CUDA_ERROR_ILLEGAL_INSTRUCTION (error 715) due to "an illegal instruction was encountered" on CUDA API call to cudaDeviceSynchronize.
=========
SANITIZE-RESULT {{"kernel": "deadlock_sm90_debug", "via": "runtime", "ok": true, "trapped": "AcceleratorError: illegal instruction"}}
SANITIZE-END {{"ok": true, "checks": 1}}
========= ERROR SUMMARY: 2 errors
"""
OUTPUTS = {"clean": (CLEAN, 0), "oob": (MEMCHECK_OOB, 99), "hazard": (RACE_HAZARD, 99), "race-clean": (RACE_CLEAN, 0),
           "unsupported": (UNSUPPORTED, 99), "crash": (CRASHED, 139), "trap": (TRAP, 99)}


# ----------------------------------------------------------------------------------------------
# Reports and verdicts
# ----------------------------------------------------------------------------------------------

def test_clean_memcheck_run():
    rep = parse_report(CLEAN)
    assert (rep.errors, rep.hazards, rep.records) == (0, None, [])
    assert rep.results[0]["kernel"] == ATTN and rep.end["device"] == "NVIDIA H200"
    assert verdict(CLEAN) == ("clean", "1 checks passed")


def test_memcheck_out_of_bounds_write():
    rep = parse_report(MEMCHECK_OOB)
    assert rep.errors == 2
    assert [r.kind for r in rep.records] == ["access", "api", "note"]
    assert rep.records[0].lines[:3] == ["Invalid __global__ write of size 4 bytes", f"at {ATTN}+0x2a40",
                                        "by thread (128,0,0) in block (2,0,0)"]
    assert len(rep.records[0].lines) <= 8
    assert verdict(MEMCHECK_OOB, 99) == ("findings", "Invalid __global__ write of size 4 bytes")


def test_racecheck_hazard_warnings_and_clean():
    rep = parse_report(RACE_HAZARD)
    assert (rep.errors, rep.hazards, rep.race_errors, rep.race_warnings) == (None, 1, 1, 0)
    assert rep.records[0].kind == "race" and rep.records[0].lines[1].endswith("[384 hazards]")
    assert verdict(RACE_HAZARD, 99)[0] == "findings"
    assert parse_report(RACE_WARNINGS).records[0].kind == "race-warning"
    assert verdict(RACE_WARNINGS) == ("warnings", "2 racecheck warnings")
    assert verdict(RACE_CLEAN)[0] == "clean"


def test_synccheck_barrier_error():
    assert parse_report(SYNC_BARRIER).records[0].kind == "sync"
    assert verdict(SYNC_BARRIER, 99) == ("findings", "Barrier error detected. Divergent thread(s) in warp")


def test_device_not_supported_is_unavailable_not_a_pass():
    status, why = verdict(UNSUPPORTED, 99)
    assert status == "unavailable" and why.startswith("Error: Device not supported")
    assert status not in ("clean", "warnings")


def test_runs_without_an_answer():
    assert verdict(CRASHED, 139)[0] == "crashed"                     # no summary
    assert verdict(CLEAN.replace(END_OK, ""), 0)[0] == "crashed"     # summary, but the child never finished
    assert verdict(CLEAN, 1) == ("crashed", "rc 1 with no error reported")
    assert verdict(CRASHED, -9, timed_out=True)[0] == "timeout"
    assert verdict(WRONG, 1)[0] == "wrong"                           # clean report, wrong numbers
    died = CLEAN.replace(END_OK, 'SANITIZE-END {"ok": false, "checks": 0, "error": "LookupError: no kernel"}\n')
    assert verdict(died, 3) == ("crashed", "LookupError: no kernel")


def test_watchdog_trap_is_expected_and_nothing_else_is():
    assert verdict(TRAP, 99, trap=True) == ("expected-trap", "2 sanitizer errors, all from the trap")
    assert verdict(TRAP, 99)[0] == "findings"                        # the same report from any other kernel
    oob = TRAP.replace("========= Illegal instruction", "========= Invalid __shared__ write of size 4 bytes")
    assert verdict(oob, 99, trap=True) == ("findings", "Invalid __shared__ write of size 4 bytes")
    assert verdict(TRAP.replace(WATCHDOG, ""), 99, trap=True)[0] == "wrong"       # trapped, no message
    no_trap = TRAP.replace('"ok": true, "checks"', '"ok": false, "checks"')
    assert verdict(no_trap, 0, trap=True)[0] == "wrong"


# ----------------------------------------------------------------------------------------------
# The matrix against kernel_sets
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_tests():
    """The entries of the sets the matrix covers (gpu-tests, decode) as (kernel, config dict, arch,
    compile-option overrides)."""
    return [(e[0], e[1].key(), kernels.arch(e[0]), e[2] if len(e) > 2 else {})
            for e in kernel_sets.configs(list(san.SETS))]


def test_every_runnable_family_and_feature_of_gpu_tests_has_a_case(gpu_tests):
    runnable = [(k, cfg) for k, cfg, arch, _ in gpu_tests if arch == san.RUNNABLE_ARCH]
    assert san.uncovered(runnable) == []
    assert {k for k, _ in runnable} == set(san.CHILDREN) == {c.kernel for c in san.CASES}
    # what cannot run here is sm_100a only, and has no case (the JSON lists it as not runnable)
    assert {arch for _, _, arch, _ in gpu_tests if arch != san.RUNNABLE_ARCH} == {"sm_100a"}
    # the sets the lead's bundle holds (gpu-tests, bench) have nothing runnable beyond them either
    bench = [(e[0], e[1].key()) for e in kernel_sets.configs(["gpu-tests", "bench"]) if kernels.arch(e[0]) == "sm_90a"]
    assert san.uncovered(bench) == []
    fams = {f for c in san.CASES for f in c.families}
    for fetch in ("contig", "gather", "box8", "page-box", "tile-box"):
        for split in ("split", "unsplit"):
            assert f"attention_decode_sm90/{fetch}/{split}/dense" in fams
    assert {"attention_combine_sm90", "kvcache_append_sm90/paged", "kvcache_append_sm90/contig"} <= fams
    feats = set().union(*(smx.features(c.kernel, m) for c in san.CASES for m in c.match))
    assert {"window", "chunk", "softcap", "sinks", "scale-tensor", "scale-kv_head", "scale-block"} <= feats
    # the varlen kernels: their own order and stores (a family of each tile shape, full and causal), their
    # own features; the MLA kernel split and unsplit; the 512 combine
    for order in ("full/3wg", "causal/3wg", "full/2wg", "causal/2wg"):
        assert f"attention_fwd_sm90/varlen/{order}/pingpong" in fams
    assert {"varlen-window", "varlen-softcap", "varlen-sinks", "varlen-f16", "varlen-d256"} <= feats
    assert {f"attention_mla_decode_sm90/{split}" for split in ("split", "unsplit")} <= fams
    assert {"mla-bf16", "mla-f16", "mla-box64", "mla-box16", "mla-fp8", "combine-d512"} <= feats
    assert sps.sc.KERNEL in fams and {"sparse-bf16", "sparse-topk_length", "sparse-sinks"} <= feats
    # compiled-in functions: each built-in by name, each aux tensor by position, dtype and rank
    assert {"score_mod-alibi", "score_mod-relative_bias", "score_mod-softcap_tanh", "mask_mod-document_mask",
            "aux0-f32x1", "aux0-f32x2", "aux0-i32x1", "aux1-i32x1"} <= feats
    # every entry of the attention-varlen and mla sets is one case's; every score-mods entry one scoremod case's
    matched = [m for c in san.CASES for m in c.match]
    for kernel, cfg in kernel_sets.attention_varlen() + kernel_sets.mla():
        if smx.features(kernel, cfg.key()) & set(san.KNOWN_GAPS):
            continue        # the decode kernel's varlen_q variants: a known gap (test_known_gaps_are_real_gaps_and_said)
        assert cfg.key() in matched, cfg
    for _, cfg in kernel_sets.score_mods():
        assert [c.child for c in san.CASES if cfg.key() in c.match] == ["scoremod"], cfg


def test_the_coverage_check_fails_on_what_no_case_runs(gpu_tests):
    runnable = [(k, cfg) for k, cfg, arch, _ in gpu_tests if arch == san.RUNNABLE_ARCH]
    new_family = acfg.AttnConfig(dtype="bf16", head_dim=64, causal=True, bm=192, bn=128, persistent=True).key()
    assert san.uncovered([*runnable, (acfg.KERNEL, new_family)]) == ["attention_fwd_sm90/persistent/causal/3wg/pingpong"]
    assert san.uncovered([*runnable, ("decode_sm100", {"kernel": "decode_sm100"})]) == ["decode_sm100"]
    no_poly = [c for c in san.CASES if not any("poly-exp2" in smx.features(c.kernel, m) for m in c.match)]
    assert "poly-exp2" in san.uncovered(runnable, no_poly)       # (the softcap cases' other features too)
    # every mask and score-modifier feature, every decode family and feature: drop its case(s), it is missed
    without = {
        "mask-window-d64": [], "sinks-window-d128-causal": [], "mask-chunk-d128-f16": [],
        "mask-chunk-window-d128-causal,mask-chunk-d128-f16": ["chunk"],
        "mask-window-d64,mask-chunk-window-d128-causal,sinks-window-d128-causal": ["window"],
        "softcap-sinks-d128-causal": ["softcap"],
        "softcap-sinks-d128-causal,sinks-window-d128-causal": ["sinks", "softcap"],
        "decode-gather-d64": ["attention_decode_sm90/gather/split/dense", "attention_decode_sm90/gather/unsplit/dense"],
        "decode-box8-d128": ["attention_decode_sm90/box8/split/dense", "attention_decode_sm90/box8/unsplit/dense"],
        "decode-pagebox-d128": ["attention_decode_sm90/page-box/split/dense",
                                "attention_decode_sm90/page-box/unsplit/dense"],
        "decode-tilebox-d256": ["attention_decode_sm90/tile-box/split/dense",
                                "attention_decode_sm90/tile-box/unsplit/dense", "decode-d256"],
        "decode-contig-d64-f16": ["decode-f16"],        # decode-contig-d128 runs the contiguous families too
        "decode-contig-d64-f16,decode-contig-d128": ["attention_decode_sm90/contig/split/dense",
                                                     "attention_decode_sm90/contig/unsplit/dense", "decode-f16"],
        "decode-fp8-contig-block,decode-fp8-gather-block": ["attention_decode_sm90/contig/split/fp8",
                                                            "attention_decode_sm90/contig/unsplit/fp8",
                                                            "attention_decode_sm90/gather/split/fp8",
                                                            "attention_decode_sm90/gather/unsplit/fp8", "scale-block"],
        "decode-fp8-pagebox-tensor": ["attention_decode_sm90/page-box/split/fp8",
                                      "attention_decode_sm90/page-box/unsplit/fp8", "scale-tensor"],
        "decode-fp8-tilebox-kvhead": ["attention_decode_sm90/tile-box/split/fp8",
                                      "attention_decode_sm90/tile-box/unsplit/fp8", "scale-kv_head"],
        "decode-combine": ["combine-d128", "combine-d256", "combine-d64"],
        "decode-append": ["kvcache_append_sm90/contig", "kvcache_append_sm90/paged"],
        # (the varlen-chunk case's kernels are D64 causal and D128 causal with a window: they cover those)
        "varlen-d64": [],     # varlen-mods' ALiBi D64 kernel has its family
        "varlen-mods": [f"varlen-{f}" for f in ("aux0-f32x1", "aux0-f32x2", "aux0-i32x1", "aux0-i32x2", "aux1-f32x1",
                                                "aux1-f32x2", "aux1-i32x1", "mask_mod-document_mask",
                                                "mask_mod-sequence_document", "score_mod-alibi",
                                                "score_mod-packed_bias", "score_mod-relative_bias",
                                                "score_mod-sequence_bias", "score_mod-softcap_tanh")],
        "varlen-head-dims": ["varlen-d192", "varlen-d96", "varlen-dv128"],
        # the full 2-warpgroup family and f16 are run by varlen-mods and varlen-head-dims too
        "varlen-d128,varlen-d256-f16,varlen-window-softcap-sinks": ["varlen-d256", "varlen-sinks", "varlen-softcap"],
        "varlen-d256-f16": ["varlen-d256"],          # varlen-head-dims has an f16 kernel
        "varlen-d256-f16,varlen-head-dims": ["varlen-d192", "varlen-d256", "varlen-d96", "varlen-dv128",
                                             "varlen-f16"],
        "varlen-window-softcap-sinks": ["varlen-sinks", "varlen-softcap"],   # (varlen-mods' softcap_tanh: poly exp2)
        "varlen-chunk": ["varlen-chunk"],
        "mla-bf16-p64,mla-f16-p64,mla-bf16-p16": ["attention_mla_decode_sm90/split", "attention_mla_decode_sm90/unsplit"],
        "mla-f16-p64,mla-swapab-f16-p64": ["mla-f16"],
        "mla-bf16-p16,mla-fp8-p16,mla-swapab-bf16-p16,mla-seesaw-bf16-p16": ["mla-box16"],
        "mla-swapab-bf16-p64,mla-swapab-f16-p64,mla-swapab-bf16-p16": [
            "attention_mla_decode_sm90/split/swapab", "attention_mla_decode_sm90/unsplit/swapab"],
        "mla-combine": ["combine-d512"],
        "mla-fp8-p64,mla-fp8-p16": ["attention_mla_decode_sm90/split/fp8", "attention_mla_decode_sm90/unsplit/fp8",
                                    "mla-fp8"],
        "mla-sparse-topklen-or-sinks": [],
        "mla-sparse-fp8": ["sparse-fp8"],
        ",".join(n for n, _, _ in sps.CASES): [sps.sc.KERNEL, "sparse-bf16", "sparse-fp8", "sparse-pwg",
                                               "sparse-seesaw", "sparse-sinks", "sparse-topk_length"],
        "attn-d96-causal": ["d96"],
        "attn-d192-v128-causal": ["dv128"],
        "attn-d192-f16,attn-d192-v128-causal": ["d192", "dv128"],
        "decode-combine,mla-combine": ["attention_combine_sm90", "combine-d128", "combine-d256", "combine-d512",
                                       "combine-d64"],
        "scoremod-docmask-alibi-d64-causal": ["aux1-i32x1"],
        "scoremod-alibi-relbias-d64": ["aux0-f32x2", "score_mod-relative_bias"],
        "scoremod-docmask-d128": ["aux0-i32x1"],
        "scoremod-docmask-alibi-d64-causal,scoremod-docmask-d128": ["aux0-i32x1", "aux1-i32x1",
                                                                     "mask_mod-document_mask"],
        "scoremod-softcap": ["score_mod-softcap_tanh"],
        ",".join(n for n, _, _ in ssm.CASES): ["aux0-f32x1", "aux0-f32x2", "aux0-i32x1", "aux1-i32x1",
                                               "mask_mod-document_mask", "score_mod-alibi", "score_mod-relative_bias",
                                               "score_mod-softcap_tanh"],
    }
    for names, missed in without.items():
        left = [c for c in san.CASES if c.name not in names.split(",")]
        assert len(left) == len(san.CASES) - len(names.split(",")), names
        assert san.uncovered(runnable, left) == missed, names
    unsplit_only = [replace(c, match=c.match[1:]) if c.name == "decode-box8-d128" else c for c in san.CASES]
    assert san.uncovered(runnable, unsplit_only) == ["attention_decode_sm90/box8/split/dense"]
    # a dense kernel does not cover its tiles' varlen family (nor the other way round)
    dense = [replace(c, match=tuple({k: v for k, v in m.items() if k != "varlen"} for m in c.match))
             if c.child == "varlen" else c for c in san.CASES]
    assert "attention_fwd_sm90/varlen/causal/3wg/pingpong" in san.uncovered(runnable, dense)
    # nor a plain kernel of a score-mod kernel's tiles its functions and aux tensors
    plain = [replace(c, match=tuple({k: v for k, v in m.items() if k not in ("score_mod", "mask_mod", "aux")}
                                    for m in c.match)) if c.child == "scoremod" else c for c in san.CASES]
    assert {"score_mod-alibi", "mask_mod-document_mask", "aux1-i32x1"} <= set(san.uncovered(runnable, plain))


def test_every_case_runs_exactly_one_gpu_tests_kernel(gpu_tests):
    for case in san.CASES:
        for match in case.match:
            hits = [cfg for k, cfg, _, opts in gpu_tests if k == case.kernel and not opts
                    and all(cfg.get(key) == value for key, value in match.items())
                    and san.same_variant(cfg, match)]    # as san.find tells the variants apart
            assert len(hits) == 1, (case.name, match, len(hits))


def test_flash_attn_func_runs_every_default_kernel_on_its_api_shape():
    defaults = {cfg for _, cfg in kernel_sets.attention()}
    for cfg in defaults:
        shape = san.api_shape(cfg)
        assert shape is not None, cfg
        assert acfg.default_config(cfg.dtype, cfg.head_dim, cfg.causal, shape[2], head_dim_v=cfg.head_dim_v) == cfg
    for _, cfg, *_ in kernel_sets.tile_variants() + kernel_sets.attention_fa4_pieces():
        assert cfg in defaults or san.api_shape(cfg) is None, cfg   # one variant is also a default
    attn_cases = [c for c in san.CASES if c.kernel == acfg.KERNEL]
    assert sum(acfg.AttnConfig.from_key(c.match[0]) in defaults for c in attn_cases) >= 8


def test_attention_shapes_reach_the_edges():
    for case in (c for c in san.CASES if c.kernel == acfg.KERNEL and not c.child):
        cfg = acfg.AttnConfig.from_key(case.match[0])
        shapes = case.shapes
        assert any(sq > sk for _, sq, sk, _, _ in shapes) and any(sq < sk for _, sq, sk, _, _ in shapes)
        assert any(h > hk for *_, h, hk in shapes)                                   # GQA / MQA
        assert all(sq % cfg.bm and sk % cfg.bn for _, sq, sk, _, _ in shapes)        # ragged tails
        assert any(acfg.query_tiles(cfg, sq) > 1 and sk > 2 * cfg.bn for _, sq, sk, _, _ in shapes)
        if cfg.persistent:   # launched directly on PERSISTENT_CTAS CTAs: each loops over several tiles
            b, sq, sk, h, hk = shapes[0]
            p = AttnProblem.of((b, sq, h, cfg.head_dim), (b, sk, hk, cfg.head_dim), cfg.dtype, causal=cfg.causal)
            assert acfg.grid(cfg, p, san.PERSISTENT_CTAS)[0] * 2 <= acfg.query_tiles(cfg, sq) * h * b


def test_quick_cases_cover_every_kernel_first():
    quick = san.select_cases(True, None)
    assert {c.kernel for c in quick} == {c.kernel for c in san.CASES}
    fams = {c.family for c in quick}
    assert any("/persistent/" in f for f in fams) and any("/tiled/" in f for f in fams)
    assert any("/causal/" in f for f in fams) and any("/full/" in f for f in fams)
    # one case of each new family group: a mask, softcap and sinks, each decode fetch, FP8, the combine, the append
    feats = set().union(*(smx.features(c.kernel, m) for c in quick for m in c.match))
    assert {"window", "softcap", "sinks"} <= feats
    fams = {f for c in quick for f in c.families}
    for fetch in ("contig", "gather", "box8", "page-box", "tile-box"):
        assert {f"attention_decode_sm90/{fetch}/split/dense", f"attention_decode_sm90/{fetch}/unsplit/dense"} <= fams
    assert any(f.endswith("/fp8") for f in fams) and "attention_combine_sm90" in fams
    assert {"kvcache_append_sm90/paged", "kvcache_append_sm90/contig"} <= fams
    # and every varlen and MLA family (their features may wait for the full matrix)
    every = {f for c in san.CASES for f in c.families}
    assert {f for f in every if "/varlen/" in f or f.startswith("attention_mla")} <= fams
    assert sum("/varlen/" in f for f in fams) == 4 and sum(f.startswith("attention_mla_decode") for f in fams) == 10   # M64, fp8, swapab, its ring, seesaw (x 2)
    assert sps.sc.KERNEL in fams and {"sparse-topk_length", "sparse-sinks"} <= feats
    # one score-mod case: a score_mod and a mask_mod, two aux tensors
    assert [c.name for c in quick if c.child == "scoremod"] == ["scoremod-docmask-alibi-d64-causal"]
    assert {"score_mod-alibi", "mask_mod-document_mask", "aux0-f32x1", "aux1-i32x1"} <= feats
    everything = san.select_cases(False, None)
    assert len(everything) == len(san.CASES) and everything[:len(quick)] == quick
    assert [c.name for c in san.select_cases(False, ["gemm", "watchdog"])] == ["gemm", "watchdog"]
    with pytest.raises(ValueError, match="unknown case"):
        san.select_cases(False, ["nope"])


# ----------------------------------------------------------------------------------------------
# Command lines and arguments
# ----------------------------------------------------------------------------------------------

def test_commands():
    case = san.CASES_BY_NAME["attn-d128-causal"]
    cmd = san.command("/cs", case, "memcheck", "b", 5)
    assert cmd[:7] == ["/cs", "--tool", "memcheck", "--error-exitcode", "99", "--report-api-errors", "no"]
    assert cmd[cmd.index("--kernel-name") + 1] == "kns=attention_fwd_sm90"
    assert "--kernel-name" not in san.command("/cs", case, "racecheck", "b", 5)   # a filter crashes racecheck
    assert cmd[-6:] == ["--child", "attn-d128-causal", "--bundle", "b", "--seed", "5"]
    assert cmd[cmd.index("--child") - 2] == sys.executable and cmd[cmd.index("--child") - 1].endswith("sanitize.py")
    assert "--kernel-name" not in san.command("/cs", case, "initcheck", "b", 5)   # must see torch's writes
    assert "--kernel-name" not in san.command("/cs", case, "memcheck", "b", 5, kernel_filter=False)


def test_tool_and_case_arguments():
    assert san.parse_tools("all") == list(san.TOOLS)
    assert san.parse_tools("memcheck, synccheck") == ["memcheck", "synccheck"]
    for bad in ("memcheck,helgrind", "", ","):
        with pytest.raises(ValueError, match="--tools"):
            san.parse_tools(bad)
    for argv in (["--tools", "helgrind"], ["--cases", "nope"], ["--jobs", "0"]):
        with pytest.raises(SystemExit) as info:
            san.main(argv)
        assert info.value.code == 2


def test_find_sanitizer(tmp_path, monkeypatch):
    tool = _executable(tmp_path / "cs", "#!/bin/sh\nexit 0\n")
    monkeypatch.setattr(san, "CUDA_GLOBS", ())
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("COMPUTE_SANITIZER", raising=False)
    assert san.find_sanitizer() is None
    assert san.find_sanitizer(str(tool)) == str(tool)
    assert san.find_sanitizer(str(tmp_path / "missing")) is None
    monkeypatch.setenv("COMPUTE_SANITIZER", str(tool))
    assert san.find_sanitizer() == str(tool)
    monkeypatch.delenv("COMPUTE_SANITIZER")
    (tmp_path / "bin").mkdir()
    _executable(tmp_path / "bin" / "compute-sanitizer", "#!/bin/sh\nexit 0\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert san.find_sanitizer() == str(tmp_path / "bin" / "compute-sanitizer")


def test_missing_sanitizer_exits_2_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(san, "CUDA_GLOBS", ())
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("COMPUTE_SANITIZER", raising=False)
    out = tmp_path / "r" / "s.json"
    assert san.main(["--bundle", str(tmp_path), "--out", str(out)]) == 2
    assert "compute-sanitizer not found" in capsys.readouterr().err
    assert json.loads(out.read_text())["status"] == "no-sanitizer"


# ----------------------------------------------------------------------------------------------
# The parent loop, with a fake bundle and a fake compute-sanitizer
# ----------------------------------------------------------------------------------------------

FAKE = """#!{python}
import json, os, sys, time
argv = sys.argv[1:]
if "--version" in argv:
    print("NVIDIA (R) Compute Sanitizer\\nVersion 2025.3.0.0")
    sys.exit(0)
tool, case = argv[argv.index("--tool") + 1], argv[argv.index("--child") + 1]
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(f"{{tool}} {{case}} {{'--kernel-name' in argv}}\\n")
kind = json.loads(os.environ["FAKE_PLAN"]).get(tool, "clean")
if kind == "sleep":
    time.sleep(60)
text, rc = json.loads(os.environ["FAKE_OUTPUTS"])[kind]
sys.stdout.write(text)
sys.exit(rc)
"""


def _executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """run(plan, *args) -> (exit status, JSON doc, calls made, stdout) with the fake sanitizer."""
    tool = _executable(tmp_path / "compute-sanitizer", FAKE.format(python=sys.executable))
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    monkeypatch.setenv("FAKE_OUTPUTS", json.dumps(OUTPUTS))
    bundle = fake_bundle(tmp_path / "bundle", san.CASES)

    def run(plan, *args):
        monkeypatch.setenv("FAKE_PLAN", json.dumps(plan))
        calls.write_text("")
        out = tmp_path / "out" / "sanitize.json"
        code = san.main(["--sanitizer", str(tool), "--bundle", str(bundle), "--out", str(out), *args])
        return code, json.loads(out.read_text()), calls.read_text().splitlines()
    return run


def test_parent_runs_the_matrix_and_records_every_run(fake, capsys):
    code, doc, calls = fake({"memcheck": "clean", "racecheck": "hazard", "synccheck": "unsupported"},
                            "--cases", "attn-d128-causal,gemm", "--seed", "3")
    runs = {(r["case"], r["tool"]): r for r in doc["runs"]}
    assert code == 1 and doc["exit"] == 1
    assert runs[("gemm", "memcheck")]["status"] == "clean" and runs[("gemm", "memcheck")]["errors"] == 0
    hazard = runs[("attn-d128-causal", "racecheck")]
    assert (hazard["status"], hazard["hazards"], hazard["race_errors"]) == ("findings", 1, 1)
    assert hazard["findings"][0]["kind"] == "race" and os.path.isfile(hazard["log"])
    assert runs[("attn-d128-causal", "synccheck")]["status"] == "unavailable"
    assert runs[("gemm", "synccheck")]["why"] == "synccheck was unavailable on an earlier run"
    # case by case, memcheck and synccheck with the kernel filter (racecheck without); the unavailable tool is not tried again
    assert calls == ["memcheck attn-d128-causal True", "racecheck attn-d128-causal False",
                     "synccheck attn-d128-causal True", "memcheck gemm True", "racecheck gemm False"]
    assert doc["kernel_filter"] is True and doc["seed"] == 3 and doc["device"] == "NVIDIA H200"
    assert doc["not_runnable"] == [{"kernel": "gemm_sm100", "arch": "sm_100a", "entries": 1,
                                    "why": "sm_100a kernels need that GPU; the sanitizer runs here on sm_90a"}]
    printed = capsys.readouterr().out
    assert "| attn-d128-causal | attention_fwd_sm90/persistent/causal/2wg/pingpong | clean (0 err" in printed
    assert "not runnable here: gemm_sm100" in printed


def test_parent_clean_run_exits_0_and_watchdog_expects_its_trap(fake):
    code, doc, _ = fake({"memcheck": "clean"}, "--cases", "gemm", "--tools", "memcheck")
    assert code == 0 and doc["summary"] == {"clean": 1}
    code, doc, _ = fake({"memcheck": "trap"}, "--cases", "watchdog", "--tools", "memcheck")
    assert (code, doc["runs"][0]["status"]) == (0, "expected-trap")
    code, doc, _ = fake({"memcheck": "oob"}, "--cases", "gemm", "--tools", "memcheck")
    assert (code, doc["runs"][0]["status"]) == (1, "findings")


def test_parent_timeout_budget_and_resume(fake):
    t0 = time.monotonic()
    code, doc, _ = fake({"memcheck": "sleep"}, "--cases", "gemm", "--tools", "memcheck", "--timeout-s", "1")
    assert (code, doc["runs"][0]["status"]) == (1, "timeout") and time.monotonic() - t0 < 30
    code, doc, calls = fake({}, "--cases", "gemm,watchdog", "--budget-s", "5")
    assert code == 3 and calls == [] and {r["status"] for r in doc["runs"]} == {"skipped"}
    code, doc, calls = fake({"racecheck": "race-clean"}, "--cases", "gemm", "--tools", "memcheck,racecheck")
    assert code == 0 and len(calls) == 2
    code, doc, calls = fake({"racecheck": "race-clean"}, "--cases", "gemm", "--tools", "memcheck,racecheck,synccheck",
                            "--resume")
    assert code == 0 and calls == ["synccheck gemm True"] and doc["resumed"] == 2 and len(doc["runs"]) == 3


def test_parent_runs_in_parallel_and_keeps_the_matrix_order(fake):
    code, doc, calls = fake({}, "--cases", "gemm,attn-d64", "--tools", "memcheck,racecheck", "--jobs", "2")
    assert code == 0 and len(calls) == 4
    assert [(r["case"], r["tool"]) for r in doc["runs"]] == [(c, t) for c in ("gemm", "attn-d64")
                                                             for t in ("memcheck", "racecheck")]


def test_stop_kills_the_running_sanitizer(fake, tmp_path, monkeypatch):
    import threading
    from types import SimpleNamespace
    fake({}, "--cases", "gemm", "--tools", "memcheck")     # sets the fake's environment up
    monkeypatch.setenv("FAKE_PLAN", json.dumps({"memcheck": "sleep"}))
    args = SimpleNamespace(budget_s=600.0, timeout_s=120.0, bundle=str(tmp_path / "bundle"))
    runner = san.Runner(args, str(tmp_path / "compute-sanitizer"), tmp_path, True)
    got = []
    worker = threading.Thread(target=lambda: got.append(runner.run(san.CASES_BY_NAME["gemm"], "memcheck", 1)))
    t0 = time.monotonic()
    worker.start()
    time.sleep(1.0)
    runner.stop()
    worker.join(timeout=30)
    assert got and (got[0].status, got[0].why) == ("skipped", "interrupted") and time.monotonic() - t0 < 30
    assert runner.run(san.CASES_BY_NAME["gemm"], "racecheck", 2).status == "skipped"   # nothing new starts


def test_dry_run_prints_every_command_and_checks_the_bundle(tmp_path, capsys):
    bundle = fake_bundle(tmp_path / "bundle", san.CASES)
    assert san.main(["--dry-run", "--bundle", str(bundle), "--seed", "1"]) == 0
    printed = capsys.readouterr().out
    commands = [line for line in printed.splitlines() if "--child" in line]
    assert len(commands) == len(san.CASES) * len(san.DEFAULT_TOOLS)
    assert "holds every case's kernels" in printed and "not runnable here: gemm_sm100" in printed
    partial = fake_bundle(tmp_path / "partial", [c for c in san.CASES if c.name != "gemm"])
    assert san.main(["--dry-run", "--bundle", str(partial), "--quick"]) == 1
    assert "LACKS" in capsys.readouterr().out


def test_dry_run_finds_every_case_in_the_lead_bundles_sets(tmp_path, capsys):
    """A bundle of the gpu-tests and bench sets' entries as `python -m fa4mlir bundle` writes their
    configs (the config's key and the cubin backend; fake cubins) holds every case's kernels, and
    has no runnable family or feature without a case."""
    arts = []
    for i, (kernel, cfg, *opts) in enumerate(kernel_sets.configs(["gpu-tests", "bench"])):
        backend = (opts[0] if opts else {}).get("cubin_backend", kernels.cubin_backend(kernel))
        arts.append(KernelArtifact(name=f"{kernel}_{i}", arch=kernels.arch(kernel), cubin=b"fake", block=(128, 1, 1),
                                   key=f"{i}".ljust(32, "0"), config={**cfg.key(), "cubin_backend": backend}))
    bundle = write_bundle(tmp_path / "bundle", arts)
    assert san.main(["--dry-run", "--bundle", str(bundle), "--seed", "1"]) == 0
    printed = capsys.readouterr().out
    assert "holds every case's kernels" in printed and "without a case" not in printed


def test_runs_where_there_is_no_mlir(tmp_path):
    """The GPU machine has no MLIR: the script, its dry run and its child's imports must not need it."""
    bundle = fake_bundle(tmp_path / "bundle", san.CASES)
    code = BLOCK_MLIR + textwrap.dedent(f"""
        sys.argv = ["bench/sanitize.py", "--dry-run", "--quick", "--bundle", {str(bundle)!r}]
        from bench import sanitize
        import fa4mlir.attention, fa4mlir.runtime, fa4mlir.testing   # what the children import
        import fa4mlir.attention.kvcache, fa4mlir.attention.kvcache_call, fa4mlir.testing_kvcache
        import fa4mlir.attention.mla, fa4mlir.attention.varlen, fa4mlir.testing_mla, fa4mlir.testing_varlen
        import fa4mlir.attention.checks, fa4mlir.testing_score_mod
        code = sanitize.main()
        mods = sorted(m for m in sys.modules if m == "mlir" or m.startswith("mlir."))
        assert not mods, mods
        print("EXIT", code)
    """)
    repo = Path(san.__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(repo)))
    assert proc.returncode == 0 and "EXIT 0" in proc.stdout, proc.stdout + proc.stderr
    assert "holds every case's kernels" in proc.stdout


def test_known_gaps_are_real_gaps_and_said(gpu_tests, capsys, tmp_path):
    """A KNOWN_GAPS feature is one the gpu-tests kernels have and no case runs (without the gap list
    the coverage check reports it), and --dry-run says so."""
    runnable = [(k, cfg) for k, cfg, arch, _ in gpu_tests if arch == san.RUNNABLE_ARCH]
    assert san.uncovered(runnable, gaps={}) == sorted(san.KNOWN_GAPS)
    san.main(["--dry-run", "--bundle", str(tmp_path / "none")])
    out = capsys.readouterr().out
    assert all(f"not covered: {gap}" in out for gap in san.KNOWN_GAPS)
