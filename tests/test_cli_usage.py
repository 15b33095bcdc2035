"""Usage errors of every subcommand speak like the rest of the command: one line, ``bloomwise CMD: message``,
exit 2, never argparse's usage block and "error:" wording, never a traceback."""
from __future__ import annotations

import pytest

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
