"""The campaign's portfolio: which built programs are timed at which grid shape.

    portfolio = Portfolio(backends=("cuda_wgmma", "triton"),
                          lists=(("large", "programs.txt"),))  # one program text a line
    portfolio.programs_for(problem, archs)      # program texts, best guesses first

Programs are shape-generic (m, n, k are launch arguments; every grid shape is a multiple
of 64, so one build serves them all), so a few hundred builds serve the 1,000 shapes. The
cheap filter is the shape class (by FLOPs, 2mnk): a shape gets the heuristic's proposals
for it (`per_backend` per backend, legal by construction), then the programs of the lists
given for its class (or for "all") that pass ir.verify there, in list order, up to
`per_shape` in all. Lists are program files, one text per line, '#' comments.

A re-run over shapes that already have a winner (after a new kernel feature lands) starts
from `incumbents`, {problem: program text, or several texts} (e.g. the shipped file's, or
the shipped winners of each sibling device class), which come first, each followed by its
`twins`: the same program with one boolean opt-in field set (e.g.
"pdl"), where ir.verify accepts it at that shape, or ("raster") with the rasters whose waves
read the fewest operand bytes at that shape (search.campaign.wave_footprint; the grid's SM count,
RASTER_SMS).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Mapping, Sequence

from ...ir.program import OPT_IN_FIELDS, Arch, Problem, Program
from ...dispatch.devices import MULTIPROCESSORS
from ..measure.shapes import CLASSES, shape_class

LARGE_PROGRAMS = Path(__file__).parents[1] / "data" / "large_programs.txt"
"""The large class's portfolio: programs that won large shapes on Hopper, one per line."""

TWIN_FIELDS = tuple(f.name for f in fields(Program)
                    if f.name in OPT_IN_FIELDS and f.type in (bool, "bool"))
"""The fields a twin may set: Program's boolean opt-in fields (swap_ab, pdl)."""
TWIN_KINDS = (*TWIN_FIELDS, "raster")
"""What `twins` may name: a boolean field, or "raster" (search.campaign.wave_footprint)."""
RASTER_SMS = MULTIPROCESSORS["h100"]  # the SMs (one CTA each) a raster twin's waves are counted
# for: the Hopper dies the large campaigns run on (H100, H200: the same 132)
PARALLEL_PLAN = 64  # shapes from which Portfolio.plan works in parallel processes


def read_programs(path: Path | str) -> list[str]:
    """Program texts of a list file, in order, comments and blank lines skipped,
    each in canonical text form (ir.IRError for a line that doesn't parse)."""
    from ...ir.text import parse
    lines = Path(path).read_text().splitlines()
    return [str(parse(line)) for line in lines if line.strip() and not line.lstrip().startswith("#")]


@dataclass(frozen=True)
class Portfolio:
    """backends: whose heuristic proposals enter; per_backend: proposals per backend and
    shape; lists: (class or "all", program file) pairs; per_shape: the cap per shape;
    incumbents: {problem: program text or tuple of texts} timed first; twins: TWIN_KINDS
    made of each."""

    backends: tuple[str, ...] = ("cuda_wgmma", "triton")
    per_backend: int = 8
    lists: tuple[tuple[str, str], ...] = ()
    per_shape: int = 40
    incumbents: Mapping[Problem, str | tuple[str, ...]] = field(default_factory=dict)
    twins: tuple[str, ...] = ()
    _programs: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        for cls, _ in self.lists:
            if cls not in (*CLASSES, "all"):
                raise ValueError(f"portfolio list class {cls!r}: use one of "
                                 f"{', '.join((*CLASSES, 'all'))}")
        if self.per_backend < 0 or self.per_shape < 1:
            raise ValueError("per_backend must be >= 0 and per_shape >= 1")
        for name in self.twins:
            if name not in TWIN_KINDS:
                raise ValueError(f"twin field {name!r}: use one of {', '.join(TWIN_KINDS)}")

    def listed(self, cls: str) -> list[str]:
        """The listed programs for shape class `cls`, in list order, once each."""
        if cls not in self._programs:
            out: list[str] = []
            for where, path in self.lists:
                if where in (cls, "all"):
                    out += [p for p in read_programs(path) if p not in out]
            self._programs[cls] = out
        return self._programs[cls]

    def programs_for(self, problem: Problem, archs: Sequence[Arch]) -> list[str]:
        """The programs to time at `problem` (texts; legal there, runnable on `archs`)."""
        from ...ir.text import parse
        from ...ir.verify import check
        from ...policy.heuristic import HeuristicPolicy
        out: list[str] = self.seeded(problem, archs)
        for backend in self.backends if self.per_backend else ():
            policy = HeuristicPolicy(backend)  # on the device's preferred arch (sm_90a)
            out += [t for t in (str(p) for p in policy.propose(problem, archs[0],
                                                                self.per_backend))
                    if t not in out]
        for text in self.listed(shape_class(problem)):
            program = parse(text)
            if text not in out and program.arch in archs and check(program, problem) is None:
                out.append(text)
        return out[:self.per_shape]

    def seeded(self, problem: Problem, archs: Sequence[Arch]) -> list[str]:
        """The shape's incumbents, each followed by its twins, those legal there and runnable
        on `archs`, once each."""
        from ...ir.text import parse
        from ...ir.verify import check
        from .wave_footprint import raster_twins
        out: list[str] = []
        for text in incumbent_texts(self.incumbents.get(problem)):
            incumbent = parse(text)
            twins = [replace(incumbent, **{name: True})
                     for name in self.twins if name != "raster"]
            if "raster" in self.twins:
                twins += raster_twins(incumbent, problem, RASTER_SMS)
            for program in (incumbent, *twins):
                if (program.arch in archs and check(program, problem) is None
                        and str(program) not in out):
                    out.append(str(program))
        return out

    def plan(self, problems: Sequence[Problem], archs: Sequence[Arch]) -> list[list[str]]:
        """programs_for each problem, in order; for PARALLEL_PLAN or more, in one spawned
        process per CPU (the heuristic and ir.verify take about 0.1 s of CPU a shape)."""
        if len(problems) < PARALLEL_PLAN:
            return [self.programs_for(p, archs) for p in problems]
        import multiprocessing
        import os
        from concurrent.futures import ProcessPoolExecutor
        from functools import partial
        with ProcessPoolExecutor(os.cpu_count() or 1,
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            return list(pool.map(partial(_programs_for, self, tuple(archs)), problems,
                                 chunksize=8))

    def signature(self) -> str:
        """A hash of everything that decides the plan: settings and the lists' contents
        (a changed list plans its new programs at every shape again)."""
        parts = [self.backends, self.per_backend, self.per_shape,
                 [(c, Path(p).read_text()) for c, p in self.lists],
                 sorted((str(p), t if isinstance(t, str) else list(t))
                        for p, t in self.incumbents.items()), list(self.twins)]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def incumbent_texts(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A Portfolio.incumbents value as a tuple of program texts (none, one or several)."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _programs_for(portfolio: Portfolio, archs, problem: Problem) -> list[str]:
    return portfolio.programs_for(problem, archs)
