"""ScalableBloomFilter: growth, the compound FPR against theory, persistence; BloomFilter's capacity warning."""
from __future__ import annotations

import dataclasses
import json
import math
import pickle
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from bloomwise import BloomFilter, CapacityWarning, FormatError, ScalableBloomFilter, _format, theory
from bloomwise.scalable import STAGE_SEED_STEP
from concurrency import add_beside_workers, batch_inserters
from stats import assert_rate_matches

KEYS = st.one_of(st.text(max_size=12), st.binary(max_size=12), st.integers(-(2**80), 2**80))


# ---- growth and the compound bound -----------------------------------------------------------------------------------
@pytest.mark.parametrize("stage_hashing", ["derived", "seeded"])
def test_stages_grow_geometrically_and_tighten(stage_hashing):
    f = ScalableBloomFilter(100, 0.01, growth=3, ratio=0.25, layout="classic", seed=9, stage_hashing=stage_hashing)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CapacityWarning)  # no stage ever goes past its capacity
        f.update(np.arange(5000))
    assert f.num_stages == 5  # 100 + 300 + 900 + 2700 = 4000 < 5000 <= 4000 + 8100
    for i, stage in enumerate(f.stages):
        assert stage.capacity == 100 * 3**i and stage.layout == "classic"
        assert stage.seed == ((9 + i * STAGE_SEED_STEP) % 2**64 if stage_hashing == "seeded" else 9)
        assert math.isclose(f.stage_fpr(i), 0.01 * 0.75 * 0.25**i)
        assert theory.false_positive_rate(stage.num_cells, stage.capacity, stage.num_hashes, layout="classic") \
            <= f.stage_fpr(i)
    assert f.fpr_bound() < f.fpr and math.isclose(f.fpr_bound(), 0.01 * (1 - 0.25**5))
    assert f.contains_many(np.arange(5000)).all()


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.tuples(st.booleans(), st.lists(KEYS, max_size=40)), max_size=12),
       layout=st.sampled_from(["classic", "partitioned", "blocked"]))
def test_no_false_negatives_while_growing(batches, layout):
    f = ScalableBloomFilter(8, 0.05, layout=layout)
    added = []
    for one_by_one, keys in batches:
        if one_by_one:
            for key in keys:
                f.add(key)
        else:
            f.update(iter(keys))
        added += keys
        assert all(key in f for key in added)
        assert f.contains_many(added).all() if added else True


def test_add_reports_new_keys_and_skips_present_ones():
    f = ScalableBloomFilter(10, 0.01)
    assert f.add("a") is True and f.add("a") is False
    f.update(["a", "b", "b"])
    assert sum(f._stage_keys) == 3  # "a" was present; the two "b"s of one batch both count (conservative)


@pytest.mark.parametrize("layout", ["blocked", "classic"])
def test_measured_fpr_matches_the_compound_theory(layout):
    """Exact binomial test (false-alarm probability 1e-6, two-sided) of 1 - prod_i (1 - FPR_i(n_i))."""
    f = ScalableBloomFilter(2000, 0.02, layout=layout, seed=3)
    f.update(np.arange(60_000))
    assert f.num_stages == 5
    miss = 1.0
    for stage, keys in zip(f.stages, f._stage_keys):
        miss *= 1.0 - theory.false_positive_rate(stage.num_cells, keys, stage.num_hashes, layout=layout)
    expected = 1.0 - miss
    assert expected <= f.fpr_bound() < 0.02
    queries = 300_000
    hits = int(f.contains_many(np.arange(10**12, 10**12 + queries, dtype=np.uint64)).sum())
    assert_rate_matches(hits, queries, expected, f"scalable {layout}, {f.num_stages} stages")
    assert abs(f.estimated_fpr() - expected) < 0.2 * expected
    assert abs(f.approx_count() - 60_000) < 0.03 * 60_000


# ---- the plain filter's warning --------------------------------------------------------------------------------------
def test_bloom_filter_past_capacity_warns_once_with_its_fpr():
    f = BloomFilter(1000, 0.01, layout="classic")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f.update(range(1000))
        assert not caught
        for key in range(1000, 3000):
            f.add(key)
        f.update(range(3000, 5000))
    assert len(caught) == 1 and issubclass(caught[0].category, CapacityWarning)
    assert "false-positive rate is now about" in str(caught[0].message)
    assert "ScalableBloomFilter" in str(caught[0].message)


# ---- persistence -----------------------------------------------------------------------------------------------------
def test_round_trips(tmp_path):
    f = ScalableBloomFilter(50, 0.01, growth=2, ratio=0.5, layout="partitioned", seed=11)
    f.update([f"key{i}" for i in range(500)])
    assert f.num_stages == 4
    for copy in (ScalableBloomFilter.from_bytes(f.to_bytes()), pickle.loads(pickle.dumps(f)), f.copy()):
        assert copy == f and copy.num_stages == 4 and copy.stages[2].capacity == 200
        assert all(f"key{i}" in copy for i in range(500))
        copy.update([f"more{i}" for i in range(1000)])  # it keeps growing from where it was
        assert copy.num_stages == 5 and copy != f
    f.save(tmp_path / "f.sbf")
    assert ScalableBloomFilter.load(tmp_path / "f.sbf") == f
    header, payload = _format.loads(f.to_bytes())
    assert header.structure == _format.Structure.SCALABLE and header.layout == _format.Layout.PARTITIONED
    assert header.meta["capacities"] == [50, 100, 200, 400] and header.num_keys == sum(f._stage_keys)
    offset = 0
    for stage in f.stages:  # each stage's bits start at a multiple of 64 bytes
        assert offset % 64 == 0 and bytes(payload[offset:offset + stage.nbytes]) == bytes(stage.payload_view())
        offset += -(-stage.nbytes // 64) * 64
    assert offset == header.payload_length
    f.clear()
    assert f.num_stages == 1 and "key1" not in f


def test_every_flipped_byte_and_every_truncation_is_detected():
    f = ScalableBloomFilter(4, 0.1, layout="classic")
    f.update(range(10))
    data = f.to_bytes()
    for i in range(len(data)):
        corrupted = bytearray(data)
        corrupted[i] ^= 0x5A
        with pytest.raises(FormatError):
            ScalableBloomFilter.from_bytes(bytes(corrupted))
    for length in range(0, len(data), 7):
        with pytest.raises(FormatError):
            ScalableBloomFilter.from_bytes(data[:length])


def test_well_checksummed_but_inconsistent_files_are_refused():
    f = ScalableBloomFilter(4, 0.1, layout="classic")
    f.update(range(10))
    header, payload = f._header(), f.payload_view()
    meta = dict(header.meta)
    for change in ({"capacities": meta["capacities"][:-1]}, {"num_bits": [1] * len(meta["num_bits"])},
                   {"growth": 0.5}, {"keys": [1.5] * len(meta["keys"])}, {"seeds": "x"},
                   {"num_bits": [2**47] * len(meta["num_bits"])},  # refused before anything is allocated
                   {"initial_capacity": 10**15, "num_bits": [2**47] * len(meta["num_bits"])}):
        bad = dataclasses.replace(header, meta={**meta, **change})
        with pytest.raises(FormatError):
            ScalableBloomFilter.from_bytes(_format.dumps(bad, payload))
    padded = bytearray(payload)
    padded[f.stages[0].nbytes] = 1  # inside the first stage's padding
    with pytest.raises(FormatError, match="padding"):
        ScalableBloomFilter.from_bytes(_format.dumps(header, bytes(padded)))
    with pytest.raises(FormatError, match="ScalableBloomFilter"):
        ScalableBloomFilter.from_bytes(BloomFilter.from_size(64, 1, layout="classic").to_bytes())


@pytest.mark.parametrize("kwargs,error,message", [
    ({"capacity": 0}, ValueError, "capacity must be at least 1"), ({"fpr": 1}, ValueError, "fpr"),
    ({"growth": 0.5}, ValueError, "growth"), ({"ratio": 1.0}, ValueError, "ratio"),
    ({"ratio": "half"}, TypeError, "ratio"), ({"layout": "nope"}, ValueError, "layout"),
])
def test_bad_parameters(kwargs, error, message):
    with pytest.raises(error, match=message):
        ScalableBloomFilter(**kwargs)


def test_docstring_examples():
    import doctest

    import bloomwise.scalable

    failures, _ = doctest.testmod(bloomwise.scalable, optionflags=doctest.ELLIPSIS)
    assert failures == 0


# ---- derived stage hashing: one hash per key ------------------------------------------------------------------------
M64 = 2**64 - 1


def splitmix64_output(state: int, number: int) -> int:
    """Reference: output ``number`` (1, 2, ...) of SplitMix64 started at ``state`` (Steele, Lea and Flood 2014)."""
    z = (state + number * 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


@pytest.mark.parametrize("scheme", ["xxh3", "xxh64"])
def test_stage_hash_is_splitmix64_of_the_one_key_hash(scheme):
    from bloomwise._native.hashes import key_hash
    from bloomwise._native.scalable import derived_stage_hash

    f = ScalableBloomFilter(4, 0.1, seed=77, hash_scheme=scheme)
    f.update(range(200))
    assert f.num_stages >= 5 and f.stage_hashing == "derived"
    for key in ("", "apple", b"\x00\xff", -5, 2**70, "h\u00e9llo"):
        h = key_hash(key, 77, _format.hash_scheme_id(scheme))
        for i in range(f.num_stages):
            expected = splitmix64_output(h, i + 1)
            assert f._stage_hash(key, i) == derived_stage_hash(h, i) == expected


def test_derived_stage_bits_are_the_layout_positions_of_the_stage_hash():
    """Classic layout: stage i of a key with stage hash h_i sets exactly the probes
    mulhi(h_i + j * (fmix64(h_i) | 1), m)."""
    from bloomwise._positions import classic_positions

    f = ScalableBloomFilter(3, 0.2, layout="classic", seed=5)
    f.update([f"k{i}" for i in range(20)])
    key = "one more"
    before = [np.unpackbits(np.frombuffer(bytes(s.payload_view()), np.uint8), bitorder="little") for s in f.stages]
    assert f.add(key)
    newest = f.num_stages - 1
    stage = f.stages[newest]
    bits = np.unpackbits(np.frombuffer(bytes(stage.payload_view()), np.uint8), bitorder="little")
    positions = classic_positions(np.array([f._stage_hash(key, newest)], dtype=np.uint64), stage.num_cells,
                                  stage.num_hashes)[0]
    changed = set(np.flatnonzero(bits != before[newest]).tolist())
    assert changed and changed <= set(positions.tolist()) and all(bits[p] for p in positions)


# Exact outcomes for fixed seeds: the bytes a derived filter saves (a change of hashing or positions fails here).
PINNED = {
    "blocked": "bba1691d08f89d9f5b0112e8c631f08d21c69bc5c802923a36b699db1c7f3eb4",
    "classic": "163c12a4861e999e38f96238899e54d206e6a1fdc60677fe551a1796d1fd64b7",
    "partitioned": "cc7c6714d5ab89228d7c1e4d99232e926656b8fdd11877f9d8e60acfffe9d82d",
}


@pytest.mark.parametrize("layout", sorted(PINNED))
def test_derived_files_are_pinned(layout):
    import hashlib

    f = ScalableBloomFilter(20, 0.05, layout=layout, seed=2024)
    f.update([f"user-{i}" for i in range(150)] + list(range(100)) + [b"\x01" * i for i in range(30)])
    assert f.num_stages == 4
    assert hashlib.sha256(f.to_bytes()).hexdigest() == PINNED[layout]


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.tuples(st.sampled_from(["add", "update", "numpy"]),
                                  st.lists(st.integers(0, 2**64 - 1), max_size=60)), max_size=10),
       probes=st.lists(KEYS, max_size=30), layout=st.sampled_from(["classic", "partitioned", "blocked"]),
       capacity=st.integers(1, 3), growth=st.sampled_from([1, 1.5, 2]),
       stage_hashing=st.sampled_from(["derived", "seeded"]))
def test_no_false_negatives_over_many_stages_and_batch_equals_single(batches, probes, layout, capacity, growth,
                                                                    stage_hashing):
    f = ScalableBloomFilter(capacity, 0.2, growth=growth, layout=layout, stage_hashing=stage_hashing)
    added = []
    for how, keys in batches:
        if how == "add":
            for key in keys:
                f.add(key)
        elif how == "update":
            f.update(keys)
        else:
            f.update(np.array(keys, dtype=np.uint64))
        added += keys
    assert all(key in f for key in added)
    if added:
        assert f.contains_many(added).all() and f.contains_many(np.array(added, dtype=np.uint64)).all()
    queries = probes + added[:20]
    assert f.contains_many(queries).tolist() == [key in f for key in queries]
    assert sum(f.stage_keys) <= len(added) and f.num_keys == len(added)
    for i, stage in enumerate(f.stages):  # a stage answers alone as the filter asks it
        assert stage.contains_many(queries).tolist() == [key in stage for key in queries]
        assert f.stage_keys[i] <= stage.capacity


def test_the_stages_of_a_key_and_the_filter_agree():
    f = ScalableBloomFilter(10, 0.05)
    f.update(range(500))
    queries = list(range(1000))
    assert [any(k in s for s in f.stages) for k in queries] == [k in f for k in queries]
    assert f.contains_many(queries).tolist() == [k in f for k in queries]
    grid = np.arange(1000, dtype=np.uint64).reshape(20, 50)
    assert f.contains_many(grid).shape == (20, 50) and f.contains_many(grid).reshape(-1).tolist()[:500] == [True] * 500


@pytest.mark.parametrize("layout", ["blocked", "classic", "partitioned"])
def test_single_keys_reach_every_stage_of_a_filter_with_many_stages(layout):
    """One key per stage, 40 stages: the single-key test requests each stage's block two stages ahead (scalable.h),
    and every stage must be tested, the oldest too."""
    f = ScalableBloomFilter(1, 0.2, growth=1, layout=layout)
    f.update(range(40))
    assert f.num_stages == 40
    assert [k in f for k in range(40)] == [True] * 40
    assert not any(f.add(k) for k in range(40)) and f.num_stages == 40


@pytest.mark.parametrize("layout", ["blocked", "classic", "partitioned"])
def test_batches_and_single_keys_build_the_same_filter(layout):
    """add() and update() of one key set the same bits; a batch as a list of ints, numpy uint64 or int64 is the
    same keys; the SIMD and the scalar kernels set the same bits."""
    from bloomwise._native import bloom as native_bloom, scalable as native_scalable

    keys = list(range(0, 6000, 3))
    one, single = (ScalableBloomFilter(100, 0.001, layout=layout, seed=3) for _ in range(2))
    assert native_scalable.kernels() in ("avx512", "avx2", "scalar")
    for key in keys:
        one.add(key)
        single.update([key])
    assert one == single and one.to_bytes() == single.to_bytes() and one.num_stages >= 4
    built = []
    for batch in [keys, np.array(keys, dtype=np.uint64), np.array(keys, dtype=np.int64)]:
        f = ScalableBloomFilter(100, 0.001, layout=layout, seed=3)
        f.update(batch)
        built.append(f)
    probes = list(range(1, 9000, 2))
    expected = built[0].contains_many(probes).tolist()  # the default kernels' answers
    assert expected == [k in built[0] for k in probes] and 0 < sum(expected) < len(probes)
    tiers = []
    for simd, avx512 in ((False, False), (True, False)):  # scalar, then AVX2 only (the default is AVX-512 here)
        native_bloom._use_simd(simd)
        native_scalable._use_simd(simd, avx512)
        try:
            batch = ScalableBloomFilter(100, 0.001, layout=layout, seed=3)
            batch.update(np.array(keys, dtype=np.uint64))
            assert batch.contains_many(keys).all() and all(k in batch for k in keys)
            single_keys = ScalableBloomFilter(100, 0.001, layout=layout, seed=3)
            for key in keys:
                single_keys.add(key)
            assert single_keys.to_bytes() == one.to_bytes()
            assert batch.contains_many(probes).tolist() == built[0].contains_many(probes).tolist() == expected
            assert [k in built[0] for k in probes] == expected
            tiers.append(batch)
        finally:
            native_bloom._use_simd(True)
            native_scalable._use_simd(True)
    for f in built[1:] + tiers:
        assert f == built[0] and f.to_bytes() == built[0].to_bytes()
    assert built[0].num_stages == one.num_stages and built[0].contains_many(keys).all()


@pytest.mark.parametrize("layout", ["blocked", "classic"])
@pytest.mark.parametrize("threads", [2, 3])
def test_threaded_batches_answer_and_build_as_one_thread(layout, threads, monkeypatch):
    """threads=N splits the stage tests of update and contains_many among N threads (chunks in turn): the answers,
    the bits, the stages and the key counts are those of one thread, for numpy and str batches (several batches, so
    that later ones meet keys of earlier stages; some keys repeated)."""
    calls = []
    run = ScalableBloomFilter._test_threaded

    def spy(self, hashes, result, nthreads):
        calls.append(nthreads)
        return run(self, hashes, result, nthreads)

    monkeypatch.setattr(ScalableBloomFilter, "_test_threaded", spy)
    batches = [np.arange(i * 7000, i * 7000 + 9000, dtype=np.uint64) for i in range(4)]  # overlapping
    words = [[f"key-{k}" for k in range(i * 5000, i * 5000 + 6000)] for i in range(3)]
    serial, threaded = (ScalableBloomFilter(2000, 0.01, layout=layout, seed=5) for _ in range(2))
    for batch in batches + words:
        serial.update(batch)
        threaded.update(batch, threads=threads)
    assert threaded.num_stages == serial.num_stages >= 4 and threaded.stage_keys == serial.stage_keys
    assert threaded == serial and threaded.to_bytes() == serial.to_bytes()
    assert len(calls) == len(batches) + len(words) and set(calls) == {threads}
    probes = np.arange(0, 60000, 3, dtype=np.uint64)
    strings = [f"key-{k}" for k in range(0, 30000, 2)] + [f"other-{k}" for k in range(8000)]
    for keys in (probes, strings):
        expected = serial.contains_many(keys)
        assert 0 < expected.sum() < len(keys)
        assert np.array_equal(threaded.contains_many(keys, threads=threads), expected)
    assert len(calls) == len(batches) + len(words) + 2
    calls.clear()
    few = probes[:4000]
    assert np.array_equal(threaded.contains_many(few, threads=threads), serial.contains_many(few))
    assert calls == []  # a batch under 4 chunks (4,096 keys) stays in one thread


def test_single_key_adds_during_threaded_batches_lose_no_key():
    """A single-key add takes no lock when none is held (it holds the GIL, and batch writers take the lock only with
    the GIL): while another thread's update holds it, add waits. Two threads insert batches of new keys while this
    thread adds others one by one, all into the newest stages of small filters (fpr 0.5: few blocks); no key may be
    lost (a block written back from a stale copy would erase bits: a false negative). The GIL changes hands every
    10 us, so that the adds meet the batches' inserts often: adds that ignore the lock lost keys in 10 scenarios out
    of 10 on a 2-CPU machine."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for scenario in range(5):
            shared = ScalableBloomFilter(4000, 0.5, seed=scenario)
            singles = [f"single-{scenario}-{i}" for i in range(8000)]
            workers, inserted = batch_inserters(shared.update, batches=30, size=4000)
            add_beside_workers(shared.add, singles, workers)
            assert shared.contains_many(singles).all(), f"scenario {scenario}: a key added one by one was lost"
            if inserted:
                assert shared.contains_many(np.concatenate(inserted)).all(), f"scenario {scenario}: a batch key lost"
    finally:
        sys.setswitchinterval(previous)


@pytest.mark.parametrize("k", range(1, 17))
def test_every_kernel_answers_alike_for_every_k(k):
    """Stages of k = 1..16 probes (a file rewritten to say so): `in` (AVX2 where the CPU has it), contains_many
    (AVX-512 where it has it) and the scalar kernels give the same answers."""
    from bloomwise._native import bloom as native_bloom, scalable as native_scalable

    f = ScalableBloomFilter(40, 0.2, layout="blocked", seed=8)
    f.update(range(1500))
    header, payload = f._header(), f.payload_view()
    meta = {**header.meta, "num_hashes": [k] * f.num_stages}
    g = ScalableBloomFilter.from_bytes(_format.dumps(dataclasses.replace(header, num_hashes=k, meta=meta), payload))
    probes = list(range(3000))
    answers = [g.contains_many(probes).tolist(), [p in g for p in probes]]
    for simd, avx512 in ((False, False), (True, False)):
        native_bloom._use_simd(simd)
        native_scalable._use_simd(simd, avx512)
        try:
            answers += [g.contains_many(probes).tolist(), [p in g for p in probes]]
        finally:
            native_bloom._use_simd(True)
            native_scalable._use_simd(True)
    assert all(a == answers[0] for a in answers) and 0 < sum(answers[0]) < len(probes)
    assert all(stage.num_hashes == k for stage in g.stages) and g.num_stages >= 5


def test_update_tests_the_whole_batch_before_it_inserts():
    f = ScalableBloomFilter(4, 0.01)
    f.update(["a", "b", "a", "c", "d", "a"])  # the repeats are new when the batch starts: all six go in
    assert f.stage_keys == (4, 2) and f.num_keys == 6
    f.update(["a", "e"])
    assert f.stage_keys == (4, 3) and f.num_keys == 8
    assert f.add("e") is False and f.num_keys == 9


def test_fast_paths_allocate_nothing_per_key():
    """`in`, add() of present keys and contains_many() allocate no Python objects per key; update() allocates its
    batch's hashes and flags (9 bytes a key), nothing per key on the Python heap."""
    import tracemalloc

    keys = [f"key-{i}" for i in range(50_000)]
    f = ScalableBloomFilter(1000, 0.01)
    f.update(keys)
    assert f.num_stages >= 5
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for key in keys:
            key in f
            f.add(key)
        assert tracemalloc.get_traced_memory()[1] - start < 4096
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        f.contains_many(keys)
        assert tracemalloc.get_traced_memory()[1] - start < 2 * len(keys) + 4096  # the result (1 byte a key)
        g = ScalableBloomFilter(10**6, 0.01)
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        g.update(keys)
        assert tracemalloc.get_traced_memory()[1] - start < 10 * len(keys) + 4096
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("layout,scheme", [("blocked", "xxh3"), ("classic", "xxh64"), ("partitioned", "xxh3")])
def test_derived_round_trips_with_the_new_scheme_ids(tmp_path, layout, scheme):
    f = ScalableBloomFilter(30, 0.02, layout=layout, seed=99, hash_scheme=scheme)
    f.update([f"key{i}" for i in range(400)])
    header, _ = _format.loads(f.to_bytes())
    expected = {"xxh3": _format.HashScheme.XXH3_STAGES_V1, "xxh64": _format.HashScheme.XXH64_STAGES_V1}[scheme]
    assert header.hash_scheme == expected and header.meta["seeds"] == [99] * f.num_stages
    f.save(tmp_path / "f.sbf")
    probes = [f"key{i}" for i in range(800)]
    for copy in (ScalableBloomFilter.load(tmp_path / "f.sbf"), ScalableBloomFilter.from_bytes(f.to_bytes()),
                 pickle.loads(pickle.dumps(f)), f.copy(), bloomwise_load(tmp_path / "f.sbf")):
        assert copy == f and copy.stage_hashing == "derived" and copy.hash_scheme == scheme
        assert copy.stage_keys == f.stage_keys and copy.num_keys == f.num_keys
        assert copy.contains_many(probes).tolist() == f.contains_many(probes).tolist()
        assert [k in copy for k in probes] == [k in f for k in probes]
        copy.update([f"more{i}" for i in range(2000)])  # it keeps growing, still derived
        assert copy.stage_hashing == "derived" and all(f"more{i}" in copy for i in range(2000))
        assert all(stage.seed == 99 for stage in copy.stages)


def bloomwise_load(path):
    import bloomwise

    return bloomwise.load(path)


def test_derived_and_seeded_filters_do_not_combine():
    a = ScalableBloomFilter(10, 0.01, stage_hashing="derived")
    b = ScalableBloomFilter(10, 0.01, stage_hashing="seeded")
    assert not a.is_compatible(b) and a != b
    with pytest.raises(ValueError, match="stage_hashing: 'derived' vs 'seeded'"):
        a | b
    with pytest.raises(ValueError, match="stage_hashing"):
        a.stages[0] | BloomFilter(10, 0.01)


def test_derived_union_holds_both_filters_keys():
    a, b = ScalableBloomFilter(10, 0.01, seed=4), ScalableBloomFilter(10, 0.01, seed=4)
    a.update(range(100))
    b.update(range(100, 500))
    u = a | b
    assert u.num_stages == b.num_stages and u.contains_many(range(500)).all() and all(k in u for k in range(500))
    assert u.stage_keys == tuple(x + y for x, y in zip(a.stage_keys + (0,) * 9, b.stage_keys))
    u.update(range(500, 3000))
    assert all(k in u for k in range(3000))


# ---- files written with per-stage seeds (bloomwise 0.2) --------------------------------------------------------------
DATA = Path(__file__).parent / "data"
GOLDEN = json.loads((DATA / "golden-scalable.json").read_text(encoding="utf-8"))["entries"]


def _decode(text: str):
    return {"s:": str, "i:": int, "b:": bytes.fromhex}[text[:2]](text[2:])


@pytest.mark.parametrize("entry", GOLDEN, ids=[e["file"] for e in GOLDEN])
def test_golden_scalable_files_answer_as_recorded(entry):
    import hashlib

    path = DATA / entry["file"]
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], "golden files are never regenerated"
    recipe = entry["recipe"]
    keys = [_decode(k) for k in entry["keys"]]
    absent = [_decode(k) for k in entry["absent"]]
    expected = [c == "1" for c in entry["false_positives"]]
    for f in (ScalableBloomFilter.load(path), ScalableBloomFilter.from_bytes(data), bloomwise_load(path)):
        assert f.stage_hashing == "seeded" and f.hash_scheme == recipe["hash_scheme"] and f.seed == recipe["seed"]
        assert (f.num_stages, list(f.stage_keys), f.num_keys, f.num_cells) == (
            entry["num_stages"], entry["stage_keys"], entry["num_keys"], entry["num_cells"])
        assert all(k in f for k in keys) and f.contains_many(keys).all()
        assert [k in f for k in absent] == expected
        assert f.contains_many(absent).tolist() == expected
        assert f.to_bytes() == data  # saved again, byte for byte the same file
    # Rebuilt with stage_hashing="seeded", today's code writes the same file.
    options = {k: v for k, v in recipe.items() if k != "insert"}
    rebuilt = ScalableBloomFilter(**options, stage_hashing="seeded")
    if recipe["insert"] == "add":
        for key in keys:
            rebuilt.add(key)
    else:
        rebuilt.update(keys)
    assert rebuilt.to_bytes() == data


def test_a_seeded_file_keeps_growing_with_seeded_stages():
    path = DATA / GOLDEN[0]["file"]
    f = ScalableBloomFilter.load(path)
    stages = f.num_stages
    f.update([f"new-{i}" for i in range(2000)])
    assert f.num_stages > stages and f.stage_hashing == "seeded"
    assert [s.seed for s in f.stages] == [(f.seed + i * STAGE_SEED_STEP) % 2**64 for i in range(f.num_stages)]
    assert all(f"new-{i}" in f for i in range(2000)) and f.contains_many([f"new-{i}" for i in range(2000)]).all()
    assert ScalableBloomFilter.from_bytes(f.to_bytes()) == f


# ---- bad input -------------------------------------------------------------------------------------------------------
def test_bad_stage_hashing_is_refused():
    with pytest.raises(ValueError, match=r"stage_hashing must be one of 'derived', 'seeded', got 'fast'"):
        ScalableBloomFilter(10, stage_hashing="fast")


def test_files_with_inconsistent_stage_hashing_are_refused():
    f = ScalableBloomFilter(4, 0.1)
    f.update(range(20))
    header, payload = f._header(), f.payload_view()
    bad_seeds = dataclasses.replace(header, meta={**header.meta, "seeds": [1] * f.num_stages})
    with pytest.raises(FormatError, match="with derived stage hashing every stage's seed is the filter's"):
        ScalableBloomFilter.from_bytes(_format.dumps(bad_seeds, payload))
    custom = dataclasses.replace(header, hash_scheme=_format.HashScheme.CUSTOM)
    with pytest.raises(FormatError, match="scalable filter needs hash scheme XXH3_STAGES_V1.*the file says CUSTOM"):
        ScalableBloomFilter.from_bytes(_format.dumps(custom, payload))
    plain = BloomFilter(100, 0.01)
    header, payload = _format.loads(plain.to_bytes())
    staged = dataclasses.replace(header, hash_scheme=_format.HashScheme.XXH3_STAGES_V1)
    with pytest.raises(FormatError, match="the file says XXH3_STAGES_V1"):  # a stage scheme is for scalable filters
        BloomFilter.from_bytes(_format.dumps(staged, bytes(payload)))


def test_a_derived_stage_answers_only_through_its_filter():
    f = ScalableBloomFilter(10, 0.01)
    f.update(range(50))
    stage = f.stages[1]
    assert 15 in stage and stage.contains_many([15]).tolist() == [True]
    for call in (lambda: stage.add(1), lambda: stage.update([1]), lambda: stage.to_bytes(),
                 lambda: pickle.dumps(stage), lambda: stage.bits(1)):
        with pytest.raises(TypeError, match="ScalableBloomFilter"):
            call()
    loose = stage.copy()
    with pytest.raises(TypeError, match="copied out of, or outlived, its filter"):
        15 in loose
    f.clear()
    with pytest.raises(TypeError, match="outlived"):
        15 in stage


@pytest.mark.parametrize("stage_hashing", ["derived", "seeded"])
@pytest.mark.parametrize("call,error,message", [
    (lambda f: f.update("abc"), TypeError, "expected an iterable of keys, got a single str"),
    (lambda f: f.contains_many(b"abc"), TypeError, "got a single bytes"),
    (lambda f: f.update(5), TypeError, "expected an iterable of keys"),
    (lambda f: f.contains_many(np.zeros(3)), TypeError, "dtype float64 are not keys"),
    (lambda f: f.add(1.5), TypeError, "a float"),
    (lambda f: 1.5 in f, TypeError, "a float"),
    (lambda f: f.update([1, None]), TypeError, "keys must be str, bytes"),
    (lambda f: f.update([1], threads=0), ValueError, "threads must be a positive int"),
    (lambda f: f.contains_many([1], threads="2"), ValueError, "threads must be a positive int"),
])
def test_bad_keys_are_refused_and_change_nothing(stage_hashing, call, error, message):
    f = ScalableBloomFilter(10, 0.01, stage_hashing=stage_hashing)
    f.update(range(30))
    before = f.to_bytes()
    with pytest.raises(error, match=message):
        call(f)
    assert f.to_bytes() == before


def test_a_core_without_stages_raises_instead_of_reading_nothing():
    f = ScalableBloomFilter(10, 0.01)
    f._detach_stages()  # what clear() and loading do for a moment
    for call in (lambda: 1 in f, lambda: f.add(1), lambda: f.update([1]), lambda: f.contains_many([1])):
        with pytest.raises(RuntimeError, match="the filter has no stage"):
            call()
    f.clear()
    assert f.add(1) and 1 in f and f.num_stages == 1
