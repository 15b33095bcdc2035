"""`bloomwise trace`: writing a synthetic trace, describing a trace file, exit codes and messages."""
from __future__ import annotations

import json

import pytest

from bloomwise.cache.traces import SyntheticTrace, open_trace
from command_support import run_command as run


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


# -- limits of --synthetic (issue 34) -------------------------------------------------------------------------------

def test_synthetic_beyond_the_bound_is_refused_saying_how_big(tmp_path, capsys):
    out_file = tmp_path / "no-such-directory" / "huge.log"  # were the bound missing: exit 1 at once, no hang
    code, out, err = run(capsys, "trace", "--synthetic", "1e30", "-o", out_file)
    assert code == 2 and out == "" and not out_file.exists()
    assert err == ("bloomwise trace: --synthetic 1e30: 1,000,000,000,000,000,000,000,000,000,000 requests would "
                   "write about 9.9e+31 bytes (99 bytes a request in squid format); more than 100,000,000 requests "
                   "needs --force\n")
    code, _, err = run(capsys, "trace", "--synthetic", "2e8", "--format", "plain", "-o", out_file.with_suffix(".gz"))
    assert code == 2 and "200,000,000 requests would write about 11.4 GB (57 bytes a request in plain format, " \
                         "before compression)" in err


def test_force_writes_beyond_the_bound(tmp_path, capsys, monkeypatch):
    from bloomwise.cli import trace as trace_command

    monkeypatch.setattr(trace_command, "MAX_SYNTHETIC_REQUESTS", 100)
    code, _, err = run(capsys, "trace", "--synthetic", "101", "-o", tmp_path / "t.log")
    assert code == 2 and "101 requests would write about 10.0 kB (99 bytes a request" in err
    code, out, _ = run(capsys, "trace", "--synthetic", "101", "--force", "-o", tmp_path / "t.log")
    assert code == 0 and "wrote 101 requests" in out
    code, out, _ = run(capsys, "trace", "--synthetic", "100", "-o", tmp_path / "t.log")  # the bound itself: written
    assert code == 0 and "wrote 100 requests" in out


def test_synthetic_zero_is_refused(tmp_path, capsys):
    code, _, err = run(capsys, "trace", "--synthetic", "0", "-o", tmp_path / "t.log")
    assert code == 2 and "--synthetic '0' must be at least 1" in err and not (tmp_path / "t.log").exists()


# -- reading libCacheSim's formats, --limit, --assign ---------------------------------------------------------------

def test_cli_constants_are_the_library_s():
    from bloomwise.cache.traces import ASSIGNMENT_RULES, READ_FORMATS
    from bloomwise.cli import trace as trace_command

    assert (trace_command.READ_FORMATS, trace_command.ASSIGNMENT_RULES) == (READ_FORMATS, ASSIGNMENT_RULES)


def test_describe_csv_with_limit_and_assignment(tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text("".join(f"{i},object{i % 7},{100 + i}\n" for i in range(50)))
    code, out, _ = run(capsys, "trace", path, "--format", "csv", "--csv-columns", "time=1,object=2,size=3",
                       "--limit", "20", "--proxies", "2", "--assign", "round-robin", "--json")
    info = json.loads(out)
    assert code == 0 and info["format"] == "csv" and info["has_clients"] is False
    assert (info["requests"], info["get_requests"], info["distinct_get_urls"]) == (20, 20, 7)
    assert info["bytes"] == sum(100 + i for i in range(20))
    assert info["requests_per_proxy"] == {"0": 10, "1": 10}
    code, _, err = run(capsys, "trace", path, "--csv-columns", "time=1,object=2,size=3", "--proxies", "2")
    assert code == 2 and "has no client field" in err and "--assign" in err


@pytest.mark.parametrize("argv, message", [
    (["--csv-columns", "time=1,object=2"], "--csv-columns 'time=1,object=2': no size column"),
    (["--format", "squid", "--csv-columns", "object=2,size=3"], "--csv-columns goes with --format csv, not squid"),
    (["--assign", "random"], "--assign needs --proxies P"),
    (["--limit", "0"], "--limit '0' must be at least 1"),
    (["--synthetic", "10", "-o", "x", "--format", "csv"], "--format csv is for reading: write squid or plain"),
    (["--synthetic", "10", "-o", "x", "--limit", "5"], "--limit is for reading a trace, not with --synthetic"),
])
def test_reading_usage_errors(tmp_path, capsys, argv, message):
    path = tmp_path / "t.txt"
    path.write_text("1,a,2\n")
    code, _, err = run(capsys, "trace", *([] if "--synthetic" in argv else [path]), *argv)
    assert code == 2 and message in err and len(err.splitlines()) == 1, err


def test_zst_without_the_package_is_one_line(tmp_path, capsys, monkeypatch):
    import sys

    path = tmp_path / "t.csv.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd")
    monkeypatch.setitem(sys.modules, "zstandard", None)
    code, _, err = run(capsys, "trace", path)
    assert code == 1 and err == ('bloomwise trace: reading or writing .zst files needs the zstandard package: '
                                 'pip install "bloomwise[zstd]" (or pip install zstandard)\n')


# -- simulate's trace input ------------------------------------------------------------------------------------------

def test_simulate_reads_csv_with_limit_and_assignment(tmp_path, capsys):
    from bloomwise.cache.simulation import SimulationConfig, simulate
    from bloomwise.cache.traces import assigned_requests

    path = tmp_path / "t.csv"
    path.write_text("time,object,size\n" + "".join(f"{i},o{(i * 7) % 30},{1000 + i % 5}\n" for i in range(400)))
    code, out, err = run(capsys, "simulate", "--trace", path, "--proxies", "3", "--assign", "random", "--seed", "4",
                         "--limit", "300", "--policy", "none,icp", "--cache-size", "20KiB", "--json")
    assert code == 0 and err == ""
    rows = json.loads(out)
    config = SimulationConfig(num_proxies=3, cache_size=20 * 1024, seed=4, mean_document_size=1002.0)
    expected = simulate(lambda: assigned_requests(open_trace(path), "random", 3, seed=4, limit=300),
                        ["none", "icp"], config)
    assert [(r["policy"], r["requests"], r["local_hit_ratio"], r["remote_hit_ratio"]) for r in rows] == [
        (e.policy, 300, e.local_hit_ratio, e.remote_hit_ratio) for e in expected]
    code, _, err = run(capsys, "simulate", "--trace", path, "--proxies", "3")
    assert code == 2 and "has no client field" in err and "--assign" in err
    code, _, err = run(capsys, "simulate", "--trace", path, "--format", "plain", "--csv-columns", "object=2,size=3")
    assert code == 2 and "--csv-columns goes with --format csv, not plain" in err


@pytest.mark.parametrize("flag", [["--limit", "10"], ["--assign", "random"], ["--csv-columns", "object=1,size=2"]])
def test_simulate_trace_input_flags_are_not_for_synthetic(capsys, flag):
    code, _, err = run(capsys, "simulate", "--synthetic", "100", *flag)
    assert code == 2 and f"{flag[0]} is for --trace" in err


def test_simulate_names_a_real_trace_not_fetched(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BLOOMWISE_DATA", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "simulate", "--trace", "twitter-cluster52", "--proxies", "2")
    assert code == 1 and "twitter-cluster52 is a real trace that has not been fetched yet: run `bloomwise trace " \
                         "fetch twitter-cluster52`" in err
