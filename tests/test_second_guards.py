"""Second, independent guards of checks that must never go: the payload checksum on load, zero padding, the journal
of a counting filter's union, and that filters of different hash schemes never combine."""
from __future__ import annotations

import pytest

from bloomwise import BloomFilter, CountingBloomFilter, FormatError, ScalableBloomFilter
from bloomwise import VariableIncrementCountingBloomFilter as VICBF
from bloomwise.counting import apply_changes


def _filled(cls, **options):
    f = cls(500, 0.01, **options)
    f.update([f"key{i}" for i in range(300)])
    return f


STRUCTURES = [BloomFilter, CountingBloomFilter, VICBF, ScalableBloomFilter]


@pytest.mark.parametrize("cls", STRUCTURES)
def test_a_flipped_payload_bit_fails_the_checksum_on_load(tmp_path, cls):
    f = _filled(cls)
    path = tmp_path / "f.bin"
    f.save(path)
    data = bytearray(path.read_bytes())
    data[len(data) - 40] ^= 0x10  # inside the payload (every payload here is longer than 40 bytes)
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="checksum"):
        cls.load(path)
    with pytest.raises(FormatError, match="checksum"):
        cls.from_bytes(bytes(data))
    cls.load(path, verify=False)  # the same file loads when the check is skipped: it was the checksum


def test_counting_filter_padding_must_be_zero(tmp_path):
    f = CountingBloomFilter.from_size(101, 3, counter_bits=4)  # 101 nibbles: 27 nibbles of padding
    f.update(["a", "b"])
    header, payload = f._header(), bytearray(f._payload())
    payload[-1] |= 0xF0
    from bloomwise import _format
    with pytest.raises(FormatError, match="padding|past|after"):
        CountingBloomFilter.from_bytes(_format.dumps(header, payload))


def test_the_journal_records_a_union():
    a = CountingBloomFilter.from_size(2000, 4, seed=9)
    b = CountingBloomFilter.from_size(2000, 4, seed=9)
    a.update([f"a{i}" for i in range(100)])
    b.update([f"b{i}" for i in range(100)])
    peer, mark = a.to_bloom(), a.mark()
    a |= b
    changes = a.changes_since(mark)
    assert len(changes) > 0
    apply_changes(peer, changes)
    assert peer == a.to_bloom() and all(f"b{i}" in peer for i in range(100))


@pytest.mark.parametrize("cls", STRUCTURES)
def test_different_hash_schemes_never_combine(cls):
    xxh3, xxh64 = _filled(cls, hash_scheme="xxh3"), _filled(cls, hash_scheme="xxh64")
    assert not xxh3.is_compatible(xxh64) and xxh3 != xxh64
    if cls in (ScalableBloomFilter, VICBF):
        return  # no set operations
    with pytest.raises(ValueError, match="hash_scheme: 'xxh3' vs 'xxh64'"):
        xxh3 | xxh64
    with pytest.raises(ValueError, match="hash_scheme"):
        xxh3.union(xxh64)
