"""CARP's hashes against Debian's Squid: which parent Squid forwards each URL to (needs the `squid` package)."""
import http.server
import threading
import urllib.request

import pytest

from bloomwise.cache.routing import CarpPolicy, PeerState, squid_carp_parent
from bloomwise.proxy.squid import SquidProcess, squid_binary

pytestmark = pytest.mark.skipif(squid_binary() is None, reason="squid is not installed (scripts/system-deps.sh)")

NAMES = ["p0", "p1", "p2"]


def parent_server(name, received):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            received[self.path] = name  # a proxy request: the path is the absolute URL
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_squid_carp_parents_equal_squid_carp_parent():
    """Squid forwards every URL to the parent ``squid_carp_parent`` names (so the URL hash, the member hash and their
    combination are Squid's), and that differs from the draft's highest random weight (CarpPolicy) for many URLs."""
    received = {}
    servers = [parent_server(name, received) for name in NAMES]
    config = ["never_direct allow all"] + [
        f"cache_peer 127.0.0.1 parent {s.server_address[1]} 0 carp no-query no-digest name={name}"
        for name, s in zip(NAMES, servers)]
    urls = [f"http://127.0.0.1:9/doc/{i}/page.html" for i in range(120)]  # never fetched: Squid asks a parent
    try:
        with SquidProcess(extra_config=config, disk_cache_mb=0) as squid:
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": squid.proxy_url}))
            for url in urls:
                opener.open(url, timeout=10).read()
    finally:
        for server in servers:
            server.shutdown()
    assert {url: received.get(url) for url in urls} == {url: squid_carp_parent(url, NAMES) for url in urls}
    draft = CarpPolicy("p0")
    peers = [PeerState("p1"), PeerState("p2")]
    differ = sum(draft.home("GET " + url, peers) != squid_carp_parent(url, NAMES) for url in urls)
    assert differ > len(urls) // 4
