"""Input checks shared by the paradox modules (private).

Every check names the parameter and shows the value: ``ValueError`` for a value out of range, ``TypeError`` for a
value of the wrong kind.
"""
from __future__ import annotations

import math
import numbers

import numpy as np


def real(name: str, value) -> float:
    """``value`` as a float; bools and non-numbers are rejected."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must not be NaN, got {value!r}")
    return value


def probability(name: str, value) -> float:
    """A probability in [0, 1]."""
    value = real(name, value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return value


def positive(name: str, value) -> float:
    """A finite number > 0."""
    value = real(name, value)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def integer(name: str, value, minimum: int = 0) -> int:
    """An integer >= ``minimum`` (numpy integers accepted, bools and floats rejected)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def probability_array(name: str, values) -> np.ndarray:
    """A float64 array of probabilities in [0, 1] (any shape)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size and not np.all((arr >= 0.0) & (arr <= 1.0)):  # NaN fails both comparisons
        bad = arr[~((arr >= 0.0) & (arr <= 1.0))].ravel()[0]
        raise ValueError(f"{name} must hold probabilities in [0, 1], got {bad!r}")
    return arr


def counter_array(name: str, values) -> np.ndarray:
    """A non-empty int64 array of non-negative integer counters, shape (k,) or (N, k)."""
    arr = np.asarray(values)
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise ValueError(f"{name} must have shape (k,) or (N, k) with k >= 1, got shape {arr.shape}")
    if arr.dtype == object or arr.dtype.kind not in "iub":
        if arr.dtype.kind == "f" and arr.size and np.all(np.isfinite(arr)) and np.all(arr == np.floor(arr)):
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"{name} must hold integers, got {values!r}")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be >= 0, got {int(arr.min())}")
    return arr


def choice(name: str, value, allowed) -> str:
    """One of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value
