# Key -> 64-bit hash (docs/architecture.md, "Key encoding and hashing"). One key encoding, two byte hashes:
# hash scheme XXH64_V1 (id 1) hashes the encoded bytes with XXH64, XXH3_V1 (id 2, the default) with XXH3-64.
# Inline, so each compiled module that cimports it gets its own copy of the hot path.
from cpython.bytes cimport PyBytes_Check, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_Check, PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.float cimport PyFloat_Check
from cpython.long cimport PyLong_Check
from cpython.unicode cimport PyUnicode_Check
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t

cdef extern from "Python.h":
    bint PyUnicode_CheckExact(object)
    bint PyUnicode_IS_COMPACT_ASCII(object)
    void* PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL
    long long PyLong_AsLongLongAndOverflow(object, int*) except? -1
    unsigned long long PyLong_AsUnsignedLongLongMask(object) except? -1
    bint PyIndex_Check(object)
    bint PyMemoryView_Check(object)

cdef extern from "common.h" nogil:
    uint64_t bw_xxh64(const void* data, size_t length, uint64_t seed)
    uint64_t bw_xxh64_u64(uint64_t value, uint64_t seed)
    uint64_t bw_xxh3(const void* data, size_t length, uint64_t seed)
    uint64_t bw_xxh3_u64(uint64_t value, uint64_t seed)
    uint64_t BW_INT_DOMAIN
    uint64_t BW_NEG_INT_DOMAIN
    uint64_t BW_BIG_INT_DOMAIN

cdef enum:
    SCHEME_XXH64 = 1    # _format.HashScheme.XXH64_V1
    SCHEME_XXH3 = 2     # _format.HashScheme.XXH3_V1

ctypedef struct Hasher:  # how one filter turns keys into hashes
    uint64_t seed
    int scheme


cdef inline int check_scheme(int scheme) except -1:
    if scheme != SCHEME_XXH64 and scheme != SCHEME_XXH3:
        raise ValueError(f"unknown hash scheme id {scheme} (1 = XXH64_V1, 2 = XXH3_V1)")
    return 0


cdef inline uint64_t hash_bytes(Hasher hasher, const void* data, size_t length) noexcept nogil:
    if hasher.scheme == SCHEME_XXH3:
        return bw_xxh3(data, length, hasher.seed)
    return bw_xxh64(data, length, hasher.seed)


cdef inline uint64_t hash_word(Hasher hasher, uint64_t value, uint64_t domain) noexcept nogil:
    """The hash of 8 little-endian bytes under seed ^ domain (integer keys)."""
    if hasher.scheme == SCHEME_XXH3:
        return bw_xxh3_u64(value, hasher.seed ^ domain)
    return bw_xxh64_u64(value, hasher.seed ^ domain)


cdef inline uint64_t hash_int64(int64_t value, Hasher hasher) noexcept nogil:
    """Hash of an integer known to fit in int64 (numpy signed arrays)."""
    if value >= 0:
        return hash_word(hasher, <uint64_t>value, BW_INT_DOMAIN)
    return hash_word(hasher, <uint64_t>value, BW_NEG_INT_DOMAIN)


cdef inline uint64_t hash_uint64(uint64_t value, Hasher hasher) noexcept nogil:
    """Hash of a non-negative integer below 2**64 (numpy unsigned arrays)."""
    return hash_word(hasher, value, BW_INT_DOMAIN)


cdef inline int hash_pyint(object key, Hasher hasher, uint64_t* out) except -1:
    cdef int overflow = 0
    cdef long long small = PyLong_AsLongLongAndOverflow(key, &overflow)
    if overflow == 0:
        out[0] = hash_int64(small, hasher)
        return 0
    if overflow > 0 and key.bit_length() <= 64:
        out[0] = hash_uint64(PyLong_AsUnsignedLongLongMask(key), hasher)
        return 0
    # Beyond 64 bits: minimal two's-complement little-endian bytes, in a domain of their own.
    cdef bytes data = key.to_bytes((key.bit_length() + 8) // 8, "little", signed=True)
    cdef Hasher big = hasher
    big.seed ^= BW_BIG_INT_DOMAIN
    out[0] = hash_bytes(big, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    return 0


cdef inline bint hash_ascii_str(object key, Hasher hasher, uint64_t* out) noexcept:
    """The common case, inlined into the hot loops: an exact, compact ASCII str, read in place. False otherwise."""
    if PyUnicode_CheckExact(key) and PyUnicode_IS_COMPACT_ASCII(key):
        out[0] = hash_bytes(hasher, PyUnicode_DATA(key), PyUnicode_GET_LENGTH(key))
        return True
    return False


cdef inline int hash_key(object key, Hasher hasher, uint64_t* out) except -1:
    """Write the 64-bit hash of one key to out[0]; TypeError for a value that is not a key."""
    cdef Py_ssize_t size
    cdef const char* data
    cdef Py_buffer view
    if PyUnicode_CheckExact(key) and PyUnicode_IS_COMPACT_ASCII(key):  # the common case: read it in place
        out[0] = hash_bytes(hasher, PyUnicode_DATA(key), PyUnicode_GET_LENGTH(key))
        return 0
    if PyUnicode_Check(key):
        data = PyUnicode_AsUTF8AndSize(key, &size)  # ASCII str: its own buffer, no copy
        out[0] = hash_bytes(hasher, data, size)
        return 0
    if PyBytes_Check(key):
        out[0] = hash_bytes(hasher, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
        return 0
    if PyLong_Check(key):
        return hash_pyint(key, hasher, out)
    if PyByteArray_Check(key):
        out[0] = hash_bytes(hasher, PyByteArray_AS_STRING(key), PyByteArray_GET_SIZE(key))
        return 0
    if PyMemoryView_Check(key):
        PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)  # BufferError when not contiguous
        out[0] = hash_bytes(hasher, view.buf, view.len)
        PyBuffer_Release(&view)
        return 0
    if PyIndex_Check(key) and getattr(key, "ndim", 0) == 0:
        # numpy integer scalars (and other int-likes) hash as the int they equal
        try:
            value = key.__index__()
        except TypeError:
            raise TypeError(key_type_message(key)) from None
        return hash_pyint(value, hasher, out)
    raise TypeError(key_type_message(key))


cdef inline int hash_object(object key, Hasher hasher, object key_func, uint64_t* out) except -1:
    """hash_key after the filter's key function, when it has one (which must return bytes)."""
    if key_func is not None:
        key = key_func(key)
        if not isinstance(key, (bytes, bytearray, memoryview)):
            raise TypeError(f"the filter's key function must return bytes, returned {type(key).__name__}")
    return hash_key(key, hasher, out)


cdef inline str key_type_message(object key):
    name = type(key).__name__
    if PyFloat_Check(key) or name.startswith("float"):
        return (f"a float ({key!r}) is not a key: float equality is unreliable for membership. "
                "Convert it explicitly, e.g. BloomFilter(..., key=struct.Struct('<d').pack)")
    if hasattr(key, "shape") and hasattr(key, "dtype"):
        return (f"a numpy array is a batch of keys, not one key: use update() or contains_many() "
                f"(got an array of shape {key.shape})")
    return (f"keys must be str, bytes, bytearray, memoryview or int, got {name}. "
            "Pass key=<function returning bytes> to the filter to accept other objects")
