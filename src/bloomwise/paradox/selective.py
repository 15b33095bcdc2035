"""The Selective Bloom filter: a Bloom filter that knows when its positive answers are worth nothing.

Source: Rottenstreich and Keslassy, *The Bloom Paradox*, section IV.C (Fig. 3) and Theorem 1.

A key whose prior ``P`` is below the paradox threshold ``FPR / (FPR + alpha)`` of the filter is one for which
trusting a positive answer costs more, on average, than answering "absent" (Theorem 1): its cost-optimal answer is
"absent" whatever the filter says. So

* **selective insertion** does not insert such keys (a lighter filter has a lower FPR for everyone else), and
* **selective query** does not even ask the filter about them.

"The filter as built" is the filter holding the keys actually inserted (``n*``): skipping keys lowers its FPR,
which lowers the threshold, which may admit keys again. The batch :meth:`SelectiveBloomFilter.update` settles this
fixed point exactly (see there); the online :meth:`SelectiveBloomFilter.add` decides each key against the filter as
it is at that moment.

``key in f`` keeps its plain meaning ("might be present"); the cost-optimal answer is the explicit
:meth:`SelectiveBloomFilter.query`.
"""
from __future__ import annotations


import numpy as np

from bloomwise import theory
from bloomwise._base import check_threads
from bloomwise._checks import check_choice
from bloomwise.paradox import _support
from bloomwise.paradox._kernels import decide
from bloomwise.paradox.decisions import Decision, Decisions
from bloomwise.paradox.posterior import paradox_threshold, theorem1_fpr

__all__ = ["SelectiveBloomFilter"]

RULES = ("exact", "theorem1")


class SelectiveBloomFilter:
    """A Bloom filter with cost-optimal insertion and query decisions (the paper's Selective Bloom Filter).

    :param filter_or_params: a ``bloomwise.BloomFilter`` (used as is; it may already hold keys, see ``num_items``), or a
        mapping of its parameters: ``{"num_cells": ..., "num_hashes": ..., "layout": ..., "seed": ...}`` for
        ``BloomFilter.from_size``, or ``{"capacity": ..., "fpr": ...}`` for ``BloomFilter(...)``.
    :param prior: a :class:`~bloomwise.paradox.Prior`, or a number (a :class:`~bloomwise.paradox.ConstantPrior`).
    :param cost: a :class:`~bloomwise.paradox.CostModel`, or a number ``alpha = W_FN / W_FP``.
    :param selective_insert: skip keys whose prior is below the paradox threshold (section IV.C, Fig. 3a).
    :param selective_query: answer "absent" without asking the filter for keys below the threshold (Fig. 3b).
        With False, every answer is the filter's own (the paper's "insertion only" variant): ``member`` is then
        ``filter_answer``, and ``posterior``/``expected_cost`` say how good that answer is.
    :param rule: how the threshold is computed.

        * ``"exact"`` (default): the FPR of the filter as built, ``bloomwise.theory.false_positive_rate(m, n*, k,
          layout)``, and Bayes all the way: a key of a prior that selective insertion skipped is not in the filter
          even if it is in S, so the filter says nothing about it and it is never consulted.
        * ``"theorem1"``: section IV.C as printed, ``P_th = 1 / (1 + alpha 2^(ln2 m/n*))`` (Theorem 1's optimal-k
          approximation of the FPR) for both insertion and query, and a query trusts the filter for every key above
          ``P_th``. This is the rule behind the paper's Table II; in that set-up it costs up to 17% more than
          ``"exact"`` (docs/paradox.md).
    :param num_items: keys already in ``filter_or_params`` when it is an existing filter (they count in ``n*``).

    ``n*`` counts the keys passed to :meth:`add`/:meth:`update` that were inserted, duplicates included: pass
    distinct keys.

    >>> f = SelectiveBloomFilter({"num_cells": 4000, "num_hashes": 3, "layout": "partitioned"}, prior=0.5, cost=5)
    >>> f.update(range(1000))
    >>> f.num_keys
    1000
    >>> d = f.query(7)
    >>> d.member, d.filter_answer
    (True, True)

    Hot keys (prior 0.5) and cold ones (prior 1e-6) in one filter: the cold ones are not worth a bit of it.

    >>> from bloomwise.paradox import ClassPrior
    >>> prior = ClassPrior(lambda key: key.split(":")[0], {"hot": 0.5, "cold": 1e-6})
    >>> g = SelectiveBloomFilter({"num_cells": 4000, "num_hashes": 3, "layout": "classic"}, prior, cost=5)
    >>> g.update([f"hot:{i}" for i in range(500)] + [f"cold:{i}" for i in range(500)])
    >>> g.num_keys, g.num_skipped
    (500, 500)
    >>> d = g.query("cold:7")  # not even asked: "absent" costs 5e-6 on average, trusting a positive far more
    >>> d.member, d.posterior, d.filter_answer
    (False, 1e-06, None)
    >>> g.query("hot:7").member
    True
    """

    def __init__(self, filter_or_params, prior, cost, *, selective_insert: bool = True,
                 selective_query: bool = True, rule: str = "exact", num_items: int = 0):
        self._filter = _support.make_filter(filter_or_params, "BloomFilter",
                                            ("add", "update", "contains_many", "__contains__", "num_hashes"))
        self.prior = _support.as_prior(prior)
        self.cost = _support.as_cost(cost)
        self.selective_insert = _support.flag("selective_insert", selective_insert)
        self.selective_query = _support.flag("selective_query", selective_query)
        self.rule = check_choice("rule", rule, RULES)
        self._num_inserted = _support.num_items(num_items)
        self._num_skipped = 0
        self._max_skipped_prior = -1.0  # the largest prior of a skipped key (-1: none skipped)
        self._num_bits = _support.num_cells(self._filter)
        self._num_hashes = int(self._filter.num_hashes)
        self._layout = getattr(self._filter, "layout", "classic")
        self._fpr_cache: dict[int, float] = {}

    # --- the filter as built ---------------------------------------------------------------------------------

    @property
    def filter(self):
        """The underlying Bloom filter."""
        return self._filter

    @property
    def num_keys(self) -> int:
        """``n*``: the keys in the filter."""
        return self._num_inserted

    @property
    def num_cells(self) -> int:
        """m: the filter's bits."""
        return self._num_bits

    @property
    def num_hashes(self) -> int:
        return self._num_hashes

    @property
    def num_skipped(self) -> int:
        """Keys that selective insertion did not insert."""
        return self._num_skipped

    def _fpr(self, n: int) -> float:
        if n <= 0:
            return 0.0
        cached = self._fpr_cache.get(n)
        if cached is None:
            if self.rule == "theorem1":
                cached = theorem1_fpr(self._num_bits / n)
            else:
                cached = float(theory.false_positive_rate(self._num_bits, n, self._num_hashes, layout=self._layout))
            if len(self._fpr_cache) > 4096:
                self._fpr_cache.clear()
            self._fpr_cache[n] = cached
        return cached

    def _threshold(self, n: int) -> float:
        return paradox_threshold(self._fpr(n), self.cost.alpha)

    def estimated_fpr(self) -> float:
        """The false-positive rate of the filter as built (``n*`` keys), by ``rule``."""
        return self._fpr(self._num_inserted)

    @property
    def threshold(self) -> float:
        """The paradox threshold ``FPR / (FPR + alpha)`` of the filter as built (Theorem 1)."""
        return self._threshold(self._num_inserted)

    # --- insertion ---------------------------------------------------------------------------------------------

    def _skip(self, count: int, max_prior: float) -> None:
        self._num_skipped += count
        self._max_skipped_prior = max(self._max_skipped_prior, max_prior)

    def add(self, key, /) -> bool:
        """Insert ``key`` unless selective insertion skips it; returns whether it went into the filter.

        Online rule: the key is inserted iff its prior is at least the paradox threshold of the filter holding it
        (``n* + 1`` keys). Keys inserted early may fall below the threshold later, as the filter fills: they are
        then simply not consulted. :meth:`update` with the whole set avoids that.
        """
        if self.selective_insert:
            p = self.prior.probability(key)
            if p < self._threshold(self._num_inserted + 1):
                self._skip(1, p)
                return False
        self._filter.add(key)
        self._num_inserted += 1
        return True

    def update(self, keys, *, threads=None) -> None:
        """Insert a batch of keys (a list, or a numpy array), skipping paradox keys (``num_keys`` and
        ``num_skipped`` count them). ``threads=``: for the filter's batch insert.

        The batch is settled as a fixed point: keys are grouped by prior, and groups are admitted from the highest
        prior down for as long as a group's prior is at least the paradox threshold of the filter holding it and
        every group before it. (The threshold grows with the load and the priors fall, so there is one cut-off,
        found by bisection.) Every admitted key then clears the threshold of the final filter; when no exact fixed
        point exists, the first group that would push the threshold above its own prior is the first one left out.
        """
        keys = _support.keys_list(keys)
        check_threads(threads)
        options = {} if threads is None else {"threads": threads}
        if not self.selective_insert:
            if len(keys):
                self._filter.update(keys, **options)
            self._num_inserted += len(keys)
            return None
        priors = self.prior.probabilities(keys)
        if len(keys) == 0:
            return None
        values, counts = np.unique(priors, return_counts=True)
        values, counts = values[::-1], counts[::-1]  # highest prior first
        loads = self._num_inserted + np.cumsum(counts)
        lo, hi = 0, len(values)  # first group that fails: the smallest g with values[g] < threshold(loads[g])
        while lo < hi:
            mid = (lo + hi) // 2
            if values[mid] < self._threshold(int(loads[mid])):
                hi = mid
            else:
                lo = mid + 1
        if lo == len(values):
            mask = np.ones(len(keys), dtype=bool)
        else:
            mask = priors > values[lo]
            self._skip(int(len(keys) - mask.sum()), float(values[lo]))
        inserted = int(mask.sum())
        if inserted:
            self._filter.update(_support.take(keys, mask) if inserted < len(keys) else keys, **options)
        self._num_inserted += inserted
        return None

    # --- plain membership --------------------------------------------------------------------------------------

    def __contains__(self, key) -> bool:
        """The plain filter's answer, "might be present" (no prior, no costs): use :meth:`query` to decide."""
        return key in self._filter

    def contains_many(self, keys, *, threads=None) -> np.ndarray:
        """The plain filter's answers for a batch."""
        check_threads(threads)
        return self._filter.contains_many(keys) if threads is None else self._filter.contains_many(keys, threads=threads)

    # --- decisions -------------------------------------------------------------------------------------------------

    def _informative(self, p):
        """Whether the filter's answer says anything about a key of prior ``p``: under the exact rule, a key of a
        prior that selective insertion skipped may be in S without being in the filter."""
        if self.selective_insert and self.rule == "exact":
            return p > self._max_skipped_prior
        return np.ones(np.shape(p), dtype=bool) if np.ndim(p) else True

    # query(key) -> Decision: the cost-optimal answer for ``key`` (Theorems 1 and 4), with its posterior and
    # expected cost. A compiled function used as the method (see its docstring), so that a call costs one C call.
    query = decide.bloom_query

    def query_many(self, keys) -> Decisions:
        """:meth:`query` for a batch of keys (a list, or a numpy array); the filter is asked only where needed."""
        return decide.bloom_query_many(self, keys)

    def __repr__(self) -> str:
        mode = {(True, True): "insert+query", (True, False): "insert", (False, True): "query",
                (False, False): "plain"}[(self.selective_insert, self.selective_query)]
        return (f"<SelectiveBloomFilter {mode} rule={self.rule} m={self._num_bits} k={self._num_hashes} "
                f"n*={self._num_inserted} skipped={self._num_skipped} alpha={self.cost.alpha:g} "
                f"threshold={self.threshold:.3g}>")
