"""Proxies on emulated hosts: the origin and three proxies each in its own network namespace, with delays.

Checks that remote hits work across namespaces (the bodies are the origin's), that every remote hit and origin fetch
took at least the emulated round trip (the delays are really there), and that the per-peer round-trip times the
proxies measure (``rtt_ms``, the tau of the paradox policy) reflect each pair's delay. Needs root and ``ip``; skips
with the reason elsewhere. See bloomwise.proxy.netns for the network (netem where the kernel has it, otherwise a
delaying packet relay).
"""
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("aiohttp", reason="the proxy tests need aiohttp (the proxy extra)")

from bloomwise.proxy.netns import NETWORK, NetnsCluster, namespaces_unavailable, netem_available  # noqa: E402

UNAVAILABLE = namespaces_unavailable()
needs_namespaces = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"namespaced cluster: {UNAVAILABLE}")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MEAN_SIZE = 1500
PROXY_DELAYS_MS = (3.0, 5.0, 12.0)      # one way: round trips 16, 30 and 34 ms between the proxies
ORIGIN_DELAY_MS = 25.0                  # round trips 56 to 74 ms to the origin
# Where the proxies may fetch from and who may use them: the cluster's own hosts, nothing else (NetnsCluster's
# default too; said here so that the test states what it runs with).
RESTRICTIONS = ["--allow-destinations", NETWORK, "--allow-clients", NETWORK]
assert NETWORK == "10.77.0.0/16"
# Slack below an emulated round trip: timers may fire up to a scheduler tick early; nothing can arrive sooner.
EARLY_MS = 1.0
# Above it: a measured round trip also holds the servers' own time and, on a new connection, a second round trip;
# this bound only says the figure is this link's, in milliseconds (it is far above any scheduling delay seen here).
LATE_MS = 1000.0


def _wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.3)


@needs_namespaces
def test_remote_hits_and_round_trip_times_across_namespaces():
    options = ["--summary-interval", "0.5", "--mean-document-size", str(MEAN_SIZE), "--cache-size", "8MiB",
               "--peer-timeout", "2", *RESTRICTIONS]
    with NetnsCluster(3, proxy_delays_ms=PROXY_DELAYS_MS, origin_delay_ms=ORIGIN_DELAY_MS, origin_documents=100,
                      mean_size=MEAN_SIZE, proxy_options=options) as cluster:
        print(f"emulated network: {cluster.emulator}")
        assert cluster.emulator == ("netem" if netem_available() else "relay")
        urls = [f"{cluster.origin_url}/doc/{i}" for i in range(20)]

        def fetch(i, concurrency=4):
            return cluster.client(i, {"proxy": cluster.proxy_urls[i], "urls": urls, "concurrency": concurrency,
                                      "mean_size": MEAN_SIZE})["requests"]

        def stats(i):
            return cluster.client(i, {"get_json": cluster.proxy_urls[i] + "/bloomwise/stats"})["json"]

        # proxy 0 fetches every document from the origin, one round trip away at least
        for url, status, x_cache, _, seconds, body_ok in fetch(0):
            assert status == 200 and body_ok and x_cache.startswith("MISS"), (url, status, x_cache)
            assert seconds * 1000 >= cluster.round_trip_ms(0) - EARLY_MS, (url, seconds, cluster.round_trip_ms(0))
        held = cluster.proxy_urls[0]

        def has_whole_summary_of_0(i):
            own = stats(0)["summary"]
            peer = stats(i)["peers"][held]
            return own["num_keys"] >= len(urls) and peer["summary_version"] == own["version"]

        for i in (1, 2):
            _wait_for(lambda: has_whole_summary_of_0(i), 60, f"proxy 0's whole summary at proxy {i}")
            # proxies 1 and 2 get every document from proxy 0, across the emulated network (one at a time:
            # the stats count below is checked under concurrency elsewhere)
            for url, status, x_cache, peer, seconds, body_ok in fetch(i, concurrency=1):
                assert status == 200 and body_ok, (url, status)
                assert x_cache.startswith("REMOTE_HIT") and peer == held, (url, x_cache, peer)
                assert seconds * 1000 >= cluster.round_trip_ms(i, 0) - EARLY_MS, (url, seconds)
            assert stats(i)["remote_hits"] == len(urls)

        # every proxy measured every peer's round trip, and each figure is that pair's
        for i in range(3):
            peers = stats(i)["peers"]
            for j in range(3):
                if j == i:
                    continue
                rtt = peers[cluster.proxy_urls[j]]["rtt_ms"]
                expected = cluster.round_trip_ms(i, j)
                assert rtt is not None and expected - EARLY_MS <= rtt <= 2 * expected + LATE_MS, (i, j, rtt, expected)


@pytest.mark.parametrize("option", [["--delays", "4,x"], ["--delays", "-1"], ["--origin-delay", "20000"]])
def test_cluster_netns_rejects_bad_delays(option):
    done = subprocess.run([sys.executable, "-m", "bloomwise", "cluster", "--netns", *option], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("bloomwise cluster: --") and "milliseconds from 0 to 10000" in done.stderr
    assert "Traceback" not in done.stderr
