"""The costs of the two errors, and the cost-optimal decision they imply.

Source: Rottenstreich and Keslassy, *The Bloom Paradox: When Not to Use a Bloom Filter* (INFOCOM 2012; ToN 2015),
section III (Table I) and Theorem 4.

A wrong "present" costs ``W_FP`` (e.g. a useless trip to the cache), a wrong "absent" costs ``W_FN`` (e.g. a trip to
the slow store that the cache could have saved); correct answers cost 0 (the paper reduces any cost table to this
one by subtracting the costs of the correct answers). Only the ratio ``alpha = W_FN / W_FP`` matters to decisions.
"""
from __future__ import annotations

from dataclasses import dataclass

from bloomwise._checks import check_closed_probability, check_positive_real

__all__ = ["CostModel"]


@dataclass(frozen=True)
class CostModel:
    """Costs of a false positive and of a false negative (Table I of the paper).

    :param false_positive: ``W_FP > 0``, the cost of answering "present" for an absent key.
    :param false_negative: ``W_FN > 0``, the cost of answering "absent" for a present key.

    >>> cost = CostModel(false_positive=1.0, false_negative=5.0)
    >>> cost.alpha, cost.decision_threshold
    (5.0, 0.16666666666666666)
    >>> cost.decide(0.2), cost.decide(0.1)
    (True, False)
    """

    false_positive: float = 1.0
    false_negative: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "false_positive", check_positive_real("false_positive", self.false_positive))
        object.__setattr__(self, "false_negative", check_positive_real("false_negative", self.false_negative))

    @classmethod
    def from_alpha(cls, alpha: float) -> "CostModel":
        """``CostModel(1, alpha)``: a false negative costs ``alpha`` false positives."""
        return cls(1.0, check_positive_real("alpha", alpha))

    @property
    def alpha(self) -> float:
        """``alpha = W_FN / W_FP``: how many false positives one false negative is worth."""
        return self.false_negative / self.false_positive

    @property
    def decision_threshold(self) -> float:
        """Theorem 4: answer "present" iff ``Pr(x in S | evidence) >= 1 / (alpha + 1)``."""
        return self.false_positive / (self.false_positive + self.false_negative)

    def decide(self, posterior: float) -> bool:
        """The cost-optimal answer for a key whose membership probability is ``posterior`` (Theorem 4).

        "Present" costs ``(1 - posterior) W_FP`` on average and "absent" costs ``posterior W_FN``; at a tie the two are
        equally good and the answer is "present" (no false negative for free).
        """
        return bool(self._present(check_closed_probability("posterior", posterior)))

    def _present(self, posterior):
        """Theorem 4, the one place it is computed (numbers or numpy arrays): "present" iff its expected cost
        ``(1 - posterior) W_FP`` is at most that of "absent", ``posterior W_FN``."""
        return posterior * self.false_negative >= (1.0 - posterior) * self.false_positive

    def decide_many(self, posteriors, trust_evidence=None):
        """Vectorised ``decide`` and ``expected_cost``: (members, expected costs) for a numpy array of posteriors.

        ``trust_evidence``: a bool array of answers to give instead of the cost-optimal ones (a selective filter
        that does not decide at query time answers with the filter); the costs are those of the answers given.
        """
        import numpy as np
        member = self._present(posteriors) if trust_evidence is None else trust_evidence.copy()
        expected = np.where(member, (1.0 - posteriors) * self.false_positive, posteriors * self.false_negative)
        return member, expected

    def expected_cost(self, posterior: float, member: bool) -> float:
        """Expected cost of answering ``member`` for a key whose membership probability is ``posterior``."""
        posterior = check_closed_probability("posterior", posterior)
        return (1.0 - posterior) * self.false_positive if member else posterior * self.false_negative
