"""Linear forms over symbolic atoms: the numbers fa4-verify-pipelines reasons about (rule 7).

A ring position, a count of pipeline uses or a loop trip is a `Lin`: an integer constant plus a sum
of integer multiples of `Atom`s. An atom is a quantity the verifier does not compute but can name
and compare: a kernel-side value it cannot see through (`leaf`: n_blocks, a kernel parameter, ...),
the 0/1 value of a condition (`ind`), the iteration index of a loop (`iter`), a value a loop or a
branch carries that has no closed form (`arg`, `res`), a loop's trip count (`trip`), a counter on
entry to a loop (`entry`) or a product of two forms (`prod`). Atoms compare by `kind` and `key`;
keys of kernel values are structural (two roles that compute n_blocks the same way name one atom),
so the producer's and the consumers' counts of one pipeline can be compared.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Atom:
    kind: str                                            # leaf ind iter arg res trip entry prod
    key: tuple
    label: str = field(default="", compare=False)        # for messages
    deps: frozenset = field(default=frozenset(), compare=False)  # loops (ids) whose iteration it varies with
    parts: tuple = field(default=(), compare=False)      # prod: its two factors (Lin)

    def sort_key(self) -> tuple:
        return (self.kind, repr(self.key))


@dataclass(frozen=True)
class Lin:
    """const + sum(coeff * atom), terms sorted, no zero coefficient."""
    const: int = 0
    terms: tuple = ()

    @staticmethod
    def of(atom: Atom, coeff: int = 1) -> "Lin":
        return Lin(0, ((atom, coeff),)) if coeff else Lin()

    @staticmethod
    def _make(const: int, coeffs: dict) -> "Lin":
        terms = tuple(sorted(((a, c) for a, c in coeffs.items() if c), key=lambda t: t[0].sort_key()))
        return Lin(const, terms)

    def __add__(self, other) -> "Lin":
        other = other if isinstance(other, Lin) else Lin(int(other))
        coeffs = dict(self.terms)
        for a, c in other.terms:
            coeffs[a] = coeffs.get(a, 0) + c
        return Lin._make(self.const + other.const, coeffs)

    def __radd__(self, other) -> "Lin":
        return self + other

    def __neg__(self) -> "Lin":
        return self.scale(-1)

    def __sub__(self, other) -> "Lin":
        other = other if isinstance(other, Lin) else Lin(int(other))
        return self + other.scale(-1)

    def scale(self, k: int) -> "Lin":
        return Lin._make(self.const * k, {a: c * k for a, c in self.terms})

    @property
    def is_const(self) -> bool:
        return not self.terms

    @property
    def atoms(self) -> list:
        return [a for a, _ in self.terms]

    def coeff(self, atom: Atom) -> int:
        return dict(self.terms).get(atom, 0)

    def depends_on(self, loop) -> bool:
        return any(loop in a.deps for a in self.atoms)

    def zero_mod(self, m: int) -> bool:
        """Whether this form is 0 for every value of its atoms, modulo m (m = 0: exactly)."""
        if m == 0:
            return self.const == 0 and not self.terms
        return self.const % m == 0 and all(c % m == 0 for _, c in self.terms)

    def subst(self, mapping: dict) -> "Lin":
        """Replace atoms by forms (inside products too)."""
        if not mapping:
            return self
        out = Lin(self.const)
        for a, c in self.terms:
            if a in mapping:
                out = out + mapping[a].scale(c)
            elif a.kind == "prod":
                x, y = (p.subst(mapping) for p in a.parts)
                out = out + prod(x, y).scale(c)
            else:
                out = out + Lin.of(a, c)
        return out

    def describe(self) -> str:
        parts = []
        for a, c in self.terms:
            name = a.label or a.kind
            parts.append(name if c == 1 else f"-{name}" if c == -1 else f"{c}*{name}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


def prod(x: Lin, y: Lin) -> Lin:
    """x * y; an atom of its own unless a factor is constant."""
    if x.is_const:
        return y.scale(x.const)
    if y.is_const:
        return x.scale(y.const)
    x, y = sorted((x, y), key=repr)
    return Lin.of(Atom("prod", (x, y), f"({x.describe()})*({y.describe()})",
                       frozenset().union(*(a.deps for a in x.atoms + y.atoms)), (x, y)))


def solve_for_atom(form: Lin, value: int) -> dict:
    """A substitution that makes `form` == `value` (one atom with coefficient +-1 expressed through
    the rest), or {} when there is none."""
    for a, c in form.terms:
        if c in (1, -1) and a.kind != "prod":
            rest = form - Lin.of(a, c)
            return {a: (Lin(value) - rest).scale(c)}
    return {}


__all__ = ["Atom", "Lin", "prod", "solve_for_atom"]
