"""``bloomwise reproduce``: reproduce every printed number of the Summary Cache and Bloom-paradox papers.

Examples::

    bloomwise reproduce --out repro              # the papers' sizes (minutes)
    bloomwise reproduce --quick --out /tmp/r     # the CI-sized run (seconds)
    bloomwise reproduce --seeds 4 --out repro
    bloomwise reproduce --time-quick --out docs/reproduction   # the committed run: also times --quick
    bloomwise reproduce --quick --trace-hash wang64 --out /tmp/r   # Sec. VIII.C with the paper's 64-bit mix

Writes ``OUT/report.md``, ``OUT/results.json`` (one row per printed number: source, item, printed, measured,
expected, verdict, note) and ``OUT/figures/*.png`` (needs the ``plot`` extra: matplotlib). Exit codes: 0 done,
1 a failure (the output directory cannot be written, matplotlib missing), 2 bad arguments.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap

from bloomwise.cli import EXIT_FAILURE, EXIT_OK, CommandError
from bloomwise.cli._parse import parse_positive_int

__all__ = ["register", "run"]


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "reproduce", help="reproduce the papers' tables and figures: report.md, results.json, figures/",
        description=textwrap.fill("Reproduce " + __doc__.split("\n\n")[0].split(": reproduce ", 1)[1]
                                  + " Every row says how the number was obtained and how it compares.", 100),
        epilog=__doc__.split("Examples::")[1].split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    parser.add_argument("--quick", action="store_true",
                        help="CI-sized run: 8 members per type, one seed, N = 2^16 trace queries")
    parser.add_argument("--seeds", metavar="N",
                        help="full runs per simulated cell (default 2; quick: 1); the noise comes from replicates")
    parser.add_argument("--trace-hash", choices=("xxh3", "wang64"), default="xxh3",
                        help="hash of the Sec. VIII.C stand-in trace: bloomwise's XXH3 (default) or Thomas Wang's "
                             "64-bit mix, the paper's")
    parser.add_argument("--time-quick", action="store_true",
                        help="afterwards, also time a --quick run (in a child process) for the report's header")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    from bloomwise.reproduce.engine import run as reproduce  # on use: the papers' engine (numpy, the core)

    seeds = None
    if args.seeds is not None:
        try:
            seeds = parse_positive_int(args.seeds, "--seeds")
        except ValueError as exc:
            raise CommandError(str(exc), 2) from None
    out = args.out
    if os.path.exists(out) and not os.path.isdir(out):
        raise CommandError(f"--out {out!r} exists and is not a directory", 2)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"cannot create {out!r}: {exc.strerror}", EXIT_FAILURE) from None

    def log(message):
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    try:
        rep = reproduce(out, quick=args.quick, seeds=seeds, trace_hash=args.trace_hash, log=log,
                        time_quick=args.time_quick)
    except ImportError as exc:
        raise CommandError(str(exc), EXIT_FAILURE) from None
    except OSError as exc:
        raise CommandError(f"cannot write the report: {exc}", EXIT_FAILURE) from None
    except subprocess.CalledProcessError as exc:
        raise CommandError(f"the timed --quick run failed (exit {exc.returncode})", EXIT_FAILURE) from None
    counts = {}
    for row in rep.rows:
        counts[row.verdict] = counts.get(row.verdict, 0) + 1
    print(f"{len(rep.rows)} rows ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}) in "
          f"{rep.timings['total']:.0f} s: {os.path.join(out, 'report.md')}")
    return EXIT_OK
