"""The Speed issue's targets, checked from the figures of one run (ratios within the run, medians)."""
from __future__ import annotations

import math

BLOCKED = "bloomwise blocked"  # the default layout: the targets are about it
RBLOOM = "rbloom"              # with its default (salted) hash: its fastest
CLASSIC_OPTIMUM_1PCT = -math.log(0.01) / math.log(2) ** 2  # 9.585 bits per key for a 1% classic filter


def _median(rec: dict | None, op: str) -> float | None:
    return rec[op]["median"] if rec and op in rec else None


def _cells(data: dict, kinds=None, prefix=None):
    """(workload, fpr, libraries) for each table of the run, filtered by key kind or name prefix."""
    for wname, by_fpr in data["results"].items():
        wl = data["workloads"][wname]
        if kinds and (wl["kind"] not in kinds or wl["filter_bytes"]):
            continue
        if prefix and not wname.startswith(prefix):
            continue
        for fpr, libs in by_fpr.items():
            yield wname, fpr, libs


def _row(target: str, limit: float, unit: str, instances: list[tuple[str, float]], higher=False, note=""):
    """One target: its worst instance decides (the largest value, or the smallest when higher is better)."""
    row = {"target": target, "limit": f"{'>=' if higher else '<='} {limit:g}{unit}",
           "note": note if instances else "", "instances": [{"where": w, "value": v} for w, v in instances]}
    if not instances:
        row.update(status="N/A", measured="not measured: a library unavailable, or left out by --only/--libs")
        return row

    def within(v):
        return v >= limit if higher else v <= limit

    where, worst = (min if higher else max)(instances, key=lambda i: i[1])
    passing = sum(within(v) for _, v in instances)
    row.update(status="PASS" if within(worst) else "FAIL",
               measured=f"worst {worst:.3g}{unit} ({where}); {passing}/{len(instances)} within")
    return row


def _ratios(data, op, kinds, other=RBLOOM):
    out = []
    for wname, fpr, libs in _cells(data, kinds=kinds):
        a, b = _median(libs.get(BLOCKED), op), _median(libs.get(other), op)
        if a is not None and b:
            out.append((f"{wname} {float(fpr):.1%}", a / b))
    return out


def check(data: dict) -> list[dict]:
    rows = []
    for op, what in (("add", "add"), ("query_present", "`in`, present"), ("query_absent", "`in`, absent")):
        rows.append(_row(f"single str {what}: time vs rbloom", 0.6, "x", _ratios(data, op, {"str"})))
    for kind in ("str", "int"):
        rows.append(_row(f"update(list of {kind}) vs rbloom update", 0.6, "x", _ratios(data, "batch_add", {kind})))

    threads = max(data["meta"]["threads"])
    threaded = f"{BLOCKED} threads={threads}"
    for op, limit, what in (("batch_add", 15, "insert"), ("batch_query", 12, "query")):
        inst, speedup = [], []
        for wname, fpr, libs in _cells(data, prefix="numpy"):
            one, many = _median(libs.get(BLOCKED), op), _median(libs.get(threaded), op)
            where = f"{wname} {float(fpr):.1%}"
            if one is not None:
                inst.append((where, one))
                if many:
                    speedup.append((where, one / many))
        note = "" if any(w.startswith("numpy-u64-10M") for w, _ in inst) else "the target is for 10M keys"
        rows.append(_row(f"numpy uint64 blocked {what}, 1 thread", limit, " ns/key", inst, note=note))
        if threads > 1:
            rows.append(_row(f"numpy uint64 blocked {what}: threads={threads} speed-up", 1.4, "x", speedup,
                             higher=True))

    for op, what in (("batch_add", "insert"), ("batch_query", "query")):
        inst = []
        for wname, _fpr, libs in _cells(data, prefix="large"):
            size = wname.split("-", 1)[1]
            value, floor = _median(libs.get(BLOCKED), op), data["floor_ns"].get(size, {}).get("median")
            if value is not None and floor:
                inst.append((f"{wname}: {value:.1f} vs floor {floor:.1f} ns", value / floor))
        rows.append(_row(f"large blocked filter, batch {what} vs random-read floor", 1.5, "x", inst))

    bits = [(f"{wname}: {libs[BLOCKED]['bits_per_key']:.2f} bits/key, FPR {libs[BLOCKED].get('fpr', math.nan):.3%}",
             libs[BLOCKED]["bits_per_key"] / CLASSIC_OPTIMUM_1PCT)
            for wname, fpr, libs in _cells(data, kinds={"str", "int", "u64"})
            if float(fpr) == 0.01 and "bits_per_key" in libs.get(BLOCKED, {})]
    rows.append(_row("blocked bits/key at 1% vs classic optimum (9.585)", 1.06, "x", bits))

    for stmt in ("import bloomwise", "from bloomwise import BloomFilter"):
        t = data["import_ms"].get(stmt)
        rows.append(_row(f"`{stmt}`", 100, " ms", [("median", t["median"])] if isinstance(t, dict) else []))
    return rows


def check_decisions(data: dict, ratios: list[tuple[str, str, str, float]]) -> list[dict]:
    """The targets of benchmarks/decisions.py: each ratio is the median over the runs of the ratio within a run."""
    rows = []
    measured = data["ratios"]
    for target, _num, _den, limit in ratios:
        inst = [("median of runs", measured[target]["median"])] if target in measured else []
        rows.append(_row(target, limit, "x", inst))
    name = "class prior query_many beyond the classifier vs contains_many"
    inst = [("median of runs", measured[name]["median"])] if name in measured else []
    rows.append(_row("query_many with a ClassPrior: time beyond the classifier vs the plain batch", 2.0, "x", inst))
    growth = data["figures"].get("non-ASCII bloomwise: update RSS growth MiB")
    keys = data["meta"]["keys"]
    inst = [(f"{keys:,} keys", growth["median"])] if growth else []
    rows.append(_row("non-ASCII update: resident memory left behind (a UTF-8 copy per key would be ~70 MiB per 1M)",
                     max(1.0, keys / 1e6), " MiB", inst))
    return rows


def check_scalable(data: dict, limit: float) -> list[dict]:
    """The targets of benchmarks/scalable.py (each ratio the median over the runs of the ratio within a run): add and
    `in` of the scalable filter (10 stages) within ``limit`` times the single filter's (the issue's row), and its
    batches no slower than the floor, 10 plain filters of the stages' sizes queried in turn."""
    rows = []
    measured = data["ratios"]
    for op in ("add", "in present", "in absent"):
        name = f"{op}: scalable / single"
        inst = [("median of runs", measured[name]["median"])] if name in measured else []
        rows.append(_row(f"ScalableBloomFilter {op} (10 stages) vs BloomFilter", limit, "x", inst))
    for op in ("contains_many str", "contains_many u64"):
        name = f"{op}: scalable / floor"
        inst = [("median of runs", measured[name]["median"])] if name in measured else []
        rows.append(_row(f"ScalableBloomFilter {op} vs 10 plain filters queried in turn", 1.0, "x", inst))
    return rows


def check_counting_batch(data: dict, kinds, kind_names: dict, default: str, peer: str, limit: float) -> list[dict]:
    """The targets of benchmarks/counting_batch.py: the default CountingBloomFilter.update time / fastbloom-rs's
    batch insert, per key kind (the median over the runs of the ratio within a run)."""
    rows = []
    for kind in kinds:
        ratio = data["ratios"].get(f"{kind}: {default} / {peer}")
        inst = [(f"{data['meta']['keys']:,} keys, median of runs", ratio["median"])] if ratio else []
        rows.append(_row(f"counting update vs fastbloom-rs, {kind_names[kind]}", limit, "x", inst))
    return rows


def check_threads_by_kernel_set(data: dict) -> list[dict]:
    """The Speed issue's threads row, once per kernel set of the run (benchmarks/run.py --kernels): blocked
    ``update(numpy uint64, threads=N) / threads=1``, at least 1.4x. Each instance is the median over the runs of the
    ratio within a run (the two calls alternate in every run); the other sets' rows carry the tag " [set]"."""
    import statistics

    meta = data["meta"]
    threads = max(meta["threads"])
    sets = meta.get("kernel_sets") or [meta.get("batch_kernels", "?")]
    rows = []
    for i, kernels in enumerate(sets):
        tag = "" if i == 0 else f" [{kernels}]"
        one, many = BLOCKED + tag, f"{BLOCKED} threads={threads}" + tag
        inst, work, cores = [], [], []
        for wname, fpr, libs in _cells(data, prefix="numpy"):
            a, b = (libs.get(name, {}).get("batch_add") for name in (one, many))
            if a and b and threads > 1:
                ratios = [x / y for x, y in zip(a["runs"], b["runs"]) if y]
                inst.append((f"{wname} {float(fpr):.1%}", statistics.median(ratios)))
            ca, cb = (libs.get(name, {}).get("batch_add_cpu") for name in (one, many))
            if a and b and ca and cb and threads > 1:
                work.append(statistics.median([y / x for x, y in zip(ca["runs"], cb["runs"]) if x]))
                cores.append(statistics.median([c / w for c, w in zip(cb["runs"], b["runs"]) if w]))
        notes = [] if any(w.startswith("numpy-u64-10M") for w, _ in inst) else ["the target is for 10M keys"]
        if work:  # what threading adds to the work, and how many cores the threaded call got (CPU / wall time)
            busy = " (about 1: the machine was busy, the ratio says little)" if min(cores) < 1.5 else ""
            notes.append(f"CPU time threads={threads} / threads=1: {max(work):.2f}x; cores the threaded call got "
                         f"(CPU / wall time): {min(cores):.2f}-{max(cores):.2f}{busy}")
        note = "; ".join(notes)
        row = _row(f"update(numpy uint64, threads={threads}) / threads=1, blocked", 1.4, "x", inst, higher=True,
                   note=note)
        rows.append({"kernels": kernels, **row})
    return rows


def check_persistence(data: dict) -> list[dict]:
    """The targets of benchmarks/persistence.py: load() (checksum verified) per byte against reading the file into
    a preallocated buffer, the median over the runs of the ratio within a run; and the memory one load adds."""
    ratio = data["ratios"].get("bloomwise load")
    inst = [(f"{data['meta']['mib']} MiB, median of runs", ratio["median"])] if ratio else []
    rows = [_row("load (verify) <= 1.3x reading the file", 1.3, "x", inst)]
    grew = data.get("load_rss_growth")
    inst = [(f"{data['meta']['mib']} MiB", grew)] if grew is not None else []
    rows.append(_row("load: peak resident memory added, vs the payload (a second copy would be 2x)", 1.1, "x", inst))
    return rows
