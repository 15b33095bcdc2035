"""bloomwise.redis.asyncio on a real redis-server: the same bits, counters and exactly-once batches as the sync
classes (they share every operation's steps), driven by redis.asyncio."""
import asyncio

import numpy as np
import pytest

from bloomwise import BloomFilter, CountingBloomFilter
from bloomwise._redis_server import LocalRedisServer
from redis_support import keys_of, kill_during_batch, needs_server

redis = pytest.importorskip("redis", reason="the redis extra (redis-py) is not installed")
import redis.asyncio  # noqa: E402

import bloomwise.redis as served  # noqa: E402
from bloomwise.redis import FilterMismatchError, FilterNotFoundError, IncompleteBatchError, from_redis  # noqa: E402
from bloomwise.redis.asyncio import RedisBloomFilter, RedisCountingBloomFilter, open as open_async  # noqa: E402
import bloomwise.redis.asyncio as served_async_module  # noqa: E402

def run(coroutine_function, server):
    """Run coroutine_function(async client) on a fresh event loop, closing the client after."""
    async def main():
        client = redis.asyncio.Redis(unix_socket_path=server.socket_path)
        try:
            return await coroutine_function(client)
        finally:
            await client.aclose()
    return asyncio.run(main())


@needs_server
@pytest.mark.parametrize("layout", ["blocked", "classic"])
def test_async_bits_are_the_local_bits(redis_server, layout):
    redis_server.client().flushall()
    local = BloomFilter(5000, 0.01, layout=layout, seed=3)
    keys = keys_of("k", 3000)
    probe = keys + keys_of("absent", 10_000)

    async def scenario(client):
        remote = await RedisBloomFilter(client, "abits", 5000, 0.01, layout=layout, seed=3)
        assert [await remote.add(k) for k in ("x", "y", "x")] == [local.add(k) for k in ("x", "y", "x")]
        await remote.update(keys[:100], method="bitfield")
        await remote.update(keys, method="merge")
        local.update(keys)
        answers = [await remote.contains_many(probe, method=m) for m in ("per_key", "read", "auto")]
        single = [await remote.contains(k) for k in ("x", "absent7", "k5")]
        with pytest.raises(TypeError, match="await f.contains"):
            "x" in remote
        again = await open_async(client, "abits")
        return answers, single, await remote.keys_added, type(again)

    answers, single, added, reopened = run(scenario, redis_server)
    expected = local.contains_many(probe)
    assert all(np.array_equal(a, expected) for a in answers)
    assert single == [local.contains(k) if hasattr(local, "contains") else (k in local) for k in ("x", "absent7", "k5")]
    assert reopened is RedisBloomFilter and added >= 3000 - 50
    assert from_redis(redis_server.client(), "abits") == local


@needs_server
def test_async_counting_is_exactly_once_and_matches_the_local_filter(redis_server):
    redis_server.client().flushall()
    local = CountingBloomFilter(20_000, 0.01, seed=8)
    keys = keys_of("c", 9000)

    async def scenario(client):
        remote = await RedisCountingBloomFilter(client, "acount", 20_000, 0.01, seed=8)
        await remote.update(keys, batch_id="b1")
        await remote.update(keys, batch_id="b1")  # the same batch id again: nothing more
        assert await remote.num_keys == 9000
        # two tasks at once on one client (two connections of its pool)
        await asyncio.gather(remote.update(keys[:2000], batch_id="t1"), remote.update(keys[2000:4000], batch_id="t2"))
        assert await remote.add("solo") is True
        await remote.remove("solo")
        with pytest.raises(KeyError, match="never"):
            await remote.remove("never")
        with pytest.raises(KeyError, match="nope"):
            await remote.remove_many(["c1", "nope"])  # all or nothing: c1 stays
        assert await remote.remove_many(keys[:1000] + ["nope"], missing="ignore") == 1000
        assert await remote.discard("nope") is False
        counters = await remote.counters("c5000")
        count = await remote.count("c5000")
        present = await remote.contains_many(keys + ["solo", "nope"])
        return counters, count, present, await remote.num_keys, await remote.contains("c5000")

    counters, count, present, num_keys, one = run(scenario, redis_server)
    local.update(keys)
    local.update(keys[:4000])
    local.remove_many(keys[:1000])
    assert from_redis(redis_server.client(), "acount") == local
    assert counters == local.counters("c5000") and count == min(counters) and one
    assert np.array_equal(present, local.contains_many(keys + ["solo", "nope"]))
    assert num_keys == 9000 + 4000 - 1000


@needs_server
def test_async_batch_cut_by_a_killed_server_then_retried_exactly_once(monkeypatch, tmp_path):
    keys = keys_of("k", 40_000)
    local = CountingBloomFilter(50_000, 0.01, seed=12)
    local.update(keys)
    with LocalRedisServer(persistent=True, directory=str(tmp_path)) as srv:
        async def first(client):
            remote = await RedisCountingBloomFilter(client, "crash", 50_000, 0.01, seed=12)
            kill_during_batch(monkeypatch, srv, after_packs=25)
            with pytest.raises(IncompleteBatchError) as caught:
                await remote.update(keys, batch_id="nightly")
            monkeypatch.undo()
            return caught.value

        error = run(first, srv)
        assert error.batch_id == "nightly" and error.unknown_keys > 0
        assert error.applied_keys + error.unknown_keys == 40_000
        srv.start()

        async def retry(client):
            remote = await open_async(client, "crash")
            await remote.update(keys, batch_id="nightly")
            return await remote.num_keys

        assert run(retry, srv) == 40_000
        assert from_redis(srv.client(), "crash") == local


@needs_server
def test_async_construction_errors(redis_server):
    redis_server.client().flushall()

    async def scenario(client):
        with pytest.raises(FilterNotFoundError):
            await open_async(client, "none")
        await RedisBloomFilter(client, "taken", 1000, 0.01)
        with pytest.raises(FilterMismatchError, match="num_cells"):
            await RedisBloomFilter(client, "taken", 9000, 0.01)
        with pytest.raises(FilterMismatchError, match="not a counting"):
            await RedisCountingBloomFilter.open(client, "taken")
        with pytest.raises(TypeError, match="bloomwise.redis.asyncio"):
            served.RedisBloomFilter(client, "sync-class", 1000, 0.01)
        return True

    assert run(scenario, redis_server)
    with pytest.raises(TypeError, match="redis.asyncio.Redis"):
        RedisBloomFilter(redis_server.client(), "wrong", 1000, 0.01)
    with pytest.raises(TypeError, match="not awaitable"):
        served.RedisBloomFilter(redis_server.client(), "sync", 1000, 0.01).__await__()


@needs_server
def test_async_whole_filters_copies_and_set_operations(redis_server):
    """to_redis / from_redis awaited; copy, union, intersection, union_update, estimated_fpr awaited; |= refused
    (it cannot await) with the method to use."""
    redis_server.client().flushall()
    keys = keys_of("w", 2000)
    local = BloomFilter(5000, 0.01, seed=9)
    local.update(keys[:1000])
    other = BloomFilter(5000, 0.01, seed=9)
    other.update(keys[1000:])
    counting_local = CountingBloomFilter(3000, 0.01, seed=9)
    counting_local.update(keys)
    sync_class = served.RedisBloomFilter

    async def scenario(client):
        served = await served_async_module.to_redis(local, client, "w-a")
        with pytest.raises(FilterMismatchError, match="already exists"):
            await served_async_module.to_redis(local, client, "w-a")
        await served_async_module.to_redis(other, client, "w-b")
        b = await open_async(client, "w-b")
        union = await served.union(b, "w-union")
        common = await served.intersection(b, "w-common")
        twin = await served.copy("w-twin")
        await twin.union_update(other)
        with pytest.raises(TypeError, match=r"await f.union_update\(other\)"):
            twin |= b
        with pytest.raises(TypeError, match="one of bloomwise.redis: open both with one kind of client"):
            await twin.union_update(sync_class.open(redis_server.client(), "w-b"))
        counting = await served_async_module.to_redis(counting_local, client, "w-count")
        pulled = [await served_async_module.from_redis(client, n)
                  for n in ("w-a", "w-union", "w-common", "w-twin", "w-count")]
        rates = (await served.estimated_fpr(), await counting.estimated_fpr())
        return pulled, rates, await union.keys_added, served.is_compatible(b), served.is_compatible(counting)

    (a, union, common, twin, counting), rates, union_count, compatible, mixed = run(scenario, redis_server)
    assert a == local and union == local | other == twin and common == local & other
    assert counting == counting_local and union_count == local.keys_counted + other.keys_counted
    assert rates == (local.estimated_fpr(), counting_local.estimated_fpr())
    assert compatible and not mixed


@needs_server
def test_async_from_redisbloom(tmp_path):
    from bloomwise._redis_server import MISSING_REDISBLOOM_MESSAGE, find_redisbloom_module
    from bloomwise.redis import FilterNotFoundError as NotFound, from_redisbloom

    module = find_redisbloom_module()
    if module is None:
        pytest.skip(MISSING_REDISBLOOM_MESSAGE)
    keys = keys_of("rb", 3000)
    probe = keys + keys_of("absent", 5000)
    with LocalRedisServer(modules=[module]) as srv:
        sync_client = srv.client()
        sync_client.execute_command("BF.RESERVE", "bf", 0.01, 1000)  # scales twice
        sync_client.execute_command("BF.MADD", "bf", *keys)
        expected = np.array(sync_client.execute_command("BF.MEXISTS", "bf", *probe), dtype=bool)

        async def scenario(client):
            snapshot = await served_async_module.from_redisbloom(client, "bf")
            with pytest.raises(NotFound, match="no RedisBloom filter 'nothing'"):
                await served_async_module.from_redisbloom(client, "nothing")
            return snapshot

        snapshot = run(scenario, srv)
        assert np.array_equal(snapshot.contains_many(probe), expected)
        assert np.array_equal(from_redisbloom(sync_client, "bf").contains_many(probe), expected)
    with pytest.raises(TypeError, match="redis.asyncio"):
        asyncio.run(served_async_module.from_redisbloom(sync_client, "bf"))
