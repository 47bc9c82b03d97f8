"""sm_100a FlashAttention-4 forward numerics: runs only on a Blackwell (sm_100) GPU, skips elsewhere.

No sm_100 GPU exists in this project's reach, so these cases have never run: they are written so
that the first run on a B200 checks every attention_fwd_sm100 kernel of the bundle (`python -m
fa4mlir bundle --set attention-sm100`) by the FA rule, with fresh random inputs, NaN-poisoned
outputs, GQA as compiled into the config, and bitwise-repeatable output. On an H100/H200 the module
skips at its fixture (require_arch(10)).
"""
import zlib

import pytest

from fa4mlir.testing import attention_inputs, compare_attention

pytestmark = pytest.mark.gpu

SHAPES = [  # batch, seqlen_q, seqlen_k
    (1, 1, 1), (2, 3, 127), (2, 1000, 1000), (1, 256, 4224), (2, 1000, 128), (1, 4224, 4224),
]


@pytest.fixture(scope="module")
def kernels_sm100(bundle, require_arch):
    require_arch(10)
    pytest.importorskip("torch")
    from fa4mlir.kernels.attention_sm100_config import KERNEL
    from fa4mlir.kernels.attention_sm100_config import FA4Config
    # the dense prefill kernels (the serving, paged and decode ones have their own launch contracts)
    entries = [e for e in bundle.entries if e.get("config", {}).get("kernel") == KERNEL
               and (lambda c: c.plain and not c.paged and not c.decode)(FA4Config.from_key(e["config"]))]
    if not entries:
        pytest.skip(f"the bundle has no {KERNEL} kernel: build it with `python -m fa4mlir bundle --set attention-sm100`")
    return bundle, entries


def _run(bundle, entry, q, k, v, scale):
    import torch
    from fa4mlir.attention import AttnProblem
    from fa4mlir.kernels.attention_sm100_config import FA4Config, grid, launch_args
    from fa4mlir.runtime import load
    cfg = {kk: vv for kk, vv in entry["config"].items() if kk not in ("name", "arch")}
    kern = load(bundle.find(name=entry["name"], arch=entry["arch"], **cfg))
    b, sq, h, _ = q.shape
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, sq), float("nan"), device=q.device, dtype=torch.float32)
    config = FA4Config.from_key(kern.artifact.config)
    problem = AttnProblem.of(q.shape, k.shape, config.dtype, causal=config.causal, softmax_scale=scale)
    kern.launch(grid(config, problem), launch_args(config, problem, dict(q=q, k=k, v=v, o=o, lse=lse)))
    torch.cuda.synchronize()
    return o, lse


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fa_rule(kernels_sm100, shape):
    bundle, entries = kernels_sm100
    batch, sq, sk = shape
    for entry in entries:
        c = entry["config"]
        heads, kv_heads = c["num_q_heads"], c["num_kv_heads"]
        seed = zlib.crc32(repr((entry["name"], shape)).encode())
        q, k, v = attention_inputs(batch, sq, sk, heads, kv_heads, c["head_dim"], c["dtype"], seed)
        scale = c["head_dim"] ** -0.5
        o, lse = _run(bundle, entry, q, k, v, scale)
        r = compare_attention(q, k, v, o, lse, scale, c["causal"])
        assert r["ok"], (entry["name"], r)
        o2, lse2 = _run(bundle, entry, q, k, v, scale)
        assert bool((o2 == o).all()) and bool((lse2 == lse).all()), f"{entry['name']}: runs differ"
