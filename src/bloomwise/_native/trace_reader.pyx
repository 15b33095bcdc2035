# cython: language_level=3
"""Compiled parsing of csv trace lines (libCacheSim's ``csv`` layout) into the arrays the compiled replay takes.

This is the fast path of ``bloomwise.cache.traces.cachesim.CsvTraceReader.record_arrays``; it knows nothing of the
layers above. A :class:`CsvChunkParser` walks the lines of a chunk of bytes (lines separated by ``\\n``, as the
Python reader splits them) and, for each line it can decide exactly as the Python reader does, either counts it
(blank: only ASCII whitespace; the header line; a comment, ``#`` after whitespace) or turns it into one request:

- ``keys[i]`` = XXH3-64 (seed 0) of the object field's bytes (``bw_xxh3``: the hash ``hashes.hash_many`` gives the
  field as a str, since an ASCII str's UTF-8 bytes are its bytes);
- ``sizes[i]`` the size field's whole number (< 2**63), ``times[i]`` the time field (0.0 without a time column):
  up to 15 digits exactly, any other decimal number through ``PyOS_string_to_double``, Python's own ``float()``;
- ``client_hashes[i]`` = XXH3-64 of the client field's bytes (with a client column);
- ``line_numbers[i]`` the 1-based line number;
- when asked for (``names`` not empty), the cache key ``"GET " + object`` as bytes, one after the other in
  ``names``, request i's from ``name_offsets[i]`` to ``name_offsets[i + 1]``, and ``url_lengths[i]`` the object
  field's length (in characters: the line is ASCII).

Fields are the pieces between commas, stripped of ASCII whitespace (what ``str.strip`` removes from ASCII text:
``\\t \\n \\v \\f \\r``, 0x1c-0x1f and space). A record needs a non-empty size of digits, a non-empty object without
space or tab, a client (if any) without space, a time matching ``[+-]?(D+(.D*)?|.D+)([eE][+-]?D+)?`` in
[0, inf). Every other line -- non-ASCII bytes, longer than ``max_line_bytes``, the first line of a chunk after an
over-long one, or anything that is not such a record (malformed lines, odd times like ``1_000``, sizes >= 2**63)
-- is *deferred*: the parser stops before it (status :data:`DEFERRED`) and the caller runs the Python reader's
own logic on it, so the two readers agree by construction on everything but the plain records decided here.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.ref cimport PyObject
from libc.math cimport INFINITY
from libc.stdint cimport uint8_t, uint64_t, int64_t

cdef extern from "common.h" nogil:
    uint64_t bw_xxh3(const void* data, size_t length, uint64_t seed)

cdef extern from "Python.h":
    double PyOS_string_to_double(const char* s, char** endptr, PyObject* overflow_exception) except? -1.0

#: parse() stopped at the end of the chunk (every line taken)
CHUNK_DONE = 0
#: parse() stopped because the output arrays are full
OUTPUT_FULL = 1
#: parse() stopped before a line the caller must take (``position`` is its first byte)
DEFERRED = 2
#: parse() stopped after the request that reached ``max_requests``
LIMIT_REACHED = 3

cdef enum:
    _MAX_FIELDS_TRACKED = 1001   # columns are 1..1000 (cachesim._MAX_COLUMN)
    _SHORT_STAMP = 64            # a time longer than this is deferred


cdef inline bint is_space(uint8_t c) nogil:
    """str.isspace() of an ASCII character."""
    return c == 32 or 9 <= c <= 13 or 28 <= c <= 31


cdef class CsvChunkParser:
    """The column layout and the running counts of one csv trace read as arrays.

    :param time_at, object_at, size_at, client_at: 0-based columns (-1: no time / no client column).
    :param max_line_bytes: a longer line is deferred (the Python reader calls it malformed).

    Public counts, shared with the Python reader (it sets them before and reads them after each call): ``number``
    (lines seen), ``content`` (lines that are neither blank, header nor comment), ``requests``, ``skipped``,
    ``header`` (0-based index of the header line still to skip, -1 for none).
    """

    cdef public Py_ssize_t time_at, object_at, size_at, client_at, needed, max_line_bytes
    cdef public int64_t number, content, requests, skipped, header

    def __init__(self, Py_ssize_t time_at, Py_ssize_t object_at, Py_ssize_t size_at, Py_ssize_t client_at,
                 Py_ssize_t max_line_bytes):
        for column in (object_at, size_at):
            if not 0 <= column < _MAX_FIELDS_TRACKED - 1:
                raise ValueError(f"columns must be in [0, {_MAX_FIELDS_TRACKED - 1}), got {column}")
        for column in (time_at, client_at):
            if not -1 <= column < _MAX_FIELDS_TRACKED - 1:
                raise ValueError(f"optional columns must be -1 or in [0, {_MAX_FIELDS_TRACKED - 1}), got {column}")
        self.time_at, self.object_at, self.size_at, self.client_at = time_at, object_at, size_at, client_at
        self.needed = max(time_at, object_at, size_at, client_at) + 1
        self.max_line_bytes = max_line_bytes
        self.number = self.content = self.requests = self.skipped = 0
        self.header = -1

    def parse(self, bytes chunk, Py_ssize_t position, bint first_line_bad, uint64_t[::1] keys, int64_t[::1] sizes,
              double[::1] times, uint64_t[::1] client_hashes, int64_t[::1] line_numbers, uint8_t[::1] names,
              int64_t[::1] name_offsets, int64_t[::1] url_lengths, Py_ssize_t filled, int64_t max_requests):
        """Take the lines of ``chunk`` from byte ``position`` (the start of a line; ``len(chunk) + 1`` once the
        last line is taken), writing requests into the arrays from index ``filled``.

        ``first_line_bad``: the chunk's first line (at position 0) follows an over-long line's start and must be
        deferred. ``max_requests``: stop once ``requests`` reaches it (-1: no limit). ``names`` empty: no key
        names; else ``name_offsets[filled]`` is where the next name goes, and the arrays are full when the next
        name does not fit (``names`` must hold at least one longest line and the prefix).

        :returns: ``(status, position, filled)``: one of :data:`CHUNK_DONE`, :data:`OUTPUT_FULL`, :data:`DEFERRED`
            (``position`` is the deferred line's start), :data:`LIMIT_REACHED`.
        """
        cdef const uint8_t* data = <const uint8_t*>PyBytes_AS_STRING(chunk)
        cdef Py_ssize_t length = PyBytes_GET_SIZE(chunk)
        cdef Py_ssize_t capacity = keys.shape[0]
        cdef Py_ssize_t start, end, i, a, b, field
        cdef Py_ssize_t field_start[_MAX_FIELDS_TRACKED]
        cdef Py_ssize_t field_end[_MAX_FIELDS_TRACKED]
        cdef uint8_t c
        cdef bint ascii
        cdef uint64_t size
        cdef double stamp
        cdef bint named = names.shape[0] > 0
        cdef int64_t name_at
        if named and (name_offsets.shape[0] < capacity + 1 or url_lengths.shape[0] < capacity or
                      names.shape[0] < self.max_line_bytes + 4):
            raise ValueError("name_offsets needs one more entry than the arrays, names room for the longest line")
        if (sizes.shape[0] < capacity or times.shape[0] < capacity or line_numbers.shape[0] < capacity or
                (self.client_at >= 0 and client_hashes.shape[0] < capacity)):
            raise ValueError("the output arrays must have the same length")
        if not 0 <= filled <= capacity:
            raise ValueError(f"filled {filled} is outside the arrays (length {capacity})")
        while position <= length:
            if filled >= capacity:
                return OUTPUT_FULL, position, filled
            if max_requests >= 0 and self.requests >= max_requests:
                return LIMIT_REACHED, position, filled
            start = position
            end = start
            ascii = True
            while end < length and data[end] != 10:
                if data[end] >= 128:
                    ascii = False
                end += 1
            if not ascii or end - start > self.max_line_bytes or (first_line_bad and start == 0):
                return DEFERRED, position, filled
            # strip
            a, b = start, end
            while a < b and is_space(data[a]):
                a += 1
            while b > a and is_space(data[b - 1]):
                b -= 1
            if a == b:  # blank
                self.number += 1
                self.skipped += 1
                position = end + 1
                continue
            if self.number == self.header or data[a] == 35:  # the header line, or a comment ('#')
                if self.number == self.header:
                    self.header = -1
                self.number += 1
                self.skipped += 1
                position = end + 1
                continue
            # fields: the first `needed` ones located, at least `needed` required
            field = 0
            field_start[0] = start
            i = start
            while i < end and field < self.needed:
                if data[i] == 44:  # ','
                    field_end[field] = i
                    field += 1
                    field_start[field] = i + 1
                i += 1
            if field < self.needed:
                field_end[field] = end
                field += 1
            if field < self.needed:
                return DEFERRED, position, filled
            for i in range(self.needed):
                a, b = field_start[i], field_end[i]
                while a < b and is_space(data[a]):
                    a += 1
                while b > a and is_space(data[b - 1]):
                    b -= 1
                field_start[i], field_end[i] = a, b
            # size: digits, < 2**63
            a, b = field_start[self.size_at], field_end[self.size_at]
            if a == b:
                return DEFERRED, position, filled
            while a < b - 1 and data[a] == 48:  # leading zeros
                a += 1
            if b - a > 19:
                return DEFERRED, position, filled
            size = 0
            for i in range(a, b):
                c = data[i]
                if not 48 <= c <= 57:
                    return DEFERRED, position, filled
                size = size * 10 + (c - 48)
            if size >= (<uint64_t>1) << 63:  # 19 digits cannot wrap 64 bits
                return DEFERRED, position, filled
            # object: non-empty, no space or tab
            a, b = field_start[self.object_at], field_end[self.object_at]
            if a == b:
                return DEFERRED, position, filled
            for i in range(a, b):
                if data[i] == 32 or data[i] == 9:
                    return DEFERRED, position, filled
            # time
            stamp = 0.0
            if self.time_at >= 0:
                a, b = field_start[self.time_at], field_end[self.time_at]
                if not parse_stamp(data + a, b - a, &stamp):
                    return DEFERRED, position, filled
            # client: non-empty, no space
            if self.client_at >= 0:
                a, b = field_start[self.client_at], field_end[self.client_at]
                if a == b:
                    return DEFERRED, position, filled
                for i in range(a, b):
                    if data[i] == 32:
                        return DEFERRED, position, filled
            a, b = field_start[self.object_at], field_end[self.object_at]
            if named:
                name_at = name_offsets[filled]
                if name_at + 4 + (b - a) > names.shape[0]:
                    return OUTPUT_FULL, position, filled
                names[name_at] = 71  # "GET "
                names[name_at + 1] = 69
                names[name_at + 2] = 84
                names[name_at + 3] = 32
                for i in range(b - a):
                    names[name_at + 4 + i] = data[a + i]
                name_offsets[filled + 1] = name_at + 4 + (b - a)
                url_lengths[filled] = b - a
            if self.client_at >= 0:
                client_hashes[filled] = bw_xxh3(data + field_start[self.client_at],
                                                field_end[self.client_at] - field_start[self.client_at], 0)
            self.number += 1
            self.content += 1
            self.requests += 1
            keys[filled] = bw_xxh3(data + a, b - a, 0)
            sizes[filled] = <int64_t>size
            times[filled] = stamp
            line_numbers[filled] = self.number
            filled += 1
            position = end + 1
        return CHUNK_DONE, position, filled


cdef inline Py_ssize_t skip_digits(const uint8_t* text, Py_ssize_t i, Py_ssize_t length) noexcept nogil:
    """The position of the first byte at or after ``i`` that is not an ASCII digit (``length`` at most)."""
    while i < length and 48 <= text[i] <= 57:
        i += 1
    return i


cdef bint parse_stamp(const uint8_t* text, Py_ssize_t length, double* out) except -1:
    """A time field in [0, inf) of the form [+-]?(D+(.D*)?|.D+)([eE][+-]?D+)?, as float() reads it; False for
    anything else (the caller defers the line)."""
    cdef Py_ssize_t i = 0, end, mantissa_digits
    cdef double value = 0.0
    cdef char buffer[_SHORT_STAMP + 1]
    if length == 0 or length > _SHORT_STAMP:
        return False
    while i < length and 48 <= text[i] <= 57:  # the common case: a whole number of up to 15 digits, exact
        value = value * 10.0 + (text[i] - 48)
        i += 1
    if i == length and length <= 15:
        out[0] = value
        return True
    i = 0
    if text[i] == 43 or text[i] == 45:  # + -
        i += 1
    end = skip_digits(text, i, length)
    mantissa_digits, i = end - i, end
    if i < length and text[i] == 46:  # .
        end = skip_digits(text, i + 1, length)
        mantissa_digits, i = mantissa_digits + end - (i + 1), end
    if mantissa_digits == 0:
        return False
    if i < length and (text[i] == 101 or text[i] == 69):  # e E
        i += 1
        if i < length and (text[i] == 43 or text[i] == 45):
            i += 1
        end = skip_digits(text, i, length)
        if end == i:
            return False
        i = end
    if i != length:
        return False
    for i in range(length):
        buffer[i] = <char>text[i]
    buffer[length] = 0
    value = PyOS_string_to_double(buffer, NULL, NULL)  # NULL: overflow gives +-inf
    if not (0.0 <= value < INFINITY):
        return False
    out[0] = value
    return True
