"""The synthetic workload: a seeded, reproducible web-proxy trace, generated lazily.

:class:`SyntheticTrace` generates a seeded, reproducible trace lazily, in chunks (memory grows with the document
catalogue, never with the number of requests). Each request is drawn independently:

1. **Proxy**: uniform over ``num_proxies``; the client is one of that proxy's ``clients_per_proxy`` clients
   (addresses ``10.x.y.z`` chosen so that
   :func:`~bloomwise.cache.traces.assignment.assign_proxy` maps them back to that proxy), uniformly.
2. **One-timers**: with probability ``one_timer_fraction`` the request is for a new document that is never
   requested again (``http://once.example/<proxy>/<n>``). Such requests can only miss, in every cache: they are
   the compulsory misses that bound every proxy's hit ratio.
3. **Shared or private interest**: otherwise, with probability ``shared_fraction`` the document comes from the
   pool shared by all proxies' clients (``http://shared.example/<rank>``), else from the proxy's own pool
   (``http://proxy<p>.example/<rank>``). The shared pool holds ``round(shared_fraction * num_documents)`` documents
   and each private pool an equal part of the rest. Only requests to the shared pool can be remote hits, so
   ``shared_fraction`` sets how much cooperation can gain.
4. **Popularity**: within a pool of N documents, rank r (1 = most popular) is requested with probability
   ``r**-alpha / H(N, alpha)``, ``H(N, alpha) = sum_{i=1..N} i**-alpha`` (``zipf_alpha``). Breslau, Cao, Fan,
   Phillips and Shenker, "Web Caching and Zipf-like Distributions: Evidence and Implications" (INFOCOM 1999),
   found that the requests web proxies see follow such Zipf-like laws with an exponent that varies from trace to
   trace, that a model of independent requests reproduces the hit-ratio behaviour of real proxy traces, and that
   a document's popularity and its size are only weakly correlated: which is this model (independent draws,
   sizes independent of rank). The exponents reported for web traces lie between about 0.6 and 1 (0.60 to 1.03
   in the survey of Krashakov, Teslyuk and Shchur, "On the universality of rank distributions of website
   popularity", 2006); the default 0.8 is in the middle of the proxy range.
5. **Sizes**: each document has one size, a function of the seed and its URL. The shape is the file-size model of
   Barford and Crovella, "Generating Representative Web Workloads for Network and Server Performance Evaluation"
   (SURGE, SIGMETRICS 1998): a lognormal body (mu = 9.357, sigma = 1.318 in ln bytes: median 11.6 KB) spliced
   with a Pareto tail from k = 133 KB on (every body draw above k is replaced by ``k * U**(-1/size_tail)``, so
   the tail holds the body's 3.2% above k; ``size_tail`` is the Pareto shape, SURGE's 1.1 by default: smaller is
   heavier; it must exceed 1 for a finite mean). Sizes are capped at :data:`MAX_DOCUMENT_SIZE`. With
   ``mean_size=None`` (default) the sizes are SURGE's (expected mean: :attr:`SyntheticTrace.expected_size`, about
   49 KB); a ``mean_size`` in bytes rescales the whole shape so that the capped mean is that value.
6. **Time**: Poisson arrivals at ``request_rate`` requests per second (exponential gaps), from ``start_time``,
   rounded to the millisecond (the resolution of Squid's log, so a synthetic trace survives a round trip through
   either format exactly).

Only ``numpy.random.Generator(PCG64(seed)).random`` is used (uniform doubles, whose stream numpy keeps stable),
everything else is derived from those uniforms and from a hash of (seed, document), and uniforms are drawn in
whole chunks, so a seed gives the same trace on every run, and a shorter trace is a prefix of a longer one.
Across machines, numpy's vectorised ``log``/``exp``/``cos`` may differ in the last bit, which can move a rare
size by a byte or a timestamp by a millisecond.

>>> request = next(iter(SyntheticTrace(10, num_proxies=2, seed=1)))
>>> request[:5]
(1700000000.022, '10.0.0.10', 'GET', 'http://once.example/1/1', 6797)
>>> from bloomwise.cache.traces import request_key
>>> request_key(request.method, request.url), assign_proxy(request.client, 2)
('GET http://once.example/1/1', 1)
"""
from __future__ import annotations

import math
from itertools import repeat, starmap
from operator import add
from typing import Iterator

from bloomwise._checks import check_positive_integer, check_unit_interval
from bloomwise.cache.traces.assignment import assign_proxy
from bloomwise.cache.traces.records import Request, new_request

__all__ = ["SyntheticTrace", "MAX_DOCUMENT_SIZE", "BODY_MU", "BODY_SIGMA", "TAIL_START"]

#: The largest synthetic document (bytes): the Pareto tail is capped here.
MAX_DOCUMENT_SIZE = 2 ** 30
_INF = float("inf")


#: SURGE's file-size model (Barford & Crovella): lognormal body (ln bytes), Pareto tail from TAIL_START bytes.
BODY_MU, BODY_SIGMA, TAIL_START = 9.357, 1.318, 133_000.0
_CHUNK = 16384
_MASK64 = (1 << 64) - 1


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _expected_size(scale: float, tail_shape: float) -> float:
    """E[min(scale * X, MAX_DOCUMENT_SIZE)] for X the spliced SURGE shape (exact, from the lognormal's partial
    moment and the capped Pareto's mean), before rounding to whole bytes."""
    mu, sigma, k = BODY_MU + math.log(scale), BODY_SIGMA, TAIL_START * scale
    cap = float(MAX_DOCUMENT_SIZE)
    z = (math.log(k) - mu) / sigma
    tail_probability = 1.0 - _phi(z)
    body = math.exp(mu + sigma * sigma / 2) * _phi(z - sigma)  # E[LN; LN < k]
    if k >= cap:
        return body + tail_probability * cap
    tail = k + k / (tail_shape - 1.0) * (1.0 - (k / cap) ** (tail_shape - 1.0))  # E[min(Pareto(k), cap)]
    return body + tail_probability * tail


def _mix64(values):
    """SplitMix64's finaliser over a numpy uint64 array (wrapping arithmetic): a stable per-document hash."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class SyntheticTrace:
    """A seeded synthetic proxy workload (see the module docstring for the model and why it is realistic).

    Iterating yields ``num_requests`` :class:`Request` records (method GET, ``line`` 0), generated lazily in
    chunks of 16384; iterating again yields the same requests. Memory: O(num_documents + num_proxies *
    clients_per_proxy), independent of num_requests.

    :param num_requests: requests to generate (>= 0).
    :param num_proxies: proxies whose clients issue the requests (>= 1).
    :param num_documents: documents in the shared and private pools together (one-timers come on top).
    :param zipf_alpha: Zipf exponent of popularity within a pool (>= 0; web proxies: about 0.6-0.9).
    :param one_timer_fraction: probability that a request is for a document requested only once, in [0, 1).
    :param shared_fraction: probability that a (non-one-timer) request is for the shared pool, in [0, 1]; also
        the shared pool's share of ``num_documents``.
    :param mean_size: mean document size in bytes, or None for SURGE's sizes (about 49 KB).
    :param size_tail: Pareto shape of the size tail (> 1; SURGE: 1.1).
    :param seed: the seed (any integer >= 0).
    :param clients_per_proxy: clients behind each proxy.
    :param request_rate: mean requests per second (Poisson arrivals).
    :param start_time: timestamp of the trace's start (seconds since the epoch).
    """

    def __init__(self, num_requests: int, *, num_proxies: int = 4, num_documents: int = 100_000,
                 zipf_alpha: float = 0.8, one_timer_fraction: float = 0.25, shared_fraction: float = 0.5,
                 mean_size: float | None = None, size_tail: float = 1.1, seed: int = 0,
                 clients_per_proxy: int = 50, request_rate: float = 100.0, start_time: float = 1_700_000_000.0):
        if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 0:
            raise ValueError(f"num_requests must be an integer >= 0, got {num_requests!r}")
        self.num_requests = num_requests
        self.num_proxies = check_positive_integer("num_proxies", num_proxies)
        self.num_documents = check_positive_integer("num_documents", num_documents)
        self.clients_per_proxy = check_positive_integer("clients_per_proxy", clients_per_proxy)
        if isinstance(zipf_alpha, bool) or not isinstance(zipf_alpha, (int, float)) or not 0 <= zipf_alpha <= 10:
            raise ValueError(f"zipf_alpha must be a number in [0, 10], got {zipf_alpha!r}")
        self.zipf_alpha = float(zipf_alpha)
        self.one_timer_fraction = check_unit_interval("one_timer_fraction", one_timer_fraction, upper_open=True)
        self.shared_fraction = check_unit_interval("shared_fraction", shared_fraction)
        if isinstance(size_tail, bool) or not isinstance(size_tail, (int, float)) or not 1 < size_tail <= 100:
            raise ValueError(f"size_tail (the Pareto shape) must be a number in (1, 100], got {size_tail!r}")
        self.size_tail = float(size_tail)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        self.seed = seed
        if isinstance(request_rate, bool) or not isinstance(request_rate, (int, float)) or not 0 < request_rate < _INF:
            raise ValueError(f"request_rate must be a positive number, got {request_rate!r}")
        self.request_rate = float(request_rate)
        if not isinstance(start_time, (int, float)) or not 0 <= start_time < 1e12:
            raise ValueError(f"start_time must be a number of seconds in [0, 1e12), got {start_time!r}")
        self.start_time = float(start_time)

        shared = round(self.shared_fraction * self.num_documents)
        if self.shared_fraction > 0 and shared == 0:
            shared = 1
        private = (self.num_documents - shared) // self.num_proxies
        if self.shared_fraction < 1 and private == 0:
            raise ValueError(f"num_documents={num_documents} leaves no private document for each of "
                             f"{num_proxies} proxies with shared_fraction={shared_fraction}")
        self.shared_documents, self.private_documents = shared, private

        self._scale = 1.0
        if mean_size is not None:
            if isinstance(mean_size, bool) or not isinstance(mean_size, (int, float)) or not 1 <= mean_size <= 2 ** 26:
                raise ValueError(f"mean_size must be a number of bytes in [1, 2**26], got {mean_size!r}")
            low, high = 1e-9, 1e9  # the capped mean grows with the scale: bisection on the log scale
            for _ in range(200):
                middle = math.sqrt(low * high)
                if _expected_size(middle, self.size_tail) < mean_size:
                    low = middle
                else:
                    high = middle
            self._scale = math.sqrt(low * high)
        self.mean_size = mean_size
        self._clients = self._make_clients()

    @property
    def expected_size(self) -> float:
        """The expected document size in bytes (exact for the model, before rounding to whole bytes)."""
        return _expected_size(self._scale, self.size_tail)

    def clients(self, proxy: int) -> list[str]:
        """The client addresses of one proxy (``assign_proxy(c, num_proxies) == proxy`` for each)."""
        return list(self._clients[proxy])

    def _make_clients(self) -> list[list[str]]:
        per_proxy: list[list[str]] = [[] for _ in range(self.num_proxies)]
        missing, i = self.num_proxies, 0
        while missing:
            i += 1
            client = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}" if i < 2 ** 24 else f"client{i}"
            bucket = per_proxy[assign_proxy(client, self.num_proxies)]
            if len(bucket) < self.clients_per_proxy:
                bucket.append(client)
                if len(bucket) == self.clients_per_proxy:
                    missing -= 1
        return per_proxy

    def __len__(self) -> int:
        return self.num_requests

    def __repr__(self) -> str:
        return (f"SyntheticTrace({self.num_requests}, num_proxies={self.num_proxies}, "
                f"num_documents={self.num_documents}, zipf_alpha={self.zipf_alpha}, "
                f"one_timer_fraction={self.one_timer_fraction}, shared_fraction={self.shared_fraction}, "
                f"mean_size={self.mean_size}, size_tail={self.size_tail}, seed={self.seed})")

    @staticmethod
    def _zipf_cdf(n: int, alpha: float):
        import numpy as np

        if n == 0:
            return np.zeros(0)
        weights = np.arange(1, n + 1, dtype=np.float64) ** -alpha
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]
        return cdf

    def _sizes(self, pool_ids, ranks):
        """Stable sizes: a function of (seed, pool, rank) only, via three hashed uniforms per document."""
        import numpy as np

        key = (pool_ids.astype(np.uint64) << np.uint64(40)) ^ ranks.astype(np.uint64)
        base = _mix64(key ^ np.uint64((self.seed * 0x9E3779B97F4A7C15) & _MASK64))
        scale53 = 1.0 / 2.0 ** 53
        u1 = ((_mix64(base) >> np.uint64(11)).astype(np.float64) + 0.5) * scale53
        u2 = ((_mix64(base ^ np.uint64(1)) >> np.uint64(11)).astype(np.float64) + 0.5) * scale53
        u3 = ((_mix64(base ^ np.uint64(2)) >> np.uint64(11)).astype(np.float64) + 0.5) * scale53
        normal = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)  # Box-Muller
        size = np.exp(BODY_MU + BODY_SIGMA * normal)
        tail = size > TAIL_START
        size[tail] = TAIL_START * u3[tail] ** (-1.0 / self.size_tail)
        size = np.minimum(size * self._scale, float(MAX_DOCUMENT_SIZE))
        return np.maximum(np.rint(size), 1.0).astype(np.int64)

    def __iter__(self) -> Iterator[Request]:
        import numpy as np

        rng = np.random.Generator(np.random.PCG64(self.seed))
        shared_cdf = self._zipf_cdf(self.shared_documents, self.zipf_alpha)
        private_cdf = self._zipf_cdf(self.private_documents, self.zipf_alpha)
        num_proxies, clients = self.num_proxies, self._clients
        clients_per_proxy = self.clients_per_proxy
        one_timer, shared = self.one_timer_fraction, self.shared_fraction
        mean_gap = 1.0 / self.request_rate
        clock = self.start_time
        once_counter = 0
        prefixes = (["http://shared.example/"] + [f"http://proxy{p}.example/" for p in range(num_proxies)]
                    + [f"http://once.example/{p}/" for p in range(num_proxies)])
        flat_clients = [c for proxy_clients in clients for c in proxy_clients]
        constant_fields = [repeat(value) for value in (0, None, None, None, None, None, None, None)]
        one_timer_pool = num_proxies + 1  # pool ids: 0 shared, 1..P private, P+1 one-timers
        remaining = self.num_requests
        while remaining:
            n = min(_CHUNK, remaining)
            remaining -= n
            u = rng.random((6, _CHUNK))[:, :n]  # whole chunks: a trace is a prefix of any longer one
            proxy = np.minimum((u[0] * num_proxies).astype(np.int64), num_proxies - 1)
            client = np.minimum((u[1] * clients_per_proxy).astype(np.int64), clients_per_proxy - 1)
            is_once = u[2] < one_timer
            is_shared = ~is_once & (u[3] < shared)
            is_private = ~is_once & ~is_shared
            rank = np.zeros(n, dtype=np.int64)
            if len(shared_cdf):
                rank[is_shared] = np.searchsorted(shared_cdf, u[4][is_shared], side="right")
            if len(private_cdf):
                rank[is_private] = np.searchsorted(private_cdf, u[4][is_private], side="right")
            rank += 1
            rank[is_shared] = np.minimum(rank[is_shared], max(self.shared_documents, 1))
            rank[is_private] = np.minimum(rank[is_private], max(self.private_documents, 1))
            once_number = np.cumsum(is_once) + once_counter
            once_counter = int(once_number[-1])
            rank[is_once] = once_number[is_once]
            pool = np.where(is_once, one_timer_pool, np.where(is_shared, 0, proxy + 1))
            sizes = self._sizes(pool, rank)
            gaps = -np.log1p(-u[5]) * mean_gap  # exponential gaps: Poisson arrivals
            times = np.cumsum(gaps) + clock
            clock = float(times[-1])
            times = np.round(times * 1000.0) / 1000.0
            # URL prefix: 0 shared, 1+p proxy p's pool, 1+P+p proxy p's one-timers
            prefix = np.where(is_once, 1 + num_proxies + proxy, np.where(is_shared, 0, 1 + proxy))
            urls = list(map(add, map(prefixes.__getitem__, prefix.tolist()), map(str, rank.tolist())))
            who = list(map(flat_clients.__getitem__, (proxy * clients_per_proxy + client).tolist()))
            # C-level assembly of the records (no Python code per request)
            yield from starmap(new_request, zip(repeat(Request), zip(
                times.tolist(), who, repeat("GET"), urls, sizes.tolist(), *constant_fields)))

