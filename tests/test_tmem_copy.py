"""tcgen05.cp (fa4.tmem_copy) in the interpreter (interpret/ops/tmem_copy.py): each modelled form copies
the source rows of a 128B-swizzled K-major tile, read through the descriptor as an MMA operand, into
the TMEM lanes its note "cp shapes" names (tests/_tmem_copy_probe.py), compared with numpy; the pair's
64x128b.warpx2::02_13 feeds Layout B's A from TMEM (FlashMLA's route for Q) in tests/test_pair_gather.py.
Modelled from the PTX ISA's shape names and FlashMLA's use, never run on a GPU."""
import numpy as np
import pytest

from fa4mlir import interpret
from fa4mlir.dialect.query import PassError, mark_unverified
from fa4mlir.interpret.numeric import f32_to_bf16
from fa4mlir.interpret.ops.tmem_copy import SHAPES
from fa4mlir.passes import verify_pipelines
from tests import _tmem_copy_probe as probe

FORMS = [("128x256b", None, 0), ("128x256b", None, 32), ("128x128b", None, 16), ("64x128b", "warpx2::02_13", 0),
         ("64x128b", "warpx2::02_13", 48), ("64x128b", "warpx2::01_23", 16), ("32x128b", "warpx4", 112)]


def _src(seed=0):
    return f32_to_bf16(np.random.default_rng(seed).standard_normal((probe.ROWS, probe.COLS)).astype(np.float32))


def _run(shape, multicast, offset, bug=None, policy="lazy"):
    src = _src()
    out = np.zeros((128, probe.COLUMNS[shape]), np.uint32)
    kir = probe.build(shape, multicast, offset, bug)
    if bug is not None:
        with kir.module.context:
            mark_unverified(kir.module.operation)
    interpret.load(kir).launch((1, 1, 1), {"src": src, "out": out}, policy=policy)
    return src, out


def _expected(src, shape, multicast, offset):
    """TMEM lane l's words: the source row copied there (SHAPES), elements from offset / 2 on, packed
    two a 32-bit column, the lower-indexed element in the low half."""
    rows, k, lanes_of = SHAPES[(shape, (multicast or "").replace("::", "_"))]
    bits = src.view(np.uint16).astype(np.uint32)[:rows, offset // 2:offset // 2 + k]
    words = bits[:, 0::2] | (bits[:, 1::2] << 16)
    want = np.full((128, k // 2), -1, np.int64)
    for r in range(rows):
        for lane in lanes_of(r):
            assert want[lane, 0] == -1, "two rows on one lane"
            want[lane] = words[r]
    assert (want >= 0).all(), "a lane no row reaches"
    return want.astype(np.uint32)


@pytest.mark.parametrize("shape,multicast,offset", FORMS)
def test_copy_lands_rows_on_their_lanes(shape, multicast, offset):
    src, out = _run(shape, multicast, offset)
    np.testing.assert_array_equal(out, _expected(src, shape, multicast, offset))


def test_pair_form_duplicates_rows_over_the_lane_halves():
    """64x128b.warpx2::02_13: lanes l and 64 + l hold the same row (Layout B's A, FlashMLA's Q)."""
    _, out = _run("64x128b", "warpx2::02_13", 0, policy="random")
    np.testing.assert_array_equal(out[:64], out[64:])
    assert len({tuple(r) for r in out[:64]}) == 64


UNORDERED = r"(which no write reached|is not ordered before it)"
INTERPRETER_CATCHES = {
    "copy_unwaited": (interpret.RaceFault, r"tcgen05\.cp\.64x128b of CTA rank 0 \(SMEM\) by the tensor core reads "
                                           r"shared .*" + UNORDERED),
    "read_unwaited": (interpret.RaceFault, r"tcgen05\.ld by the tcgen05 ops of warp \d \(epilogue\) reads TMEM .*"
                                           + UNORDERED),
}
VERIFIER_CATCHES = {
    "copy_unwaited": r"pipeline 'ld', role 'copy': .* 0 wait\(s\) but 1 release",
    "read_unwaited": r"pipeline 't', role 'epilogue': .* 0 wait\(s\) but 1 release",
}


@pytest.mark.parametrize("policy", interpret.POLICIES)
@pytest.mark.parametrize("bug", probe.BUGS)
def test_interpreter_catches(bug, policy):
    exc, message = INTERPRETER_CATCHES[bug]
    with pytest.raises(exc, match=message):
        _run("64x128b", "warpx2::02_13", 0, bug=bug, policy=policy)


@pytest.mark.parametrize("bug", probe.BUGS)
def test_verifier_catches(bug):
    kir = probe.build("64x128b", "warpx2::02_13", 0, bug)
    with kir.module.context, pytest.raises(PassError, match=VERIFIER_CATCHES[bug]):
        verify_pipelines.run(kir.module.operation)


def test_unmodelled_form_is_unsupported():
    with pytest.raises(interpret.Unsupported, match=r"tcgen05\.cp\.4x256b"):
        interpret.load(probe.build("4x256b", None, 0))
