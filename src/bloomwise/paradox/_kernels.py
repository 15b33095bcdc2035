"""The compiled decisions (``bloomwise._native.decide``) bound to this package.

The kernels sit below the paradox layer and import nothing of it: this module hands them, once, what they use of it
(``decide.bind_paradox``): the Decision types, the prior classes they decide without calling them, the key helpers,
and the names of the selective filters' attributes a cached state depends on. The selective filters import
``decide`` from here, so it is bound before their first query.
"""
from __future__ import annotations

from bloomwise._native import decide
from bloomwise.paradox import _support
from bloomwise.paradox.decisions import Decision, Decisions
from bloomwise.paradox.priors import ClassPrior, ConstantPrior

__all__ = ["decide"]

#: role (decide.BOUND_ATTRIBUTES) -> the attribute of SelectiveBloomFilter / SelectiveCountingBloomFilter playing it
STATE_ATTRIBUTES = {
    "filter": "_filter", "prior": "prior", "cost": "cost", "num_inserted": "_num_inserted",
    "max_skipped_prior": "_max_skipped_prior", "selective_insert": "selective_insert",
    "selective_query": "selective_query", "rule": "rule", "exact": "exact", "state": "_decide_state",
}

decide.bind_paradox(decision=Decision, decisions=Decisions, constant_prior=ConstantPrior, class_prior=ClassPrior,
                    take=_support.take, keys_list=_support.keys_list, attributes=STATE_ATTRIBUTES)
