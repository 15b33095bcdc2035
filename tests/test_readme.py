"""README.md as a new user runs it: its Python snippets and its `$ bloomwise ...` command lines, read from the README
itself (so an edited example is tested as edited), run as written in an empty directory.

- The ```python blocks run in order in one fresh interpreter, as one session would: each snippet may use only the
  names it or an earlier one defines (``keys``, the dask import, the files they write and load). The Redis snippet
  talks to the server at the socket the README names when one answers there; otherwise to a private redis-server
  that the test starts, with only that socket path replaced.
- Every `$ bloomwise ...` line is read by the command's own parser (its options and choices exist).
- The lines of build, query, info and plan run exactly as written (the test writes the key files they read, as a
  user would). The other commands are long (simulate, trace, reproduce: minutes on 2 cores) or start servers
  (serve on a fixed port, proxy on 0.0.0.0, cluster): with BLOOMWISE_TEST_README=all, simulate, trace and reproduce
  run too; the servers never do.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bloomwise.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
FAST_COMMANDS = {"build", "query", "info", "plan"}
LONG_COMMANDS = {"simulate", "trace", "reproduce"}
SERVER_COMMANDS = {"serve", "proxy", "cluster"}
README_SOCKET = "/run/redis/redis.sock"


def code_blocks(language: str) -> list[str]:
    """The README's fenced blocks of ``language`` ("" for blocks without one), in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", README, flags=re.DOTALL | re.MULTILINE)


def command_lines() -> list[str]:
    """Every `$ bloomwise ...` command of the README's shell blocks, without the prompt (comments kept; a line that
    ends in a backslash continues on the next, as in the shell)."""
    commands = []
    for block in code_blocks(""):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("$ bloomwise "):
                commands.append(line[2:])
    return commands


def words(line: str) -> list[str]:
    """The words after ``bloomwise``, as the shell splits them (a comment dropped)."""
    return shlex.split(line, comments=True)[1:]


def test_the_readme_has_what_these_tests_read():
    assert len(code_blocks("python")) >= 3
    commands = {words(line)[0] for line in command_lines()}
    assert FAST_COMMANDS <= commands and "simulate" in commands


@pytest.mark.parametrize("line", command_lines(), ids=command_lines())
def test_every_command_line_is_understood_by_its_parser(line):
    try:
        build_parser().parse_args(words(line))
    except SystemExit as exit_:
        pytest.fail(f"`{line}`: the parser refused it (exit {exit_.code})")


@pytest.fixture
def user_directory(tmp_path, monkeypatch):
    """An empty directory with what a user would bring: urls.txt and queries.txt, and a `bloomwise` command (this
    checkout's) first on PATH."""
    (tmp_path / "urls.txt").write_text("".join(f"https://example.com/page/{i}\n" for i in range(2000)))
    (tmp_path / "queries.txt").write_text("https://example.com/page/7\nhttps://example.org/\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    command = bin_dir / "bloomwise"
    command.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m bloomwise \"$@\"\n")
    command.chmod(0o755)
    environment = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                   "PYTHONPATH": str(ROOT / "src")}
    return tmp_path, environment


def run_line(line: str, directory: Path, environment: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=directory, env=environment, capture_output=True, text=True,
                          timeout=timeout)


def test_the_command_lines_of_build_query_info_and_plan_run_as_written(user_directory):
    directory, environment = user_directory
    lines = [line for line in command_lines() if words(line)[0] in FAST_COMMANDS]
    outputs = {}
    for line in lines:  # in the README's order: build writes the filter that query and info read
        result = run_line(line, directory, environment)
        assert result.returncode == 0, f"`{line}`: exit {result.returncode}: {result.stderr}"
        outputs[words(line)[0]] = result.stdout
    assert outputs["query"].splitlines() == ["https://example.com/page/7\tmaybe", "https://example.org/\tno"]
    assert "2,000" in outputs["info"] and "bloomwise plan (blocked layout)" in outputs["plan"]


@pytest.mark.skipif(os.environ.get("BLOOMWISE_TEST_README") != "all",
                    reason="simulate, trace and reproduce take minutes on 2 cores: BLOOMWISE_TEST_README=all runs them")
def test_the_long_command_lines_run_as_written(user_directory):
    directory, environment = user_directory
    made = run_line("bloomwise trace --synthetic 20000 --format squid -o access.log", directory, environment)
    assert made.returncode == 0, made.stderr  # the Squid log a user would bring to `simulate --trace access.log`
    for line in command_lines():
        if words(line)[0] in LONG_COMMANDS:
            result = run_line(line, directory, environment, timeout=3600)
            assert result.returncode == 0, f"`{line}`: exit {result.returncode}: {result.stderr}"


def _answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(2)
        try:
            client.connect(path)
            client.sendall(b"PING\r\n")
            return client.recv(16).startswith(b"+PONG")
        except OSError:
            return False


DRIVER = """
import json, sys, traceback
blocks = json.load(open(sys.argv[1]))
session = {"__name__": "__readme__"}
for number, block in enumerate(blocks, 1):
    try:
        exec(compile(block, f"README python block {number}", "exec"), session)
    except BaseException:
        print(f"README python block {number} failed:", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
print("ok", sorted(name for name in ("keys", "f", "g", "c", "s", "urls") if name in session))
"""


def test_the_python_snippets_run_in_order_as_one_session(tmp_path):
    for module in ("pyarrow", "dask.dataframe", "redis"):
        pytest.importorskip(module, reason=f"README's snippets use {module} (the test extra)")
    blocks = code_blocks("python")
    if not _answers(README_SOCKET):
        from bloomwise._redis_server import LocalRedisServer, find_redis_server

        if find_redis_server() is None:
            pytest.skip(f"no Redis at {README_SOCKET} and no redis-server to start (Debian package redis-server)")
        server = LocalRedisServer().start()
        blocks = [block.replace(README_SOCKET, server.socket_path) for block in blocks]
    else:
        server = None
    try:
        (tmp_path / "blocks.json").write_text(json.dumps(blocks))
        (tmp_path / "driver.py").write_text(DRIVER)
        work = tmp_path / "session"
        work.mkdir()
        result = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "blocks.json")],
                                cwd=work, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True,
                                text=True, timeout=600)
    finally:
        if server is not None:
            server.close()
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip() == "ok ['c', 'f', 'g', 'keys', 's', 'urls']"
