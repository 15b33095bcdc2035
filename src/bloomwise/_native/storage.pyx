# cython: freethreading_compatible = False
"""The filters' storage: zeroed, 64-byte aligned memory (`AlignedBuffer`), numpy scratch arrays in it, and a file's
payload read straight into one (`read_payload`).

Private: the bit and counter arrays of the compiled cores (``bloom.pyx``, ``counting.pyx``) live in an
AlignedBuffer unless they live in a caller's buffer (a memory-mapped file's payload).
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.exc cimport PyErr_SetFromErrno
from libc.stdint cimport int64_t, uint8_t, uint64_t, uintptr_t
from libc.stdlib cimport free
from libc.string cimport memset

from bloomwise._native.support cimport numpy

cdef extern from "<sys/mman.h>" nogil:
    void* mmap(void* addr, size_t length, int prot, int flags, int fd, long offset)
    int munmap(void* addr, size_t length)
    int madvise(void* addr, size_t length, int advice)
    int PROT_READ, PROT_WRITE, MAP_PRIVATE, MAP_ANONYMOUS, MADV_HUGEPAGE
    void* MAP_FAILED

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void** memptr, size_t alignment, size_t size)

cdef extern from "payload_io.h" nogil:
    int64_t bw_read_payload(int fd, uint8_t* buf, size_t length, int64_t offset, int verify, int threaded,
                            uint64_t* checksum)
    uint64_t bw_xxh64_in_pieces(const uint8_t* data, size_t length, size_t piece, uint64_t seed)
    size_t BW_HASH_THREAD_MIN

cdef char* BYTE_FORMAT = "B"
cdef size_t HUGE_PAGE_THRESHOLD = 1 << 20  # beyond one core's L2: whole 2 MiB-aligned huge pages
cdef size_t HUGE_PAGE = 2 << 20
cdef int MADV_POPULATE_WRITE = 23  # <sys/mman.h> of Linux 5.14+; older C libraries lack the name


@cython.auto_pickle(False)
cdef class AlignedBuffer:
    """Zeroed, 64-byte aligned memory (``zero=False``: below 1 MiB, not zeroed, for a caller that fills it all).

    From 1 MiB on: an anonymous mapping rounded up to whole 2 MiB pages, 2 MiB-aligned and advised for transparent
    huge pages (a hint). One page fault per 2 MiB instead of 512 (faults are slow on virtual machines: filling a
    new 1.9 MiB filter with 1M keys measured ~15% faster) and one TLB entry per 2 MiB; costs at most 2 MiB of
    padding per filter.
    """
    def __cinit__(self, size_t size, bint zero=True):
        cdef int err
        cdef uintptr_t start, aligned
        self.size = size
        if size >= HUGE_PAGE_THRESHOLD:
            self.span = (size + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE
            self.ptr = mmap(NULL, self.span + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
            if self.ptr == MAP_FAILED:
                self.ptr = NULL
                raise MemoryError(f"cannot allocate {size} bytes for the filter")
            start = <uintptr_t>self.ptr  # map one page more, then trim to a 2 MiB boundary
            aligned = (start + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE
            if aligned > start:
                munmap(self.ptr, aligned - start)
            munmap(<void*>(aligned + self.span), start + HUGE_PAGE - aligned)
            self.ptr = <void*>aligned
            self.mapped = True
            madvise(self.ptr, self.span, MADV_HUGEPAGE)  # a hint: failure is harmless
        else:
            err = posix_memalign(&self.ptr, 64, size if size >= 64 else 64)
            if err != 0:
                self.ptr = NULL
                raise MemoryError(f"cannot allocate {size} bytes for the filter")
            if zero:
                memset(self.ptr, 0, size)

    cdef void populate(self) noexcept nogil:
        """Fault every page in now, from one thread (Linux 5.14+; elsewhere a no-op). Threaded inserts call it
        first: two threads faulting pages of one fresh mapping at once were measured slower than one thread."""
        if self.mapped and not self.populated:
            madvise(self.ptr, self.span, MADV_POPULATE_WRITE)  # a hint: older kernels say EINVAL
            self.populated = True

    def __dealloc__(self):
        if self.ptr != NULL:
            if self.mapped:
                munmap(self.ptr, self.span)
            else:
                free(self.ptr)

    def __getbuffer__(self, Py_buffer* view, int flags):
        view.buf = self.ptr
        view.obj = self
        view.len = self.size
        view.readonly = 0
        view.itemsize = 1
        view.format = BYTE_FORMAT
        view.ndim = 1
        view.shape = <Py_ssize_t*>&self.size
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer* view):
        pass


cdef object scratch_uint64(Py_ssize_t length):
    """An uninitialised numpy uint64 array in AlignedBuffer memory: huge pages from 1 MiB on, so a large
    temporary costs a few page faults instead of one per 4 KiB (they are slow on virtual machines)."""
    return numpy().frombuffer(AlignedBuffer(max(length, 1) * 8), dtype=numpy().uint64)[:length]


#: payloads from this size on are hashed by a helper thread while they are read (``read_payload``)
HASH_THREAD_MIN = BW_HASH_THREAD_MIN


def read_payload(int fd, int64_t offset, uint64_t length, bint verify, bint threaded=True):
    """Read ``length`` bytes at ``offset`` of the open file ``fd`` into a new AlignedBuffer, without the GIL.

    Returns ``(buffer, bytes_read, checksum)``. ``bytes_read < length`` when the file ended first (the rest of the
    buffer is then zeroed, and checksum is None). With ``verify`` the checksum is the XXH64 (seed 0) of the bytes,
    computed as they arrive: 1 MiB pieces, each hashed while still in cache, by a helper thread that follows the
    reader from ``HASH_THREAD_MIN`` bytes on when ``threaded`` (the wall time is then about the read's alone).
    Without ``verify`` it is None. The buffer is not zero-filled first: the reads fill it (a fresh anonymous mapping
    from 1 MiB on, whose pages the kernel supplies on the first write). OSError on a read error.
    """
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    cdef AlignedBuffer buffer = AlignedBuffer(length, False)
    cdef uint64_t checksum = 0
    cdef int64_t done
    with nogil:
        done = bw_read_payload(fd, <uint8_t*>buffer.ptr, length, offset, verify, threaded, &checksum)
    if done < 0:
        PyErr_SetFromErrno(OSError)
    if <uint64_t>done < length:
        memset(<uint8_t*>buffer.ptr + done, 0, length - <uint64_t>done)
        return buffer, done, None
    buffer.populated = True  # every page was written by the reads
    return buffer, done, checksum if verify else None


def _xxh64_in_pieces(data, size_t piece, uint64_t seed=0):
    """XXH64 of a bytes-like object hashed ``piece`` bytes at a time (a multiple of 32; 0: at once): for tests."""
    if piece % 32:
        raise ValueError(f"piece must be a multiple of 32, got {piece}")
    cdef Py_buffer view
    cdef uint64_t result
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        result = bw_xxh64_in_pieces(<const uint8_t*>view.buf, view.len, piece, seed)
    finally:
        PyBuffer_Release(&view)
    return result
