"""Which proxy serves a request: the client hash in the replay (no state per client), and the assignment rules
for traces without clients (bloomwise.cache.traces.assignment)."""
from __future__ import annotations

import tracemalloc
from collections import Counter

import pytest

from bloomwise.cache.simulation import SimulationConfig, replay
from bloomwise.cache.traces import (ASSIGNMENT_RULES, Request, assign_proxy, assigned_requests, client_to_proxy,
                                    stand_in_clients)
from stats import FALSE_ALARM


def _distinct_clients(count: int):
    """``count`` requests for one document, each from a client never seen before."""
    for i in range(count):
        yield Request(float(i), f"client-{i:08d}.example.net", "GET", "http://example.com/same", 1000)


def test_replay_keeps_no_state_per_distinct_client():
    """20,000 distinct clients cost the replay no more memory than 2,000 (a memo of client -> proxy costs about
    100 bytes a client: 1.8 MB more here)."""
    config = SimulationConfig(num_proxies=4, cache_size=1 << 20)

    def peak(count: int) -> int:
        tracemalloc.start()
        try:
            # the Python engine, where the memo was (the compiled one holds a block of up to 65,536 records instead)
            result = replay(_distinct_clients(count), "icp", config, engine="python")
            assert result.requests == count
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(2_000), peak(20_000)
    assert large - small < 200_000, (small, large)


def test_client_to_proxy_is_assign_proxy():
    for proxies in (1, 2, 7, 100):
        proxy_of = client_to_proxy(proxies)
        for i in range(300):
            client = f"10.0.{i // 256}.{i % 256}"
            assert proxy_of(client) == assign_proxy(client, proxies)
    with pytest.raises(ValueError, match="num_proxies must be a positive integer, got 0"):
        client_to_proxy(0)


def test_stand_in_clients_map_to_their_proxy():
    for proxies in (1, 2, 5, 64):
        clients = stand_in_clients(proxies)
        assert [assign_proxy(c, proxies) for c in clients] == list(range(proxies))
    assert stand_in_clients(2) == ["proxy0-client3", "proxy1-client1"]  # pinned: the split is part of results


def _objects(count: int, client: str = "-"):
    return [Request(float(i), client, "GET", f"object{i}", 100 + i, i + 1) for i in range(count)]


class _NoClients(list):
    has_clients = False
    path = "t.csv"
    closed = False

    def close(self):
        self.closed = True


def test_round_robin():
    got = list(assigned_requests(_objects(10), "round-robin", 3))
    assert [assign_proxy(r.client, 3) for r in got] == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    assert [r[2:] for r in got] == [r[2:] for r in _objects(10)]  # only the client changes


def test_random_is_seeded_uniform_and_a_prefix():
    trace = _objects(30_000)
    first = [assign_proxy(r.client, 4) for r in assigned_requests(trace, "random", 4, seed=5)]
    again = [assign_proxy(r.client, 4) for r in assigned_requests(trace, "random", 4, seed=5)]
    other = [assign_proxy(r.client, 4) for r in assigned_requests(trace, "random", 4, seed=6)]
    assert first == again and first != other
    short = [assign_proxy(r.client, 4) for r in assigned_requests(trace, "random", 4, seed=5, limit=20_000)]
    assert short == first[:20_000]
    assert first[:12] == [3, 3, 2, 1, 0, 1, 1, 0, 0, 3, 2, 0]  # pinned: numpy's PCG64 stream for seed 5
    # uniform: chi-square with 3 degrees of freedom; the 1e-6 quantile is 30.66
    counts = Counter(first)
    expected = len(first) / 4
    chi2 = sum((counts[p] - expected) ** 2 / expected for p in range(4))
    assert FALSE_ALARM >= 1e-6 and chi2 < 30.66, counts


def test_hash_client_keeps_the_clients_and_is_refused_without_them():
    trace = _objects(5, client="10.1.2.3")
    assert list(assigned_requests(trace, "hash-client", 3)) == trace
    no_clients = _NoClients(_objects(5))
    with pytest.raises(ValueError,
                       match="t.csv has no client field: .* 'random' or 'round-robin'.*--assign.*not 'hash-client'"):
        assigned_requests(no_clients, "hash-client", 3)
    for rule in ("random", "round-robin"):
        no_clients = _NoClients(_objects(5))
        assert len(list(assigned_requests(no_clients, rule, 3))) == 5 and no_clients.closed


def test_limit_reads_no_further_and_closes():
    reads = []

    class Source(_NoClients):
        def __iter__(self):
            for request in super().__iter__():
                reads.append(request.line)
                yield request

    source = Source(_objects(100))
    got = list(assigned_requests(source, "round-robin", 2, limit=7))
    assert [r.line for r in got] == list(range(1, 8)) and reads == list(range(1, 8)) and source.closed
    assert list(assigned_requests(_objects(3), "round-robin", 2, limit=0)) == []


@pytest.mark.parametrize("kwargs, message", [
    (dict(rule="carp"), "the proxy assignment must be one of hash-client, random, round-robin, got 'carp'"),
    (dict(num_proxies=0), "num_proxies must be a positive integer"),
    (dict(seed=-1), "seed must be an integer >= 0"),
    (dict(limit=-1), "limit must be an integer >= 0 or None"),
])
def test_bad_arguments(kwargs, message):
    arguments = dict(rule="random", num_proxies=2) | kwargs
    with pytest.raises(ValueError, match=message):
        assigned_requests(_objects(2), arguments.pop("rule"), arguments.pop("num_proxies"), **arguments)
    assert ASSIGNMENT_RULES == ("hash-client", "random", "round-robin")
