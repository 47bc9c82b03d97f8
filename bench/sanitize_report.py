"""compute-sanitizer's output read into counts and records, and one run's verdict (for bench/sanitize.py;
no GPU).

The sanitizer writes its report into the program's output, each line prefixed "========= ": a
record opens with an unindented line ("========= Invalid __global__ write of size 4 bytes",
"========= Error: Race reported between ...", "========= Program hit CUDA_ERROR_... on CUDA API
call to ...") and goes on with indented ones ("=========     at kernel+0x90", "=========     by
thread (0,0,0) in block (0,0,0)"); it ends with "ERROR SUMMARY: N errors", and racecheck with
"RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)". The child's own lines
("SANITIZE-RESULT {json}", "SANITIZE-END {json}") carry its checks. Also: the parent's table, exit
status, log clipping and JSON writes, and the sanitizer's probes (version, kernel filter).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

LINE = re.compile(r"^=========(?: (\S.*)|(\s.*)|)$")
ERROR_SUMMARY = re.compile(r"^ERROR SUMMARY: (\d+) errors?")
RACE_SUMMARY = re.compile(r"^RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
# (kind, pattern) in order: the first match names a record's kind
KINDS = (
    ("unavailable", re.compile(r"^Error: (Device not supported|Failed to initialize)")),
    ("race", re.compile(r"Race reported|Potential \w+ hazard|hazard detected")),
    ("sync", re.compile(r"Barrier error|Divergent thread|Invalid arguments")),
    ("uninit", re.compile(r"Uninitialized|Unused memory")),
    ("access", re.compile(r"^Invalid |Misaligned|Illegal address|[Oo]ut.of.(range|bounds)")),
    ("api", re.compile(r"^Program hit ")),
    ("exception", re.compile(r"Illegal instruction|[Tt]rap|Assert|Hardware|Malformed|^Warp |^Lane ")),
    ("note", re.compile(r"^Target application returned an error")),
    ("warning", re.compile(r"^Warning")),
    ("tool-error", re.compile(r"^Error|Internal Sanitizer Error")),
)
QUIET = ("note", "warning", "race-warning")     # reported, never a finding
TRAP_KINDS = ("api", "exception")               # what a kernel's deliberate trap makes the sanitizer report
RECORD_LINES = 8
FAILED = ("findings", "wrong", "crashed", "timeout")


@dataclass
class Record:
    kind: str
    lines: list[str]


@dataclass
class Report:
    errors: int | None = None            # ERROR SUMMARY
    hazards: int | None = None           # RACECHECK SUMMARY: displayed, errors, warnings
    race_errors: int = 0
    race_warnings: int = 0
    records: list[Record] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)   # the child's SANITIZE-RESULT lines
    end: dict | None = None                             # its SANITIZE-END line

    @property
    def summarised(self) -> bool:
        return self.errors is not None or self.hazards is not None

    @property
    def error_count(self) -> int:
        return max(self.errors or 0, self.race_errors)

    def of_kind(self, *kinds: str) -> list[Record]:
        return [r for r in self.records if r.kind in kinds]


def classify(text: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(text):
            return "race-warning" if kind == "race" and text.startswith("Warning") else kind
    return "other"


def _child_line(rep: Report, line: str) -> None:
    for tag in ("SANITIZE-RESULT ", "SANITIZE-END "):
        if line.startswith(tag):
            try:
                value = json.loads(line[len(tag):])
            except json.JSONDecodeError:
                return
            if tag == "SANITIZE-END ":
                rep.end = value
            else:
                rep.results.append(value)


def parse_report(text: str) -> Report:
    """One run's output (the sanitizer's report and the child's lines, interleaved) read into a Report."""
    rep, current = Report(), None
    for raw in text.splitlines():
        line = raw.rstrip()
        _child_line(rep, line)
        m = LINE.match(line)
        if m is None:
            continue
        top, more = m.group(1), (m.group(2) or "").strip()
        if top is None:
            if more and current is not None and len(current.lines) < RECORD_LINES:
                current.lines.append(more)
            elif not more:
                current = None
            continue
        current = None
        if s := ERROR_SUMMARY.match(top):
            rep.errors = int(s.group(1))
        elif s := RACE_SUMMARY.match(top):
            rep.hazards, rep.race_errors, rep.race_warnings = map(int, s.groups())
        elif not top.startswith(("COMPUTE-SANITIZER", "LEAK SUMMARY")):
            current = Record(classify(top), [top])
            rep.records.append(current)
    return rep


def judge(rep: Report, rc: int | None, timed_out: bool, text: str, expect_trap: str | None = None) -> tuple[str, str]:
    """(status, why) of one run. `expect_trap`: the message a kernel that must trap prints (the
    watchdog case), whose trap the sanitizer may report; any other record is a finding."""
    if rep.of_kind("unavailable"):
        return "unavailable", rep.of_kind("unavailable")[0].lines[0]
    if timed_out:
        return "timeout", f"no exit within the time limit; the child had passed {len(rep.results)} checks"
    if not rep.summarised:
        return "crashed", f"no ERROR or RACECHECK SUMMARY in the output (rc {rc})"
    if expect_trap is not None:
        bad = [r for r in rep.records if r.kind not in (*TRAP_KINDS, *QUIET)]
        if bad or rep.race_errors:
            return "findings", bad[0].lines[0] if bad else f"{rep.race_errors} race errors"
        if rep.end is None or not rep.end.get("ok"):
            return "wrong", "the kernel did not trap, or the child died first"
        if expect_trap not in text:
            return "wrong", f"the kernel trapped without its message ({expect_trap!r})"
        return "expected-trap", f"{rep.error_count} sanitizer errors, all from the trap"
    if rep.error_count:
        first = next((r for r in rep.records if r.kind not in QUIET), None)
        return "findings", first.lines[0] if first else f"{rep.error_count} errors"
    if rep.end is None or rep.end.get("error"):
        return "crashed", rep.end["error"] if rep.end else f"the child did not finish (rc {rc})"
    if not rep.end.get("ok"):
        bad = [r for r in rep.results if not r.get("ok")]
        return "wrong", f"{len(bad)} of {len(rep.results)} checks failed, first {bad[:1]}"
    if rc != 0:
        return "crashed", f"rc {rc} with no error reported"
    if rep.race_warnings:
        return "warnings", f"{rep.race_warnings} racecheck warnings"
    return "clean", f"{len(rep.results)} checks passed"


LOG_CHARS = 256 * 1024


def clip_log(text: str) -> str:
    """A run's log, its middle cut past LOG_CHARS."""
    if len(text) <= LOG_CHARS:
        return text
    half = LOG_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - LOG_CHARS} characters cut ...]\n{text[-half:]}"


def table(runs, tools: list[str], families: dict) -> str:
    """Markdown: a row per case, a column per tool: status (errors, or racecheck errors/warnings; seconds)."""
    by = {(r.case, r.tool): r for r in runs}
    lines = ["| case | family | " + " | ".join(tools) + " |", "|---|---|" + "---|" * len(tools)]
    for name in dict.fromkeys(r.case for r in runs):
        cells = []
        for tool in tools:
            r = by.get((name, tool))
            if r is None or r.status == "skipped":
                cells.append(r.status if r else "")
                continue
            count = (f"{r.race_errors}/{r.race_warnings} hz" if r.hazards is not None else
                     f"{r.errors} err" if r.errors is not None else "-")
            cells.append(f"{r.status} ({count}, {r.wall_s:.0f} s)")
        lines.append(f"| {name} | {families[name]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def exit_code(runs) -> int:
    statuses = {r.status for r in runs}
    if statuses & set(FAILED):
        return 1
    return 2 if "unavailable" in statuses else 3 if "skipped" in statuses else 0


def write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def filter_accepted(sanitizer: str) -> tuple[bool, str]:
    """Whether this compute-sanitizer takes `--kernel-name kns=...` (and what it said when not)."""
    try:
        r = subprocess.run([sanitizer, "--kernel-name", "kns=fa4mlir_probe", "--version"], capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return r.returncode == 0, " ".join((r.stdout + r.stderr).split())[:300]


def sanitizer_version(sanitizer: str) -> str:
    try:
        out = subprocess.run([sanitizer, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return " ".join(out.split())[:300]
