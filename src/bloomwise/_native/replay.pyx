# cython: freethreading_compatible = False
"""Compiled replay of a request trace over byte-bounded caches (LRU or FIFO), over plain arrays: independent ones
(``IndependentCaches``, policy ``none``) and caches that ask each other (``CooperativeCaches``, the policies
``icp``, ``summary``, ``paradox`` and ``carp``: see its section below).

``IndependentCaches`` is the request loop of the cache simulator's policy ``none``
(``bloomwise.cache.simulation.replay``), with
the admission and eviction rules of ``bloomwise.cache.store.DocumentCache``, for callers that turn a trace into
arrays (``bloomwise.cache.fast_replay``): request ``i`` asks cache ``caches[i]`` for object ``keys[i]`` (a 64-bit
id: the object's number, or a hash of its key) of ``sizes[i]`` bytes. It knows nothing of the layers above.

Per request, at its cache ``c`` (``capacity`` bytes):

* a hit counts the request and its bytes as a hit; LRU moves the object to the young end, FIFO leaves it in place;
* a miss counts one miss and adds ``miss_cost`` to ``miss_cost_total`` (in request order, so the double sum is the
  one a Python loop makes); with several caches, a miss on an object that another cache holds counts as a false
  miss (the simulator's oracle); then the object is admitted: refused when larger than the whole cache, otherwise
  stored at the young end, and while the bytes held exceed ``capacity`` the oldest object is evicted (a cache filled
  exactly evicts nothing; the object just stored is the youngest and fits alone, so it is never its own victim).

State per cache: an open-addressing table (linear probing, at most half full, backward-shift deletion, so no
tombstones) from the 64-bit id to an entry ``(id, size, older, younger)`` of a doubly linked age list; entries are
recycled through a free list. Memory grows with the objects cached (64 to 128 bytes each: a 32-byte entry in arrays
grown by doubling, 16-byte slots at most half used), never with the requests or the distinct objects seen. Byte
counters are exact: 128-bit sums of sizes < 2**63.
"""
from libc.math cimport exp, fabs, log, log1p, pow, INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, qsort, realloc
from libc.string cimport memcpy, memset

from bloomwise._native.layouts cimport (Geometry, geometry_init, positions, probe, second_hash, test_bits,
                                         bw_prefetch_read, MAX_HASHES, LAYOUT_PARTITIONED)

__all__ = ["IndependentCaches", "CooperativeCaches", "COOPERATIVE_MODES", "MAX_SIZE", "MAX_CAPACITY"]

#: the largest request size (bytes) and cache capacity the kernel takes: sizes fit int64, and bytes held
#: (at most twice the capacity) fit uint64
MAX_SIZE = 2 ** 63 - 1
MAX_CAPACITY = 2 ** 63 - 1

cdef enum:
    NONE = -1
    INITIAL_SLOTS = 16           # a power of two
    INITIAL_ENTRIES = 8
    MAX_ENTRIES = 2147483646     # int32 entry numbers (2**31 - 2)
    LOOKAHEAD = 4                # CooperativeCaches.run: requests ahead whose memory it asks for (prefetch)

cdef struct Slot:
    uint64_t key
    int32_t entry                # NONE: empty

cdef struct Entry:
    uint64_t key
    int64_t size
    uint64_t filter_hash         # CooperativeCaches: the key's hash under its cache's summary seed
    int32_t older                # toward the oldest; NONE at the oldest
    int32_t younger              # toward the youngest; NONE at the youngest. Free entries: the next free one

cdef struct Store:
    Slot* slots
    uint64_t mask                # slots - 1
    Entry* entries
    int32_t allocated            # entries allocated
    int32_t count                # entries in use (= objects cached)
    int32_t unused               # entries never used yet start here (entries[unused:allocated])
    int32_t free_list
    int32_t oldest
    int32_t youngest
    uint64_t used                # bytes held
    # counters
    int64_t requests
    int64_t hits
    int64_t misses
    int64_t false_misses
    int64_t refused
    int64_t evictions
    uint64_t requested_low       # requested bytes = requested_high * 2**64 + requested_low
    uint64_t requested_high
    uint64_t hit_low
    uint64_t hit_high


cdef inline uint64_t slot_of(uint64_t key, uint64_t mask) noexcept nogil:
    """SplitMix64's finaliser: object numbers (0, 1, 2, ...) spread over the table like hashes do."""
    key = (key ^ (key >> 30)) * 0xBF58476D1CE4E5B9ULL
    key = (key ^ (key >> 27)) * 0x94D049BB133111EBULL
    return (key ^ (key >> 31)) & mask


cdef Slot* empty_slots(uint64_t count) noexcept nogil:
    """A table of ``count`` empty slots; NULL when out of memory."""
    cdef Slot* slots = <Slot*>malloc(count * sizeof(Slot))
    cdef uint64_t i
    if slots != NULL:
        for i in range(count):
            slots[i].entry = NONE
    return slots


cdef Slot* rehashed(Slot* old, uint64_t old_size, uint64_t size) noexcept nogil:
    """The used slots of ``old`` (``old_size`` of them) re-inserted by linear probing into a new table of ``size``
    slots (a power of two), ``old`` freed; NULL (``old`` kept) when out of memory."""
    cdef Slot* slots = empty_slots(size)
    cdef uint64_t i, j, mask = size - 1
    if slots == NULL:
        return NULL
    for i in range(old_size):
        if old[i].entry != NONE:
            j = slot_of(old[i].key, mask)
            while slots[j].entry != NONE:
                j = (j + 1) & mask
            slots[j] = old[i]
    free(old)
    return slots


cdef inline void add_bytes(uint64_t* low, uint64_t* high, int64_t size) noexcept nogil:
    cdef uint64_t before = low[0]
    low[0] = before + <uint64_t>size
    if low[0] < before:
        high[0] += 1


cdef int store_init(Store* s) noexcept nogil:
    s.slots = empty_slots(INITIAL_SLOTS)
    s.entries = <Entry*>malloc(INITIAL_ENTRIES * sizeof(Entry))
    if s.slots == NULL or s.entries == NULL:
        return -1
    s.mask = INITIAL_SLOTS - 1
    s.allocated = INITIAL_ENTRIES
    s.free_list = s.oldest = s.youngest = NONE
    return 0


cdef inline int32_t store_find(const Store* s, uint64_t key) noexcept nogil:
    """The entry of ``key``, or NONE."""
    cdef uint64_t i = slot_of(key, s.mask)
    cdef int32_t e
    while True:
        e = s.slots[i].entry
        if e == NONE or s.slots[i].key == key:
            return e
        i = (i + 1) & s.mask


cdef int grow_slots(Store* s) noexcept nogil:
    """Double the table and re-insert every key."""
    cdef uint64_t size = 2 * (s.mask + 1)
    cdef Slot* slots = rehashed(s.slots, s.mask + 1, size)
    if slots == NULL:
        return -1
    s.slots, s.mask = slots, size - 1
    return 0


cdef int32_t store_insert(Store* s, uint64_t key, int64_t size) noexcept nogil:
    """Store ``key`` (absent) at the young end; its entry, or NONE when out of memory."""
    cdef int32_t e
    cdef Entry* grown
    cdef uint64_t i
    if 2 * (<uint64_t>s.count + 1) > s.mask + 1 and grow_slots(s) < 0:
        return NONE
    if s.free_list != NONE:
        e = s.free_list
        s.free_list = s.entries[e].younger
    else:
        if s.unused == s.allocated:
            if s.allocated >= MAX_ENTRIES // 2:
                return NONE
            grown = <Entry*>realloc(s.entries, 2 * <size_t>s.allocated * sizeof(Entry))
            if grown == NULL:
                return NONE
            s.entries, s.allocated = grown, 2 * s.allocated
        e = s.unused
        s.unused += 1
    s.entries[e].key, s.entries[e].size = key, size
    s.entries[e].older, s.entries[e].younger = s.youngest, NONE
    if s.youngest != NONE:
        s.entries[s.youngest].younger = e
    else:
        s.oldest = e
    s.youngest = e
    i = slot_of(key, s.mask)
    while s.slots[i].entry != NONE:
        i = (i + 1) & s.mask
    s.slots[i].key, s.slots[i].entry = key, e
    s.count += 1
    s.used += <uint64_t>size
    return e


cdef inline void unlink(Store* s, int32_t e) noexcept nogil:
    cdef int32_t older = s.entries[e].older, younger = s.entries[e].younger
    if older != NONE:
        s.entries[older].younger = younger
    else:
        s.oldest = younger
    if younger != NONE:
        s.entries[younger].older = older
    else:
        s.youngest = older


cdef inline void make_youngest(Store* s, int32_t e) noexcept nogil:
    if s.youngest == e:
        return
    unlink(s, e)
    s.entries[e].older, s.entries[e].younger = s.youngest, NONE
    s.entries[s.youngest].younger = e
    s.youngest = e


cdef void stores_free(Store* stores, int count) noexcept nogil:
    """Free ``count`` caches' tables and the array that holds them (NULL: nothing)."""
    cdef int i
    if stores == NULL:
        return
    for i in range(count):
        free(stores[i].slots)
        free(stores[i].entries)
    free(stores)


cdef inline bint serve_local(Store* s, uint64_t key, int64_t size, bint lru) noexcept nogil:
    """Count a request at its cache: a stored key is a hit (made the youngest under LRU) and True; else a miss and
    False. Both replays start every request here."""
    s.requests += 1
    add_bytes(&s.requested_low, &s.requested_high, size)
    cdef int32_t e = store_find(s, key)
    if e == NONE:
        s.misses += 1
        return False
    s.hits += 1
    add_bytes(&s.hit_low, &s.hit_high, size)
    if lru:
        make_youngest(s, e)
    return True


cdef void remove_slot(Store* s, uint64_t key) noexcept nogil:
    """Empty the slot of ``key`` (present), shifting back the keys after it that probed past it."""
    cdef uint64_t mask = s.mask, hole = slot_of(key, mask), j, home
    while s.slots[hole].key != key or s.slots[hole].entry == NONE:
        hole = (hole + 1) & mask
    j = hole
    while True:
        j = (j + 1) & mask
        if s.slots[j].entry == NONE:
            break
        home = slot_of(s.slots[j].key, mask)
        if ((j - home) & mask) >= ((j - hole) & mask):  # its home is at or before the hole: it may move there
            s.slots[hole] = s.slots[j]
            hole = j
    s.slots[hole].entry = NONE


cdef void evict_oldest(Store* s) noexcept nogil:
    cdef int32_t e = s.oldest
    unlink(s, e)
    remove_slot(s, s.entries[e].key)
    s.used -= <uint64_t>s.entries[e].size
    s.entries[e].younger = s.free_list
    s.free_list = e
    s.count -= 1
    s.evictions += 1


cdef class IndependentCaches:
    """``num_caches`` empty caches of ``capacity`` bytes each, LRU (``lru=True``) or FIFO, that never ask each
    other; :meth:`replay` runs requests through them (call it once per block of a trace: the state carries over).

    :param miss_cost: added to :attr:`miss_cost_total` once per miss, in request order.
    """

    cdef Store* stores
    cdef int num_caches
    cdef uint64_t capacity
    cdef bint lru
    cdef double miss_cost
    cdef double total_miss_cost

    def __cinit__(self, int num_caches, capacity, bint lru, double miss_cost=0.0):
        cdef int i
        if num_caches < 1:
            raise ValueError(f"num_caches must be at least 1, got {num_caches}")
        if not 1 <= capacity <= MAX_CAPACITY:
            raise ValueError(f"capacity must be in [1, 2**63 - 1] bytes, got {capacity!r}")
        self.stores = <Store*>malloc(num_caches * sizeof(Store))
        if self.stores == NULL:
            raise MemoryError(f"no memory for {num_caches} caches")
        memset(self.stores, 0, num_caches * sizeof(Store))
        self.num_caches = num_caches
        for i in range(num_caches):
            if store_init(&self.stores[i]) < 0:
                raise MemoryError(f"no memory for {num_caches} caches")
        self.capacity, self.lru, self.miss_cost = capacity, lru, miss_cost
        self.total_miss_cost = 0.0

    def __dealloc__(self):
        stores_free(self.stores, self.num_caches)

    def replay(self, const uint64_t[::1] keys not None, const int64_t[::1] sizes not None,
               const int32_t[::1] caches not None):
        """Run requests ``i`` = 0 .. len(keys)-1: object ``keys[i]`` of ``sizes[i]`` bytes at cache ``caches[i]``.

        :raises ValueError: arrays of different lengths, a cache number outside [0, num_caches) or a negative size
            (checked before any request runs: the state is unchanged).
        :raises MemoryError: out of memory (the requests before the one that failed have run).
        """
        cdef Py_ssize_t n = keys.shape[0], r
        cdef int num = self.num_caches, c, other
        cdef int failed = 0
        cdef Store* s
        cdef Store* stores = self.stores
        cdef uint64_t key, capacity = self.capacity
        cdef int64_t size
        cdef int32_t e
        cdef bint lru = self.lru
        cdef double miss_cost = self.miss_cost, total_miss_cost = self.total_miss_cost
        if sizes.shape[0] != n or caches.shape[0] != n:
            raise ValueError(f"keys, sizes and caches must have one length, got {n}, {sizes.shape[0]}, "
                             f"{caches.shape[0]}")
        for r in range(n):
            if caches[r] < 0 or caches[r] >= num:
                raise ValueError(f"request {r}: cache {caches[r]} is not in [0, {num})")
            if sizes[r] < 0:
                raise ValueError(f"request {r}: size {sizes[r]} is negative")
        with nogil:
            for r in range(n):
                c, key, size = caches[r], keys[r], sizes[r]
                s = &stores[c]
                if serve_local(s, key, size, lru):
                    continue
                total_miss_cost += miss_cost
                if num > 1:
                    for other in range(num):
                        if other != c and store_find(&stores[other], key) != NONE:
                            s.false_misses += 1
                            break
                if <uint64_t>size > capacity:
                    s.refused += 1
                    continue
                if store_insert(s, key, size) == NONE:
                    failed = 1
                    break
                while s.used > capacity:
                    evict_oldest(s)
        self.total_miss_cost = total_miss_cost
        if failed:
            raise MemoryError(f"no memory for another cached object (request {r})")

    @property
    def num_caches(self) -> int:
        return self.num_caches

    @property
    def miss_cost_total(self) -> float:
        """``miss_cost`` summed once per miss, in request order."""
        return self.total_miss_cost

    def counters(self, int cache) -> dict:
        """Cache ``cache``'s counters: ``requests``, ``hits``, ``misses``, ``false_misses``, ``refused`` (misses
        larger than the cache), ``evictions``, ``requested_bytes``, ``hit_bytes``, ``documents`` and ``used_bytes``
        (now)."""
        if not 0 <= cache < self.num_caches:
            raise ValueError(f"cache {cache} is not in [0, {self.num_caches})")
        cdef Store* s = &self.stores[cache]
        return {"requests": s.requests, "hits": s.hits, "misses": s.misses, "false_misses": s.false_misses,
                "refused": s.refused, "evictions": s.evictions,
                "requested_bytes": (<object>s.requested_high << 64) + s.requested_low,
                "hit_bytes": (<object>s.hit_high << 64) + s.hit_low,
                "documents": s.count, "used_bytes": s.used}

    def keys_by_age(self, int cache) -> list:
        """The ids cached by ``cache``, oldest first (the eviction order)."""
        if not 0 <= cache < self.num_caches:
            raise ValueError(f"cache {cache} is not in [0, {self.num_caches})")
        cdef Store* s = &self.stores[cache]
        cdef int32_t e = s.oldest
        out = []
        while e != NONE:
            out.append(s.entries[e].key)
            e = s.entries[e].younger
        return out


# ---- cooperating caches: icp, summary and paradox -------------------------------------------------------------------
# The request loop of the simulator's policies ``icp``, ``summary`` and ``paradox`` (bloomwise.cache.simulation.replay,
# the reference), with each cache's counting filter and published summary (bloomwise.cache.store.DocumentCache and
# bloomwise.cache.summary.SummaryPublisher): the same hashes (XXH3-64 of the key's UTF-8 bytes under the cache's
# seed), the same positions (layouts.pxd, partitioned layout), 4-bit counters sticky at 15, the same publication
# rule (the threshold of new documents, the re-sizing tolerance, a whole summary or the smaller of delta and whole
# on the wire, byte for byte in size). Receivers' copies: every peer receives every update at the same instant, so
# one published copy per cache stands for all of them (the Python engine's ``wire=False``; ``wire=True`` gives the
# same state). ``paradox`` adds each proxy's prior of each peer (bloomwise.cache.routing.OnlinePrior: the
# bias-corrected EWMA, its closed-form runs of absent samples, Laplace smoothing over the effective sample size),
# the posterior of PeerSummary.posterior (Theorem 2's log-odds over the counters, or Bayes with the fill's FPR for
# bits) and ParadoxPolicy.order (the ratio p / tau above 1 / omega, sorted by decreasing ratio, ties in peer
# order, cut after a certain hit), the peers asked one at a time until the first hit. The floating-point
# operations are Python's, in its order, with the C library's pow, log, log1p and exp that Python's float ** and
# math functions call, and no fused multiply-adds (built with -ffp-contract=off): the same doubles.

cdef extern from "common.h" nogil:
    uint64_t bw_xxh3(const void* data, size_t length, uint64_t seed)
    int __builtin_ctzll(unsigned long long x)
    int __builtin_popcountll(unsigned long long x)


cdef enum:
    MODE_ICP = 1
    MODE_SUMMARY = 2
    MODE_PARADOX = 3
    MODE_CARP = 4
    COUNTER_MAX = 15
    KIND_BITS = 1
    KIND_COUNTERS = 2
    #: a summary update's bytes besides its content: the 64-byte file header and the 40-byte record (summary.py)
    UPDATE_OVERHEAD = 64 + 40
    #: an ICP query and its reply besides the URL twice (simulation.ICP_QUERY_OVERHEAD)
    ICP_OVERHEAD = 20 + 4 + 20

#: the policies CooperativeCaches runs, by name
COOPERATIVE_MODES = {"icp": MODE_ICP, "summary": MODE_SUMMARY, "paradox": MODE_PARADOX, "carp": MODE_CARP}


cdef struct Summary:
    # the cache's counting filter (one byte per 4-bit counter)
    uint8_t* cells
    uint64_t* words              # its bit view (counter > 0), kept up to date
    Geometry g
    uint64_t seed
    int64_t expected             # documents the filter is sized for
    uint8_t* dirty               # per chunk of 64 positions: changed since the last publication
    uint64_t* dirty_list
    uint64_t dirty_count
    # what the peers hold: the last published version
    bint published
    Geometry pub_g
    uint64_t* pub_words          # the bit view
    uint8_t* pub_cells           # counters kind: the counters (whole chunks of 64)
    int64_t pub_nonzero          # positions set (bits) or nonzero (counters) in the published version
    double pub_fpr               # PeerSummary.fpr: (pub_nonzero / m) ** k
    double log_ratios[16]        # PeerSummary's table log(c m / (n k)), c = 0..15 (counters kind)
    # the publisher's counts
    int64_t version
    int64_t changes              # documents added plus documents evicted
    int64_t new_documents
    int64_t changes_at
    int64_t new_at
    int64_t published_positions
    int64_t published_documents
    int64_t resizes
    # the node's counters (CacheNode)
    int64_t remote_hits
    int64_t false_hits
    int64_t false_misses
    int64_t peer_queries
    int64_t origin_fetches
    int64_t summaries_out
    uint64_t summary_bytes_out
    double query_cost


cdef int compare_u64(const void* a, const void* b) noexcept nogil:
    cdef uint64_t x = (<const uint64_t*>a)[0], y = (<const uint64_t*>b)[0]
    return (x > y) - (x < y)


cdef inline uint64_t varint_bytes(uint64_t value) noexcept nogil:
    """LEB128 length of ``value`` (the varints of a summary delta's position gaps)."""
    cdef uint64_t n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n


cdef inline uint64_t state_bytes(int kind, uint64_t num_cells) noexcept nogil:
    """A whole summary's content: bits, or 4-bit counters, in whole 64-bit words (a whole update's content in bloomwise.cache.summary)."""
    if kind == KIND_BITS:
        return (num_cells + 63) // 64 * 8
    return (num_cells * 4 + 63) // 64 * 8


cdef inline void mark_dirty(Summary* s, uint64_t position) noexcept nogil:
    cdef uint64_t chunk = position >> 6
    if not s.dirty[chunk]:
        s.dirty[chunk] = 1
        s.dirty_list[s.dirty_count] = chunk
        s.dirty_count += 1


cdef inline void filter_change(Summary* s, uint64_t h, int delta, bint all_changes) noexcept nogil:
    """CountingCore._add_hash (``delta`` +1) or ._remove_hash of a key present (``delta`` -1; partitioned: one
    probe per slice, so its counters are >= 1), with 4-bit counters: each counter moves by ``delta`` unless
    saturated (sticky). A counter leaving 0 or reaching it flips its bit; ``all_changes`` marks every changed
    counter's chunk dirty, else only the flipped bits'."""
    cdef uint64_t pos[MAX_HASHES]
    cdef uint32_t i
    cdef uint8_t c
    positions(&s.g, h, pos)
    for i in range(s.g.num_hashes):
        c = s.cells[pos[i]]
        if c != COUNTER_MAX:
            s.cells[pos[i]] = c + delta
            if c == 0 or c + delta == 0:
                s.words[pos[i] >> 6] ^= (<uint64_t>1) << (pos[i] & 63)
                mark_dirty(s, pos[i])
            elif all_changes:
                mark_dirty(s, pos[i])


cdef inline bint published_may_contain(const Summary* s, uint64_t h) noexcept nogil:
    """The peers' answer for a key of hash ``h``: all its positions set in the published bit view (for a counters
    summary, the same as all its counters nonzero)."""
    return test_bits(&s.pub_g, s.pub_words, h)


cdef inline void prefetch_probes(const Summary* s, uint64_t h) noexcept nogil:
    """Ask for the published words of a key's first two probes (a hint: the answer is published_may_contain's)."""
    cdef uint64_t step = second_hash(h)
    bw_prefetch_read(s.pub_words + (probe(&s.pub_g, h, step, 0) >> 6))
    if s.pub_g.num_hashes > 1:
        bw_prefetch_read(s.pub_words + (probe(&s.pub_g, h, step, 1) >> 6))


cdef struct Prior:             # OnlinePrior
    double num
    double den
    int64_t pending              # absent samples not folded in yet
    int64_t recorded


cdef enum:
    POWERS = 1 << 16             # pow(1 - w, t) kept for t below this: the same doubles as pow's, computed once


cdef inline double power(double* powers, double r, int64_t t) noexcept nogil:
    """``pow(r, t)``, from the table when t < POWERS (filled on first use by pow itself; -1 marks a gap)."""
    if t >= POWERS:
        return pow(r, <double>t)
    if powers[t] < 0.0:
        powers[t] = pow(r, <double>t)
    return powers[t]


cdef inline void prior_fold(Prior* a, double w, double* powers) noexcept nogil:
    cdef double decay
    if a.pending:
        decay = power(powers, 1.0 - w, a.pending)
        a.num *= decay
        a.den = a.den * decay + (1.0 - decay)
        a.recorded += a.pending
        a.pending = 0


cdef inline void prior_record(Prior* a, bint member, double w, double* powers) noexcept nogil:
    prior_fold(a, w, powers)
    a.num = (1.0 - w) * a.num + (w if member else 0.0)
    a.den = (1.0 - w) * a.den + w
    a.recorded += 1


cdef inline double prior_estimate(Prior* a, double w, double initial, double* powers) noexcept nogil:
    prior_fold(a, w, powers)
    return a.num / a.den if a.den > 0.0 else initial


cdef inline double prior_effective_samples(const Prior* a, double w, double* powers) noexcept nogil:
    cdef int64_t t = a.recorded + a.pending
    cdef double r, rt
    if t == 0:
        return 0.0
    r = 1.0 - w
    if r == 0.0:
        return 1.0
    rt = power(powers, r, t)
    return (1.0 - rt) * (1.0 + r) / ((1.0 - r) * (1.0 + rt))


cdef inline double prior_smoothed(Prior* a, double w, double initial, bint given, double fraction,
                                  double* powers) noexcept nogil:
    """OnlinePrior.smoothed(fraction if given else None)."""
    cdef double estimate, n
    if not (a.recorded or a.pending):
        return initial
    if given:
        fraction = fraction if fraction > 0.0 else 0.0  # max(0.0, fraction)
        estimate = fraction if fraction < 1.0 else 1.0  # min(1.0, ...)
    else:
        estimate = prior_estimate(a, w, initial, powers)
    n = prior_effective_samples(a, w, powers)
    return (n * estimate + 1.0) / (n + 2.0)


cdef void summary_derive(Summary* s, int kind, int64_t num_keys) noexcept nogil:
    """What PeerSummary derives from the version just published (its fpr and log-ratio table)."""
    cdef uint64_t m = s.pub_g.num_bits, k = s.pub_g.num_hashes
    cdef int64_t n = num_keys if num_keys > 1 else 1
    cdef double base
    cdef int c
    s.pub_fpr = pow(<double>s.pub_nonzero / <double>m, <double>k)
    if kind == KIND_COUNTERS:
        base = log(<double>m / <double>(n * <int64_t>k))
        s.log_ratios[0] = -INFINITY
        for c in range(1, 16):
            s.log_ratios[c] = log(<double>c) + base


cdef inline double posterior(const Summary* s, int kind, uint64_t h, double prior) noexcept nogil:
    """PeerSummary.posterior(key, prior) for a key of hash ``h`` that the summary may contain."""
    cdef uint64_t pos[MAX_HASHES]
    cdef uint32_t i
    cdef uint8_t c
    cdef double z = 0.0
    if prior <= 0.0:
        return 0.0
    if kind == KIND_COUNTERS:
        positions(&s.pub_g, h, pos)
        for i in range(s.pub_g.num_hashes):
            c = s.pub_cells[pos[i]]
            if c == 0:
                return 0.0
            z += s.log_ratios[c]
        if prior >= 1.0:
            return 1.0
        z += log(prior) - log1p(-prior)
        return 1.0 / (1.0 + exp(-z)) if z >= 0 else exp(z) / (1.0 + exp(z))
    return prior / (prior + (1.0 - prior) * s.pub_fpr)


cdef struct Directory:
    # which caches hold each cached key: one table look-up answers for every peer (the oracle's question)
    Slot* slots                  # key -> row (open addressing as Store's, at most half full)
    uint64_t mask
    int64_t count
    uint64_t* rows               # row r: words [r * width, (r + 1) * width), bit c set when cache c holds the key
    int32_t width                # 64-bit words per row
    int32_t allocated            # rows allocated
    int32_t unused               # rows never used yet start here
    int32_t free_list            # free rows, linked through their first word


cdef int directory_init(Directory* d, int num_caches) noexcept nogil:
    d.width = (num_caches + 63) // 64
    d.slots = empty_slots(INITIAL_SLOTS)
    d.rows = <uint64_t*>malloc(INITIAL_ENTRIES * d.width * sizeof(uint64_t))
    if d.slots == NULL or d.rows == NULL:
        return -1
    d.mask = INITIAL_SLOTS - 1
    d.allocated = INITIAL_ENTRIES
    d.free_list = NONE
    return 0


cdef inline const uint64_t* directory_find(const Directory* d, uint64_t key) noexcept nogil:
    """The row of ``key`` (the caches holding it), or NULL when none does."""
    cdef uint64_t i = slot_of(key, d.mask)
    cdef int32_t e
    while True:
        e = d.slots[i].entry
        if e == NONE:
            return NULL
        if d.slots[i].key == key:
            return d.rows + <size_t>e * d.width
        i = (i + 1) & d.mask


cdef int directory_add(Directory* d, uint64_t key, int cache) noexcept nogil:
    """Note that ``cache`` holds ``key``; -1 when out of memory."""
    cdef uint64_t i = slot_of(key, d.mask), size
    cdef int32_t e, w
    cdef Slot* slots
    cdef uint64_t* grown
    while True:
        e = d.slots[i].entry
        if e == NONE:
            break
        if d.slots[i].key == key:
            d.rows[<size_t>e * d.width + (cache >> 6)] |= (<uint64_t>1) << (cache & 63)
            return 0
        i = (i + 1) & d.mask
    if 2 * (<uint64_t>d.count + 1) > d.mask + 1:  # grow the table, then find the key's slot again
        size = 2 * (d.mask + 1)
        slots = rehashed(d.slots, d.mask + 1, size)
        if slots == NULL:
            return -1
        d.slots, d.mask = slots, size - 1
        i = slot_of(key, d.mask)
        while d.slots[i].entry != NONE:
            i = (i + 1) & d.mask
    if d.free_list != NONE:
        e = d.free_list
        d.free_list = <int32_t>d.rows[<size_t>e * d.width]
    else:
        if d.unused == d.allocated:
            if d.allocated >= MAX_ENTRIES // 2:
                return -1
            grown = <uint64_t*>realloc(d.rows, 2 * <size_t>d.allocated * d.width * sizeof(uint64_t))
            if grown == NULL:
                return -1
            d.rows, d.allocated = grown, 2 * d.allocated
        e = d.unused
        d.unused += 1
    for w in range(d.width):
        d.rows[<size_t>e * d.width + w] = 0
    d.rows[<size_t>e * d.width + (cache >> 6)] = (<uint64_t>1) << (cache & 63)
    d.slots[i].key, d.slots[i].entry = key, e
    d.count += 1
    return 0


cdef void directory_remove(Directory* d, uint64_t key, int cache) noexcept nogil:
    """Note that ``cache`` no longer holds ``key`` (held); the key leaves the table when no cache holds it."""
    cdef uint64_t mask = d.mask, hole = slot_of(key, mask), j, home
    cdef int32_t e, w
    cdef uint64_t* row
    while d.slots[hole].key != key or d.slots[hole].entry == NONE:
        hole = (hole + 1) & mask
    e = d.slots[hole].entry
    row = d.rows + <size_t>e * d.width
    row[cache >> 6] &= ~((<uint64_t>1) << (cache & 63))
    for w in range(d.width):
        if row[w]:
            return
    row[0] = <uint64_t><int64_t>d.free_list
    d.free_list = e
    d.count -= 1
    j = hole
    while True:  # backward-shift deletion, as Store's remove_slot
        j = (j + 1) & mask
        if d.slots[j].entry == NONE:
            break
        home = slot_of(d.slots[j].key, mask)
        if ((j - home) & mask) >= ((j - hole) & mask):
            d.slots[hole] = d.slots[j]
            hole = j
    d.slots[hole].entry = NONE


cdef inline uint64_t decimal_name(uint8_t* out, uint64_t number) noexcept nogil:
    """Write ``"GET "`` and the decimal digits of ``number`` (``str(number)``) to ``out`` (24 bytes); the digits'
    count."""
    cdef uint8_t reversed_digits[20]
    cdef uint64_t count = 0, i
    while True:
        reversed_digits[count] = <uint8_t>(48 + number % 10)
        count += 1
        number //= 10
        if number == 0:
            break
    out[0], out[1], out[2], out[3] = 71, 69, 84, 32  # "GET "
    for i in range(count):
        out[4 + i] = reversed_digits[count - 1 - i]
    return count


cdef inline uint32_t carp_score(uint32_t url_hash, uint32_t member_hash) noexcept nogil:
    """bloomwise.cache.routing.carp_score: c = url ^ member; c += c * 0x62531965; rotl(c, 21), 32 bits."""
    cdef uint32_t c = url_hash ^ member_hash
    c = c + c * <uint32_t>0x62531965
    return (c << 21) | (c >> 11)


cdef void summary_free(Summary* s) noexcept nogil:
    free(s.cells)
    free(s.words)
    free(s.dirty)
    free(s.dirty_list)
    free(s.pub_words)
    free(s.pub_cells)
    s.cells = NULL
    s.words = NULL
    s.dirty = NULL
    s.dirty_list = NULL
    s.pub_words = NULL
    s.pub_cells = NULL


cdef int filter_alloc(Summary* s, uint64_t num_cells, uint32_t num_hashes) noexcept nogil:
    """A new, empty counting filter of ``num_cells`` counters and ``num_hashes`` probes (the published copy stays)."""
    cdef uint64_t chunks = (num_cells + 63) // 64
    cdef uint8_t* cells = <uint8_t*>calloc(chunks * 64, 1)  # whole chunks: the comparisons read 8 bytes at a time
    cdef uint64_t* words = <uint64_t*>calloc(chunks, sizeof(uint64_t))
    cdef uint8_t* dirty = <uint8_t*>calloc(chunks, 1)
    cdef uint64_t* dirty_list = <uint64_t*>malloc(chunks * sizeof(uint64_t))
    if cells == NULL or words == NULL or dirty == NULL or dirty_list == NULL:
        free(cells)
        free(words)
        free(dirty)
        free(dirty_list)
        return -1
    free(s.cells)
    free(s.words)
    free(s.dirty)
    free(s.dirty_list)
    s.cells, s.words, s.dirty, s.dirty_list, s.dirty_count = cells, words, dirty, dirty_list, 0
    geometry_init(&s.g, num_cells, num_hashes, LAYOUT_PARTITIONED)
    return 0


cdef class CooperativeCaches:
    """``num_caches`` caches of ``capacity`` bytes (LRU or FIFO) that ask each other on a miss, under policy
    ``mode`` (``"icp"``, ``"summary"``, ``"paradox"`` or ``"carp"``), publishing summaries of ``kind`` ``"bits"`` or ``"counters"``: see the
    section comment above and bloomwise.cache.simulation.replay.

    :param miss_cost: omega, added to a request's wait when it goes to the origin; ``peer_cost``: tau.
    :param num_cells, num_hashes: each counting filter's starting geometry (m counters, k probes), sized for
        ``expected_entries`` documents.
    :param seed: cache p's filter hashes under seed ``seed + p``.
    :param update_threshold: new documents over documents cached before a summary is due.
    :param resize_tolerance: a fraction, or a negative number for None (never re-size).
    :param geometry: ``geometry(documents) -> (m, k)``, the geometry of a filter re-sized for that many documents
        (called at each re-sizing; bloomwise.cache.store.filter_geometry).
    :param prior_window, prior_estimator, initial_prior: paradox's priors (ParadoxPolicy's parameters).
    :param member_hashes: carp: each proxy's ``carp_member_hash(str(p))``.
    """

    cdef Store* stores
    cdef Summary* summaries
    cdef uint8_t* maybe          # per peer, this request: its summary may contain the key
    cdef uint64_t* hashes        # per peer, this request: the key's hash under its summary's seed
    cdef int32_t* held           # per peer, this request: whether it holds the key (the oracle's look-up)
    cdef Directory directory     # which caches hold each cached key
    cdef uint8_t name_buffer[32] # a numbered request's key, "GET <number>"
    cdef Prior* priors           # paradox: priors[p * num_caches + j], proxy p's prior of peer j
    cdef double* order_ratio     # paradox: the peers to ask, in order, with their ratio and posterior
    cdef double* order_prob
    cdef int* order_peer
    cdef const uint8_t* current_name
    cdef size_t current_name_length
    cdef bint mixture
    cdef double prior_weight, initial_prior
    cdef double* powers          # paradox: pow(1 - prior_weight, t) for t < POWERS
    cdef uint32_t* member_hashes # carp: carp_member_hash(str(p)) of each proxy
    cdef int num_caches
    cdef int mode
    cdef int kind
    cdef uint64_t capacity
    cdef bint lru
    cdef double miss_cost, peer_cost, update_threshold, resize_tolerance
    cdef object geometry
    # totals over all caches
    cdef double latency
    cdef uint64_t query_bytes
    cdef int64_t checks_lacking, check_false_positives
    cdef uint64_t remote_low, remote_high

    def __cinit__(self, int num_caches, capacity, bint lru, str mode, str kind, double miss_cost, double peer_cost,
                  num_cells, int num_hashes, int64_t expected_entries, seed, double update_threshold,
                  double resize_tolerance, geometry, double prior_window=1000.0, str prior_estimator="mixture",
                  double initial_prior=1.0, member_hashes=None):
        cdef int i
        if num_caches < 1:
            raise ValueError(f"num_caches must be at least 1, got {num_caches}")
        if not 1 <= capacity <= MAX_CAPACITY:
            raise ValueError(f"capacity must be in [1, 2**63 - 1] bytes, got {capacity!r}")
        if mode not in COOPERATIVE_MODES:
            raise ValueError(f"mode must be one of {', '.join(COOPERATIVE_MODES)}, got {mode!r}")
        if not 1 <= num_hashes <= MAX_HASHES or not num_hashes <= num_cells < 2 ** 48:
            raise ValueError(f"a filter of {num_cells} counters and {num_hashes} probes is beyond the kernel")
        self.stores = <Store*>calloc(num_caches, sizeof(Store))
        self.summaries = <Summary*>calloc(num_caches, sizeof(Summary))
        if prior_estimator not in ("mixture", "outcomes") or not prior_window >= 1.0:
            raise ValueError(f"prior_estimator must be 'mixture' or 'outcomes' and prior_window >= 1, got "
                             f"{prior_estimator!r}, {prior_window!r}")
        self.maybe = <uint8_t*>calloc(num_caches, 1)
        self.hashes = <uint64_t*>calloc(num_caches, sizeof(uint64_t))
        self.held = <int32_t*>calloc(num_caches, sizeof(int32_t))
        if directory_init(&self.directory, num_caches) < 0:
            raise MemoryError(f"no memory for the directory of {num_caches} caches")
        self.order_ratio = <double*>calloc(num_caches, sizeof(double))
        self.order_prob = <double*>calloc(num_caches, sizeof(double))
        self.order_peer = <int*>calloc(num_caches, sizeof(int))
        if mode == "paradox":
            self.priors = <Prior*>calloc(<size_t>num_caches * num_caches, sizeof(Prior))
            self.powers = <double*>malloc(POWERS * sizeof(double))
            if self.priors == NULL or self.powers == NULL:
                raise MemoryError(f"no memory for {num_caches}**2 priors")
            for i in range(POWERS):
                self.powers[i] = -1.0
        if mode == "carp":
            if member_hashes is None or len(member_hashes) != num_caches:
                raise ValueError(f"carp needs the {num_caches} proxies' member hashes")
            self.member_hashes = <uint32_t*>malloc(num_caches * sizeof(uint32_t))
            if self.member_hashes == NULL:
                raise MemoryError(f"no memory for {num_caches} member hashes")
            for i in range(num_caches):
                self.member_hashes[i] = member_hashes[i]
        self.mixture = prior_estimator == "mixture"
        self.prior_weight = 1.0 / prior_window
        self.initial_prior = initial_prior
        if self.stores == NULL or self.summaries == NULL or self.maybe == NULL or self.hashes == NULL \
                or self.held == NULL \
                or self.order_ratio == NULL or self.order_prob == NULL or self.order_peer == NULL:
            raise MemoryError(f"no memory for {num_caches} caches")
        self.num_caches = num_caches
        self.mode = COOPERATIVE_MODES[mode]
        if kind not in ("bits", "counters"):
            raise ValueError(f"kind must be 'bits' or 'counters', got {kind!r}")
        self.kind = KIND_BITS if kind == "bits" else KIND_COUNTERS
        for i in range(num_caches):
            if store_init(&self.stores[i]) < 0:
                raise MemoryError(f"no memory for {num_caches} caches")
            if self.mode == MODE_SUMMARY or self.mode == MODE_PARADOX:
                if filter_alloc(&self.summaries[i], num_cells, num_hashes) < 0:
                    raise MemoryError(f"no memory for {num_caches} filters of {num_cells} counters")
                self.summaries[i].seed = <uint64_t>((seed + i) & 0xFFFFFFFFFFFFFFFF)
                self.summaries[i].expected = expected_entries
        self.capacity, self.lru = capacity, lru
        self.miss_cost, self.peer_cost = miss_cost, peer_cost
        self.update_threshold, self.resize_tolerance = update_threshold, resize_tolerance
        self.geometry = geometry

    def __dealloc__(self):
        cdef int i
        stores_free(self.stores, self.num_caches)
        if self.summaries != NULL:
            for i in range(self.num_caches):
                summary_free(&self.summaries[i])
            free(self.summaries)
        free(self.maybe)
        free(self.hashes)
        free(self.held)
        free(self.directory.slots)
        free(self.directory.rows)
        free(self.priors)
        free(self.powers)
        free(self.member_hashes)
        free(self.order_ratio)
        free(self.order_prob)
        free(self.order_peer)

    # -- publication ---------------------------------------------------------------------------------------------------
    cdef inline bint due(self, int p) noexcept nogil:
        """SummaryPublisher.due."""
        cdef Summary* s = &self.summaries[p]
        cdef int64_t count = self.stores[p].count
        if s.version == 0:
            return s.changes != s.changes_at
        return <double>(s.new_documents - s.new_at) >= self.update_threshold * <double>(count if count > 1 else 1)

    cdef int resize(self, int p) except -1:
        """DocumentCache.resize_filter(documents cached): a new filter holding exactly the cached keys."""
        cdef Summary* s = &self.summaries[p]
        cdef Store* store = &self.stores[p]
        cdef int32_t e
        num_cells, num_hashes = self.geometry(store.count)
        if not 1 <= num_hashes <= MAX_HASHES or not num_hashes <= num_cells < 2 ** 48:
            raise ValueError(f"a filter of {num_cells} counters and {num_hashes} probes is beyond the kernel")
        if filter_alloc(s, num_cells, num_hashes) < 0:
            raise MemoryError(f"no memory for a filter of {num_cells} counters")
        e = store.oldest
        while e != NONE:
            filter_change(s, store.entries[e].filter_hash, 1, False)
            e = store.entries[e].younger
        s.expected = store.count
        s.resizes += 1
        return 0

    cdef int publish(self, int p) except -1:
        """SummaryPublisher.publish(): re-size first if the load drifted, then the whole summary (first version,
        or after a re-sizing) or the smaller of delta and whole; counts one copy per peer."""
        cdef Summary* s = &self.summaries[p]
        cdef int64_t count = self.stores[p].count
        cdef bint whole
        cdef uint64_t m, words, nbytes, whole_size, delta_size, chunk, i, j, end, position, previous, changed
        cdef uint64_t word, now_group, was_group, chunks
        cdef uint64_t* grown_words
        cdef uint8_t* grown_cells
        whole = s.version == 0
        if self.resize_tolerance >= 0 and count > 0 \
                and fabs(<double>(count - s.expected)) > self.resize_tolerance * <double>s.expected:
            self.resize(p)
            whole = True
        s.version += 1
        s.changes_at, s.new_at = s.changes, s.new_documents
        m = s.g.num_bits
        s.published_positions += <int64_t>m
        s.published_documents += count
        whole_size = UPDATE_OVERHEAD + state_bytes(self.kind, m)
        if whole:
            words = (m + 63) // 64
            grown_words = <uint64_t*>realloc(s.pub_words, words * sizeof(uint64_t))
            if grown_words == NULL:
                raise MemoryError(f"no memory for a summary of {m} positions")
            s.pub_words = grown_words
            memcpy(s.pub_words, s.words, words * sizeof(uint64_t))
            s.pub_nonzero = 0
            for i in range(words):
                s.pub_nonzero += __builtin_popcountll(s.words[i])
            if self.kind == KIND_COUNTERS:
                grown_cells = <uint8_t*>realloc(s.pub_cells, words * 64)
                if grown_cells == NULL:
                    raise MemoryError(f"no memory for a summary of {m} counters")
                s.pub_cells = grown_cells
                memcpy(s.pub_cells, s.cells, words * 64)
            s.pub_g = s.g
            nbytes = whole_size
        else:  # the positions that differ from the version the peers hold, in increasing order
            chunks = (m + 63) // 64
            if s.dirty_count * 8 > chunks:  # many: list them in order from the flags
                s.dirty_count = 0
                for chunk in range(chunks):
                    if s.dirty[chunk]:
                        s.dirty_list[s.dirty_count] = chunk
                        s.dirty_count += 1
            else:
                qsort(s.dirty_list, s.dirty_count, sizeof(uint64_t), compare_u64)
            delta_size = UPDATE_OVERHEAD
            changed = 0
            previous = <uint64_t>-1  # so that the first gap is the first position
            for j in range(s.dirty_count):
                chunk = s.dirty_list[j]
                if self.kind == KIND_BITS:  # the bits that flipped, in increasing order
                    word = s.words[chunk] ^ s.pub_words[chunk]
                    s.pub_nonzero += __builtin_popcountll(s.words[chunk]) - __builtin_popcountll(s.pub_words[chunk])
                    s.pub_words[chunk] = s.words[chunk]
                    while word:
                        position = chunk * 64 + <uint64_t>__builtin_ctzll(word)
                        word &= word - 1
                        delta_size += varint_bytes(position - previous - 1)
                        previous = position
                        changed += 1
                    continue
                for i in range(chunk * 64, chunk * 64 + 64, 8):  # counters: 8 at a time, then the ones that differ
                    memcpy(&now_group, s.cells + i, 8)
                    memcpy(&was_group, s.pub_cells + i, 8)
                    if now_group == was_group:
                        continue
                    for position in range(i, i + 8):
                        if s.cells[position] == s.pub_cells[position]:
                            continue
                        s.pub_cells[position] = s.cells[position]
                        delta_size += varint_bytes(position - previous - 1)
                        previous = position
                        changed += 1
                s.pub_nonzero += __builtin_popcountll(s.words[chunk]) - __builtin_popcountll(s.pub_words[chunk])
                s.pub_words[chunk] = s.words[chunk]
            if self.kind == KIND_COUNTERS:
                delta_size += (changed + 1) // 2
            nbytes = delta_size if delta_size <= whole_size else whole_size
        for j in range(s.dirty_count):
            s.dirty[s.dirty_list[j]] = 0
        s.dirty_count = 0
        s.published = True
        summary_derive(s, self.kind, count)
        s.summaries_out += self.num_caches - 1
        s.summary_bytes_out += nbytes * <uint64_t>(self.num_caches - 1)
        return 0

    # -- the requests --------------------------------------------------------------------------------------------------
    def replay(self, const uint64_t[::1] keys not None, const int64_t[::1] sizes not None,
               const int32_t[::1] caches not None, const uint8_t[::1] names not None,
               const int64_t[::1] name_offsets not None, const int64_t[::1] url_lengths not None):
        """Run requests ``i`` = 0 .. len(keys)-1: object ``keys[i]`` of ``sizes[i]`` bytes asked at cache
        ``caches[i]``; its cache key's UTF-8 bytes are ``names[name_offsets[i]:name_offsets[i + 1]]`` (what the
        filters hash) and its URL has ``url_lengths[i]`` characters (what an ICP query carries).

        :raises ValueError: arrays of different lengths, a cache number outside [0, num_caches), a negative size or
            offsets out of order (checked before any request runs).
        """
        cdef Py_ssize_t n = keys.shape[0], r
        cdef int num = self.num_caches
        if sizes.shape[0] != n or caches.shape[0] != n or url_lengths.shape[0] != n or name_offsets.shape[0] != n + 1:
            raise ValueError(f"keys, sizes, caches and url_lengths must have one length n and name_offsets n + 1, got "
                             f"{n}, {sizes.shape[0]}, {caches.shape[0]}, {url_lengths.shape[0]}, "
                             f"{name_offsets.shape[0]}")
        if name_offsets[0] < 0 or name_offsets[n] > names.shape[0]:
            raise ValueError("name_offsets point outside names")
        self.check(sizes, caches)
        for r in range(n):
            if name_offsets[r + 1] < name_offsets[r] or url_lengths[r] < 0:
                raise ValueError(f"request {r}: its name offsets decrease or its URL length is negative")
        if n:
            self.run(&keys[0], &sizes[0], &caches[0], &names[0] if names.shape[0] else NULL, &name_offsets[0],
                     &url_lengths[0], n)

    def replay_numbered(self, const uint64_t[::1] keys not None, const int64_t[::1] sizes not None,
                        const int32_t[::1] caches not None):
        """:meth:`replay` for requests whose URL is the decimal number ``keys[i]`` (libCacheSim's traces): the cache
        key ``"GET <keys[i]>"`` is written out here, on a local miss only."""
        cdef Py_ssize_t n = keys.shape[0]
        if sizes.shape[0] != n or caches.shape[0] != n:
            raise ValueError(f"keys, sizes and caches must have one length, got {n}, {sizes.shape[0]}, "
                             f"{caches.shape[0]}")
        self.check(sizes, caches)
        if n:
            self.run(&keys[0], &sizes[0], &caches[0], NULL, NULL, NULL, n)

    cdef int check(self, const int64_t[::1] sizes, const int32_t[::1] caches) except -1:
        cdef Py_ssize_t r
        for r in range(sizes.shape[0]):
            if caches[r] < 0 or caches[r] >= self.num_caches:
                raise ValueError(f"request {r}: cache {caches[r]} is not in [0, {self.num_caches})")
            if sizes[r] < 0:
                raise ValueError(f"request {r}: size {sizes[r]} is negative")
        return 0

    cdef int run(self, const uint64_t* keys, const int64_t* sizes, const int32_t* caches, const uint8_t* names,
                 const int64_t* name_offsets, const int64_t* url_lengths, Py_ssize_t n) except -1:
        """The requests, checked; ``names`` NULL: numbered keys (:meth:`replay_numbered`)."""
        cdef Py_ssize_t r
        cdef int num = self.num_caches, p, j
        cdef Store* stores = self.stores
        cdef Store* s
        cdef Summary* summaries = self.summaries
        cdef Summary* node
        cdef Summary* peer
        cdef uint8_t* maybe = self.maybe
        cdef int32_t* held = self.held
        cdef uint64_t key
        cdef int64_t size
        cdef int32_t e
        cdef bint lru = self.lru, served, summary = self.mode == MODE_SUMMARY, paradox = self.mode == MODE_PARADOX
        cdef bint cooperative = summary or paradox, carp = self.mode == MODE_CARP
        cdef uint64_t* hashes = self.hashes
        cdef int kind = self.kind
        cdef double tau = self.peer_cost, waited
        cdef const uint8_t* name
        cdef size_t name_length
        cdef uint64_t query_size, digits
        cdef const uint64_t* row
        cdef Store* ahead
        cdef const Slot* slot
        for r in range(n):
            # hints, no state changes: the table slots of a later request's key (its cache's and the directory's),
            # and the entry of a nearer one's (its slot asked for LOOKAHEAD requests ago)
            if r + 2 * LOOKAHEAD < n:
                ahead = &stores[caches[r + 2 * LOOKAHEAD]]
                bw_prefetch_read(&ahead.slots[slot_of(keys[r + 2 * LOOKAHEAD], ahead.mask)])
                bw_prefetch_read(&self.directory.slots[slot_of(keys[r + 2 * LOOKAHEAD], self.directory.mask)])
            if r + LOOKAHEAD < n:
                ahead = &stores[caches[r + LOOKAHEAD]]
                slot = &ahead.slots[slot_of(keys[r + LOOKAHEAD], ahead.mask)]
                if slot.entry != NONE and slot.key == keys[r + LOOKAHEAD]:
                    bw_prefetch_read(&ahead.entries[slot.entry])
            p, key, size = caches[r], keys[r], sizes[r]
            s = &stores[p]
            node = &summaries[p]
            if serve_local(s, key, size, lru):
                continue
            if names != NULL:
                name = names + name_offsets[r]
                name_length = <size_t>(name_offsets[r + 1] - name_offsets[r])
                query_size = ICP_OVERHEAD + 2 * (<uint64_t>url_lengths[r] + 1)
            else:
                digits = decimal_name(self.name_buffer, key)
                name, name_length = self.name_buffer, 4 + digits
                query_size = ICP_OVERHEAD + 2 * (digits + 1)
            self.current_name, self.current_name_length = name, name_length
            served = False
            waited = 0.0
            if carp:
                self.ask_home(p, key, size, query_size, name, name_length)
                continue
            row = directory_find(&self.directory, key)  # the caches that hold the key (asking changes none)
            for j in range(num):
                held[j] = row != NULL and (row[j >> 6] >> (j & 63)) & 1
            if cooperative:  # each peer's published summary, and the oracle's count of its false positives
                for j in range(num):  # the hashes first, asking for the words of their first two probes
                    if j == p or not summaries[j].published:
                        continue
                    peer = &summaries[j]
                    hashes[j] = bw_xxh3(name, name_length, peer.seed)
                    prefetch_probes(peer, hashes[j])
                for j in range(num):
                    maybe[j] = 0
                    if j == p or not summaries[j].published:
                        continue
                    peer = &summaries[j]
                    maybe[j] = published_may_contain(peer, hashes[j])
                    if not held[j]:
                        self.checks_lacking += 1
                        if maybe[j]:
                            self.check_false_positives += 1
            if paradox:
                self.ask_in_order(p, key, size, query_size)
                continue
            for j in range(num):
                if j == p or (summary and not maybe[j]):
                    continue
                node.peer_queries += 1
                node.query_cost += tau
                self.query_bytes += query_size
                waited = tau if tau > waited else waited
                if held[j]:
                    if lru:
                        make_youngest(&stores[j], store_find(&stores[j], key))
                    if not served:
                        node.remote_hits += 1
                        served = True
                elif summary:
                    node.false_hits += 1
            self.finish(p, key, size, served, waited, name, name_length)
        return 0

    cdef int finish(self, int p, uint64_t key, int64_t size, bint served, double waited, const uint8_t* name,
                    size_t name_length) except -1:
        """A local miss after its peers answered: the origin if none had it (and the oracle's false miss), the wait,
        and the document stored at ``p`` (:meth:`admit`)."""
        cdef Summary* node = &self.summaries[p]
        if served:
            add_bytes(&self.remote_low, &self.remote_high, size)
        else:
            node.origin_fetches += 1
            waited += self.miss_cost
            if directory_find(&self.directory, key) != NULL:  # another cache held it (this one did not)
                node.false_misses += 1
        self.latency += waited
        return self.admit(p, key, size, name, name_length)

    cdef int admit(self, int p, uint64_t key, int64_t size, const uint8_t* name, size_t name_length) except -1:
        """DocumentCache.put of a key ``p`` lacks: stored (its filter updated, the directory too) and the oldest
        evicted while over capacity, or refused when larger than the cache; then the summary published when due."""
        cdef Store* s = &self.stores[p]
        cdef Summary* node = &self.summaries[p]
        cdef int32_t e
        cdef uint64_t h, capacity = self.capacity
        cdef bint summaries = self.mode == MODE_SUMMARY or self.mode == MODE_PARADOX
        cdef bint counters = self.kind == KIND_COUNTERS
        if <uint64_t>size <= capacity:
            e = store_insert(s, key, size)
            if e == NONE or directory_add(&self.directory, key, p) < 0:
                raise MemoryError("no memory for another cached object")
            node.changes += 1
            node.new_documents += 1
            if summaries:
                h = bw_xxh3(name, name_length, node.seed)
                s.entries[e].filter_hash = h
                filter_change(node, h, 1, counters)
            while s.used > capacity:
                if summaries:
                    filter_change(node, s.entries[s.oldest].filter_hash, -1, counters)
                directory_remove(&self.directory, s.entries[s.oldest].key, p)
                evict_oldest(s)
                node.changes += 1
        else:
            s.refused += 1
        if summaries and self.due(p):
            self.publish(p)
        return 0

    cdef int ask_home(self, int p, uint64_t key, int64_t size, uint64_t query_size, const uint8_t* name,
                      size_t name_length) except -1:
        """``carp`` on a local miss: the URL's home (CarpPolicy.home: the highest carp_score over this proxy, then
        its peers in order; ties to the first), asked when it is another proxy: it serves the document, or fetches it
        from the origin and keeps it (the requester keeps no copy); when the home is this proxy, the origin."""
        cdef Summary* node = &self.summaries[p]
        cdef const uint8_t* url = name + 4  # after "GET " (an empty URL: the whole key, as key.partition gives)
        cdef size_t i, url_length = name_length - 4
        cdef uint32_t h = 0, score, best_score
        cdef int j, home = p
        cdef int32_t e
        cdef double tau = self.peer_cost, waited = 0.0
        if url_length == 0:
            url, url_length = name, name_length
        for i in range(url_length):  # carp_url_hash
            h = h + ((h << 19) | (h >> 13)) + url[i]
        best_score = carp_score(h, self.member_hashes[p])
        for j in range(self.num_caches):
            if j != p:
                score = carp_score(h, self.member_hashes[j])
                if score > best_score:
                    home, best_score = j, score
        if home == p:
            return self.finish(p, key, size, False, 0.0, name, name_length)
        e = store_find(&self.stores[home], key)
        node.peer_queries += 1
        node.query_cost += tau
        self.query_bytes += query_size
        waited = tau if tau > waited else waited
        if e != NONE:
            if self.lru:
                make_youngest(&self.stores[home], e)
            node.remote_hits += 1
            add_bytes(&self.remote_low, &self.remote_high, size)
        else:
            node.origin_fetches += 1
            self.admit(home, key, size, name, name_length)
            waited += self.miss_cost
        self.latency += waited
        return 0

    cdef int ask_in_order(self, int p, uint64_t key, int64_t size, uint64_t query_size) except -1:
        """``paradox`` on a local miss (after the oracle filled ``maybe`` and ``hashes``): ParadoxPolicy.order, then
        the peers asked one at a time until the first hit, and :meth:`finish`."""
        cdef Store* stores = self.stores
        cdef Summary* summaries = self.summaries
        cdef Summary* node = &summaries[p]
        cdef Summary* peer
        cdef Prior* priors = self.priors + <Py_ssize_t>p * self.num_caches
        cdef Prior* average
        cdef int j, num = self.num_caches, count = 0, at, kind = self.kind
        cdef int32_t e
        cdef bint mixture = self.mixture, served = False
        cdef double w = self.prior_weight, initial = self.initial_prior, tau = self.peer_cost
        cdef double threshold = 1.0 / self.miss_cost, prior, fpr, prob, ratio, waited = 0.0
        cdef double* powers = self.powers
        for j in range(num):
            if j == p or not summaries[j].published:
                continue
            peer = &summaries[j]
            average = &priors[j]
            if not self.maybe[j]:
                if mixture:
                    average.pending += 1
                continue
            if mixture:
                prior_record(average, True, w, powers)
                fpr = peer.pub_fpr
                if not (average.recorded + average.pending) or fpr >= 1.0:
                    prior = initial
                else:
                    prior = prior_smoothed(average, w, initial, True,
                                           (prior_estimate(average, w, initial, powers) - fpr) / (1.0 - fpr), powers)
            else:
                prior = prior_smoothed(average, w, initial, False, 0.0, powers)
            prob = posterior(peer, kind, self.hashes[j], prior)
            ratio = prob / tau
            if ratio > threshold:  # sorted by decreasing ratio, ties in the order found (Python's sort is stable)
                at = count
                while at > 0 and self.order_ratio[at - 1] < ratio:
                    self.order_ratio[at] = self.order_ratio[at - 1]
                    self.order_prob[at] = self.order_prob[at - 1]
                    self.order_peer[at] = self.order_peer[at - 1]
                    at -= 1
                self.order_ratio[at], self.order_prob[at], self.order_peer[at] = ratio, prob, j
                count += 1
        for at in range(count):
            j = self.order_peer[at]
            e = store_find(&stores[j], key) if self.held[j] else NONE
            node.peer_queries += 1
            node.query_cost += tau
            if e != NONE:
                if not served:
                    node.remote_hits += 1
            else:
                node.false_hits += 1
            if not mixture:
                if e != NONE:
                    prior_record(&priors[j], True, w, powers)
                else:
                    priors[j].pending += 1
            self.query_bytes += query_size
            waited = waited + tau
            if e != NONE:
                if self.lru:
                    make_youngest(&stores[j], e)
                served = True
                break
            if self.order_prob[at] >= 1.0:  # a certain hit ends the sequence
                break
        return self.finish(p, key, size, served, waited, self.current_name, self.current_name_length)

    def counters(self, int cache) -> dict:
        """Cache ``cache``'s counters, named as CacheNode's and SummaryPublisher's: ``requests``, ``local_hits``,
        ``remote_hits``, ``false_hits``, ``false_misses``, ``peer_queries``, ``origin_fetches``, ``query_cost``,
        ``summaries_out``, ``summary_bytes_out``, ``published_positions``, ``published_documents``, ``resizes``,
        ``requested_bytes``, ``local_hit_bytes``, ``documents``, ``summary_cells`` (the positions of the summary
        its peers hold, 0 before its first publication)."""
        if not 0 <= cache < self.num_caches:
            raise ValueError(f"cache {cache} is not in [0, {self.num_caches})")
        cdef Store* s = &self.stores[cache]
        cdef Summary* node = &self.summaries[cache]
        return {"requests": s.requests, "local_hits": s.hits, "remote_hits": node.remote_hits,
                "false_hits": node.false_hits, "false_misses": node.false_misses, "peer_queries": node.peer_queries,
                "origin_fetches": node.origin_fetches, "query_cost": node.query_cost,
                "summaries_out": node.summaries_out, "summary_bytes_out": node.summary_bytes_out,
                "published_positions": node.published_positions, "published_documents": node.published_documents,
                "resizes": node.resizes,
                "requested_bytes": (<object>s.requested_high << 64) + s.requested_low,
                "local_hit_bytes": (<object>s.hit_high << 64) + s.hit_low,
                "documents": s.count,
                "summary_cells": node.pub_g.num_bits if node.published else 0}

    def totals(self) -> dict:
        """Totals over all caches, summed in request order: ``latency``, ``query_bytes``, ``remote_hit_bytes``,
        ``peer_checks_lacking``, ``peer_check_false_positives``."""
        return {"latency": self.latency, "query_bytes": self.query_bytes,
                "remote_hit_bytes": (<object>self.remote_high << 64) + self.remote_low,
                "peer_checks_lacking": self.checks_lacking,
                "peer_check_false_positives": self.check_false_positives}
