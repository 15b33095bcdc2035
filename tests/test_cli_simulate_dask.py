"""`bloomwise simulate --sweep ... --workers N | --scheduler ADDRESS`: the points as Dask tasks, results equal to
the serial run's but for the wall-clock seconds, in the order of the points."""
import json
import sys

import numpy as np
import pytest

from bloomwise.cache import SyntheticTrace, write_plain_trace
from bloomwise.cli import main
from command_support import oracle_general_bytes, run_command

pytest.importorskip("distributed")
from bloomwise.dask import local_cluster  # noqa: E402

SWEEP = ["--proxies", "3", "--cache-size", "4MiB", "--policy", "none,summary,paradox",
         "--sweep", "bits-per-entry=2,8,16"]
SYNTHETIC = ["--synthetic", "3000", "--documents", "2000", *SWEEP]


def run_json(argv, capsys, with_err=False):
    code, out, err = run_command(capsys, "simulate", *argv, "--json", "-")
    assert code == 0, err
    return (json.loads(out), err) if with_err else json.loads(out)


def without_seconds(document):
    for point in document["points"]:
        for row in point["results"]:
            assert row.pop("seconds") >= 0
    return document


def test_workers_equal_the_serial_run(capsys):
    serial = without_seconds(run_json(SYNTHETIC, capsys))
    parallel = without_seconds(run_json([*SYNTHETIC, "--workers", "2"], capsys))
    assert [point["value"] for point in parallel["points"]] == [2, 8, 16]
    assert [[row["policy"] for row in point["results"]] for point in parallel["points"]] == \
        [["none", "summary", "paradox"]] * 3
    # the points differ (so that results gathered out of order cannot pass), and equal the serial ones
    false_hits = [point["results"][1]["false_hits"] for point in serial["points"]]
    assert len(set(false_hits)) == 3
    assert parallel == serial
    # and each point is the run of its own value
    single = run_json([arg for arg in SYNTHETIC if arg not in ("--sweep", "bits-per-entry=2,8,16")]
                      + ["--bits-per-entry", "16"], capsys)
    for row in single:
        row.pop("seconds")
    assert parallel["points"][2]["results"] == single


def test_scheduler_address_with_a_trace_file(tmp_path, capsys):
    path = tmp_path / "t.plain"
    with open(path, "w") as out:
        write_plain_trace(SyntheticTrace(2500, num_proxies=3, num_documents=1500, seed=4), out)
        out.write("this line is not a request\n")
    argv = ["--trace", str(path), "--format", "plain", *SWEEP]
    serial, serial_err = run_json(argv, capsys, with_err=True)
    with local_cluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", host="127.0.0.1",
                       dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        parallel, parallel_err = run_json([*argv, "--scheduler", cluster.scheduler_address], capsys, with_err=True)
    assert [row["requests"] for point in parallel["points"] for row in point["results"]] == [2500] * 9
    assert without_seconds(parallel) == without_seconds(serial)
    assert "1 malformed line(s) skipped (line 2501" in serial_err
    assert parallel_err == serial_err


@pytest.mark.parametrize("args, message", [
    (["--workers", "0"], "--workers '0' must be at least 1"),
    (["--workers", "two"], "--workers 'two'"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--scheduler is not allowed with --workers"),
])
def test_usage_errors(capsys, args, message):
    try:
        code = main(["simulate", *SYNTHETIC, *args])
    except SystemExit as stop:  # argparse's errors (mutually exclusive options) exit through the parser
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", [["--workers", "2"], ["--scheduler", "tcp://127.0.0.1:1"]])
def test_parallel_without_a_sweep(capsys, flag):
    code = main(["simulate", "--synthetic", "500", *flag])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == f"bloomwise simulate: {flag[0]} runs the points of a --sweep in parallel: give --sweep " \
                          "PARAM=V1,V2,..."


def test_without_dask(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` raises ImportError
    code = main(["simulate", *SYNTHETIC, "--workers", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == "bloomwise simulate: --workers needs Dask: pip install 'bloomwise[dask]'"



def test_scheduler_with_an_oracle_general_file_on_the_compiled_engine(tmp_path, capsys):
    """libCacheSim's binary records, read as arrays by the compiled engine in the workers; the malformed record
    is reported as in the serial run."""
    path = tmp_path / "t.oracleGeneral.bin"
    index = np.arange(5_000)
    nexts = np.full(5_000, -1)
    nexts[17] = 3  # before the record: malformed
    path.write_bytes(oracle_general_bytes(np.zeros(5_000), index * 7 % 700, 100 + index % 900, nexts))
    argv = ["--trace", str(path), "--assign", "random", "--proxies", "3", "--policy", "none", "--engine", "compiled",
            "--sweep", "cache-size=20KB,400KB"]
    serial, serial_err = run_json(argv, capsys, with_err=True)
    with local_cluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", host="127.0.0.1",
                       dashboard_address=None) as cluster:
        parallel, parallel_err = run_json([*argv, "--scheduler", cluster.scheduler_address], capsys, with_err=True)
    assert [point["results"][0]["engine"] for point in parallel["points"]] == ["compiled"] * 2
    hit_ratios = [point["results"][0]["hit_ratio"] for point in parallel["points"]]
    assert hit_ratios[0] < hit_ratios[1]
    assert without_seconds(parallel) == without_seconds(serial)
    assert "1 malformed line(s) skipped (line 18: next access 3" in serial_err and parallel_err == serial_err
