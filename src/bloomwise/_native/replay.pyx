# cython: freethreading_compatible = False
"""Compiled replay of a request trace over independent byte-bounded caches (LRU or FIFO), over plain arrays.

This is the request loop of the cache simulator's policy ``none`` (``bloomwise.cache.simulation.replay``), with
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
recycled through a free list. Memory grows with the objects cached (56 to 112 bytes each: a 24-byte entry in arrays
grown by doubling, 16-byte slots at most half used), never with the requests or the distinct objects seen. Byte
counters are exact: 128-bit sums of sizes < 2**63.
"""
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memset

__all__ = ["IndependentCaches", "MAX_SIZE", "MAX_CAPACITY"]

#: the largest request size (bytes) and cache capacity the kernel takes: sizes fit int64, and bytes held
#: (at most twice the capacity) fit uint64
MAX_SIZE = 2 ** 63 - 1
MAX_CAPACITY = 2 ** 63 - 1

cdef enum:
    NONE = -1
    INITIAL_SLOTS = 16           # a power of two
    INITIAL_ENTRIES = 8
    MAX_ENTRIES = 2147483646     # int32 entry numbers (2**31 - 2)

cdef struct Slot:
    uint64_t key
    int32_t entry                # NONE: empty

cdef struct Entry:
    uint64_t key
    int64_t size
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


cdef inline void add_bytes(uint64_t* low, uint64_t* high, int64_t size) noexcept nogil:
    cdef uint64_t before = low[0]
    low[0] = before + <uint64_t>size
    if low[0] < before:
        high[0] += 1


cdef int store_init(Store* s) noexcept nogil:
    cdef uint64_t i
    s.slots = <Slot*>malloc(INITIAL_SLOTS * sizeof(Slot))
    s.entries = <Entry*>malloc(INITIAL_ENTRIES * sizeof(Entry))
    if s.slots == NULL or s.entries == NULL:
        return -1
    for i in range(INITIAL_SLOTS):
        s.slots[i].entry = NONE
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
    cdef uint64_t old_size = s.mask + 1, size = 2 * old_size, mask = size - 1, i, j
    cdef Slot* old = s.slots
    cdef Slot* slots = <Slot*>malloc(size * sizeof(Slot))
    if slots == NULL:
        return -1
    for i in range(size):
        slots[i].entry = NONE
    for i in range(old_size):
        if old[i].entry != NONE:
            j = slot_of(old[i].key, mask)
            while slots[j].entry != NONE:
                j = (j + 1) & mask
            slots[j] = old[i]
    free(old)
    s.slots, s.mask = slots, mask
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
        cdef int i
        if self.stores != NULL:
            for i in range(self.num_caches):
                free(self.stores[i].slots)
                free(self.stores[i].entries)
            free(self.stores)

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
                s.requests += 1
                add_bytes(&s.requested_low, &s.requested_high, size)
                e = store_find(s, key)
                if e != NONE:
                    s.hits += 1
                    add_bytes(&s.hit_low, &s.hit_high, size)
                    if lru:
                        make_youngest(s, e)
                    continue
                s.misses += 1
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
