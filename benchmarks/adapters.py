"""One adapter per library: how to build a filter and run each operation with that library's fastest public API.

Every adapter has the same methods; ``kind`` is the workload's key type ("str", "int" or "u64" numpy array).
Single-key loops are the same plain Python ``for`` loop for every library, so the loop's own cost
(~10-15 ns per key) is in every figure alike. Timed single-key loops discard the answers (``query_each``), as the
``add`` loop does: counting them inside the loop (``hits += 1``, a new int object per hit) measured 14 ns per
present key here, the same for every library; ``count_each`` counts them in a separate, untimed pass. A batch method returns the library's raw answer (counted outside
the timed region), or the adapter sets ``batch_query = None`` when the library has no batch query.
Peers that take no numpy arrays get ``keys.tolist()`` inside the timed batch call: a user pays it too.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import sys

import numpy as np


def _as_list(keys):
    return keys.tolist() if isinstance(keys, np.ndarray) else keys


def _add_each(add, keys) -> None:
    for k in keys:
        add(k)


def _query_each(f, keys) -> None:
    for k in keys:
        k in f  # noqa: B015 - the answer is discarded on purpose (counted apart, untimed)


def _call_each(contains, keys) -> None:
    for k in keys:
        contains(k)


def _count_in(f, keys) -> int:
    hits = 0
    for k in keys:
        if k in f:
            hits += 1
    return hits


def _count_calls(contains, keys) -> int:
    hits = 0
    for k in keys:
        if contains(k):
            hits += 1
    return hits


class Adapter:
    name = ""             # row label in the tables
    module = ""           # what to import (also timed in a fresh interpreter)
    dist = ""             # distribution name, for the version stamp
    import_stmt = ""
    peer = True           # False: bloomwise itself, or a reference that is no Bloom filter (set)
    sized = True          # False: the structure has no size to choose (set)
    numpy_only = False    # True: runs on numpy workloads only (bloomwise's threads= rows)
    error: str | None = None  # why the library cannot run here (then every figure is "unavailable")

    def __init__(self):
        try:
            self.mod = importlib.import_module(self.module)
        except Exception as e:  # noqa: BLE001 - any failure means "unavailable", with the reason shown
            self.mod, self.error = None, f"{type(e).__name__}: {e}"

    def version(self) -> str:
        try:
            return importlib.metadata.version(self.dist)
        except importlib.metadata.PackageNotFoundError:
            return getattr(self.mod, "__version__", "?")

    # --- interface --------------------------------------------------------------------------------
    def new(self, capacity: int, fpr: float, kind: str):
        raise NotImplementedError

    def bits(self, f) -> int | None:
        raise NotImplementedError

    def add_each(self, f, keys, kind):
        _add_each(f.add, keys)

    def query_each(self, f, keys, kind) -> None:
        _query_each(f, keys)

    def count_each(self, f, keys, kind) -> int:
        return _count_in(f, keys)

    def add_batch(self, f, keys, kind):
        f.update(_as_list(keys))

    batch_query = None  # a method (f, keys, kind) -> answer, when the library has one


class PySet(Adapter):
    name, module, dist, import_stmt = "set (reference)", "builtins", "", "pass"
    peer = sized = False

    def version(self):
        return "built-in"

    def new(self, capacity, fpr, kind):
        return set()

    def bits(self, f):  # the hash table only, not the keys it points to
        return sys.getsizeof(f) * 8


class Rbloom(Adapter):
    """rbloom with Python's salted ``hash()`` (its default, its fastest; such filters cannot be saved)."""

    name, module, dist, import_stmt = "rbloom", "rbloom", "rbloom", "from rbloom import Bloom"

    def hash_func(self, kind):  # None: Python's hash()
        return None

    def new(self, capacity, fpr, kind):
        return self.mod.Bloom(capacity, fpr, hash_func=self.hash_func(kind))

    def bits(self, f):
        return f.size_in_bits


def _blake2b_str(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=16).digest(), "little", signed=True)


def _blake2b_int(key: int) -> int:
    return int.from_bytes(hashlib.blake2b(key.to_bytes(8, "little", signed=True), digest_size=16).digest(),
                          "little", signed=True)


class RbloomPersistable(Rbloom):
    """rbloom with a persistable ``hash_func`` (the same hash in every process, so filters can be saved):
    BLAKE2b (stdlib ``hashlib``, 16-byte digest) of the key's UTF-8 bytes (str) or 8-byte little-endian form
    (int), as a signed 128-bit int. One function per key type, as a user who knows the type would write it."""

    name = "rbloom + blake2b hash_func"

    def hash_func(self, kind):
        return _blake2b_str if kind == "str" else _blake2b_int


class PyBloomFilterMmap(Adapter):
    name, module, dist = "pybloomfiltermmap3", "pybloomfilter", "pybloomfiltermmap3"
    import_stmt = "from pybloomfilter import BloomFilter"

    def new(self, capacity, fpr, kind):
        return self.mod.BloomFilter(capacity, fpr)  # no filename: in memory

    def bits(self, f):
        return f.num_bits  # (pybloomfiltermmap3's own name)


class FastBloom(Adapter):
    """fastbloom-rs with its typed calls (``add_str``, ``contains_int_batch``, ...): its fastest API."""

    name, module, dist = "fastbloom-rs", "fastbloom_rs", "fastbloom-rs"
    import_stmt = "from fastbloom_rs import BloomFilter"

    def new(self, capacity, fpr, kind):
        return self.mod.BloomFilter(capacity, fpr)

    def bits(self, f):
        return f.config().size()

    @staticmethod
    def _typed(kind):
        return "str" if kind == "str" else "int"

    def add_each(self, f, keys, kind):
        _add_each(getattr(f, "add_" + self._typed(kind)), keys)

    def query_each(self, f, keys, kind):
        _call_each(getattr(f, "contains_" + self._typed(kind)), keys)

    def count_each(self, f, keys, kind):
        return _count_calls(getattr(f, "contains_" + self._typed(kind)), keys)

    def add_batch(self, f, keys, kind):  # takes numpy int arrays as they are
        getattr(f, f"add_{self._typed(kind)}_batch")(keys)

    def batch_query(self, f, keys, kind):  # but its queries take lists only
        return getattr(f, f"contains_{self._typed(kind)}_batch")(_as_list(keys))


class Bloomwise(Adapter):
    module, dist, import_stmt = "bloomwise", "bloomwise", "from bloomwise import BloomFilter"
    peer = False

    def __init__(self, layout: str, threads: int | None = None):
        super().__init__()
        self.layout, self.threads = layout, threads
        self.numpy_only = threads is not None
        self.name = f"bloomwise {layout}" + (f" threads={threads}" if threads else "")
        if self.mod is not None:
            try:
                self.cls = self.mod.BloomFilter
            except Exception as e:  # noqa: BLE001
                self.error = f"{type(e).__name__}: {e}"

    def new(self, capacity, fpr, kind):
        return self.cls(capacity, fpr, layout=self.layout)

    def bits(self, f):
        return f.num_cells

    def _threads(self):  # pass threads= only when asked, so the default call is what is measured
        return {} if self.threads is None else {"threads": self.threads}

    def add_batch(self, f, keys, kind):
        f.update(keys, **self._threads())

    def batch_query(self, f, keys, kind):
        return f.contains_many(keys, **self._threads())


LAYOUTS = ("blocked", "partitioned", "classic")  # blocked (the default) first: the targets are about it


def all_adapters(threads: list[int]) -> list[Adapter]:
    """bloomwise in every layout (and the blocked layout at each extra thread count), then the peers."""
    bw = [Bloomwise(layout) for layout in LAYOUTS]
    bw += [Bloomwise("blocked", t) for t in threads if t > 1]
    return bw + [Rbloom(), RbloomPersistable(), PyBloomFilterMmap(), FastBloom(), PySet()]
