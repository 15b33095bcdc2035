"""One row per printed number: what the paper printed, what bloomwise obtained and how, what theory expects, and a
verdict that follows from the printed and the obtained value alone.

How a row's value was obtained (``method``):

- ``computed``: a formula evaluated (no randomness, no filter); it never claims noise;
- ``measured``: read off bloomwise's structures on fixed input (the CS 170 example's bits, a decoding); no noise;
- ``simulated``: the mean over seeded random runs of bloomwise's filters; its noise is ``noise_sd``, the standard
  deviation of (printed - measured) when the printed number is itself one run of the same experiment, estimated
  from theory or from at least :data:`MIN_NOISE_SAMPLES` samples (``noise_from`` says which).

Verdicts (:func:`judge`, the only place a verdict is decided):

- ``match``: the obtained value, rounded the way the paper printed its number (``rounding``: the printed text's own
  digits, or the table's convention), is that number; for a string, it is that string; for a printed claim in
  words (``accept``: the interval the words admit), the value lies in that interval;
- ``within_noise``: not a match, but |printed - measured| <= ``NOISE_Z`` * ``noise_sd`` (simulated rows only);
- ``differs``: neither; the row's note says why;
- ``misprint``: a ``differs`` row where the paper's own formula, tables or arithmetic give the obtained number, so
  the printed one is a typo (the note names the evidence);
- ``unavailable``: the printed number is a property of data the paper does not publish (its trace); nothing is
  compared, the note says so.

The expected value (exact theory where there is one) only explains a row; it never decides its verdict.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional, Union

__all__ = ["Row", "VERDICTS", "METHODS", "NOISE_Z", "MIN_NOISE_SAMPLES", "decimals_of", "rounds_to", "judge",
           "make_row", "verdict_for"]

VERDICTS = ("match", "within_noise", "differs", "misprint", "unavailable")
METHODS = ("computed", "measured", "simulated")

#: a printed value within this many standard deviations of (printed - measured) is "within noise"
#: (two-sided false-alarm probability 0.27% per row under a normal approximation)
NOISE_Z = 3.0
#: a noise estimated from samples rests on at least this many
MIN_NOISE_SAMPLES = 10

Value = Union[float, str, None]


@dataclass
class Row:
    """A row of results.json."""

    source: str
    item: str
    printed: str
    measured: Value
    expected: Value
    verdict: str
    note: str = ""
    method: str = "computed"
    noise_sd: Optional[float] = None       # sd of (printed - measured), simulated rows only
    noise_from: str = ""                   # "theory: ..." or "N samples: ..."
    rounding: str = "printed"              # "printed" (the text's own digits) or "3 significant digits"
    accept: Optional[tuple] = None         # (low, high): the interval a printed claim in words admits

    def as_dict(self) -> dict:
        d = asdict(self)
        for key in ("measured", "expected", "noise_sd"):
            value = d[key]
            if isinstance(value, float) and not math.isfinite(value):
                d[key] = None
        if d["accept"] is not None:
            d["accept"] = list(d["accept"])
        return d


def decimals_of(text: str) -> tuple[str, int]:
    """How a printed number was rounded: ``("sig", digits)`` for mantissa/exponent or leading-zero forms,
    ``("dec", places)`` for fixed decimals ("92.76" -> 2 places)."""
    t = text.strip().lower().replace("%", "")
    if "e" in t:
        mantissa = t.split("e")[0].lstrip("-")
        digits = len(mantissa.replace(".", "").lstrip("0")) or 1
        return "sig", digits
    if "." in t:
        return "dec", len(t.split(".")[1])
    return "dec", 0


def rounds_to(value: float, printed: str, rounding: str = "printed") -> bool:
    """Does ``value`` print as ``printed``?

    ``rounding="printed"``: rounded to the digits the printed text shows (``"92.76"``: 2 places, ``"1.47e-1"``: 3
    significant digits). ``rounding="3 significant digits"``: the convention of a table that prints every cell to
    3 significant digits (``format(value, ".3g")``), whatever the cell's own text shows, so "0.092" for 0.0918 is
    not a match there.
    """
    if value is None or isinstance(value, str) or not math.isfinite(value):
        return False
    target = float(printed.replace("%", ""))
    if rounding == "3 significant digits":
        return float(format(value, ".3g")) == target
    if rounding != "printed":
        raise ValueError(f"rounding must be 'printed' or '3 significant digits', got {rounding!r}")
    kind, digits = decimals_of(printed)
    if kind == "sig":
        if value == 0:
            return target == 0
        return float(f"{value:.{digits - 1}e}") == target
    return round(value, digits) == round(target, digits) or abs(value - target) <= 0.5 * 10 ** -digits + 1e-12


def judge(printed: str, measured: Value, *, noise_sd: Optional[float] = None, rounding: str = "printed",
          accept: Optional[tuple] = None) -> str:
    """``match`` / ``within_noise`` / ``differs`` from the printed text and the obtained value alone."""
    if measured is None:
        return "differs"
    if isinstance(measured, str):
        return "match" if measured == printed else "differs"
    if not math.isfinite(measured):
        return "differs"
    if accept is not None:
        low, high = accept
        return "match" if low <= measured <= high else "differs"
    if rounds_to(measured, printed, rounding):
        return "match"
    target = float(printed.replace("%", ""))
    if noise_sd is not None and noise_sd > 0 and abs(target - measured) <= NOISE_Z * noise_sd:
        return "within_noise"
    return "differs"


def verdict_for(printed: str, measured: Optional[float], sd: Optional[float] = None) -> str:
    """:func:`judge` for a number and a noise sd (kept for callers that only need the verdict)."""
    return judge(printed, measured, noise_sd=sd)


def make_row(source: str, item: str, printed, measured: Value, *, method: str, expected: Value = None,
             note: str = "", noise_sd: Optional[float] = None, noise_from: str = "", rounding: str = "printed",
             accept: Optional[tuple] = None, misprint: bool = False, unavailable: bool = False) -> Row:
    """A row whose verdict :func:`judge` decides.

    ``misprint=True`` marks a row the paper's own arithmetic contradicts: allowed only when the verdict is
    ``differs`` (a typo claim against a value that matches would be self-contradictory). ``unavailable=True``: the
    printed number belongs to unpublished data; ``measured`` must be None.
    """
    printed = str(printed)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method != "simulated" and noise_sd is not None:
        raise ValueError(f"{item}: a {method} row has no noise")
    if noise_sd is not None and not noise_from:
        raise ValueError(f"{item}: a noise needs its source (noise_from)")
    if unavailable:
        if measured is not None:
            raise ValueError(f"{item}: an unavailable row has no measured value")
        return Row(source, item, printed, None, expected, "unavailable", note, method, None, "", rounding, accept)
    verdict = judge(printed, measured, noise_sd=noise_sd, rounding=rounding, accept=accept)
    if misprint:
        if verdict != "differs":
            raise ValueError(f"{item}: called a misprint but the verdict is {verdict}")
        verdict = "misprint"
    if verdict in ("differs", "misprint") and not note.strip():
        raise ValueError(f"{item}: a {verdict} row needs a note that says why")
    return Row(source, item, printed, measured, expected, verdict, note, method, noise_sd, noise_from, rounding,
               accept)
