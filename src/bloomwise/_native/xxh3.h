/* XXH3-64 with a 64-bit seed, written from Yann Collet's published specification ("xxHash fast digest
 * algorithm", doc/xxhash_spec.md, XXH3 sections); tests check it bit for bit against the PyPI `xxhash` package
 * (xxh3_64_intdigest) for every length 0..2100 and several seeds.
 *
 * Why it is here: for the short keys a Bloom filter sees (8-128 bytes), XXH3's latency is a third to a half of
 * XXH64's (independent 64x64->128 multiplies instead of a serial chain of rounds). It is hash scheme "xxh3-v1".
 * Included by common.h; static inline, so each compiled module gets its own copy.
 */
#ifndef BLOOMWISE_XXH3_H
#define BLOOMWISE_XXH3_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define BW3_P32_1 0x9E3779B1ULL
#define BW3_P32_2 0x85EBCA77ULL
#define BW3_P32_3 0xC2B2AE3DULL
#define BW3_P64_1 0x9E3779B185EBCA87ULL
#define BW3_P64_2 0xC2B2AE3D27D4EB4FULL
#define BW3_P64_3 0x165667B19E3779F9ULL
#define BW3_P64_4 0x85EBCA77C2B2AE63ULL
#define BW3_P64_5 0x27D4EB2F165667C5ULL
#define BW3_MX1 0x165667919E3779F9ULL
#define BW3_MX2 0x9FB21C651E98DF25ULL

/* The specification's default 192-byte secret. */
static const uint8_t BW3_SECRET[192] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

static inline uint64_t bw3_r64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; } /* LE host */
static inline uint32_t bw3_r32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t bw3_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t bw3_fold(uint64_t a, uint64_t b) {  /* 64x64 -> 128, low half XOR high half */
    unsigned __int128 p = (unsigned __int128)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
}

static inline uint64_t bw3_avalanche(uint64_t x) {
    x ^= x >> 37; x *= BW3_MX1;
    return x ^ (x >> 32);
}

static inline uint64_t bw3_avalanche_xxh64(uint64_t x) {
    x ^= x >> 33; x *= BW3_P64_2;
    x ^= x >> 29; x *= BW3_P64_3;
    return x ^ (x >> 32);
}

/* 4-8 bytes given as the 64-bit value (last 4 bytes) | (first 4 bytes) << 32. */
/* The 4-8 byte path's seed-dependent "bitflip" (simd.h hoists it out of its loop). */
static inline uint64_t bw3_bitflip_4to8(uint64_t seed) {
    uint64_t modified = seed ^ ((uint64_t)__builtin_bswap32((uint32_t)seed) << 32);
    return (bw3_r64(BW3_SECRET + 8) ^ bw3_r64(BW3_SECRET + 16)) - modified;
}

static inline uint64_t bw3_4to8(uint64_t combined, uint64_t len, uint64_t seed) {
    uint64_t v = bw3_bitflip_4to8(seed) ^ combined;
    v ^= bw3_rotl(v, 49) ^ bw3_rotl(v, 24);
    v *= BW3_MX2;
    v ^= (v >> 35) + len;
    v *= BW3_MX2;
    return v ^ (v >> 28);
}

static inline uint64_t bw3_mix16(const uint8_t *p, const uint8_t *s, uint64_t seed) {
    return bw3_fold(bw3_r64(p) ^ (bw3_r64(s) + seed), bw3_r64(p + 8) ^ (bw3_r64(s + 8) - seed));
}

/* Inputs over 240 bytes: stripes of 64 bytes into 8 accumulators, a scramble every 1024 bytes. */
static inline void bw3_accumulate(uint64_t acc[8], const uint8_t *stripe, const uint8_t *s) {
    for (int i = 0; i < 8; i++) {
        uint64_t value = bw3_r64(stripe + 8 * i);
        uint64_t keyed = value ^ bw3_r64(s + 8 * i);
        acc[i ^ 1] += value;
        acc[i] += (keyed & 0xFFFFFFFFULL) * (keyed >> 32);
    }
}

static uint64_t bw3_long(const uint8_t *p, size_t len, uint64_t seed) {
    uint8_t secret[192];
    for (int i = 0; i < 12; i++) {  /* the seed's derived secret */
        uint64_t lo = bw3_r64(BW3_SECRET + 16 * i) + seed, hi = bw3_r64(BW3_SECRET + 16 * i + 8) - seed;
        memcpy(secret + 16 * i, &lo, 8);
        memcpy(secret + 16 * i + 8, &hi, 8);
    }
    uint64_t acc[8] = {BW3_P32_3, BW3_P64_1, BW3_P64_2, BW3_P64_3, BW3_P64_4, BW3_P32_2, BW3_P64_5, BW3_P32_1};
    const size_t stripes_per_block = (192 - 64) / 8, block = 64 * stripes_per_block;
    const size_t blocks = (len - 1) / block;
    for (size_t b = 0; b < blocks; b++) {
        for (size_t s = 0; s < stripes_per_block; s++)
            bw3_accumulate(acc, p + b * block + s * 64, secret + s * 8);
        for (int i = 0; i < 8; i++) {  /* scramble */
            uint64_t a = acc[i];
            a ^= a >> 47;
            a ^= bw3_r64(secret + 192 - 64 + 8 * i);
            acc[i] = a * BW3_P32_1;
        }
    }
    const size_t last = len - blocks * block, full_stripes = (last - 1) / 64;
    for (size_t s = 0; s < full_stripes; s++)
        bw3_accumulate(acc, p + blocks * block + s * 64, secret + s * 8);
    bw3_accumulate(acc, p + len - 64, secret + 192 - 71);
    uint64_t result = (uint64_t)len * BW3_P64_1;
    for (int i = 0; i < 4; i++)
        result += bw3_fold(acc[2 * i] ^ bw3_r64(secret + 11 + 16 * i), acc[2 * i + 1] ^ bw3_r64(secret + 19 + 16 * i));
    return bw3_avalanche(result);
}

static inline uint64_t bw_xxh3(const void *data, size_t len, uint64_t seed) {
    const uint8_t *p = (const uint8_t *)data;
    const uint8_t *s = BW3_SECRET;
    if (len <= 16) {
        if (len > 8) {
            uint64_t lo = ((bw3_r64(s + 24) ^ bw3_r64(s + 32)) + seed) ^ bw3_r64(p);
            uint64_t hi = ((bw3_r64(s + 40) ^ bw3_r64(s + 48)) - seed) ^ bw3_r64(p + len - 8);
            return bw3_avalanche(len + __builtin_bswap64(lo) + hi + bw3_fold(lo, hi));
        }
        if (len >= 4)
            return bw3_4to8((uint64_t)bw3_r32(p + len - 4) | ((uint64_t)bw3_r32(p) << 32), len, seed);
        if (len > 0) {
            uint32_t combined = (uint32_t)p[len - 1] | ((uint32_t)len << 8) | ((uint32_t)p[0] << 16)
                                | ((uint32_t)p[len >> 1] << 24);
            return bw3_avalanche_xxh64(((uint64_t)(bw3_r32(s) ^ bw3_r32(s + 4)) + seed) ^ combined);
        }
        return bw3_avalanche_xxh64(seed ^ bw3_r64(s + 56) ^ bw3_r64(s + 64));
    }
    uint64_t acc = (uint64_t)len * BW3_P64_1;
    if (len <= 128) {  /* pairs of 16-byte chunks from both ends, all independent */
        if (len > 32) {
            if (len > 64) {
                if (len > 96) {
                    acc += bw3_mix16(p + 48, s + 96, seed);
                    acc += bw3_mix16(p + len - 64, s + 112, seed);
                }
                acc += bw3_mix16(p + 32, s + 64, seed);
                acc += bw3_mix16(p + len - 48, s + 80, seed);
            }
            acc += bw3_mix16(p + 16, s + 32, seed);
            acc += bw3_mix16(p + len - 32, s + 48, seed);
        }
        acc += bw3_mix16(p, s, seed);
        acc += bw3_mix16(p + len - 16, s + 16, seed);
        return bw3_avalanche(acc);
    }
    if (len <= 240) {
        for (int i = 0; i < 8; i++) acc += bw3_mix16(p + 16 * i, s + 16 * i, seed);
        acc = bw3_avalanche(acc);
        for (size_t i = 8; i < len / 16; i++) acc += bw3_mix16(p + 16 * i, s + 16 * (i - 8) + 3, seed);
        acc += bw3_mix16(p + len - 16, s + 119, seed);
        return bw3_avalanche(acc);
    }
    return bw3_long(p, len, seed);
}

/* XXH3-64 of the 8 little-endian bytes of v: the same value as bw_xxh3(&v, 8, seed). */
static inline uint64_t bw_xxh3_u64(uint64_t v, uint64_t seed) {
    return bw3_4to8((v >> 32) | (v << 32), 8, seed);
}

#endif
