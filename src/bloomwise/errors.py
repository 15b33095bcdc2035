"""Exceptions and warnings raised by bloomwise."""


class FormatError(ValueError):
    """A serialized filter is truncated, corrupted, of an unknown version, or not a bloomwise file at all.

    Loading never returns a filter built from bytes that failed a check: a filter that cannot be read
    is an error, never a silently wrong answer.
    """


class CapacityWarning(UserWarning):
    """A filter holds more keys than it was sized for, so its false-positive rate is above the target."""
