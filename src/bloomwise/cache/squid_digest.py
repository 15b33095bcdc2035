"""Squid's Cache Digest: the deployed descendant of Summary Cache, read and written byte for byte.

A Cache Digest is a plain Bloom filter with k = 4 over Squid's *store keys*. Everything below follows Squid's
own source (``src/CacheDigest.cc``, ``src/store_digest.cc``, ``src/PeerDigest.h``, ``src/peer_digest.cc``,
``src/store_key_md5.cc``); the design is the one described in Rousskov and Wessels, *Cache Digests* (Computer
Networks and ISDN Systems 30, 1998).

Store key::

    key = MD5(method_id as one byte || URL)          method_id: GET = 1, POST = 2, PUT = 3, HEAD = 4, ...

Bit positions (four hash functions, ``bit_count = mask_size * 8``)::

    w_i = big-endian uint32 at bytes 4i .. 4i+3 of the key      i = 0..3
    b_i = w_i mod bit_count
    bit b is  mask[b >> 3] & (1 << (b & 7))

The reply body served at ``/squid-internal-periodic/store_digest`` (``Content-Type: application/cache-digest``)
is a 128-byte control block followed by the mask::

    offset size  field              (integers are big-endian, "network order")
         0    2  version.current    5 for Squid 2.x-6.x
         2    2  version.required   3: the oldest reader version that understands this digest
         4    4  capacity           entries the digest was sized for (> 0)
         8    4  count              entries added
        12    4  del_count          deletions counted (Squid never clears bits: it rebuilds the digest)
        16    4  mask_size          bytes of mask; must equal (capacity * bits_per_entry + 7) // 8
        20    1  bits_per_entry     Squid's default: 5
        21    1  hash_func_count    4
        22  106  reserved           zeros
       128    .  mask               mask_size bytes

The false-positive rate after ``n`` distinct keys is the classic Bloom filter's ``(1 - (1 - 1/m)^(4n))^4`` with
``m = 8 mask_size``; from a received digest the best estimate is the fill ratio to the fourth power (each of the
four probes of an absent key lands on a set bit with probability ``fill``).

>>> d = CacheDigest(capacity=100, bits_per_entry=5)
>>> d.add_url("http://example.com/a")
True
>>> "GET http://example.com/a" in d, d.contains_url("http://example.com/a", method="HEAD")
(True, False)
>>> e = CacheDigest.from_bytes(d.to_bytes())
>>> e == d, len(d.to_bytes())
(True, 191)
"""
from __future__ import annotations

import hashlib
import math
import struct
import time
from typing import Iterable, Optional

from bloomwise.errors import FormatError
from bloomwise.paradox.posterior import posterior

__all__ = [
    "CBLOCK_SIZE",
    "DIGEST_PATH",
    "DIGEST_CONTENT_TYPE",
    "SQUID_METHOD_IDS",
    "CacheDigest",
    "SquidDigestSummary",
    "store_key",
    "mask_size_for",
    "split_request_key",
]

#: Bytes of the control block that precedes the mask.
CBLOCK_SIZE = 128
#: Where a Squid (and a bloomwise proxy) serves its digest, and the content type of the reply.
DIGEST_PATH = "/squid-internal-periodic/store_digest"
DIGEST_CONTENT_TYPE = "application/cache-digest"
#: The digest version this module writes, and the oldest version it reads (Squid's ``CacheDigestVer``: 5, 3).
VERSION_CURRENT = 5
VERSION_REQUIRED = 3
#: Squid's digests always use four hash functions (the four 32-bit words of the MD5 key).
HASH_FUNC_COUNT = 4
#: Squid's default ``digest_bits_per_entry``.
DEFAULT_BITS_PER_ENTRY = 5
#: Default upper bound on the mask a reader accepts (64 MiB: a digest of ~100 million entries at 5 bits each).
DEFAULT_MAX_MASK_SIZE = 64 * 2**20
#: Squid computes bit indices in 31-bit-safe integers: capacity * bits_per_entry + 7 must stay below INT_MAX.
_INT_MAX = 2**31 - 1

#: Squid's method ids (``Http::MethodType``): the first byte hashed into a store key.
SQUID_METHOD_IDS = {"GET": 1, "POST": 2, "PUT": 3, "HEAD": 4, "CONNECT": 5, "TRACE": 6, "OPTIONS": 7, "DELETE": 8}

_CBLOCK = struct.Struct(">hhiiiiBB")  # version.current, version.required, capacity, count, del_count, mask_size,
#                                       bits_per_entry, hash_func_count; then 106 reserved bytes
_WORDS = struct.Struct(">IIII")


def store_key(url: str | bytes, method: str = "GET") -> bytes:
    """Squid's public store key of a request: ``MD5(method_id byte || URL)`` (16 bytes).

    >>> store_key("http://example.com/").hex()
    '5c9109034c1d089fb6d92f7258b2f5c3'
    """
    try:
        method_id = SQUID_METHOD_IDS[method.upper()]
    except KeyError:
        raise ValueError(f"method {method!r} has no Squid method id; expected one of {sorted(SQUID_METHOD_IDS)}") \
            from None
    data = url.encode("utf-8") if isinstance(url, str) else bytes(url)
    return hashlib.md5(bytes((method_id,)) + data, usedforsecurity=False).digest()  # a hash, not security


def split_request_key(key: str) -> tuple[str, str]:
    """Split a cache key ``"METHOD URL"`` (``bloomwise.cache`` keys) into (method, URL); a bare URL means GET.

    >>> split_request_key("GET http://a/b"), split_request_key("http://a/b")
    (('GET', 'http://a/b'), ('GET', 'http://a/b'))
    """
    method, sep, url = key.partition(" ")
    if sep and method.upper() in SQUID_METHOD_IDS:
        return method.upper(), url
    return "GET", key


def mask_size_for(capacity: int, bits_per_entry: int) -> int:
    """Bytes of mask for ``capacity`` entries: ``(capacity * bits_per_entry + 7) // 8`` (Squid's CalcMaskSize).

    >>> mask_size_for(100, 5)
    63
    """
    if capacity <= 0 or bits_per_entry <= 0:
        raise ValueError(f"capacity and bits_per_entry must be positive, got {capacity} and {bits_per_entry}")
    bit_count = capacity * bits_per_entry + 7
    if bit_count >= _INT_MAX:
        raise ValueError(f"capacity * bits_per_entry = {capacity * bits_per_entry} is too large for a Squid digest "
                         f"(must stay below {_INT_MAX - 7})")
    return bit_count // 8


def _bit_indices(key: bytes, bit_count: int) -> tuple[int, int, int, int]:
    w0, w1, w2, w3 = _WORDS.unpack(key)
    return w0 % bit_count, w1 % bit_count, w2 % bit_count, w3 % bit_count


class CacheDigest:
    """A Squid Cache Digest (k = 4 Bloom filter over MD5 store keys), built locally or received from a peer.

    :param capacity: entries to size for (Squid uses the entries in its store); the mask has
        ``(capacity * bits_per_entry + 7) // 8`` bytes.
    :param bits_per_entry: bits of mask per entry (Squid's ``digest_bits_per_entry``, default 5).

    ``key in digest`` takes a ``bloomwise.cache`` key (``"GET http://host/path"``) or a bare URL (GET);
    :meth:`contains_url` takes the method apart, :meth:`contains_store_key` a 16-byte store key.
    """

    __slots__ = ("capacity", "bits_per_entry", "count", "del_count", "mask", "version_current", "version_required")
    __hash__ = None  # mutable

    def __init__(self, capacity: int, bits_per_entry: int = DEFAULT_BITS_PER_ENTRY):
        if not isinstance(capacity, int) or not isinstance(bits_per_entry, int):
            raise TypeError("capacity and bits_per_entry must be int")
        if bits_per_entry > 255:
            raise ValueError(f"bits_per_entry must fit in one byte (1..255), got {bits_per_entry}")
        self.capacity = capacity
        self.bits_per_entry = bits_per_entry
        self.mask = bytearray(mask_size_for(capacity, bits_per_entry))
        self.count = 0
        self.del_count = 0
        self.version_current = VERSION_CURRENT
        self.version_required = VERSION_REQUIRED

    # -- building ---------------------------------------------------------------------------------------------
    @classmethod
    def from_keys(cls, keys: Iterable[str], *, capacity: Optional[int] = None,
                  bits_per_entry: int = DEFAULT_BITS_PER_ENTRY) -> "CacheDigest":
        """A digest of ``bloomwise.cache`` keys (``"GET url"``) or URLs, sized for ``capacity`` (default: the
        number of keys, at least 1, as Squid sizes its digest for the entries in use)."""
        keys = list(keys)
        digest = cls(max(1, len(keys) if capacity is None else capacity), bits_per_entry)
        for key in keys:
            method, url = split_request_key(key)
            digest.add_url(url, method=method)
        return digest

    def add_store_key(self, key: bytes) -> bool:
        """Set the four bits of a 16-byte store key; True if at least one bit was clear (the key was new)."""
        if len(key) != 16:
            raise ValueError(f"a store key has 16 bytes (MD5), got {len(key)}")
        mask = self.mask
        new = False
        for b in _bit_indices(key, len(mask) * 8):
            bit = 1 << (b & 7)
            if not mask[b >> 3] & bit:
                mask[b >> 3] |= bit
                new = True
        self.count += 1
        return new

    def add_url(self, url: str | bytes, *, method: str = "GET") -> bool:
        """Add the store key of ``method url``; True if the key was certainly new."""
        return self.add_store_key(store_key(url, method))

    # -- queries ----------------------------------------------------------------------------------------------
    def contains_store_key(self, key: bytes) -> bool:
        """True if all four bits of the 16-byte store key are set (might be cached), False if certainly not."""
        if len(key) != 16:
            raise ValueError(f"a store key has 16 bytes (MD5), got {len(key)}")
        mask = self.mask
        return all(mask[b >> 3] & (1 << (b & 7)) for b in _bit_indices(key, len(mask) * 8))

    def contains_url(self, url: str | bytes, *, method: str = "GET") -> bool:
        """Might the peer hold ``method url``?"""
        return self.contains_store_key(store_key(url, method))

    def __contains__(self, key: str) -> bool:
        method, url = split_request_key(key)
        return self.contains_url(url, method=method)

    may_contain = __contains__

    @property
    def mask_size(self) -> int:
        """Bytes of mask."""
        return len(self.mask)

    @property
    def fill_ratio(self) -> float:
        """Fraction of the mask's bits that are set."""
        return int.from_bytes(self.mask, "little").bit_count() / (8 * len(self.mask))

    def estimated_fpr(self) -> float:
        """The false-positive rate this mask gives an absent key: ``fill_ratio ** 4``."""
        return self.fill_ratio ** HASH_FUNC_COUNT

    def approx_count(self) -> float:
        """Distinct keys estimated from the fill (Swamidass and Baldi): ``-m/k ln(1 - fill)``."""
        fill = self.fill_ratio
        m = 8 * len(self.mask)
        if fill >= 1.0:
            return math.inf
        return -m / HASH_FUNC_COUNT * math.log1p(-fill)

    # -- the wire form ----------------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The exact reply body Squid serves: the 128-byte control block, then the mask."""
        cblock = _CBLOCK.pack(self.version_current, self.version_required, self.capacity,
                              min(self.count, _INT_MAX), min(self.del_count, _INT_MAX), len(self.mask),
                              self.bits_per_entry, HASH_FUNC_COUNT)
        return cblock + bytes(CBLOCK_SIZE - len(cblock)) + bytes(self.mask)

    @classmethod
    def read_cblock(cls, data: bytes, *, max_mask_size: int = DEFAULT_MAX_MASK_SIZE) -> dict:
        """Parse and check a control block (the first 128 bytes of a digest); returns its fields.

        Raises FormatError for everything Squid's reader rejects (versions, non-positive sizes, a mask size
        that does not follow from capacity and bits per entry, a hash count other than 4), and for a mask
        larger than ``max_mask_size`` bytes, before anything is allocated for it.
        """
        if len(data) < CBLOCK_SIZE:
            raise FormatError(f"Squid cache digest truncated: {len(data)} bytes, expected at least the "
                              f"{CBLOCK_SIZE}-byte control block")
        (current, required, capacity, count, del_count, mask_size, bits_per_entry,
         hash_func_count) = _CBLOCK.unpack_from(data)
        if required > VERSION_CURRENT:
            raise FormatError(f"Squid cache digest requires reader version {required}; this reader is version "
                              f"{VERSION_CURRENT}")
        if current < VERSION_REQUIRED:
            raise FormatError(f"Squid cache digest version {current} is older than the oldest readable "
                              f"({VERSION_REQUIRED})")
        if required > current:
            raise FormatError(f"Squid cache digest control block inconsistent: required version {required} > "
                              f"current version {current}")
        if capacity <= 0 or mask_size <= 0 or bits_per_entry <= 0 or count < 0 or del_count < 0:
            raise FormatError(f"Squid cache digest control block corrupted: capacity={capacity}, "
                              f"mask_size={mask_size}, bits_per_entry={bits_per_entry}, count={count}, "
                              f"del_count={del_count} (sizes must be positive, counts non-negative)")
        if hash_func_count != HASH_FUNC_COUNT:
            raise FormatError(f"Squid cache digest uses {hash_func_count} hash functions; expected "
                              f"{HASH_FUNC_COUNT}")
        if mask_size > max_mask_size:
            raise FormatError(f"Squid cache digest mask of {mask_size} bytes exceeds the limit of "
                              f"{max_mask_size} bytes")
        if capacity * bits_per_entry + 7 >= _INT_MAX or mask_size != (capacity * bits_per_entry + 7) // 8:
            raise FormatError(f"Squid cache digest control block inconsistent: mask_size={mask_size}, expected "
                              f"(capacity * bits_per_entry + 7) // 8 = {(capacity * bits_per_entry + 7) // 8} "
                              f"for capacity={capacity}, bits_per_entry={bits_per_entry}")
        return {"version_current": current, "version_required": required, "capacity": capacity, "count": count,
                "del_count": del_count, "mask_size": mask_size, "bits_per_entry": bits_per_entry}

    @classmethod
    def from_bytes(cls, data: bytes, *, max_mask_size: int = DEFAULT_MAX_MASK_SIZE) -> "CacheDigest":
        """Read a digest (control block + mask) as Squid serves it; FormatError if anything is wrong.

        >>> CacheDigest.from_bytes(b"\\x00" * 10)
        Traceback (most recent call last):
        ...
        bloomwise.errors.FormatError: Squid cache digest truncated: 10 bytes, expected at least the 128-byte control block
        """
        data = memoryview(data).cast("B")
        fields = cls.read_cblock(data, max_mask_size=max_mask_size)
        expected = CBLOCK_SIZE + fields["mask_size"]
        if len(data) != expected:
            what = "truncated" if len(data) < expected else "has trailing bytes"
            raise FormatError(f"Squid cache digest {what}: {len(data)} bytes, expected {expected} "
                              f"(128-byte control block + mask_size {fields['mask_size']})")
        digest = cls.__new__(cls)
        digest.capacity = fields["capacity"]
        digest.bits_per_entry = fields["bits_per_entry"]
        digest.count = fields["count"]
        digest.del_count = fields["del_count"]
        digest.version_current = fields["version_current"]
        digest.version_required = fields["version_required"]
        digest.mask = bytearray(data[CBLOCK_SIZE:])
        return digest

    def __eq__(self, other) -> bool:
        if not isinstance(other, CacheDigest):
            return NotImplemented
        return (self.capacity, self.bits_per_entry, self.count, self.del_count, self.mask) == \
            (other.capacity, other.bits_per_entry, other.count, other.del_count, other.mask)

    def __repr__(self) -> str:
        return (f"<CacheDigest capacity={self.capacity} bits_per_entry={self.bits_per_entry} count={self.count} "
                f"mask_size={len(self.mask)} fill={self.fill_ratio:.3f}>")


class SquidDigestSummary:
    """A peer's Squid digest seen as a ``bloomwise.cache`` peer summary (what routing asks of a summary).

    Squid digests carry bits only and no version or instance id: every fetch replaces the whole summary, the
    ``version`` counts the fetches that changed it, and ``origin`` is None.

    :param digest: the received :class:`CacheDigest`.
    :param nbytes: its size on the wire.
    """

    kind = "squid-digest"
    origin = None

    def __init__(self, digest: CacheDigest, *, version: int = 1, nbytes: Optional[int] = None,
                 received_at: Optional[float] = None):
        self.digest = digest
        self.version = version
        self.nbytes = len(digest.mask) + CBLOCK_SIZE if nbytes is None else nbytes
        self.received_at = time.time() if received_at is None else received_at
        self._fpr = digest.estimated_fpr()

    @classmethod
    def from_bytes(cls, data: bytes, *, version: int = 1, max_mask_size: int = DEFAULT_MAX_MASK_SIZE):
        """Check and read a digest reply body (FormatError on bad data)."""
        return cls(CacheDigest.from_bytes(data, max_mask_size=max_mask_size), version=version, nbytes=len(data))

    @property
    def filter(self) -> CacheDigest:
        """The digest itself (``key in summary.filter`` is what routing asks)."""
        return self.digest

    @property
    def fpr(self) -> float:
        """The digest's false-positive rate estimated from its fill: ``fill ** 4``."""
        return self._fpr

    @property
    def num_keys(self) -> int:
        """Entries the peer says it added (the control block's count)."""
        return self.digest.count

    def may_contain(self, key: str) -> bool:
        """False if the peer certainly does not hold ``key`` ("GET url" or a URL), True if it might."""
        return key in self.digest

    __contains__ = may_contain

    def counters(self, key):
        """Squid digests have no counters."""
        raise TypeError("a Squid cache digest holds bits, not counters")

    def estimated_fpr(self) -> float:
        """The digest's false-positive rate estimated from its fill: ``fill ** 4``."""
        return self._fpr

    def posterior(self, key: str, prior: float) -> float:
        """``Pr(peer holds key | digest)``: 0 on a negative; after a positive, Bayes with the estimated FPR,
        ``P / (P + (1 - P) FPR)`` (the Bloom paradox, section IV.A)."""
        if not self.may_contain(key):
            return 0.0

        return posterior(prior, self._fpr)
