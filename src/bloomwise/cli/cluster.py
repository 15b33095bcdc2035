"""``bloomwise cluster``: A test origin and N bloomwise proxies on loopback, peered with each other; Ctrl-C stops all.

Examples::

    bloomwise cluster --proxies 3 --origin-documents 1000
    bloomwise cluster --proxies 4 --origin-documents 10000 --policy paradox --summary-kind counters
    bloomwise cluster --netns --proxies 3 --delays 4,6,10 --origin-delay 25    # as root: one namespace per host

Its proxies answer loopback clients only (with --netns: the cluster's hosts) and fetch from the test origin only
(with --netns: the cluster's hosts) unless --allow-destinations says otherwise.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from bloomwise.cli._parse import parse_positive_int, parse_size_bytes
from bloomwise.cli.proxy import add_proxy_options, config_from_args

__all__ = ["register", "run"]


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "cluster", help="start N peered bloomwise proxies and a test origin on loopback (Ctrl-C stops them)",
        description=__doc__.split("\n")[0].split(": ", 1)[1], epilog=__doc__.split("Examples::")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--proxies", default="3", metavar="N", help="number of proxies (default 3)")
    parser.add_argument("--origin-documents", default="1000", metavar="D",
                        help="documents the origin serves at /doc/0 .. /doc/D-1 (default 1000)")
    parser.add_argument("--mean-size", default="4096", metavar="SIZE",
                        help="mean size of the origin's documents, e.g. 4KiB (default 4096 bytes)")
    parser.add_argument("--netns", action="store_true",
                        help="put the origin and each proxy in its own network namespace, with delays (needs root)")
    parser.add_argument("--delays", default="4,6,10", metavar="MS,...",
                        help="with --netns: each proxy's one-way delay in ms, repeated over the proxies; the round "
                             "trip between two hosts is twice the sum of theirs (default 4,6,10)")
    parser.add_argument("--origin-delay", default="25", metavar="MS",
                        help="with --netns: the origin's one-way delay in ms (default 25)")
    parser.add_argument("--emulator", default="auto", choices=("auto", "netem", "relay"),
                        help="with --netns: how delays are made: netem, a delaying packet relay, or auto (netem "
                             "where the kernel has it)")
    add_proxy_options(parser, listen=False)
    parser.set_defaults(func=run)
    return parser


def _proxy_options(args) -> list[str]:
    out = ["--cache-size", args.cache_size, "--policy", args.policy, "--bits-per-entry", args.bits_per_entry,
           "--update-threshold", args.update_threshold, "--summary-kind", args.summary_kind,
           "--mean-document-size", args.mean_document_size,
           "--summary-interval", args.summary_interval, "--peer-timeout", args.peer_timeout,
           "--origin-cost", args.origin_cost, "--header-timeout", args.header_timeout, "--log-level", args.log_level]
    if args.parent:
        out += ["--parent", args.parent]
    if args.allow_destinations:
        out += ["--allow-destinations", args.allow_destinations]
    return out


def parse_delays(text: str, what: str) -> list[float]:
    """``4,6,10``: one-way delays in milliseconds, each 0 to 10000."""
    delays = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            value = float("nan")
        if not 0 <= value <= 10_000:
            raise ValueError(f"{what} {text!r}: expected milliseconds from 0 to 10000, comma-separated (e.g. 4,6,10)")
        delays.append(value)
    return delays


def run(args) -> int:
    # on use: the proxy (aiohttp)
    from bloomwise.proxy.cluster import Cluster, ClusterError
    from bloomwise.proxy.netns import NetnsCluster, namespaces_unavailable

    try:
        num_proxies = parse_positive_int(args.proxies, "--proxies")
        documents = parse_positive_int(args.origin_documents, "--origin-documents")
        mean_size = parse_size_bytes(args.mean_size, "--mean-size")
        if mean_size < 1:
            raise ValueError(f"--mean-size {args.mean_size!r} must be at least 1 byte")
        config_from_args(args, listen=("127.0.0.1", 0), peers=[])  # checks every proxy option here, once
        delays = parse_delays(args.delays, "--delays")
        [origin_delay] = parse_delays(args.origin_delay, "--origin-delay")
    except ValueError as exc:
        print(f"bloomwise cluster: {exc}", file=sys.stderr)
        return 2
    if num_proxies > 64:
        print(f"bloomwise cluster: --proxies {num_proxies}: at most 64 on one machine", file=sys.stderr)
        return 2
    if args.netns:
        reason = namespaces_unavailable()
        if reason is not None:
            print(f"bloomwise cluster: --netns: {reason}", file=sys.stderr)
            return 1
        cluster = NetnsCluster(num_proxies, proxy_delays_ms=delays, origin_delay_ms=origin_delay,
                               origin_documents=documents, mean_size=mean_size, proxy_options=_proxy_options(args),
                               emulator=args.emulator)
    else:
        cluster = Cluster(num_proxies, origin_documents=documents, mean_size=mean_size,
                          proxy_options=_proxy_options(args))
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        cluster.start()
        print(cluster.describe(), flush=True)
        print("\nCtrl-C stops the cluster.", flush=True)
        while not stop.wait(0.5):
            dead = [i for i, p in enumerate(cluster.proxies) if p.poll() is not None]
            if dead or cluster.origin.poll() is not None:
                print(f"bloomwise cluster: a process exited (proxies {dead}); stopping", file=sys.stderr)
                return 1
        return 0
    except ClusterError as exc:
        print(f"bloomwise cluster: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print("bloomwise cluster: stopped", file=sys.stderr)
