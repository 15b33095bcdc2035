"""Golden files: filters saved by released bloomwise versions must keep loading and answering exactly as recorded.

The files and tests/data/golden.json are written by tests/data/make_golden.py and never regenerated to make a
test pass (docs/format.md, "Compatibility promise").
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bloomwise import _format

DATA = Path(__file__).parent / "data"
MANIFEST = DATA / "golden.json"
ENTRIES = json.loads(MANIFEST.read_text(encoding="utf-8"))["entries"] if MANIFEST.exists() else []


def decode_key(text: str):
    kind, value = text[:2], text[2:]
    return {"s:": str, "i:": int, "b:": bytes.fromhex}[kind](value)


def check(f, entry: dict) -> None:
    recipe = entry["recipe"]
    assert (f.num_cells, f.num_hashes, f.layout, f.seed) == (
        entry["num_bits"], entry["num_hashes"], recipe["layout"], recipe["seed"])
    assert f.capacity == recipe.get("capacity")
    assert f.hash_scheme == entry.get("hash_scheme", "xxh64")  # 0.1.0 hashed with XXH64 and did not record it
    keys = [decode_key(k) for k in entry["keys"]]
    assert all(k in f for k in keys) and all(f.contains_many(keys))  # no false negatives, ever
    absent = [decode_key(k) for k in entry["absent"]]
    expected = [c == "1" for c in entry["false_positives"]]  # the same false positives as when it was written
    assert [k in f for k in absent] == expected
    assert f.contains_many(absent).tolist() == expected


def test_golden_files_exist():
    if not ENTRIES:
        pytest.skip("no golden files yet: run `python tests/data/make_golden.py` and commit tests/data")
    for entry in ENTRIES:
        path = DATA / entry["file"]
        assert path.is_file(), f"golden file {entry['file']} is missing"
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], (
            f"golden file {entry['file']} was rewritten: golden files are never regenerated")


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_golden_file_answers_as_recorded(entry):
    from bloomwise import BloomFilter

    path = DATA / entry["file"]
    check(BloomFilter.load(path), entry)
    check(BloomFilter.from_bytes(path.read_bytes()), entry)
    with BloomFilter.open(path) as f:
        check(f, entry)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_rebuilding_sets_the_same_bits(entry):
    """The same keys still set the same bits: hashing and positions have not drifted since the file was written."""
    from bloomwise import BloomFilter

    recipe = entry["recipe"]
    golden_header, golden_payload = _format.load(DATA / entry["file"], structure=_format.Structure.BLOOM)
    f = BloomFilter.from_size(entry["num_bits"], entry["num_hashes"], layout=recipe["layout"], seed=recipe["seed"],
                              hash_scheme=_format.hash_scheme_name(golden_header.hash_scheme))
    f.update(decode_key(k) for k in entry["keys"])
    header, payload = _format.loads(f.to_bytes())
    assert payload == golden_payload
    assert (header.layout, header.hash_scheme, header.seed) == (
        golden_header.layout, golden_header.hash_scheme, golden_header.seed)
