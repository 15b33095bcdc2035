"""No false negatives, for every counter width of every counting structure and every layout of BloomFilter.

The filters are deliberately crowded (few cells, many keys, repeats), so that every branch of the kernels runs:
saturated counters, the variable-increment filter's exact feasibility table and, for fixed counters of 16 bits or
more, its min/max bound beyond the table (the 16+16 split reaches it from 17 keys per position).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from bloomwise import BloomFilter, CountingBloomFilter, ScalableBloomFilter
from bloomwise import VariableIncrementCountingBloomFilter as VICBF

KEYS = st.lists(st.one_of(st.binary(max_size=12), st.integers(-2 ** 70, 2 ** 70), st.text(max_size=6)),
                min_size=1, max_size=400)

COUNTING = [("counting", bits, layout) for bits in (4, 8, 16) for layout in ("classic", "partitioned")]
VI_SPLITS = [("vicbf", split, layout) for split in ((4, 4), (2, 6), (8, 8), (4, 12), (16, 16), (12, 20))
             for layout in ("classic", "partitioned")]


def _make(kind, width, layout, num_cells, num_hashes, seed):
    if kind == "counting":
        return CountingBloomFilter.from_size(num_cells, num_hashes, counter_bits=width, layout=layout, seed=seed)
    return VICBF.from_size(num_cells, num_hashes, fixed_bits=width[0], variable_bits=width[1], layout=layout,
                           seed=seed)


@settings(max_examples=25, deadline=None)
@given(keys=KEYS, repeats=st.integers(1, 3), num_cells=st.integers(8, 300), num_hashes=st.integers(1, 8),
       seed=st.integers(0, 2 ** 64 - 1), data=st.data())
@pytest.mark.parametrize("kind, width, layout", COUNTING + VI_SPLITS)
def test_counting_structures_never_lose_a_present_key(kind, width, layout, keys, repeats, num_cells, num_hashes,
                                                      seed, data):
    f = _make(kind, width, layout, max(num_cells, num_hashes), num_hashes, seed)
    for _ in range(repeats):
        for key in keys:
            f.add(key)
    f.update(keys)  # the batch path too
    present = {}
    for key in keys:
        present[key] = present.get(key, 0) + repeats + 1
    for key, count in list(present.items()):  # remove each key at most as often as it was added
        for _ in range(data.draw(st.integers(0, count), label=f"removals of {key!r}")):
            f.remove(key)
            present[key] -= 1
    still = [key for key, count in present.items() if count > 0]
    assert all(key in f for key in still)
    if still:
        assert f.contains_many(still).all()


def test_the_wide_split_reaches_the_bound_beyond_its_table():
    """Guards the test above: with 16+16 bits the exact table stops at 16 keys per position."""
    f = VICBF.from_size(16, 3, fixed_bits=16, variable_bits=16, seed=1)
    keys = [f"key{i}" for i in range(600)]
    f.update(keys)
    assert min(c for key in keys for c in f.counters(key)) > 17
    assert all(key in f for key in keys)


@settings(max_examples=40, deadline=None)
@given(keys=KEYS, num_bits=st.integers(1, 5000), num_hashes=st.integers(1, 16), seed=st.integers(0, 2 ** 64 - 1),
       layout=st.sampled_from(["classic", "partitioned", "blocked"]), threads=st.sampled_from([None, 1, 2]))
def test_bloom_filters_never_lose_a_key(keys, num_bits, num_hashes, seed, layout, threads):
    if layout == "blocked":
        num_bits = -(-num_bits // 512) * 512
    num_bits = max(num_bits, num_hashes)
    f = BloomFilter.from_size(num_bits, num_hashes, layout=layout, seed=seed)
    half = len(keys) // 2
    f.update(keys[:half], threads=threads)
    for key in keys[half:]:
        f.add(key)
    assert all(key in f for key in keys) and f.contains_many(keys, threads=threads).all()


@settings(max_examples=20, deadline=None)
@given(keys=KEYS, capacity=st.integers(1, 50), layout=st.sampled_from(["classic", "partitioned", "blocked"]))
def test_scalable_filters_never_lose_a_key(keys, capacity, layout):
    f = ScalableBloomFilter(capacity, 0.01, layout=layout)
    f.update(keys[::2])
    for key in keys[1::2]:
        f.add(key)
    assert all(key in f for key in keys) and f.contains_many(keys).all()
