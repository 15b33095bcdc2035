"""Latency of local hits, remote hits and origin fetches across emulated hosts (needs root).

    .venv/bin/python benchmarks/proxy_netns.py      # ~2 minutes; writes benchmarks/results/DATE-proxy-netns.{md,json}

The origin and three bloomwise proxies each in its own network namespace (bloomwise.proxy.netns): one-way delays
4, 6 and 10 ms at the proxies and 25 ms at the origin, so round trips of 20-32 ms between proxies and 58-70 ms to
the origin. The clients run on the proxies' hosts (their namespaces): proxy 0's clients fetch ``--requests``
documents (origin fetches), then the same again (local hits); once proxy 1 holds proxy 0's summary, proxy 1's
clients fetch them (remote hits from proxy 0). Percentiles per kind, beside the emulated round trips, and the
per-peer round-trip times the proxies measured (``rtt_ms``); then, in a second cluster running the paradox policy,
which of two peers holding the same documents proxy 0 asks (the nearer one first, by Theorem 6's order).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from measure import write_results  # noqa: E402

from bloomwise.proxy.netns import NetnsCluster, namespaces_unavailable  # noqa: E402
from proxy import publish_every_new_document  # noqa: E402

MEAN_SIZE = 4096
PROXY_DELAYS_MS = (4.0, 6.0, 10.0)
ORIGIN_DELAY_MS = 25.0


def percentiles(seconds):
    ordered = sorted(seconds)
    return {f"p{int(p * 100)}_ms": ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000
            for p in (0.5, 0.9, 0.99)}


def measure(requests: int, concurrency: int) -> dict:
    options = ["--summary-interval", "1", "--mean-document-size", str(MEAN_SIZE), "--cache-size", "256MiB",
               *publish_every_new_document(requests)]
    with NetnsCluster(3, proxy_delays_ms=PROXY_DELAYS_MS, origin_delay_ms=ORIGIN_DELAY_MS,
                      origin_documents=requests + 10, mean_size=MEAN_SIZE, proxy_options=options) as cluster:
        urls = [f"{cluster.origin_url}/doc/{i}" for i in range(requests)]

        def fetch(i, expect):
            out = cluster.client(i, {"proxy": cluster.proxy_urls[i], "urls": urls, "concurrency": concurrency,
                                     "mean_size": MEAN_SIZE}, timeout=600)
            rows = out["requests"]
            if not all(status == 200 and body_ok for _, status, _, _, _, body_ok in rows):
                raise RuntimeError(f"a request through proxy {i} failed or had a wrong body")
            tags = [x_cache.split(" ")[0] for _, _, x_cache, _, _, _ in rows]
            return {"requests_per_s": len(rows) / out["seconds"], **percentiles([r[4] for r in rows]),
                    f"{expect.lower()}_fraction": tags.count(expect) / len(rows)}

        def stats(i):
            return cluster.client(i, {"get_json": cluster.proxy_urls[i] + "/bloomwise/stats"})["json"]

        origin = fetch(0, "MISS")
        local = fetch(0, "HIT")
        deadline = time.monotonic() + 120
        while True:
            own, peer = stats(0)["summary"], stats(1)["peers"][cluster.proxy_urls[0]]
            if own["num_keys"] >= requests and peer["summary_version"] == own["version"]:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("proxy 0's whole summary did not reach proxy 1 within 120 s")
            time.sleep(0.5)
        remote = fetch(1, "REMOTE_HIT")
        rtts = {f"{i}->{j}": {"measured_ms": stats(i)["peers"][cluster.proxy_urls[j]]["rtt_ms"],
                              "emulated_ms": cluster.round_trip_ms(i, j)}
                for i in range(3) for j in range(3) if i != j}
        return {"emulator": cluster.emulator, "origin_fetches": origin, "local_hits": local, "remote_hits": remote,
                "rtt_origin_ms": cluster.round_trip_ms(0), "rtt_remote_ms": cluster.round_trip_ms(1, 0),
                "peer_rtts": rtts}


def paradox_order(requests: int, concurrency: int) -> dict:
    """The paradox policy over the emulated network: proxies 1 and 2 hold the same documents (so their summaries and
    posteriors are alike), proxy 0 misses them: which peer does it ask first? Theorem 6's order is non-increasing
    p_j / tau_j, so with equal posteriors the nearer peer (proxy 1: a 20 ms round trip, against 28 ms)."""
    options = ["--summary-interval", "1", "--mean-document-size", str(MEAN_SIZE), "--cache-size", "256MiB",
               "--policy", "paradox", "--summary-kind", "counters", *publish_every_new_document(requests)]
    with NetnsCluster(3, proxy_delays_ms=PROXY_DELAYS_MS, origin_delay_ms=ORIGIN_DELAY_MS,
                      origin_documents=requests + 10, mean_size=MEAN_SIZE, proxy_options=options) as cluster:
        urls = [f"{cluster.origin_url}/doc/{i}" for i in range(requests)]
        for i in (1, 2):
            cluster.client(i, {"proxy": cluster.proxy_urls[i], "urls": urls, "concurrency": concurrency,
                               "mean_size": MEAN_SIZE}, timeout=600)

        def stats(i):
            return cluster.client(i, {"get_json": cluster.proxy_urls[i] + "/bloomwise/stats"})["json"]

        deadline = time.monotonic() + 120
        while True:
            peers = stats(0)["peers"]
            if all(peers[cluster.proxy_urls[j]]["summary_version"] == stats(j)["summary"]["version"]
                   and stats(j)["summary"]["num_keys"] >= requests for j in (1, 2)):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the summaries of proxies 1 and 2 did not reach proxy 0 within 120 s")
            time.sleep(0.5)
        before = stats(0)
        rows = cluster.client(0, {"proxy": cluster.proxy_urls[0], "urls": urls, "concurrency": 1,
                                  "mean_size": MEAN_SIZE}, timeout=600)["requests"]
        after = stats(0)
        served = {"proxy 1": 0, "proxy 2": 0, "origin": 0}
        for _, status, x_cache, peer, _, body_ok in rows:
            if status != 200 or not body_ok:
                raise RuntimeError("a request through proxy 0 failed or had a wrong body")
            key = "origin" if not x_cache.startswith("REMOTE_HIT") else \
                ("proxy 1" if peer == cluster.proxy_urls[1] else "proxy 2")
            served[key] += 1
        return {"served": served, "requests": len(rows),
                "peer_queries_per_request": (after["peer_queries"] - before["peer_queries"]) / len(rows),
                "rtt_ms": {f"proxy {j}": after["peers"][cluster.proxy_urls[j]]["rtt_ms"] for j in (1, 2)},
                "emulated_ms": {f"proxy {j}": cluster.round_trip_ms(0, j) for j in (1, 2)}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="documents per workload (default 500)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)
    reason = namespaces_unavailable()
    if reason is not None:
        print(f"proxy_netns.py: {reason}", file=sys.stderr)
        return 1
    from measure import machine

    load_before = os.getloadavg()
    r = measure(args.requests, args.concurrency)
    r["paradox"] = paradox_order(min(args.requests, 200), args.concurrency)
    r.update(machine=machine(), requests=args.requests, concurrency=args.concurrency, load_average=load_before,
             load_average_after=os.getloadavg())
    lines = [f"# bloomwise proxies across emulated hosts ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"Network namespaces, delays by {r['emulator']}; one-way delays {', '.join(map(str, PROXY_DELAYS_MS))} "
             f"ms at proxies 0-2, {ORIGIN_DELAY_MS} ms at the origin. {args.requests} documents of mean {MEAN_SIZE} "
             f"bytes, {args.concurrency} in flight from a client on the proxy's host. CPU {r['machine']['cpu']} "
             f"({r['machine']['cpus']} cores, shared); load average before/after "
             f"{load_before[0]:.2f} / {r['load_average_after'][0]:.2f}.", "",
             "| kind | emulated round trip | requests/s | p50 ms | p90 ms | p99 ms | fraction as expected |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, key, rtt, tag in (("local hits (proxy 0)", "local_hits", 0.0, "hit"),
                                ("remote hits (proxy 1 from proxy 0)", "remote_hits", r["rtt_remote_ms"],
                                 "remote_hit"),
                                ("origin fetches (proxy 0)", "origin_fetches", r["rtt_origin_ms"], "miss")):
        row = r[key]
        lines.append(f"| {name} | {rtt:g} ms | {row['requests_per_s']:,.0f} | {row['p50_ms']:.1f} | "
                     f"{row['p90_ms']:.1f} | {row['p99_ms']:.1f} | {100 * row[f'{tag}_fraction']:.1f}% |")
    lines += ["", "Per-peer round-trip times the proxies measured (rtt_ms, smoothed) against the emulated ones:", "",
              "| proxy -> peer | emulated ms | measured ms |", "|---|---:|---:|"]
    for pair, v in r["peer_rtts"].items():
        lines.append(f"| {pair} | {v['emulated_ms']:g} | {v['measured_ms']:.1f} |")
    px = r["paradox"]
    lines += ["", f"The paradox policy (counters summaries) over the same network: proxies 1 and 2 hold the same "
              f"{px['requests']} documents, proxy 0's clients ask for them one at a time. Served by proxy 1 (round "
              f"trip {px['emulated_ms']['proxy 1']:g} ms, measured {px['rtt_ms']['proxy 1']:.1f}): "
              f"{px['served']['proxy 1']}; by proxy 2 ({px['emulated_ms']['proxy 2']:g} ms, measured "
              f"{px['rtt_ms']['proxy 2']:.1f}): {px['served']['proxy 2']}; by the origin: {px['served']['origin']}; "
              f"{px['peer_queries_per_request']:.2f} peer queries per request."]
    report = "\n".join(lines) + "\n"
    write_results(Path(args.out), "proxy-netns", r, report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
