"""What a filter can say about itself from its fill, the same for every structure over m positions.

A structure mixes in ``FillStatistics`` and defines ``_layout_id``, ``_capacity``, ``_num_positions`` (m) and
``_count_filled()`` (bits set, or nonzero counters); the math is in ``bloomwise.theory``.
"""
from __future__ import annotations

from typing import Optional

from bloomwise import theory
from bloomwise._base import LAYOUT_NAMES


class FillStatistics:
    """``layout``, ``capacity``, ``filled_cells()``, ``fill_ratio``, ``approx_count()`` and ``estimated_fpr()``."""

    __slots__ = ()

    @property
    def layout(self) -> str:
        """``"classic"``, ``"partitioned"`` or ``"blocked"``."""
        return LAYOUT_NAMES[self._layout_id]

    @property
    def capacity(self) -> Optional[int]:
        """The number of keys the filter was sized for (None when built by size)."""
        return self._capacity

    def filled_cells(self) -> int:
        """The positions in use: bits set (a Bloom filter), nonzero counters (the counting filters); the ``s`` of
        ``theory.approx_count(m, k, s)`` and ``theory.fpr_from_fill(m, k, s)``."""
        return self._count_filled()

    @property
    def fill_ratio(self) -> float:
        """The fraction of positions in use (bits set; nonzero counters): ``filled_cells() / m``."""
        return self._count_filled() / self._num_positions

    def approx_count(self) -> float:
        """Distinct keys present, estimated from the fill (Swamidass & Baldi; ``theory.approx_count``)."""
        return theory.approx_count(self._num_positions, self.num_hashes, self._count_filled(),
                                   layout=self.layout).estimate

    def estimated_fpr(self) -> float:
        """The false-positive rate the filter has now, estimated from its fill (``theory.fpr_from_fill``)."""
        return theory.fpr_from_fill(self._num_positions, self.num_hashes, self._count_filled(), layout=self.layout)
