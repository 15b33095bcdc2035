"""A dedicated connection on which the server tracks the keys read (Redis client-side caching, ``CLIENT TRACKING``).

``RedisBloomFilter(..., local_copy=True)`` keeps a copy of the served filter in the client and asks the server to
say when it goes stale: the parts are read on a connection of its own, in RESP3 with ``CLIENT TRACKING ON``
(default mode: the server remembers the keys this connection read and, when any client changes one of them,
pushes an ``invalidate`` message naming it; ``FLUSHALL`` / ``FLUSHDB`` push one with no keys). Push messages come
in order with the replies of the same connection, and the server queues the message while it executes the write.
So a ``PING`` sent when a call starts is answered after the invalidation of every write that completed before:
reading up to its ``PONG`` (one round trip) is a fence after which the copy is known valid or known stale.

redis-py's own client-side cache (``CacheConfig``) is not used: it needs Redis 7.4 (Debian 12 ships 7.0), caches
replies of single commands (the library sends packed pipelines), and checks for invalidations without waiting, so
a write completed by another client just before may not have reached the socket yet.
"""
from __future__ import annotations

import asyncio
import threading

from bloomwise.redis.errors import ServedFilterError, redis_module

__all__ = ["TrackedConnection"]


class TrackedConnection:
    """A RESP3 connection to the server of ``client`` with ``CLIENT TRACKING ON``, and the keys it was told changed.

    ``stale_keys`` gathers the keys named by invalidation messages (bytes); ``everything_stale`` is set by a flush
    and by every (re)connection (messages may have been lost while disconnected). The owner reads the keys it
    caches on ``connection``, fences with a PING before trusting its copy, and clears what it re-read. ``lock``
    serializes the users of the connection (one filter, many threads)."""

    def __init__(self, client, asynchronous: bool = False):
        redis = redis_module()
        pool = client.connection_pool
        options = dict(pool.connection_kwargs)
        default = redis.asyncio.connection.DefaultParser if asynchronous else redis.connection.DefaultParser
        parser = options.get("parser_class", default)
        if not hasattr(parser, "set_invalidation_push_handler"):
            raise ServedFilterError("a local copy needs redis-py's reply parser for RESP3 push messages: install "
                                    "hiredis>=3.2 (part of bloomwise's redis extra)")
        if asynchronous:
            async def handler(message):  # redis.asyncio awaits the handler
                self._invalidated(message)
        else:
            handler = self._invalidated

        class InvalidationParser(parser):
            """The client's reply parser, handing ``invalidate`` push messages to this TrackedConnection (redis-py
            calls the handler while reading the replies that follow a message)."""

            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.set_invalidation_push_handler(handler)

        # RESP3 for push messages; keys and payloads as bytes
        options.update(protocol=3, decode_responses=False, parser_class=InvalidationParser)
        self.asynchronous = asynchronous
        self.connection = pool.connection_class(**options)
        self.connection.register_connect_callback(self._on_connect_async if asynchronous else self._on_connect)
        # an asyncio.Lock is bound to the event loop of its first use: made then (``async_lock``)
        self.lock = None if asynchronous else threading.Lock()
        self.stale_keys: set = set()
        self.everything_stale = True

    def async_lock(self) -> asyncio.Lock:
        if self.lock is None:
            self.lock = asyncio.Lock()
        return self.lock

    def _on_connect(self, connection) -> None:
        """Called by redis-py after every (re)connection and handshake: turn tracking on, trust nothing read
        before."""
        self.everything_stale = True
        connection.send_command("CLIENT", "TRACKING", "ON")
        self._check_tracking(connection.read_response())

    async def _on_connect_async(self, connection) -> None:
        """``_on_connect`` for a redis.asyncio connection."""
        self.everything_stale = True
        await connection.send_command("CLIENT", "TRACKING", "ON")
        self._check_tracking(await connection.read_response())

    @staticmethod
    def _check_tracking(reply) -> None:
        if reply not in (b"OK", "OK"):
            raise ServedFilterError(f"the Redis server refused CLIENT TRACKING ON: {reply!r:.80}")

    def _invalidated(self, message) -> None:
        """``["invalidate", [key, ...]]``, or ``["invalidate", None]`` after a flush of the database."""
        keys = message[1] if len(message) > 1 else None
        if keys is None:
            self.everything_stale = True
        else:
            self.stale_keys.update(key.encode() if isinstance(key, str) else bytes(key) for key in keys)

    def stale_indices(self, keys) -> list:
        """The indices of ``keys`` (bytes) known stale, without forgetting it."""
        if self.everything_stale:
            return list(range(len(keys)))
        return [i for i, key in enumerate(keys) if key in self.stale_keys]

    def take_stale(self, keys) -> list:
        """The indices of ``keys`` (bytes) to read again, forgetting that they were stale (an invalidation arriving
        while they are read marks them again)."""
        if self.everything_stale:
            stale = list(range(len(keys)))
        else:
            stale = [i for i, key in enumerate(keys) if key in self.stale_keys]
        self.everything_stale = False
        self.stale_keys.clear()
        return stale

    def forget(self):
        """After a failure: disconnect (the next use reconnects, tracking again) and trust nothing. An awaitable
        for a redis.asyncio connection."""
        self.everything_stale = True
        return self.connection.disconnect()
