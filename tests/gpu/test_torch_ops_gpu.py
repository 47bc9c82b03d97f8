"""The fa4mlir:: torch custom ops on an sm_90 GPU with the bundle's kernels (FA4MLIR_BUNDLE):
torch.library.opcheck, torch.compile(fullgraph=True) with Inductor (no graph break, the eager
output), CUDA-graph capture (torch.cuda.graph, replayed on new input contents) and
torch.compile(mode="reduce-overhead"), and the autograd error. Deviceless twin: tests/test_torch_ops.py.
"""
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)   # bundle: FA4MLIR_BUNDLE is set (flash_attn_func's default kernel source)
    torch = pytest.importorskip("torch")
    import fa4mlir.attention.torch_ops  # noqa: F401  (fa4mlir may have been imported before torch)
    torch._dynamo.reset()
    return torch


def inputs(torch, b=2, sq=200, sk=333, h=8, hk=2, d=128, dtype=None, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dtype = dtype or torch.bfloat16
    return (torch.randn(b, sq, h, d, device="cuda", dtype=dtype, generator=gen),
            torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, generator=gen),
            torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, generator=gen))


@pytest.mark.parametrize("causal", [False, True])
def test_opcheck(torch, causal):
    q, k, v = inputs(torch)
    torch.library.opcheck(torch.ops.fa4mlir.flash_attn_fwd.default, (q, k, v, None, causal, None))
    out, lse = torch.empty_like(q), torch.empty(2, 8, 200, device="cuda")
    torch.library.opcheck(torch.ops.fa4mlir.flash_attn_fwd_out.default, (q, k, v, out, lse, 0.1, causal, None))


class Attn:
    def __init__(self, torch):
        self.proj = torch.nn.Linear(128, 128, bias=False, device="cuda", dtype=torch.bfloat16)

    def __call__(self, q, k, v):
        import fa4mlir
        o, lse = fa4mlir.flash_attn_func(self.proj(q), k, v, causal=True, return_lse=True)
        return self.proj(o) + 1, lse


def test_compile_fullgraph_same_output_no_graph_break(torch):
    from fa4mlir.testing import compare_attention
    f = Attn(torch)
    q, k, v = inputs(torch)
    with torch.no_grad():
        want = f(q, k, v)
        explain = torch._dynamo.explain(f)(q, k, v)
        assert explain.graph_break_count == 0, explain.break_reasons
        compiled = torch.compile(f, fullgraph=True)
        for seed in (0, 1, 2):
            q2, k2, v2 = inputs(torch, seed=seed)
            got, want = compiled(q2, k2, v2), f(q2, k2, v2)
            torch.testing.assert_close(got[0], want[0], atol=2e-2, rtol=2e-2)   # Inductor's own matmul fusion
            assert torch.equal(got[1], want[1])
        import fa4mlir
        o, lse = torch.compile(lambda q, k, v: fa4mlir.flash_attn_func(q, k, v, causal=True, return_lse=True),
                               fullgraph=True)(q, k, v)
    assert compare_attention(q, k, v, o, lse, None, True)["ok"]


def test_cuda_graph_capture_and_replay_with_new_contents(torch):
    import fa4mlir
    q, k, v = inputs(torch, seed=3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):   # warm up: the call cache prepares the signature outside the capture
            fa4mlir.flash_attn_func(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out, lse = fa4mlir.flash_attn_func(q, k, v, causal=True, return_lse=True)
    for seed in (4, 5):
        for x, y in zip((q, k, v), inputs(torch, seed=seed)):
            x.copy_(y)
        graph.replay()
        with torch.no_grad():
            want, want_lse = fa4mlir.flash_attn_func(q, k, v, causal=True, return_lse=True)
        torch.cuda.synchronize()
        assert torch.equal(out, want) and torch.equal(lse, want_lse)


def test_compile_reduce_overhead(torch):
    import fa4mlir
    f = torch.compile(lambda q, k, v: fa4mlir.flash_attn_func(q, k, v, causal=True) * 2, mode="reduce-overhead",
                      fullgraph=True)
    with torch.no_grad():
        for seed in range(5):   # the first calls record, later ones replay the CUDA graph
            q, k, v = inputs(torch, seed=10 + seed)
            got = f(q, k, v).clone()
            assert torch.equal(got, fa4mlir.flash_attn_func(q, k, v, causal=True) * 2)


def test_autograd_error_on_the_gpu(torch):
    import fa4mlir
    q, k, v = inputs(torch)
    q.requires_grad_(True)
    with pytest.raises(fa4mlir.AutogradError, match="no backward kernel"):
        fa4mlir.flash_attn_func(q, k, v)
    with torch.inference_mode():
        fa4mlir.flash_attn_func(q, k, v)
