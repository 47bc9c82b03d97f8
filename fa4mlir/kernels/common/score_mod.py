"""score_mod and mask_mod: Python functions compiled into the attention kernels (MLIR-free: the host
API and the kernel configs import it; kernels/common/score_mod_ir.py applies them to kernel Values).

FlexAttention's signatures, FA4 CuTe's `aux_tensors`:

    def alibi(score, batch, head, q_idx, kv_idx, aux_tensors):
        return fma(aux_tensors[0][head], to_f32(kv_idx - q_idx), score)

    def document(batch, head, q_idx, kv_idx, aux_tensors):
        return aux_tensors[0][q_idx].eq(aux_tensors[0][kv_idx])

    flash_attn_func(q, k, v, score_mod=alibi, aux_tensors=[slopes])            # slopes: float32 [heads]
    flash_attn_func(q, k, v, mask_mod=document, aux_tensors=[doc_ids])         # doc_ids: int32 [seqlen]

`score` is the scaled score s = q.k * softmax_scale (float32), as FlexAttention defines it; batch
and head (query head) are i32 values, q_idx and kv_idx the global row and key (i32; rows and keys
past the sequence occur and are never stored or are masked). The function is plain Python run once
at kernel build time on the DSL's values: arithmetic operators, the comparisons' methods (`.lt`,
`.eq`, `.slt` ...), `.to(...)`, and this module's select, where, exp2, log2, tanh, fma, fmax,
to_f32. q_idx and kv_idx arrive as tile base + register offset (score_mod_ir [D-index-fold]): their
float32 conversion costs an FADD per value, not an I2F, exactly while seqlen_q and seqlen_k are at
most MAX_MOD_SEQLEN (2^24 - 256; longer raise ScoreModError); score + c * to_f32(index) is two FFMAs
per score (score_mod_ir [D-affine-fold]). The optional last parameter receives the call's `aux_tensors` as in-kernel views: `t[i]` or
`t[i, j]` (float32 or int32, contiguous, 1-D or 2-D) loads one element, its index clamped to the
tensor's bounds (the sizes are launch arguments, so one kernel serves every length). A mask_mod
returns a comparison (i1): False hides the key.

Compile key [D-score-mod]: the function enters AttnConfig as a fingerprint, `fingerprint(fn)`: its
name, its source (or, where Python has none, its bytecode), its defaults, the values it captures
(closure cells and the globals it names: numbers, strings, functions, recursively, and modules
by name) and nothing else may be captured (a tensor must come through aux_tensors). A changed
function, constant or helper gives another fingerprint, so another kernel. The aux tensors' dtypes
and ranks are compile-time too (`aux_spec`). The function of a fingerprint is `registered` in this
process when it is fingerprinted; a bundle built here carries the kernel, so a machine without
MLIR finds it by the fingerprint alone.

Exact scale folding: a ScoreMod may carry `pre_scale` and `post_scale` (launch arguments, not
part of the fingerprint): the kernel applies post_scale * fn(s * pre_scale, ...), folding
softmax_scale * pre_scale into one multiply before fn and post_scale * log2(e) into the exp2's
scale (the softmax's max and LSE run in units of post_scale, exactly as the hand-written softcap
kernel does). `softcap_score_mod(c)` is tanh with pre_scale 1 / c and post_scale c: the same code as
AttnConfig.softcap's kernel.
"""
from __future__ import annotations

import dis
import hashlib
import inspect
import textwrap
import types
from dataclasses import dataclass
from typing import Any, Callable

AUX_DTYPES = ("f32", "i32")
MAX_AUX_RANK = 2
# the longest seqlen_q / seqlen_k of a score_mod or mask_mod call: the kernels' q_idx and kv_idx (rows
# and keys of a tile, up to a tile past the sequence: bm, bn <= 256) then stay below 2^24, where the
# index fold's float(base) + float(offset) is the exact float32 of the index (score_mod_ir [D-index-fold])
MAX_MOD_SEQLEN = 2**24 - 256


class ModFunctionError(TypeError):
    """A score_mod or mask_mod the kernels cannot compile: wrong arity, a captured value that is not a
    number, string, function or module, a generator or coroutine, or (at build time) Python control
    flow on an in-kernel value."""


@dataclass(frozen=True)
class ScoreMod:
    """A score_mod (or, with kind 'mask', a mask_mod) function and its launch-time scale fold (module
    note): the kernel computes post_scale * fn(s * pre_scale, ...). A plain function is a ScoreMod
    with both scales 1."""
    fn: Callable
    pre_scale: float = 1.0
    post_scale: float = 1.0
    kind: str = "score"

    @property
    def arity(self) -> int:
        return 5 if self.kind == "score" else 4

    def fingerprint(self) -> str:
        return fingerprint(self.fn, self.kind)

    def takes_aux(self) -> bool:
        return len(_positional(self.fn)) == self.arity + 1


def as_mod(fn: Any, kind: str) -> ScoreMod | None:
    """fn (None, a function or a ScoreMod) as a checked ScoreMod of `kind` ('score' or 'mask')."""
    if fn is None:
        return None
    mod = fn if isinstance(fn, ScoreMod) else ScoreMod(fn, kind=kind)
    if mod.kind != kind:
        raise ModFunctionError(f"{kind}_mod got a {mod.kind}_mod ScoreMod; pass it as {mod.kind}_mod=")
    if not callable(mod.fn):
        raise ModFunctionError(f"{kind}_mod must be a Python function, got {type(mod.fn).__name__}")
    names = _positional(mod.fn)
    if len(names) not in (mod.arity, mod.arity + 1):
        want = "(score, batch, head, q_idx, kv_idx" if kind == "score" else "(batch, head, q_idx, kv_idx"
        raise ModFunctionError(f"{kind}_mod {fn_name(mod.fn)} takes {len(names)} positional parameters {names}; it "
                               f"must take {mod.arity} {want}) or {mod.arity + 1} {want}, aux_tensors)")
    code = getattr(mod.fn, "__code__", None)
    if code is not None and code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE |
                                             inspect.CO_ASYNC_GENERATOR):
        raise ModFunctionError(f"{kind}_mod {fn_name(mod.fn)} is a generator or coroutine; it must return a value")
    for what, v in (("pre_scale", mod.pre_scale), ("post_scale", mod.post_scale)):
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and 2.0 ** -60 <= abs(v) <= 2.0 ** 60):
            raise ModFunctionError(f"ScoreMod.{what} must be a nonzero finite float of magnitude in [2^-60, 2^60], "
                                   f"got {v!r}")
    mod.fingerprint()   # checks what it captures; registers it
    return mod


def _positional(fn) -> list:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise ModFunctionError(f"cannot read the signature of {fn!r}; pass a def or lambda") from None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in sig.parameters.values()):
        raise ModFunctionError(f"{fn_name(fn)} takes *args; name its parameters (score, batch, head, q_idx, kv_idx)")
    return [p.name for p in sig.parameters.values() if p.kind in kinds and p.default is inspect.Parameter.empty]


def fn_name(fn) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


# ---- fingerprints and the registry --------------------------------------------------------------------
_REGISTRY: dict[str, Callable] = {}
_FACADE = __name__


_FP_CACHE: dict = {}      # (kind, id(fn)) -> (the objects fingerprint read, its fingerprint)
FP_CACHE_KEPT = 256


def fingerprint(fn: Callable, kind: str = "score") -> str:
    """'<name>_<16 hex>' of fn (module note [D-score-mod]): its identifier-safe name and a sha256 of
    what its generated code depends on. Registers fn under it (`registered`). Cached per function
    while every object it reads (its code, defaults, closure cells' and named globals' values,
    recursively through helper functions) is the same object: a rebinding recomputes it (the cache
    holds those objects, so no id is reused)."""
    ident = _identity(fn, set(), [])
    hit = _FP_CACHE.get((kind, id(fn)))
    if hit is not None and len(hit[0]) == len(ident) and all(a is b for a, b in zip(hit[0], ident)):
        return hit[1]
    digest = hashlib.sha256(repr((kind, _parts(fn, set()))).encode()).hexdigest()[:16]
    name = "".join(c if c.isalnum() else "_" for c in getattr(fn, "__name__", "fn"))[:24].strip("_") or "fn"
    fp = f"{name}_{digest}"
    _REGISTRY[fp] = fn
    while len(_FP_CACHE) >= FP_CACHE_KEPT:
        _FP_CACHE.pop(next(iter(_FP_CACHE)))
    _FP_CACHE[(kind, id(fn))] = (ident, fp)
    return fp


def _identity(fn, seen: set, out: list) -> list:
    """The objects fn's fingerprint reads, flat (compared by identity)."""
    out.append(fn)
    if id(fn) in seen or not isinstance(fn, types.FunctionType):
        return out
    seen.add(id(fn))
    code = fn.__code__
    out += [code, fn.__defaults__]
    g = fn.__globals__
    values = [c.cell_contents for c in fn.__closure__ or ()] + [g[v] for v in sorted(_names(code)) if v in g]
    for v in values:
        if isinstance(v, types.FunctionType) and v.__module__ != _FACADE:
            _identity(v, seen, out)
        else:
            out.append(v)
    return out


def registered(fp: str) -> Callable:
    """The function of fingerprint `fp`, fingerprinted earlier in this process; LookupError naming it
    otherwise (a kernel build needs the function itself)."""
    try:
        return _REGISTRY[fp]
    except KeyError:
        raise LookupError(f"no score_mod/mask_mod with fingerprint {fp!r} was fingerprinted in this process: "
                          f"pass the function (flash_attn_func(score_mod=...)) or import the module that "
                          f"defines it before building its kernel") from None


def _parts(fn, seen: set) -> tuple:
    if id(fn) in seen:
        return ("recursion", fn_name(fn))
    seen.add(id(fn))
    code = fn.__code__
    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):   # defined where Python keeps no source (exec, a REPL)
        text = ("bytecode", code.co_code.hex(), repr(_consts(code)))
    captured = []
    cells = zip(code.co_freevars, fn.__closure__ or ())
    for var, cell in cells:
        captured.append((var, _value(fn, var, cell.cell_contents, seen)))
    g = fn.__globals__
    for var in sorted(_names(code)):
        if var in g:   # else a builtin (abs, min): fixed, part of the source text
            captured.append((var, _value(fn, var, g[var], seen)))
    defaults = tuple(_value(fn, "default", d, seen) for d in (fn.__defaults__ or ()))
    return (fn_name(fn), text, tuple(captured), defaults)


_NAMES: dict = {}


def _names(code) -> frozenset:
    """The global names `code` (and the functions nested in it) loads: attribute names are not globals.
    Cached per code object (immutable)."""
    hit = _NAMES.get(code)
    if hit is None:
        out = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                out |= _names(c)
        hit = _NAMES[code] = frozenset(out)
    return hit


def _consts(code) -> tuple:
    return tuple(_consts(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts)


def _value(fn, var: str, v: Any, seen: set):
    if v is None or isinstance(v, (bool, int, float, str)):
        return (type(v).__name__, repr(v))
    if isinstance(v, tuple) and all(x is None or isinstance(x, (bool, int, float, str)) for x in v):
        return ("tuple", repr(v))
    if isinstance(v, types.ModuleType):
        return ("module", v.__name__)
    if isinstance(v, types.FunctionType):
        if v.__module__ == _FACADE:   # this module's DSL facade: by name
            return ("facade", v.__name__)
        return ("function", _parts(v, seen))
    if isinstance(v, types.BuiltinFunctionType):
        return ("builtin", getattr(v, "__module__", None), v.__name__)
    raise ModFunctionError(
        f"{fn_name(fn)} captures {var!r}, a {type(v).__module__}.{type(v).__name__}: a score_mod/mask_mod may "
        f"capture numbers, strings, functions and modules only (they are compiled into the kernel); pass a "
        f"tensor through aux_tensors=[...] and read it from the function's last parameter (aux_tensors[i][idx])")


SFU_HELPERS = frozenset({"tanh", "exp2", "log2"})   # the facade's helpers that issue a MUFU op per call


def calls_sfu(fn: Callable) -> bool:
    """Whether fn (or a function it captures, recursively) names one of the SFU helpers (tanh, exp2,
    log2; as a global or an attribute, e.g. `sm.tanh`): such a function adds MUFU ops per score to
    the softmax's exp2, and its kernel's default moves part of the exp2 to the FMA pipes
    (attention_sm90_config.SFU_MOD_POLY_STRIDE). A build-time reading of the code, not of what runs:
    it picks a default knob only (every choice is correct)."""
    return _calls_sfu(fn, set())


def _calls_sfu(fn, seen: set) -> bool:
    if id(fn) in seen or not isinstance(fn, types.FunctionType):
        return False
    seen.add(id(fn))

    def names(code) -> set:
        out = set(code.co_names)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                out |= names(c)
        return out
    if names(fn.__code__) & SFU_HELPERS:
        return True
    g = fn.__globals__
    values = [c.cell_contents for c in fn.__closure__ or ()] + [g[v] for v in _names(fn.__code__) if v in g]
    return any(_calls_sfu(v, seen) for v in values if isinstance(v, types.FunctionType) and v.__module__ != _FACADE)


# ---- aux tensors ---------------------------------------------------------------------------------------
def aux_spec(dtypes_ranks) -> str:
    """The compile-time part of the aux tensors, [(dtype, rank)] -> 'f32x1,i32x1' (AttnConfig.aux)."""
    return ",".join(f"{d}x{r}" for d, r in dtypes_ranks)


def parse_aux_spec(spec: str) -> list[tuple[str, int]]:
    """aux_spec's inverse: [(dtype, rank)]."""
    out = []
    for item in filter(None, spec.split(",")):
        d, _, r = item.partition("x")
        if d not in AUX_DTYPES or not r.isdigit() or not 1 <= int(r) <= MAX_AUX_RANK:
            raise ValueError(f"aux spec item {item!r}: expected <dtype>x<rank>, dtype in {AUX_DTYPES}, rank 1.."
                             f"{MAX_AUX_RANK}")
        out.append((d, int(r)))
    return out


def aux_params(spec: str) -> tuple:
    """The kernel parameters of the aux tensors, (name, kind) in PTX order: per tensor i a pointer
    aux{i} and its sizes aux{i}_n0 (, aux{i}_n1) as i32."""
    out = []
    for i, (_, rank) in enumerate(parse_aux_spec(spec)):
        out += [(f"aux{i}", "ptr"), *((f"aux{i}_n{d}", "i32") for d in range(rank))]
    return tuple(out)


# ---- the DSL facade: what a mod calls (dispatches to fa4mlir.dsl while a kernel is built) ---------
_DSL: list = []


def _dsl():
    if not _DSL:
        raise ModFunctionError("score_mod/mask_mod helpers run only while a kernel is built (on kernel values)")
    return _DSL[-1]


def select(cond, a, b):
    """a where cond else b, per element (FlexAttention's torch.where)."""
    return _dsl().select(cond, a, b)


where = select


def exp2(x):
    return _dsl().exp2(x)


def log2(x):
    return _dsl().log2(x)


def tanh(x):
    """tanh.approx (one SFU op)."""
    return _dsl().tanh(x)


def fma(a, b, c):
    return _dsl().fma(a, b, c)


def fmax(a, b):
    return _dsl().fmax(a, b)


def to_f32(x):
    """A signed i32 index (or difference of indices) as float32."""
    return x.to("f32", signed=True)


# ---- built-ins ---------------------------------------------------------------------------------------
def alibi(score, batch, head, q_idx, kv_idx, aux_tensors):
    """ALiBi (Press et al.): score + slopes[head] * (kv_idx - q_idx); aux_tensors = [slopes float32 [heads]].
    Compiles to two FFMAs per score (score_mod_ir [D-affine-fold]); `score + slope * to_f32(kv_idx -
    q_idx)` gives the same code."""
    return fma(aux_tensors[0][head], to_f32(kv_idx - q_idx), score)


def relative_bias(score, batch, head, q_idx, kv_idx, aux_tensors):
    """A learned relative-position bias: score + table[head, kv_idx - q_idx + (n - 1) / 2] with
    aux_tensors = [table float32 [heads, n]], n odd (offsets -(n-1)/2 .. (n-1)/2, clamped beyond)."""
    table = aux_tensors[0]
    return score + table[head, kv_idx - q_idx + table.shape[1].ashr(1)]


def document_mask(batch, head, q_idx, kv_idx, aux_tensors):
    """Document masking (packed sequences): a query sees the keys of its own document;
    doc_ids int32 [seqlen] the LAST of aux_tensors (so it combines with a score_mod that reads the first),
    queries and keys of one sequence (seqlen_q == seqlen_k)."""
    doc = aux_tensors[-1]
    return doc[q_idx].eq(doc[kv_idx])


def _softcap_tanh(score, batch, head, q_idx, kv_idx):
    return tanh(score)


def softcap_score_mod(cap: float) -> ScoreMod:
    """FlashAttention's softcap as a score_mod: cap * tanh(s / cap), folded as pre_scale 1 / cap and
    post_scale cap (module note), so it compiles to the hand-written softcap kernel's code and one
    kernel serves every cap."""
    cap = float(cap)
    if not (cap > 0 and cap != float("inf")):
        raise ModFunctionError(f"softcap_score_mod: the cap must be a finite number > 0, got {cap!r}")
    return ScoreMod(_softcap_tanh, pre_scale=1.0 / cap, post_scale=cap)


BUILTIN_SCORE_MODS = {"alibi": alibi, "relative_bias": relative_bias, "softcap": _softcap_tanh}
BUILTIN_MASK_MODS = {"document_mask": document_mask}

__all__ = ["ScoreMod", "ModFunctionError", "as_mod", "fingerprint", "registered", "aux_spec", "parse_aux_spec",
           "aux_params", "select", "where", "exp2", "log2", "tanh", "fma", "fmax", "to_f32", "alibi",
           "relative_bias", "document_mask", "softcap_score_mod", "BUILTIN_SCORE_MODS", "BUILTIN_MASK_MODS",
           "AUX_DTYPES", "MAX_AUX_RANK", "MAX_MOD_SEQLEN", "fn_name", "calls_sfu", "SFU_HELPERS"]
