"""Section VIII.C of *The Bloom Paradox* (Figures 9a-c) on a synthetic stand-in for the backbone trace.

The paper stores the n = 2^10 distinct 5-tuples seen in a short window of an OC192 backbone trace in a Selective
CBF (30 bits per element, 4-bit counters: m = 7,680 counters) and queries the N = 2^20 distinct tuples of a longer
window (the first n among them), so every query has prior n/N = 2^-10. That trace is not public. The stand-in keeps
everything the error rates depend on and replaces only the tuples:

- N distinct 5-tuples (source and destination IPv4 address, source and destination port, protocol 6 or 17) drawn
  uniformly from a seeded generator; the first n are stored, all N are queried;
- a partitioned 4-bit ``CountingBloomFilter`` of m = bits_per_element * n / 4 counters, keys hashed by bloomwise
  (XXH3 of the 13 bytes of the tuple), or, with ``hash="wang64"``, by Thomas Wang's 64-bit integer mix (the
  "64-bit mix hash function" the paper cites, folded over the tuple) and counted in a numpy counter array with the
  same probes and the same 4-bit saturation.

What it can speak to: everything that depends on the counter values of stored and non-stored keys under good
hashing (the CBF's FPR for k = 4, 5, 6; the FPR/FNR at any product threshold; Theorem 4's thresholds; the costs of
Figures 9b and 9c). What it cannot: anything specific to the trace (repeated flows, skewed popularity, the trace's
own realisation), so single observations of the paper (FNR 0.39258 = 402/1024 members) are compared with their
expectation and its noise, not reproduced digit for digit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bloomwise._positions import fmix64, mulhi
from bloomwise.counting import CountingBloomFilter
from bloomwise.paradox.optimal_k import counter_pmf, product_tails
from bloomwise.reproduce.noise import ReplicateErrors, type_estimate

__all__ = ["TraceSetup", "synthetic_tuples", "tuple_keys", "wang64", "TraceRun", "run_trace",
           "theorem4_product_threshold", "theorem4_threshold", "theorem4_cost", "expected_rates", "trace_replicates",
           "TraceReplicates", "N_QUERIES_PAPER"]

#: the paper's N: costs of Figures 9(b) and 9(c) count N - n = 2^20 - 2^10 non-member queries
N_QUERIES_PAPER = 1 << 20

_M64 = (1 << 64) - 1


@dataclass(frozen=True)
class TraceSetup:
    """The paper's set-up: n stored, N queried, bits per element, 4-bit counters."""

    stored: int = 1 << 10
    queried: int = 1 << 20
    bits_per_element: int = 30
    counter_bits: int = 4
    decision_prior: float | None = None  # the prior decisions use; default stored / queried

    @property
    def num_counters(self) -> int:
        return self.bits_per_element * self.stored // self.counter_bits

    @property
    def prior(self) -> float:
        """The a-priori membership probability the Selective CBF decides with (n / N of the paper's trace; a
        smaller CI run queries a sample of the trace's non-members and keeps the full trace's prior)."""
        return self.decision_prior if self.decision_prior is not None else self.stored / self.queried


def wang64(x: np.ndarray) -> np.ndarray:
    """Thomas Wang's 64-bit integer mix (``hash64shift``), element-wise on uint64."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (~x) + (x << np.uint64(21))
        x = x ^ (x >> np.uint64(24))
        x = x + (x << np.uint64(3)) + (x << np.uint64(8))
        x = x ^ (x >> np.uint64(14))
        x = x + (x << np.uint64(2)) + (x << np.uint64(4))
        x = x ^ (x >> np.uint64(28))
        x = x + (x << np.uint64(31))
    return x


def synthetic_tuples(count: int, seed: int) -> np.ndarray:
    """``count`` distinct 5-tuples as a structured array (src, dst: uint32; sport, dport: uint16; proto: uint8)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype([("src", "<u4"), ("dst", "<u4"), ("sport", "<u2"), ("dport", "<u2"), ("proto", "u1")])
    out = np.zeros(0, dtype=dtype)
    while len(out) < count:
        extra = count - len(out) + 64
        batch = np.zeros(extra, dtype=dtype)
        batch["src"] = rng.integers(0, 2**32, extra, dtype=np.uint32)
        batch["dst"] = rng.integers(0, 2**32, extra, dtype=np.uint32)
        batch["sport"] = rng.integers(1024, 2**16, extra, dtype=np.uint16)
        batch["dport"] = rng.choice(np.array([80, 443, 53, 25, 22, 8080], dtype=np.uint16), extra)
        batch["proto"] = rng.choice(np.array([6, 17], dtype=np.uint8), extra, p=[0.8, 0.2])
        merged = np.concatenate([out, batch])
        _, first = np.unique(merged.view(np.dtype((np.void, dtype.itemsize))), return_index=True)
        out = merged[np.sort(first)][:count]
    return out


def tuple_keys(tuples: np.ndarray) -> np.ndarray:
    """Each tuple as 13 bytes plus a 0x01 end marker (numpy 'S' arrays strip trailing NULs)."""
    raw = np.zeros((len(tuples), 14), dtype=np.uint8)
    raw[:, :13] = np.frombuffer(tuples.tobytes(), dtype=np.uint8).reshape(len(tuples), 13)
    raw[:, 13] = 1
    return raw.view("S14").reshape(-1)


def _wang_counters(tuples, stored: int, m: int, k: int, seed: int, saturation: int) -> np.ndarray:
    """Counters of the first ``stored`` tuples' keys and every tuple's counter values (N, k), numpy CBF."""
    folded = ((tuples["src"].astype(np.uint64) << np.uint64(32)) | tuples["dst"].astype(np.uint64))
    low = ((tuples["sport"].astype(np.uint64) << np.uint64(24)) | (tuples["dport"].astype(np.uint64) << np.uint64(8))
           | tuples["proto"].astype(np.uint64))
    h = wang64(folded ^ wang64(low ^ np.uint64(seed & _M64)))
    step = fmix64(h) | np.uint64(1)
    starts = [i * m // k for i in range(k + 1)]
    pos = np.empty((len(h), k), dtype=np.int64)
    with np.errstate(over="ignore"):
        for i in range(k):
            pos[:, i] = starts[i] + mulhi(h + np.uint64(i) * step, starts[i + 1] - starts[i]).astype(np.int64)
    counts = np.bincount(pos[:stored].ravel(), minlength=m)
    counts = np.minimum(counts, saturation)
    return counts[pos]


@dataclass
class TraceRun:
    """Counter products of every queried tuple for each k, and which tuples are stored."""

    setup: TraceSetup
    hash: str
    products: dict = field(default_factory=dict)  # k -> int64 array (N,)
    member: np.ndarray = None

    def rates(self, k: int, threshold: float) -> tuple[float, float]:
        """(FPR, FNR) when "present" means product >= threshold (threshold 1: the plain CBF)."""
        prod = self.products[k]
        nonmember = ~self.member
        fpr = float(np.count_nonzero((prod >= threshold) & nonmember)) / int(nonmember.sum())
        fnr = float(np.count_nonzero((prod < threshold) & self.member)) / int(self.member.sum())
        return fpr, fnr

    def cost(self, k: int, threshold: float, alpha: float) -> float:
        fpr, fnr = self.rates(k, threshold)
        s = self.setup
        return (s.queried - s.stored) * fpr + alpha * s.stored * fnr


def run_trace(setup: TraceSetup, ks=(4, 5, 6), *, seed: int = 0, hash: str = "xxh3",
              tuples: np.ndarray | None = None) -> TraceRun:
    """Build the stand-in and record the counter products of all N queries for each k (``tuples``: reuse a trace
    already drawn, at least N long; by default ``synthetic_tuples(N, seed)``)."""
    if hash not in ("xxh3", "wang64"):
        raise ValueError(f"hash must be 'xxh3' or 'wang64', got {hash!r}")
    tuples = synthetic_tuples(setup.queried, seed) if tuples is None else tuples[: setup.queried]
    member = np.zeros(setup.queried, dtype=bool)
    member[: setup.stored] = True
    run = TraceRun(setup, hash, member=member)
    keys = tuple_keys(tuples)
    saturation = (1 << setup.counter_bits) - 1
    for k in ks:
        m = setup.num_counters
        if hash == "xxh3":
            cbf = CountingBloomFilter.from_size(m, k, counter_bits=setup.counter_bits, layout="partitioned",
                                                seed=seed + 1000 * k)
            cbf.update(keys[: setup.stored])
            counters = np.asarray(cbf.counters_many(keys), dtype=np.int64).reshape(setup.queried, k)
        else:
            counters = _wang_counters(tuples, setup.stored, m, k, seed + 1000 * k, saturation)
        run.products[k] = np.prod(counters, axis=1)
    return run


def theorem4_product_threshold(setup: TraceSetup, k: int, alpha: float, prior: float | None = None) -> float:
    """The smallest counter product Theorems 2 and 4 answer "present" for: ``(1 - P)/(alpha P) (n k / m)^k``."""
    p = setup.prior if prior is None else prior
    return (1.0 - p) / (alpha * p) * (setup.stored * k / setup.num_counters) ** k


def expected_rates(setup: TraceSetup, k: int, thresholds) -> tuple[np.ndarray, np.ndarray]:
    """Exact (FPR, FNR) at product thresholds under ideal hashing (partitioned binomial model, 4-bit saturation)."""
    n, m = setup.stored, setup.num_counters
    saturation = (1 << setup.counter_bits) - 1
    pmf0 = counter_pmf(n, k / m, 0, saturation)
    pmf1 = counter_pmf(n - 1, k / m, 1, saturation)
    t = np.asarray(thresholds, dtype=np.float64)
    return product_tails(pmf0, k, t), 1.0 - product_tails(pmf1, k, t)


def theorem4_threshold(setup: TraceSetup, k: int, alpha: float) -> float:
    """The integer product threshold the Selective CBF uses: the smallest integer >= Theorem 4's, at least 1."""
    t = theorem4_product_threshold(setup, k, alpha)
    return max(1.0, math.ceil(t - 1e-9))


def theorem4_cost(run: TraceRun, k: int, alpha: float) -> float:
    """The Selective CBF's total cost at Theorem 4's threshold, FP counts scaled to the paper's N = 2^20 queries."""
    fpr, fnr = run.rates(k, theorem4_threshold(run.setup, k, alpha))
    return fpr * (N_QUERIES_PAPER - run.setup.stored) + alpha * run.setup.stored * fnr


@dataclass
class TraceReplicates:
    """Counter products of replicate filters (fresh random keys): ``members[k]`` (R, n), ``sampled[k]`` (R, s), and
    each filter's fill ``fills[k]`` (R,)."""

    setup: TraceSetup
    members: dict
    sampled: dict
    fills: dict  # k -> (R,) fraction of non-zero counters of each replicate filter

    @property
    def samples(self) -> int:
        return next(iter(self.members.values())).shape[0]

    def errors(self, k: int, threshold: float) -> ReplicateErrors:
        """FP (of the N - n non-member queries) and FN counts per replicate when "present" means product >=
        threshold."""
        nonmembers = self.setup.queried - self.setup.stored
        out = ReplicateErrors.empty()
        for mem, smp, fill in zip(self.members[k], self.sampled[k], self.fills[k]):
            fn = int(np.count_nonzero(mem < threshold))
            if threshold <= 1:  # the plain CBF: every non-member is positive with probability fill^k
                rho = float(fill) ** k
                out.add(nonmembers * rho, 0.0, nonmembers * rho * (1 - rho), fn)
                continue
            positives = int(np.count_nonzero(smp >= threshold))
            fp, sampling, binomial = type_estimate(positives, len(smp), nonmembers, False)
            out.add(fp, sampling, binomial, fn)
        return out


def trace_replicates(setup: TraceSetup, ks, replicates: int, seed: int, sample: int = 1 << 17) -> TraceReplicates:
    """Replicates of the stand-in's filter: n fresh random keys stored in a partitioned 4-bit CBF per k, the products
    of their counters and of ``sample`` random non-member keys (for the noise of one trace:
    :mod:`bloomwise.reproduce.noise`)."""
    members = {k: np.zeros((replicates, setup.stored), dtype=np.int64) for k in ks}
    sampled = {k: np.zeros((replicates, sample), dtype=np.int64) for k in ks}
    fills = {k: np.zeros(replicates) for k in ks}
    for r in range(replicates):
        rng = np.random.default_rng([seed, r])
        keys = rng.choice(np.iinfo(np.int64).max, size=setup.stored + sample, replace=False).astype(np.uint64)
        for k in ks:
            cbf = CountingBloomFilter.from_size(setup.num_counters, k, counter_bits=setup.counter_bits,
                                                layout="partitioned", seed=int(rng.integers(0, 2**63)))
            cbf.update(keys[: setup.stored])
            counters = np.asarray(cbf.counters_many(keys), dtype=np.int64).reshape(len(keys), k)
            products = np.prod(counters, axis=1)
            members[k][r] = products[: setup.stored]
            sampled[k][r] = products[setup.stored:]
            fills[k][r] = cbf.fill_ratio
    return TraceReplicates(setup, members, sampled, fills)
