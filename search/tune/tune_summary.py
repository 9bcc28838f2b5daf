"""What `gemmforge tune` prints at the end: the table, this run's totals, where candidates
came from, what went wrong with the LLM policy, where the time went.

Outcomes are the dicts search.tune.tune_jobs.run_worker returns (one per problem; `measured`
counts the whole study, `run_measured` this run). A RunReport gathers, from the progress
events and the workers' final reports, what the outcomes don't hold: candidates by source,
the LLM policy's failures by reason, and the signal that stopped the run.
"""
from __future__ import annotations

import signal
from collections import Counter

from ..measure.env import WORST_REWARD


class RunReport:
    """This run's counts: measured candidates and ok ones by source, the LLM policy's
    proposals and failures by reason class (count, first message), and `interrupted`
    (the signal number, or None)."""

    def __init__(self):
        self.sources: Counter = Counter()
        self.ok_sources: Counter = Counter()
        self.proposals = 0
        self.legal = 0
        self.failures: dict[str, list] = {}  # reason class -> [count, first reason]
        self.interrupted: int | None = None

    def see(self, event: dict) -> None:
        """One measured-candidate event (search.tune.tuner's on_result)."""
        source = event.get("source") or "?"
        self.sources[source] += 1
        if (event.get("reward") or WORST_REWARD) > WORST_REWARD:
            self.ok_sources[source] += 1

    def add_worker(self, report: dict) -> None:
        """A worker's final report: {"interrupted": signum|None, "policy": stats|None}."""
        if report.get("interrupted") and self.interrupted is None:
            self.interrupted = report["interrupted"]
        stats = report.get("policy") or {}
        self.proposals += stats.get("proposals", 0)
        self.legal += stats.get("legal", 0)
        for kind, (count, first) in (stats.get("failures") or {}).items():
            mine = self.failures.setdefault(kind, [0, first])
            mine[0] += count


def summary_table(outcomes: list[dict], replayed: str | None = None) -> str:
    """A plain-text table: shape, measured candidates (of the budget, when given), best
    ratio over cuBLAS, source, best program. `replayed`: the replay source; the ratio
    column then says it is not a GPU measurement."""
    head = "best x cuBLAS" if not replayed else (
        "synthetic x cuBLAS" if replayed == "synthetic" else "replayed x cuBLAS")
    rows = [("shape", "measured", head, "source", "program")]
    for o in outcomes:
        best = o["best"] or {}
        ratio = (best.get("cublas_us") or 0) / best["kernel_us"] if best.get("kernel_us") else None
        measured = str(o["measured"]) + (f"/{o['budget']}" if o.get("budget") else "")
        rows.append((o["problem"], measured, f"{ratio:.3f}" if ratio else "-",
                     o["source"] or "-", best.get("program", "-")))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4]
                     for r in rows)


def totals_line(outcomes: list[dict], wall_s: float, gpus: int, replayed: str | None) -> str:
    """How many candidates this run measured, in what time, where (never "on N GPU(s)"
    for a replayed run), against the studies' totals."""
    run = sum(o.get("run_measured", 0) for o in outcomes)
    study = sum(o["measured"] for o in outcomes)
    where = (f"on {gpus} GPU(s)" if not replayed else
             "replayed/synthetic (roofline model, no GPU)" if replayed == "synthetic" else
             f"replayed from {replayed} (no GPU)")
    rate = (f": {run / wall_s / gpus:.2f} candidates per GPU-second (builds included)"
            if not replayed and wall_s > 0 else "")
    earlier = f"; the studies hold {study} in all" if study != run else ""
    return f"{run} candidates measured this run in {wall_s:.0f} s {where}{rate}{earlier}"


def source_line(report: RunReport) -> str:
    if not report.sources:
        return "measured this run by source: none"
    return "measured this run by source: " + ", ".join(
        f"{s} {n} ({report.ok_sources[s]} ok)" for s, n in report.sources.most_common())


def llm_lines(report: RunReport) -> list[str]:
    """The LLM policy's proposals: totals, each failure reason's count and first message,
    and a warning when every proposal failed. Empty when no LLM policy ran."""
    if not report.proposals:
        return []
    failed = report.proposals - report.legal
    lines = [f"llm policy: {report.proposals} proposals, {report.legal} legal, "
             f"{failed} failed"]
    for kind, (count, first) in sorted(report.failures.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"  {kind}: {count} (first: {first})")
    if report.legal == 0:
        lines.append(f"WARNING: every one of the {report.proposals} LLM proposals failed: "
                     "this run was the optuna sampler alone")
    return lines


def stop_line(report: RunReport) -> str:
    """What an interrupted run says after its summary."""
    name = signal.Signals(report.interrupted).name if report.interrupted else "?"
    return (f"gemmforge: interrupted by {name}: the table holds what finished; the trials in "
            f"flight were failed with the reason and queued again for the next run")


def requeued_line(outcomes: list[dict]) -> str | None:
    """Says how many trials a stopped run left RUNNING that this run failed and queued
    again (None if none)."""
    shapes = [o for o in outcomes if o.get("requeued")]
    if not shapes:
        return None
    return (f"re-queued {sum(o['requeued'] for o in shapes)} trial(s) that a stopped run "
            f"left running ({', '.join(o['problem'] for o in shapes)})")


def timing_line(outcomes: list[dict]) -> str:
    """Where this run's time went, summed over shapes (threads and workers overlap, so
    the stages may add up to more than the wall time)."""
    total: dict[str, float] = {}
    for o in outcomes:
        for stage, seconds in (o.get("timing") or {}).items():
            total[stage] = total.get(stage, 0.0) + seconds
    if not total:
        return "time by stage: none recorded"
    return ("time by stage, summed over shapes: " +
            ", ".join(f"{stage} {total[stage]:.1f} s" for stage in
                      ("ask", "evaluate", "tell") if stage in total) +
            f"; inside evaluate, per candidate summed: builds {total.get('build', 0):.1f} s, "
            f"GPU measurement {total.get('measure', 0):.1f} s")
