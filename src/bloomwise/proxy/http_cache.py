"""Which requests a bloomwise proxy may answer from its cache, which responses it may store, and for how long.

A deliberately small subset of RFC 9111 (HTTP Caching), for a *shared* cache:

- Only ``GET`` responses with status 200 are stored (section 3: a cache may store a final response to a method it
  understands as cacheable; other methods pass through, uncached).
- Not stored (section 3, 5.2): a request with ``Cache-Control: no-store`` or an ``Authorization`` header
  (section 3.5: no ``public``/``s-maxage`` exceptions are made); a response with ``no-store``, ``private``
  (section 5.2.2.7, shared caches), ``no-cache`` (section 5.2.2.4: would need revalidation on every use, which this
  proxy does not do), ``Vary`` (section 4.1: secondary keys are not implemented), or ``Set-Cookie`` (not in the
  RFC: a conservative choice, as many shared caches make).
- Freshness (section 4.2.1): ``s-maxage``, else ``max-age``, else ``Expires - Date``; without any of them, the
  heuristic of section 4.2.2 (10% of the time since ``Last-Modified``, at most one day); with none of these the
  response is not stored. A stored response is served while ``age < lifetime`` (age from section 4.2.3,
  simplified: the time since it was stored plus the ``Age`` it arrived with); a stale one is dropped and fetched
  again (no conditional revalidation, section 4.3, is done).
- A request with ``Cache-Control: no-cache`` or ``Pragma: no-cache`` (section 5.2.1.4, 5.4) skips the stored copy
  and fetches; ``max-age=0`` likewise. ``only-if-cached`` (section 5.2.1.7) answers 504 when nothing fresh is
  stored: bloomwise peers use it to ask each other.
- Hop-by-hop headers (RFC 9110 section 7.6.1: ``Connection`` and the fields it names, ``Keep-Alive``,
  ``Proxy-*``, ``TE``, ``Trailer``, ``Transfer-Encoding``, ``Upgrade``) are never forwarded or stored.

>>> request_may_use_cache("GET", {"Cache-Control": "max-age=0"})
False
>>> freshness_lifetime(200, {"Cache-Control": "public, max-age=60, s-maxage=30"})
30.0
>>> response_is_storable("GET", {}, 200, {"Cache-Control": "private, max-age=60"})
False
"""
from __future__ import annotations

import email.utils
import functools
import time
from typing import Mapping, NamedTuple, Optional
from urllib.parse import urlsplit

__all__ = ["cache_control", "request_may_use_cache", "request_allows_storing", "response_is_storable",
           "freshness_lifetime", "is_fresh", "current_age", "lifetime_and_age", "remaining_freshness", "expires_at",
           "end_to_end_headers", "HOP_BY_HOP", "only_if_cached", "TargetParts", "absolute_target", "joined_fields",
           "has_field"]

HOP_BY_HOP = frozenset(h.lower() for h in (
    "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "TE", "Trailer",
    "Transfer-Encoding", "Upgrade"))
_HOP_BY_HOP_AND_LENGTH = HOP_BY_HOP | {"content-length"}
#: The heuristic freshness (RFC 9111 section 4.2.2): this fraction of the time since Last-Modified, capped.
HEURISTIC_FRACTION = 0.1
HEURISTIC_MAX_SECONDS = 86400.0


class TargetParts(NamedTuple):
    """An ``http://`` request target's parts: its host (without brackets), port, ``host[:port]`` as written, and
    path."""
    hostname: str
    port: int
    netloc: str
    path: str


@functools.lru_cache(maxsize=8192)
def absolute_target(target: str) -> Optional[TargetParts]:
    """The parts of an absolute-form ``http://`` target (RFC 9112 section 3.2.2), or None when it is not one (another
    scheme, no host, a bad port). Remembered for the last 8192 targets: a proxy sees the same ones again.

    >>> absolute_target("http://example.com:8080/a?b")
    TargetParts(hostname='example.com', port=8080, netloc='example.com:8080', path='/a')
    """
    try:
        parts = urlsplit(target)
        port = parts.port or 80
    except ValueError:
        return None
    if parts.scheme != "http" or not parts.hostname:
        return None
    return TargetParts(parts.hostname, port, parts.netloc, parts.path)


def _get(headers: Mapping[str, str], name: str) -> Optional[str]:
    value = headers.get(name)
    if value is None:
        lower, length = name.lower(), len(name)
        for k, v in headers.items():
            if len(k) == length and k.lower() == lower:
                return v
    return value


def has_field(headers: Mapping[str, str], name: str) -> bool:
    """Does ``headers`` hold a field ``name`` (in any case)?

    >>> has_field({"date": "Sat, 28 Nov 2026 06:00:00 GMT"}, "Date")
    True
    """
    return _get(headers, name) is not None


def _field_lines(headers: Mapping[str, str], name: str) -> list:
    """Every field line of ``name``: a multi-valued mapping (aiohttp's request and reply headers) keeps each one,
    and a field sent twice means both lines, joined (RFC 9110 section 5.3); a dict holds one."""
    if not isinstance(headers, dict):
        getall = getattr(headers, "getall", None)
        if getall is not None:
            return getall(name, [])
    value = _get(headers, name)
    return [] if value is None else [value]


def joined_fields(headers) -> dict:
    """A multi-valued mapping (aiohttp's), or (name, value) pairs as received, as a dict: a field sent twice is both
    lines joined with ", " (RFC 9110 section 5.3), under the first name as sent; Set-Cookie, which cannot be
    joined, keeps its first line.

    >>> from multidict import CIMultiDict
    >>> joined_fields(CIMultiDict([("Cache-Control", "max-age=60"), ("cache-control", "private"), ("A", "1")]))
    {'Cache-Control': 'max-age=60, private', 'A': '1'}
    """
    out, names = {}, {}
    for name, value in (headers.items() if hasattr(headers, "items") else headers):
        lower = name.lower()
        first = names.get(lower)
        if first is None:
            names[lower] = name
            out[name] = value
        elif lower != "set-cookie":
            out[first] += ", " + value
    return out


def cache_control(headers: Mapping[str, str]) -> dict:
    """The ``Cache-Control`` directives as {name (lower case): value or None}, from every ``Cache-Control`` field.

    >>> cache_control({"cache-control": 'max-age=5, No-Store, private="x"'})
    {'max-age': '5', 'no-store': None, 'private': 'x'}
    """
    out = {}
    for values in _field_lines(headers, "Cache-Control"):
        out.update(_directives(values))
    return out


@functools.lru_cache(maxsize=1024)
def _directives(line: str) -> tuple:
    """One Cache-Control field line's directives, as (name in lower case, value or None) pairs (the same few lines
    come again and again: parsed once)."""
    out = []
    for part in line.split(","):
        name, sep, value = part.strip().partition("=")
        if name:
            out.append((name.strip().lower(), value.strip().strip('"') if sep else None))
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _says_no_store(line: str) -> bool:
    """Does this Cache-Control field line hold ``no-store``?"""
    return any(name == "no-store" for name, _ in _directives(line))


def only_if_cached(headers: Mapping[str, str]) -> bool:
    """True if the request says ``Cache-Control: only-if-cached`` (a peer query)."""
    return "only-if-cached" in cache_control(headers)


def request_may_use_cache(method: str, headers: Mapping[str, str], directives: Optional[dict] = None) -> bool:
    """May this request be answered from the cache (GET, no no-cache / max-age=0 / Pragma: no-cache)?
    ``directives``: ``cache_control(headers)`` when the caller has it already."""
    if method != "GET":
        return False
    cc = cache_control(headers) if directives is None else directives
    if "no-cache" in cc or cc.get("max-age") == "0":
        return False
    if "no-cache" in (_get(headers, "Pragma") or "").lower() and "Cache-Control" not in headers:
        return False
    return True


def request_allows_storing(method: str, headers: Mapping[str, str]) -> bool:
    """May the response to this request be stored (GET, no no-store, no Authorization)?"""
    if method != "GET" or _get(headers, "Authorization") is not None:
        return False
    for line in _field_lines(headers, "Cache-Control"):
        if _says_no_store(line):
            return False
    return True


def _seconds(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    try:
        seconds = int(value)
    except ValueError:
        return None
    return float(seconds) if seconds >= 0 else None


def _http_date(value: Optional[str]) -> Optional[float]:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def freshness_lifetime(status: int, headers: Mapping[str, str], *, now: Optional[float] = None) -> Optional[float]:
    """Seconds a response stays fresh (RFC 9111 section 4.2.1, 4.2.2), or None if nothing says (not storable)."""
    cc = cache_control(headers)
    for directive in ("s-maxage", "max-age"):
        seconds = _seconds(cc.get(directive)) if directive in cc else None
        if seconds is not None:
            return seconds
    expires = _get(headers, "Expires")
    if expires is not None:
        when = _http_date(expires)
        date = _http_date(_get(headers, "Date")) or (time.time() if now is None else now)
        return max(0.0, when - date) if when is not None else 0.0  # an invalid Expires means "already expired"
    last_modified = _http_date(_get(headers, "Last-Modified"))
    if last_modified is not None:
        date = _http_date(_get(headers, "Date")) or (time.time() if now is None else now)
        return min(HEURISTIC_MAX_SECONDS, max(0.0, HEURISTIC_FRACTION * (date - last_modified)))
    return None


def response_is_storable(method: str, request_headers: Mapping[str, str], status: int,
                         headers: Mapping[str, str]) -> bool:
    """May a shared cache store this response (see the module docstring for the rules)?"""
    if status != 200 or not request_allows_storing(method, request_headers):
        return False
    cc = cache_control(headers)
    if "no-store" in cc or "private" in cc or "no-cache" in cc:
        return False
    if _get(headers, "Vary") is not None or _get(headers, "Set-Cookie") is not None:
        return False
    lifetime = freshness_lifetime(status, headers)
    return lifetime is not None and lifetime > 0


def current_age(stored_headers: Mapping[str, str], stored_at: float, *, now: Optional[float] = None) -> float:
    """Seconds since a stored response was generated: the time since it was stored plus the ``Age`` it arrived
    with (RFC 9111 section 4.2.3, simplified)."""
    now = time.time() if now is None else now
    return max(0.0, now - stored_at) + (_seconds(_get(stored_headers, "Age")) or 0.0)


def lifetime_and_age(stored_headers: Mapping[str, str], stored_at: float, *,
                     now: Optional[float] = None) -> tuple[Optional[float], float]:
    """(:func:`freshness_lifetime`, :func:`current_age`) of a stored response: it is fresh while age < lifetime."""
    return freshness_lifetime(200, stored_headers, now=stored_at), current_age(stored_headers, stored_at, now=now)


def remaining_freshness(stored_headers: Mapping[str, str], stored_at: float, *,
                        now: Optional[float] = None) -> Optional[float]:
    """Seconds a stored response stays fresh from ``now`` (lifetime - current age; <= 0 when stale), or None
    when nothing gives it a lifetime.

    >>> remaining_freshness({"Cache-Control": "max-age=60", "Age": "10"}, stored_at=100.0, now=105.0)
    45.0
    """
    lifetime = freshness_lifetime(200, stored_headers, now=stored_at)
    if lifetime is None:
        return None
    return lifetime - current_age(stored_headers, stored_at, now=now)


def expires_at(stored_headers: Mapping[str, str], stored_at: float) -> float:
    """The time (``time.time()`` scale) at which a stored response becomes stale (``stored_at`` if it has no
    lifetime).

    >>> expires_at({"Cache-Control": "max-age=60", "Age": "10"}, stored_at=100.0)
    150.0
    """
    remaining = remaining_freshness(stored_headers, stored_at, now=stored_at)
    return stored_at + (remaining if remaining is not None else 0.0)


def is_fresh(stored_headers: Mapping[str, str], stored_at: float, *, now: Optional[float] = None) -> bool:
    """Is a response stored at ``stored_at`` (with these headers) still fresh now?"""
    remaining = remaining_freshness(stored_headers, stored_at, now=now)
    return remaining is not None and remaining > 0


def end_to_end_headers(headers: Mapping[str, str]) -> dict:
    """The headers without hop-by-hop ones (and without those ``Connection`` names), as a plain dict."""
    connection = _get(headers, "Connection")
    dropped = _HOP_BY_HOP_AND_LENGTH if not connection else _HOP_BY_HOP_AND_LENGTH | {
        t.strip().lower() for t in connection.split(",") if t.strip()}
    return {k: v for k, v in headers.items() if k.lower() not in dropped}
