"""The base of the bit-array structures whose updates are not a Bloom filter's OR (GeneralizedBloomFilter,
RetouchedBloomFilter): a numpy word array, the library's key hashing (compiled ``hash_many``), classic-layout probes
(:mod:`bloomwise._positions`), the header fields every such structure saves, and the contract's common names
(``num_cells``, ``layout``, ``capacity``, ``fpr``, ``num_keys``, ``is_compatible``; ``_base`` has the table)."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from bloomwise import _format, _positions
from bloomwise._checks import check_int_range
from bloomwise._base import LAYOUTS, check_threads, layout_id
from bloomwise._compatibility import Compatible
from bloomwise._persistence import Persistent, check_keyed, header_flags, meta_capacity, meta_fpr
from bloomwise.errors import FormatError

_CHUNK = 1 << 20  # keys hashed and probed at a time by the batch paths (bounds their memory)
#: the one layout these structures have (their probes are the classic layout's), name -> id
CLASSIC_ONLY = {"classic": LAYOUTS["classic"]}


def check_layout(layout) -> None:
    """``layout=`` of the contract: only ``"classic"`` here (ValueError naming the choices otherwise)."""
    layout_id(layout, CLASSIC_ONLY)


class HashedBits(Persistent, Compatible):
    """m bits as little-endian uint64 words, keys hashed as every bloomwise filter hashes them.

    Subclasses set ``_capacity`` and ``_fpr`` (None when built by size) and define ``_parameters()``."""

    _STRUCTURE: _format.Structure

    def _init_bits(self, num_bits, seed, key, hash_scheme) -> None:
        self._num_cells = check_int_range("num_cells", num_bits, 1, 2**40)
        self._seed = check_int_range("seed", seed, 0, 2**64 - 1)
        if key is not None and not callable(key):
            raise TypeError(f"key must be a function key -> bytes, got {type(key).__name__}")
        self._key = key
        self._hash_scheme_id = _format.hash_scheme_id(hash_scheme) if isinstance(hash_scheme, str) else hash_scheme
        self._words = np.zeros((self._num_cells + 63) // 64, dtype=np.uint64)
        self._num_keys = 0

    # -- description ------------------------------------------------------------------------------------------
    @property
    def num_cells(self) -> int:
        """m: the number of bits."""
        return self._num_cells

    @property
    def layout(self) -> str:
        """``"classic"``: k positions anywhere in the m bits (the only layout of these structures)."""
        return "classic"

    @property
    def seed(self) -> int:
        """The hash seed."""
        return self._seed

    @property
    def num_keys(self) -> int:
        """Keys inserted (every insertion counts, a repeated key too)."""
        return self._num_keys

    @property
    def capacity(self) -> Optional[int]:
        """The capacity it was sized for (None when built by size)."""
        return self._capacity

    @property
    def fpr(self) -> Optional[float]:
        """The target false-positive rate given at construction (None when built by size); the rate now is
        ``estimated_fpr()``."""
        return self._fpr

    @property
    def _key_function(self):
        return self._key

    @property
    def nbytes(self) -> int:
        """Bytes of the bit array."""
        return int(self._words.nbytes)

    @property
    def fill_ratio(self) -> float:
        """The fraction of bits set."""
        return self.count_set_bits() / self._num_cells

    def count_set_bits(self) -> int:
        """The number of bits set."""
        return int(np.unpackbits(self._words.view(np.uint8)).sum())

    def bits(self) -> np.ndarray:
        """A copy of the bits, one uint8 (0 or 1) per bit."""
        return _positions.words_to_bits(self._words, self._num_cells).copy()

    def _bit_reader(self):
        """A function positions -> bool array over the current bits: through one byte per bit (unpacked once) for
        arrays up to 2^28 bits, through the words beyond (no 8x copy of a large array)."""
        if self._num_cells <= 1 << 28:
            unpacked = _positions.words_to_bits(self._words, self._num_cells).view(bool)
            return lambda pos: unpacked[pos.astype(np.intp)]
        return lambda pos: _positions.get_bits(self._words, pos)

    # -- hashing ----------------------------------------------------------------------------------------------
    def _hashes(self, keys) -> np.ndarray:
        return _positions.hash_keys(keys, self._seed, self._hash_scheme_id, self._key)

    def _chunks(self, keys):
        """Hashes of a batch in chunks of at most ``_CHUNK`` keys (numpy arrays sliced, iterables listed once)."""
        if isinstance(keys, np.ndarray):
            flat = keys.reshape(-1)
            for lo in range(0, flat.shape[0], _CHUNK):
                yield self._hashes(flat[lo:lo + _CHUNK])
            return
        if isinstance(keys, (str, bytes, bytearray, memoryview)):
            raise TypeError("expected a batch of keys (list, tuple, iterator, numpy array), got a single key; "
                            "use add(key) or `key in f`")
        items = keys if isinstance(keys, (list, tuple)) else list(keys)
        for lo in range(0, len(items), _CHUNK):
            yield self._hashes(items[lo:lo + _CHUNK])

    # -- queries ----------------------------------------------------------------------------------------------
    def _test(self, probes: np.ndarray, read) -> np.ndarray:
        """``key in f`` for each row of probes, bits read by ``read(positions) -> bool array``: all probes set."""
        return read(probes).all(axis=1)

    def __contains__(self, key) -> bool:
        probes = self._probes(self._hashes([key]))
        return bool(self._test(probes, lambda pos: _positions.get_bits(self._words, pos))[0])

    def contains_many(self, keys, *, threads=None) -> np.ndarray:
        """A numpy bool array: ``key in f`` for each key of the batch. ``threads=`` is accepted for the common
        contract; one thread answers (numpy)."""
        check_threads(threads)
        read = self._bit_reader()
        parts = [self._test(self._probes(h), read) for h in self._chunks(keys)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)

    def copy(self):
        """An independent copy (through the file format: the same bytes)."""
        return type(self).from_bytes(self.to_bytes(), key=self._key)

    # -- persistence ------------------------------------------------------------------------------------------
    def _with_capacity(self, meta: dict) -> dict:
        """``meta`` plus the capacity and target rate it was sized for, when it was."""
        if self._capacity is not None:
            meta["capacity"] = self._capacity
        if self._fpr is not None:
            meta["fpr"] = self._fpr
        return meta

    def _restore_counts(self, header: _format.Header) -> None:
        """Keys added, capacity and target rate from a checked header (the last step of ``_from_parts``)."""
        self._num_keys = header.num_keys
        self._capacity = meta_capacity(header)
        self._fpr = meta_fpr(header)

    @staticmethod
    def _no_options(options: dict) -> None:
        if options:
            raise TypeError(f"unexpected options {sorted(options)}")

    def _base_header(self, num_hashes: int, meta: dict, payload_length: int) -> _format.Header:
        return _format.Header(structure=self._STRUCTURE, layout=_format.Layout.CLASSIC,
                              hash_scheme=_format.HashScheme(self._hash_scheme_id), seed=self._seed,
                              num_cells=self._num_cells, num_hashes=num_hashes, num_keys=self._num_keys,
                              payload_length=payload_length, meta=meta, flags=header_flags(self._key))

    @staticmethod
    def _check_header(header: _format.Header, key: Optional[Callable], what: str) -> int:
        check_keyed(header, key)
        if header.layout != _format.Layout.CLASSIC:
            raise FormatError(f"a {what} has the classic layout, the file says {header.layout.name}")
        return _format.keyed_hash_scheme(header, f"a {what}")

    def _load_words(self, payload, offset: int = 0) -> int:
        """Copy the bit array from ``payload[offset:]``; FormatError when padding bits are set. Returns its end."""
        nbytes = self._words.nbytes
        if len(payload) < offset + nbytes:
            raise FormatError(f"the payload holds {len(payload)} bytes, the bit array alone needs {nbytes}")
        self._words[:] = np.frombuffer(bytes(payload[offset:offset + nbytes]), dtype="<u8")
        extra = self._num_cells % 64
        if extra and int(self._words[-1]) >> extra:
            raise FormatError(f"bits past num_bits ({self._num_cells}) are set in the last word: "
                              f"the payload is damaged")
        return offset + nbytes
