"""Selective counting filters: decisions from the counter values themselves (sections V and VI of the paper).

Source: Rottenstreich and Keslassy, *The Bloom Paradox*, Theorems 2, 4 and 5 (Fig. 5). A counting filter knows more
than "all k counters are non-zero": a key whose counters are all large is more credibly a member than one whose
counters are all 1. The membership probability depends only on the product of the counters (Theorem 2; for the
variable-increment filter, on Theorem 5's ``delta``), and the cost-optimal answer is "present" iff it is at least
``1 / (alpha + 1)`` (Theorem 4).

Deletions make selective *insertion* awkward (removing a key requires knowing whether it was inserted), so these
filters insert every key and are selective at query time only, as in the paper's Table III.
"""
from __future__ import annotations

import math

import numpy as np

from bloomwise._base import check_threads
from bloomwise.paradox import _support
from bloomwise.paradox._kernels import decide
from bloomwise.paradox.decisions import Decision, Decisions
from bloomwise.paradox.posterior import (
    cbf_posterior, counter_log_ratios, log_binom_pmf, log_binom_tail, vicbf_posterior,
)

__all__ = ["SelectiveCountingBloomFilter", "SelectiveVariableIncrementCountingBloomFilter"]


class _SelectiveCounting:
    """Common machinery: item count, priors, costs, the skip bound and the decision."""

    _class_name = ""
    _required: tuple[str, ...] = ()

    def __init__(self, filter_or_params, prior, cost, *, selective_query: bool = True, num_items: int = 0):
        self._filter = _support.make_filter(filter_or_params, self._class_name, self._required)
        self.prior = _support.as_prior(prior)
        self.cost = _support.as_cost(cost)
        self.selective_query = _support.flag("selective_query", selective_query)
        self._num_items = _support.num_items(num_items)
        self._num_counters = _support.num_cells(self._filter)
        self._num_hashes = int(self._filter.num_hashes)
        self._layout = getattr(self._filter, "layout", "classic")
        bits = getattr(self._filter, "counter_bits", None)
        self._counter_bits = int(bits) if bits is not None else None
        self._skip_cache: tuple[int, float] | None = None

    # --- contents ---------------------------------------------------------------------------------------------
    @property
    def filter(self):
        """The underlying counting filter."""
        return self._filter

    @property
    def num_cells(self) -> int:
        """m: the filter's counters or positions."""
        return self._num_counters

    @property
    def num_hashes(self) -> int:
        return self._num_hashes

    @property
    def num_keys(self) -> int:
        """``n``: the keys in the filter. The filter's own ``num_keys`` (added minus removed) when it keeps one, as
        bloomwise's counting filters do; otherwise the keys added minus removed through this object, plus the
        initial ``num_items``."""
        tracked = getattr(self._filter, "num_keys", None)
        return int(tracked) if tracked is not None else self._num_items

    def add(self, key, /):
        """Add ``key`` to the filter (every key is inserted: see the module docstring)."""
        result = self._filter.add(key)
        self._num_items += 1
        return result

    def update(self, keys, *, threads=None) -> None:
        """Add a batch of keys."""
        keys = _support.keys_list(keys)
        check_threads(threads)
        if len(keys):
            self._filter.update(keys)
        self._num_items += len(keys)

    def remove(self, key, /) -> None:
        """Remove ``key`` (KeyError, and no change, if it is certainly absent)."""
        self._filter.remove(key)
        self._num_items -= 1

    def discard(self, key, /) -> bool:
        """Remove ``key`` if it might be present; returns whether something was removed."""
        if key not in self._filter:
            return False
        self._filter.remove(key)
        self._num_items -= 1
        return True

    def remove_many(self, keys) -> None:
        """Remove a batch of keys (all must have been added)."""
        keys = _support.keys_list(keys)
        if len(keys):
            self._filter.remove_many(keys)
        self._num_items -= len(keys)

    def __contains__(self, key) -> bool:
        """The plain filter's answer, "might be present": use :meth:`query` to decide."""
        return key in self._filter

    def contains_many(self, keys, *, threads=None) -> np.ndarray:
        """The plain filter's answers for a batch."""
        check_threads(threads)
        return self._filter.contains_many(keys)

    # --- decisions ----------------------------------------------------------------------------------------------
    def _max_log_ratio(self) -> float:
        """The largest per-position log likelihood ratio any counter value can give (subclasses)."""
        raise NotImplementedError

    @property
    def skip_threshold(self) -> float:
        """The prior below which no counter values could make "present" the better answer, so the filter is not
        consulted: ``1 / (1 + alpha L_max^k)``, with ``L_max`` the largest likelihood ratio of one position."""
        n = self.num_keys
        if self._skip_cache is None or self._skip_cache[0] != n:
            if n <= 0:
                value = 1.0 / (1.0 + self.cost.alpha)  # an empty filter says nothing: decide by the prior
            else:
                log_odds = math.log(self.cost.alpha) + self._num_hashes * self._max_log_ratio()
                value = 1.0 / (1.0 + math.exp(log_odds)) if log_odds < 700 else 0.0
            self._skip_cache = (n, value)
        return self._skip_cache[1]

    def _posteriors(self, keys, priors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(posterior, plain answer) for a batch of keys (subclasses)."""
        raise NotImplementedError

    def compiled_decisions_apply(self) -> bool:
        """Whether ``bloomwise._native.decide`` decides for this object (given a bloomwise CountingBloomFilter): only
        for SelectiveCountingBloomFilter and subclasses that compute posteriors, the skip bound and n as it does."""
        return False

    # query(key) -> Decision: the cost-optimal answer for ``key`` from its counters (Theorems 2/5 and 4). A compiled
    # function used as the method (see its docstring), so that a call costs one C call.
    query = decide.counting_query

    def query_many(self, keys) -> Decisions:
        """:meth:`query` for a batch of keys (a list, or a numpy array)."""
        decisions = decide.counting_query_many(self, keys)
        if decisions is not None:
            return decisions
        keys = _support.keys_list(keys)
        p = self.prior.probabilities(keys)
        self.prior.observe_many(keys)
        if self.selective_query:
            consulted = p >= self.skip_threshold
        else:
            consulted = np.ones(len(keys), dtype=bool)
        post = p.copy()
        answer = np.zeros(len(keys), dtype=bool)
        if consulted.any():
            sub = keys if consulted.all() else _support.take(keys, consulted)
            post_c, answer_c = self._posteriors(sub, p[consulted])
            post[consulted] = post_c
            answer[consulted] = answer_c
        member, expected = self.cost.decide_many(post, None if self.selective_query else answer)
        return Decisions(member, post, answer, consulted, expected)


class SelectiveCountingBloomFilter(_SelectiveCounting):
    """A counting Bloom filter whose answers are cost-optimal decisions from the product of the counters.

    Theorem 2: ``Pr(x in S | c_1..c_k) = m^k prod(c) P / (m^k prod(c) P + (n k)^k (1 - P))``; Theorem 4: answer
    "present" iff that is at least ``1 / (alpha + 1)``.

    :param filter_or_params: a ``bloomwise.CountingBloomFilter`` (it may already hold keys: see ``num_items``), or a
        mapping of its parameters: ``{"num_cells": ..., "num_hashes": ..., "counter_bits": 4, "layout": ...,
        "seed": ...}`` for ``CountingBloomFilter.from_size``, or ``{"capacity": ..., "fpr": ...}``.
    :param prior: a Prior, or a number (ConstantPrior).
    :param cost: a CostModel, or ``alpha``.
    :param selective_query: decide from the posterior (the paper's Selective CBF); False gives the plain CBF's
        answers (with their posteriors).
    :param exact: use binomial likelihoods (:func:`~bloomwise.paradox.cbf_posterior` with ``exact=True``): it
        matters for the classic layout and for saturated counters; the partitioned layout (the paper's) is exact
        either way.
    :param num_items: keys already in an existing filter that does not count its keys itself (bloomwise's
        ``CountingBloomFilter`` does: ``num_keys``); ``n`` then follows add/remove through this object.
    """

    _class_name = "CountingBloomFilter"
    _required = ("add", "update", "remove", "counters", "counters_many", "contains_many", "__contains__",
                 "num_hashes")

    def __init__(self, filter_or_params, prior, cost, *, selective_query: bool = True, exact: bool = False,
                 num_items: int = 0):
        super().__init__(filter_or_params, prior, cost, selective_query=selective_query, num_items=num_items)
        self.exact = _support.flag("exact", exact)

    def _saturation(self) -> int | None:
        return (1 << self._counter_bits) - 1 if self._counter_bits is not None else None

    def _max_log_ratio(self) -> float:
        # The likelihood ratio of a counter grows with its value (c m / (n k) in closed form; the binomial ratios are
        # monotone too), so the largest is that of the largest possible value: the saturation value, or n (k n).
        n, m, k = self.num_keys, self._num_counters, self._num_hashes
        layout = self._layout if self._layout in ("partitioned", "classic") else "classic"
        most = n if layout == "partitioned" else n * k
        saturation = self._saturation()
        top = most if saturation is None else min(saturation, most)
        if top < 1:
            return -math.inf
        if not self.exact:
            return math.log(top * m / (n * k))
        if layout == "partitioned":
            t1, t0, p = n - 1, n, min(1.0, k / m)
        else:
            t1, t0, p = (n - 1) * k, n * k, 1.0 / m
        if p >= 1.0:
            return 0.0
        if saturation is not None and top == saturation:
            return log_binom_tail(top - 1, t1, p) - log_binom_tail(top, t0, p)
        return float(log_binom_pmf(top - 1, t1, p) - log_binom_pmf(top, t0, p))

    def compiled_decisions_apply(self) -> bool:
        """True unless a subclass changes how posteriors, the skip bound or n are computed (the compiled decisions,
        ``bloomwise._native.decide``, then leave the decisions to :meth:`query_many`'s Python path)."""
        cls, base = type(self), SelectiveCountingBloomFilter
        return (cls._posteriors is base._posteriors and cls.skip_threshold is base.skip_threshold
                and cls.num_keys is base.num_keys and cls.counter_log_ratio_table is base.counter_log_ratio_table)

    def counter_log_ratio_table(self, length: int, num_keys: int) -> np.ndarray:
        """float64 ``log(Pr(C = c | x in S) / Pr(C = c | x not in S))`` for counter values c = 0 .. length - 1 with
        ``num_keys`` keys in (:func:`~bloomwise.paradox.posterior.counter_log_ratios`, this filter's m, k, layout,
        ``exact`` and saturation): the table the compiled decisions sum a key's counters' entries of."""
        layout = self._layout if self._layout in ("partitioned", "classic") else "classic"
        with np.errstate(invalid="ignore"):  # values past n k: -inf - -inf, which the function maps to -inf
            table = counter_log_ratios(length - 1, self._num_counters, num_keys, self._num_hashes, layout, self.exact,
                                       self._saturation() if self.exact else None)
        return np.ascontiguousarray(table, dtype=np.float64)

    def _posteriors(self, keys, priors):
        counters = np.asarray(self._filter.counters_many(keys), dtype=np.int64)
        if counters.ndim != 2:
            counters = counters.reshape(len(priors), self._num_hashes)
        layout = self._layout if self._layout in ("partitioned", "classic") else "classic"
        post = cbf_posterior(counters, self._num_counters, self.num_keys, priors, exact=self.exact,
                             layout=layout, counter_bits=self._counter_bits)
        return post, (counters > 0).all(axis=1)

    def __repr__(self) -> str:
        return (f"<SelectiveCountingBloomFilter m={self._num_counters} k={self._num_hashes} n={self.num_keys} "
                f"alpha={self.cost.alpha:g} selective_query={self.selective_query}>")


class SelectiveVariableIncrementCountingBloomFilter(_SelectiveCounting):
    """A B_h variable-increment counting filter whose answers are cost-optimal decisions (Theorem 5).

    Where a position's fixed-increment counter ``c_j`` is at most ``h`` its variable sum decodes, and the evidence of
    that position is ``l y_j`` (``y_j`` copies of the key's own increment among the decoded addends, ``l = |D|``)
    instead of ``c_j``: ``Pr(x in S | ...) = m^k delta P / (m^k delta P + (n k)^k (1 - P))`` with
    ``delta = prod_{c_j > h} c_j * prod_{c_j <= h} l y_j``; "present" iff at least ``1 / (alpha + 1)`` (Theorem 4).

    :param filter_or_params: a ``bloomwise.VariableIncrementCountingBloomFilter``, or a mapping of its parameters
        (``from_size`` when it names ``num_cells``, e.g. ``{"num_cells": ..., "num_hashes": ...,
        "increments": (1, 2, 4), "layout": "partitioned"}``).
    :param prior: a Prior, or a number.
    :param cost: a CostModel, or ``alpha``.
    :param selective_query: decide from the posterior; False gives the plain filter's answers.
    :param num_items: keys already in an existing filter that does not count its keys (``num_keys``) itself.

    It reads, per key, the fields ``c`` (c_j) and ``y`` (y_j, -1 where ``c_j > h``) of the filter's
    ``counters_many(keys)``, and ``num_cells`` (m), ``num_hashes`` (k), ``num_keys`` (n),
    ``num_increments`` (l) and ``bh_order`` (h).
    """

    _class_name = "VariableIncrementCountingBloomFilter"
    _required = ("add", "update", "remove", "counters_many", "contains_many", "__contains__", "num_hashes",
                 "num_increments")

    def __init__(self, filter_or_params, prior, cost, *, selective_query: bool = True, num_items: int = 0):
        super().__init__(filter_or_params, prior, cost, selective_query=selective_query, num_items=num_items)
        fixed = getattr(self._filter, "fixed_bits", None)
        self._saturation = (1 << int(fixed)) - 1 if fixed is not None else None

    def _max_log_ratio(self) -> float:
        # largest evidence of one position: an undecoded counter (at most its saturation value, or n / n k), or a
        # decoded l y with y <= c <= h
        n, m, k = self.num_keys, self._num_counters, self._num_hashes
        most = n if self._layout == "partitioned" else n * k
        top = most if self._saturation is None else min(self._saturation, most)
        h = int(getattr(self._filter, "bh_order", top))
        best = max(top, int(self._filter.num_increments) * min(h, most))
        return math.log(best * m / (n * k)) if best > 0 else -math.inf

    def _posteriors(self, keys, priors):
        probes = self._filter.counters_many(keys)
        counters = np.asarray(probes["c"], dtype=np.int64).reshape(len(priors), -1)
        mult = np.asarray(probes["y"], dtype=np.int64).reshape(counters.shape)
        post = vicbf_posterior(counters, mult, self._num_counters, self.num_keys, int(self._filter.num_increments),
                               priors)
        answer = np.asarray(self._filter.contains_many(keys), dtype=bool)
        return post, answer

    def __repr__(self) -> str:
        return (f"<SelectiveVariableIncrementCountingBloomFilter m={self._num_counters} k={self._num_hashes} "
                f"n={self.num_keys} alpha={self.cost.alpha:g} selective_query={self.selective_query}>")
