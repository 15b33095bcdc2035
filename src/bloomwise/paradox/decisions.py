"""The answer of a selective filter: what to do, how sure, and what the filter itself said."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = ["Decision", "Decisions"]


class Decision(NamedTuple):
    """The cost-optimal answer for one key.

    :ivar member: the answer to act on: True means "treat the key as present" (e.g. go to the cache).
    :ivar posterior: ``Pr(key in S)`` given everything known (the prior, and the filter's answer if it was asked).
    :ivar filter_answer: what the plain filter said ("might be present"), or None when it was not consulted.
    :ivar expected_cost: the expected cost of ``member``: ``(1 - posterior) W_FP`` if True, ``posterior W_FN`` if False.
    """

    member: bool
    posterior: float
    filter_answer: bool | None
    expected_cost: float


@dataclass(frozen=True, eq=False)
class Decisions:
    """The decisions for a batch of keys, as parallel numpy arrays (``decisions[i]`` is the :class:`Decision` of key i).

    :ivar member: bool array, the answers to act on.
    :ivar posterior: float64 array, ``Pr(key in S)`` given everything known.
    :ivar filter_answer: bool array, the plain filter's answer where it was consulted (False elsewhere).
    :ivar consulted: bool array, whether the filter was consulted.
    :ivar expected_cost: float64 array, the expected cost of each answer.
    """

    member: np.ndarray
    posterior: np.ndarray
    filter_answer: np.ndarray
    consulted: np.ndarray
    expected_cost: np.ndarray

    def __len__(self) -> int:
        return len(self.member)

    def __getitem__(self, i: int) -> Decision:
        return Decision(
            bool(self.member[i]),
            float(self.posterior[i]),
            bool(self.filter_answer[i]) if self.consulted[i] else None,
            float(self.expected_cost[i]),
        )

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return (f"<Decisions of {len(self)} keys: {int(self.member.sum())} present, "
                f"{int(self.consulted.sum())} consulted the filter>")
