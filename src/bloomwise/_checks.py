"""The argument validators of every floor: one family, one argument order, ``check_x(name, value, ...)``.

Each returns the value, converted where said (an int from any ``__index__`` type, a float), or raises an error that
names the parameter, shows the value and says what was expected. ``name`` is what the message calls the value: a
parameter (``"capacity"``), or a longer phrase (``"request 3: size"``) where the caller has context to add.

Below the theory and importing nothing of bloomwise, so that any module may use it (docs/architecture.md,
"Layers"). The text readers of typed numbers (``40M``, ``64KiB``, ``10%``) are :mod:`bloomwise.units`; the checks
the checks of numpy arrays the paradox's formulas share (probabilities, counters) are ``bloomwise.paradox._validate``,
beside the numpy they need.
"""
from __future__ import annotations

import math
import numbers
import operator

__all__ = [
    "check_integer", "check_real", "check_count", "check_probability", "check_flag", "check_positive_int",
    "check_int_range", "check_positive_integer", "check_unit_interval", "check_fraction", "check_tolerance",
    "check_positive_number", "check_finite_positive", "check_non_negative", "check_token", "check_multiple",
    "check_real_number", "check_closed_probability", "check_positive_real", "check_choice", "check_interval",
]

_INF = float("inf")


# ---- integers --------------------------------------------------------------------------------------------------------
def check_integer(name: str, value, minimum: int = 0) -> int:
    """An integer >= minimum (any ``__index__`` type, not a bool), as an int: the theory's formulas' check."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got the bool {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})") from None
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def check_positive_int(name: str, value, minimum: int = 1) -> int:
    """An int >= minimum (not a bool, not a float), as an int: the structures' and the cache system's check."""
    if isinstance(value, bool) or not hasattr(value, "__index__") or isinstance(value, float):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    value = value.__index__()
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def check_int_range(name: str, value, low: int, high: int) -> int:
    """An int in [low, high] (TypeError for another type, ValueError outside the range; both name the value)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    value = value.__index__()
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return value


def check_positive_integer(name: str, value) -> int:
    """A Python int >= 1, with ValueError for every other value (a wrong type included): the trace generators'."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_multiple(name: str, value, step: int, low: int, high: int) -> int:
    """An int in [low, high] that is a multiple of ``step`` (TypeError for another type)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low or value % step or value > high:
        raise ValueError(f"{name} must be a multiple of {step} between {low} and {high}, got {value}")
    return value


# ---- real numbers ----------------------------------------------------------------------------------------------------
def check_real(name: str, value, minimum: float = 0.0) -> float:
    """A finite real number >= minimum (ints stay exact: they are converted to float only here)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got the bool {value!r}")
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a number, got the string {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})") from None
    if math.isnan(number) or math.isinf(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {value!r}")
    return number


def check_real_number(name: str, value) -> float:
    """Any real number but NaN (infinities allowed), as a float; TypeError for bools and non-numbers: the paradox's
    formulas' check."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    number = float(value)
    if math.isnan(number):
        raise ValueError(f"{name} must not be NaN, got {number!r}")
    return number


def check_closed_probability(name: str, value) -> float:
    """A probability in [0, 1] (a prior, a posterior), as a float."""
    number = check_real_number(name, value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {number!r}")
    return number


def check_positive_real(name: str, value) -> float:
    """A finite real number > 0 (a cost ratio), as a float; TypeError for bools and non-numbers."""
    number = check_real_number(name, value)
    if not (number > 0.0 and math.isfinite(number)):
        raise ValueError(f"{name} must be a finite number > 0, got {number!r}")
    return number


def check_interval(name: str, value, low: float, high: float, *, low_open: bool, high_open: bool) -> float:
    """An int or float in the interval from low to high, each end open or closed, as a float (TypeError for another
    type, ValueError outside the interval or NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    number = float(value)
    inside = ((low < number if low_open else low <= number)
              and (number < high if high_open else number <= high))
    if not inside or math.isnan(number):
        raise ValueError(f"{name} must be in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}, "
                         f"got {number!r}")
    return number


def check_count(name: str, value) -> float:
    """A number of items: a non-negative int (kept exact), or a non-negative finite real (an expected count)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number of items, got the bool {value!r}")
    try:
        operator.index(value)
    except TypeError:
        return check_real(name, value)
    return check_integer(name, value)


def check_probability(name: str, value) -> float:
    """A probability strictly between 0 and 1."""
    number = check_real(name, value, minimum=-math.inf)
    if not 0.0 < number < 1.0:
        raise ValueError(f"{name} must be a probability strictly between 0 and 1, got {value!r}")
    return number


def _is_plain_number(value) -> bool:
    """An int or a float, not a bool: the cache system's settings take nothing else."""
    return not isinstance(value, bool) and isinstance(value, (int, float))


def check_unit_interval(name: str, value, *, upper_open: bool = False) -> float:
    """A number in [0, 1] (``upper_open``: in [0, 1)), as a float; ValueError for every other value."""
    if not _is_plain_number(value) or not 0 <= value <= 1 or (upper_open and value == 1):
        bound = "[0, 1)" if upper_open else "[0, 1]"
        raise ValueError(f"{name} must be a number in {bound}, got {value!r}")
    return float(value)


def check_fraction(name: str, value) -> float:
    """A fraction in (0, 1], as a float (a summary's update threshold); ValueError for every other value."""
    if not _is_plain_number(value) or not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be a fraction in (0, 1], got {value!r}")
    return float(value)


def check_tolerance(name: str, value):
    """None (off), or a finite fraction > 0 (more than 1 allowed); ValueError for every other value."""
    if value is not None and (not _is_plain_number(value) or not 0.0 < value < math.inf):
        raise ValueError(f"{name} must be a fraction > 0 or None, got {value!r}")
    return value


def check_positive_number(name: str, value) -> float:
    """An int or float > 0 (infinity allowed), as given; ValueError for every other value."""
    if not _is_plain_number(value) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    return value


def check_finite_positive(name: str, value) -> float:
    """A finite int or float > 0 (a cost), as a float; ValueError for every other value."""
    if type(value) is float and 0.0 < value < _INF:    # (the common case, first: NaN fails the comparison)
        return value
    if not _is_plain_number(value) or not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_non_negative(name: str, value, *, integer: bool, upper: float = _INF):
    """An integer (``integer``) or a finite real number in [0, upper]: an int, or a float; ValueError otherwise."""
    if integer:
        try:
            value = operator.index(value)
        except TypeError:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}") from None
    elif isinstance(value, (str, bytes, bool)) or not isinstance(value, (int, float, numbers.Real)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if not 0 <= value <= upper or value == _INF:
        kind = "an integer" if integer else "a finite number"
        bound = ">= 0" if upper == _INF else f"in [0, {upper}]"
        raise ValueError(f"{name} must be {kind} {bound}, got {value!r}")
    return value if integer else float(value)


# ---- other values ----------------------------------------------------------------------------------------------------
def check_choice(name: str, value, allowed) -> str:
    """One of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def check_flag(name: str, value) -> bool:
    """True or False (not a truthy value)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def check_token(name: str, value) -> str:
    """A non-empty string without whitespace (a field of a space-separated line)."""
    if not isinstance(value, str) or not value or len(value.split()) != 1 or value.strip() != value:
        raise ValueError(f"{name} must be a non-empty string without spaces, got {value!r}")
    return value
