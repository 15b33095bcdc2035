"""`bloomwise info FILTER`: parameters, fill, estimated keys and estimated false-positive rate."""
from __future__ import annotations

import argparse
import json

from bloomwise.cli import EXIT_OK
from bloomwise.cli._io import load_filter


def register(subparsers) -> None:
    parser = subparsers.add_parser("info", help="describe a saved filter",
                                   description="Print a saved filter's parameters and statistics.")
    parser.add_argument("filter", metavar="FILTER", help="a filter saved by `bloomwise build` or save()")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def describe(bloom) -> dict:
    from bloomwise import theory

    set_bits = bloom._count_set_bits()
    count = theory.approx_count(bloom.num_cells, bloom.num_hashes, set_bits, layout=bloom.layout)
    return {
        "file": bloom.path,
        "layout": bloom.layout,
        "num_cells": bloom.num_cells,
        "num_bits": bloom.num_cells,  # the name of earlier releases
        "bytes": bloom.nbytes,
        "num_hashes": bloom.num_hashes,
        "seed": bloom.seed,
        "hash_scheme": bloom.hash_scheme,
        "capacity": bloom.capacity,
        "num_keys": bloom.num_keys,
        "keys_added": bloom.num_keys,  # the name of earlier releases, kept for scripts that read it
        "fill_ratio": set_bits / bloom.num_cells,
        "estimated_keys": count.estimate,
        "estimated_keys_interval": [count.low, count.high],
        "estimated_fpr": theory.fpr_from_fill(bloom.num_cells, bloom.num_hashes, set_bits, layout=bloom.layout),
    }


def run(args: argparse.Namespace) -> int:
    bloom = load_filter(args.filter)
    try:
        info = describe(bloom)
    finally:
        bloom.close()
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    low, high = info["estimated_keys_interval"]
    capacity = "-" if info["capacity"] is None else f"{info['capacity']:,}"
    print(f"file            {info['file']}\n"
          f"layout          {info['layout']}\n"
          f"bits            {info['num_bits']:,} ({info['bytes']:,} bytes)\n"
          f"hash functions  {info['num_hashes']}\n"
          f"seed            {info['seed']}\n"
          f"hash scheme     {info['hash_scheme']}\n"
          f"capacity        {capacity}\n"
          f"keys added      {info['num_keys']:,} (every key added, repeats included)\n"
          f"fill            {info['fill_ratio']:.2%}\n"
          f"estimated keys  {info['estimated_keys']:,.0f} (95% interval {low:,.0f} to {high:,.0f})\n"
          f"estimated FPR   {info['estimated_fpr']:.4g}")
    return EXIT_OK
