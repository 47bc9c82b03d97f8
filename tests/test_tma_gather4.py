"""Deviceless: the sm_100a TMA gather4 op (fa4.tma_gather4 -> cp.async.bulk.tensor.2d.shared::cluster.
global.tile::gather4.mbarrier::complete_tx::bytes, PTX ISA 9.7.9.25 and 5.5.3.4) through every stage,
on the probe kernel of tests/_gather4_probe.py:

* built: the op's builder and its table entry (four row operands, one column);
* interpreted (fa4mlir.interpret, CPU): rows gathered in any order, duplicates, and out-of-bounds rows
  (-1, >= the table's rows) zero-filled as tile mode fills them, landing swizzled as one 4-row box;
  a sparse-MLA K tile (64 rows x 576 columns, common/gather4.gather4_tile) read back through the
  sm_100a kernel's tcgen05 descriptors, K-major (S = Q K^T) and MN-major (O = P V), is K[indices];
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
from fa4mlir.kernels.common import gather4

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


def _tile_through_descriptors(image: np.ndarray, num_rows: int, cols: int, mn_major: bool) -> np.ndarray:
    """The [num_rows, cols] bf16 bits the tensor cores read from a gathered tile placed at shared
    address 1024, through the descriptors attention_fwd_sm100 builds for K (K-major: per 64-column
    chunk c, start 1024 + 128 rows c, LBO 16, SBO 1024) and for V (MN-major: per 16 rows kk, start
    1024 + 16 x 128 kk, LBO 128 rows, SBO 1024)."""
    from fa4mlir.interpret.ops.tcgen05 import smem_operand_addresses
    from fa4mlir.passes.lower_mma_sm100 import smem_desc
    smem = np.zeros(1024 + image.nbytes, np.uint8)
    smem[1024:] = image.view(np.uint8)
    out = np.zeros((num_rows, cols), np.uint16)
    if not mn_major:
        for c in range(cols // COLS):
            addrs = smem_operand_addresses(smem_desc(1024 + c * num_rows * 128, swizzle=128, lbo=16, sbo=1024),
                                           num_rows, COLS, mn_major=False)       # [row, column of the chunk]
            out[:, c * COLS:(c + 1) * COLS] = smem[addrs] | (smem[addrs + 1].astype(np.uint16) << 8)
    else:
        for kk in range(num_rows // 16):
            desc = smem_desc(1024 + kk * 16 * 128, swizzle=128, lbo=num_rows * 128, sbo=1024)
            addrs = smem_operand_addresses(desc, cols, 16, mn_major=True)          # [column (n), row (k)]
            out[kk * 16:(kk + 1) * 16] = (smem[addrs] | (smem[addrs + 1].astype(np.uint16) << 8)).T
    return out


def test_interpreted_mla_k_tile_is_the_mma_operand():
    """64 top-k rows x 576 columns of a 300-row latent cache (FlashMLA's sparse prefill K rows), -1
    padding, duplicates, rows >= s_kv: 16 x 9 gather4 copies; the tile read as S = Q K^T's K-major B
    and as O = P V's MN-major B (the first 512 columns) is the cache's rows, zeros where invalid."""
    from fa4mlir import interpret
    num_rows, cols, s_kv = 64, 576, TABLE_ROWS
    rng = np.random.default_rng(29)
    idx = rng.permutation(s_kv)[:num_rows].astype(np.int32)
    idx[[3, 40, 63]] = -1
    idx[[7, 8]] = idx[20]
    idx[11], idx[50] = s_kv, s_kv + 77
    table = rng.integers(1, 1 << 15, size=(s_kv, cols), dtype=np.uint16)
    out = np.zeros(gather4.tile_bytes(num_rows, cols, "bf16") // 4, np.int32)
    kernel = interpret.load(build(num_rows, cols))
    kernel.launch((1, 1, 1), {"table": table, "idx": idx, "out": out})
    valid = (idx >= 0) & (idx < s_kv)
    expect = np.where(valid[:, None], table[np.clip(idx, 0, s_kv - 1)], 0).astype(np.uint16)
    assert (_tile_through_descriptors(out, num_rows, cols, mn_major=False) == expect).all()
    assert (_tile_through_descriptors(out, num_rows, 512, mn_major=True) == expect[:, :512]).all()
    assert valid.sum() == num_rows - 5


def test_gather4_tile_checks_its_shape():
    with pytest.raises(ValueError, match="multiple of 4"):
        gather4.check_tile(6, 64, "bf16")
    with pytest.raises(ValueError, match="multiple of it"):
        gather4.check_tile(8, 96, "bf16")
    assert gather4.tile_bytes(128, 576, "bf16") == 128 * 1152 and gather4.chunk_columns("e4m3") == 128


SHAPES = [(8, 64), (64, 576)]        # the probe's rows x columns; the second a sparse-MLA K tile


@pytest.fixture(scope="module")
def artifacts():
    from fa4mlir import lowering
    from fa4mlir.lowering import CompileOptions
    return {shape: lowering.lower(build(*shape), CompileOptions(cubin_backend="nvjitlink-lto"), key="test-tma-gather4")
            for shape in SHAPES}


@pytest.mark.parametrize("shape", SHAPES)
def test_compiled_gather4_has_no_spills_and_the_sass_form(artifacts, shape):
    from fa4mlir.sass import disassemble, find_nvdisasm
    art = artifacts[shape]
    r = art.resources
    assert art.arch == "sm_100a" and r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    assert art.smem_bytes >= gather4.tile_bytes(*shape, "bf16")
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm): cannot read the SASS")
    sass = disassemble(art.cubin)
    rows, cols = shape
    assert len(re.findall(r"\bUTMALDG\.2D\.GATHER4\b", sass)) == rows // 4 * cols // COLS   # four rows per copy
    assert not re.search(r"\bUTMALDG(?!\.2D\.GATHER4)", sass)                              # no plain tile loads


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
