"""Interoperability with a real Squid (Debian's `squid`, cache digests enabled), on loopback.

(0) bloomwise reads the digest a real Squid serves; (1) a bloomwise proxy routes a request to a Squid sibling
whose cache was warmed, using that Squid's Cache Digest (a remote hit); (2) a Squid with the bloomwise proxy as a
digest-enabled sibling routes a cached URL to it: Squid's access.log says CD_SIBLING_HIT.
"""
import asyncio
import os

import pytest

from proxy_support import config, eventually, get, get_checked, origin_and_proxies, run
from bloomwise.cache.squid_digest import CacheDigest
from bloomwise.proxy.origin import document_body
from bloomwise.proxy.squid import SquidPeer, SquidProcess, squid_binary

pytestmark = pytest.mark.skipif(squid_binary() is None,
                                reason="needs the Debian package `squid` (scripts/system-deps.sh installs it)")


def _log_lines_for(squid, url):
    return [line for line in squid.access_log_lines() if f" {url} " in line]


def test_read_a_real_squid_digest_and_route_to_squid_sibling():
    async def scenario():
        squid = await asyncio.to_thread(SquidProcess(digest_period=1).start)
        try:
            async with origin_and_proxies(config(name="B", summary_interval=0.5)) as (origin, (b,), session):
                paths = [f"/doc/{i}" for i in range(5)]
                for path in paths:                              # warm the Squid
                    await get_checked(session, squid.proxy_url, origin, path)
                served = origin.served["doc"]
                assert served == len(paths)
                # (0) its digest, read with bloomwise's reader, holds the warmed URLs
                data = await eventually(
                    lambda: _digest_with(squid, [origin.url + p for p in paths]), timeout=30, interval=0.5,
                    what="the warmed URLs in Squid's digest")
                digest = CacheDigest.from_bytes(data)
                assert digest.bits_per_entry == 5 and digest.version_current == 5
                # (1) B takes the Squid as a peer: finds it is a Squid, fetches its digest, routes by it
                link = b.add_peer(squid.proxy_url)
                await eventually(lambda: link.kind == "squid" and all(
                    f"GET {origin.url}{p}" in b.node.peer(squid.proxy_url).summary for p in paths),
                    timeout=30, what="Squid's digest at B")
                for path in paths:
                    headers = await get_checked(session, b.url, origin, path)
                    assert headers["X-Cache"].startswith("REMOTE_HIT"), headers["X-Cache"]
                    assert headers["X-Bloomwise-Peer"] == squid.proxy_url
                assert origin.served["doc"] == served               # every one came from the Squid
                stats = b.stats()
                assert stats["remote_hits"] == len(paths) and stats["peers"][squid.proxy_url]["kind"] == "squid"
                # Squid answered those only-if-cached queries from its cache (its log daemon writes a line a
                # little after the answer, so wait for it)
                for path in paths:
                    await eventually(lambda url=origin.url + path: "HIT/200" in _log_lines_for(squid, url)[-1],
                                     timeout=15, interval=0.2, what=f"Squid's HIT line for {path}")
                # a URL the Squid's digest says it does not hold goes to the origin without asking it (a URL the digest
                # holds by chance would be a legitimate false hit, so the test picks one it does not)
                held = b.node.peer(squid.proxy_url).summary
                absent = next(f"/doc/{i}" for i in range(100, 400) if f"GET {origin.url}/doc/{i}" not in held)
                await get_checked(session, b.url, origin, absent)
                await asyncio.sleep(1.0)                        # time for a log line, had Squid been asked
                assert not _log_lines_for(squid, origin.url + absent)
        finally:
            await asyncio.to_thread(squid.stop)
    run(scenario(), timeout=120)


async def _logged(squid, url):
    """The last access.log line for ``url``: Squid's log daemon writes it a little after the answer."""
    lines = await eventually(lambda: _log_lines_for(squid, url), timeout=15, interval=0.1, what=f"a log line for {url}")
    return lines[-1]


def _digest_with(squid, urls):
    try:
        data = squid.fetch_digest()
    except OSError:
        return None
    digest = CacheDigest.from_bytes(data)
    return data if all(digest.contains_url(u) for u in urls) else None


def test_squid_routes_to_bloomwise_sibling_by_its_digest():
    async def scenario():
        async with origin_and_proxies(config(name="A", digest_period=0.0)) as (origin, (a,), session):
            warm = [f"/doc/{i}" for i in range(10, 30)]
            for path in warm:                                   # warm the bloomwise proxy
                await get_checked(session, a.url, origin, path)
            squid = SquidProcess(peers=[SquidPeer("127.0.0.1", a.config.port, name="bloomwise")],
                                 extra_config=os.environ.get("BLOOMWISE_SQUID_EXTRA", "").split(";"))
            await asyncio.to_thread(squid.start)
            try:
                # Squid fetches a peer's digest the first time it needs it: any request does
                await get_checked(session, squid.proxy_url, origin, "/doc/400")
                await eventually(lambda: a.counters["digests_served"] >= 1, timeout=30, what="Squid's digest fetch")
                found = None
                remaining = list(warm)
                while remaining and not found:                  # bounded: one try per warmed document
                    await asyncio.sleep(0.3)
                    path = remaining.pop(0)
                    served = origin.served["doc"]
                    await get_checked(session, squid.proxy_url, origin, path)
                    last = await _logged(squid, origin.url + path)
                    if "CD_SIBLING_HIT" in last:
                        found = last
                        assert origin.served["doc"] == served   # the document came from bloomwise, not the origin
                assert found, "no CD_SIBLING_HIT in Squid's access.log:\n" + "\n".join(squid.access_log_lines())
                assert "CD_SIBLING_HIT/127.0.0.1" in found
                # once Squid holds the digest, every warmed URL is routed by it (a chance false positive of a
                # wrongly hashed digest would not repeat five times: the fill is about 55%, 0.55^4 = 9% each)
                assert len(remaining) >= 5
                for path in remaining[:5]:
                    served = origin.served["doc"]
                    await get_checked(session, squid.proxy_url, origin, path)
                    line = await _logged(squid, origin.url + path)
                    assert "CD_SIBLING_HIT/127.0.0.1" in line, line
                    assert origin.served["doc"] == served
                assert a.stats()["peer_queries_served"] >= 1
            finally:
                await asyncio.to_thread(squid.stop)
    run(scenario(), timeout=120)
