"""What operators expect of a proxy: Cache-Status (RFC 9211), Prometheus /metrics, a Squid-format access log that
`bloomwise simulate` replays, PURGE, a header deadline, and one log line per malformed request."""
import asyncio
import json
import logging
import os

import pytest

from proxy_support import config, eventually, get, get_checked, origin_and_proxies, run, summary_settled
from bloomwise.cache.summary import PeerSummary, SummaryUpdate
from bloomwise.proxy.server import BloomwiseProxy

ORIGIN_TTL = 86400   # the test origin's /doc/ documents: Cache-Control: max-age=86400


def cache_status(headers):
    """Cache-Status as [(cache, {param: value or True})], nearest the origin first (RFC 9211 section 2)."""
    entries = []
    for member in headers["Cache-Status"].split(", "):
        name, *params = member.split("; ")
        parsed = {}
        for param in params:
            key, sep, value = param.partition("=")
            parsed[key] = value if sep else True
        entries.append((name, parsed))
    return entries


# -- Cache-Status ---------------------------------------------------------------------------------------------------
def test_cache_status_on_every_response():
    async def scenario():
        async with origin_and_proxies(config(name="A"), config(name="B")) as (origin, (a, b), session):
            miss = await get_checked(session, a.url, origin, "/doc/1")
            assert cache_status(miss) == [("A", {"fwd": "uri-miss", "fwd-status": "200", "stored": True})]
            hit = await get_checked(session, a.url, origin, "/doc/1")
            [(name, params)] = cache_status(hit)
            assert name == "A" and params["hit"] is True and ORIGIN_TTL - 60 <= int(params["ttl"]) <= ORIGIN_TTL
            await eventually(lambda: b.node.peer(a.url).summary is not None
                             and f"GET {origin.url}/doc/1" in b.node.peer(a.url).summary, what="A's summary at B")
            remote = await get_checked(session, b.url, origin, "/doc/1")
            assert remote["X-Cache"].startswith("REMOTE_HIT")
            (peer, peer_params), (me, my_params) = cache_status(remote)     # the peer's entry, then B's
            assert peer == "A" and peer_params["hit"] is True
            assert me == "B" and my_params == {"fwd": "uri-miss", "fwd-status": "200", "stored": True,
                                               "detail": f'"peer {a.url}"'}
            private = await get_checked(session, a.url, origin, "/private/1")
            assert cache_status(private) == [("A", {"fwd": "uri-miss", "fwd-status": "200"})]   # not stored
            _, headers, _ = await get(session, a.url, origin.url + "/doc/1", headers={"Cache-Control": "no-cache"})
            assert cache_status(headers)[-1][1]["fwd"] == "request"
            async with session.post(origin.url + "/doc/2", proxy=a.url, data=b"x") as reply:
                assert cache_status(reply.headers) == [("A", {"fwd": "method", "fwd-status": "200"})]
            _, headers, _ = await get(session, a.url, origin.url + "/doc/9", headers={"Cache-Control": "only-if-cached"})
            assert cache_status(headers) == [("A", {"detail": "only-if-cached"})]
            _, headers, _ = await get(session, a.url, "http://127.0.0.1:1/doc/1")
            assert cache_status(headers) == [("A", {"fwd": "uri-miss", "detail": "origin-error"})]
            for path in ("/bloomwise/stats", "/nowhere"):
                async with session.get(a.url + path) as reply:
                    assert cache_status(reply.headers) == [("A", {"fwd": "bypass"})], path
    run(scenario())


def test_a_name_that_is_not_a_token_is_a_quoted_string():
    async def scenario():
        async with origin_and_proxies(config(name='cache "one"')) as (origin, (a,), session):
            headers = await get_checked(session, a.url, origin, "/doc/1")
            assert headers["Cache-Status"].startswith('"cache \\"one\\""; fwd=uri-miss')
    run(scenario())


# -- /metrics -------------------------------------------------------------------------------------------------------
def test_metrics_are_prometheus_text_that_matches_the_stats():
    parser = pytest.importorskip("prometheus_client.parser", reason="the test extra has prometheus_client")

    async def scenario():
        async with origin_and_proxies(config(name="A"), config(name="B")) as (origin, (a, b), session):
            for i in range(6):
                await get_checked(session, a.url, origin, f"/doc/{i}")
            await summary_settled(a, b)
            assert all(f"GET {origin.url}/doc/{i}" in b.node.peer(a.url).summary for i in range(6))
            for i in range(4):
                await get_checked(session, b.url, origin, f"/doc/{i}")      # remote hits
            for i in range(3):
                await get_checked(session, b.url, origin, f"/doc/{i}")      # local hits
            await get_checked(session, b.url, origin, "/doc/50")            # an origin fetch
            async with session.get(b.url + "/metrics") as reply:
                assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = await reply.text()
            families = {f.name: f for f in parser.text_string_to_metric_families(text)}
            stats = b.stats()

            def value(family, suffix="", **labels):
                [sample] = [s for s in families[family].samples
                            if s.name == family + suffix and all(s.labels.get(k) == v for k, v in labels.items())]
                return sample.value

            assert value("bloomwise_hits", "_total", kind="local") == stats["local_hits"] == 3
            assert value("bloomwise_hits", "_total", kind="remote") == stats["remote_hits"] == 4
            assert value("bloomwise_origin_fetches", "_total") == stats["origin_fetches"] == 1
            assert value("bloomwise_requests", "_total") == stats["requests"] == 8
            assert value("bloomwise_peer_queries", "_total", direction="sent") == stats["peer_queries"]
            assert value("bloomwise_false_hits", "_total") == stats["false_hits"]
            assert value("bloomwise_summary_updates", "_total", direction="in") == stats["summaries_in"] >= 1
            assert value("bloomwise_summary_bytes", "_total", direction="in") == stats["summary_bytes_in"] > 0
            assert value("bloomwise_peer_up", peer=a.url) == 1.0
            assert families["bloomwise_request_duration_seconds"].type == "histogram"
            assert value("bloomwise_request_duration_seconds", "_count", outcome="hit") == 3
            assert value("bloomwise_request_duration_seconds", "_count", outcome="remote_hit") == 4
            assert value("bloomwise_request_duration_seconds", "_count", outcome="miss") == 1
            assert value("bloomwise_request_duration_seconds", "_bucket", outcome="hit", le="+Inf") == 3
            assert value("bloomwise_peer_query_duration_seconds", "_count") == stats["peer_queries"]
            assert value("bloomwise_origin_fetch_duration_seconds", "_count") == 1
    run(scenario())


# -- the access log, replayed ---------------------------------------------------------------------------------------
def test_the_access_log_is_squid_format_and_simulate_replays_it(tmp_path, capsys):
    log_path = tmp_path / "access.log"

    async def scenario():
        async with origin_and_proxies(config(name="A", access_log=str(log_path))) as (origin, (a,), session):
            for _ in range(3):
                for i in range(10):
                    await get_checked(session, a.url, origin, f"/doc/{i}")
            await get_checked(session, a.url, origin, "/private/3")
            async with session.get(a.url + "/bloomwise/stats") as reply:   # an endpoint: not logged
                assert reply.status == 200
            return origin.url

    origin_url = run(scenario())
    lines = log_path.read_text().splitlines()
    assert len(lines) == 31
    fields = lines[0].split()
    assert len(fields) == 10 and fields[2] == "127.0.0.1" and fields[3] == "TCP_MISS/200"
    assert fields[5:8] == ["GET", f"{origin_url}/doc/0", "-"] and fields[8] == "HIER_DIRECT/127.0.0.1"
    assert fields[9] == "application/octet-stream" and float(fields[0]) > 1.7e9
    assert sum(line.split()[3] == "TCP_HIT/200" for line in lines) == 20

    from bloomwise.cli import main

    out = tmp_path / "replay.json"
    assert main(["simulate", "--trace", str(log_path), "--format", "squid", "--proxies", "1", "--policy", "none",
                 "--json", str(out)]) == 0
    capsys.readouterr()
    [result] = json.loads(out.read_text())
    # 10 documents requested three times and one more: 20 hits of 31 in a replay of the same cache
    assert result["requests"] == 31 and round(result["local_hit_ratio"] * 31) == 20, result


def test_an_access_log_that_cannot_be_written_is_closed_and_requests_go_on(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (a file every write to fails with ENOSPC)")

    async def scenario():
        async with origin_and_proxies(config(name="A", access_log="/dev/full")) as (origin, (a,), session):
            for i in range(3):
                await get_checked(session, a.url, origin, f"/doc/{i}")
            await eventually(lambda: a.stats()["access_log_errors"] == 1, what="the failed flush")
            for i in range(3):
                assert (await get_checked(session, a.url, origin, f"/doc/{i}"))["X-Cache"].startswith("HIT")
            assert a.stats()["access_log_errors"] == 1
    run(scenario())


# -- PURGE ----------------------------------------------------------------------------------------------------------
def test_purge_removes_a_document_and_the_next_summary_says_so():
    async def scenario():
        # a threshold of 50%: one purge among 5 documents (20%) would not make a summary due by itself. Resizing
        # off: re-sized for 4 documents, the summary would keep the purged key as a false positive ~2% of the time
        async with origin_and_proxies(config(name="A", update_threshold=0.5, resize_tolerance=None),
                                      config(name="B")) \
                as (origin, (a, b), session):
            for i in range(5):
                await get_checked(session, a.url, origin, f"/doc/{i}")
            key = f"GET {origin.url}/doc/2"
            await eventually(lambda: b.node.peer(a.url).summary is not None and key in b.node.peer(a.url).summary,
                             what="A's summary at B")
            version = a.node.publisher.current_version
            async with session.request("PURGE", origin.url + "/doc/2", proxy=a.url) as reply:
                assert reply.status == 200
            assert key not in a.node.cache and a.stats()["purges"] == 1
            await eventually(lambda: a.node.publisher.current_version > version, timeout=2,
                             what="a summary published after the purge")
            async with session.get(a.url + "/bloomwise/summary") as reply:
                held = PeerSummary()
                held.apply(SummaryUpdate.from_bytes(await reply.read()))
            assert key not in held and f"GET {origin.url}/doc/3" in held
            await eventually(lambda: key not in b.node.peer(a.url).summary, what="the purge in A's summary at B")
            async with session.request("PURGE", origin.url + "/doc/2", proxy=a.url) as reply:
                assert reply.status == 404
            served = origin.served["doc"]
            headers = await get_checked(session, a.url, origin, "/doc/2")
            assert headers["X-Cache"].startswith("MISS") and origin.served["doc"] == served + 1
    run(scenario())


# -- connections ----------------------------------------------------------------------------------------------------
async def _read_until_closed(reader, limit_seconds):
    """What the server sends until it closes the connection (bounded in time)."""
    received = b""
    try:
        while True:
            chunk = await asyncio.wait_for(reader.read(4096), limit_seconds)
            if not chunk:
                return received, True
            received += chunk
    except asyncio.TimeoutError:
        return received, False


def test_a_client_that_trickles_its_headers_is_dropped():
    async def scenario():
        async with origin_and_proxies(config(name="A", header_timeout=0.5)) as (origin, (a,), session):
            reader, writer = await asyncio.open_connection("127.0.0.1", a.config.port)
            request = f"GET {origin.url}/doc/1 HTTP/1.1\r\nHost: x\r\nX-Slow: {'a' * 40}\r\n\r\n".encode()
            first = b""
            for sent in range(40):                          # one byte every 0.1 s (4 s: 8 times the deadline)
                writer.write(request[sent:sent + 1])
                try:                                        # wait 0.1 s for anything the proxy says
                    first = await asyncio.wait_for(reader.read(1), 0.1)
                    break
                except asyncio.TimeoutError:
                    continue
            assert first, "the proxy kept a trickling client for 4 s"
            received, closed = await _read_until_closed(reader, 2.0)
            writer.close()
            assert closed and (first + received).startswith(b"HTTP/1.1 408"), first + received
            assert a.stats()["header_timeouts"] == 1
            # a client that connects and sends nothing is dropped too; a prompt one is served on the same terms
            reader, writer = await asyncio.open_connection("127.0.0.1", a.config.port)
            received, closed = await _read_until_closed(reader, 3.0)
            writer.close()
            assert closed and a.stats()["header_timeouts"] == 2
            headers = await get_checked(session, a.url, origin, "/doc/1")
            assert headers["X-Cache"].startswith("MISS")
    run(scenario())


def test_a_malformed_request_is_one_log_line_not_a_traceback(caplog):
    async def scenario():
        async with origin_and_proxies(config(name="A")) as (origin, (a,), session):
            await get_checked(session, a.url, origin, "/doc/1")
            for garbage in (b"GET http://x/ HTTP/1.1\r\nno colon in this header\r\n\r\n",
                            b"GET http://x/ HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 TLS hello\r\n\r\n"):
                reader, writer = await asyncio.open_connection("127.0.0.1", a.config.port)
                writer.write(garbage)
                await writer.drain()
                received, _ = await _read_until_closed(reader, 5.0)
                writer.close()
                assert received.split(b"\r\n")[0] in (b"HTTP/1.0 400 Bad Request", b"HTTP/1.1 400 Bad Request"), \
                    received[:200]
            return a.stats()["bad_requests"]

    with caplog.at_level(logging.DEBUG):
        bad = run(scenario())
    assert bad == 2                # a TLS hello on the first request is aiohttp's debug line, not a bad request
    records = [r for r in caplog.records if "Error handling request" in r.getMessage()]
    assert len(records) == 3, [r.getMessage() for r in caplog.records]
    for record in records:
        assert record.exc_info is None and "\n" not in record.getMessage(), record.getMessage()
    assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING, logging.DEBUG]
    assert "BadHttpMessage" in records[0].getMessage() and "BadHttpMethod" in records[2].getMessage()
