"""Tables II and III of *The Bloom Paradox* (section VIII.A-B), all seven columns, fast enough to run at the paper's
sizes in minutes.

The set-up is :class:`bloomwise.paradox.simulation.Population` (13 types x 256 members, priors 2^-3..2^-15,
|U| = 16,775,168; every key of U is queried once; cost = #FP + alpha #FN). For each seed and memory size:

- **BF and the Selective BF variants**: the Selective BF decides per type (a type is inserted, and consulted, or
  not: :func:`selective_plan`, the same decisions as :class:`~bloomwise.paradox.SelectiveBloomFilter` and
  :func:`~bloomwise.paradox.simulation.expected_bloom`). Each distinct set of inserted types is one partitioned
  ``BloomFilter`` holding those members, asked (``contains_many``, the compiled batch path) about every key of the
  types some variant consults; a type's false positives and false negatives are then counted once and shared by
  every variant that consults it. The run reproduces :func:`~bloomwise.paradox.simulation.bloom_trial` exactly
  (same S, hash seed and answers) at a fraction of its time.
- **GBF** (:class:`~bloomwise.GeneralizedBloomFilter`): k1 = k set functions and the k0 in [1, k1 - 1] that
  minimises the expected cost of :mod:`bloomwise.theory.generalized`; members inserted in a random order.
- **RBF** (:class:`~bloomwise.RetouchedBloomFilter`): a classic filter with all of S; the known false positives are
  all false positives of U \\ S (the paper's universe is enumerable). As the paper ran it: Ratio Selection until no
  known false positive is left, kept only where that costs less than the untouched filter; the cost-aware variant
  (a bit cleared only when alpha A / B < 1) as a labelled extra.
- **CBF and Selective CBF** (Table III): a partitioned 4-bit ``CountingBloomFilter``; the CBF answers by
  positivity, the Selective CBF by :class:`~bloomwise.paradox.SelectiveCountingBloomFilter` (Theorems 2 and 4).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bloomwise.bloom import BloomFilter
from bloomwise.counting import CountingBloomFilter
from bloomwise.generalized import GeneralizedBloomFilter
from bloomwise.paradox.costs import CostModel
from bloomwise.paradox.posterior import paradox_threshold
from bloomwise.paradox.selective_counting import SelectiveCountingBloomFilter
from bloomwise.paradox.simulation import Outcome, Population, bloom_num_hashes, fpr_function
from bloomwise.reproduce.noise import SAMPLE_PER_TYPE, ReplicateErrors, sample_nonmembers, type_estimate
from bloomwise.retouched import RetouchedBloomFilter
from bloomwise.theory.generalized import gbf_optimal_num_reset_hashes

__all__ = ["selective_plan", "TrialResults", "bloom_seed", "counting_seed", "SELECTIVE_VARIANTS", "bloom_replicates", "type_chunks",
           "counting_replicates"]

SELECTIVE_VARIANTS = ("insert", "query", "both")
_FLAGS = {"bf": (False, False), "insert": (True, False), "query": (False, True), "both": (True, True)}


def selective_plan(population: Population, bits_per_key: int, alpha: float, variant: str,
                   rule: str) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """``(inserted, consulted)`` per type: the Selective BF's decisions (section IV.C; rule "theorem1" or "exact").

    Insertion admits types by decreasing prior while the prior clears the threshold of the filter that holds them;
    a query consults a type iff its prior clears the threshold at the final load (under the exact rule, only if it
    was inserted).
    """
    m, k = bloom_num_hashes(population, bits_per_key)
    fpr_of = fpr_function(m, k, rule)
    insert, query = _FLAGS[variant]
    priors = population.priors
    per = population.members_per_type
    inserted = np.ones(population.num_types, dtype=bool)
    if insert:
        inserted[:] = False
        load = 0
        for t in np.argsort(-priors, kind="stable"):
            if priors[t] < paradox_threshold(fpr_of(load + per), alpha):
                break
            inserted[t] = True
            load += per
    n_star = per * int(inserted.sum())
    if query:
        consulted = priors >= paradox_threshold(fpr_of(n_star), alpha)
        if rule == "exact" and insert:
            consulted &= inserted
    else:
        consulted = np.ones(population.num_types, dtype=bool)
    return tuple(bool(x) for x in inserted), tuple(bool(x) for x in consulted)


@dataclass
class TrialResults:
    """Per-seed outcomes: ``{(column, alpha, bits_per_key): Outcome}`` plus details (k0 chosen, clears, ...)."""

    outcomes: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)


def _truth_mask(members_t: np.ndarray, keys: np.ndarray) -> np.ndarray:
    truth = np.zeros(len(keys), dtype=bool)
    inside = members_t[(members_t >= keys[0]) & (members_t <= keys[-1])]
    truth[(inside - keys[0]).astype(np.int64)] = True
    return truth


#: keys per query call over U (bounds the temporaries of a batch query: positions are k int64 per key)
QUERY_CHUNK = 1 << 19


def type_chunks(population: Population, t: int):
    """The keys of type t in chunks of at most :data:`QUERY_CHUNK` (uint64 arrays)."""
    for keys in population.type_keys(t):
        for lo in range(0, len(keys), QUERY_CHUNK):
            yield keys[lo:lo + QUERY_CHUNK]


def _type_errors(population, members, t, answer_of) -> tuple[int, int]:
    """FP and FN counts of one type, asking ``answer_of(keys)`` about each of its keys (in chunks)."""
    fp = fn = 0
    for keys in type_chunks(population, t):
        answer = answer_of(keys)
        truth = _truth_mask(members[t], keys)
        fp += int(np.count_nonzero(answer & ~truth))
        fn += int(np.count_nonzero(~answer & truth))
    return fp, fn


def bloom_seed(population: Population, bits_per_key: int, alphas, seed: int, *, rules=("theorem1", "exact"),
               columns=("bf", "insert", "query", "both", "gbf", "rbf"), log=None) -> TrialResults:
    """One seed of Table II at one memory size: every column, both alphas.

    The members and the hash seed are drawn exactly as :func:`bloomwise.paradox.simulation.bloom_trial` draws them
    (same ``seed``), so the BF and Selective BF columns give the same counts as that function.
    """
    rng = np.random.default_rng(seed)
    members = population.draw_members(rng)
    all_members = np.concatenate(members)
    m, k = bloom_num_hashes(population, bits_per_key)
    hash_seed = int(rng.integers(0, 2**63))
    per = population.members_per_type
    nt = population.num_types
    out = TrialResults()

    # which (inserted set -> types to ask) the BF-family columns need
    plans = {}
    for alpha in alphas:
        for variant in ("bf",) + SELECTIVE_VARIANTS:
            if variant not in columns:
                continue
            for rule in (("plain",) if variant == "bf" else rules):
                if variant == "bf":
                    plan = (tuple([True] * nt), tuple([True] * nt))
                else:
                    plan = selective_plan(population, bits_per_key, alpha, variant, rule)
                plans[(variant, alpha, rule)] = plan
    needed: dict[tuple, set] = {}
    for inserted, consulted in plans.values():
        needed.setdefault(inserted, set()).update(t for t in range(nt) if consulted[t])
    errors: dict[tuple, dict[int, tuple[int, int]]] = {}
    for inserted, types in needed.items():
        f = BloomFilter.from_size(m, k, layout="partitioned", seed=hash_seed)
        chosen = [members[t] for t in range(nt) if inserted[t]]
        if chosen:
            f.update(np.concatenate(chosen))
        errors[inserted] = {t: _type_errors(population, members, t, f.contains_many) for t in sorted(types)}
    for (variant, alpha, rule), (inserted, consulted) in plans.items():
        fp = np.zeros(nt, dtype=np.int64)
        fn = np.zeros(nt, dtype=np.int64)
        for t in range(nt):
            if consulted[t]:
                fp[t], fn[t] = errors[inserted][t]
            else:
                fn[t] = per
        out.outcomes[(variant, alpha, rule)] = Outcome(fp, fn)

    if "gbf" in columns:
        _gbf_columns(population, members, all_members, m, k, alphas, hash_seed, rng, out)
    if "rbf" in columns:
        _rbf_columns(population, members, all_members, m, k, alphas, hash_seed, rng, out)
    return out


def _whole_universe_errors(population, members, contains_many) -> Outcome:
    nt = population.num_types
    fp = np.zeros(nt, dtype=np.int64)
    fn = np.zeros(nt, dtype=np.int64)
    for t in range(nt):
        fp[t], fn[t] = _type_errors(population, members, t, contains_many)
    return Outcome(fp, fn)


def _gbf_columns(population, members, all_members, m, k, alphas, hash_seed, rng, out) -> None:
    n = population.num_members
    order = rng.permutation(len(all_members))
    measured = {}
    for alpha in alphas:
        k0, _ = gbf_optimal_num_reset_hashes(m, n, k, population.num_nonmembers, alpha)
        if k0 not in measured:
            g = GeneralizedBloomFilter.from_size(m, k, k0, seed=hash_seed)
            g.update(all_members[order])
            measured[k0] = _whole_universe_errors(population, members, g.contains_many)
        out.outcomes[("gbf", alpha, "k0")] = measured[k0]
        out.details[("gbf", alpha)] = {"k0": k0, "k1": k}


def _rbf_columns(population, members, all_members, m, k, alphas, hash_seed, rng, out) -> None:
    """The RBF as the paper's cells show it ran, and the cost-aware variant as an extra.

    The paper's RBF (``("rbf", alpha, "paper")``): Ratio Selection (Donnet et al.) over every false positive of
    U \\ S, run until no known false positive is left (``max_ratio=inf``; the weights alpha/1 scale every ratio
    alike, so the clears do not depend on alpha), kept only when it costs less than the untouched filter. Its
    printed cells are exactly these two outcomes: fpr 0 with every member lost (cost alpha n), or the BF (alpha =
    100, 10 bits). The cost-aware variant (``("rbf_cost_aware", alpha, "ratio")``) clears a bit only when
    alpha A / B < 1, i.e. when clearing it lowers the total cost; the paper does not describe it.
    """
    base = RetouchedBloomFilter.from_size(m, k, seed=hash_seed)
    base.update(all_members)
    fps = []
    nt = population.num_types
    fp_before = np.zeros(nt, dtype=np.int64)
    for t in range(nt):
        for keys in type_chunks(population, t):
            answer = base.contains_many(keys)
            truth = _truth_mask(members[t], keys)
            hits = keys[answer & ~truth]
            fp_before[t] += hits.size
            fps.append(hits)
    fps = np.concatenate(fps) if fps else np.zeros(0, dtype=np.uint64)
    order_seed = int(rng.integers(0, 2**63))
    n = population.num_members
    untouched = Outcome(fp_before, np.zeros(nt, dtype=np.int64))
    cleared = base.copy()
    to_the_end = cleared.retouch(fps, scheme="ratio", false_negative_weight=1.0, false_positive_weight=1.0,
                                 max_ratio=math.inf, seed=order_seed)
    del cleared
    fp = np.zeros(nt, dtype=np.int64)
    fn = np.zeros(nt, dtype=np.int64)
    fp[0], fn[0] = to_the_end.kept, to_the_end.false_negatives  # totals only (no per-type split for the RBF)
    all_cleared = Outcome(fp, fn)
    for alpha in alphas:
        clear_cost = float(to_the_end.kept) + alpha * to_the_end.false_negatives
        keep_cost = float(fp_before.sum())
        chosen = all_cleared if clear_cost < keep_cost else untouched
        out.outcomes[("rbf", alpha, "paper")] = chosen
        out.details[("rbf", alpha)] = {
            "false_positives_before": int(fp_before.sum()), "cleared_bits": to_the_end.cleared_bits,
            "members_lost": int(to_the_end.false_negatives), "fp_left": int(to_the_end.kept),
            "cleared": chosen is all_cleared, "num_members": n}
        f = base.copy()
        result = f.retouch(fps, scheme="ratio", false_negative_weight=float(alpha), false_positive_weight=1.0,
                           max_ratio=1.0, seed=order_seed)
        del f
        fp = np.zeros(nt, dtype=np.int64)
        fn = np.zeros(nt, dtype=np.int64)
        fp[0], fn[0] = result.kept, result.false_negatives
        out.outcomes[("rbf_cost_aware", alpha, "ratio")] = Outcome(fp, fn)
        out.details[("rbf_cost_aware", alpha)] = {"cleared_bits": result.cleared_bits}


def counting_seed(population: Population, counters_per_key: int, alpha: float, seed: int,
                  counter_bits: int = 4) -> TrialResults:
    """One seed of Table III at one memory size: the CBF (positivity) and the query-selective CBF.

    Draws S and the hash seed as :func:`bloomwise.paradox.simulation.counting_trial` does, and reads every key's
    counters once (``counters_many``, the compiled path): the CBF answers "present" iff all are non-zero, the
    Selective CBF iff their product reaches Theorems 2 and 4's threshold ``(1 - P)/(alpha P) (n k / m)^k`` for the
    key's prior, and never for a prior below :class:`~bloomwise.paradox.SelectiveCountingBloomFilter`'s
    ``skip_threshold``, exactly its decisions (the test suite checks the counts against ``counting_trial``).
    """
    rng = np.random.default_rng(seed)
    members = population.draw_members(rng)
    m, k = bloom_num_hashes(population, counters_per_key)
    hash_seed = int(rng.integers(0, 2**63))
    cbf = CountingBloomFilter.from_size(m, k, counter_bits=counter_bits, layout="partitioned", seed=hash_seed)
    selective = SelectiveCountingBloomFilter(cbf, population.prior(), CostModel.from_alpha(alpha))
    selective.update(np.concatenate(members))
    n = cbf.num_keys
    skip = selective.skip_threshold
    nt = population.num_types
    plain_fp, plain_fn = np.zeros(nt, dtype=np.int64), np.zeros(nt, dtype=np.int64)
    fp, fn = np.zeros(nt, dtype=np.int64), np.zeros(nt, dtype=np.int64)
    log_load = k * math.log(n * k / m)
    saturation = (1 << counter_bits) - 1
    exact_ints = k * math.log2(max(saturation, 2)) < 62  # the product of k counters fits an int64
    for t, prior in enumerate(population.priors.tolist()):
        log_threshold = math.log((1.0 - prior) / (alpha * prior)) + log_load
        threshold = math.exp(log_threshold) * (1.0 - 1e-12)
        for keys in type_chunks(population, t):
            counters = np.asarray(cbf.counters_many(keys)).reshape(len(keys), k)
            if exact_ints:
                product = counters[:, 0].astype(np.int64)
                for j in range(1, k):
                    product *= counters[:, j]
                plain = product > 0
            else:
                plain = (counters > 0).all(axis=1)
            truth = _truth_mask(members[t], keys)
            plain_fp[t] += int(np.count_nonzero(plain & ~truth))
            plain_fn[t] += int(np.count_nonzero(~plain & truth))
            if prior < skip:
                fn[t] += int(truth.sum())
                continue
            if exact_ints:
                answer = product >= threshold
            else:
                with np.errstate(divide="ignore"):
                    answer = plain & (np.log(counters.astype(np.float64)).sum(axis=1)
                                      >= log_threshold - 1e-12 * max(1.0, abs(log_threshold)))
            fp[t] += int(np.count_nonzero(answer & ~truth))
            fn[t] += int(np.count_nonzero(~answer & truth))
    out = TrialResults()
    out.outcomes[("cbf", alpha, counters_per_key)] = Outcome(plain_fp, plain_fn)
    out.outcomes[("selective_cbf", alpha, counters_per_key)] = Outcome(fp, fn)
    return out


# --------------------------------------------------------------------------------------------------------------
# Replicates for the noise of one run (bloomwise.reproduce.noise)
# --------------------------------------------------------------------------------------------------------------
def _replicate_type_errors(population, members, rng, answer_of, errors: ReplicateErrors,
                           sample: int = SAMPLE_PER_TYPE) -> None:
    """One replicate: ``answer_of(t, keys)`` per type; FN on all members, FP estimated from sampled non-members."""
    fn = 0
    fp = sampling = binomial = 0.0
    for t in range(population.num_types):
        fn += int(np.count_nonzero(~answer_of(t, members[t])))
        keys, nonmembers, whole = sample_nonmembers(rng, int(population.offsets[t]), int(population.sizes[t]),
                                                    members[t], sample)
        positives = int(np.count_nonzero(answer_of(t, keys))) if len(keys) else 0
        f, s, b = type_estimate(positives, len(keys), nonmembers, whole)
        fp, sampling, binomial = fp + f, sampling + s, binomial + b
    errors.add(fp, sampling, binomial, fn)


def _replicate_from_fill(population, members, rho: float, consulted, answer_of, errors: ReplicateErrors) -> None:
    """One replicate whose filter gives every asked non-member the same false-positive probability ``rho`` (from
    its fill): FP = sum over consulted types of Bin(N_t, rho), so its expectation given the filter is exact and has
    no sampling variance; FN counted on all members."""
    fn = 0
    asked = 0
    for t in range(population.num_types):
        fn += int(np.count_nonzero(~answer_of(t, members[t])))
        if consulted[t]:
            asked += int(population.sizes[t]) - len(members[t])
    errors.add(asked * rho, 0.0, asked * rho * (1 - rho), fn)


def bloom_replicates(population: Population, bits_per_key: int, alphas, replicates: int, seed: int, *,
                     rule: str = "theorem1", gbf: bool = True) -> dict:
    """Replicate filters of Table II's BF, Selective BF and GBF columns: ``{(column, alpha): ReplicateErrors}``
    (``column`` in bf, insert, query, both, gbf), each from ``replicates`` fresh draws of S and hash seeds.

    A replicate's false-positive probability comes from its fill F (the fraction of bits set): F^k for the
    partitioned BF (to first order the product of its k slices' fills, which are independent), F^k1 (1 - F)^k0
    for the GBF; its false negatives are counted on all members.
    """
    m, k = bloom_num_hashes(population, bits_per_key)
    nt = population.num_types
    everything = tuple([True] * nt)
    plans = {("bf", alpha): (everything, everything) for alpha in alphas}
    for alpha in alphas:
        for variant in SELECTIVE_VARIANTS:
            plans[(variant, alpha)] = selective_plan(population, bits_per_key, alpha, variant, rule)
    out = {key: ReplicateErrors.empty() for key in plans}
    k0s = {alpha: gbf_optimal_num_reset_hashes(m, population.num_members, k, population.num_nonmembers, alpha)[0]
           for alpha in alphas} if gbf else {}
    for alpha in k0s:
        out[("gbf", alpha)] = ReplicateErrors.empty()
    for r in range(replicates):
        rng = np.random.default_rng([seed, r])
        members = population.draw_members(rng)
        hash_seed = int(rng.integers(0, 2**63))
        filters = {}
        for inserted in {plan[0] for plan in plans.values()}:
            f = BloomFilter.from_size(m, k, layout="partitioned", seed=hash_seed)
            chosen = [members[t] for t in range(nt) if inserted[t]]
            if chosen:
                f.update(np.concatenate(chosen))
            filters[inserted] = f
        for key, (inserted, consulted) in plans.items():
            f = filters[inserted]

            def answer_of(t, keys, f=f, consulted=consulted):
                if not consulted[t] or len(keys) == 0:
                    return np.zeros(len(keys), dtype=bool)
                return np.asarray(f.contains_many(keys), dtype=bool)

            _replicate_from_fill(population, members, f.fill_ratio ** k, consulted, answer_of, out[key])
        all_members = np.concatenate(members)
        for k0 in sorted(set(k0s.values())):
            g = GeneralizedBloomFilter.from_size(m, k, k0, seed=hash_seed)
            g.update(all_members[rng.permutation(len(all_members))])
            fill = g.fill_ratio
            errors = ReplicateErrors.empty()
            _replicate_from_fill(population, members, fill ** k * (1 - fill) ** k0, everything,
                                 lambda t, keys: np.asarray(g.contains_many(keys), dtype=bool), errors)
            for alpha, chosen_k0 in k0s.items():
                if chosen_k0 == k0:
                    out[("gbf", alpha)].add(errors.fp[0], errors.fp_sampling_var[0], errors.fp_binomial_var[0],
                                            errors.fn[0])
    return out


def counting_replicates(population: Population, counters_per_key: int, alpha: float, replicates: int, seed: int, *,
                        counter_bits: int = 4) -> dict:
    """Replicate filters of Table III: ``{"cbf": ReplicateErrors, "selective": ReplicateErrors}`` (the CBF's FP
    probability from its fill, F^k; the Selective CBF's estimated from sampled non-members of each type)."""
    m, k = bloom_num_hashes(population, counters_per_key)
    out = {"cbf": ReplicateErrors.empty(), "selective": ReplicateErrors.empty()}
    for r in range(replicates):
        rng = np.random.default_rng([seed, r])
        members = population.draw_members(rng)
        hash_seed = int(rng.integers(0, 2**63))
        cbf = CountingBloomFilter.from_size(m, k, counter_bits=counter_bits, layout="partitioned", seed=hash_seed)
        selective = SelectiveCountingBloomFilter(cbf, population.prior(), CostModel.from_alpha(alpha))
        selective.update(np.concatenate(members))
        sample_seed = int(rng.integers(0, 2**63))
        everything = tuple([True] * population.num_types)
        _replicate_from_fill(population, members, cbf.fill_ratio ** k, everything,
                             lambda t, keys: np.asarray(cbf.contains_many(keys), dtype=bool), out["cbf"])
        _replicate_type_errors(population, members, np.random.default_rng(sample_seed),
                               lambda t, keys: np.asarray(selective.query_many(keys).member, dtype=bool)
                               if len(keys) else np.zeros(0, dtype=bool), out["selective"])
    return out
