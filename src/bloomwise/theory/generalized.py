"""Error rates of the Generalized Bloom filter (Laufer, Velloso, Duarte, *Generalized Bloom Filters*).

A GBF has m bits and two families of hash functions: at each insertion, k0 functions g_1..g_k0 reset their bits to 0,
then k1 functions h_1..h_k1 set theirs to 1 (a position in both ends at 0: reset wins). A query is positive iff
every g_i(x) bit is 0 and every h_j(x) bit is 1. Later insertions can overwrite an element's bits, so false
negatives are possible as well as false positives.

Model (independent, uniform hash functions; the paper's analysis). For one bit and one insertion::

    r = 1 - (1 - 1/m)^k0                       the insertion resets the bit
    s = (1 - 1/m)^k0 (1 - (1 - 1/m)^k1)        it sets the bit (and does not reset it)
    u = 1 - r - s                              it leaves the bit alone

After n insertions into a vector whose bits start at 1 with probability b1::

    q1 = s / (r + s) (1 - u^n) + b1 u^n,  q0 = 1 - q1
    FPR = q0^k0 q1^k1

An element followed by j later insertions keeps its reset bit at 0 unless one of them sets it, and its set bit at 1
unless one of them resets it: with ``a_j = (1 - u^j) / (r + s)``,
``FN_j = 1 - (1 - s a_j)^k0 (1 - r a_j)^k1``, and the false-negative rate of the set is the mean of FN_j over
j = 0..n-1 (the element inserted j-th from the end). Both treat the k0 + k1 probes of a query as independent; the
reset-wins rule within one key changes them by O((k0 k1) / m).
"""
from __future__ import annotations

import math

__all__ = ["gbf_bit_probabilities", "gbf_false_positive_rate", "gbf_false_negative_rate", "gbf_error_rates",
           "gbf_optimal_num_reset_hashes"]


def _check(num_bits, num_items, num_set, num_reset, initial_ones=0.0):
    for name, value, low in (("num_bits", num_bits, 1), ("num_items", num_items, 0),
                             ("num_set_hashes", num_set, 0), ("num_reset_hashes", num_reset, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if num_set + num_reset < 1:
        raise ValueError("num_set_hashes + num_reset_hashes must be >= 1")
    if not isinstance(initial_ones, (int, float)) or not 0.0 <= initial_ones <= 1.0:
        raise ValueError(f"initial_ones must be a fraction in [0, 1], got {initial_ones!r}")


def gbf_bit_probabilities(num_bits: int, num_set_hashes: int, num_reset_hashes: int) -> tuple[float, float, float]:
    """``(r, s, u)``: the chance that one insertion resets, sets, or leaves alone a given bit.

    >>> [round(x, 6) for x in gbf_bit_probabilities(1000, 3, 0)]
    [0.0, 0.002997, 0.997003]
    """
    _check(num_bits, 0, num_set_hashes, num_reset_hashes)
    keep = 1.0 - 1.0 / num_bits
    r = -math.expm1(num_reset_hashes * math.log1p(-1.0 / num_bits)) if num_bits > 1 else float(num_reset_hashes > 0)
    s = keep ** num_reset_hashes * (1.0 - keep ** num_set_hashes) if num_bits > 1 else (
        0.0 if num_reset_hashes else float(num_set_hashes > 0))
    return r, s, max(0.0, 1.0 - r - s)


def _ones_fraction(m, n, k1, k0, b1):
    r, s, u = gbf_bit_probabilities(m, k1, k0)
    un = u ** n
    return (s / (r + s) * (1.0 - un) if r + s > 0 else 0.0) + b1 * un


def gbf_false_positive_rate(num_bits: int, num_items: int, num_set_hashes: int, num_reset_hashes: int, *,
                            initial_ones: float = 0.0) -> float:
    """``q0^k0 q1^k1``: the chance that a key never inserted tests positive after ``num_items`` insertions.

    With k0 = 0 and an all-zero start this is the classic Bloom filter's ``(1 - (1 - 1/m)^(k n))^k``:

    >>> round(gbf_false_positive_rate(13312, 3328, 3, 0), 6)
    0.146903
    >>> round(gbf_false_positive_rate(13312, 3328, 3, 1), 6)
    0.056038
    """
    _check(num_bits, num_items, num_set_hashes, num_reset_hashes, initial_ones)
    q1 = _ones_fraction(num_bits, num_items, num_set_hashes, num_reset_hashes, float(initial_ones))
    return (1.0 - q1) ** num_reset_hashes * q1 ** num_set_hashes


def gbf_false_negative_rate(num_bits: int, num_items: int, num_set_hashes: int, num_reset_hashes: int) -> float:
    """The mean over the n inserted keys of ``1 - (1 - s a_j)^k0 (1 - r a_j)^k1``, ``a_j = (1 - u^j) / (r + s)``.

    >>> gbf_false_negative_rate(13312, 3328, 3, 0)   # no reset functions: no false negatives
    0.0
    >>> round(gbf_false_negative_rate(13312, 3328, 3, 1), 4)
    0.4383
    """
    _check(num_bits, num_items, num_set_hashes, num_reset_hashes)
    if num_items == 0:
        return 0.0
    r, s, u = gbf_bit_probabilities(num_bits, num_set_hashes, num_reset_hashes)
    if r + s == 0:
        return 0.0
    total = 0.0
    uj = 1.0
    for _ in range(num_items):  # j = 0 .. n-1 later insertions
        a = (1.0 - uj) / (r + s)
        total += 1.0 - (1.0 - s * a) ** num_reset_hashes * (1.0 - r * a) ** num_set_hashes
        uj *= u
    return total / num_items


def gbf_error_rates(num_bits: int, num_items: int, num_set_hashes: int, num_reset_hashes: int, *,
                    initial_ones: float = 0.0) -> tuple[float, float]:
    """``(fpr, fnr)`` of a GBF after ``num_items`` insertions (see the module's formulas)."""
    return (gbf_false_positive_rate(num_bits, num_items, num_set_hashes, num_reset_hashes,
                                    initial_ones=initial_ones),
            gbf_false_negative_rate(num_bits, num_items, num_set_hashes, num_reset_hashes))


def gbf_optimal_num_reset_hashes(num_bits: int, num_items: int, num_set_hashes: int, num_nonmembers: float,
                                 alpha: float, *, candidates=None) -> tuple[int, float]:
    """The k0 that minimises the expected cost ``num_nonmembers FPR + alpha num_items FNR``, and that cost.

    :param candidates: the k0 tried (default 1..k1-1, the Bloom-paradox paper's range; k1 = 1 tries k0 = 1).

    >>> gbf_optimal_num_reset_hashes(13312, 3328, 3, 16771840, 100)[0]
    2
    """
    if candidates is None:
        candidates = range(1, max(2, num_set_hashes))
    best = None
    for k0 in candidates:
        fpr, fnr = gbf_error_rates(num_bits, num_items, num_set_hashes, k0)
        cost = num_nonmembers * fpr + alpha * num_items * fnr
        if best is None or cost < best[1]:
            best = (k0, cost)
    if best is None:
        raise ValueError("candidates must not be empty")
    return best
