"""Figures of simulation results (the ``plot`` extra: matplotlib), drawn with matplotlib's object API.

``plot_sweep``: one panel per measure (hit ratio, byte hit ratio, inter-proxy queries per request, wire bytes,
total cost, mean latency) against the swept parameter, one line per policy. ``plot_policies``: the same measures
as bars, one per policy.
"""
from __future__ import annotations

import os
from typing import Sequence

__all__ = ["plot_sweep", "plot_policies"]

_MEASURES = (("hit_ratio", "hit ratio"), ("byte_hit_ratio", "byte hit ratio"),
             ("queries_per_request", "inter-proxy queries per request"),
             ("wire_bytes", "wire bytes (queries + summaries)"),
             ("cost", "total cost (queries x tau + origin x omega)"),
             ("mean_latency", "mean latency per request (tau, omega as latencies)"))


def _figure():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("drawing figures needs matplotlib: pip install 'bloomwise[plot]'") from None
    return Figure(figsize=(14, 7), layout="constrained")


def plot_sweep(path, parameter: str, values: Sequence, results: Sequence) -> str:
    """Results of a sweep (``values[i]`` is the parameter value of ``results[i]``) to a PNG file; returns the path."""
    figure = _figure()
    axes = figure.subplots(2, 3).ravel()
    policies = list(dict.fromkeys(r.policy for r in results))
    for ax, (attribute, label) in zip(axes, _MEASURES):
        for policy in policies:
            points = [(v, getattr(r, attribute)) for v, r in zip(values, results) if r.policy == policy]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=policy)
        ax.set_xlabel(parameter)
        ax.set_title(label, fontsize=10)
        if parameter in ("bits-per-entry", "cache-size"):
            ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    axes[0].legend()
    figure.suptitle(f"bloomwise simulate: sweep of {parameter}")
    path = os.fspath(path)
    figure.savefig(path, format="png", dpi=110)
    return path


def plot_policies(path, results: Sequence) -> str:
    """One run's results as bars per policy, to a PNG file; returns the path."""
    figure = _figure()
    axes = figure.subplots(2, 3).ravel()
    names = [r.policy for r in results]
    for ax, (attribute, label) in zip(axes, _MEASURES):
        ax.bar(names, [getattr(r, attribute) for r in results])
        ax.set_title(label, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    figure.suptitle("bloomwise simulate")
    path = os.fspath(path)
    figure.savefig(path, format="png", dpi=110)
    return path
