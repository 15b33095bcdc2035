"""Markdown and JSON output: one results file per machine (the latest run; older runs are in git history) and the
raw numbers."""
from __future__ import annotations

import json
import os
from pathlib import Path

import measure

COLUMNS = (  # (record key, header); the first seven are ns per key
    ("add", "add"),
    ("query_present", "`in` present"),
    ("query_absent", "`in` absent"),
    ("batch_add_cold", "update, first touch"),
    ("batch_add", "update"),
    ("batch_query_cold", "batch query, first call"),
    ("batch_query", "batch query"),
    ("fpr", "FPR"),
    ("bits_per_key", "bits/key"),
    ("filter_mib", "filter MiB"),
    ("peak_mib", "peak MiB"),
)
RATIO_KEYS = ("add", "query_present", "query_absent", "batch_add_cold", "batch_add", "batch_query_cold", "batch_query",
              "bits_per_key", "peak_mib")


def num(x: float) -> str:
    """Three significant figures, thousands separated: 0.0123 -> "0.0123", 38.14 -> "38.1", 1234 -> "1,234"."""
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def value(rec: dict, key: str) -> float | None:
    v = rec.get(key)
    return v["median"] if isinstance(v, dict) else v


def spread_text(v: dict, spread: bool) -> str:
    """A figure measured over runs: "38.1 [36.9–40.2]" (median [min–max]), or its median alone."""
    text = num(v["median"])
    return f"{text} [{num(v['min'])}–{num(v['max'])}]" if spread and len(v["runs"]) > 1 else text


def cell(rec: dict, key: str, spread: bool) -> str:
    if "unavailable" in rec:
        return "n/a"
    v = rec.get(key)
    if v is None:
        return "error" if key in rec.get("errors", {}) else "—"
    if isinstance(v, dict):
        return spread_text(v, spread)
    if key == "fpr":
        fn = rec.get("false_negatives", 0)
        return f"{v:.3%}" + (f" **{fn:,} false negatives**" if fn else "")
    return num(v)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def best_peers(libs: dict, peers: list[str]) -> dict[str, tuple[str, float]]:
    """For each figure, the best (smallest) value among the peers and whose it is."""
    best = {}
    for key in RATIO_KEYS:
        offers = [(value(rec, key), name) for name, rec in libs.items() if name in peers and value(rec, key)
                  and (key != "peak_mib" or value(rec, key) >= 1)]  # a peak under 1 MiB is noise
        if offers:
            v, name = min(offers)
            best[key] = (name, v)
    return best


def workload_table(libs: dict, peers: list[str], spread: bool, floor: float | None) -> str:
    """One workload at one FPR: a row per library; under each bloomwise row, its ratios to the best peer
    (and, for a large filter, to the random-read floor)."""
    best = best_peers(libs, peers)
    # the columns some library has a figure (or an error) for; all of them if nothing ran at all
    columns = [c for c in COLUMNS if any(c[0] in rec or c[0] in rec.get("errors", {}) for rec in libs.values())]
    columns = columns or list(COLUMNS)
    rows = []
    for name, rec in libs.items():
        label = f"**{name}**" if name.startswith("bloomwise") else name
        if rec.get("kernels") and f"[{rec['kernels']}]" not in name:  # every bloomwise row names its kernel set
            label += f" [{rec['kernels']}]"
        rows.append([label] + [cell(rec, key, spread) for key, _ in columns])
        if not name.startswith("bloomwise") or "unavailable" in rec:
            continue
        ratio = []
        for key, _ in columns:
            mine, theirs = value(rec, key), best.get(key)
            ratio.append(f"{mine / theirs[1]:.2f}× {theirs[0]}" if mine and theirs and key in RATIO_KEYS else "")
        if any(ratio):  # no row when no peer was measured (--libs bloomwise)
            rows.append(["↳ vs best peer"] + ratio)
        if floor:
            rows.append(["↳ vs floor"] + [f"{value(rec, key) / floor:.2f}×" if value(rec, key) and key in
                                          ("batch_add", "batch_query") else "" for key, _ in columns])
    notes = [f"- {name}: {rec['unavailable']}" for name, rec in libs.items() if "unavailable" in rec]
    notes += [f"- {name}, {op}: {err}" for name, rec in libs.items() for op, err in rec.get("errors", {}).items()]
    return _table(["library"] + [h for _, h in columns], rows) + ("\n\n" + "\n".join(notes) if notes else "")


DESCRIPTIONS = {
    "str-key": 'str keys `f"key{{i}}"`',
    "str-url": "str keys: realistic URLs of about 45–80 characters",
    "int": "Python int keys, pseudo-random in [0, 2**63)",
    "numpy": "a numpy uint64 array (the same values as the int keys); batch calls only. "
             "Peers that take no numpy arrays get `keys.tolist()` inside the timed call",
    "large": "a filter sized to {size}, holding only {n:,} uint64 keys (so its FPR and bits/key mean nothing); "
             "batch calls only. It measures random memory access against the machine's floor: {floor} ns per "
             "random read",
}


def markdown(data: dict, json_name: str) -> str:
    meta, m = data["meta"], data["meta"]["machine"]
    spread = meta["runs"] > 1
    out = [f"# bloomwise benchmarks: {meta['date']}, {m['cpu']}, {m['cpus']} CPUs", ""]
    if meta["quick"]:
        out += ["> **Quick run** (small sizes, one run): a smoke test of the harness, not figures to cite.", ""]
    out += [
        f"`{meta['command']}` in {meta['wall_s'] / 60:.1f} min. Times are **ns per key**, "
        + (f"the median of {meta['runs']} runs [min–max]" if spread else "from one run") + ". Ratios (×) compare "
        "figures of this one run: bloomwise's figure divided by the best peer's (below 1 is better). Peers: "
        f"{', '.join(meta['peers'])}; `set` is shown for reference only. "
        "What each figure means: `benchmarks/README.md`. "
        f"Raw numbers: `{json_name}`.",
        "",
        _table(["machine", ""], [
            ["CPU", f"{m['cpu']} ({m['cpu_id']}), {m['cpus']} CPUs, {m['caches']}"
                    + (", AVX-512" if m["avx512"] else "")],
            ["OS", f"Linux {m['kernel']}, transparent huge pages: {m['thp']}"],
            ["Python", f"{m['python']}, numpy {m['numpy']}"],
            ["libraries", ", ".join(f"{k} {v}" for k, v in meta["versions"].items())],
            ["bloomwise batch kernels", kernels_text(meta)],
            ["load average", f"{meta['load_before']} before, {meta['load_after']} after (shared machine)"],
            ["peak memory", meta["peak_memory_method"]],
        ]),
        "",
        "## Targets of the Speed issue",
        "",
        _table(["target", "kernels", "limit", "measured", "status"],
               [[t["target"], t.get("kernels", "?"), t["limit"],
                 t["measured"] + (f" ({t['note']})" if t["note"] else ""), f"**{t['status']}**"]
                for t in data["targets"]]),
        "",
        "## Machine floor: independent random cache-line reads (numpy gather), ns per read",
        "",
        _table(["working set", "ns per read"],
               [[size, spread_text(v, spread)] for size, v in data["floor_ns"].items()]),
        "",
        "## Import time: fresh interpreter, start-up excluded, ms",
        "",
        _table(["statement", "ms"], [[f"`{s}`", spread_text(v, spread) if isinstance(v, dict) else f"failed: {v}"]
                                     for s, v in data["import_ms"].items()]),
    ]
    for wname, by_fpr in data["results"].items():
        wl = data["workloads"][wname]
        kind = next(k for k in DESCRIPTIONS if wname.startswith(k))
        size = wname.split("-", 1)[1]
        floor = data["floor_ns"].get(size, {}).get("median") if wl["filter_bytes"] else None
        desc = DESCRIPTIONS[kind].format(size=size, n=wl["n"], floor=num(floor) if floor else "?")
        for fpr, libs in by_fpr.items():
            out += ["", f"## {wname}, target FPR {float(fpr):.1%}", "",
                    f"{wl['n']:,} present keys, {wl['n_absent']:,} absent keys: {desc}.", "",
                    workload_table(libs, meta["peers"], spread, floor)]
    return "\n".join(out) + "\n"


def kernels_text(meta: dict) -> str:
    """The run's kernel sets: the primary one (every workload), then the others (numpy workloads, bloomwise only)."""
    sets = meta.get("kernel_sets") or [meta.get("batch_kernels", "?")]
    text = f"{sets[0]} (every workload)"
    if len(sets) > 1:
        text += "; " + ", ".join(sets[1:]) + " (numpy workloads, bloomwise again: its rows tagged [set])"
    return text


def targets_text(rows: list[dict]) -> str:
    width = max(len(r["target"]) for r in rows)
    return "\n".join(f"{r['status']:4}  {r['target']:{width}}  {r.get('kernels', '?'):11}  {r['limit']:>14}  "
                     f"{r['measured']}"
                     + (f" ({r['note']})" if r["note"] else "") for r in rows)


def console_rows(libs: dict) -> str:
    """A plain-text table of the medians, printed as the run goes."""
    lines = []
    for name, rec in libs.items():
        if "unavailable" in rec:
            lines.append(f"   {name:28} unavailable: {rec['unavailable']}")
            continue
        figures = "  ".join(f"{h.replace('`', '')} {num(value(rec, k))}" for k, h in COLUMNS if value(rec, k))
        errors = f"  errors: {rec['errors']}" if rec.get("errors") else ""
        lines.append(f"   {name:28} {figures}{errors}")
    return "\n".join(lines)


def _write(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write(data: dict, out_dir: Path) -> list[Path]:
    """``<cpu>-<cpus>cpu[-quick].md`` and ``.json``: each run replaces the machine's previous one (the date is
    inside; older runs live in git history)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    m = data["meta"]["machine"]
    stem = f"{measure.cpu_slug(m)}-{m['cpus']}cpu" + ("-quick" if data["meta"]["quick"] else "")
    text = markdown(data, f"{stem}.json")
    return [_write(out_dir / f"{stem}.md", text),
            _write(out_dir / f"{stem}.json", json.dumps(data, indent=1, sort_keys=False) + "\n")]
