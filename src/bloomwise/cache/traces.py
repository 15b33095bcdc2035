"""Request traces for the cache simulator: readers, writers, the client -> proxy mapping, a synthetic generator.

A trace is a stream of :class:`Request` records. Readers never load a file: they read it 256 KiB at a time, so a
10-million-line log costs a few megabytes (lines longer than :data:`MAX_LINE_BYTES` are refused, never held
whole).

Formats
-------
**Squid's native access.log** (one request per line, fields separated by spaces)::

    time.ms  elapsed  client  code/status  bytes  method  URL  user  hierarchy/peer  type
    1700000000.123    15 10.0.0.7 TCP_MISS/200 5120 GET http://example.com/ - HIER_DIRECT/93.184.216.34 text/html

``time.ms`` is seconds since the epoch with milliseconds, ``elapsed`` milliseconds, ``bytes`` the reply size.
The result code (``TCP_MISS``) and status, the user, the hierarchy code (``HIER_DIRECT``, ``CD_SIBLING_HIT``, ...)
and its peer, and the content type are kept on the record (``squid_code``, ``status``, ``user``, ``hierarchy``,
``peer``, ``content_type``). Fields after the tenth (``log_mime_hdrs``) are ignored.

**Plain traces**: ``timestamp client url size`` with an optional fifth field, the method (``GET`` when absent).

Blank lines and lines starting with ``#`` are not requests and are counted in ``skipped``. Any other line that does
not parse is *malformed*: counted in ``malformed``, its line number and the reason kept in ``malformed_lines`` (the
first :data:`MAX_REPORTED_MALFORMED`), and reading goes on; with ``strict=True`` the first one raises
:class:`TraceError`. A file whose first :data:`DETECTION_LINES` request lines contain none that parses is not a
trace (:class:`TraceError` at open). Files ending in ``.gz``, ``.bz2``, ``.xz`` or ``.lzma`` are decompressed while
read (and compressed when written); ``-`` is standard input (or output). Every method is replayed by the caller's
choice: readers pass all of them on, with ``method`` set (caches replay ``GET``).

Proxies
-------
:func:`assign_proxy` maps a client to one of P proxies: ``XXH3-64(UTF-8 bytes of client, seed 0) mod P``, with
bloomwise's own compiled XXH3 (bit-exact with the reference xxHash), so the same trace always splits the same way.

The synthetic workload
----------------------
:class:`SyntheticTrace` generates a seeded, reproducible trace lazily, in chunks (memory grows with the document
catalogue, never with the number of requests). Each request is drawn independently:

1. **Proxy**: uniform over ``num_proxies``; the client is one of that proxy's ``clients_per_proxy`` clients
   (addresses ``10.x.y.z`` chosen so that :func:`assign_proxy` maps them back to that proxy), uniformly.
2. **One-timers**: with probability ``one_timer_fraction`` the request is for a new document that is never
   requested again (``http://once.example/<proxy>/<n>``). Such requests can only miss, in every cache: they are
   the compulsory misses that bound every proxy's hit ratio.
3. **Shared or private interest**: otherwise, with probability ``shared_fraction`` the document comes from the
   pool shared by all proxies' clients (``http://shared.example/<rank>``), else from the proxy's own pool
   (``http://proxy<p>.example/<rank>``). The shared pool holds ``round(shared_fraction * num_documents)`` documents
   and each private pool an equal part of the rest. Only requests to the shared pool can be remote hits, so
   ``shared_fraction`` sets how much cooperation can gain.
4. **Popularity**: within a pool of N documents, rank r (1 = most popular) is requested with probability
   ``r**-alpha / H(N, alpha)``, ``H(N, alpha) = sum_{i=1..N} i**-alpha`` (``zipf_alpha``). Breslau, Cao, Fan,
   Phillips and Shenker, "Web Caching and Zipf-like Distributions: Evidence and Implications" (INFOCOM 1999),
   found that the requests web proxies see follow such Zipf-like laws with an exponent that varies from trace to
   trace, that a model of independent requests reproduces the hit-ratio behaviour of real proxy traces, and that
   a document's popularity and its size are only weakly correlated: which is this model (independent draws,
   sizes independent of rank). The exponents reported for web traces lie between about 0.6 and 1 (0.60 to 1.03
   in the survey of Krashakov, Teslyuk and Shchur, "On the universality of rank distributions of website
   popularity", 2006); the default 0.8 is in the middle of the proxy range.
5. **Sizes**: each document has one size, a function of the seed and its URL. The shape is the file-size model of
   Barford and Crovella, "Generating Representative Web Workloads for Network and Server Performance Evaluation"
   (SURGE, SIGMETRICS 1998): a lognormal body (mu = 9.357, sigma = 1.318 in ln bytes: median 11.6 KB) spliced
   with a Pareto tail from k = 133 KB on (every body draw above k is replaced by ``k * U**(-1/size_tail)``, so
   the tail holds the body's 3.2% above k; ``size_tail`` is the Pareto shape, SURGE's 1.1 by default: smaller is
   heavier; it must exceed 1 for a finite mean). Sizes are capped at :data:`MAX_DOCUMENT_SIZE`. With
   ``mean_size=None`` (default) the sizes are SURGE's (expected mean: :attr:`SyntheticTrace.expected_size`, about
   49 KB); a ``mean_size`` in bytes rescales the whole shape so that the capped mean is that value.
6. **Time**: Poisson arrivals at ``request_rate`` requests per second (exponential gaps), from ``start_time``,
   rounded to the millisecond (the resolution of Squid's log, so a synthetic trace survives a round trip through
   either format exactly).

Only ``numpy.random.Generator(PCG64(seed)).random`` is used (uniform doubles, whose stream numpy keeps stable),
everything else is derived from those uniforms and from a hash of (seed, document), and uniforms are drawn in
whole chunks, so a seed gives the same trace on every run, and a shorter trace is a prefix of a longer one.
Across machines, numpy's vectorised ``log``/``exp``/``cos`` may differ in the last bit, which can move a rare
size by a byte or a timestamp by a millisecond.

>>> request = next(iter(SyntheticTrace(10, num_proxies=2, seed=1)))
>>> request[:5]
(1700000000.022, '10.0.0.10', 'GET', 'http://once.example/1/1', 6797)
>>> request_key(request.method, request.url), assign_proxy(request.client, 2)
('GET http://once.example/1/1', 1)
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import math
import numbers
import operator
import os
import sys
import zlib
from itertools import repeat, starmap
from operator import add
from typing import Iterable, Iterator, NamedTuple

from bloomwise._native.hashes import xxh3 as _xxh3
from bloomwise.errors import FormatError

__all__ = [
    "Request", "request_key", "TraceError", "TraceReader", "read_squid_log", "read_plain_trace", "open_trace",
    "write_squid_log", "write_plain_trace", "assign_proxy", "SyntheticTrace",
    "MAX_LINE_BYTES", "MAX_REPORTED_MALFORMED", "DETECTION_LINES", "MAX_DOCUMENT_SIZE",
]

#: A line longer than this (bytes, newline included) is malformed; it is skipped without being held in memory.
MAX_LINE_BYTES = 64 * 1024
#: How many (line number, reason) pairs a reader keeps in ``malformed_lines`` (all are counted in ``malformed``).
MAX_REPORTED_MALFORMED = 100
#: How many request lines (not blank, not ``#``) at the start of a file are examined to detect its format; if none
#: of them parses, the file is not a trace.
DETECTION_LINES = 100
#: The largest synthetic document (bytes): the Pareto tail is capped here.
MAX_DOCUMENT_SIZE = 2 ** 30

FORMATS = ("squid", "plain")
_COMPRESSED = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open, ".lzma": lzma.open}
#: Writing .gz uses zlib's default level 6: gzip.open's default, 9, took 4.7x the CPU time for 10% fewer bytes
#: on a Squid log.
_GZIP_WRITE_LEVEL = 6
_SQUID_FIELDS = "time elapsed client code/status bytes method URL user hierarchy/peer type"
_PLAIN_FIELDS = "timestamp client url size [method]"
_INF = float("inf")


class Request(NamedTuple):
    """One request of a trace.

    The first six fields are what a cache replays; the rest are Squid's, None for other sources.
    """
    timestamp: float          #: seconds since the epoch
    client: str               #: client address or name
    method: str               #: HTTP method as logged (caches replay GET)
    url: str
    size: int                 #: reply size in bytes
    line: int = 0             #: line number in the file (1-based), 0 for a synthetic request
    elapsed_ms: int | None = None
    squid_code: str | None = None     #: e.g. TCP_MISS, TCP_HIT
    status: int | None = None         #: HTTP status, e.g. 200
    user: str | None = None
    hierarchy: str | None = None      #: e.g. HIER_DIRECT, CD_SIBLING_HIT
    peer: str | None = None           #: the hierarchy field's peer or origin address, "-" when none
    content_type: str | None = None


_NO_SQUID_FIELDS = (None,) * 7
_new_request = tuple.__new__  # Request's fields in order, without the keyword handling of Request(...)


def request_key(method: str, url: str) -> str:
    """The cache key of a request: ``"METHOD URL"`` (method upper-cased, the URL exactly as given).

    >>> request_key("get", "http://example.com/")
    'GET http://example.com/'
    """
    return f"{method.upper()} {url}"


class TraceError(FormatError):
    """A trace file that cannot be read: not a trace, or (strict mode) a malformed line.

    ``path``, ``line`` (1-based, None when not about a line) and ``reason`` are attributes.
    """

    def __init__(self, path: str, line: int | None, reason: str):
        self.path, self.line, self.reason = path, line, reason
        where = f"{path}, line {line}" if line is not None else path
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):
        return (type(self), (self.path, self.line, self.reason))


# ---------------------------------------------------------------------------------------------------------------
# Line parsers: a fast path that returns a Request or None, and a slow one that says why a line failed.

def _is_count(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _parse_timestamp(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value < _INF else None


def _parse_squid(fields: list[str], line: int) -> Request | None:
    if len(fields) < 10:
        return None
    timestamp = _parse_timestamp(fields[0])
    elapsed, code_status, size = fields[1], fields[3], fields[4]
    code, slash, status = code_status.rpartition("/")
    hierarchy, slash2, peer = fields[8].partition("/")
    if (timestamp is None or not _is_count(elapsed) or not _is_count(size) or not slash or not code
            or not _is_count(status) or not slash2 or not hierarchy):
        return None
    return _new_request(Request, (timestamp, fields[2], fields[5], fields[6], int(size), line, int(elapsed), code,
                                  int(status), fields[7], hierarchy, peer, fields[9]))


def _squid_reason(fields: list[str]) -> str:
    if len(fields) < 10:
        return f"expected 10 fields ({_SQUID_FIELDS}), found {len(fields)}"
    if _parse_timestamp(fields[0]) is None:
        return f"bad time {fields[0]!r} (expected seconds since the epoch, e.g. 1700000000.123)"
    if not _is_count(fields[1]):
        return f"bad elapsed time {fields[1]!r} (expected whole milliseconds)"
    code, slash, status = fields[3].rpartition("/")
    if not slash or not code or not _is_count(status):
        return f"bad result code {fields[3]!r} (expected CODE/STATUS, e.g. TCP_MISS/200)"
    if not _is_count(fields[4]):
        return f"bad size {fields[4]!r} (expected a whole number of bytes)"
    hierarchy, slash, _ = fields[8].partition("/")
    if not slash or not hierarchy:
        return f"bad hierarchy field {fields[8]!r} (expected CODE/PEER, e.g. HIER_DIRECT/10.0.0.1)"
    return "unparsable line"  # pragma: no cover - the fast path accepts every line the checks above accept


def _parse_plain(fields: list[str], line: int) -> Request | None:
    n = len(fields)
    if n != 4 and n != 5:
        return None
    timestamp = _parse_timestamp(fields[0])
    size = fields[3]
    if timestamp is None or not _is_count(size):
        return None
    return _new_request(Request, (timestamp, fields[1], fields[4] if n == 5 else "GET", fields[2], int(size), line,
                                  None, None, None, None, None, None, None))


def _plain_reason(fields: list[str]) -> str:
    if len(fields) not in (4, 5):
        return f"expected 4 or 5 fields ({_PLAIN_FIELDS}), found {len(fields)}"
    if _parse_timestamp(fields[0]) is None:
        return f"bad timestamp {fields[0]!r} (expected seconds since the epoch, e.g. 1700000000.123)"
    if not _is_count(fields[3]):
        return f"bad size {fields[3]!r} (expected a whole number of bytes)"
    return "unparsable line"  # pragma: no cover


_PARSERS = {"squid": (_parse_squid, _squid_reason), "plain": (_parse_plain, _plain_reason)}
_FORMAT_NAMES = {"squid": "Squid access.log", "plain": "plain trace (timestamp client url size)"}


# ---------------------------------------------------------------------------------------------------------------
# Opening files

def _display_name(source) -> str:
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        return "<stdin>" if name == "-" else name
    return getattr(source, "name", None) or f"<{type(source).__name__}>"


def _open_binary(source, mode: str):
    """(stream, owned) for reading ("rb") or writing ("wb"); owned streams are closed by their user."""
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        if name == "-":
            std = sys.stdin if mode == "rb" else sys.stdout
            return getattr(std, "buffer", std), False
        opener = _COMPRESSED.get(os.path.splitext(name)[1].lower(), open)
        if mode == "rb" and not os.path.exists(name):
            raise FileNotFoundError(2, "no such trace file", name)
        if opener is gzip.open and mode == "wb":
            return gzip.open(name, mode, compresslevel=_GZIP_WRITE_LEVEL), True
        return opener(name, mode), True
    return source, False


_BLOCK = 256 * 1024  # bytes (or characters) read at a time
_BAD = "\n"          # stands for a line that could not be read (a real line never contains a newline)


class _LineBlocks:
    """The lines of a binary or text stream, a block at a time, in bounded memory.

    ``next()`` returns the next list of lines (without their newlines; None at the end). A line that is longer
    than MAX_LINE_BYTES or not UTF-8 is returned as ``_BAD``, and its reason is in ``reasons`` (index in the list
    -> reason). An over-long line is dropped as it is read, never held whole.
    """

    def __init__(self, stream, path: str):
        self._read = stream.read
        self._text = isinstance(stream, io.TextIOBase)
        self._newline = "\n" if self._text else b"\n"
        self._carry = "" if self._text else b""
        self._over_long = False  # inside a line already known to be too long
        self._eof = False
        self.path = path
        self.reasons: dict[int, str] = {}

    def _read_block(self):
        try:
            return self._read(_BLOCK)
        except UnicodeDecodeError as error:  # a text stream that is not UTF-8: nothing after it can be trusted
            raise TraceError(self.path, None, f"cannot read: not UTF-8 text ({error.reason})") from error
        except (OSError, EOFError, lzma.LZMAError, zlib.error) as error:
            raise TraceError(self.path, None, f"cannot read: {error}") from error

    def next(self) -> list[str] | None:
        while not self._eof:
            data = self._read_block()
            if not data:
                self._eof = True
                if not self._carry and not self._over_long:
                    return None
                chunk, self._carry = self._carry, self._carry[:0]  # the last line has no newline
            else:
                cut = data.rfind(self._newline)
                if cut < 0:
                    if not self._over_long:
                        self._carry += data
                        if len(self._carry) > MAX_LINE_BYTES:
                            self._over_long, self._carry = True, self._carry[:0]
                    continue
                chunk, self._carry = self._carry + data[:cut], data[cut + 1:]
            return self._lines(chunk)
        return None

    def _lines(self, chunk) -> list[str]:
        reasons = self.reasons = {}
        if self._text:
            lines = chunk.split("\n")
        else:
            try:
                lines = chunk.decode("utf-8").split("\n")
            except UnicodeDecodeError:
                lines = []
                for index, raw in enumerate(chunk.split(b"\n")):
                    try:
                        lines.append(raw.decode("utf-8"))
                    except UnicodeDecodeError as error:
                        lines.append(_BAD)
                        reasons[index] = f"not UTF-8 text ({error.reason} at byte {error.start})"
        too_long = f"line longer than {MAX_LINE_BYTES} bytes"
        if self._over_long:
            self._over_long = False
            lines[0], reasons[0] = _BAD, too_long
        if len(chunk) > MAX_LINE_BYTES and max(map(len, lines)) > MAX_LINE_BYTES:
            for index, text in enumerate(lines):
                if len(text) > MAX_LINE_BYTES:
                    lines[index], reasons[index] = _BAD, too_long
        return lines


class TraceReader:
    """An iterator of :class:`Request` over a trace file, streaming.

    Attributes: ``path``, ``format`` (``"squid"`` or ``"plain"``), ``strict``, ``lines`` (lines read so far),
    ``requests`` (requests returned), ``skipped`` (blank and ``#`` lines), ``malformed`` (count) and
    ``malformed_lines`` (the first :data:`MAX_REPORTED_MALFORMED` ``(line number, reason)`` pairs).
    Use it as a context manager (or call :meth:`close`) to close a file it opened.
    """

    def __init__(self, source, *, format: str = "auto", strict: bool = False):
        if format not in ("auto",) + FORMATS:
            raise ValueError(f"format must be 'auto', 'squid' or 'plain', got {format!r}")
        self.path = _display_name(source)
        self.strict = bool(strict)
        self.lines = self.requests = self.skipped = self.malformed = 0
        self.malformed_lines: list[tuple[int, str]] = []
        self._stream, self._owned = _open_binary(source, "rb")
        try:
            self._blocks = _LineBlocks(self._stream, self.path)
            self._head = self._read_head()
            self.format = self._detect(format)
        except BaseException:
            self.close()
            raise
        self._iterator = self._generate()

    def _read_head(self) -> list[tuple[list[str] | int, dict[int, str] | None]]:
        """The first blocks, up to DETECTION_LINES request lines (not blank, not #), kept for detection.

        A block of blank and comment lines only is kept as its number of lines, so that a file starting with
        gigabytes of them does not fill the memory.
        """
        head, content = [], 0
        while content < DETECTION_LINES:
            lines = self._blocks.next()
            if lines is None:
                break
            in_block = sum(1 for text in lines if text.strip() and not text.lstrip().startswith("#") or text == _BAD)
            head.append((lines, self._blocks.reasons) if in_block else (len(lines), None))
            content += in_block
        return head

    def _detect(self, format: str) -> str:
        candidates = FORMATS if format == "auto" else (format,)
        parsed = {name: 0 for name in candidates}
        first_problem, number, content = None, 0, 0
        for lines, reasons in self._head:
            if type(lines) is int:  # blank and comment lines only
                number += lines
                continue
            for index, text in enumerate(lines):
                number += 1
                if content == DETECTION_LINES:
                    break
                fields = text.split()
                if text == _BAD:
                    first_problem = first_problem or (number, reasons[index])
                    content += 1
                    continue
                if not fields or fields[0].startswith("#"):
                    continue
                content += 1
                for name in candidates:
                    if _PARSERS[name][0](fields, number) is not None:
                        parsed[name] += 1
                if first_problem is None and not any(parsed.values()):
                    first_problem = (number, "; ".join(
                        (f"as {name}: " if len(candidates) > 1 else "") + _PARSERS[name][1](fields)
                        for name in candidates))
        best = max(candidates, key=lambda name: parsed[name])
        if parsed[best] == 0 and first_problem is not None:
            what = " or ".join(_FORMAT_NAMES[name] for name in candidates)
            raise TraceError(self.path, None,
                             f"not a trace: none of the first {DETECTION_LINES} lines is a {what} line "
                             f"(line {first_problem[0]}: {first_problem[1]})")
        return best

    def _bad_line(self, number: int, reason: str) -> None:
        self.lines = number
        if self.strict:
            raise TraceError(self.path, number, reason)
        self.malformed += 1
        if len(self.malformed_lines) < MAX_REPORTED_MALFORMED:
            self.malformed_lines.append((number, reason))

    def _blocks_from_the_start(self):
        head, self._head = self._head, None
        head.reverse()
        while head:  # popped, so that the first blocks are not held to the end
            yield head.pop()
        blocks = self._blocks
        while (lines := blocks.next()) is not None:
            yield lines, blocks.reasons

    def _generate(self) -> Iterator[Request]:
        parse, explain = _PARSERS[self.format]
        number = 0
        for lines, reasons in self._blocks_from_the_start():
            if type(lines) is int:  # a block of the head with blank and comment lines only
                number += lines
                self.skipped += lines
                self.lines = number
                continue
            first = number + 1
            for text in lines:
                number += 1
                fields = text.split()
                request = parse(fields, number)
                if request is not None:
                    self.lines = number
                    self.requests += 1
                    yield request
                elif text == _BAD:
                    self._bad_line(number, reasons[number - first])
                elif not fields or fields[0].startswith("#"):
                    self.skipped += 1
                else:
                    self._bad_line(number, explain(fields))
            self.lines = number
        self.close()

    def __iter__(self) -> Iterator[Request]:
        return self._iterator

    def __next__(self) -> Request:
        return next(self._iterator)

    def close(self) -> None:
        stream, self._stream = getattr(self, "_stream", None), None
        if stream is not None and self._owned:
            stream.close()

    def __enter__(self) -> "TraceReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<TraceReader {self.path!r} format={self.format} lines={self.lines} requests={self.requests} "
                f"malformed={self.malformed}>")


def read_squid_log(path_or_file, *, strict: bool = False) -> TraceReader:
    """Stream the requests of a Squid native access.log (a path, ``-`` for stdin, or a binary/text file object).

    :raises FileNotFoundError: no such file.
    :raises TraceError: none of the first lines is a Squid line; with ``strict=True``, any malformed line.
    """
    return TraceReader(path_or_file, format="squid", strict=strict)


def read_plain_trace(path_or_file, *, strict: bool = False) -> TraceReader:
    """Stream the requests of a plain ``timestamp client url size [method]`` trace (as :func:`read_squid_log`)."""
    return TraceReader(path_or_file, format="plain", strict=strict)


def open_trace(path, format: str = "auto", strict: bool = False) -> TraceReader:
    """Stream a trace whose format is ``"squid"``, ``"plain"`` or ``"auto"`` (the format most of the first
    :data:`DETECTION_LINES` request lines parse as)."""
    return TraceReader(path, format=format, strict=strict)


# ---------------------------------------------------------------------------------------------------------------
# Writers

def _check_token(value, what: str, index: int) -> str:
    if not isinstance(value, str) or not value or len(value.split()) != 1 or value.strip() != value:
        raise ValueError(f"request {index}: {what} must be a non-empty string without spaces, got {value!r}")
    return value


def _check_number(value, what: str, index: int, *, integer: bool, upper: float = _INF):
    if integer:
        try:
            value = operator.index(value)
        except TypeError:
            raise ValueError(f"request {index}: {what} must be an integer >= 0, got {value!r}") from None
    elif isinstance(value, (str, bytes, bool)) or not isinstance(value, (int, float, numbers.Real)):
        raise ValueError(f"request {index}: {what} must be a finite number >= 0, got {value!r}")
    if not 0 <= value <= upper or value == _INF:
        kind = "an integer" if integer else "a finite number"
        bound = ">= 0" if upper == _INF else f"in [0, {upper}]"
        raise ValueError(f"request {index}: {what} must be {kind} {bound}, got {value!r}")
    return value if integer else float(value)


def _checked(request, index: int) -> Request:
    """The request with its fields checked (the slow path: names the first field the formats cannot hold)."""
    if not isinstance(request, Request):
        request = Request(*request)
    timestamp = _check_number(request.timestamp, "timestamp", index, integer=False)
    size = _check_number(request.size, "size", index, integer=True)
    for what in ("client", "method", "url"):
        _check_token(getattr(request, what), what, index)
    optional = {}
    for what in ("user", "peer", "content_type", "squid_code", "hierarchy"):
        value = getattr(request, what)
        if value is not None:
            _check_token(value, what, index)
            if what in ("squid_code", "hierarchy") and "/" in value:
                raise ValueError(f"request {index}: {what} must not contain '/', got {value!r}")
    if request.elapsed_ms is not None:
        optional["elapsed_ms"] = _check_number(request.elapsed_ms, "elapsed_ms", index, integer=True)
    if request.status is not None:
        optional["status"] = _check_number(request.status, "status", index, integer=True, upper=999)
    return request._replace(timestamp=timestamp, size=size, **optional)


def _write_lines(lines: Iterable[str], file) -> None:
    stream, owned = _open_binary(file, "wb")
    try:
        text = isinstance(stream, io.TextIOBase)
        buffer = []
        for line in lines:
            buffer.append(line)
            if len(buffer) == 4096:
                joined = "".join(buffer)
                stream.write(joined if text else joined.encode("utf-8"))
                buffer.clear()
        joined = "".join(buffer)
        stream.write(joined if text else joined.encode("utf-8"))
        stream.flush()
    finally:
        if owned:
            stream.close()


def _squid_line(request) -> str:
    (timestamp, client, method, url, size, _, elapsed, code, status, user, hierarchy, peer,
     content_type) = request
    return (f"{timestamp:.3f} {elapsed or 0:6d} {client} {code or 'TCP_MISS'}/{200 if status is None else status:03d} "
            f"{size} {method} {url} {user or '-'} {hierarchy or 'HIER_DIRECT'}/{peer or '-'} {content_type or '-'}\n")


def write_squid_log(requests: Iterable[Request], file) -> int:
    """Write requests as a Squid native access.log; returns how many were written.

    ``file``: a path (``.gz``/``.bz2``/``.xz`` compress; ``-`` is stdout) or a binary or text file object.
    Squid's layout (``%.3f %6d client code/status bytes method URL user hierarchy/peer type``); timestamps keep
    milliseconds (Squid's resolution). Fields a request does not carry are written as Squid would for a direct
    miss: elapsed 0, ``TCP_MISS/200``, user ``-``, ``HIER_DIRECT/-``, type ``-``.

    :raises ValueError: a field that would not survive the format (spaces, negative size, ...), naming it.
    """
    count = 0

    def lines():
        nonlocal count
        for index, request in enumerate(requests):
            # fast path, for records without Squid fields (synthetic, plain): sound numbers, then a line that
            # reads back as 10 fields; anything else is checked field by field
            line = None
            if (type(request) is Request and request[6:] == _NO_SQUID_FIELDS and type(request[0]) is float
                    and type(request[4]) is int and 0.0 <= request[0] < _INF and request[4] >= 0):
                line = _squid_line(request)
                if len(line.split()) != 10:
                    line = None
            if line is None:
                line = _squid_line(_checked(request, index))
            count += 1
            yield line

    _write_lines(lines(), file)
    return count


def write_plain_trace(requests: Iterable[Request], file) -> int:
    """Write requests as a plain trace, ``timestamp client url size`` (plus the method when it is not GET).

    Timestamps are written exactly (the shortest text that reads back as the same float). Returns the count.

    :raises ValueError: a field that would not survive the format, naming it.
    """
    count = 0

    def lines():
        nonlocal count
        for index, request in enumerate(requests):
            line = None
            timestamp, client, method, url, size = request[:5]
            if type(timestamp) is float and type(size) is int and 0.0 <= timestamp < _INF and size >= 0:
                if method == "GET":
                    line, expected = f"{timestamp!r} {client} {url} {size}\n", 4
                else:
                    line, expected = f"{timestamp!r} {client} {url} {size} {method}\n", 5
                if len(line.split()) != expected:
                    line = None
            if line is None:
                timestamp, client, method, url, size = _checked(request, index)[:5]
                tail = "" if method == "GET" else f" {method}"
                line = f"{timestamp!r} {client} {url} {size}{tail}\n"
            count += 1
            yield line

    _write_lines(lines(), file)
    return count


# ---------------------------------------------------------------------------------------------------------------
# Proxies

def assign_proxy(client: str, num_proxies: int) -> int:
    """The proxy (0 .. num_proxies-1) that serves ``client``: XXH3-64 of its UTF-8 bytes (seed 0) mod num_proxies.

    Stable across runs, machines and versions (the hash is bloomwise's compiled XXH3, bit-exact with xxHash's
    ``xxh3_64``). The modulo bias is below num_proxies / 2**64.

    >>> assign_proxy("10.0.0.1", 1)
    0
    """
    if isinstance(num_proxies, bool) or not isinstance(num_proxies, int) or num_proxies < 1:
        raise ValueError(f"num_proxies must be a positive integer, got {num_proxies!r}")
    return _xxh3(client.encode("utf-8")) % num_proxies


# ---------------------------------------------------------------------------------------------------------------
# The synthetic workload

#: SURGE's file-size model (Barford & Crovella): lognormal body (ln bytes), Pareto tail from TAIL_START bytes.
BODY_MU, BODY_SIGMA, TAIL_START = 9.357, 1.318, 133_000.0
_CHUNK = 16384
_MASK64 = (1 << 64) - 1


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _expected_size(scale: float, tail_shape: float) -> float:
    """E[min(scale * X, MAX_DOCUMENT_SIZE)] for X the spliced SURGE shape (exact, from the lognormal's partial
    moment and the capped Pareto's mean), before rounding to whole bytes."""
    mu, sigma, k = BODY_MU + math.log(scale), BODY_SIGMA, TAIL_START * scale
    cap = float(MAX_DOCUMENT_SIZE)
    z = (math.log(k) - mu) / sigma
    tail_probability = 1.0 - _phi(z)
    body = math.exp(mu + sigma * sigma / 2) * _phi(z - sigma)  # E[LN; LN < k]
    if k >= cap:
        return body + tail_probability * cap
    tail = k + k / (tail_shape - 1.0) * (1.0 - (k / cap) ** (tail_shape - 1.0))  # E[min(Pareto(k), cap)]
    return body + tail_probability * tail


def _mix64(values):
    """SplitMix64's finaliser over a numpy uint64 array (wrapping arithmetic): a stable per-document hash."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _check_fraction(value, name: str, *, upper_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1 or (
            upper_open and value == 1):
        bound = "[0, 1)" if upper_open else "[0, 1]"
        raise ValueError(f"{name} must be a number in {bound}, got {value!r}")
    return float(value)


def _check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


class SyntheticTrace:
    """A seeded synthetic proxy workload (see the module docstring for the model and why it is realistic).

    Iterating yields ``num_requests`` :class:`Request` records (method GET, ``line`` 0), generated lazily in
    chunks of 16384; iterating again yields the same requests. Memory: O(num_documents + num_proxies *
    clients_per_proxy), independent of num_requests.

    :param num_requests: requests to generate (>= 0).
    :param num_proxies: proxies whose clients issue the requests (>= 1).
    :param num_documents: documents in the shared and private pools together (one-timers come on top).
    :param zipf_alpha: Zipf exponent of popularity within a pool (>= 0; web proxies: about 0.6-0.9).
    :param one_timer_fraction: probability that a request is for a document requested only once, in [0, 1).
    :param shared_fraction: probability that a (non-one-timer) request is for the shared pool, in [0, 1]; also
        the shared pool's share of ``num_documents``.
    :param mean_size: mean document size in bytes, or None for SURGE's sizes (about 49 KB).
    :param size_tail: Pareto shape of the size tail (> 1; SURGE: 1.1).
    :param seed: the seed (any integer >= 0).
    :param clients_per_proxy: clients behind each proxy.
    :param request_rate: mean requests per second (Poisson arrivals).
    :param start_time: timestamp of the trace's start (seconds since the epoch).
    """

    def __init__(self, num_requests: int, *, num_proxies: int = 4, num_documents: int = 100_000,
                 zipf_alpha: float = 0.8, one_timer_fraction: float = 0.25, shared_fraction: float = 0.5,
                 mean_size: float | None = None, size_tail: float = 1.1, seed: int = 0,
                 clients_per_proxy: int = 50, request_rate: float = 100.0, start_time: float = 1_700_000_000.0):
        if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 0:
            raise ValueError(f"num_requests must be an integer >= 0, got {num_requests!r}")
        self.num_requests = num_requests
        self.num_proxies = _check_positive_int(num_proxies, "num_proxies")
        self.num_documents = _check_positive_int(num_documents, "num_documents")
        self.clients_per_proxy = _check_positive_int(clients_per_proxy, "clients_per_proxy")
        if isinstance(zipf_alpha, bool) or not isinstance(zipf_alpha, (int, float)) or not 0 <= zipf_alpha <= 10:
            raise ValueError(f"zipf_alpha must be a number in [0, 10], got {zipf_alpha!r}")
        self.zipf_alpha = float(zipf_alpha)
        self.one_timer_fraction = _check_fraction(one_timer_fraction, "one_timer_fraction", upper_open=True)
        self.shared_fraction = _check_fraction(shared_fraction, "shared_fraction")
        if isinstance(size_tail, bool) or not isinstance(size_tail, (int, float)) or not 1 < size_tail <= 100:
            raise ValueError(f"size_tail (the Pareto shape) must be a number in (1, 100], got {size_tail!r}")
        self.size_tail = float(size_tail)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        self.seed = seed
        if isinstance(request_rate, bool) or not isinstance(request_rate, (int, float)) or not 0 < request_rate < _INF:
            raise ValueError(f"request_rate must be a positive number, got {request_rate!r}")
        self.request_rate = float(request_rate)
        if not isinstance(start_time, (int, float)) or not 0 <= start_time < 1e12:
            raise ValueError(f"start_time must be a number of seconds in [0, 1e12), got {start_time!r}")
        self.start_time = float(start_time)

        shared = round(self.shared_fraction * self.num_documents)
        if self.shared_fraction > 0 and shared == 0:
            shared = 1
        private = (self.num_documents - shared) // self.num_proxies
        if self.shared_fraction < 1 and private == 0:
            raise ValueError(f"num_documents={num_documents} leaves no private document for each of "
                             f"{num_proxies} proxies with shared_fraction={shared_fraction}")
        self.shared_documents, self.private_documents = shared, private

        self._scale = 1.0
        if mean_size is not None:
            if isinstance(mean_size, bool) or not isinstance(mean_size, (int, float)) or not 1 <= mean_size <= 2 ** 26:
                raise ValueError(f"mean_size must be a number of bytes in [1, 2**26], got {mean_size!r}")
            low, high = 1e-9, 1e9  # the capped mean grows with the scale: bisection on the log scale
            for _ in range(200):
                middle = math.sqrt(low * high)
                if _expected_size(middle, self.size_tail) < mean_size:
                    low = middle
                else:
                    high = middle
            self._scale = math.sqrt(low * high)
        self.mean_size = mean_size
        self._clients = self._make_clients()

    @property
    def expected_size(self) -> float:
        """The expected document size in bytes (exact for the model, before rounding to whole bytes)."""
        return _expected_size(self._scale, self.size_tail)

    def clients(self, proxy: int) -> list[str]:
        """The client addresses of one proxy (``assign_proxy(c, num_proxies) == proxy`` for each)."""
        return list(self._clients[proxy])

    def _make_clients(self) -> list[list[str]]:
        per_proxy: list[list[str]] = [[] for _ in range(self.num_proxies)]
        missing, i = self.num_proxies, 0
        while missing:
            i += 1
            client = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}" if i < 2 ** 24 else f"client{i}"
            bucket = per_proxy[assign_proxy(client, self.num_proxies)]
            if len(bucket) < self.clients_per_proxy:
                bucket.append(client)
                if len(bucket) == self.clients_per_proxy:
                    missing -= 1
        return per_proxy

    def __len__(self) -> int:
        return self.num_requests

    def __repr__(self) -> str:
        return (f"SyntheticTrace({self.num_requests}, num_proxies={self.num_proxies}, "
                f"num_documents={self.num_documents}, zipf_alpha={self.zipf_alpha}, "
                f"one_timer_fraction={self.one_timer_fraction}, shared_fraction={self.shared_fraction}, "
                f"mean_size={self.mean_size}, size_tail={self.size_tail}, seed={self.seed})")

    @staticmethod
    def _zipf_cdf(n: int, alpha: float):
        import numpy as np

        if n == 0:
            return np.zeros(0)
        weights = np.arange(1, n + 1, dtype=np.float64) ** -alpha
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]
        return cdf

    def _sizes(self, pool_ids, ranks):
        """Stable sizes: a function of (seed, pool, rank) only, via three hashed uniforms per document."""
        import numpy as np

        key = (pool_ids.astype(np.uint64) << np.uint64(40)) ^ ranks.astype(np.uint64)
        base = _mix64(key ^ np.uint64((self.seed * 0x9E3779B97F4A7C15) & _MASK64))
        scale53 = 1.0 / 2.0 ** 53
        u1 = ((_mix64(base) >> np.uint64(11)).astype(np.float64) + 0.5) * scale53
        u2 = ((_mix64(base ^ np.uint64(1)) >> np.uint64(11)).astype(np.float64) + 0.5) * scale53
        u3 = ((_mix64(base ^ np.uint64(2)) >> np.uint64(11)).astype(np.float64) + 0.5) * scale53
        normal = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)  # Box-Muller
        size = np.exp(BODY_MU + BODY_SIGMA * normal)
        tail = size > TAIL_START
        size[tail] = TAIL_START * u3[tail] ** (-1.0 / self.size_tail)
        size = np.minimum(size * self._scale, float(MAX_DOCUMENT_SIZE))
        return np.maximum(np.rint(size), 1.0).astype(np.int64)

    def __iter__(self) -> Iterator[Request]:
        import numpy as np

        rng = np.random.Generator(np.random.PCG64(self.seed))
        shared_cdf = self._zipf_cdf(self.shared_documents, self.zipf_alpha)
        private_cdf = self._zipf_cdf(self.private_documents, self.zipf_alpha)
        num_proxies, clients = self.num_proxies, self._clients
        clients_per_proxy = self.clients_per_proxy
        one_timer, shared = self.one_timer_fraction, self.shared_fraction
        mean_gap = 1.0 / self.request_rate
        clock = self.start_time
        once_counter = 0
        prefixes = (["http://shared.example/"] + [f"http://proxy{p}.example/" for p in range(num_proxies)]
                    + [f"http://once.example/{p}/" for p in range(num_proxies)])
        flat_clients = [c for proxy_clients in clients for c in proxy_clients]
        constant_fields = [repeat(value) for value in (0, None, None, None, None, None, None, None)]
        one_timer_pool = num_proxies + 1  # pool ids: 0 shared, 1..P private, P+1 one-timers
        remaining = self.num_requests
        while remaining:
            n = min(_CHUNK, remaining)
            remaining -= n
            u = rng.random((6, _CHUNK))[:, :n]  # whole chunks: a trace is a prefix of any longer one
            proxy = np.minimum((u[0] * num_proxies).astype(np.int64), num_proxies - 1)
            client = np.minimum((u[1] * clients_per_proxy).astype(np.int64), clients_per_proxy - 1)
            is_once = u[2] < one_timer
            is_shared = ~is_once & (u[3] < shared)
            is_private = ~is_once & ~is_shared
            rank = np.zeros(n, dtype=np.int64)
            if len(shared_cdf):
                rank[is_shared] = np.searchsorted(shared_cdf, u[4][is_shared], side="right")
            if len(private_cdf):
                rank[is_private] = np.searchsorted(private_cdf, u[4][is_private], side="right")
            rank += 1
            rank[is_shared] = np.minimum(rank[is_shared], max(self.shared_documents, 1))
            rank[is_private] = np.minimum(rank[is_private], max(self.private_documents, 1))
            once_number = np.cumsum(is_once) + once_counter
            once_counter = int(once_number[-1])
            rank[is_once] = once_number[is_once]
            pool = np.where(is_once, one_timer_pool, np.where(is_shared, 0, proxy + 1))
            sizes = self._sizes(pool, rank)
            gaps = -np.log1p(-u[5]) * mean_gap  # exponential gaps: Poisson arrivals
            times = np.cumsum(gaps) + clock
            clock = float(times[-1])
            times = np.round(times * 1000.0) / 1000.0
            # URL prefix: 0 shared, 1+p proxy p's pool, 1+P+p proxy p's one-timers
            prefix = np.where(is_once, 1 + num_proxies + proxy, np.where(is_shared, 0, 1 + proxy))
            urls = list(map(add, map(prefixes.__getitem__, prefix.tolist()), map(str, rank.tolist())))
            who = list(map(flat_clients.__getitem__, (proxy * clients_per_proxy + client).tolist()))
            # C-level assembly of the records (no Python code per request)
            yield from starmap(_new_request, zip(repeat(Request), zip(
                times.tolist(), who, repeat("GET"), urls, sizes.tolist(), *constant_fields)))
