"""Peer queries over kept-alive connections: a small HTTP/1.1 client for one request shape.

A remote hit costs the asking proxy one peer query: ``GET http://origin/path HTTP/1.1`` sent to the peer as to a
proxy, with ``Cache-Control: only-if-cached``. aiohttp's client spends more Python per request than the peer spends
answering it (proxy handling, request and response objects, timeouts). :class:`PeerConnections` keeps up to
``max_idle`` open connections to one peer and reuses them; a response is parsed with httptools as its bytes arrive
(an ``asyncio.Protocol`` per connection, no stream buffers; ``Content-Length``, chunked or close-delimited bodies),
bounded by ``max_body`` bytes. Any failure (refused connection, garbage, a body over the bound, a time-out) raises
:class:`PeerQueryError` and the connection is dropped. A reused connection that the peer closed while idle (nothing
read back) is retried once on a new one.
"""
from __future__ import annotations

import asyncio
from typing import Optional
from urllib.parse import urlsplit

try:
    import httptools
except ImportError:  # the proxy extra installs it; without, peer queries go through aiohttp
    httptools = None

__all__ = ["AVAILABLE", "PeerConnections", "PeerQueryError"]

AVAILABLE = httptools is not None
#: bytes of response head (status line and headers) accepted at most
MAX_HEAD_BYTES = 65536


class PeerQueryError(OSError):
    """A peer query that did not get a complete HTTP response."""


class _Response:
    """httptools callbacks: the status, headers (the first of each name, as sent) and body of one response."""

    __slots__ = ("headers", "names", "body", "size", "head_size", "complete", "max_body", "parser", "keep_alive",
                 "delimited_by_close", "error")

    def __init__(self, max_body: int):
        self.headers, self.names, self.body, self.size, self.head_size = {}, set(), [], 0, 0
        self.complete, self.max_body, self.parser = False, max_body, None
        self.keep_alive = self.delimited_by_close = None   # known when the headers are complete
        self.error = None            # what a callback raised (httptools reports it as a parser error)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_size += len(name) + len(value)
        if self.head_size > MAX_HEAD_BYTES:
            self.error = PeerQueryError(f"response headers over {MAX_HEAD_BYTES} bytes")
            raise self.error
        lower = name.lower()
        if lower not in self.names:
            self.names.add(lower)
            self.headers[name.decode("latin-1")] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        self.delimited_by_close = b"content-length" not in self.names and b"transfer-encoding" not in self.names

    def on_body(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_body:
            self.error = PeerQueryError(f"body over the limit of {self.max_body} bytes")
            raise self.error
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        self.complete = True


class _PeerConnection(asyncio.Protocol):
    """One kept-alive connection to a peer, one query at a time: the response's bytes go straight into its
    httptools parser (no stream buffer), and :meth:`send`'s future ends when the response is complete, failed, or
    the connection ended (a :class:`_ClosedWhileIdle` when nothing came back)."""

    def __init__(self):
        self.transport = None
        self.closed = False
        self.response: Optional[_Response] = None
        self.parser = None
        self.waiter = None          # the future of the query in progress
        self.received = 0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def usable(self) -> bool:
        return not self.closed and not self.transport.is_closing()

    def send(self, request: bytes, response: _Response, waiter) -> None:
        self.response, self.waiter, self.received = response, waiter, 0
        self.parser = response.parser = httptools.HttpResponseParser(response)
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:     # bytes no query asked for: the connection cannot be trusted
            self.abort()
            return
        self.received += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._finish(self.response.error or PeerQueryError(f"not an HTTP response: {exc}"))
            self.abort()
            return
        if self.response.complete:
            self._finish(None)

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc) -> None:
        self._ended()

    def _ended(self) -> None:
        self.closed = True
        if self.waiter is None:
            return
        response = self.response
        if self.received == 0:
            self._finish(_ClosedWhileIdle())
        elif not response.delimited_by_close:   # (None: the headers were not complete)
            self._finish(PeerQueryError("the peer closed the connection mid-response"))
        else:
            response.keep_alive = False   # a body delimited by the connection's end, now complete
            self._finish(None)

    def _finish(self, error) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)

    def abort(self) -> None:
        self.closed = True
        self.waiter = None
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _expire(waiter) -> None:
    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError())


class PeerConnections:
    """Kept-alive connections to one peer (``http://host:port``) for its queries."""

    def __init__(self, peer_url: str, *, max_idle: int = 256):
        parts = urlsplit(peer_url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.max_idle = max_idle
        self.idle: list = []         # _PeerConnections ready for a request
        self.opened = 0              # connections opened, over the pool's life (the tests read it)

    async def query(self, url: str, headers: dict, *, timeout: float, max_body: int):
        """``GET url`` through the peer: (status, headers, body). PeerQueryError (or OSError) on failure,
        asyncio.TimeoutError after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        host = urlsplit(url).netloc
        request = (f"GET {url} HTTP/1.1\r\nHost: {host}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                   + "\r\n").encode("latin-1")
        while self.idle:
            connection = self.idle.pop()
            if not connection.usable():
                connection.close()
                continue
            try:
                return await self._exchange(loop, connection, request, max_body, deadline)
            except _ClosedWhileIdle:
                continue   # the peer closed it meanwhile: another, or a new one
        _, connection = await asyncio.wait_for(loop.create_connection(_PeerConnection, self.host, self.port),
                                               max(0.0, deadline - loop.time()))
        self.opened += 1
        try:
            return await self._exchange(loop, connection, request, max_body, deadline)
        except _ClosedWhileIdle as exc:
            raise PeerQueryError("the peer closed the connection without answering") from exc

    async def _exchange(self, loop, connection: _PeerConnection, request: bytes, max_body: int, deadline: float):
        response = _Response(max_body)
        waiter = loop.create_future()
        connection.send(request, response, waiter)
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            await waiter
        except BaseException:      # failed, timed out or cancelled: the connection is not reused
            connection.abort()
            raise
        finally:
            timer.cancel()
        if response.keep_alive and connection.usable() and len(self.idle) < self.max_idle:
            self.idle.append(connection)
        else:
            connection.close()
        return response.parser.get_status_code(), response.headers, b"".join(response.body)

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()


class _ClosedWhileIdle(Exception):
    """A reused connection gave nothing back: the peer closed it while it was idle."""
