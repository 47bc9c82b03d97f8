"""Row-level diagnosis of one attention kernel on one shape: which query rows are wrong, and how
(fully masked rows vs rows that see keys). A development tool, MLIR-free, runs on the GPU machine:

    python3 bench/attention_rows.py BUNDLE NAME_OR_SUBSTRING SQ SK [--heads H] [--kv-heads HK] [--batch B]
"""
from __future__ import annotations

import argparse
import math
import sys

import torch

from fa4mlir.attention import AttnProblem
from fa4mlir.kernels.attention_sm90_config import AttnConfig, grid, launch_args
from fa4mlir.runtime import Bundle, load
from fa4mlir.testing import attention_math, torch_dtype


def load_kernel(bundle: str, name: str):
    """The loaded sm_90a attention kernel of `bundle` named `name`, else the one whose name
    contains it; None (after saying what matched) when that is not exactly one."""
    arts = [x for x in Bundle.open(bundle).artifacts()
            if name in x.name and x.config.get("kernel") == "attention_fwd_sm90"]
    arts = [x for x in arts if x.name == name] or arts
    if len(arts) != 1:
        print(f"{len(arts)} sm_90a attention kernels match {name!r}: {[x.name for x in arts]}")
        return None
    return load(arts[0])


def ranges(idx: list[int]) -> str:
    out, start, prev = [], None, None
    for i in idx:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}-{prev}")
            start = prev = i
    if start is not None:
        out.append(f"{start}-{prev}")
    return ", ".join(out) or "none"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bundle")
    ap.add_argument("name")
    ap.add_argument("sq", type=int)
    ap.add_argument("sk", type=int)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    kern = load_kernel(a.bundle, a.name)
    if kern is None:
        return 2
    art, cfg = kern.artifact, kern.artifact.config
    dt, d, causal = torch_dtype(cfg["dtype"]), cfg["head_dim"], cfg["causal"]
    g = torch.Generator(device="cuda").manual_seed(a.seed)
    q = torch.randn(a.batch, a.sq, a.heads, d, device="cuda", dtype=dt, generator=g)
    k = torch.randn(a.batch, a.sk, a.kv_heads, d, device="cuda", dtype=dt, generator=g)
    v = torch.randn(a.batch, a.sk, a.kv_heads, d, device="cuda", dtype=dt, generator=g)
    scale = 1 / math.sqrt(d)
    ro, rl = attention_math(q, k, v, scale, causal, torch.float32)
    tl, _ = attention_math(q, k, v, scale, causal, dt)
    bad_any = False
    for rep in range(2):
        o = torch.full_like(q, float("nan"))
        lse = torch.full((a.batch, a.heads, a.sq), float("nan"), device="cuda", dtype=torch.float32)
        config = AttnConfig.from_key(cfg)
        problem = AttnProblem.of(q.shape, k.shape, config.dtype, causal=config.causal, softmax_scale=scale)
        args = launch_args(config, problem, dict(q=q, k=k, v=v, o=o, lse=lse))
        kern.launch(grid(config, problem, torch.cuda.get_device_properties(0).multi_processor_count), args)
        torch.cuda.synchronize()
        tol = 2 * (tl.float() - ro).abs().amax(dim=-1) + 1e-5          # [B, Sq, H] per row
        err = (o.float() - ro).abs().amax(dim=-1)
        empty = ~torch.isfinite(rl.transpose(1, 2))                   # rows that see no key
        bad = (err > tol.amax()) | err.isnan()
        lse_t = lse.transpose(1, 2)
        bad_lse = torch.where(empty, lse_t != float("inf"), (lse_t - rl.transpose(1, 2)).abs() > 1e-3)
        print(f"{art.name} Sq{a.sq} Sk{a.sk} run {rep}: max err {err.nan_to_num(1e9).max().item():.3e} "
              f"(tol {tol.amax().item():.3e}); empty rows {int(empty[0, :, 0].sum())}")
        for h in range(a.heads):
            rows = bad[0, :, h].nonzero().flatten().tolist()
            lrows = bad_lse[0, :, h].nonzero().flatten().tolist()
            if rows or lrows:
                bad_any = True
                e_rows = [r for r in rows if empty[0, r, h]]
                print(f"  head {h}: bad O rows {ranges(rows)} (of them empty: {ranges(e_rows)}); "
                      f"bad LSE rows {ranges(lrows)}")
                r = rows[0] if rows else lrows[0]
                print(f"    row {r}: o[:4] {o[0, r, h, :4].tolist()} ref {ro[0, r, h, :4].tolist()} "
                      f"lse {lse[0, h, r].item()} ref {rl[0, h, r].item()}")
    return 1 if bad_any else 0


if __name__ == "__main__":
    sys.exit(main())
