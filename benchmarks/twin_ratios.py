"""Each program of a results CSV against another measured in the same run: the geomean over
the shapes of the per-shape ratio of their cuBLAS speedups, with its range.

    python3 benchmarks/twin_ratios.py benchmarks/results/hopper_clusters_h100_v12.csv --against twin
    python3 benchmarks/twin_ratios.py benchmarks/results/hopper_wide_n_h100_v12.csv --against first
    python3 benchmarks/twin_ratios.py benchmarks/results/bk128_probe_h100_v16.csv \
        --pairs benchmarks/programs/bk128_probe_v16.txt

`--against first`: the file's first program. `--against twin`: the first other c1x1 program in
the file with the same backend, tile and warp specialization -- a clustered program's c1x1
twin, or a stream-K program's persistent one (list the twin first). `--pairs FILE`: the
programs of a program list file taken two at a time, the second of each pair against the
first (a probe that lists each variant after the program it changes).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

from gemmforge.ir import parse  # noqa: E402
from gemmforge.search.measure.report import read_csv  # noqa: E402


def twin_of(program: str, programs: list[str]) -> str | None:
    """The first c1x1 program in `programs` with `program`'s backend, tile and warp spec."""
    p = parse(program)
    for other in programs:
        q = parse(other)
        same = (q.backend, q.tile, q.warp_spec) == (p.backend, p.tile, p.warp_spec)
        if q.cluster.size == 1 and same and other != program:
            return other
    return None


def listed_pairs(path: Path) -> dict[str, str]:
    """Each second program of `path` (one program text per line, # comments) -> the one
    before it; an odd count is an error."""
    texts = [t.strip() for t in path.read_text().splitlines() if t.strip() and t[0] != "#"]
    if len(texts) % 2:
        raise ValueError(f"{path}: {len(texts)} programs, not pairs")
    return {str(parse(texts[i + 1])): str(parse(texts[i])) for i in range(0, len(texts), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--against", choices=["first", "twin"], default="first")
    ap.add_argument("--pairs", type=Path, help="program list: each second program against "
                    "the one before it (overrides --against)")
    ap.add_argument("--per-shape", action="store_true", help="each shape's ratio too")
    args = ap.parse_args()
    speedup: dict[tuple[str, str], float] = {}
    programs: list[str] = []
    for r in read_csv(args.csv):
        if r.ok and r.speedup:
            speedup[(f"{r.m}x{r.n}x{r.k}", r.program)] = r.speedup
            if r.program not in programs:
                programs.append(r.program)
    if not programs:
        print(f"no measured programs in {args.csv}", file=sys.stderr)
        return 2
    shapes = sorted({shape for shape, _ in speedup})
    try:
        pairs = listed_pairs(args.pairs) if args.pairs else None
    except (OSError, ValueError) as e:
        print(f"--pairs: {e}", file=sys.stderr)
        return 2
    print(f"{'geomean':>8} {'min':>6} {'max':>6} {'shapes':>6}  program  (against)")
    for program in programs:
        if pairs is not None:
            ref = pairs.get(program)
        else:
            ref = programs[0] if args.against == "first" else twin_of(program, programs)
        if ref is None or ref == program:
            continue
        ratios = {s: speedup[(s, program)] / speedup[(s, ref)] for s in shapes
                  if (s, program) in speedup and (s, ref) in speedup}
        if ratios:
            geo = math.exp(statistics.fmean(map(math.log, ratios.values())))
            print(f"{geo:8.3f} {min(ratios.values()):6.3f} {max(ratios.values()):6.3f} "
                  f"{len(ratios):6d}  {program}  ({ref})")
            if args.per_shape:
                for s, ratio in ratios.items():
                    print(f"{'':>30}{s:>18} {ratio:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
