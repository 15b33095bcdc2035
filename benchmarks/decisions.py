"""The cost-aware decisions and non-ASCII keys, side by side in one run (the Speed issue's targets for them).

    .venv/bin/python benchmarks/decisions.py              # 1M keys, 3 runs (a few minutes)
    .venv/bin/python benchmarks/decisions.py --quick      # 100k keys, 1 run: a smoke test
    .venv/bin/python benchmarks/decisions.py --only non-ascii   # only the non-ASCII workloads (while iterating)

Workloads (medians of the runs; within a run the two sides of a ratio are timed on the same keys, one after the
other, or for the non-ASCII single-key figures in turns of n/20 keys):

* selective single: ``sel.query(key)`` vs ``key in f`` (URLs, half present; a constant prior), for
  SelectiveBloomFilter and SelectiveCountingBloomFilter;
* selective batch: ``sel.query_many(keys)`` vs ``f.contains_many(keys)``, a list of str and a numpy uint64 array;
* class prior: ``query_many`` with a ClassPrior (the class from the URL's subdomain) vs ``contains_many`` plus the
  classifier alone (``[classify(k) for k in keys]``): the target is on the time beyond the classifier;
* non-ASCII URLs (one accented letter each) vs rbloom: ``add``, ``in``, ``update``; and how much the process's resident
  memory grows when the keys are inserted, beyond bloomwise's filter itself (a UTF-8 copy cached in each str would
  show here).

Every str operation gets new str objects equal to the keys (rbloom hashes with ``hash()``, cached in the object).
Results: ``results/YYYY-MM-DD-decisions-<cpu>.md`` and ``.json`` (with the kernel set and the load average).
"""
from __future__ import annotations

import operator
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import targets  # noqa: E402
import workloads  # noqa: E402
from measure import fresh, interleaved, loop_call, loop_in  # noqa: E402

import bloomwise  # noqa: E402
from bloomwise.paradox import ClassPrior, SelectiveBloomFilter, SelectiveCountingBloomFilter  # noqa: E402


def accented(keys: list[str]) -> list[str]:
    """The URL with one accented letter: the first 'a' of the host (or of the path) becomes 'ä'."""
    return [k.replace("a", "ä", 1) if "a" in k else k + "é" for k in keys]


def ns_per_key(fn, *args, n: int) -> float:
    return measure.timed(fn, *args)[0] / n


def batch_ns_per_key(fn, *args, n: int, repeats: int = 5) -> float:
    """A query batch (it changes nothing, so it can be repeated): the median of ``repeats`` calls."""
    return statistics.median(measure.timed(fn, *args)[0] for _ in range(repeats)) / n


def batch_floor(contains_many, keys):
    """What any query_many must do beyond the plain batch: write its result arrays (member, posterior,
    expected_cost, consulted: 19 bytes a key, in fresh memory), here with numpy and no decision at all."""
    answer = np.asarray(contains_many(keys), dtype=bool)
    return answer.copy(), np.where(answer, 0.9, 0.0), np.where(answer, 0.1, 0.0), np.ones(len(answer), dtype=bool)


def rss() -> int:
    return measure.PeakRSS._status("VmRSS")


def one_run(n: int, only: str = "all") -> dict:
    out: dict[str, float] = {}
    if only == "non-ascii":
        non_ascii_run(n, out)
        return out
    urls = workloads.url_keys(0, n)
    probe = workloads.url_keys(0, n // 2) + workloads.url_keys(n, n + n // 2)   # half present
    u64 = workloads.u64_keys(0, n)
    u64_probe = np.concatenate([workloads.u64_keys(0, n // 2), workloads.u64_keys(n, n + n // 2)])

    for name, make in (("bloom", lambda: SelectiveBloomFilter(bloomwise.BloomFilter(n, 0.01), 0.3, 5.0)),
                       ("counting", lambda: SelectiveCountingBloomFilter(bloomwise.CountingBloomFilter(n, 0.01),
                                                                         0.3, 5.0))):
        sel = make()
        sel.update(urls)
        f = sel.filter
        sel.query(urls[0])
        keys = fresh(probe)
        out[f"{name} single: in"] = ns_per_key(loop_in, f, keys, n=n)
        keys = fresh(probe)
        out[f"{name} single: query"] = ns_per_key(loop_call, sel.query, keys, n=n)
        keys = fresh(probe)
        out[f"{name} batch str: contains_many"] = batch_ns_per_key(f.contains_many, keys, n=n)
        keys = fresh(probe)
        out[f"{name} batch str: query_many"] = batch_ns_per_key(sel.query_many, keys, n=n)
        sel_u = make()
        sel_u.update(u64)
        out[f"{name} batch u64: contains_many"] = batch_ns_per_key(sel_u.filter.contains_many, u64_probe, n=n)
        out[f"{name} batch u64: query_many"] = batch_ns_per_key(sel_u.query_many, u64_probe, n=n)
        out[f"{name} batch u64: floor"] = batch_ns_per_key(batch_floor, sel_u.filter.contains_many, u64_probe, n=n)
        if name == "bloom":
            # the class: the first letter of the subdomain (www, blog, shop, news, m, api, docs, static), by
            # operator.itemgetter: a classifier that costs little, so the figure shows the decision's own cost
            classify = operator.itemgetter(8)
            table = {"w": 0.5, "b": 0.05, "s": 1e-4, "n": 1e-7, "m": 0.3, "a": 0.01}
            sel_c = SelectiveBloomFilter(bloomwise.BloomFilter(n, 0.01), ClassPrior(classify, table, default=1e-6),
                                         5.0)
            sel_c.update(urls)
            keys = fresh(probe)
            out["class prior: contains_many"] = batch_ns_per_key(sel_c.filter.contains_many, keys, n=n)
            keys = fresh(probe)
            out["class prior: classifier"] = batch_ns_per_key(lambda ks: [classify(k) for k in ks], keys, n=n)
            keys = fresh(probe)
            out["class prior: query_many"] = batch_ns_per_key(sel_c.query_many, keys, n=n)
    non_ascii_run(n, out, urls)
    return out


def non_ascii_run(n: int, out: dict, urls: list[str] | None = None) -> None:
    """The non-ASCII URL workloads of one run into ``out``: each figure of bloomwise, rbloom and the floors timed in
    turns over the same keys (``measure.interleaved``), so that load on a shared machine falls on every side alike;
    ``update`` one library after the other (its resident-memory growth is measured around the call)."""
    urls = urls if urls is not None else workloads.url_keys(0, n)
    try:
        import rbloom
    except ImportError:
        rbloom = None
    present, absent = accented(urls), accented(workloads.url_keys(n, 2 * n))
    libs = {"bloomwise": lambda: bloomwise.BloomFilter(n, 0.01)}
    if rbloom is not None:
        libs["rbloom"] = lambda: rbloom.Bloom(n, 0.01)
    for make in libs.values():  # warm-up: first-use costs are not the operations' own
        warm = make()
        loop_call(warm.add, fresh(present[:2000]))
        loop_in(warm, fresh(absent[:2000]))
    filters = {lib: make() for lib, make in libs.items()}
    adds = interleaved({lib: (lambda ks, f=f: loop_call(f.add, ks)) for lib, f in filters.items()}, present, n, True)
    out.update({f"non-ASCII {lib}: add": v for lib, v in adds.items()})
    for lib, make in libs.items():
        g = make()
        keys = fresh(present)
        before = rss()
        out[f"non-ASCII {lib}: update"] = ns_per_key(g.update, keys, n=n)
        # beyond the filter's own pages (faulted in by the update)
        own = getattr(g, "nbytes", 0) if lib == "bloomwise" else 0
        out[f"non-ASCII {lib}: update RSS growth MiB"] = max(0, rss() - before - own) / 2**20
        del keys, g
    # the loop floor: the same loop over the same kind of new str objects with a test that reads no character
    # (`k in ""`): the Python loop and the first touch of each new object, which both libraries' `in` pay. For absent
    # keys, also a filter of the same error rate (the same k) that stays in the L1 cache: the full-size filter's
    # memory read is what its `in` costs more.
    cached = bloomwise.BloomFilter(1000, 0.01)
    cached.update(present[:1000])
    for which, keys in (("present", present), ("absent", absent)):
        calls = {f"non-ASCII {lib}: in {which}": (lambda ks, f=f: loop_in(f, ks)) for lib, f in filters.items()}
        calls[f"non-ASCII loop floor: in {which}"] = lambda ks: loop_in("", ks)
        if which == "absent":
            calls["non-ASCII bloomwise: in absent, cache-resident filter"] = lambda ks: loop_in(cached, ks)
        out.update(interleaved(calls, keys, n, True))


RATIOS = [  # (target, numerator, denominator, limit)
    ("SelectiveBloomFilter.query vs `in`", "bloom single: query", "bloom single: in", 2.0),
    ("SelectiveCountingBloomFilter.query vs `in`", "counting single: query", "counting single: in", 2.0),
    ("selective Bloom query_many vs contains_many, list of str", "bloom batch str: query_many",
     "bloom batch str: contains_many", 1.3),
    ("selective Bloom query_many vs contains_many, numpy uint64", "bloom batch u64: query_many",
     "bloom batch u64: contains_many", 1.3),
    ("selective counting query_many vs contains_many, list of str", "counting batch str: query_many",
     "counting batch str: contains_many", 1.3),
    ("selective counting query_many vs contains_many, numpy uint64", "counting batch u64: query_many",
     "counting batch u64: contains_many", 1.3),
    ("non-ASCII URLs: add vs rbloom", "non-ASCII bloomwise: add", "non-ASCII rbloom: add", 0.6),
    ("non-ASCII URLs: update vs rbloom", "non-ASCII bloomwise: update", "non-ASCII rbloom: update", 0.6),
    ("non-ASCII URLs: `in` (present) vs rbloom", "non-ASCII bloomwise: in present", "non-ASCII rbloom: in present",
     0.6),
    ("non-ASCII URLs: `in` (absent) vs rbloom", "non-ASCII bloomwise: in absent", "non-ASCII rbloom: in absent",
     0.6),
]


def main(argv=None) -> int:
    import argparse
    only = argparse.ArgumentParser(add_help=False)
    only.add_argument("--only", choices=["all", "non-ascii"], default="all")
    part, rest = only.parse_known_args(argv)
    args = measure.keys_runs_args(__doc__, rest)
    load_before = measure.loadavg()
    runs, figures = measure.repeat_runs(one_run, args.runs, args.keys, part.only)
    # a ratio per run, then its median (both sides of a ratio come from the same run)
    ratios = {}
    for target, num, den, limit in RATIOS:
        if num in figures and den in figures:
            ratios[target] = measure.summary([run[num] / run[den] for run in runs])
    for name in ("bloom", "counting"):  # not targets: the least a batch of decisions costs (see batch_floor)
        if f"{name} batch u64: floor" not in figures:
            continue
        ratios[f"{name} batch u64: floor vs contains_many"] = measure.summary(
            [run[f"{name} batch u64: floor"] / run[f"{name} batch u64: contains_many"] for run in runs])
    for which in ("present", "absent"):  # not targets: each library's `in` beyond the loop floor
        floor = f"non-ASCII loop floor: in {which}"
        if floor not in figures or f"non-ASCII rbloom: in {which}" not in figures:
            continue
        ratios[f"non-ASCII `in` {which}: loop floor vs rbloom"] = measure.summary(
            [run[floor] / run[f"non-ASCII rbloom: in {which}"] for run in runs])
        ratios[f"non-ASCII `in` {which}: beyond the loop floor, bloomwise vs rbloom"] = measure.summary(
            [(run[f"non-ASCII bloomwise: in {which}"] - run[floor])
             / (run[f"non-ASCII rbloom: in {which}"] - run[floor]) for run in runs])
    if "non-ASCII rbloom: in absent" in figures:  # not a target: the loop floor plus the filter's memory read
        ratios["non-ASCII `in` absent: loop floor and bloomwise's filter memory read vs rbloom"] = measure.summary(
            [(run["non-ASCII loop floor: in absent"] + run["non-ASCII bloomwise: in absent"]
              - run["non-ASCII bloomwise: in absent, cache-resident filter"]) / run["non-ASCII rbloom: in absent"]
             for run in runs])
    if "class prior: query_many" in figures:
        ratios["class prior query_many beyond the classifier vs contains_many"] = measure.summary(
            [(run["class prior: query_many"] - run["class prior: classifier"]) / run["class prior: contains_many"]
             for run in runs])
    data = {"meta": measure.run_meta(load_before, keys=args.keys, runs=args.runs), "figures": figures,
            "ratios": ratios}
    data["targets"] = targets.check_decisions(data, RATIOS)
    return measure.finish(args.out, "decisions", data, markdown)


def markdown(data: dict) -> str:
    m = data["meta"]
    lines = [f"# Decisions and non-ASCII keys: {m['keys']:,} keys, {m['runs']} run(s), {m['date']}", "",
             measure.machine_line(m), "",
             "| figure | median | min | max |", "|---|---:|---:|---:|"]
    for name, s in data["figures"].items():
        unit = "" if "MiB" in name else " ns/key"
        lines.append(f"| {name} | {s['median']:.1f}{unit} | {s['min']:.1f} | {s['max']:.1f} |")
    floors = {name: r for name, r in data["ratios"].items() if "floor" in name and "non-ASCII" not in name}
    if floors:
        lines += ["", "Floors (not targets): a plain batch plus writing a decision's result arrays with numpy, no "
                  "decision made, against the plain batch alone (median of the runs' ratios):", ""]
        lines += [f"- {name}: {r['median']:.2f}x" for name, r in floors.items()]
    loop_floors = {name: r for name, r in data["ratios"].items() if "loop floor" in name}
    if loop_floors:
        lines += ["", "Floors (not targets): `for k in keys: k in \"\"` over new str objects like those of the `in` "
                  "figures, which reads no character: the Python loop and each object's first touch, paid by both "
                  "libraries; and that loop floor plus the read of bloomwise's filter (its `in` absent minus the same "
                  "`in` against a filter of the same k that stays in the L1 cache) (median of the runs' ratios):", ""]
        lines += [f"- {name}: {r['median']:.2f}x" for name, r in loop_floors.items()]
    lines += [""] + measure.targets_table(data["targets"])
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
