"""Confirm a tuned problem's best program: time its top contenders again, together.

    result = confirm(runner, study, problem, top=3, database=db)

The highest of many noisy measurements reads high: in the first grid sweeps the best of ~25
programs per shape overstated the geomean by 0.5-1.7 points, and a shape's winner from one
sweep fell from 0.99 to 0.96 when timed again (benchmarks/NOTES.md, "The best of a sweep
reads high"). So once a problem's budget is spent, the study's `top` best distinct programs
by measured reward, with the incumbents (search.tune.incumbent: the program the resolver
served before the tune, and the tuned database's current entry for the device and problem)
where they are other programs, are measured again in one batch (the runner times a batch of
one problem as one group: every round visits all of them and cuBLAS). The best of that batch
becomes the database entry, with the confirmation's figures, replacing what is there: the
entry is always the winner of the latest head-to-head measurement, not the luckiest
reading ever taken, and never slower there than the incumbent. Where it reads slower than
cuBLAS its record says so, and the resolver serves cuBLAS (dispatch.choice's cuBLAS rule). The study keeps the confirmation (user attribute "confirmed"); a later
run whose contenders were all in it, timed with the same protocols, returns it without
measuring again.

Below the large class the confirmation is timed after another kernel too and picked as the
campaign's confirmation picks (search.measure.selection.selection_ratio: the after protocol's ratio
where measured), because the trials' kernel protocol launches a GEMM after itself and credits
a `pdl` program's overlap with its own previous launch, which a model never gives it
(benchmarks/NOTES.md). For the same reason each pdl contender's twin
without pdl joins the contenders: the trials' ranking can leave it out of the top.
"""
from __future__ import annotations

from typing import Sequence

from ..measure.env import WORST_REWARD, reward
from ..measure.shapes import shape_class
from ..measure.records import Result
from ..measure.selection import selection_ratio
from .incumbent import incumbent_programs
from .studies import measured_trials

ATTR = "confirmed"


def contenders(study, top: int, incumbents: Sequence[str] = (), problem=None) -> list[str]:
    """The study's `top` best distinct ok programs by measured reward (best first), then,
    with `problem` below the large class, each pdl one's twin without pdl (pdl_free_twins),
    then each of `incumbents` (program texts: what served before the tune, the database's
    entry) not among them."""
    ranked = sorted((t for t in measured_trials(study.get_trials(deepcopy=False))
                     if t.user_attrs.get("status") == "ok" and t.value is not None
                     and t.value > WORST_REWARD),
                    key=lambda t: t.value, reverse=True)
    programs: list[str] = []
    for t in ranked:
        text = t.user_attrs["result"]["program"]
        if text not in programs:
            programs.append(text)
        if len(programs) == top:
            break
    if problem is not None:
        programs += pdl_free_twins(programs, problem)
    if programs:
        programs += [text for text in dict.fromkeys(incumbents) if text not in programs]
    return programs


def pdl_free_twins(programs: list[str], problem) -> list[str]:
    """Below the large class, each of `programs` that has pdl, without it, where that is
    legal at `problem` and not listed already; [] for the large class (chosen under load,
    where pdl's overlap of back-to-back launches is what a long run sees)."""
    from ...ir.text import parse
    from ...ir.verify import check
    from ..measure.records import replace
    if shape_class(problem) == "large":
        return []
    twins: list[str] = []
    for text in programs:
        program = parse(text)
        if not program.pdl:
            continue
        twin = replace(program, pdl=False)
        if str(twin) not in programs and str(twin) not in twins and check(twin, problem) is None:
            twins.append(str(twin))
    return twins


def confirmation_protocols(runner, problem) -> tuple[str, ...]:
    """The runner's protocols (its `settings`), plus the after protocol below the large
    class; () for a runner without settings (a replay answers from its records)."""
    if not hasattr(runner, "with_protocols"):
        return ()
    settings = getattr(runner, "settings", None)
    protocols = tuple(settings.protocols) if settings is not None else ("kernel",)
    if shape_class(problem) != "large" and "after" not in protocols:
        protocols += ("after",)
    return protocols


def source_of(study, program: str, before=None) -> str:
    """The source (policy name, "sampler", ...) of the study's trial that measured
    `program`; else, for the program the resolver served before the tune (`before`, a
    dispatch.choice.Choice), its provenance ("shipped-exact", ...); else "database" (the
    database's entry, tuned elsewhere)."""
    for t in measured_trials(study.get_trials(deepcopy=False)):
        if t.user_attrs["result"]["program"] == program:
            return t.user_attrs.get("source", "")
    if before is not None and not before.cublas and str(before.program) == program:
        return before.provenance
    return "database"


def confirm(runner, study, problem, top: int, database=None, command: str = "",
            before=None) -> tuple[Result | None, bool]:
    """Measure the contenders again on `runner` and record the best in `database`;
    `before`: what the resolver served before the tune (search.tune.incumbent.resolver_choice,
    taken before any trial was recorded; None: only the database's entry competes).

    Returns (the confirmed best Result, whether it was measured now), or (None, False)
    when there is nothing to confirm or none of the contenders measured ok again."""
    from ...ir.text import parse
    entry = database.best(runner.device, problem) if database is not None else None
    incumbents = [str(p) for p in incumbent_programs(before, entry)]
    programs = contenders(study, top, incumbents, problem)
    if not programs:
        return None, False
    protocols = confirmation_protocols(runner, problem)
    kept = study.user_attrs.get(ATTR) or {}
    if (kept.get("result") and set(programs) <= set(kept.get("programs", ()))
            and set(protocols) <= set(kept.get("protocols", ()))):
        return Result.from_dict(kept["result"]), False  # nothing new since the last one
    timing = runner.with_protocols(protocols) if protocols else runner
    results = timing.evaluate([parse(p) for p in programs], problem)
    ok = [r for r in results if r.ok and reward(r) > WORST_REWARD]
    if not ok:
        return None, True
    best = max(ok, key=lambda r: selection_ratio(problem, r))
    if database is not None:
        database.record(runner.device, problem, best, command, study=study.study_name,
                        replace=True)
    study.set_user_attr(ATTR, {"programs": programs, "protocols": list(protocols),
                               "result": best.to_dict(),
                               "ratios": {r.program: r.speedup for r in ok},
                               "selected": {r.program: selection_ratio(problem, r) for r in ok}})
    return best, True
