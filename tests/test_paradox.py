"""bloomwise.paradox: the pure functions, costs, priors and the Selective Bloom filter (Rottenstreich & Keslassy)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from bloomwise import BloomFilter, theory
from bloomwise.paradox import (
    CallablePrior,
    ClassPrior,
    ConstantPrior,
    CostModel,
    Decision,
    Prior,
    SampledPrior,
    SelectiveBloomFilter,
    cbf_error_rates,
    cbf_expected_cost,
    cbf_optimal_num_hashes,
    cbf_posterior,
    decision_threshold,
    expected_query_cost,
    min_bits_per_item,
    optimal_query_order,
    paradox_threshold,
    posterior,
    theorem1_fpr,
    theorem1_threshold,
    vicbf_posterior,
)
from bloomwise.paradox import optimal_k as _optimal_k
from bloomwise.paradox.proxies import _brute_force

probabilities = st.floats(0.0, 1.0, allow_nan=False)
open_probabilities = st.floats(1e-12, 1.0 - 1e-9, allow_nan=False)
alphas = st.floats(1e-3, 1e4, allow_nan=False)


# --- the paper's numbers ----------------------------------------------------------------------------------------


def test_intro_example_posterior_is_about_one_in_a_thousand():
    # Section I.A: cache of 10^4 items out of 10^10 (prior 1e-6), filter FPR 1e-3.
    p = posterior(1e-6, 1e-3)
    assert p == pytest.approx(1e-6 / (1e-6 + (1 - 1e-6) * 1e-3), rel=1e-12)
    assert 9.9e-4 < p < 1.0e-3
    # Figure 1(b): |B| = 10^4 + 1e-3 (10^10 - 10^4) ~ 10^7 positives, of which 10^4 are right.
    positives = 1e4 + 1e-3 * (1e10 - 1e4)
    assert 1e4 / positives == pytest.approx(p, rel=1e-9)


def test_intro_example_is_a_paradox_for_the_cache_costs():
    # Cache costs 1, main memory 10: a false positive wastes 1, a false negative wastes 10 - 1 = 9.
    cost = CostModel(false_positive=1.0, false_negative=9.0)
    assert not cost.decide(posterior(1e-6, 1e-3))
    assert 1e-6 < paradox_threshold(1e-3, cost.alpha)


def test_section_iv_b_example_posterior():
    # Pr(x in S) = 1e-6 and FPR 1e-3: the filter is right with probability ~1e-3.
    assert posterior(1e-6, 1e-3) == pytest.approx(1e-3, rel=2e-3)


@pytest.mark.parametrize("prior, alpha, bits", [
    (1e-5, 1.0, 23.96),   # what Theorem 1 gives; the paper prints 28.7 here (a known defect of the printed text)
    (1e-5, 0.1, 28.76),   # the 28.7 of the text corresponds to alpha = 0.1 ...
    (1e-6, 1.0, 28.76),   # ... or to prior 1e-6 at alpha = 1
])
def test_theorem1_bits_per_item(prior, alpha, bits):
    assert min_bits_per_item(prior, alpha) == pytest.approx(bits, abs=0.005)


def test_the_printed_28_7_is_not_theorem1_for_prior_1e5_alpha_1():
    assert abs(min_bits_per_item(1e-5, 1.0) - 28.7) > 4


def test_min_bits_per_item_edges():
    assert min_bits_per_item(0.0, 5) == math.inf
    assert min_bits_per_item(1.0, 5) == 0.0
    assert min_bits_per_item(1 / 6, 5) == 0.0  # prior alone already says "present"
    assert min_bits_per_item(0.2, 5) == 0.0
    assert min_bits_per_item(0.1, 5) == pytest.approx(math.log2(1.8) / math.log(2))


@given(prior=st.floats(1e-9, 0.15), alpha=alphas)
def test_min_bits_per_item_is_the_theorem1_boundary(prior, alpha):
    b = min_bits_per_item(prior, alpha)
    assume(0 < b < 200)
    assert theorem1_threshold(b, alpha) == pytest.approx(prior, rel=1e-9)
    assert theorem1_threshold(b * 1.01, alpha) < prior < theorem1_threshold(b * 0.99, alpha)


def test_theorem1_threshold_table_ii_values():
    # 4 bits per key: alpha = 100 puts the threshold between 2^-10 and 2^-9 (types 8..13 are paradox types),
    # alpha = 5 between 2^-6 and 2^-5 (types 4..13).
    assert 2**-10 < theorem1_threshold(4, 100) < 2**-9
    assert 2**-6 < theorem1_threshold(4, 5) < 2**-5


@given(b=st.floats(0.0, 60.0), alpha=alphas)
def test_theorem1_threshold_is_paradox_threshold_of_theorem1_fpr(b, alpha):
    assert theorem1_threshold(b, alpha) == pytest.approx(paradox_threshold(theorem1_fpr(b), alpha), rel=1e-12)


def test_theorem1_fpr_is_the_optimal_k_rate():
    assert theorem1_fpr(10) == pytest.approx(0.6185**10, rel=1e-3)
    assert theorem1_fpr(0) == 1.0


def test_decision_threshold_theorem4():
    assert decision_threshold(5) == pytest.approx(1 / 6)
    assert CostModel(2.0, 10.0).decision_threshold == pytest.approx(decision_threshold(5))
    # Section VIII.C: alpha = 2.4 -> 1 / 3.4
    assert decision_threshold(2.4) == pytest.approx(1 / 3.4)


# --- properties of the posterior ---------------------------------------------------------------------------------


@given(prior=open_probabilities, fpr=st.floats(1e-12, 1.0), alpha=alphas)
def test_trusting_a_positive_pays_iff_prior_at_least_paradox_threshold(prior, fpr, alpha):
    threshold = paradox_threshold(fpr, alpha)
    assume(abs(prior - threshold) > 1e-9 * threshold)
    trusted = CostModel.from_alpha(alpha).decide(posterior(prior, fpr))
    assert trusted == (prior >= threshold)


@given(p1=probabilities, p2=probabilities, fpr=st.floats(1e-9, 1.0))
def test_posterior_increases_with_prior(p1, p2, fpr):
    lo, hi = sorted((p1, p2))
    assert posterior(lo, fpr) <= posterior(hi, fpr) + 1e-15


@given(prior=probabilities, f1=probabilities, f2=probabilities)
def test_posterior_decreases_with_fpr_and_is_at_least_prior(prior, f1, f2):
    lo, hi = sorted((f1, f2))
    assert posterior(prior, hi) <= posterior(prior, lo) + 1e-15
    assert posterior(prior, hi) >= prior - 1e-15


def test_posterior_arrays_match_scalars():
    priors = np.array([0.0, 1e-6, 0.01, 0.5, 1.0])
    out = posterior(priors, 0.01)
    assert out.shape == (5,)
    assert out.tolist() == pytest.approx([posterior(float(p), 0.01) for p in priors])
    assert paradox_threshold(np.array([0.1, 0.01]), 5).tolist() == pytest.approx(
        [paradox_threshold(0.1, 5), paradox_threshold(0.01, 5)])


# --- counting filters: Theorem 2, Corollary 3, Theorem 5 ----------------------------------------------------------


def _theorem2(counters, m, n, prior):
    k = len(counters)
    num = m**k * math.prod(counters) * prior
    return num / (num + (n * k) ** k * (1 - prior))


def test_cbf_posterior_is_theorem2():
    assert cbf_posterior([1, 10], 1000, 100, 0.01) == pytest.approx(_theorem2([1, 10], 1000, 100, 0.01))
    assert cbf_posterior([3, 2, 1], 3000, 500, 0.2) == pytest.approx(_theorem2([3, 2, 1], 3000, 500, 0.2))


def test_cbf_posterior_example_1():
    # Fig. 4: x hits counters (1, 10), y hits (5, 5): same prior, y is the more credible member.
    x = cbf_posterior([1, 10], 9, 6, 0.1)
    y = cbf_posterior([5, 5], 9, 6, 0.1)
    assert y > x


def test_cbf_posterior_zero_counter_means_absent():
    assert cbf_posterior([4, 0, 7], 100, 10, 0.9) == 0.0
    assert cbf_posterior([4, 0, 7], 100, 10, 1.0) == 0.0
    assert cbf_posterior([0, 0], 100, 0, 0.5) == 0.0


def test_cbf_posterior_rejects_counters_in_an_empty_filter():
    with pytest.raises(ValueError, match="num_items"):
        cbf_posterior([1, 2], 100, 0, 0.5)


@given(counters=st.lists(st.integers(1, 15), min_size=1, max_size=6), prior=open_probabilities)
def test_cbf_posterior_depends_only_on_the_product(counters, prior):
    # Corollary 3: any rearrangement with the same product gives the same posterior.
    m, n = 60, 10
    base = cbf_posterior(counters, m, n, prior)
    assert cbf_posterior(list(reversed(counters)), m, n, prior) == pytest.approx(base, rel=1e-9, abs=1e-300)
    product = math.prod(counters)
    same_product = [product] + [1] * (len(counters) - 1)
    assert cbf_posterior(same_product, m, n, prior) == pytest.approx(base, rel=1e-9, abs=1e-300)


@given(a=st.lists(st.integers(1, 15), min_size=3, max_size=3), b=st.lists(st.integers(1, 15), min_size=3, max_size=3),
       prior=open_probabilities)
def test_cbf_posterior_increases_with_the_product(a, b, prior):
    pa, pb = cbf_posterior(a, 300, 50, prior), cbf_posterior(b, 300, 50, prior)
    if math.prod(a) < math.prod(b):
        assert pa <= pb
    elif math.prod(a) > math.prod(b):
        assert pa >= pb


@given(counters=st.lists(st.integers(1, 14), min_size=1, max_size=5), prior=open_probabilities,
       n=st.integers(20, 2000))
def test_exact_binomial_variant_equals_theorem2_for_the_partitioned_layout(counters, prior, n):
    # Pr(1 + Bin(n-1, k/m) = c) / Pr(Bin(n, k/m) = c) = c m / (n k) exactly: Theorem 2 is exact for this layout.
    m = 8 * n
    closed = cbf_posterior(counters, m, n, prior)
    exact = cbf_posterior(counters, m, n, prior, exact=True, layout="partitioned")
    assert exact == pytest.approx(closed, rel=1e-7, abs=1e-300)


def test_exact_binomial_variant_classic_and_saturation():
    m, n = 4000, 500
    c = [2, 3, 1, 4, 2]
    closed = cbf_posterior(c, m, n, 0.05)
    classic = cbf_posterior(c, m, n, 0.05, exact=True, layout="classic")
    assert classic == pytest.approx(closed, rel=0.05)  # close for large m, not equal
    assert classic != closed
    # A saturated 4-bit counter means ">= 15": its evidence is a tail ratio, finite and positive.
    sat = cbf_posterior([15, 1, 1, 1, 1], m, n, 0.05, exact=True, counter_bits=4)
    plain = cbf_posterior([15, 1, 1, 1, 1], m, n, 0.05, exact=True)
    assert 0 < sat < 1 and 0 < plain < 1 and sat != plain


def test_cbf_posterior_batch_matches_rows():
    rows = np.array([[1, 2, 3], [0, 5, 5], [7, 7, 7], [1, 1, 1]])
    priors = np.array([0.1, 0.5, 1e-4, 0.9])
    out = cbf_posterior(rows, 500, 100, priors)
    assert out.shape == (4,)
    assert out.tolist() == pytest.approx([cbf_posterior(r, 500, 100, float(p)) for r, p in zip(rows, priors)])
    assert cbf_posterior(rows, 500, 100, 0.3).tolist() == pytest.approx(
        [cbf_posterior(r, 500, 100, 0.3) for r in rows])


def test_vicbf_posterior_example_2():
    # D = {1, 2, 4} (l = 3), h = 2. x: c = (1, 2), decoded y = (1, 2): delta = (3*1)(3*2) = 18.
    # z: c = (2, 4), first decoded with y = 1, second not (c = 4 > h): delta = (3*1)*4 = 12.
    m, n, k, prior = 100, 20, 2, 0.1
    for counters, mult, delta in (([1, 2], [1, 2], 18), ([2, 4], [1, None], 12)):
        expected = m**k * delta * prior / (m**k * delta * prior + (n * k) ** k * (1 - prior))
        assert vicbf_posterior(counters, mult, m, n, 3, prior) == pytest.approx(expected)


def test_vicbf_posterior_reduces_to_theorem2_without_decoding():
    c = [3, 1, 4]
    assert vicbf_posterior(c, [-1, -1, -1], 300, 40, 4, 0.2) == pytest.approx(cbf_posterior(c, 300, 40, 0.2))


def test_vicbf_posterior_rejects_a_key_whose_increment_is_missing():
    assert vicbf_posterior([1, 2], [0, 2], 100, 20, 3, 0.9) == 0.0
    with pytest.raises(ValueError, match="exceed"):
        vicbf_posterior([1, 2], [2, 1], 100, 20, 3, 0.5)


# --- section V.C: expected cost and k ----------------------------------------------------------------------------


def _monte_carlo_rates(k, m, n, prior, alpha, trials, rng):
    p = k / m
    nonmember = np.minimum(rng.binomial(n, p, size=(trials, k)), 15)
    member = np.minimum(1 + rng.binomial(n - 1, p, size=(trials, k)), 15)
    threshold = decision_threshold(alpha)
    fpr = np.mean(cbf_posterior(nonmember, m, n, prior) >= threshold)
    fnr = np.mean(cbf_posterior(member, m, n, prior) < threshold)
    return fpr, fnr


@pytest.mark.parametrize("k, prior", [(3, 2**-6), (6, 2**-8), (4, 0.05)])
def test_cbf_error_rates_match_monte_carlo(k, prior):
    m, n, alpha, trials = 8 * 800, 800, 5.0, 200_000
    fpr, fnr = cbf_error_rates(k, m, n, prior, alpha)
    mc_fpr, mc_fnr = _monte_carlo_rates(k, m, n, prior, alpha, trials, np.random.default_rng(k))
    for theory_rate, observed in ((fpr, mc_fpr), (fnr, mc_fnr)):
        sd = math.sqrt(max(theory_rate * (1 - theory_rate), 1e-12) / trials)
        assert abs(observed - theory_rate) <= 6 * sd + 1e-5, (theory_rate, observed)


@given(k=st.integers(1, 6), bpe=st.integers(2, 12), prior=st.floats(1e-6, 0.5), alpha=st.floats(0.1, 200))
def test_selective_cbf_never_costs_more_than_either_naive_policy(k, bpe, prior, alpha):
    n = 500
    m = bpe * n
    assume(k <= m)
    cost = cbf_expected_cost(k, m, n, prior, alpha)
    always_absent = prior * alpha
    plain = (1 - prior) * theory.false_positive_rate(m, n, k, layout="partitioned")  # saturation ignored: tiny
    assert cost <= min(always_absent, plain) * (1 + 1e-6) + 1e-9


def test_grid_fallback_agrees_with_exact_products():
    pmf = _optimal_k.counter_pmf(3328, 8 / 13312, 0, 15)
    values = np.flatnonzero(pmf[1:] > 1e-17) + 1
    thresholds = np.array([0.5, 3.3, 17.2, 99.5, 1234.5])
    exact = _optimal_k._product_tails_exact(values, pmf[values], 8, thresholds)
    grid = _optimal_k._product_tails_grid(values, pmf[values], 8, thresholds)
    assert grid == pytest.approx(exact, abs=1e-9)


def test_optimal_num_hashes_is_the_argmin():
    m, n, priors, alpha = 2000, 400, [0.02, 0.2], 3.0
    costs = [cbf_expected_cost(k, m, n, priors, alpha) for k in range(1, 13)]
    best = cbf_optimal_num_hashes(m, n, priors, alpha, max_hashes=12)
    assert costs[best - 1] == min(costs)


def test_expected_cost_reproduces_table_iii_expectation():
    priors = [2.0**-e for e in range(3, 16)]
    weights = [2.0**e for e in range(3, 16)]
    universe = 256 * (2**16 - 8)
    for c, k, paper in ((4, 3, 1.42e4), (6, 4, 1.25e4), (8, 6, 1.05e4), (10, 7, 8.61e3)):
        value = cbf_expected_cost(k, c * 3328, 3328, priors, 5, weights=weights) * universe
        assert value == pytest.approx(paper, rel=0.01)


# --- section VII: proxies ----------------------------------------------------------------------------------------


@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.1, 10.0)), min_size=0, max_size=5),
       st.floats(0.5, 50.0))
def test_theorem6_order_is_optimal(peers, origin_cost):
    probs = [p for p, _ in peers]
    costs = [c for _, c in peers]
    plan = optimal_query_order(probs, costs, origin_cost)
    assert plan.expected_cost == pytest.approx(_brute_force(probs, costs, origin_cost), rel=1e-9, abs=1e-12)
    ratios = [probs[j] / costs[j] for j in plan.peers]
    assert ratios == sorted(ratios, reverse=True)
    assert all(r > 1 / origin_cost for r in ratios)


def test_theorem7_equal_costs():
    plan = optimal_query_order([0.3, 0.8, 0.05, 0.6], 1.0, origin_cost=10.0)
    assert plan.peers == (1, 3, 0)  # p = 0.05 < tau / omega = 0.1: go to the origin instead
    assert plan.ends_at_origin
    sure = optimal_query_order([0.3, 1.0, 0.9], 1.0, origin_cost=10.0)
    assert sure.peers == (1,) and not sure.ends_at_origin and sure.expected_cost == 1.0


def test_expected_query_cost_by_hand():
    assert expected_query_cost([1, 0], [0.5, 0.25], [2.0, 1.0], 8.0) == pytest.approx(1 + 0.75 * 2 + 0.375 * 8)
    assert expected_query_cost([], [0.5], 1.0, 8.0) == 8.0
    with pytest.raises(ValueError, match="order"):
        expected_query_cost([0, 0], [0.5], 1.0, 8.0)


# --- costs and priors --------------------------------------------------------------------------------------------


def test_cost_model():
    c = CostModel(false_positive=2.0, false_negative=10.0)
    assert c.alpha == 5.0
    assert c.expected_cost(0.1, True) == pytest.approx(1.8)
    assert c.expected_cost(0.1, False) == pytest.approx(1.0)
    assert c.decide(0.17) and not c.decide(0.16)
    tie = CostModel(1.0, 3.0)  # threshold 1/4, exactly representable: a tie answers "present"
    assert tie.decide(0.25) and not tie.decide(0.25 - 1e-12)
    assert CostModel.from_alpha(100).alpha == 100


def test_constant_and_callable_priors():
    assert ConstantPrior(0.25).probabilities(["a", "b"]).tolist() == [0.25, 0.25]
    prior = CallablePrior(lambda key: 0.5 if key.startswith("hot") else 0.001)
    assert prior("hot1") == 0.5 and prior("cold") == 0.001
    vec = CallablePrior(lambda keys: np.where(np.asarray(keys) % 2 == 0, 0.1, 0.2), vectorized=True)
    assert vec.probabilities(np.arange(4)).tolist() == [0.1, 0.2, 0.1, 0.2]
    assert vec(3) == 0.2
    with pytest.raises(ValueError, match="fn"):
        CallablePrior(lambda key: 2.0)("x")


def test_class_prior():
    prior = ClassPrior(lambda ip: int(ip.split(".")[0]) // 64, {0: 0.3, 1: 0.01, 2: 1e-4})
    assert prior("10.0.0.1") == 0.3 and prior("150.1.1.1") == 1e-4
    with pytest.raises(KeyError, match="default"):
        prior("250.0.0.1")
    with_default = ClassPrior(lambda key: key[0], {"a": 0.5}, default=0.01)
    assert with_default.probabilities(["ab", "zz"]).tolist() == [0.5, 0.01]
    vec = ClassPrior(lambda keys: np.asarray(keys) // 100, {0: 0.5, 1: 0.25}, vectorized=True)
    assert vec.probabilities(np.array([5, 150, 99])).tolist() == [0.5, 0.25, 0.5]
    assert vec(120) == 0.25


def test_sampled_prior_converges_per_class():
    rng = np.random.default_rng(3)
    truth = {"a": 0.2, "b": 0.01}
    members = {}

    def oracle(key):
        return members[key]

    prior = SampledPrior(oracle, classify=lambda key: key[0], rate=1.0, window=5000, seed=1)
    assert prior("a1") == 1.0  # no sample yet: `initial`
    for i in range(20000):
        cls = "a" if i % 2 else "b"
        key = f"{cls}{i}"
        members[key] = bool(rng.random() < truth[cls])
        prior.observe(key)
    assert prior("a") == pytest.approx(0.2, abs=0.03)
    assert prior("b") == pytest.approx(0.01, abs=0.006)
    assert prior.samples == {"a": 10000, "b": 10000}


def test_sampled_prior_samples_one_percent():
    calls = []
    prior = SampledPrior(lambda key: calls.append(key) or False, seed=7)
    prior.observe_many(np.arange(100_000))
    for i in range(100_000):
        prior.observe(i)
    # 200,000 queries at 1%: Bin(200000, 0.01) is within 2000 +- 6 sd (sd = 44.5)
    assert abs(len(calls) - 2000) < 270
    assert prior("x") == 0.0


def test_sampled_prior_is_fed_by_selective_queries():
    calls = []
    prior = SampledPrior(lambda key: calls.append(key) or True, rate=1.0, seed=0)
    f = SelectiveBloomFilter({"num_cells": 1024, "num_hashes": 3, "layout": "classic"}, prior, 5)
    f.query("x")
    f.query_many(["y", "z"])
    assert calls == ["x", "y", "z"]


# --- the Selective Bloom filter ----------------------------------------------------------------------------------


def _two_class_filter(**kwargs):
    prior = ClassPrior(lambda key: key.split(":")[0], {"hot": 0.5, "cold": 1e-5})
    f = SelectiveBloomFilter({"num_cells": 8000, "num_hashes": 4, "layout": "partitioned", "seed": 3}, prior,
                             CostModel(1.0, 5.0), **kwargs)
    return f


def test_query_only_skips_paradox_keys_but_keeps_plain_membership():
    f = _two_class_filter(selective_insert=False)
    keys = [f"hot:{i}" for i in range(500)] + [f"cold:{i}" for i in range(500)]
    f.update(keys)
    assert f.num_keys == 1000
    d = f.query("cold:3")
    assert d == Decision(False, 1e-5, None, pytest.approx(5e-5))
    assert "cold:3" in f  # the plain answer keeps its meaning
    hot = f.query("hot:3")
    assert hot.member and hot.filter_answer is True
    assert hot.posterior == pytest.approx(posterior(0.5, f.estimated_fpr()))
    assert hot.expected_cost == pytest.approx(1 - hot.posterior)


def test_selective_insertion_skips_paradox_keys():
    f = _two_class_filter()
    keys = [f"hot:{i}" for i in range(500)] + [f"cold:{i}" for i in range(500)]
    assert f.update(keys) is None
    assert f.num_keys == 500 and f.num_skipped == 500
    assert f.estimated_fpr() == pytest.approx(theory.false_positive_rate(8000, 500, 4, layout="partitioned"))
    cold_in_filter = f.contains_many([f"cold:{i}" for i in range(500)]).mean()
    assert cold_in_filter < 0.05  # only false positives
    assert all(f.contains_many([f"hot:{i}" for i in range(500)]))


def test_exact_rule_never_consults_a_skipped_class():
    # Skipped class with a prior above the final threshold: its keys are not in the filter, so a positive answer
    # says nothing; under rule="exact" they are not consulted, under "theorem1" (the paper's rule) they are.
    prior = ClassPrior(lambda key: key[0], {"a": 0.5, "b": 0.0015})
    params = {"num_cells": 1200, "num_hashes": 3, "layout": "partitioned"}
    keys = [f"a{i}" for i in range(200)] + [f"b{i}" for i in range(200)]
    exact = SelectiveBloomFilter(params, prior, 100, rule="exact")
    exact.update(keys)
    assert exact.num_skipped == 200
    assert 0.0015 >= exact.threshold  # b would be worth querying, were it inserted
    d = exact.query("b7")
    assert d.filter_answer is None and not d.member and d.posterior == 0.0015
    paper = SelectiveBloomFilter(params, prior, 100, rule="theorem1")
    paper.update(keys)
    assert paper.num_skipped == 200
    assert paper.query("b7").filter_answer is not None


def test_plain_mode_is_the_filter():
    f = _two_class_filter(selective_insert=False, selective_query=False)
    keys = [f"hot:{i}" for i in range(300)] + [f"cold:{i}" for i in range(300)]
    f.update(keys)
    probe = keys + [f"cold:x{i}" for i in range(2000)]
    d = f.query_many(probe)
    assert d.consulted.all()
    assert np.array_equal(d.member, f.filter.contains_many(probe))


def test_insertion_only_trusts_the_filter():
    f = _two_class_filter(selective_query=False)
    f.update([f"hot:{i}" for i in range(300)] + [f"cold:{i}" for i in range(300)])
    d = f.query("cold:1")
    assert d.filter_answer is not None and d.member == d.filter_answer
    assert d.posterior == 1e-5  # the filter says nothing about a skipped key


@given(st.lists(st.tuples(st.integers(1, 60), st.integers(1, 40)), min_size=1, max_size=8, unique_by=lambda t: t[0]),
       st.sampled_from(["exact", "theorem1"]), st.floats(0.5, 200))
def test_update_settles_the_fixed_point(groups, rule, alpha):
    # groups: (exponent e -> prior 2^-e/4, size); every admitted group clears the threshold of the filter holding it
    # and all higher groups; the first group left out does not.
    keys, table = [], {}
    for e, size in groups:
        table[e] = 2.0 ** -e / 4
        keys += [(e << 16) + i for i in range(size)]
    prior = ClassPrior(lambda key: key >> 16, table)
    f = SelectiveBloomFilter({"num_cells": 600, "num_hashes": 3, "layout": "partitioned"}, prior, alpha, rule=rule)
    before = f.num_keys
    f.update(keys)
    inserted = f.num_keys - before
    ordered = sorted(groups, key=lambda g: -table[g[0]])
    load = 0
    for e, size in ordered:
        if table[e] < f._threshold(load + size):
            break
        load += size
    assert inserted == load == f.num_keys
    assert f.num_skipped == len(keys) - load


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=60), st.booleans(), st.booleans(),
       st.sampled_from(["exact", "theorem1"]))
def test_query_and_query_many_agree(keys, selective_insert, selective_query, rule):
    prior = ClassPrior(lambda key: key % 4, {0: 0.6, 1: 0.05, 2: 1e-3, 3: 1e-6})
    f = SelectiveBloomFilter({"num_cells": 3000, "num_hashes": 4, "seed": 11, "layout": "classic"}, prior, 20,
                             selective_insert=selective_insert, selective_query=selective_query, rule=rule)
    f.update(list(range(0, 4000, 3)))
    batch = f.query_many(keys)
    assert len(batch) == len(keys)
    for key, d in zip(keys, batch):
        single = f.query(key)
        assert single.member == d.member and single.filter_answer == d.filter_answer
        assert single.posterior == pytest.approx(d.posterior, rel=1e-12, abs=0)
        assert single.expected_cost == pytest.approx(d.expected_cost, rel=1e-12, abs=1e-300)
    assert np.array_equal(f.query_many(np.array(keys, dtype=np.int64)).member, batch.member)


@given(st.lists(st.binary(max_size=6), min_size=1, max_size=30))
def test_bytes_keys_are_kept_as_they_are(keys):
    # A list of bytes must not become a numpy S array (which would strip trailing NULs) on the way to the filter.
    prior = CallablePrior(lambda key: 0.3 if len(key) % 2 else 1e-7)
    f = SelectiveBloomFilter({"num_cells": 4096, "num_hashes": 3, "layout": "classic"}, prior, 5, selective_insert=False)
    f.update(keys)
    d = f.query_many(keys)
    assert d.filter_answer[d.consulted].all()  # no false negatives: every inserted key found, NULs and all
    for key, member in zip(keys, d.member):
        assert member == f.query(key).member


def test_members_with_a_high_prior_are_never_false_negatives():
    prior = ClassPrior(lambda key: key % 2, {0: 0.4, 1: 1e-6})
    f = SelectiveBloomFilter(BloomFilter.from_size(2048, 3, layout="partitioned"), prior, 10)
    members = np.arange(0, 2000, 2, dtype=np.uint64)
    f.update(members)
    assert f.query_many(members).member.all()


def test_online_add():
    prior = ClassPrior(lambda key: key[0], {"h": 0.5, "c": 1e-7})
    f = SelectiveBloomFilter({"num_cells": 1000, "num_hashes": 3, "layout": "classic"}, prior, 5)
    assert all(f.add(f"h{i}") for i in range(100))
    assert not f.add("c1")
    assert f.num_keys == 100 and f.num_skipped == 1


def test_theorem1_rule_threshold():
    f = SelectiveBloomFilter({"num_cells": 13312, "num_hashes": 3, "layout": "classic"}, 0.1, 100, rule="theorem1", num_items=3328)
    assert f.threshold == pytest.approx(theorem1_threshold(4, 100))
    g = SelectiveBloomFilter({"num_cells": 13312, "num_hashes": 3, "layout": "partitioned"}, 0.1, 100,
                             num_items=3328)
    assert g.estimated_fpr() == pytest.approx(theory.false_positive_rate(13312, 3328, 3, layout="partitioned"))


def test_wraps_an_existing_filter_and_capacity_params():
    bf = BloomFilter(capacity=1000, fpr=0.01, layout="classic")
    f = SelectiveBloomFilter(bf, 0.5, 5)
    assert f.filter is bf
    g = SelectiveBloomFilter({"capacity": 1000, "fpr": 0.01}, 0.5, 5)
    assert g.filter.num_cells > 0
    assert "SelectiveBloomFilter" in repr(g)


# --- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, exc, name", [
    (lambda: posterior(1.5, 0.1), ValueError, "prior"),
    (lambda: posterior(0.1, -0.1), ValueError, "fpr"),
    (lambda: posterior(float("nan"), 0.1), ValueError, "prior"),
    (lambda: posterior("0.1", 0.1), TypeError, "prior"),
    (lambda: posterior(np.array([0.1, 2.0]), 0.1), ValueError, "prior"),
    (lambda: paradox_threshold(0.1, 0), ValueError, "alpha"),
    (lambda: paradox_threshold(0.1, float("inf")), ValueError, "alpha"),
    (lambda: paradox_threshold(0.1, True), TypeError, "alpha"),
    (lambda: min_bits_per_item(-0.1, 1), ValueError, "prior"),
    (lambda: min_bits_per_item(0.1, -1), ValueError, "alpha"),
    (lambda: theorem1_fpr(-1), ValueError, "bits_per_item"),
    (lambda: theorem1_threshold(4, 0), ValueError, "alpha"),
    (lambda: decision_threshold(-2), ValueError, "alpha"),
    (lambda: cbf_posterior([1, -2], 100, 10, 0.1), ValueError, "counters"),
    (lambda: cbf_posterior([1.5, 2], 100, 10, 0.1), TypeError, "counters"),
    (lambda: cbf_posterior([], 100, 10, 0.1), ValueError, "counters"),
    (lambda: cbf_posterior([1, 2], 0, 10, 0.1), ValueError, "num_counters"),
    (lambda: cbf_posterior([1, 2], 100, -1, 0.1), ValueError, "num_items"),
    (lambda: cbf_posterior([1, 2], 100, 10, 1.1), ValueError, "prior"),
    (lambda: cbf_posterior([1, 2], 100, 10, 0.1, layout="blocked"), ValueError, "layout"),
    (lambda: cbf_posterior([[1, 2]], 100, 10, [0.1, 0.2]), ValueError, "prior"),
    (lambda: vicbf_posterior([1, 2], [1], 100, 10, 3, 0.1), ValueError, "multiplicities"),
    (lambda: vicbf_posterior([1, 2], [1, 1], 100, 10, 0, 0.1), ValueError, "num_increments"),
    (lambda: vicbf_posterior([1, 2], [1, -3], 100, 10, 3, 0.1), ValueError, "multiplicities"),
    (lambda: cbf_expected_cost(0, 100, 10, 0.1, 5), ValueError, "num_hashes"),
    (lambda: cbf_expected_cost(3, 100, 0, 0.1, 5), ValueError, "num_items"),
    (lambda: cbf_expected_cost(3, 100, 10, [0.1, 0.2], 5, weights=[1]), ValueError, "weights"),
    (lambda: cbf_expected_cost(3, 100, 10, 0.1, 5, counter_bits=0), ValueError, "counter_bits"),
    (lambda: cbf_optimal_num_hashes(100, 10, 0.1, 5, max_hashes=0), ValueError, "max_hashes"),
    (lambda: cbf_error_rates(3, 100, 10, -0.1, 5), ValueError, "prior"),
    (lambda: optimal_query_order([0.5, 1.2], 1.0, 10), ValueError, "probabilities"),
    (lambda: optimal_query_order([0.5], [0.0], 10), ValueError, "costs"),
    (lambda: optimal_query_order([0.5], [1.0, 2.0], 10), ValueError, "costs"),
    (lambda: optimal_query_order([0.5], 1.0, -3), ValueError, "origin_cost"),
    (lambda: CostModel(0, 1), ValueError, "false_positive"),
    (lambda: CostModel(1, -5), ValueError, "false_negative"),
    (lambda: CostModel.from_alpha(float("nan")), ValueError, "alpha"),
    (lambda: CostModel(1, 5).decide(1.2), ValueError, "posterior"),
    (lambda: ConstantPrior(1.01), ValueError, "p"),
    (lambda: ClassPrior(lambda k: k, {"a": -0.1}), ValueError, "probabilities"),
    (lambda: ClassPrior("no", {}), TypeError, "classify"),
    (lambda: ClassPrior(lambda k: k, [0.1]), TypeError, "probabilities"),
    (lambda: CallablePrior(3), TypeError, "fn"),
    (lambda: SampledPrior(lambda k: True, rate=0.0), ValueError, "rate"),
    (lambda: SampledPrior(lambda k: True, rate=2.0), ValueError, "rate"),
    (lambda: SampledPrior(lambda k: True, window=0.5), ValueError, "window"),
    (lambda: SampledPrior(lambda k: True, initial=-1), ValueError, "initial"),
    (lambda: SampledPrior("oracle"), TypeError, "oracle"),
    (lambda: SelectiveBloomFilter({"num_cells": 100, "num_hashes": 2, "layout": "classic"}, 0.1, 5, rule="bayes"), ValueError, "rule"),
    (lambda: SelectiveBloomFilter({"num_cells": 100, "num_hashes": 2, "layout": "classic"}, "0.1", 5), TypeError, "prior"),
    (lambda: SelectiveBloomFilter({"num_cells": 100, "num_hashes": 2, "layout": "classic"}, 0.1, "5"), TypeError, "cost"),
    (lambda: SelectiveBloomFilter({"num_cells": 100, "num_hashes": 2, "layout": "classic"}, 0.1, 5, num_items=-1), ValueError,
     "num_items"),
    (lambda: SelectiveBloomFilter({"num_cells": 100, "num_hashes": 2, "layout": "classic"}, 0.1, 5, selective_query=1), TypeError,
     "selective_query"),
    (lambda: SelectiveBloomFilter(object(), 0.1, 5), TypeError, "filter_or_params"),
    (lambda: SelectiveBloomFilter({"num_cells": 100, "num_hashes": 2, "layout": "classic"}, 1.5, 5), ValueError, "p"),
])
def test_bad_input_names_the_parameter(call, exc, name):
    with pytest.raises(exc, match=name):
        call()


def test_prior_base_class_is_abstract():
    with pytest.raises(NotImplementedError):
        Prior().probability("x")


def test_public_names():
    import bloomwise.paradox as paradox

    fixed = {"CostModel", "ConstantPrior", "ClassPrior", "CallablePrior", "SampledPrior", "paradox_threshold",
             "min_bits_per_item", "posterior", "cbf_posterior", "SelectiveBloomFilter",
             "SelectiveCountingBloomFilter"}
    assert fixed <= set(paradox.__all__)
    for name in paradox.__all__:
        assert getattr(paradox, name) is not None
    assert len(set(paradox.__all__)) == len(paradox.__all__)


def test_decisions_container():
    f = _two_class_filter(selective_insert=False)
    f.update([f"hot:{i}" for i in range(500)] + [f"cold:{i}" for i in range(500)])
    d = f.query_many(["hot:1", "cold:1", "hot:2"])
    assert len(d) == 3 and list(d)[1] == d[1]
    assert d[1].filter_answer is None and isinstance(d[0].member, bool)
    assert "3 keys" in repr(d)


def test_itertools_product_of_variants_have_repr():
    for si, sq in itertools.product([True, False], repeat=2):
        assert "SelectiveBloomFilter" in repr(_two_class_filter(selective_insert=si, selective_query=sq))
