"""flash_mla_sparse_fwd on an sm_90 GPU with the bundle's sparse MLA kernels (FA4MLIR_BUNDLE built
with `--set mla`, `--set gpu-tests` or `--set bench`), by the FA rule against the float64 reference
of FlashMLA's definition (fa4mlir.testing_mla.check_mla_sparse) for out, lse and max_logits: h_q 64
and 128, topk 128 to 2048, -1 padding, indices >= s_kv, duplicates, shuffled entries, s_kv shorter
than topk, NaN in every kv row no valid entry names, topk_length (shorter than topk, and 0), tokens
whose entries are all invalid, attention sinks (finite, -inf, +inf), a padded kv row stride, the
same bits for the same inputs. The same cases over FlashMLA's FP8 rows (kv float8_e4m3fn / uint8
[s_kv, 1, 656]), against the float64 reference over the rows dequantized exactly as the kernel does
(fa4mlir.testing_mla.dequantize_fp8_cache: FlashMLA's dequantize_k_cache): NaN bytes and scales in every
row no valid entry names, a padded row stride, the uint8 view. The kernels are kernel_sets.mla()'s
(tests/test_mla_sparse.py and tests/test_mla_sparse_fp8.py compile them deviceless and run them in the
interpreter).
"""
import numpy as np
import pytest

from tests.gpu._mla_sparse_common import prefill_lengths, prefill_sinks

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


def _case(torch, s_q, heads, topk, s_kv, seed=0, kv_pad=0):
    """q, kv (rows named by no valid entry are NaN; kv_pad extra columns per row) and indices: each
    token a shuffled mix of valid rows (with duplicates), -1 and indices >= s_kv; every 7th token all
    invalid."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    q = torch.randn(s_q, heads, 576, generator=g).to(torch.bfloat16)
    idx = np.empty((s_q, 1, topk), np.int32)
    for t in range(s_q):
        valid = rng.integers(0, s_kv, topk)
        kind = rng.integers(0, 10, topk)
        invalid = rng.choice([-2**31, -123456, s_kv, 2**31 - 1], topk)      # FlashMLA's candidates, some
        row = np.where(kind < 7, valid, np.where(kind < 9, -1, invalid))
        idx[t, 0] = -1 if t % 7 == 3 else row
    kv = torch.full((s_kv, 1, 576 + kv_pad), float("nan"))
    live = np.unique(idx[(idx >= 0) & (idx < s_kv)])
    kv[live, :, :576] = torch.randn(len(live), 1, 576, generator=g)
    return q, kv.to(torch.bfloat16), idx


def _fp8_case(torch, s_q, heads, topk, s_kv, seed=0, pitch=656):
    """q, the FP8 rows (CPU uint8 [s_kv, pitch]: the first 656 bytes a row FlashMLA's, the rest NaN
    bytes; rows no valid entry names quantized from NaN), the dequantized rows and indices."""
    from fa4mlir.testing_mla import dequantize_fp8_cache, quantize_fp8_cache
    q, kv, idx = _case(torch, s_q, heads, topk, s_kv, seed)
    kv8 = quantize_fp8_cache((kv.float() * 4).bfloat16().view(s_kv, 1, 1, 576))
    raw = torch.full((s_kv, pitch), 0xFF, dtype=torch.uint8)
    raw[:, :656] = kv8.view(torch.uint8).view(s_kv, 656)
    return q, raw, dequantize_fp8_cache(kv8).view(s_kv, 1, 576), idx


CACHES = ("bf16", "fp8")   # kv bf16 [s_kv, 1, 576], or FlashMLA's FP8 rows [s_kv, 1, 656]
CASES = [  # s_q, heads, topk, s_kv, topk_length, sinks, row padding in bytes (bf16: 8 columns; FP8: pitch 672)
    (9, 64, 128, 300, False, False, 0),
    (9, 128, 512, 5000, False, False, 0),
    (17, 128, 2048, 32768, False, False, 0),
    (10, 64, 2048, 1000, True, True, 0),       # s_kv < topk
    (30, 128, 1024, 4000, True, False, 16),    # padded rows (bf16 stride 584, FP8 stride 672)
    (8, 128, 256, 95, False, True, 0),
]


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("s_q,heads,topk,s_kv,with_lengths,with_sinks,pad_bytes", CASES)
def test_mla_sparse_matches_reference(torch, s_q, heads, topk, s_kv, with_lengths, with_sinks, pad_bytes, cache):
    from fa4mlir import flash_mla_sparse_fwd
    from fa4mlir.testing_mla import check_mla_sparse
    if cache == "fp8":
        q, raw, kv, idx = _fp8_case(torch, s_q, heads, topk, s_kv, pitch=656 + pad_bytes)
        kvc = raw.cuda()[:, :656].unsqueeze(1).view(torch.float8_e4m3fn)
        assert kvc.stride(0) == 656 + pad_bytes
    else:
        q, kv_rows, idx = _case(torch, s_q, heads, topk, s_kv, kv_pad=pad_bytes // 2)
        kv, kvc = kv_rows[..., :576], kv_rows.cuda()[..., :576]       # (padded rows: a strided view)
        assert kvc.stride(0) == 576 + pad_bytes // 2
    lens = sinks = None
    if with_lengths:
        lens = prefill_lengths(torch, s_q, topk)
    if with_sinks:
        sinks = prefill_sinks(torch, heads)
    scale = 576 ** -0.5
    args = (q.cuda(), kvc, torch.from_numpy(idx).cuda(), scale)
    kw = dict(attn_sink=None if sinks is None else sinks.cuda(), topk_length=None if lens is None else lens.cuda())
    out, max_logits, lse = flash_mla_sparse_fwd(*args, **kw)
    others = [flash_mla_sparse_fwd(*args, **kw)]          # the same bits again
    if cache == "fp8":                                    # ... and through the uint8 view of the rows
        others.append(flash_mla_sparse_fwd(args[0], kvc.view(torch.uint8), *args[2:], **kw))
    torch.cuda.synchronize()
    assert out.shape == (s_q, heads, 512) and out.dtype == torch.bfloat16
    assert max_logits.shape == lse.shape == (s_q, heads) and lse.dtype == torch.float32
    for other in others:
        assert torch.equal(out, other[0]) and torch.equal(max_logits, other[1]) and torch.equal(lse, other[2])
    check_mla_sparse(q, kv, idx, out.cpu().float(), max_logits.cpu(), lse.cpu(), scale, sinks=sinks,
                     topk_length=None if lens is None else lens.numpy())


def test_mla_sparse_typed_errors_on_device(torch):
    from fa4mlir import flash_mla_sparse_fwd
    from fa4mlir.attention import errors as E
    q, kv, idx = _case(torch, 2, 64, 128, 300)     # (no pad: kv is [s_kv, 1, 576])
    q, kv, idx = q.cuda(), kv.cuda(), torch.from_numpy(idx).cuda()
    with pytest.raises(E.DTypeError):
        flash_mla_sparse_fwd(q, kv, idx.long(), 0.1)
    with pytest.raises(E.ShapeError):
        flash_mla_sparse_fwd(q, kv, idx[..., :100].contiguous(), 0.1)
    with pytest.raises(E.ShapeError):
        flash_mla_sparse_fwd(q[:, :48].contiguous(), kv, idx, 0.1)
    with pytest.raises(E.HeadDimError):
        flash_mla_sparse_fwd(q, kv, idx, 0.1, d_v=576)


def test_fp8_mla_sparse_typed_errors_on_device(torch):
    from fa4mlir import flash_mla_sparse_fwd
    from fa4mlir.attention import errors as E
    q, raw, _, idx = _fp8_case(torch, 2, 64, 128, 300)
    q, kv, idx = q.cuda(), raw.cuda().view(300, 1, 656), torch.from_numpy(idx).cuda()
    with pytest.raises(E.DTypeError):                       # f16 q
        flash_mla_sparse_fwd(q.half(), kv, idx, 0.1)
    with pytest.raises(E.ShapeError):                       # the rows cut to 576 bytes
        flash_mla_sparse_fwd(q, kv[..., :576].contiguous(), idx, 0.1)
    with pytest.raises(E.LayoutError):                      # a 660-byte row pitch: not a multiple of 16
        wide = torch.zeros((300, 1, 660), dtype=torch.uint8, device="cuda")
        flash_mla_sparse_fwd(q, wide[..., :656], idx, 0.1)
