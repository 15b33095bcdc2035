"""The proxy's ``/metrics``: Prometheus text exposition (format 0.0.4), written without a client library.

:class:`Histogram` counts latencies in fixed buckets (cumulative on output, as Prometheus expects);
:func:`exposition` turns a proxy's ``stats()`` and its histograms into the text a Prometheus server scrapes::

    # HELP bloomwise_hits_total Client requests served from a cache, by where the document was.
    # TYPE bloomwise_hits_total counter
    bloomwise_hits_total{kind="local"} 120
    bloomwise_hits_total{kind="remote"} 31

>>> h = Histogram((0.01, 0.1))
>>> h.observe(0.005); h.observe(0.05); h.observe(3.0)
>>> print("\\n".join(h.lines("x_seconds", {"kind": "a"})))
x_seconds_bucket{kind="a",le="0.01"} 1
x_seconds_bucket{kind="a",le="0.1"} 2
x_seconds_bucket{kind="a",le="+Inf"} 3
x_seconds_sum{kind="a"} 3.055
x_seconds_count{kind="a"} 3
"""
from __future__ import annotations

import bisect
from typing import Iterable, Mapping, Optional

__all__ = ["Histogram", "LATENCY_BUCKETS", "ProxyMetrics", "exposition", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: upper bounds (seconds) of the latency buckets: 0.5 ms (a local hit on loopback) to 10 s (a slow origin)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: the outcomes of a client request, as the request-duration histogram labels them
REQUEST_OUTCOMES = ("hit", "remote_hit", "miss", "collapsed", "other")


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items()) + "}"


def _number(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


class Histogram:
    """Observations counted in fixed buckets (upper bounds in seconds); ``lines()`` writes them cumulatively."""

    def __init__(self, bounds: Iterable[float] = LATENCY_BUCKETS):
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)   # the last one: above every bound (+Inf)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def lines(self, name: str, labels: Optional[Mapping[str, str]] = None) -> list[str]:
        labels = dict(labels or {})
        out, cumulative = [], 0
        for bound, count in zip(self.bounds + (float("inf"),), self.counts):
            cumulative += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f"{name}_bucket{_labels({**labels, 'le': le})} {cumulative}")
        out.append(f"{name}_sum{_labels(labels)} {round(self.sum, 9)!r}")
        out.append(f"{name}_count{_labels(labels)} {self.count}")
        return out


class ProxyMetrics:
    """The proxy's latency histograms: client requests by outcome, peer queries, origin fetches."""

    def __init__(self):
        self.requests = {outcome: Histogram() for outcome in REQUEST_OUTCOMES}
        self.peer_query = Histogram()
        self.origin_fetch = Histogram()

    def observe(self, what: str, seconds: float) -> None:
        """``what``: ``"peer_query"`` or ``"origin_fetch"``."""
        getattr(self, what).observe(seconds)

    def observe_request(self, outcome: str, seconds: float) -> None:
        self.requests[outcome if outcome in self.requests else "other"].observe(seconds)


class _Writer:
    def __init__(self):
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples) -> None:
        """One metric family: ``samples`` are (labels dict, value) pairs."""
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self.lines.append(f"{name}{_labels(labels)} {_number(value)}")


def exposition(stats: Mapping, metrics: ProxyMetrics) -> str:
    """The Prometheus text of a proxy's ``stats()`` and latency histograms."""
    w = _Writer()
    w.family("bloomwise_http_requests_total", "counter", "HTTP requests received (clients, peers, endpoints).",
             [({}, stats["requests_total"])])
    w.family("bloomwise_requests_total", "counter", "Client GET requests the cache looked up.",
             [({}, stats["requests"])])
    w.family("bloomwise_hits_total", "counter", "Client requests served from a cache, by where the document was "
             "(local: this cache; remote: a peer; collapsed: shared with a concurrent miss for the same URL).",
             [({"kind": "local"}, stats["local_hits"]), ({"kind": "remote"}, stats["remote_hits"]),
              ({"kind": "collapsed"}, stats["collapsed_requests"])])
    w.family("bloomwise_origin_fetches_total", "counter", "Misses fetched from the origin (or the parent).",
             [({}, stats["origin_fetches"])])
    w.family("bloomwise_peer_queries_total", "counter", "Peer queries (only-if-cached), sent by this proxy and "
             "served to its peers.", [({"direction": "sent"}, stats["peer_queries"]),
                                      ({"direction": "served"}, stats["peer_queries_served"])])
    w.family("bloomwise_false_hits_total", "counter", "Peer queries a summary said maybe to, answered with a miss.",
             [({}, stats["false_hits"])])
    w.family("bloomwise_summary_updates_total", "counter", "Summary updates sent to peers (out) and applied (in).",
             [({"direction": "out"}, stats["summaries_out"]), ({"direction": "in"}, stats["summaries_in"])])
    w.family("bloomwise_summary_bytes_total", "counter", "Bytes of summary updates sent and received.",
             [({"direction": "out"}, stats["summary_bytes_out"]), ({"direction": "in"}, stats["summary_bytes_in"])])
    w.family("bloomwise_summaries_rejected_total", "counter", "Peer summaries or digests that failed their checks.",
             [({}, stats["summaries_rejected"])])
    w.family("bloomwise_summary_version", "gauge", "The last summary version this proxy published.",
             [({}, stats["summary"]["version"])])
    w.family("bloomwise_summary_resizes_total", "counter", "Publications that first re-sized the summary to the "
             "documents advertised (their number had drifted past the resize tolerance).",
             [({}, stats["summary"]["resizes"])])
    w.family("bloomwise_summary_bits", "gauge", "Positions (bits or counters) of the summary this proxy publishes.",
             [({}, stats["summary"]["num_cells"])])
    w.family("bloomwise_summary_sized_for_documents", "gauge", "Documents the summary is sized for (its positions "
             "are bits per entry times this).", [({}, stats["summary"]["sized_for_documents"])])
    w.family("bloomwise_cache_documents", "gauge", "Documents cached.", [({}, stats["cache"]["documents"])])
    w.family("bloomwise_cache_bytes", "gauge", "Bytes of documents cached.", [({}, stats["cache"]["used_bytes"])])
    w.family("bloomwise_refused_total", "counter", "Requests refused, by reason.",
             [({"reason": "client"}, stats["clients_refused"]),
              ({"reason": "destination"}, stats["destinations_refused"]),
              ({"reason": "connect"}, stats["connect_refused"])])
    w.family("bloomwise_purges_total", "counter", "Documents removed by PURGE.", [({}, stats["purges"])])
    w.family("bloomwise_header_timeouts_total", "counter", "Connections closed because a request's headers were "
             "not complete in time.", [({}, stats["header_timeouts"])])
    peers = stats["peers"]
    w.family("bloomwise_peer_up", "gauge", "1 if the peer is healthy (routing may ask it), else 0.",
             [({"peer": url}, bool(p["healthy"])) for url, p in peers.items()])
    w.family("bloomwise_peer_rtt_seconds", "gauge", "The peer's smoothed round-trip time (its cost tau).",
             [({"peer": url}, p["rtt_ms"] / 1000.0) for url, p in peers.items() if p.get("rtt_ms") is not None])
    w.family("bloomwise_peer_failures_total", "counter", "Failed pulls and queries of the peer.",
             [({"peer": url}, p.get("failures", 0)) for url, p in peers.items()])
    lines = w.lines
    for name, help_text, histograms in (
            ("bloomwise_request_duration_seconds", "Time to answer a client request, by outcome.",
             [({"outcome": o}, h) for o, h in metrics.requests.items()]),
            ("bloomwise_peer_query_duration_seconds", "Time of a peer query's answer.", [({}, metrics.peer_query)]),
            ("bloomwise_origin_fetch_duration_seconds", "Time to the origin's (or parent's) answer headers.",
             [({}, metrics.origin_fetch)])):
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} histogram")
        for labels, histogram in histograms:
            lines.extend(histogram.lines(name, labels))
    return "\n".join(lines) + "\n"
