"""The `bloomwise` command end to end: build, query, info, exit codes and messages."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bloomwise import BloomFilter
from bloomwise.cli import main


@pytest.fixture
def keys_file(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_bytes(b"".join(f"key{i}\n".encode() for i in range(1000)) + "naïve\r\n".encode())
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_build_query_info(tmp_path, keys_file, capsys):
    out_path = tmp_path / "f.bloom"
    code, out, err = run(capsys, "build", keys_file, "-o", out_path, "--fpr", "0.1%", "--layout", "classic")
    assert code == 0 and "1,001 keys" in out and err == ""
    f = BloomFilter.load(out_path)
    assert f.layout == "classic" and f.capacity == 1001  # capacity defaults to the number of lines
    assert "key7" in f and "naïve" in f  # lines without \n or \r\n, as UTF-8

    queries = tmp_path / "q.txt"
    queries.write_text("key1\nkey999\nabsent-key\n")
    code, out, _ = run(capsys, "query", out_path, queries)
    assert code == 0
    assert out.splitlines() == ["key1\tmaybe", "key999\tmaybe", "absent-key\tno"]
    code, out, _ = run(capsys, "query", out_path, queries, "--count")
    assert out.strip() == "3 keys: 2 maybe present, 1 absent"

    code, out, _ = run(capsys, "info", out_path)
    assert code == 0 and "classic" in out and "estimated FPR" in out and "capacity        1,001" in out
    code, out, _ = run(capsys, "info", out_path, "--json")
    info = json.loads(out)
    assert info["num_hashes"] == f.num_hashes and info["num_keys"] == 1001
    assert "keys_added" not in info and "num_bits" not in info  # one name each: num_keys, num_cells
    assert abs(info["estimated_keys"] - 1001) < 60 and info["estimated_fpr"] < 0.002


def test_build_with_the_older_hash_scheme(tmp_path, keys_file, capsys):
    out_path = tmp_path / "f.bloom"
    code, _, _ = run(capsys, "build", keys_file, "-o", out_path, "--hash-scheme", "xxh64")
    assert code == 0 and BloomFilter.load(out_path).hash_scheme == "xxh64"
    code, out, _ = run(capsys, "info", out_path)
    assert "hash scheme     xxh64" in out
    code, out, _ = run(capsys, "info", out_path, "--json")
    assert json.loads(out)["hash_scheme"] == "xxh64"


def test_build_with_explicit_capacity_streams(tmp_path, keys_file, capsys):
    out_path = tmp_path / "f.bloom"
    code, out, _ = run(capsys, "build", keys_file, "-o", out_path, "--capacity", "1e5", "--fpr", "1 in 1000")
    assert code == 0
    assert BloomFilter.load(out_path).capacity == 100_000


def test_stdin_and_the_real_entry_point(tmp_path):
    out_path = tmp_path / "f.bloom"
    build = subprocess.run([sys.executable, "-m", "bloomwise", "build", "-", "-o", str(out_path)],
                           input=b"alpha\nbeta\n", capture_output=True)
    assert build.returncode == 0, build.stderr
    query = subprocess.run([sys.executable, "-m", "bloomwise", "query", str(out_path)],
                           input=b"alpha\ngamma\n", capture_output=True)
    assert query.stdout == b"alpha\tmaybe\ngamma\tno\n"


@pytest.mark.parametrize("argv,code,message", [
    (["query", "{missing}"], 1, "no such filter file"),
    (["info", "{corrupt}"], 1, "not a usable bloomwise filter"),
    (["info", "{text}"], 1, "not a usable bloomwise filter"),
    (["build", "{missing}", "-o", "{out}"], 1, "cannot read keys"),
    (["build", "{keys}", "-o", "{nodir}"], 1, "no such directory"),
    (["build", "{keys}", "-o", "{out}", "--fpr", "2"], 2, "fpr"),
    (["build", "{keys}", "-o", "{out}", "--capacity", "-3"], 2, "capacity"),
])
def test_errors_have_messages_and_exit_codes(tmp_path, keys_file, capsys, argv, code, message):
    good = tmp_path / "good.bloom"
    BloomFilter(100, 0.01).save(good)
    corrupt = tmp_path / "corrupt.bloom"
    data = bytearray(good.read_bytes())
    data[-1] ^= 1
    corrupt.write_bytes(bytes(data))
    text = tmp_path / "text.txt"
    text.write_text("hello\n")
    paths = {"missing": tmp_path / "nope", "corrupt": corrupt, "text": text, "keys": keys_file,
             "out": tmp_path / "out.bloom", "nodir": tmp_path / "no" / "such" / "out.bloom"}
    argv = [a.format(**paths) for a in argv]
    try:
        result, out, err = run(capsys, *argv)
    except SystemExit as exit_:  # argparse rejects the value itself
        result, (out, err) = exit_.code, capsys.readouterr()
    assert result == code
    assert message in err and err.startswith(("bloomwise", "usage"))
    assert not (tmp_path / "out.bloom").exists()  # nothing half-written
