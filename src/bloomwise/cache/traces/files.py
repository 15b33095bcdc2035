"""Opening trace files: compression chosen by the file's extension, ``-`` for standard input or output.

``.gz``, ``.bz2``, ``.xz`` and ``.lzma`` use the standard library; ``.zst`` (Zstandard, the compression of
libCacheSim's traces) needs the ``zstandard`` package (``pip install "bloomwise[zstd]"``), imported only when
such a file is opened.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import sys
import zlib

__all__ = ["COMPRESSED_EXTENSIONS", "display_name", "open_binary", "read_errors", "compression_extension",
           "ZstdFrames"]

#: Extensions read and written compressed.
COMPRESSED_EXTENSIONS = (".gz", ".bz2", ".xz", ".lzma", ".zst")
_STANDARD_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open, ".lzma": lzma.open}
#: Writing .gz uses zlib's default level 6: gzip.open's default, 9, took 4.7x the CPU time for 10% fewer bytes
#: on a Squid log.
GZIP_WRITE_LEVEL = 6
#: The largest Zstandard window a trace may ask for (bytes): the decoder's memory is bounded by it (zstd's own
#: default limit, 2**27).
ZSTD_MAX_WINDOW = 1 << 27
_STREAM_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)


def display_name(source) -> str:
    """How messages name a trace source: its path, ``<stdin>``, or a file object's name."""
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        return "<stdin>" if name == "-" else name
    return getattr(source, "name", None) or f"<{type(source).__name__}>"


def compression_extension(name: str) -> str | None:
    """The compression extension ``name`` ends with (lower case), or None."""
    extension = os.path.splitext(name)[1].lower()
    return extension if extension in COMPRESSED_EXTENSIONS else None


def _zstandard():
    try:
        import zstandard  # optional: only .zst traces need it
    except ImportError:
        raise ImportError('reading or writing .zst files needs the zstandard package: '
                          'pip install "bloomwise[zstd]" (or pip install zstandard)') from None
    return zstandard


def open_binary(source, mode: str):
    """``(stream, owned)`` for reading (``"rb"``) or writing (``"wb"``); owned streams are closed by their user.

    :raises FileNotFoundError: reading a path that does not exist.
    :raises ImportError: a ``.zst`` file without the zstandard package (the message says what to install).
    """
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        if name == "-":
            std = sys.stdin if mode == "rb" else sys.stdout
            return getattr(std, "buffer", std), False
        if mode == "rb" and not os.path.exists(name):
            raise FileNotFoundError(2, "no such trace file", name)
        extension = compression_extension(name)
        if extension == ".zst":
            zstandard = _zstandard()
            raw = open(name, mode)
            try:
                if mode == "rb":
                    return io.BufferedReader(ZstdFrames(raw, zstandard), 1 << 18), True
                return zstandard.ZstdCompressor().stream_writer(raw, closefd=True), True
            except BaseException:
                raw.close()
                raise
        if extension == ".gz" and mode == "wb":
            return gzip.open(name, mode, compresslevel=GZIP_WRITE_LEVEL), True
        return _STANDARD_OPENERS.get(extension, open)(name, mode), True
    return source, False


class ZstdFrames(io.RawIOBase):
    """The decompressed bytes of a Zstandard stream of one or more frames, read in bounded memory, with an error
    for a truncated stream (zstandard's own stream reader ends silently at the last whole block).

    The compressed input is fed :data:`INPUT_BYTES` at a time; a zstd block decodes to at most 128 KiB and takes at
    least 3 bytes, so one step holds at most INPUT_BYTES / 3 * 128 KiB (22 MB), whatever the file claims.
    """

    INPUT_BYTES = 512

    def __init__(self, raw, zstandard):
        self._raw = raw
        self._decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
        self._frame = None  # the decompressor of the frame being read, None between frames
        self._pending, self._offset = b"", 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._offset >= len(self._pending):
            data = self._raw.read(self.INPUT_BYTES)
            if not data:
                if self._frame is not None:
                    raise OSError("truncated zstd stream: its last frame is incomplete")
                return 0
            self._pending, self._offset = self._feed(data), 0
        count = min(len(buffer), len(self._pending) - self._offset)
        buffer[:count] = self._pending[self._offset:self._offset + count]
        self._offset += count
        return count

    def _feed(self, data: bytes) -> bytes:
        out = []
        while data:
            if self._frame is None:
                self._frame = self._decompressor.decompressobj()
            out.append(self._frame.decompress(data))
            if self._frame.eof:  # the frame ended inside data: the rest starts the next one
                data, self._frame = self._frame.unused_data, None
            else:
                data = b""
        return b"".join(out)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        # the decoder holds up to the frame's window (128 MiB for libCacheSim's 10M traces): released now, not when
        # the reader that owns this stream is collected (a reader and its generator form a cycle)
        self._decompressor = self._frame = None
        self._pending = b""
        super().close()


def read_errors() -> tuple:
    """The exceptions a (decompressing) stream raises on damaged data: OSError, EOFError, lzma's and zlib's,
    and zstandard's when that package is loaded."""
    zstandard = sys.modules.get("zstandard")
    return _STREAM_ERRORS + ((zstandard.ZstdError,) if zstandard is not None else ())
