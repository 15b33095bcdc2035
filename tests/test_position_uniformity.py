"""Every layout spreads keys uniformly over its positions: a chi-square test of the positions keys map to.

Two checks per layout: the chi-square of all positions, and each position's count against its exact binomial
acceptance region. A biased reduction (say range-reducing by m - 1, so that the last bit is never used) breaks the formulas of
``bloomwise.theory`` without breaking any round trip; the golden files would catch it only for their own sizes.
The threshold is the chi-square quantile with a false-alarm probability of 1e-6 (``stats.FALSE_ALARM``), from the
Wilson-Hilferty approximation (accurate to a few percent of the quantile for 40 or more degrees of freedom, far
below the bias this test is for).
"""
from __future__ import annotations

import math

import pytest

from bloomwise import BloomFilter
from stats import FALSE_ALARM, binomial_acceptance

Z_ONE_SIDED = 4.753  # standard normal: Pr(Z > 4.753) = 1.0e-6


def chi_square_threshold(dof: int, z: float = Z_ONE_SIDED) -> float:
    """Wilson-Hilferty: the chi-square quantile ~ dof (1 - 2/(9 dof) + z sqrt(2/(9 dof)))^3."""
    c = 2.0 / (9.0 * dof)
    return dof * (1.0 - c + z * math.sqrt(c)) ** 3


def chi_square(counts, expected) -> float:
    return sum((c - e) ** 2 / e for c, e in zip(counts, expected))


@pytest.mark.parametrize("layout, num_bits, num_hashes", [
    ("classic", 64, 7), ("classic", 1000, 3), ("classic", 4099, 5),
    ("partitioned", 64, 4), ("partitioned", 1000, 5),
    ("blocked", 2048, 8), ("blocked", 5120, 8),
])
def test_positions_are_uniform(layout, num_bits, num_hashes):
    assert FALSE_ALARM == 1e-6
    f = BloomFilter.from_size(num_bits, num_hashes, layout=layout, seed=12345)
    keys = 40 * num_bits // num_hashes + 1000  # about 40 probes per position
    counts = [0] * num_bits
    for key in range(keys):
        for position in f._bit_indices(key):
            counts[position] += 1
    if layout == "partitioned":  # probe i lands in slice i: each position of a slice expects keys / slice size
        bounds = [i * num_bits // num_hashes for i in range(num_hashes + 1)]
        expected = [keys / (bounds[i + 1] - bounds[i]) for i in range(num_hashes)
                    for _ in range(bounds[i], bounds[i + 1])]
        dof = num_bits - num_hashes
    else:  # classic: k probes anywhere; blocked with k = 8: one probe per 64-bit lane of a uniform block
        expected = [keys * num_hashes / num_bits] * num_bits
        dof = num_bits - 1
    # Every single position too, in its exact binomial acceptance region (Bonferroni: 1e-6 over all m positions):
    # this is what catches one dead or doubled position in a large filter, which the chi-square dilutes.
    regions = {}
    for position, (count, mean) in enumerate(zip(counts, expected)):
        trials = keys if layout == "partitioned" else keys * num_hashes
        if mean not in regions:
            regions[mean] = binomial_acceptance(trials, mean / trials, FALSE_ALARM / num_bits)
        low, high = regions[mean]
        assert low <= count <= high, (f"{layout}: position {position} got {count} probes, expected {mean:.1f} "
                                      f"(acceptance region [{low}, {high}])")
    statistic = chi_square(counts, expected)
    assert statistic < chi_square_threshold(dof), (
        f"{layout}: chi-square {statistic:.1f} with {dof} degrees of freedom, threshold "
        f"{chi_square_threshold(dof):.1f}; least used position {counts.index(min(counts))} ({min(counts)} probes, "
        f"expected about {expected[counts.index(min(counts))]:.0f})")


def test_the_threshold_is_the_chi_square_quantile():
    """Against the exact 1 - 1e-6 quantiles (from the regularized incomplete gamma function): 131.4 for 63 degrees
    of freedom, 1226.0 for 999, 5614.4 for 5119."""
    assert chi_square_threshold(63) == pytest.approx(131.4, rel=0.005)
    assert chi_square_threshold(999) == pytest.approx(1226.0, rel=0.001)
    assert chi_square_threshold(5119) == pytest.approx(5614.4, rel=0.001)
