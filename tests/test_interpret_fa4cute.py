"""Deviceless cross-check with FlashAttention-4 CuTe (issue 30, item 8): the tcgen05 constants its
sm_100a forward compiles to equal those fa4mlir's kernel executes, for the configuration both
share (bf16, D128, not causal, two 128-row Q tiles per CTA, 128-key blocks, one CTA per cluster).

Ours: read from the interpreter's log of the tcgen05.mma it ran (cta.mma_log), i.e. the descriptor
bits fa4-lower-mma-sm100 computed at run time. Theirs: FA4 CuTe compiled on this CPU
(tests/fa4cute_sm100.py, ~15 s, in a subprocess) and read from its PTX: the instruction
descriptors, the SMEM descriptors' high word (SBO, version, swizzle), V's leading-byte offset and
the TMEM columns of O and P in O += P V. Skipped when flash-attn-4 / nvidia-cutlass-dsl are not
installed (`pip install flash-attn-4==4.0.0b36 triton`; the test extra installs them, so CI runs it).
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flash_attn") is None or importlib.util.find_spec("cutlass") is None,
    reason="FA4 CuTe cross-check: needs flash-attn-4 and nvidia-cutlass-dsl (pip install flash-attn-4==4.0.0b36)")

ROOT = Path(__file__).resolve().parents[1]


def _resolve(ptx: str, reg: str, depth: int = 3) -> int:
    """The immediate that PTX register `reg` holds, through mov / shfl.sync.idx copies."""
    if reg.startswith("0x") or reg.isdigit():
        return int(reg, 0)
    m = re.search(rf"mov\.b32\s+{re.escape(reg)},\s*(0x[0-9a-fA-F]+|\d+);", ptx)
    if m:
        return int(m.group(1), 0)
    m = re.search(rf"shfl\.sync\.idx\.b32\s+{re.escape(reg)},\s*(%r\d+),", ptx)
    if m and depth:
        return _resolve(ptx, m.group(1), depth - 1)
    raise LookupError(f"no immediate found for {reg}")


def _v_lbo(ptx: str, reg: str) -> int:
    """V's LBO in bytes from the register holding the descriptor's low word: `or.b32 reg, x, IMM`
    sets bits 16-29 (LBO >> 4), through shfl copies."""
    m = re.search(rf"shfl\.sync\.idx\.b32\s+{re.escape(reg)},\s*(%r\d+),", ptx)
    src = m.group(1) if m else reg
    m = re.search(rf"or\.b32\s+{re.escape(src)},\s*%r\d+,\s*(0x[0-9a-fA-F]+|\d+);", ptx)
    if m is None:
        raise LookupError(f"no or.b32 immediate defines {src}")
    return ((int(m.group(1), 0) >> 16) & 0x3FFF) << 4


def fa4cute_constants(tmp_path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "tests.fa4cute_sm100", str(tmp_path)], capture_output=True,
                          text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    ptx = Path(done.stdout.strip().splitlines()[-1]).read_text()
    pv = []
    blocks = re.findall(r"// begin inline asm(.*?)// end inline asm", ptx, re.S)
    for block in (b for b in blocks if "[tmem_a]" in b):              # the inline-asm blocks of O += P V
        regs = {name: re.search(rf"mov\.b32\s+{name},\s*(%r\d+|0x[0-9a-fA-F]+);", block).group(1)
                for name in ("tmem_acc", "tmem_a", "smem_desc_b_lo_start")}
        pv.append((_resolve(ptx, regs["tmem_acc"]), _resolve(ptx, regs["tmem_a"]),
                   _v_lbo(ptx, regs["smem_desc_b_lo_start"])))
    return {"idesc": {int(x, 16) for x in re.findall(r"mov\.b32\s+\w*idesc,\s*(0x[0-9a-fA-F]+);", ptx)},
            "desc_hi": {int(x, 16) for x in re.findall(r"\{[^,{}]+,\s*(0x[0-9a-fA-F]+)\}", ptx)}
            | {int(x, 16) for x in re.findall(r"mov\.b32\s+smem_desc_[ab]_hi,\s*(0x[0-9a-fA-F]+);", ptx)},
            "pv": set(pv)}


def fa4mlir_constants() -> dict:
    """What the interpreter saw fa4mlir's kernel issue (256 x 256, one CTA, both tiles, two blocks)."""
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm100
    from fa4mlir.kernels.attention_sm100_config import FA4Config
    from tests.test_interpret_attention import run_config
    cfg = FA4Config(num_q_heads=1, num_kv_heads=1)
    kernel = interpret.load(attention_fwd_sm100.build(cfg))
    ctas = []
    original = kernel.launch

    def launch(*args, **kwargs):
        ctas.extend(original(*args, **kwargs))
        return ctas
    kernel.launch = launch
    assert run_config(cfg, 256, 256, kernel=kernel)["ok"]
    log = [entry for c in ctas for entry in c.mma_log]
    ss = [e for e in log if not e[5]]
    pv = [e for e in log if e[5]]
    return {"idesc": {e[3] for e in log},
            "desc_hi": {e[2] >> 32 for e in log} | {e[1] >> 32 for e in ss},
            "pv": {(e[0] & 0xFFFF, e[1] & 0xFFFF, ((e[2] >> 16) & 0x3FFF) << 4) for e in pv
                   if (e[1] & 0xFFFF) in (cfg.tmem_plan()["P0"], cfg.tmem_plan()["P1"])}}


def test_tcgen05_constants_equal_fa4_cute(tmp_path):
    theirs, ours = fa4cute_constants(tmp_path), fa4mlir_constants()
    print(f"\nFA4 CuTe: {theirs}\nfa4mlir:  {ours}")
    assert theirs["idesc"] == ours["idesc"] == {0x8200490, 0x8210490}      # S = Q K^T, O += P V
    assert theirs["desc_hi"] == ours["desc_hi"] == {0x40004040}             # SBO 1024, version 1, 128B swizzle
    assert theirs["pv"] == ours["pv"] == {(256, 64, 16384), (384, 192, 16384)}   # (O col, P col, V LBO) per tile
