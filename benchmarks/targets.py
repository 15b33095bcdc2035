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
