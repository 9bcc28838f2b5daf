"""What every `gemmforge` subcommand shares: exit codes, UsageError, and reading a
program or a shape from the command line."""
from __future__ import annotations

import argparse

from .. import arguments
from ..errors import EXIT_BAD_INPUT, EXIT_FAILED, UsageError  # noqa: F401 (shared)
from ..ir.program import Problem, Program

EXIT_BUILD_FAILED = EXIT_FAILED
SHAPES_HELP = ("MxNxK,..., grid, grid:CLASSES (of small,medium,large), sample:N[:SEED] or "
               "@file (MxNxK per line, '#' comments)")


def parse_program(value: str, name: str = "--program") -> Program:
    """Program from its text form, its JSON form, or @path to a file holding either
    (gemmforge.arguments.program: an empty value or a missing file is a UsageError)."""
    return arguments.program(value, name)


def parse_shape(value: str, layout: str, acc: str, dtype: str = "f16") -> Problem:
    """Problem from --shape MxNxK with --layout, --acc and --dtype (UsageError if malformed)."""
    return arguments.problem(value, layout, acc, dtype=dtype)


def check_report_args(name: str, report_dir: str | None, option: str) -> None:
    """UsageError for a report name search.measure.report can't write (`option` names the flag)
    or a --report-dir that can't be a folder."""
    from ..search.measure.report import check_name
    try:
        check_name(name)
    except ValueError as e:
        raise UsageError(f"{option}: {e}") from None
    if report_dir:
        arguments.output_folder(report_dir, "--report-dir")


def add_problem_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    """--shape, --layout, --acc and --dtype on parser `p`."""
    p.add_argument("--shape", required=required, help="MxNxK, e.g. 1000x4096x333")
    p.add_argument("--layout", default="nn", help="nn (B is KxN) or nt (B is NxK)")
    p.add_argument("--acc", default="f32", help="accumulator: f32 or f16 (f16 operands only)")
    p.add_argument("--dtype", default="f16", help="operands and output: f16 or bf16")


def storage_url(value: str | None) -> str:
    """The tuner's storage (and tuned database) URL: --storage `value`, else
    GEMMFORGE_TUNE_DB or the default SQLite file, checked to open (arguments.storage)."""
    from ..dispatch.tuned import default_storage
    if value is not None:
        return arguments.storage(value, "--storage")
    from ..compiler.knobs import knobs
    return arguments.storage(default_storage(),
                             "GEMMFORGE_TUNE_DB" if knobs().tune_db else "the default storage")
