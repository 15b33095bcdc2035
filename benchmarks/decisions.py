"""The cost-aware decisions and non-ASCII keys, side by side in one run (the Speed issue's targets for them).

    .venv/bin/python benchmarks/decisions.py              # 1M keys, 3 runs (a few minutes)
    .venv/bin/python benchmarks/decisions.py --quick      # 100k keys, 1 run: a smoke test
    .venv/bin/python benchmarks/decisions.py --only non-ascii   # only the non-ASCII workloads (while iterating)

Workloads (medians of the runs; within a run the sides of a ratio are timed on the same keys in turns, so that a
burst of load on this shared machine falls on every side alike: single keys in slices of n/20, query batches one
call of each in turn, five times; only the non-ASCII ``update``, whose memory is measured around it, runs one library
after the other):

* selective single: ``sel.query(key)`` vs ``key in f`` (URLs, half present; a constant prior), for
  SelectiveBloomFilter and SelectiveCountingBloomFilter;
* selective batch: ``sel.query_many(keys)`` vs ``f.contains_many(keys)``, a list of str and a numpy uint64 array
  (SelectiveBloomFilter computes ``posterior`` and ``expected_cost`` when they are first read: the u64 batch is also
  timed with both read, not a target, to show what they cost);
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
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import targets  # noqa: E402
import workloads  # noqa: E402
from measure import batches_in_turn, fresh, interleaved, loop_call, loop_in  # noqa: E402

import bloomwise  # noqa: E402
from bloomwise.paradox import ClassPrior, SelectiveBloomFilter, SelectiveCountingBloomFilter  # noqa: E402


def accented(keys: list[str]) -> list[str]:
    """The URL with one accented letter: the first 'a' of the host (or of the path) becomes 'ä'."""
    return [k.replace("a", "ä", 1) if "a" in k else k + "é" for k in keys]


def ns_per_key(fn, *args, n: int) -> float:
    return measure.timed(fn, *args)[0] / n


def query_many_all_columns(query_many, keys):
    """query_many, then its two deferred columns read (the float arrays a caller of posteriors pays for)."""
    decisions = query_many(keys)
    return decisions, decisions.posterior, decisions.expected_cost


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
        out.update(interleaved({f"{name} single: in": lambda ks: loop_in(f, ks),
                                f"{name} single: query": lambda ks: loop_call(sel.query, ks)}, probe, n, True))
        out.update(batches_in_turn({f"{name} batch str: contains_many": (f.contains_many, fresh(probe)),
                                    f"{name} batch str: query_many": (sel.query_many, fresh(probe))}, n))
        sel_u = make()
        sel_u.update(u64)
        calls = {f"{name} batch u64: contains_many": (sel_u.filter.contains_many, u64_probe),
                 f"{name} batch u64: query_many": (sel_u.query_many, u64_probe),
                 f"{name} batch u64: floor": (lambda ks, g=sel_u.filter: batch_floor(g.contains_many, ks), u64_probe)}
        if name == "bloom":
            calls[f"{name} batch u64: query_many, every column read"] = (
                lambda ks, q=sel_u.query_many: query_many_all_columns(q, ks), u64_probe)
        out.update(batches_in_turn(calls, n))
        if name == "bloom":
            # the class: the first letter of the subdomain (www, blog, shop, news, m, api, docs, static), by
            # operator.itemgetter: a classifier that costs little, so the figure shows the decision's own cost
            classify = operator.itemgetter(8)
            table = {"w": 0.5, "b": 0.05, "s": 1e-4, "n": 1e-7, "m": 0.3, "a": 0.01}
            sel_c = SelectiveBloomFilter(bloomwise.BloomFilter(n, 0.01), ClassPrior(classify, table, default=1e-6),
                                         5.0)
            sel_c.update(urls)
            out.update(batches_in_turn({
                "class prior: contains_many": (sel_c.filter.contains_many, fresh(probe)),
                "class prior: classifier": (lambda ks: [classify(k) for k in ks], fresh(probe)),
                "class prior: query_many": (sel_c.query_many, fresh(probe))}, n))
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
    # The floors (not targets) take out what every library pays, to show what is left: the same loop over the same
    # kind of new str objects with a call that reads no character (`k in ""` for `in`, `().count(k)` for `add`): the
    # Python loop, the call and each new object's first touch. And bloomwise's `in` / `add` against filters of the
    # same k (the same probes) that stay in the L1 cache: the full-size filter's memory access is what its figure
    # costs more. `full` has every bit set, so every key takes the present path (all k probes tested, `add` sets
    # bits that are set already); `cached` holds 1,000 of the keys, so absent keys take the absent path.
    full, cached = bloomwise.BloomFilter(1000, 0.01), bloomwise.BloomFilter(1000, 0.01)
    with warnings.catch_warnings():  # over capacity, on purpose
        warnings.simplefilter("ignore")
        full.update(np.arange(200 * full.num_cells, dtype=np.uint64))
    if full.fill_ratio != 1.0:
        raise RuntimeError(f"the saturated filter's fill ratio is {full.fill_ratio}, not 1")
    cached.update(present[:1000])
    calls = {f"non-ASCII {lib}: add": (lambda ks, f=f: loop_call(f.add, ks)) for lib, f in filters.items()}
    calls["non-ASCII call floor: add"] = lambda ks: loop_call(().count, ks)
    calls["non-ASCII bloomwise: add, cache-resident filter"] = lambda ks: loop_call(full.add, ks)
    out.update(interleaved(calls, present, n, True))
    for lib, make in libs.items():
        g = make()
        keys = fresh(present)
        before = rss()
        out[f"non-ASCII {lib}: update"] = ns_per_key(g.update, keys, n=n)
        # beyond the filter's own pages (faulted in by the update)
        own = getattr(g, "nbytes", 0) if lib == "bloomwise" else 0
        out[f"non-ASCII {lib}: update RSS growth MiB"] = max(0, rss() - before - own) / 2**20
        del keys, g
    for which, keys in (("present", present), ("absent", absent)):
        calls = {f"non-ASCII {lib}: in {which}": (lambda ks, f=f: loop_in(f, ks)) for lib, f in filters.items()}
        calls[f"non-ASCII loop floor: in {which}"] = lambda ks: loop_in("", ks)
        small = full if which == "present" else cached
        calls[f"non-ASCII bloomwise: in {which}, cache-resident filter"] = lambda ks, g=small: loop_in(g, ks)
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

#: (operation, its floor): `add` against a method call that reads no character, `in` against `k in ""`
NON_ASCII_FLOORS = [("add", "call floor"), ("in present", "loop floor"), ("in absent", "loop floor")]


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
    if "bloom batch u64: query_many, every column read" in figures:  # not a target: the deferred columns' cost
        ratios["bloom batch u64: query_many, every column read, vs contains_many"] = measure.summary(
            [run["bloom batch u64: query_many, every column read"] / run["bloom batch u64: contains_many"]
             for run in runs])
    for op, floor in NON_ASCII_FLOORS:  # not targets: what is left beyond what every library pays
        ours, theirs, cached = (f"non-ASCII bloomwise: {op}", f"non-ASCII rbloom: {op}",
                                f"non-ASCII bloomwise: {op}, cache-resident filter")
        if theirs not in figures:
            continue
        ratios[f"non-ASCII {op}: {floor} vs rbloom"] = measure.summary(
            [run[f"non-ASCII {floor}: {op}"] / run[theirs] for run in runs])
        ratios[f"non-ASCII {op}: beyond the {floor}, bloomwise vs rbloom"] = measure.summary(
            [(run[ours] - run[f"non-ASCII {floor}: {op}"]) / (run[theirs] - run[f"non-ASCII {floor}: {op}"])
             for run in runs])
        ratios[f"non-ASCII {op}: {floor} and bloomwise's filter memory access vs rbloom"] = measure.summary(
            [(run[f"non-ASCII {floor}: {op}"] + run[ours] - run[cached]) / run[theirs] for run in runs])
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
        lines += ["", "Floors (not targets): a plain batch plus writing all five result arrays of a batch of "
                  "decisions (19 bytes a key) with numpy, no decision made, against the plain batch alone (median of "
                  "the runs' ratios):", ""]
        lines += [f"- {name}: {r['median']:.2f}x" for name, r in floors.items()]
    every = data["ratios"].get("bloom batch u64: query_many, every column read, vs contains_many")
    if every:
        lines += ["", "Not a target: SelectiveBloomFilter.query_many writes `member` and `consulted` (the filter's "
                  "answers come from the plain batch) and computes `posterior` and `expected_cost` when first read. "
                  f"With both read right after the batch, the u64 batch took {every['median']:.2f}x contains_many "
                  "(median of the runs' ratios)."]
    loop_floors = {name: r for name, r in data["ratios"].items() if "non-ASCII" in name and "floor" in name}
    if loop_floors:
        lines += ["", "Floors (not targets): the same loop over new str objects like those of the figures with a call "
                  "that reads no character (`k in \"\"` for `in`, `().count(k)` for `add`): the Python loop, the "
                  "call and each object's first touch, paid by both libraries; and that floor plus bloomwise's filter "
                  "memory access (its figure minus the same operation against a filter of the same k that stays in "
                  "the L1 cache: every bit set for `add` and `in` present, 1,000 keys for `in` absent) (median of the "
                  "runs' ratios):", ""]
        lines += [f"- {name}: {r['median']:.2f}x" for name, r in loop_floors.items()]
    lines += [""] + measure.targets_table(data["targets"])
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
