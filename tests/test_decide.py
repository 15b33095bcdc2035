"""The compiled decisions of the selective filters (bloomwise/_native/decide.pyx) against the reference Python code
(tests/paradox_reference.py): the same decisions and the same posteriors, bit for bit, over random filters, priors
and costs, including saturated counters and priors of 0 and 1; the cached state follows every change; no per-key
allocation on the Python heap."""
from __future__ import annotations

import gc
import math
import pickle
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bloomwise
from bloomwise._native import decide
from bloomwise.paradox import (
    CallablePrior,
    ClassPrior,
    ConstantPrior,
    CostModel,
    SampledPrior,
    SelectiveBloomFilter,
    SelectiveCountingBloomFilter,
)
from bloomwise.paradox.decisions import Decisions

import paradox_reference as ref

PRIOR_VALUES = st.one_of(st.sampled_from([0.0, 1.0, 1e-9, 0.5, 0.999999]), st.floats(0.0, 1.0))
ALPHAS = st.one_of(st.sampled_from([1.0, 5.0, 100.0, 1e-3]), st.floats(1e-4, 1e4))


def same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def assert_same_decision(got, want):
    assert got.member == want.member and got.filter_answer == want.filter_answer, (got, want)
    assert same_float(got.posterior, want.posterior), (got, want)
    assert same_float(got.expected_cost, want.expected_cost), (got, want)
    assert type(got) is type(want)


def assert_same_decisions(got, want):
    for name in ("member", "filter_answer", "consulted"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype == np.bool_ and np.array_equal(a, b), name
    for name in ("posterior", "expected_cost"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype == np.float64
        assert np.array_equal(a.view(np.uint64), b.view(np.uint64)), name  # bit for bit (NaN and -0.0 included)


def make_prior(kind: str, values: list[float]):
    if kind == "constant":
        return ConstantPrior(values[0])
    table = {i: v for i, v in enumerate(values)}
    if kind == "class":
        return ClassPrior(lambda key: len(key) % len(values), table)
    return CallablePrior(lambda key: table[len(key) % len(values)])


def query_keys(num_present: int, num_absent: int) -> list[str]:
    return [f"k{i}" for i in range(num_present)] + [f"absent-{i}" for i in range(num_absent)]


# ---- SelectiveBloomFilter ------------------------------------------------------------------------------------------
@settings(max_examples=80)
@given(
    m=st.integers(64, 4096), k=st.integers(1, 8), layout=st.sampled_from(["classic", "partitioned", "blocked"]),
    n=st.integers(0, 600), preload=st.integers(0, 50), kind=st.sampled_from(["constant", "class", "callable"]),
    values=st.lists(PRIOR_VALUES, min_size=1, max_size=4), alpha=ALPHAS, insert=st.booleans(), query=st.booleans(),
    rule=st.sampled_from(["exact", "theorem1"]), batch_insert=st.booleans(), numpy_keys=st.booleans(),
)
def test_bloom_decisions_equal_the_reference(m, k, layout, n, preload, kind, values, alpha, insert, query, rule,
                                             batch_insert, numpy_keys):
    if layout == "blocked":
        m = max(512, m // 512 * 512)
    bf = bloomwise.BloomFilter.from_size(m, k, layout=layout, seed=7)
    bf.update([f"pre{i}" for i in range(preload)])  # keys the selective filter does not count (FPR 0 with keys in)
    prior = make_prior(kind, values)
    f = SelectiveBloomFilter(bf, prior, CostModel(1.0, alpha), selective_insert=insert, selective_query=query,
                             rule=rule)
    keys = [f"k{i}" for i in range(n)]
    if batch_insert:
        f.update(keys)
    else:
        for key in keys:
            f.add(key)
    probe = query_keys(min(n, 200), 200) + [f"pre{i}" for i in range(preload)]
    for key in probe:
        assert_same_decision(f.query(key), ref.bloom_query(f, key))
    batch = np.array(probe) if numpy_keys else probe
    assert_same_decisions(f.query_many(batch), ref.bloom_query_many(f, batch))


@pytest.fixture(params=[True, False], ids=["dict-versions", "identities"])
def state_check(request):
    """Both ways a cached state is proven unchanged: dict versions (CPython 3.11) and the identities compared one by
    one (what 3.12 and later use; forced here with use_dict_versions(False))."""
    previous = decide.use_dict_versions(request.param)
    yield request.param
    decide.use_dict_versions(previous)


def test_use_dict_versions_switch_reports_the_previous_setting():
    import sys
    have = sys.version_info < (3, 12)
    first = decide.use_dict_versions(False)
    try:
        assert first == have and decide.use_dict_versions(False) is False
    finally:
        decide.use_dict_versions(first)
    assert decide.use_dict_versions(True) == have  # (restored: versions on where they exist)


@pytest.mark.parametrize("query", [True, False])
@pytest.mark.parametrize("prior", [ConstantPrior(0.0), ClassPrior(lambda key: key[0], {"p": 0.0, "a": 0.0}),
                                   CallablePrior(lambda key: 0.0)], ids=["constant", "class", "callable"])
def test_prior_of_zero_gives_posterior_zero_in_query_and_query_many_when_the_fpr_is_zero(prior, query):
    # issue 34: query said 0 and query_many NaN. The answer is 0 in both: a key the prior rules out is not made
    # possible by a "present" from the filter (posterior()'s rule), also where the FPR as built is 0 (n* = 0 keys
    # counted) and Bayes' P / (P + (1 - P) FPR) is 0 / 0.
    bf = bloomwise.BloomFilter.from_size(1024, 3, layout="classic")
    bf.add("present")
    f = SelectiveBloomFilter(bf, prior, CostModel(1.0, 5.0), selective_query=query)
    assert f.estimated_fpr() == 0.0
    single, batch = f.query("present"), f.query_many(["present", "absent"])
    assert single.filter_answer is True and batch.filter_answer.tolist() == [True, False]
    assert single.posterior == 0.0 and batch.posterior.tolist() == [0.0, 0.0]
    assert single.member is bool(batch.member[0]) and single.expected_cost == batch.expected_cost[0]


def test_bloom_state_follows_every_change(state_check):
    f = SelectiveBloomFilter({"num_cells": 2048, "num_hashes": 3, "layout": "classic"}, 0.01, 5)
    probe = query_keys(300, 300)

    def check():
        for key in probe[::7]:
            assert_same_decision(f.query(key), ref.bloom_query(f, key))
        assert_same_decisions(f.query_many(probe), ref.bloom_query_many(f, probe))

    check()
    for i in range(300):  # the FPR, so the threshold, moves with every key
        f.add(f"k{i}")
        if i % 50 == 0:
            check()
    f.update([f"x{i}" for i in range(100)])
    check()
    f.prior.p = 0.4          # the constant prior's value
    check()
    f.prior = ConstantPrior(1e-7)
    check()
    f.cost = CostModel(2.0, 1000.0)
    check()
    f.selective_query = False
    check()
    f.rule = "theorem1"
    check()
    f.prior = ClassPrior(lambda key: key[0], {"k": 0.5, "x": 1e-6, "a": 0.01})
    check()
    f.prior.table["k"] = 1e-9  # the same dict, changed in place: not seen by identity
    f.prior.table = dict(f.prior.table)
    check()


def test_sampled_prior_is_observed_once_per_query():
    def build():
        oracle_calls = []
        prior = SampledPrior(lambda key: oracle_calls.append(key) or key.startswith("k"), rate=0.5, seed=3)
        f = SelectiveBloomFilter({"num_cells": 4096, "num_hashes": 3, "layout": "classic"}, prior, 5)
        f.update([f"k{i}" for i in range(200)])
        return f, oracle_calls

    fast, calls_fast = build()
    slow, calls_slow = build()
    probe = query_keys(100, 100)
    for key in probe:
        assert_same_decision(fast.query(key), ref.bloom_query(slow, key))
    assert_same_decisions(fast.query_many(probe), ref.bloom_query_many(slow, probe))
    assert calls_fast == calls_slow and len(calls_fast) > 50


def test_pickled_selective_filter_recomputes_its_state():
    import pickle

    f = SelectiveBloomFilter({"num_cells": 2048, "num_hashes": 3, "layout": "classic"}, 0.3, 5)
    f.update([f"k{i}" for i in range(100)])
    f.query("k1")
    g = pickle.loads(pickle.dumps(f))
    assert g.query("k1") == f.query("k1") and g.query("zz") == f.query("zz")


def test_bad_prior_is_rejected():
    f = SelectiveBloomFilter({"num_cells": 2048, "num_hashes": 3, "layout": "classic"}, CallablePrior(lambda key: 0.5), 5)
    f.prior.fn = lambda key: 1.5   # CallablePrior checks its function's results
    with pytest.raises(ValueError, match="prior returned by fn must be a probability"):
        f.query("a")


# ---- SelectiveCountingBloomFilter ----------------------------------------------------------------------------------
@settings(max_examples=80)
@given(
    m=st.integers(16, 3000), k=st.integers(1, 12), layout=st.sampled_from(["classic", "partitioned"]),
    bits=st.sampled_from([4, 8, 16]), n=st.integers(0, 400), repeats=st.integers(1, 40),
    kind=st.sampled_from(["constant", "class", "callable"]), values=st.lists(PRIOR_VALUES, min_size=1, max_size=4),
    alpha=ALPHAS, query=st.booleans(), exact=st.booleans(), removed=st.integers(0, 20), numpy_keys=st.booleans(),
)
def test_counting_decisions_equal_the_reference(m, k, layout, bits, n, repeats, kind, values, alpha, query, exact,
                                                removed, numpy_keys):
    m = max(m, k)
    cbf = bloomwise.CountingBloomFilter.from_size(m, k, counter_bits=bits, layout=layout, seed=11)
    f = SelectiveCountingBloomFilter(cbf, make_prior(kind, values), CostModel(1.0, alpha), selective_query=query,
                                     exact=exact)
    f.update([f"k{i}" for i in range(n)])
    for _ in range(repeats):  # hot keys: with small m or 4-bit counters, many counters saturate
        f.update([f"k{i}" for i in range(min(n, 5))])
    f.remove_many([f"k{i}" for i in range(min(removed, n))])
    probe = query_keys(min(n, 150), 150)
    for key in probe:
        assert_same_decision(f.query(key), ref.counting_query(f, key))
    batch = np.array(probe) if numpy_keys else probe
    assert_same_decisions(f.query_many(batch), ref.counting_query_many(f, batch))


def test_counting_saturated_and_wide_counters():
    # 16-bit counters past the first table of 256 values; 4-bit counters at their maximum, exact and closed form
    for bits, repeats in ((16, 300), (4, 40), (8, 300)):
        for exact in (False, True):
            cbf = bloomwise.CountingBloomFilter.from_size(400, 3, counter_bits=bits, layout="partitioned")
            f = SelectiveCountingBloomFilter(cbf, 0.2, 3.0, exact=exact)
            f.update([f"k{i}" for i in range(100)])
            for _ in range(repeats):
                f.add("hot")
            probe = ["hot"] + query_keys(100, 100)
            assert max(cbf.counters("hot")) >= min(repeats, cbf.counter_max)
            for key in probe:
                assert_same_decision(f.query(key), ref.counting_query(f, key))
            assert_same_decisions(f.query_many(probe), ref.counting_query_many(f, probe))


def test_counting_state_follows_changes_and_empty_filter(state_check):
    cbf = bloomwise.CountingBloomFilter.from_size(1000, 4, layout="partitioned")
    f = SelectiveCountingBloomFilter(cbf, 0.05, 10.0)
    probe = query_keys(50, 50)

    def check():
        for key in probe[::5]:
            assert_same_decision(f.query(key), ref.counting_query(f, key))
        assert_same_decisions(f.query_many(probe), ref.counting_query_many(f, probe))

    check()                         # n = 0: posteriors 0, decided by the prior
    for i in range(60):
        cbf.add(f"k{i}")            # straight into the filter: n is read from it
        if i % 20 == 0:
            check()
    f.remove("k3")
    check()
    f.prior = ConstantPrior(1.0)
    check()
    f.prior = ConstantPrior(0.0)
    check()
    f.exact = True
    check()
    f.cost = CostModel(3.0, 0.5)
    f.selective_query = False
    check()


def test_counting_falls_back_for_other_filters():
    vi = bloomwise.VariableIncrementCountingBloomFilter.from_size(1000, 3)
    from bloomwise.paradox import SelectiveVariableIncrementCountingBloomFilter

    f = SelectiveVariableIncrementCountingBloomFilter(vi, 0.1, 5.0)
    f.update(["a", "b"])
    assert decide.counting_query_many(f, ["a"]) is None   # not a CountingBloomFilter: the Python path decides
    assert f.query("a").filter_answer is True and f.query("zz").filter_answer is False


def test_row_sum_follows_numpy():
    rng = np.random.default_rng(5)
    for k in range(1, 65):
        rows = rng.normal(size=(50, k)) * 10.0 ** rng.uniform(-8, 8, size=(50, k))
        want = rows.sum(axis=-1)
        got = np.array([decide._row_sum(r) for r in rows])
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64)), k


# ---- memory: no per-key allocation on the Python heap --------------------------------------------------------------
def _peak_bytes(fn):
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        return tracemalloc.get_traced_memory()[1] - base, result
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("counting", [False, True])
def test_batch_decisions_allocate_only_their_results(counting):
    n = 200_000
    keys = [f"https://example.org/path/{i}" for i in range(n)]
    if counting:
        f = SelectiveCountingBloomFilter({"num_cells": 2_000_000, "num_hashes": 5}, 0.3, 5.0)
    else:
        f = SelectiveBloomFilter({"num_cells": 2_000_000, "num_hashes": 5, "layout": "classic"}, 0.3, 5.0)
    f.update(keys[: n // 2])
    f.query_many(keys[:10])  # the state, computed once
    peak, result = _peak_bytes(lambda: f.query_many(keys))
    # a Python object per key (a float is 24 bytes) would add at least 24 bytes a key
    if counting:  # results: 3 bool and 2 float64 arrays (19 bytes a key), and the batch's hashes (8 bytes a key)
        assert peak < n * (19 + 8) + 256 * 1024, peak / n
    else:  # member, consulted and the filter's answers (3 bytes a key); the float arrays wait until they are read
        assert peak < n * 3 + 256 * 1024, peak / n
        peak, _ = _peak_bytes(lambda: (result.posterior, result.expected_cost))
        assert peak < n * 16 + 256 * 1024, peak / n
    assert len(result) == n


@pytest.mark.parametrize("prior", [0.3, ClassPrior(lambda key: key[-1], {"1": 0.5, "2": 1e-6}, default=0.01)])
def test_deferred_columns_are_those_of_the_query_time(prior):
    """SelectiveBloomFilter.query_many computes posterior and expected_cost when first read: from what the batch
    saw, whatever changed in the filter since; and the arrays cannot be changed under them."""
    f = SelectiveBloomFilter({"num_cells": 4096, "num_hashes": 3, "layout": "classic"}, prior, 5.0)
    f.update([f"k{i}" for i in range(150)])
    probe = query_keys(200, 200)
    want = ref.bloom_query_many(f, probe)
    got = f.query_many(probe)
    f.update([f"x{i}" for i in range(400)])   # the FPR, so every posterior after "present", moves
    f.cost = CostModel(1.0, 50.0)
    assert not np.array_equal(f.query_many(probe).posterior, want.posterior)
    assert_same_decisions(got, want)
    assert got.posterior is got.posterior and got.expected_cost is got.expected_cost  # computed once
    for name in ("member", "posterior", "filter_answer", "consulted", "expected_cost"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(got, name)[0] = 1
    with pytest.raises(AttributeError, match="read-only"):
        got.member = np.ones(len(probe), dtype=bool)
    fresh = f.query_many(probe)
    again = pickle.loads(pickle.dumps(fresh))  # a pickle carries every column, computed
    assert type(again) is Decisions and again._columns is None
    assert_same_decisions(again, fresh)
    assert [again[i] for i in range(5)] == [fresh[i] for i in range(5)]


def test_single_queries_with_a_constant_prior_allocate_nothing():
    f = SelectiveBloomFilter({"num_cells": 20_000, "num_hashes": 4, "layout": "classic"}, 0.3, 5.0)
    keys = [f"k{i}" for i in range(2000)]
    f.update(keys[:1000])
    first = [f.query(key) for key in keys]
    gc.collect()
    before = gc.get_count()[0]
    again = [f.query(key) for key in keys]   # each Decision is one of three precomputed tuples: nothing allocated
    assert all(a is b for a, b in zip(first, again))
    assert gc.get_count()[0] - before < 10   # (the list `again` itself)


def test_class_prior_defaults_and_missing_classes():
    def classify(key):
        return ["unhashable"] if key.startswith("u") else key[:2]

    probe = query_keys(100, 100) + ["u1", "zz"]
    for make in (lambda: SelectiveBloomFilter({"num_cells": 4096, "num_hashes": 3, "layout": "classic"}, prior, 5.0),
                 lambda: SelectiveCountingBloomFilter({"num_cells": 4096, "num_hashes": 3}, prior, 5.0)):
        prior = ClassPrior(classify, {"k1": 0.5, "ab": 1e-6, "k5": 0.01}, default=0.02)
        f = make()
        f.update([f"k{i}" for i in range(100)])
        reference = ref.bloom_query if isinstance(f, SelectiveBloomFilter) else ref.counting_query
        reference_many = ref.bloom_query_many if isinstance(f, SelectiveBloomFilter) else ref.counting_query_many
        for key in probe:
            assert_same_decision(f.query(key), reference(f, key))
        assert_same_decisions(f.query_many(probe), reference_many(f, probe))
        prior.default = 0.9  # the prior's default, changed: seen
        for key in probe:
            assert_same_decision(f.query(key), reference(f, key))
        assert_same_decisions(f.query_many(probe), reference_many(f, probe))
        f.prior = ClassPrior(classify, {"k1": 0.5})  # no default: a missing class is a KeyError naming it
        with pytest.raises(KeyError, match="no prior for class 'zz'"):
            f.query("zz")
        with pytest.raises(KeyError, match="no prior for class"):
            f.query_many(["k1", "u1"])


def test_class_prior_label_errors_propagate():
    class Broken:
        def __hash__(self):
            raise ValueError("label hash failed")

    def classify(key):
        return Broken() if key == "bad" else key[:2]

    for make in (lambda p: SelectiveBloomFilter({"num_cells": 4096, "num_hashes": 3}, p, 5.0),
                 lambda p: SelectiveCountingBloomFilter({"num_cells": 4096, "num_hashes": 3}, p, 5.0)):
        f = make(ClassPrior(classify, {"k1": 0.5}, default=0.02))
        f.update(["k1", "k2"])
        with pytest.raises(ValueError, match="label hash failed"):
            f.query("bad")
        with pytest.raises(ValueError, match="label hash failed"):
            f.query_many(["k1", "bad"])
        reference = ref.bloom_query if isinstance(f, SelectiveBloomFilter) else ref.counting_query
        assert_same_decision(f.query("k1"), reference(f, "k1"))  # and it goes on answering


def test_class_prior_table_changed_by_the_classifier_mid_batch(state_check):
    # labels are small ints (the same objects every time); the table changes at the tenth key of the query batch
    def make():
        queried = []  # the keys classified since the filter was built

        def classify(key):
            if queried is not None:
                queried.append(key)
                if len(queried) == 10:
                    prior.table[0] = 1e-9
                    prior.table[1] = 0.9
            return int(key[-1]) % 2

        prior = ClassPrior(classify, {0: 0.5, 1: 0.01})
        f = SelectiveBloomFilter({"num_cells": 4096, "num_hashes": 3}, prior, 5.0)
        queried = None
        f.update(keys[:30])
        queried = []
        return f

    keys = query_keys(30, 30)
    got = make().query_many(keys)
    assert_same_decisions(got, ref.bloom_query_many(make(), keys))
    assert got.posterior[2] != got.posterior[12]  # the same label (0) before and after the change


def test_counting_decisions_with_equal_posteriors_keep_their_own_filter_answer():
    # a prior of 0 gives the posterior 0.0 to present and absent keys alike, and to keys never asked: the Decision
    # made for one must not be handed to another (filter_answer True, False, None)
    keys = query_keys(50, 50)
    for selective_query, prior in ((False, ConstantPrior(0.0)),
                                   (True, CallablePrior(lambda key: 0.0 if key.endswith("7") else 0.5))):
        f = SelectiveCountingBloomFilter({"num_cells": 2048, "num_hashes": 3}, prior, 5.0,
                                         selective_query=selective_query)
        f.update(keys[:50])
        got = [f.query(key) for key in keys + keys[::-1]]
        assert {d.filter_answer for d in got} >= ({True, False} if not selective_query else {True, False, None})
        for key, decision in zip(keys + keys[::-1], got):
            assert_same_decision(decision, ref.counting_query(f, key))


@settings(max_examples=40, deadline=None)
@given(num_labels=st.integers(1, 300), num_in_table=st.integers(0, 300), default=st.one_of(st.none(), PRIOR_VALUES),
       seed=st.integers(0, 2**32 - 1))
def test_class_prior_many_labels_and_defaults_in_one_batch(num_labels, num_in_table, default, seed):
    # more label objects than the batch's label slots (they collide and evict each other), labels that are
    # distinct objects (large ints) or shared ones (small ints, one-letter str), some missing from the table
    rng = np.random.default_rng(seed)
    pool = [10**6 + i for i in range(num_labels // 2)] + [chr(97 + i % 26) * (1 + i // 26) for i in
                                                           range(num_labels - num_labels // 2)]
    table = {label: float(v) for label, v in zip(pool[:num_in_table], rng.random(num_in_table))}
    if default is None:
        pool = [label for label in pool if label in table] or [next(iter(table), "a")]
        table.setdefault(pool[0], 0.25)
    chosen = {f"key{i}": pool[int(j)] for i, j in enumerate(rng.integers(0, len(pool), 2000))}
    prior = ClassPrior(chosen.__getitem__, table, default=default)
    f = SelectiveBloomFilter({"num_cells": 1 << 14, "num_hashes": 3}, prior, 5.0)
    keys = list(chosen)
    f.update(keys[::3])
    assert_same_decisions(f.query_many(keys), ref.bloom_query_many(f, keys))


@pytest.mark.parametrize("prior", [0.3, 1e-9, 0.0, 1.0])
@pytest.mark.parametrize("bits", [4, 8])
def test_counting_batch_with_many_distinct_log_ratios(prior, bits):
    # a constant prior and thousands of consulted keys over widely spread counters: many distinct log-ratio sums,
    # so the posterior memo of counting_query_many has colliding and replaced slots (it must give the same bits)
    cbf = bloomwise.CountingBloomFilter.from_size(3000, 5, counter_bits=bits, layout="classic", seed=3)
    f = SelectiveCountingBloomFilter(cbf, prior, CostModel(1.0, 4.0))
    f.update([f"k{i}" for i in range(400)])
    for r in range(1, 30):
        f.update([f"k{i}" for i in range(0, 400, r)])   # counters from 1 up to saturation (15 for 4 bits)
    probe = query_keys(400, 4000)
    assert_same_decisions(f.query_many(probe), ref.counting_query_many(f, probe))
    assert_same_decisions(f.query_many(np.array(probe)), ref.counting_query_many(f, probe))
