"""Off the grid: the program a user gets for a shape off the grid (the shipped
file's nearest shape, dispatch.choice) against what tuning that shape itself finds.

    gemmforge campaign --storage off_grid_h100.db --shapes @benchmarks/shapes/off_grid_models.txt \
        --search-budget 0 --portfolio ...                  # tune the shapes themselves (GPU)
    python3 benchmarks/off_grid.py --storage off_grid_h100.db [--rounds 10] \
        [--report-dir DIR] [--name off_grid_h100] [--tuned [URL]] [--rule learned]

Per shape of the campaign in --storage: `resolved` is dispatch.choice.resolve's program for
this GPU's device class from the shipped file alone (where no shipped row is exact, the
shipped program that dispatch.ranker's model ranks first among those usable at the shape,
the resolver's default rule `learned`; `--rule waves` the wave rule, dispatch.waves; with
no shipped row within an octave, the heuristic's; with `--tuned`, the user's tuned
database at URL, default the tuner's storage, comes first, as `matmul` reads it: so after
`gemmforge tune --quick` the quick tune's winners are measured against the campaign's),
`tuned` the campaign's confirmed winner there. Both are timed again in one fresh group beside cuBLAS
(kernel, cold and call protocols, --rounds rounds, re-gated after timing), and the shape's
figure is resolved's cuBLAS ratio over tuned's, in that group (1.0 when they are the same
program). Writes <report-dir>/<name>.csv (two rows per shape: role resolved/tuned, with the
provenance, distance and fraction) and prints the geomean of the fraction and how many
shapes reach 0.95.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from gemmforge.ir.program import Arch
from gemmforge.search.campaign.campaign import CONFIRM_BENCH, Campaign
from gemmforge.search.campaign.campaign_runners import GridRunner
from gemmforge.search.measure.campaign_store import CampaignStore
from gemmforge.dispatch.choice import DEFAULT_RULE, RULES, resolve
from gemmforge.dispatch.devices import device_class
from gemmforge.search.measure.report import write_csv
from gemmforge.search.measure.shapes import parse_shapes

TARGET = 0.95


def pairs(store: CampaignStore, cls: str, tuned_url: str | None = None,
          rule: str = DEFAULT_RULE) -> list:
    """(problem, resolved Choice, tuned Result) for each confirmed shape of the store;
    `tuned_url` (None: the shipped file alone; "": the tuner's default storage) is the
    tuned database the resolver reads first, `rule` the resolver's rule (dispatch.choice)."""
    options = store.get("options") or {}
    problems = parse_shapes(options.get("shapes", "grid"), options.get("layout", "nn"),
                            options.get("acc", "f32"))
    campaign = Campaign(store, None, problems)
    out = []
    for problem in problems:
        tuned = campaign.winner(problem)
        if tuned is not None:
            choice = resolve(problem, Arch.SM90A, cls, use_tuned=tuned_url is not None,
                             tuned_url=tuned_url or None, rule=rule)
            out.append((problem, choice, tuned))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--storage", required=True, help="the off-grid shapes' campaign store")
    ap.add_argument("--rounds", type=int, default=10, help="timing rounds per protocol")
    ap.add_argument("--report-dir", default=".", help="where the CSV goes")
    ap.add_argument("--name", default="off_grid", help="the CSV's name")
    ap.add_argument("--tuned", nargs="?", const="", default=None, metavar="URL",
                    help="resolve with the user's tuned database first (URL; without one: "
                         "the tuner's default storage), e.g. after gemmforge tune --quick")
    ap.add_argument("--rule", choices=RULES, default=DEFAULT_RULE,
                    help="how the resolver picks a shipped program off the grid "
                         "(default: the resolver's)")
    args = ap.parse_args(argv)
    runner = GridRunner()
    store = CampaignStore(args.storage)
    try:
        cls = device_class(runner.device)
        todo = pairs(store, cls, args.tuned, args.rule)
        groups = [(p, list(dict.fromkeys([str(c.program), t.program]))) for p, c, t in todo]
        landed = {}
        runner.measure_groups(groups, replace(CONFIRM_BENCH, rounds=args.rounds),
                              lambda problem, rs: landed.__setitem__(problem, rs), seed=7)
    finally:
        runner.close()
        store.close()
    results, extra, fractions = [], [], []
    for problem, choice, tuned in todo:
        rs = landed[problem]
        resolved, again = rs[0], rs[-1]
        ok = resolved.ok and again.ok
        fraction = resolved.speedup / again.speedup if ok else None
        if ok:
            fractions.append(fraction)
        for role, r in (("resolved", resolved), ("tuned", again)):
            results.append(r)
            extra.append({"role": role, "rule": args.rule, "provenance": choice.provenance,
                          "distance": choice.distance, "nearest": str(choice.measured or ""),
                          "fraction_of_tuned": fraction})
    path = write_csv(results, args.name, Path(args.report_dir), extra)
    geo = math.exp(statistics.fmean(math.log(f) for f in fractions)) if fractions else None
    print(f"{len(todo)} off-grid shapes on {runner.device}: resolved/tuned geomean "
          f"{geo:.3f}" if geo else "no shape measured ok", end="")
    print(f", {sum(f >= TARGET for f in fractions)} of {len(fractions)} at >= {TARGET}; "
          f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
