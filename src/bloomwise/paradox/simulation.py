"""The simulation set-up of section VIII of the Bloom-paradox paper, its analytic expectations, and its tables.

Source: Rottenstreich and Keslassy, *The Bloom Paradox*, section VIII.A-B, Tables II and III.

Population (:class:`Population`): 13 types of keys; type i (i = 1..13) has ``256 * 2^(i+2)`` keys in the universe U,
exactly 256 of which are in S, so its prior is ``2^-(i+2)`` (2^-3 .. 2^-15), ``n = 3,328`` and
``|U| = 256 (2^16 - 8) = 16,775,168``. Keys are integers: type i owns the id range ``[offset_i, offset_i + size_i)``,
and each trial draws its 256 members uniformly inside that range. Every key of U is queried once, and

    cost = #false positives * 1 + #false negatives * alpha,
    fpr = #FP / |U \\ S| (unqueried keys count as true negatives), fnr = #FN / |S| (unqueried members count as FN).

Filters: the partitioned layout (the paper's model), ``m = bits per key * n``, k by ``bloomwise.theory``'s
integer-k rule at the nominal load (4, 6, 8, 10 bits -> k = 3, 4, 6, 7). Counting filters: 4-bit counters,
``counters per key = bits per key / 4``, same k.

Variants (:func:`bloom_trial`): ``"bf"`` (plain), ``"insert"`` (selective insertion only: the filter is trusted),
``"query"`` (selective query only), ``"both"``; each under the ``"exact"`` or ``"theorem1"`` rule of
:class:`~bloomwise.paradox.SelectiveBloomFilter`. :func:`counting_trial` runs the CBF and the Selective CBF.
:func:`expected_bloom` and :func:`expected_counting` give the exact expectations of the same experiments under ideal
hashing, so a run can be checked against theory as well as against the paper.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from bloomwise import theory
from bloomwise._checks import check_choice, check_integer, check_positive_real
from bloomwise.bloom import BloomFilter
from bloomwise.counting import CountingBloomFilter
from bloomwise.paradox.costs import CostModel
from bloomwise.paradox.optimal_k import cbf_error_rates
from bloomwise.paradox.posterior import paradox_threshold, theorem1_fpr
from bloomwise.paradox.priors import CallablePrior
from bloomwise.paradox.selective import SelectiveBloomFilter
from bloomwise.paradox.selective_counting import SelectiveCountingBloomFilter

__all__ = [
    "Population",
    "Outcome",
    "BLOOM_VARIANTS",
    "PAPER_TABLE_II",
    "PAPER_TABLE_III",
    "bloom_num_hashes",
    "bloom_trial",
    "counting_trial",
    "expected_bloom",
    "expected_counting",
]

BLOOM_VARIANTS = ("bf", "insert", "query", "both")
_FLAGS = {"bf": (False, False), "insert": (True, False), "query": (False, True), "both": (True, True)}
_CHUNK = 1 << 22  # keys per query_many call (bounds the memory of a run over U)

#: Table II of the paper: ``{(alpha, variant, bits_per_key): (fpr, fnr, cost)}``; variants "bf", "gbf", "rbf",
#: "insert", "query", "both" (the GBF and RBF baselines are reproduced elsewhere).
PAPER_TABLE_II: dict[tuple[int, str, int], tuple[float, float, float]] = {
    (100, "bf", 4): (1.47e-1, 0.0, 2.46e6), (100, "bf", 6): (5.63e-2, 0.0, 9.44e5),
    (100, "bf", 8): (2.17e-2, 0.0, 3.64e5), (100, "bf", 10): (8.24e-3, 0.0, 1.38e5),
    (100, "gbf", 4): (2.52e-2, 6.46e-1, 6.37e5), (100, "gbf", 6): (5.06e-3, 7.35e-1, 3.29e5),
    (100, "gbf", 8): (3.09e-4, 8.65e-1, 2.93e5), (100, "gbf", 10): (1.35e-4, 8.44e-1, 2.83e5),
    (100, "rbf", 4): (0.0, 1.0, 3.32e5), (100, "rbf", 6): (0.0, 1.0, 3.32e5),
    (100, "rbf", 8): (3e-6, 1.0, 3.32e5), (100, "rbf", 10): (8.87e-3, 0.0, 1.49e5),
    (100, "insert", 4): (4.94e-2, 3.64e-1, 9.49e5), (100, "insert", 6): (2.40e-2, 2.24e-1, 4.78e5),
    (100, "insert", 8): (9.28e-3, 1.51e-1, 2.06e5), (100, "insert", 10): (5.39e-3, 7.64e-2, 1.16e5),
    (100, "query", 4): (2.20e-3, 4.62e-1, 1.90e5), (100, "query", 6): (1.60e-3, 3.85e-1, 1.55e5),
    (100, "query", 8): (2.29e-3, 2.31e-1, 1.15e5), (100, "query", 10): (1.99e-3, 1.54e-1, 8.45e4),
    (100, "both", 4): (3.08e-3, 3.80e-1, 1.78e5), (100, "both", 6): (3.00e-3, 2.31e-1, 1.27e5),
    (100, "both", 8): (2.31e-3, 1.54e-1, 9.00e4), (100, "both", 10): (2.69e-3, 7.69e-2, 7.08e4),
    (5, "bf", 4): (1.47e-1, 0.0, 2.46e6), (5, "bf", 6): (5.66e-2, 0.0, 9.50e5),
    (5, "bf", 8): (2.17e-2, 0.0, 3.64e5), (5, "bf", 10): (8.23e-3, 0.0, 1.38e5),
    (5, "gbf", 4): (2.53e-2, 6.43e-1, 4.34e5), (5, "gbf", 6): (5.06e-3, 7.34e-1, 9.70e4),
    (5, "gbf", 8): (3.04e-4, 8.65e-1, 1.95e4), (5, "gbf", 10): (1.33e-4, 8.43e-1, 1.63e4),
    (5, "rbf", 4): (0.0, 1.0, 1.66e4), (5, "rbf", 6): (0.0, 1.0, 1.66e4),
    (5, "rbf", 8): (0.0, 1.0, 1.66e4), (5, "rbf", 10): (0.0, 1.0, 1.66e4),
    (5, "insert", 4): (2.47e-2, 5.24e-1, 4.23e5), (5, "insert", 6): (7.90e-3, 4.56e-1, 1.40e5),
    (5, "insert", 8): (2.22e-3, 3.83e-1, 4.37e4), (5, "insert", 10): (1.21e-3, 3.07e-1, 2.53e4),
    (5, "query", 4): (1.16e-4, 7.69e-1, 1.47e4), (5, "query", 6): (9.1e-5, 6.92e-1, 1.31e4),
    (5, "query", 8): (6.8e-5, 6.15e-1, 1.14e4), (5, "query", 10): (1.22e-4, 4.62e-1, 9.72e3),
    (5, "both", 4): (1.87e-4, 5.38e-1, 1.21e4), (5, "both", 6): (2.44e-4, 4.61e-1, 1.18e4),
    (5, "both", 8): (1.39e-4, 3.84e-1, 8.73e3), (5, "both", 10): (1.52e-4, 3.08e-1, 7.67e3),
}

#: Table III of the paper (alpha = 5): ``{(variant, bits_per_key): (fpr, fnr, cost)}``, variants "cbf" and
#: "selective" (query only); bits per key = 4 * counters per key.
PAPER_TABLE_III: dict[tuple[str, int], tuple[float, float, float]] = {
    ("cbf", 16): (1.47e-1, 0.0, 2.46e6), ("cbf", 24): (5.61e-2, 0.0, 9.40e5),
    ("cbf", 32): (2.16e-2, 0.0, 3.61e5), ("cbf", 40): (8.20e-3, 0.0, 1.37e5),
    ("selective", 16): (8.95e-5, 7.65e-1, 1.42e4), ("selective", 24): (9.59e-5, 6.57e-1, 1.25e4),
    ("selective", 32): (9.42e-5, 5.35e-1, 1.05e4), ("selective", 40): (1.01e-4, 4.16e-1, 8.61e3),
}


@dataclass(frozen=True)
class Population:
    """Types of keys with known priors over an integer universe (section VIII.A).

    :param members_per_type: members of S per type (256 in the paper).
    :param exponents: type i has prior ``2^-exponents[i]`` and ``members_per_type * 2^exponents[i]`` keys in U
        (3..15 in the paper).

    >>> paper = Population()
    >>> paper.universe_size, paper.num_members, paper.num_types
    (16775168, 3328, 13)
    """

    members_per_type: int = 256
    exponents: tuple[int, ...] = tuple(range(3, 16))

    def __post_init__(self) -> None:
        check_integer("members_per_type", self.members_per_type, 1)
        exps = tuple(check_integer("exponents[...]", e, 0) for e in self.exponents)
        if not exps or len(set(exps)) != len(exps):
            raise ValueError(f"exponents must be distinct and non-empty, got {self.exponents!r}")
        if max(exps) > 40:
            raise ValueError(f"exponents must be <= 40, got {max(exps)}")
        object.__setattr__(self, "exponents", exps)

    @property
    def num_types(self) -> int:
        return len(self.exponents)

    @property
    def priors(self) -> np.ndarray:
        """``2^-e`` per type."""
        return np.array([2.0 ** -e for e in self.exponents])

    @property
    def sizes(self) -> np.ndarray:
        """Keys of U per type."""
        return np.array([self.members_per_type << e for e in self.exponents], dtype=np.int64)

    @property
    def offsets(self) -> np.ndarray:
        """First key id of each type (types are consecutive id ranges starting at 0)."""
        return np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)

    @property
    def universe_size(self) -> int:
        return int(self.sizes.sum())

    @property
    def num_members(self) -> int:
        return self.members_per_type * self.num_types

    @property
    def num_nonmembers(self) -> int:
        return self.universe_size - self.num_members

    def type_of(self, keys) -> np.ndarray:
        """The type index (0-based) of each integer key."""
        keys = np.asarray(keys)
        offsets = self.offsets.astype(keys.dtype) if keys.dtype.kind in "iu" else self.offsets
        return np.searchsorted(offsets, keys, side="right") - 1

    def prior(self) -> CallablePrior:
        """The true prior of every key of U, as a vectorised :class:`~bloomwise.paradox.CallablePrior`."""
        table = self.priors

        def fn(keys):
            return table[self.type_of(keys)]

        return CallablePrior(fn, vectorized=True)

    def draw_members(self, rng: np.random.Generator) -> list[np.ndarray]:
        """One trial's S: ``members_per_type`` distinct ids drawn uniformly in each type's range (sorted uint64)."""
        out = []
        for offset, size in zip(self.offsets.tolist(), self.sizes.tolist()):
            picked = rng.choice(size, size=self.members_per_type, replace=False)
            out.append(np.sort(picked.astype(np.uint64) + np.uint64(offset)))
        return out

    def type_keys(self, t: int):
        """The keys of type t in chunks (uint64 arrays), for querying all of U without holding it at once."""
        start = int(self.offsets[t])
        stop = start + int(self.sizes[t])
        for lo in range(start, stop, _CHUNK):
            yield np.arange(lo, min(lo + _CHUNK, stop), dtype=np.uint64)


class Outcome(NamedTuple):
    """False positives and false negatives of one run, per type (arrays of counts)."""

    false_positives: np.ndarray
    false_negatives: np.ndarray

    def rates(self, population: Population, alpha: float) -> tuple[float, float, float]:
        """``(fpr, fnr, cost)`` as the paper defines them."""
        fp = float(self.false_positives.sum())
        fn = float(self.false_negatives.sum())
        return fp / population.num_nonmembers, fn / population.num_members, fp + alpha * fn


def bloom_num_hashes(population: Population, bits_per_key: int) -> tuple[int, int]:
    """``(m, k)`` of the section VIII.A filters: ``m = bits_per_key * n`` and k by bloomwise.theory's integer rule."""
    m = check_integer("bits_per_key", bits_per_key, 1) * population.num_members
    return m, theory.optimal_num_hashes(m, population.num_members, layout="partitioned")


def _count_errors(population, members, decide) -> Outcome:
    """Run ``decide(keys) -> bool array`` over every key of U, type by type; count FP and FN."""
    fp = np.zeros(population.num_types, dtype=np.int64)
    fn = np.zeros(population.num_types, dtype=np.int64)
    for t in range(population.num_types):
        mem = members[t]
        for keys in population.type_keys(t):
            answer = decide(keys)
            truth = np.zeros(len(keys), dtype=bool)
            inside = mem[(mem >= keys[0]) & (mem <= keys[-1])]
            truth[(inside - keys[0]).astype(np.int64)] = True
            fp[t] += int(np.count_nonzero(answer & ~truth))
            fn[t] += int(np.count_nonzero(~answer & truth))
    return Outcome(fp, fn)


def bloom_trial(population: Population, bits_per_key: int, alphas, seed: int, *, variants=BLOOM_VARIANTS,
                rules=("exact", "theorem1")) -> dict[tuple[str, float, str], Outcome]:
    """One trial of section VIII.A for every (variant, alpha, rule): the same S and hash seed for all of them.

    :param population: the types and priors.
    :param bits_per_key: ``m / n``.
    :param alphas: the cost ratios to run.
    :param seed: draws S and seeds the filters' hashing.
    :param variants: among ``"bf"``, ``"insert"``, ``"query"``, ``"both"``.
    :param rules: the :class:`~bloomwise.paradox.SelectiveBloomFilter` rules to run ("bf" ignores the rule).
    :returns: ``{(variant, alpha, rule): Outcome}`` (rule "plain" for "bf", which does not depend on alpha either:
        it is stored under each alpha).
    """
    for v in variants:
        check_choice("variants[...]", v, BLOOM_VARIANTS)
    rng = np.random.default_rng(check_integer("seed", seed, 0))
    members = population.draw_members(rng)
    all_members = np.concatenate(members)
    m, k = bloom_num_hashes(population, bits_per_key)
    hash_seed = int(rng.integers(0, 2**63))
    prior = population.prior()
    results: dict[tuple[str, float, str], Outcome] = {}
    for variant in variants:
        insert, query = _FLAGS[variant]
        for rule in (("plain",) if variant == "bf" else rules):
            for alpha in (alphas[:1] if variant == "bf" else alphas):
                f = SelectiveBloomFilter(
                    BloomFilter.from_size(m, k, layout="partitioned", seed=hash_seed), prior,
                    CostModel.from_alpha(alpha), selective_insert=insert, selective_query=query,
                    rule="exact" if rule == "plain" else rule)
                f.update(all_members)
                outcome = _count_errors(population, members, lambda keys: f.query_many(keys).member)
                if variant == "bf":
                    for a in alphas:
                        results[(variant, a, rule)] = outcome
                else:
                    results[(variant, alpha, rule)] = outcome
    return results


def counting_trial(population: Population, counters_per_key: int, alpha: float, seed: int, *,
                   counter_bits: int = 4) -> dict[str, Outcome]:
    """One trial of section VIII.B: a partitioned CBF with all of S, queried plainly and by the Selective CBF.

    :returns: ``{"cbf": Outcome, "selective": Outcome}``.
    """
    rng = np.random.default_rng(check_integer("seed", seed, 0))
    members = population.draw_members(rng)
    m, k = bloom_num_hashes(population, counters_per_key)
    hash_seed = int(rng.integers(0, 2**63))
    cbf = CountingBloomFilter.from_size(m, k, counter_bits=counter_bits, layout="partitioned", seed=hash_seed)
    f = SelectiveCountingBloomFilter(cbf, population.prior(), CostModel.from_alpha(alpha))
    f.update(np.concatenate(members))
    plain_answers = {}

    def selective(keys):
        d = f.query_many(keys)
        plain = d.filter_answer.copy()
        if not d.consulted.all():
            rest = ~d.consulted
            plain[rest] = np.asarray(cbf.contains_many(keys[rest]), dtype=bool)
        plain_answers[int(keys[0])] = plain
        return d.member

    out_selective = _count_errors(population, members, selective)
    out_plain = _count_errors(population, members, lambda keys: plain_answers.pop(int(keys[0])))
    return {"cbf": out_plain, "selective": out_selective}


# --- analytic expectations ---------------------------------------------------------------------------------------


def fpr_function(m: int, k: int, rule: str):
    def fpr(n: int) -> float:
        if n <= 0:
            return 0.0
        if rule == "theorem1":
            return theorem1_fpr(m / n)
        return float(theory.false_positive_rate(m, n, k, layout="partitioned"))

    return fpr


def expected_bloom(population: Population, bits_per_key: int, alpha: float, variant: str,
                   rule: str = "exact") -> tuple[float, float, float]:
    """The exact expectation of :func:`bloom_trial`'s ``(fpr, fnr, cost)`` under ideal hashing.

    It applies :class:`~bloomwise.paradox.SelectiveBloomFilter`'s decisions type by type: insertion admits types by
    decreasing prior while ``P >= threshold(load including the type)``; a query consults a type iff
    ``P >= threshold(n*)`` (and, under the exact rule, only if the type was inserted).

    >>> fpr, fnr, cost = expected_bloom(Population(), 4, 100, "query")
    >>> round(fnr, 4), round(cost, -3)   # 6 of the 13 types are never asked: fnr 6/13
    (0.4615, 192000.0)
    """
    check_choice("variant", variant, BLOOM_VARIANTS)
    check_choice("rule", rule, ("exact", "theorem1"))
    alpha = check_positive_real("alpha", alpha)
    m, k = bloom_num_hashes(population, bits_per_key)
    fpr_of = fpr_function(m, k, rule)
    insert, query = _FLAGS[variant]
    priors = population.priors
    order = np.argsort(-priors, kind="stable")
    per = population.members_per_type
    inserted = np.ones(population.num_types, dtype=bool)
    if insert:
        inserted[:] = False
        load = 0
        for t in order:
            if priors[t] < paradox_threshold(fpr_of(load + per), alpha):
                break
            inserted[t] = True
            load += per
    n_star = per * int(inserted.sum())
    fpr = fpr_of(n_star)  # what the rule believes
    true_fpr = fpr_function(m, k, "exact")(n_star)  # what the filter really does, whatever the rule assumes
    if query:
        consulted = priors >= paradox_threshold(fpr, alpha)
        if rule == "exact" and insert:
            consulted &= inserted
    else:
        consulted = np.ones(population.num_types, dtype=bool)
    fp = fn = 0.0
    for t in range(population.num_types):
        nonmembers = int(population.sizes[t]) - per
        if consulted[t]:
            fp += nonmembers * true_fpr
            fn += 0.0 if inserted[t] else per * (1.0 - true_fpr)
        else:
            fn += per
    fp, fn = float(fp), float(fn)
    return fp / population.num_nonmembers, fn / population.num_members, fp + alpha * fn


def expected_counting(population: Population, counters_per_key: int, alpha: float, variant: str, *,
                      counter_bits: int = 4) -> tuple[float, float, float]:
    """The exact expectation of :func:`counting_trial`'s ``(fpr, fnr, cost)`` (partitioned binomial model).

    >>> [round(x, 7) for x in expected_counting(Population(), 4, 5, "selective")][:2]
    [8.96e-05, 0.7648334]
    """
    check_choice("variant", variant, ("cbf", "selective"))
    alpha = check_positive_real("alpha", alpha)
    m, k = bloom_num_hashes(population, counters_per_key)
    n = population.num_members
    per = population.members_per_type
    fp = fn = 0.0
    if variant == "cbf":
        rate = float(theory.false_positive_rate(m, n, k, layout="partitioned"))
        fp = population.num_nonmembers * rate
    else:
        for prior, size in zip(population.priors.tolist(), population.sizes.tolist()):
            fpr_t, fnr_t = cbf_error_rates(k, m, n, prior, alpha, counter_bits=counter_bits)
            fp += (size - per) * fpr_t
            fn += per * fnr_t
    return fp / population.num_nonmembers, fn / n, fp + alpha * fn
