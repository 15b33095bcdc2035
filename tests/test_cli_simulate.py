"""`bloomwise simulate`: options, table, JSON, sweeps, plots, errors and exit codes."""
import gzip
import io
import json

import pytest

from bloomwise.cache import SyntheticTrace, write_plain_trace, write_squid_log
from bloomwise.cache.simulation import JSON_KEYS
from bloomwise.cli import main
from command_support import run_command


SMALL = ["--synthetic", "1500", "--proxies", "3", "--cache-size", "4MiB", "--documents", "2000"]


def test_table_and_json(tmp_path, capsys):
    out_path = tmp_path / "r.json"
    code, out, err = run_command(capsys, "simulate", *SMALL, "--json", str(out_path))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["policy", "requests", "local", "hit"]
    assert [line.split()[0] for line in lines[1:]] == ["none", "icp", "summary", "paradox", "carp"]
    assert "local byte  remote byte  byte hit" in lines[0]
    assert "latency/req" in lines[0] and "memory/proxy" in lines[0]
    data = json.loads(out_path.read_text())
    assert [obj["policy"] for obj in data] == ["none", "icp", "summary", "paradox", "carp"]
    assert all(tuple(obj) == JSON_KEYS for obj in data)
    assert all(obj["requests"] == 1500 for obj in data)
    assert data[0]["peer_queries"] == 0 and data[1]["peer_queries"] > data[2]["peer_queries"]


def test_same_seed_same_numbers(capsys):
    argv = ["simulate", *SMALL, "--policy", "summary,paradox", "--json", "-", "--seed", "3"]
    first = json.loads(run_command(capsys, *argv)[1])  # stdout is the JSON alone
    second = json.loads(run_command(capsys, *argv[:-4], "--seed", "3", "--json")[1])  # --json alone: stdout too
    for a, b in zip(first, second):
        a.pop("seconds"), b.pop("seconds")
    assert first == second


@pytest.mark.parametrize("fmt", ["squid", "plain"])
def test_trace_files(tmp_path, capsys, fmt):
    trace = list(SyntheticTrace(800, num_proxies=2, num_documents=300, seed=1))
    path = tmp_path / f"t.{fmt}.gz"
    with gzip.open(path, "wt") as out:
        (write_squid_log if fmt == "squid" else write_plain_trace)(trace, out)
    with gzip.open(path, "at") as out:
        out.write("this line is not a request\n")
    code, out, err = run_command(capsys, "simulate", "--trace", str(path), "--format", fmt, "--proxies", "2",
                                 "--policy", "icp,summary", "--cache-size", "2MiB", "--json", "-")
    assert code == 0, err
    assert "1 malformed line(s) skipped (line 801" in err
    data = json.loads(out)
    assert [obj["requests"] for obj in data] == [800, 800]
    assert data[0]["hit_ratio"] == pytest.approx(data[1]["hit_ratio"], abs=0.01)


def test_sweep_json_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, out, err = run_command(capsys, "simulate", *SMALL, "--policy", "summary,paradox", "--sweep",
                                 "bits-per-entry=2,8", "--json", str(tmp_path / "s.json"), "--plot",
                                 str(tmp_path / "fig"))
    assert code == 0, err
    assert out.splitlines()[0].startswith("bits-per-entry")
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["sweep"] == "bits-per-entry" and [p["value"] for p in data["points"]] == [2, 8]
    assert all(len(p["results"]) == 2 for p in data["points"])
    png = tmp_path / "fig" / "sweep-bits-per-entry.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("sweep", ["update-threshold=1%,10%", "proxies=2,3", "cache-size=1MiB,4MiB"])
def test_other_sweeps(capsys, sweep):
    code, out, err = run_command(capsys, "simulate", *SMALL, "--policy", "summary", "--sweep", sweep)
    assert code == 0, err
    assert len(out.splitlines()) == 3


@pytest.mark.parametrize("args, message", [
    (["--proxies", "0"], "--proxies"),
    (["--cache-size=-5MiB"], "--cache-size"),
    (["--cache-size", "lots"], "--cache-size"),
    (["--policy", "summary,multicast"], "--policy 'multicast' is not one of"),
    (["--resize-tolerance", "0"], "--resize-tolerance '0' must be a fraction > 0"),
    (["--resize-tolerance", "some"], "--resize-tolerance 'some' is not a fraction"),
    (["--update-threshold", "0"], "--update-threshold"),
    (["--update-threshold", "150%"], "--update-threshold"),
    (["--bits-per-entry", "0"], "--bits-per-entry"),
    (["--sweep", "colour=1,2"], "--sweep 'colour=1,2'"),
    (["--sweep", "proxies=0,2"], "--sweep proxies value"),
    (["--origin-cost=-1"], "--origin-cost"),
])
def test_usage_errors(capsys, args, message):
    code, out, err = run_command(capsys, "simulate", "--synthetic", "10", *args)
    assert code == 2
    assert message in err and out == ""


def test_missing_or_bad_trace(tmp_path, capsys):
    missing = tmp_path / "nope.log"
    code, _, err = run_command(capsys, "simulate", "--trace", str(missing))
    assert code == 1 and str(missing) in err and "does not exist" in err
    code, _, err = run_command(capsys, "simulate", "--trace", str(tmp_path))
    assert code == 1 and "directory" in err
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01\x02 not a trace at all\n" * 20)
    code, _, err = run_command(capsys, "simulate", "--trace", str(junk))
    assert code == 1 and str(junk) in err
    with pytest.raises(SystemExit) as info:
        main(["simulate", "--proxies", "2"])  # neither --trace nor --synthetic
    assert info.value.code == 2


def test_plot_without_sweep(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, out, err = run_command(capsys, "simulate", *SMALL, "--policy", "icp,summary", "--plot", str(tmp_path))
    assert code == 0, err
    assert (tmp_path / "policies.png").read_bytes()[:4] == b"\x89PNG"


def test_standard_input_replays_the_whole_trace_like_the_file(tmp_path, capsys, monkeypatch):
    path = tmp_path / "t.log"
    write_squid_log(SyntheticTrace(3000, num_proxies=3, num_documents=500, seed=4), path)
    argv = ["simulate", "--proxies", "3", "--policy", "summary", "--json", "--trace"]
    assert main(argv + [str(path)]) == 0
    from_file = json.loads(capsys.readouterr().out)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    assert main(argv + ["-"]) == 0  # the mean size is estimated from the stream's start, which is replayed too
    from_stdin = json.loads(capsys.readouterr().out)
    for a, b in zip(from_file, from_stdin):
        a.pop("seconds"), b.pop("seconds")
    assert from_stdin == from_file and from_stdin[0]["requests"] == 3000


def test_resize_tolerance_option(capsys):
    """Sized from the mean document size only (off), the summaries carry other than B bits per cached document;
    re-sized (the default 10%), within 10% of B."""
    argv = ["simulate", *SMALL, "--policy", "summary", "--bits-per-entry", "8", "--json", "-"]
    resized = json.loads(run_command(capsys, *argv)[1])[0]
    fixed = json.loads(run_command(capsys, *argv, "--resize-tolerance", "off")[1])[0]
    assert 8 / 1.1 <= resized["bits_per_cached_document"] <= 8 * 1.1
    assert not 8 / 1.1 <= fixed["bits_per_cached_document"] <= 8 * 1.1
