"""`bloomwise trace`: writing a synthetic trace, describing a trace file, exit codes and messages."""
from __future__ import annotations

import json

import pytest

from bloomwise.cache.traces import SyntheticTrace, open_trace
from bloomwise.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name, fmt", [("t.log", "squid"), ("t.txt.gz", "plain")])
def test_synthetic_trace_is_written_exactly(tmp_path, capsys, name, fmt):
    path = tmp_path / name
    code, out, err = run(capsys, "trace", "--synthetic", "2k", "--proxies", "3", "--seed", "9", "--documents", "500",
                         "--zipf", "0.7", "--one-timers", "0.1", "--shared", "0.3", "--mean-size", "8KiB",
                         "--format", fmt, "-o", path)
    assert code == 0 and err == "" and "wrote 2,000 requests" in out
    expected = SyntheticTrace(2000, num_proxies=3, seed=9, num_documents=500, zipf_alpha=0.7,
                              one_timer_fraction=0.1, shared_fraction=0.3, mean_size=8192)
    reader = open_trace(path, strict=True)
    assert [r[:5] for r in reader] == [r[:5] for r in expected]
    assert reader.format == fmt


def test_synthetic_to_stdout(capsys):
    code, out, _ = run(capsys, "trace", "--synthetic", "3", "--format", "plain", "-o", "-")
    assert code == 0 and len(out.splitlines()) == 3 and out.startswith("1700000000")


def test_describe(tmp_path, capsys):
    path = tmp_path / "access.log"
    path.write_text(
        "1700000000.000 5 10.0.0.1 TCP_MISS/200 100 GET http://a/ - HIER_DIRECT/1.2.3.4 -\n"
        "garbage\n"
        "1700000002.500 5 10.0.0.2 TCP_HIT/200 50 GET http://b/ - CD_SIBLING_HIT/10.0.0.9 -\n"
        "1700000001.000 5 10.0.0.1 TCP_MISS/200 7 POST http://c/ - HIER_DIRECT/1.2.3.4 -\n")
    code, out, _ = run(capsys, "trace", path, "--proxies", "2", "--json")
    assert code == 0
    info = json.loads(out)
    assert info["requests"] == 3 and info["lines"] == 4 and info["malformed_lines"] == 1
    assert info["first_malformed"][0]["line"] == 2
    assert info["methods"] == {"GET": 2, "POST": 1} and info["bytes"] == 157
    assert info["hierarchy_codes"] == {"HIER_DIRECT": 2, "CD_SIBLING_HIT": 1}
    assert info["first_timestamp"] == 1700000000.0 and info["last_timestamp"] == 1700000002.5
    assert sum(info["requests_per_proxy"].values()) == 3
    code, out, _ = run(capsys, "trace", path)
    assert code == 0 and "malformed       line 2: expected 10 fields" in out and "CD_SIBLING_HIT 1" in out
    code, _, err = run(capsys, "trace", path, "--strict")
    assert code == 1 and f"{path}, line 2: expected 10 fields" in err


@pytest.mark.parametrize("argv, message", [
    (["--synthetic", "10", "--proxies", "0", "-o", "x"], "--proxies '0' must be at least 1"),
    (["--synthetic", "10", "--shared", "1.5", "-o", "x"], "--shared must be a number in [0, 1]"),
    (["--synthetic", "10", "--size-tail", "1", "-o", "x"], "--size-tail (the Pareto shape) must be"),
    (["--synthetic", "ten", "-o", "x"], "--synthetic"),
    (["--synthetic", "0", "-o", "x"], "--synthetic '0' must be at least 1"),  # as simulate: no empty trace
    (["--synthetic", "10"], "--synthetic needs -o FILE"),
    ([], "give either --synthetic N -o FILE"),
])
def test_usage_errors(capsys, argv, message):
    code, _, err = run(capsys, "trace", *argv)
    assert code == 2 and message in err


def test_not_a_trace_and_missing_file(tmp_path, capsys):
    path = tmp_path / "letter.txt"
    path.write_text("hello\nworld\n")
    code, _, err = run(capsys, "trace", path)
    assert code == 1 and f"{path}: not a trace" in err
    code, _, err = run(capsys, "trace", tmp_path / "missing.log")
    assert code == 1 and "missing.log" in err


def test_describe_counts_distinct_urls_like_a_set(tmp_path, capsys):
    """The Bloom-filter counts of a seeded trace against exact sets (a new URL is miscounted with probability
    below 1e-4, so 5,000 requests allow a difference of at most 2: Poisson(0.5) exceeds 2 with probability 0.014,
    and the outcome is deterministic for these seeds)."""
    path = tmp_path / "t.log"
    run(capsys, "trace", "--synthetic", "5000", "--proxies", "4", "--documents", "3000", "-o", path)
    code, out, _ = run(capsys, "trace", path, "--proxies", "4", "--json")
    info = json.loads(out)
    from collections import Counter

    from bloomwise.cache.traces import assign_proxy
    requests = list(open_trace(path))
    counts = Counter(r.url for r in requests)
    per_proxy = {(assign_proxy(r.client, 4), r.url) for r in requests}
    assert info["get_requests"] == 5000
    assert 0 <= len(counts) - info["distinct_get_urls"] <= 2
    assert abs(sum(1 for n in counts.values() if n == 1) - info["urls_requested_once"]) <= 4
    assert info["infinite_cache_hit_ratio"] == pytest.approx(1 - len(counts) / 5000, abs=4e-4)
    assert info["infinite_cache_hit_ratio_per_proxy"] == pytest.approx(1 - len(per_proxy) / 5000, abs=4e-4)
    assert info["infinite_cache_hit_ratio_per_proxy"] < info["infinite_cache_hit_ratio"]
