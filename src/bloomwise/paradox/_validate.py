"""The checks of numpy arrays the paradox modules share (private); the scalar checks are :mod:`bloomwise._checks`.

Every check names the parameter and shows the value: ``ValueError`` for a value out of range, ``TypeError`` for a
value of the wrong kind.
"""
from __future__ import annotations

import numpy as np


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
