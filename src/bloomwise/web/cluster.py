"""A cluster's live state: the addresses of running bloomwise proxies and their ``GET /bloomwise/stats``.

Each proxy answers ``GET /bloomwise/stats`` with a JSON object: its counters (``requests``, ``local_hits``,
``remote_hits``, ``false_hits``, ``false_misses``, ``peer_queries``, ``origin_fetches``, ``summary_bytes_out``,
``summary_bytes_in``, ``peer_queries_served``), ``name``, ``listen``, ``uptime_seconds``, ``hit_ratio``, and
``peers``: ``{peer_id: {summary_version, summary_age_seconds, summary_bytes, cost, healthy, rtt_ms}}``; and, from
``bloomwise proxy``, ``policy``, ``cache`` (``documents``, ``used_bytes``, ``capacity_bytes``), ``summary``
(``version``, ``kind``), and per peer ``kind``, ``failures``, ``last_error``.

What a proxy sends is untrusted: the body is read up to :data:`MAX_STATS_BYTES`, must be a JSON object, and only
the known fields are kept, each checked for its type (a bad field becomes None and is listed in ``problems``).
The page shows the values as text, never as HTML.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import re
import time
from typing import Optional, Sequence

__all__ = ["parse_address", "parse_addresses", "check_stats", "fetch_all", "totals", "MAX_PROXIES", "STATS_PATH"]

STATS_PATH = "/bloomwise/stats"
MAX_PROXIES = 32
MAX_STATS_BYTES = 1 << 20
MAX_PEERS = 256
TIMEOUT_SECONDS = 3.0

COUNTERS = ("requests", "local_hits", "remote_hits", "false_hits", "false_misses", "peer_queries",
            "origin_fetches", "summary_bytes_out", "summary_bytes_in", "peer_queries_served")
_PEER_NUMBERS = ("summary_version", "summary_age_seconds", "summary_bytes", "cost", "rtt_ms", "failures")
_PEER_TEXTS = ("kind", "last_error")
_CACHE_NUMBERS = ("documents", "used_bytes", "capacity_bytes")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_ADDRESS = re.compile(r"^(?:http://)?(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:/\[\]]+)):(?P<port>\d{1,5})/?$")


def parse_address(text: str) -> str:
    """``host:port``, ``[v6]:port`` or ``http://host:port`` -> the normalised ``host:port`` (``[v6]:port``).

    >>> parse_address("127.0.0.1:3128"), parse_address("http://[::1]:8080/"), parse_address("proxy-1:80")
    ('127.0.0.1:3128', '[::1]:8080', 'proxy-1:80')
    >>> parse_address("localhost")
    Traceback (most recent call last):
    ...
    ValueError: proxy address 'localhost' is not host:port (examples: 127.0.0.1:3128, [::1]:8080, proxy-1:3128)
    """
    raw = str(text).strip()
    example = "(examples: 127.0.0.1:3128, [::1]:8080, proxy-1:3128)"
    match = _ADDRESS.match(raw)
    if not match:
        raise ValueError(f"proxy address {raw[:80]!r} is not host:port {example}")
    port = int(match.group("port"))
    if not 1 <= port <= 65535:
        raise ValueError(f"proxy address {raw!r}: port {port} is not between 1 and 65535")
    if match.group("ipv6") is not None:
        try:
            host = ipaddress.IPv6Address(match.group("ipv6")).compressed
        except ValueError:
            raise ValueError(f"proxy address {raw!r}: {match.group('ipv6')!r} is not an IPv6 address") from None
        return f"[{host}]:{port}"
    host = match.group("host")
    if not _HOSTNAME.match(host):
        raise ValueError(f"proxy address {raw!r}: {host!r} is not a host name or IPv4 address {example}")
    return f"{host.lower()}:{port}"


def parse_addresses(texts: Sequence[str]) -> list[str]:
    """Addresses from repeated fields or comma/space separated lists; duplicates dropped, order kept."""
    addresses: list[str] = []
    for text in texts:
        for part in re.split(r"[\s,]+", str(text)):
            if part:
                address = parse_address(part)
                if address not in addresses:
                    addresses.append(address)
    if len(addresses) > MAX_PROXIES:
        raise ValueError(f"{len(addresses)} proxy addresses is more than {MAX_PROXIES}")
    return addresses


def _number(value, problems: list, name: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        problems.append(f"{name} is not a number: {str(value)[:40]!r}")
        return None
    return value


def _short_text(value, problems: list, name: str) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, str):
        problems.append(f"{name} is not text")
        return None
    return value[:200]


def check_stats(data) -> dict:
    """The known fields of one proxy's stats, checked; unknown fields are dropped.

    >>> check_stats({"requests": 10, "local_hits": 4, "name": "p1", "peers": {"p2": {"rtt_ms": 0.4}}})["peers"]
    [{'peer': 'p2', 'summary_version': None, 'summary_age_seconds': None, 'summary_bytes': None, 'cost': None, \
'rtt_ms': 0.4, 'failures': None, 'kind': None, 'last_error': None, 'healthy': None}]
    """
    if not isinstance(data, dict):
        raise ValueError(f"the stats are not a JSON object but {type(data).__name__}")
    problems: list[str] = []
    out: dict = {name: _number(data.get(name), problems, name) for name in COUNTERS}
    out["name"] = _short_text(data.get("name"), problems, "name")
    out["listen"] = _short_text(data.get("listen"), problems, "listen")
    out["policy"] = _short_text(data.get("policy"), problems, "policy")
    out["uptime_seconds"] = _number(data.get("uptime_seconds"), problems, "uptime_seconds")
    cache = data.get("cache") if isinstance(data.get("cache"), dict) else {}
    for name in _CACHE_NUMBERS:
        out[f"cache_{name}"] = _number(cache.get(name), problems, f"cache.{name}")
    summary = data.get("summary") if isinstance(data.get("summary"), dict) else {}
    out["summary_version"] = _number(summary.get("version"), problems, "summary.version")
    out["summary_kind"] = _short_text(summary.get("kind"), problems, "summary.kind")
    ratio = _number(data.get("hit_ratio"), problems, "hit_ratio")
    if ratio is None and out["requests"] and out["requests"] > 0:  # derived when the proxy does not send it
        ratio = ((out["local_hits"] or 0) + (out["remote_hits"] or 0)) / out["requests"]
    if ratio is not None and not 0.0 <= ratio <= 1.0:  # also inf and NaN
        problems.append(f"hit_ratio {ratio!r} is not in [0, 1]")
        ratio = None
    out["hit_ratio"] = ratio
    peers = data.get("peers") or {}
    if not isinstance(peers, dict):
        problems.append("peers is not an object")
        peers = {}
    rows = []
    for peer_id, peer in list(peers.items())[:MAX_PEERS]:
        if not isinstance(peer, dict):
            problems.append(f"peer {str(peer_id)[:40]!r} is not an object")
            continue
        row = {"peer": str(peer_id)[:200]}
        for name in _PEER_NUMBERS:
            row[name] = _number(peer.get(name), problems, f"peers.{peer_id}.{name}")
        for name in _PEER_TEXTS:
            row[name] = _short_text(peer.get(name), problems, f"peers.{peer_id}.{name}")
        healthy = peer.get("healthy")
        row["healthy"] = healthy if isinstance(healthy, bool) else None
        rows.append(row)
    out["peers"] = rows
    out["problems"] = problems[:20]
    return out


async def _read_bounded(stream, limit: int) -> bytes:
    """Up to ``limit`` bytes of the body (a body this long is refused: the allocation stays bounded)."""
    parts, size = [], 0
    while size < limit:
        chunk = await stream.read(limit - size)
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


async def _fetch_one(session, address: str) -> dict:
    import aiohttp

    started = time.monotonic()
    result = {"address": address, "ok": False, "stats": None, "error": None}
    try:
        async with session.get(f"http://{address}{STATS_PATH}", allow_redirects=False) as response:
            body = await _read_bounded(response.content, MAX_STATS_BYTES + 1)
            if response.status != 200:
                result["error"] = f"HTTP {response.status} from {STATS_PATH}"
            elif len(body) > MAX_STATS_BYTES:
                result["error"] = f"the stats are larger than {MAX_STATS_BYTES:,} bytes"
            else:
                result["stats"] = check_stats(json.loads(body.decode("utf-8")))
                result["ok"] = True
    except asyncio.TimeoutError:
        result["error"] = f"no answer within {TIMEOUT_SECONDS:g} s"
    except aiohttp.ClientError as error:
        reason = getattr(error, "os_error", None) or error
        result["error"] = f"cannot reach it: {getattr(reason, 'strerror', None) or str(reason)[:200]}"
    except (UnicodeDecodeError, json.JSONDecodeError):
        result["error"] = "the answer is not JSON"
    except ValueError as error:
        result["error"] = str(error)[:200]
    result["elapsed_ms"] = round((time.monotonic() - started) * 1000.0, 2)
    return result


async def fetch_all(addresses: Sequence[str], session=None) -> list[dict]:
    """``GET /bloomwise/stats`` of every address at once; one entry per address: ok, stats or error, elapsed_ms."""
    import aiohttp

    if session is None:
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as own:
            return list(await asyncio.gather(*(_fetch_one(own, address) for address in addresses)))
    return list(await asyncio.gather(*(_fetch_one(session, address) for address in addresses)))


def totals(results: Sequence[dict]) -> dict:
    """The cluster as a whole, from the proxies that answered: each counter summed, and the hit ratio
    ``(local_hits + remote_hits) / requests`` and the false-hit ratio ``false_hits / peer_queries`` of the sums.

    >>> totals([{"ok": True, "stats": {"requests": 10, "local_hits": 2, "remote_hits": 3, "peer_queries": 4,
    ...                                "false_hits": 1}},
    ...         {"ok": False, "stats": None}])["hit_ratio"]
    0.5
    """
    answered = [result["stats"] for result in results if result.get("ok")]
    out: dict = {"proxies": len(results), "answered": len(answered)}
    for name in COUNTERS:
        out[name] = sum(stats.get(name) or 0 for stats in answered)
    requests, queries = out["requests"], out["peer_queries"]
    out["hit_ratio"] = (out["local_hits"] + out["remote_hits"]) / requests if requests > 0 else None
    out["false_hit_ratio"] = out["false_hits"] / queries if queries > 0 else None
    for name in ("hit_ratio", "false_hit_ratio"):
        if out[name] is not None and not math.isfinite(out[name]):
            out[name] = None
    return out
