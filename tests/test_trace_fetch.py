"""`bloomwise trace fetch`: real traces from package registries (bloomwise.cache.traces.fetch). The download,
extraction and checksum are tested offline with a fake apt-get and a Debian package the test builds; the real
fetches run when the registries can be reached (else they skip, saying so)."""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import stat
import tarfile

import pytest

from bloomwise.cache.simulation import SimulationConfig, simulate
from bloomwise.cache.traces import (REAL_TRACES, FetchError, RealTrace, assigned_requests, fetch, fetched_path,
                                    open_trace)
from command_support import run_command as _run
from real_traces import fetched_trace, real_trace

SQUID_LINES = (b"1198298239.740    388 127.0.0.1 TCP_MISS/301 631 GET http://www.example.org/ - DIRECT/1.2.3.4 "
               b"text/html\n") * 3
MEMBER = "./usr/share/doc/tiny/examples/example.log.gz"


def _ar(members: list[tuple[str, bytes]]) -> bytes:
    """An ar archive (the container of a .deb)."""
    out = [b"!<arch>\n"]
    for name, data in members:
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}".encode() + b"`\n"
        out += [header, data, b"\n" if len(data) % 2 else b""]
    return b"".join(out)


def _deb(member_data: bytes) -> bytes:
    data_tar = io.BytesIO()
    with tarfile.open(fileobj=data_tar, mode="w:xz") as tar:
        info = tarfile.TarInfo(MEMBER)
        info.size = len(member_data)
        tar.addfile(info, io.BytesIO(member_data))
    return _ar([("debian-binary", b"2.0\n"), ("control.tar.xz", b"not read"), ("data.tar.xz", data_tar.getvalue())])


@pytest.fixture
def fake_apt(tmp_path, monkeypatch):
    """An apt-get on PATH that 'downloads' a .deb the test built (into the current directory, as apt-get download
    does) and logs each call."""
    member = gzip.compress(SQUID_LINES, mtime=0)
    package = tmp_path / "repo" / "tiny_1.0_all.deb"
    package.parent.mkdir()
    package.write_bytes(_deb(member))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "apt-get"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'calls'}\ncp {package} .\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    entry = RealTrace("tiny", "a tiny test trace", registry="debian", requirement="tiny=1.0",
                      archive="tiny_1.0_all.deb", member=MEMBER, file_name="tiny.log.gz",
                      sha256=hashlib.sha256(member).hexdigest(), size=len(member), requests=3, format="squid")
    return {"tiny": entry}, tmp_path / "calls"


def test_fetch_extracts_checks_and_keeps(tmp_path, fake_apt):
    catalogue, calls = fake_apt
    path = fetch("tiny", tmp_path / "data", catalogue)
    assert path == str(tmp_path / "data" / "traces" / "tiny.log.gz")
    assert gzip.decompress(open(path, "rb").read()) == SQUID_LINES
    assert calls.read_text() == "download tiny=1.0\n"
    assert [r.url for r in open_trace(path)] == ["http://www.example.org/"] * 3
    assert fetch("tiny", tmp_path / "data", catalogue) == path  # already here: no second download
    assert calls.read_text() == "download tiny=1.0\n"
    assert fetched_path("tiny", tmp_path / "data", catalogue) == path
    os.remove(path)  # the kept package is extracted again, without a download
    assert fetch("tiny", tmp_path / "data", catalogue) == path and calls.read_text() == "download tiny=1.0\n"


def test_fetch_refuses_a_file_that_is_not_the_pinned_one(tmp_path, fake_apt):
    catalogue, calls = fake_apt
    wrong = {"tiny": dataclasses.replace(catalogue["tiny"], sha256="0" * 64)}
    with pytest.raises(FetchError, match="has SHA-256 [0-9a-f]{64}, not the pinned 0000"):
        fetch("tiny", tmp_path / "data", wrong)
    assert os.listdir(tmp_path / "data" / "traces") == []  # nothing kept, not even a partial file
    assert os.listdir(tmp_path / "data" / "downloads") == []  # the package is downloaded again next time
    smaller = {"tiny": dataclasses.replace(catalogue["tiny"], size=catalogue["tiny"].size - 1)}
    with pytest.raises(FetchError, match=r"is \d+ bytes, not the \d+ expected"):
        fetch("tiny", tmp_path / "data", smaller)


def test_fetch_without_the_client(tmp_path, fake_apt, monkeypatch):
    catalogue, _ = fake_apt
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(FetchError, match=r"tiny comes from Debian's package tiny=1.0, and apt-get is not installed"):
        fetch("tiny", tmp_path / "data", catalogue)


def test_fetch_of_a_damaged_package(tmp_path, fake_apt):
    catalogue, _ = fake_apt
    (tmp_path / "repo" / "tiny_1.0_all.deb").write_bytes(b"!<arch>\n" + b"x" * 100)
    with pytest.raises(FetchError, match="damaged ar header"):
        fetch("tiny", tmp_path / "data", catalogue)


def test_fetch_offline(tmp_path, monkeypatch):
    """pip pointed at a closed loopback port, as when the index cannot be reached: one clear error."""
    for name, value in (("PIP_CONFIG_FILE", os.devnull), ("PIP_INDEX_URL", "http://127.0.0.1:9/simple"),
                        ("PIP_EXTRA_INDEX_URL", ""), ("PIP_FIND_LINKS", ""), ("PIP_RETRIES", "0"),
                        ("PIP_TIMEOUT", "2"), ("PIP_NO_CACHE_DIR", "1")):
        monkeypatch.setenv(name, value)
    with pytest.raises(FetchError, match=r"could not download libcachesim==0.3.5 with pip \(offline, or the "
                                         r"registry cannot be reached\?\): ERROR: .*libcachesim"):
        fetch("cloudphysics", tmp_path / "data")


def test_unknown_name():
    with pytest.raises(FetchError, match="no real trace named 'twitter': choose one of twitter-cluster52, "
                                         "twitter-cluster52-10m, cloudphysics, squidview-example"):
        fetch("twitter")


def test_cli_fetch_list_and_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BLOOMWISE_DATA", str(tmp_path / "data"))
    code, out, _ = _run(capsys, "trace", "fetch", "--list")
    assert code == 0 and out.splitlines()[0] == f"real traces (fetched into {tmp_path / 'data' / 'traces'}):"
    assert [line.split()[0] for line in out.splitlines()[1:]] == list(REAL_TRACES)
    assert all(line.endswith("not fetched") for line in out.splitlines()[1:])
    for argv, message in ((["fetch"], "fetch needs a NAME, one of twitter-cluster52"),
                          (["fetch", "nosuch"], "no real trace named 'nosuch'"),
                          (["fetch", "cloudphysics", "--list"], "give either fetch NAME or fetch --list"),
                          (["--list"], "--list and a NAME go with fetch")):
        code, _, err = _run(capsys, "trace", *argv)
        assert code == 2 and message in err and len(err.splitlines()) == 1, err
    code, _, err = _run(capsys, "trace", "cloudphysics")
    assert code == 1 and "cloudphysics is a real trace that has not been fetched yet: run `bloomwise trace " \
                         "fetch cloudphysics`" in err


def test_cli_fetch_offline_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BLOOMWISE_DATA", str(tmp_path / "data"))
    for name, value in (("PIP_CONFIG_FILE", os.devnull), ("PIP_INDEX_URL", "http://127.0.0.1:9/simple"),
                        ("PIP_FIND_LINKS", ""), ("PIP_RETRIES", "0"), ("PIP_TIMEOUT", "2"), ("PIP_NO_CACHE_DIR", "1")):
        monkeypatch.setenv(name, value)
    code, out, err = _run(capsys, "trace", "fetch", "twitter-cluster52")
    assert code == 1 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("bloomwise trace: could not download libcachesim==0.3.5 with pip")


# -- the real traces ------------------------------------------------------------------------------------------------

def test_real_squid_log_replays(capsys):
    """Debian squidview's example access.log: 94 requests of one client, fetched with apt-get."""
    path = real_trace("squidview-example")
    code, out, _ = _run(capsys, "trace", "squidview-example", "--json")
    info = json.loads(out)
    assert code == 0 and (info["requests"], info["malformed_lines"], info["distinct_get_urls"]) == (94, 0, 71)
    results = simulate(lambda: open_trace(path), ["none", "icp"], SimulationConfig(num_proxies=2, cache_size=1 << 20))
    assert [(r.requests, r.local_hits, r.remote_hits) for r in results] == [(94, 23, 0), (94, 23, 0)]
    code, out, _ = _run(capsys, "simulate", "--trace", "squidview-example", "--proxies", "2", "--policy", "none,icp",
                        "--cache-size", "1MiB", "--json")  # the name, as a path would be
    assert code == 0 and [(r["requests"], r["local_hit_ratio"]) for r in json.loads(out)] == [(94, 23 / 94)] * 2


def test_real_cloudphysics_slice_replays(capsys):
    """The first 20,000 requests of the CloudPhysics trace over 4 proxies (round-robin), without cooperation and
    with ICP: exact counts (the file is pinned by its SHA-256; the summary policies' counts are left to the
    engine's own tests, which change with their sizing rules)."""
    path = real_trace("cloudphysics")
    reader = open_trace(path)
    assert reader.format == "oracle-general"
    config = SimulationConfig(num_proxies=4, cache_size=1 << 20)
    results = simulate(lambda: assigned_requests(open_trace(path), "round-robin", 4, limit=20_000),
                       ["none", "icp"], config)
    got = [(r.policy, r.requests, r.local_hits, r.remote_hits) for r in results]
    assert got == [("none", 20_000, 2794, 0), ("icp", 20_000, 2871, 1316)], got
    code, out, _ = _run(capsys, "trace", "cloudphysics", "--json", "--proxies", "4", "--assign", "round-robin")
    info = json.loads(out)
    assert (info["requests"], info["distinct_get_urls"], info["malformed_lines"]) == (113_872, 48_974, 0)



def test_real_twitter_csv_when_fetched():
    """The 1M-request Twitter csv (only when fetched: an 81 MB download the tests do not make)."""
    path = fetched_trace("twitter-cluster52")
    reader = open_trace(path)
    first = [r[:5] for r in assigned_requests(reader, "random", 4, limit=3)]
    assert [(r[0], r[3], r[4]) for r in first] == [(0.0, "13053225291711363978", 737),
                                                   (0.0, "61177148907475485", 248), (0.0, "286355432205858634", 567)]


def test_real_twitter_10m_when_fetched():
    pytest.importorskip("zstandard", reason="reading the .zst trace needs the zstandard package")
    path = fetched_trace("twitter-cluster52-10m")
    reader = open_trace(path)
    assert reader.format == "csv" and [r.size for r in assigned_requests(reader, "random", 2, limit=3)] == [
        737, 248, 567]
