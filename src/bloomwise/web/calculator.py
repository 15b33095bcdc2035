"""The sizing calculator: n, p, m, k linked as on the well-known online calculator (hur.st), and more.

Any sufficient subset of n (keys), p (false-positive rate), m (bits) and k (hashes) solves the rest with
:func:`bloomwise.theory.plan` (its docstring gives the formulas). The answer adds what such a calculator lacks:

- the exact false-positive rate each layout (classic, partitioned, blocked) gives with these m and k,
  and the same inputs sized for each layout;
- a counting filter of m 4-bit counters: its memory, and the bound on a counter reaching 16 from *Summary Cache*
  (Fan et al.), ``m (e n k / (16 m))^16`` (:func:`bloomwise.theory.counter_overflow_bound`);
- the command line and the Python call that build this filter.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional

from bloomwise import theory
from bloomwise.web.inputs import MAX_BITS, Fields, InputError

__all__ = ["calculate", "read_plan_inputs", "solve", "one_in", "human_bits"]

COUNTER_BITS = 4
DEFAULT_LAYOUT = "blocked"  # as bloomwise build, BloomFilter() and bloomwise plan
_COUNTING_LAYOUTS = ("classic", "partitioned")


def one_in(rate: Optional[float]) -> Optional[str]:
    """A rate as "1 in N".

    >>> one_in(0.001), one_in(1.0 / 3)
    ('1 in 1,000', '1 in 3')
    """
    if rate is None:
        return None
    if rate <= 0:
        return "never"
    inverse = 1.0 / rate
    return f"1 in {inverse:,.0f}" if inverse < 1e15 else f"1 in {inverse:.3g}"


def human_bits(bits: int) -> str:
    """A size in bits as bytes with a binary unit.

    >>> human_bits(143776), human_bits(1150207006)
    ('17.55 KiB', '137.12 MiB')
    """
    num_bytes = bits / 8
    for unit, factor in (("PiB", 2 ** 50), ("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if num_bytes >= factor:
            return f"{num_bytes / factor:.2f} {unit}"
    return f"{math.ceil(num_bytes)} B"


def read_plan_inputs(query: Mapping[str, str]) -> dict:
    """n, p, m, k (None where blank) and the layout from the query; :class:`InputError` for bad fields."""
    fields = Fields(query)
    values = {
        "n": fields.count("n"),
        "p": fields.probability("p"),
        "m": fields.size_bits("m"),
        "k": fields.hashes("k"),
        "layout": fields.choice("layout", theory.LAYOUTS, DEFAULT_LAYOUT),
    }
    fields.check()
    return values


def solve(values: dict, layout: str) -> theory.Plan:
    """The plan for values read by :func:`read_plan_inputs`, sized for ``layout``; :class:`InputError` if none."""
    inputs = {name: values[name] for name in ("n", "p", "m", "k")}
    try:
        result = theory.plan(**inputs, layout=layout)
    except ValueError as error:
        message = str(error)
        given = [name for name, value in inputs.items() if value is not None]
        field = "_form"
        if "m=" in message and "cannot hold" in message or "num_bits must be a multiple" in message:
            field = "m"
        elif message.startswith("k ") or " k must" in message:
            field = "k"
        elif len(given) == 1 and given[0] != "k":
            field = given[0]
        raise InputError({field: message}) from None
    if result.m > MAX_BITS:
        raise InputError({"_form": f"this filter needs {result.m:,} bits ({human_bits(result.m)}), more than the "
                                   f"page's limit of 2^60 bits: lower n or raise p"})
    return result


def _sized_for_each_layout(values: dict) -> list[dict]:
    rows = []
    for layout in theory.LAYOUTS:
        try:
            result = solve(values, layout)
        except InputError as error:
            rows.append({"layout": layout, "error": str(error)})
            continue
        rows.append({"layout": layout, "n": result.n, "m": result.m, "k": result.k, "bytes": result.num_bytes,
                     "bits_per_key": result.bits_per_key, "fpr": result.fpr, "fpr_one_in": one_in(result.fpr)})
    return rows


def _counting(result: theory.Plan) -> dict:
    m, n, k = result.m, result.n, result.k
    bound = theory.counter_overflow_bound(m, n, k, 2 ** COUNTER_BITS)
    return {
        "num_counters": m, "counter_bits": COUNTER_BITS, "bytes": -(-m * COUNTER_BITS // 8),
        "size": human_bits(m * COUNTER_BITS),
        "overflow_bound": bound, "overflow_threshold": 2 ** COUNTER_BITS,
        "expected_max_count": theory.expected_max_count(m, n, k),
        "layout": result.layout if result.layout in _COUNTING_LAYOUTS else "classic",
    }


def _build(result: theory.Plan) -> dict:
    layout = result.layout
    m = result.blocked_num_bits if layout == "blocked" else result.m
    counting_layout = layout if layout in _COUNTING_LAYOUTS else "classic"
    p = f"{result.p:.6g}"
    if result.p >= 1.0:  # m too small for n: every query answers "maybe", no build sizes for that
        cli_size = (m, result.k)
    else:
        cli_size = theory.optimal_size(result.n, result.p, layout=layout)
    return {
        "cli": f"bloomwise build keys.txt -o keys.bloom --capacity {result.n} --fpr {p} --layout {layout}",
        "cli_note": (f"sizes by the {layout} layout's exact rate: m = {cli_size[0]:,} bits, k = {cli_size[1]}"
                     + ("" if cli_size == (m, result.k) else " (the lines below build this plan's m and k)")),
        "python": (f"from bloomwise import BloomFilter\n"
                   f"f = BloomFilter.from_size({m}, num_hashes={result.k}, layout={layout!r})"),
        "python_counting": (f"from bloomwise import CountingBloomFilter\n"
                            f"c = CountingBloomFilter.from_size({result.m}, num_hashes={result.k}, "
                            f"counter_bits={COUNTER_BITS}, layout={counting_layout!r})"),
    }


def calculate(query: Mapping[str, str]) -> dict:
    """The calculator's whole answer for a query of text fields n, p, m, k, layout (what ``GET /api/plan`` returns).

    :raises InputError: for bad or insufficient fields (mapped to the field concerned, or "_form").

    >>> answer = calculate({"n": "10000", "p": "0.001"})  # the blocked layout, as bloomwise build
    >>> answer["plan"]["m"], answer["plan"]["k"], answer["display"]["m"], answer["plan"]["layout"]
    (157696, 8, '157,696', 'blocked')
    """
    values = read_plan_inputs(query)
    result = solve(values, values["layout"])
    plan = result.as_dict()
    fprs = []
    for layout in theory.LAYOUTS:
        rate = plan["fpr"][layout]
        note = ""
        if rate is None:
            note = "k > m" if layout == "partitioned" else f"k > {theory.MAX_BLOCKED_HASHES}"
        elif layout == "blocked" and result.blocked_num_bits != result.m:
            note = f"m rounded up to {result.blocked_num_bits:,} bits (whole 512-bit blocks)"
        fprs.append({"layout": layout, "fpr": rate, "fpr_one_in": one_in(rate), "note": note,
                     "chosen": layout == result.layout})
    return {
        "plan": plan,
        "given": [name for name in ("n", "p", "m", "k") if values[name] is not None],
        "display": {
            "n": f"{result.n:,}",
            "p": f"{result.p:.6g}",
            "p_one_in": one_in(result.p),
            "m": f"{result.m:,}",
            "m_size": f"bits = {human_bits(result.m)}",
            "k": str(result.k),
            "bits_per_key": f"{result.bits_per_key:.3f}",
            "information_limit": f"{result.information_limit:.3f}",
            "overhead": f"{result.overhead:.3f}",
        },
        "fprs": fprs,
        "sized": _sized_for_each_layout(values),
        "counting": _counting(result),
        "build": _build(result),
    }
