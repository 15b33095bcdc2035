"""Served filters over ``redis.asyncio``: the same classes, names and commands as ``bloomwise.redis``, awaited.

::

    import redis.asyncio
    from bloomwise.redis.asyncio import RedisBloomFilter, RedisCountingBloomFilter, open

    client = redis.asyncio.Redis(unix_socket_path="/run/redis/redis.sock")
    urls = await RedisBloomFilter(client, "urls", 1_000_000, 0.01)     # creates or attaches, like the sync class
    await urls.add("https://example.com/")                              # True: certainly new
    await urls.update(keys)
    await urls.contains("https://example.com/")                         # ``in`` cannot await: contains()
    await urls.contains_many(keys)                                      # a numpy bool array
    summary = await RedisCountingBloomFilter(client, "summary", 100_000, 0.01)
    await summary.update(keys, batch_id="b-17")                         # exactly once per batch id
    await summary.remove_many(keys, missing="ignore")
    await summary.num_keys                                              # properties that read the server: awaited
    same = await open(client, "urls")

Every operation is the sync class's own generator of steps (``bloomwise.redis.filters``), driven on a connection of
the asyncio client's pool (``drive_async``): the same pipelined commands, the same MULTI/EXEC transactions with their
batch records (a counting batch applies exactly once, also when retried with ``batch_id=`` after an
``IncompleteBatchError``), the same errors. Hashing and packing run in C on the event loop's thread (well under a
microsecond a key; run a very large batch in an executor when the loop must stay responsive).

Limits: a ``redis.asyncio.RedisCluster`` client is not supported yet (the sync ``RedisCluster`` is);
``to_redis`` / ``from_redis`` are sync only.
"""
from __future__ import annotations

from bloomwise.redis import filters

__all__ = ["RedisBloomFilter", "RedisCountingBloomFilter", "open"]


class RedisBloomFilter(filters.RedisBloomFilter):
    """``bloomwise.redis.RedisBloomFilter`` on a ``redis.asyncio.Redis``: every operation returns an awaitable."""

    ASYNC = True


class RedisCountingBloomFilter(filters.RedisCountingBloomFilter):
    """``bloomwise.redis.RedisCountingBloomFilter`` on a ``redis.asyncio.Redis``: every operation returns an
    awaitable."""

    ASYNC = True


async def open(client, name: str):  # noqa: A001 - the module's verb, like bloomwise.redis.open
    """The served filter ``name`` (a RedisBloomFilter or a RedisCountingBloomFilter of this module)."""
    return await filters.open_async(client, name, {"bloom": RedisBloomFilter, "counting": RedisCountingBloomFilter})
