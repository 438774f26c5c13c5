"""Affine index expressions (compiler/affine.py)."""

import pytest
from vtakit.compiler.backends.vta.affine import Affine

v = Affine.var


def norm(e):
    """Compare affine expressions independently of term order."""
    return dict(e.terms), e.const


def test_constructors():
    assert norm(v("x")) == ({"x": 1}, 0)
    assert norm(v("x", 3)) == ({"x": 3}, 0)
    assert v("x", 0) == Affine()                     # a zero coefficient is no term at all
    assert Affine.of(5) == Affine((), 5)
    assert Affine.of("y") == v("y")
    e = v("x", 2) + 1
    assert Affine.of(e) is e
    assert e.coeff("x") == 2 and e.coeff("nope") == 0
    assert e.vars == ("x",)


def test_arithmetic():
    a = v("x", 2) + v("y", -3) + 4                   # 2x - 3y + 4
    b = v("y", 3) + v("z") - 1                       # 3y + z - 1
    # sum: 2x + 0y + z + 3 -> the y term cancels and disappears
    assert norm(a + b) == ({"x": 2, "z": 1}, 3)
    assert "y" not in (a + b).vars
    # difference: 2x - 6y - z + 5
    assert norm(a - b) == ({"x": 2, "y": -6, "z": -1}, 5)
    # ints and names on either side
    assert norm(3 + a) == norm(a + 3) == ({"x": 2, "y": -3}, 7)
    assert norm(a + "w") == ({"x": 2, "y": -3, "w": 1}, 4)
    assert norm(a - "x") == ({"x": 1, "y": -3}, 4)
    # scaling
    assert norm(a * 3) == norm(3 * a) == ({"x": 6, "y": -9}, 12)
    assert norm(a * -1) == ({"x": -2, "y": 3}, -4)
    assert a * 0 == Affine()
    assert norm(a - a) == ({}, 0)


def test_substitute():
    # oh * 2 + kh - 1 with oh = 4*oh.o + oh.i  ->  8*oh.o + 2*oh.i + kh - 1
    e = v("oh", 2) + v("kh") - 1
    s = e.substitute({"oh": v("oh.o", 4) + v("oh.i")})
    assert norm(s) == ({"oh.o": 8, "oh.i": 2, "kh": 1}, -1)
    # substituting a constant folds into const: oh = 3 -> kh + 5
    assert norm(e.substitute({"oh": Affine.of(3)})) == ({"kh": 1}, 5)
    # a substitution that cancels a term: x -> y - x  in  x + x'...  (2x + y) with x = -y  ->  -y
    assert norm((v("x", 2) + v("y")).substitute({"x": v("y", -1)})) == ({"y": -1}, 0)
    # unmapped variables are kept
    assert norm(e.substitute({})) == norm(e)


def test_partial_and_eval():
    e = v("a", 3) + v("b", -2) + v("c") + 10
    p = e.partial({"a": 2, "c": 5})                   # 6 + 5 + 10 = 21, -2b left
    assert norm(p) == ({"b": -2}, 21)
    assert p.eval({"b": 4}) == 13
    assert e.eval({"a": 2, "b": 4, "c": 5}) == 6 - 8 + 5 + 10 == 13
    assert e.partial({}) == e
    assert Affine.of(7).eval({}) == 7
    with pytest.raises(KeyError):
        e.eval({"a": 1})


def test_bounds():
    # 2x + 3 over x in [1, 4]: [5, 11]
    assert (v("x", 2) + 3).bounds({"x": (1, 4)}) == (5, 11)
    # a negative coefficient swaps the ends: 5 - 3y over y in [0, 2] -> [-1, 5]
    assert (v("y", -3) + 5).bounds({"y": (0, 2)}) == (-1, 5)
    # mixed: 2x - 3y + 1, x in [-1, 2], y in [1, 3]:  min 2*-1 - 3*3 + 1 = -10, max 2*2 - 3*1 + 1 = 2
    assert (v("x", 2) - v("y", 3) + 1).bounds({"x": (-1, 2), "y": (1, 3)}) == (-10, 2)
    # a convolution input row: oh + kh - 1 with oh in [4, 5], kh in [0, 2]: [3, 6]
    assert (v("oh") + v("kh") - 1).bounds({"oh": (4, 5), "kh": (0, 2)}) == (3, 6)
    # constant only, and variables not ranged over are an error
    assert Affine.of(-4).bounds({}) == (-4, -4)
    with pytest.raises(KeyError):
        v("z").bounds({})


def test_bounds_are_tight_by_enumeration():
    import itertools
    import random
    rng = random.Random(7)
    for _ in range(50):
        names = ["p", "q", "r"]
        e = sum((v(n, rng.randint(-4, 4)) for n in names), Affine()) + rng.randint(-5, 5)
        ranges = {}
        for n in names:
            a = rng.randint(-3, 3)
            ranges[n] = (a, a + rng.randint(0, 3))
        values = [e.eval(dict(zip(names, pt)))
                  for pt in itertools.product(*(range(a, b + 1) for a, b in ranges.values()))]
        assert e.bounds(ranges) == (min(values), max(values))


def test_str():
    assert str(v("x", 2) + v("y") + 3) == "2*x + y + 3"
    assert str(Affine()) == "0"
    assert str(v("x")) == "x"
