"""Where studies live and how they sample: storage URLs, study names, the tuner's sampler.

Storage is any SQLAlchemy URL optuna's RDBStorage takes (PostgreSQL to share studies
between machines); the default is SQLite in the user cache dir, opened in WAL mode so
several worker processes on one machine share it; ":memory:" keeps a study in memory.
Open the default storage in a browser with optuna-dashboard:

    pip install optuna-dashboard
    optuna-dashboard sqlite:///$HOME/.cache/gemmforge/tuning.db   # the path default_storage() prints
"""
from __future__ import annotations

import copy
import os
import socket
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from ...dispatch.tuned import default_storage, engine_kwargs
from ...ir.program import Problem
from ...policy.reward import INVALID_REWARD

def study_name(device: str, problem: Problem) -> str:
    """"<device> | <problem text>", e.g. "NVIDIA H200 | 1024x1024x1024 nn f32"."""
    return f"{device} | {problem}"


def open_storage(url: str | None = None, heartbeat_s: int = 30, grace_s: int = 120):
    """The optuna storage for `url` (default_storage() if None, ":memory:" for none on
    disk), with heartbeats: a RUNNING trial silent for `grace_s` is failed and retried
    (up to twice) by the next `optuna.storages.fail_stale_trials` on its study."""
    import optuna
    url = url or default_storage()
    if url == ":memory:":
        return optuna.storages.InMemoryStorage()
    import sqlalchemy
    for attempt in range(5):  # processes starting together race to create optuna's tables
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return _HeartbeatStorage(
                    url, engine_kwargs=engine_kwargs(url), heartbeat_interval=heartbeat_s,
                    grace_period=grace_s, heartbeat_stale_trial_callback=_retry(2))
        except sqlalchemy.exc.DBAPIError:
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))


OWNER_ATTR = "owner"  # user attr of a trial being measured: "host:pid:start" of its process
TUNER_PREFIX = "tuner:"  # study user attr "tuner:<owner tag>": a process that tuned the study


def _start_ticks(pid: int) -> str:
    """When process `pid` started (clock ticks since boot, Linux), "" where unknown: with
    the pid it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def owner_tag() -> str:
    """This process as a trial's owner: "host:pid:start"."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_ticks(os.getpid())}"


def owner_gone(tag: str) -> bool:
    """True when `tag` (owner_tag's form) names a process of this host that has ended;
    False when it lives or runs elsewhere (there only heartbeats tell)."""
    host, _, rest = (tag or "").partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return bool(start) and _start_ticks(int(pid)) not in ("", start)


RETRY_KEEPS = ("source", "program")  # user attrs a stale trial's retry inherits


def _retry(max_retry: int):
    """optuna's RetryHeartbeatStaleTrialCallback, its retry inheriting only RETRY_KEEPS of
    the stale trial's user attrs: not its owner, reason or half-written result, which
    would make the queued retry look claimed, failed or measured."""
    import optuna

    class Retry(optuna.storages.RetryHeartbeatStaleTrialCallback):
        def __call__(self, study, trial) -> None:
            keep = {k: v for k, v in trial.user_attrs.items() if k in RETRY_KEEPS}
            super().__call__(study, _with_user_attrs(trial, keep))

    return Retry(max_retry)


def _with_user_attrs(trial, user_attrs: dict):
    out = copy.deepcopy(trial)
    out.user_attrs = user_attrs
    return out


def _storage_class():
    import optuna

    class HeartbeatStorage(optuna.storages.RDBStorage):
        """RDBStorage whose trials carry their owner (user attr OWNER_ATTR, owner_tag())
        from the moment they start running: a new trial is written with it and a waiting
        one gets it in the same transaction that claims it (`_claim`), so no kill, however
        early, leaves a RUNNING trial no one owns. (Set after `ask`, the owner would be missing
        while the sampler runs inside `ask`; a kill then leaves a trial that two tuners
        starting together each take for the other's and count against the budget.)
        Counts as stale, at once, a RUNNING trial whose owner is a process of this host
        that has ended (a rerun after kill -9 re-queues its trials without waiting out the
        grace period), or that has no owner (written by an older version) while no other
        tuner of the study (study user attrs TUNER_PREFIX + owner tag) lives; and a
        RUNNING trial that never sent a heartbeat and started more than the grace period
        ago, which optuna alone would keep RUNNING forever. (A live tuner records the
        first heartbeat right after `ask`.) A waiting trial starts running for one
        process only (`_claim`)."""

        def set_trial_state_values(self, trial_id: int, state, values=None) -> bool:
            from optuna.trial import TrialState
            if state == TrialState.RUNNING and values is None:
                return self._claim(trial_id)
            return super().set_trial_state_values(trial_id, state, values)

        def _claim(self, trial_id: int) -> bool:
            """WAITING -> RUNNING as one conditional UPDATE: True for the one process whose
            update found it waiting. optuna reads the state and then writes it; SQLite has
            no row lock for its SELECT ... FOR UPDATE and Python's sqlite3 runs the read
            outside the write's transaction, so two processes popping the same queued trial
            both got it, and the second to tell it died (UpdateFinishedTrialError)."""
            from datetime import datetime

            import sqlalchemy
            from optuna.storages._rdb import models
            from optuna.trial import TrialState
            from optuna.storages._rdb.storage import _create_scoped_session
            t = models.TrialModel.__table__
            stmt = (sqlalchemy.update(t).where(t.c.trial_id == trial_id,
                                               t.c.state == TrialState.WAITING)
                    .values(state=TrialState.RUNNING, datetime_start=datetime.now()))
            with _create_scoped_session(self.scoped_session) as orm:
                if orm.execute(stmt).rowcount != 1:
                    return False
                self._own(orm, trial_id)
            return True

        def _get_prepared_new_trial(self, study_id: int, template_trial, orm):
            """A new trial; one that `ask` creates (no template) starts owned."""
            trial = super()._get_prepared_new_trial(study_id, template_trial, orm)
            if template_trial is None:
                orm.flush()
                self._own(orm, trial.trial_id)
            return trial

        def _own(self, orm, trial_id: int) -> None:
            """Write the owner user attr in `orm` (the caller's ORM transaction); through
            the model, which every optuna version names alike, not a private helper."""
            import json
            from optuna.storages._rdb import models
            attrs = models.TrialUserAttributeModel
            orm.query(attrs).filter_by(trial_id=trial_id, key=OWNER_ATTR).delete()
            orm.add(attrs(trial_id=trial_id, key=OWNER_ATTR,
                              value_json=json.dumps(owner_tag())))

        def _get_stale_trial_ids(self, study_id: int) -> list[int]:
            from datetime import datetime, timedelta
            from optuna.storages._rdb import models
            from optuna.trial import TrialState
            stale = super()._get_stale_trial_ids(study_id)
            grace = timedelta(seconds=self.grace_period or 2 * self.heartbeat_interval)
            db = self.scoped_session()
            try:
                beating = {h.trial_id for h in db.query(models.TrialHeartbeatModel).all()}
            finally:
                db.close()
            now = datetime.now()
            alone = not self._other_live_tuners(study_id)
            for t in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
                tid = t._trial_id
                if tid in stale:
                    continue
                owner = t.user_attrs.get(OWNER_ATTR, "")
                if owner_gone(owner) or (alone and not owner):
                    self._mark_orphan(tid, owner or "asked, never claimed")
                    stale.append(tid)
                elif (tid not in beating and t.datetime_start is not None
                        and now - t.datetime_start > grace):
                    stale.append(tid)
            return stale

        def _other_live_tuners(self, study_id: int) -> bool:
            """Whether a process other than this one, alive or on another host, has
            registered as a tuner of the study (search.tune.tuner registers each run)."""
            me = owner_tag()
            return any(key.startswith(TUNER_PREFIX) and key[len(TUNER_PREFIX):] != me and
                       not owner_gone(key[len(TUNER_PREFIX):])
                       for key in self.get_study_user_attrs(study_id))

        def _mark_orphan(self, trial_id: int, owner: str) -> None:
            try:
                self.set_trial_user_attr(trial_id, "reason",
                                         f"orphaned: its process ({owner}) is gone; re-enqueued")
            except Exception:  # another tuner failed it first
                pass

    return HeartbeatStorage


def _HeartbeatStorage(*args, **kwargs):
    return _storage_class()(*args, **kwargs)


MESSAGE_CHARS = 400  # failure messages kept in a trial's user attrs


def trial_result(data: dict) -> dict:
    """A result's dict as a trial's user attrs keep it: the message cut to MESSAGE_CHARS."""
    return {**data, "message": data.get("message", "")[:MESSAGE_CHARS]}


def measured_trials(trials) -> list:
    """The trials whose program was measured and told (ok or failed), in study order."""
    from optuna.trial import TrialState
    return [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("measured")]


def trial_id(trial) -> int:
    return trial._trial_id  # optuna's own code passes this to storage calls


@contextmanager
def heartbeat(storage, trials: list, interval_s: float):
    """Record a heartbeat for `trials` now and every `interval_s` until the block ends."""
    if not hasattr(storage, "record_heartbeat"):
        yield
        return
    stop = threading.Event()

    def beat():
        while True:
            for t in trials:
                try:
                    storage.record_heartbeat(trial_id(t))
                except Exception:  # a transient storage error must not kill the run
                    pass
            if stop.wait(interval_s):
                return
    thread = threading.Thread(target=beat, daemon=True, name="gemmforge-heartbeat")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def fail_stale_trials(study) -> None:
    """Fail (and re-enqueue) the study's trials whose process stopped heartbeating."""
    import optuna
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.storages.fail_stale_trials(study)


class _SamplerView:
    """The study as the sampler sees it during one sampling call: a FAIL trial marked
    `invalid` (its program failed ir.verify) looks COMPLETE with INVALID_REWARD, so TPE
    learns to avoid illegal regions. Trials are read once per view (TPE asks once per
    parameter group). Optuna's TPE reads trials through `study._get_trials`."""

    def __init__(self, study):
        self._study = study
        self._trials = None

    def __getattr__(self, name):
        return getattr(self._study, name)

    def _all(self) -> list:
        from optuna.trial import TrialState
        if self._trials is None:
            self._trials = []
            for t in self._study._get_trials(deepcopy=False, states=None, use_cache=False):
                if t.state == TrialState.FAIL and t.user_attrs.get("invalid"):
                    t = copy.copy(t)
                    t.state, t.values = TrialState.COMPLETE, [INVALID_REWARD]
                self._trials.append(t)
        return self._trials

    def _get_trials(self, deepcopy: bool = True, states=None, use_cache: bool = False):
        out = [t for t in self._all() if states is None or t.state in states]
        return copy.deepcopy(out) if deepcopy else out


def make_sampler(seed: int | None, startup_trials: int):
    """Multivariate, grouped TPE (the space is conditional) with the constant liar (several
    workers share a study) that learns from programs verify rejected."""
    import optuna

    class VerifiedTPESampler(optuna.samplers.TPESampler):
        """Every sampling call for one trial (the relative group, then each parameter
        left to independent sampling) sees one _SamplerView: the study's trials are read
        once per trial instead of once per parameter."""

        _view: tuple = (None, None)  # (trial id, its view)

        def _view_for(self, study, trial):
            tid, view = self._view
            if tid != trial._trial_id or view._study is not study:
                view = _SamplerView(study)
                self._view = (trial._trial_id, view)
            return view

        def infer_relative_search_space(self, study, trial):
            return super().infer_relative_search_space(self._view_for(study, trial), trial)

        def sample_relative(self, study, trial, search_space):
            return super().sample_relative(self._view_for(study, trial), trial, search_space)

        def sample_independent(self, study, trial, param_name, param_distribution):
            return super().sample_independent(self._view_for(study, trial), trial,
                                              param_name, param_distribution)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return VerifiedTPESampler(seed=seed, n_startup_trials=startup_trials, multivariate=True,
                                  group=True, constant_liar=True)
