"""bloomwise against its peers, in one run over the same keys; writes benchmarks/results/ and checks the targets.

    python benchmarks/run.py                 # the full suite (~30 min on 2 cores; see benchmarks/README.md)
    python benchmarks/run.py --quick         # 100k keys, 1 run (<1 min): development and CI smoke
    python benchmarks/run.py --only str-key,numpy --sizes 1M --runs 3
    python benchmarks/run.py --only numpy --sizes 10M --libs bloomwise --kernels avx2+avx512,avx2

The numpy workloads run under every SIMD kernel set the CPU has (--kernels): bloomwise's rows of each set sit side
by side in one table, each tagged with its kernel set.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import adapters
import measure
import report
import targets
import workloads

WARM_UP = 10_000  # keys
OPS = ("add", "query_present", "query_absent", "batch_add_cold", "batch_add", "batch_query_cold", "batch_query",
       "batch_query_absent")
CPU_OPS = ("batch_add", "batch_query")  # also timed in process CPU time: "<op>_cpu", ns per key


def parse_size(text: str) -> int:
    """"100k", "1M", "10M" or a plain number."""
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="100k keys, 1 run, a 64 MiB 'large' filter: for development and CI smoke (<1 min)")
    p.add_argument("--sizes", default=None, help="key counts of the str/int workloads, e.g. 1M,10M (default); "
                   "the numpy and large-filter workloads use the largest")
    p.add_argument("--only", default=None, help="keep workloads whose name contains one of these words, "
                   "e.g. str-key,numpy (names: str-key-N, str-url-N, int-N, numpy-u64-N, large-1GiB)")
    p.add_argument("--libs", default=None, help="keep libraries whose name contains one of these words, "
                   "e.g. bloomwise,rbloom")
    p.add_argument("--threads", default="1,2", help="thread counts for bloomwise's blocked batch calls on numpy "
                   "keys (threads= argument); 1 is the default call (default: 1,2)")
    p.add_argument("--fpr", default="0.01,0.001", help="target false-positive rates (default: 0.01,0.001)")
    p.add_argument("--runs", type=int, default=None, help="runs per figure, reported as the median with min and "
                   "max (default 3; 1 with --quick)")
    p.add_argument("--large", default=None, help="bytes of the large filter, e.g. 1GiB (default), 256MiB")
    p.add_argument("--out", type=Path, default=None, help="directory for the results (default: "
                   "benchmarks/results, or benchmarks/results/quick with --quick)")
    p.add_argument("--kernels", default="auto", help="bloomwise kernel sets, comma-separated (avx2+avx512, avx2, "
                   "scalar): the first is that of every workload, the others run bloomwise again on the numpy "
                   "workloads, their rows tagged [set]; auto (default): every SIMD set this CPU runs, best first")
    p.add_argument("--same-process", action="store_true", help="run every workload in this process (default: "
                   "each workload in a fresh interpreter, so no workload inherits another's heap and page state)")
    p.add_argument("--worker", metavar="WORKLOAD", help=argparse.SUPPRESS)  # internal: run one workload...
    p.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)       # ...and write its results here
    p.add_argument("--worker-kernels", help=argparse.SUPPRESS)  # ...bloomwise only, rows tagged with this set
    return p.parse_args(argv)


def kernel_plan(text: str) -> list[str]:
    """The kernel sets of a run, its primary one first (--kernels); SystemExit naming the choices otherwise."""
    available = measure.kernel_sets()
    if text.strip().lower() == "auto":
        return [k for k in available if k != "scalar"] or ["scalar"]
    wanted = [k.strip().lower() for k in text.split(",") if k.strip()]
    bad = [k for k in wanted if k not in available]
    if bad or not wanted:
        raise SystemExit(f"--kernels {text!r}: this CPU runs {', '.join(available)} (or auto)")
    return list(dict.fromkeys(wanted))


def tagged(name: str, kernels: str) -> str:
    """A library's row name in a run of another kernel set than the primary one: "bloomwise blocked [avx2]"."""
    return f"{name} [{kernels}]"


def extra_kernel_workload(w: workloads.Workload) -> bool:
    """Whether bloomwise runs ``w`` again under the run's other kernel sets: the numpy (uint64 array) workloads."""
    return w.kind == "u64"


def parse_bytes(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
    for unit, scale in units.items():
        if text.lower().endswith(unit):
            return int(float(text[: -len(unit)]) * scale)
    return int(text)


def capacity_for(a: adapters.Adapter, w: workloads.Workload, fpr: float) -> int:
    """Keys to ask for: ``w.n``, or for a large filter the capacity that makes the library's filter
    ``w.filter_bytes`` long (from its bits per key at 1M capacity)."""
    if w.filter_bytes is None:
        return w.n
    probe = 1_000_000
    return round(w.filter_bytes * 8 * probe / a.bits(a.new(probe, fpr, w.kind)))


def _count(answer) -> int:
    """Positive answers in a batch query's result (an int, a numpy bool array or a list of bools)."""
    if isinstance(answer, int):
        return answer
    return int(sum(answer)) if isinstance(answer, list) else int(answer.sum())


def fresh(keys):
    """New str objects equal to ``keys`` (other key types unchanged).

    Python caches a str's hash in the object, so a library built on ``hash()`` (rbloom) would hash nothing
    when the same objects come back in the next operation or run, while a persistable hash must hash every
    time. Keys that arrive from outside (files, sockets, parsers) are new objects: every str operation is timed
    on new objects, made before the timer starts.
    """
    if isinstance(keys, list) and keys and isinstance(keys[0], str):
        return [k.encode().decode() for k in keys]
    return keys


def run_once(a: adapters.Adapter, w: workloads.Workload, keys, absent, fpr: float, capacity: int,
             rss: measure.PeakRSS | None) -> dict:
    """One run of every operation ``a`` has on ``w``: ns per key, bits, peak memory (if ``rss``), false
    negatives, false positives; errors per operation. Single-key queries ask the first ``w.n_absent`` present
    keys."""
    out: dict = {"errors": {}, "false_negatives": 0}

    def op(name, fn, f, ks):
        ks = fresh(ks)  # outside the timer
        try:
            cpu0 = time.process_time_ns()
            ns, answer = measure.timed(fn, f, ks, w.kind)
            cpu = time.process_time_ns() - cpu0
        except Exception as e:  # noqa: BLE001 - an API still being written must not stop the run
            out["errors"][name] = f"{type(e).__name__}: {e}"
            return None
        out[name] = ns / len(ks)
        if name in CPU_OPS:  # the work, whatever share of the cores the process got (all its threads)
            out[name + "_cpu"] = cpu / len(ks)
        return answer

    def queries(f, fn, present, present_name, absent_name, count=None):
        """Time fn over the present, then the absent keys; count the positive answers: in fn's result (batch
        queries), or, for single-key loops that discard them, with ``count`` in a second pass, untimed."""
        for name, ks in ((present_name, present), (absent_name, absent)):
            answer = op(name, fn, f, ks)
            if name in out["errors"]:
                continue
            hits = _count(answer) if count is None else count(f, fresh(ks), w.kind)
            if name == present_name:
                out["false_negatives"] = max(out["false_negatives"], len(ks) - hits)
            else:
                out.setdefault("false_positives", hits)

    if not w.batch_only:
        f = a.new(capacity, fpr, w.kind)
        op("add", a.add_each, f, keys)
        queries(f, a.query_each, keys[:w.n_absent], "query_present", "query_absent", count=a.count_each)
        out["bits"] = a.bits(f)
        del f
    base = rss.start() if rss else None
    f = a.new(capacity, fpr, w.kind)
    if w.filter_bytes:  # a large filter: the first pass pays the page faults, the second is measured apart
        op("batch_add_cold", a.add_batch, f, keys)
        out["peak_bytes"] = rss and rss.peak_since(base)
    op("batch_add", a.add_batch, f, keys)
    if not w.filter_bytes:
        out["peak_bytes"] = rss and rss.peak_since(base)
    out["bits"] = a.bits(f)
    if a.batch_query is not None:
        if w.filter_bytes:  # the first call also pays the first touch of its fresh result (as for the floor's
            op("batch_query_cold", a.batch_query, f, keys)  # output, written once before it is timed)
        queries(f, a.batch_query, keys, "batch_query", "batch_query_absent")
    del f
    return out


def aggregate(runs: list[dict], w: workloads.Workload, capacity: int) -> dict:
    """Medians (with min and max) over the runs, measured FPR, false negatives, bits per key, memory."""
    first = runs[0]
    rec: dict = {"capacity": capacity, "errors": {k: v for r in runs for k, v in r["errors"].items()},
                 "false_negatives": max(r["false_negatives"] for r in runs)}
    for name in OPS + tuple(op + "_cpu" for op in CPU_OPS):
        values = [r[name] for r in runs if name in r]
        if values:
            rec[name] = measure.summary(values)
    if "false_positives" in first:
        rec["fpr"] = first["false_positives"] / w.n_absent
    if "bits" in first:
        rec["filter_mib"] = first["bits"] / 8 / 2**20
        if w.filter_bytes is None:
            rec["bits_per_key"] = first["bits"] / w.n
    peaks = [r["peak_bytes"] for r in runs if r.get("peak_bytes") is not None]
    if peaks:
        rec["peak_mib"] = max(peaks) / 2**20
    return rec


def runs_on(a: adapters.Adapter, w: workloads.Workload, first_fpr: bool) -> bool:
    """Whether ``a`` takes part in ``w`` at an FPR: the threads= rows on numpy keys only; ``set`` (no size,
    no FPR) once per workload, and not on the large filter."""
    if a.numpy_only and w.kind != "u64":
        return False
    return a.sized or (first_fpr and w.filter_bytes is None)


def run_workload(w: workloads.Workload, libs: list[adapters.Adapter], fprs: list[float], runs: int,
                 rss: measure.PeakRSS) -> dict:
    """All libraries on one workload; the runs are the outer loop so that noise hits every library alike."""
    t0 = time.perf_counter()
    keys, absent = w.keys()
    print(f"\n== {w.name}: {w.n:,} keys, {w.n_absent:,} absent (generated in {time.perf_counter() - t0:.1f} s)",
          flush=True)
    results: dict = {}
    for i, fpr in enumerate(fprs[:1] if w.first_fpr_only else fprs):
        group = [a for a in libs if runs_on(a, w, first_fpr=i == 0)]
        cell = results[str(fpr)] = {}
        raw: dict[str, list] = {a.name: [] for a in group}
        capacity: dict[str, int] = {}
        for a in group:
            if a.error:
                cell[a.name] = {"unavailable": a.error}
                continue
            try:
                capacity[a.name] = capacity_for(a, w, fpr)
            except Exception as e:  # noqa: BLE001
                cell[a.name] = {"unavailable": f"{type(e).__name__}: {e}"}
        live = [a for a in group if a.name not in cell]
        for a in live:  # warm-up, not recorded: first calls, lazy imports (bloomwise imports numpy lazily)
            try:
                run_once(a, w, keys[:WARM_UP], absent[:WARM_UP], fpr, WARM_UP, None)
            except Exception:  # noqa: BLE001 - reported by the measured runs
                pass
        for r in range(runs):
            for a in live:
                try:
                    raw[a.name].append(run_once(a, w, keys, absent, fpr, capacity[a.name], rss))
                except Exception as e:  # noqa: BLE001 - e.g. the constructor itself fails
                    cell[a.name] = {"unavailable": f"{type(e).__name__}: {e}"}
            live = [a for a in live if a.name not in cell]
            print(f"   fpr {fpr:g}: run {r + 1}/{runs} done ({time.perf_counter() - t0:.0f} s)", flush=True)
        for a in live:
            cell[a.name] = aggregate(raw[a.name], w, capacity[a.name])
            if isinstance(a, adapters.Bloomwise):
                cell[a.name]["kernels"] = measure.bloomwise_kernels()
        print(report.console_rows(cell), flush=True)
    return results


def run_isolated(w: workloads.Workload, argv, kernels: str, primary: bool) -> dict:
    """One workload in a fresh interpreter (this script with --worker) under a kernel set ($BLOOMWISE_KERNELS),
    its output streamed through; not the primary set: bloomwise only, its rows tagged."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        command = [sys.executable, str(Path(__file__).resolve())] + list(argv) + ["--worker", w.name,
                                                                                  "--worker-out", str(out)]
        if not primary:
            command += ["--worker-kernels", kernels]
        done = subprocess.run(command, env={**os.environ, "BLOOMWISE_KERNELS": kernels})
        if done.returncode != 0:
            raise SystemExit(f"workload {w.name} ({kernels} kernels) failed (exit {done.returncode})")
        return json.loads(out.read_text())


def only_bloomwise(libs: list[adapters.Adapter], kernels: str) -> list[adapters.Adapter]:
    """The bloomwise adapters, renamed with their kernel set tag (a run of another set than the primary one)."""
    out = [a for a in libs if isinstance(a, adapters.Bloomwise)]
    for a in out:
        a.name = tagged(a.name, kernels)
    return out


def run_worker(args, libs, plan, runs) -> int:
    [w] = [w for w in plan if w.name == args.worker]
    fprs = [float(x) for x in args.fpr.split(",")]
    if args.worker_kernels:
        libs = only_bloomwise(libs, args.worker_kernels)
    results = run_workload(w, libs, fprs, runs, measure.PeakRSS())
    args.worker_out.write_text(json.dumps(results))
    return 0


def merge_kernel_sets(primary: dict, others: list[dict]) -> dict:
    """One workload's tables: per FPR, the primary run's bloomwise rows, then those of the other kernel sets,
    then the peers."""
    merged = {}
    for fpr, cell in primary.items():
        rows = list(cell.items())
        extra = [(name, rec) for other in others for name, rec in other.get(fpr, {}).items()]
        ours = [(n, r) for n, r in rows if n.startswith("bloomwise")]
        merged[fpr] = dict(ours + extra + [(n, r) for n, r in rows if not n.startswith("bloomwise")])
    return merged


def run_all(plan, argv, args, make_libs, fprs, runs, kernel_sets: list[str]) -> dict:
    """Every workload under the primary kernel set, the numpy ones under the others too (bloomwise only)."""
    results = {}
    for w in plan:
        extra_sets = kernel_sets[1:] if extra_kernel_workload(w) else []
        if args.same_process:  # the kernel set switched in this process (bloomwise's private switch)
            measure.use_kernels(kernel_sets[0])
            primary = run_workload(w, make_libs(), fprs, runs, measure.PeakRSS())
            others = []
            for kernels in extra_sets:
                measure.use_kernels(kernels)
                others.append(run_workload(w, only_bloomwise(make_libs(), kernels), fprs, runs, measure.PeakRSS()))
            measure.use_kernels(kernel_sets[0])
        else:
            primary = run_isolated(w, argv, kernel_sets[0], primary=True)
            others = [run_isolated(w, argv, kernels, primary=False) for kernels in extra_sets]
        results[w.name] = merge_kernel_sets(primary, others)
    return results


def main(argv=None) -> int:
    argv = list(argv) if argv is not None else sys.argv[1:]
    args = parse_args(argv)
    started = time.perf_counter()
    sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else ([100_000] if args.quick
                                                                               else [1_000_000, 10_000_000])
    runs = args.runs or (1 if args.quick else 3)
    large = parse_bytes(args.large) if args.large else (64 << 20 if args.quick else 1 << 30)
    fprs = [float(x) for x in args.fpr.split(",")]
    threads = sorted({int(t) for t in args.threads.split(",")})
    out_dir = args.out or Path(__file__).parent / "results" / ("quick" if args.quick else "")

    def make_libs():
        libs = adapters.all_adapters(threads)
        return [a for a in libs if any(word in a.name for word in args.libs.split(","))] if args.libs else libs

    libs = make_libs()
    plan = workloads.plan(sizes, large, args.only.split(",") if args.only else None)
    if args.worker:
        return run_worker(args, libs, plan, runs)
    kernel_sets = kernel_plan(args.kernels)
    meta = {
        "date": datetime.date.today().isoformat(),
        "command": " ".join([Path(sys.argv[0]).name] + argv), "isolated": not args.same_process,
        "quick": args.quick, "runs": runs, "sizes": sizes, "fprs": fprs, "threads": threads,
        "machine": measure.machine(), "load_before": measure.loadavg(),
        "versions": {a.dist: (a.version() if not a.error else f"unavailable ({a.error})")
                     for a in libs if a.dist},
        "workloads": [w.name for w in plan], "libraries": [a.name for a in libs],
        "peers": [a.name for a in libs if a.peer],
        "batch_kernels": kernel_sets[0],
        "kernel_sets": kernel_sets,  # the first: every workload; the others: numpy workloads, rows tagged [set]
    }
    meta["kernels"] = meta["batch_kernels"]
    print(f"bloomwise benchmarks: {meta['machine']['cpu']}, Python {meta['machine']['python']}, "
          f"numpy {meta['machine']['numpy']}; load {meta['load_before']}", flush=True)
    for a in libs:
        if a.error:
            print(f"   {a.name}: unavailable ({a.error})")

    # The floor first: random cache-line reads at the sizes the large-filter figures are compared with.
    floor_bytes = sorted({16 << 20, 128 << 20, large})
    reads = 1_000_000 if args.quick else 10_000_000
    floor = {workloads.size_label(b): measure.floor_ns_per_read(b, reads, max(runs, 3)) for b in floor_bytes}
    print("floor, ns per random read: " + ", ".join(f"{k} {v['median']:.1f}" for k, v in floor.items()),
          flush=True)

    import_runs = 3 if args.quick else 7
    statements = ["import bloomwise"] + list(dict.fromkeys(a.import_stmt for a in libs if a.dist)) \
        + ["import numpy"]
    imports = {s: measure.import_ms(s, import_runs) for s in statements}
    print("import, ms: " + ", ".join(f"{s!r} {v['median']:.1f}" if isinstance(v, dict) else f"{s!r} {v}"
                                     for s, v in imports.items()), flush=True)

    results = run_all(plan, argv, args, make_libs, fprs, runs, kernel_sets)
    rss_ok = measure.PeakRSS().ok

    meta["load_after"] = measure.loadavg()
    meta["wall_s"] = time.perf_counter() - started
    meta["peak_memory_method"] = ("rise of VmHWM (reset via /proc/self/clear_refs, after malloc_trim) while the "
                                  "filter is created and filled by one batch insert, in the workload's process"
                                  if rss_ok else "unavailable")
    data = {"meta": meta, "floor_ns": floor, "import_ms": imports, "results": results,
            "workloads": {w.name: {"kind": w.kind, "n": w.n, "n_absent": w.n_absent,
                                   "filter_bytes": w.filter_bytes} for w in plan}}
    data["targets"] = [{"kernels": kernel_sets[0], **row} for row in targets.check(data)]
    data["targets"] += targets.check_threads_by_kernel_set(data)
    paths = report.write(data, out_dir)
    print("\n" + report.targets_text(data["targets"]))
    print(f"\nwrote {', '.join(str(p) for p in paths)} in {meta['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
