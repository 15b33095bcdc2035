"""Error rates of the Retouched Bloom filter under random bit clearing (Donnet, Baynat, Friedman, *Retouched Bloom
Filters: Allowing Networked Applications to Trade Off Selected False Positives Against False Negatives*, CoNEXT 2006).

An RBF is a Bloom filter (m bits, k hash functions, n keys) some of whose set bits are cleared afterwards. Random
clearing, the paper's lower bound on the selective schemes, clears bits that are uniform among the set bits. After
clearing a fraction ``chi`` of the set bits (``chi = s / (m (1 - p0))`` for s cleared bits, ``p0`` the fraction of zero
bits before clearing), with the k probes of a key independent::

    FNR = 1 - (1 - chi)^k                      a member loses at least one of its k bits
    FPR = (1 - p0 - s/m)^k = FPR_BF (1 - chi)^k    a non-member still finds all of its k bits set

(the paper's equations for f_N and f_P' of random selection). Ratio Selection (the paper's best heuristic) has no
closed form: it is measured (``RetouchedBloomFilter.retouch(..., scheme="ratio")``).
"""
from __future__ import annotations

import math

__all__ = ["rbf_random_clearing_rates"]


def rbf_random_clearing_rates(num_bits: int, num_items: int, num_hashes: int, cleared_bits: float, *,
                              set_bits: float | None = None) -> tuple[float, float]:
    """``(fpr, fnr)`` after clearing ``cleared_bits`` of the set bits uniformly at random.

    :param set_bits: the number of set bits before clearing (default: its expectation ``m (1 - (1 - 1/m)^(k n))``).

    >>> fpr, fnr = rbf_random_clearing_rates(10000, 1000, 7, 0)
    >>> round(fpr, 5), fnr
    (0.0082, 0.0)
    >>> [round(x, 4) for x in rbf_random_clearing_rates(10000, 1000, 7, 500)]
    [0.0039, 0.5192]
    """
    for name, value, low in (("num_bits", num_bits, 1), ("num_items", num_items, 0), ("num_hashes", num_hashes, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if set_bits is None:
        set_bits = num_bits * -math.expm1(num_hashes * num_items * math.log1p(-1.0 / num_bits))
    if not 0 <= set_bits <= num_bits:
        raise ValueError(f"set_bits must be in [0, num_bits], got {set_bits!r}")
    if not 0 <= cleared_bits <= set_bits:
        raise ValueError(f"cleared_bits must be in [0, set_bits = {set_bits:g}], got {cleared_bits!r}")
    chi = cleared_bits / set_bits if set_bits else 0.0
    fill = set_bits / num_bits
    keep = (1.0 - chi) ** num_hashes
    return fill ** num_hashes * keep, 1.0 - keep
