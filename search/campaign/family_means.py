"""A round's programs against the incumbents in the same confirmation groups, program by
program over the shapes: the check to make before shipping a round.

A shape's winner is the best of its confirmation's readings, so a round of new programs
always "wins" some shapes by the noise of the pick alone (under the power cap a reading moves
by a few %; benchmarks/NOTES.md). What a fresh timing
keeps is a program's mean advantage over the incumbent beside it, over the shapes where both
were confirmed. For each challenger, per FLOP decade (2mnk, as the grid report) and over
all: the shapes, the geometric mean of its selection ratio (search.measure.selection.selection_ratio:
sustained for the large class, else warm x cold) over the incumbent's in the same round, and
at how many it was ahead. (A round of big tiles: 0.995 over all, 1.011 at
1e12, where a fresh timing then kept them 2.8 % ahead.)
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Callable

from ...ir.program import Problem
from .grid_report import decade, geomean
from ..measure.selection import latest_clean, selection_ratio

COLUMNS = ("program", "decade", "shapes", "vs_incumbent", "ahead")


def _latest_round(campaign, problem: Problem) -> dict:
    """Program text -> Result of the shape's latest undisturbed confirmation round."""
    return {r.program: r for r in latest_clean(*campaign.confirmations(problem))}


def against_incumbents(campaign, incumbent_of: Callable[[Problem], str | None]) -> list[dict]:
    """Rows (COLUMNS) per challenger and decade, then its "all", challengers with the most
    shapes first, from each shape's latest undisturbed confirmation round that holds both it
    and the shape's incumbent."""
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    for problem in campaign.problems:
        incumbent = incumbent_of(problem)
        results = _latest_round(campaign, problem)
        if incumbent not in results:
            continue
        base = selection_ratio(problem, results[incumbent])
        for program, r in results.items():
            if program != incumbent:
                for key in ((program, decade(problem.flops)), (program, "all")):
                    ratios[key].append(selection_ratio(problem, r) / base)
    rows = [{"program": p, "decade": d, "shapes": len(v),
             "vs_incumbent": geomean(v),
             "ahead": sum(x > 1 for x in v)} for (p, d), v in ratios.items()]
    shapes = {row["program"]: row["shapes"] for row in rows if row["decade"] == "all"}
    return sorted(rows, key=lambda row: (-shapes[row["program"]], row["program"],
                                         row["decade"] == "all", float(row["decade"])
                                         if row["decade"] != "all" else 0.0))


def winners_against_incumbents(campaign, incumbent_of: Callable[[Problem], str | None]) -> dict:
    """The round as a whole: at how many shapes the winner is not the incumbent, and at those
    where the incumbent was confirmed in the same (latest undisturbed) round, the winner's
    selection ratio over the incumbent's: count, geomean and median. The winner's reading
    carries the pick's optimism (about 1 %), so a later look is what confirms the gain."""
    changed, gains = 0, []
    for problem in campaign.problems:
        results, incumbent = _latest_round(campaign, problem), incumbent_of(problem)
        # the winner as Campaign.winner picks it, from the same round
        winner = max(results.values(), key=lambda r: selection_ratio(problem, r), default=None)
        if winner is None or incumbent is None or winner.program == incumbent:
            continue
        changed += 1
        if incumbent in results:
            base = selection_ratio(problem, results[incumbent])
            gains.append(selection_ratio(problem, winner) / base)
    return {"shapes": len(campaign.problems), "changed": changed, "beside_incumbent": len(gains),
            "geomean": geomean(gains), "median": statistics.median(gains) if gains else None}


def markdown(rows: list[dict]) -> str:
    lines = ["| program | 2mnk | shapes | vs incumbent (geomean) | ahead at |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['program']} | {r['decade']} | {r['shapes']} | {r['vs_incumbent']:.3f} "
              f"| {r['ahead']} |" for r in rows]
    return "\n".join(lines)
