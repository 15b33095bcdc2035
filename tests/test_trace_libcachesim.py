"""Cross-check with libCacheSim (PyPI's libcachesim 0.3.5, test extra): on the same trace, one bloomwise proxy
with LRU or FIFO eviction has exactly libCacheSim's hits, request by request counted, at every cache size; on a
trace the test makes and on a slice of the real CloudPhysics trace."""
from __future__ import annotations

import numpy as np
import pytest

from bloomwise.cache.simulation import SimulationConfig, replay
from bloomwise.cache.traces import assigned_requests, open_trace
from command_support import oracle_general_bytes
from real_traces import real_trace

libcachesim = pytest.importorskip("libcachesim", reason="the cross-check needs the libcachesim package "
                                                        "(pip install libcachesim==0.3.5, in the test extra)")


def write_oracle_general(path, objects, sizes, times) -> None:
    """An oracleGeneral file (libCacheSim's binary trace): next access computed as libCacheSim's tools do (the
    1-based number of the object's next request, -1 when none)."""
    n = len(objects)
    nexts = np.full(n, -1, dtype=np.int64)
    last_seen: dict[int, int] = {}
    for i in range(n - 1, -1, -1):
        nexts[i] = last_seen.get(int(objects[i]), -1)
        last_seen[int(objects[i])] = i + 1
    path.write_bytes(oracle_general_bytes(times, objects, sizes, nexts))


@pytest.fixture(scope="module")
def made_trace(tmp_path_factory):
    """20,000 requests, Zipf(0.9) popularity over 3,000 objects, lognormal sizes (median 8 KB, some over 64 KiB)."""
    rng = np.random.Generator(np.random.PCG64(7))
    weights = np.arange(1, 3001, dtype=np.float64) ** -0.9
    ranks = rng.choice(3000, size=20_000, p=weights / weights.sum())
    sizes_by_rank = np.maximum(1, np.exp(rng.normal(9.0, 1.3, 3000))).astype(np.int64)
    assert (sizes_by_rank > 64 << 10).sum() > 50  # documents larger than the smallest cache: refused by both
    path = tmp_path_factory.mktemp("libcachesim") / "made.oracleGeneral.bin"
    write_oracle_general(path, ranks * 7919 + 12345, sizes_by_rank[ranks], np.arange(20_000) // 10)
    return path


def libcachesim_hits(path, eviction: str, cache_size: int, requests: int) -> tuple[int, float]:
    """(hits, hit ratio) of libCacheSim's cache over the first ``requests`` requests."""
    reader = libcachesim.TraceReader(str(path), libcachesim.TraceType.ORACLE_GENERAL_TRACE)
    cache = {"lru": libcachesim.LRU, "fifo": libcachesim.FIFO}[eviction](cache_size)
    miss_ratio, _ = cache.process_trace(reader, max_req=requests)
    hits = requests * (1.0 - miss_ratio)
    assert abs(hits - round(hits)) < 1e-6  # the ratio of whole counts, read back
    return round(hits), 1.0 - miss_ratio


def bloomwise_hits(path, eviction: str, cache_size: int, requests: int, engine: str):
    config = SimulationConfig(num_proxies=1, cache_size=cache_size, eviction=eviction)
    result = replay(assigned_requests(open_trace(path), "round-robin", 1, limit=requests), "none", config,
                    engine=engine)
    assert result.engine == engine
    return result


ENGINES = pytest.mark.parametrize("engine", ["python", "compiled"])  # the reference and the compiled replay


@ENGINES
@pytest.mark.parametrize("eviction", ["lru", "fifo"])
@pytest.mark.parametrize("cache_size", [64 << 10, 1 << 20, 16 << 20])
def test_same_hits_as_libcachesim_on_a_made_trace(made_trace, eviction, cache_size, engine):
    hits, ratio = libcachesim_hits(made_trace, eviction, cache_size, 20_000)
    result = bloomwise_hits(made_trace, eviction, cache_size, 20_000, engine)
    assert result.requests == 20_000
    assert (result.local_hits, result.remote_hits) == (hits, 0)
    assert result.hit_ratio == pytest.approx(ratio, abs=1e-12)


@ENGINES
@pytest.mark.parametrize("eviction", ["lru", "fifo"])
def test_same_hits_as_libcachesim_at_the_edges(tmp_path, eviction, engine):
    """A cache of 1,000 bytes filled exactly (nothing is evicted), a document of exactly the cache size (stored),
    one a byte larger (refused)."""
    path = tmp_path / "edges.oracleGeneral.bin"
    sizes = {1: 500, 2: 500, 3: 1000, 4: 1001, 5: 400, 6: 600}
    objects = np.array([3, 3, 1, 2, 1, 2, 4, 4, 1, 5, 6, 5, 6, 1])
    write_oracle_general(path, objects, np.array([sizes[o] for o in objects]), np.arange(len(objects)))
    hits, _ = libcachesim_hits(path, eviction, 1000, len(objects))
    result = bloomwise_hits(path, eviction, 1000, len(objects), engine)
    assert (result.local_hits, hits) == (6, 6)


@ENGINES
@pytest.mark.parametrize("eviction", ["lru", "fifo"])
def test_same_hits_as_libcachesim_on_real_cloudphysics(eviction, engine):
    """The first 30,000 requests of the CloudPhysics block trace, 1 MiB and 8 MiB caches."""
    path = real_trace("cloudphysics")
    for cache_size in (1 << 20, 8 << 20):
        hits, ratio = libcachesim_hits(path, eviction, cache_size, 30_000)
        result = bloomwise_hits(path, eviction, cache_size, 30_000, engine)
        assert (result.requests, result.local_hits) == (30_000, hits), cache_size
        assert result.hit_ratio == pytest.approx(ratio, abs=1e-12)
