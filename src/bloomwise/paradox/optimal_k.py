"""How many hash functions a selective counting filter should use (section V.C of the Bloom-paradox paper).

Source: Rottenstreich and Keslassy, *The Bloom Paradox*, section V.C. A plain filter picks ``k ~ ln2 m/n`` to minimise
its FPR; a selective CBF minimises the expected cost of its decisions instead, and that k can differ (the paper's
trace-driven example: k = 6 beats the FPR-optimal k = 5 for alpha = 2.4).

Model (the paper's): the partitioned layout, one slice of ``m/k`` counters per hash function, so a counter of a key
not in S holds ``Bin(n, k/m)`` keys and a counter of a member ``1 + Bin(n - 1, k/m)``, independently over the k slices;
counters saturate at ``2**counter_bits - 1``. The decision is the Selective CBF's: "present" iff the Theorem 2
posterior is at least ``1 / (alpha + 1)`` (Theorem 4), i.e. iff the product of the counters is at least

    Pi(P, k) = (1 - P) / (alpha P) * (n k / m)^k.

For a key of prior P this gives ``fpr(P) = Pr(prod >= Pi | not in S)`` and ``fnr(P) = Pr(prod < Pi | in S)``, and
the expected cost per query is ``E(k) = sum_x P_Q(x) [(1 - P(x)) fpr(P(x)) W_FP + P(x) fnr(P(x)) W_FN]``. (The paper
writes the same sum over the values of the product with one distribution of the product for all keys, that of a
random counter; conditioning on membership as here is exact, and the two agree as P -> 0.)
"""
from __future__ import annotations

import math

import numpy as np

from bloomwise._checks import check_closed_probability, check_integer
from bloomwise.paradox import _validate
from bloomwise.paradox._support import as_cost
from bloomwise.paradox.posterior import log_binom_pmf, log_binom_tail

__all__ = ["cbf_error_rates", "cbf_expected_cost", "cbf_optimal_num_hashes"]

_PRUNE = 1e-17  # product states lighter than this are dropped (their total mass bounds the error)


def counter_pmf(trials: int, p: float, offset: int, saturation: int) -> np.ndarray:
    """pmf of ``offset + Bin(trials, p)`` over 0..saturation, the last value holding the whole upper tail."""
    c = np.arange(saturation + 1)
    pmf = np.exp(log_binom_pmf(c - offset, trials, p))
    pmf[saturation] = math.exp(log_binom_tail(saturation - offset, trials, p)) if saturation - offset > 0 else 1.0
    if saturation - offset <= 0:
        pmf[:saturation] = 0.0
    return pmf


_EXACT_STATE_BUDGET = 200_000  # distinct products tracked exactly; beyond, a fine log grid is used
_GRID_BINS = 1 << 20


def product_tails(pmf: np.ndarray, k: int, thresholds: np.ndarray) -> np.ndarray:
    """``Pr(c_1 * ... * c_k >= t, all c_j >= 1)`` for each t, the c_j iid with the given pmf over 0..len(pmf)-1."""
    values = np.flatnonzero(pmf[1:] > _PRUNE) + 1  # counter values that matter (0 makes the product 0)
    weights = pmf[values]
    t = np.where(np.isfinite(thresholds), np.maximum(thresholds, 0.0), np.inf)
    out = _product_tails_exact(values, weights, k, t)
    if out is None:
        out = _product_tails_grid(values, weights, k, t)
    out[~np.isfinite(t)] = 0.0
    return np.clip(out, 0.0, 1.0)


def _product_tails_exact(values, weights, k, t):
    """Exact integer products, those at or above the largest threshold lumped together; None if too many."""
    finite = t[np.isfinite(t)]
    cap = math.ceil(max(1.0, float(finite.max()))) if finite.size else 1
    if cap > 1 << 62:
        return None
    vals = np.array([1], dtype=np.int64)
    probs = np.array([1.0])
    limits = cap // values
    for _ in range(k):
        new_vals = np.empty((len(values), len(vals)), dtype=np.int64)
        for i, c in enumerate(values.tolist()):
            over = vals > limits[i]  # then vals * c > cap: lump at cap (and never overflow)
            new_vals[i] = np.where(over, cap, np.minimum(vals * c, cap))
        new_probs = np.outer(weights, probs).ravel()
        keep = new_probs > _PRUNE
        vals, inverse = np.unique(new_vals.ravel()[keep], return_inverse=True)
        probs = np.bincount(inverse.reshape(-1), weights=new_probs[keep], minlength=len(vals))
        if len(vals) > _EXACT_STATE_BUDGET:
            return None
    tail = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])  # tail[i] = Pr(prod >= vals[i]); vals sorted
    idx = np.searchsorted(vals, np.where(np.isfinite(t), np.ceil(t - 1e-9 * np.maximum(t, 1.0)), np.inf))
    return tail[np.minimum(idx, len(vals))]


def _product_tails_grid(values, weights, k, t):
    """The log of the product on a grid of 2^20 bins over [0, k log c_max] (for large k or huge thresholds): each
    log c is rounded to the grid, so only products within about k/2 bins of a threshold can be misplaced."""
    logs = np.log(values.astype(np.float64))
    width = max(k * float(logs.max()), 1e-12) / _GRID_BINS
    shifts = np.rint(logs / width).astype(np.int64)
    dist = np.zeros(int(k * shifts.max()) + 1)
    dist[0] = 1.0
    length = 1
    for _ in range(k):
        new = np.zeros_like(dist)
        for s, w in zip(shifts.tolist(), weights.tolist()):
            new[s:s + length] += w * dist[:length]
        length += int(shifts.max())
        dist = new
    tail = np.concatenate([np.cumsum(dist[::-1])[::-1], [0.0]])
    with np.errstate(divide="ignore"):
        idx = np.ceil(np.log(np.where(t > 0, t, 1.0)) / width - 1e-9)
    idx = np.where(np.isfinite(t), np.clip(idx, 0, len(dist)), len(dist)).astype(np.int64)
    return tail[idx]


def _check_common(num_hashes, num_counters, num_items, counter_bits):
    k = check_integer("num_hashes", num_hashes, 1)
    m = check_integer("num_counters", num_counters, 1)
    n = check_integer("num_items", num_items, 1)
    bits = check_integer("counter_bits", counter_bits, 1)
    if bits > 16:
        raise ValueError(f"counter_bits must be <= 16, got {counter_bits!r}")
    if k > m:
        raise ValueError(f"num_hashes must be <= num_counters ({m}), got {num_hashes!r}")
    return k, m, n, bits


def error_rates(k, m, n, bits, priors, alpha):
    p = k / m
    saturation = (1 << bits) - 1
    # counters above ~mean + 40 sd are irrelevant; keep the saturation value (it carries the tail)
    top = min(saturation, int(n * p + 40 * math.sqrt(n * p + 1) + 40))
    pmf0 = counter_pmf(n, p, 0, saturation)
    pmf1 = counter_pmf(n - 1, p, 1, saturation)
    if top < saturation:  # fold the negligible values into the last kept one
        pmf0 = np.concatenate([pmf0[:top], [pmf0[top:].sum()]])
        pmf1 = np.concatenate([pmf1[:top], [pmf1[top:].sum()]])
    with np.errstate(divide="ignore"):
        thresholds = np.where(priors > 0, (1.0 - priors) / (alpha * priors), np.inf) * (n * k / m) ** k
    fpr = product_tails(pmf0, k, thresholds)
    fnr = 1.0 - product_tails(pmf1, k, thresholds)
    return fpr, np.clip(fnr, 0.0, 1.0)


def cbf_error_rates(num_hashes: int, num_counters: int, num_items: int, prior: float, cost, *,
                    counter_bits: int = 4) -> tuple[float, float]:
    """False-positive and false-negative rates of a Selective CBF for keys of one prior (section V.C model).

    :param num_hashes: ``k >= 1``.
    :param num_counters: ``m``, counters in all slices together.
    :param num_items: ``n >= 1``, keys in the filter.
    :param prior: ``P = Pr(x in S)`` of the keys.
    :param cost: a CostModel or ``alpha``.
    :param counter_bits: counters saturate at ``2**counter_bits - 1`` (4 in the paper).
    :returns: ``(fpr, fnr)``: ``Pr(answer present | not in S)`` and ``Pr(answer absent | in S)``.

    Table III, 16 bits per key (4 counters of 4 bits) at alpha = 5: keys of prior 2^-3 are answered like a plain CBF
    (any non-zero counters suffice), keys of prior 2^-10 almost never "present":

    >>> [round(rate, 4) for rate in cbf_error_rates(3, 13312, 3328, 2**-3, 5)]
    [0.1469, 0.0]
    >>> [round(rate, 4) for rate in cbf_error_rates(3, 13312, 3328, 2**-10, 5)]
    [0.0, 1.0]
    """
    k, m, n, bits = _check_common(num_hashes, num_counters, num_items, counter_bits)
    pr = check_closed_probability("prior", prior)
    alpha = as_cost(cost).alpha
    fpr, fnr = error_rates(k, m, n, bits, np.array([pr]), alpha)
    return float(fpr[0]), float(fnr[0])


def cbf_expected_cost(num_hashes: int, num_counters: int, num_items: int, priors, cost, *, weights=None,
                      counter_bits: int = 4) -> float:
    """``E(k)``: the expected cost per query of a Selective CBF with ``num_hashes`` hash functions (section V.C).

    :param num_hashes: ``k >= 1``.
    :param num_counters: ``m``, counters in all slices together.
    :param num_items: ``n >= 1``, keys in the filter.
    :param priors: the a-priori probabilities of the queried keys (one number, or one per class of keys).
    :param cost: a CostModel or ``alpha``.
    :param weights: how often each class of ``priors`` is queried (``P_Q``; normalised here); default equal.
    :param counter_bits: counters saturate at ``2**counter_bits - 1``.
    :returns: ``sum_i w_i [(1 - P_i) fpr_i W_FP + P_i fnr_i W_FN] / sum_i w_i``.

    The section VIII.A population (13 classes, priors 2^-3..2^-15, class i queried in proportion to 2^(i+2)) with 4
    counters per key at alpha = 5: multiplied by ``|U|`` this is Table III's Selective CBF cost (1.42e4):

    >>> priors = [2.0 ** -e for e in range(3, 16)]
    >>> weights = [2.0 ** e for e in range(3, 16)]
    >>> round(cbf_expected_cost(3, 13312, 3328, priors, 5, weights=weights) * 16775168)
    14230
    """
    k, m, n, bits = _check_common(num_hashes, num_counters, num_items, counter_bits)
    cm = as_cost(cost)
    pr = np.atleast_1d(_validate.probability_array("priors", priors)).astype(np.float64)
    if pr.ndim != 1 or pr.size == 0:
        raise ValueError(f"priors must be a number or a non-empty 1-d sequence, got {priors!r}")
    if weights is None:
        w = np.ones(pr.size)
    else:
        w = np.atleast_1d(np.asarray(weights, dtype=np.float64))
        if w.shape != pr.shape:
            raise ValueError(f"weights must have the shape of priors {pr.shape}, got shape {w.shape}")
        if not np.all(np.isfinite(w) & (w >= 0)) or w.sum() <= 0:
            raise ValueError(f"weights must be finite, >= 0 and not all 0, got {weights!r}")
    fpr, fnr = error_rates(k, m, n, bits, pr, cm.alpha)
    per_class = (1.0 - pr) * fpr * cm.false_positive + pr * fnr * cm.false_negative
    return float(np.dot(w, per_class) / w.sum())


def cbf_optimal_num_hashes(num_counters: int, num_items: int, priors, cost, *, weights=None, counter_bits: int = 4,
                           max_hashes: int | None = None) -> int:
    """The k that minimises :func:`cbf_expected_cost` (section V.C); ties go to the smaller k.

    Unlike the FPR, the cost of a selective CBF can keep falling well past ``ln2 m/n`` (the counters still carry
    evidence when they are larger); the search goes up from k = 1 until the cost has not improved for 3 consecutive
    values of k, or up to ``max_hashes``. Large k take seconds (the product distribution is computed exactly).

    :param num_counters: ``m``.
    :param num_items: ``n >= 1``.
    :param priors: the priors of the queried keys (see :func:`cbf_expected_cost`).
    :param cost: a CostModel or ``alpha``.
    :param weights: query frequency of each prior class.
    :param counter_bits: counters saturate at ``2**counter_bits - 1``.
    :param max_hashes: the largest k tried (default: 64, and at most m).

    The model is ideal hashing. Its large-k optima live far in the tail of the product, where the k counters of a
    real filter are not quite independent: in the trace set-up of section VIII.C (m = 7,680 4-bit counters,
    n = 1,024, prior 2^-10, alpha = 2.4) it returns 49 with a cost curve flat from k ~ 30, while bloomwise's own
    double-hashed filters measure their lowest cost near k = 20 (docs/reproduction/report.md). Saturated counters
    are accounted for (the counter distributions fold their tail into the saturation value).

    Table III's set-up with 4 counters per key at alpha = 5: the FPR-optimal k is 3, the cost-optimal one 9 (2% less
    cost than k = 3 here; 7% at 10 counters per key, where k = 13 beats k = 7):

    >>> priors, weights = [2.0 ** -e for e in range(3, 16)], [2.0 ** e for e in range(3, 16)]
    >>> cbf_optimal_num_hashes(13312, 3328, priors, 5, weights=weights)
    9
    """
    m = check_integer("num_counters", num_counters, 1)
    n = check_integer("num_items", num_items, 1)
    if max_hashes is None:
        max_hashes = min(64, m)
    max_hashes = check_integer("max_hashes", max_hashes, 1)
    best_k, best_cost, since = 1, math.inf, 0
    for k in range(1, max_hashes + 1):
        value = cbf_expected_cost(k, m, n, priors, cost, weights=weights, counter_bits=counter_bits)
        if value < best_cost:
            best_k, best_cost, since = k, value, 0
        else:
            since += 1
            if since >= 3:
                break
    return best_k
