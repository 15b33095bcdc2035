"""Readers for the page's form fields, with the page's bounds, and :class:`InputError`.

A field arrives as text (a query parameter). The readers are those of :mod:`bloomwise.units` (shared with the command line:
``40M``, ``1 in 10000``, ``64KiB``; they refuse numbers above 1e40 before any arithmetic) and add the page's upper
bounds, so that no request can ask the server for an absurd amount of work. Each error names the field, quotes what
was typed and says what is accepted; the server answers them with ``400`` and ``{"error": ..., "fields": {field:
message}}``, and the page shows each message next to its field.
"""
from __future__ import annotations

import math
import re
from typing import Mapping, Optional

from bloomwise.units import parse_count, parse_positive_int, parse_probability, parse_size_bits

__all__ = ["InputError", "Fields", "MAX_KEYS", "MAX_BITS", "MAX_HASHES", "MAX_TEXT"]

MAX_KEYS = 10 ** 15          # keys: a petabyte-scale set is the largest a calculator needs to size
MAX_BITS = 2 ** 60           # bits: 128 PiB
MAX_HASHES = 100             # hash functions: optimal k for p = 1e-30 is ~100
MAX_TEXT = 200               # characters in one field
MAX_ALPHA = 1e12             # W_FN / W_FP
MAX_BITS_PER_KEY = 200.0     # the paradox explorer's m/n (2^-(ln2 200) is below 1e-41)
MAX_COUNTERS = 64            # counters of one key in the Theorem 2 panel (k)
MAX_COUNTER_VALUE = 2 ** 16 - 1


class InputError(ValueError):
    """One or more fields are bad: ``fields`` maps each field's name to a message ("_form" for the form as a whole).

    >>> str(InputError({"p": "p 'x' is not a probability"}))
    "p 'x' is not a probability"
    """

    def __init__(self, fields: Mapping[str, str]):
        self.fields = dict(fields)
        super().__init__("; ".join(self.fields.values()))

    def as_dict(self) -> dict:
        """The JSON body of the 400 answer."""
        return {"error": str(self), "fields": self.fields}


class Fields:
    """Reads the fields of one request and collects every error before raising (the page marks all bad fields).

    >>> fields = Fields({"n": "40M", "p": "1 in 1e6", "k": "-3"})
    >>> fields.count("n"), fields.probability("p"), fields.hashes("k")
    (40000000, 1e-06, None)
    >>> fields.errors["k"]
    "k '-3' is negative"
    """

    def __init__(self, query: Mapping[str, str], labels: Optional[Mapping[str, str]] = None):
        self.query = query
        self.labels = dict(labels or {})
        self.errors: dict[str, str] = {}

    def label(self, name: str) -> str:
        """How messages name the field (the page's label: "m (counters)" for the field cm)."""
        return self.labels.get(name, name)

    def text(self, name: str) -> Optional[str]:
        """The field's text, stripped; None when it is missing or blank."""
        value = self.query.get(name)
        if value is None:
            return None
        value = str(value).strip()
        if not value:
            return None
        if len(value) > MAX_TEXT:
            self.errors[name] = f"{self.label(name)}: {len(value)} characters is too long (at most {MAX_TEXT})"
            return None
        return value

    def _read(self, name: str, reader, *args):
        text = self.text(name)
        if text is None:
            return None
        try:
            return reader(text, self.label(name), *args)
        except ValueError as error:
            self.errors[name] = str(error)
            return None

    def fail(self, name: str, message: str) -> None:
        self.errors.setdefault(name, message)

    def count(self, name: str, minimum: int = 1, maximum: int = MAX_KEYS) -> Optional[int]:
        """A whole number of keys: ``1e6``, ``40M``, ``1,000,000``."""
        value = self._read(name, parse_count)
        if value is not None and not minimum <= value <= maximum:
            self.fail(name, f"{self.label(name)} {self.text(name)!r} must be between {minimum:,} and {maximum:,}")
            return None
        return value

    def probability(self, name: str) -> Optional[float]:
        """A probability strictly between 0 and 1: ``0.01``, ``1%``, ``1 in 10000``, ``1/1e6``."""
        return self._read(name, parse_probability)

    def size_bits(self, name: str, maximum: int = MAX_BITS) -> Optional[int]:
        """A size in bits: ``1e6`` (bits), ``64KiB``, ``8MB``, ``1Mib``."""
        value = self._read(name, parse_size_bits)
        if value is not None and not 1 <= value <= maximum:
            self.fail(name, f"{self.label(name)} {self.text(name)!r} must be between 1 bit and 2^{maximum.bit_length() - 1} "
                            f"bits (128 PiB)")
            return None
        return value

    def hashes(self, name: str, maximum: int = MAX_HASHES) -> Optional[int]:
        """A number of hash functions, 1 to ``maximum``."""
        value = self._read(name, parse_positive_int)
        if value is not None and value > maximum:
            self.fail(name, f"{self.label(name)} {self.text(name)!r} is more than {maximum} hash functions")
            return None
        return value

    def real(self, name: str, minimum: float, maximum: float, *, open_below: bool = True) -> Optional[float]:
        """A decimal number in (minimum, maximum] (or [minimum, maximum] with ``open_below=False``)."""
        text = self.text(name)
        if text is None:
            return None
        try:
            value = float(text.replace("_", "").replace(",", ""))
        except ValueError:
            self.fail(name, f"{self.label(name)} {text!r} is not a number (examples: 10, 0.5, 1e3)")
            return None
        low_ok = value > minimum if open_below else value >= minimum
        if not (math.isfinite(value) and low_ok and value <= maximum):
            bound = f"above {minimum:g}" if open_below else f"at least {minimum:g}"
            self.fail(name, f"{self.label(name)} {text!r} must be {bound} and at most {maximum:g}")
            return None
        return value

    def choice(self, name: str, allowed, default: str) -> str:
        text = self.text(name)
        if text is None:
            return default
        if text not in allowed:
            self.fail(name, f"{self.label(name)} {text!r} is not one of {', '.join(allowed)}")
            return default
        return text

    def counters(self, name: str, counter_bits: int = 16) -> Optional[list[int]]:
        """A key's counter values: whole numbers separated by commas or spaces (``1, 10``), each at most
        ``2^counter_bits - 1``, the largest value a counter of that width holds."""
        text = self.text(name)
        if text is None:
            return None
        parts = [part for part in re.split(r"[\s,;]+", text) if part]
        if not parts or not all(part.isascii() and part.isdigit() for part in parts):
            self.fail(name, f"{self.label(name)} {text!r}: give the key's counters as whole numbers >= 0, e.g. 1, 10")
            return None
        if len(parts) > MAX_COUNTERS:
            self.fail(name, f"{self.label(name)}: {len(parts)} counters is more than {MAX_COUNTERS}")
            return None
        values = [int(part) for part in parts]
        largest = min(2 ** counter_bits - 1, MAX_COUNTER_VALUE)
        if max(values) > largest:
            article = "an" if counter_bits in (8, 11, 18) else "a"
            self.fail(name, f"{self.label(name)}: {max(values)} is above {largest}, the largest value of {article} "
                            f"{counter_bits}-bit counter (lower the counters, or choose wider counters)")
            return None
        return values

    def check(self) -> None:
        """Raise :class:`InputError` if any field was bad."""
        if self.errors:
            raise InputError(self.errors)
