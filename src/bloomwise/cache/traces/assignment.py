"""Which proxy serves a request: the client -> proxy hash, and the rules for traces without a client field.

:func:`assign_proxy` maps a client to one of P proxies: ``XXH3-64(UTF-8 bytes of client, seed 0) mod P``, with
bloomwise's own compiled XXH3 (bit-exact with the reference xxHash), so the same trace always splits the same way.
It is one hash call: nothing is remembered per client, so replaying a trace costs no memory per distinct client.

libCacheSim's traces (csv, oracleGeneral) have no client field. :func:`assigned_requests` applies one of the
:data:`ASSIGNMENT_RULES` to any trace:

- ``hash-client``: the trace's own clients, by :func:`assign_proxy` (the records pass unchanged); refused for a
  trace without clients, where every request would go to one proxy.
- ``random``: each request goes to a proxy drawn uniformly and independently, ``floor(u * P)`` with ``u`` the
  next double of ``numpy.random.Generator(PCG64(seed)).random`` (drawn 16,384 at a time), so a seed gives the same
  split on every run and a shorter replay is a prefix of a longer one.
- ``round-robin``: request i (0-based, counting every request of the trace) goes to proxy ``i mod P``.

For the last two the request's client becomes a stand-in name that :func:`assign_proxy` maps to the chosen proxy
(:func:`stand_in_clients`: ``proxy<p>-client<i>``, the first i that hashes to p), so the records themselves say
where they go and every consumer of ``(client, P)`` agrees; the state is one name per proxy.

>>> assign_proxy("10.0.0.1", 1)
0
>>> [assign_proxy(client, 3) for client in stand_in_clients(3)]
[0, 1, 2]
"""
from __future__ import annotations

from itertools import islice
from typing import Callable, Iterable, Iterator

from bloomwise._checks import check_positive_integer
from bloomwise._native.hashes import xxh3 as _xxh3
from bloomwise.cache.traces.records import Request

__all__ = ["assign_proxy", "client_to_proxy", "ASSIGNMENT_RULES", "stand_in_clients", "assigned_requests",
           "check_assignment", "random_proxy_draws"]

#: The ways of sending the requests of a trace to proxies (see the module docstring).
ASSIGNMENT_RULES = ("hash-client", "random", "round-robin")
_RANDOM_CHUNK = 16384


def assign_proxy(client: str, num_proxies: int) -> int:
    """The proxy (0 .. num_proxies-1) that serves ``client``: XXH3-64 of its UTF-8 bytes (seed 0) mod num_proxies.

    Stable across runs, machines and versions (the hash is bloomwise's compiled XXH3, bit-exact with xxHash's
    ``xxh3_64``). The modulo bias is below num_proxies / 2**64.
    """
    return _xxh3(client.encode("utf-8")) % check_positive_integer("num_proxies", num_proxies)


def client_to_proxy(num_proxies: int) -> Callable[[str], int]:
    """``proxy_of(client)``, the same answer as ``assign_proxy(client, num_proxies)`` with the argument checked
    once (the replay loop's form): one hash call a request, nothing remembered."""
    check_positive_integer("num_proxies", num_proxies)

    def proxy_of(client: str) -> int:
        return _xxh3(client.encode("utf-8")) % num_proxies

    return proxy_of


def stand_in_clients(num_proxies: int) -> list[str]:
    """One client name per proxy, ``proxy<p>-client<i>`` with the smallest i such that
    ``assign_proxy(name, num_proxies) == p`` (about P tries each)."""
    names = []
    for proxy in range(check_positive_integer("num_proxies", num_proxies)):
        i = 0
        while assign_proxy(f"proxy{proxy}-client{i}", num_proxies) != proxy:
            i += 1
        names.append(f"proxy{proxy}-client{i}")
    return names


def assigned_requests(requests: Iterable[Request], rule: str, num_proxies: int, *, seed: int = 0,
                      limit: int | None = None) -> Iterator[Request]:
    """The first ``limit`` requests (all when None), each with the client that sends it to its proxy by ``rule``.

    ``requests`` is closed (if it has ``close``) when the iteration ends or is abandoned. The rule ``hash-client``
    on a reader whose ``has_clients`` is False raises ValueError (every request would go to one proxy).

    >>> from bloomwise.cache.traces import Request
    >>> trace = [Request(0.0, "-", "GET", f"object{i}", 100) for i in range(4)]
    >>> [r.client for r in assigned_requests(trace, "round-robin", 2)]
    ['proxy0-client3', 'proxy1-client1', 'proxy0-client3', 'proxy1-client1']
    """
    check_assignment(requests, rule, num_proxies, seed=seed, limit=limit)
    return _assigned(requests, rule, num_proxies, seed, limit)


def check_assignment(requests, rule: str, num_proxies: int, *, seed: int = 0, limit: int | None = None) -> None:
    """The checks :func:`assigned_requests` makes of its arguments (for readers of the same requests as arrays).

    :raises ValueError: an unknown rule, a bad count, seed or limit, or ``hash-client`` on a trace whose
        ``has_clients`` is False (the message says which rules to use).
    """
    if rule not in ASSIGNMENT_RULES:
        raise ValueError(f"the proxy assignment must be one of {', '.join(ASSIGNMENT_RULES)}, got {rule!r}")
    check_positive_integer("num_proxies", num_proxies)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be an integer >= 0 or None, got {limit!r}")
    if rule == "hash-client" and getattr(requests, "has_clients", True) is False:
        name = getattr(requests, "path", "the trace")
        raise ValueError(f"{name} has no client field: choose how its requests go to proxies, 'random' or "
                         f"'round-robin' (bloomwise simulate --assign), not 'hash-client'")


def _assigned(requests, rule, num_proxies, seed, limit):
    try:
        source = requests if limit is None else islice(requests, limit)  # islice reads no record past the limit
        if rule == "hash-client":
            yield from source
            return
        clients = stand_in_clients(num_proxies)
        choices = _random_proxies(num_proxies, seed) if rule == "random" else _round_robin(num_proxies)
        for request, proxy in zip(source, choices):
            yield request._replace(client=clients[proxy])
    finally:
        close = getattr(requests, "close", None)
        if close is not None:
            close()


def _round_robin(num_proxies: int) -> Iterator[int]:
    while True:
        yield from range(num_proxies)


def random_proxy_draws(num_proxies: int, seed: int):
    """The proxies rule ``random`` gives requests 0, 1, 2, ... in turn, as int64 arrays of 16,384 (endless)."""
    import numpy as np  # numpy is imported by the generators that need it, not by every trace reader

    check_positive_integer("num_proxies", num_proxies)
    rng = np.random.Generator(np.random.PCG64(seed))
    while True:
        yield np.minimum((rng.random(_RANDOM_CHUNK) * num_proxies).astype(np.int64), num_proxies - 1)


def _random_proxies(num_proxies: int, seed: int) -> Iterator[int]:
    for draws in random_proxy_draws(num_proxies, seed):
        yield from draws.tolist()

