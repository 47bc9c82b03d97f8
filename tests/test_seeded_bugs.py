"""fa4-verify-pipelines against seeded protocol bugs: each broken GEMM variant is rejected with a
diagnostic naming the pipeline, the role and the problem, at a source line of the broken kernel;
the correct variant and the real gemm_sm90 pass."""
from pathlib import Path

import pytest

from fa4mlir.kernels import gemm_sm90
from fa4mlir.passes import verify_pipelines
from fa4mlir.passes._util import PassError
from tests.seeded import buggy_kernels

SEEDED = Path(buggy_kernels.__file__).resolve()


def verify(kernel_ir):
    with kernel_ir.module.context:
        verify_pipelines.run(kernel_ir.module.operation)


def diagnose(bug):
    """The verifier's PassError for a seeded bug, or None when it let the kernel through."""
    try:
        verify(buggy_kernels.build(bug))
    except PassError as exc:
        return exc
    return None


def test_correct_variant_and_gemm_pass():
    verify(buggy_kernels.build(None))
    verify(gemm_sm90.build())
    verify(gemm_sm90.build(gemm_sm90.GemmConfig(stages=2, bn=128)))


@pytest.mark.parametrize("bug", sorted(buggy_kernels.BUGS))
def test_seeded_bug_is_rejected(bug):
    exc = diagnose(bug)
    assert exc is not None, f"seeded bug {bug!r} was not caught"
    msg = str(exc)
    assert msg.startswith("fa4-verify-pipelines: ")
    for words in buggy_kernels.BUGS[bug]:
        assert words in msg, f"{bug}: expected {words!r} in: {msg}"
    assert exc.loc is not None and exc.loc.is_a_file(), f"{bug}: no source location"
    assert Path(exc.loc.filename).resolve() == SEEDED, f"{bug}: location {exc.loc} is not in the kernel"


def test_all_seeded_bugs_caught(capsys):
    caught = [bug for bug in buggy_kernels.BUGS if diagnose(bug) is not None]
    with capsys.disabled():
        print(f"\nfa4-verify-pipelines: caught {len(caught)} / {len(buggy_kernels.BUGS)} seeded bugs")
    assert len(buggy_kernels.BUGS) >= 8
    assert sorted(caught) == sorted(buggy_kernels.BUGS)


def test_unknown_bug_name_is_a_value_error():
    with pytest.raises(ValueError, match="unknown seeded bug 'typo'"):
        buggy_kernels.build("typo")
