"""Deviceless: the swap-AB MLA decode over a ring of chunk stages a warpgroup (attention_mla_decode_sm90_swapab_chunks:
MLADecodeConfig.swap_ab_ring; FA4MLIR_MLA_DECODE_VARIANT=swapab_ring, DEFAULT_RULE's swap AB over bf16 pages of 64).

* its kernels (the mla set's every N, split and unsplit, of which this file compiles six) compile with no
  spills, wgmma not serialised, setmaxnreg honoured and within the launch's register pool, through
  fa4-verify-pipelines, within the SMEM plan; SASS: the KV loop's 68 wgmmas, P V retired m tile by m tile
  (wgmma.wait_group 7 .. 0);
* the interpreter runs it by the FA rule (testing_mla.check_mla) at 16 heads, seqlen_q 1 (N 16) and 2
  causal (N 32), split and unsplit, lengths not multiples of 64 (9, 63, 130, 150), length 0, odd tile counts
  (warpgroup 1's phantom tile), padded tiles (N 24), and enough tiles that the ring wraps several times;
  seeded bugs (a chunk's wgmmas reading the wrong chunk, the producer filling a chunk with another's columns)
  fail the rule, a miswired release fails the verifier;
* the host runs it where swap AB is built over 64-row boxes, and refuses it with typed errors elsewhere.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from fa4mlir import kernel_sets
from fa4mlir.attention import errors as E
from fa4mlir.attention import mla
from fa4mlir.kernels import attention_mla_decode_sm90_config as mc
from fa4mlir.kernels.common.fields import ConfigError
from fa4mlir.sass import disassemble, find_nvdisasm, wgmma_loops
from tests._mla_helpers import lower_clean
from tests.test_mla_decode_swapab import _args, _run

RING = {"swap_ab_ring": True}
RING_ENTRIES = [e for e in kernel_sets.mla() if getattr(e[1], "swap_ab_ring", False)]
# compiled here: N 16 and 32 (bench mla's), N 8 unsplit and N 24 split (test_mla_decode_swapab compiles them all)
COMPILED = [e for e in RING_ENTRIES if e[1].swap_ab in (16, 32) or (e[1].swap_ab, e[1].unsplit) in ((8, True), (24, False))]


def test_the_sets_hold_the_kernels():
    assert {c for _, c in RING_ENTRIES} == {replace(mc.default_config("bf16", page), unsplit=u, swap_ab=n, **RING)
                                            for page in (64,) for n in mc.SWAP_AB_NS for u in (False, True)}
    assert set(RING_ENTRIES) <= set(kernel_sets.gpu_tests())
    assert len(COMPILED) == 6


@pytest.mark.parametrize("entry", COMPILED, ids=lambda e: e[1].name())
def test_compiles_clean(entry):
    """0 spills, setmaxnreg within the pool (fa4-verify-pipelines runs first in the lowering); SMEM as planned:
    11 (N 32) or 12 (N 16; 13 at N 8) chunk stages a warpgroup."""
    from fa4mlir.kernels.attention_mla_sparse_sm90_config import register_pool_fits
    name, cfg = entry
    assert register_pool_fits(cfg.threads, mc.MMA_REGS, mc.LOAD_REGS, mc.CONSUMERS)[0]
    art = lower_clean(name, cfg)
    assert cfg.smem_bytes() == art.smem_bytes <= mc.SMEM_LIMIT
    assert cfg.swap_ab_ring_stages() == {8: 13, 16: 12, 24: 11, 32: 11}[cfg.swap_ab]
    assert art.block == (384, 1, 1) and [(p.name, p.kind) for p in art.params] == list(cfg.params)
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm not found: the SASS checks need it")
    # the KV loop (the shortest wgmma loop): S^T's 36 and P V's 32 wgmmas, S^T retired (gsb0 0) and P V's
    # eight m tiles retired one group at a time (gsb0 7 .. 0), each followed by its chunk's release
    loop = wgmma_loops(disassemble(art.cubin))[0]
    assert sum(o.startswith("HGMMA") for o, _ in loop) == 36 + 32
    waits = Counter(rest for o, rest in loop if o.startswith("WARPGROUP.DEPBAR"))
    assert waits == {**{f"gsb0, 0x{k}": 1 for k in range(1, 8)}, "gsb0, 0x0": 2}, waits


def test_config_rules():
    base = replace(mc.default_config("bf16", 64), swap_ab=32)
    assert "swap_ab_ring" not in base.key() and "ring" not in base.name()
    ring = replace(base, swap_ab_ring=True)
    assert ring.key()["swap_ab_ring"] is True
    assert ring.name().endswith("_swapab32_ring") and mc.variant_config(mc.default_config("bf16", 64), "swapab_ring",
                                                                         2, 16) == ring
    with pytest.raises(ConfigError, match="swap_ab_ring"):
        replace(mc.default_config("bf16", 64), swap_ab_ring=True).validate()
    assert "swapab_ring" in mc.DECODE_VARIANTS and mla.VARIANTS == mc.DECODE_VARIANTS
    assert mc.DEFAULT_RULE["rows <= 32"] == {"bf16": "swapab_ring", "f16": "swapab", "fp8": "m64"}   # the rule


def test_host_selection_and_refusals(monkeypatch):
    variant = "swapab_ring"
    monkeypatch.setenv(mla.VARIANT_ENV, variant)
    for sq, h, n in ((1, 16, 16), (2, 16, 32), (1, 5, 8)):
        for splits in (1, 3):
            problem = mla.check_mla_inputs(*_args(sq, h, splits))
            cfg, combine = mla.configs_for(problem)
            assert problem.variant == variant and cfg.swap_ab == n
            assert cfg.swap_ab_ring
            assert cfg.unsplit == (splits == 1) and (combine is None) == (splits == 1)
    with pytest.raises(E.UnsupportedFeatureError, match=variant):
        mla.check_mla_inputs(*_args(1, 64))
    with pytest.raises(E.UnsupportedFeatureError, match="16-bit"):
        mla.check_variant(variant, 1, 16, True)
    monkeypatch.delenv(mla.VARIANT_ENV)
    cfg = mla.configs_for(mla.check_mla_inputs(*_args(2, 16)))[0]
    assert cfg.swap_ab == 32 and cfg.swap_ab_ring    # the rule's over bf16: the ring


@pytest.mark.parametrize("lens,seqlen_q,heads,page,splits,causal,dtype", [
    ((150, 0), 2, 16, 64, 1, True, "bf16"),     # N 32 unsplit: 3 tiles (warpgroup 1's phantom), length 0
    ((63, 130), 1, 16, 64, 1, False, "bf16"),   # N 16 unsplit, one and three tiles
    ((150, 64), 2, 16, 64, 2, True, "bf16"),    # split kernel + combine
    ((9, 150), 1, 16, 64, 2, True, "f16"),      # f16, split
    ((130, 9), 2, 10, 64, 2, True, "bf16"),     # N 24 (padded columns), split
    ((700, 321), 2, 16, 64, 1, True, "bf16"),   # 11 and 6 tiles: the ring of 11 chunk stages wraps often
])
def test_through_the_interpreter(lens, seqlen_q, heads, page, splits, causal, dtype):
    errs = _run(lens, seqlen_q, heads, page, splits, causal, dtype, cfg_change=RING)
    assert errs["out"] > 0


def test_ring_needs_64_row_boxes(monkeypatch):
    """Over 16-row boxes the ring's producer spilled (24-80 B, every N): the config refuses it, a named
    swapab_ring is a typed error before launch, and the rule runs the one-ring swap AB there."""
    cfg = replace(mc.default_config("bf16", 16), swap_ab=16, **RING)
    with pytest.raises(ConfigError, match="64-row boxes"):
        cfg.validate()
    assert mc.default_variant(1, 16, False, "bf16", 16) == "swapab" and mc.default_variant(1, 16, False, "bf16", 128) \
        == "swapab_ring" and mc.default_variant(1, 16, False, "f16", 64) == "swapab"
    monkeypatch.setenv(mla.VARIANT_ENV, "swapab_ring")
    with pytest.raises(E.UnsupportedFeatureError, match="multiples of 64"):
        mla.check_variant("swapab_ring", 1, 16, False, "bf16", 16)


class _SeededFa4:
    """fa4's builders, one chunk miswired (a seeded bug): "s_chunk": S^T's second chunk's wgmmas read the first's
    columns (rope first: chunk 0 the rope's) (A descriptors of the S^T wgmma k0 .. 3 for k4 .. 7); "fill_chunk": the producer's
    fourth load of a tile (chunk 2: LOAD_ORDER) fetches the third's columns (chunk 1's coordinates)."""

    def __init__(self, fa4, bug: str):
        self._fa4, self._bug, self._s, self._fills, self._saved = fa4, bug, 0, 0, {}

    def __getattr__(self, name):
        fn = getattr(self._fa4, name)
        if name == "mma" and self._bug == "s_chunk":
            return self._mma
        if name == "tma_load" and self._bug == "fill_chunk":
            return self._tma_load
        return fn

    def _mma(self, a_d, *args, **kw):
        if "a_major" not in kw:                 # S^T's 36 wgmmas (P V's read V^T MN-major)
            k = self._s % 36
            self._s += 1
            self._saved[k] = a_d
            if 4 <= k < 8:
                a_d = self._saved[k - 4]
        return self._fa4.mma(a_d, *args, **kw)

    def _tma_load(self, desc, dst, bar, coords, **kw):
        k = self._fills % 9                     # page 64: one box a chunk, nine a tile, in LOAD_ORDER
        self._fills += 1
        if k == 2:
            self._saved["coords"] = coords
        if k == 3:
            coords = self._saved["coords"]
        return self._fa4.tma_load(desc, dst, bar, coords, **kw)


@pytest.mark.parametrize("bug", ["s_chunk", "fill_chunk"])
def test_seeded_bugs_fail_the_rule(monkeypatch, bug):
    """Each miswired chunk breaks the FA rule: the interpreter run sees every chunk's ring and address."""
    from fa4mlir.kernels import attention_mla_decode_sm90_swapab_chunks as ck
    monkeypatch.setattr(ck, "fa4", _SeededFa4(ck.fa4, bug))
    with pytest.raises(AssertionError):
        _run((150, 63), 2, 16, 64, 1, True, cfg_change=RING)


def test_the_verifier_sees_the_chunk_ring(monkeypatch):
    """fa4-verify-pipelines checks the chunk ring: the rope's release aimed at chunk 0 (V's releases then run one
    position past the tile) is a compile error."""
    from fa4mlir import compiler, kernels, lowering
    from fa4mlir.kernels import attention_mla_decode_sm90_swapab_chunks as ck
    cfg = RING_ENTRIES[0][1]
    monkeypatch.setattr(ck, "ROPE", 0)
    with pytest.raises(lowering.CompileError, match="fa4-verify-pipelines: pipeline .kv0"):
        lowering.lower(kernels.module(mc.KERNEL).build(cfg), compiler.resolve_options(mc.KERNEL, debug=False))
