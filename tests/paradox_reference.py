"""The selective filters' decisions as plain Python and numpy: the implementation the compiled decisions
(bloomwise/_native/decide.pyx) replaced, kept as the reference they must agree with (tests/test_decide.py).

Each function takes the selective filter and does what its method did, step by step, reading the same attributes.
"""
from __future__ import annotations

import numpy as np

from bloomwise.paradox import _support
from bloomwise.paradox.decisions import Decision, Decisions
from bloomwise.paradox.posterior import paradox_threshold, posterior


def _informative(f, p):
    if f.selective_insert and f.rule == "exact":
        return p > f._max_skipped_prior
    return np.ones(np.shape(p), dtype=bool) if np.ndim(p) else True


def bloom_query(f, key) -> Decision:
    """SelectiveBloomFilter.query."""
    p = f.prior.probability(key)
    f.prior.observe(key)
    fpr = f.estimated_fpr()
    informative = _informative(f, p)
    if f.selective_query:
        consult = bool(informative) and p >= paradox_threshold(fpr, f.cost.alpha)
    else:
        consult = True
    answer = (key in f._filter) if consult else None
    if answer is None or not informative:
        post = p
    else:
        post = posterior(p, fpr) if answer else 0.0
    if f.selective_query:
        member = post * f.cost.false_negative >= (1.0 - post) * f.cost.false_positive
    else:
        member = bool(answer)
    return Decision(bool(member), float(post), answer, f.cost.expected_cost(post, member))


def bloom_query_many(f, keys) -> Decisions:
    """SelectiveBloomFilter.query_many."""
    keys = _support.keys_list(keys)
    p = f.prior.probabilities(keys)
    f.prior.observe_many(keys)
    fpr = f.estimated_fpr()
    informative = _informative(f, p)
    if f.selective_query:
        consulted = informative & (p >= paradox_threshold(fpr, f.cost.alpha))
    else:
        consulted = np.ones(len(keys), dtype=bool)
    answer = np.zeros(len(keys), dtype=bool)
    if consulted.all():
        if len(keys):
            answer = np.asarray(f._filter.contains_many(keys), dtype=bool)
    elif consulted.any():
        answer[consulted] = np.asarray(f._filter.contains_many(_support.take(keys, consulted)), dtype=bool)
    post = p.copy()
    evidence = consulted & informative
    positive = evidence & answer
    if positive.any():
        # posterior() as query's: a prior of 0 stays 0 after "present", also where the FPR is 0 and Bayes' formula is
        # 0 / 0 (a key the prior rules out is not made possible by the filter's answer; one answer for query and
        # query_many, issue 34)
        post[positive] = posterior(p[positive], fpr)
    post[evidence & ~answer] = 0.0
    member, expected = f.cost.decide_many(post, None if f.selective_query else answer)
    return Decisions(member, post, answer, consulted, expected)


def counting_query_many(f, keys) -> Decisions:
    """_SelectiveCounting.query_many (SelectiveCountingBloomFilter's posteriors: cbf_posterior)."""
    keys = _support.keys_list(keys)
    p = f.prior.probabilities(keys)
    f.prior.observe_many(keys)
    if f.selective_query:
        consulted = p >= f.skip_threshold
    else:
        consulted = np.ones(len(keys), dtype=bool)
    post = p.copy()
    answer = np.zeros(len(keys), dtype=bool)
    if consulted.any():
        sub = keys if consulted.all() else _support.take(keys, consulted)
        post_c, answer_c = f._posteriors(sub, p[consulted])
        post[consulted] = post_c
        answer[consulted] = answer_c
    member, expected = f.cost.decide_many(post, None if f.selective_query else answer)
    return Decisions(member, post, answer, consulted, expected)


def counting_query(f, key) -> Decision:
    """_SelectiveCounting.query."""
    return counting_query_many(f, [key])[0]
