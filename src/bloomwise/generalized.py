"""GeneralizedBloomFilter: k1 hash functions set bits and k0 reset bits at every insertion.

Source: Laufer, Velloso, Duarte, *Generalized Bloom Filters* (tech. report GTA-05-43, UFRJ, 2005; Computer Networks,
2011). Inserting x resets the bits g_1(x)..g_k0(x) to 0, then sets h_1(x)..h_k1(x) to 1; a position in both ends at 0
(reset wins). A query is positive iff every g_i(x) bit is 0 and every h_j(x) bit is 1 (an h_j position that is also
a g_i position is expected at 0). Later insertions overwrite earlier ones' bits, so a GBF has false negatives as well
as false positives: it trades one for the other, and its rates are those of :mod:`bloomwise.theory.generalized`.

Probes: for a key with 64-bit hash h (the library's key hash), probe i is the classic layout's
``mulhi(h + i (fmix64(h) | 1), m)``; probes 0..k0-1 are the reset functions g, probes k0..k0+k1-1 the set functions h.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from bloomwise import _format, _positions
from bloomwise._base import check_capacity, check_target_fpr, check_threads
from bloomwise._checks import check_int_range
from bloomwise._hashed_bits import HashedBits, check_layout
from bloomwise.errors import FormatError
from bloomwise.theory._validate import check_reachable
from bloomwise.theory.generalized import gbf_error_rates, gbf_false_positive_rate

__all__ = ["GeneralizedBloomFilter"]

_MAX_HASHES = _format.MAX_NUM_HASHES
_INITIAL = {"zeros": 0.0, "random": 0.5}


class GeneralizedBloomFilter(HashedBits):
    """A Generalized Bloom filter (Laufer et al.): false positives AND false negatives, traded by k0 and k1.

    Build it by accuracy, ``GeneralizedBloomFilter(capacity, fpr, num_reset_hashes=1)`` (the smallest m, over k1,
    whose false-positive rate at ``capacity`` keys is at most ``fpr``), or by size,
    ``GeneralizedBloomFilter.from_size(num_cells, num_set_hashes, num_reset_hashes)``.

    No union or intersection: the bits depend on the order of the insertions (a later key's resets overwrite an
    earlier key's sets) and a query needs the reset bits at 0, so no bitwise combination of two filters is the
    filter of both sets of keys; ``|`` raises TypeError saying so.

    >>> f = GeneralizedBloomFilter.from_size(1024, 3, 1, seed=7)
    >>> f.add("apple")
    >>> "apple" in f, "pear" in f
    (True, False)
    >>> f.false_negative_rate() == 0.0   # one key: nothing overwrote it yet
    True
    """

    _STRUCTURE = _format.Structure.GENERALIZED

    def __init__(self, capacity, fpr=0.01, *, num_reset_hashes=1, layout="classic", seed=0, initial="zeros",
                 key: Optional[Callable[[object], bytes]] = None, hash_scheme="xxh3"):
        """Sized so that the FPR at ``capacity`` keys is at most ``fpr`` with ``num_reset_hashes`` reset functions.

        :param capacity: keys the filter is sized for (int >= 1).
        :param fpr: target false-positive rate at capacity, in (0, 1).
        :param num_reset_hashes: k0 >= 0 (k0 = 0 is a Bloom filter).
        :param layout: ``"classic"``, the only one (k probes anywhere in the m bits).
        :param initial: ``"zeros"`` (all bits 0) or ``"random"`` (each bit 1 with probability 1/2, from ``seed``).
        """
        capacity = check_capacity(capacity)
        fpr = check_target_fpr(fpr)
        check_layout(layout)
        check_reachable(capacity, fpr, "classic", "capacity")
        k0 = check_int_range("num_reset_hashes", num_reset_hashes, 0, _MAX_HASHES - 1)
        b1 = self._initial_ones(initial)
        num_bits, k1 = _size_for(capacity, fpr, k0, b1)
        self._setup(num_bits, k1, k0, seed, initial, key, hash_scheme)
        self._capacity = capacity
        self._fpr = fpr

    @classmethod
    def from_size(cls, num_cells, num_set_hashes, num_reset_hashes, *, seed=0, initial="zeros",
                  key: Optional[Callable[[object], bytes]] = None, hash_scheme="xxh3") -> "GeneralizedBloomFilter":
        """A GBF of exactly ``num_cells`` bits, k1 = ``num_set_hashes`` and k0 = ``num_reset_hashes``.

        >>> GeneralizedBloomFilter.from_size(2048, 4, 2).num_hashes
        6
        """
        self = cls.__new__(cls)
        self._setup(num_cells, num_set_hashes, num_reset_hashes, seed, initial, key, hash_scheme)
        self._capacity = self._fpr = None
        return self

    @staticmethod
    def _initial_ones(initial) -> float:
        if initial not in _INITIAL:
            raise ValueError(f"initial must be 'zeros' or 'random', got {initial!r}")
        return _INITIAL[initial]

    def _setup(self, num_bits, k1, k0, seed, initial, key, hash_scheme) -> None:
        self._init_bits(num_bits, seed, key, hash_scheme)
        self._k1 = check_int_range("num_set_hashes", k1, 0, _MAX_HASHES)
        self._k0 = check_int_range("num_reset_hashes", k0, 0, _MAX_HASHES)
        if not 1 <= self._k0 + self._k1 <= _MAX_HASHES:
            raise ValueError(f"num_set_hashes + num_reset_hashes must be in [1, {_MAX_HASHES}], "
                             f"got {self._k1} + {self._k0}")
        self._initial_fraction = self._initial_ones(initial)
        self._initial = initial
        if initial == "random":
            rng = np.random.default_rng(self._seed)
            self._words[:] = rng.integers(0, 2**64, size=self._words.size, dtype=np.uint64)
            extra = self._num_cells % 64
            if extra:
                self._words[-1] &= np.uint64((1 << extra) - 1)

    # -- description ------------------------------------------------------------------------------------------
    @property
    def num_set_hashes(self) -> int:
        """k1: hash functions whose bits an insertion sets."""
        return self._k1

    @property
    def num_reset_hashes(self) -> int:
        """k0: hash functions whose bits an insertion resets."""
        return self._k0

    @property
    def num_hashes(self) -> int:
        """k0 + k1: probes per key."""
        return self._k0 + self._k1

    @property
    def initial(self) -> str:
        """``"zeros"`` or ``"random"``: the bit vector before the first insertion."""
        return self._initial

    def false_positive_rate(self) -> float:
        """The model's FPR after the keys inserted so far (:func:`~bloomwise.theory.generalized.gbf_error_rates`)."""
        return gbf_false_positive_rate(self._num_cells, self._num_keys, self._k1, self._k0,
                                       initial_ones=self._initial_fraction)

    def estimated_fpr(self) -> float:
        """The false-positive rate now: the model's, ``false_positive_rate()`` (a fill says little here: reset bits
        lower it while they raise the false negatives)."""
        return self.false_positive_rate()

    def false_negative_rate(self) -> float:
        """The model's FNR over the keys inserted so far."""
        return gbf_error_rates(self._num_cells, self._num_keys, self._k1, self._k0)[1]

    def __repr__(self) -> str:
        return (f"<GeneralizedBloomFilter m={self._num_cells} k1={self._k1} k0={self._k0} keys={self._num_keys} "
                f"fill={self.fill_ratio:.3f}>")

    # -- operations -------------------------------------------------------------------------------------------
    def _probes(self, hashes: np.ndarray) -> np.ndarray:
        return _positions.classic_positions(hashes, self._num_cells, self._k0 + self._k1)

    def _apply(self, probes: np.ndarray) -> None:
        """Insert keys in row order: each bit ends as the last key touching it left it (reset wins in one key)."""
        nkeys, width = probes.shape
        if nkeys == 0:
            return
        order_in_key = np.empty(width, dtype=np.int64)
        order_in_key[: self._k0] = 1  # within one key a reset sorts after a set: it wins
        order_in_key[self._k0:] = 0
        rank = (np.arange(nkeys, dtype=np.int64)[:, None] * 2 + order_in_key[None, :]).ravel()
        pos = probes.ravel()
        value = np.broadcast_to((order_in_key == 0)[None, :], probes.shape).ravel()
        order = np.lexsort((rank, pos))
        pos_sorted = pos[order]
        last = np.ones(pos_sorted.size, dtype=bool)
        last[:-1] = pos_sorted[1:] != pos_sorted[:-1]
        final_pos = pos_sorted[last]
        final_val = value[order][last]
        bits = _positions.words_to_bits(self._words, self._num_cells).copy()
        bits[final_pos.astype(np.int64)] = final_val
        self._words[:] = _positions.bits_to_words(bits)
        self._num_keys += nkeys

    def _test(self, probes: np.ndarray, read) -> np.ndarray:
        """A key is in when its k0 reset bits are 0 and its k1 set bits are 1."""
        got = read(probes)
        k0 = self._k0
        reset_ok = ~got[:, :k0].any(axis=1) if k0 else np.ones(len(probes), dtype=bool)
        answer = reset_ok & got[:, k0:].all(axis=1)
        if k0 and self._k1:
            # a set probe that is also one of the key's reset probes expects 0 (reset wins): only rows whose reset
            # bits are all 0 but some set bit is 0 can pass that way, so only they are checked in full
            rows = np.flatnonzero(reset_ok & ~answer)
            if rows.size:
                setp = probes[rows, k0:]
                collide = (setp[:, :, None] == probes[rows, None, :k0]).any(axis=2)
                answer[rows] = (got[rows, k0:] == ~collide).all(axis=1)
        return answer

    def add(self, key, /) -> None:
        """Insert one key: reset its k0 bits, then set its k1 bits."""
        self._apply(self._probes(self._hashes([key])))

    def update(self, keys, *, threads=None) -> None:
        """Insert a batch in order (the same bits as ``add`` one key at a time). ``threads=`` is accepted for the
        common contract; one thread inserts (the order of the keys decides the bits)."""
        check_threads(threads)
        for hashes in self._chunks(keys):
            self._apply(self._probes(hashes))

    def _parameters(self) -> dict:
        return {"num_cells": self._num_cells, "num_set_hashes": self._k1, "num_reset_hashes": self._k0,
                "seed": self._seed, "hash_scheme": self.hash_scheme}

    def __or__(self, other):
        raise TypeError("a GeneralizedBloomFilter has no union: its bits depend on the order of the insertions and a "
                        "query needs the reset bits at 0, so no bitwise combination is the filter of both key sets; "
                        "insert the other keys with update()")

    __ior__ = __or__

    def __eq__(self, other) -> bool:
        if not isinstance(other, GeneralizedBloomFilter):
            return NotImplemented
        return (self._header() == other._header() and np.array_equal(self._words, other._words))

    __hash__ = None

    # -- persistence ------------------------------------------------------------------------------------------
    def _meta(self) -> dict:
        return self._with_capacity({"num_reset_hashes": self._k0, "initial": self._initial})

    def _header(self) -> _format.Header:
        return self._base_header(self.num_hashes, self._meta(), self.nbytes)

    def payload_view(self):
        return memoryview(self._words).cast("B")

    @classmethod
    def _from_parts(cls, header, payload, *, key, **options) -> "GeneralizedBloomFilter":
        cls._no_options(options)
        scheme = cls._check_header(header, key, "GeneralizedBloomFilter")
        k0 = header.meta.get("num_reset_hashes")
        if isinstance(k0, bool) or not isinstance(k0, int) or not 0 <= k0 <= header.num_hashes:
            raise FormatError(f"meta num_reset_hashes must be an int in [0, {header.num_hashes}], "
                              f"the file says {k0!r}")
        initial = header.meta.get("initial")
        if initial not in _INITIAL:
            raise FormatError(f"meta initial must be 'zeros' or 'random', the file says {initial!r}")
        expected = (header.num_cells + 63) // 64 * 8
        if header.payload_length != expected:
            raise FormatError(f"payload holds {header.payload_length} bytes; {header.num_cells} bits need {expected}")
        self = cls.__new__(cls)
        try:
            self._init_bits(header.num_cells, header.seed, key, scheme)
            self._k1, self._k0 = header.num_hashes - k0, k0
        except (ValueError, TypeError) as exc:
            raise FormatError(f"the file describes an impossible filter: {exc}") from None
        self._initial, self._initial_fraction = initial, _INITIAL[initial]
        self._load_words(payload)
        self._restore_counts(header)
        return self


GeneralizedBloomFilter._FAMILY = GeneralizedBloomFilter


def _size_for(n: int, p: float, k0: int, b1: float) -> tuple[int, int]:
    """The smallest m (and its k1) whose GBF FPR at n keys is at most p, k1 in 1..32.

    m starts at ``k0 + k1``, the smallest m the model describes (below it the rates are not probabilities). From
    an all-zero start the FPR falls as m grows, so a k1 whose FPR is already at most p at that smallest m meets the
    rate by saturation, not by size (its bits sit at the steady state where resets undo the sets, and most members
    test negative): it is skipped.
    """
    best = None
    for k1 in range(1, min(32, _MAX_HASHES - k0) + 1):
        def ok(m, k1=k1):
            return gbf_false_positive_rate(m, n, k1, k0, initial_ones=b1) <= p
        smallest = k0 + k1
        if b1 == 0.0 and ok(smallest):
            continue
        hi = max(64, int(n * k1 / math.log(2)))
        steps = 0
        while not ok(hi):
            hi *= 2
            steps += 1
            if steps > 40 or hi > 2**40:
                break
        else:
            lo = smallest
            while lo < hi:
                mid = (lo + hi) // 2
                if ok(mid):
                    hi = mid
                else:
                    lo = mid + 1
            if best is None or hi < best[0]:
                best = (hi, k1)
    if best is None:
        raise ValueError(f"no GBF of up to 2**40 bits reaches fpr={p} with {k0} reset functions")
    return best
