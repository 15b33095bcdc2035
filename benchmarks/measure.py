"""Measuring: timed calls, peak memory, the machine's random-access floor, import time, the machine itself."""
from __future__ import annotations

import ctypes
import gc
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def timed(fn, *args) -> tuple[int, object]:
    """(nanoseconds, result) of one call, with the cyclic GC off (as ``timeit`` does)."""
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        result = fn(*args)
        return time.perf_counter_ns() - t0, result
    finally:
        gc.enable()


def fresh(keys: list[str]) -> list[str]:
    """New str objects equal to keys (nothing cached in them yet, as a caller's new keys would be)."""
    return [(k + ".")[:-1] for k in keys]


def loop_in(f, keys):
    for k in keys:
        k in f  # noqa: B015


def loop_call(fn, keys):
    for k in keys:
        fn(k)


def cpu_timed(fn, arg) -> int:
    """CPU nanoseconds of this thread for one call, with the cyclic GC off: time spent descheduled while other
    processes run on this shared machine is not counted (their effect on the caches is)."""
    gc.disable()
    try:
        t0 = time.thread_time_ns()
        fn(arg)
        return time.thread_time_ns() - t0
    finally:
        gc.enable()


def interleaved(calls: dict, items, n: int, fresh_str: bool) -> dict[str, float]:
    """ns/key (CPU time) of each call over the same items, taken in slices of n/20 (at least 5,000 keys) in turn,
    the first to go rotating, so that a burst of load falls on every side alike. ``calls[name](slice)``; str slices
    are new objects for every call (made outside the timing)."""
    totals = dict.fromkeys(calls, 0)
    step = max(5000, n // 20)
    for i, start in enumerate(range(0, n, step)):
        for name in in_turn(list(calls), i):
            part = items[start:start + step]
            if fresh_str:
                part = fresh(part)
            totals[name] += cpu_timed(calls[name], part)
    return {name: total / n for name, total in totals.items()}


def in_turn(names: list, i: int) -> list:
    """Turn i's order: the names rotated by i, so that each goes first in turn."""
    return names[i % len(names):] + names[:i % len(names)]


def batches_in_turn(calls: dict, n: int, repeats: int = 5) -> dict[str, float]:
    """Query batches (they change nothing, so they can be repeated) timed in turns: ``calls[name] = (fn, keys)``,
    each called ``repeats`` times, one call of each in turn with the first to go rotating, so that a burst of load
    on this shared machine falls on every side alike; each figure is the median of its calls (ns/key)."""
    times = {name: [] for name in calls}
    for r in range(repeats):
        for name in in_turn(list(calls), r):
            fn, keys = calls[name]
            times[name].append(timed(fn, keys)[0])
    return {name: statistics.median(t) / n for name, t in times.items()}


def summary(values: list[float]) -> dict:
    """Median, min and max of a figure's runs."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


class PeakRSS:
    """Peak resident memory of this process since a reset (Linux: VmHWM, reset via /proc/self/clear_refs).

    Counts the pages a build touches, whoever allocates them (Python, numpy, Rust, C), which tracemalloc
    cannot see. Before each reset, glibc's ``malloc_trim`` hands the free heap back to the kernel, so that
    memory freed by an earlier run is counted again when it is reused.
    """

    def __init__(self):
        try:
            self._reset()
            self.ok = True
        except OSError:
            self.ok = False
        try:
            self._trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):  # not glibc: reused memory may go uncounted
            self._trim = lambda pad: 0

    @staticmethod
    def _reset():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    @staticmethod
    def _status(field: str) -> int:
        with open("/proc/self/status") as f:
            return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1)) * 1024

    def start(self) -> int | None:
        """Reset the peak; returns the baseline for :meth:`peak_since`."""
        if not self.ok:
            return None
        gc.collect()
        self._trim(0)
        self._reset()
        return self._status("VmRSS")

    def peak_since(self, base: int | None) -> int | None:
        return None if base is None else self._status("VmHWM") - base


def floor_ns_per_read(nbytes: int, reads: int, runs: int) -> dict:
    """Independent random 8-byte reads (one cache line each) over an array of ``nbytes``: a numpy gather,
    ns per read. This is what a batch kernel that touches one cache line per key cannot beat.
    numpy asks for transparent huge pages on large arrays (madvise), as bloomwise does."""
    a = np.ones(nbytes // 8, dtype=np.uint64)  # written, so every page is resident
    idx = np.random.default_rng(12345).integers(0, a.size, size=reads, dtype=np.intp)
    out = np.empty(reads, dtype=np.uint64)
    gather = lambda: a.take(idx, out=out, mode="clip")  # noqa: E731 ("raise" would buffer the output)
    gather()  # warm-up: page tables, TLB
    return summary([timed(gather)[0] / reads for _ in range(runs)])


_IMPORT_SNIPPET = "import time; t = time.perf_counter(); {}; print(time.perf_counter() - t)"


def import_ms(statement: str, runs: int) -> dict | str:
    """Milliseconds to run ``statement`` in a fresh interpreter (start-up itself excluded), after one
    discarded warm-up run (bytecode caches, disk cache). Returns the error text if it fails."""
    times = []
    # As users run it: with bytecode caches (some environments set PYTHONDONTWRITEBYTECODE, which makes every
    # import recompile its source).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for i in range(runs + 1):
        p = subprocess.run([sys.executable, "-c", _IMPORT_SNIPPET.format(statement)],
                           capture_output=True, text=True, timeout=120, env=env)
        if p.returncode:
            return (p.stderr.strip().splitlines() or ["failed"])[-1]
        if i:
            times.append(float(p.stdout) * 1e3)
    return summary(times)


def in_child(argv: list[str]) -> dict:
    """Run ``argv`` as a child process (PYTHONPATH = this interpreter's path): its wall and CPU seconds (user +
    system), its peak RSS in MiB (from ``wait4``), its standard output. A failing child ends the benchmark."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        text = out.read().decode()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(argv)} failed with status {os.waitstatus_to_exitcode(status)}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024,
            "output": text}


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def machine() -> dict:
    """What the figures depend on: CPU, caches, huge pages, kernel, load."""
    cpuinfo = _read("/proc/cpuinfo")

    def field(name):
        m = re.search(rf"^{name}\s*:\s*(.*)$", cpuinfo, re.M)
        return m.group(1).strip() if m else "?"

    caches = []
    base = "/sys/devices/system/cpu/cpu0/cache"
    for index in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if not index.startswith("index"):
            continue
        kind = _read(f"{base}/{index}/type")
        if kind != "Instruction":
            caches.append(f"L{_read(f'{base}/{index}/level')} {_read(f'{base}/{index}/size')}")
    thp = re.search(r"\[(\w+)\]", _read("/sys/kernel/mm/transparent_hugepage/enabled"))
    return {
        "cpu": field("model name") if cpuinfo else platform.processor() or "?",
        "cpu_id": f"family {field('cpu family')} model {field('model')} stepping {field('stepping')}",
        "cpus": os.cpu_count(),
        "caches": ", ".join(caches),
        "avx512": "avx512f" in field("flags").split(),
        "isa": _instruction_set(field("flags").split()),
        "thp": thp.group(1) if thp else "?",
        "kernel": platform.release(),
        "host": platform.node(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def bloomwise_kernels() -> str:
    """Which batch kernels bloomwise uses in this process ("avx2+avx512", "avx2" or "scalar")."""
    try:
        from bloomwise._native.bloom import batch_kernels
    except ImportError as e:
        return f"unavailable ({e})"
    return batch_kernels()


def kernel_sets() -> list[str]:
    """The kernel sets bloomwise can run on this CPU, best first ($BLOOMWISE_KERNELS picks one per process)."""
    try:
        from bloomwise._native.bloom import kernel_sets as sets
    except ImportError:
        return ["scalar"]
    return list(sets())


def use_kernels(name: str) -> None:
    """Switch bloomwise's kernel set in this process (its private switches; --same-process runs): the same as
    starting the process with BLOOMWISE_KERNELS=name, as far as that set goes (it cannot exceed the import's)."""
    from bloomwise._native import bloom, hashes
    bloom._use_simd(name != "scalar")
    hashes._use_simd512(name == "avx2+avx512")
    if bloom.batch_kernels() != name:
        raise SystemExit(f"cannot switch to the {name} kernels in this process (it runs {bloom.batch_kernels()}; "
                         "started with BLOOMWISE_KERNELS?)")


def loadavg() -> str:
    return " ".join(_read("/proc/loadavg").split()[:3])


# ---- what every benchmark script writes ------------------------------------------------------------------------------
def default_out(quick: bool) -> Path:
    """Where a script's results go unless --out says: results/, or results/quick/ (not committed) with --quick."""
    results = Path(__file__).resolve().parent / "results"
    return results / "quick" if quick else results


def run_meta(load_before: str, **extra) -> dict:
    """The "meta" of a result: the machine, bloomwise's kernel set, the load average before and now, the date and
    the command line, and the script's own fields."""
    import datetime as dt
    return {"machine": machine(), "kernels": bloomwise_kernels(), **extra, "load_before": load_before,
            "load_after": loadavg(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv)}


def machine_line(meta: dict) -> str:
    """One line of a report: CPU, kernel set, Python and numpy, the load average around the run."""
    mach = meta["machine"]
    return (f"CPU {mach['cpu']} ({mach['cpus']} CPUs; AVX-512: {'yes' if mach['avx512'] else 'no'}); bloomwise "
            f"kernels: {meta['kernels']}; Python {mach['python']}, numpy {mach['numpy']}; load average before "
            f"{meta['load_before']}, after {meta['load_after']}.")


def _instruction_set(flags: list[str]) -> str:
    """The widest vector set bloomwise's kernels use on this CPU: avx512, avx2, or the architecture's name."""
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else platform.machine().lower() or "cpu"


def cpu_slug(mach: dict | None = None) -> str:
    """The CPU's part of a result's file name: model and instruction set ("amd-epyc-avx2"), so that runs on one
    model name with different vector units (a cloud "AMD EPYC" may be a Zen 3 or a Zen 4) keep separate files."""
    mach = mach or machine()
    model = re.sub(r"[^a-z0-9]+", "-", mach["cpu"].lower()).strip("-")[:40]
    isa = mach.get("isa") or ("avx512" if mach.get("avx512") else "")
    return f"{model}-{isa}" if isa else model


def write_results(out, name: str, data: dict, text: str):
    """``<out>/<date>-<name>-<cpu>.md`` (the report) and ``.json`` (every figure); returns the common stem."""
    import datetime as dt
    import json
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{dt.date.today().isoformat()}-{name}-{cpu_slug()}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1))
    return stem


def keys_runs_args(doc: str, argv, runs: int = 3, runs_help: str = "runs (medians over them)"):
    """The options of a script measured over N keys and a few runs: --keys, --runs, --quick (100k keys, 1 run),
    --out (default_out); the parsed arguments, with --quick and the default folder applied."""
    import argparse
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=runs, help=runs_help)
    p.add_argument("--quick", action="store_true", help="100k keys, 1 run")
    p.add_argument("--out", type=Path, default=None, help="where the results go (default results/, "
                   "results/quick/ with --quick)")
    args = p.parse_args(argv)
    if args.quick:
        args.keys, args.runs = 100_000, 1
    args.out = args.out or default_out(args.quick)
    return args


def repeat_runs(one_run, times: int, *args) -> tuple[list[dict], dict]:
    """``one_run(*args)`` ``times`` times (each returns {figure: value}); the runs and each figure's summary."""
    runs = []
    for r in range(times):
        runs.append(one_run(*args))
        print(f"run {r + 1}/{times} done", file=sys.stderr)
    return runs, {name: summary([run[name] for run in runs]) for name in runs[0]}


def targets_table(rows: list[dict], measured: str = "measured (median of the runs' ratios)") -> list[str]:
    """A report's table of targets (the rows of targets.py): one markdown line each, header first."""
    return [f"| target | limit | {measured} | status |", "|---|---|---|---|"] + [
        f"| {r['target']} | {r['limit']} | {r['measured']} | {r['status']} |" for r in rows]


def finish(out, name: str, data: dict, markdown) -> int:
    """Print a script's report (``markdown(data)``) and write it with its figures (write_results); exit status 0."""
    text = markdown(data)
    print(text)
    write_results(out, name, data, text)
    return 0
