"""A bloomwise proxy is closed by default: who may use it, where it may fetch, CONNECT, and the peer endpoints.
Every refusal is checked here with the status, the one-line reason, and the origin never reached. Nothing is sent
to any address but 127.0.0.1 (the denied metadata and link-local ranges are checked on the policy alone)."""
import asyncio

import pytest

from proxy_support import aiohttp, config, eventually, get, get_checked, origin_and_proxies, run
from bloomwise.cache.squid_digest import DIGEST_PATH
from bloomwise.proxy.access import ClientPolicy, DestinationPolicy, DestinationRule, GuardedResolver
from bloomwise.proxy.server import ProxyConfig

NOT_US = ClientPolicy.parse("10.0.0.0/8")   # every test request comes from 127.0.0.1: refused by this one


async def _refused(session, proxy, url, status=403, **kw):
    got, headers, body = await get(session, proxy.url, url, **kw)
    text = body.decode()
    assert got == status, (got, text)
    assert text.count("\n") == 1 and headers["X-Bloomwise-Error"] == "1", text    # one line
    return text


# -- the policies alone ---------------------------------------------------------------------------------------------
def test_default_destinations_refuse_loopback_link_local_and_metadata():
    policy = DestinationPolicy()
    for address in ("127.0.0.1", "127.9.9.9", "169.254.169.254", "0.0.0.0", "::1", "fe80::1", "::ffff:127.0.0.1",
                    "fd00:ec2::254"):
        reason = policy.refusal("h", 80, [address])
        assert reason is not None and "denied address" in reason, address
    assert policy.refusal("example.com", 80, ["93.184.215.14"]) is None
    # a name with one denied address among allowed ones is refused
    assert policy.refusal("mixed", 80, ["93.184.215.14", "169.254.169.254"]) is not None
    assert policy.refusal("nothing", 80, []) == "nothing:80 resolves to no address"


def test_the_proxys_own_endpoints_are_never_destinations():
    policy = DestinationPolicy.parse("127.0.0.0/8,10.0.0.0/8")
    policy.add_own_endpoints([("127.0.0.1", 3128)])
    assert policy.refusal("127.0.0.1", 3128, ["127.0.0.1"]) == "127.0.0.1:3128 is this proxy itself"
    assert policy.refusal("127.0.0.1", 3129, ["127.0.0.1"]) is None
    wildcard = DestinationPolicy.parse("127.0.0.0/8,10.0.0.0/8")
    wildcard.add_own_endpoints([("0.0.0.0", 3128)])              # listening on every address: its own ones
    assert wildcard.refusal("localhost", 3128, ["127.0.0.1"]) is not None
    assert wildcard.refusal("other", 3128, ["10.255.255.254"]) is None   # another host's port 3128


def test_destination_rules_by_name_network_and_port():
    policy = DestinationPolicy.parse("origin.test:80,.example.com,10.0.0.0/8:8000-8099,[fd00::/8]:443")
    assert policy.refusal("origin.test", 80, ["10.9.9.9"]) is None
    assert policy.refusal("origin.test", 81, ["192.0.2.1"]) is not None
    assert policy.refusal("www.example.com", 1234, ["192.0.2.1"]) is None       # suffix rule, any port
    assert policy.refusal("example.com", 1234, ["192.0.2.1"]) is None
    assert policy.refusal("badexample.com", 80, ["192.0.2.1"]) is not None
    assert policy.refusal("10.1.2.3", 8050, ["10.1.2.3"]) is None
    assert policy.refusal("10.1.2.3", 8100, ["10.1.2.3"]) is not None
    assert policy.refusal("v6", 443, ["fd12::1"]) is None and policy.refusal("v6", 80, ["fd12::1"]) is not None
    assert [str(r) for r in policy.rules] == ["origin.test:80", ".example.com", "10.0.0.0/8:8000-8099",
                                              "[fd00::/8]:443"]


@pytest.mark.parametrize("text, message", [
    ("", "names no destination"), ("host:0", "ports"), ("host:90-80", "ports"), ("host:x", "ports"),
    ("bad host", "neither a host name"), ("[::1", "IPv6 entry"), ("a/b", "neither a host name"),
])
def test_bad_destination_rules_are_refused_with_the_entry(text, message):
    with pytest.raises(ValueError, match=message):
        DestinationPolicy.parse(text) if text == "" else DestinationRule.parse(text)


def test_client_policy():
    assert ClientPolicy().allows("127.0.0.1") and ClientPolicy().allows("::1")
    assert ClientPolicy().allows("::ffff:127.0.0.1")
    assert not ClientPolicy().allows("10.0.0.1") and not ClientPolicy().allows(None)
    assert ClientPolicy.parse("10.0.0.0/8, 192.168.1.7").allows("192.168.1.7")
    with pytest.raises(ValueError, match="--allow-clients '10.0.0.0/33'"):
        ClientPolicy.parse("10.0.0.0/33")


def test_the_guarded_resolver_refuses_a_name_that_resolves_to_a_denied_address():
    async def scenario():
        resolver = GuardedResolver(DestinationPolicy())
        try:
            with pytest.raises(OSError, match="refused by the destination policy"):
                await resolver.resolve("localhost", 80)    # a name the URL check might have let through
        finally:
            await resolver.close()
        allowed = GuardedResolver(DestinationPolicy.parse("127.0.0.1"))
        try:
            assert {r["host"] for r in await allowed.resolve("localhost", 80)} <= {"127.0.0.1"}
        finally:
            await allowed.close()
    run(scenario())


# -- a running proxy ------------------------------------------------------------------------------------------------
def test_default_destinations_refuse_the_proxys_own_host():
    async def scenario():
        async with origin_and_proxies(config(name="A", destinations=None)) as (origin, (a,), session):
            text = await _refused(session, a, origin.url + "/doc/1")
            assert "127.0.0.1" in text and "denied address (127.0.0.0/8" in text
            async with session.post(origin.url + "/doc/1", proxy=a.url, data=b"x") as reply:
                assert reply.status == 403                                # pass-through too
            await _refused(session, a, origin.url + "/doc/1", headers={"Cache-Control": "no-cache"})
            assert sum(origin.served.values()) == 0
            assert a.stats()["destinations_refused"] == 3
    run(scenario())


def test_destinations_outside_the_list_are_refused():
    async def scenario():
        async with origin_and_proxies(config(name="A", destinations=DestinationPolicy.parse("127.0.0.1:1-2")),
                                      config(name="B")) as (origin, (a, b), session):
            text = await _refused(session, a, origin.url + "/doc/1")
            assert f"127.0.0.1:{origin.port} is not an allowed destination" in text
            assert sum(origin.served.values()) == 0
            # the proxy itself is never a destination, even when its address is allowed
            text = await _refused(session, b, f"{b.url}/doc/1")
            assert "is this proxy itself" in text
    run(scenario())


def test_clients_outside_the_list_are_refused_everywhere():
    async def scenario():
        async with origin_and_proxies(config(name="A", clients=NOT_US)) as (origin, (a,), session):
            text = await _refused(session, a, origin.url + "/doc/1")
            assert text == "client 127.0.0.1 is not allowed to use this proxy (--allow-clients 10.0.0.0/8)\n"
            for path in ("/bloomwise/summary", "/bloomwise/stats", DIGEST_PATH, "/metrics"):
                async with session.get(a.url + path) as reply:
                    assert reply.status == 403, path
            async with session.post(a.url + "/bloomwise/notify", json={"url": "http://127.0.0.1:1", "version": 1}) \
                    as reply:
                assert reply.status == 403
            assert sum(origin.served.values()) == 0 and a.stats()["clients_refused"] == 6
    run(scenario())


def test_a_peer_may_ask_peer_queries_and_read_summaries_but_not_fetch():
    async def scenario():
        async with origin_and_proxies(config(name="A", clients=NOT_US), config(name="B")) \
                as (origin, (a, b), session):
            # B (on 127.0.0.1) is A's peer: once A resolved B's address, requests from 127.0.0.1 are a peer's
            await eventually(lambda: a.links[b.url].addresses, what="B's address at A")
            async with session.get(a.url + "/bloomwise/summary") as reply:
                assert reply.status == 200
            status, _, _ = await get(session, a.url, origin.url + "/doc/1", headers={"Cache-Control": "only-if-cached"})
            assert status == 504                                          # a peer query: answered
            text = await _refused(session, a, origin.url + "/doc/1")         # a fetch: refused
            assert "is a peer" in text
            async with session.request("PURGE", origin.url + "/doc/1", proxy=a.url) as reply:
                assert reply.status == 403 and "is a peer" in await reply.text()   # PURGE: clients only
            assert sum(origin.served.values()) == 0
    run(scenario())


def test_connect_is_refused_with_405():
    async def scenario():
        async with origin_and_proxies(config(name="A")) as (origin, (a,), session):
            reader, writer = await asyncio.open_connection("127.0.0.1", a.config.port)
            writer.write(f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\nHost: 127.0.0.1:{origin.port}\r\n\r\n"
                         .encode())
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            writer.close()
            assert head.startswith(b"HTTP/1.1 405"), head
            assert b"Allow: GET" in head
            assert a.stats()["connect_refused"] == 1
    run(scenario())


def test_proxy_config_defaults_are_closed():
    c = ProxyConfig()
    assert c.clients.describe() == "127.0.0.0/8,::1/128"
    assert c.destinations.rules is None and "169.254.0.0/16" in c.destinations.describe()
