# cython: freethreading_compatible = False
"""The base of both compiled cores: geometry, key hashing, writer lock and capacity warning (core.pxd)."""
cimport cython

from bloomwise._native.hashing cimport check_scheme
from bloomwise._native.support cimport check_int


@cython.auto_pickle(False)
cdef class PositionsCore:
    """m positions (bits or counters), k probes per key; subclassed by BloomCore and CounterArrayCore."""

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
