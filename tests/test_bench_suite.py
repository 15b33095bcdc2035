"""benchmarks/suite.py: the short run's arguments per step and the headline table it prints (no benchmark runs)."""
from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # suite.py imports its sibling measure.py
_spec = importlib.util.spec_from_file_location("suite", BENCHMARKS / "suite.py")
suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite)


def test_the_short_run_passes_each_step_fewer_sizes_and_runs(tmp_path):
    short = {name: suite.step_command(name, script, tmp_path, "short")[2:] for name, script in suite.STEPS}
    assert short["peers"] == ["--out", str(tmp_path), "--sizes", "1M", "--fpr", "0.01", "--runs", "1",
                              "--large", "256MiB", "--only", "str-key,int,numpy,large"]
    assert short["persistence"][2:] == ["--mib", "256", "--runs", "2"]
    assert all(name in suite.SHORT_ARGS for name, _ in suite.STEPS)  # every step is shortened, none left at full
    full = {name: suite.step_command(name, script, tmp_path, "full")[2:] for name, script in suite.STEPS}
    assert all(args == ["--out", str(tmp_path)] for args in full.values())
    assert suite.step_command("decisions", "decisions.py", tmp_path, "quick")[-1] == "--quick"


def test_the_headline_is_the_readme_table_from_this_run(tmp_path):
    started = time.time() - 1
    figure = lambda value: {"median": value, "min": value, "max": value, "runs": [value]}  # noqa: E731
    libraries = {
        "bloomwise blocked": {"add": figure(41.8), "query_present": figure(29.2), "query_absent": figure(28.8),
                              "batch_add": figure(11.6), "batch_query": figure(12.5), "bits_per_key": 10.099712},
        "rbloom": {"add": figure(94.8), "query_present": figure(66.6), "query_absent": figure(66.3),
                   "batch_add": figure(53.0), "bits_per_key": 9.59},
        "pybloomfiltermmap3": {"unavailable": "not installed"},
    }
    data = {"meta": {"runs": 1}, "results": {"str-key-1M": {"0.01": libraries}, "int-1M": {"0.01": {}}}}
    (tmp_path / "amd-epyc-avx2-2cpu.json").write_text(json.dumps(data))
    table = suite.headline_table(tmp_path, started)
    assert table.splitlines()[2:] == [
        "| library | add | `in` present | `in` absent | update (list) | batch query | bits/key |",
        "|---|---|---|---|---|---|---|",
        "| **bloomwise blocked** | 41.8 | 29.2 | 28.8 | 11.6 | 12.5 | 10.1 |",
        "| rbloom | 94.8 | 66.6 | 66.3 | 53 | — | 9.59 |",
        "| pybloomfiltermmap3 | n/a | n/a | n/a | n/a | n/a | n/a |",
    ]
    assert "one run" in table.splitlines()[0]
    assert suite.headline_table(tmp_path, time.time() + 60) == ""  # only what this run wrote
