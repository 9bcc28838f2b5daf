"""The quick tune: a shape off the grid timed with a few candidates from its neighbourhood.

    programs = neighbour_candidates(Problem(77, 4096, 4096), Arch.SM90A, "h100")
    outcomes = quick_tune(runner, problems, database, command="gemmforge tune --quick ...")

A shape the shipped file lacks gets its nearest shipped shape's program (dispatch.choice),
which reached only 0.868x of tuning the shape itself over 30 model layer shapes on an H100
(benchmarks/NOTES.md, Off the grid: the resolver's rules). Timing a handful of candidates at
the shape closes most of that gap (0.974 replayed from the off-grid campaign's readings): the
programs of the `shipped` nearest distinct shipped shapes (by dispatch.choice.distance, within
MAX_DISTANCE, usable at the shape), then the heuristic policy's top `per_backend` of each
backend in QUICK_BACKENDS. They are timed in ONE group beside cuBLAS through a campaign runner's
`measure_groups` (search.campaign.campaign_runners: the GPU's GridRunner re-gates every result after
timing; ReplayGridRunner answers without a GPU), and the best ok result becomes the user's
tuned database entry for (runner.device, shape), so the resolver serves it next time as
"tuned-exact" (where the runner's device has a class: replayed and synthetic ones don't).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...ir.program import Arch, DType, Problem, Program
from ...dispatch.choice import MAX_DISTANCE, distance, usable
from ...dispatch.devices import lookup_classes
from ..measure.records import BenchSettings, Result
from ..measure.selection import selection_ratio
from ..measure.shapes import shape_class
from .incumbent import incumbent_programs, lookup_class, resolver_choice  # noqa: F401 (lookup_class: re-exported)

QUICK_BACKENDS = ("cuda_wgmma", "triton")
"""The heuristic's backends for the quick tune: the two that won the grid campaign."""
SHIPPED = 4       # nearest distinct shipped programs per shape
PER_BACKEND = 2   # heuristic proposals per backend
QUICK_BENCH = BenchSettings(protocols=("kernel", "cold", "call", "after"), rounds=10)
"""The group's timing: the campaign's confirmation settings (search.campaign.campaign.CONFIRM_BENCH),
so a quick-tuned entry carries the same figures as a confirmed one and is picked the same way
(search.measure.selection.selection_ratio)."""
QUICK_LARGE_BENCH = BenchSettings(protocols=("kernel", "cold", "call", "sustained"), rounds=10,
                                  sustained_s=0.5)
"""The large class's group (2mnk >= 1e11): timed under sustained load, as a campaign's
confirmation picks there (selection_ratio: sustained); after another kernel a large program's
lead read back to back did not hold in a model's forward (benchmarks/NOTES.md)."""
STUDY = "quick"  # the tuned database's `study` column for quick-tuned rows


def neighbour_candidates(problem: Problem, arch: Arch, device_class: str | None,
                         shipped: int = SHIPPED, per_backend: int = PER_BACKEND, *,
                         backends: tuple[str, ...] = QUICK_BACKENDS, shipped_path=None,
                         max_distance: float = MAX_DISTANCE,
                         only: tuple[str, ...] | None = None) -> list[Program]:
    """Distinct programs usable at `problem` (dispatch.choice.usable): the `shipped` nearest
    shipped shapes' programs for `device_class` (of the backends `only` names, None: any; its
    own class before its siblings at equal distance, then the higher measured speedup),
    nearest first; then the heuristic's top `per_backend` of each of `backends` not already
    listed. With no class, or nothing
    shipped within `max_distance` octaves, the heuristic's alone."""
    out: list[Program] = []
    for program in _shipped_nearest(problem, arch, device_class, shipped_path, max_distance):
        if len(out) == shipped:
            break
        if program not in out and (only is None or program.backend in only):
            out.append(program)
    from ...policy.heuristic import HeuristicPolicy
    for backend in backends:
        for program in HeuristicPolicy(backend).propose(problem, arch, per_backend):
            if program not in out and usable(program, problem):
                out.append(program)
    return out


def _shipped_nearest(problem, arch, cls, path, limit) -> list[Program]:
    """Programs of the shipped rows of `cls` and its siblings within `limit`, usable at
    `problem`, in the order neighbour_candidates documents (duplicates kept): rows of the
    problem's operand dtype first, then, for a bf16 problem, the f16 rows' programs (the
    f16 winners, to be timed in bf16: candidates only, their f16 figures are no evidence)."""
    if not cls:
        return []
    from ...dispatch.shipped import shipped
    book, classes = shipped(path), lookup_classes(cls)
    keys = [problem] + ([replace(problem, dtype=DType.F16)] if problem.dtype != DType.F16 else [])
    rows = []
    for own, key in enumerate(keys):
        for rank, c in enumerate(classes):
            for row in book.group(c, key):
                d = distance(problem, row.problem)
                if d <= limit and row.program.arch == arch:
                    rows.append((own, d, rank, -(row.speedup or 0.0), str(row.problem),
                                 row.program))
    rows.sort(key=lambda r: r[:5])
    return [r[5] for r in rows if usable(r[5], problem)]


@dataclass
class QuickOutcome:
    """One shape's quick tune: the candidates' texts and Results (same order), the best ok
    Result (None: none measured ok), whether the database kept it, and the resolver's
    provenance before and after."""

    problem: Problem
    candidates: list[str]
    results: list[Result] = field(default_factory=list)
    best: Result | None = None
    recorded: bool = False
    before: str = ""
    after: str = ""


def quick_tune(runner, problems: list[Problem], database, command: str = "", *,
               settings: BenchSettings = QUICK_BENCH, shipped: int = SHIPPED,
               per_backend: int = PER_BACKEND, backends: tuple[str, ...] = QUICK_BACKENDS,
               shipped_path=None, seed: int = 0,
               only: tuple[str, ...] | None = None) -> list[QuickOutcome]:
    """Quick-tune `problems` on `runner` (a GridRunner or ReplayGridRunner) for its preferred
    arch: each shape's neighbour_candidates and the program the resolver served before (the
    incumbent) and the tuned database's entry timed as one group beside cuBLAS, the best ok
    recorded in `database` (search.tune.database.TunedDatabase) under
    runner.device with `command` and study "quick" (replacing the stored entry, which
    competed in the group); best
    as a campaign's confirmation picks (search.measure.selection.selection_ratio: after another kernel
    where measured).
    Returns one QuickOutcome per problem, in order."""
    arch = runner.archs[0]
    cls, _ = lookup_class(runner, arch)
    outcomes = {}
    for p in problems:
        before = resolver_choice(runner, p, database, shipped_path)
        programs = neighbour_candidates(p, arch, cls, shipped, per_backend, backends=backends,
                                        shipped_path=shipped_path, only=only)
        stored = database.best(runner.device, p)  # it competes too: the winner replaces it
        for incumbent in incumbent_programs(before, stored):
            if incumbent not in programs:
                programs.insert(0, incumbent)
        outcomes[p] = QuickOutcome(p, [str(x) for x in programs], before=before.provenance)

    def on_group(problem: Problem, results: list[Result]) -> None:
        outcome = outcomes[problem]
        outcome.results = results
        ok = [r for r in results if r.ok and r.speedup is not None]
        outcome.best = max(ok, key=lambda r: selection_ratio(problem, r)) if ok else None
        if outcome.best is not None:
            outcome.recorded = database.record(runner.device, problem, outcome.best, command,
                                               study=STUDY, replace=True)
    groups = [(p, o.candidates) for p, o in outcomes.items() if o.candidates]
    large = [g for g in groups if shape_class(g[0]) == "large"]
    runner.measure_groups([g for g in groups if g not in large], settings, on_group, seed=seed)
    if large:  # under the power cap back-to-back figures read high: picked under sustained load
        runner.measure_groups(large, QUICK_LARGE_BENCH, on_group, seed=seed)
    for p, o in outcomes.items():
        o.after = resolver_choice(runner, p, database, shipped_path).provenance
    return list(outcomes.values())
