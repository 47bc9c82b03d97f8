"""flash_attn_func's front end on CPU torch tensors, with a stand-in kernel: the wiring (launch
contract, allocation, FA-rule helpers) and the call cache (a signature seen before launches what it
was prepared into, with the new addresses). Needs torch, not a GPU; skipped where torch is missing
(CI), run on the GPU machine by bench/device_run.sh.
"""
from types import SimpleNamespace

import pytest

from fa4mlir.attention import LayoutError, ScaleError, ShapeError, checks, flash_attn_func
from fa4mlir.attention import dense as attention
from fa4mlir.driver import DeviceInfo
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels.common import fastdiv

torch = pytest.importorskip("torch")


class FakeKernel:
    """Stands in for a loaded kernel on CPU tensors. prepare() records the launch plan; a launch on
    the prepared tensors' addresses writes float64 attention, rounded, into out and lse (optionally
    corrupted); every launch records its addresses and stream. With `config` (the AttnConfig the
    front end asked for) it also applies that config's window and chunk, its softcap (the cap read
    back from the launch's scale_log2 and softcap_scale as launch_args writes them) and its sinks."""

    def __init__(self, causal, corrupt=None, config=None):
        config = config or acfg.AttnConfig(bm=128)
        self.artifact = SimpleNamespace(config=config.key(),
                                        params=[SimpleNamespace(name=n, kind=k) for n, k in acfg.launch_params(config)])
        self.causal, self.corrupt, self.config = causal, corrupt, config
        self.prepared, self.launches = [], []

    def prepare(self, grid, args):
        self.prepared.append((grid, args))
        return FakeLaunch(self, args)


class FakeLaunch:
    def __init__(self, kernel, args):
        self.kernel, self.args = kernel, args

    def launch(self, addresses, stream):
        from fa4mlir.testing import attention_math
        self.kernel.launches.append((tuple(addresses), stream))
        q, k, v, out, lse, scale_log2 = (self.args[n] for n in ("q", "k", "v", "o", "lse", "scale_log2"))
        prepared = (q, k, v, out, lse, *((self.args["sinks"],) if self.kernel.config.sinks else ()))
        if tuple(addresses) != tuple(t.data_ptr() for t in prepared):
            return  # other tensors than prepared: the caller checks the addresses
        cfg, extra = self.kernel.config, {}
        scale = scale_log2 / acfg.LOG2E
        if cfg.softcap:   # launch_args: scale_log2 = cap * log2(e), softcap_scale = softmax_scale / cap
            extra["softcap"], scale = scale, self.args["softcap_scale"] * scale
        if cfg.sinks:
            extra["sinks"] = self.args["sinks"]
        o64, lse64 = attention_math(q, k, v, scale, self.kernel.causal, torch.float64,
                                    window_size=(cfg.window_left, cfg.window_right), attention_chunk=cfg.chunk, **extra)
        out.copy_(o64)
        lse.copy_(lse64)
        if self.kernel.corrupt == "out":
            out[0, -1, 0, 0] += 0.25
        elif self.kernel.corrupt == "masked_row":
            out[0, 0, 0, 0] = float("nan")
        elif self.kernel.corrupt == "lse":
            lse[-1, -1, -1] += 0.25  # PyTorch's bf16 LSE is off by ~0.01-0.05: the FA rule is loose on lse


@pytest.fixture
def cpu_api(monkeypatch):
    """flash_attn_func on CPU torch tensors, with FakeKernel in place of the bundle's kernel and an
    empty call cache."""
    made = []

    class FakeSource:   # plan.KernelSource's kernel(); the bundle argument names a corruption
        def __init__(self, corrupt):
            self.corrupt = corrupt

        def kernel(self, default):
            made.append(FakeKernel(default.causal, corrupt=self.corrupt))
            return made[-1]
    monkeypatch.setattr(attention, "source_for", FakeSource)
    monkeypatch.setattr(checks, "CUDA_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(attention, "device_info", lambda: DeviceInfo(0, (9, 0), 132, 50 * 2**20))
    monkeypatch.setattr(attention, "_CALLS", {})
    monkeypatch.setattr(attention, "resolve_stream", lambda stream, uses_torch, device: "current" if stream is None else stream)
    return made


def cpu_inputs(shape, head_dim=64, dtype=None, seed=0):
    b, sq, sk, h, hk = shape
    gen = torch.Generator().manual_seed(seed)
    dtype = dtype or torch.bfloat16
    return (torch.randn(b, sq, h, head_dim, generator=gen).to(dtype),
            torch.randn(b, sk, hk, head_dim, generator=gen).to(dtype),
            torch.randn(b, sk, hk, head_dim, generator=gen).to(dtype))


def addresses(*tensors):
    return tuple(t.data_ptr() for t in tensors)


@pytest.mark.parametrize("causal", [False, True])
def test_api_wiring_and_fa_rule_pass(cpu_api, causal):
    from fa4mlir.testing import compare_attention
    q, k, v = cpu_inputs((2, 200, 70, 4, 2))
    out, lse = flash_attn_func(q, k, v, causal=causal, return_lse=True, stream=5)
    (grid, args), = cpu_api[0].prepared
    assert grid == (2, 4, 2) and [args[n] for n in ("batch", "heads", "seqlen_q", "seqlen_k")] == [2, 4, 200, 70]
    assert (args["group_mul"], args["group_shr"]) == fastdiv.divisor(2)  # heads // kv_heads
    assert args["scale_log2"] == pytest.approx(64 ** -0.5 * acfg.LOG2E)
    assert cpu_api[0].launches == [(addresses(q, k, v, out, lse), 5)]
    assert out.shape == q.shape and out.dtype == torch.bfloat16 and lse.shape == (2, 4, 200)
    r = compare_attention(q, k, v, out, lse, None, causal)
    assert r["ok"], r
    assert r["masked_rows"] == (130 if causal else 0) and r["masked_ok"]
    assert 0 < r["max_err"] <= r["bound"] and r["torch_err"] > 0


def test_api_writes_given_out_and_lse(cpu_api):
    q, k, v = cpu_inputs((1, 5, 9, 2, 1), head_dim=128, dtype=torch.float16)
    out, lse = torch.full_like(q, float("nan")), torch.full((1, 2, 5), float("nan"))
    got = flash_attn_func(q, k, v, softmax_scale=0.5, return_lse=True, out=out, lse=lse)
    assert got[0] is out and got[1] is lse and not torch.isnan(out).any()
    assert cpu_api[0].prepared[0][1]["scale_log2"] == pytest.approx(0.5 * acfg.LOG2E)
    with pytest.raises(ShapeError, match="lse must have shape"):
        flash_attn_func(q, k, v, lse=torch.empty(1, 5, 2))


@pytest.mark.parametrize("corrupt, failed", [("out", "max_err"), ("masked_row", "masked_ok"), ("lse", "lse_err")])
def test_fa_rule_catches_wrong_results(cpu_api, corrupt, failed):
    from fa4mlir.testing import compare_attention
    q, k, v = cpu_inputs((2, 200, 70, 4, 2), seed=1)
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True, bundle=corrupt)
    r = compare_attention(q, k, v, out, lse, None, True)
    assert not r["ok"], r
    if failed == "max_err":
        assert r["max_err"] > r["bound"]
    elif failed == "lse_err":
        assert r["lse_err"] > r["lse_bound"]
    else:
        assert not r["masked_ok"] and r["nan_out"] == 1


# ----------------------------------------------------------------------------------------------
# The call cache
# ----------------------------------------------------------------------------------------------

def aligned_view(shape, dtype=torch.bfloat16, offset_elems=0):
    """A contiguous tensor whose data starts offset_elems past a 64-byte boundary."""
    n = 1
    for s in shape:
        n *= s
    raw = torch.empty(n + 64, dtype=dtype)
    start = (-raw.data_ptr() % 64) // raw.element_size() + offset_elems
    return raw[start:start + n].view(shape).normal_()


def test_a_seen_signature_launches_what_it_was_prepared_into_with_new_addresses(cpu_api):
    q, k, v = cpu_inputs((1, 130, 70, 4, 2))
    first = flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert len(cpu_api) == 1 and len(attention._CALLS) == 1
    q2, k2, v2 = cpu_inputs((1, 130, 70, 4, 2), seed=3)
    out2, lse2 = flash_attn_func(q2, k2, v2, causal=True, return_lse=True, stream=7)
    # no kernel lookup, no prepare: one launch of the prepared plan with the new tensors' addresses
    kernel, = cpu_api
    assert len(kernel.prepared) == 1
    assert kernel.launches[1] == (addresses(q2, k2, v2, out2, lse2), 7)
    assert out2.shape == q.shape and out2.dtype == q.dtype and lse2.shape == (1, 4, 130)
    assert lse2.dtype == torch.float32 and out2.data_ptr() not in addresses(*first)
    out3 = flash_attn_func(q2, k2, v2, causal=True, out=out2)  # out given: another signature
    assert len(attention._CALLS) == 2 and len(cpu_api) == 2 and out3 is out2


@pytest.mark.parametrize("change", [
    dict(causal=False), dict(softmax_scale=0.3), dict(bundle="out"),
    dict(env=("FA4MLIR_BUNDLE", "/elsewhere")), dict(env=("FA4MLIR_CUBIN_BACKEND", "nvjitlink")),
    dict(q=lambda q: q[:, :64]), dict(q=lambda q: q.to(torch.float16)),
    dict(k=lambda k: k.transpose(1, 2).contiguous().transpose(1, 2)),  # same shape, other strides
])
def test_anything_but_addresses_changes_the_signature(cpu_api, monkeypatch, change):
    q, k, v = cpu_inputs((1, 130, 70, 4, 2))
    kw = dict(causal=True, softmax_scale=1.0, bundle=None)
    flash_attn_func(q, k, v, **kw)
    if "env" in change:
        monkeypatch.setenv(*change.pop("env"))
    q = change.pop("q", lambda x: x)(q)
    k = change.pop("k", lambda x: x)(k)
    if q.dtype == torch.float16:
        k, v = k.half(), v.half()
    flash_attn_func(q, k, v, **{**kw, **change})
    assert len(cpu_api) == 2 and len(attention._CALLS) == 2  # looked up and prepared again


def test_a_seen_signature_still_checks_alignment(cpu_api):
    q, k, v = aligned_view((1, 64, 2, 64)), aligned_view((1, 64, 2, 64)), aligned_view((1, 64, 2, 64))
    flash_attn_func(q, k, v)
    bad = aligned_view((1, 64, 2, 64), offset_elems=1)  # same shape and strides, base 2 bytes off
    with pytest.raises(LayoutError, match="q data pointer .* not 16-byte aligned"):
        flash_attn_func(bad, k, v)
    assert len(cpu_api[0].launches) == 1


def test_unhashable_or_bad_scales_are_checked(cpu_api):
    import numpy as np
    q, k, v = cpu_inputs((1, 8, 8, 2, 2))
    flash_attn_func(q, k, v, softmax_scale=np.array(0.25))  # 0-d array: valid, read as a float (the op's schema)
    flash_attn_func(q, k, v, softmax_scale=0.25)
    assert len(cpu_api) == 1 and len(attention._CALLS) == 1
    flash_attn_func(q, k, v, softmax_scale=1)   # an int: the float 1.0
    flash_attn_func(q, k, v, softmax_scale=1.0)
    assert len(cpu_api) == 2 and len(attention._CALLS) == 2
    with pytest.raises(ScaleError):
        flash_attn_func(q, k, v, softmax_scale=True)  # == 1, but not a scale: its own signature


def test_the_cache_keeps_the_last_calls(cpu_api, monkeypatch):
    monkeypatch.setattr(attention, "CALLS_KEPT", 3)
    for n in range(1, 6):
        flash_attn_func(*cpu_inputs((1, n, n, 2, 2)))
    assert len(attention._CALLS) == 3
    flash_attn_func(*cpu_inputs((1, 5, 5, 2, 2)))  # kept
    flash_attn_func(*cpu_inputs((1, 1, 1, 2, 2)))  # dropped: looked up again
    assert len(cpu_api) == 6
