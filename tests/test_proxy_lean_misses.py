"""Remote hits answered by the lean path (BloomwiseProxy.lean_miss with bloomwise.proxy.fast_hits): byte for byte
what the aiohttp path sends (but Date and Age), the same stored copy, counters, metrics and access log; the counters
equal what clients saw at concurrency 32; collapsed requests follow their leader on the lean path (one peer query);
requests pipelined behind a remote hit wait for it; and a peer that dies mid-answer, answers garbage or says miss is
asked once, the origin fetched once, the client served the origin's document."""
import argparse
import asyncio
import collections
import contextlib
import re
import socket
import struct

import pytest

from proxy_support import (config, eventually, exchange, get_checked, get_line, normalised, origin_and_proxies,
                           origin_served, read_response, run, scripted_origin, summary_settled)
from bloomwise.cache import DocumentCache, SummaryPublisher
from bloomwise.cli import proxy as proxy_cli
from bloomwise.proxy import fast_hits, http_cache
from bloomwise.proxy.access import ClientPolicy
from bloomwise.proxy.origin import document_body
from bloomwise.proxy.peers import SUMMARY_CONTENT_TYPE


CONCURRENCY = 32


def x_cache(head: bytes) -> str:
    return re.search(rb"\r\nX-Cache: (\w+)", head).group(1).decode()


async def summary_holds(asker, holder, urls):
    await summary_settled(holder, asker)   # a key in a summary of a few documents may be a false positive
    assert all(f"GET {u}" in asker.node.peer(holder.url).summary for u in urls)


def test_remote_hits_of_the_lean_path_are_byte_for_byte_the_aiohttp_paths(tmp_path):
    async def scenario():
        logs = {"lean": tmp_path / "lean.log", "plain": tmp_path / "plain.log"}
        async with origin_and_proxies(config(name="holder"), config(name="asker", access_log=str(logs["lean"])),
                                      config(name="asker", access_log=str(logs["plain"]), lean_misses=False),
                                      documents=50, link_all=False) as (origin, (holder, lean, plain), session):
            paths = ["/doc/1", "/doc/2", "/doc/3"]
            for path in paths:
                await get_checked(session, holder.url, origin, path)
            for asker in (lean, plain):
                asker.add_peer(holder.url)
                await summary_holds(asker, holder, [origin.url + p for p in paths])
            seen = {}
            for asker in (lean, plain):
                # a remote hit stored, one not stored (the client says no-store), then the stored copy as a hit,
                # pipelined on one connection
                raw = (get_line(origin.url + paths[0]) + get_line(origin.url + paths[1], "Cache-Control: no-store")
                       + get_line(origin.url + paths[0]) + get_line(origin.url + paths[2]))
                seen[asker] = await exchange(asker.config.port, raw, 4)
            for (lean_head, lean_body), (plain_head, plain_body), path in zip(seen[lean], seen[plain],
                                                                              paths[:2] + paths[:1] + paths[2:]):
                assert lean_body == plain_body == document_body(path, origin.mean_size)
                assert normalised(lean_head, lean) == normalised(plain_head, plain), (lean_head, plain_head)
            assert [x_cache(h) for h, _ in seen[lean]] == ["REMOTE_HIT", "REMOTE_HIT", "HIT", "REMOTE_HIT"]
            assert b"; stored; detail=" in seen[lean][0][0] and b"; stored" not in seen[lean][1][0]
            assert b"X-Bloomwise-Peer: " + holder.url.encode() in seen[lean][0][0]
            # the same copies stored, the same counters
            for path, stored in zip(paths, (True, False, True)):
                key = f"GET {origin.url}{path}"
                assert (key in lean.node.cache) is (key in plain.node.cache) is stored
                if stored:
                    assert lean.node.cache.peek(key).headers == plain.node.cache.peek(key).headers
            stats_lean, stats_plain = lean.stats(), plain.stats()
            assert stats_lean["fast_remote_hits"] == 3 and stats_plain["fast_remote_hits"] == 0
            for name in ("requests", "local_hits", "remote_hits", "origin_fetches", "peer_queries", "false_hits",
                         "requests_total", "peer_queries_sent", "collapsed_requests", "advertised_documents"):
                assert stats_lean[name] == stats_plain[name], name
            assert stats_lean["timing"]["misses"] == stats_plain["timing"]["misses"] == 3
            for asker in (lean, plain):
                assert sum(asker.metrics.requests["remote_hit"].counts) == 3
            await eventually(lambda: all(len(p.read_text().splitlines()) == 4 for p in logs.values()),
                             what="the access logs flushed (every second)")
            lines = {name: [line.split()[2:] for line in path.read_text().splitlines()] for name, path in logs.items()}
            assert lines["lean"] == lines["plain"] and len(lines["lean"]) == 4
            size = str(len(document_body(paths[0], origin.mean_size)))
            assert lines["lean"][0][1:] == ["TCP_MISS/200", size, "GET", origin.url + paths[0], "-",
                                            "SIBLING_HIT/127.0.0.1", "application/octet-stream"]

    run(scenario())


def test_counters_equal_what_clients_saw_at_concurrency_32():
    async def scenario():
        async with origin_and_proxies(config(name="holder"), config(name="asker"), documents=400) as (
                origin, (holder, asker), session):
            remote = [f"/doc/{i}" for i in range(48)]         # held by the holder only
            fresh = [f"/doc/{i}" for i in range(200, 216)]    # held by nobody
            for path in remote:
                await get_checked(session, holder.url, origin, path)
            await summary_holds(asker, holder, [origin.url + p for p in remote])
            # each remote document asked by two connections at once (collapsed forwarding meets the lean path),
            # some with no-store; the fresh ones once
            requests = [(p, i % 3 == 0) for i, p in enumerate(remote + remote)] + [(p, False) for p in fresh]
            order = [requests[(i * 37) % len(requests)] for i in range(len(requests))]
            gate = asyncio.Semaphore(CONCURRENCY)

            async def one(path, no_store):
                async with gate:
                    [(head, body)] = await exchange(asker.config.port, get_line(
                        origin.url + path, *(["Cache-Control: no-store"] if no_store else [])), 1)
                assert body == document_body(path, origin.mean_size)
                return head

            heads = await asyncio.gather(*(one(p, s) for p, s in order))
            seen = collections.Counter(x_cache(h) for h in heads)
            collapsed = sum(b"collapsed" in h for h in heads)
            stats = asker.stats()
            assert stats["requests"] == len(order) == sum(seen.values())
            assert (stats["local_hits"], stats["remote_hits"], stats["origin_fetches"] + stats["collapsed_requests"]) \
                == (seen["HIT"], seen["REMOTE_HIT"], seen["MISS"]), (stats, seen)
            assert stats["collapsed_requests"] == collapsed
            assert stats["fast_remote_hits"] > 0 and stats["remote_hits"] >= len(remote)
            assert sum(asker.metrics.requests["remote_hit"].counts) == seen["REMOTE_HIT"]

    run(scenario())


SLOW_BODY = b"the peer's copy " * 64


class ScriptedPeer:
    """A peer over raw sockets: its summary lists ``keys``; its answer to a peer query is ``mode``: "die" (the head
    and half the body, then the connection closes), "garbage" (bytes that are not HTTP), "miss" (504) or "slow-hit"
    (a cacheable 200 with ``SLOW_BODY``, after 0.5 s) or "odd-hit" (the same at once, with a header that is not
    ASCII)."""

    def __init__(self, mode: str, keys):
        cache = DocumentCache(2**20, bits_per_entry=8, expected_entries=200)
        for key in keys:
            cache.put(key, 100)
        self.summary = SummaryPublisher(cache).whole_summary().to_bytes()
        self.mode = mode
        self.queries = collections.Counter()    # the absolute URLs asked
        self.server = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def start(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def _serve(self, reader, writer):
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            method, target = head.split(b" ", 2)[:2]
            length = re.search(rb"\r\ncontent-length: (\d+)", head, re.I)
            if length:
                await reader.readexactly(int(length.group(1)))
            if target.startswith(b"/bloomwise/summary"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + SUMMARY_CONTENT_TYPE.encode()
                             + b"\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(self.summary)
                             + self.summary)
            elif method == b"GET" and target.startswith(b"http://"):
                self.queries[target.decode()] += 1
                if self.mode == "die":
                    writer.write(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 1000\r\n\r\n"
                                 + b"x" * 500)
                elif self.mode == "garbage":
                    writer.write(b"\x00\x17garbage that is not HTTP\r\n\r\n\xff\xfe")
                elif self.mode == "odd-hit":   # a header value that is not ASCII: aiohttp serialises the reply
                    writer.write(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nX-Label: caf\xc3\xa9\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(SLOW_BODY) + SLOW_BODY)
                elif self.mode == "split-cc":   # private in the middle of three Cache-Control fields
                    writer.write(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nCache-Control: private\r\n"
                                 b"Cache-Control: max-age=600\r\nConnection: close\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(SLOW_BODY) + SLOW_BODY)
                elif self.mode == "slow-hit":
                    await asyncio.sleep(0.5)
                    writer.write(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nConnection: close\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(SLOW_BODY) + SLOW_BODY)
                else:
                    writer.write(b"HTTP/1.1 504 Gateway Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self):
        self.server.close()


@contextlib.asynccontextmanager
async def asker_with_scripted_peer(mode: str, paths, **settings):
    """An origin of 50 documents, a proxy "asker" (``config(**settings)``; summaries pulled at start only) and a
    ScriptedPeer(mode) holding the origin's ``paths``, as its peer: yields (origin, asker, session, peer)."""
    async with origin_and_proxies(config(name="asker", summary_interval=30.0, **settings), documents=50) as (
            origin, (asker,), session):
        async with scripted_peer_of(asker, mode, [f"GET {origin.url}{p}" for p in paths]) as peer:
            yield origin, asker, session, peer


@contextlib.asynccontextmanager
async def scripted_peer_of(asker, mode: str, keys):
    """A ScriptedPeer(mode, keys) added as ``asker``'s peer, once ``asker`` holds its summary; stopped on exit."""
    peer = await ScriptedPeer(mode, keys).start()
    try:
        asker.add_peer(peer.url)
        await eventually(lambda: asker.node.peer(peer.url).summary is not None, what="the peer's summary")
        yield peer
    finally:
        await peer.stop()


@pytest.mark.parametrize("mode", ["die", "garbage", "miss"])
def test_a_peer_that_fails_or_misses_is_asked_once_and_the_origin_fetched_once(mode):
    async def scenario():
        paths = ["/doc/5", "/doc/6"]
        async with asker_with_scripted_peer(mode, paths) as (origin, asker, session, peer):
            served_before = await origin_served(session, origin)
            [(head, body)] = await exchange(asker.config.port, get_line(origin.url + paths[0]), 1)
            assert head.startswith(b"HTTP/1.1 200") and x_cache(head) == "MISS"
            assert body == document_body(paths[0], origin.mean_size)
            assert peer.queries == {origin.url + paths[0]: 1}            # asked once
            served = await origin_served(session, origin)
            assert served["doc"] - served_before["doc"] == 1              # fetched once
            stats = asker.stats()
            assert stats["origin_fetches"] == 1 and stats["remote_hits"] == 0 and stats["requests"] == 1
            assert stats["requests_total"] == 1 and stats["fast_remote_hits"] == 0
            assert stats["peer_queries_sent"] == 1 and stats["timing"]["misses"] == 1
            if mode == "miss":
                assert stats["false_hits"] == 1 and stats["peers"][peer.url]["healthy"] is True
            else:
                assert stats["peer_failures"] == 1 and stats["peers"][peer.url]["healthy"] is False
            assert f"GET {origin.url}{paths[0]}" in asker.node.cache       # the origin's copy stored
            assert asker.fetches_in_flight == 0                                        # the miss ended
            # the next one on the same connection kind: still served, the peer asked again only if healthy
            [(head, body)] = await exchange(asker.config.port, get_line(origin.url + paths[1]), 1)
            assert body == document_body(paths[1], origin.mean_size)
            assert peer.queries[origin.url + paths[1]] == (1 if mode == "miss" else 0)

    run(scenario())


@pytest.mark.parametrize("leaving", ["fin", "reset"])
def test_a_client_that_leaves_while_the_peers_are_asked_leaves_no_fetch_in_flight(leaving):
    async def scenario():
        async with asker_with_scripted_peer("miss", ["/doc/7"], peer_timeout=0.5) as (origin, asker, session, peer):
            url = origin.url + "/doc/7"
            reader, writer = await asyncio.open_connection("127.0.0.1", asker.config.port)
            writer.write(get_line(url))
            await writer.drain()
            if leaving == "reset":    # a close with SO_LINGER 0 sends RST: the proxy loses the connection
                writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                           struct.pack("ii", 1, 0))
            writer.close()            # gone before the peers answered
            await eventually(lambda: peer.queries[url] == 1, what="the peer query")
            await eventually(lambda: asker.fetches_in_flight == 0, what="the miss to end")
            [(head, body)] = await exchange(asker.config.port, get_line(url), 1)   # not waiting on a lost leader
            assert body == document_body("/doc/7", origin.mean_size)

    run(scenario())


async def two_requests(port, url):
    """Two GETs of ``url`` on one connection, the second sent when the first is answered: both responses."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        answers = []
        for _ in range(2):
            writer.write(get_line(url))
            answers.append(await read_response(reader))
        return answers
    finally:
        writer.close()


def test_concurrent_misses_for_one_url_held_by_a_peer_make_one_peer_query():
    async def scenario():
        async with origin_and_proxies(config(name="asker", summary_interval=30.0),
                                      config(name="asker", summary_interval=30.0, lean_misses=False),
                                      documents=50, link_all=False) as (origin, (lean, plain), session):
            url = origin.url + "/doc/8"
            seen, peer_urls = {}, {}
            for asker in (lean, plain):
                async with scripted_peer_of(asker, "slow-hit", [f"GET {url}"]) as peer:
                    peer_urls[asker] = peer.url.encode()
                    served_before = await origin_served(session, origin)
                    # the first leads (its peer answers after 0.5 s), the nine others wait for it (collapsed
                    # forwarding); then each connection asks again: a local hit
                    seen[asker] = await asyncio.gather(*(two_requests(asker.config.port, url) for _ in range(10)))
                    assert peer.queries == {url: 1}
                    assert (await origin_served(session, origin)) == served_before
                firsts = [first for first, second in seen[asker]]
                assert all(body == SLOW_BODY for _, body in firsts)
                assert collections.Counter(x_cache(h) for h, _ in firsts) == {"REMOTE_HIT": 1, "MISS": 9}
                assert sum(b"collapsed" in h for h, _ in firsts) == 9
                assert all(x_cache(h) == "HIT" and body == SLOW_BODY for (_, _), (h, body) in seen[asker])
                stats = asker.stats()
                assert (stats["remote_hits"], stats["collapsed_requests"], stats["origin_fetches"]) == (1, 9, 0)
                assert stats["requests"] == 20 and stats["local_hits"] == 10
                assert sum(asker.metrics.requests["collapsed"].counts) == 9
            # the lean path answered the leader and the nine followers itself: every connection stayed with it
            assert (lean.stats()["fast_remote_hits"], lean.stats()["fast_hits"]) == (1, 10)
            assert (plain.stats()["fast_remote_hits"], plain.stats()["fast_hits"]) == (0, 0)
            # byte for byte what aiohttp's path sends (but Date, Age, the ttl and the proxy's address)
            heads = {asker: sorted(normalised(h, asker).replace(peer_urls[asker], b"PEER") for (h, _), _ in seen[asker])
                     for asker in (lean, plain)}
            assert heads[lean] == heads[plain]

    run(scenario())


def test_no_lean_misses_leaves_the_peers_to_aiohttp():
    parser = proxy_cli.register(argparse.ArgumentParser().add_subparsers())
    assert proxy_cli.config_from_args(parser.parse_args([])).lean_misses is True
    assert proxy_cli.config_from_args(parser.parse_args(["--no-lean-misses"])).lean_misses is False


def test_requests_pipelined_behind_a_miss_wait_for_it_and_are_answered_in_order():
    async def scenario():
        async with asker_with_scripted_peer("slow-hit", ["/doc/9"]) as (origin, asker, session, peer):
            url = origin.url + "/doc/9"
            # the remote hit (its peer answers after 0.5 s); while it is asked, over 64 KiB of requests for the
            # same URL: the proxy stops reading until the peer has answered, then serves them as local hits
            behind = 6000
            raw = get_line(url) * behind
            assert len(raw) > fast_hits.MAX_BUFFERED_WHILE_ASKING
            reader, writer = await asyncio.open_connection("127.0.0.1", asker.config.port)
            try:
                writer.write(get_line(url))
                await eventually(lambda: peer.queries[url] == 1, what="the peer query")
                writer.write(raw)
                answers = [await read_response(reader) for _ in range(1 + behind)]
            finally:
                writer.close()
            assert [x_cache(h) for h, _ in answers] == ["REMOTE_HIT"] + ["HIT"] * behind
            assert all(body == SLOW_BODY for _, body in answers)
            assert peer.queries == {url: 1}
            stats = asker.stats()
            assert (stats["fast_remote_hits"], stats["fast_hits"], stats["requests"]) == (1, behind, 1 + behind)

    run(scenario())


def test_a_remote_hit_the_lean_path_cannot_serialise_is_answered_by_aiohttp_without_a_second_query():
    async def scenario():
        async with asker_with_scripted_peer("odd-hit", ["/doc/10"]) as (origin, asker, session, peer):
            url = origin.url + "/doc/10"
            served_before = await origin_served(session, origin)
            [(head, body)] = await exchange(asker.config.port, get_line(url), 1)
            assert x_cache(head) == "REMOTE_HIT" and body == SLOW_BODY and b"\r\nX-Label: caf" in head
            assert peer.queries == {url: 1}                                  # asked once
            assert (await origin_served(session, origin)) == served_before
            stats = asker.stats()
            assert (stats["remote_hits"], stats["fast_remote_hits"], stats["origin_fetches"]) == (1, 0, 0)
            assert stats["requests"] == stats["requests_total"] == 1 and stats["timing"]["misses"] == 1
            assert f"GET {url}" in asker.node.cache and asker.fetches_in_flight == 0

    run(scenario())


def test_a_peer_that_is_not_an_allowed_client_has_its_queries_answered_by_the_lean_path():
    async def scenario():
        # the holder's clients: 127.0.0.2 only (the test's); the asker, on 127.0.0.1, is its peer, not its client
        async with origin_and_proxies(config(name="holder", clients=ClientPolicy.parse("127.0.0.2")),
                                      config(name="asker"), documents=50) as (origin, (holder, asker), session):
            paths = [f"/doc/{i}" for i in range(5)]
            for path in paths:
                reader, writer = await asyncio.open_connection("127.0.0.1", holder.config.port,
                                                               local_addr=("127.0.0.2", 0))
                try:
                    writer.write(get_line(origin.url + path))
                    head, body = await read_response(reader)
                finally:
                    writer.close()
                assert x_cache(head) == "MISS" and body == document_body(path, origin.mean_size)
            [(head, _)] = await exchange(holder.config.port, get_line(origin.url + paths[0]), 1)
            assert head.startswith(b"HTTP/1.1 403")                       # 127.0.0.1 is not its client
            await summary_holds(asker, holder, [origin.url + p for p in paths])
            for path in paths:
                [(head, body)] = await exchange(asker.config.port, get_line(origin.url + path,
                                                                            "Cache-Control: no-store"), 1)
                assert x_cache(head) == "REMOTE_HIT" and body == document_body(path, origin.mean_size)
            stats = holder.stats()
            assert stats["peer_queries_served"] == len(paths) and stats["fast_hits"] == len(paths)
            assert stats["clients_refused"] == 1

    run(scenario())


def test_a_remembered_remote_hit_head_is_reused_only_where_the_answer_is_the_same():
    """A peer's reply within one second has the same headers (its Date and Age): the lean path reuses the head it
    made for it, but only for a request with the same storing rules: a no-store request's copy is not kept, the
    next plain request's is (and says so in Cache-Status)."""
    async def scenario():
        async with origin_and_proxies(config(name="holder"), config(name="asker"), documents=50) as (
                origin, (holder, asker), session):
            paths = [f"/doc/{i}" for i in range(8)]
            for path in paths:
                await get_checked(session, holder.url, origin, path)
            await summary_holds(asker, holder, [origin.url + p for p in paths])
            same_second = 0
            for path in paths:   # until two replies of one second were seen (the head is then remembered)
                raw = get_line(origin.url + path, "Cache-Control: no-store") + get_line(origin.url + path)
                (first, _), (second, body) = await exchange(asker.config.port, raw, 2)
                assert x_cache(first) == x_cache(second) == "REMOTE_HIT"
                assert b"; stored" not in first and b"; stored; detail=" in second
                assert f"GET {origin.url}{path}" in asker.node.cache
                assert body == document_body(path, origin.mean_size)
                date = re.compile(rb"\r\nDate: ([^\r]+)")
                if date.search(first).group(1) == date.search(second).group(1):
                    same_second += 1
                    if same_second == 2:
                        break
            assert same_second == 2

    run(scenario())


def test_replies_of_one_length_with_other_headers_each_reach_their_client():
    """The remembered remote-hit heads are told apart by the whole reply head: two documents of one length that
    differ in one header each get their own (asked twice each, so that both heads are remembered)."""
    def reply(head):   # the document's name (the path's last part) in X-Document, the same 4-byte body
        return (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nX-Document: " + head.split(b" ", 2)[1][-1:] +
                b"\r\nContent-Length: 4\r\n\r\nsame")

    async def scenario():
        async with scripted_origin(reply) as base, origin_and_proxies(
                config(name="holder"), config(name="asker"), documents=5) as (origin, (holder, asker), session):
            for name in "ab":
                async with session.get(f"{base}/same/{name}", proxy=holder.url) as answer:
                    assert await answer.read() == b"same"
            await summary_holds(asker, holder, [f"{base}/same/a", f"{base}/same/b"])
            raw = b"".join(get_line(f"{base}/same/{name}", "Cache-Control: no-store") for name in "abab")
            answers = await exchange(asker.config.port, raw, 4)
            for (head, body), name in zip(answers, "abab"):
                assert x_cache(head) == "REMOTE_HIT" and body == b"same"
                assert b"\r\nX-Document: " + name.encode() + b"\r\n" in head, head

    run(scenario())


def test_a_reply_that_says_private_in_any_of_its_cache_control_fields_is_not_stored():
    async def scenario():
        async with asker_with_scripted_peer("split-cc", ["/doc/5"]) as (origin, asker, session, peer):
            key = f"GET {origin.url}/doc/5"
            [(head, body)] = await exchange(asker.config.port, get_line(origin.url + "/doc/5"), 1)
            assert x_cache(head) == "REMOTE_HIT" and body == SLOW_BODY
            assert b"Cache-Control: max-age=600, private, max-age=600\r\n" in head
            assert b"; stored" not in head and key not in asker.node.cache
            assert peer.queries == {origin.url + "/doc/5": 1}

    run(scenario())


def test_a_paradox_miss_asks_its_peers_in_turn_from_callbacks_without_a_task(monkeypatch):
    """lean_miss_now: one peer at a time (the paradox policy), the next asked from the first's answer, no task."""
    async def no_task(url, key, request_headers):
        raise AssertionError("the lean miss went through lean_miss in a task")

    async def scenario():
        path = "/doc/9"
        async with asker_with_scripted_peer("miss", [path], policy="paradox") as (origin, asker, session, first):
            async with scripted_peer_of(asker, "miss", [f"GET {origin.url}{path}"]) as second:
                await get_checked(session, asker.url, origin, "/doc/1")   # the origin's address checked once
                monkeypatch.setattr(asker.hit_path, "lean_miss", no_task)   # the task's path: a 500
                [(head, body)] = await exchange(asker.config.port, get_line(origin.url + path), 1)
                assert x_cache(head) == "MISS" and body == document_body(path, origin.mean_size)
                assert first.queries[origin.url + path] == second.queries[origin.url + path] == 1  # in turn, once
                stats = asker.stats()
                assert (stats["peer_queries_sent"], stats["false_hits"], stats["origin_fetches"]) == (2, 2, 2)
                assert stats["requests"] == stats["requests_total"] == 2 and stats["timing"]["misses"] == 2
                assert asker.fetches_in_flight == 0

    run(scenario())


@pytest.mark.parametrize("checked", [False, True])
def test_a_bug_on_a_lean_remote_hit_is_a_500_and_ends_the_miss(checked, monkeypatch):
    """In a task (the destination not checked yet: lean_miss) and from callbacks (checked: lean_miss_now)."""
    async def scenario():
        async with asker_with_scripted_peer("split-cc", ["/doc/4"]) as (origin, asker, session, peer):
            if checked:
                await get_checked(session, asker.url, origin, "/doc/1")

            def broken(*args, **kwargs):
                raise RuntimeError("a bug in the remote hit")

            monkeypatch.setattr(http_cache, "request_allows_storing", broken)   # read by every remote hit
            reader, writer = await asyncio.open_connection("127.0.0.1", asker.config.port)
            writer.write(get_line(origin.url + "/doc/4"))
            head = await asyncio.wait_for(reader.read(), 5)          # answered, then closed
            writer.close()
            assert head.startswith(b"HTTP/1.1 500 ") and b"Connection: close" in head
            assert asker.fetches_in_flight == 0 and asker.stats()["timing"]["misses"] == 1 + checked

    run(scenario())
