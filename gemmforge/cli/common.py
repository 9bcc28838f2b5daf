"""What every `gemmforge` subcommand shares: exit codes, UsageError, and reading a
program or a shape from the command line."""
from __future__ import annotations

import argparse
from pathlib import Path

from gemmforge.ir.program import IRError, Problem, Program

EXIT_BUILD_FAILED = 1
EXIT_BAD_INPUT = 2


class UsageError(ValueError):
    """A command's arguments don't fit together; main() prints it as one line, exit 2."""


def parse_program(value: str) -> Program:
    """Program from its text form, its JSON form, or @path to a file holding either."""
    from gemmforge.ir.schema import from_json
    from gemmforge.ir.text import parse
    if value.startswith("@"):
        try:
            value = Path(value[1:]).read_text()
        except OSError as e:
            raise IRError(f"program file: {e.strerror}: {value[1:]}") from None
    value = value.strip()
    return from_json(value) if value.startswith("{") else parse(value)


def parse_shape(value: str, layout: str, acc: str) -> Problem:
    """Problem from --shape MxNxK with --layout and --acc (IRError if malformed)."""
    from gemmforge.ir.text import parse_problem
    return parse_problem(f"{value} {layout} {acc}")


def add_problem_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    """--shape, --layout and --acc on parser `p`."""
    p.add_argument("--shape", required=required, help="MxNxK, e.g. 1000x4096x333")
    p.add_argument("--layout", default="nn", help="nn (B is KxN) or nt (B is NxK)")
    p.add_argument("--acc", default="f32", help="accumulator: f32 or f16")
