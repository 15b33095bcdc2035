# cython: freethreading_compatible = False
"""Compiled core of ``ScalableBloomFilter``: every stage answered from ONE hash of the key.

The stages are BloomFilters (their bits and geometry live in them); ``ScalableCore`` keeps, per stage, a pointer to
its words and geometry, its capacity and the keys it took, and runs ``add``, ``in``, ``update`` and
``contains_many`` over all stages in C.

Stage hashing "derived" (file hash schemes XXH64_STAGES_V1 / XXH3_STAGES_V1): a key is hashed once, h = XXH(key,
seed) as a BloomFilter with the filter's seed hashes it; stage i then uses output number i + 1 of SplitMix64
(Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014) seeded with h:

    z = h + (i + 1) * 0x9E3779B97F4A7C15                         (mod 2^64)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    h_i = z ^ (z >> 31)

and h_i goes through the layout's positions exactly as a BloomFilter's hash does (layouts.pxd). The finaliser is a
bijection, so distinct key hashes give distinct stage hashes in every stage, and the stages err independently.

Stage hashing "seeded" (bloomwise 0.2's files, schemes XXH64_V1 / XXH3_V1): stage i hashes the key again with its
own seed; the Python class keeps that path (``_seeded_*``) and this core dispatches to it.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memset

from bloomwise._native.hashing cimport (
    Hasher, check_scheme, hash_key, hash_object, hash_common_str, SCHEME_XXH3,
)
from bloomwise._native.hashes cimport Batch, HashStream, make_batch, hash_fixed, hash_batch, CHUNK, BATCH_OBJECTS
from bloomwise._native.support cimport check_int, check_threads, numpy
from bloomwise._native.core cimport PositionsCore, lock_writer, lock_writer_if_held
from bloomwise._native.layouts cimport (
    Geometry, set_bits, test_bits, prefetch_key, LAYOUT_BLOCKED, bw_prefetch_read, bw_prefetch_write,
)

cdef extern from "common.h" nogil:
    void bw_unlock(int* flag)

cdef extern from "simd.h" nogil:
    int bw_simd_available()
    int bw_simd512_available()
    uint64_t bw_simd_add(uint64_t* words, uint64_t num_blocks, uint32_t num_hashes, const uint64_t* hs, size_t n,
                         size_t distance)
    void bw_simd_test(const uint64_t* words, uint64_t num_blocks, uint32_t num_hashes, const uint64_t* hs, size_t n,
                      uint8_t* out, size_t distance)
    int bw_simd_add_one(uint64_t* words, uint64_t num_blocks, uint32_t num_hashes, uint64_t h)
    int bw_simd_test_one(const uint64_t* words, uint64_t num_blocks, uint32_t num_hashes, uint64_t h)

cdef extern from "scalable.h" nogil:
    ctypedef struct Stage "bw_stage":
        uint64_t* words
        const void* g            # the stage's Geometry
        uint64_t num_blocks
        uint64_t capacity
        uint64_t keys
        uint32_t num_hashes
        int layout
        bint prefetch
    void bw_stage_plan(Stage* s)
    uint64_t stage_hash "bw_stage_hash"(uint64_t h, uint64_t index)
    int bw_stages_test_blocked(const Stage* stages, Py_ssize_t n, uint64_t h)
    void bw_stage_hashes512(const uint64_t* hs, size_t n, uint64_t index, uint64_t* out)
    void bw_stage_test_many512(const uint64_t* words, uint64_t num_blocks, uint32_t num_hashes, const uint64_t* hs,
                               size_t n, uint8_t* out, size_t distance)

cdef enum:
    PREFETCH_DISTANCE = 32           # keys ahead whose cache lines are requested
    PREFETCH_FROM_BYTES = 32 << 10   # stages beyond the L1 data cache: all stages together may not fit in L2

from bloomwise._native.hashes import KERNELS  # the kernel set chosen at import ($BLOOMWISE_KERNELS)
from bloomwise._native.bloom import run_threads
cdef bint SIMD_AVAILABLE = bw_simd_available() and KERNELS != "scalar"
cdef bint SIMD512_AVAILABLE = bw_simd512_available() and KERNELS == "avx2+avx512"
cdef bint use_simd = SIMD_AVAILABLE        # blocked stages: the AVX2 bit kernels of simd.h (the same bits)
cdef bint use_simd512 = SIMD512_AVAILABLE  # stage hashes 8 at a time, blocked stages' tests (scalable.h)


def kernels():
    """The SIMD kernels in use: "avx512" (batches: stage hashes eight at a time and the blocked stages' tests;
    single keys: AVX2), "avx2" (the blocked stages' tests), or "scalar"."""
    return "avx512" if use_simd512 else "avx2" if use_simd else "scalar"


def _use_simd(bint enabled, bint avx512=True):
    """Tests: switch the SIMD kernels off (or back on where the CPU has them; ``avx512=False``: AVX2 only).
    Returns the previous setting, as ``kernels()`` names it."""
    global use_simd, use_simd512
    previous = kernels()
    use_simd = enabled and SIMD_AVAILABLE
    use_simd512 = enabled and avx512 and SIMD512_AVAILABLE
    return previous


def derived_stage_hash(uint64_t h, uint64_t index):
    """Stage ``index``'s 64-bit hash of a key whose filter hash is ``h`` (the formula of the module docstring)."""
    return stage_hash(h, index)


# ---- kernels --------------------------------------------------------------------------------------------------
cdef inline bint stage_test(const Stage* s, uint64_t h) noexcept nogil:
    if use_simd and s.layout == LAYOUT_BLOCKED:
        return bw_simd_test_one(s.words, s.num_blocks, s.num_hashes, h)
    return test_bits(<const Geometry*>s.g, s.words, h)


cdef inline bint stage_set(const Stage* s, uint64_t h) noexcept nogil:
    if use_simd and s.layout == LAYOUT_BLOCKED:
        return bw_simd_add_one(s.words, s.num_blocks, s.num_hashes, h)
    return set_bits(<const Geometry*>s.g, s.words, h)


cdef inline void set_newest(Stage* stages, Py_ssize_t n, uint64_t h) noexcept nogil:
    """Set a new key's bits in the newest of n stages and count it there."""
    stage_set(&stages[n - 1], stage_hash(h, n - 1))
    stages[n - 1].keys += 1


cdef inline bint test_all(const Stage* stages, Py_ssize_t n, uint64_t h) noexcept nogil:
    """Whether some stage holds the key of hash h: the newest (largest, most keys) first, stopping at the first
    stage whose bits are all set; an absent key is tested in every stage, each stopping at its first zero bit."""
    cdef Py_ssize_t i
    if stages[0].layout == LAYOUT_BLOCKED:  # (all stages have one layout)
        if use_simd:  # (AVX2: measured faster here than AVX-512 for one key, whose stages are tested in turn)
            return bw_stages_test_blocked(stages, n, h)
    for i in range(n - 1, -1, -1):
        if stage_test(&stages[i], stage_hash(h, i)):
            return True
    return False


cdef void test_stage_many(const Stage* s, const uint64_t* hs, Py_ssize_t n, uint8_t* out) noexcept nogil:
    """out[j] = whether stage s holds the hashes hs[j] (stage hashes already derived), prefetching ahead."""
    cdef Py_ssize_t j
    cdef size_t distance = PREFETCH_DISTANCE if s.prefetch else 0
    if use_simd512 and s.layout == LAYOUT_BLOCKED:
        bw_stage_test_many512(s.words, s.num_blocks, s.num_hashes, hs, n, out, distance)
        return
    if use_simd and s.layout == LAYOUT_BLOCKED:
        bw_simd_test(s.words, s.num_blocks, s.num_hashes, hs, n, out, distance)
        return
    if distance:
        for j in range(min(n, <Py_ssize_t>distance)):
            prefetch_key(<const Geometry*>s.g, s.words, hs[j], False)
    for j in range(n):
        if distance and j + <Py_ssize_t>distance < n:
            prefetch_key(<const Geometry*>s.g, s.words, hs[j + distance], False)
        out[j] = test_bits(<const Geometry*>s.g, s.words, hs[j])


cdef uint64_t add_stage_many(const Stage* s, const uint64_t* hs, Py_ssize_t n) noexcept nogil:
    """Set the bits of n stage hashes in stage s, prefetching ahead; returns how many changed a bit."""
    cdef Py_ssize_t j
    cdef uint64_t new_keys = 0
    cdef size_t distance = PREFETCH_DISTANCE if s.prefetch else 0
    if use_simd and s.layout == LAYOUT_BLOCKED:
        return bw_simd_add(s.words, s.num_blocks, s.num_hashes, hs, n, distance)
    if distance:
        for j in range(min(n, <Py_ssize_t>distance)):
            prefetch_key(<const Geometry*>s.g, s.words, hs[j], True)
    for j in range(n):
        if distance and j + <Py_ssize_t>distance < n:
            prefetch_key(<const Geometry*>s.g, s.words, hs[j + distance], True)
        new_keys += set_bits(<const Geometry*>s.g, s.words, hs[j])
    return new_keys


cdef struct Scratch:        # per batch call (never per key): the pending keys of one chunk
    uint32_t* pending       # indices (in the chunk) of the keys no stage has answered yet
    uint64_t* hashes        # their key hashes
    uint64_t* derived       # their stage hashes
    uint8_t* found


cdef int scratch_init(Scratch* w) except -1:
    w.pending = <uint32_t*>malloc(CHUNK * sizeof(uint32_t))
    w.hashes = <uint64_t*>malloc(CHUNK * sizeof(uint64_t))
    w.derived = <uint64_t*>malloc(CHUNK * sizeof(uint64_t))
    w.found = <uint8_t*>malloc(CHUNK)
    if w.pending == NULL or w.hashes == NULL or w.derived == NULL or w.found == NULL:
        scratch_free(w)
        raise MemoryError()
    return 0


cdef void scratch_free(Scratch* w) noexcept:
    free(w.pending)
    free(w.hashes)
    free(w.derived)
    free(w.found)
    w.pending = NULL
    w.hashes = NULL
    w.derived = NULL
    w.found = NULL


cdef inline void stage_hashes(const uint64_t* hs, Py_ssize_t n, uint64_t index, uint64_t* out) noexcept nogil:
    cdef Py_ssize_t j
    if use_simd512:
        bw_stage_hashes512(hs, n, index, out)
        return
    for j in range(n):
        out[j] = stage_hash(hs[j], index)


cdef void test_chunk(const Stage* stages, Py_ssize_t nstages, const uint64_t* hs, Py_ssize_t n, uint8_t* out,
                     Scratch* w) noexcept nogil:
    """out[j] = whether some stage holds key j of a chunk (n <= CHUNK key hashes hs), stage by stage, newest
    first: each stage is asked only about the keys no newer stage holds (the list shrinks without branches), and
    the whole pending list of one stage is tested before the next (its lines prefetched PREFETCH_DISTANCE keys
    ahead, so the misses of many keys overlap)."""
    cdef Py_ssize_t i, j, pending = n, kept
    cdef uint32_t index, hits
    cdef uint8_t found
    for j in range(n):
        w.pending[j] = <uint32_t>j
        w.hashes[j] = hs[j]
        out[j] = 0
    for i in range(nstages - 1, -1, -1):
        if pending == 0:
            return
        stage_hashes(w.hashes, pending, i, w.derived)
        test_stage_many(&stages[i], w.derived, pending, w.found)
        hits = 0
        for j in range(pending):  # (vectorised by the compiler)
            hits += w.found[j]
        if hits == 0:  # an older stage, or absent keys: nothing to take out of the list
            continue
        kept = 0
        for j in range(pending):
            index = w.pending[j]
            found = w.found[j]
            out[index] = found
            w.pending[kept] = index
            w.hashes[kept] = w.hashes[j]
            kept += 1 - found
        pending = kept


cdef Py_ssize_t insert_new(const Stage* s, Py_ssize_t stage_index, const uint64_t* hs, const uint8_t* present,
                           Py_ssize_t start, Py_ssize_t stop, uint64_t room, uint64_t* taken,
                           uint64_t* buffer) noexcept nogil:
    """Insert into stage s (number stage_index) the keys of [start, stop) not marked present, at most ``room`` of
    them, CHUNK at a time; returns where it stopped and adds to taken[0] the keys inserted."""
    cdef Py_ssize_t count
    while start < stop and room > 0:
        count = 0
        while start < stop and count < CHUNK and <uint64_t>count < room:
            buffer[count] = stage_hash(hs[start], stage_index)
            count += 1 - present[start]
            start += 1
        add_stage_many(s, buffer, count)
        room -= count
        taken[0] += count
    return start


# ---- the core ---------------------------------------------------------------------------------------------------
@cython.auto_pickle(False)
cdef class ScalableCore:
    """The stages of a scalable filter, queried from one hash per key. Subclassed by ScalableBloomFilter, which
    creates the stages (``_add_stage``) and attaches them here (``_attach_stage``)."""
    cdef Stage* _stages
    cdef Py_buffer* _views
    cdef Py_ssize_t _num_stages
    cdef Py_ssize_t _room_for
    cdef list _stage_objects
    cdef Hasher _hasher
    cdef object _key_func
    cdef bint _derived
    cdef uint64_t _insertions
    cdef int _lock

    def __dealloc__(self):
        self._release_views()
        free(self._stages)
        free(self._views)

    cdef void _release_views(self) noexcept:
        cdef Py_ssize_t i
        for i in range(self._num_stages):
            PyBuffer_Release(&self._views[i])
        self._num_stages = 0

    def _init_scalable(self, seed, key, int hash_scheme, bint derived):
        """The key hashing (seed, key function, base scheme id: 1 XXH64, 2 XXH3) and the stage hashing; no stage."""
        seed = check_int("seed", seed, 0, 2 ** 64 - 1)
        check_scheme(hash_scheme)
        self._hasher.seed = seed
        self._hasher.scheme = hash_scheme
        self._key_func = key
        self._derived = derived
        self._insertions = 0
        self._detach_stages()

    cdef inline int _lock_writer(self) except -1:
        return lock_writer(&self._lock)

    def _detach_stages(self):
        """Forget every stage (clear, reload)."""
        self._lock_writer()
        self._release_views()
        self._stage_objects = []
        bw_unlock(&self._lock)

    def _attach_stage(self, stage, capacity, keys=0):
        """Append a stage: a BloomFilter owning writable bits, ``capacity`` keys, ``keys`` taken so far."""
        cdef PositionsCore core = <PositionsCore?>stage
        cdef Py_buffer view
        cdef Stage* grown
        cdef Py_buffer* grown_views
        cdef Py_ssize_t room
        PyObject_GetBuffer(core._storage, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
        if <uint64_t>view.len < core._nbytes:
            PyBuffer_Release(&view)
            raise ValueError(f"the stage's storage holds {view.len} bytes, it needs {core._nbytes}")
        self._lock_writer()
        try:
            if self._num_stages == self._room_for:
                room = max(8, 2 * self._room_for)
                grown = <Stage*>realloc(self._stages, room * sizeof(Stage))
                if grown == NULL:
                    raise MemoryError()
                self._stages = grown
                grown_views = <Py_buffer*>realloc(self._views, room * sizeof(Py_buffer))
                if grown_views == NULL:
                    raise MemoryError()
                self._views = grown_views
                self._room_for = room
            self._views[self._num_stages] = view
            self._stages[self._num_stages].words = <uint64_t*>view.buf
            self._stages[self._num_stages].g = &core._g
            self._stages[self._num_stages].num_blocks = core._g.num_blocks
            self._stages[self._num_stages].num_hashes = core._g.num_hashes
            self._stages[self._num_stages].layout = core._g.layout
            self._stages[self._num_stages].capacity = capacity
            self._stages[self._num_stages].keys = keys
            self._stages[self._num_stages].prefetch = core._nbytes > PREFETCH_FROM_BYTES
            bw_stage_plan(&self._stages[self._num_stages])
            self._num_stages += 1
            self._stage_objects.append(stage)
        except BaseException:
            PyBuffer_Release(&view)
            raise
        finally:
            bw_unlock(&self._lock)

    # -- counts -------------------------------------------------------------------------------------------------
    @property
    def stage_keys(self):
        """Keys each stage took (those not already, or apparently, present), oldest first."""
        return tuple(self._stages[i].keys for i in range(self._num_stages))

    def _count_stage_keys(self, Py_ssize_t index, uint64_t count):
        if not 0 <= index < self._num_stages:
            raise IndexError(f"stage {index} of {self._num_stages}")
        self._stages[index].keys += count

    @property
    def num_keys(self):
        """Keys added: one per ``add()`` and one per key of ``update()``, repeats included (saved with the filter;
        a loaded filter counts from the keys its stages took). ``stage_keys`` counts what each stage took."""
        return self._insertions

    def _set_insertions(self, uint64_t count):
        self._insertions = count

    @property
    def _derived_stages(self):
        return self._derived

    @property
    def _hash_scheme_id(self):
        """The key hash's scheme id: 1 (XXH64_V1) or 2 (XXH3_V1)."""
        return self._hasher.scheme

    cdef int _key_hash(self, object key, uint64_t* h) except -1:
        if self._key_func is not None:
            hash_object(key, self._hasher, self._key_func, h)
        elif not hash_common_str(key, self._hasher, h):
            hash_key(key, self._hasher, h)
        return 0

    cdef uint64_t _room(self) except? 0:
        """Keys the newest stage still takes; a new stage (``_add_stage``) when it is full. GIL held, lock not."""
        cdef Stage* newest = &self._stages[self._num_stages - 1]
        if newest.keys >= newest.capacity:
            self._add_stage()
            newest = &self._stages[self._num_stages - 1]
        return newest.capacity - newest.keys

    # -- single keys --------------------------------------------------------------------------------------------
    cdef inline int _hash_ready(self, object key, uint64_t* h) except -1:
        """The key's hash (the common case, an ASCII str, read in place), once the filter is ready for it."""
        if self._key_func is not None:
            hash_object(key, self._hasher, self._key_func, h)
        elif not hash_common_str(key, self._hasher, h):
            hash_key(key, self._hasher, h)
        if self._num_stages == 0:
            self._check_ready()
        return 0

    @cython.always_allow_keywords(False)  # the key is positional, like set.add: METH_O
    def add(self, key):
        """Add a key. Returns True when it was certainly not present before (then it went into the newest stage)."""
        cdef uint64_t h
        cdef bint locked
        if not self._derived:
            return self._seeded_add(key)
        self._hash_ready(key, &h)
        self._insertions += 1
        if test_all(self._stages, self._num_stages, h):
            return False
        if self._stages[self._num_stages - 1].keys >= self._stages[self._num_stages - 1].capacity:
            self._add_stage()
        locked = lock_writer_if_held(&self._lock)  # (then the newest stage is read under the lock)
        set_newest(self._stages, self._num_stages, h)
        if locked:
            bw_unlock(&self._lock)
        return True

    def __contains__(self, key):
        """`key in f`: False means certainly absent; True means "might be present". At most one probe per stage."""
        cdef uint64_t h
        if not self._derived:
            return self._seeded_contains(key)
        self._hash_ready(key, &h)
        return test_all(self._stages, self._num_stages, h)

    cdef int _check_ready(self) except -1:
        if self._num_stages == 0:
            raise RuntimeError("the filter has no stage: build it with ScalableBloomFilter(...) or load()")
        return 0

    def _stage_contains(self, key, Py_ssize_t index):
        """Whether stage ``index`` alone holds a key (a stage's own ``in``)."""
        cdef uint64_t h
        if not 0 <= index < self._num_stages:
            raise IndexError(f"stage {index} of {self._num_stages}")
        self._key_hash(key, &h)
        return stage_test(&self._stages[index], stage_hash(h, index))

    def _stage_hash(self, key, Py_ssize_t index):
        """The 64-bit hash a key has in stage ``index`` (tests, teaching)."""
        cdef uint64_t h
        self._key_hash(key, &h)
        return stage_hash(h, index)

    # -- batches -------------------------------------------------------------------------------------------------
    def update(self, keys, *, threads=None):
        """Add every key of an iterable or numpy array; keys that might already be present are skipped. Every key
        is tested against the stages as they were before the batch (so repeats inside one batch all go in and are
        counted: conservative), then the new ones go into the newest stage, and into new stages as it fills.
        ``threads=N``: the test against the stages (most of the work) runs in N threads, taking chunks of the keys
        in turn; the hashing and the inserts, whose order decides which stage a key goes into, in one."""
        if not self._derived:
            return self._seeded_update(keys, threads=threads)
        self._check_ready()
        cdef Batch batch = make_batch(keys, self._key_func is not None)
        cdef int nthreads = check_threads(threads)
        cdef Py_ssize_t n = batch.keys.length, start = 0
        cdef uint64_t room, taken
        if n == 0:
            return None
        hashes = hash_batch(batch, self._hasher, self._key_func)  # one uint64 array for the batch
        self._insertions += <uint64_t>n
        present = numpy().zeros(n, dtype=numpy().uint8)  # (zeros: a flag left unset can only mean "insert")
        cdef const uint64_t[::1] hs = hashes
        cdef uint8_t[::1] seen = present
        cdef Scratch w
        scratch_init(&w)
        try:
            if nthreads > 1 and n >= 4 * CHUNK:
                self._test_threaded(hashes, present, nthreads)
            else:
                self._test_hashes(&hs[0], n, &seen[0], &w)
            while start < n:
                room = self._room()
                taken = 0
                self._lock_writer()
                with nogil:
                    start = insert_new(&self._stages[self._num_stages - 1], self._num_stages - 1, &hs[0], &seen[0],
                                       start, n, room, &taken, w.derived)
                bw_unlock(&self._lock)
                self._stages[self._num_stages - 1].keys += taken
        finally:
            scratch_free(&w)
        return None

    cdef int _test_hashes(self, const uint64_t* hs, Py_ssize_t n, uint8_t* out, Scratch* w) except -1:
        cdef Py_ssize_t start = 0, count
        while start < n:
            count = min(<Py_ssize_t>CHUNK, n - start)
            self._lock_writer()
            with nogil:
                test_chunk(self._stages, self._num_stages, hs + start, count, out + start, w)
            bw_unlock(&self._lock)
            start += count
        return 0

    def _test_threaded(self, hashes, result, int nthreads):
        """result[j] (uint8) = whether some stage holds the key of hashes[j], by nthreads threads, each with a scratch
        of its own. Thread t takes chunks t, t + nthreads, ... (CHUNK keys each), so a batch whose present keys come
        first still splits evenly (a present key costs fewer stage tests). The lock is held throughout, so no stage
        is added meanwhile."""
        self._lock_writer()
        try:
            run_threads(nthreads, nthreads, lambda t, _: self._test_strided(hashes, result, t, nthreads))
        finally:
            bw_unlock(&self._lock)

    def _test_strided(self, hashes, result, Py_ssize_t first, Py_ssize_t step):
        """One thread's share of _test_threaded: chunks first, first + step, ... (the caller holds the lock)."""
        cdef const uint64_t[::1] hs = hashes
        cdef uint8_t[::1] out = result
        cdef Scratch w
        cdef Py_ssize_t lo, count, n = hs.shape[0]
        scratch_init(&w)
        try:
            with nogil:
                lo = first * CHUNK
                while lo < n:
                    count = min(<Py_ssize_t>CHUNK, n - lo)
                    test_chunk(self._stages, self._num_stages, &hs[lo], count, &out[lo], &w)
                    lo += step * CHUNK
        finally:
            scratch_free(&w)

    def contains_many(self, keys, *, threads=None):
        """A numpy bool array: whether each key might be present (the shape of a numpy input). ``threads=N``: the
        keys are hashed in this thread (into one uint64 array), then tested against the stages in N threads."""
        if not self._derived:
            return self._seeded_contains_many(keys, threads=threads)
        self._check_ready()
        cdef Batch batch = make_batch(keys, self._key_func is not None)
        cdef int nthreads = check_threads(threads)
        np = numpy()
        result = np.zeros(batch.keys.length, dtype=np.bool_)
        cdef uint8_t[::1] out = result.view(np.uint8)
        cdef HashStream stream
        cdef Scratch w
        cdef Py_ssize_t start = 0, count, n = batch.keys.length
        if nthreads > 1 and n >= 4 * CHUNK:
            self._test_threaded(hash_batch(batch, self._hasher, self._key_func), result.view(np.uint8), nthreads)
        elif n:
            stream = HashStream(batch, self._hasher.seed, self._hasher.scheme, self._key_func)
            scratch_init(&w)
            try:
                while start < n:
                    count = min(<Py_ssize_t>CHUNK, n - start)
                    if batch.keys.kind == BATCH_OBJECTS:
                        stream.hash_objects(start, count, stream.hashes)
                    else:
                        with nogil:
                            hash_fixed(&batch.keys, start, count, stream.hasher, stream.hashes, stream.scratch)
                    self._test_hashes(stream.hashes, count, &out[start], &w)
                    start += count
            finally:
                scratch_free(&w)
        return result.reshape(batch.shape) if batch.shape is not None else result

    def _stage_contains_many(self, keys, Py_ssize_t index):
        """Whether stage ``index`` alone holds each key (a stage's own ``contains_many``)."""
        if not 0 <= index < self._num_stages:
            raise IndexError(f"stage {index} of {self._num_stages}")
        cdef Batch batch = make_batch(keys, self._key_func is not None)
        np = numpy()
        hashes = hash_batch(batch, self._hasher, self._key_func)
        result = np.zeros(batch.keys.length, dtype=np.bool_)
        cdef uint64_t[::1] hs = hashes
        cdef uint8_t[::1] out = result.view(np.uint8)
        cdef Py_ssize_t j, n = batch.keys.length
        for j in range(n):
            hs[j] = stage_hash(hs[j], index)
        if n:
            self._lock_writer()
            with nogil:
                test_stage_many(&self._stages[index], &hs[0], n, &out[0])
            bw_unlock(&self._lock)
        return result.reshape(batch.shape) if batch.shape is not None else result
