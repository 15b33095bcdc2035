"""The bloomwise binary file format, shared by every structure (see docs/format.md for the byte diagram).

A file is a 64-byte little-endian header, optional JSON metadata padded to a multiple of 64 bytes, and the payload
(the structure's raw storage)::

    offset size field
    0      8    magic b"\\x89BLOOMW\\n"
    8      2    format version (u16)
    10     1    structure id   (Structure)
    11     1    layout id      (Layout)
    12     1    hash id        (HashScheme)
    13     1    flags          (Flags)
    14     2    meta length    (u16)
    16     8    seed (u64)
    24     8    num_cells (u64): m, bits, counters or positions
    32     4    num_hashes (u32)
    36     4    header checksum: CRC32 of bytes [0, P) with this field zeroed
    40     8    num_keys (u64): every key added, repeats included
    48     8    payload length (u64)
    56     8    payload checksum: XXH64 (seed 0) of the payload
    64     ...  meta: UTF-8 JSON object, zero-padded to P, the next multiple of 64
    P      ...  payload; nothing after it

Everything a reader needs to size or trust comes from the header only after it has been checked: the header
checksum is verified before any id or length is believed, the declared sizes are compared with the real file size
before anything is allocated, and every problem raises :class:`~bloomwise.errors.FormatError`.

Writers use :func:`dumps` or :func:`save` (atomic: temporary file, fsync, rename); readers use :func:`loads`,
:func:`load` or :func:`open_mapped` (a shared memory map, optionally writable). The ids in :class:`Structure`,
:class:`Layout` and :class:`HashScheme` are part of the format: append new members, never renumber (pinned by
tests/test_format.py).
"""
from __future__ import annotations

import dataclasses
import enum
import errno
import json
import mmap
import os
import stat
import struct
import threading
import time
import types
import warnings
import zlib
from collections.abc import Mapping
from typing import Any, Optional

from bloomwise._checks import check_int_range
from bloomwise.errors import FormatError
from bloomwise.theory._validate import LAYOUT_IDS

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX: no writer lock, a flagged file always counts as unclean
    fcntl = None

from bloomwise._native.hashes import xxh64 as _xxh64  # the compiled XXH64 (releases the GIL on large payloads)
from bloomwise._native.storage import HASH_THREAD_MIN as _HASH_THREAD_MIN
from bloomwise._native.storage import read_payload as _read_payload  # pread into aligned memory, hashed on the way

__all__ = [
    "MAGIC", "FORMAT_VERSION", "SUPPORTED_VERSIONS", "HEADER_SIZE", "ALIGNMENT", "MAX_META_LENGTH", "MAX_NUM_BITS",
    "MAX_NUM_HASHES",
    "Structure", "Layout", "HashScheme", "Flags", "Header", "MappedFile",
    "dumps", "loads", "save", "load", "open_mapped", "payload_offset",
]

MAGIC = b"\x89BLOOMW\n"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
HEADER_SIZE = 64
ALIGNMENT = 64  # the payload starts at a multiple of this, so a memory map hands the core aligned storage
MAX_META_LENGTH = 0xFFFF
MAX_NUM_BITS = 2**48
MAX_NUM_HASHES = 64
_U64 = 2**64

# magic, version, structure, layout, hash, flags, meta length, seed, num_cells, num_hashes, header crc,
# num_keys, payload length, payload checksum
_HEADER = struct.Struct("<8sHBBBBHQQIIQQQ")
assert _HEADER.size == HEADER_SIZE
_CRC_OFFSET = 36


# --- ids: part of the format, append-only ---------------------------------------------------------------------

class Structure(enum.IntEnum):
    """What the payload holds. Append-only: a value, once released, means the same structure forever."""

    BLOOM = 1
    COUNTING = 2
    VARIABLE_INCREMENT = 3
    SCALABLE = 4
    GENERALIZED = 5
    RETOUCHED = 6
    SUMMARY_UPDATE = 7  # a cache summary on the wire (bloomwise.cache.summary): whole or delta, bits or counters


#: How a hash becomes positions (docs/architecture.md): the library's one layout table,
#: ``bloomwise.theory._validate.LAYOUT_IDS`` (append-only), and NONE = 0 for a structure that has no layout.
Layout = enum.IntEnum("Layout", [("NONE", 0)] + [(name.upper(), number) for name, number in LAYOUT_IDS.items()],
                      module=__name__)


class HashScheme(enum.IntEnum):
    """How a key becomes a 64-bit hash. Append-only.

    CUSTOM: index functions supplied by the caller (``BloomFilter.from_hash_functions``); such a file can only be
    loaded by passing the same functions again. XXH64_V1 and XXH3_V1: the key encoding of docs/architecture.md,
    hashed with XXH64 or with XXH3-64 (the default since bloomwise 0.2: faster on short keys).
    XXH64_STAGES_V1 and XXH3_STAGES_V1 (scalable filters only): the key is hashed once, as by XXH64_V1 or XXH3_V1
    with the filter's seed, and stage i's hash is SplitMix64's output number i + 1 seeded with that hash
    (``bloomwise._native.scalable``); a scalable filter saved with XXH64_V1 or XXH3_V1 hashes the key again in
    each stage, with that stage's seed.
    """

    CUSTOM = 0
    XXH64_V1 = 1
    XXH3_V1 = 2
    XXH64_STAGES_V1 = 3
    XXH3_STAGES_V1 = 4


#: the ``hash_scheme=`` names users pass, and the schemes they select
HASH_SCHEME_NAMES = {"xxh3": HashScheme.XXH3_V1, "xxh64": HashScheme.XXH64_V1}


def hash_scheme_id(name) -> int:
    """The scheme id of a ``hash_scheme=`` name; ValueError naming the choices."""
    if name not in HASH_SCHEME_NAMES:
        raise ValueError(f"hash_scheme must be one of {', '.join(map(repr, HASH_SCHEME_NAMES))}, got {name!r}")
    return int(HASH_SCHEME_NAMES[name])


def hash_scheme_name(scheme_id: int) -> str:
    """``"xxh3"``, ``"xxh64"`` or ``"custom"``."""
    for name, scheme in HASH_SCHEME_NAMES.items():
        if scheme == scheme_id:
            return name
    return HashScheme(scheme_id).name.lower()


def keyed_hash_scheme(header: "Header", what: str) -> int:
    """The id of a file's key-hashing scheme; FormatError when the structure cannot use it (CUSTOM)."""
    if header.hash_scheme not in HASH_SCHEME_NAMES.values():
        raise FormatError(f"{what} needs hash scheme XXH3_V1 or XXH64_V1, the file says {header.hash_scheme.name}")
    return int(header.hash_scheme)


#: a scalable filter's key hash -> the scheme id saved when its stages derive their hashes from it
STAGE_HASH_SCHEMES = {HashScheme.XXH64_V1: HashScheme.XXH64_STAGES_V1, HashScheme.XXH3_V1: HashScheme.XXH3_STAGES_V1}


def scalable_hash_scheme(header: "Header") -> tuple[int, bool]:
    """A scalable filter file's hashing: (the key hash's scheme id, 1 or 2; whether the stages derive their hashes
    from it). FormatError for a scheme a scalable filter cannot use."""
    for base, staged in STAGE_HASH_SCHEMES.items():
        if header.hash_scheme == staged:
            return int(base), True
    if header.hash_scheme not in HASH_SCHEME_NAMES.values():
        raise FormatError(f"a scalable filter needs hash scheme XXH3_STAGES_V1, XXH64_STAGES_V1, XXH3_V1 or "
                          f"XXH64_V1, the file says {header.hash_scheme.name}")
    return int(header.hash_scheme), False


class Flags(enum.IntFlag):
    """Header flag bits. Bits not listed here are reserved and must be 0."""

    OPEN_FOR_WRITING = 1  # set in the file while a writable memory map is open (never part of a Header)
    KEYED = 2  # the structure was built with ``key=``: loading it needs the same key function


_KNOWN_FLAGS = Flags.OPEN_FOR_WRITING | Flags.KEYED
_CLASS_NAMES = {
    Structure.BLOOM: "BloomFilter",
    Structure.COUNTING: "CountingBloomFilter",
    Structure.VARIABLE_INCREMENT: "VariableIncrementCountingBloomFilter",
    Structure.SCALABLE: "ScalableBloomFilter",
    Structure.GENERALIZED: "GeneralizedBloomFilter",
    Structure.RETOUCHED: "RetouchedBloomFilter",
    Structure.SUMMARY_UPDATE: "SummaryUpdate",
}


def _class_name(structure: Structure) -> str:
    return _CLASS_NAMES.get(structure, structure.name)


def payload_offset(meta_length: int) -> int:
    """Where the payload starts for ``meta_length`` bytes of metadata: the next multiple of 64 after them.

    >>> payload_offset(0), payload_offset(1), payload_offset(64)
    (64, 128, 128)
    """
    return -(-(HEADER_SIZE + meta_length) // ALIGNMENT) * ALIGNMENT


# --- the header ----------------------------------------------------------------------------------------------

def _encode_meta(meta: Mapping) -> bytes:
    """Canonical JSON (sorted keys, no spaces) so that equal metadata always gives equal bytes; {} is empty."""
    if not isinstance(meta, Mapping):
        raise TypeError(f"meta must be a mapping (a JSON object), got {type(meta).__name__}")
    if not meta:
        return b""
    try:
        text = json.dumps(dict(meta), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"meta must be JSON-serializable without NaN or infinity: {exc}") from None
    data = text.encode("utf-8")
    if len(data) > MAX_META_LENGTH:
        raise ValueError(f"meta is {len(data)} bytes of JSON; the format allows at most {MAX_META_LENGTH}")
    return data


@dataclasses.dataclass(frozen=True, kw_only=True)
class Header:
    """Everything a file says about its payload, except the checksums (computed when writing).

    ``meta`` is a read-only mapping holding a canonical copy of the metadata given (JSON round trip), so a header
    compares equal to the one loaded back from its file. ``flags`` never includes ``OPEN_FOR_WRITING``: that bit
    is the memory-map protocol's state, not a property of the structure.

    >>> h = Header(structure=Structure.BLOOM, layout=Layout.BLOCKED, hash_scheme=HashScheme.XXH64_V1,
    ...            seed=7, num_cells=512, num_hashes=8, payload_length=64)
    >>> loads(dumps(h, bytes(64)))[0] == h
    True
    """

    structure: Structure
    layout: Layout
    hash_scheme: HashScheme
    seed: int
    num_cells: int
    num_hashes: int
    payload_length: int
    num_keys: int = 0
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    flags: Flags = Flags(0)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise the fields once, here
        for name, enum_type in (("structure", Structure), ("layout", Layout), ("hash_scheme", HashScheme)):
            value = getattr(self, name)
            try:
                set_(self, name, enum_type(value))
            except ValueError:
                known = ", ".join(f"{m.value} {m.name}" for m in enum_type)
                raise ValueError(f"{name} must be one of {known}; got {value!r}") from None
        check_int_range("seed", self.seed, 0, _U64 - 1)
        check_int_range("num_cells", self.num_cells, 1, MAX_NUM_BITS)
        check_int_range("num_hashes", self.num_hashes, 1, MAX_NUM_HASHES)
        check_int_range("payload_length", self.payload_length, 0, _U64 - 1)
        check_int_range("num_keys", self.num_keys, 0, _U64 - 1)
        check_int_range("flags", self.flags, 0, 255)
        if self.flags & ~int(Flags.KEYED):
            raise ValueError(f"flags may only contain Flags.KEYED, got {self.flags!r}")
        set_(self, "flags", Flags(self.flags))
        canonical = json.loads(_encode_meta(self.meta) or b"{}")
        set_(self, "meta", types.MappingProxyType(canonical))

    def __reduce__(self):  # a mappingproxy cannot be pickled: rebuild from plain fields
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["meta"] = dict(self.meta)
        return _header_from_fields, (fields,)


def _header_from_fields(fields: dict) -> Header:
    return Header(**fields)


def _header_crc(header: bytes, meta_and_padding) -> int:
    """CRC32 of the 64 header bytes with the checksum field zeroed, then the meta bytes and their padding."""
    zeroed = header[:_CRC_OFFSET] + b"\0\0\0\0" + header[_CRC_OFFSET + 4:HEADER_SIZE]
    return zlib.crc32(meta_and_padding, zlib.crc32(zeroed))


def _pack_header(header: Header, meta: bytes, payload_checksum: int, flags: int) -> bytes:
    """Header, meta and padding: every byte before the payload, with the header checksum filled in."""
    unsigned = _HEADER.pack(
        MAGIC, FORMAT_VERSION, header.structure, header.layout, header.hash_scheme, flags, len(meta),
        header.seed, header.num_cells, header.num_hashes, 0, header.num_keys, header.payload_length,
        payload_checksum)
    tail = meta + bytes(payload_offset(len(meta)) - HEADER_SIZE - len(meta))
    crc = _header_crc(unsigned, tail)
    return unsigned[:_CRC_OFFSET] + struct.pack("<I", crc) + unsigned[_CRC_OFFSET + 4:] + tail


def _byte_view(payload, what: str = "payload") -> memoryview:
    """A flat unsigned-byte view of any C-contiguous buffer."""
    try:
        view = memoryview(payload)
    except TypeError:
        raise TypeError(f"{what} must support the buffer protocol (bytes, bytearray, memoryview, numpy array...), "
                        f"got {type(payload).__name__}") from None
    if not view.c_contiguous:
        raise ValueError(f"{what} must be a C-contiguous buffer")
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _check_payload_length(header: Header, payload: memoryview) -> None:
    if payload.nbytes != header.payload_length:
        raise ValueError(f"header.payload_length is {header.payload_length} but the payload has {payload.nbytes} bytes")


def _encode_prefix(header: Header, payload: memoryview) -> bytes:
    _check_payload_length(header, payload)
    return _pack_header(header, _encode_meta(header.meta), _xxh64(payload, 0), int(header.flags))


# --- validation -----------------------------------------------------------------------------------------------

def _describe_start(data: bytes) -> str:
    """Best guess at what a file that does not start with the magic is."""
    if data[:8] == b"\x89BLOOMW\r" or data.startswith(b"\x89BLOOMW\r\n"):
        return "its line endings were converted (text-mode transfer?)"
    if data[:7] == MAGIC[1:]:
        return "its first byte was stripped (7-bit or text-mode transfer?)"
    if data[:2] == b"\x1f\x8b":
        return "it is gzip-compressed: decompress it first"
    if data[:4] == b"PK\x03\x04":
        return "it is a zip archive: extract it first"
    if data[:3] == b"BZh":
        return "it is bzip2-compressed: decompress it first"
    if data[:6] == b"\xfd7zXZ\x00":
        return "it is xz-compressed: decompress it first"
    if data[:4] == b"\x28\xb5\x2f\xfd":
        return "it is zstd-compressed: decompress it first"
    if data[:2] in (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05"):  # PROTO opcode, protocols 2-5
        return "it looks like a Python pickle: use pickle.load"
    for cut in range(4):  # the 64 bytes may end inside a multi-byte character
        try:
            text = data[:len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text and all(c.isprintable() or c in "\t\r\n" for c in text):
            return "it looks like text (a key list? build a filter from it with `bloomwise build`)"
        break
    return f"it starts with {data[:8]!r}"


def _check_enum(enum_type, value: int, what: str):
    try:
        return enum_type(value)
    except ValueError:
        known = ", ".join(f"{m.value} ({m.name})" for m in enum_type)
        raise FormatError(f"unknown {what} id {value}; this bloomwise knows {known}. "
                          "The file was written by a newer bloomwise, or is corrupted") from None


def _parse(buf: memoryview, *, structure: Optional[Structure], file_size: Optional[int] = None
           ) -> tuple[Header, int, int, bool]:
    """Check everything but the payload checksum and the OPEN_FOR_WRITING flag.

    ``buf`` is the file, or at least its first P bytes when ``file_size`` gives the real size. Returns
    (header, payload offset P, stored payload checksum, whether the OPEN_FOR_WRITING flag is set).
    """
    size = buf.nbytes if file_size is None else file_size
    start = bytes(buf[:HEADER_SIZE])
    if size == 0:
        raise FormatError("not a bloomwise file: it is empty")
    if start[:8] != MAGIC[:len(start)]:
        raise FormatError(f"not a bloomwise file (expected it to start with {MAGIC!r}): {_describe_start(start)}")
    if len(start) < HEADER_SIZE:
        raise FormatError(f"truncated: the file has {size} bytes, less than the {HEADER_SIZE}-byte header")
    (_, version, structure_id, layout_id, hash_id, flag_bits, meta_length, seed, num_cells, num_hashes, stored_crc,
     num_keys, payload_length, payload_checksum) = _HEADER.unpack(start)
    if version not in SUPPORTED_VERSIONS:
        raise FormatError(f"unknown format version {version}; this bloomwise reads version(s) "
                          f"{', '.join(map(str, SUPPORTED_VERSIONS))}. Upgrade bloomwise, or the file is corrupted")
    offset = payload_offset(meta_length)
    if size < offset or buf.nbytes < offset:
        raise FormatError(f"truncated, or corrupted header: the header declares {meta_length} bytes of metadata "
                          f"(payload at byte {offset}) but the file has only {size} bytes")
    crc = _header_crc(start, buf[HEADER_SIZE:offset])
    if crc != stored_crc:
        raise FormatError(f"corrupted: header checksum mismatch (stored CRC32 {stored_crc:#010x}, "
                          f"computed {crc:#010x})")
    # From here the header bytes are what the writer wrote; a bad value means a buggy or newer writer.
    if flag_bits & ~int(_KNOWN_FLAGS):
        raise FormatError(f"reserved flag bits set: flags are {flag_bits:#04x}, known bits are "
                          f"{int(_KNOWN_FLAGS):#04x}. The file was written by a newer bloomwise")
    structure_found = _check_enum(Structure, structure_id, "structure")
    layout = _check_enum(Layout, layout_id, "layout")
    hash_scheme = _check_enum(HashScheme, hash_id, "hash")
    if not 1 <= num_cells <= MAX_NUM_BITS:
        raise FormatError(f"num_cells is {num_cells}; expected 1 to 2**48")
    if not 1 <= num_hashes <= MAX_NUM_HASHES:
        raise FormatError(f"num_hashes is {num_hashes}; expected 1 to {MAX_NUM_HASHES}")
    meta_bytes = bytes(buf[HEADER_SIZE:HEADER_SIZE + meta_length])
    if any(buf[HEADER_SIZE + meta_length:offset]):
        raise FormatError("the padding after the metadata is not zero")
    meta = _decode_meta(meta_bytes)
    if structure is not None and structure_found != structure:
        expected = Structure(structure)
        found_name = _class_name(structure_found)
        raise FormatError(f"the file holds a {found_name} (structure id {structure_found.value}), expected a "
                          f"{_class_name(expected)} (structure id {expected.value}); load it with "
                          f"{found_name}.load()")
    expected_size = offset + payload_length
    if size < expected_size:
        raise FormatError(f"truncated: the header declares a {payload_length}-byte payload at byte {offset}, so "
                          f"{expected_size} bytes, but the file has {size} ({expected_size - size} missing)")
    if size > expected_size:
        raise FormatError(f"{size - expected_size} unexpected bytes after the payload: the header declares "
                          f"{expected_size} bytes, the file has {size}")
    try:
        header = Header(structure=structure_found, layout=layout, hash_scheme=hash_scheme, seed=seed,
                        num_cells=num_cells, num_hashes=num_hashes, payload_length=payload_length,
                        num_keys=num_keys, meta=meta, flags=Flags(flag_bits & Flags.KEYED))
    except (TypeError, ValueError, RecursionError) as exc:  # e.g. metadata that no longer fits once canonical
        raise FormatError(f"invalid header: {exc}") from None
    return header, offset, payload_checksum, bool(flag_bits & Flags.OPEN_FOR_WRITING)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def _decode_meta(data: bytes) -> dict:
    if not data:
        return {}
    try:
        meta = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise FormatError(f"the metadata is not valid UTF-8 JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise FormatError(f"the metadata must be a JSON object, got a JSON {type(meta).__name__}")
    return meta


def _verify_payload(payload: memoryview, stored: int) -> None:
    computed = _xxh64(payload, 0)
    if computed != stored:
        raise FormatError(_checksum_mismatch(stored, computed))


def _checksum_mismatch(stored: int, computed: int) -> str:
    return f"corrupted: payload checksum mismatch (stored XXH64 {stored:#018x}, computed {computed:#018x})"


def _unclean(structure: Structure) -> str:
    name = _class_name(structure)
    return ("the file was not closed cleanly: a writable memory map of it was open when its writer stopped, so its "
            "payload checksum is stale and keys being added then may be missing. Load it anyway with verify=False "
            f"(unsafe), or repair it: {name}.open(path, 'r+', verify=False).close()")


def _live(structure: Structure) -> str:
    return ("the file is open for writing by another process, so its payload is changing. Share it live with "
            f"{_class_name(structure)}.open(path), wait until the writer closes it, or load an unverified snapshot "
            "with verify=False")


# --- bytes in memory ------------------------------------------------------------------------------------------

def dumps(header: Header, payload) -> bytes:
    """Serialize ``header`` and ``payload`` (any C-contiguous buffer of ``header.payload_length`` bytes).

    >>> h = Header(structure=Structure.BLOOM, layout=Layout.CLASSIC, hash_scheme=HashScheme.XXH64_V1,
    ...            seed=0, num_cells=64, num_hashes=3, payload_length=8)
    >>> data = dumps(h, bytes(8))
    >>> len(data), data[:8]
    (72, b'\\x89BLOOMW\\n')
    """
    view = _byte_view(payload)
    return b"".join((_encode_prefix(header, view), view))  # the payload is copied once, into the result


def loads(data, *, structure: Optional[Structure] = None, verify: bool = True) -> tuple[Header, memoryview]:
    """Parse and check a whole file held in memory; return its header and a view of its payload inside ``data``.

    ``structure``: reject a file holding another structure. ``verify=False`` skips the payload checksum (one pass
    over the payload) and accepts a file that was not closed cleanly; unsafe: a corrupted payload goes undetected.
    The header is always checked. Raises FormatError for any bad input.
    """
    buf = _byte_view(data, "data")
    header, offset, stored, flagged = _parse(buf, structure=structure)
    payload = buf[offset:offset + header.payload_length]
    if verify:
        if flagged:
            raise FormatError(_unclean(header.structure))
        _verify_payload(payload, stored)
    return header, payload


# --- files ----------------------------------------------------------------------------------------------------

def _fspath(path) -> str:
    return os.fsdecode(os.fspath(path))


def with_path(path, exc: FormatError) -> FormatError:
    """The same error with the file's path in front: every FormatError about a file names the file."""
    return type(exc)(f"{_fspath(path)}: {exc}")


def save(path, header: Header, payload) -> None:
    """Write the file atomically: a temporary file in the same directory, flush, fsync, then rename over ``path``.

    An interrupted save (an exception, Ctrl-C) leaves ``path`` as it was (or absent) and removes its temporary
    file. A process killed during a save (SIGKILL, power loss) cannot remove it: the next save of the same target
    does, so at most one stale temporary per target outlives a crash. The writer holds an exclusive ``flock`` on
    its temporary file until the rename, so a save never removes the file of another save that is still running.
    A reader that has the old file open or mapped keeps seeing the old file. The payload is written from its
    buffer, not copied, before the header: from 8 MiB on, a helper thread computes the checksum the header holds
    while the payload is being written. An existing file keeps its permission bits; a new one gets the usual ones
    (0o666 minus the umask).
    """
    path = _fspath(path)
    if os.path.islink(path):  # replace the file the link points to, not the link
        path = os.path.realpath(path)
    view = _byte_view(payload)
    _check_payload_length(header, view)
    meta = _encode_meta(header.meta)
    directory, name = os.path.split(os.path.abspath(path))
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    remove_stale_temporaries(path)
    while True:
        temp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
            break
        except FileExistsError:  # pragma: no cover - 48 random bits
            continue
    checksum = _Checksum(view)
    try:
        try:
            _lock(fd)
            if mode is not None:
                os.chmod(fd, mode)
            os.lseek(fd, payload_offset(len(meta)), os.SEEK_SET)
            _write_all(fd, view)
            os.lseek(fd, 0, os.SEEK_SET)
            _write_all(fd, _pack_header(header, meta, checksum.result(), int(header.flags)))
            os.fsync(fd)
            os.replace(temp, path)  # still locked: a concurrent save's clean-up leaves the file alone
        finally:
            checksum.result()  # the helper thread lets go of the payload before save returns, also on error
            os.close(fd)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    _fsync_directory(directory)


class _Checksum:
    """The XXH64 of a payload: from ``_read_payload``'s HASH_THREAD_MIN bytes on, computed by a helper thread
    started here (the compiled hash releases the GIL, so it runs while the caller writes); below, at once."""

    def __init__(self, view: memoryview) -> None:
        self._value: Optional[int] = None
        self._thread = None
        if view.nbytes < _HASH_THREAD_MIN:
            self._value = _xxh64(view, 0)
        else:
            self._thread = threading.Thread(target=self._run, args=(view,), name="bloomwise-checksum", daemon=True)
            self._thread.start()

    def _run(self, view: memoryview) -> None:
        self._value = _xxh64(view, 0)

    def result(self) -> int:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self._value


def _lock(fd: int) -> bool:
    """Take an exclusive flock without waiting; False when another process holds it (or flock is missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


#: A temporary file left empty this long ago belongs to a save that died before it wrote anything.
_EMPTY_TEMPORARY_AGE = 60.0


def remove_stale_temporaries(path) -> list[str]:
    """Remove the temporary files that killed saves of ``path`` left behind; return their paths.

    A temporary file of ``path`` is ``.NAME.<12 hex digits>.tmp`` in its directory. It is stale when no process
    holds its lock: a running save takes the lock right after creating the file and keeps it until the rename.
    An empty one is removed only after a minute (its writer may be between creating and locking it).
    """
    directory, name = os.path.split(os.path.abspath(_fspath(path)))
    prefix, removed = f".{name}.", []
    try:
        entries = os.listdir(directory)
    except OSError:
        return removed
    for entry in entries:
        middle = entry[len(prefix):-len(".tmp")]
        if not (entry.startswith(prefix) and entry.endswith(".tmp") and len(middle) == 12
                and all(c in "0123456789abcdef" for c in middle)):
            continue
        candidate = os.path.join(directory, entry)
        try:
            fd = os.open(candidate, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                continue
            if status.st_size == 0 and time.time() - status.st_mtime < _EMPTY_TEMPORARY_AGE:
                continue
            if _lock(fd):
                os.unlink(candidate)
                removed.append(candidate)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view.nbytes:
        written = os.write(fd, view[:1 << 30])
        view = view[written:]


def _fsync_directory(directory: str) -> None:
    """Make the rename itself durable (POSIX); best effort where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def _writer_alive(fd: int) -> bool:
    """Whether a writer holds the lock of this file (a live writable map). ``fd`` must not be that writer's."""
    if fcntl is None:  # pragma: no cover
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _lock_for_writing(fd: int, path: str) -> None:
    """Take the writer lock; a reader probing it holds it for microseconds, so retry briefly before giving up."""
    if fcntl is None:  # pragma: no cover
        return
    for _ in range(20):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.005)
    raise BlockingIOError(errno.EWOULDBLOCK, f"{path} is already open for writing by another writer")


_ATTEMPTS = 10


def _unless_changing(fd: int, check):
    """Run ``check()``, which reads and checks the file behind ``fd``; retry if a writer changed it meanwhile.

    A live writer rewrites the header when it opens, flushes and closes, so a reader can catch a half-written
    header, a payload newer than its checksum, or a writer that closed just before its lock was probed. Such
    errors come with a header that changed during the check; a damaged file's header stays put, so its error is
    raised at once.
    """
    for attempt in range(_ATTEMPTS):
        before = os.pread(fd, HEADER_SIZE, 0)
        try:
            return check()
        except FormatError:
            if attempt == _ATTEMPTS - 1 or os.pread(fd, HEADER_SIZE, 0) == before:
                raise
        time.sleep(0.001)
    raise AssertionError("unreachable")  # pragma: no cover


def load(path, *, structure: Optional[Structure] = None, verify: bool = True) -> tuple[Header, memoryview]:
    """Read and check a file; return its header and a writable view of its payload in memory of its own.

    The header is read and checked against the size the file system reports before the payload is read, so a
    header that declares a huge payload never causes a huge allocation. The payload is then read once, straight
    into the 64-byte aligned memory a filter keeps (the view's ``obj``; nothing zero-fills it first), and its
    checksum is computed as it arrives, by a helper thread from 8 MiB on. ``structure`` and ``verify`` as in
    :func:`loads`; a file that another process has open for writing needs ``verify=False`` (an unverified
    snapshot).
    """
    path = _fspath(path)
    with open(path, "rb") as file:
        fd = file.fileno()

        def check_open_flag(header: Header, flagged: bool) -> None:
            if flagged and verify:
                live = _writer_alive(fd)
                raise FormatError((_live if live else _unclean)(header.structure))

        def check() -> tuple[Header, memoryview]:
            size = os.fstat(fd).st_size
            start = os.pread(fd, min(size, payload_offset(MAX_META_LENGTH)), 0)
            header, offset, stored, flagged = _parse(memoryview(start), structure=structure, file_size=size)
            check_open_flag(header, flagged)
            # The header agrees with the real size: only now is the payload's memory allocated.
            buffer, done, computed = _read_payload(fd, offset, header.payload_length, verify)
            if done < header.payload_length:
                expected = offset + header.payload_length
                raise FormatError(f"truncated: the header declares a {header.payload_length}-byte payload at byte "
                                  f"{offset}, so {expected} bytes, but the file has {offset + done} "
                                  f"({expected - offset - done} missing)")
            if os.pread(fd, offset, 0) != start[:offset]:  # a writer rewrote the header meanwhile: read again
                raise FormatError("the file changed while it was being read")
            if verify and computed != stored:
                raise FormatError(_checksum_mismatch(stored, computed))
            return header, memoryview(buffer)

        try:
            return _unless_changing(fd, check)
        except FormatError as exc:
            raise with_path(path, exc) from None


class MappedFile:
    """A file memory-mapped with MAP_SHARED: every process mapping it sees the same bytes.

    Create one with :func:`open_mapped`. ``payload`` is a view of the payload inside the map, writable when
    ``writable``; ``header`` is the header as of opening or of the last :meth:`flush`; ``payload_verified`` says
    whether the payload checksum was checked on opening.

    Writer protocol: opening takes an exclusive ``flock`` on the file (one writer at a time) and sets the
    ``OPEN_FOR_WRITING`` flag in the file's header; :meth:`flush` writes the payload checksum and ``num_keys``
    and syncs (the flag stays set, since writes may continue); :meth:`close` flushes, clears the flag and
    releases the lock. A reader that finds the flag set probes the lock: held means a live writer (a read-only
    map is allowed, unverified); free means the writer died without closing, and the file is refused unless
    ``verify=False``.
    """

    def __init__(self, path: str, fd: int, mm: mmap.mmap, header: Header, offset: int, *, writable: bool,
                 payload_verified: bool) -> None:
        self.path = path
        self.writable = writable
        self.payload_verified = payload_verified
        self.header = header
        self._fd = fd
        self._mm = mm
        self._offset = offset
        meta_length = struct.unpack_from("<H", mm, 14)[0]
        self._meta = bytes(mm[HEADER_SIZE:HEADER_SIZE + meta_length])
        self._open_views()

    def _open_views(self) -> None:
        self._whole = memoryview(self._mm)
        payload = self._whole[self._offset:self._offset + self.header.payload_length]
        self.payload = payload if self.writable else payload.toreadonly()

    @property
    def closed(self) -> bool:
        return self._mm is None

    def _write_header(self, *, num_keys: int, checksum: int, open_flag: bool) -> None:
        self.header = dataclasses.replace(self.header, num_keys=num_keys)
        flags = int(self.header.flags) | (Flags.OPEN_FOR_WRITING if open_flag else 0)
        data = _pack_header(self.header, self._meta, checksum, flags)
        os.pwrite(self._fd, data[:HEADER_SIZE], 0)  # the map sees it too: one page cache
        os.fsync(self._fd)

    def _mark_open_for_writing(self) -> None:
        stored_checksum = struct.unpack_from("<Q", self._mm, 56)[0]
        self._write_header(num_keys=self.header.num_keys, checksum=stored_checksum, open_flag=True)

    def flush(self, *, num_keys: Optional[int] = None) -> None:
        """Sync the payload, then write its checksum (one pass over it) and ``num_keys`` into the header.

        A no-op for a read-only map. The file stays flagged open for writing until :meth:`close`.
        """
        if self._mm is None:
            raise ValueError(f"{self.path}: the memory map is closed")
        if self.writable:
            self._mm.flush()
            self._write_header(num_keys=self.header.num_keys if num_keys is None else num_keys,
                               checksum=_xxh64(self.payload, 0), open_flag=True)

    def close(self, *, num_keys: Optional[int] = None) -> None:
        """Unmap; a writer first syncs, writes the final checksum and clears the open-for-writing flag. Idempotent.

        Raises BufferError, and stays open, while something still uses the payload's memory (a numpy array made
        from ``payload``, say): delete it first.
        """
        if self._mm is None:
            return
        if self.writable:
            self._mm.flush()
            checksum = _xxh64(self.payload, 0)
        try:
            self.payload.release()
            self._whole.release()
            self._mm.close()
        except BufferError:
            self._open_views()
            raise BufferError(f"{self.path}: cannot close the memory map while its payload is still in use "
                              "(a numpy array or filter made from .payload?); delete it first") from None
        self._mm = None
        try:
            if self.writable:
                self._write_header(num_keys=self.header.num_keys if num_keys is None else num_keys,
                                   checksum=checksum, open_flag=False)
        finally:
            os.close(self._fd)  # also releases the writer lock

    def __enter__(self) -> "MappedFile":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_mm", None) is not None:
            warnings.warn(f"unclosed MappedFile {self.path!r}", ResourceWarning, stacklevel=2)
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        state = "closed" if self._mm is None else ("writable" if self.writable else "read-only")
        return f"<MappedFile {self.path!r} {state}>"


def open_mapped(path, *, writable: bool = False, structure: Optional[Structure] = None,
                verify: bool = True) -> MappedFile:
    """Memory-map a file with MAP_SHARED, read-only unless ``writable``, after checking it as :func:`load` does.

    Checking the payload checksum costs one pass over the payload (XXH64: about 0.1 s per GB);
    ``verify=False`` skips it, and also accepts a file whose writer died without closing it (with
    ``writable=True``, closing then repairs the file). A read-only map of a file another process is writing is
    allowed and sees its writes; its ``payload_verified`` is False. A second writer gets BlockingIOError.
    Bytes are never copied: ``payload`` is the page cache.
    """
    path = _fspath(path)
    fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | getattr(os, "O_BINARY", 0))
    mm = mapped = None
    try:
        if writable:
            _lock_for_writing(fd, path)
        status = os.fstat(fd)
        if stat.S_ISDIR(status.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        size = status.st_size
        if size < HEADER_SIZE:  # mmap cannot map an empty file; _parse explains what is wrong
            _parse(memoryview(os.pread(fd, HEADER_SIZE, 0)), structure=structure)
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)

        def check() -> tuple[Header, int, bool]:
            view = memoryview(mm)
            payload = None
            try:  # views of the map must be released before it can be closed, also on error
                header, offset, stored, flagged = _parse(view, structure=structure)
                payload = view[offset:offset + header.payload_length]
                live = flagged and not writable and _writer_alive(fd)  # a writer never probes its own lock
                if flagged and not live and verify:
                    raise FormatError(_unclean(header.structure))
                verified = verify and not live
                if verified:
                    _verify_payload(payload, stored)
                return header, offset, verified
            finally:
                if payload is not None:
                    payload.release()
                view.release()

        header, offset, verified = _unless_changing(fd, check)
        mapped = MappedFile(path, fd, mm, header, offset, writable=writable, payload_verified=verified)
        if writable:
            mapped._mark_open_for_writing()
        return mapped
    except BaseException as exc:
        if mapped is not None:
            mapped.payload.release()
            mapped._whole.release()
            mapped._mm = None
        if mm is not None:
            try:
                mm.close()
            except BufferError:  # pragma: no cover - a view still alive: unmapped when it is collected
                pass
        os.close(fd)
        if isinstance(exc, FormatError):
            raise with_path(path, exc) from None
        raise
