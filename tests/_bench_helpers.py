"""Helpers the deviceless benchmark tests share (test_prefill_bench.py, test_mla_bench.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from fa4mlir import testing

REPO_ROOT = Path(__file__).resolve().parents[1]


def check_cli_imports_no_mlir(modules: str, what: str) -> None:
    """In a fresh interpreter with MLIR blocked: `import {modules}` and `bench {what} --workloads nope`
    through the CLI (exit 2, the unknown workload named on stderr) load no mlir module."""
    code = testing.BLOCK_MLIR + "\n".join([
        f"import {modules}",
        "from fa4mlir.__main__ import main",
        f"assert main(['bench', '{what}', '--workloads', 'nope']) == 2",
        "mods = sorted(m for m in sys.modules if m == 'mlir' or m.startswith('mlir.'))",
        "assert not mods, mods",
        "print('OK')"])
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "OK" and f"unknown {what} workload(s) ['nope']" in proc.stderr


# Breakages every bench result refuses, on a synthetic result whose result #0 is measured and #2 is not
RESULT_BREAKAGES = ((lambda r: r["results"][0].pop("times_ms"), "result #0 lacks \\['times_ms'\\]"),
                    (lambda r: r["results"][2].pop("reason"), "result #2 lacks \\['reason'\\]"),
                    (lambda r: r["results"][2].update(status="skipped"), "status 'skipped'"))


def check_json_round_trip(bench, make_result: Callable[[], dict], path: Path, other_schema: str,
                          breakages) -> dict:
    """`bench` (a bench module) saves and loads make_result()'s result unchanged under its SCHEMA,
    refuses a result of `other_schema`, and each (break, words) of `breakages` with a ValueError
    matching words. Returns the saved result."""
    res = make_result()
    bench.save_result(res, path)
    assert bench.load_result(path) == res and json.loads(path.read_text())["schema"] == bench.SCHEMA
    with pytest.raises(ValueError, match="schema"):
        bench.validate_result({"schema": other_schema})
    for broken, words in breakages:
        bad = make_result()
        broken(bad)
        with pytest.raises(ValueError, match=words):
            bench.validate_result(bad)
    return res
