"""The ragged-batch (varlen) and paged-prefill configs of the sm_90a attention forward kernel (MLIR-free:
the host API imports it): `varlen_config` and `paged_varlen_config` pick a case's kernel from
attention_sm90_config.default_config's tiles. The launch contract (VARLEN_PARAMS, PAGED_PARAMS,
launch_args, grid and varlen_grid) stays with AttnConfig in attention_sm90_config.
"""
from __future__ import annotations

from dataclasses import replace

from .attention_sm90_config import MOD_BOTH_TILES, AttnConfig, default_config
from .common.fields import ConfigError
from .common.mask_family import Mask
from .common.paging import fetch_plan, prefill_box_rule


def varlen_config(dtype: str, head_dim: int, causal: bool, mask: Mask | None = None, *, softcap: bool = False,
                  sinks: bool = False, head_dim_v: int = 0, score_mod: str = "", mask_mod: str = "",
                  aux: str = "", compact: bool = False, persistent: bool = False) -> AttnConfig:
    """The ragged-batch kernel of a case: default_config's tiles and knobs for long sequences, one
    tile per CTA (the 1-D grid's order is the schedule: common.varlen_schedule) and varlen=True;
    `compact`: on the compact grid instead (AttnConfig.varlen_compact, common.varlen_compact);
    `persistent`: a persistent kernel striding over the compact grid's tiles (varlen_compact and
    persistent, min(SMs, compact tiles) CTAs: attention_fwd_sm90._Tiles._each_compact) [D-varlen-persistent].
    The host knows only max_seqlen_q, so there is no short-sequence pick. The register model is the
    dense one: the sequence bookkeeping (starts, lengths, the row bound) fit in it, measured
    [D-varlen]. head_dim_v (a HEAD_DIM_PAIRS pair: MLA prefill's 192 / 128) and score_mod, mask_mod,
    aux (common.score_mod fingerprints and aux spec) as default_config takes them, a mask_mod on
    MOD_BOTH_TILES (128 x 128) where the tiles are larger; in the kernel a
    function's batch is the sequence index and q_idx / kv_idx are positions within the sequence
    (attention_fwd_sm90_varlen's note [varlen-mod-indices]) [D-varlen-mods]. softcap: the running-max softcap
    kernel at every cap (no cap is passed to default_config: softcap_fold_q is not built in the varlen kernel;
    common/softcap_rule.py, note "Softcap rule")."""
    base = default_config(dtype, head_dim, causal, None, mask=mask, softcap=softcap, sinks=sinks,
                          head_dim_v=head_dim_v, score_mod=score_mod, mask_mod=mask_mod, aux=aux)
    if mask_mod and (base.bm == 192 or base.bn > 128):   # spilled there [D-varlen-mods]
        base = replace(base, **MOD_BOTH_TILES)
    if (base.head_dim, base.dim_v, causal) == (192, 192, True) and base.bn > VARLEN_D192_CAUSAL_BN:
        base = replace(base, bn=VARLEN_D192_CAUSAL_BN)   # [D-varlen-sections]: bn 112 spilled 4 / 12 bytes
    # score_bias_init (default_config's for a score_mod) is not built or timed in the varlen kernel [D-bias-init]
    return replace(base, persistent=persistent, varlen=True, varlen_compact=compact or persistent,
                   score_bias_init=False).validate()


# D192 causal varlen: the section order's bookkeeping (common.sections) spilled 4 / 12 bytes at the dense
# default's 128 x 112 (ptxas, 168 registers); 128 x 96 has none [D-varlen-sections]
VARLEN_D192_CAUSAL_BN = 96


# The producer's setmaxnreg for a paged varlen kernel of more than PAGED_FEW_BOXES boxes per K/V tile:
# its page-table lookups (one live page index per box) spilled at 24 and 32 registers with page 16's 8
# boxes (D128 causal bf16, 8 and 32 bytes), none at 40; 2 boxes (page 64) and 1 (page 128) fit in 24
PAGED_FEW_BOXES = 2
PAGED_LOAD_REGS = 40


def paged_varlen_config(dtype: str, head_dim: int, causal: bool, page_size: int, mask: Mask | None = None, *,
                        softcap: bool = False, sinks: bool = False) -> AttnConfig | None:
    """The paged prefill kernel (varlen over the KV cache's pools, AttnConfig.page_size) of a case:
    varlen_config's tiles, or bn 128 where its bn does not cut into TMA boxes of the page size
    (common.paging.prefill_box_rule: gcd(bn, page_size) >= 8 rows, at most 8 boxes), with the producer at
    PAGED_LOAD_REGS past PAGED_FEW_BOXES boxes per tile. `mask` (common.masks: a window, a chunk; None:
    causal's or none), `softcap` and `sinks` as varlen_config takes them: the same mask classification,
    built-in softcap score_mod and epilogue sinks as the contiguous varlen kernel, each its own kernel
    (name and key) [D-paged-prefill-mods]. None when no such tile serves page_size (the host then runs the
    decode kernel's gather: attention/varlen_paged.py, note "Which kernel")."""
    base = varlen_config(dtype, head_dim, causal, mask, softcap=softcap, sinks=sinks)
    for bn in dict.fromkeys((base.bn, 128)):
        if prefill_box_rule(bn, page_size):
            continue
        regs = PAGED_LOAD_REGS if fetch_plan(bn, page_size).boxes_per_tile > PAGED_FEW_BOXES else base.load_regs
        try:
            return replace(base, bn=bn, page_size=page_size, load_regs=regs).validate()
        except ConfigError:
            continue
    return None


__all__ = ["varlen_config", "VARLEN_D192_CAUSAL_BN", "paged_varlen_config", "PAGED_FEW_BOXES", "PAGED_LOAD_REGS"]
