"""Write golden files: real filters saved by this version of bloomwise, for tests/test_golden.py.

    python tests/data/make_golden.py

For each recipe below it saves ``golden-<version>-<name>.bloom`` next to this script and records, in
``golden.json``, the recipe, the keys added, a fixed list of keys never added and, for each of those, whether the
filter answers (falsely) that it might contain it.
Existing entries are never rewritten (the compatibility promise of docs/format.md: files written by a released
bloomwise keep loading with the same answers); run it once per release whose format or hashing could matter.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "golden.json")

# name -> how the filter is built; "capacity" recipes go through BloomFilter(...), the others through from_size.
RECIPES = {
    "classic": {"capacity": 250, "fpr": 0.05, "layout": "classic", "seed": 0},
    "partitioned": {"capacity": 250, "fpr": 0.05, "layout": "partitioned", "seed": 12345},
    "blocked": {"capacity": 250, "fpr": 0.05, "layout": "blocked", "seed": 2**64 - 1},
    "classic-odd-size": {"num_bits": 1001, "num_hashes": 5, "layout": "classic", "seed": 7},
    "blocked-by-size": {"num_bits": 2048, "num_hashes": 12, "layout": "blocked", "seed": 1},
}


def encode_key(key) -> str:
    """A key as a string that keeps its type ("s:text", "i:123", "b:00ff"): str, int and bytes are different keys."""
    if isinstance(key, str):
        return "s:" + key
    if isinstance(key, int):
        return f"i:{key}"
    return "b:" + bytes(key).hex()


def decode_key(text: str):
    kind, value = text[:2], text[2:]
    return {"s:": str, "i:": int, "b:": bytes.fromhex}[kind](value)


def inserted_keys() -> list:
    """Every key type and the edges of the integer encoding (docs/architecture.md)."""
    return ([f"user-{i}" for i in range(120)] + ["", "h\u00e9llo", "\U0001f338"]
            + [i * 7919 for i in range(-20, 30)] + [2**63 - 1, 2**63, 2**64 - 1, 2**64, -2**63, -2**63 - 1, 10**30]
            + [bytes([i]) * (i % 9 + 1) for i in range(30)] + [b"", b"\x00" * 8])


def absent_keys() -> list:
    return ([f"other-{i}" for i in range(300)] + list(range(10**6, 10**6 + 150))
            + [i.to_bytes(4, "little") for i in range(150)] + ["user-1".encode()[:-1], "user-1000", -1, 2**65])


def build(recipe: dict, keys: list):
    from bloomwise import BloomFilter

    if "capacity" in recipe:
        f = BloomFilter(recipe["capacity"], recipe["fpr"], layout=recipe["layout"], seed=recipe["seed"])
    else:
        f = BloomFilter.from_size(recipe["num_bits"], recipe["num_hashes"], layout=recipe["layout"],
                                  seed=recipe["seed"])
    f.update(keys)
    return f


def write_golden(manifest_path: str, recipes: dict, build, filename, describe) -> int:
    """Save one golden file a recipe (``filename(version, name)``; ``build(recipe, keys)`` makes the filter) and add
    its manifest entry: the recipe, ``describe(filter)``'s fields, the keys, the absent keys and the filter's
    (false) answers for them. Files and entries that exist are left as they are."""
    import bloomwise

    manifest = {"entries": []}
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as file:
            manifest = json.load(file)
    known = {entry["file"] for entry in manifest["entries"]}
    keys, probes = inserted_keys(), absent_keys()
    for name, recipe in recipes.items():
        name_on_disk = filename(bloomwise.__version__, name)
        if name_on_disk in known or os.path.exists(os.path.join(HERE, name_on_disk)):
            print(f"{name_on_disk}: exists, left as it is")
            continue
        f = build(recipe, keys)
        f.save(os.path.join(HERE, name_on_disk))
        with open(os.path.join(HERE, name_on_disk), "rb") as file:
            digest = hashlib.sha256(file.read()).hexdigest()
        manifest["entries"].append({
            "file": name_on_disk,
            "sha256": digest,
            "written_by": bloomwise.__version__,
            "recipe": recipe,
            **describe(f),
            "keys": [encode_key(k) for k in keys],
            "absent": [encode_key(k) for k in probes],
            "false_positives": "".join("1" if k in f else "0" for k in probes),
        })
        print(f"{name_on_disk}: {f!r}")
    with open(manifest_path, "w", encoding="utf-8") as file:  # one entry per line: diffs show what was added
        file.write('{"entries": [\n')
        file.write(",\n".join(json.dumps(entry, ensure_ascii=False) for entry in manifest["entries"]))
        file.write("\n]}\n")
    return 0


def main() -> int:
    return write_golden(MANIFEST, RECIPES, build, lambda version, name: f"golden-{version}-{name}.bloom",
                        lambda f: {"num_bits": f.num_cells, "num_hashes": f.num_hashes, "hash_scheme": f.hash_scheme})


if __name__ == "__main__":
    sys.exit(main())
