"""Which peers a proxy should ask, and in what order (section VII of the Bloom-paradox paper).

Source: Rottenstreich and Keslassy, *The Bloom Paradox*, section VII (Fig. 7, Theorems 6 and 7); the model is the
Summary Cache protocol of Fan, Cao, Almeida and Broder. Proxy i misses key x locally. Each peer j holds x with
probability ``p_j = Pr(x in S_j | CBF_ij)`` (the posterior of i's counting-filter summary of j, Theorem 2: see
:func:`~bloomwise.paradox.cbf_posterior`), asking it costs ``tau_j > 0``, and the origin (the "special proxy" L + 1)
always has x and costs ``omega``. Queries are sent one at a time, stopping at the first success.

Theorem 6: an optimal sequence asks in non-increasing order of ``p_j / tau_j``, where the origin's ratio is
``1 / omega``: so the peers with ``p_j / tau_j > 1 / omega`` come first, best ratio first, then the origin (nobody
after it is ever asked). Theorem 7 (all ``tau_j = tau``): the same as "most likely peer first, and go to the origin
once the peers left have ``p_j < tau / omega``". With equal priors and equal-sized summaries, ranking the peers by
the product of their counters gives the same order (Corollary 3).

Expected cost of asking ``o_1, o_2, ...`` and then the origin::

    E = sum_i tau_{o_i} prod_{j < i} (1 - p_{o_j})  +  omega prod_i (1 - p_{o_i})
"""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple

from bloomwise._checks import check_closed_probability, check_integer, check_positive_real
from bloomwise.paradox.posterior import cbf_posterior
from bloomwise.paradox.priors import Prior

__all__ = ["QueryPlan", "optimal_query_order", "expected_query_cost", "peer_probabilities"]


class QueryPlan(NamedTuple):
    """The peers to ask, in order, then the origin (unless a peer that surely has the key ends the sequence).

    :ivar peers: peer indices, in the order to ask them.
    :ivar ends_at_origin: whether the origin is asked if all those peers miss (False when the last peer has p = 1).
    :ivar expected_cost: the expected total query cost of the plan.
    """

    peers: tuple[int, ...]
    ends_at_origin: bool
    expected_cost: float


def _check(probabilities, costs, origin_cost):
    probs = [check_closed_probability(f"probabilities[{i}]", p) for i, p in enumerate(probabilities)]
    if isinstance(costs, numbers.Real) and not isinstance(costs, bool):
        costs = [costs] * len(probs)
    costs = list(costs)
    if len(costs) != len(probs):
        raise ValueError(f"costs must be one number or one per peer ({len(probs)}), got {len(costs)} values")
    costs = [check_positive_real(f"costs[{i}]", c) for i, c in enumerate(costs)]
    omega = check_positive_real("origin_cost", origin_cost)
    return probs, costs, omega


def expected_query_cost(order, probabilities, costs, origin_cost: float) -> float:
    """Expected total cost of asking the peers in ``order`` one at a time, then the origin.

    :param order: peer indices (each at most once); the origin is asked after them unless one has p = 1.
    :param probabilities: ``p_j``, the probability that peer j has the key.
    :param costs: ``tau_j > 0``, the cost of asking peer j (one number for all peers, or one per peer).
    :param origin_cost: ``omega > 0``, the cost of asking the origin, which always has the key.

    >>> expected_query_cost([0, 1], [0.5, 0.5], 1.0, 10.0)  # 1 + 0.5 * 1 + 0.25 * 10
    4.0
    """
    probs, taus, omega = _check(probabilities, costs, origin_cost)
    order = [check_integer("order[...]", j, 0) for j in order]
    if len(set(order)) != len(order) or any(j >= len(probs) for j in order):
        raise ValueError(f"order must list distinct peer indices below {len(probs)}, got {order!r}")
    total, miss = 0.0, 1.0
    for j in order:
        total += miss * taus[j]
        miss *= 1.0 - probs[j]
        if miss == 0.0:
            return total
    return total + miss * omega


def optimal_query_order(probabilities, costs, origin_cost: float) -> QueryPlan:
    """The optimal order of queries to the peers (Theorem 6; Theorem 7 when ``costs`` is one number).

    :param probabilities: ``p_j = Pr(x in S_j | CBF_ij)`` for each peer j (0 for peers whose summary says no).
    :param costs: ``tau_j > 0``: one number for all peers, or one per peer.
    :param origin_cost: ``omega > 0``, the cost of the origin, which always has the key.
    :returns: a :class:`QueryPlan`. Peers are ordered by ``p_j / tau_j`` (non-increasing; ties by index); only those
        with ``p_j / tau_j > 1 / omega`` are asked (at a tie asking or not costs the same: the peer is not asked).

    >>> plan = optimal_query_order([0.9, 0.05, 0.6], [1.0, 1.0, 2.0], origin_cost=10.0)
    >>> plan.peers, plan.ends_at_origin, round(plan.expected_cost, 4)
    ((0, 2), True, 1.6)
    """
    probs, taus, omega = _check(probabilities, costs, origin_cost)
    ranked = sorted(range(len(probs)), key=lambda j: (-probs[j] / taus[j], j))
    peers = []
    for j in ranked:
        if probs[j] / taus[j] * omega <= 1.0:
            break
        peers.append(j)
        if probs[j] >= 1.0:
            break
    ends_at_origin = not (peers and probs[peers[-1]] >= 1.0)
    return QueryPlan(tuple(peers), ends_at_origin, expected_query_cost(peers, probs, taus, omega))


def peer_probabilities(key, summaries, priors) -> list[float]:
    """``p_j = Pr(key in S_j | CBF_ij)`` for each peer's counting-filter summary (Theorem 2), the input of
    :func:`optimal_query_order`.

    :param key: the key proxy i missed.
    :param summaries: one counting filter per peer (``counters(key)``, ``num_counters`` and ``num_keys``, as
        ``bloomwise.CountingBloomFilter``; the partitioned layout is the paper's model).
    :param priors: ``Pr(key in S_j)`` before the summaries are read: one number or Prior for all peers, or one per
        peer.

    >>> from bloomwise import CountingBloomFilter
    >>> peers = [CountingBloomFilter.from_size(600, 3, layout="partitioned", seed=2) for _ in range(2)]
    >>> peers[0].update([f"page{i}" for i in range(100)])
    >>> peers[1].update([f"page{i}" for i in range(50, 150)])
    >>> p = peer_probabilities("page10", peers, 0.2)   # only peer 0 holds page10
    >>> p[0] > 0.5 > p[1]
    True
    >>> optimal_query_order(p, costs=1.0, origin_cost=10.0).peers
    (0,)
    """
    summaries = list(summaries)
    if isinstance(priors, (Prior, numbers.Real)) and not isinstance(priors, bool):
        priors = [priors] * len(summaries)
    priors = list(priors)
    if len(priors) != len(summaries):
        raise ValueError(f"priors must be one value or one per peer ({len(summaries)}), got {len(priors)} values")
    out = []
    for j, (summary, prior) in enumerate(zip(summaries, priors)):
        p = prior.probability(key) if isinstance(prior, Prior) else check_closed_probability(f"priors[{j}]", prior)
        n = int(summary.num_keys)
        counters = list(summary.counters(key))
        if n == 0 or min(counters) == 0:
            out.append(0.0)
            continue
        out.append(cbf_posterior(counters, int(summary.num_cells), n, p))
    return out


def _brute_force(probabilities, costs, origin_cost):  # pragma: no cover - used by the tests
    """The minimum expected cost over every ordered subset of the peers (for tests; exponential)."""
    from itertools import permutations

    probs, taus, omega = _check(probabilities, costs, origin_cost)
    best = math.inf
    for r in range(len(probs) + 1):
        for order in permutations(range(len(probs)), r):
            best = min(best, expected_query_cost(order, probs, taus, omega))
    return best
