"""Sizes no filter can have: a clear ValueError naming the parameter, at once (never a hang or a traceback);
and one sizing path for `plan` and `build`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bloomwise import BloomFilter, theory

# Each case runs in a child process with a time-out, so a hang fails the test instead of stalling the suite.
_IMPOSSIBLE = [
    ("BloomFilter", 10 ** 22, "classic", "capacity"),
    ("BloomFilter", 10 ** 22, "blocked", "capacity"),
    ("BloomFilter", 10 ** 17, "partitioned", "capacity"),
    ("CountingBloomFilter", 10 ** 30, "classic", "capacity"),
    ("VariableIncrementCountingBloomFilter", 10 ** 30, "classic", "capacity"),
    ("ScalableBloomFilter", 10 ** 20, "blocked", "capacity"),
]

_CHILD = """
import json, sys, time
import bloomwise
results = []
for name, capacity, layout in json.loads(sys.argv[1]):
    start = time.perf_counter()
    try:
        getattr(bloomwise, name)(capacity, 0.01, layout=layout)
        outcome = ("built", "")
    except Exception as error:
        outcome = (type(error).__name__, str(error))
    results.append([*outcome, time.perf_counter() - start])
print(json.dumps(results))
"""


def test_impossible_capacities_raise_value_error_naming_capacity():
    cases = [[name, capacity, layout] for name, capacity, layout, _ in _IMPOSSIBLE]
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cases)], capture_output=True, text=True,
                          timeout=120, check=True)
    for (name, capacity, layout, parameter), (kind, message, _seconds) in zip(_IMPOSSIBLE, json.loads(done.stdout)):
        assert kind == "ValueError", (name, capacity, layout, kind, message)
        assert f"{parameter}=" in message and "largest" in message, message


@pytest.mark.parametrize("layout", theory.LAYOUTS)
@pytest.mark.parametrize("n", [10 ** 15, 10 ** 22, 10 ** 100, 10 ** 400])
def test_theory_sizing_refuses_sizes_beyond_the_largest_filter(layout, n):
    with pytest.raises(ValueError, match="num_items=.*largest"):
        theory.optimal_size(n, 0.01, layout=layout)
    with pytest.raises(ValueError, match="n must be at most 2\\^64|n=.*largest"):
        theory.plan(n=n, p=0.01, layout=layout)


def test_the_largest_sizes_still_work():
    """The check is a lower bound (the information limit): sizes that fit are still computed."""
    m, k = theory.optimal_size(2 * 10 ** 13, 0.01)
    assert m <= theory.MAX_NUM_CELLS and k == 7
    with pytest.raises(ValueError, match="needs 1,447,648,273,010,829 cells"):  # fits the bound, not the core
        BloomFilter(10 ** 16, 0.999, layout="classic")


def test_largest_filter_matches_the_compiled_core():
    from bloomwise._native import bloom, counting
    assert theory.MAX_NUM_CELLS == bloom.MAX_NUM_BITS == counting.MAX_NUM_CELLS


def _cli(*argv, stdin=None):
    return subprocess.run([sys.executable, "-m", "bloomwise", *map(str, argv)], input=stdin, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("argv, parameter", [
    (("plan", "--n", "1e300", "--p", "1%"), "n"),
    (("plan", "--n", "1e30", "--p", "1%", "--layout", "blocked"), "n"),
    (("plan", "--n", "1e30", "--p", "1%"), "n"),
    (("plan", "--m", "1e300", "--p", "1%"), "m"),
    (("plan", "--n", "1e300", "--m", "1000"), "n"),
])
def test_cli_plan_impossible_sizes_are_usage_errors(argv, parameter):
    done = _cli(*argv)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and parameter in done.stderr
    assert done.stderr.startswith("bloomwise plan: ") and done.stderr.count("\n") == 1, done.stderr


def test_cli_build_impossible_capacity_is_a_usage_error(tmp_path):
    done = _cli("build", "--capacity", "1e100", "-o", tmp_path / "f.bloom", "-", stdin="a\n")
    assert done.returncode == 2 and "--capacity" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "f.bloom").exists()


@pytest.mark.parametrize("n, p", [("443161", "1%"), ("1000", "0.001"), ("12345", "1 in 3")])
def test_cli_plan_gives_the_size_build_makes(tmp_path, n, p):
    keys = tmp_path / "keys.txt"
    keys.write_text("a\nb\n")
    out = tmp_path / "f.bloom"
    assert _cli("build", keys, "-o", out, "--capacity", n, "--fpr", p).returncode == 0   # the default layout
    built = BloomFilter.load(out)
    planned = json.loads(_cli("plan", "--n", n, "--p", p, "--json").stdout)
    assert (planned["m"], planned["k"]) == (built.num_cells, built.num_hashes)
