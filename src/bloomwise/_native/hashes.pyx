"""Hash functions for Python code: XXH64 and XXH3-64 of byte buffers (the file format's checksums) and the 64-bit
hash of one key under a hash scheme (docs/architecture.md). Filters hash their keys inside their own kernels."""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport uint64_t

from bloomwise._native.hashing cimport Hasher, hash_bytes, check_scheme, hash_key, SCHEME_XXH64, SCHEME_XXH3


cdef Hasher _hasher(uint64_t seed, int scheme) except *:
    check_scheme(scheme)
    cdef Hasher hasher
    hasher.seed = seed
    hasher.scheme = scheme
    return hasher


cdef uint64_t _buffer_hash(object data, Hasher hasher) except? 0:
    """The byte hash of a bytes-like object, without the GIL (payloads can be gigabytes)."""
    cdef Py_buffer view
    cdef uint64_t result
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            result = hash_bytes(hasher, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return result


def xxh64(data, uint64_t seed=0):
    """XXH64 of a bytes-like object (bit-exact with the reference implementation)."""
    return _buffer_hash(data, _hasher(seed, SCHEME_XXH64))


def xxh3(data, uint64_t seed=0):
    """XXH3-64 of a bytes-like object (bit-exact with the reference implementation)."""
    return _buffer_hash(data, _hasher(seed, SCHEME_XXH3))


def key_hash(key, uint64_t seed=0, int scheme=SCHEME_XXH3):
    """The 64-bit hash bloomwise uses for one key under a hash scheme id (see docs/architecture.md)."""
    cdef uint64_t h
    hash_key(key, _hasher(seed, scheme), &h)
    return h
