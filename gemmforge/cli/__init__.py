"""The `gemmforge` command (emit, verify, tune HGEMM kernels): one table of subcommand modules.

    gemmforge emit --shape 1000x4096x333 --arch sm_80 [--program TEXT|JSON|@FILE] -o DIR
    gemmforge verify PROGRAM [--shape MxNxK]
    gemmforge schema
    gemmforge tune | bench | train-policy | train-llm ...

Bad input (a malformed shape, program text or JSON, an illegal program, a missing optional
extra) gets one line saying what is wrong and what is allowed, and exit code 2; a failed
build prints the nvcc command that reproduces it, and exit code 1.
"""
from __future__ import annotations

import argparse
import sys
from importlib import import_module

from gemmforge.cli.common import EXIT_BAD_INPUT, EXIT_BUILD_FAILED, UsageError
from gemmforge.compiler.extras import install_hint
from gemmforge.compiler.values import BuildError
from gemmforge.ir.program import IRError

# Each module's add_to(sub) adds its subcommands; their heavy imports wait for the run.
COMMANDS = (
    "gemmforge.cli.program",   # emit, verify, schema
    "gemmforge.cli.tune",      # tune
    "gemmforge.cli.bench",     # bench
    "gemmforge.cli.train",     # train-policy
    "gemmforge.cli.train_llm", # train-llm
)

__all__ = ["COMMANDS", "UsageError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The gemmforge parser with every subcommand of COMMANDS."""
    parser = argparse.ArgumentParser(prog="gemmforge", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        import_module(module).add_to(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one gemmforge command; returns its exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (IRError, UsageError) as e:
        print(f"gemmforge: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BuildError as e:
        print(f"gemmforge: build failed: {e}", file=sys.stderr)
        return EXIT_BUILD_FAILED
    except ModuleNotFoundError as e:
        hint = install_hint(e)
        if hint is None:
            raise
        print(f"gemmforge {args.command}: {hint}", file=sys.stderr)
        return EXIT_BAD_INPUT
