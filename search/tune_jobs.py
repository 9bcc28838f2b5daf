"""Tune jobs: a job (a dict of problems and settings) run by one worker per GPU.

    outcomes = run_workers({"problems": [(4096, 4096, 4096, "nn", "f32")], "budget": 32,
                            "workers": 2, "storage": url, ...})

Worker i starts at the i-th share of the problems and helps with the others once its own
are done; one worker runs in this process, more run as spawned processes reporting on a
queue. Each returns per problem the outcome as a dict; `summary_table` and `timing_line`
print them.
"""
from __future__ import annotations

from pathlib import Path

from gemmforge.ir.program import Problem
from gemmforge.policy.registry import make_policy


def make_runner(job: dict, index: int):
    """Worker `index`'s runner: replayed (job["replay"] = a record file or "synthetic") or
    the GPU harness on CUDA device `index`."""
    replay = job.get("replay")
    if replay:
        from gemmforge.search.replay import ReplayRunner
        records = None if replay == "synthetic" else replay
        return ReplayRunner(records, device=job.get("device", "replay"),
                            archs=job.get("archs", ("sm_90a", "sm_80")),
                            delay_s=job.get("delay_s", 0.0))
    from gemmforge.search.records import BenchSettings
    from gemmforge.search.runners import HarnessRunner
    settings = BenchSettings(protocols=tuple(job.get("protocols") or ("kernel",)))
    return HarnessRunner(index, builders=job.get("builders"), settings=settings)


def run_worker(job: dict, index: int, events=None) -> list[dict]:
    """One worker: tune every problem of `job` (starting at a different one per worker) on
    its runner; report progress to `events` (a queue, or a callable); return the outcomes
    as dicts. Top level so a spawned process can run it."""
    from gemmforge.search.database import TunedDatabase
    from gemmforge.search.tuner import Budget, Tuner, TuneSettings
    problems = [Problem(*p) for p in job["problems"]]
    runner = make_runner(job, index)
    try:
        settings = TuneSettings(
            budget=Budget(job["budget"], job.get("seconds")), batch=job.get("batch", 8),
            backends=tuple(job["backends"]) if job.get("backends") else None,
            seed=None if job.get("seed") is None else job["seed"] + index,
            heartbeat_s=job.get("heartbeat_s", 30), grace_s=job.get("grace_s", 120),
            command=job.get("command", ""), confirm=job.get("confirm", 3))
        policy = make_policy(job.get("policy", "heuristic"), runner.archs,
                             settings.backends, job.get("checkpoint"), job.get("seed") or 0,
                             job.get("llm"))
        report = (lambda e: events.put({**e, "problem": str(e["problem"])})) \
            if hasattr(events, "put") else events
        storage = job.get("storage")
        database = None if storage == ":memory:" else TunedDatabase(storage)
        tuner = Tuner(runner, policy, storage, settings, database, on_result=report,
                      worker=str(index))
        start = index * len(problems) // max(1, job.get("workers", 1))
        order = problems[start:] + problems[:start]
        outcomes = tuner.tune_all(order, job.get("concurrent", 1))
        _keep_learning(policy, job, index)
        return [_outcome_dict(o, runner.device) for o in outcomes]
    finally:
        runner.close()


def _keep_learning(policy, job: dict, index: int) -> None:
    """Worker 0 saves a learned policy after tuning, with what it observed (its updates
    every `update_every` results), where the next `--policy learned` run loads it."""
    from gemmforge.policy.learned import LearnedPolicy, default_checkpoint
    if index == 0 and isinstance(policy, LearnedPolicy) and job.get("storage") != ":memory:":
        policy.save(Path(job["checkpoint"]) if job.get("checkpoint") else default_checkpoint())


def _outcome_dict(o, device: str) -> dict:
    return {"problem": str(o.problem), "study": o.study, "measured": o.measured,
            "device": device, "source": o.source, "timing": o.timing,
            "confirmed": o.confirmed,
            "best": o.best.to_dict() if o.best else None}


def run_workers(job: dict, progress: bool = True) -> list[dict]:
    """Run job["workers"] workers (in this process when 1, else one spawned process each)
    with tqdm bars: one per worker (candidates it measured) and the total. Returns, per
    problem, the outcome with the most measured candidates."""
    import multiprocessing as mp
    from tqdm import tqdm
    n = job.get("workers", 1)
    total = tqdm(total=job["budget"] * len(job["problems"]), desc="all shapes",
                 disable=not progress, position=0)
    bars = [tqdm(desc=f"worker {i}", disable=not progress or n == 1, position=i + 1,
                 bar_format="{desc}: {n} measured {postfix}") for i in range(n)]

    def show(event: dict) -> None:
        total.update()
        bar = bars[int(event.get("worker") or 0)]
        bar.update()
        ratio = event.get("best_ratio")
        bar.set_postfix_str(f"{event['problem']}: best {ratio:.3f}x" if ratio else
                            str(event["problem"]))
    try:
        if n == 1:
            return _merge([run_worker(job, 0, show)])
        _prepare_storage(job.get("storage"))
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=_worker_process, args=(job, i, queue), daemon=True)
                 for i in range(n)]
        for p in procs:
            p.start()
        return _merge(_collect(queue, procs, show))
    finally:
        for bar in [*bars, total]:
            bar.close()


def _prepare_storage(url: str | None) -> None:
    """Create optuna's and the tuned database's tables once, before workers race to."""
    from gemmforge.search.database import TunedDatabase
    from gemmforge.search.studies import open_storage
    if url and url != ":memory:":
        open_storage(url)
        TunedDatabase(url).close()


def _worker_process(job: dict, index: int, queue) -> None:
    """A spawned worker: run it, then send ("done", outcomes) or ("error", traceback)."""
    import traceback
    try:
        queue.put({"done": index, "outcomes": run_worker(job, index, queue)})
    except BaseException:
        queue.put({"done": index, "error": traceback.format_exc()})


def _collect(queue, procs, show) -> list[list[dict]]:
    """Show progress events until every worker has reported; raise if one failed or died."""
    import queue as queue_module
    done: dict[int, dict] = {}
    while len(done) < len(procs):
        try:
            event = queue.get(timeout=0.5)
        except queue_module.Empty:
            dead = [i for i, p in enumerate(procs) if not p.is_alive() and i not in done]
            if dead and queue.empty():
                raise RuntimeError(f"tune worker(s) {dead} died (exit codes "
                                   f"{[procs[i].exitcode for i in dead]})")
            continue
        if "done" in event:
            done[event["done"]] = event
        else:
            show(event)
    for p in procs:
        p.join()
    errors = [e["error"] for e in done.values() if "error" in e]
    if errors:
        raise RuntimeError("a tune worker failed:\n" + errors[0])
    return [done[i]["outcomes"] for i in sorted(done)]


def _merge(per_worker: list[list[dict]]) -> list[dict]:
    best: dict[str, dict] = {}
    for outcomes in per_worker:
        for o in outcomes:
            if o["problem"] not in best or o["measured"] > best[o["problem"]]["measured"]:
                best[o["problem"]] = o
    return sorted(best.values(), key=lambda o: Problem(*_mnk(o["problem"])).flops)


def _mnk(problem_text: str) -> tuple[int, int, int]:
    return tuple(int(x) for x in problem_text.split()[0].split("x"))


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


def summary_table(outcomes: list[dict]) -> str:
    """A plain-text table: shape, measured candidates, best ratio over cuBLAS, source,
    best program."""
    rows = [("shape", "measured", "best x cuBLAS", "source", "program")]
    for o in outcomes:
        best = o["best"] or {}
        ratio = (best.get("cublas_us") or 0) / best["kernel_us"] if best.get("kernel_us") else None
        rows.append((o["problem"], str(o["measured"]), f"{ratio:.3f}" if ratio else "-",
                     o["source"] or "-", best.get("program", "-")))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4]
                     for r in rows)
