"""bench/sanitize.py's sparse MLA decode cases without a GPU (bench/sanitize_mla_sparse_decode.py): every
sparse decode entry of the mla set (the FP8 cache's included) is one case's, the quick one covers both
families, and the child on CPU tensors with fake sparse decodes (right; writes nothing; ignores
topk_length), on
tests/test_sanitize_script.py's fixtures."""
from __future__ import annotations

import numpy as np
import pytest

from bench import sanitize as san
from bench import sanitize_mla_sparse_decode as spd
from fa4mlir import kernel_sets
from tests._sanitize_helpers import child_report
from tests.test_sanitize_children import cpu_child  # noqa: F401 (a fixture)

CASES = [c.name for c in san.CASES if c.child == "mla-sparse-decode"]


def test_every_sparse_decode_entry_is_one_case_and_the_quick_one_has_both_families():
    entries = [(k, cfg.key()) for k, cfg in kernel_sets.mla() if k == spd.dc.DECODE_KERNEL]
    assert len(entries) == 44       # 16-bit: bf16 rule (overlapped pair fill) 4, pair fill 4, tile-order seesaw 4, tile 4, tile + producer
                                    # warpgroup 4, f16 4; FP8: converter 4, gather 4, crossover 4,
                                    # crossover_lean 4, crossover_stasync 4
    for _, key in entries:
        assert [c.name for c in san.CASES if key in c.match] in ([n] for n in CASES), key
    quick = [c for c in san.select_cases(True, None) if c.child == "mla-sparse-decode"]
    assert [c.name for c in quick] == ["mla-sparse-decode"]
    assert set(quick[0].families) == {f"{spd.dc.DECODE_KERNEL}/split", f"{spd.dc.DECODE_KERNEL}/unsplit"}
    assert san.uncovered(entries) == []
    assert san.uncovered(entries, [c for c in san.CASES if c.child != "mla-sparse-decode"]) == sorted(
        [f"{spd.dc.DECODE_KERNEL}/split", f"{spd.dc.DECODE_KERNEL}/unsplit", "sparse-decode-bf16", "sparse-decode-f16",
         "sparse-decode-fp8", "sparse-decode-pwg", "sparse-decode-seesaw", "sparse-decode-topk_length"])


@pytest.fixture
def cpu_decode(request, monkeypatch):
    """(bundle, the calls made, the fake's mode: 'right', 'nothing' (torch.empty's outputs),
    'no-topk-length')."""
    import torch

    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.testing_mla import dequantize_fp8_cache, sparse_reference
    bundle, *_ = request.getfixturevalue("cpu_child")
    calls, mode = [], {"mode": "right"}

    def call(q, k_cache, indices, head_dim_v, meta, num_splits, *, topk_length, is_fp8_kvcache, bundle):
        b, sq, h, d = q.shape
        calls.append((tuple(q.shape), tuple(k_cache.shape), indices.shape[2], meta.shape[0], topk_length is not None))
        if is_fp8_kvcache:
            k_cache = dequantize_fp8_cache(k_cache)
        out, lse = torch.empty((b, sq, h, head_dim_v), dtype=q.dtype), torch.empty((b, h, sq))
        if mode["mode"] == "nothing":
            return out, lse
        lens = None
        if topk_length is not None and mode["mode"] != "no-topk-length":
            lens = np.repeat(topk_length.numpy(), sq)
        o, _, l_ = sparse_reference(q.reshape(b * sq, h, d), k_cache.reshape(-1, 1, d),
                                    indices.numpy().reshape(b * sq, 1, -1), d ** -0.5, torch.float32, topk_length=lens)
        out.copy_(o.reshape(b, sq, h, -1))
        lse.copy_(l_.reshape(b, sq, h).transpose(1, 2))
        return out, lse

    monkeypatch.setattr(sd, "sparse_decode", call)
    return bundle, calls, mode


@pytest.mark.parametrize("name", CASES)
def test_sparse_decode_child_runs_the_case_kernels_and_checks_them(cpu_decode, capsys, name):
    bundle, calls, mode = cpu_decode
    case = san.CASES_BY_NAME[name]
    code, rep = child_report(capsys, name, bundle)
    assert code == 0 and rep.end["ok"] and rep.end["checks"] == sum(len(spd.shapes_of(m)) for m in case.match), rep.results
    assert all(r["ok"] and r["nan_out"] == 0 for r in rep.results), rep.results
    want = [((b, sq, h, 576), (p, ps, 1, 656 if m["kv_dtype"] == "fp8" else 576), k, spd.SPLITS if m["split"] else 1,
             m["topk_length"])
            for m in case.match for b, sq, h, k, p, ps in spd.shapes_of(m)]
    assert calls == want
    lengths = [m["topk_length"] for m in case.match for _ in spd.shapes_of(m)]
    for mode["mode"] in ["nothing"] + ["no-topk-length"] * any(lengths):
        code, rep = child_report(capsys, name, bundle)
        failed = [not r["ok"] for r in rep.results]
        assert code == 1, mode
        if mode["mode"] == "nothing":
            assert all(failed) and all(r["nan_out"] > 0 for r in rep.results)
        else:
            assert failed == lengths, rep.results
