"""A small, bounded reader (and a minimal writer) of Thrift's compact protocol, for Parquet's metadata.

Parquet stores its footer (``FileMetaData``) and each Bloom filter's header in Thrift's compact protocol (Apache
Thrift, ``thrift-compact-protocol.md``). This module decodes any struct generically, without a schema: a struct
becomes a dict from field id to value (int for i8/i16/i32/i64 and enums, bool, float, bytes for binary/string,
list for list/set, dict for struct, a list of (key, value) pairs for map). The callers check the types they
need.

Encoding, in short: a field header byte holds the field-id delta (high nibble; 0 means a zigzag varint i16 id
follows) and the type (low nibble); integers are zigzag varints; binary is a varint length and the bytes; a list
header holds its size (high nibble, 15 = a varint follows) and element type; a map has a varint size and one
byte of key and value types; a struct ends with a 0 byte.

The input is untrusted: every length is checked against the bytes that remain before anything is allocated,
varints are at most 10 bytes, and nesting is at most ``MAX_DEPTH`` deep. Violations raise ThriftError.

>>> data = encode_struct({1: I32(1024), 2: Struct({1: Struct({})})})
>>> decode_struct(data, 0)
({1: 1024, 2: {1: {}}}, 8)
"""
from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = ["ThriftError", "decode_struct", "encode_struct", "I32", "I64", "Binary", "Struct"]

MAX_DEPTH = 32

STOP, BOOL_TRUE, BOOL_FALSE, BYTE, I16, I32_TYPE, I64_TYPE, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)


class ThriftError(ValueError):
    """The bytes are not a well-formed compact-protocol struct."""


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int):
        self.data = data
        self.pos = pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ThriftError(f"truncated at byte {self.pos}")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        result = shift = 0
        for _ in range(10):
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
        raise ThriftError(f"a varint longer than 10 bytes at byte {self.pos}")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, count: int) -> bytes:
        if count < 0 or count > len(self.data) - self.pos:
            raise ThriftError(f"a length of {count} at byte {self.pos} runs past the end ({len(self.data)} bytes)")
        value = self.data[self.pos:self.pos + count]
        self.pos += count
        return value

    def value(self, kind: int, depth: int):
        if kind in (BOOL_TRUE, BOOL_FALSE):  # only in containers: one byte, 1 = true (2, or 0, false)
            return self.byte() == BOOL_TRUE
        if kind == BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if kind in (I16, I32_TYPE, I64_TYPE):
            return self.zigzag()
        if kind == DOUBLE:
            return struct.unpack("<d", self.take(8))[0]
        if kind == BINARY:
            return self.take(self.varint())
        if kind in (LIST, SET):
            return self.sequence(depth + 1)
        if kind == MAP:
            return self.mapping(depth + 1)
        if kind == STRUCT:
            return self.struct(depth + 1)
        raise ThriftError(f"unknown compact type {kind} at byte {self.pos}")

    def _count(self, count: int) -> int:
        # Every element takes at least one byte: a count beyond the bytes left is damage, refused before any work.
        if count > len(self.data) - self.pos:
            raise ThriftError(f"a container of {count} elements at byte {self.pos} cannot fit the "
                              f"{len(self.data) - self.pos} bytes left")
        return count

    def sequence(self, depth: int) -> list:
        self._check_depth(depth)
        head = self.byte()
        count, kind = head >> 4, head & 0x0F
        if count == 15:
            count = self.varint()
        return [self.value(kind, depth) for _ in range(self._count(count))]

    def mapping(self, depth: int) -> list:
        """A map as a list of (key, value) pairs (keys may be structs, which a dict could not hold)."""
        self._check_depth(depth)
        count = self.varint()
        if count == 0:
            return []
        kinds = self.byte()
        self._count(2 * count)
        return [(self.value(kinds >> 4, depth), self.value(kinds & 0x0F, depth)) for _ in range(count)]

    def struct(self, depth: int) -> dict:
        self._check_depth(depth)
        fields, last = {}, 0
        while True:
            head = self.byte()
            kind = head & 0x0F
            if kind == STOP:
                if head != 0:
                    raise ThriftError(f"a stop byte with bits set ({head:#x}) at byte {self.pos - 1}")
                return fields
            delta = head >> 4
            field = last + delta if delta else self.zigzag()
            if not -32768 <= field <= 32767:
                raise ThriftError(f"field id {field} is not an i16 at byte {self.pos}")
            if kind in (BOOL_TRUE, BOOL_FALSE):
                value = kind == BOOL_TRUE
            else:
                value = self.value(kind, depth)
            fields[field] = value
            last = field

    @staticmethod
    def _check_depth(depth: int) -> None:
        if depth > MAX_DEPTH:
            raise ThriftError(f"nested deeper than {MAX_DEPTH} levels")


def decode_struct(data: bytes, pos: int = 0):
    """(the struct at ``data[pos:]`` as {field id: value}, the position just past it); ThriftError if damaged."""
    reader = _Reader(bytes(data), pos)
    return reader.struct(0), reader.pos


# ---- writing: just what a Bloom filter header needs -------------------------------------------------------------
class I32(NamedTuple):
    value: int


class I64(NamedTuple):
    value: int


class Binary(NamedTuple):
    value: bytes


class Struct(NamedTuple):
    fields: dict


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zigzag(n: int, bits: int) -> bytes:
    return _varint((n << 1) ^ (n >> (bits - 1)))


def encode_struct(fields: dict) -> bytes:
    """A struct in the compact protocol; values typed as I32, I64, Binary or Struct, written in field-id order."""
    out, last = bytearray(), 0
    for field in sorted(fields):
        value = fields[field]
        kind = {I32: I32_TYPE, I64: I64_TYPE, Binary: BINARY, Struct: STRUCT}.get(type(value))
        if kind is None:
            raise TypeError(f"field {field}: cannot encode {type(value).__name__}")
        delta = field - last
        out += bytes([delta << 4 | kind]) if 0 < delta <= 15 else bytes([kind]) + _zigzag(field, 16)
        if kind == I32_TYPE:
            out += _zigzag(value.value, 32)
        elif kind == I64_TYPE:
            out += _zigzag(value.value, 64)
        elif kind == BINARY:
            out += _varint(len(value.value)) + bytes(value.value)
        else:
            out += encode_struct(value.fields)
        last = field
    out.append(STOP)
    return bytes(out)
