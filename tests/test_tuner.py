"""gemmforge.search.tune.tuner on the replay runner: policy proposals and sampler trials in one study, the
best recorded program found within budget, verify failures as FAIL trials, budgets, and
resume after an exception or a killed process with no finished trial lost."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest

from gemmforge.ir.program import Arch, Problem
from gemmforge.policy.heuristic import HeuristicPolicy
from gemmforge.search.measure import replay
from gemmforge.search.tune.database import TunedDatabase
from gemmforge.search.measure.records import replace
from gemmforge.search.tune.tuner import Budget, Tuner, TuneSettings

PROBLEM = Problem(512, 2048, 1024)
ARCHS = ("sm_90a",)
SETTINGS = dict(backends=("cuda_mma",), batch=4, seed=0, heartbeat_s=1, grace_s=2)
ROOT = Path(__file__).resolve().parents[1]


def _url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'studies.db'}"


def _measured(study):
    return {t.number: t.value for t in study.get_trials(deepcopy=False)
            if t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get("measured")}


def test_finds_the_best_recorded_program_within_budget(tmp_path):
    proposals = HeuristicPolicy().propose(PROBLEM, Arch.SM90A, 10)
    star = proposals[7]  # ranked low by the heuristic: the search must get there
    recorded = [replace(replay.synthetic_result(p, PROBLEM), flags=(), device="recorded")
                for p in proposals]
    recorded[7] = replace(recorded[7], kernel_us=recorded[7].cublas_us / 2)
    runner = replay.ReplayRunner(recorded, archs=ARCHS)
    db = TunedDatabase(_url(tmp_path))
    tuner = Tuner(runner, HeuristicPolicy(), _url(tmp_path),
                  TuneSettings(budget=Budget(24), **SETTINGS), database=db)
    outcome = tuner.tune(PROBLEM)
    assert outcome.measured == 24
    assert outcome.best.program == str(star) and outcome.best_ratio == pytest.approx(2.0)
    assert outcome.source == "heuristic" and outcome.best.device == "recorded"
    assert db.best("replay", PROBLEM).program == star
    study = tuner.study(PROBLEM)
    sources = {t.user_attrs.get("source") for t in study.trials if t.user_attrs.get("measured")}
    assert {"heuristic", "sampler"} <= sources
    invalid = [t for t in study.trials if t.user_attrs.get("invalid")]
    assert all(t.state == optuna.trial.TrialState.FAIL and t.user_attrs["reason"]
               for t in invalid)
    assert tuner.tune(PROBLEM).measured == 24  # budget spent: a second run measures nothing


def test_time_budget(tmp_path):
    runner = replay.ReplayRunner(archs=ARCHS, delay_s=0.05)
    settings = TuneSettings(budget=Budget(1000, seconds=0.5), **SETTINGS)
    outcome = Tuner(runner, None, _url(tmp_path), settings).tune(PROBLEM)
    assert 4 <= outcome.measured <= 20


class _Crashing(replay.ReplayRunner):
    def __init__(self, after: int, **kw):
        super().__init__(**kw)
        self.after = after

    def evaluate(self, programs, problem):
        self.after -= 1
        if self.after < 0:
            raise KeyboardInterrupt("simulated interrupt")
        return super().evaluate(programs, problem)


def test_resume_after_an_exception_loses_nothing(tmp_path):
    settings = TuneSettings(budget=Budget(20), **SETTINGS)
    first = Tuner(_Crashing(after=2, archs=ARCHS), HeuristicPolicy(), _url(tmp_path), settings)
    with pytest.raises(KeyboardInterrupt):
        first.tune(PROBLEM)
    before = _measured(first.study(PROBLEM))
    assert len(before) == 8
    resumed = Tuner(replay.ReplayRunner(archs=ARCHS), HeuristicPolicy(), _url(tmp_path),
                    settings)
    assert resumed.tune(PROBLEM).measured == 20
    study = resumed.study(PROBLEM)
    after = _measured(study)
    assert all(after[n] == v for n, v in before.items())
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    retried = [t for t in study.trials if "retry_of" in t.user_attrs and t.number in after]
    assert len(retried) == 4  # the batch in flight was measured on resume


_WORKER = textwrap.dedent("""
    import sys
    from gemmforge.ir.program import Problem
    from gemmforge.policy.heuristic import HeuristicPolicy
    from gemmforge.search.measure.replay import ReplayRunner
    from gemmforge.search.tune.tuner import Budget, Tuner, TuneSettings
    settings = TuneSettings(budget=Budget(40), backends=("cuda_mma",), batch=4, seed=0,
                            heartbeat_s=1, grace_s=2)
    runner = ReplayRunner(archs=("sm_90a",), delay_s=0.1)
    Tuner(runner, HeuristicPolicy(), sys.argv[1], settings).tune(Problem(512, 2048, 1024))
""")


def test_resume_after_a_killed_process_loses_nothing(tmp_path):
    url = _url(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", _WORKER, url], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    settings = TuneSettings(budget=Budget(40), **SETTINGS)
    tuner = Tuner(replay.ReplayRunner(archs=ARCHS), HeuristicPolicy(), url, settings)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        if not Path(url[10:]).exists():
            continue
        study = tuner.study(PROBLEM)
        if len(_measured(study)) >= 8 and any(
                t.state == optuna.trial.TrialState.RUNNING for t in study.trials):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    study = tuner.study(PROBLEM)
    before = _measured(study)
    running = [t.number for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    assert len(before) >= 8 and running, "the worker should die in the middle of a batch"
    time.sleep(settings.grace_s + 1.5)  # its trials' heartbeats go stale
    assert tuner.tune(PROBLEM).measured == 40
    study = tuner.study(PROBLEM)
    after = _measured(study)
    assert all(after[n] == v for n, v in before.items())
    states = {t.number: t.state for t in study.trials}
    assert all(states[n] == optuna.trial.TrialState.FAIL for n in running)
    # each stale trial got a retry enqueued (measured if the budget reached it)
    retried = {t.system_attrs.get("failed_trial") for t in study.trials}
    assert set(running) <= retried


def test_a_trial_killed_before_its_first_heartbeat_is_failed_and_retried(tmp_path):
    """ask() makes a trial RUNNING before the tuner records its first heartbeat; a process
    killed in between leaves a RUNNING trial with no heartbeat, which must not stay forever."""
    from gemmforge.search.tune.studies import fail_stale_trials, open_storage
    storage = open_storage(_url(tmp_path), heartbeat_s=1, grace_s=1)
    study = optuna.create_study(storage=storage, study_name="orphan")
    study.enqueue_trial({"x": 1})
    orphan = study.ask()              # RUNNING, and no heartbeat ever recorded
    time.sleep(2.2)
    fail_stale_trials(study)
    states = {t.number: t.state for t in study.trials}
    assert states[orphan.number] == optuna.trial.TrialState.FAIL
    retry = [t for t in study.trials if t.system_attrs.get("failed_trial") == orphan.number]
    assert len(retry) == 1 and retry[0].state == optuna.trial.TrialState.WAITING


_ASK_AND_DIE = textwrap.dedent("""
    import os, signal, sys, optuna
    from gemmforge.search.tune.studies import open_storage
    study = optuna.load_study(study_name="asked", storage=open_storage(sys.argv[1], 1, 600))
    study.ask()  # the queued trial
    study.ask()  # a new one
    os.kill(os.getpid(), signal.SIGKILL)
""")
_LIVE_TUNER = ("import time; from gemmforge.search.tune.studies import owner_tag; "
               "print(owner_tag(), flush=True); time.sleep(120)")


def test_a_process_killed_right_after_ask_leaves_trials_it_owns(tmp_path):
    """The storage writes a trial's owner as the trial starts running (popped from the
    queue, or new), before the sampler runs inside `ask`: a process killed before the
    tuner's first call after `ask` leaves no ownerless RUNNING trial, and the next tuner
    fails its trials at once although another tuner of the study lives and the grace
    period is 600 s."""
    from gemmforge.search.tune.studies import (OWNER_ATTR, TUNER_PREFIX, fail_stale_trials,
                                               open_storage)
    url, env = _url(tmp_path), dict(os.environ, PYTHONPATH=str(ROOT))
    study = optuna.create_study(storage=open_storage(url, 1, 600), study_name="asked")
    study.enqueue_trial({"x": 1})
    live = subprocess.Popen([sys.executable, "-c", _LIVE_TUNER], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        study.set_user_attr(TUNER_PREFIX + live.stdout.readline().strip(), True)
        dead = subprocess.Popen([sys.executable, "-c", _ASK_AND_DIE, url], env=env)
        assert dead.wait(timeout=120) == -signal.SIGKILL
        running = [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
        assert len(running) == 2
        assert {t.user_attrs.get(OWNER_ATTR, "").split(":")[1:2] == [str(dead.pid)]
                for t in running} == {True}
        fail_stale_trials(study)
        assert {t.state for t in study.trials if t.number in {r.number for r in running}} \
            == {optuna.trial.TrialState.FAIL}
    finally:
        live.kill()
        live.wait()


def test_an_ownerless_running_trial_is_failed_after_the_grace_and_the_budget_fills(tmp_path):
    """A RUNNING trial with no owner (asked through optuna's own storage, as an older
    version's kill left them) while another tuner of the study lives: the tuner can't tell
    it from that tuner's, so it waits the grace period out, then fails it and measures the
    budget in full rather than count the trial against it."""
    url, env = _url(tmp_path), dict(os.environ, PYTHONPATH=str(ROOT))
    settings = TuneSettings(budget=Budget(12), **SETTINGS)
    tuner = Tuner(replay.ReplayRunner(archs=ARCHS), HeuristicPolicy(), url, settings)
    name = tuner.study(PROBLEM).study_name
    plain = optuna.load_study(study_name=name, storage=optuna.storages.RDBStorage(url))
    live = subprocess.Popen([sys.executable, "-c", _LIVE_TUNER], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        plain.set_user_attr("tuner:" + live.stdout.readline().strip(), True)
        orphan = plain.ask().number
        assert tuner.tune(PROBLEM).measured == 12
    finally:
        live.kill()
        live.wait()
    states = {t.number: t.state for t in plain.trials}
    assert states[orphan] == optuna.trial.TrialState.FAIL
    assert optuna.trial.TrialState.RUNNING not in set(states.values())


class _Overlapping(replay.ReplayRunner):
    """Counts how many evaluate calls run at once."""

    def __init__(self, **kw):
        super().__init__(**kw)
        import threading
        self.lock, self.now, self.most = threading.Lock(), 0, 0

    def evaluate(self, programs, problem):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            return super().evaluate(programs, problem)
        finally:
            with self.lock:
                self.now -= 1


class _Reentrancy(HeuristicPolicy):
    """Fails if two threads are inside it at once."""

    def __init__(self):
        super().__init__()
        self.inside = 0

    def _enter(self, fn, *args):
        self.inside += 1
        try:
            assert self.inside == 1, "policy entered by two threads at once"
            time.sleep(0.002)
            return fn(*args)
        finally:
            self.inside -= 1

    def propose(self, *args):
        return self._enter(super().propose, *args)

    def observe(self, *args):
        return self._enter(super().observe, *args)


def test_tune_all_overlaps_problems_and_serialises_the_policy(tmp_path):
    problems = [Problem(256 * i, 512, 1024) for i in (1, 2, 3, 4)]
    runner = _Overlapping(archs=ARCHS, delay_s=0.02)
    tuner = Tuner(runner, _Reentrancy(), _url(tmp_path),
                  TuneSettings(budget=Budget(8), **SETTINGS))
    outcomes = tuner.tune_all(problems, concurrent=4)
    assert [o.problem for o in outcomes] == problems
    assert all(o.measured == 8 and o.best is not None for o in outcomes)
    assert runner.most > 1
    with pytest.raises(ValueError, match="concurrent"):
        tuner.tune_all(problems, concurrent=0)


def test_the_random_start_is_legal_programs_only(tmp_path):
    """TPE's own random start is mostly illegal programs; the tuner's is verified first."""
    settings = TuneSettings(budget=Budget(8), startup_trials=8,
                            **{**SETTINGS, "backends": ("triton", "cuda_mma")})
    tuner = Tuner(replay.ReplayRunner(archs=ARCHS), None, _url(tmp_path), settings)
    assert tuner.tune(PROBLEM).measured == 8
    trials = tuner.study(PROBLEM).trials
    assert len(trials) == 8 and not [t for t in trials if t.user_attrs.get("invalid")]
    assert {t.user_attrs["source"] for t in trials} == {"random"}


def test_a_trial_keeps_a_failure_message_cut_and_every_other_field():
    """Tuner and campaign store a result's dict in a trial through one helper: a build log
    of any length costs MESSAGE_CHARS characters, the caller's dict is left as it was."""
    from gemmforge.search.tune.studies import MESSAGE_CHARS, trial_result
    data = {"status": "build_error", "message": "x" * (MESSAGE_CHARS + 50), "kernel_us": None}
    kept = trial_result(data)
    assert kept["message"] == "x" * MESSAGE_CHARS and kept["status"] == "build_error"
    assert "kernel_us" in kept and len(data["message"]) == MESSAGE_CHARS + 50
    assert trial_result({"status": "ok"})["message"] == ""


def test_a_run_over_another_space_continues_without_measuring_again(tmp_path):
    """optuna fixes a parameter's choices per study; a run whose backends give "backend"
    other choices continues a space study seeded with the earlier trials."""
    from gemmforge.search.tune.study_spaces import SPACE_MARK
    runner = replay.ReplayRunner(archs=ARCHS)

    def run(backends, trials):
        settings = TuneSettings(budget=Budget(trials), confirm=0,
                                **dict(SETTINGS, backends=backends))
        tuner = Tuner(runner, None, _url(tmp_path), settings)
        return tuner, tuner.tune(PROBLEM)

    first, out1 = run(("cuda_mma", "triton"), 8)
    assert out1.measured == 8 and runner.calls == 8
    second, out2 = run(("cuda_mma", "cuda_wgmma"), 14)
    assert SPACE_MARK in out2.study and out2.measured == 14
    assert runner.calls == 14  # the first run's 8 were carried, not measured again
    texts = [t.user_attrs["program"] for t in _study_trials(second) if t.user_attrs.get("measured")]
    assert len(texts) == len(set(texts)) == 14
    assert set(_programs(first)) <= set(texts)
    assert out2.best_ratio >= out1.best_ratio
    assert second.progress(PROBLEM).measured == 14
    again, out3 = run(("cuda_mma", "triton"), 10)  # the first space: its own study again
    assert out3.study == out1.study and out3.measured == 10 and runner.calls == 16


def _study_trials(tuner):
    return tuner.study(PROBLEM).get_trials(deepcopy=False)


def _programs(tuner):
    return [t.user_attrs["program"] for t in _study_trials(tuner) if t.user_attrs.get("measured")]


def test_a_space_study_whose_seeding_was_cut_short_is_completed(tmp_path, monkeypatch):
    """A process killed between creating the space study and marking it seeded: the next
    run waits WAIT_S for it, then adds the trials it lacks, none twice."""
    from gemmforge.search.tune import study_spaces
    monkeypatch.setattr(study_spaces, "WAIT_S", 0.3)
    runner = replay.ReplayRunner(archs=ARCHS)

    def tuner(backends, trials):
        return Tuner(runner, None, _url(tmp_path), TuneSettings(
            budget=Budget(trials), confirm=0, **dict(SETTINGS, backends=backends)))

    first = tuner(("cuda_mma", "triton"), 6)
    first.tune(PROBLEM)
    second = tuner(("cuda_mma", "cuda_wgmma"), 9)
    space = second.space(PROBLEM)
    base = f"{runner.device} | {PROBLEM}"
    name = study_spaces.resolve(first.storage, base, space.distributions())
    partial = optuna.create_study(study_name=name, storage=first.storage, direction="maximize")
    partial.add_trials(study_spaces.carried(first.storage, [base], space,
                                            space.distributions())[:2])  # then killed
    out = second.tune(PROBLEM)
    assert out.study == name and out.measured == 9 and runner.calls == 9
    texts = [t.user_attrs["program"] for t in _study_trials(second)]
    assert len(texts) == len(set(texts))
    assert second.study(PROBLEM).user_attrs[study_spaces.CARRIED_ATTR] == [base]
