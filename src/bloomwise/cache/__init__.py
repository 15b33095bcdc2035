"""Cooperating web caches that share Bloom-filter summaries: the engine, its traces and its simulation.

``bloomwise.cache.traces``: request records, trace readers and writers (Squid access.log, plain), the client ->
proxy mapping and the synthetic workload generator.
"""
from bloomwise.cache.traces import (
    Request, SyntheticTrace, TraceError, TraceReader, assign_proxy, open_trace, read_plain_trace, read_squid_log,
    request_key, write_plain_trace, write_squid_log,
)

__all__ = [
    "Request", "SyntheticTrace", "TraceError", "TraceReader", "assign_proxy", "open_trace", "read_plain_trace",
    "read_squid_log", "request_key", "write_plain_trace", "write_squid_log",
]
