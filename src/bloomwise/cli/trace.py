"""`bloomwise trace`: write a synthetic proxy trace, describe a trace file, or fetch a real trace.

    bloomwise trace --synthetic 1M --proxies 8 --seed 1 -o trace.log            # Squid access.log
    bloomwise trace --synthetic 1M --proxies 8 -o trace.txt.gz --format plain    # compressed plain trace
    bloomwise trace access.log --proxies 8                                       # what a trace holds
    bloomwise trace fetch twitter-cluster52                                      # a real trace, its path printed
    bloomwise trace fetch --list                                                 # the real traces known

Writing more than :data:`MAX_SYNTHETIC_REQUESTS` requests needs ``--force`` (the refusal says how many bytes the
trace would take). Real traces come from package registries (:mod:`bloomwise.cache.traces.fetch`); a fetched
trace's name is accepted wherever a trace file is (:func:`resolve_trace`).

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
import io
import itertools
import json
import os
import sys
from collections import Counter

from bloomwise.cli import EXIT_OK, EXIT_USAGE, CommandError
from bloomwise.cli._parse import parse_count, parse_positive_int, parse_size_bytes

#: Distinct methods / codes counted by name when describing a trace; the rest are counted as "(other)".
MAX_DISTINCT = 100
#: False-positive rate of the filters that count distinct URLs (each miscounts a new URL as seen at most this often).
DISTINCT_FPR = 1e-4
#: The most requests ``--synthetic`` writes without ``--force`` (about 10 GB of Squid log, 6 GB plain).
MAX_SYNTHETIC_REQUESTS = 100_000_000
#: ``bloomwise.cache.traces``' READ_FORMATS and ASSIGNMENT_RULES, spelled out here: the cache package is imported
#: only when a trace command runs (it takes about half a second, which every other command would pay)
READ_FORMATS = ("auto", "squid", "plain", "csv", "oracle-general")
ASSIGNMENT_RULES = ("hash-client", "random", "round-robin")
#: Requests generated and formatted to estimate the bytes of a trace refused for its size.
_SIZE_SAMPLE = 2000


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "trace", help="write a synthetic proxy trace, describe a trace file, fetch a real trace",
        description="Write a seeded synthetic web-proxy trace (--synthetic N -o FILE); describe a trace file "
                    "(Squid access.log, plain 'timestamp client url size' lines, libCacheSim csv or oracleGeneral; "
                    ".gz/.bz2/.xz/.zst; - for stdin; or the name of a fetched trace); or fetch a real trace "
                    "('trace fetch NAME', 'trace fetch --list') into $BLOOMWISE_DATA (default ~/.cache/bloomwise) "
                    "and print its path.")
    parser.add_argument("trace", nargs="?", metavar="FILE", help="a trace to describe (or: fetch)")
    parser.add_argument("name", nargs="?", metavar="NAME", help="with fetch: the real trace to fetch")
    parser.add_argument("--list", action="store_true", help="with fetch: list the real traces and where they are")
    parser.add_argument("--synthetic", metavar="N", help="generate N requests (e.g. 1M)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="where the synthetic trace goes (.gz/.bz2/.xz compress; - for stdout)")
    parser.add_argument("--format", choices=READ_FORMATS, default=None,
                        help="trace format: written (squid, the default, or plain) or read (auto, the default: "
                             "by name for libCacheSim's files, else by content)")
    parser.add_argument("--csv-columns", metavar="SPEC", default=None,
                        help="csv without a header naming its columns: e.g. time=1,object=2,size=3 (1-based; "
                             "client=N optional)")
    parser.add_argument("--limit", metavar="N", default=None, help="describing: only the first N requests")
    parser.add_argument("--assign", choices=ASSIGNMENT_RULES, default=None,
                        help="describing with --proxies: how requests go to proxies (default hash-client; traces "
                             "without clients need random or round-robin)")
    parser.add_argument("--force", action="store_true",
                        help=f"write more than {MAX_SYNTHETIC_REQUESTS:,} synthetic requests")
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
    if args.trace == "fetch" and args.synthetic is None:
        return _fetch(args)
    if args.list or args.name is not None:
        raise CommandError("--list and a NAME go with fetch: bloomwise trace fetch NAME, bloomwise trace fetch "
                           "--list", EXIT_USAGE)
    if (args.synthetic is None) == (args.trace is None):
        raise CommandError("give either --synthetic N -o FILE (write a trace), a FILE to describe, or fetch NAME",
                           EXIT_USAGE)
    return _write_synthetic(args) if args.synthetic is not None else _describe(args)


def resolve_trace(text: str) -> str:
    """The file a trace argument names: a path as given (also ``-``), or the file of a fetched real trace.

    :raises CommandError: the name of a real trace that has not been fetched yet (exit 1, saying how to fetch it).
    """
    from bloomwise.cache.traces import REAL_TRACES, fetched_path  # on use: the trace readers

    if text == "-" or os.path.exists(text) or text not in REAL_TRACES:
        return text
    path = fetched_path(text)
    if path is None:
        raise CommandError(f"{text} is a real trace that has not been fetched yet: run `bloomwise trace fetch "
                           f"{text}` (no file named {text!r} here either)")
    return path


def _fetch(args) -> int:
    # on use: the trace readers
    from bloomwise.cache.traces import REAL_TRACES, FetchError, data_directory, fetch, fetched_path

    if args.list:
        if args.name is not None:
            raise CommandError("give either fetch NAME or fetch --list", EXIT_USAGE)
        print(f"real traces (fetched into {os.path.join(data_directory(), 'traces')}):")
        width = max(map(len, REAL_TRACES))
        for name, entry in REAL_TRACES.items():
            where = fetched_path(name) or "not fetched"
            print(f"  {name:<{width}}  {entry.requests:>10,} requests  {_bytes(entry.size):>8}  "
                  f"{entry.format:<14}  from {entry.requirement} ({entry.registry})  {where}")
        return EXIT_OK
    if args.name is None:
        raise CommandError(f"fetch needs a NAME, one of {', '.join(REAL_TRACES)} (or --list)", EXIT_USAGE)
    if args.name not in REAL_TRACES:
        raise CommandError(f"no real trace named {args.name!r}: choose one of {', '.join(REAL_TRACES)}", EXIT_USAGE)
    try:
        path = fetch(args.name)
    except FetchError as error:
        raise CommandError(str(error)) from None
    print(path)
    return EXIT_OK


def _write_synthetic(args) -> int:
    # on use: the trace readers
    from bloomwise.cache.traces import SyntheticTrace, write_plain_trace, write_squid_log

    if args.output is None:
        raise CommandError("--synthetic needs -o FILE (- for stdout)", EXIT_USAGE)
    if args.format not in (None, "squid", "plain"):
        raise CommandError(f"--format {args.format} is for reading: write squid or plain", EXIT_USAGE)
    for flag, value in (("--csv-columns", args.csv_columns), ("--limit", args.limit), ("--assign", args.assign)):
        if value is not None:
            raise CommandError(f"{flag} is for reading a trace, not with --synthetic", EXIT_USAGE)
    try:
        num_requests = parse_positive_int(args.synthetic, "--synthetic")
        trace = SyntheticTrace(
            num_requests,
            num_proxies=parse_positive_int(args.proxies or "4", "--proxies"),
            num_documents=parse_positive_int(args.documents, "--documents"),
            zipf_alpha=args.zipf, one_timer_fraction=args.one_timers, shared_fraction=args.shared,
            mean_size=None if args.mean_size is None else parse_size_bytes(args.mean_size, "--mean-size"),
            size_tail=args.size_tail, seed=parse_count(args.seed, "--seed"), request_rate=args.rate)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    writer = write_plain_trace if args.format == "plain" else write_squid_log
    if num_requests > MAX_SYNTHETIC_REQUESTS and not args.force:
        sample = io.StringIO()
        sampled = writer(itertools.islice(trace, _SIZE_SAMPLE), sample)
        per_request = len(sample.getvalue().encode("utf-8")) / sampled
        compressed = args.output != "-" and os.path.splitext(args.output)[1].lower() in (
            ".gz", ".bz2", ".xz", ".lzma", ".zst")
        raise CommandError(
            f"--synthetic {args.synthetic}: {num_requests:,} requests would write about "
            f"{_bytes(num_requests * per_request)} ({per_request:.0f} bytes a request in {args.format or 'squid'} "
            f"format{', before compression' if compressed else ''}); more than {MAX_SYNTHETIC_REQUESTS:,} requests "
            f"needs --force", EXIT_USAGE)
    try:
        count = writer(trace, args.output)
    except OSError as exc:
        raise CommandError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    except ImportError as exc:  # .zst without the zstandard package
        raise CommandError(str(exc)) from None
    if args.output != "-":
        print(f"wrote {count:,} requests ({args.format or 'squid'} format) to {args.output}: {trace!r}")
    return EXIT_OK


def _bytes(count: float) -> str:
    """A byte count for people: 11.4 GB, 9.9e+31 bytes."""
    if count >= 1e15:
        return f"{count:.1e} bytes"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} bytes"


def _csv_columns(text: str) -> dict:
    from bloomwise.cache.traces import parse_csv_columns  # on use: the trace readers

    try:
        return parse_csv_columns(text)
    except ValueError as exc:
        raise ValueError(str(exc).replace("csv columns", "--csv-columns", 1)) from None


def _open(open_trace, path: str, format: str, strict: bool, columns):
    """open_trace with its usage errors (exit 2), a file that is not a trace and a missing zstandard package
    (exit 1) as CommandError."""
    if columns is not None and format not in ("auto", "csv"):
        raise CommandError(f"--csv-columns goes with --format csv, not {format}", EXIT_USAGE)
    from bloomwise.cache.traces import TraceError  # on use: the trace readers

    try:
        return open_trace(path, format=format, strict=strict, csv_columns=columns)
    except (ImportError, TraceError) as exc:  # TraceError is a ValueError, but not a usage error
        raise CommandError(str(exc)) from None
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None


def _bounded(counter: Counter, key) -> None:
    if key in counter or len(counter) < MAX_DISTINCT:
        counter[key] += 1
    else:
        counter["(other)"] += 1


def _describe(args) -> int:
    # on use: the trace readers and the compiled core
    from bloomwise import ScalableBloomFilter
    from bloomwise.cache.traces import TraceError, assign_proxy, assigned_requests, open_trace, request_key

    try:
        num_proxies = None if args.proxies is None else parse_positive_int(args.proxies, "--proxies")
        limit = None if args.limit is None else parse_positive_int(args.limit, "--limit")
        seed = parse_count(args.seed, "--seed")
        columns = None if args.csv_columns is None else _csv_columns(args.csv_columns)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    if args.assign is not None and num_proxies is None:
        raise CommandError("--assign needs --proxies P (the requests are counted per proxy)", EXIT_USAGE)
    path = resolve_trace(args.trace)

    methods, codes, hierarchies, proxies = Counter(), Counter(), Counter(), Counter()
    total_bytes, first, last = 0, None, None
    # distinct GET URLs, counted in bounded memory: a key is new when a filter certainly has not seen it
    seen, again = (ScalableBloomFilter(1 << 16, DISTINCT_FPR, seed=s) for s in (1, 2))
    seen_by = [ScalableBloomFilter(1 << 14, DISTINCT_FPR, seed=3) for _ in range(num_proxies or 0)]
    gets = distinct = repeated = distinct_by_proxy = 0
    try:
        with _open(open_trace, path, args.format or "auto", args.strict, columns) as reader:
            if num_proxies is None:
                requests = reader if limit is None else itertools.islice(reader, limit)
            else:
                try:
                    requests = assigned_requests(reader, args.assign or "hash-client", num_proxies, seed=seed,
                                                 limit=limit)
                except ValueError as exc:
                    message = str(exc).replace("bloomwise simulate --assign", "--assign")
                    raise CommandError(message, EXIT_USAGE) from None
            for request in requests:
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
        "file": reader.path, "format": reader.format, "has_clients": reader.has_clients, "lines": reader.lines,
        "requests": reader.requests,
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
