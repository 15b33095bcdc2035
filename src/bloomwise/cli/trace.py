"""`bloomwise trace`: write a synthetic proxy trace, or describe a trace file.

    bloomwise trace --synthetic 1M --proxies 8 --seed 1 -o trace.log            # Squid access.log
    bloomwise trace --synthetic 1M --proxies 8 -o trace.txt.gz --format plain    # compressed plain trace
    bloomwise trace access.log --proxies 8                                       # what a trace holds

The synthetic workload is :class:`bloomwise.cache.traces.SyntheticTrace` (its docstring explains the model and
its defaults). Describing a trace streams it once: requests per method, per Squid result and hierarchy code, per
proxy (with ``--proxies``, by :func:`bloomwise.cache.traces.assign_proxy`), bytes, time span, malformed lines,
and for GET requests the distinct URLs, the URLs requested once, and the hit ratio of an infinite cache
(``1 - distinct / requests``: the bound no cache can beat) for one cache and for one cache per proxy. Distinct URLs
are counted with bloomwise's ScalableBloomFilter (false-positive rate 1e-4), so memory grows with about 2.4
bytes per distinct URL, not with the log; a false positive counts a new URL as seen, so the counts can be low by
about 1e-4 of themselves.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from bloomwise.cli import EXIT_OK, EXIT_USAGE, CommandError
from bloomwise.cli._parse import parse_count, parse_positive_int, parse_size_bytes

#: Distinct methods / codes counted by name when describing a trace; the rest are counted as "(other)".
MAX_DISTINCT = 100
#: False-positive rate of the filters that count distinct URLs (each miscounts a new URL as seen at most this often).
DISTINCT_FPR = 1e-4


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "trace", help="write a synthetic proxy trace, or describe a trace file",
        description="Write a seeded synthetic web-proxy trace (--synthetic N -o FILE), or describe a trace file "
                    "(Squid access.log or plain 'timestamp client url size' lines; .gz/.bz2/.xz; - for stdin).")
    parser.add_argument("trace", nargs="?", metavar="FILE", help="a trace to describe")
    parser.add_argument("--synthetic", metavar="N", help="generate N requests (e.g. 1M)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="where the synthetic trace goes (.gz/.bz2/.xz compress; - for stdout)")
    parser.add_argument("--format", choices=("auto", "squid", "plain"), default=None,
                        help="trace format: written (squid, the default, or plain) or read (auto, the default)")
    parser.add_argument("--proxies", metavar="P", default=None,
                        help="number of proxies (synthetic: default 4; describing: count requests per proxy)")
    parser.add_argument("--seed", metavar="S", default="0", help="seed of the synthetic trace (default 0)")
    parser.add_argument("--documents", metavar="D", default="100000",
                        help="documents in the shared and private pools (default 100000)")
    parser.add_argument("--zipf", metavar="ALPHA", type=float, default=0.8, help="Zipf exponent (default 0.8)")
    parser.add_argument("--one-timers", metavar="F", type=float, default=0.25,
                        help="fraction of requests for documents requested once (default 0.25)")
    parser.add_argument("--shared", metavar="F", type=float, default=0.5,
                        help="fraction of the other requests for the pool all proxies share (default 0.5)")
    parser.add_argument("--mean-size", metavar="SIZE", default=None,
                        help="mean document size, e.g. 12KiB (default: SURGE's sizes, about 49 KB)")
    parser.add_argument("--size-tail", metavar="A", type=float, default=1.1,
                        help="Pareto shape of the size tail, > 1 (default 1.1)")
    parser.add_argument("--rate", metavar="R", type=float, default=100.0,
                        help="mean requests per second (default 100)")
    parser.add_argument("--strict", action="store_true", help="describing: stop at the first malformed line")
    parser.add_argument("--json", action="store_true", help="describing: machine-readable output")
    parser.set_defaults(func=run)


_FLAGS = {"num_requests": "--synthetic", "num_proxies": "--proxies", "num_documents": "--documents",
          "zipf_alpha": "--zipf", "one_timer_fraction": "--one-timers", "shared_fraction": "--shared",
          "mean_size": "--mean-size", "size_tail": "--size-tail", "seed": "--seed", "request_rate": "--rate"}


def _usage(message: str) -> CommandError:
    for name, flag in _FLAGS.items():
        message = message.replace(name, flag)
    return CommandError(message, EXIT_USAGE)


def run(args: argparse.Namespace) -> int:
    if (args.synthetic is None) == (args.trace is None):
        raise CommandError("give either --synthetic N -o FILE (write a trace) or a FILE to describe", EXIT_USAGE)
    return _write_synthetic(args) if args.synthetic is not None else _describe(args)


def _write_synthetic(args) -> int:
    from bloomwise.cache.traces import SyntheticTrace, write_plain_trace, write_squid_log

    if args.output is None:
        raise CommandError("--synthetic needs -o FILE (- for stdout)", EXIT_USAGE)
    if args.format == "auto":
        raise CommandError("--format auto is for reading: write squid or plain", EXIT_USAGE)
    try:
        trace = SyntheticTrace(
            parse_positive_int(args.synthetic, "--synthetic"),
            num_proxies=parse_positive_int(args.proxies or "4", "--proxies"),
            num_documents=parse_positive_int(args.documents, "--documents"),
            zipf_alpha=args.zipf, one_timer_fraction=args.one_timers, shared_fraction=args.shared,
            mean_size=None if args.mean_size is None else parse_size_bytes(args.mean_size, "--mean-size"),
            size_tail=args.size_tail, seed=parse_count(args.seed, "--seed"), request_rate=args.rate)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    writer = write_plain_trace if args.format == "plain" else write_squid_log
    try:
        count = writer(trace, args.output)
    except OSError as exc:
        raise CommandError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    if args.output != "-":
        print(f"wrote {count:,} requests ({args.format or 'squid'} format) to {args.output}: {trace!r}")
    return EXIT_OK


def _bounded(counter: Counter, key) -> None:
    if key in counter or len(counter) < MAX_DISTINCT:
        counter[key] += 1
    else:
        counter["(other)"] += 1


def _describe(args) -> int:
    from bloomwise.cache.traces import TraceError, assign_proxy, open_trace, request_key

    try:
        num_proxies = None if args.proxies is None else parse_positive_int(args.proxies, "--proxies")
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    from bloomwise import ScalableBloomFilter

    methods, codes, hierarchies, proxies = Counter(), Counter(), Counter(), Counter()
    total_bytes, first, last = 0, None, None
    # distinct GET URLs, counted in bounded memory: a key is new when a filter certainly has not seen it
    seen, again = (ScalableBloomFilter(1 << 16, DISTINCT_FPR, seed=s) for s in (1, 2))
    seen_by = [ScalableBloomFilter(1 << 14, DISTINCT_FPR, seed=3) for _ in range(num_proxies or 0)]
    gets = distinct = repeated = distinct_by_proxy = 0
    try:
        with open_trace(args.trace, format=args.format or "auto", strict=args.strict) as reader:
            for request in reader:
                _bounded(methods, request.method)
                if request.squid_code is not None:
                    _bounded(codes, request.squid_code)
                    _bounded(hierarchies, request.hierarchy)
                proxy = None if num_proxies is None else assign_proxy(request.client, num_proxies)
                if proxy is not None:
                    proxies[proxy] += 1
                if request.method == "GET":
                    gets += 1
                    key = request_key("GET", request.url)
                    if seen.add(key):
                        distinct += 1
                    elif again.add(key):
                        repeated += 1
                    if proxy is not None and seen_by[proxy].add(key):
                        distinct_by_proxy += 1
                total_bytes += request.size
                first = request.timestamp if first is None else min(first, request.timestamp)
                last = request.timestamp if last is None else max(last, request.timestamp)
    except TraceError as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:  # "FILE: cannot read it (no such trace file)", not "[Errno 2] ..."
        raise CommandError(f"{args.trace}: cannot read it ({exc.strerror or exc})") from None
    info = {
        "file": reader.path, "format": reader.format, "lines": reader.lines, "requests": reader.requests,
        "skipped_lines": reader.skipped, "malformed_lines": reader.malformed,
        "first_malformed": [{"line": line, "reason": reason} for line, reason in reader.malformed_lines[:10]],
        "methods": dict(methods.most_common()), "bytes": total_bytes,
        "first_timestamp": first, "last_timestamp": last,
    }
    if gets:
        info["get_requests"] = gets
        info["distinct_get_urls"] = distinct
        info["urls_requested_once"] = distinct - repeated
        info["infinite_cache_hit_ratio"] = 1 - distinct / gets
        if num_proxies is not None:
            info["infinite_cache_hit_ratio_per_proxy"] = 1 - distinct_by_proxy / gets
    if codes:
        info["squid_codes"] = dict(codes.most_common())
        info["hierarchy_codes"] = dict(hierarchies.most_common())
    if num_proxies is not None:
        info["requests_per_proxy"] = {str(p): proxies[p] for p in range(num_proxies)}
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    span = "-" if first is None else f"{last - first:,.3f} s ({first:.3f} to {last:.3f})"
    out = [f"file            {info['file']} ({info['format']})",
           f"lines           {info['lines']:,} ({info['requests']:,} requests, {info['skipped_lines']:,} blank or "
           f"comments, {info['malformed_lines']:,} malformed)",
           f"bytes           {total_bytes:,}",
           f"time span       {span}",
           "methods         " + ", ".join(f"{m} {n:,}" for m, n in methods.most_common())]
    if gets:
        out.append(f"GET URLs        {distinct:,} distinct, {distinct - repeated:,} of them requested once "
                   f"({(distinct - repeated) / distinct:.1%}) (Bloom-filter counts: each new URL is missed with "
                   f"probability < {DISTINCT_FPR:g})")
        alone = ("" if num_proxies is None else
                 f"; {info['infinite_cache_hit_ratio_per_proxy']:.3f} with one cache per proxy, no sharing")
        out.append(f"max hit ratio   {info['infinite_cache_hit_ratio']:.3f} with one infinite cache{alone}")
    if codes:
        out.append("squid codes     " + ", ".join(f"{c} {n:,}" for c, n in codes.most_common()))
        out.append("hierarchy       " + ", ".join(f"{c} {n:,}" for c, n in hierarchies.most_common()))
    if num_proxies is not None:
        out.append("per proxy       " + ", ".join(f"{p}: {proxies[p]:,}" for p in range(num_proxies)))
    for line, reason in reader.malformed_lines[:10]:
        out.append(f"malformed       line {line}: {reason}")
    print("\n".join(out))
    sys.stdout.flush()
    return EXIT_OK
