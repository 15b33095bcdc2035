"""Trace records: :class:`Request`, the cache key of a request, :class:`TraceError`, and the bookkeeping every
reader shares (how many malformed records it keeps with their reasons)."""
from __future__ import annotations

from typing import NamedTuple

from bloomwise.errors import FormatError

__all__ = ["Request", "request_key", "TraceError", "MAX_REPORTED_MALFORMED", "NO_SQUID_FIELDS", "new_request",
           "NO_CLIENT"]

#: How many (record number, reason) pairs a reader keeps in ``malformed_lines`` (all are counted in ``malformed``).
MAX_REPORTED_MALFORMED = 100
#: The client of a request read from a trace that has no client field (libCacheSim's csv and binary forms).
NO_CLIENT = "-"


class Request(NamedTuple):
    """One request of a trace.

    The first six fields are what a cache replays; the rest are Squid's, None for other sources.
    """
    timestamp: float          #: seconds since the epoch
    client: str               #: client address or name ("-" when the trace has no client field)
    method: str               #: HTTP method as logged (caches replay GET)
    url: str                  #: the URL, or the object id of a libCacheSim trace
    size: int                 #: reply size in bytes
    line: int = 0             #: line (or record) number in the file (1-based), 0 for a synthetic request
    elapsed_ms: int | None = None
    squid_code: str | None = None     #: e.g. TCP_MISS, TCP_HIT
    status: int | None = None         #: HTTP status, e.g. 200
    user: str | None = None
    hierarchy: str | None = None      #: e.g. HIER_DIRECT, CD_SIBLING_HIT
    peer: str | None = None           #: the hierarchy field's peer or origin address, "-" when none
    content_type: str | None = None


#: The seven Squid-only fields of a record from any other source.
NO_SQUID_FIELDS = (None,) * 7
#: ``new_request(Request, fields)``: a Request from its 13 fields in order, without the keyword handling of
#: ``Request(...)`` (the readers' and the generator's fast path).
new_request = tuple.__new__


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
