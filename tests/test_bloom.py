"""BloomFilter: keys and hashing, no false negatives, the layouts' FPR against theory, algebra, persistence."""
from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import pickle
import threading

import numpy as np
import pytest
import xxhash
from hypothesis import given, strategies as st

from bloomwise import BloomFilter, CapacityWarning, FormatError, theory
from bloomwise._native import bloom as bloom_native
from bloomwise._native.bloom import hash_many
from bloomwise._native.hashes import key_hash, xxh3, xxh64
from bloomwise.reproduce.text_checks import bit_string
from concurrency import add_beside_workers
from stats import assert_rate_matches

LAYOUTS = ("classic", "partitioned", "blocked")
INT_DOMAIN, NEG_INT_DOMAIN, BIG_INT_DOMAIN = 0x3436752D746E6921, 0x3436692D746E6921, 0x6769622D746E6921
#: hash scheme id -> the reference implementation of its byte hash (docs/architecture.md)
REFERENCE = {1: xxhash.xxh64_intdigest, 2: xxhash.xxh3_64_intdigest}


def small(layout, seed=0):
    return BloomFilter.from_size(512 * 64, 7, layout=layout, seed=seed)


# ---- hashing --------------------------------------------------------------------------------------------------
@given(st.binary(max_size=200), st.integers(0, 2**64 - 1))
def test_xxh64_is_bit_exact_with_the_reference(data, seed):
    assert xxh64(data, seed) == xxhash.xxh64_intdigest(data, seed)


@given(st.binary(max_size=600), st.integers(0, 2**64 - 1))
def test_xxh3_is_bit_exact_with_the_reference(data, seed):
    assert xxh3(data, seed) == xxhash.xxh3_64_intdigest(data, seed)


@pytest.mark.parametrize("seed", [0, 1, 0x9E3779B97F4A7C15, 2**64 - 1])
def test_xxh3_every_length_and_branch(seed):
    """Every length to 2,100 bytes: the 0, 1-3, 4-8, 9-16, 17-128, 129-240 cases and long inputs over two blocks."""
    data = bytes((i * 131 + 7) % 251 for i in range(2100))
    assert all(xxh3(data[:n], seed) == xxhash.xxh3_64_intdigest(data[:n], seed) for n in range(2101))


@pytest.mark.parametrize("scheme", [1, 2])
@given(text=st.text(max_size=50), seed=st.integers(0, 2**64 - 1))
def test_str_keys_hash_as_their_utf8_bytes(scheme, text, seed):
    assert (key_hash(text, seed, scheme) == key_hash(text.encode(), seed, scheme)
            == REFERENCE[scheme](text.encode(), seed))


@pytest.mark.parametrize("scheme", [1, 2])
@given(value=st.integers(-(2**200), 2**200), seed=st.integers(0, 2**64 - 1))
def test_integers_are_their_own_domain(scheme, value, seed):
    reference = REFERENCE[scheme]
    if 0 <= value < 2**64:
        expected = reference(value.to_bytes(8, "little"), seed ^ INT_DOMAIN)
    elif -(2**63) <= value < 0:
        expected = reference(value.to_bytes(8, "little", signed=True), seed ^ NEG_INT_DOMAIN)
    else:
        data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
        expected = reference(data, seed ^ BIG_INT_DOMAIN)
    assert key_hash(value, seed, scheme) == expected
    assert key_hash(value, seed, scheme) != key_hash(str(value), seed, scheme)


def test_unknown_hash_schemes_are_refused():
    with pytest.raises(ValueError, match="hash_scheme must be one of 'xxh3', 'xxh64', got 'md5'"):
        BloomFilter(100, hash_scheme="md5")
    with pytest.raises(ValueError, match="unknown hash scheme id 7"):
        key_hash("a", 0, 7)


def test_int_str_and_bytes_never_share_an_encoding():
    f = small("classic")
    f.add(5)
    assert "5" not in f and b"\x05\x00\x00\x00\x00\x00\x00\x00" not in f and b"\x05" not in f
    assert 5 in f and np.uint64(5) in f and np.int8(5) in f and True not in f


@pytest.mark.parametrize("dtype", ["u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", ">i8", "<u4"])
def test_numpy_integers_set_the_same_bits_as_python_ints(dtype):
    values = np.array([0, 1, 2, 7, 100, -1, -128, 127], dtype=np.int64)
    info = np.iinfo(np.dtype(dtype))
    values = values[(values >= info.min) & (values <= info.max)].astype(dtype)
    one_by_one, batch = small("blocked"), small("blocked")
    for v in values.tolist():
        one_by_one.add(v)
    batch.update(values)
    assert batch == one_by_one
    assert batch.contains_many(values).all()


def test_numpy_string_arrays_hash_like_their_elements():
    words = ["", "a", "héllo", "naïve ☃", "x" * 40, "tail\x00mid"]
    for array in (np.array(words), np.array([w.encode() for w in words], dtype="S60")):
        singles, batch = small("classic"), small("classic")
        for element in array.tolist():
            singles.add(element)
        batch.update(array)
        assert batch == singles
        assert all(element in batch for element in array.tolist())


def test_object_arrays_lists_iterators_and_numpy_agree():
    keys = [f"key{i}" for i in range(3000)]
    filters = [small("partitioned") for _ in range(5)]
    for key in keys:
        filters[0].add(key)
    filters[1].update(keys)
    filters[2].update(iter(keys))
    filters[3].update(np.array(keys, dtype=object))
    filters[4].update(np.array(keys))
    assert all(f == filters[0] for f in filters[1:])


# ---- no false negatives -----------------------------------------------------------------------------------------
KEYS = st.one_of(st.text(max_size=30), st.binary(max_size=30), st.integers(-(2**80), 2**80))


@pytest.mark.parametrize("layout", LAYOUTS)
@given(keys=st.lists(KEYS, max_size=200), seed=st.integers(0, 2**64 - 1))
def test_no_false_negatives(layout, keys, seed):
    f = BloomFilter.from_size(2048, 5, layout=layout, seed=seed)
    f.update(keys)
    assert all(key in f for key in keys)
    assert f.contains_many(keys).all()


@pytest.mark.parametrize("layout", LAYOUTS)
@given(st.lists(st.tuples(st.sampled_from(["add", "update", "union", "copy"]), st.lists(KEYS, max_size=8)),
                max_size=30))
def test_no_false_negatives_after_mixed_operations(layout, operations):
    f, added = small(layout), []
    for operation, keys in operations:
        if operation == "add":
            for key in keys:
                f.add(key)
        elif operation == "update":
            f.update(keys)
        elif operation == "union":
            other = small(layout)
            other.update(keys)
            f |= other
        else:
            f = f.copy()
            f.update(keys)
        added += keys
        assert all(key in f for key in added)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_add_reports_whether_the_key_was_new(layout):
    f = small(layout)
    assert f.add("a") is True
    assert f.add("a") is False
    assert f.add(b"a") is False  # the same key


# ---- all input paths set identical bits ---------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_single_list_numpy_and_threaded_paths_are_bit_identical(layout):
    values = np.random.default_rng(1).integers(0, 2**63, size=50_000, dtype=np.uint64)
    reference = BloomFilter(50_000, 0.01, layout=layout, seed=9)
    for v in values[:5000].tolist():
        reference.add(v)
    reference.update(values[5000:].tolist())
    for how in ("numpy", "threads2", "threads3", "list_threads"):
        f = BloomFilter(50_000, 0.01, layout=layout, seed=9)
        if how == "numpy":
            f.update(values)
        elif how == "list_threads":
            f.update(values.tolist(), threads=2)
        else:
            f.update(values, threads=int(how[-1]))
        assert f == reference, how
        assert f.contains_many(values, threads=2).all()


@pytest.fixture
def scalar_kernels():
    """Run a block of code with the blocked layout's AVX2 batch kernels switched off."""
    @contextlib.contextmanager
    def switch():
        previous = bloom_native._use_simd(False)
        try:
            yield
        finally:
            bloom_native._use_simd(previous)
    return switch


@pytest.mark.parametrize("num_bits", [512 * 301, 512 * 40_000])  # in cache, and beyond it (prefetching)
def test_blocked_batch_kernels_match_the_single_key_path_for_every_k(num_bits, scalar_kernels):
    """The AVX2 kernels (where the CPU has AVX2) and the scalar ones set and test exactly the same bits, in
    batches and one key at a time (add, in, and the answers add gives)."""
    rng = np.random.default_rng(num_bits)
    values = rng.integers(0, 2**64, size=3000, dtype=np.uint64)
    values[1500:1600] = values[:100]  # repeats: add answers False
    absent = rng.integers(0, 2**64, size=3000, dtype=np.uint64)
    for k in range(1, 17):
        single = BloomFilter.from_size(num_bits, k, layout="blocked", seed=k)
        answers = [single.add(v) for v in values.tolist()]
        expected = np.array([v in single for v in absent.tolist()])
        vector = BloomFilter.from_size(num_bits, k, layout="blocked", seed=k)
        vector.update(values)
        with scalar_kernels():
            scalar = BloomFilter.from_size(num_bits, k, layout="blocked", seed=k)
            scalar.update(values)
            assert (scalar.contains_many(absent) == expected).all(), k
            assert scalar.contains_many(values).all()
            scalar_single = BloomFilter.from_size(num_bits, k, layout="blocked", seed=k)
            assert [scalar_single.add(v) for v in values.tolist()] == answers, k
            assert [v in scalar_single for v in absent.tolist()] == expected.tolist(), k
        assert vector == single == scalar == scalar_single, k
        assert (vector.contains_many(absent) == expected).all(), k
        assert vector.contains_many(values).all()


@pytest.mark.parametrize("nthreads", [2, 3, 5])
@pytest.mark.parametrize("num_bits", [512 * 3, 512 * 70_001])  # fewer blocks than threads; beyond the caches
@pytest.mark.parametrize("simd", [True, False])
def test_threaded_blocked_insert_sets_the_serial_bits_and_counts(nthreads, num_bits, simd, scalar_kernels):
    """Threaded blocked inserts (each thread owns a range of blocks) set the bits of one thread and count the new
    keys exactly, for numpy integers (hashed by every thread), numpy 'S' and 'U' strings (hashed first, in
    parallel) and Python objects (hashed first), repeats, negative numbers and a partial last chunk included;
    with the AVX-512 selection of a thread's keys and with the scalar one."""
    values = np.random.default_rng(nthreads).integers(-5_000, 5_000, size=30_001)  # repeats
    batches = (values, values.astype(np.uint64), values.astype("S"), values.astype("U"), values.tolist())
    with contextlib.ExitStack() as stack:
        if not simd:
            stack.enter_context(scalar_kernels())
        for keys in batches:
            serial = BloomFilter.from_size(num_bits, 8, layout="blocked", seed=3)
            serial.update(keys)
            threaded = BloomFilter.from_size(num_bits, 8, layout="blocked", seed=3)
            threaded.update(keys, threads=nthreads)
            assert threaded == serial
            assert threaded.num_new_keys == serial.num_new_keys


@pytest.mark.parametrize("num_blocks", [1, 3, 1000, 2**32 - 1])
def test_a_thread_picks_exactly_the_keys_of_its_blocks(num_blocks, scalar_kernels):
    """Threaded blocked inserts: the keys a thread sets are those whose block is in its range [lo, hi), in order,
    with the AVX-512 kernel and the scalar one; ranges that meet give every key to exactly one thread."""
    hashes = np.random.default_rng(num_blocks).integers(0, 2**64, size=1003, dtype=np.uint64)
    hashes[:4] = [0, 2**64 - 1, 2**32 - 1, 2**32]
    blocks = ((hashes >> np.uint64(32)) * np.uint64(num_blocks)) >> np.uint64(32)
    cuts = [num_blocks * t // 3 for t in range(4)]
    for simd in (True, False):
        with contextlib.ExitStack() as stack:
            if not simd:
                stack.enter_context(scalar_kernels())
            picked = []
            for lo, hi in zip(cuts, cuts[1:]):
                for n in (0, 7, 8, 9, len(hashes)):  # tails of the eight-wide loop
                    mine = bloom_native._select_blocks(hashes[:n], num_blocks, lo, hi)
                    assert (mine == hashes[:n][(blocks[:n] >= lo) & (blocks[:n] < hi)]).all(), (simd, lo, hi, n)
                picked.append(mine)  # all the hashes
            assert sorted(np.concatenate(picked).tolist()) == sorted(hashes.tolist())


@pytest.mark.parametrize("dtype", [np.uint64, np.int64])
@pytest.mark.parametrize("scheme", ["xxh3", "xxh64"])
def test_numpy_integer_hashes_match_the_single_key_hash(dtype, scheme, scalar_kernels):
    """The AVX-512 integer hashing (XXH3, eight keys at a time) and the scalar loop give key_hash(int(v)) for
    every value, the extremes and every tail length (n mod 8) included."""
    info = np.iinfo(dtype)
    extremes = [info.min, info.max, 0, 1, info.max - 1, info.min + 1, -1 if dtype is np.int64 else 2**63]
    values = np.concatenate([np.array(extremes, dtype=dtype),
                             np.random.default_rng(8).integers(info.min, info.max, 1000, dtype=dtype, endpoint=True)])
    scheme_id = {"xxh3": 2, "xxh64": 1}[scheme]
    expected = np.array([key_hash(int(v), 77, scheme_id) for v in values], dtype=np.uint64)
    for n in (0, 1, 7, 8, 9, 15, 16, len(values)):
        assert (hash_many(values[:n], 77, scheme=scheme_id) == expected[:n]).all(), n
        with scalar_kernels():
            assert (hash_many(values[:n], 77, scheme=scheme_id) == expected[:n]).all(), n


def test_batch_kernels_are_reported():
    assert bloom_native.batch_kernels() in ("avx2+avx512", "avx2", "avx512", "scalar")


@pytest.mark.parametrize("layout,num_bits", [("classic", 1000), ("partitioned", 64 * 7 + 5), ("blocked", 512 * 7)])
def test_inserting_threads_own_whole_words(layout, num_bits):
    """Classic and partitioned: threads write disjoint 64-bit words (a range cut inside a word would let two
    threads race on it). Blocked: threads own disjoint ranges of blocks. Either way: the serial bits."""
    f = BloomFilter.from_size(num_bits, 5, layout=layout)
    for nthreads in range(1, 9) if layout != "blocked" else ():
        ranges = f._write_ranges(nthreads)
        assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert ranges[-1][1] >= num_bits and all(lo % 64 == 0 for lo, _ in ranges)
    keys = np.arange(20_000, dtype=np.uint64)
    serial = BloomFilter.from_size(num_bits, 5, layout=layout)
    serial.update(keys)
    threaded = BloomFilter.from_size(num_bits, 5, layout=layout)
    threaded.update(keys, threads=3)
    assert threaded == serial


def test_concurrent_python_threads_never_lose_a_bit():
    """Several threads update one filter at once (the kernels release the GIL): no bit may be lost."""
    chunks = [np.arange(i * 200_000, (i + 1) * 200_000, dtype=np.uint64) for i in range(4)]
    for layout in LAYOUTS:
        serial = BloomFilter(800_000, 0.01, layout=layout)
        for chunk in chunks:
            serial.update(chunk)
        shared = BloomFilter(800_000, 0.01, layout=layout)
        workers = [threading.Thread(target=shared.update, args=(chunk,)) for chunk in chunks]
        workers += [threading.Thread(target=lambda c=chunk: [shared.add(int(x)) for x in c[:2000]])
                    for chunk in chunks]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert shared == serial, layout


def test_single_key_adds_during_batch_updates_lose_no_bit():
    """A single-key add takes no lock when none is held (it holds the GIL, and batch writers take the lock only with
    the GIL): while another thread's update holds it, add waits. Threads rewrite the blocks of a small filter with
    the same keys (a block written back from a stale copy would erase bits) while this thread adds other keys."""
    base, extra = np.arange(3000, dtype=np.uint64), [f"extra-{i}" for i in range(4000)]
    serial = BloomFilter.from_size(64 * 512, 7, layout="blocked")
    serial.update(base)
    serial.update(extra)
    shared = BloomFilter.from_size(64 * 512, 7, layout="blocked")

    def rewrite(stop):
        for _ in range(20_000):  # bounded: the adds below finish long before
            if stop.is_set():
                return
            shared.update(base)

    add_beside_workers(shared.add, extra, [rewrite, rewrite])
    assert shared == serial


# ---- the CS 170 example, pinned bytes ----------------------------------------------------------------------------------
def test_cs170_worked_example():
    """seed 001: m = 5, h1(x) = x mod 5, h2(x) = (2x + 3) mod 5; insert 9 and 11; 15 -> no, 16 -> false positive."""
    f = BloomFilter.from_hash_functions(5, [lambda x: x % 5, lambda x: (2 * x + 3) % 5])
    f.add(9)
    assert f._bit_indices(9) == [4, 1]
    f.add(11)
    assert [i for i in range(5) if f._payload()[0] >> i & 1] == [0, 1, 4]  # B = 1 1 0 0 1
    assert f.filled_cells() == 3 and f.fill_ratio == 3 / 5
    assert bit_string(f) == "11001"  # what `bloomwise reproduce` prints for the notes' example
    assert 15 not in f
    assert 16 in f  # a false positive: 16 was never inserted
    with pytest.raises(ValueError, match="functions"):
        BloomFilter.from_bytes(f.to_bytes())
    again = BloomFilter.from_bytes(f.to_bytes(), functions=[lambda x: x % 5, lambda x: (2 * x + 3) % 5])
    assert 16 in again and 15 not in again


def test_explicit_functions_must_stay_in_range():
    f = BloomFilter.from_hash_functions(5, [lambda x: x])
    with pytest.raises(ValueError, match=r"returned 7; expected an int in \[0, 5\)"):
        f.add(7)


# Fixed keys -> fixed bytes: the positions each layout derives from a hash are part of the file format.
# If one of these changes, saved filters would answer wrongly: add a new hash scheme id instead.
SCHEMA = {"classic": (1000, 7), "partitioned": (1000, 7), "blocked": (2048, 8)}
SCHEMA_KEYS = ["", "a", "bloomwise", b"\x00\xff", 0, 1, -1, 2**64 - 1, 2**100]
SCHEMA_DIGESTS = {
    "xxh64": {"classic": 0x859B0D5F0436CAC7, "partitioned": 0xDD91BCA06E8D049F, "blocked": 0x1D8F2DA92AF3B046},
    "xxh3": {"classic": 0xE5AA39B86C15697B, "partitioned": 0x0175A00BF8B16D0E, "blocked": 0x5A93D738E6EDED7B},
}


@pytest.mark.parametrize("scheme", ["xxh64", "xxh3"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_schema_fixed_keys_give_fixed_bytes(layout, scheme):
    num_bits, num_hashes = SCHEMA[layout]
    f = BloomFilter.from_size(num_bits, num_hashes, layout=layout, seed=42, hash_scheme=scheme)
    f.update(SCHEMA_KEYS)
    assert xxh64(f._payload()) == SCHEMA_DIGESTS[scheme][layout], hex(xxh64(f._payload()))


@pytest.mark.parametrize("scheme,layout,key,indices", [
    ("xxh64", "classic", "bloomwise", [942, 203, 465, 726, 988, 249, 511]),
    ("xxh64", "partitioned", "bloomwise", [133, 171, 351, 531, 712, 749, 930]),
    ("xxh64", "blocked", "bloomwise", [1552, 1600, 1705, 1752, 1830, 1903, 1965, 1989]),
    ("xxh64", "classic", 2**64 - 1, [488, 5, 522, 39, 556, 72, 589]),
    ("xxh64", "blocked", 2**64 - 1, [552, 589, 680, 758, 821, 870, 959, 988]),
    ("xxh3", "classic", "bloomwise", [467, 836, 206, 576, 945, 315, 684]),
    ("xxh3", "partitioned", "bloomwise", [66, 261, 314, 510, 706, 759, 954]),
    ("xxh3", "blocked", "bloomwise", [526, 592, 644, 724, 807, 889, 931, 993]),
    ("xxh3", "blocked", 2**64 - 1, [1, 72, 186, 221, 301, 377, 412, 499]),
])
def test_schema_bit_indices(scheme, layout, key, indices):
    f = BloomFilter.from_size(*SCHEMA[layout], layout=layout, seed=42, hash_scheme=scheme)
    assert f._bit_indices(key) == indices


def test_schema_positions():
    f = BloomFilter.from_size(1000, 3, layout="partitioned", seed=0)
    assert all(lo <= p < hi for p, (lo, hi) in zip(f._bit_indices("x"), [(0, 333), (333, 666), (666, 1000)]))
    b = BloomFilter.from_size(1024, 8, layout="blocked")
    indices = b._bit_indices("x")
    assert len({i // 512 for i in indices}) == 1  # one block
    assert [(i % 512) // 64 for i in indices] == list(range(8))  # probe i in lane i


# ---- measured FPR against each layout's theory -----------------------------------------------------------------------
@pytest.mark.parametrize("capacity,fpr,layout", [
    (20_000, 0.01, "classic"), (20_000, 0.01, "partitioned"), (20_000, 0.01, "blocked"),
    (50_000, 0.001, "blocked"), (10_000, 0.05, "classic"), (30_000, 0.002, "partitioned"),
])
def test_measured_fpr_matches_the_layout_formula(capacity, fpr, layout):
    """Exact binomial test, false-alarm probability 1e-6 (two-sided: too many or implausibly few)."""
    f = BloomFilter(capacity, fpr, layout=layout, seed=11)
    f.update(np.arange(capacity, dtype=np.uint64))
    expected = theory.false_positive_rate(f.num_cells, capacity, f.num_hashes, layout=layout)
    assert expected <= fpr
    queries = 400_000
    hits = int(f.contains_many(np.arange(10**12, 10**12 + queries, dtype=np.uint64)).sum())
    assert_rate_matches(hits, queries, expected, f"{layout} m={f.num_cells} k={f.num_hashes}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_statistics_track_the_fill(layout):
    f = BloomFilter(100_000, 0.01, layout=layout)
    assert f.fill_ratio == 0 and f.approx_count() == 0 and f.estimated_fpr() == 0
    f.update(np.arange(60_000))
    assert 0.05 < f.fill_ratio < 0.6
    assert abs(f.approx_count() - 60_000) < 0.02 * 60_000
    exact = theory.false_positive_rate(f.num_cells, 60_000, f.num_hashes, layout=layout)
    assert math.isclose(f.estimated_fpr(), exact, rel_tol=0.15)


def test_overfilling_warns_once_with_the_real_fpr():
    f = BloomFilter(1000, 0.01)
    f.update(range(1000))
    with pytest.warns(CapacityWarning, match="false-positive rate is now about"):
        f.update(range(1000, 3000))
    with warns_nothing():
        f.update(range(3000, 4000))


class warns_nothing:
    def __enter__(self):
        import warnings
        self._catch = warnings.catch_warnings(record=True)
        self.record = self._catch.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        assert not [w for w in self.record if issubclass(w.category, CapacityWarning)]


# ---- set algebra --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_union_and_intersection(layout):
    a, b = small(layout), small(layout)
    a.update(range(0, 300))
    b.update(range(200, 500))
    both = BloomFilter.from_size(a.num_cells, a.num_hashes, layout=layout)
    both.update(range(500))
    assert a | b == both == a.union(b)
    assert all(i in (a & b) for i in range(200, 300))
    assert (a & b) == a.intersection(b)
    c = a.copy()
    c |= b
    assert c == both and c is not a and a != both
    c &= a
    assert c == a


@given(st.lists(st.lists(st.integers(0, 10**6), max_size=20), min_size=3, max_size=3))
def test_union_is_commutative_and_associative(key_sets):
    x, y, z = (small("blocked") for _ in range(3))
    for f, keys in zip((x, y, z), key_sets):
        f.update(keys)
    assert x | y == y | x
    assert (x | y) | z == x | (y | z)
    assert (x & y) & z == x & (y & z)


def test_incompatible_filters_name_what_differs():
    a = BloomFilter.from_size(1024, 3, seed=1, layout="classic")
    with pytest.raises(ValueError, match="num_hashes: 3 vs 4"):
        a | BloomFilter.from_size(1024, 4, seed=1, layout="classic")
    with pytest.raises(ValueError, match="seed: 1 vs 2"):
        a |= BloomFilter.from_size(1024, 3, seed=2, layout="classic")
    with pytest.raises(ValueError, match="layout: 'classic' vs 'partitioned'"):
        a & BloomFilter.from_size(1024, 3, layout="partitioned", seed=1)
    with pytest.raises(TypeError):
        a | {1, 2}
    assert not a.is_compatible(BloomFilter.from_size(2048, 3, seed=1, layout="classic"))


def test_set_like_protocol_is_honest():
    f = BloomFilter(100, 0.01)
    with pytest.raises(TypeError):
        len(f)
    with pytest.raises(TypeError):
        iter(f)
    with pytest.raises(TypeError):
        hash(f)
    text = repr(f)
    assert text.startswith("<BloomFilter blocked:") and "k=" in text and "fill=" in text
    f.update(range(10))
    f.clear()
    assert f.fill_ratio == 0 and 3 not in f


# ---- bad input ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,error,message", [
    ({"capacity": 0}, ValueError, "capacity"),
    ({"capacity": -5}, ValueError, "capacity"),
    ({"capacity": 10, "fpr": 0}, ValueError, "fpr"),
    ({"capacity": 10, "fpr": 1}, ValueError, "fpr"),
    ({"capacity": 10, "fpr": float("nan")}, ValueError, "fpr"),
    ({"capacity": 10, "fpr": "1%"}, TypeError, "fpr"),
    ({"capacity": 1.5}, TypeError, "capacity"),
    ({"capacity": 10, "layout": "fast"}, ValueError, "layout"),
    ({"capacity": 10, "seed": -1}, ValueError, "seed"),
    ({"capacity": 10, "seed": 2**64}, ValueError, "seed"),
])
def test_bad_parameters_name_the_parameter(kwargs, error, message):
    with pytest.raises(error, match=message):
        BloomFilter(**kwargs)


@pytest.mark.parametrize("args,kwargs,message", [
    ((0, 3), {}, "num_cells must be at least 1"), ((100, 0), {}, "num_hashes"), ((100, 65), {}, "num_hashes"),
    ((1000, 3), {"layout": "blocked"}, "multiple of 512"), ((512, 17), {"layout": "blocked"}, "num_hashes"),
    ((2, 3), {"layout": "partitioned"}, "at least num_hashes"), ((2**49, 3), {}, "num_cells must be at most 2"),
])
def test_bad_sizes(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        BloomFilter.from_size(*args, **{"layout": "classic", **kwargs})


@pytest.mark.parametrize("bad", [1.5, None, object(), {1}, np.float64(2.0), np.array([1, 2])])
def test_non_keys_raise_type_error_with_a_hint(bad):
    f = small("classic")
    with pytest.raises(TypeError, match="key"):
        f.add(bad)
    with pytest.raises(TypeError):
        bad in f


@pytest.mark.parametrize("bad", ["abc", b"abc", 5, None, np.array([1.5]), np.array([True])])
def test_bad_batches(bad):
    with pytest.raises(TypeError):
        small("classic").update(bad)


def test_bad_keys_inside_a_batch_change_nothing_for_numpy():
    f = small("classic")
    with pytest.raises(ValueError, match="key 1 of the array cannot be hashed: it holds a lone surrogate"):
        f.update(np.array(["ok", "bad\ud800"]))
    assert f.fill_ratio == 0


def test_key_function_turns_objects_into_bytes():
    import struct
    f = BloomFilter(100, 0.01, key=struct.Struct("<d").pack)
    f.add(0.5)
    assert 0.5 in f and 0.25 not in f
    f.update(np.array([1.5, 2.5]))
    assert f.contains_many([1.5, 2.5]).all()
    with pytest.raises(TypeError, match="must return bytes"):
        BloomFilter(10, key=lambda x: 5).add(1)
    with pytest.raises(ValueError, match="key function"):
        BloomFilter.from_bytes(f.to_bytes())
    assert 0.5 in BloomFilter.from_bytes(f.to_bytes(), key=struct.Struct("<d").pack)


# ---- persistence ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trips(tmp_path, layout):
    f = BloomFilter(5000, 0.01, layout=layout, seed=77)
    f.update(range(4000))
    for copy in (BloomFilter.from_bytes(f.to_bytes()), pickle.loads(pickle.dumps(f)), f.copy()):
        assert copy == f and copy.capacity == 5000 and copy.layout == layout and copy.seed == 77
    path = tmp_path / "f.bloom"
    f.save(path)
    loaded = BloomFilter.load(path)
    assert loaded == f and all(i in loaded for i in range(4000))
    with BloomFilter.open(path) as mapped:
        assert mapped == f
        with pytest.raises(TypeError, match="read-only"):
            mapped.add(1)


def test_every_flipped_byte_and_every_truncation_is_detected():
    f = BloomFilter.from_size(512, 3, layout="blocked", seed=5)
    f.update(["a", "b", "c"])
    data = f.to_bytes()
    for i in range(len(data)):
        corrupted = bytearray(data)
        corrupted[i] ^= 0x5A
        with pytest.raises(FormatError):
            BloomFilter.from_bytes(bytes(corrupted))
    for length in range(len(data)):
        with pytest.raises(FormatError):
            BloomFilter.from_bytes(data[:length])


def _writer(path, keys):
    with BloomFilter.open(path, "r+") as f:
        f.update(keys)


def test_memory_mapped_filter_is_shared_between_processes(tmp_path):
    path = tmp_path / "shared.bloom"
    BloomFilter(10_000, 0.01).save(path)
    reader = BloomFilter.open(path)
    assert "from-child" not in reader
    child = multiprocessing.get_context("spawn").Process(target=_writer, args=(str(path), ["from-child"]))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert "from-child" in reader  # the same pages: the child's bits are visible at once
    reader.close()
    assert "from-child" in BloomFilter.load(path)  # and the file's checksum was rewritten on close


def test_interrupted_save_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "f.bloom"
    old = BloomFilter(100, 0.01)
    old.add("old")
    old.save(path)
    new = BloomFilter(100, 0.01)

    def fail(*args):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        new.save(path)
    monkeypatch.undo()
    assert "old" in BloomFilter.load(path)
    assert os.listdir(tmp_path) == ["f.bloom"]


def test_set_padding_bits_are_rejected_even_with_valid_checksums():
    from bloomwise import _format
    f = BloomFilter.from_size(1001, 3, layout="classic")
    header, payload = _format.loads(f.to_bytes())
    damaged = bytearray(payload)
    damaged[-1] |= 0x80  # bit 1023: past num_bits
    with pytest.raises(FormatError, match="bits past num_bits"):
        BloomFilter.from_bytes(_format.dumps(header, damaged))
