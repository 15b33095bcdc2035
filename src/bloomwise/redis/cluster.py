"""Served filters on a Redis Cluster: every key of a filter in one hash slot, so one node serves the whole filter.

A Redis Cluster places a key by the CRC16 of its *hash tag* (the part between the first ``{`` and the next ``}``)
when it has one. On a cluster client (``redis.cluster.RedisCluster``) a filter named ``urls`` keeps its keys under
the prefix ``{urls}`` (``{urls}:meta``, ``{urls}:part:0``, ``{urls}:batch:...``): one slot, one node, so the
counting filter's MULTI/EXEC transactions, WATCH and Lua scripts work as on a single server. A name that already
holds a hash tag (``tenant-{7}-urls``) is used as it is. On a plain ``redis.Redis`` the prefix is the name itself.

A filter is served by the node that owns its slot: ``route`` asks the cluster client for that node and returns a
plain ``redis.Redis`` of it, which the filter then uses for everything. Filters spread over the nodes by name.
When that node fails, the filter's operations raise ``ServerUnavailableError`` naming the node; after a failover
or a resharding (``MOVED``), open the filter again (``open(cluster_client, name)``) to reach its new node.

A ``redis.asyncio.RedisCluster`` is routed the same way by ``route_async`` (awaited: the client learns the cluster's
slots on its first use): the filter then runs on the connections of that node's ``ClusterNode``, which the cluster
client owns and closes (``AsyncNodeClient``).
"""
from __future__ import annotations

from bloomwise.redis.errors import ServerUnavailableError, redis_module

__all__ = ["is_cluster", "has_hash_tag", "key_prefix", "key_slot", "route", "node_serving", "route_async",
           "AsyncNodeClient"]


def is_cluster(client) -> bool:
    """Whether ``client`` is a Redis Cluster client (redis-py's ``RedisCluster``, sync or asyncio)."""
    return hasattr(client, "get_node_from_key") and hasattr(client, "nodes_manager")


def has_hash_tag(name: str) -> bool:
    """Whether ``name`` holds a Redis Cluster hash tag: a ``{`` followed later by a ``}`` with something between."""
    start = name.find("{")
    return start >= 0 and name.find("}", start + 2) > start


def key_prefix(client, name: str) -> str:
    """The prefix of the filter's keys: ``{name}`` on a cluster client (unless the name holds a hash tag), else
    the name."""
    return f"{{{name}}}" if is_cluster(client) and not has_hash_tag(name) else name


def key_slot(key: str) -> int:
    """The cluster hash slot of a key (CRC16 of its hash tag, or of the whole key, mod 16384)."""
    redis_module()
    from redis.crc import key_slot as crc16_slot  # redis-py is the optional redis extra
    return crc16_slot(key.encode())


def route(client, name: str):
    """(the client that serves the filter ``name``, the prefix of its keys). A cluster client gives the plain
    ``redis.Redis`` of the node owning the filter's slot; any other client is returned as it is."""
    prefix = key_prefix(client, name)
    return node_serving(client, f"{prefix}:meta", f"{name!r} (keys {prefix}:...)"), prefix


def node_serving(client, key, what: str):
    """The plain ``redis.Redis`` of the cluster node owning ``key``'s slot (``client`` itself when it is not a
    cluster client); ``what`` names the key in errors."""
    if not is_cluster(client):
        return client
    redis = redis_module()
    try:
        node = client.get_node_from_key(key)
        node_client = client.get_redis_connection(node)
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
        raise ServerUnavailableError(f"cannot find the cluster node serving {what}: {exc}") from exc
    if node_client is None:
        raise ServerUnavailableError(f"no cluster node serves the slot of {what}")
    return node_client


async def route_async(client, name: str):
    """``route`` for redis.asyncio: (an ``AsyncNodeClient`` of the node owning the filter's slot, the prefix of its
    keys) for a ``redis.asyncio.RedisCluster``; any other client is returned as it is."""
    prefix = key_prefix(client, name)
    if not is_cluster(client):
        return client, prefix
    redis = redis_module()
    try:
        await client.initialize()  # a no-op once the client knows the cluster's slots
        node = client.get_node_from_key(f"{prefix}:meta")
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
        raise ServerUnavailableError(f"cannot find the cluster node serving {name!r} (keys {prefix}:...): "
                                     f"{exc}") from exc
    if node is None:
        raise ServerUnavailableError(f"no cluster node serves the slot of {name!r} (keys {prefix}:...)")
    return AsyncNodeClient(node), prefix


class AsyncNodeClient:
    """One node of a ``redis.asyncio.RedisCluster`` as a served filter uses a client: ``connection_pool`` lends
    and takes back the connections of the node's ``ClusterNode`` (owned, and closed, by the cluster client), and
    names the node (``connection_kwargs``: host, port)."""

    def __init__(self, node):
        self.node = node
        self.connection_pool = _AsyncNodePool(node)

    def __repr__(self) -> str:
        return f"<AsyncNodeClient {self.node.host}:{self.node.port}>"


class _AsyncNodePool:
    """The two calls of a redis.asyncio ``ConnectionPool`` a served filter makes, on a ``ClusterNode``."""

    def __init__(self, node):
        self.node = node
        self.connection_kwargs = node.connection_kwargs

    async def get_connection(self):
        return self.node.acquire_connection()

    async def release(self, connection) -> None:
        self.node.release(connection)
