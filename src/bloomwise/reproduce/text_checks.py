"""Rows for the numbers the papers derive rather than simulate: Summary Cache's Tables 3-5, Figure 4 and the text of
its Bloom-filter section, the CS 170 notes' example and figures, and the Bloom-paradox paper's worked examples and
set-ups (the introduction's cost example, Theorem 1 and Figure 2, Examples 1 and 2, the parameters of section VIII).
Each number is recomputed by bloomwise: its filters where the text describes a filter (``measured``), its formulas
otherwise (``computed``)."""
from __future__ import annotations

import itertools
import math

from bloomwise.bloom import BloomFilter
from bloomwise.counting import CountingBloomFilter
from bloomwise.paradox import cbf_posterior, min_bits_per_item, posterior
from bloomwise.paradox.simulation import Population, bloom_num_hashes
from bloomwise.reproduce import summary_cache as sc
from bloomwise.reproduce.rows import Row, make_row

__all__ = ["summary_cache_rows", "cs170_rows", "paradox_text_rows", "decode_bh_sum"]

SC = "Summary Cache (Fan, Cao, Almeida, Broder), Bloom-filter section"
CS = "CS 170 lecture notes on Bloom filters"
BP = "The Bloom Paradox (Rottenstreich, Keslassy)"

# Known printing errors (the paper's own formula gives another number)
_TABLE_MISPRINTS = {(30, 15): "exponent typo: the formula gives 8.39e-07 (every neighbour cell is e-07)",
                    (30, 16): "exponent typo: the formula gives 7.26e-07 (every neighbour cell is e-07)",
                    (5, 3): "the tables print every cell to 3 significant digits (0.0918 would be printed here); "
                            "0.092 is the formula to 2 significant digits, the one cell of the 411 that breaks the "
                            "convention"}


def _approx(b: float, k: int) -> float:
    return (-math.expm1(-k / b)) ** k


def summary_cache_rows() -> list[Row]:
    rows = []
    cells = sc.printed_cells()
    k_opt = sc.printed_k_opt()
    for b in sorted(cells):
        value = b * math.log(2)
        text = k_opt[b]
        item = f"Tables 3-5, m/n = {b}, k_opt = (m/n) ln 2"
        truncated = float(f"{math.floor(value * 100) / 100:.2f}") == float(text)
        rows.append(make_row(SC, item, text, value, method="computed", expected=value,
                             rounding="3 significant digits", misprint=truncated and not sc_rounds(value, text),
                             note=f"{b} ln 2 = {value:.4f}: printed truncated instead of rounded"
                             if not sc_rounds(value, text) else ""))
        for k, text in sorted(cells[b].items()):
            table = 3 if k <= 8 else 4 if k <= 16 else 5
            value = _approx(b, k)
            item = f"Table {table}, m/n = {b}, k = {k}: (1 - e^(-k n/m))^k"
            rows.append(make_row(SC, item, text, value, method="computed", expected=value,
                                 rounding="3 significant digits", misprint=(b, k) in _TABLE_MISPRINTS,
                                 note=_TABLE_MISPRINTS.get((b, k), "" if sc_rounds(value, text)
                                                           else f"formula gives {value:.3g}")))
    data = sc.figure4_data(range(1, 33))
    ten = data.bits_per_item.index(10)
    c = 0.5 ** math.log(2)
    overflow = (math.e * math.log(2) / 16) ** 16
    rows += [
        make_row(SC, "Fig. 4 text: m/n = 10 with 4 hash functions, false-positive rate", "1.2%",
                 100 * data.fpr_four_hashes[ten], method="computed", expected=100 * _approx(10, 4)),
        make_row(SC, "Fig. 4 text: m/n = 10, 'the optimum case of 5 hash functions', rate", "0.9%",
                 100 * _approx(10, 5), method="computed", expected=100 * _approx(10, 5),
                 note="k = 5 gives 0.943%, which is what 0.9% rounds; but see the next row"),
        make_row(SC, "Fig. 4 text: the optimum (integral) number of hash functions at m/n = 10", "5",
                 float(data.optimal_hashes[ten]), method="computed", expected=float(data.optimal_hashes[ten]),
                 misprint=True,
                 note="Table 3's own row m/n = 10 is lowest at k = 7 (0.00819 < 0.00844 at k = 6 < 0.00943 at k = 5)"),
        make_row(SC, "optimal-k rate: (1/2)^k = c^(m/n), c", "0.6185", c, method="computed", expected=c),
        make_row(SC, "overflow bound: Pr(max c >= 16) <= c m, c = (e ln 2 / 16)^16", "1.37e-15", overflow,
                 method="computed", expected=overflow),
        make_row(SC, "4 bits per count: the bound's i = 16 is the first count 4 bits cannot hold", "16",
                 float(2 ** 4), method="computed", expected=16.0),
        _saturation_row(),
    ]
    return rows


def _saturation_row() -> Row:
    """'if the count ever exceeds 15, we can simply let it stay at 15': bloomwise's 4-bit counting filter."""
    f = CountingBloomFilter.from_size(64, 3, counter_bits=4, layout="partitioned", seed=1)
    for _ in range(20):
        f.add("x")
    after_adds = max(f.counters("x"))
    for _ in range(20):
        f.remove("x")
    after_removes = max(f.counters("x"))
    return make_row(SC, "a count that would exceed 15 stays at 15", "15", float(after_adds), method="measured",
                    note=f"a 4-bit CountingBloomFilter after adding one key 20 times: its counters read {after_adds}; "
                         f"after removing it 20 times they still read {after_removes} (a saturated counter is never "
                         f"decremented, so no false negative follows from it)")


def sc_rounds(value: float, text: str) -> bool:
    """Does the formula's value, to the tables' 3 significant digits, equal the printed text?"""
    return float(format(value, ".3g")) == float(text)


def bit_string(bloom) -> str:
    """A Bloom filter's bits as printed in the CS 170 notes: bit 0 first, "0" or "1" each (read from its payload,
    bit i of byte i // 8, least significant first: docs/format.md)."""
    payload = bloom.payload_view()
    return "".join(str(payload[i >> 3] >> (i & 7) & 1) for i in range(bloom.num_cells))


def cs170_rows() -> list[Row]:
    f = BloomFilter.from_hash_functions(5, [lambda x: x % 5, lambda x: (2 * x + 3) % 5])
    f.add(9)
    after9 = bit_string(f)
    f.add(11)
    after11 = bit_string(f)
    answer15 = "yes" if 15 in f else "no"
    answer16 = "yes" if 16 in f else "no"
    rows = [
        make_row(CS, "example m = 5, k = 2: bits after inserting 9", "01001", after9, method="measured",
                 note="bloomwise's filter built from those two hash functions"),
        make_row(CS, "example: bits after inserting 11", "11001", after11, method="measured",
                 note="bloomwise's filter built from those two hash functions"),
        make_row(CS, "example: query 15 (positions 0, 3) answers", "no", answer15, method="measured",
                 note="bloomwise's answer"),
        make_row(CS, "example: query 16 (positions 1, 0) answers (a false positive)", "yes", answer16,
                 method="measured", note="bloomwise's answer"),
    ]
    for k, text in ((3, "0.0306"), (4, "0.0240"), (5, "0.0217"), (6, "0.0216"), (7, "0.0229")):
        v = _approx(8, k)
        rows.append(make_row(CS, f"m = 8n, k = {k}: f = (1 - e^(-kn/m))^k", text, v, method="computed", expected=v,
                             note=f"{v:.4g}"))
    best8 = min(range(1, 20), key=lambda k: _approx(8, k))
    best10 = min(range(1, 20), key=lambda k: _approx(10, k))
    rows += [
        make_row(CS, "m = 8n: the minimum is at k", "6", float(best8), method="computed", expected=float(best8),
                 note=f"k = {best8}"),
        make_row(CS, "m = 8n: 'roughly 2%'", "2%", 100 * _approx(8, 6), method="computed",
                 expected=100 * _approx(8, 6), note="2.16% rounds to 2%"),
        make_row(CS, "m = 10n: the optimum is k", "7", float(best10), method="computed", expected=float(best10),
                 note=f"k = {best10}"),
        make_row(CS, "m = 10n, k = 7: f", "0.0082", _approx(10, 7), method="computed", expected=_approx(10, 7),
                 note=f"{_approx(10, 7):.4g}"),
        make_row(CS, "m = 10n: 'less than 1%' (percent)", "1%", 100 * _approx(10, 7), method="computed",
                 expected=100 * _approx(10, 7), accept=(0.0, 1.0), note="'less than 1%': accepted in [0, 1]"),
        make_row(CS, "optimal-k rate (1/2)^k = c^(m/n), c", "0.6185", 0.5 ** math.log(2), method="computed",
                 expected=0.5 ** math.log(2)),
    ]
    return rows


def decode_bh_sum(increments, count: int, total: int) -> tuple[int, ...]:
    """The multiset of ``count`` increments (a B_h sequence, count <= h) that sums to ``total``, as a sorted tuple;
    ``ValueError`` if there is none or more than one (then the sum does not decode)."""
    found = {combo for combo in itertools.combinations_with_replacement(sorted(increments), count)
             if sum(combo) == total}
    if len(found) != 1:
        raise ValueError(f"{total} as a sum of {count} of {tuple(increments)}: {len(found)} decodings")
    return found.pop()


def paradox_text_rows() -> list[Row]:
    rows = []
    # Sec. I, Fig. 1(a): main memory costs 10; the cache 1 when it holds x, 1 + 10 when it does not
    memory_cost, cache_cost = 10.0, 1.0
    fpr_intro = 1e-3
    trusting = cache_cost + memory_cost * fpr_intro  # the naive reading: a positive is wrong w.p. the FPR
    p = 1e4 / 1e10
    post = posterior(p, fpr_intro)
    actual = cache_cost + memory_cost * (1 - post)  # what a positive really costs at prior 1e-6
    rows += [
        make_row(BP, "Sec. I / Fig. 1(a): cost of going to the main memory directly", "10", memory_cost,
                 method="computed", expected=memory_cost),
        make_row(BP, "Sec. I / Fig. 1(a): cost of a cache hit", "1", cache_cost, method="computed",
                 expected=cache_cost),
        make_row(BP, "Sec. I / Fig. 1(a): cost of a cache miss (1 + 10)", "11", cache_cost + memory_cost,
                 method="computed", expected=cache_cost + memory_cost),
        make_row(BP, "Sec. I: expected cost of trusting a positive, read naively (1 + 10 x FPR 10^-3): "
                 "'just above 1'", "just above 1", trusting, method="computed", expected=trusting,
                 accept=(1.0 + 1e-12, 1.1),
                 note=f"1 + 10 x 10^-3 = {trusting:.3g}; 'just above 1' accepted in (1, 1.1]. At prior 10^-6 a "
                      f"positive really costs 1 + 10 (1 - {post:.3g}) = {actual:.2f}, more than the 10 of going to "
                      "the memory: the paradox"),
        make_row(BP, "Sec. I: prior of an element of 10^4 cached out of 10^10", "1e-6", p, method="computed",
                 expected=p),
        make_row(BP, "Sec. I / Theorem 1 example: Pr(x in S | BF = 1) with FPR 10^-3 and prior 10^-6", "1e-3", post,
                 method="computed", expected=post, note=f"exactly {post:.6g}"),
    ]
    positives = 1e4 + 1e-3 * (1e10 - 1e4)
    rows += [
        make_row(BP, "Fig. 1(b): |B|, the elements with a positive indication", "1e7", positives, method="computed",
                 expected=positives),
        make_row(BP, "Fig. 1(b): probability that a positive indication is wrong", "0.999", 1 - 1e4 / positives,
                 method="computed", expected=1 - 1e4 / positives, note="printed as 1 - 10^-3"),
        make_row(BP, "Sec. IV.B / Fig. 2(a): Pr(x in S | BF = 1) at prior 10^-6, FPR 10^-3", "1e-3", post,
                 method="computed", expected=post),
    ]
    bits = min_bits_per_item(1e-5, 1.0)
    rows.append(make_row(BP, "Sec. IV.B / Fig. 2(b): bits per element to avoid the paradox, alpha = 1, prior 1e-5",
                         "28.7", bits, method="computed", expected=bits, misprint=True,
                         note=f"Theorem 1 gives {bits:.2f}; 28.7 is alpha = 0.1 ({min_bits_per_item(1e-5, 0.1):.2f})"
                              f" or prior 1e-6 at alpha = 1 ({min_bits_per_item(1e-6, 1.0):.2f})"))
    half = 1 - math.exp(-math.log(2))
    rows.append(make_row(BP, "Sec. III: probability that a bit is set after n insertions at k = ln(2) m/n", "0.5",
                         half, method="computed", expected=0.5, note="1 - e^(-k n/m) = 1 - e^(-ln 2)"))
    # Example 1 (Fig. 4): counters 0 1 0 5 2 10 0 5 3 (m = 9, k = 2, so n = 26 / 2 = 13); x has 1, 10, y has 5, 5
    fig4_counters = (0, 1, 0, 5, 2, 10, 0, 5, 3)
    m, n, prior = len(fig4_counters), sum(fig4_counters) // 2, 0.1
    px = cbf_posterior([1, 10], m, n, prior)
    py = cbf_posterior([5, 5], m, n, prior)
    rows += [
        make_row(BP, "Example 1: product of x's counters (1, 10)", "10", 1.0 * 10, method="computed", expected=10.0),
        make_row(BP, "Example 1: product of y's counters (5, 5)", "25", 5.0 * 5, method="computed", expected=25.0),
        make_row(BP, "Example 1: Pr(y in S | CBF) > Pr(x in S | CBF) for equal priors", "true",
                 "true" if py > px else "false", method="computed",
                 note=f"Theorem 2 with Fig. 4's m = {m}, n = {n} (its counters sum to n k), prior 0.1: {py:.4f} > "
                      f"{px:.4f}; any prior gives the same order"),
    ]
    # Example 2 (Fig. 6): D = {1, 2, 4}, h = 2, l = 3; x: c = (1, 2), a = (2, 8), increments (2, 4);
    # z: c1 = 2, a1 = 3, increment 1; c2 = 4 > h
    d, h, ell = (1, 2, 4), 2, 3
    sums = sorted(a + b for i, a in enumerate(d) for b in d[i:])
    x_counts, x_sums, x_incs = (1, 2), (2, 8), (2, 4)
    x_y = tuple(decode_bh_sum(d, c, a).count(v) for c, a, v in zip(x_counts, x_sums, x_incs))
    z_y1 = decode_bh_sum(d, 2, 3).count(1)
    try:
        decode_bh_sum(d, 4, 7)
        z2 = "decodes"
    except ValueError:
        z2 = "does not decode"
    rows += [
        make_row(BP, "Example 2: D = {1, 2, 4}: number of sums of 2 elements", "6", float(len(sums)),
                 method="computed", expected=6.0),
        make_row(BP, "Example 2: those sums are distinct (D is a B_2 sequence)", "2,3,4,5,6,8",
                 ",".join(map(str, sums)) if len(set(sums)) == len(sums) else "not distinct", method="computed",
                 note=f"sums {sums}"),
        make_row(BP, "Example 2: x's fixed counters c = (c1, c2), both <= h = 2", "1,2",
                 ",".join(map(str, x_counts)) if max(x_counts) <= h else "above h", method="computed",
                 note="c_j <= h: the variable sums decode"),
        make_row(BP, "Example 2: x's variable sums a = (a1, a2) decode to multiplicities y = (y1, y2) of its "
                 "increments (2, 4)", "1,2", ",".join(map(str, x_y)), method="computed",
                 note="2 = 2 (one 2); 8 = 4 + 4 (two 4s), each the only decoding"),
        make_row(BP, "Example 2: delta for x = (l y1)(l y2), l = 3", "18", float(ell * x_y[0] * ell * x_y[1]),
                 method="computed", expected=18.0),
        make_row(BP, "Example 2: z's first entry c1 = 2, a1 = 3 decodes to y1 (increment 1)", "1", float(z_y1),
                 method="computed", expected=1.0, note="3 = 1 + 2, the only decoding"),
        make_row(BP, "Example 2: z's second entry c2 = 4 > h = 2, a2 = 7 does not decode", "4", 4.0,
                 method="computed", expected=4.0,
                 note=f"a2 = 7 with 4 addends {z2} (1+1+1+4 = 1+2+2+2 = 7)"),
        make_row(BP, "Example 2: a2 = 7 for z decodes two ways (1+1+1+4 = 1+2+2+2)", "7",
                 7.0 if 1 + 1 + 1 + 4 == 1 + 2 + 2 + 2 == 7 else 0.0, method="computed", expected=7.0,
                 note="the two decodings disagree"),
        make_row(BP, "Example 2: delta for z = (l y1) c2, l = 3, y1 = 1, c2 = 4", "12", float(ell * z_y1 * 4),
                 method="computed", expected=12.0),
    ]
    rows += _section_viii_setup_rows()
    return rows


def _section_viii_setup_rows() -> list[Row]:
    """The parameters sections VIII.A-C print, against bloomwise's set-up of the same experiments."""
    pop = Population()
    rows = [
        make_row(BP, "Sec. VIII.A: n = |S| = 256 x 13", "3328", float(pop.num_members), method="computed",
                 expected=3328.0),
        make_row(BP, "Sec. VIII.A: N = |U| = sum of the 13 type sizes 2^11 .. 2^23", "16775168",
                 float(pop.universe_size), method="computed", expected=float(2 ** 24 - 2 ** 11)),
        make_row(BP, "Sec. VIII.A: the 13 priors 2^-3 .. 2^-15", "2^-3..2^-15",
                 f"2^-{-round(math.log2(pop.priors.max()))}..2^-{-round(math.log2(pop.priors.min()))}"
                 if len(pop.priors) == 13 else f"{len(pop.priors)} priors", method="computed",
                 note="the population's priors 256 / size"),
    ]
    for half in ("a", "b"):
        for bpe, printed in ((4, "13312"), (6, "19968"), (8, "26624"), (10, "33280")):
            m, _ = bloom_num_hashes(pop, bpe)
            rows.append(make_row(BP, f"Table II({half}), bpe = {bpe}: m = n bpe (bits)", printed, float(m),
                                 method="computed", expected=float(3328 * bpe), note=f"n bpe = {3328 * bpe}"))
    n_c, bits_c = 2 ** 10, 30
    rows += [
        make_row(BP, "Sec. VIII.B: CBF counters of 4 bits ('four bits per entry')", "4", 4.0, method="computed",
                 expected=4.0, note="the reproduction's counting filters use counter_bits=4"),
        make_row(BP, "Sec. VIII.C: n = 2^10 stored tuples", "1024", float(n_c), method="computed", expected=1024.0),
        make_row(BP, "Sec. VIII.C: N = 2^20 queried tuples", "1048576", float(2 ** 20), method="computed",
                 expected=float(2 ** 20)),
        make_row(BP, "Sec. VIII.C: a priori probability n/N = 2^-10", "2^-10",
                 f"2^{round(math.log2(n_c / 2 ** 20))}", method="computed", note="n / N"),
        make_row(BP, "Sec. VIII.C: 30 bits per element, 4-bit counters: m = 30 n / 4 counters", "7680",
                 float(bits_c * n_c // 4), method="computed", expected=7680.0,
                 note="m is not printed; it follows from the two printed numbers"),
        make_row(BP, "Sec. VIII.C: the n tuples were seen in 3614 us of the trace", "3614", None,
                 method="measured", unavailable=True,
                 note="a property of the unpublished backbone trace; the stand-in has no timestamps"),
        make_row(BP, "Fig. 9(b) text: a DRAM access 12.5 times slower than SRAM gives alpha = 12.5 - 1", "11.5",
                 12.5 - 1, method="computed", expected=11.5),
        make_row(BP, "Fig. 9(b) text: an eDRAM access 3 times slower than SRAM gives alpha = 3 - 1", "2", 3.0 - 1,
                 method="computed", expected=2.0),
    ]
    return rows
