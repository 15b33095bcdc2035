"""A-priori membership probabilities: ``Pr(x in S)`` before any filter is asked.

Source: Rottenstreich and Keslassy, *The Bloom Paradox*, sections III and IV.D. The paradox is about these numbers:
a filter's positive answer is only as good as the prior it updates. A prior can be one number for every key
(:class:`ConstantPrior`), one number per class of keys (:class:`ClassPrior`: the paper's example is IP address
classes A, B and C), any function (:class:`CallablePrior`), or an estimate learnt online by checking the true
membership of a small sample of the queries (:class:`SampledPrior`, section IV.D).

Every prior answers ``prior.probability(key)`` (also ``prior(key)``) and ``prior.probabilities(keys)`` (a float64
array). The selective filters call ``prior.observe(key)`` / ``prior.observe_many(keys)`` once per query: only
:class:`SampledPrior` does something with it.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import numpy as np

from bloomwise._checks import check_closed_probability, check_real_number
from bloomwise.paradox import _validate

__all__ = ["Prior", "ConstantPrior", "ClassPrior", "CallablePrior", "SampledPrior"]


def _keys_list(keys):
    """Keys as something with len() and iteration that keeps each key as it is (no numpy bytes conversion)."""
    return keys if isinstance(keys, (np.ndarray, list, tuple)) else list(keys)


class Prior:
    """Base class: the a-priori membership probability of each key. Subclasses implement :meth:`probability`."""

    def probability(self, key) -> float:
        """``Pr(key in S)`` before any filter is asked."""
        raise NotImplementedError

    def probabilities(self, keys) -> np.ndarray:
        """One prior per key, as a float64 array (subclasses vectorise this where they can)."""
        keys = _keys_list(keys)
        return np.fromiter((self.probability(k) for k in keys), dtype=np.float64, count=len(keys))

    def observe(self, key) -> None:
        """Called by the selective filters once per query of ``key``; a no-op except for :class:`SampledPrior`."""

    def observe_many(self, keys) -> None:
        """:meth:`observe` for a batch of queries."""
        if type(self).observe is Prior.observe:  # nothing to observe: skip the loop
            return
        for key in _keys_list(keys):
            self.observe(key)

    def __call__(self, key) -> float:
        return self.probability(key)


class ConstantPrior(Prior):
    """The same prior for every key: e.g. ``|S| / |U|`` when queries are uniform over a universe U.

    :param p: ``Pr(x in S)`` in [0, 1].

    >>> ConstantPrior(1e-6)("any key")
    1e-06
    """

    def __init__(self, p: float):
        self.p = check_closed_probability("p", p)

    def probability(self, key) -> float:
        return self.p

    def probabilities(self, keys) -> np.ndarray:
        return np.full(len(_keys_list(keys)), self.p)

    def __repr__(self) -> str:
        return f"ConstantPrior({self.p!r})"


class ClassPrior(Prior):
    """One prior per class of keys (section IV.D: "packets originating from Class-A IP addresses might have distinct a
    priori probabilities from those with classes B and C").

    :param classify: ``key -> class label`` (any hashable). With ``vectorized=True`` it takes an array of keys and
        returns an array of labels.
    :param probabilities: ``{label: Pr(x in S)}``.
    :param default: the prior for labels missing from ``probabilities``; None (the default) makes them a KeyError.
    :param vectorized: whether ``classify`` works on whole numpy arrays.

    >>> by_host = ClassPrior(lambda url: url.split("/")[2], {"a.example": 0.3, "b.example": 1e-5}, default=1e-4)
    >>> by_host("https://a.example/x"), by_host("https://c.example/y")
    (0.3, 0.0001)
    """

    def __init__(self, classify: Callable, probabilities: Mapping[Hashable, float], *, default: float | None = None,
                 vectorized: bool = False):
        if not callable(classify):
            raise TypeError(f"classify must be callable, got {classify!r}")
        if not isinstance(probabilities, Mapping):
            raise TypeError(f"probabilities must be a mapping from class label to probability, got {probabilities!r}")
        self.classify = classify
        self.table = {label: check_closed_probability(f"probabilities[{label!r}]", p)
                      for label, p in probabilities.items()}
        self.default = None if default is None else check_closed_probability("default", default)
        self.vectorized = bool(vectorized)

    def label_probability(self, label, key) -> float:
        """The prior of a class ``label`` (of ``key``, named in the error): its table value, else the default, else
        KeyError."""
        try:
            return self.table[label]
        except (KeyError, TypeError):
            if self.default is None:
                raise KeyError(f"no prior for class {label!r} (of key {key!r}); give it one or pass default=") from None
            return self.default

    def probability(self, key) -> float:
        label = self.classify(np.asarray([key]))[0] if self.vectorized else self.classify(key)
        if isinstance(label, np.generic):
            label = label.item()
        return self.label_probability(label, key)

    def probabilities(self, keys) -> np.ndarray:
        keys = _keys_list(keys)
        if not self.vectorized:
            return np.fromiter((self.label_probability(self.classify(k), k) for k in keys), dtype=np.float64, count=len(keys))
        labels = np.asarray(self.classify(keys if isinstance(keys, np.ndarray) else np.asarray(keys)))
        if labels.shape != (len(keys),):
            raise ValueError(f"classify returned shape {labels.shape} for {len(keys)} keys")
        if labels.dtype == object:
            return np.fromiter((self.label_probability(l, k) for l, k in zip(labels, keys)), dtype=np.float64,
                               count=len(keys))
        uniq, inverse = np.unique(labels, return_inverse=True)
        values = np.array([self.label_probability(u.item(), "<one of the keys>") for u in uniq], dtype=np.float64)
        return values[inverse.reshape(-1)] if len(keys) else np.zeros(0)

    def __repr__(self) -> str:
        return f"ClassPrior({self.classify!r}, {self.table!r}, default={self.default!r})"


class CallablePrior(Prior):
    """Any function ``key -> Pr(key in S)`` (e.g. a model of the cache's hit rate, section IV.D).

    :param fn: the function; its results are checked to be probabilities.
    :param vectorized: ``fn`` takes an array of keys and returns an array of probabilities.

    >>> CallablePrior(lambda key: 0.5 if key.startswith("hot:") else 0.001)("hot:index.html")
    0.5
    """

    def __init__(self, fn: Callable, *, vectorized: bool = False):
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        self.fn = fn
        self.vectorized = bool(vectorized)

    def probability(self, key) -> float:
        if self.vectorized:
            return float(self.probabilities(np.asarray([key]))[0])
        return check_closed_probability("prior returned by fn", self.fn(key))

    def probabilities(self, keys) -> np.ndarray:
        keys = _keys_list(keys)
        if not self.vectorized:
            return super().probabilities(keys)
        out = _validate.probability_array("priors returned by fn", self.fn(keys))
        if out.shape != (len(keys),):
            raise ValueError(f"fn returned shape {out.shape} for {len(keys)} keys")
        return out

    def __repr__(self) -> str:
        return f"CallablePrior({self.fn!r}, vectorized={self.vectorized})"


class SampledPrior(Prior):
    """A prior learnt from the queries themselves (section IV.D).

    A fraction ``rate`` of the queries (1% by default, as in the paper) is checked against the truth through
    ``oracle(key) -> bool`` (e.g. a lookup in the cache itself), and each class keeps an exponentially weighted moving
    average of the answers: ``estimate <- (1 - w) estimate + w [member]`` with ``w = 1 / window``. The average is
    bias-corrected (it is the weighted mean of the samples seen so far, so it does not lean towards its starting
    value); until a class has a sample its prior is ``initial``. With the default ``initial=1.0`` an unknown class is
    treated like a plain filter would treat it (positive answers trusted) until the samples say otherwise.

    :param oracle: ``key -> bool``, the true membership; only called for sampled queries.
    :param classify: ``key -> class label``; None puts every key in one class.
    :param rate: fraction of queries sampled, in (0, 1].
    :param window: ``1 / w``, roughly how many recent samples per class the average remembers (>= 1).
    :param initial: the prior of a class with no sample yet, in [0, 1].
    :param seed: seed of the sampling generator (None: fresh entropy).

    Not thread-safe: use one per thread or a lock.

    >>> cache = {"a", "b"}
    >>> prior = SampledPrior(lambda key: key in cache, rate=1.0, window=4, seed=1)
    >>> for key in ["a", "x", "y", "z"]:
    ...     prior.observe(key)
    >>> round(prior("anything"), 3)  # weighted mean of [1, 0, 0, 0], recent samples weigh more
    0.154
    """

    def __init__(self, oracle: Callable, *, classify: Callable | None = None, rate: float = 0.01,
                 window: float = 1000.0, initial: float = 1.0, seed=None):
        if not callable(oracle):
            raise TypeError(f"oracle must be callable, got {oracle!r}")
        if classify is not None and not callable(classify):
            raise TypeError(f"classify must be callable or None, got {classify!r}")
        self.oracle = oracle
        self.classify = classify
        self.rate = check_closed_probability("rate", rate)
        if self.rate == 0.0:
            raise ValueError(f"rate must be in (0, 1], got {rate!r}")
        window = check_real_number("window", window)
        if not window >= 1.0:
            raise ValueError(f"window must be >= 1, got {window!r}")
        self.window = window
        self.initial = check_closed_probability("initial", initial)
        self._w = 1.0 / window
        self._rng = np.random.default_rng(seed)
        self._num: dict = {}
        self._den: dict = {}
        self._count: dict = {}

    def _label(self, key):
        return None if self.classify is None else self.classify(key)

    def record(self, key, member: bool) -> None:
        """Feed one observed membership (unbiased samples only: e.g. not just the keys the filter said yes to)."""
        label = self._label(key)
        w = self._w
        self._num[label] = (1.0 - w) * self._num.get(label, 0.0) + w * (1.0 if member else 0.0)
        self._den[label] = (1.0 - w) * self._den.get(label, 0.0) + w
        self._count[label] = self._count.get(label, 0) + 1

    def observe(self, key) -> None:
        if self.rate >= 1.0 or self._rng.random() < self.rate:
            self.record(key, bool(self.oracle(key)))

    def observe_many(self, keys) -> None:
        keys = _keys_list(keys)
        picked = np.flatnonzero(self._rng.random(len(keys)) < self.rate)
        for i in picked:
            key = keys[int(i)]
            self.record(key, bool(self.oracle(key)))

    def estimate(self, label=None) -> float:
        """The current prior of a class (of the single class when ``classify`` is None)."""
        den = self._den.get(label, 0.0)
        return self._num[label] / den if den > 0.0 else self.initial

    @property
    def samples(self) -> dict:
        """``{label: number of samples seen}``."""
        return dict(self._count)

    def probability(self, key) -> float:
        return self.estimate(self._label(key))

    def __repr__(self) -> str:
        return f"SampledPrior(rate={self.rate!r}, window={self.window!r}, classes={len(self._count)})"
