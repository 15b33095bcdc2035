"""The contract every structure follows: one vocabulary, one layout table, one set of argument checks.

``BloomFilter``, ``CountingBloomFilter``, ``VariableIncrementCountingBloomFilter``, ``ScalableBloomFilter``,
``GeneralizedBloomFilter`` and ``RetouchedBloomFilter`` (and the selective wrappers of ``bloomwise.paradox`` where an
operation makes sense) all have, except where the table of docs/architecture.md says why not:

- ``Cls(capacity, fpr, *, layout=..., seed=0, key=None, hash_scheme="xxh3")`` by accuracy and
  ``Cls.from_size(num_cells, num_hashes, *, ...)`` by size (not Scalable), with one default layout per class;
- ``num_cells`` (m: bits, counters or positions), ``num_hashes``, ``num_keys`` (keys added, repeats included;
  the counting filters subtract removals), ``capacity`` (None when built by size), ``fpr`` (the target rate given
  at construction; None when built by size), ``estimated_fpr()`` (the rate now), ``layout``, ``seed``,
  ``hash_scheme``, ``nbytes``;
- ``add(key)``, ``key in f``, ``update(keys, *, threads=None) -> None``, ``contains_many(keys, *, threads=None)``;
- ``copy()``, ``is_compatible(other)``, ``==``, and where meaningful ``|``, ``&``, ``union``, ``intersection``,
  with the errors of :class:`bloomwise._compatibility.Compatible`;
- ``to_bytes``/``from_bytes``/``save``/``load``, pickling, and ``open()`` (memory-mapped) except on Scalable.

docs/architecture.md has the table; CHANGELOG.md lists the names of earlier releases that were removed.
"""
from __future__ import annotations

import warnings
from bloomwise.errors import CapacityWarning
from bloomwise.theory import _validate
from bloomwise._checks import check_positive_int
from bloomwise.theory._validate import MAX_NUM_CELLS

__all__ = [
    "LAYOUTS", "LAYOUT_NAMES", "COUNTING_LAYOUTS", "layout_id", "check_capacity", "check_target_fpr",
    "check_threads", "size_arguments", "warn_over_capacity",
]

#: layout name -> id: the library's one layout table (``bloomwise.theory._validate.LAYOUT_IDS``; the file format's
#: ids, append-only).
LAYOUTS = dict(_validate.LAYOUT_IDS)
#: layout id -> name
LAYOUT_NAMES = {number: name for name, number in LAYOUTS.items()}
#: the layouts of the counting structures, name -> id: k free positions (a blocked counting filter does not exist).
COUNTING_LAYOUTS = {name: LAYOUTS[name] for name in _validate.COUNTING_LAYOUTS}


def layout_id(layout, allowed: dict = LAYOUTS) -> int:
    """The file-format id of a layout name; ValueError listing the allowed names otherwise."""
    if not isinstance(layout, str) or layout not in allowed:
        extra = " (the blocked layout has no counting variant)" if layout == "blocked" else ""
        raise ValueError(f"layout must be one of {', '.join(map(repr, allowed))}, got {layout!r}{extra}")
    return allowed[layout]


def check_capacity(capacity) -> int:
    """``capacity``: an int >= 1, else TypeError/ValueError naming the parameter and its value."""
    return check_positive_int("capacity", capacity)


def check_target_fpr(fpr) -> float:
    """The target false-positive rate: a number strictly between 0 and 1."""
    if isinstance(fpr, bool) or not isinstance(fpr, (int, float)) and not hasattr(fpr, "__float__"):
        raise TypeError(f"fpr must be a number, got {type(fpr).__name__} ({fpr!r})")
    value = float(fpr)
    if not 0.0 < value < 1.0:
        raise ValueError(f"fpr must be a probability strictly between 0 and 1, got {fpr!r}")
    return value


def check_threads(threads) -> int:
    """``threads=None`` (one thread) or an int >= 1, the same check on every structure."""
    if threads is None:
        return 1
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    return min(threads, 64)


def warn_over_capacity(structure, capacity: int, stored: int, fpr_now: float) -> None:
    """The CapacityWarning of the counting structures, given once when they hold more keys than sized for."""
    warnings.warn(
        f"{type(structure).__name__} sized for {capacity:,} keys now holds {stored:,} (each occurrence counts): its "
        f"false-positive rate is now about {fpr_now:.3g}. Build a larger filter.", CapacityWarning, stacklevel=3)


def size_arguments(num_cells, num_hashes, structure: str) -> int:
    """``from_size``'s size, checked: TypeError when a size is missing, ValueError beyond the largest structure."""
    if num_cells is None or num_hashes is None:
        raise TypeError(f"{structure}.from_size() needs num_cells and num_hashes, e.g. from_size(4096, 7)")
    num_cells = check_positive_int("num_cells", num_cells)
    if num_cells > MAX_NUM_CELLS:
        raise ValueError(f"num_cells must be at most 2^48 ({MAX_NUM_CELLS:,}), got {num_cells:,}")
    return num_cells
