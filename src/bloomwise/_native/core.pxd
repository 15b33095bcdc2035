# The base of both compiled cores (bloom.pyx BloomCore, counting.pyx CounterArrayCore): what every structure has
# whatever it stores per position, namely its geometry, its key hashing, its storage, its writer lock and its capacity
# warning.
from libc.stdint cimport uint64_t

from bloomwise._native.hashing cimport Hasher
from bloomwise._native.layouts cimport Geometry

cdef extern from "common.h" nogil:
    int bw_try_lock(int* flag)
    int bw_unlocked(int* flag)
    void bw_wait_unlocked(int* flag)
    void bw_unlock(int* flag)


cdef inline int lock_writer(int* flag) except -1:
    """Take a filter's writer lock with the GIL held (common.h), waiting for it without the GIL: every structure takes
    its lock this way, so that a GIL holder that reads it clear may write without taking it."""
    while not bw_try_lock(flag):
        with nogil:
            bw_wait_unlocked(flag)
    return 0


cdef inline int lock_writer_if_held(int* flag) except -1:
    """Before a single-key write, with the GIL held: 0 when no writer holds the lock, since none can take it before
    this thread releases the GIL (the write needs no lock, and must not release the GIL); else 1, the lock taken
    (lock_writer), which the caller releases after its write."""
    if bw_unlocked(flag):
        return 0
    lock_writer(flag)
    return 1


cdef class PositionsCore:
    cdef Geometry _g
    cdef uint64_t _nbytes            # bytes of the array
    cdef Hasher _hasher
    cdef object _key_func
    cdef object _storage             # owns the array's memory (or the buffer it lives in)
    cdef uint64_t _capacity_limit    # warn (once) when the key count passes it; 0 = no limit
    cdef bint _warned
    cdef bint _ready
    cdef bint _released              # _release_storage ran (a mapped file's close())
    cdef bint _writable              # False on a read-only buffer (a file opened with mode 'r')
    cdef bint _has_view
    cdef Py_buffer _view             # held on the storage while the array lives in it
    cdef int _lock                   # the writer lock (common.h)

    cdef int _set_hashing(self, object seed, object key, int hash_scheme) except -1
    cdef void* _attach_storage(self, object storage, str what) except NULL
    cdef void _forget_array(self) noexcept
    cdef int _not_ready(self) except -1

    cdef inline int _check_ready(self) except -1:
        if not self._ready:
            self._not_ready()
        return 0

    cdef inline int _check_writable(self) except -1:
        self._check_ready()
        if not self._writable:
            raise TypeError("this filter is read-only (opened from a file with mode 'r'); "
                            "open it with mode='r+' or load() a private copy to change it")
        return 0

    cdef inline int _lock_writer(self) except -1:
        return lock_writer(&self._lock)
