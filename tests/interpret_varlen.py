"""Ragged batches through the interpreter: the cases and the runner (tests/test_interpret_varlen.py).

Each case is a varlen kernel (attention_sm90_config_varlen.varlen_config) of the `varlen` bundle set at a
tiny ragged batch: lengths 0 and 1, a tile plus one, unequal q and k lengths, GQA, masks, softcap
and sinks; MOD_CASES with score_mod / mask_mod, HEAD_DIM_CASES MLA prefill's qk 192 / v 128, D96
and D192. Packed inputs are standard normal; out and lse are NaN-poisoned, with a few packed rows
past cu_seqlens_q[-1] that no sequence owns (they must stay NaN: no store past a sequence).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class VarlenCase:
    name: str
    head_dim: int
    seqlens_q: tuple
    seqlens_k: tuple
    causal: bool = False
    window: tuple = (-1, -1)
    chunk: int = 0
    softcap: float = 0.0
    sinks: bool = False
    heads: int = 1
    kv_heads: int = 1
    dtype: str = "bf16"
    seqused_k: tuple | None = None    # keys used per sequence (<= seqlens_k)
    spare_rows: int = 3                # packed rows past the last sequence (must stay untouched)
    head_dim_v: int = 0                # v's and out's head dim when it differs (MLA prefill: 192 / 128)
    score: str = ""                    # a score_mod by name (fa4mlir.testing_varlen.varlen_mods)
    mask_mod: str = ""                 # a mask_mod by name
    cap: float = 2.0                   # score "softcap"'s cap
    compact: bool = False              # the compact grid (AttnConfig.varlen_compact)
    persistent: int = 0                # > 0: the persistent compact kernel on this many CTAs (its num_sms)
    l2_bytes: int = 0                  # the L2 launch_args sizes sections / chunks by (0: its default)

    @property
    def dim_v(self) -> int:
        return self.head_dim_v or self.head_dim

    @property
    def mods(self):
        from fa4mlir.testing_varlen import varlen_mods
        return varlen_mods(self.score, self.mask_mod, self.cap)

    def aux(self, seed: int = 0) -> list:
        from fa4mlir.testing_varlen import varlen_aux
        return varlen_aux(self.score, self.mask_mod, self.seqlens_q, self.seqlens_k, self.heads, seed)

    def aux_spec(self) -> str:
        from fa4mlir.kernels.common.score_mod import aux_spec
        return aux_spec([("f32" if a.dtype == np.float32 else "i32", a.ndim) for a in self.aux()])

    @property
    def mask(self):
        from fa4mlir.kernels.common.mask_family import attention_mask
        return attention_mask(self.causal, self.window, self.chunk)


# D64 runs bm 192 (three warpgroups: a 193-row sequence has one row in its second tile), D128 bm 128.
CASES = [
    VarlenCase("d64-ragged", 64, (0, 1, 193, 70), (5, 1, 200, 130)),
    VarlenCase("d64-causal-gqa", 64, (1, 150, 0, 40), (1, 100, 7, 300), causal=True, heads=2, kv_heads=1),
    VarlenCase("d128-causal-window", 128, (129, 3, 60), (129, 200, 20), causal=True, window=(50, -1)),
    VarlenCase("d256-causal", 256, (65, 0, 130), (64, 3, 200), causal=True),
    # attention_chunk= (kernel_sets.VARLEN_CHUNK_CASES): chunks that do not divide the sequences, q shorter
    # than k (the diagonal's chunk per sequence), with a window
    VarlenCase("d64-causal-chunk", 64, (150, 1, 0, 40), (230, 5, 3, 40), causal=True, chunk=100),
    VarlenCase("d128-causal-window-chunk", 128, (129, 3), (200, 20), causal=True, window=(60, -1), chunk=96),
    VarlenCase("d128-softcap-sink-seqused", 128, (70, 1, 0, 130), (90, 60, 2, 140), softcap=2.0, sinks=True,
               heads=2, kv_heads=2, seqused_k=(80, 0, 2, 129)),
]
# score_mod / mask_mod (kernel_sets.VARLEN_MOD_CASES): the built-ins, and functions of batch and absolute
# positions (sequence_bias, sequence_document, packed_bias) that tell positions in the sequence from packed rows
MOD_CASES = [
    VarlenCase("d64-alibi-gqa", 64, (0, 1, 77, 130), (3, 1, 77, 200), heads=2, kv_heads=1, score="alibi"),
    VarlenCase("d128-causal-relbias", 128, (1, 0, 65, 130), (1, 5, 100, 130), causal=True, score="relative_bias"),
    VarlenCase("d64-causal-softcap-mod", 64, (33, 1, 150), (40, 1, 150), causal=True, score="softcap", cap=3.0),
    VarlenCase("d64-docmask", 64, (90, 1, 150), (90, 1, 150), mask_mod="document_mask"),
    VarlenCase("d128-causal-seqbias", 128, (70, 0, 131), (90, 4, 131), causal=True, score="sequence_bias",
               heads=2, kv_heads=2),
    VarlenCase("d128-seqdoc", 128, (1, 130, 0, 40), (1, 130, 6, 64), mask_mod="sequence_document", heads=2,
               kv_heads=1),
    VarlenCase("d64-causal-alibi-docmask", 64, (90, 1, 140), (90, 1, 150), causal=True, score="alibi",
               mask_mod="document_mask", heads=2, kv_heads=1),
    VarlenCase("d128-packed-bias", 128, (5, 66, 1), (9, 66, 130), score="packed_bias"),
]
# MLA prefill (qk 192 / v 128: kernel_sets.VARLEN_HEAD_DIM_CASES), D96 and D192 through the varlen kernel
HEAD_DIM_CASES = [
    VarlenCase("d192v128-causal-gqa", 192, (0, 1, 130, 65), (3, 1, 200, 65), causal=True, heads=2, kv_heads=1,
               head_dim_v=128),
    VarlenCase("d192v128-mha", 192, (1, 129), (70, 129), heads=2, kv_heads=2, head_dim_v=128),
    VarlenCase("d96-causal", 96, (65, 1, 130), (64, 3, 200), causal=True),
    VarlenCase("d192-ragged", 192, (1, 130, 0), (5, 129, 3)),
]
# The compact grid (common.varlen_compact): heads in chunks of 4 with a rest of 2 (an L2 of four KV heads'
# K and V: section_shift 2 at GQA group 2), lengths 0 and 1 and tiles plus one row, a sequence longer than
# its tile count's bm; and 37 sequences (the warp scan's second chunk of 32) at bm 192
def _seqs37():
    lens = [(i * 7) % 5 for i in range(36)] + [200]
    lens[20], lens[33] = 193, 0
    return tuple(lens)


COMPACT_CASES = [
    VarlenCase("d128-causal-gqa-compact", 128, (1, 0, 200, 129), (1, 3, 200, 140), causal=True, heads=6,
               kv_heads=3, compact=True, l2_bytes=int(4 * 200 * 256 * 2 / 0.6) + 1),
    VarlenCase("d64-37seqs-compact", 64, _seqs37(), _seqs37(), compact=True),
]
# The persistent compact kernel [D-varlen-persistent]: more working tiles than CTAs, so every CTA loops over
# several (of different sequences and heads, empty spare tiles at the end), lengths 0 and 1, tiles plus one
# row; D128 causal GQA (the bench's kernel) on 3 CTAs, D128 causal MQA with seqused_k on 2 (D64's bm 192 kernel does not
# fit its three consumer warpgroups beside the producer's 40 registers, RegisterBudgetError; D128 non-causal's
# 128 x 144 does not fit the persistent Q and O tiles in SMEM, ConfigError)
PERSISTENT_CASES = [
    VarlenCase("d128-causal-gqa-persistent", 128, (0, 1, 129, 257, 130, 64), (0, 1, 129, 300, 130, 64),
               causal=True, heads=4, kv_heads=2, persistent=3),
    VarlenCase("d128-causal-seqused-persistent", 128, (145, 0, 1, 70, 200), (200, 5, 1, 130, 200), causal=True,
               heads=2, kv_heads=1, seqused_k=(150, 0, 1, 129, 200), persistent=2),
]
BY_NAME = {c.name: c for c in CASES + MOD_CASES + HEAD_DIM_CASES + COMPACT_CASES + PERSISTENT_CASES}


def config(case: VarlenCase):
    from fa4mlir.kernels.attention_sm90_config_varlen import varlen_config
    mask = None if case.mask.is_legacy else case.mask
    score, mask_mod = case.mods
    return varlen_config(case.dtype, case.head_dim, case.causal, mask, softcap=case.softcap > 0, sinks=case.sinks,
                         head_dim_v=case.head_dim_v, score_mod=score.fingerprint() if score else "",
                         mask_mod=mask_mod.fingerprint() if mask_mod else "", aux=case.aux_spec(),
                         compact=case.compact, persistent=case.persistent > 0)


def _bits(x: np.ndarray, dtype: str) -> np.ndarray:
    import torch
    t = torch.from_numpy(x).to(torch.bfloat16 if dtype == "bf16" else torch.float16)
    return t.view(torch.int16).numpy().view(np.uint16).copy()


def problem(case: VarlenCase):
    from fa4mlir.attention.problem import VarlenProblem
    total_q, total_k = sum(case.seqlens_q) + case.spare_rows, sum(case.seqlens_k)
    score, mask_mod = case.mods
    return VarlenProblem(len(case.seqlens_q), max(case.seqlens_q), max(case.seqlens_k), total_q, total_k,
                         case.heads, case.kv_heads, case.head_dim, case.dtype, case.causal, case.head_dim ** -0.5,
                         case.window, case.chunk, case.softcap, case.sinks, case.seqused_k is not None,
                         case.head_dim_v, score.fingerprint() if score else "",
                         mask_mod.fingerprint() if mask_mod else "", case.aux_spec(),
                         tuple(a.shape for a in case.aux()),
                         (score.pre_scale, score.post_scale) if score else (1.0, 1.0))


def inputs(case: VarlenCase, seed: int = 0) -> dict:
    """Packed q [total_q, H, D], k [total_k, Hkv, D], v [total_k, Hkv, D_v] (16-bit patterns),
    cu_seqlens int32, NaN out [total_q, H, D_v] and lse [H, total_q]; seqused_k, sinks and the aux
    tensors (aux0, ...) when the case has them."""
    rng = np.random.default_rng(seed)
    pr, d = problem(case), case.head_dim
    nan16 = 0x7FC0 if case.dtype == "bf16" else 0x7E00
    out = {"q": _bits(rng.standard_normal((pr.total_q, case.heads, d), np.float32), case.dtype),
           "k": _bits(rng.standard_normal((pr.total_k, case.kv_heads, d), np.float32), case.dtype),
           "v": _bits(rng.standard_normal((pr.total_k, case.kv_heads, case.dim_v), np.float32), case.dtype),
           "cu_seqlens_q": np.concatenate([[0], np.cumsum(case.seqlens_q)]).astype(np.int32),
           "cu_seqlens_k": np.concatenate([[0], np.cumsum(case.seqlens_k)]).astype(np.int32),
           "o": np.full((pr.total_q, case.heads, case.dim_v), nan16, np.uint16),
           "lse": np.full((case.heads, pr.total_q), np.nan, np.float32)}
    if case.seqused_k is not None:
        out["seqused_k"] = np.asarray(case.seqused_k, np.int32)
    if case.sinks:
        out["sinks"] = (3 * rng.standard_normal(case.heads)).astype(np.float32)
    out.update({f"aux{i}": a for i, a in enumerate(case.aux(seed))})
    return out


def launch(case: VarlenCase, tensors: dict):
    """(grid, args) of the case's kernel over `tensors`; the TMA tensors as [1, total, H, D]."""
    from fa4mlir.kernels.attention_sm90_config import grid, launch_args
    cfg, pr = config(case), problem(case)
    tma = {n: tensors[n].reshape(1, *tensors[n].shape) for n in ("q", "k", "v", "o")}
    args = launch_args(cfg, pr, {**tensors, **tma}, **({"l2_bytes": case.l2_bytes} if case.l2_bytes else {}))
    args["o_rows"] = tensors["o"]
    return grid(cfg, pr, case.persistent or None), args


def run(case: VarlenCase, *, policy: str = "lazy", seed: int = 0) -> dict:
    """Interpret the case: its tensors after the launch (o and lse written)."""
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm90
    kernel = interpret.load(attention_fwd_sm90.build(config(case)))
    tensors = inputs(case, seed)
    grid, args = launch(case, tensors)
    done = kernel.launch(grid, args, policy=policy, seed=seed)
    return {**tensors, "ctas": len(done), "kernel_name": kernel.name}


__all__ = ["VarlenCase", "CASES", "MOD_CASES", "HEAD_DIM_CASES", "COMPACT_CASES", "PERSISTENT_CASES", "BY_NAME", "config", "problem", "inputs", "launch", "run", "replace"]
