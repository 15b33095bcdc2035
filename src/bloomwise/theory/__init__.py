"""All of bloomwise's math: false-positive rates per layout, sizing, the integer k, plan(), counter bounds, the
variable-increment filter's rates and fill-based estimates.

Every structure, the command line and the paradox code call these functions. They are pure (``math`` only:
importing this package loads neither numpy nor anything else heavy), validate their inputs, and say in their
docstrings which formula they compute and where it comes from. One module per topic:

- :mod:`~bloomwise.theory.rates`: the false-positive rate of each layout (``false_positive_rate``);
- :mod:`~bloomwise.theory.sizing`: the number of hashes, the size for a target rate, ``bits_per_item``,
  ``plan()``/``Plan``;
- :mod:`~bloomwise.theory.counting`: counter-overflow bounds, the expected largest count, and the
  variable-increment counting filter's rates and sizing;
- :mod:`~bloomwise.theory.fill`: from the number of bits set to the number of keys and the current rate;
- :mod:`~bloomwise.theory.generalized`: the Generalized Bloom filter's false-positive and false-negative rates;
- :mod:`~bloomwise.theory.retouched`: the Retouched Bloom filter's rates under random bit clearing.

Cheat sheet (m = bits, n = keys, k = hashes, b = m/n bits per key, p = false-positive rate)::

    classic      p = (1 - (1 - 1/m)^(kn))^k  ~  (1 - e^(-kn/m))^k               Bloom 1970; Fan et al. 2000
    partitioned  p = prod_i (1 - (1 - 1/s_i)^n),  s_i = |[i*m//k, (i+1)*m//k)|  one probe per slice
    blocked      p = sum_j Bin(j; n, 1/B) prod_l P_l(j)    B = m/512 blocks of eight 64-bit lanes, j keys in
                   one-probe lane: P = 1 - (63/64)^j        the query's block (split block; k <= 8: one probe
                   two-probe lane: P = (63/64)(1 - 2 (63/64)^(2j) + (62/64)^(2j)) + (1/64)(1 - (63/64)^(2j))
                                                            per lane, k > 8: two in k - 8 lanes)
    best real k  k* = b ln 2, then p = 2^-k* = 0.6185^b                           Fan et al. 2000
    integer k    the better of floor(b ln 2) and ceil(b ln 2) by the FP formula (never 0)
    sizing       m = -n ln p / (ln 2)^2 = 1.44 n log2(1/p);  limit: log2(1/p) bits per key
    counters     Pr(max c >= i) <= m (e n k / (i m))^i <= m (e ln 2 / i)^i  ->  1.37e-15 m at i = 16
    max count    E[max c] ~ G(1 + ln(kn/m) / ln G),  G = Gamma^-1(m)             Fan et al. 2000 (Gonnet 1981)
    count        n ~ -(m/k) ln(1 - X/m)  from X bits set                          Swamidass & Baldi 2007

The positions each layout uses are those of docs/architecture.md ("From the hash to positions"); the formulas
above treat the hashes as ideal (uniform, independent), which the Monte-Carlo tests check against bloomwise's
own filters. The printed tables of *Summary Cache* are reproduced in :mod:`bloomwise.reproduce.summary_cache`.
"""
from __future__ import annotations

from bloomwise.theory._validate import BLOCK_BITS, LAYOUTS, MAX_BLOCKED_HASHES, MAX_NUM_CELLS
from bloomwise.theory.counting import (
    DEFAULT_INCREMENTS, bh_order, counter_overflow_bound, dl_false_positive_rate, dl_increments, expected_max_count,
    inverse_gamma, vicbf_false_positive_rate, vicbf_optimal_size,
)
from bloomwise.theory.generalized import (
    gbf_bit_probabilities, gbf_error_rates, gbf_false_negative_rate, gbf_false_positive_rate,
    gbf_optimal_num_reset_hashes,
)
from bloomwise.theory.retouched import rbf_random_clearing_rates
from bloomwise.theory.fill import CountEstimate, approx_count, fill_moments, fpr_from_fill
from bloomwise.theory.rates import false_positive_rate
from bloomwise.theory.sizing import (
    Plan, bits_per_item, optimal_num_hashes, optimal_num_hashes_real, optimal_size, plan,
)

__all__ = [
    "LAYOUTS",
    "BLOCK_BITS",
    "MAX_BLOCKED_HASHES",
    "MAX_NUM_CELLS",
    "false_positive_rate",
    "optimal_num_hashes",
    "optimal_num_hashes_real",
    "optimal_size",
    "bits_per_item",
    "Plan",
    "plan",
    "counter_overflow_bound",
    "expected_max_count",
    "inverse_gamma",
    "dl_increments",
    "DEFAULT_INCREMENTS",
    "bh_order",
    "dl_false_positive_rate",
    "vicbf_false_positive_rate",
    "vicbf_optimal_size",
    "CountEstimate",
    "approx_count",
    "fpr_from_fill",
    "fill_moments",
    "gbf_bit_probabilities",
    "gbf_false_positive_rate",
    "gbf_false_negative_rate",
    "gbf_error_rates",
    "gbf_optimal_num_reset_hashes",
    "rbf_random_clearing_rates",
]
