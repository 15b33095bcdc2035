"""An experiment of the cache simulator: routing policies replayed at one point or at every point of a sweep, over
one trace, and what it found (``bloomwise simulate`` parses its options into one and prints its outcome).

A point is a complete set of :class:`~bloomwise.cache.simulation.SimulationConfig` fields but the mean document
size. The trace is a :class:`~bloomwise.cache.sweeps.SweepTrace` (a synthetic trace, or a file every replay reads
again), replayed by :func:`~bloomwise.cache.sweeps.run_sweep` here or as Dask tasks, or a stream (standard input),
which can be read once: one point, one policy.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
from typing import Iterator, Optional, Sequence

from bloomwise.cache.simulation import SimulationConfig, estimate_mean_size, simulate
from bloomwise.cache.sweeps import FALLBACK_MEAN_DOCUMENT_SIZE, MAX_REPORTED_LINES, SweepTrace, run_sweep
from bloomwise.cache.traces import assigned_requests, open_trace

__all__ = ["Sweep", "StreamTrace", "ExperimentOutcome", "DaskUnavailable", "run_experiment", "dask_client"]

#: requests of a stream read ahead to estimate the mean document size (then replayed first)
STREAM_ESTIMATE_REQUESTS = 10_000


@dataclasses.dataclass(frozen=True)
class Sweep:
    """The values one setting takes, a point each: ``label`` names it in tables and JSON (``bits-per-entry``),
    ``field`` is its SimulationConfig field (``bits_per_entry``)."""

    label: str
    field: str
    values: tuple

    def points(self, fields: dict) -> list[dict]:
        """The fields of every point: ``fields`` with this setting at each value."""
        return [dict(fields, **{self.field: value}) for value in self.values]


@dataclasses.dataclass(frozen=True)
class StreamTrace(SweepTrace):
    """A trace file read once, ``path`` ``"-"`` for standard input (the reading options of a SweepTrace): one
    point, one policy. ``mean_document_size`` None = estimated from its first 10,000 requests, which are kept and
    replayed first."""

    def __post_init__(self):
        if self.path is None or self.synthetic is not None:
            raise ValueError("StreamTrace needs a path (- for standard input) and no synthetic trace")


@dataclasses.dataclass
class ExperimentOutcome:
    """The PolicyResults of every point (in the order of the points, then of the policies), the sweep value of each
    (None without a sweep), and the malformed records the first replay of a trace file skipped: their count and the
    first (line or record number, reason) pairs."""

    results: list
    labels: list
    malformed: int = 0
    malformed_lines: list = dataclasses.field(default_factory=list)

    @property
    def read_nothing(self) -> bool:
        """No replay read a request (an empty or wholly malformed trace)."""
        return all(result.requests == 0 for result in self.results)

    def to_json(self, sweep: Optional[Sweep] = None):
        """Without a sweep, the list of the results' JSON objects; with one, ``{"sweep": label, "points": [{"value":
        v, "results": [...]}, ...]}``."""
        if sweep is None:
            return [result.to_json() for result in self.results]
        return {"sweep": sweep.label, "points": [
            {"value": value, "results": [r.to_json() for r, v in zip(self.results, self.labels) if v == value]}
            for value in sweep.values]}


class DaskUnavailable(RuntimeError):
    """The Dask scheduler could not be reached or the local cluster could not start."""


def run_experiment(trace, fields: dict, policies: Sequence[str], *, sweep: Optional[Sweep] = None,
                   engine: str = "auto", workers: Optional[int] = None,
                   scheduler: Optional[str] = None) -> ExperimentOutcome:
    """Every policy replayed at every point over ``trace``.

    :param trace: a :class:`SweepTrace`, or a :class:`StreamTrace` (one policy, no sweep: it is read once).
    :param fields: the SimulationConfig fields of the point (of every point but the swept field).
    :param workers: run the points as tasks on a new local Dask cluster of that many processes; ``scheduler``: on
        the cluster at that address (the points run here one after another without either).
    :raises ValueError: a stream with a sweep or more than one policy.
    :raises DaskUnavailable: the local cluster did not start or the scheduler cannot be reached.
    """
    policies = list(policies)
    if isinstance(trace, StreamTrace):
        if sweep is not None or len(policies) > 1:
            raise ValueError("a stream can be replayed only once: give one policy and no sweep")
        return _replay_stream(trace, fields, policies, engine)
    points = [fields] if sweep is None else sweep.points(fields)
    labels = [None] if sweep is None else list(sweep.values)
    with dask_client(workers, scheduler) as client:
        outcomes = run_sweep(trace, points, policies, engine=engine, client=client)
    results, result_labels = [], []
    for label, outcome in zip(labels, outcomes):
        results.extend(outcome.results)
        result_labels.extend([label] * len(outcome.results))
    first = outcomes[0] if outcomes else None
    return ExperimentOutcome(results, result_labels, first.malformed if first else 0,
                             list(first.malformed_lines) if first else [])


def _replay_stream(trace: StreamTrace, fields: dict, policies: list, engine: str) -> ExperimentOutcome:
    """One replay of a stream: the requests the size estimate reads are kept and replayed first, then the rest."""
    reader = open_trace(trace.path, format=trace.format, strict=trace.strict, csv_columns=trace.csv_columns)
    requests = assigned_requests(reader, trace.assign, fields["num_proxies"], seed=trace.seed, limit=trace.limit)
    if trace.mean_document_size is not None:
        source, mean_size = (lambda: requests), trace.mean_document_size
    else:
        head = list(itertools.islice(requests, STREAM_ESTIMATE_REQUESTS))

        def source():
            try:
                yield from head
                yield from requests
            finally:
                requests.close()
        mean_size = estimate_mean_size(head)
    config = SimulationConfig(**fields, mean_document_size=mean_size or FALLBACK_MEAN_DOCUMENT_SIZE)
    results = simulate(source, policies, config, engine=engine)
    return ExperimentOutcome(results, [None] * len(results), reader.malformed,
                             list(reader.malformed_lines[:MAX_REPORTED_LINES]))


@contextlib.contextmanager
def dask_client(workers: Optional[int] = None, scheduler: Optional[str] = None) -> Iterator:
    """None without ``workers`` or ``scheduler``; else a ``distributed.Client`` of a new local cluster of
    ``workers`` processes (one thread each, loopback, no dashboard) or of the scheduler at ``scheduler``, closed
    on exit. DaskUnavailable (saying why, for the caller to name the setting) when it cannot be had."""
    if workers is None and scheduler is None:
        yield None
        return
    import distributed  # the optional dask extra, imported only when asked for

    from bloomwise.dask import local_cluster  # needs the dask extra too

    if workers is not None:
        try:
            cluster = local_cluster(workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                    dashboard_address=None)
        except (OSError, RuntimeError) as error:
            raise DaskUnavailable(f"the local Dask cluster did not start ({error})") from None
        with cluster, distributed.Client(cluster) as client:
            yield client
        return
    try:
        client = distributed.Client(scheduler, timeout=10)
    except (OSError, TimeoutError, ValueError) as error:
        raise DaskUnavailable(f"cannot reach it ({error})") from None
    with client:
        yield client
