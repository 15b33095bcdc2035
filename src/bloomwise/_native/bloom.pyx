# cython: freethreading_compatible = False
"""Compiled core of the bit filters: single-key and batch kernels, threads (storage is in ``storage.pyx``, batches
and their hashing in ``hashes.pyx``).

Private: `bloomwise.BloomFilter` subclasses `BloomCore` and adds the Python-level API. The hot methods
(`add`, `__contains__`, `update`, `contains_many`) live here so a call costs one C method dispatch.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t, uintptr_t
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset, memcmp, memcpy

from bloomwise._native.hashing cimport (
    Hasher, check_scheme, hash_key, hash_object, hash_ascii_str, key_type_message, SCHEME_XXH64, SCHEME_XXH3,
)
from bloomwise._native.hashes cimport (
    Batch, FixedKeys, HashStream, make_batch, prehashed_batch, hash_fixed, hash_batch, simd512_in_use,
    CHUNK, BATCH_OBJECTS, BATCH_UINT64, BATCH_INT64, BATCH_HASHES,
)
from bloomwise._native.storage cimport AlignedBuffer, scratch_uint64
from bloomwise._native.support cimport attach_buffer, check_int, check_threads, numpy
from bloomwise._native.core cimport PositionsCore
from bloomwise._native.layouts cimport (
    Geometry, geometry_init, set_bits, test_bits, prefetch_key, block_index, second_hash, probe, bw_prefetch_write,
    BW_SALT,
    LAYOUT_CLASSIC, LAYOUT_PARTITIONED, LAYOUT_BLOCKED, MAX_HASHES, MAX_BLOCKED_HASHES, BLOCK_WORDS, BLOCK_BITS,
)

from bloomwise._native import hashes as _hashes
from bloomwise._native.hashes import hash_many, hash_range  # hash_many: re-exported (redis.py, _positions.py, ...)

cdef extern from "common.h" nogil:
    size_t bw_select_blocks(const uint64_t* hs, size_t n, uint64_t num_blocks, uint64_t lo, uint64_t hi,
                            uint64_t* out)
    void bw_lock(int* flag)
    void bw_unlock(int* flag)
    int __builtin_popcountll(unsigned long long)

cdef extern from "simd.h" nogil:
    int bw_simd_available()
    uint64_t bw_simd_add(uint64_t* words, uint64_t num_blocks, uint32_t num_hashes, const uint64_t* hs, size_t n,
                         size_t distance)
    void bw_simd_test(const uint64_t* words, uint64_t num_blocks, uint32_t num_hashes, const uint64_t* hs, size_t n,
                      uint8_t* out, size_t distance)
    size_t bw_simd_select_blocks(const uint64_t* hs, size_t n, uint64_t num_blocks, uint64_t lo, uint64_t hi,
                                 uint64_t* out)
    int bw_simd_add_one(uint64_t* words, uint64_t num_blocks, uint32_t num_hashes, uint64_t h)
    int bw_simd_test_one(const uint64_t* words, uint64_t num_blocks, uint32_t num_hashes, uint64_t h)

cdef enum:
    PREFETCH_DISTANCE = 32  # keys ahead whose cache lines are requested

MAX_NUM_BITS = 2 ** 48  # 32 TiB of bits: far beyond any real filter, small enough to catch nonsense
cdef bint SIMD_AVAILABLE = bw_simd_available()
cdef bint use_simd = SIMD_AVAILABLE        # blocked batches: the AVX2 bit kernels of simd.h (the same bits)


def batch_kernels():
    """The SIMD batch kernels in use: "avx2" (blocked layout bits), "avx512" (XXH3 of numpy integers), both
    joined by "+", or "scalar"."""
    names = [name for name, used in (("avx2", use_simd), ("avx512", simd512_in_use())) if used]
    return "+".join(names) or "scalar"


def _use_simd(bint enabled):
    """Tests: switch the SIMD batch kernels off (or back on, where the CPU has them). Returns the previous
    setting."""
    global use_simd
    previous = use_simd or simd512_in_use()
    use_simd = enabled and SIMD_AVAILABLE
    _hashes._use_simd512(enabled)
    return previous


# ---- kernels over a chunk of hashes ----------------------------------------------------------------------
cdef uint64_t add_hashes(const Geometry* g, uint64_t* words, const uint64_t* hs, Py_ssize_t n) noexcept nogil:
    """Set the bits of n keys, requesting cache lines PREFETCH_DISTANCE keys ahead; returns how many were new."""
    cdef Py_ssize_t i
    cdef uint64_t new_keys = 0
    if use_simd and g.layout == LAYOUT_BLOCKED:
        return bw_simd_add(words, g.num_blocks, g.num_hashes, hs, n, PREFETCH_DISTANCE if g.prefetch else 0)
    if g.prefetch:
        for i in range(n if n < PREFETCH_DISTANCE else PREFETCH_DISTANCE):
            prefetch_key(g, words, hs[i], True)
    for i in range(n):
        if g.prefetch and i + PREFETCH_DISTANCE < n:
            prefetch_key(g, words, hs[i + PREFETCH_DISTANCE], True)
        new_keys += set_bits(g, words, hs[i])
    return new_keys


cdef void test_hashes(const Geometry* g, const uint64_t* words, const uint64_t* hs, Py_ssize_t n,
                      uint8_t* out) noexcept nogil:
    cdef Py_ssize_t i
    if use_simd and g.layout == LAYOUT_BLOCKED:
        bw_simd_test(words, g.num_blocks, g.num_hashes, hs, n, out, PREFETCH_DISTANCE if g.prefetch else 0)
        return
    if g.prefetch:
        for i in range(n if n < PREFETCH_DISTANCE else PREFETCH_DISTANCE):
            prefetch_key(g, words, hs[i], False)
    for i in range(n):
        if g.prefetch and i + PREFETCH_DISTANCE < n:
            prefetch_key(g, words, hs[i + PREFETCH_DISTANCE], False)
        out[i] = test_bits(g, words, hs[i])


cdef inline bint add_key(const Geometry* g, uint64_t* words, uint64_t h) noexcept nogil:
    """Set one key's bits (add); True when one was 0. Blocked: the AVX2 mask where the CPU has it."""
    if use_simd and g.layout == LAYOUT_BLOCKED:
        return bw_simd_add_one(words, g.num_blocks, g.num_hashes, h)
    return set_bits(g, words, h)


cdef inline bint test_key(const Geometry* g, const uint64_t* words, uint64_t h) noexcept nogil:
    """Whether all of one key's bits are set (`in`). Blocked: the AVX2 mask where the CPU has it."""
    if use_simd and g.layout == LAYOUT_BLOCKED:
        return bw_simd_test_one(words, g.num_blocks, g.num_hashes, h)
    return test_bits(g, words, h)


cdef uint64_t add_fixed(const Geometry* g, uint64_t* words, const FixedKeys* keys, Py_ssize_t start,
                        Py_ssize_t stop, Hasher hasher, uint64_t* hs, uint8_t* scratch) noexcept nogil:
    cdef uint64_t new_keys = 0
    cdef Py_ssize_t count
    while start < stop:
        count = min(<Py_ssize_t>CHUNK, stop - start)
        hash_fixed(keys, start, count, hasher, hs, scratch)
        new_keys += add_hashes(g, words, hs, count)
        start += count
    return new_keys


cdef void test_fixed(const Geometry* g, const uint64_t* words, const FixedKeys* keys, Py_ssize_t start,
                     Py_ssize_t stop, Hasher hasher, uint64_t* hs, uint8_t* scratch, uint8_t* out) noexcept nogil:
    cdef Py_ssize_t count
    while start < stop:
        count = min(<Py_ssize_t>CHUNK, stop - start)
        hash_fixed(keys, start, count, hasher, hs, scratch)
        test_hashes(g, words, hs, count, out + start)
        start += count


cdef uint64_t add_hashes_in_range(const Geometry* g, uint64_t* words, const uint64_t* hs, Py_ssize_t n,
                                  uint64_t lo, uint64_t hi, uint64_t* scratch) noexcept nogil:
    """Set only the bits in [lo, hi) of n keys (classic and partitioned threaded inserts: each thread owns a
    range of whole 64-bit words). The probes that fall in range are gathered first (branch-free), then applied
    with prefetch. Returns whether any bit changed.
    """
    cdef Py_ssize_t i, j, count = 0
    cdef uint64_t step, pos, bit, changed = 0
    for i in range(n):
        step = second_hash(hs[i])
        for j in range(g.num_hashes):
            pos = probe(g, hs[i], step, <uint32_t>j)
            scratch[count] = pos
            count += (pos >= lo) & (pos < hi)
    for i in range(count):
        if i + PREFETCH_DISTANCE < count:
            bw_prefetch_write(words + (scratch[i + PREFETCH_DISTANCE] >> 6))
        bit = (<uint64_t>1) << (scratch[i] & 63)
        changed |= bit & ~words[scratch[i] >> 6]
        words[scratch[i] >> 6] |= bit
    return changed != 0


cdef inline size_t select_blocks(const uint64_t* hs, size_t n, uint64_t num_blocks, uint64_t lo, uint64_t hi,
                                uint64_t* out) noexcept nogil:
    """The hashes among hs[0..n) whose block lies in [lo, hi), copied in order to out (room for n); how many."""
    if simd512_in_use():
        return bw_simd_select_blocks(hs, n, num_blocks, lo, hi, out)
    return bw_select_blocks(hs, n, num_blocks, lo, hi, out)


cdef uint64_t add_owned_blocks(const Geometry* g, uint64_t* words, const FixedKeys* keys, Hasher hasher,
                               uint64_t lo, uint64_t hi, uint64_t* hs, uint64_t* owned,
                               uint8_t* scratch) noexcept nogil:
    """Blocked threaded inserts: one thread's share. It reads the whole batch but sets the bits only of the keys
    whose block lies in [lo, hi), gathered per chunk without branches; returns how many of them were new. The
    threads own disjoint ranges of blocks, so none ever writes another's cache lines, and each key is counted
    by exactly one thread.
    """
    cdef Py_ssize_t start = 0, count, c
    cdef const uint64_t* src
    cdef uint64_t new_keys = 0
    while start < keys.length:
        count = min(<Py_ssize_t>CHUNK, keys.length - start)
        if keys.kind == BATCH_HASHES:
            src = (<const uint64_t*>keys.data) + start
        else:
            hash_fixed(keys, start, count, hasher, hs, scratch)
            src = hs
        c = select_blocks(src, count, g.num_blocks, lo, hi, owned)
        new_keys += add_hashes(g, words, owned, c)
        start += count
    return new_keys


# ---- the filter ---------------------------------------------------------------------------------------------
@cython.auto_pickle(False)
cdef class BloomCore(PositionsCore):
    """m bits, k probes per key, one of three layouts. Subclassed by bloomwise.BloomFilter."""
    cdef uint64_t* _words
    cdef uint64_t _keys_added   # insertions that set at least one new bit (the capacity warning counts these)
    cdef uint64_t _insertions   # every key added, repeats included (num_keys)
    cdef bint _writable
    cdef Py_buffer _view
    cdef bint _has_view

    def __dealloc__(self):
        if self._has_view:
            PyBuffer_Release(&self._view)

    def _init_core(self, num_bits, num_hashes, int layout, seed=0, storage=None, keys_added=0, key=None,
                   int hash_scheme=SCHEME_XXH3, insertions=None):
        """Set the geometry and the storage (new zeroed memory, or a buffer such as a mapped file's payload).

        ``keys_added``: insertions that set a new bit so far; ``insertions``: all keys added (default: the same)."""
        if self._ready:
            raise RuntimeError("filter already initialised")
        if layout not in (LAYOUT_CLASSIC, LAYOUT_PARTITIONED, LAYOUT_BLOCKED):
            raise ValueError(f"unknown layout id {layout}")
        num_bits = check_int("num_bits", num_bits, 1, MAX_NUM_BITS)
        max_hashes = MAX_BLOCKED_HASHES if layout == LAYOUT_BLOCKED else MAX_HASHES
        num_hashes = check_int("num_hashes", num_hashes, 1, max_hashes)
        self._set_hashing(seed, key, hash_scheme)
        if layout == LAYOUT_PARTITIONED and num_bits < num_hashes:
            raise ValueError(f"num_bits must be at least num_hashes ({num_hashes}) for the partitioned layout, "
                             f"got {num_bits}")
        if layout == LAYOUT_BLOCKED and num_bits % BLOCK_BITS:
            raise ValueError(f"num_bits must be a multiple of 512 for the blocked layout, got {num_bits} "
                             f"(nearest: {(num_bits + BLOCK_BITS - 1) // BLOCK_BITS * BLOCK_BITS})")
        geometry_init(&self._g, num_bits, num_hashes, layout)
        self._nbytes = (num_bits + 63) // 64 * 8
        self._keys_added = keys_added
        self._insertions = keys_added if insertions is None else insertions
        self._attach(AlignedBuffer(self._nbytes) if storage is None else storage)
        self._ready = True

    cdef int _attach(self, object storage) except -1:
        self._writable = attach_buffer(storage, &self._view, self._nbytes, "the filter needs") == 1
        self._has_view = True
        self._words = <uint64_t*>self._view.buf
        self._storage = storage
        return 0

    cdef inline int _check_ready(self) except -1:
        if not self._ready:
            raise RuntimeError("filter is not initialised: build it with BloomFilter(...), from_size() or load()")
        return 0

    cdef inline int _check_writable(self) except -1:
        self._check_ready()
        if not self._writable:
            raise TypeError("this filter is read-only (opened from a file with mode 'r'); "
                            "open it with mode='r+' or load() a private copy to change it")
        return 0

    cdef int _count_new(self, uint64_t new_keys) except -1:
        self._keys_added += new_keys
        if self._capacity_limit and not self._warned and self._keys_added > self._capacity_limit:
            self._warned = True
            self._over_capacity()
        return 0

    # -- single keys --------------------------------------------------------------------------------------
    def add(self, key):
        """Add a key. Returns True when it was certainly not present before (some bit changed), else False. O(k)."""
        cdef uint64_t h
        cdef bint new_key
        if self._key_func is not None:
            hash_object(key, self._hasher, self._key_func, &h)
        elif not hash_ascii_str(key, self._hasher, &h):
            hash_key(key, self._hasher, &h)
        if not self._writable:
            self._check_writable()
        self._lock_writer()
        new_key = add_key(&self._g, self._words, h)
        bw_unlock(&self._lock)
        self._insertions += 1
        if new_key:
            self._keys_added += 1
            if self._keys_added > self._capacity_limit and self._capacity_limit and not self._warned:
                self._count_new(0)
        return new_key

    def __contains__(self, key):
        """`key in f`: False means certainly absent; True means "might be present". O(k)."""
        cdef uint64_t h
        if self._key_func is not None:
            hash_object(key, self._hasher, self._key_func, &h)
        elif not hash_ascii_str(key, self._hasher, &h):
            hash_key(key, self._hasher, &h)
        if not self._ready:
            self._check_ready()
        return test_key(&self._g, self._words, h)

    # -- batches --------------------------------------------------------------------------------------------
    def update(self, keys, *, threads=None):
        """Add every key of an iterable or numpy array (integer, 'S' or 'U' dtype). Returns None.

        The bits are set without the GIL; `threads=N` splits the work over N threads.
        """
        self._check_writable()
        cdef Batch batch = make_batch(keys, self._key_func is not None)
        cdef int nthreads = check_threads(threads)
        self._insertions += <uint64_t>batch.keys.length
        if nthreads > 1 and batch.keys.length >= 4 * CHUNK:
            self._update_threaded(batch, nthreads)
            return None
        cdef HashStream stream = HashStream(batch, self._hasher.seed, self._hasher.scheme, self._key_func)
        cdef Py_ssize_t start = 0, count, n = batch.keys.length
        cdef uint64_t new_keys = 0
        if batch.keys.kind != BATCH_OBJECTS:  # numpy values: the whole batch without the GIL
            with nogil:
                bw_lock(&self._lock)
                new_keys = add_fixed(&self._g, self._words, &batch.keys, 0, n, self._hasher,
                                     stream.hashes, stream.scratch)
                bw_unlock(&self._lock)
        else:
            while start < n:
                count = min(<Py_ssize_t>CHUNK, n - start)
                stream.hash_objects(start, count, stream.hashes)
                with nogil:
                    bw_lock(&self._lock)
                    new_keys += add_hashes(&self._g, self._words, stream.hashes, count)
                    bw_unlock(&self._lock)
                start += count
        self._count_new(new_keys)
        return None

    def contains_many(self, keys, *, threads=None):
        """A numpy bool array: whether each key might be present (the shape of a numpy input)."""
        self._check_ready()
        cdef Batch batch = make_batch(keys, self._key_func is not None)
        cdef int nthreads = check_threads(threads)
        np = numpy()
        result = np.zeros(batch.keys.length, dtype=np.bool_)
        if nthreads > 1 and batch.keys.length >= 4 * CHUNK:
            self._contains_threaded(batch, result, nthreads)
        elif batch.keys.length:
            self._contains_range(batch, result, 0, batch.keys.length)
        return result.reshape(batch.shape) if batch.shape is not None else result

    def _contains_range(self, Batch batch, result, Py_ssize_t start, Py_ssize_t stop):
        cdef uint8_t[::1] out = result.view(numpy().uint8)
        cdef HashStream stream = HashStream(batch, self._hasher.seed, self._hasher.scheme, self._key_func)
        cdef Py_ssize_t count
        if batch.keys.kind != BATCH_OBJECTS:
            with nogil:
                test_fixed(&self._g, self._words, &batch.keys, start, stop, self._hasher,
                           stream.hashes, stream.scratch, &out[0])
            return
        while start < stop:
            count = min(<Py_ssize_t>CHUNK, stop - start)
            stream.hash_objects(start, count, stream.hashes)
            with nogil:
                test_hashes(&self._g, self._words, stream.hashes, count, &out[start])
            start += count

    # -- threads -----------------------------------------------------------------------------------------------
    def _contains_threaded(self, Batch batch, result, int nthreads):
        if batch.keys.kind == BATCH_OBJECTS:  # Python objects: hash with the GIL, then test in parallel
            batch = make_batch(hash_batch(batch, self._hasher, self._key_func), False)
            run_threads(nthreads, batch.keys.length, lambda lo, hi: self._test_prehashed(batch, result, lo, hi))
        else:
            run_threads(nthreads, batch.keys.length, lambda lo, hi: self._contains_range(batch, result, lo, hi))

    def _test_prehashed(self, Batch batch, result, Py_ssize_t lo, Py_ssize_t hi):
        cdef uint8_t[::1] out = result.view(numpy().uint8)
        cdef const uint64_t* hs = <const uint64_t*>batch.keys.data
        with nogil:
            test_hashes(&self._g, self._words, hs + lo, hi - lo, &out[lo])

    def _update_threaded(self, Batch batch, int nthreads):
        """Insert a batch with nthreads threads; no two threads ever write the same word at the same time.

        Blocked: each thread owns a range of whole blocks (cache lines) and sets the bits of the keys whose block
        lies in it (add_owned_blocks). Every thread reads the whole batch: numpy integers it hashes itself (eight
        at a time, cheaper than sharing the hashes); other keys are hashed once beforehand, in parallel. Each key
        has one owner, so the count of new keys stays exact. Classic and partitioned (k words all over the array
        per key): a filter no larger than the batch's hashes (8 bytes a key) is filled by slices of the keys, one
        thread in this filter and each other one in a private zeroed copy, OR-merged at the end; a larger one is
        cut into ranges of whole words, and each thread sets, for every key, the bits that fall in its range.
        """
        if batch.keys.kind == BATCH_OBJECTS:  # Python objects are hashed once, with the GIL
            batch = prehashed_batch(hash_batch(batch, self._hasher, self._key_func))
        blocked = self._g.layout == LAYOUT_BLOCKED
        private_copies = not blocked and self._nbytes <= 8 * <uint64_t>batch.keys.length
        integers = batch.keys.kind == BATCH_UINT64 or batch.keys.kind == BATCH_INT64
        if batch.keys.kind != BATCH_HASHES and not private_copies and not (blocked and integers):
            hashes = scratch_uint64(batch.keys.length)
            run_threads(nthreads, batch.keys.length,
                        lambda lo, hi: hash_range(batch, self._hasher.seed, self._hasher.scheme, hashes, lo, hi))
            batch = prehashed_batch(hashes)
        if blocked:
            if isinstance(self._storage, AlignedBuffer) and batch.keys.length >= self._g.num_blocks // 8:
                with nogil:  # the batch touches (nearly) every page anyway
                    (<AlignedBuffer>self._storage).populate()
            blocks = [self._g.num_blocks * t // nthreads for t in range(nthreads + 1)]
            work = lambda t, _: self._add_owned(batch, blocks[t], blocks[t + 1])
        elif private_copies:
            helpers = [self] + [self._empty_like() for _ in range(nthreads - 1)]
            bounds = [batch.keys.length * t // nthreads for t in range(nthreads + 1)]
            work = lambda t, _: helpers[t]._add_slice_unlocked(batch, bounds[t], bounds[t + 1])
        else:
            ranges = self._write_ranges(nthreads)
            work = lambda t, _: self._add_prehashed_range(batch.items, *ranges[t])
        with nogil:
            bw_lock(&self._lock)
        try:
            counts = run_threads(nthreads, nthreads, work)
            if private_copies:
                for helper in helpers[1:]:
                    self._or_unlocked(helper)
        finally:
            bw_unlock(&self._lock)
        if blocked or private_copies:  # blocked: one owner per key; private copies: a repeat may count twice
            self._count_new(sum(counts))
        else:  # a key's bits are spread over the threads: count the batch as new when any bit changed
            self._count_new(batch.keys.length if any(counts) else 0)

    def _empty_like(self):
        """A zeroed BloomCore of the same geometry and hashing (a private copy for one inserting thread)."""
        cdef BloomCore copy = BloomCore.__new__(BloomCore)
        copy._init_core(self._g.num_bits, self._g.num_hashes, self._g.layout, self._hasher.seed,
                        hash_scheme=self._hasher.scheme)
        return copy

    def _add_slice_unlocked(self, Batch batch, Py_ssize_t lo, Py_ssize_t hi):
        """Insert keys [lo, hi) of a numpy or prehashed batch; the caller holds the writer lock (or owns self)."""
        cdef uint64_t new_keys
        cdef HashStream stream = HashStream(batch, self._hasher.seed, self._hasher.scheme, None)  # its buffers
        with nogil:
            new_keys = add_fixed(&self._g, self._words, &batch.keys, lo, hi, self._hasher, stream.hashes,
                                 stream.scratch)
        return new_keys

    cdef int _or_unlocked(self, BloomCore other) except -1:
        cdef uint64_t i, nwords = self._nbytes // 8
        with nogil:
            for i in range(nwords):
                self._words[i] |= other._words[i]
        return 0

    def _write_ranges(self, int nthreads):
        """The bits each of nthreads inserting threads owns (classic and partitioned): [lo, hi), cut at multiples
        of 64, so no two threads ever write the same 64-bit word."""
        units = (self._g.num_bits + 63) // 64
        cuts = [units * t // nthreads * 64 for t in range(nthreads + 1)]
        return [(cuts[t], cuts[t + 1]) for t in range(nthreads)]

    def _add_owned(self, Batch batch, uint64_t lo, uint64_t hi):
        """One thread of a blocked threaded insert: the keys whose block is in [lo, hi)."""
        cdef uint64_t new_keys
        cdef HashStream stream = HashStream(batch, self._hasher.seed, self._hasher.scheme, None)  # its buffers
        cdef uint64_t[::1] owned = scratch_uint64(CHUNK)
        with nogil:
            new_keys = add_owned_blocks(&self._g, self._words, &batch.keys, self._hasher, lo, hi, stream.hashes,
                                        &owned[0], stream.scratch)
        return new_keys

    def _add_prehashed_range(self, hashes, uint64_t lo, uint64_t hi):
        cdef uint64_t[::1] hv = hashes
        cdef Py_ssize_t start = 0, count, n = hv.shape[0]
        cdef uint64_t new_keys = 0
        cdef uint64_t* scratch = <uint64_t*>malloc(CHUNK * MAX_HASHES * sizeof(uint64_t))
        if scratch == NULL:
            raise MemoryError()
        with nogil:
            while start < n:
                count = min(<Py_ssize_t>CHUNK, n - start)
                new_keys += add_hashes_in_range(&self._g, self._words, &hv[start], count, lo, hi, scratch)
                start += count
        free(scratch)
        return new_keys

    # -- whole-array operations ------------------------------------------------------------------------------------
    def _count_set_bits(self):
        cdef uint64_t total = 0, i
        cdef uint64_t nwords = self._nbytes // 8
        self._check_ready()
        with nogil:
            for i in range(nwords):
                total += __builtin_popcountll(self._words[i])
        return total

    def clear(self):
        """Remove every key (all bits to 0)."""
        self._check_writable()
        self._lock_writer()
        memset(self._words, 0, self._nbytes)
        bw_unlock(&self._lock)
        self._keys_added = 0
        self._insertions = 0
        self._warned = False

    def _combine(self, BloomCore other, bint union):
        """In place: self |= other (union) or self &= other. The caller checks compatibility."""
        cdef uint64_t i, nwords = self._nbytes // 8
        self._check_writable()
        if other._nbytes != self._nbytes:
            raise ValueError("filters differ in size")
        with nogil:
            bw_lock(&self._lock)
            if union:
                for i in range(nwords):
                    self._words[i] |= other._words[i]
            else:
                for i in range(nwords):
                    self._words[i] &= other._words[i]
            bw_unlock(&self._lock)

    def _same_bits(self, BloomCore other):
        return other._nbytes == self._nbytes and memcmp(self._words, other._words, self._nbytes) == 0

    def _copy_bits_from(self, data):
        """Overwrite the bits with a bytes-like payload of exactly nbytes."""
        cdef Py_buffer view
        self._check_writable()
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            if <uint64_t>view.len != self._nbytes:
                raise ValueError(f"payload holds {view.len} bytes, the filter needs {self._nbytes}")
            self._lock_writer()
            memcpy(self._words, view.buf, self._nbytes)
            bw_unlock(&self._lock)
        finally:
            PyBuffer_Release(&view)

    def _release_storage(self):
        """Drop the reference to the storage (before a mapped file is closed); the filter is unusable after."""
        self._lock_writer()
        self._ready = False
        self._writable = False
        self._words = NULL
        bw_unlock(&self._lock)
        if self._has_view:
            PyBuffer_Release(&self._view)
            self._has_view = False
        self._storage = None

    def _payload(self):
        """A read-only memoryview of the bit array (little-endian 64-bit words)."""
        self._check_ready()
        return memoryview(self._storage).cast("B")[: self._nbytes].toreadonly()

    def _set_positions(self, positions):
        """Set explicit bit positions (filters built from hash functions); True when any bit changed."""
        cdef uint64_t pos, changed = 0, bit
        self._check_writable()
        checked = [self._check_position(p) for p in positions]
        self._lock_writer()
        for pos in checked:
            bit = (<uint64_t>1) << (pos & 63)
            changed |= bit & ~self._words[pos >> 6]
            self._words[pos >> 6] |= bit
        bw_unlock(&self._lock)
        if changed:
            self._count_new(1)
        return changed != 0

    def _assign_bits(self, positions, values):
        """Set bit positions[i] to values[i] (numpy uint64 and uint8 arrays of one length, positions < num_bits).

        A delta update (Summary Cache's absolute values), O(len(positions)) under the writer lock.
        """
        cdef const uint64_t[::1] pos = positions
        cdef const uint8_t[::1] val = values
        cdef Py_ssize_t i
        cdef uint64_t p, bit
        self._check_writable()
        if pos.shape[0] != val.shape[0]:
            raise ValueError(f"{pos.shape[0]} positions but {val.shape[0]} values")
        for i in range(pos.shape[0]):
            if pos[i] >= self._g.num_bits:
                raise ValueError(f"position {pos[i]} does not fit a filter of {self._g.num_bits} bits")
        with nogil:
            bw_lock(&self._lock)
            for i in range(pos.shape[0]):
                p = pos[i]
                bit = (<uint64_t>1) << (p & 63)
                if val[i]:
                    self._words[p >> 6] |= bit
                else:
                    self._words[p >> 6] &= ~bit
            bw_unlock(&self._lock)

    def _test_positions(self, positions):
        """True when every explicit bit position is set."""
        cdef uint64_t pos
        self._check_ready()
        for p in positions:
            pos = self._check_position(p)
            if not (self._words[pos >> 6] >> (pos & 63)) & 1:
                return False
        return True

    cdef uint64_t _check_position(self, object p) except? 0xFFFFFFFFFFFFFFFF:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < self._g.num_bits:
            raise ValueError(f"a hash function returned {p!r}; expected an int in [0, {self._g.num_bits})")
        return p

    def _bit_indices(self, key):
        """The bit positions a key maps to, in probe order (teaching, tests, the schema test)."""
        cdef uint64_t h, step
        cdef uint32_t i, x
        hash_object(key, self._hasher, self._key_func, &h)
        indices = []
        if self._g.layout == LAYOUT_BLOCKED:
            x = <uint32_t>h
            for i in range(self._g.num_hashes):
                indices.append(block_index(&self._g, h) * BLOCK_BITS + (i & 7) * 64
                               + ((<uint32_t>(x * BW_SALT[i])) >> 26))
            return indices
        step = second_hash(h)
        for i in range(self._g.num_hashes):
            indices.append(probe(&self._g, h, step, i))
        return indices

    @property
    def num_bits(self):
        """m: the number of bits."""
        return self._g.num_bits

    @property
    def _keys_added_count(self):
        return self._keys_added

    @property
    def _insertions_count(self):
        return self._insertions

    def _count_insertions(self, uint64_t count):
        """Add to the count of keys added (Python-level insert paths and set operations)."""
        self._insertions += count

    @property
    def _is_writable(self):
        return self._writable



def _select_blocks(hashes, uint64_t num_blocks, uint64_t lo, uint64_t hi):
    """Tests: the hashes (numpy uint64) whose block lies in [lo, hi), as a threaded blocked insert picks a thread's
    keys (with the AVX-512 kernel unless _use_simd(False))."""
    cdef const uint64_t[::1] hs = hashes
    out = numpy().empty(hs.shape[0], dtype=numpy().uint64)
    cdef uint64_t[::1] o = out
    cdef size_t count = 0
    if hs.shape[0]:
        count = select_blocks(&hs[0], hs.shape[0], num_blocks, lo, hi, &o[0])
    return out[:count]


def run_threads(int nthreads, total, work):
    """Split [0, total) into nthreads ranges and run work(lo, hi) on each in its own thread."""
    from concurrent.futures import ThreadPoolExecutor
    bounds = [total * t // nthreads for t in range(nthreads + 1)]
    with ThreadPoolExecutor(max_workers=nthreads) as pool:
        futures = [pool.submit(work, bounds[t], bounds[t + 1]) for t in range(nthreads)]
        return [f.result() for f in futures]
