# cython: freethreading_compatible = False
"""What a filter served by a server (``bloomwise.redis``) needs from the compiled core.

- `positions_many`: the k positions of every key of a batch, from the keys' 64-bit hashes (``hashes.hash_many``),
  exactly as the local filters compute them (``layouts.pxd``; docs/architecture.md, "From the hash to positions").
- `pack_command`: one Redis command in RESP (the Redis serialization protocol) whose arguments repeat a fixed
  sub-operation per offset, e.g. ``BITFIELD key SET u1 <offset> 1 SET u1 <offset> 1 ...``: the decimal offsets are
  written in C, where a general client spends most of its time.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

from bloomwise._native.layouts cimport (
    Geometry, geometry_init, probe, second_hash, block_index, BW_SALT,
    LAYOUT_CLASSIC, LAYOUT_PARTITIONED, LAYOUT_BLOCKED, MAX_HASHES, MAX_BLOCKED_HASHES, BLOCK_BITS,
)
from bloomwise._native.support cimport numpy


def positions_many(hashes, uint64_t num_bits, uint32_t num_hashes, int layout):
    """The positions of a batch: a (n, k) uint64 array, row i the k positions of the key whose hash is hashes[i],
    in probe order (a BloomFilter's ``_bit_indices``, a CountingBloomFilter's ``_positions``).

    >>> from bloomwise import BloomFilter
    >>> from bloomwise._native.bloom import hash_many
    >>> f = BloomFilter.from_size(4096, 5, layout="partitioned", seed=3)
    >>> list(positions_many(hash_many(["x"], 3), 4096, 5, 2)[0]) == f._bit_indices("x")
    True
    """
    if layout not in (LAYOUT_CLASSIC, LAYOUT_PARTITIONED, LAYOUT_BLOCKED):
        raise ValueError(f"layout must be 1 (classic), 2 (partitioned) or 3 (blocked), got {layout}")
    limit = MAX_BLOCKED_HASHES if layout == LAYOUT_BLOCKED else MAX_HASHES
    if not 1 <= num_hashes <= limit:
        raise ValueError(f"num_hashes must be in [1, {limit}] for this layout, got {num_hashes}")
    if (num_bits < 1 or (layout == LAYOUT_PARTITIONED and num_bits < num_hashes)
            or (layout == LAYOUT_BLOCKED and (num_bits % BLOCK_BITS or num_bits // BLOCK_BITS >= 2 ** 32))):
        raise ValueError(f"num_bits {num_bits} does not fit layout {layout} with {num_hashes} hashes")
    np = numpy()
    cdef const uint64_t[::1] hs = np.ascontiguousarray(hashes, dtype=np.uint64).reshape(-1)
    cdef Py_ssize_t n = hs.shape[0], i
    result = np.empty((n, num_hashes), dtype=np.uint64)
    if n == 0:
        return result
    cdef uint64_t[:, ::1] out = result
    cdef Geometry g
    cdef uint64_t h, step, base
    cdef uint32_t j, x
    geometry_init(&g, num_bits, num_hashes, layout)
    with nogil:
        for i in range(n):
            h = hs[i]
            if layout == LAYOUT_BLOCKED:
                base = block_index(&g, h) * BLOCK_BITS
                x = <uint32_t>h
                for j in range(num_hashes):
                    out[i, j] = base + (j & 7) * 64 + ((<uint32_t>(x * BW_SALT[j])) >> 26)
            else:
                step = second_hash(h)
                for j in range(num_hashes):
                    out[i, j] = probe(&g, h, step, j)
    return result


cdef inline Py_ssize_t write_decimal(char* out, uint64_t value) noexcept nogil:
    """Write value in decimal; returns the number of digits."""
    cdef char digits[20]
    cdef Py_ssize_t n = 0, i
    while True:
        digits[n] = <char>(48 + value % 10)
        n += 1
        value //= 10
        if value == 0:
            break
    for i in range(n):
        out[i] = digits[n - 1 - i]
    return n


cdef inline Py_ssize_t write_bulk_decimal(char* out, uint64_t value) noexcept nogil:
    """``$<len>\\r\\n<digits>\\r\\n``."""
    cdef char digits[24]
    cdef Py_ssize_t n = write_decimal(digits, value), w = 0, i
    out[0] = b'$'
    w = 1 + write_decimal(out + 1, <uint64_t>n)
    out[w] = b'\r'
    out[w + 1] = b'\n'
    w += 2
    for i in range(n):
        out[w + i] = digits[i]
    w += n
    out[w] = b'\r'
    out[w + 1] = b'\n'
    return w + 2


def encode_args(args) -> bytes:
    """RESP bulk strings of ``args`` (bytes, str as UTF-8, or int), without the array header.

    >>> encode_args([b"SET", "u1", 7])
    b'$3\\r\\nSET\\r\\n$2\\r\\nu1\\r\\n$1\\r\\n7\\r\\n'
    """
    parts = []
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int) and not isinstance(arg, bool):
            arg = str(arg).encode()
        elif not isinstance(arg, (bytes, bytearray, memoryview)):
            raise TypeError(f"a command argument must be bytes, str or int, got {type(arg).__name__}")
        arg = bytes(arg)
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


def pack_command(head, offsets, bytes op, bytes tail, Py_ssize_t args_per_op) -> bytes:
    """One RESP command: the arguments ``head`` (a list), then for each offset the pre-encoded ``op``, the offset
    in decimal and the pre-encoded ``tail``; ``args_per_op`` counts the arguments of one repetition (op + 1 + tail).

    A 2-D ``offsets`` of shape (n, j) writes the j values of a row one after the other between ``op`` and ``tail``.
    ``head=None`` writes no array header: then each repetition must be a whole command (``op`` starting with its
    own ``*<count>``), and the result is a sequence of commands to send at once.

    >>> import numpy as np
    >>> pack_command([b"BITFIELD_RO", b"f"], np.array([5, 12], dtype=np.uint64), encode_args([b"GET", b"u1"]), b"", 3)
    b'*8\\r\\n$11\\r\\nBITFIELD_RO\\r\\n$1\\r\\nf\\r\\n$3\\r\\nGET\\r\\n$2\\r\\nu1\\r\\n$1\\r\\n5\\r\\n$3\\r\\nGET\\r\\n$2\\r\\nu1\\r\\n$2\\r\\n12\\r\\n'
    >>> pack_command(None, np.array([[0, 63]], dtype=np.uint64), b"*4\\r\\n" + encode_args([b"GETRANGE", b"f"]), b"", 4)
    b'*4\\r\\n$8\\r\\nGETRANGE\\r\\n$1\\r\\nf\\r\\n$1\\r\\n0\\r\\n$2\\r\\n63\\r\\n'
    """
    np = numpy()
    array = np.ascontiguousarray(offsets, dtype=np.uint64)
    cdef Py_ssize_t per_row = array.shape[1] if array.ndim == 2 else 1
    cdef const uint64_t[::1] offs = array.reshape(-1)
    cdef Py_ssize_t n = offs.shape[0] // per_row if per_row else 0, i, j, r, w = 0
    cdef bytes head_bytes = encode_args(head) if head is not None else b""
    cdef Py_ssize_t total_args = (len(head) if head is not None else 0) + n * args_per_op
    cdef Py_ssize_t op_len = PyBytes_GET_SIZE(op), tail_len = PyBytes_GET_SIZE(tail)
    cdef Py_ssize_t capacity = 32 + PyBytes_GET_SIZE(head_bytes) + n * (op_len + tail_len + 28 * per_row)
    cdef const char* op_p = PyBytes_AS_STRING(op)
    cdef const char* tail_p = PyBytes_AS_STRING(tail)
    cdef char* buf = <char*>malloc(capacity)
    if buf == NULL:
        raise MemoryError()
    try:
        if head is not None:
            buf[0] = b'*'
            w = 1 + write_decimal(buf + 1, <uint64_t>total_args)
            buf[w] = b'\r'
            buf[w + 1] = b'\n'
            w += 2
            memcpy(buf + w, PyBytes_AS_STRING(head_bytes), PyBytes_GET_SIZE(head_bytes))
            w += PyBytes_GET_SIZE(head_bytes)
        with nogil:
            for i in range(n):
                memcpy(buf + w, op_p, op_len)
                w += op_len
                for r in range(per_row):
                    w += write_bulk_decimal(buf + w, offs[i * per_row + r])
                memcpy(buf + w, tail_p, tail_len)
                w += tail_len
        return PyBytes_FromStringAndSize(buf, w)
    finally:
        free(buf)


# ---- RedisBloom's filters (bloomwise.redis.redisbloom) -------------------------------------------------------------
# RedisBloom (the BF.* commands) hashes a key's bytes with MurmurHash64A (Austin Appleby's MurmurHash2, 64-bit
# version, public domain) twice: a = H(key, 0xc6a4a7935bd1e995), b = H(key, a); probe i of a sub-filter of m bits is
# bit (a + i b) mod 2**64 mod m, bit x being bit x % 8 (LSB first) of byte x // 8 (docs/redis.md, "Taking over
# RedisBloom's filters").
DEF MURMUR_M = 0xc6a4a7935bd1e995
DEF REDISBLOOM_SEED = 0xc6a4a7935bd1e995


cdef inline uint64_t murmur64a(const unsigned char* data, Py_ssize_t length, uint64_t seed) noexcept nogil:
    """MurmurHash64A (little-endian reads, as on the x86-64 servers RedisBloom runs on)."""
    cdef uint64_t m = MURMUR_M, h = seed ^ (<uint64_t>length * m), k
    cdef Py_ssize_t blocks = length // 8, i
    cdef const unsigned char* tail
    for i in range(blocks):
        memcpy(&k, data + 8 * i, 8)
        k *= m
        k ^= k >> 47
        k *= m
        h ^= k
        h *= m
    tail = data + 8 * blocks
    i = length & 7
    if i:
        while i > 0:
            i -= 1
            h ^= (<uint64_t>tail[i]) << (8 * i)
        h *= m
    h ^= h >> 47
    h *= m
    h ^= h >> 47
    return h


def redisbloom_hashes(keys):
    """The two 64-bit hashes (a, b) RedisBloom computes of each key (a list of bytes): an (n, 2) uint64 array."""
    np = numpy()
    cdef Py_ssize_t n = len(keys), i
    result = np.empty((n, 2), dtype=np.uint64)
    cdef uint64_t[:, ::1] out = result
    cdef bytes key
    cdef uint64_t a
    for i in range(n):
        key = keys[i]
        a = murmur64a(<const unsigned char*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), REDISBLOOM_SEED)
        out[i, 0] = a
        out[i, 1] = murmur64a(<const unsigned char*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), a)
    return result


def redisbloom_test(hashes, const uint8_t[::1] bits, uint64_t modulus, uint32_t num_hashes):
    """Whether each key (its (a, b) row of ``hashes``) has all its probes set in one RedisBloom sub-filter: probe i
    is bit (a + i b) mod 2**64 mod ``modulus`` of ``bits`` (LSB first). A bool array."""
    np = numpy()
    cdef const uint64_t[:, ::1] hs = np.ascontiguousarray(hashes, dtype=np.uint64)
    if hs.shape[1] != 2:
        raise ValueError(f"hashes must be an (n, 2) array, got shape {tuple(hashes.shape)}")
    if modulus == 0 or (modulus + 7) // 8 > <uint64_t>bits.shape[0]:
        raise ValueError(f"modulus {modulus} does not fit {bits.shape[0]} bytes")
    cdef Py_ssize_t n = hs.shape[0], i
    result = np.empty(n, dtype=np.bool_)
    cdef uint8_t[::1] out = result.view(np.uint8)
    cdef uint64_t a, b, x
    cdef uint32_t j
    cdef uint8_t present
    with nogil:
        for i in range(n):
            a = hs[i, 0]
            b = hs[i, 1]
            present = 1
            for j in range(num_hashes):
                x = (a + <uint64_t>j * b) % modulus
                if not (bits[x >> 3] >> (x & 7)) & 1:
                    present = 0
                    break
            out[i] = present
    return result

