"""Readers of text traces: Squid's native access.log and plain ``timestamp client url size`` lines.

A trace is a stream of :class:`~bloomwise.cache.traces.records.Request` records. Readers never load a file: they
read it 256 KiB at a time, so a 10-million-line log costs a few megabytes (lines longer than
:data:`~bloomwise.cache.traces.lines.MAX_LINE_BYTES` are refused, never held whole).

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
first :data:`~bloomwise.cache.traces.records.MAX_REPORTED_MALFORMED`), and reading goes on; with ``strict=True``
the first one raises :class:`TraceError`. A file whose first :data:`DETECTION_LINES` request lines contain none that
parses is not a trace (:class:`TraceError` at open). Compressed files are read as such
(:mod:`bloomwise.cache.traces.files`); ``-`` is standard input. Every method is replayed by the caller's choice:
readers pass all of them on, with ``method`` set (caches replay ``GET``).

:class:`BaseTraceReader` is what every reader has (the counts, iteration, closing); libCacheSim's csv and binary
forms have their readers in :mod:`bloomwise.cache.traces.cachesim`.
"""
from __future__ import annotations

from typing import Iterator

from bloomwise.cache.traces.files import display_name, open_binary
from bloomwise.cache.traces.lines import BAD_LINE, LineBlocks
from bloomwise.cache.traces.records import MAX_REPORTED_MALFORMED, Request, TraceError, new_request

__all__ = ["BaseTraceReader", "TraceReader", "read_squid_log", "read_plain_trace", "FORMATS", "DETECTION_LINES"]

#: How many request lines (not blank, not ``#``) at the start of a file are examined to detect its format; if none
#: of them parses, the file is not a trace.
DETECTION_LINES = 100
#: The text formats this module reads.
FORMATS = ("squid", "plain")
_SQUID_FIELDS = "time elapsed client code/status bytes method URL user hierarchy/peer type"
_PLAIN_FIELDS = "timestamp client url size [method]"
_INF = float("inf")


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
    return new_request(Request, (timestamp, fields[2], fields[5], fields[6], int(size), line, int(elapsed), code,
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
    return new_request(Request, (timestamp, fields[1], fields[4] if n == 5 else "GET", fields[2], int(size), line,
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
# Readers

class BaseTraceReader:
    """What every trace reader has: counts, the first malformed records with their reasons, iteration, closing.

    Attributes: ``path``, ``format``, ``strict``, ``has_clients`` (False when the format has no client field:
    every request's client is ``"-"``), ``lines`` (lines or records read so far), ``requests`` (requests
    returned), ``skipped`` (blank and comment lines, headers), ``malformed`` (count) and ``malformed_lines`` (the
    first :data:`~bloomwise.cache.traces.records.MAX_REPORTED_MALFORMED` ``(number, reason)`` pairs). Use it as a
    context manager (or call :meth:`close`) to close a file it opened.
    """

    format: str = ""
    has_clients: bool = True

    def __init__(self, source, strict: bool):
        self.path = display_name(source)
        self.strict = bool(strict)
        self.lines = self.requests = self.skipped = self.malformed = 0
        self.malformed_lines: list[tuple[int, str]] = []
        self._stream, self._owned = None, False
        self._iterator: Iterator[Request] = iter(())

    def note_malformed(self, number: int, reason: str) -> None:
        """Count line (or record) ``number`` as malformed for ``reason``; with ``strict``, raise TraceError."""
        self.lines = number
        if self.strict:
            raise TraceError(self.path, number, reason)
        self.malformed += 1
        if len(self.malformed_lines) < MAX_REPORTED_MALFORMED:
            self.malformed_lines.append((number, reason))

    def __iter__(self) -> Iterator[Request]:
        return self._iterator

    def __next__(self) -> Request:
        return next(self._iterator)

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and self._owned:
            stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.path!r} format={self.format} lines={self.lines} "
                f"requests={self.requests} malformed={self.malformed}>")


class TraceReader(BaseTraceReader):
    """An iterator of :class:`Request` over a Squid or plain trace file, streaming (see :class:`BaseTraceReader`
    for the attributes; ``format`` is ``"squid"`` or ``"plain"``).
    """

    def __init__(self, source, *, format: str = "auto", strict: bool = False):
        if format not in ("auto",) + FORMATS:
            raise ValueError(f"format must be 'auto', 'squid' or 'plain', got {format!r}")
        super().__init__(source, strict)
        self._stream, self._owned = open_binary(source, "rb")
        try:
            self._blocks = LineBlocks(self._stream, self.path)
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
            in_block = sum(1 for text in lines if text.strip() and not text.lstrip().startswith("#") or text == BAD_LINE)
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
                if text == BAD_LINE:
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
                elif text == BAD_LINE:
                    self.note_malformed(number, reasons[number - first])
                elif not fields or fields[0].startswith("#"):
                    self.skipped += 1
                else:
                    self.note_malformed(number, explain(fields))
            self.lines = number
        self.close()


def read_squid_log(path_or_file, *, strict: bool = False) -> TraceReader:
    """Stream the requests of a Squid native access.log (a path, ``-`` for stdin, or a binary/text file object).

    :raises FileNotFoundError: no such file.
    :raises TraceError: none of the first lines is a Squid line; with ``strict=True``, any malformed line.
    """
    return TraceReader(path_or_file, format="squid", strict=strict)


def read_plain_trace(path_or_file, *, strict: bool = False) -> TraceReader:
    """Stream the requests of a plain ``timestamp client url size [method]`` trace (as :func:`read_squid_log`)."""
    return TraceReader(path_or_file, format="plain", strict=strict)
