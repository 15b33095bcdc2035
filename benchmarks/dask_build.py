"""Dask build vs local build of the same keys: bloomwise.dask.build against BloomFilter.update, side by side.

For each workload (numpy uint64 keys; str URLs) and each way of building, the median wall time of ``--runs`` builds
of a filter sized for the keys at 1%, in ns per key, and its ratio to one local ``update`` on one thread. Every
Dask-built filter is checked bit for bit against the local one. The keys are in memory before the clock starts:
in this process for the local and threaded builds, persisted on the workers for the distributed one (its cluster
start-up is reported apart). On a machine of 2 cores no speed-up is expected: what Dask adds is building from data
spread over machines, with the same bits.

    .venv/bin/python benchmarks/dask_build.py                 # 4M keys, 3 runs (a few minutes)
    .venv/bin/python benchmarks/dask_build.py --quick         # 200k keys, 1 run: a smoke test
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import bloomwise_kernels, loadavg, machine  # noqa: E402


def _count(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 10**3, "M": 10**6, "G": 10**9}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def _keys(kind: str, n: int):
    rng = np.random.default_rng(2026)
    if kind == "numpy-u64":
        return rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)
    paths = rng.integers(0, 10**12, size=n)
    return [f"https://www.example{i % 997}.com/catalog/item/{p}?ref=bench" for i, p in enumerate(paths.tolist())]


def _collection(kind: str, keys, partitions: int):
    if kind == "numpy-u64":
        import dask.array as da
        return da.from_array(keys, chunks=-(-len(keys) // partitions))
    import dask.dataframe as dd
    import pandas as pd
    # A string column of a DataFrame, the usual form of such keys (read_parquet, read_csv). A Bag made by
    # from_sequence over an in-memory list would time Dask's per-element graph conversion (~5 us a key) instead.
    return dd.from_pandas(pd.Series(keys, name="url"), npartitions=partitions)


def _time(fn, runs: int):
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return times, result


def run(args) -> dict:
    import dask
    import distributed

    from bloomwise import BloomFilter
    from bloomwise.dask import build, local_cluster

    n = _count(args.keys)
    out = {"machine": machine(), "kernels": bloomwise_kernels(), "load_before": loadavg(), "keys": n,
           "partitions": args.partitions, "workers": args.workers, "runs": args.runs,
           "versions": {"dask": dask.__version__, "distributed": distributed.__version__}, "rows": []}
    started = time.perf_counter()
    cluster_start = time.perf_counter()
    with local_cluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None,
                       silence_logs=40) as cluster, distributed.Client(cluster) as client:
        out["cluster_start_s"] = time.perf_counter() - cluster_start
        for kind in args.workloads.split(","):
            keys = _keys(kind, n)

            def local(threads=None):
                f = BloomFilter(n, 0.01)
                f.update(keys, threads=threads)
                return f

            local_times, reference = _time(local, args.runs)
            rows = [("local update, 1 thread", local_times, True)]
            if kind == "numpy-u64":
                times, f = _time(lambda: local(2), args.runs)
                rows.append(("local update, threads=2", times, f == reference))
            collection = _collection(kind, keys, args.partitions)
            times, f = _time(lambda: build(collection, n, 0.01, scheduler="sync"), args.runs)
            rows.append((f"dask sync scheduler, {args.partitions} partitions", times, f == reference))
            times, f = _time(lambda: build(collection, n, 0.01, scheduler="threads", num_workers=2), args.runs)
            rows.append((f"dask threads (2), {args.partitions} partitions", times, f == reference))
            persisted = client.persist(collection)
            distributed.wait(persisted)
            times, f = _time(lambda: build(persisted, n, 0.01, scheduler=client), args.runs)
            rows.append((f"dask distributed, {args.workers} worker processes", times, f == reference))
            del persisted
            base = statistics.median(local_times)
            for name, times, identical in rows:
                median = statistics.median(times)
                out["rows"].append({"workload": kind, "build": name, "median_s": median, "min_s": min(times),
                                    "max_s": max(times), "ns_per_key": median / n * 1e9,
                                    "vs_local": median / base, "identical": bool(identical)})
    out["load_after"] = loadavg()
    out["total_s"] = time.perf_counter() - started
    return out


def markdown(data: dict) -> str:
    m = data["machine"]
    lines = [f"# Dask build vs local build ({data['keys']:,} keys, 1% FPR, blocked layout)", "",
             f"`benchmarks/dask_build.py` in {data['total_s']:.0f} s. Median of {data['runs']} runs [min-max]; "
             "ratio to one local `update` on one thread (below 1 is faster). Keys in memory before the clock "
             "starts (persisted on the workers for the distributed build). Every Dask-built filter was compared "
             "bit for bit with the local one.", "",
             "| machine | |", "|---|---|",
             f"| CPU | {m['cpu']} ({m['cpu_id']}), {m['cpus']} CPUs, {m['caches']}, "
             f"{'AVX-512' if m['avx512'] else 'no AVX-512'} |",
             f"| bloomwise batch kernels | {data['kernels']} |",
             f"| Python, numpy, Dask | {m['python']}, {m['numpy']}, dask {data['versions']['dask']}, distributed "
             f"{data['versions']['distributed']} |",
             f"| load average | {data['load_before']} before, {data['load_after']} after (shared machine) |",
             f"| LocalCluster start ({data['workers']} worker processes) | {data['cluster_start_s']:.2f} s |", "",
             "| workload | build | seconds | ns/key | vs local | same bits |", "|---|---|---|---|---|---|"]
    for r in data["rows"]:
        lines.append(f"| {r['workload']} | {r['build']} | {r['median_s']:.3f} [{r['min_s']:.3f}-{r['max_s']:.3f}] "
                     f"| {r['ns_per_key']:.1f} | {r['vs_local']:.2f}x | {'yes' if r['identical'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default=None, help="number of keys (default 4M; --quick: 200k)")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the LocalCluster")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workloads", default="numpy-u64,str-url")
    parser.add_argument("--quick", action="store_true", help="200k keys, 1 run, results not kept unless --out")
    parser.add_argument("--out", default=None, help="directory for the .md and .json (default benchmarks/results)")
    args = parser.parse_args(argv)
    if args.quick:
        args.keys, args.runs, args.partitions = args.keys or "200k", 1, 4
    args.keys = args.keys or "4M"
    data = run(args)
    text = markdown(data)
    print(text)
    out_dir = args.out or (None if args.quick else os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        stem = os.path.join(out_dir, f"{datetime.date.today().isoformat()}-dask-build")
        with open(stem + ".md", "w") as f:
            f.write(text)
        with open(stem + ".json", "w") as f:
            json.dump(data, f, indent=1)
    return 0 if all(r["identical"] for r in data["rows"]) else 1


if __name__ == "__main__":  # required: the LocalCluster's worker processes re-import this module
    sys.exit(main())
