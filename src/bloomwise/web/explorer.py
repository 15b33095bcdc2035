"""The Bloom-paradox explorer: prior, alpha and bits per key -> the decision (what ``GET /api/paradox`` returns).

From Rottenstreich and Keslassy, *The Bloom Paradox: When Not to Use a Bloom Filter* (INFOCOM 2012), through
:mod:`bloomwise.paradox`:

- the filter's false-positive rate under Theorem 1's assumption ``FPR = 2^-(ln2 m/n)`` (optimal real k), and the
  exact rate of a classic filter with the best integer k at the same m/n, for comparison;
- the posterior ``P / (P + (1 - P) FPR)`` after a positive answer;
- Theorem 1: the paradox occurs (a positive answer must be ignored) iff ``P < 1 / (1 + alpha 2^(ln2 m/n))``;
- the bits per key needed to avoid it, ``log2((1 - P) / (alpha P)) / ln 2`` (Fig. 2b);
- with a counting filter, Theorem 2: ``m^k prod(c) P / (m^k prod(c) P + (n k)^k (1 - P))`` from the key's counters,
  and Theorem 4's decision: "present" iff the posterior is at least ``1 / (1 + alpha)``.
"""
from __future__ import annotations

import math
from typing import Mapping

from bloomwise import paradox, theory
from bloomwise.web.inputs import MAX_ALPHA, MAX_BITS_PER_KEY, MAX_KEYS, Fields, InputError

__all__ = ["explore", "read_paradox_inputs", "DEFAULTS"]

DEFAULTS = {"prior": "1e-5", "alpha": "1", "bpk": "10", "counters": "1, 10", "cbits": "4", "cm": "1000",
            "cn": "100"}
COUNTER_WIDTHS = ("4", "8", "16")  # the counter widths of CountingBloomFilter (counter_bits)
_LABELS = {"alpha": "alpha", "bpk": "bits per key", "cbits": "counter bits", "cm": "m (counters)", "cn": "n (keys)"}
_REFERENCE_KEYS = 1_000_000  # n for the integer-k comparison: m = round(b n)


def read_paradox_inputs(query: Mapping[str, str]) -> dict:
    """The explorer's fields (blank ones take :data:`DEFAULTS`); :class:`InputError` for bad fields.

    A key's counters are refused above the largest value of the chosen counter width (15 for 4-bit counters, the
    default): such a key cannot exist in that filter, and Theorem 2 would place it off the curve.
    """
    merged = {**DEFAULTS, **{name: value for name, value in query.items() if str(value).strip()}}
    fields = Fields(merged, labels=_LABELS)
    counter_bits = int(fields.choice("cbits", COUNTER_WIDTHS, DEFAULTS["cbits"]))
    values = {
        "prior": fields.probability("prior"),
        "alpha": fields.real("alpha", 0.0, MAX_ALPHA),
        "bpk": fields.real("bpk", 0.0, MAX_BITS_PER_KEY, open_below=False),
        "cbits": counter_bits,
        "counters": fields.counters("counters", counter_bits),
        "cm": fields.count("cm", 1, 10 ** 12),
        "cn": fields.count("cn", 1, MAX_KEYS),
    }
    fields.check()
    return values


def _integer_k_rate(bits_per_key: float) -> dict:
    m = max(1, round(bits_per_key * _REFERENCE_KEYS))
    k = theory.optimal_num_hashes(m, _REFERENCE_KEYS)
    return {"k": k, "fpr": theory.false_positive_rate(m, _REFERENCE_KEYS, k)}


def _counting(values: dict, alpha: float) -> dict:
    counters, m, n, prior = values["counters"], values["cm"], values["cn"], values["prior"]
    k = len(counters)
    if k > m:
        raise InputError({"counters": f"counters: {k} counters for one key, more than the filter's m = {m:,}"})
    try:
        chance = paradox.cbf_posterior(counters, m, n, prior)
    except ValueError as error:
        raise InputError({"counters": f"counters: {error}"}) from None
    product = math.prod(counters)
    threshold = paradox.decision_threshold(alpha)
    return {
        "counters": counters, "counter_bits": values["cbits"], "k": k, "m": m, "n": n, "product": product,
        "posterior": chance, "decision_threshold": threshold, "present": chance >= threshold,
        "decision": ("answer \"present\": these counters make membership likely enough" if chance >= threshold
                     else "answer \"absent\"" + (": a counter is 0" if product == 0 else
                                                  ": these counters are not enough evidence at this prior")),
    }


def explore(query: Mapping[str, str]) -> dict:
    """The explorer's whole answer for a query of text fields prior, alpha, bpk, counters, cbits, cm, cn.

    >>> answer = explore({"prior": "1e-6", "alpha": "1", "bpk": "10"})
    >>> answer["paradox"], round(answer["posterior"], 6)
    (True, 0.000122)
    """
    values = read_paradox_inputs(query)
    prior, alpha, bits_per_key = values["prior"], values["alpha"], values["bpk"]
    fpr = paradox.theorem1_fpr(bits_per_key)
    chance = paradox.posterior(prior, fpr)
    threshold_prior = paradox.theorem1_threshold(bits_per_key, alpha)
    is_paradox = prior < threshold_prior
    needed = paradox.min_bits_per_item(prior, alpha)
    return {
        "inputs": {name: values[name] for name in ("prior", "alpha", "bpk")},
        "fpr": fpr,
        "integer_k": _integer_k_rate(bits_per_key),
        "posterior": chance,
        "threshold_prior": threshold_prior,
        "decision_threshold": paradox.decision_threshold(alpha),
        "paradox": is_paradox,
        "decision": ("ignore the filter's positive answer for this key (answer \"absent\" without asking)"
                     if is_paradox else "trust the filter's positive answer (answer \"present\")"),
        "min_bits_per_key": None if math.isinf(needed) else needed,
        "counting": _counting(values, alpha),
    }
