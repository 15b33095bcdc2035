"""Parquet split-block Bloom filters: bit-exact with the filters pyarrow writes, statistics, damaged files."""
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow", reason="the parquet tests need pyarrow (pip install 'bloomwise[parquet]')")
pq = pytest.importorskip("pyarrow.parquet")

from bloomwise import _thrift, parquet as bp  # noqa: E402
from bloomwise._native.hashes import xxh64  # noqa: E402
from bloomwise.errors import FormatError  # noqa: E402
from stats import assert_rate_matches  # noqa: E402

ROWS, GROUP = 5000, 2000
FILTERED = ["s", "i64", "i32", "u32", "i8", "d", "f", "fb"]


def _table():
    n = np.arange(ROWS)
    return pa.table({
        "s": [f"key-{i}" for i in n],
        "i64": pa.array(n * 7919 - 10**12, pa.int64()),
        "i32": pa.array(n * 31 - 70000, pa.int32()),
        "u32": pa.array(n + 3_000_000_000, pa.uint32()),
        "i8": pa.array((n % 200) - 100, pa.int8()),
        "d": pa.array(n * 0.25 - 3.5, pa.float64()),
        "f": pa.array(n * 1.5, pa.float32()),
        "fb": pa.array([int(i).to_bytes(16, "little") for i in n], pa.binary(16)),
        "plain": pa.array(n, pa.int64()),
    })


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("parquet") / "typed.parquet"
    table = _table()
    pq.write_table(table, path, row_group_size=GROUP,
                   bloom_filter_options={c: {"ndv": GROUP, "fpp": 0.01} for c in FILTERED})
    return path, table


def _group_values(table, column, group):
    return table.column(column).to_pylist()[group * GROUP:(group + 1) * GROUP]


@pytest.mark.parametrize("column", FILTERED)
def test_every_written_value_is_found_and_bits_equal_pyarrows(written, column):
    path, table = written
    filters = bp.read_bloom_filters(path, column)
    meta = pq.ParquetFile(path).metadata
    assert len(filters) == meta.num_row_groups == math.ceil(ROWS / GROUP)
    raw = path.read_bytes()
    for group, f in enumerate(filters):
        assert isinstance(f, bp.SplitBlockBloomFilter)
        values = _group_values(table, column, group)
        assert all(f.might_contain(v) for v in values)                     # no false negatives, one by one
        array = table.column(column).to_numpy(zero_copy_only=False)[group * GROUP:(group + 1) * GROUP]
        batch = list(array) if array.dtype == object else array
        assert f.might_contain_many(batch).all()                            # ... and in a batch
        # Our writer, given the same values and size, builds the same bitset; serialized, the same bytes as the
        # file holds at pyarrow's own bloom_filter_offset / bloom_filter_length (header included).
        encoding = f._encoding
        signed = encoding.int_range is None or encoding.int_range[0] < 0
        width = None if encoding.int_range is None else (encoding.int_range[1] - encoding.int_range[0]).bit_length() - 1
        mine = bp.SplitBlockBloomFilter(f.num_bytes, f.physical_type, type_length=encoding.type_length,
                                        bit_width=width, signed=signed)
        mine.insert_many(batch)
        assert mine == f
        chunk = meta.row_group(group).column(table.column_names.index(column)).to_dict()
        start, length = chunk["bloom_filter_offset"], chunk["bloom_filter_length"]
        assert mine.to_bytes() == raw[start:start + length]


def test_batches_of_arrow_arrays_lists_and_numpy(written):
    path, table = written
    for column in ("s", "i32", "d"):
        (f, *_) = bp.read_bloom_filters(path, column)
        chunk = table.column(column).slice(0, GROUP)
        expected = [f.might_contain(v) for v in chunk.to_pylist()]
        assert list(f.might_contain_many(chunk)) == expected == [True] * GROUP   # a pyarrow ChunkedArray
        assert list(f.might_contain_many(chunk.to_pylist())) == expected          # a list
        assert list(f.might_contain_many(chunk.to_numpy())) == expected           # numpy (object for strings)
    (f, *_) = bp.read_bloom_filters(path, "i64")
    mixed = np.array([0, 1, 2**40], dtype=object)
    assert list(f.might_contain_many(mixed)) == [f.might_contain(v) for v in mixed]


def test_sizes_match_the_reference_writer(written):
    path, _ = written
    sizes = [f.num_bytes for f in bp.read_bloom_filters(path, "s")]
    # pyarrow sizes each chunk for min(ndv, rows in the row group) values
    assert sizes == [bp.optimal_num_bytes(GROUP, 0.01)] * 2 + [bp.optimal_num_bytes(ROWS - 2 * GROUP, 0.01)]


def test_column_without_filter_answers_true(written):
    path, _ = written
    filters = bp.read_bloom_filters(path, "plain")
    assert all(isinstance(f, bp.NoBloomFilter) for f in filters)
    assert all(f.might_contain(-5) and -5 in f for f in filters)
    assert bp.row_groups_that_may_contain(path, "plain", 123456789) == [0, 1, 2]


def test_writers_that_omit_bloom_filter_length(written):
    """Older writers record only bloom_filter_offset: the header is read from a first probe of 256 bytes and the
    bitset (here 4 KiB, beyond the probe) after it."""
    path, _ = written
    (expected, *_) = bp.read_bloom_filters(path, "s")
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0).to_dict()
    encoding = expected._encoding
    with open(path, "rb") as handle:
        size = path.stat().st_size
        found = bp._read_filter(handle, size, {14: chunk["bloom_filter_offset"]}, encoding)
        assert found == expected and found.num_bytes > bp._HEADER_PROBE
        with pytest.raises(FormatError, match="runs past the file's end"):
            # a file that ends 20 bytes into the bitset (its size given smaller)
            bp._read_filter(handle, chunk["bloom_filter_offset"] + 20, {14: chunk["bloom_filter_offset"]}, encoding)
        with pytest.raises(FormatError, match="outside the file"):
            bp._read_filter(handle, size, {14: size + 5}, encoding)
        with pytest.raises(FormatError, match="bloom_filter_length"):
            bp._read_filter(handle, size, {14: chunk["bloom_filter_offset"], 15: 10**9}, encoding)


def test_row_groups_that_may_contain(written):
    path, table = written
    assert bp.row_groups_that_may_contain(path, "s", "key-4500") == [2]
    assert bp.row_groups_that_may_contain(path, "s", "key-10") == [0]
    assert 1 in bp.row_groups_that_may_contain(path, "i64", 2500 * 7919 - 10**12)
    hits = sum(len(bp.row_groups_that_may_contain(path, "s", f"absent-{i}")) for i in range(200))
    assert hits <= 10  # 600 tests at ~0.4%: a handful at most


def test_values_the_column_cannot_hold_are_absent(written):
    path, _ = written
    (i8, *_) = bp.read_bloom_filters(path, "i8")
    (u32, *_) = bp.read_bloom_filters(path, "u32")
    (fb, *_) = bp.read_bloom_filters(path, "fb")
    assert not i8.might_contain(200) and not i8.might_contain(-129)
    assert not u32.might_contain(-1) and u32.might_contain(3_000_000_000)
    assert not fb.might_contain(b"short")
    assert list(i8.might_contain_many(np.array([-100, 300, -300], dtype=np.int64))) == [True, False, False]
    with pytest.raises(TypeError, match="holds ints"):
        i8.might_contain("5")
    with pytest.raises(TypeError, match="holds bytes or str"):
        fb.might_contain(5)
    with pytest.raises(ValueError, match="cannot hold"):
        i8.insert(1000)


def test_unknown_column_names_the_columns(written):
    path, _ = written
    with pytest.raises(KeyError, match="its columns: 's', 'i64'"):
        bp.read_bloom_filters(path, "nope")


def test_nested_column_by_dotted_path(tmp_path):
    table = pa.table({"outer": pa.array([{"inner": f"v{i}", "n": i} for i in range(300)])})
    path = tmp_path / "nested.parquet"
    pq.write_table(table, path, bloom_filter_options={"outer.inner": {"ndv": 300, "fpp": 0.05}})
    (f,) = bp.read_bloom_filters(path, "outer.inner")
    assert all(f.might_contain(f"v{i}") for i in range(300))
    assert bp.read_bloom_filters(path, ("outer", "inner"))[0] == f
    assert isinstance(bp.read_bloom_filters(path, "outer.n")[0], bp.NoBloomFilter)


@pytest.mark.slow
def test_false_positive_rate_matches_theory(tmp_path):
    """20,000 distinct strings at fpp 1%: the rate on 400,000 absent strings is the SBBF formula's for the size
    the writer chose (false-alarm probability of the check: 1e-6, exact binomial), and below the design 1%."""
    n, trials = 20_000, 400_000
    path = tmp_path / "fpr.parquet"
    pq.write_table(pa.table({"k": [f"present-{i}" for i in range(n)]}), path,
                   bloom_filter_options={"k": {"ndv": n, "fpp": 0.01}})
    (f,) = bp.read_bloom_filters(path, "k")
    assert f.num_bytes == bp.optimal_num_bytes(n, 0.01)
    hits = int(f.might_contain_many([f"absent-{i}" for i in range(trials)]).sum())
    expected = f.false_positive_rate(n)
    assert_rate_matches(hits, trials, expected, "SBBF false positives")
    assert hits / trials < 0.01


def test_own_filter_rate_matches_theory():
    """A filter built here (numpy int64 keys, random): the measured rate is the formula's (false alarm 1e-6)."""
    rng = np.random.default_rng(17)
    keys = rng.integers(-2**62, 2**62, size=30_000)
    f = bp.SplitBlockBloomFilter(bp.optimal_num_bytes(len(keys), 0.02), "INT64")
    f.insert_many(keys)
    probes = rng.integers(2**62, 2**63 - 1, size=300_000)
    hits = int(f.might_contain_many(probes).sum())
    assert_rate_matches(hits, len(probes), f.false_positive_rate(len(keys)), "own SBBF false positives")


@settings(max_examples=200)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=50))
def test_numpy_xxh64_matches_the_compiled_one(values):
    words = np.array(values, dtype=np.uint64)
    assert list(bp._xxh64_words(words, 8)) == [xxh64(v.to_bytes(8, "little")) for v in values]
    low = words & np.uint64(0xFFFFFFFF)
    assert list(bp._xxh64_words(low, 4)) == [xxh64((v & 0xFFFFFFFF).to_bytes(4, "little")) for v in values]


@given(st.lists(st.one_of(st.text(max_size=20), st.binary(max_size=20)), max_size=40),
       st.lists(st.text(max_size=20), max_size=40))
def test_inserted_values_are_found_one_by_one_and_in_batches(values, others):
    f = bp.SplitBlockBloomFilter(64, "BYTE_ARRAY")
    for v in values:
        f.insert(v)
    assert all(f.might_contain(v) for v in values)
    assert f.might_contain_many(values).all()
    assert list(f.might_contain_many(others)) == [f.might_contain(v) for v in others]
    g = bp.SplitBlockBloomFilter(64, "BYTE_ARRAY")
    g.insert_many(values)
    assert g == f and bp.SplitBlockBloomFilter.from_bytes(f.to_bytes(), "BYTE_ARRAY") == f


def test_spec_positions_by_hand():
    """One value traced through the specification's formulas, independently of the class's vector code."""
    f = bp.SplitBlockBloomFilter(32 * 5, "INT64")
    f.insert(42)
    h = xxh64((42).to_bytes(8, "little"))
    block = ((h >> 32) * 5) >> 32
    x = h & 0xFFFFFFFF
    words = struct.unpack("<40I", f.bitset)
    expected = [0] * 40
    for i, salt in enumerate(bp.SALTS):
        expected[block * 8 + i] = 1 << (((x * salt) & 0xFFFFFFFF) >> 27)
    assert list(words) == expected


# ---- damaged input --------------------------------------------------------------------------------------------
def _small_file(tmp_path):
    path = tmp_path / "small.parquet"
    pq.write_table(pa.table({"k": [f"v{i}" for i in range(100)]}), path,
                   bloom_filter_options={"k": {"ndv": 100, "fpp": 0.05}})
    return path


def test_not_parquet_or_truncated(tmp_path):
    path = _small_file(tmp_path)
    data = path.read_bytes()
    for name, content, message in [("short", b"PAR1", "at least 12 bytes"),
                                   ("magic", b"XXXX" + data[4:], "not a Parquet file"),
                                   ("cut", data[:-100], "not a Parquet file"),
                                   ("length", data[:-8] + (10**6).to_bytes(4, "little") + b"PAR1", "footer length"),
                                   ("encrypted", data[:-4] + b"PARE", "encrypted")]:
        bad = tmp_path / name
        bad.write_bytes(content)
        with pytest.raises(FormatError, match=message):
            bp.read_bloom_filters(bad, "k")


def test_damaged_filter_header(tmp_path):
    path = _small_file(tmp_path)
    meta = pq.ParquetFile(path).metadata.row_group(0).column(0).to_dict()
    offset = meta["bloom_filter_offset"]
    data = bytearray(path.read_bytes())
    assert data[offset] == 0x15  # field 1, i32: numBytes
    bad = bytearray(data)
    bad[offset + 1:offset + 3] = bytes([0xC1, 0x01])  # zigzag varint 97: not a multiple of 32
    (tmp_path / "b1").write_bytes(bad)
    with pytest.raises(FormatError, match="numBytes"):
        bp.read_bloom_filters(tmp_path / "b1", "k")
    bad = bytearray(data)
    bad[offset] = 0x16  # field 1 as i64 still decodes; the header's stop byte replaced: structure damaged
    bad[offset + 1] = 0xFF
    (tmp_path / "b2").write_bytes(bad)
    with pytest.raises(FormatError):
        bp.read_bloom_filters(tmp_path / "b2", "k")


def test_unknown_algorithm_reads_as_no_filter(tmp_path):
    """A filter of an algorithm this reader does not know (a future writer's) answers True, never a false negative."""
    f = bp.SplitBlockBloomFilter(64, "BYTE_ARRAY")
    data = bytearray(f.to_bytes())
    assert data[:6] == bytes([0x15, 0x80, 0x01, 0x1C, 0x1C, 0x00])  # numBytes 64; algorithm: member 1, empty
    data[4] = 0x2C  # member 2: a future algorithm
    with pytest.raises(ValueError, match="algorithm member 2"):
        bp.SplitBlockBloomFilter.from_bytes(bytes(data))
    path = _small_file(tmp_path)
    offset = pq.ParquetFile(path).metadata.row_group(0).column(0).to_dict()["bloom_filter_offset"]
    raw = bytearray(path.read_bytes())
    position = offset + 1
    while raw[position] & 0x80:  # past numBytes' varint
        position += 1
    assert raw[position + 1:position + 3] == bytes([0x1C, 0x1C])
    raw[position + 2] = 0x2C
    path.write_bytes(raw)
    (g,) = bp.read_bloom_filters(path, "k")
    assert isinstance(g, bp.NoBloomFilter) and "algorithm member 2" in g.reason and g.might_contain("anything")


@settings(max_examples=300)
@given(st.data())
def test_random_damage_to_the_footer_is_a_format_error_or_harmless(tmp_path_factory, data):
    """Any byte of the footer flipped: FormatError, KeyError (the column's name damaged), or a result that still
    answers True for every written value (the damage hit a field we do not use); never another exception."""
    path = _cached_small(tmp_path_factory)
    raw = bytearray(path.read_bytes())
    footer_length = int.from_bytes(raw[-8:-4], "little")
    position = data.draw(st.integers(len(raw) - 8 - footer_length, len(raw) - 9))
    raw[position] ^= data.draw(st.integers(1, 255))
    bad = path.with_name("damaged.parquet")
    bad.write_bytes(raw)
    try:
        filters = bp.read_bloom_filters(bad, "k")
    except (FormatError, KeyError):
        return
    for f in filters:
        if isinstance(f, bp.SplitBlockBloomFilter):
            f.might_contain_many([f"v{i}" for i in range(100)])


_SMALL = {}


def _cached_small(factory):
    if "path" not in _SMALL:
        _SMALL["path"] = _small_file(factory.mktemp("small"))
    return _SMALL["path"]


# ---- the Thrift reader ----------------------------------------------------------------------------------------
def test_thrift_bounds():
    with pytest.raises(_thrift.ThriftError, match="truncated"):
        _thrift.decode_struct(b"\x15", 0)
    with pytest.raises(_thrift.ThriftError, match="cannot fit"):
        _thrift.decode_struct(b"\x19\xfc\xff\xff\xff\x0f", 0)  # a list of 2**32-ish elements in 6 bytes
    with pytest.raises(_thrift.ThriftError, match="runs past the end"):
        _thrift.decode_struct(b"\x18\x80\x80\x80\x80\x08", 0)  # binary of 2**31 bytes
    with pytest.raises(_thrift.ThriftError, match="deeper"):
        _thrift.decode_struct(b"\x1c" * 40 + b"\x00" * 41, 0)
    with pytest.raises(_thrift.ThriftError, match="longer than 10"):
        _thrift.decode_struct(b"\x15" + b"\xff" * 11, 0)


@given(st.dictionaries(st.integers(-300, 300), st.one_of(
    st.builds(_thrift.I32, st.integers(-2**31, 2**31 - 1)),
    st.builds(_thrift.I64, st.integers(-2**63, 2**63 - 1)),
    st.builds(_thrift.Binary, st.binary(max_size=30))), max_size=12))
def test_thrift_round_trip(fields):
    data = _thrift.encode_struct(fields)
    decoded, end = _thrift.decode_struct(data, 0)
    assert end == len(data)
    assert decoded == {k: v.value for k, v in fields.items()}


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_thrift_reader_refuses_garbage_cleanly(data):
    """Arbitrary bytes decode or raise ThriftError; nothing else (no RecursionError, TypeError, MemoryError)."""
    try:
        decoded, end = _thrift.decode_struct(data, 0)
    except _thrift.ThriftError:
        return
    assert isinstance(decoded, dict) and end <= len(data)


def test_thrift_containers():
    # struct {1: list<i32> [1, -2, 3], 2: map<binary, i64> {b"k": 7}, 3: true, 4: double 1.5, 5: set<bool>}
    data = (b"\x19\x35\x02\x03\x06"            # field 1, list of 3 i32 (zigzag 2, 3, 6)
            b"\x1b\x01\x86\x01k\x0e"          # field 2, map of 1 (binary -> i64): b"k" -> zigzag 14
            b"\x11"                              # field 3, bool true
            b"\x17" + struct.pack("<d", 1.5) +   # field 4, double
            b"\x1a\x21\x01"                    # field 5, set of 2 bools: true, false (2)
            b"\x02\x00")
    decoded, end = _thrift.decode_struct(data, 0)
    assert decoded == {1: [1, -2, 3], 2: [(b"k", 7)], 3: True, 4: 1.5, 5: [True, False]} and end == len(data)
