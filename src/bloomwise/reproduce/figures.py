"""The reproduced figures, drawn like the papers' (same axes, scales and curves), each returned with its caption.

matplotlib (the ``plot`` extra) is imported here only; the object-oriented API is used (no pyplot state).
"""
from __future__ import annotations

import math
import os

import numpy as np

from bloomwise.paradox import min_bits_per_item, posterior
from bloomwise.reproduce.counter_products import FIG8_EXPONENTS, theorem2_posterior
from bloomwise.reproduce.summary_cache import figure4_data
from bloomwise.reproduce.trace import theorem4_cost

__all__ = ["draw_all", "draw_figure4"]


def _figure():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("drawing the figures needs matplotlib: pip install 'bloomwise[plot]'") from None
    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    return fig, fig.add_subplot()


def draw_figure4(axes, data) -> None:
    """Summary Cache's Figure 4 on ``axes``: the false-positive rate ``(1 - e^(-k/b))^k`` against bits per entry b
    on a log scale, for k = 4 and for the best integer k (``data``: :func:`~bloomwise.reproduce.summary_cache.
    figure4_data`)."""
    axes.semilogy(data.bits_per_item, data.fpr_four_hashes, marker="o", markersize=3, label="4 hash functions")
    axes.semilogy(data.bits_per_item, data.fpr_optimal, marker="s", markersize=3,
                  label="optimum (integral) number of hash functions")
    axes.set_xlabel("bits per entry (m/n)")
    axes.set_ylabel("probability of a false positive")
    axes.set_title("Summary Cache, Figure 4: $(1 - e^{-k n/m})^k$")
    axes.grid(True, which="both", linewidth=0.3, alpha=0.6)
    axes.set_xlim(min(data.bits_per_item), max(data.bits_per_item))
    axes.legend()


def fig4(directory):
    fig, ax = _figure()
    draw_figure4(ax, figure4_data(range(1, 33)))
    fig.savefig(os.path.join(directory, "summary_cache_fig4.png"), format="png", dpi=150)
    return "summary_cache_fig4.png", (
        "Summary Cache Fig. 4: false-positive probability (1 - e^(-kn/m))^k against bits per entry m/n, log scale, "
        "for k = 4 (top) and for the best integral k (bottom); computed (bloomwise.plot.plot_figure4 draws the same).")


def _label(ax, xlabel: str, ylabel: str, title: str, *, log_grid: bool = False, legend_fontsize=None) -> None:
    """The papers' dressing of every figure: axis labels, title, a light grid (minor lines too on log axes), legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both" if log_grid else "major", linewidth=0.3, alpha=0.6)
    ax.legend(fontsize=legend_fontsize)


def _save(fig, directory, name) -> str:
    path = os.path.join(directory, name)
    fig.savefig(path, format="png", dpi=130)
    return name


def fig2a(directory):
    fig, ax = _figure()
    priors = np.logspace(-8, 0, 400)
    for fpr in (1e-1, 1e-2, 1e-3, 1e-4, 1e-5):
        ax.loglog(priors, posterior(priors, np.full_like(priors, fpr)), label=f"false positive rate {fpr:g}")
    _label(ax, "a priori set-membership probability Pr(x in S)", "Pr(x in S | BF = 1)",
           "The Bloom Paradox, Fig. 2(a)", log_grid=True, legend_fontsize=8)
    return _save(fig, directory, "bloom_paradox_fig2a.png"), (
        "Bloom paradox Fig. 2(a): the probability that a positive answer is right, P / (P + (1 - P) FPR) "
        "(bloomwise.paradox.posterior), against the prior P for five false-positive rates; computed, not simulated.")


def fig2b(directory):
    fig, ax = _figure()
    priors = np.logspace(-10, -0.05, 400)
    for alpha in (0.1, 1, 10, 100):
        ax.semilogx(priors, [min_bits_per_item(float(p), alpha) for p in priors], label=f"alpha = {alpha:g}")
    _label(ax, "a priori set-membership probability Pr(x in S)", "minimal bits per element m/n",
           "The Bloom Paradox, Fig. 2(b)", log_grid=True)
    return _save(fig, directory, "bloom_paradox_fig2b.png"), (
        "Bloom paradox Fig. 2(b): the bits per element a Bloom filter needs before it is worth asking about a key of "
        "prior P, log2((1 - P)/(alpha P)) / ln 2 (Theorem 1; bloomwise.paradox.min_bits_per_item), for alpha = 0.1, "
        "1, 10, 100; computed. At P = 1e-5 and alpha = 1 it is 23.96, not the 28.7 of the text.")


def fig8(directory, counts):
    fig, ax = _figure()
    products = np.arange(1, 101)
    for e in FIG8_EXPONENTS:
        prior = 2.0 ** -e
        line = ax.plot(products, theorem2_posterior(products, prior, counts.num_counters, counts.num_items,
                                                     counts.num_hashes), label=f"Theorem 2, P = 2^-{e}")[0]
        xs, ys = [], []
        for p in products:
            obs, total = counts.observed(e, int(p))
            if total >= 30:
                xs.append(p)
                ys.append(obs)
        ax.plot(xs, ys, "o", markersize=3, color=line.get_color(), label=f"simulation, P = 2^-{e}")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(0, 100)
    _label(ax, "product of the k = 6 counters", "Pr(x in S | CBF)", "The Bloom Paradox, Fig. 8", legend_fontsize=8)
    return _save(fig, directory, "bloom_paradox_fig8.png"), (
        f"Bloom paradox Fig. 8: the membership probability given the product of a key's k = 6 counters. Points: the "
        f"fraction of members among the keys of prior 2^-3, 2^-5, 2^-7 with that product, pooled over "
        f"{counts.seeds} simulations of the Sec. VIII.A population in a partitioned 4-bit CountingBloomFilter of "
        f"{counts.num_counters} counters (8 per element) (products seen at least 30 times). Lines: Theorem 2.")


def fig9a(directory, runs):
    fig, ax = _figure()
    for k in (4, 5, 6):
        fprs, fnrs = [], []
        for t in [1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 125, 150, 200, 250]:
            f = np.mean([r.rates(k, t)[0] for r in runs])
            g = np.mean([r.rates(k, t)[1] for r in runs])
            fprs.append(f)
            fnrs.append(g)
        ax.plot(fnrs, fprs, "--o", markersize=3, label=f"Selective CBF, k = {k}")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, None)
    _label(ax, "false negative rate", "false positive rate", "The Bloom Paradox, Fig. 9(a) (synthetic stand-in trace)")
    return _save(fig, directory, "bloom_paradox_fig9a.png"), (
        f"Bloom paradox Fig. 9(a): false-positive against false-negative rate of the Selective CBF (30 bits per "
        f"element, 4-bit counters, n = 2^10 stored, N = {runs[0].setup.queried} queried) for k = 4, 5, 6, one point "
        f"per product threshold (answer 'present' iff the product of the counters is at least the threshold; the "
        f"points on the y-axis are the plain CBF). Measured on the synthetic stand-in trace (mean of {len(runs)} "
        f"traces), not on the paper's backbone trace.")


def fig9b(directory, runs):
    fig, ax = _figure()
    alphas = np.array([0.5, 1, 1.5, 2, 2.4, 3, 4, 5, 7.5, 10, 11.5, 15, 20, 30, 40, 50, 75, 100])
    scale = ((1 << 20) - (1 << 10)) / (runs[0].setup.queried - runs[0].setup.stored)
    cbf = np.mean([r.rates(5, 1)[0] * (r.setup.queried - r.setup.stored) * scale for r in runs])
    sel = [np.mean([theorem4_cost(r, 5, a) for r in runs]) for a in alphas]
    ax.semilogx(alphas, np.full(len(alphas), cbf), "-", label="CBF")
    ax.semilogx(alphas, sel, "--o", markersize=3, label="Selective CBF")
    _label(ax, "alpha = W_FN / W_FP", "total cost of N = 2^20 queries",
           "The Bloom Paradox, Fig. 9(b) (synthetic stand-in trace)", log_grid=True)
    return _save(fig, directory, "bloom_paradox_fig9b.png"), (
        "Bloom paradox Fig. 9(b): total cost (#FP + alpha #FN over N = 2^20 queries) of the CBF and of the Selective "
        "CBF against alpha, 30 bits per element, k = 5, Theorem 4's product threshold for prior 2^-10; measured on "
        f"the synthetic stand-in trace (mean of {len(runs)} traces).")


def fig9c(directory, points):
    fig, ax = _figure()
    bpe = [p[0] for p in points]
    ax.semilogy(bpe, [p[1] for p in points], "-o", markersize=3, label="CBF")
    ax.semilogy(bpe, [p[2] for p in points], "--o", markersize=3, label="Selective CBF")
    _label(ax, "bits per element", "total cost of N = 2^20 queries",
           "The Bloom Paradox, Fig. 9(c) (synthetic stand-in trace)", log_grid=True)
    return _save(fig, directory, "bloom_paradox_fig9c.png"), (
        "Bloom paradox Fig. 9(c): total cost of the CBF and the Selective CBF against bits per element at alpha = 5, "
        "each with the integer-k rule's number of hash functions for its counters per element; measured on the "
        "synthetic stand-in trace (one trace per point).")


def draw_all(directory, rep) -> list:
    """Every figure of the run ``rep`` (a :class:`~bloomwise.reproduce.engine.Reproduction`) into ``directory``."""
    os.makedirs(directory, exist_ok=True)
    out = [fig4(directory), fig2a(directory), fig2b(directory)]
    if "fig8" in rep.data:
        out.append(fig8(directory, rep.data["fig8"]))
    if "trace" in rep.data:
        runs = rep.data["trace"]
        out.append(fig9a(directory, runs))
        out.append(fig9b(directory, runs))
    if "fig9c" in rep.data:
        out.append(fig9c(directory, rep.data["fig9c"]))
    return out
