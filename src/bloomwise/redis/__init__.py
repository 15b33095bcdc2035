"""Bloom filters served by Redis or Valkey: many processes and hosts read and update one filter.

``RedisBloomFilter`` and ``RedisCountingBloomFilter`` keep their bits or counters in a Redis server (core commands
only: no module such as RedisBloom is needed) and hash keys exactly as the local ``BloomFilter`` and
``CountingBloomFilter`` do, so a local filter pushed with ``to_redis`` and pulled back with ``from_redis`` is
bit-identical, and a filter built locally merges into a served one with ``BITOP OR`` (``merge``).
``from_redisbloom`` reads a RedisBloom filter (``BF.*``) into a local read-only structure that answers as
``BF.EXISTS`` does.

Storage (docs/redis.md), for a filter named ``name``:

- ``name:meta``: a hash of the parameters (structure, layout, num_cells, num_hashes, seed, hash scheme, counter bits,
  capacity, part size, format version) and the key count. A second process opens the filter with
  ``open(client, name)`` from it alone.
- ``name:part:0``, ``name:part:1``, ...: the payload of the local filter, byte for byte, cut into parts of at most
  ``part_bytes`` (default 512 MiB, the largest Redis string). Local bit p is bit p % 8 of byte p // 8 (LSB first);
  Redis numbers bits from the most significant bit of a byte, so bit p is Redis bit offset ``p ^ 7``. A 4-bit
  counter i is nibble i % 2 of byte i // 2 (the low nibble for even i), which is the 4-bit field at Redis bit
  offset ``4 i ^ 4``; an 8-bit counter i is the byte i.
- ``name:batch:<id>:<chunk>``: the record of one applied chunk of a counting batch (exactly-once retries; expires).

The package's modules, one purpose each: ``filters`` (the served classes), ``copying`` (``to_redis``,
``from_redis``), ``geometry`` (parameters and key names), ``scripts`` (the Lua scripts), ``errors``, ``cluster``
(Redis Cluster: a filter's keys in one hash slot), ``asyncio`` (the same classes over ``redis.asyncio``),
``redisbloom`` (reading RedisBloom's filters).
"""
from bloomwise.redis.copying import from_redis, to_redis
from bloomwise.redis.errors import (
    FilterMismatchError, FilterNotFoundError, IncompleteBatchError, ServedFilterError, ServerUnavailableError,
    call_server,
)
from bloomwise.redis.filters import RedisBloomFilter, RedisCountingBloomFilter, open
from bloomwise.redis.geometry import FORMAT_VERSION, MAX_PART_BYTES
from bloomwise.redis.redisbloom import RedisBloomSnapshot, from_redisbloom

__all__ = [
    "RedisBloomFilter", "RedisCountingBloomFilter", "to_redis", "from_redis", "open",
    "ServedFilterError", "FilterNotFoundError", "FilterMismatchError", "ServerUnavailableError",
    "IncompleteBatchError", "FORMAT_VERSION", "MAX_PART_BYTES", "call_server", "from_redisbloom",
    "RedisBloomSnapshot",
]
