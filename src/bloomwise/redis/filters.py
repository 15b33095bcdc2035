"""The served filters: ``RedisBloomFilter`` and ``RedisCountingBloomFilter`` (docs/redis.md).

Bits are written with ``BITFIELD key SET u1 <offset> 1`` (a thousand keys per command, the commands of a batch
pipelined and packed in C by ``_native/served.pyx``), or, when a batch is large next to the filter, ORed in from a
local filter (``SET`` + ``BITOP OR``: the server's cost is the filter's bytes, not the keys). They are read the same
two ways: per key (``GETRANGE`` of the key's 64-byte block in the blocked layout, ``BITFIELD_RO key GET u1 <offset>``
otherwise), or, when the batch is large next to the filter, by reading the whole part once (``GETRANGE`` slices) and
testing the bits here. Setting bits is idempotent, so the bit filter needs no script: each command is atomic and a
repeated one changes nothing.

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

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Optional

import numpy as np

from bloomwise import _format, theory
from bloomwise._base import COUNTING_LAYOUTS, check_capacity, check_threads, layout_id
from bloomwise._compatibility import parameter_differences
from bloomwise._native.bloom import hash_many
from bloomwise._native.served import encode_args, pack_command, positions_many
from bloomwise._storage import StorageGeometry
from bloomwise.bloom import BloomFilter
from bloomwise.counting import CountingBloomFilter
from bloomwise.errors import FormatError
from bloomwise.redis.cluster import is_cluster, key_prefix, key_slot, route, route_async
from bloomwise.redis.errors import (
    FilterMismatchError, FilterNotFoundError, IncompleteBatchError, ServedFilterError, ServerUnavailableError,
    redis_module, reply_error, server_address, server_error,
)
from bloomwise.redis.geometry import (
    LAYOUT_IDS, MAX_PART_BYTES, Geometry, check_name, check_stored, create_meta_command, meta_fields, meta_key,
    part_key, read_meta,
)
from bloomwise.redis.scripts import REMOVE_SCRIPT
from bloomwise.redis.tracking import TrackedConnection

__all__ = ["RedisBloomFilter", "RedisCountingBloomFilter", "open", "open_as", "open_async", "drive_async",
           "is_async_client", "check_sync_client", "local_geometry", "encode_command", "attached", "run_steps",
           "read_local_steps", "store_steps", "copy_on_server_steps", "read_meta_steps", "hash_in_threads",
           "placement_of", "same_database",
           "CHUNK_KEYS", "WINDOW_COMMANDS", "MERGE_BYTES_PER_KEY", "READ_BYTES_PER_KEY", "TRANSACTION_KEYS",
           "OPTIMISTIC_ATTEMPTS", "REMOVE_ATTEMPTS", "BATCH_RECORD_SECONDS"]

#: Keys per command: a BITFIELD of 1,000 keys x k sub-operations; a Lua call of 1,000 keys.
CHUNK_KEYS = 1000
#: Commands in flight before the replies are read (bounds the memory of the packed commands).
WINDOW_COMMANDS = 32
#: A bit filter's update() merges a locally built filter when the batch has a key per this many bytes of filter:
#: a BITFIELD costs the server about 2 µs a key; the merge (a local filter, SET, BITOP OR) a few nanoseconds a byte
#: of filter, client and server together (the two met at about 800 bytes a key on the 2-core test machine).
MERGE_BYTES_PER_KEY = 512
#: Keys per MULTI/EXEC transaction of a counting insert.
TRANSACTION_KEYS = 8000
#: How often a counting insert looks again when another client recorded the same batch id meanwhile.
OPTIMISTIC_ATTEMPTS = 20
#: How often a removal re-reads after other clients wrote the filter before it falls back to the Lua script.
REMOVE_ATTEMPTS = 3
#: Seconds a counting batch's record is kept (a retry later than this may apply the batch twice).
BATCH_RECORD_SECONDS = 24 * 3600
#: A bit filter's contains_many reads the filter's parts once (and tests the bits here) when the batch has a key per
#: this many bytes of filter: a GETRANGE per key costs about 0.5 µs of server CPU and as much of the client's,
#: reading a part about a nanosecond a byte (they met at 600-1,000 bytes a key: benchmarks/redis_served.py).
READ_BYTES_PER_KEY = 512
#: The largest slice of a part read by one GETRANGE (bounds the size of one reply).
READ_SLICE_BYTES = 8 * 2 ** 20


class _Served:
    """What both served filters share: geometry, key hashing, positions, the raw pipelined exchange."""

    _STRUCTURE = ""
    #: True for the classes of ``bloomwise.redis.asyncio``: a redis.asyncio client, and operations return awaitables.
    ASYNC = False

    def _setup(self, client, name: str, geometry: Geometry, create: bool) -> None:
        name = check_name(name)
        if self.ASYNC:
            if not is_async_client(client):
                raise TypeError(f"client must be a redis.asyncio.Redis or a redis.asyncio.RedisCluster, got "
                                f"{type(client).__name__}")
            self._bind(client, name, key_prefix(client, name), geometry)
            # done by the first await (of the filter or of an operation): find the node serving the filter on a
            # cluster, create the filter on the server
            self._awaiting_route = is_cluster(client)
            self._awaiting_creation = create
            return
        check_sync_client(client)
        node, prefix = route(client, name)  # a cluster: the node that serves the filter's hash slot
        self._bind(node, name, prefix, geometry, client)
        if create:
            self._drive(self._create_or_check(), f"creating {meta_key(prefix)}")

    def _bind(self, client, name: str, prefix: str, geometry: Geometry, origin=None) -> None:
        self._awaiting_route = self._awaiting_creation = False
        self._client = client
        self._origin = client if origin is None else origin  # the client given: a cluster client routes other names
        self._name = name
        self._keys = prefix
        self._g = geometry
        self._layout_id = LAYOUT_IDS[geometry.layout]
        self._scheme_id = _format.hash_scheme_id(geometry.hash_scheme)
        self._parts = [part_key(prefix, i) for i in range(geometry.num_parts)]
        self._local_copy = None  # RedisBloomFilter(..., local_copy=True): a LocalCopyState

    def _create_or_check(self):
        """Steps: create ``name:meta`` atomically, or check that the existing one describes the same filter."""
        doing = f"creating {meta_key(self._keys)}"
        yield from self._command(create_meta_command(self._keys, self._g), doing)
        stored = yield from self._command([b"HGETALL", meta_key(self._keys).encode()], doing)
        check_stored(self._keys, self._g, meta_fields(stored))

    # -- description -----------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The filter's name on the server (its keys are ``name:meta`` and ``name:part:<i>``; on a Redis Cluster
        ``{name}:meta``, ...: ``key_prefix``)."""
        return self._name

    @property
    def key_prefix(self) -> str:
        """The prefix of the filter's keys on the server: the name, or ``{name}`` on a Redis Cluster."""
        return self._keys

    @property
    def client(self):
        return self._client

    @property
    def geometry(self) -> Geometry:
        """The filter's parameters, as stored in ``name:meta``."""
        return self._g

    @property
    def num_cells(self) -> int:
        """m: the filter's bits (RedisBloomFilter) or counters (RedisCountingBloomFilter)."""
        return self._g.num_cells

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
        """The number of keys the filter was sized for (None when built by size)."""
        return self._g.capacity

    @property
    def fpr(self) -> Optional[float]:
        """The target false-positive rate at ``capacity`` (None when built by size)."""
        return self._g.fpr

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

    def _meta_int(self, field: str):
        """Steps: the integer field ``field`` of ``name:meta``."""
        value = yield from self._command([b"HGET", meta_key(self._keys).encode(), field.encode()],
                                         f"reading {meta_key(self._keys)}")
        return int(value or 0)

    def _delete(self):
        yield from self._command([b"DEL", meta_key(self._keys).encode(), *[p.encode() for p in self._parts]],
                                 f"deleting {self._name!r}")

    def _clear(self):
        doing = f"clearing {self._name!r}"
        commands = [encode_command([b"MULTI"]), encode_command([b"DEL", *[p.encode() for p in self._parts]]),
                    encode_command([b"HSET", meta_key(self._keys).encode(), self.COUNT_FIELD.encode(), b"0"]),
                    encode_command([b"EXEC"])]
        replies = yield from self._exchange(commands.__getitem__, len(commands), doing, [0] * len(commands))
        inner = replies[-1] if isinstance(replies[-1], list) else []
        _raise_error_replies(replies + inner, doing, server_address(self._client))

    def delete(self) -> None:
        """Remove the filter from the server (its metadata and parts; batch records expire by themselves)."""
        return self._run(self._delete(), f"deleting {self._name!r}")

    def clear(self) -> None:
        """Empty the filter (every bit or counter to 0, the key count to 0), atomically."""
        return self._run(self._clear(), f"clearing {self._name!r}")

    # -- the contract (docs/architecture.md): compatibility, copies, the rate now -------------------------------------
    def is_compatible(self, other) -> bool:
        """True when ``other`` (a served filter or a local ``BloomFilter`` / ``CountingBloomFilter``) places keys
        exactly as this filter does, in cells of the same width: their cells combine and compare one for one."""
        return isinstance(other, (_Served, BloomFilter, CountingBloomFilter)) and placement_of(self) == \
            placement_of(other)

    def _check_compatible(self, other, operation: str) -> None:
        """TypeError for another kind of filter, ValueError naming every parameter that differs (the messages of
        the local structures: ``cannot union incompatible filters (seed: 1 vs 2)``)."""
        family = (RedisBloomFilter, BloomFilter) if self._g.structure == "bloom" else (RedisCountingBloomFilter,
                                                                                          CountingBloomFilter)
        if not isinstance(other, family):
            raise TypeError(f"cannot {operation} a {type(self).__name__} with {type(other).__name__}")
        mine, theirs = placement_of(self), placement_of(other)
        if mine != theirs:
            raise ValueError(f"cannot {operation} incompatible filters ({parameter_differences(mine, theirs)})")

    def copy(self, name: str, *, replace: bool = False):
        """A copy of this filter under a new ``name`` on the same server (or cluster), byte for byte with its key
        count; returns the new served filter. FilterMismatchError when ``name`` exists, unless ``replace=True``.

        On one server (or when both names share a cluster hash slot) the copy is the server's: ``COPY`` of the
        metadata and every part in one MULTI/EXEC, no byte leaves the server. Otherwise (another node of a cluster)
        the filter is read in one transaction and written in another, through this client."""
        target = type(self).__new__(type(self))
        target._setup(self._origin, name, self._g, create=False)
        doing = f"copying {self._name!r} to {target._name!r}"
        if self.ASYNC:
            return self._copy_async(target, replace, doing)
        if self._same_slot(target):
            self._drive(copy_on_server_steps(self, target, replace), doing)
        else:
            target._drive(store_steps(target, self._drive(read_local_steps(self), doing), replace), doing)
        return target

    async def _copy_async(self, target, replace: bool, doing: str):
        await self._attach_async()
        await target._attach_async()
        if self._same_slot(target):
            await self._run(copy_on_server_steps(self, target, replace), doing)
        else:
            await target._run(store_steps(target, await self._run(read_local_steps(self), doing), replace), doing)
        return target

    def _same_slot(self, other) -> bool:
        """Whether one server command may name keys of both filters: the same server and database, and on a
        cluster the same hash slot."""
        if is_cluster(self._origin) or is_cluster(other._origin):
            return self._origin is other._origin and key_slot(self._keys) == key_slot(other._keys)
        return self._client is other._client or same_database(self._client, other._client)

    def estimated_fpr(self) -> float:
        """The false-positive rate the filter has now, from its fill (``theory.fpr_from_fill``, as the local
        structure's ``estimated_fpr()``). Bits: the server counts them (``BITCOUNT`` of every part). Counters:
        the payload is read (one transaction) and counted here, since no server command counts nonzero 4-bit
        fields."""
        doing = f"reading the fill of {self._name!r}"
        return self._run(then(self._filled_cells(doing), lambda filled: theory.fpr_from_fill(
            self._g.num_cells, self._g.num_hashes, filled, layout=self._g.layout)), doing)

    def _filled_cells(self, doing: str):
        local = yield from read_local_steps(self)
        return local.filled_cells()

    # -- hashing -----------------------------------------------------------------------------------------------------
    def _offsets(self, keys, single: bool = False, threads=None):
        """(Redis bit offsets of every probe, as a (n, k) uint64 array; n). ``threads``: hash a numpy batch in
        that many threads (``hash_in_threads``)."""
        threads = check_threads(threads)
        if single:
            keys = [keys]
        elif isinstance(keys, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"a batch must be an iterable of keys, got one {type(keys).__name__}: "
                            "wrap a single key in a list")
        hashes = hash_in_threads(keys, self._g.seed, self._scheme_id, threads)
        positions = positions_many(hashes.reshape(-1), self._g.num_cells, self._g.num_hashes, self._layout_id)
        if self._g.counter_bits == 1:
            offsets = positions ^ np.uint64(7)
        elif self._g.counter_bits == 4:
            offsets = (positions << np.uint64(2)) ^ np.uint64(4)
        else:
            offsets = positions << np.uint64(3)
        return offsets, positions.shape[0], hashes.shape

    def _split_parts(self, offsets):
        """[(part index, its part-local offsets, flat in row order)] of an offset array."""
        if len(self._parts) == 1:
            return [(0, offsets.reshape(-1))]
        part_bits = np.uint64(self._g.part_bytes * 8)
        part = offsets // part_bits
        local = offsets - part * part_bits
        return [(int(p), local[part == p]) for p in np.unique(part)]

    # -- the raw exchange ----------------------------------------------------------------------------------------------
    # Every operation is written once, as a generator of *steps*: it yields an ExchangeRequest (commands to send
    # pipelined) and receives (replies, failure). A driver does the I/O on one connection held for the whole
    # operation (WATCH state lives on one connection): ``_drive`` here with redis-py, ``drive_async`` in
    # ``bloomwise.redis.asyncio`` with redis.asyncio. So both clients run the same commands, the same exactly-once
    # batches and the same error accounting.
    def _run(self, steps, doing: str, also=()):
        """Run an operation's steps: at once with redis-py; an awaitable for the classes of
        ``bloomwise.redis.asyncio`` (which first reaches the server of this filter and of the served filters
        ``also``)."""
        if self.ASYNC:
            return self._run_async(steps, doing, also)
        return self._drive(steps, doing)

    async def _run_async(self, steps, doing: str, also=()):
        for served in (self, *also):
            await served._attach_async()
        return await drive_async(self._client, steps, doing)

    async def _attach_async(self):
        if self._awaiting_route:
            self._client, _ = await route_async(self._client, self._name)
            self._awaiting_route = False
        if self._awaiting_creation:
            await drive_async(self._client, self._create_or_check(), f"creating {meta_key(self._keys)}")
            self._awaiting_creation = False
        return self

    def __await__(self):
        """``await RedisBloomFilter(async_client, ...)``: create or attach to the filter on the server."""
        if not self.ASYNC:
            raise TypeError(f"{type(self).__name__} of bloomwise.redis is not awaitable: use bloomwise.redis.asyncio "
                            "with a redis.asyncio client")
        return self._attach_async().__await__()

    def __contains__(self, key) -> bool:
        """``key in f``: False means certainly absent, True "might be present"."""
        if self.ASYNC:
            raise TypeError("'in' cannot await the server: use 'await f.contains(key)'")
        return self.contains(key)

    def _drive(self, steps, doing: str):
        """Run an operation's steps on a connection of the client's pool; returns the operation's result."""
        redis = redis_module()
        pool = self._client.connection_pool
        connection = None
        try:
            request = next(steps)
            while True:
                if connection is None:
                    try:
                        connection = _get_connection(pool)
                    except redis.exceptions.RedisError as exc:
                        raise server_error(self._client, exc, doing) from exc
                request = steps.send(perform_exchange(connection, request, redis))
        except StopIteration as stop:
            return stop.value
        except BaseException:
            if connection is not None:
                connection.disconnect()  # replies may still be in flight: never reuse this connection
            raise
        finally:
            if connection is not None:
                pool.release(connection)

    def _exchange(self, pack, count: int, doing: str, keys_per_command, batch_id=None, applied_before: int = 0,
                  total_keys: Optional[int] = None, replies_per_command=None):
        """Steps: send ``count`` commands (``pack(i)`` gives command i in RESP) pipelined, return their replies in
        order (``replies = yield from self._exchange(...)``).

        Commands go in windows of WINDOW_COMMANDS; window j + 1 is packed and sent before the replies of window j
        are read, so the server always has work while the client packs and reads. Error replies are returned as
        exception objects. A lost connection raises IncompleteBatchError naming how many keys are known to be
        applied: ``applied_before`` plus ``keys_per_command[i]`` for every command whose reply arrived, of
        ``total_keys`` (default: the sum of keys_per_command). With ``replies_per_command``, pack(i) is a sequence
        of that many commands, and its reply a list.
        """
        replies, failure = yield ExchangeRequest(pack, count, replies_per_command)
        if failure is None:
            return replies
        redis = redis_module()
        exc = failure
        if isinstance(exc, redis.exceptions.AuthenticationError):
            raise server_error(self._client, exc, doing) from exc
        if total_keys is None and not any(keys_per_command):  # a read: nothing to account for
            raise ServerUnavailableError(f"lost the connection to the Redis server at {server_address(self._client)} "
                                         f"while {doing}: {exc}") from exc
        applied = applied_before + sum(keys_per_command[:len(replies)])
        unknown = (sum(keys_per_command) + applied_before if total_keys is None else total_keys) - applied
        retry = (f"retry the same keys with batch_id={batch_id!r} to apply the rest exactly once"
                 if batch_id is not None else "retrying the whole batch is safe (bits are only ever set)")
        raise IncompleteBatchError(
            f"lost the connection to the Redis server at {server_address(self._client)} while {doing}: "
            f"{applied:,} keys are known to be applied and {unknown:,} may or may not be ({exc}); {retry}",
            applied_keys=applied, unknown_keys=unknown, batch_id=batch_id) from exc

    def _command(self, args, doing: str):
        """Steps: one command; its reply (ServedFilterError for an error reply)."""
        replies = yield from self._exchange(lambda i: encode_command(args), 1, doing, [0])
        _raise_error_replies(replies, doing, server_address(self._client))
        return replies[0]


def _batch_size(keys) -> Optional[int]:
    """The number of keys of a batch whose length is known without consuming it, else None."""
    if isinstance(keys, np.ndarray):
        return keys.size
    if hasattr(keys, "__len__") and not isinstance(keys, (str, bytes, bytearray, memoryview)):
        return len(keys)
    return None


def then(steps, finish):
    """Steps: run ``steps``, return ``finish(its result)``."""
    result = yield from steps
    return finish(result)


def naming_missing_key(steps, key_at):
    """Steps: run ``steps``; a KeyError(index) they raise becomes KeyError(key_at(index))."""
    try:
        return (yield from steps)
    except KeyError as missing:
        raise KeyError(key_at(missing.args[0])) from None


#: A numpy batch is hashed in ``threads`` threads when each gets at least this many keys (below, one thread).
THREAD_MIN_KEYS = 65536


def hash_in_threads(keys, seed: int, scheme_id: int, threads: int):
    """The 64-bit hashes of a batch (``hash_many``), a numpy batch cut in ``threads`` contiguous slices hashed at
    once (the compiled hashing of fixed-width keys runs without the GIL); the same hashes as one thread. Other
    batches (lists of str or bytes need the interpreter for every key) are hashed by one thread."""
    if threads == 1 or not isinstance(keys, np.ndarray) or keys.size < 2 * THREAD_MIN_KEYS:
        return hash_many(keys, seed, None, scheme_id)
    flat = keys.reshape(-1)
    slices = min(threads, flat.size // THREAD_MIN_KEYS)
    bounds = [flat.size * i // slices for i in range(slices + 1)]
    with ThreadPoolExecutor(slices) as pool:
        pieces = list(pool.map(lambda i: hash_many(flat[bounds[i]:bounds[i + 1]], seed, None, scheme_id),
                               range(slices)))
    return np.concatenate(pieces).reshape(keys.shape)


def same_database(a, b) -> bool:
    """Whether two redis-py clients talk to the same server (socket path, or host and port) and database."""
    def where(client):
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None) or {}
        return kwargs.get("path"), kwargs.get("host"), kwargs.get("port"), kwargs.get("db", 0)
    return where(a) == where(b) and where(a) != (None, None, None, 0)


def attached(cls, client, name: str, geometry: Geometry):
    """A served filter of class ``cls`` and ``geometry`` bound to ``client`` (routed on a cluster; asyncio: on
    its first operation) without creating anything on the server."""
    served = cls.__new__(cls)
    served._setup(client, name, geometry, create=False)
    return served


def run_steps(served, steps, doing: str):
    """Run steps on the served filter's connection: their result (redis-py), or an awaitable (asyncio)."""
    return served._run(steps, doing)


def served_only(other) -> tuple:
    """(other,) when it is a served filter, else ()."""
    return (other,) if isinstance(other, _Served) else ()


def local_payload(local):
    """The payload bytes of a local filter, for the server."""
    return local.payload_view().cast("B")


def placement_of(f) -> dict:
    """What decides where a key's cells are, for a served filter or a local BloomFilter / CountingBloomFilter."""
    g = f.geometry if isinstance(f, _Served) else local_geometry(f, MAX_PART_BYTES)
    return {"structure": g.structure, "layout": g.layout, "num_cells": g.num_cells, "num_hashes": g.num_hashes,
            "seed": g.seed, "hash_scheme": g.hash_scheme, "counter_bits": g.counter_bits}


# ---- whole filters: in and out of the server (bloomwise.redis.copying, copy) -----------------------------------------
def read_local_steps(served):
    """Steps: the served filter as a local BloomFilter or CountingBloomFilter, byte for byte (one consistent
    snapshot: the parts and the key count are read in one transaction). The parts' lengths are checked before they
    are read (FormatError when one is longer than the filter's part: what a server holds is untrusted)."""
    g, prefix, parts = served._g, served._keys, served._parts
    doing = f"reading {served._name!r}"
    where = server_address(served._client)
    lengths = yield from served._exchange(lambda i: encode_command([b"STRLEN", parts[i].encode()]), len(parts),
                                          doing, [0] * len(parts))
    _raise_error_replies(lengths, doing, where)
    for index, length in enumerate(lengths):
        if length > g.part_length(index):
            raise FormatError(f"{parts[index]} holds {length} bytes; the filter's part {index} has "
                              f"{g.part_length(index)}")
    commands = [encode_command([b"MULTI"]), encode_command([b"HGET", meta_key(prefix).encode(),
                                                            served.COUNT_FIELD.encode()])]
    commands += [encode_command([b"GET", part.encode()]) for part in parts] + [encode_command([b"EXEC"])]
    replies = yield from served._exchange(commands.__getitem__, len(commands), doing, [0] * len(commands))
    _raise_error_replies(replies, doing, where)
    answer = replies[-1]
    if not isinstance(answer, list) or len(answer) != 1 + len(parts):
        raise ServedFilterError(f"the Redis server at {where} refused the transaction while {doing}: {answer!r:.80}")
    _raise_error_replies(answer, doing, where)
    payload = bytearray(g.nbytes)
    for index, data in enumerate(answer[1:]):
        data = data or b""
        if len(data) > g.part_length(index):
            raise FormatError(f"{parts[index]} holds {len(data)} bytes; the filter's part {index} has "
                              f"{g.part_length(index)}")
        start = index * g.part_bytes
        payload[start:start + len(data)] = data
    count = answer[0]
    if count is not None and not (isinstance(count, bytes) and count.isdigit() and len(count) <= 20):
        raise FormatError(f"{meta_key(prefix)} field {served.COUNT_FIELD} must be a non-negative integer, got "
                          f"{count!r:.40}")
    cell_options = (("counter_bits", g.counter_bits),) if g.structure == "counting" else ()
    geometry = StorageGeometry(g.structure, g.layout, g.num_cells, g.num_hashes, g.seed, g.hash_scheme, cell_options)
    cls = CountingBloomFilter if g.structure == "counting" else BloomFilter
    local = cls.from_payload(geometry, bytes(payload), num_keys=int(count or 0))
    local.set_target(g.capacity, g.fpr)
    return local


def store_steps(served, local, replace: bool):
    """Steps: store the local filter ``local`` (of the served filter's geometry) as ``served``: its metadata, key
    count and every part in one MULTI/EXEC, so readers never see half a filter. FilterMismatchError when the name
    is taken, unless ``replace``."""
    doing = f"storing {served._name!r}"
    where = server_address(served._client)
    prefix, g = served._keys, served._g
    if not replace:
        existing = yield from read_meta_steps(served._client, prefix)
        if existing is not None:
            raise FilterMismatchError(f"a filter named {served._name!r} already exists on the server: pass "
                                      "replace=True to overwrite it")
    payload = local.payload_view().cast("B")
    fields = g.to_fields()
    fields[served.COUNT_FIELD] = str(local.num_keys if g.structure == "counting" else local.keys_counted)
    commands = [encode_command([b"MULTI"]),
                encode_command([b"DEL", meta_key(prefix).encode(), *[p.encode() for p in served._parts]])]
    for index, part in enumerate(served._parts):
        start = index * g.part_bytes
        commands.append(encode_command([b"SET", part.encode(), payload[start:start + g.part_length(index)]]))
    commands.append(encode_command([b"HSET", meta_key(prefix).encode(),
                                    *[x.encode() for item in fields.items() for x in item]]))
    commands.append(encode_command([b"EXEC"]))
    replies = yield from served._exchange(commands.__getitem__, len(commands), doing, [0] * len(commands))
    _raise_error_replies(replies + (replies[-1] if isinstance(replies[-1], list) else []), doing, where)


def copy_on_server_steps(source, target, replace: bool):
    """Steps: ``COPY`` the source's metadata and parts to the target's keys in one MULTI/EXEC (one server, one
    slot)."""
    doing = f"copying {source._name!r} to {target._name!r}"
    where = server_address(source._client)
    if not replace:
        existing = yield from read_meta_steps(source._client, target._keys)
        if existing is not None:
            raise FilterMismatchError(f"a filter named {target._name!r} already exists on the server: pass "
                                      "replace=True to overwrite it")
    commands = [encode_command([b"MULTI"]),
                encode_command([b"DEL", meta_key(target._keys).encode(), *[p.encode() for p in target._parts]])]
    for mine, theirs in zip([meta_key(source._keys)] + source._parts, [meta_key(target._keys)] + target._parts):
        commands.append(encode_command([b"COPY", mine.encode(), theirs.encode()]))
    commands.append(encode_command([b"EXEC"]))
    replies = yield from source._exchange(commands.__getitem__, len(commands), doing, [0] * len(commands))
    inner = replies[-1] if isinstance(replies[-1], list) else []
    _raise_error_replies(replies + inner, doing, where)
    if not inner or inner[1] != 1:  # the metadata was not copied: the source vanished meanwhile
        raise FilterNotFoundError(f"{source._name!r} was deleted while {doing}")


class LocalCopyState:
    """A served filter's copy (``keep_local_copy``): the TrackedConnection it is read on, the local BloomFilter
    (None until first read), and the keys the server answered since the copy went stale."""

    __slots__ = ("tracked", "local", "answered_while_stale")

    def __init__(self, tracked: Optional[TrackedConnection]):
        self.tracked = tracked
        self.local = None
        self.answered_while_stale = 0


class ExchangeRequest:
    """What an operation asks its driver to do: send ``count`` commands (``pack(i)``) pipelined and read their
    replies (``replies_per_command[i]`` of command i when given)."""

    __slots__ = ("pack", "count", "replies_per_command")

    def __init__(self, pack, count: int, replies_per_command=None):
        self.pack = pack
        self.count = count
        self.replies_per_command = replies_per_command

    def windows(self):
        return [range(s, min(s + WINDOW_COMMANDS, self.count)) for s in range(0, self.count, WINDOW_COMMANDS)]


def drive_on(connection, steps, doing: str, client):
    """Run an operation's steps on one given redis-py connection (the driver of ``_drive`` without a pool)."""
    redis = redis_module()
    try:
        request = next(steps)
        while True:
            request = steps.send(perform_exchange(connection, request, redis))
    except StopIteration as stop:
        return stop.value
    except redis.exceptions.RedisError as exc:  # connecting, the handshake, CLIENT TRACKING
        raise server_error(client, exc, doing) from exc


async def drive_on_async(connection, steps, doing: str, client):
    """``drive_on`` for a redis.asyncio connection."""
    redis = redis_module()
    try:
        request = next(steps)
        while True:
            request = steps.send(await perform_exchange_async(connection, request, redis))
    except StopIteration as stop:
        return stop.value
    except redis.exceptions.RedisError as exc:
        raise server_error(client, exc, doing) from exc


def perform_exchange(connection, request: ExchangeRequest, redis):
    """Do a request on a redis-py connection: (replies, None), or (the replies read, the exception) when the
    connection failed (it is then disconnected)."""
    replies = []
    windows = request.windows()
    pack = request.pack
    try:
        for j, window in enumerate(windows):
            if j == 0:
                connection.send_packed_command([pack(i) for i in window], check_health=True)
            if j + 1 < len(windows):
                connection.send_packed_command([pack(i) for i in windows[j + 1]], check_health=False)
            for i in window:
                if request.replies_per_command is None:
                    replies.append(_read_reply(connection, redis))
                else:
                    replies.append([_read_reply(connection, redis) for _ in range(request.replies_per_command[i])])
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        connection.disconnect()
        return replies, exc
    return replies, None


async def drive_async(client, steps, doing: str):
    """Run an operation's steps on a connection of a redis.asyncio client's pool (the asyncio ``_drive``)."""
    redis = redis_module()
    pool = client.connection_pool
    connection = None
    try:
        request = next(steps)
        while True:
            if connection is None:
                try:
                    connection = await pool.get_connection()
                except redis.exceptions.RedisError as exc:
                    raise server_error(client, exc, doing) from exc
            request = steps.send(await perform_exchange_async(connection, request, redis))
    except StopIteration as stop:
        return stop.value
    except BaseException:
        if connection is not None:
            await connection.disconnect()  # replies may still be in flight: never reuse this connection
        raise
    finally:
        if connection is not None:
            await pool.release(connection)


async def perform_exchange_async(connection, request: ExchangeRequest, redis):
    """``perform_exchange`` on a redis.asyncio connection."""
    replies = []
    windows = request.windows()
    pack = request.pack
    try:
        for j, window in enumerate(windows):
            if j == 0:
                await connection.send_packed_command([pack(i) for i in window], check_health=True)
            if j + 1 < len(windows):
                await connection.send_packed_command([pack(i) for i in windows[j + 1]], check_health=False)
            for i in window:
                if request.replies_per_command is None:
                    replies.append(await _read_reply_async(connection, redis))
                else:
                    replies.append([await _read_reply_async(connection, redis)
                                    for _ in range(request.replies_per_command[i])])
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        await connection.disconnect()
        return replies, exc
    return replies, None


async def _read_reply_async(connection, redis):
    try:
        return await connection.read_response()
    except redis.exceptions.ResponseError as exc:
        return exc


def is_async_client(client) -> bool:
    """Whether ``client`` is a redis.asyncio client."""
    module = type(client).__module__
    return module.startswith("redis.asyncio")


async def _nothing():
    return None


async def _first_async(found) -> bool:
    return bool((await found)[0])


async def open_async(client, name: str, classes: dict, wanted=None, local_copy: bool = False):
    """The served filter ``name`` on a redis.asyncio client (or cluster client), of ``classes[structure]``
    (``wanted``: the structure asked for, FilterMismatchError when the metadata names another)."""
    name = check_name(name)
    if not is_async_client(client):
        raise TypeError(f"client must be a redis.asyncio.Redis or a redis.asyncio.RedisCluster, got "
                        f"{type(client).__name__}")
    node, prefix = await route_async(client, name)
    raw = await drive_async(node, read_meta_steps(node, prefix), f"reading {meta_key(prefix)}")
    geometry = geometry_of(node, name, prefix, raw, wanted)
    cls = classes[geometry.structure]
    self = cls.__new__(cls)
    self._bind(node, name, prefix, geometry, client)
    if local_copy:
        await self.keep_local_copy()
    return self


def read_meta_steps(client, prefix: str):
    """Steps: the fields of ``prefix:meta`` (None when it does not exist)."""
    doing = f"reading {meta_key(prefix)}"
    replies, failure = yield ExchangeRequest(lambda i: encode_command([b"HGETALL", meta_key(prefix).encode()]), 1)
    if failure is not None:
        raise server_error(client, failure, doing) from failure
    _raise_error_replies(replies, doing, server_address(client))
    return meta_fields(replies[0])


def geometry_of(node, name: str, prefix: str, raw, wanted=None) -> Geometry:
    """The geometry in the metadata ``raw`` of the filter ``name`` (FilterNotFoundError when None;
    FilterMismatchError when it is not a ``wanted`` filter)."""
    if raw is None:
        raise FilterNotFoundError(f"no bloomwise filter named {name!r} on the Redis server at {server_address(node)} "
                                  f"(the key {meta_key(prefix)!r} does not exist)")
    geometry = Geometry.from_fields(prefix, raw)
    if wanted is not None and geometry.structure != wanted:
        raise FilterMismatchError(f"{name!r} on the server is a {geometry.structure} filter, not a {wanted} filter")
    return geometry


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
    return b"*%d\r\n" % len(args) + encode_args(args)


def _raise_error_replies(replies, doing: str, where: str = "the server") -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply_error(where, reply, doing)


class RedisBloomFilter(_Served):
    """A Bloom filter whose bits live in Redis; the same keys, positions and bits as ``BloomFilter``.

    ``RedisBloomFilter(client, name, capacity, fpr)`` creates it (sized exactly as ``BloomFilter(capacity, fpr)``),
    or attaches to the filter of that name if it exists with the same parameters (FilterMismatchError otherwise).
    ``RedisBloomFilter.open(client, name)`` attaches by name alone. ``client`` is a ``redis.Redis`` or a
    ``redis.cluster.RedisCluster`` (the asyncio clients: ``bloomwise.redis.asyncio``).

    ``add`` and ``update`` set bits with BITFIELD (a command per 1,000 keys, pipelined) or merge a local filter;
    ``in`` and ``contains_many`` read a key's block (GETRANGE) or bits (BITFIELD_RO), or the whole filter for a
    large batch. Setting bits is idempotent, so any batch may be retried. ``union``, ``intersection``, ``|=`` and
    ``&=`` combine filters on the server (BITOP); ``copy(name)`` copies one there (COPY).
    """

    _STRUCTURE = "bloom"
    COUNT_FIELD = "keys_added"

    def __init__(self, client, name: str, capacity, fpr=0.01, *, layout="blocked", seed=0, hash_scheme="xxh3",
                 part_bytes=MAX_PART_BYTES, local_copy: bool = False):
        capacity = check_capacity(capacity)
        layout_id(layout)
        num_cells, num_hashes = theory.optimal_size(capacity, fpr, layout=layout)
        self._setup(client, name, Geometry("bloom", layout, num_cells, num_hashes, seed, hash_scheme, 1, capacity,
                                            part_bytes, float(fpr)), create=True)
        self._set_local_copy(local_copy)

    @classmethod
    def from_size(cls, client, name: str, num_cells, num_hashes, *, layout="blocked", seed=0, hash_scheme="xxh3",
                  part_bytes=MAX_PART_BYTES, local_copy: bool = False) -> "RedisBloomFilter":
        """A served filter of exactly ``num_cells`` bits and ``num_hashes`` probes per key. The default layout is
        ``"blocked"``, as for ``RedisBloomFilter(client, name, capacity, fpr)``: its size is a multiple of 512 bits
        (pass ``layout="classic"`` for any other size)."""
        self = cls.__new__(cls)
        self._setup(client, name, Geometry("bloom", layout, num_cells, num_hashes, seed, hash_scheme, 1, None,
                                            part_bytes), create=True)
        self._set_local_copy(local_copy)
        return self

    @classmethod
    def open(cls, client, name: str, *, local_copy: bool = False) -> "RedisBloomFilter":
        """Attach to an existing served filter by name (FilterNotFoundError, FilterMismatchError)."""
        if cls.ASYNC:
            return open_async(client, name, {cls._STRUCTURE: cls}, cls._STRUCTURE, local_copy)
        self = open_as(cls, client, name)
        self._set_local_copy(local_copy)
        return self

    def keep_local_copy(self, enabled: bool = True):
        """Answer ``contains`` and ``contains_many`` (method "auto") from a copy of the filter kept in this client,
        which the server invalidates (Redis client-side caching: ``bloomwise.redis.tracking``).

        The copy is read (``GETRANGE`` slices, bounded as ``method="read"``) on a connection of its own with
        ``CLIENT TRACKING ON``. Every call first sends a ``PING`` on it and reads up to the ``PONG``: the server has
        queued the invalidation of any write completed before (by any client: an update, a SETBIT by hand, DEL,
        FLUSHALL, a replacement) ahead of it. An unchanged copy answers, exactly as the server's bits would: a call
        costs one round trip plus the local test. After a write, the parts it touched (the whole filter when it has
        one part) are read again once the keys asked since reach one per READ_BYTES_PER_KEY bytes of them (at once
        for a large call); until then the server answers, as without a copy. So a copy pays for read-mostly filters
        and costs little (about twice the cheaper way at worst) where writes keep coming.
        Memory: one copy per filter (``nbytes``) and one connection. ``enabled=False`` drops both. The classes of
        ``bloomwise.redis.asyncio`` return an awaitable (it closes a dropped copy's connection)."""
        closing = self._set_local_copy(enabled)
        if self.ASYNC:
            return closing if closing is not None else _nothing()

    def _set_local_copy(self, enabled: bool):
        """keep_local_copy without the awaitable: None, or (asyncio) the closing of a dropped copy's connection."""
        if not isinstance(enabled, bool):
            raise TypeError(f"local_copy must be True or False, got {enabled!r}")
        dropped, self._local_copy = self._local_copy, None
        if enabled:
            # asyncio: connected by the first query (on a cluster the node serving the filter is known after the
            # first await)
            self._local_copy = LocalCopyState(None if self.ASYNC else TrackedConnection(self._client))
        return dropped.tracked.forget() if dropped is not None and dropped.tracked is not None else None

    @property
    def local_copy(self) -> bool:
        """Whether queries are answered from a copy the server invalidates (``keep_local_copy``)."""
        return self._local_copy is not None

    @property
    def keys_added(self) -> int:
        """How many added keys were certainly new when added (all clients together)."""
        return self._run(self._meta_int("keys_added"), f"reading {meta_key(self._keys)}")

    def __repr__(self) -> str:
        return (f"<RedisBloomFilter {self._name!r} on {server_address(self._client)}: {self._g.layout}, "
                f"{self._g.num_cells:,} bits, k={self._g.num_hashes}>")

    # -- writes -------------------------------------------------------------------------------------------------------
    def _set_bits(self, keys, single: bool, doing: str, threads=None):
        """Set the keys' bits; returns the per-key "was new" flags of the keys (numpy bool)."""
        offsets, n, _ = self._offsets(keys, single, threads)
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
        replies = yield from self._exchange(lambda i: pack_command(plan[i][0], plan[i][1], op, tail, 4), len(plan),
                                            doing,
                                 counts)
        _raise_error_replies(replies, doing, server_address(self._client))
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
            yield from self._command([b"HINCRBY", meta_key(self._keys).encode(), b"keys_added", str(added).encode()],
                                     "counting keys")
        return new

    def add(self, key) -> bool:
        """Set a key's bits; True when one of them was 0 (the key was certainly absent before)."""
        doing = f"adding a key to {self._name!r}"
        return self._run(then(self._set_bits(key, True, doing), lambda new: bool(new[0])), doing)

    def update(self, keys: Iterable, *, method: str = "auto", threads=None) -> None:
        """Add every key of an iterable or numpy array. ``threads``: as for a local BloomFilter, threads for the
        client's part of the work (hashing a numpy batch; building the local filter of ``"merge"``).

        ``method="bitfield"``: BITFIELD SET commands of 1,000 keys, pipelined (about 3 µs of server CPU a key).
        ``method="merge"``: the keys go into a local filter of the same parameters, which is then ORed into this
        one (``merge``: the server's cost is that of the filter's bytes, not of the keys). ``"auto"`` (default)
        merges when the batch holds at least one key per MERGE_BYTES_PER_KEY bytes of the filter (and its length
        is known). Both give the same bits; with "merge", ``keys_added`` counts the keys new to the batch.
        """
        if method not in ("auto", "bitfield", "merge"):
            raise ValueError(f"method must be 'auto', 'bitfield' or 'merge', got {method!r}")
        check_threads(threads)
        if method == "auto":
            size = len(keys) if hasattr(keys, "__len__") and not isinstance(keys, (str, bytes)) else 0
            method = "merge" if size * MERGE_BYTES_PER_KEY >= self._g.nbytes else "bitfield"
        doing = f"adding a batch to {self._name!r}"
        if method == "merge":
            return self._run(self._merge(self._local_batch(keys, threads)), doing)
        return self._run(then(self._set_bits(keys, False, doing, threads), lambda new: None), doing)

    def _local_batch(self, keys, threads=None):
        """A local BloomFilter of this filter's parameters holding ``keys``."""
        if isinstance(keys, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"a batch must be an iterable of keys, got one {type(keys).__name__}: "
                            "wrap a single key in a list")
        local = BloomFilter.from_size(self._g.num_cells, self._g.num_hashes, layout=self._g.layout, seed=self._g.seed,
                                      hash_scheme=self._g.hash_scheme)
        local.update(keys, threads=threads)
        return local

    # -- reads --------------------------------------------------------------------------------------------------------
    def _test(self, keys, single: bool, method: str = "auto", threads=None):
        doing = f"querying {self._name!r}"
        if not single and method != "per_key":
            size = _batch_size(keys)
            if method == "read" or (size is not None and size * READ_BYTES_PER_KEY >= self._g.nbytes):
                return (yield from self._test_snapshot(keys, doing, threads))
        offsets, n, shape = self._offsets(keys, single, threads)
        if n == 0:
            return np.zeros(shape, dtype=bool)
        if self._g.layout == "blocked" and not single:
            return (yield from self._test_blocks(offsets, doing)).reshape(shape)
        op = encode_args([b"GET", b"u1"])
        plan, masks = [], []
        for start in range(0, n, CHUNK_KEYS):
            chunk = offsets[start:start + CHUNK_KEYS]
            for part, local in self._split_parts(chunk):
                plan.append(([b"BITFIELD_RO", self._parts[part].encode()], local))
                masks.append((start, chunk.shape[0], part))
        replies = yield from self._exchange(lambda i: pack_command(plan[i][0], plan[i][1], op, b"", 3), len(plan),
                                            doing,
                                 [0] * len(plan))
        _raise_error_replies(replies, doing, server_address(self._client))
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

    def read_part(self, index: int, doing: str):
        """Part ``index`` of the payload as a uint8 array of its full length (``GETRANGE`` slices of at most
        READ_SLICE_BYTES, pipelined; bytes never written read as 0). Read-only when it came in one reply."""
        length = self._g.part_length(index)
        key = self._parts[index].encode()
        starts = list(range(0, length, READ_SLICE_BYTES))
        replies = yield from self._exchange(
            lambda i: encode_command([b"GETRANGE", key, str(starts[i]).encode(),
                                      str(min(starts[i] + READ_SLICE_BYTES, length) - 1).encode()]),
            len(starts), doing, [0] * len(starts))
        _raise_error_replies(replies, doing, server_address(self._client))
        if len(replies) == 1 and isinstance(replies[0], bytes) and len(replies[0]) == length:
            return np.frombuffer(replies[0], dtype=np.uint8)  # the whole part at once: no copy (read-only)
        part = np.zeros(length, dtype=np.uint8)
        for start, data in zip(starts, replies):
            expected = min(READ_SLICE_BYTES, length - start)
            if not isinstance(data, bytes) or len(data) > expected:
                raise FormatError(f"{self._parts[index]} answered {len(data) if isinstance(data, bytes) else data!r} "
                                  f"bytes for a slice of {expected}")
            part[start:start + len(data)] = np.frombuffer(data, dtype=np.uint8)
        return part

    def _test_snapshot(self, keys, doing: str, threads=None):
        """A batch large next to the filter: read every part once into a local BloomFilter of this geometry and ask
        it (the compiled core's batch kernels). The server spends about a nanosecond a byte instead of half a
        microsecond a key (READ_BYTES_PER_KEY). Bits are only ever set (clear() aside), so parts and slices read
        one after the other still find every key added before the call."""
        if isinstance(keys, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"a batch must be an iterable of keys, got one {type(keys).__name__}: "
                            "wrap a single key in a list")
        if len(self._parts) == 1:
            payload = yield from self.read_part(0, doing)  # copied once, by from_payload
        else:
            payload = np.zeros(self._g.nbytes, dtype=np.uint8)
            for index in range(len(self._parts)):
                part = yield from self.read_part(index, doing)
                payload[index * self._g.part_bytes:index * self._g.part_bytes + part.size] = part
        geometry = StorageGeometry("bloom", self._g.layout, self._g.num_cells, self._g.num_hashes, self._g.seed,
                                   self._g.hash_scheme)
        return BloomFilter.from_payload(geometry, payload).contains_many(keys, threads=threads)

    def _test_local_copy(self, keys, doing: str, threads=None):
        """Answer from the copy kept by ``keep_local_copy`` (fenced, and refreshed when that pays), or from the
        server while the copy is stale and reading it does not pay yet; on the copy's own connection (an awaitable
        for the classes of ``bloomwise.redis.asyncio``)."""
        if isinstance(keys, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"a batch must be an iterable of keys, got one {type(keys).__name__}: "
                            "wrap a single key in a list")
        if self.ASYNC:
            return self._test_local_copy_async(keys, doing, threads)
        state = self._local_copy
        with state.tracked.lock:
            try:
                fresh = drive_on(state.tracked.connection, self._refresh_steps(state, _batch_size(keys), doing), doing,
                                 self._client)
            except BaseException:
                state.tracked.forget()
                raise
            if fresh:
                return state.local.contains_many(keys, threads=threads)
            return self._drive(self._test(keys, False, "auto", threads), doing)

    async def _test_local_copy_async(self, keys, doing: str, threads=None):
        await self._attach_async()
        state = self._local_copy
        if state.tracked is None:
            state.tracked = TrackedConnection(self._client, asynchronous=True)
        async with state.tracked.async_lock():
            try:
                fresh = await drive_on_async(state.tracked.connection,
                                             self._refresh_steps(state, _batch_size(keys), doing), doing, self._client)
            except BaseException:
                await state.tracked.forget()
                raise
            if fresh:
                return state.local.contains_many(keys, threads=threads)
            return await drive_async(self._client, self._test(keys, False, "auto", threads), doing)

    def _refresh_steps(self, state: "LocalCopyState", size: Optional[int], doing: str):
        """Steps on the tracked connection; return whether the copy may answer this call of ``size`` keys (None:
        unknown). First the fence (PING: every invalidation queued before it is handled while reading its reply).
        Then, when parts are stale, they are read again if that pays: the keys answered by the server since the copy
        went stale, with this call's, reach one per READ_BYTES_PER_KEY bytes of the stale parts (the rule of
        ``contains_many``'s "auto", summed over calls: a ski-rental bound, at most about twice the cheaper of the
        two ways when writes keep coming); otherwise False, and the server answers this call."""
        tracked = state.tracked
        replies = yield from self._exchange(lambda i: encode_command([b"PING"]), 1, doing, [0])
        _raise_error_replies(replies, doing, server_address(self._client))
        if replies[0] not in (b"PONG", "PONG"):  # a push message taken for the reply: the fence would not hold
            raise ServedFilterError(f"PING on the tracked connection answered {replies[0]!r:.80} while {doing}: "
                                    "redis-py did not recognise the server's push messages (hiredis>=3.2 needed)")
        part_keys = [key.encode() for key in self._parts]
        stale = tracked.stale_indices(part_keys)
        if state.local is not None and not stale:
            return True
        stale_bytes = sum(self._g.part_length(index) for index in stale)
        if size is not None and (state.answered_while_stale + size) * READ_BYTES_PER_KEY < stale_bytes:
            state.answered_while_stale += size
            return False
        stale = tracked.take_stale(part_keys)  # from here, an invalidation marks a part again
        if state.local is None:
            stale = range(len(self._parts))
        payload = (np.zeros(self._g.nbytes, dtype=np.uint8) if state.local is None
                   else np.frombuffer(state.local.payload_view(), dtype=np.uint8).copy())
        for index in stale:
            part = yield from self.read_part(index, doing)
            payload[index * self._g.part_bytes:index * self._g.part_bytes + part.size] = part
        if state.local is None:
            geometry = StorageGeometry("bloom", self._g.layout, self._g.num_cells, self._g.num_hashes, self._g.seed,
                                       self._g.hash_scheme)
            state.local = BloomFilter.from_payload(geometry, payload)
        else:
            state.local.replace_payload(payload)
        state.answered_while_stale = 0
        return True

    def _test_blocks(self, offsets, doing: str):
        """Blocked layout: one ``GETRANGE`` of the key's 64-byte block per key, the bits tested here. The server
        spends about a quarter of the CPU time of ``BITFIELD_RO`` with k ``GET u1`` (benchmarks/redis_served.py)."""
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
        replies = yield from self._exchange(lambda i: pack_command(None, ranges[plan[i][1]], ops[plan[i][0]], b"", 4),
                                 len(plan), doing, [0] * len(plan), replies_per_command=[len(r) for _, r in plan])
        blocks = np.zeros((n, 64), dtype=np.uint8)
        for (_, rows), answers in zip(plan, replies):
            _raise_error_replies(answers, doing, server_address(self._client))
            data = b"".join(answers)
            if len(data) != 64 * len(rows):  # blocks past the end of a string that was never written so far
                data = b"".join(a.ljust(64, b"\0") for a in answers)
            blocks[rows] = np.frombuffer(data, dtype=np.uint8).reshape(-1, 64)
        within = (positions % np.uint64(512)).astype(np.int64)
        bits = (np.take_along_axis(blocks, within >> 3, axis=1) >> (within & 7).astype(np.uint8)) & 1
        return bits.all(axis=1)

    def contains(self, key) -> bool:
        """``key in f``: False means certainly absent, True "might be present"."""
        if self._local_copy is not None:
            found = self._test_local_copy([key], f"querying {self._name!r}")
            return _first_async(found) if self.ASYNC else bool(found[0])
        return self._run(then(self._test(key, True), lambda found: bool(found[0])), f"querying {self._name!r}")

    def contains_many(self, keys, *, method: str = "auto", threads=None):
        """A numpy bool array: whether each key might be present (the shape of a numpy input).

        ``method="per_key"``: a ``GETRANGE`` of each key's block (blocked layout) or ``BITFIELD_RO`` of its bits,
        pipelined (about 0.5 µs of server CPU a key). ``method="read"``: the filter's parts are read once and the
        bits tested here (the server's cost is that of the filter's bytes, not of the keys). ``"auto"`` (default)
        reads when the batch holds at least one key per READ_BYTES_PER_KEY bytes of the filter. Same answers.
        ``threads``: as for a local BloomFilter, threads for the client's part (hashing a numpy batch; testing the
        keys against the part read with ``"read"``).
        """
        if method not in ("auto", "per_key", "read"):
            raise ValueError(f"method must be 'auto', 'per_key' or 'read', got {method!r}")
        check_threads(threads)
        if self._local_copy is not None and method == "auto":
            return self._test_local_copy(keys, f"querying {self._name!r}", threads)
        return self._run(self._test(keys, False, method, threads), f"querying {self._name!r}")

    # -- bulk ----------------------------------------------------------------------------------------------------------
    def merge(self, local) -> None:
        """OR a local BloomFilter of the same parameters into this one (``SET`` a temporary key, ``BITOP OR``),
        part by part, each part in one transaction: the fast way to load many keys."""
        return self._run(self._merge(local), f"merging into {self._name!r}")

    def _merge(self, local):
        if not isinstance(local, BloomFilter):
            raise TypeError(f"merge takes a BloomFilter, got {type(local).__name__}")
        diff = local_geometry(local, self._g.part_bytes).differences(self._g)
        diff = [d for d in diff if not d.startswith("capacity")]
        if diff:
            raise FilterMismatchError(f"cannot merge into {self._name!r}: " + "; ".join(diff))
        payload = local.payload_view().cast("B")
        temporary = f"{self._keys}:merge:{uuid.uuid4().hex}".encode()
        doing = f"merging into {self._name!r}"
        for index, part in enumerate(self._parts):
            start = index * self._g.part_bytes
            data = payload[start:start + self._g.part_length(index)]
            if not np.frombuffer(data, dtype=np.uint8).any():  # nothing set in this part
                continue
            commands = [encode_command([b"MULTI"]), encode_command([b"SET", temporary, data]),
                        encode_command([b"BITOP", b"OR", part.encode(), part.encode(), temporary]),
                        encode_command([b"DEL", temporary]), encode_command([b"EXEC"])]
            try:
                replies = yield from self._exchange(commands.__getitem__, len(commands), doing, [0, 0, 0, 0, 1])
            except IncompleteBatchError as exc:
                raise IncompleteBatchError(
                    f"lost the connection to the Redis server at {server_address(self._client)} while merging into "
                    f"{self._name!r}: {index} of {len(self._parts)} parts were merged, part {index} may or may not "
                    f"be ({exc.__cause__}); retrying the merge is safe (OR sets bits only)",
                    applied_keys=0, unknown_keys=local.keys_counted, batch_id=None) from exc.__cause__
            inner = replies[-1] if isinstance(replies[-1], list) else []
            _raise_error_replies(replies + inner, doing, server_address(self._client))
        yield from self._command([b"HINCRBY", meta_key(self._keys).encode(), b"keys_added",
                                  str(local.keys_counted).encode()], "counting keys")


    # -- set operations on the server (BITOP) -------------------------------------------------------------------------
    def union(self, other, name: str, *, replace: bool = False) -> "RedisBloomFilter":
        """A new served filter ``name`` holding the keys of this one and of ``other`` (bitwise OR, exact), its
        ``keys_added`` the sum of theirs. ``other``: a served filter with this placement on the same server (on a
        cluster: in the same hash slot, names with a shared hash tag such as ``{tenant}-a``, ``{tenant}-b``), or a
        local ``BloomFilter``. The server computes it (``BITOP OR`` part by part, one MULTI/EXEC)."""
        return self._combined_into(other, name, b"OR", replace)

    def intersection(self, other, name: str, *, replace: bool = False) -> "RedisBloomFilter":
        """A new served filter ``name``: the bitwise AND of this one and ``other`` (as ``BloomFilter &``: it may
        answer "present" for a key of neither, never "absent" for a key of both); ``keys_added`` is this one's."""
        return self._combined_into(other, name, b"AND", replace)

    def union_update(self, other) -> None:
        """OR ``other`` into this filter, on the server (``|=``); see ``union``."""
        return self._run(self._bitop_steps(self, other, b"OR"), f"merging into {self._name!r}", served_only(other))

    def intersection_update(self, other) -> None:
        """AND ``other`` into this filter, on the server (``&=``); see ``intersection``."""
        return self._run(self._bitop_steps(self, other, b"AND"), f"intersecting {self._name!r}",
                         served_only(other))

    def __ior__(self, other):
        if self.ASYNC:
            raise TypeError("'|=' cannot await the server: use 'await f.union_update(other)'")
        self.union_update(other)
        return self

    def __iand__(self, other):
        if self.ASYNC:
            raise TypeError("'&=' cannot await the server: use 'await f.intersection_update(other)'")
        self.intersection_update(other)
        return self

    def __or__(self, other):
        raise TypeError("a served filter's union is stored on the server under a name: f.union(other, name), or "
                        "f |= other in place")

    def __and__(self, other):
        raise TypeError("a served filter's intersection is stored on the server under a name: "
                        "f.intersection(other, name), or f &= other in place")

    def _combined_into(self, other, name: str, op: bytes, replace: bool):
        target = type(self).__new__(type(self))
        target._setup(self._origin, name, self._g, create=False)
        doing = f"combining {self._name!r} into {target._name!r}"
        return self._run(then(self._bitop_steps(target, other, op, replace), lambda _: target), doing,
                         (target, *served_only(other)))

    def _bitop_steps(self, target, other, op: bytes, replace: bool = True):
        """Steps: ``target`` := this filter ``op`` ``other`` (OR / AND), part by part, in one MULTI/EXEC with the
        target's metadata and key count (a union adds ``other``'s ``keys_added``, read just before); a local
        ``other`` is sent once as temporary keys."""
        operation = "union" if op == b"OR" else "intersect"
        self._check_compatible(other, operation)
        if isinstance(other, _Served) and other.ASYNC == self.ASYNC:
            if not self._same_slot(other):
                raise ServedFilterError(
                    f"cannot {operation} {self._name!r} and {other._name!r} on the server: they are not on one "
                    "server and database, or (on a Redis Cluster) not in one hash slot, and BITOP reads one slot "
                    "only. Give the names a shared hash tag ({tenant}-a, {tenant}-b), or read one with from_redis "
                    "and combine it as a local filter")
        elif isinstance(other, _Served):
            kinds = ("bloomwise.redis.asyncio", "bloomwise.redis") if self.ASYNC else ("bloomwise.redis",
                                                                                     "bloomwise.redis.asyncio")
            raise TypeError(f"cannot {operation} a filter of {kinds[0]} with one of {kinds[1]}: open both with "
                            "one kind of client")
        if target is not self and not self._same_slot(target):
            raise ServedFilterError(
                f"cannot write the {operation} of {self._name!r} to {target._name!r}: not in the hash slot of "
                f"{self._name!r} (BITOP writes to the slot it reads); name it with the same hash tag")
        doing = f"{'merging into' if op == b'OR' else 'intersecting'} {target._name!r}"
        where = server_address(self._client)
        if target is not self and not replace:
            existing = yield from read_meta_steps(self._client, target._keys)
            if existing is not None:
                raise FilterMismatchError(f"a filter named {target._name!r} already exists on the server: pass "
                                          "replace=True to overwrite it")
        commands = [encode_command([b"MULTI"])]
        temporary = None
        if isinstance(other, _Served):
            sources = [p.encode() for p in other._parts]
            their_count = (yield from other._meta_int("keys_added")) if op == b"OR" else 0
        else:
            temporary = f"{self._keys}:combine:{uuid.uuid4().hex}"
            payload = local_payload(other)
            sources = [f"{temporary}:{i}".encode() for i in range(len(self._parts))]
            for index, key in enumerate(sources):
                start = index * self._g.part_bytes
                commands.append(encode_command([b"SET", key, payload[start:start + self._g.part_length(index)]]))
            their_count = other.keys_counted if op == b"OR" else 0
        if target is not self:
            commands.append(encode_command([b"DEL", meta_key(target._keys).encode(),
                                            *[p.encode() for p in target._parts]]))
        for mine, theirs, destination in zip(self._parts, sources, target._parts):
            commands.append(encode_command([b"BITOP", op, destination.encode(), mine.encode(), theirs]))
        if temporary is not None:
            commands.append(encode_command([b"DEL", *sources]))
        if target is not self:
            commands.append(encode_command([b"COPY", meta_key(self._keys).encode(), meta_key(target._keys).encode()]))
        if their_count:  # the union holds the keys of both
            commands.append(encode_command([b"HINCRBY", meta_key(target._keys).encode(), b"keys_added",
                                            str(their_count).encode()]))
        commands.append(encode_command([b"EXEC"]))
        replies = yield from self._exchange(commands.__getitem__, len(commands), doing, [0] * len(commands))
        inner = replies[-1] if isinstance(replies[-1], list) else []
        _raise_error_replies(replies + inner, doing, where)
        if not inner:
            raise ServedFilterError(f"the Redis server at {where} refused the transaction while {doing}")

    def _filled_cells(self, doing: str):
        """Steps: the bits set, counted by the server (BITCOUNT of every part; the padding is never set)."""
        replies = yield from self._exchange(lambda i: encode_command([b"BITCOUNT", self._parts[i].encode()]),
                                            len(self._parts), doing, [0] * len(self._parts))
        _raise_error_replies(replies, doing, server_address(self._client))
        return int(sum(replies))


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
    COUNT_FIELD = "num_keys"

    def __init__(self, client, name: str, capacity, fpr=0.01, *, counter_bits=4, layout="classic", seed=0,
                 hash_scheme="xxh3", part_bytes=MAX_PART_BYTES):
        capacity = check_capacity(capacity)
        layout_id(layout, COUNTING_LAYOUTS)
        num_cells, num_hashes = theory.optimal_size(capacity, fpr, layout=layout)
        self._setup(client, name, Geometry("counting", layout, num_cells, num_hashes, seed, hash_scheme,
                                            counter_bits, capacity, part_bytes, float(fpr)), create=True)

    @classmethod
    def from_size(cls, client, name: str, num_cells, num_hashes, *, counter_bits=4, layout="classic", seed=0,
                  hash_scheme="xxh3", part_bytes=MAX_PART_BYTES) -> "RedisCountingBloomFilter":
        """A served counting filter of exactly ``num_cells`` counters and ``num_hashes`` probes per key."""
        self = cls.__new__(cls)
        self._setup(client, name, Geometry("counting", layout, num_cells, num_hashes, seed, hash_scheme,
                                            counter_bits, None, part_bytes), create=True)
        return self

    @classmethod
    def open(cls, client, name: str) -> "RedisCountingBloomFilter":
        """Attach to an existing served counting filter by name (FilterNotFoundError, FilterMismatchError)."""
        if cls.ASYNC:
            return open_async(client, name, {cls._STRUCTURE: cls}, cls._STRUCTURE)
        return open_as(cls, client, name)

    @property
    def counter_bits(self) -> int:
        return self._g.counter_bits

    @property
    def counter_max(self) -> int:
        return 2 ** self._g.counter_bits - 1

    @property
    def num_keys(self) -> int:
        """Keys added minus keys removed (every occurrence counts), all clients together."""
        return self._run(self._meta_int("num_keys"), f"reading {meta_key(self._keys)}")

    def __repr__(self) -> str:
        return (f"<RedisCountingBloomFilter {self._name!r} on {server_address(self._client)}: {self._g.layout}, "
                f"{self._g.num_cells:,} counters x {self._g.counter_bits} bits, k={self._g.num_hashes}>")

    # -- scripts ----------------------------------------------------------------------------------------------------
    def _script_sha(self, source: str) -> bytes:
        shas = self.__dict__.setdefault("_shas", {})
        if source not in shas:
            shas[source] = yield from self._command([b"SCRIPT", b"LOAD", source.encode()], "loading a Lua script")
        return shas[source]

    def _run_scripts(self, offsets, starts, counts, chunks, mode: str, batch_id: str, doing: str,
                     applied_before: int, total_keys: int):
        """The removal script over the given chunks (pipelined); returns their [status, value] replies."""
        k = offsets.shape[1]
        meta = meta_key(self._keys).encode()
        parts = [p.encode() for p in self._parts]
        arguments = [str(BATCH_RECORD_SECONDS).encode(), str(k).encode(), str(self._g.part_bytes * 8).encode(),
                     f"u{self._g.counter_bits}".encode(), str(self.counter_max).encode(), mode.encode()]

        def pack(c, sha):
            record = f"{self._keys}:batch:{batch_id}:{c}".encode()
            head = [b"EVALSHA", sha, str(2 + len(parts)).encode(), meta, record, *parts, *arguments]
            return pack_command(head, offsets[starts[c]:starts[c] + counts[c]].reshape(-1), b"", b"", 1)

        pending = list(chunks)
        results = {}
        for attempt in range(2):  # a second time only for scripts the server had forgotten (NOSCRIPT)
            sha = yield from self._script_sha(REMOVE_SCRIPT)
            replies = yield from self._exchange(lambda i: pack(pending[i], sha), len(pending), doing,
                                     [counts[c] for c in pending], batch_id, applied_before, total_keys)
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
            self._shas.pop(REMOVE_SCRIPT, None)
            pending = retry
        return [results[c] for c in chunks]

    def _read_cells(self, offsets, doing, applied_before, total_keys):
        """Steps: current values of the cells at ``offsets`` (a flat array of Redis bit offsets)."""
        op = encode_args([b"GET", f"u{self._g.counter_bits}".encode()])
        plan = []
        for part, local in self._split_parts(offsets.reshape(-1, 1)):
            for s in range(0, local.size, CHUNK_KEYS * 8):
                plan.append((part, local[s:s + CHUNK_KEYS * 8]))
        replies = yield from self._exchange(lambda i: pack_command([b"BITFIELD_RO", self._parts[plan[i][0]].encode()],
                                                        plan[i][1], op, b"", 3),
                                 len(plan), doing, [0] * len(plan), None, applied_before, total_keys)
        _raise_error_replies(replies, doing, server_address(self._client))
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
        batch_id = _check_batch_id(batch_id)
        n = offsets.shape[0]
        chunk_keys = n if mode == "raise" else CHUNK_KEYS  # "raise" is all or nothing: one chunk
        starts = list(range(0, n, chunk_keys))
        counts = [min(chunk_keys, n - s) for s in starts]
        records = [f"{self._keys}:batch:{batch_id}:{c}".encode() for c in range(len(starts))]
        per_transaction = max(1, TRANSACTION_KEYS // chunk_keys)
        maximum = self.counter_max
        meta = meta_key(self._keys).encode()
        parts = [p.encode() for p in self._parts]
        minus_one = encode_args([b"-1"])
        op = encode_args([b"INCRBY", f"u{self._g.counter_bits}".encode()])
        removed = applied = 0
        for first in range(0, len(starts), per_transaction):
            group = list(range(first, min(first + per_transaction, len(starts))))
            group_keys = sum(counts[c] for c in group)
            done = None
            for _attempt in range(REMOVE_ATTEMPTS):
                watch = [encode_command([b"WATCH", *[records[c] for c in group], *parts]),
                         encode_command([b"MGET", *[records[c] for c in group]])]
                replies = yield from self._exchange(watch.__getitem__, 2, doing, [0, 0], batch_id, applied, n)
                _raise_error_replies(replies, doing, server_address(self._client))
                recorded = {c: int(r) for c, r in zip(group, replies[1]) if r is not None}
                todo = [c for c in group if c not in recorded]
                if not todo:
                    done = sum(recorded.values())
                    break
                rows = np.concatenate([offsets[starts[c]:starts[c] + counts[c]] for c in todo])
                distinct, demand = np.unique(rows, return_counts=True)
                values = (yield from self._read_cells(distinct, doing, applied, n))
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
                replies = yield from self._exchange(commands.__getitem__, len(commands), doing,
                                         [0] * (len(commands) - 1) + [group_keys], batch_id,
                                         applied, n)
                _raise_error_replies(replies[:-1], doing, server_address(self._client))
                if replies[-1] is None:
                    continue  # another client wrote the filter after WATCH: read again
                if isinstance(replies[-1], Exception):
                    raise ServedFilterError(f"the Redis server refused a transaction while {doing}: {replies[-1]}")
                _raise_error_replies(replies[-1], doing, server_address(self._client))
                done = sum(recorded.values()) + sum(counts[c] for c in todo)
                break
            if done is None:
                yield from self._exchange(lambda i: encode_command([b"UNWATCH"]), 1, doing, [0], batch_id,
                               applied, n)
                results = (yield from self._run_scripts(offsets, starts, counts, group, mode, batch_id, doing,
                                            applied, n))
                for result in results:
                    if int(result[0]) == 2:
                        raise KeyError(int(result[1]))
                done = sum(int(r[1]) for r in results)
            else:
                yield from self._exchange(lambda i: encode_command([b"UNWATCH"]), 1, doing, [0], batch_id,
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
        batch_id = _check_batch_id(batch_id)
        n = offsets.shape[0]
        op = encode_args([b"INCRBY", f"u{self._g.counter_bits}".encode()])
        tail = encode_args([b"1"])
        starts = list(range(0, n, CHUNK_KEYS))
        counts = [min(CHUNK_KEYS, n - s) for s in starts]
        records = [f"{self._keys}:batch:{batch_id}:{c}".encode() for c in range(len(starts))]
        went_up = np.zeros(n, dtype=bool)
        per_transaction = max(1, TRANSACTION_KEYS // CHUNK_KEYS)
        applied = 0
        meta = meta_key(self._keys).encode()
        for first in range(0, len(starts), per_transaction):
            group = range(first, min(first + per_transaction, len(starts)))
            group_keys = sum(counts[c] for c in group)
            watch = [encode_command([b"WATCH", *[records[c] for c in group]]),
                     encode_command([b"MGET", *[records[c] for c in group]])]
            for _attempt in range(OPTIMISTIC_ATTEMPTS):
                replies = yield from self._exchange(watch.__getitem__, 2, doing, [0, 0], batch_id, applied, n)
                _raise_error_replies(replies, doing, server_address(self._client))
                todo = [c for c, record in zip(group, replies[1]) if record is None]
                if not todo:
                    yield from self._exchange(lambda i: encode_command([b"UNWATCH"]), 1, doing, [0], batch_id,
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
                replies = yield from self._exchange(commands.__getitem__, len(commands), doing,
                                         [0] * (len(commands) - 1) + [group_keys], batch_id, applied,
                                         n)
                _raise_error_replies(replies[:-1], doing, server_address(self._client))
                result = replies[-1]
                if result is None:
                    continue  # a record changed after WATCH: another client applied a chunk; look again
                if isinstance(result, Exception):
                    raise ServedFilterError(f"the Redis server refused a transaction while {doing}: {result}")
                _raise_error_replies(result, doing, server_address(self._client))
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
        doing = f"adding to {self._name!r}"
        return self._run(then(self._increment(offsets, batch_id, doing), lambda went_up: bool(went_up[0])), doing)

    def update(self, keys: Iterable, *, batch_id: Optional[str] = None, threads=None) -> None:
        """Add one occurrence of every key. Applied once per ``batch_id`` (a fresh one when None): retrying the
        same keys with the same id after an IncompleteBatchError applies only what was not applied. ``threads``:
        threads for hashing a numpy batch (the counters are the server's work)."""
        offsets, n, _ = self._offsets(keys, False, threads)
        doing = f"adding a batch to {self._name!r}"
        return self._run(then(self._increment(offsets, batch_id, doing) if n else iter(()), lambda _: None), doing)

    def remove(self, key, *, batch_id: Optional[str] = None) -> None:
        """Remove one occurrence of a key; KeyError (and no change) when it is certainly absent."""
        offsets, _, _ = self._offsets(key, True)
        doing = f"removing from {self._name!r}"
        return self._run(then(naming_missing_key(self._decrement(offsets, "raise", batch_id, doing), lambda _: key),
                              lambda _: None), doing)

    def discard(self, key, *, batch_id: Optional[str] = None) -> bool:
        """Remove one occurrence of a key if it might be present; returns whether anything was removed."""
        offsets, _, _ = self._offsets(key, True)
        doing = f"removing from {self._name!r}"
        return self._run(then(self._decrement(offsets, "ignore", batch_id, doing), bool), doing)

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
        doing = f"removing a batch from {self._name!r}"
        if n == 0:
            return self._run(then(iter(()), lambda _: 0), doing)
        flat = keys.reshape(-1) if hasattr(keys, "reshape") else keys
        return self._run(naming_missing_key(self._decrement(offsets, missing, batch_id, doing), flat.__getitem__),
                         doing)

    # -- reads ------------------------------------------------------------------------------------------------------
    def _counter_values(self, keys, single: bool, threads=None):
        offsets, n, shape = self._offsets(keys, single, threads)
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
        replies = yield from self._exchange(lambda i: pack_command(plan[i][0], plan[i][1], op, b"", 3), len(plan),
                                            doing,
                                 [0] * len(plan))
        _raise_error_replies(replies, doing, server_address(self._client))
        for (start, count, part), reply in zip(where, replies):
            rows = values[start:start + count]
            if len(self._parts) == 1:
                rows[...] = np.asarray(reply, dtype=np.int64).reshape(rows.shape)
            else:
                rows[(offsets[start:start + count] // part_bits) == part] = np.asarray(reply, dtype=np.int64)
        return values, shape

    def contains(self, key) -> bool:
        """``key in f``: False means certainly absent (a counter of the key is 0)."""
        return self._run(then(self._counter_values(key, True), lambda got: bool((got[0][0] > 0).all())),
                         f"querying {self._name!r}")

    def contains_many(self, keys, *, threads=None):
        """A numpy bool array: whether each key might be present (all its counters > 0). ``threads``: threads for
        hashing a numpy batch."""
        return self._run(then(self._counter_values(keys, False, threads),
                              lambda got: (got[0] > 0).all(axis=1).reshape(got[1])), f"querying {self._name!r}")

    def counters(self, key) -> tuple:
        """The key's k counter values in probe order."""
        return self._run(then(self._counter_values(key, True), lambda got: tuple(int(v) for v in got[0][0])),
                         f"querying {self._name!r}")

    def count(self, key) -> int:
        """The smallest of the key's counters: how often it was added, at most."""
        return self._run(then(self._counter_values(key, True), lambda got: int(got[0][0].min())),
                         f"querying {self._name!r}")


# ---- construction helpers -------------------------------------------------------------------------------------------
def check_sync_client(client) -> None:
    """TypeError unless ``client`` is a redis-py ``Redis`` or ``RedisCluster`` (not asyncio)."""
    if is_async_client(client):
        raise TypeError("a redis.asyncio client: use the classes of bloomwise.redis.asyncio")
    if not is_cluster(client) and (not hasattr(client, "connection_pool") or not hasattr(client, "hgetall")):
        raise TypeError(f"client must be a redis.Redis or a redis.cluster.RedisCluster, got "
                        f"{type(client).__name__}")


def open_as(cls, client, name: str):
    """The served filter ``name`` of class ``cls`` (None: the class its metadata names)."""
    name = check_name(name)
    check_sync_client(client)
    node, prefix = route(client, name)
    wanted = {RedisBloomFilter: "bloom", RedisCountingBloomFilter: "counting", None: None}[cls]
    geometry = geometry_of(node, name, prefix, read_meta(node, prefix), wanted)
    cls = RedisBloomFilter if geometry.structure == "bloom" else RedisCountingBloomFilter
    self = cls.__new__(cls)
    self._bind(node, name, prefix, geometry, client)
    return self


def open(client, name: str):  # noqa: A001 - the module's verb, like bloomwise's BloomFilter.open
    """The served filter named ``name``, a RedisBloomFilter or a RedisCountingBloomFilter, from its metadata."""
    return open_as(None, client, name)


def local_geometry(local, part_bytes: int) -> Geometry:
    if getattr(local, "key_function", None) is not None:
        raise ValueError("a filter with a key= function cannot be served: other processes could not hash its keys")
    if isinstance(local, CountingBloomFilter):
        return Geometry("counting", local.layout, local.num_cells, local.num_hashes, local.seed,
                         local.hash_scheme, local.counter_bits, local.capacity, part_bytes, local.fpr)
    if isinstance(local, BloomFilter):
        if local.hash_scheme == "custom":
            raise ValueError("a filter built from explicit hash functions cannot be served")
        return Geometry("bloom", local.layout, local.num_cells, local.num_hashes, local.seed, local.hash_scheme, 1,
                         local.capacity, part_bytes, local.fpr)
    raise TypeError(f"to_redis takes a BloomFilter or a CountingBloomFilter, got {type(local).__name__}")


