# cython: freethreading_compatible = False
"""Hashing for the filters and for Python code.

- Batches (`Batch`, `make_batch`): what ``update``/``contains_many`` accept (lists, tuples, iterators, numpy integer,
  'S' and 'U' arrays), normalised to a form the kernels read without Python objects, and hashed chunk by chunk
  (`HashStream`, `hash_fixed`) or all at once (`hash_many`): the compiled cores (``bloom.pyx``, ``counting.pyx``)
  share them.
- XXH64 and XXH3-64 of byte buffers (the file format's checksums) and the 64-bit hash of one key under a hash scheme
  (docs/architecture.md).
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_ANY_CONTIGUOUS
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_CheckExact
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

from bloomwise._native.hashing cimport (
    Hasher, hash_bytes, check_scheme, hash_key, hash_object, hash_common_str, hash_int64, hash_uint64,
    SCHEME_XXH64, SCHEME_XXH3, BW_INT_DOMAIN, BW_NEG_INT_DOMAIN,
)
from bloomwise._native.layouts cimport bw_prefetch_read
from bloomwise._native.storage cimport scratch_uint64
from bloomwise._native.support cimport numpy

cdef extern from "simd.h" nogil:
    int bw_simd_available()
    int bw_simd512_available()
    void bw_simd_hash_u64(const uint64_t* keys, uint64_t* out, size_t n, uint64_t seed)
    void bw_simd_hash_i64(const int64_t* keys, uint64_t* out, size_t n, uint64_t seed_nonneg, uint64_t seed_neg)

cdef enum:
    OBJECT_PREFETCH_DISTANCE = 8  # list items ahead whose objects are requested

# ---- the kernel set ----------------------------------------------------------------------------------------------
KERNEL_SETS = ("avx2+avx512", "avx2", "scalar")  # best first; every set computes the same bits and hashes
ENV_KERNELS = "BLOOMWISE_KERNELS"


def kernel_sets():
    """The kernel sets this CPU can run, best first (a subset of KERNEL_SETS; "scalar" always)."""
    avx2 = bw_simd_available()
    return tuple(name for name, runs in zip(KERNEL_SETS, (avx2 and bw_simd512_available(), avx2, True)) if runs)


def _chosen_kernels():
    """The kernel set named by $BLOOMWISE_KERNELS ("auto" or unset: the best this CPU runs).

    A value that names no set, or a set this CPU lacks, raises ValueError at import: the variable pins what runs
    (benchmarks, reproducing one code path), so a typo must not silently run another set."""
    import os
    raw = os.environ.get(ENV_KERNELS, "")
    name = raw.strip().lower()
    available = kernel_sets()
    if name in ("", "auto"):
        return available[0]
    if name not in KERNEL_SETS:
        raise ValueError(f"{ENV_KERNELS}={raw!r} is not a kernel set: expected one of auto, "
                         + ", ".join(KERNEL_SETS))
    if name not in available:
        raise ValueError(f"{ENV_KERNELS}={raw!r}: this CPU cannot run that kernel set; it runs "
                         + ", ".join(available) + " (or auto)")
    return name


KERNELS = _chosen_kernels()  # the set chosen at import; bloom.batch_kernels() reports what is in use now
cdef bint SIMD512_ALLOWED = KERNELS == "avx2+avx512"
cdef bint use_simd512 = SIMD512_ALLOWED  # numpy integer batches: XXH3 eight keys at a time (the same hashes)


cdef bint simd512_in_use() noexcept nogil:
    """Whether the AVX-512 batch kernels are in use (``bloom.pyx`` selects blocks with them too)."""
    return use_simd512


def _use_simd512(bint enabled):
    """Tests (through ``bloom._use_simd``): switch the AVX-512 kernels off, or back on where the chosen kernel set
    has them."""
    global use_simd512
    use_simd512 = enabled and SIMD512_ALLOWED


# ---- one key, byte buffers ---------------------------------------------------------------------------------------
cdef Hasher make_hasher(uint64_t seed, int scheme) except *:
    check_scheme(scheme)
    cdef Hasher hasher
    hasher.seed = seed
    hasher.scheme = scheme
    return hasher


cdef uint64_t _buffer_hash(object data, Hasher hasher) except? 0:
    """The byte hash of a bytes-like object, without the GIL (payloads can be gigabytes)."""
    cdef Py_buffer view
    cdef uint64_t result
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            result = hash_bytes(hasher, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return result


def xxh64(data, uint64_t seed=0):
    """XXH64 of a bytes-like object (bit-exact with the reference implementation)."""
    return _buffer_hash(data, make_hasher(seed, SCHEME_XXH64))


def xxh3(data, uint64_t seed=0):
    """XXH3-64 of a bytes-like object (bit-exact with the reference implementation)."""
    return _buffer_hash(data, make_hasher(seed, SCHEME_XXH3))


def key_hash(key, uint64_t seed=0, int scheme=SCHEME_XXH3):
    """The 64-bit hash bloomwise uses for one key under a hash scheme id (see docs/architecture.md)."""
    cdef uint64_t h
    hash_key(key, make_hasher(seed, scheme), &h)
    return h


# ---- batch inputs ------------------------------------------------------------------------------------------
cdef class Batch:
    """Keys in a form the kernels read without Python objects (numpy values), or a list of Python keys."""

    def __dealloc__(self):
        if self.has_view:
            PyBuffer_Release(&self.view)

    cdef int take_buffer(self, object array) except -1:
        PyObject_GetBuffer(array, &self.view, PyBUF_ANY_CONTIGUOUS)
        self.has_view = True
        self.keys.data = <const uint8_t*>self.view.buf
        self.items = array
        return 0


cdef Batch make_batch(object keys, bint objects_only):
    """Normalise update()/contains_many() input; TypeError with a hint for what cannot be keys.

    objects_only: the filter has a key function, so numpy values are handed to it one by one too.
    """
    cdef Batch batch = Batch.__new__(Batch)
    if isinstance(keys, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"expected an iterable of keys, got a single {type(keys).__name__}: use add() or `in` "
                        "for one key, or wrap it in a list")
    if hasattr(keys, "__array_interface__") and hasattr(keys, "dtype"):
        batch.shape = keys.shape
        if objects_only:
            keys = keys.reshape(-1).tolist()
        else:
            return numpy_batch(batch, keys)
    if not isinstance(keys, (list, tuple)):
        if isinstance(keys, (int, float)) or keys is None:
            raise TypeError(f"expected an iterable of keys, got {type(keys).__name__}")
        try:
            keys = list(keys)
        except TypeError:
            raise TypeError(f"expected an iterable of keys (list, tuple, numpy array, iterator), "
                            f"got {type(keys).__name__}") from None
    batch.keys.kind = BATCH_OBJECTS
    batch.items = keys
    batch.keys.length = len(keys)
    return batch


cdef Batch numpy_batch(Batch batch, object array):
    np = numpy()
    flat = array.reshape(-1)
    kind = flat.dtype.kind
    if kind == "u":
        flat = np.ascontiguousarray(flat, dtype=np.uint64)
        batch.keys.kind = BATCH_UINT64
    elif kind == "i":
        flat = np.ascontiguousarray(flat, dtype=np.int64)
        batch.keys.kind = BATCH_INT64
    elif kind == "S":
        flat = np.ascontiguousarray(flat)
        batch.keys.kind = BATCH_BYTES
        batch.keys.width = flat.dtype.itemsize
    elif kind == "U":
        flat = np.ascontiguousarray(flat, dtype=np.dtype(f"=U{max(flat.dtype.itemsize // 4, 1)}"))
        batch.keys.kind = BATCH_UNICODE
        batch.keys.width = flat.dtype.itemsize // 4
    elif kind == "O":
        batch.keys.kind = BATCH_OBJECTS
        batch.items = flat.tolist()
        batch.keys.length = len(batch.items)
        return batch
    elif kind == "b":
        raise TypeError("a boolean array is not a batch of keys (did you mean a mask?); "
                        "convert it explicitly, e.g. keys.astype(np.uint8)")
    else:
        raise TypeError(f"numpy arrays of dtype {flat.dtype} are not keys: use integer, bytes ('S') or "
                        "str ('U') arrays (floats: convert explicitly, e.g. arr.view(np.uint64))")
    batch.keys.length = flat.shape[0]
    batch.items = flat
    if batch.keys.length:
        batch.take_buffer(flat)
    if batch.keys.kind == BATCH_UNICODE:
        validate_unicode(&batch.keys)  # before any kernel runs, so nothing is half-added
    return batch


cdef Py_ssize_t ucs4_to_utf8(const uint32_t* src, Py_ssize_t n, uint8_t* out) noexcept nogil:
    """UTF-8 of n code points (trailing NULs already stripped); -1 for a surrogate or a value > 0x10FFFF."""
    cdef Py_ssize_t i, j = 0
    cdef uint32_t c
    for i in range(n):
        c = src[i]
        if c < 0x80:
            out[j] = <uint8_t>c; j += 1
        elif c < 0x800:
            out[j] = <uint8_t>(0xC0 | (c >> 6)); out[j + 1] = <uint8_t>(0x80 | (c & 0x3F)); j += 2
        elif c < 0x10000:
            if 0xD800 <= c <= 0xDFFF:
                return -1
            out[j] = <uint8_t>(0xE0 | (c >> 12)); out[j + 1] = <uint8_t>(0x80 | ((c >> 6) & 0x3F))
            out[j + 2] = <uint8_t>(0x80 | (c & 0x3F)); j += 3
        elif c <= 0x10FFFF:
            out[j] = <uint8_t>(0xF0 | (c >> 18)); out[j + 1] = <uint8_t>(0x80 | ((c >> 12) & 0x3F))
            out[j + 2] = <uint8_t>(0x80 | ((c >> 6) & 0x3F)); out[j + 3] = <uint8_t>(0x80 | (c & 0x3F)); j += 4
        else:
            return -1
    return j


cdef inline Py_ssize_t stripped_length(const FixedKeys* keys, Py_ssize_t index) noexcept nogil:
    """Length of element `index` without its trailing NULs (bytes for 'S', code points for 'U')."""
    cdef Py_ssize_t n = keys.width
    cdef const uint8_t* p
    cdef const uint32_t* u
    if keys.kind == BATCH_BYTES:
        p = keys.data + index * keys.width
        while n > 0 and p[n - 1] == 0:
            n -= 1
    else:
        u = (<const uint32_t*>keys.data) + index * keys.width
        while n > 0 and u[n - 1] == 0:
            n -= 1
    return n


cdef void hash_fixed(const FixedKeys* keys, Py_ssize_t start, Py_ssize_t count, Hasher hasher,
                     uint64_t* out, uint8_t* scratch) noexcept nogil:
    """Hash numpy keys [start, start+count) without the GIL (Unicode was validated by numpy_batch)."""
    cdef Py_ssize_t i, n
    if keys.kind == BATCH_HASHES:
        memcpy(out, (<const uint64_t*>keys.data) + start, count * sizeof(uint64_t))
    elif keys.kind == BATCH_UINT64:
        if use_simd512 and hasher.scheme == SCHEME_XXH3:
            bw_simd_hash_u64((<const uint64_t*>keys.data) + start, out, count, hasher.seed ^ BW_INT_DOMAIN)
            return
        for i in range(count):
            out[i] = hash_uint64((<const uint64_t*>keys.data)[start + i], hasher)
    elif keys.kind == BATCH_INT64:
        if use_simd512 and hasher.scheme == SCHEME_XXH3:
            bw_simd_hash_i64((<const int64_t*>keys.data) + start, out, count, hasher.seed ^ BW_INT_DOMAIN,
                             hasher.seed ^ BW_NEG_INT_DOMAIN)
            return
        for i in range(count):
            out[i] = hash_int64((<const int64_t*>keys.data)[start + i], hasher)
    elif keys.kind == BATCH_BYTES:
        for i in range(count):
            out[i] = hash_bytes(hasher, keys.data + (start + i) * keys.width, stripped_length(keys, start + i))
    else:
        for i in range(count):
            n = ucs4_to_utf8((<const uint32_t*>keys.data) + (start + i) * keys.width,
                             stripped_length(keys, start + i), scratch)
            out[i] = hash_bytes(hasher, scratch, n)


cdef int validate_unicode(const FixedKeys* keys) except -1:
    cdef uint8_t* scratch = <uint8_t*>malloc(4 * keys.width + 4)
    cdef Py_ssize_t i, bad = -1
    if scratch == NULL:
        raise MemoryError()
    with nogil:
        for i in range(keys.length):
            if ucs4_to_utf8((<const uint32_t*>keys.data) + i * keys.width, stripped_length(keys, i), scratch) < 0:
                bad = i
                break
    free(scratch)
    if bad >= 0:
        raise ValueError(f"key {bad} of the array cannot be hashed: it holds a lone surrogate (U+D800..U+DFFF) or a "
                         f"code point above U+10FFFF, which UTF-8 cannot encode; pass such keys as bytes instead, "
                         f"e.g. key.encode('utf-8', 'surrogatepass')")
    return 0


cdef class HashStream:
    """Hashes a batch chunk by chunk into a reusable buffer (the GIL is needed only for Python objects)."""

    def __cinit__(self, Batch batch, uint64_t seed, int scheme, object key_func):
        self.batch = batch
        self.hasher = make_hasher(seed, scheme)
        self.key_func = key_func
        self.hashes = <uint64_t*>malloc(CHUNK * sizeof(uint64_t))
        self.scratch = <uint8_t*>malloc(4 * batch.keys.width + 4)
        if self.hashes == NULL or self.scratch == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.hashes)
        free(self.scratch)

    cdef int hash_objects(self, Py_ssize_t start, Py_ssize_t count, uint64_t* out) except -1:
        cdef Py_ssize_t i
        cdef object items = self.batch.items
        cdef object key
        if self.key_func is None and PyList_CheckExact(items):
            # Another thread may shrink the list while a kernel runs without the GIL: check before reading.
            if PyList_GET_SIZE(items) < start + count:
                raise RuntimeError("the list of keys changed size during the operation")
            for i in range(count):
                if i + OBJECT_PREFETCH_DISTANCE < count:  # the key objects are scattered: ask for them early
                    bw_prefetch_read(<void*>PyList_GET_ITEM(items, start + i + OBJECT_PREFETCH_DISTANCE))
                key = <object>PyList_GET_ITEM(items, start + i)
                if not hash_common_str(key, self.hasher, &out[i]):
                    hash_key(key, self.hasher, &out[i])
            return 0
        for i in range(count):
            hash_object(items[start + i], self.hasher, self.key_func, &out[i])
        return 0


# ---- batch hashing ---------------------------------------------------------------------------------------------
def hash_range(Batch batch, uint64_t seed, int scheme, hashes, Py_ssize_t lo, Py_ssize_t hi):
    """Hash numpy keys [lo, hi) into hashes[lo:hi] without the GIL (one thread's share)."""
    cdef uint64_t[::1] out = hashes
    cdef Hasher hasher = make_hasher(seed, scheme)
    cdef uint8_t* scratch = <uint8_t*>malloc(4 * batch.keys.width + 4)
    if scratch == NULL:
        raise MemoryError()
    with nogil:
        hash_fixed(&batch.keys, lo, hi - lo, hasher, &out[lo], scratch)
    free(scratch)


cdef Batch prehashed_batch(object hashes):
    """A batch of already computed hashes (a contiguous numpy uint64 array)."""
    cdef Batch batch = Batch.__new__(Batch)
    batch.keys.kind = BATCH_HASHES
    batch.keys.length = hashes.shape[0]
    batch.items = hashes
    if batch.keys.length:
        batch.take_buffer(hashes)
    return batch


cdef object hash_batch(Batch batch, Hasher hasher, object key_func):
    """The 64-bit hashes of every key of a batch, as a flat numpy uint64 array."""
    hashes = scratch_uint64(batch.keys.length)
    cdef uint64_t[::1] out = hashes
    cdef HashStream stream
    if batch.keys.length and batch.keys.kind == BATCH_OBJECTS:
        stream = HashStream(batch, hasher.seed, hasher.scheme, key_func)
        stream.hash_objects(0, batch.keys.length, &out[0])
    elif batch.keys.length:
        hash_range(batch, hasher.seed, hasher.scheme, hashes, 0, batch.keys.length)
    return hashes


def hash_many(keys, uint64_t seed=0, key=None, int scheme=SCHEME_XXH3):
    """The 64-bit hashes of a batch, exactly as the filters hash it (the counting filters build on this):
    a numpy uint64 array of a numpy input's shape (flat for a list, tuple or iterator). ``key``: the filter's
    key function, or None."""
    cdef Batch batch = make_batch(keys, key is not None)
    hashes = hash_batch(batch, make_hasher(seed, scheme), key)
    return hashes.reshape(batch.shape) if batch.shape is not None else hashes
