# Small helpers shared by the compiled modules (inline: each module gets its own copy).

cdef inline object numpy():
    """numpy, imported on first use (import bloomwise itself never loads it)."""
    import numpy
    return numpy


cdef inline object check_int(str name, object value, object low, object high):
    """value as an int within [low, high]; TypeError/ValueError naming the parameter otherwise."""
    if isinstance(value, bool) or isinstance(value, float) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    value = value.__index__()
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return value


cdef inline int check_threads(object threads) except -1:
    """The `threads=` argument of batch methods: None (one thread) or a positive int (capped at 64)."""
    if threads is None:
        return 1
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    return min(<int>threads, 64)
