"""The attention benchmark's pure logic, without a GPU: grid, FLOPs, timing loop and checks (on
fakes), summary math, tables, JSON schema, plotting and the `python -m fa4mlir bench` front end."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from fa4mlir.bench import attention_bench as ab
from fa4mlir.bench import timers
from fa4mlir.attention import select_entry
from fa4mlir.kernels import attention_sm90_config as acfg


# ----------------------------------------------------------------------------------------------
# Grid and FLOPs
# ----------------------------------------------------------------------------------------------

def test_full_grid_is_the_fa3_paper_grid():
    points = ab.grid_points()
    assert len(points) == 3 * 6 * 2
    for p in points:
        assert p.batch * p.seqlen == 16384 and p.heads * p.head_dim == 2048
    assert {(p.head_dim, p.seqlen, p.causal) for p in points} == {
        (d, s, c) for d in (64, 128, 256) for s in (512, 1024, 2048, 4096, 8192, 16384) for c in (False, True)}
    assert (points[0].head_dim, points[0].seqlen, points[0].batch, points[0].heads) == (64, 512, 32, 32)


def test_grid_filters_and_rejects_off_grid_shapes():
    assert [p.causal for p in ab.grid_points([128], [1024], "yes")] == [True]
    assert [p.causal for p in ab.grid_points([128], [1024], "no")] == [False]
    assert len(ab.quick_points()) == 2
    with pytest.raises(ValueError, match="head_dim 96"):
        ab.grid_points([96], [1024])
    with pytest.raises(ValueError, match="seqlen 3000"):
        ab.grid_points([128], [3000])
    with pytest.raises(ValueError, match="causal"):
        ab.grid_points([128], [1024], "maybe")


def test_flops_follow_the_flash_attention_convention():
    p = ab.Point(128, 16384, False)
    assert p.flops == 4 * 1 * 16 * 16384 * 16384 * 128 == acfg.flops(1, 16, 16384, 16384, 128, False)
    assert ab.Point(128, 16384, True).flops == p.flops / 2
    # B*S and H*D are fixed, so non-causal FLOPs grow linearly with seqlen: 4 * 16384 * 2048 * S
    for s in ab.SEQLENS:
        assert ab.Point(64, s, False).flops == 4 * 16384 * 2048 * s


# ----------------------------------------------------------------------------------------------
# Variants
# ----------------------------------------------------------------------------------------------

def _artifact(key="k" * 16, **config):
    cfg = {**acfg.AttnConfig(**{k: v for k, v in config.items() if k != "cubin_backend"}).key(),
           "cubin_backend": config.get("cubin_backend", "nvjitlink")}
    return SimpleNamespace(config=cfg, key=key, cubin_sha256="0" * 64, name="attention_fwd_sm90_x",
                           arch="sm_90a", smem_bytes=123, resources={"registers": 240, "threads": 384})


def test_variant_labels_name_the_tile_and_stay_unique():
    assert ab.variant_label(acfg.AttnConfig().key()) == "bn128-s2-pp"
    # code knobs a default sets (KNOBS) are named like any field off AttnConfig's defaults
    d128 = acfg.default_config("bf16", 128, False)
    assert ab.variant_label(d128.key()) == f"bn{d128.bn}-s2-pp-rescale_before_pv=True-rescale_threshold=8.0"
    assert ab.variant_label(acfg.AttnConfig(bn=64, stages=3, pingpong=False).key()) == "bn64-s3-nopp"
    ptxas = {**acfg.AttnConfig(mma_regs=232).key(), "cubin_backend": "ptxas"}
    assert ab.variant_label(ptxas) == "bn128-s2-pp-mma_regs=232"
    assert ab.variant_label(ptxas, with_backend=True) == "bn128-s2-pp-mma_regs=232-ptxas"
    arts = [_artifact(head_dim=128), _artifact(head_dim=128, key="a" * 16), _artifact(head_dim=128, bn=64),
            _artifact(head_dim=128, cubin_backend="ptxas"), _artifact(head_dim=64),
            _artifact(head_dim=128, causal=True), _artifact(head_dim=128, dtype="f16"),
            SimpleNamespace(config={"kernel": "gemm_sm90", "dtype": "bf16"})]
    got = ab.bundle_variants(arts, "bf16", 128, False)
    assert [label for label, _ in got] == ["bn128-s2-pp-nvjitlink-kkkkkkkk", "bn128-s2-pp-nvjitlink-aaaaaaaa",
                                           "bn64-s2-pp", "bn128-s2-pp-ptxas"]
    assert [label for label, _ in ab.bundle_variants(arts, "bf16", 64, False)] == ["bn128-s2-pp"]
    info = ab.variant_info(*got[2])
    assert info["registers"] == 240 and info["config"]["bn"] == 64 and info["label"] == "bn64-s2-pp"


def test_default_variants_follow_the_api_selection():
    tiles = {**acfg.TILES[(256, False)], **acfg.KNOBS.get((256, False, False), {})}  # default_config's, D=256
    arts = [_artifact(head_dim=256, **tiles, key="p" * 16, cubin_backend="ptxas"),
            _artifact(head_dim=256, **{**tiles, "stages": tiles["stages"] + 1}),
            _artifact(head_dim=256, **tiles, key="n" * 16)]
    default = ab.variant_label(acfg.default_config("bf16", 256, False).key())
    variants = ab.bundle_variants(arts, "bf16", 256, False)
    picked = ab.default_variants(variants, "bf16", 256, False,
                                 select_entry=lambda entries, *a, **kw: {"key": "p" * 16}, entries=[])
    assert [label for label, _ in picked] == [f"{default}-ptxas"]
    # without the API: every variant with default_config's tiles (TILE_FIELDS)
    assert [label for label, _ in ab.default_variants(variants, "bf16", 256, False)] == \
        [f"{default}-ptxas", f"{default}-nvjitlink"]


def test_default_variants_follow_the_seqlen():
    """At short key sequences flash_attn_func runs the persistent tiles: so does the default launch."""
    short, long = (acfg.default_config("bf16", 128, False, n) for n in (1024, None))
    limit = acfg.SHORT_SEQLEN_K[(128, False)]
    arts = [_artifact(**{k: v for k, v in c.key().items() if k != "kernel"}, key=n * 16)
            for c, n in ((short, "s"), (long, "l"))]
    variants = ab.bundle_variants(arts, "bf16", 128, False)
    for seqlen, want in ((512, "s"), (limit, "s"), (limit + 1, "l"), (2 * limit, "l")):
        assert [a.key[0] for _, a in ab.default_variants(variants, "bf16", 128, False, seqlen_k=seqlen)] == [want]
        picked = ab.default_variants(variants, "bf16", 128, False, select_entry=select_entry,
                                     entries=[{"arch": "sm_90a", "key": a.key, "config": a.config} for a in arts],
                                     seqlen_k=seqlen)
        assert [a.key[0] for _, a in picked] == [want]


# ----------------------------------------------------------------------------------------------
# One point, on fakes (numpy outputs, a fake flash_attn_func, a fake timer)
# ----------------------------------------------------------------------------------------------

def fake_flash_attn_func(q, k, v, softmax_scale=None, causal=False, return_lse=False, *, bundle=None, stream=None):
    """Stands in for fa4mlir.attention.flash_attn_func: the reference answer plus a small error."""
    assert bundle == "BUNDLE" and causal
    return q + 1e-3


def _run(candidates, times, tol=5e-2):
    timer = lambda fn: times[fn()[1]]  # noqa: E731  (each fake call returns (output, name))
    point = ab.Point(128, 1024, True)
    cands = [ab.Candidate(c.name, c.make, c.variant, c.path, to_bshd=lambda o: o[0]) for c in candidates]
    return ab.run_point(point, cands, timer, sync=lambda: None,
                        diff=lambda a, b: float(np.abs(a - b).max()), tol=tol)


def _call(output, name):
    return lambda: lambda: (output, name)


def test_run_point_times_checks_and_picks_the_fastest_correct_variant():
    ref = np.zeros((8, 1024, 16, 128), np.float32)

    def broken():
        raise RuntimeError("cuDNN refused this shape")

    cands = [ab.Candidate("cudnn", broken),
             ab.Candidate("fa2", _call(ref, "fa2")),
             ab.Candidate("fa4-cute", _call(ref + 0.01, "fa4")),
             ab.Candidate("fa4mlir", _call(fake_flash_attn_func(ref, ref, ref, causal=True, bundle="BUNDLE"), "api"),
                          variant="api:bn128-s2-pp", path="flash_attn_func"),
             ab.Candidate("fa4mlir", _call(ref + 1.0, "wrong"), variant="bn64-s2-pp", path="launch"),
             ab.Candidate("fa4mlir", _call(ref + np.nan, "nan"), variant="bn128-s3-pp", path="launch")]
    rec = _run(cands, {"fa2": 2.0, "fa4": 1.0, "api": 1.5, "wrong": 0.5, "nan": 0.4})
    b, v = rec["backends"], rec["fa4mlir_variants"]
    assert list(b) == ["fa4mlir", "cudnn", "fa2", "fa4-cute"]
    assert b["cudnn"] == {"error": "RuntimeError: cuDNN refused this shape"}
    assert rec["reference"] == "fa2"                       # cuDNN failed: FA2 is the reference
    flops = ab.Point(128, 1024, True).flops
    assert b["fa2"]["tflops"] == pytest.approx(flops / 2.0 / 1e9)
    assert b["fa4-cute"]["max_abs_diff"] == pytest.approx(0.01) and b["fa4-cute"]["ok"]
    assert v["bn64-s2-pp"]["ok"] is False and v["bn64-s2-pp"]["max_abs_diff"] == pytest.approx(1.0)
    assert v["bn128-s3-pp"]["ok"] is False and v["bn128-s3-pp"]["max_abs_diff"] is None   # NaN is a failure
    assert b["fa4mlir"]["variant"] == "api:bn128-s2-pp" and b["fa4mlir"]["ms"] == 1.5  # faster ones are wrong
    assert b["fa4mlir"]["path"] == "flash_attn_func" and b["fa4mlir"]["max_abs_diff"] == pytest.approx(1e-3)
    assert len(rec["flags"]) == 2 and any("fa4mlir[bn64-s2-pp]" in f and "> 0.05" in f for f in rec["flags"])


def test_run_point_without_reference_or_fa4mlir_still_records():
    def broken():
        raise ImportError("no module named fa4mlir.attention")
    rec = _run([ab.Candidate("cudnn", broken),
                ab.Candidate("fa4mlir", broken, variant="api:x", path="flash_attn_func")], {})
    assert rec["reference"] is None and "no reference" in rec["flags"][0]
    assert rec["flags"][1] == "fa4mlir[api:x]: ImportError: no module named fa4mlir.attention"
    assert rec["backends"]["fa4mlir"] == {"error": "api:x: ImportError: no module named fa4mlir.attention"}


def test_run_point_times_candidates_in_turn_and_keeps_the_median_round():
    ref = np.zeros((2, 4), np.float32)
    order, rounds = [], {"fa2": [3.0, 1.0, 2.0], "api": [1.5, 9.0, 1.4]}

    def timer(fn):
        name = fn()[1]
        order.append(name)
        return rounds[name][sum(n == name for n in order) - 1]

    def flaky():
        calls = []

        def fn():
            calls.append(1)
            if len(calls) == 3:  # the first call, round 1, then round 2 fails
                raise RuntimeError("lost the device")
            return ref, "flaky"
        return fn
    cands = [ab.Candidate("fa2", _call(ref, "fa2"), to_bshd=lambda o: o[0]),
             ab.Candidate("fa4-cute", flaky, to_bshd=lambda o: o[0]),
             ab.Candidate("fa4mlir", _call(ref, "api"), variant="api:x", path="flash_attn_func", to_bshd=lambda o: o[0])]
    rounds["flaky"] = [1.0]
    rec = ab.run_point(ab.Point(128, 1024, True), cands, timer, sync=lambda: None,
                       diff=lambda a, b: float(np.abs(a - b).max()), rounds=3)
    assert order == ["fa2", "flaky", "api", "fa2", "api", "fa2", "api"]  # flaky failed in round 2: dropped
    assert rec["backends"]["fa2"]["ms"] == 2.0 and rec["backends"]["fa2"]["ms_rounds"] == [3.0, 1.0, 2.0]
    assert rec["backends"]["fa4mlir"]["ms"] == 1.5 and rec["backends"]["fa4mlir"]["ok"]
    assert rec["backends"]["fa4-cute"] == {"error": "RuntimeError: lost the device"}


def test_best_variant_falls_back_to_the_fastest_measured_when_none_is_correct():
    best = ab.best_variant({"a": {"ms": 2.0, "ok": False}, "b": {"ms": 1.0, "ok": False}, "c": {"error": "x"}})
    assert best == {"ms": 1.0, "ok": False, "variant": "b"}
    assert ab.best_variant({"a": {"ms": 2.0}, "b": {"ms": 3.0}})["variant"] == "a"   # nothing to check against


# ----------------------------------------------------------------------------------------------
# Summary math, tables, JSON
# ----------------------------------------------------------------------------------------------

def _point(d, s, c, mine, cudnn, fa4=None, ok=True):
    p = ab.Point(d, s, c)
    backends = {"fa4mlir": {"ms": 1.0, "tflops": mine, "variant": "api:bn128-s2-pp", "max_abs_diff": 2e-3, "ok": ok},
                "cudnn": {"ms": 1.0, "tflops": cudnn}, "fa2": {"error": "RuntimeError: nope"}}
    if fa4 is not None:
        backends["fa4-cute"] = {"ms": 1.0, "tflops": fa4}
    return {**p.to_json(), "backends": backends, "fa4mlir_variants": {"api:bn128-s2-pp": backends["fa4mlir"]},
            "reference": "cudnn", "flags": [] if ok else ["fa4mlir[api:bn128-s2-pp]: max |o - o_cudnn| = 0.1 > 0.05"]}


def synthetic_result():
    points = [_point(128, 512, False, 100.0, 400.0, 200.0),     # seqlen 512: left out of the summary
              _point(128, 1024, False, 500.0, 500.0, 400.0),
              _point(128, 4096, False, 400.0, 800.0),
              _point(128, 4096, True, 300.0, 600.0, 600.0, ok=False)]
    res = ab.new_result(device="NVIDIA H200", dtype="bf16", timer={"name": "triton.testing.do_bench"},
                        environment={"torch": "2.11"}, fa4_cute={"available": True})
    res["points"] = points
    res["summary"], res["complete"] = ab.summarize(points), True
    return res


def test_geomean():
    assert ab.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert ab.geomean([0.5]) == 0.5
    with pytest.raises(ValueError):
        ab.geomean([])
    with pytest.raises(ValueError):
        ab.geomean([1.0, 0.0])


def test_summary_math():
    s = synthetic_result()["summary"]
    non_causal, causal = s["groups"]
    assert (non_causal["head_dim"], non_causal["causal"], causal["causal"]) == (128, False, True)
    vs = non_causal["vs_cudnn"]                            # ratios 1.0 (S=1024) and 0.5 (S=4096)
    assert vs["geomean"] == pytest.approx(math.sqrt(0.5)) and vs["min"] == 0.5 and vs["n"] == 2
    assert vs["min_at"] == {"head_dim": 128, "seqlen": 4096, "causal": False}
    assert non_causal["vs_fa4-cute"] == {"geomean": 1.25, "min": 1.25, "n": 1,
                                         "min_at": {"head_dim": 128, "seqlen": 1024, "causal": False}}
    assert non_causal["vs_fa2"] is None                    # FA2 failed everywhere
    overall = s["overall"]["vs_cudnn"]                     # 1.0, 0.5, 0.5
    assert overall["geomean"] == pytest.approx(0.25 ** (1 / 3)) and overall["n"] == 3
    assert s["overall"]["vs_fa4-cute"]["geomean"] == pytest.approx(math.sqrt(1.25 * 0.5))
    assert (s["fa4mlir_measured"], s["fa4mlir_checked"], s["fa4mlir_ok"], s["points"]) == (4, 4, 3, 4)
    assert s["fa4mlir_variants_flagged"] == 1 and ab.exit_code(s) == 1
    assert len(s["flags"]) == 1 and s["flags"][0].startswith("D=128 S=4096 causal=True")
    assert ab.summarize(synthetic_result()["points"], min_seqlen=512)["overall"]["vs_cudnn"]["n"] == 4


def test_exit_code_needs_every_point_measured_and_correct():
    good = [_point(128, 1024, False, 500.0, 500.0), _point(128, 2048, False, 500.0, 500.0)]
    assert ab.exit_code(ab.summarize(good)) == 0
    failed_variant = [*good[:1], {**good[1], "fa4mlir_variants": {"api:x": {"error": "LookupError: no kernel"},
                                                                    **good[1]["fa4mlir_variants"]}}]
    assert ab.exit_code(ab.summarize(failed_variant)) == 1
    unmeasured = [good[0], {**good[1], "backends": {"fa4mlir": {"error": "x"}}, "fa4mlir_variants": {}}]
    assert ab.exit_code(ab.summarize(unmeasured)) == 1


def test_tables_show_every_point_and_the_summary():
    text = ab.format_tables(synthetic_result())
    assert "head_dim 128, non-causal" in text and "head_dim 128, causal" in text
    row = next(line for line in text.splitlines() if line.startswith("  4096") and "600.0" in line)
    assert "300.0" in row and "0.500" in row and row.endswith("!")
    assert "vs cuDNN 0.707, min 0.500 (D=128 S=4096; 2 pts)" in text
    assert "3/4 checked within 0.05" in text


def test_json_round_trip(tmp_path):
    res = synthetic_result()
    path = tmp_path / "attention.json"
    ab.save_result(res, path)
    assert ab.load_result(path) == res
    assert json.loads(path.read_text())["schema"] == ab.SCHEMA
    for key in ab.REQUIRED_KEYS:
        assert key in res
    with pytest.raises(ValueError, match="schema"):
        ab.validate_result({"schema": "something-else"})
    bad = synthetic_result()
    bad["points"][0]["batch"] = 3
    with pytest.raises(ValueError, match="off the grid"):
        ab.validate_result(bad)
    del bad["points"][0]["reference"]
    with pytest.raises(ValueError, match="reference"):
        ab.validate_result(bad)


def test_json_never_holds_nan(tmp_path):
    res = synthetic_result()
    res["points"][0]["backends"]["fa4mlir"]["max_abs_diff"] = float("nan")
    with pytest.raises(ValueError):
        ab.save_result(res, tmp_path / "x.json")


def test_timer_fallback_is_described():
    _, desc = ab.make_timer(10, 50, use_triton=False)
    assert desc["name"] == "cuda-events" and desc["stat"] == "median" and desc["rep_ms"] == 50
    assert desc["heat_ms"] == 0.0
    assert ab.make_timer(10, 50, use_triton=False, heat_ms=750.0)[1]["heat_ms"] == 750.0


def test_heat_calls_back_to_back_until_the_time_is_up():
    now, events = [0.0], []

    def fn():
        events.append("call")
        now[0] += 0.010                      # each call takes 10 ms of (fake) wall time

    def sync():
        events.append("sync")
    assert timers.heat(fn, 95.0, sync, clock=lambda: now[0], batch=4) == 12   # 3 batches: 40, 80, 120 ms
    assert events == (["call"] * 4 + ["sync"]) * 3
    events.clear()
    assert timers.heat(fn, 0.0, sync, clock=lambda: now[0]) == 0 and events == []


def test_resume_keeps_points_only_when_measured_the_same_way():
    old = synthetic_result()
    new = ab.new_result(device="NVIDIA H200", dtype="bf16", timer={"name": "triton.testing.do_bench"},
                        environment={"torch": "2.11"}, fa4_cute={"available": True, "error": "unused"})
    assert ab.resumable_points(old, new) == old["points"]
    for key, value in (("timer", {"name": "triton.testing.do_bench", "heat_ms": 0.0}), ("dtype", "f16"),
                       ("device", "NVIDIA H100 80GB HBM3"), ("environment", {"torch": "2.12"})):
        with pytest.raises(ValueError, match=f"cannot resume.*{key}: "):
            ab.resumable_points(old, {**new, key: value})
    with pytest.raises(ValueError, match="fa4_cute: .*available.: True.* there, .*available.: False"):
        ab.resumable_points(old, {**new, "fa4_cute": {"available": False}})
    keys = [ab.point_key(p) for p in old["points"]]
    assert sorted(keys) == [(128, False, 512), (128, False, 1024), (128, False, 4096), (128, True, 4096)]


def test_plot_on_synthetic_json(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install matplotlib, or the 'bench' extra)")
    from fa4mlir.bench import plot_attention
    res = synthetic_result()
    res["points"].append(_point(64, 2048, True, 250.0, 300.0))
    path, png = tmp_path / "a.json", tmp_path / "a.png"
    ab.save_result(res, path)
    assert plot_attention.main([str(path), str(png), "--variants"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_attention.series(res["points"], 128, False, "fa4-cute") == ([512, 1024], [200.0, 400.0])


# ----------------------------------------------------------------------------------------------
# `python -m fa4mlir bench [attention|gemm]`
# ----------------------------------------------------------------------------------------------

def test_cli_dispatches_attention_by_default_and_gemm_on_request(monkeypatch):
    from fa4mlir.bench import gemm_bench
    from fa4mlir import __main__ as cli
    seen = {}
    monkeypatch.setattr(ab, "run", lambda args: seen.setdefault("attention", args) and 0)
    monkeypatch.setattr(gemm_bench, "main", lambda bundle, out: seen.setdefault("gemm", (bundle, out)) and 0)
    cli.main(["bench", "--bundle", "b", "--quick", "--head-dims", "64,128", "--causal", "yes", "--variants", "all"])
    a = seen["attention"]
    assert (a.what, a.bundle, a.out, a.quick, a.head_dims, a.causal, a.variants, a.dtype) == \
        ("attention", "b", "attention-bench.json", True, [64, 128], "yes", "all", "bf16")
    cli.main(["bench", "gemm", "--bundle", "b"])
    assert seen["gemm"] == ("b", "gemm-bench.json")
    with pytest.raises(SystemExit):
        cli.main(["bench", "softmax"])


def test_config_spec_replaces_fields_of_the_cases_default():
    spec = acfg.config_from_spec
    assert spec("head_dim=64,causal=True") == acfg.default_config("bf16", 64, True)
    assert spec("head_dim=64,bm=128,persistent=True,dtype=f16") == \
        replace(acfg.default_config("f16", 64, False), bm=128, persistent=True)
    assert spec("rescale_threshold=8").rescale_threshold == 8.0
    assert spec("") == acfg.default_config("bf16", 128, False)
    with pytest.raises(ValueError, match="key=value"):
        spec("head_dim")
    with pytest.raises(ValueError, match="bn must be"):
        spec("bn=72")


@pytest.mark.skipif(__import__("fa4mlir.lowering", fromlist=["find_ptxas"]).find_ptxas() is None,
                    reason="needs ptxas")
def test_ptx_bundle_keys_each_variant_under_the_kernels_contract(tmp_path, monkeypatch):
    from bench import ptx_bundle
    from fa4mlir import lowering
    from fa4mlir.lowering import CompileOptions
    from fa4mlir.kernels import attention_fwd_sm90
    from fa4mlir.runtime import Bundle
    monkeypatch.setenv("FA4MLIR_CACHE", "0")
    monkeypatch.setenv("FA4MLIR_DUMP_DIR", str(tmp_path / "dump"))
    cfg = acfg.config_from_spec("head_dim=64,bm=192")   # what ptx_bundle --config builds below
    ref = lowering.lower(attention_fwd_sm90.build(cfg), CompileOptions(cubin_backend="ptxas"))
    (ptx,) = (tmp_path / "dump").glob("*/05-ptx.ptx")
    edited = tmp_path / "edited.ptx"   # an edit ptxas keeps: a fence before the kernel's last return
    text = ptx.read_text()
    end = text.rindex("\tret;")
    edited.write_text(text[:end] + "\tmembar.cta;\n" + text[end:])
    monkeypatch.delenv("FA4MLIR_DUMP_DIR")
    assert ptx_bundle.main(["--out", str(tmp_path / "b"), "--config", "head_dim=64,bm=192",
                            f"base={ptx}", f"edited={edited}"]) == 0
    arts = Bundle.open(tmp_path / "b").artifacts()
    assert [a.key for a in arts] == ["base", "edited"]
    assert {a.name for a in arts} == {ref.name}
    assert all(a.params == ref.params and a.block == ref.block and a.smem_bytes == ref.smem_bytes for a in arts)
    assert arts[0].cubin == ref.cubin          # the unedited PTX gives the pipeline's cubin
    assert arts[1].cubin != ref.cubin
