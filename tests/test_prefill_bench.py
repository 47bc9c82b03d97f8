"""`bench prefill`'s pure logic without a GPU: workload selection and flags, FLOPs against brute-force
pair counts, feature costs, tables, the JSON schema, the kernel set, and that the modules import
without MLIR (the row loop it shares with `bench mla`: tests/test_bench_runner.py)."""
from __future__ import annotations

import math

import pytest

from fa4mlir import kernel_sets
from fa4mlir.bench import prefill_bench as pb
from fa4mlir.bench import runner
from tests._bench_helpers import RESULT_BREAKAGES, check_cli_imports_no_mlir, check_json_round_trip


# ----------------------------------------------------------------------------------------------
# Workloads and flags
# ----------------------------------------------------------------------------------------------

def test_workloads_expand_to_rows_with_their_dense_baseline_first():
    assert pb.parse_workloads("") == list(pb.WORKLOADS)
    assert pb.parse_workloads(" alibi,softcap_sink,alibi ") == ["alibi", "softcap_sink"]
    with pytest.raises(ValueError, match=r"unknown prefill workload\(s\) \['decode_dense'\]"):
        pb.parse_workloads("sliding_window,decode_dense")
    assert pb.families(["sliding_window"]) == {"s16k": ["dense_causal_16k", "sliding_window"]}
    assert pb.families(["alibi", "softcap_sink"]) == {"s8k": ["dense_causal_8k", "softcap", "sink", "alibi"]}
    assert pb.families(["alibi"]) == {"s8k": ["dense_causal_8k", "alibi"]}
    every = pb.families(list(pb.WORKLOADS))
    assert list(every) == ["varlen", "chunked", "s16k", "s8k"]
    assert sum(map(len, every.values())) == 9
    assert pb.families(["prefill_chunked_window"]) == {"chunked": ["prefill_chunked", "prefill_chunked_window"]}
    for row, base in pb.BASELINE.items():     # every feature row runs next to its dense row
        assert base in next(rows for rows in every.values() if row in rows)
    assert pb.row_workload("dense_causal_8k") == "softcap_sink" and pb.row_workload("sink") == "softcap_sink"


def test_cli_parses_the_prefill_flags(monkeypatch):
    from fa4mlir import __main__ as cli
    seen = []
    monkeypatch.setattr(pb, "run", lambda args: seen.append(args) or 0)
    assert cli.main(["bench", "prefill", "--workloads", "sliding_window,alibi", "--rounds", "5", "--heat-ms", "250",
                     "--no-fa4", "--no-flex", "--out", "p.json", "--bundle", "b"]) == 0
    a = seen[-1]
    assert (a.what, a.workloads, a.rounds, a.heat_ms, a.no_fa4, a.no_flex, a.out, a.bundle) == \
        ("prefill", "sliding_window,alibi", 5, 250.0, True, True, "p.json", "b")
    cli.main(["bench", "prefill"])
    a = seen[-1]
    assert (a.workloads, a.rounds, a.no_fa4, a.no_flex, a.out) == ("", 3, False, False, "prefill-bench.json")


def test_run_refuses_an_unknown_workload_before_touching_torch(capsys):
    from types import SimpleNamespace
    assert pb.run(SimpleNamespace(workloads="prefill_varlen,nope")) == 2
    assert "unknown prefill workload(s) ['nope']" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# FLOPs: the anchors' counts against brute-force counts of visible (query, key) pairs
# ----------------------------------------------------------------------------------------------

def visible_pairs(seqlen_q: int, seqlen_k: int, window_left: int | None = None) -> int:
    """Pairs (i, j) with j <= diag = i + seqlen_k - seqlen_q (bottom-right causal) and, with a
    window, j >= diag - window_left: counted one by one."""
    count = 0
    for i in range(seqlen_q):
        diag = i + seqlen_k - seqlen_q
        for j in range(seqlen_k):
            count += j <= diag and (window_left is None or j >= diag - window_left)
    return count


@pytest.mark.parametrize("b, h, s, d", [(1, 1, 1, 8), (2, 3, 7, 16), (1, 2, 64, 128)])
def test_causal_flops_are_the_visible_pairs_less_half_the_diagonal(b, h, s, d):
    """FlashAttention's (and the anchors') S^2 / 2: the pairs j <= i less half of the S diagonal ones."""
    assert pb.causal_flops(b, h, s, d) == 4 * b * h * d * (visible_pairs(s, s) - s / 2)


def test_varlen_flops_sum_each_sequence():
    lens, h, d = [1, 5, 17, 3], 4, 64
    assert pb.varlen_flops(lens, h, d) == sum(4 * h * d * (visible_pairs(n, n) - n / 2) for n in lens)
    assert pb.varlen_flops([], h, d) == 0


@pytest.mark.parametrize("b, sq, sc, h", [(1, 4, 0, 1), (2, 5, 11, 3), (3, 16, 40, 2)])
def test_chunked_flops_count_the_cache_and_the_new_tokens_causal_part(b, sq, sc, h):
    d = 32
    assert pb.chunked_flops(b, sq, sc, h, d) == 4 * b * h * d * (visible_pairs(sq, sc + sq) - sq / 2)


@pytest.mark.parametrize("b, sq, sc, h, w", [(1, 4, 0, 1, 2), (2, 5, 11, 3, 4), (3, 16, 40, 2, 60), (1, 9, 3, 1, 0)])
def test_chunked_window_flops_count_the_visible_pairs_exactly(b, sq, sc, h, w):
    d = 32
    assert pb.chunked_window_flops(b, sq, sc, h, w, d) == 4 * b * h * d * visible_pairs(sq, sc + sq, window_left=w)


@pytest.mark.parametrize("s, w", [(1, 0), (9, 0), (9, 3), (9, 8), (9, 20), (40, 7)])
def test_window_flops_count_the_visible_pairs_exactly(s, w):
    b, h, d = 2, 3, 16
    assert pb.window_flops(b, s, h, w, d) == 4 * b * h * d * visible_pairs(s, s, window_left=w)


def test_anchor_rows_flops():
    s, w = 16384, 4096
    shape, flops = pb.row_shape("sliding_window")
    closed = (w + 1) * (w + 2) / 2 + (s - w - 1) * (w + 1)      # rows before the window fills, then W + 1 keys each
    assert flops == 4 * 2 * 16 * 128 * closed and shape["window_size"] == [w, 0]
    assert pb.row_shape("dense_causal_16k")[1] == 4 * 2 * 16 * s * s * 128 / 2
    for row in ("dense_causal_8k", "softcap", "sink", "alibi"):
        assert pb.row_shape(row)[1] == 4 * 2 * 16 * 8192 * 8192 * 128 / 2
    shape, flops = pb.row_shape("prefill_chunked")
    assert flops == 4 * 8 * 32 * 128 * (2048 * 8192 + 2048 * 2048 / 2) and shape["seqlen_k"] == 10240
    shape, flops = pb.row_shape("prefill_chunked_window")     # every query past the cache sees W + 1 keys
    assert flops == 4 * 8 * 32 * 128 * 2048 * 4097 and shape["window_size"] == [4096, 0]
    assert pb.row_shape("prefill_varlen", [3, 5])[0]["total_tokens"] == 8


def test_varlen_lengths_are_the_anchors_seeded_draw():
    torch = pytest.importorskip("torch")
    lens = pb.varlen_lens(torch)
    assert len(lens) == 16 and all(256 <= n <= 8192 for n in lens)
    assert lens[:3] == [6284, 604, 5670] and sum(lens) == 67242


# ----------------------------------------------------------------------------------------------
# Feature costs, tables, JSON
# ----------------------------------------------------------------------------------------------

def _measured(row, backend, ms, flops=1e12, ok=True):
    return {"workload": pb.row_workload(row), "row": row, "backend": backend, "status": "measured", "ms": ms,
            "tflops": flops / ms / 1e9, "times_ms": [ms], "max_err": 1e-3, "torch_err": 1e-3, "bound": 2e-3,
            "fa_rule_ok": ok, "nan_out": 0}


def synthetic_result(fa4mlir_ok=True):
    res = pb.new_result(device="NVIDIA H200", environment={"torch": "2.11"}, timer={"name": "triton.testing.do_bench",
                        "stat": "median", "heat_ms": 1000.0}, fa4_cute={"available": True}, flex={"available": True},
                        settings={"workloads": ["softcap_sink"], "rounds": 3, "bundle": "bundle"})
    for row in ("dense_causal_8k", "softcap"):
        shape, flops = pb.row_shape(row)
        res["rows"].append({"row": row, "workload": pb.row_workload(row), "shape": shape, "flops": flops,
                            "baseline": pb.BASELINE.get(row)})
    res["results"] = [_measured("dense_causal_8k", "fa4mlir", 1.0, ok=fa4mlir_ok), _measured("dense_causal_8k", "fa4cute", 1.25),
                      {"workload": "softcap_sink", "row": "softcap", "backend": "fa4mlir", "status": "unsupported",
                       "reason": "TypeError: flash_attn_func() got an unexpected keyword argument 'softcap'"},
                      _measured("softcap", "fa4cute", 2.5), _measured("softcap", "flex(tanh score_mod)", 4.0)]
    res["feature_costs"], res["complete"] = pb.feature_costs(res["results"]), True
    return res


def test_feature_costs_compare_each_backend_with_its_own_dense_row():
    (cost,) = synthetic_result()["feature_costs"]          # flex has no dense row here, fa4mlir no softcap
    assert cost == {"row": "softcap", "baseline": "dense_causal_8k", "backend": "fa4cute", "time_ratio": 2.0,
                    "tflops_ratio": 0.5}
    assert runner.fa4mlir_ratios(synthetic_result()["results"], "dense_causal_8k") == {"fa4cute": 1.25}
    assert runner.fa4mlir_ratios(synthetic_result()["results"], "softcap") == {}


def test_tables_show_unsupported_rows_flags_and_costs():
    text = pb.format_tables(synthetic_result(fa4mlir_ok=False))
    assert "softcap           fa4mlir" in text and "unsupported: TypeError: flash_attn_func() got an unexpected" in text
    assert next(line for line in text.splitlines() if line.startswith("dense_causal_8k   fa4mlir")).endswith("! FA rule")
    assert "softcap         / dense_causal_8k   fa4cute" in text and "time x2.000  TFLOP/s x0.500" in text
    assert "dense_causal_8k   fa4cute 1.250" in text


def test_json_round_trip_and_schema(tmp_path):
    check_json_round_trip(pb, synthetic_result, tmp_path / "prefill.json", "fa4mlir-attention-bench/1",
                          ((lambda r: r.pop("feature_costs"), "lacks \\['feature_costs'\\]"), *RESULT_BREAKAGES,
                           (lambda r: r["rows"][1].pop("flops"), "row #1 lacks \\['flops'\\]")))
    nan = synthetic_result()
    nan["results"][0]["ms"] = math.nan
    with pytest.raises(ValueError):
        pb.save_result(nan, tmp_path / "nan.json")


def test_exit_code_flags_only_fa4mlir_breaking_the_rule():
    assert runner.exit_code(synthetic_result()) == 0
    assert runner.exit_code(synthetic_result(fa4mlir_ok=False)) == 1
    other = synthetic_result()
    other["results"][1]["fa_rule_ok"] = False
    assert runner.exit_code(other) == 0


# ----------------------------------------------------------------------------------------------
# Kernel set, imports
# ----------------------------------------------------------------------------------------------

def test_prefill_set_holds_the_window_and_dense_causal_kernels_and_bench_holds_it():
    from fa4mlir.kernels.attention_sm90_config import KERNEL
    entries = kernel_sets.configs(["prefill"])
    attn = [cfg for name, cfg, *_ in entries if name == KERNEL]
    assert all(c.dtype == "bf16" and c.head_dim == 128 and c.causal for c in attn)
    assert {(c.window_left, c.chunk, c.softcap, c.sinks) for c in attn} == {
        (-1, 0, False, False), (4096, 0, False, False), (-1, 0, True, False), (-1, 0, False, True)}
    assert kernel_sets.PREFILL_WINDOW == (pb.S16K["window"], 0) == (pb.CHUNKED["window"], 0)
    # prefill_chunked and prefill_chunked_window through flash_attn_varlen_func(page_table=) run set kernels
    from fa4mlir.attention.kvcache import KVCacheOperand
    from fa4mlir.attention.varlen_paged import VarlenPagedProblem, prefill_config
    c = pb.CHUNKED
    sk = c["seqlen_cache"] + c["seqlen_q"]
    cache = KVCacheOperand(True, "bf16", c["batch"] * sk // c["page"], c["page"], sk // c["page"], c["kv_heads"], 128)
    for window in ((-1, -1), kernel_sets.PREFILL_WINDOW):
        problem = VarlenPagedProblem(c["batch"], c["seqlen_q"], sk, c["batch"] * c["seqlen_q"], c["heads"], 128,
                                     "bf16", cache, True, 128 ** -0.5, True, window)
        cfg = prefill_config(problem)
        assert cfg is not None and cfg.window_left == window[0] and cfg in attn
    bench = kernel_sets.configs(["bench"])
    assert all(any(e[0] == b[0] and e[1] == b[1] for b in bench) for e in entries)
    assert "prefill" in kernel_sets.__doc__ and "prefill" in kernel_sets.SETS


def test_prefill_modules_and_cli_import_no_mlir():
    check_cli_imports_no_mlir("fa4mlir.bench.prefill_bench, fa4mlir.bench.prefill_workloads", "prefill")


# ----------------------------------------------------------------------------------------------
# The torch side on the CPU, at small sizes: references, checks, and the FlexAttention mask_mods and
# score_mods (run by a dense fake of flex_attention) against the references
# ----------------------------------------------------------------------------------------------

def fake_flex(torch):
    def create_block_mask(mask_mod, b, h, q_len, kv_len, device=None):
        qi, ki = torch.arange(q_len)[:, None], torch.arange(kv_len)[None, :]
        return mask_mod(0, 0, qi, ki)

    def flex(q, k, v, block_mask=None, score_mod=None, enable_gqa=False):
        rep = q.shape[1] // k.shape[1]
        qf, kf, vf = q.float(), k.float().repeat_interleave(rep, 1), v.float().repeat_interleave(rep, 1)
        s = qf @ kf.transpose(-1, -2) * q.shape[-1] ** -0.5
        if score_mod is not None:
            hh = torch.arange(q.shape[1])[:, None, None]
            s = score_mod(s, 0, hh, torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :])
        s = s.masked_fill(~block_mask, float("-inf"))
        return (torch.softmax(s, -1) @ vf).to(q.dtype)
    return flex, create_block_mask


def cpu_paged(torch, k, v, page):
    """decode_bench._paged (made on "cuda") on the CPU: k, v scattered into shuffled pages."""
    b, smax, hk, d = k.shape
    per = -(-smax // page)
    table = torch.randperm(b * per).view(b, per).to(torch.int32)
    kp, vp = (torch.zeros(b * per, page, hk, d, dtype=k.dtype) for _ in range(2))
    kp[table.long()] = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, per * page - smax)).view(b, per, page, hk, d)
    vp[table.long()] = torch.nn.functional.pad(v, (0, 0, 0, 0, 0, per * page - smax)).view(b, per, page, hk, d)
    return kp, vp, table


def test_rows_on_cpu_flex_mods_match_the_references(monkeypatch):
    torch = pytest.importorskip("torch")
    from fa4mlir.bench import prefill_workloads as pw
    monkeypatch.setattr(pw, "DEV", "cpu")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(pw, "CHECK_ROWS", 8)
    monkeypatch.setattr(pw, "_paged", cpu_paged)
    monkeypatch.setattr(pw, "varlen_lens", lambda torch: [5, 1, 12])
    monkeypatch.setattr(pw, "CHUNKED", dict(pb.CHUNKED, batch=2, seqlen_q=16, seqlen_cache=24, page=8, window=10))
    monkeypatch.setattr(pw, "S16K", dict(pb.S16K, seqlen=48, window=10))
    monkeypatch.setattr(pw, "S8K", dict(pb.S8K, seqlen=32, softcap=1.5))
    flex = fake_flex(torch)
    rows = [r for fam, names in pb.families(list(pb.WORKLOADS)).items()
            for r in pw.build_family(torch, fam, names, flex=flex)]
    assert [r.name for r in rows] == ["prefill_varlen", "prefill_chunked", "prefill_chunked_window",
                                      "dense_causal_16k", "sliding_window", "dense_causal_8k", "softcap", "sink", "alibi"]
    recs = {(r.name, rec["backend"]): rec for r in rows
            for rec in runner.measure_row(r, lambda fn: 1.0, sync=lambda: None, rounds=1)}
    flexes = {k: r for k, r in recs.items() if k[1].startswith("flex")}
    assert len(flexes) == 8
    for key, rec in flexes.items():
        assert rec["status"] == "measured" and rec["fa_rule_ok"], (key, rec)
        assert 0 < rec["torch_err"] < 0.5, (key, rec)
    # fa4mlir's ALiBi score_mod passes every argument check, as the softcap row does: only the CPU device is left
    assert recs[("alibi", "fa4mlir")]["status"] == "error"
    assert recs[("alibi", "fa4mlir")]["reason"] == recs[("softcap", "fa4mlir")]["reason"]
    assert recs[("alibi", "fa4mlir")]["reason"].startswith("DeviceError"), recs[("alibi", "fa4mlir")]
    # fa4mlir runs prefill_varlen now (flash_attn_varlen_func): on these CPU tensors its device check refuses
    # them, a failure recorded as an error of the row, not an unsupported entry point
    varlen = recs[("prefill_varlen", "fa4mlir")]
    assert varlen["status"] == "error" and "DeviceError: flash_attn_varlen_func" in varlen["reason"], varlen
    compact = recs[("prefill_varlen", "fa4mlir[compact]")]   # the compact grid's A/B twin, same checks
    assert compact["status"] == "error" and compact["reason"] == varlen["reason"], compact
    persistent = recs[("prefill_varlen", "fa4mlir[persistent]")]   # the persistent kernel's twin [D-varlen-persistent]
    assert persistent["status"] == "error" and persistent["reason"] == varlen["reason"], persistent
    # prefill_chunked's varlen call with page_table= runs now (the decode kernel's varlen_q variant): its checks
    # pass on these CPU tensors and the device check refuses them, an error of the row, not unsupported
    chunked = recs[("prefill_chunked", "fa4mlir")]
    assert chunked["status"] == "error" and "DeviceError: flash_attn_varlen_func" in chunked["reason"], chunked
    # the features change the answer: a softcap / sink / ALiBi check fails the plain causal output
    plain = next(r for r in rows if r.name == "dense_causal_8k")
    out = flex[0](*(x.transpose(1, 2) for x in pw_inputs(torch, pw)), block_mask=flex[1](
        lambda b, h, qi, ki: ki <= qi, None, None, 32, 32)).transpose(1, 2)
    assert plain.check(out)["fa_rule_ok"]
    for name in ("softcap", "sink", "alibi"):
        assert not next(r for r in rows if r.name == name).check(out)["fa_rule_ok"], name


def pw_inputs(torch, pw):
    """softcap_sink's q, k, v at the test's small size (the same draws build_family makes)."""
    torch.manual_seed(0)
    s = pw.S8K
    return [torch.randn(s["batch"], s["seqlen"], s["heads"], pb.D, dtype=torch.bfloat16) * 2 for _ in range(3)]
