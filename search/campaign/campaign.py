"""The grid campaign: every grid shape tuned, resumable from one small SQLite file.

    store = CampaignStore("campaign.db")
    campaign = Campaign(store, GridRunner(), problems, CampaignSettings(portfolio=...))
    summary = campaign.run(max_seconds=480)          # ends cleanly; run again to resume

Passes, each over every shape before the next starts:
  build ...... the portfolio's programs, each built once, in parallel (search.measure.measure's
               builder pool; the artifact cache serves every later request). A program
               that fails to build is recorded failed at every shape it was planned for.
  portfolio .. at each shape, its planned programs (search.campaign.portfolio) timed as one group
               beside cuBLAS, kernel and after protocols (the confirmation's contenders are
               the best after another kernel below the large class: ranking_protocol),
               several shapes per batch so builds and timing overlap (search.measure.measure);
               each shape's group stored as it lands.
  search ..... where the portfolio's best is below `threshold` x cuBLAS: search.tune.tuner's
               optuna study + policy, `search_budget` more candidates; the study lives in
               the same file and starts with the portfolio's results as its trials.
  confirm .... each shape's best `top` distinct programs (and the last winner) timed again
               in a fresh group beside cuBLAS with the kernel, cold, call and after
               protocols, re-gated after timing (search.measure.bench: a wrong output is a failed
               Result, never a winner); the winner is the best after another kernel
               (selection_ratio; rounds stored before the after protocol joined: over L2
               warm and cold together); the large class (2mnk >= 1e11) is also timed in the
               sustained protocol, and there the winner is the best under sustained load. A round is stored
               whole or not at all; it is repeated when the contenders change, and once more
               when measured on a disturbed GPU (search.measure.selection.disturbed), and for every
               shape after `reconfirm(reason)` (a timing protocol changed: the rounds
               before it stop counting as current; `gemmforge campaign --reconfirm REASON`).
A shape's winner is the best ok result of its latest confirmation round that was not disturbed.

Resume: the store says what is done (search.measure.campaign_store); a killed run loses only the
groups in flight, and nothing recorded is measured again. `max_seconds` ends a run before
the next unit of work (a batch, a shape's search, a shape's confirmation) that the measured
seconds per candidate say would not fit (search.campaign.campaign_clock). One campaign process per
store file (a lock).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from ...ir.program import Problem
from .build_failures import KEY as FAILED, MESSAGE_CHARS
from .build_failures import note_build_failures, record_build_failures
from .campaign_clock import GUESS_S, OutOfTime, RunClock, hms
from ..measure.campaign_store import CampaignStore
from .portfolio import Portfolio
from ..measure.shapes import shape_class
from ..measure.records import BenchSettings, Result
from ..measure.selection import (comparable_speedup, disturbed, latest_clean, ok,
                                 ranking_protocol, selection_ratio)

PASSES = ("build", "portfolio", "search", "confirm")
PORTFOLIO_BENCH = BenchSettings(protocols=("kernel", "after"), rounds=3, warmup=3, warm_rounds=1,
                                graph_us=1000.0)
CONFIRM_BENCH = BenchSettings(protocols=("kernel", "cold", "call", "after"), rounds=10)
SUSTAINED_BENCH = replace(CONFIRM_BENCH, protocols=("kernel", "cold", "call", "sustained"))
ETA_EVERY_S = 30.0
BUILD_SHARE = 0.5  # of max_seconds: the most the build pass may take in one run


@dataclass(frozen=True)
class CampaignSettings:
    """portfolio: what the portfolio pass times (search.campaign.portfolio); chunk: candidates per
    portfolio batch (whole shapes); threshold: the search pass tunes shapes whose
    portfolio best is below it (x cuBLAS); search_budget / search_batch / policy: the
    tuner's extra candidates per such shape, its batch, its policy (policy.registry's
    POLICIES); top: contenders per confirmation; seed: the studies' sampler seed."""

    portfolio: Portfolio = field(default_factory=Portfolio)
    chunk: int = 96
    threshold: float = 1.0
    search_budget: int = 16
    search_batch: int = 8
    policy: str = "heuristic"
    top: int = 3
    seed: int = 0
    portfolio_bench: BenchSettings = PORTFOLIO_BENCH
    confirm_bench: BenchSettings = CONFIRM_BENCH
    sustained_bench: BenchSettings = SUSTAINED_BENCH


class Campaign:
    """One run of the campaign over `problems` on `runner` (campaign_runners), state in
    `store`. `log(line)` gets progress lines; `progress` shows tqdm bars."""

    def __init__(self, store: CampaignStore, runner, problems: Sequence[Problem],
                 settings: CampaignSettings | None = None, progress: bool = True,
                 log: Callable[[str], None] = print):
        self.store, self.runner, self.log = store, runner, log
        self.problems = sorted(problems, key=lambda p: (p.flops, p.m, p.n, p.k))
        self.settings = settings or CampaignSettings()
        self.progress = progress
        self.clock = RunClock(store)
        self._eta_at = -ETA_EVERY_S

    # the run -----------------------------------------------------------------------------
    def run(self, max_seconds: float | None = None, passes: Sequence[str] = PASSES,
            started: float | None = None) -> dict:
        """Run `passes` in order until done or out of time; return a summary (status()).
        `started` (time.monotonic()) is when the caller's clock began (worker start-up
        counts against max_seconds)."""
        started = time.monotonic() if started is None else started
        self.clock.deadline = None if max_seconds is None else started + max_seconds
        with self.store.lock():
            self._check_device()
            self.plan()
            stopped = None
            for name in passes:
                try:
                    getattr(self, f"_{name}")(started, max_seconds)
                except OutOfTime as e:
                    stopped = f"out of time before {e}"
                    break
            summary = self.status()
            summary["stopped"] = stopped
            summary["this_run"] = self.clock.this_run()
            if summary["awaiting_search"] and "confirm" in passes and "search" not in passes:
                self.log(f"confirm: {summary['awaiting_search']} weak shapes wait for the search "
                         "pass this run left out (--search-budget 0 confirms them without it)")
            return summary

    def _check_device(self) -> None:
        device = self.store.get("device")
        if device is None:
            self.store.put("device", self.runner.device)
        elif device != self.runner.device:
            raise ValueError(f"the store {self.store.path} holds a campaign on {device!r}; "
                             f"this runner is {self.runner.device!r} (use another --storage)")

    def _bar(self, total: int, desc: str):
        from tqdm import tqdm
        return tqdm(total=total, desc=desc, disable=not self.progress, unit="cand")

    # planning --------------------------------------------------------------------------
    def plan(self) -> None:
        """Plan the portfolio pass at every shape not planned with these settings."""
        signature = self.settings.portfolio.signature()
        planned = set(self.store.get("planned", {}).get(signature, []))
        todo = [p for p in self.problems if str(p) not in planned]
        for problem, programs in zip(todo, self.settings.portfolio.plan(
                todo, self.runner.archs)):
            self.store.plan(problem, "portfolio", programs)
        if todo:
            plans = self.store.get("planned", {})
            plans[signature] = sorted(planned | {str(p) for p in todo})
            self.store.put("planned", plans)
            self.log(f"planned the portfolio at {len(todo)} shapes")

    # build -----------------------------------------------------------------------------
    def _build(self, started: float, max_seconds: float | None) -> None:
        failed = self.store.get(FAILED, {})
        jobs: dict[str, Problem] = {}
        for problem in self.problems:
            for text in self.store.pending(problem, "portfolio"):
                if text not in failed:
                    jobs.setdefault(text, problem)
        if not jobs:
            return
        until = None if max_seconds is None else min(
            self.clock.deadline, started + BUILD_SHARE * max_seconds)
        start = time.monotonic()
        with self._bar(len(jobs), "build") as bar:
            def on_built(text: str, failure: str | None, build_s: float) -> None:
                bar.update()
                if failure is not None:
                    failed[text] = failure[:MESSAGE_CHARS]
                    self.store.put(FAILED, failed)
            done = self.runner.build(list(jobs.items()), until, on_built)
        self.clock.count("build", done, time.monotonic() - start)
        self.log(f"build: {done} of {len(jobs)} programs in {time.monotonic() - start:.0f} s "
                 f"({sum(t in failed for t in jobs)} failed)")
        record_build_failures(self.store, self.problems, failed)

    def _portfolio(self, started: float, max_seconds: float | None) -> None:
        record_build_failures(self.store, self.problems, self.store.get(FAILED, {}))
        todo = [(p, self.store.pending(p, "portfolio")) for p in self.problems]
        todo = [(p, programs) for p, programs in todo if programs]
        total = sum(len(programs) for _, programs in todo)
        if not total:
            return
        with self._bar(total, "portfolio") as bar:
            while todo:
                chunk, size = [], 0
                limit = min(self.settings.chunk, self.clock.room("portfolio"))
                while todo and (not chunk or size + len(todo[0][1]) <= limit):
                    chunk.append(todo.pop(0))
                    size += len(chunk[-1][1])
                self.clock.fits(f"the portfolio at {chunk[0][0]}", size, "portfolio")
                start = time.monotonic()

                def on_group(problem: Problem, results: list[Result]) -> None:
                    self.store.record(problem, "portfolio", results)
                    bar.update(len(results))
                    note_build_failures(self.store, results)
                failed = self.store.get(FAILED, {})
                record_build_failures(self.store, [p for p, _ in chunk], failed)
                chunk = [(p, [t for t in programs if t not in failed]) for p, programs in chunk]
                self.runner.measure_groups([c for c in chunk if c[1]],
                                           self.settings.portfolio_bench, on_group,
                                           self.settings.seed)
                self.clock.count("portfolio", size, time.monotonic() - start)
                self._show_eta(bar, "portfolio")

    # search ----------------------------------------------------------------------------
    def weak(self) -> list[Problem]:
        """Shapes whose portfolio best is below the threshold (or has none that is ok) in
        measured_best's figure: after another kernel below the large class, where a pdl
        program's back-to-back lead does not hide a shape that loses in a model."""
        return [p for p in self.problems
                if self._best_figure(p, ("portfolio",)) < self.settings.threshold]

    def _awaiting_search(self, weak: list[Problem] | None = None) -> list[Problem]:
        """Weak shapes through the portfolio whose search has not run (their confirmation
        waits for it; none when the search budget is 0); `weak`: weak() if known."""
        if self.settings.search_budget < 1:
            return []
        return [p for p in (self.weak() if weak is None else weak)
                if not self.store.is_done(p, "search")
                and not self.store.pending(p, "portfolio")]

    def _search(self, started: float, max_seconds: float | None) -> None:
        from .campaign_search import SearchPass
        todo = self._awaiting_search()
        if not todo:
            return
        search = SearchPass(self.store, self.runner, self.settings)
        try:
            with self._bar(len(todo) * self.settings.search_budget, "search") as bar:
                for problem in todo:
                    self.clock.fits(f"the search at {problem}", self.settings.search_budget,
                               "search")
                    start = time.monotonic()
                    measured = search.tune(problem)
                    self.clock.count("search", measured, time.monotonic() - start)
                    bar.update(self.settings.search_budget)
                    self._show_eta(bar, "search")
        finally:
            search.close()

    # confirm ---------------------------------------------------------------------------
    def measured_best(self, problem: Problem,
                      passes: Sequence[str] = ("portfolio", "search")) -> list[Result]:
        """The ok results of `passes` at `problem`, best first (by comparable_speedup in the
        ranking_protocol: after another kernel below the large class where every reading has
        it; groups whose cuBLAS read slow are not ranked above the others for it), one per
        program; programs that failed a confirmation (a re-gate) are left out."""
        return self._ranked(problem, passes)[0]

    def _best_figure(self, problem: Problem, passes: Sequence[str]) -> float:
        """The ranking figure of measured_best's first (0.0 with none)."""
        ranked, figure = self._ranked(problem, passes)
        return figure(ranked[0]) if ranked else 0.0

    def _ranked(self, problem: Problem, passes: Sequence[str]
                ) -> tuple[list[Result], Callable[[Result], float]]:
        """measured_best's results and the figure that ranks them."""
        failed = {r.program for r in self.store.results(problem, "confirm") if not r.ok}
        good = [r for name in passes for r in self.store.results(problem, name)
                if ok(r) and r.program not in failed]
        figure = comparable_speedup(good, ranking_protocol(problem, good))
        best: dict[str, Result] = {}
        for r in good:
            if r.program not in best or figure(r) > figure(best[r.program]):
                best[r.program] = r
        return sorted(best.values(), key=figure, reverse=True), figure

    def contenders(self, problem: Problem, confirmed: tuple | None = None) -> list[str]:
        """The confirmation's programs: the best `top`, then the last winner."""
        programs = [r.program for r in self.measured_best(problem)[:self.settings.top]]
        incumbent = self._winner_of(problem, *(confirmed or self.confirmations(problem)))
        if programs and incumbent is not None and incumbent.program not in programs:
            programs.append(incumbent.program)
        return programs

    def confirmations(self, problem: Problem) -> tuple[dict[int, list[Result]], set[int]]:
        """The shape's confirmation rounds ({round: results}, in round order) and which of
        them were measured on a disturbed GPU."""
        last = self.store.last_round(problem, "confirm") or 0
        rounds = {n: rs for n in range(1, last + 1)
                  if (rs := self.store.results(problem, "confirm", n))}
        return rounds, disturbed(rounds)

    def winner(self, problem: Problem) -> Result | None:
        """The best ok result of the shape's latest undisturbed confirmation round, or None."""
        return self._winner_of(problem, *self.confirmations(problem))

    @staticmethod
    def _winner_of(problem: Problem, rounds: dict, bad: set[int]) -> Result | None:
        return max(latest_clean(rounds, bad), key=lambda r: selection_ratio(problem, r),
                   default=None)

    def reconfirm(self, reason: str) -> int:
        """Confirm every shape of the run once more, whatever its rounds hold (the timing
        protocol changed; `reason` says how): its rounds so far stop counting as current.
        Kept in the store under `reason`, so a later call naming it again resumes rather
        than starting over. Returns how many shapes it marked (0 when resumed)."""
        return self.store.mark_reconfirm(reason, self.problems)

    def needs_confirmation(self, problem: Problem, weak: set) -> list[str]:
        """The contenders, if they are not all in the latest round (or that round predates a
        reconfirm()); else [] (also while an earlier pass is not through at the shape;
        `weak`: the set of weak())."""
        if self.store.pending(problem, "portfolio") or (
                problem in weak and not self.store.is_done(problem, "search")
                and self.settings.search_budget > 0):
            return []  # earlier passes are not through at this shape
        rounds, bad = self.confirmations(problem)
        programs = self.contenders(problem, (rounds, bad))
        if not rounds:
            return programs
        last = max(rounds)
        if last < self.store.current_from(problem):
            return programs  # measured before the protocol changed
        if last in bad and last - 1 not in bad:
            return programs  # measured on a disturbed GPU: once more
        if set(programs) <= {r.program for r in rounds[last]}:
            return []
        return programs

    def _confirm(self, started: float, max_seconds: float | None) -> None:
        weak = set(self.weak())
        todo = [(p, c) for p in self.problems if (c := self.needs_confirmation(p, weak))]
        if not todo:
            return
        with self._bar(sum(len(c) for _, c in todo), "confirm") as bar:
            for problem, programs in todo:
                large = shape_class(problem) == "large"
                rate = "confirm_large" if large else "confirm"
                self.clock.fits(f"the confirmation at {problem}", len(programs), rate)
                bench = self.settings.sustained_bench if large else self.settings.confirm_bench
                round_ = (self.store.last_round(problem, "confirm") or 0) + 1
                start = time.monotonic()

                def on_group(p: Problem, results: list[Result]) -> None:
                    self.store.record(p, "confirm", results, round_, done=True)
                    bar.update(len(results))
                self.runner.measure_groups([(problem, programs)], bench, on_group,
                                           self.settings.seed + 1000 * round_)
                self.clock.count("confirm", len(programs), time.monotonic() - start, rate)

    def _show_eta(self, bar, name: str) -> None:
        """The campaign's ETA on `bar`, recomputed at most every ETA_EVERY_S seconds."""
        now = time.monotonic()
        if now - self._eta_at >= ETA_EVERY_S:
            self._eta_at, eta = now, hms(self.eta_s())
            bar.set_postfix_str(f"campaign ETA {eta}")
            if not self.progress:
                self.log(f"{name}: {self.store.count(name)} measured; campaign ETA {eta}")

    # status ----------------------------------------------------------------------------
    def status(self) -> dict:
        """Counts per pass, shapes with a winner, the ETA of what remains (seconds)."""
        winners = sum(self.winner(p) is not None for p in self.problems)
        weak = self.weak()
        return {"shapes": len(self.problems), "confirmed": winners,
                "awaiting_search": len(self._awaiting_search(weak)),
                "measurements": {name: self.store.count(name)
                                 for name in ("portfolio", "search", "confirm")},
                "portfolio_pending": self.store.count_pending("portfolio"),
                "eta_s": round(self.eta_s(weak)), "storage": str(self.store.path)}

    def eta_s(self, weak: list[Problem] | None = None) -> float:
        """Seconds the rest of the campaign should take at the rates measured so far (the
        search share of unmeasured shapes assumed as among measured ones; `weak`: weak())."""
        spc = {k: self.clock.per_candidate(k) for k in GUESS_S}
        pending = self.store.count_pending("portfolio")
        through = [p for p in self.problems if not self.store.pending(p, "portfolio")]
        weak_all = set(self.weak() if weak is None else weak) if through else set()
        weak = [p for p in through if p in weak_all]
        share = len(weak) / len(through) if through else 0.5
        unsearched = sum(not self.store.is_done(p, "search") for p in weak) + \
            share * (len(self.problems) - len(through))
        unconfirmed = [p for p in self.problems if self.store.last_round(p, "confirm") is None]
        large = sum(shape_class(p) == "large" for p in unconfirmed)
        top = self.settings.top
        return (pending * spc["portfolio"] + unsearched * self.settings.search_budget
                * spc["search"] + (len(unconfirmed) - large) * top * spc["confirm"]
                + large * top * spc["confirm_large"])
