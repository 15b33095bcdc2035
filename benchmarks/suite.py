"""`make bench`: every benchmark of the Speed targets in one run, then one table of all their targets.

    .venv/bin/python benchmarks/suite.py            # the full suite (about an hour on an idle 2-core machine)
    .venv/bin/python benchmarks/suite.py --quick    # every step at its smallest size: a smoke test (minutes)
    .venv/bin/python benchmarks/suite.py --only decisions,scalable

Each step is one of this folder's scripts, run in its own process (one after the other, never two at once) with
``--out`` set; each writes its tables and raw figures and checks its own targets. The suite then reads back what the
steps wrote in this run and writes ``results/<date>-targets-<cpu>.md`` (and ``.json``): every target with its
limit, what was measured, PASS/FAIL, and the step and kernel set it came from.
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="each step's --quick (results go to results/quick/)")
    parser.add_argument("--only", default="", help="comma-separated step names: " + ", ".join(s[0] for s in STEPS))
    parser.add_argument("--out", type=Path, default=None, help="where the results go (default results/)")
    args = parser.parse_args(argv)
    out = args.out or (HERE / "results" / "quick" if args.quick else HERE / "results")
    out.mkdir(parents=True, exist_ok=True)
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    unknown = wanted - {s[0] for s in STEPS}
    if unknown:
        parser.error(f"unknown step(s) {', '.join(sorted(unknown))}; the steps are "
                     + ", ".join(s[0] for s in STEPS))
    started = time.time()
    failures = []
    for name, script in STEPS:
        if wanted and name not in wanted:
            continue
        if not (HERE / script).exists():
            failures.append(f"{name}: {script} is missing")
            continue
        command = [sys.executable, str(HERE / script), "--out", str(out)] + (["--quick"] if args.quick else [])
        print(f"== {name}: {' '.join(command[1:])}", flush=True)
        t0 = time.time()
        code = subprocess.call(command)
        print(f"== {name}: exit {code} after {time.time() - t0:.0f} s", flush=True)
        if code:
            failures.append(f"{name}: exit code {code}")
    rows = collected_targets(out, started)
    text = markdown(rows, failures, time.time() - started, args)
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


def markdown(rows: list[dict], failures: list[str], seconds: float, args) -> str:
    machine = measure.machine()
    counts = {status: sum(r["status"] == status for r in rows) for status in ("PASS", "FAIL", "N/A")}
    lines = [f"# Speed targets: one `make bench` run, {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
             "", f"CPU {machine['cpu']} ({machine['cpus']} CPUs; AVX-512: {'yes' if machine['avx512'] else 'no'}); "
             f"Python {machine['python']}; {seconds / 60:.0f} minutes{' (--quick)' if args.quick else ''}; "
             f"load average at the end {measure.loadavg()}.", "",
             f"{counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['N/A']} not measured.", "",
             "| target | kernels | limit | measured | status | from |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['target']} | {r['kernels']} | {r['limit']} | {r['measured']} | {r['status']} | "
                     f"{r['source']} |")
    if failures:
        lines += ["", "Steps that failed: " + "; ".join(failures)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
