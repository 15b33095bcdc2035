"""ScalableBloomFilter: growth, the compound FPR against theory, persistence; BloomFilter's capacity warning."""
from __future__ import annotations

import dataclasses
import math
import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from bloomwise import BloomFilter, CapacityWarning, FormatError, ScalableBloomFilter, _format, theory
from bloomwise.scalable import STAGE_SEED_STEP
from stats import assert_rate_matches

KEYS = st.one_of(st.text(max_size=12), st.binary(max_size=12), st.integers(-(2**80), 2**80))


# ---- growth and the compound bound -----------------------------------------------------------------------------------
def test_stages_grow_geometrically_and_tighten():
    f = ScalableBloomFilter(100, 0.01, growth=3, ratio=0.25, layout="classic", seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CapacityWarning)  # no stage ever goes past its capacity
        f.update(np.arange(5000))
    assert f.num_stages == 5  # 100 + 300 + 900 + 2700 = 4000 < 5000 <= 4000 + 8100
    for i, stage in enumerate(f.stages):
        assert stage.capacity == 100 * 3**i and stage.layout == "classic"
        assert stage.seed == (9 + i * STAGE_SEED_STEP) % 2**64
        assert math.isclose(f.stage_fpr(i), 0.01 * 0.75 * 0.25**i)
        assert theory.false_positive_rate(stage.num_cells, stage.capacity, stage.num_hashes, layout="classic") \
            <= f.stage_fpr(i)
    assert f.fpr_bound() < f.fpr and math.isclose(f.fpr_bound(), 0.01 * (1 - 0.25**5))
    assert f.contains_many(np.arange(5000)).all()


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.tuples(st.booleans(), st.lists(KEYS, max_size=40)), max_size=12),
       layout=st.sampled_from(["classic", "partitioned", "blocked"]))
def test_no_false_negatives_while_growing(batches, layout):
    f = ScalableBloomFilter(8, 0.05, layout=layout)
    added = []
    for one_by_one, keys in batches:
        if one_by_one:
            for key in keys:
                f.add(key)
        else:
            f.update(iter(keys))
        added += keys
        assert all(key in f for key in added)
        assert f.contains_many(added).all() if added else True


def test_add_reports_new_keys_and_skips_present_ones():
    f = ScalableBloomFilter(10, 0.01)
    assert f.add("a") is True and f.add("a") is False
    f.update(["a", "b", "b"])
    assert sum(f._stage_keys) == 3  # "a" was present; the two "b"s of one batch both count (conservative)


@pytest.mark.parametrize("layout", ["blocked", "classic"])
def test_measured_fpr_matches_the_compound_theory(layout):
    """Exact binomial test (false-alarm probability 1e-6, two-sided) of 1 - prod_i (1 - FPR_i(n_i))."""
    f = ScalableBloomFilter(2000, 0.02, layout=layout, seed=3)
    f.update(np.arange(60_000))
    assert f.num_stages == 5
    miss = 1.0
    for stage, keys in zip(f.stages, f._stage_keys):
        miss *= 1.0 - theory.false_positive_rate(stage.num_cells, keys, stage.num_hashes, layout=layout)
    expected = 1.0 - miss
    assert expected <= f.fpr_bound() < 0.02
    queries = 300_000
    hits = int(f.contains_many(np.arange(10**12, 10**12 + queries, dtype=np.uint64)).sum())
    assert_rate_matches(hits, queries, expected, f"scalable {layout}, {f.num_stages} stages")
    assert abs(f.estimated_fpr() - expected) < 0.2 * expected
    assert abs(f.approx_count() - 60_000) < 0.03 * 60_000


# ---- the plain filter's warning --------------------------------------------------------------------------------------
def test_bloom_filter_past_capacity_warns_once_with_its_fpr():
    f = BloomFilter(1000, 0.01, layout="classic")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f.update(range(1000))
        assert not caught
        for key in range(1000, 3000):
            f.add(key)
        f.update(range(3000, 5000))
    assert len(caught) == 1 and issubclass(caught[0].category, CapacityWarning)
    assert "false-positive rate is now about" in str(caught[0].message)
    assert "ScalableBloomFilter" in str(caught[0].message)


# ---- persistence -----------------------------------------------------------------------------------------------------
def test_round_trips(tmp_path):
    f = ScalableBloomFilter(50, 0.01, growth=2, ratio=0.5, layout="partitioned", seed=11)
    f.update([f"key{i}" for i in range(500)])
    assert f.num_stages == 4
    for copy in (ScalableBloomFilter.from_bytes(f.to_bytes()), pickle.loads(pickle.dumps(f)), f.copy()):
        assert copy == f and copy.num_stages == 4 and copy.stages[2].capacity == 200
        assert all(f"key{i}" in copy for i in range(500))
        copy.update([f"more{i}" for i in range(1000)])  # it keeps growing from where it was
        assert copy.num_stages == 5 and copy != f
    f.save(tmp_path / "f.sbf")
    assert ScalableBloomFilter.load(tmp_path / "f.sbf") == f
    header, payload = _format.loads(f.to_bytes())
    assert header.structure == _format.Structure.SCALABLE and header.layout == _format.Layout.PARTITIONED
    assert header.meta["capacities"] == [50, 100, 200, 400] and header.keys_added == sum(f._stage_keys)
    offset = 0
    for stage in f.stages:  # each stage's bits start at a multiple of 64 bytes
        assert offset % 64 == 0 and bytes(payload[offset:offset + stage.nbytes]) == bytes(stage._payload())
        offset += -(-stage.nbytes // 64) * 64
    assert offset == header.payload_length
    f.clear()
    assert f.num_stages == 1 and "key1" not in f


def test_every_flipped_byte_and_every_truncation_is_detected():
    f = ScalableBloomFilter(4, 0.1, layout="classic")
    f.update(range(10))
    data = f.to_bytes()
    for i in range(len(data)):
        corrupted = bytearray(data)
        corrupted[i] ^= 0x5A
        with pytest.raises(FormatError):
            ScalableBloomFilter.from_bytes(bytes(corrupted))
    for length in range(0, len(data), 7):
        with pytest.raises(FormatError):
            ScalableBloomFilter.from_bytes(data[:length])


def test_well_checksummed_but_inconsistent_files_are_refused():
    f = ScalableBloomFilter(4, 0.1, layout="classic")
    f.update(range(10))
    header, payload = f._header(), f._payload()
    meta = dict(header.meta)
    for change in ({"capacities": meta["capacities"][:-1]}, {"num_bits": [1] * len(meta["num_bits"])},
                   {"growth": 0.5}, {"keys": [1.5] * len(meta["keys"])}, {"seeds": "x"},
                   {"num_bits": [2**47] * len(meta["num_bits"])},  # refused before anything is allocated
                   {"initial_capacity": 10**15, "num_bits": [2**47] * len(meta["num_bits"])}):
        bad = dataclasses.replace(header, meta={**meta, **change})
        with pytest.raises(FormatError):
            ScalableBloomFilter.from_bytes(_format.dumps(bad, payload))
    padded = bytearray(payload)
    padded[f.stages[0].nbytes] = 1  # inside the first stage's padding
    with pytest.raises(FormatError, match="padding"):
        ScalableBloomFilter.from_bytes(_format.dumps(header, bytes(padded)))
    with pytest.raises(FormatError, match="ScalableBloomFilter"):
        ScalableBloomFilter.from_bytes(BloomFilter.from_size(64, 1, layout="classic").to_bytes())


@pytest.mark.parametrize("kwargs,error,message", [
    ({"capacity": 0}, ValueError, "capacity must be at least 1"), ({"fpr": 1}, ValueError, "fpr"),
    ({"growth": 0.5}, ValueError, "growth"), ({"ratio": 1.0}, ValueError, "ratio"),
    ({"ratio": "half"}, TypeError, "ratio"), ({"layout": "nope"}, ValueError, "layout"),
])
def test_bad_parameters(kwargs, error, message):
    with pytest.raises(error, match=message):
        ScalableBloomFilter(**kwargs)


def test_docstring_examples():
    import doctest

    import bloomwise.scalable

    failures, _ = doctest.testmod(bloomwise.scalable, optionflags=doctest.ELLIPSIS)
    assert failures == 0
