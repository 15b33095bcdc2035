"""Anatomy of a single-key query: what the call costs, and what the filter's memory costs.

    python benchmarks/anatomy.py                  # 10M str keys, FPR 1%, 5 runs (~3 min)
    python benchmarks/anatomy.py --quick          # 100k keys, 1 run: the harness only

A single-key ``key in f`` on str keys is timed, as run.py does, for bloomwise (blocked) and rbloom (default
hash) on two filters each, queried with the same new key objects:
- a filter sized for N keys (at 10M keys, 12 MiB: beyond this machine's cache);
- a filter of 1,000 keys (in L1): the *call* alone (Python's loop, the key object, hashing, the bit test).
The difference is the filter's *memory* cost. A blocked filter pays one dependent cache-line miss per key,
the least any filter can pay (the line's address depends on the key's hash), while rbloom's k probes miss in
parallel. The last column is the ratio bloomwise would reach with a call that cost nothing: its memory cost
alone against rbloom's whole query. When that column is above a target ratio, no single-key code can meet
the target at that size on that machine.
"""
from __future__ import annotations

import argparse
import sys
import time

import measure
import report
import workloads
from run import fresh, parse_size

TINY = 1_000


def query_loop(f, keys) -> None:
    for k in keys:
        k in f  # noqa: B015 - timed, the answer discarded (as in run.py)


def filters(n: int, fpr: float) -> dict:
    """(library, size) -> a filter holding its keys: every present key, or the first TINY."""
    from bloomwise import BloomFilter
    out = {}
    keys = workloads.str_keys(0, n)
    try:
        from rbloom import Bloom
    except ImportError:
        Bloom = None
    for size, count in (("sized for N", n), ("tiny", TINY)):
        out["bloomwise blocked", size] = BloomFilter(count, fpr, layout="blocked")
        if Bloom is not None:
            out["rbloom", size] = Bloom(count, fpr)
    for (_, size), f in out.items():
        f.update(keys if size == "sized for N" else keys[:TINY])
    return out


def measure_all(n: int, queries: int, fpr: float, runs: int) -> dict:
    """(library, size) -> ns per query over `runs` runs; every run queries the filters in turn, on new keys."""
    present = workloads.str_keys(0, queries)
    fs = filters(n, fpr)
    times: dict = {name: [] for name in fs}
    for _ in range(runs):
        for name, f in fs.items():
            ks = fresh(present)  # outside the timer
            times[name].append(measure.timed(query_loop, f, ks)[0] / len(ks))
    return {name: measure.summary(v) for name, v in times.items()}


def table(results: dict, n: int, fpr: float) -> str:
    med = {name: v["median"] for name, v in results.items()}
    lines = [f"Single-key `in`, str keys, N = {n:,}, FPR {fpr:.1%}: ns per query, median of "
             f"{len(next(iter(results.values()))['runs'])} runs [min–max].", "",
             "| library | sized for N | tiny (call only) | memory = difference |", "|---|---|---|---|"]
    for lib in ("bloomwise blocked", "rbloom"):
        if (lib, "tiny") not in results:
            continue
        full, tiny = results[lib, "sized for N"], results[lib, "tiny"]
        lines.append(f"| {lib} | {report.spread_text(full, True)} | {report.spread_text(tiny, True)} | "
                     f"{med[lib, 'sized for N'] - med[lib, 'tiny']:.1f} |")
    if ("rbloom", "tiny") in results:
        bw_full, bw_tiny, rb_full = (med["bloomwise blocked", "sized for N"], med["bloomwise blocked", "tiny"],
                                     med["rbloom", "sized for N"])
        lines += ["", f"- ratio measured (bloomwise / rbloom): {bw_full / rb_full:.3f}",
                  f"- ratio with a call that cost nothing (bloomwise's memory cost / rbloom's query): "
                  f"{(bw_full - bw_tiny) / rb_full:.3f}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", default="10M", help="N, the keys in the filter (default 10M)")
    p.add_argument("--fpr", type=float, default=0.01, help="target false-positive rate (default 0.01)")
    p.add_argument("--runs", type=int, default=5, help="runs, reported as median [min–max] (default 5)")
    p.add_argument("--quick", action="store_true", help="100k keys, 1 run")
    args = p.parse_args(argv)
    n, runs = (100_000, 1) if args.quick else (parse_size(args.keys), args.runs)
    t0 = time.perf_counter()
    results = measure_all(n, min(n, workloads.QUERY_MAX), args.fpr, runs)
    print(table(results, n, args.fpr))
    print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
