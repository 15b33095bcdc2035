"""VariableIncrementCountingBloomFilter: exact (c, a, y) against a model of every position, FPR against the
analytic D_L formulas and against a CountingBloomFilter of the same memory, persistence."""
from __future__ import annotations

import dataclasses
import math
import pickle
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from bloomwise import CountingBloomFilter, FormatError, VariableIncrementCountingBloomFilter as VICBF, _format, theory
from bloomwise.vicbf import (
    DEFAULT_INCREMENTS, Probe, bh_order, dl_false_positive_rate, dl_increments, vicbf_false_positive_rate,
    vicbf_optimal_size,
)
from stats import assert_rate_matches

LAYOUTS = ("classic", "partitioned")
KEY_POOL = [0, 1, 2, 3, 9, -4, 2**70, "a", "b", "é", b"a", b"\x00"]
KEYS = st.sampled_from(KEY_POOL)
B2 = (1, 2, 4)  # the Bloom-paradox paper's Figure 6


# ---- every counter exactly, against a model of each position's multiset of increments --------------------------------
class VariableIncrementMachine(RuleBasedStateMachine):

    @initialize(increments=st.sampled_from([DEFAULT_INCREMENTS, B2, (3,), dl_increments(2)]),
                split=st.sampled_from([(4, 4), (3, 5), (8, 8)]), layout=st.sampled_from(LAYOUTS),
                m=st.integers(2, 40), k=st.integers(1, 4), seed=st.integers(0, 2**64 - 1))
    def build(self, increments, split, layout, m, k, seed):
        self.f = VICBF.from_size(max(m, k), k, increments=increments, fixed_bits=split[0], variable_bits=split[1],
                                 layout=layout, seed=seed)
        self.model: Counter = Counter()
        self.cells: defaultdict = defaultdict(Counter)  # position -> Counter of the increments it holds
        self.sticky: set = set()                        # positions whose c saturated
        self.c_max, self.modulus = 2 ** split[0] - 1, 2 ** split[1]

    def probes(self, key):
        return [(p.position, p.increment) for p in self.f.probes(key)]

    def insert(self, key, times=1):
        for _ in range(times):
            for position, increment in self.probes(key):
                self.cells[position][increment] += 1
                if sum(self.cells[position].values()) >= self.c_max:
                    self.sticky.add(position)
        self.model[key] += times

    def delete(self, key):
        for position, increment in self.probes(key):
            self.cells[position][increment] -= 1
        self.model[key] -= 1
        self.model += Counter()

    @rule(key=KEYS, times=st.integers(1, 6))
    def add(self, key, times):
        for _ in range(times):
            self.f.add(key)
        self.insert(key, times)

    @rule(keys=st.lists(KEYS, max_size=10))
    def update(self, keys):
        self.f.update(keys)
        for key in keys:
            self.insert(key)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove(self, data):
        key = data.draw(st.sampled_from(sorted(self.model, key=repr)))
        self.f.remove(key)
        self.delete(key)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove_many(self, data):
        keys = [key for key in sorted(self.model, key=repr)
                for _ in range(data.draw(st.integers(0, min(self.model[key], 2))))]
        assert self.f.remove_many(keys) == len(keys)
        for key in keys:
            self.delete(key)

    @rule(key=KEYS)
    def remove_absent(self, key):
        if self.model[key] or key in self.f:
            return
        before = bytes(self.f._payload())
        with pytest.raises(KeyError):
            self.f.remove(key)
        assert bytes(self.f._payload()) == before

    @invariant()
    def counters_are_exact(self):
        for key in KEY_POOL:
            for probe in self.f.probes(key):
                held = self.cells[probe.position]
                total = sum(held.values())
                assert probe.c == (self.c_max if probe.position in self.sticky else total)
                assert probe.a == sum(v * n for v, n in held.items()) % self.modulus  # a never saturates
                if probe.position not in self.sticky and total <= self.f.bh_order:
                    assert probe.y == held[probe.increment]  # Theorem 5's y_j, decoded exactly
                else:
                    assert probe.y is None
            if self.model[key]:
                assert key in self.f and self.f.count(key) >= min(self.model[key], self.c_max)
        assert self.f.num_keys == sum(self.model.values())


TestVariableIncrementMachine = VariableIncrementMachine.TestCase
TestVariableIncrementMachine.settings = settings(max_examples=50, stateful_step_count=20, deadline=None)


# ---- the paper's example and the decoding ----------------------------------------------------------------------------
def test_figure_6_decoding():
    """Example 2 of the Bloom-paradox paper: D = {1, 2, 4} is B_2 (h = 2)."""
    f = VICBF.from_size(100, 2, increments=B2)
    assert f.bh_order == 2 and f.num_increments == 3 and f.increments == B2
    increments, c, a = np.array([2, 4, 1, 2]), np.array([1, 2, 2, 4]), np.array([2, 8, 3, 7])
    # x: c1 = 1, a1 = 2 -> y1 = 1; c2 = 2, a2 = 8 = 4 + 4 -> y2 = 2. z: a1 = 3 = 1 + 2 -> y = 1; c2 = 4 > h.
    assert f._decode(increments, c, a).tolist() == [1, 2, 1, -1]
    assert bh_order(B2) == 2 and bh_order(DEFAULT_INCREMENTS) == 1 and bh_order((1, 2, 4, 8, 13)) == 2


def test_counters_many_is_the_batch_form_of_counters():
    f = VICBF(500, 0.01, increments=B2, seed=3)
    f.update(range(300))
    keys = np.arange(40).reshape(4, 10)
    table = f.counters_many(keys)
    assert table.shape == (4, 10, f.num_hashes)
    assert set(table.dtype.names) == {"position", "increment", "c", "a", "y"}
    assert f.probes(17) == tuple(Probe(int(p["position"]), int(p["increment"]), int(p["c"]), int(p["a"]),
                                         None if p["y"] < 0 else int(p["y"])) for p in table[1, 7])
    assert all(p.increment in B2 and p.c >= 1 for p in f.probes(17))
    assert [p.position for p in f.probes("x")] == f._positions("x")  # the same positions as a CBF
    assert (table["y"][table["c"] <= 2] >= 1).all()  # present keys: their increment is in every decoded multiset


# ---- saturation and removal ------------------------------------------------------------------------------------------
def test_fixed_counter_saturation_is_sticky():
    f = VICBF.from_size(1, 1)  # every key on the one position
    keys = list(range(20))
    f.update(keys)
    assert f.probes(0)[0].c == 15 and f.counters(0)[0] == 15 and f.saturated_count == 1
    for key in keys:
        f.remove(key)
        assert key in f
    assert f.probes(0)[0].c == 15 and f.num_keys == 0


def test_removing_a_certainly_absent_key_raises_and_changes_nothing():
    f = VICBF(1000, 0.01, seed=8)
    f.update(range(800))
    before = bytes(f._payload())
    absent = next(key for key in range(10**6, 10**7) if key not in f)
    with pytest.raises(KeyError):
        f.remove(absent)
    with pytest.raises(KeyError):
        f.remove_many(list(range(50)) + [absent])
    assert bytes(f._payload()) == before and f.num_keys == 800 and f.discard(absent) is False
    assert f.remove_many(range(400)) == 400 and f.contains_many(range(400, 800)).all()


# ---- false-positive rates --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("m,k,n,L", [(4000, 5, 1000, 4), (1000, 3, 500, 2), (10**5, 7, 10**4, 8), (300, 1, 10, 4)])
def test_general_formula_reduces_to_the_literature_d_l_formula(m, k, n, L):
    literature = dl_false_positive_rate(m, k, n, L)
    general = vicbf_false_positive_rate(m, k, n, increments=dl_increments(L), fixed_bits=None, variable_bits=None)
    assert math.isclose(general, literature, rel_tol=1e-9)
    with_c = vicbf_false_positive_rate(m, k, n, increments=dl_increments(L), fixed_bits=8, variable_bits=None)
    assert with_c < literature  # the fixed counter only adds rejections


@pytest.mark.filterwarnings("ignore::bloomwise.CapacityWarning")  # twice the capacity for a moment
@pytest.mark.parametrize("increments,layout", [(DEFAULT_INCREMENTS, "classic"), (DEFAULT_INCREMENTS, "partitioned"),
                                               (B2, "classic")])
def test_measured_fpr_matches_the_analytic_rate(increments, layout):
    """Exact binomial test, false-alarm probability 1e-6 (two-sided), after insertions and deletions."""
    n = 20_000
    f = VICBF(n, 0.01, increments=increments, layout=layout, seed=12)
    expected = vicbf_false_positive_rate(f.num_cells, f.num_hashes, n, increments=increments, layout=layout)
    assert expected <= 0.01
    f.update(np.arange(2 * n))
    f.remove_many(np.arange(n, 2 * n))  # a is exact modulo 16: deletions leave the counters of the rest alone
    assert f.contains_many(np.arange(n)).all()
    queries = 300_000
    hits = int(f.contains_many(np.arange(10**12, 10**12 + queries, dtype=np.uint64)).sum())
    assert_rate_matches(hits, queries, expected, f"VI-CBF {increments} {layout} m={f.num_cells} k={f.num_hashes}")
    if increments == DEFAULT_INCREMENTS:
        assert expected < dl_false_positive_rate(f.num_cells, f.num_hashes, n)


@pytest.mark.parametrize("increments", [DEFAULT_INCREMENTS, B2])
def test_lower_fpr_than_a_counting_filter_of_the_same_memory(increments):
    n, queries = 20_000, 300_000
    vi = VICBF.from_size(4 * n, 5 if increments == DEFAULT_INCREMENTS else 7, increments=increments, seed=1)
    cbf = CountingBloomFilter.from_size(8 * n, theory.optimal_num_hashes(8 * n, n), seed=1)  # 4-bit counters
    assert vi.nbytes == cbf.nbytes == 4 * n  # 32 bits per key each
    probes = np.arange(10**12, 10**12 + queries, dtype=np.uint64)
    rates = {}
    for f, expected in ((vi, vicbf_false_positive_rate(4 * n, vi.num_hashes, n, increments=increments)),
                        (cbf, theory.false_positive_rate(8 * n, n, cbf.num_hashes))):
        f.update(np.arange(n))
        hits = int(f.contains_many(probes).sum())
        assert_rate_matches(hits, queries, expected, type(f).__name__)
        rates[type(f).__name__] = hits / queries
    # theory: 0.0063 (D_4) or 0.0043 ({1, 2, 4}) against 0.0216
    assert rates["VariableIncrementCountingBloomFilter"] < rates["CountingBloomFilter"] / 3


def test_sizing():
    m, k = vicbf_optimal_size(10_000, 0.01)
    assert vicbf_false_positive_rate(m, k, 10_000) <= 0.01 < vicbf_false_positive_rate(m - 1, k, 10_000)
    f = VICBF(10_000, 0.01)
    assert (f.num_cells, f.num_hashes) == (m, k) and f.capacity == 10_000 and f.estimated_fpr() == 0
    f.update(range(10_000))
    assert math.isclose(f.estimated_fpr(), vicbf_false_positive_rate(m, k, 10_000))
    assert f.nbytes < CountingBloomFilter(10_000, 0.01).nbytes  # less memory for the same FPR


@pytest.mark.parametrize("kwargs,message", [
    ({"increments": (4, 16)}, "below 16"), ({"increments": (0, 1)}, "increments"), ({"increments": (2, 2)}, "distinct"),
    ({"fixed_bits": 3, "variable_bits": 4}, "8, 16 or 32"), ({"fixed_bits": 1, "variable_bits": 7}, "fixed_bits"),
    ({"layout": "blocked"}, "layout"), ({"fpr": 0}, "fpr"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VICBF(100, **{"fpr": 0.01, **kwargs})


# ---- persistence -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("split,increments", [((4, 4), DEFAULT_INCREMENTS), ((8, 8), B2), ((8, 24), (5, 9, 300))])
def test_round_trips(tmp_path, split, increments):
    f = VICBF(2000, 0.02, increments=increments, fixed_bits=split[0], variable_bits=split[1], seed=5)
    f.update(list(range(1500)) + [3, 3])
    for copy in (VICBF.from_bytes(f.to_bytes()), pickle.loads(pickle.dumps(f)), f.copy()):
        assert copy == f and copy.capacity == 2000 and copy.increments == increments and copy.num_keys == 1502
        assert copy.probes(3) == f.probes(3) and copy.count(3) >= 3
    f.save(tmp_path / "f.vicbf")
    assert VICBF.load(tmp_path / "f.vicbf") == f
    assert f != VICBF(2000, 0.02, increments=increments, fixed_bits=split[0], variable_bits=split[1], seed=6)
    header, _ = _format.loads(f.to_bytes())
    assert header.structure == _format.Structure.VARIABLE_INCREMENT
    assert dict(header.meta) == {"fixed_bits": split[0], "variable_bits": split[1],
                                 "increments": list(increments), "capacity": 2000, "fpr": 0.02}


def test_every_flipped_byte_and_every_truncation_is_detected():
    f = VICBF.from_size(60, 3, increments=B2, seed=5)
    f.update(["a", "b", "a"])
    data = f.to_bytes()
    for i in range(len(data)):
        corrupted = bytearray(data)
        corrupted[i] ^= 0x5A
        with pytest.raises(FormatError):
            VICBF.from_bytes(bytes(corrupted))
    for length in range(len(data)):
        with pytest.raises(FormatError):
            VICBF.from_bytes(data[:length])


def test_well_checksummed_but_impossible_files_are_refused():
    f = VICBF.from_size(60, 3, seed=5)
    header, cells = f._header(), bytearray(f._payload())
    cells[0] = 0x30  # c = 0 but a = 3
    with pytest.raises(FormatError, match="c = 0"):
        VICBF.from_bytes(_format.dumps(header, bytes(cells)))
    for meta in ({"fixed_bits": 4, "variable_bits": 4, "increments": [4, 99]},
                 {"fixed_bits": 4, "variable_bits": 5, "increments": [4]}, {"fixed_bits": 4, "variable_bits": 4}):
        with pytest.raises(FormatError):
            VICBF.from_bytes(_format.dumps(dataclasses.replace(header, meta=meta), bytes(f._payload())))
    with pytest.raises(FormatError, match="VariableIncrementCountingBloomFilter"):
        VICBF.from_bytes(CountingBloomFilter.from_size(60, 3).to_bytes())


def test_docstring_examples():
    import doctest

    import bloomwise.vicbf

    failures, _ = doctest.testmod(bloomwise.vicbf, optionflags=doctest.ELLIPSIS)
    assert failures == 0
