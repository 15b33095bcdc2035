"""The errors of served filters, and the one place where redis-py's exceptions become them.

Internal interface of ``bloomwise.redis`` (the package re-exports the error classes): ``redis_module`` imports
redis-py or says how to install it; ``server_address`` names a client's server; ``server_error`` and ``call_server``
turn redis-py's connection and authentication errors into ``ServerUnavailableError`` naming the address.
"""
from __future__ import annotations

from typing import Optional

__all__ = ["ServedFilterError", "FilterNotFoundError", "FilterMismatchError", "ServerUnavailableError",
           "IncompleteBatchError", "redis_module", "server_address", "server_error", "reply_error", "call_server"]


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


def redis_module():
    """The redis-py package (ImportError naming the extra to install when it is missing)."""
    try:
        import redis
    except ImportError:  # pragma: no cover - depends on the installation
        raise ImportError("bloomwise.redis needs redis-py: pip install 'bloomwise[redis]'") from None
    return redis


def server_address(client) -> str:
    """"unix:PATH" or "HOST:PORT" of a redis-py client (a cluster client: the node it would ask first)."""
    pool = getattr(client, "connection_pool", None)
    if pool is None and hasattr(client, "get_default_node"):  # a RedisCluster
        node = client.get_default_node()
        return f"the cluster of {node.host}:{node.port}" if node is not None else "a cluster"
    kwargs = getattr(pool, "connection_kwargs", {})
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def server_error(client, exc, doing: str) -> ServedFilterError:
    """A clear error for a redis-py exception raised while ``doing`` something."""
    redis = redis_module()
    where = server_address(client)
    if isinstance(exc, redis.exceptions.AuthenticationError) or (
            isinstance(exc, redis.exceptions.ResponseError) and "NOAUTH" in str(exc)):
        return ServerUnavailableError(f"the Redis server at {where} refused the credentials while {doing} ({exc}): "
                                      "check the password (and username) given to the client")
    if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)):
        return ServerUnavailableError(f"cannot reach the Redis server at {where} while {doing}: {exc}")
    return reply_error(where, exc, doing)


def reply_error(where: str, exc, doing: str) -> ServedFilterError:
    """The error for an error reply of the server: a cluster's MOVED / ASK (the filter's slot now lives on another
    node) says to open the filter again; anything else names the reply."""
    redis = redis_module()
    if isinstance(exc, (redis.exceptions.MovedError, redis.exceptions.AskError)):
        return ServedFilterError(f"the cluster node at {where} no longer serves the filter's slot (it moved to "
                                 f"{exc.host}:{exc.port}) while {doing}: open the filter again "
                                 "(bloomwise.redis.open(cluster_client, name))")
    return ServedFilterError(f"the Redis server at {where} answered an error while {doing}: {exc}")


def call_server(client, doing: str, fn, *args, **kwargs):
    """Run a redis-py call, turning its connection and authentication errors into ours."""
    redis = redis_module()
    try:
        return fn(*args, **kwargs)
    except redis.exceptions.RedisError as exc:
        raise server_error(client, exc, doing) from exc

