"""Squid Cache Digest format: exact layout, round trips, the false-positive rate against theory, corrupted input."""
import hashlib
import math
import struct

import pytest
from hypothesis import given, settings, strategies as st

from bloomwise.cache.squid_digest import (
    CBLOCK_SIZE, CacheDigest, SquidDigestSummary, mask_size_for, split_request_key, store_key)
from bloomwise.errors import FormatError


def _bits_by_hand(url, mask_size, method_byte=1):
    key = hashlib.md5(bytes([method_byte]) + url.encode()).digest()
    return [int.from_bytes(key[4 * i:4 * i + 4], "big") % (mask_size * 8) for i in range(4)]


def test_store_key_is_md5_of_method_byte_and_url():
    assert store_key("http://example.com/") == hashlib.md5(b"\x01http://example.com/").digest()
    assert store_key("http://example.com/", "HEAD") == hashlib.md5(b"\x04http://example.com/").digest()
    with pytest.raises(ValueError, match="no Squid method id"):
        store_key("http://x/", "BREW")


def test_exact_bits_of_one_key():
    d = CacheDigest(capacity=1000, bits_per_entry=5)
    url = "http://127.0.0.1:8080/doc/42"
    assert d.add_url(url) is True
    expected = set(_bits_by_hand(url, d.mask_size))
    on = {b for b in range(d.mask_size * 8) if d.mask[b >> 3] & (1 << (b % 8))}
    assert on == expected
    assert d.count == 1 and d.contains_url(url) and f"GET {url}" in d
    assert d.add_url(url) is False  # every bit already set
    assert d.count == 2             # Squid counts additions, not distinct keys


def test_control_block_layout_is_pinned():
    d = CacheDigest(capacity=100, bits_per_entry=5)
    for i in range(7):
        d.add_url(f"http://h/{i}")
    d.del_count = 3
    data = d.to_bytes()
    assert len(data) == CBLOCK_SIZE + 63 == CBLOCK_SIZE + mask_size_for(100, 5)
    assert data[:22] == struct.pack(">hhiiiiBB", 5, 3, 100, 7, 3, 63, 5, 4)
    assert data[22:CBLOCK_SIZE] == bytes(CBLOCK_SIZE - 22)
    assert data[CBLOCK_SIZE:] == bytes(d.mask)


def test_split_request_key():
    assert split_request_key("GET http://a/ b") == ("GET", "http://a/ b")
    assert split_request_key("head http://a/") == ("HEAD", "http://a/")
    assert split_request_key("http://a/") == ("GET", "http://a/")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=40), min_size=0, max_size=60), st.integers(1, 16))
def test_round_trip_and_no_false_negatives(urls, bpe):
    d = CacheDigest.from_keys([f"GET http://x/{u}" for u in urls], bits_per_entry=bpe)
    e = CacheDigest.from_bytes(d.to_bytes())
    assert e == d and e.to_bytes() == d.to_bytes()
    assert all(e.contains_url(f"http://x/{u}") for u in urls)


def test_false_positive_rate_matches_theory():
    # n keys in a digest sized for n at 5 bits/entry: FPR = (1 - (1 - 1/m)^(4n))^4 (about 0.092). The measured
    # count over 40,000 absent keys must lie within 5.5 standard deviations (false-alarm probability < 1e-7).
    n, bpe, trials = 4000, 5, 40_000
    d = CacheDigest.from_keys((f"http://origin/{i}" for i in range(n)), bits_per_entry=bpe)
    m = d.mask_size * 8
    fpr = (1 - (1 - 1 / m) ** (4 * n)) ** 4
    assert all(d.contains_url(f"http://origin/{i}") for i in range(n))
    hits = sum(d.contains_url(f"http://elsewhere/{i}") for i in range(trials))
    sd = math.sqrt(trials * fpr * (1 - fpr))
    assert abs(hits - trials * fpr) < 5.5 * sd, (hits, trials * fpr)
    assert abs(d.estimated_fpr() - fpr) < 0.02
    assert abs(d.approx_count() - n) < 0.05 * n


def _valid(capacity=50, bpe=5):
    d = CacheDigest(capacity, bpe)
    d.add_url("http://a/")
    return bytearray(d.to_bytes())


@pytest.mark.parametrize("offset, fmt, value, message", [
    (0, ">h", 2, "older than"),                 # version.current below 3
    (2, ">h", 6, "requires reader version 6"),  # required above what we read
    (0, ">h", 4, "required version 5 > current"),  # current 4, required 5 (packed below)
    (4, ">i", 0, "corrupted"),                  # capacity 0
    (4, ">i", -5, "corrupted"),
    (8, ">i", -1, "corrupted"),                 # count
    (16, ">i", 0, "corrupted"),                 # mask_size 0
    (16, ">i", 33, "inconsistent"),             # mask_size not (cap*bpe+7)//8 = 32
    (20, ">B", 0, "corrupted"),                 # bits_per_entry 0
    (20, ">B", 6, "inconsistent"),              # bits_per_entry no longer matches mask_size
    (21, ">B", 3, "3 hash functions"),
])
def test_corrupted_control_block_is_format_error(offset, fmt, value, message):
    data = _valid()
    if message.startswith("required version"):
        struct.pack_into(">hh", data, 0, 4, 5)
    else:
        struct.pack_into(fmt, data, offset, value)
    with pytest.raises(FormatError, match=message):
        CacheDigest.from_bytes(bytes(data))


def test_truncated_and_trailing_bytes():
    data = bytes(_valid())
    for cut in list(range(0, CBLOCK_SIZE + 1, 7)) + [len(data) - 1]:
        with pytest.raises(FormatError, match="truncated"):
            CacheDigest.from_bytes(data[:cut])
    with pytest.raises(FormatError, match="trailing"):
        CacheDigest.from_bytes(data + b"\x00")


def test_oversized_mask_is_rejected_before_allocation():
    # A 128-byte control block claiming a 2 GB-class mask: rejected by the size limit, nothing allocated.
    cblock = struct.pack(">hhiiiiBB", 5, 3, 400_000_000, 1, 0, (400_000_000 * 5 + 7) // 8, 5, 4)
    cblock += bytes(CBLOCK_SIZE - len(cblock))
    with pytest.raises(FormatError, match="exceeds the limit"):
        CacheDigest.from_bytes(cblock)
    small = bytes(_valid(capacity=1000))
    with pytest.raises(FormatError, match="exceeds the limit of 100 bytes"):
        CacheDigest.from_bytes(small, max_mask_size=100)
    # capacity * bits_per_entry beyond Squid's 31-bit limit
    cblock = struct.pack(">hhiiiiBB", 5, 3, 2**31 - 1, 1, 0, 1000, 200, 4) + bytes(CBLOCK_SIZE - 22)
    with pytest.raises(FormatError):
        CacheDigest.from_bytes(cblock + bytes(1000))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_crash(data):
    try:
        d = CacheDigest.from_bytes(data)
    except FormatError:
        return
    assert len(data) == CBLOCK_SIZE + d.mask_size


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 255))
def test_single_byte_corruption_of_control_block(position, value):
    data = _valid()
    position %= 22  # the fields Squid reads
    data[position] = value
    try:
        d = CacheDigest.from_bytes(bytes(data))
    except FormatError:
        return
    # Accepted only if still self-consistent (e.g. a count or del_count change, or a compatible version).
    assert d.mask_size == mask_size_for(d.capacity, d.bits_per_entry)


def test_summary_view_for_routing():
    d = CacheDigest.from_keys(["GET http://a/1", "GET http://a/2"], capacity=100)
    s = SquidDigestSummary.from_bytes(d.to_bytes(), version=3)
    assert s.may_contain("GET http://a/1") and "GET http://a/2" in s
    assert not s.may_contain("GET http://a/never-added")
    assert s.version == 3 and s.num_keys == 2 and s.nbytes == len(d.to_bytes()) and s.origin is None
    assert s.posterior("GET http://a/never-added", 0.5) == 0.0
    fpr = s.estimated_fpr()
    assert s.posterior("GET http://a/1", 0.1) == pytest.approx(0.1 / (0.1 + 0.9 * fpr))
    with pytest.raises(TypeError):
        s.counters("GET http://a/1")
