"""Faults: peers that are down, slow or answer garbage; summaries and digests that fail their checks; a proxy killed
and restarted. In every case client requests succeed and every body is the origin's document."""
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from proxy_support import (FakePeer, config, eventually, get_checked, origin_and_proxies, run, web)
from bloomwise.cache import DocumentCache, SummaryPublisher
from bloomwise.cache.squid_digest import DIGEST_PATH, CacheDigest
from bloomwise.proxy.cluster import Cluster
from bloomwise.proxy.origin import document_body
from bloomwise.proxy.squid import free_port


def _dead_url():
    return f"http://127.0.0.1:{free_port()}"   # nothing listens there


@pytest.mark.parametrize("fault", ["down", "slow", "garbage"])
def test_a_failing_peer_is_skipped_marked_unhealthy_and_retried(fault):
    async def scenario():
        fake = None
        if fault == "down":
            bad_url = _dead_url()
        else:
            fake = await FakePeer(fault, delay=5.0).start()
            bad_url = fake.url
        try:
            # icp asks every healthy peer, so the bad one is asked on the first miss
            async with origin_and_proxies(config(name="A", policy="icp"), config(name="B", policy="icp")) \
                    as (origin, (a, b), session):
                b.add_peer(bad_url)
                for i in range(5):
                    await get_checked(session, a.url, origin, f"/doc/{i}")
                started = time.monotonic()
                for i in range(10):                          # 5 held by A, 5 by nobody
                    await get_checked(session, b.url, origin, f"/doc/{i}")
                assert time.monotonic() - started < 20
                stats = b.stats()
                bad = stats["peers"][bad_url]
                assert bad["healthy"] is False and bad["failures"] >= 1 and bad["last_error"]
                assert stats["peers"][a.url]["healthy"] is True
                assert stats["remote_hits"] == 5
                # it is retried later (the pull loop tries again after retry_after, doubling)
                failures = bad["failures"]
                await eventually(lambda: b.stats()["peers"][bad_url]["failures"] > failures, timeout=15,
                                 what="a retry of the failing peer")
        finally:
            if fake is not None:
                await fake.stop()
    run(scenario())


@pytest.mark.parametrize("misbehaviour", ["status-500", "too-slow", "truncated-body"])
def test_a_peer_whose_summary_says_maybe_but_whose_answer_fails(misbehaviour):
    # The peer's summary is valid and lists the documents, so the summary policy asks it; its answers fail.
    state = {"summary": None}

    async def handler(request):
        if request.path == "/bloomwise/summary":
            return web.Response(body=state["summary"], content_type="application/x-bloomwise-summary")
        if misbehaviour == "status-500":
            return web.Response(status=500, text="boom")
        if misbehaviour == "too-slow":
            await asyncio.sleep(3.0)
            return web.Response(status=504)
        response = web.StreamResponse(headers={"Content-Length": "5000"})
        await response.prepare(request)
        await response.write(b"only a few bytes")
        request.transport.close()
        return response

    async def scenario():
        fake = await FakePeer("app", handler=handler).start()
        try:
            async with origin_and_proxies(config(name="B", summary_interval=30.0, peer_timeout=1.0)) \
                    as (origin, (b,), session):
                state["summary"] = _valid_summary([f"GET {origin.url}/doc/{i}" for i in range(10)])
                b.add_peer(fake.url)
                await eventually(lambda: b.node.peer(fake.url).summary is not None, what="the peer's summary")
                for i in range(3):
                    headers = await get_checked(session, b.url, origin, f"/doc/{i}")
                    assert headers["X-Cache"].startswith("MISS")
                stats = b.stats()
                assert stats["peer_failures"] == 1                   # asked once, then skipped as unhealthy
                assert stats["peers"][fake.url]["healthy"] is False
                assert stats["origin_fetches"] == 3 and stats["remote_hits"] == 0
        finally:
            await fake.stop()
    run(scenario())


def _valid_summary(keys):
    cache = DocumentCache(2**20, bits_per_entry=8, expected_entries=200)
    for key in keys:
        cache.put(key, 100)
    return SummaryPublisher(cache).whole_summary().to_bytes()


def test_a_summary_that_fails_its_checks_is_rejected_and_the_previous_one_kept():
    keys = [f"GET http://127.0.0.1:1/doc/{i}" for i in range(50)]
    good = _valid_summary(keys)
    corrupted = bytearray(good)
    corrupted[len(good) // 2] ^= 0x40                        # a payload bit: the checksum no longer matches
    answers = [good]

    async def handler(request):
        if request.path == "/bloomwise/summary":
            body = answers[0] if len(answers) == 1 else answers.pop(0)
            return web.Response(body=bytes(body), content_type="application/x-bloomwise-summary")
        return web.Response(status=504)

    async def scenario():
        fake = await FakePeer("app", handler=handler).start()
        try:
            async with origin_and_proxies(config(name="B", summary_interval=0.2)) as (origin, (b,), session):
                b.add_peer(fake.url)
                await eventually(lambda: b.node.peer(fake.url).summary is not None, what="the first summary")
                held = b.node.peer(fake.url).summary
                answers[:] = [bytes(corrupted), good[:40], bytes(corrupted)]
                await eventually(lambda: b.stats()["summaries_rejected"] >= 3, what="three rejections")
                assert b.node.peer(fake.url).summary is held and held.version == 1
                assert all(key in held for key in keys)
                assert b.stats()["peers"][fake.url]["summaries_rejected"] >= 3
                # it keeps sending invalid summaries: unhealthy (routing skips it), and healthy again once valid
                await eventually(lambda: not b.stats()["peers"][fake.url]["healthy"], what="the peer unhealthy")
                assert "invalid summaries in a row" in b.stats()["peers"][fake.url]["last_error"]
                assert not b.node.peer(fake.url).healthy
                answers[:] = [good]
                await eventually(lambda: b.stats()["peers"][fake.url]["healthy"], what="the peer healthy again")
        finally:
            await fake.stop()
    run(scenario())


def test_a_squid_digest_that_fails_its_checks_is_rejected_and_the_previous_one_kept():
    urls = [f"http://127.0.0.1:1/doc/{i}" for i in range(50)]
    good = CacheDigest.from_keys(urls).to_bytes()
    inconsistent = bytearray(good)
    inconsistent[20] = 9                                     # bits_per_entry no longer matches mask_size
    answers = [good]

    async def handler(request):
        if request.path == DIGEST_PATH:
            body = answers[0] if len(answers) == 1 else answers.pop(0)
            return web.Response(body=bytes(body), content_type="application/cache-digest")
        return web.Response(status=404, text="Squid: no such thing")

    async def scenario():
        fake = await FakePeer("app", handler=handler).start()
        try:
            async with origin_and_proxies(config(name="B", summary_interval=0.2)) as (origin, (b,), session):
                link = b.add_peer(fake.url)
                await eventually(lambda: b.node.peer(fake.url).summary is not None, what="the first digest")
                assert link.kind == "squid"
                held = b.node.peer(fake.url).summary
                answers[:] = [good[:100], bytes(inconsistent), good + b"\0", good[:100]]
                await eventually(lambda: b.stats()["summaries_rejected"] >= 3, what="three rejections")
                assert b.node.peer(fake.url).summary is held
                assert all(f"GET {u}" in held for u in urls)
                await eventually(lambda: not b.stats()["peers"][fake.url]["healthy"], what="the Squid unhealthy")
        finally:
            await fake.stop()
    run(scenario())


# -- processes: a proxy killed and restarted ---------------------------------------------------------------------
def _get(proxy, url, timeout=10):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    with opener.open(url, timeout=timeout) as reply:
        return reply.status, dict(reply.headers), reply.read()


def _stats(proxy):
    with urllib.request.urlopen(proxy + "/bloomwise/stats", timeout=10) as reply:
        return json.loads(reply.read())


def _wait(condition, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def test_a_killed_and_restarted_proxy_is_noticed_and_no_request_fails():
    options = ["--summary-interval", "0.3", "--peer-timeout", "1", "--cache-size", "8MiB"]
    with Cluster(3, origin_documents=200, mean_size=1500, proxy_options=options) as cluster:
        p0, p1, p2 = cluster.proxy_urls
        origin = cluster.origin_url

        def fetch(proxy, i):
            status, headers, body = _get(proxy, f"{origin}/doc/{i}")
            assert status == 200 and body == document_body(f"/doc/{i}", 1500), (proxy, i)
            return headers

        for i in range(20):
            fetch(p0, i)
        _wait(lambda: (_stats(p1)["peers"][p0]["summary_bytes"] or 0) > 0
              and _stats(p1)["peers"][p0]["summary_version"] >= 2, what="p0's summary at p1")
        assert fetch(p1, 0)["X-Cache"].startswith("REMOTE_HIT")
        before = _stats(p1)["peers"][p0]["summary_origin"]

        cluster.kill(0)
        for i in range(1, 40):                               # p0 is gone: everything still succeeds
            fetch(p1, i)
            fetch(p2, i)
        _wait(lambda: not _stats(p1)["peers"][p0]["healthy"], what="p1 noticing p0 is down")

        cluster.restart(0)                                    # same address, empty cache, new instance id
        _wait(lambda: _stats(p1)["peers"][p0]["healthy"]
              and _stats(p1)["peers"][p0]["summary_origin"] not in (None, before), what="p0's new summary at p1")
        assert _stats(p2)["peers"][p0]["healthy"]
        for i in range(40, 60):
            fetch(p0, i)
            fetch(p1, i)


# -- the commands -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["proxy", "--listen", "nonsense"], "HOST:PORT"),
    (["proxy", "--listen", "127.0.0.1:0", "--cache-size", "12XB"], "--cache-size"),
    (["proxy", "--listen", "127.0.0.1:0", "--update-threshold", "0"], "--update-threshold"),
    (["proxy", "--listen", "127.0.0.1:0", "--peer", "ftp://x:1"], "--peer"),
    (["proxy", "--listen", "127.0.0.1:0", "--peer-timeout", "-1"], "--peer-timeout"),
    (["cluster", "--proxies", "0"], "--proxies"),
    (["proxy", "--listen", "127.0.0.1:0", "--cache-size", "0"], "--cache-size '0' must be at least 1 byte"),
    (["proxy", "--listen", "127.0.0.1:0", "--mean-document-size", "0"], "--mean-document-size '0'"),
    (["proxy", "--listen", "127.0.0.1:0", "--bits-per-entry", "100000"], "--bits-per-entry '100000'"),
    (["proxy", "--listen", "127.0.0.1:0", "--origin-cost", "nan"], "positive number of milliseconds"),
    (["proxy", "--listen", "127.0.0.1:0", "--allow-clients", "10.0.0.0/33"], "--allow-clients '10.0.0.0/33'"),
    (["proxy", "--listen", "127.0.0.1:0", "--allow-clients", ","], "--allow-clients ',' names no network"),
    (["proxy", "--listen", "127.0.0.1:0", "--allow-destinations", "x:0"], "--allow-destinations 'x:0'"),
    (["cluster", "--allow-destinations", "no host"], "--allow-destinations 'no host'"),
])
def test_bad_options_are_usage_errors(argv, message, capsys):
    """A bad setting is exit 2 and one line on stderr, never a traceback (issue 34)."""
    from bloomwise.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_cluster_command_starts_and_stops_on_ctrl_c():
    process = subprocess.Popen([sys.executable, "-m", "bloomwise", "cluster", "--proxies", "2",
                                "--origin-documents", "20", "--summary-interval", "0.3"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl-C" in line:
                break
        text = "".join(lines)
        assert "Ctrl-C" in text, text + process.stderr.read() if process.poll() is not None else text
        origin = next(l.split()[1] for l in lines if l.startswith("origin"))
        proxies = [l.split()[1] for l in lines if l.startswith("proxy-")]
        assert len(proxies) == 2
        assert _get(proxies[0], origin + "/doc/3")[2] == document_body("/doc/3", 4096)
        with pytest.raises(urllib.error.HTTPError) as refused:           # the origin only, not the rest of loopback
            _get(proxies[0], f"http://127.0.0.1:{free_port()}/doc/3")
        assert refused.value.code == 403
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        process.stdout.close()
        process.stderr.close()
    for url in proxies + [origin]:                            # every process of the cluster is gone
        host, port = url.rsplit("/", 1)[1].rsplit(":", 1)
        with pytest.raises(OSError):
            socket.create_connection((host, int(port)), timeout=2).close()


def test_proxy_on_a_busy_port_fails_with_a_clear_message(capsys):
    from bloomwise.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["proxy", "--listen", f"127.0.0.1:{port}"]) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_proxy_with_an_access_log_it_cannot_write_fails_with_a_clear_message(tmp_path, capsys):
    from bloomwise.cli import main

    path = tmp_path / "missing-directory" / "access.log"
    assert main(["proxy", "--listen", "127.0.0.1:0", "--access-log", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"bloomwise proxy: --access-log {path}: cannot write it (") and err.count("\n") == 1, err
