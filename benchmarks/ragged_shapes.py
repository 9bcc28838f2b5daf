"""Draw off-grid training shapes for the learned rule's model (dispatch.ranker).

    python3 benchmarks/ragged_shapes.py --count 150 --seed 21 > benchmarks/shapes/ragged_train.txt
    python3 benchmarks/ragged_shapes.py --count 150 --skip 150 --seed 21 > benchmarks/shapes/ragged_train_b.txt

The grid's dimensions are powers of two from 64 to 16384, so a model trained on its
readings never sees a ragged token count (m = 77, 333) or a model's hidden size (3584,
18944). Shapes drawn here are shaped like projection layers without being any real
model's: m log-uniform in [16, 4096], n and k log-uniform multiples of 256 in [1024,
32768], 2mnk in [2e8, 1e11) (the class the learned rule serves off the grid), none on the
grid and none of benchmarks/shapes/off_grid_models.txt (the shapes the rule is judged on).
The same count, skip and seed write the same file; `--skip N` leaves out the first N shapes
the seed draws, so a second file continues the first without repeating it.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

from gemmforge.search.measure.shapes import shape_texts

JUDGED = Path(__file__).resolve().parent / "shapes" / "off_grid_models.txt"
FLOPS = (2e8, 1e11)


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def draw(count: int, seed: int) -> list[str]:
    """`count` distinct MxNxK texts (module doc), in drawing order."""
    rng = random.Random(seed)
    excluded = set(shape_texts("grid")) | set(shape_texts(f"@{JUDGED}"))
    out: list[str] = []
    while len(out) < count:
        m = round(_log_uniform(rng, 16, 4096))
        n, k = (256 * round(_log_uniform(rng, 4, 128)) for _ in range(2))
        text = f"{m}x{n}x{k}"
        if FLOPS[0] <= 2 * m * n * k < FLOPS[1] and text not in excluded and text not in out:
            out.append(text)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=150)
    ap.add_argument("--skip", type=int, default=0, help="leave out the first SKIP shapes drawn")
    ap.add_argument("--seed", type=int, default=21)
    args = ap.parse_args(argv)
    if args.count < 1 or args.skip < 0:
        ap.error("--count must be at least 1 and --skip at least 0")
    skip = f" --skip {args.skip}" if args.skip else ""
    print(f"# {args.count} off-grid training shapes for the learned rule's models, drawn by\n"
          f"# `python3 benchmarks/ragged_shapes.py --count {args.count}{skip} --seed {args.seed}`;"
          f" none on the grid or in off_grid_models.txt")
    print("\n".join(draw(args.skip + args.count, args.seed)[args.skip:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
