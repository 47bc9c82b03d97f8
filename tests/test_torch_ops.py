"""The torch custom ops (fa4mlir::flash_attn_fwd, fa4mlir::flash_attn_fwd_out), torch.compile,
autograd honesty and the transformers backend, on CPU torch tensors with a stand-in kernel that
computes attention in float64 (test_attention_torch_cpu's FakeKernel). Needs torch (and
transformers for the last tests), not a GPU; skipped where torch is missing (CI). The same on a GPU
with the bundle's kernels: tests/gpu/test_torch_ops_gpu.py and test_transformers_gpu.py.
"""
import pytest

import fa4mlir
from fa4mlir.attention import (AutogradError, HeadDimError, ScaleError, ShapeError, UnsupportedFeatureError, checks,
                               flash_attn_func)
from fa4mlir.attention import dense
from fa4mlir.driver import DeviceInfo

torch = pytest.importorskip("torch")
from test_attention_torch_cpu import FakeKernel, cpu_inputs  # noqa: E402


class _NoCache(dict):
    """A call cache that keeps nothing: every call prepares the fake kernel on its own tensors, so
    the fake computes them (it computes only on the tensors it was prepared with)."""

    def __setitem__(self, key, value):
        pass


@pytest.fixture
def cpu_ops(monkeypatch):
    made = []

    class FakeSource:
        def __init__(self, bundle):
            self.bundle = bundle

        def kernel(self, default):
            made.append(FakeKernel(default.causal, config=default))
            return made[-1]
    monkeypatch.setattr(dense, "source_for", FakeSource)
    monkeypatch.setattr(checks, "CUDA_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(dense, "device_info", lambda: DeviceInfo(0, (9, 0), 132, 50 * 2**20))
    monkeypatch.setattr(dense, "_CALLS", _NoCache())
    monkeypatch.setattr(dense, "resolve_stream", lambda stream, uses_torch, device: 0)
    from fa4mlir.attention import torch_ops  # noqa: F401  (registers torch.ops.fa4mlir: a test run alone has them)
    torch._dynamo.reset()
    yield made
    torch._dynamo.reset()


def reference(q, k, v, causal, scale=None):
    from fa4mlir.testing import attention_math
    o, _ = attention_math(q, k, v, scale or q.shape[-1] ** -0.5, causal, torch.float64)
    return o.to(q.dtype)


# ----------------------------------------------------------------------------------------------
# The ops
# ----------------------------------------------------------------------------------------------

def test_ops_are_registered_with_their_schemas():
    from fa4mlir.attention import torch_ops
    fwd = str(torch.ops.fa4mlir.flash_attn_fwd.default._schema)
    assert fwd == ("fa4mlir::flash_attn_fwd(Tensor q, Tensor k, Tensor v, float? softmax_scale, bool causal, "
                   "str? bundle, SymInt window_left=-1, SymInt window_right=-1, SymInt attention_chunk=0, "
                   "float softcap=0., Tensor? sinks=None) -> (Tensor, Tensor)")
    out = str(torch.ops.fa4mlir.flash_attn_fwd_out.default._schema)
    assert "Tensor(a3!) out, Tensor(a4!)? lse" in out and out.endswith("float softcap=0., Tensor? sinks=None) -> ()")
    assert torch_ops.NAMESPACE == "fa4mlir"


def test_fake_gives_shapes_and_dtypes_and_typed_errors():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 10, 8, 64, dtype=torch.bfloat16)
        k = v = torch.empty(2, 12, 2, 64, dtype=torch.bfloat16)
        out, lse = torch.ops.fa4mlir.flash_attn_fwd(q, k, v, None, True, None)
        assert out.shape == q.shape and out.dtype == torch.bfloat16
        assert lse.shape == (2, 8, 10) and lse.dtype == torch.float32
        with pytest.raises(HeadDimError):
            bad = torch.empty(2, 10, 8, 80, dtype=torch.bfloat16)
            torch.ops.fa4mlir.flash_attn_fwd(bad, bad, bad, None, True, None)
        # MLA prefill's unequal head dims: out takes v's; another pair is refused
        qk, v128 = torch.empty(2, 10, 8, 192, dtype=torch.bfloat16), torch.empty(2, 10, 8, 128, dtype=torch.bfloat16)
        out, _ = torch.ops.fa4mlir.flash_attn_fwd(qk, qk, v128, None, True, None)
        assert out.shape == (2, 10, 8, 128)
        with pytest.raises(HeadDimError):
            torch.ops.fa4mlir.flash_attn_fwd(v128, v128, qk, None, True, None)
        with pytest.raises(ScaleError):
            torch.ops.fa4mlir.flash_attn_fwd(q, k, v, -1.0, True, None)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_through_the_op_matches_the_reference(cpu_ops, causal):
    q, k, v = cpu_inputs((2, 40, 56, 4, 2))
    out, lse = torch.ops.fa4mlir.flash_attn_fwd(q, k, v, 0.2, causal, None)
    assert torch.equal(out, reference(q, k, v, causal, 0.2)) and lse.shape == (2, 4, 40)
    got = flash_attn_func(q, k, v, softmax_scale=0.2, causal=causal)
    assert torch.equal(got, out)
    o, l2 = torch.empty_like(q), torch.empty(2, 4, 40)
    torch.ops.fa4mlir.flash_attn_fwd_out(q, k, v, o, l2, 0.2, causal, None)
    assert torch.equal(o, out) and torch.equal(l2, lse)


def test_opcheck_on_cpu_with_the_stand_in_kernel(cpu_ops):
    q, k, v = cpu_inputs((1, 24, 40, 4, 2))
    torch.library.opcheck(torch.ops.fa4mlir.flash_attn_fwd.default, (q, k, v, None, True, None))
    o, lse = torch.empty_like(q), torch.empty(1, 4, 24)
    torch.library.opcheck(torch.ops.fa4mlir.flash_attn_fwd_out.default, (q, k, v, o, lse, 0.5, False, None))


# ----------------------------------------------------------------------------------------------
# torch.compile
# ----------------------------------------------------------------------------------------------

class Block(torch.nn.Module):
    """A model that calls flash_attn_func between torch ops (views, math on its output)."""

    def __init__(self, return_lse=False, out=None, bundle=None):
        super().__init__()
        self.return_lse, self.out, self.bundle = return_lse, out, bundle

    def forward(self, q, k, v):
        r = flash_attn_func(q * 1.0, k, v, causal=True, return_lse=self.return_lse, out=self.out, bundle=self.bundle)
        if self.return_lse:
            return r[0].float().sum(-1) + r[1].transpose(1, 2)
        return r.float() * 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("variant", ["alloc", "lse", "out", "bundle_path", "bundle_object"])
def test_fullgraph_compile_has_no_graph_break_and_the_same_output(cpu_ops, backend, variant, tmp_path):
    from fa4mlir.runtime import Bundle
    q, k, v = cpu_inputs((1, 48, 64, 4, 2))
    kw = {"alloc": {}, "lse": dict(return_lse=True), "out": dict(out=torch.empty_like(q)),
          "bundle_path": dict(bundle=str(tmp_path)), "bundle_object": dict(bundle=Bundle(tmp_path, []))}[variant]
    model = Block(**kw)
    with torch.no_grad():
        want = model(q, k, v)
        explain = torch._dynamo.explain(model)(q, k, v)
        assert explain.graph_break_count == 0 and explain.graph_count == 1, [(r.reason[:900], r.user_stack[-3:]) for r in explain.break_reasons]
        got = torch.compile(model, fullgraph=True, backend=backend)(q, k, v)
    assert torch.equal(got, want)
    graph_ops = {str(n.target) for g in explain.graphs for n in g.graph.nodes if n.op == "call_function"}
    want_op = "fa4mlir.flash_attn_fwd_out.default" if variant == "out" else "fa4mlir.flash_attn_fwd.default"
    assert want_op in graph_ops, graph_ops


# ----------------------------------------------------------------------------------------------
# Autograd honesty
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_inputs_that_require_grad_raise_before_any_launch(cpu_ops, which):
    q, k, v = cpu_inputs((1, 16, 16, 2, 2))
    dict(q=q, k=k, v=v)[which].requires_grad_(True)
    with pytest.raises(AutogradError, match=rf"{which} requires grad .* no backward kernel .*torch.no_grad"):
        flash_attn_func(q, k, v)
    assert not cpu_ops  # nothing looked up, nothing launched
    assert isinstance(AutogradError("x"), NotImplementedError) and fa4mlir.AutogradError is AutogradError
    with torch.no_grad():
        assert not flash_attn_func(q, k, v).requires_grad
    with torch.inference_mode():
        flash_attn_func(q, k, v)
    flash_attn_func(q.detach(), k.detach(), v.detach())
    with pytest.raises(AutogradError):   # compiled: the check is traced, so it raises too
        torch.compile(lambda q, k, v: flash_attn_func(q, k, v), backend="eager")(q, k, v)
    # fullgraph: Dynamo reports the exception it traced as Unsupported, with the message
    with pytest.raises(Exception, match="no backward kernel yet"):
        torch.compile(lambda q, k, v: flash_attn_func(q, k, v), fullgraph=True, backend="eager")(q, k, v)


def test_the_op_declares_no_autograd_formula(cpu_ops):
    q, k, v = cpu_inputs((1, 16, 16, 2, 2))
    q.requires_grad_(True)
    out, _ = torch.ops.fa4mlir.flash_attn_fwd(q, k, v, None, False, None)
    assert out.requires_grad  # not a silently detached tensor: backward says there is no formula
    with pytest.raises(RuntimeError, match="no autograd formula"):
        out.float().sum().backward()


def test_scales_keep_their_typed_errors_through_the_op(cpu_ops):
    q, k, v = cpu_inputs((1, 16, 16, 2, 2))
    with pytest.raises(ScaleError):
        flash_attn_func(q, k, v, softmax_scale=True)
    with pytest.raises(ShapeError):
        flash_attn_func(q[0], k, v)


# ----------------------------------------------------------------------------------------------
# transformers: attn_implementation="fa4mlir"
# ----------------------------------------------------------------------------------------------

def tiny_llama(attn, seed=0, **config):
    transformers = pytest.importorskip("transformers")
    from fa4mlir.integrations.transformers import register
    register()
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                   max_position_embeddings=256, **config)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    model.set_attn_implementation(attn)
    return model


def test_transformers_prefill_and_generate_match_eager_attention(cpu_ops):
    model = tiny_llama("fa4mlir")
    ref = tiny_llama("eager")
    ids = torch.randint(0, 96, (2, 21), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, want = model(ids).logits.float(), ref(ids).logits.float()
        # bf16 model either way; the stand-in kernel rounds float64 attention once, eager rounds more often
        assert (got - want).abs().max() < 0.05, (got - want).abs().max()
        gen = model.generate(ids, max_new_tokens=12, do_sample=False)
        gen_ref = ref.generate(ids, max_new_tokens=12, do_sample=False)
    assert torch.equal(gen, gen_ref)
    assert any(fake.causal for fake in cpu_ops) and all(fake.causal for fake in cpu_ops)
    # decode steps: seqlen_q 1 against the whole cache
    assert any(args["seqlen_q"] == 1 and args["seqlen_k"] > 21 for fake in cpu_ops for _, args in fake.prepared)


def test_transformers_rejects_what_the_kernel_cannot_take(cpu_ops):
    model = tiny_llama("fa4mlir")
    ids = torch.randint(0, 96, (2, 9), generator=torch.Generator().manual_seed(2))
    pad = torch.ones_like(ids)
    pad[0, :3] = 0
    with torch.no_grad():
        with pytest.raises(UnsupportedFeatureError, match="padding mask"):
            model(ids, attention_mask=pad)
        model(ids, attention_mask=torch.ones_like(ids))  # all ones: no mask needed
        with pytest.raises(UnsupportedFeatureError, match="attention mask tensor"):
            model(ids, attention_mask=torch.ones(2, 1, 9, 9, dtype=torch.bool))
        with pytest.raises(UnsupportedFeatureError, match="static or sliding cache"):
            model.generate(ids, max_new_tokens=2, do_sample=False, cache_implementation="static")
    dropout = tiny_llama("fa4mlir", attention_dropout=0.1).train()
    with torch.no_grad(), pytest.raises(UnsupportedFeatureError, match="dropout"):
        dropout(ids)
    with pytest.raises(AutogradError):
        model.train()(ids)  # training: parameters require grad, so q, k, v do


def tiny_model(kind: str, attn: str, seed: int = 0):
    """A small random bf16 model of a family whose attention has a sliding window (Mistral: every
    layer; Gemma-2: every other, with an attention-logit softcap; gpt-oss: every other, with learned
    sinks), windows short enough that the prompt and generate() go past them."""
    transformers = pytest.importorskip("transformers")
    from fa4mlir.integrations.transformers import register
    register()
    common = dict(vocab_size=96, hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=64, max_position_embeddings=256)
    if kind == "mistral":
        cfg, cls = transformers.MistralConfig(num_hidden_layers=2, sliding_window=7, **common), "MistralForCausalLM"
    elif kind == "gemma2":
        cfg, cls = (transformers.Gemma2Config(num_hidden_layers=2, sliding_window=6, attn_logit_softcapping=2.0,
                                              final_logit_softcapping=None, **common), "Gemma2ForCausalLM")
    else:
        cfg, cls = (transformers.GptOssConfig(num_hidden_layers=2, sliding_window=5, num_local_experts=4,
                                              num_experts_per_tok=2, **common), "GptOssForCausalLM")
    torch.manual_seed(seed)
    model = getattr(transformers, cls)(cfg).to(torch.bfloat16).eval()
    if kind == "gptoss":   # random sinks of either sign, large enough to matter
        for layer in model.model.layers:
            layer.self_attn.sinks.data = torch.randn(4, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16) * 2
    model.set_attn_implementation(attn)
    return model


@pytest.mark.parametrize("kind", ["mistral", "gemma2", "gptoss"])
def test_transformers_window_softcap_sinks_match_eager_attention(cpu_ops, kind):
    """Prefill past the window, then 10 greedy decode steps through the sliding cache (which drops its
    oldest tokens), against eager attention: prefill logits, and each decode step's logits against
    eager's over the whole generated sequence at once (teacher-forced: no cache, the window as a
    mask), so a near-tie between two tokens cannot fail it. The kernel config carries the module's
    window (W - 1, 0), its softcap and sinks, and the fake kernel computes what that config would."""
    model, ref = tiny_model(kind, "fa4mlir"), tiny_model(kind, "eager")
    ids = torch.randint(1, 96, (2, 19), generator=torch.Generator().manual_seed(3))   # 0 is Gemma-2's pad token
    with torch.no_grad():
        got, want = model(ids).logits.float(), ref(ids).logits.float()
        assert (got - want).abs().max() < 0.05, (got - want).abs().max()
        out = model.generate(ids, max_new_tokens=10, min_new_tokens=10, do_sample=False, return_dict_in_generate=True,
                             output_logits=True)
        steps = torch.stack(out.logits, 1).float()                      # [2, 10, vocab]
        forced = ref(out.sequences).logits.float()[:, 18:-1]            # the logits that chose tokens 19..28
    assert (steps - forced).abs().max() < 0.05, (steps - forced).abs().max()
    configs = {fake.config for fake in cpu_ops}
    window = {"mistral": 6, "gemma2": 5, "gptoss": 4}[kind]
    assert any(c.window_left == window and c.causal for c in configs), configs
    if kind == "gemma2":
        assert all(c.softcap for c in configs)
    if kind == "gptoss":
        assert all(c.sinks for c in configs) and any(c.window_left == -1 for c in configs)
    # decode steps of a sliding layer see the window's keys only (the cache dropped the rest)
    assert any(args["seqlen_q"] == 1 and args["seqlen_k"] == window + 1 for fake in cpu_ops for _, args in fake.prepared)


def test_transformers_recognises_only_its_own_sliding_window_mask():
    pytest.importorskip("transformers")
    from transformers.masking_utils import (and_masks, causal_mask_function, chunked_causal_mask_function,
                                            sliding_window_causal_mask_function, sliding_window_overlay)

    from fa4mlir.integrations.transformers import attention_mask, sliding_window_of
    assert sliding_window_of(sliding_window_causal_mask_function(12)) == 12
    assert sliding_window_of(causal_mask_function) is None
    assert sliding_window_of(and_masks(causal_mask_function, sliding_window_overlay(12))) is None   # other order
    extra = and_masks(sliding_window_causal_mask_function(12), lambda b, h, q, kv: kv >= 0)
    assert sliding_window_of(extra) is None
    chunked = chunked_causal_mask_function(8, torch.zeros(1, dtype=torch.long))
    for fn in (extra, chunked):
        with pytest.raises(UnsupportedFeatureError, match="a mask other than"):
            attention_mask(1, 4, 10, 6, 0, mask_function=fn)
    with pytest.raises(UnsupportedFeatureError, match="local_size=7"):
        attention_mask(1, 4, 10, 6, 0, mask_function=sliding_window_causal_mask_function(12), local_size=7)
    # a sliding cache that dropped its oldest tokens: keys end at the last query
    assert attention_mask(1, 1, 12, 20, 9, mask_function=sliding_window_causal_mask_function(12), local_size=12) is None
    with pytest.raises(UnsupportedFeatureError, match="static or sliding cache"):   # keys past the last query
        attention_mask(1, 1, 16, 20, 9, mask_function=sliding_window_causal_mask_function(12), local_size=12)
    with pytest.raises(UnsupportedFeatureError, match="static or sliding cache"):   # a full layer must hold all
        attention_mask(1, 1, 12, 20, 9, mask_function=causal_mask_function)


def test_the_ops_module_registers_the_ops_and_fa4mlir_alone_imports_no_torch():
    """torch.ops.fa4mlir.* after `import fa4mlir.attention.torch_ops` (the README's line), before any
    call; importing fa4mlir alone imports no torch (the ops come with the first torch call)."""
    import subprocess
    import sys
    code = "import torch, fa4mlir.attention.torch_ops; print(torch.ops.fa4mlir.flash_attn_fwd.default.name())"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "fa4mlir::flash_attn_fwd" in run.stdout, run.stderr
    code = "import sys, fa4mlir; fa4mlir.flash_attn_func; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
