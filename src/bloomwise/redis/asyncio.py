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
    backup = await urls.copy("urls-backup")                             # a new key, copied by the server
    local = await from_redis(client, "urls")                            # a local BloomFilter, byte for byte
    await to_redis(local, client, "urls-2")

``client`` may also be a ``redis.asyncio.RedisCluster``: the filter's keys share the hash tag ``{name}`` and its
operations run on the connections of the node that serves that slot (``bloomwise.redis.cluster``), found on the
filter's first await.

Every operation is the sync class's own generator of steps (``bloomwise.redis.filters``), driven on a connection of
the asyncio client's pool (``drive_async``): the same pipelined commands, the same MULTI/EXEC transactions with their
batch records (a counting batch applies exactly once, also when retried with ``batch_id=`` after an
``IncompleteBatchError``), the same errors. Hashing and packing run in C on the event loop's thread (well under a
microsecond a key; run a very large batch in an executor when the loop must stay responsive).

``to_redis`` and ``from_redis`` are the sync module's steps (``filters.store_steps``, ``filters.read_local_steps``),
awaited: one transaction each, the same errors.
"""
from __future__ import annotations

from bloomwise.redis import filters
from bloomwise.redis.copying import unbound_served
from bloomwise.redis.errors import redis_module, server_address, server_error
from bloomwise.redis.geometry import MAX_PART_BYTES
from bloomwise.redis.redisbloom import DEFAULT_MAX_BYTES, key_name, scandump_error, scandump_steps

__all__ = ["RedisBloomFilter", "RedisCountingBloomFilter", "open", "to_redis", "from_redis", "from_redisbloom"]


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


async def to_redis(local, client, name: str, *, part_bytes=MAX_PART_BYTES, replace=False):
    """``bloomwise.redis.to_redis`` on a redis.asyncio client: store a local BloomFilter or CountingBloomFilter under
    ``name`` in one transaction; returns the served filter (of this module)."""
    if not filters.is_async_client(client):
        raise TypeError(f"client must be a redis.asyncio.Redis or a redis.asyncio.RedisCluster, got "
                        f"{type(client).__name__}")
    served = unbound_served({"bloom": RedisBloomFilter, "counting": RedisCountingBloomFilter}, local, client, name,
                            part_bytes)
    await filters.run_steps(served, filters.store_steps(served, local, replace), f"storing {name!r}")
    return served


async def from_redis(client, name: str):
    """``bloomwise.redis.from_redis`` on a redis.asyncio client: the served filter ``name`` as a local BloomFilter
    or CountingBloomFilter, byte for byte (one transaction)."""
    served = await open(client, name)
    return await filters.run_steps(served, filters.read_local_steps(served), f"reading {name!r}")


async def from_redisbloom(client, key, *, max_bytes: int = DEFAULT_MAX_BYTES):
    """``bloomwise.redis.from_redisbloom`` on a redis.asyncio client or cluster client (redis-py sends each
    BF.SCANDUMP to the node owning the key's slot): the same checks of every reply, the same
    ``RedisBloomSnapshot``, the same errors."""
    if not filters.is_async_client(client):
        raise TypeError(f"client must be a redis.asyncio.Redis or a redis.asyncio.RedisCluster, got "
                        f"{type(client).__name__}")
    redis = redis_module()
    name = key_name(key)
    doing = f"reading the RedisBloom filter {name!r}"
    steps = scandump_steps(max_bytes=max_bytes, name=name)
    try:
        iteration = next(steps)
        while True:
            try:
                reply = await client.execute_command("BF.SCANDUMP", key, iteration)
            except redis.exceptions.ResponseError as exc:
                raise scandump_error(exc, name, server_address(client), iteration) from None
            except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
                raise server_error(client, exc, doing) from exc
            iteration = steps.send(reply)
    except StopIteration as stop:
        return stop.value
