"""Numbers more than one kernel or config uses (MLIR-free: the config modules import it)."""
from __future__ import annotations

LOG2E = 1.4426950408889634      # log2(e): softmax runs in base 2, so the scale is softmax_scale * LOG2E
LN2 = 0.6931471805599453        # ln(2): the LSE back from base 2 to the natural log
NEG_INF = float("-inf")
# sm_100a: 227 KiB of SMEM per CTA (cudaDevAttrMaxSharedMemoryPerBlockOptin) less the 1 KiB the
# driver reserves; fa4-plan-smem checks the same limit (passes/plan_smem.py: SMEM_LIMIT).
SM100_SMEM_PER_CTA = 232448 - 1024
# The largest lazy-rescale threshold (log2 units) either attention kernel takes: m lags the row max
# by up to the threshold, so P reaches 2**threshold, and f16's largest finite is 65504 < 2**16.
MAX_RESCALE_THRESHOLD = 15.0

__all__ = ["LOG2E", "LN2", "NEG_INF", "SM100_SMEM_PER_CTA", "MAX_RESCALE_THRESHOLD"]
