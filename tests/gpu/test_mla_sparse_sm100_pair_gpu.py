"""The sm_100a sparse MLA prefill as FlashMLA's CTA pair (attention_mla_sparse_sm100_pair: cluster of two
CTAs per token, cta_group::2 MMAs and gather4, Q in TMEM by tcgen05.cp) on the GPU: runs only on a
Blackwell (sm_100) GPU, skips elsewhere.

No sm_100 GPU exists in this project's reach, so these cases have never run; the kernels' numerics were
interpreted on the CPU (tests/test_mla_sparse_sm100_pair.py). The kernels of the bundle set
`mla-sparse-sm100-pair` (`python -m fa4mlir bundle --set mla-sparse-sm100-pair`) run by the FA rule
against the float64 reference on the split kernel's GPU problems with h_q 128 (the pair kernel's only
h_q), directly and through flash_mla_sparse_fwd with FA4MLIR_MLA_SPARSE_SM100=pair.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

CASES = [  # s_q, topk, s_kv, topk_length + sinks
    (9, 128, 300, False),
    (9, 512, 5000, False),
    (10, 2048, 1000, True),
    (8, 256, 95, True),
]


@pytest.fixture(scope="module")
def pair_kernels(bundle, require_arch):
    require_arch(10)
    pytest.importorskip("torch")
    from fa4mlir.kernels.attention_mla_sparse_sm100_pair_config import KERNEL
    from fa4mlir.runtime import load
    entries = {bool(e["config"].get("sinks")): e for e in bundle.entries if e.get("config", {}).get("kernel") == KERNEL}
    if len(entries) < 2:
        pytest.skip("the bundle lacks the sm_100a pair sparse MLA kernels: build it with `python -m fa4mlir bundle "
                    "--set mla-sparse-sm100-pair`")
    kernels = {}
    for sinks, e in entries.items():
        cfg = {k: v for k, v in e["config"].items() if k not in ("name", "arch")}
        kernels[sinks] = load(bundle.find(name=e["name"], arch=e["arch"], **cfg))
    return kernels


def _extras(torch, s_q, topk):
    lens = np.random.default_rng(1).integers(0, topk + 100, s_q).astype(np.int32)
    lens[0], lens[1] = 0, topk // 3
    sinks = torch.randn(128, generator=torch.Generator().manual_seed(2))
    sinks[:3] = torch.tensor([float("-inf"), float("inf"), 4.0])
    return lens, sinks


@pytest.mark.parametrize("s_q,topk,s_kv,extras", CASES)
def test_mla_sparse_sm100_pair_by_the_fa_rule(pair_kernels, s_q, topk, s_kv, extras):
    import torch
    from fa4mlir.kernels import attention_mla_sparse_sm100_pair_config as pc
    from fa4mlir.testing_mla import check_mla_sparse
    from test_mla_sparse_gpu import _case
    q, kv, idx = _case(torch, s_q, 128, topk, s_kv)
    lens, sinks = _extras(torch, s_q, topk) if extras else (None, None)
    cfg = pc.MLASparsePairConfig(topk_length=extras, sinks=extras)
    out = torch.full((s_q, 128, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse, max_logits = (torch.full((s_q, 128), float("nan"), device="cuda") for _ in range(2))
    tensors = dict(q=q.cuda(), kv=kv.cuda().view(s_kv, 576), indices=torch.from_numpy(idx).cuda().view(s_q, topk),
                   out=out, lse=lse, max_logits=max_logits)
    if extras:
        tensors.update(topk_length=torch.from_numpy(lens).cuda(), sinks=sinks.float().cuda())
    scale = 576 ** -0.5
    pair_kernels[extras].launch(pc.grid(s_q), pc.launch_args(cfg, tensors, s_kv=s_kv, heads=128, topk=topk,
                                                             softmax_scale=scale))
    torch.cuda.synchronize()
    check_mla_sparse(q, kv, idx, out.cpu().float(), max_logits.cpu(), lse.cpu(), scale, sinks=sinks, topk_length=lens)


@pytest.mark.parametrize("s_q,topk,s_kv,extras", CASES[::3])
def test_entry_point_runs_the_pair_kernel_under_the_knob(pair_kernels, bundle, monkeypatch, s_q, topk, s_kv, extras):
    """FA4MLIR_MLA_SPARSE_SM100=pair: flash_mla_sparse_fwd runs the pair kernel (bundle set
    mla-sparse-sm100-pair), by the FA rule, twice identically."""
    import torch
    from fa4mlir import flash_mla_sparse_fwd
    from fa4mlir.testing_mla import check_mla_sparse
    from test_mla_sparse_gpu import _case
    monkeypatch.setenv("FA4MLIR_MLA_SPARSE_SM100", "pair")
    q, kv, idx = _case(torch, s_q, 128, topk, s_kv)
    lens, sinks = _extras(torch, s_q, topk) if extras else (None, None)
    scale = 576 ** -0.5
    args = (q.cuda(), kv.cuda(), torch.from_numpy(idx).cuda(), scale)
    kw = dict(attn_sink=None if sinks is None else sinks.float().cuda(),
              topk_length=None if lens is None else torch.from_numpy(lens).cuda(), bundle=bundle)
    out, max_logits, lse = flash_mla_sparse_fwd(*args, **kw)
    again = flash_mla_sparse_fwd(*args, **kw)
    torch.cuda.synchronize()
    assert torch.equal(out, again[0]) and torch.equal(lse, again[2])
    check_mla_sparse(q, kv, idx, out.cpu().float(), max_logits.cpu(), lse.cpu(), scale, sinks=sinks, topk_length=lens)
