"""`gemmforge emit`, `gemmforge verify` and `gemmforge schema`: commands on one program.

    gemmforge emit --shape 1000x4096x333 --arch sm_80 [--dtype bf16] [--program TEXT|JSON|@FILE] -o DIR [--compile]
    gemmforge verify PROGRAM [--shape MxNxK] [--dtype bf16]
    gemmforge schema [--write]
"""
from __future__ import annotations

import json
import sys

from .. import arguments
from .common import UsageError, add_problem_args, parse_program, parse_shape
from ..ir.program import Arch


def cmd_emit(args) -> int:
    from ..emit import build_selftest, choose_program, emit
    arguments.environment()
    problem = parse_shape(args.shape, args.layout, args.acc, args.dtype)
    arch = Arch.parse(args.arch, "--arch")
    given = None if args.program is None else parse_program(args.program)
    out_dir = arguments.output_folder(args.output)
    device_class = _device_class(args.device_class)
    if given is None:
        arguments.tuned_database()
    program, source = choose_program(problem, arch, given, device_class)
    path = emit(problem, program, out_dir, force=args.force)
    print(f"{program}\n{path}")
    print(source, file=sys.stderr)
    if args.compile:
        print(build_selftest(path, program))
    return 0


def _device_class(value: str | None) -> str | None:
    """--device-class checked: a class the package knows (its SM count, or rows of the
    shipped file): an unknown one would silently match nothing and fall to the heuristic."""
    from ..dispatch.devices import MULTIPROCESSORS, check_class
    from ..dispatch.shipped import shipped
    if value is None:
        return None
    try:
        cls = check_class(value)
    except ValueError as e:
        raise UsageError(f"--device-class: {e}") from None
    known = sorted(set(MULTIPROCESSORS) | set(shipped().classes()))
    if cls not in known:
        raise UsageError(f"--device-class: {value!r} is not a known GPU class (one of "
                         f"{', '.join(known)})")
    return cls


def cmd_verify(args) -> int:
    from ..ir.verify import verify
    program = parse_program(args.program, "program")
    problem = parse_shape(args.shape, args.layout, args.acc, args.dtype) if args.shape else None
    if problem is None:
        _no_shape_options(args)
    verify(program, problem)
    print(f"ok: {program}  ({program.name})")
    return 0


def _no_shape_options(args) -> None:
    """--layout and --acc checked, and refused where no --shape gives them a problem."""
    from ..ir.program import Accum, Layout
    Layout.parse(args.layout, "--layout")
    Accum.parse(args.acc, "--acc")
    for option, value, default in (("--layout", args.layout, "nn"), ("--acc", args.acc, "f32")):
        if value != default:
            raise UsageError(f"{option}: applies to a --shape (give one, or drop {option})")


def cmd_schema(args) -> int:
    from ..ir.schema import checked_in_schema, write_schema
    if args.write:
        print(f"wrote {write_schema()}")
        return 0
    print(json.dumps(checked_in_schema(), indent=2))
    return 0


def add_to(sub) -> None:
    """Add emit, verify and schema to the gemmforge parser's subcommands `sub`."""
    e = sub.add_parser("emit", help="write a standalone .cu for one shape")
    add_problem_args(e)
    e.add_argument("--arch", required=True, help="sm_80 or sm_90a")
    e.add_argument("--program", help="program text, JSON, or @file (default: the tuned, "
                                     "shipped or heuristic program, printed with its source)")
    e.add_argument("--device-class", help="the GPU class whose tuned and shipped programs "
                                          "apply (h100, h200, a100; default: h100 for sm_90a, "
                                          "a100 for sm_80)")
    e.add_argument("-o", "--output", required=True, help="output folder")
    e.add_argument("--force", action="store_true",
                   help="replace a file of the same name that holds other text")
    e.add_argument("--compile", action="store_true", help="also build the self-test with nvcc")
    e.set_defaults(run=cmd_emit)
    v = sub.add_parser("verify", help="check a program (and optionally a shape)")
    v.add_argument("program", help="program text, JSON, or @file")
    add_problem_args(v, required=False)
    v.set_defaults(run=cmd_verify)
    s = sub.add_parser("schema", help="print the program JSON Schema")
    s.add_argument("--write", action="store_true", help="regenerate ir/program.schema.json")
    s.set_defaults(run=cmd_schema)
