"""ScalableBloomFilter against one BloomFilter sized for the same keys, side by side in one run (the Speed issue's
row: "<= 1.5x the single filter; hash a key once").

    .venv/bin/python benchmarks/scalable.py              # 1M keys, 10 stages, 3 runs (a few minutes)
    .venv/bin/python benchmarks/scalable.py --quick      # 100k keys, 10 stages, 1 run: a smoke test
    .venv/bin/python benchmarks/scalable.py --keys 20000 --runs 1 --out /tmp/x   # any size: still 10 stages

The scalable filter: ``ScalableBloomFilter(capacity=ceil(n / 1023), fpr=0.01)`` (978 for 1M; growth 2, ratio 0.5,
blocked), so n keys make 10 stages (stage i holds capacity * 2^i keys: 1,023 x capacity >= n > 511 x capacity).
Against it:

* the single filter: ``BloomFilter(n, 0.01)`` (blocked), sized for the same n and final error rate;
* the floor: 10 plain BloomFilters of the stages' sizes (the same bits and k, each filled with the keys its stage
  took), queried in turn, each hashing the key again: what any stage-by-stage design pays (single keys: a Python
  loop over the stages, newest first, stopping at a hit; batches: one ``contains_many`` per stage);
* ``stage_hashing="seeded"``: the same filter with bloomwise 0.2's per-stage hashing (the old path, kept for its
  files);
* ten reads: a classic-layout BloomFilter of the scalable filter's size with k = 10, holding the keys the others
  are asked as absent ones. Its ``in`` of them reads ten random cache lines from one hash, one key at a time, with
  almost none of the stage work. It takes its turns with the others' ``in`` absent (the same keys, the same load on
  the caches) and gives the ten-reads references (``memory floor`` in the JSON). They are not lower bounds: its ten
  lines fall anywhere in 3.3 MB, while a 10-stage ``in`` reads one block per stage, and the six smallest stages
  (about 150 KB for 1M keys) can stay in the caches.

Figures (ns/key, medians of the runs; the two sides of every ratio are timed one after the other in the same run):
``add`` (new str keys, one by one, the filter growing from empty), ``in`` present and absent (str), ``update`` (lists
of str; numpy uint64 arrays; 20 batches of n/20 keys), ``contains_many`` (half present; list of str and numpy
uint64). Every str operation gets new str objects equal to the keys. The compared filters take each operation in
turns of n/20 keys (``measure.interleaved``), so that a burst of load on a shared machine falls on all of them
alike, and the time is this thread's CPU time (time descheduled is not counted). Results:
``<out>/YYYY-MM-DD-scalable-<cpu>.md`` and ``.json`` (with the kernel set and the load average); ``--quick`` writes
to ``results/quick/`` unless ``--out`` is given.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import targets  # noqa: E402
import workloads  # noqa: E402

from bloomwise import BloomFilter, ScalableBloomFilter  # noqa: E402
from measure import fresh, interleaved, loop_call, loop_in  # noqa: E402

STAGES = 10
FPR = 0.01


def floor_in(stages, keys):
    """The stage-by-stage query: newest first, each stage hashing the key itself, stopping at a hit."""
    for k in keys:
        for stage in stages:
            if k in stage:
                break


def floor_many(stages, keys):
    result = stages[0].contains_many(keys)
    for stage in stages[1:]:
        result |= stage.contains_many(keys)
    return result


def capacity_for(n: int) -> int:
    """The first stage's capacity so that n keys make exactly STAGES stages (growth 2)."""
    return -(-n // (2 ** STAGES - 1))


def floor_filters(f: ScalableBloomFilter, keys) -> list[BloomFilter]:
    """Plain BloomFilters of f's stages' sizes, stage i filled with the next stage_keys[i] keys; newest first."""
    plain, start = [], 0
    for i, (stage, count) in enumerate(zip(f.stages, f.stage_keys)):
        g = BloomFilter.from_size(stage.num_cells, stage.num_hashes, layout=stage.layout, seed=1000 + i)
        g.update(keys[start:start + count])
        start += count
        plain.append(g)
    return plain[::-1]


def one_run(n: int) -> dict:
    out: dict[str, float] = {}
    capacity = capacity_for(n)
    keys = workloads.url_keys(0, n)
    absent = workloads.url_keys(n, 2 * n)
    half = [k for pair in zip(workloads.url_keys(0, n // 2), workloads.url_keys(n, n + n // 2)) for k in pair]
    u64 = workloads.u64_keys(0, n)
    u64_half = np.empty(n // 2 * 2, dtype=np.uint64)
    u64_half[0::2], u64_half[1::2] = workloads.u64_keys(0, n // 2), workloads.u64_keys(n, n + n // 2)
    makers = {"scalable": lambda: ScalableBloomFilter(capacity, FPR),
              "seeded": lambda: ScalableBloomFilter(capacity, FPR, stage_hashing="seeded"),
              "single": lambda: BloomFilter(n, FPR)}
    for make in makers.values():  # warm-up: first-use imports and allocations are not the operations' cost
        warm = make()
        loop_call(warm.add, fresh(keys[:2000]))
        loop_in(warm, fresh(absent[:2000]))
        warm.contains_many(u64_half[:2000])
    built = {name: make() for name, make in makers.items()}
    adds = interleaved({name: (lambda ks, f=f: loop_call(f.add, ks)) for name, f in built.items()}, keys, n, True)
    out.update({f"{name}: add": v for name, v in adds.items()})
    s = built["scalable"]
    assert s.num_stages == STAGES, f"{s.num_stages} stages, expected {STAGES}"
    out["scalable: MiB"] = s.nbytes / 2**20
    out["single: MiB"] = built["single"].nbytes / 2**20
    floor = floor_filters(s, keys)
    ten_reads = BloomFilter.from_size(s.nbytes * 8, STAGES, layout="classic")
    ten_reads.update(absent)
    singles = {name: (lambda ks, f=f: loop_in(f, ks)) for name, f in built.items()}
    singles["floor"] = lambda ks: floor_in(floor, ks)
    out.update({f"{name}: in present": v for name, v in interleaved(singles, keys, n, True).items()})
    batches = {name: f.contains_many for name, f in built.items()}
    batches["floor"] = lambda ks: floor_many(floor, ks)
    absents = dict(singles, **{"ten reads": lambda ks: loop_in(ten_reads, ks)})
    for label, items, calls, is_str in (("in absent", absent, absents, True),
                                        ("contains_many str", half, batches, True),
                                        ("contains_many u64", u64_half, batches, False)):
        out.update({f"{name}: {label}": v for name, v in interleaved(calls, items, len(items), is_str).items()})
    for label, items, is_str in (("update str", keys, True), ("update u64", u64, False)):
        fresh_filters = {name: make() for name, make in makers.items()}
        calls = {name: f.update for name, f in fresh_filters.items()}
        out.update({f"{name}: {label}": v for name, v in interleaved(calls, items, n, is_str).items()})
    for name in ("scalable", "single", "seeded"):  # no false negatives, whatever the path
        assert built[name].contains_many(keys).all()
    return out


OPERATIONS = ["add", "in present", "in absent", "update str", "update u64", "contains_many str",
              "contains_many u64"]
ISSUE_TARGET = 1.5  # "<= 1.5x the single filter"


FLOOR_OPERATIONS = ["add", "in absent"]  # each tests a key in every stage (add: new keys, absent until added)


def stage_floor(run: dict, op: str = "in absent") -> float:
    """The least ``op`` (``in`` absent or ``add`` of new keys) can cost, as a multiple of the single filter's, in one
    run's figures: the single filter's ``op`` plus what the scalable filter's stage tests add per key in a batch
    (``contains_many`` u64, scalable minus single). The batch prefetches every stage's block and hashes a uint64
    once, so its extra is the stage tests alone, latency hidden: one random block read and one block test per stage
    (10) against one. Half its keys are present and may stop before the oldest stage, so this is an underestimate
    for keys tested in every stage."""
    extra = run["scalable: contains_many u64"] - run["single: contains_many u64"]
    return (run[f"single: {op}"] + extra) / run[f"single: {op}"]


def ten_reads_reference(run: dict, op: str = "in absent") -> float:
    """``op`` (``in`` absent or ``add`` of new keys, ten stages read) with nine more random cache-line reads per key,
    one key at a time, as a multiple of the single filter's, in one run's figures: the single filter's ``op`` plus
    the ten-reads filter's ``in`` minus the single filter's ``in`` absent (same turns: ten lines from one hash against
    one). Unlike stage_floor, the reads' latency counts as it does for single keys. Not a lower bound (see the
    module docstring)."""
    extra = run["ten reads: in absent"] - run["single: in absent"]
    return (run[f"single: {op}"] + extra) / run[f"single: {op}"]


def ratio_table(runs: list[dict]) -> dict:
    """Per operation: scalable / single, scalable / floor, seeded / single (each the median of the runs' ratios);
    and the stage floors and ten-reads references of ``add`` and ``in`` absent (stage_floor, ten_reads_reference)."""
    ratios = {}
    for op in OPERATIONS:
        for num, den in (("scalable", "single"), ("scalable", "floor"), ("seeded", "single")):
            a, b = f"{num}: {op}", f"{den}: {op}"
            if a in runs[0] and b in runs[0]:
                ratios[f"{op}: {num} / {den}"] = measure.summary([run[a] / run[b] for run in runs])
    for op in FLOOR_OPERATIONS:
        ratios[f"{op}: stage floor / single"] = measure.summary([stage_floor(run, op) for run in runs])
        if "ten reads: in absent" in runs[0]:
            ratios[f"{op}: memory floor / single"] = measure.summary([ten_reads_reference(run, op) for run in runs])
    return ratios


def main(argv=None) -> int:
    args = measure.keys_runs_args(__doc__, argv)
    load_before = measure.loadavg()
    runs, figures = measure.repeat_runs(one_run, args.runs, args.keys)
    data = {"meta": measure.run_meta(load_before, keys=args.keys, runs=args.runs, stages=STAGES,
                                     capacity=capacity_for(args.keys), fpr=FPR),
            "figures": figures, "ratios": ratio_table(runs)}
    data["targets"] = targets.check_scalable(data, ISSUE_TARGET)
    return measure.finish(args.out, "scalable", data, markdown)


def floor_paragraph(ratios: dict, kind: str, title: str, explanation: str) -> list[str]:
    """The report's lines for the ``kind`` floors ("stage", "memory") of add and `in` absent, when measured."""
    values = {op: ratios[f"{op}: {kind} floor / single"]["median"] for op in FLOOR_OPERATIONS
              if f"{op}: {kind} floor / single" in ratios}
    if not values:
        return []
    return ["", f"{title}: " + ", ".join(f"`{op}` {x:.2f}x" for op, x in values.items()) + " the single filter. "
            + explanation]


def markdown(data: dict) -> str:
    m = data["meta"]
    f = data["figures"]
    lines = [f"# ScalableBloomFilter vs one BloomFilter: {m['keys']:,} keys, {m['stages']} stages, {m['runs']} run(s), "
             f"{m['date']}", "",
             f"ScalableBloomFilter(capacity={m['capacity']:,}, fpr={m['fpr']}) (growth 2, ratio 0.5, blocked): "
             f"{f['scalable: MiB']['median']:.2f} MiB; BloomFilter({m['keys']:,}, {m['fpr']}): "
             f"{f['single: MiB']['median']:.2f} MiB.", "",
             f"{measure.machine_line(m)} Command: `{m['command']}`.", "",
             "ns/key, medians of the runs (floor: 10 plain filters of the stages' sizes queried in turn; seeded: "
             "the per-stage hashing of bloomwise 0.2's files).", "",
             "| operation | scalable | single | floor | seeded | scalable / single | scalable / floor |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    r = data["ratios"]
    for op in OPERATIONS:
        cells = [f"{f[k]['median']:.1f}" if k in f else "—" for k in
                 (f"scalable: {op}", f"single: {op}", f"floor: {op}", f"seeded: {op}")]
        ratio = [f"{r[k]['median']:.2f}x" if k in r else "—" for k in
                 (f"{op}: scalable / single", f"{op}: scalable / floor")]
        lines.append(f"| {op} | " + " | ".join(cells + ratio) + " |")
    lines += floor_paragraph(r, "stage", "Stage floors (not targets)",
                             "Each is the single filter's figure plus the extra per key of the scalable filter's "
                             "prefetched u64 batch (`contains_many` u64, scalable minus single): ten random block reads "
                             "and block tests against one, with their latency hidden; medians of the runs.")
    if "ten reads: in absent" in f:
        lines += floor_paragraph(r, "memory", "Ten-reads references (one key at a time; `memory floor` in the JSON)",
                                 "Each is the single filter's figure plus what nine more random cache-line reads "
                                 "per key cost in the same loop: the ten-reads filter (classic layout, k = 10, the "
                                 "scalable filter's size, holding the keys the others are asked as absent) answers "
                                 f"`in` for them in {f['ten reads: in absent']['median']:.1f} ns against the single "
                                 "filter's "
                                 f"{f['single: in absent']['median']:.1f} ns, in the same turns; medians of the runs. "
                                 "They are not lower bounds: the reference's ten lines fall anywhere in the filter's "
                                 "size, while a ten-stage `in` of an absent key or `add` of a new key reads one block "
                                 "per stage, and the six smallest stages (about 150 KB for 1M keys) can stay in the "
                                 "caches.")
    lines += [""] + measure.targets_table(data["targets"])
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
