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
GET pass through to the origin uncached.

Endpoints of the proxy itself (origin-form targets, or absolute ones naming the proxy's own address)::

    GET  /bloomwise/summary[?since=V&origin=O]   the summary (bloomwise's file format); the delta since version V
                                                 when O is this proxy's instance id and V still kept; 304 if current
    POST /bloomwise/notify                       {"url": PEER_URL, "version": V}: a peer has a new version
    GET  /bloomwise/stats                        JSON counters (CacheNode.stats() and the network's)
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
import secrets
import time
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import parse_qs, urlsplit

from bloomwise.cache.traces import request_key
from bloomwise.proxy import http_cache
from bloomwise.proxy.access import ClientPolicy, DestinationPolicy, GuardedResolver
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
    min_publish_interval: float = 0.1    # seconds between two summary publications, at least
    expected_entries: Optional[int] = None
    mean_document_size: int = 8192       # sizes the summary: expected documents = cache_size / this
    #: who may use the proxy (None: loopback only) and where it may fetch (None: anything but loopback,
    #: link-local and metadata addresses): bloomwise.proxy.access
    clients: Optional[ClientPolicy] = None
    destinations: Optional[DestinationPolicy] = None

    def __post_init__(self):
        if self.max_object_size is None:
            self.max_object_size = max(1, min(self.cache_size // 8, 64 * 2**20))
        if self.clients is None:
            self.clients = ClientPolicy()
        if self.destinations is None:
            self.destinations = DestinationPolicy()
        if self.mean_document_size < 1:
            raise ValueError(f"mean_document_size must be at least 1 byte, got {self.mean_document_size}")


class BloomwiseProxy:
    """One running proxy: ``await proxy.start()``, ``proxy.url``, ``await proxy.stop()``."""

    def __init__(self, config: ProxyConfig):
        from bloomwise.cache import CacheNode, DocumentCache

        self.config = config
        expected = config.expected_entries or max(1, config.cache_size // config.mean_document_size)
        cache = DocumentCache(config.cache_size, bits_per_entry=config.bits_per_entry, expected_entries=expected)
        self.node = CacheNode(config.name or "bloomwise", cache, policy=config.policy,
                              summary_kind=config.summary_kind, update_threshold=config.update_threshold,
                              origin_cost=config.origin_cost_ms, peer_cost=1.0)
        self.links: dict[str, PeerLink] = {}
        self.counters = {key: 0 for key in (
            "requests_total", "pass_through", "cache_bypassed", "peer_failures", "summaries_rejected",
            "notifies_sent", "notifies_received", "digests_served", "loops_refused", "summaries_served",
            "clients_refused", "destinations_refused", "connect_refused")}
        #: where a miss's time goes: the summary decision (node.route) against the whole miss (peers + origin)
        self.timing = {"misses": 0, "miss_seconds": 0.0, "route_seconds": 0.0}
        self.session = None          # to peers and the parent (configured by the operator)
        self.origin_session = None   # to origins: connects only where the destination policy allows
        self.started_monotonic = time.monotonic()
        self._runner = None
        self._digest_cache: Optional[tuple] = None
        self._publish_timer = None
        self._last_publish = 0.0
        self._tasks: set = set()

    # -- lifecycle --------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"http://{host}:{self.config.port}"

    @property
    def name(self) -> str:
        return self.node.name

    async def start(self) -> "BloomwiseProxy":
        import aiohttp
        from aiohttp import web

        server = web.Server(self._handle, access_log=None)
        self._runner = web.ServerRunner(server, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, reuse_address=True)
        await site.start()
        sockets = site._server.sockets
        self.config.port = sockets[0].getsockname()[1]
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
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for session in (self.session, self.origin_session):
            if session is not None:
                await session.close()
        self.session = self.origin_session = None

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- dispatch ---------------------------------------------------------------------------------------------
    async def _handle(self, request):
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
                return await self._internal(request, target, is_client)
            parts = urlsplit(target)
            if parts.scheme != "http" or not parts.hostname:
                return _error(400, f"this proxy forwards http:// absolute-form targets only, got {target[:200]!r}")
            if self._is_self(parts):
                return await self._internal(request, parts.path + (f"?{parts.query}" if parts.query else ""),
                                            is_client)
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
        return port == self.config.port and (parts.path.startswith("/bloomwise/")
                                             or parts.path.startswith("/squid-internal-periodic/"))

    async def _internal(self, request, target: str, is_client: bool):
        """The proxy's own endpoints: open to allowed clients and to the configured peers."""
        from aiohttp import web

        from bloomwise.cache.squid_digest import DIGEST_CONTENT_TYPE, DIGEST_PATH

        path, _, query = target.partition("?")
        if path == "/bloomwise/summary" and request.method in ("GET", "HEAD"):
            return self._serve_summary(parse_qs(query))
        if path == "/bloomwise/stats" and request.method in ("GET", "HEAD"):
            return web.json_response(self.stats())
        if path == "/bloomwise/notify" and request.method == "POST":
            return await self._receive_notify(request)
        if path == DIGEST_PATH and request.method in ("GET", "HEAD"):
            self.counters["digests_served"] += 1
            body = self.squid_digest_bytes()
            return web.Response(body=body, headers={"Content-Type": DIGEST_CONTENT_TYPE,
                                                    "Cache-Control": "max-age=0"})
        return _error(404, f"no such endpoint {path!r}; this is a proxy (send absolute-form requests), with "
                           f"/bloomwise/summary, /bloomwise/stats, /bloomwise/notify and {DIGEST_PATH}")

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
        except (ValueError, KeyError, TypeError) as exc:
            return _error(400, f'a notify body is JSON {{"url": "http://host:port", "version": N}}: {exc}')
        self.counters["notifies_received"] += 1
        link = self.links.get(url)
        if link is None:
            return _error(404, f"{url} is not a peer of this proxy")
        link.notify()
        return web.Response(status=204)

    def _after_change(self) -> None:
        """The cache changed: publish a summary version when the update threshold says so, and notify the peers.

        Publications are at least ``min_publish_interval`` apart: while a cache is nearly empty, the threshold
        (a fraction of the documents cached) is reached by almost every new document, and one version per
        request would cost more than the requests. A publication due sooner waits (and covers every change until
        then)."""
        if self._publish_timer is not None or not self.node.summary_due():
            return
        wait = self._last_publish + self.config.min_publish_interval - time.monotonic()
        if wait <= 0:
            self._publish()
        else:
            self._publish_timer = asyncio.get_running_loop().call_later(wait, self._deferred_publish)

    def _deferred_publish(self) -> None:
        self._publish_timer = None
        if self.node.summary_due():
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
        """The cache's keys as a Squid Cache Digest (rebuilt at most every ``digest_period`` seconds)."""
        from bloomwise.cache.squid_digest import CacheDigest

        now = time.monotonic()
        changes = self.node.cache.changes
        if self._digest_cache is None or (self._digest_cache[1] != changes
                                          and now - self._digest_cache[0] >= self.config.digest_period):
            keys = [k for k in self.node.cache.keys() if k.startswith("GET ")]
            digest = CacheDigest.from_keys(keys, capacity=max(1, len(keys)))
            self._digest_cache = (now, changes, digest.to_bytes())
        return self._digest_cache[2]

    # -- proxying ---------------------------------------------------------------------------------------------
    async def _proxy(self, request, url: str):
        method = request.method
        headers = request.headers
        via = headers.get("Via", "")
        if self.url in via or f"bloomwise-{self.config.port}" in via:
            self.counters["loops_refused"] += 1
            return _error(508, f"loop: this request already went through {self.url} (Via: {via[:200]})")
        if http_cache.only_if_cached(headers):
            return self._serve_peer_query(method, url)
        if method != "GET":
            refused = await self._refused_destination(url)
            if refused is not None:
                return refused
            self.counters["pass_through"] += 1
            return await self._pass_through(request, url)
        key = request_key(method, url)
        node = self.node
        stored = node.cache.peek(key)
        if stored is not None and not http_cache.is_fresh(stored.headers or {}, stored.stored_at):
            node.cache.remove(key)  # stale: fetched again below
            self._after_change()
        if not http_cache.request_may_use_cache(method, headers):  # no-cache: fetch, and store the new copy
            refused = await self._refused_destination(url)
            if refused is not None:
                return refused
            self.counters["cache_bypassed"] += 1
            return await self._fetch_and_respond(request, url, key, store=True)
        doc = node.lookup(key)
        if doc is not None:
            return self._respond_document(doc, "HIT")
        refused = await self._refused_destination(url)  # a miss: the peers and then the origin fetch it
        if refused is not None:
            return refused
        miss_started = time.perf_counter()
        try:
            return await self._miss(request, url, key, miss_started)
        finally:
            timing = self.timing
            timing["misses"] += 1
            timing["miss_seconds"] += time.perf_counter() - miss_started

    async def _miss(self, request, url: str, key: str, started: float):
        """A local miss: the peers the policy names (the summary decision, timed), then the origin."""
        node, method, headers = self.node, request.method, request.headers
        order = node.route(key)
        self.timing["route_seconds"] += time.perf_counter() - started
        links = [self.links[p] for p in order if p in self.links]
        if node.policy.sequential:  # paradox: one at a time in the optimal order, stop at the first hit
            answers = []
            for link in links:
                answers.append(await self._ask_peer(link, url, key))
                if answers[-1] is not None:
                    break
        else:  # icp, summary: every listed peer at once
            answers = await asyncio.gather(*(self._ask_peer(link, url, key) for link in links))
        for link, answer in zip(links, answers):
            if answer is not None:
                status, reply_headers, body = answer
                self._store(key, method, headers, status, reply_headers, body)
                response = self._respond(status, reply_headers, body, "REMOTE_HIT")
                response.headers["X-Bloomwise-Peer"] = link.url
                return response
        node.record_origin_fetch(key)
        return await self._fetch_and_respond(request, url, key, store=True)

    async def _ask_peer(self, link: PeerLink, url: str, key: str):
        """Ask one peer for ``url`` with only-if-cached: (status, headers, body) on a hit, None otherwise."""
        import aiohttp

        started = time.perf_counter()
        try:
            async with self.session.get(
                    url, proxy=link.url, headers={"Cache-Control": "only-if-cached", "Via": self._via()},
                    timeout=aiohttp.ClientTimeout(total=self.config.peer_timeout)) as reply:
                body = await _read_body(reply, self.config.max_object_size)
                elapsed = time.perf_counter() - started
                status, reply_headers = reply.status, dict(reply.headers)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, PeerFailure) as exc:
            self.counters["peer_failures"] += 1
            link.note_failure(f"query: {type(exc).__name__}: {exc}".rstrip(": "))
            return None
        link.note_rtt(elapsed)
        if status == 200:
            link.note_success()
            self.node.record_peer_answer(link.url, key, True)
            return status, reply_headers, body
        if status == 504:
            link.note_success()
            self.node.record_peer_answer(link.url, key, False)
            return None
        self.counters["peer_failures"] += 1
        link.note_failure(f"query answered {status}")
        return None

    def _serve_peer_query(self, method: str, url: str):
        from aiohttp import web

        key = request_key(method, url)
        doc = self.node.serve_peer_query(key) if method == "GET" else None
        if doc is not None and not http_cache.is_fresh(doc.headers or {}, doc.stored_at):
            self.node.cache.remove(key)
            self._after_change()
            doc = None
        if doc is None:
            return web.Response(status=504, text="not cached here (only-if-cached)\n",
                                headers={"X-Cache": f"MISS from {self.url}"})
        return self._respond_document(doc, "HIT")

    @property
    def _fetch_session(self):
        """The session origin fetches use: through the parent (an operator's choice) or guarded to the origin."""
        return self.session if self.config.parent else self.origin_session

    def _via(self) -> str:
        return f"1.1 {self.url}"

    async def _fetch_and_respond(self, request, url: str, key: str, *, store: bool):
        """Fetch ``url`` from the origin (or the parent), answer the client, and store the reply if allowed."""
        import aiohttp
        from aiohttp import web

        headers = http_cache.end_to_end_headers(request.headers)
        headers.pop("Host", None)
        headers["Via"] = (request.headers.get("Via", "") + ", " if "Via" in request.headers else "") + self._via()
        try:
            async with self._fetch_session.request(request.method, url, headers=headers, proxy=self.config.parent,
                                                   allow_redirects=False) as reply:
                reply_headers = dict(reply.headers)
                body, complete = await _read_body(reply, self.config.max_object_size, strict=False)
                if not complete:  # larger than the largest object stored: streamed on, uncached
                    return await self._stream(request, reply, body)
                if store:
                    self._store(key, request.method, request.headers, reply.status, reply_headers, body)
                return self._respond(reply.status, reply_headers, body, "MISS")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            what = "parent" if self.config.parent else "origin"
            return _error(502, f"the {what} could not be reached for {url[:200]}: {type(exc).__name__}: {exc}")

    async def _stream(self, request, reply, head: bytes):
        from aiohttp import web

        response = web.StreamResponse(status=reply.status, headers=self._client_headers(dict(reply.headers), "MISS"))
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
        try:
            async with self._fetch_session.request(request.method, url, headers=headers, data=data,
                                                   proxy=self.config.parent, allow_redirects=False) as reply:
                body = await reply.read()
                return self._respond(reply.status, dict(reply.headers), body, "MISS")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            return _error(502, f"could not forward {request.method} {url[:200]}: {type(exc).__name__}: {exc}")

    def _store(self, key, method, request_headers, status, reply_headers, body) -> None:
        if not http_cache.response_is_storable(method, request_headers, status, reply_headers):
            return
        if len(body) > self.config.max_object_size:
            return
        stored_headers = http_cache.end_to_end_headers(reply_headers)
        for name in ("X-Cache", "Via", "Date"):
            stored_headers.pop(name, None)
        self.node.admit(key, len(body), body, stored_headers)
        self._after_change()

    def _client_headers(self, headers: dict, cache_state: str) -> dict:
        out = http_cache.end_to_end_headers(headers)
        out.pop("X-Cache", None)
        out["X-Cache"] = f"{cache_state} from {self.url}"
        out["Via"] = (out["Via"] + ", " if "Via" in out else "") + self._via()
        return out

    def _respond(self, status: int, headers: dict, body: bytes, cache_state: str):
        from aiohttp import web

        return web.Response(status=status, body=body, headers=self._client_headers(headers, cache_state))

    def _respond_document(self, doc, cache_state: str):
        from aiohttp import web

        headers = self._client_headers(dict(doc.headers or {}), cache_state)
        age_at_arrival = http_cache._seconds(headers.get("Age")) or 0.0
        headers["Age"] = str(int(max(0.0, time.time() - doc.stored_at) + age_at_arrival))
        return web.Response(status=200, body=doc.body or b"", headers=headers)

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
            "summary": {"version": self.node.publisher.current_version,
                        "num_keys": self.node.publisher.current_num_keys,
                        "origin": f"{self.node.publisher.origin:016x}", "kind": self.config.summary_kind},
        })
        out.update(self.counters)
        timing = self.timing
        out["timing"] = {"misses": timing["misses"], "miss_seconds": round(timing["miss_seconds"], 6),
                         "route_seconds": round(timing["route_seconds"], 6),
                         "route_share": timing["route_seconds"] / timing["miss_seconds"] if timing["misses"] else None}
        return out


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
