# From a key's 64-bit hash to its positions, for each layout (docs/architecture.md, "From the hash to positions").
# Inline kernels shared by the bit filter (bloom.pyx) and the counting filters (counting.pyx).
from libc.stdint cimport uint8_t, uint32_t, uint64_t

cdef extern from "common.h" nogil:
    uint64_t bw_fmix64(uint64_t x)
    uint64_t bw_mulhi(uint64_t x, uint64_t range_)
    uint64_t bw_block_index(uint64_t h, uint64_t num_blocks)
    const uint32_t BW_SALT[16]
    void bw_prefetch_read(const void* p)
    void bw_prefetch_write(const void* p)

# Layout ids: the same numbers as the file format's Layout enum (append-only).
cdef enum:
    LAYOUT_CLASSIC = 1
    LAYOUT_PARTITIONED = 2
    LAYOUT_BLOCKED = 3

cdef enum:
    MAX_HASHES = 64          # classic and partitioned
    MAX_BLOCKED_HASHES = 16  # blocked: at most two probes per 64-bit lane
    BLOCK_WORDS = 8          # 512-bit blocks
    BLOCK_BITS = 512
    PREFETCH_FROM_BITS = 8 << 20  # 1 MiB: the L2 of one core here; smaller filters stay in cache


cdef struct Geometry:
    uint64_t num_bits
    uint64_t num_blocks               # blocked only: num_bits / 512 (< 2**32)
    uint32_t num_hashes
    int layout
    bint prefetch                     # batch loops request cache lines ahead (only worth it beyond L2)
    uint64_t slice_start[MAX_HASHES + 1]  # partitioned: slice i is [slice_start[i], slice_start[i+1])


cdef inline void geometry_init(Geometry* g, uint64_t num_bits, uint32_t num_hashes, int layout) noexcept nogil:
    cdef uint32_t i
    g.num_bits = num_bits
    g.num_hashes = num_hashes
    g.layout = layout
    g.num_blocks = num_bits // BLOCK_BITS
    g.prefetch = num_bits > PREFETCH_FROM_BITS
    if layout == LAYOUT_PARTITIONED:
        for i in range(num_hashes + 1):
            g.slice_start[i] = (<uint64_t>i * num_bits) // num_hashes


cdef inline uint64_t second_hash(uint64_t h) noexcept nogil:
    return bw_fmix64(h) | 1


cdef inline uint64_t probe(const Geometry* g, uint64_t h, uint64_t step, uint32_t i) noexcept nogil:
    """Position of probe i (classic and partitioned): g_i = h + i*step, reduced by multiply-high."""
    cdef uint64_t x = h + i * step
    if g.layout == LAYOUT_CLASSIC:
        return bw_mulhi(x, g.num_bits)
    return g.slice_start[i] + bw_mulhi(x, g.slice_start[i + 1] - g.slice_start[i])


cdef inline void positions(const Geometry* g, uint64_t h, uint64_t* out) noexcept nogil:
    """All k positions of a key in hash order (classic and partitioned; counting filters use this)."""
    cdef uint64_t step = second_hash(h)
    cdef uint32_t i
    for i in range(g.num_hashes):
        out[i] = probe(g, h, step, i)


# ---- blocked (split block) --------------------------------------------------------------------------
cdef inline uint64_t block_index(const Geometry* g, uint64_t h) noexcept nogil:
    return bw_block_index(h, g.num_blocks)


cdef inline uint64_t lane_mask(uint32_t num_hashes, uint32_t x, uint32_t lane) noexcept nogil:
    """The bits a key sets in lane `lane` of its block: probes `lane` and `lane + 8` (probe i -> lane i % 8)."""
    cdef uint64_t mask = 0
    if num_hashes == 8:  # what sizing picks for FPRs around 1%: one probe per lane, no branches
        return (<uint64_t>1) << ((<uint32_t>(x * BW_SALT[lane])) >> 26)
    if lane < num_hashes:
        mask = (<uint64_t>1) << ((<uint32_t>(x * BW_SALT[lane])) >> 26)
    if lane + 8 < num_hashes:
        mask |= (<uint64_t>1) << ((<uint32_t>(x * BW_SALT[lane + 8])) >> 26)
    return mask


# ---- bit kernels: set / test one key given its hash ------------------------------------------------------
cdef inline bint set_bits(const Geometry* g, uint64_t* words, uint64_t h) noexcept nogil:
    """Set a key's bits; True when at least one was 0 (the key was certainly not present before)."""
    cdef uint64_t* block
    cdef uint64_t changed = 0, step, pos, bit, mask
    cdef uint32_t i, k = g.num_hashes  # a local: stores to the bits could alias *g, so it would be reloaded
    if g.layout == LAYOUT_BLOCKED:
        block = words + block_index(g, h) * BLOCK_WORDS
        for i in range(BLOCK_WORDS):  # a constant trip count: unrolled, masks stay in registers
            mask = lane_mask(k, <uint32_t>h, i)
            changed |= mask & ~block[i]
            block[i] |= mask
        return changed != 0
    step = second_hash(h)
    for i in range(k):
        pos = probe(g, h, step, i)
        bit = (<uint64_t>1) << (pos & 63)
        changed |= bit & ~words[pos >> 6]
        words[pos >> 6] |= bit
    return changed != 0


cdef inline bint test_bits(const Geometry* g, const uint64_t* words, uint64_t h) noexcept nogil:
    """True when all of a key's bits are set ("might be present")."""
    cdef const uint64_t* block
    cdef uint64_t missing = 0, step, pos
    cdef uint32_t i, k = g.num_hashes
    if g.layout == LAYOUT_BLOCKED:
        block = words + block_index(g, h) * BLOCK_WORDS
        for i in range(BLOCK_WORDS):
            missing |= lane_mask(k, <uint32_t>h, i) & ~block[i]
        return missing == 0
    step = second_hash(h)
    for i in range(k):
        pos = probe(g, h, step, i)
        if not (words[pos >> 6] >> (pos & 63)) & 1:
            return False
    return True


cdef inline void prefetch_key(const Geometry* g, const uint64_t* words, uint64_t h, bint for_write) noexcept nogil:
    """Ask for the cache lines a key touches (one for blocked, k for the others)."""
    cdef uint64_t step
    cdef uint32_t i
    if g.layout == LAYOUT_BLOCKED:
        if for_write:
            bw_prefetch_write(words + block_index(g, h) * BLOCK_WORDS)
        else:
            bw_prefetch_read(words + block_index(g, h) * BLOCK_WORDS)
        return
    step = second_hash(h)
    for i in range(g.num_hashes):
        bw_prefetch_read(words + (probe(g, h, step, i) >> 6))
