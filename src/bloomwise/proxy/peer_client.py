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

Responses are read as their bytes arrive (an ``asyncio.Protocol`` per connection, no stream buffers) by the
compiled :class:`~bloomwise._native.http1.ResponseReader`: one call per response (``Content-Length``, chunked or
close-delimited bodies), each body bounded by ``max_body`` bytes. Failures are
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

from bloomwise._native.http1 import ResponseError, ResponseReader

__all__ = ["PeerConnections", "PeerQueryError", "MAX_PIPELINED", "get_request"]

#: bytes of response head (status line and headers) accepted at most
MAX_HEAD_BYTES = 65536
#: queries in flight on one connection before another connection is opened
MAX_PIPELINED = 32


class PeerQueryError(OSError):
    """A peer query that did not get a complete HTTP response."""


class _Query:
    """One query in flight: its request bytes, the bound of its body, the future its caller awaits (its result:
    ``(status, headers, body, head)``, as :meth:`PeerConnections.submit` says) and its deadline."""

    __slots__ = ("request", "max_body", "waiter", "deadline", "retried")

    def __init__(self, request: bytes, max_body: int, waiter, deadline: float):
        self.request, self.max_body, self.waiter, self.deadline = request, max_body, waiter, deadline
        self.retried = False

    def finish(self, error, response=None) -> None:
        waiter = self.waiter
        if not waiter.done():
            if error is None:
                waiter.set_result(response)
            else:
                waiter.set_exception(error)


class _PeerConnection(asyncio.Protocol):
    """One connection to a peer: queries written in order (one write per loop turn), responses read in order.
    ``pending[0]`` is the query whose response is being received."""

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
        self.reader = ResponseReader(MAX_HEAD_BYTES)

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
        pending, reader = self.pending, self.reader
        if not pending:              # bytes no query asked for: the connection cannot be trusted
            self.fail(PeerQueryError("the peer sent bytes no query asked for"))
            return
        reader.feed(data)
        try:
            while pending:
                response = reader.next(pending[0].max_body)
                if response is None:
                    return
                pending.popleft().finish(None, self._reply(response))
                if not response[3]:      # Connection: close: the queries behind it go to another connection
                    self.closed = True
                    self.end(self.pool.requeue)
                    return
        except ResponseError as exc:
            self.fail(PeerQueryError(f"not an HTTP response: {exc}"))
            return
        if reader.buffered:
            self.fail(PeerQueryError("the peer sent a response no query asked for"))

    def _reply(self, response: tuple) -> tuple:
        """A response the reader gave, as :meth:`PeerConnections.submit` gives it: (status, headers, body, head)."""
        return response[0], response[1], response[2], self.reader.head

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc) -> None:
        self._ended()

    # -- ends -----------------------------------------------------------------------------------------------------
    def _ended(self) -> None:
        """The peer closed the connection: a close-delimited body is complete; any other partial response failed;
        the queries of which nothing came back are sent again (a connection closed while idle)."""
        if self.pending and not self.ended:
            query = self.pending[0]
            try:
                response = self.reader.at_close(query.max_body)
            except ResponseError as exc:
                self.pending.popleft().finish(PeerQueryError(str(exc)))
            else:
                if response is not None:
                    self.pending.popleft().finish(None, self._reply(response))
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
        return (await self.submit(request, timeout=timeout, max_body=max_body))[:3]

    def submit(self, request: bytes, *, timeout: float, max_body: int) -> asyncio.Future:
        """Send ``request`` (made by :func:`get_request`): the future of its ``(status, headers, body, head)``,
        failed as :meth:`query` fails. ``head`` is the bytes of the response's head when its reader remembers it
        (``ResponseReader.head``: equal heads, equal status and headers), else None. Cancelled: its answer, in the
        pipeline, is read and dropped."""
        loop = self.loop
        if loop is None:
            loop = self.loop = asyncio.get_running_loop()
        query = _Query(request, max_body, loop.create_future(), loop.time() + timeout)
        self._send(query)
        return query.waiter

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
            self._send(query)

    def resend(self, query: _Query) -> None:
        """A query of which nothing came back before its connection ended: sent once more, then a failure."""
        if query.waiter.done():
            return
        if query.retried:
            query.finish(PeerQueryError("the peer closed the connection without answering"))
            return
        query.retried = True
        self._send(query)

    def forget(self, connection: _PeerConnection) -> None:
        if connection in self.connections:
            self.connections.remove(connection)

    def close(self) -> None:
        for connection in list(self.connections):
            connection.abort()
        self.connections.clear()
