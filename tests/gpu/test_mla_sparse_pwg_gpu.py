"""The sparse MLA kernels' producer-warpgroup variant (FA4MLIR_MLA_SPARSE_PRODUCER=warpgroup: producer_warps=4,
attention_mla_sparse_sm90's note "Producer warpgroup") on an sm_90 GPU with the bundle's kernels (FA4MLIR_BUNDLE
built with `--set mla`, `--set gpu-tests` or `--set bench`): flash_mla_sparse_fwd on test_mla_sparse_gpu.py's
bf16 cases and flash_mla_with_kvcache with indices on test_mla_sparse_decode_gpu.py's bf16 shapes, by the FA rule
against the float64 reference (testing_mla.check_mla_sparse / check_mla_sparse_decode), the same bits on a
second call, and the same bits as the default kernel (the variant changes only who copies the rows and when
the consumers wait for them: the same wgmmas in the same order on the same tiles). The kernels are
kernel_sets.mla()'s (tests/test_mla_sparse_pwg.py compiles them deviceless and runs them in the interpreter).
"""
import pytest

from tests.gpu._mla_sparse_common import decode_lengths, prefill_lengths, prefill_sinks
from tests.gpu.test_mla_sparse_decode_gpu import SHAPES, _case as _decode_case, _check, _metadata
from tests.gpu.test_mla_sparse_gpu import CASES, _case

pytestmark = pytest.mark.gpu

ENV = "FA4MLIR_MLA_SPARSE_PRODUCER"
VARIANT_ENV = "FA4MLIR_MLA_SPARSE_VARIANT"


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


@pytest.mark.parametrize("s_q,heads,topk,s_kv,with_lengths,with_sinks,pad_bytes", CASES)
def test_sparse_prefill_matches_reference_and_the_default(torch, monkeypatch, s_q, heads, topk, s_kv, with_lengths,
                                                          with_sinks, pad_bytes):
    from fa4mlir import flash_mla_sparse_fwd
    from fa4mlir.testing_mla import check_mla_sparse
    q, kv_rows, idx = _case(torch, s_q, heads, topk, s_kv, kv_pad=pad_bytes // 2)
    kv, kvc = kv_rows[..., :576], kv_rows.cuda()[..., :576]
    lens = sinks = None
    if with_lengths:
        lens = prefill_lengths(torch, s_q, topk)
    if with_sinks:
        sinks = prefill_sinks(torch, heads)
    scale = 576 ** -0.5
    args = (q.cuda(), kvc, torch.from_numpy(idx).cuda(), scale)
    kw = dict(attn_sink=None if sinks is None else sinks.cuda(), topk_length=None if lens is None else lens.cuda())
    monkeypatch.setenv(VARIANT_ENV, "tile")      # the tile step: its gather warp against the producer warpgroup
    monkeypatch.setenv(ENV, "warp")
    default = flash_mla_sparse_fwd(*args, **kw)
    monkeypatch.setenv(ENV, "warpgroup")
    out, max_logits, lse = flash_mla_sparse_fwd(*args, **kw)
    again = flash_mla_sparse_fwd(*args, **kw)
    torch.cuda.synchronize()
    for x, y in zip((out, max_logits, lse), again):
        assert torch.equal(x, y)
    check_mla_sparse(q, kv, idx, out.cpu().float(), max_logits.cpu(), lse.cpu(), scale, sinks=sinks,
                     topk_length=None if lens is None else lens.numpy())
    for x, y in zip((out, max_logits, lse), default):
        assert torch.equal(x, y)


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,dtype,with_lengths,splits",
                         [c[:9] for c in SHAPES if c[6] == "bf16"])
def test_sparse_decode_matches_reference_and_the_default(torch, monkeypatch, batch, seqlen_q, heads, topk, pages, page,
                                                         dtype, with_lengths, splits):
    from fa4mlir import flash_mla_with_kvcache, get_mla_metadata
    q, cache, idx = _decode_case(torch, batch, seqlen_q, heads, topk, pages, page, dtype)
    qc, cc, ic = q.cuda(), cache.cuda(), torch.from_numpy(idx).cuda()
    seqlens = torch.full((batch,), pages * page, dtype=torch.int32, device="cuda")
    if splits is None:
        meta, num_splits = get_mla_metadata(seqlens, seqlen_q * heads, 1, heads, topk=topk)
    else:
        meta, num_splits = _metadata(torch, splits, batch)
    lens = None
    if with_lengths:
        lens = decode_lengths(torch, batch, topk)
    kw = dict(indices=ic, topk_length=None if lens is None else lens.cuda())
    monkeypatch.setenv(VARIANT_ENV, "tile")      # the tile step: its gather warp against the producer warpgroup
    monkeypatch.setenv(ENV, "warp")
    default = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    monkeypatch.setenv(ENV, "warpgroup")
    out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    again = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    torch.cuda.synchronize()
    assert torch.equal(out, again[0]) and torch.equal(lse, again[1])
    _check(torch, q, cache, idx, out, lse, None if lens is None else lens.numpy())
    assert torch.equal(out, default[0]) and torch.equal(lse, default[1])


def test_knob_typed_error_on_device(torch, monkeypatch):
    from fa4mlir import flash_mla_sparse_fwd
    from fa4mlir.attention.errors import KnobError
    q, kv, idx = _case(torch, 2, 64, 128, 300)
    monkeypatch.setenv(ENV, "warpgroups")
    with pytest.raises(KnobError, match=ENV):
        flash_mla_sparse_fwd(q.cuda(), kv.cuda(), torch.from_numpy(idx).cuda(), 0.1)
