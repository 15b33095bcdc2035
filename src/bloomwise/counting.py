"""CountingBloomFilter: a Bloom filter that can also delete (Fan, Cao, Almeida and Broder, *Summary Cache*, 2000).

Each of the m positions holds a small counter instead of a bit: inserting a key increments its k counters, removing
it decrements them, and the *bit view* "counter > 0" is exactly a Bloom filter of the keys present (``to_bloom()``).
A change journal of the bit view's 0->1 and 1->0 transitions gives the delta updates a Summary Cache proxy ships
to its peers. The counters live in the compiled core (``bloomwise._native.counting``).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Optional

from bloomwise import _format, theory
from bloomwise._native.counting import CountingCore
from bloomwise._compatibility import Compatible
from bloomwise._base import (
    COUNTING_LAYOUTS, check_capacity, check_threads, layout_id, size_arguments, warn_over_capacity,
)
from bloomwise._persistence import (
    Mapped, Persistent, cell_array_header, check_cell_array_header, check_cell_payload, meta_capacity, meta_fpr,
    open_structure,
)
from bloomwise._statistics import FillStatistics
from bloomwise._storage import StorageGeometry, StoredCells
from bloomwise.bloom import BloomFilter
from bloomwise.errors import FormatError

__all__ = ["CountingBloomFilter", "Changes", "apply_changes"]

# ---- delta updates ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Changes:
    """A delta of a counting filter's bit view, from journal mark ``start`` to ``end``; ``len()`` is its size.

    ``positions`` (numpy uint64, sorted, unique) are the bits whose value at ``end`` differs from their value at
    ``start``; ``values`` (numpy bool) are their new values. Values are absolute, not flips (as in Summary Cache's
    update messages), so applying a delta twice is harmless. Pass ``end`` to the next ``changes_since``.
    """

    positions: Any
    values: Any
    start: int
    end: int

    def __len__(self) -> int:
        return len(self.positions)


def net_changes(entries, start: int, end: int) -> Changes:
    """Journal entries (position << 1 | new bit) -> the positions whose bit differs at the end, with their value."""
    import numpy as np
    positions = entries >> np.uint64(1)
    bits = (entries & np.uint64(1)).astype(bool)
    order = np.argsort(positions, kind="stable")
    ordered = positions[order]
    first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else np.zeros(0, np.intp)
    last = np.r_[first[1:], len(ordered)] - 1 if len(first) else first
    # A bit's first transition after `start` leaves the value it had then; it changed iff its last one is the same.
    changed = bits[order[first]] == bits[order[last]]
    return Changes(ordered[first][changed], bits[order[last]][changed], start, end)


def apply_changes(bloom: BloomFilter, changes: Changes) -> None:
    """Apply a delta from ``CountingBloomFilter.changes_since`` to a peer's BloomFilter copy, in place.

    A peer that copied ``to_bloom()`` at a mark and applies every later delta in turn holds exactly the counting
    filter's current ``to_bloom()``. O(len(changes)).

    >>> cbf = CountingBloomFilter(100, 0.01)
    >>> peer, mark = cbf.to_bloom(), cbf.mark()
    >>> cbf.add("a"); cbf.add("b"); cbf.remove("a")
    True
    True
    >>> apply_changes(peer, cbf.changes_since(mark))
    >>> peer == cbf.to_bloom()
    True
    """
    import numpy as np
    if not isinstance(bloom, BloomFilter):
        raise TypeError(f"changes apply to a BloomFilter, got {type(bloom).__name__}")
    positions = np.asarray(changes.positions, dtype=np.uint64).reshape(-1)
    values = np.asarray(changes.values, dtype=bool).reshape(-1)
    if positions.shape != values.shape:
        raise ValueError(f"changes hold {positions.size} positions but {values.size} values")
    if positions.size == 0:
        return
    if int(positions.max()) >= bloom.num_cells:
        raise ValueError(f"a change at position {int(positions.max())} does not fit a filter of {bloom.num_cells} "
                         "bits: the delta comes from a filter of another size")
    bloom.assign_bits(np.ascontiguousarray(positions), values.view(np.uint8))


# ---- the filter ------------------------------------------------------------------------------------------------------
class CountingBloomFilter(Persistent, FillStatistics, Compatible, StoredCells, CountingCore):
    """A multiset of keys in m small counters, with deletions; "certainly absent" or "might be present".

    Build it by accuracy, ``CountingBloomFilter(capacity, fpr)`` (m and k as a BloomFilter of the same layout:
    ``theory.optimal_size``), or by size, ``CountingBloomFilter.from_size(num_cells, num_hashes)``. Layouts
    ``"classic"`` (k positions anywhere) and ``"partitioned"`` (probe i in slice i). Keys are hashed exactly as
    BloomFilter hashes them (str as UTF-8, bytes, int of any size, numpy batches; ``key=`` for other objects).

    Counters are 4 bits (two per byte: the default, as in Summary Cache), 8 or 16 bits (``counter_bits``).
    Insertion increments the key's k counters (a position probed twice by one key counts twice), removal
    decrements them, and a query tests "all k counters > 0". ``count(key)`` is the smallest of them, an upper bound
    on how often the key was added; ``counters(key)`` gives all k in probe order (what the Bloom-paradox posterior
    of Theorem 2 multiplies).

    **Saturation is sticky.** A counter that reaches ``counter_max = 2**counter_bits - 1`` stays there and is never
    decremented: its true value is unknown, so decrementing could take it to 0 while keys still use it, a false
    negative. Overflow therefore never causes a false negative; its cost is a bit that stays set, so a slightly
    higher FPR, and ``saturated_count`` counts such counters. How rare it is (Fan et al., ToN 2000, section V-C;
    ``theory.counter_overflow_bound``): with k = (m/n) ln 2, ``Pr(some counter reaches i) <= m (e ln 2 / i)^i``,
    which is 3.06e-14 m at i = 15 (when a 4-bit counter sticks) and 1.37e-15 m at i = 16 (when a 4-bit counter
    would really overflow): for a million counters, 3e-8. 8-bit counters (i = 255) make it < 1e-300 m at twice
    the memory; 16-bit counters cost four times the memory for nothing more. ``saturation_bound()`` evaluates the
    bound for this filter. The default keeps 4 bits.

    **Removing a key that was never added is the caller's error.** ``remove`` raises KeyError, and changes
    nothing, only when the key is *certainly* absent (one of its counters is 0). A key that was never added but
    tests positive (a false positive) is removed like a real one: that decrements counters other keys rely on, and
    can turn them into false negatives. Remove only keys you added; ``discard`` ignores certainly absent keys.

    >>> f = CountingBloomFilter(1000, 0.01)
    >>> f.add("apple"), f.add("apple"), f.add("pear")
    (True, False, True)
    >>> f.count("apple"), "pear" in f
    (2, True)
    >>> f.remove("pear"); "pear" in f
    False
    >>> f.remove("plum")
    Traceback (most recent call last):
    ...
    KeyError: 'plum'
    >>> f.to_bloom() == f.to_bloom()   # the bit view, as a BloomFilter
    True
    """

    __slots__ = ("_capacity", "_fpr", "__weakref__")

    def __init__(self, capacity, fpr=0.01, *, counter_bits=4, layout="classic", seed=0,
                 key: Optional[Callable[[object], bytes]] = None, hash_scheme="xxh3"):
        """Sized like a BloomFilter of the same layout: ``fpr`` holds at ``capacity`` keys.

        :param capacity: the number of keys the filter is sized for (an int >= 1). Past it (``num_keys``, which
            counts every occurrence of a key) the filter warns once with a CapacityWarning.
        :param fpr: the target false-positive rate at capacity, in (0, 1).
        :param counter_bits: 4 (default), 8 or 16 bits per counter.
        :param layout: ``"classic"`` (default) or ``"partitioned"``.
        :param seed: hash seed, an int in [0, 2**64).
        :param key: optional function turning any key into bytes.
        :param hash_scheme: ``"xxh3"`` (default) or ``"xxh64"`` (bloomwise 0.1's hashing).
        """
        capacity = check_capacity(capacity)
        layout_number = layout_id(layout, COUNTING_LAYOUTS)
        scheme = _format.hash_scheme_id(hash_scheme)
        num_counters, num_hashes = theory.sizing.size_for("capacity", capacity, fpr, layout)
        self._init_counting(num_counters, num_hashes, layout_number, counter_bits, seed, key=key, hash_scheme=scheme)
        self._capacity = capacity
        self._fpr = float(fpr)
        self._set_capacity_limit(capacity)

    @classmethod
    def from_size(cls, num_cells=None, num_hashes=None, *, counter_bits=4, layout="classic", seed=0,
                  key: Optional[Callable[[object], bytes]] = None,
                  hash_scheme="xxh3") -> "CountingBloomFilter":
        """A filter of exactly ``num_cells`` counters and ``num_hashes`` probes per key.

        >>> CountingBloomFilter.from_size(1000, 3, counter_bits=8).nbytes
        1000
        """
        num_cells = size_arguments(num_cells, num_hashes, "CountingBloomFilter")
        self = cls.__new__(cls)
        self._init_counting(num_cells, num_hashes, layout_id(layout, COUNTING_LAYOUTS), counter_bits, seed, key=key,
                            hash_scheme=_format.hash_scheme_id(hash_scheme))
        self._capacity = None
        self._fpr = None
        return self

    # -- description ---------------------------------------------------------------------------------------------------
    @property
    def num_cells(self) -> int:
        """m: the number of counters (the bit view has m bits)."""
        return self._num_cells

    @property
    def fpr(self) -> Optional[float]:
        """The target false-positive rate given at construction (None when built by size); the rate now is
        ``estimated_fpr()``."""
        return self._fpr

    def update(self, keys, *, threads=None) -> None:
        """Add one occurrence of every key of an iterable or numpy array, without the GIL. ``threads=`` is
        accepted for the common contract; counters are updated by one thread (a key's k counters are scattered)."""
        check_threads(threads)
        CountingCore.update(self, keys)

    def contains_many(self, keys, *, threads=None):
        """A numpy bool array: whether each key might be present (the shape of a numpy input); one thread."""
        check_threads(threads)
        return CountingCore.contains_many(self, keys)

    @property
    def _num_positions(self) -> int:
        return self._num_cells

    def _count_filled(self) -> int:
        return self._count_nonzero()

    def saturation_bound(self, num_items=None) -> float:
        """Upper bound on Pr(some counter sticks at ``counter_max``) once ``num_items`` keys (default: capacity, or
        the keys stored) are in: ``theory.counter_overflow_bound(m, n, k, counter_max)``. Can exceed 1."""
        n = num_items if num_items is not None else (self._capacity or self.num_keys)
        return theory.counter_overflow_bound(self.num_cells, n, self.num_hashes, self.counter_max)

    def __repr__(self) -> str:
        capacity = "" if self._capacity is None else f", capacity={self._capacity:,}"
        return (f"<{type(self).__name__} {self.layout}: {self.num_cells:,} counters x {self.counter_bits} bits, "
                f"k={self.num_hashes}, keys={self.num_keys:,}, fill={self.fill_ratio:.1%}, "
                f"saturated={self.saturated_count:,}{capacity}>")

    __hash__ = None  # mutable, like set

    def _over_capacity(self) -> None:
        warn_over_capacity(self, self._capacity, self.num_keys, self.estimated_fpr())

    # -- storage: the internal interface of bloomwise._storage (JournaledStorage) -------------------------------------
    def storage_geometry(self) -> StorageGeometry:
        """Where keys go and the counter width: layout, m, k, seed, hash scheme, ``counter_bits``."""
        return StorageGeometry("counting", self.layout, self.num_cells, self.num_hashes, self.seed, self.hash_scheme,
                               (("counter_bits", self.counter_bits),))

    @classmethod
    def from_payload(cls, geometry: StorageGeometry, payload=None, *, num_keys: int = 0,
                     key=None) -> "CountingBloomFilter":
        """A filter of ``geometry`` holding a copy of the packed counters ``payload`` (None: all zero) and
        ``num_keys`` keys, with no target (``bloomwise._storage``)."""
        geometry.check_structure("counting")
        options = dict(geometry.cell_options)
        self = cls.__new__(cls)
        self._init_counting(geometry.num_cells, geometry.num_hashes, layout_id(geometry.layout, COUNTING_LAYOUTS),
                            options.get("counter_bits", 4), geometry.seed, num_keys, key,
                            hash_scheme=_format.hash_scheme_id(geometry.hash_scheme))
        self._capacity = self._fpr = None
        if payload is not None:
            self._copy_cells_from(payload)
        return self

    def replace_payload(self, payload) -> None:
        """Overwrite every counter from packed counters of exactly ``nbytes`` bytes (padding bits zero)."""
        self._copy_cells_from(payload)

    @property
    def keys_counted(self) -> int:
        """The count the capacity warning compares with ``capacity``: ``num_keys``."""
        return self.num_keys

    def bit_view(self):
        """numpy uint64 words: the payload of the BloomFilter whose bit i is "counter i is nonzero"."""
        return self._bit_view()

    def journal_entries_since(self, mark: int):
        """``(entries, end)``: numpy uint64 ``position << 1 | new_bit`` for every transition of the bit view since
        ``mark``, and the mark of now (``changes_since`` nets them). ValueError for an unknown mark."""
        return self._journal_since(mark)

    # -- the bit view and its journal ----------------------------------------------------------------------------------
    def to_bloom(self) -> BloomFilter:
        """The bit view (bit i = counter i > 0) as a BloomFilter of the same size, layout, k, seed, hash scheme and
        key function: it answers every query exactly as this filter does. O(m)."""
        bloom = BloomFilter.from_size(self.num_cells, self.num_hashes, layout=self.layout, seed=self.seed,
                                      key=self._key_function, hash_scheme=self.hash_scheme)
        bloom.replace_payload(self._bit_view())
        return bloom

    def changes_since(self, mark: int) -> Changes:
        """The bit-view delta since ``mark`` (from ``mark()`` or a previous delta's ``end``).

        The journal records every 0->1 and 1->0 transition once a first ``mark()`` switched it on (8 bytes each;
        ``trim_journal(mark)`` forgets entries no peer needs, ``stop_journal()`` frees it). The delta keeps the bits
        whose value now differs from their value at ``mark``, with their new values; ``apply_changes`` applies it to
        a BloomFilter. ValueError for a mark that was trimmed or never issued.
        """
        entries, end = self._journal_since(mark)
        return net_changes(entries, mark, end)

    # -- set algebra ---------------------------------------------------------------------------------------------------
    def _parameters(self) -> dict:
        return {"type": self._FAMILY.__name__, "num_cells": self.num_cells, "num_hashes": self.num_hashes,
                "layout": self.layout, "seed": self.seed, "hash_scheme": self.hash_scheme,
                "counter_bits": self.counter_bits}

    def copy(self) -> "CountingBloomFilter":
        """An independent copy (same parameters and counters; the journal starts empty)."""
        clone = type(self).__new__(type(self))
        clone._init_counting(self.num_cells, self.num_hashes, self._layout_id, self.counter_bits, self.seed,
                             self.num_keys, self._key_function, hash_scheme=self._hash_scheme_id)
        clone._copy_cells_from(self._payload())
        clone._capacity = self._capacity
        clone._fpr = self._fpr
        clone._set_capacity_limit(self._capacity)
        return clone

    def __ior__(self, other):
        self._check_compatible(other, "union")
        self._union_from(other)
        return self

    def __iand__(self, other):
        self._check_compatible(other, "intersect")
        self._intersection_from(other)
        return self

    def __and__(self, other):
        """``a & b``: a new filter, a copy of ``a`` intersected with ``b`` (``&=``)."""
        return self._combined(other, operator.iand)

    def union(self, *others) -> "CountingBloomFilter":
        """A new filter whose counters are the counter-wise sums (saturating at ``counter_max``): the multiset
        union of the keys. Every filter must have the same parameters (ValueError names the ones that differ)."""
        result = self.copy()
        for other in others:
            result |= other
        return result

    def intersection(self, *others) -> "CountingBloomFilter":
        """A new filter whose counters are the counter-wise minimums: an upper bound on the counting filter of the
        multiset intersection (a key added x and y times adds at least min(x, y) per probe to both counters), so
        every key common to all filters tests present (with more false positives than a filter of the common keys
        alone would have). ``num_keys`` stays
        this filter's. Every filter must have the same parameters (ValueError names the ones that differ)."""
        result = self.copy()
        for other in others:
            result &= other
        return result

    def __eq__(self, other):
        if not isinstance(other, CountingBloomFilter):
            return NotImplemented
        return self.is_compatible(other) and self._same_cells(other)

    # -- persistence ---------------------------------------------------------------------------------------------------
    _STRUCTURE = _format.Structure.COUNTING
    _LOADS_IN_PLACE = True

    def _header(self) -> _format.Header:
        return cell_array_header(self, {"counter_bits": self.counter_bits})

    @classmethod
    def open(cls, path, mode="r", *, key=None, verify=True) -> "CountingBloomFilter":
        """Memory-map a saved filter: ``mode="r"`` read-only (default), ``"r+"`` writable and shared, as
        ``BloomFilter.open``: every process that opens the file sees the same counters; with ``"r+"``, call
        ``close()`` (or use ``with``) so the checksum is rewritten. The change journal stays in memory.
        """
        return open_structure(cls, _MappedCountingBloomFilter, path, mode, key=key, verify=verify)

    @classmethod
    def _from_parts(cls, header: _format.Header, payload, *, key, copy=True) -> "CountingBloomFilter":
        scheme = check_cell_array_header(header, key, "a counting filter")
        counter_bits = header.meta.get("counter_bits")
        if counter_bits not in (4, 8, 16) or isinstance(counter_bits, bool):
            raise FormatError(f"meta counter_bits must be 4, 8 or 16, the file says {counter_bits!r}")
        capacity, fpr = meta_capacity(header), meta_fpr(header)
        check_cell_payload(header, payload, counter_bits, "counters", copy=copy)
        self = cls.__new__(cls)
        try:
            self._init_counting(header.num_cells, header.num_hashes, int(header.layout), counter_bits, header.seed,
                                header.num_keys, key, hash_scheme=scheme, storage=None if copy else payload)
            if copy:
                self._copy_cells_from(payload)
        except (ValueError, TypeError) as exc:
            self._release_storage()
            raise FormatError(f"the file describes an impossible filter: {exc}") from None
        self._capacity, self._fpr = capacity, fpr
        self._set_capacity_limit(capacity)
        return self


CountingBloomFilter._FAMILY = CountingBloomFilter


class _MappedCountingBloomFilter(Mapped, CountingBloomFilter):
    """A CountingBloomFilter whose counters live in a memory-mapped file (``CountingBloomFilter.open``)."""

    __slots__ = ("_mapped",)
