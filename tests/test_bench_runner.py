"""The runner `bench prefill` and `bench mla` share (fa4mlir.bench.runner), without a GPU: its FA rule
mirrors fa4mlir.testing's, and the row loop on fakes (numpy outputs, a fake timer): unsupported and
failing backends, poison, rounds, the last call checked too."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fa4mlir import testing
from fa4mlir.bench import runner


def test_fa_rule_mirrors_testing():
    for out_err, lowp_err in ((1e-3, 1e-3), (3e-3, 1e-3), (2e-3 + 1e-5, 1e-3), (math.nan, 1e-3)):
        assert runner.fa_rule(out_err, lowp_err) == testing.fa_rule(out_err, lowp_err)
    assert runner.fa_rule(0.0, math.nan)[0] is testing.fa_rule(0.0, math.nan)[0] is False
    assert runner.FA_ATOL == testing.DEFAULT_ATOL


# ----------------------------------------------------------------------------------------------
# One row on fakes: numpy outputs, a fake timer
# ----------------------------------------------------------------------------------------------

REF = np.zeros((2, 4), np.float32)


def fake_check(out) -> dict:
    out = out[0]
    err = float(np.abs(out - REF).max())
    nan = int(np.isnan(out).sum())
    ok, bound = runner.fa_rule(err, 1e-3)
    return {"max_err": err, "torch_err": 1e-3, "bound": bound, "fa_rule_ok": ok and nan == 0, "nan_out": nan}


def _returns(out, name):
    return lambda: lambda: (out, name)


class BundleError(LookupError):   # fa4mlir.attention.errors.BundleError is a LookupError
    pass


def fake_row(backends, poison=lambda: None):
    return runner.Row("softcap", "softcap_sink", {"batch": 2}, 1e12, backends, fake_check, poison)


def test_measure_row_records_unsupported_backends_and_times_the_rest():
    def no_softcap():
        def call():
            raise TypeError("flash_attn_func() got an unexpected keyword argument 'softcap'")
        return call

    def no_kernel():
        raise BundleError("flash_attn_func: bundle has no attention_fwd_sm90 (sm_90a) kernel for dtype=bf16")

    def declared():
        raise runner.Unsupported("fa4mlir has no score_mod yet")

    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    poisoned = []
    row = fake_row({"fa4mlir": no_softcap, "fa4mlir(bundle)": no_kernel, "fa4mlir(alibi)": declared,
                    "crashes": broken, "fa4cute": _returns(REF + 1e-3, "fa4cute"),
                    "wrong": _returns(REF + np.nan, "wrong")}, poison=lambda: poisoned.append(1))
    times = {"fa4cute": [2.0, 1.0, 3.0], "wrong": [1.0, 1.0, 1.0]}
    seen = []

    def timer(fn):
        name = fn()[1]
        seen.append(name)
        return times[name][seen.count(name) - 1]
    recs = runner.measure_row(row, timer, sync=lambda: None, rounds=3)
    assert [r["backend"] for r in recs] == list(row.backends)
    by = {r["backend"]: r for r in recs}
    assert by["fa4mlir"] == {"workload": "softcap_sink", "row": "softcap", "backend": "fa4mlir", "status": "unsupported",
                             "reason": "TypeError: flash_attn_func() got an unexpected keyword argument 'softcap'"}
    assert by["fa4mlir(bundle)"]["status"] == "unsupported" and "BundleError: flash_attn_func: bundle has no" in \
        by["fa4mlir(bundle)"]["reason"]
    assert by["fa4mlir(alibi)"]["reason"] == "Unsupported: fa4mlir has no score_mod yet"
    assert by["crashes"]["status"] == "error" and "illegal memory access" in by["crashes"]["reason"]
    assert seen == ["fa4cute", "wrong"] * 3                        # timed in turn, round by round
    good = by["fa4cute"]
    assert good["status"] == "measured" and good["ms"] == 2.0 and good["times_ms"] == [2.0, 1.0, 3.0]
    assert good["tflops"] == pytest.approx(1e12 / 2.0 / 1e9) and good["fa_rule_ok"]
    assert good["max_err"] == pytest.approx(1e-3) and good["nan_out"] == 0
    bad = by["wrong"]                                              # NaN everywhere: measured, flagged
    assert bad["status"] == "measured" and bad["fa_rule_ok"] is False and bad["max_err"] is None
    assert bad["nan_out"] == REF.size
    assert len(poisoned) == 3                                      # before each first call that got that far


def test_measure_row_drops_a_backend_that_fails_while_timed():
    calls = []

    def flaky():
        def fn():
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("lost the device")
            return REF, "flaky"
        return fn
    recs = runner.measure_row(fake_row({"flaky": flaky, "ok": _returns(REF, "ok")}), lambda fn: float(len(fn()[1])),
                          sync=lambda: None, rounds=3)
    assert recs[0]["status"] == "error" and recs[0]["reason"] == "while timed: RuntimeError: lost the device"
    assert recs[1]["status"] == "measured" and recs[1]["times_ms"] == [2.0, 2.0, 2.0]


def test_last_call_is_checked_too():
    outs = iter([REF, REF, REF + 0.5])

    def drifting():
        return lambda: (next(outs), "d")
    (rec,) = runner.measure_row(fake_row({"d": drifting}), lambda fn: (fn(), 1.0)[1], sync=lambda: None, rounds=1)
    assert rec["max_err"] == 0.5 and rec["fa_rule_ok"] is False
