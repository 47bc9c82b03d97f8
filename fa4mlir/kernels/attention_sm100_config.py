"""FA4Config: the tile, stage, tensor-memory and shared-memory plan of the sm_100a attention kernel.

MLIR-free (the host side and the tests import it). One CTA owns two Q tiles of MMA_M = 128 rows
(BM = 256 query rows of one head); both tiles stream the same K/V blocks of BN keys.

Tensor memory (128 lanes x 512 columns of 32 bits; row r of a Q tile lives in lane r):

    S0 = 0        S1 = BN              f32 scores of tile 0 / 1            (BN columns each)
    O0 = 2 BN     O1 = 2 BN + Dv_pad   f32 output accumulators             (Dv_pad columns each)
    P_i = S_i + BN / 2                 bf16/f16 probabilities, two per column (BN / 2 columns):
                                       they overlay the upper half of S_i, which the softmax has
                                       read into registers before it writes P_i
    C_i = S_i                          the correction columns (NUM_C_COLS: the O rescale factor
                                       per block, then the final row sum and scaled row max); the
                                       lower half of S_i, free once S_i is in registers

P_i and C_i alias S_i: the next S_i MMA may only overwrite them after P_i was read by O_i += P_i V
and C_i by the correction warpgroup. The MMA warp issues S_i(n+1) after O_i += P_i V(n) (tcgen05
MMAs of one thread execute in issue order), and it issues that only after the correction released
O_i, i.e. after it read C_i. The allocation is `tmem_used` rounded up to a power of two.

Shared memory: Q0 and Q1 (each MMA_M x Dqk_pad), a ring of `stages` K tiles (BN x Dqk_pad)
and one of V tiles (BN x Dv_pad), all 128B-swizzled in 64-column chunks; the mbarriers of the
pipelines; the 16-byte TMEM address slot. The epilogue writes O_i into Q_i's tile (Dv <= Dqk).

Roles (16 warps): softmax0 = warps 0-3, softmax1 = 4-7, correction = 8-11, mma = 12, load = 13
(warps 14-15 idle), with setmaxnreg budgets softmax 192, correction 80, other 48: 2 x 192 + 80 +
48 = 512 registers per thread-of-a-warpgroup = the 64K register file.

Field names follow the sm_90a AttnConfig: `head_dim` (Q and K), `head_dim_v` (V and O,
FlashAttention's word), `bm`, `bn`, `stages` (the K/V ring; 0 here = as many as fit, the resolved
depth is `resolved_stages`). Fields without an sm_90a twin keep their own names in snake_case
(`num_qk_stages`, `num_pv_stages`, `bk0`, `bk1`, `mma_m`). The kernel name keeps its `qk`/`ov`
tags: `attention_fwd_sm100_bf16_qk64_ov64_g4_bn128_s4` is head_dim 64, head_dim_v 64.

Note "Paged" (`page_size` > 0; issue 27's KV-cache operand, `[D-sm100-paged]`): K and V come from a
page pool [num_pages, page_size, kv_heads, D] through a page table [batch, max_pages] int32, and each
sequence's length from cache_seqlens[batch] (int32, on the device) in place of seqlen_k
(PAGED_LAUNCH_PARAMS). A K/V tile of BN keys is cut into BN / box_rows TMA boxes of box_rows =
gcd(BN, page_size) rows, each inside one page (common.paging, note "Box rows"); a box that starts at
or past the length aims at page num_pages (outside the pool: TMA zero-fills it); the load warp looks a
tile's pages up once for K and V within its 48 registers (common.paged_rows, note "Load warp
registers": the shape of the lookups decided whether ptxas spilled). Boxes of >= MIN_PAGED_BOX_ROWS
rows (page sizes that are multiples of 16) take this route on both CTAs. Any other page size (1..15,
and those with gcd(BN, page_size) < 16, e.g. 24) is fetched row by row (`gather`, paging.fetch_plan's
CP_ASYNC_GATHER plan) on the decode route only: its free warpgroup 4-7 (softmax1's warps and 192
registers) looks each tile's rows up once and copies them with 16-byte loads and shared stores into
the layout a TMA box gives (common.paged_rows, note "Row gather"); k and v are then pointers to the
pools (PAGED_GATHER_LAUNCH_PARAMS). The two-Q-tile CTA refuses those pages: only the 48-register warps
14-15 are free there, and ptxas spilled the gather at page 5. TMA gather4 (tile::gather4) is not built.

Note "FP8" (`kv_dtype="e4m3"`, `kv_scale` tensor | kv_head | block; decode route only): K and V are
e4m3 with float32 scales (value = e4m3 x scale) per tensor, per KV head or per (page, KV head) (paged
caches only), the layouts of the sm_90a decode (attention/kvcache.py). Q and O stay bf16/f16. The load
warp brings e4m3 tiles by TMA into rings k8/v8 (smem_plan's `k8`, `v8`); the convert warpgroup (warps
4-7) writes round(e4m3 x scale) in Q's dtype into the K/V stages the MMA reads, V rows past the length as
zeros (attention_sm100_kv, its module note says why and what rounding the reference must repeat).
FP8 with a row gather (page sizes not multiples of 16) is refused.

Note "Decode" (`num_q_tiles` 1 with `fuse_gqa`): one Q tile of MMA_M rows per CTA holding the
`group` query heads of one KV head, packed as row r = token (r // group), head (r % group), so each
K/V tile is read once per KV head. Q arrives and O leaves by one TMA box per 64-column chunk of
(64, group, MMA_M // group, 1) over [batch, seqlen_q, heads, D]: its rows land in exactly this
packed order. Grid (M tiles of MMA_M // group tokens, kv_heads, batch); roles softmax1 and the Q1
tile are absent (warps 4-7 idle), the MMA warp issues S0 <- Q0 Kn; O0 <- O0 + P0 Vn per block.

Note "Serving" (issue 28 item 6; the two-Q-tile prefill CTA over a contiguous K/V; the masks, softcap
and sinks also on the KV-cache routes: attention_sm100_kvserving, note "KV-cache serving"), each a
compile-time field, off by default (then `plain`: the kernel's original code, its cubins unchanged):
  * masks: causal, window_left/window_right and chunk spell common.mask_family's masks as AttnConfig
    does, in canonical form (mask_fields). Beyond causal, the CTA visits the KV blocks tile_blocks gives
    for its 256 rows, starting at block `first` (empty blocks before it are never loaded), and each
    softmax warpgroup runs the blocks its 128 rows see whole without a mask (key_window elsewhere);
  * softcap: scores become tanh(s * softcap_scale) (tanh.approx) before the mask, with scale_log2 =
    cap * log2(e), as the sm_90a kernel; sinks: a float32 [heads] logit joins each row's max and sum
    in the epilogue (a row that sees no key: O = 0, LSE = its sink);
  * varlen: q, k, v are the packed [total, heads, D] (FlashAttention's varlen layout, as one batch of
    TMA boxes at row cu_seqlens[b] + r), sequence b's lengths come from cu_seqlens_q/cu_seqlens_k on the
    device, CTAs past a sequence's rows do nothing, and O is stored row by row from the correction
    warpgroup's registers (a TMA box would run into the next sequence), LSE as [heads, total_q].
    With seqused_k, sequence b's keys are its first seqused_k[b] rows; the MMA thread zeroes the V rows
    past it in the tile that holds it (the paged kernel's note "Stale V rows").

Note "MLA" (issue 29 item 5): head_dim 192 (Q and K: 128 nope + 64 rope) with head_dim_v 128 (V, O),
MLA_HEAD_DIMS, on the plain two-Q-tile prefill CTA over a contiguous K/V, bf16 or f16, causal or not,
any GQA group, at the default exp2_poly_stride. S = Q K^T is 12 MMAs of K 16 over three 64-column
(128B-swizzle) chunks of the 192-wide Q and K tiles; O = P V is N = 128. TMEM: S0 S1 O0 O1 = 4 x 128
= all 512 columns. SMEM: Q0 + Q1 (96 KiB) + one K (48 KiB) and one V (32 KiB) stage = 176 KiB; a
second stage (256 KiB) does not fit, so the ring has one stage (TMA of block n + 1 waits for the MMAs
of block n). Note "MLA registers": with one stage every Q, K and V descriptor is loop-invariant, and
LLVM hoisted all 2 x 12 + 12 + 8 of them (64-bit each) into the 48-register MMA warp, which spilled
64 bytes; for MLA the MMA thread offsets the tiles' addresses by the lane field of the TMEM address
re-read from its slot (always 0), which keeps them in the loop: 0 spills. The default kernels do not
take that path (their code is unchanged). mla_configs() lists the 12 code shapes, compiled, verified
and interpreted by tests/test_attention_sm100_mla.py, kept out of supported_configs() (CI's sweep).

Note "MLA decode" (issue 29 item 5; plan, PTX ISA grounds and limits: attention_sm100_mla_decode and
common.mla_sm100): absorbed MLA 576/512 (V = the latent's first 512 columns) on the decode route, 64-row
tiles (mma_m; tcgen05.mma M = 64, Layout F) with O's two halves in TMEM's two lane halves (o_cols 256), BN
64, tile_heads = min(group, 64) heads packed, optional split_kv (float32 partials for the combine).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from math import gcd

from .common.constants import LOG2E, MAX_RESCALE_THRESHOLD, SM100_SMEM_PER_CTA
from .common.fields import ConfigError, ConfigTypeError, check_fields
from .common.mask_family import Mask, attention_mask, mask_fields
from .common.mla_sm100 import (MIN_PAGED_BOX_ROWS, MLA_DECODE_BN, MLA_DECODE_HEAD_DIMS, MLA_DECODE_M,  # noqa: F401
                               MLA_DECODE_PAGE_SIZES, MLA_DECODE_ROLE_REGS, MLA_DECODE_ROUTE_HINT, O_HALF_LANE,
                               SPLIT_OUT, MLADecodeGeometry, decode_configs, mla_decode_group_refusal,
                               mla_decode_params, mla_decode_refusal, mla_decode_tmem_plan, mla_prefill_refusal,
                               prefill_configs)
from .common.naming import softmax_knob_tags
from .common.paging import MAX_PAGE_SIZE, KVFetch, fetch_plan
from .common.tmem import TMEM_COLUMNS, TMEM_LANES, TMEM_SLOT_BYTES, tmem_alloc_columns

KERNEL = "attention_fwd_sm100"
# Compiled with cubin_backend nvjitlink-lto (kernels.KERNELS): NVVM IR linked whole-program, so
# the roles' setmaxnreg (192/192/80/48) holds; nvJitLink's PTX input drops it (ptxas C7504) and
# the softmax then spills ~2 KB at the 128-register entry budget.
DTYPES = ("bf16", "f16")
ELEM_BYTES = 2
MMA_M = TMEM_LANES              # rows of one Q tile = TMEM lanes; tcgen05.mma cta_group::1 M
NUM_Q_TILES = 2
MMA_K = 16                      # K of one tcgen05.mma kind::f16
SWIZZLE_BYTES = 128
CHUNK = SWIZZLE_BYTES // ELEM_BYTES   # 64 columns per 128-byte swizzle row
SMEM_CARVEOUT = SM100_SMEM_PER_CTA
MBARRIER_BYTES = 8
NUM_C_COLS = 2                  # correction columns per tile: [alpha | row sum, scaled row max]
MAX_KV_STAGES = 4
HEAD_DIMS = ((64, 64), (128, 128))   # (head_dim, head_dim_v) the kernel is built and checked for
MLA_HEAD_DIMS = ((192, 128),)         # MLA prefill (note "MLA"): built and checked apart from HEAD_DIMS
EXP2_POLY_STRIDES = (0, 2, 4, 8)
ROLES = (  # name, first warp, warps, setmaxnreg
    ("softmax0", 0, 4, 192),
    ("softmax1", 4, 4, 192),
    ("correction", 8, 4, 80),
    ("mma", 12, 1, 48),
    ("load", 13, 1, 48),
)
NUM_THREADS = 512
# pipelines: name -> stages (kv stages filled in per config). q, k, v: TMA -> mma; s_i: mma ->
# softmax_i; p_i: softmax_i -> mma; o_i: mma -> correction; c_i: softmax_i -> correction.
FIXED_PIPES = ("q", "s0", "s1", "p0", "p1", "o0", "o1", "c0", "c1")
TILE_PIPES = 4                  # s_i, p_i, o_i, c_i per Q tile (the q pipe is shared)
FP8_SCALES = ("tensor", "kv_head", "block")   # k_scale / v_scale granularities (note "FP8")


def _pad(x: int, to: int) -> int:
    return (x + to - 1) // to * to


def _answer(refusal: ConfigError | None) -> tuple[bool, str]:
    return (True, "") if refusal is None else (False, str(refusal))


@dataclass(frozen=True)
class FA4Config(MLADecodeGeometry):   # mla_decode, tile_heads, mma_m, o_cols: common.mla_sm100
    dtype: str = "bf16"
    head_dim: int = 128            # head dim of Q and K
    head_dim_v: int = 128          # head dim of V and O (MLA: 128 with head_dim 192)
    num_q_heads: int = 16
    num_kv_heads: int = 16         # GQA: num_q_heads is a multiple of it (group = the ratio)
    causal: bool = False           # bottom-right aligned, as FlashAttention 2+
    fuse_gqa: bool = False         # pack `group` heads into one Q tile: not implemented
    bn: int = 128                  # keys per K/V block
    stages: int = 0                # K and V ring depth; 0 = as many as SMEM holds (<= MAX_KV_STAGES)
    num_qk_stages: int = 1         # K split along the head dim into this many pipeline stages
    num_pv_stages: int = 1         # P.V split along the keys into this many pipeline stages
    swizzle: int = SWIZZLE_BYTES
    rescale_threshold: float = 8.0  # lazy rescale (log2 units); 0 = rescale O every block
    exp2_poly_stride: int = 4       # 1 in this many exp2 on the FMA pipes; 0 = all on the SFU
    num_q_tiles: int = NUM_Q_TILES  # 2: the prefill CTA (BM = 256); 1: the decode route (note "Decode")
    page_size: int = 0              # 0: K/V [batch, seqlen_k, kv_heads, D]; else a paged pool (note "Paged")
    # note "Serving": the mask family (common.mask_family, FlashAttention's window_size and
    # attention_chunk, canonical as AttnConfig spells them; -1 / 0: none), the score modifiers and
    # ragged lengths, each fixed at compile time; off, the kernel is the plain one (same cubin)
    window_left: int = -1
    window_right: int = -1
    chunk: int = 0
    softcap: bool = False           # s' = c tanh(s / c), c a launch argument (softcap_scale)
    sinks: bool = False             # a learned logit per head in each row's denominator (float32 [heads])
    varlen: bool = False            # packed [total, heads, D] with cu_seqlens_q / cu_seqlens_k (int32 [batch + 1])
    seqused_k: bool = False         # varlen: sequence b uses its first seqused_k[b] keys (int32 [batch])
    # note "FP8": an e4m3 K/V cache (decode route), dequantised by the convert warpgroup
    kv_dtype: str = ""              # "": K/V hold Q's dtype; "e4m3": FP8 with float32 k_scale / v_scale
    kv_scale: str = ""              # FP8 scale granularity: tensor | kv_head | block (per (page, KV head))
    # MLA decode only: split the cache's blocks over num_splits CTAs (a launch argument) writing float32
    # partials for the combine (note "MLA decode"); off, the key() omits it (existing keys unchanged)
    split_kv: bool = False

    def __post_init__(self):
        # 8 and 8.0 build the same kernel: one spelling in key() and the kernel name
        if type(self.rescale_threshold) is int:
            object.__setattr__(self, "rescale_threshold", float(self.rescale_threshold))

    # ---- derived tiles ----------------------------------------------------------------------
    @property
    def bm(self) -> int:
        """Query rows per CTA: num_q_tiles tiles of mma_m rows (decode: packed rows of `tile_heads` heads)."""
        return self.num_q_tiles * self.mma_m

    @property
    def decode(self) -> bool:
        """The 1-Q-tile route with the GQA group packed into M (note "Decode")."""
        return self.num_q_tiles == 1

    @property
    def mla(self) -> bool:
        """head_dim/head_dim_v an MLA prefill pair of MLA_HEAD_DIMS (note "MLA")."""
        return (self.head_dim, self.head_dim_v) in MLA_HEAD_DIMS

    @property
    def paged(self) -> bool:
        return self.page_size > 0

    @property
    def fp8(self) -> bool:
        """An e4m3 K/V cache (note "FP8")."""
        return self.kv_dtype == "e4m3"

    @property
    def mask(self) -> Mask:
        """The mask object (common.mask_family) of causal, the window and the chunk."""
        return attention_mask(self.causal, (self.window_left, self.window_right), self.chunk)

    @property
    def plain(self) -> bool:
        """No window or chunk, softcap, sinks or ragged lengths: the kernel's original code (note
        "Serving")."""
        return self.mask.is_legacy and not (self.softcap or self.sinks or self.varlen or self.seqused_k)

    @property
    def tile_tokens(self) -> int:
        """Query tokens per Q tile: MMA_M, or mma_m // tile_heads when the heads are packed into M."""
        return self.mma_m // self.tile_heads if self.decode else MMA_M

    @property
    def gather(self) -> bool:
        """Pages too small for per-page TMA boxes (fetch_plan's; MLA decode: < 16 rows): the row gather (note "Paged")."""
        return self.mla_gather or self.paged and fetch_plan(self.bn, self.page_size, "sm_100a").fetch is KVFetch.CP_ASYNC_GATHER

    @property
    def box_rows(self) -> int:
        """K/V rows per TMA box: BN, or gcd(BN, page_size) for a paged cache (note "Paged")."""
        return fetch_plan(self.bn, self.page_size, "sm_100a").box_rows if self.paged else self.bn

    @property
    def launch_params(self) -> tuple:
        """PAGED_LAUNCH_PARAMS for a paged cache, VARLEN_LAUNCH_PARAMS for ragged lengths, else
        LAUNCH_PARAMS; then SOFTCAP_PARAMS with softcap and SINK_PARAMS with sinks (note "Serving")."""
        base = PAGED_GATHER_LAUNCH_PARAMS if self.gather else PAGED_LAUNCH_PARAMS if self.paged else \
            VARLEN_LAUNCH_PARAMS if self.varlen else LAUNCH_PARAMS
        base = (*base, *(SEQUSED_PARAMS if self.seqused_k else ()))
        base = mla_decode_params(self, base)   # note "MLA decode": no v; split_kv's partials and num_splits
        return (*base, *(SOFTCAP_PARAMS if self.softcap else ()), *(SINK_PARAMS if self.sinks else ()),
                *(FP8_PARAMS if self.fp8 and not self.mla_fp8 else ()))

    @property
    def bk0(self) -> int:
        """Head-dim columns of one Q/K SMEM chunk (one 128-byte swizzle row)."""
        return CHUNK

    @property
    def bk1(self) -> int:
        """Keys of one P.V pipeline stage (the K extent of O += P V per stage)."""
        return self.bn // self.num_pv_stages

    @property
    def padded_head_dim(self) -> int:
        return _pad(self.head_dim, CHUNK)

    @property
    def padded_head_dim_v(self) -> int:
        return _pad(self.head_dim_v, CHUNK)

    @property
    def group(self) -> int:
        return self.num_q_heads // self.num_kv_heads if self.num_kv_heads else 0

    @property
    def resolved_stages(self) -> int:
        """`stages`, or the deepest ring that fits when it is 0."""
        if self.stages:
            return self.stages
        for stages in range(MAX_KV_STAGES, 0, -1):
            if self._smem_total(stages) <= SMEM_CARVEOUT:
                return stages
        return 1

    # ---- tensor memory plan -----------------------------------------------------------------
    def tmem_plan(self) -> dict:
        if self.mla_decode:   # note "MLA decode": O's two halves in lane halves 0 / 16, then S (twice)
            return mla_decode_tmem_plan(self)
        if self.decode:   # one tile: S0, then O0 (P0 and C0 alias S0 as in the two-tile plan)
            used = self.bn + self.padded_head_dim_v
            return {"S0": 0, "O0": self.bn, "P0": self.bn // 2, "C0": 0, "used": used,
                    "alloc": tmem_alloc_columns(used)}
        s0, s1 = 0, self.bn
        o0 = 2 * self.bn
        o1 = o0 + self.padded_head_dim_v
        used = o1 + self.padded_head_dim_v
        return {"S0": s0, "S1": s1, "O0": o0, "O1": o1, "P0": s0 + self.bn // 2, "P1": s1 + self.bn // 2,
                "C0": s0, "C1": s1, "used": used, "alloc": tmem_alloc_columns(used)}

    @property
    def tmem_used(self) -> int:
        return self.tmem_plan()["used"]

    # ---- shared memory plan -----------------------------------------------------------------
    def _tiles(self, stages: int) -> dict:
        q = self.mma_m * self.padded_head_dim * ELEM_BYTES
        k = self.bn * self.padded_head_dim * ELEM_BYTES
        # MLA decode: V is the first 512 columns of the K tile, read in place (note "MLA decode")
        v = 0 if self.mla_decode else self.bn * self.padded_head_dim_v * ELEM_BYTES
        rings = (4 - 2 * self.mla_decode) if self.fp8 else 1 if self.mla_decode else 2   # FP8: e4m3 rings k8 (v8)
        barriers = 2 * (1 + TILE_PIPES * self.num_q_tiles + rings * stages) * MBARRIER_BYTES
        plan = {"q_tile": q, "k_tile": k, "v_tile": v, "q": self.num_q_tiles * q, "k": stages * k, "v": stages * v,
                "barriers": barriers, "tmem_slot": TMEM_SLOT_BYTES}
        if self.gather:   # the row gather's pool rows, int32 [BN] (paged_rows, note "Row gather")
            plan["gather_rows"] = self.bn * 4
        if self.fp8:   # e4m3 tiles, unswizzled: row r at r * D bytes (MLA: FlashMLA's 656-byte rows, no V)
            plan.update(self.fp8_tiles(stages))
        return plan

    def _smem_total(self, stages: int) -> int:
        t = self._tiles(stages)
        extra = t.get("k8", 0) + t.get("v8", 0) + t.get("gather_rows", 0)
        return t["q"] + t["k"] + t["v"] + extra + t["barriers"] + t["tmem_slot"]

    def smem_plan(self) -> dict:
        """Byte sizes of every SMEM region and their total (tiles are 1024-byte multiples, so the
        1024-aligned tiles pack without padding; barriers and the slot follow)."""
        stages = self.resolved_stages
        plan = self._tiles(stages)
        plan["stages"] = stages
        plan["total"] = self._smem_total(stages)
        return plan

    @property
    def smem_used(self) -> int:
        return self.smem_plan()["total"]

    # ---- support ----------------------------------------------------------------------------
    def plan_fits(self) -> tuple[bool, str]:
        """(True, "") when the tile plan is well formed and fits the hardware (TMEM columns, SMEM
        carve-out, MMA shapes), else (False, the reason). This is the planning question only: a plan
        that fits (MLA 192/128, BN 64, ...) is not necessarily one the kernel is built and checked
        for; `supported()` answers that."""
        return _answer(self._plan_refusal())

    def _plan_refusal(self) -> ConfigError | None:
        """plan_fits()'s reason as the typed error validate() raises (None when the plan fits)."""
        try:
            check_fields(self, {"dtype": DTYPES, "exp2_poly_stride": EXP2_POLY_STRIDES})
        except ConfigTypeError as exc:
            return exc
        if self.dtype not in DTYPES:
            return ConfigError(f"dtype {self.dtype!r}: the kernel takes {DTYPES} (tcgen05.mma kind::f16)")
        for name in ("head_dim", "head_dim_v"):
            d = getattr(self, name)
            if d < 16 or d % 16:
                return ConfigError(f"{name}={d}: head dims are multiples of 16 (one MMA K step)")
        if self.head_dim_v > self.head_dim:
            return ConfigError(f"head_dim_v={self.head_dim_v} > head_dim={self.head_dim}: the epilogue stages O "
                               f"in Q's SMEM tile")
        if self.padded_head_dim_v > 256 and not (self.mla_decode and self.decode):
            return ConfigError(f"head_dim_v={self.head_dim_v}: O += P V is one MMA of N = "
                               f"{self.padded_head_dim_v} > 256" + (MLA_DECODE_ROUTE_HINT if self.mla_decode else ""))
        if self.num_q_heads < 1 or self.num_kv_heads < 1 or self.num_q_heads % self.num_kv_heads:
            return ConfigError(f"num_q_heads={self.num_q_heads} must be a positive multiple of num_kv_heads="
                               f"{self.num_kv_heads} (GQA/MQA)")
        if self.bn % 32 or not 32 <= self.bn <= 256:
            return ConfigError(f"bn={self.bn}: a multiple of 32 in [32, 256] (S = Q K^T is one MMA of N = BN)")
        if self.swizzle != SWIZZLE_BYTES:
            return ConfigError(f"swizzle={self.swizzle}: only the 128-byte swizzle is implemented")
        if self.exp2_poly_stride < 0 or self.exp2_poly_stride == 1:
            return ConfigError(f"exp2_poly_stride={self.exp2_poly_stride}: 0 (SFU only) or >= 2")
        if not 0 <= self.rescale_threshold <= MAX_RESCALE_THRESHOLD:
            return ConfigError(f"rescale_threshold={self.rescale_threshold} must be in [0, {MAX_RESCALE_THRESHOLD}] "
                               f"(log2 units; P reaches 2**threshold and must fit f16, whose largest finite "
                               f"is 65504 < 2**16)")
        if self.stages < 0:
            return ConfigError(f"stages={self.stages} must be >= 0 (0 = as many as fit)")
        if self.num_q_tiles not in (1, NUM_Q_TILES):
            return ConfigError(f"num_q_tiles={self.num_q_tiles}: 2 (prefill) or 1 (the decode route)")
        if self.decode and self.mla_decode and (refusal := mla_decode_group_refusal(self)) is not None:
            return refusal
        if self.decode and not self.mla_decode and (self.group > MMA_M or MMA_M % self.group):
            return ConfigError(f"group={self.group}: the decode route packs the group into {MMA_M} rows, so the "
                               f"group must divide {MMA_M}")
        if self.page_size < 0 or self.page_size > MAX_PAGE_SIZE:
            return ConfigError(f"page_size={self.page_size}: 0 (contiguous K/V) or a page size in 1..{MAX_PAGE_SIZE}")
        if self.num_qk_stages < 1 or self.num_pv_stages < 1:
            return ConfigError(f"num_qk_stages={self.num_qk_stages}, num_pv_stages={self.num_pv_stages}: "
                               f"each must be >= 1")
        refusal = self._mask_refusal()
        if refusal is not None:
            return refusal
        tm = self.tmem_plan()
        if tm["used"] > TMEM_COLUMNS:
            return ConfigError(f"TMEM: S0 + S1 ({2 * self.bn}) + O0 + O1 ({2 * self.padded_head_dim_v}) = "
                               f"{tm['used']} columns > {TMEM_COLUMNS}; two Q tiles of head dim {self.head_dim_v} "
                               f"do not fit (a smaller BN only helps while O0 + O1 < {TMEM_COLUMNS})")
        if NUM_C_COLS > self.bn // 2:
            return ConfigError(f"bn={self.bn}: the {NUM_C_COLS} correction columns must fit below P in S")
        total = self.smem_used
        if total > SMEM_CARVEOUT:
            return ConfigError(f"SMEM: {total} bytes with {self.resolved_stages} K/V stage(s) > the sm_100a "
                               f"carve-out {SMEM_CARVEOUT}")
        return None

    def _mask_refusal(self) -> ConfigError | None:
        """ConfigError unless the mask fields are in range and canonical (one config per mask)."""
        if self.window_left < -1 or self.window_right < -1 or self.chunk < 0:
            return ConfigError(f"window_left and window_right must be >= -1 (-1: unbounded) and chunk >= 0 (0: "
                               f"none), got window_left={self.window_left}, window_right={self.window_right}, "
                               f"chunk={self.chunk}")
        want = mask_fields(self.mask)
        got = {k: getattr(self, k) for k in want}
        if got != want:
            return ConfigError(f"the mask fields {got} are not in canonical form; the same mask is {want} "
                               f"(causal bounds the window's right side at 0, window (-1, 0) is causal=True)")
        return None

    def _fp8_refusal(self) -> ConfigError | None:
        """ConfigError unless kv_dtype / kv_scale name a built FP8 route (note "FP8") or none."""
        if self.kv_dtype not in ("", "e4m3"):
            return ConfigError(f"kv_dtype={self.kv_dtype!r}: '' (K/V in Q's dtype) or 'e4m3' (an FP8 cache)")
        scales = (self.MLA_FP8_SCALE,) if self.mla_decode else FP8_SCALES    # MLA decode: FlashMLA's FP8 rows
        if (self.kv_scale not in scales) if self.fp8 else self.kv_scale:
            return ConfigError(f"kv_scale={self.kv_scale!r}: one of {scales} for kv_dtype='e4m3', '' otherwise")
        if self.fp8 and not self.decode:
            return ConfigError("kv_dtype='e4m3' with num_q_tiles=2: the FP8 cache is built on the decode route "
                               "(num_q_tiles=1, fuse_gqa=True), whose free warps 4-7 convert it; the two-Q-tile "
                               "prefill CTA has no warpgroup to spare")
        if self.fp8 and self.kv_scale == "block" and not self.paged:
            return ConfigError("kv_scale='block' with page_size=0: per-(page, KV head) scales are built for a paged "
                               "cache; a contiguous cache's token-block scales are not (use 'tensor' or 'kv_head')")
        return None

    def supported(self) -> tuple[bool, str]:
        """(True, "") when the kernel is built for this config and every such config is checked to
        compile with 0 spills (tests/test_attention_sm100.py compiles all of supported_configs()),
        else (False, the reason). The space: bf16/f16, head dim 64 or 128 (qk = ov), BN 128, causal
        or not, any GQA group, stages 0 (as many as fit) or 2.. what fits, exp2_poly_stride
        in EXP2_POLY_STRIDES, rescale_threshold in [0, MAX_RESCALE_THRESHOLD]; every field of its
        annotated type. The KV-cache operand's routes on top: page_size 0 or one whose boxes hold >=
        MIN_PAGED_BOX_ROWS rows (note "Paged"), and num_q_tiles 1 with fuse_gqa (note "Decode"), for a
        group that divides 128; their code shapes (paged_configs()) are compiled by
        tests/test_attention_sm100_paged.py. On the decode route also any page size 1..256 (the row
        gather, compiled by tests/test_attention_sm100_gather.py) and an e4m3 cache with kv_scale
        tensor, kv_head or block (note "FP8"; tests/test_attention_sm100_kv.py), each a few code
        shapes compiled and interpreted, not every combination. Note "Serving"'s fields on the two-tile contiguous
        prefill kernel (any window, chunk, softcap, sinks, varlen on top of the space above): the 12
        code shapes of serving_configs() are compiled, verified and interpreted by
        tests/test_attention_sm100_serving.py; the other combinations are accepted unchecked. The
        window, chunk, softcap and sinks also on the KV-cache routes (the paged prefill CTA, the decode
        route: contiguous, paged boxes, row gather, FP8; note "KV-cache serving"): the 9 code shapes of
        attention_sm100_kvserving.kvcache_serving_configs() are compiled, verified and interpreted by
        tests/test_attention_sm100_kvserving.py, the rest accepted unchecked; varlen/seqused_k refused. MLA
        prefill (head_dim 192, head_dim_v 128, note "MLA"): the plain contiguous two-tile prefill CTA,
        stages 0 or 1, the default exp2_poly_stride; its 12 code shapes (mla_configs()) are compiled,
        verified and interpreted by tests/test_attention_sm100_mla.py, outside supported_configs(). MLA decode
        (576/512, note "MLA decode"; FP8 rows: kv_scale "row"): common.mla_sm100's limits, tested apart likewise."""
        return _answer(self._refusal())

    def _refusal(self) -> ConfigError | None:
        """supported()'s reason as the typed error validate() raises (None when supported)."""
        refusal = self._plan_refusal()
        if refusal is not None:
            return refusal
        if self.mla or self.mla_decode:
            refusal = mla_prefill_refusal(self) if self.mla else mla_decode_refusal(self)
            if refusal is not None:
                return refusal
        elif (self.head_dim, self.head_dim_v) not in HEAD_DIMS:
            mla = " (MLA: its plan fits, see plan_fits(); the kernel is not built for it)" \
                if self.head_dim != self.head_dim_v else ""
            return ConfigError(f"head_dim/head_dim_v {self.head_dim}/{self.head_dim_v}: the kernel is built and "
                               f"checked for {', '.join(f'{a}/{b}' for a, b in HEAD_DIMS + MLA_HEAD_DIMS)}{mla}")
        if self.bn != 128 and not self.mla_decode:
            return ConfigError(f"bn={self.bn}: the kernel is built and checked for bn=128 only (the plan fits, "
                               f"see plan_fits(), but that kernel was never compiled)")
        if self.fuse_gqa != self.decode:
            return ConfigError(f"fuse_gqa={self.fuse_gqa} with num_q_tiles={self.num_q_tiles}: the group is packed "
                               f"into M only on the 1-Q-tile decode route (num_q_tiles=1, fuse_gqa=True); two Q "
                               f"tiles take one head each")
        if self.paged and not self.gather and self.box_rows < MIN_PAGED_BOX_ROWS:
            return ConfigError(f"page_size={self.page_size}: a K/V tile of bn={self.bn} would take boxes of "
                               f"gcd(bn, page_size) = {gcd(self.bn, self.page_size)} rows; per-page TMA boxes are built "
                               f"for >= {MIN_PAGED_BOX_ROWS} rows")
        if self.gather and not self.decode:
            return ConfigError(f"page_size={self.page_size} with num_q_tiles={self.num_q_tiles}: pages that take no "
                               f"per-page TMA box of >= {MIN_PAGED_BOX_ROWS} rows (gcd(bn, page_size) < "
                               f"{MIN_PAGED_BOX_ROWS}) are fetched by the row gather of the decode route (num_q_tiles=1, "
                               f"fuse_gqa=True), on its free warps 4-7; the two-Q-tile CTA has only 48-register warps "
                               f"to spare, where ptxas spilled (page 5, head dim 128)")
        if self.gather and self.fp8:
            return ConfigError(f"page_size={self.page_size} with kv_dtype='e4m3': an FP8 cache arrives by per-page TMA "
                               f"boxes (>= {MIN_PAGED_BOX_ROWS} rows, page sizes that are multiples of "
                               f"{MIN_PAGED_BOX_ROWS}); the row gather of smaller pages is built for bf16/f16 caches")
        refusal = self._fp8_refusal()
        if refusal is not None:
            return refusal
        if self.split_kv and not self.mla_decode:
            return ConfigError("split_kv=True: split-KV partials are built for MLA decode (576/512) only on sm_100a")
        if (self.varlen or self.seqused_k) and (self.paged or self.decode):
            return ConfigError(f"{'varlen' if self.varlen else 'seqused_k'} with page_size={self.page_size}, num_q_tiles="
                               f"{self.num_q_tiles}: packed ragged Q/K (cu_seqlens, seqused_k) are built for the contiguous "
                               f"two-Q-tile prefill kernel only (page_size=0, num_q_tiles=2); the KV-cache routes take ragged "
                               f"key lengths from cache_seqlens (attention_sm100_kvserving, note \"KV-cache serving\")")
        if self.seqused_k and not self.varlen:
            return ConfigError("seqused_k=True needs varlen=True (it bounds each packed sequence's keys)")
        if self.num_qk_stages != 1 or self.num_pv_stages != 1:
            return ConfigError(f"num_qk_stages={self.num_qk_stages}, num_pv_stages={self.num_pv_stages}: only 1 "
                               f"and 1 are implemented (whole K and V tiles per pipeline stage)")
        if self.stages == 1 and not self.mla:
            return ConfigError("stages=1: one K/V stage serialises TMA and MMA, and at head dim 128 the "
                               "kernel spills 8 bytes; use 0 (as many as fit) or >= 2")
        if self.exp2_poly_stride not in EXP2_POLY_STRIDES:
            return ConfigError(f"exp2_poly_stride={self.exp2_poly_stride}: the kernel is checked for "
                               f"{EXP2_POLY_STRIDES} (0 = every exp2 on the SFU)")
        return None

    def name_suffix(self) -> str:
        """Kernel-name tags of softmax knobs off their defaults ('' for the shipped configs)."""
        defaults = FA4Config()
        return softmax_knob_tags(self.exp2_poly_stride, self.rescale_threshold, defaults.exp2_poly_stride,
                                 defaults.rescale_threshold)

    def validate(self) -> "FA4Config":
        """The config, or the typed reason supported() gives: ConfigTypeError for a field of the
        wrong type, else ConfigError (both ValueErrors)."""
        refusal = self._refusal()
        if refusal is not None:
            raise type(refusal)(f"FA4Config not supported: {refusal}")
        return self

    def description(self) -> str:
        tm, sm = self.tmem_plan(), self.smem_plan()
        tmem = " ".join(f"{k}={tm[k]}" for k in ("S0", "S1", "O0", "O1", "P0", "P1", "C0", "C1") if k in tm)
        route = (f" | {self.serving_tag().lstrip('_').replace('_', ' ')}" if not self.plain else "") + \
            (f" | decode: {self.group} heads x {self.tile_tokens} tokens packed" if self.decode else "") + \
            (f" | paged {self.page_size} ({self.bn // self.box_rows} boxes of {self.box_rows} rows)"
             if self.paged and not self.gather else f" | paged {self.page_size} (row gather)"
             if self.paged else "") + \
            (f" | e4m3 K/V, {self.kv_scale} scales, converted to {self.dtype}" if self.fp8 else "")
        return (f"FA4Config {self.dtype} qk{self.head_dim}/ov{self.head_dim_v} heads {self.num_q_heads}/"
                f"{self.num_kv_heads} (group {self.group}){' causal' if self.causal else ''} "
                f"bm={self.bm} ({self.num_q_tiles}x{MMA_M}) bn={self.bn} bk0={self.bk0} bk1={self.bk1} "
                f"stages kv={sm['stages']} qk={self.num_qk_stages} pv={self.num_pv_stages} | "
                f"TMEM {tmem} used {tm['used']}/{TMEM_COLUMNS} alloc {tm['alloc']} | "
                f"SMEM {sm['total']}/{SMEM_CARVEOUT} B | swizzle {self.swizzle}B | "
                f"exp2 poly 1/{self.exp2_poly_stride or 'none'} | rescale threshold {self.rescale_threshold}{route}")

    def name(self) -> str:   # attention_fwd_sm100.build's; plan.config_kernel finds a bundle's entry by it
        return (f"{KERNEL}_{self.dtype}_qk{self.head_dim}_ov{self.head_dim_v}_g{self.group}{self.mask.tag()}_bn{self.bn}"
                f"_s{self.smem_plan()['stages']}{self.name_route()}{self.name_suffix()}")

    def name_route(self) -> str:
        """Kernel-name tags of the KV operand, the decode route, ragged lengths and the score modifiers
        ('' for the dense prefill kernel)."""
        return (f"_paged{self.page_size}" if self.paged else "") + ("_decode" if self.decode else "") + \
            ("_varlen" if self.varlen else "") + ("_used" if self.seqused_k else "") + \
            ("_softcap" if self.softcap else "") + ("_sink" if self.sinks else "") + \
            (f"_e4m3_{self.kv_scale}" if self.fp8 else "") + ("_split" if self.split_kv else "")

    def serving_tag(self) -> str:
        """The tags of note "Serving"'s features: the mask beyond causal, ragged lengths, the score
        modifiers ('' for a plain config)."""
        mask = "" if self.mask.is_legacy else self.mask.tag()
        return mask + ("_varlen" if self.varlen else "") + ("_used" if self.seqused_k else "") + ("_softcap" if self.softcap else "") + \
            ("_sink" if self.sinks else "")

    def key(self) -> dict:
        key = {"kernel": KERNEL, **asdict(self)}
        if not self.split_kv:     # added after the keys were in use: absent when off
            del key["split_kv"]
        return key

    @classmethod
    def from_key(cls, key: dict) -> "FA4Config":
        """The config a key() (or a bundle manifest's config, which adds the compile options) describes."""
        if key.get("kernel", KERNEL) != KERNEL:
            raise ValueError(f"not an {KERNEL} config: kernel {key.get('kernel')!r}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in key.items() if k in names})


def grid(config: "FA4Config", problem, num_splits: int = 1) -> tuple[int, int, int]:
    """One CTA per (two Q tiles = 256 query rows, head, batch); decode: per (tile_tokens query
    tokens of the group's heads, KV head, batch); MLA decode: per (tile_tokens tokens, tile_heads query
    heads, batch). `problem`: anything with batch, heads, seqlen_q (attention.AttnProblem)."""
    if config.decode:
        rows = config.tile_tokens
        tiles = (problem.seqlen_q + rows - 1) // rows * (num_splits if config.split_kv else 1)
        return (tiles, problem.heads // config.tile_heads, problem.batch)
    bm = NUM_Q_TILES * MMA_M
    return ((problem.seqlen_q + bm - 1) // bm, problem.heads, problem.batch)


# The launch contract: the kernel's parameters, (name, kind) in PTX order; the kernel declares them
# from this table and launch_args fills them by name. The GQA group is compiled in (FA4Config.group).
TENSOR_PARAMS = (("q", "tma"), ("k", "tma"), ("v", "tma"), ("o", "tma"), ("lse", "ptr"))
LAUNCH_PARAMS = (*TENSOR_PARAMS, ("seqlen_q", "i32"), ("seqlen_k", "i32"), ("scale_log2", "f32"))
# A paged cache (note "Paged"): k, v are the pools [num_pages, page_size, kv_heads, D]; the page table
# [batch, max_pages] (row stride page_table_stride elements) and cache_seqlens [batch] int32 replace
# seqlen_k.
PAGED_TENSOR_PARAMS = (*TENSOR_PARAMS, ("page_table", "ptr"), ("cache_seqlens", "ptr"))
PAGED_LAUNCH_PARAMS = (*PAGED_TENSOR_PARAMS, ("seqlen_q", "i32"), ("num_pages", "i32"),
                       ("page_table_stride", "i32"), ("scale_log2", "f32"))
# Pages too small for per-page TMA boxes (note "Paged": the row gather): k and v are pointers to the
# pools, contiguous [num_pages, page_size, kv_heads, D] (a row of kv_heads x D elements), not TMA tensors.
PAGED_GATHER_LAUNCH_PARAMS = tuple((n, "ptr") if n in ("k", "v") else (n, kind) for n, kind in PAGED_LAUNCH_PARAMS)
# Ragged lengths (note "Serving"): q, k, v are TMA tensors over the packed [total, heads, D] (viewed as
# [1, total, heads, D]); o a plain pointer to the packed [total_q, heads, Dv] (each row is stored by its
# own thread, so no store crosses into the next sequence); lse float32 [heads, total_q] (FlashAttention's
# varlen layout); cu_seqlens_q, cu_seqlens_k int32 [batch + 1], read on the device.
VARLEN_TENSOR_PARAMS = (("q", "tma"), ("k", "tma"), ("v", "tma"), ("o", "ptr"), ("lse", "ptr"),
                        ("cu_seqlens_q", "ptr"), ("cu_seqlens_k", "ptr"))
VARLEN_LAUNCH_PARAMS = (*VARLEN_TENSOR_PARAMS, ("total_q", "i32"), ("scale_log2", "f32"))
# seqused_k (FlashAttention's): int32 [batch], sequence b's keys are its first seqused_k[b] packed rows
# (the rest, up to cu_seqlens_k[b + 1], may hold anything: V rows past it are zeroed in SMEM, as the
# paged kernel's stale rows).
SEQUSED_PARAMS = (("seqused_k", "ptr"),)
# The score modifiers' parameters, after the rest (as the sm_90a kernel's): softcap_scale = softmax_scale /
# softcap, the factor before the tanh; sinks, float32 [heads] logits (natural-log units).
SOFTCAP_PARAMS = (("softcap_scale", "f32"),)
SINK_PARAMS = (("sinks", "ptr"),)
# An FP8 cache (note "FP8"), last: float32 k_scale and v_scale, [1] (tensor), [kv_heads] (kv_head) or
# [num_pages, kv_heads] (block); value = e4m3 x scale.
FP8_PARAMS = (("k_scale", "ptr"), ("v_scale", "ptr"))


def _score_args(config: "FA4Config", problem, tensors) -> dict:
    """scale_log2 (softmax_scale * log2(e), or softcap * log2(e) with softcap: the kernel keeps tanh(s *
    softcap_scale) in units of the cap), softcap_scale and sinks as the config takes them."""
    args = {"scale_log2": float(problem.softmax_scale) * LOG2E}
    if config.softcap:
        cap = float(getattr(problem, "softcap", 0.0) or 0.0)
        if not cap > 0:
            raise ValueError(f"a softcap kernel needs problem.softcap > 0, got {cap!r}")
        args.update(scale_log2=cap * LOG2E, softcap_scale=float(problem.softmax_scale) / cap)
    if config.sinks:
        args["sinks"] = tensors["sinks"]
    if config.fp8 and not config.mla_fp8:   # FlashMLA's FP8 rows carry their scales
        args.update(k_scale=tensors["k_scale"], v_scale=tensors["v_scale"])
    if config.split_kv:   # the combine's workspaces; problem.num_splits CTAs share each sequence's blocks
        splits = int(getattr(problem, "num_splits", 0) or 0)
        if splits < 1:
            raise ValueError(f"a split_kv kernel needs problem.num_splits >= 1, got {splits}")
        args.update(o_partial=tensors["o_partial"], lse_partial=tensors["lse_partial"], num_splits=splits)
    return args


def _wanted(config: "FA4Config") -> set:
    """The parameter names of the config's launch contract."""
    return {name for name, _ in config.launch_params}


def launch_args(config: "FA4Config", problem, tensors) -> dict:
    """The parameters by name (LAUNCH_PARAMS): TMA tensors q, k, v, o ([B, S, H, D]) and the LSE
    pointer (float32 [B, H, Sq]) from `tensors`; seqlen_q, seqlen_k and softmax_scale * log2(e)
    from `problem`."""
    if config.paged:
        raise ValueError("a paged config's parameters come from paged_launch_args (page table, cache_seqlens)")
    if config.varlen:
        raise ValueError("a varlen config's parameters come from varlen_launch_args (cu_seqlens_q, cu_seqlens_k)")
    args = {name: tensors[name] for name, _ in TENSOR_PARAMS if name in _wanted(config)}
    args.update(seqlen_q=int(problem.seqlen_q), seqlen_k=int(problem.seqlen_k), **_score_args(config, problem, tensors))
    return {name: args[name] for name, _ in config.launch_params}


def varlen_launch_args(config: "FA4Config", problem, tensors, *, total_q: int) -> dict:
    """VARLEN_LAUNCH_PARAMS (+ the score modifiers') by name: `tensors` q, k, v (TMA over the packed
    [total, heads, D]), o (pointer to the packed [total_q, heads, Dv]), lse (float32 [heads, total_q]),
    cu_seqlens_q, cu_seqlens_k (int32 [batch + 1]), sinks with sinks; `problem` gives softmax_scale
    (and softcap); its seqlen_q is max_seqlen_q (grid() reads it), its seqlen_k is not read."""
    if not config.varlen:
        raise ValueError("a config without varlen takes launch_args")
    args = {name: tensors[name] for name, _ in VARLEN_TENSOR_PARAMS + (SEQUSED_PARAMS if config.seqused_k else ())}
    args.update(total_q=int(total_q), **_score_args(config, problem, tensors))
    return {name: args[name] for name, _ in config.launch_params}


def paged_launch_args(config: "FA4Config", problem, tensors, *, num_pages: int, page_table_stride: int) -> dict:
    """PAGED_LAUNCH_PARAMS by name: `tensors` q, o ([B, Sq, H, D]), k, v (the pools), lse, page_table,
    cache_seqlens, and k_scale, v_scale for an FP8 cache; `problem` gives seqlen_q and softmax_scale (its
    seqlen_k is not read: each sequence's length is cache_seqlens[b], read on the device)."""
    if not config.paged:
        raise ValueError("a contiguous config's parameters come from launch_args")
    if config.decode and problem.heads != config.num_q_heads:
        raise ValueError(f"decode: problem heads {problem.heads} != the config's num_q_heads {config.num_q_heads}")
    args = {name: tensors[name] for name, _ in PAGED_TENSOR_PARAMS if name in _wanted(config)}
    args.update(seqlen_q=int(problem.seqlen_q), num_pages=int(num_pages), page_table_stride=int(page_table_stride),
                **_score_args(config, problem, tensors))
    return {name: args[name] for name, _ in config.launch_params}


def configs() -> list[FA4Config]:
    """The configs the kernel ships for (compiled and checked deviceless in CI)."""
    return [FA4Config(dtype=dt, head_dim=d, head_dim_v=d, causal=c, num_q_heads=16, num_kv_heads=kv)
            for dt in DTYPES for d in (64, 128) for c in (False, True) for kv in (16, 4)
            if (dt, kv) != ("f16", 4)]


def group_class(group: int) -> int:
    """The code shape of `head // group` in the kernel: 1 (no divide), a power of two (a shift) or
    any other (a multiply by a magic constant and a shift); groups of one class differ only in
    immediate operands."""
    return 1 if group == 1 else 4 if group & (group - 1) == 0 else 3


def code_shape(cfg: FA4Config) -> tuple:
    """What of a supported config changes the generated code beyond immediate operands (the GQA
    group's divisor, rescale_threshold's value, num_q_heads): two configs of one shape compile to
    the same instructions."""
    shape = (cfg.dtype, cfg.head_dim, cfg.head_dim_v, cfg.causal, group_class(cfg.group), cfg.resolved_stages,
             cfg.exp2_poly_stride, cfg.num_q_tiles, cfg.paged and cfg.bn // cfg.box_rows, cfg.kv_scale)
    if cfg.split_kv:     # float32 partials in place of the TMA store (note "MLA decode")
        shape = (*shape, "split_kv")
    if cfg.plain:
        return shape
    mask = tuple(type(p).__name__ for p in cfg.mask.parts) if not cfg.mask.is_legacy else ()
    return (*shape, mask, cfg.softcap, cfg.sinks, cfg.varlen, cfg.seqused_k)


def supported_configs() -> list[FA4Config]:
    """One config of every code shape in the supported space (see FA4Config.supported()), the shipped one where
    configs() has that shape (the sweep's compile of it is the one the shipped checks read): what the
    deviceless test compiles to prove that every supported config builds with 0 spills."""
    out = []
    for dtype in DTYPES:
        for qk, ov in HEAD_DIMS:
            depths = [n for n in range(2, 1 + SMEM_CARVEOUT // (MMA_M * ELEM_BYTES * (qk + ov)))
                      if FA4Config(head_dim=qk, head_dim_v=ov, stages=n).plan_fits()[0]]
            for stages in depths:
                for causal in (False, True):
                    for group in (1, 4, 3):
                        for stride in EXP2_POLY_STRIDES:
                            cfg = FA4Config(dtype=dtype, head_dim=qk, head_dim_v=ov, causal=causal,
                                            num_q_heads=12 * group, num_kv_heads=12, stages=stages,
                                            exp2_poly_stride=stride)
                            if cfg.supported()[0]:
                                out.append(cfg)
    shipped = {code_shape(c): c for c in configs()}
    return [shipped.get(code_shape(c), c) for c in out]


__all__ = ["FA4Config", "grid", "launch_args", "paged_launch_args", "varlen_launch_args", "LAUNCH_PARAMS",
           "TENSOR_PARAMS", "PAGED_LAUNCH_PARAMS", "PAGED_TENSOR_PARAMS", "PAGED_GATHER_LAUNCH_PARAMS", "VARLEN_LAUNCH_PARAMS", "SEQUSED_PARAMS", "SOFTCAP_PARAMS",
           "SINK_PARAMS", "FP8_PARAMS", "FP8_SCALES", "serving_configs", "configs", "supported_configs", "mla_configs", "mla_decode_configs", "paged_configs", "code_shape", "KERNEL", "ROLES", "TMEM_COLUMNS", "SMEM_CARVEOUT"]


PAGED_PAGE_SIZES = (16, 64, 128, 256, 48)   # 8, 2, 1, 1 and 8 boxes per BN-128 tile (48: not a power of two)


def paged_configs() -> list[FA4Config]:
    """The KV-cache operand's kernels (kernel set `sm100-kvcache`): the paged prefill CTA and the
    decode route over every box count of PAGED_PAGE_SIZES, and the decode route over a contiguous
    cache, bf16 at head dims 64 and 128, causal, GQA group 4 (decode: 8 heads over 2 KV heads)."""
    out, decode = [], dict(num_q_tiles=1, fuse_gqa=True)
    for d in (64, 128):
        dims = dict(head_dim=d, head_dim_v=d, causal=True, num_q_heads=8, num_kv_heads=2)
        out += [FA4Config(**dims, page_size=page, **route) for page in PAGED_PAGE_SIZES for route in ({}, decode)]
        out.append(FA4Config(**dims, **decode))
    return out


def serving_configs() -> list[FA4Config]:
    """Note "Serving"'s kernels (kernel set `sm100-serving`): one of each feature on the bf16 prefill
    CTA, at head dims 64 and 128, GQA group 2: a sliding window (causal, left 300), a two-sided
    window (100, 50), a chunk (causal, 200), softcap with sinks (causal), ragged lengths (causal, and
    with a window of 100 and sinks), ragged lengths with seqused_k (not causal). Their code shapes are compiled, verified and interpreted by
    tests/test_attention_sm100_serving.py; other combinations supported() accepts are not compiled in CI."""
    base = dict(dtype="bf16", num_q_heads=4, num_kv_heads=2)
    out = []
    for d in (128, 64):
        for kw in (dict(causal=True, window_left=300), dict(window_left=100, window_right=50),
                   dict(causal=True, chunk=200), dict(causal=True, softcap=True, sinks=True),
                   dict(causal=True, varlen=True), dict(causal=True, window_left=100, sinks=True, varlen=True),
                   dict(varlen=True, seqused_k=True)):
            out.append(FA4Config(head_dim=d, head_dim_v=d, **base, **kw))
    return out


def mla_configs() -> list[FA4Config]:
    """Note "MLA"'s code shapes (common.mla_sm100.prefill_configs), compiled, verified and interpreted by
    tests/test_attention_sm100_mla.py outside supported_configs() (CI's sweep)."""
    return prefill_configs(FA4Config, MLA_HEAD_DIMS, DTYPES)


def mla_decode_configs() -> list[FA4Config]:
    """Note "MLA decode"'s kernels (common.mla_sm100.decode_configs): outside supported_configs() (CI's sweep),
    compiled, verified and interpreted by tests/test_attention_sm100_mla_decode.py."""
    return decode_configs(FA4Config)
