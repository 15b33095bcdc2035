"""A CI-sized run of the section VIII.A experiment (same 13 priors, 32 members per type instead of 256), checked
against the exact expectations, the structure of the decisions and the ordering the paper reports."""
from __future__ import annotations

import numpy as np
import pytest

from bloomwise.paradox.simulation import (
    BLOOM_VARIANTS,
    PAPER_TABLE_II,
    PAPER_TABLE_III,
    Population,
    bloom_num_hashes,
    bloom_trial,
    expected_bloom,
    expected_counting,
)

POPULATION = Population(members_per_type=32)  # |U| = 2,096,896, n = 416
ALPHAS = (100, 5)
SEEDS = (1, 2)


@pytest.fixture(scope="module")
def runs():
    return {b: [bloom_trial(POPULATION, b, ALPHAS, seed=s) for s in SEEDS] for b in (4, 10)}


def _mean_rates(trials, key, alpha):
    return np.mean([t[key].rates(POPULATION, alpha) for t in trials], axis=0)


def test_population_is_the_papers():
    paper = Population()
    assert paper.universe_size == 16_775_168 and paper.num_members == 3328
    assert paper.priors.tolist() == [2.0**-e for e in range(3, 16)]
    assert [bloom_num_hashes(paper, b)[1] for b in (4, 6, 8, 10)] == [3, 4, 6, 7]
    rng = np.random.default_rng(0)
    members = POPULATION.draw_members(rng)
    for t, mem in enumerate(members):
        assert len(np.unique(mem)) == 32
        assert (POPULATION.type_of(mem) == t).all()


@pytest.mark.parametrize("b", [4, 10])
@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("rule", ["exact", "theorem1"])
def test_costs_match_the_exact_expectation(runs, b, alpha, rule):
    for variant in BLOOM_VARIANTS:
        key = (variant, alpha, "plain" if variant == "bf" else rule)
        fpr, fnr, cost = _mean_rates(runs[b], key, alpha)
        e_fpr, e_fnr, e_cost = expected_bloom(POPULATION, b, alpha, variant, "exact" if variant == "bf" else rule)
        # A filter of a few hundred bits per slice: its FPR varies by ~10% from trial to trial (2 trials here).
        assert cost == pytest.approx(e_cost, rel=0.25), (variant, fpr, fnr, e_fpr, e_fnr)
        if variant in ("bf", "query") or (variant == "both" and rule == "exact"):
            # members are either inserted and found, or never asked: the FNR is exact
            assert fnr == pytest.approx(e_fnr, abs=1e-12), variant


def test_selective_filters_beat_the_plain_one(runs):
    for b, trials in runs.items():
        for alpha in ALPHAS:
            costs = {v: _mean_rates(trials, (v, alpha, "plain" if v == "bf" else "exact"), alpha)[2]
                     for v in BLOOM_VARIANTS}
            assert costs["both"] <= costs["query"] <= costs["bf"]
            assert costs["insert"] < costs["bf"]
            if b == 4:  # with few bits every selective variant is far better (Table II: 2.46e6 -> ~1e4 .. 1e5)
                assert costs["query"] < costs["bf"] / 5
            # the exact rule is never worse than the paper's (it does not consult keys it did not insert)
            paper_rule = _mean_rates(trials, ("both", alpha, "theorem1"), alpha)[2]
            assert costs["both"] <= paper_rule * 1.02


def test_paper_tables_are_complete():
    assert {(a, v, b) for a in (5, 100) for v in ("bf", "gbf", "rbf", "insert", "query", "both")
            for b in (4, 6, 8, 10)} == set(PAPER_TABLE_II)
    assert {(v, b) for v in ("cbf", "selective") for b in (16, 24, 32, 40)} == set(PAPER_TABLE_III)


def test_expectations_reproduce_the_papers_tables_within_10_percent():
    # The analytic model of the paper's own rule meets the bar everywhere except insertion-only at 8 bits per key
    # (+12%), where all of the paper's selective FPRs sit ~14% below what its own BF column implies (docs/paradox.md).
    paper = Population()
    misses = []
    for (alpha, variant, b), (_, _, cost) in PAPER_TABLE_II.items():
        if variant in ("gbf", "rbf"):
            continue
        rule = "exact" if variant == "bf" else "theorem1"
        value = expected_bloom(paper, b, alpha, variant, rule)[2]
        if abs(value / cost - 1) > 0.10:
            misses.append((alpha, variant, b))
    assert sorted(misses) == [(5, "insert", 8), (100, "insert", 8)]
    for (variant, bpe), (_, _, cost) in PAPER_TABLE_III.items():
        assert expected_counting(paper, bpe // 4, 5, variant)[2] == pytest.approx(cost, rel=0.01)
