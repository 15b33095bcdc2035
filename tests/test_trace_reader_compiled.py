"""The compiled csv reader (CsvTraceReader.record_arrays over _native/trace_reader.pyx, CsvTrace.request_blocks)
against the Python reader, the reference: the same ids, sizes, times, proxies and line numbers, the same counts
(requests, lines, skipped, malformed with their reasons) and the same errors, on files the tests write and on the
first lines of the real Twitter traces when they are fetched."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from bloomwise.cache.fast_replay import CsvTrace, request_blocks
from bloomwise.cache.traces import CsvTraceReader, TraceError, assigned_requests, cachesim, lines
from real_traces import fetched_trace

_COUNTS = ("requests", "lines", "skipped", "malformed", "malformed_lines")


def _python_side(path, columns, rule, proxies, limit, strict):
    """Outcome of the reference: the records' arrays as request_blocks makes them, or the error; the counts."""
    reader = CsvTraceReader(path, columns=columns, strict=strict)
    records = []
    try:
        requests = list(assigned_requests(reader, rule, proxies, seed=3, limit=limit))
        records = requests
        blocks = list(request_blocks(requests, proxies, names=True))
        outcome = (_joined([b.keys for b in blocks], np.uint64), _joined([b.sizes for b in blocks], np.int64),
                   _joined([b.proxies for b in blocks], np.int32),
                   np.array([r.timestamp for r in records], dtype=np.float64),
                   np.array([r.line for r in records], dtype=np.int64), *_names(blocks))
    except (TraceError, ValueError) as error:
        outcome = (type(error), str(error))
    return outcome, {name: getattr(reader, name) for name in _COUNTS}


def _compiled_side(path, columns, rule, proxies, limit, strict):
    trace = CsvTrace(path, rule, proxies, seed=3, limit=limit, strict=strict, columns=columns)
    try:
        blocks = list(trace.request_blocks(proxies, names=True))
        reader = trace.reader
        # the times and line numbers: the reader's own arrays, read again
        again = CsvTraceReader(path, columns=columns, strict=strict)
        parts = list(again.record_arrays(limit))
        outcome = (_joined([b.keys for b in blocks], np.uint64), _joined([b.sizes for b in blocks], np.int64),
                   _joined([b.proxies for b in blocks], np.int32),
                   _joined([p.times for p in parts], np.float64), _joined([p.line_numbers for p in parts], np.int64),
                   *_names(blocks))
        assert all(b.records == len(b.keys) and b.skipped == 0 for b in blocks)
    except (TraceError, ValueError) as error:
        reader = trace.reader
        outcome = (type(error), str(error))
    return outcome, {name: getattr(reader, name) for name in _COUNTS}


def _names(blocks):
    """The blocks' cache-key bytes, each key's length and each URL's length, joined over the blocks."""
    return (_joined([b.names for b in blocks], np.uint8),
            _joined([np.diff(b.name_offsets) for b in blocks], np.int64),
            _joined([b.url_lengths for b in blocks], np.int64))


def _joined(arrays, dtype):
    return np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype)


def assert_same(path, columns=None, rule="round-robin", proxies=1, limit=None, strict=False):
    """The two readers agree on ``path``; returns the reference's outcome and counts."""
    expected = _python_side(path, columns, rule, proxies, limit, strict)
    got = _compiled_side(path, columns, rule, proxies, limit, strict)
    (want, want_counts), (have, have_counts) = expected, got
    assert have_counts == want_counts
    assert len(have) == len(want)
    for mine, theirs in zip(have, want):
        if isinstance(theirs, np.ndarray):
            assert mine.dtype == theirs.dtype
            np.testing.assert_array_equal(mine, theirs)
        else:
            assert mine == theirs
    return want, want_counts


_AWKWARD = (b"# time, object, size, next_access_vtime\r\n"       # libCacheSim's header, CRLF
            b"0, 13053225291711363978, 737, 13\r\n"
            b"\r\n"                                              # blank (CR only)
            b"  # a comment after spaces\n"
            b"1,\"quoted\",20,1\n"                                 # quotes are part of the id
            b"1,\"a,b\",30,1\n"                                    # a quoted comma splits the fields: size 'b"'
            b"2 , spaced ,  007 ,\t5\n"                            # spaces around fields, a leading-zero size
            b"3,obj\xc3\xa9,40,1\n"                                # a UTF-8 object id
            b"3,obj\xe9,40,1\n"                                    # not UTF-8
            b"4,x" + b"y" * 300 + b",50,1\n"                       # over-long (limit 200 below)
            b"1.5,a,60\n"                                          # a decimal time
            b"1e3,a,61\n" b"+2.,b,62\n" b".5,c,63\n" b"-0,d,64\n"  # float() forms
            b"1_000,e,65\n"                                        # float() takes underscores
            b"inf,f,66\n" b"nan,g,67\n" b"-1,h,68\n" b"1e999,i,69\n"  # not finite, or negative: malformed
            b"5,,70\n" b"5,has space,71\n" b"5,tab\there,72\n"    # bad object ids
            b"5,j,-1\n" b"5,k,1.0\n" b"5,l,\n" b"5,m\n"            # bad sizes, too few fields
            b"6,n,9223372036854775807\n"                           # 2**63 - 1: the largest size
            b"\x1c7\x1f,o\x0b,80\x0c\n"                            # str.strip() whitespace of ASCII
            b"8,p\xc2\xa0,81\n"                                    # a no-break space: stripped by str.strip()
            b"9,q,82")                                             # no newline at the end


@pytest.mark.parametrize("block", [7, 64, 199, 201, 4096])
def test_awkward_lines_across_blocks(tmp_path, monkeypatch, block):
    """CRLF, blank and comment lines, quotes, spaces, float() forms, bad fields, non-UTF-8 and over-long lines,
    chunk boundaries anywhere: the same requests and counts."""
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 200)
    monkeypatch.setattr(lines, "BLOCK_BYTES", block)
    monkeypatch.setattr(cachesim, "NAME_BYTES", 0)  # the key names' buffer: 4 lines of 200 bytes, full often
    path = tmp_path / "awkward.csv"
    path.write_bytes(_AWKWARD)
    (keys, sizes, _, times, numbers, names, _, _), counts = assert_same(path)
    assert bytes(names).startswith(b"GET 13053225291711363978GET \"quoted\"GET spacedGET obj\xc3\xa9")
    assert numbers.tolist() == [2, 5, 7, 8, 11, 12, 13, 14, 15, 16, 28, 29, 30, 31]
    assert counts["malformed"] == 14 and counts["skipped"] == 3
    assert times.tolist() == [0.0, 1.0, 2.0, 3.0, 1.5, 1000.0, 2.0, 0.5, -0.0, 1000.0, 6.0, 7.0, 8.0, 9.0]
    assert sizes[numbers.tolist().index(28)] == 2 ** 63 - 1
    assert (10, "line longer than 200 bytes") in counts["malformed_lines"]


def test_columns_by_number_with_a_client_and_hash_client(tmp_path):
    """--csv-columns layout: a first line that is not a record is a header; the client column sends requests to
    XXH3(client) mod P, as assign_proxy does."""
    path = tmp_path / "clients.csv"
    rows = ["size,who,what,when"] + [f"{100 + i},client{i % 29},obj{i % 13},{i}" for i in range(300)]
    rows[50] = "12,client 1,obj,3"  # a client with a space: malformed
    path.write_text("\n".join(rows) + "\n")
    columns = {"size": 1, "client": 2, "object": 3, "time": 4}
    (_, _, proxies, *_), counts = assert_same(path, columns, rule="hash-client", proxies=5)
    assert counts["skipped"] == 1 and counts["malformed"] == 1 and set(proxies.tolist()) == {0, 1, 2, 3, 4}
    assert_same(path, columns, rule="random", proxies=5)


@pytest.mark.parametrize("limit", [0, 1, 3, 4, 200])
def test_limit_reads_no_line_past_the_last_request(tmp_path, limit):
    path = tmp_path / "t.csv"
    path.write_text("time,object,size\n1,a,1\nbad\n2,b,2\n3,c,3\n\n4,d,4\nbad again\n")
    assert_same(path, limit=limit)
    assert_same(path, limit=limit, strict=True)


def test_errors_are_the_python_readers(tmp_path):
    """Strict mode, not a trace, a size beyond int64, hash-client without a client column, no header."""
    bad = tmp_path / "bad.csv"
    bad.write_text("time,object,size\n1,a,1\n2,b,x\n")
    outcome, _ = assert_same(bad, strict=True)
    assert outcome == (TraceError, f"{bad}, line 3: bad size 'x' (expected a whole number of bytes)")
    junk = tmp_path / "junk.csv"
    junk.write_text("time,object,size\n" + "a,b\n" * 150)
    outcome, _ = assert_same(junk)
    assert outcome[0] is TraceError and "not a trace" in outcome[1]
    huge = tmp_path / "huge.csv"
    huge.write_text("time,object,size\n1,a,1\n2,b,9223372036854775808\n")
    outcome, _ = assert_same(huge)
    assert outcome[0] is ValueError and "line 3" in outcome[1]
    outcome, _ = assert_same(bad, rule="hash-client", proxies=2)
    assert outcome[0] is ValueError and "no client field" in outcome[1]
    headless = tmp_path / "headless.csv"
    headless.write_text("1,a,1\n")
    with pytest.raises(TraceError, match="no csv header"):
        CsvTrace(headless, "random", 2)._open()


def test_zstd_whole_and_truncated(tmp_path):
    """A .zst csv reads the same both ways; a truncated one ends in the same error after the same requests."""
    zstandard = pytest.importorskip("zstandard")
    text = "time,object,size\n" + "".join(f"{i},obj{i % 977},{i % 50000}\n" for i in range(60_000))
    packed = zstandard.ZstdCompressor().compress(text.encode())
    whole = tmp_path / "t.csv.zst"
    whole.write_bytes(packed)
    (keys, *_), _ = assert_same(whole, proxies=3)
    assert len(keys) == 60_000
    cut = tmp_path / "cut.csv.zst"
    cut.write_bytes(packed[:len(packed) // 2])
    outcome, counts = assert_same(cut)
    assert outcome == (TraceError, f"{cut}: cannot read: truncated zstd stream: its last frame is incomplete")
    assert counts["requests"] > 0


@pytest.mark.parametrize("name, limit", [("twitter-cluster52", 150_000), ("twitter-cluster52-10m", 100_000)])
def test_first_lines_of_the_real_traces(name, limit):
    """The first lines of the real Twitter traces (skipped when not fetched)."""
    path = fetched_trace(name)
    (keys, _, proxies, *_), counts = assert_same(path, rule="random", proxies=100, limit=limit)
    assert len(keys) == limit == counts["requests"] and counts["malformed"] == 0
    assert len(np.unique(proxies)) == 100


_FIELD = st.text(alphabet=st.sampled_from(list("0123456789.e+-_ab #\t\r\"") + ["\x1c", "\xa0", "\u00e9", "\x00"]),
                 max_size=8)
_ROW = st.one_of(st.lists(_FIELD, min_size=0, max_size=5).map(",".join),
                 st.tuples(st.integers(0, 10 ** 6), st.text("abcxyz09", min_size=1, max_size=6),
                           st.integers(0, 2 ** 40)).map(lambda t: f"{t[0]},{t[1]},{t[2]}"))


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(_ROW, min_size=0, max_size=40), header=st.booleans(), crlf=st.booleans())
def test_random_rows(tmp_path_factory, rows, header, crlf):
    """Random rows (valid records mixed with random fields of digits, signs, dots, spaces, quotes, non-ASCII and
    whitespace characters), with a header or columns by number: the same requests and counts."""
    path = tmp_path_factory.mktemp("rows") / "t.csv"
    newline = "\r\n" if crlf else "\n"
    text = newline.join((["time,object,size"] if header else []) + rows)
    path.write_bytes(text.encode("utf-8"))
    columns = None if header else {"time": 1, "object": 2, "size": 3}
    assert_same(path, columns)
    assert_same(path, columns, limit=3)


def test_the_arrays_are_one_block_at_a_time(tmp_path):
    """At most ARRAY_BLOCK requests per block; the blocks together are the whole trace."""
    from bloomwise.cache.traces.cachesim import ARRAY_BLOCK

    path = tmp_path / "t.csv"
    path.write_text("time,object,size\n" + "".join(f"{i},o{i},{i}\n" for i in range(ARRAY_BLOCK + 10)))
    parts = list(CsvTraceReader(path).record_arrays())
    assert [len(p.keys) for p in parts] == [ARRAY_BLOCK, 10]
    assert list(itertools.chain.from_iterable(p.sizes.tolist() for p in parts)) == list(range(ARRAY_BLOCK + 10))


def test_simulate_compiled_equals_python_on_a_csv_trace(tmp_path, capsys):
    """`bloomwise simulate --trace FILE.csv --engine compiled` (the compiled reader, with the cache keys' bytes for
    icp, summary, paradox and carp) reports what the Python engine over the Python reader reports, malformed-line
    warning included."""
    from bloomwise.cli import main

    path = tmp_path / "t.csv"
    rows = [f"{i // 10},obj{(i * i + i // 7) % 211},{100 + (i * 31) % 500}" for i in range(20_000)]
    rows[100] = "9,broken"
    path.write_text("# time, object, size\n" + "\n".join(rows) + "\n")
    outputs = {}
    for engine in ("python", "compiled"):
        code = main(["simulate", "--trace", str(path), "--assign", "random", "--proxies", "7", "--policy",
                     "none,icp,summary,paradox,carp", "--cache-size", "16KiB", "--limit", "15000", "--engine", engine,
                     "--json", "-"])
        out, err = capsys.readouterr()
        assert code == 0, err
        rows = json.loads(out)
        for row in rows:
            assert row.pop("engine") == engine and row.pop("seconds") >= 0
        outputs[engine] = (rows, err)
    assert outputs["compiled"] == outputs["python"]
    none, icp, summary, paradox, carp = outputs["python"][0]
    assert none["requests"] == 15000 and none["hit_ratio"] > 0.1 and summary["remote_hit_ratio"] > 0.01
    assert paradox["remote_hit_ratio"] > 0.01
    assert "1 malformed line(s) skipped (line 102" in outputs["python"][1]


def test_key_names_buffer_full_ends_blocks_early(tmp_path, monkeypatch):
    """When the cache keys' bytes fill their buffer, a block ends early (at the parser or at a deferred line) and
    the next one goes on: the same keys, names and counts as the Python reader's."""
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 40)
    monkeypatch.setattr(cachesim, "NAME_BYTES", 0)  # 4 * 40 + 4 bytes of names per block
    path = tmp_path / "t.csv"
    rows = [f"{i},{'obj' if i % 5 else 'objé'}{i % 311},{i}" for i in range(2000)]
    path.write_text("time,object,size\n" + "\n".join(rows) + "\n", encoding="utf-8")
    (keys, *_, names, name_lengths, url_lengths), _ = assert_same(path, proxies=4)
    assert len(keys) == 2000 and name_lengths.sum() == len(names) and (name_lengths - url_lengths >= 4).all()
    blocks = list(CsvTrace(path, "round-robin", 4).request_blocks(4, names=True))
    assert len(blocks) > 100 and max(int(b.name_offsets[-1]) for b in blocks) <= 164


def test_closed_zstd_stream_holds_no_decoder(tmp_path):
    """A closed .zst stream lets its decoder go at once (it holds up to the frame's window, 128 MiB for the 10M
    Twitter trace), even while the closed reader itself is still referenced (a reader and its generator form a
    cycle that only a full collection breaks)."""
    zstandard = pytest.importorskip("zstandard")
    import gc

    from bloomwise.cache.traces.files import open_binary

    path = tmp_path / "t.csv.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(b"time,object,size\n1,a,1\n"))
    stream, _ = open_binary(str(path), "rb")
    stream.read()

    def zstd_objects():
        seen, found, frontier = set(), [], [stream.raw]
        for _ in range(3):  # the raw stream, its attributes, theirs
            nxt = []
            for obj in frontier:
                for ref in gc.get_referents(obj):
                    if id(ref) not in seen:
                        seen.add(id(ref))
                        nxt.append(ref)
                        if type(ref).__module__.startswith("zstandard") or "Decompress" in type(ref).__name__:
                            found.append(type(ref).__name__)
            frontier = nxt
        return found

    assert zstd_objects()  # the open stream holds its decoder (so the check below can see one)
    stream.close()
    assert zstd_objects() == []


def test_time_fields_without_the_digits_float_needs_are_malformed_as_in_python(tmp_path):
    """An exponent, a mantissa or a sign without digits: float() refuses them, so do both readers (the compiled
    parser's digit checks; the line goes to the Python reader's per-line code)."""
    path = tmp_path / "no-digits.csv"
    path.write_bytes(b"time,object,size\n1,a,5\n1e,b,6\n2e+,c,7\n.,d,8\n+,e,9\n-.e1,f,10\n3,g,11\n")
    (_, _, _, times, numbers, _, _, _), counts = assert_same(path)
    assert numbers.tolist() == [2, 8] and times.tolist() == [1.0, 3.0]
    assert counts["malformed"] == 5
