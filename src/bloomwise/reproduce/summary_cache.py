"""Tables 3-5 and Figure 4 of *Summary Cache* (Fan, Cao, Almeida, Broder; SIGCOMM '98 / ToN 8(3) 2000).

:func:`fp_table` computes the tables from the formula ``(1 - e^(-k/b))^k``; :data:`PRINTED_TABLES` holds them as
printed (transcribed from two extractions of the paper's Bloom-filter section, which agree on every one of the 64
printed rows; the strings are kept exactly as printed, typos included, so nothing there may be "corrected");
:func:`fp_table_differences` compares the two; :func:`figure4_data` gives the two curves of Figure 4.

Each entry of :data:`PRINTED_TABLES` is ``(table, m/n, printed k_opt, printed cells)``; the cells of Table 3 start at
k = 1, those of Table 4 at k = 9 and those of Table 5 at k = 17.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from bloomwise._checks import check_integer
from bloomwise.theory._validate import LN2
from bloomwise.theory.rates import power
from bloomwise.theory.sizing import best_of_floor_ceil

__all__ = [
    "FpTableCell", "FpTableRow", "TableDifference", "fp_table", "fp_table_differences", "format_fp_tables",
    "Figure4Data", "figure4_data", "PRINTED_TABLES", "TABLE_FIRST_K", "printed_cells", "printed_k_opt",
]

#: First k of each printed table.
TABLE_FIRST_K = {3: 1, 4: 9, 5: 17}

PRINTED_TABLES: tuple[tuple[int, int, str, tuple[str, ...]], ...] = (
    # Table 3: k = 1..8
    (3, 2, '1.39', ('0.393', '0.400')),
    (3, 3, '2.08', ('0.283', '0.237', '0.253')),
    (3, 4, '2.77', ('0.221', '0.155', '0.147', '0.160')),
    (3, 5, '3.46', ('0.181', '0.109', '0.092', '0.092', '0.101')),
    (3, 6, '4.16', ('0.154', '0.0804', '0.0609', '0.0561', '0.0578', '0.0638')),
    (3, 7, '4.85', ('0.133', '0.0618', '0.0423', '0.0359', '0.0347', '0.0364')),
    (3, 8, '5.55', ('0.118', '0.0489', '0.0306', '0.024', '0.0217', '0.0216', '0.0229')),
    (3, 9, '6.24', ('0.105', '0.0397', '0.0228', '0.0166', '0.0141', '0.0133', '0.0135', '0.0145')),
    (3, 10, '6.93', ('0.0952', '0.0329', '0.0174', '0.0118', '0.00943', '0.00844', '0.00819', '0.00846')),
    (3, 11, '7.62', ('0.0869', '0.0276', '0.0136', '0.00864', '0.0065', '0.00552', '0.00513', '0.00509')),
    (3, 12, '8.32', ('0.08', '0.0236', '0.0108', '0.00646', '0.00459', '0.00371', '0.00329', '0.00314')),
    (3, 13, '9.01', ('0.074', '0.0203', '0.00875', '0.00492', '0.00332', '0.00255', '0.00217', '0.00199')),
    (3, 14, '9.7', ('0.0689', '0.0177', '0.00718', '0.00381', '0.00244', '0.00179', '0.00146', '0.00129')),
    (3, 15, '10.4', ('0.0645', '0.0156', '0.00596', '0.003', '0.00183', '0.00128', '0.001', '0.000852')),
    (3, 16, '11.1', ('0.0606', '0.0138', '0.005', '0.00239', '0.00139', '0.000935', '0.000702', '0.000574')),
    (3, 17, '11.8', ('0.0571', '0.0123', '0.00423', '0.00193', '0.00107', '0.000692', '0.000499', '0.000394')),
    (3, 18, '12.5', ('0.054', '0.0111', '0.00362', '0.00158', '0.000839', '0.000519', '0.00036', '0.000275')),
    (3, 19, '13.2', ('0.0513', '0.00998', '0.00312', '0.0013', '0.000663', '0.000394', '0.000264', '0.000194')),
    (3, 20, '13.9', ('0.0488', '0.00906', '0.0027', '0.00108', '0.00053', '0.000303', '0.000196', '0.00014')),
    (3, 21, '14.6', ('0.0465', '0.00825', '0.00236', '0.000905', '0.000427', '0.000236', '0.000147', '0.000101')),
    (3, 22, '15.2', ('0.0444', '0.00755', '0.00207', '0.000764', '0.000347', '0.000185', '0.000112', '7.46e-05')),
    (3, 23, '15.9', ('0.0425', '0.00694', '0.00183', '0.000649', '0.000285', '0.000147', '8.56e-05', '5.55e-05')),
    (3, 24, '16.6', ('0.0408', '0.00639', '0.00162', '0.000555', '0.000235', '0.000117', '6.63e-05', '4.17e-05')),
    (3, 25, '17.3', ('0.0392', '0.00591', '0.00145', '0.000478', '0.000196', '9.44e-05', '5.18e-05', '3.16e-05')),
    (3, 26, '18', ('0.0377', '0.00548', '0.00129', '0.000413', '0.000164', '7.66e-05', '4.08e-05', '2.42e-05')),
    (3, 27, '18.7', ('0.0364', '0.0051', '0.00116', '0.000359', '0.000138', '6.26e-05', '3.24e-05', '1.87e-05')),
    (3, 28, '19.4', ('0.0351', '0.00475', '0.00105', '0.000314', '0.000117', '5.15e-05', '2.59e-05', '1.46e-05')),
    (3, 29, '20.1', ('0.0339', '0.00444', '0.000949', '0.000276', '9.96e-05', '4.26e-05', '2.09e-05', '1.14e-05')),
    (3, 30, '20.8', ('0.0328', '0.00416', '0.000862', '0.000243', '8.53e-05', '3.55e-05', '1.69e-05', '9.01e-06')),
    (3, 31, '21.5', ('0.0317', '0.0039', '0.000785', '0.000215', '7.33e-05', '2.97e-05', '1.38e-05', '7.16e-06')),
    (3, 32, '22.2', ('0.0308', '0.00367', '0.000717', '0.000191', '6.33e-05', '2.5e-05', '1.13e-05', '5.73e-06')),
    # Table 4: k = 9..16
    (4, 11, '7.62', ('0.00531',)),
    (4, 12, '8.32', ('0.00317', '0.00334')),
    (4, 13, '9.01', ('0.00194', '0.00198', '0.0021')),
    (4, 14, '9.7', ('0.00121', '0.0012', '0.00124')),
    (4, 15, '10.4', ('0.000775', '0.000744', '0.000747', '0.000778')),
    (4, 16, '11.1', ('0.000505', '0.00047', '0.000459', '0.000466', '0.000488')),
    (4, 17, '11.8', ('0.000335', '0.000302', '0.000287', '0.000284', '0.000291')),
    (4, 18, '12.5', ('0.000226', '0.000198', '0.000183', '0.000176', '0.000176', '0.000182')),
    (4, 19, '13.2', ('0.000155', '0.000132', '0.000118', '0.000111', '0.000109', '0.00011', '0.000114')),
    (4, 20, '13.9', ('0.000108', '8.89e-05', '7.77e-05', '7.12e-05', '6.79e-05', '6.71e-05', '6.84e-05')),
    (4, 21, '14.6', ('7.59e-05', '6.09e-05', '5.18e-05', '4.63e-05', '4.31e-05', '4.17e-05', '4.16e-05', '4.27e-05')),
    (4, 22, '15.2', ('5.42e-05', '4.23e-05', '3.5e-05', '3.05e-05', '2.78e-05', '2.63e-05', '2.57e-05', '2.59e-05')),
    (4, 23, '15.9', ('3.92e-05', '2.97e-05', '2.4e-05', '2.04e-05', '1.81e-05', '1.68e-05', '1.61e-05', '1.59e-05')),
    (4, 24, '16.6', ('2.86e-05', '2.11e-05', '1.66e-05', '1.38e-05', '1.2e-05', '1.08e-05', '1.02e-05', '9.87e-06')),
    (4, 25, '17.3', ('2.11e-05', '1.52e-05', '1.16e-05', '9.42e-06', '8.01e-06', '7.1e-06', '6.54e-06', '6.22e-06')),
    (4, 26, '18', ('1.57e-05', '1.1e-05', '8.23e-06', '6.52e-06', '5.42e-06', '4.7e-06', '4.24e-06', '3.96e-06')),
    (4, 27, '18.7', ('1.18e-05', '8.07e-06', '5.89e-06', '4.56e-06', '3.7e-06', '3.15e-06', '2.79e-06', '2.55e-06')),
    (4, 28, '19.4', ('8.96e-06', '5.97e-06', '4.25e-06', '3.22e-06', '2.56e-06', '2.13e-06', '1.85e-06', '1.66e-06')),
    (4, 29, '20.1', ('6.85e-06', '4.45e-06', '3.1e-06', '2.29e-06', '1.79e-06', '1.46e-06', '1.24e-06', '1.09e-06')),
    (4, 30, '20.8', ('5.28e-06', '3.35e-06', '2.28e-06', '1.65e-06', '1.26e-06', '1.01e-06', '8.39e-06', '7.26e-06')),
    (4, 31, '21.5', ('4.1e-06', '2.54e-06', '1.69e-06', '1.2e-06', '8.93e-07', '7e-07', '5.73e-07', '4.87e-07')),
    (4, 32, '22.2', ('3.2e-06', '1.94e-06', '1.26e-06', '8.74e-07', '6.4e-07', '4.92e-07', '3.95e-07', '3.3e-07')),
    # Table 5: k = 17..24
    (5, 22, '15.2', ('2.67e-05',)),
    (5, 23, '15.9', ('1.61e-05',)),
    (5, 24, '16.6', ('9.84e-06', '1e-05')),
    (5, 25, '17.3', ('6.08e-06', '6.11e-06', '6.27e-06')),
    (5, 26, '18', ('3.81e-06', '3.76e-06', '3.8e-06', '3.92e-06')),
    (5, 27, '18.7', ('2.41e-06', '2.34e-06', '2.33e-06', '2.37e-06')),
    (5, 28, '19.4', ('1.54e-06', '1.47e-06', '1.44e-06', '1.44e-06', '1.48e-06')),
    (5, 29, '20.1', ('9.96e-07', '9.35e-07', '9.01e-07', '8.89e-07', '8.96e-07', '9.21e-07')),
    (5, 30, '20.8', ('6.5e-07', '6e-07', '5.69e-07', '5.54e-07', '5.5e-07', '5.58e-07')),
    (5, 31, '21.5', ('4.29e-07', '3.89e-07', '3.63e-07', '3.48e-07', '3.41e-07', '3.41e-07', '3.48e-07')),
    (5, 32, '22.2', ('2.85e-07', '2.55e-07', '2.34e-07', '2.21e-07', '2.13e-07', '2.1e-07', '2.12e-07', '2.17e-07')),
)


def printed_cells() -> dict[int, dict[int, str]]:
    """The printed cells as ``{m/n: {k: printed string}}`` (all three tables merged)."""
    cells: dict[int, dict[int, str]] = {}
    for table, bits_per_item, _k_opt, row in PRINTED_TABLES:
        first = TABLE_FIRST_K[table]
        for offset, text in enumerate(row):
            cells.setdefault(bits_per_item, {})[first + offset] = text
    return cells


def printed_k_opt() -> dict[int, str]:
    """The printed k_opt column (m/n * ln 2) as ``{m/n: printed string}``."""
    return {bits_per_item: k_opt for _table, bits_per_item, k_opt, _row in PRINTED_TABLES}


# ---------------------------------------------------------------------------------------------------------
# Summary Cache, Tables 3-5 and Figure 4
# ---------------------------------------------------------------------------------------------------------
def _approx_rate(bits_per_item: float, k: int) -> float:
    """The tables' formula: (1 - e^(-k / b))^k."""
    return power(-math.expm1(-k / bits_per_item), k)


@dataclass(frozen=True)
class FpTableCell:
    """One cell: the rate ``(1 - e^(-k/b))^k`` and its text to 3 significant digits (``format(x, '.3g')``)."""

    k: int
    fpr: float
    text: str


@dataclass(frozen=True)
class FpTableRow:
    """One row (one m/n) of Tables 3-5: k_opt = b ln 2 (and its printed text) and the cells."""

    bits_per_item: int
    k_opt: float
    k_opt_text: str
    cells: tuple[FpTableCell, ...]

    def cell(self, k: int) -> Optional[FpTableCell]:
        """The cell for k, or None if the row does not reach it."""
        for cell in self.cells:
            if cell.k == k:
                return cell
        return None


def _row_extent(b: int, ks: Sequence[int], extent: str) -> list[int]:
    rates = {k: _approx_rate(b, k) for k in ks}
    if extent == "first-increase":
        chosen = []
        for k in ks:
            chosen.append(k)
            if k - 1 in rates and rates[k] > rates[k - 1]:
                break
        return chosen
    # "printed": k = 1 .. floor(b ln 2) + 2, without a last column worse than k = 1 (only m/n = 2, 3)
    last = math.floor(b * LN2) + 2
    if 1 in rates and last in rates and rates[last] > rates[1]:
        last -= 1
    return [k for k in ks if k <= last]


def fp_table(bits_per_item: Iterable[int] = range(2, 33), hashes: Iterable[int] = range(1, 25), *,
             extent: str = "printed") -> tuple[FpTableRow, ...]:
    """Tables 3-5 of *Summary Cache* (Fan et al. 2000): the rate ``(1 - e^(-k/b))^k`` per m/n = b and k.

    Cells are computed from the approximate formula (what the paper tabulates) and formatted to 3 significant
    digits the way the paper prints them (``format(x, '.3g')``: 0.08, 0.0918, 7.46e-05); ``k_opt`` is
    ``b ln 2`` printed the same way. Nothing is copied from the printed tables: compare with
    :func:`fp_table_differences`.

    Which k a row shows (``extent``):

    - ``"printed"`` (default): the columns the paper prints, k = 1 .. ``floor(b ln 2) + 2`` (one past the
      better integer neighbour of the optimum), except that a last column worse than k = 1 is left out (this
      only happens for m/n = 2 and 3). This reproduces the 411 printed cells exactly.
    - ``"first-increase"``: k = 1 up to and including the first k whose rate is higher than the one before
      (the rule literature.md states; 16 printed rows run one column further than that).

    :param bits_per_item: the m/n rows (integers >= 1).
    :param hashes: the k columns considered (integers >= 1).
    :param extent: ``"printed"`` or ``"first-increase"``.
    :return: one :class:`FpTableRow` per m/n.

    >>> row = fp_table([10])[0]
    >>> row.k_opt_text, [cell.text for cell in row.cells]
    ('6.93', ['0.0952', '0.0329', '0.0174', '0.0118', '0.00943', '0.00844', '0.00819', '0.00846'])
    """
    if extent not in ("printed", "first-increase"):
        raise ValueError(f"extent must be 'printed' or 'first-increase', got {extent!r}")
    ks = sorted({check_integer("hashes", k, minimum=1) for k in hashes})
    rows = []
    for b in bits_per_item:
        b = check_integer("bits_per_item", b, minimum=1)
        cells = tuple(FpTableCell(k, _approx_rate(b, k), format(_approx_rate(b, k), ".3g"))
                      for k in _row_extent(b, ks, extent))
        rows.append(FpTableRow(b, b * LN2, format(b * LN2, ".3g"), cells))
    return tuple(rows)


@dataclass(frozen=True)
class TableDifference:
    """A printed cell of Tables 3-5 that the formula does not give (or a cell only one side has).

    ``kind`` is ``"value"`` (the printed number differs from the formula rounded to 3 significant digits),
    ``"missing"`` (printed, but not in the computed table) or ``"extra"`` (computed, but not printed).
    ``column`` is ``"k=15"`` or ``"k_opt"``.
    """

    table: int
    bits_per_item: int
    column: str
    printed: Optional[str]
    computed: Optional[float]
    computed_text: Optional[str]
    kind: str

    def __str__(self) -> str:
        where = f"Table {self.table}, m/n = {self.bits_per_item}, {self.column}"
        if self.kind == "value":
            return f"{where}: printed {self.printed}, formula {self.computed_text} ({self.computed:.6g})"
        if self.kind == "missing":
            return f"{where}: printed {self.printed}, not in the computed table"
        return f"{where}: computed {self.computed_text}, not printed"


def _table_of(k: int) -> int:
    return 3 if k <= 8 else 4 if k <= 16 else 5


def fp_table_differences(rows: Optional[Sequence[FpTableRow]] = None) -> tuple[TableDifference, ...]:
    """Compare the computed Tables 3-5 with the printed ones (transcribed in :data:`PRINTED_TABLES`).

    A printed value differs when it is not numerically equal to the formula rounded to 3 significant digits
    (so "0.400" and "0.4" agree, but "0.092" for 0.0918 does not). The known results: Table 3, m/n = 5 prints
    k = 3 as 0.092 (formula 0.0918) and k_opt as 3.46 (5 ln 2 = 3.4657, i.e. 3.47); Table 4, m/n = 30 prints
    k = 15 and 16 as 8.39e-06 and 7.26e-06 (formula 8.39e-07 and 7.26e-07: an exponent typo).

    :param rows: a computed table (default: ``fp_table()``).
    :return: the differences, in table order.

    >>> [str(d) for d in fp_table_differences()][:1]
    ['Table 3, m/n = 5, k_opt: printed 3.46, formula 3.47 (3.46574)']
    """
    rows = fp_table() if rows is None else rows
    printed = printed_cells()
    printed_kopt = printed_k_opt()
    differences = []
    for row in rows:
        b = row.bits_per_item
        if b not in printed:
            continue
        if float(printed_kopt[b]) != float(row.k_opt_text):
            differences.append(TableDifference(_table_of(min(printed[b])), b, "k_opt", printed_kopt[b],
                                               row.k_opt, row.k_opt_text, "value"))
        computed = {cell.k: cell for cell in row.cells}
        for k in sorted(set(printed[b]) | set(computed)):
            text, cell = printed[b].get(k), computed.get(k)
            if cell is None:
                value = _approx_rate(b, k)
                differences.append(TableDifference(_table_of(k), b, f"k={k}", text, value, format(value, ".3g"),
                                                   "missing"))
            elif text is None:
                differences.append(TableDifference(_table_of(k), b, f"k={k}", None, cell.fpr, cell.text, "extra"))
            elif float(text) != float(cell.text):
                differences.append(TableDifference(_table_of(k), b, f"k={k}", text, cell.fpr, cell.text, "value"))
    differences.sort(key=lambda d: (d.table, d.bits_per_item, d.column != "k_opt", d.column))
    return tuple(differences)


def format_fp_tables(rows: Optional[Sequence[FpTableRow]] = None) -> str:
    """Tables 3-5 as text, laid out like the paper (k = 1-8, 9-16, 17-24), from the computed rows."""
    rows = fp_table() if rows is None else rows
    blocks = []
    for table, first in ((3, 1), (4, 9), (5, 17)):
        ks = range(first, first + 8)
        lines = [f"Table {table}: false positive rate under various m/n and k combinations",
                 f"{'m/n':>4} {'k_opt':>6} " + " ".join(f"{'k=' + str(k):>9}" for k in ks)]
        for row in rows:
            cells = [row.cell(k) for k in ks]
            if not any(cells):
                continue
            texts = " ".join(f"{cell.text if cell else '':>9}" for cell in cells)
            lines.append(f"{row.bits_per_item:>4} {row.k_opt_text:>6} {texts}".rstrip())
        if len(lines) > 2:
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


@dataclass(frozen=True)
class Figure4Data:
    """Figure 4 of *Summary Cache*: the rate against bits per entry, for k = 4 and for the best integer k."""

    bits_per_item: tuple[int, ...]
    fpr_four_hashes: tuple[float, ...]
    optimal_hashes: tuple[int, ...]
    fpr_optimal: tuple[float, ...]


def figure4_data(bits_per_item: Iterable[int] = range(1, 33)) -> Figure4Data:
    """The two curves of Figure 4 (Fan et al. 2000): ``(1 - e^(-k/b))^k`` for k = 4 and for the best integer k.

    The best integer k follows the floor-or-ceiling rule of the note *Computation of k* on the same formula (the better of ``floor(b ln 2)`` and
    ``ceil(b ln 2)``, never 0). The paper's text says the optimum at m/n = 10 is 5 hashes with 0.9%; its own
    Table 3 (and this curve) has k = 7 with 0.819% (k = 5 gives 0.943%).

    :param bits_per_item: the x values (integers >= 1).
    :return: a :class:`Figure4Data`.

    >>> data = figure4_data([10])
    >>> data.optimal_hashes, round(data.fpr_four_hashes[0], 4), round(data.fpr_optimal[0], 5)
    ((7,), 0.0118, 0.00819)
    """
    xs = tuple(check_integer("bits_per_item", b, minimum=1) for b in bits_per_item)
    best = tuple(best_of_floor_ceil(b * LN2, lambda k, b=b: _approx_rate(b, k)) for b in xs)
    return Figure4Data(
        bits_per_item=xs,
        fpr_four_hashes=tuple(_approx_rate(b, 4) for b in xs),
        optimal_hashes=best,
        fpr_optimal=tuple(_approx_rate(b, k) for b, k in zip(xs, best)),
    )
