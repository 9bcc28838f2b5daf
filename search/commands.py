"""The search package's `gemmforge` subcommands: `tune` (and `bench` until the harness adds its own).

    gemmforge tune --shapes 1024x1024x1024,1000x4096x333 --budget 32
    gemmforge tune --shapes sample:20 --budget 64 --policy learned --gpus 2
    gemmforge tune --shapes grid --budget 16 --storage postgresql+psycopg://user@host/db
    gemmforge tune --shapes sample:20 --budget 32 --replay synthetic      # no GPU: replayed

`--shapes`: a comma list of MxNxK, `grid` (the 1000 shapes of search/data/grid_1000.txt),
`sample:N[:SEED]` (N grid shapes drawn with SEED, default 0), or `@file` (one shape per
line). `--gpus N` starts one worker process per GPU (CUDA devices 0..N-1), all on the same
studies: each starts at a different shape and helps with the others once its own are done.
A worker measures `--batch` candidates of a shape together (default 16: their builds run
in parallel) and may tune `--concurrent` shapes at once (default 1; more threads overlap
one shape's builds with another's measurements, but contend for the Python interpreter and
the storage: on an H100 with 16 cores, 1 x 16 and 8 x 8 both measured 6.2 candidates per
GPU-second, benchmarks/README.md). Candidates are timed with the kernel protocol only
(`--protocols`, the reward's protocol); `gemmforge bench` times the winners with all.
At the end: a summary table, and a CSV + PNG of the best program per shape
(search.report) under benchmarks/results/. The studies open in optuna-dashboard:

    pip install optuna-dashboard && optuna-dashboard <the storage URL the run prints>
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from gemmforge.ir.program import Arch, Problem, Program

GRID = Path(__file__).with_name("data") / "grid_1000.txt"
POLICIES = ("heuristic", "learned", "random", "llm", "none")


def parse_shapes(spec: str, layout: str = "nn", acc: str = "f32") -> list[Problem]:
    """Problems from a --shapes value (see the module docstring); raises IRError on a bad one."""
    from gemmforge.ir.text import parse_problem
    if spec == "grid" or spec.startswith("sample:"):
        shapes = GRID.read_text().split()
        if spec != "grid":
            _, count, *seed = spec.split(":")
            shapes = random.Random(int(seed[0]) if seed else 0).sample(shapes, int(count))
    elif spec.startswith("@"):
        shapes = Path(spec[1:]).read_text().split()
    else:
        shapes = [s for s in spec.split(",") if s.strip()]
    return [parse_problem(f"{s} {layout} {acc}") for s in shapes]


class RandomPolicy:
    """Uniformly random legal programs from the tuner's space (a baseline)."""

    name = "random"

    def __init__(self, archs, backends=None, seed: int = 0):
        from gemmforge.ir.space import Space
        self.archs, self.backends, self._rng = archs, backends, random.Random(seed)
        self._Space = Space

    def propose(self, problem: Problem, arch: Arch, n: int = 1) -> list[Program]:
        space = self._Space.build([arch], self.backends, problem)
        out: list[Program] = []
        for _ in range(20 * n):
            p = space.sample_legal(problem, self._rng)
            if p not in out:
                out.append(p)
            if len(out) == n:
                break
        return out

    def observe(self, problem: Problem, program: Program, reward: float) -> None:
        """Random doesn't learn."""


def make_policy(name: str, archs, backends=None, checkpoint: str | None = None, seed: int = 0,
                llm: dict | None = None):
    """The policy named `name` (one of POLICIES; "none": the sampler alone). `llm`: the
    LLM policy's options (url, model, dataset)."""
    if name == "heuristic":
        from gemmforge.policy.heuristic import HeuristicPolicy
        return HeuristicPolicy(backends=backends)
    if name == "random":
        return RandomPolicy(archs, backends, seed)
    if name == "learned":
        from gemmforge.policy.learned import LearnedPolicy, default_checkpoint
        path = Path(checkpoint) if checkpoint else default_checkpoint()
        if path.exists():
            return LearnedPolicy.load(path)
        return LearnedPolicy(archs=archs, backends=backends, seed=seed)
    if name == "llm":
        from gemmforge.policy.llm import from_cli
        return from_cli(seed=seed, **(llm or {}))
    if name == "none":
        return None
    raise ValueError(f"--policy: {name!r} is not one of {', '.join(POLICIES)}")


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


def _protocols(text: str) -> list[str]:
    """--protocols as a list, checked as BenchSettings checks it (a UsageError if bad)."""
    from gemmforge.compiler.cli import UsageError
    from gemmforge.search.records import BenchSettings
    names = [x.strip() for x in text.split(",") if x.strip()]
    try:
        BenchSettings(protocols=tuple(names))
    except ValueError as e:
        raise UsageError(f"--protocols: {e}") from None
    return names


def cmd_tune(args) -> int:
    from gemmforge.search.records import Result
    from gemmforge.search.report import write_report
    from gemmforge.search.studies import default_storage
    from gemmforge.compiler.cli import UsageError
    problems = parse_shapes(args.shapes, args.layout, args.acc)
    if args.concurrent < 1:
        raise UsageError(f"--concurrent: {args.concurrent} must be >= 1")
    if args.confirm < 0:
        raise UsageError(f"--confirm: {args.confirm} must be >= 0 (0: no confirmation)")
    if args.policy == "llm" and not (args.llm_url or args.llm_model):
        raise UsageError("--policy llm needs --llm-url (an OpenAI-compatible server) or "
                         "--llm-model (a local model directory)")
    storage = args.storage or default_storage()
    job = {"problems": [(p.m, p.n, p.k, str(p.layout), str(p.acc)) for p in problems],
           "budget": args.budget, "seconds": args.seconds, "batch": args.batch,
           "confirm": args.confirm,
           "policy": args.policy, "checkpoint": args.checkpoint, "storage": storage,
           "llm": {"url": args.llm_url, "model": args.llm_model, "dataset": args.llm_dataset},
           "backends": args.backends.split(",") if args.backends else None,
           "workers": args.gpus, "seed": args.seed, "replay": args.replay,
           "concurrent": args.concurrent, "protocols": _protocols(args.protocols),
           "command": "gemmforge " + " ".join(sys.argv[1:] if args.argv is None else args.argv)}
    print(f"storage: {storage}   (optuna-dashboard {storage})", file=sys.stderr)
    start = time.perf_counter()
    outcomes = run_workers(job, progress=not args.quiet)
    wall = time.perf_counter() - start
    print(summary_table(outcomes))
    measured = sum(o["measured"] for o in outcomes)
    print(f"{measured} candidates measured in {wall:.0f} s on {args.gpus} GPU(s): "
          f"{measured / wall / args.gpus:.2f} candidates per GPU-second (builds included)")
    print(timing_line(outcomes))
    best = [Result.from_dict(o["best"]) for o in outcomes if o["best"]]
    if best and args.report:
        csv_path, png_path = write_report(best, args.report,
                                          Path(args.report_dir) if args.report_dir else None)
        print(f"wrote {csv_path}\nwrote {png_path}")
    return 0


def add_to(sub) -> None:
    """Add `tune` (and `bench`, unless search.bench_cli provides it) to the gemmforge parser."""
    t = sub.add_parser("tune", help="tune shapes: optuna + a policy, one worker per GPU",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--shapes", required=True, help="MxNxK,..., grid, sample:N[:SEED] or @file")
    t.add_argument("--layout", default="nn", help="nn or nt")
    t.add_argument("--acc", default="f32", help="f32 or f16")
    t.add_argument("--budget", type=int, default=32, help="measured candidates per shape")
    t.add_argument("--seconds", type=float, help="measurement seconds per shape (optional)")
    t.add_argument("--policy", default="heuristic", choices=POLICIES)
    t.add_argument("--checkpoint", help="learned policy checkpoint, loaded at the start and "
                                        "saved with what it learned at the end (default: "
                                        "user cache; gemmforge train-policy writes it)")
    t.add_argument("--llm-url", help="--policy llm: an OpenAI-compatible server (vllm serve)")
    t.add_argument("--llm-model", help="--policy llm: served model name, or a local model "
                                       "directory for vLLM's offline engine")
    t.add_argument("--llm-dataset", help="--policy llm: JSONL file the (prompt, completion, "
                                         "reward) rows go to")
    t.add_argument("--storage", help="SQLAlchemy URL (default: SQLite in the user cache dir)")
    t.add_argument("--gpus", type=int, default=1, help="worker processes, one per GPU")
    t.add_argument("--backends", help="comma list (default: every registered backend)")
    t.add_argument("--batch", type=int, default=16,
                   help="candidates measured together (their builds run in parallel)")
    t.add_argument("--concurrent", type=int, default=1,
                   help="shapes each worker tunes at once (their builds overlap the others' "
                        "measurements)")
    t.add_argument("--protocols", default="kernel",
                   help="timing protocols per candidate, comma list of kernel,cold,call,"
                        "server (kernel: the reward; the others cost GPU time)")
    t.add_argument("--confirm", type=int, default=3,
                   help="after the budget, time the best N again together and record the "
                        "winner's figures (0: keep the best single reading)")
    t.add_argument("--seed", type=int)
    t.add_argument("--replay", help="answer from a record file (CSV/JSONL) or 'synthetic' "
                                    "instead of a GPU")
    t.add_argument("--report", default="tune", help="result name under benchmarks/results "
                                                    "('' for none)")
    t.add_argument("--report-dir", help="folder for the report (default benchmarks/results)")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(run=cmd_tune, argv=None)
    from gemmforge.search import train_cli
    train_cli.add_to(sub)
    try:
        from gemmforge.search import bench_cli
    except ImportError:
        return
    bench_cli.add_to(sub)
