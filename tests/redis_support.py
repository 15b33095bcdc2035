"""Helpers for the tests that run a private redis-server (bloomwise._redis_server, Debian's redis-server on a unix
socket in a temporary directory): the skip marker, a server made for a fixture, a client of an emptied server, keys,
and a server killed in the middle of a batch."""
from __future__ import annotations

import contextlib

import pytest

from bloomwise._native.served import pack_command
from bloomwise._redis_server import (MISSING_REDISBLOOM_MESSAGE, MISSING_SERVER_MESSAGE, LocalRedisServer,
                                     find_redis_server, find_redisbloom_module)

#: skips a test when redis-server is not installed, saying what to install
needs_server = pytest.mark.skipif(find_redis_server() is None, reason=MISSING_SERVER_MESSAGE)


def local_redis_server(*, redisbloom: bool = False, **options) -> LocalRedisServer:
    """A LocalRedisServer(**options), not started yet (use it in a ``with``), with the RedisBloom module loaded when
    ``redisbloom``; skips the calling test or fixture naming what is not installed."""
    if find_redis_server() is None:
        pytest.skip(MISSING_SERVER_MESSAGE)
    if redisbloom:
        module = find_redisbloom_module()
        if module is None:
            pytest.skip(MISSING_REDISBLOOM_MESSAGE)
        options["modules"] = [module]
    return LocalRedisServer(**options)


@contextlib.contextmanager
def emptied_client(server: LocalRedisServer):
    """A redis-py client of ``server``, every database emptied first; closed after."""
    client = server.client()
    client.flushall()
    try:
        yield client
    finally:
        client.close()


def keys_of(prefix: str, n: int) -> list:
    return [f"{prefix}{i}" for i in range(n)]


def kill_during_batch(monkeypatch, server: LocalRedisServer, after_packs: int) -> dict:
    """Make ``server`` die (SIGKILL) while a client packs command number ``after_packs`` of a batch (bloomwise.redis
    packs each command with ``pack_command``); returns the count of commands packed so far (``calls["n"]``)."""
    calls = {"n": 0}

    def packing(*args):
        calls["n"] += 1
        if calls["n"] == after_packs:
            server.kill()
        return pack_command(*args)

    monkeypatch.setattr("bloomwise.redis.filters.pack_command", packing)
    return calls
