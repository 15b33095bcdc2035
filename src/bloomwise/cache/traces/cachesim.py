"""Readers of libCacheSim's trace formats: csv (with a header naming the columns, or columns given by number)
and the oracleGeneral binary form.

These traces come from storage and key-value caches (Twitter's cache clusters, CloudPhysics block I/O): a request
is a time, an object id and a size, with no client and no method. A record becomes a
:class:`~bloomwise.cache.traces.records.Request` with ``url`` the object id (as text), ``method`` ``GET``,
``client`` ``"-"`` (``has_clients`` is False unless a ``client`` column is given: the replay then needs a proxy
assignment, :mod:`bloomwise.cache.traces.assignment`) and ``line`` the record number (1-based).

**csv** (libCacheSim's ``csv`` trace type): one request per line, fields separated by commas (spaces around them
are ignored). The columns are named by a header line (``time,object,size``, or libCacheSim's own
``# time, object, size, next_access_vtime``; :data:`HEADER_NAMES` lists the names understood, e.g. ``obj_id`` and
``lbn`` for the object) or given by number, 1-based: ``{"time": 1, "object": 2, "size": 3}`` (the command line's
``--csv-columns time=1,object=2,size=3``), in which case a first line that is not a record is taken as a header
and skipped. ``object`` and ``size`` are required, ``time`` (seconds, default 0) and ``client`` are optional;
other columns are ignored. Bad lines are counted as the Squid reader counts them (``malformed``,
``malformed_lines``, ``strict``), and a file whose first 100 lines hold no record is not a trace.

**oracleGeneral** (libCacheSim's ``oracleGeneral`` trace type): little-endian records of 24 bytes,
``uint32 time, uint64 object id, uint32 size, int64 next access`` (the 1-based number of the object's next
request, -1 when there is none). A record whose next access is neither -1 nor after the record itself, or beyond
:data:`MAX_NEXT_ACCESS` (no trace has a trillion requests; 8 bytes of text read as a number are far beyond it),
cannot be in such a trace and is malformed, as is a truncated last record. Read 16,384 records at a time.

Files compressed with zstd (``.zst``, how libCacheSim ships its large traces) or gzip, bz2, xz are read as such
(:mod:`bloomwise.cache.traces.files`).
"""
from __future__ import annotations

from typing import Iterator

from bloomwise.cache.traces.files import open_binary, read_errors
from bloomwise.cache.traces.lines import BAD_LINE, LineBlocks
from bloomwise.cache.traces.readers import DETECTION_LINES, BaseTraceReader
from bloomwise.cache.traces.records import NO_CLIENT, Request, TraceError, new_request

__all__ = ["CsvTraceReader", "OracleGeneralReader", "parse_csv_columns", "CSV_FIELDS", "HEADER_NAMES",
           "ORACLE_GENERAL_RECORD_BYTES", "MAX_NEXT_ACCESS"]

#: The fields a csv trace can give, in the order of a Request's.
CSV_FIELDS = ("time", "object", "size", "client")
#: Header names (lower case) understood for each field.
HEADER_NAMES = {
    "time": ("time", "timestamp", "clock_time", "ts"),
    "object": ("object", "obj_id", "object_id", "obj", "key", "id", "url", "lbn", "lba", "block"),
    "size": ("size", "obj_size", "object_size", "bytes", "req_size"),
    "client": ("client", "client_id", "tenant", "tenant_id"),
}
#: The largest next-access number an oracleGeneral record may hold (2**40, about 1.1e12 requests).
MAX_NEXT_ACCESS = 2 ** 40
#: Bytes of one oracleGeneral record.
ORACLE_GENERAL_RECORD_BYTES = 24
_RECORDS_PER_BLOCK = 16384
_MAX_COLUMN = 1000  # a column number beyond this is refused (a record is at most MAX_LINE_BYTES anyway)
_INF = float("inf")


def parse_csv_columns(text: str) -> dict[str, int]:
    """``"time=1,object=2,size=3"`` -> ``{"time": 1, "object": 2, "size": 3}`` (1-based column numbers).

    :raises ValueError: an unknown field, a column that is not a whole number in [1, 1000], a field or column
        given twice, or no ``object`` / ``size``; the message shows the expected form.
    """
    form = f"expected FIELD=COLUMN pairs such as time=1,object=2,size=3 (fields: {', '.join(CSV_FIELDS)})"
    columns: dict[str, int] = {}
    for part in str(text).split(","):
        name, equals, number = (piece.strip() for piece in part.partition("="))
        if not equals or name not in CSV_FIELDS:
            raise ValueError(f"csv columns {text!r}: {part.strip()!r} is not FIELD=COLUMN; {form}")
        if not number.isascii() or not number.isdigit() or not 1 <= int(number) <= _MAX_COLUMN:
            raise ValueError(f"csv columns {text!r}: column {number!r} of {name} must be a whole number in "
                             f"[1, {_MAX_COLUMN}]")
        if name in columns or int(number) in columns.values():
            raise ValueError(f"csv columns {text!r}: {name if name in columns else 'column ' + number} given twice")
        columns[name] = int(number)
    _require_object_and_size(columns, f"csv columns {text!r}")
    return columns


def _require_object_and_size(columns, where: str) -> None:
    missing = [name for name in ("object", "size") if name not in columns]
    if missing:
        raise ValueError(f"{where}: no {' and no '.join(missing)} column (object and size are required)")


def _header_columns(fields: list[str]) -> dict[str, int]:
    columns: dict[str, int] = {}
    for number, name in enumerate(fields, 1):
        for field, names in HEADER_NAMES.items():
            if name.strip().lower() in names and field not in columns:
                columns[field] = number
    return columns


class CsvTraceReader(BaseTraceReader):
    """Stream the requests of a libCacheSim csv trace (see the module docstring).

    :param source: a path (compressed by extension; ``-`` for standard input) or a file object.
    :param columns: 1-based column numbers of ``time``, ``object``, ``size`` (and ``client``), or None to read
        them from the header line.
    :raises TraceError: no header naming the object and size columns when ``columns`` is None; while reading,
        no record among the first :data:`~bloomwise.cache.traces.readers.DETECTION_LINES` lines; with
        ``strict=True``, any malformed line.
    """

    format = "csv"

    def __init__(self, source, *, columns: dict[str, int] | None = None, strict: bool = False):
        if columns is not None:
            columns = dict(columns)
            for name, number in columns.items():
                if name not in CSV_FIELDS or isinstance(number, bool) or not isinstance(number, int) or not (
                        1 <= number <= _MAX_COLUMN):
                    raise ValueError(f"columns must map fields among {', '.join(CSV_FIELDS)} to column numbers in "
                                     f"[1, {_MAX_COLUMN}], got {name!r}: {number!r}")
            _require_object_and_size(columns, "columns")
        super().__init__(source, strict)
        self._stream, self._owned = open_binary(source, "rb")
        try:
            self._blocks = LineBlocks(self._stream, self.path)
            self._first = self._blocks.next() or []
            self._header = None
            if columns is None:
                columns = self._columns_from_header()
        except BaseException:
            self.close()
            raise
        self.columns = columns
        self.has_clients = "client" in columns
        self._iterator = self._generate()

    def _columns_from_header(self) -> dict[str, int]:
        for index, text in enumerate(self._first):
            if text == BAD_LINE or not text.strip():
                continue
            names = text.lstrip().lstrip("#").split(",")
            columns = _header_columns(names)
            if "object" in columns and "size" in columns:
                self._header = index
                return columns
            break
        raise TraceError(self.path, None, "no csv header naming the object and size columns (e.g. "
                                          "'time,object,size'): give the columns by number, e.g. "
                                          "--csv-columns time=1,object=2,size=3")

    def _generate(self) -> Iterator[Request]:
        columns = self.columns
        t_at = columns.get("time", 0) - 1
        o_at, s_at = columns["object"] - 1, columns["size"] - 1
        c_at = columns.get("client", 0) - 1
        needed = max(columns.values())
        number, content, header = 0, 0, self._header
        blocks, lines, reasons = self._blocks, self._first, self._blocks.reasons
        self._first = None
        while lines is not None:
            first = number + 1
            for text in lines:
                number += 1
                if text == BAD_LINE:
                    self.note_malformed(number, reasons[number - first])
                    content += 1
                    continue
                stripped = text.strip()
                if not stripped:
                    self.skipped += 1
                    continue
                if number - 1 == header or (header is None and content == 0 and self.requests == 0
                                            and stripped.startswith("#")):
                    self.skipped += 1  # the header (or a commented first line)
                    header = -1
                    continue
                content += 1
                fields = text.split(",")
                request = None
                if len(fields) >= needed:
                    size, url = fields[s_at].strip(), fields[o_at].strip()
                    stamp = fields[t_at].strip() if t_at >= 0 else "0"
                    if size.isascii() and size.isdigit() and url and " " not in url and "\t" not in url:
                        try:
                            timestamp = float(stamp)
                        except ValueError:
                            timestamp = -1.0
                        client = fields[c_at].strip() if c_at >= 0 else NO_CLIENT
                        if 0.0 <= timestamp < _INF and client and " " not in client:
                            request = new_request(Request, (timestamp, client, "GET", url, int(size), number,
                                                            None, None, None, None, None, None, None))
                if request is not None:
                    self.lines = number
                    self.requests += 1
                    yield request
                elif header is None and content == 1 and self.requests == 0:
                    self.skipped += 1  # a first line that is not a record: a header (columns given by number)
                    header, content = -1, 0
                else:
                    self.note_malformed(number, self._reason(fields, needed))
                    if not self.requests and content >= DETECTION_LINES:
                        raise TraceError(self.path, None,
                                         f"not a trace: none of the first {DETECTION_LINES} lines is a csv record "
                                         f"with columns {self._shown_columns()} (line {self.malformed_lines[0][0]}: "
                                         f"{self.malformed_lines[0][1]})")
            self.lines = number
            lines = blocks.next()
            reasons = blocks.reasons
        self.close()

    def _shown_columns(self) -> str:
        return ",".join(f"{name}={number}" for name, number in sorted(self.columns.items(), key=lambda c: c[1]))

    def _reason(self, fields: list[str], needed: int) -> str:
        if len(fields) < needed:
            return f"expected at least {needed} comma-separated fields ({self._shown_columns()}), found {len(fields)}"
        columns = self.columns
        size, url = fields[columns["size"] - 1].strip(), fields[columns["object"] - 1].strip()
        if not url or " " in url or "\t" in url:
            return f"bad object id {url!r} (expected a non-empty id without spaces)"
        if not (size.isascii() and size.isdigit()):
            return f"bad size {size!r} (expected a whole number of bytes)"
        if "time" in columns:
            stamp = fields[columns["time"] - 1].strip()
            try:
                ok = 0.0 <= float(stamp) < _INF
            except ValueError:
                ok = False
            if not ok:
                return f"bad time {stamp!r} (expected a finite number of seconds >= 0)"
        client = fields[columns["client"] - 1].strip() if "client" in columns else NO_CLIENT
        return f"bad client {client!r} (expected a non-empty name without spaces)"


class OracleGeneralReader(BaseTraceReader):
    """Stream the requests of a libCacheSim oracleGeneral binary trace (see the module docstring).

    ``lines`` counts records. :raises TraceError: a stream that cannot be read (damaged compression), or with
    ``strict=True`` the first malformed record.
    """

    format = "oracle-general"
    has_clients = False

    def __init__(self, source, *, strict: bool = False):
        super().__init__(source, strict)
        self._stream, self._owned = open_binary(source, "rb")
        self._errors = read_errors()
        self._iterator = self._generate()

    def _read(self, nbytes: int) -> bytes:
        """Up to nbytes (fewer only at the end: compressed streams may return short reads)."""
        parts, missing = [], nbytes
        while missing:
            try:
                data = self._stream.read(missing)
            except self._errors as error:
                raise TraceError(self.path, None, f"cannot read: {error}") from error
            if not data:
                break
            parts.append(data)
            missing -= len(data)
        return b"".join(parts)

    def _generate(self) -> Iterator[Request]:
        import numpy as np  # numpy is imported by the readers that decode arrays, not by every trace reader

        record = np.dtype([("time", "<u4"), ("object", "<u8"), ("size", "<u4"), ("next", "<i8")])
        width = ORACLE_GENERAL_RECORD_BYTES
        number = 0
        while True:
            data = self._read(width * _RECORDS_PER_BLOCK)
            whole = len(data) // width
            if whole:
                block = np.frombuffer(data, dtype=record, count=whole)
                numbers = np.arange(number + 1, number + whole + 1, dtype=np.int64)
                nexts = block["next"]
                bad = ((nexts < -1) | ((nexts >= 0) & (nexts <= numbers)) | (nexts > MAX_NEXT_ACCESS)).tolist()
                for at, is_bad, t, obj, size, nxt in zip(numbers.tolist(), bad, block["time"].tolist(),
                                                         block["object"].tolist(), block["size"].tolist(),
                                                         nexts.tolist()):
                    if is_bad:
                        self.note_malformed(at, f"next access {nxt} is neither -1 nor in ({at}, 2**40] "
                                                f"(after this record): not an oracleGeneral record")
                        if not self.requests and self.malformed >= DETECTION_LINES:
                            raise TraceError(self.path, None, f"not an oracleGeneral trace: none of the first "
                                                              f"{DETECTION_LINES} records is valid "
                                                              f"({self.malformed_lines[0][1]})")
                        continue
                    self.lines = at
                    self.requests += 1
                    yield new_request(Request, (float(t), NO_CLIENT, "GET", str(obj), size, at,
                                                None, None, None, None, None, None, None))
                number += whole
                self.lines = number
            if len(data) < width * _RECORDS_PER_BLOCK:
                if len(data) % width:
                    self.note_malformed(number + 1, f"truncated record: {len(data) % width} of {width} bytes at "
                                                    f"the end of the file")
                break
        self.close()
