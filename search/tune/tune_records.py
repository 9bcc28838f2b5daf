"""What the tuner is told and what it reports: a budget, its settings, a problem's outcome.

search.tune.tuner's records, kept apart so that the command line and the workers can build them
without the tuner's machinery; search.tune.tuner re-exports them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.program import Problem
from ..measure.records import Result


@dataclass(frozen=True)
class Budget:
    """Per problem, over the whole study: measured candidates, and seconds of measurement
    (None: no time limit)."""

    trials: int = 32
    seconds: float | None = None

    def __post_init__(self):
        if self.trials < 1 or (self.seconds is not None and self.seconds <= 0):
            raise ValueError(f"budget: trials must be >= 1 and seconds > 0, got {self}")


@dataclass(frozen=True)
class TuneSettings:
    """How the tuner spends a budget.

    batch: candidates measured together (builds overlap); policy_share: the fraction of a
    batch the policy proposes (the sampler fills the rest); backends: None for every
    registered one; max_rejects: invalid or duplicate asks tolerated per candidate before
    a random legal program is enqueued instead; startup_trials: TPE's random start, made
    of random legal programs (sampled and verified in memory, then enqueued: TPE's own
    random start is mostly illegal programs, each a trial written and failed);
    heartbeat_s / grace_s: a running trial is stale after grace_s without a heartbeat;
    command: recorded with each best program in the tuned database; confirm: once the
    budget is spent, the best `confirm` programs (and what the resolver served before the
    tune, and the database's entry) are timed again together and the winner, with those
    figures, becomes the outcome and the database entry (search.tune.confirm; 0: record
    each best single reading; these measurements are outside the budget)."""

    budget: Budget = field(default_factory=Budget)
    batch: int = 8
    policy_share: float = 0.5
    backends: tuple[str, ...] | None = None
    seed: int | None = None
    max_rejects: int = 50
    startup_trials: int = 8
    heartbeat_s: int = 30
    grace_s: int = 120
    command: str = ""
    confirm: int = 3

    def __post_init__(self):
        if self.confirm < 0 or self.batch < 1:
            raise ValueError(f"confirm must be >= 0 and batch >= 1, got {self.confirm} "
                             f"and {self.batch}")


@dataclass
class Outcome:
    """A problem's study after tuning: `measured` candidates, the best ok Result and the
    source (policy name, "sampler", "random", "database", or the provenance of what the
    resolver served before, such as "shipped-exact") of the best program; `confirmed`
    when `best` comes from the confirmation (search.tune.confirm), not the trials;
    `run_measured` of the `measured` were measured by this run (its tuner); `requeued`
    trials that a stopped run had left RUNNING were failed and queued again."""

    problem: Problem
    study: str
    measured: int
    best: Result | None
    source: str = ""
    timing: dict = field(default_factory=dict)  # this run's seconds by stage (see tune())
    confirmed: bool = False
    run_measured: int = 0
    requeued: int = 0

    @property
    def best_ratio(self) -> float | None:
        return self.best.speedup if self.best else None
