# What other compiled modules read of a counting core without a Python call (decide.pyx's cached decisions check
# the key count on every query).
from libc.stdint cimport uint64_t

cdef uint64_t counter_array_num_keys(object core) noexcept
