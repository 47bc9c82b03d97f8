"""Deviceless: the decode kernel's unsplit variant ([D-decode-unsplit]) executed by the sm_90a
interpreter (fa4mlir.interpret) on tiny problems, by the FA rule against the float32 reference of
the kernel contract (testing_kvcache.kvcache_reference): a contiguous cache and a paged one of
page size 8 (8-row TMA boxes, [D-decode-box8]) with a shuffled page table, NaN in every unused row
and page and in out before the call, GQA packed rows with seqlen_q 2 under the causal mask, a
strided out, and a sequence of length 0 (O = 0, LSE = +inf). About 4 s a case on one core.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fa4mlir import interpret  # noqa: E402
from fa4mlir.attention import kvcache as kc  # noqa: E402
from fa4mlir.kernels import attention_decode_sm90 as decode_kernel  # noqa: E402
from fa4mlir.kernels import attention_decode_sm90_config as dec  # noqa: E402
from fa4mlir.runtime import TensorInfo  # noqa: E402
from fa4mlir.testing import FaTally, attention_math  # noqa: E402
from fa4mlir.testing_kvcache import kvcache_reference  # noqa: E402

B, SQ, H, HKV, D = 3, 2, 4, 2, 64
LENGTHS = [70, 0, 9]
NAN16 = 0x7FC0


def _info(a: np.ndarray, dtype: str, strides=None) -> TensorInfo:
    strides = strides or tuple(s // a.itemsize for s in a.strides)
    return TensorInfo(1 << 20, a.shape, strides, dtype, "cuda")


def _bits(x) -> np.ndarray:
    return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).copy()


def _bf16(bits: np.ndarray):
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)


def _cache(gen, page_size):
    """K and V as bf16 bits, NaN wherever a sequence owns nothing; the page table (None: contiguous)."""
    if page_size is None:
        k, v = (torch.full((B, 80, HKV, D), float("nan")) for _ in range(2))
        for b, n in enumerate(LENGTHS):
            k[b, :n], v[b, :n] = torch.randn(n, HKV, D, generator=gen), torch.randn(n, HKV, D, generator=gen)
        return _bits(k), _bits(v), None
    max_pages = 80 // page_size
    num_pages = B * max_pages + 2
    k, v = (torch.full((num_pages, page_size, HKV, D), float("nan")) for _ in range(2))
    perm = torch.randperm(num_pages, generator=gen).numpy()
    table = np.full((B, max_pages), -1, np.int32)
    used = 0
    for b, n in enumerate(LENGTHS):
        pages = -(-n // page_size)
        table[b, :pages] = perm[used:used + pages]
        used += pages
        for t0 in range(0, n, page_size):
            rows = min(page_size, n - t0)
            page = table[b, t0 // page_size]
            k[page, :rows] = torch.randn(rows, HKV, D, generator=gen)
            v[page, :rows] = torch.randn(rows, HKV, D, generator=gen)
    return _bits(k), _bits(v), table


@pytest.mark.parametrize("page_size", [None, 8])
def test_unsplit_decode_through_the_interpreter(page_size):
    gen = torch.Generator().manual_seed(5 + (page_size or 0))
    q = _bits(torch.randn(B, SQ, H, D, generator=gen))
    k, v, table = _cache(gen, page_size)
    lens = np.array(LENGTHS, np.int32)
    wide = np.full((B, SQ, H + 1, D), NAN16, np.uint16)        # out = wide[:, :, 1:]: strided
    out_strides = (SQ * (H + 1) * D, (H + 1) * D, D)
    lse = np.full((B, H, SQ), np.nan, np.float32)
    infos = dict(q=_info(q, "bf16"), k_cache=_info(k, "bf16"), v_cache=_info(v, "bf16"),
                 cache_seqlens=_info(lens, "i32"), page_table=None if table is None else _info(table, "i32"))
    problem = kc.check_kvcache_inputs(**infos)
    plan = kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=None,
                                                return_lse=True), 132)
    assert plan.unsplit and plan.gqa.packed
    cfg = dec.default_config("bf16", D, page_size, unsplit=True)
    assert cfg.box_rows == (8 if page_size else cfg.bn) and not cfg.gather
    kernel = interpret.load(decode_kernel.build(cfg))
    out_flat = wide.reshape(-1)[D:]                             # out's first element: wide[0, 0, 1, 0]
    tensors = {"q": q, "k_cache": k, "v_cache": v, "cache_seqlens": lens,
               "page_table": table if table is not None else lens, "out": out_flat, "lse": lse,
               "k_scale": lens, "v_scale": lens, "k_pool": k, "v_pool": v}
    args = dec.split_launch_args(plan, tensors, (SQ * H * D, H * D, D), table.shape[1] if table is not None else 0,
                                 out_strides=out_strides)
    kernel.launch(plan.grid, args)
    assert (wide[:, :, 0] == NAN16).all(), "wrote outside out"
    out = _bf16(wide[:, :, 1:].copy()).double()
    ref = kvcache_reference(_bf16(q).float(), _bf16(k).float(), _bf16(v).float(), torch.from_numpy(lens),
                            None if table is None else torch.from_numpy(table), compute_dtype=np.float32)
    lse_t = torch.from_numpy(lse).double()
    assert not torch.isnan(out).any() and not torch.isnan(lse_t).any()
    assert (out[1] == 0).all() and torch.isposinf(lse_t[1]).all()    # length 0: no key seen
    tally = FaTally()
    for b, n in enumerate(LENGTHS):
        if not n:
            continue
        if table is None:
            k_rows, v_rows = _bf16(k)[b, :n], _bf16(v)[b, :n]
        else:
            t = np.arange(n)
            rows = table[b][t // page_size] * page_size + t % page_size
            k_rows, v_rows = (_bf16(x).reshape(-1, HKV, D)[torch.from_numpy(rows)] for x in (k, v))
        low_o, low_l = attention_math(_bf16(q)[b:b + 1], k_rows[None], v_rows[None], D ** -0.5, True, torch.bfloat16)
        tally.add(out[b], low_o[0].double(), ref["out"][b].double(),
                  lse_t[b], low_l[0].double(), ref["lse"][b].double())
    tally.check()
