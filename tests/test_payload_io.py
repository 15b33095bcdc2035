"""Reading and writing payloads (docs/format.md): load() reads the payload once, straight into the memory the filter
keeps, checksummed as it arrives (by a helper thread from HASH_THREAD_MIN bytes on); save() writes it from the
filter's memory, its checksum computed meanwhile. Exact bytes and checksums, the errors of short or changing files,
and memory: no second copy, nothing of the payload's size on the Python heap."""
from __future__ import annotations

import errno
import os
import threading
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomwise import BloomFilter, CountingBloomFilter, FormatError
from bloomwise import VariableIncrementCountingBloomFilter as VICBF
from bloomwise import _format as fmt
from bloomwise._native.hashes import xxh64
from bloomwise._native.storage import HASH_THREAD_MIN, AlignedBuffer, _xxh64_in_pieces, read_payload

# A payload that takes the helper-thread path and ends inside a 32-byte stripe (13 bytes past a whole number).
BIG = HASH_THREAD_MIN + (1 << 20) + 13


def random_bytes(n: int, seed: int = 7) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def raw_header(payload_length: int, **changes) -> fmt.Header:
    return fmt.Header(structure=fmt.Structure.BLOOM, layout=fmt.Layout.CLASSIC, hash_scheme=fmt.HashScheme.XXH3_V1,
                      seed=3, num_cells=max(1, 8 * payload_length), num_hashes=4, payload_length=payload_length,
                      **changes)


# --- XXH64 in pieces ------------------------------------------------------------------------------------------

def test_xxh64_in_pieces_known_values():
    assert _xxh64_in_pieces(b"", 0) == 0xEF46DB3751D8E999  # the reference implementation's XXH64("")
    assert _xxh64_in_pieces(b"a", 32) == 0xD24EC4F1A98C6E5B  # XXH64("a")
    data = random_bytes(100_003)
    assert {_xxh64_in_pieces(data, piece) for piece in (0, 32, 64, 4096, 1 << 20)} == {xxh64(data)}


@settings(deadline=None)
@given(st.binary(max_size=400), st.integers(1, 6), st.integers(0, 2**64 - 1))
def test_xxh64_in_pieces_equals_xxh64(data, stripes, seed):
    assert _xxh64_in_pieces(data, 32 * stripes, seed) == xxh64(data, seed)


def test_xxh64_in_pieces_wants_whole_stripes():
    with pytest.raises(ValueError, match="piece must be a multiple of 32, got 33"):
        _xxh64_in_pieces(b"abc", 33)


# --- read_payload -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("payload") / "big.bin"
    data = random_bytes(64 + BIG, seed=11)
    path.write_bytes(data)
    return path, data


@pytest.mark.parametrize("length", [0, 1, 31, 32, 33, 1 << 20, (1 << 20) + 7, BIG])
@pytest.mark.parametrize("threaded", [True, False])
def test_read_payload_reads_and_hashes_exactly(big_file, length, threaded):
    path, data = big_file
    fd = os.open(path, os.O_RDONLY)
    try:
        buffer, done, checksum = read_payload(fd, 64, length, True, threaded)
        assert isinstance(buffer, AlignedBuffer) and done == length
        assert bytes(buffer) == data[64:64 + length] and checksum == xxh64(data[64:64 + length])
        unverified, done, checksum = read_payload(fd, 64, length, False, threaded)
        assert bytes(unverified) == data[64:64 + length] and checksum is None
    finally:
        os.close(fd)


@pytest.mark.parametrize("length", [100, BIG])
def test_read_payload_of_a_short_file_says_how_much_it_read(big_file, length):
    path, data = big_file
    fd = os.open(path, os.O_RDONLY)
    try:
        start = len(data) - length + 40  # 40 bytes too few
        buffer, done, checksum = read_payload(fd, start, length, True)
    finally:
        os.close(fd)
    assert done == length - 40 and checksum is None
    assert bytes(buffer) == data[start:] + bytes(40)  # what was read, then zeros: no uninitialised memory


def test_read_payload_errors():
    with pytest.raises(OSError) as info:
        read_payload(987_654, 0, 100, True)  # not an open file
    assert info.value.errno == errno.EBADF
    with pytest.raises(ValueError, match="offset must be >= 0, got -1"):
        read_payload(0, -1, 10, True)


# --- load(): one read, no second copy ---------------------------------------------------------------------------

def _filled(cls, capacity=20_000):
    f = cls(capacity, 0.01)
    f.update(range(capacity // 2))
    return f


@pytest.mark.parametrize("cls", [BloomFilter, CountingBloomFilter, VICBF])
def test_load_keeps_the_memory_the_payload_was_read_into(tmp_path, monkeypatch, cls):
    f = _filled(cls)
    path = tmp_path / "f.bw"
    f.save(path)
    buffers = []

    def recording(*args):
        result = read_payload(*args)
        buffers.append(result[0])
        return result

    monkeypatch.setattr(fmt, "_read_payload", recording)
    for verify in (True, False):
        loaded = cls.load(path, verify=verify)
        assert loaded == f and loaded._payload().obj is buffers[-1]  # the filter's bits are the buffer read into
        loaded.add("one more")  # and they are its own, writable
        assert "one more" in loaded and "one more" not in cls.load(path)


def test_load_with_hash_functions_copies_into_the_filters_own_storage(tmp_path):
    functions = [lambda x: x % 97, lambda x: (7 * x + 3) % 97]
    f = BloomFilter.from_hash_functions(97, functions)
    for key in (5, 50, 500):
        f.add(key)
    path = tmp_path / "custom.bw"
    f.save(path)
    loaded = BloomFilter.load(path, functions=functions)
    assert loaded._payload() == f._payload() and all(k in loaded for k in (5, 50, 500))


def test_load_allocates_nothing_of_the_payloads_size_on_the_python_heap(tmp_path):
    f = BloomFilter.from_size(8 * BIG // 512 * 512, 7)
    f.update(np.arange(100_000, dtype=np.uint64))
    path = tmp_path / "big.bw"
    f.save(path)
    tracemalloc.start()
    try:
        loaded = BloomFilter.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert loaded == f
    assert peak < f.nbytes // 16, f"{peak} bytes traced while loading a {f.nbytes}-byte payload"


def _peak_rss_growth(fn) -> int:
    """How far the process's peak resident memory (VmHWM, reset through /proc/self/clear_refs) rose above its
    resident memory at the start while ``fn()`` ran."""
    def status(field):
        with open("/proc/self/status") as file:
            line = next(line for line in file if line.startswith(field + ":"))
        return int(line.split()[1]) * 1024
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")
    base = status("VmRSS")
    result = fn()
    return status("VmHWM") - base, result


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc/self/clear_refs")
@pytest.mark.parametrize("cls", [BloomFilter, CountingBloomFilter])
def test_loading_touches_the_payloads_size_of_memory_once(tmp_path, cls):
    f = cls.from_size(64 << 20 if cls is BloomFilter else 16 << 20, 4)  # a 64 MiB payload (counting: 4-bit cells)
    f.update(np.arange(10_000, dtype=np.uint64))
    path = tmp_path / "f.bw"
    f.save(path)
    cls.load(path)  # warm: the file in the page cache, the code paths imported
    try:
        grew, loaded = _peak_rss_growth(lambda: cls.load(path))
    except OSError:
        pytest.skip("cannot reset the peak resident memory here")
    assert loaded == f
    # one payload (plus huge-page rounding); a zero-filled read buffer copied into the filter would be two
    assert grew < 1.5 * f.nbytes, f"peak resident memory grew by {grew} bytes for a {f.nbytes}-byte payload"


# --- load(): errors -------------------------------------------------------------------------------------------

def test_a_header_claiming_more_than_the_file_holds_is_refused_before_allocating(tmp_path, monkeypatch):
    path = tmp_path / "cut.bw"
    fmt.save(path, raw_header(BIG), random_bytes(BIG))
    with open(path, "r+b") as file:
        file.truncate(os.path.getsize(path) - 1)
    calls = []
    monkeypatch.setattr(fmt, "_read_payload", lambda *args: calls.append(args))
    with pytest.raises(FormatError, match=rf"truncated: the header declares a {BIG}-byte payload .*\(1 missing\)"):
        fmt.load(path)
    assert calls == []  # nothing of the declared size was allocated


def test_a_file_cut_short_while_it_is_read_is_reported_as_truncated(tmp_path, monkeypatch):
    path = tmp_path / "shrinking.bw"
    fmt.save(path, raw_header(BIG), random_bytes(BIG))

    def cut_then_read(fd, offset, length, verify):
        os.truncate(path, offset + length - 1000)
        return read_payload(fd, offset, length, verify)

    monkeypatch.setattr(fmt, "_read_payload", cut_then_read)
    with pytest.raises(FormatError, match=rf"^{path}: truncated: .* the file has {64 + BIG - 1000} \(1000 missing\)"):
        fmt.load(path)


def test_a_header_rewritten_while_the_payload_is_read_makes_load_read_again(tmp_path, monkeypatch):
    """A header and a payload from two different versions of the file are never returned together (verify=False
    has no checksum to catch it)."""
    old, new = BloomFilter.from_size(1 << 20, 5), BloomFilter.from_size(1 << 20, 5)
    old.update(range(1000))
    new.update(range(5000, 8000))
    path = tmp_path / "rewritten.bw"
    old.save(path)
    calls = []

    def rewrite_then_read(fd, offset, length, verify):
        if not calls:
            with open(path, "r+b") as file:  # in place, as a writer of a shared map would
                file.write(new.to_bytes())
        calls.append(offset)
        return read_payload(fd, offset, length, verify)

    monkeypatch.setattr(fmt, "_read_payload", rewrite_then_read)
    loaded = BloomFilter.load(path, verify=False)
    assert len(calls) == 2 and loaded == new and loaded.num_keys == new.num_keys == 3000


@pytest.mark.parametrize("where", [0, BIG // 2, BIG - 1])
def test_a_corrupted_large_payload_is_caught_wherever_the_damage_is(tmp_path, where):
    path = tmp_path / "damaged.bw"
    payload = bytearray(random_bytes(BIG))
    fmt.save(path, raw_header(BIG), payload)
    with open(path, "r+b") as file:
        file.seek(64 + where)
        file.write(bytes([payload[where] ^ 0x10]))
    with pytest.raises(FormatError, match="payload checksum mismatch"):
        fmt.load(path)
    header, read = fmt.load(path, verify=False)
    assert header == raw_header(BIG) and read[where] == payload[where] ^ 0x10


# --- save() ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("length", [0, 100, BIG])
def test_save_writes_exactly_what_dumps_gives(tmp_path, length):
    header, payload = raw_header(length, meta={"note": "é"}), random_bytes(length)
    path = tmp_path / "f.bw"
    fmt.save(path, header, payload)
    assert path.read_bytes() == fmt.dumps(header, payload)
    loaded_header, loaded = fmt.load(path)
    assert loaded_header == header and loaded == payload


def test_a_failed_save_lets_go_of_the_payload_before_it_returns(tmp_path, monkeypatch):
    """The helper thread hashing a large payload is waited for even when the write fails: afterwards the caller
    may resize its buffer, or close the memory map the payload lives in."""
    def slow_xxh64(data, seed):
        time.sleep(0.3)
        return xxh64(data, seed)

    def full_disk(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fmt, "_xxh64", slow_xxh64)
    monkeypatch.setattr(fmt, "_write_all", full_disk)
    payload = bytearray(BIG)
    threads = threading.active_count()
    with pytest.raises(OSError, match="No space left"):
        fmt.save(tmp_path / "f.bw", raw_header(BIG), payload)
    payload.extend(b"x")  # BufferError if the helper thread still held it
    assert threading.active_count() == threads and os.listdir(tmp_path) == []
