"""VariableIncrementCountingBloomFilter: the B_h / D_L variable-increment counting Bloom filter.

Rottenstreich, Kanizo and Keslassy, *The Variable-Increment Counting Bloom Filter* (INFOCOM 2012; ToN 22(4),
2014), in the B_h form that section VI of Rottenstreich and Keslassy, *The Bloom Paradox*, builds on: each position holds a pair of counters, a fixed-increment counter c (how many keys hit it) and a
variable-increment counter a (the sum of their increments). A key's increment at each of its positions is drawn
by a second hash from a set D: D_L = {L, ..., 2L-1} (default, L = 4) or a B_h sequence such as {1, 2, 4}.

The analytic false-positive rates (this structure's and the literature's closed form for D_L) and the sizing are in
:mod:`bloomwise.theory.counting` (re-exported here); the kernels are compiled (``bloomwise._native.counting``).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable, NamedTuple, Optional

from bloomwise import _format
from bloomwise._native.counting import VariableIncrementCore
from bloomwise._compatibility import Compatible
from bloomwise._base import (
    COUNTING_LAYOUTS, LAYOUT_NAMES, check_capacity, check_threads, layout_id, size_arguments,
    warn_over_capacity,
)
from bloomwise._persistence import (
    Mapped, Persistent, cell_array_header, check_cell_array_header, check_cell_payload, meta_capacity, meta_fpr,
    open_structure,
)
from bloomwise._statistics import FillStatistics
from bloomwise._storage import StorageGeometry, StoredCells
from bloomwise.errors import FormatError
from bloomwise._checks import check_probability
from bloomwise.theory._validate import check_reachable
from bloomwise.theory.counting import (
    DEFAULT_INCREMENTS, MAX_BH_ORDER, bh_order, check_increments, dl_false_positive_rate, dl_increments, multisets,
    table_rows, vicbf_false_positive_rate, vicbf_optimal_size,
)

__all__ = [
    "VariableIncrementCountingBloomFilter", "Probe", "dl_increments", "DEFAULT_INCREMENTS", "bh_order",
    "vicbf_false_positive_rate", "dl_false_positive_rate", "vicbf_optimal_size",
]


# ---- the filter ------------------------------------------------------------------------------------------------------
class Probe(NamedTuple):
    """What one of a key's k positions says (``VariableIncrementCountingBloomFilter.counters``).

    ``position``: the position j; ``increment``: the key's increment v_j there (an element of D); ``c``: the
    fixed-increment counter (keys that hit the position); ``a``: the variable-increment counter (the sum of their
    increments modulo 2^variable_bits); ``y``: the multiplicity of v_j in the unique multiset of c increments
    whose sum is a, decoded when 0 <= c <= h (``bh_order``), else None.
    """

    position: int
    increment: int
    c: int
    a: int
    y: Optional[int]


class VariableIncrementCountingBloomFilter(Persistent, FillStatistics, Compatible, StoredCells, VariableIncrementCore):
    """A counting Bloom filter whose positions hold (c, a) pairs: fewer false positives for the same memory.

    **Structure.** m positions, k probes per key (layouts ``"classic"`` and ``"partitioned"``: the same positions
    as a CountingBloomFilter or BloomFilter of that layout and seed). Probe j of key x has position p_j(x) and an
    increment v_j(x) from D, drawn by a second hash (``D[mulhi(fmix64(g_j ^ SALT), |D|)]``, g_j the probe's
    double-hashing value; docs/counting.md). Insertion adds (1, v_j) to the pair (c, a) at p_j, removal subtracts
    it. A query rejects x when at some position c = 0, or a - v_j cannot be a sum of exactly c - 1 increments of
    D. D defaults to D_L = {L..2L-1}, L = 4 (``dl_increments``); any set of distinct positive ints below
    2^variable_bits works, e.g. the B_2 sequence (1, 2, 4) of the Bloom-paradox paper's Figure 6.

    **Memory split (default).** 4-bit c + 4-bit a = one byte per position (c in the low nibble, a in the high
    one). c counts keys exactly up to 14 and is sticky at 15 (then the position admits every key: never a false
    negative; Pr(15 keys at one position) is below 1e-10 at the sizes used). a is kept **modulo 16**: with c
    known, a sum of c increments of D_4 lies in [4c, 7c], 3c + 1 consecutive values, so a mod 16 still pins it
    down up to c = 5; a never saturates and every deletion is exact (no stuck counters after churn). At equal
    memory a 4-bit CountingBloomFilter has twice as many counters: at 32 bits per key its best FPR is 0.0216
    (k = 6), this filter's 0.0063 (D_4, k = 5) or 0.0043 (B_2 (1, 2, 4), k = 7); at 16 bits per key 0.147 vs
    0.080 and 0.067 (``vicbf_false_positive_rate``). Other splits: ``fixed_bits + variable_bits`` in
    {8, 16, 32}; 3 + 5 gives the same rates at these loads, 2 + 6 and 5 + 3 worse.

    **Removing a key that was never added** (a false positive) corrupts the counters of other keys and can create
    false negatives; ``remove`` raises KeyError, changing nothing, only for a key that is certainly absent.

    **What the Bloom-paradox posterior (Theorem 5 of *The Bloom Paradox*, Rottenstreich and Keslassy) needs**, all exposed here:

    - ``probes(key)``: k ``Probe(position, increment, c, a, y)`` in probe order (``counters(key)``: the k c_j): ``c`` is c_j, ``a`` is a_j
      (modulo 2^variable_bits), ``increment`` is v_{g_j(x)}, and ``y`` is y_j, the multiplicity of the key's
      increment among the c_j increments at the position, decoded exactly when I(j) = 1, i.e. c_j <= h
      (``bh_order``); None otherwise (then Theorem 5 uses c_j). y_j = 0 means the key is rejected there.
    - ``counters_many(keys)``: the same for a batch, a numpy structured array of shape (*keys shape, k) with
      fields ``position``, ``increment``, ``c``, ``a`` and ``y`` (-1 where not decoded).
    - ``bh_order`` (h), ``num_increments`` (l = |D|), ``increments`` (D), ``num_cells`` (m), ``num_hashes``
      (k), ``num_keys`` (n). Theorem 5: ``delta = prod_{I(j)=0} c_j * prod_{I(j)=1} l y_j`` and
      ``Pr(x in S | filter) = m^k delta P / (m^k delta P + (n k)^k (1 - P))``.

    With D_4, h = 1: y_j is decoded where c_j <= 1 (y_j = 1 when a_j = v_j, else 0). With (1, 2, 4), h = 2.

    >>> f = VariableIncrementCountingBloomFilter(1000, 0.01)
    >>> f.add("apple"); "apple" in f, "pear" in f
    True
    (True, False)
    >>> f.counters("apple") == (1,) * f.num_hashes
    True
    >>> f.remove("apple"); "apple" in f
    False
    """

    __slots__ = ("_capacity", "_fpr", "_increments_tuple", "_bh_order", "_decoders", "__weakref__")

    def __init__(self, capacity, fpr=0.01, *, increments=DEFAULT_INCREMENTS, fixed_bits=4, variable_bits=4,
                 layout="classic", seed=0, key: Optional[Callable[[object], bytes]] = None, hash_scheme="xxh3"):
        """Sized by :func:`vicbf_optimal_size` so that ``fpr`` holds at ``capacity`` keys.

        :param capacity: the number of keys the filter is sized for (an int >= 1).
        :param fpr: the target false-positive rate at capacity, in (0, 1).
        :param increments: D, distinct ints >= 1 below 2^variable_bits - 1 (default D_4 = (4, 5, 6, 7)).
        :param fixed_bits: bits of each c (default 4).
        :param variable_bits: bits of each a (default 4); fixed_bits + variable_bits is 8, 16 or 32.
        :param layout: ``"classic"`` (default) or ``"partitioned"``.
        :param seed: hash seed, an int in [0, 2**64).
        :param key: optional function turning any key into bytes.
        :param hash_scheme: ``"xxh3"`` (default) or ``"xxh64"`` (bloomwise 0.1's hashing).
        """
        capacity = check_capacity(capacity)
        layout_id(layout, COUNTING_LAYOUTS)
        scheme = _format.hash_scheme_id(hash_scheme)
        increments = check_increments(increments)
        _check_split(fixed_bits, variable_bits, increments)
        check_reachable(capacity, check_probability("fpr", fpr), layout, "capacity", fixed_bits + variable_bits)
        num_positions, num_hashes = vicbf_optimal_size(capacity, fpr, increments=increments, fixed_bits=fixed_bits,
                                                       variable_bits=variable_bits, layout=layout)
        self._setup(num_positions, num_hashes, layout, increments, fixed_bits, variable_bits, seed, 0, key, scheme)
        self._capacity = capacity
        self._fpr = float(fpr)
        self._set_capacity_limit(capacity)

    @classmethod
    def from_size(cls, num_cells=None, num_hashes=None, *, increments=DEFAULT_INCREMENTS, fixed_bits=4,
                  variable_bits=4, layout="classic", seed=0, key=None,
                  hash_scheme="xxh3") -> "VariableIncrementCountingBloomFilter":
        """A filter of exactly ``num_cells`` (c, a) pairs and ``num_hashes`` probes per key.

        >>> VariableIncrementCountingBloomFilter.from_size(1000, 4, increments=(1, 2, 4)).bh_order
        2
        """
        num_cells = size_arguments(num_cells, num_hashes, "VariableIncrementCountingBloomFilter")
        self = cls.__new__(cls)
        increments = check_increments(increments)
        _check_split(fixed_bits, variable_bits, increments)
        self._setup(num_cells, num_hashes, layout, increments, fixed_bits, variable_bits, seed, 0, key,
                    _format.hash_scheme_id(hash_scheme))
        self._capacity = None
        self._fpr = None
        return self

    def _setup(self, num_positions, num_hashes, layout, increments, fixed_bits, variable_bits, seed, num_keys,
               key, scheme, storage=None) -> None:
        table, rows = _feasible_table(increments, fixed_bits, variable_bits)
        self._init_variable(num_positions, num_hashes, layout_id(layout, COUNTING_LAYOUTS), fixed_bits, variable_bits,
                            increments, table, rows, seed, num_keys, key, scheme, storage)
        self._increments_tuple = increments
        self._bh_order = bh_order(increments, min(MAX_BH_ORDER, (1 << fixed_bits) - 2), 1 << variable_bits)
        self._decoders = _decoders(increments, self._bh_order, 1 << variable_bits)

    # -- description ---------------------------------------------------------------------------------------------------
    @property
    def num_cells(self) -> int:
        """m: the number of positions, (c, a) pairs."""
        return self._num_cells

    @property
    def fpr(self) -> Optional[float]:
        """The target false-positive rate given at construction (None when built by size); the rate now is
        ``estimated_fpr()``."""
        return self._fpr

    def update(self, keys, *, threads=None) -> None:
        """Add one occurrence of every key of an iterable or numpy array; ``threads=`` as in the common contract
        (one thread updates the cells)."""
        check_threads(threads)
        VariableIncrementCore.update(self, keys)

    def contains_many(self, keys, *, threads=None):
        """A numpy bool array: whether each key might be present (the shape of a numpy input); one thread."""
        check_threads(threads)
        return VariableIncrementCore.contains_many(self, keys)

    @property
    def _num_positions(self) -> int:
        return self._num_cells

    def _count_filled(self) -> int:
        return self._cell_counts()[0]

    @property
    def increments(self) -> tuple[int, ...]:
        """D, ascending."""
        return self._increments_tuple

    @property
    def num_increments(self) -> int:
        """l = |D|: each increment is drawn with probability 1/l."""
        return len(self._increments_tuple)

    @property
    def bh_order(self) -> int:
        """h: sums of up to h increments are distinct (mod 2^variable_bits), so multiplicities are decoded where
        c <= h. Capped at 8 and below c's saturation."""
        return self._bh_order

    @property
    def saturated_count(self) -> int:
        """Positions whose c is saturated (stuck at 2^fixed_bits - 1: they admit every key). O(m)."""
        return self._cell_counts()[1]

    def estimated_fpr(self) -> float:
        """The analytic rate (:func:`vicbf_false_positive_rate`) at n = ``num_keys``."""
        return vicbf_false_positive_rate(self.num_cells, self.num_hashes, self.num_keys,
                                         increments=self.increments, fixed_bits=self.fixed_bits,
                                         variable_bits=self.variable_bits, layout=self.layout)

    def __repr__(self) -> str:
        capacity = "" if self._capacity is None else f", capacity={self._capacity:,}"
        return (f"<{type(self).__name__} {self.layout}: {self.num_cells:,} positions x ({self.fixed_bits}+"
                f"{self.variable_bits}) bits, k={self.num_hashes}, D={self.increments}, keys={self.num_keys:,}, "
                f"fill={self.fill_ratio:.1%}{capacity}>")

    __hash__ = None

    def _over_capacity(self) -> None:
        warn_over_capacity(self, self._capacity, self.num_keys, self.estimated_fpr())

    # -- what a key sees -----------------------------------------------------------------------------------------------
    def counters_many(self, keys):
        """For each key and probe: a structured array (*keys shape, k) with fields position, increment, c, a, y
        (y = -1 where the multiplicity is not decoded). See the class docstring."""
        import numpy as np
        positions, increments, c, a = self._probe_many(keys)
        result = np.zeros(c.shape, dtype=[("position", np.uint64), ("increment", np.uint32), ("c", np.uint32),
                                          ("a", np.uint32), ("y", np.int32)])
        result["position"], result["increment"], result["c"], result["a"] = positions, increments, c, a
        result["y"] = self._decode(increments, c, a)
        return result

    def probes(self, key) -> tuple[Probe, ...]:
        """The key's k probes in order: ``Probe(position, increment, c, a, y)`` (y None where not decoded)."""
        row = self.counters_many([key])[0]
        return tuple(Probe(int(p["position"]), int(p["increment"]), int(p["c"]), int(p["a"]),
                           None if p["y"] < 0 else int(p["y"])) for p in row)

    def counters(self, key) -> tuple[int, ...]:
        """The fixed-increment counters c of the key's k positions, in probe order (ints, as in every structure);
        ``probes(key)`` gives each position's full state."""
        return tuple(probe.c for probe in self.probes(key))

    def count(self, key) -> int:
        """An upper bound on how often the key was added (unless c is saturated): the smallest over its positions
        of y_j where decoded, else c_j."""
        return min(p.c if p.y is None else p.y for p in self.probes(key))

    def _decode(self, increments, c, a):
        """y for arrays of (v, c, a): the multiplicity of v in the multiset of c increments summing to a."""
        import numpy as np
        y = np.full(c.shape, -1, dtype=np.int32)
        y[c == 0] = 0
        index_of = {v: i for i, v in enumerate(self._increments_tuple)}
        column = np.vectorize(index_of.get, otypes=[np.int64])(increments) if increments.size else increments
        for count, (sums, multiplicities) in self._decoders.items():
            mask = c == count
            if not mask.any():
                continue
            found = np.searchsorted(sums, a[mask])
            valid = found < len(sums)
            valid[valid] = sums[found[valid]] == a[mask][valid]
            values = np.full(found.shape, -1, dtype=np.int32)
            values[valid] = multiplicities[found[valid], column[mask][valid]]
            y[mask] = values
        return y

    # -- storage: the internal interface of bloomwise._storage (CellStorage) ------------------------------------------
    def storage_geometry(self) -> StorageGeometry:
        """Where keys go and the cell format: layout, m, k, seed, hash scheme, increments and the two widths."""
        return StorageGeometry("variable_increment", self.layout, self.num_cells, self.num_hashes, self.seed,
                               self.hash_scheme, (("increments", self.increments), ("fixed_bits", self.fixed_bits),
                                                  ("variable_bits", self.variable_bits)))

    @classmethod
    def from_payload(cls, geometry: StorageGeometry, payload=None, *, num_keys: int = 0,
                     key=None) -> "VariableIncrementCountingBloomFilter":
        """A filter of ``geometry`` holding a copy of the packed cells ``payload`` (None: all zero) and ``num_keys``
        keys, with no target (``bloomwise._storage``); ValueError for cells no sum of increments can reach."""
        geometry.check_structure("variable_increment")
        options = dict(geometry.cell_options)
        increments = check_increments(options.get("increments", DEFAULT_INCREMENTS))
        fixed_bits, variable_bits = options.get("fixed_bits", 4), options.get("variable_bits", 4)
        _check_split(fixed_bits, variable_bits, increments)
        self = cls.__new__(cls)
        self._setup(geometry.num_cells, geometry.num_hashes, geometry.layout, increments, fixed_bits, variable_bits,
                    geometry.seed, num_keys, key, _format.hash_scheme_id(geometry.hash_scheme))
        self._capacity = self._fpr = None
        if payload is not None:
            self.replace_payload(payload)
        return self

    def replace_payload(self, payload) -> None:
        """Overwrite every cell from packed cells of exactly ``nbytes`` bytes; ValueError for an unreachable cell."""
        self._copy_cells_from(payload)
        self._check_cells()

    @property
    def keys_counted(self) -> int:
        """The count the capacity warning compares with ``capacity``: ``num_keys``."""
        return self.num_keys

    # -- algebra and copies --------------------------------------------------------------------------------------------
    def _parameters(self) -> dict:
        return {"type": self._FAMILY.__name__, "num_cells": self.num_cells, "num_hashes": self.num_hashes,
                "layout": self.layout, "seed": self.seed, "hash_scheme": self.hash_scheme,
                "increments": self.increments,
                "fixed_bits": self.fixed_bits, "variable_bits": self.variable_bits}

    def copy(self) -> "VariableIncrementCountingBloomFilter":
        """An independent copy."""
        clone = type(self).__new__(type(self))
        clone._setup(self.num_cells, self.num_hashes, self.layout, self.increments, self.fixed_bits,
                     self.variable_bits, self.seed, self.num_keys, self._key_function, self._hash_scheme_id)
        clone._copy_cells_from(self._payload())
        clone._capacity, clone._fpr = self._capacity, self._fpr
        clone._set_capacity_limit(self._capacity)
        return clone

    def __ior__(self, other):
        self._check_compatible(other, "union")
        self._union_from(other)
        return self

    def union(self, *others) -> "VariableIncrementCountingBloomFilter":
        """A new filter holding the keys of this one and of all ``others`` (the multiset union; every filter must
        have the same parameters, increments included: ValueError names the ones that differ).

        Per position, c = c1 + c2 (sticky at its maximum) and a = a1 + a2 mod 2**variable_bits: exactly the cells
        that inserting the other filter's keys one by one would leave, so the union equals the filter built from
        all the keys. There is no intersection: the minimum of two counts c has no matching sum of increments a
        (which keys' increments it would keep is unknown), so no cell encodes it.
        """
        result = self.copy()
        for other in others:
            result |= other
        return result

    def __eq__(self, other):
        if not isinstance(other, VariableIncrementCountingBloomFilter):
            return NotImplemented
        return self.is_compatible(other) and self._same_cells(other)

    # -- persistence ---------------------------------------------------------------------------------------------------
    _STRUCTURE = _format.Structure.VARIABLE_INCREMENT
    _LOADS_IN_PLACE = True

    def _header(self) -> _format.Header:
        return cell_array_header(self, {
            "fixed_bits": self.fixed_bits, "variable_bits": self.variable_bits, "increments": list(self.increments)})

    @classmethod
    def open(cls, path, mode="r", *, key=None, verify=True) -> "VariableIncrementCountingBloomFilter":
        """Memory-map a saved filter: ``mode="r"`` read-only (default), ``"r+"`` writable and shared (as
        ``BloomFilter.open``; call ``close()`` or use ``with`` after writing)."""
        return open_structure(cls, _MappedVariableIncrementCountingBloomFilter, path, mode, key=key, verify=verify)

    @classmethod
    def _from_parts(cls, header: _format.Header, payload, *, key,
                    copy=True) -> "VariableIncrementCountingBloomFilter":
        scheme = check_cell_array_header(header, key, "this filter")
        meta = header.meta
        try:
            fixed_bits, variable_bits = meta["fixed_bits"], meta["variable_bits"]
            increments = check_increments(meta["increments"])
            if not isinstance(fixed_bits, int) or not isinstance(variable_bits, int):
                raise TypeError("counter widths must be ints")
            _check_split(fixed_bits, variable_bits, increments)
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"invalid variable-increment metadata {dict(meta)!r}: {exc}") from None
        capacity, fpr = meta_capacity(header), meta_fpr(header)
        check_cell_payload(header, payload, fixed_bits + variable_bits, "positions", copy=copy)
        self = cls.__new__(cls)
        try:
            self._setup(header.num_cells, header.num_hashes, LAYOUT_NAMES[int(header.layout)], increments,
                        fixed_bits, variable_bits, header.seed, header.num_keys, key, scheme,
                        None if copy else payload)
            if copy:
                self._copy_cells_from(payload)
            self._check_cells()
        except (ValueError, TypeError) as exc:
            self._release_storage()
            raise FormatError(f"the file describes an impossible filter: {exc}") from None
        self._capacity, self._fpr = capacity, fpr
        self._set_capacity_limit(capacity)
        return self



VariableIncrementCountingBloomFilter._FAMILY = VariableIncrementCountingBloomFilter


class _MappedVariableIncrementCountingBloomFilter(Mapped, VariableIncrementCountingBloomFilter):
    """A VI-CBF whose cells live in a memory-mapped file (``VariableIncrementCountingBloomFilter.open``)."""

    __slots__ = ("_mapped",)


def _check_split(fixed_bits, variable_bits, increments: tuple[int, ...]) -> None:
    for name, value in (("fixed_bits", fixed_bits), ("variable_bits", variable_bits)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise ValueError(f"{name} must be an int >= 2, got {value!r}")
    if fixed_bits + variable_bits not in (8, 16, 32):
        raise ValueError(f"fixed_bits + variable_bits must be 8, 16 or 32, got {fixed_bits} + {variable_bits}")
    if increments[-1] >= 1 << variable_bits:
        raise ValueError(f"increments must be below {1 << variable_bits} (2^variable_bits) for variable_bits = "
                         f"{variable_bits}, got {list(increments)}")



@lru_cache(maxsize=32)
def _feasible_table(increments: tuple[int, ...], fixed_bits: int, variable_bits: int) -> tuple[bytes, int]:
    """Rows j = 0..rows-1 of M = 2^variable_bits bytes: 1 where r is (mod M) a sum of exactly j increments (dynamic
    programming). The kernels need j = c - 1 for unsaturated c, so rows <= 2^fixed_bits - 2; beyond the table
    they test whether a number congruent to r lies in [j min(D), j max(D)]."""
    import numpy as np
    modulus = 1 << variable_bits
    rows = table_rows(fixed_bits, variable_bits)
    table = np.zeros((rows, modulus), dtype=bool)
    if rows:
        table[0, 0] = True
    for j in range(1, rows):
        for d in increments:
            table[j] |= np.roll(table[j - 1], d)
    return table.astype(np.uint8).tobytes(), rows


@lru_cache(maxsize=32)
def _decoders(increments: tuple[int, ...], order: int, modulus: int) -> dict:
    """For c = 1..order: (sorted sums mod M, their multiplicity rows): decoding a counter a of c increments."""
    import numpy as np
    decoders = {}
    for count in range(1, order + 1):
        sums, multiplicities = multisets(increments, count)
        sums = sums % modulus
        order_by_sum = np.argsort(sums, kind="stable")
        decoders[count] = (sums[order_by_sum], multiplicities[order_by_sum])
    return decoders
