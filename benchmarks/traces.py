"""Speed of the trace layer (bloomwise.cache.traces): synthetic generation, writing, and reading each format.

    .venv/bin/python benchmarks/traces.py                 # 1M requests, 3 runs (a few minutes under load)
    .venv/bin/python benchmarks/traces.py --quick         # 100k requests, 1 run
    .venv/bin/python benchmarks/traces.py --json out.json

Each figure is the median of the runs, in requests (lines) per second, twice: by wall-clock time and by the
process's CPU time (on a shared, loaded machine the process gets a fraction of a core, and the CPU-time rate is
what one core would do alone); the machine and its load are printed beside them. Reading counts the whole loop
a simulator runs: opening, parsing, building the Request records and handing them to a consumer that only
counts them. The same trace is also read in libCacheSim's forms (csv, csv.zst when the zstandard package is
installed, oracleGeneral), written by this benchmark (object ids numbered in order of first request). The targets
(issue 13): reading a plain trace above 300k lines/s, generation above 500k requests/s.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gc  # noqa: E402
import time  # noqa: E402

from measure import loadavg, machine, summary  # noqa: E402

from bloomwise.cache.traces import SyntheticTrace, open_trace, write_plain_trace, write_squid_log  # noqa: E402

TARGETS = {"read plain": 300_000, "generate": 500_000}


def write_cachesim_forms(trace, csv_path: str, oracle_path: str, zst_path: str | None) -> None:
    """The trace as libCacheSim csv (``time,object,size``), oracleGeneral records and (if given) zstd csv."""
    import numpy as np

    ids: dict[str, int] = {}
    times, objects, sizes = [], [], []
    for request in trace:
        times.append(int(request.timestamp))
        objects.append(ids.setdefault(request.url, len(ids) + 1))
        sizes.append(request.size)
    with open(csv_path, "w") as out:
        out.write("time,object,size\n")
        out.writelines(f"{t},{o},{z}\n" for t, o, z in zip(times, objects, sizes))
    record = np.dtype([("time", "<u4"), ("object", "<u8"), ("size", "<u4"), ("next", "<i8")])
    array = np.zeros(len(times), dtype=record)
    array["time"], array["object"], array["size"], array["next"] = times, objects, sizes, -1
    array.tofile(oracle_path)
    if zst_path is not None:
        import zstandard

        with open(csv_path, "rb") as source, open(zst_path, "wb") as target:
            zstandard.ZstdCompressor().copy_stream(source, target)


def _count(iterable) -> int:
    n = 0
    for _ in iterable:
        n += 1
    return n


def _cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def timed(fn, *args) -> tuple[int, int, object]:
    """(wall ns, CPU ns, result) of one call, with the cyclic GC off."""
    gc.disable()
    try:
        wall, cpu = time.perf_counter_ns(), time.process_time_ns()
        result = fn(*args)
        return time.perf_counter_ns() - wall, time.process_time_ns() - cpu, result
    finally:
        gc.enable()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100k requests, 1 run")
    parser.add_argument("--json", help="write the raw figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.runs = 100_000, 1
    n = args.requests
    trace = SyntheticTrace(n, num_proxies=16, num_documents=max(1000, n // 4), seed=1)
    before = loadavg()
    rates: dict[str, list[float]] = {}
    cpu_rates: dict[str, list[float]] = {}

    def record(name, wall_ns, cpu_ns, count):
        assert count == n, (name, count)
        rates.setdefault(name, []).append(count / (wall_ns / 1e9))
        cpu_rates.setdefault(name, []).append(count / (max(cpu_ns, 1) / 1e9))

    with tempfile.TemporaryDirectory() as tmp:
        paths = {"plain": os.path.join(tmp, "t.txt"), "squid": os.path.join(tmp, "t.log"),
                 "plain.gz": os.path.join(tmp, "t.txt.gz"), "csv": os.path.join(tmp, "t.csv"),
                 "oracleGeneral": os.path.join(tmp, "t.oracleGeneral.bin")}
        try:
            import zstandard  # noqa: F401  (only to know whether .zst can be read)
            paths["csv.zst"] = os.path.join(tmp, "t.csv.zst")
        except ImportError:
            print("zstandard is not installed: csv.zst is not measured")
        write_cachesim_forms(trace, paths["csv"], paths["oracleGeneral"], paths.get("csv.zst"))
        for _ in range(args.runs):
            record("generate", *timed(_count, trace))
            record("write plain", *timed(write_plain_trace, trace, paths["plain"]))
            record("write squid", *timed(write_squid_log, trace, paths["squid"]))
            for name, path in paths.items():
                if name == "plain.gz" and not os.path.exists(path):
                    write_plain_trace(trace, path)
                record(f"read {name}", *timed(lambda p: _count(open_trace(p)), path))
        sizes = {name: os.path.getsize(path) for name, path in paths.items()}
    info = machine()
    figures = {name: summary(values) for name, values in rates.items()}
    cpu_figures = {name: summary(values) for name, values in cpu_rates.items()}
    print(f"bloomwise.cache.traces, {n:,} requests (16 proxies, {max(1000, n // 4):,} documents), "
          f"median of {args.runs} run(s), one thread")
    flags = set(re.findall(r"^flags\s*:(.*)$", _cpuinfo(), re.M)[0].split()) if "flags" in _cpuinfo() else set()
    info["avx2"] = "avx2" in flags
    print(f"CPU: {info['cpu']} ({info['cpus']} cpus, AVX2 {'yes' if info['avx2'] else 'no'}, "
          f"AVX-512 {'yes' if info['avx512'] else 'no'}), "
          f"Python {info['python']}, numpy {info['numpy']}; load average before {before}, after {loadavg()}")
    print("file sizes: " + ", ".join(f"{name} {size / n:.1f} B/request" for name, size in sizes.items()))
    print()
    print("| operation | requests/s, wall (median) | min | max | requests/s, CPU time (median) | target |")
    print("|---|---:|---:|---:|---:|---|")
    for name, figure in figures.items():
        cpu = cpu_figures[name]["median"]
        target = TARGETS.get(name)
        mark = "" if target is None else (f"> {target:,}: wall {'met' if figure['median'] > target else 'missed'}, "
                                          f"CPU {'met' if cpu > target else 'missed'}")
        print(f"| {name} | {figure['median']:,.0f} | {figure['min']:,.0f} | {figure['max']:,.0f} | {cpu:,.0f} | "
              f"{mark} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"requests": n, "machine": info, "load_before": before, "load_after": loadavg(),
                       "figures": figures, "cpu_figures": cpu_figures, "bytes": sizes}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
