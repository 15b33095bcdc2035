"""Batch positions of the classic layout in numpy, for structures built on bit arrays outside the compiled core.

Keys are hashed by the compiled core (``hash_many``: the same 64-bit hash as every bloomwise filter, docs/architecture
.md), then probe i of a key with hash h is ``mulhi(h + i * (fmix64(h) | 1), m)`` (mod 2^64), exactly the classic
layout's ``probe`` in ``_native/layouts.pxd``: a GeneralizedBloomFilter's or RetouchedBloomFilter's probes are the
positions a classic BloomFilter with the same seed would use.
"""
from __future__ import annotations

import numpy as np

from bloomwise._native.bloom import hash_many

_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_S33 = np.uint64(33)
_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_ONE = np.uint64(1)


def fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, element-wise (uint64 arithmetic wraps, as in C)."""
    with np.errstate(over="ignore"):
        x = h ^ (h >> _S33)
        x = x * _C1
        x ^= x >> _S33
        x = x * _C2
        x ^= x >> _S33
    return x


def mulhi(x: np.ndarray, r: int) -> np.ndarray:
    """``(x * r) >> 64`` for uint64 x and an int ``0 <= r < 2**64``, without 128-bit integers."""
    r = int(r)
    if r < 2**32:  # one 32x64 split: x*r = xh*r*2^32 + xl*r, neither product overflows
        rr = np.uint64(r)
        with np.errstate(over="ignore"):
            return (x >> _S32) * rr + (((x & _M32) * rr) >> _S32) >> _S32
    rh, rl = np.uint64(r >> 32), np.uint64(r & 0xFFFFFFFF)
    xh, xl = x >> _S32, x & _M32
    with np.errstate(over="ignore"):
        hh = xh * rh
        hl = xh * rl
        lh = xl * rh
        ll = xl * rl
        middle = (hl & _M32) + (lh & _M32) + (ll >> _S32)
        return hh + (hl >> _S32) + (lh >> _S32) + (middle >> _S32)


def classic_positions(hashes: np.ndarray, num_bits: int, count: int, first: int = 0) -> np.ndarray:
    """Probes ``first .. first + count - 1`` of each hash: an ``(len(hashes), count)`` uint64 array."""
    h = np.ascontiguousarray(hashes, dtype=np.uint64).reshape(-1)
    step = fmix64(h) | _ONE
    out = np.empty((count, h.size), dtype=np.uint64)  # one contiguous row per probe; returned transposed
    with np.errstate(over="ignore"):
        for j in range(count):
            out[j] = mulhi(h + np.uint64(first + j) * step, num_bits)
    return out.T


def hash_keys(keys, seed: int, scheme_id: int, key=None) -> np.ndarray:
    """The 64-bit hashes of a batch (lists, iterators, numpy arrays), as every filter hashes them."""
    return np.asarray(hash_many(keys, seed, key, scheme_id), dtype=np.uint64).reshape(-1)


def get_bits(words: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The bits at ``positions`` (any shape) of a little-endian uint64 word array, as a bool array."""
    return ((words[positions >> np.uint64(6)] >> (positions & np.uint64(63))) & _ONE).astype(bool)


def words_to_bits(words: np.ndarray, num_bits: int) -> np.ndarray:
    """One uint8 (0/1) per bit, the first ``num_bits`` bits of the words."""
    return np.unpackbits(words.view(np.uint8), bitorder="little")[:num_bits]


def bits_to_words(bits: np.ndarray) -> np.ndarray:
    """The inverse of :func:`words_to_bits`: little-endian uint64 words, zero-padded."""
    nwords = (len(bits) + 63) // 64
    packed = np.packbits(np.asarray(bits, dtype=np.uint8), bitorder="little")
    out = np.zeros(nwords * 8, dtype=np.uint8)
    out[: len(packed)] = packed
    return out.view(np.uint64)
