"""Taking over RedisBloom's filters: ``from_redisbloom(client, key)`` reads a RedisBloom filter (the ``BF.*``
commands of the RedisBloom module) with ``BF.SCANDUMP`` into ``RedisBloomSnapshot``, a local read-only structure
that answers exactly as ``BF.EXISTS`` / ``BF.MEXISTS`` did on the filter it copied (docs/redis.md, "Taking over
RedisBloom's filters").

What RedisBloom stores (its dump format, read here from the bytes, as of RedisBloom 2.x): a filter is a chain of
sub-filters ("links"); a scaling filter adds a link of ``expansion`` times the capacity and half the error rate when
the newest is full. ``BF.SCANDUMP key 0`` answers the header, little-endian and packed::

    header: size u64 (keys in all links), nfilters u32, options u32, growth u32             (20 bytes)
    link:   bytes u64, bits u64, size u64, error f64, bpe f64, hashes u32, entries u64, n2 u8  (53 bytes each)

then ``BF.SCANDUMP key <iter>`` answers ``(iter + len(chunk), chunk)``: the links' bit arrays one after the other in
chunks of at most 16 MiB, and ``(0, "")`` at the end. A key is the bytes the client sent (redis-py: ``str`` as UTF-8,
``int`` and ``float`` as their decimal text); its hashes are a = MurmurHash64A(key, 0xc6a4a7935bd1e995) and
b = MurmurHash64A(key, a), and probe i of a link is bit (a + i b) mod 2**64 mod M, M = 2**n2 when n2 > 0 and the
link's ``bits`` otherwise, bit x being bit x % 8 of byte x // 8. A key is present when all k probes of one link are
set (k = ``hashes``). The hashing runs in C (``_native/served.pyx``: ``redisbloom_hashes``, ``redisbloom_test``).

Everything read is untrusted: the header must describe a filter RedisBloom could have built (every check of its own
loader: bits = 8 bytes, n2 <= 63, 2**n2 <= bits, k = ceil(ln 2 * bpe), the links' sizes add up to the size), its bit
arrays together at most ``max_bytes`` (checked before anything is allocated), and every chunk must start where the
previous one ended, be at most 16 MiB and fit its link; otherwise ``FormatError``.
"""
from __future__ import annotations

import math
import struct
from typing import Callable, NamedTuple

import numpy as np

from bloomwise._native.served import redisbloom_hashes, redisbloom_test
from bloomwise.errors import FormatError
from bloomwise.redis.errors import FilterNotFoundError, ServedFilterError, call_server, redis_module, server_address

__all__ = ["from_redisbloom", "read_scandump", "scandump_steps", "scandump_error", "key_name", "RedisBloomSnapshot",
           "RedisBloomLink", "redisbloom_key_bytes",
           "DEFAULT_MAX_BYTES", "MAX_CHUNK_BYTES"]

#: The largest chunk BF.SCANDUMP sends (RedisBloom's MAX_SCANDUMP_SIZE).
MAX_CHUNK_BYTES = 16 * 2 ** 20
#: The default bound on a copied filter's bit arrays (all links together).
DEFAULT_MAX_BYTES = 2 ** 32
#: The most links a header may name (a chain doubling from one key would hold 2**64 keys in 64 links; growth 1 can
#: make more, but a header of this many links is 53 kB).
MAX_LINKS = 1024
#: The largest k: an error rate of 1e-300 needs 997 probes.
MAX_LINK_HASHES = 1100

_HEADER = struct.Struct("<QIII")
_LINK = struct.Struct("<QQQddIQB")
# RedisBloom's bloom_init options
_OPT_NOROUND, _OPT_ENTS_IS_BITS, _OPT_FORCE64, _OPT_NO_SCALING = 1, 2, 4, 8
_LN2 = 0.693147180559945  # the constant RedisBloom computes k with: k = (int)ceil(LN2 * bpe)


class RedisBloomLink(NamedTuple):
    """One sub-filter of a RedisBloom filter, as its header describes it."""
    num_bytes: int
    num_cells: int     # "bits": the bits of its array
    num_keys: int      # keys added to this link ("size")
    error_rate: float
    bits_per_key: float
    num_hashes: int
    capacity: int      # "entries": the keys it was sized for
    log2_bits: int     # n2: 0, or M = 2**n2 (filters of RedisBloom 1.x)

    @property
    def modulus(self) -> int:
        """M, what (a + i b) is reduced by."""
        return 2 ** self.log2_bits if self.log2_bits else self.num_cells


class RedisBloomSnapshot:
    """A read-only copy of a RedisBloom filter: ``key in snapshot`` and ``contains_many`` answer as ``BF.EXISTS``
    and ``BF.MEXISTS`` did on the filter copied. Build it with :func:`from_redisbloom`.

    Keys are what a client sends: ``str`` (UTF-8), bytes-like, ``int`` and ``float`` (their decimal text, as
    redis-py sends them), numpy arrays of integers, ``'S'`` or ``'U'`` strings.
    """

    def __init__(self, links, *, num_keys: int, options: int, growth: int, name: str = ""):
        self._links = [(link, bits) for link, bits in links]
        self._num_keys = num_keys
        self._options = options
        self._growth = growth
        self._name = name

    @property
    def links(self) -> list:
        """The sub-filters (``RedisBloomLink``), oldest first."""
        return [link for link, _ in self._links]

    @property
    def num_keys(self) -> int:
        """Keys RedisBloom counted as added (``BF.CARD``)."""
        return self._num_keys

    @property
    def capacity(self) -> int:
        """Keys the links were sized for together."""
        return sum(link.capacity for link, _ in self._links)

    @property
    def scaling(self) -> bool:
        """Whether the filter adds sub-filters when full (False: ``NONSCALING``)."""
        return not self._options & _OPT_NO_SCALING

    @property
    def expansion(self) -> int:
        """The growth factor of each new sub-filter (``EXPANSION``)."""
        return self._growth

    @property
    def nbytes(self) -> int:
        """Bytes of the bit arrays, all links together."""
        return sum(link.num_bytes for link, _ in self._links)

    def __repr__(self) -> str:
        return (f"<RedisBloomSnapshot {self._name!r}: {len(self._links)} sub-filter(s), {self.nbytes:,} bytes, "
                f"{self._num_keys:,} keys (read-only)>")

    def contains_many(self, keys):
        """A numpy bool array: whether each key might be present (as ``BF.MEXISTS`` answers)."""
        encoded = redisbloom_key_bytes(keys)
        hashes = redisbloom_hashes(encoded)
        found = np.zeros(len(encoded), dtype=bool)
        for link, bits in reversed(self._links):  # newest first, like RedisBloom; a key found needs no more tests
            todo = np.flatnonzero(~found)
            if todo.size == 0:
                break
            found[todo] = redisbloom_test(hashes[todo], bits, link.modulus, link.num_hashes)
        return found

    def __contains__(self, key) -> bool:
        """``key in snapshot``: False means certainly absent (``BF.EXISTS`` answers 0)."""
        return bool(self.contains_many([key])[0])


def redisbloom_key_bytes(keys) -> list:
    """The bytes a client sends for each key, which RedisBloom hashes: ``str`` as UTF-8, bytes-like as is, ``int``
    and ``float`` as redis-py writes them (decimal text, ``repr`` of a float). TypeError names anything else."""
    if isinstance(keys, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"a batch must be an iterable of keys, got one {type(keys).__name__}: wrap a single key "
                        "in a list")
    if isinstance(keys, np.ndarray):
        flat = keys.reshape(-1)
        if flat.dtype.kind in "iu":
            return [str(v).encode() for v in flat.tolist()]
        if flat.dtype.kind == "S":
            return flat.tolist()
        if flat.dtype.kind == "U":
            return [v.encode() for v in flat.tolist()]
        keys = flat.tolist()
    out = []
    for key in keys:
        if isinstance(key, bytes):
            out.append(key)
        elif isinstance(key, str):
            out.append(key.encode())
        elif isinstance(key, (bytearray, memoryview)):
            out.append(bytes(key))
        elif isinstance(key, bool) or not isinstance(key, (int, float, np.integer, np.floating)):
            raise TypeError(f"a RedisBloom key is str, bytes-like, int or float (what a client sends), got "
                            f"{type(key).__name__} ({key!r})")
        elif isinstance(key, (int, np.integer)):
            out.append(str(int(key)).encode())
        else:
            out.append(repr(float(key)).encode())
    return out


def _parse_header(data: bytes, max_bytes: int, where: str):
    """(size, options, growth, [RedisBloomLink]) of a BF.SCANDUMP header; FormatError when it is not one RedisBloom
    could have written."""
    if not isinstance(data, bytes) or len(data) < _HEADER.size:
        raise FormatError(f"{where}: the BF.SCANDUMP header has {len(data) if isinstance(data, bytes) else 0} "
                          f"bytes; at least {_HEADER.size} expected")
    size, nfilters, options, growth = _HEADER.unpack_from(data)
    if not 1 <= nfilters <= MAX_LINKS:
        raise FormatError(f"{where}: the header names {nfilters} sub-filters; 1 to {MAX_LINKS} expected")
    if len(data) != _HEADER.size + nfilters * _LINK.size:
        raise FormatError(f"{where}: the header of {nfilters} sub-filter(s) must have "
                          f"{_HEADER.size + nfilters * _LINK.size} bytes, got {len(data)}")
    if options & ~(_OPT_NOROUND | _OPT_ENTS_IS_BITS | _OPT_FORCE64 | _OPT_NO_SCALING):
        raise FormatError(f"{where}: unknown option bits {options:#x} in the header")
    if not options & _OPT_FORCE64:
        raise FormatError(f"{where}: a filter with 32-bit hashes (RedisBloom before 2.0) is not supported; "
                          "copy it into a new RedisBloom filter first")
    links, total = [], 0
    for index in range(nfilters):
        link = RedisBloomLink(*_LINK.unpack_from(data, _HEADER.size + index * _LINK.size))
        problem = None
        if not 0.0 < link.error_rate < 1.0:
            problem = f"error rate {link.error_rate!r} outside (0, 1)"
        elif link.log2_bits > 63:
            problem = f"n2 = {link.log2_bits} > 63"
        elif link.num_bytes == 0 or link.num_cells != 8 * link.num_bytes:
            problem = f"{link.num_cells} bits in {link.num_bytes} bytes"
        elif link.log2_bits and link.num_cells < 2 ** link.log2_bits:
            problem = f"{link.num_cells} bits, fewer than 2**n2 = 2**{link.log2_bits}"
        elif not (math.isfinite(link.bits_per_key) and 0 < link.bits_per_key
                  and 1 <= link.num_hashes <= MAX_LINK_HASHES
                  and link.num_hashes == math.ceil(_LN2 * link.bits_per_key)):
            problem = f"{link.num_hashes} hashes for {link.bits_per_key!r} bits per key"
        if problem:
            raise FormatError(f"{where}: sub-filter {index} is impossible: {problem}")
        total += link.num_bytes
        if total > max_bytes:
            raise FormatError(f"{where}: the filter's bit arrays hold more than {max_bytes:,} bytes (max_bytes); "
                              "pass a larger max_bytes to copy it")
        links.append(link)
    if sum(link.num_keys for link in links) != size:
        raise FormatError(f"{where}: the sub-filters hold {sum(link.num_keys for link in links)} keys together, "
                          f"the header says {size}")
    return size, options, growth, links


def read_scandump(scandump: Callable, *, max_bytes: int = DEFAULT_MAX_BYTES, name: str = "") -> RedisBloomSnapshot:
    """Read a whole BF.SCANDUMP sequence: ``scandump(iter)`` returns the reply ``(iter, data)`` of ``BF.SCANDUMP
    key iter``. Every reply is checked (module docstring); FormatError names what is wrong."""
    steps = scandump_steps(max_bytes=max_bytes, name=name)
    try:
        iteration = next(steps)
        while True:
            iteration = steps.send(scandump(iteration))
    except StopIteration as stop:
        return stop.value


def scandump_steps(*, max_bytes: int = DEFAULT_MAX_BYTES, name: str = ""):
    """The reading of a BF.SCANDUMP sequence as steps: yields the iterator to ask for next, receives the reply
    ``(iter, data)``, returns the ``RedisBloomSnapshot`` (``read_scandump`` drives it with redis-py, the asyncio
    ``from_redisbloom`` with redis.asyncio)."""
    where = f"BF.SCANDUMP {name}" if name else "BF.SCANDUMP"

    def checked(iteration, answer):
        if (not isinstance(answer, (list, tuple)) or len(answer) != 2 or isinstance(answer[0], bool)
                or not isinstance(answer[0], int) or not isinstance(answer[1], bytes)):
            raise FormatError(f"{where} {iteration}: expected a reply (iterator, bytes), got {answer!r:.80} "
                              "(a client with decode_responses=True cannot read a dump)")
        return answer

    first, header = checked(0, (yield 0))
    if first != 1:
        raise FormatError(f"{where} 0: the header's reply must continue at iterator 1, got {first}")
    size, options, growth, links = _parse_header(header, max_bytes, where)
    arrays = [np.zeros(link.num_bytes, dtype=np.uint8) for link in links]  # bounded by max_bytes above
    total = sum(link.num_bytes for link in links)
    position, index, offset = 0, 0, 0  # bytes read; current link and offset in it
    while position < total:
        iteration = position + 1
        following, chunk = checked(iteration, (yield iteration))
        if not chunk:
            raise FormatError(f"{where} {iteration}: the dump ended after {position:,} of {total:,} bytes")
        if len(chunk) > MAX_CHUNK_BYTES:
            raise FormatError(f"{where} {iteration}: a chunk of {len(chunk):,} bytes; at most {MAX_CHUNK_BYTES:,}")
        if len(chunk) > links[index].num_bytes - offset:
            raise FormatError(f"{where} {iteration}: a chunk of {len(chunk):,} bytes does not fit sub-filter "
                              f"{index} ({links[index].num_bytes - offset:,} bytes left)")
        if following != iteration + len(chunk):
            raise FormatError(f"{where} {iteration}: the next iterator must be {iteration + len(chunk)}, got "
                              f"{following}")
        arrays[index][offset:offset + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
        position += len(chunk)
        offset += len(chunk)
        if offset == links[index].num_bytes:
            index, offset = index + 1, 0
    return RedisBloomSnapshot(zip(links, arrays), num_keys=size, options=options, growth=growth, name=name)


def scandump_error(exc, name: str, where: str, iteration) -> ServedFilterError:
    """The error for an error reply to ``BF.SCANDUMP name iteration`` from the server at ``where``."""
    text = str(exc)
    if "not found" in text.lower():
        return FilterNotFoundError(f"no RedisBloom filter {name!r} on the Redis server at {where}")
    if "unknown command" in text.lower():
        return ServedFilterError(f"the Redis server at {where} has no RedisBloom module (BF.SCANDUMP: {text})")
    return ServedFilterError(f"the Redis server at {where} refused BF.SCANDUMP {name!r} {iteration}: {text}")


def key_name(key) -> str:
    """A filter's key as text for messages."""
    return key.decode(errors="replace") if isinstance(key, bytes) else str(key)


def from_redisbloom(client, key, *, max_bytes: int = DEFAULT_MAX_BYTES) -> RedisBloomSnapshot:
    """Copy the RedisBloom filter ``key`` (``BF.RESERVE`` / ``BF.ADD``) into a local read-only
    ``RedisBloomSnapshot`` that answers as ``BF.EXISTS`` does, scaling sub-filters included.

    :param client: a ``redis.Redis`` of a server with the RedisBloom module, or a ``redis.cluster.RedisCluster``
        whose nodes have it (redis-py sends BF.SCANDUMP to the node owning the key's slot, following MOVED).
    :param key: the filter's key.
    :param max_bytes: the largest filter copied (its bit arrays together); a larger one is a FormatError before
        anything is allocated.

    The copy reads the filter in chunks of at most 16 MiB, not atomically: keys added before the copy started are
    all found; keys added during it may or may not be. FilterNotFoundError when the key does not exist,
    ServedFilterError when it is not a RedisBloom filter or the server has no RedisBloom, FormatError when the dump
    is damaged.
    """
    redis = redis_module()
    name = key_name(key)

    def scandump(iteration):
        try:
            return client.execute_command("BF.SCANDUMP", key, iteration)
        except redis.exceptions.ResponseError as exc:
            raise scandump_error(exc, name, server_address(client), iteration) from None

    return read_scandump(lambda i: call_server(client, f"reading the RedisBloom filter {name!r}", scandump, i),
                         max_bytes=max_bytes, name=name)
