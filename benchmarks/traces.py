"""Speed of the trace layer (bloomwise.cache.traces): synthetic generation, writing, and reading each format.

    .venv/bin/python benchmarks/traces.py                 # 1M requests, 3 runs (a few minutes under load)
    .venv/bin/python benchmarks/traces.py --quick         # 100k requests, 1 run
    .venv/bin/python benchmarks/traces.py --json out.json
    .venv/bin/python benchmarks/traces.py --scale         # the 10M-request Twitter trace: reading, and a replay


Each figure is the median of the runs, in requests (lines) per second, twice: by wall-clock time and by the
process's CPU time (on a shared, loaded machine the process gets a fraction of a core, and the CPU-time rate is
what one core would do alone); the machine and its load are printed beside them. Reading counts the whole loop
a simulator runs: opening, parsing, building the Request records and handing them to a consumer that only
counts them. The same trace is also read in libCacheSim's forms (csv, csv.zst when the zstandard package is
installed, oracleGeneral), written by this benchmark (object ids numbered in order of first request). The targets
(issue 13): reading a plain trace above 300k lines/s, generation above 500k requests/s.

``--scale [NAME]`` measures a real trace (default ``twitter-cluster52-10m``, fetched by ``bloomwise trace fetch``),
each step in a fresh process so that its peak memory is its own (wall, CPU time, peak RSS from ``wait4``):
start-up alone (the floor of the others: imports, the trace opened), reading it the Python way (Request
records; then those records turned into the compiled replay's arrays by
``fast_replay.request_blocks``) and the compiled way (``CsvTraceReader.record_arrays``), then ``bloomwise simulate
--policy none --proxies 100 --assign random --engine compiled`` over the whole trace, against the target of
issue 30 (each policy in at most 2 minutes of CPU time on one core). Results: ``results/<date>-trace-scale-<cpu>``.
The 10M trace's zstd frame declares a 128 MiB window, which the decoder holds whichever reader reads it: the peak
RSS of reading it is that window plus one chunk and one block (an uncompressed csv reads at the start-up floor).
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

from measure import in_child, loadavg, machine, summary  # noqa: E402

from bloomwise.cache.traces import (SyntheticTrace, fetched_path, open_trace, write_plain_trace,  # noqa: E402
                                    write_squid_log)

#: issue 30: 100 proxies over the 10M-request Twitter trace, each policy in at most this many CPU seconds
SCALE_REPLAY_LIMIT_S = 120
SCALE_PROXIES = 100
SCALE_CACHE = "64MiB"

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


def _scale_child(mode: str, path: str) -> None:
    """One reading of ``path`` (a step of --scale), printing the requests read."""
    count = 0
    if mode == "imports":  # the floor of the others: the interpreter, numpy, bloomwise, an opened trace
        import bloomwise.cache.fast_replay  # noqa: F401

        open_trace(path).close()
    elif mode == "python-records":
        for _ in open_trace(path):
            count += 1
    elif mode == "python-arrays":
        from bloomwise.cache.fast_replay import request_blocks

        for block in request_blocks(open_trace(path), 1):
            count += len(block.keys)
    elif mode == "compiled-arrays":
        for arrays in open_trace(path).record_arrays():
            count += len(arrays.keys)
    else:
        raise SystemExit(f"unknown --scale-child mode {mode!r}")
    print(count)


def _zstd_window_note(path: str) -> str:
    """What a .zst trace's frame asks the decoder to hold (part of every reader's peak RSS)."""
    if not path.endswith(".zst"):
        return ""
    import zstandard

    with open(path, "rb") as f:
        window = zstandard.get_frame_parameters(f.read(18)).window_size
    return (f"The trace's zstd frame declares a {window / 2 ** 20:.0f} MiB window, which the decoder holds whichever "
            f"reader reads it: it is most of the readers' peak RSS.")


def scale(name: str, out_dir: str | None) -> int:
    """--scale: read a fetched real csv trace three ways and replay it with 100 proxies (see the docstring)."""
    import json as json_module

    from measure import machine_line, run_meta, write_results

    path = fetched_path(name)
    if path is None:
        print(f"real trace {name} is not fetched: `bloomwise trace fetch {name}` fetches it", file=sys.stderr)
        return 1
    before = loadavg()
    me = [sys.executable, os.path.abspath(__file__), "--scale-child"]
    steps = {}
    for mode, label in (("imports", "start-up only: imports, the trace opened, nothing read"),
                        ("python-records", "Python reader: Request records"),
                        ("python-arrays", "Python reader + request_blocks: the replay's arrays"),
                        ("compiled-arrays", "compiled reader (record_arrays): the replay's arrays")):
        figures = in_child(me + [mode, path])
        figures["requests"] = int(figures.pop("output"))
        steps[label] = figures
        print(f"{label}: {figures}", file=sys.stderr)
    replay = in_child([sys.executable, "-m", "bloomwise", "simulate", "--trace", path, "--assign", "random",
                        "--proxies", str(SCALE_PROXIES), "--cache-size", SCALE_CACHE, "--policy", "none",
                        "--engine", "compiled", "--json", "-"])
    (row,) = json_module.loads(replay.pop("output"))
    replay.update(requests=row["requests"], hit_ratio=row["hit_ratio"], engine=row["engine"])
    passed = replay["cpu_s"] <= SCALE_REPLAY_LIMIT_S
    data = {"meta": run_meta(before, trace=name, path=path), "reading": steps, "replay": replay,
            "target": {"target": f"`none`, {SCALE_PROXIES} proxies, {name}, CPU time",
                       "limit": f"<= {SCALE_REPLAY_LIMIT_S} s", "measured": f"{replay['cpu_s']:.1f} s",
                       "status": "PASS" if passed else "FAIL"}}
    lines = [f"# Reading and replaying {name} at scale: {data['meta']['date']}", "",
             machine_line(data["meta"]), "",
             "Each step in a fresh process (peak RSS its own); CPU = user + system time of the process. "
             + _zstd_window_note(path), "",
             "| step | requests | wall s | CPU s | requests/s (CPU) | peak RSS MiB |", "|---|---:|---:|---:|---:|---:|"]
    for label, f in steps.items():
        lines.append(f"| {label} | {f['requests']:,} | {f['wall_s']:.1f} | {f['cpu_s']:.1f} | "
                     f"{f['requests'] / f['cpu_s']:,.0f} | {f['peak_rss_mib']:.0f} |")
    lines.append(f"| `bloomwise simulate --policy none --proxies {SCALE_PROXIES} --cache-size {SCALE_CACHE} "
                 f"--assign random --engine {replay['engine']}` (start-up, reading, replay) | "
                 f"{replay['requests']:,} | {replay['wall_s']:.1f} | {replay['cpu_s']:.1f} | "
                 f"{replay['requests'] / replay['cpu_s']:,.0f} | {replay['peak_rss_mib']:.0f} |")
    t = data["target"]
    lines += ["", "| target | limit | measured | status |", "|---|---|---|---|",
              f"| {t['target']} | {t['limit']} | {t['measured']} | {t['status']} |"]
    text = "\n".join(lines) + "\n"
    print(text)
    from pathlib import Path

    from measure import default_out
    write_results(Path(out_dir) if out_dir else default_out(False), "trace-scale", data, text)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--scale-child"]:
        _scale_child(argv[1], argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", nargs="?", const="twitter-cluster52-10m", metavar="NAME",
                        help="measure a fetched real trace at scale instead (default twitter-cluster52-10m)")
    parser.add_argument("--out", help="--scale: where the results go (default results/)")
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100k requests, 1 run")
    parser.add_argument("--json", help="write the raw figures here")
    args = parser.parse_args(argv)
    if args.scale:
        return scale(args.scale, args.out)
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
