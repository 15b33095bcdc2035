"""The bloomwise proxy on loopback, and a plain Squid on the same workload: requests per second and latency
percentiles of local hits and remote hits, the summary decision's share of a miss, summary bytes per second at a
given churn.

    .venv/bin/python benchmarks/proxy.py                 # ~2-4 minutes; writes benchmarks/results/DATE-proxy.{md,json}
    .venv/bin/python benchmarks/proxy.py --quick --out /tmp/x   # a smoke run (CI)

Every server is a separate process (the origin, each proxy, each Squid); the load generator is this process
(aiohttp, ``--concurrency`` requests in flight). All share the machine's cores: on a 2-core machine the client costs
as much CPU as the proxy, so the absolute figures are lower bounds and the ratios are what to compare. Each figure
is the median of ``--runs`` runs; the workloads of bloomwise and Squid alternate within each run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from measure import write_results  # noqa: E402

import aiohttp  # noqa: E402

from bloomwise.cache.squid_digest import CacheDigest  # noqa: E402
from bloomwise.proxy.cluster import read_ready_line  # noqa: E402
from bloomwise.proxy.squid import SquidPeer, SquidProcess, free_port, squid_binary  # noqa: E402

MEAN_SIZE = 4096


def start_origin(documents: int):
    p = subprocess.Popen([sys.executable, "-m", "bloomwise.proxy.origin", "--listen", "127.0.0.1:0", "--documents",
                          str(documents), "--mean-size", str(MEAN_SIZE)], stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    return p, read_ready_line(p, 60, "origin")["origin"]


def start_proxy(port: int, peers: list, extra: list):
    args = [sys.executable, "-m", "bloomwise", "proxy", "--listen", f"127.0.0.1:{port}", "--cache-size", "256MiB",
            "--allow-destinations", "127.0.0.1"]
    for peer in peers:
        args += ["--peer", peer]
    p = subprocess.Popen(args + extra, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    read_ready_line(p, 60, f"proxy on {port}")
    return p, f"http://127.0.0.1:{port}"


def stop(processes):
    for p in processes:
        if p.poll() is None:
            p.terminate()
    for p in processes:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
        if p.stdout:
            p.stdout.close()


async def load(proxy: str, urls: list, concurrency: int, expect: str = None, headers: dict = None):
    """GET every URL once through ``proxy`` with ``concurrency`` in flight: (requests/s, latencies in s, tags)."""
    queue = list(reversed(urls))
    latencies, tags = [], {}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker():
            while queue:
                url = queue.pop()
                started = time.perf_counter()
                async with session.get(url, proxy=proxy, headers=headers) as reply:
                    await reply.read()
                    if reply.status != 200:
                        raise RuntimeError(f"{url} via {proxy}: status {reply.status}")
                    tag = (reply.headers.get("X-Cache", "?").split(" ")[0])
                latencies.append(time.perf_counter() - started)
                tags[tag] = tags.get(tag, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return len(urls) / elapsed, latencies, tags


def percentiles(latencies):
    ordered = sorted(latencies)

    def q(p):
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000

    return {"p50_ms": q(0.50), "p90_ms": q(0.90), "p99_ms": q(0.99)}


async def fetch_json(url):
    async with aiohttp.ClientSession() as s:
        async with s.get(url) as reply:
            return await reply.json()


class WaitTimedOut(Exception):
    """A state the benchmark waits for did not come in time: main prints the message and exits 1."""


async def wait_until(predicate, timeout, what, describe=None):
    """Poll ``predicate()`` every 0.2 s for at most ``timeout`` seconds; a server that does not answer (yet) counts
    as "not yet". WaitTimedOut names ``what``, the last state seen (``describe()``) and the last error."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            if await predicate():
                return
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, KeyError, ValueError) as exc:
            last_error = f"{type(exc).__name__}: {exc}".rstrip(": ")
        if time.monotonic() > deadline:
            state = describe() if describe is not None else ""
            raise WaitTimedOut(f"timed out after {timeout:g} s waiting for {what}"
                               + (f"; last seen: {state}" if state else "")
                               + (f"; last error: {last_error}" if last_error else ""))
        await asyncio.sleep(0.2)


def publish_every_new_document(documents: int) -> list:
    """The --update-threshold of a proxy whose summary must come to cover all the ``documents`` it was given: at
    T <= 1 / documents every new document makes a publication due. (At 1%, the documents stored after the last
    publication that the threshold allowed wait for more changes that a warmed-up benchmark never makes: up to 1% of
    them are never published, and a wait for a summary of all of them never ends.)"""
    return ["--update-threshold", f"{0.5 / max(1, documents):.6g}"]


async def wait_for_whole_summary(u0: str, u1: str, documents: int, timeout: float = 120.0) -> None:
    """Until P0 (at ``u0``) published a summary of at least ``documents`` keys and P1 (at ``u1``) holds that version;
    WaitTimedOut saying how far each got."""
    seen = {}

    async def caught_up():
        own = (await fetch_json(u0 + "/bloomwise/stats"))["summary"]
        peer = (await fetch_json(u1 + "/bloomwise/stats"))["peers"][u0]
        seen.update(version=own["version"], keys=own["num_keys"], held=peer["summary_version"],
                    healthy=peer["healthy"], peer_error=peer.get("last_error"))
        return own["num_keys"] >= documents and peer["summary_version"] == own["version"]

    def describe():
        if not seen:
            return "no answer from the proxies' /bloomwise/stats"
        return (f"P0 published version {seen['version']} of {seen['keys']} keys (of {documents}), P1 holds version "
                f"{seen['held']} (P0 {'healthy' if seen['healthy'] else 'unhealthy'} at P1"
                + (f", its last error: {seen['peer_error']}" if seen["peer_error"] else "") + ")")

    await wait_until(caught_up, timeout, "P0's summary of every document at P1", describe)


async def squid_digest_lists(squid, urls) -> bool:
    """Whether ``squid``'s Cache Digest, fetched now, lists every URL of ``urls`` (False while it cannot be read)."""
    try:
        digest = CacheDigest.from_bytes(await asyncio.to_thread(squid.fetch_digest))
    except OSError:
        return False
    return all(digest.contains_url(u) for u in urls)


async def bloomwise_run(origin, n, concurrency, summary_kind):
    """Local hits on P0, remote hits at P1 (served by P0), and misses at P1 (to the origin): one run."""
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{ports[i]}" for i in range(2)]
    extra = ["--summary-interval", "1", "--summary-kind", summary_kind, "--mean-document-size", str(MEAN_SIZE)]
    p0, u0 = start_proxy(ports[0], [urls[1]], extra + publish_every_new_document(n))
    p1, u1 = start_proxy(ports[1], [urls[0]], extra + ["--update-threshold", "1%"])
    try:
        held = [f"{origin}/doc/{i}" for i in range(n)]
        await load(u0, held, concurrency)                                         # warm P0
        rps, lat, tags = await load(u0, held, concurrency)                        # local hits
        assert tags.get("HIT", 0) == n, tags
        local = {"rps": rps, **percentiles(lat)}

        await wait_for_whole_summary(u0, u1, n)   # all P0 holds, not a summary published during the warm-up
        rps, lat, tags = await load(u1, held, concurrency)                        # remote hits (first time at P1)
        remote = {"rps": rps, **percentiles(lat), "remote_hit_fraction": tags.get("REMOTE_HIT", 0) / n}
        before = (await fetch_json(u1 + "/bloomwise/stats"))["timing"]
        fresh = [f"{origin}/doc/{i}" for i in range(n, 2 * n)]
        rps, lat, tags = await load(u1, fresh, concurrency)                       # misses: nobody holds them
        after = (await fetch_json(u1 + "/bloomwise/stats"))["timing"]
        route = after["route_seconds"] - before["route_seconds"]
        miss = after["miss_seconds"] - before["miss_seconds"]
        misses = {"rps": rps, **percentiles(lat), "route_share": route / miss,
                  "route_us_per_miss": route / (after["misses"] - before["misses"]) * 1e6}
        return {"local": local, "remote": remote, "miss": misses}
    finally:
        stop([p0, p1])


async def squid_run(origin, n, concurrency):
    """The same local-hit and remote-hit workloads through Squid: S0 warmed, S1 its digest sibling."""
    s0 = await asyncio.to_thread(SquidProcess(digest_period=3, cache_mem_mb=256).start)
    s1 = None
    try:
        held = [f"{origin}/doc/{i}" for i in range(n)]
        await load(s0.proxy_url, held, concurrency)                               # warm
        rps, lat, tags = await load(s0.proxy_url, held, concurrency)
        local = {"rps": rps, **percentiles(lat), "hit_fraction": tags.get("HIT", 0) / n}

        await wait_until(lambda: squid_digest_lists(s0, held), 60, "Squid's digest")
        s1 = await asyncio.to_thread(SquidProcess(peers=[SquidPeer("127.0.0.1", s0.port)], cache_mem_mb=256).start)
        await load(s1.proxy_url, [f"{origin}/doc/{2 * n + 5}"], 1)               # makes S1 fetch S0's digest
        await asyncio.sleep(3.0)
        rps, lat, tags = await load(s1.proxy_url, held, concurrency)
        log = s1.access_log_lines()
        sibling_hits = sum("CD_SIBLING_HIT" in line for line in log)
        remote = {"rps": rps, **percentiles(lat), "remote_hit_fraction": sibling_hits / n}
        return {"local": local, "remote": remote}
    finally:
        await asyncio.to_thread(s0.stop)
        if s1 is not None:
            await asyncio.to_thread(s1.stop)


async def churn_run(origin, seconds, rate, threshold, cache_size):
    """Summary bytes per second between two proxies while P0's cache turns over at ``rate`` new documents/s."""
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{ports[i]}" for i in range(2)]
    extra = ["--summary-interval", "1", "--update-threshold", threshold, "--mean-document-size", str(MEAN_SIZE)]
    p0, u0 = start_proxy(ports[0], [urls[1]], extra + ["--cache-size", cache_size])
    p1, u1 = start_proxy(ports[1], [urls[0]], extra)
    try:
        per_doc = 1.0 / rate
        i = 0
        async with aiohttp.ClientSession() as session:
            # fill the cache first, then measure the steady state
            capacity_docs = None
            stats0 = await fetch_json(u0 + "/bloomwise/stats")
            while True:
                async with session.get(f"{origin}/doc/{i}", proxy=u0) as reply:
                    await reply.read()
                    if reply.status != 200:
                        raise RuntimeError(f"the origin has too few documents to fill {cache_size} ({i} used)")
                i += 1
                if i % 200 == 0:
                    stats0 = await fetch_json(u0 + "/bloomwise/stats")
                    if stats0["cache"]["used_bytes"] > 0.97 * stats0["cache"]["capacity_bytes"]:
                        capacity_docs = stats0["cache"]["documents"]
                        break
            start_in = (await fetch_json(u1 + "/bloomwise/stats"))["summary_bytes_in"]
            start_ver = (await fetch_json(u0 + "/bloomwise/stats"))["summary"]["version"]
            started = time.perf_counter()
            sent = 0
            while time.perf_counter() - started < seconds:
                async with session.get(f"{origin}/doc/{i}", proxy=u0) as reply:
                    await reply.read()
                i += 1
                sent += 1
                delay = started + sent * per_doc - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            elapsed = time.perf_counter() - started
            await asyncio.sleep(1.5)                                           # the last pull
            end_in = (await fetch_json(u1 + "/bloomwise/stats"))["summary_bytes_in"]
            end_ver = (await fetch_json(u0 + "/bloomwise/stats"))["summary"]["version"]
        return {"threshold": threshold, "cached_documents": capacity_docs, "new_documents_per_s": sent / elapsed,
                "summary_bytes_per_s": (end_in - start_in) / elapsed, "versions_per_s": (end_ver - start_ver) / elapsed,
                "filter_bytes": (await fetch_json(u1 + "/bloomwise/stats"))["peers"][u0]["summary_bytes"]}
    finally:
        stop([p0, p1])


async def digest_routing_run(origin, entries, sample):
    """What a Squid routes by a bloomwise sibling's digest of ``entries`` URLs: the fraction of ``sample`` of them
    that its access.log shows as CD_SIBLING_HIT (Squid 5.7: see bug 5510 in docs/cache.md), beside the fraction the
    digest as served holds (bloomwise's reader)."""
    from bloomwise.cache.squid_digest import CacheDigest, mask_size_for

    port = free_port()
    p0, u0 = start_proxy(port, [], ["--mean-document-size", str(MEAN_SIZE)])
    squid = None
    try:
        held = [f"{origin}/doc/{i}" for i in range(entries)]
        await load(u0, held, 8)
        squid = await asyncio.to_thread(SquidProcess(peers=[SquidPeer("127.0.0.1", port)], cache_mem_mb=256).start)
        await load(squid.proxy_url, [f"{origin}/doc/{entries + 7}"], 1)           # makes Squid fetch the digest
        await wait_until(lambda: _digests_served(u0), 60, "Squid's fetch of the digest")
        await asyncio.sleep(3.0)                                                  # time to take it in use
        step = max(1, entries // sample)
        chosen = held[::step][:sample]
        await load(squid.proxy_url, chosen, 8)
        await asyncio.sleep(2.0)                                                  # the log daemon's last lines
        wanted = set(chosen)
        routed = set()
        for line in squid.access_log_lines():
            fields = line.split()
            if len(fields) >= 9 and fields[6] in wanted and fields[8].startswith("CD_SIBLING_HIT/"):
                routed.add(fields[6])
        async with aiohttp.ClientSession() as session:
            async with session.get(u0 + "/squid-internal-periodic/store_digest") as reply:
                digest = CacheDigest.from_bytes(await reply.read())
        listed = sum(digest.contains_url(u) for u in chosen)
        # the receive loop of Squid 5.7 replayed on the digest as served, for every header length that could precede
        # it in Squid's first read (whole 4 KiB first read): the one that predicts the routed URLs best
        fits = []
        for header_bytes in range(128, 1025):
            received = squid57_received_digest(digest, header_bytes)
            predicted = {u for u in chosen if received.contains_url(u)}
            fits.append((len(predicted ^ routed), header_bytes))
        wrong, header_bytes = min(fits)
        # and with the first read's mask bytes free as well
        free_wrong, free_header, free_mask_bytes = fit_first_read(digest, chosen, routed)
        return {"entries": entries, "mask_bytes": mask_size_for(entries, 5), "sampled": len(chosen),
                "listed_fraction": listed / len(chosen), "cd_sibling_hit_fraction": len(routed) / len(chosen),
                "model_header_bytes": header_bytes, "model_mispredicted": wrong,
                "model_header_bytes_with_that_fit": [h for w, h in fits if w == wrong],
                "free_first_read_mispredicted": free_wrong, "free_first_read_header_bytes": free_header,
                "free_first_read_mask_bytes": free_mask_bytes}
    finally:
        if squid is not None:
            await asyncio.to_thread(squid.stop)
        stop([p0])


def squid57_received_digest(digest, header_bytes: int, first_read: int = 4096):
    """The digest a Squid 5.7 stores after receiving ``digest`` (a CacheDigest as served), modelled on its bug 5510.

    Squid reads a peer's digest reply into a 4096-byte buffer (SM_PAGE_SIZE): the stored HTTP headers
    (``header_bytes``), the 128-byte control block, then the mask. After each parsing step consumes ``r`` of the
    ``n`` buffered bytes, ``peerDigestHandleReply`` should move the ``n - r`` remaining bytes to the front of the
    buffer; it moves ``r`` bytes instead (the size computed as ``bufofs - newsize``). So after the headers (``r`` =
    ``header_bytes``) and the control block (``r`` = 128) only part of the first read's mask bytes land at their
    place; the later reads are consumed whole and arrive intact. Returns a CacheDigest with the mask so received."""
    from bloomwise.cache.squid_digest import CacheDigest

    stream = bytes(header_bytes) + digest.to_bytes()
    buffer = bytearray(stream[:first_read]) + bytearray(max(0, 2 * header_bytes + 256))  # stale bytes beyond
    buffered = min(first_read, len(stream))
    for consumed in (header_bytes, 128):                    # the headers, then the control block
        buffer[0:consumed] = buffer[consumed:2 * consumed]  # memmove(buf, buf + retsize, retsize): the bug
        buffered -= consumed
    mask = bytearray(digest.to_bytes()[128:])
    mask[0:buffered] = buffer[0:buffered]                   # the first read's mask bytes, as left in the buffer
    received = CacheDigest(digest.capacity, digest.bits_per_entry)
    received.mask[:] = mask
    return received


def fit_first_read(digest, urls, routed):
    """(mispredicted, header bytes, mask bytes in the first read) of the best fit of the bug-5510 model when the
    first read may hold any number L of mask bytes. For a header length H, the byte received at mask offset q is the
    served one when q < 128 or q >= L, and otherwise the byte the misplaced memmove left there (the mask shifted by
    128 below H, the control block and the mask shifted by H + 128 from H on); a URL is routed iff each of its four
    bits is set in what was received, i.e. iff L <= t, t the smallest offset >= 128 of a bit the misplaced bytes
    lack. Header lengths from 256 bytes (below that the control block's move also misplaces mask bytes under 128,
    which this fit does not model; the whole-read replay above does)."""
    from bloomwise.cache.squid_digest import store_key

    served = digest.to_bytes()
    mask = served[128:]
    bits = 8 * len(mask)
    positions = {u: [int.from_bytes(store_key(u)[4 * i:4 * i + 4], "big") % bits for i in range(4)] for u in urls}
    best = (len(urls) + 1, None, None)
    for header in range(256, 1025):
        def misplaced(q):
            if q < header:
                return mask[q - 128]
            source = q - header                      # offset in the control block + mask stream
            return served[source] if source < len(served) else 0

        thresholds = []
        for u in urls:
            t = len(mask)
            for b in positions[u]:
                q = b >> 3
                if q >= 128 and not misplaced(q) & (1 << (b & 7)):
                    t = min(t, q)
            thresholds.append((t, u in routed))
        # mispredicted(L) = routed URLs with t < L (predicted lost) + lost URLs with t >= L (predicted routed)
        thresholds.sort()
        lost_total = sum(1 for _, r in thresholds if not r)
        routed_below, lost_below = 0, 0
        index = 0
        for first_read in range(128, len(mask) + 1):
            while index < len(thresholds) and thresholds[index][0] < first_read:
                routed_below += thresholds[index][1]
                lost_below += not thresholds[index][1]
                index += 1
            wrong = routed_below + (lost_total - lost_below)
            if wrong < best[0]:
                best = (wrong, header, first_read)
    return best


async def _digests_served(proxy_url):
    return (await fetch_json(proxy_url + "/bloomwise/stats"))["digests_served"] >= 1


# -- the speed targets of issue 35, with wrk ------------------------------------------------------------------

WRK_SCRIPT = """-- generated by benchmarks/proxy.py: GET each URL in turn, in absolute form (to a forward proxy)
local urls = {%s}
local headers = {%s}
local i = 0
request = function()
  i = i %% #urls + 1
  return wrk.format("GET", urls[i], headers)
end
"""
#: Request headers of the remote-hit workload: the front proxy (bloomwise or Squid) must not store what its sibling
#: sends, so that every request of the run is a remote hit (Squid's cache_peer is proxy-only as well).
NO_STORE = {"Cache-Control": "no-store"}
#: Documents of the remote-hit workload: a Squid digest of at most 205 entries (129 bytes of mask) reaches a Squid
#: 5.7 sibling whole; larger ones are corrupted on receipt (bug 5510, docs/cache.md), and the sibling-hit rate would
#: measure that bug. A Squid's own digest lists about 50 entries beside the documents it cached (150 documents: 202
#: entries, 127 bytes), so 150.
REMOTE_DOCUMENTS = 150


def wrk_binary():
    import shutil
    return shutil.which("wrk")


def _wrk_duration(text: str) -> float:
    """'1.23ms' -> 1.23 (milliseconds)."""
    import re
    m = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text.strip())
    if not m:
        raise ValueError(f"unexpected wrk duration {text!r}")
    return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[m.group(2)]


def run_wrk(target: str, urls: list, concurrency: int, seconds: float, script_dir: str, headers: dict) -> dict:
    """``wrk -t1 -cC -dDs --latency`` through the forward proxy ``target``, cycling over ``urls``: requests/s, the
    p50/p90/p99 latency in ms, and the count of errors (socket errors and non-2xx answers)."""
    import re
    script = os.path.join(script_dir, f"urls-{len(urls)}-{len(headers)}.lua")
    if not os.path.exists(script):
        with open(script, "w") as f:
            f.write(WRK_SCRIPT % (", ".join(json.dumps(u) for u in urls),
                                  ", ".join(f"[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items())))
    done = subprocess.run([wrk_binary(), "-t1", f"-c{concurrency}", f"-d{seconds:g}s", "--latency", "-s", script,
                           target], capture_output=True, text=True, timeout=seconds + 60)
    out = done.stdout
    if done.returncode != 0 or "Requests/sec" not in out:
        raise RuntimeError(f"wrk against {target} failed: {done.stderr.strip() or out[-500:]}")
    result = {"rps": float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))}
    for p in ("50", "90", "99"):
        result[f"p{p}_ms"] = _wrk_duration(re.search(rf"^\s+{p}%\s+(\S+)", out, re.M).group(1))
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    result["errors"] = (int(non_2xx.group(1)) if non_2xx else 0) + (sum(map(int, sockets.groups())) if sockets else 0)
    result["requests"] = int(re.search(r"(\d+) requests in", out).group(1))
    return result


async def origin_served(origin):
    return sum((await fetch_json(origin + "/origin/stats"))["served"].values())


#: The unloaded level of the speed targets: one connection, one request in flight (``wrk -t1 -c1``). At ``c``
#: requests in flight the p50 is about ``c`` / throughput (Little's law), so at c16/c64 the remote hit's added p50
#: measures the proxy's throughput; at c1 it is the cost of the extra hop itself.
UNLOADED_CONCURRENCY = 1


async def speed_targets(origin, documents, levels, rounds, seconds, script_dir):
    """Local hits (bloomwise P0 against Squid S0, ``documents`` cached), remote hits (no-store requests to
    bloomwise P1, served by P0; to Squid S2, a proxy-only sibling, served by S1 holding REMOTE_DOCUMENTS), the
    summary decision's share of a miss at P1; wrk alternating bloomwise and Squid, ``rounds`` times at the unloaded
    level (UNLOADED_CONCURRENCY) and then per concurrency level of ``levels``."""
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    options = ["--summary-interval", "1", "--mean-document-size", str(MEAN_SIZE)]
    p0, u0 = start_proxy(ports[0], [urls[1]], options + publish_every_new_document(documents))
    p1, u1 = start_proxy(ports[1], [urls[0]], options)
    squids = []
    try:
        local_urls = [f"{origin}/doc/{i}" for i in range(documents)]
        remote_urls = local_urls[:REMOTE_DOCUMENTS]
        s0 = await asyncio.to_thread(SquidProcess(digest_period=3, cache_mem_mb=256).start)
        squids.append(s0)
        s1 = await asyncio.to_thread(SquidProcess(digest_period=3, cache_mem_mb=256).start)
        squids.append(s1)
        for proxy, batch in ((u0, local_urls), (s0.proxy_url, local_urls), (s1.proxy_url, remote_urls)):
            await load(proxy, batch, 8)                                            # warm
            await load(proxy, batch, 8)

        await wait_until(lambda: squid_digest_lists(s1, remote_urls), 60, "S1's digest")
        s2 = await asyncio.to_thread(SquidProcess(peers=[SquidPeer("127.0.0.1", s1.port)], cache_mem_mb=256).start)
        squids.append(s2)
        await load(s2.proxy_url, [f"{origin}/doc/{documents + 5}"], 1)             # S2 fetches S1's digest
        await asyncio.sleep(3.0)

        await wait_for_whole_summary(u0, u1, documents)
        # one pass of each remote workload first: the fraction each front end routed to its sibling
        served = await origin_served(origin)
        _, _, tags = await load(u1, remote_urls, 8, headers=NO_STORE)
        bloomwise_fraction = tags.get("REMOTE_HIT", 0) / len(remote_urls)
        await load(s2.proxy_url, remote_urls, 8, headers=NO_STORE)
        await asyncio.sleep(2.0)
        wanted = set(remote_urls)
        sibling = sum(1 for line in s2.access_log_lines() if len(line.split()) >= 9 and line.split()[6] in wanted
                      and line.split()[8].startswith("CD_SIBLING_HIT/"))
        squid_fraction = sibling / len(remote_urls)
        first_pass_origin = await origin_served(origin) - served

        workloads = {"local": {"bloomwise": (u0, local_urls, {}), "squid": (s0.proxy_url, local_urls, {})},
                     "remote": {"bloomwise": (u1, remote_urls, NO_STORE),
                                "squid": (s2.proxy_url, remote_urls, NO_STORE)}}
        runs = []
        for c in [UNLOADED_CONCURRENCY] + list(levels):
            for r in range(rounds):
                order = ("bloomwise", "squid") if r % 2 == 0 else ("squid", "bloomwise")
                for workload, targets in workloads.items():
                    for server in order:
                        proxy, batch, headers = targets[server]
                        before = await origin_served(origin)
                        result = await asyncio.to_thread(run_wrk, proxy, batch, c, seconds, script_dir, headers)
                        result["origin_fetches"] = await origin_served(origin) - before
                        result.update(concurrency=c, round=r, workload=workload, server=server)
                        runs.append(result)
                        print(f"  c{c} round {r + 1} {workload:6} {server:9} {result['rps']:8,.0f} req/s  "
                              f"p50 {result['p50_ms']:.2f} ms  p99 {result['p99_ms']:.2f} ms", file=sys.stderr)
        # the summary decision's share of a miss at P1 (nobody holds these documents)
        before = (await fetch_json(u1 + "/bloomwise/stats"))["timing"]
        await load(u1, [f"{origin}/doc/{i}" for i in range(documents + 10, documents + 310)], 8)
        after = (await fetch_json(u1 + "/bloomwise/stats"))["timing"]
        route_share = ((after["route_seconds"] - before["route_seconds"])
                       / (after["miss_seconds"] - before["miss_seconds"]))
        return {"runs": runs, "remote_fraction": {"bloomwise": bloomwise_fraction, "squid": squid_fraction},
                "first_pass_origin_fetches": first_pass_origin, "route_share": route_share,
                "documents": documents, "remote_documents": len(remote_urls), "levels": list(levels),
                "unloaded_concurrency": UNLOADED_CONCURRENCY, "rounds": rounds, "seconds": seconds}
    finally:
        for squid in squids:
            await asyncio.to_thread(squid.stop)
        stop([p0, p1])


def unloaded_added_p50(t):
    """Per server ("bloomwise", "squid"), the p50 latency of local and remote hits at the unloaded level (medians
    over rounds, ms) and ``added_p50_ms`` = remote p50 - local p50: what the extra hop to the sibling costs one
    request when nothing else is in flight. None for results without unloaded runs."""
    c = t.get("unloaded_concurrency")
    if c is None:
        return None
    out = {}
    for server in ("bloomwise", "squid"):
        p50 = {}
        for workload in ("local", "remote"):
            values = [r["p50_ms"] for r in t["runs"]
                      if r["concurrency"] == c and r["workload"] == workload and r["server"] == server]
            if values:
                p50[workload] = statistics.median(values)
        if len(p50) == 2:
            out[server] = {"local_p50_ms": p50["local"], "remote_p50_ms": p50["remote"],
                           "added_p50_ms": p50["remote"] - p50["local"]}
    return out if "bloomwise" in out else None


def target_verdicts(t) -> list:
    """[(target, concurrency, measured text, PASS/FAIL)], from the medians over rounds."""
    def med(c, workload, server, key):
        return statistics.median(r[key] for r in t["runs"] if r["concurrency"] == c and r["workload"] == workload
                                 and r["server"] == server)

    out = []
    for c in t["levels"]:
        b_rps, s_rps = med(c, "local", "bloomwise", "rps"), med(c, "local", "squid", "rps")
        b_p99, s_p99 = med(c, "local", "bloomwise", "p99_ms"), med(c, "local", "squid", "p99_ms")
        ok = b_rps >= 1.5 * s_rps and b_p99 <= s_p99
        out.append(("local hits: >= 1.5x Squid's requests/s, p99 <= Squid's", c,
                    f"{b_rps:,.0f} vs {s_rps:,.0f} req/s = {b_rps / s_rps:.2f}x; p99 {b_p99:.1f} vs {s_p99:.1f} ms",
                    "PASS" if ok else "FAIL"))
        br_rps, sr_rps = med(c, "remote", "bloomwise", "rps"), med(c, "remote", "squid", "rps")
        added = med(c, "remote", "bloomwise", "p50_ms") - med(c, "local", "bloomwise", "p50_ms")
        ok = br_rps >= sr_rps and added <= 1.0
        out.append(("remote hits: >= Squid's sibling-hit requests/s, p50 <= local p50 + 1 ms", c,
                    f"{br_rps:,.0f} vs {sr_rps:,.0f} req/s = {br_rps / sr_rps:.2f}x; p50 +{added:.2f} ms over local",
                    "PASS" if ok else "FAIL"))
    unloaded = unloaded_added_p50(t)
    if unloaded is not None:
        def server_text(name, added):
            return (f"{name} +{added['added_p50_ms']:.2f} ms ({added['remote_p50_ms']:.2f} vs "
                    f"{added['local_p50_ms']:.2f})")
        out.append((f"remote hit adds <= 1 ms p50 over a local hit, unloaded (c{t['unloaded_concurrency']})",
                    t["unloaded_concurrency"],
                    "; ".join(server_text(name, unloaded[server]) for server, name in
                              (("bloomwise", "bloomwise"), ("squid", "Squid")) if server in unloaded),
                    "PASS" if unloaded["bloomwise"]["added_p50_ms"] <= 1.0 else "FAIL"))
    f = t["remote_fraction"]
    out.append(("remote hits: routed fraction >= Squid's sibling-hit fraction", "-",
                f"{100 * f['bloomwise']:.1f}% vs {100 * f['squid']:.1f}%",
                "PASS" if f["bloomwise"] >= f["squid"] else "FAIL"))
    out.append(("routing decision < 1% of a miss's time", "-", f"{100 * t['route_share']:.3f}%",
                "PASS" if t["route_share"] < 0.01 else "FAIL"))
    return out


def targets_main(args) -> int:
    missing = [name for name, present in (("wrk", wrk_binary()), ("squid", squid_binary())) if present is None]
    if missing:
        print(f"proxy.py: --targets needs {' and '.join(missing)} (Debian packages; scripts/system-deps.sh --bench "
              f"installs them)", file=sys.stderr)
        return 2
    import tempfile
    from measure import machine

    try:
        levels = [int(x) for x in args.levels.split(",")]
    except ValueError:
        levels = []
    if not levels or min(levels) <= UNLOADED_CONCURRENCY:
        print(f"proxy.py: --levels {args.levels!r}: expected concurrency levels above {UNLOADED_CONCURRENCY} such as "
              f"16,64 (c{UNLOADED_CONCURRENCY}, the unloaded level, is always measured)", file=sys.stderr)
        return 2
    origin_process, origin = start_origin(args.documents + 400)
    load_before = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="bloomwise-wrk-") as script_dir:
            t = asyncio.run(speed_targets(origin, args.documents, levels, args.rounds, args.wrk_seconds, script_dir))
    finally:
        stop([origin_process])
    t.update(machine=machine(), load_average=load_before, load_average_after=os.getloadavg())
    m = t["machine"]
    version = subprocess.run([squid_binary(), "-v"], capture_output=True, text=True).stdout.split("\n")[0]
    wrk_version = subprocess.run([wrk_binary(), "-v"], capture_output=True, text=True).stdout.split("\n")[0]
    now = datetime.now(timezone.utc)
    lines = [f"# Speed targets: bloomwise proxy against Squid, with wrk ({now:%Y-%m-%d %H:%M} UTC)",
             "", f"CPU {m['cpu']} ({m['cpus']} cores, shared: load average {load_before[0]:.2f} before, "
             f"{t['load_average_after'][0]:.2f} after), Python {m['python']}; {version}; "
             f"{wrk_version.split(' Copyright')[0]}.",
             f"`wrk -t1 -cC -d{args.wrk_seconds:g}s --latency` through each proxy, cycling over the URLs; bloomwise and "
             f"Squid alternate, {args.rounds} rounds per concurrency (c{UNLOADED_CONCURRENCY} first: unloaded, one "
             f"request in flight); medians over rounds. Local hits: {args.documents} "
             f"documents of mean {MEAN_SIZE} bytes in bloomwise P0 and Squid S0. Remote hits (requests with "
             f"Cache-Control: no-store, so that the front proxy keeps nothing): bloomwise P1 from P0, Squid S2 "
             f"(proxy-only sibling) from S1, over {t['remote_documents']} documents (a Squid 5.7 "
             f"digest larger than that is corrupted on receipt, bug 5510). Origin fetches during the wrk runs: "
             f"{sum(r['origin_fetches'] for r in t['runs'])}; wrk errors: {sum(r['errors'] for r in t['runs'])}.", "",
             "| concurrency | workload | server | requests/s | p50 ms | p90 ms | p99 ms |",
             "|---|---|---|---:|---:|---:|---:|"]
    for c in [UNLOADED_CONCURRENCY] + levels:
        label = f"{c} (unloaded)" if c == UNLOADED_CONCURRENCY else f"{c}"
        for workload in ("local", "remote"):
            for server in ("bloomwise", "squid"):
                rows = [r for r in t["runs"]
                        if r["concurrency"] == c and r["workload"] == workload and r["server"] == server]
                med = {k: statistics.median(r[k] for r in rows) for k in ("rps", "p50_ms", "p90_ms", "p99_ms")}
                each = ", ".join(f"{r['rps']:,.0f}" for r in rows)
                lines.append(f"| {label} | {workload} hits | {server} | {med['rps']:,.0f} ({each}) | "
                             f"{med['p50_ms']:.2f} | {med['p90_ms']:.2f} | {med['p99_ms']:.2f} |")
    lines += ["", "| target | concurrency | measured | verdict |", "|---|---|---|---|"]
    for name, c, measured, verdict in target_verdicts(t):
        lines.append(f"| {name} | {c} | {measured} | **{verdict}** |")
    report = "\n".join(lines) + "\n"
    write_results(Path(args.out), "proxy-targets", t, report)
    print(report)
    return 0


def median_of(runs, *path):
    values = []
    for r in runs:
        v = r
        for p in path:
            v = v[p]
        values.append(v)
    return statistics.median(values)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 requests, 1 run, short churn")
    parser.add_argument("--requests", type=int, help="documents per workload (default 3000; quick 200)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--runs", type=int, help="runs per figure (default 3; quick 1)")
    parser.add_argument("--churn-seconds", type=float, help="seconds of churn per threshold (default 20; quick 3)")
    parser.add_argument("--churn-rate", type=float, help="new documents per second at P0 (default 100; quick 50)")
    parser.add_argument("--no-squid", action="store_true")
    parser.add_argument("--digest-routing", metavar="ENTRIES,...",
                        help="instead: what a Squid routes by a bloomwise sibling's digest of that many URLs, e.g. "
                             "200,1000,5000,10000 (Squid 5.7's bug 5510 as a function of digest size)")
    parser.add_argument("--digest-sample", type=int, default=1000, help="URLs asked per digest size (default 1000)")
    parser.add_argument("--targets", action="store_true",
                        help="instead: the speed targets against Squid with wrk, each printed PASS/FAIL")
    parser.add_argument("--documents", type=int, default=1000, help="with --targets: documents of the local-hit "
                        "workload (default 1000)")
    parser.add_argument("--levels", default="16,64", help="with --targets: wrk concurrency levels (default 16,64)")
    parser.add_argument("--rounds", type=int, default=2, help="with --targets: alternations per level (default 2)")
    parser.add_argument("--wrk-seconds", type=float, default=15.0, help="with --targets: seconds per wrk run "
                        "(default 15)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)
    defaults = dict(requests=200, runs=1, churn_seconds=3.0, churn_rate=50.0) if args.quick else \
        dict(requests=3000, runs=3, churn_seconds=20.0, churn_rate=100.0)
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    try:
        if args.digest_routing:
            return digest_routing_main(args)
        if args.targets:
            return targets_main(args)
        return comparison_main(args)
    except WaitTimedOut as exc:   # every process it started is stopped by then (each run's finally)
        print(f"proxy.py: {exc}", file=sys.stderr)
        return 1


def comparison_main(args) -> int:
    """The default run: bloomwise and Squid on the same workloads, and the summary traffic under churn."""
    use_squid = not args.no_squid and squid_binary() is not None
    from measure import machine
    try:
        from bloomwise._native.bloom import batch_kernels
        kernels = batch_kernels()
    except ImportError:
        kernels = "?"

    n = args.requests
    # documents: the workloads use 0 .. 2n (and one more); the churn fills an 8 MiB cache, then adds rate * seconds
    origin_process, origin = start_origin(max(4 * n + 100, 4000 + int(2 * args.churn_rate * args.churn_seconds)))
    results = {"machine": machine(), "kernels": kernels, "requests": n, "concurrency": args.concurrency,
               "runs": args.runs, "load_average": os.getloadavg(), "bloomwise": [], "squid": [], "churn": []}
    try:
        for run in range(args.runs):  # every run starts fresh proxy and Squid processes: no cache starts warm
            results["bloomwise"].append(asyncio.run(bloomwise_run(origin, n, args.concurrency, "bits")))
            if use_squid:
                results["squid"].append(asyncio.run(squid_run(origin, n, args.concurrency)))
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
        for threshold in ("1%", "10%"):
            results["churn"].append(asyncio.run(churn_run(origin, args.churn_seconds, args.churn_rate, threshold,
                                                          "2MiB" if args.quick else "8MiB")))
    finally:
        stop([origin_process])
    results["load_average_after"] = os.getloadavg()
    report = format_report(results, use_squid)
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    with open(os.path.join(args.out, f"{stamp}-proxy.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, f"{stamp}-proxy.md"), "w") as f:
        f.write(report)
    print(report)
    return 0


def _ranges(values) -> str:
    """[3, 4, 5, 9] -> '3-5, 9'."""
    out, start, prev = [], None, None
    for v in sorted(values) + [None]:
        if start is not None and (v is None or v != prev + 1):
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = None
        if v is not None and start is None:
            start = v
        prev = v
    return ", ".join(out)


def digest_routing_main(args) -> int:
    if squid_binary() is None:
        print("proxy.py: --digest-routing needs Squid (scripts/system-deps.sh installs it)", file=sys.stderr)
        return 2
    try:
        sizes = [int(x) for x in args.digest_routing.split(",")]
    except ValueError:
        print(f"proxy.py: --digest-routing {args.digest_routing!r}: expected entry counts such as 200,5000",
              file=sys.stderr)
        return 2
    origin_process, origin = start_origin(max(sizes) + 100)
    try:
        rows = [asyncio.run(digest_routing_run(origin, n, args.digest_sample)) for n in sizes]
    finally:
        stop([origin_process])
    version = subprocess.run([squid_binary(), "-v"], capture_output=True, text=True).stdout.split("\n")[0]
    lines = [f"# A Squid routing by a bloomwise sibling's Cache Digest ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
             "", f"{version}; the sibling (a bloomwise proxy) holds every URL of its digest; up to "
             f"{args.digest_sample} of them asked through the Squid, after it fetched the digest.", "",
             "| digest entries | mask bytes | URLs asked | listed in the digest as served | routed CD_SIBLING_HIT | "
             "5.7's receive loop replayed: URLs mispredicted (header bytes) | the same, any first read: "
             "mispredicted (header bytes, mask bytes in the first read) |",
             "|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r['entries']:,} | {r['mask_bytes']:,} | {r['sampled']} | "
                     f"{100 * r['listed_fraction']:.1f}% | {100 * r['cd_sibling_hit_fraction']:.1f}% | "
                     f"{r['model_mispredicted']} ({_ranges(r['model_header_bytes_with_that_fit'])}) | "
                     f"{r['free_first_read_mispredicted']} ({r['free_first_read_header_bytes']}, "
                     f"{r['free_first_read_mask_bytes']}) |")
    report = "\n".join(lines) + "\n"
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    with open(os.path.join(args.out, f"{stamp}-squid-digest-routing.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.out, f"{stamp}-squid-digest-routing.json"), "w") as f:
        json.dump({"squid": version, "rows": rows}, f, indent=1)
    print(report)
    return 0


def format_report(results, use_squid) -> str:
    m = results["machine"]
    b = results["bloomwise"]
    s = results["squid"]
    lines = [
        f"# bloomwise proxy on loopback ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
        f"CPU {m['cpu']} ({m['cpus']} cores, {m['cpu_id']}; AVX-512: {m['avx512']}; bloomwise kernels: "
        f"{results['kernels']}), Python {m['python']}. Load average before/after: "
        f"{', '.join(f'{x:.2f}' for x in results['load_average'])} / "
        f"{', '.join(f'{x:.2f}' for x in results['load_average_after'])} (a shared machine: figures are noisy).",
        f"{results['requests']} documents of mean {MEAN_SIZE} bytes per workload, {results['concurrency']} requests "
        f"in flight from one aiohttp client process, median of {results['runs']} run(s); origin, proxies and Squids "
        f"are separate processes.", "",
        "| workload | server | requests/s | p50 ms | p90 ms | p99 ms | note |", "|---|---|---|---|---|---|---|",
    ]

    def row(name, server, runs, key, note=""):
        lines.append(f"| {name} | {server} | {median_of(runs, key, 'rps'):,.0f} | {median_of(runs, key, 'p50_ms'):.2f} | "
                     f"{median_of(runs, key, 'p90_ms'):.2f} | {median_of(runs, key, 'p99_ms'):.2f} | {note} |")

    row("local hits", "bloomwise", b, "local")
    if s:
        row("local hits", "Squid 5.7", s, "local", f"hit fraction {median_of(s, 'local', 'hit_fraction'):.2f}")
    row("remote hits (sibling has it)", "bloomwise", b, "remote",
        f"remote-hit fraction {median_of(b, 'remote', 'remote_hit_fraction'):.3f}")
    if s:
        row("remote hits (sibling has it)", "Squid 5.7", s, "remote",
            f"CD_SIBLING_HIT fraction {median_of(s, 'remote', 'remote_hit_fraction'):.3f}")
    row("misses (nobody has it)", "bloomwise", b, "miss",
        f"summary decision {median_of(b, 'miss', 'route_us_per_miss'):.1f} us = "
        f"{100 * median_of(b, 'miss', 'route_share'):.2f}% of the miss")
    if s:
        sibling = median_of(s, 'remote', 'remote_hit_fraction')
        remote_ratio = f"{median_of(b, 'remote', 'rps') / median_of(s, 'remote', 'rps'):.2f}x" if sibling >= 0.9 else \
            (f"not comparable: only {100 * sibling:.0f}% of Squid's requests went to its sibling (CD_SIBLING_HIT), "
             f"the rest went direct to the loopback origin (consistent with Squid bug 5510, fixed after 5.7: the receiver corrupted a "
             f"peer's digest mask)")
        lines += ["", "Ratios bloomwise / Squid (requests/s): local hits "
                  f"{median_of(b, 'local', 'rps') / median_of(s, 'local', 'rps'):.2f}x, remote hits {remote_ratio}."]
    lines += ["", "Summary traffic at a given churn (P0's cache full, new documents at a fixed rate; P1 pulls every "
              "second and on notify):", "", "| update threshold | cached documents | new documents/s | summary versions/s | "
              "summary bytes/s at P1 | whole filter bytes |", "|---|---|---|---|---|---|"]
    for c in results["churn"]:
        lines.append(f"| {c['threshold']} | {c['cached_documents']} | {c['new_documents_per_s']:.1f} | "
                     f"{c['versions_per_s']:.2f} | {c['summary_bytes_per_s']:,.0f} | {c['filter_bytes']:,} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
