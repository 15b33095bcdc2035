/* bloomwise compiled core: C primitives shared by the Cython kernels.
 *
 * XXH64 is written here from Yann Collet's published specification (xxhash.com, "xxHash fast digest
 * algorithm", v0.1.1); tests check it bit for bit against the PyPI `xxhash` package.
 * Everything is static inline: each Cython module that includes this header gets its own copy.
 */
#ifndef BLOOMWISE_COMMON_H
#define BLOOMWISE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sched.h>

#include "xxh3.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ---- XXH64 ---------------------------------------------------------------------------------- */
#define BW_P1 0x9E3779B185EBCA87ULL
#define BW_P2 0xC2B2AE3D27D4EB4FULL
#define BW_P3 0x165667B19E3779F9ULL
#define BW_P4 0x85EBCA77C2B2AE63ULL
#define BW_P5 0x27D4EB2F165667C5ULL

static inline uint64_t bw_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t bw_read64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; } /* LE host */
static inline uint32_t bw_read32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

static inline uint64_t bw_round(uint64_t acc, uint64_t input) {
    acc += input * BW_P2;
    acc = bw_rotl(acc, 31);
    return acc * BW_P1;
}

static inline uint64_t bw_merge_round(uint64_t acc, uint64_t val) {
    acc ^= bw_round(0, val);
    return acc * BW_P1 + BW_P4;
}

static inline uint64_t bw_avalanche(uint64_t h) {
    h ^= h >> 33; h *= BW_P2;
    h ^= h >> 29; h *= BW_P3;
    h ^= h >> 32;
    return h;
}

/* XXH64's last step: the bytes past the last 32-byte stripe (fewer than 32) mixed into h, then the avalanche. */
static inline uint64_t bw_xxh64_finish(uint64_t h, const uint8_t *p, const uint8_t *end) {
    while (p + 8 <= end) {
        h ^= bw_round(0, bw_read64(p));
        h = bw_rotl(h, 27) * BW_P1 + BW_P4;
        p += 8;
    }
    if (p + 4 <= end) {
        h ^= (uint64_t)bw_read32(p) * BW_P1;
        h = bw_rotl(h, 23) * BW_P2 + BW_P3;
        p += 4;
    }
    while (p < end) {
        h ^= (uint64_t)(*p) * BW_P5;
        h = bw_rotl(h, 11) * BW_P1;
        p++;
    }
    return bw_avalanche(h);
}

static inline uint64_t bw_xxh64(const void *data, size_t len, uint64_t seed) {
    const uint8_t *p = (const uint8_t *)data;
    const uint8_t *end = p + len;
    uint64_t h;
    if (len >= 32) {
        const uint8_t *limit = end - 32;
        uint64_t v1 = seed + BW_P1 + BW_P2, v2 = seed + BW_P2, v3 = seed, v4 = seed - BW_P1;
        do {
            v1 = bw_round(v1, bw_read64(p));
            v2 = bw_round(v2, bw_read64(p + 8));
            v3 = bw_round(v3, bw_read64(p + 16));
            v4 = bw_round(v4, bw_read64(p + 24));
            p += 32;
        } while (p <= limit);
        h = bw_rotl(v1, 1) + bw_rotl(v2, 7) + bw_rotl(v3, 12) + bw_rotl(v4, 18);
        h = bw_merge_round(h, v1);
        h = bw_merge_round(h, v2);
        h = bw_merge_round(h, v3);
        h = bw_merge_round(h, v4);
    } else {
        h = seed + BW_P5;
    }
    h += (uint64_t)len;
    return bw_xxh64_finish(h, p, end);
}

/* XXH64 of the 8 little-endian bytes of v: the same value as bw_xxh64(&v, 8, seed), unrolled. */
static inline uint64_t bw_xxh64_u64(uint64_t v, uint64_t seed) {
    uint64_t h = seed + BW_P5 + 8;
    h ^= bw_round(0, v);
    h = bw_rotl(h, 27) * BW_P1 + BW_P4;
    return bw_avalanche(h);
}

/* Integers are their own key domain: the hash seed is XORed with one of these (ASCII tags). */
#define BW_INT_DOMAIN     0x3436752d746e6921ULL /* "!int-u64" */
#define BW_NEG_INT_DOMAIN 0x3436692d746e6921ULL /* "!int-i64" */
#define BW_BIG_INT_DOMAIN 0x6769622d746e6921ULL /* "!int-big" */

/* ---- str keys: Latin-1 (UCS1) code points to UTF-8 ------------------------------------------------- */
/* The two UTF-8 bytes of a code point c in U+0080..U+00FF; returns 2. */
static inline size_t bw_utf8_of_latin1(uint8_t c, uint8_t *out) {
    out[0] = (uint8_t)(0xC0 | (c >> 6));
    out[1] = (uint8_t)(0x80 | (c & 0x3F));
    return 2;
}

/* The UTF-8 bytes of n code points U+0000..U+00FF (a str stored as UCS1) written to out, which needs room for
 * 2n bytes; returns their count. ASCII bytes are copied sixteen at a time (one whole-vector store, whose bytes past
 * the next non-ASCII one are rewritten later; every store ends within the 2n bytes: j <= 2 i); a byte c >= 0x80
 * becomes 0xC0 | c >> 6, 0x80 | (c & 0x3F) (RFC 3629, section 3). */
static inline size_t bw_latin1_to_utf8(const uint8_t *s, size_t n, uint8_t *out) {
    size_t i = 0, j = 0;
    unsigned high;
    uint8_t c;
#if defined(__SSE2__)
    __m128i v;
    while (i + 16 <= n) {
        v = _mm_loadu_si128((const __m128i *)(s + i));
        _mm_storeu_si128((__m128i *)(out + j), v);
        high = (unsigned)_mm_movemask_epi8(v);  /* bit k: byte k is >= 0x80 */
        if (!high) { i += 16; j += 16; continue; }
        high = (unsigned)__builtin_ctz(high);   /* the ASCII run before the first such byte, already stored */
        i += high; j += high;
        j += bw_utf8_of_latin1(s[i++], out + j);
    }
    if (i < n && n >= 16) {
        /* fewer than 16 left: when the last 16 characters are all ASCII, one store of them at the output's end
         * finishes it (those before i among them are written again at the same place) */
        v = _mm_loadu_si128((const __m128i *)(s + n - 16));
        if (!_mm_movemask_epi8(v)) {
            _mm_storeu_si128((__m128i *)(out + j - i + n - 16), v);
            return j + (n - i);
        }
    }
#endif
    uint64_t word;
    while (i + 8 <= n) {  /* the same, eight characters at a time (all of them without SSE2) */
        memcpy(&word, s + i, 8);
        memcpy(out + j, &word, 8);
        word &= 0x8080808080808080ULL;
        if (!word) { i += 8; j += 8; continue; }
        high = (unsigned)__builtin_ctzll(word) >> 3;  /* little-endian: the first byte >= 0x80 */
        i += high; j += high;
        j += bw_utf8_of_latin1(s[i++], out + j);
    }
    if (i < n && n >= 8) {
        memcpy(&word, s + n - 8, 8);
        if (!(word & 0x8080808080808080ULL)) {
            memcpy(out + j - i + n - 8, &word, 8);
            return j + (n - i);
        }
    }
    for (; i < n; i++) {
        c = s[i];
        if (c < 0x80) {
            out[j++] = c;
        } else {
            j += bw_utf8_of_latin1(c, out + j);
        }
    }
    return j;
}

/* ---- from one hash to positions --------------------------------------------------------------- */
/* MurmurHash3's 64-bit finaliser: the second hash of double hashing. */
static inline uint64_t bw_fmix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* floor(x * range / 2^64): maps a 64-bit hash uniformly onto [0, range) without a division (Lemire). */
static inline uint64_t bw_mulhi(uint64_t x, uint64_t range) {
    return (uint64_t)(((unsigned __int128)x * range) >> 64);
}

/* Split-block layout: a key's block is ((h >> 32) * num_blocks) >> 32 (the high half of h, reduced by
 * multiply-high; num_blocks < 2^32). */
static inline uint64_t bw_block_index(uint64_t h, uint64_t num_blocks) { return ((h >> 32) * num_blocks) >> 32; }

/* Threaded blocked inserts: copies to out, in order, the hashes among hs[0..n) whose block lies in [lo, hi);
 * returns how many. Branch-free (a thread owns about 1/threads of the blocks, so a branch would mispredict). */
static inline size_t bw_select_blocks(const uint64_t *hs, size_t n, uint64_t num_blocks, uint64_t lo, uint64_t hi,
                                      uint64_t *out) {
    size_t i, count = 0;
    for (i = 0; i < n; i++) {
        out[count] = hs[i];
        count += bw_block_index(hs[i], num_blocks) - lo < hi - lo;  /* unsigned: lo <= block < hi */
    }
    return count;
}

/* Split-block layout: probe i sets bit (x * BW_SALT[i]) >> 26 (32-bit product) of lane i % 8.
 * Sixteen odd constants: splitmix64(i) (Steele et al.'s state step, state = i) for i = 1..16,
 * low 32 bits, forced odd. Part of the format. */
static const uint32_t BW_SALT[16] = {
    0x89025cc1u, 0x1c9756cfu, 0xdb018fedu, 0xe2338acbu, 0xa389c35bu, 0xadefe001u, 0x59320dd7u, 0xef953637u,
    0xbe706065u, 0x8a582fcbu, 0x2380309du, 0x99de8f03u, 0xf8ad8affu, 0x35dbe63fu, 0xabf55005u, 0xba779207u,
};

/* ---- memory hints ------------------------------------------------------------------------------ */
/* Volatile asm: GCC (12, -O1 and up) was seen dropping __builtin_prefetch from the inlined batch loops.
 * Writes use PREFETCHT0 too: PREFETCHW measured no better here (12 MiB) and worse at 1 GiB. */
#if defined(__x86_64__) || defined(__i386__)
static inline void bw_prefetch_read(const void *p) { __asm__ volatile("prefetcht0 (%0)" : : "r"(p)); }
static inline void bw_prefetch_write(const void *p) { __asm__ volatile("prefetcht0 (%0)" : : "r"(p)); }
#else
static inline void bw_prefetch_read(const void *p) { __builtin_prefetch(p, 0, 3); }
static inline void bw_prefetch_write(const void *p) { __builtin_prefetch(p, 1, 3); }
#endif

/* ---- the writer lock --------------------------------------------------------------------------- *
 * One flag per filter. Every writer holds it while it changes bits; batch writers hold it with the GIL
 * released, single-key writers with the GIL held (so they never wait for the GIL while holding it).
 * Every structure's flag is taken only with the GIL held (core.pxd's lock_writer, the only caller of bw_try_lock),
 * the wait for it done without (bw_wait_unlocked). So a single-key writer holding the GIL that finds the flag clear
 * (bw_unlocked; core.pxd's lock_writer_if_held) may write without taking it: no other writer can take it before this
 * one lets the GIL go, and the acquire load orders its writes after those of the last holder (no atomic exchange, a
 * full barrier that would wait for every earlier store of the Python loop to reach the cache). */
static inline int bw_try_lock(int *flag) {
    return __atomic_exchange_n(flag, 1, __ATOMIC_ACQUIRE) == 0;
}
static inline void bw_unlock(int *flag) { __atomic_store_n(flag, 0, __ATOMIC_RELEASE); }
static inline int bw_unlocked(int *flag) { return __atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0; }
static inline void bw_wait_unlocked(int *flag) {
    while (__atomic_load_n(flag, __ATOMIC_RELAXED)) sched_yield();
}

#endif
