"""`gemmforge campaign`: tune the 1,000 grid shapes across many device calls (search.campaign.campaign).

    gemmforge campaign --storage campaign_h100.db --max-seconds 480        # first call
    gemmforge campaign --storage campaign_h100.db --max-seconds 480        # each later call
    gemmforge campaign --storage campaign_h100.db --status                 # where it stands
    gemmforge campaign --storage campaign_h100.db --report grid_h100 --report-dir benchmarks/results
    gemmforge campaign --storage c.db --shapes sample:20 --replay synthetic   # no GPU
    gemmforge campaign --storage rerun.db --shapes grid:small,medium --incumbents shipped \
        --twins pdl --per-backend 0 --portfolio all=new_kernels.txt   # after new kernels land
    gemmforge campaign --storage c.db --passes confirm --reconfirm "cold rotated"  # new protocol
    gemmforge campaign --storage h200.db --shapes grid:large --incumbents shipped+siblings \
        --per-backend 0 --per-shape 2 --top 2   # on an H200: its own winners against the H100's

The storage file is the whole campaign: it travels between calls and machines. The first
run's settings (the options below that default to "as stored") are kept in it, so a
resume needs only --storage and --max-seconds. Every run prints a summary: measurements
per pass, this run's candidates per second, shapes confirmed, weak shapes whose confirmation
waits for the search pass (`awaiting_search`: a run whose --passes leave the search out says
so; --search-budget 0 confirms them without one), the ETA of the rest.
A re-run starts from the shipped winners (`--incumbents shipped`: each shape's shipped
program first, then its `--twins`, then the lists), so the confirmation weighs new kernels
against the programs users run today; `--incumbents shipped+siblings` adds each sibling
device class's shipped program (dispatch.devices.SIBLINGS) after the own class's. The
incumbents are read from the shipped file when a run starts: ship the re-run's winners after
it ends, not between its calls.
`--report NAME` writes the grid report from the store instead of measuring
(search.campaign.grid_report: NAME.csv, NAME_decades.csv, NAME.png); `--with-shipped` fills the grid
shapes the store lacks from the shipped file, `--shipped-only` takes every row from there
(the report of what ships, for a device class the store names). A run with `--incumbents`
also writes NAME_families.csv: each challenger's ratio to the incumbent beside it, a geomean
per FLOP decade and over all (search.campaign.family_means), the check a round's gains should pass
before shipping (none for a re-timing, which confirms the incumbents alone).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .common import SHAPES_HELP

STORED = {  # option -> default, kept in the store by the first run
    "shapes": "grid", "layout": "nn", "acc": "f32", "backends": "cuda_wgmma,triton",
    "per_backend": 8, "per_shape": 40, "portfolio": None, "chunk": 96, "threshold": 1.0,
    "search_budget": 16, "search_batch": 8, "policy": "heuristic", "top": 3,
    "sustained_seconds": 1.0, "seed": 0, "incumbents": None, "twins": "",
}
def default_lists() -> tuple[str, ...]:
    """--portfolio's default: the package's large-class program list."""
    from ..search.campaign.portfolio import LARGE_PROGRAMS
    return (f"large={LARGE_PROGRAMS}",)


def resolve_options(args, stored: dict | None) -> dict:
    """The run's options: those given on the command line, else the store's, else the
    defaults (STORED); --portfolio defaults to default_lists() where those files exist."""
    out = dict(STORED)
    out.update(stored or {})
    out.update({k: getattr(args, k) for k in STORED if getattr(args, k) is not None})
    if out["portfolio"] is None:
        out["portfolio"] = [spec for spec in default_lists()
                            if Path(spec.split("=", 1)[1]).is_file()]
    return out


INCUMBENT_SOURCES = ("shipped", "shipped+siblings")


def incumbents_from(options: dict, device: str) -> dict:
    """{problem: program text, or texts} for --incumbents. "shipped": the shipped file's row
    of `device`'s class (the store's device, else the runner's), where it has none for a
    shape a sibling class's (dispatch.devices.lookup_classes: an H200 run starts from the
    H100's winners). "shipped+siblings": the own class's row and each sibling class's, own
    first, once each (an H200 run weighs its own winner against the H100's). {} without the
    option."""
    from .common import UsageError
    from ..dispatch.devices import device_class, lookup_classes
    from ..dispatch.shipped import shipped
    source = options["incumbents"]
    if not source:
        return {}
    if source not in INCUMBENT_SOURCES:
        raise UsageError(f"--incumbents {source!r}: one of {', '.join(INCUMBENT_SOURCES)}")
    cls = device_class(device)
    if cls is None:
        raise UsageError(f"--incumbents {source}: the device {device!r} has no device class")
    order = {c: i for i, c in enumerate(lookup_classes(cls))}  # own class first
    found: dict = {}
    for row in sorted((r for r in shipped().rows if r.device_class in order),
                      key=lambda r: order[r.device_class]):
        texts = found.setdefault(row.problem, [])
        if row.program_text not in texts:
            texts.append(row.program_text)
    if source == "shipped":
        return {problem: texts[0] for problem, texts in found.items()}
    return {problem: tuple(texts) for problem, texts in found.items()}


def settings_from(options: dict, incumbents: dict | None = None):
    """A campaign.CampaignSettings from resolved options (UsageError if one is bad)."""
    from .common import UsageError
    from ..search.campaign.campaign import CONFIRM_BENCH, SUSTAINED_BENCH, CampaignSettings
    from ..search.campaign.portfolio import Portfolio
    from ..search.measure.records import replace
    from ..policy.registry import POLICIES
    if options["policy"] not in POLICIES:
        raise UsageError(f"--policy {options['policy']!r}: one of {', '.join(POLICIES)}")
    _check_numbers(options)
    from .. import arguments
    from ..ir.program import Accum, Layout
    arguments.backends(options["backends"])
    Layout.parse(options["layout"], "--layout")
    Accum.parse(options["acc"], "--acc")
    lists = []
    for spec in options["portfolio"]:
        cls, sep, path = spec.partition("=")
        if not sep or not Path(path).is_file():
            raise UsageError(f"--portfolio {spec!r}: want CLASS=FILE (small, medium, large "
                             f"or all) with an existing file")
        lists.append((cls, path))
    try:
        portfolio = Portfolio(tuple(options["backends"].split(",")), options["per_backend"],
                              tuple(lists), options["per_shape"], incumbents or {},
                              tuple(t for t in options["twins"].split(",") if t))
        return CampaignSettings(
            portfolio=portfolio, chunk=options["chunk"], threshold=options["threshold"],
            search_budget=options["search_budget"], search_batch=options["search_batch"],
            policy=options["policy"], top=options["top"], seed=options["seed"],
            confirm_bench=CONFIRM_BENCH, sustained_bench=replace(
                SUSTAINED_BENCH, sustained_s=options["sustained_seconds"]))
    except ValueError as e:
        raise UsageError(str(e)) from None


NUMBER_FLOORS = {"per_backend": 0, "per_shape": 1, "chunk": 1, "search_budget": 0,
                 "search_batch": 1, "top": 1}
"""The smallest value of each integer option (per_backend 0: no heuristic proposals, only
the incumbents and --portfolio lists; search_budget 0: no search pass)."""


def _check_numbers(options: dict) -> None:
    """UsageError naming the first numeric option out of its range."""
    from .. import arguments
    for key, least in NUMBER_FLOORS.items():
        arguments.at_least("--" + key.replace("_", "-"), options[key], least)
    arguments.positive("--threshold", options["threshold"], " (x cuBLAS)")
    arguments.positive_seconds("--sustained-seconds", options["sustained_seconds"])


def make_runner(args):
    """The replayed runner (--replay) or the GPU's."""
    from ..search.campaign.campaign_runners import GridRunner, ReplayGridRunner
    if args.replay:
        from ..search.measure.replay import ReplayRunner
        records = None if args.replay == "synthetic" else args.replay
        return ReplayGridRunner(ReplayRunner(records, device=args.replay_device,
                                             delay_s=args.replay_delay))
    from ..search.campaign.campaign import PORTFOLIO_BENCH
    from ..search.measure.records import BenchSettings
    return GridRunner(0, builders=args.builders,  # the search pass times as the portfolio does
                      settings=BenchSettings(protocols=PORTFOLIO_BENCH.protocols))


def cmd_campaign(args) -> int:
    from .common import UsageError
    from ..search.campaign.campaign import PASSES, Campaign
    from ..search.measure.campaign_store import CampaignStore
    started = time.monotonic()
    passes = tuple(p for p in args.passes.split(",") if p)
    if set(passes) - set(PASSES):
        raise UsageError(f"--passes: {args.passes!r}; use a comma list of {', '.join(PASSES)}")
    _check_storage(args)
    store = CampaignStore(args.storage)
    options = resolve_options(args, store.get("options"))
    settings_from(options)  # bad options fail before a runner starts
    from .. import arguments
    problems = arguments.shapes(options["shapes"], options["layout"], options["acc"])
    if args.report:
        try:
            return _report(store, problems, settings_from(options), args)
        finally:
            store.close()
    runner = None if args.status else make_runner(args)
    try:
        device = store.get("device") or (runner.device if runner else "")
        settings = settings_from(options, incumbents_from(options, device))
        campaign = Campaign(store, runner or _StatusRunner(store), problems, settings,
                            progress=not args.quiet,
                            log=lambda line: print(line, file=sys.stderr, flush=True))
        if args.status:
            print(json.dumps(campaign.status(), indent=1))
            return 0
        store.put("options", options)
        if store.get("command") is None:
            store.put("command", "gemmforge " + " ".join(sys.argv[1:]))
        if args.reconfirm:
            marked = campaign.reconfirm(args.reconfirm)
            print(f"reconfirm {args.reconfirm!r}: " + (f"{marked} shapes to confirm once more"
                  if marked else "resumed"), file=sys.stderr, flush=True)
        summary = campaign.run(args.max_seconds, passes, started)
    finally:
        if runner is not None:
            runner.close()
        store.close()
    print(json.dumps(summary, indent=1))
    return 0


def _check_storage(args) -> None:
    """--storage: an SQLite campaign file (or, for a run, one to create in a folder that
    exists), --max-seconds > 0: UsageError otherwise, before the store is opened."""
    from .. import arguments
    from .common import UsageError
    arguments.positive_seconds("--max-seconds", args.max_seconds)
    if args.builders is not None:
        arguments.at_least("--builders", args.builders)
    if args.replay_delay < 0:
        raise UsageError(f"--replay-delay: {args.replay_delay:g} must be >= 0 (seconds)")
    for option, given in (("--with-shipped", args.with_shipped),
                          ("--shipped-only", args.shipped_only)):
        if given and not args.report:
            raise UsageError(f"{option}: applies to --report (give --report NAME)")
    args.replay = arguments.replay(args.replay)
    if not args.storage.strip():
        raise UsageError("--storage: empty (give the campaign's SQLite file)")
    path = Path(args.storage).expanduser()
    if not path.parent.is_dir():
        raise UsageError(f"--storage: folder {path.parent} does not exist")
    if (args.status or args.report) and not path.exists():
        raise UsageError(f"--storage: no campaign at {path} (--status and --report read "
                         "an existing one)")
    arguments.sqlite_file("--storage", path)


class _StatusRunner:
    """A runner that measures nothing: --status reads the store alone."""

    def __init__(self, store):
        self.device = store.get("device", "")
        from ..search.measure.runners import archs_for_sm
        self.archs = archs_for_sm(90)


def _report(store, problems, settings, args) -> int:
    from ..search.campaign.campaign import Campaign
    from ..search.campaign.grid_report import write_grid_report
    campaign = None if args.shipped_only else Campaign(store, _StatusRunner(store), problems,
                                                        settings, progress=False)
    command = store.get("command", "gemmforge campaign")
    fill = (_shipped_fill(store, problems, every=args.shipped_only)
            if args.with_shipped or args.shipped_only else [])
    for path in write_grid_report(campaign, args.report, Path(args.report_dir), command, fill):
        print(f"wrote {path}")
    if campaign is not None and (store.get("options") or {}).get("incumbents"):
        _report_families(campaign, store, args)
    return 0


def _report_families(campaign, store, args) -> None:
    """NAME_families.csv: each challenger against the incumbent (the program each shape's
    first portfolio plan put first) in the same confirmation groups; printed as well. A run
    that timed the incumbents alone (a re-timing) has no challengers and writes no table."""
    from ..search.campaign.family_means import (
        COLUMNS, against_incumbents, markdown, winners_against_incumbents)
    from ..search.campaign.grid_report import write_rows

    def incumbent_of(problem):
        return next(iter(store.planned(problem, "portfolio")), None)

    won = winners_against_incumbents(campaign, incumbent_of)
    if won["beside_incumbent"]:
        print(f"winners: {won['changed']} of {won['shapes']} shapes changed; beside the "
              f"incumbent in the same group at {won['beside_incumbent']}: "
              f"{won['geomean']:.4f} geomean, {won['median']:.4f} median")
    rows = against_incumbents(campaign, incumbent_of)
    if not rows:
        print("no challenger was confirmed beside an incumbent: no families table")
        return
    print(markdown(rows))
    path = Path(args.report_dir) / f"{args.report}_families.csv"
    print(f"wrote {write_rows(rows, path, COLUMNS)}")


def _shipped_fill(store, problems, every: bool = False) -> list:
    """The shipped file's rows for the grid shapes outside the campaign (`every`: for all
    grid shapes) of the store's device class, layout and accumulator."""
    from .common import UsageError
    from ..dispatch.devices import device_class
    from ..search.campaign.grid_report import shipped_rows
    from ..search.measure.shapes import parse_shapes
    device = store.get("device", "")
    cls = device_class(device)
    if cls is None or not problems:
        raise UsageError(f"--with-shipped, --shipped-only: the store's device {device!r} "
                         "has no device class")
    have = set(problems)
    grid = parse_shapes("grid", str(problems[0].layout), str(problems[0].acc))
    return shipped_rows([p for p in grid if every or p not in have], cls, device)


def add_to(sub) -> None:
    """Add `campaign` to the gemmforge parser."""
    c = sub.add_parser("campaign", help="tune the 1,000 grid shapes, resumable (portfolio, "
                                        "search, confirmation)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--storage", required=True, help="the campaign's SQLite file (travels)")
    c.add_argument("--max-seconds", type=float, help="end cleanly before this many seconds")
    c.add_argument("--passes", default="build,portfolio,search,confirm",
                   help="which passes, in order (default: all)")
    c.add_argument("--status", action="store_true", help="print where it stands; measure nothing")
    c.add_argument("--report", help="write the grid report NAME.csv/.png (no measuring)")
    c.add_argument("--report-dir", default=".", help="folder for --report (default: here)")
    c.add_argument("--with-shipped", action="store_true",
                   help="--report: grid shapes outside the campaign from the shipped file")
    c.add_argument("--shipped-only", action="store_true",
                   help="--report: every grid shape from the shipped file, none from the "
                        "store (which gives the device class, layout and accumulator)")
    c.add_argument("--shapes", help=f"{SHAPES_HELP} (default: grid)")
    c.add_argument("--layout", help="nn (default) or nt")
    c.add_argument("--acc", help="f32 (default) or f16")
    c.add_argument("--backends", help="whose heuristic proposals enter the portfolio "
                                      "(default cuda_wgmma,triton)")
    c.add_argument("--per-backend", type=int, help="heuristic proposals per backend (8)")
    c.add_argument("--per-shape", type=int, help="portfolio programs per shape at most (40)")
    c.add_argument("--portfolio", action="append", metavar="CLASS=FILE",
                   help="a program list for a shape class (small, medium, large, all); "
                        "repeatable (default: large=the package's search/data/large_programs.txt)")
    c.add_argument("--incumbents", choices=INCUMBENT_SOURCES,
                   help="time each shape's shipped program first (a re-run after new "
                        "kernels land); shipped+siblings: each sibling device class's "
                        "shipped program too (an H200 run weighs its own against the H100's)")
    c.add_argument("--twins", help="comma list of boolean fields (pdl, swap_ab) set on "
                                   "each incumbent as an extra candidate where legal, and/or "
                                   "raster: the incumbent with the rasters whose waves read "
                                   "fewest bytes there (search.campaign.wave_footprint)")
    c.add_argument("--chunk", type=int, help="portfolio candidates per batch (96)")
    c.add_argument("--threshold", type=float, help="search where the portfolio's best is "
                                                   "below this x cuBLAS (1.0)")
    c.add_argument("--search-budget", type=int, help="search candidates per weak shape (16)")
    c.add_argument("--search-batch", type=int, help="the tuner's batch (8)")
    c.add_argument("--policy", help="the search's policy (heuristic)")
    c.add_argument("--top", type=int, help="contenders per confirmation (3)")
    c.add_argument("--reconfirm", metavar="REASON",
                   help="confirm every shape once more, its rounds so far no longer current "
                   "(after a timing protocol changed); REASON is kept in the store, and a "
                   "later call naming it resumes instead of starting over")
    c.add_argument("--sustained-seconds", type=float,
                   help="seconds per sustained turn in the large class's confirmation (1.0)")
    c.add_argument("--seed", type=int, help="sampler seed (0)")
    c.add_argument("--builders", type=int, help="build processes (default: the CPU count)")
    c.add_argument("--replay", help="answer from a record file or 'synthetic' (no GPU)")
    c.add_argument("--replay-device", default="replay", help=argparse.SUPPRESS)
    c.add_argument("--replay-delay", type=float, default=0.0, help=argparse.SUPPRESS)
    c.add_argument("--quiet", action="store_true", help="no progress bars")
    c.set_defaults(run=cmd_campaign)
