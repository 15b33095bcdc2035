# cython: freethreading_compatible = False
"""The base of both compiled cores: geometry, key hashing, storage, writer lock and capacity warning (core.pxd)."""
cimport cython
from cpython.buffer cimport PyBuffer_Release

from bloomwise._native.hashing cimport check_scheme
from bloomwise._native.support cimport attach_buffer, check_int


@cython.auto_pickle(False)
cdef class PositionsCore:
    """m positions (bits or counters), k probes per key; subclassed by BloomCore and CounterArrayCore."""

    def __dealloc__(self):
        if self._has_view:
            PyBuffer_Release(&self._view)

    cdef void* _attach_storage(self, object storage, str what) except NULL:
        """Keep the array in ``storage``'s buffer (support.attach_buffer: exactly nbytes, 8-byte aligned, writable
        if the buffer allows); returns where the array starts, for the subclass's typed pointer."""
        cdef void* data
        self._writable = attach_buffer(storage, &self._view, self._nbytes, what, &data) == 1
        self._has_view = True
        self._storage = storage
        return data

    cdef void _forget_array(self) noexcept:
        """The subclass sets its array pointer to NULL (called under the writer lock by _release_storage)."""

    cdef int _not_ready(self) except -1:
        """The RuntimeError of a structure that has no array: closed, or never built."""
        name = getattr(type(self), "_FAMILY", type(self)).__name__  # BloomFilter, not its memory-mapped subclass
        if self._released:
            raise RuntimeError(f"this {name} is closed: close() unmapped its file; open() or load() the file again "
                               "to use it")
        raise RuntimeError(f"this {name} is not initialised: build it with its constructor, from_size(), load() or "
                           "open()")

    def _release_storage(self):
        """Drop the storage (before a mapped file is closed); the filter is unusable afterwards."""
        self._lock_writer()
        self._ready = False
        self._released = True
        self._writable = False
        self._forget_array()
        bw_unlock(&self._lock)
        if self._has_view:
            PyBuffer_Release(&self._view)
            self._has_view = False
        self._storage = None

    @property
    def _is_writable(self):
        return self._writable

    cdef int _set_hashing(self, object seed, object key, int hash_scheme) except -1:
        """Check and set the seed, the key function and the hash scheme id."""
        seed = check_int("seed", seed, 0, 2 ** 64 - 1)
        check_scheme(hash_scheme)
        if key is not None and not callable(key):
            raise TypeError(f"key must be a function turning a key into bytes, got {type(key).__name__}")
        self._hasher.seed = seed
        self._hasher.scheme = hash_scheme
        self._key_func = key
        return 0

    @property
    def num_hashes(self):
        """k: the number of positions (bits or counters) per key."""
        return self._g.num_hashes

    @property
    def seed(self):
        """The hash seed (filters combine only with filters of the same seed)."""
        return self._hasher.seed

    @property
    def nbytes(self):
        """Bytes of the array."""
        return self._nbytes

    @property
    def _hash_scheme_id(self):
        return self._hasher.scheme

    @property
    def _layout_id(self):
        return self._g.layout

    @property
    def _key_function(self):
        return self._key_func

    def _set_capacity_limit(self, limit):
        self._capacity_limit = limit or 0

    def _over_capacity(self):
        """Called once when more keys are in than the capacity; the Python classes warn."""
