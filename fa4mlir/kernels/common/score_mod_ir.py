"""The score_mod / mask_mod hook of the attention kernels: applies the compiled-in functions
(common/score_mod.py) to a thread's S registers. Arch-neutral: a kernel passes each register's
(row, column) through its fragment layout (sm_90a: common/wgmma.py acc_row / acc_col).

Per element: s = score_mod(x * mod_scale, batch, head, q_idx, kv_idx[, aux]) (mod_scale =
softmax_scale * pre_scale, a launch argument), then s = -inf where mask_mod(...) is False. The
kernel's softmax then runs in base 2 with scale_log2 = post_scale * log2(e), so the fold of the
softmax scale into exp2 stays exact around the function. Loads from the aux tensors are issued once
per distinct index value per application (a slope per head is one load per KV block, not one per
element).

Indices as tile base + register offset [D-index-fold]: a kernel passes each element's q_idx / kv_idx
as (base, offset), the base an i32 Value shared by several of the thread's registers (its first key
of the KV block, its row) and the offset that register's column (or row) within the tile, a Python
int known when the kernel is built (the accumulator fragment layout). The function then sees `Index`
values: integer + and - on them combine bases once per application (kv_idx - q_idx: one subtraction
per row per KV block) and add offsets at build time; converting one to float32 (`to_f32`,
`.to("f32")`) is float(base) + float(offset): one I2F per distinct base, then an FADD of a constant
per distinct value, instead of an integer add and an I2F (I2FP.F32.S32 on sm_90a) per element. Any
other use (comparisons, aux indexing, *, shifts) sees the plain i32 base + offset, built once per
distinct value. Exactness: float(base) + float(offset) equals the direct conversion when |base| <
2^24 and |base + offset| <= 2^24 (every integer of that size is a float32, so neither the I2F nor
the FADD rounds); the kernels' indices stay below 2^24 while seqlen_q and seqlen_k are at most
score_mod.MAX_MOD_SEQLEN, which the host API enforces (ScoreModError beyond).

The affine fold [D-affine-fold]: the function's score is FScore, x * mod_scale not yet multiplied, an
Index's float32 is FIndex, float(base) + offset not yet added, and FIndex times a plain float32 Value
(or a number) c is FScaled, c * (float(base) + offset) not yet built. Each is emitted as written at
its first other use (`.v`), but:
  score + FScaled (or + FIndex, + a number; `+` either way, `-` of an FScaled, `fma(c, idx, score)`)
      -> fma(x, mod_scale, addend): the softmax scale stays inside one FFMA, no FMUL per score;
  FScaled -> fma(c, offset, c * float(base)), c * float(base) once per (c, base): per row base and KV
      block, so no FADD of the offset per score.
ALiBi in any spelling is then two FFMAs per score (bench prefill's kernel: 593 instructions per KV
loop iteration, 656 before, 461 without a score_mod; tests/test_score_mod_affine.py). Nothing is
named: any function whose result adds a constant-or-uniform multiple of a float32 index to the score
takes it. Rounding: the fma of the score is one rounding where x * mod_scale + y was two; c * (base +
offset) is fma(c, offset, round(c * base)), within 2^-24 (|c * base| + |result|) of the exact
product, i.e. of the size of the float32 rounding of the bias itself (the FA rule's tolerance is
orders larger). An addend that is a general Value (an aux load) is added as written (see _addend).

The bias in the accumulator [D-bias-init] (AttnConfig.score_bias_init, opt-in): ModHook.bias_form asks
once, by a trial application, whether the function is score + addends (each a number, FIndex or FScaled:
_BiasProbe / _Biased); then bias() gives each register b / mod_scale, fma(c', offset, c' * float(base))
with c' = c * (1 / mod_scale) (1 / mod_scale once per tile), which the kernel puts into S before the S
wgmma (scale-d = 1 on its first k-step), and apply(score=False) runs only the mask_mod. The kernel's
softmax runs on S = x + b / mod_scale with scale_log2 * mod_scale: its max, P and LSE are those of
s = S * mod_scale. Rounding: c' is two roundings of c / mod_scale, b' one fma, then the tensor core adds
the products onto b' (its accumulation order and rounding, not an fma's); the score is still one float32
of the biased value, so the error stays of the size of float32 rounding of |s| (interpreter FA rule:
tests/test_score_bias_init.py; the GPU's accumulation: tests/gpu/test_score_bias_init_gpu.py).
"""
from __future__ import annotations

from ... import dsl
from ...dsl import Value, const, select
from ...dsl.core import mlir_type
from . import score_mod as sm

NEG_INF = float("-inf")
_ELEM = {"f32": "f32", "i32": "i32"}


class AuxView:
    """One aux tensor inside the kernel: `view[i]` / `view[i, j]` loads an element, each index clamped
    to [0, n - 1] (signed); `view.shape` its sizes (i32 launch arguments)."""

    def __init__(self, kb, ptr: Value, shape: tuple, dtype: str, cache: dict, tile=None):
        self.kb, self.ptr, self.shape, self.dtype, self._cache = kb, ptr, tuple(shape), dtype, cache
        self._tile = tile   # ModHook's _Tile: where loads of tile-invariant indices go, and their cache

    def __getitem__(self, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != len(self.shape):
            raise sm.ModFunctionError(f"an aux tensor of rank {len(self.shape)} indexed with {len(idx)} indices")
        key = (self.ptr.v,) + tuple(id(i) if isinstance(i, Value) else ("int", i) for i in idx)
        tile = self._tile
        if tile is not None and all(not isinstance(i, Value) or id(i) in tile.invariant for i in idx):
            # every index is fixed for the tile (head, batch, a constant): load once, before the KV loop
            hit = tile.cache.get(key)
            if hit is None:
                with self.kb.before(tile.mark):
                    hit = tile.cache[key] = (self._load(idx), idx)
            return hit[0]
        hit = self._cache.get(key)
        if hit is not None:
            return hit[0]
        val = self._load(idx)
        self._cache[key] = (val, idx)   # idx kept alive: its ids stay unique for the cache's life
        return val

    def _load(self, idx) -> Value:
        flat = None
        for i, n in zip(idx, self.shape):
            i = i if isinstance(i, Value) else const(int(i))
            if i.is_float:
                raise sm.ModFunctionError("an aux tensor index must be an integer value (q_idx, kv_idx, head, ...), "
                                          "got a float")
            i = i.smax(0).smin(n - 1)
            flat = i if flat is None else flat * n + i
        return self.kb.load(self.kb.gep(self.ptr, flat.to("i64", signed=True), _ELEM[self.dtype]),
                            _ELEM[self.dtype], align=4)


class ModHook:
    """What a kernel's softmax calls: `apply(s, batch, head, rows, cols)` with s the float32 raw
    accumulator values (Q K^T), rows[i] / cols[i] each element's global query row and key (i32)."""

    def __init__(self, kb, cfg, params: dict):
        self.kb = kb
        self.score = sm.registered(cfg.score_mod) if cfg.score_mod else None
        self.mask = sm.registered(cfg.mask_mod) if cfg.mask_mod else None
        self.mod_scale = params.get("mod_scale")
        self.aux = []
        for i, (dtype, rank) in enumerate(sm.parse_aux_spec(cfg.aux)):
            self.aux.append((params[f"aux{i}"], tuple(params[f"aux{i}_n{d}"] for d in range(rank)), dtype))

        self._tile = None
        self.affine = None   # bias_form's answer, once asked

    def start_tile(self, batch: Value, head: Value) -> None:
        """Called where a query tile's work starts (before its KV loop): aux loads whose indices are
        only batch, head or constants are emitted here, once per tile, instead of once per KV block.
        Kernels that never call it load per application."""
        self._tile = _Tile(self.kb.mark(), {id(batch), id(head)}, {}, (batch, head))

    def _views(self, cache):
        return [AuxView(self.kb, ptr, shape, dtype, cache, self._tile) for ptr, shape, dtype in self.aux]

    def apply(self, s: list, batch: Value, head: Value, rows: list, cols: list, score: bool = True) -> list:
        """rows[i] / cols[i]: an i32 Value, or (base Value, offset int) for the index fold (module
        note [D-index-fold]). score=False: the mask_mod only (the score_mod's bias is in s already,
        [D-bias-init])."""
        cache: dict = {}
        views = self._views(cache)
        out = list(s)
        fold = IndexFold()
        rows, cols = [fold.index(r, nonneg=True) for r in rows], [fold.index(c, nonneg=True) for c in cols]
        sm._DSL.append(_MOD_DSL)
        try:
            if self.score is not None and score:
                takes_aux = sm.ScoreMod(self.score).takes_aux()
                for i, x in enumerate(out):
                    args = (FScore(fold, x, self.mod_scale), batch, head, rows[i], cols[i]) + \
                        ((views,) if takes_aux else ())
                    # emitted here, in element order, whatever the function left lazy
                    out[i] = Value(_check(self.score, "score", self.score(*args)).v)
            if self.mask is not None:
                takes_aux = sm.ScoreMod(self.mask, kind="mask").takes_aux()
                neg_inf = const(NEG_INF, "f32")
                for i, x in enumerate(out):
                    args = (batch, head, rows[i], cols[i]) + ((views,) if takes_aux else ())
                    out[i] = select(_check(self.mask, "mask", self.mask(*args)), x, neg_inf)
        except TypeError as e:
            if isinstance(e, sm.ModFunctionError):
                raise
            raise sm.ModFunctionError(f"{sm.fn_name(self.score or self.mask)}: {e}. A score_mod/mask_mod runs once "
                                      f"at build time on kernel values: no `if`, `and`, `or`, `min`/`max` on them "
                                      f"(use select, .lt/.eq, fmax)") from e
        finally:
            sm._DSL.pop()
        return out


    def bias_form(self, batch: Value, head: Value) -> bool:
        """Whether the score_mod is score + b with b affine in the float32 indices (numbers, FIndex,
        FScaled: module note [D-bias-init]); decided once by a trial application to index 0 (its ops, if
        the answer is no, are dead and dropped). False without a score_mod."""
        if self.affine is None:
            zero = const(0)
            self.affine = self.score is not None and \
                self._probe(batch, head, [(zero, 0)], [(zero, 0)]) is not None
        return self.affine

    def bias(self, batch: Value, head: Value, rows: list, cols: list) -> list:
        """b / mod_scale per element (rows[i] / cols[i] as in apply) for a score_mod of bias_form: the
        S accumulator's initial values, so that S = x + b / mod_scale and the softmax runs on S with
        scale_log2 * mod_scale [D-bias-init]. Per element one FFMA (fma(k', offset, k' * base), k' =
        k * (1 / mod_scale) and k' * base once per base per application)."""
        out = self._probe(batch, head, rows, cols)
        if out is None:
            raise sm.ModFunctionError(f"{sm.fn_name(self.score)}: not score + an affine index term at every element "
                                      f"(score_bias_init)")
        return out

    def _probe(self, batch, head, rows, cols):
        fold = IndexFold()
        rows, cols = [fold.index(r, nonneg=True) for r in rows], [fold.index(c, nonneg=True) for c in cols]
        takes_aux = sm.ScoreMod(self.score).takes_aux()
        views = self._views({})
        inv = self._inv_scale()
        zero, out = const(0.0, "f32"), []
        sm._DSL.append(_MOD_DSL)
        try:
            for r, c in zip(rows, cols):
                probe = _BiasProbe(fold, zero, self.mod_scale)
                res = self.score(probe, batch, head, r, c, *((views,) if takes_aux else ()))
                if not isinstance(res, _Biased) or res.score is not probe:
                    return None
                terms = [_unscaled(fold, a, inv) for a in res.addends]
                total = terms[0]
                for t in terms[1:]:
                    total = total + t
                out.append(total)
        except TypeError as e:
            if isinstance(e, sm.ModFunctionError):
                raise
            return None   # apply() reports it, with its message
        finally:
            sm._DSL.pop()
        return out

    def _inv_scale(self) -> Value:
        """1 / mod_scale, once per tile where the kernel called start_tile."""
        tile = self._tile
        if tile is None:
            return const(1.0, "f32") / self.mod_scale
        hit = tile.cache.get("inv_scale")
        if hit is None:
            with self.kb.before(tile.mark):
                hit = tile.cache["inv_scale"] = const(1.0, "f32") / self.mod_scale
        return hit


def _unscaled(fold: "IndexFold", a, inv: Value) -> Value:
    """An addend of the score (a number, FIndex, FScaled) times inv = 1 / mod_scale [D-bias-init]."""
    if isinstance(a, FScaled):
        return Value(a.index.scaled(fold.product(a.k, inv)).v)
    if isinstance(a, FIndex):
        return Value(a.scaled(inv).v)
    return fold.product(fold.coefficient(a), inv)


class IndexFold:
    """The Index values of one ModHook.apply (module note [D-index-fold]): one Index per distinct
    (base, offset), one i32 per combination of bases, one float32 per base and per value."""

    def __init__(self):
        self._index: dict = {}   # (id(base), offset) -> Index
        self._int: dict = {}     # (op, id(a), id(b)) -> (Value, a, b): bases combined once
        self._f32: dict = {}     # (id(base), signed), products, constants -> (float32 Value, what it keeps alive)

    def index(self, x, nonneg: bool = False):
        """x as an Index: (base, offset) folds; a plain Value (or an Index) is returned as it is."""
        if not isinstance(x, tuple):
            return x
        base, offset = x
        key = (id(base), int(offset))
        hit = self._index.get(key)
        if hit is None:
            hit = self._index[key] = Index(self, base, int(offset), nonneg and offset >= 0)
        return hit

    def combine(self, op: str, a: Value, b: Value) -> Value:
        key = (op, id(a), id(b))
        hit = self._int.get(key)
        if hit is None:
            hit = self._int[key] = ((a + b) if op == "add" else (a - b), a, b)
        return hit[0]

    def coefficient(self, o):
        """o as the float32 coefficient of an FScaled (a plain float32 Value, or a number as one
        constant per value), or None."""
        if isinstance(o, (int, float)) and not isinstance(o, bool):
            key = ("const", float(o))
            hit = self._f32.get(key)
            if hit is None:
                hit = self._f32[key] = (const(float(o), "f32"), None)
            return hit[0]
        return o if _plain_f32(o) else None

    def product(self, k: Value, base_f: Value) -> Value:
        """k * base_f, once per pair."""
        key = ("mul", id(k), id(base_f))
        hit = self._f32.get(key)
        if hit is None:
            hit = self._f32[key] = (k * base_f, (k, base_f))
        return hit[0]

    def negate(self, k: Value) -> Value:
        key = ("neg", id(k))
        hit = self._f32.get(key)
        if hit is None:
            hit = self._f32[key] = (k * -1.0, k)
        return hit[0]

    def base_f32(self, base: Value, signed: bool) -> Value:
        key = (id(base), signed)
        hit = self._f32.get(key)
        if hit is None:
            hit = self._f32[key] = (base.to("f32", signed=signed), base)
        return hit[0]


class Index(Value):
    """An i32 index base + offset (base a Value of the tile, offset an int of the register), made by
    IndexFold. Integer + / - with ints, Values and other Indexes stay folded; to("f32") is float(base)
    + float(offset) (module note [D-index-fold]); every other operation sees the i32 base + offset
    (built at first use, once)."""

    def __init__(self, fold: IndexFold, base: Value, offset: int, nonneg: bool):
        self.fold, self.base, self.offset, self.nonneg = fold, base, offset, nonneg
        self._v = None
        self._f32: dict = {}

    @property
    def v(self):
        if self._v is None:
            self._v = (self.base + self.offset).v if self.offset else self.base.v
        return self._v

    @property
    def type(self):
        return self.base.type

    @property
    def is_float(self) -> bool:
        return False

    def _shift(self, base: Value, offset: int, nonneg: bool = False) -> "Index":
        return self.fold.index((base, offset), nonneg)

    def __add__(self, o):
        if isinstance(o, int) and not isinstance(o, bool):
            return self._shift(self.base, self.offset + o, self.nonneg and o >= 0)
        if isinstance(o, Index):
            return self._shift(self.fold.combine("add", self.base, o.base), self.offset + o.offset,
                               self.nonneg and o.nonneg)
        if isinstance(o, Value) and str(o.type) == "i32":
            return self._shift(self.fold.combine("add", self.base, o), self.offset)
        return Value.__add__(self, o)

    __radd__ = __add__

    def __sub__(self, o):
        if isinstance(o, int) and not isinstance(o, bool):
            return self._shift(self.base, self.offset - o)
        if isinstance(o, Index):
            return self._shift(self.fold.combine("sub", self.base, o.base), self.offset - o.offset)
        if isinstance(o, Value) and str(o.type) == "i32":
            return self._shift(self.fold.combine("sub", self.base, o), self.offset)
        return Value.__sub__(self, o)

    def __rsub__(self, o):
        # Value - Index comes here first (a subclass's reflected operator wins)
        if isinstance(o, Value) and not isinstance(o, Index) and str(o.type) == "i32":
            return self._shift(self.fold.combine("sub", o, self.base), -self.offset)
        return Value.__rsub__(self, o)

    def to(self, t, *, signed: bool = False) -> Value:
        if mlir_type(t) != mlir_type("f32") or not (signed or self.nonneg):
            return Value.to(self, t, signed=signed)   # unsigned of a possibly negative value: as written
        hit = self._f32.get(signed)
        if hit is None:
            base_f = self.fold.base_f32(self.base, signed)
            hit = self._f32[signed] = FIndex(self.fold, base_f, float(self.offset))
        return hit


class _LazyF(Value):
    """A float32 value of a mod that is emitted at its first use (`.v`), so that what it is combined
    with can pick cheaper code (module note [D-affine-fold]); any other use sees the value as written."""
    _v = None

    @property
    def v(self):
        if self._v is None:
            self._v = self._emit().v
        return self._v

    @property
    def type(self):
        return mlir_type("f32")

    @property
    def is_float(self) -> bool:
        return True

    def __add__(self, o):
        if isinstance(o, FScore):   # lazy + score: the score's FMA takes this as its addend
            return o + self
        return Value.__add__(self, o)

    def __radd__(self, o):
        return Value.__radd__(self, o)


class FScore(_LazyF):
    """The score the function receives, x * mod_scale (x the raw accumulator), kept as its two
    factors: score + y is one fma(x, mod_scale, y) (one rounding, not two) and score - c * (b + k)
    adds (-c) * (b + k); every other use multiplies first, as written."""

    def __init__(self, fold: "IndexFold", x: Value, scale: Value):
        self.fold, self.x, self.scale = fold, x, scale

    def _emit(self) -> Value:
        return self.x * self.scale

    def __add__(self, o):
        if _addend(o):
            return dsl.fma(self.x, self.scale, o)
        return Value.__add__(self, o)

    __radd__ = __add__

    def __sub__(self, o):
        if isinstance(o, FScaled):
            return self + o.index.scaled(self.fold.negate(o.k))
        return Value.__sub__(self, o)


class FIndex(_LazyF):
    """float32(index) = float(base) + offset, made by Index.to (module note [D-index-fold]): emitted
    as one FADD of a constant; times a float32 Value c it is FScaled, c * base once per base and an
    fma of the constant per value [D-affine-fold]."""

    def __init__(self, fold: "IndexFold", base_f: Value, offset: float):
        self.fold, self.base_f, self.offset = fold, base_f, offset
        self._scaled: dict = {}   # id(k) -> (FScaled, k): one per coefficient (keys shared by rows)

    def _emit(self) -> Value:
        return self.base_f + self.offset if self.offset else self.base_f

    def scaled(self, k: Value) -> "FScaled":
        hit = self._scaled.get(id(k))
        if hit is None:
            hit = self._scaled[id(k)] = (FScaled(self.fold, k, self), k)
        return hit[0]

    def __mul__(self, o):
        k = self.fold.coefficient(o)
        return self.scaled(k) if k is not None else Value.__mul__(self, o)

    def __rmul__(self, o):
        k = self.fold.coefficient(o)
        return self.scaled(k) if k is not None else Value.__rmul__(self, o)


class FScaled(_LazyF):
    """k * float32(base + offset) (k a float32 Value) as fma(k, offset, k * float(base)), k * base
    made once per (k, base) [D-affine-fold]."""

    def __init__(self, fold: "IndexFold", k: Value, index: FIndex):
        self.fold, self.k, self.index = fold, k, index

    def _emit(self) -> Value:
        kb = self.fold.product(self.k, self.index.base_f)
        return dsl.fma(self.k, self.index.offset, kb) if self.index.offset else kb


class _BiasProbe(FScore):
    """The score of ModHook.bias's trial application: score + an _addend is _Biased (nothing emitted);
    any other use is FScore's."""

    def __add__(self, o):
        if _addend(o):
            return _Biased(self, (o,))
        return FScore.__add__(self, o)

    __radd__ = __add__


class _Biased(_LazyF):
    """score + addends (numbers, FIndex, FScaled) of a _BiasProbe [D-bias-init]; more such addends (+, -)
    stay in it; any other use emits the sum as written."""

    def __init__(self, score: "_BiasProbe", addends: tuple):
        self.score, self.addends, self.fold = score, addends, score.fold

    def _emit(self) -> Value:
        out = FScore.__add__(self.score, self.addends[0])
        for a in self.addends[1:]:
            out = out + a
        return out

    def __add__(self, o):
        if _addend(o):
            return _Biased(self.score, self.addends + (o,))
        return Value.__add__(self, o)

    __radd__ = __add__

    def __sub__(self, o):
        if isinstance(o, FScaled):
            return self + o.index.scaled(self.fold.negate(o.k))
        if isinstance(o, (int, float)) and not isinstance(o, bool):
            return self + (-o)
        return Value.__sub__(self, o)


def _addend(o) -> bool:
    """Whether score + o takes o as the addend of the score's fma: a Python number or an affine index
    value (FIndex, FScaled), values made from launch arguments and indices only. Any other float32
    Value (an aux tensor load, the result of an SFU op) is added as written, after the multiply: with
    the relative bias table's load as the fma's addend its D128 causal loop was 704 instructions
    instead of 768, but its D64 192 x 128 kernel (score-mods set) spilled 8 bytes (0 as written)."""
    if isinstance(o, (int, float)) and not isinstance(o, bool):
        return True
    return isinstance(o, (FIndex, FScaled))


def _plain_f32(o) -> bool:
    """A float32 Value as written (not lazy) or a Python number: an FScaled's coefficient."""
    if isinstance(o, (int, float)) and not isinstance(o, bool):
        return True
    return isinstance(o, Value) and not isinstance(o, _LazyF) and str(o.type) == "f32"


class _ModDSL:
    """The DSL as a score_mod sees it (score_mod.py's facade dispatches here while a kernel is built):
    fma(a, b, score) with a or b a float32 index is score + a * b through the lazy values
    [D-affine-fold]; every other helper is fa4mlir.dsl's."""

    def __getattr__(self, name):
        return getattr(dsl, name)

    @staticmethod
    def fma(a, b, c):
        if isinstance(c, FScore):
            for x, y in ((a, b), (b, a)):
                if isinstance(x, FIndex) and _plain_f32(y):
                    return c + x * y
        return dsl.fma(a, b, c)


_MOD_DSL = _ModDSL()


class _Tile:
    """The tile-level hoisting point of ModHook.start_tile: the mark, the ids of the tile-invariant
    index values (kept alive in `keep`) and the loads made there."""

    def __init__(self, mark, invariant: set, cache: dict, keep: tuple):
        self.mark, self.invariant, self.cache, self.keep = mark, invariant, cache, keep


def _check(fn, kind: str, v) -> Value:
    if not isinstance(v, Value):
        raise sm.ModFunctionError(f"{kind}_mod {sm.fn_name(fn)} returned {type(v).__name__} {v!r}, not a kernel value")
    t = str(v.type)
    want = "f32" if kind == "score" else "i1"
    if t != want:
        raise sm.ModFunctionError(f"{kind}_mod {sm.fn_name(fn)} returned a {t} value; it must return {want}"
                                  f"{' (a comparison such as a.eq(b))' if kind == 'mask' else ''}")
    return v


__all__ = ["ModHook", "AuxView", "Index", "IndexFold", "FScore", "FIndex", "FScaled"]
