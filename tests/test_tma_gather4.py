"""Deviceless: the sm_100a TMA gather4 op (fa4.tma_gather4 -> cp.async.bulk.tensor.2d.shared::cluster.
global.tile::gather4.mbarrier::complete_tx::bytes, PTX ISA 9.7.9.25 and 5.5.3.4) through every stage,
on the probe kernel of tests/_gather4_probe.py:

* built: the op's builder and its table entry (four row operands, one column);
* interpreted (fa4mlir.interpret, CPU): rows gathered in any order, duplicates, and out-of-bounds rows
  (-1, >= the table's rows) zero-filled as tile mode fills them, landing swizzled as one 4-row box;
* compiled (nvJitLink LTO): 0 spills, the PTX and the SASS (UTMALDG.2D.GATHER4) hold the gather4 form;
* verified: fa4-verify-pipelines counts four box rows per gather4 (a commit announcing one is rejected).

The kernel is interpreted, never run here (no Blackwell GPU).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from _gather4_probe import COLS, ROW_BYTES, build
from fa4mlir.interpret.numeric import swizzle

TABLE_ROWS = 300


def _expected_image(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The shared image of the gathered rows as the probe copies it out: row i of the 4-row boxes at
    byte 128 i, each byte at its 128B-swizzled address; rows outside the table are zeros."""
    rows = np.zeros((len(idx), COLS), np.uint16)
    inside = (idx >= 0) & (idx < len(table))
    rows[inside] = table[idx[inside]]
    raw = np.arange(len(idx))[:, None] * ROW_BYTES + np.arange(ROW_BYTES)[None, :]
    image = np.zeros(len(idx) * ROW_BYTES, np.uint8)
    image[swizzle(raw, 128)] = rows.view(np.uint8).reshape(len(idx), ROW_BYTES)
    return image.view(np.int32)


def test_the_op_takes_a_column_and_four_rows():
    from fa4mlir.dialect import builders as fa4
    from fa4mlir.dialect.ops import OPS_BY_NAME
    op = OPS_BY_NAME["tma_gather4"]
    assert [n for n, _ in op.operands] == ["desc", "dst", "stage", "col", "row0", "row1", "row2", "row3"]
    assert {n for n, _ in op.attrs} == {"pipe", "box", "elem_bytes"}
    assert "tile::gather4" in fa4.tma_gather4.__doc__ and "5.5.3.4" in fa4.tma_gather4.__doc__
    with pytest.raises(TypeError, match="takes operands"):
        fa4.tma_gather4(1, 2, 3, 4, 5, 6, 7, pipe="p", box=[64, 1], elem_bytes=2)


@pytest.mark.parametrize("idx", [
    [5, 299, 0, 17, 17, 3, 250, 5],                        # out of order, duplicates, the last row
    [-1, 2, 300, 7, 1 << 20, 298, -5, 0, 1, 2, 3, 4],       # -1 padding and rows past the table: zeros
])
def test_interpreted_gather4_matches_numpy(idx):
    from fa4mlir import interpret
    idx = np.array(idx, np.int32)
    rng = np.random.default_rng(len(idx))
    table = rng.integers(1, 1 << 15, size=(TABLE_ROWS, COLS), dtype=np.uint16)   # bf16 bits, no zero
    out = np.full(len(idx) * ROW_BYTES // 4, -1, np.int32)
    kernel = interpret.load(build(len(idx)))
    kernel.launch((1, 1, 1), {"table": table, "idx": idx, "out": out})
    expect = _expected_image(table, idx)
    assert (out == expect).all()
    # the invalid rows really are zeros and the valid ones really are table rows (not a vacuous image)
    valid = (idx >= 0) & (idx < TABLE_ROWS)
    assert (expect != 0).sum() == valid.sum() * ROW_BYTES // 4


@pytest.fixture(scope="module")
def artifact():
    from fa4mlir import lowering
    from fa4mlir.lowering import CompileOptions
    return lowering.lower(build(8), CompileOptions(cubin_backend="nvjitlink-lto"), key="test-tma-gather4")


def test_compiled_gather4_has_no_spills_and_the_sass_form(artifact):
    from fa4mlir.sass import disassemble, find_nvdisasm
    r = artifact.resources
    assert artifact.arch == "sm_100a" and r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm): cannot read the SASS")
    sass = disassemble(artifact.cubin)
    assert len(re.findall(r"\bUTMALDG\.2D\.GATHER4\b", sass)) == 2          # 8 rows, four per copy
    assert not re.search(r"\bUTMALDG(?!\.2D\.GATHER4)", sass)                # no plain tile loads


def test_ptx_holds_the_gather4_instruction():
    from fa4mlir import lowering
    kir = build(4)
    with kir.module.context:
        ptx, _ = lowering.lower_module(kir.module, "sm_100a")
    lines = [ln.strip() for ln in ptx.splitlines() if "cp.async.bulk.tensor" in ln]
    assert len(lines) == 1 and re.fullmatch(
        r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile::gather4\.mbarrier::complete_tx::bytes "
        r"\[%rd\d+\], \[%rd\d+, \{%r\d+, %r\d+, %r\d+, %r\d+, %r\d+\}\], \[fa4_smem\+\d+\];", lines[0]), lines


def test_verifier_counts_four_rows_per_gather4():
    from fa4mlir._mlir import ir
    from fa4mlir.passes import registry
    from fa4mlir.passes._util import PassError, ops_named
    registry.run_passes(build(8).module, ["fa4-verify-pipelines"])            # the probe's schedule holds
    kir = build(8)
    commit, = ops_named(kir.module.operation, "fa4.producer_commit")
    with kir.module.context:                                                  # one row per copy: 2 x 128 bytes
        commit.attributes["tx_bytes"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 2 * ROW_BYTES)
    with pytest.raises(PassError, match=r"expects tx_bytes = 256, but the 2 tma_load\(s\) of its fill deliver 1024 "
                                        r"bytes \(4 x 64x1x2B \+ 4 x 64x1x2B\)"):
        registry.run_passes(kir.module, ["fa4-verify-pipelines"])
