"""Evaluate the LLM policy before and after GRPO, and random legal sampling, on held-out shapes.

    python benchmarks/llm_rl.py --model .venv/models/smollm2-135m --run runs/llm-rl \\
        [--shapes 30] [--samples 8] [--stages base,trained,trained_grammar,random]

For each of the held-out grid shapes of search.learn.llm_tasks.split_shapes (never in training:
not prompted, not in the training reward model), one contrastive prompt (the same for
every stage), `--samples` completions per stage, each parsed and verified
(policy.llm.parse_reply) and scored by the replay reward with every measurement (the
held-out shapes' own included: replayed where the GPU measured the program, estimated
otherwise). `base` and `trained` sample freely; `base_grammar` and `trained_grammar`
sample the same models with every token constrained to ir.grammar's program text
(policy.constrained: how train-llm and `tune --policy llm --llm-reply text` sample); each completion is counted as it came, none resampled. A stage
name ending in `_rounds` (`trained_grammar_rounds`) samples in two rounds of half, the
second prompt listing the first round's legal programs as already proposed, as `tune`
proposes. `random` draws `--samples` legal programs from ir.space (sm_90a) instead.

Writes, under --out (default the current folder; a stage evaluated again replaces its rows,
the other stages' rows stay):
  llm_rl.csv          one row per stage: legal_fraction, distinct_fraction (distinct legal
                      programs / completions), best_of_8_ratio (geomean over shapes of the
                      best replayed cuBLAS/kernel ratio of the samples; no legal sample
                      counts as e^-5), within_5pct_of_tuned (shapes whose best is >= 0.95 x
                      the best measured program), within_5pct_unlisted (the same, counting
                      only samples that are not one of the prompt's examples),
                      estimated_fraction, seconds_per_shape
  llm_rl_shapes.csv   one row per (stage, shape), with why the illegal replies failed
  llm_rl_curve.png    mean reward and legal fraction against training step (RUN/steps.csv)
and, for the trained_grammar stage (else the trained one), --proposals (default
llm_rl_proposals.txt):
each held-out shape's distinct legal proposals, a `# shape MxNxK nn f32` line before
them, for a live measurement on the GPU (benchmarks/README.md, llm_rl, has the command).
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from gemmforge.policy.prompts import TEXT_REPLY_TOKENS
from gemmforge.search.learn.llm_eval import (
    EVAL_SEED, SHAPE_FIELDS, STAGE_FIELDS, evaluate_stage, merged, moving_mean, with_lineages,
    write_csv, write_proposals)
from gemmforge.search.learn.llm_tasks import held_out_free, make_tasks, prompt_pool, split_shapes
from gemmforge.search.learn.replay_reward import ReplayReward

CURVE_WINDOW = 5


def plot_curve(steps_csv: Path, png: Path, marks: list[tuple[float, str]] = ()) -> None:
    """Mean reward, legal and distinct fractions against the training step; `marks`:
    (step, label) drawn as vertical lines (where the training changed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with steps_csv.open() as f:
        rows = [r for r in csv.DictReader(f) if r["reward_mean"]]
    steps = [int(r["step"]) for r in rows]
    rewards = [float(r["reward_mean"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, rewards, ".", alpha=0.5, label="mean reward of the step's completions")
    ax.plot(steps, moving_mean(rewards, CURVE_WINDOW), "-",
            label=f"its mean over {CURVE_WINDOW} steps")
    ax.set_xlabel("GRPO step (one prompt, its group of completions)")
    ax.set_ylabel("mean replayed reward (log cuBLAS/kernel; -5 illegal)")
    ax2 = ax.twinx()
    ax2.plot(steps, [float(r["legal_fraction"]) for r in rows], "g.--", alpha=0.6,
             label="legal fraction (a copy of a listed program counts as not legal)")
    ax2.plot(steps, moving_mean([float(r["distinct_fraction"]) for r in rows], CURVE_WINDOW),
             "m-", alpha=0.6, label=f"distinct legal fraction, mean over {CURVE_WINDOW} steps")
    for step, label in marks:
        ax.axvline(step, color="k", lw=0.8, ls=":")
        ax.text(step, ax.get_ylim()[0], f" {label}", fontsize=7, va="bottom")
    ax2.set_ylabel("fraction of the step's completions")
    ax2.set_ylim(0, 1)
    ax.set_title("SmolLM2-135M + LoRA, GRPO on replayed H100 measurements")
    fig.legend(loc="upper left", bbox_to_anchor=(0.1, 0.88), fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="Hugging Face model folder (the base)")
    ap.add_argument("--run", required=True, help="gemmforge train-llm --output folder")
    ap.add_argument("--shapes", type=int, default=30, help="held-out shapes to use (<= 30)")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=TEXT_REPLY_TOKENS,
                    help="as train-llm's completion limit")
    ap.add_argument("--stages", default="base,trained,trained_grammar,random",
                    help="of base, trained, base_grammar, trained_grammar, random, and "
                         "either LLM stage with _rounds")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--proposals", type=Path,
                    default=Path("llm_rl_proposals.txt"))
    ap.add_argument("--proposing", default=None, metavar="STAGE",
                    help="the stage whose proposals --proposals gets (default: trained_grammar "
                         "if run, else trained), e.g. trained_grammar_rounds")
    ap.add_argument("--mark", action="append", default=[], metavar="STEP:LABEL",
                    help="a vertical line on the curve (e.g. 45.5:grammar)")
    args = ap.parse_args(argv)
    full = ReplayReward()
    split = split_shapes(full)
    held = split.held_out[:: max(1, len(split.held_out) // args.shapes)][:args.shapes]
    prompt_model = held_out_free(full, split)
    pool = prompt_pool()
    tasks = with_lineages(make_tasks(held, prompt_model, seed=EVAL_SEED, pool=pool), held,
                          prompt_model, EVAL_SEED, pool)
    stages, shapes, done = [], [], set()
    order = args.stages.split(",")
    proposing = args.proposing or ("trained_grammar" if "trained_grammar" in order else "trained")
    for stage in order:
        row, rows = evaluate_stage(stage, tasks, full, args)
        if stage == proposing:
            write_proposals(args.proposals, rows, row["adapter"], stage)
        stages.append(row)
        shapes.extend(rows)
        done.add(stage)
        for name, fields, new in (("llm_rl.csv", STAGE_FIELDS, stages),
                                  ("llm_rl_shapes.csv", SHAPE_FIELDS, shapes)):
            write_csv(args.out / name, fields, merged(args.out / name, list(new), done))
    steps = Path(args.run) / "steps.csv"
    if steps.exists():
        plot_curve(steps, args.out / "llm_rl_curve.png",
                   [(float(m.split(":", 1)[0]), m.split(":", 1)[1]) for m in args.mark])
    for row in stages:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
