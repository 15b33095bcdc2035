"""ScalableBloomFilter: a Bloom filter that grows with its keys (Almeida, Baquero, Preguica and Hutchison,
*Scalable Bloom Filters*, Information Processing Letters 101(6), 2007).

A chain of BloomFilters ("stages"). Keys go into the newest stage; when it holds its capacity, a new stage is
added, ``growth`` times larger and with a target FPR ``ratio`` times smaller. Stage i (from 0) has

    capacity_i = ceil(capacity * growth^i),   fpr_i = fpr * (1 - ratio) * ratio^i,

so the compound false-positive rate, at most ``sum_i fpr_i = fpr (1 - ratio^s) < fpr`` for s stages, stays below
the requested ``fpr`` however many keys arrive (the union bound: it needs no independence). Each stage is sized by
its layout's own formula (``theory.optimal_size``) and hashes with its own seed, so the stages err independently
and the measured rate is ``1 - prod_i (1 - FPR_i)``.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from bloomwise import _format
from bloomwise._base import (
    LAYOUTS, DeprecatedAlias, check_capacity, check_target_fpr, check_threads, renamed_keyword,
)
from bloomwise.bloom import BloomFilter
from bloomwise._compatibility import Compatible
from bloomwise._persistence import Persistent, check_keyed, header_flags
from bloomwise.errors import FormatError

__all__ = ["ScalableBloomFilter"]

#: Stage i hashes with seed (seed + i * STAGE_SEED_STEP) mod 2**64 (the 64-bit golden ratio: stages never share one).
STAGE_SEED_STEP = 0x9E3779B97F4A7C15
_STAGE_ALIGNMENT = 64
_STAGE_FIELDS = ("capacities", "fprs", "num_bits", "num_hashes", "seeds", "keys")


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _STAGE_ALIGNMENT) * _STAGE_ALIGNMENT


def _real(name: str, value, low: float, high: float, *, low_open: bool, high_open: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    value = float(value)
    ok = (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
    if not ok or math.isnan(value):
        raise ValueError(f"{name} must be in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}, "
                         f"got {value!r}")
    return value


class ScalableBloomFilter(Persistent, Compatible):
    """A set of keys of unknown size: "certainly absent" or "might be present", at a false-positive rate that
    stays at or below ``fpr`` however many keys are added.

    Keys are those of BloomFilter (str as UTF-8, bytes, int of any size, numpy batches; ``key=`` for other
    objects). ``add`` first asks every stage, so a key already (or apparently) present is not added again and
    does not use up capacity. A query asks each stage: O(s k) for s stages, and s grows like log_growth(n).

    >>> f = ScalableBloomFilter(capacity=100, fpr=0.01)
    >>> f.update(range(1000))
    >>> f.num_stages, 999 in f, -1 in f
    (4, True, False)
    >>> f.fpr_bound() < 0.01
    True
    """

    __slots__ = ("_initial_capacity", "_fpr", "_growth", "_ratio", "_layout", "_seed", "_key", "_scheme", "_stages",
                 "_stage_keys", "_insertions", "__weakref__")

    def __init__(self, capacity=None, fpr=0.01, *, growth=2, ratio=0.5, layout="blocked", seed=0,
                 key: Optional[Callable[[object], bytes]] = None, hash_scheme="xxh3", initial_capacity=None):
        """
        :param capacity: keys the first stage holds (an int >= 1; default 1024; ``initial_capacity=`` is its
            deprecated name). Later stages hold more: the filter has no upper limit.
        :param fpr: the compound false-positive rate never to exceed, in (0, 1).
        :param growth: each stage holds ``growth`` times the keys of the one before (a number >= 1; default 2).
        :param ratio: each stage's target FPR is ``ratio`` times the one before (in (0, 1); default 0.5); the
            first stage's is ``fpr * (1 - ratio)``.
        :param layout: the stages' layout: ``"blocked"`` (default), ``"classic"`` or ``"partitioned"``.
        :param seed: hash seed of the first stage, an int in [0, 2**64) (stage i: ``seed + i * STAGE_SEED_STEP``).
        :param key: optional function turning any key into bytes.
        :param hash_scheme: every stage's: ``"xxh3"`` (default) or ``"xxh64"`` (bloomwise 0.1's hashing).
        """
        capacity = renamed_keyword("capacity", capacity, "initial_capacity", initial_capacity, "ScalableBloomFilter")
        self._configure(1024 if capacity is None else capacity, fpr, growth, ratio, layout, seed, key,
                        _format.hash_scheme_id(hash_scheme))
        self._add_stage()

    def _configure(self, initial_capacity, fpr, growth, ratio, layout, seed, key, scheme) -> None:
        """Check and set the parameters; no stage yet."""
        self._initial_capacity = check_capacity(initial_capacity, "capacity")
        self._fpr = check_target_fpr(fpr)
        self._growth = _real("growth", growth, 1.0, 1e6, low_open=False, high_open=False)
        self._ratio = _real("ratio", ratio, 0.0, 1.0, low_open=True, high_open=True)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 64:
            raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
        if key is not None and not callable(key):
            raise TypeError(f"key must be a function turning a key into bytes, got {type(key).__name__}")
        self._layout, self._seed, self._key, self._scheme = layout, seed, key, scheme
        self._stages: list[BloomFilter] = []
        self._stage_keys: list[int] = []
        self._insertions = 0

    # -- stages --------------------------------------------------------------------------------------------------------
    def stage_capacity(self, index: int) -> int:
        """capacity_i = ceil(capacity * growth^i)."""
        return math.ceil(self._initial_capacity * self._growth ** index)

    def stage_fpr(self, index: int) -> float:
        """fpr_i = fpr * (1 - ratio) * ratio^i: summed over all i, exactly ``fpr``."""
        return self._fpr * (1.0 - self._ratio) * self._ratio ** index

    def stage_seed(self, index: int) -> int:
        return (self._seed + index * STAGE_SEED_STEP) % 2 ** 64

    def _add_stage(self) -> None:
        index = len(self._stages)
        self._stages.append(BloomFilter(self.stage_capacity(index), self.stage_fpr(index), layout=self._layout,
                                        seed=self.stage_seed(index), key=self._key,
                                        hash_scheme=_format.hash_scheme_name(self._scheme)))
        self._stage_keys.append(0)

    def _room(self) -> int:
        """Keys the newest stage still takes; a new stage when it is full."""
        room = self._stages[-1].capacity - self._stage_keys[-1]
        if room <= 0:
            self._add_stage()
            room = self._stages[-1].capacity
        return room

    @property
    def stages(self) -> tuple:
        """The stages, oldest first (BloomFilters: read them, do not add to them)."""
        return tuple(self._stages)

    @property
    def num_stages(self) -> int:
        return len(self._stages)

    # -- keys ----------------------------------------------------------------------------------------------------------
    def add(self, key) -> bool:
        """Add a key. Returns True when it was certainly not present before (then it went into the newest stage)."""
        self._insertions += 1
        if key in self:
            return False
        self._room()
        self._stages[-1].add(key)
        self._stage_keys[-1] += 1
        return True

    def __contains__(self, key) -> bool:
        """`key in f`: False means certainly absent; True means "might be present". O(s k)."""
        return any(key in stage for stage in reversed(self._stages))

    def update(self, keys, *, threads=None) -> None:
        """Add every key of an iterable or numpy array; keys that might already be present are skipped.
        ``threads=``: each stage's batch query and insert use that many threads."""
        keys = self._materialise(keys)
        check_threads(threads)
        self._insertions += len(keys) if not hasattr(keys, "size") else int(keys.size)
        if len(keys) == 0:
            return
        present = self.contains_many(keys, threads=threads).reshape(-1)
        if hasattr(keys, "dtype"):
            new = keys.reshape(-1)[~present]
        else:
            new = [k for k, seen in zip(keys, present.tolist()) if not seen]
        start = 0
        while start < len(new):
            room = self._room()
            chunk = new[start:start + room]
            self._stages[-1].update(chunk, threads=threads)
            self._stage_keys[-1] += len(chunk)  # duplicates inside a batch count twice: conservative
            start += room

    def contains_many(self, keys, *, threads=None):
        """A numpy bool array: whether each key might be present (the shape of a numpy input)."""
        keys = self._materialise(keys)
        result = self._stages[-1].contains_many(keys, threads=threads)
        for stage in self._stages[-2::-1]:
            result |= stage.contains_many(keys, threads=threads)
        return result

    @staticmethod
    def _materialise(keys):
        if isinstance(keys, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"expected an iterable of keys, got a single {type(keys).__name__}: use add() or `in` "
                            "for one key, or wrap it in a list")
        if isinstance(keys, (list, tuple)) or hasattr(keys, "__array_interface__"):
            return keys
        try:
            return list(keys)
        except TypeError:
            raise TypeError(f"expected an iterable of keys (list, tuple, numpy array, iterator), "
                            f"got {type(keys).__name__}") from None

    def clear(self) -> None:
        """Remove every key: back to one empty stage."""
        self._stages, self._stage_keys, self._insertions = [], [], 0
        self._add_stage()

    # -- description and statistics ------------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """The keys the first stage holds (later stages hold more; the filter has no upper limit)."""
        return self._initial_capacity

    initial_capacity = DeprecatedAlias("capacity")

    @property
    def fpr(self) -> float:
        """The target: the compound false-positive rate the filter stays below."""
        return self._fpr

    @property
    def num_keys(self) -> int:
        """Keys added: one per ``add()`` and one per key of ``update()``, repeats included (saved with the filter;
        a loaded filter counts from the keys its stages took). ``stage_keys`` counts what each stage took."""
        return self._insertions

    @property
    def stage_keys(self) -> tuple[int, ...]:
        """Keys each stage took (those not already, or apparently, present), oldest first."""
        return tuple(self._stage_keys)

    @property
    def num_hashes(self) -> int:
        """The first stage's k (each stage has its own: ``stages[i].num_hashes``)."""
        return self._stages[0].num_hashes

    @property
    def growth(self) -> float:
        return self._growth

    @property
    def ratio(self) -> float:
        return self._ratio

    @property
    def layout(self) -> str:
        return self._layout

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def _hash_scheme_id(self) -> int:
        return self._scheme

    @property
    def num_cells(self) -> int:
        """Bits over all stages."""
        return sum(stage.num_cells for stage in self._stages)

    num_bits = DeprecatedAlias("num_cells")

    @property
    def nbytes(self) -> int:
        """Bytes of the stages' bit arrays."""
        return sum(stage.nbytes for stage in self._stages)

    @property
    def fill_ratio(self) -> float:
        """The fraction of all bits set."""
        return sum(stage.fill_ratio * stage.num_cells for stage in self._stages) / self.num_cells

    def approx_count(self) -> float:
        """Distinct keys added, estimated from the fill of each stage."""
        return sum(stage.approx_count() for stage in self._stages)

    def estimated_fpr(self) -> float:
        """The rate now, from each stage's fill: ``1 - prod_i (1 - FPR_i)``."""
        miss = 1.0
        for stage in self._stages:
            miss *= 1.0 - stage.estimated_fpr()
        return 1.0 - miss

    def fpr_bound(self) -> float:
        """``sum_i fpr_i`` over the stages so far: the design bound, always below ``fpr``."""
        return sum(self.stage_fpr(i) for i in range(len(self._stages)))

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self._layout}: {len(self._stages)} stage(s), {self.num_cells:,} bits, "
                f"keys={sum(self._stage_keys):,}, fpr<={self._fpr:g}, growth={self._growth:g}, ratio={self._ratio:g}>")

    __hash__ = None

    # -- comparison and copies -----------------------------------------------------------------------------------------
    def _parameters(self) -> dict:
        return {"capacity": self._initial_capacity, "fpr": self._fpr, "growth": self._growth,
                "ratio": self._ratio, "layout": self._layout, "seed": self._seed, "hash_scheme": self.hash_scheme}

    def is_compatible(self, other) -> bool:
        """True when ``other`` is a ScalableBloomFilter with the same parameters (so the same stages)."""
        return isinstance(other, ScalableBloomFilter) and self._parameters() == other._parameters()

    def __eq__(self, other):
        if not isinstance(other, ScalableBloomFilter):
            return NotImplemented
        return (self.is_compatible(other) and self._stage_keys == other._stage_keys
                and all(a == b for a, b in zip(self._stages, other._stages)))

    def copy(self) -> "ScalableBloomFilter":
        clone = type(self).__new__(type(self))
        for name in ("_initial_capacity", "_fpr", "_growth", "_ratio", "_layout", "_seed", "_key", "_scheme"):
            setattr(clone, name, getattr(self, name))
        clone._stages = [stage.copy() for stage in self._stages]
        clone._stage_keys = list(self._stage_keys)
        clone._insertions = self._insertions
        return clone

    def __ior__(self, other):
        self._check_compatible(other, "union")
        for index in range(len(self._stages), len(other._stages)):
            self._add_stage()
        for index, stage in enumerate(other._stages):
            self._stages[index] |= stage
            self._stage_keys[index] += other._stage_keys[index]
        self._insertions += other._insertions
        return self

    def __or__(self, other):
        if not isinstance(other, ScalableBloomFilter):
            return NotImplemented
        result = self.copy()
        result |= other
        return result

    def union(self, *others) -> "ScalableBloomFilter":
        """A new filter holding the keys of this one and of all ``others``: stage i is the bitwise OR of the
        filters' stages i (the same geometry, since every filter must have the same parameters: ValueError names
        the ones that differ), and holds the sum of their keys. A stage may so hold more keys than its capacity:
        then its FPR, and the compound one (``estimated_fpr()``), can exceed ``fpr``; new keys go to a new stage.
        """
        result = self.copy()
        for other in others:
            result |= other
        return result

    def _no_intersection(self, other):
        raise TypeError("a ScalableBloomFilter has no intersection: a key common to two filters may sit in different "
                        "stages of each, and stages of different sizes cannot be ANDed (intersect their "
                        "BloomFilter stages, or build a BloomFilter of the keys)")

    __iand__ = __and__ = __rand__ = _no_intersection

    def intersection(self, *others):
        """Not defined: raises TypeError (see ``__and__``)."""
        self._no_intersection(others[0] if others else None)

    # -- persistence ---------------------------------------------------------------------------------------------------
    _STRUCTURE = _format.Structure.SCALABLE

    @property
    def _key_function(self):
        return self._key

    def _header(self) -> _format.Header:
        meta = {
            "initial_capacity": self._initial_capacity, "fpr": self._fpr, "growth": self._growth,
            "ratio": self._ratio,
            "capacities": [stage.capacity for stage in self._stages],
            "fprs": [self.stage_fpr(i) for i in range(len(self._stages))],
            "num_bits": [stage.num_cells for stage in self._stages],
            "num_hashes": [stage.num_hashes for stage in self._stages],
            "seeds": [stage.seed for stage in self._stages],
            "keys": list(self._stage_keys),
            "num_keys": self._insertions,
        }
        flags = header_flags(self._key)
        return _format.Header(
            structure=self._STRUCTURE, layout=_format.Layout(LAYOUTS[self._layout]),
            hash_scheme=_format.HashScheme(self._scheme), seed=self._seed, num_bits=self.num_cells,
            num_hashes=self._stages[0].num_hashes, keys_added=sum(self._stage_keys),
            payload_length=sum(_aligned(stage.nbytes) for stage in self._stages), meta=meta, flags=flags)

    def _payload(self) -> bytes:
        parts = []
        for stage in self._stages:
            bits = stage._payload()
            parts.append(bytes(bits))
            parts.append(bytes(_aligned(stage.nbytes) - stage.nbytes))
        return b"".join(parts)

    @classmethod
    def _from_parts(cls, header: _format.Header, payload, *, key) -> "ScalableBloomFilter":
        check_keyed(header, key)
        scheme = _format.keyed_hash_scheme(header, "a scalable filter")
        if header.layout == _format.Layout.NONE:
            raise FormatError("a scalable filter needs a layout, the file says NONE")
        meta = header.meta
        layout = {v: k for k, v in LAYOUTS.items()}[int(header.layout)]
        self = cls.__new__(cls)
        try:
            self._configure(meta["initial_capacity"], meta["fpr"], meta["growth"], meta["ratio"], layout, header.seed,
                            key, scheme)
            columns = [meta[name] for name in _STAGE_FIELDS]
            if not all(isinstance(column, list) for column in columns) or len({len(c) for c in columns}) != 1:
                raise ValueError("the stage lists must be lists of one length")
            if not 1 <= len(columns[0]) <= 10_000:
                raise ValueError(f"a scalable filter has at least one stage, the file lists {len(columns[0])}")
            capacities, _, num_bits, num_hashes, seeds, keys = columns
            for name, column, low in (("capacities", capacities, 1), ("num_bits", num_bits, 1),
                                      ("num_hashes", num_hashes, 1), ("seeds", seeds, 0), ("keys", keys, 0)):
                if any(isinstance(v, bool) or not isinstance(v, int) or not low <= v < 2 ** 64 for v in column):
                    raise ValueError(f"stage {name} must be ints >= {low}")
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"invalid scalable-filter metadata: {exc}") from None
        # Sizes first, from the checked payload length: nothing is allocated from an unchecked number.
        sizes = [_aligned((bits + 63) // 64 * 8) for bits in num_bits]
        if sum(sizes) != header.payload_length:
            raise FormatError(f"the stages need {sum(sizes)} bytes, the payload holds {header.payload_length}")
        if sum(num_bits) != header.num_bits or sum(keys) != header.keys_added:
            raise FormatError("the header's bit or key totals do not match the stages")
        offset = 0
        for capacity, bits, hashes, seed, count, size in zip(capacities, num_bits, num_hashes, seeds, keys, sizes):
            try:
                stage = BloomFilter.from_size(bits, hashes, layout=layout, seed=seed, key=key,
                                              hash_scheme=_format.hash_scheme_name(scheme))
            except (TypeError, ValueError) as exc:
                raise FormatError(f"the file describes an impossible stage: {exc}") from None
            chunk = payload[offset:offset + size]
            if any(chunk[stage.nbytes:]):
                raise FormatError("the padding after a stage is not zero")
            stage._copy_bits_from(chunk[:stage.nbytes])
            stage._capacity = capacity
            stage._set_capacity_limit(capacity)
            self._stages.append(stage)
            self._stage_keys.append(count)
            offset += size
        insertions = meta.get("num_keys", header.keys_added)
        if isinstance(insertions, bool) or not isinstance(insertions, int) or insertions < header.keys_added:
            raise FormatError(f"meta num_keys must be an int >= the keys of the stages, the file says {insertions!r}")
        self._insertions = insertions
        return self


ScalableBloomFilter._FAMILY = ScalableBloomFilter
