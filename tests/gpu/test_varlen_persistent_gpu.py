"""The persistent compact varlen kernel on the GPU (AttnConfig.varlen_compact with persistent,
FA4MLIR_VARLEN_GRID=persistent) [D-varlen-persistent], from the bundle (the gpu-tests set's attention-varlen
kernels: kernel_sets.VARLEN_PERSISTENT_CASES, next to their default-grid twins of VARLEN_CASES): ragged
batches with empty and length-1 sequences and more working tiles than SMs (every CTA loops), NaN-poisoned
out and lse with spare packed rows (they must stay NaN), the FA rule per sequence
(fa4mlir.testing_varlen.compare_varlen); and on the anchors' prefill_varlen batch (16 causal sequences,
seed 11, H 32, Hk 8, D 128), out and lse bit for bit those of the default grid (the same tiles through the
same arithmetic; the interpreter finds them bitwise equal on a small batch: tests/test_interpret_varlen.py)."""
import zlib

import pytest

from fa4mlir.kernel_sets import VARLEN_PERSISTENT_CASES
from fa4mlir.testing_varlen import compare_varlen

pytestmark = pytest.mark.gpu
GRID_ENV = "FA4MLIR_VARLEN_GRID"
BATCHES = [  # (seqlens_q, seqlens_k), heads, kv_heads
    (((0, 1, 129, 64, 300), (5, 1, 129, 200, 300)), 4, 2),          # fewer tiles than SMs
    (((4096, 256, 300, 1),) * 2, 6, 3),                              # 6 x 37 tiles: some CTAs loop
    ((tuple((i * 37) % 700 + 1 for i in range(40)),) * 2, 8, 1),     # the scan's second chunk, every CTA loops
    (((4096, 0, 2048, 129, 1, 3000),) * 2, 16, 4),                   # 1200 tiles: every CTA loops ~9 times
]
SPARE = 5


@pytest.fixture(scope="module")
def attn_bundle(bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    return bundle


def _inputs(case, lens, heads, kv_heads):
    import torch
    dtype, d, _ = case
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr((case, lens)).encode()))
    lq, lk = lens
    total_q, total_k = sum(lq) + SPARE, sum(lk)
    q = torch.randn(total_q, heads, d, device="cuda", dtype=tdt, generator=gen)
    k = torch.randn(total_k, kv_heads, d, device="cuda", dtype=tdt, generator=gen)
    v = torch.randn(total_k, kv_heads, d, device="cuda", dtype=tdt, generator=gen)

    def cu(x):
        return torch.tensor([0, *torch.tensor(x).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    return q, k, v, cu(lq), cu(lk)


def _run(attn_bundle, monkeypatch, grid, case, q, k, v, cu_q, cu_k, max_q, max_k):
    import torch
    from fa4mlir import flash_attn_varlen_func
    monkeypatch.setenv(GRID_ENV, grid)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((q.shape[1], q.shape[0]), float("nan"), device="cuda")
    flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=case[2], out=out, lse=lse, bundle=attn_bundle)
    torch.cuda.synchronize()
    return out, lse


@pytest.mark.parametrize("batch", BATCHES, ids=lambda b: f"b{len(b[0][0])}-h{b[1]}-hk{b[2]}")
@pytest.mark.parametrize("case", VARLEN_PERSISTENT_CASES, ids=lambda c: f"{c[0]}-d{c[1]}{'-causal' if c[2] else ''}")
def test_persistent_matches_reference_and_default(attn_bundle, monkeypatch, case, batch):
    import torch
    lens, h, hk = batch
    q, k, v, cu_q, cu_k = _inputs(case, lens, h, hk)
    args = (q, k, v, cu_q, cu_k, max(lens[0]), max(lens[1]))
    out, lse = _run(attn_bundle, monkeypatch, "persistent", case, *args)
    r = compare_varlen(q, k, v, out, lse, cu_q, cu_k, case[1] ** -0.5, case[2])
    assert r["ok"], r
    ref_out, ref_lse = _run(attn_bundle, monkeypatch, "sections", case, *args)
    assert torch.equal(out.view(torch.int16), ref_out.view(torch.int16))
    assert torch.equal(lse.view(torch.int32), ref_lse.view(torch.int32))


def test_anchor_batch_is_bitwise_the_default(attn_bundle, monkeypatch):
    import torch
    g = torch.Generator(device="cpu").manual_seed(11)
    lens = torch.randint(256, 8193, (16,), generator=g).tolist()
    case = ("bf16", 128, True)
    q, k, v, cu_q, cu_k = _inputs(case, (lens, lens), 32, 8)
    args = (q, k, v, cu_q, cu_k, max(lens), max(lens))
    out, lse = _run(attn_bundle, monkeypatch, "persistent", case, *args)
    ref_out, ref_lse = _run(attn_bundle, monkeypatch, "sections", case, *args)
    n = sum(lens)
    assert not torch.isnan(out[:n]).any() and torch.isnan(out[n:]).all()
    assert torch.equal(out.view(torch.int16), ref_out.view(torch.int16))
    assert torch.equal(lse.view(torch.int32), ref_lse.view(torch.int32))


def test_the_grid_is_at_most_one_cta_per_sm(attn_bundle):
    """The launch's grid: min(SMs, the compact grid's tile bound), from shapes alone."""
    from fa4mlir.attention.problem import VarlenProblem
    from fa4mlir.driver import device_info
    from fa4mlir.kernels.attention_sm90_config import varlen_grid
    from fa4mlir.kernels.attention_sm90_config_varlen import varlen_config
    from fa4mlir.kernels.common.varlen_compact import compact_grid_size
    sms = device_info().num_sms
    cfg = varlen_config("bf16", 128, True, persistent=True)
    for total, batch in ((300, 3), (16 * 4096, 16)):
        pr = VarlenProblem(batch, 4096, 4096, total, total, 32, 8, 128, "bf16", True, 128 ** -0.5)
        assert varlen_grid(cfg, pr, sms) == (min(sms, compact_grid_size(total, 4096, 128, 32, batch)), 1, 1)
