"""How the tuner settles its candidate trials in a study that many workers share.

A candidate is a trial a worker asked for and means to measure (user attr `candidate`,
its program's text in `program`). Before measuring, a worker claims it against every
worker's earlier candidates (`claim`); one that is invalid or a duplicate is told at once
(`reject`); one a run abandoned, by an exception or an interrupt, is failed and queued
again (`requeue`), and so are those a stopped run left RUNNING (`fail_stale`). All of it
reads and writes the study alone, so search.tune.tuner's workers agree through the storage.
"""
from __future__ import annotations

from datetime import datetime

from .studies import fail_stale_trials


class Batch(list):
    """The (trial, program, source) a worker asked for and will measure; `surplus`: asking
    stopped short because other workers' candidates fill the budget."""
    surplus = False


def fail_stale(study) -> int:
    """Fail and re-enqueue the trials stopped runs left RUNNING; how many there were."""
    from optuna.trial import TrialState
    running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    if not running:
        return 0
    fail_stale_trials(study)
    return sum(t.state == TrialState.FAIL and t.number in running
               for t in study.get_trials(deepcopy=False))


def known_programs(study) -> dict[str, float | None]:
    """Program text -> value of every program measured, being measured or queued (None
    until it has a value)."""
    from optuna.trial import TrialState
    known: dict[str, float | None] = {}
    for t in study.get_trials(deepcopy=False):
        text = t.user_attrs.get("program")
        if text and (t.state == TrialState.RUNNING or t.user_attrs.get("measured")):
            known[text] = t.value if t.state == TrialState.COMPLETE else None
    return known


def _asked(t) -> tuple:
    """A trial's place in the order of asks: when it started running, then its number. Numbers
    alone do not order asks: an enqueued trial takes its number when it is queued and may
    start after trials numbered above it."""
    return (t.datetime_start or datetime.max, t.number)


def claim(study, trial, text: str, budget_trials: int) -> str:
    """Settle a candidate against every worker's earlier candidates (those asked before it,
    and every one measured already): "duplicate" if one of them has the same program,
    "surplus" if they fill the trial budget (`budget_trials`; both told at once), else "ok"."""
    from optuna.trial import TrialState
    trials = study.get_trials(deepcopy=False)
    mine = next(t for t in trials if t.number == trial.number)
    # an earlier RUNNING trial counts even before its worker has marked it a candidate
    # (asked, not yet verified): counting it may make this one surplus for now, which
    # the next batch makes good; not counting it can overspend the budget for good
    earlier = [t for t in trials if t.number != trial.number and (
        (t.state == TrialState.RUNNING and _asked(t) < _asked(mine)) or (
            t.state == TrialState.COMPLETE and t.user_attrs.get("candidate")
            and t.user_attrs.get("measured")))]
    same = [t for t in earlier if t.user_attrs.get("program") == text]
    if same:
        reject(study, trial, None, same[0].value)
        return "duplicate"
    if len(earlier) < budget_trials:
        return "ok"
    trial.set_user_attr("reason", "surplus: the budget was spent by other workers")
    study.tell(trial, state=TrialState.FAIL)
    return "surplus"


def reject(study, trial, reason: str | None, value: float | None) -> None:
    """Tell a candidate that will not be measured: failed as invalid with `reason` if
    given, else a duplicate told the earlier program's `value` (failed while that one,
    still being measured, has none)."""
    from optuna.trial import TrialState
    if reason:
        trial.set_user_attr("invalid", True)
        trial.set_user_attr("reason", reason)
        study.tell(trial, state=TrialState.FAIL)
    elif value is not None:
        trial.set_user_attr("duplicate", True)
        study.tell(trial, value)
    else:  # a duplicate of one still being measured: no value to copy yet
        trial.set_user_attr("duplicate", True)
        study.tell(trial, state=TrialState.FAIL)


def requeue(study, batch: list[tuple], reason: str) -> None:
    """Fail the (trial, program, source) a run abandoned (`reason`: why) and queue their
    programs again."""
    from optuna.trial import TrialState
    for trial, program, source in batch:
        try:
            trial.set_user_attr("reason", f"{reason}: re-enqueued")
            study.tell(trial, state=TrialState.FAIL)
            study.enqueue_trial(trial.params, user_attrs={
                "source": source, "program": str(program), "retry_of": trial.number})
        except Exception:  # already told, or the storage is gone: the heartbeat
            pass           # timeout retries it on the next run
