"""The sm_90a softcap kernel's choice and its fixed max (MLIR-free: the host API imports it) [D-softcap-fold].

Note "Softcap rule": default_config picks the softcap kernel of a call from its Python float cap, on the host
(no device read): `softcap_rule(dtype, cap)` gives SOFTCAP_FIXED_FIELDS (softcap_fold_q, softcap_fixed_max,
exp2_poly_stride 0: no row max, Q scaled by softmax_scale / cap once per tile, every exp2 on the SFU) for a
bf16 cap in (0, FIXED_MAX_CAP]; every other call runs the running-max softcap kernel (exp2_poly_stride 4),
which takes any cap: f16 (the fold's Q and the fixed max's small p would leave f16's range), caps past
FIXED_MAX_CAP, varlen and paged prefill (the fold is not built in the varlen kernel; they pass no cap). Both
are default kernels, in every kernel set the softcap kernel is in (default_configs). Measured, bench prefill
softcap_sink (bf16 D128 causal 8k, cap 30, H200): dense causal 938.6 us, running max 1143.8 (1.219x), the
fixed-max kernel 1038.7 (1.107x) [D-softcap-fold].

Note "Runtime max": the fixed-max kernel computes p = exp2(C t - M), t = tanh(.) in [-1, 1] the capped
score in units of the cap, C = cap log2 e, and M = fixed_max_log2(cap) = C m a launch argument
(softcap_max_log2): the largest m in (0, 1] with C (1 + m) <= FIXED_MAX_LOW, i.e. M = min(C, 125 - C). So
p in [2^-(C + M), 2^(C - M)]: at least 2^-125, a normal float32 (ex2.approx.ftz and the polynomial exp2
flush below 2^-126: a row whose every score sits at -cap keeps its weights), and at most 2^(2C - 125) past
cap 43.3, bounded by FIXED_MAX_HIGH = 32: l <= keys 2^32 (2^63 at 2^31 keys) and O's float32 accumulator
<= keys 2^32 max|v|, far inside float32 (2^128) for any bf16 v under 2^65; P goes to the P.V GEMM in bf16,
which holds 2^32. Caps past FIXED_MAX_CAP (2C - 125 > 32: 54.41) are refused by launch_args (ConfigError,
before launch) and routed to the running-max kernel by the rule. The epilogue's LSE uses M for m C (a row
that saw no key takes -inf with sinks, as the online softmax leaves it).
"""
from __future__ import annotations

from .constants import LOG2E

# note "Runtime max": p >= 2^-FIXED_MAX_LOW (normal float32), p <= 2^FIXED_MAX_HIGH (l and O's headroom)
FIXED_MAX_LOW = 125.0
FIXED_MAX_HIGH = 32.0
FIXED_MAX_CAP = (FIXED_MAX_LOW + FIXED_MAX_HIGH) / (2.0 * LOG2E)   # 54.41 (Gemma-2's attention cap: 50)
# The softcap rule of default_config (note "Softcap rule", README "Softcap kernels"): a bf16 softcap call of a
# cap in (0, FIXED_MAX_CAP] runs these fields (no row max, Q pre-scaled, every exp2 on the SFU: 1.107x dense
# causal against the running-max kernel's 1.219x, H200 [D-softcap-fold]); other calls the running-max kernel
SOFTCAP_FIXED_FIELDS = dict(softcap_fold_q=True, softcap_fixed_max=True, exp2_poly_stride=0, rescale_threshold=0.0,
                            rescale_before_pv=False)


def softcap_rule(dtype: str, cap: float) -> dict:
    """The softcap kernel's variant fields for a call (note "Softcap rule"; decided on the host from the
    Python float cap, no device read): SOFTCAP_FIXED_FIELDS for bf16 and 0 < cap <= FIXED_MAX_CAP (the
    fixed max keeps p normal down to t = -1 and l, O in float32 with FIXED_MAX_HIGH's headroom; the Q
    fold rounds Q times softmax_scale / cap to bf16), else {}: the running-max kernel (f16, whose range
    would flush small p and the folded Q; caps past FIXED_MAX_CAP; cap 0, i.e. not known here). Varlen
    kernels (attention_sm90_config_varlen) pass no cap: the fold is not built there."""
    return dict(SOFTCAP_FIXED_FIELDS) if dtype == "bf16" and 0.0 < float(cap) <= FIXED_MAX_CAP else {}


def softcap_choice(config, cap: float) -> str:
    """One line naming the softcap kernel `config` (an AttnConfig) runs for `cap` and why (Plan.describe)."""
    if not config.softcap:
        return ""
    if config.softcap_fixed_max:
        return (f"softcap {cap:g}: fixed-max kernel (bf16, cap <= {FIXED_MAX_CAP:.4g}; max "
                f"{fixed_max_log2(cap) / (cap * LOG2E):.4g} cap)")
    why = ("f16" if config.dtype != "bf16" else f"cap > {FIXED_MAX_CAP:.4g}" if cap > FIXED_MAX_CAP
           else "varlen" if config.varlen else "FA4MLIR_PREFILL_TILES or the cap not known")
    return f"softcap {cap:g}: running-max kernel ({why})"


def fixed_max_log2(cap: float) -> float:
    """The fixed max M of a softcap_fixed_max kernel in exp2 units for a cap (module constants): min(C, 125 - C),
    C = cap log2 e, i.e. m = M / C = 1 (caps up to 43.3) or the largest m with C (1 + m) <= 125."""
    c = float(cap) * LOG2E
    return min(c, FIXED_MAX_LOW - c)


__all__ = ["FIXED_MAX_LOW", "FIXED_MAX_HIGH", "FIXED_MAX_CAP", "SOFTCAP_FIXED_FIELDS", "softcap_rule", "softcap_choice",
           "fixed_max_log2"]
