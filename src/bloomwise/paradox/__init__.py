"""The Bloom paradox: when a positive answer of a Bloom filter should not be acted on.

Rottenstreich and Keslassy, *The Bloom Paradox: When Not to Use a Bloom Filter* (IEEE INFOCOM 2012; IEEE/ACM ToN
23(3), 2015). A filter with a false-positive rate of 1e-3 that says "present" for a key whose a-priori membership
probability is 1e-6 is wrong 999 times out of 1000: whether to act on its answer depends on the prior and on what the
two errors cost. This package answers "should I act on this?", not only "might it be present?".

Modules (one concern each):

* :mod:`~bloomwise.paradox.costs`: :class:`CostModel` (``alpha = W_FN / W_FP``, Theorem 4's decision).
* :mod:`~bloomwise.paradox.priors`: :class:`ConstantPrior`, :class:`ClassPrior`, :class:`CallablePrior`,
  :class:`SampledPrior` (sampling + EWMA per class, section IV.D).
* :mod:`~bloomwise.paradox.posterior`: pure functions: Theorem 1 (:func:`paradox_threshold`,
  :func:`min_bits_per_item`), :func:`posterior`, Theorem 2 (:func:`cbf_posterior`), Theorem 4
  (:func:`decision_threshold`), Theorem 5 (:func:`vicbf_posterior`).
* :mod:`~bloomwise.paradox.optimal_k`: section V.C, the expected cost of a selective CBF as a function of k
  (:func:`cbf_expected_cost`) and the k that minimises it (:func:`cbf_optimal_num_hashes`).
* :mod:`~bloomwise.paradox.selective`: :class:`SelectiveBloomFilter` (section IV.C).
* :mod:`~bloomwise.paradox.selective_counting`: :class:`SelectiveCountingBloomFilter` (section V) and
  :class:`SelectiveVariableIncrementCountingBloomFilter` (section VI).
* :mod:`~bloomwise.paradox.proxies`: section VII, the order in which a proxy asks its peers (Theorems 6 and 7).
* :mod:`~bloomwise.paradox.simulation`: the set-up of section VIII.A, analytic expectations and the paper's tables.

``key in f`` keeps its plain meaning everywhere; the decision is the explicit ``f.query(key)``.

>>> from bloomwise.paradox import posterior, paradox_threshold
>>> round(posterior(prior=1e-6, fpr=1e-3), 6)   # the paper's introduction
0.000999
>>> 1e-6 < paradox_threshold(fpr=1e-3, alpha=9.0)  # cache costs 1, memory 10: ignore the filter for this key
True
"""
from __future__ import annotations

from bloomwise.paradox.costs import CostModel
from bloomwise.paradox.decisions import Decision, Decisions
from bloomwise.paradox.optimal_k import cbf_error_rates, cbf_expected_cost, cbf_optimal_num_hashes
from bloomwise.paradox.posterior import (
    cbf_posterior,
    decision_threshold,
    min_bits_per_item,
    paradox_threshold,
    posterior,
    theorem1_fpr,
    theorem1_threshold,
    vicbf_posterior,
)
from bloomwise.paradox.priors import CallablePrior, ClassPrior, ConstantPrior, Prior, SampledPrior
from bloomwise.paradox.proxies import QueryPlan, expected_query_cost, optimal_query_order, peer_probabilities
from bloomwise.paradox.selective import SelectiveBloomFilter
from bloomwise.paradox.selective_counting import (
    SelectiveCountingBloomFilter,
    SelectiveVariableIncrementCountingBloomFilter,
)

__all__ = [
    # costs and decisions
    "CostModel",
    "Decision",
    "Decisions",
    # priors
    "Prior",
    "ConstantPrior",
    "ClassPrior",
    "CallablePrior",
    "SampledPrior",
    # pure functions
    "posterior",
    "paradox_threshold",
    "theorem1_fpr",
    "theorem1_threshold",
    "min_bits_per_item",
    "decision_threshold",
    "cbf_posterior",
    "vicbf_posterior",
    "cbf_error_rates",
    "cbf_expected_cost",
    "cbf_optimal_num_hashes",
    # selective filters
    "SelectiveBloomFilter",
    "SelectiveCountingBloomFilter",
    "SelectiveVariableIncrementCountingBloomFilter",
    # distributed caches
    "QueryPlan",
    "optimal_query_order",
    "expected_query_cost",
    "peer_probabilities",
]
