# The base of both compiled cores (bloom.pyx BloomCore, counting.pyx CounterArrayCore): what every structure has
# whatever it stores per position, namely its geometry, its key hashing, its writer lock and its capacity warning.
from libc.stdint cimport uint64_t

from bloomwise._native.hashing cimport Hasher
from bloomwise._native.layouts cimport Geometry

cdef extern from "common.h" nogil:
    int bw_try_lock(int* flag)
    void bw_lock(int* flag)
    void bw_unlock(int* flag)


cdef class PositionsCore:
    cdef Geometry _g
    cdef uint64_t _nbytes            # bytes of the array
    cdef Hasher _hasher
    cdef object _key_func
    cdef object _storage             # owns the array's memory (or the buffer it lives in)
    cdef uint64_t _capacity_limit    # warn (once) when the key count passes it; 0 = no limit
    cdef bint _warned
    cdef bint _ready
    cdef int _lock                   # the writer lock (common.h)

    cdef int _set_hashing(self, object seed, object key, int hash_scheme) except -1

    cdef inline int _lock_writer(self) except -1:
        if not bw_try_lock(&self._lock):
            with nogil:  # never wait for the lock while holding the GIL
                bw_lock(&self._lock)
        return 0
