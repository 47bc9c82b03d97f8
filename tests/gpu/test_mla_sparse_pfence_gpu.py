"""The sparse MLA prefill's producer-fence variant (opt-in, FA4MLIR_MLA_SPARSE_VARIANT=seesaw_overlap_pfence: the
overlap with the gather ring's proxy fence in the producer warpgroup, attention_mla_sparse_seesaw_sm90 note "Producer
fence") on an sm_90 GPU: three of test_mla_sparse_seesaw_gpu.py's prefill cases (a pair and the odd tile; topk 2048;
topk_length and sinks), by the FA rule against the float64 reference and bit for bit the rule's kernel (the same
wgmmas in the same order: only where the fence runs differs), the same bits twice. A hang (a producer announcement
that deadlocks the rings) is a timeout. Needs a bundle of the `mla-sparse-variants` set (or `gpu-tests`).
"""
import numpy as np
import pytest

from tests.gpu.test_mla_sparse_gpu import _case
from tests.gpu.test_mla_sparse_gpu import torch  # noqa: F401  (the fixture)
from tests.gpu.test_mla_sparse_seesaw_gpu import PREFILL

pytestmark = pytest.mark.gpu

VARIANT = "seesaw_overlap_pfence"


@pytest.mark.parametrize("s_q,heads,topk,s_kv,options", PREFILL[1:4])
def test_sparse_prefill_pfence(torch, monkeypatch, s_q, heads, topk, s_kv, options):  # noqa: F811
    from fa4mlir.attention import mla_sparse as ms
    from fa4mlir.testing_mla import check_mla_sparse
    q, kv, idx = _case(torch, s_q, heads, topk, s_kv)
    lens = sinks = None
    if options:
        lens = torch.from_numpy(np.random.default_rng(1).integers(0, topk + 100, s_q).astype(np.int32))
        lens[0], lens[1] = 0, topk // 3
        sinks = torch.randn(heads, generator=torch.Generator().manual_seed(2))
        sinks[:3] = torch.tensor([float("-inf"), float("inf"), 4.0])
    scale = 576 ** -0.5
    args = (q.cuda(), kv.cuda(), torch.from_numpy(idx).cuda(), scale)
    kw = dict(attn_sink=None if sinks is None else sinks.cuda(), topk_length=None if lens is None else lens.cuda())
    monkeypatch.delenv("FA4MLIR_MLA_SPARSE_PRODUCER", raising=False)
    got = {}
    for variant in ("default", VARIANT):        # the rule's kernel (the overlap), then the producer fence
        monkeypatch.setenv(ms.VARIANT_ENV, variant)
        got[variant] = ms.flash_mla_sparse_fwd(*args, **kw)
        again = ms.flash_mla_sparse_fwd(*args, **kw)
        torch.cuda.synchronize()
        assert all(torch.equal(a, b) for a, b in zip(got[variant], again))
    out, max_logits, lse = got[VARIANT]
    check_mla_sparse(q, kv, idx, out.cpu().float(), max_logits.cpu(), lse.cpu(), scale, sinks=sinks,
                     topk_length=None if lens is None else lens.numpy())
    assert all(torch.equal(a, b) for a, b in zip(got[VARIANT], got["default"]))
