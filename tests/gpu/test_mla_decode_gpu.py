"""flash_mla_with_kvcache on an sm_90 GPU with the bundle's MLA kernels (FA4MLIR_BUNDLE built with
`--set mla`, `--set gpu-tests` or `--set bench`), by the FA rule against the float64 reference
(fa4mlir.testing_mla.check_mla): 16 / 64 / 128 heads, seqlen_q 1 and 2 (causal bottom-right),
lengths 0, 1, page + 1 and several pages side by side, shuffled block tables, NaN in every cache row
no sequence owns; splits from get_mla_metadata and forced (1: the unsplit variant; 3, 7: the split
kernel and the head-dim-512 combine), the same bits for the same inputs, bf16 and f16, pages of
64 and 16. The kernels are kernel_sets.mla()'s (tests/test_mla_decode.py compiles them deviceless).
The 16-head cases run the swap-AB kernel (attention_mla_decode_sm90_config.DEFAULT_RULE: at most 32
packed rows over a 16-bit cache); test_mla_decode_m64_at_16_heads runs the M64 kernel there
(FA4MLIR_MLA_DECODE_VARIANT=m64).
"""
import pytest

from tests._mla_helpers import forced_metadata as _metadata
from tests._mla_helpers import paged_latent

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


def _case(torch, lens, seqlen_q, heads, page, dtype, seed=0):
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    q, kv, table, _ = paged_latent(torch, lens, seqlen_q, heads, page, seed, spare_pages=3, junk=-1)
    return q.to(tdtype), kv.to(tdtype), torch.from_numpy(table), torch.tensor(lens, dtype=torch.int32)


CASES = [  # lens, seqlen_q, heads, page, dtype, splits (None: get_mla_metadata's)
    ((65, 0, 1, 300), 1, 16, 64, "bf16", None),
    ((65, 0, 1, 300), 2, 16, 64, "bf16", None),
    ((4096, 129, 64), 1, 64, 64, "bf16", 3),
    ((4096, 129, 64), 2, 128, 64, "bf16", 7),
    ((1000, 1), 2, 128, 64, "bf16", 1),
    ((777, 65, 0), 2, 64, 64, "f16", None),
    ((300, 17, 1), 2, 16, 16, "bf16", 2),
    ((300, 65, 0, 129), 1, 5, 64, "bf16", None),    # the rule's ring at N 8
    ((150, 700), 2, 10, 128, "bf16", 3),            # the rule's ring at N 24 over pages of 128
]


@pytest.mark.parametrize("lens,seqlen_q,heads,page,dtype,splits", CASES)
def test_mla_decode_matches_reference(torch, lens, seqlen_q, heads, page, dtype, splits):
    from fa4mlir import flash_mla_with_kvcache, get_mla_metadata
    from fa4mlir.testing_mla import check_mla
    q, kv, table, seqlens = _case(torch, lens, seqlen_q, heads, page, dtype)
    qc, kvc, tc, sc = q.cuda(), kv.cuda(), table.cuda(), seqlens.cuda()
    if splits is None:
        meta, num_splits = get_mla_metadata(sc, seqlen_q * heads, 1)
    else:
        meta, num_splits = _metadata(torch, splits, len(lens))
    out, lse = flash_mla_with_kvcache(qc, kvc, tc, sc, 512, meta, num_splits, causal=True)
    again, lse2 = flash_mla_with_kvcache(qc, kvc, tc, sc, 512, meta, num_splits, causal=True)
    torch.cuda.synchronize()
    assert out.shape == (len(lens), seqlen_q, heads, 512) and lse.shape == (len(lens), heads, seqlen_q)
    assert torch.equal(out, again) and torch.equal(lse, lse2)          # deterministic
    check_mla(q, kv, table, seqlens, out.cpu().float(), lse.cpu(), causal=True)


@pytest.mark.parametrize("splits", [None, 1])
def test_mla_decode_m64_at_16_heads(torch, monkeypatch, splits):
    """The M64 kernel where DEFAULT_RULE picks swap AB (named: FA4MLIR_MLA_DECODE_VARIANT=m64)."""
    from fa4mlir.attention import mla
    from fa4mlir.testing_mla import check_mla
    monkeypatch.setenv(mla.VARIANT_ENV, "m64")
    q, kv, table, seqlens = _case(torch, (65, 0, 1, 300), 2, 16, 64, "bf16", seed=4)
    sc = seqlens.cuda()
    meta, num_splits = mla.get_mla_metadata(sc, 32, 1) if splits is None else _metadata(torch, splits, 4)
    out, lse = mla.flash_mla_with_kvcache(q.cuda(), kv.cuda(), table.cuda(), sc, 512, meta, num_splits, causal=True)
    torch.cuda.synchronize()
    check_mla(q, kv, table, seqlens, out.cpu().float(), lse.cpu(), causal=True)


def test_mla_decode_typed_errors_on_device(torch):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.attention import errors as E
    q, kv, table, seqlens = _case(torch, (65,), 1, 16, 64, "bf16")
    meta, num_splits = _metadata(torch, 1, 1)
    with pytest.raises(E.DTypeError):
        flash_mla_with_kvcache(q.cuda(), kv.cuda(), table.long().cuda(), seqlens.cuda(), 512, meta, num_splits)
    with pytest.raises(E.DeviceError):
        flash_mla_with_kvcache(q, kv.cuda(), table.cuda(), seqlens.cuda(), 512, meta, num_splits)
    with pytest.raises(E.HeadDimError):
        flash_mla_with_kvcache(q.cuda(), kv.cuda(), table.cuda(), seqlens.cuda(), 576, meta, num_splits)


def test_mla_decode_in_a_cuda_graph(torch):
    """A captured call replayed after cache_seqlens, the block table and the cache change (same
    shapes and addresses): nothing is read on the host."""
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.testing_mla import check_mla
    q, kv, table, seqlens = _case(torch, (300, 65, 1), 2, 64, 64, "bf16", seed=2)
    q2, kv2, table2, seqlens2 = _case(torch, (100, 190, 0), 2, 64, 64, "bf16", seed=3)
    assert kv2.shape[0] <= kv.shape[0] and table2.shape[1] <= table.shape[1]
    qc, kvc, tc, sc = q.cuda(), kv.cuda(), table.cuda(), seqlens.cuda()
    meta, num_splits = _metadata(torch, 2, 3)
    flash_mla_with_kvcache(qc, kvc, tc, sc, 512, meta, num_splits, causal=True)       # prepare outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = flash_mla_with_kvcache(qc, kvc, tc, sc, 512, meta, num_splits, causal=True)
    graph.replay()
    torch.cuda.synchronize()
    check_mla(q, kv, table, seqlens, out.cpu().float(), lse.cpu(), causal=True)
    qc.copy_(q2)
    kvc[:kv2.shape[0]].copy_(kv2)
    tc.fill_(0)
    tc[:, :table2.shape[1]].copy_(table2)
    sc.copy_(seqlens2)
    graph.replay()
    torch.cuda.synchronize()
    full_table = tc.cpu()
    check_mla(q2, kvc.cpu(), full_table, seqlens2, out.cpu().float(), lse.cpu(), causal=True)
