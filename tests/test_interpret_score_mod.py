"""Deviceless: score_mod / mask_mod kernels (kernels/common/score_mod.py) executed by the interpreter on
small shapes: ALiBi, a relative-position bias table, a document mask (alone and with ALiBi and causal),
softcap as a built-in score_mod; numerics by the FA rule against a float64 reference that applies the
same functions (fa4mlir.testing_score_mod). Persistent kernels run on one CTA, striding over every
query tile of both heads (the aux loads hoisted per tile must follow the head). The cases are kernels of the `score-mods` bundle set, so
the H200 runs the same ones (tests/gpu/test_score_mod_gpu.py)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fa4mlir.kernels.attention_sm90_config import grid, launch_args  # noqa: E402
from fa4mlir.testing_score_mod import CASES, aux_arrays, case_config, case_problem, compare_scored  # noqa: E402
from tests.interpret_sm90 import _bits  # noqa: E402
from tests.test_interpret_sm90 import _tensor  # noqa: E402


def run_case(case, seed=1, cfg=None, problem=None):
    """The case's kernel (or `cfg` / `problem` in its place: another function of the same meaning)
    interpreted on its tensors: (tensors, aux arrays)."""
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm90
    rng = np.random.default_rng(seed)
    d = case.head_dim
    t = {"q": _bits(rng.standard_normal((1, case.seqlen_q, case.heads, d), np.float32), case.dtype),
         "k": _bits(rng.standard_normal((1, case.seqlen_k, case.kv_heads, d), np.float32), case.dtype),
         "v": _bits(rng.standard_normal((1, case.seqlen_k, case.kv_heads, d), np.float32), case.dtype),
         "o": np.full((1, case.seqlen_q, case.heads, d), 0x7FC0 if case.dtype == "bf16" else 0x7E00, np.uint16),
         "lse": np.full((1, case.heads, case.seqlen_q), np.nan, np.float32)}
    aux = aux_arrays(case)
    t.update({f"aux{i}": a for i, a in enumerate(aux)})
    cfg, problem = cfg or case_config(case), problem or case_problem(case)
    kernel = interpret.load(attention_fwd_sm90.build(cfg))
    # a persistent kernel on one CTA: it strides over every tile (both heads: per-tile hoisted aux loads)
    kernel.launch(grid(cfg, problem, num_sms=1 if cfg.persistent else None), launch_args(cfg, problem, t),
                  policy="lazy", seed=seed)
    return t, aux


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_score_mod_kernel_through_the_interpreter(case):
    t, aux = run_case(case)
    q, k, v, o = (_tensor(t[n], case.dtype) for n in ("q", "k", "v", "o"))
    report = compare_scored(case, q, k, v, o, torch.from_numpy(t["lse"]), aux)
    assert report["ok"], report
