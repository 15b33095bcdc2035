"""False-positive rates per layout: classic, partitioned and blocked (split block).

    classic      p = (1 - (1 - 1/m)^(kn))^k  ~  (1 - e^(-kn/m))^k               Bloom 1970; Fan et al. 2000
    partitioned  p = prod_i (1 - (1 - 1/s_i)^n),  s_i = |[i*m//k, (i+1)*m//k)|  one probe per slice
    blocked      p = sum_j Bin(j; n, 1/B) prod_l P_l(j)    B = m/512 blocks of eight 64-bit lanes, j keys in
                   one-probe lane: P = 1 - (63/64)^j        the query's block (split block; k <= 8: one probe
                   two-probe lane: P = (63/64)(1 - 2 (63/64)^(2j) + (62/64)^(2j)) + (1/64)(1 - (63/64)^(2j))
                                                            per lane, k > 8: two in k - 8 lanes)

The binomial and Poisson probabilities (:func:`log_binomial_pmf`, in the saddle-point form of Loader's *Fast and
Accurate Computation of Binomial Probabilities*) are the one binomial routine of the library.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

from bloomwise._checks import check_count, check_flag
from bloomwise.theory._validate import BLOCK_BITS, LANE_BITS, LANES, check_geometry, check_layout

__all__ = ["false_positive_rate"]

_LOG_LANE_MISS = math.log1p(-1.0 / LANE_BITS)  # ln(63/64): one probe misses a given bit of its lane
_MIXTURE_TOLERANCE = 1e-13  # relative truncation error of the blocked layout's sum over block loads


# ---------------------------------------------------------------------------------------------------------
# False-positive rate per layout
# ---------------------------------------------------------------------------------------------------------
def fill_probability(size: float, throws: float) -> float:
    """Probability that a given one of `size` bits is set after `throws` uniform throws: 1 - (1 - 1/size)^throws."""
    if throws <= 0:
        return 0.0
    if size <= 1:
        return 1.0
    return -math.expm1(throws * math.log1p(-1.0 / size))


def power(base: float, exponent: float) -> float:
    """base**exponent for base in [0, 1] without 0**0 surprises (0**0 = 1, as the formulas need)."""
    if exponent == 0:
        return 1.0
    return 0.0 if base <= 0.0 else math.exp(exponent * math.log(base))


def _classic_fpr(m: int, n: float, k: int, exact: bool) -> float:
    if n == 0:
        return 0.0
    fill = fill_probability(m, k * n) if exact else -math.expm1(-k * n / m)
    return power(fill, k)


def slice_sizes(m: int, k: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Slices [i*m//k, (i+1)*m//k) have sizes m//k (k - m%k of them) and m//k + 1 (m%k of them)."""
    small = m // k
    larger = m % k
    return (small, k - larger), (small + 1, larger)


def partitioned_fpr(m: int, n: float, k: int, exact: bool) -> float:
    if n == 0:
        return 0.0
    log_fpr = 0.0
    for size, count in slice_sizes(m, k):
        if count == 0:
            continue
        fill = fill_probability(size, n) if exact else -math.expm1(-n / size)
        if fill <= 0.0:
            return 0.0
        log_fpr += count * math.log(fill)
    return math.exp(log_fpr)


def lane_probes(k: int) -> tuple[int, int]:
    """(lanes with one probe, lanes with two probes) of the blocked layout: probe i goes to lane i mod 8."""
    double = max(0, k - LANES)
    return min(k, LANES) - double, double


_BOTH_MISS = (1.0 - 2.0 / LANE_BITS) ** 2  # (62/64)^2: one key's two probes both miss two given bits


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
    return (1.0 - 1.0 / LANE_BITS) * (1.0 - 2.0 * y + both_miss) + (1.0 - y) / LANE_BITS


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


def log_binomial_pmf(n: int, j: int, q: float) -> float:
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


def blocked_mixture(n: int | float, num_blocks: int, ks: Sequence[int], poisson: bool,
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
    lanes = [lane_probes(k) for k in ks]
    count = len(lanes)
    if num_blocks == 1 and not poisson:
        j = int(n)
        if j == 0:
            return [0.0] * count
        x = (1.0 - 1.0 / LANE_BITS) ** j
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
            return log_binomial_pmf(n, j, q)
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
    """The common case of :func:`blocked_mixture` (every load visited): plain arithmetic, no logarithms.

    Walks j up and down from the mode with pmf(j +- 1) from pmf(j) (binomial: ratio (n - j)/(j + 1) times the
    odds 1/(B - 1); Poisson: lam/(j + 1)), and x = (63/64)^j, (62/64)^(2j) by repeated multiplication. Same
    geometric-tail stopping rule.
    """
    count = len(lanes)
    totals = [0.0] * count
    lane_miss = 1.0 - 1.0 / LANE_BITS
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


def blocked_fprs(num_blocks: int, n: float, ks: Sequence[int], exact: bool) -> list[float]:
    """Blocked FPR for several k at once (they share the load distribution); a non-integer n interpolates
    linearly between the neighbouring integers (exact form) or uses the Poisson form directly."""
    if n == 0:
        return [0.0] * len(ks)
    if not exact:
        return blocked_mixture(n, num_blocks, ks, poisson=True, coincident=False)
    low = math.floor(n)
    if low == n:
        return blocked_mixture(int(n), num_blocks, ks, poisson=False)
    fraction = n - low
    below = blocked_mixture(low, num_blocks, ks, poisson=False) if low > 0 else [0.0] * len(ks)
    above = blocked_mixture(low + 1, num_blocks, ks, poisson=False)
    return [a + fraction * (b - a) for a, b in zip(below, above)]


def layout_fpr(layout: str, m: int, n: float, k: int, exact: bool = True) -> float:
    """Unvalidated false-positive rate (internal; m and k already checked for the layout)."""
    if layout == "classic":
        return _classic_fpr(m, n, k, exact)
    if layout == "partitioned":
        return partitioned_fpr(m, n, k, exact)
    return blocked_fprs(m // BLOCK_BITS, n, (k,), exact)[0]


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
    layout = check_layout(layout)
    exact = check_flag("exact", exact)
    m, k = check_geometry(layout, num_bits, num_hashes)
    n = check_count("num_items", num_items)
    return layout_fpr(layout, m, n, k, exact)
