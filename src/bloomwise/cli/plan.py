"""``bloomwise plan``: size a filter from any sufficient subset of n, p, m, k; print the Summary Cache tables.

Contract with the entry point (``bloomwise.cli``): :func:`register` adds the ``plan`` parser to the
subcommands and sets ``func=run``; :func:`run` returns the exit code (0 success, 1 a missing optional
dependency, 2 bad input; messages go to stderr).

Examples::

    bloomwise plan --n 1e6 --p 1%
    bloomwise plan --m 64KiB --p "1 in 10000"
    bloomwise plan --n 40M --p 1e-6 --layout blocked --json
    bloomwise plan --table
    bloomwise plan --figure figure4.svg
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Optional, TextIO

from bloomwise import theory
from bloomwise.units import parse_count, parse_positive_int, parse_probability, parse_size_bits

__all__ = ["register", "run", "format_plan"]

_DESCRIPTION = """\
Solve for the missing ones of n (keys), p (false-positive rate), m (bits) and k (hashes) with each
layout's exact false-positive rate: n and p give exactly the filter `bloomwise build` (and BloomFilter(n, p))
makes for that capacity and rate, in the same layout (blocked unless --layout says otherwise).
Give two of n, p, m (k is optional), or n, m and k. The plan prints m, k, bytes, bits per key, the distance to the information-theoretic
limit log2(1/p), and the exact false-positive rate each layout would give.

numbers:       1000000, 1e6, 1_000_000, 40M, 2.5k
sizes (--m):   bare numbers are bits; b = bits, B = bytes; k/M/G/T = 1000^i, Ki/Mi/Gi/Ti = 1024^i
               (64KiB = 524,288 bits, 8MB = 64,000,000 bits, 1Mib = 1,048,576 bits)
rates (--p):   0.01, 1e-6, 1%, "1 in 10000", 1/10000
"""


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``plan`` subcommand to an ``argparse`` subparsers object and return its parser."""
    parser = subparsers.add_parser(
        "plan",
        help="size a filter from n, p, m, k; print the Summary Cache tables",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Values are read as text and parsed in run(), so a bad value gives one clear message and exit code 2.
    parser.add_argument("--n", "-n", metavar="KEYS", help="number of keys (e.g. 1e6, 40M)")
    parser.add_argument("--p", "-p", metavar="RATE", help='false-positive rate (e.g. 0.01, 1%%, "1 in 10000")')
    parser.add_argument("--m", "-m", metavar="SIZE", help="filter size: bits, or with a unit (64KiB, 8MB, 1Mib)")
    parser.add_argument("--k", "-k", metavar="HASHES", help="number of hash functions")
    parser.add_argument("--layout", default="blocked", metavar="LAYOUT",
                        help="blocked (the default, as for bloomwise build), classic or partitioned")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--table", action="store_true",
                        help="print Tables 3-5 of Summary Cache and where the printed ones differ")
    parser.add_argument("--figure", metavar="PATH",
                        help="draw Figure 4 of Summary Cache to PATH (.png or .svg; needs bloomwise[plot])")
    parser.set_defaults(func=run)
    return parser


def _fail(message: str, stderr: TextIO, code: int = 2) -> int:
    print(f"bloomwise plan: {message}", file=stderr)
    return code


def run(args: argparse.Namespace, stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    """Run ``bloomwise plan`` with parsed arguments; return the exit code."""
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    layout = getattr(args, "layout", "blocked")
    if layout not in theory.LAYOUTS:
        return _fail(f"--layout {layout!r} is not one of {', '.join(theory.LAYOUTS)}", stderr)
    try:
        values = {
            "n": None if args.n is None else parse_count(args.n, "--n"),
            "p": None if args.p is None else parse_probability(args.p, "--p"),
            "m": None if args.m is None else parse_size_bits(args.m, "--m"),
            "k": None if args.k is None else parse_positive_int(args.k, "--k"),
        }
    except ValueError as error:
        return _fail(str(error), stderr)
    wants_plan = any(value is not None for value in values.values())
    table, figure = getattr(args, "table", False), getattr(args, "figure", None)
    if not (wants_plan or table or figure):
        return _fail("give two of --n, --p, --m (and optionally --k), or --table, or --figure PATH; "
                     "see bloomwise plan --help", stderr)

    if wants_plan:
        if values["n"] == 0:
            return _fail("--n '0': a plan needs at least one key", stderr)
        if values["m"] == 0:
            return _fail("--m: a filter needs at least one bit", stderr)
        try:
            result = theory.plan(**values, layout=layout)
        except ValueError as error:
            return _fail(_with_flags(str(error)), stderr)
        if getattr(args, "json", False):
            print(json.dumps(result.as_dict(), indent=2), file=stdout)
        else:
            print(format_plan(result), file=stdout)

    if table:
        if wants_plan:
            print(file=stdout)
        from bloomwise.reproduce import summary_cache  # on use: the paper's tables

        print(summary_cache.format_fp_tables(), file=stdout)
        differences = summary_cache.fp_table_differences()
        print(f"\nDifferences with the printed tables (formula (1 - e^(-k m/n))^k, 3 significant digits): "
              f"{len(differences)}", file=stdout)
        for difference in differences:
            print(f"  {difference}", file=stdout)

    if figure:
        try:
            from bloomwise.plot import plot_figure4  # on use: matplotlib, the plot extra

            path = plot_figure4(figure)
        except ImportError as error:
            return _fail(str(error), stderr, code=1)
        except ValueError as error:
            return _fail(f"--figure {figure!r}: {error}", stderr)
        except OSError as error:
            return _fail(f"--figure {figure!r}: cannot write it ({error.strerror or error})", stderr)
        print(f"Figure 4 written to {path}", file=stdout)
    return 0


def _with_flags(message: str) -> str:
    """theory.plan() speaks of n, p, m, k; on the command line they are --n, --p, --m, --k."""
    for name in ("n", "p", "m", "k"):
        message = message.replace(f"{name} (", f"--{name} (")
    return message


def _one_in(rate: float) -> str:
    if rate <= 0:
        return "never"
    return f"1 in {1 / rate:,.0f}" if 1 / rate >= 10 else f"1 in {1 / rate:.3g}"


def _size(bits: int) -> str:
    num_bytes = bits / 8
    for unit, factor in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if num_bytes >= factor:
            return f"{num_bytes / factor:.2f} {unit}"
    return f"{math.ceil(num_bytes)} B"


def format_plan(result) -> str:
    """The plan as the text ``bloomwise plan`` prints."""
    solved = set(result.solved)

    def tag(name: str) -> str:
        return "(solved)" if name in solved else "(given)"

    lines = [
        f"bloomwise plan ({result.layout} layout)",
        f"  n  keys                 {result.n:,} {tag('n')}",
        f"  p  false-positive rate  {result.p:.4g} ({_one_in(result.p)}) {tag('p')}",
        f"  m  bits                 {result.m:,} = {result.num_bytes:,} bytes ({_size(result.m)}) {tag('m')}",
        f"  k  hashes               {result.k} {tag('k')}",
        f"  bits per key            {result.bits_per_key:.3f}",
        f"  information limit       log2(1/p) = {result.information_limit:.3f} bits per key; "
        f"this plan uses {result.overhead:.3f}x that",
        "  exact false-positive rate at these m, n, k:",
    ]
    rows = (("classic", result.fpr_classic, ""),
            ("partitioned", result.fpr_partitioned, "k > m" if result.fpr_partitioned is None else ""),
            ("blocked", result.fpr_blocked,
             "k > 16" if result.fpr_blocked is None else
             (f"m rounded up to {result.blocked_num_bits:,} bits" if result.blocked_num_bits != result.m else "")))
    for name, rate, note in rows:
        marker = "*" if name == result.layout else " "
        shown = "not available" if rate is None else f"{rate:.4g} ({_one_in(rate)})"
        lines.append(f"   {marker} {name:<12} {shown}{'  ' + note if note and rate is not None else ''}"
                     f"{'  (' + note + ')' if rate is None else ''}")
    return "\n".join(lines)
