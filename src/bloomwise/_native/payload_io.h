/* bloomwise compiled core: reading a file's payload straight into a filter's memory, checksummed on the way.
 *
 * XXH64 in pieces (the payload checksum of docs/format.md): the same steps as bw_xxh64 in common.h, split so that
 * each piece is hashed right after it is read, while it is still in cache. A piece is a whole number of 32-byte
 * stripes; the last (length % 32) bytes go to bw_xxh64_piece_end. Tests check it against bw_xxh64 for every split.
 *
 * bw_read_payload reads the payload with pread into memory the caller allocated (no copy and no zero-fill beyond
 * the kernel's own), and hashes it either in the same thread, piece by piece behind the reads, or, for payloads of
 * BW_HASH_THREAD_MIN bytes and more, in a helper thread that follows the reader (XXH64 is one sequential chain, so
 * it cannot be split; it can overlap the reading, and the wall time is then about the longer of the two).
 */
#ifndef BLOOMWISE_PAYLOAD_IO_H
#define BLOOMWISE_PAYLOAD_IO_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

typedef struct {
    uint64_t v1, v2, v3, v4;
    uint64_t length;  /* bytes hashed so far (whole stripes) */
    uint64_t seed;
} bw_xxh64_state;

static inline void bw_xxh64_begin(bw_xxh64_state *s, uint64_t seed) {
    s->v1 = seed + BW_P1 + BW_P2;
    s->v2 = seed + BW_P2;
    s->v3 = seed;
    s->v4 = seed - BW_P1;
    s->length = 0;
    s->seed = seed;
}

/* Hash p[0, len): len is a multiple of 32. */
static inline void bw_xxh64_piece(bw_xxh64_state *s, const uint8_t *p, size_t len) {
    uint64_t v1 = s->v1, v2 = s->v2, v3 = s->v3, v4 = s->v4;
    const uint8_t *end = p + len;
    while (p < end) {
        v1 = bw_round(v1, bw_read64(p));
        v2 = bw_round(v2, bw_read64(p + 8));
        v3 = bw_round(v3, bw_read64(p + 16));
        v4 = bw_round(v4, bw_read64(p + 24));
        p += 32;
    }
    s->v1 = v1; s->v2 = v2; s->v3 = v3; s->v4 = v4;
    s->length += len;
}

/* The digest, given the last len (< 32) bytes. */
static inline uint64_t bw_xxh64_piece_end(const bw_xxh64_state *s, const uint8_t *p, size_t len) {
    const uint8_t *end = p + len;
    uint64_t h;
    if (s->length) {
        h = bw_rotl(s->v1, 1) + bw_rotl(s->v2, 7) + bw_rotl(s->v3, 12) + bw_rotl(s->v4, 18);
        h = bw_merge_round(h, s->v1);
        h = bw_merge_round(h, s->v2);
        h = bw_merge_round(h, s->v3);
        h = bw_merge_round(h, s->v4);
    } else {
        h = s->seed + BW_P5;
    }
    h += s->length + (uint64_t)len;
    return bw_xxh64_finish(h, p, end);
}

/* XXH64 of data hashed in pieces of `piece` bytes (a multiple of 32; 0: one piece): for the tests. */
static inline uint64_t bw_xxh64_in_pieces(const uint8_t *data, size_t len, size_t piece, uint64_t seed) {
    bw_xxh64_state s;
    size_t whole = len & ~(size_t)31, done = 0, n;
    bw_xxh64_begin(&s, seed);
    if (piece == 0) piece = whole ? whole : 32;
    while (done < whole) {
        n = whole - done < piece ? whole - done : piece;
        bw_xxh64_piece(&s, data + done, n);
        done += n;
    }
    return bw_xxh64_piece_end(&s, data + whole, len - whole);
}

/* ---- reading ---------------------------------------------------------------------------------------------- */

#define BW_READ_PIECE ((size_t)1 << 20)        /* read (and hash) 1 MiB at a time: half of one core's L2 */
#define BW_HASH_THREAD_MIN ((size_t)8 << 20)   /* from 8 MiB on, a helper thread hashes behind the reader, */
#define BW_HASH_BATCH ((size_t)4 << 20)        /* woken once per 4 MiB read: one wake-up per piece costs more */

typedef struct {
    const uint8_t *buf;
    pthread_mutex_t lock;
    pthread_cond_t more;
    size_t readable;   /* bytes read so far (under lock) */
    int finished;      /* the reader stopped: all read, end of file, or an error (under lock) */
    bw_xxh64_state state;
    size_t hashed;     /* whole stripes hashed (the hasher's own) */
} bw_hash_follower;

static void *bw_hash_follow(void *arg) {
    bw_hash_follower *f = (bw_hash_follower *)arg;
    size_t readable, upto;
    int finished;
    for (;;) {
        pthread_mutex_lock(&f->lock);
        while (f->readable - f->hashed < BW_HASH_BATCH && !f->finished)
            pthread_cond_wait(&f->more, &f->lock);
        readable = f->readable;
        finished = f->finished;
        pthread_mutex_unlock(&f->lock);
        upto = readable & ~(size_t)31;
        if (upto > f->hashed) {
            bw_xxh64_piece(&f->state, f->buf + f->hashed, upto - f->hashed);
            f->hashed = upto;
        }
        if (finished && f->hashed == (readable & ~(size_t)31))
            return NULL;
    }
}

/* pread until `len` bytes are in buf or the file ends; the count read, or -1 (errno set). */
static inline int64_t bw_pread_piece(int fd, uint8_t *buf, size_t len, int64_t offset) {
    ssize_t n;
    do {
        n = pread(fd, buf, len, (off_t)offset);
    } while (n < 0 && errno == EINTR);
    return (int64_t)n;
}

/* Read `len` bytes at `offset` of `fd` into buf. With `verify`, also compute their XXH64 (seed 0) into *checksum.
 * Returns the bytes read: fewer than len when the file ended first (then *checksum is not set), or -1 with errno
 * set on a read error. `threaded` allows the helper thread (it is used only from BW_HASH_THREAD_MIN bytes on, and
 * not at all if it cannot be started). Runs without the GIL. */
static int64_t bw_read_payload(int fd, uint8_t *buf, size_t len, int64_t offset, int verify, int threaded,
                               uint64_t *checksum) {
    size_t done = 0, hashed = 0, published = 0, want, upto;
    int64_t n = 0;
    int saved_errno, helper = 0;
    pthread_t thread;
    bw_hash_follower f;
    bw_xxh64_state state;
    bw_xxh64_begin(&state, 0);
    if (verify && threaded && len >= BW_HASH_THREAD_MIN) {
        f.buf = buf;
        f.readable = 0;
        f.finished = 0;
        f.hashed = 0;
        bw_xxh64_begin(&f.state, 0);
        if (pthread_mutex_init(&f.lock, NULL) == 0) {
            if (pthread_cond_init(&f.more, NULL) == 0) {
                helper = pthread_create(&thread, NULL, bw_hash_follow, &f) == 0;
                if (!helper) pthread_cond_destroy(&f.more);
            }
            if (!helper) pthread_mutex_destroy(&f.lock);
        }
    }
    while (done < len) {
        want = len - done < BW_READ_PIECE ? len - done : BW_READ_PIECE;
        n = bw_pread_piece(fd, buf + done, want, offset + (int64_t)done);
        if (n <= 0) break;
        done += (size_t)n;
        if (helper) {
            if (done - published >= BW_HASH_BATCH) {
                pthread_mutex_lock(&f.lock);
                f.readable = published = done;
                pthread_cond_signal(&f.more);
                pthread_mutex_unlock(&f.lock);
            }
        } else if (verify) {
            upto = done & ~(size_t)31;
            bw_xxh64_piece(&state, buf + hashed, upto - hashed);
            hashed = upto;
        }
    }
    saved_errno = errno;
    if (helper) {
        pthread_mutex_lock(&f.lock);
        f.readable = done;
        f.finished = 1;
        pthread_cond_signal(&f.more);
        pthread_mutex_unlock(&f.lock);
        pthread_join(thread, NULL);
        pthread_cond_destroy(&f.more);
        pthread_mutex_destroy(&f.lock);
        state = f.state;
        hashed = f.hashed;
    }
    if (n < 0) {
        errno = saved_errno;
        return -1;
    }
    if (verify && done == len)
        *checksum = bw_xxh64_piece_end(&state, buf + hashed, len - hashed);
    return (int64_t)done;
}

#endif
