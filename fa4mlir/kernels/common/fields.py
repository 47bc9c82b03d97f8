"""Typed config fields and the errors a kernel config raises (MLIR-free: the configs import it).

Every kernel config is a frozen dataclass whose annotations say what each field holds (bool, int,
float or str). `check_fields` checks every field against its annotation before anything else of
the config's validate() runs, and fa4mlir.compiler validates a config before it computes its
cache key: a flag given 'no' (which Python reads as true) or an int field given 128.0 (which
reached the PTX as '128.0' and died in ptxas) is refused here, naming the field.
"""
from __future__ import annotations

import math
from dataclasses import fields


class ConfigError(ValueError):
    """A kernel config the kernel cannot be built for; the message names the field, what it got
    and what it takes."""


class ConfigTypeError(ConfigError, TypeError):
    """A config field of the wrong type: a bool flag given a string or a number, an int field given
    a float, a number field given a string."""


class RegisterBudgetError(ConfigError):
    """The tiles need more registers per thread than the config's setmaxnreg budget gives: ptxas
    would spill them to local memory without a word, or stop (C7602, naming no field)."""


def _is_bool(v) -> bool:
    return isinstance(v, bool)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, float) or _is_int(v)) and math.isfinite(v)


def _is_str(v) -> bool:
    return isinstance(v, str)


# annotation -> (check, what the message says the field takes)
KINDS = {
    "bool": (_is_bool, "a bool (True or False)"),
    "int": (_is_int, "an int"),
    "float": (_is_number, "a finite number (int or float)"),
    "str": (_is_str, "a str"),
}


def check_fields(cfg, choices: dict | None = None) -> None:
    """Raise ConfigTypeError for the first field of `cfg` (a dataclass) whose value is not of its
    annotated kind (KINDS); `choices` (field -> allowed values) only adds them to the message. The
    values themselves (ranges, members of a set) are the config's own validate()'s to check."""
    for f in fields(cfg):
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        if kind not in KINDS:
            raise TypeError(f"{type(cfg).__name__}.{f.name}: annotation {kind!r} has no check "
                            f"(fields are one of {', '.join(KINDS)})")
        check, takes = KINDS[kind]
        value = getattr(cfg, f.name)
        if not check(value):
            allowed = f", one of {tuple(choices[f.name])}" if choices and f.name in choices else ""
            raise ConfigTypeError(f"{type(cfg).__name__}.{f.name} must be {takes}{allowed}, got {value!r} "
                                  f"({type(value).__name__})")


# Variant fields. A kernel config's variant fields are those a bundle lookup must match exactly (an entry
# with one set holds every other item of the plain kernel's key): the fields key() leaves out at their
# defaults (added after kernels were shipped, so those kept their keys), and fields in every key since
# they were added (older bundles' keys lack them). Each config module declares its own, once, with
# `field_defaults`; attention.plan (the attention kernel's) and bench/sanitize.py (the union over the
# kernels it looks up, `merge_variant_fields`) derive theirs from those declarations.


def field_defaults(cls, names) -> dict:
    """{name: the dataclass ``cls``'s default for it} for each of ``names``, in the class's field order (what
    a key that lacks the field means); ValueError for a name that is not a field of ``cls``."""
    defaults = {f.name: f.default for f in fields(cls)}
    unknown = [n for n in names if n not in defaults]
    if unknown:
        raise ValueError(f"{cls.__name__} has no field(s) {unknown}; its fields: {', '.join(defaults)}")
    return {n: d for n, d in defaults.items() if n in set(names)}


def key_leaving_out(cfg, left_out: dict) -> dict:
    """``cfg``'s fields by name, each of ``left_out`` (field -> default) only where it differs from its
    default there: the key of a kernel built before the field existed is unchanged."""
    return {n: v for n, v in cfg.__dict__.items() if n not in left_out or v != left_out[n]}


def merge_variant_fields(*tables: dict) -> dict:
    """The union of several configs' variant fields (field -> default); ValueError where two give one
    field different defaults (an absent field would then mean two things)."""
    out: dict = {}
    for table in tables:
        for name, default in table.items():
            if name in out and out[name] != default:
                raise ValueError(f"variant field {name!r} has two defaults: {out[name]!r} and {default!r}")
            out[name] = default
    return out


__all__ = ["ConfigError", "ConfigTypeError", "RegisterBudgetError", "check_fields", "KINDS", "field_defaults",
           "key_leaving_out", "merge_variant_fields"]
