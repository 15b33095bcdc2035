"""Usage errors of every subcommand speak like the rest of the command: one line, ``bloomwise CMD: message``,
exit 2, never argparse's usage block and "error:" wording, never a traceback."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from bloomwise import BloomFilter, theory
from bloomwise.cli import main


def run_usage_error(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as exit_:  # errors found by the parser itself
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


ARGPARSE_ERRORS = [
    (["build", "keys.txt", "-o", "f.bloom", "--seed", "x"], "bloomwise build: --seed 'x' is not a whole number"),
    (["build", "keys.txt", "-o", "f.bloom", "--layout", "foo"],
     "bloomwise build: --layout 'foo' is not one of blocked, classic, partitioned"),
    (["build", "keys.txt", "-o", "f.bloom", "--capacity", "abc"], "bloomwise build: --capacity 'abc' is not a number"),
    (["build", "keys.txt", "-o"], "bloomwise build: -o/--output needs a value"),
    (["build"], "bloomwise build: missing KEYS, -o/--output"),
    (["trace", "--synthetic", "10", "--zipf", "abc", "-o", "-"], "bloomwise trace: --zipf 'abc' is not a number"),
    (["serve", "--refresh", "soon"], "bloomwise serve: --refresh 'soon' is not a number"),
    (["simulate", "--synthetic", "10", "--trace", "t.log"], "bloomwise simulate: --trace is not allowed with --synthetic"),
    (["plan", "--n", "1e6", "--p", "1%", "--bogus"], "bloomwise plan: unrecognized arguments: --bogus"),
    (["frob"], "bloomwise: COMMAND 'frob' is not one of build, query"),
]


@pytest.mark.parametrize("argv, start", ARGPARSE_ERRORS, ids=[" ".join(argv) for argv, _ in ARGPARSE_ERRORS])
def test_parser_errors_are_one_line_in_the_project_style(capsys, argv, start):
    code, out, err = run_usage_error(capsys, argv)
    assert code == 2 and out == ""
    assert err.startswith(start), err
    assert err.count("\n") == 1 and "error:" not in err and "usage:" not in err and "Traceback" not in err


def bloomwise_process(*argv, env=None, preexec_fn=None, cwd=None):
    """The real ``bloomwise`` entry point in a fresh interpreter (the kernel setting is read at import)."""
    source = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    environment = {**os.environ, "PYTHONPATH": source, **(env or {})}
    return subprocess.run([sys.executable, "-m", "bloomwise", *map(str, argv)], capture_output=True, text=True,
                          env=environment, preexec_fn=preexec_fn, cwd=cwd, timeout=120)


@pytest.mark.parametrize("argv", [["plan", "--n", "1e6", "--p", "1%"], ["build", "keys.txt", "-o", "f.bloom"],
                                  ["info", "f.bloom"], ["simulate", "--synthetic", "100"], ["serve", "--help"]])
def test_a_bad_kernel_setting_is_one_usage_line_for_every_command(tmp_path, argv):
    result = bloomwise_process(*argv, env={"BLOOMWISE_KERNELS": "bogus"}, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"bloomwise {argv[0]}: BLOOMWISE_KERNELS='bogus' is not a kernel set: "
                                    "expected one of auto"), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.fixture
def keys_file(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("alpha\nbeta\ngamma\n")
    return path


def test_build_refuses_to_write_over_its_own_key_file(tmp_path, keys_file, capsys):
    link = tmp_path / "link.txt"
    link.symlink_to(keys_file)
    for output in (keys_file, link):
        for extra in ([], ["--force"]):
            code = main(["build", str(keys_file), "-o", str(output), *extra])
            err = capsys.readouterr().err
            assert code == 2 and "is the key file itself" in err and err.count("\n") == 1, err
    assert keys_file.read_text() == "alpha\nbeta\ngamma\n"


def test_build_replaces_only_bloomwise_files_unless_forced(tmp_path, keys_file, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    code = main(["build", str(keys_file), "-o", str(notes)])
    err = capsys.readouterr().err
    assert code == 2 and err == (f"bloomwise build: -o {notes} exists and is not a bloomwise file: not replacing it "
                                 f"(give --force to replace it)\n")
    assert notes.read_text() == "my notes\n"
    empty = tmp_path / "empty.bloom"
    empty.write_bytes(b"")
    assert main(["build", str(keys_file), "-o", str(empty)]) == 2 and empty.read_bytes() == b""
    capsys.readouterr()

    assert main(["build", str(keys_file), "-o", str(notes), "--force"]) == 0
    assert "gamma" in BloomFilter.load(notes)
    keys_file.write_text("delta\n")  # a bloomwise file is rebuilt without --force
    assert main(["build", str(keys_file), "-o", str(notes)]) == 0
    rebuilt = BloomFilter.load(notes)
    assert "delta" in rebuilt and rebuilt.num_keys == 1


def _limit_address_space():  # runs in the child before exec: 3 GiB of address space
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2 ** 30, 3 * 2 ** 30))


def test_build_without_enough_memory_says_how_much_the_filter_needs(tmp_path, keys_file):
    output = tmp_path / "big.bloom"
    result = bloomwise_process("build", keys_file, "-o", output, "--capacity", "1e10",
                               preexec_fn=_limit_address_space)
    needed = -(-theory.optimal_size(10 ** 10, 0.01, layout="blocked")[0] // 8)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (f"bloomwise build: not enough memory: a filter for 10,000,000,000 keys at a rate of "
                             f"0.01 needs {needed:,} bytes (11.76 GiB) of memory; lower --capacity, raise --fpr, "
                             f"or run where more memory is available\n")
    assert not output.exists()


@pytest.mark.parametrize("content", [b"", b"\n\n"])
def test_simulate_on_a_log_without_requests_says_so(tmp_path, capsys, content):
    log = tmp_path / "access.log"
    log.write_bytes(content)
    code = main(["simulate", "--trace", str(log), "--format", "plain", "--policy", "summary"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.startswith(f"bloomwise simulate: --trace {str(log)!r}: no request was read"), err
    assert err.rstrip().endswith("nothing to replay") and err.count("\n") == 1
