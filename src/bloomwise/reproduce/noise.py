"""The noise of one run of a simulated experiment, estimated from replicate filters.

A printed number of the paper is one run of an experiment; the reproduction's value is the mean of a few runs. For
the verdict, the spread that matters is the standard deviation of one run: a run's false-positive count is
``FP = sum_t Bin(N_t, p_t)`` given its filter (p_t: the filter's false-positive probability for a non-member of
type t), and the filters vary from run to run. So

    Var(FP) = Var_filters(sum_t N_t p_t) + E[sum_t N_t p_t (1 - p_t)].

Each replicate builds a fresh filter from freshly drawn members (cheap: n keys), counts its false negatives on all
its members exactly, and gets ``F = sum_t N_t p_t`` either from theory given the filter (a Bloom filter's p from
its fill: every asked non-member has the same p, so F has no sampling variance) or, for filters whose p depends on
the key's counters and prior (the Selective CBF), from ``s_t`` sampled non-members of each type (all of them when a
type has no more than that), whose sampling variance given the filter, ``sum_t N_t^2 p_t (1 - p_t) / s_t``, is
subtracted from the spread of F across replicates. :data:`~bloomwise.reproduce.rows.MIN_NOISE_SAMPLES` or more
replicates; the same estimate serves every derived quantity (a cost ``FP + alpha FN``, a rate).

The sd of (printed - measured), when the measured value is the mean of ``runs`` runs, is
``sd_one_run * sqrt(1 + 1/runs)`` (:func:`difference_sd`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["ReplicateErrors", "sample_nonmembers", "type_estimate", "difference_sd", "REPLICATES", "SAMPLE_PER_TYPE"]

#: replicate filters per noise estimate
REPLICATES = 12
#: non-members sampled per type and replicate (a type with fewer non-members is queried whole)
SAMPLE_PER_TYPE = 1 << 13


@dataclass
class ReplicateErrors:
    """Per replicate: ``fp`` (estimated FP count of a whole run), ``fp_sampling_var`` (its sampling variance given the
    filter), ``fp_binomial_var`` (a whole run's binomial variance given the filter) and ``fn`` (exact FN count)."""

    fp: list
    fp_sampling_var: list
    fp_binomial_var: list
    fn: list

    @classmethod
    def empty(cls) -> "ReplicateErrors":
        return cls([], [], [], [])

    def add(self, fp: float, sampling_var: float, binomial_var: float, fn: float) -> None:
        self.fp.append(fp)
        self.fp_sampling_var.append(sampling_var)
        self.fp_binomial_var.append(binomial_var)
        self.fn.append(fn)

    @property
    def samples(self) -> int:
        return len(self.fp)

    def one_run_sd(self, fp_weight: float, fn_weight: float) -> float:
        """sd of one run of ``fp_weight FP + fn_weight FN`` (a rate: 1/(N - n) and 0, a cost: 1 and alpha)."""
        values = fp_weight * np.asarray(self.fp) + fn_weight * np.asarray(self.fn)
        spread = float(np.var(values, ddof=1)) if len(values) > 1 and np.ptp(values) > 0 else 0.0
        sampling = fp_weight ** 2 * float(np.mean(self.fp_sampling_var))
        binomial = fp_weight ** 2 * float(np.mean(self.fp_binomial_var))
        return math.sqrt(max(0.0, spread - sampling) + binomial)


def sample_nonmembers(rng: np.random.Generator, offset: int, size: int, members: np.ndarray,
                      sample: int = SAMPLE_PER_TYPE) -> tuple[np.ndarray, int, bool]:
    """Non-member keys of one type: all of them when the type has at most ``sample`` non-members, else ``sample``
    draws with replacement (members dropped). Returns ``(keys, number of non-members of the type, whole type?)``."""
    nonmembers = size - len(members)
    if nonmembers <= sample:
        keys = np.arange(offset, offset + size, dtype=np.uint64)
        return keys[~np.isin(keys, members)], nonmembers, True
    keys = rng.integers(0, size, sample, dtype=np.uint64) + np.uint64(offset)
    return keys[~np.isin(keys, members)], nonmembers, False


def type_estimate(positives: int, drawn: int, nonmembers: int, whole: bool) -> tuple[float, float, float]:
    """(estimated FP count, its sampling variance, the whole type's binomial variance) of one type."""
    if drawn == 0:
        return 0.0, 0.0, 0.0
    p = positives / drawn
    binomial = nonmembers * p * (1 - p)
    if whole:
        return float(positives), 0.0, 0.0
    return nonmembers * p, nonmembers ** 2 * p * (1 - p) / drawn, binomial


def difference_sd(one_run_sd: float, runs: int) -> float:
    """sd of (one run of the paper - the mean of ``runs`` runs of ours)."""
    return one_run_sd * math.sqrt(1.0 + 1.0 / max(1, runs))
