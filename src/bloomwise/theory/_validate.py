"""The one layout table, the layouts' geometry constants and the checks that need them.

The checks of plain values (integers, reals, probabilities) are :mod:`bloomwise._checks`, the family every floor
uses; these add what only a layout knows: a valid (m, k) and the largest filter of each layout.
"""
from __future__ import annotations

import math

from bloomwise._checks import check_integer

#: The one layout table of the library: layout name -> id (docs/architecture.md). The ids are the file format's
#: (``bloomwise._format.Layout`` is built from this table): append-only, an id once released names the same layout
#: forever.
LAYOUT_IDS = {"classic": 1, "partitioned": 2, "blocked": 3}
#: The bit layouts bloomwise implements.
LAYOUTS = tuple(LAYOUT_IDS)
#: Size of one block of the blocked (split block) layout: eight 64-bit lanes.
BLOCK_BITS = 512
#: The blocked layout puts at most two probes in each of its eight lanes.
MAX_BLOCKED_HASHES = 16

#: The largest structure bloomwise builds: 2^48 bits, counters or positions (32 TiB of bits; the compiled core's
#: limit). The blocked layout's block index takes 32 bits: at most 2^32 blocks, 2^41 bits.
MAX_NUM_CELLS = 2 ** 48
MAX_BLOCKED_NUM_BITS = 2 ** 32 * 512

LANES = 8
LANE_BITS = 64
LN2 = math.log(2.0)


def check_layout(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"layout must be one of {', '.join(LAYOUTS)}; got {value!r} ({type(value).__name__})")
    if value not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}; got {value!r}")
    return value


def check_geometry(layout: str, num_bits, num_hashes) -> tuple[int, int]:
    """Validate (m, k) for a layout: m >= 1, k >= 1; partitioned k <= m; blocked m % 512 == 0, k <= 16."""
    m = check_integer("num_bits", num_bits, minimum=1)
    k = check_integer("num_hashes", num_hashes, minimum=1)
    if layout == "partitioned" and k > m:
        raise ValueError(f"num_hashes must be <= num_bits for the partitioned layout (one slice of at least "
                         f"one bit per hash); got num_hashes={k}, num_bits={m}")
    if layout == "blocked":
        num_blocks_of(m)
        if k > MAX_BLOCKED_HASHES:
            raise ValueError(f"num_hashes must be between 1 and {MAX_BLOCKED_HASHES} for the blocked layout "
                             f"(at most two probes per 64-bit lane); got {k}")
    return m, k


def num_blocks_of(m: int) -> int:
    if m % BLOCK_BITS:
        raise ValueError(f"num_bits must be a multiple of {BLOCK_BITS} for the blocked layout (512-bit blocks); "
                         f"got {m} (the next multiple is {round_up(m, BLOCK_BITS)})")
    return m // BLOCK_BITS


def round_up(value: int, step: int) -> int:
    return -(-value // step) * step


#: The layouts of the counting structures (a blocked layout would need 512 counters per block).
COUNTING_LAYOUTS = tuple(name for name in LAYOUTS if name != "blocked")


def check_reachable(n: float, p: float, layout: str, name: str = "num_items", bits_per_cell: int = 1) -> None:
    """ValueError naming ``name`` when n keys at rate p need more than the largest filter bloomwise builds.

    The test is the information limit, ``m >= n log2(1/p)`` bits for any structure with false-positive rate p
    (Carter, Floyd, Gill, Markowsky, Wegman, *Exact and Approximate Membership Testers*): a lower bound, so it
    never rejects a size that fits, and it takes microseconds however large n is. A structure whose cells hold
    ``bits_per_cell`` bits (counters, positions) needs at least ``n log2(1/p) / bits_per_cell`` of them.
    """
    limit = MAX_BLOCKED_NUM_BITS if layout == "blocked" else MAX_NUM_CELLS
    if n < 1e300 and float(n) * math.log2(1.0 / p) / bits_per_cell <= limit:
        return
    shown = f"{float(n):.4g}" if n < 1e300 else f"about 10^{len(str(int(n))) - 1}"
    raise ValueError(f"{name}={shown} at a false-positive rate of {p:g} needs more than 2^{limit.bit_length() - 1} "
                     f"cells, the largest {layout} filter: lower {name} or raise the rate")


def check_num_cells(name: str, m: int, layout: str) -> int:
    """ValueError naming ``name`` when a size ``m`` exceeds the largest filter of the layout."""
    limit = MAX_BLOCKED_NUM_BITS if layout == "blocked" else MAX_NUM_CELLS
    if m > limit:
        shown = f"{m:,}" if m < 10 ** 30 else f"about 10^{len(str(m)) - 1}"
        raise ValueError(f"{name} must be at most 2^{limit.bit_length() - 1} for the {layout} layout, got {shown}")
    return m
