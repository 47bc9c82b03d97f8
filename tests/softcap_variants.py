"""The softcap kernel's opt-in variants through the interpreter (tests/test_softcap_variants.py): a
config of kernel_sets.SOFTCAP_VARIANTS' kind at a tiny shape, inputs scaled so the cap bends the
scores, checked by the FA rule against FlashAttention's softcap (fa4mlir.testing.compare_attention)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np


def run_variant(cfg, seqlen_q: int, seqlen_k: int, cap: float, q_gain: float, seed: int = 0,
                aligned: bool = False, num_sms: int | None = None, sinks: float | None = None) -> dict:
    """Interpret `cfg` (a softcap AttnConfig) on standard-normal k, v and q times `q_gain` (so
    s * scale reaches a few caps); returns compare_attention's report. `aligned`: every key is one
    vector u plus 0.1 noise and the query rows alternate +-q_gain u, so every score of the odd rows
    sits near -q_gain^2 sqrt(D) (t near -1 on every key: a row far below its cap). `num_sms`: a
    persistent kernel's grid (1: one CTA runs every tile, through both Q stages). `sinks`: the one
    head's sink logit (a sinks kernel)."""
    import torch

    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm90
    from fa4mlir.kernels.attention_sm90_config import grid, launch_args
    from fa4mlir.testing import compare_attention
    from tests.interpret_sm90 import Case, _bits, _problem, outputs_like
    from tests.test_interpret_sm90 import _tensor

    case = Case("variant", "attention", dtype=cfg.dtype, head_dim=cfg.head_dim, causal=cfg.causal, softcap=cap,
                seqlen_q=seqlen_q, seqlen_k=seqlen_k, sinks=sinks is not None)
    rng = np.random.default_rng(seed)
    d = cfg.head_dim
    q = q_gain * rng.standard_normal((1, seqlen_q, 1, d), np.float32)
    k = rng.standard_normal((1, seqlen_k, 1, d), np.float32)
    if aligned:
        u = rng.standard_normal(d).astype(np.float32)
        k = u + np.float32(0.1) * k
        q = q_gain * np.where((np.arange(seqlen_q) % 2 == 0)[None, :, None, None], u, -u).astype(np.float32)
    tensors = {"q": _bits(q, cfg.dtype), "k": _bits(k, cfg.dtype),
               "v": _bits(rng.standard_normal((1, seqlen_k, 1, d), np.float32), cfg.dtype), **outputs_like(case)}
    if sinks is not None:
        tensors["sinks"] = np.array([sinks], np.float32)
    problem = _problem(case)
    kernel = interpret.load(attention_fwd_sm90.build(cfg))
    kernel.launch(grid(cfg, problem, num_sms), launch_args(cfg, problem, tensors), policy="lazy", seed=seed)
    q, k, v, o = (_tensor(tensors[n], cfg.dtype) for n in ("q", "k", "v", "o"))
    sink = None if sinks is None else torch.from_numpy(tensors["sinks"])
    return compare_attention(q, k, v, o, torch.from_numpy(tensors["lse"]), d ** -0.5, cfg.causal, softcap=cap, sinks=sink)


def variant(base, **fields):
    return replace(base, **fields).validate()
