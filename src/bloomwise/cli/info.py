"""`bloomwise info FILTER`: parameters, fill, estimated keys and estimated false-positive rate."""
from __future__ import annotations

import argparse
import json

from bloomwise import theory
from bloomwise._format import Structure
from bloomwise._loading import filter_class, public_class
from bloomwise.cli import EXIT_OK
from bloomwise.cli._io import load_filter, release


def register(subparsers) -> None:
    parser = subparsers.add_parser("info", help="describe a saved filter",
                                   description="Print a saved filter's parameters and statistics (any structure: the file says which).")
    parser.add_argument("filter", metavar="FILTER", help="a filter saved by `bloomwise build` or save()")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def describe(bloom, path=None) -> dict:
    """The figures `info` prints: every structure's parameters, and for a Bloom filter its fill and estimates."""
    if public_class(bloom) is not filter_class(Structure.BLOOM):  # BloomFilter, imported on first use
        return _describe_other(bloom, path)
    set_bits = bloom.filled_cells()
    count = theory.approx_count(bloom.num_cells, bloom.num_hashes, set_bits, layout=bloom.layout)
    return {
        "file": bloom.path if path is None else path,
        "structure": _public_name(bloom),
        "layout": bloom.layout,
        "num_cells": bloom.num_cells,
        "bytes": bloom.nbytes,
        "num_hashes": bloom.num_hashes,
        "seed": bloom.seed,
        "hash_scheme": bloom.hash_scheme,
        "capacity": bloom.capacity,
        "num_keys": bloom.num_keys,
        "fill_ratio": set_bits / bloom.num_cells,
        "estimated_keys": count.estimate,
        "estimated_keys_interval": [count.low, count.high],
        "estimated_fpr": theory.fpr_from_fill(bloom.num_cells, bloom.num_hashes, set_bits, layout=bloom.layout),
    }


# (key in the output, attribute or method of the structure): what each structure has of these is shown
_OTHER_FIELDS = [
    ("layout", "layout"), ("num_cells", "num_cells"), ("bytes", "nbytes"),
    ("num_hashes", "num_hashes"), ("num_set_hashes", "num_set_hashes"), ("num_reset_hashes", "num_reset_hashes"),
    ("num_stages", "num_stages"), ("seed", "seed"), ("hash_scheme", "hash_scheme"), ("capacity", "capacity"),
    ("fpr", "fpr"), ("num_keys", "num_keys"), ("fill_ratio", "fill_ratio"), ("estimated_keys", "approx_count"),
    ("estimated_fpr", "estimated_fpr"), ("false_positive_rate", "false_positive_rate"),
    ("false_negative_rate", "false_negative_rate"),
]


def _public_name(structure) -> str:
    """The class a user knows (a memory-mapped filter is an instance of a private subclass)."""
    return public_class(structure).__name__


def _describe_other(structure, path) -> dict:
    info = {"file": path, "structure": _public_name(structure)}
    for name, attribute in _OTHER_FIELDS:
        value = getattr(structure, attribute, None)
        if callable(value):
            value = value()
        if value is not None:
            info[name] = value
    return info


_LABELS = {"num_set_hashes": "set hashes", "num_reset_hashes": "reset hashes", "num_stages": "stages",
           "num_cells": "cells", "num_hashes": "hash functions", "hash_scheme": "hash scheme",
           "fpr": "target FPR", "num_keys": "keys added", "fill_ratio": "fill", "estimated_keys": "estimated keys",
           "estimated_fpr": "estimated FPR", "false_positive_rate": "FPR", "false_negative_rate": "FNR"}


def _format_value(name: str, value) -> str:
    if name == "fill_ratio":
        return f"{value:.2%}"
    if isinstance(value, float):
        return f"{value:.4g}" if name not in ("estimated_keys",) else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool) and name != "seed":
        return f"{value:,}"
    return str(value)


def run(args: argparse.Namespace) -> int:
    structure = load_filter(args.filter)
    try:
        info = describe(structure, args.filter)
    finally:
        release(structure)
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    if "estimated_keys_interval" not in info:  # a structure other than a Bloom filter
        print("\n".join(f"{_LABELS.get(name, name.replace('_', ' ')):<15} {_format_value(name, value)}"
                        for name, value in info.items()))
        return EXIT_OK
    low, high = info["estimated_keys_interval"]
    capacity = "-" if info["capacity"] is None else f"{info['capacity']:,}"
    print(f"file            {info['file']}\n"
          f"structure       {info['structure']}\n"
          f"layout          {info['layout']}\n"
          f"bits            {info['num_cells']:,} ({info['bytes']:,} bytes)\n"
          f"hash functions  {info['num_hashes']}\n"
          f"seed            {info['seed']}\n"
          f"hash scheme     {info['hash_scheme']}\n"
          f"capacity        {capacity}\n"
          f"keys added      {info['num_keys']:,} (every key added, repeats included)\n"
          f"fill            {info['fill_ratio']:.2%}\n"
          f"estimated keys  {info['estimated_keys']:,.0f} (95% interval {low:,.0f} to {high:,.0f})\n"
          f"estimated FPR   {info['estimated_fpr']:.4g}")
    return EXIT_OK
