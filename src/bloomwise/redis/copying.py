"""Whole filters, byte for byte: ``to_redis`` stores a local filter on the server, ``from_redis`` reads one back.

Both run in one MULTI/EXEC transaction, so readers never see half a filter and the copy is one consistent snapshot.
The steps are ``filters.store_steps`` and ``filters.read_local_steps``, which ``bloomwise.redis.asyncio`` awaits
under the same names.
"""
from __future__ import annotations

from bloomwise.redis.filters import (
    RedisBloomFilter, RedisCountingBloomFilter, attached, check_sync_client, local_geometry, open_as,
    read_local_steps, run_steps, store_steps,
)
from bloomwise.redis.geometry import MAX_PART_BYTES, check_name

__all__ = ["to_redis", "from_redis", "unbound_served"]


def unbound_served(classes: dict, local, client, name: str, part_bytes: int):
    """The served filter that will hold ``local`` under ``name`` (of ``classes[structure]``), bound to the server
    (or, asyncio, about to be) but not created there."""
    name = check_name(name)
    geometry = local_geometry(local, part_bytes)
    return attached(classes[geometry.structure], client, name, geometry)


def to_redis(local, client, name: str, *, part_bytes=MAX_PART_BYTES, replace=False):
    """Store a local BloomFilter or CountingBloomFilter on the server under ``name``, byte for byte; returns the
    served filter. FilterMismatchError when a filter of that name exists, unless ``replace=True``. The metadata and
    every part are written in one transaction, so readers never see half a filter."""
    check_sync_client(client)
    served = unbound_served({"bloom": RedisBloomFilter, "counting": RedisCountingBloomFilter}, local, client, name,
                            part_bytes)
    run_steps(served, store_steps(served, local, replace), f"storing {name!r}")
    return served


def from_redis(client, name: str):
    """The served filter ``name`` as a local BloomFilter or CountingBloomFilter, byte for byte (one consistent
    snapshot: the parts are read in one transaction). FormatError when what the server holds is inconsistent."""
    served = open_as(None, client, name)
    return run_steps(served, read_local_steps(served), f"reading {name!r}")
