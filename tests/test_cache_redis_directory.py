"""The summary directory in Redis: proxies publish to a real redis-server and read their peers' summaries from it."""
import pytest

from bloomwise import FormatError
from bloomwise.cache import CacheNode, DocumentCache

pytest.importorskip("redis", reason="the redis extra (redis-py) is not installed")
from bloomwise.cache.redis_directory import RedisSummaryDirectory  # noqa: E402


def node(name, kind="bits", origin=None):
    return CacheNode(name, DocumentCache(100_000, expected_entries=200), summary_kind=kind, update_threshold=0.01,
                     origin_id=origin)


def url(name, i):
    return f"http://{name}.example/{i}"


@pytest.mark.parametrize("kind", ["bits", "counters"])
def test_peers_find_each_other_and_follow_deltas(redis_client, kind):
    directory = RedisSummaryDirectory(redis_client, "group", history=3)
    a, b, c = node("a", kind, 1), node("b", kind, 2), node("c", kind, 3)
    for i in range(50):
        a.admit(url("a", i), 100)
        b.admit(url("b", i), 100)
    for n in (a, b, c):
        directory.sync(n)
    directory.sync(a)  # a now sees b and c too
    assert {p.peer_id for p in a.peers} == {"b", "c"} and {p.peer_id for p in c.peers} == {"a", "b"}
    assert c.route(url("a", 7)) == ["a"] and c.route(url("b", 7)) == ["b"]
    assert c.peer("a").summary.version == a.publisher.current_version
    # a publishes two deltas: c applies them in order (no whole summary needed)
    for round_ in range(2):
        for i in range(100 + 10 * round_, 110 + 10 * round_):
            a.admit(url("a", i), 100)
        directory.sync(a)
    deltas = directory.updates_since("a", c.peer("a").summary.version, c.peer("a").summary.origin)
    assert [u.is_delta for u in deltas] == [True, True]
    got = directory.sync(c)
    assert got["received"] == sum(u.nbytes for u in deltas)
    assert c.peer("a").summary.version == a.publisher.current_version
    assert a.peer("c").summary is not None
    assert all(c.peer("a").summary.may_contain(url("a", i)) for i in range(100, 120))
    assert directory.updates_since("a", c.peer("a").summary.version, c.peer("a").summary.origin) == []


def test_a_reader_far_behind_or_a_restarted_publisher_gets_the_whole_summary(redis_client):
    directory = RedisSummaryDirectory(redis_client, "g2", history=2)
    a, b = node("a", origin=1), node("b", origin=2)
    a.admit(url("a", 0), 100)
    directory.sync(a)
    directory.sync(b)
    held = b.peer("a").summary.version
    for round_ in range(5):  # more publications than the history keeps
        a.admit(url("a", 10 + round_), 100)
        directory.sync(a)
    updates = directory.updates_since("a", held, 1)
    assert len(updates) == 1 and not updates[0].is_delta
    directory.sync(b)
    assert b.peer("a").summary.version == a.publisher.current_version
    assert len(redis_client.hkeys("g2:node:a:deltas")) <= 2
    restarted = node("a", origin=99)  # same name, new instance id: its summaries start again at version 1
    restarted.admit(url("a", 500), 100)
    directory.sync(restarted)
    directory.sync(b)
    assert b.peer("a").summary.origin == 99 and b.route(url("a", 500)) == ["a"]


def test_damaged_summary_in_the_directory_is_a_format_error(redis_client):
    directory = RedisSummaryDirectory(redis_client, "g3")
    a = node("a", origin=1)
    a.admit(url("a", 0), 100)
    directory.sync(a)
    redis_client.set("g3:node:a:whole", b"BLOOMWISE but not really")
    with pytest.raises(FormatError):
        directory.whole("a")


def test_one_bad_publisher_is_skipped_and_the_others_are_applied(redis_client):
    directory = RedisSummaryDirectory(redis_client, "g4")
    a, b, c = node("a", origin=1), node("b", origin=2), node("c", origin=3)
    a.admit(url("a", 0), 100)
    c.admit(url("c", 0), 100)
    for n in (a, b, c):
        directory.sync(n)
    redis_client.set("g4:node:a:whole", b"BLOOMWISE but not really")  # "a" sorts first: the others come after it
    reader = node("r", origin=4)
    got = directory.sync(reader)
    assert set(got["skipped"]) == {"a"} and "FormatError" in got["skipped"]["a"]
    assert reader.peer("a").summary is None
    assert reader.route(url("c", 0)) == ["c"] and reader.peer("b").summary is not None
    assert got["received"] == directory.whole("b").nbytes + directory.whole("c").nbytes
    with pytest.raises(ValueError, match="history"):
        RedisSummaryDirectory(redis_client, "g", history=0)


def test_the_asyncio_directory_shares_the_keys_and_checks(redis_client, redis_server):
    import asyncio

    import redis.asyncio

    from bloomwise.cache.redis_directory import AsyncRedisSummaryDirectory
    sync_directory = RedisSummaryDirectory(redis_client, "g5", history=3)
    a, b, r = node("a", origin=1), node("b", origin=2), node("r", origin=3)
    a.admit(url("a", 0), 100)
    b.admit(url("b", 0), 100)
    sync_directory.sync(a)

    async def scenario():
        client = redis.asyncio.Redis(unix_socket_path=redis_server.socket_path)
        try:
            directory = AsyncRedisSummaryDirectory(client, "g5", history=3)
            await directory.sync(b)  # b publishes through asyncio and reads a's summary
            for i in range(1, 3):  # a publishes two deltas (sync); r follows them through asyncio
                a.admit(url("a", i), 100)
                sync_directory.sync(a)
            got = await directory.sync(r)
            assert await directory.nodes() == {"a", "b", "r"}
            await client.set("g5:node:b:whole", b"damaged")
            late = node("late", origin=4)
            return got, await directory.sync(late), late
        finally:
            await client.aclose()

    got, late_got, late = asyncio.run(scenario())
    assert b.route(url("a", 0)) == ["a"] and r.route(url("a", 2)) == ["a"] and r.route(url("b", 0)) == ["b"]
    assert got["skipped"] == {} and got["published"] > 0
    assert set(late_got["skipped"]) == {"b"} and late.route(url("a", 2)) == ["a"]
    sync_directory.sync(a)  # a reads b's and r's summaries, which asyncio published
    assert a.route(url("b", 0)) == ["b"]
