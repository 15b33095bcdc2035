"""What a served filter is, and where it lives: the parameters stored in ``NAME:meta`` and the names of its keys.

Internal interface of ``bloomwise.redis``. ``Geometry`` holds structure, layout, m, k, seed, hash scheme, cell width,
capacity and part size, checks them, and parses ``NAME:meta`` as untrusted input (``FormatError`` naming the field).
``meta_key`` and ``part_key`` name a filter's keys; a name with a Redis Cluster hash tag (``{tag}``) keeps all of
them in one slot (docs/redis.md, "Redis Cluster").
"""
from __future__ import annotations

import math
from typing import Optional

from bloomwise import _format
from bloomwise.errors import FormatError
from bloomwise.redis.errors import FilterMismatchError, ServedFilterError, call_server
from bloomwise.redis.scripts import CREATE_META_SCRIPT

__all__ = ["FORMAT_VERSION", "MAX_PART_BYTES", "STRUCTURES", "LAYOUT_IDS", "Geometry", "meta_key", "part_key",
           "check_name", "read_meta", "meta_fields", "check_stored", "create_meta_command"]

#: Version of the storage (``NAME:meta`` field ``format_version``): 2 names m ``num_cells``; version 1 (bloomwise
#: 0.x before it) named it ``num_bits`` and is still read, so filters already on a server stay readable.
FORMAT_VERSION = 2
#: The field holding m, by storage version.
CELLS_FIELD = {"1": "num_bits", "2": "num_cells"}
#: The largest Redis string (proto-max-bulk-len's default and hard limit of bit offsets: 2**32 bits).
MAX_PART_BYTES = 512 * 2 ** 20
STRUCTURES = {"bloom": _format.Structure.BLOOM, "counting": _format.Structure.COUNTING}
LAYOUT_IDS = {"classic": 1, "partitioned": 2, "blocked": 3}


def meta_key(name: str) -> str:
    return f"{name}:meta"


def part_key(name: str, index: int) -> str:
    return f"{name}:part:{index}"


def check_name(name) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    return name


class Geometry:
    """What a served filter is: structure, layout, m, k, seed, hash scheme, cell width, capacity, part size."""

    FIELDS = ("format", "format_version", "structure", "layout", "num_cells", "num_hashes", "seed", "hash_scheme",
              "counter_bits", "capacity", "part_bytes")

    def __init__(self, structure, layout, num_cells, num_hashes, seed, hash_scheme, counter_bits, capacity,
                 part_bytes, fpr=None):
        self.structure = structure            # "bloom" or "counting"
        self.layout = layout
        self.num_cells = num_cells            # m: bits, or counters
        self.num_hashes = num_hashes
        self.seed = seed
        self.hash_scheme = hash_scheme
        self.counter_bits = counter_bits      # 1 for the bit filter
        self.capacity = capacity              # None when built by size
        self.part_bytes = part_bytes
        self.fpr = fpr                        # the target rate; None when built by size
        self.check()

    def check(self) -> None:
        if self.layout not in LAYOUT_IDS:
            raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUT_IDS))}, got {self.layout!r}")
        _format.hash_scheme_id(self.hash_scheme)
        if self.structure == "counting":
            if self.layout == "blocked":
                raise ValueError("counting filters support the 'classic' and 'partitioned' layouts only")
            if self.counter_bits not in (4, 8):
                raise ValueError(f"a served counting filter has 4- or 8-bit counters (BITFIELD u4/u8 are "
                                 f"byte-identical with the local packing), got counter_bits={self.counter_bits!r}")
        for field, value, low, high in (("num_hashes", self.num_hashes, 1, 16 if self.layout == "blocked" else 64),
                                        ("seed", self.seed, 0, 2 ** 64 - 1),
                                        ("num_cells", self.num_cells, 1, 2 ** 48),
                                        ("part_bytes", self.part_bytes, 64, MAX_PART_BYTES)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{field} must be an int, got {type(value).__name__} ({value!r})")
            if not low <= value <= high:
                raise ValueError(f"{field} must be in [{low}, {high}], got {value}")
        if self.part_bytes % 64:
            raise ValueError(f"part_bytes must be a multiple of 64, got {self.part_bytes}")
        if self.layout == "blocked" and self.num_cells % 512:
            raise ValueError(f"a blocked filter needs num_cells divisible by 512, got {self.num_cells}")
        if self.layout == "partitioned" and self.num_cells < self.num_hashes:
            raise ValueError(f"the partitioned layout needs at least num_hashes ({self.num_hashes}) positions, "
                             f"got {self.num_cells}")

    @property
    def nbytes(self) -> int:
        """Bytes of the local payload: whole 64-bit words."""
        return (self.num_cells * self.counter_bits + 63) // 64 * 8

    @property
    def num_parts(self) -> int:
        return max(1, -(-self.nbytes // self.part_bytes))

    def part_length(self, index: int) -> int:
        return min(self.part_bytes, self.nbytes - index * self.part_bytes)

    def to_fields(self) -> dict:
        return {"format": "bloomwise", "format_version": str(FORMAT_VERSION), "structure": self.structure,
                "layout": self.layout, "num_cells": str(self.num_cells), "num_hashes": str(self.num_hashes),
                "seed": str(self.seed), "hash_scheme": self.hash_scheme, "counter_bits": str(self.counter_bits),
                "capacity": "" if self.capacity is None else str(self.capacity), "part_bytes": str(self.part_bytes),
                "fpr": "" if self.fpr is None else repr(float(self.fpr))}

    @classmethod
    def from_fields(cls, name: str, raw: dict) -> "Geometry":
        """Parse ``name:meta`` (untrusted): FormatError naming the field that is missing or wrong."""
        fields = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                  for k, v in raw.items()}
        if fields.get("format") != "bloomwise":
            raise FormatError(f"{meta_key(name)} is not the metadata of a bloomwise filter "
                              f"(format={fields.get('format')!r})")
        version = fields.get("format_version")
        if version not in CELLS_FIELD:
            raise FormatError(f"{meta_key(name)} has format_version {version!r}; this bloomwise reads versions "
                              f"{', '.join(CELLS_FIELD)}")
        cells_field = CELLS_FIELD[version]
        missing = [f if f != "num_cells" else cells_field for f in cls.FIELDS
                   if (f if f != "num_cells" else cells_field) not in fields]
        if missing:
            raise FormatError(f"{meta_key(name)} lacks the field(s) {', '.join(missing)}")

        def integer(field):
            text = fields[field]
            if not (text.isascii() and text.isdigit()) or len(text) > 20:
                raise FormatError(f"{meta_key(name)} field {field} must be a non-negative integer, got {text!r}")
            return int(text)

        if fields["structure"] not in STRUCTURES:
            raise FormatError(f"{meta_key(name)} names an unknown structure {fields['structure']!r}")
        fpr = None
        if fields.get("fpr"):  # optional: filters built by size have none
            try:
                fpr = float(fields["fpr"])
            except ValueError:
                fpr = math.nan
            if not 0.0 < fpr < 1.0:
                raise FormatError(f"{meta_key(name)} field fpr must be a rate in (0, 1), got {fields['fpr']!r}")
        try:
            return cls(fields["structure"], fields["layout"], integer(cells_field), integer("num_hashes"),
                       integer("seed"), fields["hash_scheme"], integer("counter_bits"),
                       integer("capacity") if fields["capacity"] else None, integer("part_bytes"), fpr)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, FormatError):
                raise
            raise FormatError(f"{meta_key(name)} describes an impossible filter: {exc}") from None

    def differences(self, other: "Geometry") -> list:
        ours, theirs = self.to_fields(), other.to_fields()
        return [f"{f}: {theirs[f] or 'none'} on the server, {ours[f] or 'none'} asked for"
                for f in ours if ours[f] != theirs[f] and not (f in ("capacity", "fpr") and not ours[f])]


def read_meta(client, name: str) -> Optional[dict]:
    """The fields of ``name:meta`` (None when it does not exist)."""
    return meta_fields(call_server(client, f"reading {meta_key(name)}", client.hgetall, meta_key(name)))



def meta_fields(raw) -> Optional[dict]:
    """A ``HGETALL`` reply (a dict, or the flat list of RESP2) as a dict; None when empty."""
    if isinstance(raw, list):
        raw = dict(zip(raw[::2], raw[1::2]))
    return raw or None


def check_stored(name: str, geometry: Geometry, stored: Optional[dict]) -> None:
    """Check that the metadata ``stored`` under ``name`` describes ``geometry`` (FilterMismatchError naming every
    parameter that differs; FormatError when it is damaged)."""
    if stored is None:
        raise ServedFilterError(f"{meta_key(name)} vanished right after it was created (deleted by another client?)")
    existing = Geometry.from_fields(name, stored)
    if existing.structure != geometry.structure:
        raise FilterMismatchError(f"{name!r} on the server is a {existing.structure} filter, not a "
                                  f"{geometry.structure} filter")
    diff = geometry.differences(existing)
    if diff:
        raise FilterMismatchError(f"a filter named {name!r} already exists with other parameters: "
                                  + "; ".join(diff))


def create_meta_command(name: str, geometry: Geometry) -> list:
    """The EVAL that creates ``name:meta`` for ``geometry`` unless it exists (atomically)."""
    fields = geometry.to_fields()
    fields["keys_added"] = "0"
    return [b"EVAL", CREATE_META_SCRIPT.encode(), b"1", meta_key(name).encode(),
            *[x.encode() for item in fields.items() for x in item]]
