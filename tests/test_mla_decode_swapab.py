"""Deviceless: the swap-AB MLA decode (attention_mla_decode_sm90_swapab, MLADecodeConfig.swap_ab;
FA4MLIR_MLA_DECODE_VARIANT=swapab).

* its kernels (the mla set) compile with no spills, wgmma not serialised, setmaxnreg
  honoured, within the SMEM plan its config states; the default kernels' keys and names are unchanged;
* the interpreter runs it on small problems at 16 heads, seqlen_q 1 (N 16) and 2 causal (N 32), split
  and unsplit, lengths 0, 63, 64, 150 (a phantom tile for warpgroup 1 when a split's tile count is
  odd), and padded tiles (N 8 and 24 with fewer real rows), checked by the FA rule against the
  float64 reference (testing_mla.check_mla); seeded bugs (V^T read K-major, P^T keys permuted, the
  odd count's last pair dropped) must fail the rule;
* the host picks it by DEFAULT_RULE (seqlen_q x heads <= 32 over a 16-bit cache) or when named, runs the
  M64 kernel when "m64" is named, and refuses with typed errors where swap AB cannot run.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from fa4mlir import kernel_sets
from fa4mlir.attention import errors as E
from fa4mlir.attention import mla
from fa4mlir.kernels import attention_mla_decode_sm90_config as mc
from fa4mlir.kernels.common.fields import ConfigError
from tests._mla_helpers import bits, interpret_decode, lower_clean, paged_latent
from tests._mla_helpers import info as _info

ENTRIES = [e for e in kernel_sets.mla() if e[0] == mc.KERNEL and e[1].swap_ab]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e[1].name())
def test_swapab_set_compiles_clean(entry):
    name, cfg = entry
    assert cfg.swap_ab in mc.SWAP_AB_NS
    art = lower_clean(name, cfg)
    assert cfg.smem_bytes() <= art.smem_bytes <= mc.SMEM_LIMIT, (art.smem_bytes, cfg.smem_bytes())
    assert art.block == (384, 1, 1) and [(p.name, p.kind) for p in art.params] == list(cfg.params)


def test_config_rules():
    base = mc.default_config("bf16", 64)
    assert "swap_ab" not in base.key() and "swapab" not in base.name()
    on = replace(base, swap_ab=32)
    assert on.key()["swap_ab"] == 32 and on.name().endswith("_swapab32") and on.tile_rows == 32
    assert [mc.swap_ab_rows(sq, h) for sq, h in ((1, 16), (2, 16), (1, 20), (3, 8), (1, 33), (2, 64))] == \
        [16, 32, 24, 24, 0, 0]
    for bad in (dict(swap_ab=12), dict(swap_ab=64), dict(swap_ab=16, seesaw=True)):
        with pytest.raises(ConfigError):
            replace(base, **bad).validate()
    with pytest.raises(ConfigError):
        mc.default_config("bf16", 64, fp8=True).__class__(dtype="bf16", fp8=True, swap_ab=16).validate()
    assert mc.grid(3, 2, 16, 2, on.tile_rows) == (2, 1, 3) and mc.grid(3, 2, 16, 2) == (2, 1, 3)
    assert mc.grid(3, 1, 8, 1, 8) == (1, 1, 3)


def _args(seqlen_q, heads, splits=1):
    return (_info((2, seqlen_q, heads, 576)), _info((8, 64, 1, 576)), _info((2, 4), "i32"), _info((2,), "i32"), 512,
            _info((splits, 8), "i32"), _info((3,), "i32"))


def test_host_selection_and_refusals(monkeypatch):
    """DEFAULT_RULE (unset or "default"): swap AB (over bf16 its ring of chunk stages) for seqlen_q x heads <= 32 over a 16-bit cache, the
    seesaw past that over bf16; "m64" and "swapab" name a kernel; an unknown name or swap AB where it is not built is a typed error."""
    for env in (None, "default", "swapab"):
        if env is None:
            monkeypatch.delenv(mla.VARIANT_ENV, raising=False)
        else:
            monkeypatch.setenv(mla.VARIANT_ENV, env)
        for sq, h, n in ((1, 16, 16), (2, 16, 32), (1, 5, 8), (2, 10, 24)):
            for splits in (1, 3):
                problem = mla.check_mla_inputs(*_args(sq, h, splits))
                cfg, combine = mla.configs_for(problem)
                want = "swapab" if env == "swapab" else "swapab_ring"      # the rule's over bf16: the ring
                assert problem.variant == want and cfg.swap_ab == n and cfg.unsplit == (splits == 1)
                assert cfg.swap_ab_ring == (want == "swapab_ring")
                assert (combine is None) == (splits == 1)
    with pytest.raises(E.UnsupportedFeatureError, match="seqlen_q x heads"):
        mla.check_mla_inputs(*_args(1, 64))
    monkeypatch.setenv(mla.VARIANT_ENV, "m64")
    for sq, h in ((1, 16), (2, 16), (1, 64)):
        problem = mla.check_mla_inputs(*_args(sq, h))
        assert problem.variant == "m64" and mla.configs_for(problem)[0] == mc.default_config("bf16", 64, unsplit=True)
    monkeypatch.setenv(mla.VARIANT_ENV, "nope")
    with pytest.raises(E.UnsupportedFeatureError, match="not a decode variant"):
        mla.check_mla_inputs(*_args(1, 16))
    monkeypatch.delenv(mla.VARIANT_ENV)
    for sq, h in ((1, 33), (2, 17), (2, 128)):      # more than 32 rows over bf16: the seesaw by the rule
        problem = mla.check_mla_inputs(*_args(sq, h))
        cfg = mla.configs_for(problem)[0]
        assert problem.variant == "seesaw" and cfg.swap_ab == 0 and cfg.seesaw


def test_default_rule():
    """The rule's table and function: swap AB only where it is built (never a config error)."""
    assert mc.DEFAULT_RULE == {"rows <= 32": {"bf16": "swapab_ring", "f16": "swapab", "fp8": "m64"},
                               "rows > 32": {"bf16": "seesaw", "f16": "m64", "fp8": "m64"}}
    for sq, h in ((1, 1), (1, 16), (2, 16), (1, 32), (4, 8), (1, 33), (2, 64)):
        for dtype, fp8 in (("bf16", False), ("f16", False), ("bf16", True)):
            for page in (64, 16, 128):
                v = mc.default_variant(sq, h, fp8, dtype, page)
                swap = "swapab_ring" if dtype == "bf16" and page % 64 == 0 else "swapab"
                assert v == ("m64" if fp8 else swap if sq * h <= 32 else "seesaw" if dtype == "bf16" else "m64")
                mc.rule_config(dtype, page, sq, h, fp8=fp8).validate()
    assert mla.check_variant("default", 1, 16, True) == "m64"       # FlashMLA's FP8 cache keeps M64


def test_plan_notes_name_the_pick(monkeypatch):
    from types import SimpleNamespace
    monkeypatch.setattr(mla, "kernel_for", lambda source, cfg: SimpleNamespace(cfg=cfg))
    monkeypatch.delenv(mla.VARIANT_ENV, raising=False)
    for heads, want in ((16, "swapab_ring (DEFAULT_RULE"), (64, "seesaw (DEFAULT_RULE")):
        problem = mla.check_mla_inputs(*_args(1, heads))
        plan = mla.build_plan(problem, None, (heads * 576, heads * 576, 576), 4, (heads * 512, heads * 512, 512))
        assert plan.notes and want in plan.notes[0], plan.notes
    monkeypatch.setenv(mla.VARIANT_ENV, "m64")
    plan = mla.build_plan(mla.check_mla_inputs(*_args(1, 16)), None, (16 * 576, 16 * 576, 576), 4,
                          (16 * 512, 16 * 512, 512))
    assert "m64 (named by" in plan.notes[0]
    monkeypatch.setenv(mla.VARIANT_ENV, "swapab")
    plan = mla.build_plan(mla.check_mla_inputs(*_args(1, 16)), None, (16 * 576, 16 * 576, 576), 4,
                          (16 * 512, 16 * 512, 512))
    assert "swapab (named by" in plan.notes[0] and plan.launches[0].kernel.cfg.swap_ab == 16


def test_fp8_refused():
    with pytest.raises(E.UnsupportedFeatureError, match="16-bit"):
        mla.check_variant("swapab", 1, 16, True)


def test_plan_grid(monkeypatch):
    from types import SimpleNamespace
    monkeypatch.setattr(mla, "kernel_for", lambda source, cfg: SimpleNamespace(cfg=cfg))
    monkeypatch.setenv(mla.VARIANT_ENV, "swapab")
    problem = mla.check_mla_inputs(_info((128, 1, 16, 576)), _info((8192, 64, 1, 576)), _info((128, 64), "i32"),
                                   _info((128,), "i32"), 512, _info((1, 8), "i32"), _info((129,), "i32"), causal=True)
    plan = mla.build_plan(problem, None, (16 * 576, 16 * 576, 576), 64, (16 * 512, 16 * 512, 512))
    decode = plan.launches[0]
    assert decode.kernel.cfg.swap_ab == 16 and decode.grid == (1, 1, 128) and decode.args["m_tiles"] == 1


def _run(lens, seqlen_q, heads, page, splits, causal, dtype="bf16", cfg_change=None):
    torch = pytest.importorskip("torch")
    from fa4mlir.testing_mla import check_mla
    q, kv, table, lens_a = paged_latent(torch, lens, seqlen_q, heads, page, 0)
    tdtype = torch.float16 if dtype == "f16" else torch.bfloat16
    q, kv = q.to(tdtype), kv.to(tdtype)
    problem = mla.check_mla_inputs(_info(q.shape, dtype), _info(kv.shape, dtype), _info(table.shape, "i32"),
                                   _info(lens_a.shape, "i32"), 512, _info((splits, 8), "i32"),
                                   _info((len(lens) + 1,), "i32"), causal=causal)
    cfg, combine = mla.configs_for(problem)
    cfg = replace(cfg, swap_ab=mc.swap_ab_rows(seqlen_q, heads), **(cfg_change or {}))
    out_t, lse_t = interpret_decode(torch, problem, cfg, combine, q, bits(torch, kv), table, lens_a, page)
    return check_mla(q, kv, table, lens_a, out_t, lse_t, causal=causal)


@pytest.mark.parametrize("lens,seqlen_q,splits,causal,dtype", [
    ((150, 0), 2, 1, True, "bf16"),       # N 32, unsplit: 3 tiles (warpgroup 0 two, 1 one), length 0
    ((63, 64), 1, 1, False, "bf16"),      # N 16, one tile each: warpgroup 1's phantom tile
    ((150, 64), 2, 2, True, "bf16"),      # split kernel + combine: 2 + 1 tiles, 1 + 0
    ((64, 150), 1, 2, True, "f16"),       # f16, seqlen_q 1
])
def test_swapab_through_the_interpreter(lens, seqlen_q, splits, causal, dtype):
    errs = _run(lens, seqlen_q, 16, 64, splits, causal, dtype)
    assert errs["out"] > 0


@pytest.mark.parametrize("lens,seqlen_q,heads,page,splits", [
    ((70, 1), 1, 5, 64, 1),      # N 8, 3 padded columns (zero Q rows, never stored)
    ((130, 9), 2, 10, 16, 2),    # N 24, 4 padded columns; 16-row boxes; split
])
def test_swapab_padded_tiles(lens, seqlen_q, heads, page, splits):
    """Tiles of N > seqlen_q x heads (the padded columns must not leak into stored rows)."""
    errs = _run(lens, seqlen_q, heads, page, splits, True)
    assert errs["out"] > 0


def test_bench_variant_names(monkeypatch):
    """bench mla's --mla-decode-variant names are checked before any tensor is made; the call cache
    keys on the knob."""
    torch = pytest.importorskip("torch")
    from fa4mlir.bench import mla_bench
    with pytest.raises(ValueError, match="unknown --mla-decode-variant"):
        mla_bench.mla_decode_rows(torch, variants=["nope"])
    assert mla.VARIANT_ENV in mla.CallCache.ENV


class _DropAMajor:
    """fa4's builders with fa4.mma's a_major dropped: V^T read K-major (a seeded bug)."""

    def __init__(self, fa4):
        self._fa4 = fa4

    def __getattr__(self, name):
        fn = getattr(self._fa4, name)
        if name != "mma":
            return fn
        return lambda *a, **kw: fn(*a, **{k: v for k, v in kw.items() if k != "a_major"})


@pytest.mark.parametrize("bug", ["a_major", "p_layout", "pairs"])
def test_seeded_bugs_fail_the_rule(monkeypatch, bug):
    """Each seeded bug breaks the FA rule (or the no-NaN / empty-row checks): the interpreter run sees
    the transpose bit, P^T's layout and the odd tile count's last pair (note "Rings")."""
    from fa4mlir.kernels import attention_mla_decode_sm90_swapab as sw
    if bug == "a_major":
        monkeypatch.setattr(sw, "fa4", _DropAMajor(sw.fa4))
    elif bug == "p_layout":     # keys 8 apart swapped in P^T
        original = sw.p_offset
        monkeypatch.setattr(sw, "p_offset", lambda n, key: original(n, key ^ 8))
    else:                       # floor for ceil: an odd count's last tile neither loaded nor attended
        monkeypatch.setattr(sw, "_pairs", lambda work: (work.end - work.begin) // 2)
    with pytest.raises(AssertionError):
        _run((150, 63), 2, 16, 64, 1, True, cfg_change={"swap_ab_ring": False})     # the one-ring kernel (the rule's is the ring)
