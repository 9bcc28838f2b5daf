"""The tuner: one optuna study per (device, problem), fed by optuna's sampler and a policy.

    from gemmforge.search.measure.replay import ReplayRunner           # or HarnessRunner(0) on a GPU machine
    tuner = Tuner(ReplayRunner(), policy=HeuristicPolicy(), storage="sqlite:///t.db",
                  settings=TuneSettings(budget=Budget(trials=32)))
    outcome = tuner.tune(parse_problem("1000x4096x333"))
    outcome.best.program, outcome.best_ratio

Per batch (`settings.batch` candidates): the policy's proposals enter the study as waiting
trials (`study.enqueue_trial` with the program's parameters, user attr `source`), then
`study.ask()` hands out waiting trials first and sampler trials after; `ir.space.Space`
turns each trial into a Program. A program that fails ir.verify is a FAIL trial with user
attr `reason` and costs no measurement; a program already measured in the study is told
its earlier value (`duplicate_of`). The rest are measured together by the runner; each
result is told (value = reward = log(cublas_us / kernel_us), a failed build or run gets
search.measure.env.WORST_REWARD with its `kind` and `message`) and observed by the policy. Once
the budget is spent, the best few programs, the program the resolver served before the tune
and the database's entry are timed again together beside cuBLAS, and the winner, with those
figures, becomes the outcome and the database entry (`settings.confirm`, search.tune.confirm):
the best of many noisy readings reads high, and a tune must not leave a shape slower than
it found it. Without confirmation (`confirm=0`) each new best goes to the database.

Budgets count the whole study, every run and worker together: `trials` measured
candidates, `seconds` of measurement (the sum of each trial's `cost_s`). State lives only
in the storage, so an interrupted run resumes where it stopped: the trials a run was
measuring when it raised (Ctrl-C and SIGTERM included, search.tune.interrupts) are failed with
the reason and re-enqueued at once; those of a killed process are failed and re-enqueued
(optuna's RetryHeartbeatStaleTrialCallback) by the next tuner to open the study: at once
where the trial's owner (user attr `owner`, host:pid) is a process of that host that has
ended, else once its heartbeat is `grace_s` old. Storage: any SQLAlchemy URL (PostgreSQL to
share studies across machines), SQLite in the user cache dir by default, ":memory:" for a
throw-away study. Study name: "<device> | <problem>", e.g. "NVIDIA H200 | 1024x1024x1024 nn f32";
a run whose search space (backends, archs, package version) gives a parameter other choices
than the stored trials had continues "<device> | <problem> | space <hash>", seeded with
the problem's earlier trials (search.tune.study_spaces).
"""
from __future__ import annotations

import random
import threading
import time
import warnings
from dataclasses import replace
from typing import Callable, Sequence

from ...ir.program import Problem
from ...ir.space import Space
from . import study_spaces
from .candidate_trials import Batch, claim, fail_stale, known_programs, reject, requeue
from ..measure.env import WORST_REWARD, reward
from ..measure.records import Result
from ..measure.runners import HarnessRunner, Runner, archs_for_sm  # noqa: F401 (re-exported)
from .tune_records import Budget, Outcome, TuneSettings  # noqa: F401 (re-exported)
from .studies import (MESSAGE_CHARS, OWNER_ATTR, TUNER_PREFIX, heartbeat,
                      make_sampler, measured_trials, open_storage, owner_tag,
                      study_name, trial_id, trial_result)


AWAIT_POLL_S = 0.2  # how often a worker whose share is done looks at the others' trials


class _Serialized:
    """A policy whose propose and observe run one at a time, for tune_all's threads."""

    def __init__(self, policy):
        self.inner, self.name, self._lock = policy, policy.name, threading.Lock()

    def propose(self, *args, **kwargs):
        with self._lock:
            return self.inner.propose(*args, **kwargs)

    def observe(self, *args, **kwargs):
        with self._lock:
            return self.inner.observe(*args, **kwargs)


def _result_attrs(result: Result, source: str, cost_s: float, worker: str) -> dict:
    data = trial_result(result.to_dict())
    return {"measured": True, "source": source, "status": result.status, "kind": result.kind,
            "speedup": result.speedup, "cost_s": cost_s, "worker": worker, "result": data}


class Tuner:
    """Tunes problems on one runner (one device) against a storage shared by any number of
    tuners. `policy` (policy.base.Policy, or None for the sampler alone) proposes part of
    every batch and observes every result; `database` (search.tune.database.TunedDatabase, or
    None) receives the confirmation's winner where the run confirms (a trial's reading, the
    kernel protocol's one noisy figure, never goes in: the confirmation at the budget's end
    decides, what served before the tune among its contenders, search.tune.confirm), else
    each new best.
    `on_result(event: dict)` is called after every measured
    candidate (keys: problem, measured, budget, reward, best_ratio, source, worker);
    `stop` (search.tune.interrupts.Stop) ends tuning before the next batch once set.
    `run_measured`: study name -> candidates this tuner measured and told."""

    def __init__(self, runner: Runner, policy=None, storage: str | None = None,
                 settings: TuneSettings | None = None, database=None,
                 on_result: Callable[[dict], None] | None = None, worker: str = "",
                 stop=None):
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.runner, self.database = runner, database
        self.policy = None if policy is None else _Serialized(policy)
        self.settings = settings or TuneSettings()
        self.storage = open_storage(storage, self.settings.heartbeat_s, self.settings.grace_s)
        self.on_result, self.worker, self.stop = on_result, worker, stop
        self.run_measured: dict[str, int] = {}
        self._count_lock = threading.Lock()
        self._owner = owner_tag()
        self._rng = random.Random(self.settings.seed)
        self._observed: set[tuple[str, int]] = set()  # (study, trial number) seen by policy
        self._before: dict[str, object] = {}  # problem -> what the resolver served at the start

    def study(self, problem: Problem):
        """The problem's study on this runner's device for this run's space (created if
        missing; search.tune.study_spaces)."""
        seed = None if self.settings.seed is None else self._rng.randrange(2 ** 31)
        sampler = make_sampler(seed, self.settings.startup_trials)
        return study_spaces.open_for_space(self.storage, study_name(self.runner.device, problem),
                                           self.space(problem), sampler)

    def space(self, problem: Problem) -> Space:
        return Space.build(self.runner.archs, self.settings.backends, problem)

    def tune_all(self, problems: Sequence[Problem], concurrent: int = 1) -> list[Outcome]:
        """Tune every problem, `concurrent` at a time (threads sharing this tuner's runner:
        one problem's builds overlap another's measurements). Outcomes in input order."""
        if concurrent < 1:
            raise ValueError(f"concurrent: {concurrent} must be >= 1")
        if concurrent == 1 or len(problems) < 2:
            return [self.tune(p) for p in problems]
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(concurrent, len(problems)),
                                thread_name_prefix="gemmforge-tune") as pool:
            return list(pool.map(self.tune, problems))

    def tune(self, problem: Problem) -> Outcome:
        """Spend what is left of the problem's budget; return the study's outcome, its
        `timing` this run's wall seconds by stage: "ask" (proposals, sampling, verify),
        "evaluate" (the runner: builds and measurements), "tell" (storing results), and
        the sums over its results of "build" (CPU) and "measure" (GPU) seconds."""
        study, space = self.study(problem), self.space(problem)
        study.set_user_attr(TUNER_PREFIX + self._owner, True)  # before looking for orphans
        if self.settings.confirm:
            from .incumbent import resolver_choice
            self._before[str(problem)] = resolver_choice(self.runner, problem, self.database)
        requeued = fail_stale(study)
        self._observe_history(study, problem)
        timing = dict.fromkeys(("ask", "evaluate", "tell", "build", "measure"), 0.0)
        while True:
            room = self._room(study)
            if room <= 0:
                if self._settle(study):
                    continue  # others' trials failed or were orphaned: room again
                break
            if self.stop is not None:
                self.stop.check()
            start = time.monotonic()
            with self._shield():  # a signal here would leave asked trials RUNNING
                self._enqueue_proposals(study, space, problem, room)
                self._enqueue_startup(study, space, problem, room)
                batch = self._ask(study, space, problem, room)
            timing["ask"] += time.monotonic() - start
            if self.stop is not None and self.stop.is_set():
                requeue(study, batch, self.stop.reason)
                self.stop.check()
            if not batch:
                # other workers' candidates fill the budget (surplus), or every ask was
                # invalid or a duplicate: either way the outcome waits for those in flight
                if self._settle(study) and batch.surplus:
                    continue
                break
            self._measure(study, problem, batch, timing)
        outcome = replace(self.outcome(study, problem), timing=timing, requeued=requeued)
        if self.stop is not None:
            self.stop.check()
        return self._confirm(study, problem, outcome) if self.settings.confirm else outcome

    def _settle(self, study) -> bool:
        """With no candidate of this worker's own in flight: wait while other workers'
        trials run (asked, claimed or being measured), up to `grace_s`, so the outcome
        counts the budget as the storage will hold it. True when there may be room again:
        a killed worker's trials (their owner gone, or silent past the grace period) were
        failed and queued again, or the others' trials ended without filling the budget."""
        from optuna.trial import TrialState
        from .studies import owner_gone
        deadline = time.monotonic() + self.settings.grace_s
        while True:
            if self.stop is not None and self.stop.is_set():
                return False
            owners = [t.user_attrs.get(OWNER_ATTR, "") for t in
                      study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
            others = [o for o in owners if o != self._owner]
            if any(not o or owner_gone(o) for o in others) and fail_stale(study):
                return True
            if not others:
                return self._room(study) > 0
            if time.monotonic() >= deadline:
                return fail_stale(study) > 0  # stale by now if their heartbeats stopped
            time.sleep(AWAIT_POLL_S)

    def _shield(self):
        from contextlib import nullcontext
        return self.stop.shield() if self.stop is not None else nullcontext()

    def _confirm(self, study, problem: Problem, outcome: Outcome) -> Outcome:
        from .confirm import confirm, source_of
        start = time.monotonic()
        before = self._before.get(str(problem))
        best, measured = confirm(self.runner, study, problem, self.settings.confirm,
                                 self.database, self.settings.command, before)
        outcome.timing["evaluate"] += (time.monotonic() - start) if measured else 0.0
        return outcome if best is None else replace(
            outcome, best=best, source=source_of(study, best.program, before), confirmed=True)

    def progress(self, problem: Problem) -> Outcome:
        """The problem's outcome as stored now, unconfirmed (what an interrupted run
        reports); a study never created has measured nothing."""
        import optuna
        name = study_spaces.resolve(self.storage, study_name(self.runner.device, problem),
                                    self.space(problem).distributions())
        try:
            study = optuna.load_study(study_name=name, storage=self.storage)
        except KeyError:
            return Outcome(problem, name, 0, None)
        return self.outcome(study, problem)

    def outcome(self, study, problem: Problem) -> Outcome:
        measured = measured_trials(study.get_trials(deepcopy=False))
        ok = [t for t in measured if t.user_attrs.get("status") == "ok"]
        best = max(ok, key=lambda t: t.value, default=None)
        result = Result.from_dict(best.user_attrs["result"]) if best else None
        return Outcome(problem, study.study_name, len(measured), result,
                       best.user_attrs.get("source", "") if best else "",
                       run_measured=self.run_measured.get(study.study_name, 0))

    def _room(self, study) -> int:
        """How many candidates this worker may start now (0: the budget is spent)."""
        from optuna.trial import TrialState
        trials = study.get_trials(deepcopy=False)
        measured = measured_trials(trials)
        running = sum(t.state == TrialState.RUNNING and bool(t.user_attrs.get("candidate"))
                      for t in trials)
        budget = self.settings.budget
        if budget.seconds is not None and \
                sum(t.user_attrs.get("cost_s", 0.0) for t in measured) >= budget.seconds:
            return 0
        return max(0, min(self.settings.batch, budget.trials - len(measured) - running))

    def _observe_history(self, study, problem: Problem) -> None:
        """Let the policy observe results stored by earlier runs or other workers."""
        from ...ir.text import parse
        if self.policy is None:
            return
        for t in measured_trials(study.get_trials(deepcopy=False)):
            if (study.study_name, t.number) not in self._observed:
                self._observed.add((study.study_name, t.number))
                self.policy.observe(problem, parse(t.user_attrs["result"]["program"]), t.value)

    def _enqueue_proposals(self, study, space: Space, problem: Problem, room: int) -> None:
        """Queue up to policy_share x room new policy programs (those not yet in the study)."""
        from optuna.trial import TrialState
        want = round(room * self.settings.policy_share)
        if self.policy is None or want < 1:
            return
        if len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) >= room:
            return
        known = known_programs(study)
        proposals = self.policy.propose(problem, self.runner.archs[0], want + len(known))
        fresh = [p for p in proposals if str(p) not in known and space.contains(p)][:want]
        for program in fresh:
            study.enqueue_trial(space.params(program), skip_if_exists=True,
                                user_attrs={"source": self.policy.name, "program": str(program)})

    def _ask(self, study, space: Space, problem: Problem, room: int) -> Batch:
        """Up to `room` (trial, program, source) to measure; invalid and duplicate asks are
        told at once; after max_rejects of them in a row a random legal program is queued.
        The batch's `surplus` says it stopped short because other workers' earlier
        candidates fill the budget."""
        from ...ir.verify import check
        known, batch, rejects = known_programs(study), Batch(), 0
        for _ in range(room * self.settings.max_rejects * 4):
            if len(batch) == room:
                break
            with warnings.catch_warnings():  # heartbeats are ours (ask/tell, not optimize)
                warnings.filterwarnings("ignore", message="Heartbeat of storage")
                trial = study.ask()
            if hasattr(self.storage, "record_heartbeat"):  # so a killed run's asks go stale
                # (the storage wrote the trial with its owner: a rerun here fails it at once)
                self.storage.record_heartbeat(trial_id(trial))
            program = space.suggest(trial)
            text, source = str(program), trial.user_attrs.get("source", "sampler")
            # mark it a candidate at once, before verify: other workers settle duplicates
            # against earlier RUNNING candidates, so the window in which this trial is
            # RUNNING but unmarked must be as short as possible (an invalid one is failed
            # below and then counts for nothing)
            if trial.user_attrs.get("program") != text:  # enqueued trials carry both
                trial.set_user_attr("program", text)
                trial.set_user_attr("source", source)
            trial.set_user_attr("candidate", True)
            reason = check(program, problem)
            if reason or text in known:
                rejects += 1
                reject(study, trial, reason, known.get(text))
                if rejects % self.settings.max_rejects == 0:
                    self._enqueue_random(study, space, problem, known)
                continue
            known[text] = None
            verdict = claim(study, trial, text, self.settings.budget.trials)
            if verdict == "surplus":
                batch.surplus = True
                break
            if verdict == "ok":
                batch.append((trial, program, source))
        return batch

    def _enqueue_startup(self, study, space: Space, problem: Problem, room: int) -> None:
        """While the sampler is in its random start (fewer than startup_trials finished
        trials: a whole first batch, however large), fill the batch's sampler share with
        random legal programs."""
        from optuna.trial import TrialState
        trials = study.get_trials(deepcopy=False)
        finished = sum(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)
        waiting = sum(t.state == TrialState.WAITING for t in trials)
        if finished >= self.settings.startup_trials:
            return
        known = known_programs(study)
        for _ in range(max(0, room - waiting)):  # TPE samples at random until enough finish
            self._enqueue_random(study, space, problem, known)

    def _enqueue_random(self, study, space: Space, problem: Problem, known: dict) -> None:
        for _ in range(100):
            program = space.sample_legal(problem, self._rng)
            if str(program) not in known:
                study.enqueue_trial(space.params(program),
                                    user_attrs={"source": "random", "program": str(program)})
                known[str(program)] = None
                return

    def _measure(self, study, problem: Problem, batch: list[tuple], timing: dict) -> None:
        """Measure a batch; tell, observe and record each result. If anything raises (an
        interrupt included), the batch's untold trials are failed and re-enqueued."""
        trials = [t for t, _, _ in batch]
        told: set[int] = set()
        reason = "interrupted"
        try:
            start = time.monotonic()
            with heartbeat(self.storage, trials, self.settings.heartbeat_s):
                results = self.runner.evaluate([p for _, p, _ in batch], problem)
            told_at = time.monotonic()
            cost = (told_at - start) / len(batch)
            before = self.outcome(study, problem)
            best = before.best
            for (trial, program, source), result in zip(batch, results):
                best = self._tell(study, problem, trial, program, source, result, cost, best,
                                  before.measured + len(told) + 1)
                told.add(trial.number)
            timing["evaluate"] += told_at - start
            timing["tell"] += time.monotonic() - told_at
            timing["build"] += sum(r.build_s or 0.0 for r in results)
            timing["measure"] += sum(r.measure_s or 0.0 for r in results)
        except BaseException as e:
            reason = (self.stop.reason if self.stop is not None and self.stop.is_set() else
                      str(e) if isinstance(e, KeyboardInterrupt) and str(e) else
                      f"{type(e).__name__}: {str(e)[:MESSAGE_CHARS]}")
            raise
        finally:
            requeue(study, [b for b in batch if b[0].number not in told], reason)

    def _tell(self, study, problem, trial, program, source, result, cost, best, measured):
        from optuna.exceptions import UpdateFinishedTrialError
        value = reward(result)
        current = trial.user_attrs  # a copy: read once; source is usually set already
        try:
            for key, attr in _result_attrs(result, source, cost, self.worker).items():
                if current.get(key, self) != attr:
                    trial.set_user_attr(key, attr)
            study.tell(trial, value)
        except UpdateFinishedTrialError:
            # another worker failed it as stale (its heartbeats stopped reaching the
            # storage) and queued its program again: that retry measures it, not this one
            return best
        with self._count_lock:
            self.run_measured[study.study_name] = self.run_measured.get(study.study_name, 0) + 1
        self._observed.add((study.study_name, trial.number))
        if self.policy is not None:
            self.policy.observe(problem, program, value)
        if result.ok and value > WORST_REWARD and (best is None or reward(best) < value):
            best = result
            if self.database is not None and not self.settings.confirm:
                self.database.record(self.runner.device, problem, result,
                                     self.settings.command, study=study.study_name)
        if self.on_result is not None:
            self.on_result({"problem": problem, "measured": measured,
                            "budget": self.settings.budget.trials, "reward": value,
                            "best_ratio": best.speedup if best else None,
                            "source": source, "worker": self.worker})
        return best
