"""TF32's three rounding rules (``reference.tf32``), bit for bit against their definitions worked out in exact
rational arithmetic: over every float32 class (zeros, subnormals, normals, the largest finite, infinities,
NaNs), the ties between two TF32 values, and the values whose rounding carries into the exponent or past the
largest TF32 value."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference import precision, tf32

MAX_TF32 = Fraction(2**11 - 1, 2**10) * 2**127  # (2 - 2**-10) * 2**127


def defined(bits: int, rule: str) -> int:
    """The bits of the TF32 value ``rule`` makes of the float32 of ``bits``, from the definitions: the two TF32
    magnitudes around |x| (``a`` toward zero, ``b`` one TF32 ulp above; past the largest, an infinity), then
    ``a`` (truncate), the nearer (both rounding rules), a tie to ``a`` or ``b`` whose last kept bit is 0 (rne)
    or to ``b`` (rna)."""
    x = float(np.array([bits], np.uint32).view(np.float32)[0])
    sign = -1 if bits >> 31 else 1
    if math.isnan(x):
        return (bits & 0x80000000) | 0x7FC00000
    if math.isinf(x) or x == 0:
        return bits
    magnitude = Fraction(abs(x))
    exponent = max(math.frexp(abs(x))[1] - 1, -126)  # |x| in [2**e, 2**(e+1)); subnormals: e = -126
    ulp = Fraction(2) ** (exponent - 10)
    a = (magnitude // ulp) * ulp
    b = a + ulp
    if rule == "truncate" or magnitude == a:
        chosen = a
    elif magnitude - a != b - magnitude:
        chosen = a if magnitude - a < b - magnitude else b
    else:
        chosen = b if rule == "rna" or (a / ulp) % 2 == 1 else a
    value = math.inf if chosen > MAX_TF32 else float(chosen)
    return int(np.array([sign * value], np.float32).view(np.uint32)[0])


def rounded(bits: list[int], rule: str) -> list[int]:
    return tf32.RULES[rule](np.array(bits, np.uint32).view(np.float32)).view(np.uint32).tolist()


# High parts (sign, exponent, the 10 kept mantissa bits) over every class, each with low parts that are exact,
# just under a tie, a tie, just over it, and all ones (a carry into the next TF32 value, the exponent, or past
# the largest finite value).
HIGHS = [sign << 31 | exponent << 23 | kept << 13 for sign in (0, 1) for exponent in (0, 1, 127, 200, 254)
         for kept in (0, 1, 0x155, 0x3FE, 0x3FF)]
LOWS = [0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF]
SPECIALS = [0x00000000, 0x80000000, 0x00000001, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FEFFF, 0x7F7FF000,
            0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00000, 0xFFFFFFFF, 0x7FBFFFFF]


@pytest.mark.parametrize("rule", sorted(tf32.RULES))
def test_each_rule_is_its_definition_on_every_class_tie_and_carry(rule):
    cases = [h | low for h in HIGHS for low in LOWS] + SPECIALS
    assert rounded(cases, rule) == [defined(b, rule) for b in cases]


@given(bits=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64), rule=st.sampled_from(sorted(tf32.RULES)))
def test_each_rule_is_its_definition_on_any_float32(bits, rule):
    assert rounded(bits, rule) == [defined(b, rule) for b in bits]


def test_the_rules_part_ways_where_they_should_and_keep_what_tf32_holds():
    """The harness's own check of the definitions: a tie, a value above it, one rounded past the largest TF32
    value; a TF32 value and a NaN are left so, by every rule; float64 is refused, not read as bits."""
    tie, above = 1 + 2**-11, 1 + 2**-11 + 2**-20
    for rule, want in (("truncate", (1.0, 1.0)), ("rne", (1.0, 1 + 2**-10)), ("rna", (1 + 2**-10, 1 + 2**-10))):
        got = tf32.RULES[rule](np.array([tie, above], np.float32))
        assert got.tolist() == list(want), rule
        assert tf32.RULES[rule](np.float32(3.5)) == np.float32(3.5) and np.isnan(tf32.RULES[rule](np.float32("nan")))
    assert np.isinf(tf32.round_nearest_even(np.float32(np.finfo(np.float32).max)))
    assert tf32.truncate(np.float32(np.finfo(np.float32).max)) == np.float32(float(MAX_TF32))
    with pytest.raises(TypeError, match="x must be float32"):
        tf32.truncate(np.ones(2))
    assert precision.TF32_ROUNDING in tf32.RULES
