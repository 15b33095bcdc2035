"""One row per printed number: what the paper printed, what bloomwise measured, what theory expects, and a verdict.

Verdicts:

- ``match``: the measured (or computed) value, rounded the way the paper printed its number, is that number;
- ``within_noise``: it is not, but the printed number lies within the stated noise of the measurement (for
  simulated quantities: ``NOISE_Z`` standard deviations of one run, estimated from the seeds of this run), or within
  ``RELATIVE_SLACK`` of it for numbers the paper rounds coarsely;
- ``differs``: neither; the row's note says why (a row ``differs`` without a note is a defect of the reproduction);
- ``misprint``: the paper's own arithmetic or tables give another number than the one printed (a typo).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional

__all__ = ["Row", "VERDICTS", "decimals_of", "rounds_to", "verdict_for", "NOISE_Z"]

VERDICTS = ("match", "within_noise", "differs", "misprint")

#: a printed value within this many standard deviations of one run of the measurement is "within noise"
#: (two-sided false-alarm probability 0.27% per row under a normal approximation)
NOISE_Z = 3.0
#: relative slack for printed numbers with no noise estimate (their printed precision is already compared exactly)
RELATIVE_SLACK = 0.0


@dataclass
class Row:
    """A row of results.json."""

    source: str
    item: str
    printed: object
    measured: Optional[float]
    expected: Optional[float]
    verdict: str
    note: str = ""

    def as_dict(self) -> dict:
        d = asdict(self)
        for key in ("measured", "expected"):
            value = d[key]
            if isinstance(value, float) and not math.isfinite(value):
                d[key] = None
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


def rounds_to(value: float, printed: str) -> bool:
    """Does ``value`` print as ``printed`` (same rounding as the printed text)?"""
    if value is None or not math.isfinite(value):
        return False
    target = float(printed.replace("%", ""))
    kind, digits = decimals_of(printed)
    if kind == "sig":
        if value == 0:
            return target == 0
        return float(f"{value:.{digits - 1}e}") == target
    return round(value, digits) == round(target, digits) or abs(value - target) <= 0.5 * 10 ** -digits + 1e-12


def verdict_for(printed: str, measured: Optional[float], sd: Optional[float] = None, *,
                relative: float = RELATIVE_SLACK) -> str:
    """``match`` / ``within_noise`` / ``differs`` for a printed text and a measured value with one run's sd."""
    if measured is None:
        return "differs"
    if rounds_to(measured, printed):
        return "match"
    target = float(printed.replace("%", ""))
    if sd is not None and sd > 0 and abs(target - measured) <= NOISE_Z * sd:
        return "within_noise"
    if relative and target != 0 and abs(measured / target - 1.0) <= relative:
        return "within_noise"
    return "differs"
