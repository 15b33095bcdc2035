"""Sizing: the integer number of hashes, the smallest filter for a target rate, bits per key, and plan().

    best real k  k* = b ln 2, then p = 2^-k* = 0.6185^b                           Fan et al. 2000
    integer k    the better of floor(b ln 2) and ceil(b ln 2) by the FP formula (never 0)
    sizing       m = -n ln p / (ln 2)^2 = 1.44 n log2(1/p);  limit: log2(1/p) bits per key
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional

from bloomwise._checks import check_count, check_integer, check_probability
from bloomwise.theory._validate import (
    BLOCK_BITS, LANES, LN2, MAX_BLOCKED_HASHES, MAX_BLOCKED_NUM_BITS, MAX_NUM_CELLS, check_geometry, check_layout,
    check_num_cells, check_reachable, num_blocks_of, round_up,
)
from bloomwise.theory.rates import blocked_fprs, blocked_mixture, fill_probability, layout_fpr, partitioned_fpr

__all__ = ["optimal_num_hashes", "optimal_num_hashes_real", "optimal_size", "bits_per_item", "Plan", "plan"]

_CONSISTENCY_SLACK = 0.01  # plan(): a given p is met if the FPR is at most p * (1 + slack)


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
    m = check_integer("num_bits", num_bits, minimum=1)
    n = check_count("num_items", num_items)
    return math.inf if n == 0 else m / n * LN2


def best_of_floor_ceil(real_k: float, rate: Callable[[int], float], k_max: Optional[int] = None) -> int:
    """The rule of *Computation of k*: evaluate the rate at floor(k*) and ceil(k*), keep the smaller (ties: the smaller k).

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
        return layout_fpr(layout, m, n, k, exact)

    k = best_of_floor_ceil(m / n * LN2, rate, k_max)
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
_BLOCKED_CANDIDATE_KS = tuple(range(LANES, MAX_BLOCKED_HASHES + 1))


def _blocked_best(m: int, n: float, exact: bool = True) -> tuple[int, float]:
    """(k, FPR) minimising the blocked layout's rate over k = 1..16 (ties: the smaller k)."""
    if n == 0:
        return 1, 0.0
    rates = blocked_fprs(m // BLOCK_BITS, n, _BLOCKED_CANDIDATE_KS, exact)
    best = min(range(len(rates)), key=lambda i: (rates[i], i))
    return _BLOCKED_CANDIDATE_KS[best], rates[best]


def _best_k(layout: str, m: int, n: float) -> int:
    if layout == "blocked":
        return _blocked_best(m, n)[0]
    return _classic_or_partitioned_k(layout, m, n)


def optimal_num_hashes(num_bits, num_items, *, layout: str = "classic") -> int:
    """The integer number of hashes that minimises the layout's exact false-positive rate.

    Classic and partitioned: the rule of the note *Computation of k*: with b = m/n, evaluate the FP formula at
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
    layout = check_layout(layout)
    m = check_integer("num_bits", num_bits, minimum=1)
    if layout == "blocked":
        num_blocks_of(m)
    n = check_count("num_items", num_items)
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
    while size > 1 and fill_probability(size - 1, throws) <= target_fill:
        size -= 1
    while fill_probability(size, throws) > target_fill:
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
    log_small = math.log(fill_probability(size - 1, n))
    log_large = math.log(fill_probability(size, n))
    if log_small >= 0.0 or log_large >= log_small:  # full slices, or no resolution left: start from k * size
        larger = k
    else:
        needed = (math.log(p) - k * log_small) / (log_large - log_small)
        larger = min(k, max(0, math.ceil(needed - 1e-9)))
    m = k * (size - 1) + larger
    while m > k and partitioned_fpr(m - 1, n, k, True) <= p:
        m -= 1
    while partitioned_fpr(m, n, k, True) > p:
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
            cache[kk] = blocked_fprs(num_blocks, n, (kk,), True)[0]
        return cache[kk]

    neighbours = [kk for kk in (k - 1, k, k + 1) if LANES <= kk <= MAX_BLOCKED_HASHES]
    values = blocked_fprs(num_blocks, n, neighbours, True)
    cache.update(zip(neighbours, values))
    best = min(neighbours, key=lambda kk: (cache[kk], kk))
    step = -1 if best == neighbours[0] and best > LANES else 1 if best == neighbours[-1] else 0
    while step and LANES <= best + step <= MAX_BLOCKED_HASHES and rate(best + step) < rate(best):
        best += step
    hint[0] = best
    return cache[best]


def _blocked_bits_for_k(n: float, p: float, k: int) -> int:
    guess = _classic_bits_for_k(n, p, k)
    blocks = _blocked_blocks(p, lambda b: blocked_fprs(b, n, (k,), True)[0], guess)
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
    if layout_fpr(layout, m, n, k) > p:  # the floor/ceil rule missed the argmin (only at float-level ties)
        k = min(kk for kk, size in sizes.items() if size == m)
    return m, k


#: plan() takes at most 2^64 keys: a filter hashes each key to 64 bits, so it cannot tell more keys apart.
MAX_PLAN_KEYS = 2 ** 64


@lru_cache(maxsize=512)
def _optimal_size(n: float, p: float, layout: str) -> tuple[int, int]:
    if n == 0:
        return (BLOCK_BITS if layout == "blocked" else 1), 1
    if layout != "blocked":
        return _classic_like_size(layout, n, p)
    guess = _classic_like_size("classic", n, p)[0]
    hint = [min(MAX_BLOCKED_HASHES, max(LANES, round(math.log2(1.0 / p))))]
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
    layout = check_layout(layout)
    return size_for("num_items", num_items, fpr, layout)


def size_for(name: str, num_items, fpr, layout: str) -> tuple[int, int]:
    """:func:`optimal_size`, with errors that call the number of keys ``name`` (``"capacity"`` in the structures):
    ValueError, fast, when no filter bloomwise can build meets ``fpr`` at that many keys."""
    n = check_count(name, num_items)
    p = check_probability("fpr", fpr)
    check_reachable(n, p, layout, name)
    m, k = _optimal_size(n, p, layout)
    try:
        check_num_cells("num_cells", m, layout)
    except ValueError:
        raise ValueError(f"{name}={float(n):.4g} at a false-positive rate of {p:g} needs {m:,} cells, more than the "
                         f"largest {layout} filter: lower {name} or raise the rate") from None
    return m, k


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
        return min(blocked_mixture(BLOCK_BITS / b, 1, _BLOCKED_CANDIDATE_KS, poisson=True))

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
    layout = check_layout(layout)
    p = check_probability("fpr", fpr)
    if num_items is None:
        return _bits_per_item_limit(p, layout)
    n = check_count("num_items", num_items)
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
        """Bits per key over the information-theoretic limit (about 1.44 for a classic filter; infinite at p = 1)."""
        limit = self.information_limit
        return self.bits_per_key / limit if limit > 0 else math.inf

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
    return check_integer(name, value, minimum=minimum)


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


_bits_for_k = {"classic": _classic_bits_for_k, "partitioned": _partitioned_bits_for_k, "blocked": _blocked_bits_for_k}


def _check_k_for_layout(layout: str, m: int, k: int) -> None:
    check_geometry(layout, m, k)


def plan(n=None, p=None, m=None, k=None, *, layout: str = "classic") -> Plan:
    """Solve for the missing ones of n (keys), p (false-positive rate), m (bits), k (hashes).

    Sufficient inputs: two of n, p, m, with or without k. When both n and m are given, k (if missing) is chosen
    and a given p is checked instead of solved: the inputs are inconsistent (ValueError) if the rate they give
    exceeds p by more than 1%.

    Every layout is solved with its exact rate (:func:`false_positive_rate`), so a plan is exactly the filter
    that a structure built with the same inputs gets: n and p give :func:`optimal_size` (``BloomFilter(n, p,
    layout=...)`` has that m and k); n, p and k give the smallest m whose rate with k hashes is at most p; m and p
    give the largest n whose rate with the best integer k (or the given k) is at most p; n and m give the best
    integer k (:func:`optimal_num_hashes`). For the classic layout the numbers are within a few bits of the
    closed forms of the well-known online calculators (``m = ceil(-n ln p / ln^2 2)``), which round the best real
    k instead of using the exact rate. m is a multiple of 512 for blocked. Whatever the layout, the plan reports
    the exact rate every layout gives at (m, k).

    :param n: number of keys (>= 1, at most 2^64).
    :param p: false-positive rate in (0, 1).
    :param m: number of bits (>= 1, at most the largest filter of the layout).
    :param k: number of hashes (>= 1).
    :param layout: the layout to size for.
    :return: a :class:`Plan`.
    :raises ValueError: when the inputs are insufficient (it says what is missing), inconsistent, or need a
        filter larger than bloomwise builds (it names the parameter).

    >>> result = plan(n=10_000, p=0.001)
    >>> result.m, result.k
    (143777, 10)
    >>> plan(n=40_000_000, p=1e-6).m
    1150211148
    """
    layout = check_layout(layout)
    n = None if n is None else _whole("n", n, 1)
    if n is not None and n > MAX_PLAN_KEYS:
        raise ValueError(f"n must be at most 2^64 (keys are hashed to 64 bits), got about 10^{len(str(n)) - 1}")
    p = None if p is None else check_probability("p", p)
    m = None if m is None else check_num_cells("m", _whole("m", m, 1), layout)
    k = None if k is None else _whole("k", k, 1)
    given = tuple(name for name, value in (("n", n), ("p", p), ("m", m), ("k", k)) if value is not None)
    if layout == "blocked" and m is not None:
        num_blocks_of(m)
    if layout == "blocked" and k is not None and k > MAX_BLOCKED_HASHES:
        raise ValueError(f"k must be between 1 and {MAX_BLOCKED_HASHES} for the blocked layout, got {k}")

    if n is not None and m is not None:
        if k is None:
            k = _best_k(layout, m, n)
        _check_k_for_layout(layout, m, k)
        rate = layout_fpr(layout, m, n, k)
        if p is not None and rate > p * (1.0 + _CONSISTENCY_SLACK):
            raise ValueError(
                f"inconsistent: n={n}, m={m}, k={k} give a {layout} false-positive rate of {rate:.4g}, "
                f"above p={p:.4g}; drop one of them, or raise m or p")
    elif n is not None and p is not None:
        if k is None:
            m, k = size_for("n", n, p, layout)  # exactly what a structure of capacity n and this fpr gets
        else:
            check_reachable(n, p, layout, "n")
            m = _bits_for_k[layout](n, p, k)
            if m > (MAX_BLOCKED_NUM_BITS if layout == "blocked" else MAX_NUM_CELLS):
                raise ValueError(f"n={n:,} at p={p:.4g} with k={k} needs m={m:,} bits, out of reach of the largest "
                                 f"{layout} filter: raise k or p, or lower n")
    elif m is not None and p is not None:
        if k is None:
            n = _largest_n(m, p, lambda items: _best_rate(layout, m, items))
            if n >= 1:
                k = _best_k(layout, m, n)
        else:
            _check_k_for_layout(layout, m, k)
            n = _largest_n(m, p, lambda items: layout_fpr(layout, m, items, k))
        if n < 1:
            raise ValueError(f"m={m} bits cannot hold even one key at p={p:.4g} with the {layout} layout; "
                             f"raise m or p")
    else:
        raise ValueError(_missing_message(given))

    _check_k_for_layout(layout, m, k)
    solved = tuple(name for name in ("n", "p", "m", "k") if name not in given)
    if p is None:
        p = layout_fpr(layout, m, n, k)
    blocked_bits = round_up(m, BLOCK_BITS)
    return Plan(
        n=n, p=p, m=m, k=k, layout=layout,
        fpr_classic=layout_fpr("classic", m, n, k),
        fpr_partitioned=layout_fpr("partitioned", m, n, k) if k <= m else None,
        fpr_blocked=layout_fpr("blocked", blocked_bits, n, k) if k <= MAX_BLOCKED_HASHES else None,
        blocked_num_bits=blocked_bits, solved=solved,
    )


def _best_rate(layout: str, m: int, n: float) -> float:
    """The layout's exact rate with its best integer k."""
    if layout == "blocked":
        return _blocked_best(m, n)[1]
    return layout_fpr(layout, m, n, _classic_or_partitioned_k(layout, m, n))


def _missing_message(given: tuple[str, ...]) -> str:
    names = {"n": "n (keys)", "p": "p (false-positive rate)", "m": "m (bits)", "k": "k (hashes)"}
    if not given:
        return "plan needs two of n (keys), p (false-positive rate) and m (bits); none was given"
    got = " and ".join(names[name] for name in given)
    if set(given) == {"p", "k"}:
        return (f"{got} fix the bits per key but not the size: also give n (keys) or m (bits)")
    missing = [names[name] for name in ("n", "p", "m") if name not in given]
    return f"{got} {'is' if len(given) == 1 else 'are'} not enough: also give {' or '.join(missing)}"
