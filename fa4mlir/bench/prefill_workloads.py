"""The torch side of `bench prefill` (prefill_bench.py says what is measured and how): the
anchors' tensors, references and backends of each row, built on the GPU machine. Tensors follow
../shared/anchors/anchors_serving.py call for call (torch.manual_seed(0) before each workload, the
same draws in the same order), so its numbers and these compare."""
from __future__ import annotations

import os

from typing import Any, Callable

from .decode_bench import _first, _paged
from .prefill_bench import CHECK_ROWS, CHUNKED, D, S8K, S16K, VARLEN, row_shape, row_workload, varlen_lens
from .runner import Row, Unsupported, fa_rule

DEV = "cuda"


def environment(torch: Any) -> dict:
    """The run's software and device (attention_bench.environment's fields)."""
    import platform
    from importlib import metadata
    props = torch.cuda.get_device_properties(0)
    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    return {"device": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability()),
            "sm_count": props.multi_processor_count, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "triton": triton, "python": platform.python_version()}


def import_flex(torch: Any) -> tuple[tuple | None, dict]:
    """((torch.compile(flex_attention, dynamic=False), create_block_mask), info), as the anchors
    build it; (None, why) when it does not import."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        return (torch.compile(flex_attention, dynamic=False), create_block_mask), {"available": True}
    except Exception as e:  # noqa: BLE001  (any failure means: no FlexAttention rows)
        return None, {"available": False, "error": f"{type(e).__name__}: {e}"[:300]}


def _fa4mlir(name: str) -> Callable:
    """fa4mlir's entry point `name`, or Unsupported when the package has none yet."""
    import fa4mlir
    try:
        return getattr(fa4mlir, name)
    except AttributeError:
        raise Unsupported(f"fa4mlir has no {name} yet") from None


def causal_mask(torch: Any, sq: int, sk: int, window_left: int | None = None):
    """anchors_serving.causal_mask: bool [sq, sk], bottom-right causal, optionally a left window."""
    i = torch.arange(sq, device=DEV)[:, None] + (sk - sq)
    j = torch.arange(sk, device=DEV)[None, :]
    m = j <= i
    if window_left is not None:
        m &= j >= i - window_left
    return m


def reference(torch: Any, q, k, v, scale: float, mask=None, softcap: float = 0.0, sink=None, bias=None,
              dtype=None):
    """anchors_serving.ref with every step in `dtype` (float32: the reference; bf16: torch's own
    low-precision computation, the FA rule's yardstick): q [B, Sq, H, D], k, v [B, Sk, Hk, D], mask
    [Sq, Sk] (True = visible), bias [H, Sq, Sk] added to the scaled (capped) scores."""
    dtype = dtype or torch.float32
    h, hk = q.shape[2], k.shape[2]
    qq, kk, vv = (x.to(dtype).transpose(1, 2) for x in (q, k, v))
    kk, vv = kk.repeat_interleave(h // hk, 1), vv.repeat_interleave(h // hk, 1)
    s = qq @ kk.transpose(-1, -2) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias.to(dtype)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    if sink is not None:
        s = torch.cat([s, sink.to(dtype).view(1, -1, 1, 1).expand(s.shape[0], -1, s.shape[2], 1)], -1)
        p = torch.softmax(s, -1)[..., :-1]
    else:
        p = torch.softmax(s, -1)
    return (p @ vv).transpose(1, 2)


def checker(torch: Any, take: Callable, inputs: tuple, *more: tuple, **ref_kw) -> Callable[[Any], dict]:
    """check(out): max |take(out) - float32 reference| of `inputs` (q, k, v, scale), the FA rule
    against torch's bf16 computation of the same, and the NaN count of the whole output. `more`:
    further (take, inputs, reference keywords over ref_kw) slices judged with the first (the
    largest error counts)."""
    parts = [(take, inputs, ref_kw), *((tk, inp, {**ref_kw, **kw}) for tk, inp, kw in more)]
    wants = [reference(torch, *inp, **kw) for _, inp, kw in parts]
    torch_err = max(float((reference(torch, *inp, dtype=inp[0].dtype, **kw).float() - want).abs().max())
                    for (_, inp, kw), want in zip(parts, wants))

    def check(out) -> dict:
        err = max(float((tk(out).float() - want).abs().max()) for (tk, _, _), want in zip(parts, wants))
        nan = int(torch.isnan(out).sum())
        ok, bound = fa_rule(err, torch_err)
        return {"max_err": err, "torch_err": torch_err, "bound": bound, "fa_rule_ok": ok and nan == 0, "nan_out": nan}
    return check


def poisoner(torch: Any, numel: int, dtype) -> Callable[[], None]:
    """poison(): a NaN block of the output's size, freed into torch's caching allocator at once, so
    the next allocation of that size (the backend's output) starts as NaN. Best effort: the
    allocator may hand out another free block; the check counts NaN in the whole output."""
    def poison():
        torch.cuda.empty_cache()
        torch.empty(numel, dtype=dtype, device=DEV).fill_(float("nan"))
    return poison


def _sdpa(torch: Any, q, k, v) -> dict[str, Callable]:
    """torch SDPA's cuDNN and FA2 backends, causal, on contiguous [B, H, S, D] copies made before timing."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    out = {}
    for label, be in (("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa-fa2", SDPBackend.FLASH_ATTENTION)):
        def make(be=be):
            qh, kh, vh = (x.transpose(1, 2).contiguous() for x in (q, k, v))

            def call():
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(qh, kh, vh, is_causal=True).transpose(1, 2)
            return call
        out[label] = make
    return out


def _row(torch, name: str, backends: dict, check: Callable, out_numel: int, lens=None, notes=None) -> Row:
    shape, flops = row_shape(name, lens)
    return Row(name, row_workload(name), shape, flops, backends, check, poisoner(torch, out_numel, torch.bfloat16), notes or {})


def _varlen(torch, rows, fa4, flex) -> list[Row]:
    lens = varlen_lens(torch)
    h, hk = VARLEN["heads"], VARLEN["kv_heads"]
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lens), 0)
    total, mx, n0 = int(cu[-1]), max(lens), lens[0]
    cu = cu.to(DEV)
    q = torch.randn(total, h, D, dtype=torch.bfloat16, device=DEV)
    k = torch.randn(total, hk, D, dtype=torch.bfloat16, device=DEV)
    v = torch.randn(total, hk, D, dtype=torch.bfloat16, device=DEV)
    check = checker(torch, lambda o: o[None, :n0], (q[None, :n0], k[None, :n0], v[None, :n0], D ** -0.5),
                    mask=causal_mask(torch, n0, n0))
    bk: dict[str, Callable] = {}

    def fa4mlir_varlen():
        f = _fa4mlir("flash_attn_varlen_func")
        return lambda: _first(f(q, k, v, cu, cu, mx, mx, causal=True))
    bk["fa4mlir"] = fa4mlir_varlen
    bk["fa4mlir[compact]"] = lambda: with_varlen_grid(fa4mlir_varlen(), "compact")
    bk["fa4mlir[persistent]"] = lambda: with_varlen_grid(fa4mlir_varlen(), "persistent")
    if fa4:
        bk["fa4cute"] = lambda: lambda: _first(fa4[1](q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=mx,
                                                      max_seqlen_k=mx, causal=True))

    def torch_varlen():
        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError as e:
            raise Unsupported(f"torch has no varlen_attn ({e})") from None
        kr, vr = k.repeat_interleave(h // hk, 1), v.repeat_interleave(h // hk, 1)
        return lambda: varlen_attn(q, kr, vr, cu, cu, mx, mx, is_causal=True)
    bk["torch-varlen_attn(kv repeated)"] = torch_varlen
    if flex:
        def flex_doc():
            doc = torch.repeat_interleave(torch.arange(len(lens), device=DEV), torch.tensor(lens, device=DEV))
            bm = flex[1](lambda b, hh, qi, ki: (doc[qi] == doc[ki]) & (ki <= qi), None, None, total, total, device=DEV)
            return lambda: flex[0](q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                   block_mask=bm, enable_gqa=True)[0].transpose(0, 1)
        bk["flex(document mask)"] = flex_doc
    return [_row(torch, "prefill_varlen", bk, check, q.numel(), lens)]


def with_varlen_grid(call: Callable, grid: str) -> Callable:
    """``call`` run with FA4MLIR_VARLEN_GRID=grid (flash_attn_varlen_func reads it at every call: the
    compact grid's A/B against the default on the same tensors), the environment restored after."""
    from ..kernels.common.varlen_compact import GRID_ENV
    return with_env(call, GRID_ENV, grid)


def with_env(call: Callable, name: str, value: str) -> Callable:
    """``call`` run with the environment variable ``name`` set to ``value``, restored after each call."""
    def run():
        before = os.environ.get(name)
        os.environ[name] = value
        try:
            return call()
        finally:
            if before is None:
                del os.environ[name]
            else:
                os.environ[name] = before
    return run


def _chunked(torch, rows, fa4, flex) -> list[Row]:
    c = CHUNKED
    b, sq, sc, h, hk, page = c["batch"], c["seqlen_q"], c["seqlen_cache"], c["heads"], c["kv_heads"], c["page"]
    sk = sc + sq
    q = torch.randn(b, sq, h, D, dtype=torch.bfloat16, device=DEV)
    k = torch.randn(b, sk, hk, D, dtype=torch.bfloat16, device=DEV)
    v = torch.randn(b, sk, hk, D, dtype=torch.bfloat16, device=DEV)
    lens = torch.full((b,), sk, dtype=torch.int32, device=DEV)
    kp, vp, table = _paged(torch, k, v, page)
    n = CHECK_ROWS
    cu_q = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32, device=DEV)

    def fa4mlir_paged(**mask):
        def make():
            f = _fa4mlir("flash_attn_varlen_func")
            return lambda: _first(f(q.view(b * sq, h, D), kp, vp, cu_q, None, sq, sk, seqused_k=lens, page_table=table,
                                    causal=True, **mask)).view(b, sq, h, D)
        return make
    out = []
    if "prefill_chunked" in rows:
        check = checker(torch, lambda o: o[:1, :n], (q[:1, :n], k[:1, :sc + n], v[:1, :sc + n], D ** -0.5),
                        mask=causal_mask(torch, n, sc + n))
        bk: dict[str, Callable] = {"fa4mlir": fa4mlir_paged()}
        bk[f"fa4mlir(kvcache paged {page})"] = lambda: lambda: _first(
            _fa4mlir("flash_attn_with_kvcache")(q, kp, vp, lens, table, causal=True))
        bk["fa4mlir(contiguous)"] = lambda: lambda: _fa4mlir("flash_attn_func")(q, k, v, causal=True)
        if fa4:
            bk[f"fa4cute(paged {page})"] = lambda: lambda: _first(fa4[1](q, kp, vp, page_table=table, seqused_k=lens,
                                                                         causal=True))
            bk["fa4cute(contiguous)"] = lambda: lambda: _first(fa4[0](q, k, v, causal=True))
        if flex:
            def flex_contiguous():
                bm = flex[1](lambda bb, hh, qi, ki: ki <= qi + sc, None, None, sq, sk, device=DEV)
                return lambda: flex[0](q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=bm,
                                       enable_gqa=True).transpose(1, 2)
            bk["flex(contiguous)"] = flex_contiguous
        notes = {"fa4mlir": "flash_attn_varlen_func(page_table=): the prefill kernel's varlen variant over the pool "
                            "(page_size 64; varlen_paged.py note \"Which kernel\")",
                 f"fa4mlir(kvcache paged {page})": "flash_attn_with_kvcache: the decode kernel over the paged cache",
                 "fa4mlir(contiguous)": "flash_attn_func on the contiguous k, v (no paging)"}
        out.append(_row(torch, "prefill_chunked", bk, check, q.numel(), notes=notes))
    if "prefill_chunked_window" in rows:
        w = c["window"]
        check = checker(torch, lambda o: o[:1, :n], (q[:1, :n], k[:1, :sc + n], v[:1, :sc + n], D ** -0.5),
                        mask=causal_mask(torch, n, sc + n, w))
        bk = {"fa4mlir": fa4mlir_paged(window_size=(w, 0))}
        if fa4:
            bk[f"fa4cute(paged {page})"] = lambda: lambda: _first(fa4[1](q, kp, vp, page_table=table, seqused_k=lens,
                                                                         causal=True, window_size=(w, 0)))
        if flex:
            def flex_window():
                bm = flex[1](lambda bb, hh, qi, ki: (ki <= qi + sc) & (qi + sc - ki <= w), None, None, sq, sk,
                             device=DEV)
                return lambda: flex[0](q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=bm,
                                       enable_gqa=True).transpose(1, 2)
            bk["flex(contiguous)"] = flex_window
        notes = {"fa4mlir": "flash_attn_varlen_func(page_table=, window_size=(4096, 0)): the paged prefill kernel's "
                            "window variant (its query tiles skip the KV tiles left of the window)"}
        out.append(_row(torch, "prefill_chunked_window", bk, check, q.numel(), notes=notes))
    return out


def _dense_backends(torch, q, k, v, fa4, flex, causal_bm: Callable) -> dict[str, Callable]:
    """The dense causal row's backends: fa4mlir, FA4 CuTe, FlexAttention, SDPA cuDNN and FA2."""
    bk: dict[str, Callable] = {"fa4mlir": lambda: lambda: _fa4mlir("flash_attn_func")(q, k, v, causal=True)}
    if fa4:
        bk["fa4cute"] = lambda: lambda: _first(fa4[0](q, k, v, causal=True))
    if flex:
        bk["flex(causal)"] = lambda: _flex_call(flex, q, k, v, causal_bm())
    return {**bk, **_sdpa(torch, q, k, v)}


def _flex_call(flex, q, k, v, block_mask, score_mod=None) -> Callable:
    """The anchors' FlexAttention call on [B, S, H, D] tensors (transposed views, as they pass them)."""
    return lambda: flex[0](q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=block_mask,
                           score_mod=score_mod).transpose(1, 2)


def _causal_block_mask(torch, flex, seqlen: int) -> Callable:
    """A maker of the causal block mask, built once on first use (rows of a family share it)."""
    made: list = []

    def get():
        if not made:
            made.append(flex[1](lambda b, h, qi, ki: ki <= qi, None, None, seqlen, seqlen, device=DEV))
        return made[0]
    return get


def _s16k(torch, rows, fa4, flex) -> list[Row]:
    b, s, h, w = S16K["batch"], S16K["seqlen"], S16K["heads"], S16K["window"]
    q, k, v = (torch.randn(b, s, h, D, dtype=torch.bfloat16, device=DEV) for _ in range(3))
    n, out = CHECK_ROWS, []
    if "dense_causal_16k" in rows:
        check = checker(torch, lambda o: o[:1, s - n:], (q[:1, s - n:], k[:1], v[:1], D ** -0.5),
                        mask=causal_mask(torch, n, s))
        bk = _dense_backends(torch, q, k, v, fa4, flex, _causal_block_mask(torch, flex, s) if flex else None)
        out.append(_row(torch, "dense_causal_16k", bk, check, q.numel()))
    if "sliding_window" in rows:
        check = checker(torch, lambda o: o[:1, s - n:], (q[:1, s - n:], k[:1, s - n - w:], v[:1, s - n - w:], D ** -0.5),
                        mask=causal_mask(torch, n, n + w, w))
        bk = {"fa4mlir": lambda: lambda: _fa4mlir("flash_attn_func")(q, k, v, causal=True, window_size=(w, 0))}
        if fa4:
            bk["fa4cute"] = lambda: lambda: _first(fa4[0](q, k, v, causal=True, window_size=(w, 0)))
        if flex:
            bk["flex(sliding)"] = lambda: _flex_call(flex, q, k, v, flex[1](
                lambda bb, hh, qi, ki: (ki <= qi) & (qi - ki <= w), None, None, s, s, device=DEV))
        out.append(_row(torch, "sliding_window", bk, check, q.numel()))
    return out


def _alibi():
    """fa4mlir's built-in ALiBi score_mod function."""
    from ..kernels.common.score_mod import alibi
    return alibi


def alibi_slopes(torch, heads: int):
    """ALiBi's per-head slopes 2^(-8 (h + 1) / H) (Press et al.; H a power of two), float32."""
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / heads) for i in range(heads)], dtype=torch.float32, device=DEV)


def _s8k(torch, rows, fa4, flex) -> list[Row]:
    b, s, h, cap = S8K["batch"], S8K["seqlen"], S8K["heads"], S8K["softcap"]
    q, k, v = (torch.randn(b, s, h, D, dtype=torch.bfloat16, device=DEV) * 2 for _ in range(3))
    sink = torch.randn(h, dtype=torch.float32, device=DEV)
    n, out = CHECK_ROWS, []
    tail = (q[:1, -n:], k[:1], v[:1], D ** -0.5)
    mask = causal_mask(torch, n, s)
    take = lambda o: o[:1, -n:]   # noqa: E731
    causal_bm = _causal_block_mask(torch, flex, s) if flex else None
    fa4mlir = lambda **kw: lambda: lambda: _fa4mlir("flash_attn_func")(q, k, v, causal=True, **kw)   # noqa: E731
    if "dense_causal_8k" in rows:
        out.append(_row(torch, "dense_causal_8k", _dense_backends(torch, q, k, v, fa4, flex, causal_bm),
                        checker(torch, take, tail, mask=mask), q.numel()))
    if "softcap" in rows:
        bk = {"fa4mlir": fa4mlir(softcap=cap)}
        if fa4:
            bk["fa4cute"] = lambda: lambda: _first(fa4[0](q, k, v, causal=True, softcap=cap))
        if flex:
            bk["flex(tanh score_mod)"] = lambda: _flex_call(flex, q, k, v, causal_bm(),
                                                            lambda sc, bb, hh, qi, ki: cap * torch.tanh(sc / cap))
        out.append(_row(torch, "softcap", bk, checker(torch, take, tail, mask=mask, softcap=cap), q.numel()))
    if "sink" in rows:
        bk = {"fa4mlir": fa4mlir(sinks=sink)}
        if fa4:
            bk["fa4cute"] = lambda: lambda: _first(fa4[0](q, k, v, causal=True, learnable_sink=sink))
        # the anchors' last rows see 8k keys, beside which one sink logit weighs below bf16's error:
        # the first rows (1..256 keys) are checked too, where a missing sink shows
        head = (lambda o: o[:1, :n], (q[:1, :n], k[:1, :n], v[:1, :n], D ** -0.5), {"mask": causal_mask(torch, n, n)})
        check = checker(torch, take, tail, head, mask=mask, sink=sink)
        out.append(_row(torch, "sink", bk, check, q.numel()))
    if "alibi" in rows:
        slopes = alibi_slopes(torch, h)
        rel = torch.arange(s, device=DEV)[None, :] - torch.arange(s - n, s, device=DEV)[:, None]   # kv - q
        bias = slopes.view(h, 1, 1) * rel[None]

        # fa4mlir's built-in ALiBi score_mod (kernels/common/score_mod.py: slopes[head] * (kv_idx - q_idx)
        # added to the scaled score), compiled into the dense_causal_8k row's kernel (same tiles and knobs:
        # feature_costs compares the two)
        bk = {"fa4mlir": fa4mlir(score_mod=_fa4mlir("ScoreMod")(_alibi()), aux_tensors=[slopes])}
        if flex:
            bk["flex(alibi score_mod)"] = lambda: _flex_call(
                flex, q, k, v, causal_bm(), lambda sc, bb, hh, qi, ki: sc + slopes[hh] * (ki - qi))
        out.append(_row(torch, "alibi", bk, checker(torch, take, tail, mask=mask, bias=bias), q.numel()))
    return out


BUILDERS = {"varlen": _varlen, "chunked": _chunked, "s16k": _s16k, "s8k": _s8k}


PREFILL_TILES_ENV = "FA4MLIR_PREFILL_TILES"   # attention.plan's (not imported: the layering keeps MLIR out)
# the families whose fa4mlir row is flash_attn_func (the dense kernel FA4MLIR_PREFILL_TILES retiles)
TILED_FAMILIES = ("s16k", "s8k")


def with_tiles(make: Callable, spec: str) -> Callable:
    """The backend `make` whose calls run with FA4MLIR_PREFILL_TILES=spec (attention.plan.tile_override;
    the call cache keys on it), the environment restored after each call."""
    def made():
        return with_env(make(), PREFILL_TILES_ENV, spec)
    return made


def build_family(torch: Any, family: str, rows: list[str], *, fa4=None, flex=None, tiles=()) -> list[Row]:
    """The rows of one family on its anchors' tensors (torch.manual_seed(0) first, as the anchors).
    `tiles`: FA4MLIR_PREFILL_TILES specs, each timed as backend fa4mlir[spec] beside fa4mlir on the
    flash_attn_func rows (TILED_FAMILIES)."""
    torch.manual_seed(0)
    out = BUILDERS[family](torch, rows, fa4, flex)
    if family in TILED_FAMILIES:
        for row in out:
            if "fa4mlir" in row.backends:
                for spec in tiles:
                    row.backends[f"fa4mlir[{spec}]"] = with_tiles(row.backends["fa4mlir"], spec)
    return out
