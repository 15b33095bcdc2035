"""Sweeps of ``bloomwise simulate``: one replay of every policy per point, serially or as Dask tasks.

A point is a complete set of :class:`~bloomwise.cache.simulation.SimulationConfig` fields. Its task receives a
:class:`SweepTrace`, a small picklable *description* of the trace (a synthetic trace's parameters, or a file's path
and reading options), never the requests: each worker regenerates or re-reads the trace itself, so the workers must
see the same files as the caller (a ``LocalCluster``, or a cluster sharing the file system). Every replay is
deterministic for its configuration and seed, so the results of a distributed sweep equal the serial ones except
the wall-clock ``seconds``; they are returned in the order of the points whatever the order in which tasks finish.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import NamedTuple, Optional, Sequence

from bloomwise.cache.fast_replay import CsvTrace, OracleGeneralTrace
from bloomwise.cache.simulation import SimulationConfig, estimate_mean_size, simulate
from bloomwise.cache.traces import SyntheticTrace, assigned_requests, format_from_name, open_trace

__all__ = ["SweepTrace", "PointOutcome", "run_point", "run_sweep"]

#: the mean document size assumed when a trace gives no estimate (an empty trace)
FALLBACK_MEAN_DOCUMENT_SIZE = 8192
#: the malformed records a point reports by number and reason
MAX_REPORTED_LINES = 5


class PointOutcome(NamedTuple):
    """One point's PolicyResults (in the order of the policies) and the malformed records its first replay of a
    trace file skipped: their count and the first (line or record number, reason) pairs (0 and [] for a synthetic
    trace)."""

    results: list
    malformed: int
    malformed_lines: list


@dataclasses.dataclass(frozen=True)
class SweepTrace:
    """How to obtain a point's requests: ``synthetic`` (the SyntheticTrace keyword arguments but ``num_proxies``)
    or ``path`` (a file every worker can read) with its reading options; ``mean_document_size`` None = estimated
    from the trace's first 10,000 requests."""

    synthetic: Optional[dict] = None
    path: Optional[str] = None
    format: str = "auto"
    strict: bool = False
    csv_columns: Optional[dict] = None
    assign: str = "hash-client"
    seed: int = 0
    limit: Optional[int] = None
    mean_document_size: Optional[int] = None

    def __post_init__(self):
        if (self.synthetic is None) == (self.path is None):
            raise ValueError("SweepTrace needs exactly one of synthetic and path")
        if self.path == "-":
            raise ValueError("a sweep cannot replay standard input (it is read once): give a file")

    def source(self, num_proxies: int, readers: Optional[list] = None):
        """(requests source for :func:`simulate`, mean document size) for ``num_proxies`` proxies; the trace
        readers the source opens are appended to ``readers`` (for their malformed-record counts)."""
        readers = [] if readers is None else readers
        if self.synthetic is not None:
            trace = SyntheticTrace(num_proxies=num_proxies, **self.synthetic)
            return trace, self.mean_document_size or trace.expected_size
        if self.assign != "hash-client" and (self.format == "oracle-general" or (
                self.format == "auto" and self.csv_columns is None
                and format_from_name(self.path) == "oracle-general")):
            # read straight into arrays by the compiled engine; ``reader`` is the last reader it opened
            source = OracleGeneralTrace(self.path, self.assign, num_proxies, seed=self.seed, limit=self.limit,
                                        strict=self.strict)
        elif self.format == "csv" or self.format == "auto" and (
                self.csv_columns is not None or format_from_name(self.path) == "csv"):
            # parsed into arrays by the compiled reader for the compiled engine, read as Requests by the Python one
            source = CsvTrace(self.path, self.assign, num_proxies, seed=self.seed, limit=self.limit,
                              strict=self.strict, columns=self.csv_columns)
        else:
            def source():
                reader = open_trace(self.path, format=self.format, strict=self.strict, csv_columns=self.csv_columns)
                readers.append(reader)
                return assigned_requests(reader, self.assign, num_proxies, seed=self.seed, limit=self.limit)
        if self.mean_document_size is not None:
            return source, self.mean_document_size
        first = open_trace(self.path, format=self.format, csv_columns=self.csv_columns)
        try:
            return source, estimate_mean_size(itertools.islice(first, self.limit))
        finally:
            first.close()


def run_point(trace: SweepTrace, fields: dict, policies: Sequence[str], engine: str = "auto") -> PointOutcome:
    """Every policy replayed at one point (``fields``: SimulationConfig fields but ``mean_document_size``)."""
    readers = []
    source, mean_size = trace.source(fields["num_proxies"], readers)
    config = SimulationConfig(**fields, mean_document_size=mean_size or FALLBACK_MEAN_DOCUMENT_SIZE)
    results = simulate(source, policies, config, engine=engine)
    if isinstance(source, (OracleGeneralTrace, CsvTrace)):
        readers.append(source.reader)
    first = next((reader for reader in readers if reader is not None), None)
    if first is None:
        return PointOutcome(results, 0, [])
    return PointOutcome(results, first.malformed, list(first.malformed_lines[:MAX_REPORTED_LINES]))


def run_sweep(trace: SweepTrace, points: Sequence[dict], policies: Sequence[str], *, engine: str = "auto",
              client=None) -> list:
    """One :class:`PointOutcome` per point, in the order of ``points``.

    :param client: None to run the points one after another here, or a ``distributed.Client``: one task per
        point (pure=False: a re-run replays again), gathered in the order of ``points``. A task's exception is
        raised here.
    """
    policies = list(policies)
    if client is None:
        return [run_point(trace, fields, policies, engine) for fields in points]
    futures = [client.submit(run_point, trace, dict(fields), policies, engine, pure=False) for fields in points]
    return client.gather(futures)
