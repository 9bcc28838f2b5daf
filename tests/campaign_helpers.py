"""Helpers for the campaign tests: a replayed campaign whose runner checks, before every
measurement, that nothing recorded is measured again (and records a violation if it is)."""
from __future__ import annotations

import json
from pathlib import Path

from gemmforge.search.campaign.campaign import Campaign, CampaignSettings
from gemmforge.search.campaign.campaign_runners import ReplayGridRunner
from gemmforge.search.measure.campaign_store import CampaignStore
from gemmforge.search.measure.shapes import parse_shapes
from gemmforge.search.campaign.portfolio import Portfolio
from gemmforge.search.measure.records import replace
from gemmforge.search.measure.replay import ReplayRunner

ROOT = Path(__file__).resolve().parents[1]
SHAPES = "64x64x64,256x4096x128,2048x64x8192,1024x4096x64,8192x8192x256,4096x4096x8192"
LARGE_LIST = ROOT / "tests" / "data" / "large_programs.txt"


def settings(**changes) -> CampaignSettings:
    portfolio = Portfolio(backends=("cuda_wgmma", "triton"), per_backend=4,
                          lists=(("large", str(LARGE_LIST)),), per_shape=12)
    base = CampaignSettings(portfolio=portfolio, chunk=24, threshold=1.1, search_budget=2,
                            search_batch=2, top=3)
    return replace(base, **changes)


class CheckingRunner(ReplayGridRunner):
    """A replayed runner that notes in `violations` (a JSON-lines file) every group asked
    of it that repeats a recorded measurement, and counts what it measured. `wrong`:
    programs whose confirmation fails the re-gate."""

    def __init__(self, store: CampaignStore, violations: Path, delay_s: float = 0.0,
                 wrong: tuple[str, ...] = ()):
        super().__init__(ReplayRunner(device="replay", delay_s=delay_s))
        self.store, self.violations, self.wrong = store, violations, set(wrong)
        self.measured: list[tuple[str, str, str]] = []

    def _check(self, problem, programs, pass_name):
        if pass_name == "confirm":
            last = self.store.last_round(problem, "confirm") or 0
            seen = {r.program for r in self.store.results(problem, "confirm", last + 1)}
        else:
            seen = {r.program for r in self.store.results(problem, pass_name)}
        again = sorted(set(programs) & seen)
        if again:
            with self.violations.open("a") as f:
                f.write(json.dumps([str(problem), pass_name, again]) + "\n")
        self.measured += [(str(problem), pass_name, p) for p in programs]

    def measure_groups(self, groups, settings, on_group, seed=0):
        pass_name = "confirm" if "cold" in settings.protocols else "portfolio"
        for problem, programs in groups:
            self._check(problem, programs, pass_name)

        def gated(problem, results):
            if pass_name == "confirm":
                results = [replace(r, status="failed", kind="wrong",
                                   message="re-gate: planted") if r.program in self.wrong
                           else r for r in results]
            on_group(problem, results)
        super().measure_groups(groups, settings, gated, seed)

    def evaluate(self, programs, problem):
        texts = [str(p) for p in programs]
        self._check(problem, texts, "search")
        portfolio = {r.program for r in self.store.results(problem, "portfolio")}
        if set(texts) & portfolio:  # the study knows every portfolio program already
            with self.violations.open("a") as f:
                f.write(json.dumps([str(problem), "search-asked-portfolio",
                                    sorted(set(texts) & portfolio)]) + "\n")
        return super().evaluate(programs, problem)


def campaign(db: Path, violations: Path, shapes: str = SHAPES, delay_s: float = 0.0,
             wrong=(), **changes) -> Campaign:
    store = CampaignStore(db)
    runner = CheckingRunner(store, violations, delay_s, tuple(wrong))
    return Campaign(store, runner, parse_shapes(shapes), settings(**changes), progress=False,
                    log=lambda line: None)


def main(db: str, violations: str, delay_s: str) -> None:
    """Run the campaign to its end (the kill test's subprocess)."""
    summary = campaign(Path(db), Path(violations), delay_s=float(delay_s)).run()
    print(json.dumps(summary))


if __name__ == "__main__":
    import sys
    main(*sys.argv[1:])
