"""SASS of a compiled cubin (MLIR-free): disassembly with nvdisasm and the wgmma loop parsing the
tests and bench/sass_loops.py use to check what ptxas scheduled.

    find_nvdisasm()      nvdisasm from PATH or the nvidia-cuda-nvdisasm wheel, or None
    disassemble(cubin)   the SASS text (nvdisasm -c)
    backward_branch_spans(sass)  the instructions and the loops (a backward branch to a label) as spans
    wgmma_loops(sass)    the loops that issue wgmma (HGMMA), as (opcode, operands) lists
    wgmma_waits(loop)    where an attention KV loop waits on its wgmma groups
"""
from __future__ import annotations

import re
import subprocess


def find_nvdisasm() -> str | None:
    """nvdisasm from PATH or the nvidia-cuda-nvdisasm wheel, or None."""
    import os
    import shutil
    from pathlib import Path
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for path in sorted(Path(root).rglob("nvdisasm")):
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
    return None


def disassemble(cubin: bytes) -> str:
    """The SASS of a cubin (nvdisasm -c); FileNotFoundError when nvdisasm is missing."""
    import tempfile
    tool = find_nvdisasm()
    if tool is None:
        raise FileNotFoundError("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm)")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, "-c", f.name], check=True, capture_output=True, text=True).stdout


_SASS_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_SASS_INSTR = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][\w.]*)(.*);")


def backward_branch_spans(sass: str) -> tuple[list[tuple[str, str]], list[tuple[int, int]]]:
    """The SASS's instructions as (opcode, operands) and its loops as (first, last) index spans into
    them, in program order: a loop runs from a label to a later BRA back to it."""
    ops, labels = [], {}
    for line in sass.splitlines():
        if m := _SASS_LABEL.match(line):
            labels[m.group(1)] = len(ops)
        elif m := _SASS_INSTR.match(line):
            ops.append((m.group(1), m.group(2).strip()))
    spans = []
    for i, (op, rest) in enumerate(ops):
        target = re.search(r"`\((\.L_x_\d+)\)", rest) if op == "BRA" else None
        if target and labels.get(target.group(1), i) < i:
            spans.append((labels[target.group(1)], i))
    return ops, spans


def wgmma_loops(sass: str) -> list[list[tuple[str, str]]]:
    """The SASS loops (a backward branch to a label) that issue wgmma (HGMMA), shortest first:
    each a list of (opcode, operands) from the label to the branch."""
    ops, spans = backward_branch_spans(sass)
    loops = [ops[first:last + 1] for first, last in spans]
    return sorted((body for body in loops if any(o.startswith("HGMMA") for o, _ in body)), key=len)


def wgmma_waits(loop: list[tuple[str, str]]) -> dict:
    """Where an attention KV loop waits on its wgmma groups. The loop issues S = Q K^T, then
    O += P V, then waits for S (WARPGROUP.DEPBAR.LE gsb0, 0x1), runs the softmax, and waits for
    P.V (..., 0x0). Returns the positions of the first such waits (None when absent), the
    instructions and MUFU (exp2) ops between them: the softmax work that overlaps the P.V GEMM
    in this warpgroup, and the MUFU ops in the whole loop."""
    def first(pending):
        return next((i for i, (o, rest) in enumerate(loop)
                     if o.startswith("WARPGROUP.DEPBAR") and rest.endswith(f"0x{pending}")), None)
    s_wait, pv_wait = first(1), first(0)
    between = loop[s_wait + 1:pv_wait] if s_wait is not None and pv_wait is not None and s_wait < pv_wait else []
    return {"instructions": len(loop), "hgmma": sum(o.startswith("HGMMA") for o, _ in loop),
            "s_wait": s_wait, "pv_wait": pv_wait, "between": len(between),
            "mufu_between": sum(o.startswith("MUFU") for o, _ in between),
            "mufu": sum(o.startswith("MUFU") for o, _ in loop)}
