"""`make bench`: every benchmark of the Speed targets in one run, then the headline table and one table of all their
targets.

    .venv/bin/python benchmarks/suite.py            # the short run (`make bench`): fewer sizes and runs, ~10 minutes
    .venv/bin/python benchmarks/suite.py --full     # the whole suite (`make bench-full`): 1-1.5 hours on 2 cores
    .venv/bin/python benchmarks/suite.py --quick    # every step at its smallest size: a smoke test (minutes)
    .venv/bin/python benchmarks/suite.py --only decisions,scalable

Each step is one of this folder's scripts, run in its own process (one after the other, never two at once) with
``--out`` set; each writes its tables and raw figures and checks its own targets. The suite then reads back what the
steps wrote in this run, prints the headline table (1M str keys at 1%, as in the README) and writes
``<out>/<date>-targets-<cpu>.md`` (and ``.json``): every target with its limit, what was measured, PASS/FAIL, and
the step and kernel set it came from. The short run measures every target, at the sizes and with the runs of
:data:`SHORT_ARGS` (its results go to ``results/short/``, not committed); the full run's go to ``results/``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import measure  # noqa: E402

# (name, script): run in this order
STEPS = [
    ("peers", "run.py"),
    ("decisions", "decisions.py"),
    ("scalable", "scalable.py"),
    ("persistence", "persistence.py"),
    ("counting-batch", "counting_batch.py"),
    ("replay", "replay_speed.py"),
]


# The short run (`make bench`, the default): each step's arguments. Every target is still measured, at fewer sizes
# and with fewer runs than the full suite's (1M and 10M keys, both rates, 3 runs, a 1 GiB filter); targets stated for
# 10M keys or 1 GiB are checked at the short run's size and say so in their row.
SHORT_ARGS = {
    "peers": ["--sizes", "1M", "--fpr", "0.01", "--runs", "1", "--large", "256MiB",
              "--only", "str-key,int,numpy,large"],
    "decisions": ["--runs", "1"],
    "scalable": ["--runs", "1"],
    "persistence": ["--mib", "256", "--runs", "2"],
    "counting-batch": ["--runs", "3"],
    "replay": ["--requests", "1000000", "--runs", "1"],
}
SHORT_NOTE = ("Short run (`make bench`): 1M keys only (the full suite adds 10M), FPR 1% only (also 0.1%), no URL "
              "workload, one run per figure for the peers, decisions and scalable steps (3), 3 for counting batches "
              "(7), a 256 MiB large filter and a 256 MiB file for load/save (1 GiB), one replay of 1M synthetic "
              "requests (3 of 2M); `make bench-full` runs the whole suite.")
HEADLINE_WORKLOAD, HEADLINE_FPR = "str-key-1M", "0.01"
HEADLINE_COLUMNS = (("add", "add"), ("query_present", "`in` present"), ("query_absent", "`in` absent"),
                    ("batch_add", "update (list)"), ("batch_query", "batch query"), ("bits_per_key", "bits/key"))


def step_command(name: str, script: str, out: Path, mode: str) -> list[str]:
    """The command line of one step: its script, ``--out``, and the mode's own arguments."""
    extra = ["--quick"] if mode == "quick" else SHORT_ARGS.get(name, []) if mode == "short" else []
    return [sys.executable, str(HERE / script), "--out", str(out)] + extra


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--full", action="store_true", help="the whole suite: every size, rate and run (results/)")
    modes.add_argument("--quick", action="store_true", help="each step's --quick (results go to results/quick/)")
    parser.add_argument("--only", default="", help="comma-separated step names: " + ", ".join(s[0] for s in STEPS))
    parser.add_argument("--out", type=Path, default=None, help="where the results go (default results/)")
    args = parser.parse_args(argv)
    args.mode = "full" if args.full else "quick" if args.quick else "short"
    out = args.out or {"full": HERE / "results", "quick": HERE / "results" / "quick",
                       "short": HERE / "results" / "short"}[args.mode]
    out.mkdir(parents=True, exist_ok=True)
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    unknown = wanted - {s[0] for s in STEPS}
    if unknown:
        parser.error(f"unknown step(s) {', '.join(sorted(unknown))}; the steps are "
                     + ", ".join(s[0] for s in STEPS))
    started = time.time()
    failures = []
    if args.mode == "short":
        print(SHORT_NOTE, flush=True)
    for name, script in STEPS:
        if wanted and name not in wanted:
            continue
        if not (HERE / script).exists():
            failures.append(f"{name}: {script} is missing")
            continue
        command = step_command(name, script, out, args.mode)
        print(f"== {name}: {' '.join(command[1:])}", flush=True)
        t0 = time.time()
        code = subprocess.call(command)
        print(f"== {name}: exit {code} after {time.time() - t0:.0f} s", flush=True)
        if code:
            failures.append(f"{name}: exit code {code}")
    rows = collected_targets(out, started)
    headline = headline_table(out, started)
    text = markdown(rows, failures, time.time() - started, args, headline)
    print(text)
    measure.write_results(out, "targets", {"targets": rows, "failures": failures}, text)
    return 1 if failures else 0


def collected_targets(out: Path, since: float) -> list[dict]:
    """The target rows of every JSON result a step wrote in ``out`` during this run."""
    rows = []
    for path in sorted(out.glob("*.json")):
        if path.stat().st_mtime < since or "-targets-" in path.name:
            continue
        data = json.loads(path.read_text())
        meta = data.get("meta", {})
        kernels = meta.get("kernels") or meta.get("batch_kernels") or "?"
        for row in data.get("targets", []):
            rows.append({**row, "source": path.name, "kernels": row.get("kernels", kernels)})
    return rows


def headline_table(out: Path, since: float) -> str:
    """The README's table from this run's peers step: ns per key for 1M str keys ``f"key{i}"`` at FPR 1%, one row
    per library (the median of the step's runs); "" when the peers step did not run."""
    for path in sorted(out.glob("*cpu*.json")):
        if path.stat().st_mtime < since:
            continue
        data = json.loads(path.read_text())
        libraries = data.get("results", {}).get(HEADLINE_WORKLOAD, {}).get(HEADLINE_FPR)
        if not libraries:
            continue
        runs = data["meta"]["runs"]
        lines = [f"1M str keys `f\"key{{i}}\"`, target rate 1%, ns per key, "
                 f"{'the median of ' + str(runs) + ' runs' if runs > 1 else 'one run'} ({path.name}):", "",
                 "| library | " + " | ".join(header for _, header in HEADLINE_COLUMNS) + " |",
                 "|---|" + "---|" * len(HEADLINE_COLUMNS)]
        for name, record in libraries.items():
            if "unavailable" in record:
                lines.append(f"| {name} | " + " | ".join("n/a" for _ in HEADLINE_COLUMNS) + " |")
                continue
            cells = []
            for key, _ in HEADLINE_COLUMNS:
                figure = record.get(key)
                figure = figure["median"] if isinstance(figure, dict) else figure
                cells.append("—" if figure is None else f"{figure:.3g}" if figure < 100 else f"{figure:,.0f}")
            lines.append(f"| {'**' + name + '**' if name == 'bloomwise blocked' else name} | " + " | ".join(cells)
                         + " |")
        return "\n".join(lines)
    return ""


def markdown(rows: list[dict], failures: list[str], seconds: float, args, headline: str = "") -> str:
    machine = measure.machine()
    counts = {status: sum(r["status"] == status for r in rows) for status in ("PASS", "FAIL", "N/A")}
    lines = [f"# Speed targets: one `make bench` run, {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
             "", f"CPU {machine['cpu']} ({machine['cpus']} CPUs; AVX-512: {'yes' if machine['avx512'] else 'no'}); "
             f"Python {machine['python']}; {seconds / 60:.0f} minutes ({args.mode} run); "
             f"load average at the end {measure.loadavg()}.", ""]
    if args.mode == "short":
        lines += [SHORT_NOTE, ""]
    if headline:
        lines += ["## Headline", "", headline, "", "## Targets", ""]
    lines += [f"{counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['N/A']} not measured.", "",
             "| target | kernels | limit | measured | status | from |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['target']} | {r['kernels']} | {r['limit']} | {r['measured']} | {r['status']} | "
                     f"{r['source']} |")
    if failures:
        lines += ["", "Steps that failed: " + "; ".join(failures)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
