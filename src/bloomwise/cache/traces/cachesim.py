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
and skipped. Blank lines and lines starting with ``#`` are skipped (counted in ``skipped``). ``object`` and
``size`` are required, ``time`` (seconds, default 0) and ``client`` are optional; other columns are ignored.
Bad lines are counted as the Squid reader counts them (``malformed``, ``malformed_lines``, ``strict``), and a
file whose first 100 lines hold no record is not a trace. :meth:`CsvTraceReader.record_arrays` reads the same
requests as arrays for the compiled replay, parsed by ``_native/trace_reader.pyx`` (plain records) and this
module's own line logic (everything else), so both ways give the same requests and counts.

**oracleGeneral** (libCacheSim's ``oracleGeneral`` trace type): little-endian records of 24 bytes,
``uint32 time, uint64 object id, uint32 size, int64 next access`` (the 1-based number of the object's next
request, -1 when there is none). A record whose next access is neither -1 nor after the record itself, or beyond
:data:`MAX_NEXT_ACCESS` (no trace has a trillion requests; 8 bytes of text read as a number are far beyond it),
cannot be in such a trace and is malformed, as is a truncated last record. Read 16,384 records at a time.

Files compressed with zstd (``.zst``, how libCacheSim ships its large traces) or gzip, bz2, xz are read as such
(:mod:`bloomwise.cache.traces.files`).
"""
from __future__ import annotations

import io
from typing import TYPE_CHECKING, Iterator, NamedTuple

from bloomwise._native.hashes import xxh3
from bloomwise._native.trace_reader import CHUNK_DONE, DEFERRED, LIMIT_REACHED, OUTPUT_FULL, CsvChunkParser
from bloomwise.cache.traces import lines as line_reading  # MAX_LINE_BYTES read when used (tests change it)
from bloomwise.cache.traces.files import open_binary, read_errors
from bloomwise.cache.traces.lines import BAD_LINE, LineBlocks, decode_line
from bloomwise.cache.traces.readers import DETECTION_LINES, BaseTraceReader
from bloomwise.cache.traces.records import NO_CLIENT, Request, TraceError, new_request

if TYPE_CHECKING:  # numpy is imported by the readers that decode arrays, not by every trace reader
    import numpy as np

__all__ = ["CsvTraceReader", "OracleGeneralReader", "parse_csv_columns", "CSV_FIELDS", "HEADER_NAMES",
           "ORACLE_GENERAL_RECORD_BYTES", "MAX_NEXT_ACCESS", "ARRAY_BLOCK", "NAME_BYTES", "CsvArrays"]

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
#: Requests per block of :meth:`CsvTraceReader.record_arrays` (the compiled replay's block).
ARRAY_BLOCK = 65536
#: Bytes of cache-key names per block of ``record_arrays(names=True)`` (at least four longest lines).
NAME_BYTES = 4 << 20


class CsvArrays(NamedTuple):
    """A block of :meth:`CsvTraceReader.record_arrays`: per request, ``keys`` (uint64 XXH3-64, seed 0, of the
    ``url``'s UTF-8 bytes), ``sizes`` (int64), ``times`` (float64), ``client_hashes`` (uint64 XXH3-64 of the
    ``client``; None without a client column) and ``line_numbers`` (int64); with ``names``, the cache keys
    ``"GET " + url`` as UTF-8 bytes one after the other (``names``, uint8; request i's from ``name_offsets[i]`` to
    ``name_offsets[i + 1]``) and ``url_lengths`` (int64, in characters), else None."""

    keys: "np.ndarray"
    sizes: "np.ndarray"
    times: "np.ndarray"
    client_hashes: "np.ndarray | None"
    line_numbers: "np.ndarray"
    names: "np.ndarray | None" = None
    name_offsets: "np.ndarray | None" = None
    url_lengths: "np.ndarray | None" = None


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
            self._first_chunk = self._blocks.next_chunk() or (None, False)  # for record_arrays
            self._first = [] if self._first_chunk[0] is None else self._blocks.split_chunk(*self._first_chunk)
            self._header = None  # index of the header line (-1 once passed; None: none found, columns by number)
            if columns is None:
                columns = self._columns_from_header()
        except BaseException:
            self.close()
            raise
        self.columns = columns
        self.has_clients = "client" in columns
        self._time_at, self._client_at = columns.get("time", 0) - 1, columns.get("client", 0) - 1
        self._object_at, self._size_at = columns["object"] - 1, columns["size"] - 1
        self._needed = max(columns.values())
        self._content = 0  # lines that are neither blank, comment nor header, so far
        self._lines_seen = 0  # record_arrays: lines taken so far
        self._iterator = self._generate()

    def _columns_from_header(self) -> dict[str, int]:
        for index, text in enumerate(self._first):  # the header: the first line naming the columns
            stripped = text.strip()
            if text == BAD_LINE or not stripped:
                continue
            columns = _header_columns(stripped.lstrip("#").split(","))
            if "object" in columns and "size" in columns:
                self._header = index
                return columns
            if not stripped.startswith("#"):  # comments before it are passed over, a record ends the search
                break
        raise TraceError(self.path, None, "no csv header naming the object and size columns (e.g. "
                                          "'time,object,size'): give the columns by number, e.g. "
                                          "--csv-columns time=1,object=2,size=3")

    def _generate(self) -> Iterator[Request]:
        blocks, lines, reasons = self._blocks, self._first, self._blocks.reasons
        self._first = self._first_chunk = None
        take = self._take_line
        number = 0
        while lines is not None:
            first = number + 1
            for text in lines:
                number += 1
                request = take(number, text, reasons[number - first] if text == BAD_LINE else None)
                if request is not None:
                    yield request
            self.lines = number
            lines = blocks.next()
            reasons = blocks.reasons
        self.close()

    def _take_line(self, number: int, text: str, reason: str | None) -> Request | None:
        """Line ``number`` (``BAD_LINE`` with its ``reason`` when unreadable): its Request, or None after counting
        it as skipped or malformed (the one definition of a csv record, for both :meth:`__iter__` and
        :meth:`record_arrays`)."""
        if text == BAD_LINE:
            self.note_malformed(number, reason)
            self._content += 1
            return None
        stripped = text.strip()
        if not stripped:
            self.skipped += 1
            return None
        header = self._header
        if number - 1 == header or stripped.startswith("#"):
            self.skipped += 1  # the header, or a comment
            if number - 1 == header:
                self._header = -1
            return None
        self._content += 1
        fields = text.split(",")
        needed = self._needed
        if len(fields) >= needed:
            size, url = fields[self._size_at].strip(), fields[self._object_at].strip()
            stamp = fields[self._time_at].strip() if self._time_at >= 0 else "0"
            if size.isascii() and size.isdigit() and url and " " not in url and "\t" not in url:
                try:
                    timestamp = float(stamp)
                except ValueError:
                    timestamp = -1.0
                client = fields[self._client_at].strip() if self._client_at >= 0 else NO_CLIENT
                if 0.0 <= timestamp < _INF and client and " " not in client:
                    self.lines = number
                    self.requests += 1
                    return new_request(Request, (timestamp, client, "GET", url, int(size), number,
                                                 None, None, None, None, None, None, None))
        if header is None and self._content == 1 and self.requests == 0:
            self.skipped += 1  # a first line that is not a record: a header (columns given by number)
            self._header, self._content = -1, 0
            return None
        self.note_malformed(number, self._reason(fields, needed))
        if not self.requests and self._content >= DETECTION_LINES:
            raise TraceError(self.path, None,
                             f"not a trace: none of the first {DETECTION_LINES} lines is a csv record "
                             f"with columns {self._shown_columns()} (line {self.malformed_lines[0][0]}: "
                             f"{self.malformed_lines[0][1]})")
        return None

    def record_arrays(self, max_requests: int | None = None, *, names: bool = False) -> Iterator[CsvArrays]:
        """The requests as :class:`CsvArrays`, compiled (``_native.trace_reader``), at most :data:`ARRAY_BLOCK` at a
        time: the requests iteration gives, with the same counts (``requests``, ``lines``, ``skipped``,
        ``malformed``), strict mode and errors. ``max_requests``: stop after that many requests, as ``islice`` over
        the iteration stops (no line after the last request is read). ``names``: add the cache keys' bytes (a block
        then ends early when :data:`NAME_BYTES` are used). Memory: one chunk of the file and one block of arrays.
        Read a reader either way, not both.

        :raises ValueError: a size of 2**63 bytes or more (the arrays' range), naming the line.
        """
        import numpy as np  # numpy is imported by the readers that decode arrays, not by every trace reader

        if self._first_chunk is None:
            raise ValueError("this reader has already been read")
        if isinstance(self._stream, io.TextIOBase):
            raise ValueError("record_arrays reads binary streams (paths, binary files); iterate a text stream")
        self._first = None
        limit = -1 if max_requests is None else max_requests
        max_line = line_reading.MAX_LINE_BYTES
        parser = CsvChunkParser(self._time_at, self._object_at, self._size_at, self._client_at, max_line)
        with_clients = self._client_at >= 0

        def fresh():
            count, named = ARRAY_BLOCK, ARRAY_BLOCK if names else 0
            return [np.empty(count, np.uint64), np.empty(count, np.int64), np.empty(count, np.float64),
                    np.empty(count if with_clients else 0, np.uint64), np.empty(count, np.int64),
                    np.empty(max(NAME_BYTES, 4 * max_line + 4) if names else 0, np.uint8),
                    np.zeros(named + 1 if names else 0, np.int64), np.empty(named, np.int64)]

        def block(arrays, filled):
            keys, sizes, times, clients, numbers, key_names, offsets, url_lengths = arrays
            if not names:
                return CsvArrays(keys[:filled], sizes[:filled], times[:filled],
                                 clients[:filled] if with_clients else None, numbers[:filled])
            return CsvArrays(keys[:filled], sizes[:filled], times[:filled], clients[:filled] if with_clients else None,
                             numbers[:filled], key_names[:offsets[filled]], offsets[:filled + 1],
                             url_lengths[:filled])

        arrays, filled = fresh(), 0
        chunk, first_over_long = self._first_chunk
        self._first_chunk = None
        status = LIMIT_REACHED if limit == 0 else CHUNK_DONE
        while chunk is not None and status != LIMIT_REACHED:
            position = 0
            while True:
                parser.number, parser.content, parser.requests = self._lines_seen, self._content, self.requests
                parser.skipped, parser.header = self.skipped, -1 if self._header is None else self._header
                before = self.requests
                status, position, filled = parser.parse(chunk, position, first_over_long, *arrays, filled, limit)
                self._lines_seen, self._content, self.requests = parser.number, parser.content, parser.requests
                self.skipped = parser.skipped
                if self._header is not None:
                    self._header = parser.header
                if self.requests > before:
                    self.lines = int(arrays[4][filled - 1])
                if status == OUTPUT_FULL:
                    yield block(arrays, filled)
                    arrays, filled = fresh(), 0
                elif status == DEFERRED:  # one line the parser leaves to this reader's own logic
                    end = chunk.find(b"\n", position)
                    end = len(chunk) if end < 0 else end
                    text, reason = decode_line(chunk[position:end], first_over_long and position == 0)
                    self._lines_seen += 1
                    request = self._take_line(self._lines_seen, text, reason)
                    position = end + 1
                    if request is None:
                        continue
                    if not 0 <= request.size < 2 ** 63:
                        raise ValueError(f"the request of line {request.line}: size {request.size!r} is not a "
                                         f"whole number of bytes in [0, 2**63) (the compiled replay's range; "
                                         f"engine 'python' takes any size)")
                    key_name = ("GET " + request.url).encode("utf-8") if names else b""
                    if names and arrays[6][filled] + len(key_name) > len(arrays[5]):
                        yield block(arrays, filled)
                        arrays, filled = fresh(), 0
                    keys, sizes, times, clients, numbers, key_names, offsets, url_lengths = arrays
                    keys[filled] = xxh3(request.url.encode("utf-8"))
                    sizes[filled], times[filled], numbers[filled] = request.size, request.timestamp, request.line
                    if with_clients:
                        clients[filled] = xxh3(request.client.encode("utf-8"))
                    if names:
                        at = offsets[filled]
                        key_names[at:at + len(key_name)] = np.frombuffer(key_name, np.uint8)
                        offsets[filled + 1], url_lengths[filled] = at + len(key_name), len(request.url)
                    filled += 1
                else:
                    break
            if status == LIMIT_REACHED:
                break
            self.lines = self._lines_seen
            next_chunk = self._blocks.next_chunk()
            chunk, first_over_long = next_chunk if next_chunk is not None else (None, False)
        if filled:
            yield block(arrays, filled)
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

    def _decoded_blocks(self):
        """``(records, numbers, bad)`` per block of whole records read: the structured array, their 1-based numbers
        and the mask of the malformed ones (not yet noted); notes a truncated last record and closes at the end."""
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
                bad = (nexts < -1) | ((nexts >= 0) & (nexts <= numbers)) | (nexts > MAX_NEXT_ACCESS)
                yield block, numbers, bad
                number += whole
                self.lines = number
            if len(data) < width * _RECORDS_PER_BLOCK:
                if len(data) % width:
                    self.note_malformed(number + 1, f"truncated record: {len(data) % width} of {width} bytes at "
                                                    f"the end of the file")
                break
        self.close()

    def _note_bad_record(self, at: int, next_access: int) -> None:
        self.note_malformed(at, f"next access {next_access} is neither -1 nor in ({at}, 2**40] "
                                f"(after this record): not an oracleGeneral record")
        if not self.requests and self.malformed >= DETECTION_LINES:
            raise TraceError(self.path, None, f"not an oracleGeneral trace: none of the first "
                                              f"{DETECTION_LINES} records is valid "
                                              f"({self.malformed_lines[0][1]})")

    def _generate(self) -> Iterator[Request]:
        for block, numbers, bad in self._decoded_blocks():
            for at, is_bad, t, obj, size, nxt in zip(numbers.tolist(), bad.tolist(), block["time"].tolist(),
                                                     block["object"].tolist(), block["size"].tolist(),
                                                     block["next"].tolist()):
                if is_bad:
                    self._note_bad_record(at, nxt)
                    continue
                self.lines = at
                self.requests += 1
                yield new_request(Request, (float(t), NO_CLIENT, "GET", str(obj), size, at,
                                            None, None, None, None, None, None, None))

    def record_arrays(self) -> Iterator[tuple]:
        """The valid records as arrays, at most 16,384 at a time: ``(objects, sizes, times)`` (uint64, int64,
        float64), the columns of the requests iteration gives (``url`` is ``str(object)``), with the same counts
        (``requests``, ``lines``, ``malformed``), a block at a time. Read a reader either way, not both."""
        for block, numbers, bad in self._decoded_blocks():
            if bad.any():
                before = self.requests
                for rank, index in enumerate(bad.nonzero()[0].tolist()):
                    self.requests = before + index - rank  # the valid records before it, as iteration counts them
                    self._note_bad_record(int(numbers[index]), int(block["next"][index]))
                self.requests = before
                block = block[~bad]
            self.requests += len(block)
            self.lines = int(numbers[-1])
            if len(block):
                yield block["object"].copy(), block["size"].astype("int64"), block["time"].astype("float64")
