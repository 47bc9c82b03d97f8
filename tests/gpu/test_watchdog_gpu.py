"""The debug watchdog on a GPU: a kernel that deadlocks on purpose traps within the watchdog budget
and prints role, pipeline, stage and phase (bundle kernel `deadlock_sm90_debug`, built by
`python -m fa4mlir bundle --set gpu-tests` from fa4mlir/kernels/deadlock_sm90.py).

The launch runs in a subprocess: a trapped context is dead for the rest of the process."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

CHILD = textwrap.dedent("""
    import sys, torch
    from fa4mlir.runtime import Bundle, load
    kernel = load(Bundle.open(sys.argv[1]).find(name="deadlock_sm90_debug"))
    out = torch.zeros(4, dtype=torch.int32, device="cuda")
    try:
        kernel.launch(1, [out])
        torch.cuda.synchronize()
    except Exception as exc:
        print("LAUNCH-ERROR", type(exc).__name__, exc, flush=True)
        sys.exit(3)
    print("NO-ERROR", flush=True)
""")


def test_deadlock_traps_with_a_message(bundle, require_arch):
    require_arch(9)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, os.environ["FA4MLIR_BUNDLE"]],
                              capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("the deadlock kernel hung: the watchdog did not fire within 120 s")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3 and "LAUNCH-ERROR" in out, out
    assert re.search(r"LAUNCH_FAILED|ILLEGAL_INSTRUCTION|illegal instruction|unspecified launch failure", out), out
    assert "fa4mlir watchdog: kernel deadlock_sm90_debug: role 'consumer'" in out, out
    assert "pipeline 'kv_pipe' full[stage 0] phase 0" in out, out
    # one lane per consumer warp prints; the first trap may kill the grid before every warp printed
    threads = re.findall(r"fa4mlir watchdog: .*thread (\d+)\)", out)
    assert 1 <= len(threads) <= 4 and len(set(threads)) == len(threads), out
    assert all(int(t) % 32 == 0 for t in threads), out  # lane 0 of a converged warp


