"""compute-sanitizer over a reduced matrix of every kernel family the GPU tests run (MLIR-free; on the
GPU machine, from the repo root, with the bundle of `make gpu-bundle`):

    PYTHONPATH=$PWD python3 bench/sanitize.py --bundle bundle --out sanitize.json
        [--tools memcheck,racecheck,synccheck | all] [--quick] [--cases NAME,...] [--resume]
        [--timeout-s 150] [--budget-s 540] [--jobs N] [--sanitizer PATH] [--seed N] [--no-kernel-filter]
    PYTHONPATH=$PWD python3 bench/sanitize.py --dry-run     # the matrix, the bundle check, every command

Each (case, tool) is one process, `compute-sanitizer --tool TOOL --error-exitcode 99 ... python3
bench/sanitize.py --child CASE`: the child draws fresh random inputs, fills the outputs with NaN, launches
the case's kernel on a few small shapes (ragged sequence lengths, several query tiles and KV blocks,
seqlen_q above and below seqlen_k, GQA/MQA; decode: page sizes, lengths and packed query rows that are not
multiples of pages or tiles) and checks every result against a reference (the FA rule of fa4mlir.testing),
so a clean report is known to come from kernels that ran and were right. memcheck and synccheck instrument
only the case's kernels (`--kernel-name kns=KERNEL`; not torch's randn and reference kernels; a decode
call's other kernels, its combine or append, run uninstrumented there: each has its own case, MLA's
combine too) where the sanitizer takes that option (probed first; the JSON says when not); initcheck and
racecheck run unfiltered (UNFILTERED says why). torch's caching allocator is off in the child
(PYTORCH_NO_CUDA_MEMORY_CACHING=1): each tensor is its own allocation, so memcheck sees an access past a
tensor's end.

The matrix (CASES): one case per family of the sm_90a kernels of the gpu-tests and decode sets (SETS;
`family`: the kernel, and for the attention kernel what changes its barriers and shared-memory protocol:
persistent, one tile per CTA or varlen (its own order and stores: sanitize_varlen), causal, consumer
warpgroups, GEMM turns; for the decode kernels sanitize_decode's: fetch, split or unsplit, FP8; the
combine; the append, paged or not; for the MLA decode kernel sanitize_mla's: split or unsplit, FP8,
swap AB, seesaw), plus cases until every head dim, dtype, softmax knob, mask (window, chunk), score
modifier (softcap, sinks), compiled-in score_mod / mask_mod and aux tensor (and the varlen kernels' own,
`varlen-` features), decode dtype, head dim and FP8 scale granularity, combine head dim (512: MLA's) and
MLA dtype and TMA box, sparse MLA topk_length and sinks is covered (tests/test_sanitize_script.py checks both against kernel_sets). The
attention defaults, masks and score modifiers run through flash_attn_func (window_size=, attention_chunk=,
softcap=, sinks=) on one shape it picks them for and, like the variants, launched directly on the others
(a persistent kernel on PERSISTENT_CTAS CTAs, so each CTA strides over several tiles). The decode cases
run flash_attn_with_kvcache (num_splits 1 or SPLITS, k_scale=/v_scale=, k=/v=) on ragged lengths over
shuffled page tables with NaN in unused pages (sanitize_decode's docstring), after checking the planned
call runs the case's kernel. The varlen cases run flash_attn_varlen_func on ragged batches with spare
packed rows (sanitize_varlen's docstring), the MLA cases get_mla_metadata and flash_mla_with_kvcache on a
shuffled block table (sanitize_mla's), the sparse MLA cases flash_mla_sparse_fwd with padded, invalid and
duplicate indices, topk_length and sinks (sanitize_mla_sparse's), the score-mod cases flash_attn_func(score_mod=, mask_mod=,
aux_tensors=) on ragged shapes with exactly sized aux tensors (sanitize_score_mod's), after the same
check. The watchdog case launches the deadlocking debug kernel, which must trap with its message; the
sanitizer's report of that trap (a failed launch, the trap itself) is expected, anything else it reports
is not. sm_100a kernels cannot run here (no Blackwell GPU): the JSON lists them as not runnable.
`--quick`: the cases marked quick, one of each kernel family group (attention defaults, a mask, softcap
and sinks, each decode fetch, FP8, the combine, the append, GEMM, watchdog, each varlen and MLA family,
one score-mod case, one sparse MLA case).

Per run: status, errors (ERROR SUMMARY), racecheck hazards (errors, warnings), wall seconds, return
code, the first lines of the first findings, the child's checks; the full log under --logs.
Statuses: clean; warnings (racecheck warnings only); expected-trap (the watchdog case as it should
be); findings (the sanitizer reported errors); wrong (clean report, wrong numbers or no trap);
crashed (no summary, or the child stopped on an exception); timeout; unavailable (the tool cannot run on
this device, e.g. "Device not supported": not a pass); skipped (--budget-s spent: `--resume` with the
same --out runs what is left). The JSON is rewritten after every run, so a killed call keeps its runs.
Exit status: 1 if any run failed (findings, wrong, crashed, timeout), else 2 if compute-sanitizer is
missing or a tool was unavailable, else 3 if the budget left runs out, else 0.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench import sanitize_mla as smla
from bench import sanitize_mla_sparse as sps
from bench import sanitize_mla_sparse_decode as spd
from bench import sanitize_score_mod as ssm
from bench import sanitize_varlen as svar
from bench.sanitize_decode import DECODE_KERNELS, child_decode, describe
from bench.sanitize_matrix import (CASES, CASES_BY_NAME, KNOWN_GAPS, SOFTCAP, Case, api_shape, mask_mods, picks,
                                   select_cases, uncovered)
from bench.sanitize_report import (FAILED, clip_log, exit_code, filter_accepted, judge, parse_report, sanitizer_version,
                                   table, write_json)
from fa4mlir import kernels
from fa4mlir.kernels import attention_decode_sm90_config as dcfg
from fa4mlir.kernels import attention_mla_decode_sm90_config as mcfg
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels.common.fields import merge_variant_fields

REPO = Path(__file__).resolve().parent.parent
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
DEFAULT_TOOLS = ("memcheck", "racecheck", "synccheck")
TOOL_ARGS = {"memcheck": (), "racecheck": (), "synccheck": (), "initcheck": ()}
# Tools that run unfiltered. initcheck must see torch's writes to know memory is initialised.
# racecheck with any kernel filter (--kernel-name kns=... or --kernel-name-exclude) stopped with
# "Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception", then an illegal
# address, in the GEMM's and every attention case's first launches (compute-sanitizer 2025.3.1,
# H200); the same children ran unfiltered with 0 hazards and every result right.
UNFILTERED = ("initcheck", "racecheck")
ERROR_EXITCODE = 99
# cuda-bindings probes driver entry points through cuGetProcAddress, and the sanitizer counts each
# CUDA_ERROR_INVALID_VALUE answer as an error (34 of them in one flash_attn_func call's process on
# an H200, every one before the first launch); the runtime checks every driver call's return code
# itself, so the sanitizer's errors here are the kernels' memory and synchronisation errors alone.
API_ERRORS = ("--report-api-errors", "no")
RUNNABLE_ARCH = "sm_90a"
SETS = ("gpu-tests", "decode")   # the kernel sets whose runnable families and features the matrix covers (mla and
                                 # attention-varlen are in gpu-tests)
PERSISTENT_CTAS = 3   # a persistent kernel launched directly gets 3 CTAs: each loops over several tiles
WATCHDOG_TEXT = "fa4mlir watchdog: kernel deadlock_sm90_debug"
NAN = float("nan")
DEVICE = "cuda"


def parse_tools(spec: str) -> list[str]:
    tools = list(TOOLS) if spec == "all" else [t.strip() for t in spec.split(",") if t.strip()]
    bad = [t for t in tools if t not in TOOLS]
    if bad or not tools:
        raise ValueError(f"--tools takes a comma list of {', '.join(TOOLS)} or 'all', got {spec!r}")
    return tools


# ----------------------------------------------------------------------------------------------
# compute-sanitizer: where it is, the command line, its report
# ----------------------------------------------------------------------------------------------

CUDA_GLOBS = ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda-*/bin/compute-sanitizer",
              "/usr/local/cuda*/compute-sanitizer/compute-sanitizer")


def find_sanitizer(explicit: str | None = None) -> str | None:
    """--sanitizer, else $COMPUTE_SANITIZER, else PATH, else next to nvcc, else the CUDA install folders."""
    def runnable(path: str) -> bool:
        return os.path.isfile(path) and os.access(path, os.X_OK)

    for cand in (explicit, os.environ.get("COMPUTE_SANITIZER")):
        if cand:
            return cand if runnable(cand) else None
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    nvcc = shutil.which("nvcc")
    near = [str(Path(nvcc).parent / "compute-sanitizer")] if nvcc else []
    return next((c for c in near + sorted(p for g in CUDA_GLOBS for p in glob.glob(g)) if runnable(c)), None)


def command(sanitizer: str, case: Case, tool: str, bundle: str, seed: int, kernel_filter: bool = True) -> list[str]:
    """The sanitizer command of one run; the child is this script with --child."""
    filt = ["--kernel-name", f"kns={case.kernel}"] if kernel_filter and tool not in UNFILTERED else []
    return [sanitizer, "--tool", tool, "--error-exitcode", str(ERROR_EXITCODE), *API_ERRORS, *TOOL_ARGS[tool], *filt,
            sys.executable, str(Path(__file__).resolve()), "--child", case.name, "--bundle", bundle, "--seed", str(seed)]


# ----------------------------------------------------------------------------------------------
# The child: what runs under the sanitizer
# ----------------------------------------------------------------------------------------------

def emit(tag: str, value: dict) -> None:
    print(f"{tag} {json.dumps(value)}", flush=True)


# The kernels `find` looks up among the entries of a case's own variant, each with its config's variant fields
# (kernels.common.fields: declared once beside each config; attention.plan reads the attention kernel's)
VARIANT_FIELDS_BY_KERNEL = {acfg.KERNEL: acfg.VARIANT_FIELDS, dcfg.KERNEL: dcfg.VARIANT_FIELDS,
                            dcfg.COMBINE_KERNEL: dcfg.COMBINE_VARIANT_FIELDS, mcfg.KERNEL: mcfg.VARIANT_FIELDS,
                            sps.sc.KERNEL: sps.sc.VARIANT_FIELDS, sps.sc.DECODE_KERNEL: sps.sc.DECODE_VARIANT_FIELDS}
# their union: an entry with one set holds every item of the plain kernel of its tiles, so a case's entry
# must agree on these too (absent: the default)
OPTIONAL_FIELDS = merge_variant_fields(*VARIANT_FIELDS_BY_KERNEL.values())


def same_variant(config: dict, match: dict) -> bool:
    """Whether a bundle entry's config and a case's match agree on OPTIONAL_FIELDS (absent: unset)."""
    return all(config.get(k, d) == match.get(k, d) for k, d in OPTIONAL_FIELDS.items())


def find(bundle, case: Case, match: dict):
    """The bundle's artefact of one of the case's entries (compiled with the kernel's own backend). A
    varlen, head_dim_v or score_mod entry (a decode kernel's window / softcap / sinks variant, a
    combine's sink variant) holds every item of the plain kernel of its tiles (a plain key has none of
    OPTIONAL_FIELDS): an attention, decode, combine, MLA decode, sparse MLA prefill or decode case's entry
    is looked up among the entries of its own variant, by name."""
    want = dict(arch=RUNNABLE_ARCH, cubin_backend=kernels.cubin_backend(case.kernel), **match)
    if case.kernel in VARIANT_FIELDS_BY_KERNEL:
        names = {e["name"] for e in bundle.entries if e["arch"] == RUNNABLE_ARCH and same_variant(e["config"], match)
                 and all(e["config"].get(k) == v for k, v in want.items() if k != "arch")}
        if not names:
            raise LookupError(f"no kernel of this variant in bundle {bundle.root} matches {want}")
        if len(names) == 1:
            return bundle.find(name=names.pop(), **want)
    return bundle.find(**want)


def child_attention(case: Case, bundle, seed: int):
    """The case's kernel through flash_attn_func on its api_shape (when it is a default), then launched
    directly on each shape; every result against compare_attention (the FA rule, masked rows, no NaN)
    with the kernel's window, chunk, softcap (SOFTCAP) and sinks (random, one per head)."""
    import torch

    from fa4mlir.attention import AttnProblem, find_artifact, flash_attn_func
    from fa4mlir.runtime import load
    from fa4mlir.testing import attention_inputs, compare_attention

    cfg = acfg.AttnConfig.from_key(case.match[0])
    kern = load(find(bundle, case, case.match[0]))
    api = api_shape(cfg)
    launches = ([(api, "flash_attn_func")] if api else []) + [(s, "runtime") for s in case.shapes]
    for i, (shape, via) in enumerate(launches):
        b, sq, _, h, _ = shape
        q, k, v = attention_inputs(*shape, cfg.head_dim, cfg.dtype, seed + i)
        if cfg.head_dim_v:   # v and o of their own head dim (qk 192 / v 128)
            v = attention_inputs(*shape, cfg.dim_v, cfg.dtype, seed + i + 1)[2]
        o = torch.full((*q.shape[:3], cfg.dim_v), NAN, device=q.device, dtype=q.dtype)
        lse = torch.full((b, h, sq), NAN, device=q.device, dtype=torch.float32)
        scale = cfg.head_dim ** -0.5
        sinks = torch.randn(h, generator=torch.Generator().manual_seed(seed + i)).to(q.device) if cfg.sinks else None
        mods = {**mask_mods(cfg), **({"softcap": SOFTCAP} if cfg.softcap else {}),
                **({"sinks": sinks} if cfg.sinks else {})}
        if via == "flash_attn_func":
            art = find_artifact(bundle, cfg.dtype, cfg.head_dim, cfg.causal, shape[2], default=picks(cfg, shape[2]))
            if acfg.AttnConfig.from_key(art.config) != cfg:
                raise RuntimeError(f"flash_attn_func would run {art.name} at {shape}, not the case's kernel")
            flash_attn_func(q, k, v, scale, cfg.causal, return_lse=True, out=o, lse=lse, bundle=bundle, **mods)
        else:
            problem = AttnProblem.of(q.shape, k.shape, cfg.dtype, causal=cfg.causal, softmax_scale=scale).with_options(
                causal=cfg.causal, softmax_scale=scale, softcap=mods.get("softcap", 0.0), sinks=cfg.sinks,
                **mask_mods(cfg))
            problem = replace(problem, head_dim_v=cfg.head_dim_v)
            tensors = dict(q=q, k=k, v=v, o=o, lse=lse, **({"sinks": sinks} if cfg.sinks else {}))
            kern.launch(acfg.grid(cfg, problem, PERSISTENT_CTAS), acfg.launch_args(cfg, problem, tensors))
        torch.cuda.synchronize()
        r = compare_attention(q, k, v, o, lse, scale, cfg.causal, **mods)
        yield {"kernel": kern.artifact.name, "shape": shape, "via": via, "seed": seed + i, "ok": r["ok"],
               **{key: r[key] for key in ("max_err", "bound", "lse_err", "lse_bound", "nan_out", "nan_lse", "masked_ok")}}


def child_gemm(case: Case, bundle, seed: int):
    """Each of the case's GEMMs on each shape, through testing.check_gemm (NaN-poisoned C, the FA rule)."""
    from fa4mlir.runtime import load
    from fa4mlir.testing import check_gemm

    for j, match in enumerate(case.match):
        kern = load(find(bundle, case, match))
        for i, (m, n, k) in enumerate(case.shapes):
            r = check_gemm(kern, m, n, k, seed=seed + 100 * j + i)
            yield {"kernel": kern.artifact.name, "shape": (m, n, k), "via": "runtime", "seed": seed + 100 * j + i,
                   **{key: r[key] for key in ("ok", "max_err", "bound", "nan_or_unwritten")}}


def child_watchdog(case: Case, bundle, seed: int):
    """The deadlocking debug kernel: passes when its launch fails (the watchdog's trap); the parent
    also wants the watchdog's message in the output."""
    import torch

    from fa4mlir.runtime import load

    kern = load(find(bundle, case, case.match[0]))
    out = torch.zeros(4, dtype=torch.int32, device=DEVICE)
    try:
        kern.launch(1, [out])
        torch.cuda.synchronize()
    except Exception as exc:  # the trap: the launch fails, and the context with it
        yield {"kernel": kern.artifact.name, "via": "runtime", "ok": True, "trapped": f"{type(exc).__name__}: {exc}"[:300]}
        return
    yield {"kernel": kern.artifact.name, "via": "runtime", "ok": False, "trapped": None}


CHILDREN = {acfg.KERNEL: child_attention, "gemm_sm90": child_gemm, "deadlock_sm90": child_watchdog,
            **dict.fromkeys(DECODE_KERNELS, child_decode), mcfg.KERNEL: smla.child_mla,
            sps.sc.KERNEL: sps.child_mla_sparse, spd.dc.DECODE_KERNEL: spd.child_mla_sparse_decode}
VARIANT_CHILDREN = {"varlen": svar.child_varlen, "mla": smla.child_mla, "scoremod": ssm.child_scoremod,
                    "mla-sparse": sps.child_mla_sparse, "mla-sparse-decode": spd.child_mla_sparse_decode}


def start_cuda() -> dict:
    """Create torch's CUDA context (the runtime shares it); the device and torch version."""
    import torch
    torch.zeros(1, device=DEVICE)
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__}


def child_main(name: str, bundle_dir: str, seed: int) -> int:
    """Run one case's checks, one SANITIZE-RESULT line each and a SANITIZE-END line; exit 0 when all passed."""
    from fa4mlir.runtime import Bundle

    case = CASES_BY_NAME[name]
    info, ok, count = {"seed": seed}, True, 0
    try:
        info.update(start_cuda())
        child = VARIANT_CHILDREN[case.child] if case.child else CHILDREN[case.kernel]
        for result in child(case, Bundle.open(bundle_dir), seed):
            emit("SANITIZE-RESULT", result)
            ok, count = ok and bool(result["ok"]), count + 1
    except Exception as exc:
        emit("SANITIZE-END", {**info, "ok": False, "checks": count, "error": f"{type(exc).__name__}: {exc}"[:500]})
        return 3
    emit("SANITIZE-END", {**info, "ok": ok and count > 0, "checks": count})
    return 0 if ok and count else 1


# ----------------------------------------------------------------------------------------------
# The parent: run the matrix, print the table, write the JSON
# ----------------------------------------------------------------------------------------------

@dataclass
class Run:
    case: str
    family: str
    tool: str
    status: str = "pending"
    why: str = ""
    errors: int | None = None
    hazards: int | None = None
    race_errors: int = 0
    race_warnings: int = 0
    wall_s: float = 0.0
    rc: int | None = None
    seed: int = 0
    command: str = ""
    findings: list[dict] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)
    child: dict | None = None
    log: str = ""


MIN_RUN_S = 10     # no run starts with less of the budget left


class Runner:
    """Runs (case, tool) pairs under the sanitizer, each in its own process group (killed whole on
    timeout or on SIGTERM/SIGINT). A run's limit is --timeout-s or what is left of --budget-s, and
    none starts with less than MIN_RUN_S of it left; once a tool is unavailable it is not tried again."""

    def __init__(self, args, sanitizer: str, logs: Path, kernel_filter: bool):
        self.args, self.sanitizer, self.logs, self.kernel_filter = args, sanitizer, logs, kernel_filter
        self.start = time.monotonic()
        self.unavailable: set[str] = set()
        self.procs: set[subprocess.Popen] = set()
        self.lock = threading.RLock()   # the signal handler may interrupt the thread that holds it
        self.stopping = False

    def stop(self, signum=None, frame=None) -> None:
        self.stopping = True
        with self.lock:
            for proc in list(self.procs):
                _kill_group(proc)

    def run(self, case: Case, tool: str, seed: int) -> Run:
        run = Run(case.name, case.family, tool, seed=seed)
        left = self.args.budget_s - (time.monotonic() - self.start)
        if self.stopping or left < MIN_RUN_S:
            run.status, run.why = "skipped", "interrupted" if self.stopping else f"--budget-s {self.args.budget_s:.0f} spent"
            return run
        if tool in self.unavailable:
            run.status, run.why = "unavailable", f"{tool} was unavailable on an earlier run"
            return run
        limit = min(self.args.timeout_s, left)
        cmd = command(self.sanitizer, case, tool, self.args.bundle, seed, self.kernel_filter)
        run.command = shlex.join(cmd)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                   PYTORCH_NO_CUDA_MEMORY_CACHING="1", PYTHONUNBUFFERED="1")
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                env=env, cwd=REPO, start_new_session=True)
        with self.lock:
            self.procs.add(proc)
            if self.stopping:   # stop() ran between the check above and the start
                _kill_group(proc)
        timed_out = False
        try:
            text, _ = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            text, _ = proc.communicate()
        finally:
            with self.lock:
                self.procs.discard(proc)
        run.wall_s, run.rc = round(time.monotonic() - t0, 2), proc.returncode
        log = self.logs / f"{case.name}.{tool}.log"
        log.write_text(clip_log(f"$ {run.command}\n{text}"))
        run.log = str(log)
        rep = parse_report(text)
        run.status, run.why = judge(rep, run.rc, timed_out, text, WATCHDOG_TEXT if case.expect_trap else None)
        if self.stopping and run.status in ("crashed", "timeout"):
            run.status, run.why = "skipped", "interrupted"
        elif timed_out and limit < self.args.timeout_s:
            run.status, run.why = "skipped", f"cut after {limit:.0f} s at the end of --budget-s"
        if run.status == "unavailable":
            self.unavailable.add(tool)
        run.errors, run.hazards, run.race_errors, run.race_warnings = (rep.errors, rep.hazards, rep.race_errors,
                                                                       rep.race_warnings)
        run.findings = [asdict(r) for r in rep.records][:3]
        run.checks, run.child = rep.results, rep.end
        return run


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def not_runnable(bundle) -> list[dict]:
    """The bundle's kernels this device cannot run (sm_100a: no Blackwell GPU here), per kernel."""
    counts: dict = {}
    for e in bundle.entries:
        if e["arch"] != RUNNABLE_ARCH:
            key = (e["config"].get("kernel", e["name"]), e["arch"])
            counts[key] = counts.get(key, 0) + 1
    return [{"kernel": k, "arch": a, "entries": n, "why": f"{a} kernels need that GPU; the sanitizer runs here "
             f"on {RUNNABLE_ARCH}"} for (k, a), n in sorted(counts.items())]


def bundle_check(bundle, cases: list[Case]) -> tuple[list[str], list[str]]:
    """(the cases' kernels the bundle lacks, with why; the bundle's runnable families and features no case covers)."""
    missing = []
    for case in cases:
        for match in case.match:
            try:
                find(bundle, case, match)
            except LookupError as exc:
                missing.append(f"{case.name}: {str(exc)[:300]}")
    entries = [(e["config"]["kernel"], e["config"]) for e in bundle.entries
               if e["arch"] == RUNNABLE_ARCH and e["config"].get("kernel") in CHILDREN]
    return missing, uncovered(entries)


def previous_runs(out: Path, pairs) -> list[Run]:
    """--resume: the runs of an earlier --out that ended (not skipped) and are in this matrix."""
    if not out.is_file():
        return []
    want = {(c.name, t) for c, t in pairs}
    runs = [Run(**r) for r in json.loads(out.read_text()).get("runs", [])]
    return [r for r in runs if r.status != "skipped" and (r.case, r.tool) in want]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default="bundle", help="bundle folder (make gpu-bundle)")
    p.add_argument("--out", default="sanitize.json", help="JSON result, rewritten after every run")
    p.add_argument("--logs", default=None, help="one log per run (default: sanitize-logs/ next to --out)")
    p.add_argument("--tools", default=",".join(DEFAULT_TOOLS), help=f"comma list of {', '.join(TOOLS)}, or all")
    p.add_argument("--quick", action="store_true", help="only the cases marked quick: every kernel, a few families")
    p.add_argument("--cases", default=None, help="comma list of case names (--dry-run lists them)")
    p.add_argument("--resume", action="store_true", help="keep the finished runs of --out, run the others")
    p.add_argument("--timeout-s", type=float, default=150.0, help="limit of one sanitizer run")
    p.add_argument("--budget-s", type=float, default=540.0, help="start no run after this many seconds")
    p.add_argument("--jobs", type=int, default=1, help="sanitizer runs at once on the one GPU (1: the tried path)")
    p.add_argument("--sanitizer", default=None, help="the binary (default: $COMPUTE_SANITIZER, PATH, CUDA folders)")
    p.add_argument("--seed", type=int, default=None, help="base seed of the inputs (default: fresh)")
    p.add_argument("--no-kernel-filter", action="store_true", help="instrument torch's kernels too")
    p.add_argument("--dry-run", action="store_true", help="print the matrix and the commands; run nothing")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    seed = random.SystemRandom().randrange(1 << 30) if args.seed is None else args.seed
    if args.child:
        return child_main(args.child, args.bundle, seed)
    args.bundle = str(Path(args.bundle).resolve())   # the children run in the repo root
    try:
        tools = parse_tools(args.tools)
        cases = select_cases(args.quick, args.cases.split(",") if args.cases else None)
    except ValueError as exc:
        p.error(str(exc))
    if args.jobs < 1 or args.timeout_s <= 0:
        p.error("--jobs must be >= 1 and --timeout-s > 0")
    pairs = [(c, t) for c in cases for t in tools]
    sanitizer = find_sanitizer(args.sanitizer)
    if args.dry_run:
        return dry_run(args, cases, pairs, sanitizer, seed)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if sanitizer is None:
        where = f"--sanitizer {args.sanitizer}" if args.sanitizer else f"$COMPUTE_SANITIZER, PATH, next to nvcc, {', '.join(CUDA_GLOBS)}"
        why = (f"compute-sanitizer not found (looked at {where}): nothing was checked; install the CUDA "
               "toolkit's compute-sanitizer or pass --sanitizer PATH")
        print(why, file=sys.stderr)
        write_json(out, {"status": "no-sanitizer", "why": why, "runs": [], "exit": 2})
        return 2
    from fa4mlir.runtime import Bundle
    try:
        bundle = Bundle.open(args.bundle)
    except (OSError, ValueError) as exc:
        p.error(f"--bundle {args.bundle}: {exc}")
    missing, uncovered_bundle = bundle_check(bundle, cases)
    if missing:
        print("the bundle lacks kernels of the matrix (build it with `make gpu-bundle`):\n  " + "\n  ".join(missing),
              file=sys.stderr)
        return 1
    kernel_filter, said = (False, "--no-kernel-filter") if args.no_kernel_filter else filter_accepted(sanitizer)
    logs = Path(args.logs) if args.logs else out.parent / "sanitize-logs"
    logs.mkdir(parents=True, exist_ok=True)
    runner = Runner(args, sanitizer, logs, kernel_filter)
    runs = previous_runs(out, pairs) if args.resume else []
    done = {(r.case, r.tool) for r in runs}
    todo = [(c, t, seed + 1000 * i) for i, (c, t) in enumerate(pairs) if (c.name, t) not in done]
    doc = {"command": shlex.join(["bench/sanitize.py", *(sys.argv[1:] if argv is None else argv)]),
           "sanitizer": sanitizer, "sanitizer_version": sanitizer_version(sanitizer), "bundle": args.bundle,
           "tools": tools, "quick": args.quick, "kernel_filter": kernel_filter, "known_gaps": KNOWN_GAPS,
           "kernel_filter_probe": None if kernel_filter else said, "seed": seed, "timeout_s": args.timeout_s,
           "budget_s": args.budget_s, "jobs": args.jobs, "resumed": len(runs),
           "not_runnable": not_runnable(bundle), "uncovered_bundle_families": uncovered_bundle}
    print(f"{len(todo)} runs ({len(cases)} cases x {', '.join(tools)}{f'; {len(runs)} kept from {out}' if runs else ''})"
          f" with {sanitizer}{'' if kernel_filter else ' (no kernel filter: ' + said + ')'}; logs in {logs}", flush=True)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, runner.stop)
    order = {(c.name, t): i for i, (c, t) in enumerate(pairs)}

    def record(run: Run) -> None:
        with runner.lock:
            runs.append(run)
            runs.sort(key=lambda r: order[(r.case, r.tool)])
            doc.update(runs=[asdict(r) for r in runs], wall_s=round(time.monotonic() - runner.start, 1),
                       device=next((r.child["device"] for r in runs if r.child and "device" in r.child), None),
                       torch=next((r.child["torch"] for r in runs if r.child and "torch" in r.child), None))
            write_json(out, doc)
        print(f"[{len(runs)}/{len(pairs)}] {run.case} {run.tool}: {run.status} ({run.wall_s:.1f} s) {run.why}",
              flush=True)

    if args.jobs == 1:
        for case, tool, s in todo:
            record(runner.run(case, tool, s))
    else:
        with ThreadPoolExecutor(args.jobs) as pool:
            for future in [pool.submit(runner.run, *item) for item in todo]:
                record(future.result())
    doc["summary"] = {s: sum(r.status == s for r in runs) for s in dict.fromkeys(r.status for r in runs)}
    doc["exit"] = exit_code(runs)
    write_json(out, doc)
    print("\n" + table(runs, tools, {c.name: c.family for c in CASES}))
    for r in runs:
        if r.status in (*FAILED, "unavailable", "warnings"):
            lines = r.findings[0]["lines"] if r.findings else []
            print(f"\n{r.case} {r.tool}: {r.status}: {r.why}\n  " + "\n  ".join(lines) + f"\n  log: {r.log}")
    for nr in doc["not_runnable"]:
        print(f"not runnable here: {nr['kernel']} ({nr['entries']} bundle entries): {nr['why']}")
    if uncovered_bundle:
        print(f"bundle families and features without a case: {', '.join(uncovered_bundle)}")
    print(f"summary: {doc['summary']}; {doc['wall_s']} s; exit {doc['exit']}; JSON {out}")
    return doc["exit"]


def dry_run(args, cases: list[Case], pairs, sanitizer: str | None, seed: int) -> int:
    """Print the matrix, what the bundle lacks (when it is there) and every command; run nothing."""
    print(f"compute-sanitizer: {sanitizer or 'NOT FOUND (a real run would exit 2)'}")
    for case in cases:
        shapes = list(case.shapes)
        if case.child:
            shapes = {"varlen": svar, "mla": smla, "scoremod": ssm, "mla-sparse": sps,
                      "mla-sparse-decode": spd}[case.child].describe(case)
        elif case.kernel == acfg.KERNEL and (api := api_shape(acfg.AttnConfig.from_key(case.match[0]))):
            shapes = [f"{api} via flash_attn_func", *shapes]
        elif case.kernel in DECODE_KERNELS:
            shapes = describe(case)
        print(f"case {case.name}{' (quick)' if case.quick else ''}: {case.family}; shapes {shapes}")
    for gap, why in KNOWN_GAPS.items():
        print(f"not covered: {gap}: {why}")
    status = 0
    if (Path(args.bundle) / "manifest.json").is_file():
        from fa4mlir.runtime import Bundle
        bundle = Bundle.open(args.bundle)
        missing, uncovered_bundle = bundle_check(bundle, cases)
        print(f"bundle {args.bundle}: " + ("LACKS\n  " + "\n  ".join(missing) if missing else "holds every case's kernels"))
        if uncovered_bundle:
            print(f"bundle families and features without a case: {', '.join(uncovered_bundle)}")
        for nr in not_runnable(bundle):
            print(f"not runnable here: {nr['kernel']} ({nr['entries']} bundle entries): {nr['why']}")
        status = 1 if missing else 0
    else:
        print(f"bundle {args.bundle}: not there, its kernels unchecked")
    for i, (case, tool) in enumerate(pairs):
        print(shlex.join(command(sanitizer or "compute-sanitizer", case, tool, args.bundle, seed + 1000 * i,
                                 not args.no_kernel_filter)))
    print(f"{len(pairs)} runs; each at most {args.timeout_s:.0f} s; none started after {args.budget_s:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
