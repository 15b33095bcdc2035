"""Loading a saved structure whose class is not known in advance: the file's header names it.

>>> import bloomwise, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "counts.bw")
>>> counts = bloomwise.CountingBloomFilter(1000); counts.add("apple"); counts.save(path)
True
>>> f = bloomwise.load(path)
>>> type(f).__name__, "apple" in f
('CountingBloomFilter', True)
"""
from __future__ import annotations

import importlib
import os

from bloomwise import _format
from bloomwise.errors import FormatError

__all__ = ["load", "structure_of", "filter_class", "public_class"]

# structure id -> (module, class); the id itself is part of the format (_format.Structure)
_CLASSES = {
    _format.Structure.BLOOM: ("bloomwise.bloom", "BloomFilter"),
    _format.Structure.COUNTING: ("bloomwise.counting", "CountingBloomFilter"),
    _format.Structure.VARIABLE_INCREMENT: ("bloomwise.vicbf", "VariableIncrementCountingBloomFilter"),
    _format.Structure.SCALABLE: ("bloomwise.scalable", "ScalableBloomFilter"),
    _format.Structure.GENERALIZED: ("bloomwise.generalized", "GeneralizedBloomFilter"),
    _format.Structure.RETOUCHED: ("bloomwise.retouched", "RetouchedBloomFilter"),
}
_STRUCTURE_OFFSET = 10  # magic (8 bytes), format version (2), then the structure id (1): docs/format.md


def structure_of(path) -> _format.Structure:
    """The structure a bloomwise file holds, read from its header.

    Only the structure id is read here; the class's own ``load`` checks the whole file (header checksum, sizes,
    payload checksum) before anything else of it is used.

    :raises FormatError: if the file is not a bloomwise file, or names a structure this version does not know.
    """
    with open(path, "rb") as file:
        start = file.read(_format.HEADER_SIZE)
    if not start.startswith(_format.MAGIC) or len(start) < _format.HEADER_SIZE:
        # not ours, or truncated: the full reader gives the precise reason
        _format.loads(start, verify=False)
        raise FormatError(f"{os.fspath(path)}: not a bloomwise file")  # pragma: no cover - loads raised
    structure_id = start[_STRUCTURE_OFFSET]
    try:
        return _format.Structure(structure_id)
    except ValueError:
        known = ", ".join(f"{s.value} ({s.name.lower()})" for s in _format.Structure)
        raise FormatError(f"{os.fspath(path)}: unknown structure id {structure_id} (this bloomwise reads {known}); "
                          "upgrade bloomwise, or the file is corrupted") from None


def filter_class(structure: _format.Structure, path="the file") -> type:
    """The class that loads ``structure``; FormatError for a structure that is not a filter."""
    if structure not in _CLASSES:
        raise FormatError(f"{os.fspath(path)} holds a cache summary update (structure id {structure.value}), not a "
                          "filter: read it with bloomwise.cache.summary.SummaryUpdate.from_bytes()")
    module, name = _CLASSES[structure]
    return getattr(importlib.import_module(module), name)


def public_class(structure) -> type:
    """The class a user knows of a filter (a memory-mapped filter is an instance of a private subclass of it).

    >>> import bloomwise
    >>> public_class(bloomwise.BloomFilter(100)).__name__
    'BloomFilter'
    """
    for cls in type(structure).__mro__:
        if (cls.__module__, cls.__qualname__) in _CLASSES.values():
            return cls
    raise TypeError(f"{type(structure).__name__} is not one of bloomwise's filters "
                    f"({', '.join(name for _, name in _CLASSES.values())})")


def load(path, *, key=None, verify=True, mmap=False):
    """Load any filter saved by bloomwise, of whichever class the file says (``BloomFilter``, ``CountingBloomFilter``,
    ``ScalableBloomFilter``, ...).

    :param key: the key function the filter was built with, if any (it cannot be saved).
    :param verify: ``False`` skips the payload checksum (unsafe: only to rescue a damaged file).
    :param mmap: open the file read-only as a shared memory map instead of reading it (the classes that have
        ``open()``: Bloom, counting and variable-increment filters; the others are read).
    :raises FormatError: when the file fails any check, or holds something that is not a filter.
    """
    cls = filter_class(structure_of(path), path)
    if mmap and hasattr(cls, "open"):
        return cls.open(path, key=key, verify=verify)
    return cls.load(path, key=key, verify=verify)
