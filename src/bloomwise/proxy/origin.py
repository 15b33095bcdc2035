"""A test origin server: deterministic documents of known sizes, cacheable and uncacheable, on loopback.

Every body is a pure function of its path, so a test (or a user) can check any response that went through a
cache chain against :func:`document_body` without asking the origin again. Paths::

    /doc/I          cacheable (Cache-Control: public, max-age=86400; Last-Modified; ETag)
    /private/I      Cache-Control: private            (a shared cache must not store it)
    /nostore/I      Cache-Control: no-store
    /cookie/I       sets a cookie (Set-Cookie)        (bloomwise proxies do not store it)
    /slow/I?ms=N    cacheable, answered after N milliseconds (at most 10 s)
    /short/I?ttl=S  cacheable for S seconds only (Cache-Control: public, max-age=S; default 2, at most 3600)
    /origin/stats   JSON: requests served per kind

Document ``I`` (0 <= I < num_documents) has ``document_size(I, mean_size)`` bytes: sizes are spread
deterministically between ``mean_size / 4`` and ``7 mean_size / 4`` (mean ``mean_size``). The body repeats the
SHA-256 chain of the path, so two documents never share a body.

>>> document_size(0, 1000), document_size(1, 1000), len(document_body("/doc/1", 1000))
(1387, 766, 766)
"""
from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Optional

__all__ = ["OriginServer", "document_body", "document_size", "KINDS", "run_origin"]

#: Path prefix -> Cache-Control of the reply (None: the cookie kind, see the module docstring).
KINDS = {
    "doc": "public, max-age=86400",
    "slow": "public, max-age=86400",
    "private": "private, max-age=86400",
    "nostore": "no-store",
    "cookie": "max-age=86400",
    "short": "public, max-age={ttl}",
}
MAX_SHORT_TTL = 3600
LAST_MODIFIED = "Mon, 02 Nov 2026 00:00:00 GMT"
MAX_SLOW_MS = 10_000


def document_size(index: int, mean_size: int = 4096) -> int:
    """Bytes of document ``index``: ``mean/4 + (h mod 3 mean/2)`` with h from SHA-256 of the index (deterministic)."""
    h = int.from_bytes(hashlib.sha256(str(index).encode()).digest()[:8], "big")
    return mean_size // 4 + h % (3 * mean_size // 2 + 1)


def document_body(path: str, mean_size: int = 4096) -> bytes:
    """The exact body the origin serves at ``path`` (``/KIND/I``; a query string is ignored)."""
    path = path.split("?", 1)[0]
    parts = path.strip("/").split("/")
    if len(parts) != 2 or parts[0] not in KINDS or not (parts[1].isascii() and parts[1].isdigit()):
        raise KeyError(path)
    size = document_size(int(parts[1]), mean_size)
    block = hashlib.sha256(path.encode()).digest()
    out = bytearray()
    while len(out) < size:
        out += block
        block = hashlib.sha256(block).digest()
    return bytes(out[:size])


class OriginServer:
    """The origin as an aiohttp application on ``host:port`` (0: any free port); ``await start()``, ``url``."""

    def __init__(self, *, num_documents: int = 1000, mean_size: int = 4096, host: str = "127.0.0.1",
                 port: int = 0):
        if num_documents < 1 or mean_size < 4:
            raise ValueError(f"need num_documents >= 1 and mean_size >= 4, got {num_documents}, {mean_size}")
        self.num_documents = num_documents
        self.mean_size = mean_size
        self.host, self.port = host, port
        self.served = {kind: 0 for kind in KINDS}
        self._runner = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def _handle(self, request):
        from aiohttp import web

        if request.path == "/origin/stats":
            return web.json_response({"served": self.served, "num_documents": self.num_documents,
                                      "mean_size": self.mean_size})
        parts = request.path.strip("/").split("/")
        if len(parts) != 2 or parts[0] not in KINDS or not (parts[1].isascii() and parts[1].isdigit()) \
                or int(parts[1]) >= self.num_documents:
            return web.Response(status=404, text=f"no document at {request.path}; documents are /KIND/I with "
                                                 f"KIND in {sorted(KINDS)} and 0 <= I < {self.num_documents}\n")
        kind = parts[0]
        if kind == "slow":
            try:
                ms = min(int(request.query.get("ms", "100")), MAX_SLOW_MS)
            except ValueError:
                return web.Response(status=400, text="ms must be an integer number of milliseconds\n")
            await asyncio.sleep(ms / 1000)
        cache_control = KINDS[kind]
        if kind == "short":
            try:
                ttl = int(request.query.get("ttl", "2"))
            except ValueError:
                ttl = -1
            if not 0 <= ttl <= MAX_SHORT_TTL:
                return web.Response(status=400, text=f"ttl must be whole seconds in 0..{MAX_SHORT_TTL}\n")
            cache_control = cache_control.format(ttl=ttl)
        self.served[kind] += 1
        body = document_body(request.path, self.mean_size)
        headers = {"Cache-Control": cache_control, "Last-Modified": LAST_MODIFIED,
                   "ETag": '"' + hashlib.sha256(body).hexdigest()[:16] + '"',
                   "Content-Type": "application/octet-stream"}
        if kind == "cookie":
            headers["Set-Cookie"] = f"session={parts[1]}; Path=/"
        if request.method == "HEAD":
            return web.Response(headers=headers, body=b"")
        return web.Response(body=body, headers=headers)

    async def start(self) -> "OriginServer":
        from aiohttp import web

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


async def run_origin(num_documents: int, mean_size: int, host: str, port: int,
                     ready: Optional[callable] = None) -> None:
    """Serve until cancelled; ``ready(url)`` is called once listening."""
    origin = await OriginServer(num_documents=num_documents, mean_size=mean_size, host=host, port=port).start()
    if ready:
        ready(origin.url)
    try:
        await asyncio.Event().wait()
    finally:
        await origin.stop()


def main(argv=None) -> int:
    """``python -m bloomwise.proxy.origin --listen 127.0.0.1:0 --documents D``: prints the URL, serves."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bloomwise.proxy.origin", description=__doc__.split("\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any free port)")
    parser.add_argument("--documents", type=int, default=1000, help="number of documents per kind")
    parser.add_argument("--mean-size", type=int, default=4096, help="mean document size in bytes")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")

    def ready(url):
        print(json.dumps({"origin": url}), flush=True)

    try:
        asyncio.run(run_origin(args.documents, args.mean_size, host or "127.0.0.1", int(port), ready))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
