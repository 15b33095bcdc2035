"""The compiled replay: a trace turned into arrays, a block at a time, and run by ``_native/replay.pyx``.

The Python engine (:func:`bloomwise.cache.simulation.replay`) is the reference; the compiled one gives the same
counters for what it covers, and :func:`choose_engine` picks it when it can:

- policy ``none`` (proxies that never ask each other), any number of proxies, LRU or FIFO eviction
  (``_native.replay.IndependentCaches``: the admission and eviction rules of
  :class:`~bloomwise.cache.store.DocumentCache`, the same hits, bytes, false misses, costs and latency);
- policies ``icp``, ``summary``, ``paradox`` and ``carp`` (:func:`replay_cooperative`, ``_native.replay.CooperativeCaches``): besides the
  caches, each proxy's counting filter of its cached keys with the geometry, seed and hashing of DocumentCache's
  (XXH3-64 of the key ``"GET " + url`` under seed ``config.seed + p``; positions and 4-bit sticky counters as
  ``CountingBloomFilter``'s), the publisher's rules (threshold of new documents, re-sizing, whole or the smaller of
  delta and whole, the bytes on the wire), the peers' copies of each summary, the routing, false hits and misses,
  the oracle's checks, costs, latency and bytes, and for ``paradox`` the priors (OnlinePrior), posteriors and the
  order of ParadoxPolicy with the same floating-point operations in the same order, for ``carp`` CarpPolicy's home
  (the CARP hashes of the URL's bytes and of the members ``str(p)``): every field of the PolicyResult equal to the Python engine's. The
  blocks then carry the cache keys' bytes (``request_blocks(names=True)``), hashed once per peer checked;
- not when the caller passes its own ``nodes`` to inspect afterwards (the compiled caches are not CacheNodes).

How a trace becomes arrays (:func:`request_blocks`): :data:`BLOCK_REQUESTS` records at a time, GET requests only
(the others are counted as skipped, as the Python engine does); the cache key ``"GET " + url`` becomes the 64-bit id
``XXH3-64(UTF-8 bytes of url, seed 0)`` (bloomwise's compiled XXH3; the method is always GET, so the URL alone names
the key), the proxy is :func:`~bloomwise.cache.traces.assign_proxy`'s (the same hash of the client, mod P), sizes
are int64. A source may instead give its own blocks (``request_blocks(num_proxies)``): :class:`OracleGeneralTrace`
reads libCacheSim's binary records straight into arrays, the object number itself as the id (exact: no hashing),
and :class:`CsvTrace` parses libCacheSim's csv lines into arrays with the compiled reader of
``CsvTraceReader.record_arrays`` (the ids and proxies computed as above, with no Request per record). Two different
URLs with the same 64-bit hash would share a cache entry: among n distinct URLs the probability that any two collide
is below ``n**2 / 2**65`` (3e-8 for a million URLs, 3e-6 for ten million), the only way the engines can differ.
Memory: one block of arrays plus what the caches hold (and, for the cooperative policies, each proxy's counting
filter, one byte per counter, and its published summary: state that grows with the documents cached).

>>> from bloomwise.cache.traces import Request
>>> trace = [Request(0.0, "c", "GET", url, 600) for url in ("a", "b", "a", "c", "a")]
>>> totals = replay_independent(trace, num_proxies=1, cache_size=1500, eviction="lru", origin_cost=10.0)
>>> totals.counters[0]["hits"], totals.counters[0]["evictions"], totals.latency
(2, 1, 30.0)
"""
from __future__ import annotations

import dataclasses
from itertools import islice
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

from bloomwise._native.hashes import hash_many, key_hash, xxh3
from bloomwise._native.replay import MAX_CAPACITY, CooperativeCaches, IndependentCaches
from bloomwise.cache.routing import carp_member_hash
from bloomwise.cache.store import EVICTION_POLICIES, filter_geometry
from bloomwise.cache.traces import (CsvTraceReader, OracleGeneralReader, assigned_requests, check_assignment,
                                    random_proxy_draws)

__all__ = ["ENGINES", "COMPILED_POLICIES", "BLOCK_REQUESTS", "RequestBlock", "IndependentTotals", "choose_engine",
           "compiled_limitation", "request_blocks", "replay_independent", "CooperativeTotals", "cooperative_caches",
           "replay_cooperative", "OracleGeneralTrace", "CsvTrace"]

#: ``engine=`` values: ``auto`` (compiled when it covers the replay, else Python), ``compiled``, ``python``
ENGINES = ("auto", "compiled", "python")
#: the policies the compiled replay runs
COMPILED_POLICIES = ("none", "icp", "summary", "paradox", "carp")
#: the policies whose caches ask each other (``_native.replay.CooperativeCaches``)
COOPERATIVE_POLICIES = ("icp", "summary", "paradox", "carp")
#: records read, converted and replayed at a time (the progress callback is called after each full block)
BLOCK_REQUESTS = 65536
_MAX_PROXIES = 2 ** 31 - 1


def compiled_limitation(policy: str, *, num_proxies: int, cache_size: int, eviction: str,
                        inspecting: bool = False) -> Optional[str]:
    """Why the compiled replay cannot run this configuration, or None when it can."""
    if policy not in COMPILED_POLICIES:
        return f"it runs policies {', '.join(COMPILED_POLICIES)} only, not {policy!r}"
    if inspecting:
        return "the caller passed nodes to inspect, which only the Python engine fills"
    if eviction not in EVICTION_POLICIES:
        return f"it knows eviction {', '.join(EVICTION_POLICIES)} only, not {eviction!r}"
    if not 1 <= cache_size <= MAX_CAPACITY:
        return f"cache size {cache_size} is beyond its limit of 2**63 - 1 bytes"
    if not 1 <= num_proxies <= _MAX_PROXIES:
        return f"{num_proxies} proxies are beyond its limit of 2**31 - 1"
    return None


def choose_engine(engine: str, policy: str, *, num_proxies: int, cache_size: int, eviction: str,
                  inspecting: bool = False) -> str:
    """``"compiled"`` or ``"python"``: which engine runs a replay asked for with ``engine`` (one of
    :data:`ENGINES`).

    :raises ValueError: an unknown engine, or ``"compiled"`` for a configuration it does not cover (the message says
        why).
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "python":
        return "python"
    reason = compiled_limitation(policy, num_proxies=num_proxies, cache_size=cache_size, eviction=eviction,
                                 inspecting=inspecting)
    if reason is None:
        return "compiled"
    if engine == "compiled":
        raise ValueError(f"the compiled engine cannot run this replay: {reason} (engine 'auto' or 'python' can)")
    return "python"


@dataclasses.dataclass
class RequestBlock:
    """Up to :data:`BLOCK_REQUESTS` records of a trace as arrays: the GET requests' ``keys`` (uint64),
    ``sizes`` (int64) and ``proxies`` (int32), ``records`` read (GET or not) and ``skipped`` (not GET).

    For the policies whose caches ask each other (their summaries hash the cache key, their queries carry the URL),
    also the cache keys ``"GET " + url`` as UTF-8 bytes one after the other, ``names`` (uint8), request i's being
    ``names[name_offsets[i]:name_offsets[i + 1]]`` (``name_offsets``: int64, one more than the requests), and
    ``url_lengths`` (int64: the URL's length in characters); None when not asked for."""

    keys: np.ndarray
    sizes: np.ndarray
    proxies: np.ndarray
    records: int
    skipped: int
    names: Optional[np.ndarray] = None
    name_offsets: Optional[np.ndarray] = None
    url_lengths: Optional[np.ndarray] = None


def _hash_texts(texts: list) -> np.ndarray:
    """XXH3-64 (seed 0) of each str's UTF-8 bytes; a str with a lone surrogate (no UTF-8 form) is hashed by its
    ``surrogatepass`` bytes, which no other str has."""
    try:
        return hash_many(texts)
    except ValueError:
        return np.fromiter((xxh3(text.encode("utf-8", "surrogatepass")) for text in texts), dtype=np.uint64,
                           count=len(texts))


def _sizes_array(requests: list) -> np.ndarray:
    sizes = [request.size for request in requests]
    array = np.array(sizes)
    if array.dtype != np.int64 or (len(array) and array.min() < 0):
        for request, size in zip(requests, sizes):
            if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 2 ** 63:
                line = getattr(request, "line", 0)
                where = f"the request of line {line}" if line else f"request {request!r}"
                raise ValueError(f"{where}: size {size!r} is not a whole number of bytes in [0, 2**63) (the "
                                 f"compiled replay's range; engine 'python' takes any size)")
        array = np.array(sizes, dtype=np.int64)
    return array


def _key_names(urls: list) -> tuple:
    """``(names, name_offsets, url_lengths)`` of :class:`RequestBlock` for these URLs: the UTF-8 bytes of each
    cache key ``"GET " + url`` (as the filters hash a str key), their offsets and the URLs' lengths in characters. A
    URL with a lone surrogate, which UTF-8 cannot encode, raises the filters' own ValueError for its key."""
    texts = ["GET " + url for url in urls]
    joined = "".join(texts)
    try:
        data = joined.encode("utf-8")
    except UnicodeEncodeError:
        for text in texts:
            key_hash(text)  # the first key UTF-8 cannot encode raises what the Python engine's filters raise
        raise
    char_lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    if len(data) == len(joined):  # ASCII: one byte per character
        byte_lengths = char_lengths
    else:
        byte_lengths = np.fromiter((len(text.encode("utf-8")) for text in texts), dtype=np.int64, count=len(texts))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(byte_lengths, out=offsets[1:])
    return np.frombuffer(data, dtype=np.uint8), offsets, char_lengths - 4


def request_blocks(requests: Iterable, num_proxies: int, *, names: bool = False) -> Iterator[RequestBlock]:
    """The trace as :class:`RequestBlock` arrays (see the module docstring for the ids and the proxies);
    ``names=True`` adds the cache keys' bytes and the URLs' lengths."""
    source = iter(requests)
    while True:
        block = list(islice(source, BLOCK_REQUESTS))
        if not block:
            return
        methods = [request.method for request in block]
        gets = block if methods.count("GET") == len(block) else [r for r, m in zip(block, methods) if m == "GET"]
        keys = _hash_texts([request.url for request in gets])
        sizes = _sizes_array(gets)
        if num_proxies == 1:
            proxies = np.zeros(len(gets), dtype=np.int32)
        else:
            clients = [request.client for request in gets]
            try:
                hashes = hash_many(clients)
            except ValueError:  # a client with no UTF-8 form: assign_proxy raises what the Python engine raises
                hashes = np.fromiter((xxh3(client.encode("utf-8")) for client in clients), dtype=np.uint64,
                                     count=len(clients))
            proxies = (hashes % np.uint64(num_proxies)).astype(np.int32)
        named = _key_names([request.url for request in gets]) if names else (None, None, None)
        yield RequestBlock(keys, sizes, proxies, len(block), len(block) - len(gets), *named)


@dataclasses.dataclass
class IndependentTotals:
    """The outcome of :func:`replay_independent`: ``counters[p]``, proxy p's counters (``IndependentCaches.counters``:
    requests, hits, misses, false_misses, refused, evictions, requested_bytes, hit_bytes, documents, used_bytes);
    ``latency``, ``origin_cost`` summed once per miss in request order; ``skipped``, the records that were not
    GET requests."""

    counters: list
    latency: float
    skipped: int


def replay_independent(requests: Iterable, *, num_proxies: int, cache_size: int, eviction: str, origin_cost: float,
                       progress: Optional[Callable[[int], None]] = None) -> IndependentTotals:
    """Replay ``requests`` (Request records) over ``num_proxies`` caches that never ask each other, compiled.
    ``progress(n)`` is called after every :data:`BLOCK_REQUESTS` records read."""
    reason = compiled_limitation("none", num_proxies=num_proxies, cache_size=cache_size, eviction=eviction)
    if reason is not None:
        raise ValueError(f"the compiled engine cannot run this replay: {reason}")
    caches = IndependentCaches(num_proxies, cache_size, eviction == "lru", float(origin_cost))
    own_blocks = getattr(requests, "request_blocks", None)
    blocks = own_blocks(num_proxies) if own_blocks is not None else request_blocks(requests, num_proxies)
    seen = skipped = 0
    for block in blocks:
        caches.replay(block.keys, block.sizes, block.proxies)
        before, seen = seen, seen + block.records
        skipped += block.skipped
        if progress is not None:  # at every multiple of BLOCK_REQUESTS records, as the Python engine calls it
            for mark in range((before // BLOCK_REQUESTS + 1) * BLOCK_REQUESTS, seen + 1, BLOCK_REQUESTS):
                progress(mark)
    return IndependentTotals([caches.counters(p) for p in range(num_proxies)], caches.miss_cost_total, skipped)


@dataclasses.dataclass
class CooperativeTotals:
    """The outcome of :func:`replay_cooperative`: ``counters[p]``, proxy p's counters
    (``CooperativeCaches.counters``); ``totals``, the sums over all proxies in request order
    (``CooperativeCaches.totals``: latency, query_bytes, remote_hit_bytes, peer_checks_lacking,
    peer_check_false_positives); ``skipped``, the records that were not GET requests."""

    counters: list
    totals: dict
    skipped: int


def cooperative_caches(policy: str, *, num_proxies: int, cache_size: int, eviction: str, origin_cost: float,
                       peer_cost: float, summary_kind: str = "bits", bits_per_entry: int = 8, expected_entries: int = 1,
                       seed: int = 0, update_threshold: float = 0.01, resize_tolerance: Optional[float] = 0.1,
                       prior_window: float = 1000.0, prior_estimator: str = "mixture") -> CooperativeCaches:
    """Empty ``CooperativeCaches`` for ``policy`` (``icp``, ``summary``, ``paradox`` or ``carp``) with the parameters of
    :func:`replay_cooperative`; its ``replay(keys, sizes, proxies, names, name_offsets, url_lengths)`` runs the
    requests of :class:`RequestBlock` arrays made with ``names=True`` (a benchmark times that loop alone)."""
    if policy not in COOPERATIVE_POLICIES:
        raise ValueError(f"policy must be one of {', '.join(COOPERATIVE_POLICIES)}, got {policy!r}")
    reason = compiled_limitation(policy, num_proxies=num_proxies, cache_size=cache_size, eviction=eviction)
    if reason is not None:
        raise ValueError(f"the compiled engine cannot run this replay: {reason}")
    num_cells, num_hashes = filter_geometry(bits_per_entry, expected_entries)
    return CooperativeCaches(num_proxies, cache_size, eviction == "lru", policy, summary_kind, float(origin_cost),
                             float(peer_cost), num_cells, num_hashes, expected_entries, seed,
                             float(update_threshold), -1.0 if resize_tolerance is None else float(resize_tolerance),
                             lambda documents: filter_geometry(bits_per_entry, documents),
                             prior_window=float(prior_window), prior_estimator=prior_estimator,
                             member_hashes=[carp_member_hash(str(p)) for p in range(num_proxies)])


def replay_cooperative(requests: Iterable, policy: str, *, num_proxies: int, cache_size: int, eviction: str,
                       origin_cost: float, peer_cost: float, summary_kind: str = "bits", bits_per_entry: int = 8,
                       expected_entries: int = 1, seed: int = 0, update_threshold: float = 0.01,
                       resize_tolerance: Optional[float] = 0.1, prior_window: float = 1000.0,
                       prior_estimator: str = "mixture",
                       progress: Optional[Callable[[int], None]] = None) -> CooperativeTotals:
    """Replay ``requests`` (Request records) under ``icp``, ``summary``, ``paradox`` or ``carp``, compiled: the caches,
    filters, summaries and (paradox) priors of ``bloomwise.cache.simulation.replay`` with these parameters (its
    ``SimulationConfig``'s).
    ``progress(n)`` is called after every :data:`BLOCK_REQUESTS` records read."""
    caches = cooperative_caches(policy, num_proxies=num_proxies, cache_size=cache_size, eviction=eviction,
                                origin_cost=origin_cost, peer_cost=peer_cost, summary_kind=summary_kind,
                                bits_per_entry=bits_per_entry, expected_entries=expected_entries, seed=seed,
                                update_threshold=update_threshold, resize_tolerance=resize_tolerance,
                                prior_window=prior_window, prior_estimator=prior_estimator)
    numbered = getattr(requests, "numbered_keys", False)
    if numbered:  # the source's arrays: ids are the object numbers, URLs their decimal text
        blocks = requests.request_blocks(num_proxies)
    elif getattr(requests, "gives_key_names", False):  # the source's arrays with their keys' bytes (CsvTrace)
        blocks = requests.request_blocks(num_proxies, names=True)
    else:  # the records, with their keys' bytes
        blocks = request_blocks(requests, num_proxies, names=True)
    seen = skipped = 0
    for block in blocks:
        if numbered:
            caches.replay_numbered(block.keys, block.sizes, block.proxies)
        else:
            caches.replay(block.keys, block.sizes, block.proxies, block.names, block.name_offsets,
                          block.url_lengths)
        before, seen = seen, seen + block.records
        skipped += block.skipped
        if progress is not None:
            for mark in range((before // BLOCK_REQUESTS + 1) * BLOCK_REQUESTS, seen + 1, BLOCK_REQUESTS):
                progress(mark)
    return CooperativeTotals([caches.counters(p) for p in range(num_proxies)], caches.totals(), skipped)


class OracleGeneralTrace:
    """A libCacheSim oracleGeneral file (:class:`~bloomwise.cache.traces.OracleGeneralReader`) with its proxy
    assignment, for both engines: iterating gives the Request records of ``assigned_requests(reader, rule,
    num_proxies, seed=seed, limit=limit)`` (the Python engine); :meth:`request_blocks` gives the same requests as
    arrays read straight from the records, the object number as the id (the compiled engine; several times faster
    than making Request records). Each use opens the file anew; ``reader`` is the last reader opened (its counts:
    ``requests``, ``malformed``, ...).

    :param rule: ``"random"`` or ``"round-robin"`` (the file has no clients).
    """

    #: the blocks' ids are the object numbers and each request's URL is ``str(object)``: a compiled replay that
    #: hashes the cache keys writes ``"GET <object>"`` itself (``CooperativeCaches.replay_numbered``)
    numbered_keys = True

    def __init__(self, path, rule: str, num_proxies: int, *, seed: int = 0, limit: Optional[int] = None,
                 strict: bool = False):
        if rule not in ("random", "round-robin"):
            raise ValueError(f"{path} has no client field: choose how its requests go to proxies, 'random' or "
                             f"'round-robin', not {rule!r}")
        check_assignment([], rule, num_proxies, seed=seed, limit=limit)
        self.path, self.rule, self.num_proxies, self.seed, self.limit = path, rule, num_proxies, seed, limit
        self.strict = strict
        self.reader: Optional[OracleGeneralReader] = None

    def _open(self) -> OracleGeneralReader:
        self.reader = OracleGeneralReader(self.path, strict=self.strict)
        return self.reader

    def __iter__(self) -> Iterator:
        return assigned_requests(self._open(), self.rule, self.num_proxies, seed=self.seed, limit=self.limit)

    def request_blocks(self, num_proxies: int) -> Iterator[RequestBlock]:
        """The requests as :class:`RequestBlock` arrays (``num_proxies`` must be the trace's)."""
        if num_proxies != self.num_proxies:
            raise ValueError(f"this trace is assigned to {self.num_proxies} proxies, not {num_proxies}")
        reader = self._open()
        try:
            assign = _position_assignment(self.rule, num_proxies, self.seed)
            remaining = self.limit
            for objects, sizes, _ in reader.record_arrays():
                if remaining is not None:
                    if remaining <= 0:
                        break
                    objects, sizes = objects[:remaining], sizes[:remaining]
                    remaining -= len(objects)
                yield RequestBlock(objects, sizes, assign(len(objects)), len(objects), 0)
        finally:
            reader.close()


def _position_assignment(rule: str, num_proxies: int, seed: int) -> Callable[[int], np.ndarray]:
    """``proxies(count)``: the int32 proxies of the next ``count`` requests by rule ``random`` or ``round-robin``
    (:mod:`bloomwise.cache.traces.assignment`: request i's draw, or i mod P), called block after block."""
    draws = random_proxy_draws(num_proxies, seed) if rule == "random" else None
    state = {"position": 0, "pending": np.zeros(0, dtype=np.int64)}  # requests assigned; draws not used yet

    def proxies(count: int) -> np.ndarray:
        position = state["position"]
        state["position"] = position + count
        if draws is None:
            return (np.arange(position, position + count, dtype=np.int64) % num_proxies).astype(np.int32)
        pending = state["pending"]
        while len(pending) < count:
            pending = np.concatenate([pending, next(draws)])
        state["pending"] = pending[count:]
        return pending[:count].astype(np.int32)

    return proxies


class CsvTrace:
    """A libCacheSim csv file (:class:`~bloomwise.cache.traces.CsvTraceReader`) with its proxy assignment, for
    both engines: iterating gives the Request records of ``assigned_requests(reader, rule, num_proxies,
    seed=seed, limit=limit)`` (the Python engine, the reference); :meth:`request_blocks` gives the same requests
    as arrays parsed by the compiled reader (``CsvTraceReader.record_arrays``: the ids ``XXH3-64`` of the object
    field, the proxy of rule ``hash-client`` ``XXH3-64(client) mod P``, as :func:`request_blocks` computes them
    from the records). Each use opens the file anew; ``reader`` is the last reader opened (its counts).

    :param columns: the csv columns (``{"time": 1, "object": 2, "size": 3}``), None to read them from the header.
    """

    def __init__(self, path, rule: str, num_proxies: int, *, seed: int = 0, limit: Optional[int] = None,
                 strict: bool = False, columns: Optional[dict] = None):
        check_assignment([], rule, num_proxies, seed=seed, limit=limit)
        self.path, self.rule, self.num_proxies, self.seed, self.limit = path, rule, num_proxies, seed, limit
        self.strict, self.columns = strict, columns
        self.reader: Optional[CsvTraceReader] = None

    def _open(self) -> CsvTraceReader:
        self.reader = CsvTraceReader(self.path, columns=self.columns, strict=self.strict)
        return self.reader

    def __iter__(self) -> Iterator:
        return assigned_requests(self._open(), self.rule, self.num_proxies, seed=self.seed, limit=self.limit)

    #: :meth:`request_blocks` can add the cache keys' bytes (``names=True``) for the cooperative policies
    gives_key_names = True

    def request_blocks(self, num_proxies: int, *, names: bool = False) -> Iterator[RequestBlock]:
        """The requests as :class:`RequestBlock` arrays (``num_proxies`` must be the trace's); ``names=True`` adds
        the cache keys' bytes and the URLs' lengths, as :func:`request_blocks` does."""
        if num_proxies != self.num_proxies:
            raise ValueError(f"this trace is assigned to {self.num_proxies} proxies, not {num_proxies}")
        reader = self._open()
        try:
            check_assignment(reader, self.rule, num_proxies, seed=self.seed, limit=self.limit)
            assign = None if self.rule == "hash-client" else _position_assignment(self.rule, num_proxies, self.seed)
            for arrays in reader.record_arrays(self.limit, names=names):
                count = len(arrays.keys)
                if assign is not None:
                    proxies = assign(count)
                else:
                    proxies = (arrays.client_hashes % np.uint64(num_proxies)).astype(np.int32)
                yield RequestBlock(arrays.keys, arrays.sizes, proxies, count, 0, arrays.names, arrays.name_offsets,
                                   arrays.url_lengths)
        finally:
            reader.close()
