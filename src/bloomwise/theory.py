"""All of bloomwise's math: false-positive rates per layout, sizing, the integer k, plan(), the Summary Cache
tables, counter bounds and fill-based estimates.

Every structure, the command line and the paradox code call these functions and nothing else. They are pure
(``math`` only: importing this module loads neither numpy nor anything else heavy), validate their inputs, and
say in their docstrings which formula they compute and where it comes from.

Cheat sheet (m = bits, n = keys, k = hashes, b = m/n bits per key, p = false-positive rate)::

    classic      p = (1 - (1 - 1/m)^(kn))^k  ~  (1 - e^(-kn/m))^k               Bloom 1970; Fan et al. 2000
    partitioned  p = prod_i (1 - (1 - 1/s_i)^n),  s_i = |[i*m//k, (i+1)*m//k)|  one probe per slice
    blocked      p = sum_j Bin(j; n, 1/B) prod_l P_l(j)    B = m/512 blocks of eight 64-bit lanes, j keys in
                   one-probe lane: P = 1 - (63/64)^j        the query's block (split block; k <= 8: one probe
                   two-probe lane: P = (63/64)(1 - 2 (63/64)^(2j) + (62/64)^(2j)) + (1/64)(1 - (63/64)^(2j))
                                                            per lane, k > 8: two in k - 8 lanes)
    best real k  k* = b ln 2, then p = 2^-k* = 0.6185^b                           Fan et al. 2000
    integer k    the better of floor(b ln 2) and ceil(b ln 2) by the FP formula   seed 003 (never 0)
    sizing       m = -n ln p / (ln 2)^2 = 1.44 n log2(1/p);  limit: log2(1/p) bits per key
    counters     Pr(max c >= i) <= m (e n k / (i m))^i <= m (e ln 2 / i)^i  ->  1.37e-15 m at i = 16
    max count    E[max c] ~ G(1 + ln(kn/m) / ln G),  G = Gamma^-1(m)             Fan et al. 2000 (Gonnet 1981)
    count        n ~ -(m/k) ln(1 - X/m)  from X bits set                          Swamidass & Baldi 2007

The positions each layout uses are those of docs/architecture.md ("From the hash to positions"); the formulas
above treat the hashes as ideal (uniform, independent), which the Monte-Carlo tests check against bloomwise's
own filters.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable, NamedTuple, Optional, Sequence

__all__ = [
    "LAYOUTS",
    "BLOCK_BITS",
    "MAX_BLOCKED_HASHES",
    "false_positive_rate",
    "optimal_num_hashes",
    "optimal_num_hashes_real",
    "optimal_size",
    "bits_per_item",
    "Plan",
    "plan",
    "FpTableCell",
    "FpTableRow",
    "TableDifference",
    "fp_table",
    "fp_table_differences",
    "format_fp_tables",
    "Figure4Data",
    "figure4_data",
    "counter_overflow_bound",
    "expected_max_count",
    "inverse_gamma",
    "CountEstimate",
    "approx_count",
    "fpr_from_fill",
    "fill_moments",
]

#: The bit layouts bloomwise implements (docs/architecture.md).
LAYOUTS = ("classic", "partitioned", "blocked")
#: Size of one block of the blocked (split block) layout: eight 64-bit lanes.
BLOCK_BITS = 512
#: The blocked layout puts at most two probes in each of its eight lanes.
MAX_BLOCKED_HASHES = 16

_LANES = 8
_LANE_BITS = 64
_LN2 = math.log(2.0)
_LOG_LANE_MISS = math.log1p(-1.0 / _LANE_BITS)  # ln(63/64): one probe misses a given bit of its lane
_MIXTURE_TOLERANCE = 1e-13  # relative truncation error of the blocked layout's sum over block loads
_CONSISTENCY_SLACK = 0.01  # plan(): a given p is met if the FPR is at most p * (1 + slack)


# ---------------------------------------------------------------------------------------------------------
# Input validation: every public function names the parameter and its value.
# ---------------------------------------------------------------------------------------------------------
def _integer(name: str, value, minimum: int = 0) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got the bool {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})") from None
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def _real(name: str, value, minimum: float = 0.0) -> float:
    """A finite real number >= minimum (ints stay exact: they are converted to float only here)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got the bool {value!r}")
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a number, got the string {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})") from None
    if math.isnan(number) or math.isinf(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {value!r}")
    return number


def _count(name: str, value) -> float:
    """A number of items: a non-negative int (kept exact), or a non-negative finite real (an expected count)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number of items, got the bool {value!r}")
    try:
        operator.index(value)
    except TypeError:
        return _real(name, value)
    return _integer(name, value)


def _probability(name: str, value) -> float:
    number = _real(name, value, minimum=-math.inf)
    if not 0.0 < number < 1.0:
        raise ValueError(f"{name} must be a probability strictly between 0 and 1, got {value!r}")
    return number


def _layout(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"layout must be one of {', '.join(LAYOUTS)}; got {value!r} ({type(value).__name__})")
    if value not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}; got {value!r}")
    return value


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def _geometry(layout: str, num_bits, num_hashes) -> tuple[int, int]:
    """Validate (m, k) for a layout: m >= 1, k >= 1; partitioned k <= m; blocked m % 512 == 0, k <= 16."""
    m = _integer("num_bits", num_bits, minimum=1)
    k = _integer("num_hashes", num_hashes, minimum=1)
    if layout == "partitioned" and k > m:
        raise ValueError(f"num_hashes must be <= num_bits for the partitioned layout (one slice of at least "
                         f"one bit per hash); got num_hashes={k}, num_bits={m}")
    if layout == "blocked":
        _blocked_bits(m)
        if k > MAX_BLOCKED_HASHES:
            raise ValueError(f"num_hashes must be between 1 and {MAX_BLOCKED_HASHES} for the blocked layout "
                             f"(at most two probes per 64-bit lane); got {k}")
    return m, k


def _blocked_bits(m: int) -> int:
    if m % BLOCK_BITS:
        raise ValueError(f"num_bits must be a multiple of {BLOCK_BITS} for the blocked layout (512-bit blocks); "
                         f"got {m} (the next multiple is {_round_up(m, BLOCK_BITS)})")
    return m // BLOCK_BITS


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


# ---------------------------------------------------------------------------------------------------------
# False-positive rate per layout
# ---------------------------------------------------------------------------------------------------------
def _fill(size: float, throws: float) -> float:
    """Probability that a given one of `size` bits is set after `throws` uniform throws: 1 - (1 - 1/size)^throws."""
    if throws <= 0:
        return 0.0
    if size <= 1:
        return 1.0
    return -math.expm1(throws * math.log1p(-1.0 / size))


def _pow(base: float, exponent: float) -> float:
    """base**exponent for base in [0, 1] without 0**0 surprises (0**0 = 1, as the formulas need)."""
    if exponent == 0:
        return 1.0
    return 0.0 if base <= 0.0 else math.exp(exponent * math.log(base))


def _classic_fpr(m: int, n: float, k: int, exact: bool) -> float:
    if n == 0:
        return 0.0
    fill = _fill(m, k * n) if exact else -math.expm1(-k * n / m)
    return _pow(fill, k)


def _slice_sizes(m: int, k: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Slices [i*m//k, (i+1)*m//k) have sizes m//k (k - m%k of them) and m//k + 1 (m%k of them)."""
    small = m // k
    larger = m % k
    return (small, k - larger), (small + 1, larger)


def _partitioned_fpr(m: int, n: float, k: int, exact: bool) -> float:
    if n == 0:
        return 0.0
    log_fpr = 0.0
    for size, count in _slice_sizes(m, k):
        if count == 0:
            continue
        fill = _fill(size, n) if exact else -math.expm1(-n / size)
        if fill <= 0.0:
            return 0.0
        log_fpr += count * math.log(fill)
    return math.exp(log_fpr)


def _lane_probes(k: int) -> tuple[int, int]:
    """(lanes with one probe, lanes with two probes) of the blocked layout: probe i goes to lane i mod 8."""
    double = max(0, k - _LANES)
    return min(k, _LANES) - double, double


_BOTH_MISS = (1.0 - 2.0 / _LANE_BITS) ** 2  # (62/64)^2: one key's two probes both miss two given bits


def _double_lane_pass(x: float, both_miss: float, coincident: bool) -> float:
    """P(a query's two probes in a lane are set | j keys in the block), x = (63/64)^j, both_miss = (62/64)^(2j).

    Each key throws two probes into the lane, so a given bit is unset with probability x^2 and two given bits
    with probability both_miss. The query's two probes land on the same bit with probability 1/64:
    ``(63/64) (1 - 2 x^2 + both_miss) + (1/64) (1 - x^2)``. Without that case (``coincident=False``) the
    factor is the textbook ``(1 - x^2)^2``.
    """
    y = x * x
    if not coincident:
        return (1.0 - y) * (1.0 - y)
    return (1.0 - 1.0 / _LANE_BITS) * (1.0 - 2.0 * y + both_miss) + (1.0 - y) / _LANE_BITS


_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _stirling_error(x: float) -> float:
    """ln(x!) - [(x + 1/2) ln x - x + ln(2 pi)/2], accurately (Loader 2000, "Fast and accurate computation of
    binomial probabilities")."""
    if x < 16.0:  # x >= 1 here: lgamma is small, so it is accurate
        return math.lgamma(x + 1.0) - (x + 0.5) * math.log(x) + x - _HALF_LOG_2PI
    inverse_square = 1.0 / (x * x)
    return (1.0 / 12 - inverse_square * (1.0 / 360 - inverse_square * (1.0 / 1260 - inverse_square / 1680))) / x


def _deviance(x: float, mean: float) -> float:
    """x ln(x / mean) + mean - x without cancellation when x is close to mean (Loader's bd0)."""
    if x == 0.0:
        return mean
    if abs(x - mean) < 0.1 * (x + mean):
        v = (x - mean) / (x + mean)
        total = (x - mean) * v
        power = 2.0 * x * v
        v2 = v * v
        for i in range(1, 1000):
            power *= v2
            term = total + power / (2 * i + 1)
            if term == total:
                return total
            total = term
        return total  # pragma: no cover
    return x * math.log(x / mean) + mean - x


def _log_binomial_pmf(n: int, j: int, q: float) -> float:
    """ln P(Binomial(n, q) = j), accurate to ~1e-15 absolute even for n = 10^10 (saddle-point form, Loader 2000)."""
    if j == 0:
        return n * math.log1p(-q)
    if j == n:
        return n * math.log(q)
    return (_stirling_error(n) - _stirling_error(j) - _stirling_error(n - j)
            - _deviance(j, n * q) - _deviance(n - j, n * (1.0 - q))
            + 0.5 * math.log(n / (2.0 * math.pi * j * (n - j))))


def _log_poisson_pmf(j: int, lam: float) -> float:
    """ln P(Poisson(lam) = j), in the same saddle-point form."""
    if j == 0:
        return -lam
    return -_stirling_error(j) - _deviance(j, lam) - 0.5 * math.log(2.0 * math.pi * j)


def _blocked_mixture(n: int | float, num_blocks: int, ks: Sequence[int], poisson: bool,
                     coincident: bool = True) -> list[float]:
    """E_J[P(a query passes | J)] for each k, J ~ Binomial(n, 1/B) (or Poisson(n/B)): the blocked FPR.

    J is the number of keys in the query's block. Given J = j, lanes are independent: a one-probe lane passes
    with probability ``1 - x``, ``x = (63/64)^j``, a two-probe lane with :func:`_double_lane_pass`. The sum runs
    from the mode of J outwards, the pmf taken in Loader's saddle-point form (accurate for n = 10^10). Both the
    pmf and the pass probability are log-concave in j, so the terms are unimodal and the ratio of consecutive
    terms keeps shrinking: once a term is smaller than the one before, the rest of that tail is at most
    ``term * r / (1 - r)``, and a direction stops when that bound is below 1e-13 of the sum for every k. When
    the load's standard deviation is large (over 64 keys: an overloaded filter) the loads are sampled every
    ``stride = sd / 32`` (a Riemann sum of a smooth bell-shaped function, accurate far beyond 1e-13).
    """
    lanes = [_lane_probes(k) for k in ks]
    count = len(lanes)
    if num_blocks == 1 and not poisson:
        j = int(n)
        if j == 0:
            return [0.0] * count
        x = (1.0 - 1.0 / _LANE_BITS) ** j
        one, two = 1.0 - x, _double_lane_pass(x, _BOTH_MISS ** j, coincident)
        return [one ** single * two ** double for single, double in lanes]
    q = 1.0 / num_blocks
    if poisson:
        lam = n * q
        mode, sd, upper = int(lam), math.sqrt(lam), math.inf

        def log_pmf(j: int) -> float:
            return _log_poisson_pmf(j, lam)
    else:
        n = int(n)
        mode, sd, upper = min(n, int((n + 1) * q)), math.sqrt(n * q * (1.0 - q)), n

        def log_pmf(j: int) -> float:
            return _log_binomial_pmf(n, j, q)
    stride = max(1, int(sd / 32))
    if stride == 1:
        return _blocked_mixture_unit_steps(n, lam if poisson else None, None if poisson else q / (1.0 - q),
                                           mode, upper, math.exp(log_pmf(mode)), lanes, coincident)
    totals = [0.0] * count  # wide load distributions: sample every `stride` loads, in log space
    for step in (stride, -stride):
        j = mode if step > 0 else mode - stride
        previous = [None] * count
        open_ks = list(range(count))
        while open_ks and 0 < j <= upper:
            base = log_pmf(j)
            x = math.exp(j * _LOG_LANE_MISS)
            log_one = math.log(-math.expm1(j * _LOG_LANE_MISS))
            log_two = math.log(_double_lane_pass(x, math.exp(j * math.log(_BOTH_MISS)), coincident))
            still_open = []
            for index in open_ks:
                single, double = lanes[index]
                log_term = base + single * log_one + double * log_two
                term = math.exp(log_term) * stride
                totals[index] += term
                before = previous[index]
                previous[index] = log_term
                if before is not None and log_term < before:  # past the peak: geometric tail bound
                    ratio = math.exp(log_term - before)
                    if term * ratio <= _MIXTURE_TOLERANCE * (1.0 - ratio) * totals[index]:
                        continue
                still_open.append(index)
            open_ks = still_open
            j += step
    return totals


def _blocked_mixture_unit_steps(n, lam: Optional[float], odds: Optional[float], mode: int, upper,
                                mode_pmf: float, lanes: Sequence[tuple[int, int]], coincident: bool) -> list[float]:
    """The common case of :func:`_blocked_mixture` (every load visited): plain arithmetic, no logarithms.

    Walks j up and down from the mode with pmf(j +- 1) from pmf(j) (binomial: ratio (n - j)/(j + 1) times the
    odds 1/(B - 1); Poisson: lam/(j + 1)), and x = (63/64)^j, (62/64)^(2j) by repeated multiplication. Same
    geometric-tail stopping rule.
    """
    count = len(lanes)
    totals = [0.0] * count
    lane_miss = 1.0 - 1.0 / _LANE_BITS
    for upward in (True, False):
        j = mode if upward else mode - 1
        if j <= 0 and not upward:
            break  # no key in the block: the query cannot pass
        if upward:
            weight = mode_pmf
            if j == 0:  # start at one key
                weight *= lam if lam is not None else n * odds
                j = 1
                if j > upper:
                    break
        elif lam is not None:
            weight = mode_pmf * mode / lam
        else:
            weight = mode_pmf * mode / ((n - mode + 1) * odds)
        x = lane_miss ** j
        both_miss = _BOTH_MISS ** j
        previous = [0.0] * count
        open_ks = list(range(count))
        while open_ks and j > 0:
            one, two = 1.0 - x, _double_lane_pass(x, both_miss, coincident)
            still_open = []
            for index in open_ks:
                single, double = lanes[index]
                term = weight * one ** single * (two ** double if double else 1.0)
                total = totals[index] + term
                totals[index] = total
                before = previous[index]
                previous[index] = term
                if 0.0 < term < before:  # past the peak: the rest of this tail is at most term r / (1 - r)
                    ratio = term / before
                    if term * ratio <= _MIXTURE_TOLERANCE * (1.0 - ratio) * total:
                        continue
                elif term == 0.0 and before > 0.0:
                    continue  # underflowed past the peak
                still_open.append(index)
            open_ks = still_open
            if upward:
                if j >= upper:
                    break
                weight *= (lam / (j + 1)) if lam is not None else (n - j) / (j + 1) * odds
                x *= lane_miss
                both_miss *= _BOTH_MISS
                j += 1
            else:
                weight *= (j / lam) if lam is not None else j / ((n - j + 1) * odds)
                x /= lane_miss
                both_miss /= _BOTH_MISS
                j -= 1
    return totals


def _blocked_fprs(num_blocks: int, n: float, ks: Sequence[int], exact: bool) -> list[float]:
    """Blocked FPR for several k at once (they share the load distribution); a non-integer n interpolates
    linearly between the neighbouring integers (exact form) or uses the Poisson form directly."""
    if n == 0:
        return [0.0] * len(ks)
    if not exact:
        return _blocked_mixture(n, num_blocks, ks, poisson=True, coincident=False)
    low = math.floor(n)
    if low == n:
        return _blocked_mixture(int(n), num_blocks, ks, poisson=False)
    fraction = n - low
    below = _blocked_mixture(low, num_blocks, ks, poisson=False) if low > 0 else [0.0] * len(ks)
    above = _blocked_mixture(low + 1, num_blocks, ks, poisson=False)
    return [a + fraction * (b - a) for a, b in zip(below, above)]


def _fpr(layout: str, m: int, n: float, k: int, exact: bool = True) -> float:
    """Unvalidated false-positive rate (internal; m and k already checked for the layout)."""
    if layout == "classic":
        return _classic_fpr(m, n, k, exact)
    if layout == "partitioned":
        return _partitioned_fpr(m, n, k, exact)
    return _blocked_fprs(m // BLOCK_BITS, n, (k,), exact)[0]


def false_positive_rate(num_bits, num_items, num_hashes, *, layout: str = "classic", exact: bool = True) -> float:
    """Probability that a key that was never inserted tests positive, for a layout (ideal hashing).

    - ``classic`` (one array, k probes anywhere): exact ``(1 - (1 - 1/m)^(k n))^k``, approximate
      ``(1 - e^(-k n / m))^k``. Source: Bloom (1970); Fan et al., *Summary Cache* (ToN 2000), section V-B.
    - ``partitioned`` (probe i in slice ``[i*m//k, (i+1)*m//k)``, sizes s_i): each key sets exactly one bit per
      slice, so a slice bit stays 0 with probability ``(1 - 1/s_i)^n``; exact ``prod_i (1 - (1 - 1/s_i)^n)``,
      approximate ``prod_i (1 - e^(-n / s_i))``. Source: the partitioned Bloom filter of Almeida et al.,
      *Scalable Bloom Filters* (IPL 2007) and Kirsch & Mitzenmacher (2006), with bloomwise's slice bounds.
    - ``blocked`` (split block; docs/architecture.md): a key picks one of B = m/512 blocks and sets one bit of
      lane i mod 8 for each probe i, so lane l gets r_l probes (r_l = 1 for k <= 8; two probes in k - 8 lanes
      above that). Given j keys in the query's block, a one-probe lane passes with probability
      ``1 - (63/64)^j``; a two-probe lane with ``(63/64)(1 - 2 (63/64)^(2j) + (62/64)^(2j)) + (1/64)(1 - (63/64)^(2j))``
      (the query's two probes are distinct bits, or with probability 1/64 the same bit). ``exact=True`` mixes
      the product over the lanes over ``j ~ Binomial(n, 1/B)`` (truncated at a relative 1e-13).
      ``exact=False`` is the textbook form of docs/architecture.md: ``prod_l (1 - (1 - 1/64)^(r_l j))^(r_l)``
      (two-probe lanes as two distinct bits) mixed over ``Poisson(n/B)``; it is the same for k <= 8 (up to
      the Poisson limit) and 0.2% low per two-probe lane (2.6% at k = 16) above. Source: Putze, Sanders &
      Singler, *Cache-, Hash- and Space-Efficient Bloom Filters* (WEA 2007); the split-block variant of
      Apache Impala/Parquet.

    :param num_bits: m, the number of bits (a multiple of 512 for ``blocked``).
    :param num_items: n, keys inserted; a non-negative int, or a real (an expected count). n = 0 gives 0.
    :param num_hashes: k >= 1 (at most m for ``partitioned``, at most 16 for ``blocked``).
    :param layout: ``"classic"``, ``"partitioned"`` or ``"blocked"``.
    :param exact: the exact form (default) or the usual exponential / Poisson approximation.
    :return: the false-positive probability, in [0, 1].

    >>> round(false_positive_rate(10_000, 1_000, 7), 6)
    0.008196
    >>> round(false_positive_rate(10, 1, 7, exact=False), 5)   # Table 3, m/n = 10, k = 7
    0.00819
    >>> false_positive_rate(512, 0, 4, layout="blocked")
    0.0
    """
    layout = _layout(layout)
    exact = _flag("exact", exact)
    m, k = _geometry(layout, num_bits, num_hashes)
    n = _count("num_items", num_items)
    return _fpr(layout, m, n, k, exact)


# ---------------------------------------------------------------------------------------------------------
# Number of hash functions
# ---------------------------------------------------------------------------------------------------------
def optimal_num_hashes_real(num_bits, num_items) -> float:
    """The real k that minimises ``(1 - e^(-k n / m))^k``: ``k* = (m / n) ln 2``.

    Source: Fan et al., *Summary Cache* (ToN 2000), section V-B; at k* the rate is ``2^-k* = 0.6185^(m/n)``.

    :param num_bits: m >= 1.
    :param num_items: n >= 0 (n = 0 gives infinity: with no keys, any k is free of false positives).
    :return: ``m / n * ln 2``.

    >>> round(optimal_num_hashes_real(10, 1), 4)
    6.9315
    """
    m = _integer("num_bits", num_bits, minimum=1)
    n = _count("num_items", num_items)
    return math.inf if n == 0 else m / n * _LN2


def _best_of_floor_ceil(real_k: float, rate: Callable[[int], float], k_max: Optional[int] = None) -> int:
    """Seed 003's rule: evaluate the rate at floor(k*) and ceil(k*), keep the smaller (ties: the smaller k).

    k is never 0 (a filter without hashes answers "present" to everything): floor 0 becomes 1.
    """
    low = max(1, math.floor(real_k))
    high = max(1, math.ceil(real_k))
    if k_max is not None:
        low, high = min(low, k_max), min(high, k_max)
    if low == high:
        return low
    return low if rate(low) <= rate(high) else high


def _classic_or_partitioned_k(layout: str, m: int, n: float, exact: bool = True) -> int:
    if n == 0:
        return 1
    k_max = m if layout == "partitioned" else None

    def rate(k: int) -> float:
        return _fpr(layout, m, n, k, exact)

    k = _best_of_floor_ceil(m / n * _LN2, rate, k_max)
    # The rule is exact whenever the rate is unimodal around b ln 2. Tiny filters break that (the exact form's
    # optimum is ln 2 / (-n ln(1 - 1/m)), slightly below b ln 2; partitioned slices are whole bits: with m = 3,
    # n = 1 the rule picks k = 2 at 1/2 where k = 1 gives 1/3), so step while a neighbour is better.
    for step in (-1, 1):
        while 1 <= k + step <= (k_max or math.inf) and rate(k + step) < rate(k):
            k += step
    if layout == "partitioned" and m <= 64:  # slices of a few bits: the rate need not be unimodal at all
        k = min(range(1, m + 1), key=lambda kk: (rate(kk), kk))
    return k


#: Blocked: each probe below 8 adds a lane factor (1 - q^j) < 1, so k < 8 is never better than k = 8; from 8 to
#: 16 the rate is a mixture of exponentials in k, hence log-convex: the best k is found among 8..16.
_BLOCKED_CANDIDATE_KS = tuple(range(_LANES, MAX_BLOCKED_HASHES + 1))


def _blocked_best(m: int, n: float, exact: bool = True) -> tuple[int, float]:
    """(k, FPR) minimising the blocked layout's rate over k = 1..16 (ties: the smaller k)."""
    if n == 0:
        return 1, 0.0
    rates = _blocked_fprs(m // BLOCK_BITS, n, _BLOCKED_CANDIDATE_KS, exact)
    best = min(range(len(rates)), key=lambda i: (rates[i], i))
    return _BLOCKED_CANDIDATE_KS[best], rates[best]


def _best_k(layout: str, m: int, n: float) -> int:
    if layout == "blocked":
        return _blocked_best(m, n)[0]
    return _classic_or_partitioned_k(layout, m, n)


def optimal_num_hashes(num_bits, num_items, *, layout: str = "classic") -> int:
    """The integer number of hashes that minimises the layout's exact false-positive rate.

    Classic and partitioned: the rule of seed 003 (*Computation of k*): with b = m/n, evaluate the FP formula at
    ``floor(b ln 2)`` and ``ceil(b ln 2)`` and keep the better one (ties: the smaller k). Never 0: if
    ``b ln 2 < 1`` the answer is 1. For all but tiny filters this is the best integer k; a final check steps to
    a neighbour while that is better (e.g. a 3-bit partitioned filter with one key: the rule says 2, k = 1 is
    better), and partitioned filters of at most 64 bits try every k. Blocked: the k in 1..16 with the smallest
    blocked rate, which is always in 8..16 (below 8 each probe adds a lane) and sits well away from b ln 2.
    With n = 0 every k gives 0 false positives and the cheapest, 1, is returned.

    :param num_bits: m (a multiple of 512 for ``blocked``).
    :param num_items: n >= 0.
    :param layout: ``"classic"``, ``"partitioned"`` or ``"blocked"``.
    :return: k >= 1.

    >>> [optimal_num_hashes(b * 3328, 3328) for b in (4, 6, 8, 10)]
    [3, 4, 6, 7]
    """
    layout = _layout(layout)
    m = _integer("num_bits", num_bits, minimum=1)
    if layout == "blocked":
        _blocked_bits(m)
    n = _count("num_items", num_items)
    return _best_k(layout, m, n)


# ---------------------------------------------------------------------------------------------------------
# Sizing: the smallest filter that meets a target rate
# ---------------------------------------------------------------------------------------------------------
def _min_bits_one_array(throws: float, target_fill: float) -> int:
    """Smallest s with ``1 - (1 - 1/s)^throws <= target_fill`` (closed form, then checked against the formula).

    ``(1 - 1/s)^t >= 1 - f  <=>  -ln(1 - 1/s) <= c = -ln(1 - f)/t  <=>  s >= 1 / (1 - e^-c)``.
    """
    if target_fill >= 1.0:
        return 1
    if target_fill <= 0.0:
        raise ValueError("target fill must be positive")
    c = -math.log1p(-target_fill) / throws
    estimate = 1.0 / -math.expm1(-c)
    size = max(1, math.ceil(estimate) if estimate < 2 ** 62 else int(estimate) + 1)
    while size > 1 and _fill(size - 1, throws) <= target_fill:
        size -= 1
    while _fill(size, throws) > target_fill:
        size += 1
    return size


def _classic_bits_for_k(n: float, p: float, k: int) -> int:
    """Smallest m with (1 - (1 - 1/m)^(kn))^k <= p."""
    return _min_bits_one_array(k * n, math.exp(math.log(p) / k))


def _partitioned_bits_for_k(n: float, p: float, k: int) -> int:
    """Smallest m with prod_i (1 - (1 - 1/s_i)^n) <= p (slices of sizes s-1 and s; solved for their mix)."""
    size = _min_bits_one_array(n, math.exp(math.log(p) / k))  # all k slices of this size meet p
    if size == 1:
        return k
    # m = k (size - 1) + r: r slices of `size`, k - r of `size - 1`; fewest r with the product <= p
    log_small = math.log(_fill(size - 1, n))
    log_large = math.log(_fill(size, n))
    if log_small >= 0.0 or log_large >= log_small:  # full slices, or no resolution left: start from k * size
        larger = k
    else:
        needed = (math.log(p) - k * log_small) / (log_large - log_small)
        larger = min(k, max(0, math.ceil(needed - 1e-9)))
    m = k * (size - 1) + larger
    while m > k and _partitioned_fpr(m - 1, n, k, True) <= p:
        m -= 1
    while _partitioned_fpr(m, n, k, True) > p:
        m += 1
    return m


_MAX_BLOCKS = 2 ** 32  # the blocked layout's block index is ((h >> 32) * num_blocks) >> 32


def _blocked_blocks(p: float, rate_at: Callable[[int], float], guess_bits: float) -> int:
    """Smallest number of blocks B with rate_at(B) <= p (rate_at decreasing in B), B < 2^32.

    ln(rate) is nearly a straight line in ln(B), so the search interpolates on those logs: secant steps from the
    classic size (blocked filters need about as many bits or somewhat more) until the answer is bracketed,
    then regula falsi on the bracket (Illinois variant, so neither end gets stuck). Each guess is tested
    together with its integer neighbour on the other side, which ends the search as soon as a guess is within
    one block of the answer.
    """
    rates: dict[int, float] = {}
    low, high = 0, None  # largest B known to fail, smallest B known to hold

    def evaluate(blocks: int) -> float:
        nonlocal low, high
        if blocks not in rates:
            rates[blocks] = rate_at(blocks)
            if rates[blocks] <= p:
                high = blocks if high is None else min(high, blocks)
            else:
                low = max(low, blocks)
        return rates[blocks]

    def log_log_root(x0: int, r0: float, x1: int, r1: float) -> Optional[float]:
        if not (r0 > 0.0 and r1 > 0.0 and r0 != r1 and x0 != x1):
            return None
        slope = (math.log(x1) - math.log(x0)) / (math.log(r1) - math.log(r0))
        return math.exp(math.log(x1) + (math.log(p) - math.log(r1)) * slope)

    evaluate(1)
    if high == 1:
        return 1
    first = min(_MAX_BLOCKS - 1, max(2, math.ceil(guess_bits / BLOCK_BITS)))
    evaluate(first)
    second = max(2, round(first / 1.1)) if high is not None else min(_MAX_BLOCKS - 1, round(first * 1.15) + 1)
    evaluate(second)
    recent = [first, second]
    while high is None:  # secant steps outwards until the target is bracketed
        if low >= _MAX_BLOCKS - 1:
            raise ValueError(f"fpr={p:g} is out of reach of the blocked layout (it would need 2^32 blocks of 512 "
                             f"bits or more); use the classic or partitioned layout")
        guess = log_log_root(recent[-2], rates[recent[-2]], recent[-1], rates[recent[-1]])
        candidate = low * 2 if guess is None else min(max(math.ceil(guess), low + 1), low * 4)
        candidate = min(_MAX_BLOCKS - 1, candidate)
        evaluate(candidate)
        recent.append(candidate)
    weight_low = weight_high = 1.0  # Illinois: halve the weight of an end that stays put twice
    last_side = None
    for _ in range(200):
        if high - low <= 1:
            return high
        rate_low = rates[low] if low > 0 else math.inf
        guess = None
        if low > 0:
            log_p = math.log(p)
            f_low = (math.log(rate_low) - log_p) * weight_low
            f_high = (math.log(rates[high]) - log_p) * weight_high if rates[high] > 0 else None
            if f_high is not None and f_low != f_high:
                t = f_low / (f_low - f_high)
                guess = math.exp(math.log(low) + t * (math.log(high) - math.log(low)))
        if guess is None:
            guess = (low + high) / 2
        candidate = min(high - 1, max(low + 1, math.floor(guess)))
        fails = evaluate(candidate) > p
        neighbour = candidate + 1 if fails else candidate - 1
        if low < neighbour < high:
            evaluate(neighbour)
        side = "low" if fails else "high"
        if side == last_side:
            if side == "low":
                weight_high *= 0.5
            else:
                weight_low *= 0.5
        else:
            weight_low = weight_high = 1.0
        last_side = side
    raise RuntimeError("blocked sizing did not converge")  # pragma: no cover


def _blocked_best_near(num_blocks: int, n: float, hint: list) -> float:
    """min over k of the blocked rate, searching k = 8..16 outwards from hint[0] (the rate is log-convex in k
    there, so a local minimum is the minimum); updates the hint."""
    k = hint[0]
    cache = {}

    def rate(kk: int) -> float:
        if kk not in cache:
            cache[kk] = _blocked_fprs(num_blocks, n, (kk,), True)[0]
        return cache[kk]

    neighbours = [kk for kk in (k - 1, k, k + 1) if _LANES <= kk <= MAX_BLOCKED_HASHES]
    values = _blocked_fprs(num_blocks, n, neighbours, True)
    cache.update(zip(neighbours, values))
    best = min(neighbours, key=lambda kk: (cache[kk], kk))
    step = -1 if best == neighbours[0] and best > _LANES else 1 if best == neighbours[-1] else 0
    while step and _LANES <= best + step <= MAX_BLOCKED_HASHES and rate(best + step) < rate(best):
        best += step
    hint[0] = best
    return cache[best]


def _blocked_bits_for_k(n: float, p: float, k: int) -> int:
    guess = _classic_bits_for_k(n, p, k)
    blocks = _blocked_blocks(p, lambda b: _blocked_fprs(b, n, (k,), True)[0], guess)
    return blocks * BLOCK_BITS


def _classic_like_size(layout: str, n: float, p: float) -> tuple[int, int]:
    bits_for_k = _classic_bits_for_k if layout == "classic" else _partitioned_bits_for_k
    start = max(1, round(math.log2(1.0 / p)))
    sizes = {start: bits_for_k(n, p, start)}
    for direction in (1, -1):  # m_k is unimodal in k: walk both ways while it shrinks
        k = start
        while k + direction >= 1:
            size = bits_for_k(n, p, k + direction)
            sizes[k + direction] = size
            if size > sizes[k]:
                break
            k += direction
    m = min(sizes.values())
    k = _classic_or_partitioned_k(layout, m, n)
    if _fpr(layout, m, n, k) > p:  # the floor/ceil rule missed the argmin (only at float-level ties)
        k = min(kk for kk, size in sizes.items() if size == m)
    return m, k


@lru_cache(maxsize=512)
def _optimal_size(n: float, p: float, layout: str) -> tuple[int, int]:
    if n == 0:
        return (BLOCK_BITS if layout == "blocked" else 1), 1
    if layout != "blocked":
        return _classic_like_size(layout, n, p)
    guess = _classic_like_size("classic", n, p)[0]
    hint = [min(MAX_BLOCKED_HASHES, max(_LANES, round(math.log2(1.0 / p))))]
    blocks = _blocked_blocks(p, lambda b: _blocked_best_near(b, n, hint), guess)
    m = blocks * BLOCK_BITS
    return m, _blocked_best(m, n)[0]


def optimal_size(num_items, fpr, *, layout: str = "classic") -> tuple[int, int]:
    """The smallest ``(num_bits, num_hashes)`` whose exact false-positive rate at ``num_items`` is <= ``fpr``.

    num_bits is the smallest m for which the layout's exact rate (:func:`false_positive_rate`) with the best
    integer k (:func:`optimal_num_hashes`) is at most the target; for ``blocked`` m is a multiple of 512.
    Classic and partitioned are solved in closed form for each k near ``log2(1/p)`` (then checked against the
    formula, so the result is exact, not the usual ``-n ln p / ln^2 2`` rounded); blocked by a bracketed
    secant search over the number of blocks. Results are cached; an uncached call takes tens of microseconds
    for classic and partitioned (even for 10^10 items) and about a millisecond for blocked. With
    ``num_items = 0`` the smallest filter (1 bit, or one block) is returned.

    :param num_items: n >= 0, the number of keys the filter must hold.
    :param fpr: the target rate, strictly between 0 and 1.
    :param layout: ``"classic"``, ``"partitioned"`` or ``"blocked"``.
    :return: ``(num_bits, num_hashes)``.

    >>> optimal_size(1000, 0.01)
    (9594, 7)
    >>> optimal_size(1000, 0.01, layout="blocked")[0] % 512
    0
    """
    layout = _layout(layout)
    n = _count("num_items", num_items)
    p = _probability("fpr", fpr)
    return _optimal_size(n, p, layout)


def _bits_per_item_limit(p: float, layout: str) -> float:
    """Bits per key as n -> infinity (b = m/n fixed)."""
    if layout != "blocked":
        # classic and partitioned both tend to (1 - e^(-k/b))^k: b_k = -k / ln(1 - p^(1/k)), minimised over k
        best = math.inf
        start = max(1, round(math.log2(1.0 / p)))
        for k in range(max(1, start - 3), start + 4):
            best = min(best, -k / math.log1p(-math.exp(math.log(p) / k)))
        return best

    def rate(b: float) -> float:  # Poisson(512/b) keys per block, as the number of blocks grows
        return min(_blocked_mixture(BLOCK_BITS / b, 1, _BLOCKED_CANDIDATE_KS, poisson=True))

    low = _bits_per_item_limit(p, "classic")
    high = low * 1.25
    while rate(high) > p:
        low, high = high, high * 1.25
    for _ in range(60):
        middle = (low + high) / 2
        if rate(middle) <= p:
            high = middle
        else:
            low = middle
    return high


def bits_per_item(fpr, *, layout: str = "classic", num_items=None) -> float:
    """Bits per key a layout needs for a target false-positive rate.

    With ``num_items``: ``optimal_size(num_items, fpr, layout)[0] / num_items`` (exact, integer m). Without: the
    limit for many keys at a fixed m/n, minimised over integer k: ``min_k -k / ln(1 - p^(1/k))`` for classic and
    partitioned (both tend to ``(1 - e^(-k/b))^k``), and for blocked the b at which the Poisson(512/b) block-load
    mixture meets p. Compare with the information-theoretic limit ``log2(1/p)``.

    :param fpr: target rate in (0, 1).
    :param layout: ``"classic"``, ``"partitioned"`` or ``"blocked"``.
    :param num_items: n >= 1, or None for the many-keys limit.
    :return: bits per key.

    >>> round(bits_per_item(0.01), 3)
    9.593
    """
    layout = _layout(layout)
    p = _probability("fpr", fpr)
    if num_items is None:
        return _bits_per_item_limit(p, layout)
    n = _count("num_items", num_items)
    if n == 0:
        raise ValueError("num_items must be > 0 to give bits per item, got 0")
    return _optimal_size(n, p, layout)[0] / n


# ---------------------------------------------------------------------------------------------------------
# plan(): the calculator
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """A sized filter: the four linked quantities n, p, m, k and what they mean in practice.

    ``p`` is the target when it was given, otherwise the layout's exact rate at (m, n, k). The ``fpr_*`` fields
    are the exact rates each layout really gives at (m, k) with n keys: ``fpr_blocked`` uses m rounded up to a
    multiple of 512 (``blocked_num_bits``); a field is None where the layout cannot use that k (partitioned:
    k > m; blocked: k > 16).
    """

    n: int
    p: float
    m: int
    k: int
    layout: str
    fpr_classic: float
    fpr_partitioned: Optional[float]
    fpr_blocked: Optional[float]
    blocked_num_bits: int
    solved: tuple[str, ...]  # which of n, p, m, k were computed rather than given

    @property
    def num_bytes(self) -> int:
        """Bytes of bit storage, ``ceil(m / 8)``."""
        return -(-self.m // 8)

    @property
    def bits_per_key(self) -> float:
        """``m / n``."""
        return self.m / self.n

    @property
    def fpr(self) -> Optional[float]:
        """The exact rate of the plan's own layout at (m, n, k)."""
        return getattr(self, f"fpr_{self.layout}")

    @property
    def information_limit(self) -> float:
        """``log2(1/p)``: the fewest bits per key any structure with false-positive rate p can use."""
        return math.log2(1.0 / self.p) if self.p > 0 else math.inf

    @property
    def overhead(self) -> float:
        """Bits per key over the information-theoretic limit (about 1.44 for a classic filter)."""
        return self.bits_per_key / self.information_limit

    def as_dict(self) -> dict:
        """Plain data (for JSON): the fields plus bytes, bits per key, limit and overhead."""
        return {
            "n": self.n, "p": self.p, "m": self.m, "k": self.k, "layout": self.layout,
            "bytes": self.num_bytes, "bits_per_key": self.bits_per_key,
            "fpr": {"classic": self.fpr_classic, "partitioned": self.fpr_partitioned,
                    "blocked": self.fpr_blocked},
            "blocked_num_bits": self.blocked_num_bits,
            "information_limit_bits_per_key": self.information_limit, "overhead": self.overhead,
            "solved": list(self.solved),
        }


def _whole(name: str, value, minimum: int) -> int:
    """plan() takes 4e7 as well as 40_000_000, but not 4.5e7 keys."""
    if isinstance(value, float) and not isinstance(value, bool) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return _integer(name, value, minimum=minimum)


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def _calculator_bits_per_key(p: float, k: int) -> float:
    """hur.st's r = -k / ln(1 - e^(ln p / k)): bits per key for rate p with k hashes (exponential form)."""
    return -k / math.log1p(-math.exp(math.log(p) / k))


def _largest_n(m: int, p: float, rate_at: Callable[[int], float]) -> int:
    """Largest n >= 0 with rate_at(n) <= p (rate_at increasing in n)."""
    if rate_at(1) > p:
        return 0
    low, high = 1, 2
    while rate_at(high) <= p:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        if rate_at(middle) <= p:
            low = middle
        else:
            high = middle
    return low


def _check_k_for_layout(layout: str, m: int, k: int) -> None:
    _geometry(layout, m, k)


def plan(n=None, p=None, m=None, k=None, *, layout: str = "classic") -> Plan:
    """Solve for the missing ones of n (keys), p (false-positive rate), m (bits), k (hashes).

    Sufficient inputs: two of n, p, m, with or without k. When both n and m are given, k (if missing) is chosen
    and a given p is checked instead of solved: the inputs are inconsistent (ValueError) if the rate they give
    exceeds p by more than 1%, unless m and k are exactly what plan() computes from n and p (the calculator's
    rounding leaves its own plans above p at times: by 1.3% at p = 0.316, by up to 26% for a single key).

    ``layout="classic"`` uses the closed forms of the well-known online calculator (hur.st), so its numbers are
    the ones people compare with:

    - n, p:      ``m = ceil(n ln p / ln(1 / 2^ln2))``, ``k = round(m / n ln 2)``
    - n, p, k:   ``m = ceil(n r)``, ``r = -k / ln(1 - e^(ln p / k))``
    - m, p:      ``n = floor(m ln(1 / 2^ln2) / ln p)``, ``k = round(m / n ln 2)``
    - m, p, k:   ``n = floor(m / r)`` (the calculator uses ceil; floor keeps the rate at or below p)
    - n, m:      ``k = round(m / n ln 2)``; p is the exact rate

    ``"partitioned"`` and ``"blocked"`` have no closed forms: they are solved with their exact rates
    (:func:`optimal_size`, the integer k of :func:`optimal_num_hashes`, bisection over n), and m is a multiple
    of 512 for blocked. Whatever the layout, the plan reports the exact rate every layout gives at (m, k).

    :param n: number of keys (>= 1).
    :param p: false-positive rate in (0, 1).
    :param m: number of bits (>= 1).
    :param k: number of hashes (>= 1).
    :param layout: the layout to size for.
    :return: a :class:`Plan`.
    :raises ValueError: when the inputs are insufficient (it says what is missing) or inconsistent.

    >>> result = plan(n=10_000, p=0.001)
    >>> result.m, result.k
    (143776, 10)
    >>> plan(n=40_000_000, p=1e-6).m
    1150207006
    """
    layout = _layout(layout)
    n = None if n is None else _whole("n", n, 1)
    p = None if p is None else _probability("p", p)
    m = None if m is None else _whole("m", m, 1)
    k = None if k is None else _whole("k", k, 1)
    given = tuple(name for name, value in (("n", n), ("p", p), ("m", m), ("k", k)) if value is not None)
    if layout == "blocked" and m is not None:
        _blocked_bits(m)
    if layout == "blocked" and k is not None and k > MAX_BLOCKED_HASHES:
        raise ValueError(f"k must be between 1 and {MAX_BLOCKED_HASHES} for the blocked layout, got {k}")

    if n is not None and m is not None:
        if k is None:
            k = max(1, _round_half_up(m / n * _LN2)) if layout == "classic" else _best_k(layout, m, n)
        _check_k_for_layout(layout, m, k)
        rate = _fpr(layout, m, n, k)
        if p is not None and rate > p * (1.0 + _CONSISTENCY_SLACK) and not _is_own_plan(n, p, m, k, layout):
            raise ValueError(
                f"inconsistent: n={n}, m={m}, k={k} give a {layout} false-positive rate of {rate:.4g}, "
                f"above p={p:.4g}; drop one of them, or raise m or p")
    elif n is not None and p is not None:
        if layout == "classic":
            if k is None:
                m = math.ceil(n * math.log(p) / math.log(1.0 / 2.0 ** _LN2))
                k = max(1, _round_half_up(m / n * _LN2))
            else:
                m = math.ceil(n * _calculator_bits_per_key(p, k))
        elif k is None:
            m, k = _optimal_size(float(n), p, layout)
        elif layout == "partitioned":
            m = _partitioned_bits_for_k(n, p, k)
        else:
            m = _blocked_bits_for_k(n, p, k)
    elif m is not None and p is not None:
        if layout == "classic":
            if k is None:
                n = math.floor(m * math.log(1.0 / 2.0 ** _LN2) / math.log(p))
                if n >= 1:
                    k = max(1, _round_half_up(m / n * _LN2))
            else:
                n = math.floor(m / _calculator_bits_per_key(p, k))
        elif k is None:
            n = _largest_n(m, p, lambda items: _best_rate(layout, m, items))
            if n >= 1:
                k = _best_k(layout, m, n)
        else:
            _check_k_for_layout(layout, m, k)
            n = _largest_n(m, p, lambda items: _fpr(layout, m, items, k))
        if n < 1:
            raise ValueError(f"m={m} bits cannot hold even one key at p={p:.4g} with the {layout} layout; "
                             f"raise m or p")
    else:
        raise ValueError(_missing_message(given))

    _check_k_for_layout(layout, m, k)
    solved = tuple(name for name in ("n", "p", "m", "k") if name not in given)
    if p is None:
        p = _fpr(layout, m, n, k)
    blocked_bits = _round_up(m, BLOCK_BITS)
    return Plan(
        n=n, p=p, m=m, k=k, layout=layout,
        fpr_classic=_fpr("classic", m, n, k),
        fpr_partitioned=_fpr("partitioned", m, n, k) if k <= m else None,
        fpr_blocked=_fpr("blocked", blocked_bits, n, k) if k <= MAX_BLOCKED_HASHES else None,
        blocked_num_bits=blocked_bits, solved=solved,
    )


def _is_own_plan(n: int, p: float, m: int, k: int, layout: str) -> bool:
    """True when (m, k) are exactly what plan() itself computes from n and p, or from n, p and k: the
    calculator's rounding can leave its plans above p (by up to ~25% for a handful of keys)."""
    for fixed_k in (None, k):
        own = plan(n=n, p=p, k=fixed_k, layout=layout)
        if (own.m, own.k) == (m, k):
            return True
    return False


def _best_rate(layout: str, m: int, n: float) -> float:
    """The layout's exact rate with its best integer k."""
    if layout == "blocked":
        return _blocked_best(m, n)[1]
    return _fpr(layout, m, n, _classic_or_partitioned_k(layout, m, n))


def _missing_message(given: tuple[str, ...]) -> str:
    names = {"n": "n (keys)", "p": "p (false-positive rate)", "m": "m (bits)", "k": "k (hashes)"}
    if not given:
        return "plan needs two of n (keys), p (false-positive rate) and m (bits); none was given"
    got = " and ".join(names[name] for name in given)
    if set(given) == {"p", "k"}:
        return (f"{got} fix the bits per key but not the size: also give n (keys) or m (bits)")
    missing = [names[name] for name in ("n", "p", "m") if name not in given]
    return f"{got} {'is' if len(given) == 1 else 'are'} not enough: also give {' or '.join(missing)}"


# ---------------------------------------------------------------------------------------------------------
# Summary Cache, Tables 3-5 and Figure 4
# ---------------------------------------------------------------------------------------------------------
def _approx_rate(bits_per_item: float, k: int) -> float:
    """The tables' formula: (1 - e^(-k / b))^k."""
    return _pow(-math.expm1(-k / bits_per_item), k)


@dataclass(frozen=True)
class FpTableCell:
    """One cell: the rate ``(1 - e^(-k/b))^k`` and its text to 3 significant digits (``format(x, '.3g')``)."""

    k: int
    fpr: float
    text: str


@dataclass(frozen=True)
class FpTableRow:
    """One row (one m/n) of Tables 3-5: k_opt = b ln 2 (and its printed text) and the cells."""

    bits_per_item: int
    k_opt: float
    k_opt_text: str
    cells: tuple[FpTableCell, ...]

    def cell(self, k: int) -> Optional[FpTableCell]:
        """The cell for k, or None if the row does not reach it."""
        for cell in self.cells:
            if cell.k == k:
                return cell
        return None


def _row_extent(b: int, ks: Sequence[int], extent: str) -> list[int]:
    rates = {k: _approx_rate(b, k) for k in ks}
    if extent == "first-increase":
        chosen = []
        for k in ks:
            chosen.append(k)
            if k - 1 in rates and rates[k] > rates[k - 1]:
                break
        return chosen
    # "printed": k = 1 .. floor(b ln 2) + 2, without a last column worse than k = 1 (only m/n = 2, 3)
    last = math.floor(b * _LN2) + 2
    if 1 in rates and last in rates and rates[last] > rates[1]:
        last -= 1
    return [k for k in ks if k <= last]


def fp_table(bits_per_item: Iterable[int] = range(2, 33), hashes: Iterable[int] = range(1, 25), *,
             extent: str = "printed") -> tuple[FpTableRow, ...]:
    """Tables 3-5 of *Summary Cache* (Fan et al. 2000): the rate ``(1 - e^(-k/b))^k`` per m/n = b and k.

    Cells are computed from the approximate formula (what the paper tabulates) and formatted to 3 significant
    digits the way the paper prints them (``format(x, '.3g')``: 0.08, 0.0918, 7.46e-05); ``k_opt`` is
    ``b ln 2`` printed the same way. Nothing is copied from the printed tables: compare with
    :func:`fp_table_differences`.

    Which k a row shows (``extent``):

    - ``"printed"`` (default): the columns the paper prints, k = 1 .. ``floor(b ln 2) + 2`` (one past the
      better integer neighbour of the optimum), except that a last column worse than k = 1 is left out (this
      only happens for m/n = 2 and 3). This reproduces the 411 printed cells exactly.
    - ``"first-increase"``: k = 1 up to and including the first k whose rate is higher than the one before
      (the rule literature.md states; 16 printed rows run one column further than that).

    :param bits_per_item: the m/n rows (integers >= 1).
    :param hashes: the k columns considered (integers >= 1).
    :param extent: ``"printed"`` or ``"first-increase"``.
    :return: one :class:`FpTableRow` per m/n.

    >>> row = fp_table([10])[0]
    >>> row.k_opt_text, [cell.text for cell in row.cells]
    ('6.93', ['0.0952', '0.0329', '0.0174', '0.0118', '0.00943', '0.00844', '0.00819', '0.00846'])
    """
    if extent not in ("printed", "first-increase"):
        raise ValueError(f"extent must be 'printed' or 'first-increase', got {extent!r}")
    ks = sorted({_integer("hashes", k, minimum=1) for k in hashes})
    rows = []
    for b in bits_per_item:
        b = _integer("bits_per_item", b, minimum=1)
        cells = tuple(FpTableCell(k, _approx_rate(b, k), format(_approx_rate(b, k), ".3g"))
                      for k in _row_extent(b, ks, extent))
        rows.append(FpTableRow(b, b * _LN2, format(b * _LN2, ".3g"), cells))
    return tuple(rows)


@dataclass(frozen=True)
class TableDifference:
    """A printed cell of Tables 3-5 that the formula does not give (or a cell only one side has).

    ``kind`` is ``"value"`` (the printed number differs from the formula rounded to 3 significant digits),
    ``"missing"`` (printed, but not in the computed table) or ``"extra"`` (computed, but not printed).
    ``column`` is ``"k=15"`` or ``"k_opt"``.
    """

    table: int
    bits_per_item: int
    column: str
    printed: Optional[str]
    computed: Optional[float]
    computed_text: Optional[str]
    kind: str

    def __str__(self) -> str:
        where = f"Table {self.table}, m/n = {self.bits_per_item}, {self.column}"
        if self.kind == "value":
            return f"{where}: printed {self.printed}, formula {self.computed_text} ({self.computed:.6g})"
        if self.kind == "missing":
            return f"{where}: printed {self.printed}, not in the computed table"
        return f"{where}: computed {self.computed_text}, not printed"


def _table_of(k: int) -> int:
    return 3 if k <= 8 else 4 if k <= 16 else 5


def fp_table_differences(rows: Optional[Sequence[FpTableRow]] = None) -> tuple[TableDifference, ...]:
    """Compare the computed Tables 3-5 with the printed ones (transcribed in ``bloomwise._tables``).

    A printed value differs when it is not numerically equal to the formula rounded to 3 significant digits
    (so "0.400" and "0.4" agree, but "0.092" for 0.0918 does not). The known results: Table 3, m/n = 5 prints
    k = 3 as 0.092 (formula 0.0918) and k_opt as 3.46 (5 ln 2 = 3.4657, i.e. 3.47); Table 4, m/n = 30 prints
    k = 15 and 16 as 8.39e-06 and 7.26e-06 (formula 8.39e-07 and 7.26e-07: an exponent typo).

    :param rows: a computed table (default: ``fp_table()``).
    :return: the differences, in table order.

    >>> [str(d) for d in fp_table_differences()][:1]
    ['Table 3, m/n = 5, k_opt: printed 3.46, formula 3.47 (3.46574)']
    """
    from bloomwise import _tables

    rows = fp_table() if rows is None else rows
    printed = _tables.printed_cells()
    printed_k_opt = _tables.printed_k_opt()
    differences = []
    for row in rows:
        b = row.bits_per_item
        if b not in printed:
            continue
        if float(printed_k_opt[b]) != float(row.k_opt_text):
            differences.append(TableDifference(_table_of(min(printed[b])), b, "k_opt", printed_k_opt[b],
                                               row.k_opt, row.k_opt_text, "value"))
        computed = {cell.k: cell for cell in row.cells}
        for k in sorted(set(printed[b]) | set(computed)):
            text, cell = printed[b].get(k), computed.get(k)
            if cell is None:
                value = _approx_rate(b, k)
                differences.append(TableDifference(_table_of(k), b, f"k={k}", text, value, format(value, ".3g"),
                                                   "missing"))
            elif text is None:
                differences.append(TableDifference(_table_of(k), b, f"k={k}", None, cell.fpr, cell.text, "extra"))
            elif float(text) != float(cell.text):
                differences.append(TableDifference(_table_of(k), b, f"k={k}", text, cell.fpr, cell.text, "value"))
    differences.sort(key=lambda d: (d.table, d.bits_per_item, d.column != "k_opt", d.column))
    return tuple(differences)


def format_fp_tables(rows: Optional[Sequence[FpTableRow]] = None) -> str:
    """Tables 3-5 as text, laid out like the paper (k = 1-8, 9-16, 17-24), from the computed rows."""
    rows = fp_table() if rows is None else rows
    blocks = []
    for table, first in ((3, 1), (4, 9), (5, 17)):
        ks = range(first, first + 8)
        lines = [f"Table {table}: false positive rate under various m/n and k combinations",
                 f"{'m/n':>4} {'k_opt':>6} " + " ".join(f"{'k=' + str(k):>9}" for k in ks)]
        for row in rows:
            cells = [row.cell(k) for k in ks]
            if not any(cells):
                continue
            texts = " ".join(f"{cell.text if cell else '':>9}" for cell in cells)
            lines.append(f"{row.bits_per_item:>4} {row.k_opt_text:>6} {texts}".rstrip())
        if len(lines) > 2:
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


@dataclass(frozen=True)
class Figure4Data:
    """Figure 4 of *Summary Cache*: the rate against bits per entry, for k = 4 and for the best integer k."""

    bits_per_item: tuple[int, ...]
    fpr_four_hashes: tuple[float, ...]
    optimal_hashes: tuple[int, ...]
    fpr_optimal: tuple[float, ...]


def figure4_data(bits_per_item: Iterable[int] = range(1, 33)) -> Figure4Data:
    """The two curves of Figure 4 (Fan et al. 2000): ``(1 - e^(-k/b))^k`` for k = 4 and for the best integer k.

    The best integer k follows seed 003's rule on the same formula (the better of ``floor(b ln 2)`` and
    ``ceil(b ln 2)``, never 0). The paper's text says the optimum at m/n = 10 is 5 hashes with 0.9%; its own
    Table 3 (and this curve) has k = 7 with 0.819% (k = 5 gives 0.943%).

    :param bits_per_item: the x values (integers >= 1).
    :return: a :class:`Figure4Data`.

    >>> data = figure4_data([10])
    >>> data.optimal_hashes, round(data.fpr_four_hashes[0], 4), round(data.fpr_optimal[0], 5)
    ((7,), 0.0118, 0.00819)
    """
    xs = tuple(_integer("bits_per_item", b, minimum=1) for b in bits_per_item)
    best = tuple(_best_of_floor_ceil(b * _LN2, lambda k, b=b: _approx_rate(b, k)) for b in xs)
    return Figure4Data(
        bits_per_item=xs,
        fpr_four_hashes=tuple(_approx_rate(b, 4) for b in xs),
        optimal_hashes=best,
        fpr_optimal=tuple(_approx_rate(b, k) for b, k in zip(xs, best)),
    )


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
    m = _integer("num_counters", num_counters, minimum=1)
    n = _count("num_items", num_items)
    k = _real("num_hashes", num_hashes)
    if k <= 0:
        raise ValueError(f"num_hashes must be > 0, got {num_hashes!r}")
    i = _integer("threshold", threshold, minimum=1)
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
    y = _real("value", value)
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
    m = _integer("num_counters", num_counters, minimum=1)
    n = _count("num_items", num_items)
    k = _real("num_hashes", num_hashes)
    if k <= 0:
        raise ValueError(f"num_hashes must be > 0, got {num_hashes!r}")
    if n == 0:
        return 0.0
    g = inverse_gamma(m)
    value = g * (1.0 + math.log(k * n / m) / math.log(g))
    return min(max(value, 1.0), n * k)


# ---------------------------------------------------------------------------------------------------------
# From the number of bits set: how many keys, and the current false-positive rate
# ---------------------------------------------------------------------------------------------------------
def _pair_term(y: float, d: float, n: float) -> float:
    """``x^n - y^n`` for ``x = y + d`` without cancellation: ``y^n expm1(n ln(1 + d/y))``."""
    if d == 0.0 or n == 0:
        return 0.0
    if y <= 0.0:
        return _pow(y + d, n)
    ratio = d / y
    if ratio <= -1.0:
        return -_pow(y, n)
    return _pow(y, n) * math.expm1(n * math.log1p(ratio))


def _one_array_unset_moments(size: int, throws_per_key: int, n: float) -> tuple[float, float]:
    """Mean and variance of the number of 0 bits among `size`, n keys each throwing `throws_per_key` times."""
    if n == 0:
        return float(size), 0.0
    if size == 1:
        return 0.0, 0.0
    u = _pow(1.0 - 1.0 / size, throws_per_key)          # a key misses a given bit
    mean_one = _pow(u, n)
    # a key misses two given bits: (1 - 2/s)^t = u^2 (1 - 1/(s-1)^2)^t
    y = u * u
    d = y * (_pow(1.0 - 1.0 / (size - 1) ** 2, throws_per_key) - 1.0) if size > 2 else -y
    variance = size * mean_one * (1.0 - mean_one) + size * (size - 1) * _pair_term(y, d, n)
    return size * mean_one, max(variance, 0.0)


def _blocked_unset_moments(num_blocks: int, k: int, n: float) -> tuple[float, float]:
    """Mean and variance of the 0 bits among the lanes a blocked filter can set (exact, binomial block loads).

    A key touches a given bit of a lane with r probes with probability a_r = (1 - (63/64)^r) / B. For two bits:
    same lane, ``P(key misses both) - (1-a)^2 = (2(1-q^r) - (1-(62/64)^r))/B - a^2``; same block, other lanes:
    ``(B-1) a a'``; other blocks: ``-a a'``. Each pair contributes ``x^n - y^n``, computed without cancellation.
    """
    single, double = _lane_probes(k)
    lanes = [(1, single), (2, double)]
    lanes = [(r, count) for r, count in lanes if count]
    B = num_blocks
    a = {r: (1.0 - (1.0 - 1.0 / _LANE_BITS) ** r) / B for r, _ in lanes}
    mean = 0.0
    variance = 0.0
    for r, count in lanes:
        bits = B * count * _LANE_BITS
        p_unset = _pow(1.0 - a[r], n)
        mean += bits * p_unset
        variance += bits * p_unset * (1.0 - p_unset)
        # same block, same lane, two different bits
        same_lane_excess = (2.0 * (1.0 - (63 / 64) ** r) - (1.0 - (62 / 64) ** r)) / B - a[r] ** 2
        variance += B * count * _LANE_BITS * (_LANE_BITS - 1) * _pair_term((1.0 - a[r]) ** 2, same_lane_excess, n)
    for r1, c1 in lanes:
        for r2, c2 in lanes:
            y = (1.0 - a[r1]) * (1.0 - a[r2])
            lane_pairs = c1 * (c2 - 1) if r1 == r2 else c1 * c2
            if B > 1:
                # same block, different lanes: positively correlated through the block's load
                variance += B * lane_pairs * _LANE_BITS ** 2 * _pair_term(y, (B - 1) * a[r1] * a[r2], n)
                # different blocks: slightly negatively correlated (a key goes to one block only)
                variance += B * (B - 1) * c1 * c2 * _LANE_BITS ** 2 * _pair_term(y, -a[r1] * a[r2], n)
    return mean, max(variance, 0.0)


def _settable_bits(layout: str, m: int, k: int) -> int:
    if layout == "blocked":
        return (m // BLOCK_BITS) * min(k, _LANES) * _LANE_BITS
    return m


def _set_bits_moments(layout: str, m: int, k: int, n: float) -> tuple[float, float]:
    """Mean and variance of the number of set bits after n keys (ideal hashing)."""
    settable = _settable_bits(layout, m, k)
    if layout == "classic":
        unset_mean, variance = _one_array_unset_moments(m, k, n)
    elif layout == "partitioned":
        unset_mean = variance = 0.0
        for size, count in _slice_sizes(m, k):
            if count:
                slice_mean, slice_variance = _one_array_unset_moments(size, 1, n)
                unset_mean += count * slice_mean
                variance += count * slice_variance
    else:
        unset_mean, variance = _blocked_unset_moments(m // BLOCK_BITS, k, n)
    return settable - unset_mean, variance


def fill_moments(num_bits, num_hashes, num_items, *, layout: str = "classic") -> tuple[float, float]:
    """Mean and variance of the number of bits set after inserting ``num_items`` keys (ideal hashing).

    Classic: kn uniform throws into m bits, ``E[zeros] = m (1-1/m)^(kn)``, ``Var = m P(1-P) +
    m(m-1)((1-2/m)^(kn) - (1-1/m)^(2kn))`` (the classical occupancy moments). Partitioned: the same for each
    slice with n throws, summed (slices are independent). Blocked: exact pairwise sums over the binomial block
    loads (see ``_blocked_unset_moments``). All differences of powers are computed without cancellation.

    :param num_bits: m.
    :param num_hashes: k.
    :param num_items: n >= 0 (real allowed).
    :param layout: the layout.
    :return: ``(mean, variance)`` of the number of set bits.

    >>> mean, variance = fill_moments(1000, 1, 1)
    >>> mean, variance
    (1.0, 0.0)
    """
    layout = _layout(layout)
    m, k = _geometry(layout, num_bits, num_hashes)
    n = _count("num_items", num_items)
    return _set_bits_moments(layout, m, k, n)


class CountEstimate(NamedTuple):
    """An estimated number of distinct keys, with a confidence interval ``[low, high]``."""

    estimate: float
    low: float
    high: float
    confidence: float


def _solve_increasing(function: Callable[[float], float], target: float, low: float, high: float) -> float:
    """x in [low, high] with function(x) = target, for function increasing (bisection to float precision)."""
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if function(middle) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def _upper_bracket(function: Callable[[float], float], target: float, start: float) -> float:
    """A point where function >= target (doubling from start), or inf if there is none below 1e300."""
    high = max(start, 1.0)
    while function(high) < target:
        high *= 2.0
        if high > 1e300:
            return math.inf
    return high


def _count_estimate(layout: str, m: int, k: int, bits_set: int) -> float:
    """The count whose expected fill is bits_set (classic: Swamidass-Baldi), never below ceil(X / k)."""
    settable = _settable_bits(layout, m, k)
    if bits_set >= settable:
        return math.inf
    if bits_set == 0:
        return 0.0
    if layout == "classic":
        value = -(m / k) * math.log1p(-bits_set / m)
    elif layout == "partitioned" and m % k == 0:
        value = math.log1p(-bits_set / m) / math.log1p(-k / m)
    else:
        mean = lambda items: _set_bits_moments(layout, m, k, items)[0]  # noqa: E731
        high = _upper_bracket(mean, bits_set, bits_set / k)
        value = _solve_increasing(mean, bits_set, 0.0, high)
    return max(value, math.ceil(bits_set / k))  # a key sets at most k bits


def _check_bits_set(layout: str, m: int, k: int, bits_set) -> int:
    x = _integer("bits_set", bits_set, minimum=0)
    settable = _settable_bits(layout, m, k)
    if x > settable:
        where = (f"a blocked filter with k={k} can set at most {settable} of its {m} bits "
                 f"({min(k, _LANES)} lanes of 64 per block)" if layout == "blocked" else f"num_bits is {m}")
        raise ValueError(f"bits_set must be <= the bits that can be set: {where}; got {x}")
    return x


def approx_count(num_bits, num_hashes, bits_set, *, layout: str = "classic", confidence: float = 0.95) -> CountEstimate:
    """Estimate how many distinct keys a filter holds from the number of bits set, with a confidence interval.

    - classic: ``n ~ -(m/k) ln(1 - X/m)`` (Swamidass & Baldi, J. Chem. Inf. Model. 47, 2007), the inverse of
      the expected fill ``m (1 - e^(-kn/m))``;
    - partitioned: the n whose expected fill ``sum_i s_i (1 - (1 - 1/s_i)^n)`` equals X (closed form
      ``ln(1 - X/m) / ln(1 - k/m)`` when the slices are equal);
    - blocked: the n whose expected fill ``sum_l 64 B (1 - (1 - (1 - (63/64)^(r_l)) / B)^n)`` equals X
      (binomial block loads), solved by bisection.

    The interval inverts the fill's distribution in the normal approximation with its exact mean and variance
    (:func:`fill_moments`): ``low`` is the n at which ``E[X] + z sd[X]`` reaches X, ``high`` the n at which
    ``E[X] - z sd[X]`` does (z for the two-sided ``confidence``). It is good once a few dozen bits are set and
    the filter is not nearly full. Two facts are exact and override it: no bit set means no key (0, 0, 0), and
    X bits need at least ``ceil(X / k)`` keys (neither the estimate nor the lower bound goes below that). All
    settable bits set (for blocked with k < 8 that is ``64 k`` bits per block) gives an estimate and upper bound
    of ``inf``.

    :param num_bits: m.
    :param num_hashes: k.
    :param bits_set: X, the number of 1 bits.
    :param layout: the layout.
    :param confidence: in (0, 1), default 0.95.
    :return: ``CountEstimate(estimate, low, high, confidence)``.

    >>> result = approx_count(10_000, 7, 5_034)
    >>> round(result.estimate), result.low < 1000 < result.high
    (1000, True)
    """
    from statistics import NormalDist

    layout = _layout(layout)
    m, k = _geometry(layout, num_bits, num_hashes)
    x = _check_bits_set(layout, m, k, bits_set)
    level = _probability("confidence", confidence)
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    estimate = _count_estimate(layout, m, k, x)

    def moments(items: float) -> tuple[float, float]:
        mean, variance = _set_bits_moments(layout, m, k, items)
        return mean, math.sqrt(variance)

    def upper_edge(items: float) -> float:
        mean, sd = moments(items)
        return mean + z * sd

    def lower_edge(items: float) -> float:
        mean, sd = moments(items)
        return mean - z * sd

    if x == 0:  # every key sets at least one bit: an empty filter holds no key, with certainty
        return CountEstimate(0.0, 0.0, 0.0, level)
    else:
        top = estimate if math.isfinite(estimate) else _upper_bracket(upper_edge, x, x / k)
        low = _solve_increasing(upper_edge, x, 0.0, top) if math.isfinite(top) else math.inf
    if not math.isfinite(estimate):
        high = math.inf
    else:
        top = _upper_bracket(lower_edge, x + 1e-9, max(estimate, 1.0) * 2.0)
        high = _solve_increasing(lower_edge, x, max(estimate, 0.0), top) if math.isfinite(top) else math.inf
    fewest = math.ceil(x / k)
    return CountEstimate(estimate, max(min(low, estimate), fewest), max(high, estimate), level)


def fpr_from_fill(num_bits, num_hashes, bits_set, *, layout: str = "classic") -> float:
    """The current false-positive rate estimated from the fill: the layout's exact rate at the estimated count.

    ``false_positive_rate(m, approx_count(m, k, X).estimate, k, layout=layout)``; for classic this is close to
    ``(X/m)^k``. A full filter gives 1.

    :param num_bits: m.
    :param num_hashes: k.
    :param bits_set: X, the number of 1 bits.
    :param layout: the layout.
    :return: the estimated rate.

    >>> round(fpr_from_fill(10_000, 7, 5_034), 4)
    0.0082
    """
    layout = _layout(layout)
    m, k = _geometry(layout, num_bits, num_hashes)
    x = _check_bits_set(layout, m, k, bits_set)
    estimate = _count_estimate(layout, m, k, x)
    if not math.isfinite(estimate):
        return 1.0
    return _fpr(layout, m, estimate, k)
