"""Hash schemes: XXH3_V1 (the default) and XXH64_V1 (bloomwise 0.1's files) hash the same key encoding; a filter
keeps its scheme through every path, copy, conversion and file, and never combines with the other scheme."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bloomwise import (BloomFilter, CountingBloomFilter, ScalableBloomFilter, VariableIncrementCountingBloomFilter,
                       _format)

SCHEMES = ("xxh3", "xxh64")
KEYS = ["", "a", "key-17", "https://example.org/a/rather/long/path?with=query&and=more" * 3, b"\x00\xff", 5, -5,
        2**64 - 1, 2**90]


def test_new_filters_hash_with_xxh3():
    assert BloomFilter(100).hash_scheme == "xxh3"
    assert BloomFilter.from_size(1024, 3).hash_scheme == "xxh3"
    assert CountingBloomFilter(100).hash_scheme == "xxh3"
    assert VariableIncrementCountingBloomFilter(100).hash_scheme == "xxh3"
    assert ScalableBloomFilter(100).hash_scheme == "xxh3"
    assert BloomFilter.from_hash_functions(5, [lambda x: x % 5]).hash_scheme == "custom"


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("layout", ["classic", "partitioned", "blocked"])
def test_every_path_sets_the_same_bits(scheme, layout):
    keys = [f"k{i}" for i in range(3000)] + list(range(3000))
    single = BloomFilter.from_size(512 * 40, 6, layout=layout, hash_scheme=scheme)
    for k in keys:
        single.add(k)
    batch = BloomFilter.from_size(512 * 40, 6, layout=layout, hash_scheme=scheme)
    batch.update(keys)
    threaded = BloomFilter.from_size(512 * 40, 6, layout=layout, hash_scheme=scheme)
    threaded.update(keys, threads=2)
    arrays = BloomFilter.from_size(512 * 40, 6, layout=layout, hash_scheme=scheme)
    arrays.update(np.array(keys[:3000]))
    arrays.update(np.arange(3000, dtype=np.uint64), threads=2)
    assert single == batch == threaded == arrays
    assert single.contains_many(keys).all() and single.contains_many(np.arange(3000), threads=2).all()


def test_the_two_schemes_place_keys_differently():
    a = BloomFilter.from_size(4096, 4, hash_scheme="xxh3")
    b = BloomFilter.from_size(4096, 4, hash_scheme="xxh64")
    assert [a._bit_indices(k) != b._bit_indices(k) for k in KEYS].count(True) == len(KEYS)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_scheme_is_saved_and_loaded(scheme, tmp_path):
    f = BloomFilter(1000, 0.01, hash_scheme=scheme)
    f.update(KEYS)
    header, _ = _format.loads(f.to_bytes())
    assert header.hash_scheme == _format.HASH_SCHEME_NAMES[scheme]
    f.save(tmp_path / "f.bloom")
    for again in (BloomFilter.from_bytes(f.to_bytes()), BloomFilter.load(tmp_path / "f.bloom"), f.copy()):
        assert again.hash_scheme == scheme and again == f
        grown, again_grown = f.copy(), again
        grown.update(["new", 77])
        again_grown.update(["new", 77])
        assert again_grown == grown  # a loaded filter goes on hashing with its own scheme
    with BloomFilter.open(tmp_path / "f.bloom") as mapped:
        assert mapped.hash_scheme == scheme and all(k in mapped for k in KEYS)


def test_filters_of_different_schemes_never_combine():
    a = BloomFilter.from_size(4096, 4, hash_scheme="xxh3")
    b = BloomFilter.from_size(4096, 4, hash_scheme="xxh64")
    assert not a.is_compatible(b) and a != b
    with pytest.raises(ValueError, match="hash_scheme: 'xxh3' vs 'xxh64'"):
        a | b
    c = CountingBloomFilter.from_size(1000, 3, hash_scheme="xxh64")
    with pytest.raises(ValueError, match="hash_scheme"):
        c | CountingBloomFilter.from_size(1000, 3)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_counting_filters_keep_the_scheme(scheme):
    c = CountingBloomFilter(500, hash_scheme=scheme)
    c.update(KEYS)
    bloom = c.to_bloom()
    assert bloom.hash_scheme == scheme and all(k in bloom for k in KEYS)
    plain = BloomFilter.from_size(c.num_cells, c.num_hashes, layout=c.layout, hash_scheme=scheme)
    plain.update(KEYS)
    assert plain == bloom
    again = CountingBloomFilter.from_bytes(c.to_bytes())
    assert again.hash_scheme == scheme and again == c and c.copy() == c
    v = VariableIncrementCountingBloomFilter(500, hash_scheme=scheme)
    v.update(KEYS)
    v_again = VariableIncrementCountingBloomFilter.from_bytes(v.to_bytes())
    assert v_again.hash_scheme == scheme and v_again == v and v.copy() == v


@pytest.mark.parametrize("scheme", SCHEMES)
def test_scalable_filters_keep_the_scheme(scheme):
    s = ScalableBloomFilter(50, hash_scheme=scheme)
    s.update(f"k{i}" for i in range(400))
    assert all(stage.hash_scheme == scheme for stage in s._stages) and len(s._stages) > 1
    again = ScalableBloomFilter.from_bytes(s.to_bytes())
    assert again.hash_scheme == scheme and again == s and s.copy() == s


@pytest.mark.parametrize("cls", [CountingBloomFilter, VariableIncrementCountingBloomFilter])
def test_a_custom_scheme_file_is_refused_by_keyed_structures(cls):
    header, payload = _format.loads(cls.from_size(64, 1).to_bytes())
    data = _format.dumps(dataclasses.replace(header, hash_scheme=_format.HashScheme.CUSTOM), payload)
    with pytest.raises(_format.FormatError, match="needs hash scheme XXH3_V1 or XXH64_V1, the file says CUSTOM"):
        cls.from_bytes(data)
