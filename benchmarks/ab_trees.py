"""A/B of two source trees of bloomwise on the single-key and batch rows of ``run.py`` (``make bench``'s peers step).

    .venv/bin/python benchmarks/ab_trees.py --before /path/to/old/checkout            # 5 A/B rounds, 3 A/A rounds
    .venv/bin/python benchmarks/ab_trees.py --before OLD --rounds 7 --aa-rounds 4 --keys 1M

Both trees need their compiled core built in place (``setup.py build_ext --inplace``). Every figure comes from this
tree's ``run.run_once`` (the code that makes ``run.py``'s rows: ``add`` and ``in`` per key, ``update`` and
``contains_many``), run in a fresh interpreter whose ``PYTHONPATH`` is one tree's ``src``: the SAME benchmark code
measures both packages; only the package under test changes. Structures: ``BloomFilter`` in its three layouts and
``CountingBloomFilter`` (4-bit classic counters, the default); workloads: ``str-key-N`` (a list of str; single-key
and batch rows) and ``numpy-u64-N`` (batch rows only), with ``run.py``'s keys (fixed, no randomness). ``--rows
paradox``: ``decisions.py``'s rows instead (``query`` against ``in``, ``query_many`` against ``contains_many``, for
SelectiveBloomFilter and SelectiveCountingBloomFilter, 1M URLs half present).

A round runs one process per tree, in turn; the order flips every round (A B, B A, ...) so that neither tree always
goes first after a pause. A ratio is taken within a round (after / before, per row: each process's figure is the
median of its ``--runs`` runs), then its median over the rounds. The A/A rounds run the after tree twice in the same
way; their ratios show what the noise alone moves a row by. A row is "within noise" when its median A/B ratio lies
inside the range of its A/A ratios widened to [min(1/r, r) ... max(r, 1/r)] (the noise is taken as symmetric).

Results: ``results/YYYY-MM-DD-ab-trees-<cpu>.md`` and ``.json``, with the two trees' commits and the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import workloads  # noqa: E402

HERE = Path(__file__).resolve().parent
AFTER_DEFAULT = HERE.parent
ROW_OPS = ("add", "query_present", "query_absent", "batch_add", "batch_query", "batch_query_absent")
LAYOUTS = ("blocked", "partitioned", "classic")


def parse_count(text: str) -> int:
    """'1M' -> 1_000_000, '100k' -> 100_000, '5000' -> 5000."""
    scale = {"k": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    try:
        return int(float(text[:-1] if scale > 1 else text) * scale)
    except ValueError:
        raise ValueError(f"--keys: expected a count such as 1M, 100k or 5000, got {text!r}") from None


# ---- worker: one tree's package, every row -------------------------------------------------------------------------
def worker(n: int, runs: int, out: Path) -> None:
    import adapters
    import bloomwise
    import run

    class Counting(adapters.Bloomwise):
        """CountingBloomFilter through the plain filter's adapter (the same calls, the default counters)."""

        def __init__(self):
            super().__init__("classic")
            self.name = "bloomwise CountingBloomFilter"
            self.cls = self.mod.CountingBloomFilter

        def new(self, capacity, fpr, kind):
            return self.cls(capacity, fpr)

    libs = [adapters.Bloomwise(layout) for layout in LAYOUTS] + [Counting()]
    plan = [workloads.Workload(f"str-key-{workloads.label(n)}", "str", n, workloads.str_keys),
            workloads.Workload(f"numpy-u64-{workloads.label(n)}", "u64", n, workloads.u64_keys, batch_only=True)]
    rows: dict = {}
    for w in plan:
        keys, absent = w.keys()
        for a in libs:  # warm-up, not recorded, as in run.py
            run.run_once(a, w, keys[:run.WARM_UP], absent[:run.WARM_UP], 0.01, run.WARM_UP, None)
        per_run = {a.name: [] for a in libs}
        for _ in range(runs):
            for a in libs:
                per_run[a.name].append(run.run_once(a, w, keys, absent, 0.01, w.n, None))
        for a in libs:
            for op in ROW_OPS:
                values = [r[op] for r in per_run[a.name] if op in r]
                errors = {e for r in per_run[a.name] for e in r["errors"].items()}
                if errors:
                    raise SystemExit(f"{a.name} on {w.name}: {sorted(errors)}")
                if values:
                    rows[f"{w.name} | {a.name} | {op}"] = statistics.median(values)
    out.write_text(json.dumps({"package": bloomwise.__file__, "kernels": measure.bloomwise_kernels(), "rows": rows}))


def paradox_worker(n: int, runs: int, out: Path) -> None:
    """The cost-aware decision rows of ``decisions.py`` (its construction and timing: ``query`` against ``in`` per
    key in turns of n/20 keys, ``query_many`` against ``contains_many`` on a list of str and a numpy uint64 array,
    half present), for SelectiveBloomFilter and SelectiveCountingBloomFilter; ns per key, CPU time for the single-key
    loops as in ``decisions.py``. Each row is the median of the process's runs."""
    import numpy as np

    import bloomwise
    from bloomwise.paradox import SelectiveBloomFilter, SelectiveCountingBloomFilter

    urls = workloads.url_keys(0, n)
    probe = workloads.url_keys(0, n // 2) + workloads.url_keys(n, n + n // 2)
    u64 = workloads.u64_keys(0, n)
    u64_probe = np.concatenate([workloads.u64_keys(0, n // 2), workloads.u64_keys(n, n + n // 2)])
    makers = {"SelectiveBloomFilter": lambda: SelectiveBloomFilter(bloomwise.BloomFilter(n, 0.01), 0.3, 5.0),
              "SelectiveCountingBloomFilter": lambda: SelectiveCountingBloomFilter(
                  bloomwise.CountingBloomFilter(n, 0.01), 0.3, 5.0)}
    per_run: dict[str, list[float]] = {}
    for _ in range(runs):
        for name, make in makers.items():
            sel = make()
            sel.update(urls)
            f = sel.filter
            sel.query(urls[0])
            figures = measure.interleaved({"single: in": lambda ks: measure.loop_in(f, ks),
                                           "single: query": lambda ks: measure.loop_call(sel.query, ks)},
                                          probe, n, True)
            figures.update(measure.batches_in_turn({"batch str: contains_many": (f.contains_many,
                                                                                 measure.fresh(probe)),
                                                    "batch str: query_many": (sel.query_many, measure.fresh(probe))},
                                                   n))
            sel_u = make()
            sel_u.update(u64)
            figures.update(measure.batches_in_turn({"batch u64: contains_many": (sel_u.filter.contains_many,
                                                                                 u64_probe),
                                                    "batch u64: query_many": (sel_u.query_many, u64_probe)}, n))
            for op, value in figures.items():
                per_run.setdefault(f"url-{workloads.label(n)} | {name} | {op}", []).append(value)
    rows = {row: statistics.median(values) for row, values in per_run.items()}
    out.write_text(json.dumps({"package": bloomwise.__file__, "kernels": measure.bloomwise_kernels(), "rows": rows}))


# ---- driver: alternate the trees, take ratios within rounds --------------------------------------------------------
def run_tree(tree: Path, n: int, runs: int, rows: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(out), "--keys", str(n),
                   "--runs", str(runs), "--rows", rows]
        done = subprocess.run(command, env=env, cwd=tree)
        if done.returncode != 0:
            raise SystemExit(f"the worker on {tree} failed (exit {done.returncode})")
        data = json.loads(out.read_text())
    expected = (tree / "src").resolve()
    if not Path(data["package"]).resolve().is_relative_to(expected):
        raise SystemExit(f"the worker on {tree} imported bloomwise from {data['package']}, not from {expected}")
    return data


def commit_of(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True)
    return done.stdout.strip() or "?"


def paired_rounds(first: Path, second: Path, rounds: int, n: int, runs: int, rows: str, label: str) -> list[dict]:
    """``rounds`` rounds of (first, second), the order flipping each round; each round: {"a": rows, "b": rows}."""
    out = []
    for i in range(rounds):
        order = (("a", first), ("b", second)) if i % 2 == 0 else (("b", second), ("a", first))
        got = {}
        for side, tree in order:
            got[side] = run_tree(tree, n, runs, rows)
            print(f"  {label} round {i + 1}/{rounds}: {side} done (load {measure.loadavg()})", flush=True)
        out.append({"a": got["a"]["rows"], "b": got["b"]["rows"], "order": [s for s, _ in order],
                    "load": measure.loadavg()})
    return out


def ratios(rounds: list[dict], row: str) -> list[float]:
    """b / a per round."""
    return [r["b"][row] / r["a"][row] for r in rounds]


def table(ab: list[dict], aa: list[dict]) -> tuple[list[str], list[dict]]:
    lines = ["| workload | structure | operation | before ns/key (median) | after ns/key (median) | after/before: "
             "median [min-max] | A/A: median [min-max] | verdict |", "|---|---|---|---|---|---|---|---|"]
    records = []
    for row in ab[0]["a"]:
        r_ab, r_aa = ratios(ab, row), ratios(aa, row)
        noise_lo = min(min(r_aa), 1 / max(r_aa))
        noise_hi = max(max(r_aa), 1 / min(r_aa))
        median_ab = statistics.median(r_ab)
        verdict = "within noise" if noise_lo <= median_ab <= noise_hi else (
            "slower beyond noise" if median_ab > noise_hi else "faster beyond noise")
        before = statistics.median(r["a"][row] for r in ab)
        after = statistics.median(r["b"][row] for r in ab)
        workload, structure, op = row.split(" | ")
        lines.append(f"| {workload} | {structure.removeprefix('bloomwise ')} | {op} | {before:.1f} | {after:.1f} | "
                     f"{median_ab:.3f} [{min(r_ab):.3f}-{max(r_ab):.3f}] | {statistics.median(r_aa):.3f} "
                     f"[{min(r_aa):.3f}-{max(r_aa):.3f}] | {verdict} |")
        records.append({"row": row, "before_ns": before, "after_ns": after, "ab_ratios": r_ab, "aa_ratios": r_aa,
                        "noise_band": [noise_lo, noise_hi], "verdict": verdict})
    return lines, records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", type=Path, help="the old source tree (a checkout with its compiled core built)")
    p.add_argument("--after", type=Path, default=AFTER_DEFAULT, help="the new source tree (default: this one)")
    p.add_argument("--rounds", type=int, default=5, help="A/B rounds (default 5)")
    p.add_argument("--aa-rounds", type=int, default=3, help="A/A rounds of the after tree (default 3)")
    p.add_argument("--keys", default="1M", help="keys per workload (default 1M)")
    p.add_argument("--runs", type=int, default=3, help="runs per process; its figure is their median (default 3)")
    p.add_argument("--rows", choices=("plain", "paradox"), default="plain",
                   help="plain: run.py's rows (default); paradox: decisions.py's query/query_many rows")
    p.add_argument("--out", type=Path, default=measure.default_out(False), help="directory for the results")
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # internal: measure this process's package
    args = p.parse_args(argv)
    try:
        n = parse_count(args.keys)
    except ValueError as e:
        p.error(str(e))
    if args.worker:
        (paradox_worker if args.rows == "paradox" else worker)(n, args.runs, args.worker)
        return 0
    if args.before is None:
        p.error("--before is required: the old source tree")
    for tree in (args.before, args.after):
        if not (tree / "src" / "bloomwise").is_dir():
            p.error(f"{tree} is not a bloomwise source tree (expected {tree / 'src' / 'bloomwise'})")
    if args.rounds < 1 or args.aa_rounds < 1 or args.runs < 1:
        p.error("--rounds, --aa-rounds and --runs must be at least 1")
    load_before = measure.loadavg()
    print(f"A/B: before {args.before} ({commit_of(args.before)}), after {args.after} ({commit_of(args.after)}); "
          f"{n:,} keys, {args.runs} runs per process; load {load_before}", flush=True)
    ab = paired_rounds(args.before, args.after, args.rounds, n, args.runs, args.rows, "A/B")
    aa = paired_rounds(args.after, args.after, args.aa_rounds, n, args.runs, args.rows, "A/A")
    lines, records = table(ab, aa)
    meta = measure.run_meta(load_before, before=commit_of(args.before), after=commit_of(args.after), keys=n,
                            runs_per_process=args.runs, rounds=args.rounds, aa_rounds=args.aa_rounds,
                            loads=[r["load"] for r in ab + aa])
    text = "\n".join([
        "# A/B of two source trees: " + ("run.py's single-key and batch rows" if args.rows == "plain" else
                                         "decisions.py's query and query_many rows"), "",
        f"Before: `{meta['before']}`. After: `{meta['after']}`. {n:,} keys, FPR 1%; {args.rounds} A/B rounds and "
        f"{args.aa_rounds} A/A rounds (the after tree against itself), one process per tree per round, the order "
        f"flipping each round; each process's figure is the median of {args.runs} runs. Ratios are after / before "
        "(below 1: the after tree is faster), taken within a round, then their median over the rounds.", "",
        measure.machine_line(meta) + " Load at the end of each round: " + ", ".join(meta["loads"]) + ".", "",
        *lines, ""])
    print(text, flush=True)
    name = "ab-trees" if args.rows == "plain" else "ab-trees-paradox"
    stem = measure.write_results(args.out, name, {"meta": meta, "rows": records, "ab": ab, "aa": aa}, text)
    print(f"wrote {stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
