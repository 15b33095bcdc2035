"""The structures' storage as the package's own modules reach it: one named internal interface.

Some modules move a structure's cells without going through its keys: the file format (``_persistence``), Dask's
partial filters (``dask``), filters served by Redis (``redis``), the summaries cooperating caches exchange
(``cache.summary``). They use the names below and
nothing private of the structures, so that a structure may change how it keeps its cells without breaking them. ``BloomFilter``, ``CountingBloomFilter`` and
``VariableIncrementCountingBloomFilter`` implement :class:`CellStorage`; ``BloomFilter`` adds :class:`BitStorage`,
``CountingBloomFilter`` :class:`JournaledStorage`. The names have no leading underscore because other bloomwise modules
call them; they are not part of the documented user API (docs/architecture.md, "The internal storage interface").

- **geometry**: ``storage_geometry()``, a :class:`StorageGeometry` (everything that decides where a key's cells are
  and how wide a cell is); ``Cls.from_payload(geometry, payload)`` rebuilds the structure from it.
- **payload**: ``payload_view()`` (a read-only memoryview of the cells, exactly the bytes of the file format's
  payload) and ``replace_payload(payload)`` (overwrite every cell).
- **counts and capacity**: ``num_keys`` (the contract's count, saved in the file header),
  ``keys_counted`` (the count the capacity warning compares with ``capacity``: keys that set a new bit in a
  ``BloomFilter``, keys stored in a counting filter) and ``set_target(capacity, fpr)`` (the target and its warning
  limit, for a structure built from a payload).
- **bits**: ``assign_bits(positions, values)`` (a delta of absolute bit values, O(len(positions))).
- **the change journal**: ``mark()``, ``journal_entries_since(mark)`` (the raw transitions: numpy uint64
  ``position << 1 | new_bit`` and the end mark), ``trim_journal(mark)``, ``stop_journal()``, and ``bit_view()``
  (numpy uint64 words: the payload of the BloomFilter whose bit i is "counter i is nonzero"); CountingBloomFilter.
- **hashing**: ``key_function`` (the ``key=`` function or None).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable

from bloomwise._base import check_capacity, check_target_fpr

__all__ = ["StorageGeometry", "CellStorage", "BitStorage", "JournaledStorage", "StoredCells"]

#: StorageGeometry.structure -> the class that stores it (names of bloomwise._format.Structure, lower case)
STORAGE_STRUCTURES = ("bloom", "counting", "variable_increment")


@dataclass(frozen=True)
class StorageGeometry:
    """Where a structure's keys go and how its cells are stored: two structures of one geometry have the same cells
    for the same keys, so their payloads can be exchanged.

    ``cell_options`` are the cell keywords of the structure's ``from_size`` as ``(name, value)`` pairs:
    ``(("counter_bits", 4),)`` for a counting filter; ``increments``, ``fixed_bits`` and ``variable_bits`` for a
    variable-increment one; empty for a Bloom filter (one bit a cell).
    """

    structure: str
    layout: str
    num_cells: int
    num_hashes: int
    seed: int = 0
    hash_scheme: str = "xxh3"
    cell_options: tuple = ()

    def __post_init__(self):
        if self.structure not in STORAGE_STRUCTURES:
            raise ValueError(f"structure must be one of {', '.join(map(repr, STORAGE_STRUCTURES))}, got "
                             f"{self.structure!r}")

    def size_keywords(self) -> dict:
        """The keywords of ``from_size`` besides the size: layout, seed, hash scheme and the cell options."""
        return {"layout": self.layout, "seed": self.seed, "hash_scheme": self.hash_scheme, **dict(self.cell_options)}

    def check_structure(self, expected: str) -> None:
        """ValueError when this geometry belongs to another structure than ``expected``."""
        if self.structure != expected:
            raise ValueError(f"a {self.structure} geometry cannot build a {expected} structure")


@runtime_checkable
class CellStorage(Protocol):
    """m cells, k probes per key: what every local structure with one flat cell array offers the package."""

    num_keys: int
    keys_counted: int
    capacity: Optional[int]
    fpr: Optional[float]
    key_function: Any

    def storage_geometry(self) -> StorageGeometry:
        """The structure's geometry (the arguments ``from_payload`` takes back)."""

    @classmethod
    def from_payload(cls, geometry: StorageGeometry, payload=None, *, num_keys: int = 0, key=None):
        """A new structure of ``geometry`` holding a copy of ``payload`` (None: empty), ``num_keys`` counted, no
        target (``set_target`` sets one). ValueError when the payload has the wrong length."""

    def payload_view(self) -> memoryview:
        """A read-only view of the cells: the payload bytes of the file format (docs/format.md)."""

    def replace_payload(self, payload) -> None:
        """Overwrite every cell from a bytes-like payload of exactly ``nbytes`` bytes (under the writer lock)."""

    def set_target(self, capacity: Optional[int], fpr: Optional[float]) -> None:
        """Set ``capacity`` and ``fpr`` and warn (CapacityWarning) as the constructor's filter would have, now
        if ``keys_counted`` is already over ``capacity``, else once it passes it."""


@runtime_checkable
class BitStorage(CellStorage, Protocol):
    """A bit array (``BloomFilter``)."""

    def assign_bits(self, positions, values) -> None:
        """Set bit ``positions[i]`` to ``values[i]`` (numpy uint64 and uint8 arrays of one length)."""


@runtime_checkable
class JournaledStorage(CellStorage, Protocol):
    """A counter array whose bit view ("cell > 0") keeps a journal of its transitions (CountingBloomFilter)."""

    def bit_view(self):
        """numpy uint64 words: the payload of the BloomFilter whose bit i is "cell i is nonzero"."""

    def mark(self) -> int:
        """Start (or continue) the journal; the mark of now."""

    def journal_entries_since(self, mark: int):
        """``(entries, end)``: numpy uint64 ``position << 1 | new_bit`` of every transition since ``mark``, and
        the mark of now. ValueError for a mark that was trimmed or never issued."""

    def trim_journal(self, mark: int) -> None:
        """Forget the entries before ``mark``."""

    def stop_journal(self) -> None:
        """Stop recording and free the journal."""


class StoredCells:
    """The part of :class:`CellStorage` every compiled-core structure shares (a mixin of BloomFilter and the counting
    filters, which define ``storage_geometry``, ``from_payload``, ``replace_payload`` and ``keys_counted``)."""

    __slots__ = ()

    def payload_view(self) -> memoryview:
        """A read-only view of the cells: the payload bytes of the file format (docs/format.md)."""
        return self._payload()

    @property
    def key_function(self):
        """The ``key=`` function the structure was built with, or None."""
        return self._key_function

    def set_target(self, capacity: Optional[int], fpr: Optional[float]) -> None:
        """Set ``capacity`` and ``fpr`` (a structure built from a payload) and the CapacityWarning the constructor's
        structure would give: now if ``keys_counted`` is already over ``capacity``, else once it passes it."""
        self._capacity = None if capacity is None else check_capacity(capacity)
        self._fpr = None if fpr is None else check_target_fpr(fpr)
        self._set_capacity_limit(self._capacity)
        if self._capacity is not None and self.keys_counted > self._capacity:
            self._over_capacity()
