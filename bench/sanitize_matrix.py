"""The matrix of bench/sanitize.py (MLIR-free): one case per kernel family of the sm_90a kernels the GPU
tests run, and cases until every feature is covered (sanitize.py's docstring says how they run).

`family` and `features` classify a bundle entry; `Case` is one family's case (its bundle entries and
shapes); CASES is the matrix, `uncovered` what of a set's entries it misses (less KNOWN_GAPS),
`select_cases` the cases of --quick / --cases.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from bench import sanitize_mla as smla
from bench import sanitize_mla_sparse as sps
from bench import sanitize_mla_sparse_decode as spd
from bench import sanitize_score_mod as ssm
from bench.sanitize_decode import DECODE_KERNELS, DECODE_SHAPES, KV_HEAD_SHAPES, decode_family, decode_features
from fa4mlir import kernel_sets
from fa4mlir.kernels import attention_decode_sm90_config as dcfg
from fa4mlir.kernels import attention_mla_decode_sm90_config as mcfg
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels.common.mask_family import attention_mask

PAGED_PREFILL = "varlen-paged"   # family and feature of the varlen kernels over paged pools (a KNOWN_GAPS key)
# kernel -> (family(config), features(config)) of the kernels whose own sanitize module classifies them
OWN_RULES = {**{k: (partial(decode_family, k), partial(decode_features, k)) for k in DECODE_KERNELS},
             mcfg.KERNEL: (smla.mla_family, smla.mla_features),
             sps.sc.KERNEL: (sps.sparse_family, sps.sparse_features),
             spd.dc.DECODE_KERNEL: (spd.sparse_decode_family, spd.sparse_decode_features)}


def family(kernel: str, config: dict) -> str:
    """The sanitizer family of a bundle entry: its kernel, and for the sm_90a attention kernel the
    choices that change its synchronisation and shared-memory protocol (tile sizes, stages, dtype,
    head dim, masks, score modifiers and the softmax knobs change the code inside one protocol:
    `features`, compiled-in functions too: sanitize_score_mod; a varlen kernel is its own protocol:
    sanitize_varlen); for the decode kernels
    sanitize_decode.decode_family (fetch, split, FP8), for the MLA kernel sanitize_mla.mla_family."""
    if kernel in OWN_RULES:
        return OWN_RULES[kernel][0](config)
    if kernel != acfg.KERNEL:
        return kernel
    if config.get("page_size"):     # the varlen kernel over paged pools: a known gap (KNOWN_GAPS)
        return PAGED_PREFILL
    order = ("varlen-persistent" if config.get("varlen_compact") and config["persistent"]
             else "varlen-compact" if config.get("varlen_compact") else "varlen" if config.get("varlen")
             else "persistent" if config["persistent"] else "tiled")
    return "/".join((kernel, order,
                     "causal" if config["causal"] else "full", f"{config['bm'] // 64}wg",
                     "pingpong" if config["pingpong"] else "nopp"))


def features(kernel: str, config: dict) -> set[str]:
    """What else a reduced matrix must hit once: the attention kernel's dtypes, head dims (and v's), softmax
    knobs, masks (a sliding window, chunks), score modifiers (softcap, sinks) and compiled-in functions
    and aux tensors (sanitize_score_mod.mod_features), a varlen kernel's with a `varlen-` prefix (its
    own, so every varlen case is needed); the decode
    kernel's dtypes, head dims and FP8 scale granularities, the combine's head dims; the MLA
    kernel's dtypes and TMA box rows."""
    if kernel in OWN_RULES:
        return OWN_RULES[kernel][1](config)
    if kernel != acfg.KERNEL:
        return set()
    out = {config["dtype"], f"d{config['head_dim']}", *([f"dv{config['head_dim_v']}"] if config.get("head_dim_v") else [])}
    out |= {name for name, on in (("lazy-rescale", config["rescale_threshold"] > 0),
                                  ("poly-exp2", config["exp2_poly_stride"] > 0),
                                  ("rescale-before-pv", config["rescale_before_pv"]),
                                  ("window", config["window_left"] >= 0 or config["window_right"] >= 0),
                                  ("chunk", config["chunk"] > 0), ("softcap", config["softcap"]),
                                  ("sinks", config["sinks"])) if on} | ssm.mod_features(config)
    if config.get("page_size"):
        out.add("paged")
    return {f"varlen-{f}" for f in out} if config.get("varlen") else out


@dataclass(frozen=True)
class Case:
    """One kernel family's sanitizer case: the bundle entries it runs (config items each entry
    holds, with the kernel's own cubin backend) and the shapes: attention (batch, seqlen_q,
    seqlen_k, heads, kv_heads), GEMM (m, n, k); decode cases run sanitize_decode.DECODE_SHAPES on
    a cache of `page_size` (None: contiguous), FP8 with scales of `kv_scale` when set. An attention
    case with a mask or score modifier runs it with SOFTCAP and random sinks (compile-time flags;
    the cap and the sinks are launch arguments). `child`: 'varlen' (sanitize_varlen's batches through
    flash_attn_varlen_func) or 'mla' (sanitize_mla's calls of flash_mla_with_kvcache, its combine
    too) or 'scoremod' (sanitize_score_mod's calls of flash_attn_func with score_mod, mask_mod and
    aux tensors) in place of the kernel's own child."""

    name: str
    kernel: str
    match: tuple[dict, ...]
    shapes: tuple[tuple[int, ...], ...] = ()
    quick: bool = False
    expect_trap: bool = False
    page_size: int | None = None
    kv_scale: str = ""
    child: str = ""

    @property
    def families(self) -> list[str]:
        return sorted({family(self.kernel, m) for m in self.match})

    @property
    def family(self) -> str:
        return " + ".join(self.families)


# Ragged lengths (not multiples of 64, 112, 128, 144 or 192), two or more query tiles and KV blocks:
# GQA 2 square; seqlen_q < seqlen_k with MQA; seqlen_q > seqlen_k, where causal rows 0..389 see no
# key (whole query tiles with none: the Q-tile race of tests/gpu's test_tiles_without_keys_race_nothing).
ATTN_SHAPES = ((2, 300, 300, 4, 2), (1, 200, 520, 2, 1), (1, 520, 130, 2, 2))
GEMM_SHAPES = ((300, 264, 200), (129, 136, 72), (1, 8, 8))   # ragged M, N, K over 3x2 and 2x1 tiles; one row


SOFTCAP = 2.0    # the softcap cases' cap: low enough that tanh bends the scores of randn inputs


def mask_mods(cfg: acfg.AttnConfig) -> dict:
    """flash_attn_func's (and compare_attention's) window_size and attention_chunk of cfg's mask."""
    window = (cfg.window_left, cfg.window_right)
    return {**({"window_size": window} if window != (-1, -1) else {}),
            **({"attention_chunk": cfg.chunk} if cfg.chunk else {})}


def picks(cfg: acfg.AttnConfig, seqlen_k: int | None) -> acfg.AttnConfig:
    """default_config of cfg's dtype, head dim, causal flag, mask and score modifiers at seqlen_k:
    the kernel flash_attn_func runs there."""
    masked = bool(mask_mods(cfg))
    return acfg.default_config(cfg.dtype, cfg.head_dim, cfg.causal, seqlen_k, cfg.mask if masked else None,
                               softcap=cfg.softcap, sinks=cfg.sinks, head_dim_v=cfg.head_dim_v)


def api_shape(cfg: acfg.AttnConfig) -> tuple[int, ...] | None:
    """A shape flash_attn_func runs `cfg` on (default_config picks it there), or None when it never
    does (a tile variant or the FA4 pieces): ATTN_SHAPES' first for a kernel of every length or of
    short key sequences, else one key sequence just past SHORT_SEQLEN_K (few query rows: cheap)."""
    limit = acfg.SHORT_SEQLEN_K.get((cfg.head_dim, cfg.causal), 0)
    for shape in (ATTN_SHAPES[0], (1, 100, limit + 4, 2, 1)):
        if picks(cfg, shape[2]) == cfg:
            return shape
    return None


def _attn(name: str, cfg: acfg.AttnConfig, quick: bool = False) -> Case:
    return Case(name, acfg.KERNEL, (cfg.key(),), ATTN_SHAPES, quick)


def _default(dtype: str, head_dim: int, causal: bool, short: bool = False) -> acfg.AttnConfig:
    """kernel_sets.attention()'s kernel: default_config for long key sequences, or short ones."""
    return acfg.default_config(dtype, head_dim, causal, 1 if short else None)


def _pieces(dtype: str, head_dim: int, causal: bool) -> acfg.AttnConfig:
    """kernel_sets.attention_fa4_pieces()'s kernel."""
    return replace(acfg.default_config(dtype, head_dim, causal), **kernel_sets.FA4_PIECES).validate()


def _variant(head_dim: int, causal: bool, **tiles) -> acfg.AttnConfig:
    """kernel_sets.tile_variants()'s kernel (bf16)."""
    return acfg.AttnConfig(dtype="bf16", head_dim=head_dim, causal=causal, **tiles).validate()


def _mods(dtype: str, head_dim: int, causal: bool, window=(-1, -1), chunk: int = 0, **score) -> acfg.AttnConfig:
    """attention_masks()' and attention_softcap_sinks()' kernel for long key sequences."""
    mask = attention_mask(causal, window, chunk) if window != (-1, -1) or chunk else None
    return acfg.default_config(dtype, head_dim, causal, None, mask, **score)


_MODS_END = 12 + len(kernel_sets.VARLEN_MOD_CASES)   # attention_varlen(): VARLEN_CASES, chunks, mods, head dims
_COMPACT = _MODS_END + len(kernel_sets.VARLEN_HEAD_DIM_CASES)   # then the compact grid's (VARLEN_COMPACT_CASES)
_PERSISTENT = _COMPACT + len(kernel_sets.VARLEN_COMPACT_CASES)   # then the persistent ones (VARLEN_PERSISTENT_CASES)


def _varlen(name: str, cases, quick: bool = False) -> Case:
    """kernel_sets.attention_varlen()'s kernels of VARLEN_CASES rows `cases`."""
    match = tuple(cfg.key() for i, (_, cfg) in enumerate(kernel_sets.attention_varlen()) if i in cases)
    return Case(name, acfg.KERNEL, match, quick=quick, child="varlen")


def _mla(name: str, dtype: str, page: int, quick: bool = False, fp8: bool = False, seesaw: bool = False) -> Case:
    """The MLA decode kernel for pages of `page` rows (fp8: FlashMLA's FP8 latent cache; seesaw: the seesaw
    schedule, DEFAULT_RULE's for more than 32 rows over bf16), split and unsplit (kernel_sets.mla)."""
    match = tuple(mcfg.default_config(dtype, page, unsplit=u, fp8=fp8, seesaw=seesaw).key()
                  for u in (False, True))
    return Case(name, mcfg.KERNEL, match, quick=quick, page_size=page, child="mla")


def _mla_swapab(name: str, dtype: str, page: int, quick: bool = False, ring: bool = False) -> Case:
    """The swap-AB MLA decode kernels for pages of `page` rows: every N (SWAP_AB_NS), split and unsplit
    (kernel_sets.mla), on sanitize_mla.SWAP_AB_SHAPES; ring: DEFAULT_RULE's ring of chunk stages (bf16, 64-row
    boxes), run by the rule; else the one-ring kernel, named (swapab)."""
    match = tuple(replace(mcfg.default_config(dtype, page, unsplit=u), swap_ab=n,
                          **({"swap_ab_ring": True} if ring else {})).key()
                  for n in mcfg.SWAP_AB_NS for u in (False, True))
    return Case(name, mcfg.KERNEL, match, quick=quick, page_size=page, child="mla")


def _decode(name: str, dtype: str, head_dim: int, page: int | None, kv_scale: str = "", quick: bool = False) -> Case:
    """The decode kernel of a cache of `page` rows, split and unsplit (kernel_sets.decode); for an FP8 cache
    the kernel FP8_DEFAULT_RULE picks for each packed-row count the case's calls make (sanitize_decode's
    shapes: swap AB at 4 rows where it is built, the conversion-through-SMEM kernel at 40 and 80); for a contiguous
    16-bit cache UNSPLIT_RULE's kernel for the unsplit call of 4 rows ([D-decode-bn128-unsplit])."""
    shapes = KV_HEAD_SHAPES if kv_scale == "kv_head" else DECODE_SHAPES
    # packed rows pick the kernel where a rule reads them: FP8_DEFAULT_RULE, and UNSPLIT_RULE over a contiguous cache
    rows = sorted({sq * (h // hk) for sq, h, hk in shapes}) if kv_scale or page is None else [None]
    match = tuple(dict.fromkeys(tuple(sorted(dcfg.default_config(dtype, head_dim, page, kv_scale, unsplit=u,
                                                                   rows=r).key().items()))
                                for r in rows for u in (False, True)))
    match = tuple(dict(m) for m in match)
    return Case(name, dcfg.KERNEL, match, quick=quick, page_size=page, kv_scale=kv_scale)


CASES = (
    # flash_attn_func's kernels (kernel_sets.attention)
    _attn("attn-d64", _default("bf16", 64, False), quick=True),
    _attn("attn-d64-short", _default("bf16", 64, False, short=True)),
    _attn("attn-d64-causal-f16", _default("f16", 64, True)),
    _attn("attn-d64-causal-short", _default("bf16", 64, True, short=True)),
    _attn("attn-d128", _default("bf16", 128, False)),
    _attn("attn-d128-short-f16", _default("f16", 128, False, short=True)),
    _attn("attn-d128-causal", _default("bf16", 128, True), quick=True),
    _attn("attn-d256-causal", _default("bf16", 256, True), quick=True),
    # head dims 96 and 192, qk 192 / v 128 (MLA prefill) (the head-dims set)
    _attn("attn-d96-causal", _default("bf16", 96, True)),
    _attn("attn-d192-f16", _default("f16", 192, False)),
    _attn("attn-d192-v128-causal", acfg.default_config("bf16", 192, True, head_dim_v=128)),
    # FlashAttention-4's softmax pieces (polynomial exp2): attention-fa4-pieces
    _attn("fa4-pieces-d64-causal-f16", _pieces("f16", 64, True)),
    # tile variants whose protocol no default has (attention-tiles)
    _attn("tiles-d256-128x80-nopp", _variant(256, False, bm=128, bn=80, stages=2, pingpong=False)),
    _attn("tiles-d64-192x128-nopp", _variant(64, False, bm=192, bn=128, stages=2, pingpong=False)),
    _attn("tiles-d64-causal-192x128-nopp", _variant(64, True, bm=192, bn=128, stages=2, pingpong=False)),
    _attn("tiles-d64-causal-128x128-s4-nopp", _variant(64, True, bm=128, bn=128, stages=4, pingpong=False)),
    _attn("tiles-d64-128x128-nopp-pers", _variant(64, False, bm=128, bn=128, stages=2, pingpong=False,
                                                  persistent=True)),
    # masks (attention-masks): a window both sides, chunks with a causal window, chunks alone
    _attn("mask-window-d64", _mods("bf16", 64, False, (128, 64)), quick=True),
    _attn("mask-chunk-window-d128-causal", _mods("bf16", 128, True, (100, -1), 96)),
    _attn("mask-chunk-d128-f16", _mods("f16", 128, False, chunk=300)),
    # score modifiers (attention-softcap-sinks): softcap and sinks at once, sinks with a window
    _attn("softcap-sinks-d128-causal", _mods("bf16", 128, True, softcap=True, sinks=True), quick=True),
    _attn("sinks-window-d128-causal", _mods("bf16", 128, True, (200, -1), sinks=True)),
    Case("gemm", "gemm_sm90", tuple({"kernel": "gemm_sm90", "dtype": dt, "bn": 256, "stages": 4} for dt in ("bf16", "f16")),
         GEMM_SHAPES, quick=True),
    Case("watchdog", "deadlock_sm90", ({"kernel": "deadlock_sm90"},), quick=True, expect_trap=True),
    # flash_attn_with_kvcache's kernels (decode): the decode kernel by fetch, each split and unsplit
    _decode("decode-contig-d64-f16", "f16", 64, None, quick=True),
    _decode("decode-contig-d128", "bf16", 128, None, quick=True),     # UNSPLIT_RULE's 128-key tiles at 4 rows
    _decode("decode-gather-d64", "bf16", 64, 1, quick=True),
    _decode("decode-box8-d128", "bf16", 128, 8, quick=True),
    _decode("decode-pagebox-d128", "bf16", 128, 32, quick=True),
    _decode("decode-tilebox-d256", "bf16", 256, 64, quick=True),
    _decode("decode-fp8-contig-block", "bf16", 128, None, "block", quick=True),
    _decode("decode-fp8-pagebox-tensor", "bf16", 128, 16, "tensor"),
    _decode("decode-fp8-tilebox-kvhead", "bf16", 128, 64, "kv_head"),
    _decode("decode-fp8-gather-block", "bf16", 128, 1, "block"),
    # the combine of split calls (contiguous caches of each dtype and head dim with a decode kernel)
    Case("decode-combine", dcfg.COMBINE_KERNEL, tuple(dcfg.CombineConfig(dt, d).key() for dt, d in (
        ("bf16", 128), ("bf16", 64), ("bf16", 256), ("f16", 128), ("f16", 64))), quick=True),
    # the append of new tokens (k=, v=): a paged cache of 16-row pages and a contiguous one
    Case("decode-append", dcfg.APPEND_KERNEL, tuple(dcfg.AppendConfig("bf16", 128, paged).key() for paged in (True, False)),
         quick=True, page_size=16),
    # flash_attn_varlen_func's kernels (attention-varlen; rows of kernel_sets.VARLEN_CASES): each head dim
    # and tile shape, full and causal; f16; a window; softcap with sinks (and seqused_k)
    _varlen("varlen-d64", (0, 1), quick=True),
    _varlen("varlen-d128", (2, 3), quick=True),
    _varlen("varlen-d256-f16", (4, 5, 6)),
    _varlen("varlen-window-softcap-sinks", (7, 8, 9)),
    _varlen("varlen-chunk", (10, 11)),   # attention_chunk= (kernel_sets.VARLEN_CHUNK_CASES)
    _varlen("varlen-mods", range(12, _MODS_END)),        # score_mod= / mask_mod= (kernel_sets.VARLEN_MOD_CASES)
    _varlen("varlen-head-dims", range(_MODS_END, _MODS_END + len(kernel_sets.VARLEN_HEAD_DIM_CASES))),  # MLA, D96, D192
    # the compact grid (AttnConfig.varlen_compact: FA4MLIR_VARLEN_GRID=compact), its own family of block order
    _varlen("varlen-compact", range(_COMPACT, _COMPACT + len(kernel_sets.VARLEN_COMPACT_CASES)), quick=True),
    # the persistent kernel over the compact tiles (FA4MLIR_VARLEN_GRID=persistent): a tile loop per CTA, its own family
    _varlen("varlen-persistent", range(_PERSISTENT, _PERSISTENT + len(kernel_sets.VARLEN_PERSISTENT_CASES)),
            quick=True),
    # flash_mla_with_kvcache's kernels (mla): split and unsplit; f16; 16-row pages; the head-dim-512 combine
    # of split calls
    _mla("mla-bf16-p64", "bf16", 64, quick=True),
    _mla("mla-seesaw-bf16-p64", "bf16", 64, quick=True, seesaw=True),
    _mla("mla-seesaw-bf16-p16", "bf16", 16, seesaw=True),     # DEFAULT_RULE's for more than 32 rows over bf16
    _mla("mla-f16-p64", "f16", 64),
    _mla("mla-bf16-p16", "bf16", 16),
    # DEFAULT_RULE's swap-AB kernels (seqlen_q x heads <= 32): every N, split and unsplit
    _mla_swapab("mla-swapab-ring-bf16-p64", "bf16", 64, quick=True, ring=True),     # the rule's over bf16 pages of 64
    _mla_swapab("mla-swapab-bf16-p64", "bf16", 64, quick=True),
    _mla_swapab("mla-swapab-f16-p64", "f16", 64),
    _mla_swapab("mla-swapab-bf16-p16", "bf16", 16),
    _mla("mla-fp8-p64", "bf16", 64, quick=True, fp8=True),
    _mla("mla-fp8-p16", "bf16", 16, fp8=True),
    Case("mla-combine", dcfg.COMBINE_KERNEL, tuple(smla.combine_match(dt) for dt in ("bf16", "f16")), page_size=64,
         child="mla"),
    # flash_attn_func(score_mod=, mask_mod=, aux_tensors=)'s kernels (score-mods): sanitize_score_mod.CASES
    *(Case(n, acfg.KERNEL, ssm.matches(mods), quick=q, child="scoremod") for n, mods, q in ssm.CASES),
    # flash_mla_sparse_fwd's kernels (mla): with and without topk_length and sinks (sanitize_mla_sparse.CASES)
    *(Case(n, sps.sc.KERNEL, sps.matches(f), quick=q, child="mla-sparse") for n, f, q in sps.CASES),
    # flash_mla_with_kvcache(indices=)'s kernels (mla): sanitize_mla_sparse_decode.CASES
    *(Case(n, spd.dc.DECODE_KERNEL, spd.matches(f), quick=q, child="mla-sparse-decode") for n, f, q in spd.CASES),
)
CASES_BY_NAME = {c.name: c for c in CASES}


# Features of the gpu-tests kernels no case runs yet, and why: reported by --dry-run and in the JSON,
# never counted as covered (uncovered() leaves out only these)
KNOWN_GAPS = {"decode-varlen_q": "the decode kernel's varlen_q variants (flash_attn_varlen_func with page_table=) "
                                 "have no sanitizer child yet: their numerics are GPU-tested "
                                 "(tests/gpu/test_varlen_paged_gpu.py), their memory accesses are not sanitized",
              "decode-masks": "the decode kernel's window / chunk / softcap / sinks variants and the combine's sink "
                              "variant (flash_attn_with_kvcache, flash_attn_varlen_func(page_table=)) have no sanitizer "
                              "case yet: their numerics are GPU-tested (tests/gpu/test_kvcache_mask_gpu.py), their "
                              "memory accesses are not sanitized",
              PAGED_PREFILL: "the varlen kernels over paged pools (AttnConfig.page_size: flash_attn_varlen_func with "
                             "page_table= at max_seqlen_q >= 256) have no sanitizer child yet: their numerics are "
                             "interpreted (tests/test_varlen_paged_prefill.py) and GPU-tested "
                             "(tests/gpu/test_varlen_paged_prefill_gpu.py), their memory accesses are not sanitized"}


def uncovered(entries, cases=CASES, gaps=KNOWN_GAPS) -> list[str]:
    """The families and features of bundle entries (kernel, config dict) that no case covers, less
    the KNOWN_GAPS (`gaps`)."""
    have_fam = {f for c in cases for f in c.families} | set(gaps)
    have_feat = set().union(*(features(c.kernel, m) for c in cases for m in c.match)) | set(gaps)
    missing = {family(k, cfg) for k, cfg in entries} - have_fam
    missing |= set().union(*(features(k, cfg) for k, cfg in entries)) - have_feat
    return sorted(missing)


def select_cases(quick: bool, names: list[str] | None) -> list[Case]:
    if names:
        unknown = [n for n in names if n not in CASES_BY_NAME]
        if unknown:
            raise ValueError(f"unknown case(s) {unknown}; the cases are {', '.join(CASES_BY_NAME)}")
        return [CASES_BY_NAME[n] for n in names]
    return sorted((c for c in CASES if c.quick or not quick), key=lambda c: not c.quick)   # quick ones first
