"""The compiled replay of the cooperative policies (``icp``, ``summary``, ``paradox``, ``carp``: _native/replay.pyx
CooperativeCaches) against the Python engine, the reference: every field of PolicyResult equal (floats too; wall
time aside) on fixed seeds, synthetic and real traces, over proxy counts, cache sizes, update thresholds, re-sizing
on and off, bits and counters summaries, the wire on and off, LRU and FIFO, paradox's prior windows and estimators;
and a Hypothesis property on random small traces."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomwise.cache.fast_replay import BLOCK_REQUESTS, CsvTrace, OracleGeneralTrace, choose_engine
from bloomwise.cache.simulation import SimulationConfig, replay
from bloomwise.cache.traces import Request, SyntheticTrace, assigned_requests, open_trace
from real_traces import fetched_trace, real_trace


def both_engines(requests, policy, config, **kwargs):
    """(python result, compiled result), each from a fresh copy of ``requests``."""
    python = replay(list(requests), policy, config, engine="python", **kwargs)
    compiled = replay(list(requests), policy, config, engine="compiled", **kwargs)
    assert (python.engine, compiled.engine) == ("python", "compiled")
    return python, compiled


def assert_same_result(python, compiled):
    """Every field of PolicyResult but the wall time and the engine's name, exactly."""
    assert dataclasses.replace(compiled, seconds=0.0, engine="") == dataclasses.replace(python, seconds=0.0, engine="")


CASES = [  # (num_proxies, cache_size, config keywords): each runs under icp and summary, LRU and FIFO
    (2, 1 << 20, {"update_threshold": 0.1}),
    (4, 512 << 10, {"update_threshold": 0.05, "origin_cost": 3.3, "peer_cost": 0.7}),
    (4, 2 << 20, {"update_threshold": 0.1, "resize_tolerance": None, "bits_per_entry": 4}),
    (4, 1 << 20, {"update_threshold": 1e-9}),  # a publication after every new document
    (4, 1 << 20, {"update_threshold": 1.0, "resize_tolerance": 0.5}),
    (16, 1 << 20, {"origin_cost": 7.7, "seed": 7, "prior_window": 50}),
    (4, 1 << 20, {"update_threshold": 0.1, "summary_kind": "counters", "expected_entries": 40}),
    (4, 1 << 20, {"update_threshold": 0.05, "summary_kind": "bits", "prior_window": 3.5, "wire": True}),
    (4, 1 << 20, {"update_threshold": 0.05, "prior_estimator": "outcomes", "prior_window": 20}),
    (3, 1 << 20, {"update_threshold": 0.05, "prior_window": 1}),
]


@pytest.mark.parametrize("eviction", ["lru", "fifo"])
@pytest.mark.parametrize("num_proxies, cache_size, keywords", CASES)
def test_synthetic_every_field_equal(eviction, num_proxies, cache_size, keywords):
    """8,000 synthetic requests (seed 5, 4 KB mean size: the caches hold 100 to 500 documents), costs whose double
    sums are not exact, so latency and cost must be summed in the same order; the summaries are published, re-sized
    (or not), and make false hits and false misses."""
    trace = list(SyntheticTrace(8_000, num_proxies=num_proxies, num_documents=3_000, mean_size=4000, seed=5))
    config = SimulationConfig(num_proxies=num_proxies, cache_size=cache_size, eviction=eviction, **keywords)
    for policy in ("icp", "summary", "paradox", "carp"):
        python, compiled = both_engines(trace, policy, config)
        assert_same_result(python, compiled)
        assert python.remote_hits > 50 and python.local_hits > 50
        if policy in ("summary", "paradox"):  # the comparison covers summaries at work, stale ones included
            assert python.summary_messages > 0 and python.false_hits > 0 and python.peer_check_false_positives > 0
            if keywords.get("update_threshold", 0.01) >= 0.01:  # stale summaries
                assert python.false_misses > 0
            assert (python.summary_resizes > 0) == (keywords.get("resize_tolerance", 0.1) is not None)


def test_edges_non_ascii_urls_skipped_records_and_refused_documents():
    """URLs with non-ASCII characters (the filters hash UTF-8 bytes; ICP bytes count characters), records that are
    not GET (skipped), documents larger than the cache (refused), exactly the cache size (stored), empty ones."""
    urls = ["http://o/é", "http://o/日本", "http://o/a", "http://o/😀", "http://o/b"]
    sizes = [300, 1000, 1001, 0, 500]
    trace = []
    for i in range(400):
        j = (i * 7 + i // 3) % len(urls)
        method = "POST" if i % 37 == 0 else "GET"
        trace.append(Request(float(i), f"client{i % 5}", method, urls[j], sizes[j]))
    config = SimulationConfig(num_proxies=3, cache_size=1000, expected_entries=2, update_threshold=0.3)
    for policy in ("icp", "summary", "paradox", "carp"):
        python, compiled = both_engines(trace, policy, config)
        assert_same_result(python, compiled)
        assert python.skipped == 11 and python.remote_hits > 0 and python.summary_messages >= (policy == "summary")


@pytest.mark.parametrize("policy", ["icp", "summary", "paradox"])
def test_a_url_utf8_cannot_encode_is_the_same_error_in_both_engines(policy):
    """The policies whose caches' filters hash the key: the filters' ValueError in both engines (``none`` hashes no
    str and replays such a URL in both; ``carp`` raises a ValueError from its URL hash first, worded differently)."""
    trace = [Request(0.0, "c", "GET", "http://a/x", 600), Request(1.0, "d", "GET", "http://a/\ud800", 600)]
    config = SimulationConfig(num_proxies=2, cache_size=1 << 20)
    errors = []
    for engine in ("python", "compiled"):
        with pytest.raises(ValueError) as caught:
            replay(iter(trace), policy, config, engine=engine)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "lone surrogate" in errors[1]


@pytest.mark.parametrize("policy", ["icp", "summary", "paradox", "carp"])
def test_real_cloudphysics_slice_every_field_equal(policy):
    """The first 12,000 requests of the CloudPhysics trace, four proxies (random assignment, seed 3), LRU, with
    progress reported at the same counts by both engines."""
    path = real_trace("cloudphysics")
    trace = list(assigned_requests(open_trace(path), "random", 4, seed=3, limit=12_000))
    config = SimulationConfig(num_proxies=4, cache_size=4 << 20, mean_document_size=4096)
    ticks = {"python": [], "compiled": []}
    results = [replay(list(trace), policy, config, engine=engine, progress=ticks[engine].append)
               for engine in ("python", "compiled")]
    assert_same_result(*results)
    assert results[0].remote_hits > 500


@pytest.mark.parametrize("policy", ["summary", "paradox"])
def test_oracle_general_arrays_every_field_equal(policy):
    """The CloudPhysics oracleGeneral file read straight into arrays, the keys' bytes made from the object numbers
    (``"GET <object>"``, as the Request records of iteration have them), against the Python engine on those records:
    every field equal."""
    trace = OracleGeneralTrace(real_trace("cloudphysics"), "random", 4, seed=2, limit=12_000)
    config = SimulationConfig(num_proxies=4, cache_size=4 << 20, mean_document_size=4096, update_threshold=0.05)
    assert_same_result(*(replay(trace, policy, config, engine=engine) for engine in ("python", "compiled")))


@pytest.mark.parametrize("policy", ["summary", "paradox"])
def test_twitter_csv_slice_every_field_equal(policy):
    """The first 10,000 requests of the Twitter csv trace (CsvTrace: the compiled engine replays its records with
    their keys' bytes), eight proxies at random: every field equal."""
    trace = CsvTrace(fetched_trace("twitter-cluster52"), "random", 8, seed=1, limit=10_000)
    config = SimulationConfig(num_proxies=8, cache_size=256 << 10, mean_document_size=210, update_threshold=0.02)
    results = [replay(trace, policy, config, engine=engine) for engine in ("python", "compiled")]
    assert_same_result(*results)
    assert results[0].remote_hits > 500


def test_numbered_keys_written_as_decimal_text(tmp_path):
    """An oracleGeneral file whose object numbers span 0 to 2**64 - 1: the compiled engine writes each key
    ``"GET <number>"`` itself (the filters hash it; ICP bytes count its digits), as str(object) in the records the
    Python engine replays: every field equal under every cooperative policy."""
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(4))
    objects = np.array([0, 7, 10, 99, 12345, 2 ** 32, 2 ** 63, 2 ** 64 - 1, 10 ** 19], dtype=np.uint64)
    picks = rng.integers(0, len(objects), 3000)
    record = np.dtype([("time", "<u4"), ("object", "<u8"), ("size", "<u4"), ("next", "<i8")])
    array = np.zeros(len(picks), dtype=record)
    array["time"], array["object"], array["size"], array["next"] = np.arange(len(picks)), objects[picks], 100, -1
    path = tmp_path / "numbers.oracleGeneral.bin"
    path.write_bytes(array.tobytes())
    trace = OracleGeneralTrace(str(path), "random", 3, seed=5)
    config = SimulationConfig(num_proxies=3, cache_size=500, expected_entries=5, update_threshold=0.2)
    for policy in ("icp", "summary", "paradox", "carp"):
        results = [replay(trace, policy, config, engine=engine) for engine in ("python", "compiled")]
        assert_same_result(*results)
        assert results[0].remote_hits > 100 and results[0].query_bytes > 0


def test_progress_at_every_block():
    trace = list(SyntheticTrace(BLOCK_REQUESTS + 10, num_proxies=2, num_documents=3_000, seed=1))
    config = SimulationConfig(num_proxies=2, cache_size=1 << 20, update_threshold=0.1)
    ticks = {"python": [], "compiled": []}
    results = [replay(trace, "icp", config, engine=engine, progress=ticks[engine].append)
               for engine in ("python", "compiled")]
    assert_same_result(*results)
    assert ticks["python"] == ticks["compiled"] == [BLOCK_REQUESTS]


def test_auto_picks_compiled_for_the_policies_it_covers():
    for policy in ("none", "icp", "summary", "paradox", "carp"):
        assert choose_engine("auto", policy, num_proxies=4, cache_size=1 << 20, eviction="lru") == "compiled"
        assert choose_engine("auto", policy, num_proxies=4, cache_size=1 << 20, eviction="lru",
                             inspecting=True) == "python"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_random_small_traces(data):
    """Random traces of up to 300 requests over up to 12 objects of random sizes, 2 to 5 proxies, random cache
    sizes, thresholds, tolerances, kinds and evictions: every field equal."""
    num_proxies = data.draw(st.integers(2, 5))
    num_objects = data.draw(st.integers(1, 12))
    object_sizes = data.draw(st.lists(st.integers(0, 600), min_size=num_objects, max_size=num_objects))
    picks = data.draw(st.lists(st.tuples(st.integers(0, num_objects - 1), st.integers(0, 9)), max_size=300))
    trace = [Request(float(i), f"c{client}", "GET", f"http://x/{obj}", object_sizes[obj])
             for i, (obj, client) in enumerate(picks)]
    config = SimulationConfig(
        num_proxies=num_proxies, cache_size=data.draw(st.integers(1, 2000)),
        bits_per_entry=data.draw(st.integers(1, 12)), expected_entries=data.draw(st.integers(1, 20)),
        update_threshold=data.draw(st.sampled_from([1e-9, 0.01, 0.2, 1.0])),
        resize_tolerance=data.draw(st.sampled_from([None, 0.1, 0.5])),
        summary_kind=data.draw(st.sampled_from(["auto", "bits", "counters"])),
        eviction=data.draw(st.sampled_from(["lru", "fifo"])), seed=data.draw(st.integers(0, 2**32)),
        prior_window=data.draw(st.sampled_from([1, 2.5, 1000])),
        prior_estimator=data.draw(st.sampled_from(["mixture", "outcomes"])),
        origin_cost=data.draw(st.sampled_from([1.5, 10.0, 100.0])))
    for policy in ("icp", "summary", "paradox", "carp"):
        assert_same_result(*both_engines(trace, policy, config))
