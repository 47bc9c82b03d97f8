"""bench/sanitize.py's children without a GPU, on CPU tensors (when torch is installed): the attention,
GEMM and watchdog child with fake kernels that compute attention (or not); the decode children with
flash_attn_with_kvcache replaced by the reference (or a broken one); the varlen and MLA children with
their entry points replaced by fakes; the real plans and checks throughout."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench import sanitize as san
from bench import sanitize_matrix as smx
from bench import sanitize_decode as sdec
from bench import sanitize_mla as smla
from bench import sanitize_varlen as svar
from fa4mlir.artifacts import write_bundle
from fa4mlir.kernels import attention_sm90_config as acfg
from tests._sanitize_helpers import child_report, fake_bundle, under_sanitizer, verdict


# ----------------------------------------------------------------------------------------------
# The child, on CPU tensors: the attention, GEMM and watchdog child (fakes: tests/_sanitize_helpers.py)
# ----------------------------------------------------------------------------------------------

class FakeKernel:
    """Stands in for a loaded kernel: a launch computes attention into o and lse (float32 math), or
    leaves them as they are (`broken`), or fails like a trapped launch (`trap`)."""

    def __init__(self, artifact, broken=False, trap=False, ignore_mods=False):
        self.artifact, self.broken, self.trap, self.ignore_mods, self.grids = artifact, broken, trap, ignore_mods, []

    def launch(self, grid, args):
        import torch

        from fa4mlir.testing import attention_math
        self.grids.append(grid)
        if self.trap:
            raise RuntimeError("CUDA error: an illegal instruction was encountered")
        if isinstance(args, dict) and not self.broken:
            cfg = acfg.AttnConfig.from_key(self.artifact.config)
            scale, mods = args["scale_log2"] / acfg.LOG2E, {}
            if cfg.softcap:   # launch_args: scale_log2 = cap * log2(e), softcap_scale = softmax_scale / cap
                mods["softcap"] = scale
                scale = args["softcap_scale"] * scale
            if self.ignore_mods:
                mods = {}
            else:
                mods.update(san.mask_mods(cfg), **({"sinks": args["sinks"]} if cfg.sinks else {}))
            out, lse = attention_math(args["q"], args["k"], args["v"], scale, cfg.causal, torch.float32, **mods)
            args["o"].copy_(out)
            args["lse"].copy_(lse)


@pytest.fixture
def cpu_child(tmp_path, monkeypatch):
    """The child's GPU pieces replaced by CPU ones: (bundle, the fake kernels loaded, flash_attn_func's
    calls, the options of the next fake kernel)."""
    torch = pytest.importorskip("torch")
    from fa4mlir import attention, runtime, testing

    def inputs(b, sq, sk, h, hk, d, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        shapes = ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d))
        return tuple(torch.randn(s, generator=g).to(testing.torch_dtype(dtype)) for s in shapes)

    loaded, api_calls, options = [], [], {}

    def load(artifact):
        loaded.append(FakeKernel(artifact, **options))
        return loaded[-1]

    def api(q, k, v, scale, causal, return_lse, out, lse, bundle, **mods):
        api_calls.append(tuple(q.shape) + ((mods,) if mods else ()))
        ref_out, ref_lse = testing.attention_math(q, k, v, scale, causal, torch.float32, **mods)
        out.copy_(ref_out)
        lse.copy_(ref_lse)
        return out, lse

    monkeypatch.setattr(testing, "attention_inputs", inputs)
    monkeypatch.setattr(runtime, "load", load)
    monkeypatch.setattr(attention, "flash_attn_func", api)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(san, "DEVICE", "cpu")
    monkeypatch.setattr(san, "start_cuda", lambda: {"device": "cpu", "torch": torch.__version__})
    bundle = fake_bundle(tmp_path / "bundle", san.CASES)
    return bundle, loaded, api_calls, options


@pytest.mark.parametrize("name", ["attn-d128-causal", "attn-d64", "tiles-d64-128x128-nopp-pers", "attn-d192-v128-causal"])
def test_child_checks_every_attention_launch(cpu_child, capsys, name):
    bundle, loaded, api_calls, _ = cpu_child
    code, rep = child_report(capsys, name, bundle)
    case = san.CASES_BY_NAME[name]
    api = san.api_shape(acfg.AttnConfig.from_key(case.match[0]))
    assert code == 0 and rep.end["ok"] and rep.end["checks"] == len(case.shapes) + (api is not None)
    assert [r["via"] for r in rep.results] == ["flash_attn_func"] * (api is not None) + ["runtime"] * len(case.shapes)
    assert all(r["ok"] and r["nan_out"] == 0 and r["masked_ok"] for r in rep.results), rep.results
    assert api_calls == ([(api[0], api[1], api[3], case.match[0]["head_dim"])] if api else [])
    if case.match[0]["persistent"]:
        assert {g[0] for g in loaded[0].grids} == {san.PERSISTENT_CTAS}
    assert verdict(under_sanitizer(rep)) == ("clean", f"{rep.end['checks']} checks passed")


MOD_CASES = ["mask-window-d64", "mask-chunk-window-d128-causal", "mask-chunk-d128-f16", "softcap-sinks-d128-causal",
             "sinks-window-d128-causal"]


@pytest.mark.parametrize("name", MOD_CASES)
def test_child_runs_masks_softcap_and_sinks(cpu_child, capsys, name):
    """A mask or score-modifier case runs flash_attn_func with its window_size, attention_chunk,
    softcap and sinks where it picks the case's kernel, the kernel directly on every shape, and
    checks each against the reference with them; a kernel that ignores them is caught."""
    bundle, loaded, api_calls, kernel = cpu_child
    case = san.CASES_BY_NAME[name]
    cfg = acfg.AttnConfig.from_key(case.match[0])
    code, rep = child_report(capsys, name, bundle)
    assert code == 0 and rep.end["ok"] and all(r["ok"] and r["masked_ok"] for r in rep.results), rep.results
    api = san.api_shape(cfg)
    assert api is not None and [r["via"] for r in rep.results] == ["flash_attn_func"] + ["runtime"] * len(case.shapes)
    mods = api_calls[0][-1]
    assert mods.get("window_size", (-1, -1)) == (cfg.window_left, cfg.window_right)
    assert mods.get("attention_chunk", 0) == cfg.chunk and ("softcap" in mods) == cfg.softcap
    assert ("sinks" in mods) == cfg.sinks
    kernel["ignore_mods"] = True
    code, rep = child_report(capsys, name, bundle)
    assert code == 1 and not all(r["ok"] for r in rep.results if r["via"] == "runtime")


def test_child_reports_a_kernel_that_writes_nothing(cpu_child, capsys):
    bundle, _, _, kernel = cpu_child
    kernel["broken"] = True
    code, rep = child_report(capsys, "tiles-d256-128x80-nopp", bundle)
    assert code == 1 and rep.end["ok"] is False
    assert all(r["nan_out"] > 0 and not r["ok"] for r in rep.results)   # the NaN poison is still there
    assert verdict(under_sanitizer(rep), 1)[0] == "wrong"


def test_child_watchdog_and_gemm(cpu_child, capsys, monkeypatch):
    bundle, loaded, _, kernel = cpu_child
    kernel["trap"] = True
    code, rep = child_report(capsys, "watchdog", bundle)
    assert code == 0 and rep.results[0]["trapped"].startswith("RuntimeError") and loaded[-1].grids == [1]
    kernel["trap"] = False
    code, rep = child_report(capsys, "watchdog", bundle)
    assert code == 1 and rep.results[0]["trapped"] is None
    from fa4mlir import testing
    seen = []

    def check_gemm(kern, m, n, k, seed):
        seen.append((kern.artifact.config["dtype"], kern.artifact.config["cubin_backend"], m, n, k))
        return {"ok": True, "max_err": 0.0, "bound": 1e-5, "nan_or_unwritten": 0}
    monkeypatch.setattr(testing, "check_gemm", check_gemm)
    code, rep = child_report(capsys, "gemm", bundle)
    assert code == 0 and len(rep.results) == 2 * len(smx.GEMM_SHAPES)
    assert seen == [(dt, "nvjitlink", *s) for dt in ("bf16", "f16") for s in smx.GEMM_SHAPES]


def test_child_failure_before_any_check_is_an_error(cpu_child, capsys, tmp_path):
    empty = write_bundle(tmp_path / "empty", [])
    code, rep = child_report(capsys, "gemm", empty)
    assert code == 3 and rep.end["ok"] is False and "LookupError" in rep.end["error"]


# ----------------------------------------------------------------------------------------------
# The decode children on CPU tensors: flash_attn_with_kvcache replaced by the reference (or a
# broken one), the real plan (which kernel the call runs) and the real checks
# ----------------------------------------------------------------------------------------------

DECODE_CASES = [c.name for c in san.CASES if c.kernel in sdec.DECODE_KERNELS and not c.child]


@pytest.fixture
def cpu_decode(cpu_child, monkeypatch):
    """(bundle, the calls made, the fake's mode: 'right', 'nothing' (writes nothing), 'past-end'
    (reads one row past each length), 'stale' (an append that leaves the cache as it was))."""
    import torch

    from fa4mlir import attention, driver
    from fa4mlir.attention import checks
    from fa4mlir.testing_kvcache import kvcache_reference
    bundle, *_ = cpu_child
    monkeypatch.setattr(checks, "check_devices", lambda *a, **kw: None)
    monkeypatch.setattr(driver, "device_info", lambda: type("Info", (), {"num_sms": 132})())
    calls, mode = [], {"mode": "right"}

    def call(q, k_cache, v_cache, cache_seqlens, page_table, *, num_splits, out, return_lse, bundle, k=None, v=None,
             k_scale=None, v_scale=None):
        calls.append((tuple(q.shape), tuple(k_cache.shape), num_splits, k_scale is not None, k is not None))
        lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"))
        if mode["mode"] == "nothing":
            return out, lse
        fp8 = k_cache.dtype == torch.float8_e4m3fn
        lens = cache_seqlens + (mode["mode"] == "past-end")
        ref = kvcache_reference(q.float(), k_cache if fp8 else k_cache.float(), v_cache if fp8 else v_cache.float(),
                                lens, page_table, k=None if k is None else k.float(), v=None if v is None else v.float(),
                                k_scale=k_scale, v_scale=v_scale)
        if k is not None and mode["mode"] != "stale":
            k_cache.copy_(ref["k_cache"])
            v_cache.copy_(ref["v_cache"])
        out.copy_(ref["out"])
        lse.copy_(ref["lse"])
        return out, lse

    monkeypatch.setattr(attention, "flash_attn_with_kvcache", call)
    return bundle, calls, mode


@pytest.mark.parametrize("name", DECODE_CASES)
def test_decode_child_runs_the_case_kernel_and_checks_it(cpu_decode, capsys, name):
    bundle, calls, mode = cpu_decode
    case = san.CASES_BY_NAME[name]
    code, rep = child_report(capsys, name, bundle)
    shapes = sdec.shapes_for(case)
    # an FP8 case's match holds FP8_DEFAULT_RULE's kernel for each row count (split and unsplit), a contiguous 16-bit
    # cache's UNSPLIT_RULE's: a (kernel, shape) pair runs when the rule picks that kernel for the shape's packed rows;
    # every kernel runs
    def runs(m, shape):
        if case.kernel != sdec.dec.KERNEL or (not case.kv_scale and case.page_size is not None):
            return True
        sq, h, hk = shape
        pick = sdec.dec.default_config(m["dtype"], m["head_dim"], case.page_size, case.kv_scale,
                                       unsplit=m["unsplit"], rows=sq * (h // hk))
        return pick.key() == m
    pairs = [(m, shape) for m in case.match for shape in shapes if runs(m, shape)]
    assert code == 0 and rep.end["ok"] and rep.end["checks"] == len(pairs), rep.results
    assert {r["kernel"] for r in rep.results} == {sdec.dec_name(case.kernel, m) for m in case.match}, rep.results
    assert all(r["ok"] and r["masked_ok"] and r["nan_out"] == 0 for r in rep.results), rep.results
    assert [r["kernel"] for r in rep.results] == [sdec.dec_name(case.kernel, m) for m, _ in pairs]
    splits = [1 if case.kernel == sdec.dec.KERNEL and m.get("unsplit") else None if case.kernel == sdec.dec.APPEND_KERNEL
              else sdec.SPLITS for m, _ in pairs]
    assert [c[2] for c in calls] == splits
    assert all(c[3] == bool(case.kv_scale) and c[4] == (case.kernel == sdec.dec.APPEND_KERNEL) for c in calls)
    if case.page_size:   # a shuffled pool with spare pages, lengths not multiples of the page or the tile
        assert any(c[1][1] == case.page_size for c in calls)
    mode["mode"] = "nothing"
    code, rep = child_report(capsys, name, bundle)
    assert code == 1 and all(not r["ok"] and r["nan_out"] > 0 for r in rep.results)
    mode["mode"] = "past-end"   # a row past a sequence's end is NaN (or another sequence's): caught
    code, rep = child_report(capsys, name, bundle)
    assert code == 1 and not any(r["ok"] for r in rep.results)


def test_decode_append_child_checks_the_cache(cpu_decode, capsys):
    bundle, _, mode = cpu_decode
    mode["mode"] = "stale"
    code, rep = child_report(capsys, "decode-append", bundle)
    assert code == 1 and all(r["cache_ok"] is False and not r["ok"] for r in rep.results)


def test_decode_inputs_hide_nan_where_no_sequence_reads():
    torch = pytest.importorskip("torch")
    for page in (None, 1, 8, 64):
        lengths = sdec.lengths_for(page)
        assert all(n % 64 for n in lengths if n > 1) and 0 in lengths and sdec.CAPACITY % 64
        t = sdec.decode_inputs(torch, "cpu", lengths, 1, 8, 2, 64, "bf16", page, 3)
        k, table = t["k_cache"], t["page_table"]
        owned = torch.zeros(k.shape[:2], dtype=torch.bool)
        for b, n in enumerate(lengths):
            rows = torch.arange(n)
            if table is None:
                owned[b, :n] = True
            else:
                owned[table[b, rows // page].long(), rows % page] = True
        assert torch.isnan(k[~owned]).all() and not torch.isnan(k[owned]).any()
        if table is not None:
            used = table[(table >= 0) & (table < k.shape[0])]
            assert not torch.equal(used, used.sort().values)    # shuffled
            assert (table >= sdec.GARBAGE).any() and (table == -1).any()
            assert k.shape[0] > sum(-(-n // page) for n in lengths)   # pages no sequence owns


# ----------------------------------------------------------------------------------------------
# The varlen and MLA children on CPU tensors: the entry points replaced by fakes that compute the
# reference (right), write nothing, or go wrong; the real checks
# ----------------------------------------------------------------------------------------------

VARLEN_CASES = [c.name for c in san.CASES if c.child == "varlen"]
MLA_CASES = [c.name for c in san.CASES if c.child == "mla"]


@pytest.fixture
def cpu_varlen(cpu_child, monkeypatch):
    """(bundle, the calls made, the fake's mode: 'right', 'nothing' (writes nothing), 'spill' (also
    writes the rows past the last sequence), 'no-mods' (ignores window, softcap and sinks))."""
    import torch

    from fa4mlir import attention
    from fa4mlir.testing import attention_math
    from fa4mlir.testing_score_mod import scored_attention
    from fa4mlir.testing_varlen import sequences
    bundle, *_ = cpu_child
    calls, mode = [], {"mode": "right"}

    def call(q, k, v, cu_q, cu_k, max_q, max_k, *, seqused_k=None, causal, out, lse, return_lse, bundle,
             window_size=(-1, -1), attention_chunk=0, softcap=0.0, sinks=None, score_mod=None, mask_mod=None,
             aux_tensors=None):
        calls.append((tuple(q.shape), tuple(k.shape), causal, window_size, softcap, sinks is not None,
                      None if seqused_k is None else seqused_k.tolist(), max_q, max_k))
        assert return_lse and torch.isnan(out).all() and torch.isnan(lse).all()   # poisoned
        assert out.shape[-1] == v.shape[-1]
        if mode["mode"] == "nothing":
            return out, lse
        if score_mod is not None or mask_mod is not None:   # the functions' twins (testing_varlen), per sequence
            fns = _varlen_twins(score_mod, mask_mod, aux_tensors, cu_q) if mode["mode"] != "no-mods" else None
            for b, (q0, nq, k0, nk) in enumerate(sequences(cu_q, cu_k)):
                if nq:
                    o, l_ = scored_attention(q[q0:q0 + nq][None], k[k0:k0 + nk][None], v[k0:k0 + nk][None],
                                             q.shape[-1] ** -0.5, causal, *(fns(b) if fns else (None, None)),
                                             torch.float32)
                    out[q0:q0 + nq], lse[:, q0:q0 + nq] = o[0], l_[0]
            if mode["mode"] == "spill":
                out[int(cu_q[-1]):] = 0
            return out, lse
        mods = {} if mode["mode"] == "no-mods" else dict(window_size=window_size, attention_chunk=attention_chunk,
                                                          softcap=softcap, sinks=sinks)
        for q0, nq, k0, nk in sequences(cu_q, cu_k, seqused_k):
            if nq:
                o, l_ = attention_math(q[q0:q0 + nq][None], k[k0:k0 + nk][None], v[k0:k0 + nk][None],
                                       q.shape[-1] ** -0.5, causal, torch.float32, **mods)
                out[q0:q0 + nq], lse[:, q0:q0 + nq] = o[0], l_[0]
        if mode["mode"] == "spill":
            out[int(cu_q[-1]):] = 0
        return out, lse

    monkeypatch.setattr(attention, "flash_attn_varlen_func", call)
    return bundle, calls, mode


def _varlen_twins(score_mod, mask_mod, aux_tensors, cu_q):
    """testing_varlen.varlen_torch_mods of the ScoreMods a varlen call got (named by their functions)."""
    from fa4mlir.kernels.common import score_mod as sm
    from fa4mlir.testing_varlen import VARLEN_MASK_MODS, VARLEN_SCORE_MODS, varlen_torch_mods
    names = {f: n for n, f in {**sm.BUILTIN_SCORE_MODS, **VARLEN_SCORE_MODS, **sm.BUILTIN_MASK_MODS,
                               **VARLEN_MASK_MODS}.items()}
    score = names[score_mod.fn] if score_mod is not None else ""
    mask = names[mask_mod.fn] if mask_mod is not None else ""
    cap = score_mod.post_scale if score_mod is not None else 2.0
    return varlen_torch_mods(score, mask, [a.cpu().numpy() for a in aux_tensors or ()], cu_q, cap)


@pytest.mark.parametrize("name", VARLEN_CASES)
def test_varlen_child_runs_ragged_batches_and_checks_them(cpu_varlen, capsys, name):
    bundle, calls, mode = cpu_varlen
    case = san.CASES_BY_NAME[name]
    code, rep = child_report(capsys, name, bundle)
    cfgs = [acfg.AttnConfig.from_key(m) for m in case.match]
    assert code == 0 and rep.end["ok"] and rep.end["checks"] == 2 * len(case.match), rep.results
    assert all(r["ok"] and r["untouched"] and r["masked_ok"] and r["nan_out"] == 0 for r in rep.results), rep.results
    for cfg, (lens, h, hk) in zip([c for c in cfgs for _ in range(2)], [b for c in cfgs for b in svar.batches(c)]):
        assert cfg.varlen and svar.picked(cfg, {}) == cfg or cfg.window_left >= 0 or cfg.softcap or cfg.chunk
        assert {0, 1, cfg.bm + 1} <= set(lens[0]) and lens[0] != lens[1] and h > hk
    # packed rows: the sequences and SPARE more; the case's causal flag, window, softcap, sinks and seqused_k
    assert [c[0][0] for c in calls] == [sum(b[0][0]) + svar.SPARE for c in cfgs for b in svar.batches(c)]
    assert [c[2] for c in calls] == [cfg.causal for cfg in cfgs for _ in range(2)]
    assert [c[5] for c in calls] == [cfg.sinks for cfg in cfgs for _ in range(2)]
    assert [c[6] is not None for c in calls] == [cfg.sinks or cfg.softcap for cfg in cfgs for _ in range(2)]
    for mode["mode"] in ("nothing", "spill"):
        code, rep = child_report(capsys, name, bundle)
        assert code == 1 and not any(r["ok"] for r in rep.results), mode
    assert not any(r["untouched"] for r in rep.results)           # the spare rows were written
    mode["mode"] = "no-mods"
    code, rep = child_report(capsys, name, bundle)
    mods = any(c.window_left >= 0 or c.softcap or c.sinks or c.score_mod or c.mask_mod for c in cfgs)
    assert (code == 1) == mods


def test_varlen_child_stops_when_the_call_runs_another_kernel(cpu_varlen, capsys, monkeypatch):
    bundle, calls, _ = cpu_varlen
    monkeypatch.setattr(svar, "picked", lambda cfg, opts: replace(cfg, bn=cfg.bn + 16))
    code, rep = child_report(capsys, "varlen-d64", bundle)
    assert code == 3 and "would run" in rep.end["error"] and calls == []


@pytest.fixture
def cpu_mla(cpu_child, monkeypatch):
    """(bundle, the calls made, the fake's mode: 'right', 'nothing' (returns torch.empty's out and lse),
    'past-end' (reads one row past each length))."""
    import torch

    from fa4mlir.attention import mla
    from fa4mlir.testing import attention_math
    from fa4mlir.testing_mla import gather_rows
    bundle, *_ = cpu_child
    monkeypatch.setattr(mla, "device_info", lambda: type("Info", (), {"num_sms": 132})())
    calls, mode = [], {"mode": "right"}

    def call(q, kv, table, seqlens, head_dim_v, meta, num_splits, causal, bundle, is_fp8_kvcache=False):
        batch, sq, heads, _ = q.shape
        p = mla.MLAProblem(batch, sq, heads, kv.shape[0], kv.shape[1], table.shape[1], "bf16", meta.shape[0],
                           q.shape[-1] ** -0.5, causal, is_fp8_kvcache)
        if is_fp8_kvcache:
            from fa4mlir.testing_mla import dequantize_fp8_cache
            assert kv.shape[-1] == 656
            kv = dequantize_fp8_cache(kv)
        calls.append((batch, sq, heads, kv.shape[1], meta.shape[0], tuple(num_splits.tolist()), causal,
                      mla.configs_for(replace(p, variant=mla.check_variant(mla.requested_variant(), sq, heads,
                                                                           is_fp8_kvcache)))[0].swap_ab))
        out = torch.empty((batch, sq, heads, head_dim_v), dtype=q.dtype)
        lse = torch.empty((batch, heads, sq), dtype=torch.float32)
        if mode["mode"] == "nothing":
            return out, lse
        for b in range(batch):
            n = int(seqlens[b]) + (mode["mode"] == "past-end")
            rows = gather_rows(kv, table.clamp(0, kv.shape[0] - 1), n, b)[None, :, None, :]
            o, l_ = attention_math(q[b:b + 1], rows, rows[..., :head_dim_v], q.shape[-1] ** -0.5, causal,
                                   torch.float32)
            out[b], lse[b] = o[0], l_[0]
        return out, lse

    monkeypatch.setattr(mla, "flash_mla_with_kvcache", call)
    return bundle, calls, mode


@pytest.mark.parametrize("name", MLA_CASES)
def test_mla_child_runs_the_case_kernel_and_checks_it(cpu_mla, capsys, name):
    from fa4mlir.attention import mla
    bundle, calls, mode = cpu_mla
    case = san.CASES_BY_NAME[name]
    chosen, cache = mla.configs_for, mla._CALLS
    code, rep = child_report(capsys, name, bundle)
    shapes = [sh for m in case.match for sh in smla.shapes_for(m)]
    assert code == 0 and rep.end["ok"] and rep.end["checks"] == len(shapes), (rep.end, rep.results)
    assert all(r["ok"] and r["nan_out"] == 0 for r in rep.results), rep.results
    assert mla.configs_for is chosen and mla._CALLS is cache      # the variant swap is undone
    assert all(c[6] for c in calls)
    assert [(c[1], c[2]) for c in calls] == shapes and {c[3] for c in calls} == {case.page_size}
    # the kernel the call's FA4MLIR_MLA_DECODE_VARIANT picks: swap AB (by the rule) for the swap-AB case, else M64
    assert [c[7] for c in calls] == [m.get("swap_ab", 0) for m in case.match for _ in smla.shapes_for(m)]
    unsplit = [bool(m.get("unsplit")) for m in case.match for _ in smla.shapes_for(m)]
    assert [c[4] == 1 for c in calls] == unsplit                  # split calls: several splits, the combine runs
    assert all(c[4] in (1, smla.SPLITS, mla.plan_splits(c[0], c[1] * c[2], 132)) and c[5][-1] == c[0] * c[4]
               for c in calls)
    assert any(c[4] > smla.SPLITS for c in calls) and 0 in rep.results[0]["lengths"]
    for mode["mode"] in ("nothing", "past-end"):
        code, rep = child_report(capsys, name, bundle)
        assert code == 1 and not any(r["ok"] for r in rep.results), mode
    mode["mode"] = "nothing"
    code, rep = child_report(capsys, name, bundle)
    assert all(r["nan_out"] > 0 for r in rep.results)     # what flash_mla_with_kvcache's torch.empty gave was NaN


def test_mla_child_stops_when_the_call_runs_another_kernel(cpu_mla, capsys, monkeypatch):
    from fa4mlir.attention import mla
    bundle, calls, _ = cpu_mla
    chosen = mla.configs_for
    monkeypatch.setattr(mla, "configs_for", lambda p: (replace(chosen(p)[0], box_rows=8), chosen(p)[1]))
    code, rep = child_report(capsys, "mla-bf16-p64", bundle)
    assert code == 3 and "would run" in rep.end["error"] and calls == []


def test_nan_empty_poisons_floating_tensors_only():
    torch = pytest.importorskip("torch")
    empty = torch.empty
    with smla.nan_empty(torch):
        assert torch.isnan(torch.empty(3, 4)).all() and torch.empty(2, dtype=torch.int32).dtype == torch.int32
    assert torch.empty is empty
