"""Choosing a reader: :func:`open_trace` and the formats it reads.

``format="auto"`` goes by the file's name first (libCacheSim's conventions: ``*.csv`` is csv, a name containing
``oracleGeneral`` is its binary form, after any compression extension), then by content: the format most of the
first :data:`~bloomwise.cache.traces.readers.DETECTION_LINES` request lines parse as, Squid or plain.
"""
from __future__ import annotations

import os

from bloomwise.cache.traces.cachesim import CsvTraceReader, OracleGeneralReader, parse_csv_columns
from bloomwise.cache.traces.files import compression_extension
from bloomwise.cache.traces.readers import BaseTraceReader, TraceReader

__all__ = ["READ_FORMATS", "format_from_name", "open_trace"]

#: What ``open_trace`` (and ``--format`` when reading) accepts.
READ_FORMATS = ("auto", "squid", "plain", "csv", "oracle-general")


def format_from_name(source) -> str | None:
    """``"csv"`` or ``"oracle-general"`` when a path's name says so (libCacheSim's file names), else None."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    name = os.path.basename(os.fspath(source))
    if compression_extension(name):
        name = os.path.splitext(name)[0]
    if "oraclegeneral" in name.lower():
        return "oracle-general"
    return "csv" if name.lower().endswith(".csv") else None


def open_trace(path, format: str = "auto", strict: bool = False, *,
               csv_columns: dict[str, int] | str | None = None) -> BaseTraceReader:
    """Stream a trace: ``format`` is one of :data:`READ_FORMATS`.

    :param csv_columns: for csv, the 1-based columns (``{"time": 1, "object": 2, "size": 3}`` or the text
        ``"time=1,object=2,size=3"``); None reads them from the header. Given with ``format="auto"``, it means csv.
    :raises ValueError: an unknown format, bad csv columns.
    :raises FileNotFoundError: no such file.
    :raises TraceError: not a trace of that format (see each reader).
    """
    if format not in READ_FORMATS:
        raise ValueError(f"format must be one of {', '.join(READ_FORMATS)}, got {format!r}")
    if isinstance(csv_columns, str):
        csv_columns = parse_csv_columns(csv_columns)
    if format == "auto":
        format = "csv" if csv_columns is not None else format_from_name(path) or "auto"
    if csv_columns is not None and format != "csv":
        raise ValueError(f"csv columns were given for a trace read as {format}")
    if format == "csv":
        return CsvTraceReader(path, columns=csv_columns, strict=strict)
    if format == "oracle-general":
        return OracleGeneralReader(path, strict=strict)
    return TraceReader(path, format=format, strict=strict)
