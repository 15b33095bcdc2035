"""Write golden files of ScalableBloomFilter: real filters saved by this version of bloomwise, for
tests/test_scalable.py (``test_golden_scalable_files_answer_as_recorded``).

    python tests/data/make_golden_scalable.py

For each recipe below it saves ``golden-<version>-scalable-<name>.sbf`` next to this script and records, in
``golden-scalable.json``, the recipe, the keys added, the stages' key counts, a fixed list of keys never added and,
for each of those, whether the filter answers (falsely) that it might contain it. Existing entries are never
rewritten (docs/format.md, "Compatibility promise"). The keys are those of make_golden.py.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "golden-scalable.json")
sys.path.insert(0, HERE)

from make_golden import write_golden  # noqa: E402

# name -> ScalableBloomFilter(...) keywords, and how the keys go in ("update": one batch; "add": one by one)
RECIPES = {
    "blocked-xxh3": {"capacity": 40, "fpr": 0.05, "layout": "blocked", "seed": 0, "hash_scheme": "xxh3",
                     "insert": "update"},
    "classic-xxh64": {"capacity": 30, "fpr": 0.1, "growth": 3, "ratio": 0.25, "layout": "classic",
                      "seed": 2**64 - 1, "hash_scheme": "xxh64", "insert": "add"},
    "partitioned-xxh3": {"capacity": 25, "fpr": 0.02, "growth": 1.5, "ratio": 0.6, "layout": "partitioned",
                         "seed": 12345, "hash_scheme": "xxh3", "insert": "update"},
}


def build(recipe: dict, keys: list):
    from bloomwise import ScalableBloomFilter

    options = {k: v for k, v in recipe.items() if k != "insert"}
    f = ScalableBloomFilter(**options)
    if recipe["insert"] == "add":
        for key in keys:
            f.add(key)
    else:
        f.update(keys)
    return f


def main() -> int:
    return write_golden(MANIFEST, RECIPES, build, lambda version, name: f"golden-{version}-scalable-{name}.sbf",
                        lambda f: {"num_stages": f.num_stages, "stage_keys": list(f.stage_keys),
                                   "num_keys": f.num_keys, "num_cells": f.num_cells})


if __name__ == "__main__":
    sys.exit(main())
