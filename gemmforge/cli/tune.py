"""`gemmforge tune`: tune shapes with optuna and a policy, one worker per GPU.

    gemmforge tune --shapes 1024x1024x1024,1000x4096x333 --budget 32
    gemmforge tune --shapes sample:20 --budget 64 --policy learned --gpus 2
    gemmforge tune --shapes grid --budget 16 --storage postgresql+psycopg://user@host/db
    gemmforge tune --shapes sample:20 --budget 32 --replay synthetic      # no GPU: replayed
    gemmforge tune --shapes 77x4096x4096 --quick     # 8 neighbourhood candidates, one group
    gemmforge tune --model llama --tokens 1,16,64,256,1024,4096 --budget 16   # a model's layers

`--model`: the linear layers of a model (a transformers model type or config.json, or
`module:function` returning a torch module; gemmforge.model_layers), one layout-nt shape per
distinct (n, k) and token bucket of `--tokens` (the power of two at or above each count,
as gemmforge.patch chooses programs): each is quick-tuned first (as `--quick`), then, unless
`--quick` is given, searched with `--budget`/`--seconds` per shape; both record into the
tuned database that `patch` and `matmul` read.

`--shapes`: a comma list of MxNxK, `grid` (the 1000 shapes of search/data/grid_1000.txt),
`sample:N[:SEED]` (N grid shapes drawn with SEED, default 0), or `@file` (one shape per
line). `--gpus N` starts one worker process per GPU (CUDA devices 0..N-1), all on the same
studies: each starts at a different shape and helps with the others once its own are done.
A worker measures `--batch` candidates of a shape together (default 16: their builds run
in parallel) and may tune `--concurrent` shapes at once (default 1; more threads overlap
one shape's builds with another's measurements, but contend for the Python interpreter and
the storage: on an H100 with 16 cores, 1 x 16 and 8 x 8 both measured 6.2 candidates per
GPU-second, benchmarks/README.md). Candidates are timed with the kernel protocol only
(`--protocols`, the reward's protocol); the best `--confirm` are timed again together with
the program the resolver served before the tune and the tuned entry, beside cuBLAS, below
the large class after another kernel too (with each pdl one's twin without pdl), and only
the best there is recorded (search.tune.confirm; where it reads slower than cuBLAS, `matmul`
then calls cuBLAS); `gemmforge bench` times the winners with all.
At the end: a summary table, and a CSV + PNG of the best program per shape
(search.measure.report) in the current directory or `--report-dir`. The studies open in
optuna-dashboard:

    pip install optuna-dashboard && optuna-dashboard <the storage URL the run prints>
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .. import arguments
from .common import SHAPES_HELP, check_report_args, storage_url
from ..errors import EXIT_SIGNAL_BASE, Failure, UsageError
from ..policy.registry import POLICIES

LLM_ENDPOINTS = ("chat", "completions")


def _protocols(text: str) -> list[str]:
    """--protocols as a list, checked as BenchSettings checks it (a UsageError if bad)."""
    from ..search.measure.records import BenchSettings
    names = [x.strip() for x in text.split(",") if x.strip()]
    try:
        BenchSettings(protocols=tuple(names))
    except ValueError as e:
        raise UsageError(f"--protocols: {e}") from None
    return names


def _check_counts(args) -> None:
    for name, value, least in (("--budget", args.budget, 1), ("--batch", args.batch, 1),
                               ("--gpus", args.gpus, 1), ("--concurrent", args.concurrent, 1),
                               ("--confirm", args.confirm, 0)):
        arguments.at_least(name, value, least)
    arguments.positive_seconds("--seconds", args.seconds)
    arguments.positive_seconds("--llm-timeout", args.llm_timeout)
    if args.policy == "llm" and not (args.llm_url or args.llm_model):
        raise UsageError("--policy llm needs --llm-url (an OpenAI-compatible server) or "
                         "--llm-model (a local model directory)")
    if args.llm_endpoint != "chat" and not args.llm_url:
        raise UsageError(f"--llm-endpoint: {args.llm_endpoint} needs --llm-url (a server)")
    if args.llm_examples != "none" and args.policy != "llm":
        raise UsageError(f"--llm-examples: {args.llm_examples} needs --policy llm")
    _check_policy_options(args)
    _check_checkpoint(args)


def _check_checkpoint(args) -> None:
    """--policy learned: a --checkpoint to write in a folder that exists, and an existing
    checkpoint (given or the default) that loads."""
    if args.policy != "learned":
        return
    from ..policy.learned import checkpoint_refusal, default_checkpoint
    if args.checkpoint is not None:
        arguments.output_file(args.checkpoint, "--checkpoint")
    path = Path(args.checkpoint) if args.checkpoint else default_checkpoint()
    reason = checkpoint_refusal(path) if path.is_file() else None
    if reason:
        raise UsageError(f"--checkpoint: {path} {reason}")


LLM_OPTIONS = ("--llm-url", "--llm-model", "--llm-dataset", "--llm-timeout", "--llm-endpoint",
               "--llm-adapter", "--llm-engine", "--llm-reply")
POLICY_OPTIONS = {"llm": LLM_OPTIONS, "learned": ("--checkpoint",)}
NOT_QUICK = ("--budget", "--seconds", "--batch", "--policy", "--checkpoint", *LLM_OPTIONS,
             "--llm-examples", "--gpus", "--concurrent", "--protocols", "--confirm")
"""Options `tune --quick` has no use for: it times a fixed handful of candidates per shape."""


def given(args, option: str) -> bool:
    """Whether `option` was on the command line (main records it in args.argv)."""
    return any(a == option or a.startswith(option + "=") for a in (args.argv or ()))


def _check_policy_options(args) -> None:
    """An option of one policy given with another is refused, not silently ignored."""
    for policy, options in POLICY_OPTIONS.items():
        for option in options:
            if args.policy != policy and given(args, option):
                raise UsageError(f"{option}: needs --policy {policy} (the policy is "
                                 f"{args.policy})")


def check_quick_options(args) -> None:
    """UsageError for an option `tune --quick` would ignore."""
    for option in NOT_QUICK:
        if given(args, option):
            raise UsageError(f"{option}: tune --quick times a fixed set of candidates per "
                             f"shape and takes no {option} (drop it, or drop --quick)")




def _report_name(args) -> None:
    if args.report:
        check_report_args(args.report, args.report_dir, "--report")


def model_shapes(args) -> None:
    """With --model: its layers' shapes as args.shapes (layout nt); checks --shapes/--tokens."""
    if args.model is None:
        if args.shapes is None:
            raise UsageError("tune: give --shapes or --model")
        if args.tokens is not None:
            raise UsageError("--tokens needs --model")
        return
    if args.shapes is not None:
        raise UsageError("--model and --shapes: give one of them")
    if args.layout not in ("nn", "nt"):
        raise UsageError(f"--layout: {args.layout!r} is not nn or nt")
    from ..model_layers import layer_problems, model_layers
    from ..torch_op import bucket
    tokens = arguments.positive_ints("--tokens", args.tokens or DEFAULT_TOKENS)
    layers = model_layers(args.model)
    problems = layer_problems(layers, tokens, args.model)
    args.shapes = ",".join(f"{p.m}x{p.n}x{p.k}" for p in problems)
    args.layout = "nt"
    buckets = sorted({bucket(t) for t in tokens})
    print(f"{args.model}: {len(layers)} layer shapes n x k ({', '.join(map(str, layers))}; "
          f"bias: patch runs the program's bias twin) at token buckets "
          f"{', '.join(map(str, buckets))}: {len(problems)} shapes")


DEFAULT_TOKENS = "1,16,64,256,1024,4096"


def tune_job(args) -> dict:
    """The job cmd_tune runs, every argument checked first (UsageError: exit 2)."""
    arguments.environment()
    problems = arguments.shapes(args.shapes, args.layout, args.acc, dtype=args.dtype)
    _check_counts(args)
    backends = arguments.backends(args.backends)
    replay = arguments.replay(args.replay)
    protocols = _protocols(args.protocols)
    _report_name(args)
    if not replay:
        arguments.cuda_devices("tune", args.gpus, "; use --replay synthetic (or a record "
                               "file) to try it without one")
    storage = storage_url(args.storage)
    return {"problems": [(p.m, p.n, p.k, str(p.layout), str(p.acc), str(p.dtype))
                         for p in problems],
            "budget": args.budget, "seconds": args.seconds, "batch": args.batch,
            "confirm": args.confirm,
            "policy": args.policy, "checkpoint": args.checkpoint, "storage": storage,
            "llm": {"url": args.llm_url, "model": args.llm_model, "dataset": args.llm_dataset,
                    "adapter": args.llm_adapter, "engine": args.llm_engine,
                    "timeout_s": args.llm_timeout, "endpoint": args.llm_endpoint,
                    "reply": args.llm_reply},
            "llm_examples": args.llm_examples,
            "backends": list(backends) if backends else None,
            "workers": args.gpus, "seed": args.seed, "replay": replay,
            "device": args.replay_device,
            "concurrent": args.concurrent, "protocols": protocols,
            "command": "gemmforge " + " ".join(sys.argv[1:] if args.argv is None else args.argv)}


def cmd_tune(args) -> int:
    """Tune; print the summary (also when interrupted); exit 0, 1 when nothing could be
    measured, 128 + the signal when stopped."""
    from ..search.tune.tune_jobs import run_workers
    from ..search.tune.tune_summary import (RunReport, llm_lines, requeued_line,
                                            source_line, stop_line, summary_table,
                                            timing_line, totals_line)
    model_shapes(args)
    if args.quick:
        check_quick_options(args)
    if args.quick or args.model:
        from .quick import cmd_quick
        done = cmd_quick(args)
        if args.quick:
            return done
    job = tune_job(args)
    print(f"storage: {job['storage']}   (optuna-dashboard {job['storage']})", file=sys.stderr)
    report = RunReport()
    start = time.perf_counter()
    outcomes = run_workers(job, progress=not args.quiet, report=report)
    wall = time.perf_counter() - start
    print(summary_table([{**o, "budget": args.budget} for o in outcomes], job["replay"]))
    print(totals_line(outcomes, wall, args.gpus, job["replay"]))
    if requeued_line(outcomes):
        print(requeued_line(outcomes))
    print(source_line(report))
    for line in llm_lines(report):
        print(line, file=sys.stderr if line.startswith("WARNING") else sys.stdout)
    print(timing_line(outcomes))
    _write_report(args, outcomes)
    if report.interrupted:
        print(stop_line(report), file=sys.stderr)
        return EXIT_SIGNAL_BASE + report.interrupted
    if not any(o["best"] for o in outcomes):
        raise Failure("tune: no candidate measured ok for any shape (the table's sources "
                      "and the storage's trials say why)")
    return 0


def _write_report(args, outcomes: list[dict]) -> None:
    from ..search.measure.records import Result
    from ..search.measure.report import write_report
    best = [Result.from_dict(o["best"]) for o in outcomes if o["best"]]
    if best and args.report:
        csv_path, png_path = write_report(best, args.report,
                                          Path(args.report_dir) if args.report_dir else None)
        print(f"wrote {csv_path}\nwrote {png_path}")


def add_to(sub) -> None:
    """Add `tune` to the gemmforge parser's subcommands `sub`."""
    t = sub.add_parser("tune", help="tune shapes: optuna + a policy, one worker per GPU",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--shapes", help=SHAPES_HELP)
    t.add_argument("--model", help="tune a model's linear layers: a transformers model type or "
                                   "config.json, or module:function returning a torch module")
    t.add_argument("--tokens", help=f"with --model: token counts, comma list (default "
                                    f"{DEFAULT_TOKENS}); each one's power-of-two bucket is tuned")
    t.add_argument("--layout", default="nn", help="nn or nt")
    t.add_argument("--acc", default="f32", help="f32 or f16")
    t.add_argument("--dtype", default="f16",
                   help="operands and output: f16 or bf16 (cuBLAS timed in the same dtype)")
    t.add_argument("--budget", type=int, default=32, help="measured candidates per shape")
    t.add_argument("--seconds", type=float, help="measurement seconds per shape (optional)")
    t.add_argument("--policy", default="heuristic", choices=tuple(POLICIES))
    t.add_argument("--checkpoint", help="learned policy checkpoint, loaded at the start and "
                                        "saved with what it learned at the end (default: "
                                        "user cache; gemmforge train-policy writes it)")
    t.add_argument("--llm-url", help="--policy llm: an OpenAI-compatible server (vllm serve)")
    t.add_argument("--llm-model", help="--policy llm: served model name, or a local model "
                                       "directory for vLLM's offline engine")
    t.add_argument("--llm-dataset", help="--policy llm: JSONL file the (prompt, completion, "
                                         "reward) rows go to")
    t.add_argument("--llm-timeout", type=float, default=300.0,
                   help="--policy llm: seconds one server request may take")
    t.add_argument("--llm-endpoint", default="chat", choices=LLM_ENDPOINTS,
                   help="--policy llm with --llm-url: /v1/chat/completions (chat template) "
                        "or /v1/completions (plain prompt text)")
    t.add_argument("--llm-adapter", help="--policy llm: a LoRA adapter folder from gemmforge "
                                         "train-llm (a server must serve it under the "
                                         "folder's name: --lora-modules NAME=PATH)")
    t.add_argument("--llm-engine", default="vllm", choices=("vllm", "transformers"),
                   help="--policy llm with a local model: vLLM's offline engine, or "
                        "transformers (any device; JSON replies not schema-constrained, one-line "
                        "text replies decoded under ir.grammar where one backend is offered)")
    t.add_argument("--llm-reply", default="json", choices=("json", "text"),
                   help="--policy llm: the full prompt and a JSON reply under the schema, or "
                        "the compact prompt and one line of program text (what train-llm "
                        "trains an adapter on)")
    t.add_argument("--llm-examples", default="none", choices=("none", "replay"),
                   help="--policy llm: replay starts each shape's prompt with the examples a "
                        "train-llm prompt shows there (the prompt pool's programs with their "
                        "replayed ratios: the best at the two nearest shapes of its FLOP "
                        "decade, two at random), as an adapter from train-llm was trained; "
                        "none (default): only what this tune measures")
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
                   help="after the budget, time the best N again together with what served "
                        "before the tune, and record only the winner (0: record each best "
                        "single reading)")
    t.add_argument("--seed", type=int)
    t.add_argument("--replay", help="answer from a record file (CSV/JSONL) or 'synthetic' "
                                    "instead of a GPU")
    t.add_argument("--replay-device", default="replay", help=argparse.SUPPRESS)
    t.add_argument("--quick", action="store_true",
                   help="instead of a study: time the 4 nearest shipped programs and the "
                        "heuristic's top 2 per backend (cuda_wgmma, triton) in one group per "
                        "shape and record the best in the tuned database (gemmforge.cli.quick)")
    t.add_argument("--report", default="tune", help="result name: <name>.csv and <name>.png "
                                                    "('' for none)")
    t.add_argument("--report-dir", help="folder for the report (default: the current directory)")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(run=cmd_tune, argv=None)
