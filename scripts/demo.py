"""`make demo`: build a filter from a generated key set, query it, show what it really does, save and reload it.

Everything printed is measured in this run.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from bloomwise import BloomFilter, theory

NUM_KEYS = 1_000_000
TARGET_FPR = 0.01


def urls(start: int, count: int) -> list[str]:
    """Deterministic, realistic-looking URLs."""
    hosts = ["example.com", "news.example.org", "cdn.example.net", "shop.example.co.uk", "wiki.example.edu"]
    return [f"https://{hosts[i % 5]}/articles/{i * 7919 % 1_000_003}/page-{i}.html" for i in range(start, start + count)]


def main() -> int:
    print(f"bloomwise demo: {NUM_KEYS:,} URLs, target false-positive rate {TARGET_FPR:.0%}\n")
    present, absent = urls(0, NUM_KEYS), urls(NUM_KEYS, NUM_KEYS)

    for layout in ("blocked", "classic", "partitioned"):
        f = BloomFilter(NUM_KEYS, TARGET_FPR, layout=layout)
        started = time.perf_counter()
        f.update(present)
        build = time.perf_counter() - started
        started = time.perf_counter()
        hits = f.contains_many(absent)
        query = time.perf_counter() - started
        assert f.contains_many(present).all(), "a false negative: this must never happen"
        measured = hits.mean()
        expected = theory.false_positive_rate(f.num_cells, NUM_KEYS, f.num_hashes, layout=layout)
        print(f"{layout:12s} {f.num_cells / NUM_KEYS:5.2f} bits/key, k={f.num_hashes:2d}, "
              f"build {build / NUM_KEYS * 1e9:5.0f} ns/key, query {query / NUM_KEYS * 1e9:5.0f} ns/key, "
              f"FPR measured {measured:.4%} (theory {expected:.4%}), no false negatives")

    f = BloomFilter(NUM_KEYS, TARGET_FPR)
    f.update(present)
    print(f"\none key at a time: {present[0]!r} in f -> {present[0] in f}; "
          f"{absent[0]!r} in f -> {absent[0] in f}")
    print(f"estimated keys from the fill: {f.approx_count():,.0f} (true {NUM_KEYS:,}); "
          f"estimated FPR {f.estimated_fpr():.4%}")

    with tempfile.TemporaryDirectory() as tmp:
        keys_path, filter_path = os.path.join(tmp, "urls.txt"), os.path.join(tmp, "urls.bloom")
        with open(keys_path, "w") as out:
            out.write("\n".join(present[:100_000]) + "\n")
        print("\n$ bloomwise build urls.txt -o urls.bloom --fpr 1%")
        cli = [sys.executable, "-m", "bloomwise"]
        subprocess.run(cli + ["build", keys_path, "-o", filter_path, "--fpr", "1%"], check=True)
        print("$ bloomwise info urls.bloom")
        subprocess.run(cli + ["info", filter_path], check=True)
        loaded = BloomFilter.load(filter_path)
        print(f"\nreloaded: {loaded!r}; all 100,000 keys present: {bool(loaded.contains_many(present[:100_000]).all())}")

    plan = theory.plan(n=10_000, p=0.001)
    print(f"\nsizing like the hur.st calculator: n = 10,000, p = 0.001 -> m = {plan.m:,} bits, k = {plan.k} "
          f"({plan.bits_per_key:.2f} bits/key; real FPR classic {plan.fpr_classic:.4%}, "
          f"blocked at the same size {plan.fpr_blocked:.4%})")
    figure = os.path.join("build", "demo", "figure4.png")
    os.makedirs(os.path.dirname(figure), exist_ok=True)
    from bloomwise.plot import plot_figure4
    plot_figure4(figure)
    print(f"Figure 4 of Summary Cache (FPR against bits per entry, k = 4 and optimal k): {figure}")

    # Cooperating proxies (docs/cache.md): the same synthetic trace replayed under each routing policy.
    argv = ["simulate", "--synthetic", "20000", "--proxies", "4", "--documents", "20000", "--cache-size", "32MiB",
            "--bits-per-entry", "8", "--update-threshold", "1%", "--seed", "1"]
    print("\n$ bloomwise " + " ".join(argv))
    sys.stdout.flush()
    subprocess.run(cli + argv, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
