# Small helpers shared by the compiled modules (inline: each module gets its own copy).
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from libc.stdint cimport uint64_t, uintptr_t

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


cdef inline int attach_buffer(object storage, Py_buffer* view, uint64_t nbytes, str what, void** data) except -1:
    """Take a buffer view of ``storage`` (writable if it allows, else read-only) that must hold exactly ``nbytes``
    8-byte-aligned bytes for ``what``: ``*data`` is where they start; returns 1 when writable, 0 when read-only. On an
    error the view is released (a memory map behind it can then be closed).

    For a memoryview the view is held on the object behind it (a bytearray, a memory map, an aligned buffer):
    a memoryview with an export cannot be cleared, so the garbage collector could not free a filter in a reference
    cycle; the bytes stay where the memoryview showed them, kept by that object's export."""
    cdef int writable = 1
    cdef Py_buffer shown
    try:
        PyObject_GetBuffer(storage, &shown, PyBUF_SIMPLE | PyBUF_WRITABLE)
    except BufferError:
        PyObject_GetBuffer(storage, &shown, PyBUF_SIMPLE)
        writable = 0
    if <uint64_t>shown.len != nbytes:
        held = shown.len
        PyBuffer_Release(&shown)
        raise ValueError(f"storage holds {held} bytes, {what} {nbytes}")
    if (<uintptr_t>shown.buf) % 8:
        PyBuffer_Release(&shown)
        raise ValueError("storage must be 8-byte aligned")
    data[0] = shown.buf
    base = storage.obj if type(storage) is memoryview else None
    if base is not None:
        try:
            PyObject_GetBuffer(base, view, PyBUF_SIMPLE)
        except BufferError:
            base = None
        else:
            if not (<uintptr_t>view.buf <= <uintptr_t>shown.buf
                    and <uintptr_t>shown.buf + nbytes <= <uintptr_t>view.buf + <uintptr_t>view.len):
                PyBuffer_Release(view)  # (not a plain view of it: keep the memoryview's own)
                base = None
    if base is None:
        view[0] = shown
    else:
        PyBuffer_Release(&shown)
    return writable
