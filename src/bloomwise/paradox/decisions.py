"""The answer of a selective filter: what to do, how sure, and what the filter itself said."""
from __future__ import annotations

from dataclasses import FrozenInstanceError
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


class Decisions:
    """The decisions for a batch of keys, as parallel read-only numpy arrays (``decisions[i]`` is the
    :class:`Decision` of key i).

    :ivar member: bool array, the answers to act on.
    :ivar posterior: float64 array, ``Pr(key in S)`` given everything known.
    :ivar filter_answer: bool array, the plain filter's answer where it was consulted (False elsewhere).
    :ivar consulted: bool array, whether the filter was consulted.
    :ivar expected_cost: float64 array, the expected cost of each answer.

    ``SelectiveBloomFilter.query_many`` computes ``posterior`` and ``expected_cost`` when one of them is first read,
    from what the batch saw (priors, answers, and the filter's FPR and costs at the time of the query): the same
    numbers as computing them at once, and a batch whose caller acts on ``member`` alone writes 3 bytes a key
    instead of 19. The arrays are read-only so that what the later computation reads cannot change; copy one to
    modify it.
    """

    __slots__ = ("member", "filter_answer", "consulted", "_posterior", "_expected_cost", "_columns")

    def __init__(self, member, posterior, filter_answer, consulted, expected_cost):
        self._set(member, filter_answer, consulted, _read_only(posterior), _read_only(expected_cost), None)

    @classmethod
    def deferred(cls, member, filter_answer, consulted, columns) -> Decisions:
        """Decisions whose posterior and expected-cost arrays ``columns.arrays()`` returns, called on first read."""
        decisions = cls.__new__(cls)
        decisions._set(member, filter_answer, consulted, None, None, columns)
        return decisions

    def _set(self, member, filter_answer, consulted, posterior, expected_cost, columns) -> None:
        for name, value in (("member", _read_only(member)), ("filter_answer", _read_only(filter_answer)),
                            ("consulted", _read_only(consulted)), ("_posterior", posterior),
                            ("_expected_cost", expected_cost), ("_columns", columns)):
            object.__setattr__(self, name, value)

    @property
    def posterior(self) -> np.ndarray:
        if self._posterior is None:
            self._compute()
        return self._posterior

    @property
    def expected_cost(self) -> np.ndarray:
        if self._expected_cost is None:
            self._compute()
        return self._expected_cost

    def _compute(self) -> None:
        posterior, expected_cost = self._columns.arrays()  # the same arrays for every caller, whichever thread
        object.__setattr__(self, "_posterior", _read_only(posterior))
        object.__setattr__(self, "_expected_cost", _read_only(expected_cost))

    def __setattr__(self, name, value):
        raise FrozenInstanceError(f"cannot assign to field {name!r}: Decisions are read-only")

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}: Decisions are read-only")

    def __reduce__(self):
        return (Decisions, (self.member, self.posterior, self.filter_answer, self.consulted, self.expected_cost))

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


def _read_only(array) -> np.ndarray:
    """A read-only view of ``array`` (the caller's own array keeps its flags)."""
    view = np.asarray(array).view()
    view.flags.writeable = False
    return view
