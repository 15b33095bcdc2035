# cython: language_level=3
"""HTTP/1.1 for the proxy's hot paths (RFC 9112): responses read off a byte stream (the peer queries of
bloomwise.proxy.peer_client), and the plain ``GET`` request heads the lean hit path answers itself
(:func:`plain_get`, for bloomwise.proxy.fast_hits).

A :class:`ResponseReader` is fed the bytes of one connection as they arrive and gives back its responses one by
one, in order: the status, the header fields as a dict, the body, and whether the connection stays open. It
replaces a general parser with callbacks (one Python call per header line) by one call per response; the peer's
answer is untrusted, so every length is bounded and checked before use:

- the status line is ``HTTP/1.0`` or ``HTTP/1.1``, a space, three digits, then a reason or nothing; interim
  responses (1xx, but 101) are skipped, as RFC 9110 section 15.2 asks of a client;
- a header line is a name of token characters, a colon and a value of visible characters, spaces, tabs and
  obs-text, without leading and trailing whitespace; obsolete line folding (a line starting with a space or tab)
  joins the previous value with one space (RFC 9112 section 5.2); lines end in CRLF or a bare LF (section 2.2);
  the head, and the trailers after a chunked body, are at most ``max_head_bytes``;
- a field sent twice is both values joined with ", " under the first name as sent (RFC 9110 section 5.3), as
  ``bloomwise.proxy.http_cache.joined_fields`` does; Set-Cookie, which cannot be joined, keeps its first line;
- the body (RFC 9112 section 6.3): none for 204 and 304; ``Transfer-Encoding`` with chunked last: chunks (size
  in hex, extensions ignored, trailers read and dropped); another transfer coding: up to the connection's close;
  else ``Content-Length`` (decimal digits; a repeated field must repeat the same value); else up to the close. A
  response with both ``Transfer-Encoding`` and ``Content-Length`` is refused (a smuggling pattern, section 6.3
  point 3). The body is at most ``max_body`` bytes, as the caller says per response.

Everything else is a :class:`ResponseError` naming what was wrong; after one, the connection cannot be trusted.

A peer's answers repeat their heads (the same document's, until its Age changes): the heads of final responses
read well, up to ``KNOWN_HEAD_BYTES`` and ``KNOWN_HEAD_FIELDS`` fields each, are remembered (``KNOWN_HEADS_MAX`` of
them, then forgotten at once), and a head received again is taken as it was read, without reading it again. Each
caller gets its own dict.
"""
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeLatin1
from libc.string cimport memchr


class ResponseError(ValueError):
    """Bytes that are not a well-formed HTTP/1.1 response within the bounds."""


cdef enum State:
    HEAD = 0            # reading the status line and header fields
    BODY_LENGTH = 1     # a body of ``remaining`` more bytes
    BODY_CLOSE = 2      # a body delimited by the connection's close
    CHUNK_SIZE = 3      # a chunk-size line
    CHUNK_DATA = 4      # ``remaining`` more bytes of a chunk
    CHUNK_END = 5       # the line end after a chunk's data
    TRAILERS = 6        # the trailer section after the last chunk
    DONE = 7            # a response complete, not yet taken

#: bytes of a chunk-size line (with its extensions) accepted at most
MAX_CHUNK_LINE = 4096

cdef bint[256] TCHAR
cdef bint[256] FIELD_BYTE
cdef int _c
for _c in range(256):
    TCHAR[_c] = (48 <= _c <= 57 or 65 <= _c <= 90 or 97 <= _c <= 122
                 or _c in (33, 35, 36, 37, 38, 39, 42, 43, 45, 46, 94, 95, 96, 124, 126))
    FIELD_BYTE[_c] = _c == 9 or 32 <= _c <= 126 or _c >= 128


cdef inline bint is_ows(char c) nogil:
    return c == c' ' or c == c'\t'


cdef Py_ssize_t line_end(const char* p, Py_ssize_t start, Py_ssize_t n) nogil:
    """The index of the next LF at or after ``start``, or -1."""
    cdef const char* found = <const char*>memchr(p + start, c'\n', n - start)
    return -1 if found == NULL else found - p


cdef Py_ssize_t blank_line_end(const char* p, Py_ssize_t start, Py_ssize_t n) nogil:
    """The index just past the first blank line (LF, then LF or CRLF) whose first LF is at or after ``start``;
    -1 when the bytes hold none yet."""
    cdef Py_ssize_t i = start
    while True:
        i = line_end(p, i, n)
        if i < 0:
            return -1
        if i + 1 < n and p[i + 1] == c'\n':
            return i + 2
        if i + 2 < n and p[i + 1] == c'\r' and p[i + 2] == c'\n':
            return i + 3
        if i + 1 >= n or (i + 2 >= n and p[i + 1] == c'\r'):
            return -1        # the blank line may still come: wait for the next bytes
        i += 1


cdef Py_ssize_t value_bounds(const char* p, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t* end) nogil:
    """A field value in ``p[start:stop]``: its start, and its end in ``end``, without the whitespace around it; -1
    for a byte a field value cannot hold (a control character but tab)."""
    cdef Py_ssize_t k
    for k in range(start, stop):
        if not FIELD_BYTE[<unsigned char>p[k]]:
            return -1
    while start < stop and is_ows(p[start]):
        start += 1
    while stop > start and is_ows(p[stop - 1]):
        stop -= 1
    end[0] = stop
    return start


cdef int bad_value() except -1:
    raise ResponseError("a control character in a header value")


#: heads of final responses read before (their bytes, at most ``KNOWN_HEAD_BYTES`` and ``KNOWN_HEAD_FIELDS`` fields:
#: what they were read as): a peer's answers repeat (the same document's, until its Age changes), and a known head
#: is not read again
cdef dict KNOWN_HEADS = {}
#: distinct heads remembered at most (then forgotten at once), and the largest one remembered: the memory they take
#: stays under about 5 MB, whatever a peer sends
KNOWN_HEADS_MAX = 512
KNOWN_HEAD_BYTES = 2048
KNOWN_HEAD_FIELDS = 32


def known_heads():
    """How many heads are remembered now (at most ``KNOWN_HEADS_MAX``)."""
    return len(KNOWN_HEADS)


cdef class ResponseReader:
    """The responses on one connection, in order (module docstring): :meth:`feed` the bytes received, then call
    :meth:`next` until it gives None; :meth:`at_close` when the peer closes the connection."""

    cdef list chunks             # bytes received and not yet read, the first from ``offset``
    cdef Py_ssize_t offset
    cdef bytearray pending_line  # an incomplete head, chunk-size line or trailer section
    cdef Py_ssize_t scanned      # bytes of pending_line known to hold no end
    cdef State state
    cdef long long remaining
    cdef list body
    cdef Py_ssize_t body_size
    cdef readonly Py_ssize_t max_head_bytes
    cdef readonly int status
    cdef readonly dict headers
    cdef readonly bint keep_alive
    #: the body in progress ends with the connection (no length, not chunked)
    cdef readonly bint delimited_by_close
    #: a byte of the response in progress was received
    cdef readonly bint started
    #: the bytes of the head of the response :meth:`next` gave last, when it is remembered (``KNOWN_HEADS``: equal
    #: heads, equal status and headers), else None
    cdef readonly bytes head
    cdef bint http10

    def __init__(self, Py_ssize_t max_head_bytes=65536):
        self.head = None
        self.chunks = []
        self.offset = 0
        self.pending_line = bytearray()
        self.max_head_bytes = max_head_bytes
        self._reset()

    cdef void _reset(self):
        self.state = HEAD
        self.scanned = 0
        self.remaining = 0
        self.body = []
        self.body_size = 0
        self.status = 0
        self.headers = None
        self.keep_alive = False
        self.delimited_by_close = False
        self.started = False
        self.http10 = False

    @property
    def buffered(self):
        """Bytes received and not yet read into a response."""
        cdef Py_ssize_t total = -self.offset
        for chunk in self.chunks:
            total += PyBytes_GET_SIZE(chunk)
        return total + len(self.pending_line)

    def feed(self, bytes data):
        """Keep ``data`` (the next bytes received) for :meth:`next`."""
        if PyBytes_GET_SIZE(data):
            self.chunks.append(data)

    def next(self, Py_ssize_t max_body):
        """The next complete response, its body at most ``max_body`` bytes: ``(status, headers, body,
        keep_alive)``, or None while its bytes have not all arrived. ResponseError: not a valid response."""
        cdef bytes chunk
        cdef const char* p
        cdef Py_ssize_t n, take
        while self.state != DONE and self.chunks:
            chunk = self.chunks[0]
            p = PyBytes_AS_STRING(chunk)
            n = PyBytes_GET_SIZE(chunk)
            take = self._read(chunk, p, self.offset, n, max_body)
            self.offset += take
            if self.offset >= n:
                del self.chunks[0]
                self.offset = 0
        if self.state != DONE:
            return None
        response = (self.status, self.headers, self._body(), self.keep_alive)
        self._reset()
        return response

    def at_close(self, Py_ssize_t max_body):
        """The peer closed the connection: the response it completes (a body delimited by the close), None when
        no byte of a response had arrived. ResponseError: a response cut short."""
        response = self.next(max_body)
        if response is not None:
            return response
        if self.state == BODY_CLOSE:
            self.keep_alive = False
            response = (self.status, self.headers, self._body(), False)
            self._reset()
            return response
        if self.started:
            raise ResponseError("the peer closed the connection mid-response")
        return None

    cdef bytes _body(self):
        if not self.body:
            return b""
        if len(self.body) == 1:
            return self.body[0]
        return b"".join(self.body)

    cdef Py_ssize_t _read(self, bytes chunk, const char* p, Py_ssize_t start, Py_ssize_t n,
                          Py_ssize_t max_body) except -1:
        """Read from ``p[start:n]`` (the bytes of ``chunk``) as the state says: the bytes taken."""
        cdef Py_ssize_t end, take
        self.started = True
        if self.state == HEAD or self.state == TRAILERS or self.state == CHUNK_SIZE or self.state == CHUNK_END:
            return self._read_line_state(chunk, p, start, n)
        take = n - start
        if self.state == BODY_LENGTH or self.state == CHUNK_DATA:
            if take > self.remaining:
                take = <Py_ssize_t>self.remaining
        if self.body_size + take > max_body:
            raise ResponseError(f"body over the limit of {max_body} bytes")
        if take:
            self.body.append(chunk if start == 0 and take == n else chunk[start:start + take])
            self.body_size += take
        if self.state != BODY_CLOSE:
            self.remaining -= take
            if self.remaining == 0:
                self.state = DONE if self.state == BODY_LENGTH else CHUNK_END
        return take

    cdef Py_ssize_t _read_line_state(self, bytes chunk, const char* p, Py_ssize_t start, Py_ssize_t n) except -1:
        """The head, a chunk-size line, a chunk's line end or the trailers: complete in ``p[start:n]`` (read from
        the chunk itself), or kept in ``pending_line`` until their end arrives."""
        cdef bytearray line = self.pending_line
        cdef Py_ssize_t end, had = len(line)
        cdef Py_ssize_t limit = MAX_CHUNK_LINE if self.state == CHUNK_SIZE or self.state == CHUNK_END \
            else self.max_head_bytes
        cdef const char* q
        cdef Py_ssize_t take
        if had == 0:
            end = self._end_of(p, start, n, start)
            if end >= 0:
                if end - start > limit:
                    self._over_limit()
                self._complete(p + start, end - start)
                return end - start
            if n - start > limit:
                self._over_limit()
            line.extend(chunk[start:] if start else chunk)
            return n - start
        take = min(n - start, limit + 1 - had)  # the end lies within limit bytes, or the part is over it
        line.extend(chunk[start:start + take])
        q = PyByteArray_AS_STRING(line)         # read in place: no copy of what came before
        end = self._end_of(q, 0, had + take, self.scanned)
        if end < 0:
            if had + take > limit:
                self._over_limit()
            self.scanned = max(0, had + take - 2)
            return take
        if end > limit:
            self._over_limit()
        self._complete(q, end)                  # (before the buffer is emptied: q points into it)
        del line[:]
        self.scanned = 0
        return end - had            # the bytes of this chunk that the completed part took

    cdef Py_ssize_t _end_of(self, const char* p, Py_ssize_t start, Py_ssize_t n, Py_ssize_t search_from) nogil:
        """Where the part the state reads ends in ``p[start:n]``, just past its last byte; -1 if not there yet."""
        cdef Py_ssize_t i
        if self.state == HEAD or self.state == TRAILERS:
            if self.state == TRAILERS and search_from == start:  # the trailers may be empty: a blank line first
                if n - start >= 1 and p[start] == c'\n':
                    return start + 1
                if n - start >= 2 and p[start] == c'\r' and p[start + 1] == c'\n':
                    return start + 2
                if n - start < 2 and (n == start or p[start] == c'\r'):
                    return -1
            return blank_line_end(p, search_from, n)
        i = line_end(p, search_from, n)
        return -1 if i < 0 else i + 1

    cdef int _over_limit(self) except -1:
        if self.state == CHUNK_SIZE or self.state == CHUNK_END:
            raise ResponseError(f"a chunk-size line over {MAX_CHUNK_LINE} bytes")
        raise ResponseError(f"response headers over {self.max_head_bytes} bytes")

    cdef int _complete(self, const char* p, Py_ssize_t n) except -1:
        """``p[:n]``, ending in its line end(s), is the whole of the part the state reads."""
        if self.state == HEAD:
            self._head(p, n)
        elif self.state == CHUNK_SIZE:
            self._chunk_size(p, n)
        elif self.state == CHUNK_END:
            if not (n == 1 or (n == 2 and p[0] == c'\r')):
                raise ResponseError("a chunk's data is not followed by its line end")
            self.state = CHUNK_SIZE
        else:                       # TRAILERS: read and dropped
            self.state = DONE
        return 0

    cdef int _chunk_size(self, const char* p, Py_ssize_t n) except -1:
        cdef Py_ssize_t i = 0, digits = 0
        cdef long long size = 0
        cdef char c
        while i < n:
            c = p[i]
            if c'0' <= c <= c'9':
                size = size * 16 + (c - c'0')
            elif c'a' <= c <= c'f':
                size = size * 16 + (c - c'a' + 10)
            elif c'A' <= c <= c'F':
                size = size * 16 + (c - c'A' + 10)
            else:
                break
            digits += 1
            if digits > 15:
                raise ResponseError("a chunk size over 15 hex digits")
            i += 1
        while i < n and is_ows(p[i]):
            i += 1
        if digits == 0 or not (p[i] == c';' or p[i] == c'\n' or (p[i] == c'\r' and i + 1 < n and p[i + 1] == c'\n')):
            raise ResponseError("not a chunk-size line")
        if size == 0:
            self.state = TRAILERS
        else:
            self.state = CHUNK_DATA
            self.remaining = size
        return 0

    cdef int _head(self, const char* p, Py_ssize_t n) except -1:
        """The head of a response: read as a known head was (``KNOWN_HEADS``), or :meth:`_read_head`."""
        cdef bytes head
        cdef tuple known
        self.head = None
        if n > KNOWN_HEAD_BYTES:
            return self._read_head(p, n)
        head = PyBytes_FromStringAndSize(p, n)
        found = KNOWN_HEADS.get(head)
        if found is None:
            self._read_head(p, n)
            if self.headers is not None and len(self.headers) <= KNOWN_HEAD_FIELDS:   # (an interim: None)
                if len(KNOWN_HEADS) >= KNOWN_HEADS_MAX:
                    KNOWN_HEADS.clear()
                KNOWN_HEADS[head] = (self.status, self.headers, self.http10, self.keep_alive, self.state,
                                     self.remaining, self.delimited_by_close)
                self.headers = dict(self.headers)   # the caller's own: the known one stays as read
                self.head = head
            return 0
        known = <tuple>found
        self.head = head
        self.status = known[0]
        self.headers = dict(<dict>known[1])
        self.http10, self.keep_alive, self.state = known[2], known[3], known[4]
        self.remaining, self.delimited_by_close = known[5], known[6]
        return 0

    cdef int _read_head(self, const char* p, Py_ssize_t n) except -1:
        """The status line and header fields; then the framing of the body."""
        cdef Py_ssize_t i = line_end(p, 0, n), e, colon, vs, ve, k
        cdef Py_ssize_t stop = i - 1 if i > 0 and p[i - 1] == c'\r' else i
        cdef int status
        cdef dict headers = {}
        cdef dict names = {}
        cdef str name, value, lower, first, last_name = None
        cdef bint any_field = False
        if stop < 12 or p[0] != c'H' or p[1] != c'T' or p[2] != c'T' or p[3] != c'P' or p[4] != c'/' \
                or p[5] != c'1' or p[6] != c'.' or (p[7] != c'0' and p[7] != c'1') or p[8] != c' ' \
                or not (c'0' <= p[9] <= c'9' and c'0' <= p[10] <= c'9' and c'0' <= p[11] <= c'9') \
                or (stop > 12 and p[12] != c' '):
            raise ResponseError("not an HTTP/1.x status line: "
                                + repr(PyBytes_FromStringAndSize(p, min(stop, 80)))[1:])
        for k in range(12, stop):
            if not FIELD_BYTE[<unsigned char>p[k]]:
                raise ResponseError("a control character in the status line")
        status = (p[9] - c'0') * 100 + (p[10] - c'0') * 10 + (p[11] - c'0')
        i += 1
        while True:                                  # header lines, up to the blank one
            e = line_end(p, i, n)
            stop = e - 1 if e > i and p[e - 1] == c'\r' else e
            if stop == i:
                break
            if is_ows(p[i]):                        # obsolete line folding: one space, then the rest
                if not any_field:
                    raise ResponseError("a header line starts with whitespace")
                vs = value_bounds(p, i, stop, &ve)
                if vs < 0:
                    bad_value()
                if ve > vs and last_name is not None:
                    headers[last_name] = headers[last_name] + " " + PyUnicode_DecodeLatin1(p + vs, ve - vs, NULL)
                i = e + 1
                continue
            colon = i
            while colon < stop and TCHAR[<unsigned char>p[colon]]:
                colon += 1
            if colon == i or colon == stop or p[colon] != c':':
                raise ResponseError("not a header line: "
                                    + repr(PyBytes_FromStringAndSize(p + i, min(stop - i, 80)))[1:])
            name = PyUnicode_DecodeLatin1(p + i, colon - i, NULL)
            vs = value_bounds(p, colon + 1, stop, &ve)
            if vs < 0:
                bad_value()
            value = PyUnicode_DecodeLatin1(p + vs, ve - vs, NULL)
            any_field = True
            lower = name.lower()
            first = names.get(lower)
            if first is None:
                names[lower] = name
                headers[name] = value
                last_name = name
            elif lower != "set-cookie":
                headers[first] = headers[first] + ", " + value
                last_name = first
            else:
                last_name = None                     # a second Set-Cookie, and its folded lines: dropped
            i = e + 1
        if 100 <= status < 200:
            if status == 101:
                raise ResponseError("101 Switching Protocols: no protocol switch was asked for")
            self.scanned = 0                         # an interim response: the final one follows
            return 0
        self.status = status
        self.headers = headers
        self.http10 = p[7] == c'0'
        self._framing(names)
        return 0

    cdef int _framing(self, dict names) except -1:
        """How the body ends (module docstring), and whether the connection stays open after it."""
        cdef dict headers = self.headers
        cdef str coding, length_name = names.get("content-length"), coding_name = names.get("transfer-encoding")
        cdef str connection_name = names.get("connection")
        connection = set()
        if connection_name is not None:
            connection = {token.strip().lower() for token in headers[connection_name].split(",")}
        self.keep_alive = ("keep-alive" in connection) if self.http10 else ("close" not in connection)
        if self.status == 204 or self.status == 304:
            self.state = DONE
            return 0
        if coding_name is not None:
            if length_name is not None:
                raise ResponseError("both Transfer-Encoding and Content-Length")
            coding = headers[coding_name].rpartition(",")[2].strip().lower()
            if coding == "chunked" and not self.http10:
                self.state = CHUNK_SIZE
                return 0
            self._until_close()
            return 0
        if length_name is None:
            self._until_close()
            return 0
        lengths = {part.strip() for part in headers[length_name].split(",")}
        if len(lengths) != 1:
            raise ResponseError(f"conflicting Content-Length values: {headers[length_name][:80]!r}")
        length = lengths.pop()
        if not (0 < len(length) <= 18 and length.isdigit() and length.isascii()):
            raise ResponseError(f"not a Content-Length: {length[:80]!r}")
        self.remaining = int(length)
        self.state = BODY_LENGTH if self.remaining else DONE
        return 0

    cdef void _until_close(self):
        self.state = BODY_CLOSE
        self.delimited_by_close = True
        self.keep_alive = False


# -- requests: the lean hit path's plain GET -------------------------------------------------------------------------

cdef bint[256] URI_BYTE
for _c in range(256):
    URI_BYTE[_c] = (48 <= _c <= 57 or 65 <= _c <= 90 or 97 <= _c <= 122
                    or _c in b"-._~:/?#[]@!$&'()*+,;=%")


cdef inline bint name_is(const char* p, Py_ssize_t n, const char* lower) nogil:
    """``p[:n]`` is the lower-case NUL-terminated ``lower``, ignoring ASCII case."""
    cdef Py_ssize_t i
    cdef char c
    for i in range(n):
        c = p[i]
        if c'A' <= c <= c'Z':
            c = c + 32
        if lower[i] == 0 or c != lower[i]:
            return False
    return lower[n] == 0


cdef inline bytes joined(object before, const char* p, Py_ssize_t start, Py_ssize_t end):
    value = PyBytes_FromStringAndSize(p + start, end - start)
    return value if before is None else before + b"," + value


def plain_get(bytes head):
    """A request head (its bytes up to and including the blank line) that is a plain ``GET http://... HTTP/1.1``:
    ``(target, cache_control, via, authorization)``, the header values as bytes without the whitespace around them
    (None when absent; repeated Cache-Control and Via fields joined with ","; the first Authorization). None for
    anything else, which a general parser decides: another method or version; a target that is not absolute
    ``http://`` or holds a byte RFC 3986 does not; a body (Content-Length but 0, or twice); Connection, Expect, Pragma,
    Upgrade, Proxy-Connection, Transfer-Encoding, Keep-Alive or TE; a line not ending in CRLF, obsolete folding,
    a header name that is not a token or a value with a control character."""
    cdef const char* p = PyBytes_AS_STRING(head)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(head), i, e, colon, vs, ve
    cdef Py_ssize_t target_end
    cdef bint seen_length = False
    cache_control = via = authorization = None
    if n < 4 or p[n - 4] != c'\r' or p[n - 3] != c'\n' or p[n - 2] != c'\r' or p[n - 1] != c'\n':
        return None
    if n < 11 or p[0] != c'G' or p[1] != c'E' or p[2] != c'T' or p[3] != c' ' or p[4] != c'h' or p[5] != c't' \
            or p[6] != c't' or p[7] != c'p' or p[8] != c':' or p[9] != c'/' or p[10] != c'/':
        return None
    i = 4
    while i < n and URI_BYTE[<unsigned char>p[i]]:
        i += 1
    target_end = i
    if n - i < 11 or p[i] != c' ' or p[i + 1] != c'H' or p[i + 2] != c'T' or p[i + 3] != c'T' or p[i + 4] != c'P' \
            or p[i + 5] != c'/' or p[i + 6] != c'1' or p[i + 7] != c'.' or p[i + 8] != c'1' or p[i + 9] != c'\r' \
            or p[i + 10] != c'\n':
        return None
    i += 11
    while i < n - 2:                                 # header lines, up to the blank one
        e = line_end(p, i, n)
        if e < 0 or p[e - 1] != c'\r':
            return None
        colon = i
        while colon < e and TCHAR[<unsigned char>p[colon]]:
            colon += 1
        if colon == i or p[colon] != c':':
            return None
        vs = value_bounds(p, colon + 1, e - 1, &ve)
        if vs < 0:
            return None
        if name_is(p + i, colon - i, "cache-control"):
            cache_control = joined(cache_control, p, vs, ve)
        elif name_is(p + i, colon - i, "via"):
            via = joined(via, p, vs, ve)
        elif name_is(p + i, colon - i, "authorization"):
            if authorization is None:
                authorization = PyBytes_FromStringAndSize(p + vs, ve - vs)
        elif name_is(p + i, colon - i, "content-length"):
            if ve - vs != 1 or p[vs] != c'0' or seen_length:   # a body, or a repeated length: aiohttp's
                return None
            seen_length = True
        elif (name_is(p + i, colon - i, "connection") or name_is(p + i, colon - i, "expect")
              or name_is(p + i, colon - i, "pragma") or name_is(p + i, colon - i, "upgrade")
              or name_is(p + i, colon - i, "proxy-connection") or name_is(p + i, colon - i, "transfer-encoding")
              or name_is(p + i, colon - i, "keep-alive") or name_is(p + i, colon - i, "te")):
            return None
        i = e + 1
    return PyBytes_FromStringAndSize(p + 4, target_end - 4), cache_control, via, authorization
