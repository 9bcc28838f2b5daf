"""Best ratio over cuBLAS vs candidates measured: the learned policy, optuna alone, random.

    python benchmarks/learned_vs_optuna.py                      # replayed (synthetic), CPU
    python benchmarks/learned_vs_optuna.py --replay FILE.csv    # recorded results
    python benchmarks/learned_vs_optuna.py --gpu                # measured on CUDA device 0

A sample of `--shapes` (default 100 grid shapes, seed 0) is split in half: the learned
policy trains (`--train-steps`, policy.learned) on the first half through the same
runner, and all methods are compared on the other half, each with `--candidates` (16)
measured programs per shape, `--batch` (4) at a time:
  learned  its proposals for the shape, each batch's results observed before the next
           (its weights frozen here: no held-out result trains it for another shape);
  optuna   search.tune.tuner with no policy (TPE alone, in memory; the same batch);
  random   uniformly random legal programs.
"best known" per shape is the best ratio any method found and, on replay, the best of
`--reference` extra random legal programs and of `--polish` random legal programs per
backend, each climbed by steepest ascent over single-knob changes until none helps (a
strong reference, independent of the methods; `--polish 0`: the random programs alone,
as before). Writes benchmarks/results/<--name>.csv (one row per method, shape and
candidate count; `fraction` against the best known, `fraction_random_ref` against the
methods and the random programs alone) and .png (mean fraction vs candidates), and
prints, at the last candidate, the mean fraction and how many shapes are within 5%.
"""
from __future__ import annotations

import argparse
import csv
import math
import random
import statistics
import sys
from pathlib import Path


from gemmforge.ir.knobs import KNOBS, assemble  # noqa: E402
from gemmforge.ir.program import Arch, IRError  # noqa: E402
from gemmforge.ir.space import Space, variant  # noqa: E402
from gemmforge.policy.random import RandomPolicy  # noqa: E402
from gemmforge.search.measure.shapes import parse_shapes  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

METHODS = ("learned", "optuna", "random")


def _ratios(results) -> list[float]:
    return [r.speedup if r.ok and r.speedup else 0.0 for r in results]


def _running_max(values: list[float], n: int) -> list[float]:
    out, best = [], 0.0
    for v in (values + [0.0] * n)[:n]:
        best = max(best, v)
        out.append(best)
    return out


def _learned_curve(runner, problem, policy, arch, args) -> list[float]:
    """The policy's proposals, `args.batch` at a time, each result observed before the
    next proposal."""
    from gemmforge.search.measure.env import reward
    ratios: list[float] = []
    while len(ratios) < args.candidates:
        programs = policy.propose(problem, arch, min(args.batch, args.candidates - len(ratios)))
        if not programs:
            break
        results = runner.evaluate(programs, problem)
        for program, result in zip(programs, results):
            policy.observe(problem, program, reward(result))
        ratios += _ratios(results)
    return ratios


def _optuna_curve(runner, problem, args) -> list[float]:
    from gemmforge.search.tune.tuner import Budget, Tuner, TuneSettings
    settings = TuneSettings(budget=Budget(args.candidates), batch=args.batch, seed=args.seed,
                            backends=args.backends)
    tuner = Tuner(runner, None, ":memory:", settings)
    tuner.tune(problem)
    trials = sorted((t for t in tuner.study(problem).trials if t.user_attrs.get("measured")),
                    key=lambda t: t.number)
    return [t.user_attrs["speedup"] or 0.0 for t in trials]


def _curves(runner, problem, policy, arch, args) -> dict[str, list[float]]:
    n = args.candidates
    random_policy = RandomPolicy([arch], args.backends, seed=args.seed)
    raw = {"learned": _learned_curve(runner, problem, policy, arch, args),
           "optuna": _optuna_curve(runner, problem, args),
           "random": _ratios(runner.evaluate(random_policy.propose(problem, arch, n), problem))}
    return {m: _running_max(v, n) for m, v in raw.items()}


def _reference(runner, problem, arch, args) -> tuple[float, float]:
    """(best of `args.reference` random legal programs, best after `args.polish` random
    legal starts per backend are climbed by steepest ascent) on replay."""
    if args.gpu or not args.reference:
        return 0.0, 0.0
    rng = random.Random(args.seed)
    space = Space.build([arch], args.backends, problem)
    programs = [space.sample_legal(problem, rng) for _ in range(args.reference)]
    best = max(_ratios(runner.evaluate(programs, problem)), default=0.0)
    polished = best
    for backend in space.backends if args.polish else ():
        one = Space.build([arch], [backend], problem)
        for _ in range(args.polish):
            try:
                start = one.sample_legal(problem, rng)
            except ValueError:  # a backend with hardly any legal program here
                break
            ratio = _ratios(runner.evaluate([start], problem))[0]
            polished = max(polished, _steepest(runner, problem, start, ratio))
    return best, polished


def _steepest(runner, problem, program, ratio: float) -> float:
    """Steepest ascent from `program` over single-knob changes (in its backend's variant)
    until none is better; returns the best ratio reached."""
    var = variant(program.backend, program.arch)
    while True:
        knobs = var.knobs_of(program)
        near = []
        for knob in (k for k in KNOBS if var.searched(k)):
            for value in var.choices(knob):
                try:
                    near.append(assemble(var.backend, var.arch, {**knobs, knob: value}))
                except (IRError, ValueError):
                    pass
        near = [p for p in dict.fromkeys(near) if p != program]
        if not near:
            return ratio
        best, best_program = max(zip(_ratios(runner.evaluate(near, problem)), near),
                                 key=lambda x: x[0])
        if best <= ratio:
            return ratio
        ratio, program = best, best_program


def _plot(rows: list[dict], path: Path, n: int) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for method in METHODS:
        ys = [statistics.mean(r["fraction"] for r in rows
                              if r["method"] == method and r["candidates"] == c)
              for c in range(1, n + 1)]
        ax.plot(range(1, n + 1), ys, marker="o", markersize=3, label=method)
    ax.axhline(0.95, color="gray", linestyle="--", linewidth=0.8, label="95% of best known")
    ax.set_xlabel("candidates measured per shape")
    ax.set_ylabel("best ratio / best known (mean over held-out shapes)")
    ax.set_title("learned policy vs optuna vs random (held-out shapes)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _runner(args):
    if args.gpu:
        from gemmforge.search.measure.records import BenchSettings
        from gemmforge.search.measure.runners import HarnessRunner
        return HarnessRunner(0, settings=BenchSettings(protocols=("kernel",)))
    from gemmforge.search.measure.replay import ReplayRunner
    return ReplayRunner(None if args.replay == "synthetic" else args.replay,
                        archs=(args.arch,))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from gemmforge.policy.learned import LearnedPolicy
    args.backends = tuple(args.backends.split(",")) if args.backends else None
    problems = parse_shapes(args.shapes)
    train, held = problems[: len(problems) // 2], problems[len(problems) // 2:]
    runner = _runner(args)
    arch = Arch(args.arch)
    try:
        policy = LearnedPolicy(archs=(arch,), backends=args.backends, seed=args.seed,
                               update_every=None)
        policy.train(train, runner, steps=args.train_steps)
        if args.checkpoint:
            policy.save(args.checkpoint)
        rows = []
        for problem in held:
            rows += _rows(runner, problem, policy, arch, args)
    finally:
        runner.close()
    _write(rows, args)
    return 0


def _rows(runner, problem, policy, arch, args) -> list[dict]:
    """The CSV rows of one held-out shape: every method's running best per candidate."""
    curves = _curves(runner, problem, policy, arch, args)
    found = max(c[-1] for c in curves.values())
    random_ref, polished = _reference(runner, problem, arch, args)
    known, known_random = max(found, polished) or 1.0, max(found, random_ref) or 1.0
    return [{"method": m, "shape": str(problem), "candidates": i + 1, "best_ratio": v,
             "best_known": known, "fraction": v / known,
             "fraction_random_ref": v / known_random, "device": runner.device}
            for m, c in curves.items() for i, v in enumerate(c)]


def _write(rows: list[dict], args) -> None:
    out = Path(args.out_dir) if args.out_dir else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = out / f"{args.name}.csv", out / f"{args.name}.png"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    _plot(rows, png_path, args.candidates)
    last = [r for r in rows if r["candidates"] == args.candidates]
    for column, what in (("fraction", "best known"), ("fraction_random_ref", "random ref")):
        for method in METHODS:
            fr = [r[column] for r in last if r["method"] == method]
            within = sum(f >= 0.95 for f in fr)
            geomean = math.exp(statistics.mean(math.log(max(f, 1e-9)) for f in fr))
            print(f"{method:8s} best/{what} at {args.candidates}: mean {statistics.mean(fr):.3f}"
                  f"  geomean {geomean:.3f}  within 5%: {within}/{len(fr)}")
    print(f"wrote {csv_path}\nwrote {png_path}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="sample:100:0", help="as gemmforge tune --shapes")
    p.add_argument("--candidates", type=int, default=16)
    p.add_argument("--batch", type=int, default=4,
                   help="candidates measured together (learned and optuna)")
    p.add_argument("--train-steps", type=int, default=300)
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--backends", help="comma list (default: every registered backend)")
    p.add_argument("--replay", default="synthetic", help="record file, or 'synthetic'")
    p.add_argument("--gpu", action="store_true", help="measure on CUDA device 0 instead")
    p.add_argument("--reference", type=int, default=300,
                   help="extra random programs per shape for 'best known' (replay only)")
    p.add_argument("--polish", type=int, default=3,
                   help="random legal starts per backend climbed for 'best known' (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", help="save the trained policy here")
    p.add_argument("--name", default="learned_vs_optuna_replay")
    p.add_argument("--out-dir", help="default benchmarks/results")
    return p


if __name__ == "__main__":
    sys.exit(main())
