"""Readers for the numbers people type: counts, sizes, probabilities (``40M``, ``64KiB``, ``1 in 10000``).

The one place these units are read: the ``bloomwise`` subcommands (:mod:`bloomwise.cli`) and the page's form
fields (:mod:`bloomwise.web.inputs`) both use it. Each reader takes the text and the name to use in messages
(``what``, e.g. ``"--n"``), returns a number, and raises ValueError with a message that quotes the text and shows
what would have been accepted. Numbers beyond 10^40 are refused before any arithmetic.

- **Counts** (keys, hashes): ``1000000``, ``1_000_000``, ``1,000,000``, ``1e6``, ``2.5e6``, and the suffixes
  ``k`` / ``K`` (thousand), ``M`` (million), ``G`` (billion), ``T`` (10^12): ``40M``, ``2.5k``. The result must
  be a whole number.
- **Sizes in bits** (m): a bare number is bits; ``b`` / ``bit`` / ``bits`` are bits; ``B`` / ``byte`` / ``bytes``
  are bytes. Decimal prefixes ``k K M G T`` are powers of 1000 and binary prefixes ``Ki Mi Gi Ti`` powers of 1024,
  before either unit: ``64KiB`` = 64 * 1024 bytes = 524,288 bits, ``8MB`` = 8,000,000 bytes, ``1Mib`` = 1,048,576
  bits, ``10kb`` = 10,000 bits. Lower-case ``b`` is always bits and upper-case ``B`` always bytes (as in IEC and
  SI usage); the unit is case-sensitive, the prefix is not (``kib`` = ``KiB`` = kibibits, ``KB`` = ``kB``).
- **Sizes in bytes** (cache sizes): the same syntax, but a bare number (or one with a prefix and no unit) is
  bytes: ``64MiB``, ``64Mi``, ``1e9``, ``512KB``; a size given in bits must be a whole number of bytes.
- **Fractions** (thresholds): like probabilities, but 1 (``100%``) is allowed: ``1%``, ``0.01``, ``1``.
- **Tolerances**: a fraction > 0 where more than 100% makes sense (``10%``, ``0.1``, ``1.5``), or ``off``.
- **Plain numbers** (costs, exponents, seconds): a finite decimal number, ``1.5``, ``2e-3``; no suffixes.
- **Probabilities** (p): ``0.01``, ``1e-6``, ``1%``, ``0.5 %``, ``1 in 10000``, ``1/10000``, ``1 in 1e6``. The
  result must lie strictly between 0 and 1.
"""
from __future__ import annotations

import math
import re

__all__ = ["parse_count", "parse_size_bits", "parse_size_bytes", "parse_positive_size_bytes", "parse_probability",
           "parse_fraction", "parse_tolerance", "parse_positive_int", "parse_real", "parse_quantity", "format_bytes"]

_NUMBER = r"[+-]?(?:\d[\d_,]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_COUNT_SUFFIXES = {"": 1, "k": 10 ** 3, "K": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}
_DECIMAL_PREFIXES = {"": 1, "k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "t": 10 ** 12}
_BINARY_PREFIXES = {"ki": 2 ** 10, "mi": 2 ** 20, "gi": 2 ** 30, "ti": 2 ** 40}
_BIT_UNITS = {"b": 1, "bit": 1, "bits": 1, "B": 8, "byte": 8, "bytes": 8, "": 1}

_COUNT_RE = re.compile(rf"^\s*({_NUMBER})\s*([kKMGT]?)\s*$")
_SIZE_RE = re.compile(rf"^\s*({_NUMBER})\s*((?:[kKmMgGtT][iI]?)?)\s*(bits?|bytes?|b|B|)\s*$")
_ONE_IN_RE = re.compile(rf"^\s*1\s*(?:in|/|:)\s*({_NUMBER})\s*$", re.IGNORECASE)
_PERCENT_RE = re.compile(rf"^\s*({_NUMBER})\s*%\s*$")


def _number(text: str) -> float:
    """A decimal number with optional _ or , thousands separators (``1,000,000``, ``1_000``, ``2.5e6``)."""
    return float(text.replace("_", "").replace(",", ""))


def _decimal(text: str):
    """The same number, exactly (so 1e30 keys or 2.5k stay whole numbers)."""
    from decimal import Decimal

    return Decimal(text.replace("_", "").replace(",", ""))


_MAX_EXPONENT = 40  # counts and sizes are refused beyond 10^40: no arithmetic on (or memory for) absurd numbers


def _exact(number_text: str, factor: int, text: str, what: str):
    """``number * factor`` as an exact Fraction; ValueError naming the text when it is negative or too large.

    Exact (no decimal rounding): ``2.5k`` is 2500, ``1.0000000000000000000000000000001`` is not whole. A number
    below 10^-40 (not 0) is taken as 10^-41: no caller takes it for a whole number, and no huge power is built.
    """
    from fractions import Fraction

    number = _decimal(number_text)
    if number < 0:
        raise ValueError(f"{what} {text!r} is negative")
    if number and number.adjusted() > _MAX_EXPONENT:
        raise ValueError(f"{what} {text!r} is too large (at most 1e{_MAX_EXPONENT})")
    if number and number.adjusted() < -_MAX_EXPONENT:
        return Fraction(1, 10 ** (_MAX_EXPONENT + 1))
    value = Fraction(number) * factor
    if value > 10 ** _MAX_EXPONENT:
        raise ValueError(f"{what} {text!r} is too large (at most 1e{_MAX_EXPONENT})")
    return value


def parse_count(text: str, what: str = "count") -> int:
    """A whole, non-negative number of things: ``1e6``, ``40M``, ``1,000,000``.

    :param text: what was typed.
    :param what: the name used in error messages (e.g. ``"--n"``).
    :return: the count.
    :raises ValueError: if it is not a whole non-negative number.

    >>> parse_count("1e6"), parse_count("40M"), parse_count("2.5k"), parse_count("1,000,000")
    (1000000, 40000000, 2500, 1000000)
    """
    examples = "1000000, 1e6, 1_000_000, 40M, 2.5k"
    match = _COUNT_RE.match(str(text))
    if not match:
        raise ValueError(f"{what} {text!r} is not a number (examples: {examples})")
    value = _exact(match.group(1), _COUNT_SUFFIXES[match.group(2)], text, what)
    if value.denominator != 1:
        raise ValueError(f"{what} {text!r} is not a whole number (examples: {examples})")
    return int(value)


def parse_positive_int(text: str, what: str = "value") -> int:
    """A count that must be at least 1 (e.g. a number of hash functions).

    >>> parse_positive_int("7")
    7
    """
    value = parse_count(text, what)
    if value < 1:
        raise ValueError(f"{what} {text!r} must be at least 1")
    return value


def parse_size_bits(text: str, what: str = "size") -> int:
    """A memory size, returned in bits: ``64KiB`` (bytes), ``1Mib`` (bits), ``8MB``, ``1e6`` (bits).

    :param text: what was typed.
    :param what: the name used in error messages.
    :return: the number of bits (a whole number).
    :raises ValueError: if the text is not a size, or is not a whole number of bits.

    >>> parse_size_bits("64KiB"), parse_size_bits("1Mib"), parse_size_bits("8MB"), parse_size_bits("1e6")
    (524288, 1048576, 64000000, 1000000)
    >>> parse_size_bits("1.5 KB"), parse_size_bits("512b"), parse_size_bits("2 bytes")
    (12000, 512, 16)
    """
    return _size_bits(str(text), what, text, _BIT_EXAMPLES)


_BIT_EXAMPLES = "1000000 (bits), 1e6, 512b, 64KiB, 8MB, 1Mib, 2GiB"
_BYTE_EXAMPLES = "65536 (bytes), 1e6, 512KB, 64KiB, 8MB, 2GiB"


def _size_bits(raw: str, what: str, text, examples: str) -> int:
    """``parse_size_bits`` of ``raw``, its errors quoting ``text`` (what the user typed) and ``examples``."""
    match = _SIZE_RE.match(raw)
    if not match:
        raise ValueError(f"{what} {text!r} is not a size (examples: {examples}; b = bits, B = bytes)")
    number_text, prefix, unit = match.groups()
    prefix_key = prefix.lower()
    if prefix_key in _BINARY_PREFIXES:
        factor = _BINARY_PREFIXES[prefix_key]
    elif prefix_key in _DECIMAL_PREFIXES:
        factor = _DECIMAL_PREFIXES[prefix_key]
    else:  # pragma: no cover - the regex only lets these through
        raise ValueError(f"{what} {text!r} has an unknown prefix {prefix!r} (examples: {examples})")
    if prefix and not unit:
        raise ValueError(f"{what} {text!r} needs a unit after {prefix!r}: b for bits or B for bytes "
                         f"(examples: {examples})")
    bits = _exact(number_text, factor * _BIT_UNITS[unit], text, what)
    if bits.denominator != 1:
        raise ValueError(f"{what} {text!r} is not a whole number of bits ({float(bits):g} bits; examples: "
                         f"{examples})")
    return int(bits)


def parse_probability(text: str, what: str = "probability") -> float:
    """A probability strictly between 0 and 1: ``0.01``, ``1%``, ``1 in 10000``, ``1/1e6``.

    :param text: what was typed.
    :param what: the name used in error messages.
    :return: the probability.
    :raises ValueError: if the text is not a probability in (0, 1).

    >>> parse_probability("1%"), parse_probability("1 in 10000"), parse_probability("1/1e6"), parse_probability("0.5")
    (0.01, 0.0001, 1e-06, 0.5)
    """
    examples = "0.01, 1e-6, 1%, '1 in 10000', 1/10000"
    raw = str(text)
    try:
        if match := _ONE_IN_RE.match(raw):
            denominator = _number(match.group(1))
            if not denominator > 1 or not math.isfinite(denominator):
                raise ValueError(f"{what} {text!r}: N in '1 in N' must be a finite number above 1")
            value = 1.0 / denominator
        elif match := _PERCENT_RE.match(raw):
            value = _number(match.group(1)) / 100.0
        else:
            value = _number(raw.strip())
    except ValueError as error:
        if str(error).startswith(what):
            raise
        raise ValueError(f"{what} {text!r} is not a probability (examples: {examples})") from None
    if not 0.0 < value < 1.0:  # also rejects NaN
        raise ValueError(f"{what} {text!r} must be strictly between 0 and 1 (examples: {examples})")
    return value


def parse_size_bytes(text: str, what: str = "size") -> int:
    """A memory size in bytes: ``64MiB``, ``64Mi``, ``512KB``, ``1e9`` (a bare number is bytes).

    :param text: what was typed.
    :param what: the name used in error messages.
    :return: the number of bytes.
    :raises ValueError: if the text is not a size, or is not a whole number of bytes.

    >>> parse_size_bytes("64MiB"), parse_size_bytes("64Mi"), parse_size_bytes("1e6"), parse_size_bytes("16Kib")
    (67108864, 67108864, 1000000, 2048)
    """
    raw = str(text).strip()
    match = _SIZE_RE.match(raw)
    if match and not match.group(3):  # no unit: bytes
        raw = raw + "B"
    bits = _size_bits(raw, what, text, _BYTE_EXAMPLES)
    if bits % 8:
        raise ValueError(f"{what} {text!r} is not a whole number of bytes ({bits} bits; examples: "
                         f"{_BYTE_EXAMPLES})")
    return bits // 8


def parse_positive_size_bytes(text: str, what: str = "size") -> int:
    """A memory size in bytes (:func:`parse_size_bytes`) of at least one byte.

    >>> parse_positive_size_bytes("8KiB")
    8192
    """
    value = parse_size_bytes(text, what)
    if value < 1:
        raise ValueError(f"{what} {text!r} must be at least 1 byte")
    return value


def parse_fraction(text: str, what: str = "fraction", *, allow_zero: bool = False) -> float:
    """A fraction in (0, 1]: ``1%``, ``0.01``, ``10 %``, ``1``; with ``allow_zero``, also exactly ``0``/``0%``.

    >>> parse_fraction("1%"), parse_fraction("0.05"), parse_fraction("100%"), parse_fraction("0", allow_zero=True)
    (0.01, 0.05, 1.0, 0.0)
    """
    raw = str(text).strip()
    if allow_zero and raw in ("0", "0%", "0.0"):
        return 0.0
    try:
        if match := _PERCENT_RE.match(raw):
            value = _number(match.group(1)) / 100.0
        else:
            value = _number(raw)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a fraction (examples: 1%, 0.01, 10%)") from None
    if not 0.0 < value <= 1.0:  # also rejects NaN
        raise ValueError(f"{what} {text!r} must lie in (0, 1] (examples: 1%, 0.01, 10%)")
    return value


def parse_tolerance(text: str, what: str = "tolerance"):
    """A fraction > 0, more than 100% allowed (``10%``, ``0.1``, ``1.5``), or None for ``off``.

    >>> parse_tolerance("10%"), parse_tolerance("1.5"), parse_tolerance("off")
    (0.1, 1.5, None)
    """
    raw = str(text).strip()
    if raw == "off":
        return None
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a fraction (10%, 0.1) nor 'off'") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"{what} {text!r} must be a fraction > 0 (10%, 0.1) or 'off'")
    return value


def parse_real(text: str, what: str = "number", *, allow_zero: bool = False) -> float:
    """A finite number > 0 (``allow_zero``: >= 0): ``1.5``, ``2e-3``.

    >>> parse_real("1.5"), parse_real(" 2e-3 "), parse_real("0", allow_zero=True)
    (1.5, 0.002, 0.0)
    """
    try:
        value = float(str(text).strip())
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number") from None
    if not (value >= 0 if allow_zero else value > 0) or value == float("inf"):  # also rejects NaN
        raise ValueError(f"{what} {text!r} must be a finite number {'>=' if allow_zero else '>'} 0")
    return value


def parse_quantity(text: str, what: str, unit: str) -> float:
    """A finite number > 0 of ``unit`` (seconds, milliseconds): ``2``, ``0.5``; the message names the unit.

    >>> parse_quantity("0.5", "--peer-timeout", "seconds")
    0.5
    """
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{what} {text!r} must be a positive number of {unit}")
    return value


def format_bytes(num_bytes: float) -> str:
    """A number of bytes with a binary unit (KiB = 1024 bytes, up to PiB), two decimals.

    >>> format_bytes(12_624_134_720), format_bytes(1536), format_bytes(100)
    ('11.76 GiB', '1.50 KiB', '100 B')
    """
    for unit, factor in (("PiB", 2 ** 50), ("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if num_bytes >= factor:
            return f"{num_bytes / factor:.2f} {unit}"
    return f"{math.ceil(num_bytes)} B"
