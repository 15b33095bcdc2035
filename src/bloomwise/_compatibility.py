"""Which filters combine (union, intersection, equality): the same for every structure.

A structure mixes in ``Compatible``, defines ``_parameters()`` (everything that decides where a key's bits or
counters are) and sets ``_FAMILY``, the class whose instances may combine with it.
"""
from __future__ import annotations

import operator


def parameter_differences(mine: dict, theirs: dict) -> str:
    """"name: mine vs theirs" for every parameter that differs."""
    return ", ".join(f"{k}: {mine[k]!r} vs {theirs.get(k)!r}" for k in mine if mine[k] != theirs.get(k))


class Compatible:
    """``is_compatible(other)`` and the check that set operations make first."""

    __slots__ = ()
    _FAMILY: type

    def _parameters(self) -> dict:
        """Everything that decides where a key's bits or counters are (the structure defines it)."""
        raise NotImplementedError

    def is_compatible(self, other) -> bool:
        """True when ``other`` places keys exactly as this filter does (same type and ``_parameters()``)."""
        return isinstance(other, self._FAMILY) and self._parameters() == other._parameters()

    def _check_compatible(self, other, operation: str) -> None:
        """TypeError for another kind of object, ValueError naming every parameter that differs."""
        if not isinstance(other, self._FAMILY):
            raise TypeError(f"cannot {operation} a {type(self).__name__} with {type(other).__name__}")
        mine, theirs = self._parameters(), other._parameters()
        if mine != theirs:
            raise ValueError(f"cannot {operation} incompatible filters ({parameter_differences(mine, theirs)})")

    def __or__(self, other):
        """``a | b``: a new filter, a copy of ``a`` with ``b`` merged in (``|=``)."""
        return self._combined(other, operator.ior)

    def _combined(self, other, in_place):
        """A copy of this filter with ``in_place(copy, other)`` applied; NotImplemented for another kind of object
        (so that Python raises its usual TypeError)."""
        if not isinstance(other, self._FAMILY):
            return NotImplemented
        return in_place(self.copy(), other)
