"""FlashAttention-4's softmax pieces on Hopper: the 'attention-fa4-pieces' kernels of the bundle
(sm_90a attention with 1 in 4 softmax exps by the FMA polynomial and lazy rescale at 8 log2 units),
launched directly through the runtime (flash_attn_func runs the default kernels).

Every case writes into NaN-poisoned out and lse and is judged like tests/gpu/test_attention_sm90.py
(fa4mlir.testing.compare_attention: the FA rule against a float32/float64 reference on out and lse,
0 / +inf on rows that see no key, no NaN). Besides random inputs (whose row max almost never grows by
8 log2 units after the first block: O's rescale is skipped), keys built so that the lazy path
matters: every row's max creeps up block after block by less than the threshold (m stays, P > 1,
until the lag exceeds the threshold and m moves), or jumps once (m moves, O is rescaled).

Skips without a GPU, without FA4MLIR_BUNDLE, or when the bundle lacks these kernels (build them with
`python -m fa4mlir bundle --set gpu-tests`, or `--set attention-fa4-pieces`).
"""
import math

import pytest
from test_attention_sm90 import assert_ok, seed_of

from fa4mlir import kernel_sets, kernels
from fa4mlir.attention import AttnProblem
from fa4mlir.kernels.attention_sm90_config import KERNEL, LOG2E, AttnConfig, grid, launch_args
from fa4mlir.testing import attention_inputs, compare_attention, torch_dtype

pytestmark = pytest.mark.gpu

PIECES = kernel_sets.SETS["attention-fa4-pieces"]()
SHAPES = [  # batch, seqlen_q, seqlen_k, heads, kv_heads (GQA 8 / 2)
    (2, 1, 1, 8, 2),
    (2, 127, 127, 8, 2),
    (2, 1000, 1000, 8, 2),
    (1, 4224, 4224, 8, 2),
    (2, 300, 1000, 8, 2),    # seqlen_q < seqlen_k
    (2, 1000, 300, 8, 2),    # seqlen_q > seqlen_k: causal rows 0..699 see no key
    (1, 1, 4224, 8, 2),      # one query row against 33 key blocks
]
NAN = float("nan")


def _id(cfg) -> str:
    return f"{cfg.dtype}-d{cfg.head_dim}-{'causal' if cfg.causal else 'full'}{cfg.name_suffix()}"


@pytest.fixture(scope="module", params=PIECES, ids=[_id(entry[1]) for entry in PIECES])
def piece(request, bundle, require_arch):
    """(config, loaded kernel) of one attention-fa4-pieces entry of the bundle."""
    require_arch(9)
    pytest.importorskip("torch")
    cfg = request.param[1]
    return cfg, load_sm90(bundle, cfg, kernels.cubin_backend(KERNEL), _id(cfg), "attention-fa4-pieces")


def load_sm90(bundle, cfg, cubin_backend: str, label: str, set_name: str):
    """The loaded sm_90a attention kernel of `cfg` from the bundle (skip when it is not there), with
    setmaxnreg honoured and the block the config asks for."""
    from fa4mlir.runtime import load
    try:
        art = bundle.find(arch="sm_90a", exact=True, cubin_backend=cubin_backend, **cfg.key())
    except LookupError:
        pytest.skip(f"bundle {bundle.root} has no {label} kernel: build it with "
                    f"`python -m fa4mlir bundle --set gpu-tests` (or --set {set_name})")
    assert not art.resources.get("setmaxnreg_ignored"), art.resources
    assert art.block == (cfg.threads, 1, 1), art.block
    return load(art)


def run(kern, q, k, v, scale: float, num_sms: int | None = None):
    """One launch (bench/attention_probe.py's contract) into NaN-poisoned out and lse; a persistent
    kernel gets the grid grid() sizes for `num_sms` SMs."""
    import torch
    b, sq, h, _ = q.shape
    o = torch.full_like(q, NAN)
    lse = torch.full((b, h, sq), NAN, device=q.device, dtype=torch.float32)
    cfg = AttnConfig.from_key(kern.artifact.config)
    problem = AttnProblem.of(q.shape, k.shape, cfg.dtype, causal=cfg.causal, softmax_scale=scale)
    kern.launch(grid(cfg, problem, num_sms), launch_args(cfg, problem, dict(q=q, k=k, v=v, o=o, lse=lse)))
    torch.cuda.synchronize()
    return o, lse


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}_sq{}_sk{}_h{}_kv{}".format(*s))
def test_random_inputs_match_reference(piece, shape):
    cfg, kern = piece
    q, k, v = attention_inputs(*shape, cfg.head_dim, cfg.dtype, seed_of("fa4-pieces", _id(cfg), shape))
    scale = cfg.head_dim ** -0.5
    o, lse = run(kern, q, k, v, scale)
    assert_ok(compare_attention(q, k, v, o, lse, scale, cfg.causal))


def rising_inputs(cfg, batch, seqlen, heads, kv_heads, kind: str, seed: int):
    """q rows along one unit direction u (times sqrt(D), plus noise) and key j along u with a norm
    that grows with j, so that the scaled score of key j is about rise(j) natural units for every
    query row. 'creep': rise grows by 5 log2 units per key block (below the threshold of 8: each
    row's m lags its max, P reaches up to 2^8, and m moves every other block); 'jump': flat, then
    +12 log2 units from block 2 on (every row moves its m once, O is rescaled)."""
    import torch
    tdt = torch_dtype(cfg.dtype)
    d = cfg.head_dim
    gen = torch.Generator(device="cuda").manual_seed(seed)
    u = torch.randn(d, device="cuda", generator=gen, dtype=torch.float64)
    u = u / u.norm()
    j = torch.arange(seqlen, device="cuda", dtype=torch.float64)
    if kind == "creep":
        rise = 5.0 * j / cfg.bn
    else:
        rise = torch.where(j >= 2 * cfg.bn, 12.0, 0.0)
    rise = rise / LOG2E    # log2 units -> natural units of the scaled score
    q = math.sqrt(d) * u + 0.3 * torch.randn(batch, seqlen, heads, d, device="cuda", generator=gen,
                                             dtype=torch.float64)
    k = rise[None, :, None, None] * u + 0.3 * torch.randn(batch, seqlen, kv_heads, d, device="cuda",
                                                          generator=gen, dtype=torch.float64)
    v = torch.randn(batch, seqlen, kv_heads, d, device="cuda", generator=gen, dtype=torch.float64)
    return q.to(tdt), k.to(tdt), v.to(tdt)


def block_max_rises(q, k, scale: float, bn: int):
    """Per (batch, head, query row): the rise of the row's max score (log2 units) from each key
    block to the next, over all keys (the causal rows see a prefix of it)."""
    import torch
    hk = k.shape[2]
    kk = k.double().repeat_interleave(q.shape[2] // hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), kk) * scale * LOG2E
    nb = (s.shape[-1] + bn - 1) // bn
    blocks = torch.stack([s[..., i * bn:(i + 1) * bn].amax(-1) for i in range(nb)], dim=-1)
    running = torch.cummax(blocks, dim=-1).values
    return running[..., 1:] - running[..., :-1], running[..., -1] - running[..., 0]


@pytest.mark.parametrize("kind", ["creep", "jump"])
def test_lazy_rescale_when_it_matters(piece, kind):
    cfg, kern = piece
    b, s, h, hk = 2, 1000, 8, 2
    q, k, v = rising_inputs(cfg, b, s, h, hk, kind, seed_of("lazy", kind, _id(cfg)))
    scale = cfg.head_dim ** -0.5
    # the inputs do what they are built for (over the whole key range)
    steps, total = block_max_rises(q, k, scale, cfg.bn)
    if kind == "creep":
        assert bool((steps < cfg.rescale_threshold).all()), f"a block rose by {steps.max().item():.2f} log2"
        assert bool((total > 2 * cfg.rescale_threshold).all()), "m must move more than once"
    else:
        assert bool((steps.amax(-1) > cfg.rescale_threshold).all()), "every row must jump once"
    o, lse = run(kern, q, k, v, scale)
    assert_ok(compare_attention(q, k, v, o, lse, scale, cfg.causal))
