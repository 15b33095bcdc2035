"""Saving and loading, the same for every structure: bytes, files and pickle in bloomwise's format (docs/format.md).

A structure mixes in ``Persistent`` and defines ``_STRUCTURE`` (its id in the format), ``_header()``,
``payload_view()`` (the payload bytes; ``bloomwise._storage``) and the classmethod ``_from_parts(header, payload, *, key, **options)``, which validates what the
format layer could not (sizes, layouts, structure-specific meta) and builds the object. A structure whose
``_from_parts`` also takes ``copy=False`` (build on the payload's memory in place) sets ``_LOADS_IN_PLACE``:
``load()`` then hands it the memory the file was read into, so the payload is read once and never copied.
"""
from __future__ import annotations

from typing import Optional

from bloomwise import _format
from bloomwise.errors import FormatError


class Persistent:
    """``to_bytes``/``from_bytes``, ``save``/``load`` and pickling."""

    __slots__ = ()
    _STRUCTURE: _format.Structure
    _LOADS_IN_PLACE = False  # True: _from_parts(..., copy=False) keeps the payload's memory as its own

    @property
    def hash_scheme(self) -> str:
        """How keys become hashes, saved with the structure: ``"xxh3"`` (the default) or ``"xxh64"`` (bloomwise
        0.1's files; pass ``hash_scheme="xxh64"`` to build a filter that combines with them)."""
        return _format.hash_scheme_name(self._hash_scheme_id)

    def to_bytes(self) -> bytes:
        """The structure in bloomwise's binary format (docs/format.md)."""
        return _format.dumps(self._header(), self.payload_view())

    @classmethod
    def from_bytes(cls, data, *, key=None, verify=True, **options):
        """Rebuild from ``to_bytes()`` output; ``FormatError`` when the bytes fail any check.

        :param key: the key function the structure was built with, if any (it cannot be saved).
        :param verify: ``False`` skips the payload checksum (unsafe: only to rescue a damaged file).
        """
        header, payload = _format.loads(data, structure=cls._STRUCTURE, verify=verify)
        return cls._from_parts(header, payload, key=key, **options)

    def save(self, path) -> None:
        """Write to ``path`` atomically: a temporary file in the same directory, fsync, then rename."""
        _format.save(path, self._header(), self.payload_view())

    @classmethod
    def load(cls, path, *, key=None, verify=True, **options):
        """Read what ``save()`` wrote; ``FormatError`` when the file fails any check.

        ``verify=False`` skips the payload checksum and accepts a file whose writer died (unsafe).
        """
        header, payload = _format.load(path, structure=cls._STRUCTURE, verify=verify)
        if cls._LOADS_IN_PLACE:  # the payload was read into memory nobody else holds: the structure keeps it
            options = {**options, "copy": False}
        try:
            return cls._from_parts(header, payload, key=key, **options)
        except FormatError as exc:  # the structure's own checks: name the file too
            raise _format.with_path(path, exc) from None

    @classmethod
    def _from_parts(cls, header: _format.Header, payload, *, key, **options):
        """Build the structure from a header and payload the format layer checked (the structure defines it)."""
        raise NotImplementedError

    def __reduce__(self):
        key = self._key_function
        if key is not None:  # pickled by reference, like any function: it must be importable
            return (_from_bytes_with_key, (type(self), self.to_bytes(), key))
        return (type(self).from_bytes, (self.to_bytes(),))


def _from_bytes_with_key(cls, data, key):
    return cls.from_bytes(data, key=key)


def header_flags(key_function) -> _format.Flags:
    """KEYED when the structure has a key function (loading then asks for it again)."""
    return _format.Flags.KEYED if key_function is not None else _format.Flags(0)


def check_keyed(header: _format.Header, key) -> None:
    """A file built with a key function loads only with one, and one built without it only without."""
    if bool(header.flags & _format.Flags.KEYED) != (key is not None):
        raise ValueError("this filter was built with a key function: pass the same key= to load it"
                         if key is None else "this filter was built without a key function; omit key=")


def meta_capacity(header: _format.Header) -> Optional[int]:
    """The capacity recorded in a file's meta (None when built by size); FormatError when it is not an int >= 1."""
    capacity = header.meta.get("capacity")
    if capacity is not None and (not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1):
        raise FormatError(f"meta capacity must be an int >= 1, the file says {capacity!r}")
    return capacity


def meta_fpr(header: _format.Header) -> Optional[float]:
    """The target rate recorded in a file's meta (None when built by size or written by an older release);
    FormatError when it is not a number strictly between 0 and 1."""
    fpr = header.meta.get("fpr")
    if fpr is not None and (isinstance(fpr, bool) or not isinstance(fpr, (int, float)) or not 0.0 < fpr < 1.0):
        raise FormatError(f"meta fpr must be a number strictly between 0 and 1, the file says {fpr!r}")
    return None if fpr is None else float(fpr)


def cell_array_header(f, meta: dict) -> _format.Header:
    """The header of a counting structure ``f`` (CountingBloomFilter, VI-CBF), through its storage interface
    (``bloomwise._storage``): ``meta`` plus its capacity and target rate, if any."""
    if f.capacity is not None:
        meta["capacity"] = f.capacity
    if f.fpr is not None:
        meta["fpr"] = f.fpr
    geometry = f.storage_geometry()
    return _format.Header(
        structure=_format.Structure[geometry.structure.upper()], layout=_format.Layout[geometry.layout.upper()],
        hash_scheme=_format.HashScheme(_format.hash_scheme_id(geometry.hash_scheme)), seed=geometry.seed,
        num_cells=geometry.num_cells, num_hashes=geometry.num_hashes, num_keys=f.num_keys, payload_length=f.nbytes,
        meta=meta, flags=header_flags(f.key_function))


def check_cell_array_header(header: _format.Header, key, what: str) -> int:
    """The checks every counting structure's file passes (key function, hash scheme, layout); its scheme id."""
    check_keyed(header, key)
    scheme = _format.keyed_hash_scheme(header, what)
    if header.layout not in (_format.Layout.CLASSIC, _format.Layout.PARTITIONED):
        raise FormatError(f"{what} has the classic or partitioned layout, the file says {header.layout.name}")
    return scheme


def check_cell_payload(header: _format.Header, payload, cell_bits: int, cells: str, *, copy: bool) -> None:
    """A counting structure's payload holds exactly ``header.num_cells`` cells of ``cell_bits`` bits in 64-bit words
    (FormatError naming the ``cells``, e.g. "counters", otherwise); one to be used in place (``copy`` False) has its
    padding checked now, before the structure holds it (a memory map must stay closable)."""
    expected = (header.num_cells * cell_bits + 63) // 64 * 8
    if header.payload_length != expected:
        raise FormatError(f"payload holds {header.payload_length} bytes; {header.num_cells} {cells} of "
                          f"{cell_bits} bits need {expected}")
    if not copy:
        check_cell_padding(payload, header.num_cells * cell_bits)


def check_cell_padding(payload, used_bits: int) -> None:
    """The bits after the last cell of a counting structure's payload are zero (FormatError otherwise)."""
    whole, extra = divmod(used_bits, 8)
    with memoryview(payload) as view, view.cast("B") as data:  # released at once, also on error (memory maps)
        tail = bytes(data[whole:])
    if (extra and tail[0] >> extra) or any(tail[1 if extra else 0:]):
        raise FormatError("the padding after the last counter is not zero")


def open_structure(cls, mapped_cls, path, mode: str, *, key, verify: bool):
    """``cls.open()``: memory-map a saved structure and build ``mapped_cls`` (a subclass with :class:`Mapped`)
    on the file's payload in place. Errors of the structure's own checks name the file, as ``load()``'s do."""
    if mode not in ("r", "r+"):
        raise ValueError(f"mode must be 'r' or 'r+', got {mode!r}")
    mapped = _format.open_mapped(path, writable=mode == "r+", structure=cls._STRUCTURE, verify=verify)
    try:
        self = mapped_cls._from_parts(mapped.header, mapped.payload, key=key, copy=False)
    except BaseException as exc:
        mapped.close()
        if isinstance(exc, FormatError):
            raise _format.with_path(path, exc) from None
        raise
    self._mapped = mapped
    return self


class Mapped:
    """A structure whose cells live in a memory-mapped file (``open()``): ``flush``, ``close``, ``with``, ``path``.

    The concrete class declares the ``_mapped`` slot; ``num_keys`` is written to the header on flush and close.
    """

    __slots__ = ()

    def flush(self) -> None:
        """Write the checksum and key count of the current cells to the file (mode ``"r+"``)."""
        self._mapped.flush(num_keys=self.num_keys)

    def close(self) -> None:
        """Flush (mode ``"r+"``) and unmap. The structure must not be used afterwards."""
        if not self._mapped.closed:
            num_keys = self.num_keys if self._is_writable else None
            self._release_storage()
            self._mapped.close(num_keys=num_keys)

    def __repr__(self) -> str:
        mapped = getattr(self, "_mapped", None)  # (unset while open() is still building the structure)
        if mapped is not None and mapped.closed:
            return f"<{self._FAMILY.__name__} closed: {mapped.path}>"
        return super().__repr__()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    @property
    def path(self) -> str:
        """The file the structure is mapped from."""
        return self._mapped.path
