"""``bloomwise proxy``: Run one caching proxy that shares summaries with its peers (pip install "bloomwise[proxy]").

Closed by default: it answers loopback clients only (--allow-clients), never fetches from loopback, link-local or
cloud metadata addresses (--allow-destinations lists where it may fetch instead), and refuses CONNECT.

Examples::

    bloomwise proxy --listen 127.0.0.1:3128 --peer http://127.0.0.1:3129 --cache-size 64MiB
    bloomwise proxy --listen 10.0.0.1:3128 --allow-clients 10.0.0.0/24 --allow-destinations .example.com:80 \\
        --peer http://10.0.0.2:3128 --peer http://10.0.0.3:3128 --policy paradox --summary-kind counters
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import signal
import sys

from bloomwise.cli._listen import parse_listen
from bloomwise.cli._parse import (parse_fraction, parse_positive_int, parse_positive_size_bytes, parse_quantity,
                                  parse_size_bytes, parse_tolerance)
from bloomwise.proxy.access import ClientPolicy, DestinationPolicy

__all__ = ["register", "run", "parse_listen", "parse_peer_url"]

POLICIES = ("none", "icp", "summary", "paradox")


def parse_peer_url(text: str, what: str = "--peer") -> str:
    """``http://host:port`` (a trailing slash is dropped); anything else is a usage error."""
    from urllib.parse import urlsplit

    parts = urlsplit(text.strip())
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/"):
        raise ValueError(f"{what} {text!r} must be http://HOST:PORT (e.g. http://127.0.0.1:3129)")
    return text.strip().rstrip("/")


def add_proxy_options(parser: argparse.ArgumentParser, *, listen: bool = True) -> None:
    """The options a proxy takes (shared with ``bloomwise cluster``)."""
    if listen:
        parser.add_argument("--listen", default="127.0.0.1:3128", metavar="HOST:PORT",
                            help="address to listen on (default 127.0.0.1:3128; port 0: any free port)")
        parser.add_argument("--peer", action="append", default=[], metavar="URL",
                            help="a peer proxy, http://HOST:PORT (repeat for more); a bloomwise proxy or a Squid "
                                 "(its Cache Digest is used)")
        parser.add_argument("--name", help="this proxy's name in stats and logs (default: its URL)")
        parser.add_argument("--access-log", metavar="FILE",
                            help="append one line per client request to FILE, in Squid's native access.log format "
                                 "(bloomwise simulate --trace FILE --format squid replays it)")
        parser.add_argument("--allow-clients", metavar="CIDR,...",
                            help="client addresses allowed to use the proxy (default: loopback only, "
                                 "127.0.0.0/8 and ::1); others get 403")
    parser.add_argument("--allow-destinations", metavar="HOST|CIDR[:PORTS],...",
                        help="where the proxy may fetch: host names (.example.com for subdomains too), addresses or "
                             "networks, each with :PORT or :LOW-HIGH (default: anything but loopback, link-local "
                             "and cloud metadata addresses)")
    parser.add_argument("--parent", metavar="URL",
                        help="a parent proxy that has every document (misses go there, not to the URL's server)")
    parser.add_argument("--cache-size", default="64MiB", metavar="SIZE", help="cache size (default 64MiB)")
    parser.add_argument("--policy", default="summary", choices=POLICIES, help="routing of misses (default summary)")
    parser.add_argument("--bits-per-entry", default="8", metavar="B",
                        help="summary bits (counters) per expected document (default 8)")
    parser.add_argument("--update-threshold", default="1%", metavar="T",
                        help="publish a new summary when the documents new since the last one reach this "
                             "fraction of the documents cached (1%% or 0.01; default 1%%)")
    parser.add_argument("--mean-document-size", default="8KiB", metavar="SIZE",
                        help="mean document size expected: the summary starts sized for cache size / this documents "
                             "(default 8KiB)")
    parser.add_argument("--resize-tolerance", default="10%", metavar="D",
                        help="re-size the summary to B positions per advertised document when their number drifted "
                             "more than this fraction from the count it was sized for (default 10%%, Squid's; off: "
                             "never, the summary keeps the size --mean-document-size gives)")
    parser.add_argument("--summary-kind", default="bits", choices=("bits", "counters"),
                        help="what peers receive: the bit array (Summary Cache) or the 4-bit counters (needed by "
                             "the paradox policy's Theorem 2 posterior; default bits)")
    parser.add_argument("--summary-interval", default="5", metavar="SECONDS",
                        help="seconds between periodic summary pulls from each peer (default 5)")
    parser.add_argument("--peer-timeout", default="2", metavar="SECONDS",
                        help="a peer slower than this is skipped and marked unhealthy (default 2)")
    parser.add_argument("--header-timeout", default="10", metavar="SECONDS",
                        help="a client whose request headers are not complete this long after their first byte (or "
                             "after it connected) gets 408 and is disconnected (default 10)")
    parser.add_argument("--origin-cost", default="100", metavar="MS",
                        help="omega, the cost of an origin fetch in milliseconds (peers cost their measured "
                             "round-trip time; default 100)")
    parser.add_argument("--no-fast-hits", dest="fast_hits", action="store_false",
                        help="answer fresh hits with aiohttp too, not with the lean hit path (to compare)")
    parser.add_argument("--no-lean-misses", dest="lean_misses", action="store_false",
                        help="leave misses to aiohttp: the lean path then does not ask the peers itself nor send their "
                             "remote hits (to compare)")
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "proxy", help="run a caching HTTP proxy that shares Bloom-filter summaries with its peers",
        description=__doc__.split("\n")[0].split(": ", 1)[1], epilog=__doc__.split("\n\n", 1)[1].replace("::", ":"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_proxy_options(parser)
    parser.set_defaults(func=run)
    return parser


def config_from_args(args, *, listen: tuple[str, int] = None, peers=None, name=None):
    """A ProxyConfig from parsed options (ValueError with a message naming the option on bad input)."""
    from bloomwise.proxy.server import ProxyConfig  # on use: the proxy (aiohttp)

    host, port = listen if listen is not None else parse_listen(args.listen)
    bits_per_entry = parse_positive_int(args.bits_per_entry, "--bits-per-entry")
    if bits_per_entry > 64:
        raise ValueError(f"--bits-per-entry {args.bits_per_entry!r} must be at most 64 (8 gives a 2% false-positive "
                         f"rate, 16 about 0.05%)")
    cache_size = parse_size_bytes(args.cache_size, "--cache-size")
    if cache_size < 1:
        raise ValueError(f"--cache-size {args.cache_size!r} must be at least 1 byte (examples: 64MiB, 1GiB)")
    mean_document_size = parse_positive_size_bytes(args.mean_document_size, "--mean-document-size")
    clients = getattr(args, "allow_clients", None)
    return ProxyConfig(
        host=host, port=port,
        peers=[parse_peer_url(p) for p in (args.peer if peers is None else peers)],
        parent=parse_peer_url(args.parent, "--parent") if args.parent else None,
        cache_size=cache_size,
        policy=args.policy,
        bits_per_entry=bits_per_entry,
        update_threshold=parse_fraction(args.update_threshold, "--update-threshold"),
        summary_kind=args.summary_kind,
        name=name if name is not None else getattr(args, "name", None),
        summary_interval=parse_quantity(args.summary_interval, "--summary-interval", "seconds"),
        peer_timeout=parse_quantity(args.peer_timeout, "--peer-timeout", "seconds"),
        header_timeout=parse_quantity(args.header_timeout, "--header-timeout", "seconds"),
        fast_hits=getattr(args, "fast_hits", True),
        lean_misses=getattr(args, "lean_misses", True),
        access_log=getattr(args, "access_log", None),
        origin_cost_ms=parse_quantity(args.origin_cost, "--origin-cost", "milliseconds"),
        mean_document_size=mean_document_size,
        resize_tolerance=parse_tolerance(args.resize_tolerance, "--resize-tolerance"),
        clients=ClientPolicy.parse(clients) if clients is not None else None,
        destinations=(DestinationPolicy.parse(args.allow_destinations) if args.allow_destinations is not None
                      else None),
    )


async def _serve_until_signal(proxy) -> None:
    await proxy.start()
    # What is loaded by now (modules, aiohttp, the cache's structures) lives as long as the proxy: kept out of the
    # cyclic collector's sight, its full collections scan only what came later. Measured at 64 remote hits in
    # flight: p99 7-9 ms with, 28-36 ms without (the full collections' pauses).
    gc.freeze()
    print(json.dumps({"proxy": proxy.url, "name": proxy.name, "peers": proxy.config.peers}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await proxy.stop()


def run_event_loop(main) -> None:
    """Run ``main`` on uvloop when it is installed (the proxy extra; its event loop and sockets are in C), else on
    asyncio's own loop, saying so in the log."""
    try:
        import uvloop  # an optional dependency: the standard loop works without it
    except ImportError:
        logging.getLogger("bloomwise.proxy").info("uvloop is not installed: the standard asyncio event loop runs "
                                                  "(pip install 'bloomwise[proxy]')")
        asyncio.run(main)
        return
    uvloop.run(main)


def run(args) -> int:
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        print("bloomwise proxy: needs aiohttp: pip install 'bloomwise[proxy]'", file=sys.stderr)
        return 1
    from bloomwise.proxy.server import BloomwiseProxy  # on use: the proxy (aiohttp)

    try:
        config = config_from_args(args)
        proxy = BloomwiseProxy(config)   # sizes the cache and its summary: a setting they refuse is a usage error
    except ValueError as exc:
        print(f"bloomwise proxy: {exc}", file=sys.stderr)
        return 2
    if config.access_log:
        try:
            open(config.access_log, "a").close()
        except OSError as exc:
            print(f"bloomwise proxy: --access-log {config.access_log}: cannot write it ({exc.strerror or exc})",
                  file=sys.stderr)
            return 1
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        run_event_loop(_serve_until_signal(proxy))
    except OSError as exc:
        print(f"bloomwise proxy: cannot listen on {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0
