"""The lean hit path (bloomwise.proxy.fast_hits): fresh hits answered without aiohttp, byte for byte what the aiohttp
path sends (but Date, Age and the ttl, which are the time's), every other request handed over to aiohttp unchanged:
misses, malformed and oversized heads, pipelined requests after a miss."""
import asyncio
import re

import pytest

from proxy_support import config, exchange, get_line, normalised, origin_and_proxies, read_response, run
from bloomwise.proxy.origin import document_body



def test_hits_through_the_lean_path_are_byte_for_byte_the_aiohttp_paths():
    async def scenario():
        async with origin_and_proxies(config(), config(fast_hits=False), documents=50, link_all=False) as (
                origin, (lean, plain), session):
            paths = ["/doc/1", "/doc/2"]
            for proxy in (lean, plain):
                for path in paths:  # the misses that store them (a connection of their own: aiohttp's)
                    [(head, _)] = await exchange(proxy.config.port, get_line(origin.url + path), 1)
                    assert b"X-Cache: MISS" in head
            assert lean.stats()["fast_hits"] == 0
            seen = {}
            for proxy in (lean, plain):
                # two pipelined hits, then a peer query, in one write
                raw = (get_line(origin.url + paths[0]) + get_line(origin.url + paths[1])
                       + get_line(origin.url + paths[0], "Cache-Control: only-if-cached", "Via: 1.1 other"))
                seen[proxy] = await exchange(proxy.config.port, raw, 3)
            for (lean_head, lean_body), (plain_head, plain_body), path in zip(seen[lean], seen[plain],
                                                                              paths + paths[:1]):
                assert lean_body == plain_body == document_body(path, origin.mean_size)
                assert b"X-Cache: HIT" in lean_head
                assert normalised(lean_head, lean) == normalised(plain_head, plain)
            stats_lean, stats_plain = lean.stats(), plain.stats()
            assert stats_lean["fast_hits"] == 3 and stats_plain["fast_hits"] == 0
            for name in ("local_hits", "requests", "peer_queries_served", "requests_total"):
                assert stats_lean[name] == stats_plain[name], name
            assert stats_lean["local_hits"] == 2 and stats_lean["peer_queries_served"] == 1

    run(scenario())


def test_a_miss_in_a_pipeline_hands_the_connection_to_aiohttp_in_order():
    async def scenario():
        async with origin_and_proxies(config(), documents=50) as (origin, (proxy,), session):
            await exchange(proxy.config.port, get_line(origin.url + "/doc/1"), 1)
            raw = (get_line(origin.url + "/doc/1") + get_line(origin.url + "/doc/2") + get_line(origin.url + "/doc/1")
                   + get_line(origin.url + "/doc/1", "Cache-Control: no-cache"))
            answers = await exchange(proxy.config.port, raw, 4)
            states = [re.search(rb"X-Cache: (\w+)", head).group(1) for head, _ in answers]
            assert states == [b"HIT", b"MISS", b"HIT", b"MISS"]
            for (head, body), path in zip(answers, ["/doc/1", "/doc/2", "/doc/1", "/doc/1"]):
                assert body == document_body(path, origin.mean_size)
            stats = proxy.stats()
            assert stats["fast_hits"] == 1           # the first only: aiohttp owns the connection after the miss
            assert stats["local_hits"] == 2 and stats["requests_total"] == 5

    run(scenario())


@pytest.mark.parametrize("raw, status", [
    (b"GET http://127.0.0.1/doc/1 HTTP/1.1\r\nNo colon here\r\n\r\n", b"400"),           # malformed header
    (b"GET http://127.0.0.1/doc/1 HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", b"400"),  # oversized
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n", b"400"),  # a TLS hello
])
def test_malformed_and_oversized_heads_get_aiohttps_answer(raw, status):
    async def scenario():
        async with origin_and_proxies(config(), config(fast_hits=False), documents=5, link_all=False) as (
                origin, (lean, plain), session):
            heads = []
            for proxy in (lean, plain):
                reader, writer = await asyncio.open_connection("127.0.0.1", proxy.config.port)
                writer.write(raw)
                heads.append(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10))
                writer.close()
            assert heads[0].split(b" ")[1] == heads[1].split(b" ")[1] == status
            assert lean.stats()["bad_requests"] == plain.stats()["bad_requests"]
            assert lean.stats()["fast_hits"] == 0

    run(scenario())


def test_stale_copies_and_clients_it_does_not_serve_are_left_to_aiohttp():
    async def scenario():
        async with origin_and_proxies(config(), documents=20) as (origin, (proxy,), session):
            await exchange(proxy.config.port, get_line(origin.url + "/doc/3"), 1)
            doc = proxy.node.cache.peek("GET " + origin.url + "/doc/3")
            doc.stored_at -= 10 * 86400     # now stale: the next request is a refresh miss
            [(head, body)] = await exchange(proxy.config.port, get_line(origin.url + "/doc/3"), 1)
            assert b"X-Cache: MISS" in head and b"fwd=stale" in head
            [(head, body)] = await exchange(proxy.config.port, get_line(origin.url + "/doc/3"), 1)
            assert b"X-Cache: HIT" in head and proxy.stats()["fast_hits"] == 1
            # a client the lean path does not serve (outside --allow-clients: aiohttp then refuses it, as
            # test_proxy_access checks) goes to aiohttp, here still allowed by the proxy's own policy
            proxy.hit_path.client_allowed = lambda address: False
            [(head, body)] = await exchange(proxy.config.port, get_line(origin.url + "/doc/3"), 1)
            assert b"X-Cache: HIT" in head and proxy.stats()["fast_hits"] == 1

    run(scenario())


def test_lean_path_access_log_and_header_timeout(tmp_path):
    log_file = tmp_path / "access.log"

    async def scenario():
        async with origin_and_proxies(config(access_log=str(log_file), header_timeout=0.5), documents=5) as (
                origin, (proxy,), session):
            url = origin.url + "/doc/1"
            await exchange(proxy.config.port, get_line(url), 1)
            await exchange(proxy.config.port, get_line(url), 1)
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.config.port)
            writer.write(b"GET " + url.encode())    # never finished
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            writer.close()
            assert head.startswith(b"HTTP/1.1 408")
            stats = proxy.stats()
            assert stats["fast_hits"] == 1 and stats["header_timeouts"] == 1
        lines = log_file.read_text().splitlines()
        assert [line.split()[3] for line in lines] == ["TCP_MISS/200", "TCP_HIT/200"]
        hit = lines[1].split()
        assert hit[4] == str(len(document_body("/doc/1", origin.mean_size))) and hit[5:9] == [
            "GET", url, "-", "HIER_NONE/-"] and hit[9] == "application/octet-stream"

    run(scenario())


def test_hand_over_and_pipelined_hits_on_uvloop():
    """``bloomwise proxy`` runs on uvloop: its transports must hand a connection over (set_protocol) as asyncio's do."""
    uvloop = pytest.importorskip("uvloop", reason="uvloop (proxy extra) is not installed")

    async def scenario():
        async with origin_and_proxies(config(), documents=20) as (origin, (proxy,), session):
            assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
            url = origin.url + "/doc/4"
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.config.port)
            states = []
            for _ in range(3):  # a miss (the connection is handed over), then two hits sent later on it: aiohttp's
                writer.write(get_line(url))
                head, _ = await read_response(reader)
                states.append(re.search(rb"X-Cache: (\w+)", head).group(1))
            writer.close()
            assert states == [b"MISS", b"HIT", b"HIT"] and proxy.stats()["fast_hits"] == 0
            answers = await exchange(proxy.config.port, get_line(url) * 5, 5)  # five pipelined lean hits
            assert all(body == document_body("/doc/4", origin.mean_size) for _, body in answers)
            assert proxy.stats()["fast_hits"] == 5

    async def bounded():
        await asyncio.wait_for(scenario(), 60)

    uvloop.run(bounded())


def test_the_proxys_own_endpoints_are_never_answered_from_the_cache():
    async def scenario():
        async with origin_and_proxies(config(), documents=5) as (origin, (proxy,), session):
            stats_url = proxy.url + "/bloomwise/stats"
            proxy.node.admit("GET " + stats_url, 6, b"cached", {"Cache-Control": "max-age=600"})  # planted
            [(head, body)] = await exchange(proxy.config.port, get_line(stats_url), 1)
            assert head.startswith(b"HTTP/1.1 200") and body.startswith(b"{") and b'"fast_hits": 0' in body

    run(scenario())


def test_no_fast_hits_option_turns_the_lean_path_off():
    import argparse

    from bloomwise.cli import proxy as proxy_cli

    parser = proxy_cli.register(argparse.ArgumentParser().add_subparsers())
    assert proxy_cli.config_from_args(parser.parse_args([])).fast_hits is True
    assert proxy_cli.config_from_args(parser.parse_args(["--no-fast-hits"])).fast_hits is False

    async def scenario():
        async with origin_and_proxies(config(fast_hits=False), documents=5) as (origin, (proxy,), session):
            assert proxy.hit_path is None
            for _ in range(2):
                await exchange(proxy.config.port, get_line(origin.url + "/doc/1"), 1)
            assert proxy.stats()["local_hits"] == 1 and proxy.stats()["fast_hits"] == 0

    run(scenario())


def test_a_client_that_pipelines_and_reads_slowly_is_paused_not_timed_out():
    """6,000 pipelined hits (about 9 MB of answers: more than the socket buffers hold, which Linux grows up to 4 MB
    for the sender by default) sent at once and read 1.5 s later, with a 0.5 s header deadline: the proxy stops
    reading while the client does not read (bounded memory), and complete heads that wait for it are not late."""
    HITS = 6000

    async def scenario():
        async with origin_and_proxies(config(header_timeout=0.5), documents=5) as (origin, (proxy,), session):
            url = origin.url + "/doc/2"
            await exchange(proxy.config.port, get_line(url), 1)
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.config.port)
            writer.write(get_line(url) * HITS)
            await asyncio.sleep(1.5)
            assert proxy.stats()["fast_hits"] < HITS          # paused: not all answered before the client read
            bodies = [(await read_response(reader))[1] for _ in range(HITS)]
            writer.close()
            assert set(bodies) == {document_body("/doc/2", origin.mean_size)}
            assert proxy.stats()["fast_hits"] == HITS and proxy.stats()["header_timeouts"] == 0

    run(scenario())


def test_peer_queries_for_documents_not_stored_get_aiohttps_504_from_the_lean_path():
    async def scenario():
        async with origin_and_proxies(config(), config(fast_hits=False), documents=50, link_all=False) as (
                origin, (lean, plain), session):
            stored, stale, absent = (origin.url + p for p in ("/doc/1", "/doc/2", "/doc/3"))
            for proxy in (lean, plain):
                for url in (stored, stale):
                    await exchange(proxy.config.port, get_line(url), 1)
                proxy.node.cache.peek("GET " + stale).stored_at -= 10 * 86400   # now stale
            query = ("Cache-Control: only-if-cached", "Via: 1.1 other")
            seen = {}
            for proxy in (lean, plain):   # one connection: a hit, two misses (absent, stale), a hit
                raw = b"".join(get_line(url, *query) for url in (stored, absent, stale, stored))
                seen[proxy] = await exchange(proxy.config.port, raw, 4)
            for (lean_head, lean_body), (plain_head, plain_body) in zip(seen[lean], seen[plain]):
                assert normalised(lean_head, lean) == normalised(plain_head, plain)
                assert lean_body == plain_body
            assert [head.split(b" ")[1] for head, _ in seen[lean]] == [b"200", b"504", b"504", b"200"]
            stats_lean, stats_plain = lean.stats(), plain.stats()
            # all four answered on the lean path: the connection was never handed to aiohttp
            assert stats_lean["fast_hits"] == 2 and stats_lean["fast_peer_misses"] == 2
            for name in ("peer_queries_served", "requests_total", "requests", "local_hits"):
                assert stats_lean[name] == stats_plain[name], name
            for proxy in (lean, plain):   # the stale copy was dropped, from the cache and the summary
                assert proxy.node.cache.peek("GET " + stale) is None
                assert "GET " + stale not in proxy.advertised and "GET " + stored in proxy.advertised

    run(scenario())
