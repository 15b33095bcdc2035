"""bloomwise.cache.experiment: the policies at every point of a sweep over one trace (what `bloomwise simulate`
runs), the results labelled by their point, and a stream replayed once like the file it came from."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from bloomwise.cache.experiment import StreamTrace, Sweep, run_experiment
from bloomwise.cache.sweeps import SweepTrace, run_point
from bloomwise.cache.traces import SyntheticTrace, write_squid_log

FIELDS = dict(num_proxies=3, cache_size=1 << 20, bits_per_entry=8, seed=5)
SYNTHETIC = SweepTrace(synthetic=dict(num_requests=3000, num_documents=600, seed=5))


def _without_seconds(results):
    return [{key: value for key, value in result.to_json().items() if key != "seconds"} for result in results]


def test_a_sweep_labels_each_result_with_its_point_in_order():
    sweep = Sweep("bits-per-entry", "bits_per_entry", (2, 16))
    outcome = run_experiment(SYNTHETIC, FIELDS, ["summary", "icp"], sweep=sweep)
    assert outcome.labels == [2, 2, 16, 16]
    assert [result.policy for result in outcome.results] == ["summary", "icp", "summary", "icp"]
    for index, value in enumerate(sweep.values):
        alone = run_point(SYNTHETIC, dict(FIELDS, bits_per_entry=value), ["summary", "icp"]).results
        assert _without_seconds(outcome.results[2 * index: 2 * index + 2]) == _without_seconds(alone)
    document = outcome.to_json(sweep)
    assert document["sweep"] == "bits-per-entry" and [point["value"] for point in document["points"]] == [2, 16]
    assert [r["policy"] for r in document["points"][1]["results"]] == ["summary", "icp"]
    assert document["points"][0]["results"][0]["bits_per_cached_document"] != \
        document["points"][1]["results"][0]["bits_per_cached_document"]


def test_a_stream_replays_like_its_file_and_only_once(tmp_path):
    path = tmp_path / "access.log"
    write_squid_log(SyntheticTrace(12_000, num_proxies=3, num_documents=900, seed=2), str(path))
    from_file = run_experiment(SweepTrace(path=str(path)), FIELDS, ["summary"])
    from_stream = run_experiment(StreamTrace(path=str(path)), FIELDS, ["summary"])
    assert from_stream.results[0].requests == 12_000  # the 10,000 read ahead for the size estimate, then the rest
    assert _without_seconds(from_stream.results) == _without_seconds(from_file.results)
    assert (from_stream.malformed, from_stream.labels) == (0, [None])
    with pytest.raises(ValueError, match="a stream can be replayed only once"):
        run_experiment(StreamTrace(path=str(path)), FIELDS, ["summary", "icp"])


def test_simulate_reads_standard_input_once_like_the_file(tmp_path):
    """`bloomwise simulate --trace -`: the stream's results are the file's; two policies are a usage error."""
    path = tmp_path / "access.log"
    write_squid_log(SyntheticTrace(3000, num_proxies=3, num_documents=500, seed=4), str(path))
    base = [sys.executable, "-m", "bloomwise", "simulate", "--proxies", "3", "--policy", "summary", "--json", "-"]
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parent.parent / "src"))
    with open(path, "rb") as stdin:
        piped = subprocess.run(base + ["--trace", "-"], stdin=stdin, capture_output=True, env=env, timeout=120)
    named = subprocess.run(base + ["--trace", str(path)], capture_output=True, env=env, timeout=120)
    assert piped.returncode == named.returncode == 0, piped.stderr
    drop_seconds = lambda text: [{k: v for k, v in r.items() if k != "seconds"} for r in json.loads(text)]
    assert drop_seconds(piped.stdout) == drop_seconds(named.stdout)
    assert drop_seconds(piped.stdout)[0]["requests"] == 3000
    with open(path, "rb") as stdin:
        twice = subprocess.run(base[:-4] + ["--policy", "summary,icp", "--trace", "-"], stdin=stdin,
                               capture_output=True, text=True, env=env, timeout=120)
    assert twice.returncode == 2 and "can be replayed only once" in twice.stderr
