"""Selective counting filters (Theorems 2, 4, 5): the decision logic over a small reference counting filter, and the
same over bloomwise.CountingBloomFilter / VariableIncrementCountingBloomFilter once they exist."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import bloomwise
from bloomwise.paradox import (
    ClassPrior,
    ConstantPrior,
    CostModel,
    SelectiveCountingBloomFilter,
    SelectiveVariableIncrementCountingBloomFilter,
    cbf_posterior,
    decision_threshold,
    vicbf_posterior,
)


class ReferenceCBF:
    """A tiny partitioned counting filter in pure Python (a test double with the CountingBloomFilter API)."""

    def __init__(self, num_counters, num_hashes, counter_bits=4):
        self.num_cells, self.num_hashes, self.counter_bits = num_counters, num_hashes, counter_bits
        self.layout = "partitioned"
        self.c = [0] * num_counters
        self.top = (1 << counter_bits) - 1

    def _pos(self, key):
        m, k = self.num_cells, self.num_hashes
        digest = hashlib.blake2b(repr(key).encode(), digest_size=8 * k).digest()
        out = []
        for i in range(k):
            lo, hi = i * m // k, (i + 1) * m // k
            out.append(lo + int.from_bytes(digest[8 * i:8 * i + 8], "little") % (hi - lo))
        return out

    def add(self, key):
        for p in self._pos(key):
            self.c[p] = min(self.c[p] + 1, self.top)

    def update(self, keys):
        for key in keys:
            self.add(key)

    def remove(self, key):
        pos = self._pos(key)
        if any(self.c[p] == 0 for p in pos):
            raise KeyError(key)
        for p in pos:
            if self.c[p] != self.top:
                self.c[p] -= 1

    def remove_many(self, keys):
        for key in keys:
            self.remove(key)

    def counters(self, key):
        return tuple(self.c[p] for p in self._pos(key))

    def counters_many(self, keys):
        return np.array([self.counters(key) for key in keys], dtype=np.int64).reshape(-1, self.num_hashes)

    def __contains__(self, key):
        return min(self.counters(key)) > 0

    def contains_many(self, keys):
        return np.array([key in self for key in keys], dtype=bool)


def _prior():
    return ClassPrior(lambda key: key[0], {"a": 0.5, "b": 0.02, "c": 1e-9})


def _filled(**kwargs):
    cbf = ReferenceCBF(400, 3)
    f = SelectiveCountingBloomFilter(cbf, _prior(), CostModel(1.0, 5.0), **kwargs)
    f.update([f"a{i}" for i in range(40)] + [f"b{i}" for i in range(40)] + [f"c{i}" for i in range(20)])
    return f, cbf


def test_posterior_and_decision_are_theorems_2_and_4():
    f, cbf = _filled()
    assert f.num_keys == 100
    keys = [f"{cls}{i}" for cls in "ab" for i in range(80)]
    d = f.query_many(keys)
    for key, dec in zip(keys, d):
        counters = cbf.counters(key)
        expected = cbf_posterior(counters, 400, 100, _prior()(key))
        assert dec.posterior == pytest.approx(expected, rel=1e-12, abs=1e-300)
        assert dec.filter_answer == (min(counters) > 0)
        assert dec.member == (expected >= decision_threshold(5))
        assert f.query(key) == dec


def test_keys_below_the_skip_threshold_are_not_consulted_and_could_not_have_been_positive():
    f, cbf = _filled()
    assert 1e-9 < 0.02 and f.skip_threshold > 1e-9
    d = f.query("c3")
    assert d.filter_answer is None and not d.member and d.posterior == 1e-9
    # even all counters at their maximum would not make a key of that prior worth a "present"
    assert cbf_posterior([15, 15, 15], 400, 100, 1e-9) < decision_threshold(5)
    just_above = f.skip_threshold * 1.0001
    assert cbf_posterior([15, 15, 15], 400, 100, just_above) >= decision_threshold(5)
    assert "c3" in f  # the plain answer is unchanged


@pytest.mark.parametrize("layout", ["partitioned", "classic"])
def test_exact_skip_threshold_is_tight(layout):
    cbf = ReferenceCBF(400, 3)
    cbf.layout = layout
    f = SelectiveCountingBloomFilter(cbf, _prior(), 5, exact=True, num_items=100)
    best = [15, 15, 15]
    kwargs = dict(exact=True, layout=layout, counter_bits=4)
    assert cbf_posterior(best, 400, 100, f.skip_threshold * 0.999, **kwargs) < decision_threshold(5)
    assert cbf_posterior(best, 400, 100, f.skip_threshold * 1.001, **kwargs) >= decision_threshold(5)
    # and no other counter vector does better than the saturated one
    assert all(cbf_posterior([a, b, 15], 400, 100, 0.001, **kwargs) <= cbf_posterior(best, 400, 100, 0.001, **kwargs)
               for a in range(1, 16) for b in range(1, 16))


def test_plain_answers_without_selective_query():
    f, cbf = _filled(selective_query=False)
    keys = [f"{cls}{i}" for cls in "abc" for i in range(60)]
    d = f.query_many(keys)
    assert d.consulted.all()
    assert np.array_equal(d.member, cbf.contains_many(keys))


def test_item_count_follows_adds_and_removes():
    f, cbf = _filled()
    f.add("a99")
    f.remove("a99")
    assert f.num_keys == 100
    assert f.discard("a1") and f.num_keys == 99
    f.remove_many(["a2", "a3"])
    assert f.num_keys == 97
    absent = next(f"z{i}" for i in range(10_000) if f"z{i}" not in cbf)
    with pytest.raises(KeyError):
        f.remove(absent)
    assert not f.discard(absent)
    assert f.num_keys == 97
    assert "SelectiveCountingBloomFilter" in repr(f)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 200)), max_size=40))
def test_members_with_a_high_prior_are_found(keys):
    f, _ = _filled()
    members = [f"a{i}" for i in range(40)]
    assert f.query_many(members).member.all()  # prior 0.5: any non-zero counters suffice at alpha = 5
    probe = [f"{c}{i}" for c, i in keys]
    d = f.query_many(probe)
    assert len(d) == len(probe)


class ReferenceVICBF(ReferenceCBF):
    """Reference B_h filter with D = {1, 2, 4} (a B_2 sequence, the paper's Fig. 6), with the API of
    bloomwise.VariableIncrementCountingBloomFilter: counters_many gives fields c and y (-1 where c > h)."""

    increments = (1, 2, 4)
    num_increments = 3
    bh_order = 2
    fixed_bits = 8

    def __init__(self, num_positions, num_hashes):
        super().__init__(num_positions, num_hashes, counter_bits=8)
        self.num_keys = 0
        self.a = [[] for _ in range(num_positions)]  # the multiset of increments at each position

    def _incs(self, key):
        digest = hashlib.sha256(repr(key).encode()).digest()
        return [self.increments[digest[i] % 3] for i in range(self.num_hashes)]

    def add(self, key):
        self.num_keys += 1
        for p, v in zip(self._pos(key), self._incs(key)):
            self.c[p] += 1
            self.a[p].append(v)

    def counters_many(self, keys):
        out = np.zeros((len(keys), self.num_hashes), dtype=[("c", np.uint32), ("y", np.int32)])
        for i, key in enumerate(keys):
            for j, (p, v) in enumerate(zip(self._pos(key), self._incs(key))):
                out[i, j] = (self.c[p], self.a[p].count(v) if self.c[p] <= self.bh_order else -1)
        return out

    def __contains__(self, key):
        return all(self.c[p] > 0 and (self.c[p] > self.bh_order or v in self.a[p])
                   for p, v in zip(self._pos(key), self._incs(key)))


def test_variable_increment_posterior_is_theorem_5():
    vf = ReferenceVICBF(300, 2)
    f = SelectiveVariableIncrementCountingBloomFilter(vf, _prior(), 5)
    f.update([f"a{i}" for i in range(50)] + [f"b{i}" for i in range(50)])
    assert f.num_keys == 100
    keys = [f"{cls}{i}" for cls in "ab" for i in range(100)]
    d = f.query_many(keys)
    for key, dec in zip(keys, d):
        probes = vf.counters_many([key])
        expected = float(vicbf_posterior(probes["c"].astype(int), probes["y"].astype(int), 300, 100, 3,
                                         _prior()(key))[0])
        assert dec.posterior == pytest.approx(expected, rel=1e-12, abs=1e-300)
        assert dec.member == (expected >= 1 / 6)
        assert dec.filter_answer == (key in vf)
    # members are never rejected: their own increment is always among the decoded addends
    assert d.member[: 50].all()


def test_needs_the_counting_api():
    with pytest.raises(TypeError, match="filter_or_params"):
        SelectiveCountingBloomFilter(bloomwise.BloomFilter.from_size(64, 2, layout="classic"), 0.1, 5)
    with pytest.raises(TypeError, match="exact"):
        SelectiveCountingBloomFilter(ReferenceCBF(10, 2), 0.1, 5, exact="yes")


# --- the real structures -------------------------------------------------------------------------------------------


def test_over_the_real_counting_filter():
    cbf = bloomwise.CountingBloomFilter.from_size(2000, 4, counter_bits=4, layout="partitioned", seed=5)
    f = SelectiveCountingBloomFilter(cbf, _prior(), 5)
    members = [f"a{i}" for i in range(200)] + [f"b{i}" for i in range(200)]
    f.update(members)
    d = f.query_many(members + [f"b-x{i}" for i in range(2000)])
    counters = np.asarray(cbf.counters_many(members))
    assert np.allclose(d.posterior[:400], cbf_posterior(counters, 2000, 400, np.array([0.5] * 200 + [0.02] * 200)))
    assert d.member[:200].all()
    for key in members[:20]:
        assert f.query(key).posterior == pytest.approx(
            cbf_posterior(list(cbf.counters(key)), 2000, 400, _prior()(key)))


def test_table_iii_ci_sized():
    from bloomwise.paradox.simulation import Population, counting_trial, expected_counting

    population = Population(members_per_type=32)
    for c in (4, 10):
        runs = [counting_trial(population, c, 5, seed=s) for s in range(2)]
        for variant in ("cbf", "selective"):
            cost = np.mean([r[variant].rates(population, 5)[2] for r in runs])
            expected = expected_counting(population, c, 5, variant)[2]
            assert cost == pytest.approx(expected, rel=0.25), (c, variant)


@pytest.mark.parametrize("increments", [(1, 2, 4), (4, 5, 6, 7)])
def test_over_the_real_variable_increment_filter(increments):
    vf = bloomwise.VariableIncrementCountingBloomFilter.from_size(3000, 3, increments=increments, layout="partitioned",
                                                                  seed=2)
    f = SelectiveVariableIncrementCountingBloomFilter(vf, _prior(), 5)
    members = [f"a{i}" for i in range(200)] + [f"b{i}" for i in range(200)]
    f.update(members)
    assert f.num_keys == vf.num_keys == 400
    probe = members + [f"b-x{i}" for i in range(3000)]
    d = f.query_many(probe)
    assert d.member[:200].all()
    rows = vf.counters_many(probe)
    priors = np.array([_prior()(key) for key in probe])
    expected = vicbf_posterior(rows["c"].astype(np.int64), rows["y"].astype(np.int64), 3000, 400,
                               vf.num_increments, priors)
    assert np.allclose(d.posterior, np.where(d.consulted, expected, priors))
    assert np.array_equal(d.filter_answer[d.consulted], vf.contains_many(probe)[d.consulted])
    for key in probe[:10] + probe[-10:]:
        assert f.query(key) == d[probe.index(key)]


def test_peer_probabilities_feed_the_query_order():
    from bloomwise.paradox import optimal_query_order, peer_probabilities

    peers = [bloomwise.CountingBloomFilter.from_size(900, 3, layout="partitioned", seed=s) for s in range(3)]
    for j, peer in enumerate(peers):
        peer.update([f"p{i}" for i in range(100 * j, 100 * j + 150)])
    key = "p120"  # held by peers 0 and 1
    probs = peer_probabilities(key, peers, [0.3, 0.3, ConstantPrior(0.3)])
    for peer, p in zip(peers, probs):
        counters = peer.counters(key)
        assert p == (0.0 if min(counters) == 0 else pytest.approx(cbf_posterior(counters, 900, 150, 0.3)))
    plan = optimal_query_order(probs, 1.0, 20.0)
    assert set(plan.peers) <= {j for j, p in enumerate(probs) if p > 0.05}
    with pytest.raises(ValueError, match="priors"):
        peer_probabilities(key, peers, [0.1, 0.2])
