"""The internal storage interface (bloomwise._storage) that dask, redis, cache.summary and _persistence use."""
import warnings

import numpy as np
import pytest

from bloomwise import BloomFilter, CountingBloomFilter, VariableIncrementCountingBloomFilter
from bloomwise._storage import BitStorage, CellStorage, JournaledStorage, StorageGeometry
from bloomwise.errors import CapacityWarning

KEYS = [f"key{i}" for i in range(300)]


def filled(cls, **options):
    f = cls(1000, 0.01, **options)
    f.update(KEYS)
    return f


STRUCTURES = [
    pytest.param(lambda: filled(BloomFilter), id="bloom"),
    pytest.param(lambda: filled(BloomFilter, layout="partitioned", seed=7, hash_scheme="xxh64"), id="bloom-xxh64"),
    pytest.param(lambda: filled(CountingBloomFilter, counter_bits=8), id="counting"),
    pytest.param(lambda: filled(VariableIncrementCountingBloomFilter, increments=(1, 2, 4)), id="vicbf"),
]


@pytest.mark.parametrize("make", STRUCTURES)
def test_from_payload_rebuilds_the_structure_exactly(make):
    f = make()
    assert isinstance(f, CellStorage)
    geometry = f.storage_geometry()
    copy = type(f).from_payload(geometry, f.payload_view(), num_keys=f.num_keys)
    assert copy == f and copy.num_keys == f.num_keys and copy.storage_geometry() == geometry
    assert bytes(copy.payload_view()) == f.to_bytes()[-f.nbytes:]  # the payload is the file format's payload
    assert copy.capacity is None and copy.fpr is None
    empty = type(f).from_payload(geometry)
    assert not empty.payload_view().tobytes().strip(b"\0") and empty.num_keys == 0
    empty.replace_payload(f.payload_view())
    assert all(key in empty for key in KEYS)


def test_payload_view_is_read_only_and_replace_checks_the_length():
    f = filled(BloomFilter)
    view = f.payload_view()
    assert view.readonly and view.nbytes == f.nbytes
    with pytest.raises(ValueError, match="payload holds 8 bytes"):
        f.replace_payload(bytes(8))


def test_geometry_of_another_structure_is_refused():
    geometry = filled(CountingBloomFilter).storage_geometry()
    with pytest.raises(ValueError, match="a counting geometry cannot build a bloom structure"):
        BloomFilter.from_payload(geometry)
    with pytest.raises(ValueError, match="structure must be one of"):
        StorageGeometry("scalable", "blocked", 512, 3)


def test_vicbf_payload_with_an_unreachable_cell_is_refused():
    f = VariableIncrementCountingBloomFilter.from_size(64, 3)
    cells = bytearray(f.nbytes)
    cells[0] = 0x50  # c = 0 but a = 5: no sum of increments leaves that
    with pytest.raises(ValueError, match="position 0 has c = 0 but a = 5"):
        f.replace_payload(bytes(cells))


@pytest.mark.parametrize("cls", [BloomFilter, CountingBloomFilter])
def test_set_target_warns_as_the_constructor_s_filter_would(cls):
    f = cls(10_000, 0.01)
    f.update(KEYS)
    copy = cls.from_payload(f.storage_geometry(), f.payload_view(), num_keys=f.keys_counted)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        copy.set_target(1000, 0.01)  # 300 keys: under capacity, silent
    assert copy.capacity == 1000 and copy.fpr == 0.01
    copy = cls.from_payload(f.storage_geometry(), f.payload_view(), num_keys=f.keys_counted)
    with pytest.warns(CapacityWarning, match="sized for 100 keys"):
        copy.set_target(100, 0.01)
    with pytest.raises(ValueError, match="fpr must be a probability"):
        copy.set_target(100, 1.5)


def test_bloom_keys_counted_are_the_new_keys_and_assign_bits_sets_absolute_values():
    f = BloomFilter(1000, 0.01)
    assert isinstance(f, BitStorage) and not isinstance(f, JournaledStorage)
    f.add("a"), f.add("a")
    assert (f.num_keys, f.keys_counted) == (2, 1)
    f.assign_bits(np.array([0, 1], dtype=np.uint64), np.array([1, 0], dtype=np.uint8))
    assert np.frombuffer(f.payload_view(), dtype=np.uint8)[0] & 3 == 1


def test_counting_journal_through_the_interface():
    f = CountingBloomFilter.from_size(128, 3)
    assert isinstance(f, JournaledStorage)
    mark = f.mark()
    f.add("x")
    entries, end = f.journal_entries_since(mark)
    positions = sorted({int(e) >> 1 for e in entries})
    assert positions == _bit_positions(f)
    assert end == mark + len(entries) and all(int(e) & 1 for e in entries)
    bits = f.bit_view()
    assert bits.dtype == np.uint64 and bytes(bits) == bytes(f.to_bloom().payload_view())
    f.trim_journal(end)
    with pytest.raises(ValueError, match="outside the journal"):
        f.journal_entries_since(mark)
    assert f.key_function is None


def _bit_positions(f):
    bits = np.unpackbits(np.frombuffer(f.to_bloom().payload_view(), dtype=np.uint8), bitorder="little")
    return np.flatnonzero(bits).tolist()
