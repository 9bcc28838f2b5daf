"""How the `gemmforge` command fails: one line on stderr and an exit code.

    0    done
    1    a runtime failure (a build, the storage, a worker): the cause in one line
    2    bad input (an argument, a file it names, an environment setting): the argument
         named and what was wrong, before any work starts
    130  interrupted by Ctrl-C (SIGINT); 143 by SIGTERM: what finished is summarised first

No traceback unless `--debug` is given or GEMMFORGE_DEBUG=1. docs/errors.md lists every bad
input and fault the tests try, with its exit code and line.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_SIGNAL_BASE = 128  # a run stopped by signal s exits 128 + s (SIGINT 130, SIGTERM 143)
DEBUG_FLAG = "--debug"
DEBUG_HINT = "(--debug or GEMMFORGE_DEBUG=1 for the traceback)"


class UsageError(ValueError):
    """Bad input: the message names the argument and what was wrong (exit 2)."""


class Failure(RuntimeError):
    """A runtime failure whose message is its cause, already one line (exit 1)."""


def debug_enabled(argv: list[str]) -> bool:
    """Tracebacks wanted: `--debug` among the arguments or GEMMFORGE_DEBUG=1."""
    return DEBUG_FLAG in argv or os.environ.get("GEMMFORGE_DEBUG", "") == "1"


def one_line(exc: BaseException) -> str:
    """The exception's first non-empty message line, or its type's name."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    return lines[0] if lines else type(exc).__name__


def signal_exit_code(exc: BaseException) -> int:
    """128 + the signal that stopped the run (an exception's `signum`, else SIGINT)."""
    return EXIT_SIGNAL_BASE + int(getattr(exc, "signum", signal.SIGINT))


def report(exc: BaseException, debug: bool = False) -> int:
    """Print `exc` as the command's one line on stderr (after its traceback when `debug`)
    and return the exit code it means."""
    from .compiler.knobs import KnobError
    from .ir.program import IRError
    if debug:
        traceback.print_exception(exc)
    if isinstance(exc, KeyboardInterrupt):
        code = signal_exit_code(exc)
        line = f"interrupted ({signal.Signals(code - EXIT_SIGNAL_BASE).name})"
    elif isinstance(exc, (IRError, UsageError, KnobError)):
        code, line = EXIT_BAD_INPUT, one_line(exc)
    elif _is_build_error(exc):
        # a build error keeps its lines: the source path and the command that reproduces it
        code, line = EXIT_FAILED, f"build failed: {exc}"
    elif isinstance(exc, Failure):
        code, line = EXIT_FAILED, one_line(exc)
    else:
        code = EXIT_FAILED
        line = f"{type(exc).__name__}: {one_line(exc)}" + ("" if debug else f" {DEBUG_HINT}")
    print(f"gemmforge: {line}", file=sys.stderr)
    return code


def _is_build_error(exc: BaseException) -> bool:
    from .compiler.values import BuildError
    return isinstance(exc, BuildError)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, `gemmforge: <what> (see gemmforge
    <command> --help)`, exit 2 (argparse's own print the usage first). Sub-parsers inherit
    the class."""

    def error(self, message: str):
        print(f"gemmforge: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def join_dash_values(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """argv with `OPT -1x2x3` written `OPT=-1x2x3` for the value-taking `options`, so a
    value that starts with '-' and a digit reaches its check instead of being taken for a
    flag (argparse accepts only plain negative numbers there)."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in options and len(arg) > 1 and arg[0] == "-" and arg[1].isdigit():
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out
