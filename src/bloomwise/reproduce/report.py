"""Writing a reproduction: ``report.md`` (for people), ``results.json`` (one row per printed number), figures."""
from __future__ import annotations

import json
import math
import os
import platform
from collections import Counter

from bloomwise.reproduce.rows import NOISE_Z, VERDICTS

__all__ = ["machine", "write", "load_rows"]


def machine() -> dict:
    """CPU model, instruction sets the kernels use, cores, Python and numpy versions."""
    import numpy

    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name") and ":" in line:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and ":" in line:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    try:
        from bloomwise._native.bloom import batch_kernels
        kernels = batch_kernels()
    except Exception:  # pragma: no cover - an uncompiled tree
        kernels = "unknown"
    return {"cpu": model, "instruction_sets": sorted(f for f in flags if f in {"sse4_2", "avx", "avx2", "avx512f",
                                                                               "avx512dq", "bmi2"}),
            "batch_kernels": kernels, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": numpy.__version__, "platform": platform.platform()}


def _cell(x) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        if not math.isfinite(x):
            return "n/a"
        return f"{x:.4g}" if x != 0 else "0"
    return str(x)


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def write(out_dir, rep) -> None:
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    s = rep.settings
    counts = Counter(r.verdict for r in rep.rows)
    meta = {"quick": s.quick, "seeds": s.seeds, "heavy_seeds": s.heavy_seeds, "trace_seeds": s.trace_seeds,
            "fig8_seeds": s.fig8_seeds, "trace_hash": s.trace_hash,
            "members_per_type": s.population.members_per_type, "base_seed": s.base_seed}
    doc = {"machine": rep.data.get("machine", {}), "settings": meta,
           "wall_time_s": round(rep.timings.get("total", 0.0), 1),
           "timings_s": {k: round(v, 1) for k, v in rep.timings.items()},
           "verdicts": {v: counts.get(v, 0) for v in VERDICTS},
           "rows": [r.as_dict() for r in rep.rows]}
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as fh:
        fh.write(_markdown(rep, doc))


def _markdown(rep, doc) -> str:
    s = rep.settings
    m = doc["machine"]
    lines = [
        "# bloomwise reproduces its papers",
        "",
        f"`bloomwise reproduce{' --quick' if s.quick else ''} --seeds {s.seeds} --trace-hash {s.trace_hash} --out DIR`"
        " wrote this report, "
        "`results.json` (one row per printed number) and `figures/`.",
        "",
        f"- Machine: {m.get('cpu')} ({m.get('cores')} cores; instruction sets "
        f"{', '.join(m.get('instruction_sets', []))}"
        f"; bloomwise batch kernels: {m.get('batch_kernels')}); Python {m.get('python')}, numpy {m.get('numpy')}.",
        f"- Wall time: {doc['wall_time_s']:.0f} s ("
        + ", ".join(f"{k} {v:.0f} s" for k, v in doc["timings_s"].items() if k != "total")
        + "). The machine may be shared: the time is what this run saw.",
        f"- Seeds: {s.seeds} per cell for the Bloom filter, Selective BF, GBF and CBF columns, {s.heavy_seeds} for "
        f"the RBF column (it finds and clears every false positive of U), {s.fig8_seeds} for Fig. 8, {s.trace_seeds} stand-in traces for "
        f"Sec. VIII.C; population: {s.population.members_per_type} members per type"
        + (" (quick run: NOT the paper's 256; costs scaled by 32 before comparing)" if s.quick else
           " (the paper's set-up)") + ".",
        f"- Verdicts: " + ", ".join(f"{v} {doc['verdicts'][v]}" for v in VERDICTS)
        + f" (of {len(doc['rows'])} rows). `match`: the measured value rounds to the printed one; `within_noise`: "
        f"the printed value is within {NOISE_Z:g} standard deviations of one run of the measurement (two-sided "
        "false-alarm probability 0.27% per row, normal approximation); `differs`: neither, and the note says why; "
        "`misprint`: the paper's own formula or tables give another number.",
        "",
        "## Open points, settled",
        "",
    ]
    lines += _open_points(rep)
    lines += ["", "## Figures", ""]
    for name, caption in rep.figures:
        lines += [f"![{name}](figures/{name})", "", f"*{caption}*", ""]
    lines += ["## Every printed number", ""]
    by_source = {}
    for row in rep.rows:
        by_source.setdefault(row.source, []).append(row)
    for source, rows in by_source.items():
        lines += [f"### {source}", "", "| item | printed | measured | expected | verdict | note |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {_md_escape(r.item)} | {_md_escape(r.printed)} | {_cell(r.measured)} | "
                         f"{_cell(r.expected)} | {r.verdict} | {_md_escape(r.note)} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _open_points(rep) -> list:
    out = []
    implied = rep.data.get("trace_implied")
    if implied:
        p5, a5, t5 = implied[5]
        p6, a6, t6 = implied[6]
        out += [
            "**Sec. VIII.C product thresholds (6 and 10 printed; 56 and 112 from Theorems 2 and 4).** With prior "
            f"2^-10, alpha = 2.4, n = 2^10, m = 7,680 counters, Theorems 2 and 4 give thresholds {t5:.1f} (k = 5) "
            f"and {t6:.1f} (k = 6). The error rates the paper prints next to 6 and 10 (FPR 0.00746 / FNR 0.39258 "
            "and 0.00739 / 0.34766) are those of thresholds 6 and 10, on the stand-in trace and in the exact "
            "expectation (the rows of Sec. VIII.C), so the thresholds were really used; what does not hold is "
            f"their derivation from alpha = 2.4: they are Theorem 4's thresholds for a prior of {p5:.4f} (k = 5) "
            f"and {p6:.4f} (k = 6) at alpha = 2.4, or for alpha = {a5:.1f} and {a6:.1f} at prior 2^-10. At prior "
            "2^-10 and alpha = 2.4, threshold 6 costs (N - n) 0.00746 + 2.4 n 0.39258 = 8,780, more than "
            "answering 'absent' to everything (2.4 n = 2,458).",
            "",
        ]
    out += [
        "**The two insertion-only cells at 8 bits per element** (Table II, alpha = 100 and 5). Both the "
        "measurement and the exact expectation under ideal hashing land about 12% above the paper's cost, because "
        "the paper's FPR there is ~14% below what a filter with that load (n* = 2,816 and 2,048 keys, k = 6) has. "
        "The same shortfall shows in every selective 8-bit cell of the paper while its plain BF at 8 bits matches "
        "ideal hashing; no k, layout or cut-off gives 14% less at that load. The rows keep the verdict the numbers "
        "give, with this note.",
        "",
    ]
    ok = rep.data.get("optimal_k")
    if ok:
        model_best = min(ok, key=lambda k: ok[k][0])
        measured_best = min(ok, key=lambda k: ok[k][1])
        dep = rep.data.get("optimal_k_dependence", {})
        out += [
            "**Is `cbf_optimal_num_hashes` right to give k = 49 in the VIII.C setting?** (m = 7,680 4-bit counters, "
            "n = 1,024, prior 2^-10, alpha = 2.4.) Its model (ideal, independent hashes; the error rates of the "
            "product rule with the counters' saturation at 15 folded into the counter distributions) has its "
            "minimum at k = 49 on a curve that is flat from k ~ 30. Measured with bloomwise's Selective CBF on the "
            "stand-in trace (total cost of N = 2^20 queries; `exact=True` decides with the saturation-aware "
            "binomial posterior):",
            "",
            rep.sections.get("optimal_k", ""),
            "",
            f"Of the k run, the model is lowest at k = {model_best} and the measurement at k = {measured_best}. "
            "Saturation is not what separates them: the saturation-aware posterior measures the same costs "
            "(last column). Independence is: large k put Theorem 4's threshold far in the tail of the product, "
            "where the k counters of a real filter, whose probes are double-hashed (g_i = h + i*step), are "
            "slightly dependent. "
            + (f"At k = {dep['k']} the FPR at the threshold is {dep['real']:.3g} in bloomwise's filters against "
               f"{dep['model']:.3g} in the model, and {dep['shuffled']:.3g} when each probe's counters are shuffled "
               f"across keys (same marginals, no dependence). " if dep else "")
            + "So `cbf_optimal_num_hashes` is right for ideal hashing and the saturation is accounted for; it is "
            "not a good guide to bloomwise's own filters beyond k ~ 20, which its docstring now says. No code "
            "change: the model is not wrong, the hashing is not ideal in that far tail (an independent hash per "
            "probe would be the fix, and would change every counting filter's positions and file format).",
            "",
        ]
    return out


def load_rows(path) -> list:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)["rows"]
