"""A campaign's programs that failed to build, kept in its store so none is built twice.

    failed = store.get("build_failed", {})          # {program text: the build's message}
    record_build_failures(store, problems, failed)  # failed portfolio results where pending
    note_build_failures(store, results)             # a batch's compile failures, for later

The build pass records each failure as it lands; a program the build pass did not reach
fails inside a portfolio batch instead (a `compile` Result), and is noted then. Either way
every later shape that planned it records the failure without building it again.
"""
from __future__ import annotations

from typing import Sequence

from ...ir.program import Problem
from ..measure.records import Result

KEY = "build_failed"  # the store's key: {program text: message}
MESSAGE_CHARS = 400


def record_build_failures(store, problems: Sequence[Problem], failed: dict[str, str]) -> None:
    """A program of `failed` is a failed portfolio result (kind compile) at every shape of
    `problems` where it is pending in `store` (a CampaignStore)."""
    if not failed:
        return
    for problem in problems:
        texts = [t for t in store.pending(problem, "portfolio") if t in failed]
        if texts:
            store.record(problem, "portfolio", [Result(
                t, problem.m, problem.n, problem.k, str(problem.layout), str(problem.acc),
                status="failed", kind="compile", message=f"build: {failed[t]}")
                for t in texts])


def note_build_failures(store, results: Sequence[Result]) -> None:
    """Add the programs of `results` that failed to build to the store's failures."""
    failed = {r.program: r.message[:MESSAGE_CHARS] for r in results if r.kind == "compile"}
    if failed:
        store.put(KEY, {**store.get(KEY, {}), **failed})
