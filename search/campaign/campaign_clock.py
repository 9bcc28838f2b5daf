"""A campaign run's clock: its deadline, what still fits before it, what each pass took.

    clock = RunClock(store)
    clock.deadline = time.monotonic() + max_seconds        # None: no limit
    clock.fits("the search at 64x64x64", 16, "search")     # raises OutOfTime if it would not
    clock.count("search", measured, seconds)               # this run's tally, the store's rates

A rate is a pass's seconds per candidate, measured across runs by the campaign's store
(CampaignStore.add_time, seconds_per_candidate); until the store has measured a pass's own,
GUESS_S stands in, and one unit of work is let through on the guess.
"""
from __future__ import annotations

import time

GUESS_S = {"portfolio": 0.05, "search": 0.25, "confirm": 1.0, "confirm_large": 8.0}
"""Seconds per candidate assumed for a pass until the store has measured its own."""


class OutOfTime(Exception):
    """The next unit of work would not fit in the run's time."""


class RunClock:
    """The time of one campaign over `store` (a CampaignStore): `deadline` (time.monotonic(),
    None without one), set by the run; `counts` {pass: [candidates, seconds]} of this run."""

    def __init__(self, store):
        self.store = store
        self.deadline: float | None = None
        self.counts: dict[str, list] = {}
        self._guessed: set[str] = set()  # rates whose one unit on a guess went through

    def per_candidate(self, rate: str) -> float:
        """Seconds per candidate of pass `rate`: the store's measure, else GUESS_S."""
        return self.store.seconds_per_candidate(rate, GUESS_S[rate])

    def fits(self, what: str, candidates: int, rate: str) -> None:
        """Raise OutOfTime unless `candidates` more of pass `rate` fit before the deadline
        at the rate measured so far. Until a rate is measured, one unit of work is let
        through (the guess might never let the first one start)."""
        if self.deadline is None:
            return
        if self.store.get(f"rate:{rate}") is None and rate not in self._guessed:
            self._guessed.add(rate)
            return
        if time.monotonic() + candidates * self.per_candidate(rate) > self.deadline:
            raise OutOfTime(what)

    def room(self, rate: str) -> float:
        """Candidates of pass `rate` that fit before the deadline (inf without one)."""
        if self.deadline is None:
            return float("inf")
        return max(0.0, self.deadline - time.monotonic()) / self.per_candidate(rate)

    def count(self, name: str, candidates: int, seconds: float, rate: str | None = None):
        """Add to this run's tally of pass `name`, and to the store's rate `rate` (default
        `name`) when candidates were measured."""
        c, s = self.counts.get(name, [0, 0.0])
        self.counts[name] = [c + candidates, s + seconds]
        if candidates:
            self.store.add_time(rate or name, candidates, seconds)

    def this_run(self) -> dict:
        """{pass: {candidates, seconds, per_second}} of this run."""
        return {k: {"candidates": c, "seconds": round(s, 1),
                    "per_second": round(c / s, 2) if s else None}
                for k, (c, s) in self.counts.items()}


def hms(seconds: float) -> str:
    """`seconds` as h:mm:ss."""
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
