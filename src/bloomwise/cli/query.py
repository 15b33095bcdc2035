"""`bloomwise query FILTER [KEYS]`: answer for each key whether it might be in the filter."""
from __future__ import annotations

import argparse
import sys

from bloomwise.cli import EXIT_OK
from bloomwise.cli._io import iter_key_chunks, load_filter, release

ANSWERS = {True: b"maybe", False: b"no"}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "query", help="ask a filter about keys (one per line)",
        description='For each key of KEYS (one per line; `-` or nothing reads standard input) print the key, a '
                    'tab and the answer: "no" (certainly absent) or "maybe" (present, or a false positive).')
    parser.add_argument("filter", metavar="FILTER", help="a filter saved by `bloomwise build` or save() (any structure)")
    parser.add_argument("keys", metavar="KEYS", nargs="?", default="-", help="file of keys, or - for stdin")
    parser.add_argument("--count", action="store_true", help="print only the totals")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    bloom = load_filter(args.filter)
    total = maybe = 0
    out = sys.stdout.buffer
    try:
        for chunk in iter_key_chunks(args.keys):
            answers = bloom.contains_many(chunk)
            total += len(chunk)
            maybe += int(answers.sum())
            if not args.count:
                out.writelines(key + b"\t" + ANSWERS[bool(hit)] + b"\n" for key, hit in zip(chunk, answers))
    finally:
        release(bloom)
    if args.count:
        print(f"{total} keys: {maybe} maybe present, {total - maybe} absent")
    out.flush()
    return EXIT_OK
