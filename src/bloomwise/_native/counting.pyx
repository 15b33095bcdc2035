# cython: freethreading_compatible = False
"""Compiled core of the counting filters: packed counter arrays with sticky saturation, the change journal of the
bit view, and the kernels of the variable-increment (B_h / D_L) filter.

Private: ``bloomwise.CountingBloomFilter`` subclasses `CountingCore`, ``bloomwise.VariableIncrementCountingBloomFilter``
subclasses `VariableIncrementCore`. Keys are hashed exactly as the bit filters hash them (``hashing.pxd``; batches
through ``hashes.pyx``) and a key's positions come from ``layouts.pxd`` (``stage`` computes the same ones for
CountingCore's batch insert), so the bit view "counter > 0" answers exactly like a BloomFilter of the same layout and
seed.

Cells (docs/counting.md): cell i of a ``w``-bit array is, for w = 4, nibble ``i % 2`` of byte ``i // 2`` (low nibble
for even i); for w = 8, 16, 32 the little-endian unsigned integer at byte ``i * w / 8``. Writers hold the filter's
writer lock (common.h); batch writers hold it with the GIL released, single-key writers with the GIL held (and never
wait for it while holding the GIL). Readers do not lock.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, uintptr_t
from libc.stdlib cimport realloc, free
from libc.string cimport memset, memcpy, memcmp, memmove

from bloomwise._native.hashing cimport Hasher, hash_key, hash_object, SCHEME_XXH3
from bloomwise._native.hashes cimport Batch, HashStream, make_batch, hash_fixed, hash_batch, CHUNK, BATCH_OBJECTS
from bloomwise._native.support cimport check_int, check_threads, numpy
from bloomwise._native.core cimport PositionsCore, lock_writer_if_held
from bloomwise._native.storage cimport AlignedBuffer
from bloomwise._native.layouts cimport (
    Geometry, geometry_init, positions, second_hash, bw_fmix64, bw_mulhi, bw_prefetch_write,
    LAYOUT_CLASSIC, LAYOUT_PARTITIONED, MAX_HASHES,
)

cdef extern from "common.h" nogil:
    void bw_unlock(int* flag)

cdef extern from *:
    """
    /* Seed of the variable-increment hash: increment index of probe i = mulhi(fmix64(g_i ^ SALT), |D|). */
    #define BW_INCREMENT_SALT 0x72636e692d697621ULL /* "!vi-incr" */
    """
    uint64_t BW_INCREMENT_SALT

from bloomwise._native.hashes import hash_many

MAX_NUM_CELLS = 2 ** 48
MAX_INCREMENTS = 256
cdef int JOURNAL_INITIAL = 1024

cdef enum:
    PREFETCH_DISTANCE = 16          # batch kernels request the cache lines of the key this many keys ahead
    BLOCK = 16                      # CountingCore.update: keys whose positions are staged (and prefetched) at once
    PREFETCH_FROM_BYTES = 1 << 20   # 1 MiB, about one core's L2: smaller arrays stay in cache


# ---- packed cells ----------------------------------------------------------------------------------------------------
cdef inline uint32_t cell_get(const uint8_t* data, int width, uint64_t i) noexcept nogil:
    if width == 4:
        return (data[i >> 1] >> ((i & 1) << 2)) & 0xF
    if width == 8:
        return data[i]
    if width == 16:
        return (<const uint16_t*>data)[i]
    return (<const uint32_t*>data)[i]


cdef inline void cell_set(uint8_t* data, int width, uint64_t i, uint32_t value) noexcept nogil:
    cdef int shift
    if width == 4:
        shift = <int>((i & 1) << 2)
        data[i >> 1] = <uint8_t>((data[i >> 1] & ~(0xF << shift)) | (value << shift))
    elif width == 8:
        data[i] = <uint8_t>value
    elif width == 16:
        (<uint16_t*>data)[i] = <uint16_t>value
    else:
        (<uint32_t*>data)[i] = value


cdef inline uint64_t cells_nbytes(uint64_t num_cells, int width) noexcept nogil:
    """Bytes of a packed array: whole 64-bit words, like the bit filters."""
    return (num_cells * <uint64_t>width + 63) // 64 * 8


# ---- the change journal ----------------------------------------------------------------------------------------------
# Every 0->1 and 1->0 transition of the bit view, as position << 1 | new bit, once a mark() switched it on.
# Marks are absolute entry numbers: entries[0] is number `base`.
cdef struct Journal:
    uint64_t* entries
    uint64_t length
    uint64_t allocated
    uint64_t base
    bint active


cdef inline void journal_push(Journal* j, uint64_t position, uint64_t bit) noexcept nogil:
    cdef uint64_t* grown
    cdef uint64_t size
    if not j.active:
        return
    if j.length == j.allocated:
        size = j.allocated * 2 if j.allocated else JOURNAL_INITIAL
        grown = <uint64_t*>realloc(j.entries, size * sizeof(uint64_t))
        if grown == NULL:  # out of memory: drop everything and invalidate every mark (changes_since says so)
            free(j.entries)
            j.entries = NULL
            j.base += j.length + 1
            j.length = 0
            j.allocated = 0
            return
        j.entries = grown
        j.allocated = size
    j.entries[j.length] = (position << 1) | bit
    j.length += 1


cdef inline void prefetch_cells(const uint8_t* cells, int width, const uint64_t* pos, uint32_t k) noexcept nogil:
    """Request the cache lines of k cells (prefetch for write: the kernels read and write them)."""
    cdef uint32_t i
    for i in range(k):
        bw_prefetch_write(cells + ((pos[i] * <uint64_t>width) >> 3))


cdef object flat_hashes(object keys, Hasher hasher, object key_func):
    """(flat uint64 hashes, shape of the result): a numpy input keeps its shape, anything else is flat."""
    hashes = hash_many(keys, hasher.seed, key_func, hasher.scheme)
    return numpy().ascontiguousarray(hashes.reshape(-1)), hashes.shape


# ---- shared by both counting cores -----------------------------------------------------------------------------------
@cython.auto_pickle(False)
cdef class CounterArrayCore(PositionsCore):
    """m cells of `width` bits, k probes per key (classic or partitioned layout)."""
    cdef uint8_t* _cells
    cdef int _width
    cdef uint64_t _num_keys
    cdef Journal _journal

    def __dealloc__(self):
        free(self._journal.entries)

    def _init_core(self, num_cells, num_hashes, int layout, int width, seed=0, num_keys=0, key=None,
                   str cells_name="num_counters", int hash_scheme=SCHEME_XXH3, storage=None):
        """Geometry and zeroed storage, or `storage` (a buffer such as a mapped file's payload, used in place;
        read-only if it is). `width`: bits per cell (4, 8, 16 or 32)."""
        if self._ready:
            raise RuntimeError("filter already initialised")
        if layout not in (LAYOUT_CLASSIC, LAYOUT_PARTITIONED):
            raise ValueError("counting filters support the 'classic' and 'partitioned' layouts only")
        if width not in (4, 8, 16, 32):
            raise ValueError(f"cells are 4, 8, 16 or 32 bits wide, got {width}")
        num_cells = check_int(cells_name, num_cells, 1, MAX_NUM_CELLS)
        num_hashes = check_int("num_hashes", num_hashes, 1, MAX_HASHES)
        self._set_hashing(seed, key, hash_scheme)
        num_keys = check_int("num_keys", num_keys, 0, 2 ** 64 - 1)
        if layout == LAYOUT_PARTITIONED and num_cells < num_hashes:
            raise ValueError(f"{cells_name} must be at least num_hashes ({num_hashes}) for the partitioned layout, "
                             f"got {num_cells}")
        geometry_init(&self._g, num_cells, num_hashes, layout)
        self._width = width
        self._nbytes = cells_nbytes(num_cells, width)
        self._num_keys = num_keys
        storage = AlignedBuffer(self._nbytes) if storage is None else storage
        self._cells = <uint8_t*>self._attach_storage(storage, "the cells need")
        self._ready = True

    cdef void _forget_array(self) noexcept:
        self._cells = NULL

    cdef int _count_keys(self, int64_t change) except -1:
        """Keys stored change by `change` (never below 0); warn once past the capacity."""
        if change < 0:
            self._num_keys -= min(self._num_keys, <uint64_t>(-change))
            return 0
        self._num_keys += <uint64_t>change
        if self._capacity_limit and not self._warned and self._num_keys > self._capacity_limit:
            self._warned = True
            self._over_capacity()
        return 0

    # -- per-key kernels, one set per structure (called with the writer lock held for writers) -------------------------
    cdef bint _add_hash(self, uint64_t h) noexcept nogil:
        """Insert; True when the key was certainly absent before."""
        return False

    cdef bint _test_hash(self, uint64_t h) noexcept nogil:
        return False

    cdef bint _remove_hash(self, uint64_t h, uint32_t* undo) noexcept nogil:
        """Remove unless certainly absent (then change nothing and return False); old cells of the k probes to undo."""
        return False

    cdef void _restore_hash(self, uint64_t h, const uint32_t* undo) noexcept nogil:
        """Undo _remove_hash(h, undo): put back the k cells it saved (batches undo in reverse key order)."""
        cdef uint64_t pos[MAX_HASHES]
        cdef int i
        positions(&self._g, h, pos)
        for i in range(<int>self._g.num_hashes - 1, -1, -1):
            cell_set(self._cells, self._width, pos[i], undo[i])

    cdef void _add_hashes(self, const uint64_t* hs, Py_ssize_t n) noexcept nogil:
        """Insert n keys in order: exactly n calls of _add_hash, with the cells of the key PREFETCH_DISTANCE ahead
        requested first (writer lock held)."""
        cdef Py_ssize_t i
        cdef bint prefetch = self._nbytes > PREFETCH_FROM_BYTES
        if prefetch:
            for i in range(min(n, <Py_ssize_t>PREFETCH_DISTANCE)):
                prefetch_key(self, hs[i])
        for i in range(n):
            if prefetch and i + PREFETCH_DISTANCE < n:
                prefetch_key(self, hs[i + PREFETCH_DISTANCE])
            self._add_hash(hs[i])

    # -- single keys ---------------------------------------------------------------------------------------------------
    @cython.always_allow_keywords(False)  # the key is positional, like set.add: METH_O
    def add(self, key):
        """Add one occurrence of a key. Returns True when it was certainly absent before. O(k)."""
        cdef uint64_t h
        cdef bint new_key, locked
        hash_object(key, self._hasher, self._key_func, &h)
        self._check_writable()
        locked = lock_writer_if_held(&self._lock)
        new_key = self._add_hash(h)
        if locked:
            bw_unlock(&self._lock)
        self._count_keys(1)
        return new_key

    def __contains__(self, key):
        """`key in f`: False means certainly absent; True means "might be present". O(k)."""
        cdef uint64_t h
        hash_object(key, self._hasher, self._key_func, &h)
        self._check_ready()
        return self._test_hash(h)

    cdef int _remove_one(self, object key) except -1:
        cdef uint64_t h
        cdef bint removed, locked
        hash_object(key, self._hasher, self._key_func, &h)
        self._check_writable()
        locked = lock_writer_if_held(&self._lock)
        removed = self._remove_hash(h, NULL)
        if locked:
            bw_unlock(&self._lock)
        if removed:
            self._count_keys(-1)
        return removed

    @cython.always_allow_keywords(False)  # the key is positional, like set.remove: METH_O
    def remove(self, key):
        """Remove one occurrence of a key; KeyError (and no change) when it is certainly absent. O(k)."""
        if not self._remove_one(key):
            raise KeyError(key)

    @cython.always_allow_keywords(False)  # the key is positional, like set.discard: METH_O
    def discard(self, key):
        """Remove one occurrence of a key if it might be present; returns whether anything was removed. O(k)."""
        return bool(self._remove_one(key))

    # -- batches -------------------------------------------------------------------------------------------------------
    def update(self, keys):
        """Add every key of an iterable or numpy array (integer, 'S' or 'U' dtype), without the GIL.

        All or nothing: Python keys are all hashed before any cell changes (a key that cannot be hashed raises and
        leaves the filter as it was); numpy keys cannot fail once the batch is accepted, so they are hashed CHUNK
        at a time under the writer lock, with no array of hashes."""
        self._check_writable()
        cdef Batch batch = make_batch(keys, self._key_func is not None)
        cdef Py_ssize_t start = 0, count, n = batch.keys.length
        cdef HashStream stream
        cdef const uint64_t[::1] hs
        if n == 0:
            return None
        if batch.keys.kind == BATCH_OBJECTS:
            hs = hash_batch(batch, self._hasher, self._key_func)
            self._lock_writer()  # with the GIL (core.pxd's lock_writer)
            with nogil:
                self._add_hashes(&hs[0], n)
                bw_unlock(&self._lock)
        else:
            stream = HashStream(batch, self._hasher.seed, self._hasher.scheme, None)  # its buffers
            self._lock_writer()  # with the GIL (core.pxd's lock_writer)
            with nogil:
                while start < n:
                    count = min(<Py_ssize_t>CHUNK, n - start)
                    hash_fixed(&batch.keys, start, count, self._hasher, stream.hashes, stream.scratch)
                    self._add_hashes(stream.hashes, count)
                    start += count
                bw_unlock(&self._lock)
        self._count_keys(n)
        return None

    def contains_many(self, keys):
        """A numpy bool array: whether each key might be present (the shape of a numpy input)."""
        self._check_ready()
        hashes, shape = flat_hashes(keys, self._hasher, self._key_func)
        cdef const uint64_t[::1] hs = hashes
        cdef Py_ssize_t i, n = hs.shape[0]
        result = numpy().zeros(n, dtype=numpy().bool_)
        cdef uint8_t[::1] out = result.view(numpy().uint8)
        with nogil:  # no prefetch: the loads of successive keys overlap anyway (measured slower with it)
            for i in range(n):
                out[i] = self._test_hash(hs[i])
        return result.reshape(shape)

    def remove_many(self, keys, *, missing="raise"):
        """Remove one occurrence of each key, in order; returns how many were removed.

        ``missing="raise"`` (default): when a key is certainly absent, nothing at all is removed (the keys before
        it are put back) and KeyError names it. ``missing="ignore"``: certainly absent keys are skipped, like
        ``discard``. The batch runs under the writer lock without the GIL; "raise" keeps an undo log of 4 k bytes
        per key.
        """
        if missing not in ("raise", "ignore"):
            raise ValueError(f"missing must be 'raise' or 'ignore', got {missing!r}")
        self._check_writable()
        np = numpy()
        if not (isinstance(keys, (list, tuple)) or hasattr(keys, "__array_interface__")
                or isinstance(keys, (str, bytes, bytearray, memoryview))):
            keys = list(keys)  # keep the keys, to name a missing one
        hashes, _ = flat_hashes(keys, self._hasher, self._key_func)
        cdef const uint64_t[::1] hs = hashes
        cdef Py_ssize_t i, n = hs.shape[0], failed = -1, removed = 0
        cdef Py_ssize_t k = self._g.num_hashes
        cdef uint64_t saved_length, saved_base
        cdef bint prefetch = self._nbytes > PREFETCH_FROM_BYTES
        if n == 0:
            return 0
        if prefetch:
            for i in range(min(n, <Py_ssize_t>PREFETCH_DISTANCE)):
                prefetch_key(self, hs[i])
        if missing == "ignore":
            self._lock_writer()  # with the GIL (core.pxd's lock_writer)
            with nogil:
                for i in range(n):
                    if prefetch and i + PREFETCH_DISTANCE < n:
                        prefetch_key(self, hs[i + PREFETCH_DISTANCE])
                    removed += self._remove_hash(hs[i], NULL)
                bw_unlock(&self._lock)
            self._count_keys(-removed)
            return removed
        undo_array = np.empty(n * k, dtype=np.uint32)
        cdef uint32_t[::1] undo = undo_array
        self._lock_writer()  # with the GIL (core.pxd's lock_writer)
        with nogil:
            saved_length = self._journal.length
            saved_base = self._journal.base
            for i in range(n):
                if prefetch and i + PREFETCH_DISTANCE < n:
                    prefetch_key(self, hs[i + PREFETCH_DISTANCE])
                if not self._remove_hash(hs[i], &undo[i * k]):
                    failed = i
                    break
            if failed >= 0:
                i = failed
                while i > 0:
                    i -= 1
                    self._restore_hash(hs[i], &undo[i * k])
                if self._journal.base == saved_base:  # the state is back as it was: so is the journal
                    self._journal.length = saved_length
            bw_unlock(&self._lock)
        if failed >= 0:
            key = keys.reshape(-1)[failed:failed + 1].tolist()[0] if hasattr(keys, "reshape") else keys[failed]
            raise KeyError(key)
        self._count_keys(-n)
        return n

    # -- whole array ---------------------------------------------------------------------------------------------------
    def clear(self):
        """Remove every key (all cells to 0); the journal records the bits that drop to 0."""
        cdef uint64_t i
        self._check_writable()
        self._lock_writer()
        if self._journal.active:
            for i in range(self._g.num_bits):
                if cell_get(self._cells, self._width, i) != 0:
                    journal_push(&self._journal, i, 0)
        memset(self._cells, 0, self._nbytes)
        bw_unlock(&self._lock)
        self._num_keys = 0
        self._warned = False

    def _count_nonzero(self):
        """How many cells are nonzero (the bits set in the bit view)."""
        cdef uint64_t i, total = 0
        self._check_ready()
        with nogil:
            for i in range(self._g.num_bits):
                total += cell_get(self._cells, self._width, i) != 0
        return total

    def _payload(self):
        """A read-only memoryview of the packed cells."""
        self._check_ready()
        return memoryview(self._storage).cast("B")[: self._nbytes].toreadonly()

    def _copy_cells_from(self, data):
        """Overwrite the cells with a payload of exactly nbytes; ValueError when its padding is not zero."""
        cdef Py_buffer view
        cdef uint64_t used_bits = self._g.num_bits * <uint64_t>self._width, byte
        cdef const uint8_t* src
        self._check_writable()
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            if <uint64_t>view.len != self._nbytes:
                raise ValueError(f"payload holds {view.len} bytes, the filter needs {self._nbytes}")
            src = <const uint8_t*>view.buf
            if used_bits % 8 and src[used_bits // 8] >> (used_bits % 8):
                raise ValueError("the padding after the last counter is not zero")
            for byte in range((used_bits + 7) // 8, self._nbytes):
                if src[byte]:
                    raise ValueError("the padding after the last counter is not zero")
            self._lock_writer()
            memcpy(self._cells, view.buf, self._nbytes)
            bw_unlock(&self._lock)
        finally:
            PyBuffer_Release(&view)

    def _same_cells(self, CounterArrayCore other):
        self._check_ready()
        other._check_ready()
        return (other._nbytes == self._nbytes and other._width == self._width
                and memcmp(self._cells, other._cells, self._nbytes) == 0)

    def _positions(self, key):
        """A key's k positions in probe order (the same as a BloomFilter's ``_bit_indices``)."""
        cdef uint64_t h
        cdef uint64_t pos[MAX_HASHES]
        hash_object(key, self._hasher, self._key_func, &h)
        positions(&self._g, h, pos)
        return [pos[i] for i in range(self._g.num_hashes)]

    @property
    def num_keys(self):
        """n: keys added minus keys removed (each occurrence counts; never below 0)."""
        return self._num_keys

    @property
    def _num_cells(self):
        return self._g.num_bits



cdef uint64_t counter_array_num_keys(object core) noexcept:
    """``core.num_keys`` of a CounterArrayCore (the caller has checked the type), read in place."""
    return (<CounterArrayCore>core)._num_keys


cdef inline void prefetch_key(CounterArrayCore f, uint64_t h) noexcept nogil:
    """Request the cache lines of a key's k cells (batch kernels, a few keys ahead)."""
    cdef uint64_t pos[MAX_HASHES]
    positions(&f._g, h, pos)
    prefetch_cells(f._cells, f._width, pos, f._g.num_hashes)


# ---- counting Bloom filter -------------------------------------------------------------------------------------------
cdef Py_ssize_t stage(const Geometry* g, const uint64_t* hs, Py_ssize_t n, uint64_t* out, const uint8_t* cells,
                      int width, bint prefetch) noexcept nogil:
    """The k positions of keys hs[0..n) into out, key after key (those of layouts.pxd ``positions``: probe i at
    h + i * second_hash(h), by multiply-high into the array or into slice i), requesting each cell's cache line
    when `prefetch`. Returns n * k. The geometry is read into locals: stores to `out` may alias it (the module is
    built with -fno-strict-aliasing) and would make the compiler reload it every probe."""
    cdef uint64_t h, step, x, pos, m = g.num_bits
    cdef uint32_t i, k = g.num_hashes
    cdef Py_ssize_t j
    cdef const uint64_t* start = g.slice_start
    cdef bint classic = g.layout == LAYOUT_CLASSIC
    for j in range(n):
        h = hs[j]
        step = second_hash(h)
        x = h
        for i in range(k):
            if classic:
                pos = bw_mulhi(x, m)
            else:
                pos = start[i] + bw_mulhi(x, start[i + 1] - start[i])
            out[i] = pos
            if prefetch:
                bw_prefetch_write(cells + ((pos * <uint64_t>width) >> 3))
            x += step
        out += k
    return n * k


# NIBBLE_NEXT[side << 8 | byte]: the byte after a sticky increment of its low (side 0) or high (side 1) 4-bit counter.
cdef uint8_t NIBBLE_NEXT[512]
cdef int _side, _byte
for _side in range(2):
    for _byte in range(256):
        NIBBLE_NEXT[_side << 8 | _byte] = <uint8_t>(
            _byte + (((_byte >> (4 * _side)) & 0xF) != 0xF) * (1 << (4 * _side)))


cdef void increment4(uint8_t* cells, const uint64_t* pos, Py_ssize_t count) noexcept nogil:
    """_add_hash's increments of 4-bit counters (maximum 15, sticky), position after position: each byte through
    NIBBLE_NEXT, without branches on the counters (their values are as good as random: a branch would mispredict)."""
    cdef Py_ssize_t j
    cdef uint8_t* byte
    for j in range(count):
        byte = cells + (pos[j] >> 1)
        byte[0] = NIBBLE_NEXT[(pos[j] & 1) << 8 | byte[0]]


cdef void increment_journaled(uint8_t* cells, int width, uint32_t maximum, const uint64_t* pos, Py_ssize_t count,
                             Journal* journal) noexcept nogil:
    """The increments with the change journal on: each counter that leaves 0 is journaled, in probe order."""
    cdef Py_ssize_t j
    cdef uint32_t c
    for j in range(count):
        c = cell_get(cells, width, pos[j])
        if c == 0:
            journal_push(journal, pos[j], 1)
        if c != maximum:
            cell_set(cells, width, pos[j], c + 1)


cdef void increment8(uint8_t* cells, const uint64_t* pos, Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t j
    cdef uint32_t value
    for j in range(count):
        value = cells[pos[j]]
        cells[pos[j]] = <uint8_t>(value + (value != 0xFF))


cdef void increment16(uint16_t* cells, const uint64_t* pos, Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t j
    cdef uint32_t value
    for j in range(count):
        value = cells[pos[j]]
        cells[pos[j]] = <uint16_t>(value + (value != 0xFFFF))


@cython.auto_pickle(False)
cdef class CountingCore(CounterArrayCore):
    """m counters of 4, 8 or 16 bits, sticky at their maximum; the bit view is "counter > 0"."""
    cdef uint32_t _maximum

    def _init_counting(self, num_counters, num_hashes, int layout, int counter_bits, seed=0, num_keys=0, key=None,
                       int hash_scheme=SCHEME_XXH3, storage=None):
        if counter_bits not in (4, 8, 16):
            raise ValueError(f"counter_bits must be 4, 8 or 16, got {counter_bits!r}")
        self._init_core(num_counters, num_hashes, layout, counter_bits, seed, num_keys, key, hash_scheme=hash_scheme,
                        storage=storage)
        self._maximum = (1 << counter_bits) - 1

    cdef bint _add_hash(self, uint64_t h) noexcept nogil:
        cdef uint64_t pos[MAX_HASHES]
        cdef uint32_t i, c
        cdef bint new_key = False
        positions(&self._g, h, pos)
        for i in range(self._g.num_hashes):
            c = cell_get(self._cells, self._width, pos[i])
            if c == 0:
                new_key = True
                journal_push(&self._journal, pos[i], 1)
            if c != self._maximum:
                cell_set(self._cells, self._width, pos[i], c + 1)
        return new_key

    cdef bint _test_hash(self, uint64_t h) noexcept nogil:
        cdef uint64_t pos[MAX_HASHES]
        cdef uint32_t i
        positions(&self._g, h, pos)
        for i in range(self._g.num_hashes):
            if cell_get(self._cells, self._width, pos[i]) == 0:
                return False
        return True

    cdef bint _remove_hash(self, uint64_t h, uint32_t* undo) noexcept nogil:
        cdef uint64_t pos[MAX_HASHES]
        cdef uint32_t i, j, c, need
        positions(&self._g, h, pos)
        # Certainly absent: a counter below the number of the key's probes on it (probes may repeat in classic).
        for i in range(self._g.num_hashes):
            c = cell_get(self._cells, self._width, pos[i])
            if c == self._maximum or c > i:
                continue
            need = 1
            for j in range(i):
                need += pos[j] == pos[i]
            if c < need:
                return False
        for i in range(self._g.num_hashes):
            c = cell_get(self._cells, self._width, pos[i])
            if undo != NULL:
                undo[i] = c
            if c == self._maximum:
                continue  # sticky: a saturated counter's true value is unknown
            cell_set(self._cells, self._width, pos[i], c - 1)
            if c == 1:
                journal_push(&self._journal, pos[i], 0)
        return True

    cdef void _add_hashes(self, const uint64_t* hs, Py_ssize_t n) noexcept nogil:
        """n calls of _add_hash, in order (so counters, saturation and the journal come out the same), in blocks
        of BLOCK keys: the positions of the next block are computed (once) and their cache lines requested before
        the counters of this block are incremented."""
        cdef uint64_t staged[2 * BLOCK * MAX_HASHES]
        cdef uint64_t* this_block = staged
        cdef uint64_t* next_block = staged + BLOCK * MAX_HASHES
        cdef uint64_t* swap
        cdef uint8_t* cells = self._cells
        cdef int width = self._width
        cdef bint prefetch = self._nbytes > PREFETCH_FROM_BYTES
        cdef Py_ssize_t start = 0, count, next_count, b = BLOCK
        cdef bint journal_on = self._journal.active
        count = stage(&self._g, hs, min(n, b), this_block, cells, width, prefetch)
        while start < n:
            next_count = 0
            if start + b < n:
                next_count = stage(&self._g, hs + start + b, min(n - start - b, b), next_block, cells, width,
                                   prefetch)
            if journal_on:
                increment_journaled(cells, width, self._maximum, this_block, count, &self._journal)
            elif width == 4:
                increment4(cells, this_block, count)
            elif width == 8:
                increment8(cells, this_block, count)
            else:
                increment16(<uint16_t*>cells, this_block, count)
            swap = this_block
            this_block = next_block
            next_block = swap
            count = next_count
            start += b

    # -- counters ------------------------------------------------------------------------------------------------------
    def counters(self, key):
        """The key's k counter values in probe (hash) order, as a tuple of ints."""
        cdef uint64_t h
        cdef uint64_t pos[MAX_HASHES]
        hash_object(key, self._hasher, self._key_func, &h)
        self._check_ready()
        positions(&self._g, h, pos)
        return tuple(cell_get(self._cells, self._width, pos[i]) for i in range(self._g.num_hashes))

    def count(self, key):
        """The smallest of the key's counters: how often it was added, at most (unless that counter is saturated)."""
        return min(self.counters(key))

    def counters_many(self, keys):
        """Counter values of a batch: an array of shape (*keys shape, k), uint8 (4 or 8-bit counters) or uint16."""
        self._check_ready()
        np = numpy()
        hashes, shape = flat_hashes(keys, self._hasher, self._key_func)
        cdef const uint64_t[::1] hs = hashes
        cdef Py_ssize_t i, n = hs.shape[0]
        cdef uint32_t j, k = self._g.num_hashes
        cdef uint64_t pos[MAX_HASHES]
        result = np.zeros((n, k), dtype=np.uint16)
        cdef uint16_t[:, ::1] out = result
        with nogil:  # no prefetch, as contains_many
            for i in range(n):
                positions(&self._g, hs[i], pos)
                for j in range(k):
                    out[i, j] = <uint16_t>cell_get(self._cells, self._width, pos[j])
        if self._width <= 8:
            result = result.astype(np.uint8)
        return result.reshape(tuple(shape) + (k,))

    @property
    def counter_bits(self):
        """Bits per counter: 4, 8 or 16."""
        return self._width

    @property
    def counter_max(self):
        """The largest count a counter holds (2**counter_bits - 1); a counter that reaches it stays there."""
        return self._maximum

    @property
    def saturated_count(self):
        """How many counters are saturated (stuck at counter_max: never decremented again). O(m)."""
        cdef uint64_t i, total = 0
        self._check_ready()
        with nogil:
            for i in range(self._g.num_bits):
                total += cell_get(self._cells, self._width, i) == self._maximum
        return total

    def _bit_view(self):
        """The bit view (bit i = counter i > 0) as a BloomFilter payload: little-endian 64-bit words."""
        self._check_ready()
        words_array = numpy().zeros((self._g.num_bits + 63) // 64, dtype=numpy().uint64)
        cdef uint64_t[::1] words = words_array
        cdef uint64_t i
        with nogil:
            for i in range(self._g.num_bits):
                if cell_get(self._cells, self._width, i) != 0:
                    words[i >> 6] |= (<uint64_t>1) << (i & 63)
        return words_array

    def _union_from(self, CountingCore other):
        """In place: counter-wise saturating sum with a filter of the same geometry (checked by the caller)."""
        cdef uint64_t i
        cdef uint32_t a, b, total
        self._check_writable()
        other._check_ready()
        if other._g.num_bits != self._g.num_bits or other._width != self._width:
            raise ValueError("filters differ in size")
        self._lock_writer()  # with the GIL (core.pxd's lock_writer)
        with nogil:
            for i in range(self._g.num_bits):
                b = cell_get(other._cells, other._width, i)
                if b == 0:
                    continue
                a = cell_get(self._cells, self._width, i)
                total = a + b if a + b < self._maximum else self._maximum
                if a == 0:
                    journal_push(&self._journal, i, 1)
                cell_set(self._cells, self._width, i, total)
            bw_unlock(&self._lock)
        self._num_keys += other._num_keys

    def _intersection_from(self, CountingCore other):
        """In place: counter-wise minimum with a filter of the same geometry (checked by the caller).

        A key added x times to one filter and y times to the other adds at least min(x, y) per probe to both
        counters, so min(a, b) bounds the counters of the multiset intersection from above; a saturated counter's
        true value is at least counter_max, so the minimum stays an upper bound."""
        cdef uint64_t i
        cdef uint32_t a, b
        self._check_writable()
        other._check_ready()
        if other._g.num_bits != self._g.num_bits or other._width != self._width:
            raise ValueError("filters differ in size")
        self._lock_writer()  # with the GIL (core.pxd's lock_writer)
        with nogil:
            for i in range(self._g.num_bits):
                a = cell_get(self._cells, self._width, i)
                if a == 0:
                    continue
                b = cell_get(other._cells, other._width, i)
                if b < a:
                    cell_set(self._cells, self._width, i, b)
                    if b == 0:
                        journal_push(&self._journal, i, 0)
            bw_unlock(&self._lock)

    # -- the journal ---------------------------------------------------------------------------------------------------
    def mark(self):
        """The current position in the change journal (an int); the first call switches the journal on."""
        self._check_ready()
        self._lock_writer()
        self._journal.active = True
        result = self._journal.base + self._journal.length
        bw_unlock(&self._lock)
        return result

    def _journal_since(self, mark):
        """(raw entries since mark as a numpy uint64 array, the end mark); ValueError for an unknown mark."""
        cdef uint64_t start, count
        cdef uint64_t[::1] out
        self._check_ready()
        np = numpy()
        if isinstance(mark, bool) or not isinstance(mark, int):
            raise TypeError(f"mark must be an int returned by mark(), got {type(mark).__name__}")
        self._lock_writer()
        try:
            base, end = self._journal.base, self._journal.base + self._journal.length
            if not self._journal.active:
                raise ValueError("the change journal is off: call mark() first")
            if mark < base or mark > end:
                raise ValueError(f"mark {mark} is outside the journal, which holds marks {base} to {end} (older "
                                 "entries were trimmed, or dropped when memory ran out: resend the whole bit view)")
            start = mark - base
            count = self._journal.length - start
            entries = np.empty(count, dtype=np.uint64)
            if count:
                out = entries
                memcpy(&out[0], self._journal.entries + start, count * sizeof(uint64_t))
        finally:
            bw_unlock(&self._lock)
        return entries, end

    def trim_journal(self, mark):
        """Forget the journal entries before ``mark`` (once every peer has the changes up to it)."""
        self._check_ready()
        self._journal_since(mark)  # validates the mark
        self._lock_writer()
        cdef uint64_t drop = <uint64_t>mark - self._journal.base
        if drop:
            memmove(self._journal.entries, self._journal.entries + drop,
                    (self._journal.length - drop) * sizeof(uint64_t))
            self._journal.length -= drop
            self._journal.base += drop
        bw_unlock(&self._lock)

    def stop_journal(self):
        """Switch the journal off and free it; every mark becomes invalid (the next mark() starts afresh)."""
        self._check_ready()
        self._lock_writer()
        free(self._journal.entries)
        self._journal.entries = NULL
        self._journal.base += self._journal.length + 1
        self._journal.length = 0
        self._journal.allocated = 0
        self._journal.active = False
        bw_unlock(&self._lock)

    @property
    def _journal_length(self):
        return self._journal.length


# ---- variable-increment counting Bloom filter ------------------------------------------------------------------------
@cython.auto_pickle(False)
cdef class VariableIncrementCore(CounterArrayCore):
    """m cells, each a fixed-increment counter c (low `fixed_bits`) and a variable-increment counter a (the rest).

    A key's probe i goes to position p_i (layouts.pxd) with increment v_i = D[mulhi(fmix64(g_i ^ SALT), |D|)],
    g_i = h + i * (fmix64(h) | 1) the probe's double-hashing value. Insert adds (1, v_i), delete subtracts. c is
    sticky at its maximum (the position then admits every key); a is the sum of the increments modulo
    M = 2^variable_bits, so it never saturates and deletions are always exact. A position admits v when c > 0 and
    (a - v) mod M is the residue of a sum of exactly c - 1 increments.
    """
    cdef int _fixed_bits
    cdef uint32_t _fixed_max
    cdef uint32_t _variable_mask     # M - 1
    cdef uint32_t _num_increments
    cdef uint32_t _increments[256]
    cdef uint32_t _min_increment
    cdef uint32_t _max_increment
    cdef const uint8_t* _feasible    # [j * M + r]: r is (a sum of exactly j increments) mod M
    cdef uint32_t _table_rows
    cdef object _feasible_table      # owns the table's bytes

    def _init_variable(self, num_positions, num_hashes, int layout, int fixed_bits, int variable_bits,
                       increments, bytes feasible_table, int table_rows, seed=0, num_keys=0, key=None,
                       int hash_scheme=SCHEME_XXH3, storage=None):
        """`feasible_table`: rows j = 0..table_rows-1 of M = 2**variable_bits bytes, 1 where r is the residue of a
        sum of exactly j increments (built by vicbf.py); beyond it, an interval test on the sums."""
        cdef int width = fixed_bits + variable_bits
        if width not in (8, 16, 32) or fixed_bits < 2 or variable_bits < 2:
            raise ValueError(f"fixed_bits + variable_bits must be 8, 16 or 32 (both >= 2), got {fixed_bits} + "
                             f"{variable_bits}")
        increments = sorted(set(increments))
        if not 1 <= len(increments) <= MAX_INCREMENTS:
            raise ValueError(f"increments must hold 1 to {MAX_INCREMENTS} values, got {len(increments)}")
        modulus = 1 << variable_bits
        if increments[0] < 1 or increments[len(increments) - 1] >= modulus:
            raise ValueError(f"increments must be in [1, {modulus - 1}] for {variable_bits}-bit variable counters, "
                             f"got {increments}")
        if table_rows < 0 or len(feasible_table) != table_rows * modulus:
            raise ValueError("feasibility table has the wrong size")
        self._init_core(num_positions, num_hashes, layout, width, seed, num_keys, key, "num_positions", hash_scheme,
                        storage)
        self._fixed_bits = fixed_bits
        self._fixed_max = (1 << fixed_bits) - 1
        self._variable_mask = modulus - 1
        self._num_increments = len(increments)
        for i, value in enumerate(increments):
            self._increments[i] = value
        self._min_increment = increments[0]
        self._max_increment = increments[len(increments) - 1]
        self._feasible_table = feasible_table
        self._feasible = <const uint8_t*>(<const char*>feasible_table)
        self._table_rows = table_rows

    cdef inline void _probes(self, uint64_t h, uint64_t* pos, uint32_t* inc) noexcept nogil:
        cdef uint64_t step = second_hash(h)
        cdef uint32_t i
        positions(&self._g, h, pos)
        for i in range(self._g.num_hashes):
            inc[i] = self._increments[bw_mulhi(bw_fmix64((h + i * step) ^ BW_INCREMENT_SALT), self._num_increments)]

    cdef inline bint _feasible_residue(self, uint32_t count, uint32_t residue) noexcept nogil:
        """Whether some sum of exactly `count` increments is congruent to `residue` mod M."""
        cdef uint64_t modulus = <uint64_t>self._variable_mask + 1
        cdef uint64_t low, high, candidate
        if count < self._table_rows:
            return self._feasible[<uint64_t>count * modulus + residue]
        # Beyond the table: the sums lie in [count*min, count*max]; does a number = residue (mod M) lie there?
        low = <uint64_t>count * self._min_increment
        high = <uint64_t>count * self._max_increment
        candidate = residue + (low - residue + modulus - 1) // modulus * modulus if low > residue else residue
        return candidate <= high

    cdef inline bint _admits(self, uint32_t cell, uint32_t increment) noexcept nogil:
        """Whether a position (c, a) can hold a key with this increment."""
        cdef uint32_t c = cell & self._fixed_max, a = cell >> self._fixed_bits
        if c == 0:
            return False
        if c == self._fixed_max:
            return True  # saturated: the number of keys is unknown
        return self._feasible_residue(c - 1, (a - increment) & self._variable_mask)

    cdef inline uint32_t _pack(self, uint32_t c, uint32_t a) noexcept nogil:
        return c | ((a & self._variable_mask) << self._fixed_bits)

    cdef bint _add_hash(self, uint64_t h) noexcept nogil:
        cdef uint64_t pos[MAX_HASHES]
        cdef uint32_t inc[MAX_HASHES]
        cdef uint32_t i, cell, c
        cdef bint present = True
        self._probes(h, pos, inc)
        for i in range(self._g.num_hashes):
            present = present and self._admits(cell_get(self._cells, self._width, pos[i]), inc[i])
        for i in range(self._g.num_hashes):
            cell = cell_get(self._cells, self._width, pos[i])
            c = cell & self._fixed_max
            if c != self._fixed_max:
                c += 1
            cell_set(self._cells, self._width, pos[i], self._pack(c, (cell >> self._fixed_bits) + inc[i]))
        return not present

    cdef bint _test_hash(self, uint64_t h) noexcept nogil:
        cdef uint64_t pos[MAX_HASHES]
        cdef uint32_t inc[MAX_HASHES]
        cdef uint32_t i
        self._probes(h, pos, inc)
        for i in range(self._g.num_hashes):
            if not self._admits(cell_get(self._cells, self._width, pos[i]), inc[i]):
                return False
        return True

    cdef bint _remove_hash(self, uint64_t h, uint32_t* undo) noexcept nogil:
        cdef uint64_t pos[MAX_HASHES]
        cdef uint32_t inc[MAX_HASHES]
        cdef uint32_t after[MAX_HASHES]
        cdef uint32_t i, cell, c, a
        cdef int j
        self._probes(h, pos, inc)
        # Work on copies, so a position the key probes twice sees its first removal; write back only if all pass.
        for i in range(self._g.num_hashes):
            cell = cell_get(self._cells, self._width, pos[i])
            for j in range(<int>i - 1, -1, -1):
                if pos[j] == pos[i]:
                    cell = after[j]
                    break
            if not self._admits(cell, inc[i]):
                return False
            c = cell & self._fixed_max
            a = (cell >> self._fixed_bits) - inc[i]
            if c != self._fixed_max:
                c -= 1
                if c == 0:
                    a = 0  # an exact count of 0: the position is empty
            after[i] = self._pack(c, a)
        for i in range(self._g.num_hashes):
            if undo != NULL:
                undo[i] = cell_get(self._cells, self._width, pos[i])
            cell_set(self._cells, self._width, pos[i], after[i])
        return True

    def _union_from(self, VariableIncrementCore other):
        """In place: the filter of both filters' keys, from one of the same geometry and increments (checked by
        the caller). Per position c = c1 + c2 (sticky at its maximum, as insertion keeps it) and a = a1 + a2 mod M:
        exactly the cell that inserting the other filter's keys one by one would leave."""
        cdef uint64_t i
        cdef uint32_t mine, theirs, c
        self._check_writable()
        other._check_ready()
        if (other._g.num_bits != self._g.num_bits or other._width != self._width
                or other._fixed_bits != self._fixed_bits):
            raise ValueError("filters differ in size")
        self._lock_writer()  # with the GIL (core.pxd's lock_writer)
        with nogil:
            for i in range(self._g.num_bits):
                theirs = cell_get(other._cells, other._width, i)
                if theirs == 0:
                    continue
                mine = cell_get(self._cells, self._width, i)
                c = (mine & self._fixed_max) + (theirs & self._fixed_max)
                if c > self._fixed_max:
                    c = self._fixed_max
                cell_set(self._cells, self._width, i,
                         self._pack(c, (mine >> self._fixed_bits) + (theirs >> self._fixed_bits)))
            bw_unlock(&self._lock)
        self._num_keys += other._num_keys

    # -- what a key sees -----------------------------------------------------------------------------------------------
    def _probe_many(self, keys):
        """(positions uint64, increments uint32, c uint32, a uint32), each of shape (*keys shape, k)."""
        self._check_ready()
        np = numpy()
        hashes, shape = flat_hashes(keys, self._hasher, self._key_func)
        cdef const uint64_t[::1] hs = hashes
        cdef Py_ssize_t i, n = hs.shape[0]
        cdef uint32_t j, cell, k = self._g.num_hashes
        cdef uint64_t pos[MAX_HASHES]
        cdef uint32_t inc[MAX_HASHES]
        pos_array = np.zeros((n, k), dtype=np.uint64)
        inc_array = np.zeros((n, k), dtype=np.uint32)
        c_array = np.zeros((n, k), dtype=np.uint32)
        a_array = np.zeros((n, k), dtype=np.uint32)
        cdef uint64_t[:, ::1] pos_out = pos_array
        cdef uint32_t[:, ::1] inc_out = inc_array, c_out = c_array, a_out = a_array
        with nogil:
            for i in range(n):
                self._probes(hs[i], pos, inc)
                for j in range(k):
                    cell = cell_get(self._cells, self._width, pos[j])
                    pos_out[i, j] = pos[j]
                    inc_out[i, j] = inc[j]
                    c_out[i, j] = cell & self._fixed_max
                    a_out[i, j] = cell >> self._fixed_bits
        full = tuple(shape) + (k,)
        return (pos_array.reshape(full), inc_array.reshape(full), c_array.reshape(full), a_array.reshape(full))

    def _cell_counts(self):
        """(positions with c > 0, positions with c saturated)."""
        cdef uint64_t i, used = 0, saturated = 0
        cdef uint32_t c
        self._check_ready()
        with nogil:
            for i in range(self._g.num_bits):
                c = cell_get(self._cells, self._width, i) & self._fixed_max
                used += c != 0
                saturated += c == self._fixed_max
        return used, saturated

    def _check_cells(self):
        """ValueError unless every empty position (c = 0) has a = 0 (an invariant of the kernels)."""
        cdef uint64_t i
        cdef uint32_t cell
        self._check_ready()
        for i in range(self._g.num_bits):
            cell = cell_get(self._cells, self._width, i)
            if (cell & self._fixed_max) == 0 and cell != 0:
                raise ValueError(f"position {i} has c = 0 but a = {cell >> self._fixed_bits}")

    @property
    def fixed_bits(self):
        """Bits of the fixed-increment counter c of each position."""
        return self._fixed_bits

    @property
    def variable_bits(self):
        """Bits of the variable-increment counter a of each position (a is kept modulo 2**variable_bits)."""
        return self._width - self._fixed_bits
