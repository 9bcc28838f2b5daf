"""gemmforge tune's confirmation (search.tune.confirm) through the Tuner on the replay runner: once
a shape's budget is spent its best few and the database's entry are timed again together
and the winner replaces a lucky reading; while the trials run their readings never reach
the database (the confirmation decides); without confirmation the best reading stands."""
from __future__ import annotations

import pytest

from gemmforge.dispatch.choice import resolve
from gemmforge.ir.program import Arch, Problem
from gemmforge.policy.heuristic import HeuristicPolicy
from gemmforge.search.measure import replay
from gemmforge.search.tune.database import TunedDatabase
from gemmforge.search.measure.records import replace
from gemmforge.search.tune.tuner import Budget, Tuner, TuneSettings

PROBLEM = Problem(512, 2048, 1024)
ARCHS = ("sm_90a",)
SETTINGS = dict(backends=("cuda_mma",), batch=4, seed=0, heartbeat_s=1, grace_s=2)


def _url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'studies.db'}"


class _Lucky(replay.ReplayRunner):
    """Replays recorded results, except that `lucky`'s first reading is `first` x cuBLAS
    and every later one `later` x: a measurement that drew good noise once."""

    def __init__(self, lucky: str, first: float, later: float, **kw):
        super().__init__(**kw)
        self.lucky, self.first, self.later, self.seen = lucky, first, later, 0

    def answer(self, program, problem):
        r = super().answer(program, problem)
        if str(program) != self.lucky:
            return r
        self.seen += 1
        ratio = self.first if self.seen == 1 else self.later
        return replace(r, kernel_us=r.cublas_us / ratio, paired_speedup=None)


def test_confirmation_replaces_a_lucky_reading(tmp_path):
    """The lucky program's one reading (2.0x) beats the steady best (1.5x) during the
    trials and goes to the database; timed again together, it reads 0.9x, so the outcome
    and the database entry become the steady program with its confirmed figure. A program
    another study put in the database (3.0x then, 1.2x now) is timed in the same group, as
    is the program the resolver served before the tune (the heuristic's: the device has no
    class)."""
    proposals = HeuristicPolicy().propose(PROBLEM, Arch.SM90A, 10)
    recorded = [replace(replay.synthetic_result(p, PROBLEM), flags=(), paired_speedup=None)
                for p in proposals]
    recorded = [replace(r, kernel_us=r.cublas_us / 0.5) for r in recorded]  # all slow
    recorded[2] = replace(recorded[2], kernel_us=recorded[2].cublas_us / 1.5)  # steady
    outsider = str(proposals[9])
    recorded[9] = replace(recorded[9], kernel_us=recorded[9].cublas_us / 1.2)
    lucky = str(proposals[5])
    db = TunedDatabase(_url(tmp_path))
    db.record("replay", PROBLEM, replace(recorded[9], kernel_us=recorded[9].cublas_us / 3.0),
              study="an earlier study")
    runner = _Lucky(lucky, 2.0, 0.9, records=recorded[:9] + [recorded[9]], archs=ARCHS)
    only = dict(SETTINGS, backends=(proposals[0].backend,), batch=9, policy_share=1.0)
    tuner = Tuner(runner, _Only(proposals[:9]), _url(tmp_path),
                  TuneSettings(budget=Budget(9), **only), database=db)
    outcome = tuner.tune(PROBLEM)
    assert outcome.confirmed and outcome.best.program == str(proposals[2])
    assert outcome.best_ratio == pytest.approx(1.5) and outcome.source == "only"
    entry = db.best("replay", PROBLEM)
    assert str(entry.program) == str(proposals[2]) and entry.speedup == pytest.approx(1.5)
    confirmed = tuner.study(PROBLEM).user_attrs["confirmed"]
    assert confirmed["programs"][:2] == [lucky, str(proposals[2])]
    served = resolve(PROBLEM, Arch.SM90A, None, use_tuned=False, cublas="slower")
    assert confirmed["programs"][3:] == [str(served.program), outsider]  # both incumbents
    assert confirmed["ratios"][lucky] == pytest.approx(0.9)
    assert confirmed["ratios"][outsider] == pytest.approx(1.2)
    calls = runner.calls
    again = tuner.tune(PROBLEM)  # budget spent, same contenders: nothing measured again
    assert runner.calls == calls and again.best.program == str(proposals[2])


def test_a_trial_reading_never_displaces_an_entry_a_confirmation_chose(tmp_path):
    """The database holds a confirmed 1.2x program; a lucky trial reads 2.0x. While the
    trials run the entry stays; the confirmation at the end times both and keeps the 1.2x
    (the lucky one reads 0.9x again). Without confirmation the best reading goes in at once."""
    proposals = HeuristicPolicy().propose(PROBLEM, Arch.SM90A, 10)
    recorded = [replace(replay.synthetic_result(p, PROBLEM), flags=(), paired_speedup=None)
                for p in proposals]
    recorded = [replace(r, kernel_us=r.cublas_us / 0.5) for r in recorded]  # all slow
    confirmed = replace(recorded[9], kernel_us=recorded[9].cublas_us / 1.2)
    lucky = str(proposals[5])
    only = dict(SETTINGS, backends=(proposals[0].backend,), batch=3, policy_share=1.0)
    for confirm in (3, 0):
        db = TunedDatabase(f"sqlite:///{tmp_path / f'tuned_{confirm}.db'}")
        db.record("replay", PROBLEM, confirmed, study="an earlier confirmation", replace=True)
        seen: list[str] = []
        runner = _Lucky(lucky, 2.0, 0.9, records=recorded[:9] + [confirmed], archs=ARCHS)
        tuner = Tuner(runner, _Only(proposals[:9]), f"sqlite:///{tmp_path / f's_{confirm}.db'}",
                      TuneSettings(budget=Budget(9), **only, confirm=confirm), database=db,
                      on_result=lambda e: seen.append(str(db.best("replay", PROBLEM).program)))
        outcome = tuner.tune(PROBLEM)
        if confirm:
            assert set(seen) == {str(confirmed.program)}  # the lucky reading went in: never
            assert outcome.confirmed and outcome.best.program == confirmed.program
            assert str(db.best("replay", PROBLEM).program) == confirmed.program
        else:
            assert lucky in seen and str(db.best("replay", PROBLEM).program) == lucky


def test_a_confirming_tune_records_only_its_winner(tmp_path):
    """With nothing stored for the shape, no trial reading reaches the database either
    (the lucky 2.0x one included); after the confirmation the entry is its winner."""
    proposals = HeuristicPolicy().propose(PROBLEM, Arch.SM90A, 6)
    recorded = [replace(replay.synthetic_result(p, PROBLEM), flags=(), paired_speedup=None)
                for p in proposals]
    recorded[3] = replace(recorded[3], kernel_us=recorded[3].cublas_us / 1.5)  # steady
    db = TunedDatabase(f"sqlite:///{tmp_path / 'tuned.db'}")
    seen: list = []
    runner = _Lucky(str(proposals[1]), 2.0, 0.9, records=recorded, archs=ARCHS)
    only = dict(SETTINGS, backends=(proposals[0].backend,), batch=3, policy_share=1.0)
    tuner = Tuner(runner, _Only(proposals), _url(tmp_path),
                  TuneSettings(budget=Budget(6), **only), database=db,
                  on_result=lambda e: seen.append(db.best("replay", PROBLEM)))
    outcome = tuner.tune(PROBLEM)
    assert len(seen) == 6 and seen == [None] * 6
    assert outcome.confirmed and outcome.best.program == str(proposals[3])
    assert str(db.best("replay", PROBLEM).program) == str(proposals[3])


def test_without_confirmation_the_best_reading_stands(tmp_path):
    proposals = HeuristicPolicy().propose(PROBLEM, Arch.SM90A, 4)
    recorded = [replace(replay.synthetic_result(p, PROBLEM), flags=(), paired_speedup=None,
                        kernel_us=replay.synthetic_result(p, PROBLEM).cublas_us / 0.5)
                for p in proposals]
    runner = _Lucky(str(proposals[1]), 2.0, 0.9, records=recorded, archs=ARCHS)
    only = dict(SETTINGS, backends=(proposals[0].backend,), batch=4, policy_share=1.0)
    tuner = Tuner(runner, _Only(proposals), _url(tmp_path),
                  TuneSettings(budget=Budget(4), confirm=0, **only))
    outcome = tuner.tune(PROBLEM)
    assert not outcome.confirmed and outcome.best_ratio == pytest.approx(2.0)
    with pytest.raises(ValueError, match="confirm"):
        TuneSettings(confirm=-1)


class _Only:
    """A policy that proposes exactly `programs`, in order, and nothing else."""

    name = "only"

    def __init__(self, programs):
        self.programs = list(programs)

    def propose(self, problem, arch, n, *args, **kwargs):
        out, self.programs = self.programs[:n], self.programs[n:]
        return out

    def observe(self, *args, **kwargs):
        pass
