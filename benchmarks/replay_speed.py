"""The compiled replay's speed targets: policy none against libCacheSim's LRU; summary and paradox with 16 proxies.

    python benchmarks/replay_speed.py            # 2,000,000 synthetic requests + the CloudPhysics trace, 3 runs
    python benchmarks/replay_speed.py --quick    # 200,000 synthetic requests, 1 run
    python benchmarks/replay_speed.py --scale    # 100 proxies over the 10M-request Twitter trace, every policy

Cooperative target (issue 30, section 4): ``summary`` and ``paradox`` with 16 proxies at >= 1,000,000 requests per
CPU second. The workload: the 1M-request Twitter trace (``twitter-cluster52``, fetched by ``bloomwise trace fetch``;
the 200,000 first with ``--quick``), 16 proxies by ``--assign random`` (seed 1), 2 MiB caches, 8 bits per entry,
threshold 1%, the documents' mean size estimated from the trace as ``bloomwise simulate`` does. Its records are read
and turned into the replay's arrays (keys' bytes included) first, untimed; the figure is the CPU time of the
compiled loop over those arrays (``fast_replay.cooperative_caches(...).replay``: lookups, summaries, routing,
publication), median of the runs. The whole ``replay()`` of the ``CsvTrace`` (reading by the compiled csv reader
included) is timed once beside it.

``--scale``: ``bloomwise simulate --trace twitter-cluster52-10m --assign random --proxies 100 --cache-size 2MiB
--policy P --engine compiled`` for each compiled policy, each in a fresh process: wall and CPU time (user + system)
and peak RSS (``wait4``), PASS when the CPU time is at most 2 minutes. Results: ``results/<date>-replay-scale-<cpu>``.

Target (issue 30, section 4): ``bloomwise simulate``'s policy ``none``, one proxy, LRU, at least the speed of
libCacheSim's LRU through its Python package (``libcachesim`` 0.3.5), in CPU time, on the same trace.

Both read the same libCacheSim oracleGeneral file from the start, so each figure includes reading the trace:
libCacheSim with ``TraceReader(path, ORACLE_GENERAL_TRACE)`` and ``LRU(size).process_trace(reader)``, bloomwise with
``replay(OracleGeneralTrace(path, "round-robin", 1), "none", config, engine="compiled")`` (the records read into
arrays, then the compiled loop). The traces: a synthetic one written for the run (Zipf(0.9) popularity over 200,000
objects, lognormal sizes with a median of 8 KB, seed 1) and, when fetched (``bloomwise trace fetch cloudphysics``),
the real CloudPhysics block trace (113,872 requests). Each configuration is timed in turns (libCacheSim, bloomwise,
then the other way round the next run) and the target is the median over the runs of the ratio within a run; the
miss ratios of the two must be equal, or the run stops. The Python engine (the reference) is timed once on the first
200,000 requests, for scale. The CPU's model and instruction set are recorded with the figures.
Results: ``results/<date>-replay-<cpu>.{md,json}``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import measure

from bloomwise.cache.fast_replay import CsvTrace, OracleGeneralTrace, cooperative_caches, request_blocks
from bloomwise.cache.simulation import SimulationConfig, estimate_mean_size, replay
from bloomwise.cache.store import AVERAGE_DOCUMENT_SIZE
from bloomwise.cache.traces import fetched_path

try:
    import libcachesim
except ImportError:  # the test extra is not installed: the figures say so
    libcachesim = None

PYTHON_ENGINE_REQUESTS = 200_000
LIMIT = 1.0  # bloomwise CPU time / libCacheSim CPU time
COOPERATIVE_PROXIES = 16
COOPERATIVE_POLICIES = ("summary", "paradox")
COOPERATIVE_LIMIT = 1_000_000  # requests per CPU second
COOPERATIVE_CACHE = 2 << 20
SCALE_TRACE = "twitter-cluster52-10m"
SCALE_PROXIES = 100
SCALE_CACHE = "2MiB"
SCALE_POLICIES = ("none", "icp", "summary", "paradox", "carp")
SCALE_LIMIT_S = 120.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=2_000_000, help="synthetic requests (default 2,000,000)")
    p.add_argument("--runs", type=int, default=3, help="runs (the target: median of the runs' ratios)")
    p.add_argument("--quick", action="store_true", help="200,000 synthetic requests, 1 run")
    p.add_argument("--out", type=Path, default=None, help="where the results go (default results/)")
    p.add_argument("--scale", action="store_true", help="100 proxies over the 10M-request Twitter trace instead")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.runs = 200_000, 1
    args.out = args.out or measure.default_out(args.quick)
    return args


def write_synthetic(path: Path, requests: int) -> None:
    """An oracleGeneral file: 24-byte records (time, object, size, next access), next access as libCacheSim's tools
    compute it (the 1-based number of the object's next request, -1 when none)."""
    rng = np.random.Generator(np.random.PCG64(1))
    objects = 200_000
    weights = np.arange(1, objects + 1, dtype=np.float64) ** -0.9
    ranks = rng.choice(objects, size=requests, p=weights / weights.sum())
    sizes = np.maximum(1, np.exp(rng.normal(9.0, 1.3, objects))).astype(np.int64)
    ids = ranks.astype(np.uint64) * np.uint64(7919) + np.uint64(12345)
    nexts = np.full(requests, -1, dtype=np.int64)
    order = np.argsort(ids, kind="stable")  # each object's requests in time order, objects one after the other
    same = ids[order][1:] == ids[order][:-1]
    nexts[order[:-1][same]] = order[1:][same] + 1
    record = np.dtype([("time", "<u4"), ("object", "<u8"), ("size", "<u4"), ("next", "<i8")])
    array = np.zeros(requests, dtype=record)
    array["time"], array["object"], array["size"], array["next"] = np.arange(requests) // 100, ids, sizes[ranks], nexts
    path.write_bytes(array.tobytes())


def libcachesim_run(path: Path, eviction: str, cache_size: int) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, miss ratio) of libCacheSim over the whole file."""
    started, wall = time.process_time(), time.perf_counter()
    reader = libcachesim.TraceReader(str(path), libcachesim.TraceType.ORACLE_GENERAL_TRACE)
    cache = {"lru": libcachesim.LRU, "fifo": libcachesim.FIFO}[eviction](cache_size)
    miss_ratio, _ = cache.process_trace(reader)
    return time.process_time() - started, time.perf_counter() - wall, miss_ratio


def bloomwise_run(path: Path, eviction: str, cache_size: int, engine: str = "compiled",
                  limit: int | None = None) -> tuple[float, float, float, int]:
    """(CPU seconds, wall seconds, miss ratio, requests) of bloomwise's replay of policy none over the file."""
    config = SimulationConfig(num_proxies=1, cache_size=cache_size, eviction=eviction)
    started, wall = time.process_time(), time.perf_counter()
    result = replay(OracleGeneralTrace(path, "round-robin", 1, limit=limit), "none", config, engine=engine)
    seconds, wall = time.process_time() - started, time.perf_counter() - wall
    assert result.engine == engine
    return seconds, wall, 1.0 - result.hit_ratio, result.requests


def cooperative_config(path: str, limit: int | None) -> SimulationConfig:
    mean = estimate_mean_size(CsvTrace(path, "random", COOPERATIVE_PROXIES, seed=1, limit=limit))
    return SimulationConfig(num_proxies=COOPERATIVE_PROXIES, cache_size=COOPERATIVE_CACHE, seed=1,
                            mean_document_size=mean or AVERAGE_DOCUMENT_SIZE)


def cooperative_targets(args) -> tuple[list[dict], list[dict]]:
    """The 16-proxy rows and targets (module docstring)."""
    path = fetched_path("twitter-cluster52")
    if path is None:
        target = {"target": f"summary and paradox, {COOPERATIVE_PROXIES} proxies: requests per CPU second",
                  "limit": f">= {COOPERATIVE_LIMIT:,}", "status": "N/A",
                  "measured": "not measured: `bloomwise trace fetch twitter-cluster52` fetches the trace"}
        return [], [target]
    limit = 200_000 if args.quick else None
    config = cooperative_config(path, limit)
    trace = CsvTrace(path, "random", COOPERATIVE_PROXIES, seed=1, limit=limit)
    blocks = list(request_blocks(trace, COOPERATIVE_PROXIES, names=True))
    requests = sum(len(block.keys) for block in blocks)
    rows, targets = [], []
    for policy in COOPERATIVE_POLICIES:
        seconds = []
        for _ in range(args.runs):
            caches = cooperative_caches(
                policy, num_proxies=config.num_proxies, cache_size=config.cache_size, eviction=config.eviction,
                origin_cost=config.origin_cost, peer_cost=config.peer_cost, summary_kind=config.kind_for(policy),
                bits_per_entry=config.bits_per_entry, expected_entries=config.entries, seed=config.seed,
                update_threshold=config.update_threshold, resize_tolerance=config.resize_tolerance,
                prior_window=config.prior_window, prior_estimator=config.prior_estimator)
            started = time.process_time()
            for block in blocks:
                caches.replay(block.keys, block.sizes, block.proxies, block.names, block.name_offsets,
                              block.url_lengths)
            seconds.append(time.process_time() - started)
        started = time.process_time()
        result = replay(trace, policy, config, engine="compiled")
        whole = time.process_time() - started
        rate = requests / statistics.median(seconds)
        rows.append({"policy": policy, "requests": requests, "loop_cpu_seconds": seconds,
                     "requests_per_cpu_second": rate, "replay_with_reading_cpu_seconds": whole,
                     "hit_ratio": result.hit_ratio, "remote_hit_ratio": result.remote_hit_ratio,
                     "summary_messages": result.summary_messages})
        print(f"{policy}, {COOPERATIVE_PROXIES} proxies: {rate:,.0f} requests per CPU second (loop); whole replay "
              f"with reading {whole:.2f} s CPU", file=sys.stderr)
        targets.append({"target": f"{policy}, {COOPERATIVE_PROXIES} proxies, twitter-cluster52: requests per CPU "
                                  "second of the compiled loop", "limit": f">= {COOPERATIVE_LIMIT:,}",
                        "measured": f"{rate:,.0f}", "status": "PASS" if rate >= COOPERATIVE_LIMIT else "FAIL"})
    return rows, targets


def scale(args) -> int:
    """--scale (module docstring)."""
    path = fetched_path(SCALE_TRACE)
    if path is None:
        print(f"real trace {SCALE_TRACE} is not fetched: `bloomwise trace fetch {SCALE_TRACE}` fetches it",
              file=sys.stderr)
        return 1
    load_before = measure.loadavg()
    rows, targets = [], []
    for policy in SCALE_POLICIES:
        figures = measure.in_child([sys.executable, "-m", "bloomwise", "simulate", "--trace", path, "--assign", "random",
                            "--seed", "1", "--proxies", str(SCALE_PROXIES), "--cache-size", SCALE_CACHE,
                            "--policy", policy, "--engine", "compiled", "--json", "-"])
        (row,) = json.loads(figures.pop("output"))
        figures.update(policy=policy, requests=row["requests"], hit_ratio=row["hit_ratio"], engine=row["engine"])
        rows.append(figures)
        print(f"{policy}: {figures}", file=sys.stderr)
        targets.append({"target": f"{policy}, {SCALE_PROXIES} proxies, {SCALE_TRACE}: CPU time of the whole run",
                        "limit": f"<= {SCALE_LIMIT_S:g} s", "measured": f"{figures['cpu_s']:.1f} s",
                        "status": "PASS" if figures["cpu_s"] <= SCALE_LIMIT_S else "FAIL"})
    data = {"meta": measure.run_meta(load_before, trace=SCALE_TRACE, proxies=SCALE_PROXIES, cache=SCALE_CACHE),
            "runs": rows, "targets": targets}
    return measure.finish(args.out, "replay-scale", data, scale_markdown)


def scale_markdown(data: dict) -> str:
    meta = data["meta"]
    lines = [f"# The compiled replay at scale: {SCALE_PROXIES} proxies over {SCALE_TRACE}: {meta['date']}", "",
             measure.machine_line(meta), "",
             f"`bloomwise simulate --trace {SCALE_TRACE} --assign random --seed 1 --proxies {SCALE_PROXIES} "
             f"--cache-size {SCALE_CACHE} --policy P --engine compiled`, each in a fresh process (start-up, reading "
             "the csv into the replay's arrays, replay); CPU = user + system time of the process, peak RSS from "
             "wait4.", "",
             "| policy | requests | hit ratio | wall s | CPU s | requests/s (CPU) | peak RSS MiB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in data["runs"]:
        lines.append(f"| {r['policy']} | {r['requests']:,} | {r['hit_ratio']:.4f} | {r['wall_s']:.1f} | "
                     f"{r['cpu_s']:.1f} | {r['requests'] / r['cpu_s']:,.0f} | {r['peak_rss_mib']:.0f} |")
    lines += ["", *measure.targets_table(data["targets"], "measured")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.scale:
        return scale(args)
    load_before = measure.loadavg()
    mach = measure.machine()
    print(f"CPU {mach['cpu']}, instruction set {mach['isa']}", file=sys.stderr)
    configurations = []
    with tempfile.TemporaryDirectory() as folder:
        synthetic = Path(folder) / f"synthetic-{args.requests}.oracleGeneral.bin"
        write_synthetic(synthetic, args.requests)
        traces = [("synthetic", synthetic, (64 << 20, 1 << 30))]
        real = fetched_path("cloudphysics")
        if real is not None and not args.quick:
            traces.append(("cloudphysics", Path(real), (1 << 20, 64 << 20)))
        for name, path, sizes in traces:
            for cache_size in sizes:
                for eviction in ("lru", "fifo"):
                    configurations.append(measure_one(args, name, path, eviction, cache_size))
        seconds, _, _, requests = bloomwise_run(synthetic, "lru", 64 << 20, engine="python",
                                             limit=PYTHON_ENGINE_REQUESTS)
        python = [{"trace": "synthetic", "requests": requests, "cpu_seconds": seconds,
                   "ns_per_request": seconds / requests * 1e9}]
    cooperative, cooperative_goals = cooperative_targets(args)
    rows = [c for c in configurations if c.get("eviction") == "lru"]
    ratios = [(f"{c['trace']} {c['cache_size'] >> 20} MiB", c["ratio_median"]) for c in rows if "ratio_median" in c]
    target = {"target": "none, one proxy, LRU: bloomwise CPU time / libCacheSim's (same trace, reading included)",
              "limit": f"<= {LIMIT:g}x", "instances": [{"where": w, "value": v} for w, v in ratios]}
    if not ratios:
        target.update(status="N/A", measured="not measured: libcachesim is not installed (pip install "
                                             "libcachesim==0.3.5, in the test extra)")
    else:
        where, worst = max(ratios, key=lambda item: item[1])
        within = sum(value <= LIMIT for _, value in ratios)
        target.update(status="PASS" if worst <= LIMIT else "FAIL",
                      measured=f"worst {worst:.3g}x ({where}); {within}/{len(ratios)} within")
    data = {"meta": measure.run_meta(load_before, requests=args.requests, runs=args.runs,
                                     instruction_set=mach["isa"]),
            "configurations": configurations, "python_engine": python, "cooperative": cooperative,
            "targets": [target, *cooperative_goals]}
    return measure.finish(args.out, "replay", data, markdown)


def measure_one(args, name: str, path: Path, eviction: str, cache_size: int) -> dict:
    row = {"trace": name, "eviction": eviction, "cache_size": cache_size, "bloomwise": [], "libcachesim": [],
           "bloomwise_wall": [], "libcachesim_wall": []}
    if libcachesim is None:
        seconds, wall, miss, requests = bloomwise_run(path, eviction, cache_size)
        row.update(bloomwise=[seconds], bloomwise_wall=[wall], requests=requests, miss_ratio=miss)
        return row
    ratios = []
    for run in range(args.runs):
        first_bloomwise = run % 2 == 1  # alternate who goes first, so load changes fall on both
        if first_bloomwise:
            ours, our_wall, our_miss, requests = bloomwise_run(path, eviction, cache_size)
            theirs, their_wall, their_miss = libcachesim_run(path, eviction, cache_size)
        else:
            theirs, their_wall, their_miss = libcachesim_run(path, eviction, cache_size)
            ours, our_wall, our_miss, requests = bloomwise_run(path, eviction, cache_size)
        if abs(our_miss - their_miss) > 1e-12:
            raise SystemExit(f"{name} {eviction} {cache_size}: miss ratios differ: bloomwise {our_miss!r}, "
                             f"libCacheSim {their_miss!r}")
        row["bloomwise"].append(ours)
        row["libcachesim"].append(theirs)
        row["bloomwise_wall"].append(our_wall)
        row["libcachesim_wall"].append(their_wall)
        ratios.append(ours / theirs)
        print(f"{name} {eviction} {cache_size >> 20} MiB run {run + 1}/{args.runs}: bloomwise {ours:.3f} s, "
              f"libCacheSim {theirs:.3f} s CPU ({ours / theirs:.2f}x); miss ratio {our_miss:.6f}", file=sys.stderr)
    row.update(requests=requests, miss_ratio=our_miss, ratios=ratios, ratio_median=statistics.median(ratios),
               bloomwise_ns=statistics.median(row["bloomwise"]) / requests * 1e9,
               libcachesim_ns=statistics.median(row["libcachesim"]) / requests * 1e9,
               wall_ratio_median=statistics.median(a / b for a, b in zip(row["bloomwise_wall"],
                                                                          row["libcachesim_wall"])))
    return row


def markdown(data: dict) -> str:
    meta = data["meta"]
    lines = [f"# Replay speed, one proxy: bloomwise's compiled `none` against libCacheSim: {meta['date']}", "",
             measure.machine_line(meta) + f" Instruction set: {meta['instruction_set']}.", "",
             f"CPU time of a whole replay, reading the oracleGeneral file included; medians of {meta['runs']} "
             f"run(s); same miss ratio checked every run.", "",
             "| trace | eviction | cache | requests | miss ratio | bloomwise ns/request | libCacheSim ns/request "
             "| bloomwise / libCacheSim (CPU) | (wall) |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for c in data["configurations"]:
        if "ratio_median" not in c:
            lines.append(f"| {c['trace']} | {c['eviction']} | {c['cache_size'] >> 20} MiB | {c['requests']:,} | "
                         f"{c['miss_ratio']:.6f} | {c['bloomwise'][0] / c['requests'] * 1e9:.0f} | - | - | - |")
            continue
        lines.append(f"| {c['trace']} | {c['eviction']} | {c['cache_size'] >> 20} MiB | {c['requests']:,} | "
                     f"{c['miss_ratio']:.6f} | {c['bloomwise_ns']:.0f} | {c['libcachesim_ns']:.0f} | "
                     f"{c['ratio_median']:.2f}x | {c['wall_ratio_median']:.2f}x |")
    for p in data["python_engine"]:
        lines += ["", f"For scale, the Python engine (the reference) on the first {p['requests']:,} synthetic "
                      f"requests, LRU, 64 MiB: {p['ns_per_request']:.0f} ns/request."]
    if data.get("cooperative"):
        lines += ["", f"Cooperative policies, {COOPERATIVE_PROXIES} proxies, twitter-cluster52 (`--assign random`, "
                      f"seed 1), {COOPERATIVE_CACHE >> 20} MiB caches, 8 bits per entry, threshold 1%: CPU time of "
                      "the compiled loop over the trace's arrays (made beforehand), median of the runs; and of the "
                      "whole `replay()` of the csv trace, its reading included, once.", "",
                  "| policy | requests | hit ratio | remote hit ratio | loop: requests per CPU second | "
                  "whole replay with reading, CPU s |", "|---|---:|---:|---:|---:|---:|"]
        for r in data["cooperative"]:
            lines.append(f"| {r['policy']} | {r['requests']:,} | {r['hit_ratio']:.4f} | {r['remote_hit_ratio']:.4f} "
                         f"| {r['requests_per_cpu_second']:,.0f} | {r['replay_with_reading_cpu_seconds']:.2f} |")
    lines += ["", *measure.targets_table(data["targets"], "measured (median of the runs)")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
