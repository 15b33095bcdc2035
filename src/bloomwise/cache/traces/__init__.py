"""Request traces for the cache simulator: readers, writers, the client -> proxy mapping, a synthetic workload
and real traces fetched from package registries.

One purpose per module:

- :mod:`~bloomwise.cache.traces.records`: :class:`Request`, :func:`request_key`, :class:`TraceError`;
- :mod:`~bloomwise.cache.traces.files`: opening files, compressed by extension (``.gz .bz2 .xz .lzma .zst``);
- :mod:`~bloomwise.cache.traces.lines`: the lines of a file, a block at a time, in bounded memory;
- :mod:`~bloomwise.cache.traces.readers`: Squid's access.log and plain traces;
- :mod:`~bloomwise.cache.traces.cachesim`: libCacheSim's csv and oracleGeneral binary traces;
- :mod:`~bloomwise.cache.traces.formats`: :func:`open_trace`, which picks the reader;
- :mod:`~bloomwise.cache.traces.writers`: writing Squid and plain traces;
- :mod:`~bloomwise.cache.traces.assignment`: which proxy serves a request (:func:`assign_proxy`, the rules for
  traces without clients);
- :mod:`~bloomwise.cache.traces.synthetic`: :class:`SyntheticTrace`, the seeded synthetic workload;
- :mod:`~bloomwise.cache.traces.fetch`: real traces from PyPI and Debian packages (:func:`fetch`).

>>> request = next(iter(SyntheticTrace(10, num_proxies=2, seed=1)))
>>> request[:5]
(1700000000.022, '10.0.0.10', 'GET', 'http://once.example/1/1', 6797)
>>> request_key(request.method, request.url), assign_proxy(request.client, 2)
('GET http://once.example/1/1', 1)
"""
from bloomwise.cache.traces.assignment import (ASSIGNMENT_RULES, assign_proxy, assigned_requests, check_assignment,
                                               client_to_proxy, random_proxy_draws, stand_in_clients)
from bloomwise.cache.traces.cachesim import CsvTraceReader, OracleGeneralReader, parse_csv_columns
from bloomwise.cache.traces.fetch import REAL_TRACES, FetchError, RealTrace, data_directory, fetch, fetched_path
from bloomwise.cache.traces.formats import READ_FORMATS, format_from_name, open_trace
from bloomwise.cache.traces.lines import MAX_LINE_BYTES
from bloomwise.cache.traces.readers import (DETECTION_LINES, FORMATS, BaseTraceReader, TraceReader, read_plain_trace,
                                            read_squid_log)
from bloomwise.cache.traces.records import MAX_REPORTED_MALFORMED, NO_CLIENT, Request, TraceError, request_key
from bloomwise.cache.traces.synthetic import BODY_MU, BODY_SIGMA, MAX_DOCUMENT_SIZE, TAIL_START, SyntheticTrace
from bloomwise.cache.traces.writers import write_plain_trace, write_squid_log

__all__ = [
    "Request", "request_key", "TraceError", "TraceReader", "BaseTraceReader", "read_squid_log", "read_plain_trace",
    "open_trace", "CsvTraceReader", "OracleGeneralReader", "parse_csv_columns", "READ_FORMATS", "format_from_name",
    "write_squid_log", "write_plain_trace", "assign_proxy", "client_to_proxy", "assigned_requests",
    "stand_in_clients", "random_proxy_draws", "check_assignment", "ASSIGNMENT_RULES",
    "SyntheticTrace", "fetch", "fetched_path", "data_directory",
    "FetchError", "RealTrace", "REAL_TRACES", "NO_CLIENT", "FORMATS",
    "MAX_LINE_BYTES", "MAX_REPORTED_MALFORMED", "DETECTION_LINES", "MAX_DOCUMENT_SIZE",
    "BODY_MU", "BODY_SIGMA", "TAIL_START",
]
