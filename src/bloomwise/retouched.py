"""RetouchedBloomFilter: a Bloom filter whose chosen bits are cleared to remove known false positives.

Source: Donnet, Baynat, Friedman, *Retouched Bloom Filters: Allowing Networked Applications to Trade Off Selected
False Positives Against False Negatives* (CoNEXT 2006). After the keys are inserted, the caller passes the false
positives it knows of (keys that test positive but are not in the set). For each one, in a seeded random order, that
still tests positive, one of its k bits is cleared:

- ``scheme="ratio"`` (Ratio Selection, the paper's best heuristic): the bit with the smallest ratio
  ``A / B``, A the weight of the members still positive that hash there (the false negatives clearing it creates),
  B the weight of the known false positives still positive that hash there (those it removes);
- ``scheme="random"`` (Random Selection, the paper's lower bound): a uniformly random one of its k bits.

Clearing a bit turns every member hashed there into a false negative and every known false positive hashed there
into a true negative. With weights ``false_negative_weight = alpha`` and ``false_positive_weight = 1`` the ratio is
the cost added over the cost removed, and ``max_ratio=1`` clears a bit only when that lowers the total cost (the
cost-aware variant); the default ``max_ratio=inf`` always clears, as the paper's algorithm does.

Probes are the classic layout's (``mulhi(h + i (fmix64(h) | 1), m)``, as a classic BloomFilter with the same seed).
The filter keeps the 64-bit hash of every key inserted (8 bytes per key, saved with it): Ratio Selection needs to
know which members hash where, and a retouch can follow a load.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from bloomwise import _format, _positions, theory
from bloomwise._base import check_capacity, check_target_fpr, check_threads
from bloomwise._checks import check_int_range
from bloomwise._hashed_bits import HashedBits, check_layout
from bloomwise.errors import FormatError
from bloomwise.theory._validate import check_reachable
from bloomwise.theory.retouched import rbf_random_clearing_rates

__all__ = ["RetouchedBloomFilter", "RetouchResult"]

_SCHEMES = ("ratio", "random")
_PROBE_CHUNK = 1 << 20  # members probed at a time by a retouch (bounds the uint64 probes held at once)
_SCAN_MIN, _SCAN_MAX = 32, 8192  # known false positives examined per vector step of a retouch (doubling while none
# of them needs a clear, back to the minimum after one)


@dataclass(frozen=True)
class RetouchResult:
    """What one :meth:`RetouchedBloomFilter.retouch` did.

    ``cleared_bits``: bits set to 0; ``false_negatives``: members that tested positive before and negative after;
    ``false_positives_removed``: known false positives that tested positive before and negative after;
    ``kept``: known false positives still positive at the end (no bit of theirs had a ratio below ``max_ratio`` when
    they were examined, and no later clearing removed them).
    """

    cleared_bits: int
    false_negatives: int
    false_positives_removed: int
    kept: int


def _dedup_rows(pos: np.ndarray) -> np.ndarray:
    """A mask of each row's first occurrence of a position (a key counts once per bit)."""
    srt = np.sort(pos, axis=1)
    first = np.ones(pos.shape, dtype=bool)
    first[:, 1:] = srt[:, 1:] != srt[:, :-1]
    return srt, first


def index_dtype(largest: int):
    """The smallest of int32 and int64 that holds indices up to ``largest``: a retouch keeps k positions and row
    numbers per false positive and per member, so int32 halves its memory (millions of keys at the papers' sizes)."""
    return np.int32 if largest < 2**31 else np.int64


def _csr(pos_sorted: np.ndarray, mask: np.ndarray, num_bits: int):
    """For each bit, the rows that hash there: (starts, rows)."""
    rows = np.broadcast_to(np.arange(pos_sorted.shape[0], dtype=index_dtype(pos_sorted.shape[0]))[:, None],
                           pos_sorted.shape)[mask]
    flat = pos_sorted[mask]
    starts = np.zeros(num_bits + 1, dtype=np.int64)  # starts[b]: the entries at bits below b
    np.cumsum(np.bincount(flat, minlength=num_bits), out=starts[1:])
    return starts, rows[np.argsort(flat)]


def _retire(bit, starts, rows_of, live, pos_sorted, first, weight, w) -> int:
    """Bit ``bit`` was cleared: every live row (key) hashing there stops testing positive. Marks them dead, takes
    their weight ``w`` off each of their distinct bits, and returns how many there were."""
    rows = rows_of[starts[bit]:starts[bit + 1]]
    rows = rows[live[rows]]
    if rows.size:
        live[rows] = False
        np.subtract.at(weight, pos_sorted[rows][first[rows]].astype(np.int64), w)
    return int(rows.size)


class RetouchedBloomFilter(HashedBits):
    """A Bloom filter that can give up chosen false positives for false negatives (Donnet et al.).

    >>> f = RetouchedBloomFilter.from_size(4096, 3, seed=1)
    >>> f.update(range(400))
    >>> fps = [x for x in range(10_000, 40_000) if x in f]
    >>> result = f.retouch(fps, scheme="ratio", seed=2)
    >>> sum(x in f for x in fps), result.false_positives_removed == len(fps)
    (0, True)
    """

    _STRUCTURE = _format.Structure.RETOUCHED

    def __init__(self, capacity, fpr=0.01, *, layout="classic", seed=0,
                 key: Optional[Callable[[object], bytes]] = None, hash_scheme="xxh3"):
        """Sized like a classic BloomFilter: ``fpr`` at ``capacity`` keys before any retouch."""
        capacity = check_capacity(capacity)
        fpr = check_target_fpr(fpr)
        check_layout(layout)
        check_reachable(capacity, fpr, "classic", "capacity")
        num_bits, num_hashes = theory.optimal_size(capacity, fpr, layout="classic")
        self._setup(num_bits, num_hashes, seed, key, hash_scheme)
        self._capacity = capacity
        self._fpr = fpr

    @classmethod
    def from_size(cls, num_cells, num_hashes, *, seed=0, key: Optional[Callable[[object], bytes]] = None,
                  hash_scheme="xxh3") -> "RetouchedBloomFilter":
        """An RBF of exactly ``num_cells`` bits and ``num_hashes`` probes per key."""
        self = cls.__new__(cls)
        self._setup(num_cells, num_hashes, seed, key, hash_scheme)
        self._capacity = self._fpr = None
        return self

    def _setup(self, num_bits, num_hashes, seed, key, hash_scheme) -> None:
        self._init_bits(num_bits, seed, key, hash_scheme)
        self._k = check_int_range("num_hashes", num_hashes, 1, _format.MAX_NUM_HASHES)
        self._members: list[np.ndarray] = []

    # -- description ------------------------------------------------------------------------------------------
    @property
    def num_hashes(self) -> int:
        return self._k

    def member_hashes(self) -> np.ndarray:
        """The 64-bit hashes of the keys inserted, in insertion order."""
        if len(self._members) != 1:
            self._members = [np.concatenate(self._members) if self._members else np.zeros(0, dtype=np.uint64)]
        return self._members[0]

    def random_clearing_rates(self, cleared_bits: int, set_bits: Optional[int] = None) -> tuple[float, float]:
        """``(fpr, fnr)`` the model predicts after clearing ``cleared_bits`` of the set bits at random."""
        return rbf_random_clearing_rates(self._num_cells, self._num_keys, self._k, cleared_bits,
                                         set_bits=set_bits)

    def estimated_fpr(self) -> float:
        """The false-positive rate now, from the bits set (``theory.fpr_from_fill``, classic layout): a retouch
        lowers it."""
        return theory.fpr_from_fill(self._num_cells, self._k, self.count_set_bits(), layout="classic")

    def __repr__(self) -> str:
        return (f"<RetouchedBloomFilter m={self._num_cells} k={self._k} keys={self._num_keys} "
                f"fill={self.fill_ratio:.3f}>")

    # -- operations -------------------------------------------------------------------------------------------
    def _probes(self, hashes):
        return _positions.classic_positions(hashes, self._num_cells, self._k)

    def _insert_hashes(self, hashes: np.ndarray) -> None:
        pos = self._probes(hashes).ravel()
        words = pos >> np.uint64(6)
        masks = np.left_shift(np.uint64(1), pos & np.uint64(63))
        np.bitwise_or.at(self._words, words.astype(np.int64), masks)
        self._members.append(hashes.copy())
        self._num_keys += int(hashes.size)

    def add(self, key, /) -> bool:
        """Insert one key (set its k bits). True when it was certainly not present before (one of its bits was 0),
        as ``BloomFilter.add``."""
        hashes = self._hashes([key])
        was_present = bool(_positions.get_bits(self._words, self._probes(hashes)).all())
        self._insert_hashes(hashes)
        return not was_present

    def update(self, keys, *, threads=None) -> None:
        """Insert a batch of keys. ``threads=`` is accepted for the common contract; one thread inserts."""
        check_threads(threads)
        for hashes in self._chunks(keys):
            self._insert_hashes(hashes)

    def _parameters(self) -> dict:
        return {"num_cells": self._num_cells, "num_hashes": self._k, "seed": self._seed,
                "hash_scheme": self.hash_scheme}

    def __ior__(self, other):
        """``a |= b``: the bits ORed and b's member hashes appended, so ``a`` holds the keys of both: exactly the
        filter of both key sets when neither was retouched; a bit one of them cleared is set again where the other
        has it (its removed false positives may come back), and a later retouch sees every member."""
        self._check_compatible(other, "union")
        self._words |= other._words
        self._members.append(other.member_hashes().copy())
        self._num_keys += other.num_keys
        return self

    def union(self, *others) -> "RetouchedBloomFilter":
        """A new filter holding the keys of this one and of all ``others`` (``|``)."""
        result = self.copy()
        for other in others:
            result |= other
        return result

    def __eq__(self, other) -> bool:
        if not isinstance(other, RetouchedBloomFilter):
            return NotImplemented
        return (self._header() == other._header() and np.array_equal(self._words, other._words)
                and np.array_equal(np.sort(self.member_hashes()), np.sort(other.member_hashes())))  # (a multiset)

    __hash__ = None

    # -- the retouch ------------------------------------------------------------------------------------------
    def retouch(self, false_positives, *, scheme: str = "ratio", false_negative_weight: float = 1.0,
                false_positive_weight: float = 1.0, max_ratio: float = math.inf, seed: int = 0) -> RetouchResult:
        """Clear bits to remove known false positives (Donnet et al.'s selective clearing).

        :param false_positives: keys known NOT to be members (any that test negative are ignored). A member passed
            here is treated as a false positive too: the caller vouches for the list.
        :param scheme: ``"ratio"`` (Ratio Selection) or ``"random"`` (Random Selection).
        :param false_negative_weight: the weight of a member made negative (``alpha`` in the Bloom-paradox costs).
        :param false_positive_weight: the weight of a false positive removed.
        :param max_ratio: clear a bit only if its weighted ratio A/B is below this (``scheme="ratio"`` only;
            ``1.0`` with the weights of the two error costs clears only when the total cost falls).
        :param seed: the order in which the false positives are processed (and the random choice).
        """
        if scheme not in _SCHEMES:
            raise ValueError(f"scheme must be 'ratio' or 'random', got {scheme!r}")
        for name, value in (("false_negative_weight", false_negative_weight),
                            ("false_positive_weight", false_positive_weight)):
            if not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not isinstance(max_ratio, (int, float)) or not max_ratio > 0:
            raise ValueError(f"max_ratio must be a number > 0 (math.inf: always clear), got {max_ratio!r}")
        rng = np.random.default_rng(check_int_range("seed", seed, 0, 2**64 - 1))
        m, k = self._num_cells, self._k
        fp_pos = self._positive_probes(self._chunks(false_positives))
        members = self.member_hashes()
        mem_pos = self._positive_probes(members[lo:lo + _PROBE_CHUNK] for lo in range(0, len(members), _PROBE_CHUNK))
        bits = _positions.words_to_bits(self._words, m).copy()
        wa, wb = float(false_negative_weight), float(false_positive_weight)
        fp_sorted, fp_first = _dedup_rows(fp_pos)
        mem_sorted, mem_first = _dedup_rows(mem_pos)
        weight_a = np.bincount(mem_sorted[mem_first], minlength=m).astype(np.float64) * wa
        weight_b = np.bincount(fp_sorted[fp_first], minlength=m).astype(np.float64) * wb
        fp_starts, fp_rows = _csr(fp_sorted, fp_first, m)
        mem_starts, mem_rows = _csr(mem_sorted, mem_first, m)
        fp_live = np.ones(len(fp_pos), dtype=bool)
        mem_live = np.ones(len(mem_pos), dtype=bool)
        order = rng.permutation(len(fp_pos)).astype(index_dtype(len(fp_pos)))  # the same draws as int64
        pick = rng.integers(0, k, size=len(fp_pos)).astype(np.int8) if scheme == "random" else None  # k <= 64
        fp_pos_i = fp_pos
        cleared = fn = fp_removed = 0
        i = 0
        scan = _SCAN_MIN
        while i < len(order):
            window = order[i:i + scan]
            live = fp_live[window]
            cand = fp_pos_i[window]
            if scheme == "ratio":
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = weight_a[cand] / weight_b[cand]
                best = np.argmin(ratio, axis=1)
                best_ratio = ratio[np.arange(len(window)), best]
                acceptable = live & (best_ratio < max_ratio)
            else:
                best = pick[window]
                acceptable = live
            hits = np.flatnonzero(acceptable)
            if hits.size == 0:
                i += len(window)
                scan = min(2 * scan, _SCAN_MAX)  # nothing to clear here: look further ahead at once
                continue
            scan = _SCAN_MIN
            first = int(hits[0])
            j = int(cand[first, best[first]])
            i += first + 1
            # clear bit j: its live members become false negatives, its live false positives are removed
            bits[j] = 0
            cleared += 1
            fn += _retire(j, mem_starts, mem_rows, mem_live, mem_sorted, mem_first, weight_a, wa)
            fp_removed += _retire(j, fp_starts, fp_rows, fp_live, fp_sorted, fp_first, weight_b, wb)
        self._words[:] = _positions.bits_to_words(bits)
        return RetouchResult(cleared, fn, fp_removed, int(fp_live.sum()))

    def _positive_probes(self, hash_chunks) -> np.ndarray:
        """The probes (rows of k positions, ``index_dtype(m)``) of the hashes that test positive now, chunk by chunk
        so that only one chunk's uint64 probes exist at a time."""
        index = index_dtype(self._num_cells)
        rows = [np.zeros((0, self._k), dtype=index)]
        for hashes in hash_chunks:
            probes = self._probes(hashes)
            rows.append(probes[_positions.get_bits(self._words, probes).all(axis=1)].astype(index))
        return np.concatenate(rows)

    # -- persistence ------------------------------------------------------------------------------------------
    def _header(self) -> _format.Header:
        meta = self._with_capacity({"members": int(self.member_hashes().size)})
        return self._base_header(self._k, meta, self.nbytes + 8 * int(self.member_hashes().size))

    def payload_view(self):
        return self._words.tobytes() + self.member_hashes().astype("<u8").tobytes()

    @classmethod
    def _from_parts(cls, header, payload, *, key, **options) -> "RetouchedBloomFilter":
        cls._no_options(options)
        scheme = cls._check_header(header, key, "RetouchedBloomFilter")
        members = header.meta.get("members")
        if isinstance(members, bool) or not isinstance(members, int) or not 0 <= members <= 2**40:
            raise FormatError(f"meta members must be an int in [0, 2**40], the file says {members!r}")
        nbytes = (header.num_cells + 63) // 64 * 8
        expected = nbytes + 8 * members
        if header.payload_length != expected or len(payload) != expected:
            raise FormatError(f"payload holds {header.payload_length} bytes; {header.num_cells} bits and "
                              f"{members} member hashes need {expected}")
        self = cls.__new__(cls)
        try:
            self._setup(header.num_cells, header.num_hashes, header.seed, key, scheme)
        except (ValueError, TypeError) as exc:
            raise FormatError(f"the file describes an impossible filter: {exc}") from None
        end = self._load_words(payload)
        self._members = [np.frombuffer(bytes(payload[end:end + 8 * members]), dtype="<u8").astype(np.uint64)]
        self._restore_counts(header)
        return self


RetouchedBloomFilter._FAMILY = RetouchedBloomFilter
