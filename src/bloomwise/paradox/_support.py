"""Argument coercion shared by the selective filters (private)."""
from __future__ import annotations

import numbers
from collections.abc import Mapping

import numpy as np

import bloomwise
from bloomwise._checks import check_integer
from bloomwise.paradox.costs import CostModel
from bloomwise.paradox.priors import ConstantPrior, Prior


def as_prior(prior) -> Prior:
    """A Prior, or a number meaning ConstantPrior(number)."""
    if isinstance(prior, Prior):
        return prior
    if isinstance(prior, numbers.Real) and not isinstance(prior, bool):
        return ConstantPrior(prior)
    raise TypeError(f"prior must be a Prior (ConstantPrior, ClassPrior, CallablePrior, SampledPrior) or a number, "
                    f"got {prior!r}")


def as_cost(cost) -> CostModel:
    """A CostModel, or a number meaning CostModel.from_alpha(number)."""
    if isinstance(cost, CostModel):
        return cost
    if isinstance(cost, numbers.Real) and not isinstance(cost, bool):
        return CostModel.from_alpha(cost)
    raise TypeError(f"cost must be a CostModel or a number alpha = W_FN / W_FP, got {cost!r}")


def make_filter(filter_or_params, class_name: str, required: tuple[str, ...]):
    """An existing filter (duck-typed by ``required`` attributes and ``num_cells``), or a new
    ``bloomwise.<class_name>`` built from a mapping of keyword arguments: ``from_size(**params)`` if it names
    ``num_cells``, else ``cls(**params)``."""
    if isinstance(filter_or_params, Mapping):
        cls = getattr(bloomwise, class_name)
        params = dict(filter_or_params)
        if "num_cells" in params:
            return cls.from_size(**params)
        return cls(**params)
    missing = [name for name in required if not hasattr(filter_or_params, name)]
    if not hasattr(filter_or_params, "num_cells"):
        missing.append("num_cells")
    if missing:
        raise TypeError(f"filter_or_params must be a {class_name} or a mapping of its parameters, got "
                        f"{filter_or_params!r} (it has no {', '.join(missing)})")
    return filter_or_params


def num_cells(f) -> int:
    """A filter's size m, ``num_cells``."""
    return int(f.num_cells)


def keys_list(keys):
    """Keys as an indexable sequence, each key kept as it is (a list of bytes is not turned into a numpy S array,
    which would strip trailing NUL bytes)."""
    return keys if isinstance(keys, (np.ndarray, list, tuple)) else list(keys)


def take(keys, mask: np.ndarray):
    """The keys where ``mask`` is True, in the container kind they came in."""
    if isinstance(keys, np.ndarray):
        return keys[mask]
    return [key for key, keep in zip(keys, mask.tolist()) if keep]


def flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def num_items(value) -> int:
    return check_integer("num_items", value, 0)
