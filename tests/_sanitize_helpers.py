"""Helpers the deviceless bench/sanitize.py tests share (test_sanitize_script.py, test_sanitize_children.py,
test_sanitize_score_mod.py, test_sanitize_mla_sparse.py): the verdict of a report, a fake bundle of the
matrix's kernels, a child's report and that report inside a sanitizer's (the cpu_child fixture that
runs a child on CPU tensors is test_sanitize_children.py's)."""
from __future__ import annotations

import json


from bench import sanitize as san
from bench.sanitize_report import judge, parse_report
from fa4mlir import kernels
from fa4mlir.artifacts import KernelArtifact, write_bundle


def verdict(text: str, rc: int = 0, trap: bool = False, timed_out: bool = False) -> tuple[str, str]:
    return judge(parse_report(text), rc, timed_out, text, san.WATCHDOG_TEXT if trap else None)


def fake_bundle(root, cases):
    """A bundle holding every kernel the cases look up (fake cubins) and one sm_100a kernel."""
    arts = [KernelArtifact(name=f"{case.kernel}_{i}_{j}", arch="sm_90a", cubin=b"fake", block=(128, 1, 1),
                           key=f"{case.name}{j}".ljust(32, "0"),
                           config={**match, "cubin_backend": kernels.cubin_backend(case.kernel)})
            for i, case in enumerate(cases) for j, match in enumerate(case.match)]
    arts.append(KernelArtifact(name="gemm_sm100_bf16", arch="sm_100a", cubin=b"fake", block=(256, 1, 1),
                               key="f" * 32, config={"kernel": "gemm_sm100", "cubin_backend": "nvjitlink"}))
    return write_bundle(root, arts)


def child_report(capsys, name, bundle):
    code = san.main(["--child", name, "--bundle", str(bundle), "--seed", "11"])
    return code, parse_report(capsys.readouterr().out)


def under_sanitizer(rep, summary="========= ERROR SUMMARY: 0 errors\n") -> str:
    """The child's lines of `rep` inside a sanitizer's clean report."""
    lines = "".join(f"SANITIZE-RESULT {json.dumps(r)}\n" for r in rep.results) + f"SANITIZE-END {json.dumps(rep.end)}\n"
    return "========= COMPUTE-SANITIZER\n" + lines + summary
