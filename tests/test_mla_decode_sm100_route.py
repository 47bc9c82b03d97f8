"""flash_mla_with_kvcache's routing by compute capability (attention/mla_sm100.py), deviceless:

* 9.x -> the sm_90a kernels, 10.0 -> the sm_100a kernel (attention_fwd_sm100's MLA decode route), anything
  else a DeviceError, through mla._plan_for (the call's device step) with the capability faked;
* on 10.0, each call the sm_100a kernel cannot run is a typed error before any launch (heads outside
  (16, 32, 64, 128), pages over 256, FP8 pages that take no 16-row TMA box, a named sm_90a variant), while
  the sm_90a route takes it; FlashMLA's FP8 cache runs the kernel's FP8 form, pages of 8, 24, .. its row
  gather;
* the sm_100a plan: the kernel of the call's config (causal only with seqlen_q > 1, split_kv with several
  splits) asked for as an sm_100a kernel of the `mla-decode-sm100` bundle set, its grid and launch
  arguments (TensorRefs to the call's tensors, the scalars), and with several splits the combine built for
  sm_100a; the bundle set holds what the route asks for FlashMLA's bf16 page-64 calls;
* the combine's sm_100a build: its key and name (the sm_90a one's unchanged), compiled for sm_100a with 0
  spills (the sm_100a decode kernel itself: tests/test_attention_sm100_mla_decode.py).
No GPU numerics here (no Blackwell GPU was available; the kernel's numerics are interpreted only).
"""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from _mla_helpers import info
from fa4mlir import kernel_sets
from fa4mlir.attention import mla
from fa4mlir.attention import mla_sm100 as route
from fa4mlir.attention.errors import DeviceError, LayoutError, ShapeError, UnsupportedFeatureError
from fa4mlir.attention.plan import TensorRef
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels import attention_sm100_config as fcfg


def _problem(batch=2, seqlen_q=1, heads=64, page=64, splits=1, dtype="bf16", fp8=False, causal=True, max_pages=4):
    row, kv_dtype = (656, "e4m3") if fp8 else (576, dtype)
    return mla.check_mla_inputs(info((batch, seqlen_q, heads, 576), dtype), info((40, page, 1, row), kv_dtype),
                                info((batch, max_pages), "i32"), info((batch,), "i32"), 512,
                                info((splits, 8), "i32"), info((batch + 1,), "i32"), causal=causal, is_fp8_kvcache=fp8)


class _Asked:
    """plan.config_kernel's stand-in: records (cfg, api, bundle_sets, arch), returns a named kernel."""

    def __init__(self):
        self.calls = []

    def __call__(self, source, cfg, api, bundle_sets, arch="sm_90a"):
        self.calls.append((cfg, api, tuple(bundle_sets), arch))
        return f"kernel{len(self.calls)}"


@pytest.fixture
def asked(monkeypatch):
    fake = _Asked()
    monkeypatch.setattr(route, "config_kernel", fake)
    monkeypatch.setattr(mla, "config_kernel", fake)
    monkeypatch.delenv(mla.VARIANT_ENV, raising=False)
    return fake


def _device(capability):
    return SimpleNamespace(ordinal=0, capability=capability, num_sms=148, l2_bytes=1 << 20)


def test_capability_picks_the_kernel(asked):
    p = _problem()
    assert route.select_arch(p, (9, 0)) == "sm_90a" and route.select_arch(p, (10, 0)) == "sm_100a"
    for cap in ((10, 3), (12, 0), (8, 0)):         # an sm_100a cubin runs on 10.0 only
        with pytest.raises(DeviceError, match=rf"the device is sm_{cap[0]}{cap[1]}; the MLA decode runs on"):
            route.select_arch(p, cap)
    # the call's device step: 10.0 plans the sm_100a kernel, 9.0 the sm_90a one, 12.0 neither
    plan = mla._plan_for(p, _device((10, 0)), 0, object(), (0, 0, 0), 4)
    assert [c[3] for c in asked.calls] == ["sm_100a"] and asked.calls[0][0].key()["kernel"] == fcfg.KERNEL
    assert "sm_100a attention_fwd_sm100" in plan.notes[0]
    plan = mla._plan_for(p, _device((9, 0)), 0, object(), (576, 576, 576), 4)
    assert asked.calls[-1][3] == "sm_90a" and asked.calls[-1][0].key()["kernel"] == mla.mc.KERNEL
    with pytest.raises(DeviceError, match="sm_120"):
        mla._plan_for(p, _device((12, 0)), 0, object(), (0, 0, 0), 4)
    with pytest.raises(DeviceError, match="cuda:1"):      # the tensors' device is still checked first
        mla._plan_for(p, _device((10, 0)), 1, object(), (0, 0, 0), 4)


@pytest.mark.parametrize("kwargs,env,error,match", [
    (dict(fp8=True, heads=8), None, ShapeError, "got 8"),
    (dict(heads=8), None, ShapeError, r"heads must be one of \(16, 32, 64, 128\) on sm_100"),
    (dict(heads=96), None, ShapeError, "got 96"),
    (dict(page=8, fp8=True), None, LayoutError, "FP8 k_cache's page size must be a multiple of 16"),
    (dict(page=24, fp8=True), None, LayoutError, "got 24"),
    (dict(page=512), None, LayoutError, "at most 256"),
    (dict(), "m64", UnsupportedFeatureError, "names an sm_90a decode kernel"),
])
def test_sm100_refusals_are_typed(monkeypatch, kwargs, env, error, match):
    monkeypatch.delenv(mla.VARIANT_ENV, raising=False)
    if env:
        monkeypatch.setenv(mla.VARIANT_ENV, env)
    p = _problem(**kwargs)
    assert route.select_arch(p, (9, 0)) == "sm_90a"          # the sm_90a kernels take the call
    with pytest.raises(error, match=match):
        route.select_arch(p, (10, 0))


@pytest.mark.parametrize("heads,seqlen_q,page,causal,dtype,fp8", [
    (64, 1, 64, True, "bf16", False),      # one token: the non-causal kernel (the same keys)
    (16, 2, 64, True, "bf16", False),      # MTP: causal, 4 tokens of 16 heads a tile
    (128, 1, 16, False, "f16", False),     # two CTAs a token; 16-row boxes
    (32, 3, 64, True, "bf16", True),       # FlashMLA's FP8 rows (the kernel's note "MLA FP8")
    (16, 1, 8, False, "bf16", False),      # pages of 8: the row gather (note "MLA gather"), k a pointer
    (64, 2, 24, True, "f16", False),       # pages of 24 (gcd 8 with the 64-key tile): the row gather
])
def test_sm100_plan_unsplit(asked, heads, seqlen_q, page, causal, dtype, fp8):
    p = _problem(batch=3, seqlen_q=seqlen_q, heads=heads, page=page, causal=causal, dtype=dtype, fp8=fp8,
                 max_pages=7)
    plan = route.build_plan_sm100(p, source=object(), block_table_stride=9)
    (launch,) = plan.launches
    cfg = route.kernel_config(dtype, heads, page, causal and seqlen_q > 1, False, fp8)
    assert asked.calls == [(cfg, "flash_mla_with_kvcache", ("mla-decode-sm100",), "sm_100a")]
    assert cfg.mla_decode and cfg.paged and not cfg.split_kv and cfg.causal == (seqlen_q > 1)
    assert cfg.mla_fp8 == fp8 and ("FP8 rows" in plan.notes[0]) == fp8 and cfg.gather == (page % 16 != 0)
    assert launch.kernel == "kernel1" and launch.grid == fcfg.grid(cfg, p) == (
        -(-seqlen_q // cfg.tile_tokens), heads // cfg.tile_heads, 3)
    assert list(launch.args) == [n for n, _ in cfg.launch_params]
    refs = {n: a.name for n, a in launch.args.items() if isinstance(a, TensorRef)}
    assert refs == {"q": "q", "k": "kv_cache", "o": "out", "lse": "lse", "page_table": "block_table",
                    "cache_seqlens": "cache_seqlens"}
    assert (launch.args["seqlen_q"], launch.args["num_pages"], launch.args["page_table_stride"]) == (seqlen_q, 40, 9)
    assert launch.args["scale_log2"] == pytest.approx(576 ** -0.5 * 1.4426950408889634)


def test_sm100_plan_split_runs_the_sm100_combine(asked):
    p = _problem(batch=2, seqlen_q=2, heads=16, splits=5)
    plan = route.build_plan_sm100(p, source=object(), block_table_stride=4)
    kernel, combine = plan.launches
    cfg = route.kernel_config("bf16", 16, 64, True, True)
    ccfg = dec.CombineConfig("bf16", 512, arch="sm_100a")
    assert asked.calls == [(cfg, "flash_mla_with_kvcache", ("mla-decode-sm100",), "sm_100a"),
                           (ccfg, "flash_mla_with_kvcache", ("mla-decode-sm100",), "sm_100a")]
    assert kernel.grid == (5, 1, 2) and kernel.args["num_splits"] == 5     # 1 tile x 5 splits, batch 2
    refs = {n: a.name for n, a in kernel.args.items() if isinstance(a, TensorRef)}
    assert refs["o_partial"] == "o_partial" and refs["lse_partial"] == "lse_partial" and "o" not in refs
    assert combine.grid == mla.combine_grid(p) and combine.args == mla.combine_args(
        p, {n: TensorRef(n) for n, _ in dec.COMBINE_TENSORS}, p.out_strides)
    assert combine.args["num_splits"] == 5 and combine.args["total_rows"] == 2 * 2 * 16
    # the workspaces the kernel and the combine share: [splits, batch, seqlen_q, heads, 512], [splits, batch, heads, seqlen_q]
    torch = pytest.importorskip("torch")
    named = p.outputs(torch, torch.bfloat16, "cpu")
    assert tuple(named["o_partial"].shape) == (5, 2, 2, 16, 512) and tuple(named["lse_partial"].shape) == (5, 2, 16, 2)


def test_bundle_set_holds_the_routes_kernels():
    entries = kernel_sets.SETS[route.BUNDLE_SET]()
    assert all(e[1].validate() is e[1] for e in entries)
    asked = {(k, c) for k, c in entries}
    for heads in route.HEADS:
        for (seqlen_q, splits), fp8 in itertools.product(((1, 1), (2, 1), (1, 3), (2, 3)), (False, True)):
            p = _problem(seqlen_q=seqlen_q, heads=heads, splits=splits, fp8=fp8)
            assert (fcfg.KERNEL, route.sm100_config(p)) in asked
            if splits > 1:
                assert (dec.COMBINE_KERNEL_SM100, route.combine_config(p)) in asked
    for seqlen_q, splits in ((1, 1), (2, 1), (1, 3), (2, 3)):     # pages of 8: the row gather
        assert (fcfg.KERNEL, route.sm100_config(_problem(seqlen_q=seqlen_q, heads=16, page=8, splits=splits))) in asked
    assert len({e[1].name() for e in entries}) == len(entries) == 37      # names tell the kernels apart


def test_combine_arch_keys():
    """The sm_90a combine's key and name are unchanged (no arch field); the sm_100a one is its own kernel."""
    assert dec.CombineConfig("bf16", 512).key() == {"kernel": "attention_combine_sm90", "dtype": "bf16", "head_dim": 512}
    c = dec.CombineConfig("bf16", 512, arch="sm_100a")
    assert c.key() == {"kernel": "attention_combine_sm100", "dtype": "bf16", "head_dim": 512, "arch": "sm_100a"}
    assert c.name() == "attention_combine_sm100_bf16_d512"
    with pytest.raises(ValueError, match="arch in"):
        dec.CombineConfig("bf16", 512, arch="sm_80").validate()


def test_fa4config_name_is_the_kernels():
    """plan.config_kernel finds a bundle's entry by cfg.name(): the name attention_fwd_sm100.build gives it."""
    pytest.importorskip("fa4mlir._mlir")
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    cfg = route.kernel_config("bf16", 16, 64, True, True)
    assert k100.build(cfg).name == cfg.name() == "attention_fwd_sm100_bf16_qk576_ov512_g16_causal_bn64_s2_paged64_decode_split"


@pytest.fixture(scope="module")
def combine_sm100():
    pytest.importorskip("fa4mlir._mlir")
    from _mla_helpers import lower_clean
    return lower_clean(dec.COMBINE_KERNEL_SM100, dec.CombineConfig("bf16", 512, arch="sm_100a"))


def test_combine_compiles_for_sm100(combine_sm100):
    art = combine_sm100
    assert art.arch == "sm_100a" and art.name == "attention_combine_sm100_bf16_d512"
    assert [(p.name, p.kind) for p in art.params] == list(dec.COMBINE_PARAMS)


# the bundle set's code shapes that mla_decode_configs() and decode_fp8_configs() lack: 32 heads (2 tokens a tile)
# bf16 page 64 causal split, 64 heads causal unsplit, 32 heads unsplit, 64 heads over the FP8 rows unsplit (0
# spills through nvJitLink LTO, as the kernel ships)
ROUTE_ONLY = [("bf16", 32, 64, True, True), ("bf16", 64, 64, True, False), ("bf16", 32, 64, False, False),
              ("bf16", 64, 64, False, False, True)]


@pytest.mark.parametrize("args", ROUTE_ONLY, ids=lambda a: f"h{a[1]}{'-causal' if a[3] else ''}{'-split' if a[4] else ''}{'-fp8' if a[5:] else ''}")
def test_route_only_configs_compile_with_zero_spills(args):
    pytest.importorskip("fa4mlir._mlir")
    from _sm100_helpers import check_resources, compiled
    cfg = route.kernel_config(*args)
    assert (fcfg.KERNEL, cfg) in set(kernel_sets.SETS[route.BUNDLE_SET]())
    art, seconds = compiled(cfg, "test-mla-decode-sm100-route")
    check_resources(cfg, art, seconds)
    assert art.name == cfg.name()


def test_plan_finds_the_bundles_kernels(monkeypatch, tmp_path):
    """From a bundle (written here from two compiled kernels: the 16-head split kernel and the sm_100a combine),
    the route's plan finds both by name and arch, each launch's arguments in its parameters' order; a kernel
    the bundle lacks is a BundleError naming the set."""
    pytest.importorskip("fa4mlir._mlir")
    from fa4mlir import compiler
    from fa4mlir.artifacts import Bundle, write_bundle
    from fa4mlir.attention import plan as plan_mod
    from fa4mlir.attention.errors import BundleError
    monkeypatch.setattr(plan_mod, "load", lambda art: SimpleNamespace(artifact=art))     # no CUDA driver here
    monkeypatch.delenv(mla.VARIANT_ENV, raising=False)
    p = _problem(batch=2, seqlen_q=2, heads=16, splits=3)
    arts = [compiler.compile_kernel(fcfg.KERNEL, route.sm100_config(p)),
            compiler.compile_kernel(dec.COMBINE_KERNEL_SM100, route.combine_config(p))]
    write_bundle(tmp_path, arts)
    source = plan_mod.KernelSource(Bundle.open(tmp_path))
    kernel, combine = route.build_plan_sm100(p, source, 4).launches
    for launch, art in ((kernel, arts[0]), (combine, arts[1])):
        assert launch.kernel.artifact.name == art.name and launch.kernel.artifact.arch == "sm_100a"
        assert [q.name for q in launch.kernel.artifact.params] == list(launch.args)
    with pytest.raises(BundleError, match="--set mla-decode-sm100"):
        route.build_plan_sm100(_problem(heads=64), source, 4)
