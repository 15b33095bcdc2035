"""``bloomwise simulate``: replay a trace over cooperating proxy caches, once per routing policy, and compare.

Examples::

    bloomwise simulate --synthetic 200000 --proxies 8 --policy none,icp,summary,paradox,carp
    bloomwise simulate --trace access.log --format squid --proxies 4 --cache-size 256MiB --json results.json
    bloomwise simulate --synthetic 100000 --sweep bits-per-entry=2,4,8,16,32 --plot figures/
    bloomwise simulate --synthetic 100000 --sweep update-threshold=1%,2%,5%,10%
    bloomwise simulate --synthetic 100000 --sweep proxies=2,4,8,16 --workers 4

Exit codes: 0 done, 1 a trace that cannot be read or is not a trace (or a figure that cannot be drawn), 2 a usage
error naming the option, 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, NamedTuple, Optional, TextIO

from bloomwise.cli import CommandError
from bloomwise.cli._parse import (parse_count, parse_fraction, parse_positive_int, parse_positive_size_bytes,
                                  parse_real, parse_tolerance)
from bloomwise.cli.trace import resolve_trace

if TYPE_CHECKING:
    from bloomwise.cache.experiment import ExperimentOutcome, Sweep

# The cache system (numpy, the compiled engine) is imported on use, in the functions that run it (bloomwise.cli).

__all__ = ["register", "run", "format_table", "SWEEPS"]

_DESCRIPTION = """\
Replay a trace (Squid access.log, plain "timestamp client url size" lines, libCacheSim csv or oracleGeneral, or a
real trace fetched by `bloomwise trace fetch NAME`, given by its name) or a synthetic one over
P cooperating proxy caches, once per routing policy over identical empty caches, and print per policy: requests,
local / remote / total hit ratio and byte hit ratio, false hits, false misses, inter-proxy queries per request, the
false-positive rate of summary checks of peers that lacked the key, summary positions per cached document,
inter-proxy messages (a query and its reply per peer asked, one per summary update sent), wire bytes (queries and
summaries), the bytes of peer summaries a proxy holds, total cost (queries x tau + origin fetches x omega), mean
latency per request (waiting: parallel queries cost their largest tau, sequential ones the sum, + omega from the
origin), wall time and the engine that ran the replay (compiled or python).

policies:  none (no cooperation), icp (ask every peer), summary (ask the peers whose summary says "maybe":
           Summary Cache), paradox (the Bloom-paradox paper's optimal order by posterior / cost), carp (ask the
           URL's home proxy, highest random weight as in CARP; the home fetches from the origin and keeps it)
sizes:     64MiB, 512KB, 1e9 (bytes);  fractions: 1%, 0.01
sweeps:    --sweep PARAM=V1,V2,... with PARAM one of bits-per-entry, update-threshold, proxies, cache-size;
           --workers N runs the points in parallel on a local Dask cluster (N processes), --scheduler ADDRESS on an
           existing one (its workers must read the --trace file at the same path); the results equal the serial
           run's but for the seconds column (needs bloomwise[dask])
"""

#: sweep parameter -> (SimulationConfig field, parser)
SWEEPS = {
    "bits-per-entry": ("bits_per_entry", lambda text: parse_positive_int(text, "--sweep bits-per-entry value")),
    "update-threshold": ("update_threshold", lambda text: parse_fraction(text, "--sweep update-threshold value")),
    "proxies": ("num_proxies", lambda text: parse_positive_int(text, "--sweep proxies value")),
    "cache-size": ("cache_size", lambda text: parse_positive_size_bytes(text, "--sweep cache-size value")),
}
_POLICIES = ("none", "icp", "summary", "paradox", "carp")


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "simulate", help="replay a trace over cooperating caches (Summary Cache, ICP, the Bloom paradox)",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", metavar="FILE", help="a trace file (.gz/.bz2/.xz/.zst read as such; - for stdin) "
                                                        "or the name of a fetched real trace (bloomwise trace fetch)")
    source.add_argument("--synthetic", metavar="N", help="generate N requests (Zipf-like, seeded)")
    parser.add_argument("--format", default="auto", choices=("auto", "squid", "plain", "csv", "oracle-general"),
                        help="trace format (auto: libCacheSim's files by name, else Squid or plain by content)")
    parser.add_argument("--csv-columns", metavar="SPEC", help="csv columns, e.g. time=1,object=2,size=3 (1-based; "
                                                              "default: the header's names)")
    parser.add_argument("--limit", metavar="N", help="replay only the first N requests of the trace")
    parser.add_argument("--assign", choices=("hash-client", "random", "round-robin"), default=None,
                        help="requests to proxies: by a hash of the client (default), or per request at random "
                             "(seeded by --seed) or in turn; traces without clients need random or round-robin")
    parser.add_argument("--strict", action="store_true", help="stop at the first malformed trace line")
    parser.add_argument("--proxies", default="4", metavar="P", help="number of proxies (default 4)")
    parser.add_argument("--policy", default=",".join(_POLICIES), metavar="LIST",
                        help="comma-separated policies (default: all five)")
    parser.add_argument("--cache-size", default="64MiB", metavar="SIZE", help="bytes per proxy (default 64MiB)")
    parser.add_argument("--bits-per-entry", default="8", metavar="B",
                        help="summary bits (counters) per document cached (default 8)")
    parser.add_argument("--resize-tolerance", default="10%", metavar="D",
                        help="re-size a summary to B positions per document cached when the count drifted more "
                             "than this fraction from the count it was sized for (default 10%%, Squid's; off: "
                             "never, the summaries keep the size --mean-document-size gives)")
    parser.add_argument("--update-threshold", default="1%", metavar="T",
                        help="publish a summary when new documents reach this fraction of the documents cached "
                             "(default 1%%)")
    parser.add_argument("--seed", default="0", metavar="S", help="seed of the synthetic trace and the filters")
    parser.add_argument("--summary-kind", default="auto", choices=("auto", "bits", "counters"),
                        help="auto: bits for summary, counters for paradox")
    parser.add_argument("--eviction", default="lru", choices=("lru", "fifo"))
    parser.add_argument("--peer-cost", default="1", metavar="TAU", help="cost of asking a peer (default 1)")
    parser.add_argument("--origin-cost", default="10", metavar="OMEGA", help="cost of the origin (default 10)")
    parser.add_argument("--prior", default="mixture", choices=("mixture", "outcomes"),
                        help="how the paradox policy estimates each peer's prior (default mixture)")
    parser.add_argument("--mean-document-size", default="auto", metavar="SIZE",
                        help="the summaries' starting size: cache size / this = expected documents (auto: the "
                             "trace's mean)")
    parser.add_argument("--documents", default="100000", metavar="N", help="synthetic: distinct documents")
    parser.add_argument("--zipf", "--zipf-alpha", dest="zipf_alpha", default="0.8", metavar="ALPHA",
                        help="synthetic: Zipf exponent (default 0.8)")
    parser.add_argument("--one-timers", default="25%", metavar="F", help="synthetic: one-timer fraction")
    parser.add_argument("--shared", "--shared-fraction", dest="shared_fraction", default="50%", metavar="F",
                        help="synthetic: fraction of requests to documents all proxies share")
    parser.add_argument("--sweep", metavar="PARAM=V1,V2,...",
                        help="run once per value: bits-per-entry, update-threshold, proxies or cache-size")
    parallel = parser.add_mutually_exclusive_group()
    parallel.add_argument("--workers", metavar="N",
                          help="run the --sweep points as tasks on a local Dask cluster of N worker processes "
                               "(1 thread each, on 127.0.0.1, no dashboard; needs bloomwise[dask])")
    parallel.add_argument("--scheduler", metavar="ADDRESS",
                          help="run the --sweep points as tasks on the Dask scheduler at ADDRESS "
                               "(e.g. tcp://127.0.0.1:8786); its workers must see the --trace file at the same path")
    parser.add_argument("--engine", default="auto", choices=("auto", "compiled", "python"),
                        help="the replay loop: compiled (every policy), python (the reference), or auto "
                             "(default: compiled where it runs, python elsewhere); the table's engine column says "
                             "which ran")
    parser.add_argument("--json", metavar="OUT", nargs="?", const="-",
                        help="write the results as JSON to OUT (no OUT or -: to stdout, instead of the table)")
    parser.add_argument("--plot", metavar="DIR", help="draw the results (PNG) into DIR (needs bloomwise[plot])")
    parser.set_defaults(func=run)
    return parser


class _Usage(ValueError):
    pass


def _config(args) -> dict:
    """The SimulationConfig fields from the options; ValueError naming the option."""
    proxies = parse_positive_int(args.proxies, "--proxies")
    seed = parse_count(args.seed, "--seed")
    return dict(
        num_proxies=proxies,
        cache_size=parse_positive_size_bytes(args.cache_size, "--cache-size"),
        bits_per_entry=parse_positive_int(args.bits_per_entry, "--bits-per-entry"),
        update_threshold=parse_fraction(args.update_threshold, "--update-threshold"),
        seed=seed,
        summary_kind=args.summary_kind,
        eviction=args.eviction,
        peer_cost=parse_real(args.peer_cost, "--peer-cost"),
        origin_cost=parse_real(args.origin_cost, "--origin-cost"),
        prior_estimator=args.prior,
        resize_tolerance=parse_tolerance(args.resize_tolerance, "--resize-tolerance"),
    )


def _policies(text: str) -> list:
    names = [name.strip() for name in str(text).split(",") if name.strip()]
    if not names:
        raise ValueError("--policy needs at least one of " + ", ".join(_POLICIES))
    for name in names:
        if name not in _POLICIES:
            raise ValueError(f"--policy {name!r} is not one of {', '.join(_POLICIES)}")
    return names


def _sweep(text: Optional[str]):
    if text is None:
        return None
    param, sep, values = str(text).partition("=")
    param = param.strip()
    if not sep or param not in SWEEPS:
        raise ValueError(f"--sweep {text!r}: expected PARAM=V1,V2,... with PARAM one of {', '.join(SWEEPS)}")
    field, parse = SWEEPS[param]
    parsed = [parse(v.strip()) for v in values.split(",") if v.strip()]
    if not parsed:
        raise ValueError(f"--sweep {text!r}: give at least one value")
    from bloomwise.cache.experiment import Sweep  # on use: the simulator

    return Sweep(param, field, tuple(parsed))


def format_table(results, column: Optional[str] = None, values=None) -> str:
    """The results as an aligned text table (one row per policy; with ``column``, one per value and policy).

    Columns: hit ratios (local, remote, total), byte hit ratios (local, remote, total), false hits and misses,
    queries per request, the false-positive rate of summary checks of peers that lacked the key (``check fpr``),
    summary positions per cached document (``bits/doc``), inter-proxy messages, summary bytes, wire bytes (queries +
    summaries), the bytes of peer summaries one proxy holds (``memory/proxy``), total cost, mean latency per request,
    wall time and the engine that ran (JSON: the same measures, keys ``JSON_KEYS``)."""
    header = ["policy", "requests", "local hit", "remote hit", "hit ratio", "local byte", "remote byte", "byte hit",
              "false hits",
              "false misses", "queries/req", "check fpr", "bits/doc", "messages", "summary bytes", "wire bytes",
              "memory/proxy", "cost", "latency/req", "seconds", "engine"]
    if column is not None:
        header.insert(0, column)
    rows = []
    for i, r in enumerate(results):
        fpr = "-" if r.peer_check_fpr is None else f"{r.peer_check_fpr:.4f}"
        bits = "-" if r.bits_per_cached_document is None else f"{r.bits_per_cached_document:.2f}"
        row = [r.policy, f"{r.requests:,}", f"{r.local_hit_ratio:.4f}", f"{r.remote_hit_ratio:.4f}",
               f"{r.hit_ratio:.4f}", f"{r.local_byte_hit_ratio:.4f}", f"{r.remote_byte_hit_ratio:.4f}",
               f"{r.byte_hit_ratio:.4f}", f"{r.false_hits:,}", f"{r.false_misses:,}",
               f"{r.queries_per_request:.4f}", fpr, bits, f"{r.messages:,}", f"{r.summary_bytes:,}",
               f"{r.wire_bytes:,}", f"{r.receiver_memory_bytes:,.0f}", f"{r.cost:,.0f}", f"{r.mean_latency:.4f}",
               f"{r.seconds:.2f}", r.engine]
        if column is not None:
            row.insert(0, _show(values[i]))
        rows.append(row)
    widths = [max(len(h), *(len(row[j]) for row in rows)) if rows else len(h) for j, h in enumerate(header)]
    left = {0} if column is None else {0, 1}
    lines = []
    for row in [header] + rows:
        lines.append("  ".join(cell.ljust(w) if j in left else cell.rjust(w)
                               for j, (cell, w) in enumerate(zip(row, widths))).rstrip())
    return "\n".join(lines)


def _show(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _fail(message: str, stderr: TextIO, code: int = 2) -> int:
    print(f"bloomwise simulate: {message}", file=stderr)
    return code


def run(args: argparse.Namespace, stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    """Run ``bloomwise simulate`` with parsed arguments; return the exit code."""
    from bloomwise.cache.experiment import DaskUnavailable, run_experiment  # on use: the simulator
    from bloomwise.cache.traces import TraceError  # on use: the simulator

    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    try:
        options = _options(args)
    except ValueError as error:
        return _fail(str(error), stderr)
    try:  # the checks of files, before a long replay
        trace = _trace(args, options)
        _check_json_target(args.json)
    except CommandError as error:
        return _fail(str(error), stderr, code=error.code)
    if args.trace == "-" and (options.sweep is not None or len(options.policies) > 1):
        return _fail("--trace - (standard input) can be replayed only once: give one policy and no --sweep", stderr)
    try:
        outcome = run_experiment(trace, options.fields, options.policies, sweep=options.sweep, engine=args.engine,
                                 workers=options.workers, scheduler=args.scheduler)
    except DaskUnavailable as error:
        flag = f"--workers {options.workers}" if options.workers is not None else f"--scheduler {args.scheduler!r}"
        return _fail(f"{flag}: {error}", stderr, code=1)
    except TraceError as error:
        return _fail(str(error), stderr, code=1)
    except OSError as error:
        return _fail(f"--trace {args.trace!r}: cannot read it ({error.strerror or error})", stderr, code=1)
    except ImportError as error:  # a .zst trace without the zstandard package
        return _fail(str(error), stderr, code=1)
    except ValueError as error:
        return _fail(str(error), stderr)
    try:
        _report(args, outcome, options.sweep, stdout, stderr)
    except CommandError as error:
        return _fail(str(error), stderr, code=error.code)
    return 0


class _Options(NamedTuple):
    """What the options say of the experiment, checked."""

    fields: dict                  # the SimulationConfig fields (of every point but the swept field)
    policies: list
    sweep: Optional[Sweep]
    workers: Optional[int]        # --workers
    synthetic: Optional[dict]     # the synthetic trace's parameters (but num_proxies), or None for --trace
    mean_size: Optional[int]      # --mean-document-size, None for auto
    limit: Optional[int]
    columns: Optional[dict]       # --csv-columns


def _options(args) -> _Options:
    """The experiment the options describe; ValueError naming the option."""
    from bloomwise.cache.fast_replay import choose_engine  # on use: the simulator
    from bloomwise.cache.simulation import SimulationConfig  # on use: the simulator

    fields = _config(args)
    policies = _policies(args.policy)
    sweep = _sweep(args.sweep)
    workers = _parallel(args, sweep)
    synthetic = None
    if args.synthetic is not None:
        synthetic = dict(
            num_requests=parse_positive_int(args.synthetic, "--synthetic"),
            num_documents=parse_positive_int(args.documents, "--documents"),
            zipf_alpha=parse_real(args.zipf_alpha, "--zipf", allow_zero=True),
            one_timer_fraction=parse_fraction(args.one_timers, "--one-timers", allow_zero=True),
            shared_fraction=parse_fraction(args.shared_fraction, "--shared", allow_zero=True),
            seed=fields["seed"])
    mean_size = None if args.mean_document_size == "auto" else \
        parse_positive_size_bytes(args.mean_document_size, "--mean-document-size")
    SimulationConfig(**fields)  # the remaining checks, named
    for name in policies:
        try:
            choose_engine(args.engine, name, num_proxies=fields["num_proxies"], cache_size=fields["cache_size"],
                          eviction=fields["eviction"])
        except ValueError as error:
            raise ValueError(f"--engine {args.engine}: {error}") from None
    limit = None if args.limit is None else parse_positive_int(args.limit, "--limit")
    columns = None if args.csv_columns is None else _csv_columns(args.csv_columns, args.format)
    if args.synthetic is not None:
        for flag, value in (("--limit", args.limit), ("--assign", args.assign), ("--csv-columns", args.csv_columns)):
            if value is not None:
                raise ValueError(f"{flag} is for --trace (a synthetic trace has its clients and its length)")
    return _Options(fields, policies, sweep, workers, synthetic, mean_size, limit, columns)


def _trace(args, options: _Options):
    """The trace to replay: a synthetic one, standard input, or a file (a path, or the name of a fetched real
    trace); CommandError (exit 1) for a file that does not exist."""
    from bloomwise.cache.experiment import StreamTrace  # on use: the simulator
    from bloomwise.cache.sweeps import SweepTrace  # on use: the simulator

    if options.synthetic is not None:
        return SweepTrace(synthetic=dict(options.synthetic), mean_document_size=options.mean_size)
    reading = dict(format=args.format, strict=args.strict, csv_columns=options.columns,
                   assign=args.assign or "hash-client",  # how the requests of --trace go to proxies
                   seed=options.fields["seed"], limit=options.limit, mean_document_size=options.mean_size)
    path = args.trace
    if path != "-" and not os.path.isfile(path):
        path = resolve_trace(args.trace)  # the name of a fetched real trace
        if path == args.trace:
            what = "is a directory, not a trace file" if os.path.isdir(args.trace) else "does not exist"
            raise CommandError(f"--trace {args.trace!r} {what}")
    if path != "-":
        return SweepTrace(path=os.path.abspath(path), **reading)
    return StreamTrace(path="-", **reading)


def _check_json_target(path: Optional[str]) -> None:
    """CommandError (exit 1) when --json names a file that cannot be written (checked before a long replay)."""
    if path in (None, "-"):
        return
    folder = os.path.dirname(os.path.abspath(path))
    problem = "it is a directory" if os.path.isdir(path) else None if os.path.isdir(folder) else \
        f"no directory {folder}"
    if problem:
        raise CommandError(f"--json {path!r}: cannot write it ({problem})")


def _report(args, outcome: ExperimentOutcome, sweep: Optional[Sweep], stdout: TextIO, stderr: TextIO) -> None:
    """The malformed records' warning, the table, the JSON and the figures; CommandError (exit 1) when nothing
    was read or a file cannot be written."""
    if outcome.read_nothing:  # an empty log: no table of zeros
        skipped = f" ({outcome.malformed:,} malformed line(s) skipped)" if outcome.malformed else ""
        raise CommandError(f"--trace {args.trace!r}: no request was read{skipped}; nothing to replay")
    if outcome.malformed:
        shown = "; ".join(f"line {n}: {reason}" for n, reason in outcome.malformed_lines)
        print(f"bloomwise simulate: {args.trace}: {outcome.malformed:,} malformed line(s) skipped ({shown})",
              file=stderr)
    if args.json == "-":
        pass  # stdout carries the JSON alone (as `trace --json` and `info --json`): no table before it
    elif sweep is None:
        print(format_table(outcome.results), file=stdout)
    else:
        print(format_table(outcome.results, sweep.label, outcome.labels), file=stdout)
    if args.json:
        text = json.dumps(outcome.to_json(sweep), indent=2)
        if args.json == "-":
            print(text, file=stdout)
        else:
            try:
                with open(args.json, "w", encoding="utf-8") as out:
                    out.write(text + "\n")
            except OSError as error:
                raise CommandError(f"--json {args.json!r}: cannot write it ({error.strerror or error})") from None
    if args.plot:
        print(f"figure written to {_plot(args.plot, outcome, sweep)}", file=stdout)


def _plot(folder: str, outcome: ExperimentOutcome, sweep: Optional[Sweep]) -> str:
    """The figure of the results in ``folder`` (needs bloomwise[plot]); its path."""
    from bloomwise.cache.plots import plot_policies, plot_sweep  # on use: the simulator

    try:
        os.makedirs(folder, exist_ok=True)
        if sweep is None:
            return plot_policies(os.path.join(folder, "policies.png"), outcome.results)
        return plot_sweep(os.path.join(folder, f"sweep-{sweep.label}.png"), sweep.label, outcome.labels,
                          outcome.results)
    except ImportError as error:
        raise CommandError(str(error)) from None
    except OSError as error:
        raise CommandError(f"--plot {folder!r}: cannot write there ({error.strerror or error})") from None


def _parallel(args, sweep) -> Optional[int]:
    """The --workers count (None without it) after the checks of --workers and --scheduler; ValueError naming
    the option."""
    if args.workers is None and args.scheduler is None:
        return None
    flag = "--workers" if args.workers is not None else "--scheduler"
    workers = None if args.workers is None else parse_positive_int(args.workers, "--workers")
    if args.scheduler is not None and not str(args.scheduler).strip():
        raise ValueError("--scheduler needs an address such as tcp://127.0.0.1:8786")
    if sweep is None:
        raise ValueError(f"{flag} runs the points of a --sweep in parallel: give --sweep PARAM=V1,V2,...")
    try:
        import distributed  # noqa: F401  (the optional extra, checked before any replay)
    except ImportError:
        raise ValueError(f"{flag} needs Dask: pip install 'bloomwise[dask]'") from None
    return workers


def _csv_columns(text: str, format: str) -> dict:
    from bloomwise.cache.traces import parse_csv_columns  # on use: the simulator

    if format not in ("auto", "csv"):
        raise ValueError(f"--csv-columns goes with --format csv, not {format}")
    try:
        return parse_csv_columns(text)
    except ValueError as error:
        raise ValueError(str(error).replace("csv columns", "--csv-columns", 1)) from None
