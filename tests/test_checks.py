"""bloomwise._checks: the one family of argument validators, name first, and the settings every layer checks with
it (the summaries' update threshold: the same check and message in the simulator, the publisher and the proxy)."""
from __future__ import annotations

import numpy as np
import pytest

from bloomwise._checks import (check_choice, check_closed_probability, check_finite_positive, check_fraction,
                               check_int_range, check_interval, check_multiple, check_non_negative, check_positive_int,
                               check_positive_integer, check_positive_real, check_real_number, check_token,
                               check_tolerance, check_unit_interval)
from bloomwise.cache.simulation import SimulationConfig
from bloomwise.cache.store import DocumentCache
from bloomwise.cache.summary import SummaryPublisher
from bloomwise.proxy.server import ProxyConfig


def _simulation(threshold):
    return SimulationConfig(update_threshold=threshold)


def _publisher(threshold):
    return SummaryPublisher(DocumentCache(1 << 20), update_threshold=threshold)


def _proxy(threshold):
    return ProxyConfig(update_threshold=threshold)


@pytest.mark.parametrize("make", [_simulation, _publisher, _proxy], ids=["simulation", "publisher", "proxy"])
@pytest.mark.parametrize("threshold", [0, -0.5, 1.5, float("nan"), True, "0.1", None])
def test_every_layer_refuses_the_same_bad_update_thresholds(make, threshold):
    with pytest.raises(ValueError, match=rf"^update_threshold must be a fraction in \(0, 1\], got {threshold!r}$"):
        make(threshold)


@pytest.mark.parametrize("make", [_simulation, _publisher, _proxy], ids=["simulation", "publisher", "proxy"])
def test_every_layer_takes_a_threshold_in_the_half_open_interval(make):
    for threshold in (1e-9, 0.01, 1, 1.0):
        assert make(threshold).update_threshold == threshold


@pytest.mark.parametrize("call, error, message", [
    (lambda: check_positive_int("capacity", 0), ValueError, "capacity must be at least 1, got 0"),
    (lambda: check_positive_int("seed", -1, 0), ValueError, "seed must be at least 0, got -1"),
    (lambda: check_positive_int("capacity", 1.0), TypeError, r"capacity must be an int, got float \(1.0\)"),
    (lambda: check_positive_int("capacity", True), TypeError, r"capacity must be an int, got bool \(True\)"),
    (lambda: check_int_range("seed", 2 ** 64, 0, 2 ** 64 - 1), ValueError, r"seed must be in \[0, "),
    (lambda: check_positive_integer("num_proxies", 1.0), ValueError, "num_proxies must be a positive integer, got 1.0"),
    (lambda: check_unit_interval("f", 1.0, upper_open=True), ValueError, r"f must be a number in \[0, 1\), got 1.0"),
    (lambda: check_unit_interval("f", -0.0001), ValueError, r"f must be a number in \[0, 1\], got -0.0001"),
    (lambda: check_fraction("t", 0.0), ValueError, r"t must be a fraction in \(0, 1\], got 0.0"),
    (lambda: check_tolerance("r", float("inf")), ValueError, "r must be a fraction > 0 or None, got inf"),
    (lambda: check_finite_positive("cost", float("inf")), ValueError, "cost must be a finite number > 0, got inf"),
    (lambda: check_non_negative("request 2: status", 1000, integer=True, upper=999), ValueError,
     r"request 2: status must be an integer in \[0, 999\], got 1000"),
    (lambda: check_non_negative("request 0: timestamp", "1", integer=False), ValueError,
     "request 0: timestamp must be a finite number >= 0, got '1'"),
    (lambda: check_token("request 1: url", "a b"), ValueError,
     "request 1: url must be a non-empty string without spaces, got 'a b'"),
    (lambda: check_multiple("num_bytes", 48, 32, 32, 1 << 27), ValueError,
     "num_bytes must be a multiple of 32 between 32 and 134217728, got 48"),
    (lambda: check_multiple("num_bytes", 32.0, 32, 32, 1 << 27), TypeError, "num_bytes must be an int, got float"),
    (lambda: check_real_number("prior", "0.5"), TypeError, "prior must be a real number, got '0.5'"),
    (lambda: check_real_number("prior", True), TypeError, "prior must be a real number, got True"),
    (lambda: check_real_number("log_ratio", float("nan")), ValueError, "log_ratio must not be NaN, got nan"),
    (lambda: check_closed_probability("posterior", 1.5), ValueError, r"posterior must be a probability in \[0, 1\]"),
    (lambda: check_positive_real("alpha", 0), ValueError, "alpha must be a finite number > 0, got 0.0"),
    (lambda: check_positive_real("alpha", float("inf")), ValueError, "alpha must be a finite number > 0, got inf"),
    (lambda: check_interval("ratio", 1.0, 0.0, 1.0, low_open=True, high_open=True), ValueError,
     r"ratio must be in \(0, 1\), got 1.0"),
    (lambda: check_interval("growth", 1.0, 1.0, 1e6, low_open=True, high_open=False), ValueError,
     r"growth must be in \(1, 1e\+06\], got 1.0"),
    (lambda: check_interval("growth", "2", 1.0, 1e6, low_open=False, high_open=False), TypeError,
     r"growth must be a number, got str \('2'\)"),
    (lambda: check_choice("rule", "max", ("threshold", "cost")), ValueError,
     "rule must be one of 'threshold', 'cost', got 'max'"),
])
def test_each_check_names_the_value_and_what_was_expected(call, error, message):
    with pytest.raises(error, match=f"^{message}"):
        call()


def test_the_checks_return_the_value_converted():
    assert check_positive_int("n", np.int64(3)) == 3 and type(check_positive_int("n", np.int64(3))) is int
    assert check_fraction("t", 1) == 1.0 and type(check_fraction("t", 1)) is float
    assert check_tolerance("r", None) is None and check_tolerance("r", 2.5) == 2.5
    assert check_non_negative("s", 7, integer=False) == 7.0 and check_unit_interval("f", 0) == 0.0
    assert SimulationConfig(cache_size=np.int64(1 << 20)).cache_size.__class__ is int
    assert check_real_number("x", -float("inf")) == -float("inf") and type(check_real_number("x", 1)) is float
    assert check_closed_probability("p", 0) == 0.0 and check_closed_probability("p", 1) == 1.0
    assert check_positive_real("alpha", np.float32(0.5)) == 0.5 and check_choice("rule", "cost", ("cost",)) == "cost"
