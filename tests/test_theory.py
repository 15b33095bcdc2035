"""bloomwise.theory: hand-computed values, the Summary Cache tables, the calculator, and Monte-Carlo checks.

Statistical tests (Monte-Carlo runs of bloomwise's own filters and of numpy models) are two-sided: they fail
when the measurement is implausibly far above *or below* theory. Each one fails by chance with probability at
most 1e-6 (``stats.FALSE_ALARM``): exact binomial acceptance regions where the count is binomial, and a 5.03-sigma
normal bound (two-sided 4.9e-7) where a filter-to-filter spread is added; the file makes about 20 such checks, so
the whole file fails by chance with probability below 2e-5. All random streams are seeded.
"""
from __future__ import annotations

import doctest
import math
import subprocess
import sys
import time
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings, strategies as st

from bloomwise import theory
from bloomwise.reproduce import summary_cache as _tables
from bloomwise.reproduce.summary_cache import figure4_data, fp_table, fp_table_differences
from bloomwise.theory import (
    approx_count, bits_per_item, counter_overflow_bound, expected_max_count, false_positive_rate,
    fill_moments, fpr_from_fill, inverse_gamma, optimal_num_hashes, optimal_num_hashes_real, optimal_size, plan,
)
from stats import FALSE_ALARM, binomial_acceptance

LN2 = math.log(2)
Z_SPREAD = 5.03  # two-sided normal tail 4.9e-7; with a 5e-7 binomial region the check's false alarm is <= 1e-6
BINOMIAL_PART = 5e-7


# ---------------------------------------------------------------------------------------------------------
# Exact references (fractions) for small cases
# ---------------------------------------------------------------------------------------------------------
def classic_exact(m, n, k):
    return (1 - (1 - Fraction(1, m)) ** (k * n)) ** k


def partitioned_exact(m, n, k):
    result = Fraction(1)
    for i in range(k):
        size = (i + 1) * m // k - i * m // k
        result *= 1 - (1 - Fraction(1, size)) ** n
    return result


def blocked_exact(m, n, k, coincident=True):
    """Sum over every load j of the query's block, in rationals."""
    blocks = m // 512
    single, double = max(0, min(k, 8) - max(0, k - 8)), max(0, k - 8)
    miss = Fraction(63, 64)
    total = Fraction(0)
    for j in range(1, n + 1):
        pmf = math.comb(n, j) * Fraction(1, blocks) ** j * (1 - Fraction(1, blocks)) ** (n - j)
        if coincident:
            two = Fraction(63, 64) * (1 - 2 * miss ** (2 * j) + Fraction(62, 64) ** (2 * j)) \
                + Fraction(1, 64) * (1 - miss ** (2 * j))
        else:
            two = (1 - miss ** (2 * j)) ** 2
        total += pmf * (1 - miss ** j) ** single * two ** double
    return total


# ---------------------------------------------------------------------------------------------------------
# false_positive_rate
# ---------------------------------------------------------------------------------------------------------
def test_hand_computed_rates():
    assert false_positive_rate(10, 1, 1) == pytest.approx(0.1, rel=1e-14)
    # m = 5, n = 2, k = 2: (1 - 0.8^4)^2 = 0.5904^2
    assert false_positive_rate(5, 2, 2) == pytest.approx(0.5904 ** 2, rel=1e-14)
    # Summary Cache's numbers: m/n = 10, k = 4 -> 1.2%; 1M pages at m/n = 16 with k = 10 -> 0.00047
    # (literature.md's "check: 4.68e-4" is off: (1 - e^(-10/16))^10 = 4.700e-4)
    assert false_positive_rate(10, 1, 4, exact=False) == pytest.approx(0.0118, abs=5e-5)
    assert false_positive_rate(16, 1, 10, exact=False) == pytest.approx(4.700e-4, abs=1e-7)
    assert false_positive_rate(16_000_000, 1_000_000, 10) == pytest.approx(4.700e-4, abs=1e-7)
    # partitioned m = 10, k = 3: slices 3, 3, 4
    assert false_positive_rate(10, 2, 3, layout="partitioned") == pytest.approx(
        float(Fraction(5, 9) ** 2 * Fraction(7, 16)), rel=1e-14)
    # blocked, one block, one key: the query passes if its probe hits that key's bit in the lane
    assert false_positive_rate(512, 1, 1, layout="blocked") == pytest.approx(1 / 64, rel=1e-14)
    # two blocks: the key is in the query's block half of the time
    assert false_positive_rate(1024, 1, 1, layout="blocked") == pytest.approx(1 / 128, rel=1e-14)


@pytest.mark.parametrize("m, n, k", [(7, 3, 2), (100, 10, 5), (1000, 100, 7), (64, 64, 1), (3, 5, 3)])
def test_classic_and_partitioned_match_rationals(m, n, k):
    assert false_positive_rate(m, n, k) == pytest.approx(float(classic_exact(m, n, k)), rel=1e-12)
    assert false_positive_rate(m, n, k, layout="partitioned") == pytest.approx(
        float(partitioned_exact(m, n, k)), rel=1e-12)


@pytest.mark.parametrize("m, n, k", [(512, 3, 4), (1024, 1, 8), (2048, 10, 9), (4096, 60, 16), (5120, 200, 12),
                                     (10240, 700, 8), (1536, 5, 1), (1024, 300, 16)])
def test_blocked_matches_the_full_sum_in_rationals(m, n, k):
    assert false_positive_rate(m, n, k, layout="blocked") == pytest.approx(float(blocked_exact(m, n, k)), rel=1e-12)


def test_blocked_approximate_form_is_the_documented_product():
    """exact=False: docs/architecture.md's product over lanes, over Poisson(n/B) block loads."""
    m, n, k = 512 * 200, 3000, 12
    lam = n / 200
    expected = math.fsum(
        math.exp(j * math.log(lam) - lam - math.lgamma(j + 1))
        * (1 - (63 / 64) ** j) ** 4 * (1 - (63 / 64) ** (2 * j)) ** 8 for j in range(1, 400))
    assert false_positive_rate(m, n, k, layout="blocked", exact=False) == pytest.approx(expected, rel=1e-10)
    # for k <= 8 the lane factors are the same; the exact form differs only by binomial vs Poisson loads
    assert false_positive_rate(512 * 1000, 20_000, 8, layout="blocked", exact=False) == pytest.approx(
        false_positive_rate(512 * 1000, 20_000, 8, layout="blocked"), rel=2e-3)


def test_blocked_handles_huge_and_overloaded_filters():
    # 10^10 keys: the pmf is taken in saddle-point form, so this is as precise as a small case
    big = false_positive_rate(512 * 600_000_000, 10 ** 10, 16, layout="blocked")
    small = false_positive_rate(512 * 60_000, 10 ** 6, 16, layout="blocked")
    assert big == pytest.approx(small, rel=1e-4)
    # overloaded: thousands of keys per block (the strided sum) -> a rate near 1, never above
    assert 0.99 < false_positive_rate(512 * 10, 10 ** 6, 8, layout="blocked") <= 1.0


def test_approximate_forms():
    assert false_positive_rate(1000, 100, 7, exact=False) == pytest.approx((1 - math.exp(-0.7)) ** 7, rel=1e-14)
    assert false_positive_rate(1000, 100, 7, layout="partitioned", exact=False) == pytest.approx(
        (1 - math.exp(-100 / 142)) ** 1 * (1 - math.exp(-100 / 143)) ** 6, rel=1e-14)
    # exact and approximate agree for large m
    assert false_positive_rate(10 ** 9, 10 ** 8, 7) == pytest.approx(
        false_positive_rate(10 ** 9, 10 ** 8, 7, exact=False), rel=1e-7)


def test_edge_cases():
    for layout, m in (("classic", 1000), ("partitioned", 1000), ("blocked", 1024)):
        assert false_positive_rate(m, 0, 3, layout=layout) == 0.0
        assert false_positive_rate(m, 0.0, 3, layout=layout) == 0.0
    assert false_positive_rate(1, 1, 1) == 1.0  # one bit, set by the first key
    assert false_positive_rate(1, 5, 3) == 1.0
    assert false_positive_rate(1, 1, 1, layout="partitioned") == 1.0
    assert false_positive_rate(3, 1, 3, layout="partitioned") == 1.0  # slices of one bit
    assert false_positive_rate(10 ** 12, 1, 1) == pytest.approx(1e-12, rel=1e-9)  # tiny rates keep precision
    # a real (expected) count is allowed and lies between its integer neighbours
    for layout, m in (("classic", 1000), ("blocked", 1024)):
        low, mid, high = (false_positive_rate(m, n, 4, layout=layout) for n in (50, 50.5, 51))
        assert low < mid < high


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 10 ** 7), n=st.integers(0, 10 ** 6), k=st.integers(1, 30))
def test_monotone_in_n_and_m(m, n, k):
    assume(k <= m)
    for layout in ("classic", "partitioned"):
        rate = false_positive_rate(m, n, k, layout=layout)
        assert 0.0 <= rate <= 1.0
        assert false_positive_rate(m, n + 1, k, layout=layout) >= rate
        assert false_positive_rate(m + 1, n, k, layout=layout) <= rate * (1 + 1e-12)


@settings(max_examples=25, deadline=None)
@given(blocks=st.integers(1, 5000), n=st.integers(0, 200_000), k=st.integers(1, 16))
def test_blocked_monotone(blocks, n, k):
    rate = false_positive_rate(512 * blocks, n, k, layout="blocked")
    assert 0.0 <= rate <= 1.0
    assert false_positive_rate(512 * blocks, n + 1, k, layout="blocked") >= rate * (1 - 1e-12)
    assert false_positive_rate(512 * (blocks + 1), n, k, layout="blocked") <= rate * (1 + 1e-12)


# ---------------------------------------------------------------------------------------------------------
# Integer k, sizing
# ---------------------------------------------------------------------------------------------------------
def test_integer_k_rule_of_seed_003():
    # literature.md section 0: b = 4, 6, 8, 10 -> 3, 4, 6, 7 (n = 3,328, the paradox simulation)
    assert [optimal_num_hashes(b * 3328, 3328) for b in (4, 6, 8, 10)] == [3, 4, 6, 7]
    assert [optimal_num_hashes(b * 10 ** 6, 10 ** 6) for b in (4, 6, 8, 10)] == [3, 4, 6, 7]
    # the rates it compares (b = 4: 0.1469 vs 0.1548)
    assert false_positive_rate(4, 1, 3, exact=False) == pytest.approx(0.1469, abs=1e-4)
    assert false_positive_rate(4, 1, 2, exact=False) == pytest.approx(0.1548, abs=1e-4)
    assert optimal_num_hashes(1, 10) == 1  # b ln 2 < 1: never 0
    assert optimal_num_hashes(1000, 0) == 1
    assert optimal_num_hashes_real(10, 1) == pytest.approx(10 * LN2)
    assert optimal_num_hashes_real(10, 0) == math.inf


@settings(max_examples=80, deadline=None)
@given(m=st.integers(2, 10 ** 6), n=st.integers(1, 10 ** 5))
def test_integer_k_is_the_best_integer(m, n):
    for layout in ("classic", "partitioned"):
        k = optimal_num_hashes(m, n, layout=layout)
        top = min(m, 64) if layout == "partitioned" else 64
        best = min(false_positive_rate(m, n, kk, layout=layout) for kk in range(1, top + 1))
        assert false_positive_rate(m, n, k, layout=layout) <= best * (1 + 1e-12)


@pytest.mark.parametrize("blocks, n", [(1, 10), (20, 1000), (2000, 10 ** 5), (100, 100), (3, 10 ** 4)])
def test_blocked_k_is_the_best_of_1_to_16(blocks, n):
    m = 512 * blocks
    k = optimal_num_hashes(m, n, layout="blocked")
    rates = [false_positive_rate(m, n, kk, layout="blocked") for kk in range(1, 17)]
    assert rates[k - 1] == min(rates)


def _min_rate(layout, m, n):
    ks = range(1, 17) if layout == "blocked" else range(1, min(m, 80) + 1)
    return min(false_positive_rate(m, n, k, layout=layout) for k in ks)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 10 ** 7), exponent=st.floats(0.05, 12.0))
def test_optimal_size_is_the_smallest(n, exponent):
    p = 10.0 ** -exponent
    for layout in ("classic", "partitioned"):
        m, k = optimal_size(n, p, layout=layout)
        assert false_positive_rate(m, n, k, layout=layout) <= p
        assert m == 1 or _min_rate(layout, m - 1, n) > p


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 10 ** 7), exponent=st.floats(0.3, 9.0))
def test_optimal_size_blocked_is_the_smallest(n, exponent):
    p = 10.0 ** -exponent
    m, k = optimal_size(n, p, layout="blocked")
    assert m % 512 == 0 and 1 <= k <= 16
    assert false_positive_rate(m, n, k, layout="blocked") <= p
    assert m == 512 or _min_rate("blocked", m - 512, n) > p


def test_optimal_size_values_and_limits():
    assert optimal_size(1000, 0.01) == (9594, 7)
    assert optimal_size(0, 0.01) == (1, 1)
    assert optimal_size(0, 0.01, layout="blocked") == (512, 1)
    assert optimal_size(1, 0.999) == (2, 1)
    m, k = optimal_size(5, 1e-300)
    assert false_positive_rate(m, 5, k) <= 1e-300 and k > 900
    m, k = optimal_size(10 ** 10, 1e-6)  # 10^10 keys: the exact optimum is a few bits above -n ln p / ln^2 2
    assert 0 <= m - 10 ** 10 * math.log(1e6) / LN2 ** 2 < 10 ** 10 * 0.01
    # blocked filters need more bits than classic ones for the same rate
    assert optimal_size(10 ** 6, 0.01, layout="blocked")[0] > optimal_size(10 ** 6, 0.01)[0]
    with pytest.raises(ValueError, match="out of reach of the blocked layout"):
        optimal_size(10 ** 6, 1e-200, layout="blocked")


def test_optimal_size_is_fast():
    """BloomFilter(capacity, fpr) calls it: microseconds for classic, about a millisecond for blocked."""
    def best_time(n, p, layout):
        best = math.inf
        for _ in range(5):
            start = time.perf_counter()
            theory.sizing._optimal_size.__wrapped__(float(n), p, layout)
            best = min(best, time.perf_counter() - start)
        return best

    assert best_time(10 ** 10, 1e-6, "classic") < 1e-3
    assert best_time(10 ** 6, 0.01, "partitioned") < 1e-3
    assert best_time(10 ** 6, 0.01, "blocked") < 10e-3  # ~1 ms alone; slack for a busy 2-core machine


def test_bits_per_item():
    assert bits_per_item(0.01) == pytest.approx(min(-k / math.log(1 - 0.01 ** (1 / k)) for k in range(1, 20)))
    assert bits_per_item(0.01, num_items=1000) == optimal_size(1000, 0.01)[0] / 1000
    assert bits_per_item(0.01, layout="partitioned") == bits_per_item(0.01)
    limit = bits_per_item(0.01, layout="blocked")
    assert limit > bits_per_item(0.01)
    assert bits_per_item(0.01, layout="blocked", num_items=10 ** 7) == pytest.approx(limit, rel=2e-3)
    previous = 0.0
    for p in (0.5, 0.1, 1e-2, 1e-4, 1e-8):  # fewer false positives cost more bits, always over log2(1/p)
        needed = bits_per_item(p)
        assert needed > previous and needed > math.log2(1 / p)
        previous = needed


# ---------------------------------------------------------------------------------------------------------
# plan(): the calculator
# ---------------------------------------------------------------------------------------------------------
def test_plan_reference_values():
    """The exact classic sizes, a few bits from the online calculators' closed form m = ceil(-n ln p / ln^2 2)."""
    result = plan(n=40_000_000, p=1e-6)
    assert (result.m, result.k) == (1_150_211_148, 20)
    assert abs(result.m - 1_150_207_006) / result.m < 1e-5  # the calculator's m
    result = plan(n=10_000, p=0.001)
    assert (result.m, result.k, result.num_bytes) == (143_777, 10, 17_973)
    assert result.bits_per_key == pytest.approx(14.3777)
    assert result.information_limit == pytest.approx(math.log2(1000))
    assert result.overhead == pytest.approx(1 / LN2, rel=1e-4)  # classic filters: 1.44 x the limit
    assert result.fpr_classic <= 0.001 and false_positive_rate(result.m - 1, 10_000, 10) > 0.001
    assert result.fpr_blocked > result.fpr_classic
    assert result.solved == ("m", "k")


@pytest.mark.parametrize("layout", theory.LAYOUTS)
@pytest.mark.parametrize("n, p", [(443_161, 0.01), (10_000, 0.001), (1, 0.5), (10 ** 9, 1e-4)])
def test_plan_sizes_exactly_as_the_structures_do(n, p, layout):
    """One sizing path: plan(n, p) is optimal_size(n, p), which BloomFilter(n, p) uses."""
    result = plan(n=n, p=p, layout=layout)
    assert (result.m, result.k) == optimal_size(n, p, layout=layout)
    assert result.fpr <= p


def test_plan_solves_every_sufficient_subset():
    base = plan(n=10_000, p=0.001)
    assert plan(m=base.m, p=0.001).n == 10_000  # the inverse of optimal_size
    with_k = plan(n=10_000, p=0.001, k=5)
    assert with_k.k == 5 and with_k.fpr_classic <= 0.001 < false_positive_rate(with_k.m - 1, 10_000, 5)
    assert abs(with_k.m - 10_000 * -5 / math.log(1 - 0.001 ** (1 / 5))) < 5  # the calculator's form, nearly
    capacity = plan(m=with_k.m, p=0.001, k=5)
    assert capacity.n == 10_000 and capacity.solved == ("n",)
    rate = plan(n=10_000, m=143_777)
    assert rate.k == 10 and rate.p == pytest.approx(rate.fpr_classic) and rate.solved == ("p", "k")
    assert plan(n=10_000, m=143_777, k=3).p == pytest.approx(false_positive_rate(143_777, 10_000, 3))
    assert plan(n=10_000, p=0.001, m=143_777, k=10).solved == ()  # consistent
    assert plan(n=4e7, p=1e-6).m == 1_150_211_148  # whole floats are accepted
    as_dict = base.as_dict()
    assert as_dict["bytes"] == 17_973 and as_dict["fpr"]["classic"] == base.fpr_classic


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 10 ** 6), exponent=st.floats(0.2, 12.0), k=st.integers(1, 16),
       layout=st.sampled_from(theory.LAYOUTS))
def test_plan_round_trips_are_consistent(n, exponent, k, layout):
    """Feeding a plan back (all four values) is never called inconsistent, and every plan meets p."""
    p = 10.0 ** -exponent
    try:
        plans = (plan(n=n, p=p, layout=layout), plan(n=n, p=p, k=k, layout=layout))
    except ValueError as error:  # few hashes cannot reach a tiny p in the largest filter of the layout
        assert "out of reach" in str(error)
        return
    for result in plans:
        again = plan(n=n, p=p, m=result.m, k=result.k, layout=layout)
        assert (again.m, again.k, again.solved) == (result.m, result.k, ())
        assert plan(n=n, m=result.m, k=result.k, layout=layout).p == pytest.approx(result.fpr)
        assert result.fpr <= p * (1 + 1e-12)  # float rounding of a rate that meets p exactly


@pytest.mark.parametrize("layout", ["partitioned", "blocked"])
def test_plan_other_layouts_use_their_exact_rates(layout):
    result = plan(n=10 ** 5, p=0.01, layout=layout)
    assert (result.m, result.k) == optimal_size(10 ** 5, 0.01, layout=layout)
    assert result.fpr <= 0.01
    capacity = plan(m=result.m, p=0.01, layout=layout)
    assert capacity.n >= 10 ** 5 and capacity.fpr <= 0.01
    assert _min_rate(layout, result.m, capacity.n + 1) > 0.01  # the largest n that fits
    fixed_k = plan(n=10 ** 5, p=0.01, k=10, layout=layout)
    assert fixed_k.k == 10 and fixed_k.fpr <= 0.01
    if layout == "blocked":
        assert result.m % 512 == 0 and fixed_k.m % 512 == 0


def test_plan_reports_each_layout():
    result = plan(n=1000, m=1000, k=20)
    assert result.fpr_blocked is None  # k > 16
    assert result.blocked_num_bits == 1024
    assert plan(n=1, m=3, k=5).fpr_partitioned is None  # k > m
    assert plan(n=1000, m=10_000, k=7).fpr_blocked == pytest.approx(
        false_positive_rate(10_240, 1000, 7, layout="blocked"))


@pytest.mark.parametrize("kwargs, message", [
    ({}, "none was given"),
    ({"n": 5}, "also give p .* or m"),
    ({"m": 500}, "also give n .* or p"),
    ({"p": 0.1}, "also give n .* or m"),
    ({"n": 5, "k": 3}, "not enough"),
    ({"p": 0.1, "k": 3}, "fix the bits per key but not the size"),
    ({"n": 1000, "m": 1000, "p": 1e-6}, "inconsistent: n=1000, m=1000"),
    ({"n": 1000, "m": 10_000, "k": 7, "p": 1e-4}, "inconsistent"),
    ({"m": 3, "p": 1e-9}, "cannot hold even one key"),
    ({"n": 0, "p": 0.1}, "n must be >= 1, got 0"),
    ({"n": 10, "p": 1.0}, "p must be a probability strictly between 0 and 1, got 1.0"),
    ({"n": 10, "p": 0.0}, "got 0.0"),
    ({"n": 10, "p": float("nan")}, "p must be finite"),
    ({"n": 10, "m": 1000, "layout": "blocked"}, "multiple of 512 .* got 1000"),
    ({"n": 10, "m": 1024, "k": 17, "layout": "blocked"}, "between 1 and 16 .* got 17"),
    ({"n": 10, "p": 0.1, "layout": "bloom"}, "layout must be one of"),
])
def test_plan_errors_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plan(**kwargs)


@pytest.mark.parametrize("kwargs", [{"n": 1.5, "p": 0.1}, {"n": True, "p": 0.1}, {"n": "10", "p": 0.1},
                                    {"n": 10, "p": "1%"}])
def test_plan_type_errors(kwargs):
    with pytest.raises(TypeError):
        plan(**kwargs)


# ---------------------------------------------------------------------------------------------------------
# Summary Cache: Tables 3-5, Figure 4
# ---------------------------------------------------------------------------------------------------------
def test_tables_reproduce_every_printed_cell():
    printed = _tables.printed_cells()
    assert sum(len(row) for row in printed.values()) == 411
    assert len(_tables.PRINTED_TABLES) == 64
    rows = {row.bits_per_item: row for row in fp_table()}
    known_typos = {(5, 3), (30, 15), (30, 16)}
    for b, cells in printed.items():
        row = rows[b]
        assert [cell.k for cell in row.cells] == sorted(cells)  # the same columns as printed
        for k, text in cells.items():
            cell = row.cell(k)
            assert cell.fpr == pytest.approx((1 - math.exp(-k / b)) ** k, rel=1e-15)
            if (b, k) in known_typos:
                assert float(text) != float(cell.text)
            else:
                assert float(text) == float(cell.text), (b, k, text, cell.text)


def test_table_differences_are_the_known_typos_with_both_values():
    differences = fp_table_differences()
    found = {(d.bits_per_item, d.column): (d.printed, d.computed_text, d.kind, d.table) for d in differences}
    assert found == {
        (5, "k_opt"): ("3.46", "3.47", "value", 3),   # 5 ln 2 = 3.4657
        (5, "k=3"): ("0.092", "0.0918", "value", 3),
        (30, "k=15"): ("8.39e-06", "8.39e-07", "value", 4),
        (30, "k=16"): ("7.26e-06", "7.26e-07", "value", 4),
    }
    text = "\n".join(map(str, differences))
    assert "printed 8.39e-06, formula 8.39e-07" in text and "printed 0.092, formula 0.0918" in text
    # nothing is copied from the printed tables: the computed cells hold the formula's values
    assert fp_table([30])[0].cell(15).text == "8.39e-07"


def test_table_extents():
    anchors = {(2, 1): "0.393", (2, 2): "0.4", (4, 3): "0.147", (8, 6): "0.0216", (16, 8): "0.000574",
               (32, 4): "0.000191", (32, 8): "5.73e-06"}
    rows = {row.bits_per_item: row for row in fp_table()}
    for (b, k), text in anchors.items():
        assert rows[b].cell(k).text == text
    assert rows[26].k_opt_text == "18" and rows[14].k_opt_text == "9.7"
    # literature.md's rule (to the first increase) is shorter than the print in 16 rows
    shorter = fp_table(extent="first-increase")
    missing = [d for d in fp_table_differences(shorter) if d.kind == "missing"]
    assert len(missing) == 16 and {d.bits_per_item for d in missing} >= {5, 6, 9, 13, 32}
    assert all(row.cells[-1].fpr > row.cells[-2].fpr for row in shorter)
    assert [cell.k for cell in fp_table([10], hashes=range(1, 5))[0].cells] == [1, 2, 3, 4]
    text = _tables.format_fp_tables()
    assert text.count("Table ") == 3 and "0.00819" in text
    with pytest.raises(ValueError, match="extent"):
        fp_table(extent="all")


def test_figure4_data():
    data = figure4_data()
    assert data.bits_per_item == tuple(range(1, 33))
    assert data.optimal_hashes[9] == 7 and data.fpr_optimal[9] == pytest.approx(0.00819, abs=5e-6)
    assert data.fpr_four_hashes[9] == pytest.approx(0.0118, abs=5e-5)  # "1.2% for 4 hash functions"
    assert data.optimal_hashes[0] == 1  # never 0
    assert all(o <= f for o, f in zip(data.fpr_optimal, data.fpr_four_hashes))
    assert all(a > b for a, b in zip(data.fpr_optimal, data.fpr_optimal[1:]))


# ---------------------------------------------------------------------------------------------------------
# Counters
# ---------------------------------------------------------------------------------------------------------
def test_counter_overflow_bound_values():
    m, n = 10 ** 6, 10 ** 5
    k = m / n * LN2
    assert counter_overflow_bound(m, n, k, 16) / m == pytest.approx(1.3677e-15, rel=1e-4)
    assert counter_overflow_bound(m, n, k, 15) / m == pytest.approx(3.06e-14, rel=2e-3)
    assert counter_overflow_bound(m, n, k, 17) / m == pytest.approx(5.75e-17, rel=2e-3)
    assert counter_overflow_bound(m, n, 3, 16) < counter_overflow_bound(m, n, 7, 16)
    assert counter_overflow_bound(m, 0, 3, 16) == 0.0
    assert counter_overflow_bound(10, 1000, 5, 1) > 1  # a bound, not a probability: can say nothing


def test_inverse_gamma_and_expected_max_count():
    assert inverse_gamma(24) == pytest.approx(5.0, abs=1e-9)
    assert inverse_gamma(1) == pytest.approx(2.0, abs=1e-9)
    assert inverse_gamma(2 ** 16) == pytest.approx(9.23, abs=0.01)
    assert inverse_gamma(10 ** 6) == pytest.approx(10.45, abs=0.01)
    assert inverse_gamma(2 ** 24) == pytest.approx(11.64, abs=0.01)
    # literature.md section 2 at kn/m = ln 2: 7.7, 8.8, 9.9
    for m, expected in ((2 ** 16, 7.7), (10 ** 6, 8.8), (2 ** 24, 9.9)):
        assert expected_max_count(m, m, LN2) == pytest.approx(expected, abs=0.05)
    assert expected_max_count(100, 0, 3) == 0.0
    assert expected_max_count(10 ** 6, 1, 1) == 1.0  # clamped to [1, nk]


def test_counters_against_simulation():
    """Throw n k increments into m counters (what a counting filter does under ideal hashing)."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(20240601)
    k = 7
    for m, trials in ((2 ** 12, 400), (2 ** 16, 40)):
        n = round(m * LN2 / k)
        maxima = np.array([np.bincount(rng.integers(0, m, n * k), minlength=m).max() for _ in range(trials)])
        # the bound holds: Pr(max >= i) <= m (e n k / (i m))^i, checked where it says something
        for i in range(5, 12):
            bound = counter_overflow_bound(m, n, k, i)
            if bound < 1:
                observed = int((maxima >= i).sum())
                assert observed <= binomial_acceptance(trials, bound)[1], (m, i, observed, bound)
        # the asymptotic formula is 1.1-1.3 above the simulated mean at these sizes (its dropped
        # O(1/ln^2) term; Gonnet's -3/2), and closer in relative terms as m grows
        gap = expected_max_count(m, n, k) - maxima.mean()
        assert 0.5 < gap < 1.6, (m, maxima.mean(), expected_max_count(m, n, k))


# ---------------------------------------------------------------------------------------------------------
# Fill: moments, count estimates
# ---------------------------------------------------------------------------------------------------------
def _simulate_fill(np, rng, layout, m, k, n, trials):
    counts = []
    for _ in range(trials):
        bits = np.zeros(m, dtype=bool)
        if layout == "classic":
            bits[rng.integers(0, m, n * k)] = True
        elif layout == "partitioned":
            for i in range(k):
                start, stop = i * m // k, (i + 1) * m // k
                bits[start + rng.integers(0, stop - start, n)] = True
        else:
            block = rng.integers(0, m // 512, n) * 512
            for i in range(k):
                bits[block + (i % 8) * 64 + rng.integers(0, 64, n)] = True
        counts.append(int(bits.sum()))
    return np.array(counts, dtype=float)


@pytest.mark.parametrize("layout, m, k, n", [
    ("classic", 4096, 7, 500), ("partitioned", 4099, 5, 600), ("blocked", 8192, 8, 1000),
    ("blocked", 4096, 12, 250), ("blocked", 2048, 3, 100),
])
def test_fill_moments_against_simulation(layout, m, k, n):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(m + k + n)
    trials = 2000
    counts = _simulate_fill(np, rng, layout, m, k, n, trials)
    mean, variance = fill_moments(m, k, n, layout=layout)
    assert abs(counts.mean() - mean) <= Z_SPREAD * math.sqrt(variance / trials)
    # sample variance: sd of (s^2 / sigma^2) is ~sqrt(2 / (T - 1)) for a near-normal count
    assert abs(counts.var(ddof=1) / variance - 1) <= Z_SPREAD * math.sqrt(2 / (trials - 1))


def test_approx_count_values():
    estimate = approx_count(10_000, 7, 5_034)
    assert estimate.estimate == pytest.approx(-(10_000 / 7) * math.log(1 - 0.5034))
    assert estimate.low < estimate.estimate < estimate.high and estimate.confidence == 0.95
    wider = approx_count(10_000, 7, 5_034, confidence=0.999)
    assert wider.low < estimate.low and wider.high > estimate.high
    assert approx_count(10_000, 7, 0) == (0.0, 0.0, 0.0, 0.95)
    full = approx_count(10_000, 7, 10_000)
    assert full.estimate == math.inf and full.high == math.inf and full.low > 1000
    assert approx_count(1000, 7, 8).low >= 2  # 8 bits need at least 2 keys of 7 probes
    # blocked with k < 8 can set only 64 k bits per block
    assert approx_count(1024, 4, 512, layout="blocked").estimate == math.inf
    with pytest.raises(ValueError, match="at most 512 of its 1024 bits"):
        approx_count(1024, 4, 513, layout="blocked")
    with pytest.raises(ValueError, match="bits_set"):
        approx_count(100, 3, 101)


@pytest.mark.parametrize("layout, m, k", [("classic", 10_000, 7), ("partitioned", 10_003, 7),
                                          ("partitioned", 10_000, 5), ("blocked", 10_240, 8),
                                          ("blocked", 10_240, 12), ("blocked", 10_240, 4)])
def test_approx_count_inverts_the_expected_fill(layout, m, k):
    for n in (1, 10, 300, 1000, 3000):
        mean, _ = fill_moments(m, k, n, layout=layout)
        x = round(mean)
        estimate = approx_count(m, k, x, layout=layout)
        assert estimate.low <= estimate.estimate <= estimate.high
        if n >= 10:
            tolerance = 0.01 if layout != "classic" else 0.01 + n / m  # Swamidass-Baldi is the e^x form
            assert estimate.estimate == pytest.approx(n, rel=tolerance)
        assert fpr_from_fill(m, k, x, layout=layout) == pytest.approx(
            false_positive_rate(m, estimate.estimate, k, layout=layout))


@pytest.mark.parametrize("layout, m, k, n", [("classic", 4096, 5, 400), ("blocked", 8192, 8, 700),
                                             ("partitioned", 4100, 4, 500)])
def test_approx_count_interval_covers(layout, m, k, n):
    """The 95% interval covers the true count in about 95% of simulated fills (binomial check)."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(7 * m + n)
    trials = 400
    counts = _simulate_fill(np, rng, layout, m, k, n, trials)
    covered = sum(1 for x in counts if approx_count(m, k, int(x), layout=layout).low <= n
                  <= approx_count(m, k, int(x), layout=layout).high)
    low, high = binomial_acceptance(trials, 0.95)
    assert low <= covered <= high, covered


# ---------------------------------------------------------------------------------------------------------
# Monte Carlo against bloomwise's own filters
# ---------------------------------------------------------------------------------------------------------
def _realized_rate_spread(layout, m, n, k):
    """Relative sd of a single filter's own false-positive rate around the formula (filter-to-filter spread).

    Classic and partitioned: the rate given the filter is about (X/m)^k, so by the delta method its relative sd is
    k sd(X)/E(X). Blocked: the rate is the mean over B blocks of each block's pass probability h_b; blocks are
    nearly independent (slightly negatively correlated), so Var <= Var(h)/B, with E[h^2] computed exactly from
    each lane's moments E[(Y/64)^(2r) | j] (2r independent query bits all set).
    """
    if layout != "blocked":
        mean, variance = fill_moments(m, k, n, layout=layout)
        return k * math.sqrt(variance) / mean
    blocks = m // 512
    single, double = min(k, 8) - max(0, k - 8), max(0, k - 8)

    def all_set(d, throws):  # P(d given bits of a 64-bit lane are all set after `throws` throws)
        return sum((-1) ** i * math.comb(d, i) * (1 - i / 64) ** throws for i in range(d + 1))

    def moment(s, throws):  # E[(Y/64)^s]: s independent uniform bits all set; d of them distinct
        stirling = {(1, 1): 1, (2, 1): 1, (2, 2): 1, (4, 1): 1, (4, 2): 7, (4, 3): 6, (4, 4): 1}
        return sum(count * math.perm(64, d) / 64 ** s * all_set(d, throws)
                   for (size, d), count in stirling.items() if size == s)

    q = 1 / blocks
    second = 0.0
    mode = n * q
    width = 40 * math.sqrt(mode + 1)
    for j in range(max(1, int(mode - width - 40)), min(n, int(mode + width + 80)) + 1):
        pmf = math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
                       + j * math.log(q) + (n - j) * math.log1p(-q))
        second += pmf * moment(2, j) ** single * moment(4, 2 * j) ** double
    rate = false_positive_rate(m, n, k, layout="blocked")
    return math.sqrt(max(second - rate * rate, 0.0) / blocks) / rate


def _acceptance_with_spread(queries, rate, spread):
    low = binomial_acceptance(queries, max(rate * (1 - Z_SPREAD * spread), 1e-12), BINOMIAL_PART)[0]
    high = binomial_acceptance(queries, min(rate * (1 + Z_SPREAD * spread), 1 - 1e-12), BINOMIAL_PART)[1]
    return low, high


@pytest.mark.parametrize("layout, m, k, n", [
    ("classic", 2 ** 20, 7, 2 ** 20 // 10),
    ("classic", 2 ** 16 + 7, 3, 2 ** 16 // 5),
    ("partitioned", 2 ** 20, 7, 2 ** 20 // 10),
    ("partitioned", 1_000_003, 5, 100_000),
    ("blocked", 2 ** 21, 4, 2 ** 21 // 12),
    ("blocked", 2 ** 21, 8, 2 ** 21 // 12),
    ("blocked", 2 ** 21, 12, 2 ** 21 // 14),
    ("blocked", 2 ** 22, 16, 2 ** 22 // 16),
    ("blocked", 512 * 3, 9, 100),
])
def test_false_positive_rate_against_bloomwise_filters(layout, m, k, n):
    np = pytest.importorskip("numpy")
    try:
        from bloomwise import BloomFilter
        BloomFilter.from_size(1024, 1)
    except ImportError as error:  # pragma: no cover - the compiled core is not built
        pytest.skip(f"bloomwise's compiled core is not available: {error}")
    queries = 400_000
    seeds = 3 if m < 10_000 else 1  # a tiny filter: average a few, so the spread stays small
    observed = 0
    for seed in range(seeds):
        bloom = BloomFilter.from_size(m, k, layout=layout, seed=1000 + seed)
        members = np.arange(n, dtype=np.uint64) * np.uint64(2) + np.uint64(10 ** 12 * seed)
        bloom.update(members)
        assert bloom.contains_many(members).all()  # no false negatives, ever
        others = np.arange(queries, dtype=np.uint64) * np.uint64(2) + np.uint64(10 ** 12 * seed + 1)
        observed += int(bloom.contains_many(others).sum())
    rate = false_positive_rate(m, n, k, layout=layout)
    spread = _realized_rate_spread(layout, m, n, k) / math.sqrt(seeds)
    low, high = _acceptance_with_spread(queries * seeds, rate, spread)
    assert low <= observed <= high, (
        f"{layout} m={m} k={k} n={n}: {observed}/{queries * seeds} = {observed / (queries * seeds):.5g} "
        f"false positives, theory {rate:.5g} (spread {spread:.2%}); acceptance [{low}, {high}] "
        f"at false-alarm probability {FALSE_ALARM:g}")


@pytest.mark.parametrize("layout, m, k, n", [("classic", 2 ** 18, 7, 25_000), ("partitioned", 2 ** 18, 6, 30_000),
                                             ("blocked", 2 ** 18, 8, 20_000), ("blocked", 2 ** 18, 14, 15_000)])
def test_fill_and_count_of_bloomwise_filters(layout, m, k, n):
    """The bits a real filter sets agree with fill_moments (5.03 sigma), and the 1 - 1e-6 interval of
    approx_count contains the true count."""
    np = pytest.importorskip("numpy")
    try:
        from bloomwise import BloomFilter
        bloom = BloomFilter.from_size(m, k, layout=layout, seed=99)
    except ImportError as error:  # pragma: no cover
        pytest.skip(f"bloomwise's compiled core is not available: {error}")
    bloom.update(np.arange(n, dtype=np.uint64) + np.uint64(77))
    bits_set = bloom._count_set_bits()
    mean, variance = fill_moments(m, k, n, layout=layout)
    assert abs(bits_set - mean) <= Z_SPREAD * math.sqrt(variance)
    interval = approx_count(m, k, bits_set, layout=layout, confidence=1 - FALSE_ALARM)
    assert interval.low <= n <= interval.high
    assert bloom.approx_count() == pytest.approx(approx_count(m, k, bits_set, layout=layout).estimate)


# ---------------------------------------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, error, message", [
    (lambda: false_positive_rate(0, 10, 3), ValueError, "num_bits must be >= 1, got 0"),
    (lambda: false_positive_rate(-5, 10, 3), ValueError, "num_bits must be >= 1, got -5"),
    (lambda: false_positive_rate(100, -1, 3), ValueError, "num_items must be >= 0, got -1"),
    (lambda: false_positive_rate(100, float("nan"), 3), ValueError, "num_items must be finite"),
    (lambda: false_positive_rate(100, float("inf"), 3), ValueError, "num_items must be finite"),
    (lambda: false_positive_rate(100, 10, 0), ValueError, "num_hashes must be >= 1, got 0"),
    (lambda: false_positive_rate(100.0, 10, 3), TypeError, "num_bits must be an integer, got 100.0"),
    (lambda: false_positive_rate(True, 10, 3), TypeError, "num_bits must be an integer, got the bool True"),
    (lambda: false_positive_rate(100, False, 3), TypeError, "num_items .* bool False"),
    (lambda: false_positive_rate(100, "10", 3), TypeError, "num_items must be a number, got the string '10'"),
    (lambda: false_positive_rate(100, 10, 2.5), TypeError, "num_hashes must be an integer, got 2.5"),
    (lambda: false_positive_rate(100, 10, 3, layout="bloom"), ValueError, "layout must be one of .* got 'bloom'"),
    (lambda: false_positive_rate(100, 10, 3, layout=None), TypeError, "layout must be one of .* got None"),
    (lambda: false_positive_rate(100, 10, 3, exact=1), TypeError, "exact must be True or False, got 1"),
    (lambda: false_positive_rate(5, 10, 6, layout="partitioned"), ValueError, "num_hashes=6, num_bits=5"),
    (lambda: false_positive_rate(1000, 10, 3, layout="blocked"), ValueError, "multiple of 512 .* got 1000"),
    (lambda: false_positive_rate(1024, 10, 17, layout="blocked"), ValueError, "between 1 and 16 .* got 17"),
    (lambda: optimal_num_hashes(0, 10), ValueError, "num_bits must be >= 1, got 0"),
    (lambda: optimal_num_hashes(1000, 10, layout="blocked"), ValueError, "multiple of 512"),
    (lambda: optimal_num_hashes_real(10, -2), ValueError, "num_items must be >= 0, got -2"),
    (lambda: optimal_size(100, 0), ValueError, "fpr must be a probability strictly between 0 and 1, got 0"),
    (lambda: optimal_size(100, 1), ValueError, "got 1"),
    (lambda: optimal_size(100, -0.5), ValueError, "got -0.5"),
    (lambda: optimal_size(100, float("nan")), ValueError, "fpr must be finite"),
    (lambda: optimal_size(-1, 0.1), ValueError, "num_items must be >= 0, got -1"),
    (lambda: optimal_size(100, None), TypeError, "fpr must be a number, got None"),
    (lambda: bits_per_item(0.1, num_items=0), ValueError, "num_items must be > 0"),
    (lambda: bits_per_item(2.0), ValueError, "fpr must be a probability"),
    (lambda: counter_overflow_bound(0, 10, 3, 16), ValueError, "num_counters must be >= 1, got 0"),
    (lambda: counter_overflow_bound(100, 10, 0, 16), ValueError, "num_hashes must be > 0, got 0"),
    (lambda: counter_overflow_bound(100, 10, 3, 0), ValueError, "threshold must be >= 1, got 0"),
    (lambda: counter_overflow_bound(100, 10, 3, 2.5), TypeError, "threshold must be an integer"),
    (lambda: expected_max_count(100, 10, -1), ValueError, "num_hashes must be >= 0, got -1"),
    (lambda: inverse_gamma(0.5), ValueError, "value must be >= 1, got 0.5"),
    (lambda: approx_count(100, 3, -1), ValueError, "bits_set must be >= 0, got -1"),
    (lambda: approx_count(100, 3, 10, confidence=1.0), ValueError, "confidence must be a probability"),
    (lambda: fpr_from_fill(100, 3, 101), ValueError, "bits_set must be <= the bits"),
    (lambda: fill_moments(100, 3, -2), ValueError, "num_items must be >= 0, got -2"),
    (lambda: fp_table([0]), ValueError, "bits_per_item must be >= 1, got 0"),
    (lambda: figure4_data([1.5]), TypeError, "bits_per_item must be an integer, got 1.5"),
])
def test_invalid_inputs_name_the_parameter(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_numpy_scalars_are_accepted():
    np = pytest.importorskip("numpy")
    assert false_positive_rate(np.int64(1000), np.int64(100), np.uint8(7)) == false_positive_rate(1000, 100, 7)
    assert false_positive_rate(1000, np.float64(100.0), 7) == false_positive_rate(1000, 100, 7)


# ---------------------------------------------------------------------------------------------------------
# The module itself
# ---------------------------------------------------------------------------------------------------------
def test_docstring_examples():
    import bloomwise.cli._parse
    import bloomwise.units

    modules = (theory, theory.rates, theory.sizing, theory.counting, theory.fill, _tables, bloomwise.units,
               bloomwise.cli._parse)
    for module in modules:
        failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert failures == 0, module.__name__


def test_moved_table_names_still_work_with_a_deprecation_warning():
    for name in ("fp_table", "fp_table_differences", "format_fp_tables", "figure4_data", "FpTableRow", "FpTableCell",
                 "TableDifference", "Figure4Data"):
        with pytest.warns(DeprecationWarning, match=f"bloomwise.reproduce.summary_cache.{name}"):
            assert getattr(theory, name) is getattr(_tables, name)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        theory.no_such_name


def test_import_is_cheap_and_loads_no_numpy():
    code = ("import sys, time; t = time.perf_counter(); import bloomwise.theory; "
            "print('numpy' in sys.modules, time.perf_counter() - t)")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert output[0] == "False"
    assert float(output[1]) < 0.5
