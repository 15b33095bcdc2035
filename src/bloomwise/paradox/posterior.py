"""Membership probabilities after a filter has answered, and the thresholds they imply. Pure functions.

Source: Rottenstreich and Keslassy, *The Bloom Paradox: When Not to Use a Bloom Filter* (INFOCOM 2012; extended in
IEEE/ACM ToN 23(3), 2015). Notation: ``P = Pr(x in S)`` is the a-priori membership probability of the key,
``alpha = W_FN / W_FP`` the cost ratio, ``m`` bits or counters, ``n`` keys in the filter, ``k`` hash functions.

Cheat sheet::

    posterior after a positive      P / (P + (1 - P) FPR)                       Bayes (section IV.A)
    paradox iff (Theorem 1)         P < FPR / (FPR + alpha) = 1 / (1 + alpha 2^(ln2 m/n))   with FPR = 2^-(ln2 m/n)
    bits needed to avoid it         m/n >= log2((1 - P) / (alpha P)) / ln 2
    decide "present" iff (Thm 4)    posterior >= 1 / (alpha + 1)
    CBF posterior (Theorem 2)       m^k prod(c) P / (m^k prod(c) P + (n k)^k (1 - P))
    B_h-CBF posterior (Theorem 5)   the same with prod(c) replaced by delta = prod_{c_j > h} c_j * prod_{c_j <= h} l y_j

All functions accept plain numbers; ``posterior``, ``paradox_threshold``, ``cbf_posterior`` and ``vicbf_posterior``
also accept numpy arrays (one row of counters per key) and then return arrays.
"""
from __future__ import annotations

import math

import numpy as np

from bloomwise._checks import (check_choice, check_closed_probability, check_integer, check_positive_real,
                               check_real_number)
from bloomwise._native import decide as _decide
from bloomwise.theory.rates import log_binomial_pmf

from bloomwise.paradox import _validate

__all__ = [
    "posterior",
    "paradox_threshold",
    "theorem1_fpr",
    "theorem1_threshold",
    "min_bits_per_item",
    "decision_threshold",
    "cbf_posterior",
    "vicbf_posterior",
]

_LN2 = math.log(2.0)


def _prob_or_array(name, value):
    if isinstance(value, np.ndarray) or isinstance(value, (list, tuple)):
        return _validate.probability_array(name, value), True
    return check_closed_probability(name, value), False


def posterior(prior, fpr):
    """``Pr(x in S | the filter says "present")`` for a Bloom filter without false negatives.

    Bayes with ``Pr(positive | x in S) = 1`` and ``Pr(positive | x not in S) = FPR`` (section IV.A, proof of Theorem 1):
    ``P / (P + (1 - P) FPR)``.

    :param prior: ``P = Pr(x in S)`` before the filter was asked, in [0, 1] (a number or an array).
    :param fpr: the filter's false-positive rate, in [0, 1] (a number or an array broadcastable with ``prior``).

    The paper's introduction: a cache holding 10^4 of 10^10 items (prior 1e-6) behind a filter with FPR 1e-3. A
    positive answer is right only about once in a thousand times:

    >>> round(posterior(1e-6, 1e-3), 6)
    0.000999
    """
    p, p_arr = _prob_or_array("prior", prior)
    f, f_arr = _prob_or_array("fpr", fpr)
    if not (p_arr or f_arr):
        if p == 0.0:
            return 0.0
        return p / (p + (1.0 - p) * f)
    p, f = np.broadcast_arrays(np.asarray(p, dtype=np.float64), np.asarray(f, dtype=np.float64))
    den = p + (1.0 - p) * f
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(p > 0.0, p / np.where(den > 0.0, den, 1.0), 0.0)
    return out


def paradox_threshold(fpr, alpha):
    """The a-priori probability below which a positive answer should be ignored (Theorem 1).

    A positive costs ``(1 - post) W_FP`` if trusted and ``post W_FN`` if not; trusting loses iff
    ``alpha P < (1 - P) FPR``, i.e. iff ``P < FPR / (FPR + alpha)``. With Theorem 1's assumption
    ``FPR = 2^-(ln2 m/n)`` (optimal k) this is ``1 / (1 + alpha 2^(ln2 m/n))``: see :func:`theorem1_threshold`.

    :param fpr: the filter's false-positive rate, in [0, 1] (a number or an array).
    :param alpha: ``W_FN / W_FP > 0``.

    >>> round(paradox_threshold(0.001, 1.0), 7)  # FPR 0.1%: positives are worthless for keys with prior < ~0.1%
    0.000999
    """
    a = check_positive_real("alpha", alpha)
    f, arr = _prob_or_array("fpr", fpr)
    return f / (f + a)


def theorem1_fpr(bits_per_item: float) -> float:
    """The false-positive rate the paper's Theorem 1 assumes: ``2^-(ln2 m/n) = 0.6185^(m/n)``.

    It is the FPR of a filter with the (non-integer) optimal ``k = ln2 m/n`` in the large-``m`` limit, where half the
    bits are set. Real filters have an integer k: use ``bloomwise.theory.false_positive_rate`` for them.

    :param bits_per_item: ``m / n >= 0`` (``inf`` for an empty filter gives 0).

    >>> round(theorem1_fpr(10), 6)
    0.008193
    """
    b = check_real_number("bits_per_item", bits_per_item)
    if b < 0.0:
        raise ValueError(f"bits_per_item must be >= 0, got {bits_per_item!r}")
    return 2.0 ** (-_LN2 * b)


def theorem1_threshold(bits_per_item: float, alpha: float) -> float:
    """Theorem 1 as printed: the paradox occurs iff ``P < 1 / (1 + alpha 2^(ln2 m/n))``.

    Equal to ``paradox_threshold(theorem1_fpr(m/n), alpha)``. Section IV.C applies it with ``n = n*``, the number of
    keys actually inserted by a selective filter.

    :param bits_per_item: ``m / n >= 0``.
    :param alpha: ``W_FN / W_FP > 0``.

    >>> round(theorem1_threshold(4, 100), 6)  # Table II set-up: 4 bits per key, alpha = 100
    0.001461
    """
    a = check_positive_real("alpha", alpha)
    b = check_real_number("bits_per_item", bits_per_item)
    if b < 0.0:
        raise ValueError(f"bits_per_item must be >= 0, got {bits_per_item!r}")
    exponent = _LN2 * b
    if exponent > 1000:  # 2^1000 overflows nothing yet, but the answer is 0 to double precision long before
        return 0.0
    return 1.0 / (1.0 + a * 2.0 ** exponent)


def min_bits_per_item(prior: float, alpha: float) -> float:
    """Bits per key a Bloom filter needs before it is worth asking about a key with this prior (Theorem 1, Fig. 2b).

    Solving Theorem 1 for ``m/n``: the paradox is avoided iff ``m/n >= log2((1 - P) / (alpha P)) / ln 2``. Returns 0.0
    when the prior alone already justifies "present" (``P >= 1 / (1 + alpha)``) and ``inf`` for a prior of 0.

    :param prior: ``P = Pr(x in S)`` in [0, 1].
    :param alpha: ``W_FN / W_FP > 0``.

    The paper (section IV.B) says 28.7 bits for prior 1e-5 at alpha = 1; the formula gives 23.96 there, and 28.7 for
    alpha = 0.1 (or for prior 1e-6 at alpha = 1):

    >>> round(min_bits_per_item(1e-5, 1.0), 2), round(min_bits_per_item(1e-5, 0.1), 2)
    (23.96, 28.76)
    """
    p = check_closed_probability("prior", prior)
    a = check_positive_real("alpha", alpha)
    if p == 0.0:
        return math.inf
    if p * (1.0 + a) >= 1.0:  # (1 - P) / (alpha P) <= 1
        return 0.0
    return math.log2((1.0 - p) / (a * p)) / _LN2


def decision_threshold(alpha: float) -> float:
    """Theorem 4: answer "present" iff the membership probability is at least ``1 / (alpha + 1)``.

    Holds for any evidence (a Bloom filter bit, CBF counters, B_h-CBF counters): "present" costs ``(1 - post) W_FP``
    on average, "absent" costs ``post W_FN``.

    :param alpha: ``W_FN / W_FP > 0``.

    >>> decision_threshold(5)
    0.16666666666666666
    """
    return 1.0 / (check_positive_real("alpha", alpha) + 1.0)


# --- counting filters -------------------------------------------------------------------------------------------


def log_binom_pmf(c, trials, p):
    """log Pr(Bin(trials, p) = c), -inf outside the support (vectorised over c): the library's one binomial
    routine, :func:`bloomwise.theory.rates.log_binomial_pmf`, element by element."""
    c = np.asarray(c, dtype=np.float64)
    out = np.full(c.shape, -np.inf)
    ok = (c >= 0) & (c <= trials)
    if ok.any():
        n = int(trials)
        out[ok] = [log_binomial_pmf(n, int(j), p) for j in c[ok].tolist()]
    return out


def log_binom_tail(s: int, trials: int, p: float) -> float:
    """log Pr(Bin(trials, p) >= s)."""
    if s <= 0:
        return 0.0
    if s > trials:
        return -math.inf
    mean = trials * p
    if s > mean:  # sum the tail upwards until the terms vanish
        terms = []
        j = s
        while j <= trials:
            t = float(log_binom_pmf(j, trials, p))
            terms.append(t)
            if j > mean and t < terms[0] - 50.0:
                break
            j += 1
        top = max(terms)
        return top + math.log(math.fsum(math.exp(t - top) for t in terms))
    below = math.fsum(np.exp(log_binom_pmf(np.arange(s), trials, p)))
    return math.log1p(-min(below, 1.0)) if below < 1.0 else -math.inf


def counter_log_ratios(cmax: int, num_counters: int, num_items: int, num_hashes: int, layout: str,
                        exact: bool, saturation) -> np.ndarray:
    """``log(Pr(C = c | x in S) / Pr(C = c | x not in S))`` for c = 0..cmax (c = 0 gives -inf).

    Theorem 2's closed form is ``c m / (n k)``. ``exact=True`` uses binomial counts instead: partitioned, a counter of
    a slice of ``m/k`` counters holds ``Bin(n, k/m)`` other keys (``1 + Bin(n - 1, k/m)`` if x is a member; the ratio
    is then exactly ``c m / (n k)``); classic, ``Bin(n k, 1/m)`` (``1 + Bin((n - 1) k, 1/m)``). A counter at its
    saturation value ``s`` means "at least s": its ratio is ``Pr(C >= s | member) / Pr(C >= s | not member)``.
    """
    m, n, k = num_counters, num_items, num_hashes
    c = np.arange(cmax + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        if not exact:
            out = np.log(c * m / (n * k))
        else:
            if layout == "partitioned":
                t1, t0, p = n - 1, n, min(1.0, k / m)
            else:
                t1, t0, p = (n - 1) * k, n * k, 1.0 / m
            if p >= 1.0:  # one counter per slice: every counter holds exactly n
                out = np.where(c == n, 0.0, -np.inf)
                out[0] = -np.inf
                return out
            out = log_binom_pmf(c - 1, t1, p) - log_binom_pmf(c, t0, p)
            if saturation is not None and saturation <= cmax:
                s = int(saturation)
                out[s] = log_binom_tail(s - 1, t1, p) - log_binom_tail(s, t0, p)
    out[0] = -np.inf
    return np.nan_to_num(out, nan=-np.inf, posinf=np.inf, neginf=-np.inf)


def _posterior_from_log_ratio(log_ratio, prior):
    """``P L / (P L + 1 - P)`` with ``L = exp(log_ratio)``, overflow-safe, vectorised: ``1 / (1 + exp(-z))`` with
    ``z = log L + log P - log(1 - P)``. Compiled, with the C library's exp and log, as the selective filters' query
    (numpy's AVX-512 exp and log differ from it by an ulp now and then)."""
    return _decide.posteriors_from_log_ratio(log_ratio, prior)


def _check_filter_size(num_counters, num_items):
    m = check_integer("num_counters", num_counters, 1)
    n = check_integer("num_items", num_items, 0)
    return m, n


def cbf_posterior(counters, num_counters: int, num_items: int, prior, *, exact: bool = False,
                  layout: str = "partitioned", counter_bits: int | None = None):
    """``Pr(x in S | the k counters of x)`` in a counting Bloom filter (Theorem 2).

    ``m^k prod(c_j) P / (m^k prod(c_j) P + (n k)^k (1 - P))``, and 0 if a counter is 0. It depends on the counters only
    through their product (Corollary 3), so a larger product always means a more credible key. Per counter, a member
    is ``1 + Bin(n - 1, k/m)`` and a non-member ``Bin(n, k/m)`` (one slice of ``m/k`` counters per hash, the paper's
    model); their ratio is exactly ``c m / (n k)``, so for the partitioned layout the formula is exact.

    :param counters: the key's k counter values, shape (k,), or one row per key, shape (N, k).
    :param num_counters: ``m``, the number of counters of the filter (all slices together).
    :param num_items: ``n``, the number of keys in the filter (added minus removed).
    :param prior: ``P = Pr(x in S)``: a number, or an array with one prior per row.
    :param exact: use binomial likelihoods instead of the closed form: it differs for ``layout="classic"``
        (``1 + Bin((n - 1) k, 1/m)`` vs ``Bin(n k, 1/m)``) and for counters at their saturation value
        ``2**counter_bits - 1``, which mean "at least that many".
    :param layout: "partitioned" (the paper's model) or "classic"; used only with ``exact=True``.
    :param counter_bits: the counter width; with ``exact=True`` a counter equal to ``2**counter_bits - 1`` is
        treated as saturated.
    :returns: a float for counters of shape (k,), an array of shape (N,) for (N, k).

    Example 1 of the paper: counters (1, 10) and (5, 5) under the same prior; the product 25 beats the product 10:

    >>> x = cbf_posterior([1, 10], num_counters=1000, num_items=100, prior=0.01)
    >>> y = cbf_posterior([5, 5], num_counters=1000, num_items=100, prior=0.01)
    >>> x < y
    True
    >>> cbf_posterior([3, 0], 1000, 100, 0.5)  # a zero counter: certainly absent
    0.0
    """
    c = _validate.counter_array("counters", counters)
    m, n = _check_filter_size(num_counters, num_items)
    check_choice("layout", layout, ("partitioned", "classic"))
    if counter_bits is not None:
        counter_bits = check_integer("counter_bits", counter_bits, 1)
    p, p_arr = _prob_or_array("prior", prior)
    k = c.shape[-1]
    if c.ndim == 1 and p_arr and np.ndim(p) > 0:
        raise ValueError(f"prior must be a number for one row of counters, got an array of shape {np.shape(p)}")
    if c.ndim == 2 and p_arr and np.shape(p) not in ((), (c.shape[0],)):
        raise ValueError(f"prior must be a number or have shape ({c.shape[0]},), got shape {np.shape(p)}")
    if n == 0:
        if c.size and c.max() > 0:
            raise ValueError(f"num_items is 0 but counters are not all 0 (max {int(c.max())}): inconsistent")
        return 0.0 if c.ndim == 1 else np.zeros(c.shape[0])
    cmax = int(c.max()) if c.size else 0
    saturation = (1 << counter_bits) - 1 if counter_bits is not None else None
    table = counter_log_ratios(cmax, m, n, k, layout, exact, saturation if exact else None)
    log_ratio = table[c].sum(axis=-1)
    out = _posterior_from_log_ratio(log_ratio, p)
    return float(out) if c.ndim == 1 else out


def vicbf_posterior(counters, multiplicities, num_counters: int, num_items: int, num_increments: int, prior):
    """``Pr(x in S | the k counter pairs of x)`` in a B_h variable-increment counting filter (Theorem 5).

    Each position j of x holds a fixed-increment counter ``c_j`` and a variable-increment sum ``a_j``. Where
    ``c_j <= h`` the sum decodes uniquely (B_h property) and ``y_j``, the multiplicity of x's own increment
    ``v_{g_j(x)}`` in it, is known: then only keys with x's increment count, and the evidence is ``l y_j`` instead of
    ``c_j`` (``l = |D|`` increments, each drawn with probability ``1/l``). The posterior is Theorem 2's with the
    product of counters replaced by ``delta = prod_{c_j > h} c_j * prod_{c_j <= h} l y_j``:
    ``m^k delta P / (m^k delta P + (n k)^k (1 - P))``; 0 if a counter is 0 or a decoded ``y_j`` is 0.

    :param counters: the fixed-increment counters ``c_j``, shape (k,) or (N, k).
    :param multiplicities: ``y_j`` where the position was decoded (``c_j <= h``), and -1 (or None) where it was not;
        same shape as ``counters``.
    :param num_counters: ``m``, the number of counter pairs.
    :param num_items: ``n``, the number of keys in the filter.
    :param num_increments: ``l = |D|``, the number of possible increments.
    :param prior: ``P = Pr(x in S)``: a number, or one per row.

    Example 2 of the paper (D = {1, 2, 4}, so l = 3): x decodes at both positions with y = (1, 2), so
    ``delta = (3*1)*(3*2) = 18``; z decodes only its first position (y = 1) and the second has c = 4 > h = 2, so
    ``delta = (3*1)*4 = 12``:

    >>> px = vicbf_posterior([1, 2], [1, 2], 100, 20, 3, 0.1)
    >>> pz = vicbf_posterior([2, 4], [1, -1], 100, 20, 3, 0.1)
    >>> pz < px
    True
    """
    c = _validate.counter_array("counters", counters)
    y = np.asarray(multiplicities, dtype=object)
    if y.shape != c.shape:
        raise ValueError(f"multiplicities must have the shape of counters {c.shape}, got shape {y.shape}")
    y = np.where(np.equal(y, None), -1, y)
    try:
        y = y.astype(np.int64)
    except (TypeError, ValueError):
        raise TypeError(f"multiplicities must hold integers or None, got {multiplicities!r}") from None
    if y.size and y.min() < -1:
        raise ValueError(f"multiplicities must be >= 0 (or -1/None when not decoded), got {int(y.min())}")
    decoded = y >= 0
    if np.any(decoded & (y > c)):
        raise ValueError("a decoded multiplicity y_j cannot exceed its counter c_j")
    m, n = _check_filter_size(num_counters, num_items)
    ell = check_integer("num_increments", num_increments, 1)
    p, p_arr = _prob_or_array("prior", prior)
    if c.ndim == 1 and p_arr and np.ndim(p) > 0:
        raise ValueError(f"prior must be a number for one row of counters, got an array of shape {np.shape(p)}")
    k = c.shape[-1]
    if n == 0:
        if c.size and c.max() > 0:
            raise ValueError(f"num_items is 0 but counters are not all 0 (max {int(c.max())}): inconsistent")
        return 0.0 if c.ndim == 1 else np.zeros(c.shape[0])
    evidence = np.where(decoded, ell * y, c).astype(np.float64)
    with np.errstate(divide="ignore"):
        log_ratio = np.log(evidence * m / (n * k)).sum(axis=-1)
    out = _posterior_from_log_ratio(log_ratio, p)
    return float(out) if c.ndim == 1 else out
