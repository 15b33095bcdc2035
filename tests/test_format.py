"""The binary file format (bloomwise._format, docs/format.md): ids, exact bytes, validation, atomic save, mmap."""
from __future__ import annotations

import dataclasses
import errno
import json
import multiprocessing
import os
import pickle
import stat
import struct
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomwise import _format as fmt
from bloomwise._format import Flags, HashScheme, Header, Layout, Structure
from bloomwise.errors import FormatError

# An independent description of the header (docs/format.md), so the tests do not just echo the implementation.
HEADER = struct.Struct("<8sHBBBBHQQIIQQQ")
FIELDS = ("magic", "version", "structure", "layout", "hash", "flags", "meta_length", "seed", "num_cells",
          "num_hashes", "header_crc", "num_keys", "payload_length", "payload_checksum")


def make_header(**changes) -> Header:
    fields = dict(structure=Structure.BLOOM, layout=Layout.BLOCKED, hash_scheme=HashScheme.XXH64_V1,
                  seed=0x0123456789ABCDEF, num_cells=1024, num_hashes=7, payload_length=128, num_keys=42,
                  meta={"note": "h\u00e9", "counter_bits": 4})
    fields.update(changes)
    return Header(**fields)


PAYLOAD = bytes((i * 37 + 11) % 256 for i in range(128))
SMALL = fmt.dumps(make_header(), PAYLOAD)  # 64 header + 128 meta and padding + 128 payload


def forge(data: bytes, *, meta: bytes | None = None, payload: bytes | None = None, fix_crc: bool = True,
          **changes) -> bytes:
    """Rewrite header fields of a valid file and, by default, make its header checksum valid again."""
    fields = dict(zip(FIELDS, HEADER.unpack_from(data)))
    start = -(-(64 + fields["meta_length"]) // 64) * 64
    old_meta = data[64:64 + fields["meta_length"]]
    old_payload = data[start:]
    meta = old_meta if meta is None else meta
    payload = old_payload if payload is None else payload
    fields["meta_length"] = len(meta)
    fields.update(changes)
    tail = meta + bytes(-(-(64 + len(meta)) // 64) * 64 - 64 - len(meta))
    if fix_crc:
        fields["header_crc"] = 0
        fields["header_crc"] = zlib.crc32(tail, zlib.crc32(HEADER.pack(*fields.values())))
    return HEADER.pack(*fields.values()) + tail + payload


def format_error(data, match: str | None = None, **kwargs) -> FormatError:
    with pytest.raises(FormatError, match=match) as info:
        fmt.loads(data, **kwargs)
    return info.value


# --- the format itself is pinned ------------------------------------------------------------------------------

def test_ids_are_append_only():
    # These numbers are written into every file. Never change or reuse one: add new members (and rows here).
    pinned = {
        Structure: {"BLOOM": 1, "COUNTING": 2, "VARIABLE_INCREMENT": 3, "SCALABLE": 4,
                    "GENERALIZED": 5, "RETOUCHED": 6, "SUMMARY_UPDATE": 7},
        Layout: {"NONE": 0, "CLASSIC": 1, "PARTITIONED": 2, "BLOCKED": 3},
        HashScheme: {"CUSTOM": 0, "XXH64_V1": 1, "XXH3_V1": 2, "XXH64_STAGES_V1": 3, "XXH3_STAGES_V1": 4},
        Flags: {"OPEN_FOR_WRITING": 1, "KEYED": 2},
    }
    for enum_type, table in pinned.items():
        actual = {member.name: member.value for member in enum_type}
        for name, value in table.items():
            assert actual.get(name) == value, f"{enum_type.__name__}.{name} must stay {value}"
        assert len(set(actual.values())) == len(actual), f"{enum_type.__name__} reuses a value"
    assert fmt.MAGIC == b"\x89BLOOMW\n"
    assert fmt.FORMAT_VERSION == 1 and fmt.SUPPORTED_VERSIONS == (1,)
    assert fmt.HEADER_SIZE == 64 and fmt.ALIGNMENT == 64


def test_schema_bytes():
    """The exact bytes of one file: any change to the layout, the encodings or the checksums fails here."""
    header = Header(structure=Structure.COUNTING, layout=Layout.PARTITIONED, hash_scheme=HashScheme.XXH64_V1,
                    seed=5, num_cells=100, num_hashes=3, payload_length=16, num_keys=2, meta={"counter_bits": 4},
                    flags=Flags.KEYED)
    data = fmt.dumps(header, bytes(range(16)))
    assert data.hex() == (
        "89424c4f4f4d570a" "0100" "02" "02" "01" "02" "1200" "0500000000000000" "6400000000000000" "03000000"
        "540fd50c" "0200000000000000" "1000000000000000" "f76941b82fefb644"
        + b'{"counter_bits":4}'.hex() + "00" * 46
        + "000102030405060708090a0b0c0d0e0f"
    )


def test_layout_matches_the_documented_offsets():
    fields = dict(zip(FIELDS, HEADER.unpack_from(SMALL)))
    meta = json.dumps({"counter_bits": 4, "note": "h\u00e9"}, separators=(",", ":"), ensure_ascii=False).encode()
    assert fields["magic"] == fmt.MAGIC and fields["version"] == 1
    assert (fields["structure"], fields["layout"], fields["hash"], fields["flags"]) == (1, 3, 1, 0)
    assert fields["meta_length"] == len(meta) and SMALL[64:64 + len(meta)] == meta
    assert (fields["seed"], fields["num_cells"], fields["num_hashes"]) == (0x0123456789ABCDEF, 1024, 7)
    assert (fields["num_keys"], fields["payload_length"]) == (42, 128)
    assert fields["payload_checksum"] == xxhash.xxh64_intdigest(PAYLOAD)
    assert len(SMALL) == 128 + 128 and SMALL[128:] == PAYLOAD  # payload at the next multiple of 64
    zeroed = SMALL[:36] + bytes(4) + SMALL[40:128]
    assert fields["header_crc"] == zlib.crc32(zeroed)


def test_payload_checksum_is_bit_exact_xxh64():
    for data in (b"", b"a", PAYLOAD, bytes(range(256)) * 5):
        assert fmt._xxh64(data, 0) == xxhash.xxh64_intdigest(data)


# --- round trips ----------------------------------------------------------------------------------------------

def test_round_trip_in_memory():
    header, payload = fmt.loads(SMALL)
    assert header == make_header()
    assert header.meta == {"note": "h\u00e9", "counter_bits": 4}
    assert payload.tobytes() == PAYLOAD
    assert payload.obj is SMALL  # a view into the input, not a copy
    header, payload = fmt.loads(bytearray(SMALL), structure=Structure.BLOOM)
    assert not payload.readonly


def test_empty_meta_puts_the_payload_right_after_the_header():
    data = fmt.dumps(make_header(meta={}), PAYLOAD)
    assert len(data) == 64 + 128 and data[64:] == PAYLOAD
    assert fmt.loads(data)[0].meta == {}


def test_payload_may_be_any_contiguous_buffer():
    np = pytest.importorskip("numpy")
    words = np.arange(16, dtype=np.uint64)
    expected = fmt.dumps(make_header(), words.tobytes())
    assert fmt.dumps(make_header(), words) == expected
    assert fmt.dumps(make_header(), memoryview(words.tobytes())) == expected
    assert fmt.dumps(make_header(), words.reshape(4, 4)) == expected
    with pytest.raises(ValueError, match="C-contiguous"):
        fmt.dumps(make_header(payload_length=64), words[::2])
    with pytest.raises(ValueError, match="payload_length is 128 but the payload has 127 bytes"):
        fmt.dumps(make_header(), PAYLOAD[:-1])
    with pytest.raises(TypeError, match="buffer protocol"):
        fmt.dumps(make_header(), [0] * 128)


@pytest.mark.parametrize("change, error, message", [
    (dict(structure=9), ValueError, "structure must be one of"),
    (dict(layout=7), ValueError, "layout must be one of"),
    (dict(num_cells=0), ValueError, r"num_cells must be in \[1, 281474976710656\], got 0"),
    (dict(num_cells=2**48 + 1), ValueError, "num_cells"),
    (dict(num_cells=10.0), TypeError, "num_cells must be an int, got float"),
    (dict(num_hashes=65), ValueError, "num_hashes"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed=2**64), ValueError, "seed"),
    (dict(num_keys=-1), ValueError, "num_keys"),
    (dict(flags=Flags.OPEN_FOR_WRITING), ValueError, "flags may only contain Flags.KEYED"),
    (dict(flags=4), ValueError, "flags may only contain Flags.KEYED"),
    (dict(meta={"x": float("nan")}), ValueError, "meta must be JSON-serializable"),
    (dict(meta={"x": object()}), ValueError, "meta must be JSON-serializable"),
    (dict(meta=[1, 2]), TypeError, "meta must be a mapping"),
    (dict(meta={"x": "y" * 70000}), ValueError, "at most 65535"),
])
def test_bad_header_arguments_name_the_field(change, error, message):
    with pytest.raises(error, match=message):
        make_header(**change)


def test_header_is_immutable_and_hashable():
    header = make_header()
    with pytest.raises(dataclasses.FrozenInstanceError):
        header.seed = 1
    with pytest.raises(TypeError):
        header.meta["x"] = 1
    assert hash(header) == hash(make_header())
    assert dataclasses.replace(header, num_keys=1) != header
    assert pickle.loads(pickle.dumps(header)) == header


def test_loads_wants_bytes():
    with pytest.raises(TypeError, match="data must support the buffer protocol"):
        fmt.loads("not bytes")


def test_save_and_load(tmp_path):
    path = tmp_path / "f.bloom"
    fmt.save(path, make_header(), PAYLOAD)
    assert path.read_bytes() == SMALL
    header, payload = fmt.load(str(path), structure=Structure.BLOOM)
    assert header == make_header() and payload.tobytes() == PAYLOAD and not payload.readonly
    assert os.listdir(tmp_path) == ["f.bloom"]


# --- bad input: always FormatError, never anything else --------------------------------------------------------

def test_every_flipped_byte_is_detected(tmp_path):
    path = tmp_path / "flipped"
    for position in range(len(SMALL)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(SMALL)
            damaged[position] ^= mask
            format_error(bytes(damaged))
            if mask == 0xFF:
                path.write_bytes(damaged)
                with pytest.raises(FormatError):
                    fmt.load(path)
                with pytest.raises(FormatError):
                    fmt.open_mapped(path)


def test_truncation_at_every_length_is_detected(tmp_path):
    path = tmp_path / "truncated"
    for length in range(len(SMALL)):
        error = format_error(SMALL[:length])
        assert "truncated" in str(error) or "empty" in str(error)
        path.write_bytes(SMALL[:length])
        with pytest.raises(FormatError, match=r"truncated|empty"):
            fmt.load(path)
        with pytest.raises(FormatError, match=r"truncated|empty"):
            fmt.open_mapped(path)


@pytest.mark.parametrize("start, hint", [
    (b"", "it is empty"),
    (b"\x1f\x8b\x08\x00" + bytes(100), "gzip"),
    (b"PK\x03\x04" + bytes(100), "zip archive"),
    (b"BZh91AY&SY" + bytes(100), "bzip2"),
    (b"apple\nbanana\ncherry\n" * 5, "looks like text"),
    (SMALL.replace(b"\n", b"\r\n", 1), "line endings were converted"),
    (SMALL[1:], "first byte was stripped"),
    (b"\x00" * 200, "starts with"),
])
def test_wrong_magic(start, hint):
    error = format_error(start)
    assert "not a bloomwise file" in str(error) and hint in str(error)


def test_unknown_version():
    format_error(forge(SMALL, version=2), r"unknown format version 2; this bloomwise reads version\(s\) 1")
    format_error(forge(SMALL, version=0), "unknown format version 0")


@pytest.mark.parametrize("changes, message", [
    (dict(structure=0), r"unknown structure id 0; this bloomwise knows 1 \(BLOOM\)"),
    (dict(structure=200), "unknown structure id 200"),
    (dict(layout=4), "unknown layout id 4"),
    (dict(hash=5), "unknown hash id 5"),
    (dict(flags=4), "reserved flag bits set: flags are 0x04"),
    (dict(flags=0x80), "reserved flag bits"),
    (dict(num_cells=0), "num_cells is 0"),
    (dict(num_cells=2**48 + 1), "num_cells is 281474976710657"),
    (dict(num_cells=2**64 - 1), "num_cells"),
    (dict(num_hashes=0), "num_hashes is 0"),
    (dict(num_hashes=65), "num_hashes is 65"),
    (dict(meta=b"{not json"), "not valid UTF-8 JSON"),
    (dict(meta=b'{"a":"\xff"}'), "not valid UTF-8 JSON"),
    (dict(meta=b"[1,2]"), "must be a JSON object, got a JSON list"),
    (dict(meta=b'{"a":NaN}'), "NaN is not allowed"),
    (dict(meta=b'{"a":' + b"[" * 30000 + b"]" * 30000 + b"}"), "not valid UTF-8 JSON"),
    (dict(meta=b'{"a":1' + b"9" * 5000 + b"}"), "not valid UTF-8 JSON"),
    (dict(meta=b'{"a":1}\0\0'), "not valid UTF-8 JSON"),
    (dict(payload_checksum=123), "payload checksum mismatch"),
    (dict(payload_length=127), "1 unexpected bytes after the payload"),
    (dict(payload_length=129), "truncated: the header declares a 129-byte payload"),
])
def test_invalid_values_with_a_valid_checksum(changes, message):
    # What a buggy or newer writer could produce: the checksum is right, the content is not acceptable.
    format_error(forge(SMALL, **changes), message)


def test_nonzero_padding_is_rejected():
    meta_length = HEADER.unpack_from(SMALL)[6]
    damaged = bytearray(SMALL)
    damaged[64 + meta_length + 3] = 1
    format_error(bytes(damaged), "header checksum mismatch")
    fields = dict(zip(FIELDS, HEADER.unpack_from(SMALL)))
    fields["header_crc"] = 0
    fields["header_crc"] = zlib.crc32(damaged[64:128], zlib.crc32(HEADER.pack(*fields.values())))
    format_error(HEADER.pack(*fields.values()) + damaged[64:], "padding after the metadata is not zero")


def test_metadata_longer_than_the_file():
    format_error(forge(SMALL[:100], fix_crc=False, meta_length=5000), "declares 5000 bytes of metadata")


def test_checksum_mismatch_messages():
    damaged = bytearray(SMALL)
    damaged[20] ^= 1
    format_error(bytes(damaged), r"corrupted: header checksum mismatch \(stored CRC32 0x")
    damaged = bytearray(SMALL)
    damaged[-1] ^= 1
    format_error(bytes(damaged), r"corrupted: payload checksum mismatch \(stored XXH64 0x")
    header, payload = fmt.loads(bytes(damaged), verify=False)  # the documented unsafe escape hatch
    assert payload[-1] == PAYLOAD[-1] ^ 1


def test_trailing_bytes():
    format_error(SMALL + b"\0", r"1 unexpected bytes after the payload: the header declares 256 bytes, "
                               r"the file has 257")
    format_error(SMALL + SMALL, "256 unexpected bytes")


def test_structure_mismatch_names_both_structures():
    data = fmt.dumps(make_header(structure=Structure.COUNTING), PAYLOAD)
    format_error(data, r"holds a CountingBloomFilter \(structure id 2\), expected a BloomFilter \(structure id 1\); "
                       r"load it with CountingBloomFilter.load\(\)", structure=Structure.BLOOM)
    assert fmt.loads(data, structure=Structure.COUNTING)[0].structure is Structure.COUNTING


def test_huge_declared_payload_fails_fast_without_allocating(tmp_path):
    data = forge(SMALL, payload_length=2**63)
    path = tmp_path / "huge"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        started = time.perf_counter()
        format_error(data, "truncated: the header declares a 9223372036854775808-byte payload")
        with pytest.raises(FormatError, match="truncated"):
            fmt.load(path)
        with pytest.raises(FormatError, match="truncated"):
            fmt.open_mapped(path)
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20 and elapsed < 1.0


def test_load_errors_name_the_file(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("apple\nbanana\n")
    with pytest.raises(FormatError, match=f"^{path}: not a bloomwise file"):
        fmt.load(path)


@settings(deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_format_error(data):
    with pytest.raises(FormatError):
        fmt.loads(data)
    with pytest.raises(FormatError):
        fmt.loads(fmt.MAGIC + data)


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(SMALL) - 1), st.integers(1, 255)), min_size=1, max_size=8))
def test_any_corruption_raises_format_error(edits):
    damaged = bytearray(SMALL)
    for position, mask in edits:
        damaged[position] ^= mask
    if bytes(damaged) != SMALL:  # two edits may cancel out
        format_error(bytes(damaged))


# --- Hypothesis round trips -----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8)
headers = st.builds(
    Header,
    structure=st.sampled_from(Structure), layout=st.sampled_from(Layout), hash_scheme=st.sampled_from(HashScheme),
    seed=st.integers(0, 2**64 - 1), num_cells=st.integers(1, 2**48), num_hashes=st.integers(1, 64),
    payload_length=st.just(0), num_keys=st.integers(0, 2**64 - 1),
    meta=st.dictionaries(st.text(max_size=8), json_values, max_size=4), flags=st.sampled_from([Flags(0), Flags.KEYED]))


@settings(deadline=None)
@given(headers, st.binary(max_size=200))
def test_round_trip_of_random_headers_and_payloads(header, payload):
    header = dataclasses.replace(header, payload_length=len(payload))
    data = fmt.dumps(header, payload)
    assert len(data) % 64 == len(payload) % 64 and (len(data) - len(payload)) % 64 == 0
    loaded, view = fmt.loads(data)
    assert loaded == header and view.tobytes() == payload
    assert fmt.dumps(loaded, view) == data  # canonical: loading and saving again changes nothing


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(headers, st.binary(max_size=200))
def test_round_trip_through_files(tmp_path, header, payload):
    header = dataclasses.replace(header, payload_length=len(payload))
    path = tmp_path / "f"
    fmt.save(path, header, payload)
    assert fmt.load(path) == (header, payload)
    with fmt.open_mapped(path) as mapped:
        assert mapped.header == header and mapped.payload == payload


# --- atomic save ----------------------------------------------------------------------------------------------

@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "filter.bloom"
    path.write_bytes(SMALL)
    return path


def assert_untouched(path: Path):
    assert path.read_bytes() == SMALL
    assert os.listdir(path.parent) == [path.name], "a temporary file was left behind"


def test_interrupted_save_keeps_the_old_file(saved, monkeypatch):
    new_header, new_payload = make_header(num_keys=1000), bytes(128)

    real_write = os.write

    def disk_full_midway(fd, data):
        real_write(fd, bytes(data)[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", disk_full_midway)
        with pytest.raises(OSError, match="No space left"):
            fmt.save(saved, new_header, new_payload)
    assert_untouched(saved)

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            fmt.save(saved, new_header, new_payload)
    assert_untouched(saved)

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", lambda *args: (_ for _ in ()).throw(OSError(errno.EXDEV, "rename failed")))
        with pytest.raises(OSError, match="rename failed"):
            fmt.save(saved, new_header, new_payload)
    assert_untouched(saved)

    with pytest.raises(TypeError):  # a payload that cannot export a buffer
        fmt.save(saved, new_header, object())
    with pytest.raises(ValueError, match="payload_length"):
        fmt.save(saved, new_header, bytes(5))
    assert_untouched(saved)

    fmt.save(saved, new_header, new_payload)  # and a save that completes replaces it
    assert fmt.load(saved)[0].num_keys == 1000
    assert os.listdir(saved.parent) == [saved.name]


def test_save_permissions_and_symlinks(tmp_path):
    new = tmp_path / "new"
    fmt.save(str(new), make_header(), PAYLOAD)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask
    new.chmod(0o640)
    fmt.save(new, make_header(), PAYLOAD)
    assert stat.S_IMODE(new.stat().st_mode) == 0o640
    link = tmp_path / "link"
    link.symlink_to(new)
    fmt.save(link, make_header(num_keys=5), PAYLOAD)
    assert link.is_symlink() and fmt.load(new)[0].num_keys == 5


def test_save_does_not_disturb_a_reader_of_the_old_file(saved):
    with fmt.open_mapped(saved) as mapped:
        fmt.save(saved, make_header(), bytes(128))
        assert mapped.payload == PAYLOAD  # the reader keeps the old inode
    assert fmt.load(saved)[1] == bytes(128)


# --- memory maps ----------------------------------------------------------------------------------------------

def test_open_mapped_read_only(saved):
    with fmt.open_mapped(saved, structure=Structure.BLOOM) as mapped:
        assert mapped.header == make_header() and mapped.payload == PAYLOAD
        assert mapped.payload.readonly and mapped.payload_verified and not mapped.writable
        with pytest.raises(TypeError):
            mapped.payload[0] = 1
        mapped.flush()  # a no-op for readers
        assert "read-only" in repr(mapped)
    assert mapped.closed and "closed" in repr(mapped)
    with pytest.raises(ValueError):
        mapped.payload[0]
    mapped.close()  # idempotent


def test_open_mapped_payload_is_64_byte_aligned(saved):
    np = pytest.importorskip("numpy")
    mapped = fmt.open_mapped(saved)
    words = np.frombuffer(mapped.payload, dtype=np.uint64)
    assert words.ctypes.data % 64 == 0
    with pytest.raises(BufferError, match="still in use"):
        mapped.close()
    assert not mapped.closed and mapped.payload == PAYLOAD  # still usable
    del words
    mapped.close()


def test_open_mapped_verifies_the_payload(saved):
    damaged = bytearray(SMALL)
    damaged[-5] ^= 0x10
    saved.write_bytes(damaged)
    with pytest.raises(FormatError, match=f"^{saved}: corrupted: payload checksum mismatch"):
        fmt.open_mapped(saved)
    with fmt.open_mapped(saved, verify=False) as mapped:
        assert not mapped.payload_verified


def test_writable_map_protocol(saved):
    with fmt.open_mapped(saved, writable=True) as writer:
        assert "writable" in repr(writer)
        flags = HEADER.unpack_from(saved.read_bytes())[5]
        assert flags & Flags.OPEN_FOR_WRITING  # set in the file while open
        assert writer.header.flags == Flags(0)  # but never part of the Header
        writer.payload[0:4] = b"abcd"
        # A copying load refuses a payload that is changing; a read-only map shares it live, unverified.
        with pytest.raises(FormatError, match="is open for writing by another process"):
            fmt.load(saved)
        assert fmt.load(saved, verify=False)[1][:4] == b"abcd"
        with fmt.open_mapped(saved) as reader:
            assert not reader.payload_verified and reader.payload[:4] == b"abcd"
            writer.payload[4] = ord("e")
            assert reader.payload[4] == ord("e")
        with pytest.raises(BlockingIOError, match="already open for writing"):
            fmt.open_mapped(saved, writable=True)
        writer.flush(num_keys=43)
        assert HEADER.unpack_from(saved.read_bytes())[11] == 43
    assert HEADER.unpack_from(saved.read_bytes())[5] == 0  # flag cleared on close
    header, payload = fmt.load(saved)
    assert header == make_header(num_keys=43) and payload.tobytes() == b"abcde" + PAYLOAD[5:]


def test_writer_that_dies_leaves_a_file_that_is_refused_until_repaired(saved):
    writer = fmt.open_mapped(saved, writable=True)
    writer.payload[0] ^= 0xFF
    # What the kernel does when the process dies: the map and the lock go, the flag stays.
    writer.payload.release()
    writer._whole.release()
    writer._mm.close()
    os.close(writer._fd)
    writer._mm = None
    with pytest.raises(FormatError, match="was not closed cleanly"):
        fmt.load(saved)
    with pytest.raises(FormatError, match="was not closed cleanly"):
        fmt.open_mapped(saved)
    with pytest.raises(FormatError, match="was not closed cleanly"):
        fmt.open_mapped(saved, writable=True)
    with pytest.raises(FormatError, match="was not closed cleanly"):
        fmt.loads(saved.read_bytes())
    assert fmt.load(saved, verify=False)[1][0] == PAYLOAD[0] ^ 0xFF
    fmt.open_mapped(saved, writable=True, verify=False).close()  # repair: a fresh checksum, the flag cleared
    assert fmt.load(saved)[1][0] == PAYLOAD[0] ^ 0xFF


def test_unclosed_writer_is_closed_by_the_garbage_collector(saved):
    writer = fmt.open_mapped(saved, writable=True)
    writer.payload[0] = 0
    with pytest.warns(ResourceWarning, match="unclosed MappedFile"):
        del writer
    assert fmt.load(saved)[1][0] == 0


def _child_writer(path, changed, seen):
    with fmt.open_mapped(path, writable=True) as writer:
        writer.payload[:5] = b"hello"
        writer.flush(num_keys=7)
        changed.set()
        assert seen.wait(10)


def _child_that_dies(path):
    writer = fmt.open_mapped(path, writable=True)
    writer.payload[:5] = b"crash"
    os._exit(0)


@pytest.fixture
def fork():
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs the fork start method")
    return multiprocessing.get_context("fork")


def test_map_shared_between_two_processes(saved, fork):
    changed, seen = fork.Event(), fork.Event()
    with fmt.open_mapped(saved) as reader:  # opened before the writer
        child = fork.Process(target=_child_writer, args=(str(saved), changed, seen))
        child.start()
        try:
            assert changed.wait(10)
            assert reader.payload[:5] == b"hello"
            with fmt.open_mapped(saved) as late_reader:  # opened while the writer is live
                assert late_reader.payload[:5] == b"hello" and not late_reader.payload_verified
            with pytest.raises(FormatError, match="open for writing by another process"):
                fmt.load(saved)
        finally:
            seen.set()
            child.join(10)
        assert child.exitcode == 0
    header, payload = fmt.load(saved)
    assert header.num_keys == 7 and payload.tobytes() == b"hello" + PAYLOAD[5:]


def test_writer_process_that_dies(saved, fork):
    child = fork.Process(target=_child_that_dies, args=(str(saved),))
    child.start()
    child.join(10)
    with pytest.raises(FormatError, match="not closed cleanly"):
        fmt.open_mapped(saved)
    fmt.open_mapped(saved, writable=True, verify=False).close()
    assert fmt.load(saved)[1][:5] == b"crash"
