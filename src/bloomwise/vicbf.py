"""VariableIncrementCountingBloomFilter: the B_h / D_L variable-increment counting Bloom filter.

Rottenstreich, Kanizo and Keslassy, *The Variable-Increment Counting Bloom Filter* (INFOCOM 2012; ToN 22(4),
2014), in the B_h form that section VI of Rottenstreich and Keslassy, *The Bloom Paradox* (../shared/seeds/002_*)
builds on: each position holds a pair of counters, a fixed-increment counter c (how many keys hit it) and a
variable-increment counter a (the sum of their increments). A key's increment at each of its positions is drawn
by a second hash from a set D: D_L = {L, ..., 2L-1} (default, L = 4) or a B_h sequence such as {1, 2, 4}.

The analytic false-positive rates (this structure's and the literature's closed form for D_L) and the sizing are in
this module, next to the structure they describe; the kernels are compiled (``bloomwise._native.counting``).
"""
from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import Callable, NamedTuple, Optional, Sequence

from bloomwise import _format
from bloomwise._native.counting import VariableIncrementCore
from bloomwise._compatibility import Compatible
from bloomwise._persistence import Persistent, meta_capacity
from bloomwise._statistics import LAYOUT_NAMES, FillStatistics
from bloomwise.counting import (
    COUNTING_LAYOUTS, _cell_array_header, _check_capacity, _check_cell_array_header, _counting_layout_id,
    _over_capacity_warning,
)
from bloomwise.errors import FormatError

__all__ = [
    "VariableIncrementCountingBloomFilter", "Probe", "dl_increments", "DEFAULT_INCREMENTS", "bh_order",
    "vicbf_false_positive_rate", "dl_false_positive_rate", "vicbf_optimal_size",
]

_FEASIBLE_TABLE_LIMIT = 1 << 20   # bytes of the exact "sum of j increments" table; beyond it, min/max bounds
_MAX_BH_ORDER = 8                 # decoding multiplicities for c up to this many keys per position
_MAX_MULTISETS = 100_000          # ... and at most this many multisets of one size


def _check_L(L) -> int:
    if isinstance(L, bool) or not isinstance(L, int) or L < 1:
        raise ValueError(f"L must be an int >= 1, got {L!r}")
    return L


def dl_increments(L: int = 4) -> tuple[int, ...]:
    """D_L = {L, ..., 2L-1}: any sum of j >= 1 of them lies in [jL, j(2L-1)], so a - v in (0, L) is impossible.

    >>> dl_increments(4)
    (4, 5, 6, 7)
    """
    L = _check_L(L)
    return tuple(range(L, 2 * L))


#: D_4 = {4, 5, 6, 7}, the literature's example and bloomwise's default.
DEFAULT_INCREMENTS = dl_increments(4)


def _check_increments(increments) -> tuple[int, ...]:
    try:
        values = tuple(increments)
    except TypeError:
        raise TypeError(f"increments must be a sequence of ints, got {type(increments).__name__}") from None
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise ValueError(f"increments must be a non-empty sequence of ints >= 1, got {increments!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"increments must be distinct, got {increments!r}")
    if len(values) > 256:
        raise ValueError(f"increments may hold at most 256 values, got {len(values)}")
    return tuple(sorted(values))


def _multisets(increments: tuple[int, ...], size: int):
    """(sums, multiplicities) of every multiset of `size` increments; multiplicities[i][d] counts increments[d]."""
    import numpy as np
    combos = list(itertools.combinations_with_replacement(range(len(increments)), size))
    sums = np.array([sum(increments[i] for i in combo) for combo in combos], dtype=np.int64)
    multiplicities = np.zeros((len(combos), len(increments)), dtype=np.int32)
    for row, combo in enumerate(combos):
        for i in combo:
            multiplicities[row, i] += 1
    return sums, multiplicities


def bh_order(increments: Sequence[int], limit: int = _MAX_BH_ORDER, modulus: Optional[int] = None) -> int:
    """The largest h <= limit such that D is a B_h sequence: for each j <= h, all sums of j elements (a multiset)
    are distinct, so a sum of j <= h increments identifies its multiset. With ``modulus``, the sums must be
    distinct modulo it (a filter's variable counters count modulo 2^variable_bits).

    >>> bh_order((1, 2, 4)), bh_order(dl_increments(4))   # 1+1+4 = 2+2+2;  4+7 = 5+6
    (2, 1)
    """
    increments = _check_increments(increments)
    order = 0
    for size in range(1, limit + 1):
        if math.comb(len(increments) + size - 1, size) > _MAX_MULTISETS:
            break
        sums, _ = _multisets(increments, size)
        if modulus is not None:
            sums = sums % modulus
        if len(set(sums.tolist())) != len(sums):
            break
        order = size
    return order


# ---- analytic false-positive rate ------------------------------------------------------------------------------------
def dl_false_positive_rate(num_positions, num_hashes, num_items, L: int = 4) -> float:
    """The literature's D_L formula for the single-counter VI-CBF (no c, unbounded a), with q = 1 - 1/m:

    ``FPR = [1 - q^(nk) - ((L-1)/L) (nk/m) q^(nk-1) - ((L^2-1)/(6L^2)) C(nk, 2) m^-2 q^(nk-2)]^k``

    (Rottenstreich, Kanizo, Keslassy 2012; pyVICBF; literature.md section 6). A probe holding j other increments
    rejects a random v when j = 0, with probability (L-1)/L when j = 1 and (L^2-1)/(6L^2) when j = 2 (a - v in
    (0, L)); never when j >= 3. An upper bound for this filter, whose query also uses c.

    >>> round(dl_false_positive_rate(4000, 5, 1000), 5)
    0.01158
    """
    m, k, n = _check_mkn(num_positions, num_hashes, num_items)
    L = _check_L(L)
    nk = n * k
    q = 1.0 - 1.0 / m
    inner = (1.0 - q ** nk - (L - 1) / L * (nk / m) * q ** (nk - 1)
             - (L * L - 1) / (6.0 * L * L) * (nk * (nk - 1) / 2.0) / (m * m) * q ** (nk - 2))
    return max(inner, 0.0) ** k


def _check_mkn(num_positions, num_hashes, num_items) -> tuple[int, int, int]:
    values = []
    for name, value, low in (("num_positions", num_positions, 1), ("num_hashes", num_hashes, 1),
                             ("num_items", num_items, 0)):
        if isinstance(value, bool) or not hasattr(value, "__index__") or isinstance(value, float):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
        value = value.__index__()
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
        values.append(value)
    return values[0], values[1], values[2]


@lru_cache(maxsize=128)
def _pass_probabilities(increments: tuple[int, ...], fixed_max: Optional[int], modulus: Optional[int],
                        loads: int, table_rows: Optional[int] = None) -> tuple[float, ...]:
    """q_j, j = 0..loads: Pr(a position holding j other keys admits a query with a uniform increment v).

    The position holds c = min(j, fixed_max) and a = S_j mod M, S_j a sum of j uniform draws from D
    (``modulus=None``: a = S_j). With the fixed counter it admits v when c > 0 and either c is saturated or
    a - v is (mod M) a sum of exactly c - 1 increments; for c - 1 >= ``table_rows`` the filter only tests whether
    a number congruent to a - v lies in [(c-1) min D, (c-1) max D], and so does this model.
    ``fixed_max=None`` (no fixed counter, unbounded a: the original VI-CBF test): a - v is 0 or a sum of any
    number of increments.
    """
    import numpy as np
    D = np.array(increments, dtype=np.int64)
    if modulus is not None and modulus > loads * int(D[-1]):
        wrap = None  # no sum of at most `loads` increments reaches M: residues are the sums themselves
    else:
        wrap = modulus
    size = wrap if wrap is not None else loads * int(D[-1]) + 1

    def shift(vector, d):
        if wrap is not None:
            return np.roll(vector, d)
        shifted = np.zeros_like(vector)
        shifted[d:] = vector[:size - d]
        return shifted

    exact = [np.zeros(size, dtype=bool)]  # exact[j][r]: r is (mod M) a sum of exactly j increments
    exact[0][0] = True
    for j in range(1, loads + 1):
        exact.append(np.logical_or.reduce([shift(exact[-1], d) for d in D]))
    any_count = np.logical_or.reduce(exact)
    residues = np.arange(size)

    def test_row(count: int):
        if fixed_max is None:
            return any_count
        if table_rows is None or count < table_rows:
            return exact[count]
        low, high = count * int(D[0]), count * int(D[-1])
        if wrap is None:
            return (residues >= low) & (residues <= high)
        lifted = np.where(residues >= low, residues, residues + (low - residues + wrap - 1) // wrap * wrap)
        return lifted <= high

    result = [0.0]
    dist = np.zeros(size)
    dist[0] = 1.0
    for j in range(1, loads + 1):
        dist = sum(shift(dist, d) for d in D) / len(D)
        if fixed_max is not None and j >= fixed_max:
            result.append(1.0)
            continue
        row = test_row(j - 1)
        admits = sum(shift(row.astype(float), v) for v in D) / len(D)  # admits[s] = mean over v of row[s - v]
        result.append(min(1.0, float(dist @ admits)))
    return tuple(result)


def _load_pmf(layout: str, m: int, k: int, n: int, loads: int) -> list[float]:
    """Pr(J = j), j = 0..loads, for the number J of other keys' probes at a query's position.

    classic: J ~ Bin(nk, 1/m); partitioned: J ~ Bin(n, 1/s), s = m/k the slice size.
    """
    trials, p = (n * k, 1.0 / m) if layout == "classic" else (n, k / m)
    p = min(p, 1.0)
    if p >= 1.0:
        return [1.0 if j == trials else 0.0 for j in range(loads + 1)]
    log_p, log_q = math.log(p), math.log1p(-p)
    return [math.exp(math.lgamma(trials + 1) - math.lgamma(j + 1) - math.lgamma(trials - j + 1)
                     + j * log_p + (trials - j) * log_q) if j <= trials else 0.0 for j in range(loads + 1)]


def vicbf_false_positive_rate(num_positions, num_hashes, num_items, *, increments=DEFAULT_INCREMENTS,
                              fixed_bits: Optional[int] = 4, variable_bits: Optional[int] = 4,
                              layout: str = "classic") -> float:
    """False-positive rate of this filter after ``num_items`` insertions (ideal hashes, binomial loads).

    ``FPR = (sum_j Pr(J = j) q_j)^k``: J ~ Bin(nk, 1/m) other keys' probes at a position (partitioned:
    Bin(n, k/m)); q_j is the probability that a position holding j of them admits a query's increment v (uniform
    in D): c >= 2^fixed_bits - 1 (saturated), or 0 < c and (a - v) mod 2^variable_bits is the residue of a sum of
    exactly c - 1 increments. q_j is exact (convolutions of the uniform distribution on D); the k probes are
    treated as independent, as in the classic formula. ``variable_bits=None``: a unbounded (exact sums).
    ``fixed_bits=None`` (with ``variable_bits=None``): no fixed counter, the original VI-CBF test (a - v is 0 or a
    sum of any number of increments); with D = D_L that is exactly :func:`dl_false_positive_rate`.

    >>> f_dl = vicbf_false_positive_rate(4000, 5, 1000, fixed_bits=None, variable_bits=None)
    >>> math.isclose(f_dl, dl_false_positive_rate(4000, 5, 1000))
    True
    >>> vicbf_false_positive_rate(4000, 5, 1000) < f_dl   # the fixed counter sharpens the test
    True
    """
    m, k, n = _check_mkn(num_positions, num_hashes, num_items)
    increments = _check_increments(increments)
    if layout not in COUNTING_LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, COUNTING_LAYOUTS))}, got {layout!r}")
    fixed_max = None if fixed_bits is None else (1 << _check_bits("fixed_bits", fixed_bits)) - 1
    modulus = None if variable_bits is None else 1 << _check_bits("variable_bits", variable_bits)
    if fixed_max is None and modulus is not None:
        raise ValueError("without a fixed counter (fixed_bits=None) the model has an unbounded variable counter: "
                         "pass variable_bits=None")
    if n == 0:
        return 0.0
    mean = n * k / m
    needed = int(mean + 12.0 * math.sqrt(mean) + 24.0)
    loads = 32
    while loads < needed:
        loads *= 2
    if fixed_max is not None:
        loads = min(loads, fixed_max)  # q_j = 1 from fixed_max on: counted in the tail
    rows = None if fixed_bits is None or variable_bits is None else _table_rows(fixed_bits, variable_bits)
    q = _pass_probabilities(increments, fixed_max, modulus, loads, rows)
    pmf = _load_pmf(layout, m, k, n, loads)
    tail = max(0.0, 1.0 - math.fsum(pmf))  # loads beyond the table: counted as admitting (an upper bound)
    per_probe = math.fsum(p * qj for p, qj in zip(pmf, q)) + tail
    return min(per_probe, 1.0) ** k


def _check_bits(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 31:
        raise ValueError(f"{name} must be an int in [1, 31], got {value!r}")
    return value


def vicbf_optimal_size(num_items, fpr, *, increments=DEFAULT_INCREMENTS, fixed_bits=4, variable_bits=4,
                       layout="classic") -> tuple[int, int]:
    """The smallest ``(num_positions, num_hashes)`` whose :func:`vicbf_false_positive_rate` at ``num_items`` is
    <= ``fpr`` (ties: the smaller k). For each k, bisection on m (the rate falls as m grows). Cached.

    >>> vicbf_optimal_size(1000, 0.01)
    (3628, 5)
    """
    n = _check_capacity(num_items, "num_items")
    if isinstance(fpr, bool) or not isinstance(fpr, (int, float)):
        raise TypeError(f"fpr must be a number, got {type(fpr).__name__} ({fpr!r})")
    if not 0.0 < fpr < 1.0:
        raise ValueError(f"fpr must be a probability strictly between 0 and 1, got {fpr!r}")
    if layout not in COUNTING_LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, COUNTING_LAYOUTS))}, got {layout!r}")
    return _optimal_size(n, float(fpr), _check_increments(increments), _check_bits("fixed_bits", fixed_bits),
                         _check_bits("variable_bits", variable_bits), layout)


@lru_cache(maxsize=256)
def _optimal_size(n: int, fpr: float, increments: tuple[int, ...], fixed_bits: int, variable_bits: int,
                  layout: str) -> tuple[int, int]:
    def rate(m: int, k: int) -> float:
        return vicbf_false_positive_rate(m, k, n, increments=increments, fixed_bits=fixed_bits,
                                         variable_bits=variable_bits, layout=layout)

    best: Optional[tuple[int, int]] = None
    worse_in_a_row = 0
    for k in range(1, 33):
        low, high = (k if layout == "partitioned" else 1), max(k, n)
        while rate(high, k) > fpr:
            low, high = high, high * 2
            if high > 2 ** 48:
                raise ValueError(f"fpr {fpr!r} needs more than 2**48 positions")
        while low < high:  # smallest m in [low, high] with rate(m) <= fpr
            middle = (low + high) // 2
            if rate(middle, k) <= fpr:
                high = middle
            else:
                low = middle + 1
        if best is None or high < best[0]:
            best, worse_in_a_row = (high, k), 0
        else:
            worse_in_a_row += 1
            if worse_in_a_row >= 3:
                break
    return best


# ---- the filter ------------------------------------------------------------------------------------------------------
class Probe(NamedTuple):
    """What one of a key's k positions says (``VariableIncrementCountingBloomFilter.counters``).

    ``position``: the position j; ``increment``: the key's increment v_j there (an element of D); ``c``: the
    fixed-increment counter (keys that hit the position); ``a``: the variable-increment counter (the sum of their
    increments modulo 2^variable_bits); ``y``: the multiplicity of v_j in the unique multiset of c increments
    whose sum is a, decoded when 0 <= c <= h (``bh_order``), else None.
    """

    position: int
    increment: int
    c: int
    a: int
    y: Optional[int]


class VariableIncrementCountingBloomFilter(Persistent, FillStatistics, Compatible, VariableIncrementCore):
    """A counting Bloom filter whose positions hold (c, a) pairs: fewer false positives for the same memory.

    **Structure.** m positions, k probes per key (layouts ``"classic"`` and ``"partitioned"``: the same positions
    as a CountingBloomFilter or BloomFilter of that layout and seed). Probe j of key x has position p_j(x) and an
    increment v_j(x) from D, drawn by a second hash (``D[mulhi(fmix64(g_j ^ SALT), |D|)]``, g_j the probe's
    double-hashing value; docs/counting.md). Insertion adds (1, v_j) to the pair (c, a) at p_j, removal subtracts
    it. A query rejects x when at some position c = 0, or a - v_j cannot be a sum of exactly c - 1 increments of
    D. D defaults to D_L = {L..2L-1}, L = 4 (``dl_increments``); any set of distinct positive ints below
    2^variable_bits works, e.g. the B_2 sequence (1, 2, 4) of the Bloom-paradox paper's Figure 6.

    **Memory split (default).** 4-bit c + 4-bit a = one byte per position (c in the low nibble, a in the high
    one). c counts keys exactly up to 14 and is sticky at 15 (then the position admits every key: never a false
    negative; Pr(15 keys at one position) is below 1e-10 at the sizes used). a is kept **modulo 16**: with c
    known, a sum of c increments of D_4 lies in [4c, 7c], 3c + 1 consecutive values, so a mod 16 still pins it
    down up to c = 5; a never saturates and every deletion is exact (no stuck counters after churn). At equal
    memory a 4-bit CountingBloomFilter has twice as many counters: at 32 bits per key its best FPR is 0.0216
    (k = 6), this filter's 0.0063 (D_4, k = 5) or 0.0043 (B_2 (1, 2, 4), k = 7); at 16 bits per key 0.147 vs
    0.080 and 0.067 (``vicbf_false_positive_rate``). Other splits: ``fixed_bits + variable_bits`` in
    {8, 16, 32}; 3 + 5 gives the same rates at these loads, 2 + 6 and 5 + 3 worse.

    **Removing a key that was never added** (a false positive) corrupts the counters of other keys and can create
    false negatives; ``remove`` raises KeyError, changing nothing, only for a key that is certainly absent.

    **What the Bloom-paradox posterior (Theorem 5 of ../shared/seeds/002_*) needs**, all exposed here:

    - ``counters(key)``: k ``Probe(position, increment, c, a, y)`` in probe order: ``c`` is c_j, ``a`` is a_j
      (modulo 2^variable_bits), ``increment`` is v_{g_j(x)}, and ``y`` is y_j, the multiplicity of the key's
      increment among the c_j increments at the position, decoded exactly when I(j) = 1, i.e. c_j <= h
      (``bh_order``); None otherwise (then Theorem 5 uses c_j). y_j = 0 means the key is rejected there.
    - ``counters_many(keys)``: the same for a batch, a numpy structured array of shape (*keys shape, k) with
      fields ``position``, ``increment``, ``c``, ``a`` and ``y`` (-1 where not decoded).
    - ``bh_order`` (h), ``num_increments`` (l = |D|), ``increments`` (D), ``num_positions`` (m), ``num_hashes``
      (k), ``num_keys`` (n). Theorem 5: ``delta = prod_{I(j)=0} c_j * prod_{I(j)=1} l y_j`` and
      ``Pr(x in S | filter) = m^k delta P / (m^k delta P + (n k)^k (1 - P))``.

    With D_4, h = 1: y_j is decoded where c_j <= 1 (y_j = 1 when a_j = v_j, else 0). With (1, 2, 4), h = 2.

    >>> f = VariableIncrementCountingBloomFilter(1000, 0.01)
    >>> f.add("apple"); "apple" in f, "pear" in f
    True
    (True, False)
    >>> [p.c for p in f.counters("apple")] == [1] * f.num_hashes
    True
    >>> f.remove("apple"); "apple" in f
    False
    """

    __slots__ = ("_capacity", "_increments_tuple", "_bh_order", "_decoders", "__weakref__")

    def __init__(self, capacity, fpr=0.01, *, increments=DEFAULT_INCREMENTS, fixed_bits=4, variable_bits=4,
                 layout="classic", seed=0, key: Optional[Callable[[object], bytes]] = None, hash_scheme="xxh3"):
        """Sized by :func:`vicbf_optimal_size` so that ``fpr`` holds at ``capacity`` keys.

        :param capacity: the number of keys the filter is sized for (an int >= 1).
        :param fpr: the target false-positive rate at capacity, in (0, 1).
        :param increments: D, distinct ints >= 1 below 2^variable_bits - 1 (default D_4 = (4, 5, 6, 7)).
        :param fixed_bits: bits of each c (default 4).
        :param variable_bits: bits of each a (default 4); fixed_bits + variable_bits is 8, 16 or 32.
        :param layout: ``"classic"`` (default) or ``"partitioned"``.
        :param seed: hash seed, an int in [0, 2**64).
        :param key: optional function turning any key into bytes.
        :param hash_scheme: ``"xxh3"`` (default) or ``"xxh64"`` (bloomwise 0.1's hashing).
        """
        capacity = _check_capacity(capacity)
        _counting_layout_id(layout)
        scheme = _format.hash_scheme_id(hash_scheme)
        increments = _check_increments(increments)
        _check_split(fixed_bits, variable_bits, increments)
        num_positions, num_hashes = vicbf_optimal_size(capacity, fpr, increments=increments, fixed_bits=fixed_bits,
                                                       variable_bits=variable_bits, layout=layout)
        self._setup(num_positions, num_hashes, layout, increments, fixed_bits, variable_bits, seed, 0, key, scheme)
        self._capacity = capacity
        self._set_capacity_limit(capacity)

    @classmethod
    def from_size(cls, num_positions, num_hashes, *, increments=DEFAULT_INCREMENTS, fixed_bits=4, variable_bits=4,
                  layout="classic", seed=0, key=None, hash_scheme="xxh3") -> "VariableIncrementCountingBloomFilter":
        """A filter of exactly ``num_positions`` (c, a) pairs and ``num_hashes`` probes per key.

        >>> VariableIncrementCountingBloomFilter.from_size(1000, 4, increments=(1, 2, 4)).bh_order
        2
        """
        self = cls.__new__(cls)
        increments = _check_increments(increments)
        _check_split(fixed_bits, variable_bits, increments)
        self._setup(num_positions, num_hashes, layout, increments, fixed_bits, variable_bits, seed, 0, key,
                    _format.hash_scheme_id(hash_scheme))
        self._capacity = None
        return self

    def _setup(self, num_positions, num_hashes, layout, increments, fixed_bits, variable_bits, seed, num_keys,
               key, scheme) -> None:
        table, rows = _feasible_table(increments, fixed_bits, variable_bits)
        self._init_variable(num_positions, num_hashes, _counting_layout_id(layout), fixed_bits, variable_bits,
                            increments, table, rows, seed, num_keys, key, scheme)
        self._increments_tuple = increments
        self._bh_order = bh_order(increments, min(_MAX_BH_ORDER, (1 << fixed_bits) - 2), 1 << variable_bits)
        self._decoders = _decoders(increments, self._bh_order, 1 << variable_bits)

    # -- description ---------------------------------------------------------------------------------------------------
    @property
    def num_positions(self) -> int:
        """m: the number of (c, a) pairs."""
        return self._num_cells

    @property
    def _num_positions(self) -> int:
        return self._num_cells

    def _count_filled(self) -> int:
        return self._cell_counts()[0]

    @property
    def increments(self) -> tuple[int, ...]:
        """D, ascending."""
        return self._increments_tuple

    @property
    def num_increments(self) -> int:
        """l = |D|: each increment is drawn with probability 1/l."""
        return len(self._increments_tuple)

    @property
    def bh_order(self) -> int:
        """h: sums of up to h increments are distinct (mod 2^variable_bits), so multiplicities are decoded where
        c <= h. Capped at 8 and below c's saturation."""
        return self._bh_order

    @property
    def saturated_count(self) -> int:
        """Positions whose c is saturated (stuck at 2^fixed_bits - 1: they admit every key). O(m)."""
        return self._cell_counts()[1]

    def estimated_fpr(self) -> float:
        """The analytic rate (:func:`vicbf_false_positive_rate`) at n = ``num_keys``."""
        return vicbf_false_positive_rate(self.num_positions, self.num_hashes, self.num_keys,
                                         increments=self.increments, fixed_bits=self.fixed_bits,
                                         variable_bits=self.variable_bits, layout=self.layout)

    def __repr__(self) -> str:
        capacity = "" if self._capacity is None else f", capacity={self._capacity:,}"
        return (f"<{type(self).__name__} {self.layout}: {self.num_positions:,} positions x ({self.fixed_bits}+"
                f"{self.variable_bits}) bits, k={self.num_hashes}, D={self.increments}, keys={self.num_keys:,}, "
                f"fill={self.fill_ratio:.1%}{capacity}>")

    __hash__ = None

    def _over_capacity(self) -> None:
        _over_capacity_warning(self, self._capacity, self.num_keys, self.estimated_fpr())

    # -- what a key sees -----------------------------------------------------------------------------------------------
    def counters_many(self, keys):
        """For each key and probe: a structured array (*keys shape, k) with fields position, increment, c, a, y
        (y = -1 where the multiplicity is not decoded). See the class docstring."""
        import numpy as np
        positions, increments, c, a = self._probe_many(keys)
        result = np.zeros(c.shape, dtype=[("position", np.uint64), ("increment", np.uint32), ("c", np.uint32),
                                          ("a", np.uint32), ("y", np.int32)])
        result["position"], result["increment"], result["c"], result["a"] = positions, increments, c, a
        result["y"] = self._decode(increments, c, a)
        return result

    def counters(self, key) -> tuple[Probe, ...]:
        """The key's k probes in order: ``Probe(position, increment, c, a, y)`` (y None where not decoded)."""
        row = self.counters_many([key])[0]
        return tuple(Probe(int(p["position"]), int(p["increment"]), int(p["c"]), int(p["a"]),
                           None if p["y"] < 0 else int(p["y"])) for p in row)

    def count(self, key) -> int:
        """An upper bound on how often the key was added (unless c is saturated): the smallest over its positions
        of y_j where decoded, else c_j."""
        return min(p.c if p.y is None else p.y for p in self.counters(key))

    def _decode(self, increments, c, a):
        """y for arrays of (v, c, a): the multiplicity of v in the multiset of c increments summing to a."""
        import numpy as np
        y = np.full(c.shape, -1, dtype=np.int32)
        y[c == 0] = 0
        index_of = {v: i for i, v in enumerate(self._increments_tuple)}
        column = np.vectorize(index_of.get, otypes=[np.int64])(increments) if increments.size else increments
        for count, (sums, multiplicities) in self._decoders.items():
            mask = c == count
            if not mask.any():
                continue
            found = np.searchsorted(sums, a[mask])
            valid = found < len(sums)
            valid[valid] = sums[found[valid]] == a[mask][valid]
            values = np.full(found.shape, -1, dtype=np.int32)
            values[valid] = multiplicities[found[valid], column[mask][valid]]
            y[mask] = values
        return y

    # -- algebra and copies --------------------------------------------------------------------------------------------
    def _parameters(self) -> dict:
        return {"type": type(self).__name__, "num_positions": self.num_positions, "num_hashes": self.num_hashes,
                "layout": self.layout, "seed": self.seed, "hash_scheme": self.hash_scheme,
                "increments": self.increments,
                "fixed_bits": self.fixed_bits, "variable_bits": self.variable_bits}

    def copy(self) -> "VariableIncrementCountingBloomFilter":
        """An independent copy."""
        clone = type(self).__new__(type(self))
        clone._setup(self.num_positions, self.num_hashes, self.layout, self.increments, self.fixed_bits,
                     self.variable_bits, self.seed, self.num_keys, self._key_function, self._hash_scheme_id)
        clone._copy_cells_from(self._payload())
        clone._capacity = self._capacity
        clone._set_capacity_limit(self._capacity)
        return clone

    def __eq__(self, other):
        if not isinstance(other, VariableIncrementCountingBloomFilter):
            return NotImplemented
        return self.is_compatible(other) and self._same_cells(other)

    # -- persistence ---------------------------------------------------------------------------------------------------
    _STRUCTURE = _format.Structure.VARIABLE_INCREMENT

    def _header(self) -> _format.Header:
        return _cell_array_header(self, self.num_positions, {
            "fixed_bits": self.fixed_bits, "variable_bits": self.variable_bits, "increments": list(self.increments)})

    @classmethod
    def _from_parts(cls, header: _format.Header, payload, *, key) -> "VariableIncrementCountingBloomFilter":
        scheme = _check_cell_array_header(header, key, "this filter")
        meta = header.meta
        try:
            fixed_bits, variable_bits = meta["fixed_bits"], meta["variable_bits"]
            increments = _check_increments(meta["increments"])
            if not isinstance(fixed_bits, int) or not isinstance(variable_bits, int):
                raise TypeError("counter widths must be ints")
            _check_split(fixed_bits, variable_bits, increments)
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"invalid variable-increment metadata {dict(meta)!r}: {exc}") from None
        capacity = meta_capacity(header)
        expected = (header.num_bits * (fixed_bits + variable_bits) + 63) // 64 * 8
        if header.payload_length != expected:
            raise FormatError(f"payload holds {header.payload_length} bytes; {header.num_bits} positions of "
                              f"{fixed_bits + variable_bits} bits need {expected}")
        self = cls.__new__(cls)
        try:
            self._setup(header.num_bits, header.num_hashes, LAYOUT_NAMES[int(header.layout)], increments,
                        fixed_bits, variable_bits, header.seed, header.keys_added, key, scheme)
            self._copy_cells_from(payload)
            self._check_cells()
        except (ValueError, TypeError) as exc:
            raise FormatError(f"the file describes an impossible filter: {exc}") from None
        self._capacity = capacity
        self._set_capacity_limit(capacity)
        return self



VariableIncrementCountingBloomFilter._FAMILY = VariableIncrementCountingBloomFilter


def _check_split(fixed_bits, variable_bits, increments: tuple[int, ...]) -> None:
    for name, value in (("fixed_bits", fixed_bits), ("variable_bits", variable_bits)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise ValueError(f"{name} must be an int >= 2, got {value!r}")
    if fixed_bits + variable_bits not in (8, 16, 32):
        raise ValueError(f"fixed_bits + variable_bits must be 8, 16 or 32, got {fixed_bits} + {variable_bits}")
    if increments[-1] >= 1 << variable_bits:
        raise ValueError(f"increments must be below {1 << variable_bits} (2^variable_bits) for variable_bits = "
                         f"{variable_bits}, got {list(increments)}")


def _table_rows(fixed_bits: int, variable_bits: int) -> int:
    """Rows of the exact feasibility table: j = c - 1 for unsaturated c, within 1 MiB."""
    return min((1 << fixed_bits) - 2, _FEASIBLE_TABLE_LIMIT >> variable_bits)


@lru_cache(maxsize=32)
def _feasible_table(increments: tuple[int, ...], fixed_bits: int, variable_bits: int) -> tuple[bytes, int]:
    """Rows j = 0..rows-1 of M = 2^variable_bits bytes: 1 where r is (mod M) a sum of exactly j increments (dynamic
    programming). The kernels need j = c - 1 for unsaturated c, so rows <= 2^fixed_bits - 2; beyond the table
    they test whether a number congruent to r lies in [j min(D), j max(D)]."""
    import numpy as np
    modulus = 1 << variable_bits
    rows = _table_rows(fixed_bits, variable_bits)
    table = np.zeros((rows, modulus), dtype=bool)
    if rows:
        table[0, 0] = True
    for j in range(1, rows):
        for d in increments:
            table[j] |= np.roll(table[j - 1], d)
    return table.astype(np.uint8).tobytes(), rows


@lru_cache(maxsize=32)
def _decoders(increments: tuple[int, ...], order: int, modulus: int) -> dict:
    """For c = 1..order: (sorted sums mod M, their multiplicity rows): decoding a counter a of c increments."""
    import numpy as np
    decoders = {}
    for count in range(1, order + 1):
        sums, multiplicities = _multisets(increments, count)
        sums = sums % modulus
        order_by_sum = np.argsort(sums, kind="stable")
        decoders[count] = (sums[order_by_sum], multiplicities[order_by_sum])
    return decoders
