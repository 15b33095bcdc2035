"""Trace-driven evaluation: replay one trace over N cooperating CacheNodes, once per routing policy.

Each policy gets identical, empty caches (same sizes, seeds and summary parameters) and the same requests. A request
(GET only; other methods are counted in ``skipped`` and not replayed) goes to the proxy of its client
(``traces.assign_proxy``) and runs the :class:`~bloomwise.cache.node.CacheNode` steps: local lookup, the policy's
peers (all of them at once for ``icp`` and ``summary``; one at a time, stopping at the first hit, for ``paradox``;
the URL's home proxy for ``carp``), the origin if no peer had it, then the document is stored (a document fetched
from a peer is cached too, as in Summary Cache's simulations; under ``carp`` the home proxy fetches from the origin
and keeps the document, and the requesting proxy keeps no copy). When a node's summary is due it publishes, and
every peer receives the update at once: staleness comes only from the update threshold, the paper's model. The
simulator sees every cache, so it knows the false misses: a request that went to the origin while some other proxy
held the document; and the false positives of every summary checked: ``peer_check_fpr`` is, over the local misses,
the "maybe" answers of summaries of peers that did not hold the key divided by the checks of such peers (for
``summary``, which asks every "maybe", exactly false hits / checks of peers that lacked the key).

Summary sizing. ``bits_per_entry`` positions per document: the caches start sized from ``entries`` (the cache size
over the mean document size) and, with ``resize_tolerance`` (default 10%, Squid's rule), every publication first
re-sizes a summary whose cached count drifted past the tolerance to ``bits_per_entry`` positions per document cached
(``SummaryPublisher``). ``bits_per_cached_document`` reports positions per cached document over every publication
of every proxy: the positions summed over publications divided by the documents cached summed over them (the mean
of m / n weighted by n, so that the first publications of nearly empty caches do not dominate it).

Costs, latency and bandwidth. ``cost = sum over queries of tau_j + origin fetches x omega`` (the work: every query
costs its tau even when sent in parallel). ``latency`` is the sum over requests of the time a client waits, with tau
and omega as latencies: a local hit waits 0; a miss waits the largest tau of the peers asked at once (icp, summary),
the sum of the taus of the peers asked one after the other (paradox), or the home's tau (carp), plus omega when the
document comes from the origin. Inter-proxy *messages* are an ICP query and its reply per peer asked (carp: the
request forwarded to the home and its answer), plus one message per summary update sent to each peer; *query bytes*
are those of ICP (RFC 2186): a 20-byte header, the 4-byte requester address and the NUL-terminated URL in the query,
the header and the URL in the reply. Summary bytes are ``len(update.to_bytes())`` for each copy sent; ``wire_bytes``
is the sum of both. ``receiver_memory_bytes``: the bytes of its peers' summaries one proxy holds at the end (mean
over the proxies): counters summaries take four times the bytes of bits summaries of as many positions.
Byte hit ratios count each request's size (as libCacheSim does).

Engines. ``engine="python"`` runs the loop below, the reference; ``"compiled"`` runs
:mod:`bloomwise.cache.fast_replay` (every policy, LRU or FIFO: every field of the
result the same, many times faster); ``"auto"`` (the default) runs the compiled engine when it covers the replay and
Python otherwise.
``PolicyResult.engine`` says which ran.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterable, Optional, Sequence

from bloomwise._checks import (check_fraction, check_positive_int, check_positive_number,
                               check_tolerance)
from bloomwise.cache.fast_replay import choose_engine, replay_cooperative, replay_independent
from bloomwise.cache.node import CacheNode
from bloomwise.cache.routing import (DEFAULT_ORIGIN_COST, DEFAULT_PEER_COST, POLICY_NAMES, PRIOR_ESTIMATORS,
                                     make_policy)
from bloomwise.cache.store import AVERAGE_DOCUMENT_SIZE, EVICTION_POLICIES, DocumentCache
from bloomwise.cache.summary import SUMMARY_KINDS, PeerSummary
from bloomwise.cache.traces import client_to_proxy

__all__ = ["SimulationConfig", "PolicyResult", "simulate", "replay", "JSON_KEYS", "ICP_QUERY_OVERHEAD",
           "MAX_PROXIES", "estimate_mean_size"]

#: the keys of ``PolicyResult.to_json()``, in order
JSON_KEYS = ("policy", "requests", "local_hit_ratio", "remote_hit_ratio", "hit_ratio", "local_byte_hit_ratio",
             "remote_byte_hit_ratio", "byte_hit_ratio", "false_hits", "false_misses", "peer_queries",
             "peer_check_fpr", "bits_per_cached_document", "summary_bytes", "query_bytes", "wire_bytes", "messages",
             "receiver_memory_bytes", "cost", "latency", "mean_latency", "seconds", "engine")
#: bytes of an ICP query and its reply besides the URL (twice, NUL-terminated): two 20-byte headers, the requester
ICP_QUERY_OVERHEAD = 20 + 4 + 20
#: the most proxies simulated: each keeps every peer's summary and prior, so time and memory grow as P**2 (the compiled
#: engine took 47 s for 10,000 proxies over 3,000 requests; the Python engine passed 4.5 GB at 5,000)
MAX_PROXIES = 4096


@dataclasses.dataclass(frozen=True)
class SimulationConfig:
    """The cluster simulated.

    :param num_proxies: P, from 1 to :data:`MAX_PROXIES`.
    :param cache_size: bytes of documents per proxy (>= 1).
    :param bits_per_entry: counters (summary bits) per document cached, within ``resize_tolerance`` (>= 1).
    :param update_threshold: new documents, as a fraction of the documents cached, before a summary is published,
        in (0, 1] (Summary Cache's threshold).
    :param expected_entries: documents each summary is sized for at the start; None: ``cache_size //
        mean_document_size``.
    :param mean_document_size: bytes, used when ``expected_entries`` is None (default 8 KiB, Summary Cache's).
    :param resize_tolerance: re-size a summary to ``bits_per_entry`` positions per document cached when the count
        drifted more than this fraction from the count it was sized for (default 0.1, Squid's); None: never (the
        summaries keep their starting size).
    :param summary_kind: ``"auto"`` (bits for ``summary``, counters for ``paradox``), ``"bits"`` or ``"counters"``.
    :param eviction: ``"lru"`` or ``"fifo"``.
    :param peer_cost: tau of every peer; ``origin_cost``: omega.
    :param seed: seeds the filters and the summaries' origin ids.
    :param wire: deliver each update as bytes that every receiver parses and applies to its own copy (the network
        path), instead of applying it once to a copy all receivers share (the same state, since every peer receives
        every update at the same instant; much faster with many proxies). The results are the same.
    """

    num_proxies: int = 4
    cache_size: int = 64 << 20
    bits_per_entry: int = 8
    update_threshold: float = 0.01
    expected_entries: Optional[int] = None
    mean_document_size: float = AVERAGE_DOCUMENT_SIZE
    resize_tolerance: Optional[float] = 0.1
    summary_kind: str = "auto"
    eviction: str = "lru"
    peer_cost: float = DEFAULT_PEER_COST
    origin_cost: float = DEFAULT_ORIGIN_COST
    prior_window: float = 1000.0
    prior_estimator: str = "mixture"
    seed: int = 0
    wire: bool = False

    def __post_init__(self):
        def whole(name, minimum=1):  # stored as a Python int (a numpy integer is accepted)
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name), minimum))
        whole("num_proxies")
        if self.num_proxies > MAX_PROXIES:
            raise ValueError(f"num_proxies must be at most {MAX_PROXIES}: every proxy keeps a summary of every other, so "
                             f"time and memory grow with the square of the number of proxies; got {self.num_proxies}")
        whole("cache_size")
        whole("bits_per_entry")
        whole("seed", 0)
        if self.expected_entries is not None:
            whole("expected_entries")
        check_fraction("update_threshold", self.update_threshold)
        for name in ("mean_document_size", "peer_cost", "origin_cost"):
            check_positive_number(name, getattr(self, name))
        check_tolerance("resize_tolerance", self.resize_tolerance)
        if self.summary_kind not in ("auto",) + SUMMARY_KINDS:
            raise ValueError(f"summary_kind must be 'auto', 'bits' or 'counters', got {self.summary_kind!r}")
        if self.prior_estimator not in PRIOR_ESTIMATORS:
            raise ValueError(f"prior_estimator must be one of {', '.join(PRIOR_ESTIMATORS)}, got "
                             f"{self.prior_estimator!r}")
        if self.eviction not in EVICTION_POLICIES:
            raise ValueError(f"eviction must be one of {', '.join(EVICTION_POLICIES)}, got {self.eviction!r}")

    @property
    def entries(self) -> int:
        """Documents each summary is sized for."""
        if self.expected_entries is not None:
            return self.expected_entries
        return max(1, int(self.cache_size // self.mean_document_size))

    def kind_for(self, policy: str) -> str:
        if self.summary_kind != "auto":
            return self.summary_kind
        return "counters" if policy == "paradox" else "bits"


@dataclasses.dataclass
class PolicyResult:
    """The outcome of one policy's replay (totals over all proxies)."""

    policy: str
    requests: int = 0
    local_hits: int = 0
    remote_hits: int = 0
    requested_bytes: int = 0
    local_hit_bytes: int = 0
    remote_hit_bytes: int = 0
    false_hits: int = 0
    false_misses: int = 0
    peer_queries: int = 0
    origin_fetches: int = 0
    summary_bytes: int = 0
    summary_messages: int = 0
    query_bytes: int = 0
    peer_checks_lacking: int = 0
    peer_check_false_positives: int = 0
    bits_per_cached_document: Optional[float] = None
    summary_resizes: int = 0
    receiver_memory_bytes: float = 0.0
    cost: float = 0.0
    latency: float = 0.0
    seconds: float = 0.0
    skipped: int = 0
    #: which engine ran the replay: "python" or "compiled"
    engine: str = "python"

    @property
    def local_hit_ratio(self) -> float:
        return self.local_hits / self.requests if self.requests else 0.0

    @property
    def remote_hit_ratio(self) -> float:
        return self.remote_hits / self.requests if self.requests else 0.0

    @property
    def hit_ratio(self) -> float:
        return (self.local_hits + self.remote_hits) / self.requests if self.requests else 0.0

    @property
    def local_byte_hit_ratio(self) -> float:
        return self.local_hit_bytes / self.requested_bytes if self.requested_bytes else 0.0

    @property
    def remote_byte_hit_ratio(self) -> float:
        return self.remote_hit_bytes / self.requested_bytes if self.requested_bytes else 0.0

    @property
    def byte_hit_ratio(self) -> float:
        """Bytes served from a cache (local or a peer's) / bytes requested."""
        return (self.local_hit_bytes + self.remote_hit_bytes) / self.requested_bytes if self.requested_bytes else 0.0

    @property
    def peer_check_fpr(self) -> Optional[float]:
        """Summary "maybe" answers for peers that lacked the key / checks of such peers (None without summaries)."""
        if not self.peer_checks_lacking:
            return None
        return self.peer_check_false_positives / self.peer_checks_lacking

    @property
    def mean_latency(self) -> float:
        return self.latency / self.requests if self.requests else 0.0

    @property
    def wire_bytes(self) -> int:
        """Inter-proxy bytes: queries and replies plus summary updates (= ``bandwidth``)."""
        return self.query_bytes + self.summary_bytes

    @property
    def queries_per_request(self) -> float:
        return self.peer_queries / self.requests if self.requests else 0.0

    @property
    def messages(self) -> int:
        """Inter-proxy messages: a query and its reply per peer asked, one per summary copy sent."""
        return 2 * self.peer_queries + self.summary_messages

    @property
    def bandwidth(self) -> int:
        """Inter-proxy bytes: ICP queries and replies plus summary updates."""
        return self.query_bytes + self.summary_bytes

    def to_json(self) -> dict:
        """Exactly the keys of :data:`JSON_KEYS`."""
        return {key: getattr(self, key) for key in JSON_KEYS}


def estimate_mean_size(requests: Iterable, limit: int = 10_000) -> Optional[float]:
    """The mean size of the first ``limit`` GET requests with a size > 0 (None when there is none)."""
    total = count = 0
    for request in requests:
        if request.method == "GET" and request.size > 0:
            total += request.size
            count += 1
            if count >= limit:
                break
    return total / count if count else None


def _make_nodes(policy: str, config: SimulationConfig) -> list:
    kind = config.kind_for(policy)
    nodes = []
    for i in range(config.num_proxies):
        cache = DocumentCache(config.cache_size, eviction=config.eviction, bits_per_entry=config.bits_per_entry,
                              expected_entries=config.entries, seed=config.seed + i)
        routing = make_policy(policy, origin_cost=config.origin_cost, prior_window=config.prior_window,
                              prior_estimator=config.prior_estimator, node_name=i)
        node = CacheNode(i, cache, policy=routing, summary_kind=kind, update_threshold=config.update_threshold,
                         origin_cost=config.origin_cost, peer_cost=config.peer_cost,
                         origin_id=(config.seed << 16) + i + 1)
        node.publisher.resize_tolerance = config.resize_tolerance
        nodes.append(node)
    for node in nodes:
        for other in nodes:
            if other is not node:
                node.add_peer(other.name)
    return nodes


def replay(requests: Iterable, policy: str, config: SimulationConfig, *, nodes: Optional[list] = None,
           progress: Optional[Callable[[int], None]] = None, engine: str = "auto") -> PolicyResult:
    """Replay ``requests`` (Request records) under one policy; returns the totals. ``nodes`` (from a previous
    call's cluster, for inspection) are made fresh when None; ``progress(n)`` is called every 65,536 records.
    ``engine``: ``"auto"``, ``"compiled"`` or ``"python"`` (the module docstring)."""
    if policy not in POLICY_NAMES:
        raise ValueError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {policy!r}")
    if choose_engine(engine, policy, num_proxies=config.num_proxies, cache_size=config.cache_size,
                     eviction=config.eviction, inspecting=nodes is not None) == "compiled":
        return _replay_compiled(requests, policy, config, progress)
    if nodes is None:
        nodes = _make_nodes(policy, config)
    num_proxies = len(nodes)
    cooperative = policy in ("summary", "paradox")
    sequential = nodes[0].policy.sequential
    home_fetches = nodes[0].policy.home_fetches
    wire = config.wire
    proxy_of = client_to_proxy(num_proxies)  # one hash a request: no state per distinct client
    caches = [node.cache.keys() for node in nodes]  # the oracle's view of every cache (live key views: `in` is O(1))
    peer_states = [[(state, caches[state.peer_id]) for state in node.peers] for node in nodes]
    shared_copies = [PeerSummary() for _ in nodes]
    result = PolicyResult(policy)
    query_bytes = skipped = seen = 0
    requested_bytes = local_hit_bytes = remote_hit_bytes = checks_lacking = check_false_positives = 0
    latency = 0.0
    started = time.perf_counter()
    for request in requests:
        seen += 1
        if progress is not None and not seen & 0xFFFF:
            progress(seen)
        if request.method != "GET":
            skipped += 1
            continue
        p = proxy_of(request.client)
        node = nodes[p]
        url = request.url
        key = "GET " + url
        size = request.size
        requested_bytes += size
        if node.lookup(key) is not None:
            local_hit_bytes += size
            continue
        if cooperative:  # the oracle: how often a summary says "maybe" for a peer that lacks the key
            for state, held in peer_states[p]:
                summary = state.summary
                if summary is not None and state.healthy and key not in held:
                    checks_lacking += 1
                    if key in summary.filter:
                        check_false_positives += 1
        served = False
        keep_here = True
        waited = 0.0
        for peer_id in node.route(key):
            peer = nodes[peer_id]
            hit = peer.serve_peer_query(key) is not None
            node.record_peer_answer(peer_id, key, hit)
            query_bytes += ICP_QUERY_OVERHEAD + 2 * (len(url) + 1)
            tau = node.peer(peer_id).cost
            waited = waited + tau if sequential else max(waited, tau)
            if home_fetches:  # carp: the home serves it, or fetches it from the origin and keeps it; no copy here
                keep_here = False
            if hit:
                served = True
                if sequential:
                    break
            elif home_fetches:
                node.record_origin_fetch(key)
                peer.admit(key, size, stored_at=request.timestamp)
                waited += node.origin_cost
        if served:
            remote_hit_bytes += size
        elif keep_here:
            node.record_origin_fetch(key)
            waited += node.origin_cost
            my_cache = caches[p]
            for cache in caches:
                if cache is not my_cache and key in cache:
                    node.record_false_miss(key)
                    break
        latency += waited
        if keep_here:
            node.admit(key, size, stored_at=request.timestamp)
        if cooperative and node.summary_due():
            update = node.publish_summary()
            nbytes = update.nbytes
            if wire:  # every receiver parses the bytes and applies them to its own copy
                data = update.to_bytes()
                for other in nodes:
                    if other is not node:
                        other.receive_summary(node.name, data, now=request.timestamp)
                        node.note_summary_sent(other.name, nbytes)
            else:  # every receiver gets the update at this instant: one copy, shared, holds what each would hold
                shared = shared_copies[p]
                shared.apply(update, now=request.timestamp)
                for other in nodes:
                    if other is not node:
                        other.share_summary(node.name, shared, nbytes)
                        node.note_summary_sent(other.name, nbytes)
    result.seconds = time.perf_counter() - started
    positions = documents = 0
    for node in nodes:
        result.requests += node.requests
        result.local_hits += node.local_hits
        result.remote_hits += node.remote_hits
        result.false_hits += node.false_hits
        result.false_misses += node.false_misses
        result.peer_queries += node.peer_queries
        result.origin_fetches += node.origin_fetches
        result.summary_bytes += node.summary_bytes_out
        result.summary_messages += node.summaries_out
        result.cost += node.query_cost + node.origin_fetches * node.origin_cost
        publisher = node.publisher
        positions += publisher.published_positions
        documents += publisher.published_documents
        result.summary_resizes += publisher.resizes
        result.receiver_memory_bytes += sum(state.summary.nbytes for state in node.peers
                                            if state.summary is not None) / num_proxies
    result.bits_per_cached_document = positions / documents if cooperative and documents else None
    result.query_bytes = query_bytes
    result.skipped = skipped
    result.requested_bytes = requested_bytes
    result.local_hit_bytes = local_hit_bytes
    result.remote_hit_bytes = remote_hit_bytes
    result.peer_checks_lacking = checks_lacking
    result.peer_check_false_positives = check_false_positives
    result.latency = latency
    return result


def _replay_compiled(requests: Iterable, policy: str, config: SimulationConfig,
                     progress: Optional[Callable[[int], None]]) -> PolicyResult:
    """The compiled engine: the counters the Python loop above gives, summed the same way."""
    if policy != "none":
        return _replay_compiled_cooperative(requests, policy, config, progress)
    started = time.perf_counter()
    totals = replay_independent(requests, num_proxies=config.num_proxies, cache_size=config.cache_size,
                                eviction=config.eviction, origin_cost=config.origin_cost, progress=progress)
    result = PolicyResult(policy, engine="compiled")
    result.seconds = time.perf_counter() - started
    origin_cost = float(config.origin_cost)
    for counters in totals.counters:  # per proxy, in order, as the Python loop sums its nodes
        result.requests += counters["requests"]
        result.local_hits += counters["hits"]
        result.false_misses += counters["false_misses"]
        result.origin_fetches += counters["misses"]
        result.requested_bytes += counters["requested_bytes"]
        result.local_hit_bytes += counters["hit_bytes"]
        result.cost += 0.0 + counters["misses"] * origin_cost  # no queries: query cost 0.0
    result.latency = totals.latency
    result.skipped = totals.skipped
    return result


def summary_nbytes(kind: str, num_cells: int) -> int:
    """Bytes a receiver holds for a summary of ``num_cells`` positions: bits, or 4-bit counters, in whole 64-bit
    words (``PeerSummary.nbytes``)."""
    bits = num_cells if kind == "bits" else 4 * num_cells
    return (bits + 63) // 64 * 8


def _replay_compiled_cooperative(requests: Iterable, policy: str, config: SimulationConfig,
                                 progress: Optional[Callable[[int], None]]) -> PolicyResult:
    """``icp``, ``summary``, ``paradox`` and ``carp`` by the compiled engine (``fast_replay.replay_cooperative``)."""
    started = time.perf_counter()
    kind = config.kind_for(policy)
    outcome = replay_cooperative(requests, policy, num_proxies=config.num_proxies, cache_size=config.cache_size,
                                 eviction=config.eviction, origin_cost=config.origin_cost, peer_cost=config.peer_cost,
                                 summary_kind=kind, bits_per_entry=config.bits_per_entry,
                                 expected_entries=config.entries, seed=config.seed,
                                 update_threshold=config.update_threshold, resize_tolerance=config.resize_tolerance,
                                 prior_window=config.prior_window, prior_estimator=config.prior_estimator,
                                 progress=progress)
    result = PolicyResult(policy, engine="compiled")
    result.seconds = time.perf_counter() - started
    num_proxies = config.num_proxies
    origin_cost = float(config.origin_cost)
    held = [summary_nbytes(kind, counters["summary_cells"]) for counters in outcome.counters]
    positions = documents = 0
    for p, counters in enumerate(outcome.counters):  # per proxy, in order, as the Python loop sums its nodes
        result.requests += counters["requests"]
        result.local_hits += counters["local_hits"]
        result.remote_hits += counters["remote_hits"]
        result.false_hits += counters["false_hits"]
        result.false_misses += counters["false_misses"]
        result.peer_queries += counters["peer_queries"]
        result.origin_fetches += counters["origin_fetches"]
        result.summary_bytes += counters["summary_bytes_out"]
        result.summary_messages += counters["summaries_out"]
        result.cost += counters["query_cost"] + counters["origin_fetches"] * origin_cost
        positions += counters["published_positions"]
        documents += counters["published_documents"]
        result.summary_resizes += counters["resizes"]
        result.receiver_memory_bytes += sum(nbytes for q, nbytes in enumerate(held)
                                            if q != p and outcome.counters[q]["summary_cells"]) / num_proxies
        result.requested_bytes += counters["requested_bytes"]
        result.local_hit_bytes += counters["local_hit_bytes"]
    cooperative = policy in ("summary", "paradox")
    result.bits_per_cached_document = positions / documents if cooperative and documents else None
    totals = outcome.totals
    result.query_bytes = totals["query_bytes"]
    result.remote_hit_bytes = totals["remote_hit_bytes"]
    result.peer_checks_lacking = totals["peer_checks_lacking"]
    result.peer_check_false_positives = totals["peer_check_false_positives"]
    result.latency = totals["latency"]
    result.skipped = outcome.skipped
    return result


def simulate(trace: Callable[[], Iterable] | Iterable, policies: Sequence[str], config: SimulationConfig, *,
             progress: Optional[Callable[[str, int], None]] = None, engine: str = "auto") -> list:
    """Replay the trace once per policy over identical caches; one :class:`PolicyResult` per policy, in order.

    :param trace: a function returning a fresh iterable of Request records (called once per policy: a file is
        re-read, never held in memory), or a re-iterable such as a list or a ``SyntheticTrace``.
    :param policies: names among ``none``, ``icp``, ``summary``, ``paradox``, ``carp``.
    :param engine: ``"auto"`` (default), ``"compiled"`` or ``"python"``, for every policy (see the module docstring).
    """
    policies = list(policies)
    if not policies:
        raise ValueError("policies must name at least one policy")
    for name in policies:
        if name not in POLICY_NAMES:
            raise ValueError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {name!r}")
        choose_engine(engine, name, num_proxies=config.num_proxies, cache_size=config.cache_size,
                      eviction=config.eviction)  # an engine that cannot run a policy is refused before any replay
    results = []
    for name in policies:
        requests = trace() if callable(trace) else trace
        tick = None if progress is None else (lambda n, name=name: progress(name, n))
        try:
            results.append(replay(requests, name, config, progress=tick, engine=engine))
        finally:
            close = getattr(requests, "close", None)
            if close is not None and callable(trace):
                close()
    return results
