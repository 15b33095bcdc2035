# Batches of keys and their hashing, shared by the compiled cores (hashes.pyx).
from libc.stdint cimport uint8_t, uint64_t

from bloomwise._native.hashing cimport Hasher

cdef enum:
    CHUNK = 1024            # keys hashed per step of a batch

cdef enum BatchKind:
    BATCH_OBJECTS = 0   # list or tuple of Python keys
    BATCH_UINT64 = 1
    BATCH_INT64 = 2
    BATCH_BYTES = 3     # numpy 'S': fixed width, trailing NULs stripped
    BATCH_UNICODE = 4   # numpy 'U': UCS-4, trailing NULs stripped, hashed as UTF-8
    BATCH_HASHES = 5    # hashes already computed (threaded batches of Python objects)

cdef struct FixedKeys:
    int kind
    Py_ssize_t length
    Py_ssize_t width        # bytes per element (numpy S), code points per element (numpy U)
    const uint8_t* data

cdef class Batch:
    cdef FixedKeys keys
    cdef object items            # BATCH_OBJECTS: the list of keys; else the array that owns the data
    cdef object shape            # a numpy input's shape, for contains_many's result
    cdef Py_buffer view
    cdef bint has_view

    cdef int take_buffer(self, object array) except -1

cdef class HashStream:
    cdef Batch batch
    cdef Hasher hasher
    cdef object key_func
    cdef uint8_t* scratch
    cdef uint64_t* hashes

    cdef int hash_objects(self, Py_ssize_t start, Py_ssize_t count, uint64_t* out) except -1

cdef Hasher make_hasher(uint64_t seed, int scheme) except *
cdef Batch make_batch(object keys, bint objects_only)
cdef Batch prehashed_batch(object hashes)
cdef void hash_fixed(const FixedKeys* keys, Py_ssize_t start, Py_ssize_t count, Hasher hasher,
                     uint64_t* out, uint8_t* scratch) noexcept nogil
cdef object hash_batch(Batch batch, Hasher hasher, object key_func)
cdef bint simd512_in_use() noexcept nogil
