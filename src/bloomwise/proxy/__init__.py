"""Summary Cache on the network: the bloomwise caching proxy, its peers, a test origin, a cluster launcher, and a
harness for a real Squid.

- :mod:`bloomwise.proxy.server`: :class:`BloomwiseProxy` (``bloomwise proxy``), an HTTP/1.1 forward caching proxy on
  asyncio/aiohttp whose caching, summaries and routing are a :class:`bloomwise.cache.CacheNode`'s;
- :mod:`bloomwise.proxy.peers`: :class:`PeerLink`, summary pulls (bloomwise summaries or Squid Cache Digests),
  health and round-trip times of one peer;
- :mod:`bloomwise.proxy.access`: who may use a proxy and where it may fetch (closed by default);
- :mod:`bloomwise.proxy.advertised`: the documents a summary advertises (those that stay fresh long enough);
- :mod:`bloomwise.proxy.metrics`: the Prometheus text of ``/metrics``;
- :mod:`bloomwise.proxy.http_cache`: the part of RFC 9111 the proxy implements;
- :mod:`bloomwise.proxy.origin`: a test origin server with deterministic documents;
- :mod:`bloomwise.proxy.cluster`: ``bloomwise cluster`` (N proxies + an origin, one process each);
- :mod:`bloomwise.proxy.squid`: Debian's ``squid`` on loopback with a generated configuration.

Needs the ``proxy`` extra (aiohttp). See docs/cache.md, "Running a cluster".
"""
