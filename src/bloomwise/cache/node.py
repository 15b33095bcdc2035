"""CacheNode: one proxy's decisions and counters, driven the same way by the simulator and by the network proxy.

A client request, step by step (the caller does the I/O between the steps)::

    doc = node.lookup(key)                       # counts the request, and a local hit
    if doc is None:
        request = RequestState()                 # this request's own state (requests may interleave)
        for peer_id in node.route(key):          # whom to ask, in order (empty: the origin)
            hit = <ask peer_id>                  # the peer answers with node.serve_peer_query(key)
            node.record_peer_answer(peer_id, key, hit, request)
            if hit and node.policy.sequential:   # paradox: one at a time, stop at the first hit
                break                            # icp, summary: every listed peer is asked (in parallel)
        if <no peer had it>:
            node.record_origin_fetch(key)
        node.admit(key, size, body, headers)     # store it; returns the keys evicted

Summaries: when ``node.summary_due()``, ``update = node.publish_summary()`` and send ``update.to_bytes()`` to every
peer (``node.note_summary_sent(peer_id, update.nbytes)`` for each copy); a peer calls
``receive_summary(sender_id, data)``. A peer that raises SummaryGap (it missed a version, or we restarted) gets
``node.summary_since(version)`` or ``node.whole_summary()``.

What is counted (``stats()``): a *remote hit* is a request that missed locally and was served by a peer; a *false
hit* is a query the summary said "maybe" to, which the peer answered with a miss (a wasted query; ICP queries are
not false hits, since ICP has no summary); a *false miss* is a request that went to the origin while some peer held
the document: only an oracle knows that, so the simulator (which sees every cache) calls ``record_false_miss``.
"""
from __future__ import annotations

import time
from typing import Optional

from bloomwise._checks import check_finite_positive
from bloomwise.cache.routing import DEFAULT_ORIGIN_COST, DEFAULT_PEER_COST, PeerState, RoutingPolicy, make_policy
from bloomwise.cache.store import Document, DocumentCache
from bloomwise.cache.summary import PeerSummary, SummaryPublisher, SummaryUpdate

__all__ = ["CacheNode", "RequestState", "STATS_KEYS"]

#: the counters of ``CacheNode.stats()`` (beside ``peers``)
STATS_KEYS = ("requests", "local_hits", "remote_hits", "false_hits", "false_misses", "peer_queries",
              "origin_fetches", "summary_bytes_out", "summary_bytes_in", "peer_queries_served", "summaries_out",
              "summaries_in", "query_cost")


class RequestState:
    """What one client request has had so far. A network proxy serves many requests at once, and their steps
    interleave: whether a request was already served by a peer belongs to the request, not to the node."""

    __slots__ = ("served_remotely",)

    def __init__(self):
        self.served_remotely = False


class CacheNode:
    """One proxy: its cache, its summary publisher, its peers' summaries, its routing policy and its counters.

    :param name: the node's name (its peer id at the others).
    :param cache: its DocumentCache.
    :param policy: a RoutingPolicy or a name (``"none"``, ``"icp"``, ``"summary"``, ``"paradox"``, ``"carp"``).
    :param summary_kind: ``"bits"`` or ``"counters"`` (what this node publishes).
    :param update_threshold: fraction of the cached documents changed before a summary is due, in (0, 1].
    :param origin_cost: omega, the cost of an origin fetch (> 0).
    :param peer_cost: tau, the default cost of asking a peer (> 0).
    :param origin_id: the 64-bit instance id of its summaries (default random).
    :param max_summary_bytes: the largest summary update accepted from a peer.
    """

    def __init__(self, name, cache: DocumentCache, *, policy="summary", summary_kind: str = "bits",
                 update_threshold: float = 0.01, origin_cost: float = DEFAULT_ORIGIN_COST,
                 peer_cost: float = DEFAULT_PEER_COST, origin_id: Optional[int] = None,
                 max_summary_bytes: Optional[int] = None):
        if not isinstance(cache, DocumentCache):
            raise TypeError(f"cache must be a DocumentCache, got {type(cache).__name__}")
        self.name = name
        self.cache = cache
        self.origin_cost = check_finite_positive("origin_cost", origin_cost)
        self.peer_cost = check_finite_positive("peer_cost", peer_cost)
        if isinstance(policy, str):
            policy = make_policy(policy, origin_cost=self.origin_cost, node_name=name)
        elif not isinstance(policy, RoutingPolicy):
            raise TypeError(f"policy must be a RoutingPolicy or a name, got {policy!r}")
        self.policy = policy
        self.publisher = SummaryPublisher(cache, kind=summary_kind, update_threshold=update_threshold,
                                          origin=origin_id)
        self._summary_limits = {} if max_summary_bytes is None else {"max_size": max_summary_bytes}
        self._peers: dict = {}
        self._peer_list: list = []
        self.requests = self.local_hits = self.remote_hits = self.false_hits = self.false_misses = 0
        self.peer_queries = self.origin_fetches = self.peer_queries_served = 0
        self.summary_bytes_out = self.summary_bytes_in = self.summaries_out = self.summaries_in = 0
        self.query_cost = 0.0
        self._sequential_request = RequestState()  # for callers that run one request at a time (the simulator)

    # -- peers -------------------------------------------------------------------------------------------------------
    def add_peer(self, peer_id, *, cost: Optional[float] = None) -> PeerState:
        if peer_id == self.name:
            raise ValueError(f"a node cannot be its own peer ({peer_id!r})")
        if peer_id in self._peers:
            raise ValueError(f"peer {peer_id!r} is already known")
        state = PeerState(peer_id, None, self.peer_cost if cost is None else check_finite_positive("cost", cost), True)
        self._peers[peer_id] = state
        self._peer_list.append(state)
        return state

    def remove_peer(self, peer_id) -> None:
        state = self._peers.pop(peer_id)
        self._peer_list.remove(state)

    @property
    def peers(self) -> list:
        """The PeerState of every peer, in the order they were added."""
        return list(self._peer_list)

    def peer(self, peer_id) -> PeerState:
        return self._peers[peer_id]

    def set_peer_cost(self, peer_id, tau: float) -> None:
        self._peers[peer_id].cost = check_finite_positive("tau", tau)

    def set_peer_health(self, peer_id, healthy: bool) -> None:
        self._peers[peer_id].healthy = bool(healthy)

    # -- a client request --------------------------------------------------------------------------------------------
    def lookup(self, key) -> Optional[Document]:
        """Step 1: the local cache (counts the request; a hit counts as a local hit and as a use)."""
        self.requests += 1
        self._sequential_request.served_remotely = False
        doc = self.cache.get(key)
        if doc is not None:
            self.local_hits += 1
        return doc

    def route(self, key) -> list:
        """Step 2, on a local miss: the peers to ask, in order (empty: go to the origin)."""
        return self.policy.order(key, self._peer_list)

    def record_peer_answer(self, peer_id, key, hit: bool, request: Optional[RequestState] = None) -> None:
        """Step 3, per peer asked: its answer. The first hit of a request counts as its remote hit.

        :param request: the request's :class:`RequestState`; a caller that runs one request at a time from
            :meth:`lookup` to its last answer may omit it (the state of the last lookup is used).
        """
        self.peer_queries += 1
        self.query_cost += self._peers[peer_id].cost
        if request is None:
            request = self._sequential_request
        if hit:
            if not request.served_remotely:
                self.remote_hits += 1
                request.served_remotely = True
        elif self.policy.uses_summaries:
            self.false_hits += 1
        self.policy.observe(peer_id, key, hit)

    def record_origin_fetch(self, key) -> None:
        """Step 4, when no peer had it."""
        self.origin_fetches += 1

    def record_false_miss(self, key) -> None:
        """Called by an oracle (the simulator) when a peer held the document this node fetched from the origin."""
        self.false_misses += 1

    def admit(self, key, size: int, body: Optional[bytes] = None, headers: Optional[dict] = None, *,
              stored_at: Optional[float] = None) -> list:
        """Step 5: store the document fetched (from a peer or the origin); returns the keys evicted."""
        return self.cache.put(key, size, body, headers, stored_at=stored_at)

    def purge(self, key) -> bool:
        """Remove ``key`` on an operator's request (HTTP PURGE); True when it was cached. The next summary
        published leaves it out."""
        return self.cache.remove(key)

    def serve_peer_query(self, key) -> Optional[Document]:
        """A peer asks for ``key``: the document or None (counted; never forwarded; a hit counts as a use)."""
        self.peer_queries_served += 1
        return self.cache.get(key)

    # -- summaries ---------------------------------------------------------------------------------------------------
    def summary_due(self) -> bool:
        return self.publisher.due()

    def publish_summary(self, *, whole: bool = False) -> SummaryUpdate:
        """The next summary version (delta or whole, whichever is smaller; ``whole=True`` forces whole)."""
        return self.publisher.publish(whole=whole)

    def summary_since(self, version: int) -> Optional[SummaryUpdate]:
        return self.publisher.delta_since(version)

    def whole_summary(self) -> SummaryUpdate:
        return self.publisher.whole_summary()

    def note_summary_sent(self, peer_id, nbytes: int) -> None:
        """Count one copy of a summary update sent to a peer."""
        self.summaries_out += 1
        self.summary_bytes_out += nbytes

    def receive_summary(self, peer_id, update, *, now: Optional[float] = None) -> PeerSummary:
        """Apply a peer's update (a SummaryUpdate or its bytes). SummaryGap or FormatError leave the summary held as
        it was."""
        state = self._peers[peer_id]
        if not isinstance(update, SummaryUpdate):
            update = SummaryUpdate.from_bytes(update, **self._summary_limits)
        summary = state.summary if state.summary is not None else PeerSummary(**self._summary_limits)
        summary.apply(update, now=now)
        state.summary = summary
        self.summaries_in += 1
        self.summary_bytes_in += update.nbytes
        return summary

    def share_summary(self, peer_id, summary: PeerSummary, nbytes: int) -> None:
        """Simulation shortcut: hold ``summary``, a PeerSummary that other nodes hold too, as ``peer_id``'s summary,
        counting an update of ``nbytes`` received. Valid when every peer receives every update of ``peer_id`` at the
        same instant (then all their copies are equal); the network proxy uses :meth:`receive_summary`."""
        self._peers[peer_id].summary = summary
        self.summaries_in += 1
        self.summary_bytes_in += nbytes

    # -- counters ----------------------------------------------------------------------------------------------------
    def stats(self, *, now: Optional[float] = None) -> dict:
        """The counters (JSON-ready): ``STATS_KEYS`` and ``peers: {peer_id: {summary_version, summary_age_seconds,
        summary_bytes, cost, healthy}}`` (peer ids as strings)."""
        now = time.time() if now is None else now
        out = {key: getattr(self, key) for key in STATS_KEYS}
        peers = {}
        for state in self._peer_list:
            summary = state.summary
            held = summary is not None and summary.version is not None
            peers[str(state.peer_id)] = {
                "summary_version": summary.version if held else None,
                "summary_age_seconds": (now - summary.received_at) if held else None,
                "summary_bytes": summary.nbytes if held else 0,
                "cost": state.cost,
                "healthy": state.healthy,
            }
        out["peers"] = peers
        return out

    def __repr__(self) -> str:
        return (f"<CacheNode {self.name!r} {self.policy.name}: {self.requests:,} requests, {self.local_hits:,} local "
                f"+ {self.remote_hits:,} remote hits, {len(self._peer_list)} peers>")
