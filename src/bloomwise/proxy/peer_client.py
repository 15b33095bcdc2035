"""Peer queries over kept-alive, pipelined connections: a small HTTP/1.1 client for one request shape.

A remote hit costs the asking proxy one peer query: ``GET http://origin/path HTTP/1.1`` sent to the peer as to a
proxy, with ``Cache-Control: only-if-cached``. aiohttp's client spends more Python per request than the peer spends
answering it (proxy handling, request and response objects, timeouts), and one connection per query in flight
costs a send and a receive per query on each side. :class:`PeerConnections` instead *pipelines* the queries to
one peer (RFC 9112 section 9.3.2: responses come back in the order of the requests): up to
:data:`MAX_PIPELINED` queries in flight per connection, on up to ``max_connections`` connections. The queries
made in one turn of the event loop leave in one write per connection, and the peer, reading them at once,
answers them in one write too (the lean hit path batches its answers), so at concurrency C the two proxies
exchange about one segment each way per turn instead of C.

Responses are parsed with httptools as their bytes arrive (an ``asyncio.Protocol`` per connection, no stream
buffers; ``Content-Length``, chunked or close-delimited bodies), each bounded by ``max_body`` bytes. Failures are
:class:`PeerQueryError` (refused connection, garbage, a body over the bound, a peer closing mid-response) or
``asyncio.TimeoutError`` (the query alone: the answers behind its own would wait for it, so its connection is
dropped too, with one loop timer per connection); a failed connection is dropped. A query behind the failed one,
of which nothing came back
(or every query on a connection the peer closed while it was idle), is sent once more on another connection: a
``GET`` with ``only-if-cached`` is safe to repeat. The queries behind a response that says ``Connection: close``
(a peer's limit of requests per connection) go to another connection, however often that happens: each such close
answered one of them.
"""
from __future__ import annotations

import asyncio
from collections import deque
from urllib.parse import urlsplit

from bloomwise.proxy.http_cache import joined_fields

try:
    import httptools
except ImportError:  # the proxy extra installs it; without, peer queries go through aiohttp
    httptools = None

__all__ = ["AVAILABLE", "PeerConnections", "PeerQueryError", "MAX_PIPELINED", "get_request"]

AVAILABLE = httptools is not None
#: bytes of response head (status line and headers) accepted at most
MAX_HEAD_BYTES = 65536
#: queries in flight on one connection before another connection is opened
MAX_PIPELINED = 32


class PeerQueryError(OSError):
    """A peer query that did not get a complete HTTP response."""


class _Query:
    """One query in flight: its request bytes, its response as parsed (status, the header lines as received, then
    the headers as :func:`~bloomwise.proxy.http_cache.joined_fields` joins them, body pieces) and the future its
    caller awaits."""

    __slots__ = ("request", "max_body", "waiter", "deadline", "retried", "status", "fields", "headers", "body",
                 "size", "head_size", "started", "keep_alive", "delimited_by_close")

    def __init__(self, request: bytes, max_body: int, waiter, deadline: float):
        self.request, self.max_body, self.waiter, self.deadline = request, max_body, waiter, deadline
        self.retried = False
        self.reset()

    def reset(self) -> None:
        self.status, self.fields, self.headers, self.body, self.size, self.head_size = 0, [], {}, [], 0, 0
        self.started = False                 # a byte of its response arrived
        self.keep_alive = self.delimited_by_close = None   # known when its headers are complete

    def finish(self, error) -> None:
        waiter = self.waiter
        if not waiter.done():
            if error is None:
                waiter.set_result((self.status, self.headers, b"".join(self.body)))
            else:
                waiter.set_exception(error)


class _PeerConnection(asyncio.Protocol):
    """One connection to a peer: queries written in order (one write per loop turn), responses parsed in order.
    ``pending[0]`` is the query whose response is being received. The httptools parser's callbacks are this
    object's ``on_*`` methods; they fill ``pending[0]``."""

    def __init__(self, pool: "PeerConnections"):
        self.pool = pool
        self.loop = pool.loop
        self.transport = None
        self.closed = False          # ended, failed, or the peer said it closes: takes no more queries
        self.ended = False
        self.connecting = None       # the task opening the connection, until it is open
        self.timer = None            # fires at the earliest deadline of the queries in flight (or earlier)
        self.pending: deque = deque()
        self.unsent: list = []
        self.flush_scheduled = False
        self.error = None            # what a callback raised (httptools reports it as a parser error)
        self.parser = httptools.HttpResponseParser(self)

    # -- queries --------------------------------------------------------------------------------------------------
    def submit(self, query: _Query) -> None:
        self.pending.append(query)
        self.unsent.append(query.request)
        if self.timer is None or query.deadline < self.timer.when():
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(query.deadline, self._check_deadlines)
        if not self.flush_scheduled and self.transport is not None:
            self.flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        if self.unsent and not self.closed and self.transport is not None:
            data = b"".join(self.unsent) if len(self.unsent) > 1 else self.unsent[0]
            self.unsent.clear()
            self.transport.write(data)

    def _check_deadlines(self) -> None:
        """Queries past their deadline fail (asyncio.TimeoutError) and the connection is dropped: the answers behind
        theirs would wait for them; the others it held are sent again. Else the timer waits for the next deadline
        (one timer per connection, not one per query: under load it fires about once per time-out)."""
        self.timer = None
        now = self.loop.time()
        waiting = [query for query in self.pending if not query.waiter.done()]
        late = [query for query in waiting if query.deadline <= now + 0.001]   # (a timer may fire a little early)
        if late:
            for query in late:
                query.finish(asyncio.TimeoutError())
            self.end(self.pool.resend)
        elif waiting:
            self.timer = self.loop.call_at(min(query.deadline for query in waiting), self._check_deadlines)

    def takes_more(self) -> bool:
        return not self.closed and len(self.pending) < MAX_PIPELINED

    # -- asyncio.Protocol -----------------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.connecting = None
        if self.closed:              # closed while connecting
            transport.close()
        else:
            self.flush()

    def data_received(self, data: bytes) -> None:
        if self.ended:
            return
        if not self.pending:         # bytes no query asked for: the connection cannot be trusted
            self.fail(PeerQueryError("the peer sent bytes no query asked for"))
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(self.error or PeerQueryError(f"not an HTTP response: {exc}"))

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc) -> None:
        self._ended()

    # -- httptools callbacks (for pending[0]) ---------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if not self.pending:
            self.error = PeerQueryError("the peer sent a response no query asked for")
            raise self.error
        self.pending[0].started = True

    def on_header(self, name: bytes, value: bytes) -> None:
        query = self.pending[0]
        query.head_size += len(name) + len(value)
        if query.head_size > MAX_HEAD_BYTES:
            self.error = PeerQueryError(f"response headers over {MAX_HEAD_BYTES} bytes")
            raise self.error
        query.fields.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        query = self.pending[0]
        query.status = self.parser.get_status_code()
        query.keep_alive = self.parser.should_keep_alive()
        query.headers = joined_fields(query.fields)
        names = {name.lower() for name in query.headers}
        query.delimited_by_close = "content-length" not in names and "transfer-encoding" not in names

    def on_body(self, chunk: bytes) -> None:
        query = self.pending[0]
        query.size += len(chunk)
        if query.size > query.max_body:
            self.error = PeerQueryError(f"body over the limit of {query.max_body} bytes")
            raise self.error
        query.body.append(chunk)

    def on_message_complete(self) -> None:
        query = self.pending.popleft()
        if not query.keep_alive:
            self.closed = True       # the queries behind it go to another connection
        query.finish(None)
        if self.closed:              # an orderly close: the queries behind it were not refused, only not read
            self.end(self.pool.requeue)

    # -- ends -----------------------------------------------------------------------------------------------------
    def _ended(self) -> None:
        """The peer closed the connection: a close-delimited body is complete; any other partial response failed;
        the queries of which nothing came back are sent again (a connection closed while idle)."""
        if self.pending:
            query = self.pending[0]
            if query.started:
                self.pending.popleft()
                if query.delimited_by_close:
                    query.finish(None)
                else:
                    query.finish(PeerQueryError("the peer closed the connection mid-response"))
        self.end(self.pool.resend)

    def fail(self, error: BaseException) -> None:
        """``pending[0]`` failed with ``error``; the connection is dropped, the queries behind it sent again."""
        if self.pending:
            self.pending.popleft().finish(error)
        self.end(self.pool.resend)

    def end(self, resend) -> None:
        """Drop the connection; ``resend(query)`` for every query still pending on it."""
        if self.ended:
            return
        self.ended = self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.pool.forget(self)
        pending, self.pending = list(self.pending), deque()
        self.unsent.clear()
        if self.transport is not None:
            self.transport.abort()
        elif self.connecting is not None and self.connecting is not asyncio.current_task():
            self.connecting.cancel()     # still connecting (a time-out, or the pool closed): no more wait
        for query in pending:
            resend(query)

    def abort(self) -> None:
        self.end(lambda query: query.finish(PeerQueryError("the connection to the peer was closed")))


def get_request(url: str, netloc: str, fields: str) -> bytes:
    """The bytes of ``GET url`` sent to a proxy: ``Host: netloc`` (the URL's authority), then ``fields`` (header
    lines, each ending in CRLF)."""
    return f"GET {url} HTTP/1.1\r\nHost: {netloc}\r\n{fields}\r\n".encode("latin-1")


class PeerConnections:
    """Pipelined kept-alive connections to one peer (``http://host:port``) for its queries."""

    def __init__(self, peer_url: str, *, max_connections: int = 8):
        parts = urlsplit(peer_url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.max_connections = max_connections
        self.connections: list = []  # _PeerConnections open or opening, taking queries
        self.opened = 0              # connections opened, over the pool's life (the tests read it)
        self.loop = None

    async def query(self, url: str, headers: dict, *, timeout: float, max_body: int):
        """``GET url`` through the peer: (status, headers, body). PeerQueryError (or OSError) on failure,
        asyncio.TimeoutError after ``timeout`` seconds."""
        fields = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return await self.send(get_request(url, urlsplit(url).netloc, fields), timeout=timeout, max_body=max_body)

    async def send(self, request: bytes, *, timeout: float, max_body: int):
        """:meth:`query` with the request's bytes made already (:func:`get_request`)."""
        loop = self.loop = asyncio.get_running_loop()
        query = _Query(request, max_body, loop.create_future(), loop.time() + timeout)
        self._send(query)
        return await query.waiter    # cancelled: its answer, in the pipeline, is read and dropped

    def _send(self, query: _Query) -> None:
        for connection in self.connections:
            if connection.takes_more():
                connection.submit(query)
                return
        if len(self.connections) < self.max_connections or not self.connections:
            connection = _PeerConnection(self)
            self.connections.append(connection)
            connection.submit(query)
            connection.connecting = self.loop.create_task(self._connect(connection))
        else:   # every connection holds MAX_PIPELINED queries: the least busy takes one more
            min(self.connections, key=lambda c: len(c.pending)).submit(query)

    async def _connect(self, connection: _PeerConnection) -> None:
        self.opened += 1
        try:
            await self.loop.create_connection(lambda: connection, self.host, self.port)
        except asyncio.CancelledError:
            pass
        except OSError as exc:
            error = PeerQueryError(f"cannot connect to the peer: {exc}")
            connection.end(lambda query: query.finish(error))

    def requeue(self, query: _Query) -> None:
        """A query behind a response that closed its connection (``Connection: close``): sent on another."""
        if not query.waiter.done():
            query.reset()
            self._send(query)

    def resend(self, query: _Query) -> None:
        """A query of which nothing came back before its connection ended: sent once more, then a failure."""
        if query.waiter.done():
            return
        if query.retried:
            query.finish(PeerQueryError("the peer closed the connection without answering"))
            return
        query.retried = True
        query.reset()
        self._send(query)

    def forget(self, connection: _PeerConnection) -> None:
        if connection in self.connections:
            self.connections.remove(connection)

    def close(self) -> None:
        for connection in list(self.connections):
            connection.abort()
        self.connections.clear()
