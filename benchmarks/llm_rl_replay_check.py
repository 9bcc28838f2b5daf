"""Issue 24: the replay reward's figures against live GPU readings of the same proposals.

    python3 benchmarks/llm_rl_replay_check.py --data search/data/measured_gpu.csv.gz \
        benchmarks/results/llm_rl_live_h100_v16.csv benchmarks/results/llm_rl_live_h100_v17.csv

Each live file (benchmarks/llm_rl_live.py) holds, per held-out shape, the policy's proposals
and the shipped program timed in one group beside cuBLAS. Every one of those programs is
replayed by two models of the data file `--data`: `held-out free` (search.learn.llm_tasks
.held_out_free: the held-out shapes' rows left out, as the training reward and the
evaluation's prompts see them: every proposal an estimate) and `full` (what
benchmarks/llm_rl.py scores the evaluation with: a program measured at the shape is
replayed). Per model it prints, over the proposals, the mean and RMS of
log(replayed / live cuBLAS ratio); and per shape, whether the proposal the replay ranks
first is the live best (within 2 % of it), and whether the replay's verdict "best proposal
within 5 % of the shipped program" (both replayed) matches the live one; and the error's
mean, median absolute value and RMS apart below and above 2mnk = 1e11 FLOPs (the stores
measured the small shapes densely, the large ones later and thinly). Writes the per-shape
rows to --out.
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
from pathlib import Path

from gemmforge.ir.text import parse, parse_problem
from gemmforge.search.learn.llm_tasks import held_out_free, split_shapes
from gemmforge.search.learn.replay_reward import DATA_FILE, ReplayReward, is_estimated

WITHIN = 0.95  # the live check's "within 5 % of the shipped program"
SAME_PICK = 0.98  # the replay's first pick counts as the live best within 2 % of it
LARGE_FLOPS = 1e11  # the size split of the errors


def live_groups(path: Path) -> dict:
    """{Problem: [shipped program text, its live ratio or None (failed), {proposal text:
    live ratio}]} of a live file."""
    out: dict = {}
    for row in csv.DictReader(path.open()):
        problem = parse_problem(f"{row['m']}x{row['n']}x{row['k']} {row['layout']} {row['acc']}")
        group = out.setdefault(problem, [None, None, {}])
        ok = row["status"] == "ok"
        ratio = float(row["paired_speedup"] or row["speedup"]) if ok else None
        if row["role"] == "shipped":
            group[:2] = str(parse(row["program"])), ratio
        elif ok:
            group[2][str(parse(row["program"]))] = ratio
    return out


def rms(errors: list[float]) -> float:
    return math.sqrt(statistics.fmean(e * e for e in errors))


def error_stats(errors: list[float]) -> str:
    """`mean / median abs / RMS (n)` of log errors, or `-` when there are none."""
    if not errors:
        return "-"
    return (f"{statistics.fmean(errors):+.3f} / {statistics.median(map(abs, errors)):.3f} / "
            f"{rms(errors):.3f} ({len(errors)})")


def check(model: ReplayReward, groups: dict) -> tuple[dict, list[dict]]:
    """(summary, per-shape rows) of one model against the live groups."""
    errors, rows, estimated, by_size = [], [], 0, {"below_1e11": [], "above_1e11": []}
    for problem, (shipped_text, shipped, proposals) in groups.items():
        if not proposals:
            continue
        results = {text: model.result(text, problem) for text in proposals}
        estimated += sum(is_estimated(r) for r in results.values())
        replayed = {text: r.speedup for text, r in results.items()}
        shape_errors = [math.log(replayed[t] / live) for t, live in proposals.items()]
        errors += shape_errors
        by_size["above_1e11" if problem.flops > LARGE_FLOPS else "below_1e11"] += shape_errors
        pick = max(replayed, key=replayed.get)
        live_best = max(proposals.values())
        row = {"problem": str(problem), "proposals": len(proposals),
               "replayed_best": round(max(replayed.values()), 4), "live_best": round(live_best, 4),
               "pick_is_live_best": proposals[pick] >= SAME_PICK * live_best}
        if shipped is not None:
            shipped_replayed = model.result(shipped_text, problem).speedup
            row["live_within"] = live_best >= WITHIN * shipped
            row["replayed_within"] = max(replayed.values()) >= WITHIN * shipped_replayed
        rows.append(row)
    judged = [r for r in rows if "live_within" in r]
    summary = {"proposals": len(errors), "estimated": estimated,
               "mean_log_error": statistics.fmean(errors),
               "rms_log_error": rms(errors),
               "shapes": len(rows), "pick_is_live_best": sum(r["pick_is_live_best"] for r in rows),
               "verdicts_agree": sum(r["live_within"] == r["replayed_within"] for r in judged),
               "live_within": sum(r["live_within"] for r in judged),
               "replayed_within": sum(r["replayed_within"] for r in judged), "judged": len(judged),
               **{size: error_stats(e) for size, e in by_size.items()}}
    return summary, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("live", nargs="+", type=Path)
    ap.add_argument("--data", type=Path, default=DATA_FILE)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    full = ReplayReward(args.data)
    models = {"held-out free": held_out_free(full, split_shapes(full)), "full": full}
    out_rows = []
    for path in args.live:
        groups = live_groups(path)
        for name, model in models.items():
            summary, rows = check(model, groups)
            print(f"{path.name} [{args.data.name}, {name}]: " + ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                for k, v in summary.items()))
            out_rows += [{"live": path.name, "data": str(args.data), "model": name, **r}
                         for r in rows]
    if args.out:
        with args.out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(
                k for r in out_rows for k in r)))
            writer.writeheader()
            writer.writerows(out_rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
