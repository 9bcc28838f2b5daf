"""search.tune.confirm below the large class: a tuned shape's contenders are timed after another
kernel too and the winner is the best there, with each pdl contender's pdl-free twin among
them (the trials' kernel protocol credits pdl's overlap of a launch with its own previous
one, which a model never gives it)."""
from __future__ import annotations

import optuna
import pytest

from gemmforge.ir.program import Problem
from gemmforge.search.tune.confirm import (confirm, confirmation_protocols, contenders,
                                      pdl_free_twins)
from gemmforge.search.measure.records import BenchSettings, Result

PDL = "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 persistent c1x1 pingpong tma pdl"
TWIN = PDL.removesuffix(" pdl")
OTHER = "cuda_wgmma sm_90a 128x64x64 w1x1 s6 sw128 row/8 pred k1 dp c1x1 coop tma"
SMALL, LARGE = Problem(512, 512, 512), Problem(8192, 8192, 8192)


def _study(problem: Problem, readings: dict[str, float]):
    """An in-memory study whose measured trials read `readings` (program -> kernel ratio)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for program, ratio in readings.items():
        trial = study.ask()
        result = Result(program, problem.m, problem.n, problem.k, kernel_us=4.0 / ratio,
                        cublas_us=4.0)
        for key, value in {"measured": True, "status": "ok",
                           "result": result.to_dict()}.items():
            trial.set_user_attr(key, value)
        study.tell(trial, ratio)
    return study


class _Runner:
    """A GPU runner's shape (settings, with_protocols, evaluate): the pdl program leads back
    to back and trails after another kernel; records the protocols each evaluate used."""

    device = "test"

    def __init__(self, protocols=("kernel",)):
        self.settings = BenchSettings(protocols=tuple(protocols))
        self.used: list[tuple[str, ...]] = []

    def with_protocols(self, protocols):
        view = _Runner(protocols)
        view.used = self.used
        return view

    def evaluate(self, programs, problem):
        self.used.append(tuple(self.settings.protocols))
        after = "after" in self.settings.protocols
        figures = {PDL: (3.0, 4.4), TWIN: (3.9, 3.8), OTHER: (4.2, 4.3)}  # kernel, after us
        out = []
        for program in map(str, programs):
            kernel_us, after_us = figures[program]
            out.append(Result(program, problem.m, problem.n, problem.k, kernel_us=kernel_us,
                              cublas_us=4.0, after_us=after_us if after else None,
                              cublas_after_us=4.0 if after else None))
        return out


def test_a_pdl_contender_brings_its_twin_below_the_large_class():
    study = _study(SMALL, {PDL: 1.33, OTHER: 0.95})
    assert contenders(study, 1) == [PDL]
    assert contenders(study, 1, problem=SMALL) == [PDL, TWIN]
    assert contenders(study, 2, incumbents=[TWIN, OTHER, TWIN], problem=SMALL) == [PDL, OTHER, TWIN]
    assert pdl_free_twins([PDL], LARGE) == [] and pdl_free_twins([TWIN, PDL], SMALL) == []


def test_the_after_protocol_joins_below_the_large_class():
    runner = _Runner()
    assert confirmation_protocols(runner, SMALL) == ("kernel", "after")
    assert confirmation_protocols(runner, LARGE) == ("kernel",)
    assert confirmation_protocols(_Runner(("kernel", "after")), SMALL) == ("kernel", "after")

    class Replay:  # no settings to change: it answers from its records
        def evaluate(self, programs, problem):
            raise AssertionError("not called")
    assert confirmation_protocols(Replay(), SMALL) == ()


def test_the_confirmation_picks_after_another_kernel_and_keeps_the_protocols():
    study = _study(SMALL, {PDL: 1.33, OTHER: 0.95})
    runner = _Runner()
    best, measured = confirm(runner, study, SMALL, top=1)
    assert measured and runner.used == [("kernel", "after")]
    assert best.program == TWIN and best.after_speedup == pytest.approx(4.0 / 3.8)
    kept = study.user_attrs["confirmed"]
    assert kept["programs"] == [PDL, TWIN] and kept["protocols"] == ["kernel", "after"]
    assert kept["ratios"][PDL] > kept["ratios"][TWIN]          # back to back the pdl one leads
    assert kept["selected"][TWIN] > kept["selected"][PDL]      # after another kernel it trails
    again, measured = confirm(runner, study, SMALL, top=1)
    assert not measured and again.program == TWIN and len(runner.used) == 1
    # a confirmation kept from before the after protocol joined is timed again
    study.set_user_attr("confirmed", {**kept, "protocols": ["kernel"]})
    assert confirm(runner, study, SMALL, top=1)[1] and len(runner.used) == 2


def test_the_large_class_keeps_the_kernel_protocol():
    study = _study(LARGE, {PDL: 1.05, OTHER: 1.01})
    runner = _Runner()
    best, measured = confirm(runner, study, LARGE, top=1)
    assert measured and runner.used == [("kernel",)] and best.program == PDL
