"""Served filters on a real three-master Redis Cluster started on loopback ports: every key of a filter in one
hash slot ({name}), the same bits and counters as the local filters, exactly-once counting batches, the same from
redis.asyncio's cluster client, RedisBloom filters read from the node owning them, and what the caller sees when the
node serving a filter is killed (the last test: the module's cluster stays without that node)."""
import asyncio
import os
import shutil
import socket
import subprocess
import time

import numpy as np
import pytest

from bloomwise import BloomFilter, CountingBloomFilter
from bloomwise._redis_server import (
    MISSING_REDISBLOOM_MESSAGE, MISSING_SERVER_MESSAGE, LocalRedisServer, find_redis_server, find_redisbloom_module,
)

redis = pytest.importorskip("redis", reason="the redis extra (redis-py) is not installed")
from redis.cluster import ClusterNode, RedisCluster  # noqa: E402
import redis.asyncio.cluster  # noqa: E402

import bloomwise.redis.asyncio as served_async  # noqa: E402

from bloomwise.redis import (  # noqa: E402
    FilterMismatchError, FilterNotFoundError, RedisBloomFilter, RedisCountingBloomFilter, ServedFilterError,
    ServerUnavailableError, from_redis, from_redisbloom, open as open_filter, to_redis,
)
from bloomwise.redis.cluster import has_hash_tag, key_prefix  # noqa: E402


def free_ports(count):
    """Ports p free on 127.0.0.1 with p + 10000 free too (a cluster node's bus port), p <= 55535."""
    import random
    rng = random.Random(os.getpid())
    ports = []
    while len(ports) < count:
        port = rng.randrange(20000, 45000)
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        if port not in ports:
            ports.append(port)
    return ports


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three masters on 127.0.0.1, joined by redis-cli --cluster create, with RedisBloom loaded when it is
    installed; yields (nodes by port, ports)."""
    if find_redis_server() is None:
        pytest.skip(MISSING_SERVER_MESSAGE)
    cli = shutil.which("redis-cli") or ("/usr/bin/redis-cli" if os.access("/usr/bin/redis-cli", os.X_OK) else None)
    if cli is None:
        pytest.skip("redis-cli not found: install the Debian package redis-tools (with redis-server)")
    ports = free_ports(3)
    nodes = {}
    redisbloom = find_redisbloom_module()
    try:
        for port in ports:
            nodes[port] = LocalRedisServer(port=port, cluster=True, modules=[redisbloom] if redisbloom else [],
                                           directory=str(tmp_path_factory.mktemp(f"node{port}"))).start()
        created = subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                                  "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True,
                                 timeout=60)
        assert created.returncode == 0, created.stdout[-2000:] + created.stderr[-2000:]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [redis.Redis(port=p).cluster("info")["cluster_state"] for p in ports]
            if all(state == "ok" for state in states):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the cluster did not become ok: {states}")
        yield nodes, ports
    finally:
        for node in nodes.values():
            node.close()


@pytest.fixture
def client(cluster):
    nodes, ports = cluster
    c = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in ports])
    yield c
    c.close()


def run_async(scenario, ports):
    """Run scenario(a redis.asyncio RedisCluster of the test cluster) on a fresh event loop, closing the client."""
    async def main():
        client = redis.asyncio.cluster.RedisCluster(
            startup_nodes=[redis.asyncio.cluster.ClusterNode("127.0.0.1", p) for p in ports])
        try:
            return await scenario(client)
        finally:
            await client.aclose()
    return asyncio.run(main())


def names_on_distinct_nodes(client, count, prefix):
    """Filter names whose slots are served by ``count`` different nodes."""
    found = {}
    for i in range(1000):
        name = f"{prefix}-{i}"
        node = client.get_node_from_key(f"{{{name}}}:meta")
        found.setdefault(node.port, name)
        if len(found) == count:
            return list(found.values())
    raise AssertionError("no names for distinct nodes")


def test_hash_tags():
    assert has_hash_tag("a{b}c") and not has_hash_tag("a{}b") and not has_hash_tag("ab}") and not has_hash_tag("x{")
    assert key_prefix(object(), "urls") == "urls"


def test_filters_on_a_cluster_are_the_local_filters(client, cluster):
    nodes, ports = cluster
    bits_name, counting_name, copy_name = names_on_distinct_nodes(client, 3, "same")
    local = BloomFilter(20_000, 0.01, seed=4)
    remote = RedisBloomFilter(client, bits_name, 20_000, 0.01, seed=4)
    assert remote.key_prefix == f"{{{bits_name}}}"
    keys = [f"k{i}" for i in range(5000)]
    remote.update(keys[:100])  # per-key BITFIELD commands (a small batch)
    remote.update(keys)        # merged (a large one)
    local.update(keys)
    probe = keys + [f"absent{i}" for i in range(20_000)]
    assert np.array_equal(remote.contains_many(probe), local.contains_many(probe))
    assert np.array_equal(remote.contains_many(probe[:30], method="per_key"), local.contains_many(probe[:30]))
    # every key of the filter is in one slot, on the node that owns it
    owner = client.get_node_from_key(f"{{{bits_name}}}:meta")
    slot = client.keyslot(f"{{{bits_name}}}:meta")
    assert all(client.keyslot(k) == slot for k in remote.part_keys)
    assert redis.Redis(port=owner.port).exists(f"{{{bits_name}}}:meta", *remote.part_keys) == 2
    assert from_redis(client, bits_name) == local
    assert isinstance(open_filter(client, bits_name), RedisBloomFilter)

    counting_local = CountingBloomFilter(10_000, 0.01, seed=2)
    counting = RedisCountingBloomFilter(client, counting_name, 10_000, 0.01, seed=2)
    counting.update(keys[:3000], batch_id="b1")
    counting.update(keys[:3000], batch_id="b1")  # the same batch again: applied once
    counting.remove_many(keys[:1000], missing="ignore")
    counting_local.update(keys[:3000])
    counting_local.remove_many(keys[:1000])
    assert from_redis(client, counting_name) == counting_local and counting.num_keys == 2000

    copied = to_redis(local, client, copy_name)
    assert copied.contains_many(keys).all() and from_redis(client, copy_name) == local


def test_asyncio_cluster_clients_serve_the_local_filters(client, cluster):
    nodes, ports = cluster
    bits_name, counting_name, copy_name = names_on_distinct_nodes(client, 3, "async")
    local = BloomFilter(20_000, 0.01, seed=6)
    counting_local = CountingBloomFilter(10_000, 0.01, seed=3)
    keys = [f"k{i}" for i in range(5000)]
    probe = keys + [f"absent{i}" for i in range(20_000)]

    async def scenario(cluster_client):
        remote = await served_async.RedisBloomFilter(cluster_client, bits_name, 20_000, 0.01, seed=6)
        await remote.update(keys[:100])        # per-key BITFIELD
        await remote.update(keys)              # merged
        answers = [await remote.contains_many(probe, method=m) for m in ("per_key", "read")]
        counting = await served_async.RedisCountingBloomFilter(cluster_client, counting_name, 10_000, 0.01, seed=3)
        await counting.update(keys[:3000], batch_id="b1")
        await counting.update(keys[:3000], batch_id="b1")  # the same batch again: applied once
        removed = await counting.remove_many(keys[:1000], missing="ignore")
        reopened = await served_async.open(cluster_client, counting_name)
        pulled = await served_async.from_redis(cluster_client, bits_name)
        pushed = await served_async.to_redis(pulled, cluster_client, copy_name)
        with pytest.raises(FilterMismatchError, match="already exists"):
            await served_async.to_redis(pulled, cluster_client, copy_name)
        with pytest.raises(FilterNotFoundError, match=r"'\{nothing\}:meta' does not exist"):
            await served_async.open(cluster_client, "nothing")
        return (answers, remote.key_prefix, remote.part_keys, removed, await reopened.num_keys, type(reopened),
                pulled, await pushed.contains_many(keys))

    answers, prefix, part_keys, removed, num_keys, reopened, pulled, pushed_answers = run_async(scenario, ports)
    local.update(keys)
    assert all(np.array_equal(a, local.contains_many(probe)) for a in answers)
    assert prefix == f"{{{bits_name}}}" and pulled == local and pushed_answers.all()
    owner = client.get_node_from_key(f"{{{bits_name}}}:meta")  # the keys live on the node owning the slot
    assert redis.Redis(port=owner.port).exists(f"{{{bits_name}}}:meta", *part_keys) == 2
    assert from_redis(client, bits_name) == local == from_redis(client, copy_name)
    counting_local.update(keys[:3000])
    counting_local.remove_many(keys[:1000])
    assert removed == 1000 and num_keys == 2000 and reopened is served_async.RedisCountingBloomFilter
    assert from_redis(client, counting_name) == counting_local


def test_a_local_copy_on_a_cluster_sees_writes_of_another_cluster_client(client, cluster):
    nodes, ports = cluster
    name = names_on_distinct_nodes(client, 1, "copy")[0]
    cached = RedisBloomFilter(client, name, 5000, 0.01, local_copy=True)
    keys = [f"c{i}" for i in range(2000)]
    assert not cached.contains_many(keys).any()
    other = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in ports])
    try:
        RedisBloomFilter.open(other, name).update(keys[:1000])
        assert cached.contains_many(keys[:1000]).all()
        other.delete(cached.part_keys[0])
        assert not cached.contains_many(keys[:1000]).any()
    finally:
        other.close()


def test_copies_and_set_operations_on_a_cluster(client, cluster):
    nodes, ports = cluster
    first, elsewhere = names_on_distinct_nodes(client, 2, "ops")
    a = RedisBloomFilter(client, first, 5000, 0.01, seed=2)
    a.update([f"a{i}" for i in range(1000)])
    moved = a.copy(elsewhere)  # another node: read in one transaction, written in another
    assert from_redis(client, elsewhere) == from_redis(client, first) and moved.keys_added == a.keys_added
    with pytest.raises(ServedFilterError, match="not in one hash slot.*shared hash tag"):
        a.union(moved, "{ops}-union")
    with pytest.raises(ServedFilterError, match="not in one hash slot"):
        a |= moved
    # names with one hash tag share a slot: BITOP on the server
    left = RedisBloomFilter(client, "{tenant}-left", 5000, 0.01, seed=2)
    right = RedisBloomFilter(client, "{tenant}-right", 5000, 0.01, seed=2)
    left.update([f"l{i}" for i in range(700)])
    right.update([f"r{i}" for i in range(900)])
    both = left.union(right, "{tenant}-both")
    assert both.key_prefix == "{tenant}-both"
    assert from_redis(client, "{tenant}-both") == from_redis(client, "{tenant}-left") | from_redis(client,
                                                                                                   "{tenant}-right")
    with pytest.raises(ServedFilterError, match="name it with the same hash tag"):
        left.union(right, "elsewhere")

    async def scenario(cluster_client):  # the same through redis.asyncio's cluster client
        a_async = await served_async.RedisBloomFilter.open(cluster_client, first)
        moved_async = await a_async.copy(elsewhere, replace=True)
        left_async = await served_async.open(cluster_client, "{tenant}-left")
        right_async = await served_async.open(cluster_client, "{tenant}-right")
        await left_async.intersection(right_async, "{tenant}-common")
        await left_async.union_update(right_async)
        with pytest.raises(ServedFilterError, match="not in one hash slot"):
            await a_async.union(moved_async, "{ops}-union")
        return moved_async.key_prefix

    left_before = from_redis(client, "{tenant}-left")
    assert run_async(scenario, cluster[1]) == f"{{{elsewhere}}}"
    assert from_redis(client, elsewhere) == from_redis(client, first)
    assert from_redis(client, "{tenant}-common") == left_before & from_redis(client, "{tenant}-right")
    assert from_redis(client, "{tenant}-left") == from_redis(client, "{tenant}-both")


@pytest.mark.skipif(find_redisbloom_module() is None, reason=MISSING_REDISBLOOM_MESSAGE)
def test_redisbloom_filters_are_read_from_the_node_owning_them(client, cluster):
    nodes, ports = cluster
    keys = [f"rb{i}" for i in range(3000)]
    probe = keys + [f"absent{i}" for i in range(5000)]
    found = {}
    for name in names_on_distinct_nodes(client, 3, "rb"):  # plain keys (no hash tag), on every node
        node = client.get_node_from_key(name)
        client.execute_command("BF.RESERVE", name, 0.01, 2000, target_nodes=node)  # it scales once
        client.execute_command("BF.MADD", name, *keys, target_nodes=node)
        expected = np.array(client.execute_command("BF.MEXISTS", name, *probe, target_nodes=node), dtype=bool)
        assert np.array_equal(from_redisbloom(client, name).contains_many(probe), expected)
        found[name] = expected

    async def scenario(cluster_client):
        answers = {name: (await served_async.from_redisbloom(cluster_client, name)).contains_many(probe)
                   for name in found}
        with pytest.raises(FilterNotFoundError, match="no RedisBloom filter 'missing'"):
            await served_async.from_redisbloom(cluster_client, "missing")
        return answers

    for name, answers in run_async(scenario, ports).items():
        assert np.array_equal(answers, found[name])
    with pytest.raises(FilterNotFoundError, match="no RedisBloom filter 'missing'"):
        from_redisbloom(client, "missing")


def test_a_node_that_no_longer_serves_the_slot_says_to_open_the_filter_again(client, cluster, monkeypatch):
    nodes, ports = cluster
    name = names_on_distinct_nodes(client, 1, "moved")[0]
    RedisBloomFilter(client, name, 1000, 0.01)
    owner = client.get_node_from_key(f"{{{name}}}:meta").port
    other = next(p for p in ports if p != owner)
    # as after a resharding: the client's map still names a node that does not serve the slot (MOVED)
    monkeypatch.setattr("bloomwise.redis.filters.route", lambda c, n: (redis.Redis(port=other), f"{{{n}}}"))
    with pytest.raises(ServedFilterError, match=rf"no longer serves.*moved to 127.0.0.1:{owner}.*open the filter"):
        open_filter(client, name)


def test_a_killed_node_is_a_server_unavailable_error_naming_it(client, cluster):
    nodes, ports = cluster
    doomed_name, surviving_name = names_on_distinct_nodes(client, 2, "kill")
    doomed = RedisBloomFilter(client, doomed_name, 1000, 0.01)
    surviving = RedisCountingBloomFilter(client, surviving_name, 1000, 0.01)
    doomed.update(["a", "b"])
    surviving.update(["a", "b"])
    port = client.get_node_from_key(f"{{{doomed_name}}}:meta").port

    async def scenario(cluster_client):
        # filters reached before the node dies (a redis.asyncio cluster client learns the slots on its first use)
        doomed_async = await served_async.RedisBloomFilter.open(cluster_client, doomed_name)
        survivor = await served_async.open(cluster_client, surviving_name)
        nodes[port].kill()  # the last test of this module: the cluster stays without this node
        for operation in (lambda: doomed_async.update(["c"]), lambda: doomed_async.contains("a"),
                          lambda: doomed_async.contains_many(["a"]), lambda: doomed_async.copy("kill-copy"),
                          lambda: served_async.open(cluster_client, doomed_name),
                          lambda: served_async.from_redis(cluster_client, doomed_name)):
            with pytest.raises(ServerUnavailableError, match=f"127.0.0.1:{port}"):
                await operation()
        await survivor.update(["d"], batch_id="after")
        return await survivor.contains_many(["a", "b", "d"])

    assert run_async(scenario, ports).all()
    for operation in (lambda: doomed.update(["c"]), lambda: "a" in doomed, lambda: doomed.contains_many(["a"]),
                      lambda: open_filter(client, doomed_name)):
        with pytest.raises(ServerUnavailableError, match=f"127.0.0.1:{port}"):
            operation()
    # the other nodes keep serving their filters
    surviving.update(["c"])
    assert surviving.contains_many(["a", "b", "c", "d"]).all() and surviving.num_keys == 4
