"""Interoperability with a real Squid (Debian's `squid`, cache digests enabled), on loopback.

(0) bloomwise reads the digest a real Squid serves; (1) a bloomwise proxy routes a request to a Squid sibling
whose cache was warmed, using that Squid's Cache Digest (a remote hit); (2) a Squid with the bloomwise proxy as a
digest-enabled sibling routes a cached URL to it: Squid's access.log says CD_SIBLING_HIT; (3) digests over 128 bytes
of mask, both ways, checked on the bits (Squid 5.7's routing by such a digest measures its bug 5510, not bloomwise).
"""
import asyncio
import hashlib
import os
import struct

import pytest

from proxy_support import config, eventually, get, get_checked, origin_and_proxies, run
from bloomwise.cache.squid_digest import DIGEST_CONTENT_TYPE, DIGEST_PATH, CacheDigest
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
                at_once = [f"/doc/{i}" for i in range(5, 25)]   # asked together: B pipelines its queries
                for path in paths + at_once:                    # warm the Squid
                    await get_checked(session, squid.proxy_url, origin, path)
                served = origin.served["doc"]
                assert served == len(paths + at_once)
                # (0) its digest, read with bloomwise's reader, holds the warmed URLs
                data = await eventually(
                    lambda: _digest_with(squid, [origin.url + p for p in paths + at_once]), timeout=30, interval=0.5,
                    what="the warmed URLs in Squid's digest")
                digest = CacheDigest.from_bytes(data)
                assert digest.bits_per_entry == 5 and digest.version_current == 5
                # (1) B takes the Squid as a peer: finds it is a Squid, fetches its digest, routes by it
                link = b.add_peer(squid.proxy_url)
                await eventually(lambda: link.kind == "squid" and all(
                    f"GET {origin.url}{p}" in b.node.peer(squid.proxy_url).summary for p in paths + at_once),
                    timeout=30, what="Squid's digest at B")
                for path in paths:
                    headers = await get_checked(session, b.url, origin, path)
                    assert headers["X-Cache"].startswith("REMOTE_HIT"), headers["X-Cache"]
                    assert headers["X-Bloomwise-Peer"] == squid.proxy_url
                assert origin.served["doc"] == served               # every one came from the Squid
                # twenty at once (no-store: B keeps none): their queries share B's connections to the Squid, several
                # in flight on one, and each gets its own document
                replies = await asyncio.gather(*(get(session, b.url, origin.url + path,
                                                     headers={"Cache-Control": "no-store"}) for path in at_once))
                for path, (status, headers, body) in zip(at_once, replies):
                    assert status == 200 and headers["X-Cache"].startswith("REMOTE_HIT"), (path, headers)
                    assert body == document_body(path, origin.mean_size)
                assert origin.served["doc"] == served
                assert b.peer_connections[squid.proxy_url].opened <= 2   # (a query per connection: 8)
                stats = b.stats()
                assert stats["remote_hits"] == len(paths + at_once)
                assert stats["peers"][squid.proxy_url]["kind"] == "squid"
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


# -- digests over 128 bytes --------------------------------------------------------------------------------------
# Squid 5.7 corrupts a received digest whose mask does not arrive in the same read as the 128-byte control block
# (Squid bug 5510, fixed after 5.7): what 5.7 *routes* by such a digest measures that bug, not bloomwise. So the test
# below asserts on the bytes bloomwise serves, decoded here independently of bloomwise's reader with the algorithm
# of Squid's Cache Digests as documented (docs/cache.md, "With Squid"): store key = MD5(method byte 1 for GET, URL),
# its four big-endian 32-bit words modulo the mask's bits, bit b = mask[b >> 3] & (1 << (b & 7)).

DIGEST_CBLOCK = struct.Struct(">HHIIIIBB")      # version current, required, capacity, count, del_count,
                                                # mask_size, bits_per_entry, hash_func_count; 106 reserved bytes


def squid_digest_fields(data):
    """The control block of a served digest as a dict, and its mask (checked against the stated sizes)."""
    assert len(data) >= 128, f"a digest starts with a 128-byte control block, got {len(data)} bytes"
    names = ("current", "required", "capacity", "count", "del_count", "mask_size", "bits_per_entry", "hashes")
    fields = dict(zip(names, DIGEST_CBLOCK.unpack_from(data, 0)))
    assert data[DIGEST_CBLOCK.size:128] == bytes(128 - DIGEST_CBLOCK.size), "reserved bytes must be zero"
    mask = data[128:]
    assert len(mask) == fields["mask_size"], (len(mask), fields)
    return fields, mask


def squid_bit_positions(url, mask_size):
    """The four bits a GET of ``url`` sets in a mask of ``mask_size`` bytes (Squid's cacheDigestHashKey)."""
    key = hashlib.md5(b"\x01" + url.encode()).digest()
    return [int.from_bytes(key[4 * i:4 * i + 4], "big") % (8 * mask_size) for i in range(4)]


def set_bits(mask):
    return {b for b in range(8 * len(mask)) if mask[b >> 3] & (1 << (b & 7))}


def test_digests_over_128_bytes_are_whole_both_ways():
    warmed = 300            # 300 entries x 5 bits = 188 bytes of mask: more than fits beside the control block

    async def scenario():
        squid = await asyncio.to_thread(SquidProcess(digest_period=1).start)
        try:
            async with origin_and_proxies(config(name="B", summary_interval=0.5)) as (origin, (b,), session):
                urls = [f"{origin.url}/doc/{i}" for i in range(warmed)]
                for i in range(warmed):                         # warm the Squid
                    await get_checked(session, squid.proxy_url, origin, f"/doc/{i}")
                # (1) Squid's own digest, decoded here: over 128 bytes of mask, every warmed URL's four bits set
                data = await eventually(lambda: _digest_with(squid, urls), timeout=60, interval=0.5,
                                        what="every warmed URL in Squid's digest")
                fields, mask = squid_digest_fields(data)
                assert fields["mask_size"] > 128 and fields["hashes"] == 4, fields
                bits = set_bits(mask)
                assert all(set(squid_bit_positions(u, fields["mask_size"])) <= bits for u in urls)
                # bloomwise reads it whole: B routes every warmed URL to the Squid, none to the origin
                link = b.add_peer(squid.proxy_url)
                await eventually(lambda: link.kind == "squid" and all(
                    f"GET {u}" in b.node.peer(squid.proxy_url).summary for u in urls), timeout=30,
                    what="Squid's whole digest at B")
                served = origin.served["doc"]
                for i in range(warmed):
                    headers = await get_checked(session, b.url, origin, f"/doc/{i}")
                    assert headers["X-Cache"].startswith("REMOTE_HIT"), (i, headers["X-Cache"])
                assert origin.served["doc"] == served
                # (2) the digest B serves now (it stored the 300 remote hits, nothing else), fetched as a Squid
                # sibling fetches it: exactly the bits of those URLs, sized for them
                async with session.get(b.url + DIGEST_PATH, headers={"Accept": DIGEST_CONTENT_TYPE}) as reply:
                    assert reply.status == 200 and reply.headers["Content-Type"] == DIGEST_CONTENT_TYPE
                    served_digest = await reply.read()
                fields, mask = squid_digest_fields(served_digest)
                assert (fields["current"], fields["required"], fields["bits_per_entry"], fields["hashes"]) == \
                    (5, 3, 5, 4), fields
                assert fields["count"] == fields["capacity"] == warmed, fields
                assert fields["mask_size"] == (warmed * 5 + 7) // 8 == 188, fields
                expected = {p for u in urls for p in squid_bit_positions(u, fields["mask_size"])}
                assert set_bits(mask) == expected
        finally:
            await asyncio.to_thread(squid.stop)
    run(scenario(), timeout=240)
