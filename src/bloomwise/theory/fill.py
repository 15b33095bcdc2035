"""From the number of bits set: the expected fill, how many keys a filter holds, and its current rate.

    count        n ~ -(m/k) ln(1 - X/m)  from X bits set                          Swamidass & Baldi 2007
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

from bloomwise._checks import check_count, check_integer, check_probability
from bloomwise.theory._validate import BLOCK_BITS, LANE_BITS, LANES, check_geometry, check_layout
from bloomwise.theory.rates import lane_probes, layout_fpr, power, slice_sizes

__all__ = ["CountEstimate", "approx_count", "fpr_from_fill", "fill_moments"]

# ---------------------------------------------------------------------------------------------------------
# From the number of bits set: how many keys, and the current false-positive rate
# ---------------------------------------------------------------------------------------------------------
def _pair_term(y: float, d: float, n: float) -> float:
    """``x^n - y^n`` for ``x = y + d`` without cancellation: ``y^n expm1(n ln(1 + d/y))``."""
    if d == 0.0 or n == 0:
        return 0.0
    if y <= 0.0:
        return power(y + d, n)
    ratio = d / y
    if ratio <= -1.0:
        return -power(y, n)
    return power(y, n) * math.expm1(n * math.log1p(ratio))


def _one_array_unset_moments(size: int, throws_per_key: int, n: float) -> tuple[float, float]:
    """Mean and variance of the number of 0 bits among `size`, n keys each throwing `throws_per_key` times."""
    if n == 0:
        return float(size), 0.0
    if size == 1:
        return 0.0, 0.0
    u = power(1.0 - 1.0 / size, throws_per_key)          # a key misses a given bit
    mean_one = power(u, n)
    # a key misses two given bits: (1 - 2/s)^t = u^2 (1 - 1/(s-1)^2)^t
    y = u * u
    d = y * (power(1.0 - 1.0 / (size - 1) ** 2, throws_per_key) - 1.0) if size > 2 else -y
    variance = size * mean_one * (1.0 - mean_one) + size * (size - 1) * _pair_term(y, d, n)
    return size * mean_one, max(variance, 0.0)


def _blocked_unset_moments(num_blocks: int, k: int, n: float) -> tuple[float, float]:
    """Mean and variance of the 0 bits among the lanes a blocked filter can set (exact, binomial block loads).

    A key touches a given bit of a lane with r probes with probability a_r = (1 - (63/64)^r) / B. For two bits:
    same lane, ``P(key misses both) - (1-a)^2 = (2(1-q^r) - (1-(62/64)^r))/B - a^2``; same block, other lanes:
    ``(B-1) a a'``; other blocks: ``-a a'``. Each pair contributes ``x^n - y^n``, computed without cancellation.
    """
    single, double = lane_probes(k)
    lanes = [(1, single), (2, double)]
    lanes = [(r, count) for r, count in lanes if count]
    B = num_blocks
    a = {r: (1.0 - (1.0 - 1.0 / LANE_BITS) ** r) / B for r, _ in lanes}
    mean = 0.0
    variance = 0.0
    for r, count in lanes:
        bits = B * count * LANE_BITS
        p_unset = power(1.0 - a[r], n)
        mean += bits * p_unset
        variance += bits * p_unset * (1.0 - p_unset)
        # same block, same lane, two different bits
        same_lane_excess = (2.0 * (1.0 - (63 / 64) ** r) - (1.0 - (62 / 64) ** r)) / B - a[r] ** 2
        variance += B * count * LANE_BITS * (LANE_BITS - 1) * _pair_term((1.0 - a[r]) ** 2, same_lane_excess, n)
    for r1, c1 in lanes:
        for r2, c2 in lanes:
            y = (1.0 - a[r1]) * (1.0 - a[r2])
            lane_pairs = c1 * (c2 - 1) if r1 == r2 else c1 * c2
            if B > 1:
                # same block, different lanes: positively correlated through the block's load
                variance += B * lane_pairs * LANE_BITS ** 2 * _pair_term(y, (B - 1) * a[r1] * a[r2], n)
                # different blocks: slightly negatively correlated (a key goes to one block only)
                variance += B * (B - 1) * c1 * c2 * LANE_BITS ** 2 * _pair_term(y, -a[r1] * a[r2], n)
    return mean, max(variance, 0.0)


def _settable_bits(layout: str, m: int, k: int) -> int:
    if layout == "blocked":
        return (m // BLOCK_BITS) * min(k, LANES) * LANE_BITS
    return m


def _set_bits_moments(layout: str, m: int, k: int, n: float) -> tuple[float, float]:
    """Mean and variance of the number of set bits after n keys (ideal hashing)."""
    settable = _settable_bits(layout, m, k)
    if layout == "classic":
        unset_mean, variance = _one_array_unset_moments(m, k, n)
    elif layout == "partitioned":
        unset_mean = variance = 0.0
        for size, count in slice_sizes(m, k):
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
    layout = check_layout(layout)
    m, k = check_geometry(layout, num_bits, num_hashes)
    n = check_count("num_items", num_items)
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
    x = check_integer("bits_set", bits_set, minimum=0)
    settable = _settable_bits(layout, m, k)
    if x > settable:
        where = (f"a blocked filter with k={k} can set at most {settable} of its {m} bits "
                 f"({min(k, LANES)} lanes of 64 per block)" if layout == "blocked" else f"num_bits is {m}")
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

    layout = check_layout(layout)
    m, k = check_geometry(layout, num_bits, num_hashes)
    x = _check_bits_set(layout, m, k, bits_set)
    level = check_probability("confidence", confidence)
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
    layout = check_layout(layout)
    m, k = check_geometry(layout, num_bits, num_hashes)
    x = _check_bits_set(layout, m, k, bits_set)
    estimate = _count_estimate(layout, m, k, x)
    if not math.isfinite(estimate):
        return 1.0
    return layout_fpr(layout, m, estimate, k)
