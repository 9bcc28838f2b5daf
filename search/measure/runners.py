"""What the tuner measures with: the Runner protocol and the GPU runner.

A runner names its device (studies are per device) and the archs it runs, and turns
programs into Results like search.measure.env.evaluate: one per program, in order, a failure as a
failed Result, never an exception for a bad program. search.measure.replay.ReplayRunner answers
from records without a GPU; HarnessRunner measures on one CUDA device through the
harness's builder pool and per-device worker (search.measure.measure).
"""
from __future__ import annotations

from typing import Protocol, Sequence

from ...ir.program import Arch, Problem, Program
from .records import Result


class Runner(Protocol):
    """What the tuner measures with: search.measure.replay.ReplayRunner, HarnessRunner, or a fake."""

    device: str                # names the study; results of one device share studies
    archs: tuple[Arch, ...]    # archs its device runs, the preferred (policies') first

    def evaluate(self, programs: Sequence[Program], problem: Problem) -> list[Result]:
        """One Result per program, in order; never raises for a bad program."""

    def close(self) -> None: ...


def archs_for_sm(sm: int | None) -> tuple[Arch, ...]:
    """Archs whose programs run on a device of compute capability `sm` (as 90), preferred
    first: sm_90a code runs only on sm 90; sm_80 code (as PTX) on any sm >= 80."""
    return (Arch.SM90A, Arch.SM80) if sm == 90 else (Arch.SM80,)


class HarnessRunner:
    """The GPU runner: search.measure.env.evaluate on CUDA device `device_index`, with its own
    per-device worker (search.measure.measure.DeviceRunner) and a builder pool of `builders`
    processes kept for the runner's life. `settings` are the harness's BenchSettings."""

    def __init__(self, device_index: int = 0, builders: int | None = None, settings=None):
        from .measure import BuilderPool, DeviceRunner
        self._runner = DeviceRunner(devices=[device_index])
        self._builders = BuilderPool(builders)
        self.settings = settings
        info = self._runner.info()
        self.device = info.get("device", f"cuda:{device_index}")
        self.archs = archs_for_sm(info.get("sm"))

    def evaluate(self, programs: Sequence[Program], problem: Problem) -> list[Result]:
        from .env import evaluate
        return evaluate(programs, problem, device_runner=self._runner,
                        builders=self._builders, settings=self.settings)

    def with_protocols(self, protocols: Sequence[str]) -> "HarnessRunner":
        """A view of this runner (the same device worker and builders; close this one, not
        the view) that times with `protocols` instead (search.tune.confirm: a confirmation adds
        the after protocol below the large class)."""
        from copy import copy
        from .records import BenchSettings, replace
        view = copy(self)
        view.settings = replace(self.settings or BenchSettings(), protocols=tuple(protocols))
        return view

    def close(self) -> None:
        self._builders.close()
        self._runner.close()
