"""The benchmark suite's CI-sized run: it must run end to end and write its table (peers may be absent)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quick_benchmark_writes_its_report(tmp_path):
    # bloomwise and one peer (Python's set) exercise every workload, the peer ratios and the report; the other peers
    # (about two thirds of the run's time: 76 s against 33 s on this loaded 2-CPU machine) run in `make bench`
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--quick",
                          "--libs", "bloomwise,set", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [raw] = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    [report] = [p for p in tmp_path.iterdir() if p.suffix == ".md"]  # one file per machine, no copies
    assert report.stem == raw.stem and report.stem.endswith("cpu-quick")
    results = json.loads(raw.read_text())
    assert results  # the bloomwise rows were measured
    table = report.read_text()
    assert "bloomwise" in table and "ns" in table and "| set (reference) |" in table


def test_quick_benchmark_measures_every_kernel_set(tmp_path):
    """--kernels: the numpy workload's bloomwise rows under each kernel set in one run, each row tagged with its
    set, and the threads target once per set."""
    from bloomwise._native.bloom import kernel_sets
    sets = [k for k in kernel_sets() if k != "scalar"] + ["scalar"]
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--quick", "--only", "numpy",
                          "--libs", "bloomwise", "--kernels", ",".join(sets), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [raw] = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    data = json.loads(raw.read_text())
    assert data["meta"]["kernel_sets"] == sets and data["meta"]["kernels"] == sets[0]
    for by_fpr in data["results"].values():
        for libs in by_fpr.values():
            assert libs["bloomwise blocked"]["kernels"] == sets[0]
            for kernels in sets[1:]:
                assert libs[f"bloomwise blocked threads=2 [{kernels}]"]["kernels"] == kernels
    rows = [t for t in data["targets"] if t["target"].startswith("update(numpy uint64, threads=2) / threads=1")]
    assert [t["kernels"] for t in rows] == sets
    assert all(t["status"] in ("PASS", "FAIL") for t in rows)
    table = next(p for p in tmp_path.iterdir() if p.suffix == ".md").read_text()
    assert f"**bloomwise blocked** [{sets[0]}]" in table and f"**bloomwise blocked [{sets[-1]}]**" in table


def test_an_unknown_kernel_set_stops_the_benchmark_with_the_choices(tmp_path):
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--quick", "--kernels", "avx3",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "--kernels 'avx3': this CPU runs" in run.stderr


def test_quick_anatomy_prints_its_table():
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "anatomy.py"), "--quick"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| bloomwise blocked |" in run.stdout and "tiny (call only)" in run.stdout


def test_small_decisions_benchmark_writes_its_targets(tmp_path):
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "decisions.py"), "--keys", "20000",
                          "--runs", "1", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [raw] = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    data = json.loads(raw.read_text())
    assert data["meta"]["kernels"] in ("avx2+avx512", "avx2", "scalar")
    statuses = {row["target"]: row["status"] for row in data["targets"]}
    assert statuses["SelectiveBloomFilter.query vs `in`"] in ("PASS", "FAIL")
    assert "| target | limit |" in run.stdout
    # the deferred posterior and expected-cost arrays of SelectiveBloomFilter.query_many, read: timed, not a target
    every = data["ratios"]["bloom batch u64: query_many, every column read, vs contains_many"]
    figures = {name: figure["median"] for name, figure in data["figures"].items()}
    assert every["median"] == pytest.approx(figures["bloom batch u64: query_many, every column read"]
                                            / figures["bloom batch u64: contains_many"], rel=1e-12)
    assert f"the u64 batch took {every['median']:.2f}x contains_many" in run.stdout
    # each non-ASCII figure comes with its floor (the same loop with a call that reads no character), and the floor
    # plus bloomwise's memory access (its figure minus the same operation against a filter in the L1 cache)
    for op, floor_name in (("add", "call floor"), ("in present", "loop floor"), ("in absent", "loop floor")):
        loop = figures[f"non-ASCII {floor_name}: {op}"]
        assert loop > 0
        if "non-ASCII rbloom: in absent" not in figures:
            continue
        floor = data["ratios"][f"non-ASCII {op}: {floor_name} and bloomwise's filter memory access vs rbloom"]
        memory = figures[f"non-ASCII bloomwise: {op}"] - figures[f"non-ASCII bloomwise: {op}, cache-resident filter"]
        assert floor["median"] == pytest.approx((loop + memory) / figures[f"non-ASCII rbloom: {op}"], rel=1e-12)
        assert f"non-ASCII {op}: {floor_name} and bloomwise's filter memory access vs rbloom: " \
               f"{floor['median']:.2f}x" in run.stdout

def test_suite_collects_every_steps_targets(tmp_path):
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "suite.py"), "--quick", "--only",
                          "decisions", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [table] = tmp_path.glob("*-targets-*.md")
    data = json.loads(table.with_suffix(".json").read_text())
    [decisions] = [p for p in tmp_path.glob("*-decisions-*.json")]
    step_rows = json.loads(decisions.read_text())["targets"]
    assert len(data["targets"]) == len(step_rows) and data["failures"] == []
    assert {row["source"] for row in data["targets"]} == {decisions.name}
    assert all(row["kernels"] for row in data["targets"])
    assert "| target | kernels | limit | measured | status | from |" in table.read_text()


def test_suite_names_its_steps_when_asked_for_an_unknown_one(tmp_path):
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "suite.py"), "--only", "decisons",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "unknown step(s) decisons" in run.stderr and "decisions" in run.stderr.split("the steps are")[1]


def test_small_scalable_benchmark_writes_its_targets(tmp_path):
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "scalable.py"), "--keys", "20000",
                          "--runs", "1", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [raw] = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    assert raw.stem.split("-")[3] == "scalable" and raw.with_suffix(".md").is_file()
    data = json.loads(raw.read_text())
    assert data["meta"]["kernels"] in ("avx2+avx512", "avx2", "scalar") and data["meta"]["stages"] == 10
    statuses = {row["target"]: row["status"] for row in data["targets"]}
    assert len(statuses) == 5 and set(statuses.values()) <= {"PASS", "FAIL"}
    assert statuses["ScalableBloomFilter in absent (10 stages) vs BloomFilter"] in ("PASS", "FAIL")
    assert data["figures"]["scalable: add"]["median"] > 0 and "| target | limit |" in run.stdout
    figures = {name: figure["median"] for name, figure in data["figures"].items()}
    extra = figures["scalable: contains_many u64"] - figures["single: contains_many u64"]
    floors = {op: data["ratios"][f"{op}: stage floor / single"]["median"] for op in ("add", "in absent")}
    for op, floor in floors.items():
        assert floor == pytest.approx((figures[f"single: {op}"] + extra) / figures[f"single: {op}"], rel=1e-12)
    assert f"Stage floors (not targets): `add` {floors['add']:.2f}x, `in absent` {floors['in absent']:.2f}x" \
        in run.stdout
    ten_extra = figures["ten reads: in absent"] - figures["single: in absent"]
    memory = {op: data["ratios"][f"{op}: memory floor / single"]["median"] for op in ("add", "in absent")}
    for op, floor in memory.items():
        assert floor == pytest.approx((figures[f"single: {op}"] + ten_extra) / figures[f"single: {op}"], rel=1e-12)
    assert f"Ten-reads references (one key at a time; `memory floor` in the JSON): `add` {memory['add']:.2f}x, " \
        f"`in absent` {memory['in absent']:.2f}x" \
        in run.stdout


def test_quick_counting_batch_benchmark_writes_its_targets(tmp_path):
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "counting_batch.py"), "--quick", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [raw] = tmp_path.glob("*-counting-batch-*.json")
    assert raw.with_suffix(".md").exists()
    data = json.loads(raw.read_text())
    assert data["meta"]["kernels"] in ("avx2+avx512", "avx2", "scalar") and data["meta"]["keys"] == 100_000
    rows = {row["target"]: row for row in data["targets"]}
    assert set(rows) == {f"counting update vs fastbloom-rs, {kind}"
                         for kind in ("list of URL str", "numpy uint64", "list of int")}
    assert {row["status"] for row in rows.values()} <= {"PASS", "FAIL", "N/A"}
    assert "bloomwise counting 4-bit classic" in raw.with_suffix(".md").read_text()
    assert all(value < 1 for value in data["heap_bytes_per_key"].values())  # no Python object per key


def test_quick_persistence_benchmark_writes_its_targets(tmp_path):
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "persistence.py"), "--quick", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [raw] = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    [report] = [p for p in tmp_path.iterdir() if p.suffix == ".md"]
    assert report.stem == raw.stem and "-persistence-" in raw.stem
    data = json.loads(raw.read_text())
    assert data["meta"]["kernels"] in ("avx2+avx512", "avx2", "scalar") and data["meta"]["mib"] == 64
    assert {"floor: read", "bloomwise load", "bloomwise save"} <= set(data["figures"])
    statuses = {row["target"]: row["status"] for row in data["targets"]}
    assert statuses["load (verify) <= 1.3x reading the file"] in ("PASS", "FAIL")
    assert "| target | limit |" in run.stdout


def test_quick_replay_speed_checks_its_target(tmp_path):
    """benchmarks/replay_speed.py --quick: the compiled replay and libCacheSim on one trace (their miss ratios equal,
    or it stops), the target rows (none against libCacheSim; summary and paradox with 16 proxies), the instruction
    set recorded."""
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "replay_speed.py"), "--quick", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [raw] = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    data = json.loads(raw.read_text())
    assert data["meta"]["instruction_set"] and data["python_engine"][0]["requests"] == 200_000
    target, *cooperative = data["targets"]
    assert target["status"] in (("PASS", "FAIL") if any("ratio_median" in c for c in data["configurations"])
                                else ("N/A",))
    assert "Instruction set:" in run.stdout and "| synthetic | lru | 64 MiB | 200,000 |" in run.stdout
    # the cooperative targets: summary and paradox with 16 proxies, measured when the Twitter trace is fetched
    assert [t["target"].split(",")[0] for t in cooperative] in (["summary", "paradox"], ["summary and paradox"])
    measured = [row["policy"] for row in data["cooperative"]]
    assert measured == (["summary", "paradox"] if len(cooperative) == 2 else [])
    assert all(t["status"] in (("PASS", "FAIL") if measured else ("N/A",)) for t in cooperative)
