"""The `gemmforge` command (emit, verify, tune HGEMM kernels): one table of subcommand modules.

    gemmforge emit --shape 1000x4096x333 --arch sm_80 [--program TEXT|JSON|@FILE] -o DIR
    gemmforge verify PROGRAM [--shape MxNxK]
    gemmforge schema
    gemmforge tune | bench | train-policy | train-llm | ship ...

Every argument is checked before any work (gemmforge.arguments). Bad input (a malformed
shape, program text or JSON, an illegal program, a file that is not there, a missing
optional extra) gets one line naming the argument and what is wrong, and exit code 2; a
runtime failure one line with its cause and exit code 1 (a failed build also prints the
nvcc command that reproduces it); `--debug` or GEMMFORGE_DEBUG=1 adds the traceback
(gemmforge.errors; every case the tests try: docs/errors.md).
"""
from __future__ import annotations

import argparse
import sys
from importlib import import_module

from .common import EXIT_BAD_INPUT, UsageError
from ..compiler.extras import install_hint
from ..errors import DEBUG_FLAG, OneLineParser, debug_enabled, join_dash_values, report

# Each module's add_to(sub) adds its subcommands; their heavy imports wait for the run.
COMMANDS = (
    "gemmforge.cli.program",   # emit, verify, schema
    "gemmforge.cli.tune",      # tune
    "gemmforge.cli.bench",     # bench
    "gemmforge.cli.train",     # train-policy
    "gemmforge.cli.train_llm", # train-llm
    "gemmforge.cli.campaign",  # campaign
    "gemmforge.cli.ship",      # ship
)

__all__ = ["COMMANDS", "UsageError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The gemmforge parser with every subcommand of COMMANDS."""
    parser = OneLineParser(prog="gemmforge", description=__doc__.split("\n\n")[0])
    parser.add_argument(DEBUG_FLAG, action="store_true",
                        help="print the traceback of a failure (also GEMMFORGE_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        import_module(module).add_to(sub)
    return parser


def _value_options(parser: argparse.ArgumentParser) -> tuple[str, ...]:
    """Every option string, of the parser and its subcommands, that takes a value."""
    out: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _value_options(sub)
        elif action.option_strings and action.nargs is None:
            out += action.option_strings
    return tuple(out)


def _check_environment() -> None:
    """Every GEMMFORGE_* setting readable before any command starts (compiler.knobs raises
    KnobError naming the setting: exit 2), and a GEMMFORGE_SHIPPED file one that parses."""
    from ..compiler.knobs import knobs
    if knobs().shipped and knobs().shipped.lower() != "none":
        from ..dispatch.shipped import ShippedError, default_path, shipped
        try:
            shipped(default_path())
        except ShippedError as e:
            raise UsageError(f"GEMMFORGE_SHIPPED: {e}") from None


def _reader_gone() -> int:
    """The reader of stdout closed it (`gemmforge schema | head -1`): what it read is what
    it wanted, so exit 0 quietly; stdout goes to /dev/null so that flushing it at exit
    raises nothing more."""
    import os
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file descriptor (a test's StringIO)
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one gemmforge command; returns its exit code (gemmforge.errors says what each
    means)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_enabled(argv)
    parser = build_parser()
    args = parser.parse_args(join_dash_values([a for a in argv if a != DEBUG_FLAG],
                                              _value_options(parser)))
    if getattr(args, "argv", False) is None:  # a command that records how it was called
        args.argv = [a for a in argv if a != DEBUG_FLAG]
    try:
        _check_environment()
        return args.run(args)
    except ModuleNotFoundError as e:
        hint = install_hint(e)
        if hint is None:
            return report(e, debug)
        print(f"gemmforge {args.command}: {hint}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return _reader_gone()
    except (Exception, KeyboardInterrupt) as e:
        return report(e, debug)
