"""The shipped file's correctness: every program of this GPU's class, re-gated on this GPU at
its shape.

    python3 benchmarks/check_shipped.py [--shipped PATH] [--device-class h100] \
        [--backend NAME] [--changed-since OLD.json] [--report-dir DIR] [--name shipped_check_h100]
    python3 benchmarks/check_shipped.py --device-class h200 --dtype bf16 --confirm \
        --name bf16_confirm_1      # the f16 rows' programs timed in bf16 beside cuBLAS in bf16

For each shipped row of the GPU's device class (dispatch.devices; --device-class to choose):
the program is built (in parallel) and run at its shape through the measuring path
(search.measure.measure): the correctness gate before timing (random inputs against an fp32
reference, plus the {0,1} exact check where k <= 2048), one short timing round, and the
re-validation after it into a NaN-filled output with fresh inputs. A row passes when both
hold. Writes <report-dir>/<name>.csv (one row per shipped shape: status, rel_err, kernel and
cuBLAS times of this short round) and prints how many failed; exits 1 if any did.

`--dtype bf16` takes the class's f16 rows and runs each program at its shape with bf16
operands (cuBLAS timed in bf16 too), skipping, and counting, the programs whose backend has
no bf16 path; `--confirm` times with a campaign confirmation's settings (kernel, cold, call
and after protocols, 10 rounds: search.campaign.campaign.CONFIRM_BENCH) instead of the short
round (the large class under sustained load: SUSTAINED_BENCH, as a campaign confirms it),
and lists the shapes where the program read slower than cuBLAS (by the ratio a confirmation
picks by) in <name>_behind_<layout>.txt, one MxNxK a line: `gemmforge tune --quick --shapes
@that --layout L --dtype bf16 --report R` is the pass where they lose. The CSV carries dtype
bf16, and `gemmforge ship --from` of a few such runs (and the quick tune's report) writes
bf16 rows (the median over the runs' readings; a program slower than cuBLAS there ships as
a cuBLAS row).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gemmforge.dispatch.devices import device_class
from gemmforge.dispatch.shipped import DEFAULT_PATH, read
from gemmforge.search.campaign.campaign_runners import GridRunner
from gemmforge.search.campaign.shipped_check import (
    check_settings, interleaved_part, rows_in_dtype, write_behind,
)
from gemmforge.search.measure.report import write_csv


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shipped", default=str(DEFAULT_PATH), help="the shipped file")
    ap.add_argument("--device-class", help="whose rows (default: this GPU's class)")
    ap.add_argument("--backend", help="only the rows of this backend")
    ap.add_argument("--changed-since", metavar="FILE",
                    help="only the rows whose program differs from (or is absent in) this "
                    "earlier shipped file, after a whole-file check of it")
    ap.add_argument("--report-dir", default=".", help="where the CSV goes")
    ap.add_argument("--name", default="shipped_check", help="the CSV's name")
    ap.add_argument("--dtype", choices=("bf16",),
                    help="bf16: the f16 rows' programs run with bf16 operands (default: every "
                    "row in its own dtype)")
    ap.add_argument("--part", default="1/1", metavar="I/N",
                    help="only the I-th of N interleaved parts of the rows (runs that fit a "
                    "time limit)")
    ap.add_argument("--confirm", action="store_true",
                    help="time as a confirmation (CONFIRM_BENCH), not one short round")
    args = ap.parse_args(argv)
    try:
        interleaved_part([], args.part)  # a bad --part is refused before the GPU is taken
    except ValueError as e:
        print(f"check_shipped: {e}", file=sys.stderr)
        return 2
    runner = GridRunner()
    try:
        cls = args.device_class or device_class(runner.device)
        before = ({(r.device_class, r.problem): r.program_text
                   for r in read(args.changed_since).rows} if args.changed_since else None)
        rows = [r for r in read(args.shipped).rows if r.device_class == cls
                and args.backend in (None, r.program.backend)
                and (before is None or before.get((cls, r.problem)) != r.program_text)]
        rows, skipped = rows_in_dtype(rows, args.dtype)
        if skipped:
            print(f"{skipped} shipped {cls} programs have no {args.dtype} path: not run")
        rows = interleaved_part(rows, args.part)
        if not rows:
            print(f"no shipped rows for device class {cls!r} ({runner.device})")
            return 1
        results = {}
        for settings in dict.fromkeys(check_settings(r.problem, args.confirm) for r in rows):
            runner.measure_groups([(r.problem, [r.program_text]) for r in rows
                                   if check_settings(r.problem, args.confirm) == settings], settings,
                                  lambda problem, rs: results.__setitem__(problem, rs[0]))
    finally:
        runner.close()
    ordered = [results[r.problem] for r in rows]
    path = write_csv(ordered, args.name, Path(args.report_dir),
                     [{"device_class": cls} for _ in rows])
    failed = [r for r in ordered if r.status != "ok"]
    for r in failed:
        print(f"FAILED {r.problem()}: {r.program}: {r.kind} {r.message}")
    print(f"{len(rows) - len(failed)} of {len(rows)} shipped {cls} programs passed the gate and "
          f"the re-validation on {runner.device}; wrote {path}")
    if args.confirm:
        for written in write_behind(ordered, args.name, Path(args.report_dir)):
            print(f"wrote {written}")
    return 1 if failed else 0



if __name__ == "__main__":
    sys.exit(main())
