/* Batch kernels in AVX2 and AVX-512, chosen at run time (docs/architecture.md, "Batch kernels").
 *
 * 1. The blocked layout's bit kernels (AVX2).
 *
 * The same bits as the scalar kernels of layouts.pxd, computed eight lanes at once: probe i of a key sets bit
 * (x * BW_SALT[i]) >> 26 of lane i % 8, x being the low 32 bits of its hash (Putze, Sanders & Singler 2007,
 * "Cache-, hash- and space-efficient Bloom filters", split block variant). A 512-bit block is two 256-bit
 * registers, so one key costs two loads, a multiply, two variable shifts and (insert) two stores, instead of
 * eight scalar lane updates: about half the time in cache, and what lets a batch keep more misses in flight.
 *
 * 2. XXH3-64 of numpy 64-bit integer keys, eight at a time (AVX-512F/DQ: 64-bit rotates and multiplies).
 *    Integer keys hash their 8 little-endian bytes, which XXH3 reads as two 32-bit halves swapped (its 4-8 byte
 *    path), then mixes with rrmxmx: the same arithmetic, lane by lane, as bw_xxh3_u64.
 *
 * 3. Threaded blocked inserts: which hashes fall in the blocks a thread owns, eight at a time (AVX-512F) or four
 *    (AVX2).
 *
 * Built with __attribute__((target(...))), so the module stays portable x86-64: bw_simd_available() and
 * bw_simd512_available() ask the CPU once, and the Cython callers fall back to the scalar loops elsewhere
 * (other CPUs, other compilers).
 */
#ifndef BLOOMWISE_SIMD_H
#define BLOOMWISE_SIMD_H

#include <stddef.h>
#include <stdint.h>
#include "common.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

static inline int bw_simd_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

static inline int bw_simd512_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}

/* Per-call constants: the 16 salts and, for each, a shift count that is >= 64 (vpsllvq then gives 0) when the
 * probe does not exist (k < 16). Probes 0-7 go to lanes 0-7, probes 8-15 to lanes 0-7 again. */
typedef struct { __m256i salt_lo, salt_hi, off_lo, off_hi; int two; } bw_lane_plan;

__attribute__((target("avx2")))
static inline bw_lane_plan bw_plan(uint32_t num_hashes) {
    bw_lane_plan p;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i sixty_four = _mm256_set1_epi32(64);
    p.salt_lo = _mm256_loadu_si256((const __m256i *)BW_SALT);
    p.salt_hi = _mm256_loadu_si256((const __m256i *)(BW_SALT + 8));
    /* lane >= k: no probe there; lane + 8 >= k likewise */
    p.off_lo = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)num_hashes), lane), sixty_four);
    p.off_hi = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)num_hashes - 8), lane), sixty_four);
    p.two = num_hashes > 8;
    return p;
}

/* One 64-bit lane per 32-bit count: 1 << count, 0 when count >= 64. */
__attribute__((target("avx2")))
static inline void bw_spread(__m256i counts, __m256i *lo, __m256i *hi) {
    const __m256i one = _mm256_set1_epi64x(1);
    *lo = _mm256_sllv_epi64(one, _mm256_cvtepu32_epi64(_mm256_castsi256_si128(counts)));
    *hi = _mm256_sllv_epi64(one, _mm256_cvtepu32_epi64(_mm256_extracti128_si256(counts, 1)));
}

/* The key's 512-bit mask as two registers (lanes 0-3, lanes 4-7). */
__attribute__((target("avx2")))
static inline void bw_block_mask(const bw_lane_plan *p, uint32_t x, __m256i *m0, __m256i *m1) {
    const __m256i xs = _mm256_set1_epi32((int)x);
    __m256i c = _mm256_or_si256(_mm256_srli_epi32(_mm256_mullo_epi32(xs, p->salt_lo), 26), p->off_lo);
    bw_spread(c, m0, m1);
    if (p->two) {
        __m256i a, b;
        c = _mm256_or_si256(_mm256_srli_epi32(_mm256_mullo_epi32(xs, p->salt_hi), 26), p->off_hi);
        bw_spread(c, &a, &b);
        *m0 = _mm256_or_si256(*m0, a);
        *m1 = _mm256_or_si256(*m1, b);
    }
}

static inline uint64_t *bw_block_of(uint64_t *words, uint64_t num_blocks, uint64_t h) {
    return words + bw_block_index(h, num_blocks) * 8;
}

/* Set one key's bits; 1 when at least one was 0. Unaligned loads: a mapped file's payload need not be 32-byte
 * aligned. */
__attribute__((target("avx2")))
static inline int bw_block_add(const bw_lane_plan *p, uint64_t *words, uint64_t num_blocks, uint64_t h) {
    __m256i *block = (__m256i *)bw_block_of(words, num_blocks, h);
    __m256i m0, m1;
    bw_block_mask(p, (uint32_t)h, &m0, &m1);
    const __m256i b0 = _mm256_loadu_si256(block), b1 = _mm256_loadu_si256(block + 1);
    const __m256i changed = _mm256_or_si256(_mm256_andnot_si256(b0, m0), _mm256_andnot_si256(b1, m1));
    _mm256_storeu_si256(block, _mm256_or_si256(b0, m0));
    _mm256_storeu_si256(block + 1, _mm256_or_si256(b1, m1));
    return !_mm256_testz_si256(changed, changed);
}

/* 1 when all of one key's bits are set: testc(b, m) is (~b & m) == 0. */
__attribute__((target("avx2")))
static inline int bw_block_test(const bw_lane_plan *p, const uint64_t *words, uint64_t num_blocks, uint64_t h) {
    const __m256i *block = (const __m256i *)bw_block_of((uint64_t *)words, num_blocks, h);
    __m256i m0, m1;
    bw_block_mask(p, (uint32_t)h, &m0, &m1);
    return _mm256_testc_si256(_mm256_loadu_si256(block), m0) & _mm256_testc_si256(_mm256_loadu_si256(block + 1), m1);
}

/* The single-key path (add, in): one key, about half the instructions of the scalar lane loop. That matters
 * beyond the arithmetic: with fewer instructions per call, more of Python's next loop iteration fits in the
 * CPU's reorder window while this key's cache line is on its way, so the misses of consecutive keys overlap. */
__attribute__((target("avx2")))
static int bw_simd_add_one(uint64_t *words, uint64_t num_blocks, uint32_t num_hashes, uint64_t h) {
    const bw_lane_plan p = bw_plan(num_hashes);
    return bw_block_add(&p, words, num_blocks, h);
}

__attribute__((target("avx2")))
static int bw_simd_test_one(const uint64_t *words, uint64_t num_blocks, uint32_t num_hashes, uint64_t h) {
    const bw_lane_plan p = bw_plan(num_hashes);
    return bw_block_test(&p, words, num_blocks, h);
}

/* Set the bits of n keys given their hashes; prefetch `distance` keys ahead (0: none). Returns how many keys
 * changed at least one bit. */
__attribute__((target("avx2")))
static uint64_t bw_simd_add(uint64_t *words, uint64_t num_blocks, uint32_t num_hashes,
                            const uint64_t *hs, size_t n, size_t distance) {
    const bw_lane_plan p = bw_plan(num_hashes);
    uint64_t new_keys = 0;
    size_t i;
    for (i = 0; i < n && i < distance; i++) bw_prefetch_write(bw_block_of(words, num_blocks, hs[i]));
    for (i = 0; i < n; i++) {
        if (i + distance < n && distance) bw_prefetch_write(bw_block_of(words, num_blocks, hs[i + distance]));
        new_keys += bw_block_add(&p, words, num_blocks, hs[i]);
    }
    return new_keys;
}

/* out[i] = 1 when all of key i's bits are set. */
__attribute__((target("avx2")))
static void bw_simd_test(const uint64_t *words, uint64_t num_blocks, uint32_t num_hashes,
                         const uint64_t *hs, size_t n, uint8_t *out, size_t distance) {
    const bw_lane_plan p = bw_plan(num_hashes);
    size_t i;
    for (i = 0; i < n && i < distance; i++) bw_prefetch_read(bw_block_of((uint64_t *)words, num_blocks, hs[i]));
    for (i = 0; i < n; i++) {
        if (i + distance < n && distance)
            bw_prefetch_read(bw_block_of((uint64_t *)words, num_blocks, hs[i + distance]));
        out[i] = (uint8_t)bw_block_test(&p, words, num_blocks, hs[i]);
    }
}

/* ---- XXH3-64 of 64-bit integers, eight at a time ------------------------------------------------------ */
/* rrmxmx of eight (swapped key ^ bitflip) lanes. */
__attribute__((target("avx512f,avx512dq")))
static inline __m512i bw_rrmxmx8(__m512i v) {
    const __m512i mx = _mm512_set1_epi64((long long)BW3_MX2), len = _mm512_set1_epi64(8);
    v = _mm512_xor_si512(v, _mm512_xor_si512(_mm512_rol_epi64(v, 49), _mm512_rol_epi64(v, 24)));
    v = _mm512_mullo_epi64(v, mx);
    v = _mm512_xor_si512(v, _mm512_add_epi64(_mm512_srli_epi64(v, 35), len));
    v = _mm512_mullo_epi64(v, mx);
    return _mm512_xor_si512(v, _mm512_srli_epi64(v, 28));
}

/* out[i] = bw_xxh3_u64(in[i], seed). */
__attribute__((target("avx512f,avx512dq")))
static void bw_simd_hash_u64(const uint64_t *in, uint64_t *out, size_t n, uint64_t seed) {
    const __m512i bitflip = _mm512_set1_epi64((long long)bw3_bitflip_4to8(seed));
    size_t i = 0;
    for (; i + 8 <= n; i += 8)  /* ror 32: the two 32-bit halves swapped */
        _mm512_storeu_si512(out + i, bw_rrmxmx8(_mm512_xor_si512(_mm512_ror_epi64(_mm512_loadu_si512(in + i), 32),
                                                                  bitflip)));
    for (; i < n; i++) out[i] = bw_xxh3_u64(in[i], seed);
}

/* Signed keys: non-negative ones under seed_nonneg, negative ones under seed_neg (their own key domain). */
__attribute__((target("avx512f,avx512dq")))
static void bw_simd_hash_i64(const int64_t *in, uint64_t *out, size_t n, uint64_t seed_nonneg, uint64_t seed_neg) {
    const __m512i flip_nonneg = _mm512_set1_epi64((long long)bw3_bitflip_4to8(seed_nonneg));
    const __m512i flip_neg = _mm512_set1_epi64((long long)bw3_bitflip_4to8(seed_neg));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m512i v = _mm512_loadu_si512(in + i);
        const __m512i flip = _mm512_mask_blend_epi64(_mm512_cmplt_epi64_mask(v, _mm512_setzero_si512()),
                                                     flip_nonneg, flip_neg);
        _mm512_storeu_si512(out + i, bw_rrmxmx8(_mm512_xor_si512(_mm512_ror_epi64(v, 32), flip)));
    }
    for (; i < n; i++) out[i] = bw_xxh3_u64((uint64_t)in[i], in[i] < 0 ? seed_neg : seed_nonneg);
}

/* ---- threaded blocked inserts: the hashes of keys whose block a thread owns ----------------------------- */
/* bw_select_blocks (common.h) with AVX-512F: eight block indices at once (a 32x32-bit multiply per lane); the owned
 * hashes are compressed in a register and stored unaligned (a compressing store straight to memory is microcoded
 * and slow on AMD Zen 4). Every store stays below out + n (count <= i) and below out + (the count returned) + 8. */
__attribute__((target("avx512f")))
static size_t bw_simd_select_blocks(const uint64_t *hs, size_t n, uint64_t num_blocks, uint64_t lo, uint64_t hi,
                                    uint64_t *out) {
    const __m512i nb = _mm512_set1_epi64((long long)num_blocks);
    const __m512i vlo = _mm512_set1_epi64((long long)lo), vhi = _mm512_set1_epi64((long long)hi);
    size_t i = 0, count = 0;
    for (; i + 8 <= n; i += 8) {
        const __m512i h = _mm512_loadu_si512(hs + i);
        const __m512i block = _mm512_srli_epi64(_mm512_mul_epu32(_mm512_srli_epi64(h, 32), nb), 32);
        const __mmask8 mine = _mm512_cmpge_epu64_mask(block, vlo) & _mm512_cmplt_epu64_mask(block, vhi);
        _mm512_storeu_si512(out + count, _mm512_maskz_compress_epi64(mine, h));
        count += (size_t)__builtin_popcount(mine);
    }
    return count + bw_select_blocks(hs + i, n - i, num_blocks, lo, hi, out + count);
}

/* The same selection with AVX2, four hashes at a time. AVX2 has no compress: the owned lanes are moved to the front
 * by a permutation from a table indexed by the 4-bit mask of owned lanes. Block indices are below 2^32, so the
 * signed 64-bit compares are exact. Every store stays below out + n and out + (the count returned) + 4. */
static const uint32_t BW_COMPRESS4[16][8] = {
    {0, 1, 0, 1, 0, 1, 0, 1}, {0, 1, 0, 1, 0, 1, 0, 1}, {2, 3, 0, 1, 0, 1, 0, 1}, {0, 1, 2, 3, 0, 1, 0, 1},
    {4, 5, 0, 1, 0, 1, 0, 1}, {0, 1, 4, 5, 0, 1, 0, 1}, {2, 3, 4, 5, 0, 1, 0, 1}, {0, 1, 2, 3, 4, 5, 0, 1},
    {6, 7, 0, 1, 0, 1, 0, 1}, {0, 1, 6, 7, 0, 1, 0, 1}, {2, 3, 6, 7, 0, 1, 0, 1}, {0, 1, 2, 3, 6, 7, 0, 1},
    {4, 5, 6, 7, 0, 1, 0, 1}, {0, 1, 4, 5, 6, 7, 0, 1}, {2, 3, 4, 5, 6, 7, 0, 1}, {0, 1, 2, 3, 4, 5, 6, 7},
};

__attribute__((target("avx2")))
static size_t bw_avx2_select_blocks(const uint64_t *hs, size_t n, uint64_t num_blocks, uint64_t lo, uint64_t hi,
                                    uint64_t *out) {
    const __m256i nb = _mm256_set1_epi64x((long long)num_blocks);
    const __m256i vlo = _mm256_set1_epi64x((long long)lo), vhi = _mm256_set1_epi64x((long long)hi);
    size_t i = 0, count = 0;
    for (; i + 4 <= n; i += 4) {
        const __m256i h = _mm256_loadu_si256((const __m256i *)(hs + i));
        const __m256i block = _mm256_srli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(h, 32), nb), 32);
        const __m256i mine = _mm256_andnot_si256(_mm256_cmpgt_epi64(vlo, block), _mm256_cmpgt_epi64(vhi, block));
        const int mask = _mm256_movemask_pd(_mm256_castsi256_pd(mine));
        const __m256i order = _mm256_loadu_si256((const __m256i *)BW_COMPRESS4[mask]);
        _mm256_storeu_si256((__m256i *)(out + count), _mm256_permutevar8x32_epi32(h, order));
        count += (size_t)__builtin_popcount((unsigned)mask);
    }
    return count + bw_select_blocks(hs + i, n - i, num_blocks, lo, hi, out + count);
}

#else  /* no SIMD kernels with this compiler or CPU family: the scalar loops do the work */
static inline int bw_simd_available(void) { return 0; }
static inline int bw_simd512_available(void) { return 0; }
static int bw_simd_add_one(uint64_t *words, uint64_t num_blocks, uint32_t num_hashes, uint64_t h) {
    (void)words; (void)num_blocks; (void)num_hashes; (void)h;
    return 0;
}
static int bw_simd_test_one(const uint64_t *words, uint64_t num_blocks, uint32_t num_hashes, uint64_t h) {
    (void)words; (void)num_blocks; (void)num_hashes; (void)h;
    return 0;
}
static void bw_simd_hash_u64(const uint64_t *in, uint64_t *out, size_t n, uint64_t seed) {
    (void)in; (void)out; (void)n; (void)seed;
}
static void bw_simd_hash_i64(const int64_t *in, uint64_t *out, size_t n, uint64_t seed_nonneg, uint64_t seed_neg) {
    (void)in; (void)out; (void)n; (void)seed_nonneg; (void)seed_neg;
}
static size_t bw_simd_select_blocks(const uint64_t *hs, size_t n, uint64_t num_blocks, uint64_t lo, uint64_t hi,
                                    uint64_t *out) {
    return bw_select_blocks(hs, n, num_blocks, lo, hi, out);
}
static size_t bw_avx2_select_blocks(const uint64_t *hs, size_t n, uint64_t num_blocks, uint64_t lo, uint64_t hi,
                                    uint64_t *out) {
    return bw_select_blocks(hs, n, num_blocks, lo, hi, out);
}
static uint64_t bw_simd_add(uint64_t *words, uint64_t num_blocks, uint32_t num_hashes,
                            const uint64_t *hs, size_t n, size_t distance) {
    (void)words; (void)num_blocks; (void)num_hashes; (void)hs; (void)n; (void)distance;
    return 0;
}
static void bw_simd_test(const uint64_t *words, uint64_t num_blocks, uint32_t num_hashes,
                         const uint64_t *hs, size_t n, uint8_t *out, size_t distance) {
    (void)words; (void)num_blocks; (void)num_hashes; (void)hs; (void)n; (void)out; (void)distance;
}
#endif

#endif
