"""fa4mlir-opt: parse a .mlir file, run fa4 and upstream passes on it, print the result.

    fa4mlir-opt in.mlir --pass-pipeline=fa4-plan-smem,fa4-lower-tma
    fa4mlir-opt in.mlir --fa4-plan-smem --fa4-lower-pipelines --canonicalize
    fa4mlir-opt in.mlir --stage=fa4,nvvm            # the compiler's own stages for the module's arch
    fa4mlir-opt bad.mlir --split-input-file --verify-diagnostics

Pass elements are fa4 pass names (fa4mlir.passes.registry, run in Python) or upstream pass or
pipeline strings (run through mlir.passmanager; `canonicalize`, `convert-scf-to-cf{...}` or a full
`builtin.module(...)`). Elements run in command-line order; the IR is verified after each one, as
mlir-opt does.

Diagnostics
-----------
Errors come from the parser/verifier (MLIRError diagnostics) or from a fa4 pass (PassError with
the failing op's location). Parsed IR carries `loc("<file>":line:col)` locations (the parser
names the buffer "-"; we rename it to the input path), and with --split-input-file every chunk
keeps the line numbers of the whole file, so an error's line is the file line. Without
--verify-diagnostics an error prints `file:line:col: error: msg` and the exit status is 1.
With it, `// expected-error {{text}}` (this line), `@+N` / `@-N` (N lines below/above) and
`@unknown` (no location) must match the errors produced, each by substring, one to one: a
missing or unexpected error fails (exit 1), as in mlir-opt.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys

from .._mlir import ir, passmanager
from ..dialect import new_context
from ..passes import registry
from ..passes._util import PassError

SPLIT_MARKER = re.compile(r"^// -----\s*$", re.M)
EXPECTED = re.compile(r"expected-(error|warning|remark|note)(-re)?\s*(@[+-]?\w+)?\s*\{\{(.*?)\}\}")
STDIN = "<stdin>"
_TOOL_FLAGS = ("--split-input-file", "--verify-diagnostics", "--mlir-print-ir-after-all",
               "--mlir-print-debuginfo", "--debug-watchdog", "--allow-unregistered-dialect")


@dataclasses.dataclass
class Diag:
    """One diagnostic: severity, message, source line (None = unknown location) and column."""
    severity: str
    message: str
    line: int | None
    col: int = 0

    def render(self, filename: str) -> str:
        where = f"{filename}:{self.line}:{self.col}: " if self.line is not None else f"{filename}: "
        return f"{where}{self.severity}: {self.message}"


class Failed(Exception):
    """A chunk failed; `diags` holds the errors (and their notes) that caused it."""

    def __init__(self, diags: list[Diag]):
        super().__init__("; ".join(d.message for d in diags))
        self.diags = diags


# ---- locations ------------------------------------------------------------------------------------
def _file_loc(loc: ir.Location):
    """The first file:line:col inside `loc` (through fused / name / callsite locations), or None."""
    if loc is None:
        return None
    try:
        if loc.is_a_file():
            return loc
        if loc.is_a_name():
            return _file_loc(loc.child_loc)
        if loc.is_a_callsite():
            return _file_loc(loc.callee)
        if loc.is_a_fused():
            for sub in loc.locations:
                found = _file_loc(sub)
                if found is not None:
                    return found
    except (AttributeError, ValueError):
        pass
    return None


def _diag_of(severity: str, message: str, loc: ir.Location | None) -> Diag:
    fl = _file_loc(loc)
    return Diag(severity, message, fl.start_line if fl else None, fl.start_col if fl else 0)


def _mlir_diags(exc) -> list[Diag]:
    """Diagnostics of an MLIRError (errors first, their notes after each), or the bare message."""
    out = []
    for d in getattr(exc, "error_diagnostics", None) or []:
        out.append(_diag_of(str(d.severity).split(".")[-1].lower(), d.message, d.location))
        for n in d.notes:
            out.append(_diag_of("note", n.message, n.location))
    if not out:
        out.append(Diag("error", str(exc), None))
    for d in out:
        if d.severity not in ("error", "warning", "remark", "note"):
            d.severity = "error"
    return out


def _rename_locations(module: ir.Module, filename: str) -> None:
    """Give every op parsed from buffer "-" the location `filename`:line:col instead."""
    def visit(op):
        loc = op.location
        if loc.is_a_file() and loc.filename == "-":
            op.location = ir.Location.file(filename, loc.start_line, loc.start_col)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)


# ---- passes ---------------------------------------------------------------------------------------
def split_pipeline(text: str) -> list[str]:
    """Split `a,b{x=1,y=2},builtin.module(c,d)` on top-level commas."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _upstream_pipeline(element: str) -> str:
    return element if re.match(r"^[\w.]+\(", element) else f"builtin.module({element})"


def check_pass_names(names: list[str]) -> None:
    """Reject unknown passes before reading any input (fa4 names through the registry)."""
    for name in names:
        if name in registry.PASSES:
            if not registry.available(name):
                raise SystemExit(f"fa4mlir-opt: pass '{name}' is registered but its module "
                                 f"fa4mlir.passes.{registry.PASSES[name]} does not exist yet")
        else:
            with new_context():
                try:
                    passmanager.PassManager.parse(_upstream_pipeline(name))
                except ValueError as exc:
                    raise SystemExit(f"fa4mlir-opt: '{name}' is neither a fa4 pass "
                                     f"({', '.join(sorted(registry.PASSES))}) nor an upstream pass or "
                                     f"pipeline:\n{exc}") from None


def run_pass(module: ir.Module, name: str, *, debug: bool) -> None:
    """Run one pipeline element; raise Failed with its diagnostics."""
    if name in registry.PASSES:
        try:
            registry.run_passes(module, [name], debug=debug)
        except PassError as exc:
            raise Failed([_diag_of("error", str(exc), exc.loc)]) from None
    else:
        try:
            with module.context:
                passmanager.PassManager.parse(_upstream_pipeline(name)).run(module.operation)
        except ir.MLIRError as exc:
            raise Failed(_mlir_diags(exc)) from None
    try:
        module.operation.verify()
    except ir.MLIRError as exc:
        raise Failed(_mlir_diags(exc)) from None


def arch_of(module: ir.Module) -> str | None:
    """The chip of the first gpu.module's #nvvm.target (sm_90a, sm_100a), if any."""
    m = re.search(r'#nvvm\.target<[^>]*chip\s*=\s*"(sm_\w+)"', str(module))
    return m.group(1) if m else None


# ---- one chunk ------------------------------------------------------------------------------------
def process(text: str, filename: str, passes: list, args) -> str:
    """Parse `text` (lines already at their file positions), run the passes, return the IR text."""
    ctx = new_context()
    ctx.allow_unregistered_dialects = args.allow_unregistered_dialect
    with ctx:
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as exc:
            raise Failed(_mlir_diags(exc)) from None
        _rename_locations(module, filename)
        names = []
        for p in passes:
            if isinstance(p, tuple):  # ("stage", name)
                from ..lowering import stage_pipelines
                arch = args.arch or arch_of(module)
                if arch is None:
                    raise Failed([Diag("error", "--stage needs --arch or a gpu.module with an "
                                       "#nvvm.target<chip = ...>", None)])
                names += dict(stage_pipelines(arch, args.debug_watchdog))[p[1]]
            else:
                names.append(p)
        for name in names:
            run_pass(module, name, debug=args.debug_watchdog)
            if args.mlir_print_ir_after_all:
                print(f"// -----// IR Dump After {name} //----- //", file=sys.stderr)
                module.operation.print(file=sys.stderr, enable_debug_info=args.mlir_print_debuginfo)
        return module.operation.get_asm(enable_debug_info=args.mlir_print_debuginfo)


# ---- expected diagnostics -------------------------------------------------------------------------
@dataclasses.dataclass
class Expected:
    severity: str
    text: str
    regex: bool
    line: int | None
    at: int  # line of the comment

    def matches(self, d: Diag) -> bool:
        if d.severity != self.severity or d.line != self.line:
            return False
        if self.regex:
            return re.search(self.text, d.message) is not None
        return self.text in d.message


def expectations(text: str) -> list[Expected]:
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in EXPECTED.finditer(line):
            severity, is_re, where, body = m.groups()
            if not where:
                target = lineno
            elif where == "@unknown":
                target = None
            elif where == "@above":
                target = lineno - 1
            elif where == "@below":
                target = lineno + 1
            elif re.fullmatch(r"@[+-]\d+", where):
                target = lineno + int(where[1:])
            else:
                raise SystemExit(f"line {lineno}: cannot read the location {where!r} of an expected diagnostic")
            out.append(Expected(severity, body, bool(is_re), target, lineno))
    return out


def verify(diags: list[Diag], expected: list[Expected], filename: str) -> list[str]:
    """Problems (mlir-opt style messages); empty when every diagnostic was expected and seen."""
    problems = []
    unmatched = list(expected)
    checks_notes = any(e.severity == "note" for e in expected)
    for d in diags:
        if d.severity == "note" and not checks_notes:
            continue
        hit = next((e for e in unmatched if e.matches(d)), None)
        if hit is None:
            problems.append(f"{d.render(filename)}\n  (unexpected {d.severity})")
        else:
            unmatched.remove(hit)
    for e in unmatched:
        where = f"line {e.line}" if e.line is not None else "an unknown location"
        problems.append(f"{filename}:{e.at}: error: expected {e.severity} \"{e.text}\" at {where} "
                        "was not produced")
    return problems


# ---- driver ---------------------------------------------------------------------------------------
def parse_args(argv: list[str]):
    """argparse for the tool's options; pass flags (`--fa4-x`, `--canonicalize`) keep their order."""
    ap = argparse.ArgumentParser(prog="fa4mlir-opt", description=__doc__.split("\n\n")[0])
    ap.add_argument("input", nargs="?", default="-", help="input .mlir file ('-' or none: stdin)")
    ap.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    ap.add_argument("--pass-pipeline", action="append", default=[],
                    help="comma-separated fa4 pass names and upstream passes/pipelines, run in order")
    ap.add_argument("--stage", action="append", default=[],
                    help="run a compiler stage's fa4 passes (fa4, nvvm) for --arch")
    ap.add_argument("--arch", default=None, help="sm_90a / sm_100a (default: the gpu.module target)")
    ap.add_argument("--split-input-file", action="store_true",
                    help="split the input on '// -----' lines and process each chunk on its own")
    ap.add_argument("--verify-diagnostics", action="store_true",
                    help="check errors against '// expected-error' comments instead of printing them")
    ap.add_argument("--mlir-print-ir-after-all", action="store_true", help="print the IR after each pass to stderr")
    ap.add_argument("--mlir-print-debuginfo", action="store_true", help="print locations")
    ap.add_argument("--debug-watchdog", action="store_true",
                    help="debug lowering (bounded mbarrier waits that report and trap)")
    ap.add_argument("--allow-unregistered-dialect", action="store_true")
    passes: list = []
    rest = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--pass-pipeline"):
            value = a.split("=", 1)[1] if "=" in a else argv[(i := i + 1)]
            passes += split_pipeline(value.strip("'\""))
        elif a.startswith("--stage"):
            value = a.split("=", 1)[1] if "=" in a else argv[(i := i + 1)]
            passes += [("stage", s) for s in split_pipeline(value)]
        elif a.startswith("--") and a not in _TOOL_FLAGS and not a.startswith(("--arch", "--help")) \
                and a != "--":
            passes.append(a[2:])
        else:
            rest.append(a)
        i += 1
    args = ap.parse_args(rest)
    for p in passes:
        if isinstance(p, tuple) and p[1] not in ("fa4", "nvvm"):
            ap.error(f"--stage takes fa4 or nvvm, got {p[1]!r}")
    return args, passes


def chunks(text: str, split: bool) -> list[str]:
    """The input's chunks, each padded with newlines so its lines keep their file line numbers."""
    if not split:
        return [text]
    out, start = [], 0
    for m in SPLIT_MARKER.finditer(text):
        out.append(text[start:m.start()])
        start = m.end()
    out.append(text[start:])
    padded, line = [], 0
    for c in out:
        padded.append("\n" * line + c)
        line += c.count("\n")
    return padded


def main(argv: list[str] | None = None) -> int:
    args, passes = parse_args(sys.argv[1:] if argv is None else argv)
    check_pass_names([p for p in passes if isinstance(p, str)])
    if args.input == "-":
        text, filename = sys.stdin.read(), STDIN
    else:
        with open(args.input) as f:
            text = f.read()
        filename = args.input
    outputs, status = [], 0
    for chunk in chunks(text, args.split_input_file):
        try:
            outputs.append(process(chunk, filename, passes, args))
            diags = []
        except Failed as exc:
            diags = exc.diags
        if args.verify_diagnostics:
            problems = verify(diags, expectations(chunk), filename)
            for p in problems:
                print(p, file=sys.stderr)
            status |= bool(problems)
        elif diags:
            for d in diags:
                print(d.render(filename), file=sys.stderr)
            status = 1
    result = "// -----\n".join(o if o.endswith("\n") else o + "\n" for o in outputs)
    if args.output == "-":
        sys.stdout.write(result)
    else:
        with open(args.output, "w") as f:
            f.write(result)
    return status


if __name__ == "__main__":
    sys.exit(main())
