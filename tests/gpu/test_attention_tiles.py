"""The sm_90a attention kernel's non-default tiles (kernel_sets.TILE_VARIANTS: bm 192 = three consumer
warpgroups, bn, stages, persistent), launched directly through the runtime (flash_attn_func runs the default
tiles). Judged like tests/gpu/test_attention_sm90.py: NaN-poisoned out and lse, the FA rule against a
float32/float64 reference, 0 / +inf on rows that see no key, no NaN.

With bm 192 > bn a warpgroup can see no key across several KV blocks, and most CTAs of the causal
seqlen_q >> seqlen_k shape see none at all (the Q-tile race of test_tiles_without_keys_race_nothing).

Skips without a GPU, without FA4MLIR_BUNDLE, or when the bundle lacks these kernels (build them with
`python -m fa4mlir bundle --set gpu-tests`, or `--set attention-tiles`).
"""
import pytest
from test_attention_fa4_pieces import load_sm90, run
from test_attention_sm90 import assert_ok, seed_of

from fa4mlir import kernel_sets, kernels
from fa4mlir.kernels.attention_sm90_config import KERNEL
from fa4mlir.testing import attention_inputs, compare_attention

pytestmark = pytest.mark.gpu

VARIANTS = [cfg for _, cfg, *_ in kernel_sets.tile_variants()]
SHAPES = [  # batch, seqlen_q, seqlen_k, heads, kv_heads
    (2, 1, 1, 4, 2),
    (2, 1000, 1000, 8, 2),   # GQA
    (1, 4224, 4224, 2, 1),   # MQA, 22 query tiles of 192
    (2, 300, 1000, 4, 4),    # seqlen_q < seqlen_k
    (2, 1000, 200, 4, 4),    # causal: tiles whose first warpgroup sees no key in 2+ blocks
    (4, 4096, 200, 16, 16),  # causal: most CTAs see no key
]


def _id(cfg) -> str:
    return f"d{cfg.head_dim}-{'causal' if cfg.causal else 'full'}-{cfg.bm}x{cfg.bn}"


@pytest.fixture(scope="module", params=VARIANTS, ids=[_id(c) for c in VARIANTS])
def variant(request, bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    cfg = request.param
    return cfg, load_sm90(bundle, cfg, kernels.cubin_backend(KERNEL), _id(cfg), "attention-tiles")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}_sq{}_sk{}_h{}_kv{}".format(*s))
def test_matches_reference(variant, shape):
    cfg, kern = variant
    q, k, v = attention_inputs(*shape, cfg.head_dim, cfg.dtype, seed_of("tiles", _id(cfg), shape))
    scale = cfg.head_dim ** -0.5
    o, lse = run(kern, q, k, v, scale, num_sms=3)   # persistent: every CTA loops over several tiles
    assert_ok(compare_attention(q, k, v, o, lse, scale, cfg.causal))
