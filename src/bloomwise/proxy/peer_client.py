"""Peer queries over kept-alive connections: a small HTTP/1.1 client for one request shape.

A remote hit costs the asking proxy one peer query: ``GET http://origin/path HTTP/1.1`` sent to the peer as to a
proxy, with ``Cache-Control: only-if-cached``. aiohttp's client spends more Python per request than the peer spends
answering it (proxy handling, request and response objects, timeouts). :class:`PeerConnections` keeps up to
``max_idle`` open connections to one peer and reuses them; a response is parsed with httptools (``Content-Length``,
chunked or close-delimited bodies), bounded by ``max_body`` bytes. Any failure (refused connection, garbage, a body
over the bound, a time-out) raises :class:`PeerQueryError` and the connection is dropped. A reused connection that
the peer closed while idle (nothing read back) is retried once on a new one.
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
_timeout = getattr(asyncio, "timeout", None)  # Python 3.11+
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


class PeerConnections:
    """Kept-alive connections to one peer (``http://host:port``) for its queries."""

    def __init__(self, peer_url: str, *, max_idle: int = 32):
        parts = urlsplit(peer_url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.max_idle = max_idle
        self.idle: list = []         # (reader, writer) pairs ready for a request
        self.opened = 0              # connections opened, over the pool's life (the tests read it)

    async def query(self, url: str, headers: dict, *, timeout: float, max_body: int):
        """``GET url`` through the peer: (status, headers, body). PeerQueryError (or OSError) on failure,
        asyncio.TimeoutError after ``timeout`` seconds."""
        if _timeout is None:
            return await asyncio.wait_for(self._query(url, headers, max_body), timeout)
        async with _timeout(timeout):  # no task of its own, unlike wait_for
            return await self._query(url, headers, max_body)

    async def _query(self, url: str, headers: dict, max_body: int):
        host = urlsplit(url).netloc
        request = (f"GET {url} HTTP/1.1\r\nHost: {host}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                   + "\r\n").encode("latin-1")
        while self.idle:
            reader, writer = self.idle.pop()
            if writer.is_closing() or reader.at_eof():
                writer.close()
                continue
            try:
                return await self._exchange(reader, writer, request, max_body)
            except _ClosedWhileIdle:
                continue   # the peer closed it meanwhile: another, or a new one
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self.opened += 1
        try:
            return await self._exchange(reader, writer, request, max_body)
        except _ClosedWhileIdle as exc:
            raise PeerQueryError("the peer closed the connection without answering") from exc

    async def _exchange(self, reader, writer, request: bytes, max_body: int):
        response = _Response(max_body)
        parser = response.parser = httptools.HttpResponseParser(response)
        received = 0
        try:
            writer.write(request)
            while not response.complete:
                data = await reader.read(65536)
                if not data:
                    if received == 0:
                        raise _ClosedWhileIdle()
                    if not response.delimited_by_close:  # (None: the headers were not complete)
                        raise PeerQueryError("the peer closed the connection mid-response")
                    response.keep_alive = False   # a body delimited by the connection's end, now complete
                    break
                received += len(data)
                parser.feed_data(data)
        except httptools.HttpParserError as exc:
            writer.close()
            if response.error is not None:
                raise response.error from None
            raise PeerQueryError(f"not an HTTP response: {exc}") from exc
        except BaseException:
            writer.close()
            raise
        if response.keep_alive and len(self.idle) < self.max_idle and not reader.at_eof():
            self.idle.append((reader, writer))
        else:
            writer.close()
        return parser.get_status_code(), response.headers, b"".join(response.body)

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


class _ClosedWhileIdle(Exception):
    """A reused connection gave nothing back: the peer closed it while it was idle."""
