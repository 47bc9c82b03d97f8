"""score_mod / mask_mod on the GPU, from the bundle (the gpu-tests set holds the score-mods kernels:
fa4mlir/testing_score_mod.py CASES, found by their functions' fingerprints), through
flash_attn_func(score_mod=, mask_mod=, aux_tensors=). Each case at its interpreter shape and at a
larger GQA one (ragged tails, many KV blocks), NaN-poisoned out and lse, the FA rule against a
float64 reference that applies the same functions (compare_scored); document masks with rows of
one-token documents. Softcap as the built-in score_mod must give bit-identical results to the
hand-written softcap=True kernel (the two compile to the same code: tests/test_score_mod_compile.py).
A function whose kernel the bundle lacks raises BundleError naming its fingerprint."""
from dataclasses import replace

import numpy as np
import pytest

from fa4mlir.testing_score_mod import CASES, aux_arrays, case_mods, compare_scored

pytestmark = pytest.mark.gpu
BIG = dict(seqlen_q=1000, seqlen_k=1000, heads=4, kv_heads=2)


@pytest.fixture(scope="module")
def attn_bundle(bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    return bundle


def _run(attn_bundle, case, seed=0):
    import torch
    from fa4mlir.attention import flash_attn_func
    from fa4mlir.testing import attention_inputs
    q, k, v = attention_inputs(1, case.seqlen_q, case.seqlen_k, case.heads, case.kv_heads, case.head_dim,
                               case.dtype, seed)
    aux_np = aux_arrays(case, seed)
    aux = [torch.from_numpy(a).cuda() for a in aux_np]
    score_mod, mask_mod = case_mods(case)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((1, case.heads, case.seqlen_q), float("nan"), device="cuda")
    flash_attn_func(q, k, v, causal=case.causal, score_mod=score_mod, mask_mod=mask_mod, aux_tensors=aux or None,
                    out=out, lse=lse, bundle=attn_bundle)
    torch.cuda.synchronize()
    return q, k, v, out, lse, aux_np


@pytest.mark.parametrize("big", [False, True], ids=["small", "big"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_score_mod_matches_reference(attn_bundle, case, big):
    case = replace(case, **BIG) if big else case
    q, k, v, out, lse, aux = _run(attn_bundle, case)
    report = compare_scored(case, q, k, v, out, lse, aux)
    assert report["ok"], report


def test_softcap_score_mod_is_bitwise_the_softcap_kernel(attn_bundle):
    import torch
    from fa4mlir import softcap_score_mod
    from fa4mlir.attention import flash_attn_func
    from fa4mlir.testing import attention_inputs
    for head_dim, causal, sk in ((128, True, 1000), (64, False, 5000)):   # 5000: D64's long tiles, as score_mods'
        q, k, v = attention_inputs(1, 300, sk, 4, 2, head_dim, "bf16", 3)
        q = q * 8
        # cap 60 (> FIXED_MAX_CAP): softcap= runs the running-max kernel (the softcap rule), the score_mod's twin
        a, la = flash_attn_func(q, k, v, causal=causal, softcap=60.0, return_lse=True, bundle=attn_bundle)
        b, lb = flash_attn_func(q, k, v, causal=causal, score_mod=softcap_score_mod(60.0), return_lse=True,
                                bundle=attn_bundle)
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_missing_function_is_a_bundle_error(attn_bundle):
    import torch
    from fa4mlir.attention import BundleError, flash_attn_func
    q = torch.zeros(1, 64, 2, 64, dtype=torch.bfloat16, device="cuda")

    def not_bundled(score, batch, head, q_idx, kv_idx):
        return score * 0.5
    with pytest.raises(BundleError, match="not_bundled_"):
        flash_attn_func(q, q, q, score_mod=not_bundled, bundle=attn_bundle)


def test_document_mask_one_token_documents(attn_bundle):
    """Every token its own document but for one run: rows see only themselves (and the run)."""
    import torch
    from fa4mlir.attention import flash_attn_func
    from fa4mlir.testing import attention_inputs
    case = next(c for c in CASES if c.name == "docmask-d128")
    q, k, v = attention_inputs(1, case.seqlen_q, case.seqlen_k, case.heads, case.kv_heads, case.head_dim, "bf16", 5)
    ids = np.arange(case.seqlen_q, dtype=np.int32)
    ids[100:200] = 100
    _, mask_mod = case_mods(case)
    out, lse = flash_attn_func(q, k, v, mask_mod=mask_mod, aux_tensors=[torch.from_numpy(ids).cuda()],
                               return_lse=True, bundle=attn_bundle)
    report = compare_scored(case, q, k, v, out, lse, [ids])
    assert report["ok"], report
