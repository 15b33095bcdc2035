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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import aiohttp  # noqa: E402

from bloomwise.proxy.cluster import read_ready_line  # noqa: E402
from bloomwise.proxy.squid import SquidPeer, SquidProcess, free_port, squid_binary  # noqa: E402

MEAN_SIZE = 4096


def start_origin(documents: int):
    p = subprocess.Popen([sys.executable, "-m", "bloomwise.proxy.origin", "--listen", "127.0.0.1:0", "--documents",
                          str(documents), "--mean-size", str(MEAN_SIZE)], stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    return p, read_ready_line(p, 60, "origin")["origin"]


def start_proxy(port: int, peers: list, extra: list):
    args = [sys.executable, "-m", "bloomwise", "proxy", "--listen", f"127.0.0.1:{port}", "--cache-size", "256MiB"]
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


async def load(proxy: str, urls: list, concurrency: int, expect: str = None):
    """GET every URL once through ``proxy`` with ``concurrency`` in flight: (requests/s, latencies in s, tags)."""
    queue = list(reversed(urls))
    latencies, tags = [], {}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker():
            while queue:
                url = queue.pop()
                started = time.perf_counter()
                async with session.get(url, proxy=proxy) as reply:
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


async def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def bloomwise_run(origin, n, concurrency, summary_kind):
    """Local hits on P0, remote hits at P1 (served by P0), and misses at P1 (to the origin): one run."""
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{ports[i]}" for i in range(2)]
    extra = ["--summary-interval", "1", "--summary-kind", summary_kind, "--update-threshold", "1%",
             "--mean-document-size", str(MEAN_SIZE)]
    p0, u0 = start_proxy(ports[0], [urls[1]], extra)
    p1, u1 = start_proxy(ports[1], [urls[0]], extra)
    try:
        held = [f"{origin}/doc/{i}" for i in range(n)]
        await load(u0, held, concurrency)                                         # warm P0
        rps, lat, tags = await load(u0, held, concurrency)                        # local hits
        assert tags.get("HIT", 0) == n, tags
        local = {"rps": rps, **percentiles(lat)}

        async def p1_has_summary():  # P0's summary of all it holds (not one published during the warm-up), at P1
            stats = await fetch_json(u1 + "/bloomwise/stats")
            peer = stats["peers"][u0]
            own = (await fetch_json(u0 + "/bloomwise/stats"))["summary"]
            return peer["summary_version"] is not None and peer["summary_bytes"] > 0 and \
                own["num_keys"] >= n and own["version"] == peer["summary_version"]
        await wait_until(p1_has_summary, 60, "P0's last summary at P1")
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

        async def digest_complete():
            from bloomwise.cache.squid_digest import CacheDigest
            try:
                d = CacheDigest.from_bytes(await asyncio.to_thread(s0.fetch_digest))
            except OSError:
                return False
            return all(d.contains_url(u) for u in held)
        await wait_until(digest_complete, 60, "Squid's digest")
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
        routed = 0
        for line in squid.access_log_lines():
            fields = line.split()
            if len(fields) >= 9 and fields[6] in wanted and fields[8].startswith("CD_SIBLING_HIT/"):
                routed += 1
        async with aiohttp.ClientSession() as session:
            async with session.get(u0 + "/squid-internal-periodic/store_digest") as reply:
                digest = CacheDigest.from_bytes(await reply.read())
        listed = sum(digest.contains_url(u) for u in chosen)
        return {"entries": entries, "mask_bytes": mask_size_for(entries, 5), "sampled": len(chosen),
                "listed_fraction": listed / len(chosen), "cd_sibling_hit_fraction": routed / len(chosen)}
    finally:
        if squid is not None:
            await asyncio.to_thread(squid.stop)
        stop([p0])


async def _digests_served(proxy_url):
    return (await fetch_json(proxy_url + "/bloomwise/stats"))["digests_served"] >= 1


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
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)
    defaults = dict(requests=200, runs=1, churn_seconds=3.0, churn_rate=50.0) if args.quick else \
        dict(requests=3000, runs=3, churn_seconds=20.0, churn_rate=100.0)
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    use_squid = not args.no_squid and squid_binary() is not None
    if args.digest_routing:
        return digest_routing_main(args)
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
             "| digest entries | mask bytes | URLs asked | listed in the digest as served | routed CD_SIBLING_HIT |",
             "|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['entries']:,} | {r['mask_bytes']:,} | {r['sampled']} | "
                     f"{100 * r['listed_fraction']:.1f}% | {100 * r['cd_sibling_hit_fraction']:.1f}% |")
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
