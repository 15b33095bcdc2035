# Key -> 64-bit hash (docs/architecture.md, "Key encoding and hashing"). One key encoding, two byte hashes:
# hash scheme XXH64_V1 (id 1) hashes the encoded bytes with XXH64, XXH3_V1 (id 2, the default) with XXH3-64.
# Inline, so each compiled module that cimports it gets its own copy of the hot path.
from cpython.bytes cimport PyBytes_Check, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_Check, PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.float cimport PyFloat_Check
from cpython.long cimport PyLong_Check
from cpython.unicode cimport PyUnicode_Check
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

cdef extern from "Python.h":
    bint PyUnicode_CheckExact(object)
    bint PyUnicode_IS_COMPACT_ASCII(object)
    void* PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    int PyUnicode_KIND(object)
    long long PyLong_AsLongLongAndOverflow(object, int*) except? -1
    unsigned long long PyLong_AsUnsignedLongLongMask(object) except? -1
    bint PyIndex_Check(object)
    bint PyMemoryView_Check(object)

cdef extern from *:
    """
    /* A str is "ready" (its code points stored as UCS1/2/4) from Python 3.12 on; before, legacy strings may not be. */
    #if PY_VERSION_HEX < 0x030C0000
    #define BW_UNICODE_READY(o) PyUnicode_READY(o)
    #else
    #define BW_UNICODE_READY(o) 0
    #endif
    """
    int BW_UNICODE_READY(object) except -1

cdef extern from "common.h" nogil:
    uint64_t bw_xxh64(const void* data, size_t length, uint64_t seed)
    uint64_t bw_xxh64_u64(uint64_t value, uint64_t seed)
    uint64_t bw_xxh3(const void* data, size_t length, uint64_t seed)
    uint64_t bw_xxh3_u64(uint64_t value, uint64_t seed)
    uint64_t BW_INT_DOMAIN
    uint64_t BW_NEG_INT_DOMAIN
    uint64_t BW_BIG_INT_DOMAIN
    size_t bw_latin1_to_utf8(const uint8_t* s, size_t n, uint8_t* out)

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


cdef enum:
    UTF8_STACK_BYTES = 512   # str keys whose UTF-8 fits are encoded on the stack; longer ones in a malloc'd buffer
    LATIN1_STACK_CHARS = 256  # hash_common_str: UCS1 str keys up to this length (their UTF-8 fits in 512 bytes)


cdef inline void put_two_bytes(uint8_t* out, uint32_t c) noexcept nogil:
    """The UTF-8 of a code point from U+0080 to U+07FF: two bytes."""
    out[0] = <uint8_t>(0xC0 | (c >> 6))
    out[1] = <uint8_t>(0x80 | (c & 0x3F))


cdef inline Py_ssize_t encode_utf8(int kind, const void* data, Py_ssize_t n, uint8_t* out) noexcept nogil:
    """The UTF-8 bytes of n code points stored as UCS1 (kind 1), UCS2 (2) or UCS4 (4), written to out (room for
    n * kind + n bytes); their count, or -1 for a surrogate code point, which UTF-8 cannot encode (str.encode()
    raises UnicodeEncodeError for it)."""
    cdef Py_ssize_t i, j = 0
    cdef uint32_t c
    if kind == 1:
        return <Py_ssize_t>bw_latin1_to_utf8(<const uint8_t*>data, <size_t>n, out)
    for i in range(n):
        c = (<const uint16_t*>data)[i] if kind == 2 else (<const uint32_t*>data)[i]
        if c < 0x80:
            out[j] = <uint8_t>c
            j += 1
        elif c < 0x800:
            put_two_bytes(out + j, c)
            j += 2
        elif c < 0x10000:
            if 0xD800 <= c <= 0xDFFF:
                return -1
            out[j] = <uint8_t>(0xE0 | (c >> 12))
            out[j + 1] = <uint8_t>(0x80 | ((c >> 6) & 0x3F))
            out[j + 2] = <uint8_t>(0x80 | (c & 0x3F))
            j += 3
        else:
            out[j] = <uint8_t>(0xF0 | (c >> 18))
            out[j + 1] = <uint8_t>(0x80 | ((c >> 12) & 0x3F))
            out[j + 2] = <uint8_t>(0x80 | ((c >> 6) & 0x3F))
            out[j + 3] = <uint8_t>(0x80 | (c & 0x3F))
            j += 4
    return j


cdef inline int hash_str(object key, Hasher hasher, uint64_t* out) except -1:
    """The hash of a str's UTF-8 bytes, encoded into a buffer of this call (the stack, or the C heap for long
    strings): nothing is cached in, or left behind by, the caller's str (PyUnicode_AsUTF8 would keep a copy in it)."""
    cdef uint8_t stack[UTF8_STACK_BYTES]
    cdef uint8_t* buffer = stack
    cdef Py_ssize_t n, size, length
    cdef int kind
    BW_UNICODE_READY(key)
    n = PyUnicode_GET_LENGTH(key)
    kind = PyUnicode_KIND(key)
    size = n * (kind + 1)  # UTF-8 needs at most 2 bytes per UCS1 code point, 3 per UCS2, 4 per UCS4
    if size > UTF8_STACK_BYTES:
        buffer = <uint8_t*>malloc(size)
        if buffer == NULL:
            raise MemoryError(f"no memory to encode a str key of {n} characters")
    length = encode_utf8(kind, PyUnicode_DATA(key), n, buffer)
    if length >= 0:
        out[0] = hash_bytes(hasher, buffer, length)
    if buffer != stack:
        free(buffer)
    if length < 0:
        raise_unencodable_str(key)
    return 0


cdef inline int raise_unencodable_str(object key) except -1:
    """ValueError for a str key that UTF-8 cannot encode: it holds a lone surrogate (U+D800..U+DFFF, as left by
    ``bytes.decode(errors="surrogateescape")`` or a broken UTF-16 pair). The message names the key, where the
    surrogate is, and what to pass instead."""
    cdef Py_ssize_t position = 0
    for position in range(len(key)):
        if 0xD800 <= ord(key[position]) <= 0xDFFF:
            break
    shown = repr(str(key)) if len(key) <= 40 else repr(str(key[:40])) + "..."
    raise ValueError(f"key {shown} cannot be hashed: its character {key[position]!r} at position {position} is a "
                     f"lone surrogate, which UTF-8 cannot encode; pass the key as bytes instead, e.g. "
                     f"key.encode('utf-8', 'surrogatepass')")


cdef inline bint hash_latin1_str(object key, Hasher hasher, uint64_t* out) noexcept:
    """An exact str of code points below U+0100 (UCS1) and up to LATIN1_STACK_CHARS characters, UTF-8 encoded on
    this call's stack. False otherwise."""
    cdef uint8_t utf8[2 * LATIN1_STACK_CHARS]
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(key)
    if not PyUnicode_CheckExact(key) or PyUnicode_KIND(key) != 1 or n > LATIN1_STACK_CHARS:
        return False  # (a legacy str not yet ready has kind 0)
    out[0] = hash_bytes(hasher, utf8, bw_latin1_to_utf8(<const uint8_t*>PyUnicode_DATA(key), n, utf8))
    return True


cdef inline bint hash_common_str(object key, Hasher hasher, uint64_t* out) noexcept:
    """The common cases, inlined into the hot paths: an exact, compact ASCII str, read in place; else
    hash_latin1_str (a function of its own, so that this test stays small). False for other keys."""
    if PyUnicode_CheckExact(key) and PyUnicode_IS_COMPACT_ASCII(key):
        out[0] = hash_bytes(hasher, PyUnicode_DATA(key), PyUnicode_GET_LENGTH(key))
        return True
    return hash_latin1_str(key, hasher, out)


cdef inline int hash_key(object key, Hasher hasher, uint64_t* out) except -1:
    """Write the 64-bit hash of one key to out[0]; TypeError for a value that is not a key."""
    cdef Py_buffer view
    if PyUnicode_CheckExact(key) and PyUnicode_IS_COMPACT_ASCII(key):  # the common case: read it in place
        out[0] = hash_bytes(hasher, PyUnicode_DATA(key), PyUnicode_GET_LENGTH(key))
        return 0
    if PyUnicode_Check(key):
        return hash_str(key, hasher, out)
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
