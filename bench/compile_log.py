"""Where a test run's CPU goes, from an FA4MLIR_COMPILE_LOG file (fa4mlir/env.py): a development tool for
CI time. Run the suite with the log on, then sum it:

    FA4MLIR_COMPILE_LOG=/tmp/compile.jsonl make test
    python3 bench/compile_log.py /tmp/compile.jsonl [--top 25]

Prints seconds by event (compiles by stage, kernel-cache hits, IR-stage runs for the interpreter, interpreter
translation and launches), the same per test file, and the kernels lowered more than once in the run
(each is a full compile: a second one with the same name was either another config of that name or a
compile the kernel cache could have shared).
"""
from __future__ import annotations

import argparse
import collections
import json


def _file(test: str | None) -> str:
    return (test or "(no test)").split("::")[0]


def summarize(lines, top: int = 25) -> str:
    by_event: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    by_file: dict = collections.defaultdict(collections.Counter)
    lowered: collections.Counter = collections.Counter()
    stages: collections.Counter = collections.Counter()
    for e in lines:
        kind = e["event"]
        secs = e.get("seconds", 0.0)
        total = sum(secs.values()) if isinstance(secs, dict) else float(secs or 0.0)
        by_event[kind] += total
        count[kind] += 1
        by_file[_file(e.get("test"))][kind] += total
        if kind == "lower":
            lowered[e["kernel"]] += 1
            for stage, s in secs.items():
                stages[stage] += s
    out = ["event                  count    seconds"]
    out += [f"{k:<22} {count[k]:>5} {v:>10.1f}" for k, v in by_event.most_common()]
    out.append("compile stages: " + ", ".join(f"{k} {v:.1f}" for k, v in stages.most_common()))
    out.append(f"\nby test file (top {top}): " + " / ".join(by_event))
    files = sorted(by_file.items(), key=lambda kv: -sum(kv[1].values()))[:top]
    for name, c in files:
        out.append(f"{sum(c.values()):8.1f}  {name}  " + "  ".join(f"{k} {v:.1f}" for k, v in c.most_common()))
    again = [(k, n) for k, n in lowered.most_common() if n > 1]
    out.append(f"\nkernels lowered more than once: {len(again)} names, {sum(n - 1 for _, n in again)} extra compiles")
    out += [f"{n:4d}  {k}" for k, n in again[:top]]
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    with open(args.log) as f:
        print(summarize([json.loads(line) for line in f if line.strip()], args.top))


if __name__ == "__main__":
    main()
