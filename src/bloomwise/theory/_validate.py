"""The theory's argument validators and the layouts' geometry constants.

Every public function of :mod:`bloomwise.theory` checks its arguments with these, so that each error names the
parameter, its value and what was expected.
"""
from __future__ import annotations

import math
import operator

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


# ---------------------------------------------------------------------------------------------------------
# Input validation: every public function names the parameter and its value.
# ---------------------------------------------------------------------------------------------------------
def check_integer(name: str, value, minimum: int = 0) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got the bool {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})") from None
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def check_real(name: str, value, minimum: float = 0.0) -> float:
    """A finite real number >= minimum (ints stay exact: they are converted to float only here)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got the bool {value!r}")
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a number, got the string {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})") from None
    if math.isnan(number) or math.isinf(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {value!r}")
    return number


def check_count(name: str, value) -> float:
    """A number of items: a non-negative int (kept exact), or a non-negative finite real (an expected count)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number of items, got the bool {value!r}")
    try:
        operator.index(value)
    except TypeError:
        return check_real(name, value)
    return check_integer(name, value)


def check_probability(name: str, value) -> float:
    number = check_real(name, value, minimum=-math.inf)
    if not 0.0 < number < 1.0:
        raise ValueError(f"{name} must be a probability strictly between 0 and 1, got {value!r}")
    return number


def check_layout(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"layout must be one of {', '.join(LAYOUTS)}; got {value!r} ({type(value).__name__})")
    if value not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}; got {value!r}")
    return value


def check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
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


def check_positive_int(name: str, value) -> int:
    """An int >= 1 (not a bool, not a float), else TypeError/ValueError naming the parameter and its value."""
    if isinstance(value, bool) or not hasattr(value, "__index__") or isinstance(value, float):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    value = value.__index__()
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


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
