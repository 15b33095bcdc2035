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
"""
from __future__ import annotations

from bloomwise.redis.errors import ServerUnavailableError, redis_module

__all__ = ["is_cluster", "has_hash_tag", "key_prefix", "route"]


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


def route(client, name: str):
    """(the client that serves the filter ``name``, the prefix of its keys). A cluster client gives the plain
    ``redis.Redis`` of the node owning the filter's slot; any other client is returned as it is."""
    prefix = key_prefix(client, name)
    if not is_cluster(client):
        return client, prefix
    redis = redis_module()
    try:
        node = client.get_node_from_key(f"{prefix}:meta")
        node_client = client.get_redis_connection(node)
    except (redis.exceptions.RedisError, OSError) as exc:
        raise ServerUnavailableError(f"cannot find the cluster node serving {name!r} (keys {prefix}:...): "
                                     f"{exc}") from exc
    if node_client is None:
        raise ServerUnavailableError(f"no cluster node serves the slot of {name!r} (keys {prefix}:...)")
    return node_client, prefix
