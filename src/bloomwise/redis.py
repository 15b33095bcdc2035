"""Bloom filters served by Redis or Valkey: many processes and hosts read and update one filter.

``RedisBloomFilter`` and ``RedisCountingBloomFilter`` keep their bits or counters in a Redis server (core commands
only: no module such as RedisBloom is needed) and hash keys exactly as the local ``BloomFilter`` and
``CountingBloomFilter`` do, so a local filter pushed with ``to_redis`` and pulled back with ``from_redis`` is
bit-identical, and a filter built locally merges into a served one with ``BITOP OR`` (``merge``).

Storage (docs/redis.md), for a filter named ``name``:

- ``name:meta``: a hash of the parameters (structure, layout, num_bits, num_hashes, seed, hash scheme, counter bits,
  capacity, part size, format version) and the key count. A second process opens the filter with
  ``open(client, name)`` from it alone.
- ``name:part:0``, ``name:part:1``, ...: the payload of the local filter, byte for byte, cut into parts of at most
  ``part_bytes`` (default 512 MiB, the largest Redis string), so a large filter spreads over a Redis Cluster's slots.
  Local bit p is bit p % 8 of byte p // 8 (LSB first); Redis numbers bits from the most significant bit of a byte,
  so bit p is Redis bit offset ``p ^ 7``. A 4-bit counter i is nibble i % 2 of byte i // 2 (the low nibble for even
  i), which is the 4-bit field at Redis bit offset ``4 i ^ 4``; an 8-bit counter i is the byte i.
- ``name:batch:<id>:<chunk>``: the record of one applied chunk of a counting batch (exactly-once retries; expires).

Bits are written with ``BITFIELD key SET u1 <offset> 1`` (a thousand keys per command, the commands of a batch
pipelined and packed in C by ``_native/served.pyx``), or for large batches ORed in from a local filter (``SET`` +
``BITOP OR``); they are read with ``GETRANGE`` of each key's 64-byte block (blocked layout) or ``BITFIELD_RO key GET
u1 <offset>``. Setting bits is idempotent, so the bit filter needs no script: each command is atomic and a repeated
one changes nothing.

Counters are incremented by ``BITFIELD ... OVERFLOW SAT INCRBY u4`` (the server's saturation is the sticky rule) in
MULTI/EXEC transactions that also write the chunks' batch records, after WATCH and MGET of those records: a batch
retried after a lost connection is applied exactly once. Removal must *read* the counters and decide (refuse a
certainly-absent key, leave saturated counters alone): when every counter covers the probes of the chunk (always
when the keys were added) a WATCHed transaction decrements them all, which is what removing the keys one by one
does; otherwise a Lua script decides key by key, atomically on the server (a transaction cannot branch on what it
read). Lua is not used for everything because it was measured to cost the server 4-12 µs a key on inserts (it
rebuilds every argument of ``redis.call``), a transaction about 3 (docs/redis.md).
"""
from __future__ import annotations

import contextlib
import math
import uuid
from typing import Iterable, Optional

from bloomwise import _format, theory
from bloomwise.errors import FormatError

__all__ = [
    "RedisBloomFilter", "RedisCountingBloomFilter", "to_redis", "from_redis", "open",
    "ServedFilterError", "FilterNotFoundError", "FilterMismatchError", "ServerUnavailableError",
    "IncompleteBatchError", "FORMAT_VERSION", "MAX_PART_BYTES",
]

#: Version of the storage described above (``name:meta`` field ``format_version``).
FORMAT_VERSION = 1
#: The largest Redis string (proto-max-bulk-len's default and hard limit of bit offsets: 2**32 bits).
MAX_PART_BYTES = 512 * 2 ** 20
#: Keys per command: a BITFIELD of 1,000 keys x k sub-operations; a Lua call of 1,000 keys.
CHUNK_KEYS = 1000
#: Commands in flight before the replies are read (bounds the memory of the packed commands).
WINDOW_COMMANDS = 32
#: A bit filter's update() merges a locally built filter when the batch has a key per this many bytes of filter:
#: a BITFIELD costs the server about 3 µs a key, SET + BITOP OR about a nanosecond a byte.
MERGE_BYTES_PER_KEY = 64
#: Keys per MULTI/EXEC transaction of a counting insert.
TRANSACTION_KEYS = 8000
#: How often a counting insert looks again when another client recorded the same batch id meanwhile.
OPTIMISTIC_ATTEMPTS = 20
#: How often a removal re-reads after other clients wrote the filter before it falls back to the Lua script.
REMOVE_ATTEMPTS = 3
#: Seconds a counting batch's record is kept (a retry later than this may apply the batch twice).
BATCH_RECORD_SECONDS = 24 * 3600
#: How many sub-operations a Lua script passes to one redis.call (Lua's unpack() limit is about 8,000 values).
_LUA_OPS_PER_CALL = 1500

_STRUCTURES = {"bloom": _format.Structure.BLOOM, "counting": _format.Structure.COUNTING}
_LAYOUT_IDS = {"classic": 1, "partitioned": 2, "blocked": 3}
_LAYOUT_NAMES = {v: k for k, v in _LAYOUT_IDS.items()}


# ---- errors ----------------------------------------------------------------------------------------------------------
class ServedFilterError(Exception):
    """Base of the errors of served filters."""


class FilterNotFoundError(ServedFilterError, LookupError):
    """No filter of that name on the server (its ``name:meta`` key is absent)."""


class FilterMismatchError(ServedFilterError, ValueError):
    """The filter on the server has other parameters (or another structure) than the one asked for."""


class ServerUnavailableError(ServedFilterError, ConnectionError):
    """The server cannot be reached, refused the credentials, or the connection was lost."""


class IncompleteBatchError(ServerUnavailableError):
    """The connection was lost during a batch: ``applied_keys`` are known to be applied, ``unknown_keys`` may or
    may not be. Retrying the same keys with ``batch_id=error.batch_id`` applies the rest exactly once (counting
    filters); for a bit filter any retry is safe (setting a bit twice changes nothing)."""

    def __init__(self, message, *, applied_keys: int, unknown_keys: int, batch_id: Optional[str]):
        super().__init__(message)
        self.applied_keys = applied_keys
        self.unknown_keys = unknown_keys
        self.batch_id = batch_id


def _redis():
    try:
        import redis
    except ImportError:  # pragma: no cover - depends on the installation
        raise ImportError("bloomwise.redis needs redis-py: pip install 'bloomwise[redis]'") from None
    return redis


def _address(client) -> str:
    kwargs = getattr(client.connection_pool, "connection_kwargs", {})
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def _server_error(client, exc, doing: str) -> ServedFilterError:
    """A clear error for a redis-py exception raised while ``doing`` something."""
    redis = _redis()
    where = _address(client)
    if isinstance(exc, redis.exceptions.AuthenticationError) or (
            isinstance(exc, redis.exceptions.ResponseError) and "NOAUTH" in str(exc)):
        return ServerUnavailableError(f"the Redis server at {where} refused the credentials while {doing} ({exc}): "
                                      "check the password (and username) given to the client")
    if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)):
        return ServerUnavailableError(f"cannot reach the Redis server at {where} while {doing}: {exc}")
    return ServedFilterError(f"the Redis server at {where} answered an error while {doing}: {exc}")


def call_server(client, doing: str, fn, *args, **kwargs):
    """Run a redis-py call, turning its connection and authentication errors into ours."""
    redis = _redis()
    try:
        return fn(*args, **kwargs)
    except redis.exceptions.RedisError as exc:
        raise _server_error(client, exc, doing) from exc


# ---- the parameters stored in name:meta ------------------------------------------------------------------------------
def _meta_key(name: str) -> str:
    return f"{name}:meta"


def _part_key(name: str, index: int) -> str:
    return f"{name}:part:{index}"


def _check_name(name) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    return name


class _Geometry:
    """What a served filter is: structure, layout, m, k, seed, hash scheme, cell width, capacity, part size."""

    FIELDS = ("format", "format_version", "structure", "layout", "num_bits", "num_hashes", "seed", "hash_scheme",
              "counter_bits", "capacity", "part_bytes")

    def __init__(self, structure, layout, num_bits, num_hashes, seed, hash_scheme, counter_bits, capacity,
                 part_bytes, fpr=None):
        self.structure = structure            # "bloom" or "counting"
        self.layout = layout
        self.num_bits = num_bits              # m: bits, or counters
        self.num_hashes = num_hashes
        self.seed = seed
        self.hash_scheme = hash_scheme
        self.counter_bits = counter_bits      # 1 for the bit filter
        self.capacity = capacity              # None when built by size
        self.part_bytes = part_bytes
        self.fpr = fpr                        # the target rate; None when built by size
        self.check()

    def check(self) -> None:
        if self.layout not in _LAYOUT_IDS:
            raise ValueError(f"layout must be one of {', '.join(map(repr, _LAYOUT_IDS))}, got {self.layout!r}")
        _format.hash_scheme_id(self.hash_scheme)
        if self.structure == "counting":
            if self.layout == "blocked":
                raise ValueError("counting filters support the 'classic' and 'partitioned' layouts only")
            if self.counter_bits not in (4, 8):
                raise ValueError(f"a served counting filter has 4- or 8-bit counters (BITFIELD u4/u8 are "
                                 f"byte-identical with the local packing), got counter_bits={self.counter_bits!r}")
        for field, value, low, high in (("num_hashes", self.num_hashes, 1, 16 if self.layout == "blocked" else 64),
                                        ("seed", self.seed, 0, 2 ** 64 - 1),
                                        ("num_bits", self.num_bits, 1, 2 ** 48),
                                        ("part_bytes", self.part_bytes, 64, MAX_PART_BYTES)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{field} must be an int, got {type(value).__name__} ({value!r})")
            if not low <= value <= high:
                raise ValueError(f"{field} must be in [{low}, {high}], got {value}")
        if self.part_bytes % 64:
            raise ValueError(f"part_bytes must be a multiple of 64, got {self.part_bytes}")
        if self.layout == "blocked" and self.num_bits % 512:
            raise ValueError(f"a blocked filter needs num_bits divisible by 512, got {self.num_bits}")
        if self.layout == "partitioned" and self.num_bits < self.num_hashes:
            raise ValueError(f"the partitioned layout needs at least num_hashes ({self.num_hashes}) positions, "
                             f"got {self.num_bits}")

    @property
    def nbytes(self) -> int:
        """Bytes of the local payload: whole 64-bit words."""
        return (self.num_bits * self.counter_bits + 63) // 64 * 8

    @property
    def num_parts(self) -> int:
        return max(1, -(-self.nbytes // self.part_bytes))

    def part_length(self, index: int) -> int:
        return min(self.part_bytes, self.nbytes - index * self.part_bytes)

    def to_fields(self) -> dict:
        return {"format": "bloomwise", "format_version": str(FORMAT_VERSION), "structure": self.structure,
                "layout": self.layout, "num_bits": str(self.num_bits), "num_hashes": str(self.num_hashes),
                "seed": str(self.seed), "hash_scheme": self.hash_scheme, "counter_bits": str(self.counter_bits),
                "capacity": "" if self.capacity is None else str(self.capacity), "part_bytes": str(self.part_bytes),
                "fpr": "" if self.fpr is None else repr(float(self.fpr))}

    @classmethod
    def from_fields(cls, name: str, raw: dict) -> "_Geometry":
        """Parse ``name:meta`` (untrusted): FormatError naming the field that is missing or wrong."""
        fields = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                  for k, v in raw.items()}
        if fields.get("format") != "bloomwise":
            raise FormatError(f"{_meta_key(name)} is not the metadata of a bloomwise filter "
                              f"(format={fields.get('format')!r})")
        missing = [f for f in cls.FIELDS if f not in fields]
        if missing:
            raise FormatError(f"{_meta_key(name)} lacks the field(s) {', '.join(missing)}")
        if fields["format_version"] != str(FORMAT_VERSION):
            raise FormatError(f"{_meta_key(name)} has format_version {fields['format_version']!r}; this bloomwise "
                              f"reads version {FORMAT_VERSION}")

        def integer(field):
            text = fields[field]
            if not (text.isascii() and text.isdigit()) or len(text) > 20:
                raise FormatError(f"{_meta_key(name)} field {field} must be a non-negative integer, got {text!r}")
            return int(text)

        if fields["structure"] not in _STRUCTURES:
            raise FormatError(f"{_meta_key(name)} names an unknown structure {fields['structure']!r}")
        fpr = None
        if fields.get("fpr"):  # optional: filters built by size have none
            try:
                fpr = float(fields["fpr"])
            except ValueError:
                fpr = math.nan
            if not 0.0 < fpr < 1.0:
                raise FormatError(f"{_meta_key(name)} field fpr must be a rate in (0, 1), got {fields['fpr']!r}")
        try:
            return cls(fields["structure"], fields["layout"], integer("num_bits"), integer("num_hashes"),
                       integer("seed"), fields["hash_scheme"], integer("counter_bits"),
                       integer("capacity") if fields["capacity"] else None, integer("part_bytes"), fpr)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, FormatError):
                raise
            raise FormatError(f"{_meta_key(name)} describes an impossible filter: {exc}") from None

    def differences(self, other: "_Geometry") -> list:
        ours, theirs = self.to_fields(), other.to_fields()
        return [f"{f}: {theirs[f] or 'none'} on the server, {ours[f] or 'none'} asked for"
                for f in ours if ours[f] != theirs[f] and not (f in ("capacity", "fpr") and not ours[f])]


def _read_meta(client, name: str) -> Optional[dict]:
    raw = call_server(client, f"reading {_meta_key(name)}", client.hgetall, _meta_key(name))
    return raw or None


_CREATE_META = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV))
  return 1
end
return 0
"""


def _create_or_check(client, name: str, geometry: _Geometry) -> None:
    """Create ``name:meta`` atomically, or check that the existing one describes the same filter."""
    fields = geometry.to_fields()
    fields["keys_added"] = "0"
    args = [x for item in fields.items() for x in item]
    call_server(client, f"creating {_meta_key(name)}", client.eval, _CREATE_META, 1, _meta_key(name), *args)
    stored = _read_meta(client, name)
    if stored is None:
        raise ServedFilterError(f"{_meta_key(name)} vanished right after it was created (deleted by another client?)")
    existing = _Geometry.from_fields(name, stored)
    if existing.structure != geometry.structure:
        raise FilterMismatchError(f"{name!r} on the server is a {existing.structure} filter, not a "
                                  f"{geometry.structure} filter")
    diff = geometry.differences(existing)
    if diff:
        raise FilterMismatchError(f"a filter named {name!r} already exists with other parameters: "
                                  + "; ".join(diff))


# ---- the served filters ----------------------------------------------------------------------------------------------
class _Served:
    """What both served filters share: geometry, key hashing, positions, the raw pipelined exchange."""

    _STRUCTURE = ""

    def _setup(self, client, name: str, geometry: _Geometry, create: bool) -> None:
        if not hasattr(client, "connection_pool") or not hasattr(client, "hgetall"):
            raise TypeError(f"client must be a redis.Redis (a RedisCluster is not supported), got "
                            f"{type(client).__name__}")
        self._client = client
        self._name = _check_name(name)
        self._g = geometry
        self._layout_id = _LAYOUT_IDS[geometry.layout]
        self._scheme_id = _format.hash_scheme_id(geometry.hash_scheme)
        self._parts = [_part_key(self._name, i) for i in range(geometry.num_parts)]
        if create:
            _create_or_check(client, self._name, geometry)

    # -- description -----------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The filter's name on the server (its keys are ``name:meta`` and ``name:part:<i>``)."""
        return self._name

    @property
    def client(self):
        return self._client

    @property
    def layout(self) -> str:
        return self._g.layout

    @property
    def num_hashes(self) -> int:
        return self._g.num_hashes

    @property
    def seed(self) -> int:
        return self._g.seed

    @property
    def hash_scheme(self) -> str:
        return self._g.hash_scheme

    @property
    def capacity(self) -> Optional[int]:
        return self._g.capacity

    @property
    def nbytes(self) -> int:
        """Bytes of the payload (all parts together)."""
        return self._g.nbytes

    @property
    def part_bytes(self) -> int:
        return self._g.part_bytes

    @property
    def part_keys(self) -> list:
        """The Redis keys holding the payload, in order."""
        return list(self._parts)

    def _meta_int(self, field: str) -> int:
        value = call_server(self._client, f"reading {_meta_key(self._name)}", self._client.hget,
                      _meta_key(self._name), field)
        return int(value or 0)

    def delete(self) -> None:
        """Remove the filter from the server (its metadata and parts; batch records expire by themselves)."""
        call_server(self._client, f"deleting {self._name!r}", self._client.delete, _meta_key(self._name), *self._parts)

    def clear(self) -> None:
        """Empty the filter (every bit or counter to 0, the key count to 0), atomically."""
        pipe = self._client.pipeline(transaction=True)
        pipe.delete(*self._parts)
        pipe.hset(_meta_key(self._name), self._count_field, 0)
        call_server(self._client, f"clearing {self._name!r}", pipe.execute)

    # -- hashing -----------------------------------------------------------------------------------------------------
    def _offsets(self, keys, single: bool = False):
        """(Redis bit offsets of every probe, as a (n, k) uint64 array; n)."""
        import numpy as np
        from bloomwise._native.bloom import hash_many
        from bloomwise._native.served import positions_many
        if single:
            keys = [keys]
        elif isinstance(keys, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"a batch must be an iterable of keys, got one {type(keys).__name__}: "
                            "wrap a single key in a list")
        hashes = hash_many(keys, self._g.seed, None, self._scheme_id)
        positions = positions_many(hashes.reshape(-1), self._g.num_bits, self._g.num_hashes, self._layout_id)
        if self._g.counter_bits == 1:
            offsets = positions ^ np.uint64(7)
        elif self._g.counter_bits == 4:
            offsets = (positions << np.uint64(2)) ^ np.uint64(4)
        else:
            offsets = positions << np.uint64(3)
        return offsets, positions.shape[0], hashes.shape

    def _split_parts(self, offsets):
        """[(part index, its part-local offsets, flat in row order)] of an offset array."""
        import numpy as np
        if len(self._parts) == 1:
            return [(0, offsets.reshape(-1))]
        part_bits = np.uint64(self._g.part_bytes * 8)
        part = offsets // part_bits
        local = offsets - part * part_bits
        return [(int(p), local[part == p]) for p in np.unique(part)]

    # -- the raw exchange ----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _connection(self, doing: str):
        """A connection of the client's pool, held for several exchanges (WATCH state lives on one connection)."""
        redis = _redis()
        pool = self._client.connection_pool
        try:
            connection = _get_connection(pool)
        except redis.exceptions.RedisError as exc:
            raise _server_error(self._client, exc, doing) from exc
        try:
            yield connection
        except BaseException:
            connection.disconnect()  # replies may still be in flight: never reuse this connection
            raise
        finally:
            pool.release(connection)

    def _exchange(self, pack, count: int, doing: str, keys_per_command, batch_id=None, connection=None,
                  applied_before: int = 0, total_keys: Optional[int] = None, replies_per_command=None):
        """Send ``count`` commands (``pack(i)`` gives command i in RESP) pipelined, return their replies in order.

        Commands go in windows of WINDOW_COMMANDS; window j + 1 is packed and sent before the replies of window j
        are read, so the server always has work while the client packs and reads. Error replies are returned as
        exception objects. A lost connection raises IncompleteBatchError naming how many keys are known to be
        applied: ``applied_before`` plus ``keys_per_command[i]`` for every command whose reply arrived, of
        ``total_keys`` (default: the sum of keys_per_command). With ``replies_per_command``, pack(i) is a sequence
        of that many commands, and its reply a list.
        """
        if connection is None:
            with self._connection(doing) as held:
                return self._exchange(pack, count, doing, keys_per_command, batch_id, held, applied_before,
                                      total_keys, replies_per_command)
        redis = _redis()
        replies = []
        windows = [range(s, min(s + WINDOW_COMMANDS, count)) for s in range(0, count, WINDOW_COMMANDS)]
        try:
            for j, window in enumerate(windows):
                if j == 0:
                    connection.send_packed_command([pack(i) for i in window], check_health=True)
                if j + 1 < len(windows):
                    connection.send_packed_command([pack(i) for i in windows[j + 1]], check_health=False)
                for i in window:
                    if replies_per_command is None:
                        replies.append(_read_reply(connection, redis))
                    else:
                        replies.append([_read_reply(connection, redis) for _ in range(replies_per_command[i])])
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
            connection.disconnect()
            if isinstance(exc, redis.exceptions.AuthenticationError):
                raise _server_error(self._client, exc, doing) from exc
            if total_keys is None and not any(keys_per_command):  # a read: nothing to account for
                raise ServerUnavailableError(f"lost the connection to the Redis server at {_address(self._client)} "
                                             f"while {doing}: {exc}") from exc
            applied = applied_before + sum(keys_per_command[:len(replies)])
            unknown = (sum(keys_per_command) + applied_before if total_keys is None else total_keys) - applied
            retry = (f"retry the same keys with batch_id={batch_id!r} to apply the rest exactly once"
                     if batch_id is not None else "retrying the whole batch is safe (bits are only ever set)")
            raise IncompleteBatchError(
                f"lost the connection to the Redis server at {_address(self._client)} while {doing}: "
                f"{applied:,} keys are known to be applied and {unknown:,} may or may not be ({exc}); {retry}",
                applied_keys=applied, unknown_keys=unknown, batch_id=batch_id) from exc
        return replies


def _read_reply(connection, redis):
    try:
        return connection.read_response()
    except redis.exceptions.ResponseError as exc:
        return exc


def _get_connection(pool):
    try:
        return pool.get_connection()
    except TypeError:  # redis-py before 5.1 needs a command name
        return pool.get_connection("BITFIELD")


def _check_batch_id(batch_id) -> str:
    if batch_id is None:
        return uuid.uuid4().hex
    if not isinstance(batch_id, str) or not batch_id or len(batch_id) > 200:
        raise ValueError(f"batch_id must be a non-empty str of at most 200 characters, got {batch_id!r}")
    return batch_id


def encode_command(args) -> bytes:
    """One command in RESP."""
    from bloomwise._native.served import encode_args
    return b"*%d\r\n" % len(args) + encode_args(args)


def _raise_error_replies(replies, doing: str) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise ServedFilterError(f"the Redis server answered an error while {doing}: {reply}")


class RedisBloomFilter(_Served):
    """A Bloom filter whose bits live in Redis; the same keys, positions and bits as ``BloomFilter``.

    ``RedisBloomFilter(client, name, capacity, fpr)`` creates it (sized exactly as ``BloomFilter(capacity, fpr)``),
    or attaches to the filter of that name if it exists with the same parameters (FilterMismatchError otherwise).
    ``RedisBloomFilter.open(client, name)`` attaches by name alone. ``client`` is a ``redis.Redis``.

    ``add`` and ``update`` set bits with BITFIELD (a command per 1,000 keys, pipelined); ``in`` and
    ``contains_many`` read them with BITFIELD_RO. Setting bits is idempotent, so any batch may be retried.
    """

    _STRUCTURE = "bloom"
    _count_field = "keys_added"

    def __init__(self, client, name: str, capacity, fpr=0.01, *, layout="blocked", seed=0, hash_scheme="xxh3",
                 part_bytes=MAX_PART_BYTES):
        capacity = _check_capacity(capacity)
        if layout not in _LAYOUT_IDS:
            raise ValueError(f"layout must be one of {', '.join(map(repr, _LAYOUT_IDS))}, got {layout!r}")
        num_bits, num_hashes = theory.optimal_size(capacity, fpr, layout=layout)
        self._setup(client, name, _Geometry("bloom", layout, num_bits, num_hashes, seed, hash_scheme, 1, capacity,
                                            part_bytes, float(fpr)), create=True)

    @classmethod
    def from_size(cls, client, name: str, num_bits, num_hashes, *, layout="classic", seed=0, hash_scheme="xxh3",
                  part_bytes=MAX_PART_BYTES) -> "RedisBloomFilter":
        """A served filter of exactly ``num_bits`` bits and ``num_hashes`` probes per key."""
        self = cls.__new__(cls)
        self._setup(client, name, _Geometry("bloom", layout, num_bits, num_hashes, seed, hash_scheme, 1, None,
                                            part_bytes), create=True)
        return self

    @classmethod
    def open(cls, client, name: str) -> "RedisBloomFilter":
        """Attach to an existing served filter by name (FilterNotFoundError, FilterMismatchError)."""
        return _open_as(cls, client, name)

    @property
    def num_bits(self) -> int:
        return self._g.num_bits

    @property
    def keys_added(self) -> int:
        """How many added keys were certainly new when added (all clients together)."""
        return self._meta_int("keys_added")

    def __repr__(self) -> str:
        return (f"<RedisBloomFilter {self._name!r} on {_address(self._client)}: {self._g.layout}, "
                f"{self._g.num_bits:,} bits, k={self._g.num_hashes}>")

    # -- writes -------------------------------------------------------------------------------------------------------
    def _set_bits(self, keys, single: bool, doing: str):
        """Set the keys' bits; returns the per-key "was new" flags of the keys (numpy bool)."""
        import numpy as np
        from bloomwise._native.served import encode_args, pack_command
        offsets, n, _ = self._offsets(keys, single)
        if n == 0:
            return np.zeros(0, dtype=bool)
        op = encode_args([b"SET", b"u1"])
        tail = encode_args([b"1"])
        plan, counts = [], []
        for start in range(0, n, CHUNK_KEYS):
            chunk = offsets[start:start + CHUNK_KEYS]
            for part, local in self._split_parts(chunk):
                plan.append(([b"BITFIELD", self._parts[part].encode()], local))
                counts.append(0)
            counts[-1] = chunk.shape[0]  # a chunk's keys count as applied once its last command is confirmed
        replies = self._exchange(lambda i: pack_command(plan[i][0], plan[i][1], op, tail, 4), len(plan), doing,
                                 counts)
        _raise_error_replies(replies, doing)
        was_zero = np.zeros((n, self._g.num_hashes), dtype=bool)
        index = 0
        for start in range(0, n, CHUNK_KEYS):
            chunk = offsets[start:start + CHUNK_KEYS]
            rows = was_zero[start:start + chunk.shape[0]]
            if len(self._parts) == 1:
                rows[...] = np.asarray(replies[index], dtype=np.int8).reshape(rows.shape) == 0
                index += 1
            else:
                for part, _local in self._split_parts(chunk):
                    mask = (chunk // np.uint64(self._g.part_bytes * 8)) == part
                    rows[mask] = np.asarray(replies[index], dtype=np.int8) == 0
                    index += 1
        new = was_zero.any(axis=1)
        # A key is new when one of its bits was 0, also when an earlier key of the same batch set it: like update().
        added = int(new.sum())
        if added:
            call_server(self._client, "counting keys", self._client.hincrby, _meta_key(self._name), "keys_added", added)
        return new

    def add(self, key) -> bool:
        """Set a key's bits; True when one of them was 0 (the key was certainly absent before)."""
        return bool(self._set_bits(key, True, f"adding a key to {self._name!r}")[0])

    def update(self, keys: Iterable, *, method: str = "auto") -> None:
        """Add every key of an iterable or numpy array.

        ``method="bitfield"``: BITFIELD SET commands of 1,000 keys, pipelined (about 3 µs of server CPU a key).
        ``method="merge"``: the keys go into a local filter of the same parameters, which is then ORed into this
        one (``merge``: the server's cost is that of the filter's bytes, not of the keys). ``"auto"`` (default)
        merges when the batch holds at least one key per MERGE_BYTES_PER_KEY bytes of the filter (and its length
        is known). Both give the same bits; with "merge", ``keys_added`` counts the keys new to the batch.
        """
        if method not in ("auto", "bitfield", "merge"):
            raise ValueError(f"method must be 'auto', 'bitfield' or 'merge', got {method!r}")
        if method == "auto":
            size = len(keys) if hasattr(keys, "__len__") and not isinstance(keys, (str, bytes)) else 0
            method = "merge" if size * MERGE_BYTES_PER_KEY >= self._g.nbytes else "bitfield"
        if method == "merge":
            self.merge(self._local_batch(keys))
        else:
            self._set_bits(keys, False, f"adding a batch to {self._name!r}")

    def _local_batch(self, keys):
        """A local BloomFilter of this filter's parameters holding ``keys``."""
        from bloomwise.bloom import BloomFilter
        if isinstance(keys, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"a batch must be an iterable of keys, got one {type(keys).__name__}: "
                            "wrap a single key in a list")
        local = BloomFilter.from_size(self._g.num_bits, self._g.num_hashes, layout=self._g.layout, seed=self._g.seed,
                                      hash_scheme=self._g.hash_scheme)
        local.update(keys)
        return local

    # -- reads --------------------------------------------------------------------------------------------------------
    def _test(self, keys, single: bool):
        import numpy as np
        from bloomwise._native.served import encode_args, pack_command
        offsets, n, shape = self._offsets(keys, single)
        if n == 0:
            return np.zeros(shape, dtype=bool)
        doing = f"querying {self._name!r}"
        if self._g.layout == "blocked" and not single:
            return self._test_blocks(offsets, doing).reshape(shape)
        op = encode_args([b"GET", b"u1"])
        plan, masks = [], []
        for start in range(0, n, CHUNK_KEYS):
            chunk = offsets[start:start + CHUNK_KEYS]
            for part, local in self._split_parts(chunk):
                plan.append(([b"BITFIELD_RO", self._parts[part].encode()], local))
                masks.append((start, chunk.shape[0], part))
        replies = self._exchange(lambda i: pack_command(plan[i][0], plan[i][1], op, b"", 3), len(plan), doing,
                                 [0] * len(plan))
        _raise_error_replies(replies, doing)
        bits = np.zeros((n, self._g.num_hashes), dtype=bool)
        part_bits = np.uint64(self._g.part_bytes * 8)
        for (start, count, part), reply in zip(masks, replies):
            rows = bits[start:start + count]
            if len(self._parts) == 1:
                rows[...] = np.asarray(reply, dtype=np.int8).reshape(rows.shape) != 0
            else:
                mask = (offsets[start:start + count] // part_bits) == part
                rows[mask] = np.asarray(reply, dtype=np.int8) != 0
        return bits.all(axis=1).reshape(shape if not single else (1,))

    def _test_blocks(self, offsets, doing: str):
        """Blocked layout: one ``GETRANGE`` of the key's 64-byte block per key, the bits tested here. The server
        spends about a quarter of the CPU time of ``BITFIELD_RO`` with k ``GET u1`` (benchmarks/redis_served.py)."""
        import numpy as np
        from bloomwise._native.served import encode_args, pack_command
        positions = offsets ^ np.uint64(7)
        n = positions.shape[0]
        first_byte = positions[:, 0] // np.uint64(512) * np.uint64(64)
        part = first_byte // np.uint64(self._g.part_bytes)
        ranges = np.empty((n, 2), dtype=np.uint64)
        ranges[:, 0] = first_byte - part * np.uint64(self._g.part_bytes)
        ranges[:, 1] = ranges[:, 0] + np.uint64(63)
        plan = []  # (part, key indices) per packed sequence of GETRANGE commands
        for start in range(0, n, CHUNK_KEYS):
            rows = np.arange(start, min(start + CHUNK_KEYS, n))
            if len(self._parts) == 1:
                plan.append((0, rows))
            else:
                for p in np.unique(part[rows]):
                    plan.append((int(p), rows[part[rows] == p]))
        ops = [b"*4\r\n" + encode_args([b"GETRANGE", key.encode()]) for key in self._parts]
        replies = self._exchange(lambda i: pack_command(None, ranges[plan[i][1]], ops[plan[i][0]], b"", 4),
                                 len(plan), doing, [0] * len(plan), replies_per_command=[len(r) for _, r in plan])
        blocks = np.zeros((n, 64), dtype=np.uint8)
        for (_, rows), answers in zip(plan, replies):
            _raise_error_replies(answers, doing)
            data = b"".join(answers)
            if len(data) != 64 * len(rows):  # blocks past the end of a string that was never written so far
                data = b"".join(a.ljust(64, b"\0") for a in answers)
            blocks[rows] = np.frombuffer(data, dtype=np.uint8).reshape(-1, 64)
        within = (positions % np.uint64(512)).astype(np.int64)
        bits = (np.take_along_axis(blocks, within >> 3, axis=1) >> (within & 7).astype(np.uint8)) & 1
        return bits.all(axis=1)

    def __contains__(self, key) -> bool:
        """``key in f``: False means certainly absent, True "might be present"."""
        return bool(self._test(key, True)[0])

    def contains_many(self, keys):
        """A numpy bool array: whether each key might be present (the shape of a numpy input)."""
        return self._test(keys, False)

    # -- bulk ----------------------------------------------------------------------------------------------------------
    def merge(self, local) -> None:
        """OR a local BloomFilter of the same parameters into this one (``SET`` a temporary key, ``BITOP OR``),
        part by part, each part in one transaction: the fast way to load many keys."""
        import numpy as np
        from bloomwise.bloom import BloomFilter
        if not isinstance(local, BloomFilter):
            raise TypeError(f"merge takes a BloomFilter, got {type(local).__name__}")
        diff = _local_geometry(local, self._g.part_bytes).differences(self._g)
        diff = [d for d in diff if not d.startswith("capacity")]
        if diff:
            raise FilterMismatchError(f"cannot merge into {self._name!r}: " + "; ".join(diff))
        redis = _redis()
        payload = memoryview(local._payload()).cast("B")
        temporary = f"{self._name}:merge:{uuid.uuid4().hex}"
        merged = 0
        for index, part in enumerate(self._parts):
            start = index * self._g.part_bytes
            data = payload[start:start + self._g.part_length(index)]
            if not np.frombuffer(data, dtype=np.uint8).any():  # nothing set in this part
                continue
            pipe = self._client.pipeline(transaction=True)
            pipe.set(temporary, data.tobytes())
            pipe.bitop("OR", part, part, temporary)
            pipe.delete(temporary)
            try:
                pipe.execute()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                if isinstance(exc, redis.exceptions.AuthenticationError) or (
                        not merged and "connecting to" in str(exc)):
                    raise _server_error(self._client, exc, f"merging into {part}") from exc  # never connected
                keys = local._keys_added_count
                raise IncompleteBatchError(
                    f"lost the connection to the Redis server at {_address(self._client)} while merging into "
                    f"{self._name!r}: {index} of {len(self._parts)} parts were merged, part {index} may or may not "
                    f"be ({exc}); retrying the merge is safe (OR sets bits only)",
                    applied_keys=0, unknown_keys=keys, batch_id=None) from exc
            except redis.exceptions.RedisError as exc:
                raise _server_error(self._client, exc, f"merging into {part}") from exc
            merged += 1
        call_server(self._client, "counting keys", self._client.hincrby, _meta_key(self._name), "keys_added",
              local._keys_added_count)


# ---- the counting filter: Lua scripts ---------------------------------------------------------------------------------
# KEYS: meta, batch record, part 0, part 1, ...   ARGV: record seconds, k, part bits, field type, counter max, mode,
# then the k offsets of every key (Redis bit offsets of the whole payload, as decimal strings).
_LUA_COMMON = """
local record = redis.call('GET', KEYS[2])
if record then return {1, tonumber(record)} end
local k = tonumber(ARGV[2])
local part_bits = tonumber(ARGV[3])
local field = ARGV[4]
local counter_max = tonumber(ARGV[5])
local mode = ARGV[6]
local first = 7
local n = (#ARGV - first + 1) / k
local nparts = #KEYS - 2
local function locate(i)  -- part index (0-based) and part-local offset of ARGV[i]
  if nparts == 1 then return 0, ARGV[i] end
  local o = tonumber(ARGV[i])
  local p = math.floor(o / part_bits)
  return p, o - p * part_bits
end
local function flush(p, ops)  -- one BITFIELD on part p; returns its replies
  if #ops == 0 then return {} end
  return redis.call('BITFIELD', KEYS[3 + p], unpack(ops))
end
"""

_LUA_REMOVE = _LUA_COMMON + """
-- Read every counter once, decide key by key on the values as the earlier keys of the batch left them, then write.
local value = {}
local wanted, where = {}, {}
for p = 0, nparts - 1 do wanted[p] = {}; where[p] = {} end
for i = first, #ARGV do
  if value[ARGV[i]] == nil then
    value[ARGV[i]] = false
    local p, o = locate(i)
    local t = wanted[p]
    t[#t + 1] = 'GET'; t[#t + 1] = field; t[#t + 1] = o
    where[p][#where[p] + 1] = ARGV[i]
  end
end
for p = 0, nparts - 1 do
  local t, names = wanted[p], where[p]
  for s = 1, #t, 3 * %d do
    local ops = {}
    for j = s, math.min(s + 3 * %d - 1, #t) do ops[#ops + 1] = t[j] end
    local replies = redis.call('BITFIELD_RO', KEYS[3 + p], unpack(ops))
    for j, v in ipairs(replies) do value[names[(s - 1) / 3 + j]] = v end
  end
end
local removed, failed = 0, -1
local decrements = {}
for key = 0, n - 1 do
  local base = first + key * k
  local uses = {}
  local present = true
  for i = base, base + k - 1 do uses[ARGV[i]] = (uses[ARGV[i]] or 0) + 1 end
  for o, count in pairs(uses) do
    local v = value[o]
    if v ~= counter_max and v < count then present = false end
  end
  if present then
    for i = base, base + k - 1 do
      local v = value[ARGV[i]]
      if v ~= counter_max then  -- sticky: a saturated counter's true value is unknown, never decrement it
        value[ARGV[i]] = v - 1
        decrements[#decrements + 1] = i
      end
    end
    removed = removed + 1
  elseif mode == 'raise' then
    return {2, key}  -- nothing was written
  end
end
local ops = {}
for p = 0, nparts - 1 do ops[p] = {} end
for _, i in ipairs(decrements) do
  local p, o = locate(i)
  local t = ops[p]
  t[#t + 1] = 'INCRBY'; t[#t + 1] = field; t[#t + 1] = o; t[#t + 1] = -1
  if #t >= 4 * %d then flush(p, t); ops[p] = {} end
end
for p = 0, nparts - 1 do flush(p, ops[p]) end
redis.call('HINCRBY', KEYS[1], 'num_keys', 0 - removed)  -- never "-0"
redis.call('SET', KEYS[2], removed, 'EX', ARGV[1])
return {0, removed}
""" % (_LUA_OPS_PER_CALL, _LUA_OPS_PER_CALL, _LUA_OPS_PER_CALL)


class RedisCountingBloomFilter(_Served):
    """A counting Bloom filter whose 4-bit (or 8-bit) counters live in Redis; the same keys, positions and counter
    bytes as ``CountingBloomFilter``, with the same rules: saturation is sticky (a counter at its maximum is never
    decremented) and removing a certainly-absent key is refused.

    Changes are applied in chunks of 1,000 keys, each atomically together with its record
    ``name:batch:<batch id>:<chunk>`` (a MULTI/EXEC transaction, or the removal script when a key may be certainly
    absent); a chunk whose record exists is skipped. A batch therefore applies exactly once, even when retried after
    a lost connection: pass the ``batch_id`` of the IncompleteBatchError (or your own) again.
    """

    _STRUCTURE = "counting"
    _count_field = "num_keys"

    def __init__(self, client, name: str, capacity, fpr=0.01, *, counter_bits=4, layout="classic", seed=0,
                 hash_scheme="xxh3", part_bytes=MAX_PART_BYTES):
        capacity = _check_capacity(capacity)
        if layout not in ("classic", "partitioned"):
            raise ValueError(f"counting filters support the 'classic' and 'partitioned' layouts only, got {layout!r}")
        num_counters, num_hashes = theory.optimal_size(capacity, fpr, layout=layout)
        self._setup(client, name, _Geometry("counting", layout, num_counters, num_hashes, seed, hash_scheme,
                                            counter_bits, capacity, part_bytes, float(fpr)), create=True)

    @classmethod
    def from_size(cls, client, name: str, num_counters, num_hashes, *, counter_bits=4, layout="classic", seed=0,
                  hash_scheme="xxh3", part_bytes=MAX_PART_BYTES) -> "RedisCountingBloomFilter":
        """A served counting filter of exactly ``num_counters`` counters and ``num_hashes`` probes per key."""
        self = cls.__new__(cls)
        self._setup(client, name, _Geometry("counting", layout, num_counters, num_hashes, seed, hash_scheme,
                                            counter_bits, None, part_bytes), create=True)
        return self

    @classmethod
    def open(cls, client, name: str) -> "RedisCountingBloomFilter":
        """Attach to an existing served counting filter by name (FilterNotFoundError, FilterMismatchError)."""
        return _open_as(cls, client, name)

    @property
    def num_counters(self) -> int:
        return self._g.num_bits

    @property
    def counter_bits(self) -> int:
        return self._g.counter_bits

    @property
    def counter_max(self) -> int:
        return 2 ** self._g.counter_bits - 1

    @property
    def num_keys(self) -> int:
        """Keys added minus keys removed (every occurrence counts), all clients together."""
        return self._meta_int("num_keys")

    def __repr__(self) -> str:
        return (f"<RedisCountingBloomFilter {self._name!r} on {_address(self._client)}: {self._g.layout}, "
                f"{self._g.num_bits:,} counters x {self._g.counter_bits} bits, k={self._g.num_hashes}>")

    # -- scripts --------------------------------------------------------------------------------------------------------
    def _script_sha(self, source: str) -> bytes:
        shas = self.__dict__.setdefault("_shas", {})
        if source not in shas:
            shas[source] = call_server(self._client, "loading a Lua script", self._client.script_load, source).encode()
        return shas[source]

    def _run_scripts(self, offsets, starts, counts, chunks, mode: str, batch_id: str, doing: str, connection,
                     applied_before: int, total_keys: int):
        """The removal script over the given chunks (pipelined); returns their [status, value] replies."""
        from bloomwise._native.served import pack_command
        k = offsets.shape[1]
        meta = _meta_key(self._name).encode()
        parts = [p.encode() for p in self._parts]
        arguments = [str(BATCH_RECORD_SECONDS).encode(), str(k).encode(), str(self._g.part_bytes * 8).encode(),
                     f"u{self._g.counter_bits}".encode(), str(self.counter_max).encode(), mode.encode()]

        def pack(c, sha):
            record = f"{self._name}:batch:{batch_id}:{c}".encode()
            head = [b"EVALSHA", sha, str(2 + len(parts)).encode(), meta, record, *parts, *arguments]
            return pack_command(head, offsets[starts[c]:starts[c] + counts[c]].reshape(-1), b"", b"", 1)

        pending = list(chunks)
        results = {}
        for attempt in range(2):  # a second time only for scripts the server had forgotten (NOSCRIPT)
            sha = self._script_sha(_LUA_REMOVE)
            replies = self._exchange(lambda i: pack(pending[i], sha), len(pending), doing,
                                     [counts[c] for c in pending], batch_id, connection, applied_before, total_keys)
            retry = []
            for c, reply in zip(pending, replies):
                if isinstance(reply, Exception) and str(reply).startswith("NOSCRIPT") and attempt == 0:
                    retry.append(c)
                elif isinstance(reply, Exception):
                    raise ServedFilterError(f"the Redis server answered an error while {doing}: {reply}")
                else:
                    results[c] = reply
            if not retry:
                break
            self._shas.pop(_LUA_REMOVE, None)
            pending = retry
        return [results[c] for c in chunks]

    def _read_cells(self, connection, offsets, doing, applied_before, total_keys):
        """Current values of the cells at ``offsets`` (a flat array of Redis bit offsets), on ``connection``."""
        import numpy as np
        from bloomwise._native.served import encode_args, pack_command
        op = encode_args([b"GET", f"u{self._g.counter_bits}".encode()])
        plan = []
        for part, local in self._split_parts(offsets.reshape(-1, 1)):
            for s in range(0, local.size, CHUNK_KEYS * 8):
                plan.append((part, local[s:s + CHUNK_KEYS * 8]))
        replies = self._exchange(lambda i: pack_command([b"BITFIELD_RO", self._parts[plan[i][0]].encode()],
                                                        plan[i][1], op, b"", 3),
                                 len(plan), doing, [0] * len(plan), None, connection, applied_before, total_keys)
        _raise_error_replies(replies, doing)
        values = np.empty(offsets.size, dtype=np.int64)
        if len(self._parts) == 1:
            values[:] = np.concatenate([np.asarray(r, dtype=np.int64) for r in replies])
        else:
            part_of = offsets // np.uint64(self._g.part_bytes * 8)
            by_part = {}
            for (part, _), reply in zip(plan, replies):
                by_part.setdefault(part, []).append(np.asarray(reply, dtype=np.int64))
            for part, chunks in by_part.items():
                values[part_of == part] = np.concatenate(chunks)
        return values

    def _decrement(self, offsets, mode: str, batch_id: Optional[str], doing: str):
        """Remove one occurrence of each key (rows of ``offsets``); returns how many were removed, or raises
        KeyError(index of the first certainly-absent key) in mode "raise" (then nothing changed).

        Fast path, per transaction of chunks: WATCH the records and the parts, MGET the records (chunks already
        recorded are skipped), read the counters, and when every counter is saturated or at least as large as the
        number of probes of the chunks on it (always so when the keys were added), decrement them all in one
        MULTI/EXEC with the records. That is exactly what removing the keys one by one does. Otherwise (a key is
        certainly absent, or other clients keep writing the filter) the chunks go to the Lua script, which decides
        key by key on the server.
        """
        import numpy as np
        from bloomwise._native.served import encode_args, pack_command
        batch_id = _check_batch_id(batch_id)
        n = offsets.shape[0]
        chunk_keys = n if mode == "raise" else CHUNK_KEYS  # "raise" is all or nothing: one chunk
        starts = list(range(0, n, chunk_keys))
        counts = [min(chunk_keys, n - s) for s in starts]
        records = [f"{self._name}:batch:{batch_id}:{c}".encode() for c in range(len(starts))]
        per_transaction = max(1, TRANSACTION_KEYS // chunk_keys)
        maximum = self.counter_max
        meta = _meta_key(self._name).encode()
        parts = [p.encode() for p in self._parts]
        minus_one = encode_args([b"-1"])
        op = encode_args([b"INCRBY", f"u{self._g.counter_bits}".encode()])
        removed = applied = 0
        with self._connection(doing) as connection:
            for first in range(0, len(starts), per_transaction):
                group = list(range(first, min(first + per_transaction, len(starts))))
                group_keys = sum(counts[c] for c in group)
                done = None
                for _attempt in range(REMOVE_ATTEMPTS):
                    watch = [encode_command([b"WATCH", *[records[c] for c in group], *parts]),
                             encode_command([b"MGET", *[records[c] for c in group]])]
                    replies = self._exchange(watch.__getitem__, 2, doing, [0, 0], batch_id, connection, applied, n)
                    _raise_error_replies(replies, doing)
                    recorded = {c: int(r) for c, r in zip(group, replies[1]) if r is not None}
                    todo = [c for c in group if c not in recorded]
                    if not todo:
                        done = sum(recorded.values())
                        break
                    rows = np.concatenate([offsets[starts[c]:starts[c] + counts[c]] for c in todo])
                    distinct, demand = np.unique(rows, return_counts=True)
                    values = self._read_cells(connection, distinct, doing, applied, n)
                    free = values != maximum
                    if (free & (demand > values)).any():
                        break  # some key may be certainly absent: the script decides key by key
                    decrements = np.repeat(distinct[free], demand[free])
                    commands = [encode_command([b"MULTI"])]
                    for part, local in self._split_parts(decrements.reshape(-1, 1)):
                        for s in range(0, local.size, CHUNK_KEYS * 8):
                            commands.append(pack_command([b"BITFIELD", parts[part]], local[s:s + CHUNK_KEYS * 8],
                                                         op, minus_one, 4))
                    for c in todo:
                        commands.append(encode_command([b"SET", records[c], str(counts[c]).encode(), b"EX",
                                                        str(BATCH_RECORD_SECONDS).encode()]))
                    commands.append(encode_command([b"HINCRBY", meta, b"num_keys",
                                                    str(-sum(counts[c] for c in todo)).encode()]))
                    commands.append(encode_command([b"EXEC"]))
                    replies = self._exchange(commands.__getitem__, len(commands), doing,
                                             [0] * (len(commands) - 1) + [group_keys], batch_id, connection,
                                             applied, n)
                    _raise_error_replies(replies[:-1], doing)
                    if replies[-1] is None:
                        continue  # another client wrote the filter after WATCH: read again
                    if isinstance(replies[-1], Exception):
                        raise ServedFilterError(f"the Redis server refused a transaction while {doing}: {replies[-1]}")
                    _raise_error_replies(replies[-1], doing)
                    done = sum(recorded.values()) + sum(counts[c] for c in todo)
                    break
                if done is None:
                    self._exchange(lambda i: encode_command([b"UNWATCH"]), 1, doing, [0], batch_id, connection,
                                   applied, n)
                    results = self._run_scripts(offsets, starts, counts, group, mode, batch_id, doing, connection,
                                                applied, n)
                    for result in results:
                        if int(result[0]) == 2:
                            raise KeyError(int(result[1]))
                    done = sum(int(r[1]) for r in results)
                else:
                    self._exchange(lambda i: encode_command([b"UNWATCH"]), 1, doing, [0], batch_id, connection,
                                   applied, n)
                removed += done
                applied += group_keys
        return removed

    def _increment(self, offsets, batch_id: Optional[str], doing: str):
        """Add one occurrence of each key (rows of ``offsets``); returns per key whether a counter went 0 -> 1.

        The chunks of TRANSACTION_KEYS keys are MULTI/EXEC transactions of ``BITFIELD part OVERFLOW SAT INCRBY u4
        <offset> 1 ...`` (sticky saturation is the server's own SAT) and ``SET name:batch:<id>:<chunk> 1``, after
        ``WATCH`` and ``MGET`` of those records: chunks already recorded are skipped, and if another client records
        one between the MGET and the EXEC, the EXEC is refused and the chunk looked at again. So every chunk applies
        exactly once, atomically with its record.
        """
        import numpy as np
        from bloomwise._native.served import encode_args, pack_command
        batch_id = _check_batch_id(batch_id)
        n = offsets.shape[0]
        op = encode_args([b"INCRBY", f"u{self._g.counter_bits}".encode()])
        tail = encode_args([b"1"])
        starts = list(range(0, n, CHUNK_KEYS))
        counts = [min(CHUNK_KEYS, n - s) for s in starts]
        records = [f"{self._name}:batch:{batch_id}:{c}".encode() for c in range(len(starts))]
        went_up = np.zeros(n, dtype=bool)
        per_transaction = max(1, TRANSACTION_KEYS // CHUNK_KEYS)
        applied = 0
        meta = _meta_key(self._name).encode()
        with self._connection(doing) as connection:
            for first in range(0, len(starts), per_transaction):
                group = range(first, min(first + per_transaction, len(starts)))
                group_keys = sum(counts[c] for c in group)
                watch = [encode_command([b"WATCH", *[records[c] for c in group]]),
                         encode_command([b"MGET", *[records[c] for c in group]])]
                for _attempt in range(OPTIMISTIC_ATTEMPTS):
                    replies = self._exchange(watch.__getitem__, 2, doing, [0, 0], batch_id, connection, applied, n)
                    _raise_error_replies(replies, doing)
                    todo = [c for c, record in zip(group, replies[1]) if record is None]
                    if not todo:
                        self._exchange(lambda i: encode_command([b"UNWATCH"]), 1, doing, [0], batch_id, connection,
                                       applied, n)
                        break
                    commands, owners = [encode_command([b"MULTI"])], []
                    for c in todo:
                        chunk = offsets[starts[c]:starts[c] + counts[c]]
                        for part, local in self._split_parts(chunk):
                            commands.append(pack_command([b"BITFIELD", self._parts[part].encode(), b"OVERFLOW", b"SAT"],
                                                         local, op, tail, 4))
                            owners.append((c, part))
                        commands.append(encode_command([b"SET", records[c], b"1", b"EX",
                                                        str(BATCH_RECORD_SECONDS).encode()]))
                        owners.append(None)
                    commands.append(encode_command([b"HINCRBY", meta, b"num_keys",
                                                    str(sum(counts[c] for c in todo)).encode()]))
                    commands.append(encode_command([b"EXEC"]))
                    replies = self._exchange(commands.__getitem__, len(commands), doing,
                                             [0] * (len(commands) - 1) + [group_keys], batch_id, connection, applied,
                                             n)
                    _raise_error_replies(replies[:-1], doing)
                    result = replies[-1]
                    if result is None:
                        continue  # a record changed after WATCH: another client applied a chunk; look again
                    if isinstance(result, Exception):
                        raise ServedFilterError(f"the Redis server refused a transaction while {doing}: {result}")
                    _raise_error_replies(result, doing)
                    for owner, reply in zip(owners, result):
                        if owner is None:
                            continue
                        c, part = owner
                        chunk = offsets[starts[c]:starts[c] + counts[c]]
                        ones = np.asarray(reply, dtype=np.int64) == 1
                        if len(self._parts) == 1:
                            went_up[starts[c]:starts[c] + counts[c]] |= ones.reshape(chunk.shape).any(axis=1)
                        else:
                            hit = np.zeros(chunk.shape, dtype=bool)
                            hit[(chunk // np.uint64(self._g.part_bytes * 8)) == part] = ones
                            went_up[starts[c]:starts[c] + counts[c]] |= hit.any(axis=1)
                    break
                else:
                    raise ServedFilterError(f"gave up {doing} after {OPTIMISTIC_ATTEMPTS} attempts: other clients "
                                            "kept recording the same batch id")
                applied += group_keys
        return went_up

    def add(self, key, *, batch_id: Optional[str] = None) -> bool:
        """Add one occurrence of a key; True when it was certainly absent before (a counter went 0 -> 1)."""
        offsets, _, _ = self._offsets(key, True)
        return bool(self._increment(offsets, batch_id, f"adding to {self._name!r}")[0])

    def update(self, keys: Iterable, *, batch_id: Optional[str] = None) -> None:
        """Add one occurrence of every key. Applied once per ``batch_id`` (a fresh one when None): retrying the
        same keys with the same id after an IncompleteBatchError applies only what was not applied."""
        offsets, n, _ = self._offsets(keys)
        if n:
            self._increment(offsets, batch_id, f"adding a batch to {self._name!r}")

    def remove(self, key, *, batch_id: Optional[str] = None) -> None:
        """Remove one occurrence of a key; KeyError (and no change) when it is certainly absent."""
        offsets, _, _ = self._offsets(key, True)
        try:
            self._decrement(offsets, "raise", batch_id, f"removing from {self._name!r}")
        except KeyError:
            raise KeyError(key) from None

    def discard(self, key, *, batch_id: Optional[str] = None) -> bool:
        """Remove one occurrence of a key if it might be present; returns whether anything was removed."""
        offsets, _, _ = self._offsets(key, True)
        return bool(self._decrement(offsets, "ignore", batch_id, f"removing from {self._name!r}"))

    def remove_many(self, keys, *, missing="raise", batch_id: Optional[str] = None) -> int:
        """Remove one occurrence of each key, in order; returns how many were removed.

        ``missing="raise"``: when a key is certainly absent nothing at all is removed and KeyError names it (the
        whole batch is one transaction or one script: all or nothing). ``missing="ignore"``: certainly absent keys
        are skipped, and the batch is applied in transactions of TRANSACTION_KEYS keys, each exactly once per
        ``batch_id`` (retry with the id of an IncompleteBatchError).
        """
        if missing not in ("raise", "ignore"):
            raise ValueError(f"missing must be 'raise' or 'ignore', got {missing!r}")
        if missing == "raise" and not isinstance(keys, (list, tuple)) and not hasattr(keys, "__array_interface__"):
            keys = list(keys)
        offsets, n, _ = self._offsets(keys)
        if n == 0:
            return 0
        try:
            return self._decrement(offsets, missing, batch_id, f"removing a batch from {self._name!r}")
        except KeyError as missing_key:
            index = missing_key.args[0]
            flat = keys.reshape(-1) if hasattr(keys, "reshape") else keys
            raise KeyError(flat[index]) from None

    # -- reads ----------------------------------------------------------------------------------------------------------
    def _counter_values(self, keys, single: bool):
        import numpy as np
        from bloomwise._native.served import encode_args, pack_command
        offsets, n, shape = self._offsets(keys, single)
        values = np.zeros((n, self._g.num_hashes), dtype=np.int64)
        if n == 0:
            return values, shape
        op = encode_args([b"GET", f"u{self._g.counter_bits}".encode()])
        doing = f"querying {self._name!r}"
        plan, where = [], []
        part_bits = np.uint64(self._g.part_bytes * 8)
        for start in range(0, n, CHUNK_KEYS):
            chunk = offsets[start:start + CHUNK_KEYS]
            for part, local in self._split_parts(chunk):
                plan.append(([b"BITFIELD_RO", self._parts[part].encode()], local))
                where.append((start, chunk.shape[0], part))
        replies = self._exchange(lambda i: pack_command(plan[i][0], plan[i][1], op, b"", 3), len(plan), doing,
                                 [0] * len(plan))
        _raise_error_replies(replies, doing)
        for (start, count, part), reply in zip(where, replies):
            rows = values[start:start + count]
            if len(self._parts) == 1:
                rows[...] = np.asarray(reply, dtype=np.int64).reshape(rows.shape)
            else:
                rows[(offsets[start:start + count] // part_bits) == part] = np.asarray(reply, dtype=np.int64)
        return values, shape

    def __contains__(self, key) -> bool:
        values, _ = self._counter_values(key, True)
        return bool((values[0] > 0).all())

    def contains_many(self, keys):
        """A numpy bool array: whether each key might be present (all its counters > 0)."""
        values, shape = self._counter_values(keys, False)
        return (values > 0).all(axis=1).reshape(shape)

    def counters(self, key) -> tuple:
        """The key's k counter values in probe order."""
        values, _ = self._counter_values(key, True)
        return tuple(int(v) for v in values[0])

    def count(self, key) -> int:
        """The smallest of the key's counters: how often it was added, at most."""
        return min(self.counters(key))


# ---- construction helpers ---------------------------------------------------------------------------------------------
def _check_capacity(capacity) -> int:
    if isinstance(capacity, bool) or not hasattr(capacity, "__index__"):
        raise TypeError(f"capacity must be an int, got {type(capacity).__name__} ({capacity!r})")
    capacity = capacity.__index__()
    if capacity < 1:
        raise ValueError(f"capacity must be at least 1, got {capacity}")
    return capacity


def _open_as(cls, client, name: str):
    name = _check_name(name)
    raw = _read_meta(client, name)
    if raw is None:
        raise FilterNotFoundError(f"no bloomwise filter named {name!r} on the Redis server at {_address(client)} "
                                  f"(the key {_meta_key(name)!r} does not exist)")
    geometry = _Geometry.from_fields(name, raw)
    wanted = {RedisBloomFilter: "bloom", RedisCountingBloomFilter: "counting", None: geometry.structure}[cls]
    if geometry.structure != wanted:
        raise FilterMismatchError(f"{name!r} on the server is a {geometry.structure} filter, not a {wanted} filter")
    cls = RedisBloomFilter if geometry.structure == "bloom" else RedisCountingBloomFilter
    self = cls.__new__(cls)
    self._setup(client, name, geometry, create=False)
    return self


def open(client, name: str):  # noqa: A001 - the module's verb, like bloomwise's BloomFilter.open
    """The served filter named ``name``, a RedisBloomFilter or a RedisCountingBloomFilter, from its metadata."""
    return _open_as(None, client, name)


def _local_geometry(local, part_bytes: int) -> _Geometry:
    from bloomwise.bloom import BloomFilter
    from bloomwise.counting import CountingBloomFilter
    if getattr(local, "_key_function", None) is not None:
        raise ValueError("a filter with a key= function cannot be served: other processes could not hash its keys")
    if isinstance(local, CountingBloomFilter):
        return _Geometry("counting", local.layout, local.num_cells, local.num_hashes, local.seed,
                         local.hash_scheme, local.counter_bits, local._capacity, part_bytes, local._fpr)
    if isinstance(local, BloomFilter):
        if local.hash_scheme == "custom":
            raise ValueError("a filter built from explicit hash functions cannot be served")
        return _Geometry("bloom", local.layout, local.num_cells, local.num_hashes, local.seed, local.hash_scheme, 1,
                         local._capacity, part_bytes, local._fpr)
    raise TypeError(f"to_redis takes a BloomFilter or a CountingBloomFilter, got {type(local).__name__}")


def to_redis(local, client, name: str, *, part_bytes=MAX_PART_BYTES, replace=False):
    """Store a local BloomFilter or CountingBloomFilter on the server under ``name``, byte for byte; returns the
    served filter. FilterMismatchError when a filter of that name exists, unless ``replace=True``. The metadata and
    every part are written in one transaction, so readers never see half a filter."""
    name = _check_name(name)
    geometry = _local_geometry(local, part_bytes)
    if not replace and _read_meta(client, name) is not None:
        raise FilterMismatchError(f"a filter named {name!r} already exists on the server: pass replace=True to "
                                  "overwrite it")
    payload = memoryview(local._payload()).cast("B")
    fields = geometry.to_fields()
    count_field = "num_keys" if geometry.structure == "counting" else "keys_added"
    fields[count_field] = str(local.num_keys if geometry.structure == "counting" else local._keys_added_count)
    pipe = client.pipeline(transaction=True)
    pipe.delete(_meta_key(name), *[_part_key(name, i) for i in range(geometry.num_parts)])
    for index in range(geometry.num_parts):
        start = index * geometry.part_bytes
        pipe.set(_part_key(name, index), payload[start:start + geometry.part_length(index)].tobytes())
    pipe.hset(_meta_key(name), mapping=fields)
    call_server(client, f"storing {name!r}", pipe.execute)
    return _open_as(None, client, name)


def from_redis(client, name: str):
    """The served filter ``name`` as a local BloomFilter or CountingBloomFilter, byte for byte (one consistent
    snapshot: the parts are read in one transaction). FormatError when what the server holds is inconsistent."""
    from bloomwise.bloom import BloomFilter
    from bloomwise.counting import CountingBloomFilter
    served = _open_as(None, client, name)
    g = served._g
    pipe = client.pipeline(transaction=True)
    pipe.hget(_meta_key(name), served._count_field)
    for index, part in enumerate(served._parts):
        pipe.strlen(part)
    lengths = call_server(client, f"reading {name!r}", pipe.execute)
    for index, length in enumerate(lengths[1:]):
        if length > g.part_length(index):
            raise FormatError(f"{served._parts[index]} holds {length} bytes; the filter's part {index} has "
                              f"{g.part_length(index)}")
    pipe = client.pipeline(transaction=True)
    pipe.hget(_meta_key(name), served._count_field)
    for part in served._parts:
        pipe.get(part)
    answer = call_server(client, f"reading {name!r}", pipe.execute)
    payload = bytearray(g.nbytes)
    for index, data in enumerate(answer[1:]):
        data = data or b""
        if len(data) > g.part_length(index):
            raise FormatError(f"{served._parts[index]} holds {len(data)} bytes; the filter's part {index} has "
                              f"{g.part_length(index)}")
        start = index * g.part_bytes
        payload[start:start + len(data)] = data
    count = int(answer[0] or 0)
    meta = {} if g.capacity is None else {"capacity": g.capacity}
    if g.fpr is not None:
        meta["fpr"] = g.fpr
    if g.structure == "counting":
        meta["counter_bits"] = g.counter_bits
    header = _format.Header(structure=_STRUCTURES[g.structure], layout=_format.Layout(_LAYOUT_IDS[g.layout]),
                            hash_scheme=_format.HashScheme(_format.hash_scheme_id(g.hash_scheme)), seed=g.seed,
                            num_bits=g.num_bits, num_hashes=g.num_hashes, payload_length=g.nbytes,
                            keys_added=max(0, count), meta=meta)
    cls = CountingBloomFilter if g.structure == "counting" else BloomFilter
    return cls._from_parts(header, bytes(payload), key=None)
