"""Optional figures (the ``plot`` extra: ``pip install 'bloomwise[plot]'``, which brings matplotlib).

matplotlib is imported inside each function, so ``import bloomwise.plot`` costs nothing, and the figures are
drawn with its object-oriented API (a ``Figure`` of its own, never pyplot's global state), which is safe to
call from a server thread.
"""
from __future__ import annotations

import os
from typing import Iterable, Union

from bloomwise.reproduce.figures import draw_figure4
from bloomwise.reproduce.summary_cache import figure4_data

__all__ = ["plot_figure4"]

_FORMATS = {".png": "png", ".svg": "svg"}


def _matplotlib_figure():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("drawing figures needs matplotlib: pip install 'bloomwise[plot]'") from None
    return Figure


def plot_figure4(path: Union[str, os.PathLike], *, bits_per_item: Iterable[int] = range(1, 33)) -> str:
    """Draw Figure 4 of *Summary Cache* (Fan et al. 2000) to a PNG or SVG file.

    The false-positive rate ``(1 - e^(-k/b))^k`` against bits per entry b on a log scale: the upper curve for
    k = 4, the lower one for the best integer k (:func:`bloomwise.reproduce.summary_cache.figure4_data`).

    :param path: where to write; the suffix (``.png`` or ``.svg``) picks the format.
    :param bits_per_item: the x values (default 1..32, as in the paper).
    :return: the path written, as a string.
    :raises ValueError: for another suffix.
    :raises ImportError: if matplotlib is not installed.
    """
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in _FORMATS:
        raise ValueError(f"the figure's file name must end in .png or .svg, got {path!r}")
    data = figure4_data(bits_per_item)
    Figure = _matplotlib_figure()
    figure = Figure(figsize=(6.4, 4.4), layout="constrained")
    draw_figure4(figure.add_subplot(), data)
    figure.savefig(path, format=_FORMATS[suffix], dpi=150)
    return path
