"""The bloomwise caching proxy: an HTTP/1.1 forward proxy whose caching, summaries and routing are a CacheNode's.

Clients use it as their HTTP proxy (absolute-form request targets, ``GET http://host/path HTTP/1.1``). Every
decision is the engine's (:class:`bloomwise.cache.CacheNode`); this module only does the I/O around it::

    client GET --> fresh in the cache? (node.lookup)               -> 200, X-Cache: HIT
               --> node.route(key): peers to ask, in order
                   each: GET url via the peer, Cache-Control: only-if-cached
                         200 -> remote hit  (node.record_peer_answer(peer, key, True))
                         504 -> false hit   (node.record_peer_answer(peer, key, False))
                         failure -> the peer is marked unhealthy; the next peer, or the origin
               --> the origin (or --parent): node.record_origin_fetch(key)
               --> storable (bloomwise.proxy.http_cache)? node.admit(key, size, body, headers)
               --> node.summary_due()? publish, and notify every peer (POST /bloomwise/notify)

Requests with ``Cache-Control: only-if-cached`` are peer queries: answered from the cache or with 504, never
forwarded (no loops; a ``Via`` header naming this proxy is refused with 508 as a second guard). Other methods than
GET pass through to the origin uncached; ``PURGE`` removes a document; ``CONNECT`` is refused (405).

Closed by default (:mod:`bloomwise.proxy.access`): loopback clients only, no fetch from loopback, link-local or
metadata addresses, the peers limited to peer queries and the endpoints. Each miss carries its own
:class:`~bloomwise.cache.node.RequestState` (requests interleave on the event loop), and concurrent misses for one
URL wait for the first one's fetch (collapsed forwarding). The summary advertises only the documents that stay fresh
while a peer may act on it (:mod:`bloomwise.proxy.advertised`). Every response carries ``Cache-Status`` (RFC 9211)
beside ``X-Cache``; client requests go to ``--access-log`` in Squid's format; a connection's request headers have a
deadline (:class:`HeaderDeadline`).

Endpoints of the proxy itself (origin-form targets, or absolute ones naming the proxy's own address)::

    GET  /bloomwise/summary[?since=V&origin=O]   the summary (bloomwise's file format); the delta since version V
                                                 when O is this proxy's instance id and V still kept; 304 if current
    POST /bloomwise/notify                       {"url": PEER_URL, "version": V}: a peer has a new version
    GET  /bloomwise/stats                        JSON counters (CacheNode.stats() and the network's)
    GET  /metrics                                the counters and latency histograms, Prometheus text
    GET  /squid-internal-periodic/store_digest   the cache's keys as a Squid Cache Digest (for Squid siblings)

Why aiohttp: one well-kept library gives both an asyncio HTTP/1.1 server that accepts absolute-form targets (the
low-level ``aiohttp.web.Server``: one handler for every request, no routing table in the way) and a client with
connection pooling, per-request timeouts and proxy support (a peer query is a request sent through the peer as
a proxy). The engine is synchronous and the proxy runs on one event loop, so the engine needs no locks.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import parse_qs, urlsplit

from bloomwise._checks import check_fraction
from bloomwise.cache.node import CacheNode, RequestState
from bloomwise.cache.squid_digest import DIGEST_CONTENT_TYPE, DIGEST_PATH, CacheDigest
from bloomwise.cache.store import DocumentCache
from bloomwise.cache.traces import request_key
from bloomwise.proxy import fast_hits, http_cache, peer_client
from bloomwise.proxy.fast_hits import LeanAnswer, LeanMissOutcome, PeersAsked
from bloomwise.cache.summary import SummaryPublisher
from bloomwise.proxy.access import ClientPolicy, DestinationPolicy, GuardedResolver
from bloomwise.proxy.advertised import AdvertisedSet
from bloomwise.proxy.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE, ProxyMetrics, exposition
from bloomwise.proxy.peers import SUMMARY_CONTENT_TYPE, PeerFailure, PeerLink

__all__ = ["ProxyConfig", "BloomwiseProxy", "request_key"]

log = logging.getLogger("bloomwise.proxy")


@dataclass
class ProxyConfig:
    """Everything ``bloomwise proxy`` is told (sizes in bytes, times in seconds, costs in milliseconds)."""

    host: str = "127.0.0.1"
    port: int = 0
    peers: list = field(default_factory=list)
    parent: Optional[str] = None
    cache_size: int = 64 * 2**20
    policy: str = "summary"
    bits_per_entry: int = 8
    update_threshold: float = 0.01
    summary_kind: str = "bits"
    name: Optional[str] = None
    origin_cost_ms: float = 100.0        # omega: the cost of an origin (or parent) fetch, a WAN round trip
    summary_interval: float = 5.0        # seconds between periodic summary pulls from each peer
    summary_timeout: float = 5.0
    peer_timeout: float = 2.0            # a peer query slower than this fails (and the peer is marked unhealthy)
    origin_timeout: float = 30.0
    retry_after: float = 1.0             # first retry of an unhealthy peer; doubles up to max_retry_after
    max_retry_after: float = 30.0
    max_summary_bytes: int = 64 * 2**20
    max_object_size: Optional[int] = None  # largest body stored (default: cache_size / 8, at most 64 MiB)
    digest_period: float = 2.0           # seconds a served Squid digest is reused before it is rebuilt
    #: a Squid digest lists only documents fresh this much longer (Squid refetches a peer's digest every 5 minutes)
    digest_horizon: float = 300.0
    min_publish_interval: float = 0.1    # seconds between two summary publications, at least
    expected_entries: Optional[int] = None
    mean_document_size: int = 8192       # sizes the summary: expected documents = cache_size / this
    #: re-size the summary to bits_per_entry positions per advertised document when their number drifts more than
    #: this fraction from the count it was sized for (SummaryPublisher's rule, Squid's 10%); None: never
    resize_tolerance: Optional[float] = 0.1
    header_timeout: float = 10.0         # seconds for a request's headers, from its first byte (or the connection)
    access_log: Optional[str] = None     # a file: one line per client request, in Squid's native format
    #: who may use the proxy (None: loopback only) and where it may fetch (None: anything but loopback,
    #: link-local and metadata addresses): bloomwise.proxy.access
    clients: Optional[ClientPolicy] = None
    destinations: Optional[DestinationPolicy] = None
    #: fresh hits answered by the lean hit path (bloomwise.proxy.fast_hits), not by aiohttp
    fast_hits: bool = True
    #: with fast_hits, plain misses routed to a peer are asked by the lean path too, which answers remote hits
    #: itself (BloomwiseProxy.lean_miss); False: the lean path hands every miss to aiohttp
    lean_misses: bool = True

    @property
    def expiry_sweep(self) -> float:
        """Seconds between two withdrawals of the documents about to expire from the summary."""
        return max(0.05, self.summary_interval / 2)

    @property
    def advertise_horizon(self) -> float:
        """A document is in the summary only while it stays fresh this much longer: the sweep period, the delay
        of a publication and a peer's pull interval (bloomwise.proxy.advertised)."""
        return self.expiry_sweep + self.min_publish_interval + self.summary_interval

    def __post_init__(self):
        if self.max_object_size is None:
            self.max_object_size = max(1, min(self.cache_size // 8, 64 * 2**20))
        if self.clients is None:
            self.clients = ClientPolicy()
        if self.destinations is None:
            self.destinations = DestinationPolicy()
        check_fraction("update_threshold", self.update_threshold)
        if self.mean_document_size < 1:
            raise ValueError(f"mean_document_size must be at least 1 byte, got {self.mean_document_size}")


class BloomwiseProxy:
    """One running proxy: ``await proxy.start()``, ``proxy.url``, ``await proxy.stop()``."""

    def __init__(self, config: ProxyConfig):
        self.config = config
        expected = config.expected_entries or max(1, config.cache_size // config.mean_document_size)
        cache = DocumentCache(config.cache_size, bits_per_entry=config.bits_per_entry, expected_entries=expected)
        self.node = CacheNode(config.name or "bloomwise", cache, policy=config.policy,
                              summary_kind=config.summary_kind, update_threshold=config.update_threshold,
                              origin_cost=config.origin_cost_ms, peer_cost=1.0)
        # The summary advertises the documents that stay fresh while a peer may act on it, not the whole cache
        # (bloomwise.proxy.advertised): the node's publisher summarises that set instead of the cache.
        self.advertised = AdvertisedSet(cache)
        self.node.publisher = SummaryPublisher(self.advertised, kind=config.summary_kind,
                                               update_threshold=config.update_threshold,
                                               resize_tolerance=config.resize_tolerance)
        self.links: dict[str, PeerLink] = {}
        self.counters = {key: 0 for key in (
            "requests_total", "pass_through", "cache_bypassed", "peer_failures", "summaries_rejected",
            "notifies_sent", "notifies_received", "digests_served", "loops_refused", "summaries_served",
            "clients_refused", "destinations_refused", "connect_refused", "collapsed_requests", "purges",
            "peer_queries_sent", "header_timeouts", "bad_requests", "withdrawn_expiring",
            "access_log_errors", "fast_hits", "fast_remote_hits", "fast_peer_misses")}
        #: where a miss's time goes: the summary decision (node.route) against the whole miss (peers + origin)
        self.timing = {"misses": 0, "miss_seconds": 0.0, "route_seconds": 0.0}
        self.session = None          # to peers and the parent (configured by the operator)
        self.origin_session = None   # to origins: connects only where the destination policy allows
        self.started_monotonic = time.monotonic()
        self._web_server = None
        self._listener = None
        self.hit_path: Optional[fast_hits.HitPathConfig] = None   # the lean hit path, when it runs
        #: kept-alive connections for peer queries, per peer URL (bloomwise.proxy.peer_client; else aiohttp's)
        self.peer_connections: dict[str, peer_client.PeerConnections] = {}
        self._peer_query_fields = None   # the header lines of every peer query (made at the first)
        self._access_log = None      # the --access-log file, in Squid's native format
        self._flush_task = None
        self.metrics = ProxyMetrics()
        self._status_name_of = self._status_name_text = None
        self._url_of = self._url_text = None
        self._digest_cache: Optional[tuple] = None
        self._publish_timer = None
        self._last_publish = 0.0
        self._tasks: set = set()
        #: the URLs being fetched now (collapsed forwarding): key -> an Event set when the fetch ended
        self._in_flight: dict = {}
        self._peer_details: dict = {}   # peer URL -> its Cache-Status detail
        #: the lean path's remote-hit heads, per (peer, status, reply headers, body length, storing allowed)
        self._remote_hit_heads: dict = {}

    # -- lifecycle --------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        where = (self.config.host, self.config.port)
        if self._url_of != where:   # made once the port is known (read on every response)
            host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
            self._url_of, self._url_text = where, f"http://{host}:{self.config.port}"
        return self._url_text

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def fetches_in_flight(self) -> int:
        """The misses being fetched now (peers, then the origin) that concurrent requests for their URL wait for."""
        return len(self._in_flight)

    @property
    def _status_name(self) -> str:
        """This proxy in Cache-Status entries (RFC 9211: a token or a string naming the cache)."""
        name = str(self.node.name)
        if self._status_name_of != name:
            self._status_name_of, self._status_name_text = name, _sf_token_or_string(name)
        return self._status_name_text

    async def start(self) -> "BloomwiseProxy":
        import aiohttp
        from aiohttp import web

        self._web_server = web.Server(self._handle, access_log=None, logger=_OneLineServerLog(log, self.counters),
                                      keepalive_timeout=IDLE_CONNECTION_TIMEOUT)

        def aiohttp_connection():
            return HeaderDeadline(self._web_server(), self.config.header_timeout, self._header_timed_out)

        def hit_path_connection():  # fresh hits answered there, every other request handed to aiohttp
            return fast_hits.HitConnection(self.hit_path)

        lean = self.config.fast_hits
        self._listener = await asyncio.get_running_loop().create_server(
            hit_path_connection if lean else aiohttp_connection, self.config.host, self.config.port,
            reuse_address=True, backlog=1024)
        sockets = self._listener.sockets
        self.config.port = sockets[0].getsockname()[1]
        if lean:  # before the first await: no connection is accepted before it exists
            self.hit_path = fast_hits.HitPathConfig(
                node=self.node, counters=self.counters, metrics=self.metrics, client_allowed=self.config.clients.allows,
                own_url=self.url, own_port=self.config.port, client_headers=self._client_headers,
                handed_over=aiohttp_connection, header_timeout=self.config.header_timeout,
                on_header_timeout=self._header_timed_out, idle_timeout=IDLE_CONNECTION_TIMEOUT,
                log_access=self.log_access if self.config.access_log else None,
                lean_miss=self.lean_miss if self.config.lean_misses else None,
                lean_miss_now=self.lean_miss_now if self.config.lean_misses else None,
                peer_address=self.is_peer_address,
                not_cached=(self.not_cached_headers, NOT_CACHED_BODY), drop=self._drop)
        self.config.destinations.add_own_endpoints(s.getsockname()[:2] for s in sockets)
        if not self.config.name:
            self.node.name = self.url
        timeout = aiohttp.ClientTimeout(total=self.config.origin_timeout)
        connector = aiohttp.TCPConnector(limit=256, limit_per_host=64, ttl_dns_cache=300)
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False, timeout=timeout)
        guarded = aiohttp.TCPConnector(limit=256, limit_per_host=64, use_dns_cache=False,
                                       resolver=GuardedResolver(self.config.destinations))
        self.origin_session = aiohttp.ClientSession(connector=guarded, auto_decompress=False, timeout=timeout)
        self.started_monotonic = time.monotonic()
        if self.config.access_log:
            self._access_log = open(self.config.access_log, "a", encoding="utf-8", buffering=65536)
            self._flush_task = asyncio.create_task(self._flush_access_log_every_second())
        self._spawn(self._withdraw_expiring_documents())
        for peer in self.config.peers:
            self.add_peer(peer)
        log.info("%s listening on %s (policy %s, %d peers)", self.name, self.url, self.config.policy,
                 len(self.links))
        return self

    def add_peer(self, url: str) -> PeerLink:
        url = url.rstrip("/")
        if url in self.links or url == self.url:
            raise ValueError(f"peer {url} is this proxy or already a peer")
        self.node.add_peer(url)
        link = self.links[url] = PeerLink(self, url)
        link.start()
        self._spawn(self._notify_one(link, self.node.publisher.current_version))  # "I am (re)started"
        return link

    async def stop(self) -> None:
        if self._publish_timer is not None:
            self._publish_timer.cancel()
            self._publish_timer = None
        for link in self.links.values():
            await link.stop()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
            if self.hit_path is not None:
                self.hit_path.close_all()
            await self._web_server.shutdown(1.0)
            await self._listener.wait_closed()
            self._listener = None
        flushing = self._flush_task
        self._close_access_log()
        if flushing is not None:
            await asyncio.gather(flushing, return_exceptions=True)
        for connections in self.peer_connections.values():
            connections.close()
        self.peer_connections.clear()
        for session in (self.session, self.origin_session):
            if session is not None:
                await session.close()
        self.session = self.origin_session = None

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _withdraw_expiring_documents(self) -> None:
        """Every ``expiry_sweep`` seconds: documents about to expire leave the summary, published at once."""
        while True:
            await asyncio.sleep(self.config.expiry_sweep)
            withdrawn = self.advertised.withdraw_expiring(time.time())
            if withdrawn:
                self.counters["withdrawn_expiring"] += len(withdrawn)
                self._after_change(now=True)

    def _drop(self, key: str) -> None:
        """Remove a document found stale: from the cache and from the summary."""
        self.node.cache.remove(key)
        self.advertised.withdraw(key)
        self._after_change()

    # -- connections and the access log ------------------------------------------------------------------------
    def _header_timed_out(self, transport) -> None:
        self.counters["header_timeouts"] += 1
        peer = transport.get_extra_info("peername")
        log.info("%s: dropped %s: no complete request headers within %.1f s", self.name,
                 peer[0] if peer else "a client", self.config.header_timeout)

    async def _flush_access_log_every_second(self) -> None:
        while self._access_log is not None:
            await asyncio.sleep(1.0)
            try:
                self._access_log.flush()
            except OSError as exc:
                log.error("%s: cannot write the access log %s (%s); it is closed", self.name,
                          self.config.access_log, exc.strerror or exc)
                self.counters["access_log_errors"] += 1
                self._close_access_log()

    def _close_access_log(self) -> None:
        if self._flush_task is not None and self._flush_task is not asyncio.current_task():
            self._flush_task.cancel()
        self._flush_task = None
        if self._access_log is not None:
            try:
                self._access_log.close()
            except OSError:
                pass  # its last lines are lost: said when the write failed
            self._access_log = None

    def _write_access_log(self, request, response, started_wall: float, elapsed: float) -> None:
        code, hierarchy = request.get(_LOG_KEY) or ("TCP_MISS", "HIER_NONE/-")
        size = response.content_length if response.content_length is not None else response.body_length
        content_type = response.headers.get("Content-Type", "-").split(";", 1)[0].strip() or "-"
        self.log_access(started_wall, elapsed, request.remote, code, response.status, size, request.method,
                        request.raw_path, hierarchy, content_type)

    def log_access(self, started_wall: float, elapsed: float, client: Optional[str], code: str, status: int,
                   size: Optional[int], method: str, target: str, hierarchy: str, content_type: str) -> None:
        """One line in Squid's native format: time elapsed client code/status bytes method URL user hierarchy
        type (what ``bloomwise simulate --format squid`` and Squid's tools read); nothing without --access-log."""
        if self._access_log is None:
            return
        try:
            self._access_log.write(f"{started_wall:.3f} {int(elapsed * 1000):6d} {client or '-'} {code}/{status:03d} "
                                   f"{size or 0} {method} {target} - {hierarchy} {content_type}\n")
        except OSError as exc:  # a full disk must not fail the request: logged, counted, and off
            log.error("%s: cannot write the access log %s (%s); it is closed", self.name, self.config.access_log,
                      exc.strerror or exc)
            self.counters["access_log_errors"] += 1
            self._close_access_log()

    # -- dispatch ---------------------------------------------------------------------------------------------
    async def _handle(self, request):
        """Every request: the deadline guard is told the headers arrived, then _dispatch answers; the answer is
        timed, logged (client requests only) and given a Cache-Status when it has none."""
        guard = request.transport.get_protocol() if request.transport is not None else None
        started = time.perf_counter()
        peers_asked = None
        if isinstance(guard, HeaderDeadline):
            guard.request_started()
            peers_asked = guard.take_peers_asked()
            if peers_asked is not None:  # the lean path asked the peers of this request (its first on the connection)
                request[_PEERS_ASKED_KEY] = peers_asked
                started = peers_asked.received
        try:
            response = await self._dispatch(request)
        finally:
            if isinstance(guard, HeaderDeadline):
                guard.request_finished()
            if peers_asked is not None:  # ended by the miss it resumed; else here (idempotent)
                peers_asked.end()
        elapsed = time.perf_counter() - started
        if "Cache-Status" not in response.headers and not response.prepared:
            response.headers["Cache-Status"] = f"{self._status_name}; fwd=bypass"
        fields = request.get(_LOG_KEY)
        if fields is not None:  # a client's request for a document (not an endpoint, not a peer query)
            self.metrics.observe_request(_OUTCOMES.get(fields[0], "other") if not fields[1].startswith("SIBLING")
                                         else "remote_hit", elapsed)
            if self._access_log is not None:
                try:
                    self._write_access_log(request, response, time.time() - elapsed, elapsed)
                except OSError as exc:  # a full disk must not fail the request: logged, counted, and off
                    log.error("%s: cannot write the access log %s (%s); it is closed", self.name,
                              self.config.access_log, exc.strerror or exc)
                    self.counters["access_log_errors"] += 1
                    self._close_access_log()
        return response

    async def _dispatch(self, request):
        from aiohttp import web

        self.counters["requests_total"] += 1
        target = request.raw_path
        try:
            client = request.remote
            is_client = self.config.clients.allows(client)
            if not is_client and not self.is_peer_address(client):
                self.counters["clients_refused"] += 1
                return _error(403, f"client {client} is not allowed to use this proxy (--allow-clients "
                                   f"{self.config.clients.describe()})")
            if request.method == "CONNECT":
                self.counters["connect_refused"] += 1
                return _error(405, "CONNECT is not supported: this proxy forwards http:// requests only",
                              Allow="GET, HEAD, POST, PUT, DELETE, OPTIONS, PURGE")
            if target.startswith("/"):
                return await self._internal(request, target)
            try:
                parts = urlsplit(target)
            except ValueError as exc:  # e.g. an unclosed [IPv6 address
                return _error(400, f"the request target {target[:200]!r} is not a URL: {exc}")
            if parts.scheme != "http" or not parts.hostname:
                return _error(400, f"this proxy forwards http:// absolute-form targets only, got {target[:200]!r}")
            if self._is_self(parts):
                return await self._internal(request, parts.path + (f"?{parts.query}" if parts.query else ""))
            if not is_client and not (request.method == "GET" and http_cache.only_if_cached(request.headers)):
                self.counters["clients_refused"] += 1
                return _error(403, f"{client} is a peer: it may ask peer queries (GET with Cache-Control: "
                                   f"only-if-cached), not fetch through this proxy")
            return await self._proxy(request, target)
        except web.HTTPException:
            raise
        except Exception:
            log.exception("%s: error handling %s %s", self.name, request.method, target[:200])
            return _error(500, "internal error in the bloomwise proxy (logged)")

    def is_peer_address(self, address: Optional[str]) -> bool:
        """Whether ``address`` is one of the configured peers' addresses (as last resolved)."""
        return any(link.has_address(address) for link in self.links.values())

    async def _refused_destination(self, url: str):
        """A 403 response if the destination policy refuses ``url``'s host and port, else None."""
        parts = urlsplit(url)
        try:
            port = parts.port or 80
        except ValueError:
            return _error(400, f"the port of {url[:200]!r} is not a number in 0..65535")
        refusal, _ = await self.config.destinations.check(parts.hostname, port)
        if refusal is None:
            return None
        self.counters["destinations_refused"] += 1
        return _error(403, f"destination refused: {refusal}")

    def _is_self(self, parts) -> bool:
        try:
            port = parts.port or 80
        except ValueError:
            return False
        # Any host name on this port: a Squid sibling names this proxy as its cache_peer line does (a host name,
        # not necessarily the address listened on), and no origin is expected to serve these paths.
        return port == self.config.port and (parts.path.startswith("/bloomwise/") or parts.path == "/metrics"
                                             or parts.path.startswith("/squid-internal-periodic/"))

    async def _internal(self, request, target: str):
        """The proxy's own endpoints: open to allowed clients and to the configured peers."""
        from aiohttp import web

        path, _, query = target.partition("?")
        if path == "/bloomwise/summary" and request.method in ("GET", "HEAD"):
            return self._serve_summary(parse_qs(query))
        if path == "/bloomwise/stats" and request.method in ("GET", "HEAD"):
            return web.json_response(self.stats())
        if path == "/metrics" and request.method in ("GET", "HEAD"):
            return web.Response(body=exposition(self.stats(), self.metrics).encode(),
                                headers={"Content-Type": METRICS_CONTENT_TYPE})
        if path == "/bloomwise/notify" and request.method == "POST":
            return await self._receive_notify(request)
        if path == DIGEST_PATH and request.method in ("GET", "HEAD"):
            self.counters["digests_served"] += 1
            body = self.squid_digest_bytes()
            return web.Response(body=body, headers={"Content-Type": DIGEST_CONTENT_TYPE,
                                                    "Cache-Control": "max-age=0"})
        return _error(404, f"no such endpoint {path!r}; this is a proxy (send absolute-form requests), with "
                           f"/bloomwise/summary, /bloomwise/stats, /bloomwise/notify, /metrics and {DIGEST_PATH}")

    # -- summaries --------------------------------------------------------------------------------------------
    def _serve_summary(self, query: dict):
        from aiohttp import web

        node = self.node
        update = None
        since, origin = query.get("since", [None])[0], query.get("origin", [None])[0]
        if since is not None and origin is not None:
            try:
                since_v, origin_v = int(since), int(origin, 16)
            except ValueError:
                return _error(400, f"since must be an integer and origin 16 hex digits, got {since!r}, {origin!r}")
            if origin_v == node.publisher.origin and node.publisher.current_version > 0:
                if since_v == node.publisher.current_version:
                    return web.Response(status=304)
                update = node.summary_since(since_v)
        if update is None:
            update = node.whole_summary()
        data = update.to_bytes()
        node.note_summary_sent("pull", len(data))
        self.counters["summaries_served"] += 1
        return web.Response(body=data, headers={
            "Content-Type": SUMMARY_CONTENT_TYPE, "X-Bloomwise-Version": str(update.version),
            "X-Bloomwise-Origin": f"{update.origin:016x}", "Cache-Control": "no-store"})

    async def _receive_notify(self, request):
        from aiohttp import web

        try:
            raw = await request.content.read(4097)
            if len(raw) > 4096:
                raise ValueError("more than 4096 bytes")
            message = json.loads(raw)
            url = str(message["url"]).rstrip("/")
            version = message["version"]
            if isinstance(version, bool) or not isinstance(version, int) or version < 0:
                raise ValueError(f"version must be an integer >= 0, got {version!r}")
        except (ValueError, KeyError, TypeError) as exc:
            return _error(400, f'a notify body is JSON {{"url": "http://host:port", "version": N}}: {exc}')
        self.counters["notifies_received"] += 1
        link = self.links.get(url)
        if link is None:
            return _error(404, f"{url} is not a peer of this proxy")
        link.notify()
        return web.Response(status=204)

    def _after_change(self, *, now: bool = False) -> None:
        """The cache changed: publish a summary version when the update threshold says so, and notify the peers.

        Publications are at least ``min_publish_interval`` apart: while a cache is nearly empty, the threshold
        (a fraction of the documents cached) is reached by almost every new document, and one version per
        request would cost more than the requests. A publication due sooner waits (and covers every change until
        then)."""
        if self._publish_timer is not None or not (now or self.node.summary_due()):
            return
        wait = self._last_publish + self.config.min_publish_interval - time.monotonic()
        if wait <= 0:
            self._publish()
        else:
            self._publish_timer = asyncio.get_running_loop().call_later(wait, self._deferred_publish)

    @property
    def publication_scheduled(self) -> bool:
        """Whether changes wait for a publication that ``min_publish_interval`` deferred (False: every change that
        made a summary due is published)."""
        return self._publish_timer is not None

    def _deferred_publish(self) -> None:
        self._publish_timer = None
        if self.node.publisher.pending_changes:
            self._publish()

    def _publish(self) -> None:
        self._last_publish = time.monotonic()
        update = self.node.publish_summary()
        for link in self.links.values():
            if link.kind != "squid" and link.healthy:
                self._spawn(self._notify_one(link, update.version))

    async def _notify_one(self, link: PeerLink, version: int) -> None:
        import aiohttp

        try:
            async with self.session.post(link.url + "/bloomwise/notify", json={"url": self.url, "version": version},
                                         timeout=aiohttp.ClientTimeout(total=self.config.peer_timeout)) as reply:
                await reply.read()
            self.counters["notifies_sent"] += 1
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            pass  # the peer pulls periodically anyway; its health is judged by pulls and queries

    def squid_digest_bytes(self) -> bytes:
        """The advertised documents that stay fresh ``digest_horizon`` seconds longer, as a Squid Cache Digest
        (rebuilt at most every ``digest_period`` seconds)."""
        now = time.monotonic()
        if self._digest_cache is None or now - self._digest_cache[0] >= self.config.digest_period:
            until = time.time() + self.config.digest_horizon
            keys = [k for k, expires in self.advertised.expires_at.items() if k.startswith("GET ") and expires > until]
            digest = CacheDigest.from_keys(keys, capacity=max(1, len(keys)))
            self._digest_cache = (now, digest.to_bytes())
        return self._digest_cache[1]

    # -- proxying ---------------------------------------------------------------------------------------------
    async def _proxy(self, request, url: str):
        method = request.method
        headers = request.headers
        peers_asked = request.get(_PEERS_ASKED_KEY)
        if peers_asked is not None:  # the lean path did everything up to the peers' answers (lean_miss)
            if peers_asked.key != request_key(method, url):
                peers_asked.end()  # not this request's (cannot happen: the connection's first request was asked)
            elif peers_asked.collapsed is not None:  # a followed fetch's copy the lean path could not serialise
                _log_as(request, "TCP_CF_MISS")
                return self._respond_document(peers_asked.collapsed, "MISS", COLLAPSED_STATUS)
            else:
                _log_as(request, "TCP_MISS")
                return await self._lead_miss(request, url, peers_asked.key, peers_asked.leader, peers_asked.started,
                                             "uri-miss", peers_asked)
        via = headers.get("Via", "")
        if self.url in via or f"bloomwise-{self.config.port}" in via:
            self.counters["loops_refused"] += 1
            return _error(508, f"loop: this request already went through {self.url} (Via: {via[:200]})")
        directives = http_cache.cache_control(headers)
        if "only-if-cached" in directives:
            return self._serve_peer_query(request, method, url)
        if method == "PURGE":
            return self._purge(url)
        if method != "GET":
            refused = await self._refused_destination(url)
            if refused is not None:
                return refused
            self.counters["pass_through"] += 1
            return await self._pass_through(request, url)
        key = request_key(method, url)
        node = self.node
        forwarded_because = "uri-miss"
        stored = node.cache.peek(key)
        if stored is not None:
            lifetime, age = http_cache.lifetime_and_age(stored.headers or {}, stored.stored_at)
            if lifetime is None or age >= lifetime:
                self._drop(key)  # stale: fetched again below
                forwarded_because = "stale"
        if not http_cache.request_may_use_cache(method, headers, directives):  # no-cache: fetch, store the new copy
            refused = await self._refused_destination(url)
            if refused is not None:
                return refused
            self.counters["cache_bypassed"] += 1
            _log_as(request, "TCP_CLIENT_REFRESH_MISS")
            return await self._fetch_and_respond(request, url, key, store=True, forwarded_because="request")
        doc = node.lookup(key)
        if doc is not None:  # the document peeked at above, fresh
            _log_as(request, "TCP_HIT")
            return self._respond_document(doc, "HIT", f"hit; ttl={int(lifetime - age)}", age=age)
        refused = await self._refused_destination(url)  # a miss: the peers and then the origin fetch it
        if refused is not None:
            return refused
        _log_as(request, "TCP_REFRESH_MISS" if forwarded_because == "stale" else "TCP_MISS")
        leader = self._in_flight.get(key)
        if leader is not None:  # collapsed forwarding: wait for the request already fetching this URL
            response = await self._follow(request, key, leader)
            if response is not None:
                return response
            leader = None      # its answer could not be shared: this request fetches its own
        else:
            leader = self._in_flight[key] = FetchInFlight()
        return await self._lead_miss(request, url, key, leader, time.perf_counter(), forwarded_because)

    async def _lead_miss(self, request, url: str, key: str, leader: Optional[FetchInFlight], started: float,
                         forwarded_because: str, peers_asked: Optional[PeersAsked] = None):
        """A miss from ``started`` to its end (timed; ``leader``, the collapsed-forwarding event, set at the end)."""
        try:
            return await self._miss(request, url, key, started, forwarded_because, peers_asked)
        finally:
            if peers_asked is not None:
                peers_asked.end()
            else:
                self._end_miss(key, leader, started)

    def _end_miss(self, key: str, leader: Optional[FetchInFlight], started: float) -> None:
        timing = self.timing
        timing["misses"] += 1
        timing["miss_seconds"] += time.perf_counter() - started
        if leader is not None:
            if self._in_flight.get(key) is leader:
                del self._in_flight[key]
            leader.set()

    async def _follow(self, request, key: str, leader: FetchInFlight):
        """A miss for a URL another request is fetching: its stored answer when it comes (counted as collapsed),
        or None when it was not stored (uncacheable, too large, failed): then this request fetches on its own."""
        doc = await self._followed_document(key, leader)
        if doc is None:
            return None
        _log_as(request, "TCP_CF_MISS")
        return self._respond_document(doc, "MISS", COLLAPSED_STATUS)

    async def _followed_document(self, key: str, leader: FetchInFlight):
        """The document the leader of ``key``'s fetch stored, fresh (counted as a collapsed request), or None."""
        try:
            await asyncio.wait_for(leader.wait(), self.config.origin_timeout + self.config.peer_timeout)
        except asyncio.TimeoutError:
            return None
        doc = self.node.cache.get(key)
        if doc is None or not http_cache.is_fresh(doc.headers or {}, doc.stored_at):
            return None
        self.counters["collapsed_requests"] += 1
        return doc

    async def _miss(self, request, url: str, key: str, started: float, forwarded_because: str,
                    peers_asked: Optional[PeersAsked] = None):
        """A local miss: the peers the policy names (the summary decision, timed), then the origin.
        ``peers_asked``: the lean path asked them already (its outcome is used; no peer is asked twice)."""
        from aiohttp import web

        hit = await self._ask_peers(url, key, started) if peers_asked is None else peers_asked.hit
        if hit is not None:
            link, (status, reply_headers, body, _) = hit
            headers = self._remote_hit_headers(key, request.method, request.headers, link, status, reply_headers,
                                               body, forwarded_because)
            _log_as(request, "TCP_MISS", link.hierarchy)
            return web.Response(status=status, body=body, headers=headers)
        self.node.record_origin_fetch(key)
        return await self._fetch_and_respond(request, url, key, store=True, forwarded_because=forwarded_because)

    async def _ask_peers(self, url: str, key: str, started: float, netloc: Optional[str] = None):
        """The routing decision (timed from ``started``) and the peers it names, asked as it says: ``(link,
        (status, headers, body, head))`` of the first that has ``url`` (whose authority is ``netloc``, when known), or
        None (each answer is recorded)."""
        node = self.node
        links = self._route(key)
        self.timing["route_seconds"] += time.perf_counter() - started
        state = RequestState()
        if node.policy.sequential:  # paradox: one at a time in the optimal order, stop at the first hit
            answers = []
            for link in links:
                answers.append(await self._ask_peer(link, url, key, state, netloc))
                if answers[-1] is not None:
                    break
        elif len(links) == 1:  # (one peer: asked without gather's task)
            answers = [await self._ask_peer(links[0], url, key, state, netloc)]
        else:  # icp, summary: every listed peer at once
            answers = await asyncio.gather(*(self._ask_peer(link, url, key, state, netloc) for link in links))
        for link, answer in zip(links, answers):
            if answer is not None:
                return link, answer
        return None

    def _route(self, key: str) -> list:
        """The routing decision: the links of the peers to ask for ``key``, in order."""
        return [self.links[p] for p in self.node.route(key) if p in self.links]

    def _remote_hit_headers(self, key: str, method: str, request_headers, link: PeerLink, status: int,
                            reply_headers: dict, body: bytes, forwarded_because: str) -> dict:
        """A peer's answer to a miss: stored when the request and the reply allow it; the client's headers."""
        stored = self._store(key, method, request_headers, status, reply_headers, body)
        return self._remote_hit_client_headers(link, status, reply_headers, stored, forwarded_because)

    def _remote_hit_client_headers(self, link: PeerLink, status: int, reply_headers: dict, stored: bool,
                                   forwarded_because: str) -> dict:
        """The client's headers of a peer's answer (``stored``: whether this proxy kept a copy)."""
        cache_status = (f"fwd={forwarded_because}; fwd-status={status}{'; stored' if stored else ''}; "
                        f"detail={self._peer_detail(link.url)}")
        headers = self._client_headers(reply_headers, "REMOTE_HIT", cache_status)
        headers["X-Bloomwise-Peer"] = link.url
        return headers

    async def lean_miss(self, url: str, key: str, request_headers) -> Optional[LeanMissOutcome]:
        """A plain ``GET url`` that missed in the lean path (bloomwise.proxy.fast_hits), taken as far as the
        peers: the aiohttp path's steps for it, in its order, without its request and response objects.

        None: not taken, nothing counted (no peers, a destination refused, a copy stored meanwhile): the aiohttp
        path answers the request from the start. Otherwise the request is counted by the node; when a fetch of
        ``url`` is in flight it waits for it (collapsed forwarding, as ``_follow``) and gets its stored copy, a
        :class:`LeanAnswer`; else (or when that copy cannot be shared) it leads the collapsed forwarding of
        ``key`` and the peers are asked once: a :class:`LeanAnswer` (a remote hit, stored if allowed, the miss
        ended) for the lean path to send, or :class:`PeersAsked` (no peer had it, or a reply for aiohttp to
        serialise) for the aiohttp path to finish (``_miss`` with the peers' outcome: the origin fetch, or the
        response).

        :param request_headers: the client's request headers (a case-insensitive mapping; storing rules read it).
        """
        received = time.perf_counter()
        if not self.links:
            return None
        parts = http_cache.absolute_target(url)
        if parts is None:
            return None
        checked = self.config.destinations.recent_check(parts.hostname, parts.port)
        if checked is None:
            checked = await self.config.destinations.check(parts.hostname, parts.port)
        if checked[0] is not None or self.node.cache.peek(key) is not None:
            return None
        self.node.lookup(key)        # counts the request and its local miss, as the aiohttp path does
        leader = self._in_flight.get(key)
        if leader is not None:       # collapsed forwarding: wait for the request fetching it (as _follow)
            doc = await self._followed_document(key, leader)
            if doc is not None:
                body = doc.body or b""
                if fast_hits.serialisable_headers(doc.headers or {}):
                    return LeanAnswer(200, self._document_headers(doc, "MISS", COLLAPSED_STATUS), body,
                                      "TCP_CF_MISS", "HIER_NONE/-", "collapsed", received)
                return PeersAsked(key, None, None, time.perf_counter(), received, None, collapsed=doc)
            leader = None            # its answer could not be shared: this request fetches its own
        else:
            leader = self._in_flight[key] = FetchInFlight()
        started = time.perf_counter()
        try:
            hit = await self._ask_peers(url, key, started, parts.netloc)
        except BaseException:
            self._end_miss(key, leader, started)
            raise
        return self._lean_outcome(key, request_headers, hit, leader, started, received)

    def lean_miss_now(self, url: str, key: str, request_headers, done) -> Optional["_LeanQueries"]:
        """:meth:`lean_miss` without a task, for the common case: the destination's check is remembered, no fetch
        of ``url`` is in flight, and the routing decision names one peer, or peers asked one at a time. Their
        queries are then sent from loop callbacks, and ``done(outcome)`` receives what ``lean_miss`` would return
        (or the exception of a bug). Returns the request's :class:`_LeanQueries` (``cancel()`` drops it: the miss
        ends, ``done`` is not called), or None when it did not start (nothing counted): then run ``lean_miss``.
        """
        received = time.perf_counter()
        parts = http_cache.absolute_target(url) if self.links and key not in self._in_flight else None
        if parts is None:
            return None
        checked = self.config.destinations.recent_check(parts.hostname, parts.port)
        if checked is None or checked[0] is not None or self.node.cache.peek(key) is not None:
            return None
        started = time.perf_counter()
        links = self._route(key)
        if not links or (len(links) > 1 and not self.node.policy.sequential):
            return None
        self.timing["route_seconds"] += time.perf_counter() - started
        self.node.lookup(key)        # counts the request and its local miss, as lean_miss does
        leader = self._in_flight[key] = FetchInFlight()
        return _LeanQueries(self, url, key, parts.netloc, request_headers, links, leader, started, received,
                            done).ask_next()

    def _lean_outcome(self, key: str, request_headers, hit, leader: FetchInFlight, started: float,
                      received: float) -> LeanMissOutcome:
        """What :meth:`lean_miss` returns once the peers answered (``hit``: as :meth:`_ask_peers` returns it)."""
        if hit is not None:
            link, (status, reply_headers, body, head) = hit
            try:
                answer = self._lean_remote_hit(key, request_headers, link, status, reply_headers, body, head,
                                               received)
            except BaseException:
                self._end_miss(key, leader, started)
                raise
            if answer is not None:
                self._end_miss(key, leader, started)
                return answer
        return PeersAsked(key, hit, leader, started, received, self._end_miss)

    def _lean_remote_hit(self, key: str, request_headers, link: PeerLink, status: int, reply_headers: dict,
                         body: bytes, reply_head: Optional[bytes], received: float) -> Optional[LeanAnswer]:
        """A peer's answer to a lean miss, stored if allowed, as the :class:`LeanAnswer` the lean path sends (None:
        headers aiohttp would serialise otherwise). The answer's head is a function of the reply's headers, its
        length, whether the request allows storing and whether it was stored: made once per distinct set of
        these (:class:`RemoteHitHeads`) while the reply carries its own Date (else a fresh Date goes in). The reply's
        head (``reply_head``, the bytes of it when the reader remembers it) stands for its status and headers."""
        allows_storing = http_cache.request_allows_storing("GET", request_headers)
        memo_key = ((link.url, reply_head, len(body), allows_storing) if reply_head is not None
                    else (link.url, status, tuple(reply_headers.items()), len(body), allows_storing))
        heads = self._remote_hit_heads.get(memo_key)
        if heads is None:
            if not fast_hits.serialisable_headers(reply_headers, link.url):
                return None
            storable = (allows_storing and len(body) <= self.config.max_object_size
                        and http_cache.response_is_storable("GET", request_headers, status, reply_headers))
            heads = RemoteHitHeads(storable, link.hierarchy)
            if http_cache.has_field(reply_headers, "Date"):
                if len(self._remote_hit_heads) >= REMOTE_HIT_HEADS:
                    self._remote_hit_heads.clear()
                self._remote_hit_heads[memo_key] = heads
        stored = heads.storable and self._admit(key, reply_headers, body)
        headers, head = heads.by_stored[stored]
        if headers is None:
            headers = self._remote_hit_client_headers(link, status, reply_headers, stored, "uri-miss")
            if memo_key in self._remote_hit_heads:   # the reply's own Date: the head is the same each time
                head = fast_hits.response_head(status, headers, len(body), b"")
            heads.by_stored[stored] = (headers, head)
        return LeanAnswer(status, headers, body, "TCP_MISS", heads.hierarchy, "remote_hit", received, head=head)

    async def _ask_peer(self, link: PeerLink, url: str, key: str, state: RequestState, netloc: Optional[str] = None):
        """Ask one peer for ``url`` (whose authority is ``netloc``, when known) with only-if-cached: (status,
        headers, body, head) on a hit, None otherwise."""
        started = time.perf_counter()
        answered = self._peer_query(link, url, urlsplit(url).netloc if netloc is None else netloc)
        try:
            await answered
        except PEER_QUERY_FAILURES:
            pass                     # recorded by _peer_answer
        return self._peer_answer(link, key, state, started, answered)

    def _peer_query(self, link: PeerLink, url: str, netloc: str) -> asyncio.Future:
        """Send ``GET url`` (whose authority is ``netloc``) to one peer with only-if-cached, on its pipelined
        connections: the future of its ``(status, headers, body, head)`` (``PeerConnections.submit``)."""
        self.counters["peer_queries_sent"] += 1
        connections = self.peer_connections.get(link.url)
        if connections is None:
            connections = self.peer_connections[link.url] = peer_client.PeerConnections(link.url)
        fields = self._peer_query_fields
        if fields is None:
            fields = self._peer_query_fields = f"Cache-Control: only-if-cached\r\nVia: {self._via()}\r\n"
        return connections.submit(peer_client.get_request(url, netloc, fields), timeout=self.config.peer_timeout,
                                  max_body=self.config.max_object_size)

    def _peer_answer(self, link: PeerLink, key: str, state: RequestState, started: float,
                     answered: asyncio.Future) -> Optional[tuple]:
        """Record the answer to a query that :meth:`_peer_query` sent at ``started`` (``answered``, done): the
        peer's health, round-trip time and the node's count. (status, headers, body, head) on a hit (as
        ``PeerConnections.submit`` gives it), None otherwise."""
        error = answered.exception()
        if error is not None:
            if not isinstance(error, PEER_QUERY_FAILURES):
                raise error
            self.counters["peer_failures"] += 1
            link.note_failure(f"query: {type(error).__name__}: {error}".rstrip(": "))
            return None
        elapsed = time.perf_counter() - started
        reply = answered.result()
        status = reply[0]
        link.note_rtt(elapsed)
        self.metrics.peer_query.observe(elapsed)
        if status == 200:
            link.note_success()
            self.node.record_peer_answer(link.url, key, True, state)
            return reply
        if status == 504:
            link.note_success()
            self.node.record_peer_answer(link.url, key, False, state)
            return None
        self.counters["peer_failures"] += 1
        link.note_failure(f"query answered {status}")
        return None

    def _serve_peer_query(self, request, method: str, url: str):
        from aiohttp import web

        key = request_key(method, url)
        doc = self.node.serve_peer_query(key) if method == "GET" else None
        if doc is not None and not http_cache.is_fresh(doc.headers or {}, doc.stored_at):
            self._drop(key)
            doc = None
        if doc is None:
            _log_as(request, "TCP_MISS")
            return web.Response(status=504, body=NOT_CACHED_BODY, headers=self.not_cached_headers())
        _log_as(request, "TCP_HIT")
        return self._respond_document(doc, "HIT")

    def not_cached_headers(self) -> dict:
        """The headers of the 504 that answers a peer query for a document not stored (fresh) here."""
        return {"X-Cache": f"MISS from {self.url}", "Cache-Status": f"{self._status_name}; detail=only-if-cached",
                "Content-Type": "text/plain; charset=utf-8"}

    def _purge(self, url: str):
        """PURGE url (allowed clients only): remove it; the next summary, published now, leaves it out."""
        from aiohttp import web

        key = request_key("GET", url)
        if not self.node.purge(key):
            return web.Response(status=404, text=f"not cached: {url[:200]}\n")
        self.advertised.withdraw(key)
        self.counters["purges"] += 1
        self._after_change(now=True)
        return web.Response(status=200, text=f"purged: {url[:200]}\n")

    @property
    def _fetch_session(self):
        """The session origin fetches use: through the parent (an operator's choice) or guarded to the origin."""
        return self.session if self.config.parent else self.origin_session

    def _via(self) -> str:
        return f"1.1 {self.url}"

    async def _fetch_and_respond(self, request, url: str, key: str, *, store: bool, forwarded_because: str):
        """Fetch ``url`` from the origin (or the parent), answer the client, and store the reply if allowed."""
        import aiohttp

        headers = http_cache.end_to_end_headers(request.headers)
        headers.pop("Host", None)
        headers["Via"] = (request.headers.get("Via", "") + ", " if "Via" in request.headers else "") + self._via()
        parent = self.config.parent
        started = time.perf_counter()
        try:
            async with self._fetch_session.request(request.method, url, headers=headers, proxy=parent,
                                                   allow_redirects=False) as reply:
                reply_headers = http_cache.joined_fields(reply.headers)
                self.metrics.observe("origin_fetch", time.perf_counter() - started)
                _log_as(request, None, f"PARENT_HIT/{urlsplit(parent).hostname}" if parent
                        else f"HIER_DIRECT/{urlsplit(url).hostname}")
                cache_status = f"fwd={forwarded_because}; fwd-status={reply.status}"
                body, complete = await _read_body(reply, self.config.max_object_size, strict=False)
                if not complete:  # larger than the largest object stored: streamed on, uncached
                    return await self._stream(request, reply, body, cache_status)
                if store and self._store(key, request.method, request.headers, reply.status, reply_headers, body):
                    cache_status += "; stored"
                return self._respond(reply.status, reply_headers, body, "MISS", cache_status,
                                     cookies=reply.headers)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            what = "parent" if parent else "origin"
            return _error(502, f"the {what} could not be reached for {url[:200]}: {type(exc).__name__}: {exc}",
                          **{"Cache-Status": f"{self._status_name}; fwd={forwarded_because}; detail={what}-error"})

    async def _stream(self, request, reply, head: bytes, cache_status: str):
        from aiohttp import web

        headers = self._client_headers(http_cache.joined_fields(reply.headers), "MISS", cache_status)
        response = web.StreamResponse(status=reply.status, headers=_every_set_cookie(headers, reply.headers))
        if reply.content_length is not None:
            response.content_length = reply.content_length
        await response.prepare(request)
        if head:
            await response.write(head)
        async for chunk in reply.content.iter_chunked(65536):
            await response.write(chunk)
        await response.write_eof()
        return response

    async def _pass_through(self, request, url: str):
        """Non-GET methods: forwarded to the origin (or parent) with their body, never cached."""
        import aiohttp

        headers = http_cache.end_to_end_headers(request.headers)
        headers.pop("Host", None)
        headers["Via"] = self._via()
        data = await request.read() if request.can_read_body else None
        if data is not None and len(data) > self.config.max_object_size:
            return _error(413, f"request body over {self.config.max_object_size} bytes")
        parent = self.config.parent
        try:
            async with self._fetch_session.request(request.method, url, headers=headers, data=data,
                                                   proxy=parent, allow_redirects=False) as reply:
                body = await reply.read()
                _log_as(request, "TCP_MISS", f"PARENT_HIT/{urlsplit(parent).hostname}" if parent
                        else f"HIER_DIRECT/{urlsplit(url).hostname}")
                return self._respond(reply.status, http_cache.joined_fields(reply.headers), body, "MISS",
                                     f"fwd=method; fwd-status={reply.status}", cookies=reply.headers)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            return _error(502, f"could not forward {request.method} {url[:200]}: {type(exc).__name__}: {exc}",
                          **{"Cache-Status": f"{self._status_name}; fwd=method; detail=origin-error"})

    def _store(self, key, method, request_headers, status, reply_headers, body) -> bool:
        """Store a reply if RFC 9111 (as http_cache implements it) and the size limit allow; True if stored."""
        if not http_cache.response_is_storable(method, request_headers, status, reply_headers):
            return False
        if len(body) > self.config.max_object_size:
            return False
        return self._admit(key, reply_headers, body)

    def _admit(self, key: str, reply_headers: dict, body: bytes) -> bool:
        """Store a reply the storing rules allow (its end-to-end headers, without the hops' own); True if
        stored."""
        stored_headers = http_cache.end_to_end_headers(reply_headers)
        for name in ("X-Cache", "Via", "Date", "Cache-Status", "X-Bloomwise-Peer"):
            stored_headers.pop(name, None)
        now = time.time()
        for evicted in self.node.admit(key, len(body), body, stored_headers, stored_at=now):
            self.advertised.withdraw(evicted)
        if key in self.node.cache:
            self.advertised.advertise(key, expires_at=http_cache.expires_at(stored_headers, now), now=now,
                                      horizon=self.config.advertise_horizon)
        self._after_change()
        return key in self.node.cache

    def _peer_detail(self, peer_url: str) -> str:
        """The Cache-Status detail naming a peer that served a remote hit (formatted once per peer)."""
        detail = self._peer_details.get(peer_url)
        if detail is None:
            detail = self._peer_details[peer_url] = _sf_string("peer " + peer_url)
        return detail

    def _client_headers(self, headers: dict, cache_state: str, cache_status: str) -> dict:
        """The reply's end-to-end headers with this proxy's X-Cache, its Cache-Status entry (RFC 9211: appended
        after those of the caches nearer the origin) and Via."""
        out = http_cache.end_to_end_headers(headers)
        out.pop("X-Cache", None)
        out["X-Cache"] = f"{cache_state} from {self.url}"
        upstream = out.pop("Cache-Status", None)
        out["Cache-Status"] = (upstream + ", " if upstream else "") + f"{self._status_name}; {cache_status}"
        out["Via"] = (out["Via"] + ", " if "Via" in out else "") + self._via()
        return out

    def _respond(self, status: int, headers: dict, body: bytes, cache_state: str, cache_status: str, *,
                 cookies=None):
        """A reply to the client (``cookies``: the origin's own headers, whose every Set-Cookie line it gets)."""
        from aiohttp import web

        headers = self._client_headers(headers, cache_state, cache_status)
        return web.Response(status=status, body=body,
                            headers=headers if cookies is None else _every_set_cookie(headers, cookies))

    def _respond_document(self, doc, cache_state: str, cache_status: Optional[str] = None, *,
                          age: Optional[float] = None):
        """A stored document, with its Age (``age``: known already); ``cache_status`` None: a hit (``hit; ttl=S``,
        S the seconds it stays fresh)."""
        from aiohttp import web

        return web.Response(status=200, body=doc.body or b"",
                            headers=self._document_headers(doc, cache_state, cache_status, age=age))

    def _document_headers(self, doc, cache_state: str, cache_status: Optional[str] = None, *,
                          age: Optional[float] = None) -> dict:
        """The client's headers of a stored document (as :meth:`_respond_document`)."""
        stored = doc.headers or {}
        if age is None:
            age = http_cache.current_age(stored, doc.stored_at)
        if cache_status is None:
            lifetime = http_cache.freshness_lifetime(200, stored, now=doc.stored_at)
            cache_status = f"hit; ttl={int(lifetime - age) if lifetime is not None else 0}"
        headers = self._client_headers(dict(stored), cache_state, cache_status)
        headers["Age"] = str(int(age))
        return headers

    # -- stats ------------------------------------------------------------------------------------------------
    def stats(self) -> dict:
        """``CacheNode.stats()`` plus the network's view: per peer rtt_ms, healthy, kind, failures."""
        out = self.node.stats()
        for url, peer in out["peers"].items():
            link = self.links.get(url)
            if link is not None:
                peer.update(link.stats())
        served = out["local_hits"] + out["remote_hits"]
        out.update({
            "name": self.name, "listen": self.url, "policy": self.config.policy,
            "uptime_seconds": round(time.monotonic() - self.started_monotonic, 3),
            "hit_ratio": served / out["requests"] if out["requests"] else 0.0,
            "cache": {"documents": self.node.cache.num_documents, "used_bytes": self.node.cache.used_bytes,
                      "capacity_bytes": self.node.cache.capacity_bytes},
            "advertised_documents": len(self.advertised),
            "summary": self._summary_stats(),
        })
        out.update(self.counters)
        timing = self.timing
        out["timing"] = {"misses": timing["misses"], "miss_seconds": round(timing["miss_seconds"], 6),
                         "route_seconds": round(timing["route_seconds"], 6),
                         "route_share": timing["route_seconds"] / timing["miss_seconds"] if timing["misses"] else None}
        return out

    def _summary_stats(self) -> dict:
        """The published summary: version, keys, origin, kind, its positions ``num_cells`` and the documents it was
        sized for, the re-sizes so far and the tolerance that triggers them (None: off)."""
        publisher, filt = self.node.publisher, self.advertised.filter
        return {"version": publisher.current_version, "num_keys": publisher.current_num_keys,
                "origin": f"{publisher.origin:016x}", "kind": self.config.summary_kind,
                "num_cells": filt.num_cells, "num_hashes": filt.num_hashes,
                "sized_for_documents": self.advertised.expected_entries, "resizes": publisher.resizes,
                "resize_tolerance": publisher.resize_tolerance}


async def _read_body(reply, limit: int, *, strict: bool = True):
    """The whole body if it has at most ``limit`` bytes. Over it: ValueError (strict), or the bytes read so far
    as ``(head, False)`` for the caller to stream on (not strict; a complete body is ``(body, True)``)."""
    length = reply.content_length
    if length is not None and length > limit:
        if strict:
            raise ValueError(f"body of {length} bytes over the limit of {limit}")
        return b"", False
    chunks, total = [], 0
    while total <= limit:
        chunk = await reply.content.read(limit + 1 - total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    body = b"".join(chunks)
    if total > limit:
        if strict:
            raise ValueError(f"body over the limit of {limit} bytes")
        return body, False
    if length is not None and len(body) != length:
        raise ValueError(f"body of {len(body)} bytes, Content-Length said {length}")
    return body if strict else (body, True)


def _every_set_cookie(headers: dict, received):
    """``headers`` (a dict: one line per name) with every ``Set-Cookie`` line of ``received`` (a multi-valued
    mapping), which cannot be joined into one (RFC 6265 section 3): a CIMultiDict when there are several."""
    cookies = received.getall("Set-Cookie", ())
    if len(cookies) < 2:
        return headers
    from multidict import CIMultiDict

    out = CIMultiDict((name, value) for name, value in headers.items() if name.lower() != "set-cookie")
    for cookie in cookies:
        out.add("Set-Cookie", cookie)
    return out


class FetchInFlight:
    """The collapsed-forwarding mark of a URL being fetched (``BloomwiseProxy._in_flight``): the requests that
    follow its leader ``wait()`` until the leader's miss ends (``set()``). An ``asyncio.Event`` with the event made
    only when a follower waits: most fetches have none."""

    __slots__ = ("_done", "_event")

    def __init__(self):
        self._done = False
        self._event = None

    def is_set(self) -> bool:
        return self._done

    def set(self) -> None:
        self._done = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        if not self._done:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()


#: how a peer query fails (the peer is marked, the next peer or the origin is asked)
PEER_QUERY_FAILURES = (asyncio.TimeoutError, OSError, ValueError, PeerFailure)


class _LeanQueries:
    """The peer queries of one lean miss started by :meth:`BloomwiseProxy.lean_miss_now`: the peers ``links``
    asked one at a time from loop callbacks, until one has the document; then ``done(outcome)``."""

    __slots__ = ("proxy", "url", "key", "netloc", "request_headers", "links", "leader", "started", "received",
                 "done", "state", "asked", "asked_at", "answered")

    def __init__(self, proxy: "BloomwiseProxy", url: str, key: str, netloc: str, request_headers, links: list,
                 leader: FetchInFlight, started: float, received: float, done):
        self.proxy, self.url, self.key, self.netloc, self.request_headers = proxy, url, key, netloc, request_headers
        self.links, self.leader, self.started, self.received, self.done = links, leader, started, received, done
        self.state = RequestState()
        self.asked = -1              # the index in links of the peer asked last
        self.asked_at = 0.0
        self.answered = None         # the future of its answer

    def ask_next(self) -> "_LeanQueries":
        self.asked += 1
        self.asked_at = time.perf_counter()
        self.answered = self.proxy._peer_query(self.links[self.asked], self.url, self.netloc)
        self.answered.add_done_callback(self._on_answer)
        return self

    def cancel(self) -> None:
        """The client went away: the query in flight is dropped (its answer, when it comes, is not read)."""
        self.answered.cancel()

    def _on_answer(self, answered: asyncio.Future) -> None:
        proxy = self.proxy
        if answered.cancelled():
            proxy._end_miss(self.key, self.leader, self.started)
            return
        try:
            link = self.links[self.asked]
            reply = proxy._peer_answer(link, self.key, self.state, self.asked_at, answered)
            if reply is None and self.asked + 1 < len(self.links):
                self.ask_next()
                return
            outcome = proxy._lean_outcome(self.key, self.request_headers, None if reply is None else (link, reply),
                                          self.leader, self.started, self.received)
        except Exception as exc:     # a bug: the miss ends (once); the lean path answers 500
            if not self.leader.is_set():
                proxy._end_miss(self.key, self.leader, self.started)
            outcome = exc
        self.done(outcome)


try:  # a request's access-log fields: [Squid result code, hierarchy/peer]
    from aiohttp.web import RequestKey
    _LOG_KEY = RequestKey("bloomwise_log", list)
    _PEERS_ASKED_KEY = RequestKey("bloomwise_peers_asked", PeersAsked)
except ImportError:  # aiohttp before 3.12 (or none: this module is imported only with it)
    _LOG_KEY, _PEERS_ASKED_KEY = "bloomwise_log", "bloomwise_peers_asked"
#: Squid result code -> the outcome label of the request-duration histogram (a SIBLING_HIT is a remote hit)
_OUTCOMES = {"TCP_HIT": "hit", "TCP_CF_MISS": "collapsed", "TCP_MISS": "miss", "TCP_REFRESH_MISS": "miss",
             "TCP_CLIENT_REFRESH_MISS": "miss"}
#: the body of the 504 that answers a peer query for a document not stored here
NOT_CACHED_BODY = b"not cached here (only-if-cached)\n"
#: distinct remote-hit heads remembered at most (then forgotten at once): a peer's reply changes with its Age
REMOTE_HIT_HEADS = 4096


class RemoteHitHeads:
    """What a lean remote hit's answer looks like for one peer reply: whether it may be stored, its access-log
    hierarchy, and per ``stored`` (False, True) the client's headers and their serialised head (None until made;
    the head stays None when the reply has no Date of its own)."""

    __slots__ = ("storable", "hierarchy", "by_stored")

    def __init__(self, storable: bool, hierarchy: str):
        self.storable, self.hierarchy = storable, hierarchy
        self.by_stored = [(None, None), (None, None)]


#: the Cache-Status of a collapsed request's answer (the document its leader stored)
COLLAPSED_STATUS = "fwd=uri-miss; fwd-status=200; collapsed"
#: seconds an idle kept-alive client connection stays open (Squid's client_idle_pconn_timeout is 2 minutes)
IDLE_CONNECTION_TIMEOUT = 120.0


class HeaderDeadline(asyncio.Protocol):
    """One client connection: aiohttp's protocol inside, and a deadline for each request's headers.

    The deadline starts when the connection opens, and again at the first byte of each later request; it ends
    when the request's headers are complete (aiohttp calls the handler: :meth:`request_started`). A client that
    has not sent complete headers by then (one that trickles a byte at a time, or sends nothing) gets 408 and the
    connection is closed, as nginx's ``client_header_timeout`` and Squid's ``request_start_timeout`` do.

    One timer per connection, not per request: a request's start only records its deadline, and the timer, when it
    fires, either finds no request waiting for its headers (and stops), a later deadline (and waits for it), or a
    deadline passed (408). A kept-alive connection serving fast requests re-arms it once per ``timeout``.
    """

    def __init__(self, inner: asyncio.Protocol, timeout: float, on_timeout):
        self._inner = inner
        self._timeout = timeout
        self._on_timeout = on_timeout
        self._loop = asyncio.get_running_loop()
        self._timer = None
        self._deadline = None      # loop time by which the pending request's headers must be complete
        self._active = 0
        self._data_while_active = False
        self._transport = None
        self._peers_asked: Optional[PeersAsked] = None  # the first request's, when the lean path asked its peers

    def resume_miss(self, peers_asked: PeersAsked) -> None:
        """The lean path hands over a connection whose first request's peers it asked (before the bytes)."""
        self._peers_asked = peers_asked

    def take_peers_asked(self) -> Optional[PeersAsked]:
        peers_asked, self._peers_asked = self._peers_asked, None
        return peers_asked

    def _start_deadline(self) -> None:
        if self._deadline is None:
            self._deadline = self._loop.time() + self._timeout
            if self._timer is None:
                self._timer = self._loop.call_at(self._deadline, self._expired)

    def _expired(self) -> None:
        self._timer = None
        transport = self._transport
        if self._deadline is None or transport is None or transport.is_closing():
            return
        if self._loop.time() < self._deadline:   # a later request's deadline: wait for it
            self._timer = self._loop.call_at(self._deadline, self._expired)
            return
        self._on_timeout(transport)
        transport.write(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        transport.close()

    def request_started(self) -> None:
        self._deadline = None
        self._active += 1
        self._data_while_active = False

    def request_finished(self) -> None:
        self._active -= 1
        if not self._active and self._data_while_active:  # part of the next request came meanwhile
            self._start_deadline()

    # asyncio.Protocol, passed on
    def connection_made(self, transport) -> None:
        self._transport = transport
        self._inner.connection_made(transport)
        self._start_deadline()

    def data_received(self, data: bytes) -> None:
        if self._active:
            self._data_while_active = True
        elif self._deadline is None:
            self._start_deadline()
        self._inner.data_received(data)

    def eof_received(self):
        return self._inner.eof_received()

    def connection_lost(self, exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport = None
        if self._peers_asked is not None:  # closed before aiohttp read the request: its miss ends here
            self.take_peers_asked().end()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class _OneLineServerLog(logging.LoggerAdapter):
    """aiohttp's server logger for a proxy: a request that does not parse is one warning line, not a traceback
    (at every level: an exception given to any call becomes its type and message on the same line)."""

    def __init__(self, logger: logging.Logger, counters: dict):
        super().__init__(logger, {})
        self.counters = counters

    def process(self, msg, kwargs):
        error = kwargs.pop("exc_info", None)
        if isinstance(error, BaseException):
            detail = f"{type(error).__name__}: {error}".replace("\n", " ").replace("%", "%%")[:300]
            msg = f"{msg}: {detail}"
        return msg, kwargs

    def exception(self, msg, *args, exc_info=True, **kwargs) -> None:
        self.counters["bad_requests"] += 1
        self.warning(msg, *args, exc_info=exc_info, **kwargs)


def _log_as(request, code: Optional[str], hierarchy: Optional[str] = None) -> None:
    """Set what the access log says of ``request`` (None leaves a field as it was)."""
    fields = request.get(_LOG_KEY)
    if fields is None:
        fields = request[_LOG_KEY] = ["TCP_MISS", "HIER_NONE/-"]
    if code is not None:
        fields[0] = code
    if hierarchy is not None:
        fields[1] = hierarchy


def _sf_string(text: str) -> str:
    """``text`` as a structured-field string (RFC 8941 section 3.3.3): quoted, printable ASCII only."""
    printable = "".join(c if " " <= c <= "~" else "?" for c in text)
    return '"' + printable.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sf_token_or_string(text: str) -> str:
    """``text`` as a structured-field token when it is one (RFC 8941 section 3.3.4), else as a string."""
    if re.fullmatch(r"[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*", text):
        return text
    return _sf_string(text)


def _error(status: int, message: str, **headers):
    from aiohttp import web

    return web.Response(status=status, text=message + "\n", headers={"X-Bloomwise-Error": "1", **headers})


async def serve(config: ProxyConfig, *, ready=None) -> None:
    """Run a proxy until cancelled (SIGINT/SIGTERM handled by the caller); ``ready(proxy)`` once listening."""
    proxy = await BloomwiseProxy(config).start()
    if ready is not None:
        ready(proxy)
    try:
        await asyncio.Event().wait()
    finally:
        await proxy.stop()
