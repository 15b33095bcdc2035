"""The lines of a trace file, a block at a time, in bounded memory (the text readers' input)."""
from __future__ import annotations

import io

from bloomwise.cache.traces.files import read_errors
from bloomwise.cache.traces.records import TraceError

__all__ = ["LineBlocks", "MAX_LINE_BYTES", "BLOCK_BYTES", "BAD_LINE", "decode_line"]

#: A line longer than this (bytes, newline included) is malformed; it is skipped without being held in memory.
MAX_LINE_BYTES = 64 * 1024
#: Bytes (or characters) read at a time.
BLOCK_BYTES = 256 * 1024
#: Stands for a line that could not be read (a real line never contains a newline).
BAD_LINE = "\n"


class LineBlocks:
    """The lines of a binary or text stream, a block at a time, in bounded memory.

    ``next()`` returns the next list of lines (without their newlines; None at the end). A line that is longer
    than MAX_LINE_BYTES or not UTF-8 is returned as ``BAD_LINE``, and its reason is in ``reasons`` (index in the list
    -> reason). An over-long line is dropped as it is read, never held whole.
    """

    def __init__(self, stream, path: str):
        self._read = stream.read
        self._text = isinstance(stream, io.TextIOBase)
        self._newline = "\n" if self._text else b"\n"
        self._carry = "" if self._text else b""
        self._over_long = False  # inside a line already known to be too long
        self._eof = False
        self.path = path
        self.reasons: dict[int, str] = {}
        self._errors = read_errors()

    def _read_block(self):
        try:
            return self._read(BLOCK_BYTES)
        except UnicodeDecodeError as error:  # a text stream that is not UTF-8: nothing after it can be trusted
            raise TraceError(self.path, None, f"cannot read: not UTF-8 text ({error.reason})") from error
        except self._errors as error:
            raise TraceError(self.path, None, f"cannot read: {error}") from error

    def next(self) -> list[str] | None:
        chunk = self.next_chunk()
        return None if chunk is None else self.split_chunk(*chunk)

    def next_chunk(self):
        """The next ``(chunk, first_over_long)`` (None at the end): the text of whole lines joined by newlines
        (without the last newline; bytes for a binary stream), and whether its first line is the end of an
        over-long line. ``next()`` is ``chunk.split(newline)`` with the bad lines marked; use one or the other."""
        while not self._eof:
            data = self._read_block()
            if not data:
                self._eof = True
                if not self._carry and not self._over_long:
                    return None
                chunk, self._carry = self._carry, self._carry[:0]  # the last line has no newline
            else:
                cut = data.rfind(self._newline)
                if cut < 0:
                    if not self._over_long:
                        self._carry += data
                        if len(self._carry) > MAX_LINE_BYTES:
                            self._over_long, self._carry = True, self._carry[:0]
                    continue
                chunk, self._carry = self._carry + data[:cut], data[cut + 1:]
            first_over_long, self._over_long = self._over_long, False
            return chunk, first_over_long
        return None

    def split_chunk(self, chunk, first_over_long: bool) -> list[str]:
        """The lines of a chunk from :meth:`next_chunk`, as :meth:`next` returns them (``reasons`` set)."""
        reasons = self.reasons = {}
        if self._text:
            lines = chunk.split("\n")
        else:
            try:
                lines = chunk.decode("utf-8").split("\n")
            except UnicodeDecodeError:
                lines = []
                for index, raw in enumerate(chunk.split(b"\n")):
                    try:
                        lines.append(raw.decode("utf-8"))
                    except UnicodeDecodeError as error:
                        lines.append(BAD_LINE)
                        reasons[index] = f"not UTF-8 text ({error.reason} at byte {error.start})"
        too_long = _too_long()
        if first_over_long:
            lines[0], reasons[0] = BAD_LINE, too_long
        if len(chunk) > MAX_LINE_BYTES and max(map(len, lines)) > MAX_LINE_BYTES:
            for index, text in enumerate(lines):
                if len(text) > MAX_LINE_BYTES:
                    lines[index], reasons[index] = BAD_LINE, too_long
        return lines




def decode_line(raw: bytes, first_over_long: bool = False) -> tuple[str, str | None]:
    """One line of a chunk from :meth:`LineBlocks.next_chunk` as ``next()`` gives it: ``(text, None)``, or
    ``(BAD_LINE, reason)`` for a line that is not UTF-8 or is too long (``first_over_long``: the chunk's first
    line, the end of an over-long one)."""
    if first_over_long:
        return BAD_LINE, _too_long()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return BAD_LINE, f"not UTF-8 text ({error.reason} at byte {error.start})"
    if len(text) > MAX_LINE_BYTES:
        return BAD_LINE, _too_long()
    return text, None


def _too_long() -> str:
    return f"line longer than {MAX_LINE_BYTES} bytes"
