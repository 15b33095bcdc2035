"""RedisBloomFilter(..., local_copy=True): queries answered from a copy in the client that the server invalidates
(CLIENT TRACKING on a connection of the copy's own), on a real redis-server: exact answers, and every kind of
write by any client seen by the next call."""
import threading

import numpy as np
import pytest

from bloomwise import BloomFilter
from redis_support import keys_of

redis = pytest.importorskip("redis", reason="the redis extra (redis-py) is not installed")
import bloomwise.redis.filters as served_filters  # noqa: E402
from bloomwise.redis import RedisBloomFilter, ServedFilterError, ServerUnavailableError, to_redis  # noqa: E402


def test_copy_answers_as_the_server_on_100k_keys(redis_client):
    rng = np.random.default_rng(32)
    present = rng.integers(0, 2**63, 100_000, dtype=np.uint64)
    absent = rng.integers(0, 2**63, 100_000, dtype=np.uint64)
    plain = RedisBloomFilter(redis_client, "exact", 100_000, 0.01)
    plain.update(present)
    cached = RedisBloomFilter.open(redis_client, "exact", local_copy=True)
    mixed = np.concatenate([present, absent])
    for method in ("per_key", "read"):
        expected = plain.contains_many(mixed, method=method)
        assert np.array_equal(cached.contains_many(mixed), expected)
    assert cached.contains_many(present).all()
    # the same 1,000-key calls, many times over one copy
    for start in range(0, 20_000, 1_000):
        chunk = mixed[start * 5:start * 5 + 1_000]
        assert np.array_equal(cached.contains_many(chunk), plain.contains_many(chunk, method="per_key"))
    local = BloomFilter(100_000, 0.01)
    local.update(present)
    assert np.array_equal(cached.contains_many(absent), local.contains_many(absent))


def test_another_clients_insert_is_seen_by_the_next_call(redis_server, redis_client):
    cached = RedisBloomFilter(redis_client, "seen", 10_000, 0.001, local_copy=True)
    keys = keys_of("k", 500)
    assert not cached.contains_many(keys).any()  # the copy is read and tracked now
    other_client = redis_server.client()
    try:
        writer = RedisBloomFilter.open(other_client, "seen")
        for i in range(0, 500, 50):
            writer.update(keys[i:i + 50])  # each update completes before the next query starts
            found = cached.contains_many(keys)
            assert found[:i + 50].all(), i
        assert "k7" in cached
    finally:
        other_client.close()


def test_setbit_del_flushall_and_replace_are_seen(redis_client):
    cached = RedisBloomFilter(redis_client, "writes", 10_000, 0.001, local_copy=True)
    cached.update(keys_of("a", 100))
    assert cached.contains_many(keys_of("a", 100)).all()
    part = cached.part_keys[0]
    redis_client.delete(part)  # DEL by hand: every bit gone
    assert not cached.contains_many(keys_of("a", 100)).any()
    # SETBIT by hand: exactly the bits of one key
    probe = BloomFilter.from_size(cached.num_cells, cached.num_hashes, layout=cached.layout)
    probe.add("by-hand")
    bits = np.unpackbits(np.frombuffer(probe.payload_view(), dtype=np.uint8))
    for offset in np.flatnonzero(bits):
        redis_client.setbit(part, int(offset), 1)
    assert cached.contains_many(["by-hand"]).tolist() == [True]
    # a replacement of the whole filter (to_redis(replace=True): DEL and SET in one transaction)
    replacement = BloomFilter.from_size(cached.num_cells, cached.num_hashes, layout=cached.layout)
    replacement.update(keys_of("b", 100))
    to_redis(replacement, redis_client, "writes", replace=True)
    assert cached.contains_many(keys_of("b", 100)).all()
    assert cached.contains_many(["by-hand"]).tolist() == [bool(replacement.contains_many(["by-hand"])[0])]
    redis_client.flushall()
    assert not cached.contains_many(keys_of("b", 100)).any()
    cached.update(["after"])  # written again after the flush: read again
    assert "after" in cached


def test_a_lost_connection_is_an_error_then_the_copy_is_read_again(redis_server, redis_client):
    cached = RedisBloomFilter(redis_client, "lost", 1_000, 0.01, local_copy=True)
    cached.update(["x"])
    assert "x" in cached
    killer = redis_server.client()
    try:
        killed = killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert killed >= 1
    finally:
        killer.close()
    # the tracked connection is gone: the next call reconnects or fails clearly, never answers from a copy that
    # could have missed an invalidation
    redis_client.setbit(cached.part_keys[0], 0, 0)
    redis_client.delete(cached.part_keys[0])
    try:
        answer = cached.contains_many(["x"])
    except ServerUnavailableError as exc:
        assert "lost the connection" in str(exc)
        answer = cached.contains_many(["x"])
    assert answer.tolist() == [False]


def test_threads_share_one_copy(redis_client):
    cached = RedisBloomFilter(redis_client, "threads", 50_000, 0.01, local_copy=True)
    keys = keys_of("t", 20_000)
    cached.update(keys)
    failures = []

    def ask(offset):
        for start in range(offset, 20_000, 4_000):
            if not cached.contains_many(keys[start:start + 1_000]).all():
                failures.append(start)

    workers = [threading.Thread(target=ask, args=(i * 1_000,)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []


def test_option_checked_and_dropped(redis_client):
    with pytest.raises(TypeError, match="local_copy must be True or False"):
        RedisBloomFilter(redis_client, "opt", 1_000, 0.01, local_copy="yes")
    f = RedisBloomFilter(redis_client, "opt", 1_000, 0.01, local_copy=True)
    assert f.local_copy
    f.keep_local_copy(False)
    assert not f.local_copy
    f.update(["y"])
    assert "y" in f


def test_the_fence_is_what_makes_it_exact(redis_server, redis_client):
    """A settled copy (no invalidation pending, nothing to read) and then one write by another client: only the
    invalidation read before the PONG of the call's fence can make the next answer right (mutations tried: a
    handler that ignores the message; no PING before trusting the copy)."""
    # 256 bytes: a call of one key reads a stale copy again at once (READ_BYTES_PER_KEY)
    cached = RedisBloomFilter.from_size(redis_client, "fence", 2048, 4, local_copy=True)
    for _ in range(3):
        assert cached.contains_many(["late"]).tolist() == [False]
    other_client = redis_server.client()
    try:
        RedisBloomFilter.open(other_client, "fence").add("late")
    finally:
        other_client.close()
    assert cached.contains_many(["late"]).tolist() == [True]
    assert cached.contains_many(["late", "never"]).tolist() == [True, False]


def test_a_parser_without_push_messages_is_refused_clearly(redis_server):
    from redis._parsers import _RESP2Parser  # redis-py's pure-Python RESP2 parser: no push messages
    pool = redis.ConnectionPool(connection_class=redis.UnixDomainSocketConnection, path=redis_server.socket_path,
                                parser_class=_RESP2Parser)
    client = redis.Redis(connection_pool=pool)
    try:
        f = RedisBloomFilter(client, "parser", 1_000, 0.01)
        with pytest.raises(ServedFilterError, match="hiredis"):
            f.keep_local_copy()
        assert not f.local_copy
    finally:
        client.close()


def test_asyncio_copy_sees_other_writers(redis_server):
    import asyncio

    import redis.asyncio
    from bloomwise.redis.asyncio import RedisBloomFilter as AsyncRedisBloomFilter

    async def scenario():
        client = redis.asyncio.Redis(unix_socket_path=redis_server.socket_path)
        sync_client = redis_server.client()
        try:
            await client.flushall()
            cached = await AsyncRedisBloomFilter(client, "async-copy", 10_000, 0.001, local_copy=True)
            keys = keys_of("a", 300)
            for _ in range(3):
                assert not (await cached.contains_many(keys)).any()
            RedisBloomFilter.open(sync_client, "async-copy").update(keys[:100])
            found = await cached.contains_many(keys)
            assert np.array_equal(found, await cached.contains_many(keys, method="per_key")) and found[:100].all()
            assert await cached.contains("a5")
            sync_client.delete(cached.part_keys[0])
            assert not await cached.contains("a5")
            reopened = await AsyncRedisBloomFilter.open(client, "async-copy", local_copy=True)
            assert reopened.local_copy and not await reopened.contains("a5")
            sync_client.setbit(cached.part_keys[0], 0, 1)  # invalidates both copies
            await cached.update(keys)
            assert (await reopened.contains_many(keys)).all() and (await cached.contains_many(keys)).all()
            await cached.keep_local_copy(False)
            assert not cached.local_copy and (await cached.contains_many(keys)).all()
            await reopened.keep_local_copy(False)
        finally:
            sync_client.close()
            await client.aclose()

    asyncio.run(scenario())


def test_a_stale_copy_is_read_again_only_when_that_pays(monkeypatch, redis_server, redis_client):
    """After a write, small calls are answered by the server (exactly) until the keys they asked reach one per
    READ_BYTES_PER_KEY bytes of the filter; then the copy is read again and answers (mutation tried: answering
    from the stale copy instead of the server)."""
    reads = {"n": 0}
    original = RedisBloomFilter.read_part

    def counting(self, index, doing):
        reads["n"] += 1
        return (yield from original(self, index, doing))

    monkeypatch.setattr(RedisBloomFilter, "read_part", counting)
    cached = RedisBloomFilter(redis_client, "pays", 200_000, 0.01, local_copy=True)
    keys = keys_of("p", 100)
    assert not cached.contains_many(keys_of("q", 1_000)).any() and reads["n"] == 1  # a large call: read
    assert not cached.contains_many(keys).any() and reads["n"] == 1  # unchanged: the copy answers
    other_client = redis_server.client()
    try:
        RedisBloomFilter.open(other_client, "pays").update(keys[:10])
    finally:
        other_client.close()
    threshold = -(-cached.nbytes // served_filters.READ_BYTES_PER_KEY)  # keys, ceiling
    asked = 0
    while asked + len(keys) < threshold:  # the server answers: nothing read
        assert cached.contains_many(keys).tolist() == [True] * 10 + [False] * 90
        asked += len(keys)
        assert reads["n"] == 1
    assert asked > 0
    assert cached.contains_many(keys)[:10].all() and reads["n"] == 2  # it pays now: read again
    assert cached.contains_many(keys)[:10].all() and reads["n"] == 2  # and the copy answers
