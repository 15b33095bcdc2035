"""The number readers of :mod:`bloomwise.units`, as the subcommands use them, and :func:`option_type`.

The readers themselves live in :mod:`bloomwise.units` (shared with the page); this module re-exports them for the
subcommands and adapts one to argparse.
"""
from __future__ import annotations

import argparse

from bloomwise.units import (parse_count, parse_fraction, parse_positive_int, parse_positive_size_bytes,
                             parse_probability, parse_quantity, parse_real, parse_size_bits, parse_size_bytes,
                             parse_tolerance)

__all__ = ["parse_count", "parse_size_bits", "parse_size_bytes", "parse_positive_size_bytes", "parse_probability",
           "parse_fraction", "parse_tolerance", "parse_positive_int", "parse_real", "parse_quantity", "option_type"]


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
