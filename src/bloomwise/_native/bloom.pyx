# cython: freethreading_compatible = False
"""Compiled core of the bit filters: single-key and batch kernels, threads (storage is in ``storage.pyx``, batches
and their hashing in ``hashes.pyx``).

Private: `bloomwise.BloomFilter` subclasses `BloomCore` and adds the Python-level API. The hot methods
(`add`, `__contains__`, `update`, `contains_many`) live here so a call costs one C method dispatch.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t, uintptr_t
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset, memcmp, memcpy

from bloomwise._native.hashing cimport (
    Hasher, check_scheme, hash_key, hash_object, hash_common_str, key_type_message, SCHEME_XXH64, SCHEME_XXH3,
)
from bloomwise._native.hashes cimport (
    Batch, FixedKeys, HashStream, make_batch, prehashed_batch, hash_fixed, hash_batch, simd512_in_use,
    CHUNK, BATCH_OBJECTS, BATCH_UINT64, BATCH_INT64, BATCH_HASHES,
)
from bloomwise._native.storage cimport AlignedBuffer, scratch_uint64
from bloomwise._native.support cimport check_int, check_threads, numpy
from bloomwise._native.core cimport PositionsCore, lock_writer_if_held
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
    size_t bw_avx2_select_blocks(const uint64_t* hs, size_t n, uint64_t num_blocks, uint64_t lo, uint64_t hi,
                                 uint64_t* out)
    int bw_simd_add_one(uint64_t* words, uint64_t num_blocks, uint32_t num_hashes, uint64_t h)
    int bw_simd_test_one(const uint64_t* words, uint64_t num_blocks, uint32_t num_hashes, uint64_t h)

cdef enum:
    PREFETCH_DISTANCE = 32  # keys ahead whose cache lines are requested

MAX_NUM_BITS = 2 ** 48  # 32 TiB of bits: far beyond any real filter, small enough to catch nonsense
# The kernel set is chosen once, at import: the best this CPU runs, or $BLOOMWISE_KERNELS (hashes.pyx).
cdef bint SIMD_ALLOWED = bw_simd_available() and _hashes.KERNELS != "scalar"
cdef bint use_simd = SIMD_ALLOWED          # blocked batches: the AVX2 bit kernels of simd.h (the same bits)
kernel_sets = _hashes.kernel_sets           # the sets this CPU can run, best first


def batch_kernels():
    """The SIMD batch kernels in use: "avx2" (blocked layout bits), "avx512" (XXH3 of numpy integers, threaded
    inserts' selection), both joined by "+", or "scalar". $BLOOMWISE_KERNELS chooses them at import: "auto" (the
    default: the best this CPU runs), "avx2+avx512", "avx2" or "scalar"; every set gives the same bits."""
    names = [name for name, used in (("avx2", use_simd), ("avx512", simd512_in_use())) if used]
    return "+".join(names) or "scalar"


def _use_simd(bint enabled):
    """Tests: switch the SIMD batch kernels off (or back on, up to the kernel set chosen at import). Returns the
    previous setting."""
    global use_simd
    previous = use_simd or simd512_in_use()
    use_simd = enabled and SIMD_ALLOWED
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
    if use_simd:
        return bw_avx2_select_blocks(hs, n, num_blocks, lo, hi, out)
    return bw_select_blocks(hs, n, num_blocks, lo, hi, out)


# ---- threaded blocked inserts: every key hashed once -------------------------------------------------------------
# T threads; "owner" u owns the blocks [floor(N u / T), floor(N (u + 1) / T)) (N blocks, whole cache lines). The batch
# is cut into rounds of T shares of `share` keys, and the work into two kinds of tasks, which any thread may run:
# - produce share t of round r: hash it (once) and group the hashes by owner into its slot of a ring of `depth`
#   rounds. Shares are claimed in order, and only once every owner is done with the round that used the slot before;
# - consume round r for owner u: set the bits of the hashes every share of round r grouped for u, in share order.
#   An owner's rounds are consumed in order, by one thread at a time (a flag per owner).
# So no two threads ever write one cache line at once, and each block sees its keys in batch order: the bits and the
# count of new keys are those of one thread. As any thread runs any task, a thread the OS deschedules between tasks
# holds up no one; one descheduled inside a task holds up only what depends on that task, once the ring is full.
cdef extern from *:
    """
    #include <sched.h>
    static inline Py_ssize_t bw_load_acquire(const Py_ssize_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void bw_store_release(Py_ssize_t *p, Py_ssize_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static inline int bw_claim(Py_ssize_t *p, Py_ssize_t expected) {
        return __atomic_compare_exchange_n(p, &expected, expected + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    }
    /* Nothing to do: spin briefly, then yield the core (the thread awaited may be waiting for this very core). */
    static inline void bw_wait(int *spins) {
    #if defined(__x86_64__) || defined(__i386__)
        if (*spins < 64) { (*spins)++; __builtin_ia32_pause(); return; }
    #endif
        sched_yield();
    }
    """
    Py_ssize_t bw_load_acquire(const Py_ssize_t* p) noexcept nogil
    void bw_store_release(Py_ssize_t* p, Py_ssize_t v) noexcept nogil
    bint bw_claim(Py_ssize_t* p, Py_ssize_t expected) noexcept nogil
    void bw_wait(int* spins) noexcept nogil

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void** memptr, size_t alignment, size_t size)

cdef enum:
    PIPE_SHARE = 4096       # keys per share (32 KiB of hashes: a core's L1)
    PIPE_DEPTH = 8          # rounds in the ring
    PIPE_SELECT_MAX = 4     # up to 4 owners: one selection pass per owner; beyond, a counting sort by owner id
    LINE = 8                # Py_ssize_t per shared counter: each on a cache line of its own


cdef struct Pipeline:
    const Geometry* g
    uint64_t* words
    const FixedKeys* keys
    Hasher hasher
    Py_ssize_t nthreads, share, rounds, depth, tasks
    Py_ssize_t room             # hashes per slot: share + 8 (a selection pass stores up to 8 past what it keeps)
    uint64_t* bounds            # [nthreads + 1]: owner u's blocks are [bounds[u], bounds[u + 1])
    uint64_t* slots             # [depth][nthreads] slots: one share of one round, grouped by owner
    Py_ssize_t* starts          # [depth][nthreads][nthreads + 1]: where each owner's group begins in a slot
    uint64_t* hashes            # [nthreads][share]: each thread's own hash buffer
    uint8_t* owners             # [nthreads][share]: owner ids (more than PIPE_SELECT_MAX owners)
    uint8_t* scratch            # [nthreads][scratch_room]: the UTF-8 of one 'U' key
    Py_ssize_t scratch_room
    Py_ssize_t* stamps          # [depth][nthreads][LINE]: round + 1 once that share of the round is grouped
    Py_ssize_t* consumed        # [nthreads][LINE]: rounds owner u is done with
    Py_ssize_t* busy            # [nthreads][LINE]: 1 while a thread consumes for owner u
    Py_ssize_t* shared          # [0]: the next share to produce (round * nthreads + t)
    Py_ssize_t* new_keys        # [nthreads][LINE]: new keys counted by each thread


cdef inline uint64_t owner_of(uint64_t block, uint64_t nthreads, uint64_t num_blocks) noexcept nogil:
    """The u with floor(N u / T) <= b < floor(N (u + 1) / T), that is floor(((b + 1) T - 1) / N)."""
    return ((block + 1) * nthreads - 1) // num_blocks


cdef void group_by_owner(const uint64_t* src, Py_ssize_t count, const Geometry* g, const uint64_t* bounds,
                         Py_ssize_t T, uint64_t* out, Py_ssize_t* starts, uint8_t* owner) noexcept nogil:
    """Copy src[0..count) to out grouped by owner, in order within each group; group u is out[starts[u]..starts[u+1]).
    out: room for count + 8 (a selection pass stores at most 8 hashes past those it keeps, which the next pass
    overwrites); owner: room for count ids (more than PIPE_SELECT_MAX owners)."""
    cdef Py_ssize_t u, i, off = 0
    if T <= PIPE_SELECT_MAX:
        for u in range(T):  # one branch-free selection pass per owner (AVX-512 or AVX2 where in use)
            starts[u] = off
            if count:
                off += select_blocks(src, count, g.num_blocks, bounds[u], bounds[u + 1], out + off)
        starts[T] = off
        return
    for u in range(T + 1):  # a counting sort by owner id
        starts[u] = 0
    for i in range(count):
        owner[i] = <uint8_t>owner_of(block_index(g, src[i]), T, g.num_blocks)
        starts[owner[i] + 1] += 1
    for u in range(T):  # starts[u]: where group u begins
        starts[u + 1] += starts[u]
    for i in range(count):  # starts[u] as group u's next free place: it ends where group u + 1 begins
        out[starts[owner[i]]] = src[i]
        starts[owner[i]] += 1
    for u in range(T, 0, -1):
        starts[u] = starts[u - 1]
    starts[0] = 0


cdef void pipe_produce(Pipeline* p, Py_ssize_t task, Py_ssize_t me) noexcept nogil:
    """Share `task` (round task // T, share task % T), run by thread `me`: hash it and group it by owner."""
    cdef Py_ssize_t T = p.nthreads, first = task * p.share, count = 0
    cdef Py_ssize_t s = (task // T % p.depth) * T + task % T
    cdef uint64_t* mine = p.hashes + me * p.share
    cdef const uint64_t* src = mine
    if first < p.keys.length:
        count = min(p.share, p.keys.length - first)
        if p.keys.kind == BATCH_HASHES:
            src = (<const uint64_t*>p.keys.data) + first
        else:
            hash_fixed(p.keys, first, count, p.hasher, mine, p.scratch + me * p.scratch_room)
    group_by_owner(src, count, p.g, p.bounds, T, p.slots + s * p.room, p.starts + s * (T + 1),
                   p.owners + me * p.share)


cdef uint64_t pipe_consume(Pipeline* p, Py_ssize_t u, Py_ssize_t r) noexcept nogil:
    """Owner u, round r: set the bits of the hashes every share grouped for u; how many keys were new."""
    cdef Py_ssize_t T = p.nthreads, t, s
    cdef Py_ssize_t* starts
    cdef uint64_t new_keys = 0
    for t in range(T):
        s = (r % p.depth) * T + t
        starts = p.starts + s * (T + 1)
        new_keys += add_hashes(p.g, p.words, p.slots + s * p.room + starts[u], starts[u + 1] - starts[u])
    return new_keys


cdef inline bint pipe_produced(Pipeline* p, Py_ssize_t r) noexcept nogil:
    """Whether every share of round r is grouped."""
    cdef Py_ssize_t t, base = (r % p.depth) * p.nthreads
    for t in range(p.nthreads):
        if bw_load_acquire(&p.stamps[(base + t) * LINE]) != r + 1:
            return False
    return True


cdef inline bint pipe_slot_free(Pipeline* p, Py_ssize_t r) noexcept nogil:
    """Whether round r may be written to the ring: every owner is done with round r - depth."""
    cdef Py_ssize_t u
    for u in range(p.nthreads):
        if bw_load_acquire(&p.consumed[u * LINE]) <= r - p.depth:
            return False
    return True


cdef bint pipe_step(Pipeline* p, Py_ssize_t me) noexcept nogil:
    """Run one task if one is ready: a round for an owner (this thread's own first), else the next share. Returns
    whether it ran one."""
    cdef Py_ssize_t T = p.nthreads, i, u, r, task
    for i in range(T):
        u = (me + i) % T
        r = bw_load_acquire(&p.consumed[u * LINE])
        if r < p.rounds and pipe_produced(p, r) and bw_claim(&p.busy[u * LINE], 0):
            r = bw_load_acquire(&p.consumed[u * LINE])  # another thread may have consumed it meanwhile
            if r < p.rounds and pipe_produced(p, r):
                p.new_keys[me * LINE] += pipe_consume(p, u, r)
                bw_store_release(&p.consumed[u * LINE], r + 1)
                bw_store_release(&p.busy[u * LINE], 0)
                return True
            bw_store_release(&p.busy[u * LINE], 0)
    task = bw_load_acquire(&p.shared[0])
    if task < p.tasks and pipe_slot_free(p, task // T) and bw_claim(&p.shared[0], task):
        pipe_produce(p, task, me)
        bw_store_release(&p.stamps[((task // T % p.depth) * T + task % T) * LINE], task // T + 1)
        return True
    return False


cdef void pipe_run(Pipeline* p, Py_ssize_t me) noexcept nogil:
    """Thread `me`: run tasks until every owner has consumed every round (one thread alone would do them all)."""
    cdef Py_ssize_t u
    cdef int spins = 0
    while True:
        if pipe_step(p, me):
            spins = 0
            continue
        for u in range(p.nthreads):
            if bw_load_acquire(&p.consumed[u * LINE]) < p.rounds:
                break
        else:
            return
        bw_wait(&spins)


# The last threaded insert's memory, kept for the next (taken and given back with the GIL held): memory a process has
# not used yet costs page faults, about 2 ms per MB on a virtual machine, more than a 100k-key insert itself.
cdef void* kept_memory = NULL
cdef size_t kept_size = 0
cdef size_t KEEP_AT_MOST = 8 << 20


cdef void* take_memory(size_t size) except NULL:
    global kept_memory, kept_size
    cdef void* memory = NULL
    if kept_memory != NULL and kept_size >= size:
        memory, kept_memory, kept_size = kept_memory, NULL, 0
        return memory
    if posix_memalign(&memory, 64, size) != 0:
        raise MemoryError(f"cannot allocate {size} bytes for a threaded insert")
    return memory


cdef void give_memory(void* memory, size_t size) noexcept:
    global kept_memory, kept_size
    if memory == NULL:
        return
    if size <= KEEP_AT_MOST and size > kept_size:
        free(kept_memory)
        kept_memory, kept_size = memory, size
    else:
        free(memory)


@cython.auto_pickle(False)
cdef class BlockedInsert:
    """The memory and the threads of one threaded blocked insert (the caller holds the filter's writer lock)."""
    cdef Pipeline p
    cdef Geometry g
    cdef void* memory
    cdef size_t size
    cdef object batch           # keeps the keys' buffer alive

    def __cinit__(self, Batch batch, int nthreads):
        cdef Py_ssize_t T = nthreads, n = batch.keys.length
        cdef size_t total
        cdef uintptr_t at
        self.batch = batch
        memset(&self.p, 0, sizeof(Pipeline))
        self.p.keys = &batch.keys
        self.p.nthreads = T
        self.p.share = max(1, min(<Py_ssize_t>PIPE_SHARE, (n + T - 1) // T))
        self.p.rounds = (n + T * self.p.share - 1) // (T * self.p.share)
        self.p.tasks = self.p.rounds * T
        self.p.depth = max(1, min(<Py_ssize_t>PIPE_DEPTH, self.p.rounds))
        self.p.room = self.p.share + 8
        self.p.scratch_room = (4 * batch.keys.width + 4 + 63) // 64 * 64
        line = LINE * sizeof(Py_ssize_t)
        sizes = [  # the counters first (zeroed), then the buffers
            self.p.depth * T * line,                               # stamps
            T * line,                                              # consumed
            T * line,                                              # busy
            line,                                                  # shared
            T * line,                                              # new_keys
            (T + 1) * sizeof(uint64_t),                            # bounds
            self.p.depth * T * self.p.room * sizeof(uint64_t),     # slots
            self.p.depth * T * (T + 1) * sizeof(Py_ssize_t),       # starts
            T * self.p.share * sizeof(uint64_t),                   # hashes
            T * self.p.share,                                      # owners
            T * self.p.scratch_room,                               # scratch
        ]
        sizes = [(size + 63) // 64 * 64 for size in sizes]
        total = sum(sizes)
        self.memory = take_memory(total)
        self.size = total
        memset(self.memory, 0, sum(sizes[:5]))
        at = <uintptr_t>self.memory
        self.p.stamps = <Py_ssize_t*><void*>at; at += sizes[0]
        self.p.consumed = <Py_ssize_t*><void*>at; at += sizes[1]
        self.p.busy = <Py_ssize_t*><void*>at; at += sizes[2]
        self.p.shared = <Py_ssize_t*><void*>at; at += sizes[3]
        self.p.new_keys = <Py_ssize_t*><void*>at; at += sizes[4]
        self.p.bounds = <uint64_t*><void*>at; at += sizes[5]
        self.p.slots = <uint64_t*><void*>at; at += sizes[6]
        self.p.starts = <Py_ssize_t*><void*>at; at += sizes[7]
        self.p.hashes = <uint64_t*><void*>at; at += sizes[8]
        self.p.owners = <uint8_t*><void*>at; at += sizes[9]
        self.p.scratch = <uint8_t*><void*>at

    cdef int attach(self, const Geometry* g, uint64_t* words, Hasher hasher) except -1:
        """The filter to fill: its geometry (copied), bits and hashing; each thread's range of blocks."""
        cdef Py_ssize_t u, T = self.p.nthreads
        self.g = g[0]
        self.p.g = &self.g
        self.p.words = words
        self.p.hasher = hasher
        for u in range(T + 1):
            self.p.bounds[u] = self.g.num_blocks * <uint64_t>u // <uint64_t>T
        return 0

    def __dealloc__(self):
        give_memory(self.memory, self.size)

    def _work(self, Py_ssize_t me):
        with nogil:
            pipe_run(&self.p, me)

    def _counts(self):
        """The new keys each thread counted."""
        return [self.p.new_keys[t * LINE] for t in range(self.p.nthreads)]

    def run_serial(self):
        """Every task, in this thread (tests, and the cost of the work without its synchronisation)."""
        with nogil:
            while pipe_step(&self.p, 0):
                pass
        return self._counts()

    def run(self):
        """Run thread 0 here and the others in new threads; returns each thread's count of new keys.

        Every thread runs tasks until all are done, so the insert completes whatever the threads that could be
        started: if the OS refuses one, those running do its share."""
        import threading
        cdef Py_ssize_t t
        started = []
        try:
            for t in range(1, self.p.nthreads):
                thread = threading.Thread(target=self._work, args=(t,), name=f"bloomwise-insert-{t}", daemon=True)
                thread.start()
                started.append(thread)
        except Exception:  # "can't start new thread" (RuntimeError), or no memory for one: fewer threads do it all
            pass
        finally:  # even on an interrupt: the filter's lock is released only once no thread writes any more
            self._work(0)
            for thread in started:
                thread.join()
        return self._counts()


# ---- the filter ---------------------------------------------------------------------------------------------
@cython.auto_pickle(False)
cdef class BloomCore(PositionsCore):
    """m bits, k probes per key, one of three layouts. Subclassed by bloomwise.BloomFilter."""
    cdef uint64_t* _words
    cdef uint64_t _new_keys     # insertions that set at least one new bit (the capacity warning counts these)
    cdef uint64_t _insertions   # every key added, repeats included (num_keys; the file header's keys_added)

    def _init_core(self, num_cells, num_hashes, int layout, seed=0, storage=None, num_keys=0, key=None,
                   int hash_scheme=SCHEME_XXH3, new_keys=None):
        """Set the geometry and the storage (new zeroed memory, or a buffer such as a mapped file's payload).

        ``num_keys``: every key added so far (the file header's keys_added); ``new_keys``: those that set a new bit
        (default: the same)."""
        if self._ready:
            raise RuntimeError("filter already initialised")
        if layout not in (LAYOUT_CLASSIC, LAYOUT_PARTITIONED, LAYOUT_BLOCKED):
            raise ValueError(f"unknown layout id {layout}")
        num_bits = check_int("num_cells", num_cells, 1, MAX_NUM_BITS)
        max_hashes = MAX_BLOCKED_HASHES if layout == LAYOUT_BLOCKED else MAX_HASHES
        num_hashes = check_int("num_hashes", num_hashes, 1, max_hashes)
        self._set_hashing(seed, key, hash_scheme)
        if layout == LAYOUT_PARTITIONED and num_bits < num_hashes:
            raise ValueError(f"num_cells must be at least num_hashes ({num_hashes}) for the partitioned layout, "
                             f"got {num_bits}")
        if layout == LAYOUT_BLOCKED and num_bits % BLOCK_BITS:
            raise ValueError(f"num_cells must be a multiple of 512 for the blocked layout, got {num_bits} "
                             f"(nearest: {(num_bits + BLOCK_BITS - 1) // BLOCK_BITS * BLOCK_BITS})")
        geometry_init(&self._g, num_bits, num_hashes, layout)
        self._nbytes = (num_bits + 63) // 64 * 8
        self._insertions = num_keys
        self._new_keys = num_keys if new_keys is None else new_keys
        storage = AlignedBuffer(self._nbytes) if storage is None else storage
        self._words = <uint64_t*>self._attach_storage(storage, "the filter needs")
        self._ready = True

    cdef void _forget_array(self) noexcept:
        self._words = NULL

    cdef int _count_new(self, uint64_t new_keys) except -1:
        self._new_keys += new_keys
        if self._capacity_limit and not self._warned and self._new_keys > self._capacity_limit:
            self._warned = True
            self._over_capacity()
        return 0

    # -- single keys --------------------------------------------------------------------------------------
    @cython.always_allow_keywords(False)  # the key is positional, like set.add: METH_O
    def add(self, key):
        """Add a key. Returns True when it was certainly not present before (some bit changed), else False. O(k)."""
        cdef uint64_t h
        cdef bint new_key, locked
        if self._key_func is not None:
            hash_object(key, self._hasher, self._key_func, &h)
        elif not hash_common_str(key, self._hasher, &h):
            hash_key(key, self._hasher, &h)
        if not self._writable:
            self._check_writable()
        locked = lock_writer_if_held(&self._lock)
        new_key = add_key(&self._g, self._words, h)
        if locked:
            bw_unlock(&self._lock)
        self._insertions += 1
        if new_key:
            self._new_keys += 1
            if self._new_keys > self._capacity_limit and self._capacity_limit and not self._warned:
                self._count_new(0)
        return new_key

    def __contains__(self, key):
        """`key in f`: False means certainly absent; True means "might be present". O(k)."""
        cdef uint64_t h
        if self._key_func is not None:
            hash_object(key, self._hasher, self._key_func, &h)
        elif not hash_common_str(key, self._hasher, &h):
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
            self._lock_writer()
            with nogil:
                new_keys = add_fixed(&self._g, self._words, &batch.keys, 0, n, self._hasher,
                                     stream.hashes, stream.scratch)
                bw_unlock(&self._lock)
        else:
            while start < n:
                count = min(<Py_ssize_t>CHUNK, n - start)
                stream.hash_objects(start, count, stream.hashes)
                self._lock_writer()
                with nogil:
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

        Blocked: each thread owns a range of whole blocks (cache lines); the keys are hashed once, each share by
        one thread, grouped by owner, and every thread sets the bits of the keys grouped for it (BlockedInsert).
        Each key has one owner and each block sees its keys in batch order, so the count of new keys stays exact.
        Classic and partitioned (k words all over the array per key): a filter no larger than the batch's hashes
        (8 bytes a key) is filled by slices of the keys, one thread in this filter and each other one in a private
        zeroed copy, OR-merged at the end; a larger one is cut into ranges of whole words, and each thread sets,
        for every key, the bits that fall in its range.
        """
        cdef BlockedInsert pipeline
        if batch.keys.kind == BATCH_OBJECTS:  # Python objects are hashed once, with the GIL
            batch = prehashed_batch(hash_batch(batch, self._hasher, self._key_func))
        blocked = self._g.layout == LAYOUT_BLOCKED
        if blocked:
            pipeline = BlockedInsert(batch, nthreads)
            pipeline.attach(&self._g, self._words, self._hasher)
            if isinstance(self._storage, AlignedBuffer) and batch.keys.length >= self._g.num_blocks // 8:
                with nogil:  # the batch touches (nearly) every page anyway
                    (<AlignedBuffer>self._storage).populate()
            self._lock_writer()
            try:
                counts = pipeline.run()
            finally:
                bw_unlock(&self._lock)
            self._count_new(sum(counts))
            return
        private_copies = self._nbytes <= 8 * <uint64_t>batch.keys.length
        if batch.keys.kind != BATCH_HASHES and not private_copies:
            hashes = scratch_uint64(batch.keys.length)
            run_threads(nthreads, batch.keys.length,
                        lambda lo, hi: hash_range(batch, self._hasher.seed, self._hasher.scheme, hashes, lo, hi))
            batch = prehashed_batch(hashes)
        if private_copies:
            helpers = [self] + [self._empty_like() for _ in range(nthreads - 1)]
            bounds = [batch.keys.length * t // nthreads for t in range(nthreads + 1)]
            work = lambda t, _: helpers[t]._add_slice_unlocked(batch, bounds[t], bounds[t + 1])
        else:
            ranges = self._write_ranges(nthreads)
            work = lambda t, _: self._add_prehashed_range(batch.items, *ranges[t])
        self._lock_writer()
        try:
            counts = run_threads(nthreads, nthreads, work)
            if private_copies:
                for helper in helpers[1:]:
                    self._or_unlocked(helper)
        finally:
            bw_unlock(&self._lock)
        if private_copies:  # a repeat may count twice
            self._count_new(sum(counts))
        else:  # a key's bits are spread over the threads: count the batch as new when any bit changed
            self._count_new(batch.keys.length if any(counts) else 0)

    def _update_pipelined_serially(self, keys, int nthreads):
        """Tests: a blocked threaded insert's work for nthreads threads, done by this thread in order."""
        cdef BlockedInsert pipeline
        cdef Batch batch = make_batch(keys, self._key_func is not None)
        self._check_writable()
        if self._g.layout != LAYOUT_BLOCKED or not 1 <= nthreads <= 64:
            raise ValueError("the pipelined insert is for the blocked layout and 1 to 64 threads")
        if batch.keys.kind == BATCH_OBJECTS:
            batch = prehashed_batch(hash_batch(batch, self._hasher, self._key_func))
        self._insertions += <uint64_t>batch.keys.length
        pipeline = BlockedInsert(batch, nthreads)
        pipeline.attach(&self._g, self._words, self._hasher)
        self._lock_writer()
        try:
            counts = pipeline.run_serial()
        finally:
            bw_unlock(&self._lock)
        self._count_new(sum(counts))
        return counts

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
        self._new_keys = 0
        self._insertions = 0
        self._warned = False

    def _combine(self, BloomCore other, bint union):
        """In place: self |= other (union) or self &= other. The caller checks compatibility."""
        cdef uint64_t i, nwords = self._nbytes // 8
        self._check_writable()
        other._check_ready()  # (a closed filter has no bits)
        if other._nbytes != self._nbytes:
            raise ValueError("filters differ in size")
        self._lock_writer()
        with nogil:
            if union:
                for i in range(nwords):
                    self._words[i] |= other._words[i]
            else:
                for i in range(nwords):
                    self._words[i] &= other._words[i]
            bw_unlock(&self._lock)

    def _same_bits(self, BloomCore other):
        self._check_ready()
        other._check_ready()
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
        self._lock_writer()
        with nogil:
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
    def num_cells(self):
        """m: the number of bits."""
        return self._g.num_bits

    @property
    def _new_keys_count(self):
        return self._new_keys

    @property
    def _insertions_count(self):
        return self._insertions

    def _count_insertions(self, uint64_t count):
        """Add to the count of keys added (Python-level insert paths and set operations)."""
        self._insertions += count



def _select_blocks(hashes, uint64_t num_blocks, uint64_t lo, uint64_t hi):
    """Tests: the hashes (numpy uint64) whose block lies in [lo, hi), as a threaded blocked insert groups a thread's
    keys (with the kernels in use: AVX-512, AVX2 or scalar)."""
    cdef const uint64_t[::1] hs = hashes
    out = numpy().empty(hs.shape[0], dtype=numpy().uint64)
    cdef uint64_t[::1] o = out
    cdef size_t count = 0
    if hs.shape[0]:
        count = select_blocks(&hs[0], hs.shape[0], num_blocks, lo, hi, &o[0])
    return out[:count]


def _group_by_owner(hashes, uint64_t num_blocks, int nthreads):
    """Tests: the hashes (numpy uint64) grouped by the thread that owns their block, as a threaded blocked insert
    of nthreads threads groups a share (with the kernels in use); a list of nthreads arrays."""
    cdef const uint64_t[::1] hs = hashes
    cdef Py_ssize_t n = hs.shape[0], u
    cdef Geometry g
    if not 1 <= nthreads <= 64 or not 1 <= num_blocks < 2**32:
        raise ValueError("nthreads must be in [1, 64] and num_blocks in [1, 2**32)")
    geometry_init(&g, num_blocks * BLOCK_BITS, 8, LAYOUT_BLOCKED)
    np = numpy()
    out = np.zeros(n + 8, dtype=np.uint64)  # as a slot of the ring: room for n + 8
    bounds = np.array([num_blocks * u // nthreads for u in range(nthreads + 1)], dtype=np.uint64)
    starts = np.zeros(nthreads + 1, dtype=np.intp)
    owner = np.zeros(n + 1, dtype=np.uint8)
    cdef uint64_t[::1] o = out, b = bounds
    cdef Py_ssize_t[::1] st = starts
    cdef uint8_t[::1] ow = owner
    group_by_owner(&hs[0] if n else NULL, n, &g, &b[0], nthreads, &o[0], &st[0], &ow[0])
    return [out[starts[u]:starts[u + 1]] for u in range(nthreads)]


def run_threads(int nthreads, total, work):
    """Split [0, total) into nthreads ranges and run work(lo, hi) on each in its own thread."""
    from concurrent.futures import ThreadPoolExecutor
    bounds = [total * t // nthreads for t in range(nthreads + 1)]
    with ThreadPoolExecutor(max_workers=nthreads) as pool:
        futures = [pool.submit(work, bounds[t], bounds[t + 1]) for t in range(nthreads)]
        return [f.result() for f in futures]
