"""Writers of traces: Squid's native access.log and plain ``timestamp client url size [method]`` lines.

A trace read back from what was written is the same trace: Squid's format keeps milliseconds, the plain format
keeps every timestamp exactly. Writers refuse, naming the request and the field, what a format cannot hold (a space
in a URL, a negative size, a non-finite time). Compression follows the file's extension
(:mod:`bloomwise.cache.traces.files`).
"""
from __future__ import annotations

import io
from typing import Iterable

from bloomwise._checks import check_non_negative, check_token
from bloomwise.cache.traces.files import open_binary
from bloomwise.cache.traces.records import NO_SQUID_FIELDS, Request

__all__ = ["write_squid_log", "write_plain_trace"]

_INF = float("inf")


def _checked(request, index: int) -> Request:
    """The request with its fields checked (the slow path: names the first field the formats cannot hold)."""
    if not isinstance(request, Request):
        request = Request(*request)
    where = f"request {index}: "  # every message names the request
    timestamp = check_non_negative(f"{where}timestamp", request.timestamp, integer=False)
    size = check_non_negative(f"{where}size", request.size, integer=True)
    for what in ("client", "method", "url"):
        check_token(f"{where}{what}", getattr(request, what))
    optional = {}
    for what in ("user", "peer", "content_type", "squid_code", "hierarchy"):
        value = getattr(request, what)
        if value is not None:
            check_token(f"{where}{what}", value)
            if what in ("squid_code", "hierarchy") and "/" in value:
                raise ValueError(f"{where}{what} must not contain '/', got {value!r}")
    if request.elapsed_ms is not None:
        optional["elapsed_ms"] = check_non_negative(f"{where}elapsed_ms", request.elapsed_ms, integer=True)
    if request.status is not None:
        optional["status"] = check_non_negative(f"{where}status", request.status, integer=True, upper=999)
    return request._replace(timestamp=timestamp, size=size, **optional)


def _write_lines(lines: Iterable[str], file) -> None:
    stream, owned = open_binary(file, "wb")
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
            if (type(request) is Request and request[6:] == NO_SQUID_FIELDS and type(request[0]) is float
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


