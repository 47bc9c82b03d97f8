"""What an attention call asks for, independent of how it is computed (MLIR-free, deviceless).

``AttnProblem`` is built from the tensors by ``checks.check_inputs`` (sizes, dtype) and completed
with the call's options (``with_options``: causal, softmax scale). Kernel selection
(``plan.select``) and each kernel's launch contract read it; later entry points (ragged, paged,
MLA) add fields here rather than new functions.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..kernels.common.mask_family import Mask, attention_mask


@dataclass(frozen=True)
class AttnProblem:
    """Dense attention: q [batch, seqlen_q, heads, head_dim], k and v [batch, seqlen_k, kv_heads,
    head_dim], one dtype; causal aligned bottom-right; softmax_scale resolved (None until
    with_options); FlashAttention's window_size and attention_chunk (checked: checks.check_mask), softcap
    and whether sinks are given (checks.check_softcap, check_sinks). head_dim_v: v's (and out's) head
    dim where it differs from head_dim (MLA prefill: 192 / 128), 0 when they are equal."""

    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    causal: bool = False
    softmax_scale: float | None = None
    window_size: tuple = (-1, -1)
    attention_chunk: int = 0
    softcap: float = 0.0           # > 0: scores capped to softcap * tanh(s / softcap); 0: none
    sinks: bool = False            # a float32 [heads] sink logit per head (the tensor travels with the call)
    head_dim_v: int = 0            # v and out's head dim when it differs from head_dim; 0: equal
    # score_mod / mask_mod (kernels/common/score_mod.py): fingerprints ('' none), the aux tensors' compile-time
    # spec and sizes, and the ScoreMod's launch-time (pre_scale, post_scale) fold
    score_mod: str = ""
    mask_mod: str = ""
    aux: str = ""
    aux_shapes: tuple = ()
    mod_scales: tuple = (1.0, 1.0)

    @classmethod
    def of(cls, q_shape, k_shape, dtype: str, *, causal: bool = False, softmax_scale: float | None = None) -> "AttnProblem":
        """The problem of q [batch, seqlen_q, heads, head_dim] and k [batch, seqlen_k, kv_heads,
        head_dim] shapes, unchecked (tools and tests that launch a kernel directly; the entry
        points build it through checks.check_inputs). softmax_scale None: 1 / sqrt(head_dim)."""
        (b, sq, h, d), (_, sk, hk, _) = tuple(q_shape), tuple(k_shape)
        return cls(int(b), int(sq), int(sk), int(h), int(hk), int(d), dtype, bool(causal),
                   float(d ** -0.5 if softmax_scale is None else softmax_scale))

    def with_options(self, *, causal: bool, softmax_scale: float, window_size: tuple = (-1, -1),
                     attention_chunk: int = 0, softcap: float = 0.0, sinks: bool = False) -> "AttnProblem":
        return replace(self, causal=bool(causal), softmax_scale=float(softmax_scale),
                       window_size=tuple(window_size), attention_chunk=int(attention_chunk),
                       softcap=float(softcap), sinks=bool(sinks))

    @property
    def mask(self) -> Mask:
        """The call's mask (kernels/common/masks.py), with the parts that bound nothing at these
        lengths dropped, so that they run the causal or unmasked kernel: a window side that reaches
        past every key (left >= seqlen_k - 1, right >= seqlen_q - 1) and a chunk that holds every
        row's keys (seqlen_q <= seqlen_k <= chunk: every diagonal key lies in chunk 0)."""
        left, right = self.window_size
        if left >= self.seqlen_k - 1:
            left = -1
        if right >= self.seqlen_q - 1:
            right = -1
        chunk = self.attention_chunk
        if chunk and self.seqlen_q <= self.seqlen_k <= chunk:
            chunk = 0
        return attention_mask(self.causal, (left, right), chunk)

    @property
    def heads_per_kv(self) -> int:
        return self.heads // self.kv_heads

    @property
    def is_empty(self) -> bool:
        """out has no element (batch, seqlen_q or heads is 0): there is nothing to compute."""
        return self.batch * self.seqlen_q * self.heads == 0

    @property
    def sees_no_key(self) -> bool:
        """seqlen_k is 0: every query row sees no key, so out = 0 and lse = +inf (FlashAttention's
        convention for such a row) with no kernel to run."""
        return self.seqlen_k == 0

    @property
    def dim_v(self) -> int:
        """v's and out's head dim."""
        return self.head_dim_v or self.head_dim

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.seqlen_q, self.heads, self.dim_v)

    @property
    def lse_shape(self) -> tuple[int, int, int]:
        return (self.batch, self.heads, self.seqlen_q)


@dataclass(frozen=True)
class VarlenProblem:
    """A ragged batch (attention/varlen.py): q [total_q, heads, head_dim], k [total_k, kv_heads,
    head_dim] and v [total_k, kv_heads, dim_v] packed, `batch` sequences whose rows cu_seqlens (device memory, never read
    here) give; max_seqlen_q and max_seqlen_k bound their lengths (the caller's word: the grid has
    ceil(max_seqlen_q / bm) query tiles per sequence). seqlen_q and seqlen_k read as the maxima, so
    the launch contract (attention_sm90_config.launch_args) fills batch, seqlen_q and seqlen_k with
    the number of sequences and the maxima."""

    batch: int
    max_seqlen_q: int
    max_seqlen_k: int
    total_q: int
    total_k: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    causal: bool = False
    softmax_scale: float | None = None
    window_size: tuple = (-1, -1)
    attention_chunk: int = 0
    softcap: float = 0.0
    sinks: bool = False
    seqused_k: bool = False
    head_dim_v: int = 0            # v and out's head dim when it differs from head_dim (MLA prefill); 0: equal
    # score_mod / mask_mod, as AttnProblem's (in the kernel: batch the sequence, q_idx / kv_idx positions in it)
    score_mod: str = ""
    mask_mod: str = ""
    aux: str = ""
    aux_shapes: tuple = ()
    mod_scales: tuple = (1.0, 1.0)

    @property
    def dim_v(self) -> int:
        """v's and out's head dim."""
        return self.head_dim_v or self.head_dim

    @property
    def seqlen_q(self) -> int:
        return self.max_seqlen_q

    @property
    def seqlen_k(self) -> int:
        return self.max_seqlen_k

    @property
    def heads_per_kv(self) -> int:
        return self.heads // self.kv_heads

    @property
    def mask(self) -> Mask:
        """The call's mask with the window sides that bound nothing for any sequence dropped (left >=
        max_seqlen_k - 1, right >= max_seqlen_q - 1: every sequence is at most that long); a chunk is
        kept (whether it bounds a sequence depends on its own lengths)."""
        left, right = self.window_size
        if left >= self.max_seqlen_k - 1:
            left = -1
        if right >= self.max_seqlen_q - 1:
            right = -1
        return attention_mask(self.causal, (left, right), self.attention_chunk)

    @property
    def is_empty(self) -> bool:
        """No query row to compute: no sequence, no packed row, no head or max_seqlen_q 0."""
        return self.batch * self.total_q * self.heads * self.max_seqlen_q == 0

    @property
    def out_shape(self) -> tuple[int, int, int]:
        return (self.total_q, self.heads, self.dim_v)

    @property
    def lse_shape(self) -> tuple[int, int]:
        return (self.heads, self.total_q)


__all__ = ["AttnProblem", "VarlenProblem"]
