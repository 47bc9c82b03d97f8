"""Configuration of the sm_90a attention forward kernel (MLIR-free: the host API imports it).

`AttnConfig` fixes everything that changes the generated code; `default_config` is the measured
tile table (each row's measurement: notes/RESULTS.md, "Decision log"); `grid` and `launch_args`
are the kernel's launch contract, shared by the host API, the tests and the benchmark.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, fields, replace

from .common.constants import LOG2E, MAX_RESCALE_THRESHOLD
from .common.fastdiv import divisor
from .common.fields import ConfigError, RegisterBudgetError, check_fields, field_defaults
from .common.mask_family import Mask, attention_mask
from .common.naming import softmax_knob_tags
from .common.paging import MAX_PAGE_SIZE, fetch_plan, prefill_box_rule
from .common.score_mod import aux_params, calls_sfu, parse_aux_spec, registered
from .common.persistent_tiles import IntOps, causal_pair_slot, dealt_tile
from .common.sections import L2_BYTES, SECTION_L2_SHARE, section_shift, section_tile
from .common.tile_layout import TileLayout, tile_layout
from .common.softcap_rule import (FIXED_MAX_CAP, FIXED_MAX_HIGH, SOFTCAP_FIXED_FIELDS, fixed_max_log2, softcap_choice,
                                  softcap_rule)
from .common.varlen_compact import compact_grid_size, compact_params
from .common.varlen_schedule import varlen_grid_size

KERNEL = "attention_fwd_sm90"
HEAD_DIMS = (64, 96, 128, 192, 256)
# (qk head dim, v head dim) pairs with head_dim_v != head_dim: MLA prefill (128 nope + 64 rope, v 128)
HEAD_DIM_PAIRS = ((192, 128),)
BMS = (128, 192)
DTYPES = ("bf16", "f16")
# The register model's constants (AttnConfig.consumer_register_parts, producer_regs_needed), fit to
# ptxas: the rest of a consumer thread beyond its O, S and P fragments, and the producer's loop.
CONSUMER_BASE_REGS = 28
CONSUMER_CHUNK_REGS = 4
CONSUMER_PIECE_REGS = 2
PRODUCER_REGS = 24
MOD_FIELDS = ("score_mod", "mask_mod", "aux")   # absent from key() when '' (no function)
SOFTCAP_TANH = ("", "f16x2")   # AttnConfig.softcap_tanh
# absent from key() when 0 / False / '': the kernels without them keep their keys
OPTIONAL_FIELDS = ("head_dim_v", "varlen", "page_size", "varlen_compact", "softcap_fold_q", "softcap_tanh",
                   "softcap_fixed_max", "score_bias_init")


@dataclass(frozen=True)
class AttnConfig:
    dtype: str = "bf16"       # q, k, v, o element type: bf16 | f16
    head_dim: int = 128       # D of q and k (and of v and o unless head_dim_v): 64, 96, 128, 192, 256
    causal: bool = False      # bottom-right aligned causal mask
    # sliding window and chunk (common.masks, FlashAttention's window_size and attention_chunk), fixed
    # at compile time; -1 / 0: none. With causal the window's right side is causal's: window_right -1
    window_left: int = -1
    window_right: int = -1
    chunk: int = 0
    # score modifiers, fixed at compile time [D-softcap] [D-sinks]: softcap replaces each scaled score
    # s by c * tanh(s / c), the cap c a launch argument (launch_params: softcap_scale); sinks adds a
    # learned logit per head to each row's softmax denominator (launch_params: a float32 [heads] pointer)
    softcap: bool = False
    sinks: bool = False
    # softcap's tanh input scale folded into Q [D-softcap-fold]: each consumer warpgroup multiplies its Q
    # rows in SMEM by softcap_scale once per tile (bf16 only), so the KV loop takes tanh(S) without a
    # multiply per score. An opt-in variant; left out of key() when False
    softcap_fold_q: bool = False
    # softcap's tanh on pairs of scores [D-softcap-fold]: '' one tanh.approx.f32 per score; 'f16x2' the
    # two scores of a register pair rounded to f16 and capped by one tanh.approx.f16x2 (on sm_90a still
    # one MUFU.TANH.F16 per score). An opt-in variant; left out of key() when ''
    softcap_tanh: str = ""
    # softcap's scores are at most the cap: every row's softmax runs relative to a fixed max (a launch argument,
    # fixed_max_log2: no row max, no O rescale; bf16, caps <= FIXED_MAX_CAP: launch_args) [D-softcap-fold]. The
    # softcap rule's pick for bf16 (softcap_rule); out of key() when False
    softcap_fixed_max: bool = False
    # ragged batches (attention/varlen.py): q, k, v packed [total_tokens, heads, D], each sequence's
    # rows from cu_seqlens in device memory, a 1-D grid in common.varlen_schedule's order; one tile per
    # CTA (persistent False). Left out of key() when False, so the dense kernels keep their keys
    varlen: bool = False
    # varlen over the paged KV cache (attention/varlen_paged.py, attention_fwd_sm90_paged): k and v are the
    # pools [num_pages, page_size, kv_heads, D], K/V tiles come in TMA boxes per page (common.paging's
    # box-rows rule). 0: contiguous packed k/v; left out of key() when 0, so other kernels keep their keys
    page_size: int = 0
    # varlen's compact grid (common.varlen_compact): one block per working query tile (the host's bound
    # on them), each block finding its sequence by a warp scan of cu_seqlens_q, instead of ceil(max_seqlen_q
    # / bm) tiles per sequence of which the ones past its end exit. A variant to A/B (FA4MLIR_VARLEN_GRID=
    # compact picks it); left out of key() when False, so the default kernels keep their keys. With
    # persistent (`_compact` and `_pers` in the name; FA4MLIR_VARLEN_GRID=persistent) a grid of at most one
    # CTA per SM strides over the compact tiles (attention_fwd_sm90._Tiles._each_compact) [D-varlen-persistent]
    varlen_compact: bool = False
    # D of v and o where it differs from head_dim (HEAD_DIM_PAIRS: 192 / 128, MLA prefill); 0: head_dim
    # (the one spelling of equal dims, so one kernel per pair)
    head_dim_v: int = 0
    # score_mod / mask_mod (common.score_mod): fingerprints of Python functions compiled into the softmax
    # ('' none) and the compile-time part of their aux tensors (aux_spec: 'f32x1,i32x1'); key() leaves
    # them out when empty, so the kernels without them keep their keys [D-score-mod]
    score_mod: str = ""
    mask_mod: str = ""
    aux: str = ""
    # a score_mod that is score + b (b affine in the float32 indices: common.score_mod_ir.ModHook.bias)
    # puts b / mod_scale into the S accumulator before the S wgmma, which accumulates onto it
    # [D-bias-init]: the softmax's per-score FFMA is the dense kernel's. Other functions (and none) build
    # today's code. An opt-in variant; left out of key() when False
    score_bias_init: bool = False
    bm: int = 128             # query rows per CTA: 64 per consumer warpgroup (128: 2, 192: 3)
    bn: int = 128             # key/value rows per pipeline block
    stages: int = 2           # K and V ring depth, >= 2
    pingpong: bool = True     # named-barrier turns: one warpgroup's softmax overlaps the others' GEMMs
    persistent: bool = False  # a 1-D grid (one CTA per SM: grid(num_sms=...)) strides over all query tiles;
    #                           Q has two SMEM tiles and O its own, so the next tile's Q and first K
    #                           load while this tile runs, and its epilogue overlaps the next loads
    rescale_before_pv: bool = False  # rescale O by the last block's alpha while S_j is on the tensor
    #                           cores, before O += P V is issued (FA4 CuTe at head dim 256), instead of
    #                           after P V's wait
    load_regs: int = 0        # setmaxnreg of the producer warpgroup; 0: auto (producer_regs)
    mma_regs: int = 0         # setmaxnreg of each consumer warpgroup; 0: auto (consumer_regs)
    # FlashAttention-4's softmax pieces (kernels/common/softmax.py), off by default:
    exp2_poly_stride: int = 0        # 0: every p = exp2 on the SFU (ex2.approx); k >= 2: element i of a
    #                                  row's scores (per thread) uses the FMA polynomial when i % k == k-1
    rescale_threshold: float = 0.0   # 0: m always follows the row max (classic online softmax); > 0: m
    #                                  moves only when the max grows by more than this many log2 units
    #                                  (P <= 2**threshold, O rescaled only when a row of the warp moved;
    #                                  default_config sets 8 where KNOBS says)

    def __post_init__(self):
        # 8 and 8.0 build the same kernel: one spelling in key() and the kernel name
        if type(self.rescale_threshold) is int:
            object.__setattr__(self, "rescale_threshold", float(self.rescale_threshold))

    def validate(self) -> "AttnConfig":
        """The config, checked: every field of its annotated type (ConfigTypeError), then every value
        (ConfigError, a ValueError), each naming the field and what it takes."""
        check_fields(self, {"dtype": DTYPES, "head_dim": HEAD_DIMS, "bm": BMS})
        if self.dtype not in DTYPES:
            raise ConfigError(f"attention dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.head_dim not in HEAD_DIMS:
            raise ConfigError(f"head_dim must be one of {HEAD_DIMS}, got {self.head_dim}")
        if self.bm not in BMS:
            raise ConfigError(f"bm must be one of {BMS} (consumer warpgroups of 64 rows each), got {self.bm}")
        self._check_mask()
        if self.head_dim_v and (self.head_dim, self.head_dim_v) not in HEAD_DIM_PAIRS:
            raise ConfigError(f"head_dim_v must be 0 (v and o as wide as q and k) or pair with head_dim as one of "
                              f"{HEAD_DIM_PAIRS}, got head_dim={self.head_dim}, head_dim_v={self.head_dim_v}"
                              f"{' (equal dims are spelled head_dim_v=0)' if self.head_dim_v == self.head_dim else ''}")
        self._check_mods()
        if self.bn % 16 or not 16 <= self.bn <= 256:
            raise ConfigError(f"bn must be a multiple of 16 in [16, 256] (wgmma n and k16 steps), got {self.bn}")
        self._check_paged()
        if self.varlen_compact and (not self.varlen or self.page_size):
            raise ConfigError(f"varlen_compact is a grid of the varlen kernel over packed k and v: it needs "
                              f"varlen=True and page_size 0, got varlen={self.varlen}, page_size={self.page_size}")
        if self.varlen and self.persistent and not self.varlen_compact:
            raise ConfigError("varlen kernels run one tile per CTA (the grid's order is the schedule, "
                              "common.varlen_schedule), or persistent over the compact grid's order: use "
                              "persistent=False, or varlen_compact=True with persistent=True")
        if self.stages < 2:
            raise ConfigError(f"stages must be >= 2 (K and V ring depth), got {self.stages}: with one stage the "
                              f"producer loads K_j+1 only after every consumer released K_j, and ptxas needs 16-40 "
                              f"more registers per consumer thread (D256 128x64: 232 instead of 216; D128 128x128 "
                              f"persistent spills at 232)")
        load, mma = self.producer_regs, self.consumer_regs
        if any(r != 0 and (r % 8 or not 24 <= r <= 256) for r in (self.load_regs, self.mma_regs)):
            raise ConfigError(f"setmaxnreg budgets are 0 (auto) or multiples of 8 in [24, 256], got load_regs="
                              f"{self.load_regs}, mma_regs={self.mma_regs}")
        pool = self.register_pool
        if load * 128 + mma * 128 * self.consumers > pool:
            raise ConfigError(f"register budgets exceed the CTA's launch allocation of {pool} registers "
                              f"({pool // self.threads} x {self.threads} threads): 128 x {load} + "
                              f"{128 * self.consumers} x {mma} (bm={self.bm}: {self.consumers} "
                              f"consumer warpgroups); setmaxnreg.inc would wait forever")
        row_scores = self.bn // 4  # S registers of one row in one thread (2 of every 4 of bn / 2)
        stride = self.exp2_poly_stride
        if stride < 0 or stride == 1 or stride > row_scores:
            raise ConfigError(f"exp2_poly_stride must be 0 (hardware exp2 only) or an int in [2, bn / 4 = "
                              f"{row_scores}] (1 in k exps of a row on the FMA pipes), got {stride!r}")
        thr = self.rescale_threshold
        if not 0 <= thr <= MAX_RESCALE_THRESHOLD:
            raise ConfigError(f"rescale_threshold must be a number in [0, {MAX_RESCALE_THRESHOLD}] (log2 units; "
                              f"0 = rescale on every new max, FlashAttention-4 uses 8.0; P reaches "
                              f"2**threshold and must fit f16), got {thr!r}")
        if self.smem_bytes() > 227 * 1024:
            raise ConfigError(f"tile plan needs {self.smem_bytes()} bytes of SMEM (> 227 KiB"
                              f"{', with the Q and O tiles of persistent' if self.persistent else ''}): "
                              f"lower bn or stages")
        self._check_registers()
        return self

    def _check_paged(self) -> None:
        """ConfigError unless page_size is 0 or a page size whose K/V tiles the varlen kernel fetches in
        TMA boxes per page (common.paging.prefill_box_rule), at bm 128 without score_mod/mask_mod."""
        if not self.page_size:
            return
        if type(self.page_size) is not int or not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise ConfigError(f"page_size must be 0 (contiguous k/v) or an int in 1..{MAX_PAGE_SIZE}, got "
                              f"{self.page_size!r}")
        if not self.varlen or self.score_mod or self.mask_mod or self.skips_empty_warpgroups:
            raise ConfigError(f"page_size needs varlen=True, no score_mod or mask_mod, and bm 128 (every consumer "
                              f"warpgroup meets on the V tail's barrier, attention_fwd_sm90_paged.zero_v_tail), "
                              f"got varlen={self.varlen}, bm={self.bm}")
        why = prefill_box_rule(self.bn, self.page_size)
        if why:
            raise ConfigError(why)

    @property
    def kv_box_rows(self) -> int:
        """Rows per K/V TMA box: bn, or with page_size the box-rows rule's gcd(bn, page_size)."""
        return fetch_plan(self.bn, self.page_size).box_rows if self.page_size else self.bn

    def _check_mask(self) -> None:
        """ConfigError unless the mask fields are in range and canonical (one config per mask:
        attention_mask's form), so equal masks compile to one kernel."""
        if self.window_left < -1 or self.window_right < -1 or self.chunk < 0:
            raise ConfigError(f"window_left and window_right must be >= -1 (-1: unbounded) and chunk >= 0 (0: "
                              f"none), got window_left={self.window_left}, window_right={self.window_right}, "
                              f"chunk={self.chunk}")
        mask = self.mask
        want = _mask_fields(mask)
        got = {k: getattr(self, k) for k in want}
        if got != want:
            raise ConfigError(f"the mask fields {got} are not in canonical form; the same mask is {want} "
                              f"(causal bounds the window's right side at 0, window (-1, 0) is causal=True)")

    def _check_mods(self) -> None:
        """ConfigError for a score_mod with softcap (one score modifier), aux tensors that no function
        reads, or an aux spec that does not parse."""
        if self.score_mod and self.softcap:
            raise ConfigError("score_mod and softcap are both set: softcap is a score_mod "
                              "(common.score_mod.softcap_score_mod); use one")
        if self.softcap_fold_q and not (self.softcap and self.dtype == "bf16" and not self.varlen):
            raise ConfigError(f"softcap_fold_q needs softcap=True, dtype bf16 (Q times softmax_scale / cap rounds to "
                              f"bf16, whose range keeps its precision; f16's subnormals would not) and varlen=False, "
                              f"got softcap={self.softcap}, dtype={self.dtype}, varlen={self.varlen}")
        if self.softcap_tanh not in SOFTCAP_TANH or (self.softcap_tanh and not self.softcap):
            raise ConfigError(f"softcap_tanh must be one of {SOFTCAP_TANH} ('' = tanh.approx.f32 per score), and "
                              f"non-empty only with softcap=True, got {self.softcap_tanh!r}, softcap={self.softcap}")
        if self.softcap_fixed_max and not (self.softcap and self.dtype == "bf16" and not self.rescale_threshold
                                           and not self.rescale_before_pv):
            raise ConfigError(f"softcap_fixed_max needs softcap=True, dtype bf16 (P spans 2^-125..2^32: f16 would "
                              f"flush or overflow it) and no running-max knobs (rescale_threshold 0, rescale_before_pv False), got "
                              f"softcap={self.softcap}, dtype={self.dtype}, rescale_threshold={self.rescale_threshold}, "
                              f"rescale_before_pv={self.rescale_before_pv}")
        if self.aux and not (self.score_mod or self.mask_mod):
            raise ConfigError(f"aux={self.aux!r} without a score_mod or mask_mod to read it")
        try:
            parse_aux_spec(self.aux)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    @property
    def mask(self) -> Mask:
        """The mask object (common.masks) of causal, the window and the chunk."""
        return attention_mask(self.causal, (self.window_left, self.window_right), self.chunk)

    @property
    def masked(self) -> bool:
        """Whether some KV blocks run the masked softmax for more than the seqlen_k tail."""
        return self.mask != attention_mask()

    def _check_registers(self) -> None:
        """RegisterBudgetError when the register model (consumer_regs_needed, producer_regs_needed)
        says a role needs more than its setmaxnreg budget: ptxas would spill or stop (C7602)."""
        need, budget = self.producer_regs_needed, self.producer_regs
        if need > budget:
            raise RegisterBudgetError(f"load_regs={self.load_regs}: the producer needs {need} registers per thread"
                                      f"{' (a persistent one keeps its tile loop state)' if self.persistent else ''}, "
                                      f"more than its setmaxnreg budget of {budget}: ptxas spills. Use load_regs=0 "
                                      f"(auto) or >= {need}")
        parts, budget = self.consumer_register_parts(), self.consumer_regs
        need = sum(parts.values())
        if need <= budget:
            return
        split = " + ".join(f"{k} {v}" for k, v in parts.items())
        source = (f"mma_regs={self.mma_regs}" if self.mma_regs else
                  f"auto: what the {self.register_pool // self.threads} x {self.threads} launch allocation leaves "
                  f"after the producer's {self.producer_regs}, for {self.consumers} consumer warpgroups, at most 240")
        raise RegisterBudgetError(
            f"bm={self.bm}, bn={self.bn} with head_dim={self.head_dim} needs about {need} registers per consumer "
            f"thread ({split}), more than its setmaxnreg budget of {budget} ({source}): ptxas would spill to "
            f"local memory or stop (C7602). {self._register_fixes(need)}")

    def _register_fixes(self, need: int) -> str:
        """What would make the consumer fit: a smaller bn, bm=128, a larger mma_regs."""
        fixes = []
        fits = [bn for bn in range(self.bn - 16, 15, -16)
                if sum(replace(self, bn=bn).consumer_register_parts().values()) <= self.consumer_regs]
        if fits:
            fixes.append(f"bn={fits[0]}")
        if self.bm == 192:
            two = replace(self, bm=128, load_regs=0, mma_regs=0)
            if sum(two.consumer_register_parts().values()) <= two.consumer_regs:
                fixes.append(f"bm=128 (two consumer warpgroups of {two.consumer_regs} registers)")
        most = (self.register_pool // 128 - self.producer_regs) // self.consumers // 8 * 8
        if self.mma_regs and need <= most:
            fixes.append(f"mma_regs={-(-need // 8) * 8} (or 0: auto)")
        return f"Use {' or '.join(fixes)}." if fixes else "No bn fits this head_dim at this bm; use bm=128."

    @property
    def consumers(self) -> int:
        """Consumer (wgmma) warpgroups: one per 64 query rows."""
        return self.bm // 64

    @property
    def skips_empty_warpgroups(self) -> bool:
        """Whether a consumer warpgroup whose 64 rows all lie past seqlen_q skips its GEMMs and
        epilogue (it still takes its part in the pipelines' handshakes and the GEMM turns), and a
        persistent non-causal kernel deals its tiles rotated so each CTA gets its share of the
        cheaper last tiles. At bm 192 only: there the last query tile of a power-of-two sequence
        holds 64 or 128 rows; at bm 128 none has an empty warpgroup and the branches only cost
        [D-empty-wg] [D-dealt]."""
        return self.consumers > 2

    @property
    def threads(self) -> int:
        """The producer warpgroup and the consumers."""
        return 128 * (1 + self.consumers)

    @property
    def producer_regs(self) -> int:
        """setmaxnreg of the producer: load_regs, or when 0 (auto) 24, and 32 for a persistent
        kernel (24 spills its tile-loop state) or at bm 192 (the launch allocation has room), 40 for a
        persistent varlen one (its warp scan per tile spilled 28 / 24 bytes at 32: D128 causal, ptxas)."""
        if self.load_regs:
            return self.load_regs
        if self.persistent and self.varlen:
            return self.producer_regs_needed
        return 32 if self.persistent or self.bm == 192 else 24

    @property
    def consumer_regs(self) -> int:
        """setmaxnreg of each consumer: mma_regs, or when 0 (auto) what is left of the launch
        allocation, at most 240 (240; 232 persistent; 160 at bm 192)."""
        if self.mma_regs:
            return self.mma_regs
        rest = (self.register_pool // 128 - self.producer_regs) // max(self.consumers, 1)
        return min(240, rest // 8 * 8)

    def consumer_register_parts(self) -> dict:
        """The register model of one consumer thread, by part (what _check_registers compares with
        consumer_regs). Its fragments of the warpgroup's 64-row tiles: O, the 64 x D f32 accumulator
        (D / 2); S_j, the 64 x bn f32 scores (bn / 2); P_{j-1}, the previous block's probabilities as
        wgmma A fragments, two 16-bit values a register (bn / 4), live with S_j while P_{j-1} V_{j-1}
        runs under S_j's softmax (FA3's intra-warpgroup overlap). The rest (row max and sum, pipeline
        states, addresses, descriptors) is CONSUMER_BASE_REGS plus CONSUMER_CHUNK_REGS per 64-column
        chunk of the head dim, plus CONSUMER_PIECE_REGS per chunk beyond the first for the causal mask
        and for FlashAttention-4's softmax pieces (lazy rescale or polynomial exp2: one term for
        both), whose code costs registers only when O is large (D256 128x32 causal with both: 200
        against 184). Fit to ptxas, as the least setmaxnreg at which the kernel compiles with 0
        spills, measured over head dims, bn 16-240, bm 128 and 192, persistent or not and every
        softmax knob; the model is at or above every measurement (tests/test_attention_registers.py)."""
        pieces = (int(self.masked) + int(bool(self.rescale_threshold or self.exp2_poly_stride))
                  + int(bool(self.score_mod or self.mask_mod)))
        return {"O": self.dim_v // 2, "S": self.bn // 2, "P": self.bn // 4,
                "rest": CONSUMER_BASE_REGS + CONSUMER_CHUNK_REGS * self.d_chunks
                + CONSUMER_PIECE_REGS * (self.d_chunks - 1) * pieces}

    @property
    def consumer_regs_needed(self) -> int:
        return sum(self.consumer_register_parts().values())

    @property
    def producer_regs_needed(self) -> int:
        """The producer's registers: PRODUCER_REGS, and 8 more for a persistent kernel's tile loop (at
        24 it spills 4 bytes), 8 more again for a persistent varlen kernel's warp scan of cu_seqlens per
        tile (common.varlen_compact: its carry of 8 values; at 32 it spilled 28 / 24 bytes) [D-varlen-persistent]."""
        return PRODUCER_REGS + (8 if self.persistent else 0) + (8 if self.persistent and self.varlen else 0)

    @property
    def register_pool(self) -> int:
        """The CTA's launch allocation, which setmaxnreg moves between warpgroups: the 64K register
        file split evenly over the threads, rounded down to 8 per thread (168 x 384, 128 x 512)."""
        return 65536 // self.threads // 8 * 8 * self.threads

    @property
    def q_stages(self) -> int:
        """Q tiles in SMEM: 2 for a persistent kernel (the producer loads the next tile's Q while this
        tile still uses its own), else 1."""
        return 2 if self.persistent else 1

    @property
    def dim_v(self) -> int:
        """The head dim of v and o: head_dim_v, or head_dim when 0."""
        return self.head_dim_v or self.head_dim

    @property
    def d_chunks(self) -> int:
        """The larger head dim in 64-column chunks (rounded up: D96 has two), what the register model
        counts per chunk."""
        return -(-max(self.head_dim, self.dim_v) // 64)

    @property
    def qk_tile(self) -> "TileLayout":
        """The SMEM layout of the Q and K tiles (head_dim columns)."""
        return tile_layout(self.head_dim)

    @property
    def v_tile(self) -> "TileLayout":
        """The SMEM layout of the V and O tiles (dim_v columns)."""
        return tile_layout(self.dim_v)

    def smem_bytes(self) -> int:
        row_qk, row_v = self.head_dim * 2, self.dim_v * 2
        o_tile = self.bm * row_v if self.persistent else 0
        return self.q_stages * self.bm * row_qk + o_tile + self.stages * self.bn * (row_qk + row_v) + 1024

    def score_tag(self) -> str:
        """Kernel-name tags of the score modifiers ('' for none): _softcap, _qfold, _sink, _sm_<fingerprint>,
        _mm_<fingerprint>; and _varlen."""
        return (("_softcap" if self.softcap else "") + ("_qfold" if self.softcap_fold_q else "")
                + (f"_tanh{self.softcap_tanh}" if self.softcap_tanh else "") + ("_fixmax" if self.softcap_fixed_max else "")
                + ("_sink" if self.sinks else "")
                + (f"_sm_{self.score_mod}" if self.score_mod else "") + (f"_mm_{self.mask_mod}" if self.mask_mod else "")
                + ("_varlen" if self.varlen else "") + ("_binit" if self.score_bias_init else ""))

    def name_suffix(self) -> str:
        """Kernel-name tags of the non-default softmax knobs ('' for the defaults): _poly4, _lazy8, _rb."""
        tags = softmax_knob_tags(self.exp2_poly_stride, self.rescale_threshold)
        return (tags + ("_rb" if self.rescale_before_pv else "") + (f"_page{self.page_size}" if self.page_size else "")
                + ("_compact" if self.varlen_compact else ""))

    def key(self) -> dict:
        """The config as a dict, every field (the mask's and score modifiers' too: a bundle query by
        key() picks one kernel; bundles from before them lack them, which attention.plan.select_entry
        reads as none), but OPTIONAL_FIELDS (varlen, head_dim_v, page_size, varlen_compact, the softcap variants' knobs) and
        the score_mod fields only when set, so the dense kernels, those of equal head dims, those without
        functions and the default softcap kernels keep their keys."""
        return {"kernel": KERNEL, **{k: v for k, v in self.__dict__.items()
                                     if not (k in OPTIONAL_FIELDS and not v)
                                     and not (k in MOD_FIELDS and v == "")}}

    @classmethod
    def from_key(cls, key: dict) -> "AttnConfig":
        """The config a key() (or a bundle manifest's config, which adds the compile options)
        describes."""
        if key.get("kernel", KERNEL) != KERNEL:
            raise ValueError(f"not an {KERNEL} config: kernel {key.get('kernel')!r}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in key.items() if k in names})


# AttnConfig's variant fields (common.fields: what a bundle lookup must match exactly, each at its default
# where a key lacks it): OPTIONAL_FIELDS and MOD_FIELDS, left out of key() at their defaults, and the mask and
# score-modifier fields, in every key since they were added (older bundles lack them). attention.plan's
# select_entry and bench/sanitize.py read this table: a new optional field lands in both.
VARIANT_FIELDS = field_defaults(AttnConfig, ("window_left", "window_right", "chunk", "softcap", "sinks", *OPTIONAL_FIELDS,
                                             *MOD_FIELDS))


# (head_dim, causal) -> tiles of the one-tile-per-CTA kernel (SHORT_TILES up to SHORT_SEQLEN_K), each
# the fastest variant timed; 2 K/V stages, since more gave nothing [D-stages]
_D64_3WG = dict(bm=192, bn=128, stages=2, pingpong=True)
_PERS = dict(bm=128, bn=128, stages=2, persistent=True)
TILES = {
    # 192 x 128: three consumer warpgroups taking GEMM turns, FA3/FA4's D64 tile [D-tiles-d64]
    (64, False): _D64_3WG,
    # 192 x 112: 112-key blocks fastest at 8k-16k [D-tiles-d64-causal]
    (64, True): dict(_D64_3WG, bn=112),
    # 128 x 144 one tile per CTA: fastest at 8k-16k [D-tiles-d128]
    (128, False): dict(bn=144, stages=2, pingpong=True),
    # persistent at every length: with two Q tiles it leads one tile per CTA everywhere [D-tiles-d128-causal]
    (128, True): dict(pingpong=True, **_PERS),
    # 128 x 64 with GEMM turns: turns spill at 128 x 80, and 64 keys end on the causal diagonal [D-tiles-d256]
    (256, False): dict(bn=64, stages=2, pingpong=True),
    (256, True): dict(bn=64, stages=2, pingpong=True),
    # D96 and D192: not timed (no GPU where they were added) [D-hdim-tiles]. D96 on D128's tiles (the
    # nearest measured case; FA3's 192 x 144 runs P V from SMEM, and P in registers at bm 192 needs
    # more than its 160); D192 on FA3's 128 x 112 (the most keys whose two K/V stages fit SMEM)
    (96, False): dict(bn=144, stages=2, pingpong=True),
    (96, True): dict(pingpong=True, **_PERS),
    (192, False): dict(bn=112, stages=2, pingpong=True),
    (192, True): dict(bn=112, stages=2, pingpong=True),
}

# (head_dim, head_dim_v, causal) -> tiles of unequal head dims: FA3's 128 x 128 for qk 192 / v 128,
# not timed [D-hdim-tiles]
SPLIT_TILES = {
    (192, 128, False): dict(bn=128, stages=2, pingpong=True),
    (192, 128, True): dict(bn=128, stages=2, pingpong=True),
}


# Key sequences up to SHORT_SEQLEN_K[case]: a tile sees few KV blocks, so its prologue and epilogue
# weigh more, and a persistent kernel (one CTA per SM striding over the tiles, two Q tiles in SMEM)
# hides them behind the previous tile's work [D-persistent] [D-two-q]; long sequences keep one tile
# per CTA, whose hardware block scheduling balances the last wave. The limits are where the two
# kernels' speeds cross [D-short-seqlen]; D256 has no SMEM for a persistent kernel [D-no-pers-d256].
SHORT_TILES = {
    (64, False): dict(_D64_3WG, persistent=True),
    (64, True): dict(pingpong=False, **_PERS),
    (128, False): dict(pingpong=True, **_PERS),
}
SHORT_SEQLEN_K = {(64, False): 4096, (64, True): 2048, (128, False): 8192}


# A kernel with both a score_mod and a mask_mod at bm 192 (three consumer warpgroups of 160 registers)
# spilled 44-116 bytes with ALiBi and the document mask (D64); at bm 128 (240 registers) none: it takes
# these tiles [D-score-mod]
MOD_BOTH_TILES = dict(bm=128, bn=128, load_regs=0, mma_regs=0)


# exp2_poly_stride of kernels whose scores already take a MUFU op each (softcap's tanh.approx, a score_mod
# that calls tanh / exp2 / log2: score_mod.calls_sfu): two SFU ops per score against one on dense kernels,
# so 1 in 4 of a row's exp2 runs on the FMA pipes (common.softmax.exp2_poly, max relative error 1.01e-4)
# [D-sfu-poly]. Dense and other score_mod kernels keep 0 [D-poly-exp2].
SFU_MOD_POLY_STRIDE = 4


def is_short(head_dim: int, causal: bool, seqlen_k: int | None) -> bool:
    """Whether default_config picks SHORT_TILES at this seqlen_k (None: a long sequence)."""
    limit = SHORT_SEQLEN_K.get((head_dim, bool(causal)))
    return seqlen_k is not None and limit is not None and seqlen_k <= limit


# Code knobs per case (head_dim, causal, short: the SHORT_TILES pick), each where it beat the classic
# kernel: lazy rescale (rescale_threshold 8: O's multiplies skipped while no row of the warp moves its
# max by more than 8 log2 units) and rescale_before_pv (O scaled under S_j) [D-knobs-d64]
# [D-knobs-d128] [D-knobs-d256]; cases not listed stay classic [D-knobs-classic].
KNOBS = {
    (64, False, False): dict(rescale_threshold=8.0, rescale_before_pv=True),
    (64, True, False): dict(rescale_threshold=8.0),
    (128, False, False): dict(rescale_threshold=8.0, rescale_before_pv=True),
    (128, False, True): dict(rescale_before_pv=True),
    (256, False, False): dict(rescale_threshold=8.0),
    (256, True, False): dict(rescale_threshold=8.0),
}

# the AttnConfig fields TILES sets: what tells the default kernel from a tile variant in a bundle
TILE_FIELDS = ("bm", "bn", "stages", "pingpong", "persistent", "load_regs", "mma_regs")
# the other code knobs (softmax pieces, rescale placement): a variant differs from the default in them
KNOB_FIELDS = tuple(f.name for f in fields(AttnConfig)
                    if f.name not in ("dtype", "head_dim", "head_dim_v", "causal", *TILE_FIELDS))


def _mask_fields(mask: Mask) -> dict:
    """AttnConfig's fields of a mask: causal, window_left, window_right, chunk."""
    out = {"causal": False, "window_left": -1, "window_right": -1, "chunk": 0}
    for part in mask.parts:
        if part.tag() == "_causal":
            out["causal"] = True
        elif hasattr(part, "left"):
            out.update(window_left=part.left, window_right=part.right)
        else:
            out["chunk"] = part.size
    if out["causal"]:
        out["window_right"] = -1
    if out["window_left"] < 0 and out["window_right"] == 0:
        out.update(causal=True, window_right=-1)
    if out["window_left"] >= 0 and out["window_right"] == 0:   # a left window with right 0: causal's spelling
        out.update(causal=True, window_right=-1)
    return out


def default_config(dtype: str, head_dim: int, causal: bool, seqlen_k: int | None = None,
                   mask: Mask | None = None, *, softcap: bool = False, sinks: bool = False,
                   head_dim_v: int = 0, score_mod: str = "", mask_mod: str = "", aux: str = "",
                   cap: float = 0.0) -> AttnConfig:
    """The measured tiles for (head_dim, causal): TILES, or SHORT_TILES when seqlen_k is given and
    at most SHORT_SEQLEN_K of the case; plus the case's measured code knobs (KNOBS). `mask` (common.
    masks; None: causal's or none) sets the mask fields, on the tiles of its causal flag (a window or
    chunk has its own kernel on the same tiles). `softcap`, `sinks`: the score modifiers' kernel on
    the same tiles and knobs [D-softcap] [D-sinks]. `head_dim_v` (0 or head_dim: equal dims): the
    v and o head dim of a HEAD_DIM_PAIRS pair, on SPLIT_TILES. `score_mod`, `mask_mod`, `aux`:
    fingerprints and aux spec (common.score_mod) of a compiled-in function's kernel, on the long
    sequences' tiles and knobs (MOD_BOTH_TILES with both functions at bm 192). Softcap kernels, and
    those of a score_mod that calls an SFU helper (score_mod.calls_sfu; the function must be
    registered: fingerprinted in this process), take exp2_poly_stride SFU_MOD_POLY_STRIDE. `cap` (the
    call's Python float softcap; 0: not known here) picks the softcap kernel by softcap_rule: the fixed-max
    kernel for a bf16 cap in (0, FIXED_MAX_CAP], else the running-max kernel (which serves every cap)."""
    if head_dim_v and head_dim_v != head_dim:
        if (head_dim, head_dim_v) not in HEAD_DIM_PAIRS:
            raise ValueError(f"(head_dim, head_dim_v) must be equal or one of {HEAD_DIM_PAIRS}, got "
                             f"({head_dim}, {head_dim_v})")
        base = default_config(dtype, head_dim, causal, seqlen_k, mask, softcap=softcap, sinks=sinks,
                              score_mod=score_mod, mask_mod=mask_mod, aux=aux, cap=cap)
        return replace(base, head_dim_v=head_dim_v, **SPLIT_TILES[(head_dim, head_dim_v, base.causal)]).validate()
    if score_mod or mask_mod or aux:
        # the long sequences' tiles at every seqlen_k: SHORT_TILES' persistent bm 192 spilled with the
        # relative bias (216 bytes), 128 x 128 persistent with ALiBi and the document mask (4) [D-score-mod]
        cfg = default_config(dtype, head_dim, causal, None, mask, softcap=softcap, sinks=sinks)
        if score_mod and mask_mod and cfg.bm == 192:   # MOD_BOTH_TILES: room for both functions
            cfg = replace(cfg, **MOD_BOTH_TILES)
        sfu = bool(score_mod) and calls_sfu(registered(score_mod))
        # score_bias_init on every score_mod kernel: an affine bias goes into the S accumulator (ALiBi 1.135x ->
        # 1.019x dense on an H200), any other function builds the code it builds without it [D-bias-init]
        return replace(cfg, score_mod=score_mod, mask_mod=mask_mod, aux=aux, score_bias_init=bool(score_mod),
                       **(dict(exp2_poly_stride=SFU_MOD_POLY_STRIDE) if sfu else {})).validate()
    if softcap or sinks:
        base = replace(default_config(dtype, head_dim, causal, seqlen_k, mask), softcap=bool(softcap), sinks=bool(sinks),
                       **(dict(exp2_poly_stride=SFU_MOD_POLY_STRIDE) if softcap else {}))
        return replace(base, **(softcap_rule(dtype, cap) if softcap else {})).validate()
    if mask is not None:
        fields_ = _mask_fields(mask)
        cfg = default_config(dtype, head_dim, fields_["causal"], seqlen_k)
        return replace(cfg, **fields_).validate()
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {head_dim}")
    key, short = (head_dim, bool(causal)), is_short(head_dim, causal, seqlen_k)
    return AttnConfig(dtype=dtype, head_dim=head_dim, causal=bool(causal), **KNOBS.get((*key, short), {}),
                      **(SHORT_TILES if short else TILES)[key]).validate()


def config_from_spec(spec: str) -> AttnConfig:
    """'head_dim=64,causal=True,bn=64' -> that case's default_config with the other fields replaced
    (values as Python literals; dtype may be bare: dtype=f16). What the deviceless tools' --config
    takes (bench/sass_loops.py, bench/ptx_bundle.py)."""
    values = {}
    for item in filter(None, spec.split(",")):
        key, eq, raw = item.partition("=")
        if not eq:
            raise ValueError(f"config spec: expected key=value, got {item!r}")
        try:
            values[key.strip()] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            values[key.strip()] = raw
    base = default_config(values.pop("dtype", "bf16"), values.get("head_dim", 128), values.get("causal", False))
    return replace(base, **values).validate()


def default_configs(dtype: str, head_dim: int, causal: bool, mask: Mask | None = None, *, softcap: bool = False,
                    sinks: bool = False, head_dim_v: int = 0, score_mod: str = "", mask_mod: str = "",
                    aux: str = "") -> list[AttnConfig]:
    """Every config default_config picks for (dtype, head_dim, causal, mask, softcap, sinks,
    head_dim_v, score_mod, mask_mod, aux) at some seqlen_k and, with softcap, some cap (softcap_rule:
    the running-max kernel, then the fixed-max one where the rule has it): the long one first."""
    out = []
    for cap in ((0.0, FIXED_MAX_CAP) if softcap else (0.0,)):
        mods = dict(mask=mask, softcap=softcap, sinks=sinks, head_dim_v=head_dim_v, score_mod=score_mod,
                    mask_mod=mask_mod, aux=aux, cap=cap)
        out += [default_config(dtype, head_dim, causal, **mods), default_config(dtype, head_dim, causal, 1, **mods)]
    return list(dict.fromkeys(out))


def query_tiles(config: AttnConfig, seqlen_q: int) -> int:
    """Query tiles per (head, batch): bm rows each, the last one partial."""
    return (seqlen_q + config.bm - 1) // config.bm


def grid(config: AttnConfig, problem, num_sms: int | None = None) -> tuple[int, int, int]:
    """One CTA per (bm query rows, head, batch): (query tiles, heads, batch), or 1-D when causal
    (section_tile orders it). A persistent kernel takes a 1-D grid of any size and strides over all
    tiles: one CTA per SM with `num_sms` (fewer when there are fewer tiles), else one per tile.
    `problem`: anything with batch, heads, seqlen_q (attention.AttnProblem)."""
    tiles = query_tiles(config, problem.seqlen_q)
    if config.varlen:
        return varlen_grid(config, problem, num_sms)
    if not config.persistent:  # causal: a 1-D grid in section_tile's order
        return (tiles * problem.heads * problem.batch, 1, 1) if config.causal else (tiles, problem.heads, problem.batch)
    total = tiles * problem.heads * problem.batch
    return (min(total, num_sms) if num_sms else total, 1, 1)


# The launch contract: the kernel's parameters, (name, kind) in PTX order. The kernel declares
# them from this table (attention_fwd_sm90.build), launch_args fills them by name and the runtime
# packs them by name (runtime.ordered_args). Divisors travel as (multiplier, shift) pairs
# (common.fastdiv), `<name>_mul` and `<name>_shr`.
TENSOR_PARAMS = (("q", "tma"), ("k", "tma"), ("v", "tma"), ("o", "tma"), ("lse", "ptr"))
LAUNCH_PARAMS = (*TENSOR_PARAMS, ("batch", "i32"), ("heads", "i32"), ("seqlen_q", "i32"), ("seqlen_k", "i32"),
                 ("scale_log2", "f32"),
                 *((f"{n}_{part}", "i32") for n in ("group", "tiles", "heads") for part in ("mul", "shr")),
                 ("section_shift", "i32"), ("rest_mul", "i32"), ("rest_shr", "i32"))


# The score modifiers' parameters, after LAUNCH_PARAMS (so kernels without them keep their PTX):
# softcap_scale = softmax_scale / softcap, the factor before the tanh [D-softcap]; sinks, float32
# [heads] logits [D-sinks].
SOFTCAP_PARAMS = (("softcap_scale", "f32"),)
# softcap_fixed_max: the fixed max M = fixed_max_log2(cap) in exp2 units (p = exp2(t cap log2 e - M))
FIXED_MAX_PARAMS = (("softcap_max_log2", "f32"),)
SINK_PARAMS = (("sinks", "ptr"),)
# A varlen kernel's parameters, last (attention_fwd_sm90_varlen): o_rows, out again as a plain pointer
# for the rows a TMA store would overrun into the next sequence; cu_seqlens_q / cu_seqlens_k, int32
# [batch + 1]; seqused_k, int32 [batch] (cu_seqlens_k again when has_seqused_k is 0); total_q, the
# packed rows (LSE is float32 [heads, total_q]). batch, seqlen_q and seqlen_k of LAUNCH_PARAMS hold
# the number of sequences, max_seqlen_q and max_seqlen_k; the tile order (common.varlen_schedule) is
# the dense causal grid's sections (section_shift, rest and tiles of LAUNCH_PARAMS).
# A paged varlen kernel's (page_size, attention_fwd_sm90_paged), after VARLEN_PARAMS: the page table int32
# [batch, max_pages] and its row stride (elements), the pool's pages (a box past a length aims at page
# num_pages: TMA's zeros) and the table's capacity max_pages * page_size (the lengths' clamp)
PAGED_PARAMS = (("page_table", "ptr"), ("page_table_stride", "i32"), ("num_pages", "i32"), ("kv_capacity", "i32"))
VARLEN_PARAMS = (("o_rows", "ptr"), ("cu_seqlens_q", "ptr"), ("cu_seqlens_k", "ptr"), ("seqused_k", "ptr"),
                 ("has_seqused_k", "i32"), ("total_q", "i32"))
# A compact varlen grid's (varlen_compact, common.varlen_compact), after VARLEN_PARAMS: heads per chunk g,
# whole chunks, and the divisors of g and of the rest (heads mod g) as fastdiv pairs
COMPACT_PARAMS = (("chunk_heads", "i32"), ("chunk_full", "i32"), ("chunk_mul", "i32"), ("chunk_shr", "i32"),
                  ("chunk_rest_mul", "i32"), ("chunk_rest_shr", "i32"))
# score_mod's (common.score_mod): mod_scale = softmax_scale * pre_scale, the factor before the function; then
# each aux tensor's pointer and sizes (aux_params) [D-score-mod]
MOD_SCALE_PARAMS = (("mod_scale", "f32"),)


def launch_params(config: AttnConfig) -> tuple:
    """The config's launch contract, (name, kind) in PTX order: LAUNCH_PARAMS, then SOFTCAP_PARAMS
    with softcap, SINK_PARAMS with sinks, MOD_SCALE_PARAMS with a score_mod and the aux tensors'
    (common.score_mod.aux_params), and VARLEN_PARAMS with varlen; FIXED_MAX_PARAMS after SOFTCAP_PARAMS
    with softcap_fixed_max."""
    return (*LAUNCH_PARAMS, *(SOFTCAP_PARAMS if config.softcap else ()),
            *(FIXED_MAX_PARAMS if config.softcap_fixed_max else ()), *(SINK_PARAMS if config.sinks else ()),
            *(MOD_SCALE_PARAMS if config.score_mod else ()), *aux_params(config.aux),
            *(VARLEN_PARAMS if config.varlen else ()), *(PAGED_PARAMS if config.page_size else ()),
            *(COMPACT_PARAMS if config.varlen_compact else ()))


def launch_args(config: AttnConfig, problem, tensors, l2_bytes: int = L2_BYTES) -> dict:
    """The kernel's parameters by name (LAUNCH_PARAMS): the tensors q, k, v, o ([B, S, H, D] each,
    TMA) and lse (float32 [B, H, Sq], contiguous) from `tensors` (a mapping), then from `problem`
    (attention.AttnProblem: batch, heads, seqlen_q, seqlen_k, heads_per_kv, softmax_scale) the
    sizes, softmax_scale * log2(e) and three divisors: heads // kv_heads (the GQA group), the tile
    index's split (query tiles per (head, batch), or pairs of them for a causal persistent kernel)
    and heads; then the section shift of a causal one-tile-per-CTA or a varlen grid (section_shift, from the
    device's `l2_bytes`; 0 for other kernels, which do not read it) and the divisor of its last,
    partial section's (head, batch) count (section_tile). A softcap kernel takes its scale as
    softcap * log2(e) and softcap_scale = softmax_scale / softcap (problem.softcap, > 0) [D-softcap];
    a sinks kernel the tensor `sinks` [D-sinks]."""
    tiles = query_tiles(config, problem.seqlen_q)
    split = (tiles + 1) // 2 if config.causal and config.persistent else tiles
    sectioned = (config.causal and not config.persistent) or config.varlen
    shift = section_shift(config, problem, l2_bytes) if sectioned else 0
    rest = (problem.batch * problem.heads) % (1 << shift)
    args = {name: tensors[name] for name, _ in TENSOR_PARAMS}
    args.update(batch=int(problem.batch), heads=int(problem.heads), seqlen_q=int(problem.seqlen_q),
                seqlen_k=int(problem.seqlen_k), scale_log2=float(problem.softmax_scale) * LOG2E, section_shift=shift)
    for name, n in (("group", problem.heads_per_kv), ("tiles", max(split, 1)), ("heads", problem.heads),
                    ("rest", max(rest, 1))):
        args[f"{name}_mul"], args[f"{name}_shr"] = divisor(int(n))
    if config.softcap:
        cap = float(getattr(problem, "softcap", 0.0))
        if not cap > 0:
            raise ValueError(f"a softcap kernel ({config.score_tag()}) needs problem.softcap > 0, got {cap!r}")
        if config.softcap_fixed_max and cap > FIXED_MAX_CAP:
            raise ConfigError(f"a softcap_fixed_max kernel ({config.score_tag()}) takes caps up to {FIXED_MAX_CAP:.4g} "
                              f"(p = exp2(t cap log2 e - M) must stay a normal float32 down to t = -1 and at most "
                              f"2^{FIXED_MAX_HIGH:g} at t = 1), got {cap!r}")
        args.update(scale_log2=cap * LOG2E, softcap_scale=float(problem.softmax_scale) / cap)
        if config.softcap_fixed_max:
            args["softcap_max_log2"] = fixed_max_log2(cap)
    if config.sinks:
        args["sinks"] = tensors["sinks"]
    if config.score_mod or config.mask_mod:
        args.update(mod_args(config, problem, tensors))
    if config.varlen:
        used = tensors.get("seqused_k")
        args.update(o_rows=tensors["o"], cu_seqlens_q=tensors["cu_seqlens_q"], cu_seqlens_k=tensors["cu_seqlens_k"],
                    seqused_k=tensors["cu_seqlens_k"] if used is None else used, has_seqused_k=int(used is not None),
                    total_q=int(problem.total_q))
    if config.varlen_compact:   # heads in chunks of min(2**shift, heads) (common.varlen_compact)
        args.update(compact_params(int(problem.heads), shift))
    if config.page_size:   # problem: attention.varlen_paged.PrefillProblem
        args.update(page_table=tensors["page_table"], page_table_stride=int(problem.page_table_stride),
                    num_pages=int(problem.num_pages), kv_capacity=int(problem.kv_capacity))
    return {name: args[name] for name, _ in launch_params(config)}   # in PTX order, every parameter once


def varlen_grid(config: AttnConfig, problem, num_sms: int | None = None) -> tuple[int, int, int]:
    """The 1-D grid of a varlen kernel: ceil(max_seqlen_q / bm) x heads x batch blocks
    (common.varlen_schedule), or with varlen_compact the host's bound on the working tiles
    (common.varlen_compact.compact_grid_size, also from total_q), or with varlen_compact and persistent
    min(num_sms, that bound) CTAs (one per SM: the kernel's SMEM holds one) striding over the compact
    tiles; shapes only, no device read. `problem`: batch (sequences), heads, seqlen_q (max_seqlen_q),
    total_q."""
    if config.varlen_compact:
        tiles = compact_grid_size(problem.total_q, problem.seqlen_q, config.bm, problem.heads, problem.batch)
        if config.persistent:
            if not num_sms:
                raise ValueError(f"a persistent varlen kernel's grid needs the device's SM count, got {num_sms!r}")
            return (max(min(tiles, int(num_sms)), 1), 1, 1)
        return (tiles, 1, 1)
    return (varlen_grid_size(problem.seqlen_q, config.bm, problem.heads, problem.batch), 1, 1)


def mod_args(config: AttnConfig, problem, tensors) -> dict:
    """A score_mod / mask_mod kernel's arguments [D-score-mod]: scale_log2 = post_scale * log2(e)
    and mod_scale = softmax_scale * pre_scale (problem.mod_scales: (pre_scale, post_scale) of the
    call's ScoreMod) with a score_mod; each aux tensor `aux{i}` from `tensors` and its sizes from
    problem.aux_shapes."""
    args = {}
    if config.score_mod:
        pre, post = getattr(problem, "mod_scales", (1.0, 1.0))
        args.update(scale_log2=float(post) * LOG2E, mod_scale=float(problem.softmax_scale) * float(pre))
    shapes = tuple(getattr(problem, "aux_shapes", ()))
    spec = parse_aux_spec(config.aux)
    if len(shapes) != len(spec):
        raise ValueError(f"the kernel reads {len(spec)} aux tensors ({config.aux!r}), the problem has {len(shapes)}")
    for i, shape in enumerate(shapes):
        args[f"aux{i}"] = tensors[f"aux{i}"]
        args.update({f"aux{i}_n{d}": int(n) for d, n in enumerate(shape)})
    return args


def flops(batch: int, heads: int, seqlen_q: int, seqlen_k: int, head_dim: int, causal: bool,
          head_dim_v: int = 0) -> float:
    """Forward FLOPs as FlashAttention counts them: 2·B·H·Sq·Sk·(D + Dv) (4·B·H·Sq·Sk·D when Dv is D
    or 0), halved when causal."""
    f = 2.0 * batch * heads * seqlen_q * seqlen_k * (head_dim + (head_dim_v or head_dim))
    return f / 2 if causal else f


__all__ = ["AttnConfig", "default_config", "default_configs", "SHORT_SEQLEN_K", "SHORT_TILES", "is_short",
           "query_tiles", "dealt_tile", "causal_pair_slot", "section_tile", "section_shift", "L2_BYTES",
           "SECTION_L2_SHARE", "IntOps", "grid", "launch_args", "launch_params", "LAUNCH_PARAMS", "SOFTCAP_PARAMS", "SINK_PARAMS",
           "MOD_SCALE_PARAMS", "mod_args", "MOD_FIELDS", "OPTIONAL_FIELDS", "VARIANT_FIELDS",
           "VARLEN_PARAMS", "COMPACT_PARAMS", "PAGED_PARAMS", "varlen_grid", "TENSOR_PARAMS", "flops", "KERNEL", "HEAD_DIMS", "HEAD_DIM_PAIRS",
           "SPLIT_TILES", "TileLayout", "tile_layout", "DTYPES", "BMS",
           "TILES", "KNOBS", "TILE_FIELDS", "KNOB_FIELDS", "SFU_MOD_POLY_STRIDE", "FIXED_MAX_CAP", "FIXED_MAX_PARAMS",
           "SOFTCAP_FIXED_FIELDS", "softcap_rule", "softcap_choice", "fixed_max_log2"]
