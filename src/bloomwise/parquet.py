"""Parquet's split-block Bloom filters: read them from Parquet files, query them, build them (extra ``parquet``).

Parquet writers (pyarrow's ``bloom_filter_options``, Spark, parquet-mr, ...) may store one Bloom filter per column
chunk. The format is apache/parquet-format's ``BloomFilter.md``, the split-block Bloom filter (SBBF) of Putze,
Sanders and Singler (*Cache-, Hash- and Space-Efficient Bloom Filters*):

- The bitset is ``num_blocks`` blocks of 256 bits, each eight little-endian 32-bit words.
- A value is hashed as ``h = XXH64(plain encoding of the value, seed 0)``: INT32/FLOAT as 4 little-endian bytes,
  INT64/DOUBLE as 8, INT96 as 12, BYTE_ARRAY as its bytes without the length prefix, FIXED_LEN_BYTE_ARRAY as its
  bytes (so a string column hashes the UTF-8 bytes).
- The block is ``((h >> 32) * num_blocks) >> 32``; with ``x = h mod 2**32``, word i of that block gets bit
  ``((x * SALT[i]) mod 2**32) >> 27`` (k = 8, one bit per word).

False-positive rate with n distinct values in B blocks (each block holds J ~ Binomial(n, 1/B) values; one
probe per 32-bit word): ``p = sum_j Bin(j; n, 1/B) (1 - (31/32)^j)^8`` (:func:`false_positive_rate`).

This is a structure of its own, not a ``BloomFilter`` layout: bloomwise's blocked layout is a split-block filter
too, but with 512-bit blocks of 64-bit lanes, up to 16 probes, its own salts and its own key encoding and hash
(XXH3 with type domains); the Parquet filter fixes all of these differently, so no bit would be shared.

The filter's location is in the file's footer (the Thrift ``FileMetaData``, compact protocol): each column
chunk's ``ColumnMetaData`` has ``bloom_filter_offset`` (field 14) and ``bloom_filter_length`` (field 15); at the
offset a Thrift ``BloomFilterHeader`` (numBytes, algorithm, hash, compression) precedes the bitset. pyarrow
exposes neither, so this module reads the footer itself (:mod:`bloomwise._thrift`), bounded and checked: damaged
files raise :class:`bloomwise.errors.FormatError`. A row group without a filter (or with one of an algorithm this
reader does not know) gets a :class:`NoBloomFilter`, which answers True: never a false negative.

>>> f = SplitBlockBloomFilter(optimal_num_bytes(100, 0.01), "BYTE_ARRAY")
>>> f.insert_many(["apple", "pear"])
>>> f.might_contain("apple"), f.might_contain("plum")
(True, False)
>>> SplitBlockBloomFilter.from_bytes(f.to_bytes(), "BYTE_ARRAY") == f
True
"""
from __future__ import annotations

import math
import os
import struct
from typing import Iterable, Optional, Sequence, Union

from bloomwise import _thrift
from bloomwise._checks import check_multiple
from bloomwise._native.hashes import xxh64
from bloomwise.errors import FormatError

__all__ = ["SplitBlockBloomFilter", "NoBloomFilter", "read_bloom_filters", "row_groups_that_may_contain",
           "optimal_num_bytes", "false_positive_rate", "PHYSICAL_TYPES"]

#: The eight odd 32-bit constants of the Parquet specification (one per word of a block).
SALTS = (0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D, 0x705495C7, 0x2DF1424B, 0x9EFC4947, 0x5C6BFB31)
BLOCK_BYTES = 32
#: Limits of the reference writers (parquet-cpp, parquet-mr): 32 bytes to 128 MiB. The reader enforces the upper one.
MIN_BYTES = 32
MAX_BYTES = 128 * 1024 * 1024

#: Parquet's physical types (the Thrift ``Type`` enum).
PHYSICAL_TYPES = {0: "BOOLEAN", 1: "INT32", 2: "INT64", 3: "INT96", 4: "FLOAT", 5: "DOUBLE", 6: "BYTE_ARRAY",
                  7: "FIXED_LEN_BYTE_ARRAY"}
_FIXED_WIDTH = {"INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}

# XXH64 primes (Collet's specification), for the numpy path of 4- and 8-byte values.
_P1, _P2, _P3, _P4, _P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                           0x27D4EB2F165667C5)

_MAGIC = b"PAR1"
_MAX_FOOTER = 256 * 1024 * 1024
_HEADER_PROBE = 256  # bytes read first when a writer did not record bloom_filter_length (headers are ~15 bytes)


def _xxh64(data) -> int:
    return xxh64(data, 0)


# ---- sizing and theory -------------------------------------------------------------------------------------------
def optimal_num_bytes(ndv, fpp) -> int:
    """The bitset size the reference writers (parquet-cpp, so pyarrow; parquet-mr) choose for ``ndv`` distinct
    values at false-positive probability ``fpp``: ``m = -8 ndv / ln(1 - fpp^(1/8))`` bits (the SBBF rate with the
    blocks' loads taken as equal), rounded up to a power of two bytes, between 32 bytes and 128 MiB.

    >>> optimal_num_bytes(1000, 0.01), optimal_num_bytes(1_000_000, 0.01)
    (2048, 2097152)
    """
    if isinstance(ndv, bool) or not isinstance(ndv, int) or ndv < 0:
        raise ValueError(f"ndv must be an int >= 0, got {ndv!r}")
    if not isinstance(fpp, (int, float)) or not 0.0 < fpp < 1.0:
        raise ValueError(f"fpp must be a probability in (0, 1), got {fpp!r}")
    bits = -8.0 * ndv / math.log(1.0 - fpp ** (1.0 / 8.0))
    num_bits = MAX_BYTES * 8 if bits > MAX_BYTES * 8 else int(bits)
    num_bits = max(num_bits, MIN_BYTES * 8)
    if num_bits & (num_bits - 1):
        num_bits = 1 << num_bits.bit_length()
    return num_bits // 8


def false_positive_rate(num_bytes, num_values) -> float:
    """The SBBF's false-positive rate with ``num_values`` distinct values in ``num_bytes`` bytes.

    ``p = sum_j Bin(j; n, 1/B) (1 - (31/32)^j)^8``, B = num_bytes / 32 blocks: a block holding j values has each
    of its words' bits unset with probability (31/32)^j, and the eight words are probed independently (Putze,
    Sanders and Singler, section 3; the mixture over the blocks' binomial loads makes it exact).

    >>> round(false_positive_rate(2048, 1000), 5)
    0.00116
    """
    blocks = check_multiple("num_bytes", num_bytes, BLOCK_BYTES, BLOCK_BYTES, MAX_BYTES) // BLOCK_BYTES
    n = int(num_values)
    if n < 0:
        raise ValueError(f"num_values must be >= 0, got {num_values!r}")
    if n == 0:
        return 0.0
    q = 1.0 / blocks
    mean = n * q
    spread = math.sqrt(mean * (1 - q))
    low, high = max(0, int(mean - 12 * spread - 12)), min(n, int(mean + 12 * spread + 12))
    log_q, log_rest = math.log(q), math.log1p(-q) if q < 1 else -math.inf
    total = 0.0
    for j in range(low, high + 1):
        if q == 1.0:
            log_pmf = 0.0 if j == n else -math.inf
        else:
            log_pmf = (math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * log_q
                       + (n - j) * log_rest)
        total += math.exp(log_pmf) * (1.0 - (31.0 / 32.0) ** j) ** 8
    return total


# ---- the value encoding ------------------------------------------------------------------------------------------
class _Encoding:
    """How values of one column become the bytes Parquet hashes (its PLAIN encoding)."""

    __slots__ = ("physical_type", "type_length", "int_range")

    def __init__(self, physical_type: str, type_length: Optional[int] = None, bit_width: Optional[int] = None,
                 signed: bool = True):
        if physical_type not in _FIXED_WIDTH and physical_type not in ("BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"):
            raise ValueError(f"physical_type must be one of INT32, INT64, INT96, FLOAT, DOUBLE, BYTE_ARRAY, "
                             f"FIXED_LEN_BYTE_ARRAY (Parquet defines no Bloom filter use for BOOLEAN), "
                             f"got {physical_type!r}")
        if physical_type == "FIXED_LEN_BYTE_ARRAY":
            if isinstance(type_length, bool) or not isinstance(type_length, int) or type_length < 1:
                raise ValueError(f"a FIXED_LEN_BYTE_ARRAY column needs type_length >= 1, got {type_length!r}")
        self.physical_type = physical_type
        self.type_length = type_length if physical_type == "FIXED_LEN_BYTE_ARRAY" else _FIXED_WIDTH.get(physical_type)
        self.int_range = None
        if physical_type in ("INT32", "INT64"):
            width = bit_width or (32 if physical_type == "INT32" else 64)
            self.int_range = (-(1 << (width - 1)), 1 << (width - 1)) if signed else (0, 1 << width)

    def encode(self, value) -> Optional[bytes]:
        """The plain encoding of ``value``; None when the column's type cannot hold it (so it is certainly absent);
        TypeError when ``value`` is of a kind this column never holds."""
        kind = self.physical_type
        if kind in ("INT32", "INT64"):
            if isinstance(value, bool) or not hasattr(value, "__index__"):
                raise TypeError(f"an {kind} column holds ints, got {type(value).__name__} ({value!r})")
            value = value.__index__()
            low, high = self.int_range
            if not low <= value < high:
                return None
            return (value & ((1 << (8 * self.type_length)) - 1)).to_bytes(self.type_length, "little")
        if kind in ("FLOAT", "DOUBLE"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
                raise TypeError(f"a {kind} column holds floats, got {type(value).__name__} ({value!r})")
            try:
                return struct.pack("<f" if kind == "FLOAT" else "<d", float(value))
            except OverflowError:
                return None  # beyond float32's range: not a FLOAT value
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value)
        else:
            raise TypeError(f"a {kind} column holds bytes or str, got {type(value).__name__} ({value!r})")
        if self.type_length is not None and len(value) != self.type_length:
            return None  # fixed-length columns (and INT96) hold values of exactly type_length bytes
        return value

    def hashes(self, values):
        """XXH64 of many values as numpy uint64, and a bool mask of those the column can hold at all."""
        import numpy as np
        if not isinstance(values, np.ndarray) and hasattr(values, "to_numpy"):  # pyarrow arrays, pandas Series
            try:
                values = values.to_numpy(zero_copy_only=False)
            except TypeError:
                values = values.to_numpy()
        if (isinstance(values, np.ndarray) and values.dtype.kind in "iuf"
                and self.physical_type in ("INT32", "INT64", "FLOAT", "DOUBLE")):
            return self._numpy_hashes(values.reshape(-1))
        values = list(values)
        out = np.zeros(len(values), dtype=np.uint64)
        valid = np.ones(len(values), dtype=bool)
        for i, value in enumerate(values):
            data = self.encode(value)
            if data is None:
                valid[i] = False
            else:
                out[i] = _xxh64(data)
        return out, valid

    def _numpy_hashes(self, array):
        import numpy as np
        kind = self.physical_type
        if kind in ("INT32", "INT64"):
            if array.dtype.kind not in "iu":
                raise TypeError(f"an {kind} column holds ints, got a numpy array of {array.dtype}")
            low, high = self.int_range
            info = np.iinfo(array.dtype)
            valid = np.ones(array.shape, dtype=bool)
            if info.min < low:
                valid &= array >= low
            if info.max >= high:
                valid &= array.astype(np.uint64) < high if array.dtype.kind == "u" else array < high
            words = array.astype(np.uint64 if array.dtype.kind == "u" else np.int64).view(np.uint64)
            if kind == "INT32":
                words = words & np.uint64(0xFFFFFFFF)
        else:
            if array.dtype.kind not in "fiu":
                raise TypeError(f"a {kind} column holds floats, got a numpy array of {array.dtype}")
            if kind == "FLOAT":
                with np.errstate(over="ignore"):
                    as_float = array.astype("<f4")
                valid = np.isfinite(as_float) | ~np.isfinite(array.astype(np.float64))
                words = as_float.view("<u4").astype(np.uint64)
            else:
                valid = np.ones(array.shape, dtype=bool)
                words = array.astype("<f8").view("<u8").astype(np.uint64)
        return (_xxh64_words(words, self.type_length), valid)


def _rotl(x, r: int):
    import numpy as np
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _xxh64_words(words, width: int):
    """XXH64 (seed 0) of each value's ``width`` (4 or 8) little-endian bytes, vectorised in numpy uint64 arithmetic
    (multiplication wraps mod 2**64): the short-input path of Collet's specification, then the avalanche."""
    import numpy as np
    u = np.uint64
    acc = np.full(words.shape, (_P5 + width) & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64)
    if width == 8:
        k1 = _rotl(words * u(_P2), 31) * u(_P1)
        acc ^= k1
        acc = _rotl(acc, 27) * u(_P1) + u(_P4)
    else:
        acc ^= (words & u(0xFFFFFFFF)) * u(_P1)
        acc = _rotl(acc, 23) * u(_P2) + u(_P3)
    acc ^= acc >> u(33)
    acc *= u(_P2)
    acc ^= acc >> u(29)
    acc *= u(_P3)
    acc ^= acc >> u(32)
    return acc


# ---- the filter --------------------------------------------------------------------------------------------------
class SplitBlockBloomFilter:
    """A Parquet split-block Bloom filter (the bitset of one column chunk) and how its column encodes values.

    Build an empty one, ``SplitBlockBloomFilter(num_bytes, physical_type)`` (see :func:`optimal_num_bytes`), or
    read them from a file (:func:`read_bloom_filters`). Values are given as Python values of the column's
    physical type: ints for INT32/INT64 (dates as days, timestamps as integers of the column's unit), floats for
    FLOAT/DOUBLE, str (hashed as UTF-8) or bytes for BYTE_ARRAY, bytes of ``type_length`` for
    FIXED_LEN_BYTE_ARRAY and INT96. A value the column cannot hold (an int out of its range, bytes of the wrong
    length) is certainly absent.

    :param num_bytes: the bitset's size, a multiple of 32 (writers use powers of two) up to 128 MiB.
    :param physical_type: the column's physical type name (``PHYSICAL_TYPES``).
    :param type_length: FIXED_LEN_BYTE_ARRAY's byte width.
    :param bit_width: an INT32/INT64 column's logical integer width (8, 16, 32, 64; default the physical one).
    :param signed: whether its logical integer type is signed (unsigned columns hold 0 .. 2**width - 1).
    """

    __slots__ = ("_words", "_encoding")

    def __init__(self, num_bytes, physical_type="BYTE_ARRAY", *, type_length=None, bit_width=None, signed=True):
        import numpy as np
        num_bytes = check_multiple("num_bytes", num_bytes, BLOCK_BYTES, BLOCK_BYTES, MAX_BYTES)
        self._encoding = _Encoding(physical_type, type_length, bit_width, signed)
        self._words = np.zeros((num_bytes // BLOCK_BYTES, 8), dtype="<u4")

    @classmethod
    def _from_bitset(cls, bitset, encoding: _Encoding) -> "SplitBlockBloomFilter":
        import numpy as np
        self = cls.__new__(cls)
        self._encoding = encoding
        self._words = np.frombuffer(bytes(bitset), dtype="<u4").reshape(-1, 8).copy()
        return self

    # -- description
    @property
    def num_bytes(self) -> int:
        """The bitset's size in bytes."""
        return self._words.nbytes

    @property
    def num_blocks(self) -> int:
        """The number of 256-bit blocks."""
        return self._words.shape[0]

    @property
    def physical_type(self) -> str:
        return self._encoding.physical_type

    @property
    def bitset(self) -> bytes:
        """The bitset as Parquet stores it (blocks of eight little-endian 32-bit words)."""
        return self._words.tobytes()

    @property
    def fill_ratio(self) -> float:
        """The fraction of bits set."""
        import numpy as np
        return float(np.unpackbits(self._words.view(np.uint8)).sum()) / (8 * self.num_bytes)

    def false_positive_rate(self, num_values) -> float:
        """The rate :func:`false_positive_rate` predicts for this size once ``num_values`` distinct values are in."""
        return false_positive_rate(self.num_bytes, num_values)

    def __repr__(self) -> str:
        return (f"<SplitBlockBloomFilter {self.physical_type}: {self.num_bytes:,} bytes "
                f"({self.num_blocks:,} blocks), fill={self.fill_ratio:.1%}>")

    def __eq__(self, other):
        if not isinstance(other, SplitBlockBloomFilter):
            return NotImplemented
        return (self._words.shape == other._words.shape and self.physical_type == other.physical_type
                and bool((self._words == other._words).all()))

    __hash__ = None  # mutable

    # -- hashes
    def _block_and_key(self, h: int):
        return ((h >> 32) * self.num_blocks) >> 32, h & 0xFFFFFFFF

    def insert_hash(self, h: int) -> None:
        """Set the eight bits of a 64-bit hash (the XXH64 of a plain-encoded value)."""
        block, x = self._block_and_key(h)
        words = self._words[block]
        for i, salt in enumerate(SALTS):
            words[i] |= 1 << (((x * salt) & 0xFFFFFFFF) >> 27)

    def might_contain_hash(self, h: int) -> bool:
        """Whether all eight bits of a 64-bit hash are set."""
        block, x = self._block_and_key(h)
        words = self._words[block].tolist()
        for i, salt in enumerate(SALTS):
            if not words[i] >> (((x * salt) & 0xFFFFFFFF) >> 27) & 1:
                return False
        return True

    def _masks(self, hashes):
        import numpy as np
        blocks = ((hashes >> np.uint64(32)) * np.uint64(self.num_blocks)) >> np.uint64(32)
        x = (hashes & np.uint64(0xFFFFFFFF))[:, None]
        shifts = ((x * np.array(SALTS, dtype=np.uint64)) & np.uint64(0xFFFFFFFF)) >> np.uint64(27)
        return blocks.astype(np.intp), (np.uint32(1) << shifts.astype(np.uint32))

    # -- values
    def hash_value(self, value) -> Optional[int]:
        """XXH64 (seed 0) of the value's plain encoding; None if the column cannot hold the value."""
        data = self._encoding.encode(value)
        return None if data is None else _xxh64(data)

    def insert(self, value) -> None:
        """Add one value; ValueError if the column's type cannot hold it."""
        h = self.hash_value(value)
        if h is None:
            raise ValueError(f"a {self._describe_type()} column cannot hold {value!r}")
        self.insert_hash(h)

    def insert_many(self, values) -> None:
        """Add many values (numpy arrays of numbers are hashed in numpy; other values one by one)."""
        import numpy as np
        hashes, valid = self._encoding.hashes(values)
        if not valid.all():
            raise ValueError(f"a {self._describe_type()} column cannot hold some of these values "
                             f"(the first at index {int(np.argmin(valid))})")
        blocks, masks = self._masks(hashes)
        for lane in range(8):
            np.bitwise_or.at(self._words[:, lane], blocks, masks[:, lane])

    def might_contain(self, value) -> bool:
        """False: the value is certainly not in the column chunk. True: it might be."""
        h = self.hash_value(value)
        return h is not None and self.might_contain_hash(h)

    __contains__ = might_contain

    def might_contain_many(self, values):
        """``might_contain`` of many values, as a numpy bool array."""
        import numpy as np
        hashes, valid = self._encoding.hashes(values)
        blocks, masks = self._masks(hashes)
        hit = ((self._words[blocks] & masks) != 0).all(axis=1)
        return hit & valid

    def _describe_type(self) -> str:
        e = self._encoding
        if e.physical_type == "FIXED_LEN_BYTE_ARRAY":
            return f"FIXED_LEN_BYTE_ARRAY({e.type_length})"
        if e.int_range is not None:
            low, high = e.int_range
            return f"{e.physical_type} [{low}, {high - 1}]"
        return e.physical_type

    # -- the serialized form (what sits at bloom_filter_offset in a Parquet file)
    def to_bytes(self) -> bytes:
        """The Thrift ``BloomFilterHeader`` (numBytes; SPLIT_BLOCK; XXHASH; UNCOMPRESSED) followed by the bitset:
        the bytes a Parquet writer stores for a column chunk's filter."""
        empty_union_member = {1: _thrift.Struct({})}
        header = _thrift.encode_struct({1: _thrift.I32(self.num_bytes), 2: _thrift.Struct(empty_union_member),
                                        3: _thrift.Struct(empty_union_member), 4: _thrift.Struct(empty_union_member)})
        return header + self.bitset

    @classmethod
    def from_bytes(cls, data, physical_type="BYTE_ARRAY", *, type_length=None, bit_width=None,
                   signed=True) -> "SplitBlockBloomFilter":
        """Parse what :meth:`to_bytes` (or a Parquet writer) produced; FormatError when damaged, ValueError when it
        is a filter of an algorithm, hash or compression this reader does not know."""
        data = bytes(data)
        encoding = _Encoding(physical_type, type_length, bit_width, signed)
        header, start = _parse_header(data)
        unsupported = _unsupported(header)
        if unsupported:
            raise ValueError(f"the Bloom filter uses {unsupported}")
        num_bytes = header[1]
        if len(data) - start != num_bytes:
            raise FormatError(f"the header says the bitset holds {num_bytes} bytes, {len(data) - start} follow it")
        return cls._from_bitset(data[start:], encoding)


class NoBloomFilter:
    """Stands for a column chunk without a usable Bloom filter: every value might be present (never a false
    negative). ``reason`` says why (no filter written, or one this reader does not support)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def might_contain(self, value) -> bool:
        return True

    __contains__ = might_contain

    def might_contain_many(self, values):
        import numpy as np
        return np.ones(len(values), dtype=bool)

    def __repr__(self) -> str:
        return f"<NoBloomFilter: {self.reason}>"


# ---- headers and footers -----------------------------------------------------------------------------------------
def _parse_header(data: bytes):
    """(BloomFilterHeader fields, offset of the bitset) from bytes starting at the header."""
    try:
        header, end = _thrift.decode_struct(data, 0)
    except _thrift.ThriftError as exc:
        raise FormatError(f"damaged Bloom filter header: {exc}") from None
    for field, name in ((1, "numBytes"), (2, "algorithm"), (3, "hash"), (4, "compression")):
        if field not in header:
            raise FormatError(f"the Bloom filter header lacks its required field {name}")
    num_bytes = header[1]
    if type(num_bytes) is not int:
        raise FormatError(f"the Bloom filter header's numBytes is not an integer: {num_bytes!r}")
    if num_bytes < BLOCK_BYTES or num_bytes % BLOCK_BYTES or num_bytes > MAX_BYTES:
        raise FormatError(f"the Bloom filter header says numBytes = {num_bytes}: expected a multiple of "
                          f"{BLOCK_BYTES} between {BLOCK_BYTES} and {MAX_BYTES}")
    for field, name in ((2, "algorithm"), (3, "hash"), (4, "compression")):
        if not isinstance(header[field], dict) or len(header[field]) != 1:
            raise FormatError(f"the Bloom filter header's {name} is not a union with one member: {header[field]!r}")
    return header, end


def _unsupported(header) -> Optional[str]:
    """What this reader does not know in a well-formed header (a newer writer's algorithm, hash or compression)."""
    for field, name, known in ((2, "algorithm", "SPLIT_BLOCK"), (3, "hash", "XXHASH"),
                               (4, "compression", "UNCOMPRESSED")):
        (member,) = header[field]
        if member != 1:
            return f"{name} member {member}, not {known} (1)"
    return None


class _Column:
    """A leaf column of the schema: its path, physical type and integer range information."""

    def __init__(self, path: tuple, element: dict):
        self.path = path
        type_id = element.get(1)
        if type_id not in PHYSICAL_TYPES:
            raise FormatError(f"column {'.'.join(path)!r} has physical type {type_id!r}, not one of Parquet's")
        self.physical_type = PHYSICAL_TYPES[type_id]
        self.type_length = element.get(2)
        self.bit_width, self.signed = None, True
        logical, converted = element.get(10), element.get(6)
        if isinstance(logical, dict) and isinstance(logical.get(10), dict):  # LogicalType.INTEGER (IntType)
            width, signed = logical[10].get(1), logical[10].get(2)
            if width in (8, 16, 32, 64) and isinstance(signed, bool):
                self.bit_width, self.signed = width, signed
        elif converted in _CONVERTED_INTS:
            self.bit_width, self.signed = _CONVERTED_INTS[converted]

    def encoding(self) -> _Encoding:
        try:
            return _Encoding(self.physical_type, self.type_length, self.bit_width, self.signed)
        except ValueError as exc:
            raise FormatError(f"column {'.'.join(self.path)!r}: {exc}") from None


# ConvertedType ids of the integer annotations: UINT_8..UINT_64 = 11..14, INT_8..INT_64 = 15..18.
_CONVERTED_INTS = {11: (8, False), 12: (16, False), 13: (32, False), 14: (64, False),
                   15: (8, True), 16: (16, True), 17: (32, True), 18: (64, True)}


def _leaf_columns(schema: list) -> dict:
    """The schema's leaves by path: the flattened tree is depth first, each group gives its num_children."""
    if not isinstance(schema, list) or not schema or not all(isinstance(e, dict) for e in schema):
        raise FormatError("the footer's schema is not a list of SchemaElement structs")
    leaves, position = {}, 1

    def walk(prefix: tuple, count: int, depth: int):
        nonlocal position
        if depth > 64:
            raise FormatError("the footer's schema nests deeper than 64 levels")
        for _ in range(count):
            if position >= len(schema):
                raise FormatError("the footer's schema has fewer elements than its groups announce")
            element = schema[position]
            position += 1
            name = element.get(4)
            if not isinstance(name, bytes):
                raise FormatError("a SchemaElement of the footer has no name")
            path = prefix + (name.decode("utf-8", "replace"),)
            children = element.get(5)
            if isinstance(children, int) and not isinstance(children, bool) and children > 0:
                if children > len(schema):
                    raise FormatError(f"a schema group announces {children} children, the schema has {len(schema)}")
                walk(path, children, depth + 1)
            else:
                leaves[path] = _Column(path, element)

    root_children = schema[0].get(5)
    if not isinstance(root_children, int) or isinstance(root_children, bool) or not 0 <= root_children <= len(schema):
        raise FormatError(f"the footer's schema root has num_children {root_children!r}")
    walk((), root_children, 0)
    return leaves


def _read_footer(handle, size: int) -> dict:
    if size < 12:
        raise FormatError(f"a Parquet file is at least 12 bytes, this one has {size}")
    handle.seek(0)
    head = handle.read(4)
    handle.seek(size - 8)
    tail = handle.read(8)
    if tail[4:] == b"PARE":
        raise FormatError("the file's footer is encrypted (PARE): encrypted Parquet files are not supported")
    if head != _MAGIC or tail[4:] != _MAGIC:
        raise FormatError(f"not a Parquet file: it should start and end with {_MAGIC!r}, "
                          f"found {head!r} and {tail[4:]!r}")
    length = int.from_bytes(tail[:4], "little")
    if length > size - 12 or length > _MAX_FOOTER:
        raise FormatError(f"the footer length {length} does not fit a file of {size} bytes")
    handle.seek(size - 8 - length)
    data = handle.read(length)
    try:
        footer, end = _thrift.decode_struct(data, 0)
    except _thrift.ThriftError as exc:
        raise FormatError(f"damaged Parquet footer: {exc}") from None
    if end != length:
        raise FormatError(f"the footer's FileMetaData ends at byte {end} of its {length}")
    return footer


def _column_key(column) -> tuple:
    if isinstance(column, str):
        return tuple(column.split("."))
    if isinstance(column, (tuple, list)) and column and all(isinstance(c, str) for c in column):
        return tuple(column)
    raise TypeError(f"column must be a name (nested fields joined by '.') or a tuple of names, got {column!r}")


def _read_filter(handle, size: int, chunk_meta: dict, encoding: _Encoding):
    offset, length = chunk_meta.get(14), chunk_meta.get(15)
    if offset is None:
        return NoBloomFilter("this column chunk has no Bloom filter")
    if type(offset) is not int or not 4 <= offset < size:
        raise FormatError(f"bloom_filter_offset {offset!r} lies outside the file's {size} bytes")
    if length is not None:
        if type(length) is not int or length <= 0 or offset + length > size:
            raise FormatError(f"bloom_filter_length {length!r} at offset {offset} does not fit the file's "
                              f"{size} bytes")
        if length > MAX_BYTES + 4096:
            raise FormatError(f"bloom_filter_length {length} exceeds the largest filter ({MAX_BYTES} bytes)")
    handle.seek(offset)
    probe = handle.read(min(_HEADER_PROBE if length is None else length, size - offset))
    header, start = _parse_header(probe)
    num_bytes = header[1]
    if length is not None and start + num_bytes != length:
        raise FormatError(f"bloom_filter_length is {length}, but the header ({start} bytes) announces a "
                          f"{num_bytes}-byte bitset")
    if offset + start + num_bytes > size:
        raise FormatError(f"the {num_bytes}-byte bitset at offset {offset + start} runs past the file's end ({size})")
    unsupported = _unsupported(header)
    if unsupported:
        return NoBloomFilter(f"the Bloom filter uses {unsupported}: unsupported")
    if len(probe) >= start + num_bytes:
        bitset = probe[start:start + num_bytes]
    else:
        handle.seek(offset + start)
        bitset = handle.read(num_bytes)
    return SplitBlockBloomFilter._from_bitset(bitset, encoding)


def read_bloom_filters(path: Union[str, os.PathLike], column) -> list:
    """One filter per row group of ``column`` in the Parquet file at ``path``, in row-group order.

    Each is a :class:`SplitBlockBloomFilter`, or a :class:`NoBloomFilter` (always True) where the writer stored
    none. ``column`` is a top-level column's name, a nested one's path joined by ``"."``, or a tuple of names.
    FormatError when the file is damaged; KeyError naming the columns when there is no such column.
    """
    key = _column_key(column)
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        footer = _read_footer(handle, size)
        leaves = _leaf_columns(footer.get(2))
        if key not in leaves:
            names = ", ".join(repr(".".join(p)) for p in leaves)
            raise KeyError(f"the file has no column {'.'.join(key)!r}; its columns: {names}")
        encoding = leaves[key].encoding()
        row_groups = footer.get(4, [])
        if not isinstance(row_groups, list):
            raise FormatError("the footer's row_groups is not a list")
        filters = []
        for index, group in enumerate(row_groups):
            chunks = group.get(1) if isinstance(group, dict) else None
            if not isinstance(chunks, list):
                raise FormatError(f"row group {index} has no list of column chunks")
            meta = _chunk_meta(chunks, key, index)
            filters.append(_read_filter(handle, size, meta, encoding))
        return filters


def _chunk_meta(chunks: list, key: tuple, index: int) -> dict:
    for chunk in chunks:
        meta = chunk.get(3) if isinstance(chunk, dict) else None
        if not isinstance(meta, dict):
            raise FormatError(f"a column chunk of row group {index} has no ColumnMetaData")
        path = meta.get(3)
        if isinstance(path, list) and tuple(p.decode("utf-8", "replace") if isinstance(p, bytes) else p
                                            for p in path) == key:
            if isinstance(chunk.get(1), bytes):
                raise FormatError(f"row group {index} keeps column {'.'.join(key)!r} in another file: not supported")
            return meta
    raise FormatError(f"row group {index} has no column chunk for {'.'.join(key)!r}")


def row_groups_that_may_contain(path, column, value) -> list:
    """The indices of the row groups whose ``column`` might hold ``value`` (all of those without a filter).

    A reader can skip every other row group: their filters say the value is certainly absent.
    """
    return [index for index, f in enumerate(read_bloom_filters(path, column)) if f.might_contain(value)]
