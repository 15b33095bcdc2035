"""The `bloomwise` command line: build, query, info, plan, trace, simulate, proxy, cluster, serve, reproduce.

Each subcommand is a module with ``register(subparsers)`` (adds its parser, sets ``func=run``) and
``run(args) -> int`` (the exit code). Exit codes: 0 success (also when the reader of the output goes away, as
with ``| head``), 1 a runtime failure (a file that cannot be read or written, a corrupted filter), 2 a usage
error (bad arguments), 130 interrupted by Ctrl-C (SIGINT), 143 terminated by SIGTERM. SIGTERM is handled like
Ctrl-C: a filter being saved is left as it was and the temporary file is removed.

Every command registers every subcommand, so a subcommand's module imports at its top only what its options need;
what it runs (the compiled core, the cache system, the proxy, the page, the papers' engine) is imported in the
function that runs it, each such import marked ``# on use`` (``bloomwise --help`` loads neither numpy nor the core).
"""
from __future__ import annotations

import argparse
import importlib
import re
import signal
import sys
import threading
from typing import Optional, Sequence

from bloomwise import __version__

SUBCOMMANDS = ("build", "query", "info", "plan", "trace", "simulate", "proxy", "cluster", "serve", "reproduce")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so that the same clean-up runs."""


def _raise_terminated(signum, frame):
    raise Terminated()


class CommandError(Exception):
    """A failure to report on stderr as `bloomwise: <message>`, with an exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILURE):
        super().__init__(message)
        self.code = code


_ARGUMENT_PREFIX = re.compile(r"^argument (?P<option>[^:]+): (?P<rest>.*)$", re.DOTALL)
_INVALID_TYPE = re.compile(r"^invalid (?P<type>\w+) value: (?P<value>.*)$", re.DOTALL)
_INVALID_CHOICE = re.compile(r"^invalid choice: (?P<value>.*?) \(choose from (?P<choices>.*)\)$", re.DOTALL)
_TYPE_NAMES = {"int": "a whole number", "float": "a number"}


def usage_message(message: str) -> str:
    """argparse's wording of a usage error in the words of every other bloomwise message: the option, what was
    typed and what is expected.

    >>> usage_message("argument --seed: invalid int value: 'x'")
    "--seed 'x' is not a whole number"
    >>> usage_message("argument --layout: invalid choice: 'foo' (choose from 'blocked', 'classic')")
    "--layout 'foo' is not one of blocked, classic"
    >>> usage_message("argument --capacity: --capacity 'abc' is not a number")
    "--capacity 'abc' is not a number"
    >>> usage_message("the following arguments are required: KEYS, -o/--output")
    'missing KEYS, -o/--output'
    """
    match = _ARGUMENT_PREFIX.match(message)
    if not match:
        return message.replace("the following arguments are required: ", "missing ")
    option, rest = match.group("option"), match.group("rest")
    if invalid := _INVALID_TYPE.match(rest):
        expected = _TYPE_NAMES.get(invalid.group("type"), f"a valid {invalid.group('type')}")
        return f"{option} {invalid.group('value')} is not {expected}"
    if choice := _INVALID_CHOICE.match(rest):
        choices = ", ".join(name.strip().strip("'") for name in choice.group("choices").split(","))
        return f"{option} {choice.group('value')} is not one of {choices}"
    if rest == "expected one argument":
        return f"{option} needs a value"
    if rest.startswith("not allowed with argument "):
        return f"{option} is not allowed with {rest[len('not allowed with argument '):]}"
    names = option.split("/")
    if any(rest.startswith(f"{name} ") for name in names):  # a reader's message already names the option
        return rest
    return f"{option}: {rest.replace('argument ', '')}"


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, ``bloomwise CMD: message`` (:func:`usage_message`), with
    exit code 2, like every other error of the command; argparse's own prints the usage and "error: ..."."""

    def error(self, message: str):
        text = usage_message(message)
        hint = "" if "(examples" in text else f" (see {self.prog} --help)"
        print(f"{self.prog}: {text}{hint}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="bloomwise", description="Build, query and size Bloom filters.",
        epilog="Run `bloomwise COMMAND --help` for the options of a command.")
    parser.add_argument("--version", action="version", version=f"bloomwise {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"bloomwise.cli.{name}").register(subparsers)
    return parser


def check_kernel_setting() -> None:
    """Read ``BLOOMWISE_KERNELS`` now, by importing the compiled core that reads it, so that every subcommand
    reports a bad value the same way (a usage error), not only those that build or query a filter.

    :raises ValueError: naming the value and the kernel sets that are accepted.
    """
    importlib.import_module("bloomwise._native.hashes")


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:  # before the subcommands are imported: some of them load the compiled core
        check_kernel_setting()
    except ValueError as exc:
        words = sys.argv[1:] if argv is None else list(argv)
        command = next((word for word in words if word in SUBCOMMANDS), None)
        print(f"bloomwise{' ' + command if command else ''}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named with the command they were given to, not as the top-level parser's
        print(f"bloomwise {args.command}: unrecognized arguments: {' '.join(unknown)} "
              f"(see bloomwise {args.command} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if main_thread else None
    try:
        return args.func(args)
    except CommandError as exc:
        print(f"bloomwise {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except Terminated:
        print("bloomwise: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("bloomwise: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except MemoryError as exc:  # commands that know the size they need say so first (build)
        print(f"bloomwise {args.command}: not enough memory{f' ({exc})' if str(exc) else ''}", file=sys.stderr)
        return EXIT_FAILURE
    except BrokenPipeError:  # e.g. `bloomwise query ... | head`
        sys.stderr.close()
        return EXIT_OK
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
