"""The command line as a user meets it: what `info` calls keys added, bounded memory in `build`, and every documented
exit code (0, 0 on a closed pipe, 1, 2, 130, 143)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc

import pytest

from bloomwise import BloomFilter
from bloomwise.cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _write_keys(path, count, repeat=1):
    with open(path, "w") as file:
        for _ in range(repeat):
            file.writelines(f"key{i:07d}\n" for i in range(count))
    return path


def test_info_reports_every_key_added(tmp_path, capsys):
    keys = _write_keys(tmp_path / "keys.txt", 100_000)
    out_path = tmp_path / "f.bloom"
    assert run(capsys, "build", keys, "-o", out_path)[0] == EXIT_OK
    code, out, _ = run(capsys, "info", out_path)
    assert code == EXIT_OK and "keys added      100,000 (every key added, repeats included)" in out
    code, out, _ = run(capsys, "info", out_path, "--json")
    info = json.loads(out)
    assert info["num_keys"] == 100_000 and "keys_added" not in info
    assert 99_000 < info["estimated_keys"] < 101_000  # the distinct keys, from the fill


def test_num_keys_counts_insertions_and_num_new_keys_the_changes():
    f = BloomFilter(1000, 0.01)
    f.update(["a", "b", "a"])
    f.add("a")
    f.add("c")
    assert (f.num_keys, f.num_new_keys) == (5, 3)
    loaded = BloomFilter.from_bytes(f.to_bytes())
    assert (loaded.num_keys, loaded.num_new_keys) == (5, 5)  # only num_keys is saved
    union = f | BloomFilter(1000, 0.01)
    assert union.num_keys == 5 and f.copy().num_keys == 5
    f.clear()
    assert (f.num_keys, f.num_new_keys) == (0, 0)


def test_build_counts_the_lines_in_bounded_memory(tmp_path, capsys):
    """Without --capacity, build counts the lines first instead of holding every key (the old way held them all:
    about 18 MB of Python objects for these 400,000 keys, against about 4 MB for one chunk)."""
    keys = _write_keys(tmp_path / "keys.txt", 400_000)
    out_path = tmp_path / "f.bloom"
    tracemalloc.start()
    try:
        code, out, err = run(capsys, "build", keys, "-o", out_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == EXIT_OK, err
    assert BloomFilter.load(out_path).capacity == 400_000
    assert peak < 9 * 2 ** 20, f"peak {peak / 2 ** 20:.1f} MiB"


def test_build_from_stdin_counts_the_keys_too(tmp_path):
    keys = _write_keys(tmp_path / "keys.txt", 3000, repeat=2)
    out_path = tmp_path / "f.bloom"
    with open(keys, "rb") as stdin:
        done = subprocess.run([sys.executable, "-m", "bloomwise", "build", "-", "-o", str(out_path)], stdin=stdin,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    f = BloomFilter.load(out_path)
    assert f.capacity == 6000 and f.num_keys == 6000 and "key0002999" in f
    assert [p for p in os.listdir(tmp_path) if p.startswith("bloomwise-keys-")] == []


@pytest.mark.parametrize("text, lines", [(b"", 0), (b"a", 1), (b"a\n", 1), (b"a\nb", 2), (b"\n\n", 2)])
def test_count_lines_matches_the_keys_read(tmp_path, text, lines):
    from bloomwise.cli._io import count_lines, iter_key_chunks
    path = tmp_path / "k.txt"
    path.write_bytes(text)
    assert count_lines(str(path)) == lines == sum(len(chunk) for chunk in iter_key_chunks(str(path)))


# ---- exit codes ------------------------------------------------------------------------------------------------------
def test_exit_usage_for_a_bad_seed(tmp_path, capsys):
    keys = _write_keys(tmp_path / "keys.txt", 10)
    code, _, err = run(capsys, "build", keys, "-o", tmp_path / "f.bloom", "--seed", "-1")
    assert code == EXIT_USAGE and "seed" in err and not (tmp_path / "f.bloom").exists()


def test_exit_failure_for_a_damaged_file(tmp_path, capsys):
    path = tmp_path / "f.bloom"
    BloomFilter.from_size(4096, 3).save(path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    code, _, err = run(capsys, "info", path)
    assert code == EXIT_FAILURE and "checksum" in err


def test_exit_interrupted_on_keyboard_interrupt(tmp_path, capsys, monkeypatch):
    from bloomwise.cli import build

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "_build", interrupted)
    keys = _write_keys(tmp_path / "keys.txt", 10)
    code, _, err = run(capsys, "build", keys, "-o", tmp_path / "f.bloom")
    assert code == EXIT_INTERRUPTED and "bloomwise: interrupted" in err


def test_exit_ok_when_the_reader_closes_the_pipe(tmp_path):
    """`bloomwise query ... | head -1`: the closed pipe is not an error."""
    path = tmp_path / "f.bloom"
    BloomFilter(100, 0.01).save(path)
    keys = _write_keys(tmp_path / "keys.txt", 200_000)
    process = subprocess.Popen([sys.executable, "-m", "bloomwise", "query", str(path), str(keys)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout.readline().startswith(b"key0000000\t")
        process.stdout.close()
        assert process.wait(timeout=60) == EXIT_OK
        assert b"Traceback" not in process.stderr.read()
    finally:
        process.kill()
        process.wait()
        process.stderr.close()


# ---- the progress bar ------------------------------------------------------------------------------------------------
def test_build_works_without_tqdm_and_prints_no_bar(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` now raises ImportError
    from bloomwise.cli._io import progress
    assert type(progress(10, "x")).__name__ == "_NoProgress"
    keys = _write_keys(tmp_path / "keys.txt", 1000)
    code, out, err = run(capsys, "build", keys, "-o", tmp_path / "f.bloom")
    assert code == EXIT_OK and err == "" and "1,000 keys" in out


def test_the_bar_is_tqdm_and_silent_off_a_terminal(tmp_path, capsys):
    pytest.importorskip("tqdm")
    from bloomwise.cli._io import progress
    bar = progress(100, "building")
    assert type(bar).__module__.startswith("tqdm") and bar.disable  # pytest's stderr is not a terminal
    bar.close()
    keys = _write_keys(tmp_path / "keys.txt", 1000)
    code, _, err = run(capsys, "build", keys, "-o", tmp_path / "f.bloom")
    assert code == EXIT_OK and err == ""


def test_the_bar_shows_on_a_terminal(monkeypatch):
    pytest.importorskip("tqdm")
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    from bloomwise.cli._io import progress
    bar = progress(2000, "building")
    bar.update(1000)
    bar.close()
    assert "building" in terminal.getvalue() and "/2.00k" in terminal.getvalue()
