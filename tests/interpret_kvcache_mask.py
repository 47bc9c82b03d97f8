"""Deviceless harness (imported by tests/test_kvcache_mask_interpret.py): one flash_attn_with_kvcache
call with a window, a chunk, a softcap or sinks, planned by the host code (kvcache.plan_problem,
kvcache_call.configs_for) and executed by the sm_90a interpreter: the decode kernel, then (several
splits) the combine's math on the host (testing_kvcache.combine_splits with the sinks: the
interpreter does not run the combine kernel, whose split loops start at the lane index); judged by the FA rule against the float32 reference
of the kernel contract (testing_kvcache.kvcache_reference, which implements the mask, softcap and
sinks) with PyTorch's bf16 math (testing.attention_math) as the low-precision yardstick.

The kernel's cache is poisoned where the kernel must not look: NaN in every row past each length
and in unused pages (as tests/test_kvcache_interpret.py), and NaN in the V rows of every whole KV
tile left of the first tile the window reaches (`skipped`): a tile that was visited anyway, masked
or not, multiplies those rows by P = 0 and turns the output NaN. The reference reads clean rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fa4mlir import interpret
from fa4mlir.attention import kvcache as kc
from fa4mlir.attention.kvcache_call import configs_for
from fa4mlir.kernels import attention_decode_sm90
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels.common.mask_family import IntOps, attention_mask, row_keys
from fa4mlir.runtime import TensorInfo
from fa4mlir.testing import FaTally, attention_math
from fa4mlir.testing_kvcache import combine_splits, kvcache_reference

D = 64
CAPACITY = 192
NAN16 = 0x7FC0


@dataclass(frozen=True)
class Case:
    lengths: tuple = (150, 0, 1, 37)
    seqlen_q: int = 2
    heads: int = 4
    kv_heads: int = 2
    page_size: int | None = None
    causal: bool = True
    window_size: tuple = (-1, -1)
    attention_chunk: int = 0
    softcap: float = 0.0
    sinks: bool = False
    num_splits: int | None = 1
    seed: int = 0


def _info(a: np.ndarray, dtype: str) -> TensorInfo:
    return TensorInfo(1 << 20, a.shape, tuple(s // a.itemsize for s in a.strides), dtype, "cuda")


def _bits(x: torch.Tensor) -> np.ndarray:
    return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).copy()


def _bf16(bits: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)


def skipped_keys(c: Case, length: int, bn: int) -> int:
    """Keys in the whole KV tiles left of the first tile query 0's window reaches (all of the call's
    queries share one M tile here: the kernel starts at that tile)."""
    mask = attention_mask(c.causal, c.window_size, c.attention_chunk)
    lo, _ = row_keys(mask, 0, c.seqlen_q, length, IntOps)
    return (min(lo, length) // bn) * bn


def _cache(c: Case, gen, bn: int):
    """(clean, poisoned) K and V bf16 bits and the page table (None: contiguous)."""
    b = len(c.lengths)
    if c.page_size is None:
        shape, table = (b, CAPACITY, c.kv_heads, D), None
    else:
        max_pages = CAPACITY // c.page_size
        pages = b * max_pages + 2
        shape = (pages, c.page_size, c.kv_heads, D)
        table = np.random.default_rng(c.seed).permutation(pages)[:b * max_pages].reshape(b, max_pages).astype(np.int32)
    clean = [torch.full(shape, float("nan")) for _ in range(2)]
    poisoned_v = torch.full(shape, float("nan"))
    for i, n in enumerate(c.lengths):
        t = np.arange(n)
        where = (np.full(n, i), t) if table is None else (table[i][t // c.page_size], t % c.page_size)
        for x in clean:
            x[where] = torch.randn(n, c.kv_heads, D, generator=gen)
        poisoned_v[where] = clean[1][where]
        skip = skipped_keys(c, n, bn)
        if skip:
            poisoned_v[(where[0][:skip], where[1][:skip])] = float("nan")
    k, v = (_bits(x) for x in clean)
    return k, v, _bits(poisoned_v), table


def run(c: Case) -> dict:
    """Interpret the call and check it (FA rule, empty rows exact); returns the plan facts."""
    gen = torch.Generator().manual_seed(c.seed)
    batch = len(c.lengths)
    bn = dec.DEFAULT_BN[D]
    q = _bits(torch.randn(batch, c.seqlen_q, c.heads, D, generator=gen))
    k, v, v_poisoned, table = _cache(c, gen, bn)
    sinks = (torch.randn(c.heads, generator=gen) * 2).numpy().astype(np.float32) if c.sinks else None
    lens = np.array(c.lengths, np.int32)
    problem = kc.check_kvcache_inputs(_info(q, "bf16"), _info(k, "bf16"), _info(v, "bf16"), _info(lens, "i32"),
                                      None if table is None else _info(table, "i32"))
    problem = problem.with_options(causal=c.causal, softmax_scale=D ** -0.5, num_splits=c.num_splits,
                                   return_lse=True, window_size=c.window_size, attention_chunk=c.attention_chunk,
                                   softcap=c.softcap, sinks=c.sinks)
    plan = kc.plan_problem(problem, 132)
    cfg, comb = configs_for(plan)
    p = plan.problem
    out = np.full(p.out_shape, NAN16, np.uint16)
    lse = np.full(p.lse_shape, np.nan, np.float32)
    tensors = {"q": q, "k_cache": k, "v_cache": v_poisoned, "cache_seqlens": lens,
               "page_table": table if table is not None else lens, "k_scale": lens, "v_scale": lens,
               "k_pool": k, "v_pool": v_poisoned, "out": out, "lse": lse, "sinks": sinks}
    if not plan.unsplit:
        tensors["o_partial"] = np.full((plan.num_splits, *p.out_shape), np.nan, np.float32)
        tensors["lse_partial"] = np.full((plan.num_splits, *p.lse_shape), np.nan, np.float32)
    q_strides = (c.seqlen_q * c.heads * D, c.heads * D, D)
    args = dec.split_launch_args(plan, tensors, q_strides, table.shape[1] if table is not None else 0)
    interpret.load(attention_decode_sm90.build(cfg)).launch(dec.split_grid(plan), args)
    if comb is None:
        out_t, lse_t = _bf16(out).double(), torch.from_numpy(lse).double()
    else:
        o, lse_c = combine_splits(tensors["o_partial"], tensors["lse_partial"], sinks)
        out_t = torch.from_numpy(o).to(torch.bfloat16).double()     # the combine rounds to q's dtype
        lse_t = torch.from_numpy(lse_c)
    _check(c, q, k, v, table, lens, sinks, out_t, lse_t)
    return {"cfg": cfg, "combine": comb, "plan": plan}


def _check(c: Case, q, k, v, table, lens, sinks, out: torch.Tensor, lse: torch.Tensor) -> None:
    ref = kvcache_reference(_bf16(q).float(), _bf16(k).float(), _bf16(v).float(), torch.from_numpy(lens),
                            None if table is None else torch.from_numpy(table), compute_dtype=np.float32,
                            causal=c.causal, window_size=c.window_size, attention_chunk=c.attention_chunk,
                            softcap=c.softcap, sinks=None if sinks is None else torch.from_numpy(sinks))
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), "NaN: a skipped tile was read, or worse"
    ref_o, ref_l = ref["out"].double(), ref["lse"].double()
    tally = FaTally()
    for b, n in enumerate(c.lengths):
        empty = torch.isposinf(ref_l[b])          # [H, Sq]; none with sinks (their lse is the sink)
        if sinks is None:   # rows that see no key: out 0, lse +inf, exactly
            assert torch.isposinf(lse[b][empty]).all() and (out[b].transpose(0, 1)[empty] == 0).all()
        if n == 0:
            assert (out[b] == 0).all()
            if sinks is not None:
                assert torch.allclose(lse[b], torch.from_numpy(sinks).double()[:, None].expand_as(lse[b]), atol=1e-5)
            continue
        if table is None:
            k_rows, v_rows = _bf16(k)[b, :n], _bf16(v)[b, :n]
        else:
            t = np.arange(n)
            rows = torch.from_numpy(table[b][t // c.page_size] * c.page_size + t % c.page_size)
            k_rows, v_rows = (_bf16(x).reshape(-1, c.kv_heads, D)[rows] for x in (k, v))
        low_o, low_l = attention_math(_bf16(q)[b:b + 1], k_rows[None], v_rows[None], D ** -0.5, c.causal,
                                      torch.bfloat16, window_size=c.window_size, attention_chunk=c.attention_chunk,
                                      softcap=c.softcap, sinks=None if sinks is None else torch.from_numpy(sinks))
        seen = ~torch.isposinf(ref_l[b])                       # [H, Sq]
        tally.add(out[b].transpose(0, 1)[seen], low_o[0].double().transpose(0, 1)[seen],
                  ref_o[b].transpose(0, 1)[seen], lse[b][seen], low_l[0].double()[seen], ref_l[b][seen])
    tally.check()
