"""attn_implementation="fa4mlir" on a small randomly initialised Llama-architecture model (built
from LlamaConfig, no download: hidden 512, 4 layers, 8 heads of head_dim 64, 2 KV heads (GQA),
bf16) against SDPA: prefill logits by the FA rule (fa4mlir's error against the float32 SDPA model
at most 2x bf16 SDPA's own error, plus 1e-2), and 32 greedy tokens through generate() (prefill,
then 31 decode steps through the DynamicCache): equal to bf16 SDPA's up to the first near-tie of the
float32 model, float32 argmaxes within the bf16 error band, decode-step logits by the FA rule.
Deviceless twin: tests/test_torch_ops.py.
"""
import copy

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def models(bundle, require_arch):
    require_arch(9)
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from fa4mlir.integrations.transformers import register
    register()
    cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                                   num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                                   max_position_embeddings=1024)
    torch.manual_seed(0)
    ref32 = transformers.LlamaForCausalLM(cfg).to("cuda").eval()
    ref32.set_attn_implementation("sdpa")
    sdpa = copy.deepcopy(ref32).to(torch.bfloat16)
    fa = copy.deepcopy(sdpa)
    fa.set_attn_implementation("fa4mlir")
    return torch, ref32, sdpa, fa


@pytest.mark.parametrize("batch, seqlen", [(1, 7), (2, 200), (3, 513)])
def test_prefill_logits_by_the_fa_rule(models, batch, seqlen):
    torch, ref32, sdpa, fa = models
    ids = torch.randint(0, 512, (batch, seqlen), device="cuda", generator=torch.Generator("cuda").manual_seed(seqlen))
    with torch.no_grad():
        ref = ref32(ids).logits
        err_sdpa = (sdpa(ids).logits.float() - ref).abs().max().item()
        err_fa = (fa(ids).logits.float() - ref).abs().max().item()
    assert err_fa <= 2 * err_sdpa + 1e-2, (err_fa, err_sdpa)


def test_greedy_generate_matches_sdpa(models):
    """32 greedy tokens (prefill, then 31 decode steps through the DynamicCache) against SDPA's.

    A randomly initialised model has near-ties among its logits, where two correct bf16 models may
    pick different tokens, so equality is asked up to the first step where the float32 model's top
    two logits (teacher-forced on SDPA's tokens) are closer than the bf16 error band; every token
    fa4mlir picks must be a float32 argmax within that band; and the logits of every decode step
    must pass the FA rule against the float32 model on fa4mlir's own tokens."""
    torch, ref32, sdpa, fa = models
    ids = torch.randint(0, 512, (2, 48), device="cuda", generator=torch.Generator("cuda").manual_seed(7))
    kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, return_dict_in_generate=True, output_logits=True)
    with torch.no_grad():
        want = sdpa.generate(ids, **kw).sequences
        out = fa.generate(ids, **kw)
        got, step_logits = out.sequences, torch.stack(out.logits, 1).float()   # [2, 32, vocab]
        assert got.shape == want.shape == (2, 80)
        # the bf16 error band, from SDPA's own error on the same sequences
        band = 2 * (sdpa(want).logits.float() - ref32(want).logits).abs().max().item() + 1e-2
        ref_want = ref32(want).logits[:, 47:79]           # float32 logits that predict tokens 48..79
        ref_got = ref32(got).logits[:, 47:79]
        err_sdpa_steps = (sdpa(got).logits[:, 47:79].float() - ref_got).abs().max().item()
    err_steps = (step_logits - ref_got).abs().max().item()
    assert err_steps <= 2 * err_sdpa_steps + 1e-2, (err_steps, err_sdpa_steps)
    # min_new_tokens keeps generate() from picking end-of-sequence: take it out of the float32 choice
    eos = fa.generation_config.eos_token_id
    ref_want, ref_got = ref_want.clone(), ref_got.clone()
    for logits in (ref_want, ref_got):
        logits[..., eos if isinstance(eos, list) else [eos]] = float("-inf")
    top2 = ref_want.topk(2, dim=-1).values
    ties = (top2[..., 0] - top2[..., 1]) < 2 * band                       # [2, 32]
    for row in range(2):
        first_tie = int(ties[row].nonzero()[0]) if ties[row].any() else 32
        assert torch.equal(got[row, 48:48 + first_tie], want[row, 48:48 + first_tie]), (row, first_tie, got, want)
    picked = ref_got.gather(-1, got[:, 48:, None])[..., 0]
    assert (picked >= ref_got.max(-1).values - 2 * band).all()


def test_padding_mask_is_a_typed_error(models):
    import fa4mlir
    torch, _, _, fa = models
    ids = torch.ones(2, 9, dtype=torch.long, device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    with torch.no_grad(), pytest.raises(fa4mlir.UnsupportedFeatureError, match="padding mask"):
        fa(ids, attention_mask=mask)


WINDOW = 65   # sliding_window of the models below: kernels of window (64, 0), bf16 D64 (kernel_sets MASK_CASES, SCORE_CASES)


def _sliding_model(kind: str, transformers, torch):
    """A small random model of a family with sliding-window layers: Mistral (every layer), Gemma-2
    (every other, attention-logit softcap 20), gpt-oss (every other, learned sinks set to random
    values of either sign); hidden 512, 8 heads of head_dim 64 over 2 KV heads, float32."""
    common = dict(vocab_size=512, hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=2,
                  head_dim=64, max_position_embeddings=1024, sliding_window=WINDOW)
    if kind == "mistral":
        cfg, cls = transformers.MistralConfig(num_hidden_layers=2, **common), "MistralForCausalLM"
    elif kind == "gemma2":
        cfg, cls = (transformers.Gemma2Config(num_hidden_layers=2, attn_logit_softcapping=20.0,
                                              final_logit_softcapping=None, **common), "Gemma2ForCausalLM")
    else:
        cfg, cls = (transformers.GptOssConfig(num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2, **common),
                    "GptOssForCausalLM")
    torch.manual_seed(0)
    model = getattr(transformers, cls)(cfg).to("cuda").eval()
    if kind == "gptoss":
        for layer in model.model.layers:
            layer.self_attn.sinks.data = torch.randn(8, device="cuda", generator=torch.Generator("cuda").manual_seed(1)) * 2
    return model


@pytest.mark.parametrize("kind", ["mistral", "gemma2", "gptoss"])
def test_sliding_window_softcap_sinks_models_by_the_fa_rule(bundle, require_arch, kind):
    """Prefill of 200 tokens (past the 65-token window) and 16 greedy decode steps through the sliding
    cache (which keeps only the window's last tokens): fa4mlir's bf16 model against the float32 eager
    one, at most 2x bf16 eager's own error plus 1e-2 (prefill logits, and each decode step's logits
    teacher-forced: the float32 model run once over fa4mlir's whole generated sequence)."""
    require_arch(9)
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from fa4mlir.integrations.transformers import register
    register()
    ref32 = _sliding_model(kind, transformers, torch)
    ref32.set_attn_implementation("eager")
    eager = copy.deepcopy(ref32).to(torch.bfloat16)
    fa = copy.deepcopy(eager)
    fa.set_attn_implementation("fa4mlir")
    ids = torch.randint(1, 512, (2, 200), device="cuda", generator=torch.Generator("cuda").manual_seed(5))
    with torch.no_grad():
        ref = ref32(ids).logits
        err_eager = (eager(ids).logits.float() - ref).abs().max().item()
        err_fa = (fa(ids).logits.float() - ref).abs().max().item()
        assert err_fa <= 2 * err_eager + 1e-2, (err_fa, err_eager)
        out = fa.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False, return_dict_in_generate=True,
                          output_logits=True)
        steps = torch.stack(out.logits, 1).float()                        # [2, 16, vocab]
        forced = ref32(out.sequences).logits[:, 199:-1]
        err_eager_steps = (eager(out.sequences).logits[:, 199:-1].float() - forced).abs().max().item()
    err_steps = (steps - forced).abs().max().item()
    assert err_steps <= 2 * err_eager_steps + 1e-2, (err_steps, err_eager_steps)
