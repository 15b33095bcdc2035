"""Reading keys and filters for the subcommands: one key per line, `-` for standard input."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from typing import BinaryIO, Iterator, List

from bloomwise._loading import load, structure_of
from bloomwise.cli import EXIT_FAILURE, CommandError
from bloomwise.errors import FormatError


def open_keys(path: str) -> BinaryIO:
    """A binary stream of keys: the file at `path`, or standard input for `-`."""
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as exc:
        raise CommandError(f"cannot read keys from {path}: {exc.strerror}") from None


def strip_newline(line: bytes) -> bytes:
    """A line without its terminator (\\n or \\r\\n). Keys are the bytes of the line: str keys are UTF-8."""
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line


def count_lines(path: str) -> int:
    """Lines of a key file (a last line without a newline counts too), read in 1 MiB blocks."""
    lines, last = 0, b"\n"
    with open_keys(path) as stream:
        while True:
            block = stream.read(1 << 20)
            if not block:
                break
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


@contextmanager
def spool_stdin() -> Iterator[str]:
    """Copy standard input to a temporary file (removed afterwards) and yield its path."""
    handle, path = tempfile.mkstemp(prefix="bloomwise-keys-", suffix=".txt")
    try:
        with os.fdopen(handle, "wb") as spool:
            shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
        yield path
    finally:
        os.unlink(path)


def iter_key_chunks(path: str, size: int = 65536) -> Iterator[List[bytes]]:
    """Keys in lists of `size`, so huge inputs stream through."""
    with open_keys(path) as stream:
        chunk: List[bytes] = []
        for line in stream:
            chunk.append(strip_newline(line))
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def is_bloomwise_file(path: str) -> bool:
    """Whether the file at ``path`` starts like a bloomwise file (its header names a structure); OSError if it
    cannot be read."""
    try:
        structure_of(path)
    except FormatError:
        return False
    return True


def load_filter(path: str):
    """A saved filter of any structure (the file says which), memory-mapped read-only where the structure allows it;
    CommandError with the reason when it cannot be read."""
    try:
        return load(path, mmap=True)
    except FileNotFoundError:
        raise CommandError(f"no such filter file: {path}") from None
    except IsADirectoryError:
        raise CommandError(f"{path} is a directory, not a filter file") from None
    except PermissionError:
        raise CommandError(f"permission denied: {path}") from None
    except FormatError as exc:
        raise CommandError(f"{path} is not a usable bloomwise filter: {exc}", EXIT_FAILURE) from None
    except ValueError as exc:  # e.g. built from explicit hash functions or with a key function
        raise CommandError(f"cannot use {path} from the command line: {exc}") from None


def release(structure) -> None:
    """Unmap what ``load_filter`` mapped (structures that were read into memory have nothing to release)."""
    close = getattr(structure, "close", None)
    if close is not None:
        close()


class _NoProgress:
    """What ``progress()`` returns without tqdm: the same calls, no output."""

    def update(self, count: int) -> None:
        pass

    def close(self) -> None:
        pass


def progress(total: int, label: str):
    """A progress bar on stderr (tqdm, from the ``progress`` extra), shown only when stderr is a terminal; without
    tqdm, nothing is shown. ``update(n)`` adds n keys, ``close()`` ends the line."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoProgress()
    return tqdm(total=total, desc=label, unit=" keys", unit_scale=True, file=sys.stderr, disable=None, leave=False)
