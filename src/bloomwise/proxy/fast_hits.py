"""The lean hit path of the bloomwise proxy: fresh cached documents served without aiohttp.

aiohttp's server costs about 100 us of Python per request (request object, header multidict, response object,
header serialisation), which caps a one-process proxy near Squid's memory-hit rate on a 2-core machine. A hit needs
none of it: the response is the stored document with a few per-hit fields. :class:`HitConnection` is the
``asyncio.Protocol`` of every client connection; it splits the byte stream into request heads (``\\r\\n\\r\\n``),
reads each with the compiled :func:`~bloomwise._native.http1.plain_get` (one call per head: a plain ``GET`` or
not), and answers by itself only when all of these hold:

- the client may use the proxy (``--allow-clients``), or it is a configured peer and the request is its query;
- ``GET http://...`` HTTP/1.1, kept alive, no body, no ``Connection``/``Expect``/``Pragma`` header, a
  ``Cache-Control`` that is absent or exactly ``only-if-cached`` (a peer query), no ``Via`` naming this proxy;
- the document is stored and fresh, and not one of the proxy's own endpoints.

Everything else (misses, stale copies, endpoints, PURGE, CONNECT, other methods, refusals, malformed or oversized
heads) is *handed over*: the connection's protocol becomes the aiohttp one (``transport.set_protocol``), which
receives the unserved bytes as if it had read them, and keeps the connection to its end. So every behaviour other
than a fresh hit is aiohttp's code, unchanged, and a hit answered here is byte for byte what aiohttp would have sent
(except ``Date`` and ``Age``, which are the time's): :class:`PreparedHit` builds the head once per stored copy with
the same header code and aiohttp's own header order, and leaves three holes filled per hit (``ttl`` of
``Cache-Status``, ``Age``, ``Date``, the last formatted once per second). The answers to pipelined requests go out
in one ``writelines`` per batch (a peer's pipelined queries: one write for all). A peer's query for a document not
stored here, or stale (dropped first, as the aiohttp path does), gets aiohttp's 504 from here too, so that a peer's
pipelined connection stays here through its false hits.

Remote hits too (``lean_miss``, given by the proxy): a plain ``GET http://...`` (kept alive, no body, a
``Cache-Control`` the cache may answer, e.g. ``no-store``) that finds nothing stored goes to the proxy's
:meth:`~bloomwise.proxy.server.BloomwiseProxy.lean_miss`, which does the aiohttp path's steps for it up to the peers'
answers (destination check, node lookup, collapsed forwarding, routing, peer queries over
:mod:`bloomwise.proxy.peer_client`). The connection waits meanwhile (later pipelined bytes are buffered, reading
pauses past :data:`MAX_BUFFERED_WHILE_ASKING`). A peer's 200, stored as aiohttp's path stores it, and a collapsed
request's copy are sent from here (:class:`LeanAnswer`, serialised by :func:`response_head` as aiohttp does);
anything else (no peer had it, a peer failed, headers aiohttp would serialise otherwise) is handed over with
:class:`PeersAsked`, the peers' outcome, which aiohttp's path finishes (the origin fetch) without asking a peer
again. A request the proxy does not take (no peers, a refused destination, a copy stored meanwhile) is handed over
as it came.

Freshness per hit needs no header parsing (RFC 9111 section 4.2.3 as :mod:`bloomwise.proxy.http_cache` simplifies
it): with ``L`` the freshness lifetime and ``A0`` the ``Age`` the copy arrived with, both fixed at store time,
``age(now) = max(0, now - stored_at) + A0`` and the copy is fresh while ``age(now) < L``, i.e. until
``expires = stored_at + L - A0``.

Bounds per connection: a request head over :data:`MAX_HEAD_BYTES` is handed over (aiohttp refuses it with its own
limits); pipelined requests are answered in order, in batches of up to :data:`MAX_BATCHED_BYTES`, while the
transport's write buffer is under its high-water mark, then reading pauses until it drains.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from email.utils import formatdate
from http import HTTPStatus
from typing import Callable, Optional, Union

from bloomwise._native.http1 import plain_get
from bloomwise.cache.traces import request_key
from bloomwise.proxy import http_cache

try:
    from aiohttp.http import SERVER_SOFTWARE
    from multidict import CIMultiDict
except ImportError:  # the proxy needs aiohttp anyway: this module is used only with it
    SERVER_SOFTWARE, CIMultiDict = None, None

__all__ = ["HitPathConfig", "HitConnection", "PreparedHit", "MAX_HEAD_BYTES", "serialisable_headers",
           "response_head", "LeanAnswer", "PeersAsked", "LeanMissOutcome"]

log = logging.getLogger("bloomwise.proxy")

#: a request head longer than this without its blank line goes to aiohttp, which applies its own limits
MAX_HEAD_BYTES = 16384
_FORBIDDEN_HEADER_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # aiohttp's header injection guard


def _clean_header_text(text: str) -> bool:
    """ASCII without the control characters aiohttp refuses in a header."""
    return text.isascii() and _FORBIDDEN_HEADER_CHARS.search(text) is None


def serialisable_headers(headers: dict, *more: str) -> bool:
    """Whether :func:`response_head` serialises ``headers`` (and header values ``more``) as aiohttp would: string
    names and values, ASCII, none of the control characters aiohttp refuses."""
    try:
        return _clean_header_text("".join(headers) + "".join(headers.values()) + "".join(more))
    except TypeError:   # a name or value that is not a string
        return False


def _as_aiohttp_sends(headers: dict, body_length: int, date: str) -> "CIMultiDict":
    """``headers`` given to ``web.Response`` with a body of ``body_length`` bytes, completed in aiohttp's order
    (``Response._start`` then ``_prepare_headers``, HTTP/1.1 kept alive): Content-Length, Content-Type when the
    body is not empty, Date (``date``) when absent, Server."""
    merged = CIMultiDict(headers)
    merged["Content-Length"] = str(body_length)
    if body_length:
        merged.setdefault("Content-Type", "application/octet-stream")
    if "Date" not in merged:
        merged["Date"] = date
    merged.setdefault("Server", SERVER_SOFTWARE)
    return merged


def response_head(status: int, headers: dict, body_length: int, date: bytes) -> bytes:
    """The head aiohttp sends for ``web.Response(status=status, headers=headers, body=<body_length bytes>)`` on a
    kept-alive HTTP/1.1 connection, ``date`` (IMF-fixdate) its Date when ``headers`` has none. The headers must
    be :func:`serialisable_headers`."""
    merged = _as_aiohttp_sends(headers, body_length, date.decode("ascii"))
    return (_status_line(status) + "".join([f"{k}: {v}\r\n" for k, v in merged.items()]) + "\r\n").encode("ascii")


@functools.lru_cache(maxsize=64)
def _status_line(status: int) -> str:
    return f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"


class PreparedHit:
    """The response to a hit on one stored copy: its head split around the per-hit fields, and its body.

    ``head_parts`` are 4 byte strings; the head is ``parts[0] + ttl + parts[1] + age + parts[2] + date +
    parts[3]`` (``date`` empty when the stored copy carries its own Date). ``lifetime`` (L) and ``stored_age``
    (A0) give the copy's age and freshness per hit without reading its headers. Valid while the document object
    still holds the same ``stored_at`` and body (a replaced copy changes them in place).
    """

    __slots__ = ("doc", "stored_at", "body", "head_parts", "lifetime", "stored_age", "content_type", "dated")

    def __init__(self, doc, head_parts, lifetime, stored_age, content_type, dated):
        self.doc, self.stored_at, self.body = doc, doc.stored_at, doc.body or b""
        self.head_parts, self.lifetime, self.stored_age = head_parts, lifetime, stored_age
        self.content_type, self.dated = content_type, dated

    def still_describes(self, doc) -> bool:
        return self.doc is doc and doc.stored_at == self.stored_at and (doc.body or b"") is self.body

    @classmethod
    def build(cls, doc, client_headers: Callable) -> Optional["PreparedHit"]:
        """The prepared hit of ``doc``, or None when it cannot be served here (no lifetime, odd headers).

        ``client_headers(headers, cache_state, cache_status)`` is the proxy's own header builder (the one the
        aiohttp path uses); the per-hit values go in as markers, then the headers get aiohttp's additions in
        aiohttp's order (``web.Response`` then ``_prepare_headers``: Content-Length, Content-Type when the body is
        not empty, Date, Server)."""
        stored = doc.headers or {}
        lifetime = http_cache.freshness_lifetime(200, stored, now=doc.stored_at)
        if lifetime is None or not serialisable_headers(stored):
            return None  # what aiohttp would refuse, or non-ASCII: the aiohttp path decides
        stored_age = http_cache.current_age(stored, doc.stored_at, now=doc.stored_at)
        body = doc.body or b""
        headers = client_headers(dict(stored), "HIT", "hit; ttl=\x00")
        headers["Age"] = "\x01"
        merged = _as_aiohttp_sends(headers, len(body), "\x02")
        dated = merged["Date"] == "\x02"
        text = "HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in merged.items()) + "\r\n"
        pieces = text.replace("\x01", "\x00").replace("\x02", "\x00").split("\x00")
        if len(pieces) != (4 if dated else 3) or not text.isascii():
            return None
        if not dated:
            pieces.append("")
        head_parts = tuple(p.encode("ascii") for p in pieces)
        content_type = merged.get("Content-Type", "-").split(";", 1)[0].strip() or "-"
        return cls(doc, head_parts, lifetime, stored_age, content_type, dated)


class LeanAnswer:
    """An answer to a miss the lean path sends itself (the proxy's ``lean_miss``: a remote hit, or a collapsed
    request's copy): its status, the headers as aiohttp would be given them, the body, the access log's code and
    hierarchy fields, the outcome label of the request-duration histogram (``remote_hit``, ``collapsed``), when
    the request was received (perf_counter), and its serialised head when the proxy made it already."""

    __slots__ = ("status", "headers", "body", "code", "hierarchy", "outcome", "received", "head")

    def __init__(self, status: int, headers: dict, body: bytes, code: str, hierarchy: str, outcome: str,
                 received: float, *, head: Optional[bytes] = None):
        self.status, self.headers, self.body, self.received = status, headers, body, received
        self.code, self.hierarchy, self.outcome = code, hierarchy, outcome
        self.head = head   # response_head(status, headers, len(body), ...) made already (headers with a Date)


class PeersAsked:
    """A miss the lean path took as far as the peers' answers, for the aiohttp path to finish.

    ``hit`` is ``(link, (status, headers, body, head))`` from the peer that had the document, or None (the origin is
    next); ``leader`` is the collapsed-forwarding event this request holds (None: it follows another, or fetches
    on its own); ``started``/``received`` the perf_counter of the miss's start and of the request;
    ``collapsed`` the document of the request it followed, when the lean path could not serialise it (then
    ``hit`` and ``leader`` are None, and aiohttp answers with it). :meth:`end` ends the miss (timed, the leader
    released) once: the aiohttp path calls it when the response is ready, the connection's protocol when the
    connection closed before the aiohttp path saw the request.
    """

    __slots__ = ("key", "hit", "leader", "started", "received", "collapsed", "_end")

    def __init__(self, key: str, hit, leader, started: float, received: float, end, *, collapsed=None):
        self.key, self.hit, self.leader, self.started, self.received = key, hit, leader, started, received
        self.collapsed = collapsed
        self._end = end

    def end(self) -> None:
        if self._end is not None:
            end, self._end = self._end, None
            end(self.key, self.leader, self.started)


#: what the proxy's ``lean_miss`` hands back when it took a request
LeanMissOutcome = Union[LeanAnswer, PeersAsked]


class HitPathConfig:
    """What the hit path needs of its proxy, by name (built by :class:`bloomwise.proxy.server.BloomwiseProxy`).

    :param node: the CacheNode (``lookup``, ``serve_peer_query`` and ``cache.peek`` are used).
    :param counters: the proxy's counters (``requests_total`` and ``fast_hits`` are counted here).
    :param metrics: the proxy's ProxyMetrics (``observe_request("hit", seconds)``).
    :param client_allowed: address -> whether it may use the proxy (``--allow-clients``).
    :param peer_address: None or address -> whether it is a configured peer's (its queries are answered here too).
    :param own_url: the proxy's URL (Via loop guard and its own endpoints).
    :param client_headers: the proxy's header builder (see :meth:`PreparedHit.build`).
    :param handed_over: a factory of the aiohttp protocol that takes a connection over.
    :param header_timeout: seconds for a request's head; ``on_header_timeout(transport)`` then.
    :param log_access: None or ``f(started_wall, elapsed, client, code, status, size, method, target, hierarchy,
        content_type)``, the access-log writer.
    :param not_cached: None (peer queries for documents not stored are handed over) or ``(headers(), body)``:
        the 504 a peer query gets when the document is not stored, or stale (then ``drop(key)`` removes it first,
        as the aiohttp path does). A pipelined connection of a peer's queries then stays on the lean path.
    :param drop: the proxy's removal of a stale document (from the cache and the summary).
    :param lean_miss: None (misses are handed over) or the proxy's ``async f(url, key, request_headers)`` that takes
        a plain miss to its peers (:meth:`bloomwise.proxy.server.BloomwiseProxy.lean_miss`): None (not taken:
        handed over as it came), an answer with ``status, headers, body, hierarchy, received`` to send, or a
        state with ``end()`` that the handed-over protocol's ``resume_miss`` receives.
    :param lean_miss_now: None, or the proxy's ``f(url, key, request_headers, done)`` that takes a plain miss the
        same way without a task when it can (:meth:`bloomwise.proxy.server.BloomwiseProxy.lean_miss_now`):
        ``done(outcome)`` later, and it returns an object with ``cancel()``; None when it cannot (then
        ``lean_miss`` runs in a task).
    """

    def __init__(self, *, node, counters, metrics, client_allowed, own_url, own_port, client_headers, handed_over,
                 header_timeout, on_header_timeout, idle_timeout, log_access, lean_miss=None, lean_miss_now=None,
                 peer_address=None, not_cached=None, drop=None):
        self.node, self.counters, self.metrics = node, counters, metrics
        self.client_allowed, self.own_url, self.own_port = client_allowed, own_url, own_port
        self.client_headers, self.handed_over = client_headers, handed_over
        self.header_timeout, self.on_header_timeout, self.idle_timeout = header_timeout, on_header_timeout, idle_timeout
        self.log_access = log_access
        self.lean_miss, self.lean_miss_now = lean_miss, lean_miss_now
        self.peer_address = peer_address
        self.not_cached, self.drop = not_cached, drop
        self._not_cached_head = (None, None)   # (headers, head parts around the Date) of the 504
        self.prepared: dict = {}          # cache key -> PreparedHit
        self.connections: set = set()     # the HitConnections not handed over (closed by close_all)
        self._date_second = -1
        self._date = b""

    def http_date(self, now: float) -> bytes:
        """RFC 9110 IMF-fixdate of ``now``, formatted once per second."""
        second = int(now)
        if second != self._date_second:
            self._date_second, self._date = second, formatdate(second, usegmt=True).encode("ascii")
        return self._date

    def not_cached_parts(self) -> tuple:
        """The 504 of a peer query for a document not stored: (head before the Date, head after it, body), made
        again when the proxy's headers change (its name)."""
        headers_of, body = self.not_cached
        headers = headers_of()
        if headers != self._not_cached_head[0]:
            before, after = response_head(504, headers, len(body), b"\x00").split(b"\x00")
            self._not_cached_head = (headers, (before, after, body))
        return self._not_cached_head[1]

    def prepared_hit(self, key: str, doc) -> Optional[PreparedHit]:
        """The prepared hit of the document stored under ``key`` (``"GET " + target``), None when the lean path
        does not serve it (an odd target, the proxy's own endpoints: the aiohttp path answers those)."""
        prepared = self.prepared.get(key)
        if prepared is not None and prepared.still_describes(doc):
            return prepared
        if not self.serves_target(key.partition(" ")[2]):
            return None
        if len(self.prepared) > 2 * self.node.cache.num_documents + 64:  # drop those of documents gone
            cache = self.node.cache
            self.prepared = {k: p for k, p in self.prepared.items() if cache.peek(k) is p.doc}
        prepared = PreparedHit.build(doc, self.client_headers)
        if prepared is not None:
            self.prepared[key] = prepared
        else:
            self.prepared.pop(key, None)
        return prepared

    def serves_target(self, target: str) -> bool:
        """An ``http://`` URL with a host that does not name one of the proxy's own endpoints (as the aiohttp
        path's ``_is_self`` decides)."""
        parts = http_cache.absolute_target(target)
        return parts is not None and not (parts.port == self.own_port and (
            parts.path.startswith("/bloomwise/") or parts.path == "/metrics"
            or parts.path.startswith("/squid-internal-periodic/")))

    def close_all(self) -> None:
        for connection in list(self.connections):
            connection.close()


@functools.lru_cache(maxsize=256)
def _cache_control_kind(value: bytes) -> str:
    """What a request's Cache-Control (its fields joined) makes of it on the lean path: ``"peer query"`` (exactly
    ``only-if-cached``), ``"miss"`` (the cache may answer it, e.g. ``no-store``: a hit goes to aiohttp, a miss to the
    peers) or ``"aiohttp"`` (anything else: ``no-cache``, ``max-age=0``, ``only-if-cached`` among others)."""
    directives = value.strip().lower()
    if directives == b"only-if-cached":
        return "peer query"
    if b"only-if-cached" in directives or not http_cache.request_may_use_cache(
            "GET", {"Cache-Control": directives.decode("latin-1")}):
        return "aiohttp"
    return "miss"


def storing_headers(cache_control: Optional[bytes], authorization: Optional[bytes]) -> dict:
    """The request headers the storing rules read (http_cache.request_allows_storing): Cache-Control (every field
    of it, joined) and Authorization."""
    headers = {}
    if cache_control is not None:
        headers["Cache-Control"] = cache_control.decode("latin-1")
    if authorization is not None:
        headers["Authorization"] = authorization.decode("latin-1")
    return headers


class _Miss:
    """A plain GET that missed here, for the proxy's ``lean_miss``: its target, key, headers and head's length."""

    __slots__ = ("target", "key", "headers", "head_length")

    def __init__(self, target: str, key: str, headers, head_length: int):
        self.target, self.key, self.headers, self.head_length = target, key, headers, head_length


#: bytes of pipelined answers batched into one write (about: heads count 512 bytes); then the transport's flow
#: control (pause_writing) decides whether the next are answered now
MAX_BATCHED_BYTES = 64 * 1024
#: bytes a connection buffers (pipelined requests) while its peers are asked before it stops reading
MAX_BUFFERED_WHILE_ASKING = 4 * MAX_HEAD_BYTES


class HitConnection(asyncio.Protocol):
    """One client connection: fresh hits answered here, the rest handed over to aiohttp (module docstring)."""

    def __init__(self, config: HitPathConfig):
        self.config = config
        self.transport = None
        self.client = None
        self.allowed = False
        self.buffer = b""
        self.scanned = 0                # bytes of buffer known to hold no head end
        self.writing_paused = False
        self.head_deadline = None       # loop time by which the head being received must be complete
        self.idle_deadline = None       # loop time an idle kept-alive connection is closed
        self.timer = None
        self.loop = None
        self.asking = None              # the peers asked for the request at the buffer's start (cancel() drops it)
        self.eof = False                # the client ended its side while the peers were asked
        self.held = False               # reading paused: too much buffered while the peers were asked
        self.out = []                   # answers not yet written (one write per batch of pipelined requests)
        self.out_bytes = 0

    # -- asyncio.Protocol -----------------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        self.client = peer[0] if peer else None
        self.allowed = self.config.client_allowed(self.client)
        self.config.connections.add(self)
        self.head_deadline = self.loop.time() + self.config.header_timeout
        self._arm(self.head_deadline)

    def data_received(self, data: bytes) -> None:
        if self.asking is not None:         # pipelined behind a request whose peers are asked: kept for later
            self.buffer += data
            if len(self.buffer) > MAX_BUFFERED_WHILE_ASKING and not self.held:
                self.held = True
                self.transport.pause_reading()
            return
        if self.head_deadline is None:      # the first byte of a request: its head has a deadline
            self.head_deadline = self.loop.time() + self.config.header_timeout
            self.idle_deadline = None
            self._arm(self.head_deadline)
        self.buffer += data
        self._serve_buffered()

    def eof_received(self):
        if self.asking is not None:         # answered (or handed over) when the peers have
            self.eof = True
            return True
        if self.buffer and self.transport is not None:   # a request without its end: aiohttp answers it
            inner = self._hand_over()
            return inner.eof_received()
        return False

    def connection_lost(self, exc) -> None:
        self._disarm()
        self.config.connections.discard(self)
        self.transport = None

    def pause_writing(self) -> None:
        self.writing_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.transport is not None and not self.transport.is_closing() and not self.held:
            self.transport.resume_reading()
            if self.asking is None:
                self._serve_buffered()

    def close(self) -> None:
        if self.asking is not None:
            self.asking.cancel()
        if self.transport is not None:
            self.transport.close()

    # -- requests ---------------------------------------------------------------------------------------------------
    def _serve_buffered(self) -> None:
        """Answer every complete head in the buffer that is a hit; hand the connection over at the first that
        is not (or at a head too long). The buffer is cut once, after the loop (pipelined heads cost no copies)."""
        buffer, start = self.buffer, 0
        while start < len(buffer) and not self.writing_paused and self.transport is not None:
            end = buffer.find(b"\r\n\r\n", max(start, self.scanned - 3))
            if end < 0:
                self.buffer = buffer = buffer[start:] if start else buffer
                self._flush()
                if len(buffer) > MAX_HEAD_BYTES or b"\n\n" in buffer or b"\n\r\n" in buffer:
                    self._hand_over()   # too long, or bare LF line ends: aiohttp's parser and limits decide
                else:
                    self.scanned = len(buffer)
                return
            answer = self._answer(buffer[start:end + 4])
            if answer is not True:
                self.buffer = buffer[start:]
                self._flush()
                if answer is False:
                    self._hand_over()
                else:   # a miss the proxy takes to its peers: this connection waits for it
                    self.head_deadline = self.idle_deadline = None
                    self._take_miss(answer)
                return
            start = end + 4
            self.scanned = 0
            if self.out_bytes > MAX_BATCHED_BYTES:
                self._flush()
        self._flush()
        self.buffer = buffer[start:] if start else buffer
        if not self.buffer and self.transport is not None:
            self.head_deadline = None
            self.idle_deadline = self.loop.time() + self.config.idle_timeout

    def _flush(self) -> None:
        """Send the answers batched by :meth:`_answer` (pipelined requests, e.g. a peer's queries: one write)."""
        if self.out:
            self.transport.writelines(self.out)
            self.out = []
            self.out_bytes = 0

    def _answer(self, head_bytes: bytes):
        """Answer one request head if it is a fresh hit (True, the answer batched in ``out``); a :class:`_Miss`
        when it is a plain miss the proxy's ``lean_miss`` may take; False (nothing sent) otherwise."""
        started = time.perf_counter()
        plain = plain_get(head_bytes)
        if plain is None:            # not a plain GET http://...: aiohttp's
            return False
        url, cache_control, via, authorization = plain
        config = self.config
        peer_query = False
        may_hit = True          # False: a request that the aiohttp path answers if a copy is stored
        if cache_control is not None:
            kind = _cache_control_kind(cache_control)
            if kind == "peer query":
                peer_query = True
            elif kind == "aiohttp" or config.lean_miss is None:
                return False
            else:
                may_hit = False
        if not self.allowed and not (peer_query and config.peer_address is not None
                                     and config.peer_address(self.client)):
            return False            # only a configured peer's queries, from a client not allowed (as aiohttp's path)
        if via is not None and (config.own_url.encode() in via or f"bloomwise-{config.own_port}".encode() in via):
            return False
        target = url.decode("ascii")
        key = request_key("GET", target)
        node = config.node
        doc = node.cache.peek(key)
        if doc is None:
            if peer_query and config.not_cached is not None and config.serves_target(target):
                return self._not_cached(key, target, started, stale=False)
            if peer_query or config.lean_miss is None or not config.serves_target(target):
                return False
            return _Miss(target, key, storing_headers(cache_control, authorization), len(head_bytes))
        if not may_hit:
            return False
        now = time.time()
        prepared = config.prepared_hit(key, doc)
        if prepared is None or now < prepared.stored_at:
            return False
        age = (now - prepared.stored_at) + prepared.stored_age
        if age >= prepared.lifetime:
            if peer_query and config.not_cached is not None and config.drop is not None:
                return self._not_cached(key, target, started, stale=True)
            return False            # stale: the aiohttp path drops it and fetches again
        config.counters["requests_total"] += 1
        config.counters["fast_hits"] += 1
        if peer_query:
            node.serve_peer_query(key)
        else:
            node.lookup(key)
        hp = prepared.head_parts
        self.out += (hp[0], str(int(prepared.lifetime - age)).encode(), hp[1], str(int(age)).encode(), hp[2],
                     config.http_date(now) if prepared.dated else b"", hp[3], prepared.body)
        self.out_bytes += len(prepared.body) + 512
        elapsed = time.perf_counter() - started
        config.metrics.observe_request("hit", elapsed)
        if config.log_access is not None:
            config.log_access(now, elapsed, self.client, "TCP_HIT", 200, len(prepared.body), "GET",
                              target, "HIER_NONE/-", prepared.content_type)
        return True

    def _not_cached(self, key: str, target: str, started: float, *, stale: bool) -> bool:
        """A peer query for a document not stored here (or ``stale``: dropped first): the aiohttp path's 504,
        counted and logged as it does (batched in ``out``)."""
        config = self.config
        config.counters["requests_total"] += 1
        config.counters["fast_peer_misses"] += 1
        config.node.serve_peer_query(key)
        if stale:
            config.drop(key)
        before, after, body = config.not_cached_parts()
        now = time.time()
        self.out += (before, config.http_date(now), after, body)
        self.out_bytes += len(body) + 512
        elapsed = time.perf_counter() - started
        config.metrics.observe_request("miss", elapsed)
        if config.log_access is not None:
            config.log_access(now, elapsed, self.client, "TCP_MISS", 504, len(body), "GET", target, "HIER_NONE/-",
                              "text/plain")
        return True

    def _take_miss(self, miss: _Miss) -> None:
        """The proxy takes ``miss`` to its peers: without a task when it can (``lean_miss_now``), else in one."""
        lean_miss_now = self.config.lean_miss_now
        asking = None
        if lean_miss_now is not None:
            asking = lean_miss_now(miss.target, miss.key, miss.headers, lambda outcome: self._asked(miss, outcome))
        self.asking = asking if asking is not None else self.loop.create_task(self._ask_peers(miss))

    async def _ask_peers(self, miss: _Miss) -> None:
        try:
            outcome = await self.config.lean_miss(miss.target, miss.key, miss.headers)
        except asyncio.CancelledError:
            self.asking = None
            raise
        except Exception as exc:  # a bug: answered with a 500 (_asked)
            outcome = exc
        self._asked(miss, outcome)

    def _asked(self, miss: _Miss, outcome) -> None:
        """The proxy's outcome of ``miss`` (``lean_miss``): its remote hit sent from here, or the connection handed
        over (untouched, or with the peers' outcome for the aiohttp path to finish); an exception (a bug) is
        logged, and the client gets a 500 and the connection closes."""
        config = self.config
        self.asking = None
        if isinstance(outcome, Exception):
            log.error("error asking the peers for %s", miss.target[:200], exc_info=outcome)
            if self.transport is not None:
                self.transport.write(b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n"
                                     b"Content-Length: 0\r\n\r\n")
                self.transport.close()
            return
        transport = self.transport
        if outcome is None:                  # not taken: aiohttp answers it from the start
            if transport is not None:
                self._hand_over()
            return
        if isinstance(outcome, PeersAsked):  # the peers' outcome, for aiohttp to finish
            if transport is None:
                config.counters["requests_total"] += 1
                outcome.end()
            else:
                self._hand_over(outcome)
            return
        config.counters["requests_total"] += 1
        if outcome.outcome == "remote_hit":
            config.counters["fast_remote_hits"] += 1
        if transport is None:
            return
        now = time.time()
        head = outcome.head
        if head is None:
            head = response_head(outcome.status, outcome.headers, len(outcome.body), config.http_date(now))
        transport.writelines((head, outcome.body))
        elapsed = time.perf_counter() - outcome.received
        config.metrics.observe_request(outcome.outcome, elapsed)
        if config.log_access is not None:
            content_type = next((v for k, v in outcome.headers.items() if k.lower() == "content-type"),
                                "-" if not outcome.body else "application/octet-stream")
            config.log_access(now - elapsed, elapsed, self.client, outcome.code, outcome.status, len(outcome.body),
                              "GET", miss.target, outcome.hierarchy, content_type.split(";", 1)[0].strip() or "-")
        self.buffer = self.buffer[miss.head_length:]
        self.scanned = 0
        if self.held:
            self.held = False
            if not self.writing_paused:
                transport.resume_reading()
        if self.buffer:
            self.head_deadline = self.loop.time() + config.header_timeout
            self._arm(self.head_deadline)
            self._serve_buffered()
        else:
            self.idle_deadline = self.loop.time() + config.idle_timeout
            self._arm(self.idle_deadline)
        if self.eof and self.transport is not None:   # the client said it sends no more
            if self.buffer:
                self._hand_over()
            else:
                self.transport.close()

    def _hand_over(self, peers_asked=None):
        """From now on aiohttp's protocol owns the connection; it gets the bytes not answered here (and
        ``peers_asked``, the peers' outcome for its first request, before them)."""
        transport, data = self.transport, self.buffer
        self._disarm()
        self.config.connections.discard(self)
        self.buffer, self.transport = b"", None
        inner = self.config.handed_over()
        if peers_asked is not None:
            inner.resume_miss(peers_asked)
        transport.set_protocol(inner)
        inner.connection_made(transport)
        if self.writing_paused:
            inner.pause_writing()
            transport.resume_reading()
        elif self.held:
            transport.resume_reading()
        if data:
            inner.data_received(data)
        if self.eof:
            inner.eof_received()
        return inner

    # -- deadlines: one timer per connection, re-armed only when it fires early ---------------------------------
    def _arm(self, when: float) -> None:
        """The timer fires at ``when`` or earlier (an earlier timer stays: it re-arms when it fires)."""
        if self.timer is not None:
            if self.timer.when() <= when:
                return
            self.timer.cancel()
        self.timer = self.loop.call_at(when, self._deadline_reached)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _deadline_reached(self) -> None:
        self.timer = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        now = self.loop.time()
        if self.writing_paused:   # complete heads wait for the client to read the answers: no head is late
            self.head_deadline = now + self.config.header_timeout if self.head_deadline is not None else None
            self._arm(now + self.config.header_timeout)
            return
        if self.head_deadline is not None:
            if now >= self.head_deadline:   # as HeaderDeadline in server.py: 408 and close
                self.config.on_header_timeout(transport)
                transport.write(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                transport.close()
                return
            self._arm(self.head_deadline)
        elif self.idle_deadline is not None:
            if now >= self.idle_deadline:
                transport.close()
                return
            self._arm(self.idle_deadline)
