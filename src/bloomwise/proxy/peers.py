"""One peer as a network proxy sees it: its summary pulls, its health, its measured round-trip time.

A :class:`PeerLink` keeps one peer's summary current in the :class:`~bloomwise.cache.node.CacheNode`:

- every ``summary_interval`` seconds, and at once when the peer notifies a new version, it asks
  ``GET /bloomwise/summary?since=V&origin=O`` (V, O: the version and instance id held) and applies the answer
  (a delta, the whole summary, or 304 when nothing changed); a delta that does not fit (``SummaryGap``: the peer
  restarted, or a version was missed) makes it fetch the whole summary;
- a peer that does not serve ``/bloomwise/summary`` but serves ``/squid-internal-periodic/store_digest`` is a Squid:
  its Cache Digest is fetched instead and used for routing (:class:`~bloomwise.cache.squid_digest.SquidDigestSummary`);
- a summary or digest that fails its checks (``FormatError``) is rejected and logged; the one held stays in use;
  after ``INVALID_SUMMARIES_BEFORE_UNHEALTHY`` in a row the peer is marked unhealthy (a valid one ends the run);
- a failure (refused, timed out, an answer that is not HTTP) marks the peer unhealthy: routing skips it; it is
  tried again after ``retry_after`` seconds, doubling up to ``max_retry_after``; a successful pull makes it
  healthy again.

The peer's host name is resolved when the link starts and again every ``ADDRESS_REFRESH_SECONDS``: requests
from those addresses may use the peer endpoints and ask peer queries (:mod:`bloomwise.proxy.access`).

The round-trip time is the time to the answer's status line, smoothed (EWMA, weight 1/4, as TCP's SRTT uses
1/8); it is the peer's cost tau in the ``paradox`` policy (in milliseconds, like the origin's cost omega).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional
from urllib.parse import urlsplit

from bloomwise.cache.squid_digest import DIGEST_CONTENT_TYPE, DIGEST_PATH, SquidDigestSummary
from bloomwise.cache.summary import SummaryGap
from bloomwise.errors import FormatError
from bloomwise.proxy.access import normalize_address, resolve

__all__ = ["PeerLink", "PeerFailure", "SUMMARY_CONTENT_TYPE"]

log = logging.getLogger("bloomwise.proxy")

SUMMARY_CONTENT_TYPE = "application/x-bloomwise-summary"
RTT_WEIGHT = 0.25
#: seconds between two resolutions of a peer's host name (its addresses may use the peer endpoints)
ADDRESS_REFRESH_SECONDS = 60.0
#: consecutive summaries (or digests) failing their checks after which a peer is marked unhealthy
INVALID_SUMMARIES_BEFORE_UNHEALTHY = 3


class PeerFailure(Exception):
    """A peer did not answer, answered too late, or answered something that is not a valid reply."""


class PeerLink:
    """The link from one proxy to one peer (identified by its base URL, ``http://host:port``)."""

    def __init__(self, proxy, url: str):
        self.proxy = proxy
        self.url = url.rstrip("/")
        #: the access log's hierarchy field of a remote hit it served (Squid's peer code and host)
        self.hierarchy = f"SIBLING_HIT/{urlsplit(self.url).hostname}"
        self.kind: Optional[str] = None       # "bloomwise" or "squid", once known
        self.rtt_ms: Optional[float] = None
        self.healthy = True
        self.failures = 0
        self.consecutive_failures = 0
        self.retry_at = 0.0
        self.last_error: Optional[str] = None
        self.summaries_rejected = 0
        self.consecutive_rejections = 0
        self.summary_pulls = 0
        self.digest_version = 0
        self.addresses: frozenset = frozenset()
        self._addresses_at = float("-inf")
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: Optional[asyncio.Task] = None

    # -- health and cost --------------------------------------------------------------------------------------
    def note_rtt(self, seconds: float) -> None:
        ms = seconds * 1000.0
        self.rtt_ms = ms if self.rtt_ms is None else (1 - RTT_WEIGHT) * self.rtt_ms + RTT_WEIGHT * ms
        self.proxy.node.set_peer_cost(self.url, max(self.rtt_ms, 0.001))

    def note_success(self) -> None:
        if not self.healthy:
            log.info("%s: peer %s is healthy again", self.proxy.name, self.url)
            self.healthy = True
            self.proxy.node.set_peer_health(self.url, True)
        self.consecutive_failures = 0

    def note_failure(self, reason: str) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        self.last_error = reason
        config = self.proxy.config
        delay = min(config.max_retry_after, config.retry_after * 2 ** (self.consecutive_failures - 1))
        self.retry_at = time.monotonic() + delay
        if self.healthy:  # a peer never reached yet (still starting) is only worth an info line
            log.log(logging.WARNING if self.kind else logging.INFO, "%s: peer %s marked unhealthy (%s); retry in "
                    "%.1f s", self.proxy.name, self.url, reason, delay)
        self.healthy = False
        self.proxy.node.set_peer_health(self.url, False)
        self._wake.set()  # let the pull loop schedule the retry

    def has_address(self, address: Optional[str]) -> bool:
        """Whether a request from ``address`` comes from this peer (its host name as last resolved)."""
        if not address or not self.addresses:
            return False
        try:
            return normalize_address(address) in self.addresses
        except ValueError:
            return False

    async def refresh_addresses(self) -> None:
        parts = urlsplit(self.url)
        found = await resolve(parts.hostname or "", parts.port or 80)
        addresses = set()
        for text in found:
            try:
                addresses.add(normalize_address(text))
            except ValueError:
                continue
        if addresses:  # a failed resolution keeps the addresses known
            self.addresses = frozenset(addresses)
        self._addresses_at = time.monotonic()

    def notify(self) -> None:
        """The peer said it has a new summary version (or that it started): pull now, even if it was unhealthy."""
        self.retry_at = 0.0
        self._wake.set()

    def stats(self) -> dict:
        held = self.proxy.node.peer(self.url).summary
        origin = getattr(held, "origin", None)
        return {"kind": self.kind, "summary_origin": None if origin is None else f"{origin:016x}", "rtt_ms": None if self.rtt_ms is None else round(self.rtt_ms, 3),
                "healthy": self.healthy, "failures": self.failures, "last_error": self.last_error,
                "summaries_rejected": self.summaries_rejected, "summary_pulls": self.summary_pulls}

    # -- the pull loop ----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"peer {self.url}")

    async def stop(self) -> None:
        """End the pull loop: it sees the flag at its next wake-up (now); cancelled if it does not end in 5 s."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            done, _ = await asyncio.wait({self._task}, timeout=5.0)
            if not done:
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=5.0)

    async def _run(self) -> None:
        # The loop ends on a flag, not by cancellation: in Python < 3.12, asyncio.wait_for may turn a
        # cancellation that coincides with its time-out into a TimeoutError, and the loop would go on.
        interval = self.proxy.config.summary_interval
        while not self._stopping:
            if time.monotonic() - self._addresses_at >= ADDRESS_REFRESH_SECONDS:
                await self.refresh_addresses()
            if self.healthy or time.monotonic() >= self.retry_at:
                try:
                    await self.pull()
                except PeerFailure as exc:
                    self.note_failure(str(exc))
                except Exception:  # a bug must not kill the loop; it is logged and retried later
                    log.exception("%s: pulling the summary of %s failed", self.proxy.name, self.url)
            wait = interval if self.healthy else max(0.05, self.retry_at - time.monotonic())
            if self._stopping:
                break
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=wait)
            except asyncio.TimeoutError:
                pass

    async def _get(self, path: str, accept: str):
        """GET path from the peer (origin-form, the peer answers itself): (status, content type, body, seconds)."""
        import aiohttp

        config = self.proxy.config
        started = time.perf_counter()
        try:
            async with self.proxy.session.get(
                    self.url + path, headers={"Accept": accept},
                    timeout=aiohttp.ClientTimeout(total=config.summary_timeout)) as reply:
                elapsed = time.perf_counter() - started
                if reply.status != 200:
                    return reply.status, reply.content_type, b"", elapsed
                length = reply.content_length
                if length is not None and length > config.max_summary_bytes:
                    raise FormatError(f"summary of {length} bytes exceeds the limit of "
                                      f"{config.max_summary_bytes} bytes")
                body = await _read_limited(reply, config.max_summary_bytes)
                return reply.status, reply.content_type, body, elapsed
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            raise PeerFailure(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None

    async def pull(self) -> None:
        """Bring this peer's summary (or Squid digest) up to date once."""
        if self.kind != "squid":
            state = self.proxy.node.peer(self.url)
            held = state.summary
            path = "/bloomwise/summary"
            if held is not None and getattr(held, "version", None) is not None and held.origin is not None:
                path += f"?since={held.version}&origin={held.origin:016x}"
            try:
                status, ctype, body, elapsed = await self._get(path, SUMMARY_CONTENT_TYPE)
            except FormatError as exc:
                self._reject(exc)
                return
            if status == 200 and ctype == SUMMARY_CONTENT_TYPE:
                self.kind = "bloomwise"
                self.note_rtt(elapsed)
                if self._apply(body):
                    self.note_success()
                return
            if status == 304:
                self.kind = "bloomwise"
                self.note_rtt(elapsed)
                self.note_success()
                return
            if self.kind == "bloomwise":
                raise PeerFailure(f"GET /bloomwise/summary answered {status} {ctype}")
        await self._pull_digest()

    def _apply(self, body: bytes) -> bool:
        """Apply a pulled summary; False when it was rejected."""
        self.summary_pulls += 1
        try:
            self.proxy.node.receive_summary(self.url, body)
        except SummaryGap as exc:
            log.info("%s: summary of %s does not follow the one held (%s): fetching the whole summary",
                     self.proxy.name, self.url, exc)
            self.proxy.node.peer(self.url).summary = None
            self._wake.set()
        except FormatError as exc:
            self._reject(exc)
            return False
        self.consecutive_rejections = 0
        return True

    def _reject(self, exc: Exception) -> None:
        """A summary or digest failed its checks: keep the one held; after several in a row, the peer is
        unhealthy (routing skips it; it is retried with the usual back-off)."""
        self.summaries_rejected += 1
        self.consecutive_rejections += 1
        self.proxy.counters["summaries_rejected"] += 1
        log.warning("%s: rejected the summary of %s: %s (the previous one stays in use)",
                    self.proxy.name, self.url, exc)
        if self.consecutive_rejections >= INVALID_SUMMARIES_BEFORE_UNHEALTHY:
            self.note_failure(f"{self.consecutive_rejections} invalid summaries in a row: {exc}")

    async def _pull_digest(self) -> None:
        try:
            status, ctype, body, elapsed = await self._get(DIGEST_PATH, DIGEST_CONTENT_TYPE)
        except FormatError as exc:
            self._reject(exc)
            return
        if status != 200:
            if self.kind is None:  # neither kind answered: a peer that is not (yet) a cache
                raise PeerFailure(f"serves neither /bloomwise/summary nor a Squid digest (status {status})")
            raise PeerFailure(f"GET {DIGEST_PATH} answered {status}")
        self.kind = "squid"
        self.note_rtt(elapsed)
        self.summary_pulls += 1
        try:
            summary = SquidDigestSummary.from_bytes(body, version=self.digest_version + 1,
                                                    max_mask_size=self.proxy.config.max_summary_bytes)
        except FormatError as exc:
            self._reject(exc)
            return
        self.consecutive_rejections = 0
        self.note_success()
        self.digest_version += 1
        self.proxy.node.peer(self.url).summary = summary
        node = self.proxy.node
        node.summaries_in += 1
        node.summary_bytes_in += len(body)


async def _read_limited(reply, limit: int) -> bytes:
    chunks, total = [], 0
    async for chunk in reply.content.iter_chunked(65536):
        total += len(chunk)
        if total > limit:
            raise FormatError(f"summary exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
