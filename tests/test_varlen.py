"""Deviceless: flash_attn_varlen_func's checks and typed errors (every one raised before any driver
call, on CPU tensors), the varlen launch contract, and the ragged tile order of
kernels/common/varlen_schedule.py (longest first, every tile once, empty tiles flagged)."""
from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

import fa4mlir  # noqa: E402
from fa4mlir.attention import checks  # noqa: E402
from fa4mlir.attention.errors import (ArgumentTypeError, DeviceError, DTypeError, HeadDimError,  # noqa: E402
                                      LayoutError, MaskError, SeqlensError, ShapeError, SoftcapError)
from fa4mlir.attention.problem import VarlenProblem  # noqa: E402
from fa4mlir.kernels import attention_sm90_config as acfg  # noqa: E402
from fa4mlir.kernels import attention_sm90_config_varlen as acfg_varlen  # noqa: E402
from fa4mlir.kernels.common import varlen_schedule as vs  # noqa: E402
from fa4mlir.kernels.common.fastdiv import divisor  # noqa: E402

BF = torch.bfloat16


def _args(lens_q=(3, 0, 5), lens_k=(4, 1, 5), h=4, hk=2, d=64, dtype=BF):
    cq = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32)
    ck = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.zeros(int(cq[-1]), h, d, dtype=dtype)
    k = torch.zeros(int(ck[-1]), hk, d, dtype=dtype)
    return [q, k, k.clone(), cq, ck, max(lens_q), max(lens_k)]


def _raises(exc, words, *args, **kw):
    with pytest.raises(exc) as info:
        fa4mlir.flash_attn_varlen_func(*args, **kw)
    assert "flash_attn_varlen_func" in str(info.value)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_exported_from_the_package_and_the_attention_module():
    from fa4mlir.attention import flash_attn_varlen_func
    assert fa4mlir.flash_attn_varlen_func is flash_attn_varlen_func


def test_cu_seqlens_dtype_length_and_layout():
    a = _args()
    _raises(DTypeError, ["int32"], *a[:3], a[3].long(), *a[4:])
    _raises(SeqlensError, ["batch + 1 = 4", "got 3"], *a[:4], a[4][:3], *a[5:])
    _raises(SeqlensError, ["1-D"], *a[:3], a[3][None], *a[4:])
    _raises(LayoutError, ["contiguous"], *a[:3], torch.zeros(8, dtype=torch.int32)[::2], *a[4:])
    _raises(SeqlensError, ["batch = 3"], *a, seqused_k=torch.zeros(4, dtype=torch.int32))
    _raises(DTypeError, ["int32"], *a, seqused_k=torch.zeros(3, dtype=torch.int64))


def test_max_seqlen_and_options():
    a = _args()
    _raises(ArgumentTypeError, ["max_seqlen_q must be an int"], *a[:5], 3.0, a[6])
    _raises(SeqlensError, ["max_seqlen_k"], *a[:6], -1)
    _raises(ArgumentTypeError, ["causal must be a bool"], *a, causal="True")
    _raises(MaskError, ["window_size"], *a, window_size=(-2, 0))
    _raises(SoftcapError, ["softcap"], *a, softcap=-1.0)
    _raises(ShapeError, ["sinks"], *a, sinks=torch.zeros(3))


def test_packed_shapes_dtypes_and_head_dims():
    a = _args()
    _raises(ShapeError, ["3-D [total_tokens, heads, head_dim]"], a[0][None], *a[1:])
    _raises(HeadDimError, ["head_dim 48"], *_args(d=48))
    _raises(DTypeError, ["share one dtype"], a[0].half(), *a[1:])
    _raises(ShapeError, ["out must be"], *a, out=torch.zeros(8, 4, 32, dtype=BF))
    _raises(ShapeError, ["[heads, total_q]"], *a, lse=torch.zeros(8, 4))
    _raises(LayoutError, ["contiguous"], *a, out=torch.zeros(8, 64, 4, dtype=BF).transpose(1, 2))


def _paged_args(page=16):
    """A call with a page_table: q packed, k and v the pools, cu_seqlens_k None (tests/test_varlen_paged.py
    checks the rest on TensorInfos)."""
    q, _, _, cq, _, mq, _ = _args()
    pool = torch.zeros(6, page, 2, 64, dtype=BF)
    return [q, pool, pool.clone(), cq, None, mq, 2 * page], torch.zeros(3, 2, dtype=torch.int32)


def test_page_table_checks_then_refuses_cpu_tensors():
    a, table = _paged_args()
    _raises(DeviceError, ["CUDA"], *a, page_table=table, seqused_k=torch.zeros(3, dtype=torch.int32), causal=True)
    _raises(DeviceError, ["CUDA"], *a, page_table=table)          # no seqused_k: every slot of the table
    _raises(SeqlensError, ["cu_seqlens_k must be None with page_table"], *a[:4], _args()[4], *a[5:],
            page_table=table)
    # window, chunk, softcap and sinks run through the decode kernel's variants: checked, then the device
    for kw in ({"window_size": (4, 0)}, {"attention_chunk": 32}, {"softcap": 3.0}, {"sinks": torch.zeros(4)}):
        _raises(DeviceError, ["CUDA"], *a, page_table=table, **kw)
    _raises(ShapeError, ["sinks must have shape"], *a, page_table=table, sinks=torch.zeros(3))
    _raises(ShapeError, ["[batch, max_pages]"], *a, page_table=torch.zeros(2, 2, dtype=torch.int32))
    _raises(DTypeError, ["page_table must be int32"], *a, page_table=table.long())


def test_attention_chunk_is_checked_and_reaches_the_problem():
    a = _args()
    _raises(MaskError, ["attention_chunk"], *a, attention_chunk=-1)
    _raises(ArgumentTypeError, ["attention_chunk"], *a, attention_chunk=2.5)
    _raises(DeviceError, ["CUDA"], *a, attention_chunk=4, causal=True)
    from fa4mlir.attention.varlen import _check
    problem, _ = _check(*a, seqused_k=None, page_table=None, softmax_scale=None, causal=True, window_size=(-1, -1),
                        softcap=0.0, sinks=None, return_lse=False, out=None, lse=None, attention_chunk=4)
    assert problem.attention_chunk == 4 and problem.mask.tag() != replace(problem, attention_chunk=0).mask.tag()


def test_cpu_tensors_are_a_device_error_after_every_other_check():
    _raises(DeviceError, ["CUDA"], *_args())
    with pytest.raises(DeviceError, match="cu_seqlens_q"):
        checks.check_devices([("q", "cuda", 0), ("cu_seqlens_q", "cpu", None)], checks.VARLEN_API)


def test_non_torch_tensors_are_refused():
    a = _args()
    _raises(ArgumentTypeError, ["torch tensors"], a[0].view(torch.int16).numpy(), *a[1:])


def _problem(**kw):
    base = dict(batch=3, max_seqlen_q=300, max_seqlen_k=400, total_q=500, total_k=700, heads=8, kv_heads=2,
                head_dim=128, dtype="bf16", causal=True, softmax_scale=0.1)
    return VarlenProblem(**{**base, **kw})


def test_launch_contract_and_grid():
    cfg = acfg_varlen.varlen_config("bf16", 128, True)
    assert cfg.varlen and not cfg.persistent and cfg.validate()
    p = _problem()
    refs = {n: n for n in ("q", "k", "v", "o", "lse", "cu_seqlens_q", "cu_seqlens_k")}
    args = acfg.launch_args(cfg, p, refs)
    assert list(args) == [n for n, _ in acfg.launch_params(cfg)]
    assert args["o_rows"] == "o" and args["seqused_k"] == "cu_seqlens_k" and args["has_seqused_k"] == 0
    assert (args["batch"], args["seqlen_q"], args["seqlen_k"], args["total_q"]) == (3, 300, 400, 500)
    assert args["section_shift"] == acfg.section_shift(cfg, p) == 4   # 16 of the 24 (head, sequence) indices
    assert (args["rest_mul"], args["rest_shr"]) == divisor(24 % 16) and (args["tiles_mul"], args["tiles_shr"]) == divisor(3)
    assert acfg.launch_args(cfg, p, {**refs, "seqused_k": "u"})["has_seqused_k"] == 1
    assert acfg.grid(cfg, p) == (3 * 8 * 3, 1, 1)      # ceil(300 / 128) tiles x heads x batch
    with pytest.raises(acfg.ConfigError if hasattr(acfg, "ConfigError") else ValueError):
        acfg.AttnConfig(varlen=True, persistent=True).validate()


def test_varlen_mask_drops_only_what_bounds_no_sequence():
    assert _problem(window_size=(399, -1)).mask.is_legacy          # left >= max_seqlen_k - 1
    assert not _problem(window_size=(398, -1)).mask.is_legacy
    assert not _problem(attention_chunk=10_000).mask.is_legacy     # a chunk is kept


@pytest.mark.parametrize("max_q,bm,heads,batch,shift", [(1000, 128, 3, 5, 2), (129, 192, 1, 1, 0), (7, 128, 2, 3, 1),
                                                       (0, 128, 2, 2, 1), (1000, 128, 4, 4, 4), (700, 128, 6, 3, 5)])
def test_tile_order_covers_every_tile_once_longest_first_per_section(max_q, bm, heads, batch, shift):
    order = vs.tile_order(max_q, bm, heads, batch, shift)
    m_tiles = vs.varlen_tiles(max_q, bm)
    assert len(order) == vs.varlen_grid_size(max_q, bm, heads, batch) == m_tiles * heads * batch
    assert sorted(order) == sorted((m, h, b) for m in range(m_tiles) for h in range(heads) for b in range(batch))
    size, total = 1 << shift, heads * batch
    if m_tiles == 0:
        assert order == []
        return
    starts = list(range(0, total, size))
    offset = 0
    for first in starts:                                           # section by section, in index order
        ids = list(range(first, min(first + size, total)))
        sec = order[offset:offset + len(ids) * m_tiles]
        offset += len(sec)
        assert sorted({h + heads * b for _, h, b in sec}) == ids
        blocks = [m for m, _, _ in sec]
        assert blocks == sorted(blocks, reverse=True)              # last query tile first, tile 0 last
        assert sec[:len(ids)] == [(m_tiles - 1, i % heads, i // heads) for i in ids][:len(sec)]
    assert offset == len(order)


def test_long_sequences_start_first_and_short_ones_fill_the_end_of_each_section():
    lens = [4000, 100, 130, 700, 0, 1]
    bm, heads, shift = 128, 2, 1                                    # a section is one sequence's two heads
    order = vs.tile_order(max(lens), bm, heads, len(lens), shift)
    working = [(m, b) for m, _, b in order if vs.tile_has_rows(m, bm, lens[b])]
    assert len(working) == heads * sum(-(-n // bm) for n in lens)
    assert [b for _, b in working] == sorted(b for _, b in working)  # sequence by sequence, in order
    first = [m for m, b in working if b == 0]
    assert first == sorted(first, reverse=True) and len(first) == heads * -(-4000 // bm)
    assert all(m == 0 for m, b in working[-heads:])                 # the grid ends on tile 0
    assert not any(b == 4 for _, b in working)                     # a length-0 sequence has no working tile


def test_launch_sections_fit_l2():
    from fa4mlir.kernels.attention_sm90_config import section_shift
    cfg = acfg_varlen.varlen_config("bf16", 128, True)
    p = _problem()
    shift = section_shift(cfg, p)
    kv_head = p.seqlen_k * 256 * 2
    assert (-(-((1 << shift) - 1) // p.heads_per_kv) + 1) * kv_head <= acfg.L2_BYTES * acfg.SECTION_L2_SHARE


# ----------------------------------------------------------------------------------------------
# The host path and the custom op on CPU tensors, a stand-in kernel computing each sequence in float64
# ----------------------------------------------------------------------------------------------

class FakeVarlenKernel:
    """Stands in for the loaded varlen kernel: a launch computes every sequence of the packed batch
    with testing.attention_math from the launch's own arguments (cu_seqlens, seqused_k, the scale)."""

    def __init__(self, config):
        from types import SimpleNamespace
        self.artifact = SimpleNamespace(config=config.key())
        self.config, self.launches = config, []

    def launch(self, grid, args, stream):
        from fa4mlir.testing import attention_math
        from fa4mlir.testing_varlen import sequences
        self.launches.append((grid, args))
        q, k, v, o, lse = (args[n] for n in ("q", "k", "v", "o", "lse"))
        used = args["seqused_k"] if args["has_seqused_k"] else None
        for q0, nq, k0, nk in sequences(args["cu_seqlens_q"], args["cu_seqlens_k"], used):
            if nq == 0:
                continue
            o64, l64 = attention_math(q[:, q0:q0 + nq], k[:, k0:k0 + nk], v[:, k0:k0 + nk],
                                      args["scale_log2"] / acfg.LOG2E, self.config.causal, torch.float64)
            o[:, q0:q0 + nq] = o64.to(o.dtype)
            lse[:, q0:q0 + nq] = l64[0].float()


@pytest.fixture
def cpu_varlen(monkeypatch):
    from fa4mlir.attention import varlen
    from fa4mlir.driver import DeviceInfo
    made = []

    class FakeSource:
        def kernel(self, config):
            made.append(FakeVarlenKernel(config))
            return made[-1]
    monkeypatch.setattr(varlen, "source_for", lambda bundle: FakeSource())
    monkeypatch.setattr(checks, "CUDA_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(varlen, "device_info", lambda: DeviceInfo(0, (9, 0), 132, 50 * 2**20))
    monkeypatch.setattr(varlen, "resolve_stream", lambda stream, uses_torch, device: 0)
    torch._dynamo.reset()
    yield made
    torch._dynamo.reset()


def _ragged(seed=0, h=4, hk=2, d=64):
    g = torch.Generator().manual_seed(seed)
    lens_q, lens_k = (0, 1, 130, 7), (3, 1, 140, 0)
    a = _args(lens_q, lens_k, h, hk, d)
    a[0] = torch.randn(a[0].shape, generator=g).to(BF)
    a[1], a[2] = (torch.randn(a[1].shape, generator=g).to(BF) for _ in range(2))
    return a


def test_host_path_launches_the_varlen_kernel_with_its_contract(cpu_varlen):
    from fa4mlir.testing_varlen import compare_varlen
    a = _ragged()
    out = torch.full_like(a[0], float("nan"))
    lse = torch.full((4, a[0].shape[0]), float("nan"))
    fa4mlir.flash_attn_varlen_func(*a, causal=True, out=out, lse=lse)
    (kernel,) = cpu_varlen
    assert kernel.config.varlen and kernel.config.causal
    grid, args = kernel.launches[0]
    assert grid == (-(-130 // kernel.config.bm) * 4 * 4, 1, 1) and args["q"].shape == (1, *a[0].shape) and args["o_rows"].shape[0] == 1
    assert compare_varlen(a[0], a[1], a[2], out, lse, a[3], a[4], None, True)["ok"]


def test_empty_batch_launches_nothing(cpu_varlen):
    a = _args((0, 0), (0, 0))
    out = fa4mlir.flash_attn_varlen_func(*a)
    assert out.shape == (0, 4, 64) and not cpu_varlen


def test_custom_op_opcheck_and_compiled_call(cpu_varlen):
    a = _ragged(1)
    op = torch.ops.fa4mlir.flash_attn_varlen_fwd.default
    torch.library.opcheck(op, (*a[:7], None, None, True, None))
    out, lse = op(*a[:7], None, None, True, None)
    assert out.shape == a[0].shape and lse.shape == (4, a[0].shape[0]) and lse.dtype == torch.float32

    def f(q, k, v, cq, ck):
        return fa4mlir.flash_attn_varlen_func(q, k, v, cq, ck, 130, 140, causal=True) * 2

    want = f(*a[:5])
    got = torch.compile(f, fullgraph=True, backend="eager")(*a[:5])
    assert torch.equal(got, want)


def test_custom_op_fake_keeps_typed_errors(cpu_varlen):
    from torch._subclasses.fake_tensor import FakeTensorMode
    a = _args(d=48)
    with FakeTensorMode() as mode, pytest.raises(HeadDimError):
        fake = [mode.from_tensor(x) for x in a[:5]]
        torch.ops.fa4mlir.flash_attn_varlen_fwd.default(*fake, 5, 5, None, None, False, None)


def test_bundle_lookup_tells_varlen_from_dense_kernels():
    from fa4mlir.attention.errors import BundleError
    from fa4mlir.attention.plan import select_entry
    dense, ragged = acfg.default_config("bf16", 128, True), acfg_varlen.varlen_config("bf16", 128, True)
    entries = [{"name": n, "arch": "sm_90a", "config": {**c.key(), "cubin_backend": "ptxas"}}
               for n, c in (("dense", dense), ("ragged", ragged))]
    assert select_entry(entries, "bf16", 128, True, default=ragged)["name"] == "ragged"
    assert select_entry(entries, "bf16", 128, True, default=dense)["name"] == "dense"
    with pytest.raises(BundleError, match="varlen=True"):
        select_entry(entries[:1], "bf16", 128, True, default=ragged)
