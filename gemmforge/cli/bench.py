"""`gemmforge bench`: measure programs or backends over shapes against cuBLAS.

    gemmforge bench --shapes 1024x1024x1024,1000x4096x333 --program "cuda_mma sm_80 ..."
    gemmforge bench --shapes sample:50:3 --backends triton,cuda_mma --arch sm_90a
    gemmforge bench --shapes grid --program @programs.txt --name grid_run
    gemmforge bench --shapes 4096x4096x4096 --chosen      # what matmul runs, and where it came from
    gemmforge bench --shapes 4096x4096x4096 --dtype bf16 --chosen   # bf16 operands, cuBLAS in bf16

Each shape gets every `--program` (text, or @file with one per line) that verify accepts
for it, plus, per `--backends` entry, the heuristic policy's first legal program for that
backend, and with --chosen the program `matmul` would run (dispatch.choice), printed with
its source. Every candidate passes the correctness gate before its time counts; cuBLAS
(torch.matmul, best of NN and TN) is timed in the same process. Writes
<name>.csv and .png in the current directory (or `--report-dir`); a progress bar runs meanwhile.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from .. import arguments
from .common import SHAPES_HELP, UsageError, check_report_args
from ..errors import Failure
from ..ir.program import Arch


def _programs(values: list[str]) -> list:
    """The programs of every --program value (text, JSON, or @file of one per line)."""
    out = []
    for value in values:
        if value.startswith("@"):
            lines = arguments.text_file("--program", value[1:]).splitlines()
            lines = [t for t in lines if t.strip() and not t.startswith("#")]
            if not lines:
                raise UsageError(f"--program: no program in {value[1:]}")
            out += [arguments.program(t) for t in lines]
        else:
            out.append(arguments.program(value))
    return out


def candidates(problem, programs, backends, arch):
    """The programs to measure on `problem`: the given ones that are legal for it, and the
    heuristic's first legal program per backend."""
    from ..ir.verify import check
    from ..policy.heuristic import HeuristicPolicy
    chosen = [p for p in programs if check(p, problem) is None]
    for name in backends:
        chosen += [p for p in HeuristicPolicy(name).propose(problem, arch, 1) if p not in chosen]
    return chosen


def with_twins(programs, fields, problem) -> list:
    """`programs`, each followed by its twin per boolean field in `fields` (that field
    toggled: `pdl` on a pdl program gives the program without it), where the twin is legal
    for `problem` and not already listed."""
    from dataclasses import replace
    from ..ir.verify import check
    out = list(programs)
    for program in programs:
        for name in fields:
            twin = replace(program, **{name: not getattr(program, name)})
            if twin not in out and check(twin, problem) is None:
                out.append(twin)
    return out


def _twin_fields(text: str | None) -> tuple[str, ...]:
    from ..search.campaign.portfolio import TWIN_FIELDS
    names = tuple(x.strip() for x in (text or "").split(",") if x.strip())
    unknown = [n for n in names if n not in TWIN_FIELDS]
    if unknown:
        raise UsageError(f"--twins: {', '.join(unknown)}: give a comma list of {', '.join(TWIN_FIELDS)}")
    return names


def _chosen(problems, arch, runner) -> dict:
    """{problem: the program matmul would run on the runner's device}, printing for each
    where it came from (dispatch.choice)."""
    from ..dispatch.choice import resolve
    from ..dispatch.devices import device_class
    cls = device_class(runner.info().get("device"))
    out = {}
    for problem in problems:
        choice = resolve(problem, arch, cls)
        print(f"{problem}: {choice.program}\n  {choice.line()}")
        out[problem] = choice.program
    return out


def _settings(args):
    from ..search.measure.records import BenchSettings
    arguments.at_least("--rounds", args.rounds)
    if not (math.isfinite(args.sustained_seconds) and args.sustained_seconds > 0):
        raise UsageError(f"--sustained-seconds: {args.sustained_seconds} must be a number > 0")
    try:
        return BenchSettings(protocols=tuple(x.strip() for x in args.protocols.split(",")
                                             if x.strip()), rounds=args.rounds,
                             sustained_s=args.sustained_seconds)
    except ValueError as e:
        raise UsageError(f"--protocols: {e}") from None


def _plan(args) -> tuple[list, object]:
    """[(problem, its candidates)] and the BenchSettings, every argument checked; a
    UsageError when there is nothing to measure."""
    arguments.environment()
    problems = arguments.shapes(args.shapes, args.layout, args.acc, dtype=args.dtype)
    programs = _programs(args.program or [])
    backends = arguments.backends(args.backends) or ()
    if not programs and not backends and not args.chosen:
        raise UsageError("bench: give at least one --program, --backends or --chosen")
    arch = Arch.parse(args.arch, "--arch")
    settings = _settings(args)
    check_report_args(args.name, args.report_dir, "--name")
    _twin_fields(args.twins)
    plan = [(p, candidates(p, programs, backends, arch)) for p in problems]
    if not args.chosen and not any(todo for _, todo in plan):
        raise UsageError("--program: no given program is legal for any of the shapes "
                         "(gemmforge verify PROGRAM --shape MxNxK says why)")
    arguments.at_least("--device", args.device, 0)
    arguments.cuda_devices("bench", args.device + 1)
    return plan, settings


def cmd_bench(args) -> int:
    from ..search.measure.env import evaluate
    from ..search.measure.measure import BuilderPool, DeviceRunner
    from ..search.measure.report import write_report
    from tqdm import tqdm
    plan, settings = _plan(args)
    twins = _twin_fields(args.twins)
    results = []
    with BuilderPool() as builders, DeviceRunner(devices=[args.device]) as runner:
        chosen = _chosen([p for p, _ in plan], Arch.parse(args.arch, "--arch"),
                         runner) if args.chosen else {}
        for problem, todo in tqdm(plan, desc="bench", unit="shape"):
            if problem in chosen and chosen[problem] not in todo:
                todo = [*todo, chosen[problem]]
            todo = with_twins(todo, twins, problem)
            if todo:
                results += evaluate(todo, problem, device_runner=runner, builders=builders,
                                    settings=settings)
    csv_path, png_path = write_report(results, args.name,
                                      Path(args.report_dir) if args.report_dir else None)
    ok = sum(r.ok for r in results)
    print(f"{ok}/{len(results)} measured ok\nwrote {csv_path}\nwrote {png_path}")
    if not ok:
        raise Failure(f"bench: none of the {len(results)} candidates measured ok "
                      f"(the kind and message columns of {csv_path} say why)")
    return 0


def add_to(sub) -> None:
    b = sub.add_parser("bench", help="measure programs or backends against cuBLAS",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--shapes", required=True, help=SHAPES_HELP)
    b.add_argument("--program", action="append", help="program text, JSON or @file (repeatable)")
    b.add_argument("--backends", help="comma list: the heuristic's program per backend")
    b.add_argument("--chosen", action="store_true",
                   help="also the program matmul would run (tuned, shipped or heuristic), "
                        "printed with where it came from")
    b.add_argument("--arch", default="sm_90a", help="arch for --backends and --chosen programs")
    b.add_argument("--twins", metavar="FIELDS",
                   help="also each program with these boolean fields toggled, where legal: a "
                        "comma list of pdl, swap_ab (e.g. --chosen --twins pdl --protocols "
                        "kernel,after: the chosen program with and without pdl)")
    b.add_argument("--layout", default="nn")
    b.add_argument("--acc", default="f32")
    b.add_argument("--dtype", default="f16",
                   help="operands and output: f16 or bf16 (cuBLAS timed in the same dtype)")
    b.add_argument("--protocols", default="kernel,call",
                   help="comma list of kernel, cold, call, server, sustained, after (kernel,call); "
                        "after: each launch after another kernel, which a pdl program can't overlap")
    b.add_argument("--rounds", type=int, default=5)
    b.add_argument("--sustained-seconds", type=float, default=1.0,
                   help="seconds per turn of the sustained protocol (1.0; the campaign's "
                        "large-class rounds have used 0.25)")
    b.add_argument("--device", type=int, default=0, help="CUDA device index")
    b.add_argument("--name", default="bench", help="result name: <name>.csv and <name>.png")
    b.add_argument("--report-dir", help="folder for the report (default: the current directory)")
    b.set_defaults(run=cmd_bench)

