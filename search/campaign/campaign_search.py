"""The campaign's search pass: search.tune.tuner at the shapes the portfolio left weak.

    SearchPass(store, runner, settings).tune(problem)   # -> candidates measured now

Per shape, one optuna study in the campaign's file (search.tune.studies names it by device and
problem). Before the tuner runs, the shape's portfolio results enter the study as finished
trials (source "portfolio"; programs outside the tuner's space are left out), so the
sampler and the policy start from what the portfolio measured and nothing the portfolio
timed is asked again (the tuner tells a duplicate its earlier value). The budget is those
trials plus `search_budget`. The study's new measurements are copied into the campaign's
store (pass "search") together with the shape's done mark, once the budget is spent.

Resume: the campaign holds its store's lock, so a trial still RUNNING when the pass opens
a study was left by a killed run: it is failed and its program queued again at once
(search.tune.tuner does the same after the heartbeat grace; here nobody else can own it).
"""
from __future__ import annotations

from dataclasses import replace

from ...ir.program import Problem
from ..measure.campaign_store import compact
from ..measure.env import reward
from ..measure.records import Result
from ..tune.studies import measured_trials, trial_result

SOURCE = "portfolio"


class SearchPass:
    """The tuner for a campaign: `runner` (campaign_runners), studies in `store`'s file,
    `settings` a campaign.CampaignSettings."""

    def __init__(self, store, runner, settings):
        from ...policy.registry import make_policy
        from ..tune.tuner import Budget, Tuner, TuneSettings
        self.store, self.settings = store, settings
        backends = settings.portfolio.backends
        policy = make_policy(settings.policy, runner.archs, backends, seed=settings.seed)
        self.tuner = Tuner(runner, policy, store.url, TuneSettings(
            budget=Budget(1), batch=settings.search_batch, backends=backends,
            seed=settings.seed, heartbeat_s=2, grace_s=5, confirm=0,
            command="gemmforge campaign (search pass)"))
        self._Budget = Budget

    def tune(self, problem: Problem) -> int:
        """Spend the shape's search budget; return how many candidates were measured now."""
        study = self.tuner.study(problem)
        _reclaim(study)
        seeded = self._seed(study, problem)
        self.tuner.settings = replace(self.tuner.settings, budget=self._Budget(
            seeded + self.settings.search_budget))
        had = len(measured_trials(study.get_trials(deepcopy=False)))
        outcome = self.tuner.tune(problem)
        trials = measured_trials(study.get_trials(deepcopy=False))
        found = [Result.from_dict(t.user_attrs["result"]) for t in trials
                 if t.user_attrs.get("source") != SOURCE]
        before = self.store.count("search")
        # done when the budget is spent, or when a run measured nothing (nothing left to try)
        done = outcome.measured >= seeded + self.settings.search_budget or len(trials) == had
        self.store.record(problem, "search", found, done=done)
        return self.store.count("search") - before

    def _seed(self, study, problem: Problem) -> int:
        """Add the shape's portfolio results as finished trials (those not there yet);
        return how many the study holds."""
        import optuna
        from ...ir.text import parse
        have = {t.user_attrs.get("program") for t in study.get_trials(deepcopy=False)
                if t.user_attrs.get("source") == SOURCE}
        space = self.tuner.space(problem)
        dists = space.distributions()
        new = []
        for r in self.store.results(problem, "portfolio"):
            program = parse(r.program)
            if r.program in have or not space.contains(program):
                continue
            params = space.params(program)
            data = trial_result(compact(r))
            new.append(optuna.trial.create_trial(
                params=params, distributions={k: dists[k] for k in params}, value=reward(r),
                user_attrs={"measured": True, "candidate": True, "source": SOURCE,
                            "program": r.program, "status": r.status, "kind": r.kind,
                            "speedup": r.speedup, "cost_s": 0.0, "result": data}))
            have.add(r.program)
        if new:
            study.add_trials(new)
        return len(have)


    def close(self) -> None:
        """Release the studies' database connections (so the store can fold its log)."""
        engine = getattr(self.tuner.storage, "engine", None)
        if engine is not None:
            engine.dispose()


def _reclaim(study) -> None:
    """Fail the study's RUNNING trials (a killed run's) and queue their programs again."""
    from optuna.trial import TrialState
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(t.number, state=TrialState.FAIL)
        if t.user_attrs.get("candidate") and t.user_attrs.get("program"):
            study.enqueue_trial(t.params, user_attrs={
                "source": t.user_attrs.get("source", "sampler"),
                "program": t.user_attrs["program"], "retry_of": t.number})
