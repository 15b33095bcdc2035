"""libCacheSim's trace formats (csv, oracleGeneral), zstd-compressed files and open_trace's choice of reader, on
small files the tests make (bloomwise.cache.traces.cachesim, .files, .formats)."""
from __future__ import annotations

import io
import sys
import tracemalloc

import numpy as np
import pytest

from bloomwise.cache.traces import cachesim
from bloomwise.cache.traces import (CsvTraceReader, OracleGeneralReader, Request, TraceError, format_from_name,
                                    open_trace, parse_csv_columns, read_plain_trace, write_plain_trace)
from command_support import oracle_general_bytes

zstandard = pytest.importorskip("zstandard", reason="the zstd tests need the zstandard package (test extra)")


def _get(timestamp, url, size, line, client="-"):
    return Request(timestamp, client, "GET", url, size, line)


TWITTER_CSV = """\
# time, object, size, next_access_vtime
0, 13053225291711363978, 737, 13
0, 61177148907475485, 248, 6570713
2, 286355432205858634, 567, -1
"""


def test_csv_with_libcachesim_header(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(TWITTER_CSV)
    reader = open_trace(path)
    assert isinstance(reader, CsvTraceReader) and reader.format == "csv" and not reader.has_clients
    assert list(reader) == [_get(0.0, "13053225291711363978", 737, 2), _get(0.0, "61177148907475485", 248, 3),
                            _get(2.0, "286355432205858634", 567, 4)]
    assert reader.columns == {"time": 1, "object": 2, "size": 3}
    assert (reader.lines, reader.requests, reader.skipped, reader.malformed) == (4, 3, 1, 0)


def test_csv_header_names_and_a_client_column(tmp_path):
    path = tmp_path / "io.csv"
    path.write_text("version,time,op,size,lbn,tenant\n1,5633898,2a,512,42932745,vm7\n1,5633899,28,6656,4,vm8\n")
    reader = open_trace(path)
    assert reader.columns == {"time": 2, "size": 4, "object": 5, "client": 6} and reader.has_clients
    assert list(reader) == [_get(5633898.0, "42932745", 512, 2, "vm7"), _get(5633899.0, "4", 6656, 3, "vm8")]


def test_csv_columns_by_number_with_and_without_a_header(tmp_path):
    body = "10,a,5\n11,b,6\n"
    for text, skipped in ((body, 0), ("when,what,bytes\n" + body, 1)):
        path = tmp_path / "t.txt"
        path.write_text(text)
        reader = open_trace(path, csv_columns="time=1,object=2,size=3")
        got = [r[:5] for r in reader]
        assert got == [(10.0, "-", "GET", "a", 5), (11.0, "-", "GET", "b", 6)] and reader.skipped == skipped
    reader = open_trace(path, format="csv", csv_columns={"object": 2, "size": 3})  # no time: 0
    assert [r.timestamp for r in reader] == [0.0, 0.0]


def test_csv_malformed_lines_are_counted_with_reasons(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("time,object,size\n1,a,10\n2,b\n3,c,1e3\nx,d,4\n5,,6\n\n6, e e ,7\n7,f,8")
    reader = open_trace(path)
    assert [r.url for r in reader] == ["a", "f"]
    assert reader.malformed_lines == [
        (3, "expected at least 3 comma-separated fields (time=1,object=2,size=3), found 2"),
        (4, "bad size '1e3' (expected a whole number of bytes)"),
        (5, "bad time 'x' (expected a finite number of seconds >= 0)"),
        (6, "bad object id '' (expected a non-empty id without spaces)"),
        (8, "bad object id 'e e' (expected a non-empty id without spaces)")]
    assert (reader.lines, reader.requests, reader.skipped, reader.malformed) == (9, 2, 2, 5)
    with pytest.raises(TraceError, match=r"t.csv, line 3: expected at least 3 comma-separated fields"):
        list(open_trace(path, strict=True))


def test_csv_that_is_not_a_trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("name,colour\nrose,red\n")
    with pytest.raises(TraceError, match="no csv header naming the object and size columns.*--csv-columns"):
        open_trace(path)
    path.write_text("time,object,size\n" + "1,a,big\n" * 150)
    with pytest.raises(TraceError, match=r"not a trace: none of the first 100 lines is a csv record .*"
                                         r"line 2: bad size 'big'"):
        list(open_trace(path))


@pytest.mark.parametrize("text, message", [
    ("time=1,object=2", "no size column"),
    ("object=1,size=2,colour=3", "'colour=3' is not FIELD=COLUMN"),
    ("object=0,size=2", r"column '0' of object must be a whole number in \[1, 1000\]"),
    ("object=x,size=2", "column 'x' of object"),
    ("object=1,size=1", "column 1 given twice"),
    ("object=1,object=2,size=3", "object given twice"),
])
def test_csv_column_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_csv_columns(text)


def test_oracle_general_records(tmp_path):
    path = tmp_path / "t.oracleGeneral.bin"
    path.write_bytes(oracle_general_bytes([5, 5, 6], [2 ** 64 - 1, 7, 2 ** 64 - 1], [512, 1, 2 ** 32 - 1], [3, -1, -1]))
    reader = open_trace(path)
    assert isinstance(reader, OracleGeneralReader) and not reader.has_clients
    assert list(reader) == [_get(5.0, str(2 ** 64 - 1), 512, 1), _get(5.0, "7", 1, 2),
                            _get(6.0, str(2 ** 64 - 1), 2 ** 32 - 1, 3)]
    assert (reader.lines, reader.requests, reader.malformed) == (3, 3, 0)


def test_oracle_general_bad_and_truncated_records(tmp_path):
    path = tmp_path / "t.bin"
    data = oracle_general_bytes([1, 2, 3, 4, 5], [10, 11, 12, 13, 14], [100, 200, 300, 400, 500],
                           [-1, 2, -7, 9, 2 ** 40 + 1])
    path.write_bytes(data + data[:10])
    reader = open_trace(path, format="oracle-general")
    assert [r.url for r in reader] == ["10", "13"]
    assert reader.malformed_lines == [
        (2, "next access 2 is neither -1 nor in (2, 2**40] (after this record): not an oracleGeneral record"),
        (3, "next access -7 is neither -1 nor in (3, 2**40] (after this record): not an oracleGeneral record"),
        (5, "next access 1099511627777 is neither -1 nor in (5, 2**40] (after this record): not an oracleGeneral "
            "record"),
        (6, "truncated record: 10 of 24 bytes at the end of the file")]
    with pytest.raises(TraceError, match=r"t.bin, line 2: next access 2 is neither"):
        list(open_trace(path, format="oracle-general", strict=True))
    path.write_bytes(b"this is a text file, not records\n" * 100)
    with pytest.raises(TraceError, match="not an oracleGeneral trace: none of the first 100 records is valid"):
        list(open_trace(path, format="oracle-general"))


def test_oracle_general_memory_is_bounded(tmp_path, monkeypatch):
    """Records are decoded a block at a time: 10x the records, not 10x the memory (blocks of 256 records here
    instead of 16,384: many blocks in few records, tracemalloc is slow)."""
    monkeypatch.setattr(cachesim, "_RECORDS_PER_BLOCK", 256)

    def peak(count):
        path = tmp_path / f"{count}.oracleGeneral"
        path.write_bytes(oracle_general_bytes(np.arange(count), np.arange(count) % 1000, np.full(count, 100),
                                         np.full(count, -1)))
        tracemalloc.start()
        try:
            assert sum(1 for _ in open_trace(path)) == count
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(4_000), peak(40_000)
    assert large < 1.5 * small + 50_000 and large < 1_000_000, (small, large)


def test_zstd_csv_and_binary_read_as_the_uncompressed(tmp_path):
    csv = TWITTER_CSV.encode()
    (tmp_path / "t.csv").write_bytes(csv)
    compressor = zstandard.ZstdCompressor()
    (tmp_path / "t.csv.zst").write_bytes(compressor.compress(csv[:60]) + compressor.compress(csv[60:]))  # 2 frames
    assert list(open_trace(tmp_path / "t.csv.zst")) == list(open_trace(tmp_path / "t.csv"))
    records = oracle_general_bytes(np.arange(50_000), np.arange(50_000) % 77, np.full(50_000, 9), np.full(50_000, -1))
    (tmp_path / "t.oracleGeneral.bin").write_bytes(records)
    (tmp_path / "t.oracleGeneral.zst").write_bytes(compressor.compress(records))
    assert list(open_trace(tmp_path / "t.oracleGeneral.zst")) == list(open_trace(tmp_path / "t.oracleGeneral.bin"))


def test_zstd_written_and_read_back(tmp_path):
    requests = [Request(float(i), f"c{i % 3}", "GET", f"http://a/{i}", i) for i in range(1000)]
    assert write_plain_trace(requests, tmp_path / "t.txt.zst") == 1000
    assert [r[:5] for r in read_plain_trace(tmp_path / "t.txt.zst")] == [r[:5] for r in requests]


def test_damaged_and_truncated_zstd(tmp_path):
    data = zstandard.ZstdCompressor().compress(("0,a,1\n" * 50_000).encode())
    path = tmp_path / "t.csv.zst"
    path.write_bytes(data[:-20])
    with pytest.raises(TraceError, match="t.csv.zst: cannot read: truncated zstd stream"):
        list(open_trace(path, csv_columns="time=1,object=2,size=3"))
    path.write_bytes(data[:20] + bytes(200) + data[220:])
    with pytest.raises(TraceError, match="t.csv.zst: cannot read"):
        list(open_trace(path, csv_columns="time=1,object=2,size=3"))


def test_zstd_without_the_package(tmp_path, monkeypatch):
    path = tmp_path / "t.csv.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(TWITTER_CSV.encode()))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard now raises ImportError
    with pytest.raises(ImportError, match=r'needs the zstandard package: pip install "bloomwise\[zstd\]"'):
        open_trace(path)


def test_format_from_name_and_open_trace_choices(tmp_path):
    assert [format_from_name(name) for name in ("a.csv", "A.CSV.zst", "x.oracleGeneral.bin",
                                                 "x.oracleGeneral.zst", "access.log", "t.csv.txt")] == [
        "csv", "csv", "oracle-general", "oracle-general", None, None]
    assert format_from_name(io.BytesIO()) is None
    path = tmp_path / "t.log"
    path.write_text("1 c http://a/ 5\n")
    with pytest.raises(ValueError, match="csv columns were given for a trace read as plain"):
        open_trace(path, format="plain", csv_columns="object=1,size=2")
    with pytest.raises(ValueError, match="format must be one of auto, squid, plain, csv, oracle-general"):
        open_trace(path, format="binary")
    assert open_trace(path, csv_columns="time=1,object=3,size=4").format == "csv"  # columns given: csv


def test_csv_and_binary_forms_of_one_trace_agree(tmp_path):
    """The same requests written as libCacheSim csv and as oracleGeneral read back the same."""
    rng = np.random.default_rng(3)
    n = 5_000
    times, objects = np.sort(rng.integers(0, 10 ** 6, n)), rng.integers(0, 2 ** 63, n)
    sizes = rng.integers(1, 10 ** 6, n)
    (tmp_path / "t.oracleGeneral").write_bytes(oracle_general_bytes(times, objects, sizes, np.full(n, -1)))
    lines = "".join(f"{t}, {o}, {s}, -1\n" for t, o, s in zip(times, objects, sizes))
    (tmp_path / "t.csv").write_text("# time, object, size, next_access_vtime\n" + lines)
    assert [r[:5] for r in open_trace(tmp_path / "t.csv")] == [r[:5] for r in open_trace(tmp_path / "t.oracleGeneral")]


def test_csv_comments_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("\n# made by hand\ntime,object,size\n1,a,2\n# a comment\n\n3,b,4\n")
    reader = open_trace(path)
    assert [(r.line, r.url) for r in reader] == [(4, "a"), (7, "b")]
    assert (reader.skipped, reader.malformed) == (5, 0)
