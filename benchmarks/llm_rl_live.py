"""Issue 24's live check: the trained LLM policy's proposals timed on the GPU beside the tuned
best (the shipped program at each held-out grid shape), instead of replayed.

    python3 benchmarks/llm_rl_live.py [--proposals benchmarks/programs/llm_rl_proposals.txt] \
        [--rounds 10] [--report-dir DIR] [--name llm_rl_live_h100]

The proposals file (written by benchmarks/llm_rl.py) holds, per held-out shape, a line
`# shape MxNxK LAYOUT ACC` and the policy's distinct legal programs there. Per shape, those
programs and the shipped program of this GPU's device class (dispatch.shipped: the grid
campaign's confirmed winner, the tuned best) are timed in one group beside cuBLAS (kernel
protocol, L2 warm, re-gated after timing: search.campaign.campaign_runners). Writes
<report-dir>/<name>.csv (role proposal or shipped, and the shape's best proposal over the
shipped program) and prints the geomean of the best proposal's cuBLAS ratio, of its fraction
of the shipped program's, and how many shapes come within 5 %.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

from gemmforge.ir.text import parse, parse_problem
from gemmforge.search.campaign.campaign import CONFIRM_BENCH
from gemmforge.search.measure.records import replace
from gemmforge.search.measure.report import write_csv

WITHIN = 0.95
DEFAULT = Path(__file__).with_name("programs") / "llm_rl_proposals.txt"


def read_proposals(path: Path) -> dict:
    """{Problem: [program texts]} of a proposals file, in file order."""
    out: dict = {}
    current = None
    for line in path.read_text().splitlines():
        if line.startswith("# shape "):
            current = parse_problem(line[len("# shape "):].strip())
            out[current] = []
        elif line.strip() and not line.startswith("#") and current is not None:
            out[current].append(str(parse(line)))
    return out


def main(argv=None) -> int:
    from gemmforge.search.campaign.campaign_runners import GridRunner
    from gemmforge.dispatch.devices import device_class
    from gemmforge.dispatch.shipped import shipped
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proposals", type=Path, default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--report-dir", type=Path, default=Path("."))
    ap.add_argument("--name", default="llm_rl_live_h100")
    args = ap.parse_args(argv)
    proposals = read_proposals(args.proposals)
    runner = GridRunner()
    try:
        cls = device_class(runner.device)
        reference = {p: shipped().exact(cls, p) for p in proposals}
        missing = [str(p) for p, row in reference.items() if row is None]
        if missing:
            sys.exit(f"no shipped {cls} program at {', '.join(missing)}")
        groups = [(p, list(dict.fromkeys([*texts, reference[p].program_text])))
                  for p, texts in proposals.items() if texts]
        landed: dict = {}
        runner.measure_groups(groups, replace(CONFIRM_BENCH, protocols=("kernel",),
                                              rounds=args.rounds),
                              lambda problem, rs: landed.__setitem__(problem, rs), seed=11)
    finally:
        runner.close()
    results, extra, best, fractions = [], [], [], []
    for problem, _ in groups:
        texts = proposals[problem]
        by_program = {r.program: r for r in landed[problem]}
        ref = by_program[reference[problem].program_text]
        good = [by_program[t].speedup for t in texts if t in by_program and by_program[t].ok]
        top = max(good, default=None)
        fraction = top / ref.speedup if top and ref.ok else None
        if top:
            best.append(top)
        if fraction:
            fractions.append(fraction)
        for r in landed[problem]:
            results.append(r)
            extra.append({"role": "proposal" if r.program in texts else "shipped",
                          "best_fraction_of_shipped": fraction})
    path = write_csv(results, args.name, args.report_dir, extra)

    def geo(xs):
        return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else float("nan")
    print(f"{len(groups)} shapes on {runner.device}: best proposal {geo(best):.3f}x cuBLAS, "
          f"{geo(fractions):.3f} of the shipped program; within 5 %: "
          f"{sum(f >= WITHIN for f in fractions)} of {len(fractions)}; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
