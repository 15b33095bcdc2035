"""The cache simulator's speed: requests replayed per minute, per policy, with 16 proxies on one core.

    python benchmarks/cache_simulation.py            # 1,000,000 synthetic requests, 3 runs per policy (medians)
    python benchmarks/cache_simulation.py --quick    # 100,000 requests, 1 run

Target (issue 13): at least 1,000,000 requests per minute per policy with 16 proxies on one core. The trace is
generated while it is replayed (``SyntheticTrace`` streams), so the figures include the generator's share; the
generator alone is timed too. Each policy runs on the engine ``replay`` picks (``engine="auto"``: compiled where it
runs, Python elsewhere; the table says which), or on the one ``--engine`` names (``--engine python``: the
reference). The simulator is single-threaded: CPU time (``time.process_time``) is reported beside wall time,
because on a shared machine the wall clock also counts the time other processes hold the core. The load average
before and after each run is recorded. Results: ``benchmarks/results/cache-simulation-<date>.{json,md}``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import measure

from bloomwise.cache import SyntheticTrace
from bloomwise.cache.simulation import SimulationConfig, replay

POLICIES = ("none", "icp", "summary", "paradox")
TARGET_PER_MINUTE = 1_000_000


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="100,000 requests, one run")
    p.add_argument("--requests", type=int, default=None, help="requests per replay (default 1,000,000)")
    p.add_argument("--runs", type=int, default=None, help="runs per policy (default 3; medians)")
    p.add_argument("--proxies", type=int, default=16)
    p.add_argument("--cache-size", type=int, default=256 << 20, help="bytes per proxy (default 256 MiB)")
    p.add_argument("--documents", type=int, default=1_000_000)
    p.add_argument("--engine", default="auto", choices=("auto", "compiled", "python"),
                   help="the replay engine of every policy (default auto: compiled where it runs)")
    p.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated (default {','.join(POLICIES)})")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    requests = args.requests or (100_000 if args.quick else 1_000_000)
    runs = args.runs or (1 if args.quick else 3)
    trace = SyntheticTrace(requests, num_proxies=args.proxies, num_documents=args.documents, seed=1)
    config = SimulationConfig(num_proxies=args.proxies, cache_size=args.cache_size,
                              mean_document_size=trace.expected_size, bits_per_entry=8, update_threshold=0.01)
    started = time.process_time()
    generated = sum(1 for _ in trace)
    generator_cpu = time.process_time() - started
    rows = []
    for policy in args.policies.split(","):  # policies interleaved run by run, so load changes hit them alike
        rows.append({"policy": policy, "wall": [], "cpu": [], "load": []})
    for run in range(runs):
        for row in rows:
            load_before = os.getloadavg()[0]
            cpu0, wall0 = time.process_time(), time.perf_counter()
            result = replay(trace, row["policy"], config, engine=args.engine)
            row["cpu"].append(time.process_time() - cpu0)
            row["wall"].append(time.perf_counter() - wall0)
            row["load"].append((load_before, os.getloadavg()[0]))
            row["result"] = result.to_json()
            row["engine"] = result.engine
            print(f"run {run + 1}/{runs} {row['policy']:8s} cpu {row['cpu'][-1]:7.2f} s  wall {row['wall'][-1]:7.2f} s"
                  f"  load {load_before:.1f}", file=sys.stderr)
    for row in rows:
        row["cpu_median"] = statistics.median(row["cpu"])
        row["wall_median"] = statistics.median(row["wall"])
        row["per_minute_cpu"] = requests / row["cpu_median"] * 60
        row["per_minute_wall"] = requests / row["wall_median"] * 60
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": measure.machine(), "kernels": measure.bloomwise_kernels(), "requests": requests,
            "runs": runs, "engine": args.engine, "proxies": args.proxies, "cache_size": args.cache_size, "documents": args.documents,
            "generator_per_minute_cpu": generated / generator_cpu * 60, "target_per_minute": TARGET_PER_MINUTE}
    lines = [f"# Cache simulator speed: {meta['date']}", "",
             f"{meta['machine']['cpu']} ({meta['machine']['cpu_id']}), {meta['machine']['cpus']} CPUs, "
             f"AVX-512: {meta['machine']['avx512']}, bloomwise kernels: {meta['kernels']}, "
             f"Python {meta['machine']['python']}", "",
             f"{requests:,} synthetic requests, {args.proxies} proxies, {args.cache_size >> 20} MiB each, "
             f"{args.documents:,} documents, 8 bits per entry, 1% update threshold; medians of {runs} run(s). "
             f"The generator alone: {meta['generator_per_minute_cpu'] / 1e6:.2f} M requests/min (CPU).", "",
             "| policy | engine | requests/min (CPU time) | requests/min (wall) | target 1 M/min (CPU) | load average |",
             "|---|---|---:|---:|---|---|"]
    for row in rows:
        loads = ", ".join(f"{a:.1f}->{b:.1f}" for a, b in row["load"])
        ok = "met" if row["per_minute_cpu"] >= TARGET_PER_MINUTE else "NOT met"
        lines.append(f"| {row['policy']} | {row['engine']} | {row['per_minute_cpu'] / 1e6:.2f} M "
                     f"| {row['per_minute_wall'] / 1e6:.2f} M "
                     f"| {ok} | {loads} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = (f"cache-simulation-{meta['date'][:10]}" + ("" if args.engine == "auto" else f"-{args.engine}")
            + ("-quick" if args.quick else ""))
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
