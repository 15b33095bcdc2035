"""What a save leaves behind when it is killed (docs/format.md, "Saving"): stale temporaries of a target are removed by
its next save, a running save's temporary never is, and the command line handles SIGTERM like Ctrl-C."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from bloomwise import BloomFilter
from bloomwise import _format as fmt


def _temporaries(directory, name="f.bloom"):
    return sorted(p for p in os.listdir(directory) if p.startswith(f".{name}.") and p.endswith(".tmp"))


# A child that saves a filter and is killed by `signal` after the first chunk of the file is written.
_KILLED_SAVE = textwrap.dedent("""
    import os, signal, sys
    from bloomwise import BloomFilter, _format
    written = _format._write_all
    def write_then_die(fd, data):
        written(fd, data)
        os.kill(os.getpid(), int(sys.argv[2]))
    _format._write_all = write_then_die
    f = BloomFilter(100_000, 0.01)
    f.update(range(1000))
    f.save(sys.argv[1])
""")


def test_sigkill_during_save_leaves_a_temporary_that_the_next_save_removes(tmp_path):
    target = tmp_path / "f.bloom"
    BloomFilter.from_size(4096, 3).save(target)
    old = target.read_bytes()
    done = subprocess.run([sys.executable, "-c", _KILLED_SAVE, str(target), str(int(signal.SIGKILL))],
                          capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    assert target.read_bytes() == old  # the old file is intact
    stale = _temporaries(tmp_path)
    assert len(stale) == 1 and os.path.getsize(tmp_path / stale[0]) > 0
    fresh = BloomFilter.from_size(8192, 4)
    fresh.add("x")
    fresh.save(target)
    assert _temporaries(tmp_path) == []
    assert BloomFilter.load(target) == fresh


def test_a_running_saves_temporary_is_left_alone(tmp_path):
    target = tmp_path / "f.bloom"
    live = tmp_path / ".f.bloom.0123456789ab.tmp"
    live.write_bytes(b"partial")
    fd = os.open(live, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a save in progress holds it
        BloomFilter.from_size(1024, 3).save(target)
        assert live.exists()
    finally:
        os.close(fd)
    assert fmt.remove_stale_temporaries(target) == [str(live)]
    assert not live.exists()


def test_only_this_targets_temporaries_are_removed(tmp_path):
    others = [".g.bloom.0123456789ab.tmp", ".f.bloom.tmp", ".f.bloom.xyz.tmp", ".f.bloom.0123456789AB.tmp",
              "f.bloom.0123456789ab.tmp", ".f.bloom.0123456789ab.tmp.keep"]
    for name in others:
        (tmp_path / name).write_bytes(b"data")
    empty = tmp_path / ".f.bloom.aaaaaaaaaaaa.tmp"
    empty.write_bytes(b"")  # a writer may be between creating and locking it: too young to remove
    BloomFilter.from_size(1024, 3).save(tmp_path / "f.bloom")
    assert sorted(os.listdir(tmp_path)) == sorted(others + [empty.name, "f.bloom"])
    old = os.path.getmtime(empty) - 3600
    os.utime(empty, (old, old))
    fmt.remove_stale_temporaries(tmp_path / "f.bloom")
    assert not empty.exists()


# `bloomwise build` whose save is hit by SIGTERM (or SIGINT) after the first write.
_SIGNALLED_BUILD = textwrap.dedent("""
    import os, sys
    from bloomwise import _format
    from bloomwise.cli import main
    written = _format._write_all
    def write_then_signal(fd, data):
        written(fd, data)
        os.kill(os.getpid(), int(sys.argv[3]))
    _format._write_all = write_then_signal
    sys.exit(main(["build", sys.argv[1], "-o", sys.argv[2]]))
""")


@pytest.mark.parametrize("signum, code, word", [(signal.SIGTERM, 143, "terminated"),
                                                (signal.SIGINT, 130, "interrupted")])
def test_cli_cleans_up_on_sigterm_like_on_ctrl_c(tmp_path, signum, code, word):
    keys = tmp_path / "keys.txt"
    keys.write_text("".join(f"key{i}\n" for i in range(1000)))
    done = subprocess.run([sys.executable, "-c", _SIGNALLED_BUILD, str(keys), str(tmp_path / "f.bloom"),
                           str(int(signum))], capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert f"bloomwise: {word}" in done.stderr and "Traceback" not in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["keys.txt"]  # no target, no temporary
