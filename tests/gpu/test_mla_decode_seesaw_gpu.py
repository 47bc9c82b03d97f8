"""The MLA decode's seesaw schedule (MLADecodeConfig.seesaw, attention_mla_decode_seesaw_sm90; DEFAULT_RULE's
for more than 32 rows over bf16) on an sm_90 GPU, chosen through FA4MLIR_MLA_DECODE_VARIANT, by the FA rule against the float64 reference
(fa4mlir.testing_mla.check_mla): 64 and 128 heads, seqlen_q 1 and 2 (causal bottom-right), lengths with odd
and even tile counts (0, 1, 63, 64, 65, 129, 150, 1000, 4096), NaN in every cache row no sequence owns,
one split (the unsplit kernel) and several (the split kernel and the combine), the same bits for the same
inputs. Needs a bundle of the `mla` set (or `gpu-tests`); a bundle without the variant is a BundleError
naming it, never the default in its place.
"""
import pytest

from tests._mla_helpers import forced_metadata as _metadata
from tests.gpu.test_mla_decode_gpu import _case
from tests.gpu.test_mla_decode_gpu import torch  # noqa: F401  (the fixture)

pytestmark = pytest.mark.gpu

CASES = [  # lens, seqlen_q, heads, splits (None: get_mla_metadata's)
    ((1000, 65, 0, 150), 2, 128, 1),
    ((1000, 65, 0, 150), 2, 128, 3),
    ((4096, 129, 64, 63), 1, 64, None),
    ((4096, 129, 1), 1, 64, 7),
    ((777, 64, 1), 2, 64, 2),
]


@pytest.mark.parametrize("lens,seqlen_q,heads,splits", CASES)
def test_mla_decode_seesaw(torch, monkeypatch, lens, seqlen_q, heads, splits):  # noqa: F811
    from fa4mlir.attention import mla
    from fa4mlir.kernels import attention_mla_decode_sm90_config as mc
    from fa4mlir.testing_mla import check_mla
    monkeypatch.setenv(mc.VARIANT_ENV, mc.SEESAW_VARIANT)
    monkeypatch.setattr(mla, "_CALLS", mla.CallCache())
    q, kv, table, seqlens = _case(torch, lens, seqlen_q, heads, 64, "bf16", seed=3)
    qc, kvc, tc, sc = q.cuda(), kv.cuda(), table.cuda(), seqlens.cuda()
    if splits is None:
        meta, num_splits = mla.get_mla_metadata(sc, seqlen_q * heads, 1)
    else:
        meta, num_splits = _metadata(torch, splits, len(lens))
    out, lse = mla.flash_mla_with_kvcache(qc, kvc, tc, sc, 512, meta, num_splits, causal=True)
    again, lse2 = mla.flash_mla_with_kvcache(qc, kvc, tc, sc, 512, meta, num_splits, causal=True)
    torch.cuda.synchronize()
    assert torch.equal(out, again) and torch.equal(lse, lse2)          # deterministic
    (call,) = mla._CALLS._calls.values()                                   # the one prepared call
    cfg = mla.configs_for(call.problem)[0]
    assert cfg.seesaw
    check_mla(q, kv, table, seqlens, out.cpu().float(), lse.cpu(), causal=True)
