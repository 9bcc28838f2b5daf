"""`gemmforge tune --quick`: time a few neighbourhood candidates per shape (search.tune.quick).

    gemmforge tune --quick --shapes 77x4096x4096,600x14336x4096       # on the GPU
    gemmforge tune --quick --shapes @benchmarks/shapes/off_grid_models.txt --storage t.db
    gemmforge tune --quick --shapes 77x4096x4096 --replay synthetic    # no GPU: replayed
    gemmforge tune --quick --shapes 77x4096x4096 --layout nt --dtype bf16   # bf16 operands

Per shape: the 4 nearest distinct shipped programs (for `--dtype bf16`: bf16 rows first,
then the f16 rows' programs, all timed in bf16) and the heuristic's top 2 of cuda_wgmma
and triton (`--backends` picks others), timed in one group beside cuBLAS (of the same dtype) (kernel, cold, call
and after protocols, 10 rounds, re-gated after timing); the best ok one (after another kernel,
as a campaign's confirmation picks) becomes the tuned
database's entry (`--storage`, default the tuner's), which `matmul`, `emit` and the torch
op then serve as "tuned-exact". Prints each shape's candidates with their cuBLAS ratios (back
to back, and after another kernel where measured: that picks the winner), the winner, and the
resolver's provenance before and after.
"""
from __future__ import annotations

import sys

from .. import arguments
from .common import storage_url
from ..errors import Failure, UsageError

RATIO_WIDTH = 8


def _runner(args):
    """The replayed runner (--replay) or one GPU's (a UsageError without a GPU)."""
    from ..search.campaign.campaign_runners import GridRunner, ReplayGridRunner
    if args.replay:
        from ..search.measure.replay import ReplayRunner
        records = None if args.replay == "synthetic" else args.replay
        return ReplayGridRunner(ReplayRunner(records, device=args.replay_device))
    arguments.cuda_devices("tune --quick", 1, "; use --replay synthetic (or a record file) "
                                              "to try it without one")
    return GridRunner(0)


def _checked(args):
    """(problems, backends, storage URL), every argument checked (UsageError: exit 2)."""
    from ..search.tune.quick import QUICK_BACKENDS
    arguments.environment()
    problems = arguments.shapes(args.shapes, args.layout, args.acc, dtype=args.dtype)
    backends = arguments.backends(args.backends) or QUICK_BACKENDS
    args.replay = arguments.replay(args.replay)
    if args.storage == ":memory:":
        raise UsageError("--quick: --storage :memory: would forget the result; give a "
                         "database URL (or none: the tuner's default)")
    return list(dict.fromkeys(problems)), backends, storage_url(args.storage)


def cmd_quick(args) -> int:
    """Quick-tune every shape; print each one's candidates, winner and provenance; exit 0,
    1 when no shape measured ok."""
    from ..search.tune.database import TunedDatabase
    from ..search.tune.quick import lookup_class, quick_tune
    problems, backends, url = _checked(args)
    command = "gemmforge " + " ".join(sys.argv[1:] if args.argv is None else args.argv)
    runner, database = _runner(args), None
    try:
        database = TunedDatabase(url)
        cls, own = lookup_class(runner, runner.archs[0])
        print(f"quick tune on {runner.device} ({runner.archs[0].value}); tuned database: {url}")
        if not own:
            print(f"note: {runner.device!r} has no device class: neighbours from the "
                  f"{cls} shipped rows; its results are recorded but serve no GPU")
        outcomes = quick_tune(runner, problems, database, command, backends=backends,
                              seed=args.seed or 0, only=backends if args.backends else None)
    finally:
        runner.close()
        if database is not None:
            database.close()
    for o in outcomes:
        print("\n".join(_lines(o)))
    _write_report(args, [o.best for o in outcomes if o.best is not None])
    won = sum(o.best is not None for o in outcomes)
    print(f"{won} of {len(outcomes)} shapes measured ok, "
          f"{sum(o.recorded for o in outcomes)} recorded")
    if not won:
        raise Failure("tune --quick: no candidate measured ok for any shape (the lines "
                      "above say why)")
    return 0


def _write_report(args, best) -> None:
    """Each shape's winner as a report CSV + PNG (--report; `gemmforge ship --from` reads it:
    a winner slower than cuBLAS ships as a cuBLAS row)."""
    from pathlib import Path
    from ..search.measure.report import write_report
    if best and args.report:
        csv_path, png_path = write_report(best, args.report,
                                          Path(args.report_dir) if args.report_dir else None)
        print(f"wrote {csv_path}\nwrote {png_path}")


def _lines(o) -> list[str]:
    """A shape's report: a header, one line per candidate (ratio or failure), the winner."""
    from ..search.measure.selection import selection_ratio
    out = [f"{o.problem}: {len(o.candidates)} candidates"]
    for text, r in zip(o.candidates, o.results or [None] * len(o.candidates)):
        mark = "*" if o.best is not None and r is o.best else " "
        if r is None:
            figure = "not measured"
        elif r.ok and r.speedup is not None:
            figure = f"{r.speedup:.3f}x" + ("" if r.after_speedup is None
                                             else f", {r.after_speedup:.3f}x after")
        else:
            figure = f"{r.kind}: {(r.message.splitlines() or [''])[0][:60]}"
        out.append(f" {mark} {figure:>{RATIO_WIDTH}}  {text}")
    if o.best is None:
        out.append(f"  no candidate measured ok; program: {o.before} (unchanged)")
    else:
        kept = "recorded" if o.recorded else "not recorded (the stored entry measured as high or higher)"
        after = ("" if o.best.after_speedup is None
                 else f" ({o.best.after_speedup:.3f}x after another kernel, which picks it)")
        lead = ("" if selection_ratio(o.problem, o.best) >= 1.0 else
                "; cuBLAS leads this shape, so matmul and patch call cuBLAS here")
        out.append(f"  winner {o.best.speedup:.3f}x cuBLAS{after}, {kept}{lead}; program: "
                   f"{o.before} -> {o.after}")
    return out
