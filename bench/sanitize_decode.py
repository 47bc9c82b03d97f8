"""bench/sanitize.py's decode cases (MLIR-free): the sanitizer families of the decode set's kernels
and the children that run them through flash_attn_with_kvcache.

Family of a decode kernel: how it fetches K/V rows (contig: one TMA box per tile of a contiguous
cache; gather: the cp.async gather of small or odd pages; box8: 8-row TMA boxes; page-box: TMA
boxes of the page; tile-box: one box per tile, pages of bn rows or more), split (partials for
the combine) or unsplit (out and lse itself), and an FP8 (e4m3) or a dense cache; the combine
kernel; the append kernel, paged or contiguous. Its features: the dtype, the head dim and the FP8
scale granularity; the combine's: its head dim (512: sanitize_mla's combine case).

Every call draws its inputs on the CPU (seeded), then: a cache of `capacity` rows (not a multiple of
the tiles or pages) holding NaN past each sequence's length, in every page no sequence owns and
(FP8) as NaN codes there; a shuffled page table whose unused slots hold -1 or garbage (1_000_000 +
b, which the kernel contract clamps); sequence lengths 0, 1, page - 1, page + 1, 3 pages + 5 and
201 (ragged tails, empty sequences; seqlen_q above a length: rows that see no key); GQA and MQA;
out filled with NaN. Each result is checked against testing_kvcache.kvcache_reference (float64)
by the FA rule, PyTorch's own low-precision math on the same rows (dequantised for FP8) giving
the bound; rows that see no key must be 0 with lse +inf, and no NaN may reach out or lse. The
append case also compares the whole cache after the call with the reference's (NaN where NaN).
Before each call the child plans it (plan_kvcache, configs_for) and stops unless the call runs the
case's kernel, so a clean report is known to come from that kernel.
"""
from __future__ import annotations

from fa4mlir.kernels import attention_decode_sm90_config as dec

DECODE_KERNELS = (dec.KERNEL, dec.COMBINE_KERNEL, dec.APPEND_KERNEL)
# (seqlen_q, heads, kv_heads) of each call: one query row with GQA 4; five rows with MQA 16, 80
# packed query rows (two row tiles of 64, the second ragged); per-KV-head scales need two KV heads
# (one would read as a per-tensor scale): 5 rows with GQA 8 there
DECODE_SHAPES = ((1, 8, 2), (5, 16, 1))
KV_HEAD_SHAPES = ((1, 8, 2), (5, 16, 2))
CAPACITY = 208          # cache rows per sequence: 3 tiles of 64 and 16 rows; a multiple of the FP8 block (16)
SPLITS = 3              # num_splits of a split call (1: the unsplit variant)
SEQLEN_NEW = 3          # new tokens of the append case (k=, v=)
SPARE_PAGES = 3
GARBAGE = 1_000_000


def fetch_name(config: dict) -> str:
    """contig, gather, box8 (8-row TMA boxes), page-box (TMA boxes of the page) or tile-box."""
    if not config["paged"]:
        return "contig"
    if config["gather"]:
        return "gather"
    if config["box_rows"] == config["bn"]:
        return "tile-box"
    return "box8" if config["box_rows"] < 16 else "page-box"


def decode_family(kernel: str, config: dict) -> str:
    if kernel == dec.KERNEL:
        return "/".join((kernel, fetch_name(config), "unsplit" if config["unsplit"] else "split",
                         "fp8" if config["kv_dtype"] else "dense"))
    if kernel == dec.APPEND_KERNEL:
        return f"{kernel}/{'paged' if config['paged'] else 'contig'}"
    return kernel


# the decode kernel's mask and score-modifier fields at their defaults (absent from a default key)
MOD_FIELDS = {"window_left": -1, "window_right": -1, "chunk": 0, "softcap": False, "sinks": False}


def decode_features(kernel: str, config: dict) -> set[str]:
    if kernel == dec.COMBINE_KERNEL:
        return {f"combine-d{config['head_dim']}"} | ({"decode-masks"} if config.get("sinks") else set())
    if kernel != dec.KERNEL:
        return set()
    out = {f"decode-{config['dtype']}", f"decode-d{config['head_dim']}"}
    out |= {"decode-varlen_q"} if config.get("varlen_q") else set()   # flash_attn_varlen_func(page_table=)
    # window_size / attention_chunk / softcap / sinks (DecodeConfig's compile-time mask and modifiers)
    out |= {"decode-masks"} if any(config.get(k, d) != d for k, d in MOD_FIELDS.items()) else set()
    return out | ({f"scale-{config['kv_scale']}"} if config["kv_scale"] else set())


def shapes_for(case) -> tuple:
    return KV_HEAD_SHAPES if case.kv_scale == "kv_head" else DECODE_SHAPES


def describe(case) -> list[str]:
    """The calls of a case, for --dry-run."""
    out = []
    for match, splits, head_dim, dtype in _calls(case):
        page = None if case.kernel == dec.APPEND_KERNEL and not match["paged"] else case.page_size
        rows = "" if case.kernel != dec.APPEND_KERNEL else f", {SEQLEN_NEW} new tokens"
        for sq, h, hk in shapes_for(case):
            before = lengths_for(page)
            out.append(f"{dtype} D{head_dim} seqlen_q {SEQLEN_NEW if rows else sq}, heads {h}/{hk}, lengths {before}{rows}, "
                       f"page size {page}, num_splits {splits}{f', FP8 {case.kv_scale} scales' if case.kv_scale else ''}")
    return out


def lengths_for(page_size: int | None) -> list[int]:
    """0, 1, page - 1, page + 1, three pages and 5, 201 (a tile of 64 for a contiguous cache)."""
    p = page_size or 64
    return sorted({0, 1, max(p - 1, 1), p + 1, 3 * p + 5, 201})


def decode_inputs(torch, device, lengths, seqlen_q, heads, kv_heads, head_dim, dtype, page_size, seed):
    """q, k_cache, v_cache (float32, NaN where no sequence owns a row), cache_seqlens, page_table."""
    gen = torch.Generator().manual_seed(seed)
    batch = len(lengths)
    q = torch.randn(batch, seqlen_q, heads, head_dim, generator=gen)
    if page_size is None:
        k = torch.randn(batch, CAPACITY, kv_heads, head_dim, generator=gen)
        v = torch.randn(batch, CAPACITY, kv_heads, head_dim, generator=gen)
        for b, n in enumerate(lengths):
            k[b, n:], v[b, n:] = float("nan"), float("nan")
        table = None
    else:
        max_pages = -(-CAPACITY // page_size)
        num_pages = batch * max_pages + SPARE_PAGES
        k = torch.full((num_pages, page_size, kv_heads, head_dim), float("nan"))
        v = torch.full_like(k, float("nan"))
        perm = torch.randperm(num_pages, generator=gen)
        table = torch.full((batch, max_pages), -1, dtype=torch.int32)
        used = 0
        for b, n in enumerate(lengths):
            pages = -(-n // page_size)
            table[b, :pages] = perm[used:used + pages].to(torch.int32)
            used += pages
            if b % 2:
                table[b, pages:] = GARBAGE + b
            for t0 in range(0, n, page_size):
                rows = min(page_size, n - t0)
                page = int(table[b, t0 // page_size])
                k[page, :rows] = torch.randn(rows, kv_heads, head_dim, generator=gen)
                v[page, :rows] = torch.randn(rows, kv_heads, head_dim, generator=gen)
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    return {"q": q.to(tdt).to(device), "k_cache": k, "v_cache": v,
            "cache_seqlens": torch.tensor(lengths, dtype=torch.int32).to(device),
            "page_table": None if table is None else table.to(device)}


def quantize(torch, cache, grain: str, paged: bool, seed: int):
    """(e4m3 codes, float32 scales of `grain`, the dequantised float32 cache): scales per tensor [1],
    per KV head [kv_heads], per block ([num_pages, kv_heads] paged, [batch, capacity / 16, kv_heads]
    contiguous). NaN stays NaN."""
    gen = torch.Generator().manual_seed(seed)
    n0, n1, kv_heads, _ = cache.shape
    shape = {"tensor": (1,), "kv_head": (kv_heads,), "block": (n0, kv_heads) if paged else (n0, n1 // 16, kv_heads)}[grain]
    scale = (1 + torch.rand(shape, generator=gen)) / 32
    if grain == "tensor":
        full = scale.view(1, 1, 1, 1)
    elif grain == "kv_head":
        full = scale.view(1, 1, kv_heads, 1)
    elif paged:
        full = scale.view(n0, 1, kv_heads, 1)
    else:
        full = scale.repeat_interleave(16, dim=1).view(n0, n1, kv_heads, 1)
    codes = (cache / full).to(torch.float8_e4m3fn)
    return codes, scale, codes.float() * full


def rows_of(torch, cache, table, b: int, n: int):
    """Sequence b's first n rows of a cache (through the page table, slots clamped like the kernel's)."""
    if table is None:
        return cache[b, :n]
    t = torch.arange(n)
    pages = table[b].cpu().long().clamp(0, cache.shape[0] - 1)
    flat = cache.reshape(-1, *cache.shape[2:])
    return flat[pages[t // cache.shape[1]] * cache.shape[1] + t % cache.shape[1]]


def check_call(torch, q, out, lse, ref, k_low, v_low, table) -> dict:
    """The FA rule on out and lse against the reference (rows that see a key), 0 and +inf on rows
    that see none, no NaN; k_low, v_low: the cache after the call in q's dtype (dequantised for
    FP8), PyTorch's own computation over them is the low-precision error."""
    from fa4mlir.testing import FaTally, attention_math
    sq, scale = q.shape[1], q.shape[-1] ** -0.5
    out_c, lse_c, q_c = out.cpu().double(), lse.cpu().double(), q.cpu()
    tally, masked_ok = FaTally(), True
    for b, n in enumerate(ref["seqlens_k"]):
        seen = torch.tensor([n > 0 and i + n - sq >= 0 for i in range(sq)])
        if (~seen).any():
            masked_ok &= bool((out_c[b][~seen] == 0).all()) and bool(torch.isposinf(lse_c[b][:, ~seen]).all())
        if not seen.any():
            continue
        low_o, low_l = attention_math(q_c[b:b + 1], rows_of(torch, k_low, table, b, n)[None],
                                      rows_of(torch, v_low, table, b, n)[None], scale, True, q.dtype)
        tally.add(out_c[b][seen], low_o[0].double()[seen], ref["out"][b][seen],
                  lse_c[b][:, seen], low_l[0].double()[:, seen], ref["lse"][b][:, seen])
    nan_out, nan_lse = int(torch.isnan(out_c).sum()), int(torch.isnan(lse_c).sum())
    try:
        errs, rule = tally.check(), True
    except AssertionError:
        errs, rule = tally.errs, False
    from fa4mlir.testing import fa_rule
    bound, lse_bound = fa_rule(errs["out"], errs["out_lowp"])[1], fa_rule(errs["lse"], errs["lse_lowp"])[1]
    return {"max_err": errs["out"], "bound": bound, "lse_err": errs["lse"], "lse_bound": lse_bound,
            "nan_out": nan_out, "nan_lse": nan_lse, "masked_ok": masked_ok,
            "ok": rule and masked_ok and nan_out == 0 and nan_lse == 0}


def _calls(case):
    """(config dict of the case's kernel, num_splits, head_dim, dtype) per entry of the case."""
    for match in case.match:
        if case.kernel == dec.KERNEL:
            yield match, 1 if match["unsplit"] else SPLITS, match["head_dim"], match["dtype"]
        elif case.kernel == dec.COMBINE_KERNEL:
            yield match, SPLITS, match["head_dim"], match["dtype"]
        else:
            yield match, None, match["head_dim"], match["dtype"]


def picked(case, plan) -> dict:
    """The config (key dict) of the case's kernel that the planned call runs."""
    from fa4mlir.attention.kvcache_call import configs_for
    split, combine = configs_for(plan)
    if case.kernel == dec.KERNEL:
        return split.key()
    if case.kernel == dec.COMBINE_KERNEL:
        return combine.key() if combine is not None else {}
    p = plan.problem
    return dec.AppendConfig(p.dtype, p.head_dim, p.cache.paged).key() if p.seqlen_new else {}


def child_decode(case, bundle, seed: int):
    """The case's decode, combine or append kernels through flash_attn_with_kvcache on DECODE_SHAPES
    (module docstring); one SANITIZE-RESULT per call."""
    import torch

    from bench import sanitize as san
    from fa4mlir.attention import flash_attn_with_kvcache
    from fa4mlir.attention.kvcache import plan_kvcache
    from fa4mlir.testing_kvcache import kvcache_reference

    device = san.DEVICE
    append = case.kernel == dec.APPEND_KERNEL
    i = 0
    for match, splits, head_dim, dtype in _calls(case):
        page = case.page_size if not append or match["paged"] else None
        for seqlen_q, heads, kv_heads in shapes_for(case):
            s = seed + i
            i += 1
            before = lengths_for(page)
            new = SEQLEN_NEW if append else 0
            t = decode_inputs(torch, device, [n + new for n in before], new or seqlen_q, heads, kv_heads, head_dim,
                              dtype, page, s)
            k32, v32 = t.pop("k_cache"), t.pop("v_cache")
            extra = {}
            if case.kv_scale:
                k8, ks, k_deq = quantize(torch, k32, case.kv_scale, page is not None, s + 1)
                v8, vs, v_deq = quantize(torch, v32, case.kv_scale, page is not None, s + 2)
                t.update(k_cache=k8.to(device), v_cache=v8.to(device))
                extra = {"k_scale": ks.to(device), "v_scale": vs.to(device)}
                k_low, v_low = k_deq.to(t["q"].dtype), v_deq.to(t["q"].dtype)
            else:
                t.update(k_cache=k32.to(t["q"].dtype).to(device), v_cache=v32.to(t["q"].dtype).to(device))
            if append:
                gen = torch.Generator().manual_seed(s + 3)
                shape = (len(before), new, kv_heads, head_dim)
                extra = {"k": torch.randn(shape, generator=gen).to(t["q"].dtype).to(device),
                         "v": torch.randn(shape, generator=gen).to(t["q"].dtype).to(device)}
                t["cache_seqlens"] = torch.tensor(before, dtype=torch.int32).to(device)
            args = (t["q"], t["k_cache"], t["v_cache"], t["cache_seqlens"], t["page_table"])
            _, plan = plan_kvcache(*args, num_splits=splits, **extra)
            got = picked(case, plan)
            if got != match and got in case.match:
                continue   # FP8_DEFAULT_RULE runs another of the case's kernels at this row count (its own turn)
            if got != match:
                raise RuntimeError(f"flash_attn_with_kvcache would run {got or 'no such kernel'} for the case's "
                                   f"{match} (page size {page}, num_splits {splits})")
            cpu = {n: (x.cpu() if x is not None else None) for n, x in {**t, **extra}.items()}
            ref = kvcache_reference(cpu["q"].float(), cpu["k_cache"] if case.kv_scale else cpu["k_cache"].float(),
                                    cpu["v_cache"] if case.kv_scale else cpu["v_cache"].float(), cpu["cache_seqlens"],
                                    cpu["page_table"], k=None if not append else cpu["k"].float(),
                                    v=None if not append else cpu["v"].float(), k_scale=cpu.get("k_scale"),
                                    v_scale=cpu.get("v_scale"))
            out = torch.full_like(t["q"], float("nan"))
            out, lse = flash_attn_with_kvcache(*args, num_splits=splits, out=out, return_lse=True, bundle=bundle,
                                               **extra)
            torch.cuda.synchronize()
            cache_ok = True
            if append:   # the cache after the call, NaN where the reference's is NaN
                for got_c, want in ((t["k_cache"], ref["k_cache"]), (t["v_cache"], ref["v_cache"])):
                    g, w = got_c.cpu().float(), want.float()
                    cache_ok &= bool(((g == w) | (torch.isnan(g) & torch.isnan(w))).all())
                k_low, v_low = ref["k_cache"].to(t["q"].dtype), ref["v_cache"].to(t["q"].dtype)
            elif not case.kv_scale:
                k_low, v_low = cpu["k_cache"], cpu["v_cache"]
            r = check_call(torch, t["q"], out, lse, ref, k_low, v_low, cpu["page_table"])
            yield {"kernel": dec_name(case.kernel, match), "shape": [len(before), t["q"].shape[1], heads, kv_heads],
                   "page_size": page, "num_splits": splits, "via": "flash_attn_with_kvcache", "seed": s,
                   **r, "ok": r["ok"] and cache_ok, **({"cache_ok": cache_ok} if append else {})}


def dec_name(kernel: str, match: dict) -> str:
    cls = {dec.KERNEL: dec.DecodeConfig, dec.COMBINE_KERNEL: dec.CombineConfig, dec.APPEND_KERNEL: dec.AppendConfig}[kernel]
    return cls(**{k: v for k, v in match.items() if k != "kernel"}).name()
