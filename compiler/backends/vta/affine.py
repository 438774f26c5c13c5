"""Affine index expressions: sum of integer coefficients times loop variables, plus a constant.

Every index the compiler handles (tensor element indices, on-chip buffer
addresses, micro-op fields) is affine in the loop variables; that is what lets
two loops fold into a GEMM/ALU instruction's iter_out / iter_in with constant
factors, and what makes DMA regions computable by interval arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Affine:
    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def var(name: str, coeff: int = 1) -> "Affine":
        return Affine(((name, coeff),)) if coeff else Affine()

    @staticmethod
    def of(value: "Affine | int | str") -> "Affine":
        if isinstance(value, Affine):
            return value
        if isinstance(value, str):
            return Affine.var(value)
        return Affine((), int(value))

    def coeff(self, name: str) -> int:
        for n, c in self.terms:
            if n == name:
                return c
        return 0

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.terms)

    def __add__(self, other: "Affine | int | str") -> "Affine":
        other = Affine.of(other)
        merged = dict(self.terms)
        for n, c in other.terms:
            merged[n] = merged.get(n, 0) + c
        return Affine(tuple((n, c) for n, c in merged.items() if c), self.const + other.const)

    __radd__ = __add__

    def __sub__(self, other: "Affine | int | str") -> "Affine":
        return self + Affine.of(other) * -1

    def __mul__(self, k: int) -> "Affine":
        if k == 0:
            return Affine()
        return Affine(tuple((n, c * k) for n, c in self.terms), self.const * k)

    __rmul__ = __mul__

    def substitute(self, mapping: Mapping[str, "Affine"]) -> "Affine":
        """Replace variables by affine expressions (e.g. an axis by its split loops)."""
        out = Affine((), self.const)
        for n, c in self.terms:
            out = out + (mapping[n] * c if n in mapping else Affine.var(n, c))
        return out

    def eval(self, env: Mapping[str, int]) -> int:
        return self.const + sum(c * env[n] for n, c in self.terms)

    def partial(self, env: Mapping[str, int]) -> "Affine":
        """Fix the variables present in `env`, keep the others symbolic."""
        const = self.const + sum(c * env[n] for n, c in self.terms if n in env)
        return Affine(tuple((n, c) for n, c in self.terms if n not in env), const)

    def bounds(self, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
        """Inclusive (min, max) when each variable ranges over an inclusive interval."""
        lo = hi = self.const
        for n, c in self.terms:
            a, b = ranges[n]
            lo += min(c * a, c * b)
            hi += max(c * a, c * b)
        return lo, hi

    def __str__(self) -> str:
        parts = [(f"{c}*{n}" if c != 1 else n) for n, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)
