"""Filters served by a real redis-server (unix socket, temporary directory): same bits as the local filters,
counting rules kept server-side, exactly-once batches, parts, metadata, faults."""
import os
import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st

from bloomwise import BloomFilter, CountingBloomFilter, FormatError
from bloomwise._native.bloom import hash_many
from bloomwise._native.served import encode_args, pack_command, positions_many
from bloomwise._redis_server import LocalRedisServer
from redis_support import keys_of, kill_during_batch, needs_server

redis = pytest.importorskip("redis", reason="the redis extra (redis-py) is not installed")
import bloomwise.redis as served  # noqa: E402
import bloomwise.redis.filters as served_filters  # noqa: E402
import bloomwise.redis.geometry as served_geometry  # noqa: E402
from bloomwise.redis import (  # noqa: E402
    FilterMismatchError, FilterNotFoundError, IncompleteBatchError, RedisBloomFilter, RedisCountingBloomFilter,
    ServerUnavailableError, from_redis, to_redis,
)

LAYOUTS = ["blocked", "classic", "partitioned"]


# ---- the compiled helpers (no server) ---------------------------------------------------------------------------------
@given(st.lists(st.one_of(st.text(max_size=20), st.binary(max_size=20), st.integers(-2**70, 2**70)), max_size=30),
       st.sampled_from(LAYOUTS), st.integers(1, 16), st.integers(1, 40), st.integers(0, 2**64 - 1))
def test_positions_many_are_the_local_positions(keys, layout, k, blocks, seed):
    f = BloomFilter.from_size(blocks * 512, k, layout=layout, seed=seed)
    got = positions_many(hash_many(keys, seed), f.num_cells, k, f._layout_id)
    assert got.shape == (len(keys), k)
    assert [list(row) for row in got] == [f._bit_indices(key) for key in keys]


def test_positions_many_matches_counting_positions():
    f = CountingBloomFilter.from_size(1001, 5, layout="partitioned", seed=9)
    keys = keys_of("c", 200)
    got = positions_many(hash_many(keys, 9), 1001, 5, 2)
    assert [list(row) for row in got] == [f._positions(key) for key in keys]


def test_positions_many_rejects_impossible_geometry():
    with pytest.raises(ValueError, match="num_hashes"):
        positions_many(np.zeros(1, np.uint64), 512, 17, 3)
    with pytest.raises(ValueError, match="num_bits"):
        positions_many(np.zeros(1, np.uint64), 1000, 8, 3)
    with pytest.raises(ValueError, match="layout"):
        positions_many(np.zeros(1, np.uint64), 1000, 8, 7)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=50), st.binary(min_size=1, max_size=12))
def test_pack_command_is_the_resp_of_redis_py(offsets, name):
    ours = pack_command([b"BITFIELD", name], np.array(offsets, dtype=np.uint64), encode_args([b"SET", b"u1"]),
                        encode_args([b"1"]), 4)
    args = [b"BITFIELD", name]
    for o in offsets:
        args += [b"SET", b"u1", str(o).encode(), b"1"]
    theirs = b"".join(redis.connection.Connection().pack_command(*args))
    assert ours == theirs


# ---- bit filters -------------------------------------------------------------------------------------------------------
@needs_server
@pytest.mark.parametrize("layout", LAYOUTS)
def test_served_bits_are_the_local_bits(redis_client, layout):
    local = BloomFilter(5000, 0.01, layout=layout, seed=11)
    remote = RedisBloomFilter(redis_client, "f", 5000, 0.01, layout=layout, seed=11)
    assert (remote.num_cells, remote.num_hashes) == (local.num_cells, local.num_hashes)
    single = ["apple", b"pear", 17, -3, 2**80]
    assert [remote.add(k) for k in single] == [local.add(k) for k in single]
    assert [remote.add(k) for k in single] == [False] * 5
    keys = keys_of("k", 3000)
    remote.update(keys, method="bitfield")
    local.update(keys)
    remote.update(np.arange(500, dtype=np.uint64), method="bitfield")
    local.update(np.arange(500, dtype=np.uint64))
    # the bytes on the server are the local payload, byte for byte (bit p is Redis bit p ^ 7)
    assert redis_client.get("f:part:0").ljust(local.nbytes, b"\0") == bytes(local._payload())
    p = local._bit_indices("apple")[0]
    assert redis_client.getbit("f:part:0", p ^ 7) == 1
    pulled = from_redis(redis_client, "f")
    assert type(pulled) is BloomFilter and pulled == local
    assert pulled.num_new_keys == local.num_new_keys == remote.keys_added
    probe = keys_of("absent", 20000) + keys
    assert np.array_equal(remote.contains_many(probe), local.contains_many(probe))
    assert remote.contains_many(keys).all()
    assert ("apple" in remote) and ("plum" in remote) == ("plum" in local)


@needs_server
def test_contains_many_keeps_the_numpy_shape(redis_client):
    remote = RedisBloomFilter(redis_client, "shape", 1000, 0.01)
    keys = np.arange(12, dtype=np.int64).reshape(3, 4)
    assert not remote.contains_many(keys).any()  # nothing written yet: the part key does not exist
    remote.update(keys[:2].reshape(-1))
    got = remote.contains_many(keys)
    assert got.shape == (3, 4) and got[:2].all()
    assert remote.contains_many([]).shape == (0,)
    with pytest.raises(TypeError, match="wrap a single key"):
        remote.update("abc")


@needs_server
@pytest.mark.parametrize("layout", LAYOUTS)
def test_to_redis_from_redis_round_trip(redis_client, layout):
    local = BloomFilter(20000, 0.001, layout=layout, seed=3, hash_scheme="xxh64")
    local.update(keys_of("x", 5000))
    remote = to_redis(local, redis_client, "rt")
    assert isinstance(remote, RedisBloomFilter) and remote.hash_scheme == "xxh64"
    assert remote.contains_many(keys_of("x", 5000)).all()
    back = from_redis(redis_client, "rt")
    assert back == local and back.to_bytes() == local.to_bytes()
    with pytest.raises(FilterMismatchError, match="already exists"):
        to_redis(local, redis_client, "rt")
    to_redis(BloomFilter(20000, 0.001, layout=layout, seed=3, hash_scheme="xxh64"), redis_client, "rt", replace=True)
    assert from_redis(redis_client, "rt")._count_set_bits() == 0


@needs_server
def test_merge_is_the_union(redis_client):
    served_part = BloomFilter(10000, 0.01, seed=2)
    bulk = BloomFilter(10000, 0.01, seed=2)
    remote = RedisBloomFilter(redis_client, "m", 10000, 0.01, seed=2)
    remote.update(keys_of("a", 2000))
    served_part.update(keys_of("a", 2000))
    bulk.update(keys_of("b", 3000))
    remote.merge(bulk)
    assert from_redis(redis_client, "m") == served_part | bulk
    with pytest.raises(FilterMismatchError, match="seed"):
        remote.merge(BloomFilter(10000, 0.01, seed=3))
    assert not redis_client.keys("m:merge:*")


# ---- parts (filters larger than one Redis string) ----------------------------------------------------------------------
@needs_server
@pytest.mark.parametrize("layout", LAYOUTS)
def test_parts_split_the_payload(redis_client, layout):
    local = BloomFilter.from_size(64 * 512 + (0 if layout == "blocked" else 77), 6, layout=layout, seed=4)
    remote = RedisBloomFilter.from_size(redis_client, "p", local.num_cells, 6, layout=layout, seed=4, part_bytes=640)
    assert len(remote.part_keys) == -(-local.nbytes // 640) >= 4
    keys = keys_of("p", 1500)
    assert [remote.add(k) for k in keys[:50]] == [local.add(k) for k in keys[:50]]
    remote.update(keys)
    local.update(keys)
    for i, part in enumerate(remote.part_keys):  # each part holds its slice of the payload
        assert redis_client.strlen(part) <= 640
        assert redis_client.get(part).ljust(min(640, local.nbytes - 640 * i), b"\0") == \
            bytes(local._payload())[640 * i:640 * (i + 1)]
    assert from_redis(redis_client, "p") == local
    probe = keys_of("q", 5000) + keys
    assert np.array_equal(remote.contains_many(probe), local.contains_many(probe))
    other = BloomFilter.from_size(local.num_cells, 6, layout=layout, seed=4)
    other.update(keys_of("z", 800))
    remote.merge(other)
    assert from_redis(redis_client, "p") == local | other
    copy = to_redis(local | other, redis_client, "p2", part_bytes=128)
    assert len(copy.part_keys) == -(-local.nbytes // 128)
    assert from_redis(redis_client, "p2") == local | other


@needs_server
def test_counting_parts(redis_client):
    local = CountingBloomFilter.from_size(3000, 5, seed=8)
    remote = RedisCountingBloomFilter.from_size(redis_client, "cp", 3000, 5, seed=8, part_bytes=256)
    assert len(remote.part_keys) == 6
    keys = keys_of("c", 700)
    remote.update(keys)
    local.update(keys)
    remote.update(keys[:100])
    local.update(keys[:100])
    assert remote.remove_many(keys[:300]) == local.remove_many(keys[:300]) == 300
    assert from_redis(redis_client, "cp") == local
    assert [remote.counters(k) for k in keys[:50]] == [local.counters(k) for k in keys[:50]]


def test_part_size_must_be_whole_blocks():
    with pytest.raises(ValueError, match="multiple of 64"):
        served_geometry.Geometry("bloom", "classic", 1000, 3, 0, "xxh3", 1, None, 100)
    with pytest.raises(ValueError, match="part_bytes"):
        served_geometry.Geometry("bloom", "classic", 1000, 3, 0, "xxh3", 1, None, 2**30)


# ---- counting filters --------------------------------------------------------------------------------------------------
@needs_server
@pytest.mark.parametrize("layout", ["classic", "partitioned"])
@pytest.mark.parametrize("counter_bits", [4, 8])
def test_served_counters_are_the_local_counters(redis_client, layout, counter_bits):
    local = CountingBloomFilter(4000, 0.01, layout=layout, counter_bits=counter_bits, seed=5)
    remote = RedisCountingBloomFilter(redis_client, "c", 4000, 0.01, layout=layout, counter_bits=counter_bits, seed=5)
    assert [remote.add(k) for k in ["a", "b", "a"]] == [local.add(k) for k in ["a", "b", "a"]]
    keys = keys_of("k", 2500)
    remote.update(keys)
    local.update(keys)
    remote.update(keys[:700])
    local.update(keys[:700])
    assert remote.remove_many(keys[:1200], missing="ignore") == local.remove_many(keys[:1200], missing="ignore")
    remote.remove("a")
    local.remove("a")
    assert remote.discard("never-added-1") == local.discard("never-added-1")
    pulled = from_redis(redis_client, "c")
    assert type(pulled) is CountingBloomFilter and pulled == local
    assert remote.num_keys == local.num_keys == pulled.num_keys
    probe = keys + keys_of("no", 3000)
    assert np.array_equal(remote.contains_many(probe), local.contains_many(probe))
    assert [remote.counters(k) for k in keys[:30]] == [local.counters(k) for k in keys[:30]]
    assert remote.count("a") == local.count("a")


@needs_server
def test_saturation_is_sticky(redis_client):
    local = CountingBloomFilter.from_size(64, 3, seed=1)
    remote = RedisCountingBloomFilter.from_size(redis_client, "s", 64, 3, seed=1)
    for _ in range(20):
        remote.add("hot")
        local.add("hot")
    assert remote.counters("hot") == local.counters("hot")
    assert max(remote.counters("hot")) == 15
    for _ in range(20):  # removing as often as added: saturated counters stay at 15, the key stays present
        remote.remove("hot")
        local.remove("hot")
    assert remote.counters("hot") == local.counters("hot")
    assert "hot" in remote and 15 in remote.counters("hot")
    assert from_redis(redis_client, "s") == local


@needs_server
def test_repeated_probes_need_as_many_counts(redis_client):
    # A classic filter of 2 counters and k = 6: every key probes the same counters several times.
    local = CountingBloomFilter.from_size(2, 6, seed=0)
    remote = RedisCountingBloomFilter.from_size(redis_client, "rep", 2, 6, seed=0)
    remote.add("x")
    local.add("x")
    assert remote.counters("x") == local.counters("x") == (3,) * 6
    # y3 probes counter 1 five times: certainly absent although both counters are 3 (and nothing may wrap below 0)
    assert local._positions("y3").count(1) == 5
    for key in ["y3"] + keys_of("y", 10):
        assert remote.discard(key) == local.discard(key)
        assert from_redis(redis_client, "rep") == local


@needs_server
def test_remove_of_a_certainly_absent_key_is_refused_and_changes_nothing(redis_client):
    local = CountingBloomFilter(1000, 0.01, seed=6)
    remote = RedisCountingBloomFilter(redis_client, "r", 1000, 0.01, seed=6)
    keys = keys_of("k", 300)
    remote.update(keys)
    local.update(keys)
    before = redis_client.get("r:part:0")
    with pytest.raises(KeyError, match="plum"):
        remote.remove("plum")
    with pytest.raises(KeyError, match="never"):
        remote.remove_many(keys[:100] + ["never"] + keys[100:200])  # all or nothing
    assert redis_client.get("r:part:0") == before and remote.num_keys == 300
    assert remote.remove_many(keys[:100] + ["never"], missing="ignore") == 100
    local.remove_many(keys[:100])
    assert from_redis(redis_client, "r") == local
    with pytest.raises(ValueError, match="missing"):
        remote.remove_many(keys, missing="skip")


@needs_server
def test_a_retried_batch_is_applied_once(redis_client):
    local = CountingBloomFilter(10000, 0.01, seed=7)
    remote = RedisCountingBloomFilter(redis_client, "once", 10000, 0.01, seed=7)
    keys = keys_of("k", 2500)  # three scripts of at most 1,000 keys
    for _ in range(3):
        remote.update(keys, batch_id="batch-1")
    local.update(keys)
    assert from_redis(redis_client, "once") == local and remote.num_keys == 2500
    for _ in range(2):
        assert remote.remove_many(keys[:1500], missing="ignore", batch_id="rm-1") in (1500, 1500)
    local.remove_many(keys[:1500])
    assert from_redis(redis_client, "once") == local and remote.num_keys == 1000
    remote.update(keys, batch_id="batch-2")  # another id applies again
    local.update(keys)
    assert from_redis(redis_client, "once") == local
    assert 0 < redis_client.ttl("once:batch:batch-1:0") <= served_filters.BATCH_RECORD_SECONDS


# ---- metadata: open by name, mismatches, damaged metadata -------------------------------------------------------------
@needs_server
def test_open_by_name_alone(redis_client):
    made = RedisBloomFilter(redis_client, "o", 777, 0.02, layout="partitioned", seed=99, hash_scheme="xxh64")
    made.update(keys_of("k", 500))
    opened = RedisBloomFilter.open(redis_client, "o")
    assert (opened.num_cells, opened.num_hashes, opened.layout, opened.seed, opened.hash_scheme, opened.capacity) == \
        (made.num_cells, made.num_hashes, "partitioned", 99, "xxh64", 777)
    assert opened.contains_many(keys_of("k", 500)).all()
    assert isinstance(served.open(redis_client, "o"), RedisBloomFilter)
    RedisCountingBloomFilter(redis_client, "oc", 100, 0.01, counter_bits=8)
    counting = served.open(redis_client, "oc")
    assert isinstance(counting, RedisCountingBloomFilter) and counting.counter_bits == 8
    # attaching with the same parameters is fine; other parameters are named
    RedisBloomFilter(redis_client, "o", 777, 0.02, layout="partitioned", seed=99, hash_scheme="xxh64")
    with pytest.raises(FilterMismatchError, match="seed: 99 on the server, 98 asked for"):
        RedisBloomFilter(redis_client, "o", 777, 0.02, layout="partitioned", seed=98, hash_scheme="xxh64")
    with pytest.raises(FilterMismatchError, match="layout"):
        RedisBloomFilter(redis_client, "o", 777, 0.02, seed=99, hash_scheme="xxh64")
    with pytest.raises(FilterMismatchError, match="counting filter, not a bloom filter"):
        RedisBloomFilter.open(redis_client, "oc")
    with pytest.raises(FilterMismatchError, match="bloom filter, not a counting"):
        RedisCountingBloomFilter(redis_client, "o", 777, 0.02)
    with pytest.raises(FilterNotFoundError, match="'nothing:meta' does not exist"):
        served.open(redis_client, "nothing")


@needs_server
@pytest.mark.parametrize("field, value, message", [
    ("format_version", "3", "format_version '3'; this bloomwise reads versions 1, 2"),
    ("num_cells", "12x", "num_cells must be a non-negative integer"),
    ("layout", "round", "impossible filter"),
    ("format", "other", "not the metadata of a bloomwise filter"),
    ("part_bytes", "100", "multiple of 64"),
])
def test_damaged_metadata_is_a_format_error(redis_client, field, value, message):
    RedisBloomFilter(redis_client, "d", 100, 0.01)
    redis_client.hset("d:meta", field, value)
    with pytest.raises(FormatError, match=message):
        served.open(redis_client, "d")


@needs_server
def test_metadata_of_storage_version_1_is_read(redis_client):
    """Version 1 named m ``num_bits``; version 2 ``num_cells``: a filter stored by version 1 opens unchanged."""
    f = RedisBloomFilter(redis_client, "v1", 1000, 0.01, seed=3)
    f.update(keys_of("k", 500))
    assert redis_client.hget("v1:meta", "format_version") == b"2"
    m = redis_client.hget("v1:meta", "num_cells")
    redis_client.hdel("v1:meta", "num_cells")
    redis_client.hset("v1:meta", mapping={"format_version": "1", "num_bits": m})
    again = served.open(redis_client, "v1")
    assert again.num_cells == f.num_cells == int(m) and again.contains_many(keys_of("k", 500)).all()
    redis_client.hdel("v1:meta", "num_bits")
    with pytest.raises(FormatError, match="lacks the field.*num_bits"):
        served.open(redis_client, "v1")


@needs_server
def test_missing_meta_field_and_oversized_part(redis_client):
    RedisBloomFilter(redis_client, "d2", 100, 0.01)
    redis_client.hdel("d2:meta", "seed")
    with pytest.raises(FormatError, match="lacks the field"):
        served.open(redis_client, "d2")
    f = RedisBloomFilter(redis_client, "d3", 100, 0.01)
    redis_client.set("d3:part:0", b"\xff" * (f.nbytes + 1))
    with pytest.raises(FormatError, match="holds"):
        from_redis(redis_client, "d3")


@needs_server
def test_bad_arguments(redis_client):
    with pytest.raises(ValueError, match="counter_bits"):
        RedisCountingBloomFilter(redis_client, "b", 100, 0.01, counter_bits=16)
    with pytest.raises(ValueError, match="classic"):
        RedisCountingBloomFilter(redis_client, "b", 100, 0.01, layout="blocked")
    with pytest.raises(ValueError, match="layout"):
        RedisBloomFilter(redis_client, "b", 100, 0.01, layout="round")
    with pytest.raises(ValueError, match="capacity"):
        RedisBloomFilter(redis_client, "b", 0, 0.01)
    with pytest.raises(TypeError, match="name"):
        RedisBloomFilter(redis_client, "", 10, 0.01)
    with pytest.raises(ValueError, match="key= function"):
        to_redis(BloomFilter(10, 0.01, key=repr), redis_client, "b")
    with pytest.raises(ValueError, match="batch_id"):
        RedisCountingBloomFilter(redis_client, "b", 100, 0.01).update(["a"], batch_id="")


# ---- faults ------------------------------------------------------------------------------------------------------------
@needs_server
def test_wrong_password_and_unreachable_server(tmp_path):
    # redis-py retries a failed connection with back-off by default (seconds): these clients fail at once
    once = {"retry": redis.retry.Retry(redis.backoff.NoBackoff(), 0)}
    with LocalRedisServer(password="right-one") as secured:
        with pytest.raises(ServerUnavailableError, match="refused the credentials.*password"):
            RedisBloomFilter(secured.client(password="wrong", **once), "f", 10, 0.01)
        with pytest.raises(ServerUnavailableError, match="refused the credentials"):
            RedisBloomFilter(secured.client(password=None, **once), "f", 10, 0.01)
        f = RedisBloomFilter(secured.client(**once), "f", 10, 0.01)
        f.add("x")
        assert "x" in f
    with LocalRedisServer() as short_lived:
        reader = RedisBloomFilter(short_lived.client(**once), "r", 1000, 0.01)
        reader.update(keys_of("k", 100))
        short_lived.kill()
        with pytest.raises(ServerUnavailableError, match="while querying 'r'") as caught:
            reader.contains_many(keys_of("k", 100))
        assert not isinstance(caught.value, IncompleteBatchError)
    gone = redis.Redis(unix_socket_path=str(tmp_path / "nobody.sock"), **once)
    with pytest.raises(ServerUnavailableError, match="cannot reach the Redis server at unix:.*nobody.sock"):
        RedisBloomFilter.open(gone, "f")
    with pytest.raises(ServerUnavailableError, match="cannot reach"):
        f.update(["a", "b"])  # the secured server is stopped now


@needs_server
def test_server_killed_during_a_counting_batch_then_retried_exactly_once(monkeypatch, tmp_path):
    keys = keys_of("k", 80_000)  # 80 scripts of 1,000 keys, 32 in flight at a time
    local = CountingBloomFilter(100_000, 0.01, seed=12)
    local.update(keys)
    with LocalRedisServer(persistent=True, directory=str(tmp_path)) as srv:
        remote = RedisCountingBloomFilter(srv.client(), "crash", 100_000, 0.01, seed=12)
        kill_during_batch(monkeypatch, srv, after_packs=40)
        with pytest.raises(IncompleteBatchError) as caught:
            remote.update(keys, batch_id="nightly")
        monkeypatch.undo()
        error = caught.value
        assert error.batch_id == "nightly"
        assert error.applied_keys + error.unknown_keys == 80_000 and error.unknown_keys > 0
        assert error.applied_keys % 1000 == 0
        assert f"{error.applied_keys:,} keys are known to be applied" in str(error)
        assert "batch_id='nightly'" in str(error)
        srv.start()  # the append-only file brings back every acknowledged write
        redis_client = srv.client()
        remote = RedisCountingBloomFilter.open(redis_client, "crash")
        applied = remote.num_keys
        assert error.applied_keys <= applied <= 80_000 and applied % 1000 == 0
        remote.update(keys, batch_id="nightly")  # the retry applies only the scripts not yet applied
        assert remote.num_keys == 80_000
        assert from_redis(redis_client, "crash") == local


@needs_server
def test_server_killed_during_a_bit_batch(monkeypatch, tmp_path):
    keys = keys_of("b", 60_000)
    local = BloomFilter(100_000, 0.01, seed=13)
    local.update(keys)
    with LocalRedisServer(persistent=True, directory=str(tmp_path)) as srv:
        remote = RedisBloomFilter(srv.client(), "crash", 100_000, 0.01, seed=13)
        kill_during_batch(monkeypatch, srv, after_packs=40)
        with pytest.raises(IncompleteBatchError, match="retrying the whole batch is safe") as caught:
            remote.update(keys, method="bitfield")
        monkeypatch.undo()
        assert caught.value.unknown_keys > 0 and caught.value.batch_id is None
        srv.start()
        remote = RedisBloomFilter.open(srv.client(), "crash")
        confirmed = keys[:caught.value.applied_keys]
        assert remote.contains_many(confirmed).all()  # what was confirmed survived the crash
        remote.update(keys)
        assert from_redis(srv.client(), "crash") == local


@needs_server
def test_two_clients_share_one_filter(redis_server):
    a, b = redis_server.client(), redis_server.client()
    a.flushall()
    writer = RedisCountingBloomFilter(a, "shared", 50_000, 0.01)
    reader = RedisCountingBloomFilter.open(b, "shared")
    errors = []

    def work(prefix):
        try:
            f = RedisCountingBloomFilter.open(redis_server.client(), "shared")
            for i in range(5):
                f.update(keys_of(f"{prefix}{i}-", 1000))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(p,)) for p in ("x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    local = CountingBloomFilter(50_000, 0.01)
    for p in ("x", "y"):
        for i in range(5):
            local.update(keys_of(f"{p}{i}-", 1000))
    assert reader.num_keys == 10_000 and from_redis(b, "shared") == local
    assert writer.contains_many(keys_of("x0-", 1000)).all()


# ---- removal paths: the transaction and the script give the local filter's result -----------------------------------
operations = st.lists(st.tuples(st.sampled_from(["update", "remove_many", "ignore", "discard"]),
                                st.lists(st.integers(0, 40), max_size=25)), min_size=1, max_size=8)


@needs_server
@given(ops=operations, force_script=st.booleans())
def test_counting_operations_match_the_local_filter(redis_server, ops, force_script):
    redis_client = redis_server.client()
    redis_client.delete("h:meta", "h:part:0")
    # 12 counters, k = 4: collisions, repeated probes and saturation are all frequent
    local = CountingBloomFilter.from_size(12, 4, seed=21)
    remote = RedisCountingBloomFilter.from_size(redis_client, "h", 12, 4, seed=21)
    old_attempts = served_filters.REMOVE_ATTEMPTS
    served_filters.REMOVE_ATTEMPTS = 0 if force_script else old_attempts
    try:
        for op, keys in ops:
            if op == "update":
                remote.update(keys)
                local.update(keys)
            elif op == "remove_many":
                expected = got = None
                try:
                    expected = local.remove_many(keys)
                except KeyError as exc:
                    expected = exc.args
                try:
                    got = remote.remove_many(keys)
                except KeyError as exc:
                    got = exc.args
                assert got == expected
            elif op == "ignore":
                assert remote.remove_many(keys, missing="ignore") == local.remove_many(keys, missing="ignore")
            else:
                assert [remote.discard(key) for key in keys] == [local.discard(key) for key in keys]
            assert from_redis(redis_client, "h") == local
    finally:
        served_filters.REMOVE_ATTEMPTS = old_attempts
        redis_client.close()


@needs_server
def test_removal_reads_again_when_another_client_writes(redis_client, redis_server, monkeypatch):
    local = CountingBloomFilter(2000, 0.01, seed=3)
    remote = RedisCountingBloomFilter(redis_client, "w", 2000, 0.01, seed=3)
    other = RedisCountingBloomFilter.open(redis_server.client(), "w")
    keys = keys_of("k", 1500)
    remote.update(keys)
    local.update(keys)
    real = RedisCountingBloomFilter._read_cells
    calls = {"n": 0}

    def read_then_interfere(self, *args):
        values = real(self, *args)
        calls["n"] += 1
        if calls["n"] <= 2:  # another client changes the filter between our read and our EXEC
            other.update([f"late{calls['n']}"])
            local.update([f"late{calls['n']}"])
        return values

    monkeypatch.setattr(RedisCountingBloomFilter, "_read_cells", read_then_interfere)
    assert remote.remove_many(keys[:1000]) == 1000
    local.remove_many(keys[:1000])
    assert calls["n"] == 3  # two transactions refused by EXEC, the third applied
    assert from_redis(redis_client, "w") == local
    calls["n"] = -100  # now every transaction is refused: the script takes over and gives the same result
    assert remote.remove_many(keys[1000:1200]) == 200
    assert calls["n"] == -100 + served_filters.REMOVE_ATTEMPTS
    local.remove_many(keys[1000:1200])
    assert from_redis(redis_client, "w") == local


@needs_server
@pytest.mark.parametrize("layout", LAYOUTS)
def test_update_by_merge_gives_the_same_bits(redis_client, layout):
    local = BloomFilter(3000, 0.01, layout=layout, seed=17)
    keys = keys_of("k", 2000)
    local.update(keys)
    for method in ("bitfield", "merge", "auto"):  # auto: 2,000 keys for a few KiB of filter -> merge
        remote = RedisBloomFilter(redis_client, f"u-{method}", 3000, 0.01, layout=layout, seed=17, part_bytes=512)
        remote.update(keys, method=method)
        assert from_redis(redis_client, f"u-{method}") == local
    remote.update(iter(keys_of("i", 10)))  # an iterator: length unknown, BITFIELD
    assert remote.contains_many(keys_of("i", 10)).all()
    with pytest.raises(ValueError, match="method"):
        remote.update(keys, method="fast")


@needs_server
def test_server_killed_during_a_merge(monkeypatch, tmp_path):
    local = BloomFilter.from_size(64 * 512, 8, layout="blocked", seed=1)
    local.update(keys_of("m", 3000))
    with LocalRedisServer(persistent=True, directory=str(tmp_path)) as srv:
        remote = RedisBloomFilter.from_size(srv.client(), "mk", local.num_cells, 8, layout="blocked", seed=1,
                                            part_bytes=512)
        real = served_filters.encode_command
        calls = {"n": 0}

        def encode_command(args):
            if args[0] == b"MULTI":  # each part's transaction starts with MULTI: kill before the third one
                calls["n"] += 1
                if calls["n"] == 3:
                    srv.kill()
            return real(args)

        monkeypatch.setattr(served_filters, "encode_command", encode_command)
        with pytest.raises(IncompleteBatchError, match="2 of 8 parts were merged.*retrying the merge is safe"):
            remote.update(keys_of("m", 3000), method="merge")
        monkeypatch.undo()
        srv.start()
        remote = RedisBloomFilter.open(srv.client(), "mk")
        remote.merge(local)
        assert from_redis(srv.client(), "mk") == local


@needs_server
def test_quick_benchmark_runs():
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "redis_served.py"), "--quick"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| RedisBloomFilter blocked" in run.stdout and "insert, BITFIELD" in run.stdout
    from bloomwise._redis_server import find_redisbloom_module
    if find_redisbloom_module() is None:
        assert "side by side with RedisBloom: SKIPPED" in run.stdout
    else:  # the side-by-side prints a verdict for every regime and operation
        verdicts = [line for line in run.stdout.splitlines() if line.startswith(("PASS: ", "FAIL: "))]
        assert len(verdicts) == 14 and all("x RedisBloom's" in line for line in verdicts), run.stdout[:3000]
        assert sum("client-side cached copy" in line for line in verdicts) == 6, run.stdout[:3000]
        assert all(f"| ({shape})" in run.stdout for shape in "abc"), run.stdout[:3000]  # the sparse query shapes
        assert "| one EVALSHA, packed blocks and bits, Lua GETRANGE / SETRANGE |" in run.stdout  # insert shapes
    assert "| RedisCountingBloomFilter classic 4-bit" in run.stdout


@needs_server
@pytest.mark.parametrize("layout", LAYOUTS)
def test_reading_the_parts_answers_as_the_per_key_commands(redis_client, monkeypatch, layout):
    monkeypatch.setattr(served_filters, "READ_SLICE_BYTES", 64 * 3)  # several GETRANGE slices per part
    local = BloomFilter(4000, 0.02, layout=layout, seed=5)
    remote = RedisBloomFilter(redis_client, "rp", 4000, 0.02, layout=layout, seed=5, part_bytes=1024)
    assert len(remote.part_keys) > 2
    keys = keys_of("r", 2500)
    remote.update(keys, method="bitfield")  # the last part's string may end before the part does
    local.update(keys)
    probe = keys_of("absent", 6000) + keys
    expected = local.contains_many(probe)
    assert 0 < expected[:6000].sum() < 600  # some false positives, answered the same way
    for method in ("read", "per_key", "auto"):
        assert np.array_equal(remote.contains_many(probe, method=method), expected), method
    with pytest.raises(ValueError, match="method"):
        remote.contains_many(probe, method="fast")


@needs_server
def test_auto_chooses_by_the_batch_size_next_to_the_filter(redis_client, monkeypatch):
    remote = RedisBloomFilter(redis_client, "auto", 100_000, 0.01)
    chosen = []
    def read_part(self, index, doing):  # steps, like the real one
        chosen.append("read")
        return np.zeros(self.geometry.part_length(0), np.uint8)
        yield

    monkeypatch.setattr(RedisBloomFilter, "read_part", read_part)
    small = -(-remote.nbytes // served_filters.READ_BYTES_PER_KEY) - 1  # one key too few to read the filter
    remote.contains_many(np.arange(small, dtype=np.uint64))
    assert chosen == []
    remote.contains_many(np.arange(small + 1, dtype=np.uint64))
    assert chosen == ["read"]
