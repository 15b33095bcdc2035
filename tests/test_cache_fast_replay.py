"""The compiled replay (cache/fast_replay.py over _native/replay.pyx) against the Python engine, the reference:
every counter of policy ``none`` equal, on fixed seeds, synthetic and real traces, LRU and FIFO, at the edges of
admission and eviction; and the kernel request by request against DocumentCache."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from bloomwise._native.replay import IndependentCaches
from bloomwise.cache.fast_replay import BLOCK_REQUESTS, OracleGeneralTrace, choose_engine, replay_independent
from bloomwise.cache.simulation import SimulationConfig, replay, simulate
from bloomwise.cache.store import DocumentCache
from bloomwise.cache.traces import OracleGeneralReader, Request, SyntheticTrace, assigned_requests, open_trace
from bloomwise.cli import main
from command_support import oracle_general_bytes
from real_traces import real_trace


def both_engines(requests, config, **kwargs):
    """(python result, compiled result), each from a fresh copy of ``requests``."""
    python = replay(list(requests), "none", config, engine="python", **kwargs)
    compiled = replay(list(requests), "none", config, engine="compiled", **kwargs)
    assert (python.engine, compiled.engine) == ("python", "compiled")
    return python, compiled


def assert_same_counters(python, compiled):
    """Every field of PolicyResult but the wall time and the engine's name, exactly (floats too)."""
    assert dataclasses.replace(compiled, seconds=0.0, engine="") == dataclasses.replace(python, seconds=0.0, engine="")


def requests_of(objects, sizes, methods=None):
    methods = methods or ["GET"] * len(objects)
    return [Request(float(i), "client", method, f"http://o/{obj}", size)
            for i, (obj, size, method) in enumerate(zip(objects, sizes, methods))]


@pytest.mark.parametrize("eviction", ["lru", "fifo"])
@pytest.mark.parametrize("num_proxies, cache_size", [(1, 64 << 10), (1, 2 << 20), (3, 256 << 10), (8, 1 << 20)])
def test_synthetic_every_counter_equal(eviction, num_proxies, cache_size):
    """20,000 synthetic requests (seed 5; documents larger than the smallest cache among them), an origin cost whose
    double sums are not exact (0.3), so the latency and cost must be summed in the same order."""
    trace = list(SyntheticTrace(20_000, num_proxies=num_proxies, num_documents=6_000, seed=5))
    assert max(r.size for r in trace) > 64 << 10
    config = SimulationConfig(num_proxies=num_proxies, cache_size=cache_size, eviction=eviction, origin_cost=0.3)
    python, compiled = both_engines(trace, config)
    assert_same_counters(python, compiled)
    assert python.local_hits > 100 and python.origin_fetches > 1000
    assert (python.false_misses > 0) == (num_proxies > 1)  # the oracle's false misses are compared too


@pytest.mark.parametrize("eviction", ["lru", "fifo"])
def test_edges_of_admission_and_eviction(eviction):
    """A 1,000-byte cache: filled exactly (500 + 500: nothing evicted), a document of exactly the cache size
    (stored, evicting everything), one a byte larger (refused, nothing evicted), empty documents, a re-request with
    another size (a hit counts the request's bytes), and records that are not GET (skipped, not replayed)."""
    sizes = {1: 500, 2: 500, 3: 1000, 4: 1001, 5: 400, 6: 600, 7: 0, 8: 0}
    objects = [3, 3, 1, 2, 1, 2, 4, 4, 1, 5, 6, 5, 6, 1, 7, 8, 7, 2, 5, 6, 8, 3, 1, 2]
    trace = requests_of(objects, [sizes[o] for o in objects])
    trace[5] = trace[5]._replace(size=999)  # object 2 asked again with another size: a hit of 999 bytes
    trace.insert(7, Request(7.5, "client", "POST", "http://o/4", 10))
    config = SimulationConfig(num_proxies=1, cache_size=1000, eviction=eviction, origin_cost=10.0)
    python, compiled = both_engines(trace, config)
    assert_same_counters(python, compiled)
    # worked out by hand (the same for both: no hit here depends on the order of the hits before it)
    assert (python.requests, python.skipped, python.local_hits, python.local_hit_bytes) == (24, 1, 7, 3999)


@pytest.mark.parametrize("eviction", ["lru", "fifo"])
def test_real_cloudphysics_slice_every_counter_equal(eviction):
    """The first 70,000 requests of the CloudPhysics trace (the slice tests/test_trace_fetch.py replays), one proxy
    and four (round-robin), 1 MiB and 8 MiB caches; progress is reported at the same counts."""
    path = real_trace("cloudphysics")
    for num_proxies in (1, 4):
        trace = list(assigned_requests(open_trace(path), "round-robin", num_proxies, limit=70_000))
        for cache_size in (1 << 20, 8 << 20):
            config = SimulationConfig(num_proxies=num_proxies, cache_size=cache_size, eviction=eviction)
            ticks = {"python": [], "compiled": []}
            results = [replay(list(trace), "none", config, engine=engine, progress=ticks[engine].append)
                       for engine in ("python", "compiled")]
            assert_same_counters(*results)
            assert ticks["python"] == ticks["compiled"] == [BLOCK_REQUESTS]
            assert results[0].requests == 70_000 and results[0].local_hits > 5000


def test_auto_picks_compiled_where_it_covers_the_policy():
    trace = list(SyntheticTrace(3000, num_proxies=2, num_documents=1000, seed=2))
    config = SimulationConfig(num_proxies=2, cache_size=1 << 20)
    results = simulate(trace, ["none", "icp", "summary", "paradox", "carp"], config)
    assert [r.engine for r in results] == ["compiled"] * 5
    assert [r.engine for r in simulate(trace, ["none"], config, engine="python")] == ["python"]
    with pytest.raises(ValueError, match=r"compiled engine cannot run this replay: cache size 9223372036854775808 is "
                                         r"beyond its limit of 2\*\*63 - 1 bytes \(engine 'auto' or 'python' can\)"):
        choose_engine("compiled", "carp", num_proxies=2, cache_size=2 ** 63, eviction="lru")
    with pytest.raises(ValueError, match="engine must be one of auto, compiled, python, got 'fast'"):
        simulate(trace, ["none"], config, engine="fast")
    # nodes to inspect afterwards: only the Python engine fills them
    assert choose_engine("auto", "none", num_proxies=2, cache_size=1 << 20, eviction="lru", inspecting=True) == \
        "python"


def test_bad_sizes_are_refused_naming_the_request():
    bad = requests_of([1, 2], [10, -5])
    with pytest.raises(ValueError, match=r"size -5 is not a whole number of bytes in \[0, 2\*\*63\)"):
        replay_independent(bad, num_proxies=1, cache_size=100, eviction="lru", origin_cost=1.0)
    huge = requests_of([1], [2 ** 64])
    with pytest.raises(ValueError, match=r"size 18446744073709551616 is not"):
        replay_independent(huge, num_proxies=1, cache_size=100, eviction="lru", origin_cost=1.0)
    caches = IndependentCaches(2, 100, True)
    with pytest.raises(ValueError, match=r"request 1: cache 2 is not in \[0, 2\)"):
        caches.replay(np.array([1, 2], np.uint64), np.array([1, 1], np.int64), np.array([0, 2], np.int32))
    assert caches.counters(0)["requests"] == 0  # checked before any request ran


def test_cli_engine_option(capsys):
    base = ["simulate", "--synthetic", "3000", "--proxies", "2", "--documents", "900", "--json"]
    assert main(base + ["--policy", "none", "--engine", "compiled"]) == 0
    compiled = capsys.readouterr().out
    assert main(base + ["--policy", "none", "--engine", "python"]) == 0
    python = capsys.readouterr().out
    a, b = json.loads(compiled)[0], json.loads(python)[0]
    assert (a.pop("engine"), b.pop("engine")) == ("compiled", "python")
    a.pop("seconds"), b.pop("seconds")
    assert a == b
    every = ["--policy", "none,icp,summary,paradox,carp"]
    assert main(base + every + ["--engine", "compiled"]) == 0
    compiled = json.loads(capsys.readouterr().out)
    assert main(base + every + ["--engine", "python"]) == 0
    python = json.loads(capsys.readouterr().out)
    for a, b in zip(compiled, python):
        assert (a.pop("engine"), b.pop("engine"), a.pop("seconds") >= 0, b.pop("seconds") >= 0) == \
            ("compiled", "python", True, True)
        assert a == b


@pytest.mark.parametrize("lru", [True, False])
def test_kernel_request_by_request_against_document_cache(lru):
    """4,000 requests one at a time: each hit or miss, and in the end the cached ids, their count and bytes, equal
    DocumentCache's (seed 11; sizes up to 1.5x the cache, so some are refused)."""
    rng = np.random.Generator(np.random.PCG64(11))
    capacity = 20_000
    objects = rng.zipf(1.3, 4000) % 700
    size_of = rng.integers(0, capacity * 3 // 2, 700)
    caches = IndependentCaches(1, capacity, lru)
    reference = DocumentCache(capacity, eviction="lru" if lru else "fifo")
    zero = np.zeros(1, np.int32)
    hits = 0
    for obj in objects.tolist():
        size = int(size_of[obj])
        before = caches.counters(0)["hits"]
        caches.replay(np.array([obj], np.uint64), np.array([size], np.int64), zero)
        hit = reference.get(obj) is not None
        if not hit:
            reference.put(obj, size, stored_at=0.0)
        hits += hit
        assert caches.counters(0)["hits"] - before == hit
    counters = caches.counters(0)
    assert counters["hits"] == hits > 200 and counters["refused"] > 100
    assert sorted(caches.keys_by_age(0)) == sorted(reference.keys())
    assert (counters["documents"], counters["used_bytes"]) == (reference.num_documents, reference.used_bytes)


@pytest.mark.parametrize("rule, num_proxies, limit", [("round-robin", 1, None), ("random", 3, 50_000),
                                                      ("round-robin", 4, 70_000)])
def test_oracle_general_arrays_every_counter_equal(rule, num_proxies, limit):
    """The CloudPhysics file read straight into arrays (the object number as the id) against the Python engine on
    the Request records of the same assignment: every counter equal, progress at the same counts."""
    trace = OracleGeneralTrace(real_trace("cloudphysics"), rule, num_proxies, seed=2, limit=limit)
    config = SimulationConfig(num_proxies=num_proxies, cache_size=1 << 20, eviction="lru")
    ticks = {"python": [], "compiled": []}
    results = [replay(trace, "none", config, engine=engine, progress=ticks[engine].append)
               for engine in ("python", "compiled")]
    assert_same_counters(*results)
    assert ticks["python"] == ticks["compiled"]
    assert results[0].requests == (limit or 113_872) and results[0].local_hits > 3000


def test_oracle_general_arrays_count_what_iteration_counts(tmp_path):
    """Malformed records among valid ones, and a truncated tail: the arrays hold exactly the valid records, and the
    reader's counts after reading arrays equal its counts after iteration."""
    path = tmp_path / "t.oracleGeneral.bin"
    index = np.arange(40_000)
    nexts = np.full(40_000, -1)
    nexts[[3, 20_000, 39_999]] = [2, -7, 2 ** 41]  # a next access before the record, < -1, too far
    path.write_bytes(oracle_general_bytes(index // 7, index % 1234, index % 5000, nexts) + b"\x01" * 10)
    iterated = OracleGeneralReader(path)
    requests = list(iterated)
    arrays = OracleGeneralReader(path)
    objects, sizes, times = (np.concatenate(parts) for parts in zip(*arrays.record_arrays()))
    assert [r.url for r in requests] == [str(o) for o in objects.tolist()]
    assert [r.size for r in requests] == sizes.tolist() and [r.timestamp for r in requests] == times.tolist()
    for name in ("requests", "lines", "malformed", "malformed_lines"):
        assert getattr(arrays, name) == getattr(iterated, name), name
    assert iterated.malformed == 4 and iterated.requests == 39_997
    # blocks of fewer than 16,384 requests (malformed records left out): the random draws must stay aligned
    for rule in ("random", "round-robin"):
        trace = OracleGeneralTrace(path, rule, 3, seed=9)
        config = SimulationConfig(num_proxies=3, cache_size=1 << 20, eviction="fifo")
        assert_same_counters(*(replay(trace, "none", config, engine=engine) for engine in ("python", "compiled")))


def test_cli_reads_oracle_general_files_as_arrays(tmp_path, capsys):
    """bloomwise simulate on an oracleGeneral file with a proxy assignment: the compiled engine reads its records
    as arrays, with the Python engine's numbers, and the malformed records are still reported."""
    path = tmp_path / "t.oracleGeneral.bin"
    index = np.arange(30_000)
    nexts = np.full(30_000, -1)
    nexts[17] = 3  # before the record: malformed
    path.write_bytes(oracle_general_bytes(np.zeros(30_000), index * 7 % 2_000, 100 + index % 900, nexts))
    outputs = {}
    for engine in ("compiled", "python"):
        argv = ["simulate", "--trace", str(path), "--assign", "random", "--proxies", "3", "--cache-size", "200KB",
                "--policy", "none", "--engine", engine, "--json"]
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert err == (f"bloomwise simulate: {path}: 1 malformed line(s) skipped (line 18: next access 3 is neither "
                       f"-1 nor in (18, 2**40] (after this record): not an oracleGeneral record)\n")
        [outputs[engine]] = json.loads(out)
        outputs[engine].pop("seconds")
        assert outputs[engine].pop("engine") == engine
    assert outputs["compiled"] == outputs["python"] and outputs["python"]["requests"] == 29_999
