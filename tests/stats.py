"""Statistical helpers for tests: exact binomial acceptance regions with a stated false-alarm probability."""
from __future__ import annotations

import math

#: Every statistical test in the suite fails by chance with at most this probability.
FALSE_ALARM = 1e-6


def _log_pmf(k: int, n: int, p: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(p) + (n - k) * math.log1p(-p))


def binomial_acceptance(n: int, p: float, false_alarm: float = FALSE_ALARM) -> tuple[int, int]:
    """[low, high] such that Pr(X < low) <= false_alarm/2 and Pr(X > high) <= false_alarm/2, X ~ Bin(n, p).

    Exact: sums the pmf outward from each tail (no normal approximation).
    """
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    half = false_alarm / 2
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    width = int(12 * sd + 50)
    low, tail = max(0, int(mean) - width), 0.0
    for k in range(low, int(mean) + 1):  # lower tail: largest `low` with Pr(X < low) <= half
        mass = math.exp(_log_pmf(k, n, p))
        if tail + mass > half:
            low = k
            break
        tail += mass
    high, tail = min(n, int(mean) + width), 0.0
    for k in range(high, int(mean) - 1, -1):
        mass = math.exp(_log_pmf(k, n, p))
        if tail + mass > half:
            high = k
            break
        tail += mass
    return low, high


def assert_rate_matches(observed: int, trials: int, expected_rate: float, what: str,
                        false_alarm: float = FALSE_ALARM) -> None:
    """Fail when `observed` events in `trials` are outside the exact binomial acceptance region (both tails)."""
    low, high = binomial_acceptance(trials, expected_rate, false_alarm)
    assert low <= observed <= high, (
        f"{what}: observed {observed}/{trials} = {observed / trials:.5g}, theory {expected_rate:.5g}; "
        f"acceptance region [{low}, {high}] at false-alarm probability {false_alarm:g}")
