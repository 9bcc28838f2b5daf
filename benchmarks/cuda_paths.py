"""Issue 2's benchmark: the three cuda paths against cuBLAS, kernel time, same run.

    python3 benchmarks/cuda_paths.py [--quick] [--name cuda_paths]

For each shape (spread over the grid's FLOP decades) every program below is measured with
search.measure.env.evaluate (correctness gate first, then CUDA-graph kernel time interleaved with
cuBLAS NN/TN in the same process); the table shows, per path, the best program's kernel
time over cuBLAS's. The programs are sm_80 code (mma.sync, wmma, FMA): on a Hopper GPU they
are built for sm_90 from sm_80 features (compute_80 -> sm_90), which is how an A100 program
runs there. Results: benchmarks/results/<name>.csv and .png.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

from gemmforge.ir import Problem, parse  # noqa: E402
from gemmforge.search.measure.env import evaluate  # noqa: E402
from gemmforge.search.measure.measure import BuilderPool, DeviceRunner  # noqa: E402
from gemmforge.search.measure.records import BenchSettings  # noqa: E402
from gemmforge.search.measure.report import write_report  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

PROGRAMS = {
    "cuda_simt": ["cuda_simt sm_80 128x128x16 w4x2 s2 swpad row/8 pred k1 dp c1x1 nows direct",
                  "cuda_simt sm_80 64x64x16 w2x2 s2 swpad row/8 pred k1 dp c1x1 nows direct"],
    "cuda_wmma": ["cuda_wmma sm_80 128x128x32 w2x2 s3 swpad row/8 pred k1 dp c1x1 nows direct",
                  "cuda_wmma sm_80 64x64x32 w2x2 s4 swpad row/8 pred k1 dp c1x1 nows direct"],
    "cuda_mma": ["cuda_mma sm_80 128x256x32 w2x4 s3 sw128 row/8 pred k1 dp c1x1 nows direct",
                 "cuda_mma sm_80 128x256x32 w2x4 s4 swpad row/8 pred k1 dp c1x1 nows direct",
                 "cuda_mma sm_80 128x256x64 w2x4 s3 sw128 row/8 pred k1 dp c1x1 nows direct",
                 "cuda_mma sm_80 256x128x32 w4x2 s4 sw128 row/8 pred k1 dp c1x1 nows direct",
                 "cuda_mma sm_80 128x128x32 w2x2 s4 sw128 row/8 pred k1 dp c1x1 nows direct",
                 "cuda_mma sm_80 128x128x64 w2x2 s3 sw128 row/8 pred k1 dp c1x1 nows direct",
                 "cuda_mma sm_80 64x64x64 w2x2 s4 sw128 row/8 pred k1 dp c1x1 nows direct"],
}
SHAPES = ["256x256x256", "1024x1024x1024", "64x4096x8192", "8192x64x1024", "2048x2048x2048",
          "512x12288x2048", "4096x4096x4096", "8192x8192x8192", "16384x4096x4096"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", default="cuda_paths")
    ap.add_argument("--quick", action="store_true", help="3 shapes, kernel protocol only")
    args = ap.parse_args()
    shapes = SHAPES[::4] if args.quick else SHAPES
    settings = BenchSettings(protocols=("kernel", "call"), rounds=5)
    results = []
    with BuilderPool() as builders, DeviceRunner(devices=[0]) as runner:
        for shape in shapes:
            m, n, k = map(int, shape.split("x"))
            programs = [parse(t) for texts in PROGRAMS.values() for t in texts]
            results += evaluate(programs, Problem(m, n, k), device_runner=runner,
                                builders=builders, settings=settings)
    csv_path, png_path = write_report(results, args.name, RESULTS)
    print(f"wrote {csv_path} and {png_path}")
    print(table(results))
    return 0


def table(results) -> str:
    """Per shape and path: the best program's cuBLAS/kernel ratio and TFLOP/s."""
    best: dict[tuple, object] = {}
    for r in results:
        if not r.ok:
            continue
        key = (r.m, r.n, r.k, parse(r.program).backend)
        if key not in best or r.kernel_us < best[key].kernel_us:
            best[key] = r
    lines = [f"{'shape':>18} {'cuBLAS us':>10} " + " ".join(f"{p:>22}" for p in PROGRAMS)]
    for (m, n, k) in sorted({key[:3] for key in best}, key=lambda s: s[0] * s[1] * s[2]):
        row = [f"{f'{m}x{n}x{k}':>18}"]
        ref = next(best[key] for key in best if key[:3] == (m, n, k))
        row.append(f"{ref.cublas_us:10.1f}")
        for path in PROGRAMS:
            r = best.get((m, n, k, path))
            cell = (f"{r.cublas_us / r.kernel_us:5.2f}x {2 * m * n * k / r.kernel_us / 1e6:6.0f} TF"
                    if r else "failed")
            row.append(f"{cell:>22}")
        lines.append(" ".join(row))
    failed = [r for r in results if not r.ok]
    lines += [f"FAILED {r.program} {r.m}x{r.n}x{r.k}: {r.kind}: {r.message[:200]}" for r in failed]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
