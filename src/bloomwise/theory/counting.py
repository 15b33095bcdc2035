"""Counting filters: how large the counters get, and the variable-increment counting filter's math.

    counters     Pr(max c >= i) <= m (e n k / (i m))^i <= m (e ln 2 / i)^i  ->  1.37e-15 m at i = 16
    max count    E[max c] ~ G(1 + ln(kn/m) / ln G),  G = Gamma^-1(m)             Fan et al. 2000 (Gonnet 1981)
    VI-CBF       FPR = (sum_j Pr(J = j) q_j)^k                                   Rottenstreich, Kanizo, Keslassy 2012

The variable-increment part follows Rottenstreich, Kanizo and Keslassy, *The Variable-Increment Counting Bloom
Filter* (INFOCOM 2012; ToN 22(4), 2014), in the B_h form of section VI of Rottenstreich and Keslassy, *The Bloom
Paradox*.
"""
from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import Optional, Sequence

from bloomwise._checks import check_count, check_integer, check_positive_int, check_real
from bloomwise.theory._validate import COUNTING_LAYOUTS, check_reachable
from bloomwise.theory.rates import log_binomial_pmf

__all__ = [
    "counter_overflow_bound", "expected_max_count", "inverse_gamma", "dl_increments", "DEFAULT_INCREMENTS", "bh_order",
    "dl_false_positive_rate", "vicbf_false_positive_rate", "vicbf_optimal_size",
]

# ---------------------------------------------------------------------------------------------------------
# Counting filters: how large the counters get
# ---------------------------------------------------------------------------------------------------------
def counter_overflow_bound(num_counters, num_items, num_hashes, threshold) -> float:
    """Upper bound on Pr(some counter reaches ``threshold``) after inserting n keys: ``m (e n k / (i m))^i``.

    From ``Pr(max c >= i) <= m C(nk, i) m^-i <= m (e n k / (i m))^i`` (Fan et al., *Summary Cache*, ToN 2000,
    section V-C). With ``k = (m/n) ln 2`` it is ``m (e ln 2 / i)^i``, which is ``1.37e-15 m`` at i = 16: why
    4-bit counters suffice. The value is the bound itself, so it can exceed 1 (then it says nothing).

    :param num_counters: m >= 1.
    :param num_items: n >= 0 (n = 0 gives 0).
    :param num_hashes: k > 0; a real k is allowed (the paper evaluates the bound at k = m/n ln 2).
    :param threshold: i >= 1, the count whose reaching is bounded (16 for 4-bit counters).
    :return: the bound.

    >>> m, n = 1_000_000, 100_000
    >>> round(counter_overflow_bound(m, n, m / n * math.log(2), 16) / m, 17)
    1.37e-15
    """
    m = check_integer("num_counters", num_counters, minimum=1)
    n = check_count("num_items", num_items)
    k = check_real("num_hashes", num_hashes)
    if k <= 0:
        raise ValueError(f"num_hashes must be > 0, got {num_hashes!r}")
    i = check_integer("threshold", threshold, minimum=1)
    if n == 0:
        return 0.0
    return math.exp(math.log(m) + i * (1.0 + math.log(n * k / (i * m))))


_GAMMA_ARGMIN = 1.4616321449683623  # Gamma is increasing from here on


def inverse_gamma(value) -> float:
    """The x >= 1.4616 (where Gamma is increasing) with ``Gamma(x) = value``; by bisection on ``lgamma``.

    :param value: a number >= 1 (Gamma(2) = 1).
    :return: x.

    >>> round(inverse_gamma(24), 9)   # Gamma(5) = 4! = 24
    5.0
    """
    y = check_real("value", value)
    if y < 1.0:
        raise ValueError(f"value must be >= 1, got {value!r}")
    target = math.log(y)
    low, high = _GAMMA_ARGMIN, 2.0
    while math.lgamma(high) < target:
        low, high = high, high * 2.0
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if math.lgamma(middle) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def expected_max_count(num_counters, num_items, num_hashes) -> float:
    """Asymptotic expected largest counter after n insertions of k counters each into m counters.

    ``E[max c] ~ G (1 + ln(k n / m) / ln G)``, ``G = Gamma^-1(m)`` (the O(1 / ln^2 G) term dropped), from
    Fan et al., *Summary Cache* (ToN 2000), section V-C, citing Gonnet (J. ACM 28, 1981). Asymptotic in m:
    at ``kn/m = ln 2`` it gives 7.7 for m = 2^16 and 8.8 for m = 10^6. Clamped to [1, n k] (the largest count
    is at least 1 once a key is in, and at most n k); n = 0 gives 0. The dropped term matters at practical
    sizes: for kn = m Gonnet's finer result is ``Gamma^-1(m) - 3/2 + o(1)``, and simulated maxima at
    kn/m = ln 2 are about 1.1-1.3 below this formula for m from 2^12 to 2^20 (6.4 against 7.7 at m = 2^16).

    :param num_counters: m >= 1.
    :param num_items: n >= 0.
    :param num_hashes: k >= 1.
    :return: the expected largest count.

    >>> round(expected_max_count(2 ** 16, 2 ** 16, math.log(2)), 1)
    7.7
    """
    m = check_integer("num_counters", num_counters, minimum=1)
    n = check_count("num_items", num_items)
    k = check_real("num_hashes", num_hashes)
    if k <= 0:
        raise ValueError(f"num_hashes must be > 0, got {num_hashes!r}")
    if n == 0:
        return 0.0
    g = inverse_gamma(m)
    value = g * (1.0 + math.log(k * n / m) / math.log(g))
    return min(max(value, 1.0), n * k)


# ---------------------------------------------------------------------------------------------------------
# The variable-increment counting Bloom filter
# ---------------------------------------------------------------------------------------------------------
_FEASIBLE_TABLE_LIMIT = 1 << 20   # bytes of the exact "sum of j increments" table; beyond it, min/max bounds
MAX_BH_ORDER = 8                 # decoding multiplicities for c up to this many keys per position
_MAX_MULTISETS = 100_000          # ... and at most this many multisets of one size


def check_L(L) -> int:
    if isinstance(L, bool) or not isinstance(L, int) or L < 1:
        raise ValueError(f"L must be an int >= 1, got {L!r}")
    return L


def dl_increments(L: int = 4) -> tuple[int, ...]:
    """D_L = {L, ..., 2L-1}: any sum of j >= 1 of them lies in [jL, j(2L-1)], so a - v in (0, L) is impossible.

    >>> dl_increments(4)
    (4, 5, 6, 7)
    """
    L = check_L(L)
    return tuple(range(L, 2 * L))


#: D_4 = {4, 5, 6, 7}, the literature's example and bloomwise's default.
DEFAULT_INCREMENTS = dl_increments(4)


def check_increments(increments) -> tuple[int, ...]:
    try:
        values = tuple(increments)
    except TypeError:
        raise TypeError(f"increments must be a sequence of ints, got {type(increments).__name__}") from None
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise ValueError(f"increments must be a non-empty sequence of ints >= 1, got {increments!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"increments must be distinct, got {increments!r}")
    if len(values) > 256:
        raise ValueError(f"increments may hold at most 256 values, got {len(values)}")
    return tuple(sorted(values))


def multisets(increments: tuple[int, ...], size: int):
    """(sums, multiplicities) of every multiset of `size` increments; multiplicities[i][d] counts increments[d]."""
    import numpy as np
    combos = list(itertools.combinations_with_replacement(range(len(increments)), size))
    sums = np.array([sum(increments[i] for i in combo) for combo in combos], dtype=np.int64)
    multiplicities = np.zeros((len(combos), len(increments)), dtype=np.int32)
    for row, combo in enumerate(combos):
        for i in combo:
            multiplicities[row, i] += 1
    return sums, multiplicities


def bh_order(increments: Sequence[int], limit: int = MAX_BH_ORDER, modulus: Optional[int] = None) -> int:
    """The largest h <= limit such that D is a B_h sequence: for each j <= h, all sums of j elements (a multiset)
    are distinct, so a sum of j <= h increments identifies its multiset. With ``modulus``, the sums must be
    distinct modulo it (a filter's variable counters count modulo 2^variable_bits).

    >>> bh_order((1, 2, 4)), bh_order(dl_increments(4))   # 1+1+4 = 2+2+2;  4+7 = 5+6
    (2, 1)
    """
    increments = check_increments(increments)
    order = 0
    for size in range(1, limit + 1):
        if math.comb(len(increments) + size - 1, size) > _MAX_MULTISETS:
            break
        sums, _ = multisets(increments, size)
        if modulus is not None:
            sums = sums % modulus
        if len(set(sums.tolist())) != len(sums):
            break
        order = size
    return order


# ---- analytic false-positive rate ------------------------------------------------------------------------------------
def dl_false_positive_rate(num_positions, num_hashes, num_items, L: int = 4) -> float:
    """The literature's D_L formula for the single-counter VI-CBF (no c, unbounded a), with q = 1 - 1/m:

    ``FPR = [1 - q^(nk) - ((L-1)/L) (nk/m) q^(nk-1) - ((L^2-1)/(6L^2)) C(nk, 2) m^-2 q^(nk-2)]^k``

    (Rottenstreich, Kanizo, Keslassy 2012; pyVICBF; literature.md section 6). A probe holding j other increments
    rejects a random v when j = 0, with probability (L-1)/L when j = 1 and (L^2-1)/(6L^2) when j = 2 (a - v in
    (0, L)); never when j >= 3. An upper bound for this filter, whose query also uses c.

    >>> round(dl_false_positive_rate(4000, 5, 1000), 5)
    0.01158
    """
    m, k, n = _check_mkn(num_positions, num_hashes, num_items)
    L = check_L(L)
    nk = n * k
    q = 1.0 - 1.0 / m
    inner = (1.0 - q ** nk - (L - 1) / L * (nk / m) * q ** (nk - 1)
             - (L * L - 1) / (6.0 * L * L) * (nk * (nk - 1) / 2.0) / (m * m) * q ** (nk - 2))
    return max(inner, 0.0) ** k


def _check_mkn(num_positions, num_hashes, num_items) -> tuple[int, int, int]:
    values = []
    for name, value, low in (("num_positions", num_positions, 1), ("num_hashes", num_hashes, 1),
                             ("num_items", num_items, 0)):
        if isinstance(value, bool) or not hasattr(value, "__index__") or isinstance(value, float):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
        value = value.__index__()
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
        values.append(value)
    return values[0], values[1], values[2]


@lru_cache(maxsize=128)
def _pass_probabilities(increments: tuple[int, ...], fixed_max: Optional[int], modulus: Optional[int],
                        loads: int, table_rows: Optional[int] = None) -> tuple[float, ...]:
    """q_j, j = 0..loads: Pr(a position holding j other keys admits a query with a uniform increment v).

    The position holds c = min(j, fixed_max) and a = S_j mod M, S_j a sum of j uniform draws from D
    (``modulus=None``: a = S_j). With the fixed counter it admits v when c > 0 and either c is saturated or
    a - v is (mod M) a sum of exactly c - 1 increments; for c - 1 >= ``table_rows`` the filter only tests whether
    a number congruent to a - v lies in [(c-1) min D, (c-1) max D], and so does this model.
    ``fixed_max=None`` (no fixed counter, unbounded a: the original VI-CBF test): a - v is 0 or a sum of any
    number of increments.
    """
    import numpy as np
    D = np.array(increments, dtype=np.int64)
    if modulus is not None and modulus > loads * int(D[-1]):
        wrap = None  # no sum of at most `loads` increments reaches M: residues are the sums themselves
    else:
        wrap = modulus
    size = wrap if wrap is not None else loads * int(D[-1]) + 1

    def shift(vector, d):
        if wrap is not None:
            return np.roll(vector, d)
        shifted = np.zeros_like(vector)
        shifted[d:] = vector[:size - d]
        return shifted

    exact = [np.zeros(size, dtype=bool)]  # exact[j][r]: r is (mod M) a sum of exactly j increments
    exact[0][0] = True
    for j in range(1, loads + 1):
        exact.append(np.logical_or.reduce([shift(exact[-1], d) for d in D]))
    any_count = np.logical_or.reduce(exact)
    residues = np.arange(size)

    def test_row(count: int):
        if fixed_max is None:
            return any_count
        if table_rows is None or count < table_rows:
            return exact[count]
        low, high = count * int(D[0]), count * int(D[-1])
        if wrap is None:
            return (residues >= low) & (residues <= high)
        lifted = np.where(residues >= low, residues, residues + (low - residues + wrap - 1) // wrap * wrap)
        return lifted <= high

    result = [0.0]
    dist = np.zeros(size)
    dist[0] = 1.0
    for j in range(1, loads + 1):
        dist = sum(shift(dist, d) for d in D) / len(D)
        if fixed_max is not None and j >= fixed_max:
            result.append(1.0)
            continue
        row = test_row(j - 1)
        admits = sum(shift(row.astype(float), v) for v in D) / len(D)  # admits[s] = mean over v of row[s - v]
        result.append(min(1.0, float(dist @ admits)))
    return tuple(result)


def _load_pmf(layout: str, m: int, k: int, n: int, loads: int) -> list[float]:
    """Pr(J = j), j = 0..loads, for the number J of other keys' probes at a query's position.

    classic: J ~ Bin(nk, 1/m); partitioned: J ~ Bin(n, 1/s), s = m/k the slice size.
    """
    trials, p = (n * k, 1.0 / m) if layout == "classic" else (n, k / m)
    p = min(p, 1.0)
    if p >= 1.0:
        return [1.0 if j == trials else 0.0 for j in range(loads + 1)]
    return [math.exp(log_binomial_pmf(trials, j, p)) if j <= trials else 0.0 for j in range(loads + 1)]


def vicbf_false_positive_rate(num_positions, num_hashes, num_items, *, increments=DEFAULT_INCREMENTS,
                              fixed_bits: Optional[int] = 4, variable_bits: Optional[int] = 4,
                              layout: str = "classic") -> float:
    """False-positive rate of this filter after ``num_items`` insertions (ideal hashes, binomial loads).

    ``FPR = (sum_j Pr(J = j) q_j)^k``: J ~ Bin(nk, 1/m) other keys' probes at a position (partitioned:
    Bin(n, k/m)); q_j is the probability that a position holding j of them admits a query's increment v (uniform
    in D): c >= 2^fixed_bits - 1 (saturated), or 0 < c and (a - v) mod 2^variable_bits is the residue of a sum of
    exactly c - 1 increments. q_j is exact (convolutions of the uniform distribution on D); the k probes are
    treated as independent, as in the classic formula. ``variable_bits=None``: a unbounded (exact sums).
    ``fixed_bits=None`` (with ``variable_bits=None``): no fixed counter, the original VI-CBF test (a - v is 0 or a
    sum of any number of increments); with D = D_L that is exactly :func:`dl_false_positive_rate`.

    >>> f_dl = vicbf_false_positive_rate(4000, 5, 1000, fixed_bits=None, variable_bits=None)
    >>> math.isclose(f_dl, dl_false_positive_rate(4000, 5, 1000))
    True
    >>> vicbf_false_positive_rate(4000, 5, 1000) < f_dl   # the fixed counter sharpens the test
    True
    """
    m, k, n = _check_mkn(num_positions, num_hashes, num_items)
    increments = check_increments(increments)
    if layout not in COUNTING_LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, COUNTING_LAYOUTS))}, got {layout!r}")
    fixed_max = None if fixed_bits is None else (1 << check_bits("fixed_bits", fixed_bits)) - 1
    modulus = None if variable_bits is None else 1 << check_bits("variable_bits", variable_bits)
    if fixed_max is None and modulus is not None:
        raise ValueError("without a fixed counter (fixed_bits=None) the model has an unbounded variable counter: "
                         "pass variable_bits=None")
    if n == 0:
        return 0.0
    mean = n * k / m
    needed = int(mean + 12.0 * math.sqrt(mean) + 24.0)
    loads = 32
    while loads < needed:
        loads *= 2
    if fixed_max is not None:
        loads = min(loads, fixed_max)  # q_j = 1 from fixed_max on: counted in the tail
    rows = None if fixed_bits is None or variable_bits is None else table_rows(fixed_bits, variable_bits)
    q = _pass_probabilities(increments, fixed_max, modulus, loads, rows)
    pmf = _load_pmf(layout, m, k, n, loads)
    tail = max(0.0, 1.0 - math.fsum(pmf))  # loads beyond the table: counted as admitting (an upper bound)
    per_probe = math.fsum(p * qj for p, qj in zip(pmf, q)) + tail
    return min(per_probe, 1.0) ** k


def check_bits(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 31:
        raise ValueError(f"{name} must be an int in [1, 31], got {value!r}")
    return value


def vicbf_optimal_size(num_items, fpr, *, increments=DEFAULT_INCREMENTS, fixed_bits=4, variable_bits=4,
                       layout="classic") -> tuple[int, int]:
    """The smallest ``(num_positions, num_hashes)`` whose :func:`vicbf_false_positive_rate` at ``num_items`` is
    <= ``fpr`` (ties: the smaller k). For each k, bisection on m (the rate falls as m grows). Cached.

    >>> vicbf_optimal_size(1000, 0.01)
    (3628, 5)
    """
    n = check_positive_int("num_items", num_items)
    if isinstance(fpr, bool) or not isinstance(fpr, (int, float)):
        raise TypeError(f"fpr must be a number, got {type(fpr).__name__} ({fpr!r})")
    if not 0.0 < fpr < 1.0:
        raise ValueError(f"fpr must be a probability strictly between 0 and 1, got {fpr!r}")
    if layout not in COUNTING_LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, COUNTING_LAYOUTS))}, got {layout!r}")
    fixed_bits, variable_bits = check_bits("fixed_bits", fixed_bits), check_bits("variable_bits", variable_bits)
    check_reachable(n, float(fpr), layout, "num_items", bits_per_cell=fixed_bits + variable_bits)
    return _vicbf_optimal_size(n, float(fpr), check_increments(increments), fixed_bits, variable_bits, layout)


@lru_cache(maxsize=256)
def _vicbf_optimal_size(n: int, fpr: float, increments: tuple[int, ...], fixed_bits: int, variable_bits: int,
                  layout: str) -> tuple[int, int]:
    def rate(m: int, k: int) -> float:
        return vicbf_false_positive_rate(m, k, n, increments=increments, fixed_bits=fixed_bits,
                                         variable_bits=variable_bits, layout=layout)

    best: Optional[tuple[int, int]] = None
    worse_in_a_row = 0
    for k in range(1, 33):
        low, high = (k if layout == "partitioned" else 1), max(k, n)
        while rate(high, k) > fpr:
            low, high = high, high * 2
            if high > 2 ** 48:
                raise ValueError(f"fpr {fpr!r} needs more than 2**48 positions")
        while low < high:  # smallest m in [low, high] with rate(m) <= fpr
            middle = (low + high) // 2
            if rate(middle, k) <= fpr:
                high = middle
            else:
                low = middle + 1
        if best is None or high < best[0]:
            best, worse_in_a_row = (high, k), 0
        else:
            worse_in_a_row += 1
            if worse_in_a_row >= 3:
                break
    return best


def table_rows(fixed_bits: int, variable_bits: int) -> int:
    """Rows of the exact feasibility table: j = c - 1 for unsaturated c, within 1 MiB."""
    return min((1 << fixed_bits) - 2, _FEASIBLE_TABLE_LIMIT >> variable_bits)
