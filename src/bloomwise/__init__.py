"""bloomwise: fast, persistable Bloom filters that also know when not to trust a positive answer.

>>> from bloomwise import BloomFilter
>>> f = BloomFilter(capacity=1000, fpr=0.01)
>>> f.add("apple")
True
>>> "apple" in f
True

Structures are imported on first use (PEP 562), so ``import bloomwise`` stays cheap; numpy is loaded only
when a batch operation needs it.
"""
from __future__ import annotations

import importlib

__version__ = "0.2.0"

# public name -> module that defines it
_EXPORTS = {
    "BloomFilter": "bloomwise.bloom",
    "CountingBloomFilter": "bloomwise.counting",
    "apply_changes": "bloomwise.counting",
    "VariableIncrementCountingBloomFilter": "bloomwise.vicbf",
    "ScalableBloomFilter": "bloomwise.scalable",
    "GeneralizedBloomFilter": "bloomwise.generalized",
    "RetouchedBloomFilter": "bloomwise.retouched",
    "load": "bloomwise._loading",
    "FormatError": "bloomwise.errors",
    "CapacityWarning": "bloomwise.errors",
    "Plan": "bloomwise.theory",
    "plan": "bloomwise.theory",
}
_SUBMODULES = {"theory", "paradox", "errors", "cli", "plot"}

__all__ = sorted(_EXPORTS) + sorted(_SUBMODULES)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"bloomwise.{name}")
    else:
        raise AttributeError(f"module 'bloomwise' has no attribute {name!r}")
    globals()[name] = value  # cache: later lookups are plain attribute reads
    return value


def __dir__():
    return __all__ + ["__version__"]
