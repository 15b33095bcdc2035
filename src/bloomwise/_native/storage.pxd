# The filters' aligned, zeroed memory (storage.pyx).

cdef class AlignedBuffer:
    cdef void* ptr
    cdef size_t size
    cdef size_t span            # bytes mapped (mmap'd buffers: size rounded up to whole huge pages)
    cdef bint mapped
    cdef bint populated

    cdef void populate(self) noexcept nogil


cdef object scratch_uint64(Py_ssize_t length)
