"""Counting filter batch insert (``CountingBloomFilter.update``) side by side with fastbloom-rs and the plain filter.

    .venv/bin/python benchmarks/counting_batch.py              # 1M keys, 7 runs (about a minute)
    .venv/bin/python benchmarks/counting_batch.py --quick      # 100k keys, 1 run: a smoke test

For each key kind (a list of URL str, a numpy uint64 array, a list of Python ints: ``workloads.py``), one batch
insert of all N keys into a fresh filter sized for N at FPR 1%:

* bloomwise ``CountingBloomFilter.update``: 4-bit counters in the classic layout (the default), 4-bit partitioned,
  8-bit and 16-bit classic;
* fastbloom-rs ``CountingBloomFilter`` (4-bit counters), its typed batch call ``add_str_batch`` / ``add_int_batch``
  (it takes the numpy array as it is);
* bloomwise ``BloomFilter.update`` (blocked, the default, and classic): what a counter costs beyond a bit.

The default filter and fastbloom-rs are timed one right after the other (load from other users comes in bursts of
seconds). The filters are built before the timer starts, so every library pays the page faults of its fresh array
inside the insert alike; str keys are new objects in every timed call. Each library does an unrecorded 10k-key insert first.
The runs are the outer loop and the libraries the inner one; a ratio is taken within a run, then its median over
the runs. Also recorded, outside the timings: how many bytes the Python heap (tracemalloc) held at its peak during
one ``update`` beyond what it held before, per key.

Results: ``results/YYYY-MM-DD-counting-batch-<cpu>.md`` and ``.json`` (``results/quick/`` with ``--quick``), with the
kernel set and the load average.
"""
from __future__ import annotations

import gc
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import targets  # noqa: E402
import workloads  # noqa: E402

import bloomwise  # noqa: E402

try:
    import fastbloom_rs
except ImportError:  # the bench extra is not installed: its figures and the targets say so
    fastbloom_rs = None

FPR = 0.01
LIMIT = 0.4  # the Speed issue's target: counting update time <= 0.4x fastbloom-rs's batch insert
KINDS = ("url", "u64", "int")
KIND_NAMES = {"url": "list of URL str", "u64": "numpy uint64", "int": "list of int"}
DEFAULT = "bloomwise counting 4-bit classic"
PEER = "fastbloom-rs counting"


def make_keys(kind: str, start: int, stop: int):
    if kind == "url":
        return workloads.url_keys(start, stop)
    if kind == "u64":
        return workloads.u64_keys(start, stop)
    return workloads.int_keys(start, stop)


def fresh(keys):
    """New str objects equal to the keys (a str caches its hash); other keys as they are."""
    return [(k + ".")[:-1] for k in keys] if isinstance(keys, list) and keys and isinstance(keys[0], str) else keys


def contenders(n: int, kind: str) -> dict:
    """name -> (build a fresh filter, insert a batch into it)."""
    out = {}
    for bits, layout in ((4, "classic"), (4, "partitioned"), (8, "classic"), (16, "classic")):
        out[f"bloomwise counting {bits}-bit {layout}"] = (
            lambda bits=bits, layout=layout: bloomwise.CountingBloomFilter(n, FPR, counter_bits=bits, layout=layout),
            lambda f, keys: f.update(keys))
        if fastbloom_rs is not None and len(out) == 1:  # right after the default: the target's two sides adjacent
            method = "add_str_batch" if kind == "url" else "add_int_batch"
            out[PEER] = (lambda: fastbloom_rs.CountingBloomFilter(n, FPR),
                         lambda f, keys, method=method: getattr(f, method)(keys))
    for layout in ("blocked", "classic"):
        out[f"bloomwise BloomFilter {layout}"] = (lambda layout=layout: bloomwise.BloomFilter(n, FPR, layout=layout),
                                                  lambda f, keys: f.update(keys))
    return out


def heap_bytes_per_key(kind: str, n: int) -> float:
    """Peak Python-heap bytes (tracemalloc) beyond the start during one default update of n keys, per key."""
    keys = fresh(make_keys(kind, 0, n))
    f = bloomwise.CountingBloomFilter(n + 10, FPR)
    f.update(make_keys(kind, n, n + 10))  # first-call imports and caches outside the measurement
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        f.update(keys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return max(0, peak - before) / n


def one_run(n: int, warm: dict) -> dict:
    """ns per key of every contender on every key kind (one insert each)."""
    out = {}
    for kind in KINDS:
        keys = make_keys(kind, 0, n)
        for name, (build, insert) in contenders(n, kind).items():
            if (kind, name) not in warm:  # first call of this library on this kind: unrecorded
                insert(build(), fresh(make_keys(kind, 10 * n, 10 * n + 10_000)))
                warm[(kind, name)] = True
            f = build()
            batch = fresh(keys)
            out[f"{kind}: {name}"] = measure.timed(insert, f, batch)[0] / n
            del f, batch
    return out


def main(argv=None) -> int:
    args = measure.keys_runs_args(__doc__, argv, runs=7, runs_help="runs (medians over them; default 7: a run "
                                  "takes seconds)")
    load_before = measure.loadavg()
    runs, figures = measure.repeat_runs(one_run, args.runs, args.keys, {})
    ratios = {}
    for kind in KINDS:
        for name in contenders(args.keys, kind):
            if name != PEER and f"{kind}: {PEER}" in figures:
                ratios[f"{kind}: {name} / {PEER}"] = measure.summary(
                    [run[f"{kind}: {name}"] / run[f"{kind}: {PEER}"] for run in runs])
            ratios[f"{kind}: {DEFAULT} / bloomwise BloomFilter blocked"] = measure.summary(
                [run[f"{kind}: {DEFAULT}"] / run[f"{kind}: bloomwise BloomFilter blocked"] for run in runs])
    heap = {kind: heap_bytes_per_key(kind, min(args.keys, 200_000)) for kind in KINDS}
    data = {"meta": measure.run_meta(load_before, keys=args.keys, runs=args.runs, fpr=FPR,
                                     fastbloom_rs=getattr(fastbloom_rs, "__version__", None)),
            "figures": figures, "ratios": ratios, "heap_bytes_per_key": heap}
    data["targets"] = targets.check_counting_batch(data, KINDS, KIND_NAMES, DEFAULT, PEER, LIMIT)
    return measure.finish(args.out, "counting-batch", data, markdown)


def markdown(data: dict) -> str:
    m = data["meta"]
    lines = [f"# Counting filter batch insert: {m['keys']:,} keys, FPR {m['fpr']:.0%}, {m['runs']} run(s), "
             f"{m['date']}", "", f"{measure.machine_line(m)} Caches: {m['machine']['caches']}.", "",
             f"Command: `{m['command']}`", "",
             "| keys | contender | ns/key median | min | max | ratio to fastbloom-rs (median of runs) |",
             "|---|---|---:|---:|---:|---:|"]
    for name, s in data["figures"].items():
        kind, who = name.split(": ", 1)
        ratio = data["ratios"].get(f"{kind}: {who} / {PEER}")
        lines.append(f"| {KIND_NAMES[kind]} | {who} | {s['median']:.1f} | {s['min']:.1f} | {s['max']:.1f} | "
                     f"{'' if ratio is None else format(ratio['median'], '.2f') + 'x'} |")
    lines += ["", "Python heap at its peak during one default update, beyond its start (tracemalloc), per key: "
              + ", ".join(f"{KIND_NAMES[k]} {v:.3f} B" for k, v in data["heap_bytes_per_key"].items()) + ".",
              ""] + measure.targets_table(data["targets"])
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
