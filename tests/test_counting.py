"""CountingBloomFilter: a multiset model, sticky saturation, absent removals, the journal, FPR, persistence."""
from __future__ import annotations

import pickle
import struct
import sys
import threading
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from bloomwise import BloomFilter, CapacityWarning, CountingBloomFilter, FormatError, _format, theory
from bloomwise.counting import Changes, apply_changes
from bloomwise.vicbf import VariableIncrementCountingBloomFilter
from concurrency import add_beside_workers, batch_inserters
from stats import assert_rate_matches

LAYOUTS = ("classic", "partitioned")
# Few distinct keys, so keys repeat, counters share positions and small filters saturate.
KEY_POOL = [0, 1, 2, 3, 7, -5, 2**70, "a", "b", "é", b"a", b"\x00"]
KEYS = st.sampled_from(KEY_POOL)


def payload(f) -> bytes:
    return bytes(f._payload())


# ---- no false negatives under any mix of operations (a multiset model) -----------------------------------------------
class CountingMachine(RuleBasedStateMachine):
    """The filter against collections.Counter; a peer BloomFilter follows it through journal deltas."""

    @initialize(bits=st.sampled_from([4, 8]), layout=st.sampled_from(LAYOUTS), m=st.integers(4, 48),
                k=st.integers(1, 4), seed=st.integers(0, 2**64 - 1))
    def build(self, bits, layout, m, k, seed):
        self.f = CountingBloomFilter.from_size(m, k, counter_bits=bits, layout=layout, seed=seed)
        self.model: Counter = Counter()
        self.mark = self.f.mark()
        self.peer = self.f.to_bloom()

    def sub_multiset(self, data):
        chosen = Counter()
        for key in sorted(self.model, key=repr):
            chosen[key] = data.draw(st.integers(0, min(self.model[key], 3)))
        return list(chosen.elements())

    @rule(key=KEYS, times=st.integers(1, 8))
    def add(self, key, times):
        for _ in range(times):
            self.f.add(key)
        self.model[key] += times

    @rule(keys=st.lists(KEYS, max_size=12))
    def update(self, keys):
        self.f.update(keys)
        self.model.update(keys)

    @rule(values=st.lists(st.integers(0, 7), max_size=12))
    def update_numpy(self, values):
        self.f.update(np.array(values, dtype=np.int64))
        self.model.update(values)  # numpy ints are the Python ints they equal

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove(self, data):
        key = data.draw(st.sampled_from(sorted(self.model, key=repr)))
        self.f.remove(key)
        self.model[key] -= 1
        self.model += Counter()  # drop zeros

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove_many(self, data):
        keys = self.sub_multiset(data)
        assert self.f.remove_many(keys) == len(keys)
        self.model -= Counter(keys)

    @rule(key=KEYS)
    def remove_absent(self, key):
        if self.model[key] or key in self.f:  # only a certainly absent key (a false positive is the caller's error)
            return
        before, keys_before = payload(self.f), self.f.num_keys
        with pytest.raises(KeyError):
            self.f.remove(key)
        assert not self.f.discard(key)
        assert payload(self.f) == before and self.f.num_keys == keys_before

    @rule(keys=st.lists(KEYS, max_size=6))
    def union(self, keys):
        other = CountingBloomFilter.from_size(self.f.num_cells, self.f.num_hashes, counter_bits=self.f.counter_bits,
                                              layout=self.f.layout, seed=self.f.seed)
        other.update(keys)
        self.f |= other
        self.model.update(keys)

    @rule()
    def clear(self):
        self.f.clear()
        self.model.clear()

    @rule()
    def ship_delta(self):
        changes = self.f.changes_since(self.mark)
        apply_changes(self.peer, changes)
        self.mark = changes.end
        assert self.peer == self.f.to_bloom()

    @invariant()
    def no_false_negatives(self):
        for key, times in self.model.items():
            assert key in self.f
            assert self.f.count(key) >= min(times, self.f.counter_max)  # sticky saturation never under-counts
        assert self.f.num_keys == sum(self.model.values())
        present = sorted(self.model, key=repr)
        assert self.f.contains_many(present).all()


TestCountingMachine = CountingMachine.TestCase
TestCountingMachine.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


# ---- saturation ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bits", [4, 8])
def test_saturation_is_sticky_and_never_a_false_negative(bits):
    f = CountingBloomFilter.from_size(1, 1, counter_bits=bits, layout="classic")  # every key on the one counter
    maximum = 2**bits - 1
    keys = list(range(maximum + 10))
    f.update(keys)
    assert f.counters(0) == (maximum,) and f.counter_max == maximum and f.saturated_count == 1
    for key in keys:  # each removal is legal; the saturated counter is never decremented
        f.remove(key)
        assert key in f and f.counters(key) == (maximum,)
    assert f.saturated_count == 1 and f.num_keys == 0


def test_sixteen_bit_counters_and_saturation_bound():
    f = CountingBloomFilter.from_size(8, 2, counter_bits=16, layout="classic")
    f.update(np.zeros(70_000, dtype=np.uint8))  # one key, 70,000 times
    assert f.count(0) == 65535 and f.saturated_count >= 1
    g = CountingBloomFilter(1_000_000, 0.01)
    bound = g.saturation_bound()
    assert bound == theory.counter_overflow_bound(g.num_cells, 1_000_000, g.num_hashes, 15)
    assert bound < 1e-6  # with k ~ (m/n) ln 2, about 3.06e-14 m


def test_saturated_filter_still_answers_for_everything_added():
    f = CountingBloomFilter.from_size(64, 3, seed=1, layout="classic")  # 4-bit counters, heavily overloaded
    keys = np.arange(2000)
    f.update(keys)
    assert f.saturated_count > 0
    f.remove_many(keys[:1500])
    assert f.contains_many(keys[1500:]).all()


# ---- removal of absent keys ------------------------------------------------------------------------------------------
def test_removing_a_certainly_absent_key_raises_and_changes_nothing():
    f = CountingBloomFilter(1000, 0.01, seed=3)
    f.update(range(500))
    mark, before = f.mark(), payload(f)
    absent = next(key for key in range(10**6, 10**7) if key not in f)
    with pytest.raises(KeyError):
        f.remove(absent)
    assert f.discard(absent) is False
    batch = list(range(100)) + [absent] + list(range(100, 200))
    with pytest.raises(KeyError) as info:
        f.remove_many(batch)
    assert info.value.args == (absent,)
    assert payload(f) == before and f.num_keys == 500 and len(f.changes_since(mark)) == 0
    assert f._journal_length == 0  # the undone batch left nothing in the journal
    assert f.remove_many(iter(batch), missing="ignore") == 200 and f.num_keys == 300
    with pytest.raises(ValueError, match="missing"):
        f.remove_many([], missing="skip")


def test_repeated_probe_positions_need_as_many_increments():
    # In classic layout a key may probe one counter twice: it holds 2 there, so removing needs 2.
    f = CountingBloomFilter.from_size(2, 6, counter_bits=8, layout="classic")
    key = next(k for k in range(1000) if len(set(f._positions(k))) < 6)
    f.add(key)
    f.remove(key)
    assert f.counters(key) == (0,) * 6 and key not in f


# ---- the bit view and the journal ------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_bit_view_answers_like_a_bloom_filter(layout):
    f = CountingBloomFilter(5000, 0.02, layout=layout, seed=99)
    f.update(np.arange(5000))
    bloom = f.to_bloom()
    plain = BloomFilter.from_size(f.num_cells, f.num_hashes, layout=layout, seed=99)
    plain.update(np.arange(5000))
    assert bloom == plain  # same hash, positions and seed as a BloomFilter of the same layout
    queries = np.arange(10**9, 10**9 + 50_000)
    assert (f.contains_many(queries) == bloom.contains_many(queries)).all()
    assert all(f._positions(k) == plain._bit_indices(k) for k in ["x", b"y", 12, 2**90])


def test_journal_deltas_reproduce_the_bit_view_exactly():
    rng = np.random.default_rng(7)
    f = CountingBloomFilter(3000, 0.01, seed=5)
    peer, mark = f.to_bloom(), f.mark()
    present = []
    for step in range(12):
        new = rng.integers(0, 10**6, size=int(rng.integers(1, 400)))
        f.update(new)
        present.extend(new.tolist())
        rng.shuffle(present)
        gone, present = present[: len(present) // 3], present[len(present) // 3:]
        f.remove_many(gone)
        if step % 3 == 2:  # a peer that missed two deltas catches up with one
            changes = f.changes_since(mark)
            assert isinstance(changes, Changes) and changes.start == mark
            assert (np.diff(changes.positions.astype(np.int64)) > 0).all()
            apply_changes(peer, changes)
            apply_changes(peer, changes)  # absolute values: applying twice is harmless
            mark = changes.end
            assert peer == f.to_bloom()
    f.trim_journal(mark)
    with pytest.raises(ValueError, match="outside the journal"):
        f.changes_since(0)
    f.clear()
    apply_changes(peer, f.changes_since(mark))
    assert peer == f.to_bloom() and peer.fill_ratio == 0
    f.stop_journal()
    with pytest.raises(ValueError, match="journal is off"):
        f.changes_since(f._journal_length)


def test_delta_of_a_bit_that_flipped_back_is_empty():
    f = CountingBloomFilter(100, 0.01)
    mark = f.mark()
    f.add("a")
    f.remove("a")
    assert len(f.changes_since(mark)) == 0 and f._journal_length == 2 * f.num_hashes


def test_apply_changes_checks_the_target():
    f = CountingBloomFilter(100, 0.01)
    mark = f.mark()
    f.add("a")
    with pytest.raises(ValueError, match="does not fit"):
        apply_changes(BloomFilter.from_size(8, 1, layout="classic"), f.changes_since(mark))
    with pytest.raises(TypeError):
        apply_changes(f, f.changes_since(mark))


# ---- measured FPR against theory -------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::bloomwise.CapacityWarning")  # twice the capacity for a moment
@pytest.mark.parametrize("capacity,fpr,layout,bits", [
    (20_000, 0.01, "classic", 4), (20_000, 0.02, "partitioned", 4), (10_000, 0.001, "classic", 8),
])
def test_measured_fpr_matches_theory_before_and_after_deletions(capacity, fpr, layout, bits):
    """Exact binomial test, false-alarm probability 1e-6 (two-sided: too many or implausibly few)."""
    f = CountingBloomFilter(capacity, fpr, counter_bits=bits, layout=layout, seed=21)
    expected = theory.false_positive_rate(f.num_cells, capacity, f.num_hashes, layout=layout)
    assert expected <= fpr
    # Insert twice the capacity, then delete half: the counters are those of the remaining keys alone.
    f.update(np.arange(2 * capacity, dtype=np.uint64))
    f.remove_many(np.arange(capacity, 2 * capacity, dtype=np.uint64))
    assert f.saturated_count == 0 and f.num_keys == capacity
    assert f.contains_many(np.arange(capacity, dtype=np.uint64)).all()
    queries = 300_000
    hits = int(f.contains_many(np.arange(10**12, 10**12 + queries, dtype=np.uint64)).sum())
    assert_rate_matches(hits, queries, expected, f"CBF {layout} m={f.num_cells} k={f.num_hashes}")


# ---- batches, keys, statistics ---------------------------------------------------------------------------------------
def test_batches_match_single_keys():
    f = CountingBloomFilter(1000, 0.01, seed=2)
    keys = np.arange(60, dtype=np.int32).reshape(3, 20)
    f.update(keys)
    f.update([5, 5, "x"])
    counters = f.counters_many(keys)
    assert counters.shape == (3, 20, f.num_hashes) and counters.dtype == np.uint8
    assert [tuple(row) for row in counters.reshape(-1, f.num_hashes)] == [f.counters(int(k)) for k in keys.ravel()]
    assert f.contains_many(keys).shape == (3, 20) and f.contains_many(keys).all()
    assert f.count(5) == 3 and f.count(np.int64(5)) == 3
    assert CountingBloomFilter.from_size(100, 2, counter_bits=16, layout="classic").counters_many(["a"]).dtype == np.uint16
    with pytest.raises(TypeError):
        f.add(1.5)
    with pytest.raises(TypeError):
        f.update("abc")


# ---- batch kernels against the single-key kernels --------------------------------------------------------------------
def keys_of_kind(kind: str, values: np.ndarray):
    """The same draws as each key type a batch takes: lists of str/int/bytes, numpy uint64/int64/'U'/'S'."""
    if kind == "str":
        return [f"k{v}" for v in values.tolist()]
    if kind == "int":
        return [v - 2**62 if v % 3 else v << 70 for v in values.tolist()]  # negative and big ints as well
    if kind == "u64":
        return values.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    if kind == "i64":
        return values.astype(np.int64) - 1000
    if kind == "U":
        return np.array([f"é{v}" for v in values.tolist()])
    return np.array([b"b%d" % v for v in values.tolist()])


def add_one_by_one(f, keys) -> None:
    for key in (keys.tolist() if isinstance(keys, np.ndarray) else keys):
        f.add(key)


KINDS = ["str", "int", "u64", "i64", "U", "S"]
# (num_cells, num_hashes, keys, distinct keys): tiny filters saturate every counter; the large ones hold more than
# 1 MiB of counters (the batch kernels then request cache lines ahead) and span several 1024-key hashing chunks.
SHAPES = [(3, 2, 1200, 5), (61, 4, 3000, 40), (1 << 21, 7, 9000, 3000), (2_300_017, 3, 5000, 5000)]


@pytest.mark.parametrize("bits", [4, 8, 16])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("journal", [False, True])
def test_update_is_exactly_a_loop_of_add(bits, layout, kind, journal):
    rng = np.random.default_rng(bits * 100 + len(layout) + KINDS.index(kind))
    for m, k, n, distinct in SHAPES:
        keys = keys_of_kind(kind, rng.integers(0, distinct, n))
        batch = CountingBloomFilter.from_size(m, k, counter_bits=bits, layout=layout, seed=n)
        single = CountingBloomFilter.from_size(m, k, counter_bits=bits, layout=layout, seed=n)
        marks = (batch.mark(), single.mark()) if journal else None
        batch.update(keys[:7])  # two calls: the second starts from nonzero (and saturated) counters
        batch.update(keys[7:])
        add_one_by_one(single, keys)
        assert payload(batch) == payload(single), (m, k)
        assert batch.num_keys == single.num_keys == n
        if journal:  # the same 0 -> 1 transitions in the same order
            assert np.array_equal(batch._journal_since(marks[0])[0], single._journal_since(marks[1])[0])
        if m == 3 and bits < 16:
            assert batch.saturated_count > 0  # 800 increments per counter on average



@pytest.mark.parametrize("kind", ["str", "int", "u64"])
def test_update_allocates_nothing_per_key_on_the_python_heap(kind):
    import gc
    import tracemalloc
    n = 100_000
    keys = keys_of_kind(kind, np.arange(n))
    f = CountingBloomFilter(2 * n, 0.01)
    f.update(keys[:10])  # first-call imports outside the measurement
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        f.update(keys)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < 16_384, peak  # a few objects per call; one Python int per key would be ~3 MB


@pytest.mark.parametrize("layout", LAYOUTS)
def test_variable_increment_update_is_exactly_a_loop_of_add(layout):
    # The variable-increment filter shares the batch loop (prefetching beyond 1 MiB of cells).
    from bloomwise import VariableIncrementCountingBloomFilter
    rng = np.random.default_rng(5)
    for m, k, n, distinct in [(7, 2, 500, 4), (1 << 21, 5, 6000, 2000)]:
        keys = rng.integers(0, distinct, n).astype(np.uint64)
        batch = VariableIncrementCountingBloomFilter.from_size(m, k, layout=layout, seed=3)
        single = VariableIncrementCountingBloomFilter.from_size(m, k, layout=layout, seed=3)
        batch.update(keys)
        add_one_by_one(single, keys)
        assert payload(batch) == payload(single) and batch.num_keys == single.num_keys == n


@pytest.mark.parametrize("bits", [4, 8, 16])
def test_update_saturates_exactly_like_add(bits):
    # One key 70,000 times: its counters pass every maximum (65,535 for 16 bits) and must stick there.
    for layout in LAYOUTS:
        f = CountingBloomFilter.from_size(40, 3, counter_bits=bits, layout=layout)
        keys = np.random.default_rng(bits).permutation(np.repeat(np.arange(4, dtype=np.uint64), [67_000, 1000, 1000, 1000]))
        f.update(keys)
        g = CountingBloomFilter.from_size(40, 3, counter_bits=bits, layout=layout)
        add_one_by_one(g, keys)
        assert payload(f) == payload(g) and f.saturated_count == g.saturated_count > 0
        assert f.counters(0) == g.counters(0) and max(f.counters(0)) == 2**bits - 1


def test_update_with_a_bad_key_changes_nothing():
    f = CountingBloomFilter(5000, 0.01, seed=3)
    f.update(range(100))
    mark, before = f.mark(), payload(f)
    for bad in ([*range(3000), 1.5, 7], [*map(str, range(2000)), None]):
        with pytest.raises(TypeError):
            f.update(bad)
        assert payload(f) == before and f.num_keys == 100 and f._journal_length == 0
    with pytest.raises(ValueError, match="key 1 of the array cannot be hashed: it holds a lone surrogate"):
        f.update(np.array(["a", "\ud800"]))
    assert payload(f) == before and f.num_keys == 100 and len(f.changes_since(mark)) == 0


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("bits", [4, 8, 16])
def test_batch_queries_and_removals_match_single_keys(layout, bits):
    rng = np.random.default_rng(bits)
    for m, k, n, distinct in SHAPES:
        f = CountingBloomFilter.from_size(m, k, counter_bits=bits, layout=layout, seed=9)
        stored = rng.integers(0, distinct, n).astype(np.uint64)
        f.update(stored)
        queries = np.concatenate([stored[:2000], rng.integers(distinct, 2**40, 2000).astype(np.uint64)])
        assert f.contains_many(queries).tolist() == [int(q) in f for q in queries]
        counters = f.counters_many(queries)
        assert [tuple(row) for row in counters.tolist()] == [f.counters(int(q)) for q in queries]
        g = f.copy()
        marks = f.mark(), g.mark()
        removed = sum(g.discard(key) for key in stored[:1500].tolist())
        assert f.remove_many(stored[:1500], missing="ignore") == removed
        assert payload(f) == payload(g) and f.num_keys == g.num_keys
        assert np.array_equal(f._journal_since(marks[0])[0], g._journal_since(marks[1])[0])
        if m > 100:  # no key of the large filters has lost a counter to saturation or removals
            assert removed == 1500 and f.remove_many(stored[1500:3000]) == 1500
            for key in stored[1500:3000].tolist():
                g.remove(key)
            assert payload(f) == payload(g) and f.num_keys == g.num_keys


def test_statistics_and_repr():
    f = CountingBloomFilter(10_000, 0.01)
    assert f.fill_ratio == 0 and f.estimated_fpr() == 0 and f.capacity == 10_000
    f.update(range(10_000))
    assert abs(f.approx_count() - 10_000) < 300
    assert abs(f.estimated_fpr() - 0.01) < 0.003
    text = repr(f)
    assert "counters x 4 bits" in text and "keys=10,000" in text and not text.startswith("CountingBloomFilter(")
    assert not hasattr(f, "__len__") and not hasattr(f, "__iter__")


def test_capacity_warning_once():
    f = CountingBloomFilter(100, 0.01)
    f.update(range(100))
    with pytest.warns(CapacityWarning, match="false-positive rate is now about"):
        f.update(range(100, 300))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f.add("more")


def test_threads_never_lose_an_increment():
    f = CountingBloomFilter.from_size(4096, 3, counter_bits=16, layout="classic")
    chunks = [np.arange(i * 20_000, (i + 1) * 20_000) for i in range(4)]
    threads = [threading.Thread(target=f.update, args=(chunk,)) for chunk in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    g = CountingBloomFilter.from_size(4096, 3, counter_bits=16, layout="classic")
    for chunk in chunks:
        g.update(chunk)
    assert f == g and f.num_keys == 80_000


@pytest.mark.parametrize("make", [
    lambda: CountingBloomFilter.from_size(2048, 3, counter_bits=16, layout="classic"),
    lambda: VariableIncrementCountingBloomFilter.from_size(2048, 3, fixed_bits=12, variable_bits=4),
], ids=["counting", "variable-increment"])
def test_single_key_writes_during_threaded_batches_lose_no_increment(make):
    """A single-key add or discard takes no lock when none is held (it holds the GIL, and batch writers take the
    lock only with the GIL): while another thread's update holds it, the single write waits. Two threads insert
    batches while this thread adds keys one by one and discards keys added before; the cells must be those of the
    same writes made one after another (16-bit cells in a small filter: no counter saturates, and the threads write
    the same bytes often). The GIL changes hands every 10 us, so that the single writes meet the batches often."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for scenario in range(3):
            shared, serial = make(), make()
            old = [f"old-{scenario}-{i}" for i in range(3000)]
            shared.update(old)
            serial.update(old)
            singles = [f"single-{scenario}-{i}" for i in range(6000)]
            workers, inserted = batch_inserters(shared.update, batches=30, size=2000)

            def write(i):
                shared.add(singles[i])
                if i < len(old):
                    shared.discard(old[i])

            add_beside_workers(write, range(len(singles)), workers)
            serial.update(singles)
            for key in old:
                serial.discard(key)
            for batch in inserted:
                serial.update(batch)
            assert shared == serial, f"scenario {scenario}: an increment or a decrement was lost"
    finally:
        sys.setswitchinterval(previous)


@pytest.mark.parametrize("kwargs,error,message", [
    ({"capacity": 0}, ValueError, "capacity"), ({"capacity": 1.5}, TypeError, "capacity"),
    ({"capacity": 10, "fpr": 1.0}, ValueError, "fpr"),
    ({"capacity": 10, "counter_bits": 5}, ValueError, "counter_bits"),
    ({"capacity": 10, "layout": "blocked"}, ValueError, "layout"), ({"capacity": 10, "seed": -1}, ValueError, "seed"),
])
def test_bad_parameters_name_the_parameter(kwargs, error, message):
    with pytest.raises(error, match=message):
        CountingBloomFilter(**kwargs)


# ---- union and equality ----------------------------------------------------------------------------------------------
def test_union_is_the_saturating_counter_sum():
    a = CountingBloomFilter.from_size(500, 3, seed=4, layout="classic")
    b = CountingBloomFilter.from_size(500, 3, seed=4, layout="classic")
    both = CountingBloomFilter.from_size(500, 3, seed=4, layout="classic")
    a.update(range(0, 100))
    b.update(range(50, 150))
    both.update(list(range(0, 100)) + list(range(50, 150)))
    assert a | b == both and a.union(b) == both and (a | b).count(60) >= 2
    assert b | a == a | b
    hot = CountingBloomFilter.from_size(1, 1, seed=4, layout="classic")
    hot.update(range(10))
    assert (hot | hot).counters(0) == (15,)


def test_incompatible_filters_name_what_differs():
    a = CountingBloomFilter.from_size(500, 3, seed=4, layout="classic")
    with pytest.raises(ValueError, match="num_cells: 500 vs 501"):
        a | CountingBloomFilter.from_size(501, 3, seed=4, layout="classic")
    with pytest.raises(ValueError, match="counter_bits: 4 vs 8.*|seed: 4 vs 5"):
        a |= CountingBloomFilter.from_size(500, 3, seed=5, counter_bits=8, layout="classic")
    with pytest.raises(TypeError):
        a |= BloomFilter.from_size(500, 3, seed=4, layout="classic")
    assert a != a.to_bloom() and a == a.copy() and not a.is_compatible(a.to_bloom())


# ---- persistence -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bits", [4, 8, 16])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trips(tmp_path, bits, layout):
    f = CountingBloomFilter(4001, 0.01, counter_bits=bits, layout=layout, seed=77)
    f.update(list(range(2000)) * 2)
    for copy in (CountingBloomFilter.from_bytes(f.to_bytes()), pickle.loads(pickle.dumps(f)), f.copy()):
        assert copy == f and copy.capacity == 4001 and copy.counter_bits == bits and copy.num_keys == 4000
        assert copy.layout == layout and copy.count(7) == 2
    f.save(tmp_path / "f.cbf")
    assert CountingBloomFilter.load(tmp_path / "f.cbf") == f
    header, _ = _format.loads(f.to_bytes())
    assert header.structure == _format.Structure.COUNTING and header.meta["counter_bits"] == bits
    assert header.payload_length == (f.num_cells * bits + 63) // 64 * 8


def float_key(value) -> bytes:
    return struct.pack("<d", value)


def test_key_function_survives_pickle_and_is_required_to_load():
    f = CountingBloomFilter(100, 0.01, key=float_key)
    f.add(1.5)
    assert 1.5 in pickle.loads(pickle.dumps(f))
    with pytest.raises(ValueError, match="key function"):
        CountingBloomFilter.from_bytes(f.to_bytes())


def test_every_flipped_byte_and_every_truncation_is_detected():
    f = CountingBloomFilter.from_size(100, 3, seed=5, layout="classic")
    f.update(["a", "b", "c", "a"])
    data = f.to_bytes()
    for i in range(len(data)):
        corrupted = bytearray(data)
        corrupted[i] ^= 0x5A
        with pytest.raises(FormatError):
            CountingBloomFilter.from_bytes(bytes(corrupted))
    for length in range(len(data)):
        with pytest.raises(FormatError):
            CountingBloomFilter.from_bytes(data[:length])


def test_well_checksummed_but_impossible_files_are_refused():
    f = CountingBloomFilter.from_size(100, 3, seed=5, layout="classic")  # 400 bits of counters in a 448-bit payload
    header = f._header()
    bad_padding = bytearray(payload(f))
    bad_padding[-1] = 1
    with pytest.raises(FormatError, match="padding"):
        CountingBloomFilter.from_bytes(_format.dumps(header, bytes(bad_padding)))
    import dataclasses
    for meta in ({"counter_bits": 5}, {}, {"counter_bits": 4, "capacity": -1}):
        with pytest.raises(FormatError):
            CountingBloomFilter.from_bytes(_format.dumps(dataclasses.replace(header, meta=meta), payload(f)))
    blocked = dataclasses.replace(header, layout=_format.Layout.BLOCKED)
    with pytest.raises(FormatError, match="layout"):
        CountingBloomFilter.from_bytes(_format.dumps(blocked, payload(f)))
    with pytest.raises(FormatError, match="CountingBloomFilter"):
        CountingBloomFilter.from_bytes(BloomFilter.from_size(64, 1, layout="classic").to_bytes())


@settings(max_examples=40, deadline=None)
@given(keys=st.lists(st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=8)), max_size=40),
       bits=st.sampled_from([4, 8, 16]))
def test_round_trip_property(keys, bits):
    f = CountingBloomFilter.from_size(97, 4, counter_bits=bits, layout="classic")
    f.update(keys)
    assert CountingBloomFilter.from_bytes(f.to_bytes()) == f


def test_docstring_examples():
    import doctest

    import bloomwise.counting

    failures, _ = doctest.testmod(bloomwise.counting, optionflags=doctest.ELLIPSIS)
    assert failures == 0
