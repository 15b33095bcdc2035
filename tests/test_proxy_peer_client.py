"""Peer queries over kept-alive connections (bloomwise.proxy.peer_client): reused across remote hits, every body
framing a peer may send, and failures as PeerQueryError, never a hang or a wrong body."""
import asyncio

import pytest
from multidict import CIMultiDict

from proxy_support import config, get_checked, origin_and_proxies, run, summary_settled
from bloomwise.proxy import http_cache, peer_client
from bloomwise.proxy.peer_client import PeerConnections, PeerQueryError



def test_remote_hits_reuse_one_connection_to_the_peer():
    async def scenario():
        async with origin_and_proxies(config(), config()) as (origin, (p0, p1), session):
            paths = [f"/doc/{i}" for i in range(20)]
            for path in paths:
                await get_checked(session, p0.url, origin, path)
            await summary_settled(p0, p1)
            for path in paths:  # no-store: P1 keeps nothing, so each is a remote hit from P0
                async with session.get(origin.url + path, proxy=p1.url, headers={"Cache-Control": "no-store"}) as r:
                    assert r.status == 200 and r.headers["X-Cache"].startswith("REMOTE_HIT"), (path, r.headers)
                    assert await r.read() == (await (await session.get(origin.url + path)).read())
            assert p1.stats()["remote_hits"] == 20
            assert p1.peer_connections[p0.url].opened == 1      # one connection, kept alive, for the 20 queries
            assert p0.stats()["peer_queries_served"] == 20 and p0.stats()["fast_hits"] == 20

    run(scenario())


async def scripted_peer(answers):
    """A server answering each connection's requests with the next of ``answers`` (bytes; None: close)."""
    queue = list(answers)
    seen = []

    async def serve(reader, writer):
        try:
            while queue:
                seen.append(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5))
                answer = queue.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen


OK_CL = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
CLOSE_DELIMITED = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"


@pytest.mark.parametrize("answer, body", [(OK_CL, b"hello"), (CHUNKED, b"abcde"), (CLOSE_DELIMITED, b"until the end"),
                                          (b"HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\n\r\n", b"")])
def test_bodies_in_every_framing(answer, body):
    async def scenario():
        server, url, seen = await scripted_peer([answer])
        connections = PeerConnections(url)
        try:
            status, headers, got = await connections.query("http://origin.test/x", {"Cache-Control": "only-if-cached"},
                                                           timeout=5, max_body=100)
        finally:
            connections.close()
            server.close()
        assert got == body and status == int(answer.split(b" ")[1])
        assert seen[0].startswith(b"GET http://origin.test/x HTTP/1.1\r\nHost: origin.test\r\n")
        assert b"\r\nCache-Control: only-if-cached\r\n" in seen[0]

    run(scenario())


@pytest.mark.parametrize("answer, message", [
    (b"\x00\x17garbage that is not HTTP\r\n\r\n", "not an HTTP response"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + b"x" * 500, "over the limit of 100"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort", "mid-response"),
    (None, "closed the connection without answering"),
])
def test_failures_are_peer_query_errors(answer, message):
    async def scenario():
        server, url, _ = await scripted_peer([answer])
        connections = PeerConnections(url)
        try:
            with pytest.raises(PeerQueryError, match=message):
                await connections.query("http://origin.test/x", {}, timeout=5, max_body=100)
            assert connections.connections == []  # a failed connection is never reused
        finally:
            connections.close()
            server.close()

    run(scenario())


def test_a_connection_the_peer_closed_while_idle_is_replaced():
    async def scenario():
        # first connection: one answer kept alive, then closed by the peer; the second query opens another
        server, url, _ = await scripted_peer([OK_CL, None, OK_CL])
        connections = PeerConnections(url)
        try:
            assert (await connections.query("http://o/1", {}, timeout=5, max_body=100))[2] == b"hello"
            await asyncio.sleep(0.1)            # the peer reads the second request and closes (None)
            assert (await connections.query("http://o/2", {}, timeout=5, max_body=100))[2] == b"hello"
            assert connections.opened == 2
        finally:
            connections.close()
            server.close()

    run(scenario())


async def echoing_peer(*, close_after=None, stall=None):
    """A peer that answers each request, in order, with its target as the body (``Connection: close`` on the
    ``close_after``-th answer of a connection, then closes; no answer to a target containing ``stall``). Returns
    (server, url, connections accepted, targets read)."""
    accepted, targets = [], []

    async def serve(reader, writer):
        accepted.append(writer)
        answered = 0
        try:
            while True:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                target = head.split(b" ", 2)[1]
                targets.append(target)
                if stall is not None and stall in target:
                    await asyncio.sleep(30)
                answered += 1
                last = close_after is not None and answered == close_after
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (
                    len(target), b"Connection: close\r\n" if last else b"", target))
                await writer.drain()
                if last:
                    break
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", accepted, targets


async def queries(connections, urls, timeout=5):
    return await asyncio.gather(*(connections.query(url, {}, timeout=timeout, max_body=1000) for url in urls),
                                return_exceptions=True)


def test_concurrent_queries_are_pipelined_on_one_connection_and_each_gets_its_own_answer():
    async def scenario():
        server, url, accepted, targets = await echoing_peer()
        connections = PeerConnections(url)
        try:
            urls = [f"http://o/{i}" for i in range(peer_client.MAX_PIPELINED)]
            answers = await queries(connections, urls)
            assert [body for _, _, body in answers] == [u.encode() for u in urls]
            assert connections.opened == 1 and len(accepted) == 1            # one connection, all in flight on it
            more = [f"http://o/more/{i}" for i in range(peer_client.MAX_PIPELINED + 5)]
            answers = await queries(connections, more)                        # past the depth: a second connection
            assert [body for _, _, body in answers] == [u.encode() for u in more]
            assert connections.opened == 2
        finally:
            connections.close()
            server.close()

    run(scenario())


def test_queries_behind_a_connection_the_peer_closes_are_sent_again():
    async def scenario():
        # each connection answers 3 queries, the third with Connection: close
        server, url, accepted, targets = await echoing_peer(close_after=3)
        connections = PeerConnections(url)
        try:
            urls = [f"http://o/{i}" for i in range(8)]
            answers = await queries(connections, urls)
            assert [body for _, _, body in answers] == [u.encode() for u in urls]
            assert len(accepted) == 3                                         # 3 + 3 + 2
        finally:
            connections.close()
            server.close()

    run(scenario())


def test_a_query_that_times_out_fails_alone_and_the_ones_behind_it_are_answered():
    async def scenario():
        server, url, accepted, targets = await echoing_peer(stall=b"slow")
        connections = PeerConnections(url)
        try:
            slow = asyncio.ensure_future(connections.query("http://o/slow", {}, timeout=0.3, max_body=1000))
            await asyncio.sleep(0)
            behind = [f"http://o/{i}" for i in range(4)]
            answers = await queries(connections, behind)
            with pytest.raises(asyncio.TimeoutError):
                await slow
            assert [body for _, _, body in answers] == [u.encode() for u in behind]
            assert connections.opened == 2                                    # the stalled one was dropped
        finally:
            connections.close()
            server.close()

    run(scenario())


def test_a_cancelled_query_leaves_the_pipeline_in_step():
    async def scenario():
        server, url, accepted, targets = await echoing_peer()
        connections = PeerConnections(url)
        try:
            tasks = [asyncio.ensure_future(connections.query(f"http://o/{i}", {}, timeout=5, max_body=1000))
                     for i in range(6)]
            await asyncio.sleep(0)
            tasks[2].cancel()                    # its answer still comes, in its place, and is dropped
            answers = await asyncio.gather(*tasks, return_exceptions=True)
            assert isinstance(answers[2], asyncio.CancelledError)
            assert [a[2] for i, a in enumerate(answers) if i != 2] == [b"http://o/%d" % i for i in (0, 1, 3, 4, 5)]
            assert (await connections.query("http://o/after", {}, timeout=5, max_body=1000))[2] == b"http://o/after"
            assert connections.opened == 1
        finally:
            connections.close()
            server.close()

    run(scenario())


def test_a_peer_that_refuses_connections_fails_every_query_at_once():
    async def scenario():
        server, url, _, _ = await echoing_peer()
        server.close()
        await server.wait_closed()                 # nothing listens there any more
        connections = PeerConnections(url)
        try:
            answers = await queries(connections, [f"http://o/{i}" for i in range(3)])
            assert all(isinstance(a, PeerQueryError) and "cannot connect" in str(a) for a in answers), answers
            assert connections.connections == []
        finally:
            connections.close()

    run(scenario())


def test_a_field_sent_twice_is_both_lines_joined():
    async def scenario():
        answer = (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 2\r\ncache-control: private\r\n"
                  b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nok")
        server, url, _ = await scripted_peer([answer])
        connections = PeerConnections(url)
        try:
            status, headers, body = await connections.query("http://o/x", {}, timeout=5, max_body=100)
        finally:
            connections.close()
            server.close()
        assert headers["Cache-Control"] == "max-age=60, private" and "cache-control" not in headers
        assert headers["Set-Cookie"] == "a=1"    # never joined (RFC 9110 section 5.3): kept as first sent
        assert http_cache.cache_control(headers) == {"max-age": "60", "private": None}

    run(scenario())


def test_storing_rules_read_every_cache_control_field():
    both = CIMultiDict([("Cache-Control", "max-age=5"), ("cache-control", "no-store")])
    assert http_cache.cache_control(both) == {"max-age": "5", "no-store": None}
    assert not http_cache.request_allows_storing("GET", both)
    assert not http_cache.response_is_storable("GET", {}, 200, CIMultiDict([("Cache-Control", "max-age=60"),
                                                                              ("Cache-Control", "private")]))
