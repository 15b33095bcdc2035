"""Helpers for the network proxy tests: run a coroutine with a time-out, poll a condition, fetch through a proxy,
and peers that misbehave (slow, garbage, bad summaries). Everything binds 127.0.0.1 port 0."""
import asyncio
import contextlib
import re
import time

import pytest

aiohttp = pytest.importorskip("aiohttp", reason="the proxy tests need aiohttp (the proxy extra)")
from aiohttp import web  # noqa: E402

from bloomwise.proxy.access import DestinationPolicy  # noqa: E402
from bloomwise.proxy.origin import OriginServer, document_body  # noqa: E402
from bloomwise.proxy.server import BloomwiseProxy, ProxyConfig  # noqa: E402

MEAN_SIZE = 1500


def run(coro, timeout=90):
    """Run a test coroutine on a fresh event loop, failing (not hanging) after ``timeout`` seconds."""
    async def bounded():
        task = asyncio.ensure_future(coro)
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=10)
            raise AssertionError(f"the test scenario did not finish within {timeout} s")
        return task.result()

    return asyncio.run(bounded())


async def eventually(condition, timeout=15.0, interval=0.05, what="condition"):
    """Poll ``condition()`` (sync or async) until true, at most ``timeout`` seconds (a bounded loop)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


async def summary_settled(publisher, receiver, timeout=15.0):
    """Wait until ``publisher`` has published every change that made its summary due (no deferred publication)
    and ``receiver`` holds that version: then the receiver's copy is exactly the publisher's summary. (A key found
    in the receiver's copy proves nothing: a summary sized for a few documents has false positives.)"""
    def settled():
        held = receiver.node.peer(publisher.url).summary
        return (not publisher.publication_scheduled and held is not None
                and held.version == publisher.node.publisher.current_version)

    await eventually(settled, timeout=timeout, what=f"{publisher.name}'s last summary at {receiver.name}")


def config(**kw):
    """A ProxyConfig for tests: small, fast timers, and fetching from 127.0.0.1 only (the test origins)."""
    base = dict(cache_size=4 * 2**20, summary_interval=0.3, peer_timeout=1.0, retry_after=0.3, max_retry_after=1.0,
                mean_document_size=MEAN_SIZE, destinations=DestinationPolicy.parse("127.0.0.1"))
    base.update(kw)
    return ProxyConfig(**base)


@contextlib.asynccontextmanager
async def scripted_origin(reply):
    """An origin on 127.0.0.1 that answers each request with ``reply(head)`` (its request head, bytes), on kept-alive
    connections until the client ends them: its base URL (``http://127.0.0.1:PORT``)."""
    async def serve(reader, writer):
        try:
            while True:
                writer.write(reply(await reader.readuntil(b"\r\n\r\n")))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def get(session, proxy_url, url, **kw):
    """GET ``url`` through ``proxy_url``: (status, headers, body)."""
    async with session.get(url, proxy=proxy_url, **kw) as reply:
        return reply.status, reply.headers, await reply.read()


async def get_checked(session, proxy_url, origin, path):
    """GET origin+path through a proxy and check the body is exactly the origin's document."""
    status, headers, body = await get(session, proxy_url, origin.url + path)
    assert status == 200, (path, status, body[:200])
    assert body == document_body(path, origin.mean_size), f"wrong body for {path} ({headers.get('X-Cache')})"
    return headers


@contextlib.asynccontextmanager
async def origin_and_proxies(*configs, documents=500, link_all=True):
    """An origin and proxies (each ProxyConfig), each peered with all others when ``link_all``."""
    origin = await OriginServer(num_documents=documents, mean_size=MEAN_SIZE).start()
    proxies = []
    session = aiohttp.ClientSession()
    try:
        for c in configs:
            proxies.append(await BloomwiseProxy(c).start())
        if link_all:
            for p in proxies:
                for q in proxies:
                    if p is not q and q.url not in p.links:
                        p.add_peer(q.url)
        yield origin, proxies, session
    finally:
        await session.close()
        for p in proxies:
            await p.stop()
        await origin.stop()


class FakePeer:
    """A peer that misbehaves on purpose: ``mode`` = "slow" (answers after ``delay`` s), "garbage" (answers bytes
    that are not HTTP), or "app" (an aiohttp handler given as ``handler``, for bad summaries/digests)."""

    def __init__(self, mode, *, delay=5.0, handler=None):
        self.mode, self.delay, self.handler = mode, delay, handler
        self.requests = 0
        self._server = None
        self._runner = None
        self.port = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    async def _raw(self, reader, writer):
        self.requests += 1
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            if self.mode == "slow":
                await asyncio.sleep(self.delay)
                writer.write(b"HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\n\r\n")
            else:
                writer.write(b"\x00\x17garbage that is not HTTP at all\r\n\r\n\xff\xfe")
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def start(self):
        if self.mode == "app":
            async def counted(request):
                self.requests += 1
                return await self.handler(request)

            self._runner = web.ServerRunner(web.Server(counted), handle_signals=False)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
        else:
            self._server = await asyncio.start_server(self._raw, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self):
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        if self._runner is not None:
            await self._runner.cleanup()


async def origin_served(session, origin):
    async with session.get(origin.url + "/origin/stats") as reply:
        return (await reply.json())["served"]


async def read_response(reader):
    """One HTTP/1.1 response with a Content-Length, read from a raw connection: (head bytes, body bytes)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = re.search(rb"\r\nContent-Length: (\d+)\r\n", head, re.I)
    body = await asyncio.wait_for(reader.readexactly(int(length.group(1))), 10) if length else b""
    return head, body


async def exchange(port, raw: bytes, responses: int):
    """Send ``raw`` on a new connection to 127.0.0.1:``port``, read ``responses`` responses, close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        return [await read_response(reader) for _ in range(responses)]
    finally:
        writer.close()


def get_line(url, *headers):
    """A raw proxy request for ``url`` with extra header lines."""
    return (f"GET {url} HTTP/1.1\r\nHost: x\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode()


def normalised(head: bytes, proxy) -> bytes:
    """A response head with what differs between two proxies and two moments replaced: the proxy's URL, Date,
    Age and the ttl of Cache-Status."""
    head = head.replace(proxy.url.encode(), b"PROXY")
    head = re.sub(rb"\r\nDate: [^\r]+", b"\r\nDate: D", head)
    head = re.sub(rb"\r\nAge: \d+", b"\r\nAge: A", head)
    return re.sub(rb"ttl=\d+", b"ttl=T", head)
