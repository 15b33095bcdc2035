"""The bloomwise network proxy over loopback: caching rules, peer queries, summary exchange, stats, the Squid
digest it serves. Every body that comes back is compared with the origin's document."""
import asyncio

import pytest
from hypothesis import given, settings, strategies as st

from proxy_support import (config, eventually, get, get_checked, origin_and_proxies, run, scripted_origin,
                           summary_settled)
from bloomwise.cache.squid_digest import DIGEST_PATH, CacheDigest
from bloomwise.cache.summary import SummaryUpdate
from bloomwise.proxy import http_cache
from bloomwise.proxy.origin import document_body


# -- RFC 9111 subset ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("request_headers, status, headers, storable", [
    ({}, 200, {"Cache-Control": "public, max-age=60"}, True),
    ({}, 200, {"Cache-Control": "max-age=60", "Set-Cookie": "a=b"}, False),
    ({}, 200, {"Cache-Control": "no-store"}, False),
    ({}, 200, {"Cache-Control": "private, max-age=60"}, False),
    ({}, 200, {"Cache-Control": "no-cache, max-age=60"}, False),
    ({}, 200, {"Cache-Control": "max-age=60", "Vary": "Accept"}, False),
    ({}, 200, {"Cache-Control": "max-age=0"}, False),
    ({}, 200, {}, False),                                                       # no freshness information
    ({}, 200, {"Last-Modified": "Mon, 02 Nov 2026 00:00:00 GMT",
               "Date": "Mon, 23 Nov 2026 00:00:00 GMT"}, True),               # heuristic: 10% of 21 days
    ({}, 404, {"Cache-Control": "max-age=60"}, False),
    ({"Authorization": "Basic eDp5"}, 200, {"Cache-Control": "max-age=60"}, False),
    ({"Cache-Control": "no-store"}, 200, {"Cache-Control": "max-age=60"}, False),
])
def test_storable(request_headers, status, headers, storable):
    assert http_cache.response_is_storable("GET", request_headers, status, headers) is storable


def test_freshness_and_request_directives():
    assert http_cache.freshness_lifetime(200, {"Cache-Control": "max-age=10", "Expires": "0"}) == 10.0
    assert http_cache.freshness_lifetime(200, {"Expires": "Mon, 02 Nov 2026 00:01:00 GMT",
                                               "Date": "Mon, 02 Nov 2026 00:00:00 GMT"}) == 60.0
    assert http_cache.freshness_lifetime(200, {"Expires": "garbage"}) == 0.0
    assert http_cache.is_fresh({"Cache-Control": "max-age=10"}, stored_at=100.0, now=109.0)
    assert not http_cache.is_fresh({"Cache-Control": "max-age=10"}, stored_at=100.0, now=110.0)
    assert not http_cache.is_fresh({"Cache-Control": "max-age=10", "Age": "5"}, stored_at=100.0, now=106.0)
    assert not http_cache.request_may_use_cache("GET", {"Cache-Control": "no-cache"})
    assert not http_cache.request_may_use_cache("GET", {"Pragma": "no-cache"})
    assert not http_cache.request_may_use_cache("POST", {})
    assert http_cache.only_if_cached({"cache-control": "max-stale, only-if-cached"})
    assert http_cache.end_to_end_headers({"Connection": "close, X-Hop", "X-Hop": "1", "Keep-Alive": "5",
                                          "Transfer-Encoding": "chunked", "ETag": '"e"'}) == {"ETag": '"e"'}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["Cache-Control", "Expires", "Date", "Last-Modified", "Age", "Vary",
                                        "Pragma", "Authorization"]), st.text(max_size=40), max_size=6),
       st.integers(100, 599))
def test_cache_rules_never_crash_on_odd_headers(headers, status):
    lifetime = http_cache.freshness_lifetime(status, headers)
    assert lifetime is None or lifetime >= 0
    storable = http_cache.response_is_storable("GET", headers, status, headers)
    assert storable in (True, False)
    if storable:
        assert status == 200 and lifetime > 0
    http_cache.is_fresh(headers, stored_at=0.0)
    http_cache.request_may_use_cache("GET", headers)


# -- one proxy --------------------------------------------------------------------------------------------------------
def test_local_hits_and_uncacheable_documents():
    async def scenario():
        async with origin_and_proxies(config(name="A")) as (origin, (a,), session):
            for _ in range(3):
                for i in range(10):
                    await get_checked(session, a.url, origin, f"/doc/{i}")
            assert origin.served["doc"] == 10                       # each document fetched once
            headers = await get_checked(session, a.url, origin, "/doc/3")
            assert headers["X-Cache"].startswith("HIT") and int(headers["Age"]) >= 0
            for kind in ("private", "nostore", "cookie"):
                for _ in range(2):
                    headers = await get_checked(session, a.url, origin, f"/{kind}/5")
                    assert headers["X-Cache"].startswith("MISS")
                assert origin.served[kind] == 2, kind               # never stored
            # a client's no-cache goes to the origin (and refreshes the stored copy)
            await get_checked(session, a.url, origin, "/doc/1")
            status, _, body = await get(session, a.url, origin.url + "/doc/1", headers={"Cache-Control": "no-cache"})
            assert status == 200 and body == document_body("/doc/1", origin.mean_size)
            assert origin.served["doc"] == 11
            # other methods pass through
            async with session.post(origin.url + "/doc/2", proxy=a.url, data=b"x") as reply:
                assert reply.status == 200 and reply.headers["X-Cache"].startswith("MISS")
            assert origin.served["doc"] == 12
            stats = a.stats()
            assert stats["local_hits"] == 22 and stats["pass_through"] == 1
            assert stats["origin_fetches"] == 10 + 6   # the first fetches, and the 6 uncacheable ones
            assert stats["cache_bypassed"] == 1
            assert stats["hit_ratio"] == pytest.approx(stats["local_hits"] / stats["requests"])
    run(scenario())


def test_peer_query_is_answered_from_cache_or_504_and_never_forwarded():
    async def scenario():
        async with origin_and_proxies(config(name="A")) as (origin, (a,), session):
            await get_checked(session, a.url, origin, "/doc/7")
            served = dict(origin.served)
            oic = {"Cache-Control": "only-if-cached"}
            status, headers, body = await get(session, a.url, origin.url + "/doc/7", headers=oic)
            assert status == 200 and body == document_body("/doc/7", origin.mean_size)
            status, _, _ = await get(session, a.url, origin.url + "/doc/8", headers=oic)
            assert status == 504
            assert origin.served == served                          # the 504 did not go to the origin
            assert a.stats()["peer_queries_served"] == 2
            status, _, _ = await get(session, a.url, origin.url + "/doc/9", headers={"Via": f"1.1 {a.url}"})
            assert status == 508                                    # a loop through this proxy is refused
    run(scenario())


def test_bad_requests_get_clear_errors():
    async def scenario():
        async with origin_and_proxies(config(name="A")) as (origin, (a,), session):
            async with session.get(a.url + "/not-an-endpoint") as reply:
                assert reply.status == 404 and "absolute-form" in await reply.text()
            async with session.get(a.url + "/bloomwise/summary?since=x&origin=y") as reply:
                assert reply.status == 400 and "since must be an integer" in await reply.text()
            async with session.post(a.url + "/bloomwise/notify", data=b"{not json") as reply:
                assert reply.status == 400
            async with session.post(a.url + "/bloomwise/notify", json={"url": "http://127.0.0.1:1", "version": 3}) \
                    as reply:
                assert reply.status == 404
            for version in ("x", -1, True, 1.5, None):
                async with session.post(a.url + "/bloomwise/notify", json={"url": "http://127.0.0.1:1",
                                                                           "version": version}) as reply:
                    assert reply.status == 400 and "version must be an integer" in await reply.text(), version
            status, _, body = await get(session, a.url, "http://127.0.0.1:1/doc/1")     # origin unreachable
            assert status == 502 and b"could not be reached" in body
            reader, writer = await asyncio.open_connection("127.0.0.1", a.config.port)   # not a URL: 400, no 500
            writer.write(b"GET http://[::1/doc HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            writer.close()
            assert head.split(b"\r\n")[0] in (b"HTTP/1.0 400 Bad Request", b"HTTP/1.1 400 Bad Request"), head
    run(scenario())


# -- summaries ------------------------------------------------------------------------------------------------------
def test_summary_endpoint_whole_delta_and_not_modified():
    """The summary endpoint serves a delta, 304 or the whole summary (resizing off: every publication here has the
    same geometry, so a delta exists between any two; re-sized summaries: test_proxy_resize.py)."""
    async def scenario():
        async with origin_and_proxies(config(name="A", update_threshold=0.01, resize_tolerance=None)) \
                as (origin, (a,), session):
            async with session.get(a.url + "/bloomwise/summary") as reply:
                first = SummaryUpdate.from_bytes(await reply.read())
                assert reply.headers["Content-Type"] == "application/x-bloomwise-summary"
            assert first.base_version is None and first.version == 1
            origin_hex = f"{first.origin:016x}"
            for i in range(20):
                await get_checked(session, a.url, origin, f"/doc/{i}")
            # Publications are at least min_publish_interval apart: the last documents' changes go out with a
            # deferred publication, which must not land between reading the version and asking for it.
            await eventually(lambda: not a.publication_scheduled, what="A's last deferred publication")
            version = a.node.publisher.current_version
            assert version > first.version
            async with session.get(a.url + f"/bloomwise/summary?since={version - 1}&origin={origin_hex}") as reply:
                delta = SummaryUpdate.from_bytes(await reply.read())
            assert delta.base_version == version - 1 and delta.version == version
            async with session.get(a.url + f"/bloomwise/summary?since={version}&origin={origin_hex}") as reply:
                assert reply.status == 304
            async with session.get(a.url + f"/bloomwise/summary?since=1&origin={'0' * 16}") as reply:
                whole = SummaryUpdate.from_bytes(await reply.read())  # another origin id: the whole summary
            assert whole.base_version is None and whole.version == version
    run(scenario())


@pytest.mark.parametrize("policy, kind", [("summary", "bits"), ("paradox", "counters"), ("icp", "bits")])
def test_two_proxies_share_summaries_and_serve_remote_hits(policy, kind):
    async def scenario():
        configs = [config(name="A", policy=policy, summary_kind=kind),
                   config(name="B", policy=policy, summary_kind=kind)]
        async with origin_and_proxies(*configs) as (origin, (a, b), session):
            paths = [f"/doc/{i}" for i in range(40)]
            for path in paths:
                await get_checked(session, a.url, origin, path)
            # B learns A's summary (pushed by notify, pulled periodically)
            await summary_settled(a, b)
            assert all(f"GET {origin.url}{p}" in b.node.peer(a.url).summary for p in paths)
            for path in paths:
                headers = await get_checked(session, b.url, origin, path)
                assert headers["X-Cache"].startswith("REMOTE_HIT"), (path, headers["X-Cache"])
                assert headers["X-Bloomwise-Peer"] == a.url
            assert origin.served["doc"] == len(paths)               # nothing fetched twice from the origin
            for path in paths[:5]:                                  # now stored at B too
                assert (await get_checked(session, b.url, origin, path))["X-Cache"].startswith("HIT")
            for i in range(40, 60):                                 # documents nobody holds
                await get_checked(session, b.url, origin, f"/doc/{i}")
            stats = b.stats()
            assert stats["remote_hits"] == len(paths)
            assert stats["origin_fetches"] == 20
            assert stats["peers"][a.url]["healthy"] and stats["peers"][a.url]["rtt_ms"] > 0
            assert stats["summary_bytes_in"] > 0 and a.stats()["summary_bytes_out"] > 0
            if policy == "icp":
                assert stats["peer_queries"] == 60                  # ICP asks every peer on every miss
            else:
                # the summary filters the queries: a few false hits at most (8 bits/entry)
                assert len(paths) <= stats["peer_queries"] <= len(paths) + 10
                assert stats["false_hits"] == stats["peer_queries"] - len(paths)
    run(scenario())


def test_squid_digest_served_by_a_bloomwise_proxy():
    async def scenario():
        async with origin_and_proxies(config(name="A", digest_period=0.0)) as (origin, (a,), session):
            paths = [f"/doc/{i}" for i in range(30)]
            for path in paths:
                await get_checked(session, a.url, origin, path)
            async with session.get(a.url + DIGEST_PATH) as reply:
                assert reply.headers["Content-Type"] == "application/cache-digest"
                digest = CacheDigest.from_bytes(await reply.read())
            assert all(digest.contains_url(origin.url + p) for p in paths)
            assert digest.count == 30 and digest.capacity == 30
            # Squid asks with an absolute URL naming the proxy itself
            async with session.get(a.url + DIGEST_PATH, proxy=a.url) as reply:
                assert CacheDigest.from_bytes(await reply.read()) == digest
            async with session.get(f"http://localhost:{a.config.port}{DIGEST_PATH}", proxy=a.url) as reply:
                assert CacheDigest.from_bytes(await reply.read()) == digest   # named by a host name
    run(scenario())


def test_misses_go_to_the_parent_when_there_is_one():
    async def scenario():
        async with origin_and_proxies(config(name="P")) as (origin, (parent,), session):
            from bloomwise.proxy.server import BloomwiseProxy

            child = await BloomwiseProxy(config(name="C", parent=parent.url)).start()
            try:
                for i in range(5):
                    await get_checked(session, child.url, origin, f"/doc/{i}")
                assert parent.stats()["requests"] == 5 and parent.stats()["origin_fetches"] == 5
                assert child.stats()["origin_fetches"] == 5            # "origin" here is the parent
                headers = await get_checked(session, child.url, origin, "/doc/1")
                assert headers["X-Cache"].startswith("HIT")
                assert parent.stats()["requests"] == 5 and origin.served["doc"] == 5
            finally:
                await child.stop()
    run(scenario())


def test_stats_carry_what_the_issue_and_the_page_need():
    async def scenario():
        async with origin_and_proxies(config(name="A"), config(name="B")) as (origin, (a, b), session):
            await get_checked(session, a.url, origin, "/doc/1")
            await eventually(lambda: b.node.peer(a.url).summary is not None, what="a summary at B")
            async with session.get(b.url + "/bloomwise/stats") as reply:
                stats = await reply.json()
            for key in ("requests", "local_hits", "remote_hits", "false_hits", "false_misses", "peer_queries",
                        "origin_fetches", "summary_bytes_in", "summary_bytes_out", "peer_queries_served", "name",
                        "listen", "uptime_seconds", "hit_ratio", "timing"):
                assert key in stats, key
            peer = stats["peers"][a.url]
            for key in ("summary_version", "summary_age_seconds", "summary_bytes", "cost", "healthy", "rtt_ms",
                        "kind", "failures", "summary_origin"):
                assert key in peer, key
            assert stats["name"] == "B" and stats["listen"] == b.url and peer["kind"] == "bloomwise"
            assert peer["summary_age_seconds"] >= 0 and peer["rtt_ms"] > 0
            assert peer["cost"] == pytest.approx(peer["rtt_ms"], abs=0.001)   # tau = the measured RTT (ms)
            async with session.get(a.url + "/bloomwise/stats") as reply:
                own = (await reply.json())["summary"]
            # A's published summary was built from the one document it holds (what a peer waits for, e.g.
            # benchmarks/proxy.py before it measures remote hits)
            assert own["version"] >= 1 and own["num_keys"] == 1
    run(scenario())


@pytest.mark.parametrize("path", ["/doc/\u00b9", "/doc/x", "/nothing/1", "/doc"])
def test_an_origin_path_that_names_no_document_is_a_key_error(path):
    with pytest.raises(KeyError):
        document_body(path)


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_every_set_cookie_line_of_an_origin_reaches_the_client(method):
    """Set-Cookie cannot be joined into one line (RFC 6265 section 3): each of the origin's goes to the client, on
    a miss and on a method passed through."""
    async def scenario():
        reply = (b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1; Path=/\r\nX-Between: x\r\nSet-Cookie: b=2; Path=/\r\n"
                 b"set-cookie: c=3\r\nContent-Length: 2\r\n\r\nok")
        async with scripted_origin(lambda head: reply) as base, \
                origin_and_proxies(config(), documents=5) as (origin, (proxy,), session):
            async with session.request(method, base + "/cookies", proxy=proxy.url) as answer:
                assert (answer.status, await answer.read()) == (200, b"ok")
                assert answer.headers.getall("Set-Cookie") == ["a=1; Path=/", "b=2; Path=/", "c=3"]
                assert answer.headers["X-Between"] == "x" and answer.headers["X-Cache"].startswith("MISS")

    run(scenario())


def test_an_origin_reply_that_says_private_in_any_of_its_cache_control_fields_is_not_stored():
    """RFC 9110 section 5.3: a field sent twice is both lines; the storing rules read both (not the last one)."""
    async def scenario():
        reply = (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nCache-Control: private\r\n"
                 b"Content-Length: 2\r\n\r\nok")
        async with scripted_origin(lambda head: reply) as base, \
                origin_and_proxies(config(), documents=5) as (origin, (proxy,), session):
            url = base + "/split"
            for _ in range(2):
                status, headers, body = await get(session, proxy.url, url)
                assert (status, body) == (200, b"ok") and headers["X-Cache"].startswith("MISS")
                assert headers["Cache-Control"] == "max-age=600, private"
            assert f"GET {url}" not in proxy.node.cache

    run(scenario())
