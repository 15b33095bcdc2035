"""Figure 8 of *The Bloom Paradox* (section VIII.B): the membership probability of a key given the product of its
k = 6 counters, observed in simulation, for priors 2^-3, 2^-5 and 2^-7, against Theorem 2.

Set-up: the section VIII.A population (13 types x 256 members), a partitioned 4-bit ``CountingBloomFilter`` with 8
counters per member (32 bits per element; k = 6, the integer-k rule's choice) holding all of S. For each seed, every
key of the three types is asked for its counters (``counters_many``); the observed probability at product p is the
fraction of members among the keys of that prior whose counters multiply to p, pooled over the seeds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bloomwise.counting import CountingBloomFilter
from bloomwise.paradox.simulation import Population, bloom_num_hashes

__all__ = ["ProductCounts", "product_counts", "theorem2_posterior", "FIG8_EXPONENTS", "FIG8_MAX_PRODUCT",
           "attainable_products", "isotonic_fractions"]

FIG8_EXPONENTS = (3, 5, 7)
FIG8_MAX_PRODUCT = 100
FIG8_COUNTERS_PER_KEY = 8


@dataclass
class ProductCounts:
    """``members[e][p]`` and ``keys[e][p]``: over all seeds, keys of prior 2^-e whose counter product is p."""

    members: dict
    keys: dict
    num_counters: int
    num_items: int
    num_hashes: int
    seeds: int

    def observed(self, exponent: int, product: int) -> tuple[float, int]:
        """(fraction of members, number of keys) at a product."""
        total = int(self.keys[exponent][product])
        return (float(self.members[exponent][product]) / total if total else float("nan")), total


def product_counts(population: Population, seeds, counters_per_key: int = FIG8_COUNTERS_PER_KEY,
                   exponents=FIG8_EXPONENTS, max_product: int = FIG8_MAX_PRODUCT) -> ProductCounts:
    m, k = bloom_num_hashes(population, counters_per_key)
    members_count = {e: np.zeros(max_product + 1, dtype=np.int64) for e in exponents}
    keys_count = {e: np.zeros(max_product + 1, dtype=np.int64) for e in exponents}
    types = [population.exponents.index(e) for e in exponents]
    nseeds = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        members = population.draw_members(rng)
        hash_seed = int(rng.integers(0, 2**63))
        cbf = CountingBloomFilter.from_size(m, k, counter_bits=4, layout="partitioned", seed=hash_seed)
        cbf.update(np.concatenate(members))
        for e, t in zip(exponents, types):
            for keys in population.type_keys(t):
                counters = np.asarray(cbf.counters_many(keys), dtype=np.int64).reshape(len(keys), k)
                product = np.prod(np.minimum(counters, max_product + 1), axis=1)
                inside = product <= max_product
                truth = np.isin(keys, members[t])
                keys_count[e] += np.bincount(product[inside], minlength=max_product + 1)[: max_product + 1]
                members_count[e] += np.bincount(product[inside & truth], minlength=max_product + 1)[: max_product + 1]
        nseeds += 1
    return ProductCounts(members_count, keys_count, m, population.num_members, k, nseeds)


def theorem2_posterior(product, prior: float, num_counters: int, num_items: int, num_hashes: int):
    """Theorem 2: ``m^k p P / (m^k p P + (n k)^k (1 - P))`` (exact for the partitioned layout)."""
    x = (num_items * num_hashes / num_counters) ** num_hashes
    product = np.asarray(product, dtype=np.float64)
    return product * prior / (product * prior + x * (1.0 - prior))


def attainable_products(num_hashes: int, max_counter: int, limit: int) -> list[int]:
    """The products ``c_1 ... c_k <= limit`` of k counters in 1..max_counter (a product like 23 > 15, prime, never
    occurs)."""
    products = {1}
    for _ in range(num_hashes):
        products = {p * c for p in products for c in range(1, max_counter + 1) if p * c <= limit}
    return sorted(products)


def isotonic_fractions(counts: ProductCounts, exponent: int) -> list[tuple[int, float]]:
    """The observed member fractions per product, made non-decreasing in the product (Corollary 3: the posterior
    increases with the product) by pool-adjacent-violators weighted by the keys seen: ``[(product, fitted), ...]``
    over the products seen at least once."""
    blocks = []  # [members, keys, first product, last product]
    for p in range(1, len(counts.keys[exponent])):
        total = int(counts.keys[exponent][p])
        if total == 0:
            continue
        blocks.append([float(counts.members[exponent][p]), float(total), [p]])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            last = blocks.pop()
            blocks[-1][0] += last[0]
            blocks[-1][1] += last[1]
            blocks[-1][2] += last[2]
    return [(p, members / keys) for members, keys, products in blocks for p in products]
