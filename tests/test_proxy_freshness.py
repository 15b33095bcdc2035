"""Summaries advertise only what a peer can get: documents that are stale, or expire before a peer could act on the
summary, are left out of the summary and of the Squid digest (and still served locally while fresh)."""
import asyncio
import time

from proxy_support import config, eventually, get_checked, origin_and_proxies, run
from bloomwise.cache import DocumentCache
from bloomwise.cache.squid_digest import DIGEST_PATH, CacheDigest
from bloomwise.cache.summary import PeerSummary, SummaryUpdate
from bloomwise.proxy.advertised import AdvertisedSet


def _set():
    return AdvertisedSet(DocumentCache(2**20, bits_per_entry=8, expected_entries=512))


def test_advertised_set_rules():
    ads = _set()
    assert ads.advertise("k1", expires_at=100.0, now=0.0, horizon=10.0)
    assert ads.advertise("k2", expires_at=50.0, now=0.0, horizon=10.0)
    assert not ads.advertise("k3", expires_at=10.0, now=0.0, horizon=10.0)      # fresh exactly to the horizon
    assert "k3" not in ads and "k3" not in ads.filter and ads.changes == 2
    # a new copy of k1 that expires within the horizon withdraws it
    assert not ads.advertise("k1", expires_at=5.0, now=0.0, horizon=10.0)
    assert "k1" not in ads and "k1" not in ads.filter and ads.changes == 3
    assert ads.withdraw_expiring(now=39.9) == []
    assert ads.withdraw_expiring(now=40.0) == ["k2"] and len(ads) == 0 and ads.filter.num_keys == 0
    # re-advertised keys leave old heap entries behind: they never withdraw the newer advertisement
    for i in range(3000):
        ads.advertise("hot", expires_at=1000.0 + i, now=100.0, horizon=10.0)
    assert ads.withdraw_expiring(now=1500.0) == [] and "hot" in ads and len(ads._heap) <= 2 * 1 + 1024 + 1
    assert ads.withdraw_expiring(now=3989.0) == ["hot"]
    assert ads.new_documents == 3 and ads.changes == 6     # k1, k2, hot each added and withdrawn once
    # a publisher that re-sizes summaries rebuilds the set's filter for the keys advertised
    for i in range(10):
        ads.advertise(f"k{i}", expires_at=1e9, now=0.0, horizon=1.0)
    ads.resize_filter(10)
    assert ads.filter.num_cells == 80 and ads.expected_entries == 10
    assert all(f"k{i}" in ads.filter for i in range(10)) and ads.filter.num_keys == 10


def _summary_of(data):
    held = PeerSummary()
    held.apply(SummaryUpdate.from_bytes(data))
    return held


def test_short_lived_documents_cause_no_false_hits_at_peers():
    async def scenario():
        # summary interval 0.6 s: sweep 0.3 s, horizon 0.3 + 0.1 + 0.6 = 1.0 s. Resizing off: A's summary keeps
        # its starting 8 x 2,796 positions (k = 6) for at most 30 keys, a false-positive rate under 1e-12 per key,
        # so that any false hit below is a stale copy's, not the filter's.
        configs = [config(name="A", summary_interval=0.6, resize_tolerance=None),
                   config(name="B", summary_interval=0.6)]
        async with origin_and_proxies(*configs) as (origin, (a, b), session):
            assert a.config.advertise_horizon == 1.0
            brief = [f"/short/{i}?ttl=1" for i in range(10)]        # never fresh beyond the horizon
            short = [f"/short/{i}?ttl=5" for i in range(10, 20)]    # advertised for about 4 s
            long = [f"/doc/{i}" for i in range(10)]
            stored_at = time.time()
            for path in brief + short + long:
                await get_checked(session, a.url, origin, path)
            key = {p: f"GET {origin.url}{p}" for p in brief + short + long}
            # all are cached at A and served locally while fresh
            for path in brief[:3]:
                assert (await get_checked(session, a.url, origin, path))["X-Cache"].startswith("HIT")
            # A's summary: the short-lived ones that stay fresh long enough, not the brief ones
            async def published():
                async with session.get(a.url + "/bloomwise/summary") as reply:
                    held = _summary_of(await reply.read())
                return held if a.node.publisher.pending_changes == 0 else None

            held = await eventually(published, what="A's changes published")
            assert all(key[p] in held for p in short + long)
            assert not any(key[p] in held for p in brief)
            # the Squid digest lists only what stays fresh for Squid's 5-minute digest refresh
            async with session.get(a.url + DIGEST_PATH) as reply:
                digest = CacheDigest.from_bytes(await reply.read())
            assert all(digest.contains_url(origin.url + p) for p in long)
            assert digest.count == len(long)
            # B routes to A by it: an advertised short-lived document is a remote hit while fresh
            await eventually(lambda: b.node.peer(a.url).summary is not None
                             and all(key[p] in b.node.peer(a.url).summary for p in short), what="A's summary at B")
            assert (await get_checked(session, b.url, origin, short[0]))["X-Cache"].startswith("REMOTE_HIT")
            # before they expire, A withdraws them and B's copy of A's summary says so
            await eventually(lambda: not any(key[p] in b.node.peer(a.url).summary for p in short), timeout=10,
                             what="the short-lived documents withdrawn from A's summary at B")
            assert a.stats()["withdrawn_expiring"] >= len(short)
            await asyncio.sleep(max(0.0, stored_at + 5.2 - time.time()))      # now every short copy at A is stale
            before = b.stats()
            served = origin.served["short"]
            for path in brief + short[1:]:
                headers = await get_checked(session, b.url, origin, path)
                assert headers["X-Cache"].startswith("MISS"), (path, headers["X-Cache"])
            after = b.stats()
            assert after["false_hits"] == before["false_hits"]          # no peer was sent after a stale copy
            assert after["peer_queries"] == before["peer_queries"]
            assert origin.served["short"] == served + len(brief) + len(short) - 1
            # the long-lived documents are still advertised and served remotely
            assert (await get_checked(session, b.url, origin, long[0]))["X-Cache"].startswith("REMOTE_HIT")
    run(scenario())
