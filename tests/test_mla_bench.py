"""`bench mla`'s pure logic without a GPU: workload selection and flags, the anchors' FLOP count
against brute-force pair counts, the mla_prefill row built on the CPU at a small size (its check
passes the reference and fails wrong or NaN outputs), the JSON schema, the kernel set, and that the
modules import without MLIR."""
from __future__ import annotations


import pytest

from fa4mlir import kernel_sets
from fa4mlir.bench import mla_bench as mb
from fa4mlir.bench import runner
from fa4mlir.kernels import attention_sm90_config as acfg
from tests._bench_helpers import RESULT_BREAKAGES, check_cli_imports_no_mlir, check_json_round_trip


def test_workloads_and_unknown_names():
    assert mb.parse_workloads("") == ["mla_prefill", "mla_decode", "mla_decode_fp8", "mla_sparse", "mla_sparse_fp8",
                                       "mla_sparse_decode", "mla_sparse_decode_fp8"] == list(mb.WORKLOADS)
    assert mb.parse_workloads(" mla_prefill,mla_prefill ") == ["mla_prefill"]
    with pytest.raises(ValueError, match=r"unknown mla workload\(s\) \['decode_dense'\]"):
        mb.parse_workloads("mla_prefill,decode_dense")
    assert set(mb.BUILDERS) == set(mb.WORKLOADS)


def test_cli_parses_the_mla_flags(monkeypatch):
    from fa4mlir import __main__ as cli
    seen = []
    monkeypatch.setattr(mb, "run", lambda args: seen.append(args) or 0)
    assert cli.main(["bench", "mla", "--rounds", "5", "--heat-ms", "250", "--no-fa4", "--out", "m.json",
                     "--bundle", "b"]) == 0
    a = seen[-1]
    assert (a.what, a.workloads, a.rounds, a.heat_ms, a.no_fa4, a.out, a.bundle) == \
        ("mla", "", 5, 250.0, True, "m.json", "b")
    cli.main(["bench", "mla"])
    assert (seen[-1].rounds, seen[-1].out) == (3, "mla-bench.json")


def test_run_refuses_an_unknown_workload_before_touching_torch(capsys):
    from types import SimpleNamespace
    assert mb.run(SimpleNamespace(workloads="mla_prefill,nope")) == 2
    assert "unknown mla workload(s) ['nope']" in capsys.readouterr().err


def _causal_pairs(s: int) -> int:
    return sum(j <= i for i in range(s) for j in range(s))


@pytest.mark.parametrize("b, h, s", [(1, 1, 1), (2, 3, 9), (1, 2, 64)])
def test_mla_flops_are_two_gemms_over_half_the_square(b, h, s):
    """2·(D_qk + D_v) per visible (query, key) pair, less half the diagonal: FlashAttention's S²/2."""
    d, dv = 192, 128
    want = 2 * b * h * (d + dv) * (_causal_pairs(s) - s / 2)
    assert mb.mla_flops(b, h, s, d, dv) == pytest.approx(want)
    assert mb.mla_flops(b, h, s, d, dv, causal=False) == 2 * b * h * s * s * (d + dv)
    assert acfg.flops(b, h, s, s, d, True, head_dim_v=dv) == mb.mla_flops(b, h, s, d, dv)
    assert acfg.flops(b, h, s, s, 128, False) == acfg.flops(b, h, s, s, 128, False, head_dim_v=128)


def test_anchor_row_shape_and_flops():
    shape, flops = mb.row_shape("mla_prefill")
    assert shape == {"batch": 2, "seqlen": 8192, "heads": 16, "head_dim": 192, "head_dim_v": 128, "causal": True}
    assert flops == 2 * 2 * 16 * 8192 * 8192 * (192 + 128) / 2      # anchors_serving.w_mla_prefill's count
    with pytest.raises(ValueError, match="unknown mla row"):
        mb.row_shape("decode_dense")


@pytest.mark.parametrize("heads, sq", [(16, 1), (64, 2), (128, 1)])
def test_decode_rows_count_flops_and_bytes_as_flashmla(heads, sq):
    """FlashMLA's tests/test_flash_mla.py: FLOPs 2 x b x s_q x h_q x s_k x (d + dv); bytes of the whole
    cache (b x s_k x d), q (b x s_q x h_q x d) and out (b x s_q x h_q x dv), bf16."""
    shape, flops = mb.row_shape(f"mla_decode_h{heads}_q{sq}")
    b, s_k, d, dv = 128, 4096, 576, 512
    assert flops == 2 * b * sq * heads * s_k * (d + dv)
    assert shape["bytes"] == 2 * (b * s_k * d + b * sq * heads * d + b * sq * heads * dv)
    assert (shape["heads"], shape["seqlen_q"], shape["page_size"]) == (heads, sq, 64)
    assert mb.WORKLOADS["mla_decode"] == tuple(f"mla_decode_h{h}_q{q}" for h in (16, 64, 128) for q in (1, 2))


@pytest.mark.parametrize("heads, sq", [(16, 1), (128, 2)])
def test_fp8_decode_rows_count_bytes_as_flashmla(heads, sq):
    """FlashMLA's tests/lib.py count_flop_and_mem_vol_for_decode with its FP8 cache: q and out in bf16
    (2 bytes), each retrieved token 656 bytes; the FLOPs as the bf16 rows'."""
    shape, flops = mb.row_shape(f"mla_decode_fp8_h{heads}_q{sq}")
    b, s_k, d, dv = 128, 4096, 576, 512
    assert flops == mb.row_shape(f"mla_decode_h{heads}_q{sq}")[1] == 2 * b * sq * heads * s_k * (d + dv)
    assert shape["bytes"] == 2 * b * sq * heads * d + b * s_k * 656 + 2 * b * sq * heads * dv
    assert shape["kv"] == "fp8" and (shape["heads"], shape["seqlen_q"]) == (heads, sq)
    assert mb.WORKLOADS["mla_decode_fp8"] == tuple(f"mla_decode_fp8_h{h}_q{q}" for h in (16, 64, 128) for q in (1, 2))


def test_sparse_row_counts_as_flashmla_and_its_check_fails_a_wrong_output():
    torch = pytest.importorskip("torch")
    shape, flops = mb.row_shape("mla_sparse")
    assert flops == 2 * 4096 * 2048 * 128 * (576 + 512) == 2336462209024
    assert shape["bytes"] == (4096 * 2048 * 576 + 4096 * 128 * 1088) * 2 == 10804527104
    from fa4mlir.testing_mla import sparse_reference
    torch.manual_seed(0)
    q = torch.randn(4, 64, 576, dtype=torch.bfloat16) / 10
    kv = torch.randn(200, 1, 576, dtype=torch.bfloat16) / 10
    idx = torch.randint(-1, 200, (4, 1, 64), dtype=torch.int32)
    check = mb._sparse_check(torch, q, kv, idx, 576 ** -0.5, tokens=4)
    out = sparse_reference(q, kv, idx, 576 ** -0.5, torch.float32)[0].to(torch.bfloat16)
    assert check((out, None, None))["fa_rule_ok"]
    bad = out.clone()
    bad[1, 0, :256] = bad[1, 0, 256:]
    assert not check((bad, None, None))["fa_rule_ok"]


def test_mla_prefill_row_on_cpu_checks_by_the_fa_rule(monkeypatch):
    """The row's tensors (q, k 192 wide, v 128), backends and check, made on the CPU at a small size:
    the float32 reference passes, a wrong output and a NaN fail."""
    torch = pytest.importorskip("torch")
    from fa4mlir.bench import prefill_workloads as pw
    monkeypatch.setattr(pw, "DEV", "cpu")
    monkeypatch.setattr(mb, "MLA_PREFILL", dict(mb.MLA_PREFILL, batch=1, seqlen=300, heads=2))
    monkeypatch.setattr(mb, "row_shape", lambda row: ({"seqlen": 300}, 1.0))
    (row,) = mb.mla_prefill_rows(torch, fa4=None)
    assert list(row.backends) == ["fa4mlir", "sdpa-cudnn"]
    torch.manual_seed(0)
    q = torch.randn(1, 300, 2, 192, dtype=torch.bfloat16)
    k = torch.randn(1, 300, 2, 192, dtype=torch.bfloat16)
    v = torch.randn(1, 300, 2, 128, dtype=torch.bfloat16)
    mask = torch.ones(300, 300, dtype=torch.bool).tril()
    good = pw.reference(torch, q, k, v, 192 ** -0.5, mask).to(torch.bfloat16)
    assert good.shape == (1, 300, 2, 128)
    report = row.check(good)
    assert report["fa_rule_ok"] and report["nan_out"] == 0, report
    wrong = good.clone()
    wrong[0, -1, 0, :64] = wrong[0, -1, 0, 64:]
    assert not row.check(wrong)["fa_rule_ok"]
    poisoned = good.clone()
    poisoned[0, 0, 0, 0] = float("nan")
    bad = row.check(poisoned)
    assert not bad["fa_rule_ok"] and bad["nan_out"] == 1, bad


def synthetic_result() -> dict:
    res = mb.new_result(device="NVIDIA H200", environment={"torch": "2.9"}, timer={"name": "heated"},
                        fa4_cute={"available": False}, settings={"workloads": ["mla_prefill"], "rounds": 3})
    res["rows"].append({"row": "mla_prefill", "workload": "mla_prefill", "shape": {}, "flops": 1e15})
    ok = {"status": "measured", "ms": 2.0, "tflops": 500.0, "times_ms": [2.0], "max_err": 1e-3, "torch_err": 1e-3,
          "bound": 2e-3, "fa_rule_ok": True, "nan_out": 0}
    res["results"] += [{"workload": "mla_prefill", "row": "mla_prefill", "backend": "fa4mlir", **ok},
                       {"workload": "mla_prefill", "row": "mla_prefill", "backend": "sdpa-cudnn",
                        **ok, "tflops": 400.0},
                       {"workload": "mla_prefill", "row": "mla_prefill", "backend": "fa4cute",
                        "status": "unsupported", "reason": "no flash_attn.cute"}]
    return res


def test_json_round_trip_schema_tables_and_exit_code(tmp_path):
    res = check_json_round_trip(mb, synthetic_result, tmp_path / "mla.json", "fa4mlir-prefill-bench/1",
                                ((lambda r: r.pop("rows"), "lacks \\['rows'\\]"), *RESULT_BREAKAGES,
                                 (lambda r: r["rows"][0].pop("flops"), "row #0 lacks \\['flops'\\]")))
    table = mb.format_tables(res)
    assert "sdpa-cudnn 1.250" in table and "unsupported: no flash_attn.cute" in table
    assert runner.exit_code(res) == 0
    res["results"][0]["fa_rule_ok"] = False
    assert runner.exit_code(res) == 1


def test_mla_set_holds_the_mla_prefill_kernel_and_bench_holds_it():
    entries = kernel_sets.configs(["mla"])
    prefill = [(c.dtype, c.head_dim, c.dim_v, c.causal) for k, c, *_ in entries if k == "attention_fwd_sm90"]
    assert prefill == [("bf16", 192, 128, True)]
    bench = kernel_sets.configs(["bench"])
    assert all(any(e[0] == b[0] and e[1] == b[1] for b in bench) for e in entries)
    assert "mla" in kernel_sets.SETS and "bench mla" in kernel_sets.__doc__


def test_mla_module_and_cli_import_no_mlir():
    check_cli_imports_no_mlir("fa4mlir.bench.mla_bench", "mla")


def test_sparse_decode_row_counts_flops_and_bytes_as_flashmla():
    """FlashMLA's count_flop_and_mem_vol_for_decode: FLOPs 2 x h_q x b x s_q x topk x (576 + 512);
    bytes q + out + the distinct cache rows named (1152 bytes each in bf16). The indices are cache
    rows page x 64 + offset inside each sequence's own pages, distinct per query token."""
    import numpy as np
    shape, flops = mb.row_shape("mla_sparse_decode")
    b, sq, h, topk = 64, 2, 128, 2048
    assert flops == 2 * h * b * sq * topk * (576 + 512)
    table, rows = mb.sparse_decode_indices()
    assert rows.shape == (b, sq, topk) and rows.dtype == np.int32 and table.shape == (b, 32768 // 64)
    assert all(len(set(r.tolist())) == topk for r in rows.reshape(-1, topk))
    for s in (0, b - 1):                                   # each sequence's rows lie in its own pages
        assert set((rows[s] // 64).flatten().tolist()) <= set(table[s].tolist())
    distinct = len(np.unique(rows))
    assert b * topk <= distinct <= b * sq * topk
    assert shape["bytes"] == 2 * b * sq * h * (576 + 512) + distinct * 1152
    assert mb.WORKLOADS["mla_sparse_decode"] == ("mla_sparse_decode",)


def test_fp8_sparse_decode_row_counts_656_bytes_a_row_as_flashmla():
    """The FP8 row: the same shape and FLOPs as mla_sparse_decode, each distinct cache row counted at
    FlashMLA's 656 bytes (its count_flop_and_mem_vol_for_decode assumes the FP8 row)."""
    import numpy as np
    shape, flops = mb.row_shape("mla_sparse_decode_fp8")
    plain, plain_flops = mb.row_shape("mla_sparse_decode")
    assert flops == plain_flops and shape["kv"] == "fp8" and "kv" not in plain
    b, sq, h = 64, 2, 128
    distinct = len(np.unique(mb.sparse_decode_indices()[1]))
    assert shape["bytes"] == 2 * b * sq * h * (576 + 512) + distinct * 656
    assert mb.WORKLOADS["mla_sparse_decode_fp8"] == ("mla_sparse_decode_fp8",)
    assert mb.BUILDERS["mla_sparse_decode_fp8"] is mb.mla_sparse_decode_fp8_rows


def test_fp8_sparse_prefill_row_counts_656_bytes_a_kv_row():
    shape, flops = mb.row_shape("mla_sparse_fp8")
    plain, plain_flops = mb.row_shape("mla_sparse")
    s_q, h, topk = 4096, 128, 2048
    assert flops == plain_flops == 2 * s_q * topk * h * (576 + 512) and shape["kv"] == "fp8"
    assert plain["bytes"] == (s_q * topk * 576 + s_q * h * (576 + 512)) * 2
    assert shape["bytes"] == s_q * topk * 656 + s_q * h * (576 + 512) * 2
    assert mb.BUILDERS["mla_sparse_fp8"] is mb.mla_sparse_fp8_rows


def test_mla_decode_variant_flag_and_backends(monkeypatch):
    """--mla-decode-variant reaches mla_decode's rows as `fa4mlir[NAME]` backends whose calls run
    with FA4MLIR_MLA_DECODE_VARIANT=NAME (restored after); an unknown name is refused up front."""
    import os

    from fa4mlir import __main__ as cli
    from fa4mlir.kernels import attention_mla_decode_sm90_config as mc
    seen = []
    monkeypatch.setattr(mb, "run", lambda args: seen.append(args) or 0)
    assert cli.main(["bench", "mla", "--workloads", "mla_decode", "--mla-decode-variant", "default,seesaw"]) == 0
    assert seen[-1].mla_decode_variant == "default,seesaw"
    monkeypatch.delenv(mc.VARIANT_ENV, raising=False)
    envs = []
    make = lambda: envs.append(os.environ.get(mc.VARIANT_ENV))   # noqa: E731
    for name in ("default", "seesaw"):
        mb.with_decode_variant(make, name)()
    assert envs == ["default", "seesaw"] and mc.VARIANT_ENV not in os.environ
    with pytest.raises(ValueError, match="unknown --mla-decode-variant"):
        mb.mla_decode_rows(None, variants=["seesaww"])
