"""Trace readers, writers, the client -> proxy mapping and the synthetic workload (bloomwise.cache.traces)."""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import math
import sys
import tracemalloc
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, strategies as st

from bloomwise.cache import traces
from bloomwise.cache.traces import lines, synthetic
from bloomwise.cache.traces import (
    MAX_LINE_BYTES, MAX_REPORTED_MALFORMED, Request, SyntheticTrace, TraceError, assign_proxy, open_trace,
    read_plain_trace, read_squid_log, request_key, write_plain_trace, write_squid_log,
)
from bloomwise.errors import FormatError
from stats import FALSE_ALARM, assert_rate_matches

SQUID_LOG = """\
1700000000.123     15 10.0.0.7 TCP_MISS/200 5120 GET http://example.com/a - HIER_DIRECT/93.184.216.34 text/html
1700000000.456      0 10.0.0.8 TCP_MEM_HIT/200 312 GET http://example.com/b alice HIER_NONE/- image/png
1700000001.000    250 10.0.0.7 TCP_MISS/200 7000 GET http://example.com/c - CD_SIBLING_HIT/127.0.0.1 text/css
1700000002.5 3 ::1 TCP_DENIED/403 0 CONNECT example.com:443 - HIER_NONE/- - [extra mime headers]
"""

PLAIN = """\
# timestamp client url size
1700000000.5 c1 http://a.example/1 100

1700000001 c2 http://a.example/2 0 HEAD
"""


def test_request_key():
    assert request_key("get", "http://Example.com/x?y") == "GET http://Example.com/x?y"
    assert request_key("POST", "u") == "POST u"


def test_squid_log_fields(tmp_path):
    path = tmp_path / "access.log"
    path.write_text(SQUID_LOG)
    with read_squid_log(path) as reader:
        got = list(reader)
    assert got == [
        Request(1700000000.123, "10.0.0.7", "GET", "http://example.com/a", 5120, 1, 15, "TCP_MISS", 200, "-",
                "HIER_DIRECT", "93.184.216.34", "text/html"),
        Request(1700000000.456, "10.0.0.8", "GET", "http://example.com/b", 312, 2, 0, "TCP_MEM_HIT", 200, "alice",
                "HIER_NONE", "-", "image/png"),
        Request(1700000001.0, "10.0.0.7", "GET", "http://example.com/c", 7000, 3, 250, "TCP_MISS", 200, "-",
                "CD_SIBLING_HIT", "127.0.0.1", "text/css"),
        Request(1700000002.5, "::1", "CONNECT", "example.com:443", 0, 4, 3, "TCP_DENIED", 403, "-",
                "HIER_NONE", "-", "-"),
    ]
    assert (reader.format, reader.lines, reader.requests, reader.malformed, reader.skipped) == ("squid", 4, 4, 0, 0)


def test_plain_trace_fields_and_skipped_lines(tmp_path):
    path = tmp_path / "trace.txt"
    path.write_text(PLAIN)
    reader = read_plain_trace(path)
    assert list(reader) == [Request(1700000000.5, "c1", "GET", "http://a.example/1", 100, 2),
                            Request(1700000001.0, "c2", "HEAD", "http://a.example/2", 0, 4)]
    assert (reader.lines, reader.requests, reader.skipped, reader.malformed) == (4, 2, 2, 0)


def test_auto_detection(tmp_path):
    (tmp_path / "a.log").write_text(SQUID_LOG)
    (tmp_path / "b.txt").write_text(PLAIN)
    assert open_trace(tmp_path / "a.log").format == "squid"
    assert open_trace(tmp_path / "b.txt").format == "plain"
    assert len(list(open_trace(tmp_path / "b.txt", format="auto"))) == 2


MIXED = [
    "1700000000.000 5 c1 TCP_MISS/200 10 GET http://x/1 - HIER_DIRECT/1.2.3.4 -",        # 1 ok
    "1700000000.000 5 c1 TCP_MISS/200 10 GET http://x/2",                                 # 2 too few fields
    "nan 5 c1 TCP_MISS/200 10 GET http://x/3 - HIER_DIRECT/1.2.3.4 -",                    # 3 bad time
    "1700000000.000 -5 c1 TCP_MISS/200 10 GET http://x/4 - HIER_DIRECT/1.2.3.4 -",        # 4 bad elapsed
    "1700000000.000 5 c1 TCP_MISS 10 GET http://x/5 - HIER_DIRECT/1.2.3.4 -",             # 5 bad code
    "1700000000.000 5 c1 TCP_MISS/200 1e3 GET http://x/6 - HIER_DIRECT/1.2.3.4 -",        # 6 bad size
    "1700000000.000 5 c1 TCP_MISS/200 10 GET http://x/7 - HIER_DIRECT -",                 # 7 bad hierarchy
    "",                                                                                    # 8 blank: skipped
    "1700000001.000 5 c2 TCP_HIT/200 20 GET http://x/9 - HIER_NONE/- -",                   # 9 ok
]


def test_malformed_lines_are_counted_with_line_numbers_and_reasons(tmp_path):
    path = tmp_path / "mixed.log"
    path.write_bytes(("\n".join(MIXED) + "\n").encode() + b"1700000002.000 5 c3 TCP_HIT/200 1 GET http://x/\xff - "
                     b"HIER_NONE/- -\n")
    reader = read_squid_log(path)
    got = list(reader)
    assert [(r.line, r.url) for r in got] == [(1, "http://x/1"), (9, "http://x/9")]
    assert reader.malformed == 7 and reader.skipped == 1 and reader.lines == 10
    assert [number for number, _ in reader.malformed_lines] == [2, 3, 4, 5, 6, 7, 10]
    reasons = dict(reader.malformed_lines)
    assert reasons[2].startswith("expected 10 fields") and "found 7" in reasons[2]
    assert reasons[3].startswith("bad time 'nan'")
    assert reasons[4].startswith("bad elapsed time '-5'")
    assert reasons[5].startswith("bad result code 'TCP_MISS'")
    assert reasons[6].startswith("bad size '1e3'")
    assert reasons[7].startswith("bad hierarchy field 'HIER_DIRECT'")
    assert reasons[10].startswith("not UTF-8 text")


def test_plain_malformed_reasons(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("1 c u 5\n1 c u\n-1 c u 5\n1 c u -5\n1 c u 5 GET extra\n")
    reader = read_plain_trace(path)
    assert [r.line for r in reader] == [1]
    assert reader.malformed_lines == [
        (2, "expected 4 or 5 fields (timestamp client url size [method]), found 3"),
        (3, "bad timestamp '-1' (expected seconds since the epoch, e.g. 1700000000.123)"),
        (4, "bad size '-5' (expected a whole number of bytes)"),
        (5, "expected 4 or 5 fields (timestamp client url size [method]), found 6"),
    ]


def test_only_the_first_malformed_lines_are_kept(tmp_path):
    path = tmp_path / "many.txt"
    lines = ["1 c u 5"] + ["bad"] * (MAX_REPORTED_MALFORMED + 50) + ["2 c u 6"]
    path.write_text("\n".join(lines) + "\n")
    reader = read_plain_trace(path)
    assert [r.line for r in reader] == [1, len(lines)]
    assert reader.malformed == MAX_REPORTED_MALFORMED + 50
    assert [n for n, _ in reader.malformed_lines] == list(range(2, MAX_REPORTED_MALFORMED + 2))


def test_strict_mode_raises_on_the_first_malformed_line(tmp_path):
    path = tmp_path / "mixed.log"
    path.write_text("\n".join(MIXED) + "\n")
    reader = read_squid_log(path, strict=True)
    assert next(reader).line == 1
    with pytest.raises(TraceError) as info:
        next(reader)
    error = info.value
    assert (error.path, error.line) == (str(path), 2)
    assert error.reason.startswith("expected 10 fields")
    assert str(error).startswith(f"{path}, line 2: expected 10 fields")
    assert isinstance(error, FormatError)


def test_over_long_line_is_malformed_and_not_held(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text("1 c u 5\n" + "9" * (3 * MAX_LINE_BYTES + 17) + "\n2 c u 6\n")
    reader = read_plain_trace(path)
    assert [r.line for r in reader] == [1, 3]
    assert reader.malformed_lines == [(2, f"line longer than {MAX_LINE_BYTES} bytes")]


def test_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.log"
    with pytest.raises(FileNotFoundError, match="nope.log"):
        open_trace(missing)


@pytest.mark.parametrize("content", [
    b"\x00\x01\x02binary\xff\xfe" * 1000,
    b"Dear reader,\nthis is a letter, not a trace.\nRegards\n",
    b"".join(b"1700000000.1 c u notanumber\n" for _ in range(150)) + b"1700000000.1 c u 5\n",
])
def test_not_a_trace(tmp_path, content):
    path = tmp_path / "letter.txt"
    path.write_bytes(content)
    with pytest.raises(TraceError, match="not a trace: none of the first 100 lines") as info:
        open_trace(path)
    assert info.value.path == str(path) and str(path) in str(info.value)
    with pytest.raises(TraceError, match="Squid access.log"):
        read_squid_log(path)


def test_empty_file_is_an_empty_trace(tmp_path):
    path = tmp_path / "empty.log"
    path.write_text("\n# nothing yet\n")
    reader = open_trace(path)
    assert list(reader) == [] and reader.skipped == 2


@pytest.mark.parametrize("suffix, opener", [(".gz", gzip.open), (".bz2", bz2.open), (".xz", lzma.open)])
def test_compressed_files(tmp_path, suffix, opener):
    requests = list(SyntheticTrace(500, num_proxies=3, num_documents=200, seed=5))
    path = tmp_path / f"trace.log{suffix}"
    assert write_squid_log(requests, path) == 500
    with opener(path, "rb") as raw:  # really compressed
        assert raw.read().startswith(b"17")
    back = list(open_trace(path))
    assert [r[:5] for r in back] == [r[:5] for r in requests]
    assert [r.line for r in back] == list(range(1, 501))


def test_corrupt_compressed_file_is_an_error(tmp_path):
    path = tmp_path / "trace.gz"
    data = gzip.compress(b"1 c u 5\n" * 100000)
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="cannot read"):
        list(open_trace(path))


def test_stdin_and_file_objects(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(PLAIN.encode())))
    reader = open_trace("-")
    assert reader.path == "<stdin>" and [r.url for r in reader] == ["http://a.example/1", "http://a.example/2"]
    assert [r.url for r in read_plain_trace(io.StringIO(PLAIN))] == ["http://a.example/1", "http://a.example/2"]
    assert [r.url for r in open_trace(io.BytesIO(SQUID_LOG.encode()))][:1] == ["http://example.com/a"]


def test_reading_streams_in_bounded_memory(tmp_path):
    """A trace is read a block at a time: the peak stays far below the file's size (12 MB here)."""
    path = tmp_path / "big.txt"
    n = 300_000
    path.write_bytes(b"1700000000.5 10.0.0.1 http://example.com/some/page.html 12345\n" * n)
    tracemalloc.start()
    try:
        count = sum(1 for _ in open_trace(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n
    assert peak < 3_000_000, f"peak {peak} bytes while reading a {path.stat().st_size}-byte trace"


# -- writers --------------------------------------------------------------------------------------------------------

def test_squid_writer_layout():
    out = io.StringIO()
    write_squid_log([Request(1700000000.5, "10.0.0.1", "GET", "http://e/", 42),
                     Request(1700000001.25, "10.0.0.2", "GET", "http://e/2", 7, 0, 12, "TCP_HIT", 200, "bob",
                             "CD_SIBLING_HIT", "10.0.0.9", "text/plain")], out)
    assert out.getvalue() == (
        "1700000000.500      0 10.0.0.1 TCP_MISS/200 42 GET http://e/ - HIER_DIRECT/- -\n"
        "1700000001.250     12 10.0.0.2 TCP_HIT/200 7 GET http://e/2 bob CD_SIBLING_HIT/10.0.0.9 text/plain\n")


@pytest.mark.parametrize("bad, message", [
    (Request(1.0, "a b", "GET", "u", 1), "client must be a non-empty string without spaces"),
    (Request(1.0, "c", "GET", "http://x/a b", 1), "url must be"),
    (Request(1.0, "c", "GET", "u", -1), "size must be an integer >= 0"),
    (Request(float("nan"), "c", "GET", "u", 1), "timestamp must be a finite number"),
    (Request(1.0, "c", "", "u", 1), "method must be"),
])
def test_writers_refuse_what_the_format_cannot_hold(bad, message):
    for writer in (write_squid_log, write_plain_trace):
        with pytest.raises(ValueError, match=f"request 1: {message}"):
            writer([Request(1.0, "c", "GET", "u", 1), bad], io.StringIO())


_token = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF, exclude_categories=("Cs", "Zs", "Zl", "Zp",
                                                                                           "Cc")),
                 min_size=1, max_size=12).filter(lambda s: not s.startswith("#"))
_plain_requests = st.lists(st.builds(
    lambda t, c, m, u, s: Request(t, c, m, u, s),
    st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False), _token,
    st.sampled_from(["GET", "HEAD", "POST"]), _token, st.integers(0, 2 ** 40)), max_size=30)


def assert_round_trip(requests, write, read):
    """Written then read back (strict): the same requests, numbered by line."""
    out = io.BytesIO()
    write(requests, out)
    back = list(read(io.BytesIO(out.getvalue()), strict=True))
    assert back == [r._replace(line=i + 1) for i, r in enumerate(requests)]


@given(_plain_requests)
def test_plain_round_trip(requests):
    assert_round_trip(requests, write_plain_trace, read_plain_trace)


_squid_requests = st.lists(st.builds(
    lambda ms, c, m, u, s, e, code, status, user, hier, peer, ctype: Request(
        ms / 1000, c, m, u, s, 0, e, code, status, user, hier, peer, ctype),
    st.integers(0, 4_000_000_000_000), _token, st.sampled_from(["GET", "HEAD", "POST"]), _token,
    st.integers(0, 2 ** 40), st.integers(0, 10 ** 7), _token.filter(lambda s: "/" not in s), st.integers(0, 999),
    _token, _token.filter(lambda s: "/" not in s), _token, _token), max_size=30)


@given(_squid_requests)
def test_squid_round_trip(requests):
    assert_round_trip(requests, write_squid_log, read_squid_log)


def test_synthetic_trace_round_trips_through_both_formats(tmp_path):
    requests = list(SyntheticTrace(2000, num_proxies=5, num_documents=300, seed=11))
    for writer, name in ((write_squid_log, "t.log"), (write_plain_trace, "t.txt")):
        writer(requests, tmp_path / name)
        back = list(open_trace(tmp_path / name, strict=True))
        assert [r[:5] for r in back] == [r[:5] for r in requests]


# -- proxies --------------------------------------------------------------------------------------------------------

def test_assign_proxy_is_xxh3_mod_p():
    xxhash = pytest.importorskip("xxhash")
    for client in ("10.0.0.1", "ünïcode-host", "", "client-42"):
        for p in (1, 2, 7, 16):
            assert assign_proxy(client, p) == xxhash.xxh3_64_intdigest(client.encode("utf-8")) % p
    assert assign_proxy("10.0.0.1", 16) == 6  # pinned: the mapping must never change


def test_assign_proxy_spreads_clients_evenly():
    """Each proxy's share of 40,000 clients is Binomial(n, 1/P); Bonferroni over the P proxies."""
    num_proxies, n = 16, 40_000
    counts = Counter(assign_proxy(f"192.168.{i >> 8}.{i & 255}-{i}", num_proxies) for i in range(n))
    for proxy in range(num_proxies):
        assert_rate_matches(counts[proxy], n, 1 / num_proxies, f"clients of proxy {proxy}",
                            false_alarm=FALSE_ALARM / num_proxies)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_assign_proxy_rejects_bad_counts(bad):
    with pytest.raises(ValueError, match="num_proxies must be a positive integer"):
        assign_proxy("c", bad)


# -- the synthetic workload -----------------------------------------------------------------------------------------

def test_synthetic_exact_outcome_for_a_seed():
    got = [tuple(r[:5]) for r in SyntheticTrace(6, num_proxies=3, num_documents=1000, seed=42)]
    assert got == PINNED_SEED_42


PINNED_SEED_42 = [
    (1700000000.0, "10.0.0.51", "GET", "http://proxy2.example/5", 11615),
    (1700000000.004, "10.0.0.60", "GET", "http://once.example/1/1", 31738),
    (1700000000.008, "10.0.0.23", "GET", "http://shared.example/103", 13720),
    (1700000000.047, "10.0.0.43", "GET", "http://once.example/2/2", 879),
    (1700000000.056, "10.0.0.109", "GET", "http://proxy0.example/9", 1729),
    (1700000000.061, "10.0.0.53", "GET", "http://proxy2.example/127", 66981),
]


def test_synthetic_is_reproducible_and_seeded():
    trace = SyntheticTrace(3000, num_proxies=4, num_documents=500, seed=7)
    first, second = list(trace), list(trace)
    assert first == second and len(first) == len(trace) == 3000
    assert list(SyntheticTrace(3000, num_proxies=4, num_documents=500, seed=8)) != first
    assert all(r.method == "GET" and r.line == 0 for r in first)
    # the chunk boundary (16384) changes nothing: a longer trace starts with the shorter one
    longer = list(SyntheticTrace(20000, num_proxies=4, num_documents=500, seed=7))
    shorter = list(SyntheticTrace(17000, num_proxies=4, num_documents=500, seed=7))
    assert longer[:17000] == shorter


def test_synthetic_structure():
    num_proxies = 6
    trace = SyntheticTrace(60_000, num_proxies=num_proxies, num_documents=3000, one_timer_fraction=0.3,
                           shared_fraction=0.4, seed=1)
    requests = list(trace)
    sizes: dict[str, int] = {}
    kinds = Counter()
    once_urls = Counter()
    for r in requests:
        assert sizes.setdefault(r.url, r.size) == r.size, "a document changed size"
        proxy = assign_proxy(r.client, num_proxies)
        assert r.client in trace.clients(proxy)
        host = r.url.split("/")[2]
        kinds[host.split(".")[0] if not host.startswith("proxy") else "private"] += 1
        if host.startswith("proxy"):
            assert host == f"proxy{proxy}.example", "a private document requested through another proxy"
            assert 1 <= int(r.url.rsplit("/", 1)[1]) <= trace.private_documents
        elif host == "shared.example":
            assert 1 <= int(r.url.rsplit("/", 1)[1]) <= trace.shared_documents
        else:
            assert r.url.split("/")[3] == str(proxy)
            once_urls[r.url] += 1
    assert set(once_urls.values()) == {1}, "a one-timer was requested twice"
    n = len(requests)
    assert_rate_matches(kinds["once"], n, 0.3, "one-timer requests")
    assert_rate_matches(kinds["shared"], n, 0.7 * 0.4, "shared-pool requests")
    assert trace.shared_documents == 1200 and trace.private_documents == 300
    times = [r.timestamp for r in requests]
    assert times == sorted(times) and times[0] >= trace.start_time
    # Poisson arrivals at 100/s: the span of n gaps is Gamma(n, 1/100): mean n/100, sd sqrt(n)/100
    span = times[-1] - trace.start_time
    assert abs(span - n / 100) < 5.3 * math.sqrt(n) / 100 + 0.001


def _zipf_mle(counts: np.ndarray) -> tuple[float, float]:
    """Maximum-likelihood Zipf exponent over ranks 1..N from request counts, and its standard error (Fisher)."""
    ranks = np.arange(1, len(counts) + 1, dtype=np.float64)
    log_r = np.log(ranks)
    n = counts.sum()
    target = (counts * log_r).sum() / n  # the score is zero where E_alpha[ln r] equals the sample mean of ln r

    def moments(alpha):
        w = ranks ** -alpha
        w /= w.sum()
        mean = (w * log_r).sum()
        return mean, (w * log_r ** 2).sum() - mean ** 2

    low, high = 0.0, 5.0  # E_alpha[ln r] decreases with alpha
    for _ in range(100):
        middle = (low + high) / 2
        if moments(middle)[0] > target:
            low = middle
        else:
            high = middle
    alpha = (low + high) / 2
    return alpha, 1 / math.sqrt(n * moments(alpha)[1])


@pytest.mark.parametrize("alpha", [0.6, 0.8, 1.0])
def test_zipf_exponent_is_recovered(alpha):
    """MLE of the exponent from 100,000 requests to one pool of 2,000 documents: within 5.3 standard errors
    (a two-sided false alarm about 1e-7 per case, the MLE being asymptotically normal)."""
    num_documents = 2000
    trace = SyntheticTrace(100_000, num_proxies=1, num_documents=num_documents, zipf_alpha=alpha,
                           one_timer_fraction=0.0, shared_fraction=1.0, seed=int(alpha * 10))
    counts = np.zeros(num_documents, dtype=np.int64)
    for r in trace:
        counts[int(r.url.rsplit("/", 1)[1]) - 1] += 1
    estimate, standard_error = _zipf_mle(counts)
    assert abs(estimate - alpha) < 5.3 * standard_error, (estimate, standard_error)
    assert standard_error < 0.01


def test_sizes_follow_the_spliced_model():
    """Per document: P(size > k) is the lognormal body's tail beyond k (binomial check); with a light tail
    (shape 6, finite variance) the mean size matches expected_size (within 5.3 standard errors)."""
    trace = SyntheticTrace(1, num_proxies=1, num_documents=10, size_tail=6.0, seed=9)
    ranks = np.arange(1, 200_001)
    sizes = trace._sizes(np.zeros(len(ranks), dtype=np.int64), ranks)
    z = (math.log(traces.TAIL_START) - traces.BODY_MU) / traces.BODY_SIGMA
    tail_probability = 0.5 * math.erfc(z / math.sqrt(2))
    assert_rate_matches(int((sizes > traces.TAIL_START).sum()), len(sizes), tail_probability, "tail documents")
    standard_error = sizes.std() / math.sqrt(len(sizes))
    assert abs(sizes.mean() - trace.expected_size) < 5.3 * standard_error
    assert sizes.min() >= 1 and sizes.max() <= traces.MAX_DOCUMENT_SIZE


def test_mean_size_rescales_and_default_is_surge():
    assert 45_000 < SyntheticTrace(1).expected_size < 55_000
    trace = SyntheticTrace(1, mean_size=10_000, size_tail=6.0)
    assert trace.expected_size == pytest.approx(10_000, rel=1e-9)
    sizes = trace._sizes(np.zeros(100_000, dtype=np.int64), np.arange(1, 100_001))
    assert abs(sizes.mean() - 10_000) < 5.3 * sizes.std() / math.sqrt(len(sizes))
    assert SyntheticTrace(1, mean_size=16 * 1024).expected_size == pytest.approx(16 * 1024, rel=1e-9)


def test_generation_memory_is_bounded_by_the_catalogue(monkeypatch):
    monkeypatch.setattr(synthetic, "_CHUNK", 1024)  # many chunks in few requests (tracemalloc is slow)

    def peak(num_requests):
        tracemalloc.start()
        try:
            for _ in SyntheticTrace(num_requests, num_proxies=8, num_documents=20_000, seed=2):
                pass
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(3_000), peak(30_000)
    assert large < 1.3 * small + 200_000, (small, large)
    assert large < 20_000_000


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_requests=-1), "num_requests must be an integer >= 0"),
    (dict(num_proxies=0), "num_proxies must be a positive integer"),
    (dict(num_documents=0), "num_documents must be a positive integer"),
    (dict(zipf_alpha=-0.1), "zipf_alpha must be"),
    (dict(one_timer_fraction=1.0), r"one_timer_fraction must be a number in \[0, 1\)"),
    (dict(shared_fraction=1.5), r"shared_fraction must be a number in \[0, 1\]"),
    (dict(size_tail=1.0), "size_tail"),
    (dict(mean_size=0), "mean_size"),
    (dict(seed=-3), "seed"),
    (dict(request_rate=0), "request_rate"),
    (dict(num_documents=5, num_proxies=10, shared_fraction=0.5), "leaves no private document"),
])
def test_synthetic_rejects_bad_parameters(kwargs, message):
    arguments = dict(num_requests=10) | kwargs
    with pytest.raises(ValueError, match=message):
        SyntheticTrace(arguments.pop("num_requests"), **arguments)


_AWKWARD = (b"# a comment\r\n"
            b"1 c http://a/1 10\r\n"
            + b"1 c http://a/" + b"x" * 300 + b" 10\n"          # over-long (limit 200 below)
            + b"2 c http://a/\xc3\xa9 20\n"                     # UTF-8 (an e acute)
            + b"3 c http://a/\xe9 30\n"                         # not UTF-8
            + b"\n"
            + b"4 c http://a/4 40 HEAD\n"
            + b"y" * 450 + b"\n"                                # over-long and junk
            + b"5 c http://a/5 50")                             # no newline at the end


@pytest.mark.parametrize("block", [1, 2, 7, 64, 199, 200, 201, 4096])
def test_block_boundaries_change_nothing(monkeypatch, block):
    """Lines that cross the reader's blocks, over-long lines that span several, a last line without newline."""
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 200)
    monkeypatch.setattr(lines, "BLOCK_BYTES", block)
    reader = read_plain_trace(io.BytesIO(_AWKWARD))
    got = [(r.line, r.timestamp, r.url, r.size, r.method) for r in reader]
    assert got == [(2, 1.0, "http://a/1", 10, "GET"), (4, 2.0, "http://a/\u00e9", 20, "GET"),
                   (7, 4.0, "http://a/4", 40, "HEAD"), (9, 5.0, "http://a/5", 50, "GET")]
    assert reader.malformed_lines == [(3, "line longer than 200 bytes"),
                                      (5, "not UTF-8 text (invalid continuation byte at byte 13)"),
                                      (8, "line longer than 200 bytes")]
    assert (reader.lines, reader.skipped, reader.malformed) == (9, 2, 3)


def test_squid_writer_refuses_empty_optional_fields():
    with pytest.raises(ValueError, match="request 0: user must be a non-empty string"):
        write_squid_log([Request(1.0, "c", "GET", "u", 1, 0, 0, "TCP_HIT", 200, "")], io.StringIO())
    with pytest.raises(ValueError, match="request 0: hierarchy must not contain '/'"):
        write_squid_log([Request(1.0, "c", "GET", "u", 1, 0, 0, "TCP_HIT", 200, "-", "A/B")], io.StringIO())
    with pytest.raises(ValueError, match=r"request 0: status must be an integer in \[0, 999\]"):
        write_squid_log([Request(1.0, "c", "GET", "u", 1, 0, 0, "TCP_HIT", 1000)], io.StringIO())


def test_writers_accept_numpy_numbers_and_plain_tuples():
    out = io.StringIO()
    write_plain_trace([(np.float64(2.5), "c", "GET", "u", np.int64(7))], out)
    assert out.getvalue() == "2.5 c u 7\n"


def test_trace_benchmark_runs(tmp_path):
    import json
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "traces.json"
    run = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "traces.py"), "--requests", "3000",
                          "--runs", "1", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| read plain |" in run.stdout and "| generate |" in run.stdout
    figures = json.loads(out.read_text())["cpu_figures"]
    assert set(figures) == {"generate", "write plain", "write squid", "read plain", "read squid", "read plain.gz"}


@pytest.mark.parametrize("field, value, message", [
    ("status", 200.0, "status must be an integer"), ("elapsed_ms", -1, "elapsed_ms must be an integer >= 0"),
    ("squid_code", 5, "squid_code must be a non-empty string"), ("peer", "a b", "peer must be"),
])
def test_squid_writer_checks_squid_fields(field, value, message):
    request = Request(1.0, "c", "GET", "u", 1, 0, 0, "TCP_HIT", 200, "-", "HIER_NONE", "-", "-")
    with pytest.raises(ValueError, match=f"request 0: {message}"):
        write_squid_log([request._replace(**{field: value})], io.StringIO())


_line_pieces = st.sampled_from([
    "1700000000.123 15 10.0.0.7 TCP_MISS/200 5120 GET http://e/a - HIER_DIRECT/1.2.3.4 text/html",
    "1 c http://e/ 5", "1 c http://e/ 5 HEAD", "", "# note", "garbage", "nan c u 5", "1 c u -5", "\xe9t\xe9",
])


@given(st.lists(st.one_of(_line_pieces, st.text(max_size=40)), max_size=40).map("\n".join).map(str.encode)
       | st.binary(max_size=400), st.sampled_from(["auto", "squid", "plain"]))
def test_any_input_is_a_trace_error_or_fully_accounted(data, fmt):
    """Whatever the bytes: either a TraceError at open (not a trace), or every line is a request, a skipped line
    or a malformed one, and nothing else is raised."""
    try:
        reader = open_trace(io.BytesIO(data), format=fmt)
    except TraceError as error:
        assert error.reason.startswith("not a trace")
        return
    got = list(reader)
    assert reader.requests == len(got)
    assert reader.requests + reader.skipped + reader.malformed == reader.lines
    assert reader.lines == len(data.split(b"\n")) - (data.endswith(b"\n") or not data)
    assert all(r.line >= 1 for r in got) and [r.line for r in got] == sorted({r.line for r in got})


def test_a_real_squid_log():
    """tests/data/squid-5.7-access.log: written by Squid 5.7 (Debian 12) on loopback, in front of a local origin:
    a miss, a memory hit, a 404, a HEAD revalidation, a POST, a stripped query, an only-if-cached 504, and the
    internal digest URL refused (403)."""
    from pathlib import Path

    reader = open_trace(Path(__file__).parent / "data" / "squid-5.7-access.log", strict=True)
    got = list(reader)
    assert reader.format == "squid" and reader.lines == len(got) == 10 and reader.malformed == 0
    assert got[0] == Request(1795479438.377, "127.0.0.1", "GET", "http://127.0.0.1:40121/index.html", 305, 1, 62,
                             "TCP_MISS", 200, "-", "HIER_DIRECT", "127.0.0.1", "text/html")
    assert [(r.squid_code, r.status, r.method, r.hierarchy, r.peer) for r in got] == [
        ("TCP_MISS", 200, "GET", "HIER_DIRECT", "127.0.0.1"),
        ("TCP_MEM_HIT", 200, "GET", "HIER_NONE", "-"),
        ("TCP_MISS", 200, "GET", "HIER_DIRECT", "127.0.0.1"),
        ("TCP_MISS", 404, "GET", "HIER_DIRECT", "127.0.0.1"),
        ("TCP_REFRESH_UNMODIFIED", 200, "HEAD", "HIER_DIRECT", "127.0.0.1"),
        ("TCP_MISS", 501, "POST", "HIER_DIRECT", "127.0.0.1"),
        ("TCP_MISS", 200, "GET", "HIER_DIRECT", "127.0.0.1"),
        ("TCP_MISS", 504, "GET", "HIER_NONE", "-"),
        ("TCP_MISS", 403, "GET", "HIER_NONE", "-"),
        ("TCP_MISS", 403, "GET", "HIER_DIRECT", "127.0.0.1"),
    ]
    assert got[6].url == "http://127.0.0.1:40121/page.html?"  # Squid strips query terms by default
    out = io.StringIO()
    write_squid_log(got, out)  # what Squid wrote, bloomwise writes back, byte for byte
    assert out.getvalue() == (Path(__file__).parent / "data" / "squid-5.7-access.log").read_text()


def test_a_long_run_of_blank_lines_before_the_requests_is_not_held(monkeypatch):
    """Format detection keeps blocks of blank and comment lines as counts only."""
    monkeypatch.setattr(lines, "BLOCK_BYTES", 4096)
    data = b"\n" * 3_000_000 + b"# header\n" + b"1 c http://a/ 5\n" * 3
    tracemalloc.start()
    try:
        reader = open_trace(io.BytesIO(data))
        got = list(reader)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [r.line for r in got] == [3_000_002, 3_000_003, 3_000_004]
    assert (reader.skipped, reader.lines) == (3_000_001, 3_000_004)
    assert peak < 1_000_000, peak


@given(st.integers(0, 400), st.integers(1, 6), st.integers(1, 300), st.floats(0, 2), st.floats(0, 0.99),
       st.floats(0, 1), st.one_of(st.none(), st.integers(1, 10 ** 6)), st.floats(1.01, 5), st.integers(0, 2 ** 70))
def test_synthetic_traces_are_valid_for_any_parameters(n, proxies, documents, alpha, once, shared, mean, tail, seed):
    try:
        trace = SyntheticTrace(n, num_proxies=proxies, num_documents=documents, zipf_alpha=alpha,
                               one_timer_fraction=once, shared_fraction=shared, mean_size=mean, size_tail=tail,
                               seed=seed, clients_per_proxy=3)
    except ValueError as error:
        assert "leaves no private document" in str(error)
        return
    requests = list(trace)
    assert len(requests) == n
    previous = trace.start_time
    for r in requests:
        proxy = assign_proxy(r.client, proxies)
        host = r.url.split("/")[2]
        assert host in ("shared.example", f"proxy{proxy}.example", "once.example")
        assert 1 <= r.size <= traces.MAX_DOCUMENT_SIZE and r.timestamp >= previous
        previous = r.timestamp
    out = io.BytesIO()
    write_plain_trace(requests, out)
    assert [r[:5] for r in read_plain_trace(io.BytesIO(out.getvalue()), strict=True)] == [r[:5] for r in requests]
