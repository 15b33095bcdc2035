"""BloomFilter: m bits, k hash functions, no false negatives (Bloom 1970; Fan et al., Summary Cache).

The hot methods (``add``, ``in``, ``update``, ``contains_many``) are compiled (``bloomwise._native.bloom``);
this module adds construction, statistics, set algebra and persistence.
"""
from __future__ import annotations

import operator
import warnings
from typing import Callable, Iterable, Optional, Sequence

from bloomwise import _base, _format, theory
from bloomwise._native.bloom import BloomCore
from bloomwise._compatibility import Compatible
from bloomwise._persistence import Mapped, Persistent, check_keyed, header_flags, meta_capacity, meta_fpr, open_structure
from bloomwise._statistics import FillStatistics
from bloomwise._storage import StorageGeometry, StoredCells
from bloomwise.errors import CapacityWarning, FormatError

__all__ = ["BloomFilter", "LAYOUTS"]

#: layout name -> id (the file format's Layout enum; append-only): ``bloomwise._base.LAYOUTS``
LAYOUTS = _base.LAYOUTS
_layout_id = _base.layout_id


class BloomFilter(Persistent, FillStatistics, Compatible, StoredCells, BloomCore):
    """A set that answers "certainly absent" or "might be present", in ``num_cells`` bits.

    Build it by accuracy, ``BloomFilter(capacity, fpr)``, or by size, ``BloomFilter.from_size(num_cells,
    num_hashes)``. Layouts:

    - ``"blocked"`` (the default of both): each key sets its k bits inside one 64-byte block (one cache miss per
      key): the fastest; needs a few percent more bits for the same FPR, and is sized by its own formula. Its
      size is a multiple of 512 bits (``from_size`` refuses another size unless ``layout=`` names another layout).
    - ``"classic"``: k positions anywhere in m bits; FPR (1 - (1 - 1/m)^(kn))^k.
    - ``"partitioned"``: k slices of m/k bits, probe i in slice i (the Bloom-paradox paper's model).

    Keys: ``str`` (hashed as its UTF-8 bytes, so ``"a"`` and ``b"a"`` are the same key), ``bytes``,
    ``bytearray``, ``memoryview``, and ``int`` of any size (a domain of its own: ``5``, ``"5"`` and
    ``b"\\x05"`` are different keys; numpy integers hash as the int they equal). Other objects raise
    TypeError unless the filter has ``key=``, a function turning them into bytes.

    >>> f = BloomFilter(capacity=1000, fpr=0.01, layout="classic")
    >>> f.add("apple"), f.add("apple")
    (True, False)
    >>> "apple" in f, "pear" in f
    (True, False)
    >>> f.num_hashes
    7
    """

    __slots__ = ("_capacity", "_fpr", "__weakref__")

    def __init__(self, capacity, fpr=0.01, *, layout="blocked", seed=0,
                 key: Optional[Callable[[object], bytes]] = None, hash_scheme="xxh3"):
        """Sized so that ``fpr`` holds at ``capacity`` keys, by the layout's own FPR formula.

        :param capacity: the number of distinct keys the filter is sized for (an int >= 1).
        :param fpr: the target false-positive rate at capacity, in (0, 1).
        :param layout: ``"blocked"``, ``"classic"`` or ``"partitioned"``.
        :param seed: hash seed, an int in [0, 2**64).
        :param key: optional function turning any key into bytes.
        :param hash_scheme: ``"xxh3"`` (default) or ``"xxh64"`` (to combine with filters saved by bloomwise 0.1).
        """
        capacity = _base.check_capacity(capacity)
        _layout_id(layout)
        scheme = _format.hash_scheme_id(hash_scheme)
        num_bits, num_hashes = theory.sizing.size_for("capacity", capacity, fpr, layout)
        self._init_core(num_bits, num_hashes, _layout_id(layout), seed, key=key, hash_scheme=scheme)
        self._capacity = capacity
        self._fpr = float(fpr)
        self._set_capacity_limit(capacity)

    @classmethod
    def from_size(cls, num_cells=None, num_hashes=None, *, layout="blocked", seed=0,
                  key: Optional[Callable[[object], bytes]] = None, hash_scheme="xxh3") -> "BloomFilter":
        """A filter of exactly ``num_cells`` bits and ``num_hashes`` probes per key. The default layout is
        ``"blocked"``, as for ``BloomFilter(capacity, fpr)``: its size is a multiple of 512 bits (pass
        ``layout="classic"`` for any other size).

        >>> BloomFilter.from_size(1024, 3).num_cells
        1024
        """
        num_cells = _base.size_arguments(num_cells, num_hashes, "BloomFilter")
        if layout == "blocked" and num_cells % theory.BLOCK_BITS:
            nearest = -(-num_cells // theory.BLOCK_BITS) * theory.BLOCK_BITS
            raise ValueError(f"num_cells must be a multiple of {theory.BLOCK_BITS} for the blocked layout (the "
                             f"default), got {num_cells:,} (nearest: {nearest:,}); pass layout='classic' or "
                             "'partitioned' for any size")
        self = cls.__new__(cls)
        self._init_core(num_cells, num_hashes, _layout_id(layout), seed, key=key,
                        hash_scheme=_format.hash_scheme_id(hash_scheme))
        self._capacity = None
        self._fpr = None
        return self

    @classmethod
    def from_hash_functions(cls, num_cells, functions: Sequence[Callable[[object], int]]) -> "BloomFilter":
        """A teaching filter whose k index functions are given explicitly (evaluated in Python).

        Each function maps a key to an int in [0, num_cells), m = num_cells bits. The CS 170 example (m = 5):

        >>> f = BloomFilter.from_hash_functions(5, [lambda x: x % 5, lambda x: (2 * x + 3) % 5])
        >>> f.add(9); f.add(11)
        True
        True
        >>> 15 in f, 16 in f   # 16 is a false positive
        (False, True)

        Such a filter saves with hash scheme "custom"; loading it needs the same functions again.
        """
        functions = list(functions)
        if not functions or not all(callable(fn) for fn in functions):
            raise TypeError("functions must be a non-empty sequence of callables key -> int")
        self = _ExplicitHashBloomFilter.__new__(_ExplicitHashBloomFilter)
        self._init_core(num_cells, len(functions), LAYOUTS["classic"], 0)
        self._capacity = None
        self._fpr = None
        self._functions = functions
        return self

    # -- description ----------------------------------------------------------------------------------------
    @property
    def _num_positions(self) -> int:
        return self.num_cells

    @property
    def fpr(self) -> Optional[float]:
        """The target false-positive rate given at construction (None when built by size); the rate now is
        ``estimated_fpr()``."""
        return self._fpr

    def bits(self, key) -> tuple[int, ...]:
        """The bits (0 or 1) at the key's k positions, in probe order: the key is present iff all are 1 (the
        counting filters' ``counters(key)``)."""
        payload = self._payload()
        return tuple((payload[position >> 3] >> (position & 7)) & 1 for position in self._bit_indices(key))

    def _count_filled(self) -> int:
        return self._count_set_bits()

    @property
    def num_keys(self) -> int:
        """Keys added: one per ``add()`` and one per key of ``update()``, repeats included (as in the counting
        filters). Saved with the filter. A union adds the operands' counts; an intersection keeps the left one's."""
        return self._insertions_count

    @property
    def num_new_keys(self) -> int:
        """Insertions that set at least one new bit (``add()`` returned True): the distinct keys added, less those
        that already looked present (false positives at insertion time). The capacity warning counts these. Kept
        in memory only: a loaded or opened filter starts it at ``num_keys``."""
        return self._new_keys_count

    # -- storage: the internal interface of bloomwise._storage (BitStorage) ----------------------------------------
    def storage_geometry(self) -> StorageGeometry:
        """Where keys go: layout, m, k, seed and hash scheme (``bloomwise._storage``)."""
        return StorageGeometry("bloom", self.layout, self.num_cells, self.num_hashes, self.seed, self.hash_scheme)

    @classmethod
    def from_payload(cls, geometry: StorageGeometry, payload=None, *, num_keys: int = 0, key=None) -> "BloomFilter":
        """A filter of ``geometry`` holding a copy of ``payload`` (None: no bits set) and ``num_keys`` keys (both
        counts: ``num_keys`` and ``keys_counted``), with no target (``bloomwise._storage``)."""
        geometry.check_structure("bloom")
        self = cls.__new__(cls)
        self._init_core(geometry.num_cells, geometry.num_hashes, _layout_id(geometry.layout), geometry.seed,
                        num_keys=num_keys, key=key, hash_scheme=_format.hash_scheme_id(geometry.hash_scheme))
        self._capacity = self._fpr = None
        if payload is not None:
            self._copy_bits_from(payload)
        return self

    def replace_payload(self, payload) -> None:
        """Overwrite every bit from a bytes-like payload of exactly ``nbytes`` bytes."""
        self._copy_bits_from(payload)

    def assign_bits(self, positions, values) -> None:
        """Set bit ``positions[i]`` to ``values[i]`` (numpy uint64 and uint8 arrays of one length)."""
        self._assign_bits(positions, values)

    @property
    def keys_counted(self) -> int:
        """The count the capacity warning compares with ``capacity``: ``num_new_keys``."""
        return self._new_keys_count

    def __repr__(self) -> str:
        capacity = "" if self._capacity is None else f", capacity={self._capacity:,}"
        return (f"<{type(self).__name__} {self.layout}: {self.num_cells:,} bits, k={self.num_hashes}, "
                f"fill={self.fill_ratio:.1%}{capacity}>")

    __hash__ = None  # mutable, like set

    def _over_capacity(self) -> None:
        warnings.warn(
            f"{type(self).__name__} sized for {self._capacity:,} keys now holds about {self._new_keys_count:,}: "
            f"its false-positive rate is now about {self.estimated_fpr():.3g}, above the target. "
            "Build a larger filter, or use ScalableBloomFilter when the number of keys is unknown.",
            CapacityWarning, stacklevel=3)

    # -- set algebra -------------------------------------------------------------------------------------------
    def _parameters(self) -> dict:
        return {"structure": self._STRUCTURE.name.lower(), "num_cells": self.num_cells, "num_hashes": self.num_hashes,
                "layout": self.layout, "seed": self.seed, "hash_scheme": self.hash_scheme}

    def copy(self) -> "BloomFilter":
        """An independent copy (same parameters and bits)."""
        clone = type(self).__new__(type(self))
        clone._init_core(self.num_cells, self.num_hashes, self._layout_id, self.seed,
                         num_keys=self._insertions_count, key=self._key_function,
                         hash_scheme=self._hash_scheme_id, new_keys=self._new_keys_count)
        clone._copy_bits_from(self._payload())
        clone._capacity, clone._fpr = self._capacity, self._fpr
        clone._set_capacity_limit(self._capacity)
        clone._copy_extra_from(self)
        return clone

    def _copy_extra_from(self, other) -> None:
        """Subclasses with extra state copy it here."""

    def __ior__(self, other):
        self._check_compatible(other, "union")
        self._combine(other, True)
        self._count_insertions(other._insertions_count)
        return self

    def __iand__(self, other):
        self._check_compatible(other, "intersect")
        self._combine(other, False)
        return self

    def __and__(self, other):
        """``a & b``: a new filter, a copy of ``a`` intersected with ``b`` (``&=``)."""
        return self._combined(other, operator.iand)

    def union(self, *others) -> "BloomFilter":
        """A new filter holding the keys of this one and of all ``others`` (bitwise OR; exact)."""
        result = self.copy()
        for other in others:
            result |= other
        return result

    def intersection(self, *others) -> "BloomFilter":
        """Bitwise AND: contains every key common to all filters, with an FPR at least that of each one."""
        result = self.copy()
        for other in others:
            result &= other
        return result

    def __eq__(self, other):
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return self.is_compatible(other) and self._same_bits(other)

    # -- persistence -------------------------------------------------------------------------------------------
    _STRUCTURE = _format.Structure.BLOOM
    _LOADS_IN_PLACE = True

    @property
    def _hash_scheme(self) -> _format.HashScheme:
        return _format.HashScheme(self._hash_scheme_id)

    def _header(self) -> _format.Header:
        meta = {} if self._capacity is None else {"capacity": self._capacity}
        if self._fpr is not None:
            meta["fpr"] = self._fpr
        return _format.Header(
            structure=self._STRUCTURE, layout=_format.Layout(self._layout_id), hash_scheme=self._hash_scheme,
            seed=self.seed, num_cells=self.num_cells, num_hashes=self.num_hashes,
            num_keys=self._insertions_count, payload_length=self.nbytes, meta=meta,
            flags=header_flags(self._key_function))

    @classmethod
    def open(cls, path, mode="r", *, key=None, verify=True) -> "BloomFilter":
        """Memory-map a saved filter: ``mode="r"`` read-only (default), ``"r+"`` writable and shared.

        Every process that opens the same file sees the same bits. With ``"r+"``, call ``close()`` (or use
        ``with``) so the checksum is rewritten; a file left open for writing refuses to load until then.
        """
        return open_structure(cls, _MappedBloomFilter, path, mode, key=key, verify=verify)

    @classmethod
    def _from_parts(cls, header, payload, *, key, functions=None, copy=True) -> "BloomFilter":
        """Build from a validated header and payload (``Persistent``); ``copy=False`` uses the payload in place."""
        if header.hash_scheme == _format.HashScheme.CUSTOM:
            if functions is None:
                raise ValueError("this filter was built from explicit hash functions: "
                                 "pass the same functions=[...] to load it")
            self = cls.from_hash_functions(header.num_cells, functions)
            copy = True  # it has storage of its own: the bits are copied into it
            if self.num_hashes != header.num_hashes:
                raise ValueError(f"the file has {header.num_hashes} hash functions, {len(functions)} were given")
        else:
            check_keyed(header, key)
            if header.layout == _format.Layout.BLOCKED and header.num_cells % 512:
                raise FormatError(f"a blocked filter needs num_bits divisible by 512, the file says "
                                  f"{header.num_cells}")
            expected = (header.num_cells + 63) // 64 * 8
            if header.payload_length != expected:
                raise FormatError(f"payload holds {header.payload_length} bytes; {header.num_cells} bits "
                                  f"need {expected}")
            scheme = _format.keyed_hash_scheme(header, "a Bloom filter")
            # Every check before the filter takes the payload: with copy=False it would hold the file's memory
            # map, which then could not be closed while an error is raised.
            _check_padding(header.num_cells, payload)
            meta_capacity(header)
            self = cls.__new__(cls)
            try:
                self._init_core(header.num_cells, header.num_hashes, int(header.layout), header.seed,
                                storage=None if copy else payload, num_keys=header.num_keys, key=key,
                                hash_scheme=scheme)
            except (ValueError, TypeError) as exc:
                self._release_storage()
                raise FormatError(f"the file describes an impossible filter: {exc}") from None
        _check_padding(header.num_cells, payload)
        if copy:
            self._copy_bits_from(payload)
        self._capacity, self._fpr = meta_capacity(header), meta_fpr(header)
        self._set_capacity_limit(self._capacity)
        return self


def _check_padding(num_bits: int, payload) -> None:
    """The bits past num_bits in the last 64-bit word are always 0; a set one means a damaged file."""
    if num_bits % 64 and len(payload) >= 8:
        last = int.from_bytes(payload[-8:], "little")
        if last >> (num_bits % 64):
            raise FormatError(f"bits past num_bits ({num_bits}) are set in the last word: the payload is damaged")


BloomFilter._FAMILY = BloomFilter


class _ExplicitHashBloomFilter(BloomFilter):
    """A BloomFilter whose positions come from user functions (``BloomFilter.from_hash_functions``)."""

    __slots__ = ("_functions",)

    def _positions(self, key):
        return [fn(key) for fn in self._functions]

    def add(self, key, /) -> bool:
        self._count_insertions(1)
        return self._set_positions(self._positions(key))

    def __contains__(self, key) -> bool:
        return self._test_positions(self._positions(key))

    def update(self, keys: Iterable, *, threads=None) -> None:
        for key in keys:
            self.add(key)

    def contains_many(self, keys: Iterable, *, threads=None):
        import numpy as np
        return np.array([key in self for key in keys], dtype=bool)

    def _bit_indices(self, key):
        return self._positions(key)

    @property
    def _hash_scheme(self):
        return _format.HashScheme.CUSTOM

    @property
    def hash_scheme(self) -> str:
        """``"custom"``: the positions come from the functions given."""
        return "custom"

    def _parameters(self) -> dict:
        return {**super()._parameters(), "functions": tuple(self._functions)}

    def _copy_extra_from(self, other) -> None:
        self._functions = list(other._functions)

    def __reduce__(self):
        raise TypeError("a filter built from explicit hash functions cannot be pickled: save its bits with "
                        "to_bytes() and load them with from_bytes(data, functions=...)")


class _MappedBloomFilter(Mapped, BloomFilter):
    """A BloomFilter whose bits live in a memory-mapped file (``BloomFilter.open``)."""

    __slots__ = ("_mapped",)
