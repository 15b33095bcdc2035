"""Deterministic workloads: every library sees the same keys, in every run and on every machine.

Key ``i`` of a workload is a pure function of ``i``, so present keys (``0 <= i < n``) and absent keys
(``n <= i < n + n_absent``) never overlap and do not depend on ``n``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Absent keys per workload, and present keys queried one at a time: enough for a 0.1% FPR (about 1,000
# expected false positives), and a loop over 10M keys would only cost time (a query costs the same either way).
QUERY_MAX = 1_000_000
_CHUNK = 1 << 20        # URLs are generated in chunks to bound the temporary index lists

_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd, so i -> i * _MULT mod 2**63 is a bijection (distinct keys)
_MASK63 = np.uint64((1 << 63) - 1)     # ints stay below 2**63: every peer accepts them (fastbloom-rs: i64)


def str_keys(start: int, stop: int) -> list[str]:
    """``"key0"``, ``"key1"``, ... : short ASCII keys."""
    return [f"key{i}" for i in range(start, stop)]


def u64_keys(start: int, stop: int) -> np.ndarray:
    """Distinct pseudo-random integers in ``[0, 2**63)`` as a uint64 array."""
    with np.errstate(over="ignore"):
        return (np.arange(start, stop, dtype=np.uint64) * _MULT) & _MASK63


def int_keys(start: int, stop: int) -> list[int]:
    """The same integers as :func:`u64_keys`, as Python ints."""
    return u64_keys(start, stop).tolist()


_WORDS = (
    "apple river stone cloud garden market silver yellow orange planet music travel winter summer "
    "forest ocean bright coffee window paper little golden rocket harbor castle dragon island meadow "
    "pixel shadow thunder velvet wonder anchor bridge candle desert engine falcon glacier hammer jungle "
    "kettle lemon mirror needle oyster pepper quartz rabbit saddle tiger umbrella violet walnut zebra "
    "audio basket circle daily energy fresh global health"
).split()
_SUBDOMAINS = ("www", "blog", "shop", "news", "m", "api", "docs", "static")
_TLDS = ("com", "org", "net", "io", "de", "co.uk", "fr", "jp")
_ENDINGS = ("", ".html", "/", "?page=2", "?ref=home", ".php?id=7", "#comments", "/index.html")
assert len(_WORDS) == 64


def _splitmix64(i: np.ndarray) -> np.ndarray:
    """SplitMix64's output function, vectorised (a well-mixed 64-bit value per index)."""
    with np.errstate(over="ignore"):
        z = i + _MULT
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def url_keys(start: int, stop: int) -> list[str]:
    """Realistic URLs of about 45-80 characters, e.g. ``https://shop.rocketharbor.de/winter/pixel-audio-1234.html``.

    The words come from a hash of ``i`` and the path ends with ``i`` itself, so every URL is distinct.
    """
    out: list[str] = []
    w = _WORDS
    for lo in range(start, stop, _CHUNK):
        idx = np.arange(lo, min(stop, lo + _CHUNK), dtype=np.uint64)
        z = _splitmix64(idx)

        def field(shift: int, size: int, z=z) -> list[int]:  # bits [shift, shift + log2(size)) of the hash
            return ((z >> np.uint64(shift)) & np.uint64(size - 1)).tolist()

        out += [
            f"https://{_SUBDOMAINS[s]}.{w[d1]}{w[d2]}.{_TLDS[t]}/{w[p1]}/{w[p2]}-{w[p3]}-{i}{_ENDINGS[e]}"
            for i, s, d1, d2, t, p1, p2, p3, e in zip(
                idx.tolist(), field(0, 8), field(3, 64), field(9, 64), field(15, 8), field(18, 64),
                field(24, 64), field(30, 64), field(36, 8), strict=True)
        ]
    return out


@dataclass(frozen=True)
class Workload:
    """A named set of present and absent keys, generated on demand (10M URLs take ~1 GB)."""

    name: str                       # e.g. "str-key-1M"
    kind: str                       # "str", "int" (lists of Python objects) or "u64" (numpy array)
    n: int                          # present keys
    generate: Callable[[int, int], list | np.ndarray]
    batch_only: bool = False        # numpy workloads: batch operations only
    filter_bytes: int | None = None  # size every filter to this many bytes instead of to n keys
    first_fpr_only: bool = False    # run at the run's first target FPR only

    @property
    def n_absent(self) -> int:
        return min(self.n, QUERY_MAX)

    def keys(self) -> tuple[list | np.ndarray, list | np.ndarray]:
        return self.generate(0, self.n), self.generate(self.n, self.n + self.n_absent)


def label(n: int) -> str:
    """100000 -> "100k", 10000000 -> "10M"."""
    for unit, name in ((1_000_000, "M"), (1_000, "k")):
        if n % unit == 0:
            return f"{n // unit}{name}"
    return str(n)


def size_label(nbytes: int) -> str:
    """1073741824 -> "1GiB", 67108864 -> "64MiB"."""
    return f"{nbytes >> 30}GiB" if nbytes % (1 << 30) == 0 else f"{nbytes >> 20}MiB"


def plan(sizes: list[int], large_bytes: int, only: list[str] | None) -> list[Workload]:
    """Every workload of a run, smallest first; ``only`` keeps those whose name contains one of its words."""
    big = max(sizes)
    out = []
    for n in sorted(sizes):
        out += [
            Workload(f"str-key-{label(n)}", "str", n, str_keys),
            Workload(f"str-url-{label(n)}", "str", n, url_keys),
            Workload(f"int-{label(n)}", "int", n, int_keys),
        ]
    out.append(Workload(f"numpy-u64-{label(big)}", "u64", big, u64_keys, batch_only=True))
    # A filter far larger than the caches: it holds only `big` keys, so FPR and bits/key mean nothing
    # there; what it measures is the cost of random cache-line accesses, against the machine's floor.
    out.append(Workload(f"large-{size_label(large_bytes)}", "u64", big, u64_keys, batch_only=True,
                        filter_bytes=large_bytes, first_fpr_only=True))
    if only:
        out = [w for w in out if any(word in w.name for word in only)]
    return out
