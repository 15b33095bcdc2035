"""The `bloomwise` command line: build, query, info, plan, trace, simulate, proxy, cluster, serve, reproduce.

Each subcommand is a module with ``register(subparsers)`` (adds its parser, sets ``func=run``) and
``run(args) -> int`` (the exit code). Exit codes: 0 success (also when the reader of the output goes away, as
with ``| head``), 1 a runtime failure (a file that cannot be read or written, a corrupted filter), 2 a usage
error (bad arguments), 130 interrupted by Ctrl-C (SIGINT), 143 terminated by SIGTERM. SIGTERM is handled like
Ctrl-C: a filter being saved is left as it was and the temporary file is removed.
"""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from typing import Optional, Sequence

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


def build_parser() -> argparse.ArgumentParser:
    from bloomwise import __version__

    parser = argparse.ArgumentParser(
        prog="bloomwise", description="Build, query and size Bloom filters.",
        epilog="Run `bloomwise COMMAND --help` for the options of a command.")
    parser.add_argument("--version", action="version", version=f"bloomwise {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"bloomwise.cli.{name}").register(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
    except BrokenPipeError:  # e.g. `bloomwise query ... | head`
        sys.stderr.close()
        return EXIT_OK
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
