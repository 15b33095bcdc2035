"""Whole filters, byte for byte: ``to_redis`` stores a local filter on the server, ``from_redis`` reads one back.

Both run in one MULTI/EXEC transaction, so readers never see half a filter and the copy is one consistent snapshot.
"""
from __future__ import annotations

from bloomwise._storage import StorageGeometry
from bloomwise.bloom import BloomFilter
from bloomwise.counting import CountingBloomFilter
from bloomwise.errors import FormatError
from bloomwise.redis.cluster import route
from bloomwise.redis.errors import FilterMismatchError, call_server
from bloomwise.redis.filters import local_geometry, open_as
from bloomwise.redis.geometry import MAX_PART_BYTES, check_name, meta_key, part_key, read_meta

__all__ = ["to_redis", "from_redis"]


def to_redis(local, client, name: str, *, part_bytes=MAX_PART_BYTES, replace=False):
    """Store a local BloomFilter or CountingBloomFilter on the server under ``name``, byte for byte; returns the
    served filter. FilterMismatchError when a filter of that name exists, unless ``replace=True``. The metadata and
    every part are written in one transaction, so readers never see half a filter."""
    name = check_name(name)
    geometry = local_geometry(local, part_bytes)
    cluster_client, (client, prefix) = client, route(client, name)
    if not replace and read_meta(client, prefix) is not None:
        raise FilterMismatchError(f"a filter named {name!r} already exists on the server: pass replace=True to "
                                  "overwrite it")
    payload = local.payload_view().cast("B")
    fields = geometry.to_fields()
    count_field = "num_keys" if geometry.structure == "counting" else "keys_added"
    fields[count_field] = str(local.num_keys if geometry.structure == "counting" else local.keys_counted)
    pipe = client.pipeline(transaction=True)
    pipe.delete(meta_key(prefix), *[part_key(prefix, i) for i in range(geometry.num_parts)])
    for index in range(geometry.num_parts):
        start = index * geometry.part_bytes
        pipe.set(part_key(prefix, index), payload[start:start + geometry.part_length(index)].tobytes())
    pipe.hset(meta_key(prefix), mapping=fields)
    call_server(client, f"storing {name!r}", pipe.execute)
    return open_as(None, cluster_client, name)


def from_redis(client, name: str):
    """The served filter ``name`` as a local BloomFilter or CountingBloomFilter, byte for byte (one consistent
    snapshot: the parts are read in one transaction). FormatError when what the server holds is inconsistent."""
    served = open_as(None, client, name)
    client, prefix = served.client, served.key_prefix  # on a cluster: the node serving the filter
    g = served.geometry
    pipe = client.pipeline(transaction=True)
    pipe.hget(meta_key(prefix), served.COUNT_FIELD)
    for index, part in enumerate(served.part_keys):
        pipe.strlen(part)
    lengths = call_server(client, f"reading {name!r}", pipe.execute)
    for index, length in enumerate(lengths[1:]):
        if length > g.part_length(index):
            raise FormatError(f"{served.part_keys[index]} holds {length} bytes; the filter's part {index} has "
                              f"{g.part_length(index)}")
    pipe = client.pipeline(transaction=True)
    pipe.hget(meta_key(prefix), served.COUNT_FIELD)
    for part in served.part_keys:
        pipe.get(part)
    answer = call_server(client, f"reading {name!r}", pipe.execute)
    payload = bytearray(g.nbytes)
    for index, data in enumerate(answer[1:]):
        data = data or b""
        if len(data) > g.part_length(index):
            raise FormatError(f"{served.part_keys[index]} holds {len(data)} bytes; the filter's part {index} has "
                              f"{g.part_length(index)}")
        start = index * g.part_bytes
        payload[start:start + len(data)] = data
    count = int(answer[0] or 0)
    cell_options = (("counter_bits", g.counter_bits),) if g.structure == "counting" else ()
    geometry = StorageGeometry(g.structure, g.layout, g.num_cells, g.num_hashes, g.seed, g.hash_scheme, cell_options)
    cls = CountingBloomFilter if g.structure == "counting" else BloomFilter
    local = cls.from_payload(geometry, bytes(payload), num_keys=max(0, count))
    local.set_target(g.capacity, g.fpr)
    return local
