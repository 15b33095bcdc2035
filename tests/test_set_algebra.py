"""Set algebra of the counting, variable-increment and scalable filters: unions equal the filter of all the keys,
intersections bound the filter of the common keys, and both survive a save and load."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, strategies as st

from bloomwise import CountingBloomFilter, ScalableBloomFilter, apply_changes
from bloomwise import VariableIncrementCountingBloomFilter as VICBF

# Many distinct keys, or few keys repeated (counters reach their maximum and stick there).
KEYS = st.lists(st.integers(0, 300), max_size=80) | st.lists(st.integers(0, 3), max_size=40)


def counting(keys, counter_bits=4):
    f = CountingBloomFilter.from_size(160, 3, counter_bits=counter_bits, seed=5)
    f.update(keys)
    return f


def vicbf(keys):
    f = VICBF.from_size(160, 3, seed=5)
    f.update(keys)
    return f


def scalable(keys):
    f = ScalableBloomFilter(16, 0.05, seed=5)
    f.update(keys)
    return f


def cells(f):
    """The 8-bit counters of a counting filter, as numpy."""
    return np.frombuffer(f._payload(), dtype=np.uint8)[:f.num_cells]


@pytest.mark.parametrize("build", [counting, vicbf])
@given(a=KEYS, b=KEYS)
def test_counting_unions_equal_the_filter_of_all_the_keys(build, a, b):
    """Exact, saturation included: both keep a counter sticky at its maximum, and VI-CBF's a is a sum mod M."""
    union = build(a) | build(b)
    assert union == build(a + b) and union.num_keys == len(a) + len(b)
    assert all(key in union for key in a + b)


@pytest.mark.parametrize("build", [counting, vicbf, scalable])
@given(a=KEYS, b=KEYS, c=KEYS)
def test_unions_commute_and_associate_and_survive_a_round_trip(build, a, b, c):
    fa, fb, fc = build(a), build(b), build(c)
    union = fa | fb
    assert union == fb | fa
    assert (fa | fb) | fc == fa | (fb | fc) == fa.union(fb, fc)
    assert all(key in union for key in a + b)  # no false negative for either operand's keys
    assert type(union).from_bytes(union.to_bytes()) == union
    assert (fa, fb, fc) == (build(a), build(b), build(c))  # the operands are unchanged


@given(a=KEYS, b=KEYS)
def test_counting_intersection_bounds_the_filter_of_the_common_keys(a, b):
    fa, fb = counting(a, 8), counting(b, 8)
    both = fa & fb
    common = list((Counter(a) & Counter(b)).elements())
    assert all(key in both for key in common)
    assert (cells(both) >= cells(counting(common, 8))).all()
    assert (cells(both) == np.minimum(cells(fa), cells(fb))).all()
    assert both == fb & fa == fa.intersection(fb)
    assert type(both).from_bytes(both.to_bytes()) == both


@given(a=KEYS, b=KEYS)
def test_counting_intersection_journals_the_counters_it_empties(a, b):
    fa, fb = counting(a), counting(b)
    peer, mark = fa.to_bloom(), fa.mark()
    fa &= fb
    apply_changes(peer, fa.changes_since(mark))
    assert peer == fa.to_bloom()


def test_saturated_counters_stay_an_upper_bound():
    fa = CountingBloomFilter.from_size(64, 2, seed=1)
    fb = CountingBloomFilter.from_size(64, 2, seed=1)
    fa.update(["hot"] * 20)  # its counters stick at 15
    fb.update(["hot"] * 3)
    assert fa.count("hot") == 15 and (fa & fb).count("hot") == 3 and (fa | fb).count("hot") == 15


def test_vicbf_union_keeps_c_sticky():
    a, b = ["hot"] * 10, ["hot"] * 9 + ["cold"]
    union = vicbf(a) | vicbf(b)
    assert union == vicbf(a + b) and union.counters("hot") == (15, 15, 15)
    union._check_cells()


def test_scalable_union_of_different_stage_counts():
    big, small = scalable(range(200)), scalable(range(1000, 1010))
    assert big.num_stages > small.num_stages
    for union in (big | small, small | big):
        assert union.num_stages == big.num_stages and union.num_keys == big.num_keys + small.num_keys
        assert all(key in union for key in list(range(200)) + list(range(1000, 1010)))
        assert union.stage_keys == tuple(x + y for x, y in zip(big.stage_keys, small.stage_keys + (0,) * 9))
