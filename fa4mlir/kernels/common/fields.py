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


__all__ = ["ConfigError", "ConfigTypeError", "RegisterBudgetError", "check_fields", "KINDS"]
