"""Many requests at once through one proxy: the counters must say what the clients saw, and concurrent misses for
one URL must make one origin fetch (request collapsing)."""
import asyncio
import collections

from proxy_support import config, get, get_checked, origin_and_proxies, run, summary_settled
from bloomwise.proxy.origin import document_body

CONCURRENCY = 16


async def _bounded_gather(limit, coros):
    gate = asyncio.Semaphore(limit)

    async def one(coro):
        async with gate:
            return await coro
    return await asyncio.gather(*(one(c) for c in coros))


def _state(headers):
    return headers["X-Cache"].split(" ", 1)[0]


def test_stats_equal_what_clients_saw_at_concurrency_16():
    async def scenario():
        async with origin_and_proxies(config(name="A"), config(name="B")) as (origin, (a, b), session):
            remote = [f"/doc/{i}" for i in range(64)]         # held by A only
            local = [f"/doc/{i}" for i in range(100, 132)]    # held by B
            fresh = [f"/doc/{i}" for i in range(200, 232)]    # held by nobody
            for path in remote:
                await get_checked(session, a.url, origin, path)
            for path in local:
                await get_checked(session, b.url, origin, path)
            await summary_settled(a, b)
            assert all(f"GET {origin.url}{p}" in b.node.peer(a.url).summary for p in remote)
            before = b.stats()
            paths = remote + local + fresh
            order = [paths[(i * 37) % len(paths)] for i in range(len(paths))]   # interleaved kinds
            assert sorted(order) == sorted(paths)
            results = await _bounded_gather(CONCURRENCY, [get_checked(session, b.url, origin, p) for p in order])
            seen = collections.Counter(_state(h) for h in results)
            after = b.stats()
            delta = {k: after[k] - before[k] for k in ("requests", "local_hits", "remote_hits", "origin_fetches")}
            assert delta == {"requests": len(paths), "local_hits": seen["HIT"], "remote_hits": seen["REMOTE_HIT"],
                             "origin_fetches": seen["MISS"]}, (delta, seen)
            # and what each kind of document got (a false hit on a fresh document is a summary's right, not a miss)
            assert seen["REMOTE_HIT"] == len(remote) and seen["HIT"] == len(local)
            assert after["hit_ratio"] == (after["local_hits"] + after["remote_hits"]) / after["requests"]
    run(scenario())


def test_concurrent_misses_for_one_url_make_one_origin_fetch():
    async def scenario():
        async with origin_and_proxies(config(name="A")) as (origin, (a,), session):
            url = origin.url + "/slow/3?ms=400"
            replies = await asyncio.gather(*(get(session, a.url, url) for _ in range(20)))
            expected = document_body("/slow/3", origin.mean_size)
            assert all(status == 200 and body == expected for status, _, body in replies)
            assert origin.served["slow"] == 1                         # one fetch for twenty clients
            states = collections.Counter(_state(h) for _, h, _ in replies)
            assert states == {"MISS": 20}, states
            collapsed = [h for _, h, _ in replies if "collapsed" in h.get("Cache-Status", "")]
            assert len(collapsed) == 19
            stats = a.stats()
            assert stats["origin_fetches"] == 1 and stats["collapsed_requests"] == 19
            # an uncacheable answer is never shared: each waiting request fetches its own
            url = origin.url + "/private/4"
            replies = await asyncio.gather(*(get(session, a.url, url) for _ in range(5)))
            assert all(status == 200 for status, _, _ in replies) and origin.served["private"] == 5
    run(scenario())
