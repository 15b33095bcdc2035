/* The scalable filter's stage hash and its all-stages query for blocked stages (AVX2), for scalable.pyx.
 *
 * bw_stage_hash: stage i's hash of a key whose hash is h, SplitMix64's output number i + 1 seeded with h (Steele,
 * Lea and Flood, OOPSLA 2014): z = h + (i + 1) * golden; z = (z ^ z >> 30) * C1; z = (z ^ z >> 27) * C2;
 * z ^ z >> 31.
 *
 * bw_stages_test_blocked: whether any blocked stage holds a key, newest stage first, with the block test of simd.h
 * inlined (one call per key, not one per stage): each stage's test is branch-free, so the loads of consecutive
 * stages are in flight together.
 */
#ifndef BLOOMWISE_SCALABLE_H
#define BLOOMWISE_SCALABLE_H

#include <stddef.h>
#include <stdint.h>
#include "simd.h"

typedef struct {
    uint64_t *words;
    const void *g;          /* the stage's Geometry (layouts.pxd) */
    uint64_t num_blocks;    /* blocked: num_bits / 512 */
    uint64_t capacity;
    uint64_t keys;
    uint32_t num_hashes;
    int layout;             /* layouts.pxd's ids: 1 classic, 2 partitioned, 3 blocked */
    int prefetch;           /* batch loops request cache lines ahead */
} bw_stage;

static inline uint64_t bw_stage_hash(uint64_t h, uint64_t index) {
    uint64_t z = h + (index + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2")))
static int bw_stages_test_blocked(const bw_stage *stages, ptrdiff_t n, uint64_t h) {
    ptrdiff_t i;
    for (i = n - 1; i >= 0; i--) {
        const bw_lane_plan p = bw_plan(stages[i].num_hashes);
        if (bw_block_test(&p, stages[i].words, stages[i].num_blocks, bw_stage_hash(h, (uint64_t)i))) return 1;
    }
    return 0;
}
#else
static int bw_stages_test_blocked(const bw_stage *stages, ptrdiff_t n, uint64_t h) {
    (void)stages; (void)n; (void)h;
    return 0;
}
#endif

#endif
