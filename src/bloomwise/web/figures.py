"""The page's plots, drawn as SVG by the server from the library's numbers.

matplotlib's pyplot keeps global state and is not thread-safe; these functions use the object-oriented ``Figure``
API only, and draw under one lock, so the server can call them from worker threads. Each returns the SVG text.

- :func:`fpr_figure`: the false-positive rate against bits per key, for each layout at the plan's k and for the
  best integer k (classic), with the plan marked.
- :func:`posterior_figure`: Fig. 2(a) of *The Bloom Paradox* (Rottenstreich and Keslassy): the posterior after a
  positive answer against the prior, for several false-positive rates, with the current point marked.
- :func:`bits_figure`: Fig. 2(b): the bits per key needed to avoid the paradox against the prior, for
  alpha = 0.1, 1, 10, 100 and the current alpha, with the current point marked.
- :func:`counting_figure`: Theorem 2: a counting filter's posterior against the product of the key's counters.
"""
from __future__ import annotations

import io
import math
import threading

import numpy as np

from bloomwise import paradox, theory

__all__ = ["fpr_figure", "posterior_figure", "bits_figure", "counting_figure"]

_LOCK = threading.Lock()
_STYLE = {"svg.fonttype": "none", "svg.hashsalt": "bloomwise", "font.size": 9, "axes.titlesize": 10,
          "font.family": "sans-serif", "axes.spines.top": False, "axes.spines.right": False}
_COLOURS = {"classic": "#1f5fa8", "partitioned": "#d0782a", "blocked": "#2e8b57", "best": "#7a7a7a",
            "mark": "#c0392b", "current": "#1f5fa8"}
_SIZE = (6.0, 3.6)


def _render(draw, size=_SIZE) -> str:
    """Run ``draw(axes)`` on a fresh Figure of ``size`` inches and return the SVG (under the module's lock)."""
    import matplotlib
    from matplotlib.figure import Figure

    with _LOCK, matplotlib.rc_context(_STYLE):
        figure = Figure(figsize=size)
        figure.subplots_adjust(left=0.9 / size[0], right=1 - 0.2 / size[0], bottom=0.14, top=0.91)
        axes = figure.add_subplot()
        draw(axes)
        axes.grid(True, which="major", linewidth=0.4, alpha=0.5)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": "bloomwise"})
    return buffer.getvalue()


def _mark(axes, x: float, y: float, label: str) -> None:
    axes.plot([x], [y], marker="o", markersize=8, color=_COLOURS["mark"], zorder=5, linestyle="none", label=label)


def fpr_figure(result: theory.Plan) -> str:
    """FPR against bits per key m/n for the three layouts with the plan's k, and the best integer k (classic)."""
    n = result.n
    b_now = result.bits_per_key
    upper = max(32.0, math.ceil(b_now * 1.25))
    grid = np.unique(np.concatenate([np.linspace(1.0, upper, 64), [b_now]]))
    k = result.k
    curves = {}
    for layout in theory.LAYOUTS:
        if layout == "blocked" and k > theory.MAX_BLOCKED_HASHES:
            continue
        ys = []
        for b in grid:
            m = max(k, int(round(b * n)))
            if layout == "blocked":
                m = max(theory.BLOCK_BITS, -(-m // theory.BLOCK_BITS) * theory.BLOCK_BITS)
            ys.append(theory.false_positive_rate(m, n, k, layout=layout))
        curves[layout] = np.array(ys)
    best = []
    for b in grid:
        m = max(1, int(round(b * n)))
        best.append(theory.false_positive_rate(m, n, theory.optimal_num_hashes(m, n)))
    floor = 1e-300

    def draw(axes):
        for layout, ys in curves.items():  # classic drawn wide below partitioned: the two nearly coincide
            axes.semilogy(grid, np.maximum(ys, floor), color=_COLOURS[layout],
                          linewidth=3.5 if layout == "classic" else 1.5, alpha=0.45 if layout == "classic" else 1.0,
                          label=f"{layout}, k = {k}")
        axes.semilogy(grid, np.maximum(best, floor), color=_COLOURS["best"], linewidth=1.0, linestyle="--",
                      label="classic, best integer k")
        if result.fpr is not None:
            _mark(axes, b_now, max(result.fpr, floor), f"this plan ({result.layout}): {b_now:.2f} bits/key")
        low = min(float(np.min(c)) for c in curves.values()) if curves else 1e-12
        axes.set_ylim(max(low, 1e-30), 1.0)
        axes.set_xlim(1.0, upper)
        axes.set_xlabel("bits per key (m / n)")
        axes.set_ylabel("false-positive rate")
        axes.set_title(f"False-positive rate with n = {n:,} keys")
        axes.legend(fontsize=8, loc="lower left")

    return _render(draw, size=(8.4, 3.6))


def posterior_figure(prior: float, fpr: float) -> str:
    """Fig. 2(a): Pr(x in S | positive) against the prior, for FPR = 10^-1 .. 10^-4 and the current FPR."""
    priors = np.logspace(-8, 0, 161)
    lines = [(rate, f"FPR = {rate:g}") for rate in (1e-1, 1e-2, 1e-3, 1e-4)]

    def draw(axes):
        for rate, label in lines:
            axes.loglog(priors, paradox.posterior(priors, rate), linewidth=1.0, color=_COLOURS["best"],
                        alpha=0.5 + 0.1 * math.log10(1 / rate))
            y = float(paradox.posterior(1e-7, rate))
            axes.annotate(label, (1e-7, y), textcoords="offset points", xytext=(2, 3), fontsize=7,
                          color="#555555")
        axes.loglog(priors, paradox.posterior(priors, fpr), linewidth=2.0, color=_COLOURS["current"],
                    label=f"this filter: FPR = {fpr:.3g}")
        _mark(axes, prior, paradox.posterior(prior, fpr), f"prior {prior:.3g}")
        axes.set_xlim(1e-8, 1.0)
        axes.set_ylim(1e-8, 1.5)
        axes.set_xlabel("a-priori membership probability Pr(x ∈ S)")
        axes.set_ylabel("Pr(x ∈ S | filter says yes)")
        axes.set_title("Fig. 2(a): a positive answer's correctness")
        axes.legend(fontsize=8, loc="lower right")

    return _render(draw)


def bits_figure(prior: float, alpha: float, bits_per_key: float) -> str:
    """Fig. 2(b): the bits per key needed to avoid the paradox against the prior, for several alpha."""
    priors = np.logspace(-10, 0, 201)[:-1]
    alphas = [a for a in (0.1, 1.0, 10.0, 100.0) if not math.isclose(a, alpha)]

    def needed(a):
        return np.array([paradox.min_bits_per_item(float(p), a) for p in priors])

    def draw(axes):
        for a in alphas:
            axes.semilogx(priors, needed(a), linewidth=1.0, color=_COLOURS["best"], linestyle="--")
            y = paradox.min_bits_per_item(1e-3, a)
            axes.annotate(f"α = {a:g}", (1e-3, y), textcoords="offset points", xytext=(3, 3), fontsize=7,
                          color="#555555")
        current = needed(alpha)
        axes.semilogx(priors, current, linewidth=2.0, color=_COLOURS["current"], label=f"α = {alpha:g}")
        axes.fill_between(priors, 0, current, color=_COLOURS["mark"], alpha=0.07,
                          label=f"paradox region for α = {alpha:g}")
        _mark(axes, prior, bits_per_key, f"prior {prior:.3g}, {bits_per_key:g} bits/key")
        axes.set_xlim(1e-10, 1.0)
        top = max(paradox.min_bits_per_item(1e-10, min([alpha, *alphas])), bits_per_key) * 1.05
        axes.set_ylim(0, top)
        axes.set_xlabel("a-priori membership probability Pr(x ∈ S)")
        axes.set_ylabel("bits per key needed (m / n)")
        axes.set_title("Fig. 2(b): where the Bloom paradox ends")
        axes.legend(fontsize=8, loc="upper right")

    return _render(draw)


def _counter_rows(k: int, saturated: int) -> np.ndarray:
    """Counter vectors whose products 1 .. saturated^k are spread over a log scale: ``[s]*a + [c] + [1]*rest``
    (c takes every value up to 64, else 64 values spaced evenly on a log scale)."""
    levels = range(1, saturated + 1) if saturated <= 64 else np.unique(np.round(np.geomspace(1, saturated, 64)))
    rows = []
    for a in range(k):
        for c in levels:
            rows.append([saturated] * a + [c] + [1] * (k - a - 1))
    return np.array(rows, dtype=np.int64)


def counting_figure(counting: dict, prior: float, alpha: float) -> str:
    """Theorem 2: the posterior against the product of the key's k counters (values 1 .. 2^counter_bits - 1), and
    Theorem 4's line."""
    k, m, n = counting["k"], counting["m"], counting["n"]
    rows = _counter_rows(k, 2 ** counting["counter_bits"] - 1)
    products = np.prod(rows.astype(np.float64), axis=1)
    order = np.argsort(products, kind="stable")
    chances = paradox.cbf_posterior(rows, m, n, prior)
    threshold = paradox.decision_threshold(alpha)

    def draw(axes):
        axes.loglog(products[order], chances[order], linewidth=2.0, color=_COLOURS["current"],
                    label=f"posterior, k = {k}, m = {m:,}, n = {n:,}")
        axes.axhline(threshold, color=_COLOURS["partitioned"], linestyle="--", linewidth=1.2,
                     label=f"decide present above 1/(1+α) = {threshold:.3g}")
        if counting["product"] > 0:
            _mark(axes, counting["product"], counting["posterior"],
                  f"counters {', '.join(map(str, counting['counters']))}")
        positive = chances[chances > 0]
        low = float(np.min(positive)) if positive.size else 1e-6
        axes.set_ylim(max(min(low, threshold) / 3.0, 1e-300), 1.5)
        axes.set_xlabel(f"product of the key's {k} counters")
        axes.set_ylabel("Pr(x ∈ S | counters)")
        axes.set_title(f"Theorem 2: counting filter, prior {prior:.3g}")
        axes.legend(fontsize=8, loc="upper left")

    return _render(draw)
