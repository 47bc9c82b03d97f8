"""The sm_100a sparse MLA prefill (attention_mla_sparse_sm100: TMA gather4, D_v split over two CTAs per
token) on the GPU: runs only on a Blackwell (sm_100) GPU, skips elsewhere.

No sm_100 GPU exists in this project's reach, so these cases have never run; the same kernels'
numerics were interpreted on the CPU (tests/test_mla_sparse_sm100.py). The kernels of the bundle set
`mla-sparse-sm100` (`python -m fa4mlir bundle --set mla-sparse-sm100`) run by the FA rule against the
float64 reference (fa4mlir.testing_mla.check_mla_sparse) on the sm_90a GPU test's problems (-1
padding, indices >= s_kv and int32's extremes, duplicates, NaN in every kv row no valid entry names,
all-invalid tokens, topk_length, sinks), with NaN-poisoned outputs.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

CASES = [  # s_q, heads, topk, s_kv, topk_length + sinks
    (9, 64, 128, 300, False),
    (9, 128, 512, 5000, False),
    (10, 64, 2048, 1000, True),
    (8, 128, 256, 95, True),
]


@pytest.fixture(scope="module")
def sparse_kernels(bundle, require_arch):
    require_arch(10)
    pytest.importorskip("torch")
    from fa4mlir.kernels.attention_mla_sparse_sm100_config import KERNEL
    from fa4mlir.runtime import load
    entries = {bool(e["config"].get("sinks")): e for e in bundle.entries if e.get("config", {}).get("kernel") == KERNEL}
    if len(entries) < 2:
        pytest.skip("the bundle lacks the sm_100a sparse MLA kernels: build it with `python -m fa4mlir bundle "
                    "--set mla-sparse-sm100`")
    kernels = {}
    for sinks, e in entries.items():
        cfg = {k: v for k, v in e["config"].items() if k not in ("name", "arch")}
        kernels[sinks] = load(bundle.find(name=e["name"], arch=e["arch"], **cfg))
    return kernels


@pytest.mark.parametrize("s_q,heads,topk,s_kv,extras", CASES)
def test_mla_sparse_sm100_by_the_fa_rule(sparse_kernels, s_q, heads, topk, s_kv, extras):
    import torch
    from fa4mlir.kernels import attention_mla_sparse_sm100_config as sc
    from fa4mlir.testing_mla import check_mla_sparse
    from test_mla_sparse_gpu import _case
    q, kv, idx = _case(torch, s_q, heads, topk, s_kv)
    lens = sinks = None
    if extras:
        lens = np.random.default_rng(1).integers(0, topk + 100, s_q).astype(np.int32)
        lens[0], lens[1] = 0, topk // 3
        sinks = torch.randn(heads, generator=torch.Generator().manual_seed(2))
        sinks[:3] = torch.tensor([float("-inf"), float("inf"), 4.0])
    cfg = sc.MLASparseSm100Config(topk_length=extras, sinks=extras)
    out = torch.full((s_q, heads, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse, max_logits = (torch.full((s_q, heads), float("nan"), device="cuda") for _ in range(2))
    tensors = dict(q=q.cuda(), kv=kv.cuda().view(s_kv, 576), indices=torch.from_numpy(idx).cuda().view(s_q, topk),
                   out=out, lse=lse, max_logits=max_logits)
    if extras:
        tensors.update(topk_length=torch.from_numpy(lens).cuda(), sinks=sinks.float().cuda())
    scale = 576 ** -0.5
    sparse_kernels[extras].launch(sc.grid(s_q), sc.launch_args(cfg, tensors, s_kv=s_kv, heads=heads, topk=topk,
                                                               softmax_scale=scale))
    torch.cuda.synchronize()
    check_mla_sparse(q, kv, idx, out.cpu().float(), max_logits.cpu(), lse.cpu(), scale, sinks=sinks, topk_length=lens)


@pytest.mark.parametrize("s_q,heads,topk,s_kv,extras", CASES[::3])
def test_entry_point_selects_the_sm100_kernel(sparse_kernels, bundle, s_q, heads, topk, s_kv, extras):
    """flash_mla_sparse_fwd on compute capability 10.0 runs attention_mla_sparse_sm100 (the route of
    attention/mla_sparse_sm100.py, from the bundle's mla-sparse-sm100 kernels), by the FA rule, twice
    identically; FP8 kv is refused with a typed error."""
    import torch
    from fa4mlir import flash_mla_sparse_fwd
    from fa4mlir.attention.errors import UnsupportedFeatureError
    from fa4mlir.testing_mla import check_mla_sparse
    from test_mla_sparse_gpu import _case
    q, kv, idx = _case(torch, s_q, heads, topk, s_kv)
    lens = sinks = None
    if extras:
        lens = torch.from_numpy(np.random.default_rng(1).integers(0, topk + 100, s_q).astype(np.int32))
        sinks = torch.randn(heads, generator=torch.Generator().manual_seed(2))
    scale = 576 ** -0.5
    args = (q.cuda(), kv.cuda(), torch.from_numpy(idx).cuda(), scale)
    kw = dict(attn_sink=None if sinks is None else sinks.cuda(), topk_length=None if lens is None else lens.cuda(),
              bundle=bundle)
    out, max_logits, lse = flash_mla_sparse_fwd(*args, **kw)
    again = flash_mla_sparse_fwd(*args, **kw)
    torch.cuda.synchronize()
    assert torch.equal(out, again[0]) and torch.equal(lse, again[2])
    check_mla_sparse(q, kv, idx, out.cpu().float(), max_logits.cpu(), lse.cpu(), scale, sinks=sinks,
                     topk_length=None if lens is None else lens.numpy())
    fp8 = torch.zeros((s_kv, 1, 656), dtype=torch.uint8, device="cuda")
    with pytest.raises(UnsupportedFeatureError, match="FP8 kv rows are not supported by the sm_100a kernel"):
        flash_mla_sparse_fwd(args[0], fp8, args[2], scale, bundle=bundle)
