"""``bloomwise serve``: a local page with the sizing calculator, the Bloom-paradox explorer and a cluster's state.

Contract with the entry point (``bloomwise.cli``): :func:`register` adds the ``serve`` parser and sets
``func=run``; :func:`run` serves until SIGINT (Ctrl-C) or SIGTERM and returns the exit code (0 once stopped, 1 when
the address cannot be bound or the ``web`` extra is missing, 2 for bad arguments).

Examples::

    bloomwise serve                                   # http://127.0.0.1:8018/
    bloomwise serve --listen 127.0.0.1:0              # any free port (printed)
    bloomwise serve --proxy 127.0.0.1:3128 --proxy 127.0.0.1:3129
    bloomwise serve --listen 0.0.0.0:8018 --allow-remote
"""
from __future__ import annotations

import argparse
import ipaddress
import sys

from bloomwise.cli import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from bloomwise.cli._listen import parse_listen

__all__ = ["register", "run", "parse_listen"]

DEFAULT_PORT = 8018


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``serve`` subcommand to an ``argparse`` subparsers object and return its parser."""
    parser = subparsers.add_parser(
        "serve", help="serve a local page: sizing calculator, Bloom-paradox explorer, a cluster's live state",
        description="Serve a page with the sizing calculator (n, p, m, k as on hur.st, per-layout rates, the "
                    "command that builds the filter), the Bloom-paradox explorer and the live stats of running "
                    "bloomwise proxies. Needs the web extra: pip install 'bloomwise[web]'.")
    parser.add_argument("--listen", metavar="HOST:PORT", default=f"127.0.0.1:{DEFAULT_PORT}",
                        help=f"address to serve on (default 127.0.0.1:{DEFAULT_PORT}; port 0 picks a free port)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow a HOST other than loopback (the page then answers anyone who can reach it, "
                             "and fetches proxy stats on their behalf)")
    parser.add_argument("--proxy", metavar="HOST:PORT", action="append", default=[],
                        help="a bloomwise proxy to show in the cluster view: HOST:PORT, or its URL as "
                             "`bloomwise cluster` prints it, http://HOST:PORT (repeatable)")
    parser.add_argument("--refresh", metavar="SECONDS", type=float, default=2.0,
                        help="how often the page refreshes the cluster's stats (default 2)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``bloomwise serve`` with parsed arguments; return the exit code."""
    try:
        host, port = parse_listen(args.listen, DEFAULT_PORT)
    except ValueError as error:
        print(f"bloomwise serve: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not is_loopback(host) and not args.allow_remote:
        print(f"bloomwise serve: --listen {args.listen!r} is not a loopback address; the page would be "
              f"reachable from other machines: add --allow-remote if that is what you want", file=sys.stderr)
        return EXIT_USAGE
    if not (0.2 <= args.refresh <= 3600):
        print(f"bloomwise serve: --refresh {args.refresh:g} must be between 0.2 and 3600 seconds",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        from bloomwise.web import cluster, server  # on use: aiohttp, the web extra
    except ImportError as error:
        print(f"bloomwise serve: the page needs the web extra: pip install 'bloomwise[web]' ({error})",
              file=sys.stderr)
        return EXIT_FAILURE
    try:
        cluster.parse_addresses(args.proxy)
    except ValueError as error:
        print(f"bloomwise serve: --proxy: {error}", file=sys.stderr)
        return EXIT_USAGE

    def announce(url: str) -> None:
        print(f"bloomwise serve: {url}", flush=True)

    try:
        server.serve(host, port, proxies=args.proxy, refresh_seconds=args.refresh, announce=announce)
    except OSError as error:
        print(f"bloomwise serve: cannot listen on {args.listen}: {error.strerror or error}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK
