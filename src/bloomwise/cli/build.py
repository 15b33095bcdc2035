"""`bloomwise build KEYS -o FILTER`: build a filter from one key per line and save it."""
from __future__ import annotations

import argparse
import os
from contextlib import ExitStack

from bloomwise import theory
from bloomwise.cli import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CommandError
from bloomwise.cli import _parse
from bloomwise.cli._io import count_lines, is_bloomwise_file, iter_key_chunks, progress, spool_stdin
from bloomwise.units import format_bytes


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "build", help="build a filter from keys (one per line) and save it",
        description="Build a filter from KEYS (one key per line; `-` reads standard input) and save it to "
                    "FILTER. Each line without its newline is one key (its bytes; text is UTF-8).")
    parser.add_argument("keys", metavar="KEYS", help="file of keys, one per line, or - for stdin")
    parser.add_argument("-o", "--output", metavar="FILTER", required=True,
                        help="where to save the filter (never the key file; an existing file is replaced only if it "
                             "is a bloomwise file, or with --force)")
    parser.add_argument("--force", action="store_true",
                        help="replace FILTER even if it exists and is not a bloomwise file")
    parser.add_argument("--capacity", metavar="N", type=_parse.option_type(_parse.parse_count, "--capacity"),
                        help="keys the filter is sized for (default: the number of lines, counted in a first pass "
                             "over KEYS; standard input is first copied to a temporary file to count it, so memory "
                             "stays bounded either way)")
    parser.add_argument("--fpr", metavar="P", type=_parse.option_type(_parse.parse_probability, "--fpr"), default=0.01,
                        help='target false-positive rate at capacity: 0.01, 1%%, "1 in 100" (default 1%%)')
    parser.add_argument("--layout", choices=("blocked", "classic", "partitioned"), default="blocked",
                        help="bit layout (default blocked: the fastest)")
    parser.add_argument("--seed", type=int, default=0, help="hash seed (default 0)")
    parser.add_argument("--hash-scheme", choices=("xxh3", "xxh64"), default="xxh3",
                        help="key hash (default xxh3; xxh64 combines with filters of bloomwise 0.1)")
    parser.set_defaults(func=run)


def check_output(keys: str, output: str, force: bool) -> None:
    """Refuse (usage error) an output that is the key file itself, or an existing file that is not a bloomwise file
    unless ``force``: a typo in ``-o`` must not replace someone's data with a filter."""
    if not os.path.lexists(output):
        return
    if os.path.isdir(output):
        raise CommandError(f"cannot write {output}: it is a directory; give a file name for -o", EXIT_USAGE)
    if keys != "-" and os.path.exists(keys) and os.path.exists(output) and os.path.samefile(keys, output):
        raise CommandError(f"-o {output} is the key file itself: the filter would replace the keys; "
                           f"choose another output file", EXIT_USAGE)
    if force:
        return
    try:
        ours = is_bloomwise_file(output)
    except OSError as exc:
        raise CommandError(f"cannot read {output} to check what it is: {exc.strerror or exc}") from None
    if not ours:
        raise CommandError(f"-o {output} exists and is not a bloomwise file: not replacing it "
                           f"(give --force to replace it)", EXIT_USAGE)


def run(args: argparse.Namespace) -> int:
    directory = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(directory):
        raise CommandError(f"cannot write {args.output}: no such directory {directory}")
    check_output(args.keys, args.output, args.force)
    with ExitStack() as cleanup:
        keys_path = args.keys
        if args.capacity is None:
            if keys_path == "-":  # one pass only: spool to disk to count the lines, then stream the copy
                keys_path = cleanup.enter_context(spool_stdin())
            capacity = max(count_lines(keys_path), 1)
        else:
            capacity = args.capacity
        return _build(args, keys_path, capacity)


def _build(args: argparse.Namespace, keys_path: str, capacity: int) -> int:
    from bloomwise.bloom import BloomFilter  # on use: the compiled core

    chunks = iter_key_chunks(keys_path)
    try:
        bloom = BloomFilter(capacity, args.fpr, layout=args.layout, seed=args.seed, hash_scheme=args.hash_scheme)
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    except MemoryError:
        num_bits, _ = theory.optimal_size(capacity, args.fpr, layout=args.layout)
        num_bytes = -(-num_bits // 8)
        raise CommandError(f"not enough memory: a filter for {capacity:,} keys at a rate of {args.fpr:g} needs "
                           f"{num_bytes:,} bytes ({format_bytes(num_bytes)}) of memory; lower --capacity, "
                           f"raise --fpr, or run where more memory is available", EXIT_FAILURE) from None
    bar = progress(capacity, "building")
    added = 0
    try:
        for chunk in chunks:
            bloom.update(chunk)
            added += len(chunk)
            bar.update(len(chunk))
    finally:
        bar.close()
    try:
        bloom.save(args.output)
    except OSError as exc:
        raise CommandError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"{args.output}: {added:,} keys, {bloom.num_cells:,} bits ({bloom.nbytes:,} bytes), "
          f"k={bloom.num_hashes}, {bloom.layout}, estimated FPR {bloom.estimated_fpr():.3g}")
    return EXIT_OK
