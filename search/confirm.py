"""Confirm a tuned problem's best program: time its top contenders again, together.

    result = confirm(runner, study, problem, top=3, database=db)

The highest of many noisy measurements reads high: in issue 4's sweeps the best of ~25
programs per shape overstated the geomean by 0.5-1.7 points, and a shape's winner from one
sweep fell from 0.99 to 0.96 when timed again (benchmarks/NOTES.md, "The best of a sweep
reads high"). So once a problem's budget is spent, the study's `top` best distinct programs
by measured reward, and the tuned database's current entry for the device and problem if
it is another program, are measured again in one batch (the runner times a batch of one
problem as one group: every round visits all of them and cuBLAS). The best of that batch
becomes the database entry, with the confirmation's figures, replacing what is there: the
entry is always the winner of the latest head-to-head measurement, not the luckiest
reading ever taken. The study keeps the confirmation (user attribute "confirmed"); a later
run whose contenders were all in it returns it without measuring again.
"""
from __future__ import annotations

from gemmforge.search.env import WORST_REWARD, reward
from gemmforge.search.records import Result
from gemmforge.search.studies import measured_trials

ATTR = "confirmed"


def contenders(study, top: int, incumbent: str | None = None) -> list[str]:
    """The study's `top` best distinct ok programs by measured reward (best first), then
    `incumbent` (the database entry's program text) if it is not among them."""
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
    if programs and incumbent and incumbent not in programs:
        programs.append(incumbent)
    return programs


def source_of(study, program: str) -> str:
    """The source (policy name, "sampler", ...) of the study's trial that measured
    `program`, or "database" if none did (the database's entry, tuned elsewhere)."""
    for t in measured_trials(study.get_trials(deepcopy=False)):
        if t.user_attrs["result"]["program"] == program:
            return t.user_attrs.get("source", "")
    return "database"


def confirm(runner, study, problem, top: int, database=None,
            command: str = "") -> tuple[Result | None, bool]:
    """Measure the contenders again on `runner` and record the best in `database`.

    Returns (the confirmed best Result, whether it was measured now), or (None, False)
    when there is nothing to confirm or none of the contenders measured ok again."""
    from gemmforge.ir.text import parse
    entry = database.best(runner.device, problem) if database is not None else None
    programs = contenders(study, top, str(entry.program) if entry else None)
    if not programs:
        return None, False
    kept = study.user_attrs.get(ATTR) or {}
    if kept.get("result") and set(programs) <= set(kept.get("programs", ())):
        return Result.from_dict(kept["result"]), False  # nothing new since the last one
    results = runner.evaluate([parse(p) for p in programs], problem)
    ok = [r for r in results if r.ok and reward(r) > WORST_REWARD]
    if not ok:
        return None, True
    best = max(ok, key=reward)
    if database is not None:
        database.record(runner.device, problem, best, command, study=study.study_name,
                        replace=True)
    study.set_user_attr(ATTR, {"programs": programs, "result": best.to_dict(),
                               "ratios": {r.program: r.speedup for r in ok}})
    return best, True
