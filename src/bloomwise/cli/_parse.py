"""The number readers of :mod:`bloomwise.units`, as the subcommands use them, and :func:`option_type`.

The readers themselves live in :mod:`bloomwise.units` (shared with the page); this module re-exports them for the
subcommands and adapts one to argparse.
"""
from __future__ import annotations

import argparse

from bloomwise.units import (parse_count, parse_fraction, parse_positive_int, parse_probability, parse_size_bits,
                             parse_size_bytes)

__all__ = ["parse_count", "parse_size_bits", "parse_size_bytes", "parse_probability", "parse_fraction",
           "parse_positive_int", "parse_tolerance", "option_type"]


def parse_tolerance(text: str, what: str = "tolerance"):
    """A fraction > 0, more than 100% allowed (``10%``, ``0.1``, ``1.5``), or None for ``off``: a summary's resize
    tolerance (``SummaryPublisher(resize_tolerance=...)``). ValueError naming ``what``.

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


def option_type(reader, what: str):
    """``reader`` as an argparse ``type=``: its ValueError becomes the usage error's message (exit 2), instead of
    argparse's generic "invalid <function> value".

    >>> option_type(parse_count, "--capacity")("40M")
    40000000
    """

    def read(text: str):
        try:
            return reader(text, what)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    read.__name__ = reader.__name__
    return read
