"""Tune jobs: a job (a dict of problems and settings) run by one worker per GPU.

    outcomes = run_workers({"problems": [(4096, 4096, 4096, "nn", "f32")], "budget": 32,
                            "workers": 2, "storage": url, ...})

Worker i starts at the i-th share of the problems and helps with the others once its own
are done; one worker runs in this process, more run as spawned processes reporting on a
queue. run_worker returns {"outcomes": one dict per problem, "interrupted": signum or
None, "policy": the policy's report() or None}; run_workers merges the workers' outcomes
per problem (the study totals of the worker that saw most, this run's counts summed) and
fills a search.tune.tune_summary.RunReport, which prints them. Ctrl-C or SIGTERM stops every
worker before its next batch (search.tune.interrupts): the trials in flight are failed with the
reason and queued again, and the outcomes say what finished.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ...ir.program import Problem
from ...policy.registry import make_policy
from .tune_summary import summary_table, timing_line  # noqa: F401 (their home)

WORKER_STOP_WAIT_S = 60  # how long an interrupted run waits for spawned workers to report


def make_runner(job: dict, index: int):
    """Worker `index`'s runner: replayed (job["replay"] = a record file or "synthetic") or
    the GPU harness on CUDA device `index`."""
    replay = job.get("replay")
    if replay:
        from ..measure.replay import ReplayRunner
        records = None if replay == "synthetic" else replay
        return ReplayRunner(records, device=job.get("device", "replay"),
                            archs=job.get("archs", ("sm_90a", "sm_80")),
                            delay_s=job.get("delay_s", 0.0))
    from ..measure.records import BenchSettings
    from ..measure.runners import HarnessRunner
    settings = BenchSettings(protocols=tuple(job.get("protocols") or ("kernel",)))
    return HarnessRunner(index, builders=job.get("builders"), settings=settings)


def _tuner(job: dict, index: int, runner, events, stop):
    """Worker `index`'s Tuner and policy for `job`."""
    from .database import TunedDatabase
    from .tuner import Budget, Tuner, TuneSettings
    settings = TuneSettings(
        budget=Budget(job["budget"], job.get("seconds")), batch=job.get("batch", 8),
        backends=tuple(job["backends"]) if job.get("backends") else None,
        seed=None if job.get("seed") is None else job["seed"] + index,
        heartbeat_s=job.get("heartbeat_s", 30), grace_s=job.get("grace_s", 120),
        command=job.get("command", ""), confirm=job.get("confirm", 3))
    policy = make_policy(job.get("policy", "heuristic"), runner.archs, settings.backends,
                         job.get("checkpoint"), job.get("seed") or 0, job.get("llm"))
    report = (lambda e: events.put({**e, "problem": str(e["problem"])})) \
        if hasattr(events, "put") else events
    storage = job.get("storage")
    database = None if storage == ":memory:" else TunedDatabase(storage)
    tuner = Tuner(runner, policy, storage, settings, database, on_result=report,
                  worker=str(index), stop=stop)
    return tuner, policy


def run_worker(job: dict, index: int, events=None) -> dict:
    """One worker: tune every problem of `job` (starting at a different one per worker) on
    its runner; report progress to `events` (a queue, or a callable). Returns
    {"outcomes": one dict per problem, "interrupted": the signal that stopped it or None,
    "policy": the policy's report() or None}. Top level so a spawned process can run it."""
    from .interrupts import Interrupted, stop_on_signals
    problems = [Problem(*p) for p in job["problems"]]
    runner = make_runner(job, index)
    interrupted = None
    try:
        with stop_on_signals() as stop:
            tuner, policy = _tuner(job, index, runner, events, stop)
            _seed_llm_examples(policy, job, problems, runner.archs)
            start = index * len(problems) // max(1, job.get("workers", 1))
            try:
                outcomes = tuner.tune_all(problems[start:] + problems[:start],
                                          job.get("concurrent", 1))
            except Interrupted as e:
                interrupted = e.signum
                outcomes = [tuner.progress(p) for p in problems]
            _keep_learning(policy, job, index)
    finally:
        runner.close()
    return {"outcomes": [_outcome_dict(o, runner.device) for o in outcomes],
            "interrupted": interrupted,
            "policy": policy.report() if hasattr(policy, "report") else None}


def _seed_llm_examples(policy, job: dict, problems: list[Problem], archs) -> None:
    """`llm_examples` "replay": each problem's lineage starts with the examples a
    train-llm prompt shows there (search.learn.llm_tasks.seed_examples; sm_90a programs, so only
    where the runner runs sm_90a)."""
    if job.get("llm_examples") != "replay" or policy is None:
        return
    if "sm_90a" not in {str(a) for a in archs}:
        print("note: --llm-examples replay: the examples are sm_90a programs and this GPU "
              "runs none; the prompts start without them", file=sys.stderr)
        return
    from ...policy.prompts import PromptConfig
    from ..learn.llm_tasks import seed_examples
    backends = tuple(job.get("backends") or ())
    seed_examples(policy.lineage, problems, seed=job.get("seed") or 0,
                  config=PromptConfig(backends=backends, reply=(job.get("llm") or {}).get(
                      "reply", "json")))


def _keep_learning(policy, job: dict, index: int) -> None:
    """Worker 0 saves a learned policy after tuning, with what it observed (its updates
    every `update_every` results), where the next `--policy learned` run loads it."""
    from ...policy.learned import LearnedPolicy, default_checkpoint
    if index == 0 and isinstance(policy, LearnedPolicy) and job.get("storage") != ":memory:":
        policy.save(Path(job["checkpoint"]) if job.get("checkpoint") else default_checkpoint())


def _outcome_dict(o, device: str) -> dict:
    return {"problem": str(o.problem), "study": o.study, "measured": o.measured,
            "device": device, "source": o.source, "timing": o.timing,
            "confirmed": o.confirmed, "run_measured": o.run_measured, "requeued": o.requeued,
            "best": o.best.to_dict() if o.best else None}


def run_workers(job: dict, progress: bool = True, report=None) -> list[dict]:
    """Run job["workers"] workers (in this process when 1, else one spawned process each)
    with tqdm bars: one per worker (candidates it measured) and the total. Returns, per
    problem, the outcome with the most measured candidates (run_measured summed over the
    workers); `report` (search.tune.tune_summary.RunReport) sees every event and worker report."""
    import multiprocessing as mp
    from tqdm import tqdm
    from .tune_summary import RunReport
    report = report if report is not None else RunReport()
    n = job.get("workers", 1)
    total = tqdm(total=job["budget"] * len(job["problems"]), desc="all shapes",
                 disable=not progress, position=0)
    bars = [tqdm(desc=f"worker {i}", disable=not progress or n == 1, position=i + 1,
                 bar_format="{desc}: {n} measured {postfix}") for i in range(n)]

    def show(event: dict) -> None:
        report.see(event)
        total.update()
        bar = bars[int(event.get("worker") or 0)]
        bar.update()
        ratio = event.get("best_ratio")
        bar.set_postfix_str(f"{event['problem']}: best {ratio:.3f}x" if ratio else
                            str(event["problem"]))
    try:
        if n == 1:
            finished = [run_worker(job, 0, show)]
        else:
            _prepare_storage(job.get("storage"))
            ctx = mp.get_context("spawn")
            queue = ctx.Queue()
            procs = [ctx.Process(target=_worker_process, args=(job, i, queue), daemon=True)
                     for i in range(n)]
            for p in procs:
                p.start()
            finished = _collect(queue, procs, show)
    finally:
        for bar in [*bars, total]:
            bar.close()
    for worker in finished:
        report.add_worker(worker)
    return _merge([w["outcomes"] for w in finished])


def _prepare_storage(url: str | None) -> None:
    """Create optuna's and the tuned database's tables once, before workers race to."""
    from .database import TunedDatabase
    from .studies import open_storage
    if url and url != ":memory:":
        open_storage(url)
        TunedDatabase(url).close()


def _worker_process(job: dict, index: int, queue) -> None:
    """A spawned worker: run it, then send {"done": index, **its report} or, if it
    failed, {"done": index, "error": the traceback}."""
    import signal
    import traceback
    try:
        queue.put({"done": index, **run_worker(job, index, queue)})
    except KeyboardInterrupt as e:  # stopped before its tuner could stop cleanly
        queue.put({"done": index, "outcomes": [],
                   "interrupted": getattr(e, "signum", signal.SIGINT)})
    except BaseException:
        queue.put({"done": index, "error": traceback.format_exc()})


def _collect(queue, procs, show) -> list[dict]:
    """Show progress events until every worker has reported; raise if one failed or died.
    Ctrl-C or SIGTERM here is passed on to the workers, which stop and report what they
    finished (those silent after WORKER_STOP_WAIT_S are killed)."""
    import os
    import time
    from .interrupts import Interrupted, stop_on_signals
    done: dict[int, dict] = {}
    with stop_on_signals():
        try:
            _drain(queue, procs, show, done, deadline=None)
        except Interrupted as e:
            for i, p in enumerate(procs):
                if i not in done and p.is_alive():
                    os.kill(p.pid, e.signum)
            _drain(queue, procs, show, done, deadline=time.monotonic() + WORKER_STOP_WAIT_S)
            for i, p in enumerate(procs):
                done.setdefault(i, {"done": i, "outcomes": [], "interrupted": e.signum})
                if p.is_alive():
                    p.kill()
    for p in procs:
        p.join()
    errors = [e["error"] for e in done.values() if "error" in e]
    if errors:
        raise RuntimeError("a tune worker failed: " + errors[0].strip().splitlines()[-1])
    return [done[i] for i in sorted(done)]


def _drain(queue, procs, show, done: dict, deadline: float | None) -> None:
    import queue as queue_module
    import time
    while len(done) < len(procs) and (deadline is None or time.monotonic() < deadline):
        try:
            event = queue.get(timeout=0.5)
        except queue_module.Empty:
            dead = [i for i, p in enumerate(procs) if not p.is_alive() and i not in done]
            if dead and queue.empty():
                if deadline is not None:
                    return
                raise RuntimeError(f"tune worker(s) {dead} died (exit codes "
                                   f"{[procs[i].exitcode for i in dead]})")
            continue
        if "done" in event:
            done[event["done"]] = event
        else:
            show(event)


def _merge(per_worker: list[list[dict]]) -> list[dict]:
    best: dict[str, dict] = {}
    run: dict[str, int] = {}
    for outcomes in per_worker:
        for o in outcomes:
            run[o["problem"]] = run.get(o["problem"], 0) + o.get("run_measured", 0)
            if o["problem"] not in best or o["measured"] > best[o["problem"]]["measured"]:
                best[o["problem"]] = o
    merged = [{**o, "run_measured": run[o["problem"]]} for o in best.values()]
    return sorted(merged, key=lambda o: Problem(*_mnk(o["problem"])).flops)


def _mnk(problem_text: str) -> tuple[int, int, int]:
    return tuple(int(x) for x in problem_text.split()[0].split("x"))
