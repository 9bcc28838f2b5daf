"""`gemmforge train-policy`: train the learned policy on measured rewards and checkpoint it.

    gemmforge train-policy --shapes sample:50:0 --steps 300 --backends triton
    gemmforge train-policy --shapes sample:50:0 --steps 300 --replay synthetic     # no GPU
    gemmforge tune --shapes 1000x4096x333 --policy learned                          # uses it

Trains policy.learned.LearnedPolicy by group-relative policy gradient with expert
iteration (see that module) on `--shapes`, measuring every program it tries once per shape:
on CUDA device `--device` through the harness (kernel protocol, builds in parallel), or
answered by search.measure.replay (`--replay synthetic` or a record file). Writes the checkpoint
to `--checkpoint` (default: the user cache path `gemmforge tune --policy learned` loads),
through a temporary file, so an interrupted run leaves the previous checkpoint whole.
Prints the mean reward of the model's own samples (log of the speedup over cuBLAS; a failed
program scores -5, an illegal one -6) over the first and last tenth of the steps.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from .common import SHAPES_HELP, UsageError


def _runner(args, replay: str | None):
    if replay:
        from ..search.measure.replay import ReplayRunner
        return ReplayRunner(None if replay == "synthetic" else replay, archs=(args.arch,))
    from ..search.measure.records import BenchSettings
    from ..search.measure.runners import HarnessRunner
    return HarnessRunner(args.device, settings=BenchSettings(protocols=("kernel",)))


def _checked(args):
    """(arch, problems, backends, replay, checkpoint path), every argument checked."""
    from .. import arguments
    from ..ir.program import Arch
    from ..policy.learned import default_checkpoint
    arguments.environment()
    arguments.at_least("--steps", args.steps)
    arguments.at_least("--device", args.device, 0)
    arch = Arch.parse(args.arch, "--arch")
    problems = arguments.shapes(args.shapes, args.layout, args.acc)
    backends = arguments.backends(args.backends)
    replay = arguments.replay(args.replay)
    path = Path(args.checkpoint) if args.checkpoint else default_checkpoint()
    if args.checkpoint is not None:
        arguments.output_file(args.checkpoint, "--checkpoint")
    else:
        arguments.output_folder(str(path.parent), "--checkpoint")
    if not replay:
        arguments.cuda_devices("train-policy", args.device + 1,
                               "; use --replay synthetic (or a record file) to train without one")
    return arch, problems, backends, replay, path


def cmd_train(args) -> int:
    from ..policy.learned import LearnedPolicy
    arch, problems, backends, replay, path = _checked(args)
    try:
        policy = LearnedPolicy(archs=(arch,), backends=backends, seed=args.seed)
    except (KeyError, ValueError) as e:
        raise UsageError(f"--backends: {e}") from None
    runner = _runner(args, replay)
    start = time.perf_counter()
    try:
        history = policy.train(problems, runner, steps=args.steps, arch=arch)
    finally:
        runner.close()
    policy.save(path)
    tenth = max(1, len(history) // 10)
    print(f"trained {args.steps} steps on {len(problems)} shapes in "
          f"{time.perf_counter() - start:.0f} s ({runner.device}); mean reward of the "
          f"model's samples: first tenth {statistics.fmean(history[:tenth]):.3f}, last "
          f"tenth {statistics.fmean(history[-tenth:]):.3f}\nwrote {path}")
    return 0


def add_to(sub) -> None:
    t = sub.add_parser("train-policy", help="train the learned policy and checkpoint it",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--shapes", required=True, help=SHAPES_HELP)
    t.add_argument("--steps", type=int, default=300, help="training steps")
    t.add_argument("--backends", help="comma list (default: every registered backend)")
    t.add_argument("--arch", default="sm_90a")
    t.add_argument("--layout", default="nn")
    t.add_argument("--acc", default="f32")
    t.add_argument("--replay", help="'synthetic' or a record file instead of a GPU")
    t.add_argument("--device", type=int, default=0, help="CUDA device index")
    t.add_argument("--checkpoint", help="where to write it (default: the user cache path)")
    t.add_argument("--seed", type=int, default=0)
    t.set_defaults(run=cmd_train)

