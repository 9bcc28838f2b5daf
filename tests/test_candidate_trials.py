"""search.tune.candidate_trials.claim: candidates are settled in the order they were asked, which
trial numbers do not give when a queued trial starts after trials numbered above it (as when
one worker's ask creates a trial while another's queued trial is still waiting)."""
import time

import optuna
import pytest

from gemmforge.search.tune.candidate_trials import claim

optuna.logging.set_verbosity(optuna.logging.WARNING)


def running(study, storage, study_id, program: str, queued: bool = False):
    """A RUNNING candidate: the queued trial popped by ask, or a new one created directly (a
    worker whose ask did not see the queued trial)."""
    time.sleep(0.002)  # asks a few milliseconds apart: their start times differ
    trial = study.ask() if queued else optuna.trial.Trial(study, storage.create_new_trial(study_id))
    trial.set_user_attr("program", program)
    trial.set_user_attr("candidate", True)
    return trial


@pytest.fixture
def study():
    storage = optuna.storages.InMemoryStorage()
    s = optuna.create_study(storage=storage, study_name="claims")
    return s, storage, s._study_id


def test_a_queued_trial_asked_last_is_surplus_once_others_fill_the_budget(study):
    s, storage, sid = study
    s.enqueue_trial({}, user_attrs={"program": "w"})  # number 0, waiting
    a = running(s, storage, sid, "a")  # numbers 1 and 2, asked first
    b = running(s, storage, sid, "b")
    assert claim(s, a, "a", budget_trials=2) == "ok"
    assert claim(s, b, "b", budget_trials=2) == "ok"
    w = running(s, storage, sid, "w", queued=True)
    assert w.number < a.number  # numbered first, asked last
    assert claim(s, w, "w", budget_trials=2) == "surplus"
    frozen = s.get_trials(deepcopy=False)[w.number]
    assert frozen.state == optuna.trial.TrialState.FAIL
    assert frozen.user_attrs["reason"].startswith("surplus")


def test_a_queued_trial_asked_last_is_a_duplicate_of_a_program_asked_before(study):
    s, storage, sid = study
    s.enqueue_trial({}, user_attrs={"program": "same"})
    a = running(s, storage, sid, "same")
    assert claim(s, a, "same", budget_trials=8) == "ok"
    w = running(s, storage, sid, "same", queued=True)
    assert claim(s, w, "same", budget_trials=8) == "duplicate"
    assert s.get_trials(deepcopy=False)[w.number].user_attrs["duplicate"] is True


def test_measured_candidates_count_and_later_asks_do_not(study):
    s, storage, sid = study
    first = running(s, storage, sid, "first")
    assert claim(s, first, "first", budget_trials=2) == "ok"
    first.set_user_attr("measured", True)
    s.tell(first, 1.0)
    mine = running(s, storage, sid, "mine")
    later = running(s, storage, sid, "later")  # asked after mine: not counted against it
    assert claim(s, mine, "mine", budget_trials=2) == "ok"
    assert claim(s, later, "later", budget_trials=2) == "surplus"
