"""attn_implementation="fa4mlir" on a small randomly initialised Llama-architecture model (built
from LlamaConfig, no download: hidden 512, 4 layers, 8 heads of head_dim 64, 2 KV heads (GQA),
bf16) against SDPA: prefill logits by the FA rule (fa4mlir's error against the float32 SDPA model
at most 2x bf16 SDPA's own error, plus 1e-2), and 32 greedy tokens through generate() (prefill,
then 31 decode steps through the DynamicCache) equal to bf16 SDPA's. Deviceless twin:
tests/test_torch_ops.py.
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
    torch, _, sdpa, fa = models
    ids = torch.randint(0, 512, (2, 48), device="cuda", generator=torch.Generator("cuda").manual_seed(7))
    with torch.no_grad():
        want = sdpa.generate(ids, max_new_tokens=32, do_sample=False, min_new_tokens=32)
        got = fa.generate(ids, max_new_tokens=32, do_sample=False, min_new_tokens=32)
    assert got.shape == (2, 80) and torch.equal(got, want), (got[:, 48:], want[:, 48:])


def test_padding_mask_is_a_typed_error(models):
    import fa4mlir
    torch, _, _, fa = models
    ids = torch.ones(2, 9, dtype=torch.long, device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    with torch.no_grad(), pytest.raises(fa4mlir.UnsupportedFeatureError, match="padding mask"):
        fa(ids, attention_mask=mask)
