"""Division by a runtime divisor as a multiply-high and a shift (MLIR-free: the host computes the
pair, the kernel applies it with dsl.fast_div).

For 1 <= d and 0 <= n < 2**31: with s = ceil(log2 d), p = 31 + s and m = ceil(2**p / d),
n // d == (n * m) >> p == umulhi(n, m) >> (p - 32), and m < 2**32 (d > 2**(s - 1)). d = 1 has no
such m below 2**32 and is passed as m = 0, which fast_div reads as "the quotient is n".
(Granlund and Montgomery, "Division by invariant integers using multiplication", PLDI 1994.)
"""
from __future__ import annotations

LIMIT = 1 << 31  # dividends must be below this


def divisor(d: int) -> tuple[int, int]:
    """(multiplier, shift) of divisor d for dsl.fast_div."""
    if type(d) is not int or d < 1:
        raise ValueError(f"a fast divisor must be an int >= 1, got {d!r}")
    if d >= LIMIT:
        raise ValueError(f"a fast divisor must be below 2**31, got {d}")
    if d == 1:
        return (0, 0)
    s = (d - 1).bit_length()
    p = 31 + s
    return (-(-(1 << p) // d), p - 32)


def divide(n: int, mul: int, shift: int) -> int:
    """What the kernel computes: the host twin of dsl.fast_div, for tests."""
    if not 0 <= n < LIMIT:
        raise ValueError(f"fast division needs 0 <= n < 2**31, got {n}")
    return n if mul == 0 else ((n * mul) >> 32) >> shift
