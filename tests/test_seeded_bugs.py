"""fa4-verify-pipelines against seeded protocol bugs (tests/seeded/buggy_kernels.py): each broken
variant is rejected with a diagnostic naming the pipeline, the role and the problem, at a source line
of the broken kernel; the correct kernels, the correct programs of ACCEPTED and the real gemm_sm90
pass, and so does every kernel of every bundle set (no false positive on a shipped kernel).
Bugs out of static reach (OUT_OF_STATIC_REACH) are not counted: each names the runtime tool
that catches it, and the verifier must still let it through (else it belongs in BUGS)."""
from pathlib import Path

import pytest

from fa4mlir import kernel_sets, kernels
from fa4mlir.dialect.query import ops_named
from fa4mlir.kernels import gemm_sm90
from fa4mlir.passes import verify_pipelines
from fa4mlir.passes._util import PassError
from tests.seeded import buggy_kernels
from tests._ring_mutations import MUTATIONS, RING_OPS, mutate_ring_op

SEEDED = Path(buggy_kernels.__file__).resolve()


def verify(kernel_ir):
    with kernel_ir.module.context:
        verify_pipelines.run(kernel_ir.module.operation)


def diagnose(variant):
    """The verifier's PassError for a seeded variant, or None when it let the kernel through."""
    try:
        verify(buggy_kernels.build(variant))
    except PassError as exc:
        return exc
    return None


@pytest.mark.parametrize("base", buggy_kernels.BASES)
def test_correct_kernels_pass(base):
    verify(buggy_kernels.build(None, base))


def test_gemm_passes():
    verify(gemm_sm90.build())
    verify(gemm_sm90.build(gemm_sm90.GemmConfig(stages=2, bn=128)))


SHIPPED = [(e[0], e[1]) for e in kernel_sets.configs(list(kernel_sets.SETS))]


@pytest.mark.parametrize("name, cfg", list(dict.fromkeys(SHIPPED)),
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(dict.fromkeys(SHIPPED))])
def test_every_shipped_kernel_verifies(name, cfg):
    kir = kernels.module(name).build(cfg)
    verify(kir)      # the deadlock kernel marks itself unverified: skipped as the compiler skips it


def _mutated_gemm(index: int, how: str):
    """gemm_sm90 with its index-th ring op's phase flipped, its stage + 1, or the op erased; None
    when the op has no phase."""
    return mutate_ring_op(gemm_sm90.build(), index, how)


def test_every_single_op_mutation_of_the_gemm_is_rejected():
    num_ops = len(ops_named(gemm_sm90.build().module.operation, *RING_OPS))
    for index in range(num_ops):
        for how in MUTATIONS:
            kir = _mutated_gemm(index, how)
            if kir is not None:
                with pytest.raises(PassError):
                    verify(kir)


@pytest.mark.parametrize("program", sorted(buggy_kernels.ACCEPTED))
def test_correct_program_is_accepted(program):
    exc = diagnose(program)
    assert exc is None, f"{program} ({buggy_kernels.ACCEPTED[program]}) was rejected: {exc}"


@pytest.mark.parametrize("bug", sorted(buggy_kernels.BUGS))
def test_seeded_bug_is_rejected(bug):
    exc = diagnose(bug)
    assert exc is not None, f"seeded bug {bug!r} was not caught"
    msg = str(exc)
    assert msg.startswith("fa4-verify-pipelines: ")
    for words in buggy_kernels.BUGS[bug]:
        assert words in msg, f"{bug}: expected {words!r} in: {msg}"
    assert exc.loc is not None and exc.loc.is_a_file(), f"{bug}: no source location"
    assert Path(exc.loc.filename).resolve() in (SEEDED, Path(gemm_sm90.__file__).resolve()), \
        f"{bug}: location {exc.loc} is not in the kernel"


@pytest.mark.parametrize("bug", sorted(buggy_kernels.OUT_OF_STATIC_REACH))
def test_out_of_static_reach_is_documented(bug):
    why, tool = buggy_kernels.OUT_OF_STATIC_REACH[bug]
    assert why and ("watchdog" in tool or "interpreter" in tool), f"{bug}: name the runtime tool that catches it"
    assert bug not in buggy_kernels.BUGS
    assert diagnose(bug) is None, f"{bug} is caught statically now: move it to BUGS"


def test_all_seeded_bugs_caught(capsys):
    caught = [bug for bug in buggy_kernels.BUGS if diagnose(bug) is not None]
    with capsys.disabled():
        print(f"\nfa4-verify-pipelines: caught {len(caught)} / {len(buggy_kernels.BUGS)} seeded bugs "
              f"({len(buggy_kernels.OUT_OF_STATIC_REACH)} more out of static reach, not counted: "
              f"{', '.join(buggy_kernels.OUT_OF_STATIC_REACH)}); "
              f"{len(buggy_kernels.ACCEPTED)} correct programs accepted")
    assert len(buggy_kernels.BUGS) >= 30
    assert sorted(caught) == sorted(buggy_kernels.BUGS)


def test_unknown_bug_name_is_a_value_error():
    with pytest.raises(ValueError, match="unknown seeded bug 'typo'"):
        buggy_kernels.build("typo")
