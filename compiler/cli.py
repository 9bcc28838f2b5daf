"""The `gemmforge` command.

    gemmforge emit --shape 1000x4096x333 --arch sm_80 [--program TEXT|JSON|@FILE] -o DIR
    gemmforge verify PROGRAM [--shape MxNxK]
    gemmforge schema
    gemmforge bench ...           (see search.bench_cli)

Bad input (a malformed shape, program text or JSON, an illegal program) gets one line
saying what is wrong and what is allowed, and exit code 2; a failed build prints the
nvcc command that reproduces it, and exit code 1.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gemmforge.backends.base import BuildError
from gemmforge.ir.program import Arch, IRError, Problem, Program

EXIT_BAD_INPUT = 2


class UsageError(ValueError):
    """A command's arguments don't fit together; main() prints it as one line, exit 2."""

EXIT_BUILD_FAILED = 1


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
    from gemmforge.ir.text import parse_problem
    return parse_problem(f"{value} {layout} {acc}")


def _add_problem_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--shape", required=required, help="MxNxK, e.g. 1000x4096x333")
    p.add_argument("--layout", default="nn", help="nn (B is KxN) or nt (B is NxK)")
    p.add_argument("--acc", default="f32", help="accumulator: f32 or f16")


def cmd_emit(args) -> int:
    from gemmforge.compiler.emit import build_selftest, choose_program, emit
    problem = parse_shape(args.shape, args.layout, args.acc)
    arch = Arch.parse(args.arch, "--arch")
    program = choose_program(problem, arch, parse_program(args.program) if args.program else None)
    path = emit(problem, program, Path(args.output))
    print(f"{program}\n{path}")
    if args.compile:
        print(build_selftest(path, program))
    return 0


def cmd_verify(args) -> int:
    from gemmforge.ir.verify import verify
    program = parse_program(args.program)
    problem = parse_shape(args.shape, args.layout, args.acc) if args.shape else None
    verify(program, problem)
    print(f"ok: {program}  ({program.name})")
    return 0


def cmd_schema(args) -> int:
    from gemmforge.ir.schema import checked_in_schema, write_schema
    if args.write:
        print(f"wrote {write_schema()}")
        return 0
    print(json.dumps(checked_in_schema(), indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gemmforge", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("emit", help="write a standalone .cu for one shape")
    _add_problem_args(e)
    e.add_argument("--arch", required=True, help="sm_80 or sm_90a")
    e.add_argument("--program", help="program text, JSON, or @file (default: the heuristic's)")
    e.add_argument("-o", "--output", required=True, help="output folder")
    e.add_argument("--compile", action="store_true", help="also build the self-test with nvcc")
    e.set_defaults(run=cmd_emit)
    v = sub.add_parser("verify", help="check a program (and optionally a shape)")
    v.add_argument("program", help="program text, JSON, or @file")
    _add_problem_args(v, required=False)
    v.set_defaults(run=cmd_verify)
    s = sub.add_parser("schema", help="print the program JSON Schema")
    s.add_argument("--write", action="store_true", help="regenerate ir/program.schema.json")
    s.set_defaults(run=cmd_schema)
    _add_optional_commands(sub)
    return parser


def _add_optional_commands(sub) -> None:
    """Commands from the search package, when it is importable (they need torch)."""
    try:
        from gemmforge.search import commands
    except ImportError:
        return
    commands.add_to(sub)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (IRError, UsageError) as e:
        print(f"gemmforge: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BuildError as e:
        print(f"gemmforge: build failed: {e}", file=sys.stderr)
        return EXIT_BUILD_FAILED


if __name__ == "__main__":
    sys.exit(main())
