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
import weakref
from typing import Callable, Optional

from bloomwise import _format
from bloomwise._checks import check_interval
from bloomwise._base import (
    LAYOUT_NAMES, LAYOUTS, check_capacity, check_target_fpr, check_threads,
)
from bloomwise.bloom import BloomFilter
from bloomwise._native.scalable import ScalableCore
from bloomwise._compatibility import Compatible
from bloomwise._persistence import Persistent, check_keyed, header_flags
from bloomwise.errors import FormatError

__all__ = ["ScalableBloomFilter"]

#: Stage hashing "seeded" (files of bloomwise 0.2): stage i hashes with seed (seed + i * STAGE_SEED_STEP) mod 2**64
#: (the 64-bit golden ratio: stages never share one).
STAGE_SEED_STEP = 0x9E3779B97F4A7C15
#: ``stage_hashing=`` choices: "derived" (the default: one hash per key) and "seeded" (a hash per key and stage).
STAGE_HASHINGS = ("derived", "seeded")
_STAGE_ALIGNMENT = 64
_STAGE_FIELDS = ("capacities", "fprs", "num_bits", "num_hashes", "seeds", "keys")


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _STAGE_ALIGNMENT) * _STAGE_ALIGNMENT


class ScalableBloomFilter(Persistent, Compatible, ScalableCore):
    """A set of keys of unknown size: "certainly absent" or "might be present", at a false-positive rate that
    stays at or below ``fpr`` however many keys are added.

    Keys are those of BloomFilter (str as UTF-8, bytes, int of any size, numpy batches; ``key=`` for other
    objects). ``add`` first asks every stage, so a key already (or apparently) present is not added again and
    does not use up capacity. A key is hashed once; stage i's hash is derived from that hash (``stage_hashing``).
    A query asks the stages newest first: a present key stops at the stage that holds it, an absent one is tested
    in every stage (s of them, s growing like log_growth(n)), each test stopping at its first zero bit.

    >>> f = ScalableBloomFilter(capacity=100, fpr=0.01)
    >>> f.update(range(1000))
    >>> f.num_stages, 999 in f, -1 in f
    (4, True, False)
    >>> f.fpr_bound() < 0.01
    True
    """

    __slots__ = ("_initial_capacity", "_fpr", "_growth", "_ratio", "_layout", "_seed", "_key", "_stages",
                 "__weakref__")

    def __init__(self, capacity=None, fpr=0.01, *, growth=2, ratio=0.5, layout="blocked", seed=0,
                 key: Optional[Callable[[object], bytes]] = None, hash_scheme="xxh3",
                 stage_hashing="derived"):
        """
        :param capacity: keys the first stage holds (an int >= 1; default 1024). Later stages hold more: the filter
            has no upper limit.
        :param fpr: the compound false-positive rate never to exceed, in (0, 1).
        :param growth: each stage holds ``growth`` times the keys of the one before (a number >= 1; default 2).
        :param ratio: each stage's target FPR is ``ratio`` times the one before (in (0, 1); default 0.5); the
            first stage's is ``fpr * (1 - ratio)``.
        :param layout: the stages' layout: ``"blocked"`` (default), ``"classic"`` or ``"partitioned"``.
        :param seed: the key hash's seed, an int in [0, 2**64).
        :param key: optional function turning any key into bytes.
        :param hash_scheme: the key hash: ``"xxh3"`` (default) or ``"xxh64"`` (bloomwise 0.1's hashing).
        :param stage_hashing: ``"derived"`` (default): a key is hashed once and stage i's hash is derived from it
            (``bloomwise._native.scalable``); ``"seeded"``: stage i hashes the key again with seed
            ``seed + i * STAGE_SEED_STEP`` (the filters bloomwise 0.2 saved; slower, one hash per stage).
        """
        if stage_hashing not in STAGE_HASHINGS:
            raise ValueError(f"stage_hashing must be one of {', '.join(map(repr, STAGE_HASHINGS))}, "
                             f"got {stage_hashing!r}")
        self._configure(1024 if capacity is None else capacity, fpr, growth, ratio, layout, seed, key,
                        _format.hash_scheme_id(hash_scheme), stage_hashing == "derived")
        self._add_stage()

    def _configure(self, initial_capacity, fpr, growth, ratio, layout, seed, key, scheme, derived) -> None:
        """Check and set the parameters; no stage yet."""
        self._initial_capacity = check_capacity(initial_capacity)
        self._fpr = check_target_fpr(fpr)
        self._growth = check_interval("growth", growth, 1.0, 1e6, low_open=False, high_open=False)
        self._ratio = check_interval("ratio", ratio, 0.0, 1.0, low_open=True, high_open=True)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 64:
            raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
        if key is not None and not callable(key):
            raise TypeError(f"key must be a function turning a key into bytes, got {type(key).__name__}")
        self._layout, self._seed, self._key = layout, seed, key
        self._init_scalable(seed, key, scheme, derived)
        self._stages: list[BloomFilter] = []

    # -- stages --------------------------------------------------------------------------------------------------------
    @property
    def stage_hashing(self) -> str:
        """How the stages hash a key: ``"derived"`` (one hash of the key, stage i's derived from it; file hash
        schemes XXH3_STAGES_V1 / XXH64_STAGES_V1) or ``"seeded"`` (each stage hashes the key with its own seed;
        bloomwise 0.2's files, schemes XXH3_V1 / XXH64_V1). A loaded filter keeps its file's."""
        return "derived" if self._derived_stages else "seeded"

    def stage_capacity(self, index: int) -> int:
        """capacity_i = ceil(capacity * growth^i)."""
        return math.ceil(self._initial_capacity * self._growth ** index)

    def stage_fpr(self, index: int) -> float:
        """fpr_i = fpr * (1 - ratio) * ratio^i: summed over all i, exactly ``fpr``."""
        return self._fpr * (1.0 - self._ratio) * self._ratio ** index

    def stage_seed(self, index: int) -> int:
        """The seed stage ``index`` hashes keys with: the filter's (derived stage hashing: every stage starts from
        the same key hash), or ``(seed + index * STAGE_SEED_STEP) mod 2**64`` (seeded)."""
        if self._derived_stages:
            return self._seed
        return (self._seed + index * STAGE_SEED_STEP) % 2 ** 64

    def _add_stage(self) -> None:
        """Append an empty stage (sized by its layout's formula for capacity_i keys at fpr_i)."""
        index = len(self._stages)
        cls = _DerivedStage if self._derived_stages else BloomFilter
        stage = cls(self.stage_capacity(index), self.stage_fpr(index), layout=self._layout,
                    seed=self.stage_seed(index), key=self._key, hash_scheme=self.hash_scheme)
        self._append_stage(stage, stage.capacity, 0)

    def _append_stage(self, stage: BloomFilter, capacity: int, keys: int) -> None:
        if isinstance(stage, _DerivedStage):
            stage._parent, stage._index = weakref.ref(self), len(self._stages)
        self._attach_stage(stage, capacity, keys)
        self._stages.append(stage)

    @property
    def stages(self) -> tuple:
        """The stages, oldest first, as BloomFilters: read them, do not add to them. With derived stage hashing
        a stage answers ``in`` and ``contains_many`` through this filter (its bits are addressed by the derived
        hash), and cannot be saved or pickled on its own."""
        return tuple(self._stages)

    @property
    def num_stages(self) -> int:
        return len(self._stages)

    @property
    def _stage_keys(self) -> list:
        return list(self.stage_keys)

    # -- keys: seeded stage hashing (the compiled core handles derived stage hashing) ----------------------------------
    def _seeded_room(self) -> int:
        """Keys the newest stage still takes; a new stage when it is full."""
        room = self._stages[-1].capacity - self.stage_keys[-1]
        if room <= 0:
            self._add_stage()
            room = self._stages[-1].capacity
        return room

    def _seeded_add(self, key) -> bool:
        present = key in self  # first: a key that is refused (TypeError) is not counted
        self._set_insertions(self.num_keys + 1)
        if present:
            return False
        self._seeded_room()
        self._stages[-1].add(key)
        self._count_stage_keys(len(self._stages) - 1, 1)
        return True

    def _seeded_contains(self, key) -> bool:
        return any(key in stage for stage in reversed(self._stages))

    def _seeded_update(self, keys, *, threads=None) -> None:
        keys = self._materialise(keys)
        check_threads(threads)
        if len(keys) == 0:
            return
        present = self.contains_many(keys, threads=threads).reshape(-1)  # first: refused keys change nothing
        self._set_insertions(self.num_keys + (len(keys) if not hasattr(keys, "size") else int(keys.size)))
        if hasattr(keys, "dtype"):
            new = keys.reshape(-1)[~present]
        else:
            new = [k for k, seen in zip(keys, present.tolist()) if not seen]
        start = 0
        while start < len(new):
            room = self._seeded_room()
            chunk = new[start:start + room]
            self._stages[-1].update(chunk, threads=threads)
            self._count_stage_keys(len(self._stages) - 1, len(chunk))  # repeats in a batch count twice
            start += room

    def _seeded_contains_many(self, keys, *, threads=None):
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
        self._detach_stages()
        self._stages = []
        self._set_insertions(0)
        self._add_stage()

    # -- description and statistics ------------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """The keys the first stage holds (later stages hold more; the filter has no upper limit)."""
        return self._initial_capacity

    @property
    def fpr(self) -> float:
        """The target: the compound false-positive rate the filter stays below."""
        return self._fpr

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
    def num_cells(self) -> int:
        """Bits over all stages."""
        return sum(stage.num_cells for stage in self._stages)

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
                "ratio": self._ratio, "layout": self._layout, "seed": self._seed, "hash_scheme": self.hash_scheme,
                "stage_hashing": self.stage_hashing}

    def is_compatible(self, other) -> bool:
        """True when ``other`` is a ScalableBloomFilter with the same parameters (so the same stages)."""
        return isinstance(other, ScalableBloomFilter) and self._parameters() == other._parameters()

    def __eq__(self, other):
        if not isinstance(other, ScalableBloomFilter):
            return NotImplemented
        return (self.is_compatible(other) and self.stage_keys == other.stage_keys
                and all(a == b for a, b in zip(self._stages, other._stages)))

    def _empty_like(self) -> "ScalableBloomFilter":
        """A filter of the same parameters and no stage."""
        clone = type(self).__new__(type(self))
        clone._configure(self._initial_capacity, self._fpr, self._growth, self._ratio, self._layout, self._seed,
                         self._key, self._hash_scheme_id, self._derived_stages)
        return clone

    def copy(self) -> "ScalableBloomFilter":
        clone = self._empty_like()
        for stage, keys in zip(self._stages, self.stage_keys):
            clone._append_stage(stage.copy(), stage.capacity, keys)
        clone._set_insertions(self.num_keys)
        return clone

    def __ior__(self, other):
        self._check_compatible(other, "union")
        for index in range(len(self._stages), len(other._stages)):
            self._add_stage()
        for index, (stage, keys) in enumerate(zip(other._stages, other.stage_keys)):
            self._stages[index] |= stage
            self._count_stage_keys(index, keys)
        self._set_insertions(self.num_keys + other.num_keys)
        return self

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
        keys = list(self.stage_keys)
        meta = {
            "initial_capacity": self._initial_capacity, "fpr": self._fpr, "growth": self._growth,
            "ratio": self._ratio,
            "capacities": [stage.capacity for stage in self._stages],
            "fprs": [self.stage_fpr(i) for i in range(len(self._stages))],
            "num_bits": [stage.num_cells for stage in self._stages],
            "num_hashes": [stage.num_hashes for stage in self._stages],
            "seeds": [stage.seed for stage in self._stages],
            "keys": keys,
            "num_keys": self.num_keys,
        }
        scheme = _format.HashScheme(self._hash_scheme_id)
        if self._derived_stages:
            scheme = _format.STAGE_HASH_SCHEMES[scheme]
        return _format.Header(
            structure=self._STRUCTURE, layout=_format.Layout(LAYOUTS[self._layout]),
            hash_scheme=scheme, seed=self._seed, num_cells=self.num_cells,
            num_hashes=self._stages[0].num_hashes, num_keys=sum(keys),
            payload_length=sum(_aligned(stage.nbytes) for stage in self._stages), meta=meta,
            flags=header_flags(self._key))

    def payload_view(self) -> bytes:
        parts = []
        for stage in self._stages:
            bits = stage.payload_view()
            parts.append(bytes(bits))
            parts.append(bytes(_aligned(stage.nbytes) - stage.nbytes))
        return b"".join(parts)

    @classmethod
    def _from_parts(cls, header: _format.Header, payload, *, key) -> "ScalableBloomFilter":
        check_keyed(header, key)
        scheme, derived = _format.scalable_hash_scheme(header)
        if header.layout == _format.Layout.NONE:
            raise FormatError("a scalable filter needs a layout, the file says NONE")
        meta = header.meta
        layout = LAYOUT_NAMES[int(header.layout)]
        self = cls.__new__(cls)
        try:
            self._configure(meta["initial_capacity"], meta["fpr"], meta["growth"], meta["ratio"], layout, header.seed,
                            key, scheme, derived)
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
            if derived and any(seed != header.seed for seed in seeds):
                raise ValueError(f"with derived stage hashing every stage's seed is the filter's ({header.seed})")
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"invalid scalable-filter metadata: {exc}") from None
        # Sizes first, from the checked payload length: nothing is allocated from an unchecked number.
        sizes = [_aligned((bits + 63) // 64 * 8) for bits in num_bits]
        if sum(sizes) != header.payload_length:
            raise FormatError(f"the stages need {sum(sizes)} bytes, the payload holds {header.payload_length}")
        if sum(num_bits) != header.num_cells or sum(keys) != header.num_keys:
            raise FormatError("the header's bit or key totals do not match the stages")
        stage_class = _DerivedStage if derived else BloomFilter
        offset = 0
        for capacity, bits, hashes, seed, count, size in zip(capacities, num_bits, num_hashes, seeds, keys, sizes):
            try:
                stage = stage_class.from_size(bits, hashes, layout=layout, seed=seed, key=key,
                                              hash_scheme=_format.hash_scheme_name(scheme))
            except (TypeError, ValueError) as exc:
                raise FormatError(f"the file describes an impossible stage: {exc}") from None
            chunk = payload[offset:offset + size]
            if any(chunk[stage.nbytes:]):
                raise FormatError("the padding after a stage is not zero")
            stage._copy_bits_from(chunk[:stage.nbytes])
            stage._capacity = capacity
            stage._set_capacity_limit(capacity)
            self._append_stage(stage, capacity, count)
            offset += size
        insertions = meta.get("num_keys", header.num_keys)
        if isinstance(insertions, bool) or not isinstance(insertions, int) or insertions < header.num_keys:
            raise FormatError(f"meta num_keys must be an int >= the keys of the stages, the file says {insertions!r}")
        self._set_insertions(insertions)
        return self


ScalableBloomFilter._FAMILY = ScalableBloomFilter


class _DerivedStage(BloomFilter):
    """A stage of a ScalableBloomFilter with derived stage hashing: a BloomFilter whose bits are addressed by the
    stage hash (``bloomwise._native.scalable``), not by its own hash of the key. It answers keys through its
    filter, refuses to take keys itself, and is saved and pickled only as part of its filter."""

    __slots__ = ("_parent", "_index")

    def _owner(self) -> ScalableBloomFilter:
        parent = getattr(self, "_parent", None)
        owner = parent() if parent is not None else None
        stages = owner._stages if owner is not None else ()
        if not (self._index < len(stages) and stages[self._index] is self):
            raise TypeError("this stage of a ScalableBloomFilter (derived stage hashing) was copied out of, or "
                            "outlived, its filter: its bits are addressed by the filter's stage hash, so only the "
                            "filter answers keys")
        return owner

    def __contains__(self, key) -> bool:
        return self._owner()._stage_contains(key, self._index)

    def contains_many(self, keys, *, threads=None):
        check_threads(threads)
        return self._owner()._stage_contains_many(keys, self._index)

    def _refuse(self, *args, **kwargs):
        raise TypeError("a stage of a ScalableBloomFilter takes keys only through the filter (f.add, f.update)")

    add = update = _refuse

    def _bit_indices(self, key):
        raise TypeError("a stage of a ScalableBloomFilter (derived stage hashing) has no key positions of its own: "
                        "they come from the filter's stage hash (ScalableBloomFilter._stage_hash)")

    def _parameters(self) -> dict:
        return {**super()._parameters(), "stage_hashing": "derived"}

    def _copy_extra_from(self, other) -> None:
        self._parent, self._index = None, other._index

    def _header(self):
        raise TypeError("a stage of a ScalableBloomFilter (derived stage hashing) is saved only with its filter: "
                        "its bits mean nothing to a BloomFilter")

    def __reduce__(self):
        self._header()
